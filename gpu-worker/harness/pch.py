"""The node's precompiled headers of torch/extension.h, built by the worker (never by a
candidate) and read by every candidate's load_inline builds.

A load_inline build compiles main.cpp, which torch starts with `#include <torch/extension.h>`:
most of that translation unit's time is the header. GCC looks for `<dir>/torch/extension.h.gch`
in each include directory before the header itself and uses it only when it was made by the
same compiler with the same flags (otherwise it goes on to the real header), so a directory of
such a file put first on the include path makes the compile faster and changes nothing it means.

This script makes one variant per set of flags a candidate may ask for (`extra_cflags`), with
the exact command line torch writes for main.cpp (from torch's own ninja writer), less the
extension's name, which the header does not use. Each variant is a directory of its own,
renamed into place whole, holding `torch/extension.h.gch` and `variant.json` (the flags it was
made for, for builds.pch_dir to match). Run by the worker at start:

    python pch.py ROOT [--with-cuda] [--cflags "-O3"]...

Owns: the variant's command line (pch_command), its directory name (variant_name), the build.
Imports nothing of the harness (it runs outside any task).
"""
import argparse
import hashlib
import inspect
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time

# What a variant's directory name is derived from; bump when the command line changes.
PCH_PROTOCOL = "pch-v1"
VARIANT_FILE = "variant.json"
HEADER = os.path.join("torch", "extension.h")
# A candidate's extra_cflags a variant may be made for: flags that only set optimisation,
# warnings, the standard or a macro. Anything else (a plugin, an -include, a response file, a
# directory) is never passed to the worker's compiler.
ALLOWED_PREFIXES = ("-O", "-std=", "-W", "-w", "-g", "-D", "-U", "-ffast-math", "-fno-fast-math",
                    "-funroll-loops", "-fopenmp", "-march=native", "-mtune=native", "-DNDEBUG")
BUILD_TIMEOUT_S = 600


def allowed_cflags(cflags):
    """Pure: whether a variant may be made for `cflags` (each flag alone, no spaces, quotes,
    paths, response files or commas: -Wp,/-Wa, pass options on to other tools)."""
    for flag in cflags:
        if not isinstance(flag, str) or not flag.startswith(ALLOWED_PREFIXES):
            return False
        if any(c in flag for c in " \t\n'\"\\/@$`;|&<>,"):
            return False
    return True


def main_cpp_flags(torch_cpp, cflags, with_cuda):
    """The compiler, cflags and post_cflags torch's ninja writer gives main.cpp of a load_inline
    extension with `cflags` as its extra_cflags, read back from the build.ninja it writes."""
    with tempfile.TemporaryDirectory() as tmp:
        wanted = {
            "path": os.path.join(tmp, "build.ninja"), "name": "crucible_pch",
            "sources": [os.path.join(tmp, "main.cpp")], "extra_cflags": list(cflags),
            "extra_cuda_cflags": [], "extra_sycl_cflags": [], "extra_ldflags": [],
            "extra_include_paths": [], "with_cuda": with_cuda, "with_sycl": False,
            "is_standalone": False,
        }
        writer = torch_cpp._write_ninja_file_to_build_library
        names = inspect.signature(writer).parameters
        writer(**{k: v for k, v in wanted.items() if k in names})
        with open(wanted["path"]) as f:
            lines = dict(line.split(" = ", 1) for line in f.read().splitlines() if " = " in line
                         and not line.startswith(" "))
    return lines["cxx"], shlex.split(lines.get("cflags", "")), shlex.split(
        lines.get("post_cflags", ""))


def pch_command(cxx, flags, header, out):
    """Pure: the command that makes `out` from `header` with main.cpp's flags, less the
    extension's name (the header does not read it; GCC checks only the macros a header uses)."""
    kept = [f for f in flags if not f.startswith("-DTORCH_EXTENSION_NAME=")]
    return [cxx, "-x", "c++-header", header, "-o", out] + kept


def variant_name(compiler_version, command):
    """Pure: a variant's directory name: the protocol, the compiler and the whole command."""
    blob = json.dumps([PCH_PROTOCOL, compiler_version, command])
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


def build_variant(root, cflags, with_cuda):
    """Makes the variant for `cflags` under `root` unless it is there: returns its directory."""
    import torch
    import torch.utils.cpp_extension as torch_cpp

    cxx, flags, post = main_cpp_flags(torch_cpp, cflags, with_cuda)
    header = os.path.join(os.path.dirname(torch.__file__), "include", HEADER)
    version = subprocess.run([cxx, "--version"], capture_output=True, text=True,
                             timeout=60).stdout.splitlines()[:1]
    probe = pch_command(cxx, flags + post, header, os.path.join("OUT", HEADER + ".gch"))
    final = os.path.join(root, variant_name(version, probe))
    if os.path.isfile(os.path.join(final, VARIANT_FILE)):
        return final, 0.0
    tmp = tempfile.mkdtemp(prefix=".building-", dir=root)
    os.makedirs(os.path.join(tmp, "torch"))
    command = pch_command(cxx, flags + post, header, os.path.join(tmp, HEADER + ".gch"))
    t0 = time.monotonic()
    subprocess.run(command, check=True, capture_output=True, timeout=BUILD_TIMEOUT_S)
    took = time.monotonic() - t0
    with open(os.path.join(tmp, VARIANT_FILE), "w") as f:
        json.dump({"cflags": list(cflags), "with_cuda": bool(with_cuda), "compiler": version,
                   "torch": torch.__version__, "seconds": round(took, 1)}, f)
    for dirpath, dirnames, filenames in os.walk(tmp):
        os.chmod(dirpath, 0o755)
        for name in filenames:
            os.chmod(os.path.join(dirpath, name), 0o644)
    try:
        os.rename(tmp, final)
    except OSError:   # another worker of this node made it first
        subprocess.run(["rm", "-rf", "--", tmp], check=False)
    return final, took


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root")
    parser.add_argument("--with-cuda", action="store_true")
    parser.add_argument("--cflags", action="append", default=[],
                        help="one variant's extra_cflags, space-separated ('' for none)")
    args = parser.parse_args(argv)
    os.makedirs(args.root, mode=0o755, exist_ok=True)
    failed = 0
    for spec in args.cflags or [""]:
        cflags = spec.split()
        if not allowed_cflags(cflags):
            print(json.dumps({"cflags": cflags, "error": "flags not allowed"}), flush=True)
            failed += 1
            continue
        try:
            where, took = build_variant(args.root, cflags, args.with_cuda)
            print(json.dumps({"cflags": cflags, "dir": where, "seconds": round(took, 1)}),
                  flush=True)
        except (subprocess.SubprocessError, OSError, KeyError) as e:
            print(json.dumps({"cflags": cflags, "error": str(e)[:2000]}), flush=True)
            failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
