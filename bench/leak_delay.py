"""Delay, incidents and false incidents of the default (live) settings, on the agent's path.

Each scenario is replayed by ``mmdwatch backfill`` (the agent's own inspection, history,
incident and onset code) with hourly inspections ON THE AGENT'S GRID (times on the hour),
from the first time a full before window exists (data start + 7 d, rounded up to the hour)
to the end of the data minus the after window (16 h): the WHOLE leak-free history is
replayed, the calibration history growing as it goes, as a daemon started on the first
reading would see it. A result "exists" at its inspection time + after window (``known``);
every time below is counted there.

Scenarios:

* ``ltown-delay-dev`` d1-d4 (``../shared/data/ltown-delay-dev``): one leak, never repaired;
  onset = ``target_leak_start``; the changed sensors = the first 3 of
  ``sensors_by_leak_effect``; the nearest = the first 3 of ``sensors_by_network_distance``;
* ``shape-dev`` (``../shared/data/shape-dev``): dev-noise, dev-stuck, dev-cycle, dev-drift
  (onset = ``change_start``, changed = ``changed_sensors``; every change lasts to the end)
  and dev-none, the control (no change: every incident on it is false);
* null streams from :mod:`bench.null_streams` with a slow common drift (no change at all).

Reported per scenario (``leak_delay.csv`` holds every column, ``leak_delay.md`` the main
ones and one summary line per target of issue 18):

* ``delay_h``: onset -> the first incident event (``opened`` or ``updated``) that exists
  after the onset and whose incident's first 3 sensors hold a changed sensor;
* ``named``: whether such an event exists (a changed sensor among the incident's first 3);
* ``delay_near_h``, ``named_near`` (leaks): the same, where a sensor among the 3 nearest the
  leak by network distance counts as well. Why: on a leak that lowers a whole pressure zone
  (d2: 16 of 30 sensors drop by more than half the largest drop) the ranking by noise-free
  effect is close to a tie, and the sensor nearest the leak, which an operator walks to,
  may hold the clearest signal while ranking far down it (d2's n337: 17th by effect, the
  lowest noise of all);
* ``delay_ranked_h``: the older measure, for comparison: onset -> the first firing result
  that ranks a changed sensor in its top 3 (``sensors[:3]``), named by the incident or not
  (the incident names only the sensors whose z clears the alert threshold);
* ``first_named``: the first sensor of the first incident opened after the onset, and
  whether it is a changed one;
* ``open_h``: how long that incident stays open (its ``opened`` result to its ``resolved``
  result, with the reason), or ``open to the end`` with the hours from its opening to the
  last reading;
* ``onset_error_h``: that incident's ``onset`` minus the true onset; ``onset_in_interval``:
  whether the true onset lies in [``onset_low``, ``onset_high``];
* ``false_incidents``: incidents opened by results that exist before the onset (on dev-none
  and null streams: every incident), and per 30 calibrated leak-free days;
* ``updated_events``: the ``updated`` events of the first incident after the onset;
* seconds per inspection: mean and p95 of the results' ``generator.runtime_s``.

    python -m bench.leak_delay [--null-weeks 4] [--null-seeds 2] [--workers 2]
                               [--start-days mon wed sat]

``--start-days``: every scenario is also replayed with its data cut to begin at its first
midnight on each weekday named (scenario ``d1@sat``), so that the first weekend after
calibration falls anywhere in the replay; the false incidents are summed per start day.

Writes ``bench/results/leak_delay/{leak_delay.csv, leak_delay.md, timeline.png}``.
"""
from __future__ import annotations

import argparse
import json
import logging
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from bench._common import machine_load
from bench._common import markdown_table as common_table

log = logging.getLogger("bench.leak_delay")


def _shared(name: str) -> Path:
    """``../shared/data/<name>`` beside the checkout, else ``/work/shared/data/<name>``."""
    beside = Path(__file__).resolve().parents[2] / "shared" / "data" / name
    return beside if beside.exists() else Path("/work/shared/data") / name


SHARED = _shared("ltown-delay-dev")
SHAPE = _shared("shape-dev")
SHAPE_SETS = ("dev-noise", "dev-stuck", "dev-cycle", "dev-drift", "dev-none")
CONTROL = "dev-none"
OUT = Path(__file__).resolve().parent / "results" / "leak_delay"
BEFORE = pd.Timedelta(days=7)
LIVE_AFTER = pd.Timedelta(hours=16)  # the live profile's after window
HOUR = pd.Timedelta(hours=1)
NAMED_WITHIN_H = 24.0  # the targets: named within 24 h
ONSET_TOLERANCE_H = 3.0  # onset estimate within +-3 h
NULL_SENSORS = 33


@dataclass
class Scenario:
    """One replay: its data, its change (``onset`` None: none) and what to score."""
    name: str
    kind: str  # "leak", "shape", "control" or "null"
    data: Path
    onset: pd.Timestamp | None = None
    changed: list[str] = field(default_factory=list)
    note: str = ""
    nearest: list[str] = field(default_factory=list)  # leaks: the 3 nearest by network distance


def utc(text: str) -> pd.Timestamp:
    t = pd.Timestamp(text)
    return t.tz_localize("UTC") if t.tzinfo is None else t.tz_convert("UTC")


def leak_scenario(folder: Path) -> Scenario:
    truth = json.loads((folder / "ground_truth.json").read_text())
    return Scenario(folder.name, "leak", folder / "pressures.csv.gz",
                    utc(truth["target_leak_start"]), list(truth["sensors_by_leak_effect"][:3]),
                    nearest=list(truth.get("sensors_by_network_distance", [])[:3]))


def shape_scenario(folder: Path) -> Scenario:
    truth = json.loads((folder / "ground_truth.json").read_text())
    if folder.name == CONTROL or not truth.get("changed_sensors"):
        return Scenario(folder.name, "control", folder / "pressures.csv.gz")
    return Scenario(folder.name, "shape", folder / "pressures.csv.gz",
                    utc(truth["change_start"]), list(truth["changed_sensors"]),
                    note=str(truth.get("kind", "")))


def backfill(data: Path, start: pd.Timestamp, end: pd.Timestamp, out: Path,
             extra: list[str]) -> list[dict[str, Any]]:
    """``mmdwatch backfill`` over [start, end] hourly; the results it wrote."""
    cmd = [sys.executable, "-m", "monitor.cli", "backfill", "--data", str(data),
           "--start", start.isoformat(), "--end", end.isoformat(), "--every", "1h",
           "--out", str(out), *extra]
    log.info("replaying %s: %s .. %s", data, start, end)
    for attempt in (1, 2):
        done = subprocess.run(cmd, check=False, stderr=subprocess.DEVNULL)
        if done.returncode >= 0 or attempt == 2:  # killed by a signal from outside: once more
            break
        log.warning("backfill of %s killed by signal %d; replaying it again", data,
                    -done.returncode)
    done.check_returncode()
    return [json.loads(line) for line in out.read_text().splitlines() if line.strip()]


def data_range(path: Path) -> tuple[pd.Timestamp, pd.Timestamp]:
    times = pd.read_csv(path, usecols=[0]).iloc[:, 0]
    t = pd.to_datetime(times, utc=True)
    return t.min(), t.max()


def replay_range(first: pd.Timestamp, last: pd.Timestamp) -> tuple[pd.Timestamp, pd.Timestamp]:
    """The agent's grid: from the first full before window, on the hour, to the last time
    whose after window lies inside the data."""
    return (first + BEFORE).ceil("h"), last - LIVE_AFTER


def known(r: dict[str, Any]) -> pd.Timestamp:
    """When a result can exist: its inspection time + the after window."""
    return utc(r["windows"]["after"]["end"])


def _hours(delta: pd.Timedelta) -> float:
    return round(delta / HOUR, 2)


def _event(r: dict[str, Any]) -> str | None:
    return (r.get("incident") or {}).get("event")


def score(results: list[dict[str, Any]], sc: Scenario, data_end: pd.Timestamp) -> dict:
    """Every reported number of one replay (see the module docstring)."""
    onset = sc.onset
    changed = set(sc.changed)

    def before_onset(r: dict[str, Any]) -> bool:
        return onset is None or known(r) < onset

    leak_free = [r for r in results if before_onset(r)]
    calibrated = [r for r in leak_free if r["status"] in ("ok", "firing")]
    openings = [r for r in results if _event(r) == "opened"]
    false = [r for r in openings if before_onset(r)]
    row: dict[str, Any] = {
        "scenario": sc.name, "kind": sc.kind,
        "onset": onset.isoformat() if onset is not None else "",
        "changed": " ".join(sc.changed),
        "nearest": " ".join(sc.nearest),
        "inspections": len(results),
        "calibrating": sum(r["status"] == "calibrating" for r in results),
        "errors": sum(r["status"] == "error" for r in results),
        "incomplete": sum(r["status"] == "incomplete" for r in results),
        "firing": sum(r["status"] == "firing" for r in results),
        "leak_free_days": round(len(leak_free) / 24.0, 2),
        "leak_free_calibrated_days": round(len(calibrated) / 24.0, 2),
        "false_incidents": len(false),
        "false_per_30d": (round(len(false) / (len(calibrated) / 24.0) * 30, 2)
                          if calibrated else None),
        "false_detail": "; ".join(
            f"{r['incident']['id'].split('-', 1)[-1]} known {known(r):%m-%d %H:%M} "
            f"{' '.join(r['incident']['sensors'][:3])}" for r in false),
        "incidents_after_onset": len(openings) - len(false),
        "delay_h": None, "named": False if onset is not None else None,
        "delay_near_h": None,
        "named_near": False if onset is not None and sc.kind == "leak" else None,
        "delay_ranked_h": None,
        "top3_at_detection": "", "detection_event": "",
        "first_incident": "", "first_named": "", "first_named_changed": None,
        "open_h": None, "open_to_end": None, "resolved_reason": "", "open": "",
        "onset_estimate": "", "onset_error_h": None, "onset_in_interval": None,
        "updated_events": None,
    }
    runtime = np.array([r["generator"]["runtime_s"] for r in results], dtype=float)
    firing_rt = runtime[[r["status"] == "firing" for r in results]] if results else runtime
    row.update({
        "s_per_inspection_mean": round(float(runtime.mean()), 3) if runtime.size else None,
        "s_per_inspection_p95": (round(float(np.quantile(runtime, 0.95)), 3)
                                 if runtime.size else None),
        "s_per_firing_inspection_mean": (round(float(firing_rt.mean()), 3)
                                         if firing_rt.size else None),
    })
    if onset is None:
        return row
    events = [r for r in results
              if _event(r) in ("opened", "updated") and known(r) > onset]
    # the delay: the first event after the onset whose incident names a changed sensor
    for r in events:
        top3 = r["incident"]["sensors"][:3]
        if changed & set(top3):
            row.update(delay_h=_hours(known(r) - onset), named=True,
                       top3_at_detection=" ".join(top3),
                       detection_event=f"{_event(r)} {r['incident']['id']}")
            break
    if sc.kind == "leak":  # ... or one of the sensors nearest the leak
        near = next((r for r in events
                     if (changed | set(sc.nearest)) & set(r["incident"]["sensors"][:3])), None)
        if near is not None:
            row.update(delay_near_h=_hours(known(near) - onset), named_near=True)
    # the old measure, for comparison: a firing result ranks a changed sensor in its top 3
    # (the incident names only the sensors that clear the alert threshold)
    ranked = next((r for r in results if r["status"] == "firing" and known(r) > onset
                   and changed & {s["sensor_id"] for s in r["sensors"][:3]}), None)
    if ranked is not None:
        row["delay_ranked_h"] = _hours(known(ranked) - onset)
    after = [r for r in openings if not before_onset(r)]
    if not after:
        return row
    first = after[0]
    inc = first["incident"]
    iid = inc["id"]
    row.update(first_incident=iid, first_named=inc["sensors"][0] if inc["sensors"] else "",
               first_named_changed=bool(inc["sensors"]) and inc["sensors"][0] in changed)
    row["updated_events"] = sum(1 for r in results if (r.get("incident") or {}).get("id") == iid
                                and _event(r) == "updated")
    end = next((r for r in results if (r.get("incident") or {}).get("id") == iid
                and _event(r) == "resolved"), None)
    if end is None:
        hours = _hours(data_end - known(first))
        row.update(open_h=hours, open_to_end=True, open=f"open to the end ({hours} h)")
    else:
        hours = _hours(known(end) - known(first))
        reason = end["incident"].get("reason") or ""
        row.update(open_h=hours, open_to_end=False, resolved_reason=reason,
                   open=f"resolved after {hours} h ({reason})")
    if inc.get("onset"):
        est = utc(inc["onset"])
        row["onset_estimate"] = est.isoformat()
        row["onset_error_h"] = _hours(est - onset)
        if inc.get("onset_low") and inc.get("onset_high"):
            row["onset_in_interval"] = bool(utc(inc["onset_low"]) <= onset
                                            <= utc(inc["onset_high"]))
    return row


#: weekday names of --start-days -> pandas' weekday numbers
WEEKDAYS = {"mon": 0, "tue": 1, "wed": 2, "thu": 3, "fri": 4, "sat": 5, "sun": 6}


def starting_on(sc: Scenario, day: str | None, work: Path) -> Scenario:
    """``sc`` with its data cut to begin at the first midnight (UTC) on weekday ``day`` (None:
    as it is), so that the first weekend after calibration falls elsewhere in the replay."""
    if day is None:
        return sc
    frame = pd.read_csv(sc.data)
    times = pd.to_datetime(frame.iloc[:, 0], utc=True)
    cut = times.min().ceil("D")
    while cut.weekday() != WEEKDAYS[day]:
        cut += pd.Timedelta(days=1)
    path = work / f"{sc.data.stem.split('.')[0]}-{sc.name.split()[0]}-{day}.csv.gz"
    frame[(times >= cut).to_numpy()].to_csv(path, index=False)
    return replace(sc, name=f"{sc.name}@{day}", data=path)


def run_scenario(sc: Scenario, work: Path, extra: list[str], day: str | None = None
                 ) -> tuple[dict, list[dict[str, Any]], pd.Timestamp]:
    sc = starting_on(sc, day, work)
    first, last = data_range(sc.data)
    start, end = replay_range(first, last)
    results = backfill(sc.data, start, end, work / f"{sc.name}.jsonl", extra)
    return score(results, sc, last), results, last


def run_null(seed: int, weeks: int, work: Path, extra: list[str], day: str | None = None
             ) -> tuple[dict, list[dict[str, Any]], pd.Timestamp]:
    from bench.null_streams import NullNetwork

    net = NullNetwork(n_sensors=NULL_SENSORS, seed=seed, drift_sd=0.03)
    wide = net.simulate("2024-01-01", days=7 + 7 * weeks + 1, stream_seed=seed)
    # one file per start day: the day's jobs run at once, and one must not read the
    # stream while another writes it
    path = work / (f"null{seed}.csv.gz" if day is None else f"null{seed}-from-{day}.csv.gz")
    NullNetwork.to_long(wide).to_csv(path, index=False)
    sc = starting_on(Scenario(f"null-{seed} ({weeks} weeks, drift)", "null", path), day, work)
    first, last = data_range(sc.data)
    start, end = replay_range(first, last)
    results = backfill(sc.data, start, end, work / f"{sc.data.stem}.jsonl", extra)
    return score(results, sc, last), results, last


def markdown_table(frame: pd.DataFrame) -> list[str]:
    def cell(v: object) -> str:
        if v is None or v is pd.NA or (isinstance(v, float) and np.isnan(v)):
            return ""
        if isinstance(v, bool | np.bool_):
            return "yes" if v else "no"
        return str(v)

    return common_table(frame, cell)


def _of(rows: list[dict], test: Any) -> tuple[int, int]:
    return sum(1 for r in rows if test(r)), len(rows)


def by_start_day(table: pd.DataFrame) -> list[str]:
    """False incidents before the change (every incident on controls and null streams) per
    start day of the data (``--start-days``; nothing without it)."""
    names = table["scenario"].astype(str)
    if not names.str.contains("@").any():
        return []
    out = ["", "## False incidents by start day", ""]
    for day, part in table.groupby(names.str.rsplit("@", n=1).str[-1], sort=False):
        hit = part[part["false_incidents"].fillna(0) > 0]
        detail = ", ".join(f"{r.scenario.split('@')[0]} {r.false_incidents}"
                           for r in hit.itertuples()) or "none"
        out.append(f"- {day}: {int(part['false_incidents'].fillna(0).sum())} in "
                   f"{len(part)} replays ({detail})")
    return out


def summary(table: pd.DataFrame) -> list[str]:
    """One line per target of issue 18 that this bench measures."""
    rows = table.to_dict("records")
    leaks = [r for r in rows if r["kind"] == "leak"]
    shapes = [r for r in rows if r["kind"] == "shape"]
    controls = [r for r in rows if r["kind"] == "control"]
    nulls = [r for r in rows if r["kind"] == "null"]

    def within(r: dict) -> bool:
        return bool(r["named"]) and r["delay_h"] is not None and r["delay_h"] <= NAMED_WITHIN_H

    def names(rs: list[dict]) -> str:
        return ", ".join(r["scenario"] for r in rs)

    out = []
    if leaks:
        k, n = _of(leaks, within)
        delays = ", ".join(f"{r['scenario']} {r['delay_h'] if r['named'] else '-'}"
                           for r in leaks)
        out.append(f"- {names(leaks)} named within {NAMED_WITHIN_H:g} h: {k} of {n} "
                   f"(delays h: {delays}; floor 3 of 4, aim 4 of 4 within 6 h)")
        k6, _ = _of(leaks, lambda r: within(r) and r["delay_h"] <= 6)
        out.append(f"- {names(leaks)} named within 6 h: {k6} of {n}")

        def within_near(r: dict) -> bool:
            return bool(r["named_near"]) and r["delay_near_h"] <= NAMED_WITHIN_H

        k, n = _of(leaks, within_near)
        delays = ", ".join(f"{r['scenario']} {r['delay_near_h'] if r['named_near'] else '-'}"
                           for r in leaks)
        out.append(f"- {names(leaks)} named within {NAMED_WITHIN_H:g} h, a sensor among the 3 "
                   f"largest by leak effect or the 3 nearest the leak counting: {k} of {n} "
                   f"(delays h: {delays})")
        leak_false = sum(int(r["false_incidents"]) for r in leaks)
        days = sum(float(r["leak_free_calibrated_days"]) for r in leaks)
        out.append(f"- false incidents over leak-free histories ({names(leaks)}): {leak_false} "
                   f"in {days:.1f} calibrated leak-free days (target 0)")
        # detected: an incident opened after the onset, whatever it names
        detected = [r for r in leaks if r["first_incident"]]
        k, n = _of(detected, lambda r: bool(r["open_to_end"]))
        out.append(f"- leak incidents open to the end of the data: {k} of {n} detected "
                   f"({len(leaks)} leaks; detected: an incident opened after the onset)")
        k, n = _of(detected, lambda r: r["onset_error_h"] is not None
                   and abs(r["onset_error_h"]) <= ONSET_TOLERANCE_H)
        errs = ", ".join(f"{r['scenario']} {r['onset_error_h']:+g}" for r in detected
                         if r["onset_error_h"] is not None)
        out.append(f"- onset within ±{ONSET_TOLERANCE_H:g} h on detected leaks: {k} of {n} "
                   f"(errors h: {errs or '-'})")
        k, _ = _of(detected, lambda r: bool(r["onset_in_interval"]))
        out.append(f"- true onset inside [onset_low, onset_high] on detected leaks: {k} of {n}")
    if shapes:
        k, n = _of(shapes, lambda r: within(r) and bool(r["open_to_end"]))
        out.append(f"- shape changes named within {NAMED_WITHIN_H:g} h and open to the end: "
                   f"{k} of {n}")
        shape_false = sum(int(r["false_incidents"]) for r in shapes)
        out.append(f"- false incidents before the change on shape-dev: {shape_false}")
        k, n = _of(shapes, lambda r: r["onset_error_h"] is not None
                   and abs(r["onset_error_h"]) <= ONSET_TOLERANCE_H)
        out.append(f"- shape changes, onset within ±{ONSET_TOLERANCE_H:g} h: {k} of {n}")
    changes = [r for r in leaks + shapes if r["first_incident"]]
    if changes:
        k, n = _of(changes, lambda r: bool(r["first_named_changed"]))
        odd = ", ".join(f"{r['scenario']} {r['first_named']}" for r in changes
                        if not r["first_named_changed"])
        out.append(f"- first incident after a change names a changed sensor first: {k} of {n}"
                   + (f" (not: {odd})" if odd else ""))
    for r in controls:
        out.append(f"- {r['scenario']} incidents: {r['false_incidents']} (target 0)")
    if nulls:
        false = sum(int(r["false_incidents"]) for r in nulls)
        days = sum(float(r["leak_free_calibrated_days"]) for r in nulls)
        rate = f"{false / days * 28:.2f}" if days else "-"
        out.append(f"- null streams: {false} false incidents in {days:.1f} calibrated days "
                   f"({rate} per 28 days; target at most 1)")
    if rows:
        worst_mean = max(float(r["s_per_inspection_mean"]) for r in rows)
        worst_p95 = max(float(r["s_per_inspection_p95"]) for r in rows)
        out.append(f"- seconds per inspection, worst scenario: mean {worst_mean:.3f}, "
                   f"p95 {worst_p95:.3f} (target at most 2 s for 33 sensors)")
    return out


def plot(timelines: dict[str, tuple[list, pd.Timestamp | None]], path: Path) -> None:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 1.9 * len(timelines)), layout="constrained")
    axes = fig.subplots(len(timelines), 1, squeeze=False)[:, 0]
    for ax, (name, (results, onset)) in zip(axes, timelines.items(), strict=True):
        t = [known(r) for r in results]
        p = [(r.get("detection") or {}).get("p_value") for r in results]
        y = [-np.log10(max(v, 1e-8)) if v is not None else np.nan for v in p]
        ax.plot(t, y, lw=0.8, color="#0072B2", label="-log10 p (calibrated)")
        level = next(((r.get("detection") or {}).get("level") for r in results
                      if (r.get("detection") or {}).get("level")), None)
        if level:
            ax.axhline(-np.log10(level), color="#D55E00", ls="--", lw=0.8,
                       label="alert level")
        opened: dict[str, pd.Timestamp] = {}
        for r, tr in zip(results, t, strict=True):
            inc = r.get("incident") or {}
            if inc.get("event") == "opened":
                opened[inc["id"]] = tr
            elif inc.get("event") == "resolved" and inc.get("id") in opened:
                ax.axvspan(opened.pop(inc["id"]), tr, color="#E69F00", alpha=0.2, lw=0)
        for start in opened.values():
            ax.axvspan(start, t[-1], color="#E69F00", alpha=0.2, lw=0)
        ev = [(tr, r["incident"]["event"]) for r, tr in zip(results, t, strict=True)
              if _event(r)]
        for kind, marker in (("opened", "^"), ("updated", "o"), ("resolved", "v")):
            xs = [tr for tr, e in ev if e == kind]
            if xs:
                ax.plot(xs, [0.0] * len(xs), marker, ms=4, color="#009E73", ls="",
                        label=f"incident {kind}")
        if onset is not None:
            ax.axvline(onset, color="black", lw=0.8, label="onset (true)")
        ax.set_title(name + " (shaded: incident open)", fontsize=9, loc="left")
        ax.set_ylabel("-log10 p", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.legend(fontsize=6, loc="upper left", ncols=3)
    axes[-1].set_xlabel("time the result exists (inspection time + after window)", fontsize=7)
    fig.savefig(path, dpi=100)


LEGEND = ("Hourly replays on the agent's grid over each scenario's whole history "
          "(`mmdwatch backfill`); times are counted when a result exists (inspection time "
          "+ 16 h). `delay_h`: onset to the first incident event naming a changed sensor "
          "among its first 3 (`delay_ranked_h`: in a firing result's ranked top 3, the older "
          "measure); `delay_near_h` (leaks): the same, a sensor among the 3 `nearest` the "
          "leak by network distance counting as well; `open`: the first incident opened "
          "after the onset; "
          "`false_incidents`: opened before the onset (every incident on dev-none and the "
          "null streams); `false_per_30d` over the calibrated leak-free days (blank: none).")
INT_COLUMNS = ["inspections", "calibrating", "errors", "incomplete", "firing",
               "false_incidents", "incidents_after_onset", "updated_events"]
MD_COLUMNS = ["scenario", "changed", "delay_h", "named", "top3_at_detection", "delay_ranked_h",
              "nearest", "delay_near_h", "first_named", "open", "onset_error_h",
              "onset_in_interval", "false_incidents", "false_per_30d",
              "leak_free_calibrated_days", "updated_events", "s_per_inspection_mean",
              "s_per_inspection_p95"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenarios", nargs="*", default=["d1", "d2", "d3", "d4"],
                    help="ltown-delay-dev scenarios (default d1-d4)")
    ap.add_argument("--data", type=Path, default=SHARED, help="folder of ltown-delay-dev")
    ap.add_argument("--shape", nargs="*", default=list(SHAPE_SETS),
                    help="shape-dev scenarios (default all five)")
    ap.add_argument("--shape-data", type=Path, default=SHAPE, help="folder of shape-dev")
    ap.add_argument("--null-weeks", type=int, default=4)
    ap.add_argument("--null-seeds", type=int, default=1)
    ap.add_argument("--workers", type=int, default=2, help="backfills at once")
    ap.add_argument("--start-days", nargs="*", choices=sorted(WEEKDAYS), default=[],
                    help="also replay each scenario with its data cut to start on these "
                         "weekdays (e.g. mon wed sat): the first weekend after calibration "
                         "then falls elsewhere; false incidents are reported per start day")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--keep", type=Path, help="keep the replayed data and results here")
    ap.add_argument("--extra", nargs=argparse.REMAINDER, default=[],
                    help="more backfill flags, e.g. --extra --profile live")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    args.out.mkdir(parents=True, exist_ok=True)
    scenarios = [leak_scenario(args.data / n) for n in args.scenarios
                 if (args.data / n / "ground_truth.json").exists()]
    scenarios += [shape_scenario(args.shape_data / n) for n in args.shape
                  if (args.shape_data / n / "ground_truth.json").exists()]
    missing = [n for n in args.scenarios if not (args.data / n).exists()] + [
        n for n in args.shape if not (args.shape_data / n).exists()]
    if missing:
        log.warning("scenarios not found, skipped: %s", ", ".join(missing))
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(args.workers) as pool:
        work = Path(tmp) if args.keep is None else args.keep
        work.mkdir(parents=True, exist_ok=True)
        days: list[str | None] = list(args.start_days) or [None]
        jobs = [pool.submit(run_scenario, sc, work, args.extra, day)
                for sc in scenarios for day in days]
        jobs += [pool.submit(run_null, s, args.null_weeks, work, args.extra, day)
                 for s in range(args.null_seeds) for day in days]
        rows, timelines = [], {}
        for job in jobs:
            row, results, _ = job.result()
            rows.append(row)
            onset = utc(row["onset"]) if row["onset"] else None
            timelines[row["scenario"]] = (results, onset)
            log.info("%s: delay %s h, named %s, %s, onset error %s h, false %d",
                     row["scenario"], row["delay_h"], row["named"], row["open"] or "-",
                     row["onset_error_h"], row["false_incidents"])
    table = pd.DataFrame(rows)
    for col in INT_COLUMNS:  # counts stay counts where some rows have none
        table[col] = table[col].astype("Int64")
    table.to_csv(args.out / "leak_delay.csv", index=False)
    md = [f"# bench.leak_delay ({machine_load()})", "",
          "`python -m bench.leak_delay " + " ".join(argv if argv is not None
                                                     else sys.argv[1:]) + "`", "",
          LEGEND, "",
          *markdown_table(table[MD_COLUMNS]), "", "## Targets (issue 18)", "",
          *summary(table), *by_start_day(table)]
    false_rows = [r for r in rows if r["false_detail"]]
    if false_rows:
        md += ["", "## False incidents", ""]
        md += [f"- {r['scenario']}: {r['false_detail']}" for r in false_rows]
    (args.out / "leak_delay.md").write_text("\n".join(md) + "\n")
    plot(timelines, args.out / "timeline.png")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
