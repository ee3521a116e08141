"""``fit_many`` pairs per second as the number of pairs grows, per device, and the host
syncs of one batched fit on CUDA.

    python -m bench.fit_many_scaling [--devices cuda cpu] [--counts 16 64 256]
                                     [--jobs -1 1 4]

Sizes: the live engine part's pairs (24 before rows against 16 after rows, D = 33 and
D = 300, ``ENGINE_PART_PARAMS``: float64, SMOOTH) and a week (168 x 168, D = 33; up to
64 pairs). On the CPU each ``--jobs`` value (``n_jobs``: batches fitted at once in
threads, -1 every core) is timed, for how the threads scale on a machine's cores. Every other pair has one variable's mean shifted by 1. Each
device and size: one warm-up ``fit_many`` of 2 pairs, then one timed call per count.
On CUDA it then counts the host syncs of ``fit_many`` of 64 engine-part pairs with
``torch.cuda.set_sync_debug_mode("warn")`` (a prototype: it may miss some), by the line
that caused them. Writes ``fit_many_scaling.{csv,md}`` under ``--out``.
"""
from __future__ import annotations

import argparse
import logging
import time
import warnings
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd

from bench._common import machine_load, markdown_table

log = logging.getLogger("bench.fit_many_scaling")
RESULTS = Path(__file__).resolve().parent / "results"
SIZES = {"engine part 24x16 D=33": (24, 16, 33), "engine part 24x16 D=300": (24, 16, 300),
         "week 168x168 D=33": (168, 168, 33)}
WEEK_MAX_PAIRS = 64


def pairs(count: int, rows_x: int, rows_y: int, d: int, seed: int = 5
          ) -> list[tuple[np.ndarray, np.ndarray]]:
    """``count`` (X, Y) pairs of N(0, I) rows; odd pairs have one mean shifted by 1."""
    rng = np.random.default_rng(seed)
    out = []
    for k in range(count):
        x, y = rng.normal(size=(rows_x, d)), rng.normal(size=(rows_y, d))
        if k % 2:
            y[:, k % d] += 1.0
        out.append((x, y))
    return out


def host_syncs(count: int = 64) -> tuple[int, list[tuple[str, int]]]:
    """Host syncs of one CUDA ``fit_many`` of ``count`` engine-part pairs, by source line."""
    import torch

    from engine import CVAggregation
    from engine.live.engine_power import ENGINE_PART_PARAMS

    est = CVAggregation(seed=0, device="cuda", n_jobs=-1, **ENGINE_PART_PARAMS)
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            est.fit_many(pairs(count, 24, 16, 33))
    finally:
        torch.cuda.set_sync_debug_mode(0)
    lines = Counter(f"{Path(w.filename).name}:{w.lineno}" for w in seen)
    return len(seen), lines.most_common(15)


def main(argv: list[str] | None = None) -> int:
    import torch

    from engine import CVAggregation
    from engine.live.engine_power import ENGINE_PART_PARAMS

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--devices", nargs="+", default=["cuda", "cpu"])
    ap.add_argument("--counts", type=int, nargs="+", default=[16, 64, 256])
    ap.add_argument("--jobs", type=int, nargs="+", default=[-1],
                    help="n_jobs values timed on the CPU (-1: every core)")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    args.out.mkdir(parents=True, exist_ok=True)
    load = machine_load()
    rows = []
    for name, (n, m, d) in SIZES.items():
        runs = [(device, jobs) for device in args.devices
                for jobs in (args.jobs if device == "cpu" else [-1])]
        for device, jobs in runs:
            est = CVAggregation(seed=0, device=device, n_jobs=jobs, **ENGINE_PART_PARAMS)
            est.fit_many(pairs(2, n, m, d))  # warm-up: CUDA context, kernels, thread pool
            for count in args.counts:
                if name.startswith("week") and count > WEEK_MAX_PAIRS:
                    continue
                data = pairs(count, n, m, d)
                t0 = time.perf_counter()
                res = est.fit_many(data)
                if device.startswith("cuda"):
                    torch.cuda.synchronize()
                secs = time.perf_counter() - t0
                rows.append({"size": name, "device": res[0].device, "n_jobs": jobs,
                             "pairs": count,
                             "seconds": round(secs, 3), "pairs_per_s": round(count / secs, 1)})
                log.info("%s | %s | n_jobs %d | %d pairs | %.3f s | %.1f pairs/s", name,
                         device, jobs, count, secs, count / secs)
    table = pd.DataFrame(rows)
    table.to_csv(args.out / "fit_many_scaling.csv", index=False)
    lines = ["# `fit_many` pairs per second (`python -m bench.fit_many_scaling`)", "",
             f"Machine: {load}; torch {torch.__version__}"
             + (f"; GPU {torch.cuda.get_device_name(0)}" if torch.cuda.is_available() else "")
             + ". One timed call per row, after a warm-up.", "", *markdown_table(table)]
    if torch.cuda.is_available() and any(d.startswith("cuda") for d in args.devices):
        total, by_line = host_syncs()
        lines += ["", f"Host syncs of one CUDA `fit_many` of 64 engine-part pairs: {total}", ""]
        lines += [f"- {where}: {count}" for where, count in by_line]
    (args.out / "fit_many_scaling.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
