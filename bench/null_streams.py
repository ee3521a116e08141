"""Simulated sensor networks that do NOT change: the null hypothesis of every inspection.

Real sensor streams are nothing like the i.i.d. samples a plain permutation test assumes.
This simulator builds pressure-like readings with the structures that make hourly samples
non-exchangeable, so the false-alarm benchmark (:mod:`bench.false_alarms`) measures what a
user would see on an unchanged network:

* a **daily cycle** (morning and evening demand peaks; pressure drops as demand rises),
  with a sensor-specific depth;
* a **weekly pattern** (lighter, later demand on Saturday and Sunday);
* **day-to-day variation** of demand shared by the whole network (AR(1) across days) and
  per spatial cluster, as water demand does (weather, holidays);
* optionally a **slow common drift** (``drift_sd``): a strongly persistent AR(1) across
  days, shared by every sensor, as weather moves demand for days at a time;
* **cross-sensor correlation** through a few latent AR(1) factors with random loadings;
* **AR(1) noise** per sensor at the sampling step, plus white measurement noise, rounded
  to the sensor's resolution.

Nothing in the generating process changes at any time: any window of the stream is
statistically like any other window that starts at the same weekday and hour.

Usage::

    from bench.null_streams import NullNetwork
    net = NullNetwork(n_sensors=33, seed=7)
    wide = net.simulate(start="2024-01-01", days=14)      # DataFrame (T, D), UTC index
    long = net.to_long(wide)                              # columns time, sensor, value
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

DAY_S = 86_400


def ar1(rng: np.random.Generator, n_steps: int, n_series: int, phi: float, sd: float) -> np.ndarray:
    """Stationary AR(1) paths, shape (n_steps, n_series), marginal standard deviation ``sd``.

    Vectorised over series; the time recursion is a short loop over steps only where it
    cannot be avoided (scipy's lfilter does it in C).
    """
    from scipy.signal import lfilter

    innov_sd = sd * np.sqrt(1.0 - phi**2)
    eps = rng.normal(0.0, innov_sd, size=(n_steps, n_series))
    # Start in the stationary distribution so the first window is like every other one.
    eps[0] = rng.normal(0.0, sd, size=n_series)
    return lfilter([1.0], [1.0, -phi], eps, axis=0, zi=np.zeros((1, n_series)))[0]


def demand_profile(hour_of_day: np.ndarray, weekend: np.ndarray) -> np.ndarray:
    """Relative demand in [0, ~1.1]: a morning and an evening peak; weekends later and lower.

    ``hour_of_day`` (T,) float hours; ``weekend`` (T,) bool. Returns (T,).
    """
    shift = np.where(weekend, 1.5, 0.0)  # people get up later at weekends
    morning = np.exp(-0.5 * ((hour_of_day - 7.5 - shift) / 1.6) ** 2)
    evening = 0.8 * np.exp(-0.5 * ((hour_of_day - 19.5) / 2.2) ** 2)
    night = 0.15
    scale = np.where(weekend, 0.85, 1.0)
    return scale * (night + morning + evening)


@dataclass
class NullNetwork:
    """A network of ``n_sensors`` pressure sensors whose behaviour never changes.

    All sensor-level constants (base pressure, cycle depth, cluster, factor loadings, noise
    levels) are drawn once from ``seed``; :meth:`simulate` then draws a stream. Two calls
    with the same ``stream_seed`` give the same stream.
    """

    n_sensors: int = 33
    seed: int = 0
    n_clusters: int = 5
    n_factors: int = 3
    step_s: int = 300
    #: AR(1) coefficient of per-sensor noise at the sampling step (0.95 at 5 min: hourly
    #: means still correlated at lag 1, about 0.4).
    noise_phi: float = 0.95
    #: day-to-day demand factor shared by the network (AR(1) across days).
    day_phi: float = 0.5
    day_sd: float = 0.04
    cluster_day_sd: float = 0.03
    #: slow network-wide drift (weather-driven demand moving every sensor a little for
    #: days): an AR(1) across days with coefficient ``drift_phi``, 0 = none.
    drift_sd: float = 0.0
    drift_phi: float = 0.9
    #: latent factors: correlation time of a few hours.
    factor_phi: float = 0.98
    sensor_ids: list[str] = field(init=False)

    def __post_init__(self) -> None:
        if self.n_sensors < 2:
            raise ValueError("n_sensors must be at least 2; a network needs two sensors")
        rng = np.random.default_rng([self.seed, 0xA11])
        d = self.n_sensors
        self.sensor_ids = [f"s{i:03d}" for i in range(d)]
        self.base = rng.uniform(35.0, 65.0, d)  # metres of head
        self.depth = rng.uniform(2.0, 8.0, d)  # pressure drop at peak demand
        self.cluster = rng.integers(0, self.n_clusters, d)
        self.loadings = rng.normal(0.0, 0.25, (d, self.n_factors))
        self.noise_sd = rng.uniform(0.10, 0.30, d)
        self.meas_sd = rng.uniform(0.03, 0.08, d)
        self.phase_h = rng.normal(0.0, 0.3, d)  # travel time of demand to each sensor

    def simulate(self, start: str | pd.Timestamp, days: float, stream_seed: int = 0) -> pd.DataFrame:
        """Readings at every step from ``start`` for ``days`` days.

        Returns a wide DataFrame: DatetimeIndex (UTC, name ``time``) x one column per
        sensor id, float metres.
        """
        rng = np.random.default_rng([self.seed, stream_seed, 0x5EED])
        t0 = pd.Timestamp(start)
        t0 = t0.tz_localize("UTC") if t0.tzinfo is None else t0.tz_convert("UTC")
        n_steps = round(days * DAY_S / self.step_s)
        secs = t0.timestamp() + self.step_s * np.arange(n_steps, dtype=np.float64)
        d = self.n_sensors

        # Daily cycle with per-sensor phase; weekly pattern through the weekday.
        hours = ((secs / 3600.0)[:, None] - self.phase_h[None, :]) % 24.0  # (T, D)
        weekday = ((np.floor(secs / DAY_S).astype(np.int64) + 3) % 7)  # 1970-01-01 = Thu
        weekend = np.broadcast_to((weekday >= 5)[:, None], hours.shape)
        demand = demand_profile(hours, weekend)  # (T, D)

        # Day-to-day demand factors (network-wide and per cluster), interpolated between
        # noons so demand changes smoothly rather than jumping at midnight.
        day_idx = np.floor(secs / DAY_S)
        first_day, n_days = day_idx[0], int(day_idx[-1] - day_idx[0]) + 3
        day_net = ar1(rng, n_days, 1, self.day_phi, self.day_sd)[:, 0]
        day_clu = ar1(rng, n_days, self.n_clusters, self.day_phi, self.cluster_day_sd)
        noon = (first_day - 1 + np.arange(n_days)) * DAY_S + DAY_S / 2
        f_net = np.interp(secs, noon, day_net)  # (T,)
        f_clu = np.stack([np.interp(secs, noon, day_clu[:, k]) for k in range(self.n_clusters)], 1)
        day_factor = 1.0 + f_net[:, None] + f_clu[:, self.cluster]  # (T, D)
        if self.drift_sd > 0:
            drift = ar1(rng, n_days, 1, self.drift_phi, self.drift_sd)[:, 0]
            day_factor = day_factor + np.interp(secs, noon, drift)[:, None]

        factors = ar1(rng, n_steps, self.n_factors, self.factor_phi, 1.0)  # (T, K)
        noise = ar1(rng, n_steps, d, self.noise_phi, 1.0) * self.noise_sd  # (T, D)
        meas = rng.normal(0.0, 1.0, (n_steps, d)) * self.meas_sd

        values = (
            self.base
            - self.depth * demand * day_factor
            + factors @ self.loadings.T
            + noise
            + meas
        )
        values = np.round(values, 2)
        index = pd.DatetimeIndex(pd.to_datetime(secs, unit="s", utc=True), name="time")
        return pd.DataFrame(values, index=index, columns=self.sensor_ids)

    @staticmethod
    def to_long(wide: pd.DataFrame) -> pd.DataFrame:
        """Long frame with columns ``time`` (UTC), ``sensor`` (str), ``value`` (float)."""
        long = wide.rename_axis(index="time", columns="sensor").stack().rename("value")
        return long.reset_index()


def inspection_plan(n: int, seed: int = 0, first: str = "2024-01-08") -> list[tuple[int, pd.Timestamp]]:
    """``n`` (stream_seed, inspection_time) pairs: distinct streams, midnight inspections on
    every weekday in turn (so the weekly pattern is sampled evenly)."""
    rng = np.random.default_rng([seed, 0x97A7])
    base = pd.Timestamp(first, tz="UTC")
    offsets = rng.permutation(n) % 7  # every weekday about equally often
    return [(i, base + pd.Timedelta(days=int(offsets[i]) + 7 * (i % 20))) for i in range(n)]
