"""The score chart says what decided: the engine's selection rule (from the result's engine
block) or the calibrated detection statistic's alert threshold, in the caption, the legend
and the line; and no figure title is cut at the edge of its PNG."""
from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg

from monitor.inspection import DecisionSettings, EngineSettings, Inspector
from monitor.report import figures as figs
from monitor.report import write_inspection_report
from monitor.report.errors import ReportInputError
from monitor.report.example import example_inspection
from monitor.report.inspection import SELECTION_RULES, heatmap_caption, scores_caption
from monitor.report.view import InspectionView
from monitor.windows import WindowSpec
from tests.report.test_with_agent_results import AT, _readings


def _engine_result(rule: str | None = "gap", n_sensors: int = 8) -> dict[str, Any]:
    result = copy.deepcopy(example_inspection(n_sensors, 4, n_changed=2).result)
    if rule is None:
        result["engine"]["params"].pop("selection", None)
    else:
        result["engine"]["params"]["selection"] = rule
    return result


def _calibrated_result(*, threshold: float | None, z: list[float],
                       named: int) -> dict[str, Any]:
    """A calibrated result as monitor.inspection writes it: score = |z|, named sensors are
    those with z**2 >= detection.threshold; engine beside it only when firing."""
    result = _engine_result()
    ids = [f"s{i:02d}" for i in range(len(z))]
    result["test"] = {"method": "cv-aggregation", "p_value": 1e-5 if named else 0.2,
                      "alpha": 0.05, "seed": 0, "decision": "calibrated"}
    result["detection"] = {"statistic": "residual-top-k", "value": max(z) ** 2,
                           "p_value": result["test"]["p_value"], "level": 0.00139,
                           "threshold": threshold, "history_n": 300, "history_needed": 48,
                           "false_incident_interval": "30d"}
    result["sensors"] = [{"sensor_id": s, "rank": k + 1, "score": abs(v), "z": -v,
                          "selected": k < named} for k, (s, v) in enumerate(zip(ids, z))]
    result["selected_sensors"] = ids[:named]
    result["status"] = "firing" if named else "ok"
    if named:
        for row in result["sensors"]:
            row["engine_score"] = 0.1
        result["engine"]["labels"] = ids
        result["engine"]["scores_per_lambda"] = [[0.1] * len(ids)] * 4
    else:
        result["engine"] = None
    return result


def _dashed(ax: Any) -> list[Any]:
    return [ln for ln in ax.get_lines() if ln.get_linestyle() == "--"]


# --------------------------------------------------------------------------- engine decision


def test_gap_rule_caption_names_the_rule_the_engine_used_not_the_histogram() -> None:
    view = InspectionView.from_result(_engine_result("gap"))
    assert view.selection_rule == "gap" and not view.calibrated
    caption = scores_caption(view)
    assert "<code>gap</code> selection rule" in caption
    assert "largest gap between consecutive scores" in caption
    assert "histogram" not in caption and "empty bin" not in caption
    assert "2 sensors selected" in caption
    assert f"at {view.threshold:.3g}" in caption  # the number on the line
    assert "aggregated importance score Π" in caption  # cv-aggregation's score
    drawn = figs.score_bars(view)
    ax = drawn.figure.axes[0]
    (line,) = _dashed(ax)
    assert line.get_ydata()[0] == pytest.approx(view.threshold)
    assert "gap rule" in line.get_label() and "gap rule" in ax.get_title()
    assert drawn.meta["threshold_line"] == "drawn"


def test_every_engine_selection_rule_has_its_own_words() -> None:
    from engine.selection import RULES

    assert set(SELECTION_RULES) == set(RULES)
    texts = {rule: scores_caption(InspectionView.from_result(_engine_result(rule)))
             for rule in RULES}
    for rule, text in texts.items():
        assert f"<code>{rule}</code>" in text and SELECTION_RULES[rule] in text
    assert "first empty bin" in texts["first_empty"]
    assert "widest run of empty bins" in texts["histogram"]
    assert len(set(texts.values())) == len(RULES)


def test_unknown_or_unrecorded_rule_is_said_plainly() -> None:
    caption = scores_caption(InspectionView.from_result(_engine_result(None)))
    assert "does not record its selection rule" in caption
    assert "empty bin" not in caption and "gap" not in caption
    caption = scores_caption(InspectionView.from_result(_engine_result("knee")))
    assert "<code>knee</code> selection rule." in caption


def test_selection_without_significance_is_said_to_raise_no_alert() -> None:
    result = _engine_result()
    result["test"]["p_value"] = 0.3
    result["status"] = "ok"
    caption = scores_caption(InspectionView.from_result(result))
    assert "not significant" in caption and "raises no alert" in caption


def test_nothing_positive_means_no_line_and_says_so() -> None:
    result = _engine_result()
    result["engine"]["threshold"] = None  # inf in the engine, null in the JSON
    result["selected_sensors"] = []
    for row in result["sensors"]:
        row["score"], row["selected"] = 0.0, False
    view = InspectionView.from_result(result)
    assert "no threshold line is drawn" in scores_caption(view)
    assert _dashed(figs.score_bars(view).figure.axes[0]) == []


# --------------------------------------------------------------------------- calibrated


def test_calibrated_firing_caption_and_line_are_on_the_z_scale() -> None:
    result = _calibrated_result(threshold=126.0, z=[35.2, 19.3, 4.6, 4.0, 2.5], named=2)
    view = InspectionView.from_result(result)
    assert view.calibrated and view.z2_threshold == 126.0
    assert view.threshold == pytest.approx(math.sqrt(126.0))  # not engine.threshold
    caption = scores_caption(view)
    assert "Sensors ranked by |z| of the detection statistic" in caption
    assert "<code>residual-top-k</code>" in caption
    assert "2 sensors named in the alert" in caption
    assert "z² alone is at or above the threshold" in caption
    assert "|z| = 11.2" in caption and "alert threshold 126" in caption
    assert "selection rule" not in caption and "histogram" not in caption
    assert "sensor table" in caption  # the engine ran beside it
    drawn = figs.score_bars(view)
    ax = drawn.figure.axes[0]
    (line,) = _dashed(ax)
    assert line.get_ydata()[0] == pytest.approx(math.sqrt(126.0))
    assert "z² = 126" in line.get_label()
    assert "|z|" in ax.get_ylabel() and "2 of 5 named" in ax.get_title()
    assert "engine's scores" in heatmap_caption(view)


def test_calibrated_ok_names_nobody_and_keeps_a_far_threshold_off_the_bars() -> None:
    result = _calibrated_result(threshold=46441.6, z=[3.9, 3.1, 1.2], named=0)
    view = InspectionView.from_result(result)
    caption = scores_caption(view)
    assert "No sensor is named" in caption and "not below the alert level 0.00139" in caption
    assert "|z| = 216, far above every bar (named in the legend, not drawn)" in caption
    assert "dashed line" not in caption
    drawn = figs.score_bars(view)
    ax = drawn.figure.axes[0]
    assert _dashed(ax) == []  # far above: in the legend, not a line squashing the bars
    assert ax.get_ylim()[1] < 10
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert any("above the axis" in t and "z² = 4.64e+04" in t for t in labels)
    assert drawn.meta["threshold_line"] == "above the axis"
    # The engine did not run (the decision did not fire): the heatmap says why.
    with pytest.raises(ReportInputError, match="runs the engine only when it fires"):
        figs.lambda_heatmap(view)


def test_calibrating_has_no_threshold_yet() -> None:
    result = _calibrated_result(threshold=None, z=[3.0, 1.0], named=0)
    result["status"] = "calibrating"
    view = InspectionView.from_result(result)
    assert view.threshold is None
    assert "No alert threshold yet" in scores_caption(view)
    assert _dashed(figs.score_bars(view).figure.axes[0]) == []


def test_a_real_calibrated_inspection_reports_its_alert_threshold(tmp_path: Path) -> None:
    """monitor.inspection's calibrated decision, end to end into the page."""
    readings = _readings(6, days=8)
    spec = WindowSpec(before=pd.Timedelta(days=7).to_pytimedelta(),
                      after=pd.Timedelta(hours=16).to_pytimedelta())
    inspector = Inspector("cal-site", spec, EngineSettings(method="mmd-baseline", block_rows=4),
                          {"method": "mmd-baseline"}, DecisionSettings(rule="calibrated"))
    history = 20 * np.random.default_rng(0).chisquare(2, 300)

    def read(s: Any, e: Any) -> pd.DataFrame:
        return readings[(readings.time >= s) & (readings.time < e)]

    outcome = inspector.run(AT, read, history)
    result = outcome.result
    assert result["status"] == "firing", result["summary"]
    z2 = result["detection"]["threshold"]
    named = [s["sensor_id"] for s in result["sensors"] if s["z"] ** 2 >= z2]
    assert result["selected_sensors"] == named and 0 < len(named) < 6
    view = InspectionView.from_result(result)
    assert view.threshold == pytest.approx(math.sqrt(z2))
    assert f"{len(named)} sensors named in the alert" in scores_caption(view)

    w = outcome.windows
    folder = write_inspection_report(result, tmp_path, before_raw=w.before_raw,
                                     after_raw=w.after_raw, before=w.before, after=w.after)
    page = (folder / "index.html").read_text()
    assert scores_caption(view) in page
    assert "not below the alert level" not in page and "below the alert level" in page
    assert "first empty bin" not in page
    assert "<th>|z|</th>" in page and "engine score (mmd-baseline)" in page


# --------------------------------------------------------------------------- titles


def _inside(fig: Any, artist: Any) -> bool:
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    box = artist.get_window_extent(canvas.get_renderer())
    return box.x0 >= 0 and box.x1 <= fig.bbox.width and box.y1 <= fig.bbox.height


@pytest.mark.parametrize("site", ["test-site", "a-water-utility-district-north-east-zone-7"])
@pytest.mark.parametrize("n_sensors", [5, 8, 40])
def test_titles_fit_inside_their_figure(site: str, n_sensors: int) -> None:
    ex = example_inspection(n_sensors, 4, n_changed=2, site=site)
    result = ex.result
    result["engine"]["params"]["selection"] = "gap"
    view = InspectionView.from_result(result)
    bars = figs.score_bars(view).figure
    assert _inside(bars, bars.axes[0].title), bars.axes[0].get_title()
    heat = figs.lambda_heatmap(view).figure
    assert _inside(heat, heat.axes[0].title), heat.axes[0].get_title()
    sensor = view.sensor_ids[0]
    one_panel = figs.profile(view, sensor, before_raw=ex.before_raw, after_raw=ex.after_raw,
                             before=None, after=None).figure
    assert _inside(one_panel, one_panel._suptitle), one_panel._suptitle.get_text()


@pytest.mark.parametrize(("when", "text"), [
    ("2019-03-11T00:00:00Z", "2019-03-11 00:00 UTC"),          # hourly: to the minute
    ("2020-03-09T16:47:01Z", "2020-03-09 16:47:01 UTC"),       # one-second data, every 5 s
])
def test_titles_give_seconds_only_off_the_whole_minute(when: str, text: str) -> None:
    view = InspectionView.from_result(example_inspection(at=when).result)
    figure = figs.score_bars(view).figure
    titles = " ".join(t.get_text() for t in [figure._suptitle, *figure.texts] if t is not None)
    titles += " ".join(ax.get_title() for ax in figure.axes)
    assert f"inspection {text}" in titles, titles
