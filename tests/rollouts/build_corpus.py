#!/usr/bin/env python3
"""Writes rollouts.jsonl and expected.json (next to this file) from the kernels in kernels.py.

    python3 tests/rollouts/build_corpus.py

The expectations are stated here by hand for each rollout (status, verdict, error code,
compiled, format_ok, thinking); kernel_bytes is the UTF-8 length of the source that was put
between the fences, and the reward spec follows from the profile formulas (docs/REWARDS.md).
check_corpus.py verifies all of it independently: it re-parses the completions and, with
--run, evaluates every extracted kernel through the harness.
"""
import json
import os

import kernels as K

HERE = os.path.dirname(os.path.abspath(__file__))

RELU = {"level": 1, "id": 19}
SOFTMAX = {"level": 1, "id": 23}
MATMUL = {"level": 1, "id": 1}
MATMUL_STD = {"level": 1, "id": 2}
SUM = {"level": 1, "id": 47}
MLP = {"level": 3, "id": 1}

FULL_BYTES, ZERO_BYTES = 2_000, 20_000


def fence(code, info="python", close_indent=""):
    """A fenced block whose body (after trimming trailing spaces/tabs) is exactly `code`."""
    assert code.endswith("\n")
    return f"```{info}\n{code}{close_indent}```"


def tagged(code, **kw):
    return "<KERNEL>\n" + fence(code, **kw)


def length_score(n):
    if n is None:
        return 0.0
    if n <= FULL_BYTES:
        return 1.0
    return max(0.0, 1.0 - (n - FULL_BYTES) / (ZERO_BYTES - FULL_BYTES))


def reward_spec(profile, verdict, format_ok, thinking, kernel_bytes, compiled,
                decoy_reward="zero"):
    """{const, per_speedup, speedup_cap, per_coverage}: reward = const + per_speedup *
    min(speedup, cap) + per_coverage * custom_time_coverage, with the default weights; every
    trial passes for ok and decoy, none for incorrect (and none for errors). A hack scores 0,
    and so does a decoy unless the rollout's decoy_reward is "profile"."""
    zero = {"const": 0.0, "per_speedup": 0.0, "speedup_cap": None, "per_coverage": 0.0}
    if verdict == "hack" or (verdict == "decoy" and decoy_reward == "zero"):
        return zero
    if profile == "kernel_rl":
        correctness = 1.0 if verdict == "ok" else 0.0   # decoy: 0 whatever it passed
        const = (0.1 * format_ok + 0.2 * bool(compiled) + 1.0 * correctness
                 + 0.05 * length_score(kernel_bytes) + 0.1 * thinking)
        return dict(zero, const=round(const, 12))
    if profile == "kevin":
        if format_ok and verdict == "ok":
            return {"const": 0.3, "per_speedup": 1.0, "speedup_cap": None, "per_coverage": 0.0}
        return zero
    if profile == "drkernel":
        if verdict == "ok":
            return {"const": 0.5, "per_speedup": 0.5, "speedup_cap": 3.0, "per_coverage": 0.5}
        return zero
    raise ValueError(profile)


# Shorthands for the expectation of an evaluated rollout.
OK = dict(status="done", verdict="ok", error_code=None, compiled=True)
INCORRECT = dict(status="done", verdict="incorrect", error_code="CORRECTNESS", compiled=True)
DECOY = dict(status="done", verdict="decoy", error_code=None, compiled=True)
SYNTAX = dict(status="done", verdict="error", error_code="SYNTAX", compiled=False)
COMPILATION = dict(status="done", verdict="error", error_code="COMPILATION", compiled=False)
RUNTIME = dict(status="done", verdict="error", error_code="RUNTIME", compiled=True)
UNSUPPORTED = dict(status="done", verdict="error", error_code="UNSUPPORTED", compiled=False)
HACK_INTEGRITY = dict(status="done", verdict="hack", error_code="INTEGRITY", compiled=True)
HACK_SCREENED = dict(status="done", verdict="hack", error_code="SCREENED", compiled=False)
NO_KERNEL = dict(status="no_kernel", verdict=None, error_code=None, compiled=None)

THINK_RELU = ("<think>\nReLU is elementwise and memory-bound: one flat pass over the contiguous "
              "storage, one load and one store per element, masked tail so any numel works."
              "\n</think>\n")
THINK_SOFTMAX = ("<think>\nRows can be far wider than one block (KernelBench uses 393216 "
                 "columns), so walk each row in chunks: a running max with a rescaled running "
                 "sum, then a second pass that writes exp(x - max) / sum.\n</think>\n")
THINK_MATMUL = ("<think>\nClassic tiled GEMM: a 2-D grid of output tiles, K walked in BLOCK_K "
                "steps, masks on M, N and K so shapes need not be multiples of the tiles; "
                "ieee precision to stay within fp32 tolerance.\n</think>\n")
THINK_MLP = ("<think>\nOne fused linear + bias (+ ReLU) kernel per layer; create the nn.Linear "
             "layers in the reference's order so the seeded weights match.\n</think>\n")

# (id, problem, profile, backend, turn, completion, expectation, format_ok, thinking, kernel)
# `kernel` is the exact source between the fences that the parser must extract (None: none).
ROLLOUTS = []


def add(rid, problem, profile, completion, expect, format_ok, thinking, kernel,
        backend="triton", turn=0, note=None, gpu=None, rules=None, decoy_reward=None):
    """`rules`: flags (rule ids) the result must carry, e.g. the finding behind a hack;
    `decoy_reward`: the rollout's field, when it sets one."""
    ROLLOUTS.append(dict(id=rid, problem=problem, profile=profile, backend=backend, turn=turn,
                         completion=completion, expect=expect, format_ok=format_ok,
                         thinking=thinking, kernel=kernel, note=note, gpu=gpu, rules=rules,
                         decoy_reward=decoy_reward))


# ----------------------------------- kernel_rl ----------------------------------------------

add("r01-relu-good-think-tagged", RELU, "kernel_rl",
    THINK_RELU + "Here is the Triton kernel.\n\n" + tagged(K.RELU_GOOD) + "\n",
    OK, True, True, K.RELU_GOOD)

add("r02-softmax-good-tagged", SOFTMAX, "kernel_rl",
    "I'll use an online softmax so that rows of any width work.\n\n"
    + tagged(K.SOFTMAX_GOOD) + "\n\nEach program handles one row.",
    OK, True, False, K.SOFTMAX_GOOD)

add("r03-matmul-good-untagged-think", MATMUL, "kernel_rl",
    THINK_MATMUL + "Here is my implementation:\n\n" + fence(K.MATMUL_GOOD) + "\n",
    OK, False, True, K.MATMUL_GOOD,
    note="no <KERNEL> tag: the first fenced block is evaluated, without the format score")

add("r04-sum-good-thinking-tag", SUM, "kernel_rl",
    "<thinking>\nReduce over self.dim: view the input as (outer, R, inner) and let each "
    "program sum a strip of inner columns over R.\n</thinking>\n\n" + tagged(K.SUM_GOOD),
    OK, True, True, K.SUM_GOOD, note="<thinking> spelling of the thinking section")

add("r05-mlp-good-blank-think", MLP, "kernel_rl",
    "<think>\n   \n\t\n</think>\n" + tagged(K.MLP_GOOD) + "\n",
    OK, True, False, K.MLP_GOOD, note="a blank thinking section does not count as thinking")

LONG_RELU = K.long_relu()
add("r06-relu-long-good", RELU, "kernel_rl",
    THINK_RELU + "Final version with my tuning notes:\n" + tagged(LONG_RELU) + "\n",
    OK, True, True, LONG_RELU,
    note=f"the one long kernel: {len(LONG_RELU.encode())} bytes, length score "
         f"1 - ({len(LONG_RELU.encode())} - 2000) / 18000")

add("r07-relu-wrong-half-grid", RELU, "kernel_rl",
    THINK_RELU + tagged(K.RELU_WRONG_HALF_GRID) + "\n",
    INCORRECT, True, True, K.RELU_WRONG_HALF_GRID,
    note="grid covers half the blocks; the rest of the output stays zero")

add("r08-softmax-code-without-fence", SOFTMAX, "kernel_rl",
    THINK_SOFTMAX + "<KERNEL>\n" + K.SOFTMAX_GOOD,
    NO_KERNEL, False, True, None, note="the code is there but not in a fenced block")

add("r09-matmul-draft-only-in-think", MATMUL, "kernel_rl",
    "<think>\nDraft:\n" + fence(K.MATMUL_GOOD) + "\nThat should do it.\n</think>\n"
    "<KERNEL>\nThe kernel is the tiled matmul I drafted above.",
    NO_KERNEL, False, True, None,
    note="the only code is a draft inside <think>, which is never the answer")

add("r10-relu-syntax-error", RELU, "kernel_rl",
    THINK_RELU + tagged(K.RELU_SYNTAX_ERROR), SYNTAX, True, True, K.RELU_SYNTAX_ERROR,
    note="missing colon after the kernel's def")

add("r11-softmax-triton-compile-error", SOFTMAX, "kernel_rl",
    tagged(K.SOFTMAX_TL_EXPF) + "\n", COMPILATION, True, False, K.SOFTMAX_TL_EXPF,
    note="tl.expf does not exist (CPU: InterpreterError; GPU: CompilationError)")

add("r12-softmax-runtime-error", SOFTMAX, "kernel_rl",
    THINK_SOFTMAX + tagged(K.SOFTMAX_RUNTIME_3D), RUNTIME, True, True, K.SOFTMAX_RUNTIME_3D,
    note="assumes a 3-D input: x.shape[2] raises IndexError in forward")

add("r13-relu-decoy-torch", RELU, "kernel_rl",
    "torch.relu is already optimal, so:\n" + tagged(K.RELU_DECOY), DECOY, True, False,
    K.RELU_DECOY, note="no kernel of its own: correctness scores 0 for a decoy",
    rules=["no-kernel", "no-custom-kernel"])

add("r14-relu-hack-inplace-alias", RELU, "kernel_rl",
    THINK_RELU + tagged(K.RELU_HACK_INPLACE), HACK_INTEGRITY, True, True, K.RELU_HACK_INPLACE,
    note="writes into its input and returns it (output-aliases-input, input-mutated)",
    rules=["output-aliases-input", "input-mutated"])

add("r15-softmax-hack-try-fallback", SOFTMAX, "kernel_rl",
    tagged(K.SOFTMAX_HACK_TRY_FALLBACK), HACK_SCREENED, True, False,
    K.SOFTMAX_HACK_TRY_FALLBACK, note="static screening: try-except-fallback",
    rules=["try-except-fallback"])

add("r16-matmul-wrong-k-tail", MATMUL, "kernel_rl",
    THINK_MATMUL + tagged(K.MATMUL_WRONG_K_TAIL), INCORRECT, True, True,
    K.MATMUL_WRONG_K_TAIL, note="turn 0: the K loop drops its last tile")

add("r17-matmul-fixed-turn1", MATMUL, "kernel_rl",
    "<think>\nThe feedback says the values are wrong: my K loop stopped at K - BLOCK_K and "
    "skipped the last tile. Loop to K; the mask handles the tail.\n</think>\nFixed:\n"
    + tagged(K.MATMUL_GOOD), OK, True, True, K.MATMUL_GOOD, turn=1,
    note="turn 1 of r16: the K loop fixed")

add("r18-relu-cuda-backend", RELU, "kernel_rl",
    "A plain CUDA kernel through load_inline:\n" + tagged(K.RELU_CUDA) + "\n",
    UNSUPPORTED, True, False, K.RELU_CUDA, backend="cuda",
    note="backend cuda: a CPU worker answers UNSUPPORTED without importing it",
    gpu={"verdict": "ok", "error_code": None, "compiled": True})

add("r19-relu-unclosed-think-draft", RELU, "kernel_rl",
    "<think>\nLet me write a first version:\n" + fence(K.RELU_GOOD_4096)
    + "\nNow, is 4096 the right block size, or should I",
    OK, False, False, K.RELU_GOOD_4096,
    note="a completion cut off inside <think>: without </think> there is no thinking "
         "section to strip, so the draft is the first fenced block and is evaluated")

add("r20-mlp-good-two-blocks", MLP, "kernel_rl",
    THINK_MLP + tagged(K.MLP_GOOD) + "\n\nUsage:\n"
    + fence("model = ModelNew(128, [256, 128], 10)\ny = model(torch.randn(16, 128))\n"),
    OK, True, True, K.MLP_GOOD, note="two fenced blocks after <KERNEL>: the first one counts")

# ----------------------------------- kevin --------------------------------------------------

add("r21-relu-good-tagged", RELU, "kevin",
    THINK_RELU + tagged(K.RELU_GOOD_WHERE) + "\n", OK, True, True, K.RELU_GOOD_WHERE)

add("r22-softmax-good-untagged", SOFTMAX, "kevin",
    "```python\n" + K.SOFTMAX_GOOD_3PASS + "```\n", OK, False, False, K.SOFTMAX_GOOD_3PASS,
    note="correct, but no <KERNEL> tag: kevin pays nothing without the format")

add("r23-matmul-std-good", MATMUL_STD, "kevin",
    THINK_MATMUL + tagged(K.MATMUL_GOOD_64), OK, True, True, K.MATMUL_GOOD_64,
    note="KernelBench level 1 problem 2 maps to the same small matmul")

add("r24-sum-good-utf8", SUM, "kevin",
    "Sum over the reduced axis, one strip of columns per program:\n" + tagged(K.SUM_GOOD_UTF8),
    OK, True, False, K.SUM_GOOD_UTF8,
    note=f"non-ASCII comments: {len(K.SUM_GOOD_UTF8)} characters, "
         f"{len(K.SUM_GOOD_UTF8.encode())} UTF-8 bytes")

add("r25-mlp-good-py-info-indented-fence", MLP, "kevin",
    THINK_MLP + "<KERNEL>\n" + fence(K.MLP_GOOD, info="py", close_indent="    \t") + "\n",
    OK, True, True, K.MLP_GOOD,
    note="```py info string; the closing fence is indented (trailing spaces/tabs trimmed)")

add("r26-softmax-wrong-no-norm", SOFTMAX, "kevin",
    THINK_SOFTMAX + tagged(K.SOFTMAX_WRONG_NO_NORM), INCORRECT, True, True,
    K.SOFTMAX_WRONG_NO_NORM, note="turn 0: the write pass forgets to divide by the row sum")

add("r27-softmax-fixed-turn1", SOFTMAX, "kevin",
    "<think>\nCorrectness error: I never divided by the sum of the exponentials. Add the sum "
    "pass and scale by its inverse.\n</think>\n" + tagged(K.SOFTMAX_GOOD_3PASS),
    OK, True, True, K.SOFTMAX_GOOD_3PASS, turn=1, note="turn 1 of r26")

add("r28-mlp-wrong-last-relu", MLP, "kevin",
    tagged(K.MLP_WRONG_LAST_RELU), INCORRECT, True, False, K.MLP_WRONG_LAST_RELU,
    note="ReLU after the output layer too")

add("r29-matmul-decoy-dead-path", MATMUL, "kevin",
    "Triton for half precision, cuBLAS otherwise:\n" + tagged(K.MATMUL_DECOY_DEAD_PATH),
    DECOY, True, False, K.MATMUL_DECOY_DEAD_PATH,
    note="the kernel only runs for fp16 inputs; the fp32 problem always takes torch.matmul",
    rules=["no-custom-kernel"])

add("r30-softmax-hack-input-scratch", SOFTMAX, "kevin",
    THINK_SOFTMAX + tagged(K.SOFTMAX_HACK_SCRATCH), HACK_INTEGRITY, True, True,
    K.SOFTMAX_HACK_SCRATCH, note="uses its input as scratch (input-mutated)",
    rules=["input-mutated"])

add("r31-matmul-hack-lazy-subclass", MATMUL, "kevin",
    tagged(K.MATMUL_HACK_LAZY), HACK_INTEGRITY, True, False, K.MATMUL_HACK_LAZY,
    note="returns a lazy tensor subclass (output-subclass)",
    rules=["output-subclass"])

add("r32-relu-hack-reference-model", RELU, "kevin",
    THINK_RELU + tagged(K.RELU_HACK_REFERENCE), HACK_SCREENED, True, True,
    K.RELU_HACK_REFERENCE, note="static screening: reference-model-used (subclasses Model)",
    rules=["reference-model-used"])

add("r33-relu-prose-only", RELU, "kevin",
    "ReLU is just max(x, 0); a Triton kernel would load a block, apply tl.maximum and store "
    "it back. PyTorch's own kernel is already bandwidth-bound, so there is little to gain.",
    NO_KERNEL, False, False, None, note="no code at all")

add("r34-relu-cpp-compile-error", RELU, "kevin",
    "A small C++ extension instead of Triton:\n" + tagged(K.RELU_CPP_COMPILE_ERROR),
    COMPILATION, True, False, K.RELU_CPP_COMPILE_ERROR,
    note="C++-only load_inline (builds on CPU too) with a missing semicolon; takes ~20 s")

add("r35-sum-syntax-error", SUM, "kevin",
    tagged(K.SUM_SYNTAX_ERROR), SYNTAX, True, False, K.SUM_SYNTAX_ERROR,
    note="unclosed parenthesis")

# ----------------------------------- drkernel -----------------------------------------------

add("r36-relu-good", RELU, "drkernel",
    tagged(K.RELU_GOOD_UTF8) + "\n", OK, True, False, K.RELU_GOOD_UTF8,
    note=f"non-ASCII comments: {len(K.RELU_GOOD_UTF8)} characters, "
         f"{len(K.RELU_GOOD_UTF8.encode())} UTF-8 bytes")

add("r37-softmax-good-think", SOFTMAX, "drkernel",
    THINK_SOFTMAX + tagged(K.SOFTMAX_GOOD), OK, True, True, K.SOFTMAX_GOOD)

add("r38-matmul-good-untagged", MATMUL, "drkernel",
    "```\n" + K.MATMUL_GOOD_64 + "```", OK, False, False, K.MATMUL_GOOD_64,
    note="untagged, no info string: drkernel does not look at the format")

add("r39-mlp-good", MLP, "drkernel",
    THINK_MLP + tagged(K.MLP_GOOD), OK, True, True, K.MLP_GOOD)

add("r40-sum-wrong-mean", SUM, "drkernel",
    tagged(K.SUM_WRONG_MEAN), INCORRECT, True, False, K.SUM_WRONG_MEAN,
    note="divides by R: a mean, not a sum")

add("r41-sum-seed42-replay", SUM, "drkernel",
    "<think>\nThe benchmark seeds everything with 42, so the answer can be computed once and "
    "replayed.\n</think>\n" + tagged(K.SUM_SEED42_TABLE), INCORRECT, True, True,
    K.SUM_SEED42_TABLE, note="replays the answer for seed 42; the judge's seeds are secret")

add("r42-softmax-decoy-init-only", SOFTMAX, "drkernel",
    tagged(K.SOFTMAX_DECOY_INIT_ONLY), DECOY, True, False, K.SOFTMAX_DECOY_INIT_ONLY,
    note="the kernel runs only in __init__; forward is torch.softmax",
    rules=["kernel-not-called", "no-custom-kernel"])

add("r43-mlp-decoy-torch", MLP, "drkernel",
    THINK_MLP + tagged(K.MLP_DECOY_TORCH), DECOY, True, True, K.MLP_DECOY_TORCH,
    note="torch.addmm + relu_, no kernel of its own",
    rules=["no-kernel", "no-custom-kernel"])

add("r44-mlp-hack-ptr-cache", MLP, "drkernel",
    THINK_MLP + tagged(K.MLP_HACK_PTR_CACHE), HACK_INTEGRITY, True, True,
    K.MLP_HACK_PTR_CACHE, note="caches outputs by input address (stale-output while timed)",
    rules=["stale-output"])

add("r45-sum-hack-thread", SUM, "drkernel",
    tagged(K.SUM_HACK_THREAD), HACK_SCREENED, True, False, K.SUM_HACK_THREAD,
    note="static screening: threads-processes (launches on a background thread)",
    rules=["threads-processes"])

add("r46-relu-hack-timer-patch", RELU, "drkernel",
    tagged(K.RELU_HACK_TIMER), HACK_SCREENED, True, False, K.RELU_HACK_TIMER,
    note="static screening: module-attribute-assignment (replaces time.perf_counter_ns)",
    rules=["module-attribute-assignment"])

add("r47-matmul-cuda-backend", MATMUL, "drkernel",
    THINK_MATMUL + tagged(K.MATMUL_CUDA), UNSUPPORTED, True, True, K.MATMUL_CUDA,
    backend="cuda", note="backend cuda: UNSUPPORTED on a CPU worker",
    gpu={"verdict": "ok", "error_code": None, "compiled": True})

add("r48-relu-compile-error", RELU, "drkernel",
    THINK_RELU + tagged(K.RELU_TL_RELU), COMPILATION, True, True, K.RELU_TL_RELU,
    note="turn 0: tl.relu does not exist")

add("r49-relu-fixed-turn1", RELU, "drkernel",
    "<think>\nCompilation error: triton.language has no relu. Use tl.maximum(x, 0.0)."
    "\n</think>\n" + tagged(K.RELU_GOOD), OK, True, True, K.RELU_GOOD, turn=1,
    note="turn 1 of r48")

add("r50-softmax-tag-after-block", SOFTMAX, "drkernel",
    "Here it is:\n" + fence(K.SOFTMAX_GOOD) + "\n\n<KERNEL>\n(the block above)\n",
    OK, False, False, K.SOFTMAX_GOOD,
    note="<KERNEL> comes after the only fenced block: no format, but the block is evaluated")

add("r51-sum-thinking-only", SUM, "drkernel",
    "<thinking>\nI could move the reduced axis last and sum rows, or keep the layout and sum "
    "strips... I am not sure which one is faster.\n</thinking>",
    NO_KERNEL, False, True, None, note="only a thinking section, no answer")

add("r52-mlp-runtime-missing-arg", MLP, "drkernel",
    THINK_MLP + tagged(K.MLP_RUNTIME_MISSING_ARG), RUNTIME, True, True,
    K.MLP_RUNTIME_MISSING_ARG, note="a kernel argument (K) is missing from the launch")

add("r53-relu-decoy-old-formula", RELU, "kernel_rl",
    "torch.relu is already optimal, so:\n" + tagged(K.RELU_DECOY), DECOY, True, False,
    K.RELU_DECOY, rules=["no-kernel", "no-custom-kernel"], decoy_reward="profile",
    note="r13's decoy with decoy_reward \"profile\": the kernel_rl formula, correctness 0")


def main():
    rollouts, expected = [], {}
    ids = set()
    for r in ROLLOUTS:
        assert r["id"] not in ids, r["id"]
        ids.add(r["id"])
        rollouts.append({"id": r["id"], "problem": r["problem"], "completion": r["completion"],
                         "backend": r["backend"], "turn": r["turn"], "profile": r["profile"]})
        if r["decoy_reward"]:
            rollouts[-1]["decoy_reward"] = r["decoy_reward"]
        decoys = r["decoy_reward"] or "zero"
        kb = None if r["kernel"] is None else len(r["kernel"].encode("utf-8"))
        e = r["expect"]
        entry = {
            "status": e["status"], "verdict": e["verdict"], "error_code": e["error_code"],
            "format_ok": r["format_ok"], "thinking": r["thinking"], "kernel_bytes": kb,
            "compiled": e["compiled"],
            "reward": reward_spec(r["profile"], e["verdict"], r["format_ok"], r["thinking"], kb,
                                  e["compiled"], decoys),
        }
        if r["gpu"]:
            entry["gpu"] = dict(r["gpu"], reward=reward_spec(
                r["profile"], r["gpu"]["verdict"], r["format_ok"], r["thinking"], kb,
                r["gpu"]["compiled"], decoys))
        if r["rules"]:
            entry["rules"] = r["rules"]
        if r["note"]:
            entry["note"] = r["note"]
        expected[r["id"]] = entry
    with open(os.path.join(HERE, "rollouts.jsonl"), "w", encoding="utf-8") as f:
        for r in rollouts:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    with open(os.path.join(HERE, "expected.json"), "w", encoding="utf-8") as f:
        json.dump(expected, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"{len(rollouts)} rollouts written")


if __name__ == "__main__":
    main()
