"""The paper's engine inside the live decision (issue 18, item 3): CV-aggregation's
validation power on the detector's residual windows, calibrated on the site's history,
combined with the level part by a weighted Bonferroni rule; the result says which part
fired and the sensors come from it."""
from __future__ import annotations

import logging
import sqlite3
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pandas as pd
import pytest

from engine.live.calibration import TailFit
from engine.live.engine_power import ENGINE_WEIGHT, combine
from monitor.config import validate_config
from monitor.decision.tracker import cached_reader, history_times
from monitor.demo.simulate import Scenario, simulate

CHANGE = datetime(2026, 1, 18, 6, tzinfo=UTC)


def _inspector(**decision: Any) -> Any:
    from monitor.compose import build_inspector

    return build_inspector(validate_config({
        "site": "sim", "source": {"type": "file", "path": "x.csv"},
        "decision": {"min_history": "2d", **decision}}))


@pytest.fixture(scope="module")
def cycle() -> pd.DataFrame:
    """The simulated network; from CHANGE on, s07's daily cycle is 2.5 times as wide
    around an unchanged daily mean (a changed demand pattern, a valve's new schedule)."""
    frame, _ = simulate(Scenario(days=20, step="15min", change_at=CHANGE.isoformat(),
                                 changes={}, seed=1))
    s07 = frame[(frame["sensor"] == "s07") & (frame["time"] < pd.Timestamp(CHANGE))]
    profile = s07.groupby(s07["time"].dt.hour)["value"].mean()
    after = (frame["sensor"] == "s07") & (frame["time"] >= pd.Timestamp(CHANGE))
    hours = frame.loc[after, "time"].dt.hour
    frame.loc[after, "value"] += 1.5 * (hours.map(profile).to_numpy() - profile.mean())
    return frame


def _history(n: int = 200) -> np.ndarray:
    """(n, 2): a level history far above this network's statistic (the level part stays
    quiet) and an engine history below the changed window's power."""
    return np.column_stack([np.linspace(500.0, 900.0, n), np.linspace(0.2, 1.2, n)])


def test_the_engine_part_fires_on_its_own_and_names_its_sensors(cycle) -> None:
    result = _inspector().run(CHANGE, cached_reader(cycle), _history()).result
    d = result["detection"]
    assert result["status"] == "firing", result["summary"]
    assert d["fired_by"] == "engine"
    part = d["engine"]
    assert part["statistic"] == "cv-aggregation-power" and part["weight"] == ENGINE_WEIGHT
    assert part["value"] > 1.2 and part["history_n"] == 200
    assert part["p_value"] < ENGINE_WEIGHT * d["level"] and part["threshold"] <= part["value"]
    assert d["level_p_value"] > d["level"]
    # the decision's p-value is the weighted Bonferroni combination of the two
    assert d["p_value"] == pytest.approx(part["p_value"] / ENGINE_WEIGHT, rel=1e-6, abs=1e-9)
    assert result["test"]["p_value"] == d["p_value"]
    # the sensors come from the engine: its pick first, ranked by its scores
    assert result["selected_sensors"][0] == "s07" == result["sensors"][0]["sensor_id"]
    scores = [s["score"] for s in result["sensors"]]
    assert scores == sorted(scores, reverse=True)
    assert all(s["engine_score"] == s["score"] for s in result["sensors"])
    assert result["engine"]["method"] == "cv-aggregation"
    assert result["summary"].startswith("Distribution change at 2026-01-18T06:00Z in ")
    assert "engine part)" in result["summary"]


def test_without_engine_history_the_level_part_decides_at_the_whole_level(cycle) -> None:
    history = _history()
    history[:, 1] = np.nan  # rows of a state file from before the engine part
    result = _inspector().run(CHANGE, cached_reader(cycle), history).result
    d = result["detection"]
    assert d["engine"]["history_n"] == 0 and d["engine"]["p_value"] is None
    assert d["p_value"] == d["level_p_value"]
    assert d["threshold"] == pytest.approx(TailFit.of(history[:, 0]).threshold(d["level"]),
                                           rel=1e-6)
    # a one-column history (the level statistic alone) reads the same
    alone = _inspector().run(CHANGE, cached_reader(cycle), history[:, 0]).result
    assert alone["detection"]["p_value"] == d["p_value"]


def test_engine_weight_zero_is_the_level_part_alone(cycle) -> None:
    result = _inspector(engine_weight=0).run(CHANGE, cached_reader(cycle), _history()).result
    d = result["detection"]
    assert d["engine"] is None and d["fired_by"] is None
    assert result["status"] == "ok" and result["engine"] is None
    assert all(s.get("engine_score") is None for s in result["sensors"])


def test_a_failing_engine_part_leaves_the_decision_to_the_level_part(cycle, caplog) -> None:
    from monitor.compose import build_inspector

    inspector = build_inspector(validate_config({
        "site": "sim", "source": {"type": "file", "path": "x.csv"},
        "engine": {"params": {"n_splits": 0}},  # CV-aggregation refuses this
        "decision": {"min_history": "2d"}}))
    with caplog.at_level(logging.WARNING, logger="monitor.decision.calibrated_rule"):
        result = inspector.run(CHANGE, cached_reader(cycle), _history()).result
    assert result["status"] == "ok" and result.get("error") is None
    assert result["detection"]["engine"]["value"] is None
    assert result["detection"]["p_value"] == result["detection"]["level_p_value"]
    assert "level part decides alone" in caplog.text


def test_the_history_holds_both_statistics_from_batched_fits(cycle) -> None:
    """A history value is (level, engine power); the history's fits are one batch and
    agree with the single fit of an inspection (float64)."""
    inspector = _inspector()
    read = cached_reader(cycle)
    times = history_times(inspector, CHANGE)[-6:]
    values = inspector.detect_many(times, read)
    assert all(v is not None and np.isfinite(v[1]) for v in values)
    single = inspector.detect(times[-1], read)
    assert single is not None and values[-1] is not None
    assert single[0] == values[-1][0]
    assert single[1] == pytest.approx(values[-1][1], rel=1e-12)


def test_history_fits_skip_the_p_value_that_only_a_firing_result_reports(cycle) -> None:
    """A history value keeps only the statistic, so its fits run without their own
    permutation p-value and without the gate (which only weights the scores); a result
    not yet known to fire needs the scores too, so its fits keep the gate (scope
    "decision"); a firing result's ``engine`` block needs both (scope "full"). All three
    give the same statistic, bit for bit, and the last two the same scores and
    candidates."""
    from engine.live.engine_power import validation_power

    inspector = _inspector()
    read = cached_reader(cycle)
    times = history_times(inspector, CHANGE)[-3:]
    decided = inspector.fit_engine_many(times, read)
    scored = inspector.fit_engine_many(times, read, scope="decision")
    history = inspector.fit_engine_many(times, read, scope="history")
    for t in times:
        full, part, bare = decided[t].engine_fit, scored[t].engine_fit, history[t].engine_fit
        assert np.isfinite(full.p_value) and np.isnan(bare.p_value) and np.isnan(part.p_value)
        assert validation_power(bare.details) == validation_power(full.details) == \
            validation_power(part.details)
        np.testing.assert_array_equal(bare.details["val_ratio"], full.details["val_ratio"])
        assert np.isnan(bare.details["gate_p_values"]).all()
        assert np.isfinite(full.details["gate_p_values"]).all()
        np.testing.assert_array_equal(part.details["gate_p_values"],
                                      full.details["gate_p_values"])
        np.testing.assert_array_equal(part.scores, full.scores)
        assert part.candidates == full.candidates
    values = inspector.detect_many(times, read)
    assert [v[1] for v in values] == [validation_power(decided[t].engine_fit.details)
                                      for t in times]


def test_the_combined_level_holds_on_a_null_streams_statistics() -> None:
    """Both statistics of a simulated network with no change, at every hour of ten days,
    put in random order (exchangeable, as calibration assumes): each value calibrated
    against the 120 before it and combined, as the agent does, the decision fires at most
    about as often as its level. (In time order the statistics of this network drift
    slowly, so the level part alone, as before the engine part, fires more often on a
    history of days: docs/decision.md, "Calibration history".)"""
    frame, _ = simulate(Scenario(days=18, step="15min", change_at=None, changes={}, seed=11))
    inspector = _inspector()
    first = datetime(2026, 1, 12, tzinfo=UTC)  # the data start + the before window
    times = [first + timedelta(hours=h) for h in range(10 * 24)]
    values = np.array(inspector.detect_many(times, cached_reader(frame)), dtype=float)
    assert np.isfinite(values).all()
    rng = np.random.default_rng(0)
    p = []
    for _ in range(20):
        order = values[rng.permutation(len(values))]
        for i in range(120, len(order)):
            level = TailFit.of(order[i - 120:i, 0]).pvalue(order[i, 0])
            engine = TailFit.of(order[i - 120:i, 1]).pvalue(order[i, 1])
            p.append(combine(level, engine, ENGINE_WEIGHT).p_value)
    fired = np.array(p)
    for level in (0.05, 0.01):
        rate = (fired < level).mean()
        assert rate <= level + 3 * np.sqrt(level * (1 - level) / fired.size), (level, rate)


def test_an_older_state_file_gains_the_engine_column(tmp_path) -> None:
    from monitor.storage.state import AgentState

    path = tmp_path / "state.sqlite"
    with sqlite3.connect(path) as old:  # the tables as versions before the engine part
        old.execute("CREATE TABLE history (inspection_time REAL PRIMARY KEY, "
                    "statistic REAL NOT NULL)")
        old.execute("INSERT INTO history VALUES (100.0, 4.5)")
        old.execute("CREATE TABLE site_history (site TEXT NOT NULL, inspection_time REAL "
                    "NOT NULL, statistic REAL NOT NULL, PRIMARY KEY (site, "
                    "inspection_time)) WITHOUT ROWID")
    state = AgentState(path)
    assert state.history(0.0) == [(100.0, (4.5, None))]
    state.add_history([(200.0, (5.0, 0.8)), (300.0, (6.0, float("nan")))])
    assert state.history(150.0) == [(200.0, (5.0, 0.8)), (300.0, (6.0, None))]
    state.close()


def test_engine_part_fits_on_every_core_unless_the_config_says_otherwise():
    """The engine part's batches run on every core by default (``n_jobs=-1``); an engine
    section's ``params: {n_jobs: 1}`` keeps them on one, and float64 always holds."""
    from monitor.compose import build_inspector
    from monitor.decision.calibrated_rule import engine_part_selector

    default = engine_part_selector(_inspector().engine)
    assert default.n_jobs == -1 and default.dtype == "float64"
    one = build_inspector(validate_config({
        "site": "sim", "source": {"type": "file", "path": "x.csv"},
        "engine": {"params": {"n_jobs": 1, "dtype": "float32"}}})).engine
    pinned = engine_part_selector(one)
    assert pinned.n_jobs == 1 and pinned.dtype == "float64"


def test_engine_statistics_of_an_earlier_version_are_dropped_and_the_level_kept(
        tmp_path, caplog) -> None:
    """A state written before the engine part's statistic changed (issue 31) holds values
    of another statistic: they are dropped on load, with a warning, and the level part's
    values stay; values this version computed are kept."""
    from monitor.fleet.sites import ENGINE_PART_META, current_engine_statistics
    from monitor.storage.state import AgentState

    state = AgentState(tmp_path / "state.sqlite")
    state.add_history([(100.0, (4.5, 0.7)), (200.0, (5.0, 0.8))])
    north = state.for_site("north")
    north.add_history([(100.0, (3.0, 0.5))])
    with caplog.at_level(logging.WARNING, logger="monitor.fleet.sites"):
        rows = current_engine_statistics(state, state.history(0.0), "v2")
    assert rows == [(100.0, (4.5, None)), (200.0, (5.0, None))]
    assert state.history(0.0) == rows  # dropped in the state too
    assert state.get_meta(ENGINE_PART_META) == "v2"
    assert "2 stored values were dropped" in caplog.text
    # each site's history is its own, checked when that site loads it
    assert north.history(0.0) == [(100.0, (3.0, 0.5))]
    assert current_engine_statistics(north, north.history(0.0), "v2") == [(100.0, (3.0, None))]
    # values this version computed stay
    state.add_history([(300.0, (6.0, 0.9))])
    caplog.clear()
    assert current_engine_statistics(state, state.history(0.0), "v2")[-1] == (300.0, (6.0, 0.9))
    assert state.history(250.0) == [(300.0, (6.0, 0.9))]
    # a state with no engine values yet is marked without a word
    fresh = AgentState(tmp_path / "fresh.sqlite")
    assert current_engine_statistics(fresh, [], "v2") == []
    assert fresh.get_meta(ENGINE_PART_META) == "v2" and not caplog.text
    for s in (state, fresh):
        s.close()


def test_level_statistics_of_an_earlier_version_are_dropped_for_a_new_history(
        tmp_path, caplog) -> None:
    """A state written before the level statistic gained its spread channels (issue 28)
    holds values of another statistic: all of them are dropped, with a warning, and the
    caller is told to compute the history again; each site's own history is checked when
    that site loads it; a fresh state is marked without a word."""
    from monitor.fleet.sites import LEVEL_STATISTIC_META, current_level_statistics
    from monitor.storage.state import AgentState

    state = AgentState(tmp_path / "state.sqlite")
    state.add_history([(100.0, (4.5, 0.7)), (200.0, (5.0, 0.8))])
    north = state.for_site("north")
    north.add_history([(100.0, (3.0, 0.5))])
    with caplog.at_level(logging.WARNING, logger="monitor.fleet.sites"):
        rows, reset = current_level_statistics(state, state.history(0.0), "v2")
    assert (rows, reset) == ([], True)
    assert state.history(0.0) == []
    assert state.get_meta(LEVEL_STATISTIC_META) == "v2"
    assert "2 stored values were dropped" in caplog.text
    assert north.history(0.0) == [(100.0, (3.0, 0.5))]
    assert current_level_statistics(north, north.history(0.0), "v2") == ([], True)
    # values this version computed stay
    state.add_history([(300.0, (6.0, 0.9))])
    caplog.clear()
    assert current_level_statistics(state, state.history(0.0), "v2") == (
        [(300.0, (6.0, 0.9))], False)
    fresh = AgentState(tmp_path / "fresh.sqlite")
    assert current_level_statistics(fresh, [], "v2") == ([], False)
    assert fresh.get_meta(LEVEL_STATISTIC_META) == "v2" and not caplog.text
    for s in (state, fresh):
        s.close()


def test_the_engine_part_abstains_on_rows_filled_across_a_gap() -> None:
    """More than ENGINE_MAX_FILLED of the readings its two samples hold (the before
    window's last engine rows, the after window) filled across a gap: no fit, and why.
    The before window's earlier rows do not count."""
    from types import SimpleNamespace
    from typing import cast

    from monitor.decision.calibrated_rule import (
        ENGINE_MAX_FILLED,
        EngineAbstains,
        engine_abstains,
    )
    from monitor.windows import Windows

    def windows(before: np.ndarray, after: np.ndarray) -> Windows:
        return cast(Windows, SimpleNamespace(filled=(before, after)))

    before, after = np.zeros((60, 4), dtype=bool), np.zeros((15, 4), dtype=bool)
    assert engine_abstains(cast(Windows, SimpleNamespace(filled=None)), 21) is None
    early = before.copy()
    early[:30] = True  # half the window, all before its last 21 rows
    assert engine_abstains(windows(early, after), 21) is None
    late = before.copy()
    late[-4:] = True  # 16 of 144 cells: 11 %
    why = engine_abstains(windows(late, after), 21)
    assert isinstance(why, EngineAbstains) and "11%" in str(why)
    assert 16 / 144 > ENGINE_MAX_FILLED > 12 / 144
    late[-4] = False  # 12 of 144: 8 %
    assert engine_abstains(windows(late, after), 21) is None
