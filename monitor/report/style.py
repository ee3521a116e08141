"""One visual vocabulary for every report figure: colours, sizes, label thinning, time text.

Why a module of its own: an operator compares figures side by side, so "before" must be the
same blue and "after" the same vermillion everywhere, selected sensors the same purple, and
sensor ids must stay legible whether the network has 5 or 500 sensors.
"""
from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import numpy as np

from connectors.timeutil import on_whole_minute
from connectors.timeutil import parse_time as _parse_time

# Okabe-Ito colours: distinguishable with the common colour-vision deficiencies.
BEFORE_COLOUR = "#0072B2"  # blue: the before window, in every figure
AFTER_COLOUR = "#D55E00"  # vermillion: the after window, in every figure
SELECTED_COLOUR = "#7B2D8E"  # purple: selected sensors / firing inspections
OTHER_COLOUR = "#B8B8B8"  # grey: sensors that were not selected
THRESHOLD_COLOUR = "#333333"
LINK_COLOUR = "#C9C9C9"  # network links on the map
ERROR_COLOUR = "#7F7F7F"
SCORE_CMAP = "viridis"  # scores: dark = low, yellow = high; no purple at the top end,
#                         so the purple selection marks stay visible on high scores.

DPI = 110
#: Above this many sensors, tick labels are thinned (selected sensors are always kept).
MAX_SENSOR_LABELS = 100


def sensor_label_fontsize(n: int) -> float:
    """Font size (points) for ``n`` sensor tick labels on one axis."""
    if n <= 30:
        return 9.0
    if n <= 60:
        return 7.5
    return 6.0


def thin_positions(n: int, keep: Sequence[int] = (), max_labels: int = MAX_SENSOR_LABELS) -> list[int]:
    """Indices of the ``n`` tick labels to show: all when ``n <= max_labels``, else every
    k-th one plus the indices in ``keep`` (selected sensors must stay named)."""
    if n <= max_labels:
        return list(range(n))
    step = int(np.ceil(n / max_labels))
    shown = set(range(0, n, step)) | {i for i in keep if 0 <= i < n}
    return sorted(shown)


def figure_width_for(n: int, per_item: float = 0.24, base: float = 2.5,
                     lo: float = 8.0, hi: float = 22.0) -> float:
    """Figure width in inches for ``n`` categories along x (bars, heatmap columns)."""
    shown = min(n, MAX_SENSOR_LABELS)
    return float(np.clip(base + per_item * shown, lo, hi))


def parse_time(value: object) -> datetime | None:
    """:func:`connectors.timeutil.parse_time` for reading results back: an aware UTC datetime
    (ISO 8601 text, ``Z`` or offset, naive = UTC), or None where the value is missing or
    not a time, so a report still renders."""
    if value is None:
        return None
    try:
        return _parse_time(value if isinstance(value, datetime | int | float) else str(value))
    except ValueError:
        return None


def time_text(value: object) -> str:
    """Inspection time as people read it in a title: ``2019-03-11 00:00 UTC``; with its
    seconds where it is off the whole minute (``2020-03-09 16:47:01 UTC``), so that the
    reports of a one-second source's inspections every 5 s are told apart, as their
    summaries are."""
    dt = parse_time(value)
    if dt is None:
        return str(value) if value is not None else "unknown time"
    return dt.strftime("%Y-%m-%d %H:%M UTC" if on_whole_minute(dt) else "%Y-%m-%d %H:%M:%S UTC")


def _as_float(value: object) -> float | None:
    """``value`` as a float, None where it is no number (None, text that is not one, ...)."""
    if isinstance(value, int | float | str | np.number):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def p_text(p: object) -> str:
    """p-value for titles and tables: 3 significant digits, ``n/a`` when absent."""
    value = _as_float(p)
    if value is None:
        return "n/a"
    if not np.isfinite(value):
        return "n/a"
    if value != 0 and value < 1e-3:
        return f"{value:.1e}"
    return f"{value:.3g}"


def score_text(s: object) -> str:
    value = _as_float(s)
    return f"{value:.3g}" if value is not None and np.isfinite(value) else "n/a"


def text_width_in(text: str, fontsize: float) -> float:
    """Approximate width in inches of ``text`` at ``fontsize`` points (DejaVu Sans averages
    about 0.62 em per glyph): enough to size a margin without drawing the figure."""
    return len(text) * fontsize * 0.62 / 72


#: Extra height (inches) of each title line beyond the first, at the 11-point title size.
TITLE_LINE_IN = 0.2


def title_lines(parts: Sequence[str], width_in: float, fontsize: float = 11.0) -> list[str]:
    """``parts`` joined by spaces into as few lines as fit ``width_in`` inches at
    ``fontsize`` (by :func:`text_width_in`, which errs wide), breaking only between parts; a
    part wider than a line on its own is broken at its spaces. Titles are centred on their
    axes, so a line that does not fit is cut at both edges of the PNG."""
    import textwrap

    chars = max(int(width_in / text_width_in("x", fontsize)), 10)
    lines: list[str] = []
    for part in parts:
        if lines and len(lines[-1]) + 1 + len(part) <= chars:
            lines[-1] += " " + part
        else:
            lines.extend(textwrap.wrap(part, chars) or [""])
    return lines


def set_margins(fig: Any, *, left: float, right: float, bottom: float, top: float,
                gap: float = 0.0, columns: int = 1) -> None:
    """Fixed margins in inches (and a ``gap`` between ``columns`` panels).

    Why not constrained layout: it measures every text twice per save and costs about 40 %
    of a figure's time; report figures have predictable text, so margins are computed."""
    w, h = fig.get_size_inches()
    panel = (w - left - right - gap * (columns - 1)) / columns
    fig.subplots_adjust(left=left / w, right=1 - right / w, bottom=bottom / h, top=1 - top / h,
                        wspace=gap / panel if columns > 1 else None)
