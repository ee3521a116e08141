"""How far the engine part's statistic moves when the readings move by their last digits.

    python -m bench.sensitivity [--scenarios d1 d2 d3 d4] [--eps 1e-9] [--every 1]
                                [--compare-before]

At every hourly time of each ``ltown-delay-dev`` scenario (from the first full before
window to the last full after window), the windows are built as the agent builds them;
each value the engine part fits (``--level residuals``: the detector's residual windows)
or each raw reading of both windows (``--level readings``) is then multiplied by
``1 + eps * u`` with u uniform on [-1, 1] (a last-digit change), and the engine part's fit
is computed again. A residual is a reading less its profile, level and common mode,
divided by its spread: a 1e-9 relative change of a 50 m reading is ~1e-6 of a residual,
so at ``--level readings`` any statistic of the residuals moves ~1e-6. Reported, over all
times: quantiles of the relative change of the engine part's statistic (CV-aggregation's
validation power, :mod:`engine.live.engine_power`) and of its calibrated p-value, each
time's p-value taken against the scenario's statistics at the times whose after window
ended by it (the history, without the decisions that keep firing times out of it).

Two variants on the same windows and perturbations: the engine part as the live decision
runs it (Algorithm 3's data-chosen penalties, the ``engine.SMOOTH`` optimiser, the pick
between the all-ones and the moment start) and the engine part before issue 31
(``engine.live.engine_power.FAST_PARAMS``: the same with ``engine.FAST``);
``--variant`` picks one.
Writes ``bench/results/sensitivity.{csv,md}``.
"""
from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from bench._common import machine_load

log = logging.getLogger("bench.sensitivity")
RESULTS = Path(__file__).resolve().parent / "results"
QUANTILES = (0.5, 0.9, 0.99, 1.0)
WHAT = {"residuals": "value the engine part fits (the detector's residual windows)",
        "readings": "raw reading of both windows"}


def _shared(name: str) -> Path:
    beside = Path(__file__).resolve().parents[2] / "shared" / "data" / name
    return beside if beside.exists() else Path("/work/shared/data") / name


def _inspector(data: Path) -> Any:
    from monitor.cli import _one_shot_config, build_parser
    from monitor.compose import build_inspector

    args = build_parser().parse_args(["inspect", "--data", str(data), "--at", "2019-01-01"])
    return build_inspector(_one_shot_config(args))


def scenario_windows(data: Path, every: int) -> tuple[Any, list[pd.Timestamp], list[Any]]:
    """The inspector of the live defaults, the hourly times and their windows."""
    from monitor.decision.tracker import cached_reader

    frame = pd.read_csv(data)
    frame = frame.rename(columns={frame.columns[0]: "time", frame.columns[1]: "sensor",
                                  frame.columns[2]: "value"})
    frame["time"] = pd.to_datetime(frame["time"], utc=True)
    frame["sensor"] = frame["sensor"].astype(str)
    inspector = _inspector(data)
    spec = inspector.spec
    first = (frame["time"].min() + pd.Timedelta(spec.before)).ceil("1h")
    last = (frame["time"].max() - pd.Timedelta(spec.after)).floor("1h")
    times = list(pd.date_range(first, last, freq="1h"))[::every]
    windows = inspector._windows_many([t.to_pydatetime() for t in times], cached_reader(frame))
    kept = [t for t in times if t.to_pydatetime() in windows]
    return inspector, kept, [windows[t.to_pydatetime()] for t in kept]


def statistics(inspector: Any, windows: list[Any], params: dict[str, Any] | None,
               eps: float, seed: int, level: str = "residuals"
               ) -> tuple[np.ndarray, np.ndarray]:
    """The engine part's statistic at each time, unperturbed and perturbed at ``level``:
    ``"residuals"`` (the fit's inputs) or ``"readings"`` (the raw window values)."""
    from engine.live.engine_power import residual_pair, validation_power
    from engine.live.residual_shift import detect
    from monitor.decision.calibrated_rule import engine_part_selector

    rng = np.random.default_rng(seed)
    detector, rows = inspector.decision.detector, inspector.decision.engine_rows

    def moved(frame: pd.DataFrame) -> pd.DataFrame:
        return frame * (1 + eps * rng.uniform(-1, 1, frame.shape))

    plain = [residual_pair(detect(w.before_raw, w.after_raw, detector), rows) for w in windows]
    if level == "residuals":  # the engine part's own input: the fit's two samples
        shaken = [(moved(x), moved(y)) for x, y in plain]
    else:  # the readings, through the detector's profile, level and common mode
        shaken = [residual_pair(detect(moved(w.before_raw), moved(w.after_raw), detector),
                                rows) for w in windows]
    engine = inspector.engine
    if params is not None:  # a candidate: these over the engine section's parameters
        from engine import CVAggregation

        selector = CVAggregation(seed=engine.seed, alpha=engine.alpha, device=engine.device,
                                 **{**dict(engine.params), **params})
    else:
        selector = engine_part_selector(engine)
    out = []
    for pairs in (plain, shaken):
        fits = selector.fit_many(pairs)
        out.append(np.array([validation_power(f.details) for f in fits]))
    return out[0], out[1]


def pvalues(times: list[pd.Timestamp], values: np.ndarray, probe: np.ndarray,
            inspector: Any) -> tuple[np.ndarray, np.ndarray]:
    """Each time's calibrated p-value of ``values`` and of ``probe`` against the values
    whose after window ended by it (NaN while fewer than the calibration's minimum)."""
    from engine.live.calibration import TailFit

    cal = inspector.decision.calibration
    after = pd.Timedelta(inspector.spec.after)
    stamps = pd.DatetimeIndex(times)
    p, q = np.full(len(times), np.nan), np.full(len(times), np.nan)
    for i, t in enumerate(stamps):
        hist = values[(stamps + after <= t) & (stamps >= t - pd.Timedelta(cal.history))]
        if hist.size >= cal.min_count:
            fit = TailFit.of(hist)
            p[i], q[i] = fit.pvalue(values[i]), fit.pvalue(probe[i])
    return p, q


def relative(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    ok = np.isfinite(a) & np.isfinite(b)
    return np.abs(a[ok] - b[ok]) / np.maximum(np.abs(a[ok]), 1e-300)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenarios", nargs="*", default=["d1", "d2", "d3", "d4"])
    ap.add_argument("--eps", type=float, default=1e-9, help="relative size of the change")
    ap.add_argument("--every", type=int, default=1, help="every k-th hourly time")
    ap.add_argument("--level", choices=("residuals", "readings"), default="residuals",
                    help="what is perturbed: the engine part's inputs (the residual "
                         "windows it fits) or the raw readings of the windows")
    ap.add_argument("--variant", choices=("both", "default", "fast"), default="both",
                    help="the engine part as run, the one before issue 31 (FAST), or both")
    ap.add_argument("--name", default="sensitivity")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("engine").setLevel(logging.WARNING)  # one line per fit otherwise
    load = machine_load()
    from engine.live.engine_power import FAST_PARAMS

    variants: list[tuple[str, dict[str, Any] | None]] = []
    if args.variant in ("both", "default"):
        variants.append(("engine part (default)", None))
    if args.variant in ("both", "fast"):
        variants.append(("FAST, before issue 31", FAST_PARAMS))
    rows = []
    for name in args.scenarios:
        inspector, times, windows = scenario_windows(
            _shared("ltown-delay-dev") / name / "pressures.csv.gz", args.every)
        log.info("%s: %d times", name, len(times))
        for label, params in variants:
            plain, shaken = statistics(inspector, windows, params, args.eps, seed=7,
                                       level=args.level)
            p, q = pvalues(times, plain, shaken, inspector)
            for t, a, b, pa, pb in zip(times, plain, shaken, p, q, strict=True):
                rows.append({"scenario": name, "variant": label, "time": t.isoformat(),
                             "statistic": a, "perturbed": b, "p_value": pa,
                             "p_perturbed": pb})
    table = pd.DataFrame(rows)
    RESULTS.mkdir(exist_ok=True)
    table.to_csv(RESULTS / f"{args.name}.csv", index=False)
    lines = ["# Sensitivity of the engine part's statistic (`python -m bench.sensitivity`)",
             "", (f"Each {WHAT[args.level]} times 1 + {args.eps:g} u, u uniform on "
             f"[-1, 1]; {', '.join(args.scenarios)}, every hourly time"
             f"{'' if args.every == 1 else f' (every {args.every}th)'}; {load}."), "",
             ("| variant | scenario | times | statistic: relative change q50 / q90 / q99 / max "
             "| p-value: relative change q50 / q90 / q99 / max |"), "|---|---|---|---|---|"]
    for (label, name), part in list(table.groupby(["variant", "scenario"], sort=False)) + [
            ((label, "all"), table[table["variant"] == label]) for label, _ in variants]:
        rs = relative(part["statistic"].to_numpy(), part["perturbed"].to_numpy())
        rp = relative(part["p_value"].to_numpy(), part["p_perturbed"].to_numpy())
        fmt = " / ".join
        lines.append(f"| {label} | {name} | {len(part)} | "
                     f"{fmt(f'{np.quantile(rs, q):.1e}' for q in QUANTILES)} | "
                     f"{fmt(f'{np.quantile(rp, q):.1e}' for q in QUANTILES) if rp.size else '-'} |")
    (RESULTS / f"{args.name}.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
