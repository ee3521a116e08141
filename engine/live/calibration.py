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
import numpy.typing as npt

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


@dataclass(frozen=True)
class TailFit:
    """The history, sorted, and its Pareto tail: fitted once, then asked for p-values and
    for the alert threshold (which takes many p-values) without refitting."""

    history: np.ndarray  # (n,), finite, ascending
    start: float  # the history's TAIL_QUANTILE; the tail holds the values above it
    exceedances: int
    scale: float  # mean log-exceedance; <= 0 when there is no usable tail

    @classmethod
    def of(cls, history: npt.ArrayLike) -> TailFit:
        values = np.asarray(history, dtype=float)
        values = np.sort(values[np.isfinite(values)])
        if values.size == 0:
            return cls(values, math.inf, 0, 0.0)
        start = float(np.quantile(values, TAIL_QUANTILE))
        upper = values[values > start]
        if upper.size < MIN_EXCEEDANCES or start <= 0:
            return cls(values, start, int(upper.size), 0.0)
        scale = float((np.log(upper) - math.log(start)).mean())
        return cls(values, start, int(upper.size), scale)

    def pvalue(self, value: float) -> float:
        """The empirical p-value, or beyond the tail's start the smaller Pareto tail."""
        n = self.history.size
        if n == 0:
            return 1.0
        return self._pvalue(value, n - int(np.searchsorted(self.history, value, side="left")))

    def _pvalue(self, value: float, at_least: int) -> float:
        """:meth:`pvalue` given how many history values are ``>= value``."""
        n = self.history.size
        emp = (1 + at_least) / (n + 1)
        if value <= self.start or self.scale <= 0:
            return float(emp)
        tail = (self.exceedances / (n + 1)) * predictive_exceedance(
            math.log(value) - math.log(self.start), self.scale, self.exceedances)
        return float(min(emp, tail))

    def threshold(self, level: float) -> float:
        """The smallest value whose p-value is below ``level`` (inf when none is)."""
        if self.history.size == 0:
            return math.inf
        top = lo = float(self.history[-1])

        def pvalue(value: float) -> float:
            # the search looks above the history's largest value, where none is >= value
            # (no search of the sorted history: a decision finds several thresholds)
            return self._pvalue(value, 0) if value > top else self.pvalue(value)

        hi = max(lo, 1e-12) * 2.0
        for _ in range(200):  # the p-value falls with the value; find an upper bracket
            if pvalue(hi) < level:
                break
            hi *= 2.0
        else:
            return math.inf
        for _ in range(60):
            mid = 0.5 * (lo + hi)
            lo, hi = (lo, mid) if pvalue(mid) < level else (mid, hi)
        return hi


def predictive_exceedance(log_excess: float, scale: float, exceedances: int) -> float:
    """P(a new log-exceedance > ``log_excess``) of an exponential tail whose mean
    ``scale`` was estimated from ``exceedances`` values, the estimate's uncertainty
    included: with the rate's Jeffreys prior its posterior is Gamma(k, k * scale), and the
    predictive is the Lomax ``(1 + x / (k * scale)) ** -k`` (-> ``exp(-x / scale)`` as k
    grows). Plugging the estimate in instead understates far tails from short histories."""
    k = float(exceedances)
    return math.exp(-k * math.log1p(log_excess / (k * scale)))


def tail_pvalue(value: float, history: npt.ArrayLike) -> float:
    """The empirical p-value, or below the history's range an extrapolated Pareto tail.

    ``history`` holds past values of a non-negative statistic, shape (n,). Never larger
    than :func:`empirical_pvalue`, never below 0.
    """
    return TailFit.of(history).pvalue(value)


def threshold(level: float, history: npt.ArrayLike) -> float:
    """The smallest statistic value whose :func:`tail_pvalue` is below ``level`` (the alert
    threshold on the statistic's own scale; inf when the history cannot reach ``level``)."""
    return TailFit.of(history).threshold(level)
