#!/usr/bin/env python3
"""Writes clients/python/crucible_client/client.py (the blocking ``Client``) from ``aio.py``
(``AsyncClient``) with unasync, so the two clients are one piece of code.

    python3 scripts/gen_sync_client.py      # needs unasync (the client's `test` extra)

unasync drops ``async``/``await`` and renames the asyncio names below; the only part that is
not the same code is how several batches are read, ``_polls.AsyncPolls`` / ``SyncPolls`` (unasync
renames ``Async*`` classes to ``Sync*``). clients/python/tests/test_sync_client.py renders it
again and fails when the committed file differs.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import unasync

PACKAGE = Path(__file__).resolve().parent.parent / "clients/python/crucible_client"

#: asyncio names and their blocking twins, beyond unasync's own (``__aenter__``,
#: ``AsyncIterator``, ...).
REPLACEMENTS = {
    "AsyncClient": "Client",  # ours and httpx's
    "AsyncBaseTransport": "BaseTransport",
    "AsyncRetrying": "Retrying",
    "aclose": "close",
}

HEADER = "# GENERATED from aio.py by scripts/gen_sync_client.py (unasync): do not edit.\n"


def render() -> str:
    """The text ``client.py`` must have."""
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "aio.py"
        shutil.copy(PACKAGE / "aio.py", source)
        rule = unasync.Rule("aio.py", "client.py", additional_replacements=REPLACEMENTS)
        unasync.unasync_files([str(source)], [rule])
        return HEADER + (Path(tmp) / "client.py").read_text()


def main() -> None:
    (PACKAGE / "client.py").write_text(render())
    print(f"wrote {PACKAGE / 'client.py'}", file=sys.stderr)


if __name__ == "__main__":
    main()
