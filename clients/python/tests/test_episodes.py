"""Episodes through the Python helpers against the live server (conftest.py): an ``Episode``
refines a wrong kernel into a correct one and gets the returns computed by hand; an
``EpisodeGroup`` and its asyncio twin run a group to the end; a repost of a turn is the same
turn and another completion for it a 409; another tenant's episode is not found."""

from __future__ import annotations

import asyncio

import pytest
from conftest import REPO, Server
from test_auth import new_tenant

from crucible_client import (
    AsyncClient,
    AsyncEpisodeGroup,
    Client,
    CrucibleError,
    Episode,
    EpisodeGroup,
    discounted_returns,
)

SOFTMAX = (REPO / "tests" / "problems" / "softmax.py").read_text()
CORRECT = (REPO / "tests" / "candidates" / "softmax__correct.py").read_text()
WRONG = (REPO / "tests" / "candidates" / "softmax__wrong.py").read_text()
#: Reward = 0.1 format + 0.2 compiled + trials passed / trials (no timing, no length term).
SETTINGS = {
    "reference_code": SOFTMAX,
    "weights": {"length": 0.0},
    "eval": {"num_correct_trials": 2, "measure_performance": False, "timeout_s": 120},
}


def tagged(code: str) -> str:
    return f"<KERNEL>\n```python\n{code}\n```\n"


def test_an_episode_refines_to_a_correct_kernel_with_hand_returns(server: Server):
    with Client(server.url) as client:
        episode = Episode.start(client, **SETTINGS)
        assert "class Model(" in episode.prompt
        first = episode.step(tagged(WRONG))
        result = first["rollout"]["result"]
        passed, total = result["trials_passed"], result["trials_total"]
        assert (result["verdict"], passed < total) == ("incorrect", True)
        assert first["reward"] == pytest.approx(0.3 + passed / total)
        assert not episode.done and WRONG.strip() in episode.prompt
        assert first["feedback"] in episode.prompt
        # The same completion again is the same turn; another one for it is refused.
        again = client.post_turn(episode.id, tagged(WRONG), turn=0)
        assert again["rollout"]["task_id"] == first["rollout"]["task_id"]
        with pytest.raises(CrucibleError) as e:
            client.post_turn(episode.id, "something else", turn=0)
        assert (e.value.status, e.value.code) == (409, "CONFLICT")
        second = episode.step(tagged(CORRECT))
        assert second["reward"] == pytest.approx(1.3)
        assert episode.done and second["done"]
        want = [0.3 + passed / total + 0.4 * 1.3, 1.3]
        assert episode.returns == pytest.approx(want)
        assert episode.returns == pytest.approx(discounted_returns(episode.rewards, 0.4))
        with pytest.raises(ValueError):
            episode.step(tagged(CORRECT))
        assert client.episode(episode.id)["returns"] == episode.returns


def test_a_group_runs_to_the_end_sync_and_async(server: Server):
    with Client(server.url) as client:
        group = EpisodeGroup.start(client, 2, max_turns=2, **SETTINGS)
        assert len(group.episodes) == 2 and group.group_id
        views = group.step(["no kernel here", tagged(CORRECT)])
        assert [v["reward"] for v in views] == pytest.approx([0.0, 1.3])
        assert group.prompts[1] is None and group.prompts[0] is not None
        group.step(["still nothing", None])
        assert group.done
        assert group.returns == [pytest.approx([0.0, 0.0]), pytest.approx([1.3])]

    async def run_async() -> list[list[float] | None]:
        async with AsyncClient(server.url) as client:
            group = await AsyncEpisodeGroup.start(client, 3, max_turns=1, **SETTINGS)
            await group.step(["a", "b", "c"])
            assert group.done
            return group.returns

    assert asyncio.run(run_async()) == [[0.0], [0.0], [0.0]]


def test_another_tenants_episode_is_not_found(secured: Server):
    with Client(secured.url, token=new_tenant(secured)) as owner:
        episode = Episode.start(owner, **SETTINGS)
    with Client(secured.url, token=new_tenant(secured)) as other:
        for call in (
            lambda: other.episode(episode.id),
            lambda: other.post_turn(episode.id, "mine now"),
        ):
            with pytest.raises(CrucibleError) as e:
                call()
            assert (e.value.status, e.value.code) == (404, "NOT_FOUND")
