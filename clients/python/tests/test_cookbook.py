"""The tinker_cookbook environment (crucible_client.cookbook) against the real tinker-cookbook
package and a live Crucible (conftest.py's server): the cookbook's own ``do_group_rollout``
runs a group of two episodes through its ``EnvFromMessageEnv`` with a real renderer
(``role_colon``, over a byte-level BPE tokenizer trained here: no model is downloaded) and a
policy that answers the problem with a wrong kernel and the server's feedback with a correct
one; the builder pickles before and after, and its client is closed by the cookbook's
``cleanup`` call. Skipped where tinker-cookbook is not installed (scripts/test.sh installs it in
the trainers' venv and runs this file there)."""

from __future__ import annotations

import asyncio
import pickle

import pytest
from conftest import Server
from offline_tokenizer import offline_tokenizer as make_tokenizer
from test_adapters import CORRECT, CORRECT_REWARD, FAST_EVAL, RELU_PROBLEM, TIMEOUT_S, WRONG
from test_adapters import WRONG_REWARD, tagged

pytest.importorskip("tinker_cookbook")

from tinker_cookbook import renderers  # noqa: E402
from tinker_cookbook.completers import TokenCompleter, TokensWithLogprobs  # noqa: E402
from tinker_cookbook.rl.rollouts import do_group_rollout  # noqa: E402
from tinker_cookbook.rl.types import EnvGroupBuilder  # noqa: E402

from crucible_client.cookbook import KernelEnvGroupBuilder, message_text  # noqa: E402


def offline_tokenizer():
    return make_tokenizer(["User: Assistant: System:", CORRECT, WRONG])


class FeedbackPolicy(TokenCompleter):
    """A wrong kernel for the problem, a correct one once the server's feedback is in the
    prompt; each answer ends with the renderer's stop sequence, as a sampler's does."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.prompts: list[str] = []

    async def __call__(self, model_input, stop, *, max_tokens=None) -> TokensWithLogprobs:
        prompt = self.tokenizer.decode(model_input.to_ints())
        self.prompts.append(prompt)
        answer = tagged(CORRECT if "was evaluated" in prompt else WRONG, "thinking")
        tokens = self.tokenizer.encode(answer + stop[0], add_special_tokens=False)
        return TokensWithLogprobs(tokens=tokens, maybe_logprobs=[0.0] * len(tokens))


def test_message_text_takes_a_string_or_text_parts():
    assert message_text({"role": "assistant", "content": "abc"}) == "abc"
    parts = [{"type": "thinking", "thinking": "<think>x</think>"}, {"type": "text", "text": "y"}]
    assert message_text({"role": "assistant", "content": parts}) == "<think>x</think>y"
    assert message_text(None) == ""


def test_a_client_is_refused_and_the_builder_is_the_cookbooks():
    tokenizer = offline_tokenizer()
    renderer = renderers.get_renderer("role_colon", tokenizer, model_name="offline")
    with pytest.raises(ValueError, match="must pickle"):
        KernelEnvGroupBuilder(RELU_PROBLEM, group_size=1, renderer=renderer, url="x", client=1)
    builder = KernelEnvGroupBuilder(RELU_PROBLEM, group_size=1, renderer=renderer, url="x")
    assert isinstance(builder, EnvGroupBuilder)


def test_the_cookbooks_group_rollout_runs_the_environment(server: Server):
    tokenizer = offline_tokenizer()
    renderer = renderers.get_renderer("role_colon", tokenizer, model_name="offline")
    builder = KernelEnvGroupBuilder(
        RELU_PROBLEM,
        group_size=2,
        renderer=renderer,
        url=server.url,
        eval=FAST_EVAL,
        timeout=TIMEOUT_S,
        max_turns=3,
        system_prompt="You write Triton kernels.",
    )
    pickle.dumps(builder)
    policy = FeedbackPolicy(tokenizer)

    group = asyncio.run(do_group_rollout(builder, policy))

    assert builder._client is None, "the cookbook's cleanup closed the client"
    pickle.dumps(builder)
    assert len(group.trajectories_G) == 2 and not group.rollout_errors
    for trajectory in group.trajectories_G:
        rewards = [t.reward for t in trajectory.transitions]
        # Wrong, then correct: the episode ends early at the correct kernel.
        assert rewards == pytest.approx([WRONG_REWARD + 0.1, CORRECT_REWARD + 0.1])
        assert [t.episode_done for t in trajectory.transitions] == [False, True]
        first, last = trajectory.transitions
        assert first.metrics["correct"] == 0.0 and first.metrics["compiled"] == 1.0
        assert last.metrics["solved"] == 1.0 and last.metrics["stop/completed"] == 1.0
        assert "feedback" in first.logs and first.logs["turn"] == 0
        assert trajectory.stop_reason == "completed"
    assert group.get_total_rewards() == pytest.approx([WRONG_REWARD + CORRECT_REWARD + 0.2] * 2)
    # The second prompt is the whole conversation: the problem, the attempt (its thinking
    # dropped) and the server's feedback, in the renderer's format.
    second = [p for p in policy.prompts if "was evaluated" in p][0]
    assert "torch.relu(x)" in second and "System: You write Triton kernels." in second
    assert "<think>" not in second.split("Assistant:", 1)[1]
