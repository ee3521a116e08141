"""A week of memory (issue 28): a network whose demand is lower at weekends, started on a
Monday, raises no incident on its first weekend once it is calibrated."""
from __future__ import annotations

from datetime import UTC, datetime

import pytest

from monitor.config import validate_config
from monitor.decision.incidents import IncidentSettings
from monitor.decision.tracker import SiteTracker
from tests.monitor.decision.replay import replay


@pytest.mark.slow
def test_a_network_started_on_a_monday_raises_no_incident_on_its_first_weekend() -> None:
    """The simulated network's demand is lower at weekends (``monitor.demo.simulate``).
    Started on a Monday with nothing changed, the agent's path (hourly, calibrated from
    the data alone) is calibrated before its first weekend and opens no incident."""
    from monitor.compose import build_inspector
    from monitor.demo.simulate import Scenario, simulate

    frame, _ = simulate(Scenario(days=16, step="15min", change_at=None, seed=3))
    inspector = build_inspector(validate_config({
        "site": "sim", "source": {"type": "file", "path": "x.csv"}}))
    tracker = SiteTracker(inspector, IncidentSettings())
    # the Monday a week in: a full before window, and the history from the data alone
    results = replay(tracker, frame, datetime(2026, 1, 12, tzinfo=UTC), backfill=False)
    weekend = [r for r in results if r["inspection_time"] >= "2026-01-16T08:00"]
    assert any(r["status"] != "calibrating" for r in weekend)  # it was calibrated by then
    opened = [r["inspection_time"] for r in results
              if (r.get("incident") or {}).get("event") == "opened"]
    assert opened == []
