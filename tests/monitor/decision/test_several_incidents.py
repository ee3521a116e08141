"""One change, one incident (issue 28, item 2): a change on other sensors that begins while
an incident is open opens its own incident with its own onset; the old one resolves on
its own sensors; acks, the state database and the webhook see each incident."""
from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pandas as pd
import pytest

from connectors.webhook import alertmanager_body
from monitor.config import validate_config
from monitor.decision.incidents import Incident, IncidentSettings, hold, is_new_change
from monitor.decision.tracker import SiteTracker
from monitor.demo.simulate import Scenario, simulate
from tests.monitor.decision.replay import Ack, replay

FIRST = datetime(2026, 1, 18, 6, tzinfo=UTC)  # s04 drops 0.9 m (a Sunday)
SECOND = FIRST + timedelta(hours=48)  # s09 drops 0.9 m, while the first waits to resolve
REPAIRED = FIRST + timedelta(hours=30)  # s04 back (repaired)


def _incident(**kw: Any) -> Incident:
    base = {"id": "a", "site": "s", "state": "open", "started": "2026-01-18T06:00:00+00:00",
            "last_firing": "2026-01-18T06:00:00+00:00", "sensors": ["s04", "s05", "s06"],
            "fired": ["s04"], "onset": "2026-01-18T05:00:00+00:00",
            "onset_low": "2026-01-18T04:00:00+00:00",
            "onset_high": "2026-01-18T06:00:00+00:00"}
    return Incident(**{**base, **kw})


def test_a_new_change_needs_other_sensors_and_a_later_onset() -> None:
    old = _incident()  # onset interval ends 2026-01-18 06:00
    horizon = timedelta(hours=40)  # after window 16 h + local level 24 h
    assert is_new_change(old, ["s09"], "2026-01-19T23:00:00+00:00", horizon)
    # the same change, a further sensor: its onset lies where the incident's does
    assert not is_new_change(old, ["s09"], "2026-01-18T05:00:00+00:00", horizon)
    # within the horizon of the incident's onset: taken for its consequence
    assert not is_new_change(old, ["s09"], "2026-01-19T21:00:00+00:00", horizon)
    # a sensor that fired for the incident: its own change
    assert not is_new_change(old, ["s04", "s09"], "2026-01-20T00:00:00+00:00", horizon)
    # a sensor it only ranks among its first three (noise, or the first change through
    # the common mode) does not make a later change its own
    assert is_new_change(old, ["s05", "s09"], "2026-01-20T00:00:00+00:00", horizon)
    assert not is_new_change(old, ["s05"], "2026-01-18T05:00:00+00:00", horizon)
    assert not is_new_change(old, ["s09"], None, horizon)  # no onset: cannot tell
    # an incident without an onset counts from its start
    bare = _incident(onset=None, onset_low=None, onset_high=None)
    assert is_new_change(bare, ["s09"], "2026-01-20T00:00:00+00:00", horizon)


def test_hold_counts_the_time_back_without_resolving() -> None:
    old = _incident()
    t = "2026-01-20T00:00:00+00:00"
    assert hold(old, t, True).returned_since == t
    assert hold(hold(old, t, True), "2026-01-22T00:00:00+00:00", True).returned_since == t
    assert hold(hold(old, t, True), t, False).returned_since is None
    assert hold(old, t, None) == old
    assert hold(old, t, True).state == "open"


def _frame() -> pd.DataFrame:
    frame, _ = simulate(Scenario(days=20, step="15min", change_at=FIRST.isoformat(),
                                 changes={"s04": -0.9}, seed=1))
    second = (frame["sensor"] == "s09") & (frame["time"] >= pd.Timestamp(SECOND))
    frame.loc[second, "value"] -= 0.9
    repaired = (frame["sensor"] == "s04") & (frame["time"] >= pd.Timestamp(REPAIRED))
    frame.loc[repaired, "value"] += 0.9
    return frame


def _replay(acks: dict[datetime, Ack] | None = None
            ) -> tuple[SiteTracker, list[dict[str, Any]]]:
    """The agent's path, hourly, over the two changes."""
    from monitor.compose import build_inspector

    inspector = build_inspector(validate_config({
        "site": "sim", "source": {"type": "file", "path": "x.csv"},
        "decision": {"min_history": "2d"}}))
    tracker = SiteTracker(inspector, IncidentSettings())
    results = replay(tracker, _frame(), datetime(2026, 1, 15, tzinfo=UTC), acks=acks)
    return tracker, results


def _events(results: list[dict[str, Any]]) -> list[tuple[str, str, dict[str, Any]]]:
    return [(r["inspection_time"], r["incident"]["event"], r["incident"]) for r in results
            if r.get("incident") and r["incident"]["event"]]


@pytest.fixture(scope="module")
def two_changes() -> tuple[SiteTracker, list[dict[str, Any]]]:
    return _replay()


@pytest.mark.slow
def test_a_second_change_opens_its_own_incident_and_the_first_resolves_on_its_own(
        two_changes) -> None:
    tracker, results = two_changes
    events = _events(results)
    opened = [inc for _, e, inc in events if e == "opened"]
    assert len(opened) == 2, [(t, e, inc["sensors"]) for t, e, inc in events]
    first, second = opened
    assert first["sensors"][0] == "s04" and second["sensors"][0] == "s09"
    assert first["id"] != second["id"]
    assert abs(datetime.fromisoformat(first["onset"]) - FIRST) <= timedelta(hours=3)
    assert abs(datetime.fromisoformat(second["onset"]) - SECOND) <= timedelta(hours=3)
    # every event names its incident; the first resolves on its own sensors after the
    # repair, while the second stays open
    resolved = [(t, inc) for t, e, inc in events if e == "resolved"]
    assert [inc["id"] for _, inc in resolved] == [first["id"]]
    assert resolved[0][1]["reason"] == "returned"
    assert datetime.fromisoformat(resolved[0][0]) >= REPAIRED + IncidentSettings().resolve_after
    assert [i.id for i in tracker.open_incidents] == [second["id"]]
    assert results[-1]["incident"]["id"] == second["id"]
    # while both were open the results listed both
    both = [r for r in results if len(r.get("open_incidents") or []) == 2]
    assert both and all({i["id"] for i in r["open_incidents"]} == {first["id"], second["id"]}
                        for r in both)
    # updates of the first never name the second change's sensor first
    assert all(inc["sensors"][0] == "s04" for _, e, inc in events
               if e == "updated" and inc["id"] == first["id"])


@pytest.mark.slow
def test_an_ack_resolves_the_incident_it_names(two_changes) -> None:
    _, results = two_changes
    opened = [inc for _, e, inc in _events(results) if e == "opened"]
    both = [r for r in results if len(r.get("open_incidents") or []) == 2]
    at = datetime.fromisoformat(both[2]["inspection_time"])
    tracker, acked = _replay({at: Ack(1, opened[1]["id"], "alice")})
    t, _, incident = next(x for x in _events(acked) if x[1] == "resolved")
    assert (datetime.fromisoformat(t), incident["id"], incident["reason"]) == (
        at, opened[1]["id"], "accepted")
    assert tracker.applied_acks == [] or tracker.applied_acks == [1]
    after = next(r for r in acked if r["inspection_time"] == t)
    assert after["incident"]["id"] == opened[1]["id"]
    assert all(i.id != opened[1]["id"] for i in tracker.open_incidents)


def test_acks_of_two_open_incidents_resolve_one_per_result() -> None:
    from monitor.compose import build_inspector

    inspector = build_inspector(validate_config({
        "site": "s", "source": {"type": "file", "path": "x.csv"}}))
    a, b = _incident(id="a"), _incident(id="b", sensors=["s09"], fired=["s09"])
    tracker = SiteTracker(inspector, IncidentSettings(), open_incidents=[a, b])
    acks = [Ack(1, "b", "alice"), Ack(2, "a", "bob"), Ack(3, "gone", "carol")]
    result = {"site": "s", "inspection_time": "2026-01-20T00:00:00+00:00",
              "status": "calibrating", "test": {}, "detection": None}
    _, event = tracker.observe(result, None, acks)
    assert (event, result["incident"]["id"], result["incident"]["reason"]) == (
        "resolved", "b", "accepted")
    assert tracker.applied_acks == [1, 3]  # bob's ack of "a" waits for the next result
    nxt = {**result, "inspection_time": "2026-01-20T01:00:00+00:00"}
    tracker.observe(nxt, None, [Ack(2, "a", "bob")])
    assert nxt["incident"]["id"] == "a" and tracker.open_incidents == []


def test_the_state_database_keeps_several_open_incidents(tmp_path) -> None:
    from monitor.compose import build_inspector
    from monitor.storage.acks import find_open_incident
    from monitor.storage.state import AgentState

    inspector = build_inspector(validate_config({
        "site": "s", "source": {"type": "file", "path": "x.csv"}}))
    a, b = _incident(id="a"), _incident(id="b", sensors=["s09"], fired=["s09"])
    tracker = SiteTracker(inspector, IncidentSettings(), open_incidents=[a, b])
    state = AgentState(tmp_path / "state.sqlite")
    result = {"fingerprint": "f", "status": "ok", "inspection_time": "t"}
    state.commit_inspection(1.0, result, incident=tracker.saved_incidents())
    assert [i["id"] for i in state.open_incident_list()] == ["a", "b"]
    assert state.open_incident()["id"] == "b"  # the newest, for one-incident readers
    assert find_open_incident(state, "a") == (None, a.to_state())
    restored = SiteTracker(inspector, IncidentSettings())
    restored.restore_incidents(state.saved_incidents())
    assert restored.open_incidents == [a, b]
    # one open incident is saved as before (a dict), none as no key
    state.commit_inspection(2.0, {**result, "fingerprint": "g"}, incident=a.to_state())
    assert state.saved_incidents() == a.to_state()
    state.commit_inspection(3.0, {**result, "fingerprint": "h"}, incident=None)
    assert state.open_incident_list() == [] and state.open_incident() is None
    state.close()


def test_the_webhook_keeps_an_alert_per_open_incident() -> None:
    a, b = _incident(id="a").to_dict(), _incident(id="b", sensors=["s09"]).to_dict()
    result = {"site": "s", "status": "firing", "inspection_time": "t",
              "incident": {**b, "event": "opened"}, "open_incidents": [a, b]}
    now = datetime(2026, 1, 20, tzinfo=UTC)
    body = alertmanager_body(result, now=now, ttl=timedelta(hours=2), severity="warning")
    assert [alert["labels"]["incident"] for alert in body] == ["b", "a"]
    assert body[1]["annotations"]["selected_sensors"] == "s04, s05, s06"
    assert all(alert["endsAt"] > alert["startsAt"] for alert in body)


@pytest.mark.integration
@pytest.mark.slow
def test_mqtt_and_influxdb_events_name_each_of_two_open_incidents(two_changes, mosquitto,
                                                                   influxd) -> None:
    """The replay's results through the real MQTT and InfluxDB sinks: every incident event
    reaches the alert topic and the ``mmdwatch_incident`` measurement under its own
    incident's id, while both are open."""
    import json

    from connectors.influxdb import InfluxSink
    from connectors.mqtt import MqttSink
    from tests.connectors.mqtt_helpers import Subscriber, wait_until

    _, results = two_changes
    events = [(r["incident"]["id"], r["incident"]["event"]) for r in results
              if r.get("incident") and r["incident"]["event"]]
    ids = {i for i, _ in events}
    assert len(ids) == 2
    influxd.create_database("mmdwatch")
    sub = Subscriber(mosquitto, "mmdwatch/sim/alert")
    mqtt = MqttSink({"type": "mqtt", "prefix": "mmdwatch", "connect_timeout_s": 3,
                     **mosquitto.client_kwargs()}, site="sim")
    influx = InfluxSink({"type": "influxdb", "url": influxd.url, "database": "mmdwatch"})
    try:
        for result in results:
            mqtt.send(result)
            influx.send(result)
        assert wait_until(lambda: len(sub.on("mmdwatch/sim/alert")) == len(events), 30)
    finally:
        mqtt.close()
        influx.close()
        sub.close()
    alerts = [json.loads(p)["incident"] for p, _ in sub.on("mmdwatch/sim/alert")]
    assert [(a["id"], a["event"]) for a in alerts] == events
    both = [json.loads(p) for p, _ in sub.on("mmdwatch/sim/alert")
            if len(json.loads(p).get("open_incidents") or []) == 2]
    assert both  # the second's opening names both open incidents
    out = influxd.query("SELECT count(state) FROM mmdwatch_incident GROUP BY incident_id, "
                        "event", db="mmdwatch")
    counted = {(s["tags"]["incident_id"], s["tags"]["event"]): s["values"][0][1]
               for s in out["results"][0]["series"]}
    expected: dict[tuple[str, str], int] = {}
    for key in events:
        expected[key] = expected.get(key, 0) + 1
    assert counted == expected
