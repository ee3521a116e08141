"""Inspection times from the ``schedule`` section (APScheduler 3.11 triggers), and when
each one is due.

Inspection time t is *due* once the clock passes t + A (the after window is complete):
the wall clock for ``clock: wall``, the data watermark (newest reading) for
``clock: data``. The triggers are timezone-aware, so ``cron: "0 0 * * *"`` with
``timezone: Europe/Paris`` means local midnight, DST included. ``every:`` intervals are
aligned to the Unix epoch (``every: 1d`` = UTC midnights) unless ``start`` is given.

Cron expressions are matched against *local wall-clock* times by a UTC CronTrigger, and
each match is then placed in the zone: APScheduler 3.11's own zone arithmetic skips a day
after a DST change (e.g. Europe/Paris midnight on 2019-04-01; upstream issues #606, #529).
A local time that does not exist (spring forward) maps to the instant after the gap; an
ambiguous one (fall back) to its first occurrence.
"""
from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from monitor.config import ScheduleConfig


class InspectionPlan:
    """Enumerates inspection times; pure, no clock of its own."""

    def __init__(self, *, cron: str | None = None, every: timedelta | None = None,
                 timezone: str = "UTC", start: datetime | None = None) -> None:
        from zoneinfo import ZoneInfo

        from apscheduler.triggers.cron import CronTrigger
        from apscheduler.triggers.interval import IntervalTrigger

        tz = ZoneInfo(timezone)
        self.timezone = tz
        self.trigger: Any
        self._wall = every is None  # cron: trigger runs on local wall time written as UTC
        if every is not None:
            origin = start or datetime(1970, 1, 1, tzinfo=UTC)
            self.trigger = IntervalTrigger(seconds=every.total_seconds(), start_date=origin,
                                           timezone=tz)
        else:
            self.trigger = CronTrigger.from_crontab(cron or "0 0 * * *", timezone=UTC)

    def _to_wall(self, t: datetime) -> datetime:
        return t.astimezone(self.timezone).replace(tzinfo=UTC) if self._wall else t

    def _from_wall(self, t: datetime) -> datetime:
        if not self._wall:
            return t.astimezone(UTC)
        local = t.replace(tzinfo=self.timezone)
        utc = local.astimezone(UTC)
        if utc.astimezone(self.timezone).replace(tzinfo=None) != t.replace(tzinfo=None):
            # nonexistent local time: move to the first instant after the gap
            utc = local.replace(fold=1).astimezone(UTC)
            utc = max(utc, local.astimezone(UTC))
        return utc

    @classmethod
    def from_config(cls, cfg: ScheduleConfig) -> InspectionPlan:
        return cls(cron=cfg.cron, every=cfg.every, timezone=cfg.timezone, start=cfg.start)

    def times(self, after: datetime, *, inclusive: bool = True) -> Iterator[datetime]:
        """Inspection times from ``after`` on (UTC datetimes), in order, without end."""
        after = after.astimezone(UTC)
        now = self._to_wall(after if inclusive else after + timedelta(microseconds=1))
        last: datetime | None = None
        while True:
            wall = self.trigger.get_next_fire_time(None, now)
            if wall is None:
                return
            now = wall + timedelta(microseconds=1)
            t = self._from_wall(wall)
            if t < after or (last is not None and t <= last):
                continue  # a repeated wall hour (fall back) maps onto an earlier instant
            last = t
            yield t

    def between(self, start: datetime, end: datetime) -> list[datetime]:
        """Inspection times t with ``start <= t <= end``."""
        out = []
        for t in self.times(start):
            if t > end:
                break
            out.append(t)
        return out
