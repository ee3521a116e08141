"""What a site's decisions remember between inspections: the calibration history of the
detection statistic and the open incident. In memory; the agent persists both in its state
database with each result, ``backfill`` keeps them for one run.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from connectors.timeutil import parse_time, to_utc
from monitor.decision.incidents import Incident, IncidentSettings, advance, attach

if TYPE_CHECKING:
    from monitor.inspection import Inspector, ReadWindow

#: detect_many(times, read_window) -> the detection statistic at each time (None: bad data)
DetectMany = Callable[[list[datetime], "ReadWindow"], list[float | None]]

log = logging.getLogger(__name__)


class SiteTracker:
    """History of ``(inspection time, statistic)`` from non-firing inspections, and the
    open incident."""

    def __init__(self, inspector: Inspector, incidents: IncidentSettings,
                 history: Iterable[tuple[datetime, float]] = (),
                 incident: Incident | None = None) -> None:
        self.inspector = inspector
        self.incidents = incidents
        self.history: dict[datetime, float] = dict(history)
        self.incident = incident

    def history_at(self, t: datetime) -> np.ndarray:
        """Values whose after window ended by ``t`` and that lie within the history span."""
        after = self.inspector.spec.after
        span = self.inspector.decision.calibration.history
        return np.array([v for th, v in self.history.items()
                         if th + after <= t and th >= t - span], dtype=float)

    def observe(self, result: dict[str, Any]) -> tuple[float | None, str | None]:
        """Record one result (in time order): keep its statistic unless it fired, advance
        the incident and attach it to ``result``. Returns (value kept, incident event)."""
        t = parse_time(result["inspection_time"])
        detection = result.get("detection") or {}
        value = detection.get("value")
        kept = None
        if value is not None and result.get("status") != "firing":
            self.history[t] = float(value)
            kept = float(value)
            self._trim(t)
        self.incident, event, about = advance(self.incident, result, self.incidents)
        attach(result, event, about)
        return kept, event

    def _trim(self, t: datetime) -> None:
        horizon = t - self.inspector.decision.calibration.history - timedelta(days=1)
        for th in [th for th in self.history if th < horizon]:
            del self.history[th]

    def backfill(self, times: list[datetime], read_window: ReadWindow,
                 detect_many: DetectMany | None = None) -> int:
        """Compute the statistic at past ``times`` from the source (one read) and add the
        values to the history. ``detect_many(times, read)``: the statistics of those times
        (default: ``inspector.detect`` one after the other; a backfill passes one that
        maps them over its executor). Returns how many could be computed."""
        if not times:
            return 0
        spec = self.inspector.spec
        frame = read_window(pd.Timestamp(min(times) - spec.before),
                            pd.Timestamp(max(times) + spec.after))
        read = cached_reader(frame)
        if frame.empty:
            return 0
        # a before window that starts ahead of the data is padded, not measured: skip it
        first = pd.Timestamp(frame["time"].min())
        first = to_utc(first)
        times = [th for th in times if pd.Timestamp(th - spec.before) >= first]
        values = (detect_many(times, read) if detect_many is not None
                  else [self.inspector.detect(th, read) for th in times])
        added = 0
        for th, value in zip(times, values, strict=True):
            if value is not None:
                self.history[th] = value
                added += 1
        log.info("calibration history of %s: %d of %d past inspection times computed",
                 self.inspector.site, added, len(times))
        return added


def cached_reader(frame: pd.DataFrame) -> ReadWindow:
    """read_window(start, end) over one frame already read (sorted once, sliced by time)."""
    if frame.empty:
        return lambda start, end: frame
    frame = frame.sort_values("time", kind="stable").reset_index(drop=True)
    times = frame["time"]
    if times.dt.tz is None:
        times = times.dt.tz_localize("UTC")
        frame = frame.assign(time=times)
    stamps = times.dt.tz_convert("UTC").dt.tz_localize(None).to_numpy()  # datetime64, UTC

    def read(start: pd.Timestamp, end: pd.Timestamp) -> pd.DataFrame:
        lo = np.searchsorted(stamps, pd.Timestamp(start).to_datetime64(), side="left")
        hi = np.searchsorted(stamps, pd.Timestamp(end).to_datetime64(), side="left")
        return frame.iloc[lo:hi]

    return read


def history_times(inspector: Inspector, t: datetime) -> list[datetime]:
    """Past inspection times, one ``inspection_interval`` apart and aligned on ``t``, whose
    statistic calibrates the one at ``t`` (after window ended by ``t``, within the span)."""
    cal = inspector.decision.calibration
    after = inspector.spec.after
    step = cal.inspection_interval
    first = t - cal.history
    out: list[datetime] = []
    th = t - step
    while th >= first:
        if th + after <= t:
            out.append(th)
        th -= step
    return out[::-1]
