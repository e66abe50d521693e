#!/usr/bin/env python3
"""Check the benchmark workload's Triton candidates on CPU through the Triton interpreter.

Every `triton` entry of scripts/bench/workload.json that expects `correct` or `incorrect` is
expanded exactly as bench.py expands it (GRPO samples with other BLOCK sizes included), its
KernelBench problem's size globals are shrunk (the interpreter is slow; sizes are not multiples
of the block sizes, so masked tails run), Model and ModelNew are seeded identically before
get_init_inputs() and before each is built (parameters must then match), and the outputs are
compared with torch.allclose(atol=1e-2, rtol=1e-2) on the problem's own inputs and on signed
inputs (randn * 3). A `correct` sample passes when every comparison matches; an `incorrect` one
passes when some comparison differs. Prints one line per sample, then 'N passed, N failed'.

    /root/.cache/crucible/venv/bin/python scripts/bench/check_candidates_cpu.py [--only SUBSTR]
"""
import argparse
import importlib.util
import os
import sys
import tempfile
import traceback

os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported (the candidates import it)

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True  # no __pycache__ beside bench.py
import bench  # noqa: E402  (stdlib only: expands the workload)
import torch  # noqa: E402

ELEMENTWISE = [{"batch_size": 3, "dim": 5000}, {"batch_size": 1, "dim": 77}]
GEMM = [{"batch_size": 5, "in_features": 37, "out_features": 53},
        {"batch_size": 2, "in_features": 300, "out_features": 129}]
GEMM_IO = [{"batch_size": 5, "input_size": 37, "output_size": 53}]
GEMM_IH = [{"batch_size": 5, "input_size": 37, "hidden_size": 53}]
CONV = [{"batch_size": 2, "in_channels": 3, "out_channels": 6, "height": 11, "width": 13}]
SMALL_SIZES = {
    # level 1 (as scripts/gpu-smoke/check_candidates_cpu.py)
    "19_ReLU.py": ELEMENTWISE, "20_LeakyReLU.py": ELEMENTWISE, "21_Sigmoid.py": ELEMENTWISE,
    "22_Tanh.py": ELEMENTWISE, "25_Swish.py": ELEMENTWISE, "26_GELU_.py": ELEMENTWISE,
    "28_HardSigmoid.py": ELEMENTWISE, "30_Softsign.py": ELEMENTWISE, "32_HardTanh.py": ELEMENTWISE,
    "88_MinGPTNewGelu.py": ELEMENTWISE,
    "23_Softmax.py": [{"batch_size": 3, "dim": 9000}, {"batch_size": 2, "dim": 100}],
    "24_LogSoftmax.py": [{"batch_size": 3, "dim": 9000}, {"batch_size": 2, "dim": 100}],
    "36_RMSNorm_.py": [{"batch_size": 3, "features": 5, "dim1": 7, "dim2": 37}],
    "38_L1Norm_.py": [{"batch_size": 3, "dim": 9001}, {"batch_size": 2, "dim": 50}],
    "47_Sum_reduction_over_a_dimension.py": [{"batch_size": 3, "dim1": 70, "dim2": 300}],
    "48_Mean_reduction_over_a_dimension.py": [{"batch_size": 3, "dim1": 70, "dim2": 300}],
    "49_Max_reduction_over_a_dimension.py": [{"batch_size": 3, "dim1": 70, "dim2": 300}],
    "1_Square_matrix_multiplication_.py": [{"N": 150}, {"N": 37}],
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
}


def load_module(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def signed_like(objs, gen):
    return [torch.randn(o.shape, generator=gen, dtype=o.dtype) * 3.0
            if isinstance(o, torch.Tensor) and o.is_floating_point() else o for o in objs]


def differs(ref, new, atol, rtol):
    """None when equal within tolerance, else a reason."""
    if isinstance(ref, (tuple, list)):
        if not isinstance(new, (tuple, list)) or len(new) != len(ref):
            return "output structure differs"
        return next((w for w in (differs(r, n, atol, rtol) for r, n in zip(ref, new)) if w), None)
    if not isinstance(new, torch.Tensor):
        return f"output is {type(new).__name__}"
    if new.shape != ref.shape or new.dtype != ref.dtype:
        return f"shape/dtype {tuple(new.shape)} {new.dtype} != {tuple(ref.shape)} {ref.dtype}"
    if not torch.allclose(ref, new, atol=atol, rtol=rtol):
        return f"values differ: max_abs_diff={(ref.float() - new.float()).abs().max().item():.3e}"
    return None


def check(idx, item, args):
    """(ok, detail) for one expanded workload sample."""
    problem_file = os.path.basename(item["problem"])
    configs = SMALL_SIZES.get(problem_file)
    if configs is None:
        return False, "no small-size configuration (add one to SMALL_SIZES)"
    ref_mod = load_module(item["problem_path"], f"_bench_ref_{idx}")
    with tempfile.TemporaryDirectory() as d:  # @triton.jit needs the source in a file
        path = os.path.join(d, f"cand_{idx}.py")
        with open(path, "w") as f:
            f.write(item["kernel_code"])
        cand_mod = load_module(path, f"_bench_cand_{idx}")
        results, max_diff = [], 0.0
        for cfg in configs:
            for name, value in cfg.items():
                if not hasattr(ref_mod, name):
                    return False, f"problem has no global {name!r}"
                setattr(ref_mod, name, value)
            torch.manual_seed(args.seed)
            init = ref_mod.get_init_inputs()
            torch.manual_seed(args.seed)
            model = ref_mod.Model(*init).eval()
            torch.manual_seed(args.seed)
            model_new = cand_mod.ModelNew(*init).eval()
            torch.manual_seed(args.seed + 1)
            base = ref_mod.get_inputs()
            for vname, inputs in (("rand", base), ("signed", signed_like(base, torch.Generator().manual_seed(args.seed + 2)))):
                with torch.no_grad():
                    ref_out = model(*[x.clone() if isinstance(x, torch.Tensor) else x for x in inputs])
                    new_out = model_new(*[x.clone() if isinstance(x, torch.Tensor) else x for x in inputs])
                why = differs(ref_out, new_out, args.atol, args.rtol)
                results.append((cfg, vname, why))
                if why is None:
                    outs = ref_out if isinstance(ref_out, (tuple, list)) else [ref_out]
                    news = new_out if isinstance(new_out, (tuple, list)) else [new_out]
                    for r, n in zip(outs, news):
                        max_diff = max(max_diff, (r.float() - n.float()).abs().max().item() if r.numel() else 0.0)
    bad = [(c, v, w) for c, v, w in results if w]
    if item["expect"] == "correct":
        if bad:
            c, v, w = bad[0]
            return False, f"{c} {v}: {w}"
        return True, f"{len(results)} runs match, max_abs_diff={max_diff:.2e}"
    if bad:
        return True, f"differs as expected ({bad[0][2]})"
    return False, "expected to differ, but every comparison matched"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workload", default=os.path.join(HERE, "workload.json"))
    ap.add_argument("--problems", default=os.environ.get("KERNELBENCH_DIR", "/work/shared/kernelbench"))
    ap.add_argument("--only", default=None, help="only samples whose candidate path contains SUBSTR")
    ap.add_argument("--atol", type=float, default=1e-2)
    ap.add_argument("--rtol", type=float, default=1e-2)
    ap.add_argument("--seed", type=int, default=42)
    args = ap.parse_args()
    items = [it for it in bench.expand_workload(args.workload, args.problems, REPO)
             if it["backend"] == "triton" and it["expect"] in ("correct", "incorrect")]
    if args.only:
        items = [it for it in items if args.only in it["candidate"]]
    passed = failed = 0
    seen = set()
    for idx, item in enumerate(items):
        if item["kernel_code"] in seen:  # byte-identical duplicate: same verdict
            continue
        seen.add(item["kernel_code"])
        try:
            ok, detail = check(idx, item, args)
        except Exception as exc:
            ok, detail = False, f"{type(exc).__name__}: {exc}"
            traceback.print_exc(limit=3)
        passed += ok
        failed += not ok
        print(f"{'PASS' if ok else 'FAIL'} {item['label']} [{item['expect']}]: {detail}", flush=True)
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
