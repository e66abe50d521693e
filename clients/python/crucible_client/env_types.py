"""The wire types of the environment side (docs/ENVIRONMENT.md): problem sets and batches,
reports, prompts, and episodes. Generated into ``_wire_env_types`` from the API's
OpenAPI document (``scripts/gen_python_types.py``); named here apart from ``types`` (the
evaluation and rollout types) for the modules that import them."""

from __future__ import annotations

from ._wire_env_types import (
    BatchProblem,
    BatchReport,
    EpisodeView,
    EpisodesStarted,
    FastP,
    GroupReport,
    ProblemBatch,
    ProblemBatchRequest,
    ProblemSet,
    ProblemSetSelection,
    Prompt,
    PromptOption,
    PromptRequest,
    PromptSettings,
    ReportSource,
    Split,
    TurnStatus,
    TurnView,
)
from .types import (
    ENUMS,
    SCHEMAS,
    Backend,
    ProblemInfo,
    ProblemRef,
    Profile,
    RolloutResult,
)

__all__ = [
    "ENUMS",
    "SCHEMAS",
    "Backend",
    "BatchProblem",
    "BatchReport",
    "EpisodeView",
    "EpisodesStarted",
    "FastP",
    "GroupReport",
    "ProblemBatch",
    "ProblemBatchRequest",
    "ProblemInfo",
    "ProblemRef",
    "ProblemSet",
    "ProblemSetSelection",
    "Profile",
    "Prompt",
    "PromptOption",
    "PromptRequest",
    "PromptSettings",
    "ReportSource",
    "RolloutResult",
    "Split",
    "TurnStatus",
    "TurnView",
]
