"""The client against a live Crucible (conftest.py starts one on the CPU): evaluations, rollout
batches streamed to their rewards, checked against the reward formulas of docs/REWARDS.md
computed here by hand, idempotent resubmission, and the reward functions end to end."""

from __future__ import annotations

import asyncio
import hashlib
import json
import uuid

import pytest
from conftest import REPO, Server

from crucible_client import (
    AsyncClient,
    Client,
    CrucibleError,
    compute_score,
    make_rollout,
    stops_early,
)
from crucible_client.env_types import Prompt
from crucible_client.types import EvalResult, EvalSettings, Profile, Rollout, RolloutResult

PROBLEMS_DIR = REPO / "tests" / "problems"
CANDIDATES = REPO / "tests" / "candidates"
RELU = (PROBLEMS_DIR / "elementwise_relu.py").read_text()
CORRECT = (CANDIDATES / "elementwise_relu__correct.py").read_text()
WRONG = (CANDIDATES / "elementwise_relu__wrong.py").read_text()
# Writes its output into its input: caught at runtime as a hack on every device.
HACK = (REPO / "tests" / "exploits" / "elementwise_relu__inplace_alias.py").read_text()
# Two correctness trials and a few timing runs: enough to judge, quick on a CPU worker.
FAST_EVAL: EvalSettings = {"num_correct_trials": 2, "num_perf_trials": 5}
TIMEOUT_S = 600.0
THINK = "<think>One Triton program per 1024-element block, masked at the end.</think>\n"


def tagged(code: str) -> str:
    return f"Here is my kernel.\n<KERNEL>\n```python\n{code}```\n"


def untagged(code: str) -> str:
    return f"```python\n{code}```\n"


def relu_rollout(id: str, completion: str, profile: Profile = "kernel_rl") -> Rollout:
    return make_rollout(id, completion, reference_code=RELU, profile=profile)


#: id -> (completion, profile). The same kernel in several completions is one evaluation.
ROLLOUTS: dict[str, tuple[str, Profile]] = {
    "rl_tagged": (tagged(CORRECT), "kernel_rl"),
    "rl_thinking": (THINK + tagged(CORRECT), "kernel_rl"),
    "rl_untagged": (untagged(CORRECT), "kernel_rl"),
    "rl_prose": ("I could not write a kernel for this.", "kernel_rl"),
    "rl_prose_thinking": (THINK + "No code this time.", "kernel_rl"),
    "rl_wrong": (tagged(WRONG), "kernel_rl"),
    "rl_hack": (tagged(HACK), "kernel_rl"),
    "kevin_tagged": (tagged(CORRECT), "kevin"),
    "kevin_untagged": (untagged(CORRECT), "kevin"),
    "kevin_wrong": (tagged(WRONG), "kevin"),
    "dr_tagged": (tagged(CORRECT), "drkernel"),
    "dr_wrong": (tagged(WRONG), "drkernel"),
    "dr_hack": (THINK + tagged(HACK), "drkernel"),
}


def rollouts() -> list[Rollout]:
    return [relu_rollout(id, text, profile) for id, (text, profile) in ROLLOUTS.items()]


def expected_reward(id: str, result: RolloutResult) -> float:
    """docs/REWARDS.md by hand, from the completion as written here and the verdict."""
    completion, profile = ROLLOUTS[id]
    format_ok = "<KERNEL>" in completion and "```" in completion
    has_kernel = "```" in completion
    thinking = completion.startswith("<think>")
    evaluation = result["result"]
    verdict = evaluation["verdict"] if evaluation else None
    if verdict == "hack":
        return 0.0
    speedup = (evaluation.get("speedup") or 0.0) if evaluation else 0.0
    if profile == "kernel_rl":
        # Every kernel here is under 2,000 bytes: the whole length score.
        reward = 0.1 * format_ok + 0.05 * has_kernel + 0.1 * thinking
        if evaluation:
            reward += 0.2 * evaluation["compiled"]
            if evaluation["trials_total"] and verdict != "decoy":
                reward += evaluation["trials_passed"] / evaluation["trials_total"]
        return reward
    if verdict != "ok":
        return 0.0
    if profile == "kevin":
        return 0.3 + speedup if format_ok else 0.0
    assert evaluation is not None
    coverage = evaluation.get("custom_time_coverage") or 0.0
    return 0.5 + 0.5 * min(speedup, 3.0) + 0.5 * coverage


@pytest.fixture
def client(server: Server):
    with Client(server.url) as c:
        yield c


@pytest.fixture(scope="module")
def streamed(server: Server) -> tuple[list[RolloutResult], int]:
    """The rollouts of ROLLOUTS submitted once and streamed to the end: (results in the order
    they came, the submission's rollout count)."""
    assert all(len(code) < 2000 for code in (CORRECT, WRONG, HACK))
    with Client(server.url) as c:
        submission = c.submit_rollouts(rollouts(), eval=FAST_EVAL)
        results = list(c.stream_results(submission, wait=30, timeout=TIMEOUT_S))
    return results, submission.rollouts


def test_health_reports_a_ready_worker(client: Client):
    health = client.health()
    assert health["status"] == "ok" and health["workers_alive"] >= 1
    assert "running" in client.queue_status()


def test_a_correct_kernel_is_ok(client: Client):
    view = client.evaluate(
        RELU, kernel_code=CORRECT, timeout=TIMEOUT_S, num_correct_trials=2, num_perf_trials=5
    )
    assert view["status"] == "done", view
    result = evaluation(view["result"])
    assert (result["verdict"], result["correct"]) == ("ok", True), result
    assert result["trials_passed"] == result["trials_total"] == 2
    assert stops_early(result)


def test_a_wrong_kernel_is_incorrect(client: Client):
    view = client.evaluate(
        RELU, kernel_code=WRONG, timeout=TIMEOUT_S, num_correct_trials=2, num_perf_trials=5
    )
    assert view["status"] == "done", view
    result = evaluation(view["result"])
    assert result["verdict"] == "incorrect", result
    assert not stops_early(result)


def test_a_bad_request_raises_with_the_field(client: Client):
    with pytest.raises(CrucibleError) as e:
        client.evaluate(RELU, kernel_code=CORRECT, num_correct_trials=0)
    assert e.value.status == 422 and e.value.field == "num_correct_trials"


def test_every_rollout_is_streamed_once(streamed):
    results, total = streamed
    ids = [r["id"] for r in results]
    assert sorted(ids) == sorted(ROLLOUTS) and total == len(ROLLOUTS)


def test_rewards_follow_the_profiles(streamed):
    by_id = {r["id"]: r for r in streamed[0]}
    verdicts = {
        id: r["result"]["verdict"] if r["result"] else r["status"] for id, r in by_id.items()
    }
    assert verdicts == {
        "rl_tagged": "ok",
        "rl_thinking": "ok",
        "rl_untagged": "ok",
        "rl_prose": "no_kernel",
        "rl_prose_thinking": "no_kernel",
        "rl_wrong": "incorrect",
        "rl_hack": "hack",
        "kevin_tagged": "ok",
        "kevin_untagged": "ok",
        "kevin_wrong": "incorrect",
        "dr_tagged": "ok",
        "dr_wrong": "incorrect",
        "dr_hack": "hack",
    }
    for id, r in by_id.items():
        assert r["reward"] == pytest.approx(expected_reward(id, r)), (id, r)
        assert r["feedback"], id
    # The numbers the formulas give for this problem, for a reader checking by eye.
    assert by_id["rl_tagged"]["reward"] == pytest.approx(1.35)
    assert by_id["rl_thinking"]["reward"] == pytest.approx(1.45)
    assert by_id["rl_untagged"]["reward"] == pytest.approx(1.25)
    assert by_id["rl_prose"]["reward"] == 0.0
    assert by_id["rl_prose_thinking"]["reward"] == pytest.approx(0.1)
    assert by_id["kevin_untagged"]["reward"] == 0.0
    assert by_id["rl_hack"]["reward"] == by_id["dr_hack"]["reward"] == 0.0
    assert by_id["rl_hack"]["components"]["format"] == 1.0  # scored, then zeroed
    tagged_ok = by_id["rl_tagged"]
    assert tagged_ok["format_ok"] and tagged_ok["components"]["correctness"] == 1.0
    assert not by_id["rl_untagged"]["format_ok"]


def test_the_async_client_streams_the_same_results(server: Server, streamed):
    async def main() -> dict[str, RolloutResult]:
        async with AsyncClient(server.url) as c:
            submission = await c.submit_rollouts(rollouts(), eval=FAST_EVAL)
            return {r["id"]: r async for r in c.stream_results(submission, timeout=TIMEOUT_S)}

    got = asyncio.run(main())
    want = {r["id"]: r for r in streamed[0]}
    assert sorted(got) == sorted(want)
    for id, r in got.items():
        assert r["status"] == want[id]["status"], id
        assert (r["result"] or {}).get("verdict") == (want[id]["result"] or {}).get("verdict")
        assert r["reward"] == pytest.approx(expected_reward(id, r)), (id, r)


def test_resubmitting_under_the_same_key_returns_the_same_batch(server: Server):
    cheap = [relu_rollout("a", "no kernel here"), relu_rollout("b", THINK + "nor here")]
    key = f"client-test-{uuid.uuid4()}"
    with Client(server.url) as c:
        first = c.submit_rollouts(cheap, idempotency_key=key)
        again = c.submit_rollouts(cheap, idempotency_key=key)
        other = c.submit_rollouts(cheap)
        assert again.batch_ids == first.batch_ids and again.deduplicated
        assert not first.deduplicated
        assert other.batch_ids != first.batch_ids
        results = c.wait_results(first, timeout=TIMEOUT_S)
    assert {id: r["status"] for id, r in results.items()} == {"a": "no_kernel", "b": "no_kernel"}


def test_an_unknown_batch_is_not_found(server: Server):
    with Client(server.url) as c, pytest.raises(CrucibleError) as e:
        list(c.stream_results("b_does_not_exist", wait=0))
    assert e.value.status == 404


def test_compute_score_scores_one_completion(server: Server):
    got = compute_score(
        "kernelbench",
        THINK + tagged(CORRECT),
        RELU,
        url=server.url,
        eval=FAST_EVAL,
        timeout=TIMEOUT_S,
    )
    assert isinstance(got, dict)
    assert got["score"] == pytest.approx(1.45)
    assert (got["evaluated"], got["format_ok"], got["correct"]) == (1.0, 1.0, 1.0)


def test_the_registry_lists_and_serves_problems(server: Server):
    with Client(server.url) as c:
        problems = c.problems()
        assert problems, "the registry is empty"
        first = problems[0]
        problem = c.problem(first["level"], first["id"])
        assert problem["hash"] == first["hash"] == sha256(problem["reference_code"])
        with pytest.raises(CrucibleError) as e:
            c.problem(9999, 9999)
        assert e.value.status == 404
        relu = [p for p in problems if p["hash"] == sha256(RELU)]
        assert relu, "tests/problems/elementwise_relu.py is not in the registry"
        [result] = c.score_rollouts(
            [make_rollout("by_ref", tagged(CORRECT), problem=relu[0])],
            FAST_EVAL,
            timeout=TIMEOUT_S,
        )
    assert result["problem"] == {"level": relu[0]["level"], "id": relu[0]["id"]}
    assert result["problem_hash"] == relu[0]["hash"]
    assert evaluation(result["result"])["verdict"] == "ok"
    assert result["reward"] == pytest.approx(1.35)


def evaluation(result: EvalResult | None) -> EvalResult:
    assert result is not None, "no evaluation result"
    return result


def sha256(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


CORPUS = REPO / "tests" / "rollouts"


def test_the_rollout_corpus_scores_as_computed_by_hand(server: Server):
    """tests/rollouts/rollouts.jsonl (the corpus `crucible rollouts` scores in the Rust suite)
    through this client: each rollout back once, with the status, verdict and reward that
    tests/rollouts/expected.json computes by hand."""
    rollouts = [json.loads(line) for line in (CORPUS / "rollouts.jsonl").read_text().splitlines()]
    expected = json.loads((CORPUS / "expected.json").read_text())
    assert len(rollouts) >= 40
    with Client(server.url) as c:
        results = c.score_rollouts(
            rollouts, {"num_correct_trials": 3, "num_perf_trials": 5}, timeout=TIMEOUT_S
        )
    assert sorted(r["id"] for r in results) == sorted(r["id"] for r in rollouts)
    wrong = []
    for r in results:
        want = expected[r["id"]]
        result = r["result"] or {}
        spec = want["reward"]
        speedup = result.get("speedup") or 0.0
        if spec["speedup_cap"] is not None:
            speedup = min(speedup, spec["speedup_cap"])
        by_hand = (
            spec["const"]
            + spec["per_speedup"] * speedup
            + spec["per_coverage"] * (result.get("custom_time_coverage") or 0.0)
        )
        got = (r["status"], result.get("verdict"), r["format_ok"])
        if got != (want["status"], want["verdict"], want["format_ok"]) or r[
            "reward"
        ] != pytest.approx(by_hand, abs=1e-6):
            wrong.append(f"{r['id']}: {got} reward {r['reward']} (by hand {by_hand})")
    assert not wrong, "\n".join(wrong)


def test_prompts_for_a_registered_problem_and_for_a_source(server: Server):
    with Client(server.url) as c:
        relu = [p for p in c.problems() if p["hash"] == sha256(RELU)][0]
        by_ref = c.prompt(relu, option="few_shot", k=2, thinking=True)
        by_source = c.prompt(reference_code=RELU, option="few_shot", k=2, thinking=True)
        assert by_ref == by_source
        assert by_ref["examples"] == ["builtin/leaky_relu.triton", "builtin/row_softmax.triton"]
        assert by_ref["settings"] == {
            "option": "few_shot", "backend": "triton", "thinking": True, "k": 2
        }
        assert "<think>" in by_ref["response_format"]
        assert RELU.strip() in by_ref["text"] and by_ref["response_format"] in by_ref["text"]
        # This server has no corpus: retrieval is refused, with the variable that enables it.
        with pytest.raises(CrucibleError) as e:
            c.prompt(relu, option="raicl")
        assert e.value.status == 409 and "CRUCIBLE_CORPUS" in str(e.value)
        with pytest.raises(ValueError):
            c.prompt()

    async def with_async() -> Prompt:
        async with AsyncClient(server.url) as ac:
            return await ac.prompt((relu["level"], relu["id"]), backend="cuda", option="one_shot")

    one = asyncio.run(with_async())
    assert one["examples"] == ["builtin/leaky_relu.cuda"]
    assert "k" not in one["settings"]
