"""The report of the shared L-Town leak data at the leak day, through the real pipeline.

    python -m bench.report_ltown [--out bench/results/report_ltown] [--method cv-aggregation]

Reads ``shared/data/ltown-leak-dev/pressures.csv.gz``, inspects at 2019-03-11T00:00Z with
7-day windows (hourly means, normalised by the before-window mean) through the agent's
:class:`monitor.inspection.Inspector` and the engine, and writes the report with the network
map. Prints the report folder, the top sensors and how long the report took.
(``mmdwatch inspect --data ... --at 2019-03-11T00:00:00 --report DIR`` does the same from the
command line.)
"""
from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

LTOWN = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "ltown-leak-dev"
AT = "2019-03-11T00:00:00Z"


@dataclass
class LtownCase:
    result: dict[str, Any]
    before_raw: Any
    after_raw: Any
    before: Any
    after: Any


def ltown_inspection(method: str = "cv-aggregation", seed: int = 0,
                     block_rows: int | None = 24) -> LtownCase:
    """One real inspection of the L-Town data at the leak day (engine runs here)."""
    import pandas as pd

    from monitor.inspection import EngineSettings, Inspector
    from monitor.windows import WindowSpec

    long = pd.read_csv(LTOWN / "pressures.csv.gz", parse_dates=["timestamp"])
    long = long.rename(columns={"timestamp": "time", "sensor_id": "sensor",
                                "pressure_m": "value"})
    long["time"] = long["time"].dt.tz_localize("UTC")

    def read_window(start: Any, end: Any) -> pd.DataFrame:
        return long[(long["time"] >= start) & (long["time"] < end)]

    settings = EngineSettings(method=method, seed=seed, block_rows=block_rows)
    inspector = Inspector("l-town", WindowSpec(), settings,
                          {"method": method, "seed": seed, "data": "ltown-leak-dev"})
    outcome = inspector.run(pd.Timestamp(AT).to_pydatetime(), read_window)
    w = outcome.windows
    return LtownCase(outcome.result, *(None, None, None, None) if w is None else
                     (w.before_raw, w.after_raw, w.before, w.after))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("bench/results/report_ltown"))
    parser.add_argument("--method", default="cv-aggregation")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--block-rows", type=int, default=24,
                        help="rows moved together in splits/permutations (the config "
                             "default, 1 day = 24); 0 = iid rows")
    args = parser.parse_args(argv)

    from monitor.report import write_inspection_report

    t0 = time.perf_counter()
    case = ltown_inspection(args.method, args.seed, args.block_rows or None)
    t1 = time.perf_counter()
    folder = write_inspection_report(
        case.result, args.out, before_raw=case.before_raw, after_raw=case.after_raw,
        before=case.before, after=case.after, sensors_file=LTOWN / "sensors.csv",
        links_file=LTOWN / "network_links.csv")
    t2 = time.perf_counter()
    r = case.result
    print(f"status {r['status']}  p={r['test']['p_value']}  selected {r['selected_sensors']}")
    print("top 6:", [s["sensor_id"] for s in r["sensors"][:6]])
    if r.get("error"):
        print("error:", r["error"])
    print(f"inspection {t1 - t0:.1f} s, report {t2 - t1:.2f} s -> {folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
