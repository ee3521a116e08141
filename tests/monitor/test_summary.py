"""The result's one-line summary names the inspection time as precisely as the schedule
runs: to the minute for hourly and daily inspections, with seconds for a one-second
source's inspections every few seconds."""
from __future__ import annotations

from datetime import UTC, datetime

from monitor.summary import summarise


def test_an_hourly_inspection_is_named_to_the_minute():
    t = datetime(2026, 1, 12, 6, 0, tzinfo=UTC)
    assert summarise("ok", t, 12, [], 0.4, level=1e-3).startswith(
        "No change at 2026-01-12T06:00Z across 12 sensors")


def test_inspections_seconds_apart_are_told_apart():
    # SKAB's four options inspect every 5 s: twelve results a minute, each its own time
    texts = {summarise("calibrating", datetime(2026, 12, 7, 6, 2, s, tzinfo=UTC), 8, [],
                       None, error="calibrating") for s in range(0, 60, 5)}
    assert len(texts) == 12
    assert "Inspection at 2026-12-07T06:02:05Z: calibrating" in texts
    assert "Inspection at 2026-12-07T06:02Z: calibrating" in texts  # on the minute
    firing = summarise("firing", datetime(2026, 12, 7, 6, 7, 5, tzinfo=UTC), 8,
                       ["Volume Flow RateRMS"], 1e-6)
    assert firing.startswith("Change at 2026-12-07T06:07:05Z in 1 of 8 sensors")
