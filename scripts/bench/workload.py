"""The GPU benchmark's workload (bench.py): a workload file expanded into the evaluations it
submits, in order; the slice of them one call runs (--shard); the verdict a finished task
counts as. Standard library only.
"""
import json
import os
import re

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def _read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def expand_workload(path, problems_root=None, repo=REPO):
    """The workload as a list of evaluations (dicts), in submission order.

    An entry with `repeats: N` gives N samples of the same prompt (GRPO): sample k > 0 gets a
    trailing comment and, when `blocks` is given, its first `BLOCK = <n>` replaced by
    blocks[k % len(blocks)]; `duplicates: D` adds D byte-identical copies of sample 0."""
    w = json.loads(_read(path))
    root = problems_root or w.get("problems_root", ".")
    if not os.path.isabs(root):
        root = os.path.join(repo, root)
    items = []
    for ei, e in enumerate(w["entries"]):
        ref = _read(os.path.join(root, e["problem"]))
        base = _read(os.path.join(repo, e["candidate"]))
        n = int(e.get("repeats", 1))
        blocks = e.get("blocks")
        stem = lambda p: os.path.basename(p).removesuffix(".py")
        cand_rel = e["candidate"].split("/candidates/")[-1].removesuffix(".py")
        samples = []
        for k in range(n):
            code = base
            if k > 0:
                if blocks:
                    code = re.sub(r"BLOCK = \d+", f"BLOCK = {blocks[k % len(blocks)]}", code, count=1)
                code += f"\n# sample {k + 1} of {n}\n"
            samples.append((f"s{k + 1}" if n > 1 else "", code))
        for d in range(int(e.get("duplicates", 0))):
            samples.append((f"dup{d + 1}", samples[0][1]))
        for tag, code in samples:
            items.append({
                "entry": ei,
                "problem": e["problem"],
                "problem_path": os.path.join(root, e["problem"]),
                "candidate": e["candidate"],
                "label": f"{stem(e['problem'])[:30]}|{cand_rel[:34]}" + (f"#{tag}" if tag else ""),
                "backend": e.get("backend", "triton"),
                "expect": e.get("expect", "correct"),
                "timeout_s": int(e.get("timeout_s", 300)),
                "num_correct_trials": int(e.get("num_correct_trials", w.get("num_correct_trials", 5))),
                "num_perf_trials": int(e.get("num_perf_trials", w.get("num_perf_trials", 100))),
                "reference_code": ref,
                "kernel_code": code,
            })
    return items


def select_shard(items, shard):
    """`K/N`: the K-th of N contiguous slices (1-based)."""
    if not shard:
        return items
    k, n = (int(x) for x in shard.split("/"))
    if not 1 <= k <= n:
        raise SystemExit(f"--shard {shard}: want K/N with 1 <= K <= N")
    return [it for i, it in enumerate(items) if i * n // len(items) == k - 1]


def verdict_of(status, result):
    if status != "done":
        return status.upper()
    r = result or {}
    if r.get("correct"):
        return "correct"
    code = r.get("error_code")
    return "incorrect" if code == "CORRECTNESS" else (code or "?")
