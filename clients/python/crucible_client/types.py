"""Shapes of the JSON the service exchanges, for type checkers and readers.

The client returns the decoded JSON as plain dicts (typed with these ``TypedDict``\\ s) rather
than objects: a trainer logs, filters and ships them between processes as they are, and a
field the server adds later reaches it without a client release.

Each type mirrors one schema of the service's OpenAPI document (``GET /openapi.json``; the
schema's name is in ``SCHEMAS``), field for field: a key the schema does not require may be
absent (the part of the type after ``total=False``), and a field the schema lets be ``null``
is ``X | None``. ``tests/test_wire_types.py`` checks every one against a live server's
document, both ways, so the two cannot drift apart.
"""

from __future__ import annotations

from typing import Literal, TypedDict

Backend = Literal["triton", "cuda"]
Profile = Literal["kernel_rl", "kevin", "drkernel"]
Priority = Literal["low", "normal", "high"]
TaskStatus = Literal["queued", "running", "done", "failed", "cancelled"]
Verdict = Literal["ok", "incorrect", "decoy", "hack", "error"]
#: Why a kernel got its verdict (``error_code``); never an outage (docs/INTEGRITY.md).
VerdictCode = Literal[
    "SYNTAX",
    "IMPORT",
    "COMPILATION",
    "INSTANTIATION",
    "RUNTIME",
    "CORRECTNESS",
    "CUDA_FAULT",
    "CRASH",
    "TIMEOUT",
    "OUTPUT_LIMIT",
    "RESOURCE",
    "UNSUPPORTED",
    "REFERENCE",
    "SCREENED",
    "INTEGRITY",
]
# What a decoy scores: "zero" (default, like a hack) or "profile" (the profile's formula).
DecoyReward = Literal["zero", "profile"]
RolloutStatus = Literal["done", "no_kernel", "failed", "cancelled", "expired"]
TimingMode = Literal["fixed", "adaptive"]
Precision = Literal["fp32", "fp16", "bf16"]
TimingMethod = Literal["cuda_event", "do_bench", "host_time"]
ReferenceBackend = Literal["eager", "compile"]
DeviceKind = Literal["cuda", "cpu"]
#: Where a CUDA candidate's extensions came from when they were built ahead of the GPU.
BuildSource = Literal["compile_pool", "cache"]


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

    format: float | None
    compile: float | None
    correctness: float | None
    speed: float | None
    length: float | None
    thinking: float | None
    coverage: float | None
    speedup_cap: float | None
    # Negative penalties (-1000..0; off by default): no compile, incorrect, slower than PyTorch.
    penalty_compile: float | None
    penalty_incorrect: float | None
    penalty_slower: float | None


class Timing(TypedDict, total=False):
    """A request's ``timing``: ``fixed`` (every ``num_perf_trials`` call, KernelBench's
    protocol; the default) or ``adaptive`` (3 to ``num_perf_trials`` timed calls, stopping once
    the median's relative standard error is at most ``target_rel_error`` (0.001) or the timed
    calls took ``max_time_ms`` (2000))."""

    mode: TimingMode
    target_rel_error: float
    max_time_ms: int


class _RuntimeStatsRequired(TypedDict):
    median: float
    mean: float
    std: float
    min: float
    max: float


class RuntimeStats(_RuntimeStatsRequired, total=False):
    """Timing statistics in ms; ``trials`` (the timed calls made) and ``median_ci`` (the
    median's 95 % interval ``[lo, hi]``) are absent in results from older servers."""

    trials: int | None
    median_ci: list[float] | None


class _TimingCheckRequired(TypedDict):
    quiet_wait_ms: float
    device_quiet: bool


class TimingCheck(_TimingCheckRequired, total=False):
    """What the judge measured itself about a timing: ``runtime_ms`` is the candidate's
    process's claim, checked against ``floor_ms`` (a claim under it is the hack
    ``timing-mismatch``); only a reference timed on a quiet device (``device_quiet``) is cached."""

    floor_ms: float | None
    calls: int | None
    batches: int | None
    batch_ms: float | None
    call_overhead_ms: float | None


class EvalSettings(TypedDict, total=False):
    """The ``eval`` settings of a rollout batch; absent ones keep the server's defaults."""

    num_correct_trials: int | None
    num_perf_trials: int | None
    measure_performance: bool | None
    atol: float | None
    rtol: float | None
    timeout_s: int | None
    priority: Priority | None
    max_speedup: float | None
    timing: Timing | None
    # KernelBench's measurement options (absent: fp32, cuda_event, eager).
    precision: Precision | None
    timing_method: TimingMethod | None
    reference_backend: ReferenceBackend | None
    # Evaluate every rollout on workers of this device class ("h100", "cpu", ...); absent, the
    # server places each problem's rollouts together on one class. 422 when no worker has it.
    device_class: str | None


class _RolloutRequired(TypedDict):
    id: str
    completion: str


class Rollout(_RolloutRequired, total=False):
    """One completion to score; exactly one of ``problem`` and ``reference_code``."""

    problem: ProblemRef | None
    reference_code: str | None
    backend: Backend
    turn: int
    profile: Profile
    weights: Weights | None
    decoy_reward: DecoyReward


class _DeviceInfoRequired(TypedDict):
    kind: DeviceKind
    name: str


# ``class`` is a keyword, so this key is declared in the functional form (Python 3.10 has no
# ``NotRequired``: an optional key comes from a ``total=False`` part).
_DeviceInfoClass = TypedDict("_DeviceInfoClass", {"class": "str | None"}, total=False)


class DeviceInfo(_DeviceInfoRequired, _DeviceInfoClass):
    """Where an evaluation ran: ``cpu`` timings are labelled and never mixed with GPU ones;
    ``class`` is its device class (``h100``, ``cpu``, ...), what a request's ``device_class``
    matches (absent from servers of before classes)."""


class Flag(TypedDict):
    """A finding of static screening or of a runtime integrity check."""

    rule: str
    #: ``reject`` (decided the verdict ``SCREENED``), ``hack`` or ``flag`` (reported only).
    severity: str
    detail: str


class _EvalResultRequired(TypedDict):
    compiled: bool
    correct: bool
    trials_passed: int
    trials_total: int
    device: DeviceInfo


class EvalResult(_EvalResultRequired, total=False):
    """An evaluation's result (the README's "A result" paragraph says what each field means)."""

    verdict: Verdict
    max_abs_diff: float | None
    mean_abs_diff: float | None
    runtime_ms: RuntimeStats | None
    ref_runtime_ms: RuntimeStats | None
    ref_runtime_cached: bool
    speedup: float | None
    error_code: VerdictCode | None
    error_message: str | None
    #: Wall time of each stage of the evaluation, in ms.
    stage_ms: dict[str, float]
    output_tail: str | None
    flags: list[Flag]
    custom_kernel_count: int | None
    total_kernel_count: int | None
    custom_time_coverage: float | None
    build: BuildSource | None
    problem_hash: str | None
    timing_check: TimingCheck | None


class _TaskViewRequired(TypedDict):
    task_id: str
    status: TaskStatus
    attempts: int
    priority: Priority
    #: RFC 3339 timestamps, like ``started_at`` and ``finished_at``.
    submitted_at: str


class TaskView(_TaskViewRequired, total=False):
    """``GET /tasks/{id}``: a task and, once ``done``, its result."""

    result: EvalResult | None
    error: str | None
    worker_id: str | None
    batch_id: str | None
    started_at: str | None
    finished_at: str | None
    cached: bool
    #: The device class it must run on (the request's, or its group's placement); None: any.
    device_class: str | None


class _SubmitResponseRequired(TypedDict):
    task_id: str
    status: TaskStatus


class SubmitResponse(_SubmitResponseRequired, total=False):
    """``POST /evaluate``'s 202: the task, and whether an earlier one answered (``cached``:
    a new task, already done; ``coalesced``: an identical open task; ``deduplicated``: the
    idempotency key's)."""

    deduplicated: bool
    coalesced: bool
    cached: bool


class StatusCounts(TypedDict):
    """A batch's tasks by status."""

    queued: int
    running: int
    done: int
    failed: int
    cancelled: int


class _BatchStatusRequired(TypedDict):
    batch_id: str
    total: int
    counts: StatusCounts
    task_ids: list[str]


class BatchStatus(_BatchStatusRequired, total=False):
    """``GET /batches/{id}``; ``tasks`` with ``include_tasks``."""

    tasks: list[TaskView] | None


class CancelResponse(TypedDict):
    """``DELETE /tasks/{id}``: the task, now ``cancelled``, and the status it had."""

    task_id: str
    status: TaskStatus
    was: TaskStatus


class BatchCancelResponse(TypedDict):
    """``DELETE /batches/{id}``: what became of each distinct task of the batch."""

    batch_id: str
    cancelled_queued: int
    cancelled_running: int
    already_finished: int


class TenantCounts(TypedDict):
    """A tenant's open tasks (``/queue/status``'s ``tenants``)."""

    tenant: str
    queued: int
    running: int


class _QueueStatusRequired(TypedDict):
    queued_high: int
    queued_normal: int
    queued_low: int
    running: int
    queue_cap: int
    submitted_total: int
    done_total: int
    failed_total: int
    cancelled_total: int
    requeued_total: int


class _ClassQueueRequired(TypedDict):
    queued: int
    workers: int
    unservable: bool


class ClassQueue(_ClassQueueRequired, total=False):
    """One row of ``/queue/status``'s ``classes``: ``device_class`` None for unclassed tasks;
    ``unservable`` when tasks wait and no live worker has the class."""

    device_class: str | None


class QueueStatus(_QueueStatusRequired, total=False):
    """``GET /queue/status``: depths, the cap, lifetime counters and cache figures."""

    cache_hits_total: int
    cache_misses_total: int
    coalesced_total: int
    ref_cache_hits_total: int
    ref_cache_misses_total: int
    tenants: list[TenantCounts] | None
    classes: list[ClassQueue] | None


class HealthStatus(TypedDict):
    """``GET /health``: ``status`` ``ok``, ``degraded`` (no worker ready) or ``unavailable``."""

    status: str
    broker: str
    broker_ok: bool
    workers_alive: int
    workers_unhealthy: int
    version: str


class _RewardComponentsRequired(TypedDict):
    format: float
    compile: float
    correctness: float
    speed: float
    length: float
    thinking: float
    coverage: float


class RewardComponents(_RewardComponentsRequired, total=False):
    """Each component's score before weighting (docs/REWARDS.md); ``penalty`` is absent in
    results of servers from before penalties."""

    penalty: float


class _RolloutBatchResponseRequired(TypedDict):
    batch_id: str
    rollouts: int
    evaluated: int


class RolloutBatchResponse(_RolloutBatchResponseRequired, total=False):
    """``POST /rollouts``'s answer (``Client.submit_rollouts`` folds these into a
    ``Submission``)."""

    deduplicated: bool


class _RolloutResultRequired(TypedDict):
    id: str
    status: RolloutStatus
    turn: int
    problem_hash: str
    profile: Profile
    format_ok: bool
    feedback: str


class RolloutResult(_RolloutResultRequired, total=False):
    """One scored rollout of ``GET /batches/{id}/results``.

    The server always sends ``task_id``, ``reward``, ``components`` and ``result``, null when
    they do not apply. ``reward`` is None when the service produced no verdict (``failed``,
    ``cancelled``, ``expired``; ``error`` says why): an outage, not the model's fault, so leave
    it out of the update.
    """

    task_id: str | None
    problem: ProblemRef | None
    reward: float | None
    components: RewardComponents | None
    result: EvalResult | None
    error: str | None


class RolloutResultsPage(TypedDict):
    """One page of ``GET /batches/{id}/results``."""

    batch_id: str
    results: list[RolloutResult]
    cursor: int
    done: bool
    total: int


#: The OpenAPI schema each type mirrors, by the schema's name.
SCHEMAS: dict[str, type] = {
    "ProblemRef": ProblemRef,
    "ProblemInfo": ProblemInfo,
    "Problem": Problem,
    "WeightsOverride": Weights,
    "TimingRequest": Timing,
    "RuntimeStats": RuntimeStats,
    "TimingCheck": TimingCheck,
    "RolloutEvalSettings": EvalSettings,
    "Rollout": Rollout,
    "DeviceInfo": DeviceInfo,
    "Flag": Flag,
    "EvalResult": EvalResult,
    "TaskView": TaskView,
    "SubmitResponse": SubmitResponse,
    "StatusCounts": StatusCounts,
    "BatchStatus": BatchStatus,
    "CancelResponse": CancelResponse,
    "BatchCancelResponse": BatchCancelResponse,
    "TenantCounts": TenantCounts,
    "ClassQueue": ClassQueue,
    "QueueStatus": QueueStatus,
    "HealthStatus": HealthStatus,
    "RewardComponents": RewardComponents,
    "RolloutBatchResponse": RolloutBatchResponse,
    "RolloutResult": RolloutResult,
    "RolloutResultsPage": RolloutResultsPage,
}

#: The OpenAPI enum each ``Literal`` mirrors, by the schema's name.
ENUMS: dict[str, object] = {
    "Backend": Backend,
    "RewardProfile": Profile,
    "Priority": Priority,
    "TaskStatus": TaskStatus,
    "Verdict": Verdict,
    "VerdictCode": VerdictCode,
    "DecoyReward": DecoyReward,
    "RolloutStatus": RolloutStatus,
    "TimingMode": TimingMode,
    "Precision": Precision,
    "TimingMethod": TimingMethod,
    "ReferenceBackend": ReferenceBackend,
    "DeviceKind": DeviceKind,
    "BuildSource": BuildSource,
}
