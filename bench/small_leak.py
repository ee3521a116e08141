"""Why the smallest dev leak (d3) is missed, and whether accumulating evidence would help.

For each ``ltown-delay-dev`` scenario, the level statistic's per-sensor ``z``
(:func:`engine.live.residual_shift.detect` on the agent's own windows, live defaults) at
every hour from the first full before window to the end of the data, and the same ``z``
without the common-mode removal. Two tables come out:

1. **The leak against the network.** From the ground truth: the largest noise-free drop,
   the median sensor's, and how many sensors drop by more than half the largest (a leak
   that lowers a whole pressure zone looks like demand to a detector that removes what
   moves every sensor). From the replay: the strongest changed sensor's most negative ``z``
   over the first day of after windows that hold the onset, with and without the common
   mode, against the largest ``|z|`` of any sensor at the leak-free times (after windows
   ending by the onset).
2. **A CUSUM over the hourly z** (the candidate of issue 18 "Why" 7: evidence that
   accumulates against a fixed reference instead of fading). Per sensor and side,
   ``S = max(0, S + z - k)`` and ``max(0, S - z - k)``; the statistic is the largest over
   sensors and sides. For each ``k``: its largest leak-free value, its largest value after
   the onset, and the hours from the onset to the first result (inspection time + 16 h)
   above the leak-free largest value. That bar is optimistic for the CUSUM: a threshold
   calibrated at the live level (1/720) on fewer values than that lies above it.

    python -m bench.small_leak [--scenarios d1 d2 d3 d4]

Writes ``bench/results/small_leak/small_leak.md``; docs/decision.md ("Candidates measured
and dropped") reads it.
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from bench._common import machine_load, markdown_table
from bench.leak_delay import LIVE_AFTER, SHARED, utc

log = logging.getLogger("bench.small_leak")
OUT = Path(__file__).resolve().parent / "results" / "small_leak"
CUSUM_K = (1.0, 1.5, 2.0, 2.5, 3.0)
HOUR = pd.Timedelta(hours=1)


def hourly_z(data: Path) -> tuple[pd.DatetimeIndex, pd.DataFrame, pd.DataFrame]:
    """Per-sensor z at every hour, (T, D), with and without the common mode."""
    from engine.live.residual_shift import detect, level_shift_z, profile_residuals
    from monitor.compose import build_inspector
    from monitor.config import validate_config
    from monitor.decision.tracker import cached_reader
    from monitor.windows import build_windows

    frame = pd.read_csv(data)
    frame.columns = ["time", "sensor", "value"]
    frame["time"] = pd.to_datetime(frame["time"], utc=True)
    inspector = build_inspector(validate_config(
        {"site": data.parent.name, "source": {"type": "file", "path": str(data)}}))
    spec, settings = inspector.spec, inspector.decision.detector
    read = cached_reader(frame)
    times = pd.date_range(frame["time"].min().ceil("h") + spec.before,
                          frame["time"].max() - spec.after, freq="1h")
    with_mode, without = [], []
    for t in times:
        start, t_utc, end = spec.bounds(t.to_pydatetime())
        w = build_windows(read(start, end), t_utc, spec)
        det = detect(w.before_raw, w.after_raw, settings)
        with_mode.append(det.z)
        rb, ra = profile_residuals(w.before_raw, w.after_raw, settings.weekly_profile)
        scale = rb.std(axis=0)
        scale = np.where(scale > 1e-12, scale, 1.0)
        without.append(pd.Series(level_shift_z(rb / scale, ra / scale,
                                               settings.local_level_rows), index=det.z.index))
    return times, pd.DataFrame(with_mode, index=times), pd.DataFrame(without, index=times)


def cusum(z: np.ndarray, k: float) -> tuple[np.ndarray, np.ndarray]:
    """Two-sided CUSUM of each column of ``z`` (T, D) with allowance ``k``: (T,) the
    largest over sensors and sides at each time, and (T,) the column that holds it."""
    z = np.nan_to_num(z)
    up, down = np.zeros(z.shape[1]), np.zeros(z.shape[1])
    out, arg = np.empty(z.shape[0]), np.empty(z.shape[0], dtype=int)
    for i, row in enumerate(z):  # a recursion in time: one step per hour
        up = np.maximum(0.0, up + row - k)
        down = np.maximum(0.0, down - row - k)
        both = np.maximum(up, down)
        arg[i] = int(both.argmax())
        out[i] = both[arg[i]]
    return out, arg


def scenario_rows(name: str) -> tuple[dict, list[dict]]:
    folder = SHARED / name
    truth = json.loads((folder / "ground_truth.json").read_text())
    onset = utc(truth["target_leak_start"])
    effect = {s["sensor_id"]: s["leak_effect_mean_drop_m"] for s in truth["sensors"]}
    drops = np.array(sorted(effect.values(), reverse=True))
    times, z, z_raw = hourly_z(folder / "pressures.csv.gz")
    leak_free = (times + LIVE_AFTER <= onset)
    first_day = (times + LIVE_AFTER > onset) & (times <= onset + pd.Timedelta(hours=24))
    top = truth["sensors_by_leak_effect"][0]
    row = {
        "scenario": name, "strongest sensor": top,
        "largest drop m": round(float(drops[0]), 3),
        "median drop m": round(float(np.median(drops)), 3),
        "sensors dropping > half the largest": f"{int((drops > drops[0] / 2).sum())} of "
                                               f"{drops.size}",
        "its z, first day (min)": round(float(z.loc[first_day, top].min()), 2),
        "its z without common mode (min)": round(float(z_raw.loc[first_day, top].min()), 2),
        "largest leak-free |z|": round(float(np.nanmax(np.abs(z.loc[leak_free].to_numpy()))),
                                       2),
    }
    cusum_rows = []
    for k in CUSUM_K:
        s, arg = cusum(z.to_numpy(), k)
        bar = float(s[leak_free].max())
        hit = np.flatnonzero(~leak_free & (s > bar))
        cusum_rows.append({
            "scenario": name, "k": k, "leak-free max": round(bar, 1),
            "max after the onset": round(float(s[~leak_free].max()), 1),
            "hours to above the leak-free max": (
                "-" if hit.size == 0 else round((times[hit[0]] + LIVE_AFTER - onset) / HOUR, 2)),
            "its sensor": "-" if hit.size == 0 else str(z.columns[arg[hit[0]]])})
    return row, cusum_rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenarios", nargs="+", default=["d1", "d2", "d3", "d4"])
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    OUT.mkdir(parents=True, exist_ok=True)
    leaks, sums = [], []
    for name in args.scenarios:
        row, cusum_rows = scenario_rows(name)
        log.info("%s: %s", name, row)
        leaks.append(row)
        sums += cusum_rows
    given = sys.argv[1:] if argv is None else argv
    lines = [f"# bench.small_leak ({machine_load()})", "",
             "`python -m bench.small_leak " + " ".join(given) + "`", "",
             "## The leak against the network", "", *markdown_table(pd.DataFrame(leaks)), "",
             "## A CUSUM over the hourly z", "", *markdown_table(pd.DataFrame(sums))]
    (OUT / "small_leak.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
