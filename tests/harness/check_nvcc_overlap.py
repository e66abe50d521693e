"""nvcc_overlap.py against the real nvcc ($CRUCIBLE_NVCC; scripts/env.sh's ensure_nvcc finds or
installs one): for sources that compile, warn, or fail in the preprocessor, the host front end
or the device front end, with and without -MD, the same exit status, the same bytes on stdout
and stderr, the same dependency file and the same symbols as nvcc itself; a kernel in an
anonymous namespace registered under the module id both front ends read; what it refuses
(relocatable device code) or cannot plan (a --dryrun of another shape) handed to nvcc with
the same arguments; the pure parts on their own. With a GPU (the GPU
job), an extension built through it by torch's load_inline runs and gives the right numbers.
Run by scripts/test.sh; exit 1 on the first failure."""
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HARNESS = os.path.join(REPO, "gpu-worker", "harness", "harness.py")
entry = importlib.util.spec_from_file_location("crucible_harness_entry", HARNESS)
entry.loader.exec_module(importlib.util.module_from_spec(entry))
import crucible_nvcc_overlap as overlap  # noqa: E402
from crucible_builds import use_nvcc_overlap  # noqa: E402

OVERLAP = os.path.join(REPO, "gpu-worker", "harness", "nvcc_overlap.py")
NVCC = os.environ.get("CRUCIBLE_NVCC")
MODULE_ID_HASH = re.compile(r"_[0-9a-f]{8}_(\d+_)")

SOURCES = {
    "plain.cu": "__global__ void add_one(float* x, int n) {\n"
                "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) x[i] += 1.f;\n}\n"
                "void launch(float* x, int n) { add_one<<<(n + 255) / 256, 256>>>(x, n); }\n",
    "template.cu": "#include <cstdio>\ntemplate <int B> __global__ void scale(float* x) {\n"
                   "  x[threadIdx.x] *= B;\n}\nvoid run(float* x) { scale<4><<<1, 32>>>(x);"
                   " scale<8><<<1, 32>>>(x); std::printf(\"ok\\n\"); }\n",
    "anon.cu": "namespace { __global__ void hidden(int* x) { x[0] = 7; } }\n"
               "void run(int* x) { hidden<<<1, 1>>>(x); }\n",
    "warns.cu": "__global__ void k(int* x) { int unused; x[0] = 1; }\n"
                "void h() { int w; k<<<1, 1>>>(0); }\n",
    "host_error.cu": "void h() { not_declared(); }\n",
    "device_error.cu": "__global__ void k(int* x) { x[0] = 1 }\nvoid h() { k<<<1, 1>>>(0); }\n",
    "device_only_error.cu": "__global__ void k(float* x) {\n#ifdef __CUDA_ARCH__\n"
                            "  device_side_missing(x);\n#endif\n}\n",
    "missing_header.cu": "#include \"no_such_header.h\"\n",
}


def check(cond, what):
    if not cond:
        print(f"check_nvcc_overlap: FAILED: {what}")
        sys.exit(1)


def pure_parts():
    check(overlap.refuses(["-O3"]), "no -c: not a compile")
    check(not overlap.refuses(["-MD", "-MF", "x.d", "-O3", "-c", "a.cu", "-o", "a.o"]), "torch's")
    for flag in ("-rdc=true", "--relocatable-device-code=true", "-dc", "--keep", "--time",
                 "-E", "-M", "-MMD", "--threads", "-dlto"):
        check(overlap.refuses(["-c", "a.cu", "-o", "a.o", flag]), f"refuses {flag}")
    marked = (b'# 1 "a.cu"\n# 1 "<built-in>"\n# 1 "/inc/x.h" 1\nint x;\n# 2 "a.cu" 2\n'
              b'# 1 "/inc/dir with \\"q\\".h" 1\n')
    device = b'# 1 "a.cu"\n# 1 "/inc/device_only.h" 1\n'
    check(overlap.dependencies([device, marked], "a.o")
          == 'a.o : a.cu \\\n    /inc/device_only.h \\\n    /inc/x.h \\\n    /inc/dir with "q".h\n',
          "the dependency file: every file of both preprocessings once, in order")
    one, two = overlap.module_id("/t/a/cuda.cu"), overlap.module_id("/t/b/cuda.cu")
    check(re.fullmatch(r"_[0-9a-f]{8}_7_cuda_cu_[0-9a-f]{8}", one), f"nvcc's shape: {one}")
    check(one != two, "distinct files, distinct ids")
    shaped = ("#$ CICC_PATH=/n/nvvm/bin\n#$ gcc -E a.cu -o /s/a.cpp4.ii\n"
              "#$ cudafe++ --gen_module_id_file --module_id_file_name /s/a.module_id"
              " --gen_c_file_name /s/a.cudafe1.cpp /s/a.cpp4.ii\n"
              "#$ gcc -D__CUDA_ARCH__=900 -E a.cu -o /s/a.cpp1.ii\n"
              "#$ \"$CICC_PATH/cicc\" --module_id_file_name /s/a.module_id /s/a.cpp1.ii -o /s/a.ptx\n"
              "#$ ptxas /s/a.ptx -o /s/a.cubin\n#$ gcc -c /s/a.cudafe1.cpp -o a.o\n")
    plan = overlap.parse_plan(shaped)
    check(plan is not None, "a plain plan parses")
    check([s.tool for s in plan.host] == ["gcc", "cudafe++"]
          and "--gen_module_id_file" not in plan.host[1].argv, "host chain reads the id")
    check([s.argv[0] for s in plan.device][1] == "/n/nvvm/bin/cicc", "$CICC_PATH expanded")
    check(plan.final.argv[-1] == "a.o" and plan.depfile is None, "the host compile last")
    for broken in (shaped.replace("--gen_module_id_file ", ""),
                   shaped.replace("ptxas /s/a.ptx", "ptxas /s/a.ptx | tee x"),
                   shaped.replace("$CICC_PATH", "$UNKNOWN"),
                   shaped.replace("#$ ptxas", "#$ nvlink"),
                   shaped + "#$ cudafe++ --gen_module_id_file x\n"):
        check(overlap.parse_plan(broken) is None, f"an unknown shape is refused: {broken!r}")
    env = {}
    cuda = tempfile.mkdtemp()
    os.makedirs(os.path.join(cuda, "bin"))
    open(os.path.join(cuda, "bin", "nvcc"), "w").close()
    value = use_nvcc_overlap(env, "/py/python", cuda)
    check(value and value.endswith(os.path.join(cuda, "bin", "nvcc")) and "nvcc_overlap.py" in value,
          f"PYTORCH_NVCC points at the overlap: {value}")
    kept = {"PYTORCH_NVCC": "ccache nvcc"}
    check(use_nvcc_overlap(kept, "/py/python", cuda) == "ccache nvcc", "the operator's is kept")
    check(use_nvcc_overlap({}, "/py/python", None) is None, "no toolkit: nothing set")
    for told, allowed in ((None, True), (str(32 << 30), True), (str(8 << 30), True),
                          (str(6 << 30), False), ("lots", False)):
        environ = {} if told is None else {overlap.TASK_MEMORY_VAR: told}
        check(overlap.memory_allows(environ) == allowed, f"memory bound {told}: {allowed}")
        check((use_nvcc_overlap(environ, "/py/python", cuda) is not None) == allowed,
              f"PYTORCH_NVCC set under a bound of {told}: {allowed}")
    check(use_nvcc_overlap({}, "/py/python", cuda, os.path.join(cuda, "nvcc_overlap.py")) is None,
          "a script the process cannot read (the template's copy, say): nothing set")
    shutil.rmtree(cuda)


def falls_back():
    """Whatever the overlap cannot plan runs the real nvcc, with the same arguments: a --dryrun
    of a shape it does not know, and front ends that did not read the module id given."""
    d = tempfile.mkdtemp(prefix="check-nvcc-overlap-fake-")
    fake = os.path.join(d, "nvcc")
    with open(fake, "w") as f:
        f.write("#!/bin/sh\nif [ \"$1\" = --dryrun ]; then echo '#$ mystery-tool a b' >&2; exit 0; fi\n"
                "echo \"real nvcc: $*\"; exit 3\n")
    os.chmod(fake, 0o755)
    out = subprocess.run([sys.executable, "-I", "-B", OVERLAP, fake, "-c", "a.cu", "-o", "a.o"],
                         capture_output=True, text=True)
    check(out.returncode == 3 and out.stdout == "real nvcc: -c a.cu -o a.o\n",
          f"an unknown shape runs nvcc itself: {out.returncode} {out.stdout!r} {out.stderr!r}")
    plan = overlap.Plan({}, [overlap.Step(0, ["gcc", "-E"]), overlap.Step(
        1, ["cudafe++", "--gen_c_file_name", os.path.join(d, "host.cpp"), "x.ii"])],
        [overlap.Step(2, ["cicc", "--stub_file_name", os.path.join(d, "stub.c"), "y.ii"])],
        overlap.Step(3, ["gcc", "-c"]), "m", None)
    for host, stub, agreed, what in (
            ("#define _NV_ANON_NAMESPACE _GLOBAL__N__ours\n", "no namespace\n", True,
             "a stub that names no anonymous namespace"),
            ("#define _NV_ANON_NAMESPACE _GLOBAL__N__ours\n", "_GLOBAL__N__ours\n", True,
             "both name the id given"),
            ("#define _NV_ANON_NAMESPACE _GLOBAL__N__ours\n", "_GLOBAL__N__theirs\n", False,
             "a stub that names another id"),
            ("#define _NV_ANON_NAMESPACE _GLOBAL__N__theirs\n", "", False,
             "cudafe++ that made its own id")):
        for name, text in (("host.cpp", host), ("stub.c", stub)):
            with open(os.path.join(d, name), "w") as f:
                f.write(text)
        check(overlap.ids_agree(plan, "_ours") == agreed, what)
    shutil.rmtree(d)


def compile_in(directory, command, name, flags):
    """One compile of `name` in `directory` by `command` (nvcc, or the overlap in front of it)."""
    out = subprocess.run(command + flags + ["-arch=sm_90", "-c", name, "-o", "out/" + name + ".o"],
                         cwd=directory, capture_output=True)
    obj = os.path.join(directory, "out", name + ".o")
    symbols = subprocess.run(["nm", obj], capture_output=True, text=True).stdout \
        if os.path.exists(obj) else None
    if symbols:   # nvcc's own module ids differ by directory (`_<hash>_<length>_<name>...`)
        symbols = MODULE_ID_HASH.sub(r"_ID_\1", symbols)
    depfile = os.path.join(directory, "out", name + ".d")
    deps = open(depfile).read() if os.path.exists(depfile) else None
    return out.returncode, out.stdout, out.stderr, symbols, deps


def planned(directory, name, flags):
    """The overlap's own status for a compile in `directory` (None: it would run nvcc)."""
    probe = ("import sys; sys.path.insert(0, sys.argv[1]); import nvcc_overlap as o; "
             "s = o.overlapped(sys.argv[2], sys.argv[3:]); print('none' if s is None else s)")
    out = subprocess.run([sys.executable, "-I", "-c", probe, os.path.dirname(OVERLAP), NVCC,
                          *flags, "-arch=sm_90", "-c", name, "-o", "out/" + name + ".o"],
                         cwd=directory, capture_output=True, text=True)
    last = out.stdout.strip().splitlines()[-1:] or ["none"]
    return None if last[0] == "none" else int(last[0])


def against_nvcc():
    root = tempfile.mkdtemp(prefix="check-nvcc-overlap-")
    dirs = {arm: os.path.join(root, arm) for arm in ("nvcc", "overlap")}
    for d in dirs.values():
        os.makedirs(os.path.join(d, "out"))
        for name, text in SOURCES.items():
            with open(os.path.join(d, name), "w") as f:
                f.write(text)
    arms = {"nvcc": [NVCC], "overlap": [sys.executable, "-I", "-B", OVERLAP, NVCC]}
    for name in SOURCES:
        for flags in ([], ["-MD", "-MF", "out/" + name + ".d"], ["-rdc=true"]):
            got = {arm: compile_in(dirs[arm], arms[arm], name, flags) for arm in arms}
            want, have = got["nvcc"], got["overlap"]
            label = f"{name} {' '.join(flags) or '(no flags)'}"
            check(have[0] == want[0], f"{label}: status {have[0]}, nvcc's {want[0]}")
            check(have[1] == want[1] and have[2] == want[2],
                  f"{label}: output differs:\n{want[2].decode()}\n---\n{have[2].decode()}")
            check(have[4] == want[4], f"{label}: dependency file differs")
            if name != "anon.cu":
                check(have[3] == want[3], f"{label}: symbols differ:\n{want[3]}\n{have[3]}")
            if want[0] == 0 and "-rdc=true" not in flags:
                check(planned(dirs["overlap"], name, flags) == 0,
                      f"{label}: the overlap ran nvcc itself instead of its plan")
            print(f"  {label}: status {want[0]}, same output"
                  + (", same symbols" if name != "anon.cu" and want[3] else ""))
    # The anonymous namespace: named by the overlap's module id on the host's symbols and in
    # the device code's sections, so the kernel is found where it is registered.
    anon = os.path.join(dirs["overlap"], "anon.cu")
    compile_in(dirs["overlap"], arms["overlap"], "anon.cu", [])
    given = overlap.module_id(anon)
    with open(os.path.join(dirs["overlap"], "out", "anon.cu.o"), "rb") as f:
        obj = f.read()
    check(f"_GLOBAL__N_{given}6hidden".encode() in obj, "the host names the kernel by the id")
    check(f".nv.info._ZN{len('_GLOBAL__N_' + given)}_GLOBAL__N_{given}6hiddenEPi".encode() in obj,
          "the device code names it the same")
    leftovers = [n for n in os.listdir(tempfile.gettempdir()) if n.startswith("crucible-nvcc-")]
    check(not leftovers, f"scratch directories left: {leftovers}")
    shutil.rmtree(root)


def on_gpu():
    """torch's load_inline through the overlap: a kernel in an anonymous namespace and a
    template, run on the GPU."""
    import torch
    from torch.utils import cpp_extension
    if not torch.cuda.is_available():
        print("  no GPU: load_inline through the overlap not run here (the GPU job runs it)")
        return
    env = {}
    use_nvcc_overlap(env, sys.executable, cpp_extension.CUDA_HOME)
    check(env.get("PYTORCH_NVCC"), "the toolkit's nvcc found")
    os.environ["PYTORCH_NVCC"] = env["PYTORCH_NVCC"]
    cuda = """
#include <torch/extension.h>
namespace { __global__ void plus(const float* x, float* y, int n, float c) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = x[i] + c; } }
template <int K> __global__ void times(float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] *= K; }
torch::Tensor go(torch::Tensor x) {
  auto y = torch::empty_like(x); int n = x.numel();
  plus<<<(n + 127) / 128, 128>>>(x.data_ptr<float>(), y.data_ptr<float>(), n, 1.5f);
  times<3><<<(n + 127) / 128, 128>>>(y.data_ptr<float>(), n);
  return y; }
"""
    build = tempfile.mkdtemp(prefix="check-nvcc-overlap-build-")
    module = cpp_extension.load_inline("crucible_overlap_check", "torch::Tensor go(torch::Tensor x);",
                                       cuda_sources=cuda, functions=["go"], build_directory=build)
    x = torch.randn(1000, device="cuda")
    check(torch.equal(module.go(x), (x + 1.5) * 3), "the extension's kernels ran")
    with open(os.path.join(build, "build.ninja")) as f:
        check("nvcc_overlap.py" in f.read(), "torch's ninja file ran the overlap")
    print("  load_inline through the overlap: built, and its kernels ran on the GPU")
    shutil.rmtree(build)


pure_parts()
falls_back()
if not NVCC:
    check(False, "CRUCIBLE_NVCC is not set (scripts/env.sh's ensure_nvcc sets it)")
against_nvcc()
on_gpu()
print("check_nvcc_overlap: ok")
