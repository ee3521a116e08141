"""Inspector.run_many: the engine fits of several times batched (CVAggregation.fit_many),
the same outcomes as Inspector.run at each time."""
from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pandas as pd

from monitor.inspection import EngineSettings, Inspector
from monitor.windows import WindowSpec

START = datetime(2024, 3, 1, tzinfo=UTC)
CHANGE = datetime(2024, 3, 5, tzinfo=UTC)
SPEC = WindowSpec(before=timedelta(days=2), after=timedelta(days=1))
ENGINE = EngineSettings(device="cpu", params=(("n_splits", 3), ("p_value_permutations", 199)))


def _read_window(start, end):
    times = pd.date_range(START, START + timedelta(days=8), freq="1h", inclusive="left",
                          tz="UTC")
    rng = np.random.default_rng(0)
    frames = []
    for i in range(5):
        value = 10 + rng.normal(0, 1, times.size)
        if i == 2:
            value = value + 2.5 * (times >= pd.Timestamp(CHANGE))
        frames.append(pd.DataFrame({"time": times, "sensor": f"s{i}", "value": value}))
    frame = pd.concat(frames, ignore_index=True)
    return frame[(frame.time >= start) & (frame.time < end)]


def test_run_many_gives_the_outcomes_of_run():
    inspector = Inspector("site", SPEC, ENGINE, {"test": "run_many"})
    # 03-03: before the change; 03-05/06: after it; 03-20: no data (an error result)
    times = [datetime(2024, 3, d, tzinfo=UTC) for d in (3, 5, 6, 20)]
    many = inspector.run_many(times, _read_window)
    for t, got in zip(times, many, strict=True):
        want = inspector.run(t, _read_window).result
        res = got.result
        assert res["status"] == want["status"] and res["fingerprint"] == want["fingerprint"]
        assert res["selected_sensors"] == want["selected_sensors"]
        if want["status"] == "error":
            assert res["error"] == want["error"]
            continue
        assert abs(res["test"]["p_value"] - want["test"]["p_value"]) <= 1e-6
        assert [s["sensor_id"] for s in res["sensors"]] == [s["sensor_id"] for s in want["sensors"]]
        # the inspection's time includes its share of the batched fit
        assert res["generator"]["runtime_s"] >= res["engine"]["runtime_s"] - 1e-3 > 0
    assert many[1].result["status"] == "firing" and many[1].result["selected_sensors"][0] == "s2"
    assert many[3].result["status"] == "error"


def test_bad_engine_settings_end_every_time_as_an_error():
    inspector = Inspector("site", SPEC, EngineSettings(device="cpu", params=(("n_lambdas", 1),)),
                          {"test": "run_many"})
    out = inspector.run_many([datetime(2024, 3, 5, tzinfo=UTC), datetime(2024, 3, 6, tzinfo=UTC)],
                             _read_window)
    assert [o.result["status"] for o in out] == ["error", "error"]
    assert all("engine: need n_splits" in o.result["error"] for o in out)


def test_a_failing_batch_falls_back_to_one_time_at_a_time(monkeypatch):
    from engine import CVAggregation

    def boom(self, pairs, **kwargs):
        raise RuntimeError("out of memory")

    monkeypatch.setattr(CVAggregation, "fit_many", boom)
    inspector = Inspector("site", SPEC, ENGINE, {"test": "run_many"})
    out = inspector.run_many([datetime(2024, 3, 3, tzinfo=UTC), datetime(2024, 3, 5, tzinfo=UTC)],
                             _read_window)
    assert [o.result["status"] for o in out] == ["ok", "firing"]
