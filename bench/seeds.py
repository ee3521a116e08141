"""The incident bench over engine seeds: how much of a delay is the fit's luck.

    python -m bench.seeds [--seeds 0 1 2 3 4 5] [--workers 2] [--null-seeds 2]

One ``python -m bench.leak_delay --null-seeds N --workers W --out
bench/results/seeds/seed_S --extra --seed S`` per engine seed S (the seed of the engine
part's splits and starts; the data and the null streams stay the same), then one table:
per scenario and seed the delay (hours to the first incident event naming a changed
sensor), the first named sensor and the false incidents, and per scenario the median
delay, the seeds that named it and the false incidents in all.

Why: a decision that moves the engine part (its optimiser, its weight) can move a delay
by an hour on one seed and not on the next. ``bench.leak_delay`` at seed 0 alone once
credited FAST with naming dev-noise 7 h earlier than SMOOTH; over six seeds FAST did so at
seed 0 only (issue 31, docs/decision.md "The engine part"). Compare variants here.
Writes ``bench/results/seeds/seeds.{csv,md}``.
"""
from __future__ import annotations

import argparse
import logging
import subprocess
import sys
from pathlib import Path

import pandas as pd

from bench._common import machine_load, markdown_table

log = logging.getLogger("bench.seeds")
ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "results" / "seeds"


def run_seed(seed: int, workers: int, null_seeds: int, out: Path) -> pd.DataFrame:
    """``bench.leak_delay`` at one engine seed; its rows with the seed added."""
    folder = out / f"seed_{seed}"
    # relative to the checkout where it can be, so that the tables name the committed path
    shown = folder.relative_to(ROOT) if folder.is_relative_to(ROOT) else folder
    cmd = [sys.executable, "-m", "bench.leak_delay", "--null-seeds", str(null_seeds),
           "--workers", str(workers), "--out", str(shown), "--extra", "--seed", str(seed)]
    log.info("seed %d: %s", seed, " ".join(cmd[1:]))
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"bench.leak_delay at seed {seed} failed: {proc.stderr[-2000:]}")
    # the timelines are left out (seed 0's is bench/results/leak_delay/timeline.png)
    (folder / "timeline.png").unlink(missing_ok=True)
    rows = pd.read_csv(folder / "leak_delay.csv")
    rows.insert(0, "seed", seed)
    return rows


def summary(rows: pd.DataFrame) -> pd.DataFrame:
    """Per scenario: the delay at each seed, its median, the seeds that named the change,
    and the false incidents in all."""
    out = []
    for scenario, part in rows.groupby("scenario", sort=False):
        delays = pd.to_numeric(part["delay_h"], errors="coerce")
        near = pd.to_numeric(part["delay_near_h"], errors="coerce")
        row: dict[str, object] = {"scenario": scenario}
        for seed, delay, close, named in zip(part["seed"], delays, near,
                                             part["first_named"].fillna(""), strict=True):
            if not pd.isna(delay):
                row[f"seed {seed}"] = f"{delay:g} {named}".strip()
            elif not pd.isna(close):  # a leak named by a sensor near it, not a changed one
                row[f"seed {seed}"] = f"near {close:g} {named}".strip()
            else:
                row[f"seed {seed}"] = "-"
        row["median delay h"] = "-" if delays.isna().all() else f"{delays.median():g}"
        row["seeds named"] = f"{int(delays.notna().sum())} of {len(part)}"
        row["false incidents"] = int(part["false_incidents"].sum())
        out.append(row)
    return pd.DataFrame(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4, 5])
    ap.add_argument("--workers", type=int, default=2, help="backfills at once")
    ap.add_argument("--null-seeds", type=int, default=2, help="null streams per seed")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    load = machine_load()
    args.out = args.out.resolve()  # the leak_delay runs work in the checkout
    args.out.mkdir(parents=True, exist_ok=True)
    rows = pd.concat([run_seed(s, args.workers, args.null_seeds, args.out)
                      for s in args.seeds], ignore_index=True)
    rows.to_csv(args.out / "seeds.csv", index=False)
    seeds = " ".join(str(s) for s in args.seeds)
    lines = [f"# bench.seeds ({load})", "",
             (f"`python -m bench.seeds --seeds {seeds} --workers {args.workers} "
              f"--null-seeds {args.null_seeds}`"), "",
             ("`bench.leak_delay` at each engine seed (`--extra --seed S`; each seed's "
              "tables in `seed_S/`). Cells: hours from the onset to the first incident "
              "event naming a changed sensor, and the first sensor named (near: a sensor "
              "among the 3 nearest the leak named it; - : not named); "
              "false incidents summed over the seeds."), "",
             *markdown_table(summary(rows))]
    (args.out / "seeds.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
