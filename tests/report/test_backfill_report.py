"""write_backfill_report: a time x sensor score map and a p-value timeline."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from monitor.report import write_backfill_report
from monitor.report.backfill import p_value_timeline, score_timeline
from monitor.report.example import example_backfill
from monitor.report.view import InspectionView
from tests.report.helpers import assert_self_contained


def test_backfill_report_renders_both_timelines(tmp_path: Path) -> None:
    results = example_backfill(n_sensors=12, days=15, change_day=9, site="l-town")
    shuffled = results[::-1]  # any order in, time order out
    folder = write_backfill_report(shuffled, tmp_path)
    assert folder.name == "backfill_l-town_20190301T000000Z_20190315T000000Z"
    manifest = json.loads((folder / "report.json").read_text())
    figs = {f["key"]: f for f in manifest["figures"]}
    assert figs["score_timeline"]["status"] == "drawn"
    assert figs["score_timeline"]["meta"] == {"sensors": 12, "inspections": 15,
                                              "firing": 6, "errors": 1}
    assert figs["p_value_timeline"]["meta"]["p_values"] == 14
    lines = (folder / "results.jsonl").read_text().splitlines()
    times = [json.loads(line)["inspection_time"] for line in lines]
    assert times == sorted(times) and len(times) == 15
    page = (folder / "index.html").read_text()
    assert "6 firing" in page and "1 in error" in page
    assert "First firing at 2019-03-10 00:00 UTC" in page
    assert "not enough data" in page or "hourly rows" in page
    assert_self_contained(folder)


def test_score_timeline_grid_is_sensor_by_time_and_marks_firing() -> None:
    results = example_backfill(n_sensors=7, days=6, change_day=4)
    views = [InspectionView.from_result(r) for r in results]
    drawn = score_timeline(views)
    ax = drawn.figure.axes[0]
    mesh = ax.collections[0]
    assert mesh.get_array().shape == (7, 6)
    assert len(ax.get_yticklabels()) == 7
    # The error inspection (day 3) is a masked column.
    assert np.ma.getmaskarray(mesh.get_array())[:, 3].all()
    # One triangle per firing inspection above the map.
    firing_days = [c for c in ax.collections[1:] if len(c.get_offsets()) == 2
                   and np.allclose(np.asarray(c.get_offsets())[:, 1], 1.0)]
    assert len(firing_days) == 1 and drawn.meta["firing"] == 2


def test_p_value_timeline_is_log_scale_with_alpha() -> None:
    views = [InspectionView.from_result(r) for r in example_backfill(n_sensors=5, days=8)]
    drawn = p_value_timeline(views)
    ax = drawn.figure.axes[0]
    assert ax.get_yscale() == "log"
    assert any(ln.get_linestyle() == "--" and ln.get_ydata()[0] == 0.05 for ln in ax.get_lines())
    assert drawn.meta["inspections"] == 8


def test_backfill_of_only_errors_and_of_nothing_still_renders(tmp_path: Path) -> None:
    errors = [{"site": "s", "status": "error", "inspection_time": f"2019-03-0{d}T00:00:00Z",
               "error": "source unreachable"} for d in range(1, 4)]
    folder = write_backfill_report(errors, tmp_path)
    figs = {f["key"]: f for f in json.loads((folder / "report.json").read_text())["figures"]}
    assert figs["score_timeline"]["status"] == "skipped"
    assert figs["p_value_timeline"]["status"] == "drawn"
    assert "source unreachable" in (folder / "index.html").read_text()
    assert_self_contained(folder)

    empty = write_backfill_report([], tmp_path / "empty")
    assert (empty / "index.html").is_file()
    assert_self_contained(empty)


def test_single_inspection_backfill(tmp_path: Path) -> None:
    folder = write_backfill_report(example_backfill(n_sensors=4, days=1), tmp_path)
    figs = {f["key"]: f for f in json.loads((folder / "report.json").read_text())["figures"]}
    assert figs["score_timeline"]["meta"]["inspections"] == 1
    assert_self_contained(folder)


def test_long_sensor_ids_and_the_axis_label_fit_and_both_timelines_line_up() -> None:
    """SKAB's ids ("Volume Flow RateRMS") were cut at the figure's left edge, and the axis
    label with them; the p-value timeline keeps the heatmap's time axis."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    results = example_backfill(n_sensors=5, days=6, change_day=4)
    for result in results:
        for row in result.get("sensors") or []:
            row["sensor_id"] = f"Volume Flow RateRMS {row['sensor_id']}"
        result["selected_sensors"] = [f"Volume Flow RateRMS {s}"
                                      for s in result.get("selected_sensors") or []]
    views = [InspectionView.from_result(r) for r in results]
    heat, line = score_timeline(views).figure, p_value_timeline(views).figure
    canvas = FigureCanvasAgg(heat)
    canvas.draw()
    renderer = canvas.get_renderer()
    ax = heat.axes[0]
    texts = [*ax.get_yticklabels(), ax.yaxis.label]
    assert all(t.get_window_extent(renderer).x0 >= 0 for t in texts)
    assert heat.axes[0].get_position().x0 == line.axes[0].get_position().x0
    assert heat.axes[0].get_position().x1 == line.axes[0].get_position().x1
