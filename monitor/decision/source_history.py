"""The retrospective decision, calibrated on the source's own history as well.

The engine rule (the retrospective profile) fires on the block permutation p-value of the
engine (engine/block_test.py), which holds when the days of the two windows are
exchangeable. On seasonal streams they are not quite: demand that moves over weeks makes
the after week differ from the before week everywhere, and that p-value fires more often
than ``alpha``. Where the source holds the weeks before, the same statistic at earlier
times is a null distribution that carries the source's own seasonality.

**History times:** ``t - after - k x step`` (k = 0, 1, ...; ``step`` one day) back over
``span`` (``decision.history``, 28 days): every earlier inspection's after window ends by
``t``, so no reading of the current after window enters the history. A time is left out
when the source does not cover its before window, when its windows cannot be built, or
when they keep another set of sensors than the inspection at ``t`` (the statistic of
another set of sensors is not comparable).

**The decision:** the history's p-value of the statistic at ``t``
(:class:`engine.live.calibration.TailFit`, as the live profile calibrates its statistics)
and the block p-value are combined as an intersection-union test, ``max(p_block,
p_history)``: the inspection fires only when both say the after window differs. That is
valid at ``alpha`` when either p-value is (the block test when the days are exchangeable,
the history when the statistic's distribution is stable over the source's weeks). It needs
:func:`history_needed` values (``floor(1 / alpha)``: 20 at 0.05, where the smallest
conformal p-value 1/21 is below ``alpha``); with fewer, the block p-value decides alone.

An earlier change inside the history raises its values and makes the decision more
cautious, never less (the history is not cleaned as the live profile's is).
"""
from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import numpy as np

from connectors.timeutil import iso

if TYPE_CHECKING:
    import pandas as pd

    from monitor.windows import Windows, WindowSpec

log = logging.getLogger(__name__)

#: the statistic's name in results (``detection.statistic``)
SOURCE_STATISTIC = "block-mmd2"
#: ``test.decision`` when the history voted
SOURCE_HISTORY = "source-history"
#: spacing of the history times: one day, the block of the engine rule's permutations
HISTORY_STEP = timedelta(days=1)

#: read_window(start, end) -> long frame (time, sensor, value), as the inspection reads
ReadWindow = Callable[["pd.Timestamp", "pd.Timestamp"], "pd.DataFrame"]
#: pairs of (before, after) frames -> the statistic of each, shape (T,) (NaN: bad pair)
Statistics = Callable[[Sequence[tuple[Any, Any]]], np.ndarray]


def history_needed(alpha: float) -> int:
    """History values needed before the history may vote: the fewest ``n`` whose
    smallest conformal p-value ``1 / (n + 1)`` is below ``alpha``.

    >>> history_needed(0.05), history_needed(0.01)
    (20, 100)
    """
    return math.floor(1.0 / alpha)


def history_times(t: datetime, spec: WindowSpec, span: timedelta,
                  step: timedelta = HISTORY_STEP) -> list[datetime]:
    """The earlier inspection times whose after window ends by ``t``, newest first, back
    over ``span``.

    >>> from datetime import datetime, timedelta
    >>> from monitor.windows import WindowSpec
    >>> ts = history_times(datetime(2024, 3, 1), WindowSpec(), timedelta(days=3))
    >>> [x.strftime("%m-%d") for x in ts]
    ['02-23', '02-22', '02-21']
    """
    latest = t - spec.after
    return [latest - k * step for k in range(max(0, int(span / step)))]


def history_start(t: datetime, spec: WindowSpec, span: timedelta) -> pd.Timestamp:
    """Where the history at ``t`` begins: the before window of its oldest time (``t``'s
    own before window when ``span`` holds no time)."""
    times = history_times(t, spec, span)
    return spec.bounds(times[-1] if times else t)[0]


@dataclass(frozen=True)
class SourceHistory:
    """The statistic at ``t`` and at the earlier times the source covers."""

    value: float
    times: list[datetime]  # oldest first
    values: np.ndarray  # (n,), aligned with ``times``

    @property
    def span(self) -> list[str] | None:
        """[first, last] history time (ISO), None when the history is empty."""
        return [iso(self.times[0]), iso(self.times[-1])] if self.times else None

    def vote(self, alpha: float) -> tuple[float, float] | None:
        """(p-value of ``value`` against the history, the smallest value whose p-value is
        below ``alpha``), or None while the history holds fewer than
        :func:`history_needed` values (the block p-value then decides alone)."""
        from engine.live.calibration import TailFit

        if self.values.size < history_needed(alpha) or not math.isfinite(self.value):
            return None
        fit = TailFit.of(self.values)  # sorted once, asked for a p-value and a threshold
        return fit.pvalue(self.value), fit.threshold(alpha)


#: statistic values by history time, shared by the inspections of one run: the sensors
#: its windows kept and its value, or None where its windows cannot be built
StatisticCache = dict[datetime, "tuple[tuple[str, ...], float] | None"]


def source_history(t: datetime, windows: Windows, spec: WindowSpec,
                   read_window: ReadWindow, statistics: Statistics,
                   span: timedelta, cache: StatisticCache | None = None) -> SourceHistory:
    """The statistic of ``windows`` (the inspection at ``t``) and of the source at each of
    :func:`history_times`, in one call of ``statistics``. The source is read once, over
    the times not yet in ``cache`` (consecutive daily inspections share all history times
    but one, so a backfill builds each time's windows once)."""
    import pandas as pd

    from monitor.windows import WindowError, build_windows

    times = history_times(t, spec, span)
    cache = {} if cache is None else cache
    missing = [x for x in times if x not in cache]
    built: list[tuple[datetime, Windows]] = []
    if missing:
        frame = read_window(spec.bounds(missing[-1])[0], spec.bounds(missing[0])[2])
        first = pd.Timestamp(frame["time"].min()) if not frame.empty else None
        if first is not None and first.tzinfo is None:
            first = first.tz_localize("UTC")
        for when in missing:
            cache[when] = None
            if first is None or spec.bounds(when)[0] < first.floor(spec.resample):
                continue  # the source's data starts inside this time's before window
            try:
                built.append((when, build_windows(frame, when, spec)))
            except WindowError:
                continue
    values = statistics([(windows.before, windows.after)]
                        + [(w.before, w.after) for _, w in built])
    for (when, w), value in zip(built, values[1:], strict=True):
        if np.isfinite(value):
            cache[when] = (tuple(str(c) for c in w.before.columns), float(value))
    columns = tuple(str(c) for c in windows.before.columns)
    kept = sorted((x, e[1]) for x in times if (e := cache[x]) is not None and e[0] == columns)
    log.debug("source history at %s: %d of %d earlier times", iso(t), len(kept), len(times))
    return SourceHistory(float(values[0]), [x for x, _ in kept],
                         np.asarray([v for _, v in kept], dtype=float))
