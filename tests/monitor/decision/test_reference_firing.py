"""A change inside an open incident, seen against its frozen reference: the pure parts
(monitor.decision.reference_firing). The end-to-end case is in test_one_second_changes."""
from __future__ import annotations

import numpy as np
import pandas as pd

from engine.live.reference import Reference
from engine.live.residual_shift import DetectorSettings
from monitor.decision.reference_firing import mark_firing, reference_firing

SETTINGS = DetectorSettings(local_level_rows=21, daily_profile=False)
COLUMNS = list("abcdef")


def _readings(seed: int = 1) -> pd.DataFrame:
    idx = pd.date_range("2024-01-01", periods=400, freq="2s", tz="UTC")
    return pd.DataFrame(np.random.default_rng(seed).standard_normal((400, 6)), index=idx,
                        columns=COLUMNS)


def _ok_result(x: pd.DataFrame) -> dict:
    """An ``ok`` result dict of the calibrated rule, as the tracker observes it."""
    return {
        "inspection_time": "2024-01-01T00:10:00Z", "status": "ok",
        "test": {"p_value": 0.4},
        "detection": {"p_value": 0.4, "level": 0.001, "threshold": 30.0, "fired_by": None},
        "selected_sensors": [],
        "sensors": [{"sensor_id": c, "rank": i + 1, "score": 1.0 / (i + 1), "selected": False,
                     "raw_mean_before": 0.0, "raw_mean_after": float(x[c].mean())}
                    for i, c in enumerate(COLUMNS)],
        "summary": "No change"}


def test_a_new_step_names_its_sensor_and_noise_names_none() -> None:
    x = _readings()
    ref = Reference.fit(x.iloc[:150], after_rows=15, settings=SETTINGS)
    recent, after = x.iloc[279:300], x.iloc[300:315]
    assert reference_firing([("inc-1", ref)], recent, after, threshold=30.0) is None
    x.loc[x.index[300]:, "e"] -= 6.0
    firing = reference_firing([("inc-1", ref)], x.iloc[279:300], x.iloc[300:315], 30.0)
    assert firing is not None and firing.incident_id == "inc-1"
    assert list(firing.z) == ["e"] and firing.z["e"] < 0
    assert firing.value == firing.z["e"] ** 2


def test_the_strongest_of_several_references_names_the_firing() -> None:
    x = _readings()
    weak = Reference.fit(x.iloc[:150], after_rows=15, settings=SETTINGS)
    noisier = x.iloc[:150].copy()
    noisier["e"] *= 3.0  # a reference that learned a wider spread for e
    wide = Reference.fit(noisier, after_rows=15, settings=SETTINGS)
    x.loc[x.index[300]:, "e"] -= 6.0
    firing = reference_firing([("wide", wide), ("weak", weak)], x.iloc[279:300],
                              x.iloc[300:315], 30.0)
    assert firing is not None and firing.incident_id == "weak"


def test_a_return_to_the_reference_is_a_change_and_is_named_returning() -> None:
    """e away for 200 s, then back at its frozen level: the return is a change against
    the window before it (SKAB labels a valve's reopening as a change point)."""
    x = _readings()
    ref = Reference.fit(x.iloc[:150], after_rows=15, settings=SETTINGS)
    x.loc[x.index[200]:x.index[299], "e"] -= 6.0  # away until row 300, then back
    firing = reference_firing([("inc-1", ref)], x.iloc[279:300], x.iloc[300:315], 30.0)
    assert firing is not None and list(firing.z) == ["e"] and firing.z["e"] > 0
    assert firing.returning == ("e",)
    result = _ok_result(x)
    mark_firing(result, firing, p_value=2e-4, level_p_value=1.3e-4)
    assert result["detection"]["reference"]["returning"] == ["e"]
    assert result["summary"].startswith("Return at 2024-01-01T00:10Z in 1 of 6 sensors: e")
    assert "back at the open incident's reference" in result["summary"]


def test_a_move_back_that_is_not_yet_back_is_not_a_change() -> None:
    """e away by 12, then part of the way back (to 6 away, still beyond return_z): that
    counts 0, so a slow, wobbly return fires once, when it is back, not at each step."""
    x = _readings()
    ref = Reference.fit(x.iloc[:150], after_rows=15, settings=SETTINGS)
    x.loc[x.index[200]:x.index[299], "e"] -= 12.0
    x.loc[x.index[300]:, "e"] -= 6.0
    assert reference_firing([("inc-1", ref)], x.iloc[279:300], x.iloc[300:315], 30.0) is None
    x.loc[x.index[300]:, "e"] -= 12.0  # further away: a new change
    firing = reference_firing([("inc-1", ref)], x.iloc[279:300], x.iloc[300:315], 30.0)
    assert firing is not None and firing.returning == ()


def test_mark_firing_turns_the_result_into_a_named_firing() -> None:
    x = _readings()
    ref = Reference.fit(x.iloc[:150], after_rows=15, settings=SETTINGS)
    x.loc[x.index[300]:, "e"] -= 6.0
    firing = reference_firing([("inc-1", ref)], x.iloc[279:300], x.iloc[300:315], 30.0)
    assert firing is not None
    result = _ok_result(x)
    mark_firing(result, firing, p_value=2e-4, level_p_value=1.3e-4)
    assert result["status"] == "firing"
    block = result["detection"]
    assert block["fired_by"] == "reference" and block["p_value"] == 2e-4
    assert block["reference"]["incident"] == "inc-1"
    assert block["reference"]["level_p_value"] == 1.3e-4
    assert set(block["reference"]["z"]) == {"e"} and block["reference"]["returning"] == []
    assert result["test"]["p_value"] == 2e-4
    assert result["selected_sensors"] == ["e"]
    assert [s["sensor_id"] for s in result["sensors"]] == ["e", "a", "b", "c", "d", "f"]
    assert [s["rank"] for s in result["sensors"]] == [1, 2, 3, 4, 5, 6]
    assert [s["selected"] for s in result["sensors"]] == [True] + [False] * 5
    assert result["summary"].startswith("Change at 2024-01-01T00:10Z in 1 of 6 sensors: e")
    assert "against the open incident's reference" in result["summary"]


def _wandering(seed: int = 3) -> pd.DataFrame:
    """Sensor c quiet for the reference's window, then wandering slowly (a random walk
    of its 2-s means, as SKAB's accelerometers drift over an hour of normal operation)."""
    x = _readings(seed)
    rng = np.random.default_rng(seed + 10)
    x.loc[x.index[150]:, "c"] += np.cumsum(rng.standard_normal(250)) * 0.6
    return x


def test_wander_grown_since_the_reference_is_not_a_change_with_the_current_window() -> None:
    """The frozen spread alone names c at every window once its wander has grown (the
    false positives of issue 29's anomaly-free recording); the current before window's
    median-based spread, pooled with it, keeps c below the threshold."""
    x = _wandering()
    ref = Reference.fit(x.iloc[:150], after_rows=15, settings=SETTINGS)
    fired_frozen = fired_pooled = 0
    for end in range(315, 400, 3):
        before, after = x.iloc[end - 165:end - 15], x.iloc[end - 15:end]
        fired_frozen += reference_firing([("inc-1", ref)], before.iloc[-21:], after,
                                         30.0) is not None
        fired_pooled += reference_firing([("inc-1", ref)], before.iloc[-21:], after, 30.0,
                                         before=before) is not None
    assert fired_frozen >= 5 and fired_pooled <= 1


def test_the_incident_own_change_is_left_out_of_the_current_spread() -> None:
    """A first step of e inside the current before window: the comparisons that straddle
    it are that change, not noise. Left out (``changes``), a second step of e is seen as
    before; counted, the first step widens the spread."""
    x = _readings()
    ref = Reference.fit(x.iloc[:150], after_rows=15, settings=SETTINGS)
    x.loc[x.index[240]:, "e"] -= 6.0  # the incident's change, at row 240
    x.loc[x.index[300]:, "e"] -= 6.0  # a second step, inside the open incident
    before, after = x.iloc[150:300], x.iloc[300:315]
    change = (x.index[238], x.index[250])
    spread_out = ref.current_spread(before, 15, 21, change)
    spread_in = ref.current_spread(before, 15, 21)
    e = COLUMNS.index("e")
    assert spread_in[e] > 1.3 * spread_out[e]
    assert np.allclose(np.delete(spread_in, e), np.delete(spread_out, e), rtol=0.5)
    firing = reference_firing([("inc-1", ref)], before.iloc[-21:], after, 30.0,
                              before=before, changes={"inc-1": change})
    assert firing is not None and list(firing.z) == ["e"]


def test_too_few_comparisons_leave_the_frozen_spread_alone() -> None:
    """A current window too short for an after window's worth of comparisons (or one
    that is nearly all the incident's change) says nothing about the spread."""
    x = _readings()
    ref = Reference.fit(x.iloc[:150], after_rows=15, settings=SETTINGS)
    x.loc[x.index[300]:, "e"] -= 6.0
    recent, after = x.iloc[279:300], x.iloc[300:315]
    short = x.iloc[260:300]  # 40 rows: 5 comparisons of 21 + 15 rows
    assert np.isnan(ref.current_spread(short, 15, 21)).all()
    assert np.array_equal(ref.recent_z(recent, after, short), ref.recent_z(recent, after))
    everything = (x.index[0], x.index[-1])
    assert np.array_equal(ref.recent_z(recent, after, x.iloc[150:300], everything),
                          ref.recent_z(recent, after))


def test_a_return_is_back_within_the_spread_its_change_is_measured_in() -> None:
    """c's wander has grown since the reference (as SKAB's accelerometer after an hour),
    and after ten units away it comes back 0.79 off its frozen level: more than 3 frozen
    spreads (0.19 each), less than 3 of the pooled ones its ``z`` is measured in. Back,
    and named returning."""
    x = _readings()
    ref = Reference.fit(x.iloc[:150], after_rows=15, settings=SETTINGS)
    rows = np.arange(150, 400)
    x.loc[x.index[150]:, "c"] += 2.0 * np.sin(2 * np.pi * rows / 50)  # a wander grown since
    x.loc[x.index[260]:x.index[299], "c"] -= 10.0  # away for 80 s, then back
    before, recent, after = x.iloc[150:300], x.iloc[279:300], x.iloc[300:315]
    c = COLUMNS.index("c")
    assert not ref.returning(recent, after)[c]  # the frozen spread alone: not back
    assert ref.returning(recent, after, before)[c]
    # z**2 25 (six sensors: no principal direction removed, docs/decision.md "Few
    # sensors"; 41 when one was, which also moved the step onto d, z 3.3)
    firing = reference_firing([("inc-1", ref)], recent, after, 20.0, before=before)
    assert firing is not None and list(firing.z) == ["c"] and firing.returning == ("c",)


def test_each_incident_is_judged_at_its_own_threshold() -> None:
    """Thresholds by incident: the same step fires for the incident whose threshold it
    reaches, and the firing (and its result block) carries that threshold."""
    x = _readings()
    ref = Reference.fit(x.iloc[:150], after_rows=15, settings=SETTINGS)
    x.loc[x.index[300]:, "e"] -= 6.0
    recent, after = x.iloc[279:300], x.iloc[300:315]
    references = [("old", ref), ("new", ref)]
    assert reference_firing(references, recent, after, {"old": 1e6, "new": 1e6}) is None
    firing = reference_firing(references, recent, after, {"old": 1e6, "new": 30.0})
    assert firing is not None and firing.incident_id == "new" and firing.threshold == 30.0
    result = _ok_result(x)
    mark_firing(result, firing, p_value=2e-4, level_p_value=1.3e-4)
    assert result["detection"]["reference"]["threshold"] == 30.0


def test_the_incident_own_step_inside_the_recent_rows_is_not_a_new_change() -> None:
    """e stepped at row 290, inside the recent rows (279-299) the after window is compared
    with: its comparison holds the incident's own step again. e counts 0 there, while
    another sensor's step in the same window is seen."""
    x = _readings()
    ref = Reference.fit(x.iloc[:150], after_rows=15, settings=SETTINGS)
    x.loc[x.index[290]:, "e"] -= 12.0  # the incident's change
    before, recent, after = x.iloc[150:300], x.iloc[279:300], x.iloc[300:315]
    change = {"inc-1": (x.index[289], x.index[295])}
    own = {"inc-1": ["e"]}
    seen = reference_firing([("inc-1", ref)], recent, after, 30.0, before=before,
                            changes=change)
    assert seen is not None and list(seen.z) == ["e"]  # the own step, measured again
    assert reference_firing([("inc-1", ref)], recent, after, 30.0, before=before,
                            changes=change, own=own) is None
    x.loc[x.index[300]:, "b"] += 6.0  # a new change on another sensor
    after = x.iloc[300:315]
    firing = reference_firing([("inc-1", ref)], recent, after, 30.0, before=before,
                              changes=change, own=own)
    assert firing is not None and list(firing.z) == ["b"]
