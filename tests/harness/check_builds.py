"""The CPU stage's dry run of a CUDA candidate (gpu-worker/harness/triton_aot.py: bounded_call,
under builds.py's ExtensionBuilds): an extension a candidate builds lazily, in ModelNew.__init__ or on its
first call, is built there and recorded for the worker's build cache like one built at import;
a dry run that fails once it needs the GPU still keeps the builds made on the way; its alarm
ends one that hangs. Real load_inline builds of a C++ extension on this CPU (the host's c++).
Run by scripts/test.sh; exit 1 on the first failure."""
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

from crucible_builds import ExtensionBuilds  # noqa: E402
from crucible_triton_aot import bounded_call  # noqa: E402
from crucible_trusted import capture_trusted  # noqa: E402

capture_trusted(torch)
# load_inline finds ninja on PATH, as a task child does (the interpreter's bin directory first).
os.environ["PATH"] = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
checks = 0


def check(cond, what):
    global checks
    checks += 1
    if not cond:
        print(f"check_builds: FAILED: {what}")
        sys.exit(1)


SOURCE = """
#include <torch/extension.h>
torch::Tensor twice(torch::Tensor x) { return x * 2; }
"""

with tempfile.TemporaryDirectory() as taskdir:
    builds = ExtensionBuilds(taskdir, torch.__version__, "9.0", prebuilt=[], building=True)
    builds.install()
    from torch.utils.cpp_extension import load_inline  # the stand-in, as the candidate sees it

    class LazyInInit(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.ext = load_inline(name="crucible_check_lazy_init", cpp_sources=[SOURCE],
                                   functions=["twice"], verbose=False)

        def forward(self, x):
            # Where a CUDA candidate's forward would need the GPU the CPU stage does not have.
            raise RuntimeError("no CUDA device")

    stopped = bounded_call(torch, LazyInInit, [torch.ones(4)], 600)
    check(stopped is not None and "no CUDA device" in stopped,
          f"the dry run stops where the candidate needs the GPU: {stopped}")
    check([b["name"] for b in builds.builds] == ["crucible_check_lazy_init"],
          f"the extension built in __init__ is recorded: {builds.builds}")
    built = os.path.join(taskdir, builds.builds[0]["file"])
    check(os.path.isfile(built), f"its file is where the worker copies it from: {built}")

    class Hangs(torch.nn.Module):
        def forward(self, x):
            while True:
                pass

    stopped = bounded_call(torch, Hangs, [torch.ones(4)], 1)
    check(stopped is not None and "ran out" in stopped, f"the alarm ends a hang: {stopped}")
    check(len(builds.builds) == 1, "nothing more recorded")

print(f"check_builds: {checks} checks passed")
