"""Shapes of the JSON the service exchanges, for type checkers and readers.

The client returns the decoded JSON as plain dicts (typed with these ``TypedDict``\\ s) rather
than objects: a trainer logs, filters and ships them between processes as they are, and a
field the server adds later reaches it without a client release. Fields are those of the
service's OpenAPI document (``GET /openapi.json``); keys marked optional may be absent.
"""

from __future__ import annotations

from typing import Any, Literal, TypedDict

Backend = Literal["triton", "cuda"]
Profile = Literal["kernel_rl", "kevin", "drkernel"]
Priority = Literal["low", "normal", "high"]
TaskStatus = Literal["queued", "running", "done", "failed", "cancelled"]
Verdict = Literal["ok", "incorrect", "decoy", "hack", "error"]
# What a decoy scores: "zero" (default, like a hack) or "profile" (the profile's formula).
DecoyReward = Literal["zero", "profile"]
RolloutStatus = Literal["done", "no_kernel", "failed", "cancelled", "expired"]


class ProblemRef(TypedDict):
    """A problem of the server's registry: KernelBench level and problem id."""

    level: int
    id: int


class ProblemInfo(ProblemRef):
    """One entry of ``GET /problems``; ``hash`` versions the reference source."""

    name: str
    hash: str


class Problem(ProblemInfo):
    """``GET /problems/{level}/{id}``."""

    reference_code: str


class Weights(TypedDict, total=False):
    """Per-rollout overrides of a reward profile's weights (docs/REWARDS.md)."""

    format: float
    compile: float
    correctness: float
    speed: float
    length: float
    thinking: float
    coverage: float
    speedup_cap: float
    # Negative penalties (-1000..0; off by default): no compile, incorrect, slower than PyTorch.
    penalty_compile: float
    penalty_incorrect: float
    penalty_slower: float


TimingMode = Literal["fixed", "adaptive"]


class Timing(TypedDict, total=False):
    """A request's ``timing``: ``fixed`` (every ``num_perf_trials`` call, KernelBench's
    protocol; the default) or ``adaptive`` (3 to ``num_perf_trials`` timed calls, stopping once
    the median's relative standard error is at most ``target_rel_error`` (0.001) or the timed
    calls took ``max_time_ms`` (2000))."""

    mode: TimingMode
    target_rel_error: float
    max_time_ms: int


class RuntimeStats(TypedDict, total=False):
    """Timing statistics in ms; ``trials`` (the timed calls made) and ``median_ci`` (the
    median's 95 % interval ``[lo, hi]``) are absent in results from older servers."""

    median: float
    mean: float
    std: float
    min: float
    max: float
    trials: int
    median_ci: list[float]


class EvalSettings(TypedDict, total=False):
    """The ``eval`` settings of a rollout batch; absent ones keep the server's defaults."""

    num_correct_trials: int
    num_perf_trials: int
    measure_performance: bool
    atol: float
    rtol: float
    timeout_s: int
    priority: Priority
    max_speedup: float
    timing: Timing
    # Evaluate every rollout on workers of this device class ("h100", "cpu", ...); absent, the
    # server places each problem's rollouts together on one class. 422 when no worker has it.
    device_class: str


class _RolloutRequired(TypedDict):
    id: str
    completion: str


class Rollout(_RolloutRequired, total=False):
    """One completion to score; exactly one of ``problem`` and ``reference_code``."""

    problem: ProblemRef
    reference_code: str
    backend: Backend
    turn: int
    profile: Profile
    weights: Weights
    decoy_reward: DecoyReward


class EvalResult(TypedDict, total=False):
    """An evaluation's result (the README's "A result" paragraph lists every field)."""

    verdict: Verdict
    compiled: bool
    correct: bool
    trials_passed: int
    trials_total: int
    speedup: float | None
    runtime_ms: RuntimeStats | None
    ref_runtime_ms: RuntimeStats | None
    error_code: str | None
    error_message: str | None
    flags: list[dict[str, Any]]
    custom_time_coverage: float | None


class TaskView(TypedDict, total=False):
    """``GET /tasks/{id}``: a task and, once ``done``, its result."""

    task_id: str
    status: TaskStatus
    result: EvalResult | None
    error: str | None
    attempts: int
    cached: bool


class RewardComponents(TypedDict):
    """Each component's score before weighting (docs/REWARDS.md)."""

    format: float
    compile: float
    correctness: float
    speed: float
    length: float
    thinking: float
    coverage: float
    penalty: float


class _RolloutResultRequired(TypedDict):
    id: str
    task_id: str | None
    status: RolloutStatus
    turn: int
    problem_hash: str
    profile: Profile
    reward: float | None
    components: RewardComponents | None
    format_ok: bool
    result: EvalResult | None
    feedback: str


class RolloutResult(_RolloutResultRequired, total=False):
    """One scored rollout of ``GET /batches/{id}/results``.

    ``reward`` is None when the service produced no verdict (``failed``, ``cancelled``,
    ``expired``): an outage, not the model's fault, so leave it out of the update.
    """

    problem: ProblemRef
    error: str
