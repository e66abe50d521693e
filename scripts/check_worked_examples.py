#!/usr/bin/env python3
"""Check the built-in worked examples of one-shot and few-shot prompts
(api-server/src/prompts/worked/): each `<name>.problem.py` describes a Model, and each
`<name>.<backend>.py` solving it must define ModelNew with Model's constructor and forward
signature. Triton solutions also run on CPU through the Triton interpreter against their Model
(seeded identically before building each, KernelBench-style; sizes shrunk, tails masked),
twice with different inputs; CUDA solutions need a GPU, so they are parsed, their
signatures compared and their load_inline call checked. Prints one line per example, exits 1
on any failure.

Usage: $CRUCIBLE_PYTHON scripts/check_worked_examples.py
"""
import ast
import importlib.util
import os
import sys

os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported

import torch  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
WORKED = os.path.join(os.path.dirname(HERE), "api-server", "src", "prompts", "worked")
BACKENDS = ("triton", "cuda")


def signature(tree, cls, method):
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == method:
                    return [a.arg for a in item.args.args]
    return None


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_against(problem_path, solution_path):
    problem = load(problem_path, "worked_problem")
    solution = load(solution_path, "worked_solution")
    # Smaller sizes keep the interpreter fast; odd ones keep the masked tails exercised.
    for name, small in (("batch_size", 7), ("dim", 77), ("rows", 5), ("cols", 77),
                        ("in_features", 45), ("out_features", 37)):
        if hasattr(problem, name):
            setattr(problem, name, small)
    for seed in (0, 1):
        torch.manual_seed(seed)
        init = problem.get_init_inputs()
        torch.manual_seed(seed)
        reference = problem.Model(*init)
        torch.manual_seed(seed)
        candidate = solution.ModelNew(*init)
        torch.manual_seed(seed + 100)
        inputs = problem.get_inputs()
        want = reference(*inputs)
        got = candidate(*inputs)
        if got.shape != want.shape or not torch.allclose(got, want, atol=1e-4, rtol=1e-4):
            return f"outputs differ (seed {seed}): max abs diff {(got - want).abs().max().item()}"
    return None


def check(name, backend):
    problem_path = os.path.join(WORKED, f"{name}.problem.py")
    solution_path = os.path.join(WORKED, f"{name}.{backend}.py")
    with open(problem_path) as f:
        problem_tree = ast.parse(f.read())
    with open(solution_path) as f:
        source = f.read()
    tree = ast.parse(source)
    for method in ("__init__", "forward"):
        want = signature(problem_tree, "Model", method)
        got = signature(tree, "ModelNew", method)
        if got is None:
            return f"no ModelNew.{method}"
        if got != want:
            return f"ModelNew.{method}{got} differs from Model.{method}{want}"
    if backend == "cuda":
        calls = {n.func.id for n in ast.walk(tree)
                 if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
        if "load_inline" not in calls or "__global__" not in source:
            return "no load_inline build of a __global__ kernel"
        return None
    if "@triton.jit" not in source:
        return "no @triton.jit kernel"
    return run_against(problem_path, solution_path)


def main():
    names = sorted(f[: -len(".problem.py")] for f in os.listdir(WORKED) if f.endswith(".problem.py"))
    failed = 0
    checked = 0
    for name in names:
        for backend in BACKENDS:
            if not os.path.exists(os.path.join(WORKED, f"{name}.{backend}.py")):
                print(f"FAIL {name}: no {backend} solution")
                failed += 1
                continue
            checked += 1
            try:
                error = check(name, backend)
            except Exception as e:  # a crash is a failure of that example, not of the check
                error = f"{type(e).__name__}: {e}"
            print(f"{'FAIL' if error else 'ok  '} {name}.{backend}" + (f": {error}" if error else ""))
            failed += bool(error)
    print(f"{checked - failed} passed, {failed} failed")
    if failed or not names:
        sys.exit(1)


if __name__ == "__main__":
    main()
