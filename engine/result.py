"""The result every selector's ``fit`` returns."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np


def _json_label(label: Any) -> Any:
    if isinstance(label, (bool, np.bool_)):
        return bool(label)
    if isinstance(label, (int, np.integer)):
        return int(label)
    if isinstance(label, (float, np.floating)):
        return _json_float(label)
    if isinstance(label, str):
        return label
    return str(label)


def _json_float(x: Any) -> float | None:
    x = float(x)
    return x if math.isfinite(x) else None


def _json_value(v: Any) -> Any:
    if isinstance(v, dict):
        return {str(k): _json_value(x) for k, x in v.items()}
    if isinstance(v, (list, tuple, np.ndarray)):
        return [_json_value(x) for x in list(v)]
    if isinstance(v, (float, np.floating)):
        return _json_float(v)
    if v is None or isinstance(v, (str, int, bool, np.integer, np.bool_)):
        return _json_label(v) if v is not None else None
    return str(v)


@dataclass
class Selection:
    """Outcome of one selector fit.

    ``labels`` (D); ``scores`` (D,) importance, higher = more discriminating (0 for
    constant columns); ``selected`` labels, highest score first; ``p_value`` calibrated
    p-value of "the two samples differ"; ``threshold`` of the selection rule on ``scores``
    (inf when nothing could be selected); ``lambdas`` (L,); ``scores_per_lambda`` (L, D);
    ``split_p_values`` the per-split p-values combined into ``p_value``; ``candidates``
    the variables the selection rule picks from ``scores`` whatever the p-value (highest
    score first), and ``selected`` the same list only when ``p_value < alpha`` (else
    empty: no significant difference, nothing to attribute; the ranking stays in
    ``scores`` and ``candidates``); ``p_value_parts`` the valid p-values combined into
    ``p_value`` (``split`` and ``moments``, or ``block``).
    """

    method: str
    labels: list[Any]
    scores: np.ndarray
    selected: list[Any]
    p_value: float
    threshold: float
    lambdas: np.ndarray
    scores_per_lambda: np.ndarray
    split_p_values: list[float]
    params: dict[str, Any]
    device: str
    seed: int
    runtime_s: float
    selected_index: list[int] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    candidates: list[Any] = field(default_factory=list)
    candidate_index: list[int] = field(default_factory=list)
    p_value_parts: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable summary (non-finite floats become null)."""
        return {
            "method": self.method,
            "labels": [_json_label(x) for x in self.labels],
            "scores": [_json_float(x) for x in self.scores],
            "selected": [_json_label(x) for x in self.selected],
            "candidates": [_json_label(x) for x in self.candidates],
            "p_value": _json_float(self.p_value),
            "p_value_parts": {str(k): _json_float(v) for k, v in self.p_value_parts.items()},
            "threshold": _json_float(self.threshold),
            "lambdas": [_json_float(x) for x in self.lambdas],
            "scores_per_lambda": [[_json_float(x) for x in row] for row in self.scores_per_lambda],
            "split_p_values": [_json_float(x) for x in self.split_p_values],
            "params": _json_value(self.params),
            "device": self.device,
            "seed": int(self.seed),
            "runtime_s": _json_float(self.runtime_s),
        }
