"""A change inside an open incident, seen against the incident's frozen reference.

While a change is inside the before window, the sliding statistic's spread holds its
step and its ``z`` collapses: on SKAB's one-second pump data z fell from 152 to 14.9 five
seconds after a valve closed, and a second change a minute later was not seen (issue 29).
An open incident keeps the detector's model of normal (:class:`engine.live.reference.
Reference`), learned before its onset. At a result the calibrated rule judged ``ok``, each
open incident's reference measures the after window against the before window's latest
``local_level`` rows in its own units (:meth:`Reference.recent_z`). A sensor whose
``z**2`` reaches the level part's threshold, drawn on the level history without the
values that held the incident's own change, makes the result ``firing``, with
``detection.fired_by`` ``reference`` (docs/decision.md, "A change inside an open
incident"). A sensor's return to the reference is such a change too (SKAB labels a
valve's reopening as a change point); ``detection.reference.returning`` names the
sensors that came back.

It is the same comparison as the level part's, with the spread of the normal days
pooled with the current before window's median-based spread (the incident's own change
left out: ``changes``), and at the same share of the level; it only runs while an
incident is open, and a result it fires never joins the calibration history.
"""
from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from connectors.timeutil import parse_time
from monitor.result import SensorScore, finite
from monitor.summary import summarise

if TYPE_CHECKING:
    import pandas as pd

    from engine.live.reference import Reference


@dataclass(frozen=True)
class ReferenceFiring:
    """What an open incident's reference saw: the incident, the largest ``z**2``, the
    sensors whose ``z**2`` reached the threshold with their ``z``, strongest first, those
    of them that came back to the reference (a return: a repair, a valve reopened), and
    the threshold they reached."""

    incident_id: str
    value: float
    z: dict[str, float]
    returning: tuple[str, ...] = ()
    threshold: float | None = None

    @property
    def returned(self) -> bool:
        """Whether every named sensor came back to the reference: a return alone."""
        return bool(self.returning) and set(self.z) <= set(self.returning)


def reference_firing(references: Sequence[tuple[str, Reference]], recent: pd.DataFrame,
                     after: pd.DataFrame, threshold: float | Mapping[str, float],
                     before: pd.DataFrame | None = None,
                     changes: dict[str, tuple[pd.Timestamp, pd.Timestamp]] | None = None,
                     own: Mapping[str, Collection[str]] | None = None
                     ) -> ReferenceFiring | None:
    """The strongest firing among the open incidents' ``references`` ((incident id,
    reference), oldest first), or None when no sensor's ``z**2`` reaches ``threshold``.
    ``threshold``: one for every reference, or each incident's own (incident id ->
    threshold). ``recent``: the before window's last ``local_level`` rows (n_l, D);
    ``after`` (n_a, D): raw resampled readings; ``before``: the whole before window (n_b,
    D), whose median-based spread is pooled with each frozen one
    (:meth:`Reference.recent_z`); ``changes``: each incident's own change (incident id ->
    (from, to)), whose straddling offsets its reference leaves out of that spread;
    ``own``: each incident's sensors that fired for its change, which count 0 while
    ``recent`` begins before that change's end: their comparison then straddles the
    incident's own step and measures it again, not a new change."""
    best: ReferenceFiring | None = None
    for incident_id, reference in references:
        change = (changes or {}).get(incident_id)
        z, back = reference.recent_change(recent, after, before, change)
        if change is not None and own and recent.index[0] < change[1]:
            z = np.where(np.isin(reference.columns, list(own.get(incident_id, ()))), 0.0, z)
        order = np.argsort(-np.abs(z), kind="stable")
        limit = threshold if isinstance(threshold, float | int) else threshold[incident_id]
        named = {reference.columns[i]: float(z[i]) for i in order if z[i] ** 2 >= limit}
        if not named:
            continue
        value = float(np.max(z ** 2))
        if best is None or value > best.value:
            returning = tuple(s for s in named if back[reference.columns.index(s)])
            best = ReferenceFiring(incident_id, value, named, returning, float(limit))
    return best


def mark_firing(result: dict[str, Any], firing: ReferenceFiring, p_value: float,
                level_p_value: float) -> None:
    """Turn the ``ok`` result dict ``result`` into a firing one named by ``firing``:
    status, ``detection.fired_by`` ``reference`` and its ``reference`` block,
    ``detection.p_value`` and ``test.p_value`` (``p_value``: the decision's, the
    reference's value against the level history at the level part's share), the named
    sensors first in ``sensors`` and in ``selected_sensors``, and the summary."""
    detection = result["detection"]
    result["status"] = "firing"
    detection["fired_by"] = "reference"
    detection["p_value"] = finite(p_value, 10)
    detection["reference"] = {
        "incident": firing.incident_id, "value": finite(firing.value),
        "threshold": None if firing.threshold is None else finite(firing.threshold),
        "level_p_value": finite(level_p_value, 10),
        "z": {name: finite(z, 4) for name, z in firing.z.items()},
        "returning": list(firing.returning)}
    result["test"]["p_value"] = finite(p_value, 10)
    named = list(firing.z)
    rows = result.get("sensors") or []
    by_name = {row["sensor_id"]: row for row in rows}
    ordered = [by_name[s] for s in named if s in by_name] + \
        [row for row in rows if row["sensor_id"] not in firing.z]
    for rank, row in enumerate(ordered, start=1):
        row["rank"] = rank
        row["selected"] = row["sensor_id"] in firing.z
    result["sensors"] = ordered
    result["selected_sensors"] = [s for s in named if s in by_name]
    scores = [SensorScore.from_dict(row, i) for i, row in enumerate(ordered)]
    t = parse_time(result["inspection_time"])
    result["summary"] = summarise(
        "firing", t, len(ordered), result["selected_sensors"], p_value,
        level=detection.get("level"), sensors=[s for s in scores if s is not None],
        fired_by="return" if firing.returned else "reference")
