"""Changes on every sensor of SKAB's testbed, where the labelled files have only valve
closures: a block added to one sensor of each piece of the anomaly-free recording, scored
as ``bench.skab`` scores the labelled files.

    python -m bench.skab_injected [--sizes 8 16] [--length 180] [--workers 2]

The four labelled files of skab-dev close a valve, so they test the flow sensor. The
held-out files also hold leaks, rotor imbalance and changes of the water amount, seen on
the accelerometers, the current, the pressure and the temperatures. Here the anomaly-free
recording is cut into pieces of a labelled file's length (``bench.skab.normal_pieces``).
For each piece, sensor and size ``k``, ``k`` times the sensor's standard deviation over
the piece's first 400 rows is added for ``--length`` seconds, from a row drawn between
560 and 640 (seeded). The block's first and last rows are two change points: a change
and its return, as a valve closed and reopened. Each piece runs through ``mmdwatch
backfill`` with the four options and is scored by ``bench.skab.score`` (a detection is a
result that turns ``firing``; a change point is missed with none in ``[cp, cp + 60 s]``).
The false positives include those the piece gives without a block
(``bench/results/skab.md``, "The pieces"). Writes ``bench/results/skab_injected.{csv,md}``.
"""
from __future__ import annotations

import argparse
import itertools
import json
import logging
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd

from bench import skab
from bench._common import machine_load

log = logging.getLogger("bench.skab_injected")
FIRST_ROW, SPAN = 560, 80  # the block starts in [560, 640): after the scored 400th row


def with_block(piece: Path, sensor: str, size: float, start: int, length: int,
               out: Path) -> tuple[Path, pd.DataFrame]:
    """``piece`` with ``size`` x ``sensor``'s standard deviation over its first
    ``skab.SCORED_FROM_ROW`` rows added to rows ``start .. start + length - 1``, written
    to ``out`` as published (semicolons), and its truth (change points at ``start`` and
    ``start + length``)."""
    frame = pd.read_csv(piece, sep=";")
    if start + length >= len(frame):
        raise ValueError(f"a block of {length} rows from row {start} does not fit in "
                         f"{piece.name} ({len(frame)} rows); pass a shorter --length")
    sd = float(frame[sensor].iloc[:skab.SCORED_FROM_ROW].std())
    frame.loc[start:start + length - 1, sensor] += size * sd
    frame.to_csv(out, sep=";", index=False)
    truth = frame[["datetime"]].assign(changepoint=0)
    truth.loc[[start, start + length], "changepoint"] = 1
    return out, truth


def named_first(results_path: Path, sensor: str) -> float | None:
    """The share of firing results that name ``sensor`` first (None: none fired)."""
    results = [json.loads(line) for line in results_path.read_text().splitlines() if line]
    top = [r["selected_sensors"][0] for r in results
           if r["status"] == "firing" and r.get("selected_sensors")]
    return top.count(sensor) / len(top) if top else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=skab._default_data(),
                    help="folder of SKAB files (its anomaly-free recording is used)")
    ap.add_argument("--sizes", type=float, nargs="+", default=[8.0, 16.0],
                    help="block sizes in the sensor's standard deviations")
    ap.add_argument("--length", type=int, default=180, help="block length in rows (s)")
    ap.add_argument("--rows", type=int, default=1094, help="rows of a piece")
    ap.add_argument("--workers", type=int, default=2, help="backfills at once")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--name", default="skab_injected", help="results under bench/results/NAME.*")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    normal = [path for _, path in skab.find_files(args.data)[1]]
    if not normal:
        log.error("no anomaly-free recording under %s; pass --data", args.data)
        return 2
    load = machine_load()
    rng = np.random.default_rng(args.seed)
    with tempfile.TemporaryDirectory(prefix="skab-injected-") as tmp:
        folder = Path(tmp)
        pieces = skab.normal_pieces(normal[0], folder, args.rows)
        if not pieces:
            log.error("%s is shorter than one piece of %d rows; pass a smaller --rows",
                      normal[0].name, args.rows)
            return 2
        sensors = [c for c in pd.read_csv(pieces[0][0], sep=";", nrows=1).columns
                   if c != "datetime"]
        jobs = []
        for (piece, _), sensor, size in itertools.product(pieces, sensors, args.sizes):
            start = FIRST_ROW + int(rng.integers(0, SPAN))
            name = f"{skab._stem(piece)}_{sensor.replace(' ', '_')}_{size:g}"
            path, truth = with_block(piece, sensor, size, start, args.length,
                                     folder / f"{name}.csv")
            jobs.append((path, truth, sensor, size))

        def run(job: tuple[Path, pd.DataFrame, str, float]) -> dict[str, object]:
            path, truth, sensor, size = job
            out = path.with_suffix(".jsonl")
            row = skab.run_file(path, truth, skab.OPTIONS, out)
            points = pd.to_datetime(truth["datetime"])[truth["changepoint"] == 1].tolist()
            results = [json.loads(line) for line in out.read_text().splitlines() if line]
            rising = [t for t, firing, _ in skab.edges(results, points[0]) if firing]
            seen = {"change_seen": any(skab.in_window(t, points[0]) for t in rising),
                    "return_seen": any(skab.in_window(t, points[1]) for t in rising)}
            log.info("%s: change seen %s, return seen %s, %s false positives (%.0f s)",
                     path.stem, seen["change_seen"], seen["return_seen"],
                     row["false_positives"], row["wall_s"])
            return {**row, "sensor": sensor, "size": size, **seen,
                    "named_first": named_first(out, sensor)}

        log.info("%d backfills: %d pieces x %d sensors x %d sizes", len(jobs), len(pieces),
                 len(sensors), len(args.sizes))
        with ThreadPoolExecutor(max_workers=max(1, args.workers)) as pool:
            rows = list(pool.map(run, jobs))
    table = pd.DataFrame(rows)
    skab.RESULTS.mkdir(parents=True, exist_ok=True)
    table.to_csv(skab.RESULTS / f"{args.name}.csv", index=False)
    _write_markdown(table, skab.RESULTS / f"{args.name}.md", load, args, len(pieces))
    return 0


def _write_markdown(table: pd.DataFrame, path: Path, load: str, args: argparse.Namespace,
                    n_pieces: int) -> None:
    by = table.groupby(["sensor", "size"], sort=False).agg(
        blocks=("file", "size"), change_seen=("change_seen", "sum"),
        return_seen=("return_seen", "sum"), false_positives=("false_positives", "sum"),
        delay=("median_delay_s", "median"), named_first=("named_first", "mean"))
    lines = [("# SKAB: a block on one sensor of the anomaly-free recording "
              "(`python -m bench.skab_injected`)"), "",
             (f"Machine: {load}. The anomaly-free recording of `{args.data}` in "
              f"{n_pieces} pieces of {args.rows} rows; in each, one sensor raised by SIZE "
              f"times its standard deviation over the piece's first "
              f"{skab.SCORED_FROM_ROW} rows for {args.length} s, from a row in "
              f"[{FIRST_ROW}, {FIRST_ROW + SPAN}) (seed {args.seed}); each piece through "
              f"`mmdwatch backfill ... {' '.join(skab.OPTIONS)}`, scored as "
              "`bench.skab` scores the labelled files. Change / return seen: a result "
              "turned `firing` within 60 s of the block's first / last row. False "
              "positives: elsewhere, including those the piece gives without a block. "
              "Named first: the share of firing results naming the sensor first."), "",
             ("| sensor | size (sd) | blocks | change seen | return seen | false positives "
              "| median delay s | named first |"), "|---|---|---|---|---|---|---|---|"]
    for (sensor, size), r in by.iterrows():
        delay = "" if pd.isna(r.delay) else f"{r.delay:.0f}"
        first = "" if pd.isna(r.named_first) else f"{r.named_first:.2f}"
        lines.append(f"| {sensor} | {size:g} | {int(r.blocks)} | {int(r.change_seen)} | "
                     f"{int(r.return_seen)} | {int(r.false_positives)} | {delay} | {first} |")
    totals = table.groupby("size").agg(blocks=("file", "size"),
                                       change_seen=("change_seen", "sum"),
                                       return_seen=("return_seen", "sum"),
                                       false_positives=("false_positives", "sum"))
    lines += [""] + [f"Size {size:g}: changes seen {r.change_seen} of {r.blocks}, returns "
                     f"seen {r.return_seen} of {r.blocks}, {r.false_positives} false "
                     "positives." for size, r in totals.iterrows()]
    path.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    raise SystemExit(main())
