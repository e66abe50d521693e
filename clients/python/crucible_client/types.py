"""Shapes of the JSON the service exchanges, for type checkers and readers.

The client returns the decoded JSON as plain dicts (typed with these ``TypedDict``\\ s) rather
than objects: a trainer logs, filters and ships them between processes as they are, and a
field the server adds later reaches it without a client release.

Every type and ``Literal`` is generated into ``_wire_types`` and ``_wire_batch_types`` (those
of the environment side into ``_wire_env_types``, named by ``env_types``) from the service's OpenAPI
document (``GET /openapi.json``, or ``crucible openapi``) by ``scripts/gen_python_types.py``,
one schema each (the schema's name is in ``SCHEMAS`` and ``ENUMS``), field for field: a key the
schema does not require may be absent (the part of the type after ``total=False``), and a field
the schema lets be ``null`` is ``X | None``. ``tests/test_wire_types.py`` regenerates the file
from a live server's document and fails on any difference, and checks every type against the
document both ways. Which schemas are modelled, and under which names, is said in the
generator (``MODELS``, ``LITERALS``).
"""

from __future__ import annotations

from . import _wire_batch_types, _wire_env_types, _wire_types
from ._wire_batch_types import *  # noqa: F403
from ._wire_types import *  # noqa: F403

# _wire_env_types is imported for its registration in SCHEMAS and ENUMS too.
__all__ = [*_wire_types.__all__, *_wire_batch_types.__all__]
assert _wire_env_types.SCHEMAS is SCHEMAS  # noqa: F405
