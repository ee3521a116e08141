"""The data clock cannot be moved by one reading (issue 19, item 1): it is the lower median
of the sensors' newest times; a reading far ahead of it, or one without a time on a
``clock: data`` site, is held back, counted and logged; pruning keeps what it needs."""
from __future__ import annotations

import logging
from datetime import UTC, datetime

from connectors.base import Reading
from connectors.mqtt.payload import parse_payload
from monitor.compose import build_agent, clock_policy
from monitor.config import validate_config
from monitor.service.metrics import Metrics
from monitor.storage.store import (
    AHEAD_OF_DATA_CLOCK,
    NO_TIME_ON_DATA_CLOCK,
    ClockPolicy,
    ReadingStore,
    robust_clock,
)

T0 = datetime(2018, 3, 1, tzinfo=UTC).timestamp()
HOUR = 3600.0
SENSORS = ("n1", "n2", "n3", "n4", "n5")
EIGHT_YEARS = 8 * 365 * 86400.0


def _hourly(hours: int, sensors=SENSORS, start: float = T0) -> list[Reading]:
    return [Reading(s, start + HOUR * k, 1.0 + k % 7) for k in range(hours) for s in sensors]


def test_robust_clock_is_the_lower_median_of_the_newest_times():
    assert robust_clock([]) is None
    assert robust_clock([5.0]) == 5.0
    assert robust_clock([1.0, 9e9]) == 1.0  # of two, the older: one cannot lead
    assert robust_clock([3.0, 1.0, 2.0, 9e9]) == 2.0


def test_the_clock_ignores_one_far_future_reading(tmp_path):
    store = ReadingStore(tmp_path / "r.sqlite")  # no policy: the reading is stored
    store.add(_hourly(24))
    assert store.last_time_s() == T0 + 23 * HOUR
    store.add([Reading("n4", T0 + EIGHT_YEARS, 30.0)])
    assert store.count() == 24 * 5 + 1
    assert store.last_time_s() == T0 + 23 * HOUR  # the median of the newest did not move
    store.close()
    reopened = ReadingStore(tmp_path / "r.sqlite")  # the same clock from the database
    assert reopened.last_time_s() == T0 + 23 * HOUR
    reopened.close()


def test_a_far_ahead_reading_is_held_back_counted_and_logged(tmp_path, caplog):
    metrics = Metrics()
    store = ReadingStore(tmp_path / "r.sqlite", metrics)
    store.set_clock_policy(ClockPolicy(max_ahead_s=4 * HOUR))
    store.add(_hourly(24))
    late = parse_payload(b'{"sensor": "n4", "time": "2026-01-01T00:00:00Z", "value": 30}',
                         "sensors/l-town/n4", 0.0).readings
    near = Reading("n2", T0 + 26 * HOUR, 2.0)  # 3 h ahead: inside the bound
    with caplog.at_level(logging.WARNING, logger="monitor.storage.store"):
        assert store.add(late + [near]) == 1
    assert metrics.snapshot()["readings_rejected"] == {AHEAD_OF_DATA_CLOCK: 1}
    assert store.fetch(T0 + 24 * HOUR, T0 + EIGHT_YEARS * 2) == [("n2", T0 + 26 * HOUR, 2.0)]
    assert store.last_time_s() == T0 + 23 * HOUR
    line = " ".join(r.getMessage() for r in caplog.records)
    assert "'n4'" in line and "sensors/l-town/n4" in line and AHEAD_OF_DATA_CLOCK in line


def test_a_whole_network_back_from_a_gap_moves_the_clock_at_once(tmp_path):
    """Held back is judged against the clock with the batch's own claims: when most
    sensors come back together from beyond the bound, the clock moves with them."""
    metrics = Metrics()
    store = ReadingStore(tmp_path / "r.sqlite", metrics)
    store.set_clock_policy(ClockPolicy(max_ahead_s=4 * HOUR))
    store.add(_hourly(24))
    back = T0 + 72 * HOUR
    assert store.add(_hourly(3, start=back)) == 15
    assert store.last_time_s() == back + 2 * HOUR
    assert not metrics.snapshot()["readings_rejected"]


def test_a_reading_without_time_is_refused_on_a_data_clock_only(tmp_path):
    payload = b'{"sensor": "n4", "value": 30}'
    received = parse_payload(payload, "sensors/l-town/n4", T0 + 24 * HOUR).readings
    assert received[0].received
    metrics = Metrics()
    data = ReadingStore(tmp_path / "d.sqlite", metrics)
    data.set_clock_policy(ClockPolicy(max_ahead_s=4 * HOUR, refuse_received=True))
    data.add(_hourly(24))
    assert data.add(received) == 0
    assert metrics.snapshot()["readings_rejected"] == {NO_TIME_ON_DATA_CLOCK: 1}
    wall = ReadingStore(tmp_path / "w.sqlite")
    wall.set_clock_policy(ClockPolicy(max_ahead_s=4 * HOUR, refuse_received=False))
    wall.add(_hourly(24))
    assert wall.add(received) == 1  # on a wall clock the receive time is the time


def _config(tmp_path, **schedule):
    return validate_config({
        "site": "t", "state_dir": str(tmp_path / "state"),
        "source": {"type": "file", "path": str(tmp_path / "unused.csv")},
        "sinks": [], "profile": "retrospective",
        "windows": {"before": "2d", "after": "1d", "normalise": "before"},
        "schedule": {"every": "1d", "clock": "data", **schedule},
        # the store keeps the windows' span alone (4 days), not the earlier days a
        # source history would need
        "decision": {"source_history": False},
    }, env={})


def test_the_bound_comes_from_the_schedule(tmp_path):
    daily = clock_policy(_config(tmp_path))
    assert daily.max_ahead_s == 4 * 86400 and daily.refuse_received
    hourly = clock_policy(_config(tmp_path, every="1h"))  # the 1-day after window is longer
    assert hourly.max_ahead_s == 86400
    assert not clock_policy(_config(tmp_path, clock="wall")).refuse_received


def test_prune_keeps_what_the_robust_clock_needs(tmp_path):
    agent = build_agent(_config(tmp_path))
    try:
        agent.deliver(_hourly(24 * 10))  # to day 9, 23:00
        agent.deliver([Reading("n4", T0 + 12 * 86400, 5.0)])  # inside the 4-day bound
        agent.deliver([Reading("z", T0, 1.0), Reading("z", T0 + 3600, 1.0)])  # went quiet
        clock = agent.store.last_time_s()
        assert clock == T0 + 24 * 10 * HOUR - HOUR
        for t in agent.due():  # every due inspection done: only retention holds readings
            agent.state.commit_inspection(t.timestamp(), {"fingerprint": str(t),
                                                          "status": "ok"})
        agent._last_prune = float("-inf")
        agent._maybe_prune()
        retention = agent.retention.total_seconds()
        kept = agent.store.fetch(0, T0 + 86400 * 100, ["n1"])
        # behind the robust clock, not behind the one reading three days ahead of it
        assert kept[0][1] == clock - retention
        # the quiet sensor keeps its newest reading, so the clock reads the same reopened
        assert agent.store.fetch(0, T0 + 86400, ["z"]) == [("z", T0 + 3600, 1.0)]
    finally:
        agent.stop()
    store = ReadingStore(tmp_path / "state" / "readings.sqlite")
    assert store.last_time_s() == clock
    store.close()
