"""The short-window detection statistic of the ``live`` profile (pure NumPy, no state).

Why not the engine's p-value: a short after window (hours) covers part of a day, so any
two-sample test against a 7-day before window sees the daily cycle, not a change; and the
rows of sensor data are autocorrelated, so permutation p-values are not calibrated. This
statistic removes the known structure first and is then calibrated against the site's own
history (:mod:`engine.live.calibration`):

1. **Profile.** Each sensor's hour-of-day profile is learned from the before window,
   separately for weekdays and weekends (the demand pattern is weekly); the residual is the
   reading minus the profile value of its slot. Data without a daily cycle (windows of
   minutes, ``daily_profile`` off) take the window mean instead. Residuals are scaled by
   their before-window standard deviation, so sensors of any unit weigh the same.
2. **Common mode.** Weather and calendar move demand, and so every pressure, a little for
   days. The cross-sensor median of the residuals is regressed out of each sensor, then the
   first ``common_modes`` principal directions of what is left (learned on the before window).
   A leak or a stuck valve moves a few sensors against the others and survives this.
3. **Local level.** The after-window mean of each residual is compared with its mean over
   the last ``local_level`` of the before window (a day: the slow drifts left over move
   little within a day). The difference is divided by its spread at every offset inside the
   before window (the same difference computed on before data only), giving ``z`` per sensor.
4. **Statistic.** The mean of the ``top_k`` largest ``z**2`` (default 1: the largest): a
   change that moves a few sensors strongly is not diluted by the many that do not move.
5. **Spread channels.** Where a bin holds many readings (5-minute readings in hourly
   bins), the log of each bin's within-bin standard deviation is a channel of its own
   (:func:`monitor.windows.spread_channels`) and goes through steps 1-3 like a sensor;
   its ``z`` times ``spread_weight`` joins the ``z`` values of step 4. A sensor that turns
   noisy or freezes at an unchanged mean moves its spread by a factor of 10 or more
   within each hour, while its hourly means hardly move (docs/decision.md, "The spread
   channels").
6. **Cycle channels.** Where there is a daily profile, each sensor's residual times its
   own profile's deviation from its mean (:func:`_cycle_channels`) is a channel too,
   through steps 1-3 with the cross-sensor median and no principal directions; its ``z``
   times ``cycle_weight`` joins step 4. A daily cycle halved leaves residuals of one sign
   against the profile at every hour, which step 3's mean over part of a day cancels
   (docs/decision.md, "The cycle channels").

Shapes: ``before`` is (n_b, D), ``after`` (n_a, D), rows in time order, equally spaced.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import pandas as pd

STATISTIC = "residual-top-k"
#: how the level statistic's values are computed: a state that holds values of another
#: version has its history computed again (monitor.fleet.sites.current_level_statistics)
LEVEL_STATISTIC_VERSION = "residual-top-k, spread and cycle channels (issue 28)"
#: the largest stack of before windows (T x n_b x D float64 values) one array program of
#: :func:`detect_many` takes; a larger group is computed in stacks of this size, so that
#: each step's temporaries stay near the processor's caches. A week's window at 300
#: sensors (168 x 300) holds 0.4 MB: the level statistics of a backfill's 216 such windows
#: took 1.9 s in stacks of 4 MiB against 2.7 s in stacks of a whole chunk of the backfill
#: (up to 168 windows), and at 1,000 sensors 3.4 s against 7.9 s; 1-2 MiB were alike,
#: 16 MiB 2.6 s; at 33 sensors 1.15 s against 1.3 s (2026-12-07, a 2-core Xeon VM, 2 MiB
#: of L2 cache a core)
MAX_STACK_BYTES = 4 * 2**20
#: the profile's slots (DetectorSettings.period)
Period = Literal["week", "day", "none"]


@dataclass(frozen=True)
class DetectorSettings:
    """How the statistic is computed; part of the inspection fingerprint."""

    local_level_rows: int = 24
    common_modes: int = 1
    weekly_profile: bool = True
    top_k: int = 1
    daily_profile: bool = True  # False: no hour-of-day profile (data without a daily cycle)
    #: the spread channels' ``z`` is multiplied by this in the statistic (step 5); 0: off
    spread_weight: float = 0.5
    #: the cycle channels' ``z`` is multiplied by this in the statistic (step 6); 0: off
    cycle_weight: float = 0.5

    @property
    def period(self) -> Period:
        """The profile's slots: "week" (hour of day, weekdays and weekends apart), "day"
        (hour of day) or "none" (one slot: the window mean)."""
        if not self.daily_profile:
            return "none"
        return "week" if self.weekly_profile else "day"


@dataclass(frozen=True)
class Detection:
    """The statistic at one inspection time and what it is made of."""

    value: float
    z: pd.Series  # per sensor, signed (negative = below its expected level)
    before_residuals: pd.DataFrame  # (n_b, D), scaled, common mode removed
    after_residuals: pd.DataFrame  # (n_a, D)
    shift: pd.Series  # per sensor, z's numerator in source units: the change the alert states
    #: per sensor with a spread channel: the same z of its log within-bin spread (empty:
    #: no such channel)
    z_spread: pd.Series = field(default_factory=lambda: pd.Series(dtype=float))
    #: per sensor: the same z of its residual times its own profile's deviation (empty:
    #: no daily profile)
    z_cycle: pd.Series = field(default_factory=lambda: pd.Series(dtype=float))
    #: per sensor with a cycle channel: its after window's deviations from the before
    #: window's mean against its profile's, as a factor (0.5: the daily cycle halved)
    cycle_factor: pd.Series = field(default_factory=lambda: pd.Series(dtype=float))

    def evidence(self) -> dict[str, float]:
        """Each sensor's share of the statistic, by name: the largest of ``|z|``,
        ``|z_spread|`` and ``|z_cycle|``."""
        out = {str(k): abs(v) for k, v in zip(self.z.index.tolist(), self.z.tolist(),
                                                strict=True)}
        for extra in (self.z_spread, self.z_cycle):
            for k, v in zip(extra.index.tolist(), extra.tolist(), strict=True):
                out[str(k)] = max(out.get(str(k), 0.0), abs(v))
        return out


class DetectionError(ValueError):
    """The windows cannot give the statistic; the message names what is missing."""


def as_period(period: Period | bool) -> Period:
    """A period from the older ``weekly`` flag (True: "week", False: "day") or itself."""
    if isinstance(period, bool):
        return "week" if period else "day"
    return period


_PER_SECOND = {"s": 1, "ms": 10**3, "us": 10**6, "ns": 10**9}  # a DatetimeIndex's units


def _slots(index: pd.DatetimeIndex, period: Period | bool) -> np.ndarray:
    """Profile slot per row: hour of day, plus 24 on weekends for "week" (or True); 0 for
    "none"."""
    period = as_period(period)
    if period == "none":
        return np.zeros(len(index), dtype=np.int64)
    if index.tz is None or str(index.tz) == "UTC":
        # from the epoch, in the index's unit: pandas' calendar fields cost more than the
        # statistic
        return _hour_slots(index.asi8 // (3600 * _PER_SECOND[index.unit]), period)
    hour, day_of_week = np.asarray(index.hour), np.asarray(index.day_of_week)
    if period == "day":
        return np.asarray(hour, dtype=np.int64)
    return np.asarray(hour + 24 * (day_of_week >= 5), dtype=np.int64)


def seconds_after(index: pd.DatetimeIndex, t: pd.Timestamp) -> np.ndarray:
    """Each time of ``index`` less ``t``, in seconds, (n,): ``(index - t).total_seconds()``
    to the bit (whole units of the index), in NumPy, where pandas' Timedelta index costs
    ten times more at every inspection.

    >>> idx = pd.date_range("2024-01-01 03:00", periods=3, freq="30min", tz="UTC")
    >>> seconds_after(idx, pd.Timestamp("2024-01-01 02:00", tz="UTC")).tolist()
    [3600.0, 5400.0, 7200.0]
    """
    unit = index.unit
    return (index.asi8 - t.as_unit(unit).asm8.astype(np.int64)) / _PER_SECOND[unit]


def _hour_slots(hours: np.ndarray, period: Period) -> np.ndarray:
    """The slot of each UTC hour counted from the epoch (any shape), "day" or "week"."""
    hour = hours % 24
    if period == "day":
        return np.asarray(hour, dtype=np.int64)
    day_of_week = (hours // 24 + 3) % 7  # 1970-01-01 was a Thursday (Monday = 0)
    return np.asarray(hour + 24 * (day_of_week >= 5), dtype=np.int64)


def slots_at(seconds: np.ndarray, period: Period) -> np.ndarray:
    """:func:`_slots` of UTC times given as seconds since the epoch (any shape)."""
    if period == "none":
        return np.zeros(np.shape(seconds), dtype=np.int64)
    hours = np.floor_divide(np.asarray(seconds, dtype=np.float64), 3600).astype(np.int64)
    return _hour_slots(hours, period)


def uncovered_slots(history_times: np.ndarray, offsets: np.ndarray, t: float,
                    period: Period) -> int:
    """How many profile slots of the after window at ``t`` no after window of the history
    holds: its rows lie at ``t + offsets`` (seconds, (n_a,)), a history value's at
    ``history_times[i] + offsets`` ((n,), seconds since the epoch, UTC). Data that begin
    on a Monday have a history of weekdays alone until the first weekend's values join
    it: that weekend's after windows hold slots (hour of day, weekend) no history value
    was computed over (docs/decision.md, "The first weekend")."""
    if period == "none":
        return 0
    need = np.unique(slots_at(t + offsets, period))
    if not history_times.size:
        return int(need.size)
    # the slots repeat with the period (whole hours since the epoch): a history's times
    # one period apart cover the same slots, so each phase is looked at once (a month's
    # hourly history: 168 phases, not 700 times), as a mark per slot, not a set
    repeat = 86400.0 if period == "day" else 7 * 86400.0
    phases = np.unique(np.mod(np.asarray(history_times, dtype=float), repeat))
    have = np.zeros(48, dtype=bool)  # "week": 24 weekday and 24 weekend hours
    have[slots_at(phases[:, None] + offsets[None, :], period).ravel()] = True
    return int((~have[need]).sum())


def _slot_means(x: np.ndarray, slots: np.ndarray, n_slots: int, fallback: np.ndarray
                ) -> np.ndarray:
    """Mean of the rows of ``x`` (n, D) in each slot, (n_slots, D), in one pass; a slot
    without values takes ``fallback`` ((n_slots, D) or (D,))."""
    finite = np.isfinite(x)
    # one bincount over (slot, sensor) cells: each cell sums its rows in row order, as
    # np.add.at does, at a tenth of its cost
    d = x.shape[1]
    cells = (slots[:, None] * d + np.arange(d)).ravel()
    sums = np.bincount(cells, np.where(finite, x, 0.0).ravel(),
                       minlength=n_slots * d).reshape(n_slots, d)
    counts = np.bincount(cells, finite.ravel().astype(float),
                         minlength=n_slots * d).reshape(n_slots, d)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts > 0, sums / counts, fallback)


def profile_table(before: pd.DataFrame, weekly: Period | bool = True) -> np.ndarray:
    """Each sensor's mean per profile slot in ``before``: (48, D) for "week" (or True),
    (24, D) for "day" (or False), (1, D) for "none". A slot with no rows (a weekend slot
    when the window holds no weekend) falls back to the hour-of-day profile, and an hour
    with no rows to the window mean."""
    period = as_period(weekly)
    xb = before.to_numpy(dtype=float)
    mean = np.nanmean(xb, axis=0)
    if period == "none":
        return mean[None, :]
    table = _slot_means(xb, _slots(before.index, "day"), 24, mean)
    if period == "week":
        table = _slot_means(xb, _slots(before.index, "week"), 48,
                            np.concatenate([table, table]))
    return table


def profile_residuals(before: pd.DataFrame, after: pd.DataFrame,
                      weekly: Period | bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Readings minus the before window's profile of their slot, (n_b, D) and (n_a, D)."""
    table = profile_table(before, weekly)
    xb, xa = before.to_numpy(dtype=float), after.to_numpy(dtype=float)
    return (xb - table[_slots(before.index, weekly)], xa - table[_slots(after.index, weekly)])


def profile_deviation(before: pd.DataFrame, index: pd.DatetimeIndex,
                      weekly: Period | bool = True) -> np.ndarray:
    """The before window's profile at the rows ``index`` less its mean over its slots, in
    units of each sensor's residual spread (the detector's scale): (len(index), D). A
    change of a sensor's daily cycle moves its residuals in proportion to this (0 for
    "none": no cycle)."""
    table = profile_table(before, weekly)
    rb = before.to_numpy(dtype=float) - table[_slots(before.index, weekly)]
    scale = np.nanstd(rb, axis=0)
    scale = np.where(scale > 1e-12, scale, np.inf)
    return (table[_slots(index, weekly)] - table.mean(axis=0)) / scale


@dataclass(frozen=True)
class CommonMode:
    """What the common-mode step (:func:`_remove_common_modes`) learns on one window's
    before residuals, kept to be applied later (the frozen reference): each sensor's
    loading on the cross-sensor median, (D,), and the principal directions, (D, modes)."""

    beta: np.ndarray
    directions: np.ndarray

    @classmethod
    def fit(cls, rb: np.ndarray, modes: int) -> CommonMode:
        cb = row_median(rb)
        denom = float((cb ** 2).sum())
        beta = (rb * cb).sum(axis=0) / denom if denom > 0 else np.zeros(rb.shape[1])
        rb = rb - cb * beta
        directions = np.zeros((rb.shape[1], 0))
        modes = learnable_modes(modes, rb.shape[1])
        if modes > 0:
            directions = principal_directions((rb - rb.mean(axis=0))[None], modes)[0]
        return cls(beta, directions)

    def apply(self, r: np.ndarray, robust: bool = False) -> np.ndarray:
        """``r`` (n, D) with the common mode removed. ``robust``: each row's loadings on
        the principal directions fitted with Huber weights (:func:`robust_loadings`), so
        that a change on a few sensors is not spread onto the others by the projection."""
        r = r - row_median(r) * self.beta
        p = self.directions
        if not p.shape[1]:
            return r
        return r - (robust_loadings(r, p) if robust else r @ p) @ p.T


def row_median(a: np.ndarray) -> np.ndarray:
    """The median along the last axis, keepdims: ``np.median(a, axis=-1, keepdims=True)``
    to the bit (the middle value, or the mean of the two middle values), from one sort.
    ``np.median``'s own checks cost 0.08-0.14 ms per call on a (150, 8) array, and the
    frozen reference's Huber fit (:func:`robust_loadings`) makes one per iteration, six
    per check. A sort of the rows beats a partition at two ``kth``: 1.0 against 3.3 ms
    on (240, 150, 8), 0.10 against 0.25 s on (264, 168, 300) (a backfill's before
    windows at 300 sensors; 2026-12-06, this 2-core VM). Arrays with a NaN go to
    ``np.median``."""
    d = a.shape[-1]
    if d == 0 or np.isnan(a).any():
        return np.median(a, axis=-1, keepdims=True)
    k = d // 2
    ordered = np.sort(a, axis=-1)
    if d % 2:
        return ordered[..., k:k + 1]
    return (ordered[..., k - 1:k] + ordered[..., k:k + 1]) / 2  # np.mean of two, as is


def robust_loadings(r: np.ndarray, p: np.ndarray, iterations: int = 6,
                    tuning: float = 1.345) -> np.ndarray:
    """Each row's loadings (n, k) on the orthonormal directions ``p`` (D, k), by Huber
    regression (iteratively reweighted least squares, all rows at once).

    The plain projection ``r @ p`` is least squares: one sensor's step of 100 spreads
    ``100 * p[d] * p`` onto every sensor. The frozen reference of an open incident
    compares its own sensors while another change may be under way elsewhere
    (docs/decision.md, "Several incidents at once"); with Huber weights that other change
    is an outlier of its rows and leaves their loadings alone."""
    coef = r @ p  # (n, k), the least-squares start
    for _ in range(iterations):
        resid = r - coef @ p.T
        scale = 1.4826 * row_median(np.abs(resid))
        scale = np.maximum(scale, 1e-12)
        w = np.minimum(1.0, tuning * scale / np.maximum(np.abs(resid), 1e-300))  # (n, D)
        gram = np.einsum("nd,dk,dj->nkj", w, p, p)
        rhs = np.einsum("nd,dk->nk", w * r, p)
        if p.shape[1] == 1:  # one direction (the default): the 1 x 1 solve as a division
            coef = rhs / (gram[:, :, 0] + 1e-12)
        else:
            coef = np.linalg.solve(gram + 1e-12 * np.eye(p.shape[1]), rhs[..., None])[..., 0]
    return coef


def level_shift_z(rb: np.ndarray, ra: np.ndarray, local_rows: int) -> np.ndarray:
    """Per sensor: (mean of ``ra`` - mean of the last ``local_rows`` of ``rb``) / its spread
    over every offset of the same comparison inside ``rb``. Shape (D,)."""
    local = max(1, min(local_rows, rb.shape[0] - ra.shape[0] - 1))
    return _level_shift_z_stacked(rb[None], ra[None], local)[0]


@dataclass(frozen=True)
class SpreadChannels:
    """The log within-bin spread of the sensors that have one (step 5), on the rows of the
    before and after windows: ``before`` (n_b, C), ``after`` (n_a, C), gaps filled;
    ``floor`` (C,): what was added to each standard deviation before its log."""

    names: tuple[str, ...]
    before: np.ndarray
    after: np.ndarray
    floor: np.ndarray | None = None

    def medians(self) -> dict[str, tuple[float, float]]:
        """Each channel's median within-bin standard deviation, before and after, in the
        sensor's units (the floor taken off again)."""
        floor = np.zeros(len(self.names)) if self.floor is None else self.floor
        before = np.median(np.exp(self.before) - floor, axis=0)
        after = np.median(np.exp(self.after) - floor, axis=0)
        return {name: (float(max(b, 0.0)), float(max(a, 0.0)))
                for name, b, a in zip(self.names, before, after, strict=True)}


Spread = SpreadChannels | None


def detect(before: pd.DataFrame, after: pd.DataFrame, settings: DetectorSettings,
           spread: Spread = None) -> Detection:
    """The statistic for one pair of windows (raw resampled values, gaps already filled)."""
    out = detect_many([(before, after)], settings, [spread])[0]
    if isinstance(out, DetectionError):
        raise out
    return out


def detect_many(pairs: Sequence[tuple[pd.DataFrame, pd.DataFrame]],
                settings: DetectorSettings, spreads: Sequence[Spread] | None = None
                ) -> list[Detection | DetectionError]:
    """:func:`detect` of each ``(before, after)`` pair, or the :class:`DetectionError` it
    raises. Pairs of one shape (before rows, after rows, the same sensors) are computed as
    one stacked array program, (T, n_b, D) and (T, n_a, D), in stacks of at most
    :data:`MAX_STACK_BYTES`: a backfill's hundreds of windows cost a few array
    operations, not hundreds of small ones. Each window's numbers are its own alone
    (every step works along its own rows and sensors), whatever the stack.

    >>> idx = pd.date_range("2024-01-01", periods=60, freq="h")
    >>> x = pd.DataFrame(np.random.default_rng(0).standard_normal((60, 4)), index=idx,
    ...                  columns=list("abcd"))
    >>> one = detect(x.iloc[:40], x.iloc[40:48], DetectorSettings(local_level_rows=8))
    >>> many = detect_many([(x.iloc[:40], x.iloc[40:48]), (x.iloc[4:44], x.iloc[44:52])],
    ...                    DetectorSettings(local_level_rows=8))
    >>> bool(np.array_equal(many[0].z, one.z)), len(many)
    (True, 2)
    """
    out: list[Detection | DetectionError | None] = [None] * len(pairs)
    spreads = list(spreads) if spreads is not None else [None] * len(pairs)
    groups: dict[tuple[int, int, tuple[Any, ...], tuple[Any, ...]], list[int]] = {}
    for i, (before, after) in enumerate(pairs):
        names = before.columns.tolist()
        if names != after.columns.tolist():
            out[i] = DetectionError("before and after windows hold different sensors")
            continue
        n_b, n_a = len(before), len(after)
        if n_b < 2 * n_a + 2:
            out[i] = DetectionError(
                f"the before window ({n_b} rows) must hold more than twice the after window "
                f"({n_a} rows) to estimate the statistic's spread; lengthen windows.before")
            continue
        spread = spreads[i]
        spread_names = spread.names if spread is not None else ()
        groups.setdefault((n_b, n_a, tuple(names), spread_names), []).append(i)
    for (n_b, _, names, _), members in groups.items():
        step = max(1, MAX_STACK_BYTES // (8 * n_b * max(1, len(names))))
        for first in range(0, len(members), step):
            part = members[first:first + step]
            stacked = _detect_stacked([pairs[i] for i in part], settings,
                                      [spreads[i] for i in part])
            for i, detection in zip(part, stacked, strict=True):
                out[i] = detection
    return [d for d in out if d is not None]


def _detect_stacked(pairs: list[tuple[pd.DataFrame, pd.DataFrame]],
                    settings: DetectorSettings, spreads: list[Spread] | None = None
                    ) -> list[Detection]:
    """The statistic of T pairs of one shape: steps 1-4 of the module docstring on
    (T, n_b, D) and (T, n_a, D) arrays; the spread channels, where the pairs have them
    (one set of names for all), through steps 1-3 alike."""
    period = settings.period
    xb = np.stack([b.to_numpy(dtype=float) for b, _ in pairs])  # (T, n_b, D)
    xa = np.stack([a.to_numpy(dtype=float) for _, a in pairs])  # (T, n_a, D)
    slots_b = np.stack([_slots(b.index, period) for b, _ in pairs])  # (T, n_b)
    slots_a = np.stack([_slots(a.index, period) for _, a in pairs])
    z, rb, ra, shift = _channel_z(xb, xa, slots_b, slots_a, settings)
    z2 = z ** 2
    z_cycle = factor = np.zeros((len(pairs), 0))
    if settings.cycle_weight > 0 and period != "none":
        cb, ca, factor = _cycle_channels(xb, xa, rb, ra, slots_b, slots_a, period)
        z_cycle = _channel_z(cb, ca, slots_b, slots_a, settings, modes=0)[0]
        z_cycle = z_cycle * settings.cycle_weight
        z2 = np.concatenate([z2, z_cycle ** 2], axis=1)
    spread_cols: list[str] = []
    z_spread = np.zeros((len(pairs), 0))
    if settings.spread_weight > 0 and spreads and spreads[0] is not None:
        spread_cols = list(spreads[0].names)
        sb = np.stack([sp.before for sp in spreads if sp is not None])
        sa = np.stack([sp.after for sp in spreads if sp is not None])
        # the cross-sensor median out, no principal directions: the log spreads' common
        # movement is the weather's and the calendar's as a whole, not a demand mode
        z_spread = _channel_z(sb, sa, slots_b, slots_a, settings, modes=0)[0]
        z_spread = z_spread * settings.spread_weight
        z2 = np.concatenate([z2, z_spread ** 2], axis=1)
    z2 = np.sort(z2, axis=1)
    values = z2[:, -min(settings.top_k, z2.shape[1]):].mean(axis=1) if z2.shape[1] else \
        np.full(len(pairs), np.nan)
    cols = pairs[0][0].columns  # one Index for every frame: built from a list, 4 per window
    spread_index = pd.Index(spread_cols)
    cycle_index = cols if z_cycle.shape[1] else pd.Index([])
    return [Detection(value=float(values[k]), z=pd.Series(z[k], index=cols),
                      before_residuals=pd.DataFrame(rb[k], index=b.index, columns=cols),
                      after_residuals=pd.DataFrame(ra[k], index=a.index, columns=cols),
                      shift=pd.Series(np.nan_to_num(shift[k]), index=cols),
                      z_spread=pd.Series(z_spread[k], index=spread_index, dtype=float),
                      z_cycle=pd.Series(z_cycle[k], index=cycle_index, dtype=float),
                      cycle_factor=pd.Series(factor[k], index=cycle_index, dtype=float))
            for k, (b, a) in enumerate(pairs)]


def _cycle_channels(xb: np.ndarray, xa: np.ndarray, rb: np.ndarray, ra: np.ndarray,
                    slots_b: np.ndarray, slots_a: np.ndarray, period: Period
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Step 6: each residual (``rb`` (T, n_b, D), ``ra`` (T, n_a, D), from the raw
    ``xb`` and ``xa``) times its sensor's profile deviation at the row's slot (the
    profile less its before-window mean, over its root mean square), and each sensor's
    cycle factor (T, D): 1 + the after window's raw residuals regressed on the profile
    deviation (0.5: the cycle halved). A sensor whose daily cycle grows or shrinks by a
    factor leaves residuals of one sign times its profile deviation at every hour, which
    the level step's after-window mean of the residuals averages away over part of a
    day."""
    table = _profile_tables(xb, slots_b, period)  # (T, slots, D)
    rows = np.arange(xb.shape[0])[:, None]
    pb, pa = table[rows, slots_b], table[rows, slots_a]
    centre = pb.mean(axis=1, keepdims=True)
    db, da = pb - centre, pa - centre
    rms = np.sqrt(np.mean(db ** 2, axis=1, keepdims=True))
    rms = np.where(rms > 1e-12, rms, np.inf)  # no cycle: a channel of zeros
    energy = (da ** 2).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        factor = 1 + np.where(energy > 0, ((xa - pa) * da).sum(axis=1) / energy, 0.0)
    return rb * (db / rms), ra * (da / rms), factor


def _channel_z(xb: np.ndarray, xa: np.ndarray, slots_b: np.ndarray, slots_a: np.ndarray,
               settings: DetectorSettings, modes: int | None = None
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Steps 1-3 of the module docstring on (T, n_b, D) and (T, n_a, D) channels: their
    ``z`` (T, D), residuals (scaled, common mode removed) and shift in source units.
    ``modes``: principal directions removed (default ``settings.common_modes``)."""
    table = _profile_tables(xb, slots_b, settings.period)  # (T, slots, D)
    rows = np.arange(xb.shape[0])[:, None]
    rb, ra = xb - table[rows, slots_b], xa - table[rows, slots_a]
    scale = rb.std(axis=1, keepdims=True)  # (T, 1, D)
    scale = np.where(scale > 1e-12, scale, 1.0)
    rb, ra = _remove_common_modes(rb / scale, ra / scale,
                                  settings.common_modes if modes is None else modes)
    n_b, n_a = rb.shape[1], ra.shape[1]
    local = max(1, min(settings.local_level_rows, n_b - n_a - 1))
    z = _level_shift_z_stacked(rb, ra, local)  # (T, D)
    shift = (ra.mean(axis=1) - rb[:, -local:].mean(axis=1)) * scale[:, 0]  # source units
    return np.where(np.isfinite(z), z, 0.0), rb, ra, shift


def _profile_tables(xb: np.ndarray, slots: np.ndarray, period: Period) -> np.ndarray:
    """:func:`profile_table` of each window of ``xb`` (T, n_b, D) with its row slots
    ``slots`` (T, n_b): (T, 48 | 24 | 1, D)."""
    mean = np.nanmean(xb, axis=1)  # (T, D)
    if period == "none":
        return mean[:, None, :]
    hours = slots % 24 if period == "week" else slots
    table = _slot_means_stacked(xb, hours, 24, mean[:, None, :])
    if period == "week":
        table = _slot_means_stacked(xb, slots, 48, np.concatenate([table, table], axis=1))
    return table


def _slot_means_stacked(x: np.ndarray, slots: np.ndarray, n_slots: int,
                        fallback: np.ndarray) -> np.ndarray:
    """:func:`_slot_means` of each window: ``x`` (T, n, D), ``slots`` (T, n), ``fallback``
    (T, n_slots | 1, D) -> (T, n_slots, D), in one bincount over (window, slot, sensor)
    cells (each cell sums its rows in row order, as for one window)."""
    t, _, d = x.shape
    finite = np.isfinite(x)
    windows = np.arange(t)[:, None] * n_slots + slots  # (T, n)
    cells = (windows[:, :, None] * d + np.arange(d)).ravel()
    size = t * n_slots * d
    if finite.all():
        # every value counts (the usual case): the counts are each window's rows per slot,
        # one bincount over (window, slot), the same for every sensor
        sums = np.bincount(cells, x.ravel(), minlength=size)
        counts = np.broadcast_to(np.bincount(windows.ravel(), minlength=t * n_slots)
                                 .astype(float).reshape(t, n_slots, 1), (t, n_slots, d))
    else:
        sums = np.bincount(cells, np.where(finite, x, 0.0).ravel(), minlength=size)
        counts = np.bincount(cells, finite.ravel().astype(float), minlength=size)
    sums, counts = sums.reshape(t, n_slots, d), counts.reshape(t, n_slots, d)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts > 0, sums / counts, fallback)


#: sensors per principal direction removed (step 2): with fewer, a direction learned on
#: the before window is mostly its noise, and projecting it out moves one sensor's
#: change onto the others. One step of 3 standard deviations on one of D independent
#: sensors (60 before rows, 10 after) stayed the largest |z| in 73 % of 200 windows at
#: D = 3 with one direction removed (99 % without), 92 % at 4, 95 % at 6, 98 % at 8
#: (100 %): docs/decision.md, "Few sensors"
SENSORS_PER_MODE = 8


def learnable_modes(modes: int, sensors: int) -> int:
    """The principal directions step 2 removes from ``sensors`` sensors: at most
    ``modes``, one per :data:`SENSORS_PER_MODE` sensors (none below 8; so never the
    last dimensions, which the cross-sensor median and the change need)."""
    return max(0, min(modes, sensors // SENSORS_PER_MODE))


def _remove_common_modes(rb: np.ndarray, ra: np.ndarray, modes: int
                         ) -> tuple[np.ndarray, np.ndarray]:
    """Step 2 of the module docstring for each window: regress the cross-sensor median
    out of each column, then project out the first ``modes`` principal directions of
    the before residuals. ``rb`` (T, n_b, D), ``ra`` (T, n_a, D), each window's
    loadings and directions learned on its own before rows."""
    cb = row_median(rb)  # (T, n_b, 1)
    denom = (cb ** 2).sum(axis=(1, 2))  # (T,)
    safe = np.where(denom > 0, denom, 1.0)
    beta = np.where((denom > 0)[:, None], (rb * cb).sum(axis=1) / safe[:, None], 0.0)
    beta = beta[:, None, :]  # (T, 1, D)

    def median_out(r: np.ndarray) -> np.ndarray:
        return r - row_median(r) * beta

    rb_m, ra_m = rb - cb * beta, median_out(ra)
    modes = learnable_modes(modes, rb.shape[2])
    if modes == 0:
        return rb_m, ra_m
    p = principal_directions(rb_m - rb_m.mean(axis=1, keepdims=True), modes)  # (T, D, m)
    pt = np.swapaxes(p, 1, 2)
    return rb_m - (rb_m @ p) @ pt, ra_m - (ra_m @ p) @ pt


def principal_directions(x: np.ndarray, modes: int) -> np.ndarray:
    """The first ``modes`` right singular vectors of each centred window of ``x``
    (T, n, D): (T, D, modes), as columns. With at least as many rows as sensors, from
    the SVD. Wider windows (more sensors than rows: 300 sensors against a 7-day window's
    168 rows) take the eigenvectors of the (n, n) Gram matrix ``x x^T`` instead, mapped
    back by ``x^T u / sqrt(w)``: 0.54 s against the SVD's 1.78 s for (264, 168, 300)
    (2026-12-06, this 2-core VM), the same directions to 2e-15 in angle (up to sign,
    which the projection does not see). A window whose ``modes``-th eigenvalue is not
    clear of rounding (a rank below ``modes``) takes the SVD's, as before."""
    t, n, d = x.shape
    if n >= d:
        _, _, vt = np.linalg.svd(x, full_matrices=False)
        return np.swapaxes(vt[:, :modes], 1, 2)
    w, u = np.linalg.eigh(x @ np.swapaxes(x, 1, 2))  # ascending
    w, u = w[:, ::-1][:, :modes], u[:, :, ::-1][:, :, :modes]
    scale = np.finfo(float).eps * n * np.maximum(w[:, :1], np.finfo(float).tiny)
    clear = (w > scale).all(axis=1)  # (T,)
    out = np.empty((t, d, modes))
    if clear.any():
        out[clear] = (np.swapaxes(x[clear], 1, 2) @ u[clear]) / np.sqrt(w[clear])[:, None, :]
    if not clear.all():
        _, _, vt = np.linalg.svd(x[~clear], full_matrices=False)
        out[~clear] = np.swapaxes(vt[:, :modes], 1, 2)
    return out


def sliding_comparisons(r: np.ndarray, n_after: int, local: int) -> np.ndarray:
    """Step 3's comparison at every offset inside ``r`` (..., n, D): the mean of each
    ``n_after``-row stretch less the mean of the ``local`` rows just before it,
    (..., n - local - n_after + 1, D), from one cumulative sum; empty where ``r`` is too
    short. The sliding statistic's spread, and the frozen reference's
    (:mod:`engine.live.reference`), are taken over these."""
    k = r.shape[-2] - local - n_after + 1
    if k < 1:
        return np.zeros((*r.shape[:-2], 0, r.shape[-1]))
    zeros = np.zeros((*r.shape[:-2], 1, r.shape[-1]))
    csum = np.concatenate([zeros, np.cumsum(r, axis=-2)], axis=-2)
    after_means = (csum[..., n_after:, :] - csum[..., :-n_after, :]) / n_after
    level_means = (csum[..., local:, :] - csum[..., :-local, :]) / local
    return after_means[..., local:local + k, :] - level_means[..., :k, :]


def _level_shift_z_stacked(rb: np.ndarray, ra: np.ndarray, local: int) -> np.ndarray:
    """:func:`level_shift_z` of each window (``local`` already clipped): (T, D)."""
    null = sliding_comparisons(rb, ra.shape[1], local)  # (T, k, D)
    spread = np.sqrt(np.mean(null ** 2, axis=1))
    spread = np.where(spread > 1e-12, spread, np.inf)  # a flat sensor never counts
    return (ra.mean(axis=1) - rb[:, -local:].mean(axis=1)) / spread
