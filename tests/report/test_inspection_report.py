"""write_inspection_report: one folder per inspection with every figure, a page that links
only files that exist, the result JSON beside it, and no exception for what cannot be drawn."""
from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.image import imread

from monitor.report import ReportWriteError, write_inspection_report
from monitor.report.example import example_inspection
from tests.report.helpers import assert_self_contained


def _map_files(tmp_path: Path, ids: list[str]) -> tuple[Path, Path]:
    rng = np.random.default_rng(1)
    sensors = tmp_path / "sensors.csv"
    pd.DataFrame({"sensor_id": ids, "x": rng.uniform(0, 100, len(ids)),
                  "y": rng.uniform(0, 50, len(ids))}).to_csv(sensors, index=False)
    links = tmp_path / "links.csv"
    xy = rng.uniform(0, 100, (40, 4))
    pd.DataFrame(xy, columns=["x1", "y1", "x2", "y2"]).to_csv(links, index=False)
    return sensors, links


def _manifest(folder: Path) -> dict[str, dict]:
    return {f["key"]: f for f in json.loads((folder / "report.json").read_text())["figures"]}


def test_full_report_has_every_figure_with_the_right_counts(tmp_path: Path) -> None:
    ex = example_inspection(33, 6, site="l-town")
    sensors, links = _map_files(tmp_path, ex.result["engine"]["labels"])
    folder = write_inspection_report(
        ex.result, tmp_path / "reports", before_raw=ex.before_raw, after_raw=ex.after_raw,
        before=ex.before, after=ex.after, sensors_file=sensors, links_file=links)

    assert folder == tmp_path / "reports" / "l-town_20190311T000000Z"
    figs = _manifest(folder)
    assert {k: f["status"] for k, f in figs.items()} == {
        "scores": "drawn", "lambda_heatmap": "drawn", "profile_1": "drawn",
        "profile_2": "drawn", "profile_3": "drawn", "network_map": "drawn"}
    assert figs["scores"]["meta"]["sensors"] == 33
    assert figs["lambda_heatmap"]["meta"] == {"sensors": 33, "lambdas": 6}
    assert figs["network_map"]["meta"]["sensors"] == 33
    assert figs["network_map"]["meta"]["links"] == 40
    # The profiles are of the top 3 ranked sensors, in rank order.
    top3 = [s["sensor_id"] for s in ex.result["sensors"][:3]]
    assert [figs[f"profile_{k}"]["meta"]["sensor"] for k in (1, 2, 3)] == top3
    for f in figs.values():
        image = imread(folder / f["file"])
        assert image.shape[0] > 300 and image.shape[1] > 600  # a real, readable PNG

    refs = assert_self_contained(folder)
    assert {f["file"] for f in figs.values()} | {"result.json"} <= set(refs)
    assert json.loads((folder / "result.json").read_text()) == ex.result
    page = (folder / "index.html").read_text()
    assert ex.result["summary"] in page
    assert "0.002" in page  # the p-value


def test_error_result_still_renders_its_explanation(tmp_path: Path) -> None:
    result = {
        "schema": "mmdwatch.inspection/v1", "fingerprint": "abc", "site": "l-town",
        "status": "error", "inspection_time": "2019-03-11T00:00:00Z",
        "windows": {"before": {"start": "2019-03-04T00:00:00Z", "end": "2019-03-11T00:00:00Z",
                               "n": 2}, "after": {"start": "2019-03-11T00:00:00Z",
                                                  "end": "2019-03-18T00:00:00Z", "n": 168},
                    "resample": "1h", "aggregate": "mean", "normalise": "before"},
        "test": {"method": "cv-aggregation", "p_value": None, "alpha": 0.05, "seed": 0},
        "sensors": [], "selected_sensors": [],
        "summary": "Inspection at 2019-03-11T00:00Z failed: not enough data",
        "data_quality": {"missing_fraction": 0.99, "dropped_sensors": ["n415", "n207"]},
        "error": "before window has 2 of 168 hourly rows <need at least 4>; wait for data",
    }
    folder = write_inspection_report(result, tmp_path)
    page = (folder / "index.html").read_text()
    assert "ended in error" in page
    # The message is shown, HTML-escaped.
    assert "before window has 2 of 168 hourly rows &lt;need at least 4&gt;" in page
    assert "99.00%" in page and "n415" in page
    figs = _manifest(folder)
    assert figs["scores"]["status"] == "skipped" and "no sensor scores" in figs["scores"]["reason"]
    assert all(f["status"] != "drawn" for f in figs.values())
    assert_self_contained(folder)


def test_error_result_with_windows_still_shows_the_data(tmp_path: Path) -> None:
    ex = example_inspection(8, 3)
    result = {"site": "x", "status": "error", "inspection_time": "2019-03-11T00:00:00Z",
              "error": "constant sensor"}
    folder = write_inspection_report(result, tmp_path, before_raw=ex.before_raw,
                                     after_raw=ex.after_raw)
    figs = _manifest(folder)
    assert [figs[f"profile_{k}"]["status"] for k in (1, 2, 3)] == ["drawn"] * 3
    assert_self_contained(folder)


def test_one_broken_figure_does_not_lose_the_others(tmp_path: Path,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    ex = example_inspection(10, 4)
    broken = dict(ex.result)
    broken["engine"] = dict(ex.result["engine"], lambdas=[0.1, 0.2])  # 2 lambdas, 4 rows
    with caplog.at_level(logging.INFO, logger="monitor.report"):
        folder = write_inspection_report(broken, tmp_path, before=ex.before, after=ex.after)
    figs = _manifest(folder)
    assert figs["lambda_heatmap"]["status"] != "drawn"
    assert "inconsistent" in figs["lambda_heatmap"]["reason"]
    assert figs["scores"]["status"] == "drawn"
    assert figs["profile_1"]["status"] == "drawn"
    assert "lambda_heatmap" in caplog.text
    page = (folder / "index.html").read_text()
    assert "inconsistent" in page
    assert_self_contained(folder)


def test_drawing_bug_is_logged_and_named_not_raised(tmp_path: Path,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    ex = example_inspection(10, 4)
    before = ex.before.copy()
    before.index = range(len(before))  # not a DatetimeIndex
    with caplog.at_level(logging.INFO, logger="monitor.report"):
        folder = write_inspection_report(ex.result, tmp_path, before_raw=before)
    figs = _manifest(folder)
    assert figs["profile_1"]["status"] in {"skipped", "failed"}
    assert "DatetimeIndex" in figs["profile_1"]["reason"]
    assert figs["scores"]["status"] == "drawn"


def test_result_without_engine_skips_only_the_heatmap(tmp_path: Path) -> None:
    ex = example_inspection(10, 4)
    result = {k: v for k, v in ex.result.items() if k != "engine"}
    folder = write_inspection_report(result, tmp_path)
    figs = _manifest(folder)
    assert figs["scores"]["status"] == "drawn"
    assert figs["lambda_heatmap"]["status"] == "skipped"
    assert figs["network_map"]["status"] == "skipped"
    assert "sensors_file" in figs["network_map"]["reason"]
    assert "no window data" in figs["profiles"]["reason"]
    assert_self_contained(folder)


def test_missing_sensors_file_is_a_note_not_an_exception(tmp_path: Path) -> None:
    ex = example_inspection(6, 3)
    folder = write_inspection_report(ex.result, tmp_path,
                                     sensors_file=tmp_path / "does-not-exist.csv")
    figs = _manifest(folder)
    assert figs["network_map"]["status"] == "skipped"
    assert "does-not-exist.csv" in figs["network_map"]["reason"]


def test_rerun_overwrites_the_same_folder(tmp_path: Path) -> None:
    ex = example_inspection(6, 3)
    first = write_inspection_report(ex.result, tmp_path)
    second = write_inspection_report(ex.result, tmp_path)
    assert first == second
    assert [p.name for p in tmp_path.iterdir()] == [first.name]


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_unwritable_folder_raises_report_write_error(tmp_path: Path) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        with pytest.raises(ReportWriteError, match="report_dir"):
            write_inspection_report(example_inspection(4, 2).result, ro)
    finally:
        ro.chmod(0o700)


def test_report_dir_that_is_a_file_raises_report_write_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(ReportWriteError, match="writable"):
        write_inspection_report(example_inspection(4, 2).result, blocker)
