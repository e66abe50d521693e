"""Python client of Crucible, the GPU kernel-evaluation service for RL trainers.

``Client`` / ``AsyncClient`` speak the HTTP API (evaluate one kernel; submit rollouts and
stream their rewards); ``returns`` has the multi-turn helpers; ``reward_fn`` the VERL and
TRL reward functions.
"""

from .aio import AsyncClient
from .base import DEFAULT_URL, Submission, make_rollout, problem_ref
from .client import Client
from .errors import CrucibleError
from .retry import RetryPolicy
from .returns import DEFAULT_GAMMA, discounted_returns, stops_early
from .reward_fn import compute_score, compute_scores, make_trl_reward

__all__ = [
    "DEFAULT_GAMMA",
    "DEFAULT_URL",
    "AsyncClient",
    "Client",
    "CrucibleError",
    "RetryPolicy",
    "Submission",
    "compute_score",
    "compute_scores",
    "discounted_returns",
    "make_rollout",
    "make_trl_reward",
    "problem_ref",
    "stops_early",
]
