"""Problem sets, batches and reports through both clients against a live server (conftest's,
with the registry of ``tests/rollouts``): the sync and async clients get the same split and
batches, an epoch's steps cover the train split once, a bad selection raises with the field,
and the report of a batch with a completion that holds no kernel counts it as not correct."""

from __future__ import annotations

import asyncio

import pytest
from conftest import Server

from crucible_client import AsyncClient, Client, CrucibleError


def test_sync_and_async_clients_agree_on_splits_and_batches(server: Server):
    with Client(server.url) as client:
        split = client.problem_set(level=1, test_fraction=0.2, seed=5)
        train = sorted(p["id"] for p in split["train"])
        assert len(split["test"]) == round(len(train + split["test"]) * 0.2)
        order, step, last = [], 0, False
        while not last:
            batch = client.problem_batch(0, step, batch_size=2, group_size=3, test_fraction=0.2, seed=5)
            assert all(p["group_size"] == 3 for p in batch["problems"])
            order += [p["id"] for p in batch["problems"]]
            last, step = batch["last_step"], step + 1
        assert sorted(order) == train, "an epoch covers the train split once"
        assert step == batch["steps_per_epoch"]
        with pytest.raises(CrucibleError) as bad:
            client.problem_set(level=1, test_fraction=1.5)
        assert bad.value.status == 422 and bad.value.field == "test_fraction"

    async def same_from_async():
        async with AsyncClient(server.url) as aclient:
            return (
                await aclient.problem_set(level=1, test_fraction=0.2, seed=5),
                await aclient.problem_batch(0, 0, batch_size=2, group_size=3, test_fraction=0.2, seed=5),
            )

    async_split, async_batch = asyncio.run(same_from_async())
    assert async_split == split
    with Client(server.url) as client:
        assert client.problem_batch(0, 0, batch_size=2, group_size=3, test_fraction=0.2, seed=5) == async_batch


def test_a_report_counts_a_completion_without_a_kernel_as_not_correct(server: Server):
    with Client(server.url) as client:
        submission = client.submit_rollouts(
            [{"id": "prose", "problem": {"level": 1, "id": 19}, "completion": "no kernel here"}]
        )
        report = client.report(submission.batch_ids[0])
    assert report["source"] == "rollouts" and report["done"]
    (level,) = report["levels"]
    assert (level["level"], level["samples"], level["no_kernel"], level["correct_rate"]) == (1, 1, 1, 0.0)
    assert [f["rate"] for f in level["fast_p"]] == [0.0] * 5
    assert report["overall"]["samples"] == 1
