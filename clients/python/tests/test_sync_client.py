"""``client.py`` (the blocking ``Client``) is generated from ``aio.py`` by unasync: rendered
again here, it must be the committed file, so an edit to one client is an edit to both."""

from __future__ import annotations

import difflib
import importlib.util
from pathlib import Path

GENERATOR = Path(__file__).resolve().parents[3] / "scripts" / "gen_sync_client.py"


def test_the_committed_sync_client_is_generated_from_the_async_one():
    spec = importlib.util.spec_from_file_location("gen_sync_client", GENERATOR)
    assert spec is not None and spec.loader is not None, GENERATOR
    generator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generator)
    committed = (generator.PACKAGE / "client.py").read_text()
    diff = "".join(
        difflib.unified_diff(
            committed.splitlines(keepends=True),
            generator.render().splitlines(keepends=True),
            "committed client.py",
            "rendered from aio.py",
        )
    )
    assert not diff, f"run `python3 scripts/gen_sync_client.py` to update it:\n{diff}"
