"""The engine part's weight: what each share of the alert level buys and costs.

For each scenario, both statistics of the live decision at every hour (the agent's own
``Inspector.detect_many``: the level statistic and CV-aggregation's validation power on the
residual windows, the engine fits batched), each calibrated as the agent calibrates it:
against the values of earlier times whose after window has ended, within 28 days, once 96
are there, and (the clean history, approximated) none whose after window holds the change.
For each ``engine_weight`` w the decision is ``min(p_level / (1 - w), p_engine / w) <
1/720``, and the table gives the hours from the onset to the first firing result (counted
when it exists, t + 16 h) and the firings before the onset. w = 0 is the level part alone;
"engine alone" is the engine part's p-value at the whole level, for comparison.
docs/decision.md ("The engine part") reads the result.

    python -m bench.engine_on_residuals [--scenarios d1 d2 dev-noise ...]

Writes ``bench/results/engine_on_residuals/{statistics_<scenario>.csv, weights.md}``.
"""
from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path

import numpy as np
import pandas as pd

from bench._common import machine_load, markdown_table

log = logging.getLogger("bench.engine_on_residuals")
_BESIDE = Path(__file__).resolve().parents[2] / "shared" / "data"
DATA = _BESIDE if _BESIDE.exists() else Path("/work/shared/data")
OUT = Path(__file__).resolve().parent / "results" / "engine_on_residuals"
SCENARIOS = ("d1", "d2", "d3", "d4", "dev-noise", "dev-stuck", "dev-cycle", "dev-drift",
             "dev-none")
WEIGHTS = (0.0, 0.2, 0.25, 0.3, 0.35, 0.4, 0.5)
LEVEL = 1 / 720  # 1 h / 30 d, the live default
MIN_HISTORY = 96
HISTORY = pd.Timedelta(days=28)


def _folder(name: str) -> Path:
    found = sorted(DATA.glob(f"*/{name}"))
    if not found:
        raise SystemExit(f"no scenario {name!r} under {DATA}; give one of shape-dev or "
                         "ltown-delay-dev (e.g. dev-cycle, d1)")
    return found[0]


def statistics(name: str) -> tuple[pd.DataFrame, pd.Timestamp, float]:
    """Both statistics at every hour of a scenario, the onset, and seconds per fit."""
    from monitor.compose import build_inspector
    from monitor.config import validate_config
    from monitor.decision.tracker import cached_reader

    folder = _folder(name)
    truth = json.loads((folder / "ground_truth.json").read_text())
    onset = pd.Timestamp(truth.get("change_start") or truth["target_leak_start"], tz="UTC")
    frame = pd.read_csv(folder / "pressures.csv.gz")
    frame.columns = ["time", "sensor", "value"]
    frame["time"] = pd.to_datetime(frame["time"], utc=True)
    inspector = build_inspector(validate_config({
        "site": name, "source": {"type": "file", "path": str(folder / "pressures.csv.gz")}}))
    times = pd.date_range(frame["time"].min().ceil("h") + pd.Timedelta(days=7),
                          frame["time"].max() - inspector.spec.after, freq="1h")
    started = time.perf_counter()
    values = inspector.detect_many([t.to_pydatetime() for t in times], cached_reader(frame))
    per_fit = (time.perf_counter() - started) / len(times)
    table = pd.DataFrame({"time": times,
                          "level": [np.nan if v is None else v[0] for v in values],
                          "engine": [np.nan if v is None or v[1] is None else v[1]
                                     for v in values]})
    table["holds_change"] = table["time"] + inspector.spec.after > onset
    return table, onset, per_fit


def calibrated(table: pd.DataFrame, column: str, after: pd.Timedelta) -> np.ndarray:
    """Each time's p-value against the clean history before it (1 while calibrating)."""
    from engine.live.calibration import TailFit

    out = np.ones(len(table))
    for i, t in enumerate(table["time"]):
        past = table[(table["time"] + after <= t) & (table["time"] >= t - HISTORY)
                     & ~table["holds_change"]][column].dropna().to_numpy()
        if past.size >= MIN_HISTORY and np.isfinite(table[column].iloc[i]):
            out[i] = TailFit.of(past).pvalue(float(table[column].iloc[i]))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenarios", nargs="+", default=list(SCENARIOS))
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    logging.getLogger("engine").setLevel(logging.WARNING)
    from engine.live.engine_power import combine

    after = pd.Timedelta(hours=16)
    OUT.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in args.scenarios:
        table, onset, per_fit = statistics(name)
        table.to_csv(OUT / f"statistics_{name}.csv", index=False)
        p_level, p_engine = calibrated(table, "level", after), calibrated(table, "engine", after)
        row: dict[str, object] = {"scenario": name, "s_per_time": round(per_fit, 3)}
        for w in (*WEIGHTS, 1.0):
            # w = 1: the engine part alone at the whole level (no decision uses it)
            p = p_engine if w == 1.0 else np.array(
                [combine(a, b, w).p_value for a, b in zip(p_level, p_engine, strict=True)])
            fired = p < LEVEL
            before = int((fired & ~table["holds_change"].to_numpy()).sum())
            hits = table["time"][fired & table["holds_change"].to_numpy()]
            delay = None if hits.empty else round((hits.iloc[0] + after - onset)
                                                  / pd.Timedelta(hours=1), 2)
            key = "engine alone" if w == 1.0 else f"w={w:g}"
            row[key] = f"{'-' if delay is None else delay} / {before}"
        log.info("%s: %s", name, row)
        rows.append(row)
    frame = pd.DataFrame(rows)
    lines = [f"# bench.engine_on_residuals ({machine_load()})", "",
             "`python -m bench.engine_on_residuals`", "",
             ("Cells: hours from the onset to the first firing result (when it exists) / "
             "firings before the onset, for each `decision.engine_weight` w (w=0: the "
             "level part alone; engine alone: its p-value at the whole level, which no "
             "setting uses), at the live level 1/720."), "", *markdown_table(frame)]
    (OUT / "weights.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
