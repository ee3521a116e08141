"""GapWatch on its own: holes judged against each sensor's cadence, quiet sensors and
sites against the inspection interval, one event per site and check."""
from __future__ import annotations

from typing import Any

from connectors.base import Reading, Sink
from connectors.mqtt.client import ReconnectBackoff
from monitor.service.gaps import GapSite, GapWatch
from monitor.service.metrics import Metrics

T0 = 1_700_000_000.0


class Events(Sink):
    """A sink that keeps the events it is given (the MQTT sink is tested on a broker)."""

    type = "events"

    def __init__(self) -> None:
        self.got: list[dict[str, Any]] = []

    def send(self, result: dict[str, Any]) -> None:
        raise AssertionError("results are not for this sink")

    def send_event(self, event: dict[str, Any]) -> None:
        self.got.append(event)


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def _watch(clock: str = "data", interval_s: float = 3600.0, sessions=lambda: 1,
           wall: Clock | None = None, mono: Clock | None = None, settle_s: float = 0.0):
    sink, metrics = Events(), Metrics()
    watch = GapWatch([GapSite("net", interval_s, clock)], [sink], metrics,
                     sessions=sessions, wall=wall or Clock(T0 + 10 * 86400),
                     monotonic=mono or Clock(0.0), settle_s=settle_s)
    return watch, sink, metrics


def _readings(sensors, start, end, step=300.0):
    t, out = start, []
    while t < end:
        out += [Reading(s, t, 1.0) for s in sensors]
        t += step
    return out


def test_a_hole_after_a_reconnect_is_one_event_with_its_span(caplog):
    session = [1]
    watch, sink, metrics = _watch(sessions=lambda: session[0])
    watch.observe(_readings(["a", "b"], T0, T0 + 3600))
    assert watch.check() == []
    session[0] = 2  # the source connected again
    watch.observe(_readings(["a", "b"], T0 + 7200, T0 + 9000))
    [event] = watch.check()
    assert event == {**event, "event": "data_gap", "kind": "hole", "site": "net",
                     "sensors": ["a", "b"], "after_reconnect": True,
                     "missing_readings": 2 * 12, "holes": 1}
    assert event["start"] == "2023-11-14T23:08:20Z"  # the last reading before: T0 + 3300
    assert event["end"] == "2023-11-15T00:13:20Z"  # the first after: T0 + 7200
    assert sink.got == [event]
    assert metrics.snapshot()["data_gaps"] == {"hole": 1}
    assert "data gap at site net" in caplog.text and "after a reconnect" in caplog.text
    assert "without readings from 2023-11-14T23:08:20Z to 2023-11-15T00:13:20Z" in caplog.text


def test_one_missing_reading_shows_and_duplicates_do_not():
    watch, _, _ = _watch()
    batch = _readings(["a"], T0, T0 + 3000)
    watch.observe(batch)
    watch.observe(batch[-3:])  # redelivered after a reconnect: not a hole
    assert watch.check() == []
    watch.observe([Reading("a", T0 + 3000 + 300, 1.0)])  # T0 + 3000 never came
    [event] = watch.check()
    assert event["missing_readings"] == 1 and not event["after_reconnect"]
    assert event["holes"] == 1


def test_holes_at_different_times_in_one_event_are_counted_not_joined(caplog):
    """A replayed file whose sensor skips readings now and then: the holes that settle in
    one check are one event, and the log does not say the sensor was silent from the
    first to the last."""
    watch, _, _ = _watch()
    batch = _readings(["a"], T0, T0 + 6000)
    watch.observe([r for r in batch if r.time not in (T0 + 1500, T0 + 4500)])
    [event] = watch.check()
    assert (event["holes"], event["missing_readings"]) == (2, 2)
    assert "2 holes between" in caplog.text and "without readings from" not in caplog.text


def test_a_logger_that_habitually_skips_a_reading_gives_holes_only_while_learning():
    """One-second readings that skip a second in one step of 15 (SKAB's logger: about 6 %):
    once 50 steps are known, a skip is the sensor's habit, not a hole; a minute without
    readings still is. A regular sensor's one lost reading in 200 steps still shows."""
    watch, _, _ = _watch(interval_s=5.0)
    t, batch = T0, []
    for k in range(600):
        t += 2.0 if k % 15 == 14 else 1.0
        batch.append(Reading("a", t, 1.0))
    watch.observe(batch)
    [early] = watch.check()  # the skips among the first 50 steps
    assert early["holes"] == 3
    watch.observe([Reading("a", t + 1.0 + k, 1.0) for k in range(100) if k != 50])
    assert watch.check() == []  # another skip: habitual
    watch.observe([Reading("a", t + 160.0, 1.0)])  # a minute lost
    [minute] = watch.check()
    assert minute["missing_readings"] == 59 and minute["holes"] == 1

    outages, _, _ = _watch()  # an hour lost every 50 readings: each a hole, however often
    t = T0
    for k in range(6):
        outages.observe(_readings(["c"], t, t + 50 * 300))
        t += 50 * 300 + 3600
    [event] = outages.check()
    assert event["holes"] == 5 and event["missing_readings"] == 5 * 12

    regular, _, _ = _watch()
    regular.observe(_readings(["b"], T0, T0 + 300 * 200))
    assert regular.check() == []
    regular.observe([Reading("b", T0 + 300 * 201, 1.0)])  # T0 + 300 * 200 never came
    [lost] = regular.check()
    assert lost["missing_readings"] == 1


def test_readings_that_come_late_fill_the_hole_before_it_is_published():
    mono = Clock(0.0)
    watch, sink, _ = _watch(mono=mono, settle_s=5.0)
    watch.observe(_readings(["a"], T0, T0 + 3000))
    # after a reconnect: what publishers sent since comes before the broker's old queue
    watch.observe(_readings(["a"], T0 + 6000, T0 + 6600))
    watch.observe(_readings(["a"], T0 + 3000, T0 + 4500))  # the queue: 3000..4200
    mono.t += 4.9
    assert watch.check() == []  # still settling
    mono.t += 0.2
    [event] = watch.check()  # only 4500..5700 never came
    assert (event["start"], event["end"], event["missing_readings"]) == (
        "2023-11-14T23:23:20Z", "2023-11-14T23:53:20Z", 5)
    watch.observe(_readings(["a"], T0 + 6600, T0 + 7200))
    watch.observe(_readings(["a"], T0, T0 + 7200))  # all again: duplicates only
    mono.t += 10
    assert watch.check() == [] and sink.got == [event]


def test_a_sensor_quiet_for_more_than_two_intervals_on_the_data_clock():
    watch, _sink, _ = _watch(clock="data")
    watch.observe(_readings(["a", "b"], T0, T0 + 3600))
    watch.observe(_readings(["a"], T0 + 3600, T0 + 3600 + 2 * 3600))  # b silent 2 h: not yet
    assert watch.check() == []
    watch.observe(_readings(["a"], T0 + 3 * 3600, T0 + 3 * 3600 + 900))
    [event] = watch.check()
    assert (event["kind"], event["sensors"], event["end"]) == ("quiet", ["b"], None)
    assert watch.check() == []  # said once per silence
    watch.observe(_readings(["b"], T0 + 4 * 3600, T0 + 4 * 3600 + 600))
    [closed] = watch.check()  # b is back: the closed span comes as a hole
    assert (closed["kind"], closed["sensors"]) == ("hole", ["b"])


def test_a_whole_site_quiet_on_the_wall_clock():
    wall, mono = Clock(T0 + 3600), Clock(100.0)
    watch, _sink, metrics = _watch(clock="wall", interval_s=60.0, wall=wall, mono=mono)
    watch.observe(_readings(["a", "b"], T0, T0 + 3600, step=10))
    mono.t += 119
    assert watch.check() == []
    mono.t += 2
    [event] = watch.check()
    assert event["kind"] == "site_quiet" and event["quiet_for_s"] == 121.0
    assert watch.check() == []
    assert metrics.snapshot()["data_gaps"] == {"site_quiet": 1}


def test_backoff_stays_short_for_the_first_minute_then_grows():
    clock = Clock(0.0)
    backoff = ReconnectBackoff(1.0, 60.0, 60.0, rng=lambda: 0.999, clock=clock)
    fast = []
    while clock.t < 60:
        fast.append(backoff.next_delay())
        clock.t += fast[-1]
    assert max(fast) <= 2.0 and min(fast) >= 1.0
    slow = [backoff.next_delay() for _ in range(8)]
    assert slow == sorted(slow) and slow[0] <= 4.0 and slow[-1] <= 60.0 and slow[-1] > 30
    backoff.reset()
    assert backoff.next_delay() <= 2.0
    low = ReconnectBackoff(1.0, 60.0, rng=lambda: 0.0, clock=clock)
    assert low.next_delay() == 1.0  # never under reconnect_min_s
