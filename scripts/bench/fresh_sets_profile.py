"""Where the timing check's fresh sets spend their time (the judge's `fresh_sets`, made inside
the device's exclusive timing turn): for each problem of the small workload, on the GPU, the
same steps as the judge with the harness's own functions, `--sets` sets at a time:

  as_judge     per set: seed_all, CUDA as the default device, get_inputs, to_device,
               to_precision, the reference (queued), then one sync for all (today's path)
  seed_once    the same, seeded once for all the sets (the generator moves on between sets)
  parts        each step alone, per set: seed_all, entering/leaving the device mode,
               get_inputs in it, to_device + to_precision, the reference

and a cProfile of `as_judge` for the first problem, written to --out. Figures, not asserts.

    python3 scripts/bench/fresh_sets_profile.py [--sets 256] [--out DIR]
"""
import argparse
import cProfile
import importlib.util
import io
import json
import os
import pstats
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
entry = importlib.util.spec_from_file_location(
    "crucible_harness_entry", os.path.join(REPO, "gpu-worker", "harness", "harness.py"))
entry.loader.exec_module(importlib.util.module_from_spec(entry))
import torch  # noqa: E402

from crucible_tensors import as_call_args, seed_all, to_device, to_precision  # noqa: E402
from crucible_trusted import capture_trusted  # noqa: E402

capture_trusted(torch)

PROBLEMS = ("01_swish_bias.py", "02_row_sum.py", "03_row_softmax.py", "04_gemm_bias_relu.py",
            "05_add_mul_gelu.py", "06_layer_norm.py")


def load(name):
    spec = importlib.util.spec_from_file_location(name[:-3], os.path.join(HERE, "problems", name))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def one_set(problem, model, seed, seeded=True):
    if seeded:
        seed_all(seed, "cuda")
    with torch.device("cuda"):
        inputs = to_precision(to_device(as_call_args(problem.get_inputs()), "cuda"), "fp32")
    return inputs, model(*inputs)


def timed_ms(fn, n):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for i in range(n):
        fn(i)
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e3


def profile_problem(name, n):
    problem = load(name)
    with torch.device("cuda"):
        model = problem.Model(*problem.get_init_inputs())
    model = model.cuda().eval()
    with torch.no_grad():
        for _ in range(3):
            one_set(problem, model, 0)
        row = {"problem": name}
        row["as_judge_ms"] = timed_ms(lambda i: one_set(problem, model, i), n)
        seed_all(12345, "cuda")
        row["seed_once_ms"] = timed_ms(lambda i: one_set(problem, model, i, seeded=False), n)
        row["seed_all_ms"] = timed_ms(lambda i: seed_all(i, "cuda"), n)

        def mode(_i):
            with torch.device("cuda"):
                pass
        row["device_mode_ms"] = timed_ms(mode, n)

        def inputs(_i):
            with torch.device("cuda"):
                return problem.get_inputs()
        row["get_inputs_ms"] = timed_ms(inputs, n)
        with torch.device("cuda"):
            raw = as_call_args(problem.get_inputs())
        row["to_device_precision_ms"] = timed_ms(
            lambda i: to_precision(to_device(raw, "cuda"), "fp32"), n)
        row["reference_ms"] = timed_ms(lambda i: model(*raw), n)
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sets", type=int, default=256)
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    args = ap.parse_args()
    torch.cuda.init()
    rows = [profile_problem(name, args.sets) for name in PROBLEMS]
    problem = load(PROBLEMS[3])
    model = problem.Model(*problem.get_init_inputs()).cuda().eval()
    prof = cProfile.Profile()
    with torch.no_grad():
        prof.enable()
        timed_ms(lambda i: one_set(problem, model, i), args.sets)
        prof.disable()
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(30)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "fresh-sets-profile.txt"), "w") as f:
        f.write(text.getvalue())
    with open(os.path.join(args.out, "fresh-sets.json"), "w") as f:
        json.dump(rows, f, indent=1)
    keys = list(rows[0])
    print(f"fresh sets, {args.sets} a problem, ms for all of them (torch {torch.__version__})")
    print("  ".join(f"{k:>22}" for k in keys))
    for r in rows:
        print("  ".join(f"{r[k]:>22.1f}" if isinstance(r[k], float) else f"{r[k]:>22}" for k in keys))


if __name__ == "__main__":
    main()
