"""The SkyRL-Gym environment (crucible_client.skyrl) against the real skyrl-gym package and a
live Crucible (conftest.py's server): registered in skyrl_gym's registry and made by
``skyrl_gym.make`` with an OmegaConf config section and a dataset row's extras, as SkyRL makes
its environments, then driven through an episode (a wrong kernel, the server's feedback as the
one new user message, a correct kernel that ends it) and through one that runs out of turns.
Skipped where skyrl-gym is not installed (scripts/test.sh runs this file in the trainers' venv)."""

from __future__ import annotations

import pytest
from conftest import Server
from test_adapters import (
    CORRECT,
    CORRECT_REWARD,
    FAST_EVAL,
    RELU_PROBLEM,
    TIMEOUT_S,
    WRONG,
    WRONG_REWARD,
    tagged,
)

skyrl_gym = pytest.importorskip("skyrl_gym")

from omegaconf import OmegaConf  # noqa: E402
from skyrl_gym.envs.base_text_env import BaseTextEnv  # noqa: E402

from crucible_client.skyrl import ENV_ID, KernelTextEnv, register  # noqa: E402

PROMPT = [{"role": "system", "content": "You write Triton kernels."},
          {"role": "user", "content": "Make torch.relu faster: give ModelNew after <KERNEL>."}]


def make(server: Server, **config) -> BaseTextEnv:
    register()
    env_config = OmegaConf.create({"url": server.url, "eval": FAST_EVAL, "timeout": TIMEOUT_S,
                                   "max_turns": 2, **config})
    extras = {"reward_spec": {"method": "rule", "ground_truth": RELU_PROBLEM}}
    return skyrl_gym.make(ENV_ID, env_config=env_config, extras=extras)


def test_bad_config_is_refused_before_anything_is_sent():
    with pytest.raises(ValueError, match="ground_truth"):
        KernelTextEnv({"url": "http://x"}, {"reward_spec": {}})
    with pytest.raises(ValueError, match="url"):
        KernelTextEnv({}, {"reward_spec": {"ground_truth": RELU_PROBLEM}})
    assert register() == register() == ENV_ID


def test_skyrl_makes_and_runs_the_environment(server: Server):
    env = make(server)
    assert isinstance(env, KernelTextEnv) and isinstance(env, BaseTextEnv)
    try:
        prompt, info = env.init(PROMPT)
        assert prompt == PROMPT and info == {}
        first = env.step(tagged(WRONG, "leaky"))
        assert set(first) >= {"observations", "reward", "done", "metadata"}
        assert first["reward"] == pytest.approx(WRONG_REWARD + 0.1) and not first["done"]
        [feedback] = first["observations"]
        assert feedback["role"] == "user" and "turn 0" in feedback["content"]
        assert first["metadata"]["correct"] == 0.0 and "feedback" in first["metadata"]
        second = env.step(tagged(CORRECT, "one block per program"))
        assert second["reward"] == pytest.approx(CORRECT_REWARD + 0.1)
        assert second["done"] and second["observations"] == []
        metrics = env.get_metrics()
        assert metrics["solved"] == 1.0 and metrics["turns"] == 2
        assert KernelTextEnv.aggregate_metrics([metrics, metrics])["solved"] == 1.0
    finally:
        env.close()
        env.close()


def test_an_episode_ends_after_max_turns(server: Server):
    env = make(server, max_turns=1)
    try:
        env.init(PROMPT)
        out = env.step(tagged(WRONG))
        assert out["done"] and out["observations"] == []
        assert env.get_metrics()["solved"] == 0.0
    finally:
        env.close()
