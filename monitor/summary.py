"""The words of a result: its one-line summary and each sensor's change in source units.

Sinks print what is written here (the console sink shows ``sensors[].change``), so every
sink says the same thing in the same numbers.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from connectors.timeutil import iso, on_whole_minute
from monitor.result import SensorScore


def _num(value: Any, spec: str = ".3g") -> str:
    return "n/a" if value is None else format(value, spec)


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _decimals(before: float, after: float) -> int:
    """Decimals that show three significant digits of the larger mean (0 to 6): a change
    below that resolution is noise to an operator and shows as 0."""
    top = max(abs(before), abs(after))
    places = 2 - math.floor(math.log10(top)) if top > 0 else 0
    return min(max(places, 0), 6)


def format_change(before: Any, after: Any) -> str:
    """``36.1 -> 35.1 (-1.0)``: window means in the source's units and their change,
    rounded to three significant digits of the larger mean (``n/a`` where one is missing)."""
    if not (_finite(before) and _finite(after)):
        return f"{_num(before, '.4g')} -> {_num(after, '.4g')}"
    places = _decimals(before, after)
    delta = round(after - before, places) + 0.0  # + 0.0: no "-0.0"
    return f"{before:.{places}f} -> {after:.{places}f} ({delta:+.{places}f})"


def format_deviation(observed: Any, expected: Any) -> str:
    """``55.62 vs 55.91 expected (-0.29)``: the after window's mean against what the
    sensor's hour-of-day profile expected for those hours, in the source's units."""
    if not (_finite(observed) and _finite(expected)):
        return f"{_num(observed, '.4g')} vs {_num(expected, '.4g')} expected"
    places = _decimals(expected, observed) + 1  # a residual is small against the level
    delta = round(observed - expected, places) + 0.0
    return f"{observed:.{places}f} vs {expected:.{places}f} expected ({delta:+.{places}f})"


def format_spread(before: float, after: float) -> str:
    """``within-bin spread 0.686 vs 0.064 before (x10.7)``: the median standard
    deviation of the readings inside a bin, after against before, in the source's units
    (a sensor named for turning noisy or freezing, whose mean may not move)."""
    ratio = f"x{after / before:.3g}" if before > 0 else "from 0"
    return f"within-bin spread {after:.3g} vs {before:.3g} before ({ratio})"


def format_cycle(factor: float) -> str:
    """``daily cycle x0.52 of its profile``: the after window's deviations from the
    sensor's daily mean against its hour-of-day profile's (a sensor named for a changed
    daily cycle, whose mean may not move)."""
    return f"daily cycle x{factor:.2g} of its profile"


def _short_time(t: datetime) -> str:
    """``2026-01-12T06:00Z`` for a time on a whole minute (hourly and daily inspections,
    as before); with its seconds otherwise (``2026-01-12T06:00:05Z``), so that a
    one-second source's inspections every 5 s are told apart in the log and the alerts."""
    text = iso(t)
    return text[:16] + "Z" if on_whole_minute(t) else text


def summarise(status: str, t: datetime, n_sensors: int, selected: list[str],
              p_value: float | None, error: str | None = None,
              alpha: float | None = None, level: float | None = None,
              sensors: Sequence[SensorScore] | None = None,
              fired_by: str | None = None) -> str:
    """The result's one-line summary. ``fired_by`` "engine": the live decision's engine
    part fired (a change of the sensors' distribution on the residuals, which their
    expected-value line may not show), and the text says so; "reference": an open
    incident's frozen reference saw a new change (monitor.decision.reference_firing);
    "return": it saw its sensors come back to it."""
    when = _short_time(t)
    p = "n/a" if p_value is None else f"{p_value:.3g}"
    if status == "error":
        return f"Inspection at {when} failed: {error}"
    if status in ("calibrating", "incomplete"):
        return f"Inspection at {when}: {error}"
    if status == "firing":
        names = ", ".join(selected[:8]) + (f" and {len(selected) - 8} more"
                                           if len(selected) > 8 else "")
        kind, part = {"engine": ("Distribution change", ", engine part"),
                      "reference": ("Change", ", against the open incident's reference"),
                      "return": ("Return", ", back at the open incident's reference")
                      }.get(fired_by or "", ("Change", ""))
        text = (f"{kind} at {when} in {len(selected)} of {n_sensors} sensors: {names} "
                f"(p={p}{part})")
        rows = {r.sensor_id: r for r in sensors or []}
        changes = [
            name + " " + (rows[name].change or format_change(rows[name].raw_mean_before,
                                                  rows[name].raw_mean_after))
            for name in selected[:3] if name in rows]
        return f"{text}; {', '.join(changes)}" if changes else text
    if selected and p_value is not None:
        return f"No significant change at {when} across {n_sensors} sensors (p={p})"
    if level is not None:
        return (f"No change at {when} across {n_sensors} sensors (p={p}; an alert needs "
                f"p < {level:.3g})")
    if p_value is not None and alpha is not None and p_value < alpha:
        return (f"The windows differ at {when} (p={p}) but no sensor of {n_sensors} stands "
                "out; not an alert")
    return f"No change at {when} across {n_sensors} sensors (p={p})"


