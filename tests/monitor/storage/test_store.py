"""The SQLite reading store: idempotent duplicates, out-of-order input, watermark,
rejections, retention."""
from __future__ import annotations

import math
from datetime import UTC, datetime

import pandas as pd

from connectors.base import Reading, WindowSource
from monitor.service.metrics import Metrics
from monitor.storage.store import ReadingStore

T0 = datetime(2019, 3, 4, tzinfo=UTC).timestamp()


def test_duplicates_are_idempotent_and_out_of_order_is_fine(tmp_path):
    metrics = Metrics()
    store = ReadingStore(tmp_path / "r.sqlite", metrics)
    batch = [Reading("a", T0 + 600 * k, float(k)) for k in range(10)]
    store.add(list(reversed(batch)))
    store.add(batch[:3])  # redelivered
    store.add([Reading("a", T0 + 600 * 2, 99.0)])  # a correction wins
    rows = store.fetch(T0, T0 + 6000)
    assert [t for _, t, _ in rows] == [T0 + 600 * k for k in range(10)]
    assert rows[2][2] == 99.0
    assert store.count() == 10
    assert store.last_time_s() == T0 + 5400
    assert store.watermark() == pd.Timestamp(T0 + 5400, unit="s", tz="UTC")
    assert store.first_time() == pd.Timestamp(T0, unit="s", tz="UTC")
    # a window source like InfluxDB: the agent and the CLI read windows through one interface
    assert isinstance(store, WindowSource) and store.inspect_from_oldest
    assert len(store.read_window(pd.Timestamp(T0, unit="s", tz="UTC"),
                                 pd.Timestamp(T0 + 1800, unit="s", tz="UTC"),
                                 resample="1h", aggregate="mean")) == 3
    assert metrics.snapshot()["readings_accepted"] == 14


def test_a_window_frame_holds_the_rows_fetch_gives(tmp_path):
    """The columnar window (one array per sensor) equals the frame of fetch's tuples,
    for the whole store and for one site's sensors with their prefix cut off."""
    store = ReadingStore(tmp_path / "r.sqlite")
    store.add([Reading(f"north\x1fn{s}", T0 + 300 * k + 0.5 * s, float(k * s) - 3.25)
               for s in range(5) for k in range(300) if (s, k % 7) != (2, 0)])
    store.add([Reading("bare", T0 + 60 * k, 1.5) for k in range(50)])
    start, end = T0 + 1000, T0 + 300 * 250
    window = pd.Timestamp(start, unit="s", tz="UTC"), pd.Timestamp(end, unit="s", tz="UTC")
    frame = store.read_window(*window)
    rows = store.fetch(start, end)
    expected = pd.DataFrame({
        "time": pd.to_datetime([t for _, t, _ in rows], unit="s", utc=True),
        "sensor": pd.array([n for n, _, _ in rows], dtype="str"),
        "value": [v for _, _, v in rows]})
    pd.testing.assert_frame_equal(frame, expected)
    site = store.for_site("north").read_window(*window)
    north = expected[expected["sensor"] != "bare"].reset_index(drop=True)
    north["sensor"] = north["sensor"].str.slice(len("north\x1f"))
    pd.testing.assert_frame_equal(site, north)
    assert store.for_site("south").read_window(*window).empty


def test_bad_readings_are_rejected_with_a_reason(tmp_path):
    metrics = Metrics()
    store = ReadingStore(tmp_path / "r.sqlite", metrics)
    accepted = store.add([Reading("a", T0, math.nan), Reading("a", T0, math.inf),
                          Reading("a", 4e10, 1.0), Reading("b", T0, 1.0)])
    assert accepted == 1
    assert metrics.snapshot()["readings_rejected"] == {"non_finite_value": 2,
                                                      "time_out_of_range": 1}


def test_store_survives_reopening_and_prunes_old_readings(tmp_path):
    path = tmp_path / "r.sqlite"
    store = ReadingStore(path)
    store.add([Reading(s, T0 + 3600 * k, 1.0) for s in ("a", "b") for k in range(48)])
    store.close()
    store = ReadingStore(path)
    assert store.last_time_s() == T0 + 3600 * 47
    assert store.sensors() == ["a", "b"]
    assert store.prune(T0 + 3600 * 24) == 48
    assert store.count() == 48 and store.first_time().timestamp() == T0 + 3600 * 24
    frame = store.read_window(datetime.fromtimestamp(T0 + 3600 * 24, UTC),
                              datetime.fromtimestamp(T0 + 3600 * 26, UTC))
    assert len(frame) == 4 and str(frame["time"].dt.tz) == "UTC"
    store.add([Reading("c", T0 + 3600 * 30, 2.0)])  # new sensor after reopening
    assert store.sensors() == ["a", "b", "c"]
