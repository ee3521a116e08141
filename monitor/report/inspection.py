"""One inspection's report folder: figures, ``index.html`` and the result JSON beside them.

Layout of ``<out_dir>/<site>_<YYYYmmddTHHMMSSZ>/``::

    index.html          summary, p-value, data quality, every figure with how to read it
    result.json         the inspection result exactly as delivered
    report.json         which figures were drawn, skipped or failed, and what each shows
    scores.png          ranked sensor scores, selected highlighted, threshold line
    lambda_heatmap.png  Pi_lambda, lambda x sensor
    profile_<k>_<id>.png  before/after for the top 3 sensors
    network_map.png     when a sensors_file is given

Each figure is built and saved on its own; a failure is logged and listed in the page, and
the other figures still appear.
"""
from __future__ import annotations

import functools
import json
import logging
import math
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from monitor.report import figures as figs
from monitor.report import html as H
from monitor.report import style
from monitor.report.errors import ReportInputError, ReportWriteError
from monitor.report.output import render_figure, write_pages, write_text
from monitor.report.view import InspectionView
from monitor.result import DetectionBlock, InspectionResult

if TYPE_CHECKING:
    import pandas as pd

log = logging.getLogger(__name__)

TOP_PROFILES = 3


def write_inspection_report(
    result: InspectionResult | Mapping[str, Any],
    out_dir: Path,
    *,
    before_raw: pd.DataFrame | None = None,
    after_raw: pd.DataFrame | None = None,
    before: pd.DataFrame | None = None,
    after: pd.DataFrame | None = None,
    sensors_file: Path | None = None,
    links_file: Path | None = None,
) -> Path:
    """Write the report of one inspection under ``out_dir`` and return its folder.

    ``result`` is the inspection result: the typed :class:`monitor.result.InspectionResult`
    or its JSON object (docs/result.md), read back with ``InspectionResult.from_dict``; the
    JSON object is written beside the report as delivered.
    Frames are the hourly windows (DatetimeIndex, UTC; one column per sensor): ``*_raw`` as
    measured, ``before``/``after`` normalised as the engine saw them. All optional: what is
    missing is named in the page instead of drawn.

    Raises only :class:`ReportWriteError` when the folder cannot be written; a figure that
    fails to draw is logged and reported in ``index.html``.
    """
    started = time.perf_counter()
    view = InspectionView.from_result(result)
    folder = Path(out_dir) / view.folder_name()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        write_text(folder / "result.json", json.dumps(view.raw, indent=2, default=str,
                                                       allow_nan=True) + "\n")
    except OSError as exc:
        raise ReportWriteError(
            f"cannot write the report folder {str(folder)!r} ({exc}); make report_dir a "
            "writable directory or unset it") from exc

    records: list[H.FigureRecord] = [
        render_figure(folder, "scores", "Ranked sensor scores", scores_caption(view),
                      lambda: figs.score_bars(view)),
        render_figure(folder, "lambda_heatmap", "Scores per penalty level λ (Π_λ)",
                      heatmap_caption(view), lambda: figs.lambda_heatmap(view)),
    ]
    records.extend(_profiles(folder, view, before_raw, after_raw, before, after))
    records.append(_map(folder, view, sensors_file, links_file))

    elapsed = time.perf_counter() - started
    manifest = {"folder": folder.name, "generation_s": round(elapsed, 3),
                "figures": [r.to_dict() for r in records]}
    write_pages(folder, manifest, _index_page(view, records, elapsed), what="report pages",
                fix="make report_dir a writable directory with free space")
    log.info("inspection report %s written in %.2fs (%d figures drawn)", folder,
             elapsed, sum(r.status == "drawn" for r in records))
    return folder


# --------------------------------------------------------------------------- figures


def _profiles(folder: Path, view: InspectionView, before_raw: pd.DataFrame | None,
              after_raw: pd.DataFrame | None, before: pd.DataFrame | None,
              after: pd.DataFrame | None) -> list[H.FigureRecord]:
    frames = [f for f in (before_raw, after_raw, before, after) if f is not None]
    if not frames:
        return [H.FigureRecord(
            key="profiles", title="Before/after profiles", caption="", status="skipped",
            reason="no window data were passed to the report (the caller gives the before/"
                   "after frames; `mmdwatch inspect --report` does)")]
    available = set().union(*(set(map(str, f.columns)) for f in frames))
    ranked = [s for s in view.sensor_ids if s in available]
    caption = _PROFILE_CAPTION if figs.spans_days(before, after) else _SHORT_PROFILE_CAPTION
    if not ranked:  # an error result has no ranking: show the sensors the data hold
        ranked = sorted(available)
        caption = ("The inspection produced no ranking, so these are the first sensors by id, "
                   "to show the data it had. " + caption)
    records = []
    for k, sensor in enumerate(ranked[:TOP_PROFILES], start=1):
        safe = re.sub(r"[^A-Za-z0-9._-]+", "_", sensor)
        records.append(render_figure(
            folder, f"profile_{k}", f"Before/after profile of sensor {sensor}",
            caption,
            functools.partial(figs.profile, view, sensor, before_raw=before_raw,
                              after_raw=after_raw, before=before, after=after),
            file=f"profile_{k}_{safe}.png"))
    return records


def _map(folder: Path, view: InspectionView, sensors_file: Path | None,
         links_file: Path | None) -> H.FigureRecord:
    title = "Network map"
    if sensors_file is None:
        return H.FigureRecord(key="network_map", title=title, caption="", status="skipped",
                              reason="no sensors_file configured (set `sensors_file:` to a CSV "
                                     "with sensor_id,x,y to get a map)")

    def build() -> figs.Drawn:
        positions = figs.read_sensor_positions(Path(sensors_file))
        segments = None
        if links_file is not None:
            try:
                segments = figs.read_link_segments(Path(links_file))
            except ReportInputError as exc:  # the map is still useful without the links
                log.warning("network map drawn without links: %s", exc)
        return figs.network_map(view, positions, segments)

    return render_figure(folder, "network_map", title, _MAP_CAPTION, build)


# --------------------------------------------------------------------------- page

#: What each method's per-sensor score is (engine/selectors.py).
_SCORE_MEANING = {
    "cv-aggregation": "aggregated importance score Π: its ARD weight averaged over the L1 "
                      "penalty levels λ and the cross-validation splits whose test was "
                      "significant",
    "model-selection": "ARD weight at the one penalty level λ with the best validation power",
    "mmd-baseline": "ARD weight of the MMD kernel fitted without penalty (λ = 0)",
    "regression-baseline": "absolute coefficient of the L1 logistic regression",
}
#: What each selection rule of engine/selection.py does, in words (the keys are its RULES).
SELECTION_RULES = {
    "gap": "the largest gap between consecutive scores, sorted and scaled by the highest score "
           "(the gap from the lowest score down to 0 counts too); the sensors above the gap are "
           "selected",
    "histogram": "the widest run of empty bins of a 100-bin histogram of the scores; the "
                 "sensors above it are selected",
    "first_empty": "the first empty bin of a 100-bin histogram of the scores; the sensors "
                   "above it are selected",
}


def scores_caption(view: InspectionView) -> str:
    """How to read the score chart (escaped HTML): what the bars are, what made the purple
    ones and where the dashed line is, as the result says the inspection decided."""
    if view.calibrated:
        return _calibrated_scores_caption(view)
    meaning = _SCORE_MEANING.get(view.method or "", "importance score")
    parts = [f"Every sensor's {H.esc(meaning)}, highest first."]
    n = len(view.selected)
    thr = view.threshold
    rule = view.selection_rule
    if thr is None or not math.isfinite(thr):
        parts.append("No score is positive, so the selection rule selects no sensor and no "
                     "threshold line is drawn." if view.sensors else "")
    else:
        line = f"the dashed line at {H.esc(style.score_text(thr))} is the selection threshold"
        if rule:
            how = f"{line} of the engine's <code>{H.esc(rule)}</code> selection rule"
            how += f": {SELECTION_RULES[rule]}." if rule in SELECTION_RULES else "."
        else:
            how = (f"{line} the engine reported (this result does not record its selection "
                   "rule).")
        purple = (f"Purple bars are the {n} sensor{'s' if n != 1 else ''} selected as carrying "
                  "the change; " if n else "No sensor is selected; ")
        parts.append(purple + how)
    if n and view.p_value is not None and view.alpha is not None and view.p_value >= view.alpha:
        parts.append(f"The test was not significant (p = {H.esc(style.p_text(view.p_value))} ≥ "
                     f"α = {H.esc(style.p_text(view.alpha))}), so the selection raises no "
                     "alert.")
    parts.append("A high score means the sensor's distribution differs between the windows in "
                 "a way the test detects.")
    return " ".join(p for p in parts if p)


def _calibrated_scores_caption(view: InspectionView) -> str:
    stat = H.esc(view.statistic)
    parts = [(f"Sensors ranked by |z| of the detection statistic (<code>{stat}</code>), "
              "highest first: z is the shift of the sensor's residual (its reading minus its "
              "before-window profile, common mode removed) in the after window against the end "
              "of the before window, in units of that shift's spread over the before window.")]
    z2 = view.z2_threshold
    n = len(view.selected)
    level = view.alert_level
    if z2 is None or not math.isfinite(z2):
        parts.append("No alert threshold yet (the statistic's history is too short or cannot "
                     "reach the alert level), so no sensor is named and no line is drawn.")
    else:
        at = f"|z| = {H.esc(style.score_text(math.sqrt(z2)))}"
        where = (f"the dashed line at {at}" if figs.threshold_placement(view) == "drawn" else
                 f"{at}, far above every bar (named in the legend, not drawn),")
        line = (f"{where} is where z² reaches the alert threshold "
                f"{H.esc(style.score_text(z2))} (detection.threshold)")
        if n:
            below = [r.sensor_id for r in view.sensors
                     if r.sensor_id in set(view.selected) and r.score ** 2 < z2]
            parts.append(f"Purple bars are the {n} sensor{'s' if n != 1 else ''} named in the "
                         f"alert, those whose z² alone is at or above the threshold; {line}.")
            if below:
                parts.append(f"No sensor's z² reaches it alone, so the strongest "
                             f"({H.esc(', '.join(below))}) is named.")
        else:
            why = (f"the statistic's p-value {H.esc(style.p_text(view.p_value))} is not below "
                   f"the alert level {H.esc(style.p_text(level))}" if level is not None
                   and view.p_value is not None else "the inspection did not fire")
            parts.append(f"No sensor is named: {why}; {line}.")
    if any(r.engine_score is not None for r in view.sensors):
        parts.append(f"The engine ({H.esc(view.method or 'n/a')}) ran beside the statistic on "
                     "its residuals; its scores are in the sensor table and the λ heatmap, "
                     "not used to rank.")
    return " ".join(parts)


def heatmap_caption(view: InspectionView) -> str:
    method = view.method
    base = ("Score of each sensor (columns, same order as the bar chart) at each L1 penalty "
            "level λ (rows). A sensor that stays bright as λ grows keeps its weight under a "
            "strong sparsity penalty: its change is robust. ")
    if view.calibrated:
        base = ("These are the engine's scores, from its run beside the calibrated decision "
                "on the detection statistic's residuals (the bar chart ranks by |z|). " + base)
    how = {
        "cv-aggregation": "The aggregated score is the mean over the rows (each row already "
                          "averages the cross-validation splits, counting only splits whose "
                          "test was significant).",
        "model-selection": "Model-selection keeps one row: the λ with the best validation "
                           "power among the significant ones.",
        "mmd-baseline": "The MMD baseline uses no penalty (λ = 0): a single row.",
        "regression-baseline": "Rows are 1/C of the L1 logistic regression; the score is the "
                               "absolute coefficient at the C chosen by cross-validation.",
    }
    return base + how.get(method or "", "")


_PROFILE_CAPTION = (
    'Left: the hourly series over the <span class="before">before</span> and '
    '<span class="after">after</span> windows, in the source\'s units, dashed line at the '
    "inspection time. Right: the normalised values by hour of day (line: mean over the days "
    "of the window; band: ±1 standard deviation). A shift or change of shape between the two "
    "curves is what the test sees.")
_SHORT_PROFILE_CAPTION = (
    'Left: the series over the <span class="before">before</span> and '
    '<span class="after">after</span> windows in their bins, in the source\'s units, dashed '
    "line at the inspection time. Right: how the normalised values of each window are "
    "distributed (windows of less than 2 days have no daily profile to compare). A shift "
    "or change of shape between the two is what the test sees.")
_MAP_CAPTION = (
    "Sensors at their map positions, coloured by score (yellow = high). Selected sensors are "
    "ringed in purple and named in bold. Grey lines are the network links.")


def _index_page(view: InspectionView, records: list[H.FigureRecord], elapsed: float) -> str:
    when = style.time_text(view.inspection_time or view.inspection_time_raw)
    body = [f"<h1>{H.esc(view.site)}: inspection at {H.esc(when)} {H.badge(view.status)}</h1>"]
    if view.summary:
        body.append(f'<p class="summary">{H.esc(view.summary)}</p>')
    if view.status == "error" or view.error:
        body.append('<div class="errorbox"><strong>The inspection ended in error.</strong> '
                    f"{H.esc(view.error or 'No error message was recorded.')}</div>")
    body.append("<h2>Test</h2>")
    body.append(H.key_values(_facts(view)))
    if view.sensors and not any(r.score > 0 for r in view.sensors):
        body.append('<p class="note">Every sensor scored 0: no cross-validation split showed a '
                    "significant difference, so the ranking below is a tie (ordered by id). "
                    "The profiles still show the top sensors' data.</p>")
    notes = _quality_notes(view)
    body.append("<h2>Data quality</h2>")
    if notes:
        body.extend(f'<p class="note">{n}</p>' for n in notes)
    else:
        body.append("<p>No missing data and no dropped sensors.</p>")
    body.extend(H.figure_section(r) for r in records)
    if view.sensors:
        body.append("<h2>All sensors</h2>")
        body.append(_sensor_table(view))
    body.append(f'<p class="muted">Result JSON: <a href="result.json">result.json</a> · '
                f'figure manifest: <a href="report.json">report.json</a> · report generated in '
                f"{elapsed:.2f} s by mmdwatch.</p>")
    return H.page(f"mmdwatch {view.site} {when} ({view.status})", body)


def _facts(view: InspectionView) -> list[tuple[str, str]]:
    p = H.esc(style.p_text(view.p_value))
    level = view.alert_level
    if view.p_value is not None and level is not None:
        if view.calibrated:
            verdict = "below" if view.p_value < level else "not below"
            p += f" ({verdict} the alert level {H.esc(style.p_text(level))})"
        else:
            verdict = "significant" if view.p_value < level else "not significant"
            p += f" ({verdict} at α = {H.esc(style.p_text(level))})"
    rows = [("status", H.badge(view.status)), ("p-value", p)]
    if view.calibrated:
        det = view.detection or DetectionBlock()
        z2 = view.z2_threshold
        history_n = "n/a" if det.history_n is None else det.history_n
        rows.append(("decision", (
            f"calibrated: detection statistic <code>{H.esc(det.statistic or 'n/a')}"
            f"</code> = {H.esc(style.score_text(det.value))}, alert threshold "
            f"{H.esc(style.score_text(z2) if z2 is not None else 'not set yet')}, from "
            f"{H.esc(history_n)} past values")))
    beside = ""
    if view.calibrated and view.method:
        beside = (" (ran beside the calibrated decision)" if view.result.engine is not None
                  else " (not run: it runs beside the calibrated decision when that fires)")
    rows.append(("method", H.esc(view.method or "n/a") + beside))
    if view.selection_rule and not view.calibrated:
        rows.append(("selection rule", f"<code>{H.esc(view.selection_rule)}</code>"))
    rows.append(("named sensors" if view.calibrated else "selected sensors",
                 H.esc(", ".join(view.selected) or "none")
                 + f" ({len(view.selected)} of {len(view.sensors)})"))
    w = view.windows
    for name, win in (("before", w.before), ("after", w.after)):
        if win.start or win.end:
            rows.append((f"{name} window", (f'<span class="{name}">{H.esc(win.start)} → '
                         f'{H.esc(win.end)}</span>, n = {H.esc(win.n)}')))
    if w.resample or w.aggregate or w.normalise:
        rows.append(("resampling", H.esc(f"{w.resample or 'n/a'} {w.aggregate}, "
                                         f"normalised by {w.normalise or 'n/a'}")))
    result = view.result
    if result.test.seed is not None:
        rows.append(("seed", H.esc(result.test.seed)))
    gen = result.generator
    if gen.version:  # a result read back without its generator block has none
        rows.append(("generator", H.esc(
            f"{gen.name} {gen.version}, device {gen.device}, {gen.runtime_s} s")))
    if result.fingerprint:
        rows.append(("fingerprint", f"<code>{H.esc(result.fingerprint)}</code>"))
    return rows


def _quality_notes(view: InspectionView) -> list[str]:
    """Plain sentences (escaped HTML) about what the test did not see as measured."""
    q = view.data_quality
    notes = []
    used, seen = q.sensors_used, q.sensors_seen
    if used is not None and seen is not None and used < seen:
        notes.append(f"{used} of {seen} sensors seen in the windows were tested.")
    frac = q.missing_fraction
    if frac is not None and float(frac) > 0:
        notes.append(f"{float(frac):.2%} of the hourly values in the windows were missing "
                     "(gaps inside a window are interpolated before the test).")
    reasons = q.dropped_reasons or {}
    if q.dropped_sensors:
        items = [H.esc(sid) + (f" ({H.esc(reasons[sid])})" if reasons.get(sid) else "")
                 for sid in q.dropped_sensors]
        notes.append(f"{len(q.dropped_sensors)} sensor(s) left out of the test: "
                     f"{'; '.join(items)}.")
    if q.unscaled_sensors:
        items = [f"{H.esc(k)} ({H.esc(v)})" for k, v in q.unscaled_sensors.items()]
        notes.append(f"Not normalised: {'; '.join(items)}.")
    for key, value in q.extra.items():  # anything else the inspection recorded
        if value not in (None, [], {}, 0):
            notes.append(f"{H.esc(key)}: {H.esc(json.dumps(value, default=str))}")
    return notes


def _sensor_table(view: InspectionView) -> str:
    """Every sensor, ranked; window means in source units when the result has them."""
    raw = all(r.raw_mean_before is not None for r in view.sensors)
    unit = "source units" if raw else "normalised"
    engine = any(r.engine_score is not None for r in view.sensors)
    rows, classes = [], []
    for r in view.sensors:
        before, after = ((r.raw_mean_before, r.raw_mean_after) if raw
                         else (r.mean_before, r.mean_after))
        change = ""
        if before not in (None, 0) and after is not None:
            change = f"{after - before:+.4g} ({(after - before) / abs(before):+.2%})"
        cells = [str(r.rank), H.esc(r.sensor_id), style.score_text(r.score),
                 "yes" if r.sensor_id in view.selected else "",
                 _mean_text(before), _mean_text(after), change]
        if engine:
            cells.append(style.score_text(r.engine_score))
        rows.append(cells)
        classes.append("sel" if r.sensor_id in view.selected else "")
    header = ["rank", "sensor", "|z|" if view.calibrated else "score",
              "named" if view.calibrated else "selected", f"mean before ({unit})",
              f"mean after ({unit})", "change"]
    if engine:
        header.append(f"engine score ({view.method or 'n/a'})")
    return H.table(header, rows, numeric={0, 2, 4, 5, 6, 7}, row_classes=classes)


def _mean_text(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.6g}"
