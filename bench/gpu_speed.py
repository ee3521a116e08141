"""Engine speed on a GPU: one default CVAggregation fit at three sizes.

    python -m bench.gpu_speed [--reps 3] [--device cuda] [--out bench/results]

Cases: D=33, n=m=168 (water-like, as in bench.speed), D=20, n=m=200 (shifted means), and
D=768, n=m=400 (N(0, I) with the means of 4 variables shifted by 1). Each case: one
warm-up fit (CUDA context, kernels), then ``--reps`` timed fits with seeds 0.. (wall
clock of ``fit``, which returns host arrays, so the GPU work is finished). Reports the
median, the peak GPU memory torch allocated, and what the D=768 fit selected. Writes
gpu_speed.csv and gpu_speed.md under ``--out``.
"""
from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from bench._common import synthetic
from bench.speed import water_like

RESULTS = Path(__file__).resolve().parent / "results"


def wide(rng: np.random.Generator, d: int = 768, n: int = 400, changed: int = 4):
    x, y = rng.normal(size=(n, d)), rng.normal(size=(n, d))
    y[:, :changed] += 1.0
    return x, y


def main(argv: list[str] | None = None) -> int:
    import torch

    from engine import CVAggregation

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    cases = {"D=33, n=m=168 (water-like)": lambda r: water_like(r),
             "D=20, n=m=200 (shifted means)": lambda r: synthetic("shifted_means", r)[:2],
             "D=768, n=m=400 (4 shifted)": lambda r: wide(r)}
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"
    rows = []
    for name, make in cases.items():
        x, y = make(np.random.default_rng(100))
        CVAggregation(seed=100, device=args.device).fit(x, y)  # warm-up
        if torch.cuda.is_available():
            torch.cuda.reset_peak_memory_stats()
        for rep in range(args.reps):
            x, y = make(np.random.default_rng(rep))
            t0 = time.perf_counter()
            res = CVAggregation(seed=rep, device=args.device).fit(x, y)
            secs = time.perf_counter() - t0
            peak = torch.cuda.max_memory_allocated() / 2**20 if torch.cuda.is_available() else float("nan")
            rows.append({"case": name, "rep": rep, "seconds": secs, "device": res.device,
                         "gpu": gpu, "peak_gpu_mib": peak, "selected": " ".join(map(str, res.selected)),
                         "p_value": res.p_value, "epochs": res.details.get("epochs")})
            print(f"{name} rep {rep}: {secs:.2f} s on {res.device}, peak {peak:.0f} MiB, "
                  f"selected {res.selected[:8]}, p {res.p_value:.3f}", file=sys.stderr, flush=True)
    df = pd.DataFrame(rows)
    df.to_csv(args.out / "gpu_speed.csv", index=False)
    lines = ["# Engine speed on a GPU", "",
             (f"Command: `python -m bench.gpu_speed --reps {args.reps}`; GPU {gpu}; torch {torch.__version__}; "
             f"Python {platform.python_version()}; one warm-up fit per case, then timed fits."), "",
             "| case | median s | min s | max s | peak GPU MiB | selected (rep 0) |", "|---|---|---|---|---|---|"]
    for name, g in df.groupby("case", sort=False):
        lines.append(f"| {name} | {g.seconds.median():.2f} | {g.seconds.min():.2f} | {g.seconds.max():.2f} | "
                     f"{g.peak_gpu_mib.max():.0f} | {g.selected.iloc[0][:60]} |")
    (args.out / "gpu_speed.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
