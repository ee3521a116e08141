"""How long a report adds to an inspection.

    python -m bench.report_speed [--repeats 5] [--out bench/results/report_speed.csv]

Times ``write_inspection_report`` (every figure: scores, lambda heatmap, 3 profiles, network
map with 909 links) for 33 sensors (the target: under 3 s), 100 and 300 sensors, and
``write_backfill_report`` for 90 daily inspections of 33 sensors. The first call in a process
pays the matplotlib import; it is reported apart ("cold"), the rest as median and max.
Inputs are the synthetic inspections of :mod:`monitor.report.example` (realistic shapes; the
report's cost does not depend on where the scores came from). With ``--ltown`` it also times
the report of a real CV-aggregation result on the shared L-Town leak data.
"""
from __future__ import annotations

import argparse
import csv
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

LTOWN = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "ltown-leak-dev"


def _map_files(folder: Path, ids: list[str], seed: int = 0) -> tuple[Path, Path]:
    """A sensors.csv for ``ids`` and a links file: L-Town's 909 links when the shared data
    are there (a realistic drawing load), else 900 random segments."""
    rng = np.random.default_rng(seed)
    sensors = folder / "sensors.csv"
    pd.DataFrame({"sensor_id": ids, "x": rng.uniform(0, 2800, len(ids)),
                  "y": rng.uniform(0, 1600, len(ids))}).to_csv(sensors, index=False)
    links = LTOWN / "network_links.csv"
    if not links.is_file():
        links = folder / "links.csv"
        xy = rng.uniform(0, 2800, (900, 4))
        pd.DataFrame(xy, columns=["x1", "y1", "x2", "y2"]).to_csv(links, index=False)
    return sensors, links


#: CPU seconds of the last _time() runs: on a shared machine wall time also counts waiting
#: for a core, CPU time is what the report itself costs.
_CPU: list[float] = []


def _time(fn, repeats: int) -> list[float]:  # type: ignore[no-untyped-def]
    out = []
    _CPU.clear()
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        out.append(time.perf_counter() - t0)
        _CPU.append(time.process_time() - c0)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path("bench/results/report_speed.csv"))
    parser.add_argument("--ltown", action="store_true",
                        help="also time a real CV-aggregation result on the L-Town data")
    args = parser.parse_args(argv)

    t0 = time.perf_counter()
    from monitor.report import write_backfill_report, write_inspection_report
    from monitor.report.example import example_backfill, example_inspection
    import_s = time.perf_counter() - t0

    rows: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        first = True
        for n in (33, 100, 300):
            ex = example_inspection(n, 6, seed=n)
            sensors, links = _map_files(work, ex.result["engine"]["labels"], seed=n)

            def report(ex=ex, sensors=sensors, links=links) -> None:  # type: ignore[no-untyped-def]
                write_inspection_report(ex.result, work / "out", before_raw=ex.before_raw,
                                        after_raw=ex.after_raw, before=ex.before,
                                        after=ex.after, sensors_file=sensors, links_file=links)

            cold = None
            if first:  # includes importing matplotlib and building its font cache if absent
                cold = _time(report, 1)[0]
                first = False
            times = _time(report, args.repeats)
            rows.append({"case": f"inspection, {n} sensors, 6 lambdas, map + 909 links",
                         "sensors": n, "cold_s": cold, "median_s": statistics.median(times),
                         "max_s": max(times), "cpu_median_s": statistics.median(_CPU),
                         "repeats": args.repeats})

        results = example_backfill(n_sensors=33, days=90, change_day=60)
        times = _time(lambda: write_backfill_report(results, work / "bf"), args.repeats)
        rows.append({"case": "backfill, 90 inspections x 33 sensors", "sensors": 33,
                     "cold_s": None, "median_s": statistics.median(times), "max_s": max(times),
                     "cpu_median_s": statistics.median(_CPU), "repeats": args.repeats})

        if args.ltown:
            rows.extend(_ltown_rows(work, args.repeats, write_inspection_report))

    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)

    print(f"import monitor.report: {import_s:.3f} s (matplotlib loads on first draw)")
    print(f"load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"{'case':<52} {'cold s':>7} {'median s':>9} {'max s':>7} {'cpu s':>6}")
    for r in rows:
        cold = f"{r['cold_s']:.2f}" if r["cold_s"] is not None else "-"
        print(f"{r['case']:<52} {cold:>7} {r['median_s']:>9.2f} {r['max_s']:>7.2f} "
              f"{r['cpu_median_s']:>6.2f}")
    print(f"written {args.out}")
    worst_33 = max(float(r["max_s"]) for r in rows if r["sensors"] == 33
                   and str(r["case"]).startswith("inspection"))
    print(f"33 sensors: max {worst_33:.2f} s (target < 3 s): "
          f"{'OK' if worst_33 < 3 else 'TOO SLOW'}")
    return 0


def _ltown_rows(work: Path, repeats: int, write) -> list[dict[str, object]]:  # type: ignore[no-untyped-def]
    from bench.report_ltown import ltown_inspection

    # iid rows: the engine finishes in about half a minute here (1-day blocks take minutes);
    # the report's cost does not depend on it.
    case = ltown_inspection(block_rows=None)
    times = _time(lambda: write(case.result, work / "lt", before_raw=case.before_raw,
                                after_raw=case.after_raw, before=case.before, after=case.after,
                                sensors_file=LTOWN / "sensors.csv",
                                links_file=LTOWN / "network_links.csv"), repeats)
    return [{"case": "inspection, L-Town leak (30 sensors, CV-aggregation)", "sensors": 30,
             "cold_s": None, "median_s": statistics.median(times), "max_s": max(times),
             "cpu_median_s": statistics.median(_CPU), "repeats": repeats}]


if __name__ == "__main__":
    sys.exit(main())
