"""Incidents that stay true (issue 18): a frozen reference keeps a change that stays open,
a change that goes away resolves with reason ``returned``, an operator's ack resolves with
reason ``accepted`` and nothing reopens, the history holds only normal inspections, and
the onset lies near the change."""
from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pandas as pd
import pytest

from connectors.mqtt.sink import is_alert
from connectors.webhook import alertmanager_body
from monitor.config import validate_config
from monitor.decision.incidents import ACCEPTED_NOTE, IncidentSettings
from monitor.decision.tracker import SiteTracker, cached_reader
from monitor.demo.simulate import Scenario, simulate
from tests.monitor.decision.replay import Ack, replay

pytestmark = pytest.mark.slow

CHANGE = datetime(2026, 1, 18, 6, tzinfo=UTC)  # day 13 of 20, a Sunday
HOUR = timedelta(hours=1)


def _frame(revert_after: timedelta | None = None) -> pd.DataFrame:
    frame, _ = simulate(Scenario(days=20, step="15min", change_at=CHANGE.isoformat(),
                                 changes={"s04": -0.9}, seed=1))
    if revert_after is not None:  # the change goes away again (repaired)
        end = pd.Timestamp(CHANGE + revert_after)
        back = (frame["sensor"] == "s04") & (frame["time"] >= end)
        frame.loc[back, "value"] += 0.9
    return frame


def _replay(frame: pd.DataFrame, acks: dict[datetime, Ack] | None = None
            ) -> tuple[SiteTracker, list[dict[str, Any]]]:
    """The agent's path, hourly, 10 days after the data start (the windows, detections and
    engine-part fits of all times computed first, as a backfill and an agent catching up
    do: the same results, tests/monitor/test_backfill_agent.py)."""
    tracker = SiteTracker(_inspector(), IncidentSettings())
    return tracker, replay(tracker, frame, datetime(2026, 1, 15, tzinfo=UTC), acks=acks)


def _inspector() -> Any:
    from monitor.compose import build_inspector

    return build_inspector(validate_config({
        "site": "sim", "source": {"type": "file", "path": "x.csv"},
        "decision": {"min_history": "2d"}}))


def _events(results: list[dict[str, Any]]) -> list[tuple[str, str, dict[str, Any]]]:
    return [(r["inspection_time"], r["incident"]["event"], r["incident"]) for r in results
            if r.get("incident") and r["incident"]["event"]]


@pytest.fixture(scope="module")
def persistent() -> tuple[SiteTracker, list[dict[str, Any]]]:
    return _replay(_frame())


def test_a_change_that_stays_keeps_one_incident_open_to_the_end(persistent) -> None:
    _, results = persistent
    events = _events(results)
    assert [e for _, e, _ in events if e != "updated"] == ["opened"]
    _, _, opened = events[0]
    assert opened["sensors"][0] == "s04"
    last = results[-1]["incident"]
    assert last is not None and last["state"] == "open" and last["id"] == opened["id"]
    # a day after the change the sliding level statistic is quiet (the engine part, whose
    # 7-day before window now holds the step, may fire now and then), the frozen
    # reference is not
    late = [r for r in results if r["inspection_time"] >= "2026-01-19T12:00:00Z"]
    assert late and all(r["detection"]["level_p_value"] >= r["detection"]["level"]
                        for r in late[-24:])
    assert sum(r["status"] == "firing" for r in late[-24:]) <= 2
    assert last["baseline_check"]["s04"]["z"] < -3
    assert "reference" not in last  # its arrays stay in the state database


def test_the_onset_and_the_frozen_reference_lie_at_the_change(persistent) -> None:
    _, results = persistent
    opened = _events(results)[0][2]
    onset = datetime.fromisoformat(opened["onset"])
    assert abs(onset - CHANGE) <= timedelta(hours=3)
    assert opened["onset_low"] <= opened["onset"] <= opened["onset_high"]
    assert opened["baseline"] <= opened["onset"]


def test_the_history_holds_no_inspection_of_the_open_incident(persistent) -> None:
    tracker, results = persistent
    opened_at = datetime.fromisoformat(_events(results)[0][0])
    assert not [t for t in tracker.history if t >= opened_at]
    spans = [r["detection"].get("history_span") for r in results if r.get("detection")]
    assert spans[-1] is not None and spans[-1][1] < _events(results)[0][0]


def test_a_change_that_goes_away_resolves_with_reason_returned() -> None:
    _, results = _replay(_frame(revert_after=timedelta(hours=30)))
    events = _events(results)
    kinds = [e for _, e, _ in events if e != "updated"]
    assert kinds[:2] == ["opened", "resolved"], kinds
    resolved = next(inc for _, e, inc in events if e == "resolved")
    assert resolved["reason"] == "returned"
    when = datetime.fromisoformat(resolved["resolved"])
    assert when >= CHANGE + timedelta(hours=30) + IncidentSettings().resolve_after


def test_an_ack_resolves_with_reason_accepted_and_nothing_reopens(persistent) -> None:
    incident_id = _events(persistent[1])[0][2]["id"]
    at = datetime(2026, 1, 19, 12, tzinfo=UTC)
    tracker, results = _replay(_frame(), {at: Ack(1, incident_id, "alice")})
    events = _events(results)
    assert [e for _, e, _ in events if e != "updated"] == ["opened", "resolved"]
    t, _, resolved = next(x for x in events if x[1] == "resolved")
    assert t == "2026-01-19T12:00:00Z"
    assert resolved["reason"] == "accepted" and resolved["accepted_by"] == "alice"
    assert results[-1]["incident"] is None
    # the reference moved on: later normal inspections join the history again
    assert max(tracker.history) > at


def test_a_firing_within_the_accepted_change_alerts_no_sink_until_quiet_once() -> None:
    """After an ack, the sliding window still holds the accepted change: a firing result on
    the accepted sensors opens no incident, says so, and is no alert (MQTT ``alert``,
    Alertmanager); after one quiet result the same sensors open a new incident."""
    tracker = SiteTracker(_inspector(), IncidentSettings())
    tracker.restore({"accepted": ["s01"]})
    t = datetime(2026, 1, 15, tzinfo=UTC)

    def result(k: int, status: str) -> dict[str, Any]:
        return {"site": "sim", "inspection_time": (t + k * HOUR).isoformat(),
                "status": status, "test": {"p_value": 1e-6}, "selected_sensors": ["s01"],
                "sensors": [{"sensor_id": "s01", "z": 9.0}], "summary": "Change on s01",
                "detection": {"value": 81.0, "p_value": 1e-6, "level": 1e-3}}

    within = result(0, "firing")
    assert tracker.observe(within) == (None, None)
    assert within["incident"] is None and within["detection"]["accepted"] is True
    assert within["summary"] == "Change on s01" + ACCEPTED_NOTE and not is_alert(within)
    now = datetime(2026, 1, 15, 1, tzinfo=UTC)
    [alert] = alertmanager_body(within, now=now, ttl=timedelta(hours=2), severity="warning")
    assert alert["endsAt"] == alert["startsAt"]  # ended, as a quiet result's
    quiet = result(1, "ok")
    tracker.observe(quiet)
    assert "accepted" not in quiet["detection"] and tracker.accepted == set()
    again = result(2, "firing")
    assert tracker.observe(again)[1] == "opened" and is_alert(again)
    assert "accepted" not in again["detection"]


def test_a_firing_value_stays_out_and_a_pre_alert_value_only_of_a_short_history() -> None:
    """A short history keeps out values below the pre-alert level (5 x the alert level):
    one change's run-up would lift its threshold past the change. A long one keeps out
    only what fired: its own largest quiet values belong in it, or its tail is too light
    and the thresholds fire too often (issue 28)."""
    from monitor.decision.tracker import PRE_ALERT, PRE_ALERT_HISTORY

    inspector = _inspector()
    tracker = SiteTracker(inspector, IncidentSettings())
    t = datetime(2026, 1, 15, tzinfo=UTC)
    near = 2 * 1e-3  # above the level, below the pre-alert level
    assert 1e-3 < near < PRE_ALERT * 1e-3

    def result(k: int, status: str, p: float, n: int = 10) -> dict[str, Any]:
        return {"site": "sim", "inspection_time": (t + k * HOUR).isoformat(),
                "status": status, "test": {"p_value": p}, "selected_sensors": ["s01"],
                "sensors": [{"sensor_id": "s01"}],
                "detection": {"value": 1.0 + k, "p_value": p, "level": 1e-3,
                              "history_n": n, "engine": {"value": 0.5 + k}}}

    long_history = PRE_ALERT_HISTORY
    kept = [tracker.observe(result(0, "ok", 0.5))[0],
            tracker.observe(result(1, "ok", near))[0],  # a short history: pre-alert
            tracker.observe(result(2, "ok", near, n=long_history))[0],  # a long one: it joins
            tracker.observe(result(3, "ok", 0.0005, n=long_history))[0],  # below the level
            tracker.observe(result(4, "ok", 0.2))[0]]
    assert kept == [(1.0, 0.5), None, (3.0, 2.5), None, (5.0, 4.5)]  # (level, engine)
    assert tracker.observe(result(5, "firing", 1e-5))[0] is None
    assert tracker.observe(result(6, "ok", 0.5))[0] is None  # an incident is open
    assert np.isfinite(np.ravel(list(tracker.history.values()))).all()


def test_quiet_values_rejoin_the_history_once_the_windows_are_past_the_change() -> None:
    """While an incident stays open, a quiet value joins the history again once its before
    window starts after the first firing's after window: both windows then hold the new
    state, so the value is one of the statistic's null (issue 28: a long incident froze the
    calibration). Before that, none joins; a value below the level never does."""
    inspector = _inspector()
    tracker = SiteTracker(inspector, IncidentSettings())
    t = datetime(2026, 1, 15, tzinfo=UTC)

    def result(at: datetime, status: str, p: float) -> dict[str, Any]:
        return {"site": "sim", "inspection_time": at.isoformat(), "status": status,
                "test": {"p_value": p}, "selected_sensors": ["s01"],
                "sensors": [{"sensor_id": "s01"}],
                "detection": {"value": 2.0, "p_value": p, "level": 1e-3,
                              "engine": {"value": 0.5}}}

    assert tracker.observe(result(t, "firing", 1e-5))[1] == "opened"
    settled = t + inspector.spec.after + inspector.spec.before
    at = t + HOUR
    while at < settled:  # a firing every 12 h keeps the incident open (resolve_after 24 h)
        firing = (at - t) % timedelta(hours=12) == timedelta(0)
        kept, _ = tracker.observe(result(at, "firing" if firing else "ok", 1e-5 if firing
                                         else 0.5))
        assert kept is None, at
        at += HOUR
    assert tracker.observe(result(settled, "ok", 0.0005))[0] is None  # below the level
    assert tracker.observe(result(settled + HOUR, "ok", 0.5))[0] == (2.0, 0.5)
    assert len(tracker.open_incidents) == 1 and max(tracker.history) == settled + HOUR


class _FrameWindows:
    """A site's windows over one frame (the agent's store, as SiteRunner reads it)."""

    def __init__(self, frame: pd.DataFrame) -> None:
        self._read = cached_reader(frame)
        self._frame = frame

    def read_window(self, start: pd.Timestamp, end: pd.Timestamp, *,
                    resample: str | None = None, aggregate: str = "mean") -> pd.DataFrame:
        return self._read(start, end)

    def watermark(self) -> pd.Timestamp:
        return pd.Timestamp(self._frame["time"].max())


def _agent_replay(frame: pd.DataFrame, path: Any, ack_at: datetime, incident_id: str,
                  restart_at: datetime | None = None, forget: bool = False,
                  prepared: dict[datetime, Any] | None = None
                  ) -> tuple[list[dict[str, Any]], list[datetime]]:
    """The agent's own path (SiteRunner over a real state database), hourly, with an ack
    of ``incident_id`` at ``ack_at`` and a restart at ``restart_at``: a new runner and
    tracker that know only what the state database kept (``forget``: without the decision's
    memory, as before it was saved). ``prepared``: the first pass of the replayed times
    (windows, detection, engine-part fit: ``monitor.inspection.prepare_many``, as the
    agent's tick computes it for its due times), which no decision changes. Returns the
    results and the history's times."""
    from monitor.fleet.sites import SiteRunner
    from monitor.schedule import InspectionPlan
    from monitor.storage.state import AgentState

    # the decision's memory is under test, not the engine part: three replays of 200-odd
    # inspections share one first pass (``prepared``)
    config = validate_config({"site": "sim", "source": {"type": "file", "path": "x.csv"},
                              "decision": {"min_history": "2d", "engine_weight": 0}})

    def runner(state: AgentState) -> SiteRunner:
        inspector = _inspector()
        return SiteRunner(inspector=inspector, windows=_FrameWindows(frame), state=state,
                          plan=InspectionPlan.from_config(config.schedule),
                          tracker=SiteTracker(inspector, IncidentSettings()))

    state = AgentState(path)
    site = runner(state)
    last = frame["time"].max().to_pydatetime() - site.inspector.spec.after
    results = []
    t = datetime(2026, 1, 15, tzinfo=UTC)
    while t <= last:
        if t == restart_at:
            state.close()
            state = AgentState(path)
            if forget:
                state._tx(lambda c: c.execute("DELETE FROM meta WHERE key = 'memory'"))
            site = runner(state)
        if t == ack_at:
            state.add_ack(incident_id, by="alice", via="cli")
        if prepared is not None and t in prepared:
            site.prepared[t] = prepared[t]
        result = site.run(t).result
        site.commit(t, result)
        results.append(result)
        t += HOUR
    history = [datetime.fromtimestamp(th, UTC) for th, _ in state.history(0)]
    state.close()
    return results, history


def test_a_restart_after_an_ack_keeps_the_decisions_memory(persistent, tmp_path) -> None:
    """The quarantine after an incident and the sensors its ack accepted are saved with
    each result: an agent restarted two hours after the ack decides as one that ran on,
    while one that forgot them lets the sliding window's change into the history."""
    incident_id = _events(persistent[1])[0][2]["id"]
    at = datetime(2026, 1, 19, 12, tzinfo=UTC)
    quarantine = [at + k * HOUR for k in range(24)]  # local_level: a day
    frame = _frame()
    from monitor.inspection import prepare_many

    last = frame["time"].max().to_pydatetime() - _inspector().spec.after
    times = [datetime(2026, 1, 15, tzinfo=UTC) + k * HOUR for k in range(400)]
    times = [t for t in times if t <= last]
    prepared = prepare_many([(_inspector(), times, _FrameWindows(frame).read_window)])[0]

    def replay(name: str, **restart: Any) -> tuple[list[tuple[Any, ...]], list[datetime]]:
        results, history = _agent_replay(frame, tmp_path / f"{name}.sqlite", at,
                                         incident_id, prepared=prepared, **restart)
        return [(r["inspection_time"], r["status"], r["fingerprint"],
                 (r.get("detection") or {}).get("p_value"), r.get("incident"))
                for r in results], history

    ran_on, history = replay("ran-on")
    kinds = [inc["event"] for *_, inc in ran_on if inc and inc["event"]]
    assert [k for k in kinds if k != "updated"] == ["opened", "resolved"], kinds
    assert not set(quarantine) & set(history)
    assert replay("restarted", restart_at=at + 2 * HOUR) == (ran_on, history)
    forgot, forgot_history = replay("forgot", restart_at=at + 2 * HOUR, forget=True)
    assert set(quarantine) & set(forgot_history), \
        "forgetting the memory changed nothing: the test proves nothing"
    assert forgot != ran_on  # and, through the history, the later p-values
