"""Weekend against weekday: the live statistics of unchanged data, by the days the after
window covers (issue 28, the first weekend's false incident).

Reads the statistics ``python -m bench.engine_on_residuals`` computed at every hour of each
scenario (``bench/results/engine_on_residuals/statistics_<scenario>.csv``; no fit here).
For the leak-free hours it tabulates both statistics (the level part's ``max z**2`` and
the engine part's validation power) for inspections whose 16-hour after window touches a
Saturday or a Sunday against those whose does not, and the calibrated p-values of the
first weekend after calibration begins, as the agent computes them from the data alone
(against earlier values only, the history then holding weekdays alone): the combined
p-value's smallest value there against the alert level 1/720.

    python -m bench.weekend_statistics [--scenarios d1 d2 d3 d4]

Writes ``bench/results/weekend_statistics.md``.
"""
from __future__ import annotations

import argparse
import logging
from pathlib import Path

import numpy as np
import pandas as pd

from bench._common import markdown_table
from bench.engine_on_residuals import LEVEL, MIN_HISTORY, OUT, calibrated
from engine.live.engine_power import ENGINE_WEIGHT

log = logging.getLogger("bench.weekend_statistics")
RESULTS = Path(__file__).resolve().parent / "results"
AFTER = pd.Timedelta(hours=16)
WEIGHT = ENGINE_WEIGHT  # the engine part's share of the level (the hourly default)


def touches_weekend(times: pd.Series) -> np.ndarray:
    """Whether the after window [t, t + 16 h) of each time holds a Saturday or Sunday hour."""
    hours = [times + pd.Timedelta(hours=h) for h in range(int(AFTER / pd.Timedelta(hours=1)))]
    return np.any([h.dt.day_of_week.to_numpy() >= 5 for h in hours], axis=0)


def summary(name: str) -> dict[str, object]:
    from engine.live.engine_power import combine

    table = pd.read_csv(OUT / f"statistics_{name}.csv")
    table["time"] = pd.to_datetime(table["time"], utc=True)
    weekend = touches_weekend(table["time"])
    clean = ~table["holds_change"].to_numpy()
    row: dict[str, object] = {"scenario": name, "first day": table["time"].iloc[0].day_name()}
    for column in ("level", "engine"):
        for label, part in (("weekday", clean & ~weekend), ("weekend", clean & weekend)):
            values = table.loc[part, column].dropna()
            row[f"{column} median {label}"] = round(float(values.median()), 2)
            row[f"{column} p90 {label}"] = round(float(values.quantile(0.9)), 2)
    p_level = calibrated(table, "level", AFTER)
    p_engine = calibrated(table, "engine", AFTER)
    p = np.array([combine(a, b, WEIGHT).p_value for a, b in zip(p_level, p_engine, strict=True)])
    calibrating = p_level >= 1.0
    first = int(np.argmax(~calibrating)) if (~calibrating).any() else len(table)
    # the first weekend after calibration began: the first run of weekend-touching times
    later = np.arange(len(table)) >= first
    start = int(np.argmax(later & weekend)) if (later & weekend).any() else None
    if start is not None:
        end = start
        while end < len(table) and weekend[end]:
            end += 1
        ours = np.zeros(len(table), dtype=bool)
        ours[start:end] = True
        ours &= clean  # a weekend whose after windows reach the change is not unchanged data
        row["first weekend"] = (f"{table['time'].iloc[start]:%a %d %H:%M} + "
                                f"{int(ours.sum())} h")
        row["first weekend min p"] = f"{float(p[ours].min()):.2g}" if ours.any() else "-"
        before = (np.arange(len(table)) >= first) & (np.arange(len(table)) < start) & clean
        row["weekdays min p"] = f"{float(p[before].min()):.2g}" if before.any() else "-"
    row["level"] = f"{LEVEL:.2g}"
    log.info("%s", row)
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenarios", nargs="+", default=["d1", "d2", "d3", "d4"])
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    frame = pd.DataFrame([summary(name) for name in args.scenarios])
    lines = ["# Weekend against weekday (`python -m bench.weekend_statistics`)", "",
             ("Leak-free hours of each scenario (the statistics of `bench.engine_on_residuals`, "
              f"history needed {MIN_HISTORY} values): the level statistic `max z**2` and the "
              "engine part's validation power, for inspections whose 16-hour after window "
              "touches a weekend and for the others; then the smallest combined p-value on "
              "the first weekend after calibration began (the history then holds weekdays "
              "alone) and on the weekdays before it, against the alert level."), "",
             *markdown_table(frame)]
    (RESULTS / "weekend_statistics.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
