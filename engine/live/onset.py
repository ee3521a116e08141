"""When did the change start? A change-point scan over the named sensors' residuals
(pure NumPy, no state).

An inspection fires when its after window holds enough of a change; the change itself
started somewhere in the hours before the window's end, often inside it, sometimes in the
last day of the before window. Reporting the inspection time as the start is off by up to
the after window. This module estimates the onset from the residual series (hour-of-day
profile and common mode removed, :mod:`engine.live.residual_shift`) of the sensors the
alert names, each turned so that its change is positive (``sign``):

* **level**: the mean of the sign-aligned residuals, scanned for one shift in mean
  (the likelihood-ratio / CUSUM scan of a Gaussian mean change with a common variance):
  ``stat(k) = k (n - k) / n * (mean(y[:k]) - mean(y[k:]))**2 / s**2``;
* **spread**: the same scan over the log of the squared residuals, which moves when a
  sensor gets noisy at an unchanged mean;
* **roughness** (when the raw readings are given): the same scan over the log of the
  squared hour-to-hour steps of the raw readings, which collapse when a sensor gets stuck
  (its steps are 0, while its residuals keep the daily cycle it lost) and grow when it
  gets noisy;
* **cycle** (when the profile is given): a change of a sensor's daily cycle (its
  amplitude scaled) leaves residuals proportional to the profile's deviation from its
  daily mean, positive at some hours and negative at others, which the level scan
  averages away. The scan fits ``r = beta * profile`` from row ``k`` on (one ``beta``,
  each sensor turned so that its change is positive) and measures the fit's share of the
  residuals like the level scan, ``stat(k) = (sum_{t>=k} r p)**2 / sum_{t>=k} p**2 / s**2``.
  The hours where the profile crosses its mean carry no information, so its peak is the
  first informative hour after the onset, not the last (the level scan's, on dev-cycle:
  3.9 h late).

The scan with the strongest peak gives the onset, but a roughness peak of at least
``ROUGHNESS_DECIDES`` decides over the level and spread scans. A named sensor that
repeats its last value exactly to the end (``stuck_since``) decides before any scan: its
onset is the first row of that value. Its interval holds every split whose
statistic is within ``chi2_1(0.95) = 3.84`` of the peak (the profile-likelihood interval);
autocorrelated residuals make it optimistic, so it is widened to at least one row each
side.

Example::

    >>> import numpy as np
    >>> rng = np.random.default_rng(1)
    >>> r = rng.standard_normal((40, 2)) * 0.3
    >>> r[25:, 0] -= 2.0                        # sensor 0 drops at row 25
    >>> est = estimate_onset(r, sign=np.array([-1.0, -1.0]))
    >>> est.index, est.low <= 25 <= est.high, est.kind
    (25, True, 'level')

Shapes: ``residuals`` (n, k): n rows in time order (hourly), k named sensors.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

CHI2_95 = 3.84
#: a roughness peak this strong decides: steps that collapse (stuck) or explode are an
#: unambiguous signature, while the level scan of a stuck sensor's residuals follows the
#: daily cycle it lost. Leaks on the L-Town dev sets peak at 3-11, dev-stuck at 75.
ROUGHNESS_DECIDES = 30.0
#: a sensor whose last value repeats exactly over this many steps (and still) is stuck
STUCK_RUN = 3


@dataclass(frozen=True)
class Onset:
    """Row of the first changed value, the interval ``[low, high]`` of rows, and which
    scan found it (``"level"``, ``"spread"``, ``"roughness"``, ``"cycle"`` or ``"stuck"``)."""

    index: int
    low: int
    high: int
    kind: str
    strength: float  # the peak statistic


def mean_shift_scan(y: np.ndarray, min_segment: int = 2) -> np.ndarray:
    """The scan statistic of one mean shift before row ``k``, for every ``k`` (n,);
    splits leaving fewer than ``min_segment`` rows on a side are 0."""
    y = np.asarray(y, dtype=float)
    n = y.size
    stat = np.zeros(n)
    if n < 2 * min_segment:
        return stat
    k = np.arange(n)
    csum = np.concatenate([[0.0], np.cumsum(y)])
    left = np.divide(csum[k], k, out=np.zeros(n), where=k > 0)
    right = np.divide(csum[n] - csum[k], n - k, out=np.zeros(n), where=k < n)
    # residual variance around the two means: the noise the shift is measured against
    total = float(((y - y.mean()) ** 2).sum())
    between = k * (n - k) / n * (left - right) ** 2
    within = np.maximum(total - between, 1e-12) / max(n - 2, 1)
    valid = (k >= min_segment) & (k <= n - min_segment)
    stat[valid] = between[valid] / within[valid]
    return stat


def profile_fit_scan(r: np.ndarray, p: np.ndarray, min_segment: int = 2) -> np.ndarray:
    """The scan statistic of ``r = beta * p`` from row ``k`` on (0 before), for every
    ``k``, (n,). ``r``, ``p`` (n, k): residuals and the profile's deviation, each column
    turned so that its change is positive (one beta for all)."""
    n = r.shape[0]
    stat = np.zeros(n)
    if n < 2 * min_segment:
        return stat
    rp = (r * p).sum(axis=1)
    pp = (p * p).sum(axis=1)
    # sums from row k to the end
    tail_rp = np.concatenate([np.cumsum(rp[::-1])[::-1], [0.0]])[:n]
    tail_pp = np.concatenate([np.cumsum(pp[::-1])[::-1], [0.0]])[:n]
    between = np.divide(tail_rp ** 2, tail_pp, out=np.zeros(n), where=tail_pp > 1e-12)
    total = float((r ** 2).sum())
    within = np.maximum(total - between, 1e-12) / max(r.size - 2, 1)
    k = np.arange(n)
    valid = (k >= min_segment) & (k <= n - min_segment) & (tail_rp > 0)
    stat[valid] = between[valid] / within[valid]
    return stat


def _interval(stat: np.ndarray, peak: int) -> tuple[int, int]:
    inside = np.flatnonzero(stat >= stat[peak] - CHI2_95)
    # the contiguous run around the peak
    low = high = peak
    members = set(inside.tolist())
    while low - 1 in members:
        low -= 1
    while high + 1 in members:
        high += 1
    return max(0, min(low, peak - 1)), min(stat.size - 1, max(high, peak + 1))


def _roughness(raw: np.ndarray) -> np.ndarray:
    """Log squared step into each row of ``raw`` (n, k), averaged over sensors (n,); the
    first row repeats the second. Steps are measured against each sensor's typical step,
    so a constant stretch (steps of 0) sits far below and a noisy one above."""
    steps = np.diff(np.nan_to_num(raw), axis=0) ** 2  # (n - 1, k)
    typical = np.median(steps, axis=0)
    floor = np.where(typical > 0, typical, 1.0) * 1e-4
    rough = np.log(steps + floor).mean(axis=1)
    return np.concatenate([rough[:1], rough])


def stuck_since(raw: np.ndarray, min_run: int = STUCK_RUN) -> int | None:
    """The first row of the value a sensor of ``raw`` (n, k) has repeated exactly to the
    end, when that run holds at least ``min_run`` + 1 rows (the earliest such sensor's);
    None when no sensor is stuck. Readings that keep one value to the last digit are a
    stuck sensor (or a gateway repeating its last value): its hourly means repeat exactly,
    which a working sensor's never do."""
    x = raw if raw.ndim == 2 else raw[:, None]
    same = x == x[-1]  # (n, k); a missing last value repeats nothing
    # rows at the end equal to the last; a sensor constant over the whole stretch has no
    # onset inside it
    run = np.where(same.all(axis=0), 0, np.argmin(same[::-1], axis=0))
    stuck = run >= min_run + 1
    return int(x.shape[0] - run[stuck].max()) if stuck.any() else None


def estimate_onset(residuals: np.ndarray, sign: np.ndarray | None = None,
                   min_segment: int = 2, raw: np.ndarray | None = None,
                   profile: np.ndarray | None = None) -> Onset:
    """The onset row in ``residuals`` (n, k), see the module docstring. ``sign`` (k,):
    the direction of each sensor's change (+1 up, -1 down); default +1. ``raw`` (n, k):
    the same sensors' readings, for the roughness scan (None: no such scan). ``profile``
    (n, k): the profile's deviation from its daily mean at the same rows, in the
    residuals' units, for the cycle scan (None: no such scan)."""
    r = np.asarray(residuals, dtype=float)
    if r.ndim == 1:
        r = r[:, None]
    r = np.nan_to_num(r)
    if raw is not None:
        stuck = stuck_since(np.asarray(raw, dtype=float))
        if stuck is not None:
            # the first repeated row's hour may hold the freeze itself (a value held
            # from inside that hour on): one row each side, like the scans' intervals
            return Onset(index=stuck, low=max(stuck - 1, 0),
                         high=min(stuck + 1, r.shape[0] - 1), kind="stuck",
                         strength=float("inf"))
    s = np.ones(r.shape[1]) if sign is None else np.where(np.asarray(sign) < 0, -1.0, 1.0)
    scans = {"level": mean_shift_scan((r * s).mean(axis=1), min_segment),
             "spread": mean_shift_scan(np.log(r ** 2 + 1e-6).mean(axis=1), min_segment)}
    if raw is not None:
        x = np.asarray(raw, dtype=float)
        scans["roughness"] = mean_shift_scan(_roughness(x if x.ndim == 2 else x[:, None]),
                                             min_segment)
    if profile is not None:
        p = np.nan_to_num(np.asarray(profile, dtype=float).reshape(r.shape))
        # each sensor's cycle change turned positive: the sign of its fit over the last
        # half of the rows (the change is in the after window)
        half = r.shape[0] // 2
        turn = np.where((r[half:] * p[half:]).sum(axis=0) < 0, -1.0, 1.0)
        scans["cycle"] = profile_fit_scan(r, p * turn, min_segment)
    kind = max(scans, key=lambda name: scans[name].max())
    if "roughness" in scans and scans["roughness"].max() >= ROUGHNESS_DECIDES and (
            "cycle" not in scans or scans["roughness"].max() >= scans["cycle"].max()):
        # not over a stronger cycle scan: a halved cycle shrinks the hour-to-hour steps
        # too, and the roughness scan then peaks where they are smallest, not at the
        # onset (d2's cycle in bench.shape_variants: two rows from the end)
        kind = "roughness"
    stat = scans[kind]
    peak = int(np.argmax(stat))
    low, high = _interval(stat, peak)
    strength = float(stat[peak])
    if kind == "roughness":  # row k holds the step from k - 1: the change began at k - 1
        peak, low, high = max(peak - 1, 0), max(low - 1, 0), max(high - 1, 0)
    return Onset(index=peak, low=low, high=high, kind=kind, strength=strength)
