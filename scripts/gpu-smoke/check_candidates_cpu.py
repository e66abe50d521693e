#!/usr/bin/env python3
"""Check the GPU-smoke Triton candidates on CPU through the Triton interpreter.

For every manifest entry with backend "triton" and expect "correct": import the
KernelBench problem and the candidate from their files, shrink the problem's size
globals (the interpreter is slow), seed identically before get_init_inputs() and
before building Model and ModelNew, and compare outputs with
torch.allclose(atol=1e-2, rtol=1e-2). Sizes are chosen to be NOT multiples of the
candidates' block sizes so masked tails are exercised. Each configuration runs on the
problem's own inputs (torch.rand, non-negative) and once more on signed inputs
(randn * 3) so negative branches are exercised too.

Usage (from the repo root):
    /root/.cache/crucible/venv/bin/python scripts/gpu-smoke/check_candidates_cpu.py
Options:
    --kernelbench DIR   KernelBench root holding level1/ (default /work/shared/kernelbench)
    --only SUBSTR       only entries whose candidate path contains SUBSTR
    --device cuda       run on a GPU instead (TRITON_INTERPRET is then not set)
    --full              keep the problems' real sizes (only sensible with --device cuda)
    --backends LIST     comma-separated backends to check (default triton; "triton,cuda"
                        also builds and checks the load_inline candidates, GPU only)
"""
import argparse
import importlib.util
import json
import os
import sys
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
CANDIDATES = os.path.join(HERE, "candidates")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kernelbench", default=os.environ.get("KERNELBENCH_DIR", "/work/shared/kernelbench"))
    p.add_argument("--manifest", default=os.path.join(CANDIDATES, "manifest.json"))
    p.add_argument("--only", default=None)
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--full", action="store_true")
    p.add_argument("--backends", default="triton")
    p.add_argument("--time", action="store_true", help="GPU only: median ms of ref and candidate")
    p.add_argument("--atol", type=float, default=1e-2)
    p.add_argument("--rtol", type=float, default=1e-2)
    p.add_argument("--seed", type=int, default=42)
    return p.parse_args()


ARGS = parse_args()
if ARGS.device == "cpu":
    # must be set before triton is imported (the candidates import it)
    os.environ["TRITON_INTERPRET"] = "1"

import torch  # noqa: E402

# Small sizes per problem file (module globals overridden before get_init_inputs /
# get_inputs). Each entry is a list of configurations. Block sizes used by the
# candidates: elementwise 4096, row kernels 4096, reductions 32x128, RMSNorm
# [next_pow2(C), 8192 // next_pow2(C)], matmul 128x128x32.
ELEMENTWISE = [{"batch_size": 3, "dim": 5000}, {"batch_size": 1, "dim": 77}]
SMALL_SIZES = {
    "19_ReLU.py": ELEMENTWISE,
    "20_LeakyReLU.py": ELEMENTWISE,
    "21_Sigmoid.py": ELEMENTWISE,
    "22_Tanh.py": ELEMENTWISE,
    "25_Swish.py": ELEMENTWISE,
    "26_GELU_.py": ELEMENTWISE,
    "27_SELU_.py": ELEMENTWISE,
    "28_HardSigmoid.py": ELEMENTWISE,
    "29_Softplus.py": ELEMENTWISE,
    "30_Softsign.py": ELEMENTWISE,
    "31_ELU.py": ELEMENTWISE,
    "32_HardTanh.py": ELEMENTWISE,
    "88_MinGPTNewGelu.py": ELEMENTWISE,
    "23_Softmax.py": [{"batch_size": 3, "dim": 9000}, {"batch_size": 2, "dim": 100}],
    "24_LogSoftmax.py": [{"batch_size": 3, "dim": 9000}, {"batch_size": 2, "dim": 100}],
    "36_RMSNorm_.py": [
        {"batch_size": 3, "features": 5, "dim1": 7, "dim2": 37},
        {"batch_size": 2, "features": 64, "dim1": 20, "dim2": 13},
    ],
    "37_FrobeniusNorm_.py": [{"batch_size": 3, "features": 5, "dim1": 7, "dim2": 37}],
    "38_L1Norm_.py": [{"batch_size": 3, "dim": 9001}, {"batch_size": 2, "dim": 50}],
    "39_L2Norm_.py": [{"batch_size": 3, "dim": 9001}],
    "47_Sum_reduction_over_a_dimension.py": [
        {"batch_size": 3, "dim1": 70, "dim2": 300},
        {"batch_size": 2, "dim1": 33, "dim2": 5, "reduce_dim": 2},
    ],
    "48_Mean_reduction_over_a_dimension.py": [{"batch_size": 3, "dim1": 70, "dim2": 300}],
    "49_Max_reduction_over_a_dimension.py": [{"batch_size": 3, "dim1": 70, "dim2": 300}],
    "1_Square_matrix_multiplication_.py": [{"N": 150}, {"N": 37}],
    "2_Standard_matrix_multiplication_.py": [{"M": 150, "K": 70, "N": 130}],
}


def load_module(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def to_device(objs, device):
    return [o.to(device) if isinstance(o, torch.Tensor) else o for o in objs]


def signed_like(objs, gen):
    out = []
    for o in objs:
        if isinstance(o, torch.Tensor) and o.is_floating_point():
            out.append(torch.randn(o.shape, generator=gen, dtype=o.dtype) * 3.0)
        else:
            out.append(o)
    return out


def compare(ref, new, atol, rtol):
    """Return None when equal within tolerance, else a reason."""
    if isinstance(ref, (tuple, list)):
        if not isinstance(new, (tuple, list)) or len(new) != len(ref):
            return "output structure differs"
        for r, n in zip(ref, new):
            why = compare(r, n, atol, rtol)
            if why:
                return why
        return None
    if not isinstance(new, torch.Tensor):
        return f"output is {type(new).__name__}, expected Tensor"
    if new.shape != ref.shape:
        return f"shape {tuple(new.shape)} != {tuple(ref.shape)}"
    if new.dtype != ref.dtype:
        return f"dtype {new.dtype} != {ref.dtype}"
    if new.device != ref.device:
        return f"device {new.device} != {ref.device}"
    if not new.is_contiguous():
        return "output is not contiguous"
    if not torch.allclose(ref, new, atol=atol, rtol=rtol):
        diff = (ref.float() - new.float()).abs()
        return f"values differ: max_abs_diff={diff.max().item():.3e}"
    return None


def time_ms(model, inputs, reps=10):
    times = []
    with torch.no_grad():
        model(*inputs)
        for _ in range(reps):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            start.record()
            out = model(*inputs)
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
            del out
    times.sort()
    return times[len(times) // 2]


def check_one(idx, entry, args):
    problem_path = os.path.join(args.kernelbench, entry["problem"])
    cand_path = os.path.join(CANDIDATES, entry["candidate"])
    problem_file = os.path.basename(entry["problem"])
    ref_mod = load_module(problem_path, f"_smoke_ref_{idx}")
    cand_mod = load_module(cand_path, f"_smoke_cand_{idx}")
    if args.full:
        configs = [{}]
    else:
        configs = SMALL_SIZES.get(problem_file)
        if configs is None:
            return False, "no small-size configuration for this problem (add one to SMALL_SIZES)"
    device = torch.device(args.device)
    max_diff = 0.0
    runs = 0
    timing = ""
    for cfg in configs:
        for name, value in cfg.items():
            if not hasattr(ref_mod, name):
                return False, f"problem has no global {name!r} to override"
            setattr(ref_mod, name, value)
        torch.manual_seed(args.seed)
        init_inputs = ref_mod.get_init_inputs()
        torch.manual_seed(args.seed)
        model = ref_mod.Model(*init_inputs).to(device).eval()
        torch.manual_seed(args.seed)
        model_new = cand_mod.ModelNew(*init_inputs).to(device).eval()
        torch.manual_seed(args.seed + 1)
        base_inputs = ref_mod.get_inputs()
        variants = [("rand", base_inputs)]
        if not args.full:
            gen = torch.Generator().manual_seed(args.seed + 2)
            variants.append(("signed", signed_like(base_inputs, gen)))
        for vname, inputs in variants:
            with torch.no_grad():
                ref_out = model(*[x.clone() if isinstance(x, torch.Tensor) else x
                                  for x in to_device(inputs, device)])
                new_out = model_new(*[x.clone() if isinstance(x, torch.Tensor) else x
                                      for x in to_device(inputs, device)])
            if args.device == "cuda":
                torch.cuda.synchronize()
            why = compare(ref_out, new_out, args.atol, args.rtol)
            if why:
                return False, f"{cfg} {vname}: {why}"
            if args.time and args.device == "cuda":
                dev_inputs = to_device(inputs, device)
                t_ref = time_ms(model, dev_inputs)
                t_new = time_ms(model_new, dev_inputs)
                timing = f", ref {t_ref:.3f} ms, new {t_new:.3f} ms, speedup {t_ref / t_new:.2f}x"
            outs = ref_out if isinstance(ref_out, (tuple, list)) else [ref_out]
            news = new_out if isinstance(new_out, (tuple, list)) else [new_out]
            for r, n in zip(outs, news):
                max_diff = max(max_diff, (r.float() - n.float()).abs().max().item() if r.numel() else 0.0)
            runs += 1
            del ref_out, new_out
    return True, f"{runs} runs, max_abs_diff={max_diff:.2e}{timing}"


def main():
    args = ARGS
    with open(args.manifest) as f:
        manifest = json.load(f)
    backends = set(args.backends.split(","))
    entries = [e for e in manifest if e["backend"] in backends and e["expect"] == "correct"]
    if args.only:
        entries = [e for e in entries if args.only in e["candidate"]]
    passed = failed = 0
    for idx, entry in enumerate(entries):
        try:
            ok, detail = check_one(idx, entry, args)
        except Exception as exc:  # report and continue with the next candidate
            ok, detail = False, f"{type(exc).__name__}: {exc}"
            traceback.print_exc(limit=3)
        if ok:
            passed += 1
        else:
            failed += 1
        print(f"{'PASS' if ok else 'FAIL'} {entry['candidate']} ({entry['problem']}): {detail}", flush=True)
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
