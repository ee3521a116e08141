"""Fleet throughput: inspections per second on Dask workers and the local pool, a 20-site
week of hourly inspections, and the per-job costs the scaling model of docs/fleet.md uses.

``python -m bench.fleet`` (defaults as in issue 12):

1. **Throughput** (``--inspections 100``): one backfill of N independent inspections of the
   shared L-Town dev set d1 (30 sensors; the live windows, 7 days before / 16 hours after,
   decided by the engine rule so each inspection is one CV-aggregation fit, the compute
   an inspection costs when it fires), run by ``monitor.fleet.backfill.run_backfill`` on a Dask
   ``LocalCluster`` of 1 and of 2 single-threaded worker processes and on the local process
   pool of 2, one inspection per job, then on 2 workers with ``run_backfill``'s default
   batches (consecutive times as one ``InspectionBatch``, fits through ``fit_many``).
   Workers are warmed up first (imports), cluster start-up is not timed. Results are
   checked identical (fingerprints, statuses, selected sensors, p-values within 1e-6)
   across the executors.
2. **Sites** (``--sites 20 --days 7``): 20 simulated district networks
   (``monitor.demo.simulate``, 20 sensors each, a leak in every fourth), live profile
   (calibrated; the history before the first time computed on the workers too), hourly
   for 7 days: 20 x 168 = 3,360 inspections on a Dask LocalCluster of ``--workers`` (2).
   Wall time and cost per inspection.
3. **Per-job costs** behind the scaling model: the agent's read + job build per
   inspection, the pickled job size, Dask's round trip per trivial task, and the outbox
   commit per result (``AgentState.commit_inspection``, SQLite ``synchronous=FULL``).
4. **fit_many**: ``CVAggregation.fit_many`` of 24 same-shape inspections (consecutive hours
   of d1) against 24 ``fit`` calls, with the agreement of their results.
5. **Optimiser batches**: one fit's training problems (10 splits x 6 lambdas) solved in
   one batch with 0, 1, 2, 5, 11 copies of themselves: the cost per fit, i.e. what
   batching fits together can save on this device.

Writes ``bench/results/fleet/<part>.csv`` (throughput, sites, costs, fit_many,
optimiser_batches) and ``fleet.md``; ``--skip`` keeps an earlier run's table of a part.
The machine is a shared 2-core VM: other jobs' load is recorded with each table.
"""
from __future__ import annotations

import argparse
import logging
import os
import pickle
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from bench._common import markdown_table as common_table

OUT = Path(__file__).resolve().parent / "results" / "fleet"
D1 = Path(__file__).resolve().parents[2] / "shared" / "data" / "ltown-delay-dev" / "d1" \
    / "pressures.csv.gz"
if not D1.exists():
    D1 = Path("/work/shared/data/ltown-delay-dev/d1/pressures.csv.gz")

log = logging.getLogger("bench.fleet")


# ------------------------------------------------------------------------------------------
# helpers
# ------------------------------------------------------------------------------------------
def _load() -> str:
    return " / ".join(f"{x:.1f}" for x in os.getloadavg())


def _warm() -> int:
    """Imports an inspection needs (run once per worker before timing)."""
    import torch  # noqa: F401

    import monitor.windows  # noqa: F401

    return os.getpid()


def _warm_up(executor: Any, workers: int) -> None:
    from monitor.fleet.executors import DaskExecutor

    if isinstance(executor, DaskExecutor):
        executor.wait_for_workers(workers, timeout=120)
        executor.client.run(_warm)
        return
    pids = {f.result() for f in [executor.submit(_warm) for _ in range(4 * workers)]}
    log.info("warm: %d pool process(es)", len(pids))


def _process_cpu() -> float:
    """CPU seconds (user + system) this process has used."""
    import psutil

    t = psutil.Process().cpu_times()
    return float(t.user + t.system)


def _workers_cpu(executor: Any) -> float:
    """CPU seconds used so far by the executor's worker processes (all of them)."""
    import psutil

    from monitor.fleet.executors import DaskExecutor

    if isinstance(executor, DaskExecutor):
        return float(sum(executor.client.run(_process_cpu).values()))
    total = 0.0
    for child in psutil.Process().children(recursive=True):
        try:
            t = child.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            continue
    return total


def _executor(kind: str, workers: int) -> Any:
    from monitor.config import ExecutorConfig
    from monitor.fleet.executors import build_executor

    config = ExecutorConfig(type=kind, workers=workers)  # type: ignore[arg-type]
    if kind == "local" and workers == 1:
        raise ValueError("local:1 runs inline; use inline")
    return build_executor(config)


def _d1_site(rule: str, method: str) -> tuple[Any, Any, Any]:
    """(config, inspector, read_window) for d1, the live windows under ``rule``."""
    from monitor.compose import build_inspector
    from monitor.config import validate_config
    from monitor.decision.tracker import cached_reader
    from monitor.windows import WindowSpec  # noqa: F401 - imported for pickling on workers

    config = validate_config({"site": "d1", "source": {"type": "file", "path": str(D1)},
                              "sinks": [], "decision": {"rule": rule},
                              "engine": {"method": method}})
    from connectors.file import FileSource

    frame = FileSource(config.source).frame()
    return config, build_inspector(config), cached_reader(frame)


def same(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> bool:
    """Identical as the issue defines it: same inspections, statuses, selected sensors,
    p-values within 1e-6."""
    if [r["fingerprint"] for r in a] != [r["fingerprint"] for r in b]:
        return False
    for x, y in zip(a, b, strict=True):
        px, py = x["test"]["p_value"], y["test"]["p_value"]
        if x["status"] != y["status"] or x["selected_sensors"] != y["selected_sensors"]:
            return False
        if (px is None) != (py is None) or (px is not None and abs(px - py) > 1e-6):
            return False
    return True


def markdown_table(frame: pd.DataFrame) -> list[str]:
    def cell(v: object) -> str:
        if v is None or (isinstance(v, float) and np.isnan(v)):
            return ""
        return f"{v:.3g}" if isinstance(v, float) else str(v)

    return common_table(frame, cell)


# ------------------------------------------------------------------------------------------
# 1. throughput
# ------------------------------------------------------------------------------------------
def throughput(n: int, method: str, cases: list[tuple[str, int, int | None]]) -> pd.DataFrame:
    """``cases``: (executor kind, workers, times per job: 1, or None for run_backfill's
    default batches)."""
    from monitor.fleet.backfill import SiteBackfill, batch_size, run_backfill

    _, inspector, read = _d1_site("engine", method)
    t0 = datetime(2019, 9, 10, tzinfo=UTC)
    times = [t0 + timedelta(hours=h) for h in range(n)]
    rows, reference = [], None
    for kind, workers, batch in cases:
        executor = _executor(kind, workers)
        try:
            _warm_up(executor, workers)
            per_job = batch or batch_size(executor, n)
            results: list[dict[str, Any]] = []
            load = _load()
            cpu0, agent0 = _workers_cpu(executor), _process_cpu()
            start = time.perf_counter()
            run_backfill([SiteBackfill(inspector, times, read)], executor, results.append,
                         batch=per_job)
            wall = time.perf_counter() - start
            cpu, agent = _workers_cpu(executor) - cpu0, _process_cpu() - agent0
        finally:
            executor.close()
        reference = reference or results
        runtime = np.array([r["generator"]["runtime_s"] for r in results])
        rows.append({"executor": f"{kind}:{workers}", "workers": workers,
                     "times_per_job": per_job,
                     "inspections": len(results), "wall_s": round(wall, 1),
                     "inspections_per_s": round(len(results) / wall, 3),
                     "mean_inspection_s": round(float(runtime.mean()), 3),
                     "worker_cpu_s_per_inspection": round(cpu / len(results), 3),
                     "cores_obtained": round(cpu / wall, 2),
                     "agent_cpu_s_per_inspection": round(agent / len(results), 4),
                     "identical_to_first": same(reference, results), "load_1_5_15": load})
        log.warning("throughput %s:%d, %d per job: %d in %.1f s (%.3f/s), load %s", kind,
                    workers, per_job, len(results), wall, len(results) / wall, load)
    frame = pd.DataFrame(rows)
    one = frame.loc[(frame["executor"] == "dask:1") & (frame["times_per_job"] == 1),
                    "inspections_per_s"]
    base = float(one.iloc[0]) if len(one) else float("nan")
    frame["speedup_vs_dask_1"] = (frame["inspections_per_s"] / base).round(2)
    return frame


# ------------------------------------------------------------------------------------------
# 2. many sites
# ------------------------------------------------------------------------------------------
def sites(n_sites: int, days: int, workers: int, kind: str) -> pd.DataFrame:
    from monitor.compose import build_incidents, build_inspector
    from monitor.config import validate_config
    from monitor.decision.tracker import SiteTracker, cached_reader, history_times
    from monitor.demo.simulate import Scenario, simulate
    from monitor.fleet.backfill import SiteBackfill, backfill_history, run_backfill

    start = pd.Timestamp("2026-01-05T00:00:00Z")
    first = (start + pd.Timedelta(days=11)).to_pydatetime()  # 7 days before + 4 of history
    times = [first + timedelta(hours=h) for h in range(days * 24)]
    span = 11 + days + 1  # days of data: the last after window fits
    plan = []
    t_sim = time.perf_counter()
    for k in range(n_sites):
        leak = k % 4 == 0
        change = (start + pd.Timedelta(days=14, hours=6)).isoformat() if leak else None
        frame, _ = simulate(Scenario(n_sensors=20, days=span, change_at=change,
                                     seed=100 + k))
        config = validate_config({"site": f"dma{k:02d}", "sinks": [],
                                  "source": {"type": "file", "path": "unused.csv"}})
        inspector = build_inspector(config)
        tracker = SiteTracker(inspector, build_incidents(config))
        plan.append(SiteBackfill(inspector, times, cached_reader(frame), tracker=tracker))
    log.warning("sites: %d simulated in %.1f s", n_sites, time.perf_counter() - t_sim)
    executor = _executor(kind, workers)
    try:
        _warm_up(executor, workers)
        load = _load()
        cpu0 = _workers_cpu(executor)
        started = time.perf_counter()
        history = sum(backfill_history(s, history_times(s.inspector, times[0]), executor)
                      for s in plan)
        history_wall = time.perf_counter() - started
        results: list[dict[str, Any]] = []
        run_backfill(plan, executor, results.append)
        wall = time.perf_counter() - started
        cpu = _workers_cpu(executor) - cpu0
    finally:
        executor.close()
    order = [(r["inspection_time"], r["site"]) for r in results]
    runtime = np.array([r["generator"]["runtime_s"] for r in results])
    status = pd.Series([r["status"] for r in results]).value_counts().to_dict()
    opened = sorted({r["site"] for r in results
                     if (r.get("incident") or {}).get("event") == "opened"})
    row = {"sites": n_sites, "days": days, "executor": f"{kind}:{workers}",
           "inspections": len(results), "history_values": history,
           "in_time_order": order == sorted(order, key=lambda x: x[0]) and len(set(order))
           == len(order), "wall_s": round(wall, 1), "history_wall_s": round(history_wall, 1),
           "wall_s_per_inspection": round(wall / len(results), 4),
           "core_s_per_inspection": round(wall * workers / len(results), 4),
           "mean_inspection_s": round(float(runtime.mean()), 4),
           "worker_cpu_s_per_job": round(cpu / (len(results) + history), 4),
           "cores_obtained": round(cpu / wall, 2),
           "firing": status.get("firing", 0), "ok": status.get("ok", 0),
           "calibrating": status.get("calibrating", 0), "error": status.get("error", 0),
           "sites_with_incident": " ".join(opened) or "none", "load_1_5_15": load}
    log.warning("sites: %s", row)
    return pd.DataFrame([row])


# ------------------------------------------------------------------------------------------
# 3. per-job costs
# ------------------------------------------------------------------------------------------
def _noop(x: int) -> int:
    return x


def costs(n: int = 200) -> pd.DataFrame:
    from monitor.fleet.backfill import SiteBackfill
    from monitor.fleet.executors import DaskExecutor
    from monitor.storage.state import AgentState

    rows = []
    _, inspector, _ = _d1_site("calibrated", "cv-aggregation")
    from connectors.file import FileSource
    from monitor.config import validate_config

    config = validate_config({"site": "d1", "source": {"type": "file", "path": str(D1)},
                              "sinks": []})
    source = FileSource(config.source)
    source.frame()

    def read(a: pd.Timestamp, b: pd.Timestamp) -> pd.DataFrame:
        return source.read_window(a, b, resample="1h", aggregate="mean")

    t0 = datetime(2019, 9, 12, tzinfo=UTC)
    times = [t0 + timedelta(hours=h) for h in range(n)]
    site = SiteBackfill(inspector, times, read)
    started = time.perf_counter()
    jobs = [site.job(i) for i in range(n)]
    build = (time.perf_counter() - started) / n
    started = time.perf_counter()
    blobs = [pickle.dumps(j) for j in jobs]
    dump = (time.perf_counter() - started) / n
    rows.append({"cost": "agent: read window (file source, in memory) + build job",
                 "per_item_ms": round(build * 1e3, 2), "note": "per inspection"})
    rows.append({"cost": "agent: pickle job", "per_item_ms": round(dump * 1e3, 2),
                 "note": f"{np.mean([len(b) for b in blobs]) / 1e6:.2f} MB per job "
                         "(30 sensors x 5-min readings, 7d16h)"})
    executor = DaskExecutor(None, workers=2)
    try:
        _warm_up(executor, 2)
        m = 1000
        started = time.perf_counter()
        futures = [executor.submit(_noop, i) for i in range(m)]
        [f.result() for f in futures]
        rt = (time.perf_counter() - started) / m
        started = time.perf_counter()
        futures = [executor.submit(pickle.loads, blobs[i % n]) for i in range(100)]
        [f.result() for f in futures]
        ship = (time.perf_counter() - started) / 100
    finally:
        executor.close()
    rows.append({"cost": "dask: trivial task (submit, schedule, run, result)",
                 "per_item_ms": round(rt * 1e3, 2), "note": f"{m} tasks, 2 workers"})
    rows.append({"cost": "dask: task carrying one job's bytes (send + unpickle)",
                 "per_item_ms": round(ship * 1e3, 2), "note": "100 tasks, 2 workers"})
    with tempfile.TemporaryDirectory() as tmp:
        state = AgentState(Path(tmp) / "state.sqlite")
        result = {"fingerprint": "", "site": "d1", "status": "ok", "schema": "x",
                  "blob": "x" * 6000}
        started = time.perf_counter()
        for i in range(n):
            state.commit_inspection(float(i), {**result, "fingerprint": f"fp{i}"},
                                    statistic=1.0)
        commit = (time.perf_counter() - started) / n
        state.close()
    rows.append({"cost": "outbox: commit one result (ledger + outbox + history, fsync)",
                 "per_item_ms": round(commit * 1e3, 2), "note": "6 kB result, local disk"})
    frame = pd.DataFrame(rows)
    frame["load_1_5_15"] = _load()
    return frame


# ------------------------------------------------------------------------------------------
# 4. fit_many
# ------------------------------------------------------------------------------------------
def _d1_pairs(n: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """The (before, after) windows of ``n`` consecutive hourly d1 inspections (168 x 30
    and 16 x 30: one shape)."""
    from monitor.windows import build_windows

    _, inspector, read = _d1_site("engine", "cv-aggregation")
    t0 = datetime(2019, 9, 10, tzinfo=UTC)
    pairs = []
    for h in range(n):
        start, t_utc, end = inspector.spec.bounds(t0 + timedelta(hours=h))
        w = build_windows(read(start, end), t_utc, inspector.spec)
        pairs.append((w.before.to_numpy(), w.after.to_numpy()))
    return pairs


def fit_many(n: int = 24) -> pd.DataFrame:
    """``CVAggregation().fit_many`` of ``n`` same-shape inspections against ``n`` ``fit``
    calls: wall times, and whether the results agree."""
    from engine import CVAggregation

    pairs = _d1_pairs(n)
    load = _load()
    started = time.perf_counter()
    separate = [CVAggregation(seed=0).fit(x, y) for x, y in pairs]
    one_by_one = time.perf_counter() - started
    started = time.perf_counter()
    batched = CVAggregation(seed=0).fit_many(pairs)
    many = time.perf_counter() - started
    agree = sum(list(a.selected) == list(b.selected) for a, b in
                zip(separate, batched, strict=True))
    dp = max(abs(float(a.p_value) - float(b.p_value))
             for a, b in zip(separate, batched, strict=True))
    return pd.DataFrame([{"fits": n, "device": str(batched[0].device),
                          "one_by_one_s": round(one_by_one, 2),
                          "fit_many_s": round(many, 2),
                          "speedup": round(one_by_one / many, 2),
                          "same_selected": f"{agree}/{n}", "max_p_diff": dp,
                          "load_1_5_15": load}])


def optimiser_batches(sizes: tuple[int, ...] = (1, 2, 3, 6, 12), reps: int = 3
                      ) -> pd.DataFrame:
    """Where fit_many's time goes: the training optimiser of one d1 fit (10 splits x 6
    lambdas, the bulk of a fit) run for 1, 2, 3, 6, 12 fits' problems as one batch
    (``ProblemSet.concat``), best of ``reps``: its cost per fit. Flat on a CPU means that
    batching fits cannot make them much cheaper there (the work per data set is the same
    and already vectorised); on a GPU it falls with the batch."""
    import torch

    from engine import CVAggregation
    from engine._fitting import torch_threads

    x, y = _d1_pairs(1)[0]
    selector = CVAggregation(seed=0)
    prep = selector._prepare(x, y)
    lambdas, _ = selector._lambda_candidates_many([prep])[0]
    with torch.no_grad():
        setup = selector._split_setup(prep, lambdas, selector.n_splits,
                                      np.random.default_rng(selector.seed))
    problems, lam_one, init_one = setup.train, setup.lam.expand(setup.train.n_sets, -1), \
        setup.init
    rows = []
    load = _load()
    with torch_threads(selector.n_threads):  # as in a fit: one thread by default
        for size in sizes:
            rows.append(_time_batch(problems, lam_one, init_one, size, reps,
                                    selector.objective))
    frame = pd.DataFrame(rows)
    frame["device"] = str(prep.device)
    frame["load_1_5_15"] = load
    return frame


def _time_batch(problems: Any, lam_one: Any, init_one: Any, size: int, reps: int,
                objective: str) -> dict[str, Any]:
    """Best-of-``reps`` time of ``size`` copies of one fit's training problems."""
    import torch

    from engine.optimiser import minimise
    from engine.problems import ProblemSet

    batch = ProblemSet.concat([problems] * size)
    lam = torch.cat([lam_one] * size)
    init = torch.cat([init_one] * size)
    best, epochs = float("inf"), 0
    for _ in range(reps):
        started = time.perf_counter()
        result = minimise(batch, lam, objective=objective, init=init)  # type: ignore[arg-type]
        best = min(best, time.perf_counter() - started)
        epochs = result.total_epochs
    return {"fits_in_batch": size, "data_sets": batch.n_sets,
            "problems": batch.n_sets * lam.shape[-1], "epochs": epochs,
            "batch_s": round(best, 3), "per_fit_s": round(best / size, 3),
            "torch_threads": torch.get_num_threads()}


# ------------------------------------------------------------------------------------------
def _section(title: str, frame: pd.DataFrame | None, lines: list[str], note: str = "") -> None:
    lines += ["", f"## {title}", ""]
    if frame is None:
        lines.append("not measured (see the log)")
        return
    if note:
        lines += [note, ""]
    lines += markdown_table(frame)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--inspections", type=int, default=100)
    ap.add_argument("--method", default="cv-aggregation",
                    help="engine selector of the throughput backfill")
    ap.add_argument("--repeats", type=int, default=2,
                    help="runs of each 2-worker throughput case, interleaved (the VM's "
                         "speed drifts by 10-30%% between runs)")
    ap.add_argument("--sites", type=int, default=20)
    ap.add_argument("--days", type=int, default=7)
    ap.add_argument("--workers", type=int, default=2, help="workers of the sites backfill")
    ap.add_argument("--skip", nargs="*", default=[],
                    choices=["throughput", "sites", "costs", "fit_many",
                             "optimiser_batches"])
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING,
                        format="%(asctime)s %(levelname)-7s %(name)s: %(message)s")
    args.out.mkdir(parents=True, exist_ok=True)
    steps: dict[str, Callable[[], pd.DataFrame | None]] = {
        "costs": costs,
        "throughput": lambda: throughput(args.inspections, args.method,
                                         [("dask", 1, 1)] + [
                                             (kind, 2, batch) for _ in range(args.repeats)
                                             for kind in ("dask", "local")
                                             for batch in (1, None)]),
        "sites": lambda: sites(args.sites, args.days, args.workers, "dask"),
        "fit_many": fit_many,
        "optimiser_batches": optimiser_batches,
    }
    command = "python -m bench.fleet " + " ".join(argv if argv is not None else sys.argv[1:])
    frames: dict[str, pd.DataFrame | None] = {}
    for name, step in steps.items():
        csv, how = args.out / f"{name}.csv", args.out / f"{name}.command"
        if name in args.skip:  # an earlier run's table stays in the report
            if csv.exists():
                frames[name] = pd.read_csv(csv)
            continue
        frames[name] = step()
        if frames[name] is not None:
            frames[name].to_csv(csv, index=False)  # type: ignore[union-attr]
            how.write_text(f"{command.strip()}  ({datetime.now(UTC):%Y-%m-%d %H:%M} UTC)\n")
    lines = ["# bench.fleet", "",
             (f"On {os.cpu_count()} CPUs, a shared VM: the load average (1/5/15 min) at the "
              "start of each measurement is in its row; the command that produced each "
              "table is under its title.")]
    titles = {
        "throughput": ("Throughput: a backfill of independent inspections",
                       (f"{args.inspections} hourly inspections of d1 (30 sensors, 7d before"
                       f" / 16h after, engine rule, `{args.method}`); workers warmed up, "
                       "start-up not timed.")),
        "sites": ("Many sites: simulated districts, live profile",
                  (f"{args.sites} sites x {args.days} days x hourly, 20 sensors each, a leak "
                  "in every fourth; history before the first time included in the wall.")),
        "costs": ("Per-job costs (scaling model)", ""),
        "fit_many": ("fit_many vs one-by-one (24 same-shape inspections)", ""),
        "optimiser_batches": ("The training optimiser of one fit, batched with copies of itself",
                              ("One d1 fit's 10 x 6 training problems solved in one batch "
                               "with copies of themselves: the cost per fit.")),
    }
    for name, (title, note) in titles.items():
        if name in frames:
            how = args.out / f"{name}.command"
            run = f"`{how.read_text().strip()}`" if how.exists() else ""
            _section(title, frames[name], lines, "\n\n".join(x for x in (run, note) if x))
    (args.out / "fleet.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
