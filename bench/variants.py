"""CVAggregation variants on the six synthetic settings, with more repetitions.

    python -m bench.variants [--reps 30] [--null-reps 100] [--workers 2] [--variants ...]

The evidence behind the engine's defaults: each variant changes one thing against the
default (see ``VARIANTS``) and is fitted on the paper's six settings (D=20, |S|=2,
n=m=200; the data of ``bench.synthetic`` for the same repetition numbers) with ``--reps``
repetitions each, in ``--workers`` processes of one torch thread. With 10 repetitions
the standard error of a setting's mean F1 is about 0.1, too coarse to choose between
variants. ``--null-reps``: P = Q fits of the default; how often p_value < 0.05. Writes
bench/results/variants.csv and variants.md.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import replace
from multiprocessing import Pool
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from bench._common import SETTINGS, machine_load, precision_recall_f1, synthetic

RESULTS = Path(__file__).resolve().parent / "results"


def variants() -> dict[str, dict[str, Any]]:
    from engine.optimiser import FAST

    return {
        "default": {},
        "no gate fallback": {"gate_fallback": False},
        "no backtracking": {"optimiser": replace(FAST, backtrack=None)},
        "backtrack 0.005": {"optimiser": replace(FAST, backtrack=0.005)},
        "100 epochs, uncapped search": {"optimiser": replace(FAST, max_epochs=100), "search_epochs": None},
        "histogram rule": {"selection": "histogram"},
        "no gate (gate_alpha 1)": {"gate_alpha": 1.0},
        "20 splits": {"n_splits": 20},
        "Laplace kernel": {"kernel": "laplace"},
        "paper start (all ones)": {"starts": "ones"},
    }


def fit_one(job: tuple[str, str, int, int]) -> dict[str, Any]:
    import torch

    from engine import CVAggregation

    torch.set_num_threads(1)
    name, setting, rep, seed = job
    if setting == "null":
        rng = np.random.default_rng([seed, 0, rep])
        x, y = rng.normal(size=(200, 20)), rng.normal(size=(200, 20))
        truth = np.zeros(0, dtype=int)
    else:
        rng = np.random.default_rng([seed, SETTINGS.index(setting) + 1, rep])
        x, y, truth = synthetic(setting, rng)
    t0 = time.perf_counter()
    res = CVAggregation(seed=rep, **variants()[name]).fit(x, y)
    # F1 of the attribution: the selection rule's picks (`candidates`), which `selected`
    # equals only when the p-value is significant.
    f1 = precision_recall_f1(res.candidates, truth)[2] if setting != "null" else float("nan")
    return {"variant": name, "setting": setting, "rep": rep, "f1": f1, "p_value": res.p_value,
            "n_selected": len(res.selected), "n_candidates": len(res.candidates),
            "seconds": time.perf_counter() - t0}


def main(argv: list[str] | None = None) -> int:
    from tqdm import tqdm

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--null-reps", type=int, default=100)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--variants", nargs="+", default=list(variants()))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    unknown = set(args.variants) - set(variants())
    if unknown:
        ap.error(f"unknown variants {sorted(unknown)}; choose from {list(variants())}")
    args.out.mkdir(parents=True, exist_ok=True)
    jobs = [(v, s, r, args.seed) for v in args.variants for s in SETTINGS for r in range(args.reps)]
    jobs += [("default", "null", r, args.seed) for r in range(args.null_reps)]
    load0 = machine_load()
    with Pool(args.workers) as pool:
        rows = list(tqdm(pool.imap_unordered(fit_one, jobs, chunksize=2), total=len(jobs),
                         file=sys.stderr, desc="variants", unit="fit"))
    df = pd.DataFrame(rows).sort_values(["variant", "setting", "rep"])
    df.to_csv(args.out / "variants.csv", index=False)
    alt = df[df.setting != "null"]
    table = alt.pivot_table(index="variant", columns="setting", values="f1", aggfunc="mean")
    table = table.reindex(index=args.variants, columns=list(SETTINGS))
    table["mean"] = table.mean(axis=1)
    chosen = "" if args.variants == list(variants()) else " --variants " + " ".join(
        f'"{v}"' if " " in v else v for v in args.variants)
    se = alt.groupby(["variant", "setting"]).f1.std().groupby("variant").mean() / np.sqrt(args.reps)
    lines = ["# CVAggregation variants (mean F1, six synthetic settings)", "",
             (f"Command: `python -m bench.variants --reps {args.reps} --null-reps {args.null_reps} "
             f"--workers {args.workers}{chosen}`; {load0} at start. Standard error of one setting's mean F1 "
             f"about {se.mean():.2f}; of a variant's mean over the six, about {se.mean() / np.sqrt(6):.2f}."), "",
             "| variant | " + " | ".join(SETTINGS) + " | mean |", "|---" * (len(SETTINGS) + 2) + "|"]
    for name, r in table.iterrows():
        lines.append(f"| {name} | " + " | ".join(f"{r[s]:.2f}" for s in SETTINGS) + f" | {r['mean']:.3f} |")
    if args.null_reps:
        nul = df[df.setting == "null"]
        lines += ["", (f"Null (P = Q), default: p_value < 0.05 in {(nul.p_value < 0.05).sum()} of {len(nul)}; "
                  f"median seconds per fit {df.seconds.median():.2f} ({args.workers} processes).")]
    (args.out / "variants.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
