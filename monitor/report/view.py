"""A tolerant reading of one inspection result dict (docs/result.md, with ``engine``).

Reports must render whatever arrives: a firing result, an ``ok`` one, a ``status: error``
result without scores, or an older result missing ``engine``. Every figure and the HTML read
the result through :class:`InspectionView` so each missing piece is handled in one place.

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
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

import numpy as np

from monitor.report.style import parse_time


@dataclass(frozen=True)
class SensorRow:
    """One sensor of the result's ranked ``sensors`` list."""

    sensor_id: str
    rank: int
    score: float
    selected: bool
    mean_before: float | None = None  # normalised window means
    mean_after: float | None = None
    raw_mean_before: float | None = None  # in source units, when the result has them
    raw_mean_after: float | None = None
    engine_score: float | None = None  # calibrated decision: the engine's score beside |z|


def _float(value: Any, default: float = math.nan) -> float:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return default
    return out


def _opt_float(value: Any) -> float | None:
    out = _float(value)
    return None if math.isnan(out) else out


@dataclass
class InspectionView:
    """What the report needs from one result, with defaults for everything absent."""

    result: dict[str, Any]
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
    windows: dict[str, Any] = field(default_factory=dict)
    data_quality: dict[str, Any] = field(default_factory=dict)
    decision: str = "engine"  # "engine" | "calibrated" (result["test"]["decision"])
    selection_rule: str | None = None  # engine.params.selection, when recorded
    detection: dict[str, Any] = field(default_factory=dict)  # result["detection"] or {}

    @classmethod
    def from_result(cls, result: dict[str, Any]) -> InspectionView:
        if not isinstance(result, dict):
            raise TypeError(
                f"an inspection result must be a dict (the result JSON), got "
                f"{type(result).__name__}; pass the parsed JSON object")
        engine = result.get("engine") if isinstance(result.get("engine"), dict) else {}
        test = result.get("test") if isinstance(result.get("test"), dict) else {}
        windows = result.get("windows") if isinstance(result.get("windows"), dict) else {}
        params = engine.get("params") if isinstance(engine.get("params"), dict) else {}
        quality = (result.get("data_quality")
                   if isinstance(result.get("data_quality"), dict) else {})

        sensors = _sensor_rows(result, engine)
        selected = [str(s) for s in (result.get("selected_sensors")
                                     or engine.get("selected") or [])]
        if not selected:
            selected = [r.sensor_id for r in sensors if r.selected]
        selected_set = set(selected)
        sensors = [replace(r, selected=r.sensor_id in selected_set or r.selected)
                   for r in sensors]

        lambdas = _array(engine.get("lambdas"), ndim=1)
        per_lambda = _array(engine.get("scores_per_lambda"), ndim=2)
        labels = engine.get("labels")
        labels = [str(x) for x in labels] if isinstance(labels, list) else None

        p_value = _opt_float(test.get("p_value", engine.get("p_value")))
        raw_time = result.get("inspection_time")
        detection = (result.get("detection")
                     if isinstance(result.get("detection"), dict) else {})
        decision = "calibrated" if test.get("decision") == "calibrated" else "engine"
        if decision == "calibrated":  # the line sits where z**2 reaches the alert threshold
            z2 = _opt_float(detection.get("threshold"))
            threshold = math.sqrt(z2) if z2 is not None and z2 >= 0 else None
        else:
            threshold = _opt_float(engine.get("threshold"))
        rule = params.get("selection")
        return cls(
            result=result,
            site=str(result.get("site") or "site"),
            status=str(result.get("status") or "unknown"),
            inspection_time=parse_time(raw_time),
            inspection_time_raw=None if raw_time is None else str(raw_time),
            p_value=p_value,
            alpha=_opt_float(test.get("alpha", params.get("alpha"))),
            method=test.get("method") or engine.get("method"),
            summary=str(result.get("summary") or ""),
            error=None if result.get("error") is None else str(result.get("error")),
            sensors=sensors,
            selected=selected,
            threshold=threshold,
            lambdas=lambdas,
            scores_per_lambda=per_lambda,
            engine_labels=labels,
            normalise=windows.get("normalise"),
            windows=windows,
            data_quality=quality,
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
            return _opt_float(self.detection.get("level"))
        return self.alpha

    @property
    def z2_threshold(self) -> float | None:
        """Calibrated decision: the alert threshold on ``z**2`` (None when not set yet)."""
        return _opt_float(self.detection.get("threshold")) if self.calibrated else None

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


def _array(value: Any, ndim: int) -> np.ndarray | None:
    if value is None:
        return None
    try:
        arr = np.asarray(value, dtype=float)
    except (TypeError, ValueError):
        return None
    return arr if arr.ndim == ndim and arr.size else None


def _sensor_rows(result: dict[str, Any], engine: dict[str, Any]) -> list[SensorRow]:
    """Ranked rows from ``result["sensors"]``; else from ``engine.labels/scores``."""
    rows: list[SensorRow] = []
    listed = result.get("sensors")
    if isinstance(listed, list) and listed:
        for i, item in enumerate(listed):
            if not isinstance(item, dict) or item.get("sensor_id") is None:
                continue
            rows.append(SensorRow(
                sensor_id=str(item["sensor_id"]),
                rank=int(_float(item.get("rank"), i + 1)),
                score=_float(item.get("score")),
                selected=bool(item.get("selected", False)),
                mean_before=_opt_float(item.get("mean_before")),
                mean_after=_opt_float(item.get("mean_after")),
                raw_mean_before=_opt_float(item.get("raw_mean_before")),
                raw_mean_after=_opt_float(item.get("raw_mean_after")),
                engine_score=_opt_float(item.get("engine_score")),
            ))
    elif isinstance(engine.get("labels"), list) and engine.get("scores") is not None:
        scores = _array(engine.get("scores"), ndim=1)
        labels = [str(x) for x in engine["labels"]]
        if scores is not None and len(scores) == len(labels):
            chosen = {str(s) for s in engine.get("selected") or []}
            order = np.argsort(-np.nan_to_num(scores, nan=-np.inf), kind="stable")
            rows = [SensorRow(labels[j], k + 1, float(scores[j]), labels[j] in chosen)
                    for k, j in enumerate(order)]
    # Rank order, best first; NaN scores last, whatever order they arrived in.
    rows.sort(key=lambda r: (r.rank, -np.nan_to_num(r.score, nan=-np.inf)))
    return rows
