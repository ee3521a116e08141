"""How well can any two-sample method do on the paper's settings? A parametric ceiling.

    python -m bench.ceiling [--reps 200] [--seed 0]

For each setting, every variable gets the classical two-sample statistic that suits that
setting's alternative, computed from X and Y alone (it is told the kind of change, not P
or Q): |difference of means| / pooled sd (shifted means), |log ratio of mean squares| (the
F statistic of a zero-mean scale change; wider and narrower variances), |difference of
kurtosis| (Laplace). The 2 highest (it is also told |S| = 2, which no real method is) are
"selected". Its mean F1 is about the best a variable-selection method can expect at
n = m = 200: one that knows neither the kind of change nor |S| can hardly beat it. Writes
bench/results/ceiling.csv and ceiling.md.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

from bench._common import SETTINGS, precision_recall_f1, synthetic

RESULTS = Path(__file__).resolve().parent / "results"
STATISTICS = {
    "shifted_means": "abs(mean Y - mean X) / pooled sd",
    "wider_variances": "abs(log(mean Y^2 / mean X^2))",
    "narrower_variances": "abs(log(mean Y^2 / mean X^2))",
    "laplace": "abs(kurtosis Y - kurtosis X)",
}


def statistic(setting: str, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    if setting == "shifted_means":
        return np.abs(y.mean(0) - x.mean(0)) / np.sqrt((x.var(0) + y.var(0)) / 2)
    if setting == "laplace":
        def kurt(z: np.ndarray) -> np.ndarray:
            c = z - z.mean(0)
            return (c**4).mean(0) / (c**2).mean(0) ** 2
        return np.abs(kurt(y) - kurt(x))
    return np.abs(np.log((y**2).mean(0) / (x**2).mean(0)))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for setting in STATISTICS:
        for rep in range(args.reps):
            rng = np.random.default_rng([args.seed, SETTINGS.index(setting) + 1, rep])
            x, y, truth = synthetic(setting, rng)
            top2 = np.argsort(-statistic(setting, x, y))[:2]
            rows.append({"setting": setting, "rep": rep, "f1": precision_recall_f1(top2, truth)[2]})
    df = pd.DataFrame(rows)
    df.to_csv(args.out / "ceiling.csv", index=False)
    lines = ["# A parametric ceiling for two-sample variable selection (n = m = 200, D = 20, |S| = 2)", "",
             (f"Command: `python -m bench.ceiling --reps {args.reps}`. Per variable, the classical statistic "
             "for the setting's kind of change, from X and Y alone; the top 2 are selected (told |S| = 2)."), "",
             "| setting | statistic | mean F1 | both right | reps |", "|---|---|---|---|---|"]
    for setting, g in df.groupby("setting", sort=False):
        lines.append(f"| {setting} | {STATISTICS[setting]} | {g.f1.mean():.2f} | "
                     f"{(g.f1 == 1).mean():.0%} | {len(g)} |")
    (args.out / "ceiling.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
