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


def test_sites_due_together_share_one_batched_fit_and_get_their_own_results(monkeypatch):
    """prepare_many (the agent's tick, a backfill's first pass): the engine-part fits of
    two sites configured alike are one fit_many call, and each site's prepared times equal
    that site's own first pass."""
    from engine import CVAggregation
    from monitor.decision.settings import DecisionSettings
    from monitor.inspection import prepare_many

    decision = DecisionSettings(rule="calibrated", engine_rows=12)
    spec = WindowSpec(before=timedelta(days=3), after=timedelta(hours=12))
    first = Inspector("a", spec, ENGINE, {"site": "a"}, decision)
    second = Inspector("b", spec, ENGINE, {"site": "b"}, decision)

    def shifted(start, end):  # site b: the same network a day later
        frame = _read_window(start - timedelta(days=1), end - timedelta(days=1))
        return frame.assign(time=frame["time"] + timedelta(days=1))

    times = [datetime(2024, 3, 5, h, tzinfo=UTC) for h in range(0, 24, 6)]
    alone = [first.fit_engine_many(times, _read_window), second.fit_engine_many(times, shifted)]
    calls: list[int] = []
    original = CVAggregation.fit_many

    def counted(self, pairs, **kwargs):
        calls.append(len(pairs))
        return original(self, pairs, **kwargs)

    monkeypatch.setattr(CVAggregation, "fit_many", counted)
    together = prepare_many([(first, times, _read_window), (second, times, shifted)])
    assert calls == [2 * len(times)]
    for mine, want in zip(together, alone, strict=True):
        assert list(mine) == times == list(want)
        for t in times:
            got, ref = mine[t].engine_fit, want[t].engine_fit
            assert mine[t].detection.value == want[t].detection.value
            assert abs(got.p_value - ref.p_value) <= 1e-12
            np.testing.assert_allclose(got.scores, ref.scores, rtol=1e-9, atol=1e-12)
