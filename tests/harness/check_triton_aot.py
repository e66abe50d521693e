#!/usr/bin/env python3
"""The CPU stage's Triton dry run (gpu-worker/harness/triton_aot.py), without a GPU.

    CRUCIBLE_PYTHON=... python tests/harness/check_triton_aot.py

1. The prepare stage of a small Triton candidate (a plain kernel and an autotuned one) with
   `triton_precompile` for cuda 9.0 reports cache files under cache/triton, one entry per
   specialisation (the autotuner's two configs each).
2. Those entries are the ones Triton's own JIT looks up: a fresh process that never loads
   the harness, with Triton's driver standing in for an sm_90 device, warms the same kernels
   up on arguments like the forward's through the ordinary JITFunction/Autotuner path, with
   the compiler's pipeline made to raise: every lookup must be a cache hit (no new entry, no
   compile).
   The same holds for a dry run on meta tensors (how inputs over 256 MiB are passed): their
   data_ptr of 0 specialises like a device allocation.
3. The template's Triton warm-up (harness/template.py) leaves a child nothing of Triton's
   first call to pay but the cache lookup: forked from a process that ran it, the same
   cache-hit warm-up as in 2 computes no `triton_key` and imports no module of Triton's.
4. A candidate whose forward needs a GPU, one that kills its own process during the dry run,
   one that loops (the runner's time limit) and one that also ignores that limit (the judge
   stops waiting) still end the stage with a `prepared` line (no verdict, no import error):
   the dry run only stops.
Parts 1-3 need ptxas (shipped in Triton's wheel); without it they are skipped with the reason.
Exit 0 when everything checked holds, 1 otherwise.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import run_harness  # noqa: E402

PYTHON = os.environ.get("CRUCIBLE_PYTHON", run_harness.DEFAULT_PYTHON)
CASES = os.path.join(HERE, "triton_aot")
PROBLEM = os.path.join(CASES, "problem.py")
SPEC = {"stage": "prepare", "device": "cuda", "cuda_arch": "9.0", "triton_precompile": 60}

# Triton's own JIT with an sm_90 target standing in for the device and the compiler's stages
# made to raise, so that only a cache hit can succeed: how VERIFY starts, and what
# AFTER_TEMPLATE's child runs (handed to it as its third argument).
ONLY_CACHE_HITS = r"""
import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.backends.nvidia.compiler import CUDABackend
from triton.runtime.driver import driver

class Device:
    def get_current_target(self): return GPUTarget("cuda", 90, 32)
    def get_current_device(self): return 0
    def get_current_stream(self, device=None): return 0

def no_compile(*a, **k):
    raise AssertionError("cache miss: the compiler ran")

CUDABackend.add_stages = no_compile
driver.set_active(Device())
"""

# Run in a fresh interpreter (never the harness).
VERIFY = r"""
import importlib.util, json, os, sys
""" + ONLY_CACHE_HITS + r"""
cache = os.environ["TRITON_CACHE_DIR"]
before = sorted(os.listdir(cache))
spec = importlib.util.spec_from_file_location("candidate", sys.argv[1])
cand = importlib.util.module_from_spec(spec)
sys.modules["candidate"] = cand
spec.loader.exec_module(cand)
torch.manual_seed(42)
x, y = torch.randn(4096), torch.randn(4096)
n = x.numel()
out = torch.empty_like(x)
cand.add_scale_kernel.warmup(x, y, out, n, 2.0, BLOCK=1024, grid=(4,))
cand.relu_kernel.warmup(x, out, n, grid=(32,))
print(json.dumps({"before": before, "after": sorted(os.listdir(cache)),
                  "triton": triton.__version__}))
"""


# Part 3: the template's warm-up, then the cache-hit warm-up of VERIFY in a forked child, which
# reports what it had to compute and import itself.
AFTER_TEMPLATE = r"""
import importlib.util, json, os, sys
spec = importlib.util.spec_from_file_location("crucible_template", sys.argv[2])
template = importlib.util.module_from_spec(spec)
spec.loader.exec_module(template)
template._warm_imports()
from triton.runtime.cache import triton_key
read, write = os.pipe()
if os.fork() == 0:
    os.close(read)
    before = set(sys.modules)
    misses = triton_key.cache_info().misses
    exec(sys.argv[3])
    spec = importlib.util.spec_from_file_location("candidate", sys.argv[1])
    cand = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cand)
    x, y = torch.randn(4096), torch.randn(4096)
    out = torch.empty_like(x)
    cand.add_scale_kernel.warmup(x, y, out, x.numel(), 2.0, BLOCK=1024, grid=(4,))
    new = sorted(m for m in set(sys.modules) - before
                 if m.startswith("triton") and m not in ("candidate",))
    os.write(write, json.dumps({"key_computed": triton_key.cache_info().misses - misses,
                                "imported": new}).encode())
    os._exit(0)
os.close(write)
os.wait()
print(os.read(read, 1 << 16).decode())
"""


# A dry run on meta inputs, straight through triton_aot.py (the harness passes meta tensors
# only for inputs over 256 MiB; the specialisation is the point here, not the size).
META_DRY_RUN = r"""
import importlib.util, os, sys
import torch
spec = importlib.util.spec_from_file_location("crucible_triton_aot", sys.argv[2])
aot_module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(aot_module)
aot = aot_module.TritonPrecompile("9.0", os.environ["TRITON_CACHE_DIR"])
assert aot.install(), aot.error
spec = importlib.util.spec_from_file_location("candidate", sys.argv[1])
cand = importlib.util.module_from_spec(spec)
sys.modules["candidate"] = cand
spec.loader.exec_module(cand)
inputs = [aot_module.meta_tensor(torch, aot_module.describe_meta(torch, torch.empty(4096,
          device="meta"))) for _ in range(2)]
kernels, stopped = aot.dry_run(torch, lambda: cand.ModelNew(2.0), inputs, 60, meta=True)
assert (kernels, stopped) == (3, None), (kernels, stopped)
"""


def ptxas_missing():
    code = ("import os, triton; p = os.path.join(os.path.dirname(triton.__file__), 'backends',"
            " 'nvidia', 'bin', 'ptxas'); print(p if os.access(p, os.X_OK) else '')")
    found = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True).stdout.strip()
    return None if found else "triton's wheel ships no ptxas here"


def prepare(candidate, spec=None):
    r = run_harness.run(PROBLEM, candidate, spec=dict(SPEC, **(spec or {})), timeout=180,
                        python=PYTHON, keep_taskdir=True)
    assert r["result"] is None, f"{candidate}: a verdict in the cpu stage: {r['result']}"
    assert r["prepared"] is not None, f"{candidate}: no prepared line: {r['stderr_tail']}"
    assert r["prepared"]["import_error"] is None, r["prepared"]["import_error"]
    assert "precompile" in r["stages"], r["stages"]
    return r


def check_entries():
    r = prepare(os.path.join(CASES, "candidate.py"))
    taskdir = r["taskdir"]
    try:
        p = r["prepared"]
        assert p["triton_stopped"] is None, p["triton_stopped"]
        assert p["triton_kernels"] == 3, p   # one plain kernel, two autotune configs
        files = p["triton_cache"]
        entries = {f.split("/")[2] for f in files}
        # Kernel entries; a node with libcuda also has Triton's driver helpers listed.
        kernels = {f.split("/")[2] for f in files if f.split("/")[3].startswith("__grp__")}
        assert len(kernels) == 3 and all(f.startswith("cache/triton/") for f in files), files
        assert any(f.endswith(".cubin") for f in files), files
        assert "triton_precompile" in p["stage_ms"], p["stage_ms"]
        cache = os.path.join(taskdir, "cache", "triton")
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": taskdir,
               "TRITON_CACHE_DIR": cache}
        v = subprocess.run([PYTHON, "-I", "-c", VERIFY, os.path.join(CASES, "candidate.py")],
                           capture_output=True, text=True, env=env, timeout=300)
        assert v.returncode == 0, f"the JIT missed the dry run's entries:\n{v.stderr[-3000:]}"
        seen = json.loads(v.stdout.strip().splitlines()[-1])
        assert seen["before"] == seen["after"] == sorted(entries), seen
        check_template_warmup(env)
        return seen["triton"]
    finally:
        shutil.rmtree(taskdir, ignore_errors=True)


def check_template_warmup(env):
    template = os.path.join(run_harness.REPO, "gpu-worker", "harness", "template.py")
    w = subprocess.run([PYTHON, "-I", "-c", AFTER_TEMPLATE, os.path.join(CASES, "candidate.py"),
                        template, ONLY_CACHE_HITS], capture_output=True, text=True, env=env,
                       timeout=300)
    assert w.returncode == 0 and w.stdout.strip(), f"template warm-up check failed:\n{w.stderr[-3000:]}"
    seen = json.loads(w.stdout.strip().splitlines()[-1])
    assert seen == {"key_computed": 0, "imported": []}, \
        f"a child of the template still pays for Triton's first call: {seen} " \
        "(TRITON_LAZY_IMPORTS in harness/template.py)"


def check_meta_entries():
    cache = tempfile.mkdtemp(prefix="crucible-aot-meta-")
    try:
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": cache,
               "TRITON_CACHE_DIR": cache}
        candidate = os.path.join(CASES, "candidate.py")
        module = os.path.join(run_harness.REPO, "gpu-worker", "harness", "triton_aot.py")
        d = subprocess.run([PYTHON, "-I", "-c", META_DRY_RUN, candidate, module],
                           capture_output=True, text=True, env=env, timeout=300)
        assert d.returncode == 0, f"meta dry run failed:\n{d.stderr[-3000:]}"
        written = sorted(os.listdir(cache))
        v = subprocess.run([PYTHON, "-I", "-c", VERIFY, candidate], capture_output=True,
                           text=True, env=env, timeout=300)
        assert v.returncode == 0, f"the JIT missed the meta dry run's entries:\n" \
                                  f"{v.stderr[-3000:]}"
        seen = json.loads(v.stdout.strip().splitlines()[-1])
        assert seen["before"] == seen["after"] == written, seen
    finally:
        shutil.rmtree(cache, ignore_errors=True)


def check_breakers():
    for name, spec, why in (
            ("candidate_needs_gpu.py", None, "RuntimeError"),
            ("candidate_exits.py", {"screening": {"threads-processes": "off"}},
             "process ended"),
            ("candidate_hangs.py", {"triton_precompile": 2}, "out of time"),
            ("candidate_ignores_alarm.py", {"triton_precompile": 2,
                                            "screening": {"threads-processes": "off"}},
             "no answer")):
        r = prepare(os.path.join(CASES, name), spec)
        shutil.rmtree(r["taskdir"], ignore_errors=True)
        p = r["prepared"]
        assert p["triton_kernels"] == 0 and p["triton_cache"] == [], p
        assert p["triton_stopped"] and why in p["triton_stopped"], p["triton_stopped"]


def main():
    skipped = ptxas_missing()
    if skipped:
        print(f"triton_aot: parts 1-2 skipped: {skipped}")
    else:
        version = check_entries()
        print(f"triton_aot: dry run entries hit by triton {version}'s own JIT for cuda:90; "
              "a child of the template computes no triton_key and imports nothing of triton")
        check_meta_entries()
        print("triton_aot: so are a dry run's on meta tensors")
    check_breakers()
    print("triton_aot: a dry run that breaks leaves the cpu stage's verdict alone")


if __name__ == "__main__":
    try:
        main()
    except AssertionError as e:
        print(f"triton_aot: FAILED: {e}")
        sys.exit(1)
