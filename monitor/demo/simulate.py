"""A small simulated pressure network for the demo and the tests.

Each sensor's pressure = its static head - its sensitivity x network demand + noise, where
demand has a daily cycle (morning and evening peaks), a weekend pattern, a day-to-day
factor shared by all sensors, a factor per zone, and AR(1) noise; each sensor adds its own
AR(1) and white measurement noise. A *change* lowers the pressure of a few sensors by a
fixed amount from a given time on (a new leak near them). About 0.1 % of readings are
dropped at random and one sensor has a 2-hour outage, as in real SCADA data.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd


@dataclass(frozen=True)
class Scenario:
    n_sensors: int = 12
    start: str = "2026-01-05T00:00:00Z"  # a Monday
    days: int = 14
    step: str = "10min"
    change_at: str | None = "2026-01-12T06:00:00Z"
    #: sensor -> pressure change (m) from change_at on
    changes: dict[str, float] = field(default_factory=lambda: {"s04": -0.9, "s06": -0.9})
    zones: int = 3
    drop_fraction: float = 0.001
    seed: int = 7
    #: when the demo's operator accepts the open incident (None: never); in the truth file
    ack_at: str | None = None


#: The bundled demo network (``monitor/demo/data``, :func:`monitor.demo.write_bundled_data`):
#: from a Thursday, 7 days fill the live profile's before window and 4 more its calibration
#: history (``decision.min_history``); the leak starts on the Wednesday after, stays (an
#: incident open for a day and a half) and is accepted by the demo's operator at ``ack_at``.
DEMO = Scenario(start="2026-01-01T00:00:00Z", days=16, change_at="2026-01-14T10:00:00Z",
                ack_at="2026-01-16T00:00:00Z", changes={"s04": -0.7, "s06": -0.7}, seed=4)


def _ar1(rng: np.random.Generator, n: int, phi: float, sd: float, width: int = 1
         ) -> np.ndarray:
    """(n, width) AR(1) series with stationary sd ``sd``."""
    eps = rng.normal(0.0, sd * np.sqrt(1 - phi**2), size=(n, width))
    out = np.empty_like(eps)
    out[0] = rng.normal(0.0, sd, size=width)
    for i in range(1, n):
        out[i] = phi * out[i - 1] + eps[i]
    return out


def simulate(scenario: Scenario = Scenario()) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Long frame ``time`` (UTC), ``sensor``, ``value`` and a ground-truth dict."""
    rng = np.random.default_rng(scenario.seed)
    times = pd.date_range(pd.Timestamp(scenario.start), periods=int(
        pd.Timedelta(days=scenario.days) / pd.Timedelta(scenario.step)), freq=scenario.step)
    n, d = len(times), scenario.n_sensors
    sensors = [f"s{i + 1:02d}" for i in range(d)]
    hour = times.hour.to_numpy() + times.minute.to_numpy() / 60.0
    daily = (0.55 + 0.35 * np.exp(-0.5 * ((hour - 7.5) / 1.5) ** 2)
             + 0.30 * np.exp(-0.5 * ((hour - 19.0) / 2.0) ** 2)
             - 0.25 * np.exp(-0.5 * ((hour - 3.0) / 2.0) ** 2))
    weekend = np.where(times.day_of_week.to_numpy() >= 5, 0.92, 1.0)
    day_index = ((times - times[0]) // pd.Timedelta(days=1)).to_numpy()
    day_factor = 1.0 + _ar1(rng, scenario.days + 1, 0.6, 0.03)[day_index, 0]
    zone_of = rng.integers(0, scenario.zones, size=d)
    zone_day = 1.0 + rng.normal(0.0, 0.03, size=(scenario.days + 1, scenario.zones))
    zone_noise = 1.0 + _ar1(rng, n, 0.9, 0.04, scenario.zones)
    demand = (daily * weekend * day_factor)[:, None] * zone_day[day_index][:, zone_of] \
        * zone_noise[:, zone_of]
    head = rng.uniform(35.0, 60.0, size=d)
    sensitivity = rng.uniform(0.8, 2.5, size=d)
    values = head - sensitivity * demand * 3.0
    values += _ar1(rng, n, 0.8, 0.03, d) + rng.normal(0.0, 0.04, size=(n, d))
    if scenario.change_at is not None:
        after = np.asarray(times >= pd.Timestamp(scenario.change_at))
        for name, delta in scenario.changes.items():
            values[after, sensors.index(name)] += delta
    values = np.round(values, 2)
    frame = pd.DataFrame({"time": np.repeat(times, d), "sensor": np.tile(sensors, n),
                          "value": values.reshape(-1)})
    keep = rng.random(len(frame)) >= scenario.drop_fraction
    outage_sensor = sensors[min(6, d - 1)]
    outage_start = times[0] + pd.Timedelta(days=scenario.days // 2, hours=14)
    outage = (frame["sensor"] == outage_sensor) & (frame["time"] >= outage_start) & (
        frame["time"] < outage_start + pd.Timedelta(hours=2))
    frame = frame[keep & ~outage].reset_index(drop=True)
    truth = {
        "sensors": sensors,
        "change_at": scenario.change_at,
        "changed_sensors": sorted(scenario.changes, key=lambda s: scenario.changes[s])
        if scenario.change_at else [],
        "changes_m": dict(scenario.changes) if scenario.change_at else {},
        "start": times[0].isoformat(), "end": times[-1].isoformat(), "step": scenario.step,
        "outage": {"sensor": outage_sensor, "start": outage_start.isoformat(), "hours": 2},
        "seed": scenario.seed,
        "ack_at": scenario.ack_at,
    }
    return frame, truth


def write_csv(frame: pd.DataFrame, path: Any) -> None:
    """Write the long frame as ``timestamp,sensor_id,value`` (naive UTC), gzip by suffix."""
    out = frame.assign(timestamp=frame["time"].dt.tz_convert("UTC").dt.strftime(
        "%Y-%m-%d %H:%M:%S"))[["timestamp", "sensor", "value"]]
    out = out.rename(columns={"sensor": "sensor_id"})
    # gzip without a time stamp: the same data give the same bytes (the bundled file)
    gz = str(path).endswith(".gz")
    out.to_csv(path, index=False,
               compression={"method": "gzip", "mtime": 0} if gz else "infer")
