"""The figures of one inspection report. Each builder is independent and pure: it takes what
it draws, returns a :class:`Drawn` (a matplotlib ``Figure`` plus facts about what was drawn),
and never touches the disk, so one failing figure cannot lose the others.

Figures are made with ``matplotlib.figure.Figure`` directly, not ``pyplot``: no global
figure registry (nothing leaks in a long-running daemon), no backend switch, safe off the
main thread. Saving to PNG uses the Agg renderer.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from monitor.report import style
from monitor.report.errors import ReportInputError
from monitor.report.view import InspectionView

if TYPE_CHECKING:  # pandas/matplotlib load only when a report is drawn
    import pandas as pd
    from matplotlib.artist import Artist
    from matplotlib.figure import Figure


@dataclass
class Drawn:
    """A built figure and what it shows (counts the tests and the HTML rely on)."""

    figure: Figure
    meta: dict[str, Any] = field(default_factory=dict)


def new_figure(width: float, height: float) -> Figure:
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=style.DPI)


def _title_when(view: InspectionView) -> str:
    return f"{view.site}, inspection {style.time_text(view.inspection_time or view.inspection_time_raw)}"


def _sensor_label_depth(labels: Sequence[str]) -> float:
    """Inches taken below the axes by rotated sensor ids plus the axis label."""
    size = style.sensor_label_fontsize(len(labels))
    longest = max((len(s) for s in labels), default=1)
    return style.text_width_in("x" * longest, size) + 0.55


def _no_weight_note(view: InspectionView) -> str:
    """Why every score is 0, in words (CV-aggregation counts only significant splits)."""
    return (f"All scores are 0: no split of the data showed a significant difference "
            f"(p = {style.p_text(view.p_value)}), so no sensor carries weight")


def _sensor_ticks(ax: Any, labels: Sequence[str], axis: str, selected: set[str]) -> list[int]:
    """Put sensor ids on ``axis`` ("x" rotated 90 degrees, or "y"); thin beyond 100 labels,
    always naming selected sensors, which are drawn bold in the selection colour."""
    keep = [i for i, s in enumerate(labels) if s in selected]
    shown = style.thin_positions(len(labels), keep=keep)
    size = style.sensor_label_fontsize(len(labels))
    if axis == "x":
        ax.set_xticks(shown)
        ticks = ax.set_xticklabels([labels[i] for i in shown], rotation=90, fontsize=size)
    else:
        ax.set_yticks(shown)
        ticks = ax.set_yticklabels([labels[i] for i in shown], fontsize=size)
    for tick, i in zip(ticks, shown):
        if labels[i] in selected:
            tick.set_color(style.SELECTED_COLOUR)
            tick.set_fontweight("bold")
    return shown


# --------------------------------------------------------------------------- scores


def _decision_text(view: InspectionView) -> str:
    """What decided, for titles: the method and selection rule, or the calibrated statistic."""
    if view.calibrated:
        return f"calibrated {view.statistic}"
    method = view.method or "method n/a"
    return f"{method}, {view.selection_rule} rule" if view.selection_rule else method


def _titled_figure(parts: list[str], width: float, height: float, *, left: float,
                   right: float, bottom: float, top: float, **margins: Any) -> tuple[Figure, str]:
    """A figure whose title (``parts``, wrapped to the axes' width) fits: each extra title
    line adds its height to the figure and the top margin, so the axes keep their size."""
    lines = style.title_lines(parts, width - left - right)
    extra = style.TITLE_LINE_IN * (len(lines) - 1)
    fig = new_figure(width, height + extra)
    style.set_margins(fig, left=left, right=right, bottom=bottom, top=top + extra, **margins)
    return fig, "\n".join(lines)


def threshold_placement(view: InspectionView) -> str:
    """Where the score chart shows the threshold: ``"drawn"`` (a dashed line, the axis
    raised to it when it is at most 3x the highest bar), ``"above the axis"`` (farther: named
    in the legend only, so the bars are not squashed) or ``"none"`` (no finite threshold)."""
    thr = view.threshold
    if thr is None or not np.isfinite(thr):
        return "none"
    scores = np.nan_to_num(view.scores, nan=0.0)
    top = float(scores.max()) if len(scores) else 0.0
    ymax = top * 1.1 if top > 0 else 1.0
    return "drawn" if thr < ymax or (top > 0 and thr <= 3 * top) else "above the axis"


def score_bars(view: InspectionView) -> Drawn:
    """Ranked bar chart of every sensor's score; selected highlighted; threshold line.

    Engine decision: the selector's scores and its selection rule's threshold. Calibrated
    decision: ``|z|`` per sensor, the sensors named in the alert, and the line where ``z**2``
    reaches the alert threshold of the detection statistic."""
    if not view.sensors:
        raise ReportInputError(
            "the result lists no sensor scores (status "
            f"{view.status!r}); nothing to rank. Scores appear once an inspection completes")
    from matplotlib.patches import Patch

    ids = view.sensor_ids
    scores = np.nan_to_num(view.scores, nan=0.0)
    chosen = set(view.selected)
    colours = [style.SELECTED_COLOUR if s in chosen else style.OTHER_COLOUR for s in ids]
    depth = _sensor_label_depth(ids)
    verb = "named" if view.calibrated else "selected"
    what = "|z|" if view.calibrated else "scores"
    fig, title = _titled_figure(
        [f"Sensor {what}, {_title_when(view)}:", f"{len(chosen)} of {len(ids)} {verb},",
         f"p = {style.p_text(view.p_value)}", f"({_decision_text(view)})"],
        style.figure_width_for(len(ids)), 3.9 + depth, left=0.85, right=0.2, bottom=depth,
        top=0.4)
    ax = fig.add_subplot()
    x = np.arange(len(ids))
    ax.bar(x, scores, color=colours, width=0.8, edgecolor="none")
    handles: list[Artist] = [Patch(color=style.OTHER_COLOUR, label=f"not {verb}")]
    if chosen:
        handles.insert(0, Patch(color=style.SELECTED_COLOUR,
                                label=f"{verb} in the alert ({len(chosen)})" if view.calibrated
                                else f"selected ({len(chosen)})"))
    top = float(scores.max()) if len(scores) else 0.0
    ax.set_ylim(0, top * 1.1 if top > 0 else 1.0)
    if top <= 0:
        ax.text(0.5, 0.5, _no_weight_note(view), transform=ax.transAxes, ha="center",
                va="center", fontsize=10, color="#444444", wrap=True)
    shown = threshold_placement(view)
    thr = view.threshold
    if shown != "none" and thr is not None:
        label = (f"alert threshold z² = {style.score_text(view.z2_threshold)} "
                 f"(|z| = {style.score_text(view.threshold)})" if view.calibrated
                 else f"selection threshold = {style.score_text(view.threshold)}"
                 + (f" ({view.selection_rule} rule)" if view.selection_rule else ""))
        line_style: dict[str, Any] = {"color": style.THRESHOLD_COLOUR, "ls": "--", "lw": 1.2}
        if shown == "drawn":
            if thr >= ax.get_ylim()[1]:
                ax.set_ylim(0, thr * 1.3)  # a little higher: show the line
            handles.append(ax.axhline(thr, label=label, **line_style))
        else:  # far above every bar (a calibrated "ok"): say so rather than squash the bars
            from matplotlib.lines import Line2D

            handles.append(Line2D([], [], label=f"{label}, above the axis", **line_style))
    _sensor_ticks(ax, ids, "x", chosen)
    ax.set_xlim(-0.6, len(ids) - 0.4)
    if top <= 0:
        ax.set_xlabel("sensor id (all tied)")
    else:
        ax.set_xlabel("sensor id (ranked by |z|)" if view.calibrated
                      else "sensor id (ranked by score)")
    ax.set_ylabel("|z| of the detection statistic (unitless)" if view.calibrated
                  else "importance score Π (unitless)")
    ax.legend(handles=handles, loc="upper right", fontsize=9, frameon=False)
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    ax.set_title(title, fontsize=11)
    return Drawn(fig, {"sensors": len(ids), "selected": len(chosen),
                       "threshold": view.threshold, "threshold_line": shown})


def lambda_heatmap(view: InspectionView) -> Drawn:
    """Pi_lambda as a heatmap: rows = penalty levels lambda, columns = sensors (ranked)."""
    mat = view.scores_per_lambda
    if (mat is None or view.lambdas is None) and view.calibrated:
        raise ReportInputError(
            f"the calibrated decision runs the engine only when it fires, and this inspection "
            f"is {view.status!r}, so there are no per-λ scores; the score chart shows |z|")
    if mat is None or view.lambdas is None:
        raise ReportInputError(
            f"the result has no engine.scores_per_lambda/engine.lambdas (method "
            f"{view.method!r}); the lambda heatmap needs the selector's per-lambda scores")
    n_lambda, n_sensor = mat.shape
    if len(view.lambdas) != n_lambda:
        raise ReportInputError(
            f"engine.lambdas has {len(view.lambdas)} values but scores_per_lambda has "
            f"{n_lambda} rows; the engine result is inconsistent, report it with the result JSON")
    labels = view.engine_labels or (view.sensor_ids if len(view.sensor_ids) == n_sensor
                                    else [str(i) for i in range(n_sensor)])
    if len(labels) != n_sensor:
        raise ReportInputError(
            f"engine.labels has {len(labels)} sensors but scores_per_lambda has {n_sensor} "
            "columns; the engine result is inconsistent, report it with the result JSON")
    # Columns in the ranking's order, so the heatmap reads left to right like the bar chart.
    position = {s: i for i, s in enumerate(view.sensor_ids)}
    order = sorted(range(n_sensor), key=lambda j: (position.get(labels[j], n_sensor + j)))
    mat = mat[:, order]
    labels = [labels[j] for j in order]

    depth = _sensor_label_depth(labels)
    fig, title = _titled_figure(
        ["Per-λ scores Π_λ,", _title_when(view), f"({n_lambda} λ × {n_sensor} sensors)"],
        style.figure_width_for(n_sensor) + 1.2, 1.5 + depth + 0.32 * n_lambda, left=0.95,
        right=0.75, bottom=depth, top=0.4)
    ax = fig.add_subplot()
    finite = mat[np.isfinite(mat)]
    vmax = float(finite.max()) if finite.size and finite.max() > 0 else 1.0
    image = ax.imshow(mat, aspect="auto", cmap=style.SCORE_CMAP, vmin=0.0, vmax=vmax,
                      interpolation="nearest")
    if not (finite.size and finite.max() > 0):
        ax.text(0.5, 0.5, _no_weight_note(view), transform=ax.transAxes, ha="center",
                va="center", fontsize=10, color="white")
    _sensor_ticks(ax, labels, "x", set(view.selected))
    ax.set_yticks(range(n_lambda))
    ax.set_yticklabels([f"{v:.3g}" for v in view.lambdas], fontsize=9)
    ax.set_xlabel("sensor id (same order as the score chart; "
                  f"{'named' if view.calibrated else 'selected'} in purple)")
    ax.set_ylabel("1/C of the logistic regression" if view.method == "regression-baseline"
                  else "L1 penalty λ")
    cbar = fig.colorbar(image, ax=ax, pad=0.01, fraction=0.04)
    cbar.set_label("Π_λ (unitless)")
    ax.set_title(title, fontsize=11)
    return Drawn(fig, {"sensors": n_sensor, "lambdas": n_lambda})


# --------------------------------------------------------------------------- profiles


def _utc_index(frame: pd.DataFrame) -> pd.DataFrame:
    import pandas as pd

    if not isinstance(frame.index, pd.DatetimeIndex):
        raise ReportInputError(
            "window frames need a DatetimeIndex (hourly windows, UTC); got "
            f"{type(frame.index).__name__}. Pass the resampled windows the inspection used")
    if frame.index.tz is None:
        return frame.tz_localize("UTC")
    return frame.tz_convert("UTC")


def _normalised_label(normalise: str | None) -> str:
    if normalise == "before":
        return "value ÷ before-window mean (unitless)"
    if normalise == "first":
        return "value ÷ window's first value (unitless)"
    if normalise == "zscore":
        return "z-score vs before window (before-window sd)"
    if normalise == "none":
        return "value (source units, not normalised)"
    return "normalised value (unitless)"


def spans_days(*frames: pd.DataFrame | None) -> bool:
    """Whether the windows cover 2 days or more, so that values by hour of day mean
    something (the derived ``daily_profile``'s rule, docs/config.md); a testbed's minutes
    do not."""
    import pandas as pd

    times = [t for f in frames if f is not None and len(f) for t in (f.index[0], f.index[-1])]
    return bool(times) and (max(times) - min(times)) >= pd.Timedelta(days=2)


def profile(view: InspectionView, sensor: str, *,
            before_raw: pd.DataFrame | None, after_raw: pd.DataFrame | None,
            before: pd.DataFrame | None, after: pd.DataFrame | None) -> Drawn:
    """One sensor's before/after: raw series across both windows (left) and, right, the
    normalised values by hour of day, mean and ±1 sd band, before vs after; or, where
    the windows cover less than 2 days (:func:`spans_days`), the two windows' histograms
    of the normalised values."""
    import matplotlib.dates as mdates

    have_raw = _has(before_raw, sensor) or _has(after_raw, sensor)
    have_norm = _has(before, sensor) or _has(after, sensor)
    if not (have_raw or have_norm):
        raise ReportInputError(
            f"sensor {sensor!r} is in none of the window frames passed to the report; "
            "pass before/after frames that include it")
    panels = int(have_raw) + int(have_norm)
    row = next((r for r in view.sensors if r.sensor_id == sensor), None)
    score = "|z|" if view.calibrated else "score"
    rank = f"rank {row.rank}, {score} {style.score_text(row.score)}" if row else "not ranked"
    if sensor in set(view.selected):
        rank += ", named" if view.calibrated else ", selected"
    # The suptitle spans the whole figure (0.2 in spare): wrap it to that, not to a panel.
    width = 6.2 * panels + 0.4
    fig, title = _titled_figure([f"Sensor {sensor} ({rank}):", "before vs after,",
                                 _title_when(view)], width, 3.9, left=0.1, right=0.1,
                                bottom=0.62, top=0.62)
    style.set_margins(fig, left=0.95, right=0.2, bottom=0.62,
                      top=0.62 + fig.get_size_inches()[1] - 3.9, gap=1.05, columns=panels)
    axes = fig.subplots(1, panels, squeeze=False)[0]
    meta: dict[str, Any] = {"sensor": sensor, "raw_points": 0, "hours": 0}
    k = 0
    if have_raw:
        ax = axes[k]
        k += 1
        for frame, colour, name in ((before_raw, style.BEFORE_COLOUR, "before"),
                                    (after_raw, style.AFTER_COLOUR, "after")):
            if _has(frame, sensor):
                series = _utc_index(frame)[sensor]
                ax.plot(series.index, series.to_numpy(dtype=float), color=colour, lw=1.0,
                        label=f"{name} window")
                meta["raw_points"] += int(series.notna().sum())
        if view.inspection_time is not None:
            ax.axvline(view.inspection_time, color=style.THRESHOLD_COLOUR, ls="--", lw=1.0,
                       label="inspection time")
        locator = mdates.AutoDateLocator(minticks=4, maxticks=9)
        ax.xaxis.set_major_locator(locator)
        ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator))
        ax.set_xlabel("time (UTC)")
        ax.set_ylabel("raw value (source units)")
        bins = view.windows.resample
        ax.set_title("hourly series, both windows" if bins in ("", "1h")
                     else f"{bins} bins, both windows", fontsize=10)
        ax.legend(fontsize=8, loc="best", frameon=False)
        ax.grid(alpha=0.3)
    if have_norm and not spans_days(before, after):
        _distributions(axes[k], sensor, before, after, view.normalise, meta)
    elif have_norm:
        ax = axes[k]
        for frame, colour, name in ((before, style.BEFORE_COLOUR, "before"),
                                    (after, style.AFTER_COLOUR, "after")):
            if not _has(frame, sensor):
                continue
            series = _utc_index(frame)[sensor].astype(float)
            grouped = series.groupby(series.index.hour)
            mean, spread = grouped.mean(), grouped.std().fillna(0.0)
            hours = mean.index.to_numpy()
            ax.plot(hours, mean.to_numpy(), color=colour, lw=1.8, marker="o", ms=3,
                    label=f"{name}: mean over days")
            ax.fill_between(hours, (mean - spread).to_numpy(), (mean + spread).to_numpy(),
                            color=colour, alpha=0.18, lw=0, label=f"{name}: ±1 sd")
            meta["hours"] = max(meta["hours"], len(hours))
        ax.set_xlim(-0.5, 23.5)
        ax.set_xticks(range(0, 24, 3))
        ax.set_xlabel("hour of day (UTC)")
        ax.set_ylabel(_normalised_label(view.normalise))
        ax.set_title("daily profile, before vs after", fontsize=10)
        ax.legend(fontsize=8, loc="best", frameon=False, ncols=2)
        ax.grid(alpha=0.3)
    fig.suptitle(title, fontsize=11, y=1 - 0.08 / fig.get_size_inches()[1], va="top")
    meta["panels"] = panels
    return Drawn(fig, meta)


def _distributions(ax: Any, sensor: str, before: pd.DataFrame | None,
                   after: pd.DataFrame | None, normalise: str | None,
                   meta: dict[str, Any]) -> None:
    """Histograms of the sensor's normalised values in each window, on shared bins, as
    densities (the windows differ in length)."""
    values = {name: _utc_index(frame)[sensor].astype(float).dropna().to_numpy()
              for frame, name in ((before, "before"), (after, "after")) if _has(frame, sensor)}
    pooled = np.concatenate(list(values.values())) if values else np.zeros(0)
    edges = np.histogram_bin_edges(pooled, bins=30) if pooled.size else 10
    for name, colour in (("before", style.BEFORE_COLOUR), ("after", style.AFTER_COLOUR)):
        if name in values and values[name].size:
            ax.hist(values[name], bins=edges, density=True, color=colour, alpha=0.45,
                    label=f"{name} window ({values[name].size} bins)")
    meta["distributions"] = {name: int(v.size) for name, v in values.items()}
    ax.set_xlabel(_normalised_label(normalise))
    ax.set_ylabel("density")
    ax.set_title("distribution, before vs after", fontsize=10)
    ax.legend(fontsize=8, loc="best", frameon=False)
    ax.grid(alpha=0.3)


def _has(frame: pd.DataFrame | None, sensor: str) -> bool:
    return frame is not None and sensor in frame.columns and len(frame) > 0


# --------------------------------------------------------------------------- network map


def read_sensor_positions(path: Path) -> pd.DataFrame:
    """``sensor_id,x,y`` CSV (extra columns ignored) -> frame indexed by sensor id."""
    import pandas as pd

    try:
        table = pd.read_csv(path, dtype={"sensor_id": str})
    except (OSError, ValueError) as exc:
        raise ReportInputError(
            f"cannot read sensors_file {str(path)!r} ({exc}); point sensors_file at a CSV "
            "with columns sensor_id,x,y") from exc
    missing = {"sensor_id", "x", "y"} - set(table.columns)
    if missing:
        raise ReportInputError(
            f"sensors_file {str(path)!r} lacks column(s) {sorted(missing)} (has "
            f"{list(table.columns)}); it needs a header sensor_id,x,y")
    table = table.dropna(subset=["x", "y"]).drop_duplicates("sensor_id")
    return table.set_index("sensor_id")[["x", "y"]].astype(float)


def read_link_segments(path: Path) -> np.ndarray:
    """``x1,y1,x2,y2`` CSV (extra columns ignored) -> (n, 2, 2) line segments."""
    import pandas as pd

    try:
        table = pd.read_csv(path)
    except (OSError, ValueError) as exc:
        raise ReportInputError(
            f"cannot read links_file {str(path)!r} ({exc}); point links_file at a CSV "
            "with columns x1,y1,x2,y2") from exc
    missing = {"x1", "y1", "x2", "y2"} - set(table.columns)
    if missing:
        raise ReportInputError(
            f"links_file {str(path)!r} lacks column(s) {sorted(missing)}; it needs a header "
            "with x1,y1,x2,y2 (one line segment per row)")
    xy = table[["x1", "y1", "x2", "y2"]].astype(float).dropna().to_numpy()
    return xy.reshape(-1, 2, 2)


def network_map(view: InspectionView, positions: pd.DataFrame,
                segments: np.ndarray | None = None) -> Drawn:
    """Sensors at their map positions, coloured by score, selected ringed and named; links
    (pipes, roads) as thin grey lines underneath."""
    from matplotlib.collections import LineCollection
    from matplotlib.lines import Line2D

    scores = {r.sensor_id: r.score for r in view.sensors}
    chosen = set(view.selected)
    placed = [s for s in positions.index if s in scores and np.isfinite(scores[s])]
    unscored = [s for s in positions.index if s not in placed]
    if not placed and not unscored:
        raise ReportInputError("sensors_file lists no sensor with coordinates; nothing to map")

    # Figure shaped like the network (plus room for the colourbar and title).
    span_x = float(np.ptp(positions["x"])) if len(positions) > 1 else 1.0
    span_y = float(np.ptp(positions["y"])) if len(positions) > 1 else 1.0
    if segments is not None and len(segments):
        span_x = max(span_x, float(np.ptp(segments[:, :, 0])))
        span_y = max(span_y, float(np.ptp(segments[:, :, 1])))
    aspect = span_y / span_x if span_x > 0 else 1.0
    fig = new_figure(10.5, float(np.clip(9.0 * aspect + 1.3, 4.5, 11.0)))
    style.set_margins(fig, left=0.9, right=0.35, bottom=0.6, top=0.65)
    ax = fig.add_subplot()
    handles: list[Any] = []
    n_links = 0
    if segments is not None and len(segments):
        ax.add_collection(LineCollection(list(segments), colors=style.LINK_COLOUR,
                                         linewidths=0.7, zorder=1))
        n_links = len(segments)
        handles.append(Line2D([], [], color=style.LINK_COLOUR, lw=1.5,
                              label=f"links ({n_links})"))
    if unscored:
        pts = positions.loc[unscored]
        ax.scatter(pts["x"], pts["y"], s=40, facecolors="white", edgecolors=style.ERROR_COLOUR,
                   linewidths=1.0, zorder=2)
        handles.append(Line2D([], [], ls="", marker="o", mfc="white", mec=style.ERROR_COLOUR,
                              label=f"no score ({len(unscored)})"))
    if placed:
        # Lowest scores drawn first so the high ones sit on top where sensors crowd.
        placed.sort(key=lambda s: scores[s])
        pts = positions.loc[placed]
        values = np.array([scores[s] for s in placed])
        vmax = float(values.max()) if values.max() > 0 else 1.0
        dots = ax.scatter(pts["x"], pts["y"], c=values, cmap=style.SCORE_CMAP, vmin=0.0,
                          vmax=vmax, s=70, edgecolors="#333333", linewidths=0.6, zorder=3)
        cbar = fig.colorbar(dots, ax=ax, shrink=0.8, pad=0.015, fraction=0.05)
        cbar.set_label("importance score Π (unitless)")
        sel = [s for s in placed if s in chosen]
        if sel:
            ax.scatter(positions.loc[sel, "x"], positions.loc[sel, "y"], s=260,
                       facecolors="none", edgecolors=style.SELECTED_COLOUR, linewidths=2.2,
                       zorder=4)
            handles.append(Line2D([], [], ls="", marker="o", mfc="none", ms=12, mew=2.2,
                                  mec=style.SELECTED_COLOUR, label=f"selected ({len(sel)})"))
        # Name every sensor on small maps; on crowded ones only selected and top 10.
        top = set(sorted(placed, key=lambda s: -scores[s])[:10])
        named = placed if len(placed) <= 40 else [s for s in placed if s in chosen or s in top]
        for s in named:
            bold = s in chosen
            ax.annotate(s, (positions.at[s, "x"], positions.at[s, "y"]),
                        xytext=(6, 5), textcoords="offset points", zorder=5,
                        fontsize=9 if bold else 7, fontweight="bold" if bold else "normal",
                        color=style.SELECTED_COLOUR if bold else "#222222")
    ax.set_aspect("equal", adjustable="datalim")
    ax.autoscale_view()
    ax.set_xlabel("x (map units)")
    ax.set_ylabel("y (map units)")
    if handles:
        ax.legend(handles=handles, loc="best", fontsize=8, framealpha=0.85)
    names = ", ".join(view.selected[:6]) + (" …" if len(view.selected) > 6 else "")
    off_map = [s for s in view.sensor_ids if s not in positions.index]
    second = f"selected: {names}" if names else "no sensor selected"
    if placed and not any(scores[s] > 0 for s in placed):
        second += " (all scores are 0)"
    if off_map:
        second += f"; {len(off_map)} scored sensor(s) have no coordinates in sensors_file"
    ax.set_title(f"Network map: sensor scores, {_title_when(view)}\n{second}", fontsize=11)
    return Drawn(fig, {"sensors": len(placed), "unscored": len(unscored),
                       "selected": len([s for s in placed if s in chosen]), "links": n_links,
                       "off_map": off_map})
