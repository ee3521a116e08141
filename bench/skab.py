"""SKAB, real one-second pump-testbed recordings, as a new user runs them: each file as
published (semicolons, local time, the label columns dropped), ``mmdwatch backfill`` with
four options and nothing else, scored the way SKAB's leaderboard scores change-point
detectors.

    python -m bench.skab [--data ../shared/data/skab-dev] [--options ...] [--workers 2]
                         [--grid-offset S] [--grids N] [--name NAME]

``--data``: a folder of SKAB's files, flat as skab-dev's copies (``valve2_0.csv.gz``) or
in SKAB's own folders (its repository's ``data/``: ``valve1/0.csv``, ``other/13.csv``),
named the same way in the tables (``valve1_0``; :func:`find_files`).

Each file goes through ``mmdwatch backfill --data FILE --start <first row> --end <last row>
--resample 2s --before 5min --after 30s --every 5s`` (``--options`` replaces the four).
``--grid-offset S`` starts the inspections S seconds after the first row: every 5 s from
the first row is one grid of five, as valid as the others, and where a detection falls
in a change point's 60-s window moves with it. ``--grids N`` runs every file on N grids
(offsets S, S + 1, ...) and writes each grid's counts and their sum to
``NAME_grids.md``; the main tables stay the first grid's. Judge a change of the
statistics over the five grids: one grid's counts move by 3 change points and 1 false
positive with the grid alone (docs/config.md).
The label columns (``anomaly``, ``changepoint``) are dropped into a temporary copy first:
a user's data carries no labels, and the data stays where it is (GPL-3.0, never copied
into the repository).

Scoring (SKAB's README: from each file's 400th row on): a **detection** is a result that
turns ``firing`` (a firing result after a non-firing one), at the time the result exists
(inspection time + after window). A change point is **missed** with no detection in
``[cp, cp + 60 s]``; a **false positive** is a detection outside every change point's
window. Both ends are in the window, as in SKAB's own scoring (``core/metrics.py``,
``extract_cp_confusion_matrix``: ``start <= t <= end``), so a detection at exactly 60 s
is on time.
``delay_s``: change point to its first detection. The table sets the published rows of the
leaderboard beside ours (README of skab-dev).

The published rows were scored with SKAB's conversion of an anomaly detector's output to
change points, ``abs(prediction.diff())`` (the notebooks of SKAB's repository, such as
``notebooks/t2_SKAB.ipynb`` for T-squared): a row where the output turns on **or off** is
a predicted change point. ``missed_both_edges`` and ``false_positives_both_edges`` (the
table's "both edges") score ours that way too: a result that turns ``firing`` and one that
turns ``ok`` after firing are both detections. Results not judged (``calibrating``,
``incomplete``, ``error``) change nothing. The first columns (a result that turns
``firing``, as the issue scored its runs) stay the headline.

``false_positives_by_reference``: the false positives (rising edges) whose result an open
incident's frozen reference fired (``detection.fired_by`` ``reference``), the part that
once kept firing on SKAB's normal recording under a looser level (docs/decision.md, "A
change inside an open incident"; ``--options ... --engine-weight 0`` shows it).

A recording of normal operation only (``anomaly-free*``: no label columns) runs the same
way and is scored the same way with no change point, so every detection in it from the
400th row on is a false positive: the rate of false positives per hour of normal
operation, which four labelled files are too short to show. It is reported apart and not
in the total. It runs once whole (a history that grows to an hour) and once cut into
pieces of a labelled file's length (rows ``_piece1`` ...), each calibrated afresh as every
SKAB file is: the false positives per file that normal operation gives a short file's
calibration. Writes ``bench/results/skab.{csv,md}``.
"""
from __future__ import annotations

import argparse
import json
import logging
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple

import pandas as pd

from bench._common import machine_load

log = logging.getLogger("bench.skab")
ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
OPTIONS = ["--resample", "2s", "--before", "5min", "--after", "30s", "--every", "5s"]
SCORED_FROM_ROW = 400
WINDOW = pd.Timedelta(seconds=60)
#: the published leaderboard rows (skab-dev README): detector -> (missed, false positives)
PUBLISHED = {"MSCRED": (55, 342), "T-squared": (70, 106), "Isolation forest": (76, 135),
             "Conv-AE": (82, 23)}


def _default_data() -> Path:
    beside = ROOT.parent / "shared" / "data" / "skab-dev"
    return beside if beside.exists() else Path("/work/shared/data/skab-dev")


def file_name(path: Path, folder: Path) -> str:
    """A SKAB file's name in the tables: its path below ``folder`` with ``/`` as ``_``,
    without ``.csv`` or ``.csv.gz``. SKAB's repository keeps its files in folders
    (``valve1/0.csv``, ``other/13.csv``, ``anomaly-free/anomaly-free.csv``); skab-dev's
    flat copies are named so (``valve2_0.csv.gz``), and both give ``valve1_0``."""
    relative = path.relative_to(folder)
    return "_".join([*relative.parent.parts, _stem(relative)])


def find_files(folder: Path) -> tuple[list[tuple[str, Path]], list[tuple[str, Path]]]:
    """(the labelled files, the recordings of normal operation) under ``folder``, each
    ``(name, path)`` (:func:`file_name`), by name: CSV, gzipped or not, flat or in SKAB's
    own folders. A recording of normal operation is named ``anomaly-free...``."""
    paths = sorted({*folder.rglob("*.csv"), *folder.rglob("*.csv.gz")})
    named = sorted((file_name(p, folder), p) for p in paths)
    normal = [(n, p) for n, p in named if n.startswith("anomaly-free")]
    return [(n, p) for n, p in named if not n.startswith("anomaly-free")], normal


def strip_labels(source: Path, folder: Path, name: str | None = None
                 ) -> tuple[Path, pd.DataFrame]:
    """The file without its label columns (as a user's data), written to ``folder`` as
    ``name``.csv (default: the source's own name), and its change points."""
    frame = pd.read_csv(source, sep=";")
    if "changepoint" not in frame.columns:
        raise ValueError(f"{source.name} has no changepoint column: not a scored SKAB file")
    truth = frame[["datetime", "changepoint"]].copy()
    out = folder / f"{name or _stem(source)}.csv"
    frame.drop(columns=["anomaly", "changepoint"]).to_csv(out, sep=";", index=False)
    return out, truth


def normal_recording(source: Path) -> tuple[Path, pd.DataFrame]:
    """A recording of normal operation only, as published (it has no label columns, so
    the file itself is what a user runs), and a truth without change points."""
    frame = pd.read_csv(source, sep=";", usecols=lambda c: c in ("datetime", "changepoint"))
    if "changepoint" in frame.columns:
        raise ValueError(f"{source.name} is labelled: score it with its change points")
    return source, frame.assign(changepoint=0)


class Job(NamedTuple):
    """One backfill of the bench: the file, its truth, whether it is labelled, whether
    it is a piece of the normal recording (:func:`normal_pieces`), and its name in the
    tables (default: the file's own)."""

    path: Path
    truth: pd.DataFrame
    labelled: bool
    piece: bool = False
    name: str | None = None


def normal_pieces(source: Path, folder: Path, rows: int, name: str | None = None
                  ) -> list[tuple[Path, pd.DataFrame]]:
    """The recording of normal operation cut into files of ``rows`` rows (a labelled
    file's length; the rest dropped), each written to ``folder`` as published
    (semicolons) with a truth without change points. Each piece starts its calibration
    afresh, as every SKAB file does, so their false positives are what a short file's
    history gives on normal operation; the whole recording's history grows to an hour."""
    frame = pd.read_csv(source, sep=";")
    if "changepoint" in frame.columns:
        raise ValueError(f"{source.name} is labelled: score it with its change points")
    pieces = []
    for k in range(len(frame) // rows):
        piece = frame.iloc[k * rows:(k + 1) * rows]
        path = folder / f"{name or _stem(source)}_piece{k + 1}.csv"
        piece.to_csv(path, sep=";", index=False)
        pieces.append((path, piece[["datetime"]].assign(changepoint=0)))
    return pieces


def scored_hours(truth: pd.DataFrame) -> float:
    """Hours from the file's 400th row to its last."""
    times = pd.to_datetime(truth["datetime"])
    if len(times) <= SCORED_FROM_ROW:
        return 0.0
    return float((times.iloc[-1] - times.iloc[SCORED_FROM_ROW]) / pd.Timedelta(hours=1))


def _stem(path: Path) -> str:
    """The file's name without ``.csv`` or ``.csv.gz``."""
    return path.name.removesuffix(".gz").removesuffix(".csv")


def run_file(path: Path, truth: pd.DataFrame, options: list[str], out: Path,
             labelled: bool = True, name: str | None = None,
             grid_offset_s: int = 0) -> dict[str, object]:
    """One backfill over the whole file, scored. ``labelled``: False for a recording of
    normal operation (reported apart). ``name``: the file's in the table (default: its
    own). ``grid_offset_s``: the inspections start this many seconds after the file's
    first row (another grid as valid as the first row's: a live agent's times are not
    set by where a file begins)."""
    first = str(pd.Timestamp(truth["datetime"].iloc[0]) + pd.Timedelta(seconds=grid_offset_s))
    last = str(truth["datetime"].iloc[-1])
    cmd = [sys.executable, "-m", "monitor.cli", "backfill", "--data", str(path),
           "--start", first, "--end", last, *options, "--out", str(out)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"backfill of {path.name} failed: {proc.stderr[-2000:]}")
    results = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    return {"file": name or _stem(path), "wall_s": round(wall, 1), "labelled": labelled,
            "scored_h": round(scored_hours(truth), 2), **score(results, truth)}


def in_window(detection: pd.Timestamp, change_point: pd.Timestamp) -> bool:
    """Whether a detection scores for a change point: ``cp <= detection <= cp + 60 s``,
    both ends included as in SKAB's ``extract_cp_confusion_matrix``."""
    return bool(change_point <= detection <= change_point + WINDOW)


def edges(results: list[dict], start: pd.Timestamp
          ) -> list[tuple[pd.Timestamp, bool, str | None]]:
    """``(time, firing, fired_by)`` for each judged result from ``start`` on (time: its
    after window's end) whose state differs from the judged result before it: True where
    it turns ``firing``, False where it turns ``ok`` after firing; ``fired_by``: the
    result's ``detection.fired_by`` (the part that fired it; None for ``ok``). Unjudged
    results change nothing."""
    found = []
    was_firing = False
    for r in results:
        if r["status"] not in ("firing", "ok"):
            continue
        firing = r["status"] == "firing"
        if firing != was_firing:
            at = pd.Timestamp(r["windows"]["after"]["end"]).tz_localize(None)
            if at >= start:
                found.append((at, firing, (r.get("detection") or {}).get("fired_by")))
        was_firing = firing
    return found


def _confusion(points: list[pd.Timestamp], found: list[pd.Timestamp]
               ) -> tuple[int, list[pd.Timestamp], list[float]]:
    """(missed change points, the false positives, delay of each detected point in s)."""
    delays = []
    for c in points:
        hits = [d for d in found if in_window(d, c)]
        if hits:
            delays.append((min(hits) - c).total_seconds())
    false = [d for d in found if not any(in_window(d, c) for c in points)]
    return len(points) - len(delays), false, delays


def score(results: list[dict], truth: pd.DataFrame) -> dict[str, object]:
    """Missed change points, false positives and delays, the leaderboard's way; and the
    first two with SKAB's conversion (both edges, module docstring)."""
    times = pd.to_datetime(truth["datetime"])
    # a file of at most 400 rows has nothing scored (SKAB's detectors fit on its 400)
    start = times.iloc[SCORED_FROM_ROW] if len(times) > SCORED_FROM_ROW else \
        times.iloc[-1] + pd.Timedelta(seconds=1)
    points = [t for t in times[truth["changepoint"] == 1] if t >= start]
    changes = edges(results, start)
    rising = [(t, by) for t, firing, by in changes if firing]
    missed, false, delays = _confusion(points, [t for t, _ in rising])
    # SKAB's abs(prediction.diff()): turning ok is a detection too
    missed_both, false_both, _ = _confusion(points, [t for t, _, _ in changes])
    # an open incident's reference (docs/decision.md, "A change inside an open incident")
    by_reference = sum(by == "reference" and t in false for t, by in rising)
    statuses = pd.Series([r["status"] for r in results]).value_counts().to_dict()
    return {"change_points": len(points), "missed": missed, "false_positives": len(false),
            "false_positives_by_reference": by_reference,
            "median_delay_s": float(pd.Series(delays).median()) if delays else None,
            "missed_both_edges": missed_both, "false_positives_both_edges": len(false_both),
            **{f"n_{k}": int(statuses.get(k, 0)) for k in ("firing", "ok", "calibrating",
                                                            "incomplete", "error")}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=_default_data(),
                    help="folder of SKAB files: flat (skab-dev's valve2_0.csv.gz) or SKAB's "
                         "own data/ folder (valve1/0.csv, other/13.csv, anomaly-free/...)")
    ap.add_argument("--options", nargs=argparse.REMAINDER, default=None,
                    help="backfill options instead of the four (give them last)")
    ap.add_argument("--workers", type=int, default=2, help="files at once")
    ap.add_argument("--name", default="skab", help="results under bench/results/NAME.*")
    ap.add_argument("--grid-offset", type=int, default=0, metavar="S",
                    help="start each file's inspections S seconds after its first row "
                         "(default 0): how far the counts move with the inspection grid")
    ap.add_argument("--grids", type=int, default=1, metavar="N",
                    help="also run every file on the next N - 1 grids (offsets S + 1 ...) "
                         "and write the counts of each grid and their sum to NAME_grids.md "
                         "(default 1: the first grid alone)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    options = args.options or OPTIONS
    files, normal = find_files(args.data)
    if not files:
        log.error("no SKAB files (.csv or .csv.gz) under %s; pass --data", args.data)
        return 2
    load = machine_load()
    with tempfile.TemporaryDirectory(prefix="skab-") as tmp:
        folder = Path(tmp)
        jobs = []
        for name, source in files:
            try:
                jobs.append(Job(*strip_labels(source, folder, name), labelled=True, name=name))
            except ValueError as exc:  # another CSV in the folder (a result, a notes file)
                log.warning("skipped %s: %s", source, exc)
        if not jobs:
            log.error("no labelled SKAB file under %s; pass --data", args.data)
            return 2
        piece_rows = int(pd.Series([len(job.truth) for job in jobs]).median())
        for name, source in normal:
            jobs.append(Job(*normal_recording(source), labelled=False, name=name))
            jobs += [Job(path, truth, labelled=False, piece=True)
                     for path, truth in normal_pieces(source, folder, piece_rows, name)]
        offsets = [args.grid_offset + k for k in range(max(1, args.grids))]

        def run(job: Job, offset: int) -> dict[str, object]:
            out = folder / f"{job.name or _stem(job.path)}_{offset}.jsonl"
            return {**run_file(job.path, job.truth, options, out, job.labelled, job.name,
                               offset), "piece": job.piece, "grid_offset": offset}

        runs = [(job, offset) for offset in offsets for job in jobs]
        with ThreadPoolExecutor(max_workers=max(1, args.workers)) as pool:
            every = list(pool.map(run, *zip(*runs, strict=True)))
    rows = [row for row in every if row["grid_offset"] == offsets[0]]
    table = pd.DataFrame(rows)
    for row in rows:
        log.info("%s: %s of %s missed, %s false positives", row["file"], row["missed"],
                 row["change_points"], row["false_positives"])
    RESULTS.mkdir(parents=True, exist_ok=True)
    table.to_csv(RESULTS / f"{args.name}.csv", index=False)
    _write_markdown(table, RESULTS / f"{args.name}.md", options, load, args)
    if len(offsets) > 1:
        _write_grids(pd.DataFrame(every), RESULTS / f"{args.name}_grids.md", options, load)
    return 0


def grid_counts(table: pd.DataFrame) -> pd.DataFrame:
    """One row per grid offset of ``table`` (:func:`run_file`'s rows with ``piece`` and
    ``grid_offset``): the labelled files' missed and false positives (rising edges and
    both edges), the whole normal recordings' false positives and their pieces'."""
    def counts(rows: pd.DataFrame) -> dict[str, int]:
        labelled = rows[rows["labelled"]]
        normal = rows[~rows["labelled"] & ~rows["piece"].astype(bool)]
        pieces = rows[~rows["labelled"] & rows["piece"].astype(bool)]
        return {"change_points": int(labelled["change_points"].sum()),
                "missed": int(labelled["missed"].sum()),
                "false_positives": int(labelled["false_positives"].sum()),
                "missed_both_edges": int(labelled["missed_both_edges"].sum()),
                "false_positives_both_edges": int(labelled["false_positives_both_edges"].sum()),
                "normal_false_positives": int(normal["false_positives"].sum()),
                "pieces_false_positives": int(pieces["false_positives"].sum())}
    return pd.DataFrame([{"grid_offset": int(offset), **counts(rows)}
                         for offset, rows in table.groupby("grid_offset", sort=True)])


def _write_grids(table: pd.DataFrame, path: Path, options: list[str], load: str) -> None:
    per_grid = grid_counts(table)
    total = {"grid_offset": "all", **per_grid.drop(columns="grid_offset").sum().to_dict()}
    lines = [(f"# SKAB over {len(per_grid)} inspection grids (`python -m bench.skab "
              f"--grids {len(per_grid)}`)"), "",
             (f"Machine: {load}. Options: `{' '.join(options)}`. Each grid starts every "
              "file's inspections that many seconds after its first row; a live agent's "
              "times do not start where a file does, so each grid is as valid as the first, "
              "and the spread is how far one grid's counts can be trusted. Scored as in "
              "the bench's main table."), "",
             ("| grid offset s | missed | false positives | missed / false positives, both "
              "edges | normal recording: false positives | its pieces: false positives |"),
             "|---|---|---|---|---|---|"]
    for r in [*per_grid.to_dict("records"), total]:  # each grid, then their sum
        lines.append(f"| {r['grid_offset']} | {r['missed']} of {r['change_points']} | "
                     f"{r['false_positives']} | {r['missed_both_edges']} / "
                     f"{r['false_positives_both_edges']} | {r['normal_false_positives']} | "
                     f"{r['pieces_false_positives']} |")
    path.write_text("\n".join(lines) + "\n")


def _write_markdown(table: pd.DataFrame, path: Path, options: list[str], load: str,
                    args: argparse.Namespace) -> None:
    normal = table[~table["labelled"]]
    table = table[table["labelled"]]
    total = table[["change_points", "missed", "false_positives",
                   "false_positives_by_reference", "missed_both_edges",
                   "false_positives_both_edges"]].sum()
    delays = table["median_delay_s"].dropna()
    offset = getattr(args, "grid_offset", 0)
    start = "<first row>" if not offset else f"<first row + {offset} s>"
    command = (f"`mmdwatch backfill --data FILE --start {start} --end <last row> "
               f"{' '.join(options)}`")
    scoring = (f"Scored from each file's {SCORED_FROM_ROW}th row: a detection is a result "
               "that turns `firing`, at the result's time (inspection time + after window); "
               "a change point is missed with no detection in [cp, cp + 60 s] (both ends "
               "included, as in SKAB's scoring); a false positive is a detection outside "
               "those windows. Both edges: SKAB's own conversion of a detector's output, "
               "`abs(prediction.diff())`, with which the published rows were scored: a "
               "result that turns `ok` after firing is a detection too. By a reference: "
               "the false positives whose result an open incident's frozen reference "
               "fired (docs/decision.md, \"A change inside an open incident\").")
    title = "four options" if options == OPTIONS else "other options (in the command below)"
    lines = [f"# SKAB, as published, with {title} (`python -m bench.skab`)", "",
             (f"Machine: {load}. Files: {', '.join(table['file'])} (`{args.data}`). Each "
              f"file: {command}, the label columns dropped first. {scoring}"), "",
             ("| file | change points | missed | false positives | by a reference | "
              "median delay s | missed / false positives, both edges | "
              "firing / ok / calibrating / incomplete / error results | wall s |"),
             "|---|---|---|---|---|---|---|---|---|"]
    for r in table.itertuples():
        delay = "" if pd.isna(r.median_delay_s) else f"{r.median_delay_s:.0f}"
        lines.append(f"| {r.file} | {r.change_points} | {r.missed} | {r.false_positives} | "
                     f"{r.false_positives_by_reference} | {delay} | "
                     f"{r.missed_both_edges} / {r.false_positives_both_edges} | "
                     f"{r.n_firing} / {r.n_ok} / {r.n_calibrating} / "
                     f"{r.n_incomplete} / {r.n_error} | {r.wall_s} |")
    median = f", median delay {delays.median():.0f} s" if len(delays) else ""
    lines += ["", (f"Total: {int(total['missed'])} of {int(total['change_points'])} change "
                   f"points missed, {int(total['false_positives'])} false positives "
                   f"({int(total['false_positives_by_reference'])} by a reference){median}. "
                   f"Both edges (SKAB's conversion): {int(total['missed_both_edges'])} "
                   f"missed, {int(total['false_positives_both_edges'])} false positives.")]
    if len(normal):
        lines += ["", ("Normal operation only (no change point: every detection from the "
                       "400th row on is a false positive; not in the total):"), "",
                  ("| recording | hours scored | false positives | by a reference | "
                   "per hour | false positives, both edges | "
                   "firing / ok / calibrating / incomplete / error results | wall s |"),
                  "|---|---|---|---|---|---|---|---|"]
        for r in normal.itertuples():
            rate = f"{r.false_positives / r.scored_h:.2f}" if r.scored_h else ""
            lines.append(f"| {r.file} | {r.scored_h} | {r.false_positives} | "
                         f"{r.false_positives_by_reference} | {rate} | "
                         f"{r.false_positives_both_edges} | {r.n_firing} / {r.n_ok} / "
                         f"{r.n_calibrating} / {r.n_incomplete} / {r.n_error} | {r.wall_s} |")
        pieces = normal[normal["piece"]] if "piece" in normal else normal.iloc[:0]
        if len(pieces):
            hours = float(pieces["scored_h"].sum())
            lines += ["", (f"The pieces: the recording cut into {len(pieces)} files of a "
                           "labelled file's length, each calibrated afresh as every SKAB file "
                           f"is: {int(pieces['false_positives'].sum())} false positives in "
                           f"{hours:.2f} scored hours "
                           f"({pieces['false_positives'].sum() / len(pieces):.2f} a file).")]
    lines += ["", ("The leaderboard's published rows, over all 34 files and 127 change "
                   "points (these files are 4 of them):"), "",
              "| detector | missed | false positives |", "|---|---|---|"]
    lines += [f"| {name} | {m} | {fp} |" for name, (m, fp) in PUBLISHED.items()]
    path.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    raise SystemExit(main())
