"""The engine part's batched fits on a CPU: threads (``n_jobs``) and batch sizes.

    python -m bench.engine_part_batches [--jobs 1 2] [--batch-mib 32 64] [--shared]

The pairs are what a backfill of d1's leak day fits in its first pass: the residual
windows (the last 24 before rows against the 16 after rows, 30 sensors) of the 192 hourly
inspections from 2019-09-09 to 2019-09-16 23:00, the replayed week included. Each setting
fits all of them with ``fit_many`` (float64, as the agent does) and is compared with the
first setting: the largest relative difference of the engine statistic ``P`` and of the
p-values. ``--shared`` also runs two processes of each ``n_jobs`` at once, as two
backfills (or the suite's two workers) sharing the cores would. Writes
``bench/results/engine_part_batches.{csv,md}``.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from bench._common import machine_load, markdown_table

log = logging.getLogger("bench.engine_part_batches")
RESULTS = Path(__file__).resolve().parent / "results"
ROOT = Path(__file__).resolve().parents[1]
FIRST = datetime(2019, 9, 9, tzinfo=UTC)
TIMES = 192


def engine_part_pairs() -> tuple[list[tuple[Any, Any]], dict[str, Any]]:
    """The residual pairs of the first pass over d1's 192 times, and the engine part's
    selector parameters (``engine_part_selector`` of the live defaults)."""
    from bench.leak_delay import SHARED
    from connectors.file import FileSource
    from engine.live.engine_power import residual_pair
    from monitor.compose import build_inspector
    from monitor.config import validate_config
    from monitor.decision.calibrated_rule import engine_part_selector
    from monitor.decision.tracker import cached_reader

    d1 = SHARED / "d1" / "pressures.csv.gz"
    config = validate_config({"site": "d1", "source": {"type": "file", "path": str(d1)},
                              "sinks": []})
    inspector = build_inspector(config)
    read = cached_reader(FileSource(config.source).frame())
    times = [FIRST + timedelta(hours=h) for h in range(TIMES)]
    prepared = inspector.detect_windows(times, read)
    rows = inspector.decision.engine_rows
    pairs = [residual_pair(p.detection, rows) for p in prepared.values()]
    params = engine_part_selector(inspector.engine).get_params()
    return pairs, params


def fit(pairs: list[tuple[Any, Any]], params: dict[str, Any], jobs: int, batch_mib: int
        ) -> tuple[float, np.ndarray]:
    """Seconds of one ``fit_many`` and each fit's (P, p-value)."""
    from engine import CVAggregation
    from engine.live.engine_power import validation_power

    selector = CVAggregation(**{**params, "n_jobs": jobs})
    started = time.perf_counter()
    fits = selector.fit_many(pairs, errors="return", max_batch_bytes=batch_mib * 2**20)
    seconds = time.perf_counter() - started
    values = np.array([[validation_power(f.details), f.p_value] for f in fits])
    return seconds, values


def _child(jobs: int, batch_mib: int) -> None:
    pairs, params = engine_part_pairs()
    seconds, _ = fit(pairs, params, jobs, batch_mib)
    print(json.dumps({"seconds": seconds}))


def shared(jobs: int, batch_mib: int) -> list[float]:
    """Two processes fitting the same pairs at once: each one's fit_many seconds."""
    cmd = [sys.executable, "-m", "bench.engine_part_batches", "--child", str(jobs),
           str(batch_mib)]
    procs = [subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(ROOT)}) for _ in range(2)]
    return [json.loads(p.communicate()[0].strip().splitlines()[-1])["seconds"] for p in procs]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, nargs="*", default=[1, 2])
    ap.add_argument("--batch-mib", type=int, nargs="*", default=[32, 64])
    ap.add_argument("--shared", action="store_true", help="also two processes at once")
    ap.add_argument("--child", type=int, nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        _child(*args.child)
        return 0
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    load = machine_load()
    pairs, params = engine_part_pairs()
    log.info("%d pairs of %s x %s", len(pairs), pairs[0][0].shape, pairs[0][1].shape)
    rows, reference = [], None
    for jobs in args.jobs:
        for mib in args.batch_mib:
            seconds, values = fit(pairs, params, jobs, mib)
            if reference is None:
                reference = values
            diff = np.abs(values - reference) / np.maximum(np.abs(reference), 1e-300)
            row = {"n_jobs": jobs, "batch_mib": mib, "pairs": len(pairs),
                   "seconds": round(seconds, 2), "fits_per_s": round(len(pairs) / seconds, 1),
                   "P_max_rel_diff": float(diff[:, 0].max()),
                   "p_max_rel_diff": float(diff[:, 1].max())}
            if args.shared:
                row["two_processes_s"] = " / ".join(f"{s:.2f}" for s in shared(jobs, mib))
            log.info("%s", row)
            rows.append(row)
    table = pd.DataFrame(rows)
    RESULTS.mkdir(exist_ok=True)
    table.to_csv(RESULTS / "engine_part_batches.csv", index=False)
    lines = ["# The engine part's batched fits (`python -m bench.engine_part_batches`)", "",
             (f"Machine: {os.cpu_count()} CPU cores, {load}. The first pass of a backfill of "
             f"d1's leak day with its replayed week: {len(pairs)} residual pairs "
             f"({pairs[0][0].shape[0]} vs {pairs[0][1].shape[0]} rows, "
             f"{pairs[0][0].shape[1]} sensors), one `fit_many` each, float64. Differences "
             "are relative, against the first row."), "", *markdown_table(table)]
    (RESULTS / "engine_part_batches.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(table.to_string(index=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
