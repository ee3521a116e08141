"""Every result the tests produce is checked against docs/result.schema.json.

In-process results are checked where they are finished (``AgentState.commit_inspection``,
the result as queued for the sinks) and where they are made (``Inspector.run``), by an
autouse fixture in tests/conftest.py; results that a ``mmdwatch`` subprocess prints are
checked by :func:`check_output`.
"""
from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

SCHEMA_FILE = Path(__file__).resolve().parents[1] / "docs" / "result.schema.json"


@cache
def validator() -> Any:
    import jsonschema

    return jsonschema.Draft202012Validator(json.loads(SCHEMA_FILE.read_text()))


def check(result: dict[str, Any]) -> None:
    """Raise ``jsonschema.ValidationError`` naming the field if ``result`` breaks the
    contract."""
    validator().validate(result)


def check_output(stdout: str) -> None:
    """Check every result line a ``mmdwatch inspect``/``backfill`` printed."""
    for line in stdout.splitlines():
        line = line.strip()
        if line.startswith("{"):
            data = json.loads(line)
            if data.get("schema", "").startswith("mmdwatch.inspection/"):
                check(data)
