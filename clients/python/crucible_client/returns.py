"""Multi-turn returns for refinement loops (Kevin-style): each turn's discounted return, and
the rule that ends a trajectory once its kernel is good enough. Pure functions, the same as
the Rust ``crucible_client::returns``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

#: γ of the recipes (kernel_rl, Kevin): a turn gets some credit for the better kernels its
#: feedback led to, but less than the turns that wrote them.
DEFAULT_GAMMA = 0.4


def discounted_returns(scores: Sequence[float], gamma: float = DEFAULT_GAMMA) -> list[float]:
    """``R_t = s_t + γ·R_{t+1}`` for every turn ``t`` of one trajectory, from its per-turn
    scores (computed from the last turn backwards)."""
    returns = [0.0] * len(scores)
    following = 0.0
    for t in range(len(scores) - 1, -1, -1):
        following = scores[t] + gamma * following
        returns[t] = following
    return returns


def stops_early(result: Mapping[str, Any] | None, min_speedup: float | None = None) -> bool:
    """Whether a trajectory stops after this turn: the kernel is correct (verdict ``ok``)
    and, when ``min_speedup`` is given, at least that fast.

    ``result`` is an evaluation result, or a rollout result holding one under ``result``
    (what ``stream_results`` yields); None or a rollout without a verdict never stops.
    """
    if result is None:
        return False
    evaluation = result if "verdict" in result else result.get("result")
    if not evaluation or evaluation.get("verdict") != "ok":
        return False
    if min_speedup is None:
        return True
    speedup = evaluation.get("speedup")
    return speedup is not None and speedup >= min_speedup
