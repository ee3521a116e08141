"""Inspector.run: engine errors (engine.errors.EngineError) end the inspection as an
``error`` result named "engine: ...", other exceptions as their type name."""
from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pandas as pd

from monitor.inspection import EngineSettings, Inspector
from monitor.windows import WindowSpec

T = datetime(2024, 3, 8, tzinfo=UTC)
SPEC = WindowSpec(before=timedelta(days=2), after=timedelta(days=2))


def _read_window(start, end):
    times = pd.date_range(start, end, freq="1h", inclusive="left", tz="UTC")
    rng = np.random.default_rng(0)
    frames = [pd.DataFrame({"time": times, "sensor": f"s{i}",
                            "value": 10 + rng.normal(0, 1, times.size)}) for i in range(4)]
    return pd.concat(frames, ignore_index=True)


def _run(engine: EngineSettings):
    return Inspector("site", SPEC, engine, {"test": "errors"}).run(T, _read_window).result


def test_an_engine_error_is_reported_as_such():
    # n_lambdas=1: CVAggregation raises engine.errors.InvalidParameterError
    result = _run(EngineSettings(device="cpu", params=(("n_lambdas", 1),)))
    assert result["status"] == "error"
    assert "engine: need n_splits >= 1, n_lambdas >= 2" in result["summary"]


def test_another_error_is_reported_with_its_type(monkeypatch):
    def boom(self):
        raise ValueError("boom")

    monkeypatch.setattr(EngineSettings, "make_selector", boom)
    result = _run(EngineSettings(device="cpu"))
    assert result["status"] == "error"
    assert "ValueError: boom" in result["summary"]
    assert "engine:" not in result["summary"]
