"""The spread channels on the agent's path (issue 28): a sensor whose readings turn noisy
at an unchanged mean is named, and its result says how its within-bin spread changed."""
from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pytest

from tests.monitor.decision.replay import replay_defaults


@pytest.mark.slow
def test_a_sensor_turned_noisy_is_named_by_its_spread() -> None:
    """The demo network at 10-minute readings (6 a bin), one sensor's readings ten times
    as noisy as its step-to-step spread from a Monday 06:00 on, its mean unchanged: the
    first firing result names it, by its spread channel (``z_spread`` above ``|z|``), and
    its change text and the summary state the within-bin spread, not the mean."""
    from monitor.demo.simulate import Scenario, simulate

    frame, _ = simulate(Scenario(days=16, change_at=None, seed=5))
    sensor = frame["sensor"] == "s03"
    step_sd = float(frame.loc[sensor, "value"].diff().std())
    noisy = sensor & (frame["time"] >= "2026-01-19T06:00:00Z")
    frame.loc[noisy, "value"] += np.random.default_rng(0).normal(0, 10 * step_sd,
                                                                 int(noisy.sum()))
    results = replay_defaults(frame, datetime(2026, 1, 12, tzinfo=UTC))
    firing = [r for r in results if r["status"] == "firing"]
    assert firing, "the noisy sensor was not seen"
    first = firing[0]
    assert first["inspection_time"] < "2026-01-19T06:00"  # its after window holds the change
    top = first["sensors"][0]
    assert top["sensor_id"] == "s03" and first["selected_sensors"] == ["s03"]
    assert top["z_spread"] > abs(top["z"])
    assert top["score"] == pytest.approx(top["z_spread"], abs=5e-5)  # z_spread: 4 digits
    assert top["change"].startswith("within-bin spread "), top
    assert "s03 within-bin spread" in first["summary"]
    before = [r for r in results if r["inspection_time"] < "2026-01-18T12:00"]
    assert not any(r["status"] == "firing" for r in before)
