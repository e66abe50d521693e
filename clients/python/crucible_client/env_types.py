"""The wire types of the environment side (docs/ENVIRONMENT.md): problem sets and batches,
reports, prompts, and episodes. Kept apart from ``types`` (the evaluation and rollout types)
so each file stays readable; registered in the same ``SCHEMAS`` and ``ENUMS``, which
``tests/test_wire_types.py`` checks against a live server's ``/openapi.json``."""

from __future__ import annotations

from typing import Literal, TypedDict

from .types import (
    ENUMS,
    SCHEMAS,
    Backend,
    ProblemInfo,
    ProblemRef,
    Profile,
    RolloutResult,
)

# psets (issue 17): problem sets and batch reports.

Split = Literal["train", "test"]
ReportSource = Literal["rollouts", "evaluations"]


class ProblemSetSelection(TypedDict, total=False):
    """Which problems form a set and how they split; an absent key takes the server's
    default (level 1, backend triton, test_fraction 0.1, seed 0, the level's whole id range)."""

    level: int
    start: int | None
    end: int | None
    backend: Backend
    test_fraction: float
    seed: int


class ProblemSet(TypedDict):
    """``GET /problem-sets``: the selection (``start``/``end`` resolved) and its splits."""

    selection: ProblemSetSelection
    train: list[ProblemInfo]
    test: list[ProblemInfo]


class _ProblemBatchRequestRequired(TypedDict):
    epoch: int
    step: int


class ProblemBatchRequest(_ProblemBatchRequestRequired, total=False):
    """``POST /problem-sets/batches``; absent keys take the server's defaults (kernel_rl's)."""

    set: ProblemSetSelection
    split: Split
    batch_size: int
    group_size: int
    shuffle: bool


class BatchProblem(ProblemInfo):
    """One problem of a step and how many rollouts to sample for it."""

    group_size: int


class ProblemBatch(TypedDict):
    """The problems of one step; ``last_step`` ends the epoch."""

    split: Split
    epoch: int
    step: int
    steps_per_epoch: int
    last_step: bool
    backend: Backend
    problems: list[BatchProblem]


class FastP(TypedDict):
    """fast_p for one p: correct and speedup above p, over all samples."""

    p: float
    count: int
    rate: float


class _GroupReportRequired(TypedDict):
    samples: int
    correct: int
    correct_rate: float
    fast_p: list[FastP]
    timed: int
    incorrect: int
    errors: int
    hacks: int
    decoys: int
    no_kernel: int
    unscored: int
    pending: int


class GroupReport(_GroupReportRequired, total=False):
    """One level's figures (``level`` None: no registered problem, or ``overall``)."""

    level: int | None
    mean_speedup: float | None
    geomean_speedup: float | None


class BatchReport(TypedDict):
    """``GET /batches/{id}/report``."""

    batch_id: str
    source: ReportSource
    done: bool
    overall: GroupReport
    levels: list[GroupReport]



# Episodes (``POST /episodes``, docs/ENVIRONMENT.md "Episodes").

TurnStatus = Literal["pending", "scored", "failed"]

#: Which examples a first-turn prompt carries (docs/ENVIRONMENT.md, "Prompts").
PromptOption = Literal["zero_shot", "one_shot", "few_shot", "raicl"]


class PromptSettings(TypedDict, total=False):
    """How a prompt is asked for; every key may be left out. ``k``: few_shot 1-3 (default 3),
    raicl 1-8 (default 3); in a prompt's settings, the number used."""

    option: PromptOption
    backend: Backend
    thinking: bool
    k: int | None


class PromptRequest(TypedDict, total=False):
    """``POST /prompts``: a registered ``problem`` or its ``reference_code``, and settings."""

    problem: ProblemRef | None
    reference_code: str | None
    settings: PromptSettings


class Prompt(TypedDict):
    """A first-turn prompt: the text, its settings, the ids of its examples and the format
    the response must follow (also inside ``text``)."""

    text: str
    settings: PromptSettings
    examples: list[str]
    response_format: str


class _EpisodesStartedRequired(TypedDict):
    episode_id: str
    episode_ids: list[str]
    prompt: Prompt
    max_turns: int
    gamma: float


class EpisodesStarted(_EpisodesStartedRequired, total=False):
    """``POST /episodes``: the episode ids (one, or a group's) and the first prompt."""

    group_id: str | None


class _TurnViewRequired(TypedDict):
    episode_id: str
    turn: int
    status: TurnStatus
    batch_id: str
    feedback: str
    done: bool


class TurnView(_TurnViewRequired, total=False):
    """One turn: ``reward`` (None while ``pending`` and for a ``failed`` turn: post the same
    completion again), ``feedback``, ``done``, the ``next_prompt``, and once done the
    ``returns`` of every turn."""

    reward: float | None
    rollout: RolloutResult | None
    next_prompt: Prompt | None
    returns: list[float] | None


class _EpisodeViewRequired(TypedDict):
    episode_id: str
    problem_hash: str
    profile: Profile
    max_turns: int
    gamma: float
    prompt: Prompt
    turns: list[TurnView]
    done: bool


class EpisodeView(_EpisodeViewRequired, total=False):
    """``GET /episodes/{id}``: every turn so far, and once done the returns."""

    group_id: str | None
    problem: ProblemRef | None
    returns: list[float] | None


SCHEMAS.update(
    {
        "ProblemSetSelection": ProblemSetSelection,
        "ProblemSet": ProblemSet,
        "ProblemBatchRequest": ProblemBatchRequest,
        "BatchProblem": BatchProblem,
        "ProblemBatch": ProblemBatch,
        "FastP": FastP,
        "GroupReport": GroupReport,
        "BatchReport": BatchReport,
        "PromptSettings": PromptSettings,
        "PromptRequest": PromptRequest,
        "Prompt": Prompt,
        "EpisodesStarted": EpisodesStarted,
        "TurnView": TurnView,
        "EpisodeView": EpisodeView,
    }
)
ENUMS.update(
    {
        "Split": Split,
        "ReportSource": ReportSource,
        "PromptOption": PromptOption,
        "TurnStatus": TurnStatus,
    }
)
