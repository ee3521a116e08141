"""The retrospective decision calibrated on the source's own history (issue 18, build item
3, last paragraph): the block statistic at earlier daily times of the source, the decision
on max(block p-value, history p-value), and the block p-value alone where the source holds
no history."""
from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pandas as pd
import pytest

from monitor.config import validate_config
from monitor.decision.source_history import (
    SOURCE_HISTORY,
    SOURCE_STATISTIC,
    history_needed,
    history_times,
    source_history,
)
from monitor.decision.tracker import cached_reader
from monitor.demo.simulate import Scenario, simulate
from monitor.windows import WindowSpec, build_windows

T = datetime(2026, 2, 9, tzinfo=UTC)  # 35 days after the data's start: 22 history times
START = "2026-01-05T00:00:00Z"


def _config(**decision: Any) -> dict[str, Any]:
    return {"site": "sim", "profile": "retrospective",
            "source": {"type": "file", "path": "x.csv"}, "decision": decision}


def _inspector(**decision: Any) -> Any:
    from monitor.compose import build_inspector

    return build_inspector(validate_config(_config(**decision)))


def _network(changes: dict[str, float], days: int = 42, start: str = START) -> pd.DataFrame:
    frame, _ = simulate(Scenario(n_sensors=12, start=start, days=days, step="30min",
                                 change_at=T.isoformat(), changes=changes, seed=3))
    return frame


@pytest.fixture(scope="module")
def unchanged() -> pd.DataFrame:
    return _network({})


def test_history_times_end_their_after_windows_by_t() -> None:
    spec = WindowSpec()
    times = history_times(T, spec, timedelta(days=28))
    assert len(times) == 28 and times == sorted(times, reverse=True)
    assert max(spec.bounds(x)[2] for x in times) == pd.Timestamp(T)
    assert [x.hour for x in times] == [0] * 28  # whole days before t


def test_history_needed_lets_the_conformal_p_value_reach_alpha() -> None:
    for alpha in (0.05, 0.01, 0.1, 0.03):
        n = history_needed(alpha)
        assert 1 / (n + 1) < alpha <= 1 / n


def test_an_unchanged_source_with_history_decides_on_both_p_values(unchanged) -> None:
    result = _inspector().run(T, cached_reader(unchanged)).result
    d = result["detection"]
    assert result["status"] == "ok"
    assert result["test"]["decision"] == SOURCE_HISTORY
    assert d["statistic"] == SOURCE_STATISTIC and d["level"] == 0.05
    assert d["history_n"] == 22 and d["history_needed"] == 20
    assert d["history_span"] == ["2026-01-12T00:00:00Z", "2026-02-02T00:00:00Z"]
    # the intersection-union test: the larger of the two p-values decides
    assert result["test"]["p_value"] == pytest.approx(
        max(result["engine"]["p_value"], d["p_value"]), abs=1e-8)


def test_a_changed_source_fires_naming_the_changed_sensors() -> None:
    frame = _network({"s04": -1.5, "s06": -1.5})
    result = _inspector().run(T, cached_reader(frame)).result
    d = result["detection"]
    assert result["status"] == "firing", result["summary"]
    assert d["p_value"] < 0.05 and result["engine"]["p_value"] < 0.05
    assert d["value"] > d["threshold"]
    assert {"s04", "s06"} <= set(result["selected_sensors"])


def test_a_source_without_history_keeps_the_block_p_value(unchanged) -> None:
    """The shared L-Town case: the source holds the two windows and nothing before."""
    windows_only = unchanged[unchanged["time"] >= pd.Timestamp(T) - pd.Timedelta(days=7)]
    result = _inspector().run(T, cached_reader(windows_only)).result
    assert "decision" not in result["test"]
    assert result["detection"]["history_n"] == 0 and result["detection"]["p_value"] is None
    assert result["detection"]["history_span"] is None
    assert result["test"]["p_value"] == result["engine"]["p_value"]


def test_the_history_reads_nothing_after_t_and_skips_other_sensor_sets(unchanged) -> None:
    """A sensor that joined the source on day 20: the earlier times, whose windows lack
    it, are not comparable and stay out."""
    joined = pd.Timestamp("2026-01-25T00:00:00Z")
    frame = unchanged[(unchanged["sensor"] != "s05") | (unchanged["time"] >= joined)]
    spec = WindowSpec()
    reads: list[tuple[pd.Timestamp, pd.Timestamp]] = []

    def read(start: pd.Timestamp, end: pd.Timestamp) -> pd.DataFrame:
        reads.append((start, end))
        return frame[(frame["time"] >= start) & (frame["time"] < end)]

    w = build_windows(read(*spec.bounds(T)[::2]), T, spec)
    from monitor.compose import build_inspector

    statistics = build_inspector(validate_config(_config())).engine.make_selector()
    hist = source_history(T, w, spec, read, statistics.test_statistics, timedelta(days=28))
    assert reads[-1][1] == pd.Timestamp(T)
    # the first time whose before window holds s05 in windows.min_coverage (half) of it
    assert min(hist.times) == datetime(2026, 1, 29, tzinfo=UTC)
    assert hist.values.size == len(hist.times) < 22
    assert np.isfinite(hist.values).all() and np.isfinite(hist.value)


def test_source_history_off_decides_on_the_block_p_value_alone(unchanged) -> None:
    on = validate_config(_config())
    off = validate_config(_config(source_history=False))
    assert "decision" not in off.inspection_settings()  # engine-rule fingerprints as before
    assert on.inspection_settings()["decision"] == {"source_history": True, "history": "4w"}
    result = _inspector(source_history=False).run(T, cached_reader(unchanged)).result
    assert result.get("detection") is None and "decision" not in result["test"]


def test_a_failing_history_leaves_the_decision_to_the_block_p_value(unchanged, monkeypatch,
                                                                     caplog) -> None:
    import monitor.decision.source_history as module

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("out of memory")

    monkeypatch.setattr(module, "source_history", broken)
    with caplog.at_level(logging.ERROR, logger="monitor.decision.engine_rule"):
        result = _inspector().run(T, cached_reader(unchanged)).result
    assert result["status"] == "ok" and result.get("detection") is None
    assert "block p-value decides alone" in caplog.text


def test_jobs_and_batches_carry_the_history_and_give_the_direct_result(unchanged) -> None:
    """A worker gets the earlier weeks with its frame (InspectionJob, InspectionBatch),
    so a cluster calibrates on the same history as one process."""
    import pickle

    from monitor.compose import build_inspector
    from monitor.fleet.jobs import (
        InspectionBatch,
        InspectionJob,
        InspectorSettings,
        run_batch,
        run_job,
    )

    inspector = build_inspector(validate_config(
        {**_config(), "engine": {"params": {"n_splits": 3}}}))
    settings = InspectorSettings.of(inspector)
    read = cached_reader(unchanged)
    times = [T - timedelta(days=1), T]
    # the oldest of 28 daily times is t - 7d - 27d; its before window starts 7 days earlier;
    # the span ends 4 bins past the after window (a hole told from the data's end)
    ahead = 4 * pd.Timedelta(inspector.spec.resample)
    assert settings.read_span(T) == (pd.Timestamp(T) - pd.Timedelta(days=41),
                                     pd.Timestamp(T) + pd.Timedelta(days=7) + ahead)
    direct = [inspector.run(t, read).result for t in times]
    shipped = [run_job(pickle.loads(pickle.dumps(InspectionJob.with_windows(settings, t, read))))
               for t in times]
    batched = run_batch(pickle.loads(pickle.dumps(
        InspectionBatch.with_windows(settings, times, read))))
    for a, b, c in zip(direct, shipped, batched, strict=True):
        assert a["detection"]["history_n"] >= 20
        for other in (b, c):
            assert other["fingerprint"] == a["fingerprint"]
            assert other["detection"] == a["detection"]
            assert other["test"] == a["test"] or other["test"]["p_value"] == pytest.approx(
                a["test"]["p_value"], abs=1e-6)


def test_consecutive_times_build_each_history_time_once(unchanged, monkeypatch) -> None:
    """run_many (backfill, batches) shares the history's statistics between its times:
    three consecutive days build 28 + 1 + 1 history windows, not 3 x 28, and give the
    results of one run per time."""
    import monitor.windows as windows_module

    inspector = _inspector()
    read = cached_reader(unchanged)
    times = [T - timedelta(days=2), T - timedelta(days=1), T]
    alone = [inspector.run(t, read).result for t in times]
    built: list[datetime] = []
    real = windows_module.build_windows

    def counting(frame: pd.DataFrame, t: datetime, spec: WindowSpec) -> Any:
        built.append(t)
        return real(frame, t, spec)

    monkeypatch.setattr(windows_module, "build_windows", counting)
    together = [o.result for o in inspector.run_many(times, read)]
    history_builds = [x for x in built if x not in times]
    assert len(history_builds) == len(set(history_builds)) == 28 + 1 + 1 - 8  # 8 precede the data
    for a, b in zip(alone, together, strict=True):
        assert b["detection"] == a["detection"] and b["test"] == a["test"]
