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


def test_hours_of_the_week_the_history_has_not_seen_are_counted() -> None:
    """An after window's profile slots (hour of day, weekday or weekend) that no after
    window of the history holds: a history of weekdays alone has not seen a Saturday."""
    import numpy as np

    from engine.live.residual_shift import uncovered_slots

    hour = 3600.0
    monday = datetime(2026, 1, 12, tzinfo=UTC).timestamp()
    offsets = np.arange(16) * hour  # a 16-hour after window
    weekdays = monday + np.arange(0, 4 * 24) * hour  # Monday to Thursday, every hour
    friday_noon = monday + (4 * 24 + 12) * hour  # its after window reaches Saturday 04:00
    thursday = monday + (3 * 24 + 2) * hour
    assert uncovered_slots(weekdays, offsets, thursday, "week") == 0
    assert uncovered_slots(weekdays, offsets, friday_noon, "week") == 4  # Sat 00:00-03:00
    assert uncovered_slots(weekdays, offsets, friday_noon, "day") == 0
    assert uncovered_slots(weekdays, offsets, friday_noon, "none") == 0
    assert uncovered_slots(np.array([]), offsets, thursday, "week") == 16
    with_weekend = np.concatenate([weekdays, monday + np.arange(5 * 24, 7 * 24) * hour])
    assert uncovered_slots(with_weekend, offsets, friday_noon, "week") == 0


@pytest.mark.slow
def test_the_first_weekend_says_which_hours_its_history_has_not_seen() -> None:
    """Started on a Monday, the agent's first weekend (after windows that reach Saturday
    before any weekend value is in the history) reports the hours of the week its
    history has not seen, and is judged at the level as any other time; the weekdays
    after it report none."""
    from monitor.compose import build_inspector
    from monitor.demo.simulate import Scenario, simulate

    frame, _ = simulate(Scenario(days=16, step="15min", change_at=None, seed=3))
    inspector = build_inspector(validate_config({
        "site": "sim", "source": {"type": "file", "path": "x.csv"}}))
    level = inspector.decision.calibration.level
    tracker = SiteTracker(inspector, IncidentSettings())
    results = replay(tracker, frame, datetime(2026, 1, 12, tzinfo=UTC), backfill=False)
    judged = {r["inspection_time"]: r["detection"] for r in results
              if r["status"] in ("ok", "firing")}
    first = min(judged)  # calibrated on the Friday afternoon: its after window ends Saturday
    assert "2026-01-16T08:00" < first < "2026-01-17"
    assert judged[first]["uncovered_slots"] > 0
    assert judged[first]["level"] == pytest.approx(level, rel=1e-4)
    monday = judged["2026-01-19T10:00:00Z"]  # weekday hours: all seen
    assert monday["uncovered_slots"] == 0
