"""The cycle channels on the agent's path (issue 28): a sensor whose daily cycle flattens
around its mean is named, and its result says how its cycle changed."""
from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tests.monitor.decision.replay import replay_defaults


@pytest.mark.slow
def test_a_flattened_daily_cycle_is_named_by_its_cycle_channel() -> None:
    """The demo network, one sensor's daily cycle taken out around its mean from a Monday
    06:00 on (shape-dev's cycle kind at k = 0; the demo's noisier history does not let a
    halved cycle of one sensor reach the level): the first firing result names it, by
    its cycle channel (``|z_cycle|`` above ``|z|``), its change text states the cycle's
    factor, near 0, and nothing fires before the change."""
    from monitor.demo.simulate import Scenario, simulate

    frame, _ = simulate(Scenario(days=16, change_at=None, seed=5))
    sensor = frame["sensor"] == "s03"
    change = frame["time"] >= "2026-01-19T06:00:00Z"
    hours = frame.loc[sensor, "time"].dt.hour
    values = frame.loc[sensor & ~change, "value"]
    profile = values.groupby(hours[sensor & ~change]).mean() - values.mean()
    after = sensor & change
    frame.loc[after, "value"] -= profile.reindex(hours[after]).to_numpy()
    results = replay_defaults(frame, datetime(2026, 1, 12, tzinfo=UTC))
    firing = [r for r in results if r["status"] == "firing"]
    assert firing, "the flattened cycle was not seen"
    first = firing[0]
    assert first["inspection_time"] < "2026-01-20T06:00"  # within a day of the change
    top = first["sensors"][0]
    assert top["sensor_id"] == "s03" and "s03" in first["selected_sensors"], top
    assert abs(top["z_cycle"]) > abs(top["z"]), top
    assert top["change"].startswith("daily cycle x"), top
    factor = float(top["change"].removeprefix("daily cycle x").split()[0])
    assert abs(factor) < 0.25, top
    before = [r for r in results if r["inspection_time"] < "2026-01-18T12:00"]
    assert not any(r["status"] == "firing" for r in before)
