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

import json
import logging
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from monitor.report import figures as figs
from monitor.report import html as H
from monitor.report import style
from monitor.report.errors import ReportInputError, ReportWriteError
from monitor.report.output import render_figure, write_pages, write_text
from monitor.report.view import InspectionView

if TYPE_CHECKING:
    import pandas as pd

log = logging.getLogger(__name__)

TOP_PROFILES = 3


def write_inspection_report(
    result: dict[str, Any],
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

    ``result`` is the inspection result dict (docs/result.md, with ``engine`` and ``error``).
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
        write_text(folder / "result.json", json.dumps(result, indent=2, default=str,
                                                       allow_nan=True) + "\n")
    except OSError as exc:
        raise ReportWriteError(
            f"cannot write the report folder {str(folder)!r} ({exc}); make report_dir a "
            "writable directory or unset it") from exc

    records: list[H.FigureRecord] = [
        render_figure(folder, "scores", "Ranked sensor scores", _SCORES_CAPTION,
                      lambda: figs.score_bars(view)),
        render_figure(folder, "lambda_heatmap", "Scores per penalty level λ (Π_λ)",
                      _heatmap_caption(view.method), lambda: figs.lambda_heatmap(view)),
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


def _profiles(folder: Path, view: InspectionView, before_raw: Any, after_raw: Any,
              before: Any, after: Any) -> list[H.FigureRecord]:
    frames = [f for f in (before_raw, after_raw, before, after) if f is not None]
    if not frames:
        return [H.FigureRecord(
            key="profiles", title="Before/after profiles", caption="", status="skipped",
            reason="no window data were passed to the report (the caller gives the before/"
                   "after frames; `mmdwatch inspect --report` does)")]
    available = set().union(*(set(map(str, f.columns)) for f in frames))
    ranked = [s for s in view.sensor_ids if s in available]
    caption = _PROFILE_CAPTION
    if not ranked:  # an error result has no ranking: show the sensors the data hold
        ranked = sorted(available)
        caption = ("The inspection produced no ranking, so these are the first sensors by id, "
                   "to show the data it had. " + _PROFILE_CAPTION)
    records = []
    for k, sensor in enumerate(ranked[:TOP_PROFILES], start=1):
        safe = re.sub(r"[^A-Za-z0-9._-]+", "_", sensor)
        records.append(render_figure(
            folder, f"profile_{k}", f"Before/after profile of sensor {sensor}",
            caption,
            lambda s=sensor: figs.profile(view, s, before_raw=before_raw, after_raw=after_raw,
                                          before=before, after=after),
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

_SCORES_CAPTION = (
    "Every sensor's aggregated importance score Π, highest first. Purple bars are the sensors "
    "selected as carrying the change; the dashed line is the selection threshold (the first "
    "empty bin of the score histogram). A high score means the sensor's distribution differs "
    "between the windows in a way the test detects.")


def _heatmap_caption(method: str | None) -> str:
    base = ("Score of each sensor (columns, same order as the bar chart) at each L1 penalty "
            "level λ (rows). A sensor that stays bright as λ grows keeps its weight under a "
            "strong sparsity penalty: its change is robust. ")
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
    if view.p_value is not None and view.alpha is not None:
        verdict = "significant" if view.p_value < view.alpha else "not significant"
        p += f" ({verdict} at α = {H.esc(style.p_text(view.alpha))})"
    rows = [("status", H.badge(view.status)), ("p-value", p),
            ("method", H.esc(view.method or "n/a")),
            ("selected sensors", H.esc(", ".join(view.selected) or "none")
             + f" ({len(view.selected)} of {len(view.sensors)})")]
    w = view.windows
    for name, cls in (("before", "before"), ("after", "after")):
        win = w.get(name) if isinstance(w.get(name), dict) else None
        if win:
            rows.append((f"{name} window", (f'<span class="{cls}">{H.esc(win.get("start"))} → '
                         f'{H.esc(win.get("end"))}</span>, n = {H.esc(win.get("n"))}')))
    if w:
        rows.append(("resampling", H.esc(f"{w.get('resample', 'n/a')} {w.get('aggregate', '')}, "
                                         f"normalised by {w.get('normalise', 'n/a')}")))
    test = view.result.get("test") if isinstance(view.result.get("test"), dict) else {}
    if "seed" in test:
        rows.append(("seed", H.esc(test["seed"])))
    gen = view.result.get("generator")
    if isinstance(gen, dict):
        rows.append(("generator", H.esc(
            f"{gen.get('name', '')} {gen.get('version', '')}, device {gen.get('device', 'n/a')}, "
            f"{gen.get('runtime_s', 'n/a')} s")))
    if view.result.get("fingerprint"):
        rows.append(("fingerprint", f"<code>{H.esc(view.result['fingerprint'])}</code>"))
    return rows


def _quality_notes(view: InspectionView) -> list[str]:
    """Plain sentences (escaped HTML) about what the test did not see as measured."""
    q = view.data_quality
    notes = []
    used, seen = q.get("sensors_used"), q.get("sensors_seen")
    if isinstance(used, int) and isinstance(seen, int) and used < seen:
        notes.append(f"{used} of {seen} sensors seen in the windows were tested.")
    frac = q.get("missing_fraction")
    try:
        if frac is not None and float(frac) > 0:
            notes.append(f"{float(frac):.2%} of the hourly values in the windows were missing "
                         "(gaps inside a window are interpolated before the test).")
    except (TypeError, ValueError):
        pass
    reasons = q.get("dropped_reasons") if isinstance(q.get("dropped_reasons"), dict) else {}
    dropped = q.get("dropped_sensors") or []
    if dropped:
        items = []
        for d in dropped:
            sid = d.get("sensor_id", d.get("sensor", "?")) if isinstance(d, dict) else d
            why = d.get("reason") if isinstance(d, dict) else reasons.get(str(d))
            items.append(H.esc(sid) + (f" ({H.esc(why)})" if why else ""))
        notes.append(f"{len(dropped)} sensor(s) left out of the test: {'; '.join(items)}.")
    unscaled = q.get("unscaled_sensors")
    if isinstance(unscaled, dict) and unscaled:
        items = [f"{H.esc(k)} ({H.esc(v)})" for k, v in unscaled.items()]
        notes.append(f"Not normalised: {'; '.join(items)}.")
    known = {"missing_fraction", "dropped_sensors", "dropped_reasons", "sensors_seen",
             "sensors_used", "unscaled_sensors"}
    for key, value in q.items():  # anything else the inspection recorded
        if key not in known and value not in (None, [], {}, 0):
            notes.append(f"{H.esc(key)}: {H.esc(json.dumps(value, default=str))}")
    return notes


def _sensor_table(view: InspectionView) -> str:
    """Every sensor, ranked; window means in source units when the result has them."""
    raw = all(r.raw_mean_before is not None for r in view.sensors)
    unit = "source units" if raw else "normalised"
    rows, classes = [], []
    for r in view.sensors:
        before, after = ((r.raw_mean_before, r.raw_mean_after) if raw
                         else (r.mean_before, r.mean_after))
        change = ""
        if before not in (None, 0) and after is not None:
            change = f"{after - before:+.4g} ({(after - before) / abs(before):+.2%})"
        rows.append([str(r.rank), H.esc(r.sensor_id), style.score_text(r.score),
                     "yes" if r.sensor_id in view.selected else "",
                     _mean_text(before), _mean_text(after), change])
        classes.append("sel" if r.sensor_id in view.selected else "")
    return H.table(["rank", "sensor", "score", "selected", f"mean before ({unit})",
                    f"mean after ({unit})", "change"], rows, numeric={0, 2, 4, 5, 6},
                   row_classes=classes)


def _mean_text(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.6g}"
