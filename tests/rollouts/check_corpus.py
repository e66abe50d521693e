#!/usr/bin/env python3
"""Checks the rollout corpus without any server.

    python3 tests/rollouts/check_corpus.py                  # parsing + consistency only
    python3 tests/rollouts/check_corpus.py --run            # + every kernel through the harness
    python3 tests/rollouts/check_corpus.py --run --only r07 --only r44 -v
    python3 tests/rollouts/check_corpus.py --run --kernelbench   # + shrunk KernelBench problems
    python3 tests/rollouts/check_corpus.py --verify-mapping      # problems.jsonl vs KernelBench

Always: every rollout's completion is parsed with a re-implementation of
rl/src/reward.rs `parse_completion` and format_ok / thinking / kernel_bytes / status are
compared with expected.json; the corpus's own rules are checked (ids, registry, profiles,
one long kernel, reward specs that follow the profile formulas).

--run: each extracted kernel is evaluated on CPU by tests/harness/run_harness.py (the harness
a worker runs) against the problem problems.jsonl maps it to, with the rollout's backend; the
verdict (Verdict::of of shared/src/task.rs), error code and compiled flag are compared with
the expectation, and the reward computed from the actual result (reward.rs formulas) with the
expected spec evaluated at the actual speedup and coverage.

--kernelbench: the same kernels against the real KernelBench reference files
(../shared/kernelbench) with their size constants shrunk for the CPU interpreter (the
sources are unchanged otherwise: torch.rand inputs, init arguments, odd sizes like 4095):
a kernel must work for both, so the CPU expectation holds there as well.

--verify-mapping: for every registry entry, the KernelBench file and ours are loaded (torch
needed; run in the venv python): the same positional Model.__init__ parameters, init
arguments of the same structure (types; sizes may differ), the same number / rank / dtype of
inputs (KernelBench's drawn on the meta device, nothing allocated), the same parameter names
and shapes when both Models are built with our init arguments and with KernelBench's (meta),
and identical outputs of both Models, built under the same seed, on our inputs. So a
ModelNew written for one builds the same weights and computes the same function on the other.

Standard library only (the harness child and --verify-mapping use the venv python).
"""
import argparse
import concurrent.futures
import importlib.util
import json
import math
import os
import subprocess
import sys
import tempfile
import textwrap

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
KERNELBENCH = os.path.normpath(os.path.join(REPO, "..", "shared", "kernelbench"))
VENV_PYTHON = os.environ.get("CRUCIBLE_PYTHON",
                             os.path.expanduser("~/.cache/crucible/venv/bin/python"))
PROFILES = ("kernel_rl", "kevin", "drkernel")
VERDICTS = ("ok", "incorrect", "decoy", "hack", "error")
LENGTH_FULL_BYTES, LENGTH_ZERO_BYTES = 2_000, 20_000

# Size constants of the KernelBench files, shrunk for the Triton interpreter; appended to the
# unchanged source (get_inputs / get_init_inputs read the module globals when called).
KERNELBENCH_SMALL = {
    (1, 1): "N = 100\n",
    (1, 2): "M = 64\nK = 200\nN = 48\n",
    (1, 19): "batch_size = 16\ndim = 3000\n",
    (1, 23): "batch_size = 4\ndim = 5000\n",
    (1, 47): "batch_size = 2\ndim1 = 70\ndim2 = 4095\n",
    (3, 1): "batch_size = 8\ninput_size = 300\nlayer_sizes = [200, 100]\noutput_size = 50\n",
}


# ---------------------------------------------------------------------------------------------
# rl/src/reward.rs, re-implemented
# ---------------------------------------------------------------------------------------------

def _section(text, tag):
    open_, close = f"<{tag}>", f"</{tag}>"
    start = text.find(open_)
    if start < 0:
        return None
    start += len(open_)
    end = text.find(close, start)
    return None if end < 0 else text[start:end]


def _strip_sections(text):
    out = text
    for tag in ("think", "thinking"):
        open_, close = f"<{tag}>", f"</{tag}>"
        while True:
            start = out.find(open_)
            if start < 0:
                break
            end = out.find(close, start)
            if end < 0:
                break
            out = out[:start] + out[end + len(close):]
    return out


def _first_fenced_block(text):
    start = text.find("```")
    if start < 0:
        return None
    after = text[start + 3:]
    newline = after.find("\n")
    if newline < 0:
        return None
    body = after[newline + 1:]
    end = body.find("```")
    if end < 0:
        return None
    code = body[:end].rstrip(" \t")
    return code if code.strip() else None


def parse_completion(text):
    """(kernel or None, format_ok, thinking text or None), as reward.rs parse_completion."""
    thinking = None
    for tag in ("think", "thinking"):
        s = _section(text, tag)
        if s is not None and s.strip():
            thinking = s.strip()
            break
    answer = _strip_sections(text)
    at = answer.find("<KERNEL>")
    tagged = _first_fenced_block(answer[at + len("<KERNEL>"):]) if at >= 0 else None
    kernel = tagged if tagged is not None else _first_fenced_block(answer)
    return kernel, tagged is not None, thinking


def length_score(kernel_bytes):
    if kernel_bytes is None:
        return 0.0
    if kernel_bytes <= LENGTH_FULL_BYTES:
        return 1.0
    return max(0.0, 1.0 - (kernel_bytes - LENGTH_FULL_BYTES)
               / (LENGTH_ZERO_BYTES - LENGTH_FULL_BYTES))


def reward_spec(profile, verdict, format_ok, thinking, kernel_bytes, compiled,
                decoy_reward="zero"):
    """What the expected spec must be, from the default weights of docs/REWARDS.md (a decoy
    scores 0 unless the rollout's decoy_reward is "profile")."""
    zero = {"const": 0.0, "per_speedup": 0.0, "speedup_cap": None, "per_coverage": 0.0}
    if verdict == "hack" or (verdict == "decoy" and decoy_reward == "zero"):
        return zero
    if profile == "kernel_rl":
        correct = 1.0 if verdict == "ok" else 0.0
        return dict(zero, const=0.1 * format_ok + 0.2 * bool(compiled) + correct
                    + 0.05 * length_score(kernel_bytes) + 0.1 * thinking)
    if profile == "kevin":
        if format_ok and verdict == "ok":
            return {"const": 0.3, "per_speedup": 1.0, "speedup_cap": None, "per_coverage": 0.0}
        return zero
    if verdict == "ok":
        return {"const": 0.5, "per_speedup": 0.5, "speedup_cap": 3.0, "per_coverage": 0.5}
    return zero


def spec_value(spec, speedup, coverage):
    s = speedup or 0.0
    cap = spec["speedup_cap"]
    if cap is not None:
        s = min(s, cap)
    return spec["const"] + spec["per_speedup"] * max(s, 0.0) + spec["per_coverage"] * (
        coverage or 0.0)


WEIGHTS = {
    "kernel_rl": dict(format=0.1, compile=0.2, correctness=1.0, speed=0.0, length=0.05,
                      thinking=0.1, coverage=0.0, cap=10.0),
    "kevin": dict(format=0.0, compile=0.0, correctness=0.3, speed=1.0, length=0.0,
                  thinking=0.0, coverage=0.0, cap=1e9),
    "drkernel": dict(format=0.0, compile=0.0, correctness=0.5, speed=0.5, length=0.0,
                     thinking=0.0, coverage=0.5, cap=3.0),
}


def actual_reward(profile, facts, result):
    """reward.rs `reward` for an evaluated rollout (result: the Rust-side fields) or None."""
    w = WEIGHTS[profile]
    c = dict(format=float(facts["format_ok"]), thinking=float(facts["thinking"]),
             length=length_score(facts["kernel_bytes"]), compile=0.0, correctness=0.0,
             speed=0.0, coverage=0.0)
    verdict = result["verdict"] if result else None
    if result:
        c["compile"] = float(result["compiled"])
        if result["trials_total"] > 0 and verdict != "decoy":
            c["correctness"] = result["trials_passed"] / result["trials_total"]
        if verdict == "ok":
            c["speed"] = min(max(result["speedup"] or 0.0, 0.0), w["cap"])
            c["coverage"] = min(max(result["custom_time_coverage"] or 0.0, 0.0), 1.0)
    if verdict == "hack":
        return 0.0
    if profile == "kernel_rl":
        return sum(w[k] * c[k] for k in ("format", "compile", "correctness", "speed",
                                         "length", "thinking", "coverage"))
    if profile == "kevin":
        if not facts["format_ok"] or verdict != "ok":
            return 0.0
        return w["correctness"] + w["speed"] * c["speed"]
    if verdict != "ok":
        return 0.0
    return w["correctness"] + w["speed"] * c["speed"] + w["coverage"] * c["coverage"]


def verdict_of(error_code, correct, flags, custom_kernel_count):
    """shared/src/task.rs Verdict::of."""
    hack_flag = any(f.get("severity") == "hack" for f in flags)
    cheat_screened = error_code == "SCREENED" and any(
        f.get("severity") == "reject" and f.get("rule") != "no-modelnew" for f in flags)
    if hack_flag or cheat_screened or error_code == "INTEGRITY":
        return "hack"
    if error_code == "CORRECTNESS":
        return "incorrect"
    if error_code is not None:
        return "error"
    if not correct:
        return "incorrect"
    if custom_kernel_count == 0:
        return "decoy"
    return "ok"


# ---------------------------------------------------------------------------------------------
# Loading and static checks
# ---------------------------------------------------------------------------------------------

def load():
    with open(os.path.join(HERE, "problems.jsonl"), encoding="utf-8") as f:
        problems = [json.loads(line) for line in f if line.strip()]
    with open(os.path.join(HERE, "rollouts.jsonl"), encoding="utf-8") as f:
        rollouts = [json.loads(line) for line in f if line.strip()]
    with open(os.path.join(HERE, "expected.json"), encoding="utf-8") as f:
        expected = json.load(f)
    return problems, rollouts, expected


def registry(problems):
    reg = {}
    for p in problems:
        assert set(p) == {"level", "id", "name", "path"}, p
        key = (p["level"], p["id"])
        assert key not in reg, f"problem {key} registered twice"
        path = os.path.normpath(os.path.join(HERE, p["path"]))
        assert os.path.isfile(path), path
        reg[key] = dict(p, abspath=path)
    return reg


def static_checks(problems, rollouts, expected):
    """Returns (errors, facts per rollout id)."""
    errors = []
    reg = registry(problems)
    ids = [r["id"] for r in rollouts]
    if len(ids) < 44:
        errors.append(f"only {len(ids)} rollouts (want >= 44)")
    if len(set(ids)) != len(ids):
        errors.append("duplicate rollout ids")
    if set(ids) != set(expected):
        errors.append(f"ids differ between rollouts.jsonl and expected.json: "
                      f"{sorted(set(ids) ^ set(expected))}")
    facts = {}
    long_kernels = []
    by_profile = {p: set() for p in PROFILES}
    for r in rollouts:
        rid = r["id"]
        if set(r) - {"decoy_reward"} != {"id", "problem", "completion", "backend", "turn",
                                         "profile"} \
                or r.get("decoy_reward", "zero") not in ("zero", "profile"):
            errors.append(f"{rid}: fields {sorted(r)}")
        if r["profile"] not in PROFILES or r["backend"] not in ("triton", "cuda") \
                or r["turn"] not in (0, 1):
            errors.append(f"{rid}: bad profile/backend/turn")
        key = (r["problem"]["level"], r["problem"]["id"])
        if key not in reg:
            errors.append(f"{rid}: problem {key} is not in problems.jsonl")
        e = expected.get(rid)
        if e is None:
            continue
        kernel, format_ok, thinking = parse_completion(r["completion"])
        kb = None if kernel is None else len(kernel.encode("utf-8"))
        facts[rid] = {"kernel": kernel, "format_ok": format_ok, "thinking": thinking is not None,
                      "kernel_bytes": kb}
        got = {"format_ok": format_ok, "thinking": thinking is not None, "kernel_bytes": kb,
               "status": "no_kernel" if kernel is None else "done"}
        for k, v in got.items():
            if e.get(k) != v:
                errors.append(f"{rid}: {k} parsed {v!r}, expected {e.get(k)!r}")
        if e["verdict"] not in VERDICTS + (None,) or (e["verdict"] is None) != (
                e["status"] == "no_kernel"):
            errors.append(f"{rid}: verdict {e['verdict']!r} with status {e['status']!r}")
        if kernel is not None and "class ModelNew" not in kernel:
            errors.append(f"{rid}: the kernel defines no class ModelNew")
        if kb is not None and kb > LENGTH_FULL_BYTES:
            long_kernels.append(rid)
        decoys = r.get("decoy_reward", "zero")
        want = reward_spec(r["profile"], e["verdict"], e["format_ok"], e["thinking"],
                           e["kernel_bytes"], e["compiled"], decoys)
        if any((want[k] is None) != (e["reward"].get(k) is None) or (
                want[k] is not None and abs(want[k] - e["reward"][k]) > 1e-9) for k in want):
            errors.append(f"{rid}: reward spec {e['reward']} != formula {want}")
        if "gpu" in e:
            g = e["gpu"]
            want = reward_spec(r["profile"], g["verdict"], e["format_ok"], e["thinking"],
                               e["kernel_bytes"], g["compiled"], decoys)
            if any((want[k] is None) != (g["reward"].get(k) is None) or (
                    want[k] is not None and abs(want[k] - g["reward"][k]) > 1e-9)
                    for k in want):
                errors.append(f"{rid}: gpu reward spec {g['reward']} != formula {want}")
        by_profile[r["profile"]].add(e["verdict"] or "no_kernel")
        if r["turn"] == 1 and not any(
                o["turn"] == 0 and o["problem"] == r["problem"] and o["profile"] == r["profile"]
                for o in rollouts):
            errors.append(f"{rid}: turn 1 without a turn-0 rollout of the same problem/profile")
    if len(long_kernels) != 1:
        errors.append(f"want exactly one kernel over {LENGTH_FULL_BYTES} bytes, got "
                      f"{long_kernels}")
    for p, seen in by_profile.items():
        missing = {"ok", "incorrect", "hack", "decoy", "error", "no_kernel"} - seen
        if missing:
            errors.append(f"profile {p} has no rollout with verdict {sorted(missing)}")
    return errors, facts, reg


# ---------------------------------------------------------------------------------------------
# Running the harness
# ---------------------------------------------------------------------------------------------

def _run_harness_module():
    spec = importlib.util.spec_from_file_location(
        "crucible_run_harness", os.path.join(REPO, "tests", "harness", "run_harness.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def kernelbench_file(level, pid):
    d = os.path.join(KERNELBENCH, f"level{level}")
    for name in os.listdir(d):
        if name.endswith(".py") and name.split("_", 1)[0] == str(pid):
            return os.path.join(d, name)
    raise FileNotFoundError(f"KernelBench level {level} problem {pid} under {d}")


def evaluate(rh, problem_path, kernel, backend, args):
    with tempfile.TemporaryDirectory(prefix="crucible-rollout-") as tmp:
        cand = os.path.join(tmp, "candidate.py")
        with open(cand, "w", encoding="utf-8") as f:
            f.write(kernel)
        spec = {"backend": backend, "device": "cpu", "num_correct_trials": args.trials,
                "num_perf_trials": args.perf_trials, "num_warmup": 2,
                "measure_performance": True}
        report = rh.run(problem_path, cand, spec, timeout=args.timeout, python=args.python)
    res = report["result"]
    if res is None:   # ended without a result: what the worker would decide
        return {"verdict": "error", "error_code": report["worker_verdict"],
                "compiled": "correctness" in report["stages"], "trials_passed": 0,
                "trials_total": args.trials, "speedup": None, "custom_time_coverage": None,
                "flags": [], "message": report["stderr_tail"][-300:]}
    return {"verdict": verdict_of(res["error_code"], res["correct"], res.get("flags") or [],
                                  res.get("custom_kernel_count")),
            "error_code": res["error_code"], "compiled": res["compiled"],
            "trials_passed": res["trials_passed"], "trials_total": res["trials_total"],
            "speedup": res.get("speedup"), "custom_time_coverage": res.get(
                "custom_time_coverage"), "flags": res.get("flags") or [],
            "message": (res.get("error_message") or "")[:300]}


def run_all(rollouts, expected, facts, reg, args, kernelbench):
    rh = _run_harness_module()
    jobs = []
    small_refs = {}
    tmpdir = tempfile.mkdtemp(prefix="crucible-kb-small-")
    for r in rollouts:
        f = facts.get(r["id"])
        if f is None or f["kernel"] is None:
            continue
        if args.only and not any(r["id"].startswith(o) for o in args.only):
            continue
        key = (r["problem"]["level"], r["problem"]["id"])
        if kernelbench:
            if key not in small_refs:
                with open(kernelbench_file(*key), encoding="utf-8") as src:
                    text = src.read()
                path = os.path.join(tmpdir, f"kb_{key[0]}_{key[1]}.py")
                with open(path, "w", encoding="utf-8") as out:
                    out.write(text + "\n\n# shrunk for the CPU interpreter\n"
                              + KERNELBENCH_SMALL[key])
                small_refs[key] = path
            jobs.append((r, small_refs[key]))
        else:
            jobs.append((r, reg[key]["abspath"]))
    results = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = {pool.submit(evaluate, rh, path, facts[r["id"]]["kernel"], r["backend"], args):
                   r for r, path in jobs}
        for fut in concurrent.futures.as_completed(futures):
            r = futures[fut]
            try:
                results[r["id"]] = fut.result()
            except Exception as e:   # a harness problem, reported as a mismatch
                results[r["id"]] = {"verdict": "harness-failure", "error_code": repr(e),
                                    "compiled": None, "trials_passed": 0, "trials_total": 0,
                                    "speedup": None, "custom_time_coverage": None,
                                    "flags": [], "message": repr(e)}
            if args.verbose:
                res = results[r["id"]]
                print(f"  ... {r['id']}: {res['verdict']} {res['error_code']}", flush=True)
    return results


def compare(rollouts, expected, facts, results):
    mismatches = []
    rows = []
    for r in rollouts:
        rid = r["id"]
        e = expected[rid]
        f = facts[rid]
        if rid not in results:
            if f["kernel"] is None:
                reward = actual_reward(r["profile"], f, None)
                ok = abs(reward - spec_value(e["reward"], None, None)) < 1e-9
                rows.append((rid, r["profile"], "no_kernel", "-", "no_kernel", "-",
                             e["reward"]["const"], reward, ok))
                if not ok:
                    mismatches.append(f"{rid}: no-kernel reward {reward} != {e['reward']}")
            continue
        res = results[rid]
        want = e   # also on shrunk KernelBench problems: still a CPU worker
        problems = []
        for k in ("verdict", "error_code", "compiled"):
            if res[k] != want[k]:
                problems.append(f"{k} {res[k]!r} != expected {want[k]!r}")
        seen_rules = {f.get("rule") for f in res["flags"]}
        missing = [rule for rule in e.get("rules", []) if rule not in seen_rules]
        if missing:
            problems.append(f"flags lack {missing}")
        if want["verdict"] in ("incorrect",) and res["trials_passed"] != 0:
            problems.append(f"passed {res['trials_passed']} trials (expected 0)")
        if want["verdict"] in ("ok", "decoy") and res["trials_passed"] != res["trials_total"]:
            problems.append(f"passed {res['trials_passed']}/{res['trials_total']} trials")
        reward = actual_reward(r["profile"], f, res)
        expect_value = spec_value(e["reward"], res["speedup"], res["custom_time_coverage"])
        if abs(reward - expect_value) > 1e-9:
            problems.append(f"reward {reward:.6f} != spec {expect_value:.6f}")
        ok = not problems
        rows.append((rid, r["profile"], want["verdict"], want["error_code"] or "-",
                     res["verdict"], res["error_code"] or "-", expect_value, reward, ok))
        if problems:
            mismatches.append(f"{rid}: " + "; ".join(problems)
                              + (f"\n      message: {res['message']}" if res["message"] else "")
                              + (f"\n      flags: {res['flags']}" if res["flags"] else ""))
    return rows, mismatches


# ---------------------------------------------------------------------------------------------
# --verify-mapping (runs in the venv python: needs torch)
# ---------------------------------------------------------------------------------------------

VERIFY_SCRIPT = textwrap.dedent('''
    import importlib.util, inspect, json, sys
    import torch

    def load(name, path):
        spec = importlib.util.spec_from_file_location(name, path)
        m = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(m)
        return m

    def params(model):
        return [(n, tuple(p.shape)) for n, p in model.named_parameters()]

    out = []
    for i, (key, ours_path, kb_path) in enumerate(json.loads(sys.argv[1])):
        ours, kb = load(f"ours{i}", ours_path), load(f"kb{i}", kb_path)
        checks = {}
        sig = lambda m: [(p.name, p.kind) for p in
                         list(inspect.signature(m.Model.__init__).parameters.values())[1:]]
        checks["init_signature"] = (sig(ours), sig(kb))
        checks["init_param_names_equal"] = [n for n, _ in sig(ours)] == [n for n, _ in sig(kb)]
        checks["get_init_inputs"] = (repr(ours.get_init_inputs()), repr(kb.get_init_inputs()))

        def struct(v):   # what a candidate's __init__ must accept: types, not sizes
            if isinstance(v, (list, tuple)):
                return [type(v).__name__, sorted({json.dumps(struct(x)) for x in v})]
            return type(v).__name__
        checks["init_structure_equal"] = struct(ours.get_init_inputs()) == struct(
            kb.get_init_inputs())
        with torch.device("meta"):
            kb_inputs = kb.get_inputs()
        our_inputs = ours.get_inputs()
        desc = lambda xs: [(type(x).__name__, getattr(x, "dim", lambda: None)(),
                            str(getattr(x, "dtype", ""))) for x in xs]
        checks["inputs"] = (desc(our_inputs), desc(kb_inputs))
        init = ours.get_init_inputs()
        torch.manual_seed(42)
        m_ours = ours.Model(*init)
        torch.manual_seed(42)
        m_kb = kb.Model(*init)
        checks["params_equal"] = params(m_ours) == params(m_kb)
        with torch.no_grad():
            checks["same_outputs_on_our_inputs"] = torch.equal(m_ours(*our_inputs),
                                                               m_kb(*our_inputs))
        with torch.device("meta"):
            m_kb_real = kb.Model(*kb.get_init_inputs())
            m_ours_real = ours.Model(*kb.get_init_inputs())
        checks["params_equal_at_kernelbench_size"] = params(m_ours_real) == params(m_kb_real)
        # __init__ arguments are passed positionally: their names need not agree.
        compatible = [k for _, k in sig(ours)] == [k for _, k in sig(kb)] \\
            and checks["init_structure_equal"] \\
            and checks["inputs"][0] == checks["inputs"][1] and checks["params_equal"] \\
            and checks["same_outputs_on_our_inputs"] \\
            and checks["params_equal_at_kernelbench_size"]
        out.append({"problem": key, "compatible": compatible, "checks": checks})
    print(json.dumps(out))
''')

# Pairs checked besides the registry, to show why they are not in it.
EXTRA_PAIRS = [((2, 76), "../problems/fused_linear_relu.py"), ((3, 2), "../problems/small_mlp.py"),
               ((3, 3), "../problems/small_mlp.py")]


def verify_mapping(reg, python):
    pairs = [(list(k), v["abspath"], kernelbench_file(*k)) for k, v in sorted(reg.items())]
    pairs += [(list(k), os.path.normpath(os.path.join(HERE, p)), kernelbench_file(*k))
              for k, p in EXTRA_PAIRS]
    proc = subprocess.run([python, "-c", VERIFY_SCRIPT, json.dumps(pairs)],
                          capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        print(proc.stderr)
        return [f"--verify-mapping failed (exit {proc.returncode})"]
    errors = []
    for item in json.loads(proc.stdout):
        key = tuple(item["problem"])
        c = item["checks"]
        in_registry = key in reg
        status = "compatible" if item["compatible"] else "NOT compatible"
        print(f"level {key[0]} problem {key[1]}: {status}"
              f"{'' if in_registry else ' (not in the registry)'}")
        print(f"    __init__ params  ours {c['init_signature'][0]}  kernelbench "
              f"{c['init_signature'][1]}")
        print(f"    get_init_inputs  ours {c['get_init_inputs'][0]}  kernelbench "
              f"{c['get_init_inputs'][1]}  (same structure: {c['init_structure_equal']})")
        print(f"    inputs           ours {c['inputs'][0]}  kernelbench {c['inputs'][1]}")
        print(f"    parameters equal: ours' sizes {c['params_equal']}, KernelBench's sizes "
              f"{c['params_equal_at_kernelbench_size']}; same outputs on our inputs: "
              f"{c['same_outputs_on_our_inputs']}")
        if in_registry and not item["compatible"]:
            errors.append(f"registry maps level {key[0]} problem {key[1]} but it is not "
                          "compatible")
        if not in_registry and item["compatible"]:
            print("    (compatible: could be added)")
    return errors


# ---------------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", action="store_true", help="evaluate every kernel on CPU")
    ap.add_argument("--kernelbench", action="store_true",
                    help="with --run: against shrunk KernelBench problems instead of ours")
    ap.add_argument("--verify-mapping", action="store_true")
    ap.add_argument("--only", action="append", default=[], metavar="ID_PREFIX")
    ap.add_argument("--jobs", type=int, default=min(4, os.cpu_count() or 1))
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--perf-trials", type=int, default=10)
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--python", default=VENV_PYTHON)
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()

    problems, rollouts, expected = load()
    errors, facts, reg = static_checks(problems, rollouts, expected)
    n_kernel = sum(1 for f in facts.values() if f["kernel"] is not None)
    print(f"{len(rollouts)} rollouts ({n_kernel} with a kernel), {len(reg)} problems; "
          f"parsing and consistency: {'OK' if not errors else f'{len(errors)} error(s)'}")
    for e in errors:
        print("  " + e)

    if args.verify_mapping:
        errors += verify_mapping(reg, args.python)

    if args.run:
        where = "shrunk KernelBench problems" if args.kernelbench else "our CPU problems"
        print(f"evaluating on {where} ({args.jobs} at a time) ...", flush=True)
        results = run_all(rollouts, expected, facts, reg, args, args.kernelbench)
        rows, mismatches = compare(rollouts, expected, facts, results)
        width = max(len(r[0]) for r in rows) if rows else 10
        print(f"{'rollout':<{width}}  {'profile':<9}  {'expected':<24}  {'actual':<24}  "
              f"{'reward: spec':>12}  {'actual':>8}")
        for rid, prof, ev, ec, av, ac, spec_v, rew, ok in rows:
            print(f"{rid:<{width}}  {prof:<9}  {ev + ' ' + ec:<24}  {av + ' ' + ac:<24}  "
                  f"{spec_v:>12.6f}  {rew:>8.6f}  {'ok' if ok else 'MISMATCH'}")
        matched = sum(1 for r in rows if r[-1])
        print(f"{matched}/{len(rows)} rollouts match their expectation")
        for m in mismatches:
            print("  " + m)
        errors += mismatches
    sys.exit(1 if errors else 0)


if __name__ == "__main__":
    main()
