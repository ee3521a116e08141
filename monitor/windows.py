"""Before/after windows for one inspection time: bin, aggregate, check coverage, fill, normalise.

For inspection time t, before = [t - B, t) and after = [t, t + A). Readings are binned into
``resample``-wide bins counted from each window's start (so any t gives whole bins), then
aggregated. Sensors without enough data in either window are dropped and listed; short
gaps inside a window are interpolated within that window only.

Nothing is invented past the data: an after window that reaches beyond the newest reading
(its last bin holds no reading of any sensor, and none follows within
:data:`LOOKAHEAD_BINS` bins past it) is not built at all but raises
:class:`WindowIncomplete`, with the share of it the data covers. Empty last bins followed
by data are a hole inside the data (a skipped second at a fine cadence) and are filled
like any other gap; a hole across all sensors in most of a window raises
:class:`WindowHole` (an incomplete inspection that names it). The agent waits for such
a window; a one-shot command ends that time as ``incomplete``. Nor is anything invented
before the data: a before window whose first bins hold no reading of any sensor, more
than :data:`LEADING_EMPTY_SHARE` of it (the data begins inside it), raises
:class:`WindowBeforeData`, since carrying the first readings back over them would make a
flat stretch whose small spread the statistics read as the site's normal variation.
Filling happens only inside windows the data covers, and is capped by ``min_coverage`` (a
sensor with data in fewer bins is dropped, not filled).

Normalisation (``normalise``):

* ``before`` (default): both windows divided by the sensor's before-window mean. A common
  reference keeps a level shift that starts at or right after t visible, and makes sensors
  of different magnitudes comparable.
* ``first``: each window divided by its own first value (the paper's). It erases a shift
  already present at the after window's start; kept for comparison with the paper.
* ``zscore``: (x - before mean) / before sd.
* ``none``: raw aggregates.

A reference that is zero or missing is never divided by: that sensor stays unscaled (or,
for zscore with sd 0, only centred), and the note says so.

Where the bins hold several readings of a sensor (5-minute readings in hourly bins), the
windows also carry each bin's log within-bin standard deviation (``Windows.spread``,
:func:`spread_channels`): the level statistic's spread channels, which see a sensor turn
noisy or freeze at an unchanged mean (docs/decision.md, "The spread channels").
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from connectors.base import BIN_COUNT, BIN_SD
from connectors.timeutil import format_duration, to_utc
from engine.live.residual_shift import SpreadChannels
from monitor.names import NORMALISE, Normalise

if TYPE_CHECKING:
    from monitor.config import WindowsConfig


#: read_window(start, end) -> long frame with columns time (UTC), sensor, value: how an
#: inspection reads its windows' readings from a source, a store or a frame already read
ReadWindow = Callable[[pd.Timestamp, pd.Timestamp], pd.DataFrame]


class WindowError(Exception):
    """Too little data for an inspection; the message says what is missing and what to do."""


class WindowIncomplete(WindowError):
    """The after window reaches past the newest reading: the data covers only ``covered``
    (a share in [0, 1)) of it, up to ``data_end``. Not an error of the data: the
    inspection can run once the data reaches the window's end. ``message``: the
    subclasses' own words for why the time is incomplete."""

    def __init__(self, covered: float, data_end: pd.Timestamp | None,
                 end: pd.Timestamp, message: str | None = None) -> None:
        self.covered = covered
        self.data_end = data_end
        self.end = end
        if message is None:
            # the readings read reach LOOKAHEAD_BINS past the window: a hole longer than
            # that after it reads as the data's end, so neither is claimed (on SKAB's
            # 64-s hole, 10 results said the data ended where it paused)
            reached = ("no reading in it" if data_end is None
                       else f"its readings stop at {data_end.isoformat()}")
            message = (f"the after window is covered to {covered:.0%} by the data "
                       f"({reached}, the window ends {end.isoformat()}); nothing is filled "
                       "past the data: inspect this time again once the data reaches the "
                       "window's end (where the data goes on after a hole, the times past "
                       "the hole run as usual)")
        super().__init__(message)


class WindowHole(WindowIncomplete):
    """No sensor has a reading in most of one window: a hole in the data (a logger that
    stopped for minutes), not a sensor's fault. Nothing is filled across it; the inspection
    ends ``incomplete`` with the hole named, and later times run as usual."""

    def __init__(self, window: str, covered: float, start: pd.Timestamp,
                 end: pd.Timestamp) -> None:
        super().__init__(
            covered, None, end,
            f"the data has a hole: no sensor has a reading in {1 - covered:.0%} of the "
            f"{window} window's bins ({start.isoformat()} to {end.isoformat()}); nothing is "
            "filled across it, so this time is incomplete; the times whose windows are past "
            "the hole run as usual")


class WindowBeforeData(WindowIncomplete):
    """The before window holds readings only from ``first`` on, too late for its coverage:
    the data begins inside it (the first minutes of a file), or a hole covers its start.
    Not an error of the data: the inspection is ``incomplete``, and times from
    ``first + before`` on have a full before window."""

    def __init__(self, covered: float, first: pd.Timestamp, complete_from: pd.Timestamp
                 ) -> None:
        super().__init__(
            covered, None, complete_from,
            f"the before window holds readings only from {first.isoformat()} on "
            f"({covered:.0%} of its bins): the data begins inside it, or a hole covers its "
            f"start; this time is incomplete, and inspections from "
            f"{complete_from.isoformat()} on have a full before window")


#: bins past an inspection's after window its reader also reads, so that the window's
#: empty last bins can be told from the data's end (a hole at a fine cadence)
LOOKAHEAD_BINS = 4
#: the largest share of a before window whose first bins, empty for every sensor, are
#: filled by carrying the first readings back; more is :class:`WindowBeforeData`. On
#: SKAB's one-second files, inspections whose 5-minute before window the file began
#: halfway into (50 % is ``min_coverage``) gave detection statistics of 17-76 against
#: 1-8 later, the first values of the calibration's history, and its alert threshold
#: 300-1,600 (issue 29; bench.skab). On 8 simulated AR(1) sensors (one reading a second,
#: 60 inspections) a flat start of 33 % and 49 % of the window raised the statistic's mean
#: from 4.8 to 6.8 and 11 (its largest from 12 to 20 and 39); up to 20 % it moved by 6 %
#: at most. A hole of a few bins at the start is still filled.
LEADING_EMPTY_SHARE = 0.1


@dataclass(frozen=True)
class WindowSpec:
    before: timedelta = timedelta(days=7)
    after: timedelta = timedelta(days=7)
    resample: timedelta = timedelta(hours=1)
    aggregate: str = "mean"
    normalise: Normalise = "before"
    min_coverage: float = 0.5
    min_sensors: int = 2

    @classmethod
    def from_config(cls, cfg: WindowsConfig) -> WindowSpec:
        return cls(before=cfg.before, after=cfg.after, resample=cfg.resample,
                   aggregate=cfg.aggregate, normalise=cfg.normalise,
                   min_coverage=cfg.min_coverage, min_sensors=cfg.min_sensors)

    def bounds(self, t: datetime) -> tuple[pd.Timestamp, pd.Timestamp, pd.Timestamp]:
        """(before start, t, after end), UTC; ``t`` naive = UTC."""
        t = to_utc(t)
        return t - pd.Timedelta(self.before), t, t + pd.Timedelta(self.after)

    def read_end(self, t: datetime) -> pd.Timestamp:
        """Where an inspection at ``t`` reads to: its after window's end and
        :data:`LOOKAHEAD_BINS` bins past it."""
        return self.bounds(t)[2] + LOOKAHEAD_BINS * pd.Timedelta(self.resample)


@dataclass
class Windows:
    """Hourly (resampled) frames, DatetimeIndex UTC, one column per kept sensor."""

    t: pd.Timestamp
    spec: WindowSpec
    before_raw: pd.DataFrame
    after_raw: pd.DataFrame
    before: pd.DataFrame
    after: pd.DataFrame
    data_quality: dict[str, Any] = field(default_factory=dict)
    #: each bin's within-bin spread, log scale (:func:`spread_channels`): the sensors whose
    #: bins hold :data:`SPREAD_MIN_READINGS` readings or more, None where none does
    spread: SpreadChannels | None = None
    #: the cells filled by interpolation, (n_b, D) and (n_a, D) bool over the kept sensors
    #: (rows and columns of ``before_raw`` and ``after_raw``); None where none was filled
    filled: tuple[np.ndarray, np.ndarray] | None = None


#: readings a bin must hold (median over the before window) for its spread to count
SPREAD_MIN_READINGS = 6
#: the log spread's floor, as a share of the sensor's median bin spread before: a sensor
#: whose readings freeze (spread 0) reads log(floor) instead of minus infinity
SPREAD_FLOOR = 0.1


def resample_spread(readings: pd.DataFrame, start: pd.Timestamp, end: pd.Timestamp,
                    period: timedelta) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The standard deviation of each sensor's readings in each bin of
    :func:`resample_window` (NaN with fewer than 2), and how many readings each bin
    holds: two wide frames of its shape. Readings a source binned itself (columns
    :data:`connectors.base.BIN_SD` and ``BIN_COUNT``, its bins on these) give their own."""
    if BIN_COUNT in readings.columns:
        return _prebinned_spread(readings, start, end, period)
    index, grouped = _binned(readings, start, end, period)
    if grouped is None:
        empty = pd.DataFrame(index=index, dtype=float)
        return empty, empty
    return _wide(grouped.std(), index), _wide(grouped.count(), index)


def _prebinned_spread(bins: pd.DataFrame, start: pd.Timestamp, end: pd.Timestamp,
                      period: timedelta) -> tuple[pd.DataFrame, pd.DataFrame]:
    """:func:`resample_spread` of a source's own bins (InfluxDB: ``stddev`` and ``count``
    per bin, the sample standard deviation as pandas' ``std``). A bin of ours holds one
    of the source's where their grids agree, as the windows read do
    (:func:`grid_groups`): its spread is the source's. Where several fall in one, their
    spreads are pooled about their values (exact for ``aggregate: mean``)."""
    step = pd.Timedelta(period)
    index = pd.date_range(start, periods=int((end - start) / step), freq=step, name="time")
    times = bins["time"]
    part = bins.loc[(times >= start) & (times < end)]
    part = part[np.isfinite(part["value"].to_numpy(dtype=float))
                & (part[BIN_COUNT].to_numpy(dtype=float) > 0)]
    if part.empty:
        empty = pd.DataFrame(index=index, dtype=float)
        return empty, empty
    n = part[BIN_COUNT].to_numpy(dtype=float)
    value = part["value"].to_numpy(dtype=float)
    sd = part[BIN_SD].to_numpy(dtype=float)  # NaN for a bin of one reading
    frame = pd.DataFrame({"_bin": ((part["time"] - start) // step).to_numpy(dtype=np.int64),
                          "sensor": part["sensor"].to_numpy(), "n": n, "sd": sd,
                          "s1": n * value,
                          "ss": np.nan_to_num((n - 1) * sd ** 2) + n * value ** 2})
    grouped = frame.groupby(["_bin", "sensor"], sort=False)
    total = grouped["n"].sum()
    if grouped.ngroups == len(frame):  # one of the source's bins in each of ours
        spread = frame.set_index(["_bin", "sensor"])["sd"]
    else:
        sums = grouped[["s1", "ss"]].sum()
        with np.errstate(invalid="ignore", divide="ignore"):
            var = (sums["ss"] - sums["s1"] ** 2 / total) / (total - 1)
        spread = np.sqrt(var.clip(lower=0)).where(total > 1)
    return _wide(spread, index), _wide(total, index)


@dataclass(frozen=True)
class BinSpreads:
    """Each bin's within-bin standard deviation and reading count over both windows (the
    arrays of :func:`resample_spread`'s frames, rows of the before window first)."""

    columns: list[str]
    sd_before: np.ndarray  # (n_b, sensors)
    count_before: np.ndarray
    sd_after: np.ndarray  # (n_a, sensors)

    @classmethod
    def of(cls, before: tuple[pd.DataFrame, pd.DataFrame], after: pd.DataFrame
           ) -> BinSpreads:
        """From :func:`resample_spread`'s frames of the before window and the spreads of
        the after window (their columns aligned to the before window's)."""
        sd_b, n_b = before
        columns = sd_b.columns.tolist()
        sd_a = after if after.columns.tolist() == columns else after.reindex(columns=columns)
        return cls(columns, sd_b.to_numpy(dtype=float),
                   n_b.reindex(columns=columns).to_numpy(dtype=float),
                   sd_a.to_numpy(dtype=float))


def spread_channels(spreads: BinSpreads, sensors: list[str]) -> SpreadChannels | None:
    """The log within-bin spread of each of ``sensors`` whose before bins hold
    :data:`SPREAD_MIN_READINGS` readings or more (median), before and after, gaps filled
    as the means' are: ``log(sd + floor)`` with the floor :data:`SPREAD_FLOOR` times the
    sensor's median spread before. None when no sensor qualifies (hourly readings in
    hourly bins, a testbed's one-second readings in two-second bins)."""
    if not spreads.columns or not sensors:
        return None
    # NumPy, not pandas: a backfill builds hundreds of windows
    if spreads.columns == sensors:
        vb, va, counts = spreads.sd_before, spreads.sd_after, spreads.count_before
    else:
        where = {name: i for i, name in enumerate(spreads.columns)}
        known = [s for s in sensors if s in where]
        if not known:
            return None
        cols = [where[s] for s in known]
        vb, va = spreads.sd_before[:, cols], spreads.sd_after[:, cols]
        counts = spreads.count_before[:, cols]
        sensors = known
    keep = np.median(np.where(np.isnan(counts), 0.0, counts), axis=0) >= SPREAD_MIN_READINGS
    if not keep.any():
        return None
    seen_b, seen_a = ~np.isnan(vb), ~np.isnan(va)
    floor = np.median(vb, axis=0)
    for j in np.flatnonzero(keep & ~seen_b.all(axis=0)):  # np.nanmedian costs 8x more
        column = vb[seen_b[:, j], j]
        floor[j] = np.median(column) if column.size else np.nan
    floor = SPREAD_FLOOR * floor
    keep &= (np.nan_to_num(floor) > 0) & (seen_b.mean(axis=0) >= 0.5) \
        & (seen_a.mean(axis=0) >= 0.5)
    if not keep.any():
        return None
    names = tuple(s for s, k in zip(sensors, keep.tolist(), strict=True) if k)
    f = floor[keep]
    before, after = np.log(vb[:, keep] + f), np.log(va[:, keep] + f)
    return SpreadChannels(names, before if seen_b[:, keep].all() else _filled(before),
                          after if seen_a[:, keep].all() else _filled(after), f)


def resample_window(readings: pd.DataFrame, start: pd.Timestamp, end: pd.Timestamp,
                    period: timedelta, aggregate: str = "mean") -> pd.DataFrame:
    """Aggregate long readings (``time``, ``sensor``, ``value``) in ``[start, end)`` into
    bins of ``period`` counted from ``start``.

    Returns a wide frame: index = every bin start (``(end - start) / period`` rows, empty
    bins NaN), columns = sensors seen in the window, sorted.
    """
    index, grouped = _binned(readings, start, end, period,
                             in_time_order=aggregate in ("first", "last"))
    if grouped is None:
        return pd.DataFrame(index=index, dtype=float)
    return _wide(getattr(grouped, aggregate)(), index)


def _binned(readings: pd.DataFrame, start: pd.Timestamp, end: pd.Timestamp,
            period: timedelta, in_time_order: bool = False
            ) -> tuple[pd.DatetimeIndex, Any]:
    """The bins' start times of ``[start, end)`` and the finite readings in it grouped by
    (bin, sensor), one reading per (sensor, time); None for the groups when there is no
    reading. ``in_time_order``: each group's readings sorted by time (first, last)."""
    step = pd.Timedelta(period)
    index = pd.date_range(start, periods=int((end - start) / step), freq=step, name="time")
    if readings.empty:
        return index, None
    times = readings["time"]
    part = readings.loc[(times >= start) & (times < end), ["time", "sensor", "value"]]
    part = part[np.isfinite(part["value"].to_numpy(dtype=float))]
    # one reading per (sensor, time), the last one given wins, as in the store
    part = part.drop_duplicates(["sensor", "time"], keep="last")
    if part.empty:
        return index, None
    part = part.assign(_bin=((part["time"] - start) // step).to_numpy(dtype=np.int64))
    if in_time_order:
        part = part.sort_values("time", kind="stable")
    return index, part.groupby(["_bin", "sensor"], sort=False)["value"]


def _wide(agg: pd.Series, index: pd.DatetimeIndex) -> pd.DataFrame:
    """A (bin, sensor) aggregate as a wide frame on ``index``, sensors sorted."""
    wide = agg.unstack("sensor").reindex(range(len(index)))
    wide.index = index
    # sensor names as Python strings (object dtype), not pandas 3's Arrow-backed string
    # index: every window's names are listed and looked up many times a result (the
    # sensor rows, the statistic's Series), at ~30 us a call on Arrow against ~0.2 us
    wide.columns = pd.Index([str(c) for c in wide.columns], dtype=object)
    return wide.sort_index(axis=1).astype(float)


def _fill(frame: pd.DataFrame) -> pd.DataFrame:
    """Interpolate gaps inside one window, carrying a sensor's edge values outward. Only
    ever called on windows the data covers to their last bin (:func:`after_covered`), so a
    carried edge bridges one sensor's gap inside the data, never the time past it; how
    much is filled is capped by ``min_coverage``.

    Linear in the row position with the edges carried, as pandas' ``interpolate(method=
    "linear", limit_direction="both")``, whose NumPy ``interp`` it calls directly
    (bit-equal, at a fraction of the per-window cost of a backfill's hundreds of
    windows)."""
    return pd.DataFrame(_filled(frame.to_numpy(dtype=float, copy=True)), index=frame.index,
                        columns=frame.columns)


def _filled(values: np.ndarray) -> np.ndarray:
    """:func:`_fill` of an array (rows, columns), in place: each column's gaps
    interpolated, its edge values carried outward."""
    position = np.arange(len(values), dtype=float)
    for j in range(values.shape[1]):
        column = values[:, j]  # a view: filled in place
        known = ~np.isnan(column)
        if known.all() or not known.any():
            continue  # nothing to fill, or nothing to fill from (left as pandas leaves it)
        column[~known] = np.interp(position[~known], position[known], column[known])
    return values


def after_covered(after: pd.DataFrame) -> float:
    """Share of the after window's bins up to and including the last one in which any
    sensor has a reading: 1.0 when the data reaches the window's end."""
    if after.empty or not len(after.index):
        return 0.0
    filled = ~np.isnan(after.to_numpy(dtype=float)).all(axis=1)  # NumPy: once per window
    if not filled.any():
        return 0.0
    last = int(np.flatnonzero(filled)[-1])
    return (last + 1) / len(filled)


def _divided(frame: pd.DataFrame, scale: np.ndarray) -> pd.DataFrame:
    """``frame / scale`` column by column, without pandas' alignment (the same values)."""
    return pd.DataFrame(frame.to_numpy(dtype=float) / scale, index=frame.index,
                        columns=frame.columns)


def column_means(frame: pd.DataFrame) -> np.ndarray:
    """Each column's mean, (D,), as pandas' ``frame.mean()`` gives it (NaN skipped): in
    NumPy where nothing is missing, whose sums are pandas' (bit-equal), at a fraction of
    its per-call cost; pandas' own otherwise. A backfill takes hundreds per second."""
    values = frame.to_numpy(dtype=float)
    if len(values) and not np.isnan(values).any():
        return np.asarray(values.mean(axis=0), dtype=float)
    return frame.mean().to_numpy(dtype=float)


def normalise(before: pd.DataFrame, after: pd.DataFrame, how: Normalise
              ) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, str]]:
    """Scale both windows; return (before, after, {sensor: why it was not scaled})."""
    notes: dict[str, str] = {}
    if how == "none":
        return before.copy(), after.copy(), notes

    def usable(ref: pd.Series) -> pd.Series:
        return ref.notna() & np.isfinite(ref) & (ref != 0)

    if how == "before":
        # In NumPy: a backfill normalises hundreds of windows, and pandas' per-call cost
        # was most of it. |mean| keeps the direction of a change readable.
        ref = np.abs(column_means(before))
        ok = np.isfinite(ref) & (ref != 0)
        if not ok.all():
            for s in before.columns[~ok]:
                notes[s] = "before-window mean is zero or missing; left unscaled"
        scale = np.where(ok, ref, 1.0)
        return _divided(before, scale), _divided(after, scale), notes
    if how == "first":
        out = []
        for name, frame in (("before", before), ("after", after)):
            first = frame.apply(lambda c: c.dropna().iloc[0] if c.notna().any() else np.nan)
            first = first.abs()
            ok = usable(first)
            for s in first.index[~ok]:
                note = f"first {name}-window value is zero or missing; left unscaled"
                notes[s] = f"{notes[s]}; {note}" if s in notes else note
            out.append(frame / first.where(ok, 1.0))
        return out[0], out[1], notes
    if how == "zscore":
        mu = before.mean()
        sd = before.std(ddof=1)
        mu_ok = mu.notna() & np.isfinite(mu)
        sd_ok = usable(sd)
        for s in sd.index[~sd_ok]:
            notes[s] = "before-window sd is zero or missing; centred only"
        mu = mu.where(mu_ok, 0.0)
        sd = sd.where(sd_ok, 1.0)
        return (before - mu) / sd, (after - mu) / sd, notes
    raise ValueError(f"unknown normalise {how!r}; use one of {', '.join(NORMALISE)}")


def grid_groups(times: Sequence[datetime], spec: WindowSpec) -> list[list[datetime]]:
    """``times`` grouped by the grid their before windows start on (the start's offset
    modulo ``spec.resample``), each group in the order given: one group at an hourly
    cadence, two for 5-second inspections in 2-second bins."""
    step = pd.Timedelta(spec.resample)
    epoch = pd.Timestamp(0, tz="UTC")
    groups: dict[pd.Timedelta, list[datetime]] = {}
    for t in times:
        groups.setdefault((spec.bounds(t)[0] - epoch) % step, []).append(t)
    return list(groups.values())


class BinnedSpan:
    """Readings of a span binned ONCE, from which the windows of many inspection times are
    sliced (a backfill or a history: one pass over the readings, not a resample per
    window).

    A grid is the aggregates of ``resample``-wide bins counted from ``origin`` plus an
    offset below one bin, (n_bins, sensors); a window whose start lies on a grid is the
    slice of its bins, holding the sensors with a reading in it (what
    :func:`resample_window` gives, value for value: the same readings fall in the same
    bin, in the same order). The grid of each offset the windows start at is binned when
    first needed. ``Inspector._windows_many`` gives each span the windows of one grid
    (:func:`grid_groups`), read from that grid's start, so a source that bins on its
    server bins on it too; windows on several grids (5-second inspections in 2-second
    bins) still slice right from raw readings. :meth:`windows` falls back to
    :func:`build_windows` over the readings for a window outside the span.
    """

    def __init__(self, readings: pd.DataFrame, origin: pd.Timestamp, end: pd.Timestamp,
                 spec: WindowSpec) -> None:
        self.readings = _utc_readings(readings)
        self.origin = to_utc(origin)
        self.end = to_utc(end)
        self.spec = spec
        self.step = pd.Timedelta(spec.resample)
        #: offset from ``origin`` -> (bins, their values, whether each holds a reading)
        self._grids: dict[pd.Timedelta, tuple[pd.DataFrame, np.ndarray, np.ndarray]] = {}
        #: offset -> the bins' spreads and reading counts (resample_spread), when needed
        self._spread_grids: dict[pd.Timedelta, tuple[list[str], np.ndarray, np.ndarray]] = {}

    def _grid(self, rest: pd.Timedelta) -> tuple[pd.DataFrame, np.ndarray, np.ndarray]:
        """The grid ``rest`` past ``origin``: its bins, values and which hold a reading
        (binned at the first window that starts on it)."""
        if rest not in self._grids:
            bins = resample_window(self.readings, self.origin + rest, self.end, self.step,
                                   self.spec.aggregate)
            values = bins.to_numpy(dtype=float)
            self._grids[rest] = (bins, values, np.isfinite(values))
        return self._grids[rest]

    def _spreads(self, start: pd.Timestamp, t: pd.Timestamp, end: pd.Timestamp
                 ) -> BinSpreads:
        """The bins' spreads and counts of the windows ``[start, t)`` and ``[t, end)``
        (inside the span, on one grid)."""
        offset, rest = divmod(start - self.origin, self.step)
        if rest not in self._spread_grids:
            sd, n = resample_spread(self.readings, self.origin + rest, self.end, self.step)
            self._spread_grids[rest] = (sd.columns.tolist(), sd.to_numpy(dtype=float),
                                        n.to_numpy(dtype=float))
        columns, sd, n = self._spread_grids[rest]
        first, middle = int(offset), int(offset) + int((t - start) / self.step)
        last = middle + int((end - t) / self.step)
        return BinSpreads(columns, sd[first:middle], n[first:middle], sd[middle:last])

    def _slice(self, start: pd.Timestamp, end: pd.Timestamp) -> pd.DataFrame | None:
        """The bins of ``[start, end)`` as :func:`resample_window` returns them; None when
        the window lies outside the span."""
        offset, rest = divmod(start - self.origin, self.step)
        n_bins = int((end - start) / self.step)
        if offset < 0 or start + n_bins * self.step > self.end:
            return None
        bins, values, seen = self._grid(rest)
        rows = slice(int(offset), int(offset) + n_bins)
        keep = seen[rows].any(axis=0)
        # the grid's own bin times and sensor names, sliced (what pandas would build anew
        # for each window: a backfill slices hundreds)
        index = bins.index[rows]
        # row-major, as resample_window's frames are: a column mean over the rows
        # (normalise) then adds in the same order as for build_windows' frames, to the
        # bit (NumPy's column selection and pandas' own copy are column-major)
        if keep.all():  # a copy: the window's frame must not share the grid's memory
            return pd.DataFrame(values[rows].copy(), index=index, columns=bins.columns,
                                copy=False)
        part = np.ascontiguousarray(values[rows][:, keep])
        return pd.DataFrame(part, index=index, columns=bins.columns[keep], copy=False)

    def windows(self, t: datetime) -> Windows:
        """The windows at ``t`` (:func:`build_windows`' result and errors)."""
        start, t_utc, end = self.spec.bounds(t)
        before, after = self._slice(start, t_utc), self._slice(t_utc, end)
        if before is None or after is None:
            inside = self.readings[(self.readings["time"] >= start)
                                   & (self.readings["time"] < self.spec.read_end(t))]
            return build_windows(inside, t_utc, self.spec)
        return _windows_from_bins(self.readings, before, after, t_utc, self.spec,
                                  self._spreads(start, t_utc, end))


def _utc_readings(readings: pd.DataFrame) -> pd.DataFrame:
    """Readings whose naive times are taken as UTC."""
    if not readings.empty and readings["time"].dt.tz is None:
        return readings.assign(time=readings["time"].dt.tz_localize("UTC"))
    return readings


def _continues_past(readings: pd.DataFrame, end: pd.Timestamp, spec: WindowSpec) -> bool:
    """Whether the readings go on within :data:`LOOKAHEAD_BINS` bins past ``end`` (what a
    reader reads past a window, :meth:`WindowSpec.read_end`): then empty last bins of the
    window are a hole in the data, not its end."""
    if readings.empty:
        return False
    times = readings["time"]
    ahead = end + LOOKAHEAD_BINS * pd.Timedelta(spec.resample)
    return bool(((times >= end) & (times < ahead)).any())


def _raise_on_a_hole(before: pd.DataFrame, after: pd.DataFrame, spec: WindowSpec,
                     continues: bool = False) -> None:
    """Too few sensors kept because the DATA has a hole (from a window's first reading on,
    no sensor has a reading in more than ``1 - min_coverage`` of its bins), not because
    sensors are missing: :class:`WindowHole`, an incomplete inspection naming the hole.
    (Data that begins inside the before window is :func:`_raise_on_a_late_start`'s.)"""
    seen_before = before.notna().any(axis=1).to_numpy()
    if continues and not after.empty and not after.notna().any().any() \
            and seen_before.any():
        # nothing in the after window, readings before and past it: a hole of its length
        raise WindowHole("after", 0.0, after.index[0], after.index[-1] + spec.resample)
    for name, frame in (("before", before), ("after", after)):
        seen = frame.notna().any(axis=1).to_numpy()
        if not seen.any():
            continue
        # from the window's first reading on; the after window's leading bins too once
        # the before window has readings (the data had begun: a hole, not its start)
        begun = name == "after" and bool(seen_before.any())
        since = seen if begun else seen[int(np.argmax(seen)):]
        if since.mean() < spec.min_coverage:
            empty = frame.index[len(seen) - len(since):][~since]
            raise WindowHole(name, float(seen.mean()), empty[0], empty[-1] + spec.resample)


def _raise_on_a_late_start(seen_b: np.ndarray, seen_a: np.ndarray, before_index: pd.Index,
                           after_index: pd.Index, spec: WindowSpec) -> None:
    """:class:`WindowBeforeData` when the data begins inside the before window: its bins
    (``seen_b``: (bins, sensors), whether each holds a reading; ``seen_a`` the after
    window's) hold no reading of any sensor in more than :data:`LEADING_EMPTY_SHARE` of
    it from its start, or in more than ``min_coverage`` leaves, or none at all while the
    after window has some."""
    any_before = np.asarray(seen_b.any(axis=1), dtype=bool)
    if any_before.any():
        first, bins = int(np.argmax(any_before)), any_before.size
        covered = 1 - first / bins
        if first / bins <= LEADING_EMPTY_SHARE and covered >= spec.min_coverage:
            return
        start = pd.Timestamp(before_index[first])
    elif seen_a.any():
        covered = 0.0
        start = pd.Timestamp(after_index[int(np.argmax(seen_a.any(axis=1)))])
    else:
        return  # no reading in either window: the coverage checks name it
    raise WindowBeforeData(covered, start, start + pd.Timedelta(spec.before))


def build_windows(readings: pd.DataFrame, t: datetime, spec: WindowSpec) -> Windows:
    """Readings (long: ``time`` UTC, ``sensor``, ``value``) -> the two windows for ``t``.

    Raises :class:`WindowError` when fewer than ``spec.min_sensors`` sensors have enough
    data in both windows.
    """
    start, t, end = spec.bounds(t)
    readings = _utc_readings(readings)
    before = resample_window(readings, start, t, spec.resample, spec.aggregate)
    after = resample_window(readings, t, end, spec.resample, spec.aggregate)
    spreads = BinSpreads.of(resample_spread(readings, start, t, spec.resample),
                            resample_spread(readings, t, end, spec.resample)[0])
    return _windows_from_bins(readings, before, after, t, spec, spreads)


def _windows_from_bins(readings: pd.DataFrame, before: pd.DataFrame, after: pd.DataFrame,
                       t: pd.Timestamp, spec: WindowSpec,
                       spreads: BinSpreads | None = None) -> Windows:
    """The windows at ``t`` from the binned before and after frames (coverage, drops,
    fill, normalisation); ``readings`` only name where the data ends when it ends inside
    the after window."""
    start, t, end = spec.bounds(t)
    covered = after_covered(after)
    if covered < 1.0 and not before.empty and before.notna().any().any() \
            and not _continues_past(readings, end, spec):
        # the data ends inside the after window: carrying the last values over the rest
        # would invent a flat tail that the statistics read as a change (when the data
        # goes on past the window, its empty last bins are a hole in it, not its end)
        filled = after.notna().any(axis=1)
        data_end = (readings.loc[(readings["time"] >= t) & (readings["time"] < end),
                                 "time"].max() if filled.any() else None)
        raise WindowIncomplete(covered, None if pd.isna(data_end) else data_end, end)
    names_b, names_a = before.columns.tolist(), after.columns.tolist()
    sensors = sorted(set(names_b) | set(names_a))
    # The bookkeeping in NumPy: a backfill builds hundreds of windows, and per-sensor
    # pandas lookups cost more than the statistics. Reindexed only where the columns differ.
    if names_b != sensors:
        before = before.reindex(columns=sensors)
    if names_a != sensors:
        after = after.reindex(columns=sensors)
    seen_b = ~np.isnan(before.to_numpy(dtype=float))
    seen_a = ~np.isnan(after.to_numpy(dtype=float))
    _raise_on_a_late_start(seen_b, seen_a, before.index, after.index, spec)
    cover_b = dict(zip(sensors, seen_b.mean(axis=0) if sensors else [], strict=True))
    cover_a = dict(zip(sensors, seen_a.mean(axis=0) if sensors else [], strict=True))
    dropped: list[str] = []
    reasons: dict[str, str] = {}
    for column, s in enumerate(sensors):
        low = [(w, c) for w, c in (("before", cover_b[s]), ("after", cover_a[s]))
               if c < spec.min_coverage]
        if low:
            dropped.append(s)
            reasons[s] = "; ".join(
                f"{w} window has data in {c:.0%} of bins (needs {spec.min_coverage:.0%})"
                for w, c in low) + _cadence_hint(seen_b[:, column], spec)
    kept = [s for s in sensors if s not in reasons]
    seen_before, seen_after = before, after  # every sensor's bins, for the hole check
    if dropped:
        before, after = before[kept], after[kept]
        index = [i for i, s in enumerate(sensors) if s not in reasons]
        seen_b, seen_a = seen_b[:, index], seen_a[:, index]
    cells = seen_b.size + seen_a.size
    missing = float(((~seen_b).sum() + (~seen_a).sum()) / cells) if cells else 1.0
    quality: dict[str, Any] = {
        "missing_fraction": round(missing, 6),
        "dropped_sensors": dropped,
        "dropped_reasons": reasons,
        "sensors_seen": len(sensors),
        "sensors_used": len(kept),
        "unscaled_sensors": {},
    }
    if len(kept) < spec.min_sensors:
        if sensors:
            _raise_on_a_hole(seen_before, seen_after, spec,
                             continues=_continues_past(readings, end, spec))
        if not sensors:
            why = (f"no readings between {start.isoformat()} and {end.isoformat()}; "
                   "check the inspection time against the data's time range")
        else:
            why = (f"only {len(kept)} of {len(sensors)} sensors have data in at least "
                   f"{spec.min_coverage:.0%} of the bins of both windows (need "
                   f"{spec.min_sensors}); wait for more data, or lower "
                   "windows.min_coverage")
        raise WindowError(why)

    # (interpolating a frame without a gap would only copy it)
    before_raw = before if seen_b.all() else _fill(before)
    after_raw = after if seen_a.all() else _fill(after)
    before_n, after_n, notes = normalise(before_raw, after_raw, spec.normalise)
    quality["unscaled_sensors"] = notes
    channels = None if spreads is None else spread_channels(spreads, kept)
    filled = None if seen_b.all() and seen_a.all() else (~seen_b, ~seen_a)
    return Windows(t=t, spec=spec, before_raw=before_raw, after_raw=after_raw,
                   before=before_n, after=after_n, data_quality=quality,
                   spread=channels, filled=filled)


def _cadence_hint(seen: np.ndarray, spec: WindowSpec) -> str:
    """Where a sensor's covered bins come at a regular spacing of several bins (its
    readings every 10 s in 2-s bins): that cadence and the fix, else "". A sensor of a
    slower cadence than the bins is left out of every window, not of one with a hole."""
    covered = np.flatnonzero(seen)
    if covered.size < 4:
        return ""
    steps = np.diff(covered)
    typical = int(np.median(steps))
    if typical < 2 or np.mean(np.abs(steps - typical) <= 1) < 0.8:
        return ""
    every = format_duration(spec.resample * typical)
    return (f"; its readings come about every {every}, fewer than the bins of "
            f"{format_duration(spec.resample)}: resample at {every} or coarser, or lower "
            "windows.min_coverage, to keep it")


def finite_or_none(value: float) -> float | None:
    """JSON-safe float."""
    value = float(value)
    return value if math.isfinite(value) else None
