"""Leak-free L-Town pressure streams made the way the shared data were made, for as many
independent weeks as a bench needs (the shared sets hold five leak-free first weekends).

The recipe is the one ``../shared/data/ltown-delay-dev/README.md`` states: the L-Town v1.2
nominal model (``L-TOWN.inp`` from the ``epyt`` wheel), its weekly 5-minute residential and
commercial patterns perturbed so that no two days are the same (a smooth day-to-day factor
shared by all nodes, AR(1) with sd 3 %; a day-to-day factor for each of 10 spatial
clusters, sd 3 %; 5-minute AR(1) noise for each cluster, sd 5 %, phi 0.9), pressure-driven
demand (required pressure 25 m), one day of warm-up dropped, the 30 sensors of
``ltown-delay-dev``, white noise of 0.03-0.08 m a sensor, values rounded to 0.01 m and
0.1 % of readings dropped. Two things differ and are ours: the hydraulics run in EPANET 2.2
(``wntr.sim.EpanetSimulator``, pressure-driven: seconds for two weeks, where the shared
data's ``WNTRSimulator`` takes minutes), and there is no background leak (it is constant,
so not a change). The AR(1) coefficient of the shared day factor (0.7) and how it is made
smooth within a day (linear between day midpoints) are our reading of "smooth". A sensor's
mean and spread come out as in the shared data: n3's hourly means have a mean of 28.52 m
and an sd of 0.479 m here, 28.52 m and 0.477 m in ``shape-dev/dev-none``.

Needs the ``sim`` extra (``pip install -e '.[sim]'``: wntr, epyt); nothing else in
mmdwatch does. Shapes: :meth:`LTownStreams.simulate` returns a long frame
``timestamp, sensor_id, pressure_m`` (the shared files' layout), one row a reading.
"""
from __future__ import annotations

import logging
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

log = logging.getLogger("bench.ltown_sim")
STEP_S = 300
WEEK_STEPS = 7 * 288  # the model's patterns: one week of 5-minute multipliers, Monday first
CLUSTERS = 10


class SimulatorMissing(RuntimeError):
    """wntr or epyt is not installed."""


def _network() -> Any:
    try:
        import epyt  # noqa: F401 - the package that carries L-TOWN.inp
        import wntr
    except ImportError as exc:
        raise SimulatorMissing(
            f"{exc.name} is not installed: the L-Town simulation needs the sim extra "
            "(.venv/bin/pip install -e '.[sim]')") from exc
    inp = resources.files("epyt") / "networks" / "L-TOWN.inp"
    return wntr.network.WaterNetworkModel(str(inp))


def ar1(size: int, phi: float, sd: float, rng: np.random.Generator) -> np.ndarray:
    """A stationary AR(1) series of ``size`` values with marginal sd ``sd``."""
    innovations = rng.normal(0.0, sd * np.sqrt(1 - phi ** 2), size)
    out = np.empty(size)
    out[0] = rng.normal(0.0, sd)
    for i in range(1, size):
        out[i] = phi * out[i - 1] + innovations[i]
    return out


def default_sensors() -> list[str]:
    """The 30 sensors of ``ltown-delay-dev``."""
    from bench.leak_delay import SHARED

    return pd.read_csv(SHARED / "d1" / "sensors.csv")["sensor_id"].astype(str).tolist()


class LTownStreams:
    """Leak-free L-Town streams, one independent demand realisation per seed."""

    def __init__(self, sensors: list[str] | None = None, work: Path | None = None) -> None:
        self.sensors = sensors or default_sensors()
        self.work = work or Path("/tmp")

    def simulate(self, seed: int, start: pd.Timestamp, days: float) -> pd.DataFrame:
        """``days`` of readings from ``start`` (a Monday: the patterns begin on one)."""
        import wntr

        if pd.Timestamp(start).weekday() != 0:
            raise ValueError(f"start {start} is a {pd.Timestamp(start).day_name()}: the "
                             "model's weekly patterns begin on a Monday; pass a Monday")
        rng = np.random.default_rng(seed)
        wn = _network()
        steps = round((days + 1) * 86400 / STEP_S)  # + the Sunday before, warm-up
        pattern_step = (np.arange(steps) + 6 * 288) % WEEK_STEPS
        junctions = wn.junction_name_list
        xy = np.array([wn.get_node(j).coordinates for j in junctions], dtype=float)
        from scipy.cluster.vq import kmeans2

        _, cluster = kmeans2(xy, CLUSTERS, seed=seed, minit="++")
        n_days = steps // 288 + 2
        midday = (np.arange(n_days) + 0.5) * 288
        at = np.arange(steps)
        shared = np.interp(at, midday, ar1(n_days, 0.7, 0.03, rng))
        base = {name: np.asarray(wn.get_pattern(name).multipliers, dtype=float)
                for name in ("P-Residential", "P-Commercial", "P-Industrial")}
        for c in range(CLUSTERS):
            daily = np.interp(at, midday, rng.normal(0.0, 0.03, n_days))
            factor = (1 + shared) * (1 + daily) * (1 + ar1(steps, 0.9, 0.05, rng))
            for name in ("P-Residential", "P-Commercial"):
                wn.add_pattern(f"{name}-{c}", list(base[name][pattern_step] * factor))
        industrial = base["P-Industrial"]
        wn.add_pattern("P-Industrial-run", list(industrial[at % industrial.size]))
        for junction, c in zip(junctions, cluster, strict=True):
            for demand in wn.get_node(junction).demand_timeseries_list:
                if demand.pattern_name in ("P-Residential", "P-Commercial"):
                    demand.pattern_name = f"{demand.pattern_name}-{c}"
                elif demand.pattern_name == "P-Industrial":
                    demand.pattern_name = "P-Industrial-run"
        opts = wn.options
        opts.time.duration = (steps - 1) * STEP_S
        opts.time.hydraulic_timestep = opts.time.pattern_timestep = STEP_S
        opts.time.report_timestep = STEP_S
        opts.time.pattern_start = 0
        opts.hydraulic.demand_model = "PDA"
        opts.hydraulic.required_pressure = 25.0
        opts.hydraulic.minimum_pressure = 0.0
        prefix = self.work / f"ltown-sim-{seed}"
        result = wntr.sim.EpanetSimulator(wn).run_sim(file_prefix=str(prefix))
        pressure = result.node["pressure"][self.sensors].iloc[288:]  # drop the warm-up day
        times = pd.Timestamp(start) + pd.to_timedelta(np.arange(len(pressure)) * STEP_S, "s")
        noise_sd = rng.uniform(0.03, 0.08, len(self.sensors))
        values = np.round(pressure.to_numpy() + rng.normal(size=pressure.shape) * noise_sd, 2)
        wide = pd.DataFrame(values, index=pd.Index(times, name="timestamp"),
                            columns=self.sensors)
        long = wide.stack().rename("pressure_m").reset_index()
        long.columns = ["timestamp", "sensor_id", "pressure_m"]
        return long[rng.random(len(long)) > 0.001].reset_index(drop=True)
