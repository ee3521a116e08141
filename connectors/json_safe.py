"""JSON encoding of results that never emits NaN/Infinity (invalid JSON for most readers)."""
from __future__ import annotations

import json
import math
from typing import Any


def finite_or_none(value: Any) -> Any:
    """``value`` with every non-finite float, at any depth, replaced by None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite_or_none(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_or_none(v) for v in value]
    return value


def dumps(result: dict[str, Any]) -> str:
    """Compact, strict JSON for one result."""
    return json.dumps(finite_or_none(result), allow_nan=False, separators=(",", ":"),
                      default=str)
