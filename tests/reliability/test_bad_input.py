"""Bad data through the real store, windows and engine: every pathology the issue lists,
handled as a result (ok/firing with data-quality notes, or error with a reason), never as
an exception."""
from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from connectors.base import Reading
from monitor.inspection import EngineSettings, Inspector
from monitor.service.metrics import Metrics
from monitor.storage.store import ReadingStore
from monitor.windows import WindowSpec

T = datetime(2024, 3, 8, tzinfo=UTC)
SPEC = WindowSpec(before=timedelta(days=4), after=timedelta(days=4))
START, END = T - SPEC.before, T + SPEC.after


def _inspector() -> Inspector:
    engine = EngineSettings(method="mmd-baseline", seed=0, device="cpu", block_rows=None)
    return Inspector("bad-input", SPEC, engine, {"test": "bad-input"})


def _grid(step_s: int = 600) -> np.ndarray:
    return np.arange(START.timestamp(), END.timestamp(), step_s)


@pytest.mark.slow
def test_every_pathology_in_one_network(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    metrics = Metrics()
    store = ReadingStore(tmp_path / "r.sqlite", metrics)
    times = _grid()
    good = [f"g{i}" for i in range(6)]
    batch: list[Reading] = []
    for k, s in enumerate(good):
        vals = 50 + 3 * np.sin(2 * np.pi * times / 86400 + k) + rng.normal(0, 0.3, times.size)
        batch += [Reading(s, float(t), float(v)) for t, v in zip(times, vals, strict=True)]
    batch += [Reading("constant", float(t), 42.0) for t in times]
    mid = T.timestamp() - 86400
    batch += [Reading("appears", float(t), 1.0 + rng.normal()) for t in times if t >= mid]
    batch += [Reading("vanishes", float(t), 1.0 + rng.normal()) for t in times if t < mid]
    bad = [Reading("g0", float(times[5]), math.nan), Reading("g1", float(times[6]), math.inf),
           Reading("g2", 4e9 + 1e10, 1.0), Reading("g3", math.nan, 1.0)]
    ancient = [Reading("g4", 86400.0, 7.0)]  # 1970: stored, far outside any window
    dupes = batch[:500]  # the same readings again: idempotent
    rng.shuffle(batch)  # out of order
    store.add(batch)
    store.add(bad + ancient + dupes)
    assert metrics.readings_rejected["non_finite_value"] == 2
    assert metrics.readings_rejected["time_out_of_range"] == 2
    assert store.count() == len(batch) + 1

    outcome = _inspector().run(T, store.read_window)
    r = outcome.result
    assert r["status"] in ("ok", "firing"), r.get("error")
    quality = r["data_quality"]
    assert {"appears", "vanishes"} <= set(quality["dropped_sensors"]), quality
    by_id = {s["sensor_id"]: s for s in r["sensors"]}
    assert "constant" in by_id and not by_id["constant"]["selected"]
    assert set(good) <= set(by_id)
    store.close()


def test_empty_window_is_an_error_result_with_a_reason(tmp_path: Path) -> None:
    store = ReadingStore(tmp_path / "r.sqlite")
    store.add([Reading("a", START.timestamp() - 10 * 86400, 1.0)])  # nothing in the windows
    r = _inspector().run(T, store.read_window).result
    assert r["status"] == "error" and "no readings" in r["error"], r.get("error")
    assert r["summary"].startswith("Inspection at")
    store.close()


def test_after_window_missing_is_an_incomplete_result(tmp_path: Path) -> None:
    """No reading after T: the after window lies wholly past the data, so no decision
    (issue 19: ``incomplete``, not ``error``; nothing is filled)."""
    store = ReadingStore(tmp_path / "r.sqlite")
    times = _grid()
    store.add([Reading(s, float(t), 1.0 + i) for i, s in enumerate("abc") for t in times
               if t < T.timestamp()])
    r = _inspector().run(T, store.read_window).result
    assert r["status"] == "incomplete" and "covered to 0%" in r["incomplete"], r
    assert r["data_quality"]["after_covered"] == 0.0 and "error" not in r
    store.close()


def test_ten_thousand_sensors_store_and_windows(tmp_path: Path) -> None:
    """10,000 sensors reach the windows intact (the engine at D = 10,000 is a benchmark
    question, not a unit test: see bench/)."""
    from monitor.windows import build_windows

    store = ReadingStore(tmp_path / "r.sqlite")
    sensors = [f"n{i:05d}" for i in range(10_000)]
    hours = np.arange(START.timestamp(), END.timestamp(), 3 * 3600)
    for t in hours:
        store.add([Reading(s, float(t), float(i % 97)) for i, s in enumerate(sensors)])
    w = build_windows(store.read_window(START, END), T,
                      WindowSpec(before=SPEC.before, after=SPEC.after,
                                 resample=timedelta(hours=3)))
    assert w.before.shape == (32, 10_000) and w.after.shape == (32, 10_000)
    store.close()
