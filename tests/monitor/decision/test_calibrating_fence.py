"""Calibrating values beyond the history's fence stay out of it on data without a daily
profile (issue 29; docs/decision.md, "Calibrating values screened"): a change while the
history is being built must not lift the threshold past itself."""
from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest

from monitor.config import validate_config
from monitor.decision.incidents import IncidentSettings
from monitor.decision.tracker import (
    CALIBRATING_FENCE,
    CALIBRATING_FENCE_FROM,
    SiteTracker,
    beyond_fence,
)

T0 = datetime(2026, 3, 2, 10, tzinfo=UTC)


def test_the_fence_is_the_third_quartile_plus_three_interquartile_ranges() -> None:
    history = np.arange(1.0, 13.0)  # quartiles 3.75 and 9.25
    fence = 9.25 + CALIBRATING_FENCE * 5.5
    assert not beyond_fence(fence, history)
    assert beyond_fence(fence + 1e-9, history)
    # NaN is no value; too few values draw no fence
    assert beyond_fence(fence + 1.0, np.append(history, np.nan))
    assert not beyond_fence(1e9, history[:CALIBRATING_FENCE_FROM - 1])


def _tracker(windows: dict[str, str], every: str) -> SiteTracker:
    from monitor.compose import build_inspector

    inspector = build_inspector(validate_config({
        "site": "sim", "source": {"type": "file", "path": "x.csv"},
        "windows": windows, "schedule": {"every": every}}))
    return SiteTracker(inspector, IncidentSettings())


def _calibrating(at: datetime, value: float) -> dict[str, Any]:
    return {"site": "sim", "inspection_time": at.isoformat(), "status": "calibrating",
            "test": {"p_value": None}, "selected_sensors": [], "sensors": [],
            "detection": {"value": value, "p_value": None, "level": 1 / 720,
                          "history_n": 0, "engine": {"value": 1.0}}}


@pytest.mark.parametrize(("windows", "every", "kept_out"), [
    ({"before": "5min", "after": "30s", "resample": "2s"}, "5s", True),  # no daily profile
    ({}, "1h", False),  # the hourly defaults: the daily profile's hours differ
])
def test_a_calibrating_value_beyond_the_fence(windows: dict[str, str], every: str,
                                              kept_out: bool) -> None:
    tracker = _tracker(windows, every)
    # one cadence past the after window: each value has joined when the next comes
    step = tracker.inspector.spec.after + timedelta(seconds=5 if every == "5s" else 3600)
    rng = np.random.default_rng(0)
    at = T0
    for value in 3.0 + rng.random(CALIBRATING_FENCE_FROM):  # quiet values, 3 to 4
        assert tracker.observe(_calibrating(at, float(value)))[0] is not None
        at += step
    kept, _ = tracker.observe(_calibrating(at, 40.0))  # far beyond 4 + 3 x 1
    assert (kept is None) is kept_out
    assert tracker.observe(_calibrating(at + step, 3.5))[0] == (3.5, 1.0)


@pytest.mark.parametrize(("windows", "every", "screened"), [
    ({"before": "5min", "after": "30s", "resample": "2s"}, "5s", True),  # no daily profile
    ({}, "1h", False),  # the hourly defaults
])
def test_the_completed_calibration_sample_leaves_out_its_values_beyond_its_fence(
        windows: dict[str, str], every: str, screened: bool) -> None:
    """A recording that begins inside an excursion: its first five values (60-100) come
    before any fence can be drawn (fewer than CALIBRATING_FENCE_FROM values), and are
    kept. When the sample the first alert waits for is complete, the fence drawn on it
    leaves them out; the tracker's memory keeps that across a restart."""
    tracker = _tracker(windows, every)
    step = timedelta(seconds=5 if every == "5s" else 3600)
    needed = tracker.inspector.decision.calibration.min_count
    rng = np.random.default_rng(0)
    values = [60.0, 80.0, 100.0, 90.0, 70.0] + list(3.0 + rng.random(needed - 5))
    at = T0
    for value in values:
        tracker.observe(_calibrating(at, float(value)))
        at += step
    assert len(tracker.history) == needed  # all were kept when they came
    if screened:
        kept = tracker.history_at(at + tracker.inspector.spec.after)[:, 0]
        assert kept.size == needed - 5 and kept.max() < 4.0
        assert sorted(tracker.left_out) == sorted(tracker.history)[:5]
    else:  # the hourly defaults screen nothing
        assert not tracker.left_out
    restarted = _tracker(windows, every)
    restarted.history = dict(tracker.history)
    restarted.restore(tracker.memory())
    later = at + tracker.inspector.spec.after
    assert np.array_equal(restarted.history_at(later), tracker.history_at(later))
