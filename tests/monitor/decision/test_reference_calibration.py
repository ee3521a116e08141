"""An open incident's reference calibrated on the level history without the values that
held the incident's change (issue 29; docs/decision.md, "A change inside an open
incident": "The reference's own calibration")."""
from __future__ import annotations

from datetime import timedelta

import numpy as np

from engine.live.calibration import TailFit
from monitor.decision.incidents import Incident
from tests.monitor.decision.test_calibrating_fence import T0, _tracker


def test_an_open_incident_reference_calibrates_without_its_change_own_values() -> None:
    """The quiet values whose after window held an open incident's change (they joined
    before its first firing) are left out of its reference's calibration, not out of the
    level history; where too few values are left, there is none (the level part's
    threshold stands). docs/decision.md, "The reference's own calibration"."""
    tracker = _tracker({"before": "5min", "after": "30s", "resample": "2s"}, "5s")
    step, after = timedelta(seconds=5), tracker.inspector.spec.after
    rng = np.random.default_rng(1)
    times = [T0 + k * step for k in range(80)]
    tracker.history = {th: (float(v), None) for th, v in
                       zip(times, rng.gamma(2.0, 2.0, len(times)), strict=True)}
    baseline, started = times[70], times[76]
    for th, v in zip(times[71:76], (30.0, 60.0, 120.0, 200.0, 300.0), strict=True):
        tracker.history[th] = (v, None)  # the change growing in the after window
    tracker.open_incidents = [Incident(
        id="inc", site="sim", state="open", started=started.isoformat(),
        last_firing=started.isoformat(), baseline=baseline.isoformat())]
    t = started + after + step
    level = tracker.history_at(t)[:, 0]
    fit = tracker._reference_fits(t)["inc"]
    # out: the after windows that ended past the baseline and began by the first firing
    held = [th for th in times if baseline - after < th <= started]
    assert fit is not None and len(held) == 12
    assert fit.history.size == level.size - len(held)
    assert fit.history.max() < 30.0 <= level.max()
    share = 1 / 720
    assert fit.threshold(share) < TailFit.of(level).threshold(share)
    # too few values left: none
    tracker.history = {th: tracker.history[th] for th in times[50:]}
    assert tracker._reference_fits(t)["inc"] is None
