"""Calibrating the detection statistic against the site's own history (pure functions).

The same statistic at past inspection times of the same site is the null distribution:
it carries the site's real daily and weekly cycles, autocorrelation and drifts, which no
textbook distribution does. The p-value of a new value is conformal (the share of history
at least as large), and beyond the largest values of the history, where an empirical
p-value cannot go below ``1 / (n + 1)``, the tail is extrapolated with an exponential fit
to the log-exceedances over the history's upper quantile (a Pareto tail: heavier than
Gaussian, so the extrapolation errs towards fewer alerts).

The threshold comes from what an operator counts: a target mean time between false
incidents (``30d``) with one inspection every ``interval`` is a per-inspection level of
``interval / mean_time``. Consecutive firing inspections form one incident, so the
incident rate is at most this.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import timedelta

import numpy as np

TAIL_QUANTILE = 0.8
MIN_EXCEEDANCES = 5


@dataclass(frozen=True)
class CalibrationSettings:
    """Part of the inspection fingerprint."""

    false_incident_interval: timedelta = timedelta(days=30)
    inspection_interval: timedelta = timedelta(hours=1)
    min_history: timedelta = timedelta(days=4)
    history: timedelta = timedelta(days=28)

    @property
    def level(self) -> float:
        """Per-inspection false-alarm level that gives the target mean time."""
        return min(1.0, self.inspection_interval / self.false_incident_interval)

    @property
    def min_count(self) -> int:
        """History values needed before the statistic may fire."""
        return max(MIN_EXCEEDANCES * 5, int(self.min_history / self.inspection_interval))


def empirical_pvalue(value: float, history: np.ndarray) -> float:
    """Conformal p-value: (1 + #{h >= value}) / (n + 1)."""
    return float((1 + np.count_nonzero(history >= value)) / (history.size + 1))


def tail_pvalue(value: float, history: np.ndarray) -> float:
    """The empirical p-value, or below the history's range an extrapolated Pareto tail.

    ``history`` holds past values of a non-negative statistic, shape (n,). Never larger
    than :func:`empirical_pvalue`, never below 0.
    """
    history = np.asarray(history, dtype=float)
    history = history[np.isfinite(history)]
    emp = empirical_pvalue(value, history)
    n = history.size
    if n == 0:
        return 1.0
    threshold = float(np.quantile(history, TAIL_QUANTILE))
    upper = history[history > threshold]
    if value <= threshold or upper.size < MIN_EXCEEDANCES or threshold <= 0:
        return emp
    log_exceed = np.log(upper) - math.log(threshold)
    scale = float(log_exceed.mean())
    if scale <= 0:
        return emp
    tail = (upper.size / (n + 1)) * math.exp(-(math.log(value) - math.log(threshold)) / scale)
    return float(min(emp, tail))


def threshold(level: float, history: np.ndarray) -> float:
    """The smallest statistic value whose :func:`tail_pvalue` is below ``level`` (the alert
    threshold on the statistic's own scale; inf when the history cannot reach ``level``)."""
    history = np.asarray(history, dtype=float)
    history = history[np.isfinite(history)]
    if history.size == 0:
        return math.inf
    lo = float(history.max())
    hi = max(lo, 1e-12) * 2.0
    for _ in range(200):  # the p-value falls with the value; find an upper bracket
        if tail_pvalue(hi, history) < level:
            break
        hi *= 2.0
    else:
        return math.inf
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if tail_pvalue(mid, history) < level else (mid, hi)
    return hi
