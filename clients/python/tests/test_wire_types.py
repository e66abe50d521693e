"""The Python wire types against the live server's OpenAPI document (conftest.py's server), so
that they cannot drift apart again: every field of every schema the client models exists in its
``TypedDict`` and every key of the ``TypedDict`` in the schema; a field is required in one
exactly when in the other, nullable (``X | None``) in one exactly when in the other; a field
that holds another modelled schema is typed with that schema's type; every ``Literal`` has its
enum's values. ``types.SCHEMAS`` and ``types.ENUMS`` say which schema each type mirrors. The types
are generated (``scripts/gen_python_types.py``): the first test renders the live document again
and fails when the committed ``_wire_types.py`` differs."""

from __future__ import annotations

import difflib
import functools
import importlib.util
import inspect
import operator
import types
import typing
from pathlib import Path
from typing import Any, Literal, get_args, get_origin, get_type_hints

import httpx
import pytest
from conftest import Server

from crucible_client import _wire_batch_types, _wire_env_types, _wire_types, base
from crucible_client import env_types
from crucible_client import types as wire

GENERATED = (_wire_types, _wire_batch_types, _wire_env_types)
GENERATOR = Path(__file__).resolve().parents[3] / "scripts" / "gen_python_types.py"


def test_the_generated_types_are_the_servers_document(server: Server):
    spec = importlib.util.spec_from_file_location("gen_python_types", GENERATOR)
    assert spec is not None and spec.loader is not None, GENERATOR
    generator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generator)
    doc = httpx.get(f"{server.url}/openapi.json", timeout=30.0).json()
    package = Path(_wire_types.__file__).parent
    diff = ""
    for name, rendered in generator.render(doc).items():
        committed = (package / name).read_text()
        diff += "".join(
            difflib.unified_diff(
                committed.splitlines(keepends=True),
                rendered.splitlines(keepends=True),
                f"committed {name}",
                f"{name} rendered from the server's /openapi.json",
            )
        )
    assert not diff, f"run `python3 scripts/gen_python_types.py` to update it:\n{diff}"


@pytest.fixture(scope="module")
def schemas(server: Server) -> dict[str, Any]:
    answer = httpx.get(f"{server.url}/openapi.json", timeout=30.0)
    assert answer.status_code == 200, answer.text
    return answer.json()["components"]["schemas"]


def ref_name(ref: str) -> str:
    return ref.rsplit("/", 1)[-1]


def object_fields(schemas: dict[str, Any], name: str) -> tuple[dict[str, Any], set[str]]:
    """A schema's properties and required names, ``allOf`` parts (the document's way of
    flattening one struct into another) merged."""
    schema = schemas[name]
    props: dict[str, Any] = dict(schema.get("properties", {}))
    required = set(schema.get("required", []))
    for part in schema.get("allOf", []):
        if "$ref" in part:
            more, more_required = object_fields(schemas, ref_name(part["$ref"]))
        else:
            more, more_required = part.get("properties", {}), set(part.get("required", []))
        props.update(more)
        required |= more_required
    assert props, f"schema {name} has no properties: {schema}"
    return props, required


def nullable(prop: dict[str, Any]) -> bool:
    kind = prop.get("type")
    if isinstance(kind, list) and "null" in kind:
        return True
    return any(p.get("type") == "null" for p in prop.get("oneOf", []) + prop.get("anyOf", []))


def referenced(prop: dict[str, Any]) -> tuple[str, str] | None:
    """``("one" | "many", schema name)`` when the property holds another schema (or a list of
    them), else None."""
    if "$ref" in prop:
        return "one", ref_name(prop["$ref"])
    for part in prop.get("oneOf", []) + prop.get("allOf", []):
        if "$ref" in part:
            return "one", ref_name(part["$ref"])
    items = prop.get("items", {})
    if "$ref" in items:
        return "many", ref_name(items["$ref"])
    return None


def without_none(hint: Any) -> tuple[Any, bool]:
    """The hint without ``None``, and whether it had it."""
    if get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in get_args(hint) if a is not type(None)]
        had = len(args) < len(get_args(hint))
        return functools.reduce(operator.or_, args), had
    return hint, False


def python_type_of(schema_name: str) -> Any:
    if schema_name in wire.SCHEMAS:
        return wire.SCHEMAS[schema_name]
    return wire.ENUMS.get(schema_name)


def test_every_modelled_type_is_checked():
    # Every public TypedDict of the wire modules is in SCHEMAS; the hand-written modules define
    # none of their own (their names come from the generated one).
    typed_dicts = {
        name
        for module in (wire, env_types, *GENERATED)
        for name, value in vars(module).items()
        if inspect.isclass(value)
        and typing.is_typeddict(value)
        and not name.startswith("_")
    }
    assert typed_dicts == {t.__name__ for t in wire.SCHEMAS.values()}
    assert {t.__module__ for t in wire.SCHEMAS.values()} == {m.__name__ for m in GENERATED}


@pytest.mark.parametrize("schema_name", sorted(wire.SCHEMAS))
def test_the_type_has_the_schemas_fields(schemas: dict[str, Any], schema_name: str):
    typed: Any = wire.SCHEMAS[schema_name]
    props, required = object_fields(schemas, schema_name)
    hints = get_type_hints(typed)
    assert set(hints) == set(props), (
        f"{typed.__name__}: missing {sorted(set(props) - set(hints))}, "
        f"not in {schema_name} {sorted(set(hints) - set(props))}"
    )
    assert set(typed.__required_keys__) == required, (
        f"{typed.__name__}: required {sorted(typed.__required_keys__)}, "
        f"{schema_name} requires {sorted(required)}"
    )
    wrong = []
    for field, prop in props.items():
        hint, optional = without_none(hints[field])
        if optional != nullable(prop):
            wrong.append(f"{field}: nullable {nullable(prop)} in the schema, {optional} here")
        ref = referenced(prop)
        if ref is None or python_type_of(ref[1]) is None:
            continue
        many, target = ref[0] == "many", python_type_of(ref[1])
        inner = get_args(hint)[0] if many and get_origin(hint) is list else hint
        if inner is not target and not (
            get_origin(inner) is Literal and get_args(inner) == get_args(target)
        ):
            wrong.append(f"{field}: holds {ref[1]}, typed {hints[field]}")
    assert not wrong, f"{typed.__name__}: " + "; ".join(wrong)


@pytest.mark.parametrize("schema_name", sorted(wire.ENUMS))
def test_the_literal_has_the_enums_values(schemas: dict[str, Any], schema_name: str):
    values = get_args(wire.ENUMS[schema_name])
    assert sorted(values) == sorted(schemas[schema_name]["enum"]), schema_name


def test_the_clients_bounds_are_the_documents(server: Server):
    """The bounds the client keeps to (``?wait=``, ``?limit=``, rollouts per batch) are the
    ones the document shows, read from the same constants the server validates with."""
    doc = httpx.get(f"{server.url}/openapi.json", timeout=30.0).json()

    def query(path: str, name: str) -> dict[str, Any]:
        params = doc["paths"][path]["get"]["parameters"]
        (param,) = [p for p in params if p["name"] == name]
        assert param["in"] == "query" and not param.get("required", False), param
        return param["schema"]

    assert query("/tasks/{id}", "wait")["maximum"] == base.MAX_WAIT_S
    assert query("/batches/{id}/results", "limit")["maximum"] == base.MAX_RESULTS_PAGE
    rollouts = doc["components"]["schemas"]["RolloutBatchRequest"]["properties"]["rollouts"]
    assert rollouts["maxItems"] == base.MAX_ROLLOUTS_PER_BATCH
