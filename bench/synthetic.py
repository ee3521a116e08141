"""Accuracy on the paper's synthetic benchmark (Section 5): six settings + the null.

    python -m bench.synthetic [--reps 10] [--null-reps 40] [--methods ...] [--seed 0]

D = 20, |S| = 2, n = m = 200. For each setting and repetition, every method is fitted with
its defaults; precision, recall, F1 of the selected set and the seconds per fit are
averaged (mean +/- sd). The null (P = Q) reports how often CVAggregation's p_value < 0.05.
For CVAggregation the final scores are also re-selected with every selection rule
(``rule_*`` columns): evidence for the default rule. Writes
bench/results/synthetic.csv (one row per fit), synthetic_summary.csv and synthetic.md.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm import tqdm

from bench._common import SETTINGS, machine_load, precision_recall_f1, synthetic

RESULTS = Path(__file__).resolve().parent / "results"


def main(argv: list[str] | None = None) -> int:
    from engine import METHODS
    from engine.selection import RULES, select

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--null-reps", type=int, default=40)
    ap.add_argument("--methods", nargs="+", default=list(METHODS))
    ap.add_argument("--settings", nargs="+", default=list(SETTINGS))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)

    jobs = [(s, r, m) for s in args.settings for r in range(args.reps) for m in args.methods]
    jobs += [("null", r, "cv-aggregation") for r in range(args.null_reps)]
    rows = []
    load_before = machine_load()
    for setting, rep, method in tqdm(jobs, file=sys.stderr, desc="synthetic", unit="fit"):
        rng = np.random.default_rng([args.seed, SETTINGS.index(setting) + 1 if setting in SETTINGS else 0, rep])
        x, y, truth = synthetic(setting, rng)
        t0 = time.perf_counter()
        res = METHODS[method](seed=rep).fit(x, y)
        secs = time.perf_counter() - t0
        p, r, f = precision_recall_f1(res.selected, truth)
        row = {"setting": setting, "rep": rep, "method": method, "precision": p, "recall": r, "f1": f,
                   "seconds": secs, "p_value": res.p_value, "n_selected": len(res.selected),
                   "truth": " ".join(map(str, truth)), "selected": " ".join(map(str, res.selected))}
        if method == "cv-aggregation":
            for rule in RULES:
                chosen, _ = select(res.scores, rule)
                row[f"rule_{rule}_f1"] = precision_recall_f1(chosen, truth)[2]
        rows.append(row)
        pd.DataFrame(rows).to_csv(args.out / "synthetic.csv", index=False)
    df = pd.DataFrame(rows)
    alt = df[df.setting != "null"]
    summary = alt.groupby(["setting", "method"], sort=False).agg(
        precision_mean=("precision", "mean"), precision_sd=("precision", "std"),
        recall_mean=("recall", "mean"), recall_sd=("recall", "std"),
        f1_mean=("f1", "mean"), f1_sd=("f1", "std"),
        seconds_mean=("seconds", "mean"), seconds_sd=("seconds", "std"), reps=("f1", "size"),
    ).reset_index()
    summary.to_csv(args.out / "synthetic_summary.csv", index=False)

    def pm(mean: float, sd: float) -> str:
        return f"{mean:.2f} ± {0 if np.isnan(sd) else sd:.2f}"

    lines = ["# Synthetic benchmark (paper Section 5: D=20, |S|=2, n=m=200)", "",
             (f"Command: `python -m bench.synthetic --reps {args.reps} --null-reps {args.null_reps}`; "
             f"{args.reps} repetitions per setting; {load_before} at start, "
             f"{machine_load()} at end (shared machine: seconds are noisy)."), "",
             "| setting | method | precision | recall | F1 | seconds |", "|---|---|---|---|---|---|"]
    for _, r in summary.iterrows():
        lines.append(f"| {r.setting} | {r.method} | {pm(r.precision_mean, r.precision_sd)} | "
                     f"{pm(r.recall_mean, r.recall_sd)} | {pm(r.f1_mean, r.f1_sd)} | "
                     f"{pm(r.seconds_mean, r.seconds_sd)} |")
    means = alt.groupby("method", sort=False).f1.mean()
    lines += ["", "Mean F1 over the six settings: " + ", ".join(f"{k} {v:.2f}" for k, v in means.items())]
    cv = alt[alt.method == "cv-aggregation"]
    if len(cv) and "rule_gap_f1" in cv:
        lines += ["", "## Selection rule applied to CVAggregation's final scores (mean F1)", "",
                  "| setting | " + " | ".join(RULES) + " |", "|---|" + "---|" * len(RULES)]
        for setting, g in cv.groupby("setting", sort=False):
            lines.append(f"| {setting} | " + " | ".join(f"{g[f'rule_{r}_f1'].mean():.2f}" for r in RULES) + " |")
        lines.append("| all | " + " | ".join(f"{cv[f'rule_{r}_f1'].mean():.2f}" for r in RULES) + " |")
    null = df[df.setting == "null"]
    if len(null):
        rate = float((null.p_value < 0.05).mean())
        lines += ["", f"## Null (P = Q), CVAggregation, {len(null)} repetitions", "",
                  (f"p_value < 0.05 in {int((null.p_value < 0.05).sum())} of {len(null)} "
                  f"({rate:.1%}); median p_value {null.p_value.median():.3f}; "
                  f"mean variables selected {null.n_selected.mean():.2f}; "
                  f"seconds {null.seconds.mean():.2f} ± {null.seconds.std():.2f}.")]
    text = "\n".join(lines) + "\n"
    (args.out / "synthetic.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
