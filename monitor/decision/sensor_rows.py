"""The sensor rows of a result: every sensor ranked, the named ones marked (both rules)."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

from monitor.result import InspectionResult, SensorScore, finite
from monitor.summary import format_change, format_cycle, format_deviation, format_spread

if TYPE_CHECKING:
    import pandas as pd

    from monitor.windows import Windows

_f = finite  # value -> rounded float, None when not finite


def by_name(values: pd.Series) -> dict[str, float]:
    """A per-sensor Series as a dict by sensor name: a Series lookup per sensor and field
    costs more than the rest of a result's rows."""
    # tolist(): iterating pandas 3's Arrow-backed string index costs ~2 us a name
    return {str(k): v for k, v in zip(values.index.tolist(), values.tolist(), strict=True)}


def means_by_name(frame: pd.DataFrame) -> dict[str, float]:
    """Each column's mean of a window, by sensor name (``frame.mean()``, bit-equal)."""
    from monitor.windows import column_means  # pandas and NumPy load with an inspection

    return {str(k): float(v) for k, v in zip(frame.columns.tolist(), column_means(frame),
                                            strict=True)}


def fill_sensor_rows(result: InspectionResult, w: Windows, labels: list[str],
                     scores: list[float], chosen: set[str],
                     z: dict[str, float] | None = None,
                     expected: dict[str, float] | None = None,
                     z_spread: dict[str, float] | None = None,
                     spreads: dict[str, tuple[float, float]] | None = None,
                     z_cycle: dict[str, float] | None = None,
                     cycles: dict[str, float] | None = None) -> None:
    """Fill ``sensors`` (ranked: score, then |z|, then name) and ``selected_sensors`` (the
    ``chosen`` ones, by rank). ``expected``: each sensor's expected after-window level,
    which its ``change`` text is stated against (else its before-window mean).
    ``z_spread``: the spread channel's weighted ``z`` of the sensors that have one;
    ``spreads``: their median within-bin deviation before and after, which the ``change``
    text states where ``|z_spread|`` exceeds ``|z|`` (the spread, not the mean, moved).
    ``z_cycle``: the cycle channel's weighted ``z``; ``cycles``: each sensor's daily
    cycle after against its profile's, which the text states where ``|z_cycle|`` is the
    largest of the three."""
    z = z or {}
    z_spread = z_spread or {}
    spreads = spreads or {}
    z_cycle = z_cycle or {}
    cycles = cycles or {}
    order = sorted(range(len(labels)),
                   key=lambda i: (-scores[i] if math.isfinite(scores[i]) else math.inf,
                                  -abs(z.get(labels[i], 0.0)), labels[i]))
    mb, ma = means_by_name(w.before), means_by_name(w.after)
    rb, ra = means_by_name(w.before_raw), means_by_name(w.after_raw)
    rows = []
    for r, i in enumerate(order):
        name = labels[i]
        rows.append(SensorScore(
            sensor_id=name, rank=r + 1, score=_f(scores[i]), selected=name in chosen,
            mean_before=_f(mb[name]), mean_after=_f(ma[name]),
            raw_mean_before=_f(rb[name]), raw_mean_after=_f(ra[name]),
            z=_f(z[name], 4) if name in z else None,
            z_spread=_f(z_spread[name], 4) if name in z_spread else None,
            expected_after=_f(expected[name]) if expected and name in expected else None,
            z_cycle=_f(z_cycle[name], 4) if name in z_cycle else None,
            change=_change_text(name, rb, ra, z, expected, z_spread, spreads, z_cycle,
                                cycles)))
    result.sensors = rows
    result.selected_sensors = [s.sensor_id for s in rows if s.selected]


def _change_text(name: str, rb: dict[str, float], ra: dict[str, float],
                 z: dict[str, float], expected: dict[str, float] | None,
                 z_spread: dict[str, float], spreads: dict[str, tuple[float, float]],
                 z_cycle: dict[str, float], cycles: dict[str, float]) -> str:
    """The sensor's change in words: of the channel with the largest ``|z|`` (its
    level, its within-bin spread or its daily cycle)."""
    level = abs(z.get(name, 0.0))
    spread = abs(z_spread.get(name, 0.0)) if name in spreads else -1.0
    cycle = abs(z_cycle.get(name, 0.0)) if name in cycles else -1.0
    if spread > level and spread >= cycle:
        return format_spread(*spreads[name])
    if cycle > level:
        return format_cycle(cycles[name])
    if expected and name in expected:
        return format_deviation(_f(ra[name]), _f(expected[name]))
    return format_change(_f(rb[name]), _f(ra[name]))


def add_engine_scores(result: InspectionResult, scores: dict[str, float]) -> None:
    """Each sensor row's CV-aggregation score on the residual windows."""
    if scores:
        for row in result.sensors:
            row.engine_score = _f(scores.get(row.sensor_id, 0.0))
