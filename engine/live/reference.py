"""A frozen reference: the live statistic's model of "normal", remembered while an incident
is open, so that a change that stays is still seen a day later (pure NumPy, no state).

The sliding statistic (:mod:`engine.live.residual_shift`) compares each after window with
the last day of its own before window. A day after a leak starts, the leak is inside that
reference and ``z`` fades to 0, although nothing was repaired. :class:`Reference` keeps
what the detector learned on the before window that ended at the last normal time (the
hour-of-day profile, the scale, the common mode, the level of the last day and the
spread of the comparison) and :meth:`Reference.compare` measures later windows against
it:

* ``z`` per sensor: (mean residual of the window - the frozen level) / the frozen spread,
  as the sliding statistic, but against the frozen level (:meth:`Reference.recent_z`, a
  new change inside the incident, pools that spread with the current window's);
* ``energy_z`` per sensor: the log of the window's residual variance over its frozen
  typical value, divided by that log-ratio's spread over the reference's own windows. A
  stuck sensor (its daily cycle is gone), extra noise or a changed cycle raise it at an
  unchanged mean.

A sensor is back at the reference when ``|z|`` and ``energy_z`` are both below
``return_z`` (3 by default: about 1 in 370 on normal data for each).

Example::

    >>> import numpy as np, pandas as pd
    >>> idx = pd.date_range("2024-01-01", periods=8 * 24, freq="h")
    >>> rng = np.random.default_rng(0)
    >>> cycle = np.sin(2 * np.pi * idx.hour.to_numpy() / 24)[:, None]
    >>> x = pd.DataFrame(cycle + 0.1 * rng.standard_normal((len(idx), 8)), index=idx,
    ...                  columns=list("abcdefgh"))
    >>> ref = Reference.fit(x.iloc[:168], after_rows=16, settings=DetectorSettings())
    >>> later = x.iloc[170:186].copy()
    >>> ref.compare(later).changed(list("abcdefgh"))
    False
    >>> later["a"] = later["a"] - 1.0  # sensor a drops by 10 noise sd
    >>> check = ref.compare(later)
    >>> check.changed(["a"]), check.columns[int(np.argmax(np.abs(check.z)))]
    (True, 'a')

Shapes: ``before`` (n_b, D) and the windows to compare (n_a, D), hourly rows in time order.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import pandas as pd

from engine.live.residual_shift import (
    CommonMode,
    DetectionError,
    DetectorSettings,
    Period,
    _slots,
    profile_table,
    sliding_comparisons,
)


def _stored_period(value: Any) -> Period | bool:
    """A reference's stored profile period: one of the period names, or the older flag."""
    if value in ("week", "day", "none"):
        return cast(Period, value)
    if isinstance(value, str):
        raise DetectionError(f"a stored reference has an unknown profile period {value!r}")
    return bool(value)


#: |z| and |energy_z| below this: the sensor is back at its reference
RETURN_Z = 3.0
#: the median absolute value of a standard normal: a median-based spread's divisor
MEDIAN_ABS_NORMAL = 0.6744897501960817


@dataclass(frozen=True)
class ReferenceCheck:
    """One window against the reference: per sensor ``z`` and ``energy_z``, (D,)."""

    columns: list[str]
    z: np.ndarray
    energy_z: np.ndarray

    def changed(self, sensors: list[str], return_z: float = RETURN_Z) -> bool:
        """True while any of ``sensors`` is still away from the reference."""
        index = {c: i for i, c in enumerate(self.columns)}
        for s in sensors:
            i = index.get(s)
            # energy one-sided: a window can be calm by chance, a stuck or noisy sensor
            # (or a changed cycle) only raises the residual variance
            if i is not None and (abs(self.z[i]) >= return_z
                                  or self.energy_z[i] >= return_z):
                return True
        return False

    def by_sensor(self, sensors: list[str]) -> dict[str, dict[str, float]]:
        """``{sensor: {"z": .., "energy_z": ..}}`` for ``sensors`` (rounded for results)."""
        index = {c: i for i, c in enumerate(self.columns)}
        return {s: {"z": round(float(self.z[index[s]]), 3),
                    "energy_z": round(float(self.energy_z[index[s]]), 3)}
                for s in sensors if s in index}


def _window_stats(r: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Mean and variance of every ``n``-row window of ``r`` (k, D) each, in one pass."""
    zero = np.zeros((1, r.shape[1]))
    c1 = np.concatenate([zero, np.cumsum(r, axis=0)])
    c2 = np.concatenate([zero, np.cumsum(r ** 2, axis=0)])
    mean = (c1[n:] - c1[:-n]) / n
    var = np.maximum((c2[n:] - c2[:-n]) / n - mean ** 2, 0.0)
    return mean, var


@dataclass(frozen=True)
class Reference:
    """What the detector learned on one before window, frozen. Arrays are per sensor
    (D,) unless noted; ``table`` is the profile, (48, D) weekly, (24, D) daily or (1, D)
    without a profile; ``weekly`` is its period (a bool in references saved before
    periods: True "week", False "day")."""

    columns: list[str]
    weekly: Period | bool
    table: np.ndarray
    scale: np.ndarray
    common: CommonMode
    level: np.ndarray  # mean scaled residual of the last ``local_level_rows`` rows
    spread: np.ndarray  # spread of (window mean - level) inside the before window
    log_energy: np.ndarray  # mean log residual variance of after-sized windows
    energy_spread: np.ndarray  # spread of that log variance

    @classmethod
    def fit(cls, before: pd.DataFrame, after_rows: int, settings: DetectorSettings
            ) -> Reference:
        """Learn the reference on ``before`` for later windows of ``after_rows`` rows."""
        n_b, n_a = len(before), max(2, int(after_rows))
        if n_b < 2 * n_a + 2:
            raise DetectionError(f"a reference needs more than {2 * n_a + 1} rows of normal "
                                 f"data, got {n_b}; lengthen windows.before")
        table = profile_table(before, settings.period)
        slots = _slots(before.index, settings.period)
        rb = before.to_numpy(dtype=float) - table[slots]
        # Cross-fitted: each row's residual as if its slot's mean had been learned without
        # it (x - mean_{-i} = n / (n - 1) (x - mean)), so that the frozen spreads describe
        # the out-of-sample residuals of later windows, not the smaller in-sample ones.
        counts = np.bincount(slots, minlength=table.shape[0])[slots].astype(float)
        rb = rb * np.where(counts > 1, counts / np.maximum(counts - 1, 1), 2.0)[:, None]
        scale = rb.std(axis=0)
        scale = np.where(scale > 1e-12, scale, 1.0)
        common = CommonMode.fit(rb / scale, settings.common_modes)
        # robust loadings, as :meth:`residuals` computes them on later windows
        rb = common.apply(rb / scale, robust=True)
        local = max(1, min(settings.local_level_rows, n_b - n_a - 1))
        level = rb[-local:].mean(axis=0)
        null = sliding_comparisons(rb, n_a, local)
        spread = np.sqrt(np.mean(null ** 2, axis=0))
        log_var = np.log(np.maximum(_window_stats(rb, n_a)[1], 1e-12))
        return cls(columns=[str(c) for c in before.columns], weekly=settings.period,
                   table=table, scale=scale, common=common, level=level,
                   spread=np.where(spread > 1e-12, spread, np.inf),
                   log_energy=log_var.mean(axis=0),
                   energy_spread=np.maximum(log_var.std(axis=0), 1e-6))

    def residuals(self, window: pd.DataFrame) -> np.ndarray:
        """``window`` (n, D) as scaled residuals against the frozen profile and mode."""
        missing = [c for c in self.columns if c not in window.columns]
        if missing:
            raise DetectionError(f"the window lacks sensors of the reference: {missing[:5]}")
        # the columns by position in NumPy: pandas' selection by a list of names cost
        # more than the residuals themselves (a reference check at every inspection)
        x = window.to_numpy(dtype=float)
        if window.columns.tolist() != self.columns:
            x = x[:, window.columns.get_indexer(self.columns)]
        r = (x - self.table[_slots(window.index, self.weekly)]) / self.scale
        # robust: another change elsewhere must not move this incident's sensors
        return self.common.apply(r, robust=True)

    def compare(self, window: pd.DataFrame) -> ReferenceCheck:
        """``window`` (n_a, D) against the reference."""
        r = self.residuals(window)
        if r.shape[0] < 2:
            raise DetectionError("a window of at least 2 rows is needed to compare")
        z = (r.mean(axis=0) - self.level) / self.spread
        log_var = np.log(np.maximum(r.var(axis=0), 1e-12))
        energy_z = (log_var - self.log_energy) / self.energy_spread
        return ReferenceCheck(self.columns, np.nan_to_num(z), np.nan_to_num(energy_z))

    def current_spread(self, before: pd.DataFrame, after_rows: int, local_rows: int,
                       changed: tuple[pd.Timestamp, pd.Timestamp] | None = None
                       ) -> np.ndarray:
        """Per sensor (D,): the spread of the sliding comparison (``after_rows`` rows
        against the ``local_rows`` before them) at every offset inside ``before`` (n_b, D),
        in the frozen model's units, from the median of its absolute values: a step inside
        ``before`` moves only the offsets that straddle it (a quarter of them with SKAB's
        four options, of the live profile's week too), which the median passes over, while
        a slow wander grown since the reference was learned moves them all. ``changed``:
        a span of time whose straddling offsets are left out (an open incident's own
        change). NaN where fewer offsets than ``after_rows`` are left."""
        n_a, local = max(2, int(after_rows)), max(1, int(local_rows))
        null = sliding_comparisons(self.residuals(before), n_a, local)
        if changed is not None and null.shape[0]:
            first = before.index[:null.shape[0]]
            last = before.index[local + n_a - 1:local + n_a - 1 + null.shape[0]]
            null = null[(last < changed[0]) | (first > changed[1])]
        if null.shape[0] < n_a:
            return np.full(len(self.columns), np.nan)
        return np.median(np.abs(null), axis=0) / MEDIAN_ABS_NORMAL

    def recent_z(self, recent: pd.DataFrame, window: pd.DataFrame,
                 before: pd.DataFrame | None = None,
                 changed: tuple[pd.Timestamp, pd.Timestamp] | None = None,
                 return_z: float = RETURN_Z) -> np.ndarray:
        """Per sensor (D,): the sliding statistic's ``z`` with the frozen model, (mean
        residual of ``window`` (n_a, D) - mean residual of ``recent`` (the before window's
        last ``local_level`` rows)) / the spread. The spread is the frozen one, or with the
        whole current ``before`` window (n_b, D) given, the frozen one pooled with
        :meth:`current_spread` there, ``sqrt((frozen**2 + current**2) / 2)``, leaving out
        the offsets that straddle ``changed``.

        Why: once a change is inside the before window, the sliding statistic's spread
        (every offset of the same comparison inside that window) holds the change's step,
        and its ``z`` collapses (issue 29: 152, then 14.9 five seconds later). The frozen
        spread was learned on normal data, so a second change while an incident is open
        keeps its size, and so does a sensor's return to the reference: it has changed
        against the window before it too (SKAB labels a valve's reopening as a change
        point), and the sliding statistic, blind while the step is inside its spread,
        misses it after a change shorter than the before window. A sensor counts 0 only
        while it moves back towards the frozen level without being there yet (still at
        least ``return_z`` spreads from it, in the spread ``z`` is measured in): a slow,
        wobbly return then fires once, when it is back, not at each wobble
        (:meth:`returning` says which sensors came back). But the frozen spread was
        learned on one
        before window, from a handful of independent comparisons: where a sensor's slow
        wander has grown since (SKAB's accelerometers over an hour of normal operation),
        the frozen spread alone made ``z`` large at window after window, and the
        incident's reference kept firing (issue 29: 91 firing results, 20 false positives,
        on SKAB's anomaly-free recording with the engine part off). Pooled, not the larger
        of the two: both are noisy estimates, and the larger of two is biased upwards.

        >>> import numpy as np, pandas as pd
        >>> idx = pd.date_range("2024-01-01", periods=400, freq="2s")
        >>> x = pd.DataFrame(np.random.default_rng(1).standard_normal((400, 6)),
        ...                  index=idx, columns=list("abcdef"))
        >>> ref = Reference.fit(x.iloc[:150], after_rows=15,
        ...                     settings=DetectorSettings(local_level_rows=21, daily_profile=False))
        >>> x.loc[x.index[300]:, "b"] += 5.0  # a change on b, 5 noise sd
        >>> z = ref.recent_z(x.iloc[279:300], x.iloc[300:315])
        >>> bool(z[1] > 10 and np.abs(np.delete(z, 1)).max() < 2)
        True
        >>> back = ref.recent_z(x.iloc[300:321], x.iloc[100:115])  # b back: a change
        >>> bool(back[1] < -10), bool(ref.returning(x.iloc[300:321], x.iloc[100:115])[1])
        (True, True)
        """
        return self.recent_change(recent, window, before, changed, return_z)[0]

    def returning(self, recent: pd.DataFrame, window: pd.DataFrame,
                  before: pd.DataFrame | None = None,
                  changed: tuple[pd.Timestamp, pd.Timestamp] | None = None,
                  return_z: float = RETURN_Z) -> np.ndarray:
        """Per sensor (D,), bool: whether ``window`` (n_a, D) is back at the reference
        (within ``return_z`` spreads of the frozen level, in :meth:`recent_z`'s spread:
        with ``before`` and ``changed``, the pooled one) after ``recent`` (n_l, D) was
        further from it: a return (a repair, a valve reopened), which :meth:`recent_z`
        measures as any other change.

        Why the pooled spread: a sensor's slow wander leaves it a little off its frozen
        level after a return (SKAB's accelerometer, 3.4-3.9 frozen spreads after a block
        of 16 standard deviations), where the spread that measured its change counts it
        back."""
        return self.recent_change(recent, window, before, changed, return_z)[1]

    def recent_change(self, recent: pd.DataFrame, window: pd.DataFrame,
                      before: pd.DataFrame | None = None,
                      changed: tuple[pd.Timestamp, pd.Timestamp] | None = None,
                      return_z: float = RETURN_Z) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`recent_z` and :meth:`returning` together, (D,) each, from one pass over
        the windows and one :meth:`current_spread` (the costly part: every offset of the
        comparison inside ``before``)."""
        now, then = self._mean_residuals(window, recent)
        spread = self._pooled_spread(len(window), len(recent), before, changed)
        back = self._back(now, return_z, spread)
        z = (now - then) / spread
        off_now, off_then = np.abs(now - self.level), np.abs(then - self.level)
        away, nearer = off_now > off_then, off_now < off_then
        return np.nan_to_num(np.where(away | back, z, 0.0)), np.asarray(nearer & back)

    def _pooled_spread(self, after_rows: int, local_rows: int, before: pd.DataFrame | None,
                       changed: tuple[pd.Timestamp, pd.Timestamp] | None) -> np.ndarray:
        """Per sensor (D,): the frozen spread, pooled with :meth:`current_spread` on
        ``before`` where it is given and finite."""
        if before is None:
            return self.spread
        current = self.current_spread(before, after_rows, local_rows, changed)
        return np.where(np.isfinite(current),
                        np.sqrt(0.5 * (self.spread ** 2 + current ** 2)), self.spread)

    def _mean_residuals(self, *windows: pd.DataFrame) -> list[np.ndarray]:
        """Each window's mean scaled residual per sensor, (D,) each."""
        return [self.residuals(w).mean(axis=0) for w in windows]

    def _back(self, mean_residual: np.ndarray, return_z: float,
              spread: np.ndarray | None = None) -> np.ndarray:
        """Per sensor (D,), bool: a window of this mean residual is within ``return_z``
        ``spread`` (D,) of the frozen level; by default the frozen spread, as
        :meth:`compare` and :meth:`ReferenceCheck.changed` count it back."""
        spread = self.spread if spread is None else spread
        return np.asarray(np.abs(mean_residual - self.level) < return_z * spread)

    def expected(self, window: pd.DataFrame) -> pd.Series:
        """Each sensor's mean over ``window``'s rows as the frozen profile expects it, in
        source units (the profile of each row's slot, plus the frozen level)."""
        slots = _slots(window.index, self.weekly)
        return pd.Series(self.table[slots].mean(axis=0), index=self.columns)

    # -- persistence: plain JSON for the state database ---------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {"columns": self.columns, "weekly": self.weekly,
                "table": self.table.tolist(), "scale": self.scale.tolist(),
                "beta": self.common.beta.tolist(),
                "directions": self.common.directions.tolist(),
                "level": self.level.tolist(),
                "spread": [None if not np.isfinite(v) else float(v) for v in self.spread],
                "log_energy": self.log_energy.tolist(),
                "energy_spread": self.energy_spread.tolist()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Reference:
        d = len(data["columns"])
        directions = np.asarray(data["directions"], dtype=float).reshape(d, -1)
        spread = np.array([np.inf if v is None else v for v in data["spread"]], dtype=float)
        weekly = data["weekly"]
        return cls(columns=list(data["columns"]),
                   weekly=_stored_period(weekly),
                   table=np.asarray(data["table"], dtype=float),
                   scale=np.asarray(data["scale"], dtype=float),
                   common=CommonMode(np.asarray(data["beta"], dtype=float), directions),
                   level=np.asarray(data["level"], dtype=float), spread=spread,
                   log_energy=np.asarray(data["log_energy"], dtype=float),
                   energy_spread=np.asarray(data["energy_spread"], dtype=float))
