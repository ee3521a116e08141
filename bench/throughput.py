"""Backfill throughput: inspections per second of ``mmdwatch backfill`` on the live profile,
history included, and its peak memory, as sensors and inspections grow.

    python -m bench.throughput [--sensors 100 300 1000] [--inspections 24 96]
                               [--device cpu [cuda auto]] [--baseline PATH]

Each case is one ``mmdwatch backfill`` process (the command a user runs, imports and the
source's read included) over hourly times, timed from start to exit; its peak resident
memory comes from the operating system (``wait4``). Each checkout first writes its
bytecode and imports its code once, untimed (:func:`warm_up`), so that no case pays for
reading the libraries from disk or compiling the checkout's modules. The agent's decisions
are replayed from its first inspection time (the data's first reading + the 7-day before
window), so every case computes the days of history before its written times as well:

* ``d1``: ``ltown-delay-dev/d1`` (33 real-scale sensors, 5-minute readings): the 24 hourly
  inspections of its leak day, 2019-09-16, after 7 days of replayed history (192
  inspections in all, the agent's path);
* ``null-D``: a simulated network of D sensors (:class:`bench.null_streams.NullNetwork`,
  10-minute readings) with 7 days of before window, 4 days of history and then the
  written times.

``inspections_per_s`` counts every inspection the process ran (written and replayed);
``written_per_s`` the written ones alone (what the user asked for). ``own_cpu_s`` is the
process's own CPU time, the fits of its engine child left out: the bound on the rate
where the fits take no time (a GPU). Several ``--device``
values time each case on each (a GPU machine's CPU and GPU in one run, with the ratio to
the first device). ``--baseline PATH``
runs the same cases with another checkout (for example ``git worktree add /tmp/base
<commit>``) in the same session, for a before/after table on one machine.
Writes ``bench/results/throughput.{csv,md,png}``.
"""
from __future__ import annotations

import argparse
import itertools
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from bench._common import machine_load

log = logging.getLogger("bench.throughput")
RESULTS = Path(__file__).resolve().parent / "results"
ROOT = Path(__file__).resolve().parents[1]
HISTORY_DAYS = 4  # replayed days before the written times of a simulated case


def _shared(name: str) -> Path:
    beside = ROOT.parent / "shared" / "data" / name
    return beside if beside.exists() else Path("/work/shared/data") / name


@dataclass
class Case:
    """One backfill: its data file, the written span and how many times it inspects."""

    name: str
    sensors: int
    data: Path
    start: pd.Timestamp
    end: pd.Timestamp
    inspections: int  # every time inspected: replayed + written
    written: int


def dev_case() -> Case:
    data = _shared("ltown-delay-dev") / "d1" / "pressures.csv.gz"
    start = pd.Timestamp("2019-09-16T00:00:00Z")
    end = start + pd.Timedelta(hours=23)
    replayed = int((start - pd.Timestamp("2019-09-09T00:00:00Z")) / pd.Timedelta(hours=1))
    return Case("d1", 33, data, start, end, replayed + 24, 24)


def null_case(sensors: int, written: int, folder: Path) -> Case:
    """A simulated network of ``sensors`` with ``written`` hourly times after 7 + 4 days."""
    from bench.null_streams import NullNetwork

    first = pd.Timestamp("2024-01-01T00:00:00Z")
    days = 7 + HISTORY_DAYS + written / 24 + 1
    path = folder / f"null-{sensors}-{written}.csv.gz"
    if not path.exists():
        net = NullNetwork(n_sensors=sensors, seed=7, step_s=600)
        net.to_long(net.simulate(start=first, days=days)).to_csv(path, index=False)
    start = first + pd.Timedelta(days=7 + HISTORY_DAYS)
    end = start + pd.Timedelta(hours=written - 1)
    return Case(f"null-{sensors}", sensors, path, start, end, HISTORY_DAYS * 24 + written,
                written)


def _checkout_env(checkout: Path) -> dict[str, str]:
    """The environment of a process that runs ``checkout``'s code."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(checkout), *filter(None, [os.environ.get("PYTHONPATH")])])}


def warm_up(checkout: Path) -> float:
    """Write the checkout's bytecode and import what a backfill imports, once, untimed;
    returns its seconds. The first process after a while reads torch's libraries and the
    checkout's sources from disk: measured on 2026-12-01, d1 took 5.5 s as the first case
    of a run and 3.9-4.3 s in three runs by hand after it, which put the first-timed
    checkout at a disadvantage. The bytecode, as ``make install`` writes it: where
    PYTHONDONTWRITEBYTECODE is set, a checkout without it compiles its modules in every
    process."""
    t0 = time.perf_counter()
    env = _checkout_env(checkout)
    subprocess.run([sys.executable, "-m", "compileall", "-q", "engine", "monitor",
                    "connectors"], cwd=checkout, env=env, check=True,
                   stdout=subprocess.DEVNULL)
    imports = "import monitor.cli, monitor.inspection, engine.selectors, engine.live.engine_power"
    subprocess.run([sys.executable, "-c", imports], cwd=checkout, env=env, check=True)
    return time.perf_counter() - t0


#: ``mmdwatch backfill`` as ``python -m monitor.cli`` runs it, then the CPU seconds of
#: this process alone (its engine child's fits left out) written to the file named by
#: $MMDWATCH_OWN_CPU: inline, so that a baseline checkout without this module runs it too
OWN_CPU = """
import os, resource, runpy
try:
    runpy.run_module("monitor.cli", run_name="__main__", alter_sys=True)
finally:
    r = resource.getrusage(resource.RUSAGE_SELF)
    with open(os.environ["MMDWATCH_OWN_CPU"], "w") as f:
        f.write(str(r.ru_utime + r.ru_stime))
"""


def run_case(case: Case, checkout: Path, device: str, out: Path) -> dict[str, float]:
    """One backfill process: wall seconds, peak memory (MiB) and the CPU seconds of the
    process itself (``own_cpu_s``: imports, windows, statistics, decisions and writing,
    not the fits of its engine process). Where the fits take no time (a GPU) the process's
    own work bounds the rate: ``inspections / own_cpu_s`` at best."""
    cmd = [sys.executable, "-c", OWN_CPU, "backfill", "--data", str(case.data),
           "--start", case.start.isoformat(), "--end", case.end.isoformat(),
           "--device", device, "--out", str(out)]
    own_cpu = out.with_suffix(".own_cpu")
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=checkout, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE,
                            env={**_checkout_env(checkout), "MMDWATCH_OWN_CPU": str(own_cpu)})
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    err = proc.stderr.read().decode() if proc.stderr else ""
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"backfill of {case.name} failed ({proc.returncode}): {err[-2000:]}")
    results = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    statuses = {s: sum(r["status"] == s for r in results) for s in ("firing", "ok",
                                                                      "calibrating", "error")}
    return {"wall_s": wall, "own_cpu_s": float(own_cpu.read_text()),
            "peak_mib": usage.ru_maxrss / 1024, "results": len(results),
            **{f"n_{k}": v for k, v in statuses.items()}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sensors", type=int, nargs="*", default=[100, 300, 1000],
                    help="simulated network sizes (the d1 case always runs)")
    ap.add_argument("--inspections", type=int, nargs="*", default=[24, 96],
                    help="written hourly times of the simulated cases (growth with times)")
    ap.add_argument("--device", nargs="+", default=["cpu"],
                    help="the engine's device(s): cpu, cuda, auto; several are timed in turn")
    ap.add_argument("--baseline", type=Path, default=None,
                    help="another checkout to time on the same cases (before/after)")
    ap.add_argument("--name", default="throughput", help="results file stem")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    RESULTS.mkdir(exist_ok=True)
    load = machine_load()
    work = Path(tempfile.mkdtemp(prefix="mmdwatch-throughput-"))
    cases = [dev_case()]
    cases += [null_case(d, n, work) for d in args.sensors for n in args.inspections[:1]]
    cases += [null_case(args.sensors[0], n, work) for n in args.inspections[1:]
              ] if args.sensors else []
    checkouts = [("this", ROOT)] + ([("baseline", args.baseline)] if args.baseline else [])
    for label, checkout in checkouts:
        log.info("warm-up of %s (bytecode and imports, untimed): %.1f s", label,
                 warm_up(checkout))
    rows = []
    for case in cases:
        for (label, checkout), device in itertools.product(checkouts, args.device):
            log.info("%s, %s, %s: %d inspections (%d written) at %d sensors", case.name,
                     label, device, case.inspections, case.written, case.sensors)
            stats = run_case(case, checkout, device,
                             work / f"{case.name}-{label}-{device}.jsonl")
            rows.append({"case": case.name, "code": label, "sensors": case.sensors,
                         "inspections": case.inspections, "written": case.written,
                         "device": device, **stats,
                         "inspections_per_s": case.inspections / stats["wall_s"],
                         "written_per_s": case.written / stats["wall_s"]})
            log.info("  %.1f s, %.2f inspections/s, peak %.0f MiB", stats["wall_s"],
                     rows[-1]["inspections_per_s"], stats["peak_mib"])
    table = pd.DataFrame(rows)
    table.to_csv(RESULTS / f"{args.name}.csv", index=False)
    _write_markdown(table, RESULTS / f"{args.name}.md", load)
    _plot(table, RESULTS / f"{args.name}.png")
    print(table.to_string(index=False))
    return 0


def _write_markdown(table: pd.DataFrame, path: Path, load: str) -> None:
    devices = list(dict.fromkeys(table["device"]))
    lines = ["# Backfill throughput (`python -m bench.throughput`)", "",
             (f"Machine: {os.cpu_count()} CPU cores{_gpu_name()}, {load}; device "
              f"{', '.join(f'`{d}`' for d in devices)}. Each "
              "row is one `mmdwatch backfill` process (live profile, hourly), start to exit: "
              "imports, the source's read, the replayed history and the written times. Each "
              "checkout wrote its bytecode and imported its code once, untimed, before the "
              "first case (a warm disk cache for every row)."), "",
             ("`own CPU s` is the backfill process's own CPU time, the fits of its engine "
              "process left out: imports, windows, statistics, decisions and writing. Where "
              "the fits take no time (a GPU), the rate cannot pass inspections / own CPU s "
              "(`own ms/insp`) on a core like this one."), "",
             ("| case | code | device | sensors | inspections (written) | wall s | "
              "inspections/s | written/s | own CPU s | own ms/insp | peak MiB | "
              "firing / ok / calibrating / error |"),
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in table.itertuples():
        lines.append(f"| {r.case} | {r.code} | {r.device} | {r.sensors} | {r.inspections} "
                     f"({r.written}) "
                     f"| {r.wall_s:.1f} | {r.inspections_per_s:.2f} | {r.written_per_s:.2f} "
                     f"| {r.own_cpu_s:.1f} | {1000 * r.own_cpu_s / r.inspections:.1f} "
                     f"| {r.peak_mib:.0f} | {r.n_firing} / {r.n_ok} / {r.n_calibrating} / "
                     f"{r.n_error} |")
    if len(devices) > 1:
        lines += ["", f"Against `{devices[0]}` (its wall / this wall), same case, same run:",
                  ""]
        for (case, n, code), part in table.groupby(["case", "inspections", "code"],
                                                    sort=False):
            walls = dict(zip(part["device"], part["wall_s"], strict=True))
            lines += [f"- {case}, {n} inspections, {code}, `{d}`: "
                      f"{walls[devices[0]] / walls[d]:.1f}x ({walls[d]:.1f} s)"
                      for d in devices[1:] if d in walls and devices[0] in walls]
    marginal = _marginal_rates(table)
    if marginal:
        lines += ["", ("Marginal rate, the process's start and first times left out (extra "
                       "inspections / extra wall between a case's two lengths):"), "",
                  *marginal]
    if (table["code"] == "baseline").any():
        lines += ["", ("Speed-up (baseline / this), same case, same session: wall, and the "
                       "process's own CPU:"), ""]
        for (case, n), part in table[table["device"] == devices[0]].groupby(
                ["case", "inspections"], sort=False):
            walls = dict(zip(part["code"], part["wall_s"], strict=True))
            own = dict(zip(part["code"], part["own_cpu_s"], strict=True))
            if "baseline" in walls:
                gain = walls["baseline"] / walls["this"]
                lines.append(f"- {case}, {n} inspections: wall {gain:.2f}x "
                             f"({walls['baseline']:.1f} s -> {walls['this']:.1f} s), own CPU "
                             f"{own['baseline'] / own['this']:.2f}x ({own['baseline']:.2f} s -> "
                             f"{own['this']:.2f} s)")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def _marginal_rates(table: pd.DataFrame) -> list[str]:
    """One line per case, code and device timed at two or more lengths: the inspections
    per second that the longer run added over the shorter."""
    lines = []
    for (case, code, device), part in table.groupby(["case", "code", "device"], sort=False):
        if len(part) < 2:
            continue
        part = part.sort_values("inspections")
        short, long = part.iloc[0], part.iloc[-1]
        extra = (long["inspections"] - short["inspections"]) / (long["wall_s"] - short["wall_s"])
        lines.append(f"- {case}, {code}, `{device}`: {short['inspections']} -> "
                     f"{long['inspections']} inspections, {extra:.1f} inspections/s")
    return lines


def _gpu_name() -> str:
    """``, GPU <name>`` where torch sees one (the backfills run in their own processes)."""
    import torch

    return f", GPU {torch.cuda.get_device_name(0)}" if torch.cuda.is_available() else ""


def _plot(table: pd.DataFrame, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4))
    for (code, device), part in table.groupby(["code", "device"]):
        part = part.sort_values("sensors")
        ax.plot(part["sensors"], part["inspections_per_s"], "o", label=f"{code}, {device}")
    ax.set_xscale("log")
    ax.set_xlabel("sensors")
    ax.set_ylabel("inspections per second (history included)")
    ax.set_title("mmdwatch backfill throughput, live profile")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    raise SystemExit(main())
