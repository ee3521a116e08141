"""Inspection times (cron/every, time zones) and when each is due (wall/data clock)."""
from __future__ import annotations

from datetime import UTC, datetime, timedelta

from connectors.base import Reading
from monitor.compose import build_agent
from monitor.config import validate_config
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
    # t + 1d <= now: the five days from start up to yesterday
    assert due == [start + timedelta(days=k) for k in range(5)]
    agent.stop()
