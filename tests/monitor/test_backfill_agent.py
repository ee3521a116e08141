"""A backfill replays the agent's decisions (docs/cli.md, backfill): its times lie on the
site's schedule, and the history and incidents at each time are the ones an agent that
inspected from its first inspection time had there, wherever ``--start`` is.

The end-to-end comparison with a real ``mmdwatch run`` is
tests/integration/test_backfill_equals_agent.py; here: the plan of times, a probe that
leaves the agent's state alone, and a backfill from the middle of a stream against one from
its first inspection time, inline and on an executor.
"""
from __future__ import annotations

import json
from collections import Counter
from concurrent.futures import Executor
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

import pytest

from monitor.cli import main
from monitor.demo.simulate import Scenario, simulate, write_csv
from monitor.fleet.backfill import plan_backfill
from monitor.schedule import InspectionPlan
from tests.integration.test_backfill_equals_agent import compare

HOUR = timedelta(hours=1)


def _t(day: int, hour: int, minute: int = 0) -> datetime:
    return datetime(2026, 1, day, hour, minute, tzinfo=UTC)


def test_plan_replays_the_schedule_from_the_anchor_silently():
    hourly = InspectionPlan(every=HOUR)
    outputs = hourly.between(_t(12, 0, 25), _t(12, 5))  # on the hour: 01:00 .. 05:00
    plan = plan_backfill(outputs, hourly, anchor=_t(11, 0))
    assert plan.times == hourly.between(_t(11, 0), _t(12, 5))
    assert plan.emit == frozenset(outputs) and len(outputs) == 5
    assert plan.silent == 24 + 1 and not plan.probes


def test_plan_every_2h_keeps_the_hours_between_and_probes_times_off_the_schedule():
    hourly = InspectionPlan(every=HOUR)
    two = InspectionPlan(every=2 * HOUR, start=_t(12, 0)).between(_t(12, 0), _t(12, 6))
    plan = plan_backfill(two, hourly, anchor=_t(12, 0))
    assert plan.times == hourly.between(_t(12, 0), _t(12, 6)) and not plan.probes
    assert sorted(plan.emit) == [_t(12, 0), _t(12, 2), _t(12, 4), _t(12, 6)]
    off = InspectionPlan(every=2 * HOUR, start=_t(12, 0, 30)).between(_t(12, 0, 30),
                                                                      _t(12, 4, 30))
    plan = plan_backfill(off, hourly, anchor=_t(12, 0))
    assert plan.probes == frozenset(off)  # 00:30, 02:30, 04:30: not the agent's times
    assert set(plan.times) == set(hourly.between(_t(12, 0), _t(12, 4, 30))) | set(off)


def test_plan_before_the_anchor_and_without_one_starts_at_start():
    hourly = InspectionPlan(every=HOUR)
    outputs = hourly.between(_t(12, 0), _t(12, 3))
    early = plan_backfill(outputs, hourly, anchor=_t(12, 2))  # asked before the agent began
    assert early.times == outputs and not early.probes
    assert plan_backfill(outputs, hourly, anchor=None).times == outputs
    engine = plan_backfill(outputs, None, anchor=_t(11, 0))  # engine rule: no replay
    assert engine.times == outputs and engine.silent == 0


def test_a_probe_leaves_the_agents_history_and_incident_alone():
    from monitor.compose import build_incidents, build_inspector
    from monitor.config import validate_config
    from monitor.decision.tracker import SiteTracker
    from monitor.fleet.backfill import observe

    config = validate_config({"site": "s", "source": {"type": "file", "path": "x.csv"}})
    tracker = SiteTracker(build_inspector(config), build_incidents(config))
    result = {"inspection_time": "2026-01-12T00:30:00Z", "status": "ok",
              "detection": {"value": 1.5, "p_value": 0.5, "level": 0.001}}
    observe(tracker, dict(result), lambda a, b: None, probe=True)
    assert tracker.history == {} and tracker.incident is None
    observe(tracker, dict(result), lambda a, b: None)
    assert list(tracker.history.values()) == [(1.5, None)]  # no engine part in the result


def _backfill(path, out, *args: str) -> list[dict]:
    # the agent's replay is under test, with the level part alone (no engine fit per
    # hour); tests/integration/test_backfill_equals_agent.py keeps the engine part
    assert main(["backfill", "--data", str(path), "--out", str(out), "--engine-weight", "0",
                 *args]) == 0
    return [json.loads(line) for line in out.read_text().splitlines()]


@pytest.mark.slow
def test_a_backfill_from_the_middle_equals_one_from_the_first_inspection(tmp_path):
    """The stream starts 01-05, so its agent inspects hourly from 01-12 00:00 (first
    reading + 7 d), calibrates from 01-16 15:00 (4 days of history whose after windows
    ended), and fires on the change of 01-17 06:00."""
    frame, _ = simulate(Scenario(n_sensors=6, days=14, step="30min",
                                 change_at="2026-01-17T06:00:00Z", changes={"s04": -1.5}))
    path = tmp_path / "net.csv"
    write_csv(frame, path)
    end = "2026-01-18T07:00:00Z"
    whole = _backfill(path, tmp_path / "whole.jsonl", "--start", "2026-01-12T00:00:00Z",
                      "--end", end)
    agent = {r["inspection_time"]: r for r in whole}
    assert len(whole) == 6 * 24 + 8
    assert whole[0]["status"] == "calibrating"
    assert agent["2026-01-16T15:00:00Z"]["status"] != "calibrating"
    assert any((r.get("incident") or {}).get("event") == "opened" for r in whole)
    # mid-run, off the hour: the times on the hour, the agent's history and incidents
    middle = _backfill(path, tmp_path / "middle.jsonl", "--start", "2026-01-16T08:25:00Z",
                       "--end", end)
    assert [r["inspection_time"] for r in middle] == sorted(t for t in agent
                                                            if t >= "2026-01-16T09")
    assert not compare(agent, middle)
    # --every 2h: a subset of the agent's times, with the agent's hourly history
    two = _backfill(path, tmp_path / "two.jsonl", "--start", "2026-01-16T10:00:00Z",
                    "--end", end, "--every", "2h")
    assert len(two) == 23 and not compare(agent, two)
    # on an executor (jobs in dependency order): the same
    inline = _backfill(path, tmp_path / "inline.jsonl", "--start", "2026-01-16T08:25:00Z",
                       "--end", end, "--cluster", "inline")
    assert not compare(agent, inline) and len(inline) == len(middle)


# a 13-day stream whose s02 drops on 01-16 20:00: the agent inspects from 01-12 (first
# reading + 7 d) and calibrates from 01-16 15:00, so these 16 times are all calibrated
START, END = "2026-01-16T16:00:00Z", "2026-01-17T07:00:00Z"


def _change_argv(tmp_path) -> list[str]:
    """The backfill arguments of the stream above over START .. END (its CSV written)."""
    frame, _ = simulate(Scenario(n_sensors=6, days=13, step="30min",
                                 change_at="2026-01-16T20:00:00Z", changes={"s02": -1.5}))
    path = tmp_path / "net.csv"
    write_csv(frame, path)
    return ["backfill", "--data", str(path), "--start", START, "--end", END]


@contextmanager
def _planned(argv: list[str]):
    """(config, inspector, read_window, plan) of a backfill's arguments, as the CLI builds
    them; the window reader is closed on exit."""
    from monitor.cli import _backfill_plan, _one_shot_config, _window_reader, build_parser
    from monitor.compose import build_inspector

    config = _one_shot_config(build_parser().parse_args(argv))
    inspector = build_inspector(config)
    read, close = _window_reader(config)
    try:
        yield config, inspector, read, _backfill_plan(
            config, inspector, read, datetime.fromisoformat(START),
            datetime.fromisoformat(END), None, False)
    finally:
        close()


@pytest.mark.slow
def test_the_two_pass_backfill_equals_one_inspection_at_a_time(tmp_path, monkeypatch):
    """``mmdwatch backfill`` computes the windows, level statistics and engine-part fits
    of many times first (one batched fit) and decides them in order after; deciding each
    time alone, its engine part fitted alone (the agent's path, and the backfill's before
    the two passes), gives the same results at every time: fingerprints, statuses,
    incidents and p-values within 1e-9. In chunks of 40 times, so that the first pass of
    each next chunk is started before the decisions of the one before (as in a long
    backfill)."""
    from monitor.cli import _tracker
    from monitor.fleet.backfill import observe

    monkeypatch.setattr("monitor.inspection.PREFIT_TIMES", 40)
    argv = _change_argv(tmp_path)
    batched = json_lines(tmp_path / "two-pass.jsonl", argv)
    with _planned(argv) as (config, inspector, read, plan):
        tracker = _tracker(config, inspector, read, plan.times[0])
        alone = {}
        for t in plan.times:
            result = inspector.run(t, read, tracker.history_at(t)).result
            observe(tracker, result, read)
            alone[result["inspection_time"]] = result
    assert len(batched) == 16 and len(alone) > 100
    assert not compare(alone, batched)
    statuses = {r["status"] for r in batched}
    assert "firing" in statuses and "ok" in statuses  # both kinds of decision compared
    assert all((r["detection"]["engine"] or {}).get("value") is not None for r in batched
               if r["status"] != "calibrating")
    # the first pass fits the written times without the fit's own p-value; a firing
    # result's engine block is then the full fit's, as an inspection run alone reports it
    blocks = [(alone[r["inspection_time"]]["engine"], r["engine"]) for r in batched
              if r["engine"] is not None]
    assert blocks and all(b["params"]["compute_p_value"] is True
                          and b["p_value"] is not None for _, b in blocks)
    assert all(_close(a, b, skip={"runtime_s"}) for a, b in blocks)


def _close(a, b, skip: set[str], rel: float = 1e-9) -> bool:
    """JSON values equal, numbers within ``rel`` (a batched fit and a single one agree to
    float64 rounding), keys in ``skip`` left out."""
    if isinstance(a, dict) and isinstance(b, dict):
        keys = (a.keys() | b.keys()) - skip
        return all(_close(a.get(k), b.get(k), skip, rel) for k in keys)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close(x, y, skip, rel) for x, y in zip(a, b))
    if isinstance(a, float) or isinstance(b, float):
        return isinstance(a, int | float) and isinstance(b, int | float) and \
            abs(a - b) <= rel * max(abs(a), abs(b), 1e-300)
    return a == b


def json_lines(out, argv: list[str]) -> list[dict]:
    assert main([*argv, "--out", str(out)]) == 0
    return [json.loads(line) for line in out.read_text().splitlines()]


class _CountingExecutor(Executor):
    """An InlineExecutor that counts the jobs sent to it, by the function they run."""

    def __init__(self) -> None:
        from monitor.fleet.executors import InlineExecutor

        self.inner = InlineExecutor()
        self.sent: Counter[str] = Counter()

    def submit(self, fn, /, *args, **kwargs):
        self.sent[fn.__name__] += 1
        return self.inner.submit(fn, *args, **kwargs)


@pytest.mark.slow
def test_a_calibrated_backfill_on_an_executor_sends_batched_first_passes(tmp_path):
    """Under the calibrated rule a backfill on an executor sends its times' first passes
    (windows, detections, engine-part fits) as a few batched jobs and decides them here
    in order (issue 27): no job per time, and the results of the inline backfill."""
    from monitor.cli import _site_backfill
    from monitor.fleet.backfill import run_backfill

    argv = _change_argv(tmp_path)
    inline = json_lines(tmp_path / "inline.jsonl", argv)
    executor = _CountingExecutor()
    results: list[dict] = []
    with _planned(argv) as (config, inspector, read, plan):
        site = _site_backfill(config, inspector, read, plan)
        run_backfill([site], executor, results.append)
    assert len(plan.times) > 100 and len(results) == len(inline) == 16
    assert executor.sent["run_job"] == 0
    # eight times a job at least: batch_size for an unknown executor (eight in flight)
    assert 0 < executor.sent["run_first_pass"] <= len(plan.times) // 8
    assert not compare({r["inspection_time"]: r for r in inline}, results)
