"""Each inspection figure draws what it is given: one bar per sensor, one heatmap row per
lambda and one column per sensor, both windows in the profiles, every mapped sensor."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.colors import to_hex

from monitor.report import figures as figs
from monitor.report import style
from monitor.report.errors import ReportInputError
from monitor.report.example import example_inspection
from monitor.report.view import InspectionView
from tests.shared_data import LTOWN


@pytest.mark.parametrize(("n_sensors", "n_lambdas"), [(5, 3), (33, 6), (80, 8)])
def test_score_bars_has_one_bar_per_sensor_and_the_threshold(n_sensors: int,
                                                              n_lambdas: int) -> None:
    ex = example_inspection(n_sensors, n_lambdas)
    view = InspectionView.from_result(ex.result)
    drawn = figs.score_bars(view)
    ax = drawn.figure.axes[0]
    bars = ax.containers[0]
    assert len(bars) == n_sensors == drawn.meta["sensors"]
    # Ranked: bar heights never increase left to right.
    heights = np.array([b.get_height() for b in bars])
    assert np.all(np.diff(heights) <= 1e-12)
    purple = [b for b in bars if to_hex(b.get_facecolor()) == style.SELECTED_COLOUR.lower()]
    assert len(purple) == len(view.selected) == 3
    assert [t.get_text() for t in ax.get_xticklabels()] == view.sensor_ids
    (line,) = [ln for ln in ax.get_lines() if ln.get_linestyle() == "--"]
    assert line.get_ydata()[0] == pytest.approx(view.threshold)
    assert "2019-03-11 00:00 UTC" in ax.get_title()


@pytest.mark.parametrize(("n_sensors", "n_lambdas"), [(5, 3), (33, 6), (80, 8)])
def test_lambda_heatmap_is_lambda_by_sensor(n_sensors: int, n_lambdas: int) -> None:
    ex = example_inspection(n_sensors, n_lambdas)
    view = InspectionView.from_result(ex.result)
    drawn = figs.lambda_heatmap(view)
    ax = drawn.figure.axes[0]
    assert ax.images[0].get_array().shape == (n_lambdas, n_sensors)
    assert drawn.meta == {"sensors": n_sensors, "lambdas": n_lambdas}
    assert len(ax.get_yticklabels()) == n_lambdas
    # Columns follow the ranking, so column 0 is the top-ranked sensor's Pi_lambda.
    assert ax.get_xticklabels()[0].get_text() == view.sensor_ids[0]
    engine = ex.result["engine"]
    top = engine["labels"].index(view.sensor_ids[0])
    np.testing.assert_allclose(ax.images[0].get_array()[:, 0],
                               np.asarray(engine["scores_per_lambda"])[:, top])


def test_sensor_labels_are_thinned_beyond_100_but_selected_stay_named() -> None:
    ex = example_inspection(250, 6)
    view = InspectionView.from_result(ex.result)
    ax = figs.score_bars(view).figure.axes[0]
    names = [t.get_text() for t in ax.get_xticklabels()]
    assert len(ax.containers[0]) == 250
    assert len(names) <= 100 + len(view.selected)
    assert set(view.selected) <= set(names)


def test_profile_draws_both_windows_in_their_colours() -> None:
    ex = example_inspection(10, 6)
    view = InspectionView.from_result(ex.result)
    sensor = view.sensor_ids[0]
    drawn = figs.profile(view, sensor, before_raw=ex.before_raw, after_raw=ex.after_raw,
                         before=ex.before, after=ex.after)
    raw_ax, hour_ax = drawn.figure.axes[:2]
    colours = {to_hex(ln.get_color()) for ln in raw_ax.get_lines()}
    assert {style.BEFORE_COLOUR.lower(), style.AFTER_COLOUR.lower()} <= colours
    assert drawn.meta["raw_points"] == 2 * 168
    assert drawn.meta["hours"] == 24
    means = [ln for ln in hour_ax.get_lines() if len(ln.get_xdata()) == 24]
    assert [to_hex(ln.get_color()) for ln in means] == [style.BEFORE_COLOUR.lower(),
                                                        style.AFTER_COLOUR.lower()]
    # The before curve is the mean of the normalised before window at each hour.
    expected = ex.before[sensor].groupby(ex.before.index.hour).mean().to_numpy()
    np.testing.assert_allclose(means[0].get_ydata(), expected)
    assert sensor in drawn.figure.get_suptitle()


def test_profile_accepts_naive_utc_frames_and_only_normalised_data() -> None:
    ex = example_inspection(6, 3)
    view = InspectionView.from_result(ex.result)
    before, after = ex.before.tz_localize(None), ex.after.tz_localize(None)
    drawn = figs.profile(view, view.sensor_ids[0], before_raw=None, after_raw=None,
                         before=before, after=after)
    assert drawn.meta["panels"] == 1


def test_profile_of_an_absent_sensor_says_so() -> None:
    ex = example_inspection(6, 3)
    view = InspectionView.from_result(ex.result)
    with pytest.raises(ReportInputError, match="nope"):
        figs.profile(view, "nope", before_raw=ex.before_raw, after_raw=ex.after_raw,
                     before=None, after=None)


def test_network_map_places_every_sensor_and_rings_the_selected(tmp_path: Path) -> None:
    ex = example_inspection(12, 6)
    view = InspectionView.from_result(ex.result)
    ids = view.sensor_ids
    sensors_csv = tmp_path / "sensors.csv"
    # Two sensors of the file are not in the result, one scored sensor is not in the file.
    pd.DataFrame({"sensor_id": ids[:-1] + ["extra1", "extra2"],
                  "x": np.arange(13.0), "y": np.arange(13.0) ** 1.5,
                  "elevation_m": 1.0}).to_csv(sensors_csv, index=False)
    links_csv = tmp_path / "links.csv"
    pd.DataFrame({"x1": [0, 1, 2], "y1": [0, 1, 2], "x2": [1, 2, 3], "y2": [1, 2, 4]}
                 ).to_csv(links_csv, index=False)
    drawn = figs.network_map(view, figs.read_sensor_positions(sensors_csv),
                             figs.read_link_segments(links_csv))
    assert drawn.meta["sensors"] == 11
    assert drawn.meta["unscored"] == 2
    assert drawn.meta["links"] == 3
    assert drawn.meta["selected"] == 3
    assert drawn.meta["off_map"] == [ids[-1]]
    ax = drawn.figure.axes[0]
    sizes = sorted(len(c.get_offsets()) for c in ax.collections if hasattr(c, "get_offsets")
                   and c.get_offsets().shape[-1] == 2 and len(c.get_offsets()))
    assert 11 in sizes and 2 in sizes and 3 in sizes
    assert {t.get_text() for t in ax.texts} >= set(view.selected)


def test_network_map_reads_the_shared_ltown_files() -> None:
    if not (LTOWN / "sensors.csv").is_file():
        pytest.skip(f"shared L-Town data not found at {LTOWN}")
    positions = figs.read_sensor_positions(LTOWN / "sensors.csv")
    segments = figs.read_link_segments(LTOWN / "network_links.csv")
    assert len(positions) == 30
    assert segments.shape == (909, 2, 2)


def test_bad_sensors_file_names_the_missing_columns(tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("id,lon,lat\na,1,2\n")
    with pytest.raises(ReportInputError, match=r"sensor_id,x,y"):
        figs.read_sensor_positions(bad)


def test_all_zero_scores_are_explained_not_drawn_as_an_empty_plot() -> None:
    ex = example_inspection(8, 4, n_changed=0)
    result = ex.result
    for s in result["sensors"]:
        s["score"] = 0.0
    result["engine"]["scores_per_lambda"] = [[0.0] * 8 for _ in range(4)]
    view = InspectionView.from_result(result)
    ax = figs.score_bars(view).figure.axes[0]
    assert ax.get_ylim() == (0.0, 1.0)
    assert any("All scores are 0" in t.get_text() for t in ax.texts)
    assert "p = 0.41" in ax.texts[0].get_text()
    heat = figs.lambda_heatmap(view).figure.axes[0]
    assert any("All scores are 0" in t.get_text() for t in heat.texts)


def test_profile_of_windows_shorter_than_two_days_compares_distributions() -> None:
    """Minutes of one-second data have no daily profile: the right panel shows the two
    windows' distributions (one dot at one hour of day said nothing), and the left one
    names the bins."""
    ex = example_inspection(6, 3)
    result = {**ex.result, "windows": {**ex.result["windows"], "resample": "2s"}}
    view = InspectionView.from_result(result)
    sensor = view.sensor_ids[0]
    rng = np.random.default_rng(0)
    t0 = pd.Timestamp("2020-03-09T16:21:40Z")
    before = pd.DataFrame({sensor: 1 + 0.01 * rng.standard_normal(150)},
                          index=pd.date_range(t0, periods=150, freq="2s"))
    after = pd.DataFrame({sensor: 0.98 + 0.01 * rng.standard_normal(15)},
                         index=pd.date_range(t0 + pd.Timedelta("5min"), periods=15, freq="2s"))
    drawn = figs.profile(view, sensor, before_raw=before * 32, after_raw=after * 32,
                         before=before, after=after)
    raw_ax, right = drawn.figure.axes[:2]
    assert raw_ax.get_title() == "2s bins, both windows"
    assert right.get_title() == "distribution, before vs after"
    assert drawn.meta["distributions"] == {"before": 150, "after": 15}
    assert drawn.meta["hours"] == 0
    assert not figs.spans_days(before, after) and figs.spans_days(ex.before, ex.after)
