"""The live profile's decision: detection statistic, calibration against history, incidents."""
from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import numpy as np
import pandas as pd
import pytest

from engine.live.calibration import (
    CalibrationSettings,
    empirical_pvalue,
    tail_pvalue,
    threshold,
)
from engine.live.residual_shift import DetectionError, DetectorSettings, detect
from monitor.decision.incidents import IncidentSettings, advance
from tests.monitor.test_cli import mmdwatch
from tests.shared_data import DELAY_DEV

DELAY = DELAY_DEV if DELAY_DEV.exists() else None


def _frames(shift: float = 0.0, sensors: int = 6, seed: int = 0
            ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """7 days before and 6 hours after, 15-minute rows, a daily cycle, sensor 0 shifted."""
    rng = np.random.default_rng(seed)
    index = pd.date_range("2024-01-01", periods=7 * 96 + 24, freq="15min", tz="UTC")
    hours = np.asarray(index.hour + index.minute / 60)
    cycle = 3 * np.sin(2 * np.pi * hours / 24)[:, None] * rng.uniform(0.5, 1.5, sensors)
    values = 50 + cycle + rng.normal(0, 0.2, (len(index), sensors))
    values[7 * 96:, 0] += shift
    frame = pd.DataFrame(values, index=index, columns=[f"s{k}" for k in range(sensors)])
    return frame.iloc[:7 * 96], frame.iloc[7 * 96:]


def test_statistic_sees_a_local_shift_through_the_daily_cycle():
    settings = DetectorSettings(local_level_rows=96)
    calm = detect(*_frames(0.0), settings)
    shifted = detect(*_frames(-1.0), settings)
    assert shifted.value > 10 * calm.value
    assert shifted.z.abs().idxmax() == "s0" and shifted.z["s0"] < 0
    assert shifted.before_residuals.shape == (7 * 96, 6)
    assert shifted.after_residuals.shape == (24, 6)


def test_statistic_refuses_windows_it_cannot_calibrate():
    before, after = _frames()
    with pytest.raises(DetectionError, match="lengthen windows.before"):
        detect(before.iloc[:40], after, DetectorSettings())


def test_pvalues_are_conformal_and_extrapolate_beyond_the_history():
    history = np.arange(1.0, 101.0)  # 100 values
    assert empirical_pvalue(50.5, history) == pytest.approx(51 / 101)
    assert tail_pvalue(50.5, history) == empirical_pvalue(50.5, history)
    beyond = tail_pvalue(1000.0, history)
    assert 0 < beyond < 1 / 101  # below what 100 values can say empirically
    assert tail_pvalue(2000.0, history) < beyond  # monotone
    assert tail_pvalue(3.0, np.array([])) == 1.0


def test_calibrated_pvalues_hold_their_level_under_the_null():
    """On exchangeable nulls, P(p < level) stays at or below the level (here 5 %)."""
    rng = np.random.default_rng(0)
    hits = 0
    trials = 2000
    for _ in range(trials):
        values = rng.chisquare(3, 201)
        hits += tail_pvalue(values[-1], values[:-1]) < 0.05
    assert hits / trials < 0.05 + 3 * np.sqrt(0.05 * 0.95 / trials)


def test_short_histories_keep_their_far_level():
    """The alert threshold at 1/720 from 60 or 116 history values: on a Pareto null the
    mean chance of crossing it stays near the level (the tail's scale is uncertain with
    12-23 exceedances, and the predictive tail carries that; the plug-in estimate crossed
    at 2.4x and 1.6x the level)."""
    rng = np.random.default_rng(0)
    for n in (60, 116):
        crossed = [threshold(1 / 720, rng.uniform(size=n) ** -0.5) ** -2.0
                   for _ in range(400)]
        assert 0.7 / 720 < np.mean(crossed) < 1.3 / 720


def test_threshold_inverts_the_pvalue():
    history = np.random.default_rng(1).chisquare(2, 300)
    limit = threshold(1 / 720, history)
    assert limit > history.max()
    assert tail_pvalue(limit * 1.0001, history) < 1 / 720 <= tail_pvalue(limit * 0.999, history)


def test_level_comes_from_the_mean_time_between_false_incidents():
    cal = CalibrationSettings(false_incident_interval=timedelta(days=30),
                              inspection_interval=timedelta(hours=1),
                              min_history=timedelta(days=2))
    assert cal.level == pytest.approx(1 / 720)
    assert cal.min_count == 48


def _result(t: datetime, status: str, p: float | None = None,
            sensors: tuple[str, ...] = ()) -> dict:
    return {"site": "x", "inspection_time": t.isoformat().replace("+00:00", "Z"),
            "status": status, "test": {"p_value": p}, "selected_sensors": list(sensors),
            "sensors": [{"sensor_id": s} for s in sensors]}


def test_incident_opens_updates_and_resolves_once():
    """Without a frozen reference (no windows to freeze), an incident resolves after
    resolve_after with no firing inspection (reason returned); updates only when a new
    sensor enters the first three named or p falls tenfold; the first-named stay first."""
    t0 = datetime(2024, 1, 1, tzinfo=UTC)
    settings = IncidentSettings(resolve_after=timedelta(hours=3))
    hour = timedelta(hours=1)
    steps = [
        ("ok", None, ()), ("firing", 1e-4, ("a",)), ("firing", 5e-5, ("a",)),
        ("firing", 1e-3, ("b",)), ("firing", 1e-6, ("b", "a")), ("ok", 0.5, ()),
        ("error", None, ()), ("ok", 0.5, ()), ("ok", 0.5, ()), ("ok", 0.5, ()),
        ("firing", 1e-4, ("c",)),
    ]
    incident, events = None, []
    for k, (status, p, sensors) in enumerate(steps):
        incident, event, about = advance(incident, _result(t0 + k * hour, status, p, sensors),
                                         settings)
        events.append((event, about.id if about else None, about.sensors if about else None))
    # resolved 3 quiet hours after the last firing one (the error carries no evidence)
    assert [e for e, _, _ in events] == [None, "opened", None, "updated", "updated", None,
                                         None, "resolved", None, None, "opened"]
    first_id = events[1][1]
    assert events[3] == ("updated", first_id, ["a", "b"])  # b enters behind a
    assert events[4] == ("updated", first_id, ["a", "b"])  # p fell tenfold; a stays first
    assert events[7][1] == first_id and events[10][1] != first_id
    assert incident is not None and incident.sensors == ["c"]


@pytest.mark.skipif(DELAY is None, reason="the shared L-Town delay scenarios are not here")
def test_inspect_names_the_leak_hours_after_onset_with_calibrated_history():
    """d1: leak at 07:45; the live default inspection at 03:00 (after window to 19:00)
    fires, naming the sensor nearest the leak first."""
    truth = json.loads((DELAY / "d1" / "ground_truth.json").read_text())
    out = mmdwatch("inspect", "--data", str(DELAY / "d1" / "pressures.csv.gz"),
                   "--at", "2019-09-16T03:00:00")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["status"] == "firing", result["summary"]
    assert result["windows"]["after"]["n"] == 16 and result["windows"]["before"]["n"] == 168
    assert result["detection"]["history_n"] >= 96
    assert result["detection"]["p_value"] < result["detection"]["level"]
    top3 = [s["sensor_id"] for s in result["sensors"][:3]]
    assert set(top3) & set(truth["sensors_by_leak_effect"][:3]), top3
    assert result["selected_sensors"][0] == top3[0] == truth["sensors_by_leak_effect"][0]
    limit = result["detection"]["threshold"]
    assert all(s["z"] ** 2 >= limit for s in result["sensors"] if s["selected"])
    assert result["engine"] is not None  # CV-aggregation ran beside the statistic
    assert all("engine_score" in s for s in result["sensors"])


@pytest.mark.skipif(DELAY is None, reason="the shared L-Town delay scenarios are not here")
def test_too_little_history_is_a_clear_calibrating_status():
    out = mmdwatch("inspect", "--data", str(DELAY / "d1" / "pressures.csv.gz"),
                   "--at", "2019-09-10T00:00:00")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["status"] == "calibrating"
    assert result["calibration"].startswith("calibrating: ")
    assert "of 4.0 days of history" in result["summary"]
    assert result["selected_sensors"] == [] and result["test"]["p_value"] is None


def test_history_and_open_incident_are_committed_with_the_result(tmp_path):
    """One transaction: the result, its statistic in the history and the open incident."""
    from monitor.storage.state import AgentState

    state = AgentState(tmp_path / "state.sqlite")
    t0 = datetime(2024, 1, 1, tzinfo=UTC).timestamp()
    incident = {"id": "x-1", "site": "x", "state": "open", "started": "2024-01-01T00:00:00Z",
                "last_firing": "2024-01-01T00:00:00Z", "sensors": ["a"]}
    state.commit_inspection(t0, {"fingerprint": "f0", "status": "ok"},
                            statistic=(1.5, 0.7),
                            incident=incident)
    state.commit_inspection(t0 + 3600, {"fingerprint": "f1", "status": "firing"},
                            incident=False)  # False: the incident row is left as it is
    assert state.history(t0) == [(t0, (1.5, 0.7))]
    assert state.open_incident() == incident
    memory = {"quarantine_until": "2024-01-02T02:00:00Z", "accepted": ["a"]}
    state.commit_inspection(t0 + 7200, {"fingerprint": "f2", "status": "ok"},
                            statistic=(2.0, None),  # no engine part (engine_weight 0)
                            incident=None,  # None: no incident open any more
                            memory=memory)
    assert state.open_incident() is None
    assert state.decision_memory() == memory
    state.commit_inspection(t0 + 10800, {"fingerprint": "f3", "status": "ok"})
    assert state.decision_memory() == memory  # None: left as it is
    site = state.for_site("dma-north")  # a multi-site agent's own key
    assert site.decision_memory() is None
    site.commit_inspection(t0, {"fingerprint": "g0", "status": "ok"}, memory={"accepted": []})
    assert site.decision_memory() == {"accepted": []} and state.decision_memory() == memory
    state.prune_history(t0 + 1)
    assert state.history(0) == [(t0 + 7200, (2.0, None))]
    state.close()
