"""False incidents on leak-free L-Town streams, by week and by weekday or weekend: how
often the first weekend after calibration raises a false incident (issue 28, item 1),
on many more first weekends than the five of the shared dev data.

    python -m bench.first_weekends [--runs 16] [--weeks 3] [--workers 2] [--extra ...]

Each run is one independent demand realisation (:mod:`bench.ltown_sim`, the shared data's
recipe; needs the ``sim`` extra), starting on a Monday, of 7 days of before window plus
``--weeks`` weeks and 6 hours, replayed as :mod:`bench.leak_delay` replays a scenario: the
agent's hourly grid from the first full before window to the end of the data less the
after window, the defaults of ``mmdwatch backfill`` (``--extra``: more options). Data
that begin on a Monday are calibrated from the Friday afternoon of the second week, so
"week 1" below is that Friday and the first weekend after it. Every incident is false.
The rows count each incident once, where it opened, against the judged (``ok`` or
``firing``) inspections of that kind; the level is 1/720 an inspection (30 days between
false incidents at one an hour). Writes ``bench/results/first_weekends/first_weekends.{csv,md}``.
"""
from __future__ import annotations

import argparse
import logging
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pandas as pd

from bench._common import machine_load, markdown_table
from bench.leak_delay import backfill, replay_range, utc
from bench.ltown_sim import LTownStreams, SimulatorMissing

log = logging.getLogger("bench.first_weekends")
OUT = Path(__file__).resolve().parent / "results" / "first_weekends"
FIRST_MONDAY = pd.Timestamp("2019-01-07")  # any Monday: only the weekday matters


def kind_of(t: pd.Timestamp, first: pd.Timestamp) -> tuple[int, str]:
    """(week of the calibrated span: 1 = the first, the day type) of inspection ``t`` in
    data that begin at ``first``."""
    week = int((t.tz_convert(None) - first) / pd.Timedelta(days=7))
    return week, "weekend" if t.weekday() >= 5 else "weekday"


def incidents(results: list[dict[str, Any]], first: pd.Timestamp
              ) -> tuple[list[dict[str, Any]], list[tuple[int, str]]]:
    """Each incident where it opened, and the (week, day type) of each judged result."""
    opened: dict[str, dict[str, Any]] = {}
    judged = []
    for r in results:
        t = utc(r["inspection_time"])
        week, day = kind_of(t, first)
        if r["status"] in ("ok", "firing"):
            judged.append((week, day))
        incident = r.get("incident") or {}
        if isinstance(incident, dict) and incident.get("id") and incident["id"] not in opened:
            d = r.get("detection") or {}
            opened[incident["id"]] = {
                "opened": t.strftime("%a %Y-%m-%d %H:00"), "week": week, "day": day,
                "fired_by": d.get("fired_by"), "p_value": d.get("p_value"),
                "history_n": d.get("history_n"),
                "named": " ".join(s["sensor_id"] for s in r["sensors"] if s.get("selected"))}
    return list(opened.values()), judged


def run(seed: int, weeks: int, work: Path, extra: list[str]) -> dict[str, Any]:
    start = FIRST_MONDAY + pd.Timedelta(days=7 * (seed % 52))
    path = work / f"ltown-{seed}.csv.gz"
    readings = LTownStreams(work=work).simulate(seed, start, 7 + 7 * weeks + 0.25)
    readings.to_csv(path, index=False)
    times = readings["timestamp"]  # the span from the frame in hand, not the file again
    begin, end = replay_range(utc(str(times.min())), utc(str(times.max())))
    results = backfill(path, begin, end, work / f"ltown-{seed}.jsonl", extra)
    found, judged = incidents(results, start)
    return {"seed": seed, "start": start.date().isoformat(), "incidents": found,
            "judged": judged}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=16, help="independent streams (seeds 0..)")
    ap.add_argument("--weeks", type=int, default=3, help="weeks after the first before window")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--extra", nargs=argparse.REMAINDER, default=[],
                    help="backfill options (give them last)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    load = machine_load()
    try:
        with tempfile.TemporaryDirectory(prefix="first-weekends-") as tmp, \
                ThreadPoolExecutor(max(1, args.workers)) as pool:
            runs = list(pool.map(lambda s: run(s, args.weeks, Path(tmp), args.extra),
                                 range(args.runs)))
    except SimulatorMissing as exc:
        log.error("%s", exc)
        return 2
    rows = []
    for week in range(1, args.weeks + 1):
        for day in ("weekday", "weekend"):
            n = sum(j == (week, day) for r in runs for j in r["judged"])
            k = sum((i["week"], i["day"]) == (week, day) for r in runs for i in r["incidents"])
            if n:
                rows.append({"week": week, "days": day, "judged_inspections": n,
                             "false_incidents": k,
                             "per_720_inspections": round(720 * k / n, 2)})
    table = pd.DataFrame(rows)
    found = pd.DataFrame([{"seed": r["seed"], "data_start": r["start"], **i}
                          for r in runs for i in r["incidents"]])
    args.out.mkdir(parents=True, exist_ok=True)
    table.to_csv(args.out / "first_weekends.csv", index=False)
    total_n = int(table["judged_inspections"].sum()) if len(table) else 0
    total_k = int(table["false_incidents"].sum()) if len(table) else 0
    lines = [
        "# False incidents on leak-free L-Town streams (`python -m bench.first_weekends`)", "",
        (f"Machine: {load}. {args.runs} runs (seeds 0-{args.runs - 1}), each 7 days of "
         f"before window and {args.weeks} weeks, starting on a Monday, replayed hourly with "
         f"the defaults{' and ' + ' '.join(args.extra) if args.extra else ''} "
         "(`bench.ltown_sim`: the shared data's demand recipe, EPANET's hydraulics). Week 1 "
         "is the first calibrated Friday and the weekend after it."), "",
        *markdown_table(table), "",
        (f"In all: {total_k} false incidents in {total_n} judged inspections "
         f"({round(720 * total_k / total_n, 2) if total_n else 0} per 720, one per "
         f"{round(total_n / total_k / 24, 1) if total_k else 'inf'} days at one an hour)."),
        ""]
    if len(found):
        lines += ["Each false incident, where it opened:", "", *markdown_table(found), ""]
    (args.out / "first_weekends.md").write_text("\n".join(lines))
    log.info("%d false incidents in %d judged inspections", total_k, total_n)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
