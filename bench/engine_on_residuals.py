"""Could CV-aggregation on the live detector's residuals be a second calibrated statistic?

Every ``--every`` over one scenario (windows from the agent's own ``Inspector``, live
profile): the residual windows of the detector (the last ``--rows`` hours of the before
window against the 16-hour after window) go to ``CVAggregation.fit_many`` in one batch,
and each fit gives the candidate statistic (the mean of ``max(l_val, 0)`` over splits and
lambdas, a test-power estimate that does not saturate), the engine's own p-value and its
top sensors, beside the level statistic (``detection.value``). docs/decision.md
("Candidates measured and dropped") reads the result.

    python -m bench.engine_on_residuals --scenario dev-cycle

Writes ``bench/results/engine_on_residuals_<scenario>.csv`` and prints the table.
"""
from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path

import numpy as np
import pandas as pd

log = logging.getLogger("bench.engine_on_residuals")
_BESIDE = Path(__file__).resolve().parents[2] / "shared" / "data"
DATA = _BESIDE if _BESIDE.exists() else Path("/work/shared/data")
RESULTS = Path(__file__).resolve().parent / "results"


def _folder(name: str) -> Path:
    found = sorted(DATA.glob(f"*/{name}"))
    if not found:
        raise SystemExit(f"no scenario {name!r} under {DATA}; give one of shape-dev or "
                         "ltown-delay-dev (e.g. dev-cycle, d1)")
    return found[0]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", default="dev-cycle")
    ap.add_argument("--every", default="2h", help="spacing of the inspection times")
    ap.add_argument("--rows", type=int, default=24, help="before-window rows compared")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")

    from engine import CVAggregation
    from engine.live.residual_shift import detect
    from monitor.compose import build_inspector
    from monitor.config import validate_config
    from monitor.decision.tracker import cached_reader

    folder = _folder(args.scenario)
    truth = json.loads((folder / "ground_truth.json").read_text())
    onset = pd.Timestamp(truth.get("change_start") or truth["target_leak_start"], tz="UTC")
    frame = pd.read_csv(folder / "pressures.csv.gz")
    frame.columns = ["time", "sensor", "value"]
    frame["time"] = pd.to_datetime(frame["time"], utc=True)
    path = str(folder / "pressures.csv.gz")
    inspector = build_inspector(validate_config({"site": args.scenario,
                                                 "source": {"type": "file", "path": path}}))
    read = cached_reader(frame)
    times = pd.date_range(frame["time"].min().ceil("h") + pd.Timedelta(days=7),
                          frame["time"].max() - inspector.spec.after, freq=args.every)
    pairs, levels = [], []
    for t in times:
        w = inspector._windows(t.to_pydatetime(), read)
        det = detect(w.before_raw, w.after_raw, inspector.decision.detector)
        pairs.append((det.before_residuals.iloc[-args.rows:], det.after_residuals))
        levels.append(det.value)
    started = time.perf_counter()
    fits = CVAggregation(seed=0).fit_many(pairs)
    log.info("%d fits in one fit_many: %.3f s per fit", len(fits),
             (time.perf_counter() - started) / len(fits))
    rows = []
    for t, fit, level in zip(times, fits, levels, strict=True):
        power = np.clip(np.nan_to_num(fit.details["val_ratio"]), 0, None)
        top = [str(fit.labels[i]) for i in np.argsort(-np.asarray(fit.scores))[:3]]
        rows.append({"inspection_time": t.isoformat(),
                     "after_window_holds_change": bool(t + inspector.spec.after > onset),
                     "engine_power": round(float(power.mean()), 4),
                     "engine_p_value": float(fit.p_value), "level_statistic": round(level, 2),
                     "engine_top3": " ".join(top)})
    table = pd.DataFrame(rows)
    RESULTS.mkdir(parents=True, exist_ok=True)
    table.to_csv(RESULTS / f"engine_on_residuals_{args.scenario}.csv", index=False)
    for changed, part in table.groupby("after_window_holds_change"):
        log.info("after window %s the change: engine power %.2f-%.2f, level statistic "
                 "%.1f-%.1f, engine p < 0.005 on %d of %d", "holds" if changed else "before",
                 part.engine_power.min(), part.engine_power.max(), part.level_statistic.min(),
                 part.level_statistic.max(), int((part.engine_p_value < 0.005).sum()),
                 len(part))
    print(table.to_string(index=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
