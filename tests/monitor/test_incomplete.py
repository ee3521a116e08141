"""No invented data (issue 19, item 3): an after window past the end of the data is never
filled with carried values; a one-shot inspection ends that time as ``incomplete``, which
the incident state machine and the calibration history treat as no evidence."""
from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import numpy as np
import pandas as pd
import pytest

from monitor.decision.incidents import IncidentSettings, advance
from monitor.decision.tracker import SiteTracker
from monitor.inspection import EngineSettings, Inspector
from monitor.windows import WindowError, WindowIncomplete, WindowSpec, build_windows
from tests.monitor.test_cli import mmdwatch
from tests.shared_data import LTOWN

T = pd.Timestamp("2024-03-10T00:00:00Z")
SPEC = WindowSpec(before=timedelta(hours=24), after=timedelta(hours=10),
                  resample=timedelta(hours=1), min_sensors=2)


def _readings(hours_after: float, sensors=("a", "b", "c")) -> pd.DataFrame:
    """Readings every 10 minutes from the before window's start to ``hours_after`` past T."""
    times = pd.date_range(T - pd.Timedelta(hours=24), T + pd.Timedelta(hours=hours_after),
                          freq="10min", inclusive="left")
    rng = np.random.default_rng(0)
    rows = [(t, s, 50.0 + rng.normal()) for t in times for s in sensors]
    return pd.DataFrame(rows, columns=["time", "sensor", "value"])


def test_an_after_window_past_the_data_is_incomplete_not_filled():
    with pytest.raises(WindowIncomplete) as caught:
        build_windows(_readings(6), T, SPEC)
    assert caught.value.covered == pytest.approx(0.6)
    assert caught.value.data_end == T + pd.Timedelta(hours=6) - pd.Timedelta(minutes=10)
    assert "covered to 60%" in str(caught.value)
    assert isinstance(caught.value, WindowError)  # still "too little data" to callers


def test_no_after_data_at_all_is_incomplete_and_no_data_at_all_an_error():
    with pytest.raises(WindowIncomplete) as caught:
        build_windows(_readings(0), T, SPEC)
    assert caught.value.covered == 0.0 and caught.value.data_end is None
    empty = pd.DataFrame({"time": pd.to_datetime([], utc=True), "sensor": [], "value": []})
    with pytest.raises(WindowError) as error:
        build_windows(empty, T, SPEC)
    assert not isinstance(error.value, WindowIncomplete)


def test_gaps_inside_the_data_are_still_filled():
    """One sensor's hole inside a covered window is interpolated (capped by
    min_coverage), as before: only the time past the data is never filled."""
    readings = _readings(10)
    hole = (readings["sensor"] == "a") & (readings["time"] >= T + pd.Timedelta(hours=7))
    w = build_windows(readings[~hole], T, SPEC)
    assert w.after_raw["a"].notna().all()  # its last 3 hours carried: inside the data
    assert w.data_quality["missing_fraction"] > 0


def test_an_incomplete_inspection_is_no_evidence_for_incidents_or_history():
    inspector = Inspector("x", SPEC, EngineSettings(method="mmd-baseline", device="cpu"),
                          {"windows": "test"})
    frame = _readings(6)
    outcome = inspector.run(T.to_pydatetime(), lambda start, end: frame)
    result = outcome.result
    assert result["status"] == "incomplete"
    assert result["data_quality"]["after_covered"] == pytest.approx(0.6)
    assert "covered to 60%" in result["incomplete"] and "error" not in result
    assert result["summary"].startswith("Inspection at 2024-03-10T00:00Z: the after window")
    assert result["sensors"] == [] and result["selected_sensors"] == []
    # an open incident is neither resolved nor extended by it
    t0 = datetime(2024, 3, 9, tzinfo=UTC)
    firing = {"site": "x", "inspection_time": "2024-03-09T00:00:00Z", "status": "firing",
              "test": {"p_value": 1e-4}, "selected_sensors": ["a"],
              "sensors": [{"sensor_id": "a"}]}
    incident, event, _ = advance(None, firing, IncidentSettings(resolve_after=timedelta(0)))
    assert event == "opened"
    later = dict(result, inspection_time=(t0 + timedelta(days=1)).isoformat()
                 .replace("+00:00", "Z"))
    after, event, _ = advance(incident, later, IncidentSettings(resolve_after=timedelta(0)))
    assert after == incident and event is None
    # the calibration history keeps nothing of it
    tracker = SiteTracker(inspector, IncidentSettings())
    kept, event = tracker.observe(dict(result))
    assert kept is None and event is None and tracker.history == {}


@pytest.mark.skipif(not (LTOWN / "pressures.csv.gz").exists(),
                    reason="the shared L-Town dev data set is not here")
def test_retrospective_inspection_40_percent_past_the_data_is_incomplete():
    """The data ends 2019-03-19T00:00Z; the 7-day after window of 2019-03-14T19:12Z is 60 %
    inside it. Carrying the last values over the other 40 % used to fire on that flat
    tail; now no decision is made and nothing is filled."""
    out = mmdwatch("inspect", "--data", str(LTOWN / "pressures.csv.gz"), "--at",
                   "2019-03-14T19:12:00Z", "--profile", "retrospective")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["status"] == "incomplete", result["summary"]
    assert result["data_quality"]["after_covered"] == pytest.approx(101 / 168, abs=1e-6)
    assert "covered to 60%" in result["incomplete"] and "60%" in result["summary"]
    assert result["selected_sensors"] == [] and result["test"]["p_value"] is None
