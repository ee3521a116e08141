"""The agent's path over a frame, hourly, for the decision's tests: the first pass of all
times (windows, detection, engine-part fits: ``Inspector.fit_engine_many``, as the agent's
tick and a backfill compute it), then each result decided with the tracker's history and
observed by it, in time order."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import pandas as pd

from monitor.decision.tracker import SiteTracker, cached_reader, history_times

HOUR = timedelta(hours=1)


@dataclass(frozen=True)
class Ack:
    """An operator's ack as the tracker reads it (``monitor.storage.state.Ack``'s fields)."""

    id: int
    incident_id: str
    by: str
    via: str = "cli"


def replay(tracker: SiteTracker, frame: pd.DataFrame, first: datetime, *,
           backfill: bool = True, acks: dict[datetime, Ack] | None = None
           ) -> list[dict[str, Any]]:
    """Hourly results from ``first`` to the last time whose after window the frame covers;
    ``backfill``: the tracker's history computed from the frame first, as a first start
    does."""
    inspector = tracker.inspector
    read = cached_reader(frame)
    if backfill:
        tracker.backfill(history_times(inspector, first), read)
    last = frame["time"].max().to_pydatetime() - inspector.spec.after
    times = [first + k * HOUR for k in range(int((last - first) / HOUR) + 1)]
    prepared = inspector.fit_engine_many(times, read)
    results = []
    for t in times:
        result = inspector.run(t, read, tracker.history_at(t), prepared=prepared.get(t)).result
        ack = (acks or {}).get(t)
        tracker.observe(result, read, [ack] if ack else [])
        results.append(result)
    return results


def replay_defaults(frame: pd.DataFrame, first: datetime) -> list[dict[str, Any]]:
    """:func:`replay` of ``frame`` with the live defaults of a site on a file source."""
    from monitor.compose import build_inspector
    from monitor.config import validate_config
    from monitor.decision.incidents import IncidentSettings

    inspector = build_inspector(validate_config({
        "site": "sim", "source": {"type": "file", "path": "x.csv"}}))
    return replay(SiteTracker(inspector, IncidentSettings()), frame, first)
