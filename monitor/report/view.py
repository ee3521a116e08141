"""What the reports read from one inspection result (docs/result.md, with ``engine``).

Reports must render whatever arrives: a firing result, an ``ok`` one, a ``status: error``
result without scores, or an older result missing ``engine``. The result is read back once,
by :meth:`monitor.result.InspectionResult.from_dict` (tolerant of missing blocks and keys);
:class:`InspectionView` adds what the figures and the HTML need on top of it (display
defaults, arrays, the threshold on the chart's scale), so each missing piece is handled in
one place.

Two decisions make results (``test.decision``):

* the engine's (absent or ``"engine"``): sensors' ``score`` is the selector's importance,
  ``engine.threshold`` the threshold of its selection rule (``engine.params.selection``)
  on those scores, and the p-value is compared with ``test.alpha``;
* ``"calibrated"``: sensors' ``score`` is ``|z|`` of the detection statistic, the named
  sensors are those with ``z**2`` at or above ``detection.threshold`` (the alert threshold
  on the statistic's scale), and the p-value is compared with ``detection.level``. The
  engine block, when present, is the engine run beside it on the residuals.
"""
from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

import numpy as np

from monitor.report.style import parse_time
from monitor.result import (
    DataQuality,
    DetectionBlock,
    EngineBlock,
    InspectionResult,
    WindowsBlock,
)


@dataclass(frozen=True)
class SensorRow:
    """One sensor of the result's ranked ``sensors`` list, as the report draws it."""

    sensor_id: str
    rank: int
    score: float  # NaN when the result has none
    selected: bool
    mean_before: float | None = None  # normalised window means
    mean_after: float | None = None
    raw_mean_before: float | None = None  # in source units, when the result has them
    raw_mean_after: float | None = None
    engine_score: float | None = None  # calibrated decision: the engine's score beside |z|


def _opt_float(value: float | None) -> float | None:
    """A finite-or-None float (NaN, from a result written with allow_nan, is None)."""
    if value is None:
        return None
    out = float(value)
    return None if math.isnan(out) else out


def _float(value: float | None) -> float:
    return math.nan if value is None else float(value)


def as_result(result: InspectionResult | Mapping[str, Any]) -> InspectionResult:
    """The typed result, read back from its JSON object when given one."""
    if isinstance(result, InspectionResult):
        return result
    if not isinstance(result, Mapping):
        raise TypeError(
            f"an inspection result must be a dict (the result JSON) or an InspectionResult, "
            f"got {type(result).__name__}; pass the parsed JSON object")
    return InspectionResult.from_dict(result)


@dataclass
class InspectionView:
    """What the report needs from one result, with defaults for everything absent."""

    result: InspectionResult
    raw: dict[str, Any]  # the result JSON object as delivered (written back unchanged)
    site: str
    status: str
    inspection_time: datetime | None
    inspection_time_raw: str | None
    p_value: float | None
    alpha: float | None
    method: str | None
    summary: str
    error: str | None
    sensors: list[SensorRow]  # ranked, best first
    selected: list[str]
    threshold: float | None
    lambdas: np.ndarray | None  # (L,)
    scores_per_lambda: np.ndarray | None  # (L, D), columns in ``engine_labels`` order
    engine_labels: list[str] | None  # (D,)
    normalise: str | None
    windows: WindowsBlock
    data_quality: DataQuality
    decision: str = "engine"  # "engine" | "calibrated" (result.test.decision)
    selection_rule: str | None = None  # engine.params.selection, when recorded
    detection: DetectionBlock | None = None

    @classmethod
    def from_result(cls, result: InspectionResult | Mapping[str, Any]) -> InspectionView:
        typed = as_result(result)
        raw = dict(result) if isinstance(result, Mapping) else typed.to_dict()
        engine = typed.engine
        test = typed.test

        sensors = _sensor_rows(typed)
        selected = list(typed.selected_sensors
                        or ([str(s) for s in engine.selected] if engine else []))
        if not selected:
            selected = [r.sensor_id for r in sensors if r.selected]
        selected_set = set(selected)
        sensors = [replace(r, selected=r.sensor_id in selected_set or r.selected)
                   for r in sensors]

        lambdas = _array(engine.lambdas, ndim=1) if engine else None
        per_lambda = _array(engine.scores_per_lambda, ndim=2) if engine else None
        labels = [str(x) for x in engine.labels] if engine else None
        p_value = _opt_float(test.p_value if test.p_value is not None or engine is None
                             else engine.p_value)
        detection = typed.detection
        decision = "calibrated" if typed.calibrated else "engine"
        if decision == "calibrated":  # the line sits where z**2 reaches the alert threshold
            z2 = _opt_float(detection.threshold) if detection else None
            threshold = math.sqrt(z2) if z2 is not None and z2 >= 0 else None
        else:
            threshold = _opt_float(engine.threshold) if engine else None
        params = engine.params if engine else {}
        rule = params.get("selection")
        alpha = test.alpha if test.alpha is not None else _param_float(params.get("alpha"))
        return cls(
            result=typed,
            raw=raw,
            site=typed.site or "site",
            status=typed.status or "unknown",
            inspection_time=parse_time(typed.inspection_time or None),
            inspection_time_raw=typed.inspection_time or None,
            p_value=p_value,
            alpha=_opt_float(alpha),
            method=test.method or (engine.method if engine else "") or None,
            summary=typed.summary,
            error=typed.error,
            sensors=sensors,
            selected=selected,
            threshold=threshold,
            lambdas=lambdas,
            scores_per_lambda=per_lambda,
            engine_labels=labels,
            normalise=typed.windows.normalise or None,
            windows=typed.windows,
            data_quality=typed.data_quality,
            decision=decision,
            selection_rule=str(rule) if rule else None,
            detection=detection,
        )

    @property
    def calibrated(self) -> bool:
        return self.decision == "calibrated"

    @property
    def alert_level(self) -> float | None:
        """What the p-value is compared with: ``detection.level`` (calibrated) or α."""
        if self.calibrated:
            return _opt_float(self.detection.level) if self.detection else None
        return self.alpha

    @property
    def z2_threshold(self) -> float | None:
        """Calibrated decision: the alert threshold on ``z**2`` (None when not set yet)."""
        if not self.calibrated or self.detection is None:
            return None
        return _opt_float(self.detection.threshold)

    @property
    def statistic(self) -> str:
        """The calibrated decision's statistic, by name."""
        return (self.detection.statistic if self.detection else None) or "detection statistic"

    @property
    def sensor_ids(self) -> list[str]:
        return [r.sensor_id for r in self.sensors]

    @property
    def scores(self) -> np.ndarray:
        return np.array([r.score for r in self.sensors], dtype=float)

    def folder_name(self) -> str:
        """``<site>_<YYYYmmddTHHMMSSZ>``: one folder per inspection, sortable by time."""
        site = re.sub(r"[^A-Za-z0-9._-]+", "-", self.site).strip("-.") or "site"
        if self.inspection_time is not None:
            stamp = self.inspection_time.strftime("%Y%m%dT%H%M%SZ")
        else:
            stamp = re.sub(r"[^A-Za-z0-9]+", "", self.inspection_time_raw or "") or "unknown-time"
        return f"{site}_{stamp}"


def _param_float(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        return float(value)
    except ValueError:
        return None


def _array(value: object, ndim: int) -> np.ndarray | None:
    if value is None:
        return None
    try:
        arr = np.asarray(value, dtype=float)
    except (TypeError, ValueError):
        return None
    return arr if arr.ndim == ndim and arr.size else None


def _sensor_rows(result: InspectionResult) -> list[SensorRow]:
    """Ranked rows from the result's ``sensors``; else from ``engine.labels/scores``."""
    rows: list[SensorRow] = []
    engine: EngineBlock | None = result.engine
    if result.sensors:
        rows = [SensorRow(sensor_id=s.sensor_id, rank=s.rank, score=_float(s.score),
                          selected=s.selected, mean_before=_opt_float(s.mean_before),
                          mean_after=_opt_float(s.mean_after),
                          raw_mean_before=_opt_float(s.raw_mean_before),
                          raw_mean_after=_opt_float(s.raw_mean_after),
                          engine_score=_opt_float(s.engine_score))
                for s in result.sensors]
    elif engine is not None and engine.labels and engine.scores:
        scores = _array(engine.scores, ndim=1)
        labels = [str(x) for x in engine.labels]
        if scores is not None and len(scores) == len(labels):
            chosen = {str(s) for s in engine.selected}
            order = np.argsort(-np.nan_to_num(scores, nan=-np.inf), kind="stable")
            rows = [SensorRow(labels[j], k + 1, float(scores[j]), labels[j] in chosen)
                    for k, j in enumerate(order)]
    # Rank order, best first; NaN scores last, whatever order they arrived in.
    rows.sort(key=lambda r: (r.rank, -np.nan_to_num(r.score, nan=-np.inf)))
    return rows
