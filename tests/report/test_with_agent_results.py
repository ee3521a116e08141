"""Reports of results made by the agent's own Inspector (the real producer of the result
dict and the window frames), not hand-built dicts."""
from __future__ import annotations

import html
import json
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from monitor.inspection import EngineSettings, Inspector
from monitor.report import write_inspection_report
from monitor.windows import WindowSpec
from tests.report.helpers import assert_self_contained

AT = datetime(2019, 3, 11, tzinfo=UTC)


def _readings(n_sensors: int, days: int = 4, gap_sensor: str | None = None) -> pd.DataFrame:
    """Long readings every 15 min around AT; sensors 0 and 1 drop after AT."""
    rng = np.random.default_rng(0)
    times = pd.date_range(AT - pd.Timedelta(days=days), AT + pd.Timedelta(days=days),
                          freq="15min", inclusive="left", tz="UTC")
    hour = times.hour.to_numpy() + times.minute.to_numpy() / 60
    rows = []
    for i in range(n_sensors):
        values = 40 + i + np.sin(2 * np.pi * hour / 24) + rng.normal(0, 0.05, len(times))
        if i < 2:
            values = values - 0.8 * (times >= AT)
        sid = f"n{i}"
        keep = np.ones(len(times), bool)
        if sid == gap_sensor:
            keep = times >= AT  # nothing in the before window
        rows.append(pd.DataFrame({"time": times[keep], "sensor": sid, "value": values[keep]}))
    return pd.concat(rows, ignore_index=True)


def _inspector(method: str = "mmd-baseline") -> Inspector:
    spec = WindowSpec(before=pd.Timedelta(days=4).to_pytimedelta(),
                      after=pd.Timedelta(days=4).to_pytimedelta())
    return Inspector("test-site", spec, EngineSettings(method=method, block_rows=24),
                     {"method": method})


def test_report_of_an_agent_error_result(tmp_path: Path) -> None:
    readings = _readings(1)  # one sensor: fewer than min_sensors -> status error
    outcome = _inspector().run(AT, lambda s, e: readings[(readings.time >= s)
                                                          & (readings.time < e)])
    assert outcome.result["status"] == "error"
    w = outcome.windows
    folder = write_inspection_report(
        outcome.result, tmp_path, before_raw=None if w is None else w.before_raw,
        after_raw=None if w is None else w.after_raw)
    page = (folder / "index.html").read_text()
    assert "ended in error" in page
    assert html.escape(outcome.result["error"]) in page
    assert_self_contained(folder)


def test_report_of_an_agent_result_with_the_engine(tmp_path: Path) -> None:
    import engine

    if not hasattr(engine, "MMDBaseline"):
        pytest.skip("engine.MMDBaseline is not available yet")
    readings = _readings(6, gap_sensor="n5")
    outcome = _inspector().run(AT, lambda s, e: readings[(readings.time >= s)
                                                          & (readings.time < e)])
    result = outcome.result
    assert result["status"] in {"firing", "ok"}, result.get("error")
    w = outcome.windows
    folder = write_inspection_report(result, tmp_path, before_raw=w.before_raw,
                                     after_raw=w.after_raw, before=w.before, after=w.after)
    figs = {f["key"]: f for f in json.loads((folder / "report.json").read_text())["figures"]}
    n_tested = len(result["sensors"])
    assert n_tested == 5  # n5 has no before data and is dropped
    assert figs["scores"]["meta"]["sensors"] == n_tested
    assert figs["lambda_heatmap"]["meta"] == {"sensors": n_tested,
                                              "lambdas": len(result["engine"]["lambdas"])}
    assert [figs[f"profile_{k}"]["status"] for k in (1, 2, 3)] == ["drawn"] * 3
    page = (folder / "index.html").read_text()
    assert "n5" in page  # the dropped sensor is named in the data-quality notes
    assert_self_contained(folder)
