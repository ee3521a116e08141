"""Every result the tests produce is checked against docs/result.schema.json.

In-process results are checked where they are finished (``AgentState.commit_inspection``,
the result as queued for the sinks) and where they are made (``Inspector.run``), by an
autouse fixture in tests/conftest.py; results that a ``mmdwatch`` subprocess prints are
checked by :func:`check_output`.

``jsonschema`` takes about 8 ms for one result (in a profile of three decision test files,
3,268 checks took 29 of 165 s); the compiled ``jsonschema-rs`` takes 0.04 ms and follows
the same draft (2020-12), so it answers first. A result it refuses, or holds a value it
does not take, is validated again with ``jsonschema``, which decides and whose error names
the field.
"""
from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

SCHEMA_FILE = Path(__file__).resolve().parents[1] / "docs" / "result.schema.json"


@cache
def _schema() -> dict[str, Any]:
    """docs/result.schema.json, read once for both validators."""
    return json.loads(SCHEMA_FILE.read_text())


@cache
def validator() -> Any:
    """The reference validator (``jsonschema``): readable errors, used by the schema's own
    tests."""
    import jsonschema

    return jsonschema.Draft202012Validator(_schema())


@cache
def _fast_validator() -> Any:
    import jsonschema_rs

    return jsonschema_rs.Draft202012Validator(_schema())


def check(result: dict[str, Any]) -> None:
    """Raise ``jsonschema.ValidationError`` naming the field if ``result`` breaks the
    contract."""
    try:
        if _fast_validator().is_valid(result):
            return
    except (TypeError, ValueError):
        pass  # a value jsonschema-rs does not take (a NumPy scalar): the reference decides
    # refused, or not taken: the reference decides (it takes NaN as a number, as it always
    # did here; jsonschema-rs does not) and raises naming the field
    validator().validate(result)


def check_output(stdout: str) -> None:
    """Check every result line a ``mmdwatch inspect``/``backfill`` printed."""
    for line in stdout.splitlines():
        line = line.strip()
        if line.startswith("{"):
            data = json.loads(line)
            if data.get("schema", "").startswith("mmdwatch.inspection/"):
                check(data)
