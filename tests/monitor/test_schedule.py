"""Inspection times (cron/every, time zones) and when each is due (wall/data clock)."""
from __future__ import annotations

from datetime import UTC, datetime, timedelta

from connectors.base import Reading
from monitor.compose import build_agent
from monitor.config import validate_config
from monitor.fleet.sites import LATE_DATA_GRACE
from monitor.schedule import InspectionPlan


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def test_cron_in_a_zone_with_dst_does_not_skip_or_repeat_a_day():
    plan = InspectionPlan(cron="0 0 * * *", timezone="Europe/Paris")
    got = plan.between(utc(2019, 3, 29), utc(2019, 4, 2))
    # Paris midnight: UTC+1 before 31 March, UTC+2 after
    assert got == [utc(2019, 3, 29, 23), utc(2019, 3, 30, 23), utc(2019, 3, 31, 22),
                   utc(2019, 4, 1, 22)]
    autumn = plan.between(utc(2019, 10, 25), utc(2019, 10, 29))
    assert autumn == [utc(2019, 10, 25, 22), utc(2019, 10, 26, 22), utc(2019, 10, 27, 23),
                      utc(2019, 10, 28, 23)]


def test_every_is_aligned_to_the_epoch_or_to_start():
    plan = InspectionPlan(every=timedelta(hours=6))
    assert plan.between(utc(2019, 3, 4, 1), utc(2019, 3, 4, 19)) == [
        utc(2019, 3, 4, 6), utc(2019, 3, 4, 12), utc(2019, 3, 4, 18)]
    plan = InspectionPlan(every=timedelta(days=1), start=utc(2019, 3, 4, 13, 15))
    assert plan.between(utc(2019, 3, 5), utc(2019, 3, 7)) == [
        utc(2019, 3, 5, 13, 15), utc(2019, 3, 6, 13, 15)]


def _agent(tmp_path, **schedule):
    config = validate_config({
        "site": "t", "state_dir": str(tmp_path / "state"),
        "source": {"type": "file", "path": str(tmp_path / "unused.csv")},
        "sinks": [],
        "profile": "retrospective",
        "windows": {"before": "2d", "after": "1d", "normalise": "before"},
        "schedule": {"every": "1d", **schedule},
    }, env={})
    return build_agent(config)


def test_data_clock_due_times_follow_the_watermark_and_the_ledger(tmp_path):
    agent = _agent(tmp_path, clock="data")
    assert agent.due() == []  # no data, no anchor
    t0 = utc(2019, 3, 4).timestamp()
    agent.deliver([Reading("a", t0 + 3600 * k, 1.0) for k in range(24 * 4)])  # to 3-7 23:00
    # anchor = first reading + before = 3-6; t due once watermark >= t + 1d
    assert agent.due() == [utc(2019, 3, 6)]
    agent.deliver([Reading("a", t0 + 3600 * 24 * 6, 1.0)])  # watermark 3-10 00:00
    assert agent.due() == [utc(2019, 3, 6), utc(2019, 3, 7), utc(2019, 3, 8), utc(2019, 3, 9)]
    agent.state.commit_inspection(utc(2019, 3, 6).timestamp(), {"fingerprint": "f1",
                                                               "status": "ok"})
    assert agent.due()[0] == utc(2019, 3, 7)  # done ones are not repeated
    agent.stop()
    # a restart keeps the anchor and the ledger
    again = _agent(tmp_path, clock="data")
    assert again.due() == [utc(2019, 3, 7), utc(2019, 3, 8), utc(2019, 3, 9)]
    again.stop()


def test_wall_clock_catches_up_missed_inspections_oldest_first(tmp_path):
    start = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0) \
        - timedelta(days=5)
    agent = _agent(tmp_path, clock="wall", start=start.isoformat())
    due = agent.due()
    # t + 1d <= now: the five days from start up to yesterday (no data arrives: each is
    # due once LATE_DATA_GRACE has passed after its window, so before 01:00 UTC four)
    now = datetime.now(UTC)
    assert due == [start + timedelta(days=k) for k in range(5)
                   if start + timedelta(days=k + 1) + LATE_DATA_GRACE <= now]
    assert len(due) >= 4
    agent.stop()


def test_wall_clock_waits_for_the_data_to_cover_the_after_window(tmp_path):
    """On the wall clock the data may lag: a time whose after window the data does not
    reach yet is not due until it does, or until LATE_DATA_GRACE has passed."""
    hour = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    config = validate_config({
        "site": "t", "state_dir": str(tmp_path / "state"),
        "source": {"type": "file", "path": str(tmp_path / "unused.csv")},
        "sinks": [], "profile": "retrospective",
        "windows": {"before": "2h", "after": "1h", "resample": "10min"},
        "schedule": {"every": "1h", "clock": "wall",
                     "start": (hour - timedelta(hours=2)).isoformat()},
    }, env={})
    agent = build_agent(config)
    try:
        # data up to 70 minutes before the hour: the window [hour - 1h, hour) is not
        # covered, and its grace runs to hour + 1h
        first = (hour - timedelta(hours=5)).timestamp()
        stop = (hour - timedelta(minutes=70)).timestamp()
        agent.deliver([Reading(s, first + 300 * k, 1.0) for s in ("a", "b")
                       for k in range(int((stop - first) / 300) + 1)])
        assert agent.due() == [hour - timedelta(hours=2)]  # its grace has passed
        late = (hour - timedelta(minutes=5)).timestamp()
        agent.deliver([Reading(s, late, 1.0) for s in ("a", "b")])  # the data catches up
        assert agent.due() == [hour - timedelta(hours=2), hour - timedelta(hours=1)]
    finally:
        agent.stop()
