"""The report of a backfill: "when did it change, and where".

Layout of ``<out_dir>/backfill_<site>_<first>_<last>/``::

    index.html            counts, first firing time, both figures, one row per inspection
    results.jsonl         the inspection results, one per line, in time order
    report.json           which figures were drawn and what each shows
    score_timeline.png    time x sensor heatmap of scores, firing inspections marked
    p_value_timeline.png  p-value per inspection time, log scale, alpha drawn

Both figures share width, margins and time limits so they line up when stacked in the page.
"""
from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from monitor.report import html as H
from monitor.report import style
from monitor.report.errors import ReportInputError, ReportWriteError
from monitor.report.figures import Drawn
from monitor.report.output import render_figure, write_pages, write_text
from monitor.report.view import InspectionView
from monitor.result import InspectionResult

log = logging.getLogger(__name__)

# Fixed margins in inches: the two timeline figures must share their x geometry exactly.
_WIDTH, _LEFT, _RIGHT, _BOTTOM = 13.0, 1.3, 1.4, 1.0


def _legend_below(fig: Any, ax: Any, height: float) -> None:
    """Legend in the bottom margin, under the time axis, where it hides no data."""
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="lower left", bbox_to_anchor=(_LEFT / _WIDTH,
                   0.05 / height), ncols=len(handles), fontsize=8, frameon=False)


def write_backfill_report(results: Sequence[InspectionResult | Mapping[str, Any]],
                          out_dir: Path) -> Path:
    """Write the timeline report of ``results`` (typed inspection results or their JSON
    objects, any order) under ``out_dir`` and return its folder. Raises only
    :class:`ReportWriteError`."""
    started = time.perf_counter()
    views = [InspectionView.from_result(r) for r in results]
    views.sort(key=lambda v: (v.inspection_time is None, v.inspection_time or datetime.min))
    folder = Path(out_dir) / _folder_name(views)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        write_text(folder / "results.jsonl",
                    "".join(json.dumps(v.raw, default=str) + "\n" for v in views))
    except OSError as exc:
        raise ReportWriteError(
            f"cannot write the backfill report folder {str(folder)!r} ({exc}); pass a "
            "writable --report directory") from exc

    timed = [v for v in views if v.inspection_time is not None]
    records = [
        render_figure(folder, "score_timeline", "Where: sensor scores over time",
                      _HEAT_CAPTION, lambda: score_timeline(timed)),
        render_figure(folder, "p_value_timeline", "When: p-value over time",
                      _p_caption(views),
                      lambda: p_value_timeline(timed)),
    ]
    elapsed = time.perf_counter() - started
    manifest = {"folder": folder.name, "generation_s": round(elapsed, 3),
                "inspections": len(views), "figures": [r.to_dict() for r in records]}
    write_pages(folder, manifest, _index_page(views, records, elapsed),
                what="backfill report pages",
                fix="pass a writable --report directory with free space")
    log.info("backfill report %s written in %.2fs", folder, elapsed)
    return folder


def _folder_name(views: list[InspectionView]) -> str:
    sites = sorted({v.site for v in views})
    site = sites[0] if len(sites) == 1 else ("multi-site" if sites else "empty")
    site = re.sub(r"[^A-Za-z0-9._-]+", "-", site).strip("-.") or "site"
    times = [v.inspection_time for v in views if v.inspection_time is not None]
    if not times:
        return f"backfill_{site}"
    fmt = "%Y%m%dT%H%M%SZ"
    return f"backfill_{site}_{min(times).strftime(fmt)}_{max(times).strftime(fmt)}"


# --------------------------------------------------------------------------- figures


def _times(views: list[InspectionView]) -> list[datetime]:
    """The inspection times of ``views`` (the timelines get only views that have one)."""
    times = [v.inspection_time for v in views if v.inspection_time is not None]
    if len(times) != len(views):
        raise ReportInputError("an inspection without a valid inspection_time cannot be "
                               "placed on the time axis")
    return times


def _time_edges(times: list[datetime]) -> np.ndarray:
    """Cell edges (matplotlib date numbers) around each inspection time: halfway to the
    neighbours, so irregular spacing and gaps show as they are."""
    import matplotlib.dates as mdates

    centres = np.asarray(mdates.date2num(times), dtype=float)
    if len(centres) == 1:  # one day wide when there is no neighbour to measure against
        return np.array([centres[0] - 0.5, centres[0] + 0.5])
    mids = (centres[:-1] + centres[1:]) / 2
    return np.concatenate([[2 * centres[0] - mids[0]], mids, [2 * centres[-1] - mids[-1]]])


def _axes(fig: Any, height: float, left: float = _LEFT) -> tuple[Any, Any]:
    """Main axes and a colourbar slot at inch margins (shared by both timelines, whose
    ``left``, :func:`_left_margin`, is the same so that their time axes line up)."""
    w = _WIDTH
    bottom, top = _BOTTOM / height, 0.6 / height
    main = fig.add_axes([left / w, bottom, 1 - (left + _RIGHT) / w, 1 - bottom - top])
    cax = fig.add_axes([1 - (_RIGHT - 0.2) / w, bottom, 0.18 / w, 1 - bottom - top])
    return main, cax


def _left_margin(views: list[InspectionView]) -> float:
    """Inches left of the timelines' axes: room for the heatmap's longest sensor id and
    its axis label. A fixed 1.3 in cut SKAB's ids ("Volume Flow RateRMS") to their last
    14 letters and hid the axis label."""
    ids = {r.sensor_id for v in views for r in v.sensors}
    if not ids:
        return _LEFT
    size = style.sensor_label_fontsize(len(ids))
    return max(_LEFT, style.text_width_in(max(ids, key=len), size) + 0.55)


def _date_axis(ax: Any, edges: np.ndarray) -> None:
    import matplotlib.dates as mdates

    locator = mdates.AutoDateLocator(minticks=4, maxticks=12)
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator))
    ax.set_xlim(edges[0], edges[-1])
    ax.set_xlabel("inspection time (UTC)")


def _span_text(views: list[InspectionView]) -> str:
    return (f"{views[0].site}, {style.time_text(views[0].inspection_time)} to "
            f"{style.time_text(views[-1].inspection_time)}")


def score_timeline(views: list[InspectionView]) -> Drawn:
    """Heatmap: x = inspection time, y = sensors (highest peak score on top); firing
    inspections marked above the map, their selected sensors outlined in their cells."""
    if not views:
        raise ReportInputError("no inspection with a valid inspection_time; nothing to plot")
    import matplotlib.dates as mdates
    from matplotlib.figure import Figure

    sensors: dict[str, float] = {}
    for v in views:
        for r in v.sensors:
            peak = r.score if np.isfinite(r.score) else -np.inf
            sensors[r.sensor_id] = max(sensors.get(r.sensor_id, -np.inf), peak)
    if not sensors:
        raise ReportInputError(
            "no inspection in the backfill has sensor scores (all ended in error?); see the "
            "table below for the reasons")
    order = sorted(sensors, key=lambda s: (-sensors[s], s))
    row = {s: i for i, s in enumerate(order)}
    grid = np.full((len(order), len(views)), np.nan)
    for j, v in enumerate(views):
        for r in v.sensors:
            grid[row[r.sensor_id], j] = r.score
    times = _times(views)
    edges = _time_edges(times)
    centres = mdates.date2num(times)

    height = float(np.clip(2.0 + 0.16 * min(len(order), style.MAX_SENSOR_LABELS), 4.5, 19.0))
    fig = Figure(figsize=(_WIDTH, height), dpi=style.DPI)
    ax, cax = _axes(fig, height, _left_margin(views))
    import matplotlib as mpl

    # Light grey cells: inspections that ended in error, sensors absent at that time.
    cmap = mpl.colormaps[style.SCORE_CMAP].with_extremes(bad="#eeeeee")
    finite = grid[np.isfinite(grid)]
    vmax = float(finite.max()) if finite.size and finite.max() > 0 else 1.0
    mesh = ax.pcolormesh(edges, np.arange(len(order) + 1) - 0.5, np.ma.masked_invalid(grid),
                         cmap=cmap, vmin=0.0, vmax=vmax, shading="flat")
    ax.set_ylim(len(order) - 0.5, -0.5)  # top row = highest peak score
    firing = [j for j, v in enumerate(views) if v.status == "firing"]
    selected_cells = [(centres[j], row[s]) for j in firing for s in views[j].selected if s in row]
    if selected_cells:
        xs, ys = zip(*selected_cells)
        # White halo under the purple ring: visible on dark (low) and bright cells alike.
        ax.scatter(xs, ys, s=34, facecolors="none", edgecolors="white", linewidths=3.0,
                   zorder=3)
        ax.scatter(xs, ys, s=34, facecolors="none", edgecolors=style.SELECTED_COLOUR,
                   linewidths=1.5, zorder=3, label="selected in a firing inspection")
    # Markers a fixed 7 points above the map (any figure height), for firing and error
    # inspections: x in data, y on the top edge.
    from matplotlib.transforms import ScaledTranslation

    trans = ax.get_xaxis_transform() + ScaledTranslation(0, 7 / 72, fig.dpi_scale_trans)
    if firing:
        ax.scatter(centres[firing], np.full(len(firing), 1.0), marker="v", s=45,
                   color=style.SELECTED_COLOUR, transform=trans, clip_on=False, zorder=4,
                   label=f"firing inspection ({len(firing)})")
    errors = [j for j, v in enumerate(views) if v.status == "error"]
    if errors:
        ax.scatter(centres[errors], np.full(len(errors), 1.0), marker="x", s=35,
                   color=style.ERROR_COLOUR, transform=trans, clip_on=False, zorder=4,
                   label=f"error inspection ({len(errors)})")
    labels = order
    _sensor_y_ticks(ax, labels, {s for j in firing for s in views[j].selected})
    ax.set_ylabel("sensor id (highest peak score on top)")
    _date_axis(ax, edges)
    cbar = fig.colorbar(mesh, cax=cax)
    kinds = {v.calibrated for v in views if v.sensors}
    cbar.set_label("|z| of the detection statistic" if kinds == {True}
                   else "score: Π, or |z| when calibrated" if kinds == {True, False}
                   else "importance score Π (unitless)")
    _legend_below(fig, ax, height)
    ax.set_title(f"Sensor scores per inspection, {_span_text(views)} "
                 f"({len(views)} inspections, {len(firing)} firing)", fontsize=11, pad=18)
    return Drawn(fig, {"sensors": len(order), "inspections": len(views),
                       "firing": len(firing), "errors": len(errors)})


def _sensor_y_ticks(ax: Any, labels: list[str], highlight: set[str]) -> None:
    keep = [i for i, s in enumerate(labels) if s in highlight]
    shown = style.thin_positions(len(labels), keep=keep)
    ax.set_yticks(shown)
    ticks = ax.set_yticklabels([labels[i] for i in shown],
                               fontsize=style.sensor_label_fontsize(len(labels)))
    for tick, i in zip(ticks, shown):
        if labels[i] in highlight:
            tick.set_color(style.SELECTED_COLOUR)
            tick.set_fontweight("bold")


def p_value_timeline(views: list[InspectionView]) -> Drawn:
    """p-value per inspection time on a log scale, alpha as a dashed line, firing in purple,
    errors as grey crosses on the bottom edge."""
    if not views:
        raise ReportInputError("no inspection with a valid inspection_time; nothing to plot")
    import matplotlib.dates as mdates
    from matplotlib.figure import Figure

    times = _times(views)
    centres = mdates.date2num(times)
    p = np.array([v.p_value if v.p_value is not None else np.nan for v in views], dtype=float)
    edges = _time_edges(times)
    height = 4.0
    fig = Figure(figsize=(_WIDTH, height), dpi=style.DPI)
    ax, cax = _axes(fig, height, _left_margin(views))
    cax.set_visible(False)  # the slot keeps the x geometry equal to the heatmap's
    finite = np.isfinite(p) & (p > 0)
    floor = float(np.nanmin(p[finite])) / 3 if finite.any() else 1e-3
    floor = min(floor, 1e-3)
    shown = np.where(np.isfinite(p), np.maximum(p, floor), np.nan)  # p = 0 sits on the floor
    ax.plot(centres, shown, color=style.OTHER_COLOUR, lw=1.0, zorder=1)
    firing = np.array([v.status == "firing" for v in views])
    calm = ~firing & np.isfinite(shown)
    ax.scatter(centres[calm], shown[calm], s=22, color="#555555", zorder=2,
               label=f"no alert ({int(calm.sum())})")
    if firing.any():
        ax.scatter(centres[firing], shown[firing], s=40, color=style.SELECTED_COLOUR, zorder=3,
                   label=f"firing ({int(firing.sum())})")
    errors = np.array([v.status == "error" for v in views])
    ax.set_yscale("log")
    ax.set_ylim(floor / 1.5, 1.5)
    if errors.any():
        ax.scatter(centres[errors], np.full(int(errors.sum()), floor / 1.5 * 1.25), marker="x",
                   s=35, color=style.ERROR_COLOUR, zorder=3, label=f"error ({int(errors.sum())})")
    # What each p-value was compared with: α (engine decision) or the alert level of a
    # calibrated decision (result["detection"]["level"]).
    levels = {(v.alert_level, v.calibrated) for v in views if v.alert_level is not None}
    for a, calibrated in sorted(levels):
        ax.axhline(a, color=style.THRESHOLD_COLOUR, ls="--" if not calibrated else ":",
                   lw=1.0, label=f"alert level {style.p_text(a)}" if calibrated else f"α = {a:g}")
    ax.set_ylabel("p-value (log scale)")
    _date_axis(ax, edges)
    ax.grid(alpha=0.3, which="major")
    _legend_below(fig, ax, height)
    ax.set_title(f"Change-test p-value per inspection, {_span_text(views)}", fontsize=11)
    return Drawn(fig, {"inspections": len(views), "p_values": int(np.isfinite(p).sum()),
                       "firing": int(firing.sum()), "errors": int(errors.sum())})


# --------------------------------------------------------------------------- page

_HEAT_CAPTION = (
    "Each column is one inspection, each row one sensor (the highest peak score on top). "
    "Colour is the sensor's score at that inspection (yellow = high, light grey = no score). "
    "Purple triangles above mark firing inspections; purple circles mark the sensors they "
    "selected; grey crosses mark inspections that ended in error.")
_P_CAPTION = (
    "The p-value of the before/after test at each inspection time, on a log scale; the dashed "
    "line is α. Points below it with a selected sensor fire (purple). A p-value of 0 is drawn "
    "on the bottom of the axis.")
_P_CAPTION_CALIBRATED = (
    "The p-value of the detection statistic at each inspection time, from the site's own "
    "history, on a log scale; the dotted line is the alert level. Points below it fire "
    "(purple). A p-value of 0 is drawn on the bottom of the axis.")
_P_CAPTION_MIXED = (
    "The p-value of each inspection's decision, on a log scale: the engine's test against α "
    "(dashed line), or, for calibrated inspections, the detection statistic's p-value from "
    "the site's history against the alert level (dotted line). Purple points fired. A p-value "
    "of 0 is drawn on the bottom of the axis.")


def _p_caption(views: list[InspectionView]) -> str:
    kinds = {v.calibrated for v in views}
    return (_P_CAPTION_CALIBRATED if kinds == {True} else _P_CAPTION_MIXED if True in kinds
            else _P_CAPTION)


def _index_page(views: list[InspectionView], records: list[H.FigureRecord],
                elapsed: float) -> str:
    firing = [v for v in views if v.status == "firing"]
    errors = [v for v in views if v.status == "error"]
    timed = [v for v in views if v.inspection_time is not None]
    span = _span_text(timed) if timed else "no valid inspection time"
    body = [f"<h1>Backfill: {H.esc(span)}</h1>",
            f'<p class="summary">{len(views)} inspections: {len(firing)} firing, '
            f"{len(views) - len(firing) - len(errors)} without alert, {len(errors)} in error."
            + (f" First firing at {H.esc(style.time_text(firing[0].inspection_time))} "
               f"({H.esc(', '.join(firing[0].selected))})." if firing else "") + "</p>"]
    body.extend(H.figure_section(r) for r in records)
    body.append("<h2>Inspections</h2>")
    rows, classes = [], []
    for v in views:
        rows.append([H.esc(style.time_text(v.inspection_time or v.inspection_time_raw)),
                     H.badge(v.status), H.esc(style.p_text(v.p_value)),
                     H.esc(", ".join(v.selected)),
                     H.esc(v.error if v.status == "error" else v.summary)])
        classes.append("sel" if v.status == "firing" else "")
    body.append(H.table(["inspection time", "status", "p-value", "selected", "summary"], rows,
                        numeric={2}, row_classes=classes))
    body.append(f'<p class="muted">Results: <a href="results.jsonl">results.jsonl</a> · '
                f'figure manifest: <a href="report.json">report.json</a> · report generated in '
                f"{elapsed:.2f} s by mmdwatch.</p>")
    return H.page(f"mmdwatch backfill {span}", body)

