#!/usr/bin/env python3
"""The harness's layering (gpu-worker/harness/), proved from its source.

    python tests/harness/check_layers.py [harness_dir]

Parses every module's imports (ast, the harness is never imported) and fails when:
- a module imports one in its own layer or a layer above it (LAYERS, bottom first);
- the judge's side and the runner's imports cross (APART): the runner is the candidate's
  process, the judge the trusted one, and they share only the layers below both;
- the imports of harness modules form a circle (implied by the layers; checked on its own so
  that a wrong LAYERS table cannot hide one);
- a .py file in the directory is in no layer, or a layer names a file that is not there;
- harness.py's MODULES (the order it loads the modules in) loads a module before one it
  imports, or leaves a module out.
Harness modules import each other as `crucible_<name>` (harness.py registers them under those
names). Exit 0 when the layering holds, 1 with one line per violation.
"""
import ast
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HARNESS_DIR = os.path.join(REPO, "gpu-worker", "harness")
PREFIX = "crucible_"

# Bottom first. A module may import only modules of strictly lower layers.
LAYERS = (
    ("trusted",),                                   # captured before any candidate code runs
    ("errors", "contexts", "nvcc_overlap"),         # a context's queues; nvcc's front ends
    ("channel", "spec"),                            # the result channel, the typed spec
    ("tensors", "transport", "sandbox", "screen", "selftest"),
    ("builds", "integrity", "triton_aot", "memory", "timing_check"),
    ("judge_setup", "judge_load", "judge_correctness", "judge_performance", "judge_verify",
     "runner_checks", "runner_profile"),
    ("judge", "runner"),
    ("harness",),                                   # the entry point
    ("template",),                                  # loads harness.py by path
    ("pch",),                                       # run by the worker, imports no module
)
# Neither side may import the other, whatever their layers.
APART = (
    ("judge", "judge_setup", "judge_load", "judge_correctness", "judge_performance",
     "judge_verify"),
    ("runner", "runner_checks", "runner_profile"),
)


def imports_of(path):
    """The harness modules a file imports (names without the prefix), with line numbers."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        for name in names:
            top = name.split(".")[0]
            if top.startswith(PREFIX):
                found.append((top[len(PREFIX):], node.lineno))
    return found


def load_order(path):
    """harness.py's MODULES tuple."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "MODULES" for t in node.targets):
            return list(ast.literal_eval(node.value))
    return None


def find_circle(graph):
    """One import circle as a list of modules, or None."""
    state = {}

    def visit(node, stack):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                circle = visit(nxt, stack)
                if circle:
                    return circle
        stack.pop()
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state:
            circle = visit(node, [])
            if circle:
                return circle
    return None


def check(harness_dir):
    problems = []
    layer_of = {m: i for i, layer in enumerate(LAYERS) for m in layer}
    side_of = {m: i for i, side in enumerate(APART) for m in side}
    files = sorted(f[:-3] for f in os.listdir(harness_dir) if f.endswith(".py"))
    for name in files:
        if name not in layer_of:
            problems.append(f"{name}.py: in no layer of check_layers.py")
    for name in layer_of:
        if name not in files:
            problems.append(f"{name}.py: named in a layer but not in {harness_dir}")

    graph = {}
    for name in files:
        deps = imports_of(os.path.join(harness_dir, name + ".py"))
        graph[name] = {dep for dep, _ in deps}
        for dep, line in deps:
            where = f"{name}.py:{line}"
            if dep not in layer_of:
                problems.append(f"{where}: imports {PREFIX}{dep}, which is no harness module")
            elif name in layer_of and layer_of[dep] >= layer_of[name]:
                problems.append(f"{where}: imports {dep} (layer {layer_of[dep]}), not below "
                                f"its own layer {layer_of[name]}")
            if name in side_of and dep in side_of and side_of[name] != side_of[dep]:
                problems.append(f"{where}: imports {dep} across the judge/runner boundary")

    circle = find_circle(graph)
    if circle:
        problems.append("import circle: " + " -> ".join(circle))

    order = load_order(os.path.join(harness_dir, "harness.py"))
    if order is None:
        problems.append("harness.py: no MODULES tuple")
    else:
        expected = sorted(set(files) - {"harness", "template", "pch"})
        if sorted(order) != expected or len(order) != len(set(order)):
            problems.append(f"harness.py: MODULES {order} is not each module once {expected}")
        for i, name in enumerate(order):
            late = sorted(d for d in graph.get(name, ()) if d in order[i:])
            if late:
                problems.append(f"harness.py: MODULES loads {name} before {', '.join(late)}, "
                                "which it imports")
    return problems


def main():
    harness_dir = sys.argv[1] if len(sys.argv) > 1 else HARNESS_DIR
    problems = check(harness_dir)
    for p in problems:
        print(p)
    if problems:
        print(f"check_layers: {len(problems)} violation(s)")
        return 1
    print(f"check_layers: {len(LAYERS)} layers, the harness's imports respect them")
    return 0


if __name__ == "__main__":
    sys.exit(main())
