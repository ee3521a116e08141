"""False alarms on streams that did not change: how often does an inspection fire?

Every inspection runs the product's own pipeline on a simulated network that never
changes (:mod:`bench.null_streams`: daily cycles, weekly pattern, day-to-day demand
variation, cross-sensor correlation, AR(1) noise): 5-minute readings -> the monitor's
windows (7 d before / 7 d after, hourly means, ``normalise: before``) -> the engine
selector -> ``firing`` exactly when ``p_value < alpha`` and a sensor is selected (the
retrospective profile's engine rule, docs/result.md).

A calibrated pipeline fires in at most ``alpha`` of them, up to sampling error. The table
compares engine ``block_size`` settings: ``none`` (rows exchangeable, a plain permutation
test: "before") and ``1d`` (whole days move together in splits and permutations: the
product default, "after").

    python -m bench.false_alarms                     # 100 inspections x {none, 1d}
    python -m bench.false_alarms --inspections 200 --blocks 1d --method cv-aggregation

Seasonal streams and the retrospective decision's history (issue 18): ``--drift-sd 0.03``
adds a slow network-wide demand drift; ``--history-days 28`` lets the simulated source
hold 28 earlier daily times, on which the decision is calibrated as well
(monitor/decision/source_history.py); ``--block-alone`` decides the same streams by the
block p-value alone, the paired comparison.

Writes ``bench/results/false_alarms.csv`` (one row per inspection and setting) and
``bench/results/false_alarms.md`` (rates with exact 95 % intervals). Rows are appended as
they finish, so an interrupted run resumes where it stopped (same arguments).
"""
from __future__ import annotations

import argparse
import csv
import logging
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from bench.null_streams import NullNetwork, inspection_plan

log = logging.getLogger("bench.false_alarms")
RESULTS = Path(__file__).resolve().parent / "results"
FIELDS = ["blocks", "method", "inspection", "network_seed", "stream_seed", "inspection_time",
          "p_value", "n_selected", "firing", "runtime_s", "params"]
STEP = pd.Timedelta(hours=1)


@dataclass(frozen=True)
class Setting:
    """One engine configuration under test."""

    blocks: str  # "none" or a duration such as "1d", "12h"
    method: str
    params: tuple[tuple[str, object], ...] = ()

    @property
    def block_rows(self) -> int | None:
        if self.blocks == "none":
            return None
        rows = pd.Timedelta(self.blocks) / STEP
        if rows != int(rows) or rows < 1:
            raise ValueError(f"--blocks {self.blocks!r} is not a whole number of hours")
        return int(rows)

    @property
    def key(self) -> tuple[str, str, str]:
        return self.blocks, self.method, _params_text(self.params)


def _params_text(params: tuple[tuple[str, object], ...]) -> str:
    return ";".join(f"{k}={v}" for k, v in params)


@dataclass(frozen=True)
class Source:
    """What the simulated source holds besides the two windows, and how seasonal it is."""

    history_days: int = 0  # earlier daily inspection times it covers (0: the windows only)
    drift_sd: float = 0.0  # slow network-wide demand drift (bench.null_streams)
    block_alone: bool = False  # the same streams, but the block p-value decides alone

    @property
    def calibrates(self) -> bool:
        """Whether the decision uses the source's history."""
        return bool(self.history_days) and not self.block_alone

    @property
    def text(self) -> str:
        """Appended to the setting's params, so each source is its own row group."""
        return ((f";history={self.history_days}d" if self.history_days else "")
                + (";block_alone" if self.block_alone else "")
                + (f";drift_sd={self.drift_sd:g}" if self.drift_sd else ""))


def null_readings(network_seed: int, stream_seed: int, t: pd.Timestamp, n_sensors: int,
                  spec: object, source: Source = Source()) -> pd.DataFrame:
    """Long readings (time, sensor, value) covering both windows of inspection time ``t``
    and, with ``source.history_days``, the windows of that many earlier daily times whose
    after window ends by ``t`` (monitor/decision/source_history.py)."""
    net = NullNetwork(n_sensors=n_sensors, seed=network_seed, drift_sd=source.drift_sd)
    before, after = pd.Timedelta(spec.before), pd.Timedelta(spec.after)  # type: ignore[attr-defined]
    earlier = after + pd.Timedelta(days=source.history_days - 1) if source.history_days else \
        pd.Timedelta(0)
    start = t - before - earlier
    days = (t + after - start) / pd.Timedelta(days=1)
    return NullNetwork.to_long(net.simulate(start, days, stream_seed=stream_seed))


def p_value_only(engine: object, spec: object, readings: pd.DataFrame, t: pd.Timestamp) -> float:
    """The p-value the default pipeline reports, without the CV fits that do not enter it.

    With ``block_size`` set the selectors take their p-value from one whole-block
    permutation test on the prepared windows (engine/block_test.py); the ARD fits only rank
    sensors. This calls the same window builder, the same selector object's ``_prepare``
    and ``_p_value`` with the same seed, so the value is identical to a full ``fit`` (the
    benchmark checks that on the inspections it also runs in full). Firing needs a
    selected sensor as well, so ``p < alpha`` here bounds the firing rate from above.
    """
    from monitor.windows import build_windows

    w = build_windows(readings, t, spec)
    selector = engine.make_selector()  # type: ignore[attr-defined]
    if selector.block_size is None:
        raise ValueError("--p-value-only needs block_size: without blocks the p-value comes "
                         "from the cross-fitted splits, so run the full pipeline")
    p, _ = selector._p_value(selector._prepare(w.before, w.after), None)
    return float(p)


def history_p_value(engine: object, spec: object, readings: pd.DataFrame, t: pd.Timestamp,
                    history_days: int) -> float:
    """The decision's p-value with the source's history (the product's own functions,
    monitor/decision/source_history.py): max(block p, history p), or the block p-value
    while the history holds too few values."""
    from monitor.decision.source_history import source_history
    from monitor.windows import build_windows

    p_block = p_value_only(engine, spec, readings, t)
    w = build_windows(readings, t, spec)  # type: ignore[arg-type]
    hist = source_history(t.to_pydatetime(), w, spec, lambda start, end: readings,  # type: ignore[arg-type]
                          engine.make_selector().test_statistics,  # type: ignore[attr-defined]
                          pd.Timedelta(days=history_days).to_pytimedelta())
    vote = hist.vote(engine.alpha)  # type: ignore[attr-defined]
    return p_block if vote is None else max(p_block, vote[0])


def run_one(setting: Setting, i: int, network_seed: int, stream_seed: int, t: pd.Timestamp,
            n_sensors: int, alpha: float, p_only: bool = False,
            source: Source = Source()) -> dict:
    """One inspection through the agent's own Inspector (windows -> engine -> result)."""
    from engine.live.calibration import CalibrationSettings
    from monitor.inspection import DecisionSettings, EngineSettings, Inspector
    from monitor.windows import WindowSpec

    spec = WindowSpec()  # the product defaults: 7 d / 7 d, 1 h means, normalise: before
    readings = null_readings(network_seed, stream_seed, t, n_sensors, spec, source)
    engine = EngineSettings(method=setting.method, alpha=alpha, seed=0, device="cpu",
                            block_rows=setting.block_rows, params=setting.params)
    if p_only:
        t0 = time.perf_counter()
        p = (history_p_value(engine, spec, readings, t, source.history_days)
             if source.calibrates else p_value_only(engine, spec, readings, t))
        return {"blocks": setting.blocks, "method": setting.method, "inspection": i,
                "network_seed": network_seed, "stream_seed": stream_seed,
                "inspection_time": t.isoformat(), "p_value": p, "n_selected": -1,
                "firing": int(p < alpha), "runtime_s": round(time.perf_counter() - t0, 3),
                "params": _params_text(setting.params) + ";p_value_only" + source.text}
    decision = DecisionSettings(
        rule="engine", source_history=source.calibrates,
        calibration=CalibrationSettings(history=pd.Timedelta(
            days=max(source.history_days, 1)).to_pytimedelta()))
    inspector = Inspector("null-bench", spec, engine, {"bench": "false_alarms"}, decision)
    result = inspector.run(t.to_pydatetime(), lambda start, end: readings).result
    if result["status"] == "error":
        raise RuntimeError(f"inspection {i} ended in error: {result.get('error')}")
    return {"blocks": setting.blocks, "method": setting.method, "inspection": i,
            "network_seed": network_seed, "stream_seed": stream_seed,
            "inspection_time": t.isoformat(), "p_value": float(result["test"]["p_value"]),
            "n_selected": len(result["selected_sensors"]),
            "firing": int(result["status"] == "firing"),
            "runtime_s": float(result["engine"]["runtime_s"]),
            "params": _params_text(setting.params) + source.text}


def clopper_pearson(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """Exact two-sided binomial confidence interval for k successes in n trials."""
    from scipy.stats import beta

    a = (1 - level) / 2
    lo = 0.0 if k == 0 else float(beta.ppf(a, k, n - k + 1))
    hi = 1.0 if k == n else float(beta.ppf(1 - a, k + 1, n - k))
    return lo, hi


def exceeds_alpha_p(k: int, n: int, alpha: float) -> float:
    """One-sided binomial p-value of "the firing rate is above alpha" (small = miscalibrated)."""
    from scipy.stats import binom

    return float(binom.sf(k - 1, n, alpha))


def summarise(rows: list[dict], alpha: float) -> pd.DataFrame:
    frame = pd.DataFrame(rows)
    out = []
    for (blocks, method, params), g in frame.groupby(["blocks", "method", "params"], sort=False):
        k, n = int(g["firing"].sum()), len(g)
        lo, hi = clopper_pearson(k, n)
        out.append({
            "method": method, "block_size": blocks, "params": params or "defaults",
            "inspections": n, "firing": k, "firing_rate": k / n, "ci95_low": lo, "ci95_high": hi,
            "p_rate_above_alpha": exceeds_alpha_p(k, n, alpha),
            "p_value_below_alpha": float((g["p_value"] < alpha).mean()),
            "median_p": float(g["p_value"].median()),
            "median_runtime_s": float(g["runtime_s"].median()),
        })
    return pd.DataFrame(out)


def to_markdown(summary: pd.DataFrame, alpha: float, command: str) -> str:
    lines = [
        "# False alarms on unchanged streams",
        "",
        f"Command: `{command}`",
        "",
        ("Null network (`bench/null_streams.py`): 33 sensors, 5-minute readings, daily cycle, "
         "weekly pattern, day-to-day demand variation, cross-sensor correlation, AR(1) noise, "
         "no change. Default windows (7 d / 7 d, hourly means, normalise: before). "
         f"Firing = p < alpha = {alpha} and a sensor selected. Interval: exact 95 % "
         "(Clopper-Pearson). `P(rate>alpha)`: one-sided binomial p-value against alpha "
         "(small = more alarms than alpha allows)."),
        "",
        ("| method | block_size | params | inspections | firing | rate | 95 % CI | "
         "P(rate>alpha) | share p<alpha | median p | median s/fit |"),
        "| --- | --- | --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: |",
    ]
    for r in summary.itertuples():
        lines.append(
            f"| {r.method} | {r.block_size} | {r.params} | {r.inspections} | {r.firing} | "
            f"{r.firing_rate:.3f} | [{r.ci95_low:.3f}, {r.ci95_high:.3f}] | "
            f"{r.p_rate_above_alpha:.3g} | {r.p_value_below_alpha:.3f} | {r.median_p:.3f} | "
            f"{r.median_runtime_s:.2f} |")
    return "\n".join(lines) + "\n"


def _parse_params(items: list[str]) -> tuple[tuple[str, object], ...]:
    out = []
    for item in items:
        key, _, raw = item.partition("=")
        try:
            value: object = int(raw)
        except ValueError:
            try:
                value = float(raw)
            except ValueError:
                value = raw
        out.append((key, value))
    return tuple(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--inspections", type=int, default=100)
    ap.add_argument("--blocks", nargs="+", default=["none", "1d"],
                    help="engine block_size settings: none, 1d, 12h, ...")
    ap.add_argument("--method", default="cv-aggregation")
    ap.add_argument("--param", action="append", default=[],
                    help="extra selector keyword, e.g. --param n_permutations=199")
    ap.add_argument("--sensors", type=int, default=33)
    ap.add_argument("--alpha", type=float, default=0.05)
    ap.add_argument("--networks", type=int, default=10, help="distinct simulated networks")
    ap.add_argument("--name", default="false_alarms", help="output file stem")
    ap.add_argument("--indices", default=None,
                    help="run only these inspection numbers of the plan, e.g. 0,6,13 (the plan "
                         "itself depends on --inspections)")
    ap.add_argument("--p-value-only", action="store_true",
                    help="with block_size: compute only the reported p-value (identical to "
                         "the full pipeline's; firing counted as p < alpha, an upper bound)")
    ap.add_argument("--history-days", type=int, default=0,
                    help="earlier daily times the simulated source also covers: the decision "
                         "is calibrated on them as well (decision.source_history); 0: the "
                         "source holds the two windows only, the block p-value decides")
    ap.add_argument("--block-alone", action="store_true",
                    help="with --history-days: the same streams, decided by the block p-value "
                         "alone (the paired comparison)")
    ap.add_argument("--drift-sd", type=float, default=0.0,
                    help="seasonal streams: a slow network-wide demand drift (e.g. 0.03)")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    try:
        import torch

        torch.set_num_threads(1)  # a benchmark on a shared 2-core box: one core
    except ImportError:  # pragma: no cover
        pass

    params = _parse_params(args.param)
    settings = [Setting(b, args.method, params) for b in args.blocks]
    args.out.mkdir(parents=True, exist_ok=True)
    csv_path = args.out / f"{args.name}.csv"
    rows: list[dict] = []
    if csv_path.exists():
        with csv_path.open() as fh:
            rows = list(csv.DictReader(fh))
        for r in rows:
            r["firing"], r["inspection"] = int(r["firing"]), int(r["inspection"])
            r["p_value"], r["runtime_s"] = float(r["p_value"]), float(r["runtime_s"])
            r["params"] = r.get("params") or ""
    source = Source(args.history_days, args.drift_sd, args.block_alone)
    suffix = (";p_value_only" if args.p_value_only else "") + source.text
    done = {(r["blocks"], r["method"], r["params"], r["inspection"]) for r in rows}
    plan = inspection_plan(args.inspections)
    new_file = not csv_path.exists()
    with csv_path.open("a", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=FIELDS)
        if new_file:
            writer.writeheader()
        only = None if args.indices is None else {int(x) for x in args.indices.split(",")}
        for i, (stream_seed, t) in enumerate(plan):
            if only is not None and i not in only:
                continue
            for setting in settings:
                if (setting.key[0], setting.key[1], setting.key[2] + suffix, i) in done:
                    continue
                row = run_one(setting, i, i % args.networks, stream_seed, t, args.sensors,
                              args.alpha, p_only=args.p_value_only, source=source)
                writer.writerow(row)
                fh.flush()
                rows.append(row)
                log.info("%s blocks=%s #%d p=%.4f firing=%d (%.1fs)", setting.method,
                         setting.blocks, i, row["p_value"], row["firing"], row["runtime_s"])
    wanted = {(s.key[0], s.key[1], s.key[2] + suffix) for s in settings}
    rows = [r for r in rows if (r["blocks"], r["method"], r["params"]) in wanted
            and r["inspection"] < args.inspections]
    summary = summarise(rows, args.alpha)
    command = "python -m bench.false_alarms " + " ".join(argv if argv is not None else sys.argv[1:])
    md = to_markdown(summary, args.alpha, command.strip())
    (args.out / f"{args.name}.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
