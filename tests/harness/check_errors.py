"""A failed build's message leads with the compiler's own words (gpu-worker/harness/errors.py:
compiler_diagnostics, format_error): on synthetic nvcc, gcc and ptxas output, and on a real
`torch.utils.cpp_extension.load_inline` of a deliberately broken C++ extension built here on
the CPU (the host's c++). Before, the message began with ninja's command lines and was cut
before the compiler spoke. Run by scripts/test.sh; exit 1 on the first failure."""
import importlib.util
import os
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HARNESS = os.path.join(REPO, "gpu-worker", "harness", "harness.py")

# Loading the entry point registers every harness module as crucible_<name>.
entry = importlib.util.spec_from_file_location("crucible_harness_entry", HARNESS)
entry.loader.exec_module(importlib.util.module_from_spec(entry))
import torch  # noqa: E402

from crucible_errors import classify, compiler_diagnostics, format_error  # noqa: E402
from crucible_trusted import capture_trusted  # noqa: E402

capture_trusted(torch)
checks = 0


def check(cond, what):
    global checks
    checks += 1
    if not cond:
        print(f"check_errors: FAILED: {what}")
        sys.exit(1)


NINJA = """Error building extension 'ext': [1/3] /usr/local/cuda/bin/nvcc --generate-dependencies-with-compile -DTORCH_EXTENSION_NAME=ext -isystem /venv/include -O3 -c /t/cache/torch_extensions/ext/cuda.cu -o cuda.cuda.o
FAILED: cuda.cuda.o
/usr/local/cuda/bin/nvcc -c /t/cache/torch_extensions/ext/cuda.cu -o cuda.cuda.o
/t/cache/torch_extensions/ext/cuda.cu(138): error: identifier "AT_CUDA_CHECK" is undefined
          AT_CUDA_CHECK(cudaGetLastError());
          ^

/t/cache/torch_extensions/ext/cuda.cu(140): error: identifier "AT_CUDA_CHECK" is undefined
1 error detected in the compilation of "/t/cache/torch_extensions/ext/cuda.cu".
[2/3] c++ -MMD -MF main.o.d -c /t/cache/torch_extensions/ext/main.cpp -o main.o
FAILED: main.o
/t/cache/torch_extensions/ext/main.cpp:5:10: fatal error: foo.h: No such file or directory
ptxas fatal   : Unresolved extern function 'helper'
ninja: build stopped: subcommand failed.
""" + "x" * 5000

found = compiler_diagnostics([RuntimeError(NINJA)])
check(found == [
    '/t/cache/torch_extensions/ext/cuda.cu(138): error: identifier "AT_CUDA_CHECK" is undefined',
    '/t/cache/torch_extensions/ext/cuda.cu(140): error: identifier "AT_CUDA_CHECK" is undefined',
    "/t/cache/torch_extensions/ext/main.cpp:5:10: fatal error: foo.h: No such file or directory",
    "ptxas fatal   : Unresolved extern function 'helper'",
], f"the diagnostics of nvcc, gcc and ptxas, without the command lines: {found}")
message = format_error(RuntimeError(NINJA), "/t/candidate.py", "/t")
lines = message.splitlines()
check(lines[0] == "compiler errors:" and lines[1].startswith("cache/torch_extensions/ext/cuda.cu(138): error"),
      f"the message leads with the compiler's first error, the task dir left out: {lines[:3]}")
check(len(message) <= 4000, "still bounded")
check(compiler_diagnostics([RuntimeError("ModelNew missing"), ValueError("bad: error: x")]) == [],
      "no diagnostics in an error that is not a compiler's")

# The real path: torch's own load_inline of a broken extension, built on this CPU. Its ninja
# is found on PATH, where a task child finds it too (the interpreter's bin directory first).
os.environ["PATH"] = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
from torch.utils.cpp_extension import load_inline  # noqa: E402

BROKEN = """
#include <torch/extension.h>
torch::Tensor twice(torch::Tensor x) {
    return x * undeclared_factor;
}
"""
with tempfile.TemporaryDirectory() as build:
    try:
        load_inline(name="crucible_broken_ext", cpp_sources=[BROKEN], functions=["twice"],
                    build_directory=build, verbose=False)
        check(False, "the broken extension built")
    except Exception as e:   # noqa: BLE001 - whatever torch raises is what a candidate meets
        message = format_error(e, "/nowhere/candidate.py", build)
        first = message.splitlines()[:2]
        check(classify(e, "RUNTIME") == "COMPILATION", f"a failed build is COMPILATION: {e!r}")
        check(first[0] == "compiler errors:" and "error" in first[1]
              and "undeclared_factor" in first[1] and "main.cpp" in first[1],
              f"the compiler's error leads the real build's message: {first}")

print(f"check_errors: {checks} checks passed")
