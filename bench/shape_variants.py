"""Shape changes beyond shape-dev: a stuck sensor and a changed daily cycle on three
neighbouring sensors, made from each ``ltown-delay-dev`` scenario's leak-free start.

    python -m bench.shape_variants [--data ../shared/data/ltown-delay-dev] [--keep DIR]

Issue 28 reports held-out shape cases that shape-dev does not reproduce: a sensor frozen
at its level never named, a changed cycle on three neighbouring sensors never named. Each
of d1-d4 gives three cases, cut like shape-dev (the first 14.25 days; the change on day
11 at 19:05, a Friday evening, lasting to the end):

* ``stuck-big`` / ``stuck-small``: the sensor with the largest daily cycle, and one at
  the first quartile of cycle ranges, keep their last reading before the change;
* ``cycle3``: the sensor with the second-largest cycle and its two nearest neighbours
  (by map distance) have their daily cycle halved around their daily mean (shape-dev's
  k = 0.5).

Readings are rounded to 0.01 m like shape-dev's. Each case is replayed and scored by
:mod:`bench.leak_delay` (hourly ``mmdwatch backfill`` over the whole history); its
table lands in ``bench/results/shape_variants/``.
"""
from __future__ import annotations

import argparse
import json
import logging
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

from bench import leak_delay

log = logging.getLogger("bench.shape_variants")
OUT = Path(__file__).resolve().parent / "results" / "shape_variants"
DAYS = 14.25
CHANGE_AT = pd.Timedelta(days=11, hours=19, minutes=5)


def _hourly_profile(wide: pd.DataFrame) -> pd.DataFrame:
    hourly = wide.resample("1h").mean()
    return hourly.groupby(hourly.index.hour).mean()  # (24, D)


def make_cases(source: Path) -> dict[str, tuple[pd.DataFrame, list[str], pd.Timestamp, dict]]:
    """The three cases of one scenario: name -> (wide readings, changed sensors, change
    start, what changed)."""
    frame = pd.read_csv(source / "pressures.csv.gz")
    time, sensor, value = frame.columns[:3]
    frame[time] = pd.to_datetime(frame[time])
    start = frame[time].min().normalize()
    frame = frame[frame[time] < start + pd.Timedelta(days=DAYS)]
    change = start + CHANGE_AT
    wide = frame.pivot_table(index=time, columns=sensor, values=value)
    profile = _hourly_profile(wide[wide.index < change])
    ranges = (profile.max() - profile.min()).sort_values()
    cases = {}
    for label, name in (("stuck-big", ranges.index[-1]),
                        ("stuck-small", ranges.index[len(ranges) // 4])):
        stuck = wide.copy()
        last = float(stuck.loc[stuck.index < change, name].dropna().iloc[-1])
        stuck.loc[stuck.index >= change, name] = last
        cases[f"{source.name}-{label}"] = (stuck, [name], change,
                                            {"what": "stuck at its last value", "value": last})
    places = pd.read_csv(source / "sensors.csv").set_index("sensor_id")
    anchor = ranges.index[-2]
    xy = places.loc[[c for c in wide.columns if c in places.index], ["x", "y"]]
    distance = np.hypot(xy["x"] - xy.loc[anchor, "x"], xy["y"] - xy.loc[anchor, "y"])
    group = list(distance.sort_values().index[:3])
    cycle = wide.copy()
    after = cycle.index >= change
    hours = cycle.index.hour[after]
    for name in group:
        deviation = profile[name] - profile[name].mean()
        cycle.loc[after, name] += (0.5 - 1) * deviation.reindex(hours).to_numpy()
    cases[f"{source.name}-cycle3"] = (cycle, group, change,
                                      {"what": "daily cycle halved around its mean", "k": 0.5})
    return cases


def write_case(folder: Path, wide: pd.DataFrame, changed: list[str], change: pd.Timestamp,
               what: dict) -> None:
    """The case as shape-dev lays one out: long readings and a ground truth."""
    folder.mkdir(parents=True, exist_ok=True)
    long = wide.stack().rename("pressure_m").reset_index()
    long.columns = ["timestamp", "sensor_id", "pressure_m"]
    long["pressure_m"] = long["pressure_m"].round(2)
    long.to_csv(folder / "pressures.csv.gz", index=False)
    truth = {"kind": folder.name.split("-", 1)[1], "change_start": str(change),
             "changed_sensors": changed, "expected_top_sensor": changed[0],
             "change": what, "onset_weekday": change.day_name(), "change_end": None}
    (folder / "ground_truth.json").write_text(json.dumps(truth, indent=1), encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=leak_delay.SHARED,
                    help="folder of ltown-delay-dev")
    ap.add_argument("--scenarios", nargs="*", default=["d1", "d2", "d3", "d4"])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--keep", type=Path, help="keep the cases, replays and results here")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) if args.keep is None else args.keep
        cases = work / "cases"
        names = []
        for scenario in args.scenarios:
            for name, (wide, changed, change, what) in make_cases(args.data / scenario).items():
                write_case(cases / name, wide, changed, change, what)
                names.append(name)
                log.info("%s: %s from %s", name, ", ".join(changed), change)
        return leak_delay.main(["--scenarios", "--shape", *names, "--shape-data", str(cases),
                                "--null-seeds", "0", "--workers", str(args.workers),
                                "--out", str(args.out), "--keep", str(work / "replays")])


if __name__ == "__main__":
    raise SystemExit(main())
