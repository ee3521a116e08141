"""Engine speed: CVAggregation fit time, batched vs one-problem-at-a-time, optimisers.

    python -m bench.speed [--reps 3] [--device auto]

1. Seconds for one default ``CVAggregation(seed=r).fit`` at D=33, n=m=168 (the water-pipe
   case: 33 sensors, 7 days of hourly rows) and at D=20, n=m=200 (the synthetic benchmark),
   with one torch thread (the default) and with two (both cores of this machine).
2. The CV batch of one fit (10 splits x 6 lambdas = 60 problems, D=20, n=m=200) solved as
   one batch vs one problem at a time with the same code and settings.
3. Objective reached (mean final regularised loss over the 60 problems; lower is better),
   epochs and seconds for each optimiser setting: ``paper`` (Adam lr 0.01, 100-epoch
   window, no cap other than 99,999), ``fast`` (the default: Adam on log-weights with
   backtracking, 80-epoch cap) and ``fast`` without backtracking, on the shifted-means
   batch and on a wider-variances batch; also the share of problems where each ends at
   most 1e-3 above ``paper``.
Writes bench/results/speed.csv and speed.md. Timings on a shared machine: medians, load noted.
"""
from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

from bench._common import machine_load, synthetic

RESULTS = Path(__file__).resolve().parent / "results"


def water_like(rng: np.random.Generator, d: int = 33, n: int = 168) -> tuple[np.ndarray, np.ndarray]:
    """Daily-periodic correlated pressures with a drop at one sensor after the change."""
    t = np.arange(2 * n)
    daily = np.sin(2 * np.pi * t / 24)[:, None] * rng.uniform(0.5, 1.5, d)
    z = 1.0 + 0.05 * daily + 0.01 * rng.normal(size=(2 * n, d))
    z[n:, 5] -= 0.02
    return z[:n], z[n:]


def main(argv: list[str] | None = None) -> int:
    import torch

    import engine._fitting as F
    from engine import FAST, PAPER, CVAggregation
    from engine.optimiser import minimise
    from engine.splits import make_splits

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    load0 = machine_load()
    rows = []
    cases = {"D=33, n=m=168 (water-like)": lambda r: water_like(r),
             "D=20, n=m=200 (shifted means)": lambda r: synthetic("shifted_means", r)[:2]}
    for threads in (1, 2):  # 1: the default; 2: both cores of this machine
        for name, make in cases.items():
            for rep in range(args.reps):
                x, y = make(np.random.default_rng(rep))
                t0 = time.perf_counter()
                res = CVAggregation(seed=rep, device=args.device, n_threads=threads).fit(x, y)
                rows.append({"part": "fit", "case": name, "rep": rep, "threads": threads,
                             "seconds": time.perf_counter() - t0, "device": res.device})
                print(f"{name} ({threads} thread(s)) rep {rep}: {rows[-1]['seconds']:.2f} s",
                      file=sys.stderr)

    # The CV batch of one fit, for the batched / sequential / optimiser comparisons.
    sel = CVAggregation(seed=0, device=args.device)
    configs = {"fast (default)": FAST, "fast without backtracking": replace(FAST, backtrack=None),
               "paper": PAPER}
    with F.torch_threads(1):
        for setting in ("shifted_means", "wider_variances"):
            x, y, _ = synthetic(setting, np.random.default_rng(0))
            prep = sel._prepare(x, y)
            splits = make_splits(200, 200, 10, np.random.default_rng(0))
            batch = F.split_problems(prep, splits, "train", "gaussian", "quadratic")
            lam = torch.tensor(np.linspace(0.01, 1.78, 6), dtype=prep.dtype, device=prep.device)
            losses_by = {}
            for cname, cfg in configs.items():
                t0 = time.perf_counter()
                res = minimise(batch, lam, config=cfg)
                secs = time.perf_counter() - t0
                losses_by[cname] = res.loss.flatten().cpu().numpy()
                rows.append({"part": "optimiser", "setting": setting, "case": cname, "seconds": secs,
                             "loss": float(res.loss.mean()), "epochs": int(res.total_epochs),
                             "mean_epochs": float(res.epochs.float().mean())})
                print(f"{setting} {cname}: {secs:.2f} s, loss {rows[-1]['loss']:.4f}", file=sys.stderr)
            for r in rows:
                if r.get("part") == "optimiser" and r["setting"] == setting:
                    r["share_le_paper"] = float(np.mean(losses_by[r["case"]] <= losses_by["paper"] + 1e-3))
            if setting == "shifted_means":
                train = batch
        # one at a time, same code and settings (FAST)
        t0 = time.perf_counter()
        losses = []
        for k in range(train.n_sets):
            one = train.sets(slice(k, k + 1))
            for j in range(len(lam)):
                losses.append(float(minimise(one, lam[j:j + 1], config=FAST).loss))
        seq = time.perf_counter() - t0
    batched = next(r for r in rows if r.get("case") == "fast (default)")
    rows.append({"part": "sequential", "case": "fast, one problem at a time", "seconds": seq,
                     "loss": float(np.mean(losses))})
    df = pd.DataFrame(rows)
    df.to_csv(args.out / "speed.csv", index=False)
    fits = df[df.part == "fit"].groupby(["case", "threads"], sort=False).seconds
    lines = ["# Engine speed", "",
             (f"Command: `python -m bench.speed --reps {args.reps}`; device {df[df.part == 'fit'].device.iloc[0]}; "
             f"{load0} at start, {machine_load()} at end (medians shown). The optimiser comparisons "
             "use one torch thread."), "",
             "## One default CVAggregation fit", "",
             ("`n_threads=1` is the default (see engine/_fitting.py: on a busy host two spinning "
             "OpenMP threads cost more than they gain); 2 uses both cores of this machine."), "",
             "| case | torch threads | median s | min s | max s | reps |", "|---|---|---|---|---|---|"]
    for (case, threads), s in fits:
        lines.append(f"| {case} | {int(threads)} | {s.median():.2f} | {s.min():.2f} | {s.max():.2f} | {len(s)} |")
    lines += ["", "## The CV batch of one fit (60 problems: 10 splits x 6 lambdas in [0.01, 1.78], D=20, n_train=m_train=100)", "",
              "| data | optimiser | seconds | mean final objective | problems within 1e-3 of paper or better | passes | mean epochs per problem |",
              "|---|---|---|---|---|---|---|"]
    for _, r in df[df.part == "optimiser"].iterrows():
        lines.append(f"| {r.setting} | {r.case} | {r.seconds:.2f} | {r.loss:.4f} | {r.share_le_paper:.0%} | "
                     f"{int(r.epochs)} | {r.mean_epochs:.0f} |")
    lines += ["", (f"Batched (fast): {batched['seconds']:.2f} s; the same 60 problems one at a time "
              f"with the same code: {seq:.2f} s; speed-up x{seq / batched['seconds']:.1f} "
              f"(mean objective {batched['loss']:.4f} vs {np.mean(losses):.4f}).")]
    text = "\n".join(lines) + "\n"
    (args.out / "speed.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
