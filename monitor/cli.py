"""``mmdwatch``: the command line (docs/cli.md).

argparse and the standard library only at import time, so ``--help`` answers at once;
pandas, torch and the connectors load inside the command that needs them. Logs go to
stderr; stdout carries only results. Exit codes: 0 done (whatever the status), 2 bad input
or config, 3 ``--publish``: some results not confirmed by the sinks in time (they stay in
the outbox).
"""
from __future__ import annotations

import argparse
import functools
import gc
import json
import logging
import os
import sys
from collections.abc import Callable, MutableMapping
from pathlib import Path
from typing import Any

from monitor.names import METHODS, NORMALISE

log = logging.getLogger("mmdwatch")

EXIT_OK = 0
EXIT_BAD_INPUT = 2
EXIT_UNDELIVERED = 3


class BadInput(Exception):
    """Bad command-line input; the message says what to change."""


# ------------------------------------------------------------------------------------------
# argument parsing
# ------------------------------------------------------------------------------------------
def _add_inspection_options(p: argparse.ArgumentParser) -> None:
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--data", type=Path, metavar="PATH",
                     help="CSV (.gz) or Parquet file, long or wide")
    src.add_argument("--config", type=Path, metavar="FILE", help="agent config (YAML)")
    p.add_argument("--profile", choices=("live", "retrospective"),
                   help="live (default): 7d before, 16h after, calibrated on the data's own "
                   "history; retrospective: the paper's 7d/7d 'what changed around t'")
    p.add_argument("--false-incident-interval", metavar="DUR",
                   help="live profile: target mean time between false incidents "
                   "(default 30d with hourly windows; derived from the windows and the "
                   "cadence otherwise, docs/config.md)")
    p.add_argument("--min-history", metavar="DUR",
                   help="live profile: calibration history needed before the first alert "
                   "(default 4d with hourly windows; derived otherwise)")
    p.add_argument("--engine-weight", type=float, metavar="W",
                   help="live profile: the engine part's share of the alert level "
                   "(default 0.1 with a daily profile, else 0.35; 0: the level statistic alone, "
                   "no engine fit)")
    p.add_argument("--before", metavar="DUR", help="before window length (default 7d)")
    p.add_argument("--after", metavar="DUR",
                   help="after window length (default 16h; 7d in the retrospective profile)")
    p.add_argument("--resample", metavar="DUR",
                   help="bin width of the windows (default 1h), e.g. 2s for one-second data; "
                   "the decision's durations are derived from it and the windows "
                   "(docs/config.md)")
    p.add_argument("--method", choices=METHODS, help="selector (default cv-aggregation)")
    p.add_argument("--seed", type=int, help="random seed (default 0)")
    p.add_argument("--alpha", type=float, help="significance level (default 0.05)")
    p.add_argument("--normalise", choices=NORMALISE,
                   help="window normalisation (default before)")
    p.add_argument("--block-size", metavar="DUR",
                   help='rows moved together in splits/permutations, e.g. 1d, or "none" '
                   "(default: derived from the windows, docs/config.md)")
    p.add_argument("--device", help="auto, cpu or cuda (default auto)")
    p.add_argument("--site", help="site id in the result (default: the data file's name)")
    p.add_argument("--time-col", help="name of the time column (--data)")
    p.add_argument("--delimiter", help="the CSV's field separator (--data; default: sniffed "
                   "from the first rows among , ; tab |)")
    p.add_argument("--time-format", metavar="FMT",
                   help="strftime format of the data's times (--data; default: ISO 8601 or "
                   "epoch seconds), e.g. '%%d.%%m.%%Y %%H:%%M:%%S'")
    p.add_argument("--sensor-col", help="name of the sensor column (--data, long layout)")
    p.add_argument("--value-col", help="name of the value column (--data, long layout)")
    p.add_argument("--report", type=Path, metavar="DIR", help="also write a report here")
    p.add_argument("--sensors-file", type=Path, metavar="CSV",
                   help="sensor_id,x,y per sensor: draws the network map in the report")
    p.add_argument("--links-file", type=Path, metavar="CSV",
                   help="x1,y1,x2,y2 per pipe or road, drawn under the map's sensors")
    p.add_argument("--publish", action="store_true",
                   help="also send the results to the config's sinks, through the outbox in "
                   "its state_dir; a fingerprint already published is not sent again "
                   "(needs --config)")
    p.add_argument("--publish-timeout", default="60s", metavar="DUR",
                   help="how long to wait for the sinks before exiting with code 3, the "
                   "results left queued for the agent (default 60s)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mmdwatch",
        description="Watch sensor networks: did the behaviour change, and which sensors "
                    "carry the change (ARD-MMD variable selection).")
    parser.add_argument("--log-level", default=None,
                        choices=("DEBUG", "INFO", "WARNING", "ERROR"),
                        help="log level on stderr (default INFO; WARNING for inspect, backfill, "
                             "check-config and demo)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("demo", help="simulated network with an injected change, replayed "
                       "through the real agent; no server needed")
    p.add_argument("--state-dir", type=Path, default=Path("state/demo"),
                   help="where the demo keeps its store, outbox and results "
                        "(default state/demo; wiped first)")
    p.add_argument("--no-report", action="store_true", help="skip the HTML/PNG report")

    p = sub.add_parser("run", help="the agent, until SIGINT/SIGTERM")
    p.add_argument("--config", type=Path, required=True, metavar="FILE")

    p = sub.add_parser("inspect", help="one inspection; prints ONE result JSON on stdout")
    p.add_argument("--at", required=True, metavar="TIME", help="ISO 8601; naive = UTC")
    p.add_argument("--every", metavar="DUR",
                   help="the agent's inspection interval: its past times this far apart, "
                   "aligned on --at, calibrate the one at --at (--data; default: the "
                   "profile's schedule, 1h for live), e.g. 5s on one-second data")
    _add_inspection_options(p)

    p = sub.add_parser("backfill", help="inspections over a range; JSON lines; progress on "
                       "stderr")
    p.add_argument("--start", required=True, metavar="T")
    p.add_argument("--end", required=True, metavar="T")
    p.add_argument("--every", metavar="DUR",
                   help="times --start, --start + DUR, ... instead of the site's schedule "
                   "(default: the schedule's times, e.g. on the hour for every: 1h)")
    p.add_argument("--out", type=Path, metavar="FILE", help="JSON lines here, not stdout")
    p.add_argument("--cluster", metavar="ADDRESS|local[:N]",
                   help="spread the inspections over workers: local[:N] (a process pool), "
                   "dask[:N] (a Dask LocalCluster), or a Dask scheduler address "
                   "(tcp://host:8786); same results, in time order")
    _add_inspection_options(p)

    p = sub.add_parser("check-config", help="validate a config; exit 2 if anything is wrong")
    p.add_argument("--config", type=Path, required=True, metavar="FILE")

    p = sub.add_parser("ack", help="accept an open incident's new state: the running agent "
                       "resolves it (reason accepted) at its next inspection")
    p.add_argument("incident", metavar="INCIDENT-ID",
                   help="the open incident's id (the result's incident.id)")
    p.add_argument("--config", type=Path, required=True, metavar="FILE",
                   help="the agent's config (its state_dir holds the incident)")
    p.add_argument("--by", metavar="NAME", help="who accepts it (default: the OS user)")
    p.add_argument("--note", default="", metavar="TEXT", help="why, for the record")
    return parser


def _setup_logging(level: str) -> None:
    logging.basicConfig(stream=sys.stderr, level=getattr(logging, level),
                        format="%(asctime)s %(levelname)-7s %(name)s: %(message)s")


# ------------------------------------------------------------------------------------------
# config for one-shot commands
# ------------------------------------------------------------------------------------------
def _one_shot_config(args: argparse.Namespace) -> Any:
    """A validated MonitorConfig from --config or --data, with command-line overrides."""
    from datetime import timedelta

    from connectors.timeutil import format_duration
    from monitor.config import load_config, validate_config

    config = None
    entry = None
    if args.config is not None:
        config = load_config(args.config)
        entry = _pick_site(config, args)
        view = config if entry is None else config.for_site(entry)
        raw = view.given_dump(exclude={"source", "sinks", "sites"})
        raw["source"] = config.source.model_dump(mode="json")  # secrets masked: see below
        raw["sinks"] = []
    else:
        source: dict[str, Any] = {"type": "file", "path": str(args.data)}
        for key in ("time_col", "sensor_col", "value_col", "delimiter", "time_format"):
            if getattr(args, key):
                source[key] = getattr(args, key)
        raw = {"site": _site_from_path(args.data), "source": source, "sinks": []}
    if args.profile is not None:
        raw["profile"] = args.profile
        if args.config is not None:  # the file's values came from its own profile: redo
            raw = {k: raw[k] for k in ("profile", "site", "source", "sinks", "state_dir",
                                       "sensors_file", "links_file") if k in raw}
    windows = raw.setdefault("windows", {})
    engine = raw.setdefault("engine", {})
    for key, target in (("before", windows), ("after", windows), ("resample", windows),
                        ("normalise", windows),
                        ("method", engine), ("seed", engine), ("alpha", engine),
                        ("device", engine)):
        if getattr(args, key) is not None:
            target[key] = getattr(args, key)
    for key in ("false_incident_interval", "min_history", "engine_weight"):
        if getattr(args, key) is not None:
            raw.setdefault("decision", {})[key] = getattr(args, key)
    if args.block_size is not None:
        engine["block_size"] = None if args.block_size.lower() in ("none", "null") \
            else args.block_size
    _finer_schedule(raw, args)
    if args.site:
        raw["site"] = args.site
    for key in ("sensors_file", "links_file"):
        if getattr(args, key) is not None:
            raw[key] = str(getattr(args, key))
    merged = validate_config(raw, origin=str(args.config or "command line"))
    if merged.derived_differ():
        # a cadence other than hourly: say what the durations became
        log.warning("%s: derived from the windows and the cadence: %s", merged.site,
                    merged.describe_derived())
    if (merged.decision.rule == "engine" and merged.decision.source_history
            and merged.windows.before + merged.windows.after < timedelta(days=2)):
        log.warning("%s: the retrospective decision's calibration reads the source's "
                    "earlier days, a day apart (decision.history %s); data of less than "
                    "days has none, and the block p-value decides alone", merged.site,
                    format_duration(merged.decision.history))
    if config is not None:  # the connectors as loaded, secrets intact
        merged = merged.model_copy(update={"source": config.source, "sinks": config.sinks})
    if entry is not None:  # which readings are the site's (compose.build_windows)
        merged = merged.model_copy(update={"sites": [entry]})
    return merged


def _finer_schedule(raw: dict[str, Any], args: argparse.Namespace) -> None:
    """``backfill --data --every DUR`` finer than the profile's schedule (a 5-second
    cadence on one-second data): the agent replayed is one inspecting every DUR (on
    ``--start``'s phase: :func:`_backfill_plan`), and the decision's durations derive from
    that cadence. A coarser ``--every`` keeps writing a subset of the schedule's times,
    and a ``--config`` keeps its agent's schedule. ``inspect --every DUR`` is the agent's
    interval, finer or coarser: the history's past times are that far apart."""
    from connectors.timeutil import parse_duration

    every = getattr(args, "every", None)
    if not every:
        return
    inspect = args.command == "inspect"
    if args.config is not None:
        if inspect:
            raise BadInput("--every with --config: the agent's interval is the config's "
                           "schedule; drop --every, or use --data")
        return
    if raw.get("schedule"):
        return
    try:
        step = parse_duration(every)
    except ValueError as exc:
        if inspect:
            raise BadInput(f"--every: {exc}") from None
        return  # cmd_backfill reports it
    if step.total_seconds() <= 0:
        if inspect:
            raise BadInput("--every must be positive, e.g. 5s")
        return  # cmd_backfill reports it
    if inspect or _finer_than_the_profile(str(raw.get("profile", "live")), step):
        raw["schedule"] = {"every": every}


def _finer_than_the_profile(profile: str, step: Any) -> bool:
    """Whether ``step`` is finer than the profile's own schedule interval (none: cron)."""
    from connectors.timeutil import parse_duration
    from monitor.config import PROFILES

    default = (PROFILES.get(profile, {}).get("schedule") or {}).get("every")
    return default is not None and step < parse_duration(default)


def _pick_site(config: Any, args: argparse.Namespace) -> Any:
    """The ``sites:`` entry a one-shot command inspects (``--site``; the only one when the
    config has one), None for a single-site config."""
    if not config.sites:
        return None
    ids = [site.id for site in config.sites]
    wanted = args.site or (ids[0] if len(ids) == 1 else None)
    if wanted is None:
        raise BadInput(f"{args.config} has {len(ids)} sites; pick one with --site "
                       f"({', '.join(ids)})")
    for site in config.sites:
        if site.id == wanted:
            return site
    raise BadInput(f"--site {wanted!r} is not in {args.config}; its sites: {', '.join(ids)}")


def _site_from_path(path: Path) -> str:
    import re

    name = path.name
    for suffix in (".gz", ".csv", ".parquet", ".pq"):
        name = name.removesuffix(suffix)
    return re.sub(r"[^A-Za-z0-9_.-]", "-", name) or "default"


def _window_reader(config: Any) -> tuple[Any, Any]:
    """``(read_window(start, end), close)`` for one-shot commands, over the window source
    that :func:`monitor.compose.build_windows` picks (the source, or the agent's store);
    ``read_window.first_time()``: that source's oldest reading (None: not known)."""
    from connectors.timeutil import format_duration
    from monitor.compose import build_windows, one_site

    windows = build_windows(config, one_shot=True, site=one_site(config)).windows
    try:
        windows.watermark()  # fail fast (exit 2) on a missing or unreadable source
    except BaseException:
        windows.close()
        raise
    resample = format_duration(config.windows.resample)
    aggregate = config.windows.aggregate

    def read(start: Any, end: Any) -> Any:
        import pandas as pd

        return windows.read_window(pd.Timestamp(start), pd.Timestamp(end), resample=resample,
                                   aggregate=aggregate)

    read.first_time = windows.first_time  # type: ignore[attr-defined]
    read.watermark = windows.watermark  # type: ignore[attr-defined]
    read.source = windows  # type: ignore[attr-defined]  # named in messages (its repr)
    return read, windows.close


def _against_the_data(read: Any, inspector: Any, start: Any, end: Any
                      ) -> tuple[str | None, list[str]]:
    """The inspections from ``start`` to ``end`` against ``read``'s source, whose oldest
    and newest reading are asked once: (where none of their windows holds a reading, what
    to say: the data's range and the fix, else None; the warnings for inspections whose
    windows lie wholly before the first or after the last reading, whose results will be
    errors). A source that holds no reading at all is named, with the fix. Where the
    source cannot tell its oldest reading (InfluxDB), only its newest is checked; where it
    cannot tell either, (None, []): each result says it.

    Why: a data file whose times carry an offset (``+03:00``) is read in UTC, as ``--at``
    or ``--start`` without an offset is; such a backfill wrote an ``error`` result at each
    of its 241 inspections, each saying no more than that its window held no reading. So
    did a backfill of an InfluxDB measurement that held nothing (a misspelt name)."""
    import pandas as pd

    from connectors.timeutil import to_utc

    try:
        first, last = read.first_time(), read.watermark()
    except Exception:  # the source cannot say: each result says it
        log.debug("the source's range is not known", exc_info=True)
        return None, []
    if last is None:
        source = getattr(read, "source", "the source")
        return (f"{source!r} holds no reading: check the source's keys in the config (an "
                "InfluxDB measurement, field and tags are matched exactly, case included), "
                "or load the data first"), []
    last, start, end = to_utc(last), to_utc(start), to_utc(end)
    first = None if first is None else to_utc(first)
    before, after = pd.Timedelta(inspector.spec.before), pd.Timedelta(inspector.spec.after)
    held = (f"the data's newest reading is at {last.isoformat()}" if first is None else
            f"the data holds readings from {first.isoformat()} to {last.isoformat()}")
    if start - before > last or (first is not None and end + after < first):
        return (f"{held}, and no window from {(start - before).isoformat()} to "
                f"{(end + after).isoformat()} holds one; set the times inside the data's "
                "range. A time without an offset is read as UTC, in the options as in the "
                "data: give the times the data's offset (such as 2020-03-09T16:16:30+03:00)"
                ), []
    if first is None:  # the newest reading alone (InfluxDB): the refusal, no warnings
        return None, []
    warnings = []
    if start + after < first:
        warnings.append(f"{held}; inspections before {(first - after).isoformat()} have no "
                        "reading in their windows and their results will be errors: start "
                        f"the backfill at {(first + before).isoformat()} or later for a full "
                        "before window")
    if end - before > last:
        warnings.append(f"{held}; inspections after {(last + before).isoformat()} have no "
                        "reading in their windows and their results will be errors: end "
                        f"the backfill by {(last - after).isoformat()} for a full after "
                        "window")
    return None, warnings


def _check_publish(args: argparse.Namespace, config: Any = None) -> None:
    """Bad ``--publish`` input fails before anything is read or computed."""
    if not args.publish:
        return
    if args.config is None:
        raise BadInput("--publish needs --config: the sinks and the state_dir of the outbox "
                       "come from it")
    if config is not None and not config.sinks:
        raise BadInput(f"--publish: {args.config} has no sinks; add one under 'sinks'")
    from connectors.timeutil import parse_duration

    try:
        ok = parse_duration(args.publish_timeout).total_seconds() >= 0
    except ValueError as exc:
        raise BadInput(f"--publish-timeout: {exc}") from None
    if not ok:
        raise BadInput("--publish-timeout must not be negative")


def _publisher(args: argparse.Namespace, config: Any) -> Any:
    """The started Publisher for ``--publish`` (None without it)."""
    if not args.publish:
        return None
    from monitor.compose import build_publisher

    try:
        return build_publisher(config)
    except ValueError as exc:  # e.g. two sinks with one name
        raise BadInput(str(exc)) from None


def _finish_publishing(publisher: Any, args: argparse.Namespace) -> int:
    if publisher is None:
        return EXIT_OK
    from connectors.timeutil import parse_duration

    problem = publisher.finish(parse_duration(args.publish_timeout).total_seconds())
    if problem is None:
        return EXIT_OK
    print(f"mmdwatch {args.command} --publish: {problem}", file=sys.stderr)
    return EXIT_UNDELIVERED


def _report_one(outcome: Any, report_dir: Path, config: Any) -> None:
    from monitor.compose import build_reporter

    try:
        folder = build_reporter(report_dir, config.sensors_file, config.links_file)(outcome)
        log.warning("report written to %s", folder)
    except Exception:  # the result is already out; a report failure is only logged
        log.exception("writing the report failed")


# ------------------------------------------------------------------------------------------
# commands
# ------------------------------------------------------------------------------------------
def _configs_and_engine_process(args: argparse.Namespace,
                                read_configs: Callable[[], list[Any]]
                                ) -> tuple[list[Any], Any]:
    """``read_configs()`` (a one-shot command's configs, one per site) and the command's
    :class:`~monitor.engine_process.EngineProcess`, or None where the engine part fits
    elsewhere (:func:`_fits_in_child`; several sites or ``--cluster``: where their jobs
    run).

    Why: torch's import is a third of a short backfill (d1's leak day, 192 inspections:
    see docs/engine.md, "The engine in a child process"), and only the fits need it; the
    child loads it while this process reads the source and builds the windows. With
    ``--data`` the command line alone says whether the engine part fits, so the child
    forks before the configs are read (their validation loads pandas, 0.3 s); it is
    closed where the config says otherwise."""
    here = getattr(args, "cluster", None) is None
    early = _start_engine_process() \
        if here and args.config is None and _fits_in_child(args) else None
    try:
        configs = read_configs()
    except BaseException:
        if early is not None:
            early.close()
        raise
    if here and len(configs) == 1 and _fits_in_child(args, configs[0]):
        return configs, early or _start_engine_process()
    if early is not None:
        early.close()
    return configs, None


def _fits_in_child(args: argparse.Namespace, config: Any = None) -> bool:
    """Whether the command's engine part fits in a child process: its own process (not
    ``main`` in a caller's), a platform that forks, and the calibrated rule with the
    engine part on; ``config`` None: as ``--data`` alone says it (the live profile, the
    default, unless ``--profile retrospective``; an engine weight above 0 unless
    ``--engine-weight`` gives 0)."""
    if not getattr(args, "own_process", False) or not _can_fork():
        return False
    if config is None:
        return args.profile != "retrospective" \
            and (args.engine_weight is None or args.engine_weight > 0)
    return config.decision.rule == "calibrated" and config.decision.engine_weight > 0


def _start_engine_process() -> Any:
    """A started :class:`~monitor.engine_process.EngineProcess`, or None (logged) where
    its child cannot start."""
    from monitor.engine_process import EngineProcess

    try:
        return EngineProcess(_settle_engine_child)
    except OSError as exc:  # no process or no semaphore to be had (a sandbox without /dev/shm)
        log.warning("the engine part fits in this process: its child process could not "
                    "start (%s)", exc)
        return None


def _one_blas_thread(environ: MutableMapping[str, str]) -> None:
    """One OpenBLAS thread for NumPy in a one-shot command's process (and its engine
    process, forked after), unless the environment names a number.

    Why: OpenBLAS's idle threads spin between calls. In a one-shot command this process's
    NumPy work (windows, level statistics: small matrices that gain nothing from threads)
    runs beside its engine process's fits, and the spinning took their cores: a backfill
    of 120 times at 300 sensors took 8.2-8.8 s (12.2-12.7 s of user time) against
    8.8-11.7 s (13.6-19.5 s), d1's 2.27-2.43 s against 2.44-2.62 s, the results equal
    (2-core VM, 2026-12-06). Set before NumPy loads, which reads it once."""
    environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def _can_fork() -> bool:
    """Whether this platform forks (not Windows): elsewhere the engine fits here."""
    import multiprocessing

    return "fork" in multiprocessing.get_all_start_methods()


def _settle_engine_child() -> None:
    """The engine's child process (:func:`_start_engine_process`) settles its heap as a
    one-shot process does: the allocator kept, the engine imported with the collector
    off (off since :func:`main`, inherited through the fork), then frozen. Its work
    arrives as :class:`~monitor.engine_process.Table` pairs: no pandas to load."""
    _keep_freed_memory()
    import engine.selectors  # noqa: F401  (the import whose objects are frozen)
    gc.freeze()
    gc.enable()


def _settle_heap(args: argparse.Namespace, inspectors: list[Any]) -> None:
    """In the ``mmdwatch`` process of a one-shot command (``args.own_process``): keep
    freed memory for reuse (:func:`_keep_freed_memory`), import the engine now where an
    inspector fits it here (not where its fits run in an
    :class:`~monitor.engine_process.EngineProcess`), then freeze the heap (``gc.freeze``).

    Why: torch's import leaves about 160,000 objects that never die, and each full
    cyclic collection during the run walks them all again (0.3 s of collections in a
    5-s backfill of d1, 2026-12-04); frozen objects are skipped. A caller's own process
    (``own_process`` False) is left as it is."""
    if not getattr(args, "own_process", False):
        return
    _keep_freed_memory()
    from monitor.decision.calibrated_rule import fits_here

    if any(not i.calibrated or (i.decision.engine_weight > 0 and i.engine_fits is fits_here)
           for i in inspectors):
        import engine.selectors  # noqa: F401  (the import whose objects are frozen)
    gc.freeze()
    gc.enable()  # off since main (:data:`ONE_SHOT_COMMANDS`): the imports are done


#: glibc's ``mallopt`` parameters (``malloc.h``)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
#: a one-shot command's allocator: blocks up to this size come from the heap, not each
#: from its own mapping (glibc's largest dynamic threshold, fixed from the start) ...
ONE_SHOT_MMAP_BYTES = 32 << 20
#: ... and freed memory up to this much stays in the process for the next batch
ONE_SHOT_TRIM_BYTES = 1 << 30


def _keep_freed_memory() -> bool:
    """Have glibc's allocator keep the memory a one-shot command frees for its next
    allocations (``mallopt``); False where the C library is not glibc (nothing changed).

    Why: a backfill allocates and frees the same batch buffers (pair differences, windows)
    again and again. By default glibc maps the large ones anew each time and returns
    freed heap to the system, so each batch's pages fault in again: d1's backfill spent
    0.55 s in the kernel and took 2.74 s; with these two settings 0.43 s and 2.59 s, its
    peak memory 6 % higher (six alternating runs each, 2-core VM, 2026-12-04; docs/
    engine.md). Only a one-shot command: the daemon gives memory back after a first
    start's history."""
    import ctypes

    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, ONE_SHOT_MMAP_BYTES)
                and mallopt(_M_TRIM_THRESHOLD, ONE_SHOT_TRIM_BYTES))


def cmd_inspect(args: argparse.Namespace) -> int:
    from connectors.timeutil import parse_time

    try:
        at = parse_time(args.at)
    except ValueError as exc:
        raise BadInput(f"--at: {exc}") from None
    _check_publish(args)

    def read_config() -> list[Any]:
        config = _one_shot_config(args)
        _check_publish(args, config)
        return [config]

    (config,), engine_fits = _configs_and_engine_process(args, read_config)
    from monitor.compose import build_inspector

    inspector = build_inspector(config, engine_fits)
    _settle_heap(args, [inspector])
    publisher = close = None
    try:
        read, close = _window_reader(config)
        outside, _ = _against_the_data(read, inspector, at, at)
        if outside is not None:  # the result says no more than that its windows are empty
            log.warning("inspect: %s", outside)
        publisher = _publisher(args, config)
        history = prepared = None
        if inspector.calibrated:
            # the inspection's own engine fit first: it runs (in the engine's process)
            # while the history's windows are built
            pending = inspector.begin_fit_engine_many([at], read)
            tracker = _tracker(config, inspector, read, at)
            history = tracker.history_at(at)
            prepared = pending().get(at)
        outcome = inspector.run(at, read, history, prepared=prepared)
        sys.stdout.write(json.dumps(outcome.result, allow_nan=False) + "\n")
        sys.stdout.flush()
        if publisher is not None:
            publisher.publish(at.timestamp(), outcome.result)
    except BaseException:
        if publisher is not None:
            publisher.close()  # what was queued stays in the outbox
        raise
    finally:
        if engine_fits is not None:
            engine_fits.close()
        if close is not None:
            close()
    if args.report is not None:
        _report_one(outcome, args.report, config)
    return _finish_publishing(publisher, args)


def _tracker(config: Any, inspector: Any, read: Any, first: Any) -> Any:
    """A SiteTracker whose history is backfilled from the source up to ``first``."""
    from monitor.compose import build_incidents
    from monitor.decision.tracker import SiteTracker, history_times

    tracker = SiteTracker(inspector, build_incidents(config))
    times = history_times(inspector, first)
    tracker.backfill(times, read)
    return tracker


class WrittenResults:
    """What a backfill wrote: how many results of each status, and the results themselves
    only where ``--report`` needs them: each is written as it comes (``--out`` or
    stdout), and all of them kept grow with the times and the sensors (a year of hourly
    results at 33 sensors raised the peak by about 280 MiB: docs/engine.md)."""

    def __init__(self, *, keep: bool) -> None:
        self.keep = keep
        self.counts: dict[str, int] = {}
        self.results: list[dict[str, Any]] = []
        #: judged results (ok, firing, calibrating) per site, and per (site, sensor) how
        #: many of them left it out and the reason the first one gave
        self.judged: dict[str, int] = {}
        self.dropped: dict[tuple[str, str], tuple[int, str]] = {}

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def add(self, result: dict[str, Any]) -> None:
        status = str(result.get("status"))
        self.counts[status] = self.counts.get(status, 0) + 1
        if status in ("ok", "firing", "calibrating"):
            site = str(result.get("site"))
            self.judged[site] = self.judged.get(site, 0) + 1
            quality = result.get("data_quality") or {}
            reasons = quality.get("dropped_reasons") or {}
            for sensor in quality.get("dropped_sensors") or ():
                key = (site, str(sensor))
                n, why = self.dropped.get(key, (0, str(reasons.get(sensor, ""))))
                self.dropped[key] = (n + 1, why)
        if self.keep:
            self.results.append(result)

    def report_dropped(self) -> None:
        """Log the sensors that most judged results left out, with a reason: a result's
        summary counts only the sensors it used ("across 6 sensors"), so a sensor of a
        slower cadence than the bins was left out of every result unseen."""
        several = len(self.judged) > 1
        for (site, sensor), (n, why) in sorted(self.dropped.items()):
            if 2 * n > self.judged[site]:
                log.warning("backfill: sensor %s%s was left out of %d of %d judged results: "
                            "%s", sensor, f" of site {site}" if several else "", n,
                            self.judged[site], why or "see data_quality.dropped_reasons")


def cmd_backfill(args: argparse.Namespace) -> int:
    from connectors.timeutil import parse_duration, parse_time

    try:
        start, end = parse_time(args.start), parse_time(args.end)
        every = None if args.every is None else parse_duration(args.every)
    except ValueError as exc:
        raise BadInput(str(exc)) from None
    if end < start or (every is not None and every.total_seconds() <= 0):
        raise BadInput("--end must not be before --start, and --every must be positive")
    _check_publish(args)
    cluster = _cluster_config(args.cluster) if args.cluster else None

    def read_configs() -> list[Any]:
        configs = [_one_shot_config(a) for a in _backfill_site_args(args)]  # one per site
        _check_publish(args, configs[0])
        return configs

    configs, engine_fits = _configs_and_engine_process(args, read_configs)
    config = configs[0]
    from monitor.compose import build_inspector

    inspectors = [build_inspector(c, engine_fits) for c in configs]
    _settle_heap(args, inspectors)
    readers: list[tuple[Any, Any]] = []  # (read_window, close) per site
    publisher = None
    executor: Any = None
    written = WrittenResults(keep=args.report is not None)
    out = sys.stdout
    try:
        for c, inspector in zip(configs, inspectors, strict=True):
            readers.append(_window_reader(c))
            outside, warnings = _against_the_data(readers[-1][0], inspector, start, end)
            if outside is not None:
                raise BadInput(outside)
            for warning in warnings:
                log.warning("backfill: %s", warning)
        if cluster is not None:
            from monitor.fleet.executors import ExecutorUnavailable, build_executor

            try:
                executor = build_executor(cluster)
                wait_for_workers = getattr(executor, "wait_for_workers", None)
                if wait_for_workers is not None:
                    # a scheduler without workers would take the jobs and never answer
                    wait = max(15.0, 3 * cluster.connect_timeout.total_seconds())
                    wait_for_workers(1, timeout=wait)
            except ExecutorUnavailable as exc:
                raise BadInput(f"--cluster: {exc}") from None
        elif len(configs) > 1:  # several sites, here: one after the other, in time order
            from monitor.fleet.executors import InlineExecutor

            executor = InlineExecutor()
        publisher = _publisher(args, config)
        plans = [_backfill_plan(c, i, r[0], start, end, every, args.config is not None)
                 for c, i, r in zip(configs, inspectors, readers, strict=True)]
        out = args.out.open("w", encoding="utf-8") if args.out else sys.stdout
        if executor is not None:
            sites = [_site_backfill(c, i, r[0], p)
                     for c, i, r, p in zip(configs, inspectors, readers, plans, strict=True)]
            if cluster is not None and cluster.type == "local":
                # a pool that lost a process is replaced and the backfill goes on, from the
                # calibration history to the last inspection
                from monitor.fleet.executors import RenewableExecutor, build_executor

                executor = RenewableExecutor(executor, functools.partial(build_executor,
                                                                         cluster))
            _backfill_on(executor, sites, out, publisher, written)
        else:
            _backfill_inline(config, inspectors[0], readers[0][0], plans[0], out, publisher,
                             written)
    except BaseException:
        if publisher is not None:
            publisher.close()  # what was queued stays in the outbox
        raise
    finally:
        if args.out and out is not sys.stdout:
            out.close()
        if executor is not None:
            executor.close()
        if engine_fits is not None:
            engine_fits.close()
        for _, close in readers:
            close()
    written.report_dropped()
    log.warning("backfill: %d inspections (%s)", written.total,
                ", ".join(f"{k} {written.counts.get(k, 0)}"
                          for k in ("firing", "ok", "calibrating", "error", "incomplete")))
    if args.report is not None:
        try:
            from monitor.report import write_backfill_report

            log.warning("report written to %s",
                        write_backfill_report(written.results, args.report))
        except Exception:
            log.exception("writing the backfill report failed")
    return _finish_publishing(publisher, args)


def _backfill_plan(config: Any, inspector: Any, read: Any, start: Any, end: Any,
                   every: Any, from_config: bool) -> Any:
    """The site's :class:`~monitor.fleet.backfill.BackfillPlan`: the times written (the
    schedule's between --start and --end, or --every's), and under the calibrated rule the
    agent's schedule replayed from its first inspection time (:func:`_agent_anchor`)."""
    from datetime import UTC, datetime

    from monitor.fleet.backfill import plan_backfill
    from monitor.schedule import InspectionPlan

    grid = InspectionPlan.from_config(config.schedule) if every is None \
        else InspectionPlan(every=every, start=start)
    outputs = grid.between(start, end)
    if not inspector.calibrated:
        return plan_backfill(outputs, None, None)
    anchor = _agent_anchor(config, inspector, read, from_config)
    schedule = InspectionPlan.from_config(config.schedule)
    if (not from_config and every is not None and config.schedule.every == every
            and config.schedule.start is None
            and _finer_than_the_profile(config.profile, every)):
        # the schedule --every set (_finer_schedule): on --start's phase, so that the
        # agent's times are the ones written (from the source's start, as before). On the
        # epoch's grid, from a --start off it (SKAB's :31), every written time was a probe
        # between the agent's, and an incident's events, raised at those, were never written.
        epoch = datetime(1970, 1, 1, tzinfo=UTC)
        schedule = InspectionPlan(every=every, start=epoch + (start - epoch) % every,
                                  timezone=config.schedule.timezone)
    plan = plan_backfill(outputs, schedule, anchor)
    if plan.times:
        log.info("backfill of %s: the agent's decisions replayed from %s (%d time(s) before "
                 "or between the ones written)", inspector.site, plan.times[0].isoformat(),
                 plan.silent)
    return plan


def _agent_anchor(config: Any, inspector: Any, read: Any, from_config: bool) -> Any:
    """The running agent's first inspection time (``SiteRunner.anchor``): the one its
    ledger keeps (``--config``, ``state_dir/state.sqlite``, read only), else the config's
    ``schedule.start``, else the source's first reading + the before window (the agent of
    a stream starts there); None when the source cannot say (a database: the backfill's
    agent then starts at --start)."""
    from datetime import UTC

    import pandas as pd

    if from_config:
        saved = _ledger_anchor(config)
        if saved is not None:
            return saved
    if config.schedule.start is not None:
        return config.schedule.start
    first = read.first_time()
    if first is None:
        return None
    first = pd.Timestamp(first)
    if first.tzinfo is None:
        first = first.tz_localize("UTC")
    return first.to_pydatetime().astimezone(UTC) + inspector.spec.before


def _ledger_anchor(config: Any) -> Any:
    """The anchor a running agent keeps in its ledger (meta ``anchor``, ``anchor:<site>``),
    read without writing; None when there is no ledger or no anchor yet."""
    import sqlite3
    from datetime import UTC, datetime

    path = Path(config.state_dir) / "state.sqlite"
    if not path.exists():
        return None
    key = f"anchor:{config.sites[0].id}" if config.sites else "anchor"
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        try:
            row = conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        finally:
            conn.close()
    except sqlite3.Error as exc:
        log.warning("backfill: the agent's ledger %s could not be read (%s); its first "
                    "inspection time is taken from the data", path, exc)
        return None
    return None if row is None else datetime.fromtimestamp(float(row[0]), UTC)


def _backfill_inline(config: Any, inspector: Any, read: Any, plan: Any, out: Any,
                     publisher: Any, written: WrittenResults) -> None:
    """The backfill in this process, written in time order.

    Calibrated rule, in two passes per :data:`~monitor.inspection.PREFIT_TIMES` times:
    first the windows, level statistics and engine-part fits of all of them (one read, one
    batched ``fit_many``: none of it depends on a decision), then the decisions one
    inspection after the other (each p-value needs the history before it), the agent's
    silent times observed and not written (``plan``: a
    :class:`~monitor.fleet.backfill.BackfillPlan`). Engine rule:
    ``monitor.fleet.backfill.MAX_BATCH`` times at a time through ``Inspector.run_many``."""
    from monitor.fleet.backfill import MAX_BATCH, observe
    from monitor.inspection import PREFIT_TIMES
    from monitor.progress import progress_bar

    times = plan.times
    # the calibrated rule: the history and the incidents move on with each result
    tracker = _tracker(config, inspector, read, times[0]) \
        if inspector.calibrated and times else None

    def first_pass(chunk: list[Any]) -> Any:
        """The chunk's windows and detections now, its engine fits started, none with the
        fit's own p-value, which only a written firing result reports: the times observed
        and not written keep the statistic alone, the written ones the sensors' scores
        too (their firing results are fitted in full once decided). Returns the function
        that gives them."""
        silent = inspector.begin_fit_engine_many([t for t in chunk if t not in plan.emit],
                                                 read, scope="history")
        shown = inspector.begin_fit_engine_many([t for t in chunk if t in plan.emit], read,
                                                scope="decision")
        return lambda: {**silent(), **shown()}

    with progress_bar(total=len(plan.emit), desc="backfill", unit="insp") as bar:
        step = PREFIT_TIMES if tracker is not None else MAX_BATCH
        chunks = [times[start:start + step] for start in range(0, len(times), step)]
        pending: Any = first_pass(chunks[0]) if tracker is not None and chunks else None
        for k, chunk in enumerate(chunks):
            if tracker is None:
                outcomes = inspector.run_many(chunk, read)
            else:
                # the next chunk's first pass before this one's decisions: where the
                # engine fits in a child process, this process builds the next windows
                # while the child fits this chunk, and decides it while the child fits
                # the next one
                following = first_pass(chunks[k + 1]) if k + 1 < len(chunks) else None
                prepared, pending = pending(), following
                outcomes = []
                written_first: list[tuple[dict[str, Any], Any]] = []
                for t in chunk:  # the second: decisions, history and incidents in order
                    first = prepared.pop(t, None)
                    outcome = inspector.run(t, read, tracker.history_at(t), prepared=first)
                    observe(tracker, outcome.result, read, t in plan.probes,
                            outcome.windows)
                    outcomes.append(outcome)
                    if first is not None and t in plan.emit:
                        written_first.append((outcome.result, first))
                # the written firing results' engine blocks, with the fits' own p-values
                inspector.complete_engine_blocks(written_first)
            for t, outcome in zip(chunk, outcomes, strict=True):
                if t not in plan.emit:
                    continue
                result = outcome.result
                out.write(json.dumps(result, allow_nan=False) + "\n")
                out.flush()
                if publisher is not None:
                    publisher.publish(t.timestamp(), result)
                bar.update(1)
                bar.set_postfix_str(f"{result['inspection_time']} {result['status']}")
                written.add(result)


def _cluster_config(value: str) -> Any:
    """``--cluster`` as a validated ExecutorConfig (BadInput naming the accepted forms)."""
    from monitor.config import ConfigError, validate_executor
    from monitor.fleet.executors import parse_cluster

    try:
        return validate_executor(parse_cluster(value), origin="--cluster")
    except ValueError as exc:
        raise BadInput(str(exc)) from None
    except ConfigError as exc:
        raise BadInput("--cluster: " + "; ".join(exc.problems)) from None


def _backfill_site_args(args: argparse.Namespace) -> list[argparse.Namespace]:
    """One set of arguments per site a backfill covers: every site of a ``--config`` with
    several ``sites`` when ``--site`` names none, else just ``args``."""
    if args.config is None or args.site:
        return [args]
    from monitor.config import load_config

    sites = getattr(load_config(args.config), "sites", None) or []
    if len(sites) < 2:
        return [args]
    return [argparse.Namespace(**{**vars(args), "site": site.id}) for site in sites]


def _site_backfill(config: Any, inspector: Any, read: Any, plan: Any) -> Any:
    """A site's :class:`~monitor.fleet.backfill.SiteBackfill` (``config``: one site's one-shot
    config). A database the workers can query themselves (a source config that can be
    narrowed to a site, ``for_site``: InfluxDB) is read by the workers, narrowed to the
    site's points as the agent reads them (``compose.one_site``); anything else (a file,
    the agent's store) by this process, the frames travelling with the jobs."""
    from monitor.compose import build_incidents, one_site
    from monitor.decision.tracker import SiteTracker
    from monitor.fleet.backfill import SiteBackfill

    source = None
    narrow = getattr(config.source, "for_site", None)
    if narrow is not None:
        site = one_site(config)
        source = config.source if site is None else narrow(site.id, site.sensors)
    tracker = SiteTracker(inspector, build_incidents(config)) if inspector.calibrated else None
    return SiteBackfill(inspector, plan.times, read, source=source, tracker=tracker,
                        emit=plan.emit, probes=plan.probes)


def _backfill_on(executor: Any, sites: list[Any], out: Any, publisher: Any,
                 written: WrittenResults) -> None:
    """The backfill's inspections of every site on ``executor`` (``--cluster``, or several
    sites), written in time order; a ``RenewableExecutor`` replaces a local pool that
    breaks (``run_backfill``)."""
    from connectors.timeutil import parse_time
    from monitor.decision.tracker import history_times
    from monitor.fleet.backfill import backfill_history, run_backfill
    from monitor.progress import progress_bar

    for site in sites:
        if site.tracker is not None and site.times:
            backfill_history(site, history_times(site.inspector, site.times[0]), executor)
    with progress_bar(total=sum(s.n_emitted for s in sites), desc="backfill",
                      unit="insp") as bar:

        def emit(result: dict[str, Any]) -> None:
            out.write(json.dumps(result, allow_nan=False) + "\n")
            out.flush()
            if publisher is not None:
                publisher.publish(parse_time(result["inspection_time"]).timestamp(), result)
            bar.set_postfix_str(f"{result['site']} {result['inspection_time']} "
                                f"{result['status']}")
            bar.update(1)
            written.add(result)

        run_backfill(sites, executor, emit)


def cmd_check_config(args: argparse.Namespace) -> int:
    from monitor.config import ConfigError, load_config

    try:
        config = load_config(args.config)
    except ConfigError as exc:
        print(f"{args.config}: {len(exc.problems)} problem(s)")
        for problem in exc.problems:
            print(f"  - {problem}")
        return EXIT_BAD_INPUT
    sinks = ", ".join(s.type for s in config.sinks) or "none"
    sched = config.schedule
    when = f"cron {sched.cron!r}" if sched.cron else f"every {sched.model_dump()['every']}"
    sites = f"site {config.site}" if not config.sites else \
        f"{len(config.sites)} sites: {', '.join(site.id for site in config.sites)}"
    print(f"{args.config}: OK ({sites}, source {config.source.type}, sinks {sinks}, "
          f"{when} {sched.timezone}, clock {sched.clock})")
    for site in config.site_configs():
        if site.derived:
            where = "" if not config.sites else f" (site {site.site})"
            print(f"  derived from the windows and the cadence{where}: "
                  f"{site.describe_derived()}")
    return EXIT_OK


def _os_user() -> str:
    import getpass

    try:
        return getpass.getuser()
    except (OSError, KeyError):  # no login name, no passwd entry (some containers)
        import os

        return f"uid {os.getuid()}"


def cmd_ack(args: argparse.Namespace) -> int:
    """Store an operator's ack of an open incident in the agent's state database."""
    from monitor.storage.acks import AckRejected, NoAgentState, acknowledge

    by = (args.by or "").strip() or _os_user()
    try:
        reply = acknowledge(args.config, args.incident, by=by, note=args.note, via="cli")
    except NoAgentState as exc:
        raise BadInput(str(exc)) from None
    except AckRejected as exc:
        raise BadInput(f"{exc} (see the agent's results or MQTT alerts for incident ids)"
                       ) from None
    print(reply)
    return EXIT_OK


def cmd_run(args: argparse.Namespace) -> int:
    import signal
    import threading

    from monitor.compose import build_agent
    from monitor.config import load_config
    from monitor.service.metrics import Metrics

    config = load_config(args.config)
    if args.log_level is None:
        logging.getLogger().setLevel(config.log_level)
    stop = threading.Event()

    def on_signal(signum: int, _frame: Any) -> None:
        log.info("received %s; stopping", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    agent = build_agent(config, Metrics())
    agent.run_forever(stop)
    return EXIT_OK


def cmd_demo(args: argparse.Namespace) -> int:
    from monitor.demo import run_demo

    return run_demo(args.state_dir, report=not args.no_report)


#: the commands whose process does one job and exits: one OpenBLAS thread
#: (:func:`_one_blas_thread`), the heap settled once the libraries are loaded
#: (:func:`_settle_heap`)
ONE_SHOT_COMMANDS = ("inspect", "backfill")
COMMANDS = {"demo": cmd_demo, "run": cmd_run, "inspect": cmd_inspect,
            "backfill": cmd_backfill, "check-config": cmd_check_config, "ack": cmd_ack}


def main(argv: list[str] | None = None, *, own_process: bool = False) -> int:
    """Run one ``mmdwatch`` command; returns its exit status. ``own_process``: True where
    the command is the whole process (:func:`entry`), so that a one-shot command may
    settle the heap for itself (:func:`_settle_heap`); False where a caller's process
    goes on (tests, scripts)."""
    args = build_parser().parse_args(argv)
    args.own_process = own_process
    one_shot = own_process and args.command in ONE_SHOT_COMMANDS
    if one_shot:
        _one_blas_thread(os.environ)
    pause_collector = one_shot and gc.isenabled()
    if pause_collector:
        # No cyclic collection while the libraries load: torch's import allocates some
        # 160,000 objects that never die, and the collections it triggers walk them again
        # and again (imports 1.36 s against 1.53-1.69 s, 2-core VM, 2026-12-06).
        # _settle_heap freezes what the imports left and turns the collector back on.
        gc.disable()
    # the demo's story is on stdout; its ~180 hourly inspections would flood stderr at INFO
    default = ("WARNING" if args.command in ("inspect", "backfill", "check-config", "demo")
               else "INFO")
    _setup_logging(args.log_level or default)
    try:
        return COMMANDS[args.command](args)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        # the error classes load here, not before the command: connectors.base loads
        # pandas, which a one-shot command loads after forking its engine process
        from connectors.base import ConnectorError
        from monitor.config import ConfigError
        from monitor.storage.state import StateError
        from monitor.storage.store import StoreError

        if isinstance(exc, ConfigError):
            print(str(exc), file=sys.stderr)
            return EXIT_BAD_INPUT
        if isinstance(exc, BadInput | ConnectorError | StoreError | StateError):
            print(f"mmdwatch {args.command}: {exc}", file=sys.stderr)
            return EXIT_BAD_INPUT
        raise
    finally:
        if pause_collector:
            gc.enable()  # where the command ended before _settle_heap


def entry() -> None:
    """The ``mmdwatch`` process: the console script and ``python -m monitor.cli``."""
    code = main(own_process=True)
    # Interpreter shutdown runs a cyclic collection over every object left, torch's
    # import graph included: 0.5-0.7 s of a 5-s backfill on a 2-core VM (2026-12-04).
    # Frozen objects are skipped; the files are closed by then, and the atexit
    # handlers (logging's flush) still run.
    gc.freeze()
    sys.exit(code)


if __name__ == "__main__":
    entry()
