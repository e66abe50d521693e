"""Python client of Crucible, the GPU kernel-evaluation service for RL trainers.

``Client`` / ``AsyncClient`` speak the HTTP API (evaluate one kernel; submit rollouts and
stream their rewards; cancel tasks and batches); ``episodes`` drives server-side multi-turn episodes (``Episode``, ``EpisodeGroup`` and their
asyncio twins); ``returns`` has the multi-turn helpers; the
trainer adapters are ``verl_reward`` (VERL's custom reward function), ``trl_reward`` (TRL's
``reward_funcs``) and ``tinker_env`` (a tinker_cookbook-style multi-turn environment); imported on
their own, with their trainer installed: ``verl_agent_loop`` (VERL's multi-turn agent loop),
``trl_env`` (TRL's ``environment_factory``), ``skyrl``, ``cookbook``, ``openenv_env``; ``kernelbench`` has
KernelBench's ``eval_kernel_against_ref``, answered by the service.
"""

from .aio import AsyncClient
from .base import DEFAULT_URL, Submission, make_rollout, problem_ref
from .client import Client
from .episodes import AsyncEpisode, AsyncEpisodeGroup, Episode, EpisodeGroup
from .errors import CrucibleError, NotEvaluated, TaskTimeout
from .retry import RetryPolicy
from .returns import DEFAULT_GAMMA, discounted_returns, stops_early
from .scoring import problem_target
from .tinker_env import KernelEnv, KernelEnvGroupBuilder, StepResult
from .trl_reward import make_async_trl_reward, make_trl_reward
from .verl_reward import compute_score, compute_score_async, compute_scores, compute_scores_async

__all__ = [
    "DEFAULT_GAMMA",
    "DEFAULT_URL",
    "AsyncClient",
    "AsyncEpisode",
    "AsyncEpisodeGroup",
    "Client",
    "CrucibleError",
    "Episode",
    "EpisodeGroup",
    "KernelEnv",
    "KernelEnvGroupBuilder",
    "NotEvaluated",
    "RetryPolicy",
    "StepResult",
    "Submission",
    "TaskTimeout",
    "compute_score",
    "compute_score_async",
    "compute_scores",
    "compute_scores_async",
    "discounted_returns",
    "make_async_trl_reward",
    "make_rollout",
    "make_trl_reward",
    "problem_ref",
    "problem_target",
    "stops_early",
]
