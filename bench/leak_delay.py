"""Alert delay and false incidents of the default (live) settings, through the real CLI.

Each scenario is replayed by ``mmdwatch backfill`` (the agent's own inspection, history
and incident code) with hourly inspections from the first time a full before window
exists to the end of the data, the calibration history growing as it goes, as a daemon
started on the first reading would see it. Reported per scenario:

* detection delay: leak onset -> the first firing result whose top 3 sensors hold one of
  the 3 sensors with the largest leak effect, counted when that result can exist
  (t + after);
* false incidents: incidents opened by inspections whose after window ended before the
  onset, and that count per 7 leak-free days;
* seconds per inspection (the result's ``generator.runtime_s``: windows, statistic,
  calibration, and the engine on firing inspections).

Inputs: the L-Town delay scenarios (``../shared/data/ltown-delay-dev/d1`` .. ``d4``) and
null streams from :mod:`bench.null_streams` with a slow common drift (no change at all).

    python -m bench.leak_delay [--null-weeks 4] [--null-seeds 2] [--workers 2]

Writes ``bench/results/leak_delay/{leak_delay.csv, leak_delay.md, timeline.png}``.
"""
from __future__ import annotations

import argparse
import json
import logging
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd

from bench._common import machine_load
from bench.null_streams import NullNetwork

log = logging.getLogger("bench.leak_delay")
_BESIDE = Path(__file__).resolve().parents[2] / "shared" / "data" / "ltown-delay-dev"
SHARED = _BESIDE if _BESIDE.exists() else Path("/work/shared/data/ltown-delay-dev")
OUT = Path(__file__).resolve().parent / "results" / "leak_delay"
BEFORE = pd.Timedelta(days=7)
LIVE_AFTER = pd.Timedelta(hours=16)  # the live profile's after window (last replayed time)


def backfill(data: Path, start: pd.Timestamp, end: pd.Timestamp, out: Path,
             extra: list[str]) -> list[dict]:
    """``mmdwatch backfill`` over [start, end] hourly; the results it printed."""
    cmd = [sys.executable, "-m", "monitor.cli", "backfill", "--data", str(data),
           "--start", start.isoformat(), "--end", end.isoformat(), "--every", "1h",
           "--out", str(out), *extra]
    subprocess.run(cmd, check=True, stderr=subprocess.DEVNULL)
    return [json.loads(line) for line in out.read_text().splitlines() if line.strip()]


def data_range(path: Path) -> tuple[pd.Timestamp, pd.Timestamp]:
    times = pd.read_csv(path, usecols=[0]).iloc[:, 0]
    t = pd.to_datetime(times, utc=True)
    return t.min(), t.max()


def score(results: list[dict], onset: pd.Timestamp | None, top_effect: list[str]) -> dict:
    """Delay, false incidents and timing of one replay."""
    def known(r: dict) -> pd.Timestamp:  # when the result can exist: t + after
        return pd.Timestamp(r["windows"]["after"]["end"])

    leak_free = [r for r in results if onset is None or known(r) <= onset]
    opened = [r for r in results if (r.get("incident") or {}).get("event") == "opened"]
    false = [r for r in opened if onset is None or known(r) <= onset]
    calibrated = [r for r in leak_free if r["status"] in ("ok", "firing")]
    days = len(calibrated) / 24.0
    delay = first_any = None
    top3 = None
    if onset is not None:
        for r in results:
            if r["status"] != "firing" or known(r) <= onset:
                continue
            hours = (known(r) - onset) / pd.Timedelta(hours=1)
            first_any = hours if first_any is None else first_any
            names = [s["sensor_id"] for s in r["sensors"][:3]]
            if any(s in top_effect for s in names):
                delay, top3 = hours, names
                break
    runtime = np.array([r["generator"]["runtime_s"] for r in results])
    firing_rt = np.array([r["generator"]["runtime_s"] for r in results
                          if r["status"] == "firing"])
    return {
        "inspections": len(results),
        "calibrating": sum(r["status"] == "calibrating" for r in results),
        "errors": sum(r["status"] == "error" for r in results),
        "leak_free_calibrated_days": round(days, 2),
        "false_incidents": len(false),
        "false_per_7d": round(len(false) / days * 7, 3) if days else None,
        "incidents_after_onset": len(opened) - len(false),
        "delay_h": delay, "first_firing_h": first_any,
        "top3_at_detection": " ".join(top3) if top3 else "",
        "s_per_inspection_mean": round(float(runtime.mean()), 3),
        "s_per_inspection_p95": round(float(np.quantile(runtime, 0.95)), 3),
        "s_per_firing_inspection_mean": round(float(firing_rt.mean()), 3)
        if firing_rt.size else None,
    }


def run_scenario(name: str, folder: Path, work: Path, extra: list[str]) -> tuple[dict, list]:
    truth = json.loads((folder / "ground_truth.json").read_text())
    onset = pd.Timestamp(truth["target_leak_start"]).tz_localize("UTC")
    data = folder / "pressures.csv.gz"
    first, last = data_range(data)
    results = backfill(data, first + BEFORE, last - LIVE_AFTER, work / f"{name}.jsonl", extra)
    row = {"scenario": name, "onset": onset.isoformat(),
           **score(results, onset, truth["sensors_by_leak_effect"][:3])}
    return row, results


def run_null(seed: int, weeks: int, work: Path, extra: list[str]) -> tuple[dict, list]:
    net = NullNetwork(n_sensors=33, seed=seed, drift_sd=0.03)
    wide = net.simulate("2024-01-01", days=7 + 7 * weeks + 1, stream_seed=seed)
    path = work / f"null{seed}.csv.gz"
    NullNetwork.to_long(wide).to_csv(path, index=False)
    first, last = wide.index[0], wide.index[-1]
    results = backfill(path, first + BEFORE, last - LIVE_AFTER, work / f"null{seed}.jsonl",
                       extra)
    return {"scenario": f"null-{seed} ({weeks} weeks, drift)", "onset": "",
            **score(results, None, [])}, results


def markdown_table(frame: pd.DataFrame) -> list[str]:
    def cell(v: object) -> str:
        return "" if v is None or (isinstance(v, float) and np.isnan(v)) else str(v)

    lines = ["| " + " | ".join(frame.columns) + " |",
             "|" + "---|" * len(frame.columns)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |"
              for row in frame.itertuples(index=False)]
    return lines


def plot(timelines: dict[str, tuple[list, str | None]], path: Path) -> None:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 2.0 * len(timelines)), layout="constrained")
    axes = fig.subplots(len(timelines), 1, squeeze=False)[:, 0]
    for ax, (name, (results, onset)) in zip(axes, timelines.items(), strict=True):
        t = [pd.Timestamp(r["windows"]["after"]["end"]) for r in results]  # when it exists
        p = [(r.get("detection") or {}).get("p_value") for r in results]
        y = [-np.log10(max(v, 1e-8)) if v is not None else np.nan for v in p]
        ax.plot(t, y, lw=0.8, color="#0072B2", label="-log10 p (calibrated)")
        level = next(((r.get("detection") or {}).get("level") for r in results
                      if r.get("detection")), None)
        if level:
            ax.axhline(-np.log10(level), color="#D55E00", ls="--", lw=0.8,
                       label="alert level")
        if onset:
            ax.axvline(pd.Timestamp(onset), color="black", lw=0.8, label="leak onset")
        ax.set_title(name, fontsize=9, loc="left")
        ax.set_ylabel("-log10 p", fontsize=8)
        ax.set_xlabel("time the result exists (inspection time + after window)", fontsize=7)
        ax.tick_params(labelsize=7)
    axes[0].legend(fontsize=7, loc="upper left")
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenarios", nargs="*", default=["d1", "d2", "d3", "d4"])
    ap.add_argument("--data", type=Path, default=SHARED, help="folder of the dev scenarios")
    ap.add_argument("--null-weeks", type=int, default=4)
    ap.add_argument("--null-seeds", type=int, default=1)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--keep", type=Path, help="keep the replayed data and results here")
    ap.add_argument("--extra", nargs=argparse.REMAINDER, default=[],
                    help="more backfill flags, e.g. --extra --profile live")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(args.workers) as pool:
        work = Path(tmp) if args.keep is None else args.keep
        work.mkdir(parents=True, exist_ok=True)
        jobs = {name: pool.submit(run_scenario, name, args.data / name, work, args.extra)
                for name in args.scenarios if (args.data / name).exists()}
        jobs.update({f"null{s}": pool.submit(run_null, s, args.null_weeks, work, args.extra)
                     for s in range(args.null_seeds)})
        rows, timelines = [], {}
        for job in jobs.values():
            row, results = job.result()
            rows.append(row)
            timelines[row["scenario"]] = (results, row["onset"] or None)
            log.info("%s", row)
    table = pd.DataFrame(rows)
    table.to_csv(args.out / "leak_delay.csv", index=False)
    cols = ["scenario", "delay_h", "top3_at_detection", "false_incidents", "false_per_7d",
            "leak_free_calibrated_days", "incidents_after_onset", "s_per_inspection_mean",
            "s_per_firing_inspection_mean"]
    md = [f"# bench.leak_delay ({machine_load()})", "",
          "`python -m bench.leak_delay " + " ".join(argv or sys.argv[1:]) + "`", "",
          *markdown_table(table[cols])]
    (args.out / "leak_delay.md").write_text("\n".join(md) + "\n")
    plot(timelines, args.out / "timeline.png")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
