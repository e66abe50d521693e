"""The node's precompiled headers of torch/extension.h (gpu-worker/harness/pch.py, made by the
worker; builds.py's with_pch, used by a candidate's load_inline): which flags a variant may be
made for, its command line, the match of a build's arguments to a variant, and, on this
machine's real compiler and torch, that GCC takes the header made by pch.py when it compiles
a load_inline main.cpp with the flags torch writes for it (`-H` prints `! <file>.gch` for a
precompiled header it used). Run by scripts/test.sh; exit 1 on the first failure."""
import importlib.util
import json
import os
import shlex
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HARNESS_DIR = os.path.join(REPO, "gpu-worker", "harness")

entry = importlib.util.spec_from_file_location("crucible_harness_entry",
                                               os.path.join(HARNESS_DIR, "harness.py"))
entry.loader.exec_module(importlib.util.module_from_spec(entry))
spec = importlib.util.spec_from_file_location("crucible_pch_builder",
                                              os.path.join(HARNESS_DIR, "pch.py"))
pch = importlib.util.module_from_spec(spec)
spec.loader.exec_module(pch)

from crucible_builds import pch_variants, with_pch  # noqa: E402

# As a task child finds its tools (the interpreter's bin directory first).
os.environ["PATH"] = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
checks = 0


def check(cond, what):
    global checks
    checks += 1
    if not cond:
        print(f"check_pch: FAILED: {what}")
        sys.exit(1)


# Which flags the worker's compiler may be given.
for ok in ([], ["-O3"], ["-O2", "-DNDEBUG"], ["-std=c++20", "-Wall"], ["-ffast-math"]):
    check(pch.allowed_cflags(ok), f"{ok} allowed")
for bad in (["-include", "x.h"], ["-fplugin=/tmp/p.so"], ["@flags"], ["-Wp,-imacros,x"],
            ["-O3 -fplugin=x"], ["-I/tmp"], ["-B/tmp"], [3]):
    check(not pch.allowed_cflags(bad), f"{bad} refused")

# The command: main.cpp's flags, less the extension's name.
command = pch.pch_command("c++", ["-DTORCH_EXTENSION_NAME=ext", "-DA", "-O3"], "h", "o")
check(command == ["c++", "-x", "c++-header", "h", "-o", "o", "-DA", "-O3"], f"command {command}")
check(pch.variant_name(["g++ 12"], command) == pch.variant_name(["g++ 12"], list(command)),
      "a variant's name is its command's")
check(pch.variant_name(["g++ 12"], command) != pch.variant_name(["g++ 13"], command),
      "another compiler, another variant")

# A build's arguments against the variants.
variants = [((), True, "/pch/plain"), (("-O3",), True, "/pch/o3"), (("-O3",), False, "/pch/cpu")]
cuda = {"name": "e", "cuda_sources": ["k"], "extra_cflags": ["-O3 "], "with_cuda": None}
got = with_pch(cuda, variants)
check(got["extra_include_paths"] == ["/pch/o3"], f"-O3 with CUDA sources: {got}")
check("extra_include_paths" not in cuda, "the candidate's arguments are not changed")
check(with_pch(dict(cuda, cuda_sources=None), variants)["extra_include_paths"] == ["/pch/cpu"],
      "no CUDA sources: the variant made without CUDA")
check(with_pch(dict(cuda, extra_cflags=None), variants)["extra_include_paths"] == ["/pch/plain"],
      "no flags: the plain variant")
for other, what in [(dict(cuda, extra_cflags=["-O2"]), "flags no variant was made for"),
                    (dict(cuda, extra_include_paths=["inc"]), "include directories of its own"),
                    (dict(cuda, extra_cflags="-O3"), "flags given as one string")]:
    check(with_pch(other, variants) is other, f"{what}: left alone")
check(with_pch(cuda, []) is cuda, "no variants: left alone")

# The variants a worker made, as the harness lists them.
with tempfile.TemporaryDirectory() as root:
    for name, described in [("a", {"cflags": [], "with_cuda": True}),
                            ("b", {"cflags": ["-O3"], "with_cuda": False}),
                            (".building-c", {"cflags": ["-O2"], "with_cuda": True}),
                            ("d", "not a variant")]:
        os.makedirs(os.path.join(root, name))
        with open(os.path.join(root, name, "variant.json"), "w") as f:
            json.dump(described, f)
    os.makedirs(os.path.join(root, "e"))
    listed = pch_variants(root)
    check(listed == [((), True, os.path.join(root, "a")), (("-O3",), False, os.path.join(root, "b"))],
          f"finished variants only: {listed}")
check(pch_variants(None) == [] and pch_variants("/no/such/dir") == [], "no directory: none")

# The real thing: pch.py's header is the one GCC takes for a load_inline main.cpp.
import torch  # noqa: E402
import torch.utils.cpp_extension as torch_cpp  # noqa: E402

with tempfile.TemporaryDirectory() as tmp:
    root = os.path.join(tmp, "pch")
    os.makedirs(root)
    check(pch.main([root, "--cflags=-O3", "--cflags=-include x.h"]) == 1,
          "a refused variant fails the run, the others are made")
    [(_, _, variant)] = pch_variants(root)
    check(os.path.isfile(os.path.join(variant, "torch", "extension.h.gch")), "the header made")
    check(pch.main([root, "--cflags=-O3"]) == 0, "made once: a second run finds it")
    arguments = with_pch({"extra_cflags": ["-O3"], "cuda_sources": None}, pch_variants(root))
    main_cpp = os.path.join(tmp, "main.cpp")
    with open(main_cpp, "w") as f:
        f.write("#include <torch/extension.h>\n"
                "torch::Tensor twice(torch::Tensor x) { return x * 2; }\n")
    cxx, flags, post = pch.main_cpp_flags(torch_cpp, ["-O3"], False)
    # The flags torch writes once the variant is on the include path (it puts -I first).
    flags = [f"-I{p}" for p in arguments["extra_include_paths"]] + flags
    compiled = subprocess.run([cxx, "-H", "-fsyntax-only"]
                              + flags + [main_cpp] + post, capture_output=True, text=True)
    used = [line for line in compiled.stderr.splitlines() if line.startswith("! ")]
    check(compiled.returncode == 0 and used and used[0].endswith("extension.h.gch"),
          f"GCC took the precompiled header: rc {compiled.returncode}, "
          f"{used[:1] or compiled.stderr[-2000:]}; flags {shlex.join(flags[:3])}")

print(f"pch: {checks} checks passed")
