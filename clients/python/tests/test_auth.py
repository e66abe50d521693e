"""The clients against a live Crucible that requires bearer tokens (conftest.py's
``secured``): a tenant's token from the argument or ``$CRUCIBLE_TOKEN``, a missing or bad one
refused at once (401, never retried), and another tenant's batch not found. The rollouts here
hold no kernel, so they are scored on their text and no worker is needed."""

from __future__ import annotations

import asyncio
import uuid

import httpx
import pytest
from conftest import ADMIN_TOKEN, Server

from crucible_client import AsyncClient, Client, CrucibleError, make_rollout

RELU = "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x\n"


def new_tenant(server: Server) -> str:
    """Creates a tenant with the admin token; returns its token."""
    answer = httpx.post(
        f"{server.url}/admin/tenants",
        json={"name": f"py-{uuid.uuid4().hex[:12]}"},
        headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
        timeout=10.0,
    )
    assert answer.status_code == 201, answer.text
    return answer.json()["token"]


def prose(id: str):
    return make_rollout(id, "No kernel this time.", reference_code=RELU)


def test_a_tenant_scores_its_rollouts_with_its_token(secured: Server):
    with Client(secured.url, token=new_tenant(secured)) as c:
        submission = c.submit_rollouts([prose("a"), prose("b")])
        results = list(c.stream_results(submission, timeout=60))
    assert sorted(r["id"] for r in results) == ["a", "b"]
    assert all(r["status"] == "no_kernel" for r in results)


def test_the_token_comes_from_the_environment(secured: Server, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("CRUCIBLE_TOKEN", new_tenant(secured))
    with Client(secured.url) as c:
        assert c.queue_status()["tenants"][0]["queued"] == 0

    async def go():
        async with AsyncClient(secured.url) as c:
            return await c.queue_status()

    assert "tenants" in asyncio.run(go())


def test_no_token_or_a_bad_one_is_refused_at_once(secured: Server, monkeypatch):
    monkeypatch.delenv("CRUCIBLE_TOKEN", raising=False)
    for token in (None, "crt_" + "0" * 64):
        with Client(secured.url, token=token) as c, pytest.raises(CrucibleError) as e:
            c.queue_status()
        assert (e.value.status, e.value.code, e.value.attempts) == (401, "UNAUTHORIZED", 1)


def test_another_tenants_batch_is_not_found(secured: Server):
    with Client(secured.url, token=new_tenant(secured)) as owner:
        submission = owner.submit_rollouts([prose("mine")])
    with Client(secured.url, token=new_tenant(secured)) as other, pytest.raises(CrucibleError) as e:
        list(other.stream_results(submission, timeout=30))
    assert (e.value.status, e.value.code) == (404, "NOT_FOUND")


def test_only_the_owner_reads_a_batch_report(secured: Server):
    with Client(secured.url, token=new_tenant(secured)) as owner:
        submission = owner.submit_rollouts([prose("mine")])
        report = owner.report(submission.batch_ids[0])
    assert (report["overall"]["samples"], report["overall"]["no_kernel"]) == (1, 1)
    with Client(secured.url, token=new_tenant(secured)) as other, pytest.raises(CrucibleError) as e:
        other.report(submission.batch_ids[0])
    assert (e.value.status, e.value.code) == (404, "NOT_FOUND")
