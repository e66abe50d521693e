#!/usr/bin/env python3
"""Check Triton candidates on CPU through the Triton interpreter against their KernelBench problems.

--set picks the entries (each with the verdict it is expected to get):
  smoke  scripts/gpu-smoke/candidates/manifest.json: every entry whose backend is in --backends
         and that expects `correct`.
  bench  scripts/bench/workload.json: every entry whose backend is in --backends and that expects
         `correct` or `incorrect`, expanded exactly as the benchmark expands it
         (scripts/bench/workload.py's expand_workload: GRPO samples with other BLOCK sizes
         included); byte-identical duplicates are checked once.
  small  scripts/bench/workload-small.json (the small-problem GRPO batch, its problems under
         scripts/bench/problems unless --problems): every entry, expanded the same way;
         `correct` and `incorrect` as above, `RUNTIME` passes when ModelNew's forward raises.
         With --harness each sample instead runs through the real harness (one fresh
         interpreter, device cpu, as bench.py's naive mode) and passes when the harness's
         verdict is the one expected (correct / incorrect for CORRECTNESS / the error code).

For each entry: import the KernelBench problem and the candidate, shrink the problem's size
globals (the interpreter is slow; sizes are NOT multiples of the candidates' block sizes, so
masked tails run), seed identically before get_init_inputs() and before building Model and
ModelNew (parameters must then match), and compare the outputs (same shape, dtype, device,
contiguous, torch.allclose(atol=1e-2, rtol=1e-2)) on the problem's own inputs (torch.rand,
non-negative) and once more on signed inputs (randn * 3) so negative branches run too. A
`correct` entry passes when every comparison matches; an `incorrect` one passes when some
comparison differs. Prints one line per entry, then 'N passed, N failed'; exit 1 on a failure.

Usage (from the repo root):
    /root/.cache/crucible/venv/bin/python scripts/check_candidates_cpu.py --set smoke|bench|small
Options:
    --set smoke|bench|small  which entries (required)
    --kernelbench DIR   KernelBench root holding level1/, level2/ (default $KERNELBENCH_DIR or
                        /work/shared/kernelbench; for --set small the workload's problems_root;
                        --problems is the same option)
    --manifest PATH     the smoke manifest (default scripts/gpu-smoke/candidates/manifest.json)
    --workload PATH     the bench workload (default scripts/bench/workload.json, or
                        scripts/bench/workload-small.json for --set small)
    --harness           --set small: each sample through the harness (real verdicts, full sizes,
                        --harness-perf-trials timed trials) instead of the direct comparison
    --only SUBSTR       only entries whose candidate path contains SUBSTR
    --device cuda       run on a GPU instead (TRITON_INTERPRET is then not set)
    --full              keep the problems' real sizes, own inputs only (sensible with --device cuda)
    --backends LIST     comma-separated backends to check (default triton; "triton,cuda" also
                        builds and checks the load_inline candidates, GPU only)
    --time              GPU only: median ms of reference and candidate
    --atol/--rtol/--seed  tolerances (1e-2) and seed (42)
"""
import argparse
import importlib.util
import json
import os
import sys
import tempfile
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
SMOKE_CANDIDATES = os.path.join(HERE, "gpu-smoke", "candidates")
BENCH_DIR = os.path.join(HERE, "bench")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--set", required=True, choices=sorted(SETS), dest="set_name")
    p.add_argument("--kernelbench", "--problems", dest="kernelbench", default=None)
    p.add_argument("--manifest", default=os.path.join(SMOKE_CANDIDATES, "manifest.json"))
    p.add_argument("--workload", default=None)
    p.add_argument("--harness", action="store_true", help="--set small: run the harness per sample")
    p.add_argument("--harness-perf-trials", type=int, default=3)
    p.add_argument("--only", default=None, help="only entries whose candidate path contains SUBSTR")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--full", action="store_true")
    p.add_argument("--backends", default="triton")
    p.add_argument("--time", action="store_true", help="GPU only: median ms of ref and candidate")
    p.add_argument("--atol", type=float, default=1e-2)
    p.add_argument("--rtol", type=float, default=1e-2)
    p.add_argument("--seed", type=int, default=42)
    args = p.parse_args()
    small = args.set_name == "small"
    if args.workload is None:
        args.workload = os.path.join(BENCH_DIR, "workload-small.json" if small else "workload.json")
    if args.kernelbench is None and not small:
        args.kernelbench = os.environ.get("KERNELBENCH_DIR", "/work/shared/kernelbench")
    return args


# ---------------------------------------------------------------------------------------------
# entry sets: each returns dicts with label, candidate (what --only matches), problem_path,
# expect, and the candidate as a file (path) or as source (code, written to a temporary file).


def smoke_entries(args):
    with open(args.manifest) as f:
        manifest = json.load(f)
    backends = set(args.backends.split(","))
    return [{"label": f"{e['candidate']} ({e['problem']})",
             "candidate": e["candidate"],
             "problem_path": os.path.join(args.kernelbench, e["problem"]),
             "expect": e["expect"],
             "path": os.path.join(SMOKE_CANDIDATES, e["candidate"])}
            for e in manifest if e["backend"] in backends and e["expect"] == "correct"]


def bench_module(name):
    """A module of scripts/bench (stdlib only): `workload` expands the workload as the benchmark
    submits it, `naive_mode` runs the harness as its naive mode does."""
    sys.path.insert(0, BENCH_DIR)
    sys.dont_write_bytecode = True  # no __pycache__ beside bench.py
    return importlib.import_module(name)


def bench_entries(args, expects=("correct", "incorrect")):
    backends = set(args.backends.split(","))
    return [{"label": f"{it['label']} [{it['expect']}]",
             "candidate": it["candidate"],
             "problem_path": it["problem_path"],
             "expect": it["expect"],
             "code": it["kernel_code"],
             "item": it}
            for it in bench_module("workload").expand_workload(args.workload, args.kernelbench, REPO)
            if it["backend"] in backends and it["expect"] in expects]


def small_entries(args):
    return bench_entries(args, ("correct", "incorrect", "RUNTIME"))


SETS = {"smoke": smoke_entries, "bench": bench_entries, "small": small_entries}

ARGS = parse_args()
if ARGS.device == "cpu":
    # must be set before triton is imported (the candidates import it)
    os.environ["TRITON_INTERPRET"] = "1"

import torch  # noqa: E402

# Small sizes per problem file (module globals overridden before get_init_inputs / get_inputs),
# each a list of configurations. Block sizes used by the candidates: elementwise 4096, row
# kernels 4096, reductions 32x128, RMSNorm [next_pow2(C), 8192 // next_pow2(C)], matmul
# 128x128x32; the bench's GRPO samples vary BLOCK.
ELEMENTWISE = [{"batch_size": 3, "dim": 5000}, {"batch_size": 1, "dim": 77}]
ROWS = [{"batch_size": 3, "dim": 9000}, {"batch_size": 2, "dim": 100}]
NORM4D = {"batch_size": 3, "features": 5, "dim1": 7, "dim2": 37}
REDUCE = {"batch_size": 3, "dim1": 70, "dim2": 300}
GEMM = [{"batch_size": 5, "in_features": 37, "out_features": 53},
        {"batch_size": 2, "in_features": 300, "out_features": 129}]
GEMM_IO = [{"batch_size": 5, "input_size": 37, "output_size": 53}]
GEMM_IH = [{"batch_size": 5, "input_size": 37, "hidden_size": 53}]
CONV = [{"batch_size": 2, "in_channels": 3, "out_channels": 6, "height": 11, "width": 13}]
SMALL_SIZES = {
    # level 1
    **{name: ELEMENTWISE for name in (
        "19_ReLU.py", "20_LeakyReLU.py", "21_Sigmoid.py", "22_Tanh.py", "25_Swish.py",
        "26_GELU_.py", "27_SELU_.py", "28_HardSigmoid.py", "29_Softplus.py", "30_Softsign.py",
        "31_ELU.py", "32_HardTanh.py", "88_MinGPTNewGelu.py")},
    "23_Softmax.py": ROWS,
    "24_LogSoftmax.py": ROWS,
    "36_RMSNorm_.py": [NORM4D, {"batch_size": 2, "features": 64, "dim1": 20, "dim2": 13}],
    "37_FrobeniusNorm_.py": [NORM4D],
    "38_L1Norm_.py": [{"batch_size": 3, "dim": 9001}, {"batch_size": 2, "dim": 50}],
    "39_L2Norm_.py": [{"batch_size": 3, "dim": 9001}],
    "47_Sum_reduction_over_a_dimension.py": [
        REDUCE, {"batch_size": 2, "dim1": 33, "dim2": 5, "reduce_dim": 2}],
    "48_Mean_reduction_over_a_dimension.py": [REDUCE],
    "49_Max_reduction_over_a_dimension.py": [REDUCE],
    "1_Square_matrix_multiplication_.py": [{"N": 150}, {"N": 37}],
    "2_Standard_matrix_multiplication_.py": [{"M": 150, "K": 70, "N": 130}],
    # level 2
    "12_Gemm_Multiply_LeakyReLU.py": GEMM,
    "76_Gemm_Add_ReLU.py": [dict(GEMM[0], bias_shape=(53,)), dict(GEMM[1], bias_shape=(129,))],
    "63_Gemm_ReLU_Divide.py": GEMM,
    "9_Matmul_Subtract_Multiply_ReLU.py": GEMM,
    "86_Matmul_Divide_GELU.py": GEMM_IO,
    "40_Matmul_Scaling_ResidualAdd.py": GEMM,
    "70_Gemm_Sigmoid_Scaling_ResidualAdd.py": GEMM_IH,
    "53_Gemm_Scaling_Hardtanh_GELU.py": GEMM,
    "81_Gemm_Swish_Divide_Clamp_Tanh_Clamp.py": GEMM,
    "1_Conv2D_ReLU_BiasAdd.py": [dict(CONV[0], bias_shape=(6, 1, 1))],
    "25_Conv2d_Min_Tanh_Tanh.py": CONV,
    "4_Conv2d_Mish_Mish.py": CONV,
    # scripts/bench/problems (the small batch); 1501 and 77 columns: not multiples of 3 either
    "01_swish_bias.py": [{"batch_size": 3, "dim": 1501}, {"batch_size": 2, "dim": 77}],
    "02_row_sum.py": [{"batch_size": 3, "dim": 2501}, {"batch_size": 2, "dim": 77}],
    "03_row_softmax.py": [{"batch_size": 3, "dim": 1501}, {"batch_size": 2, "dim": 77}],
    "04_gemm_bias_relu.py": [{"batch_size": 70, "in_features": 100, "out_features": 90},
                             {"batch_size": 5, "in_features": 37, "out_features": 53}],
    "05_add_mul_gelu.py": [{"batch_size": 3, "dim": 1501}, {"batch_size": 2, "dim": 77}],
    "06_layer_norm.py": [{"batch_size": 3, "dim": 1501}, {"batch_size": 2, "dim": 77}],
}


def load_module(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def to_device(objs, device):
    return [o.to(device) if isinstance(o, torch.Tensor) else o for o in objs]


def cloned(objs, device):
    return [x.clone() if isinstance(x, torch.Tensor) else x for x in to_device(objs, device)]


def signed_like(objs, gen):
    return [torch.randn(o.shape, generator=gen, dtype=o.dtype) * 3.0
            if isinstance(o, torch.Tensor) and o.is_floating_point() else o for o in objs]


def compare(ref, new, atol, rtol):
    """None when equal within tolerance, else a reason."""
    if isinstance(ref, (tuple, list)):
        if not isinstance(new, (tuple, list)) or len(new) != len(ref):
            return "output structure differs"
        return next((w for w in (compare(r, n, atol, rtol) for r, n in zip(ref, new)) if w), None)
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
        return f"values differ: max_abs_diff={(ref.float() - new.float()).abs().max().item():.3e}"
    return None


def max_abs_diff(ref, new):
    outs = ref if isinstance(ref, (tuple, list)) else [ref]
    news = new if isinstance(new, (tuple, list)) else [new]
    return max([(r.float() - n.float()).abs().max().item() if r.numel() else 0.0
                for r, n in zip(outs, news)], default=0.0)


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


def check_one(idx, entry, cand_path, args):
    """(ok, detail) for one entry whose candidate is the file cand_path."""
    configs = [{}] if args.full else SMALL_SIZES.get(os.path.basename(entry["problem_path"]))
    if configs is None:
        return False, "no small-size configuration for this problem (add one to SMALL_SIZES)"
    ref_mod = load_module(entry["problem_path"], f"_check_ref_{idx}")
    cand_mod = load_module(cand_path, f"_check_cand_{idx}")
    device = torch.device(args.device)
    must_match = entry["expect"] == "correct"
    must_raise = entry["expect"] == "RUNTIME"
    first_bad, runs, max_diff, timing = None, 0, 0.0, ""
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
                ref_out = model(*cloned(inputs, device))
                try:
                    new_out = model_new(*cloned(inputs, device))
                except Exception as exc:
                    if not must_raise:
                        raise
                    return True, f"forward raised as expected ({cfg} {vname}: {type(exc).__name__}: {exc})"[:300]
            if args.device == "cuda":
                torch.cuda.synchronize()
            why = compare(ref_out, new_out, args.atol, args.rtol)
            runs += 1
            if why:
                first_bad = first_bad or f"{cfg} {vname}: {why}"
                if must_match:  # the verdict is settled
                    return False, first_bad
                continue
            max_diff = max(max_diff, max_abs_diff(ref_out, new_out))
            if args.time and args.device == "cuda":
                dev_inputs = to_device(inputs, device)
                t_ref, t_new = time_ms(model, dev_inputs), time_ms(model_new, dev_inputs)
                timing = f", ref {t_ref:.3f} ms, new {t_new:.3f} ms, speedup {t_ref / t_new:.2f}x"
            del ref_out, new_out
    if must_raise:
        return False, "expected forward to raise, but it returned"
    if must_match:
        return True, f"{runs} runs match, max_abs_diff={max_diff:.2e}{timing}"
    if first_bad:
        return True, f"differs as expected ({first_bad})"
    return False, "expected to differ, but every comparison matched"


def check_by_harness(entry, args, work_root):
    """The harness's own verdict on the sample (one fresh interpreter on CPU)."""
    naive = bench_module("naive_mode")
    item = dict(entry["item"], num_perf_trials=args.harness_perf_trials)
    _, _, got, result, tail = naive.run_harness_once(item, sys.executable, "cpu", 0, work_root)
    why = ((result or {}).get("error_message") or tail or "").strip().splitlines()
    detail = f"harness verdict {got}" + (f" ({why[0][:200]})" if why and got != "correct" else "")
    return got == entry["expect"], detail


def check_entry(idx, entry, args):
    if args.harness:
        with tempfile.TemporaryDirectory() as d:
            return check_by_harness(entry, args, d)
    if "path" in entry:
        return check_one(idx, entry, entry["path"], args)
    with tempfile.TemporaryDirectory() as d:  # @triton.jit needs the source in a file
        path = os.path.join(d, f"cand_{idx}.py")
        with open(path, "w") as f:
            f.write(entry["code"])
        return check_one(idx, entry, path, args)


def main():
    args = ARGS
    entries = SETS[args.set_name](args)
    if args.only:
        entries = [e for e in entries if args.only in e["candidate"]]
    passed = failed = 0
    seen = set()
    for idx, entry in enumerate(entries):
        if "code" in entry:
            if entry["code"] in seen:  # byte-identical duplicate: same verdict
                continue
            seen.add(entry["code"])
        try:
            ok, detail = check_entry(idx, entry, args)
        except Exception as exc:  # report and continue with the next candidate
            ok, detail = False, f"{type(exc).__name__}: {exc}"
            traceback.print_exc(limit=3)
        passed += ok
        failed += not ok
        print(f"{'PASS' if ok else 'FAIL'} {entry['label']}: {detail}", flush=True)
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
