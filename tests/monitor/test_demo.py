"""``mmdwatch demo`` end to end: the bundled network through the real agent, live profile.

The story it must tell: the incident opens hours after the injected change, with an onset
estimate near it, names the injected sensors, stays open until the demo's operator acks
it (through ``mmdwatch ack``'s own code), resolves with ``reason: accepted`` at the next
inspection, and no other incident opens.
"""
from __future__ import annotations

import itertools
import json
import sqlite3
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest

from connectors.base import Reading, StreamSource
from connectors.timeutil import parse_time
from monitor.demo import TRUTH_FILE, HeldReplay
from tests.cli_runner import run_mmdwatch

ROOT = Path(__file__).resolve().parents[2]
AFTER = timedelta(hours=16)  # the live profile's after window: a result exists at t + 16 h


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    state = tmp_path_factory.mktemp("demo") / "state"
    out = run_mmdwatch("demo", "--state-dir", str(state), "--no-report", cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    results = [json.loads(x) for x in (state / "results.jsonl").read_text().splitlines()]
    return state, out.stdout, results, json.loads(TRUTH_FILE.read_text())


def _events(results):
    return [r for r in results if (r.get("incident") or {}).get("event")]


@pytest.mark.slow
def test_demo_runs_the_live_profile_hourly(demo):
    state, _, results, truth = demo
    times = [parse_time(r["inspection_time"]) for r in results]
    assert all(b - a == timedelta(hours=1) for a, b in itertools.pairwise(times))
    # the first inspection has a full 7-day before window; the last one's after window
    # ends with the data
    assert times[0] == parse_time(truth["start"]) + timedelta(days=7)
    assert times[-1] + AFTER <= parse_time(truth["end"]) + timedelta(minutes=10)
    assert times[-1] + AFTER + timedelta(hours=1) > parse_time(truth["end"])
    statuses = {r["status"] for r in results}
    assert statuses <= {"calibrating", "ok", "firing"}, statuses
    # calibrated well before the change: the leak-free calibrated hours raise nothing
    change = parse_time(truth["change_at"])
    calibrated = [r for r in results if r["status"] != "calibrating"]
    assert calibrated and parse_time(calibrated[0]["inspection_time"]) + AFTER \
        <= change - timedelta(hours=12)
    assert all(r["status"] == "ok" for r in calibrated
               if parse_time(r["inspection_time"]) + AFTER <= change)
    with sqlite3.connect(state / "state.sqlite") as conn:
        assert conn.execute("SELECT COUNT(*) FROM outbox").fetchone()[0] == 0
        assert conn.execute("SELECT COUNT(*) FROM done").fetchone()[0] == len(results)


@pytest.mark.slow
def test_demo_incident_opens_hours_after_the_change_with_its_onset(demo):
    _, _, results, truth = demo
    change = parse_time(truth["change_at"])
    events = _events(results)
    assert {e["incident"]["id"] for e in events} == {events[0]["incident"]["id"]}, \
        "exactly one incident"
    first = events[0]
    incident = first["incident"]
    assert incident["event"] == "opened" and first["status"] == "firing"
    # the alert (the result exists at t + 16 h) comes hours after the change, not before
    alert = parse_time(first["inspection_time"]) + AFTER
    assert change < alert <= change + timedelta(hours=12), alert
    # the onset estimate and its interval, within a few hours of the true change
    onset = parse_time(incident["onset"])
    assert abs(onset - change) <= timedelta(hours=3), incident["onset"]
    assert parse_time(incident["onset_low"]) <= onset <= parse_time(incident["onset_high"])
    assert parse_time(incident["onset_low"]) - timedelta(hours=1) <= change \
        <= parse_time(incident["onset_high"]) + timedelta(hours=1)
    # it names an injected sensor first, and the injected sensors lead its first three
    assert incident["sensors"][0] in truth["changed_sensors"]
    last = events[-1]["incident"]
    assert len(last["sensors"]) == 3
    assert set(last["sensors"][:2]) == set(truth["changed_sensors"])
    # no result before the change carries an incident
    assert all(r["incident"] is None for r in results
               if parse_time(r["inspection_time"]) + AFTER <= change)


@pytest.mark.slow
def test_demo_incident_stays_open_until_the_ack_and_resolves_accepted(demo):
    state, stdout, results, truth = demo
    ack_at = parse_time(truth["ack_at"])
    events = _events(results)
    incident_id = events[0]["incident"]["id"]
    resolved = [r for r in events if r["incident"]["event"] == "resolved"]
    assert len(resolved) == 1
    end = resolved[0]
    # resolved by the first inspection after the ack (its after window ends at the ack)
    assert parse_time(end["inspection_time"]) + AFTER == ack_at
    assert end["incident"]["reason"] == "accepted"
    assert end["incident"]["accepted_by"] == "operator"
    assert end["incident"]["state"] == "resolved"
    # open at every inspection from the opening to the ack, long after the last firing one
    opened_at = events[0]["inspection_time"]
    between = [r for r in results if opened_at <= r["inspection_time"] < end["inspection_time"]]
    assert all(r["incident"] and r["incident"]["id"] == incident_id
               and r["incident"]["state"] == "open" for r in between)
    quiet = [r for r in between if r["status"] == "ok"]
    assert len(quiet) >= 12, "the statistic went quiet hours before the ack; still open"
    assert between[-1]["incident"]["baseline_check"], "checked against its frozen reference"
    # nothing opens after the ack
    assert all(r["incident"] is None for r in results
               if r["inspection_time"] > end["inspection_time"])
    # the ack went through the state database, as `mmdwatch ack` stores it, and was applied
    with sqlite3.connect(state / "state.sqlite") as conn:
        acks = conn.execute("SELECT incident_id, by, via, applied_result FROM acks").fetchall()
    assert acks == [(incident_id, "operator", "cli",
                     parse_time(end["inspection_time"]).timestamp())]
    # the story on the console: events only, the ack command, the accepted resolution
    assert f"  $ mmdwatch ack {incident_id} --config {state / 'demo.yaml'} --by operator" \
        in stdout
    assert f"ack 1: incident {incident_id} accepted by operator" in stdout
    assert f"incident {incident_id} opened: {events[0]['incident']['sensors'][0]}" in stdout
    assert f"incident {incident_id} resolved (accepted by operator)" in stdout
    heads = [line for line in stdout.splitlines() if line.startswith("[")]
    assert len(heads) == len(events), heads
    assert "1 incident." in stdout


class _Stream(StreamSource):
    """A finite stream of one reading per minute, delivered from a thread."""

    type = "test"

    def __init__(self, n: int) -> None:
        self.n = n
        self.done = threading.Event()
        self.stopped = threading.Event()

    def start(self, deliver):
        def run():
            for i in range(self.n):
                if self.stopped.is_set():
                    return
                deliver([Reading("s1", float(60 * i), 1.0)])
            self.done.set()

        threading.Thread(target=run, daemon=True).start()

    def stop(self):
        self.stopped.set()

    def finished(self):
        return self.done.is_set()


def test_held_replay_holds_at_its_time_counts_as_finished_then_goes_on():
    got: list[float] = []
    replay = HeldReplay(_Stream(10), hold_at=300.0)
    replay.start(lambda batch: got.extend(r.time for r in batch))
    assert replay.wait_held(timeout=5)
    time.sleep(0.1)
    assert got == [0.0, 60.0, 120.0, 180.0, 240.0]  # nothing at or after the hold
    assert replay.held() and replay.finished()  # the agent may go idle meanwhile
    replay.release()
    deadline = time.monotonic() + 5
    while not replay.finished() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not replay.held() and replay.finished()
    assert got == [60.0 * i for i in range(10)]


def test_held_replay_stops_while_held():
    got: list[float] = []
    replay = HeldReplay(_Stream(10), hold_at=120.0)
    replay.start(lambda batch: got.extend(r.time for r in batch))
    assert replay.wait_held(timeout=5)
    replay.stop()
    time.sleep(0.2)
    assert got == [0.0, 60.0]
