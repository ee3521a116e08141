"""Ledger + outbox across a SIGKILL: kill the agent while results wait in the outbox for a
sink that cannot take them; after a restart every inspection is delivered to every sink
exactly once, none skipped, none repeated."""
from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from monitor.demo.simulate import Scenario, simulate, write_csv
from tests.results_file import read_results

ROOT = Path(__file__).resolve().parents[2]
EXPECTED = [f"2026-01-{d:02d}T00:00:00Z" for d in range(7, 15)]  # anchor 01-07 .. end


def _config(tmp_path: Path) -> Path:
    frame, _ = simulate(Scenario(n_sensors=6, days=10, step="30min",
                                 change_at="2026-01-11T00:00:00Z",
                                 changes={"s02": -1.5}))
    data = tmp_path / "net.csv"
    write_csv(frame, data)
    config = {
        "site": "crash",
        "state_dir": str(tmp_path / "state"),
        "source": {"type": "file", "path": str(data), "speed": None},
        "profile": "retrospective",
        "windows": {"before": "2d", "after": "1d", "normalise": "before"},
        "schedule": {"every": "1d", "clock": "data", "poll": "0.2s"},
        "engine": {"method": "mmd-baseline", "seed": 0, "block_size": None},
        "outbox": {"retry_initial": "0.2s", "retry_max": "0.5s"},
        "sinks": [{"type": "jsonl", "path": str(tmp_path / "a" / "results.jsonl")},
                  {"type": "jsonl", "path": str(tmp_path / "b" / "results.jsonl")}],
        "log_level": "INFO",
    }
    path = tmp_path / "agent.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _start(config: Path, log: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "monitor.cli", "run", "--config",
                             str(config)], cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=log.open("ab"))


def _count(db: Path, sql: str) -> int:
    if not db.exists():
        return 0
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as conn:
            return conn.execute(sql).fetchone()[0]
    except sqlite3.OperationalError:
        return 0


def _lines(path: Path) -> list[dict]:
    return read_results(path, skip_torn=True)  # the agent is killed mid-run here


def _wait(predicate, timeout: float, what: str, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    pytest.fail(f"timed out waiting for {what}; agent log:\n{log.read_text()[-3000:]}")


@pytest.mark.slow
def test_sigkill_between_result_and_delivery(tmp_path):
    config = _config(tmp_path)
    log = tmp_path / "agent.log"
    state = tmp_path / "state" / "state.sqlite"
    # sink b's folder is blocked by a plain file: every delivery to b fails and is retried
    (tmp_path / "b").write_text("not a directory")

    first = _start(config, log)
    try:
        _wait(lambda: _count(state, "SELECT COUNT(*) FROM outbox") >= 3, 240,
              "results queued for the failing sink", log)
        # some results were delivered to a, none to b: kill without any chance to clean up
        os.kill(first.pid, signal.SIGKILL)
        first.wait(timeout=10)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    done_before = _count(state, "SELECT COUNT(*) FROM done")
    queued = _count(state, "SELECT COUNT(*) FROM outbox")
    assert queued >= 3 and done_before >= 3
    assert _lines(tmp_path / "a" / "results.jsonl")  # a got some before the kill

    (tmp_path / "b").unlink()  # the sink recovers
    second = _start(config, log)
    try:
        def all_delivered() -> bool:
            return (len(_lines(tmp_path / "b" / "results.jsonl")) >= len(EXPECTED)
                    and _count(state, "SELECT COUNT(*) FROM outbox") == 0
                    and _count(state, "SELECT COUNT(*) FROM done") >= len(EXPECTED))

        _wait(all_delivered, 240, "every result delivered after the restart", log)
        time.sleep(1.0)  # anything duplicated would show up now
        second.send_signal(signal.SIGTERM)
        assert second.wait(timeout=30) == 0  # graceful stop
    finally:
        if second.poll() is None:
            second.kill()
            second.wait()

    for sink in ("a", "b"):
        results = _lines(tmp_path / sink / "results.jsonl")
        times = [r["inspection_time"] for r in results]
        assert times == EXPECTED, (sink, times)  # each once, in order, none skipped
        assert len({r["fingerprint"] for r in results}) == len(EXPECTED)
    assert _count(state, "SELECT COUNT(*) FROM done") == len(EXPECTED)
    statuses = {r["inspection_time"]: r["status"] for r in _lines(tmp_path / "a" /
                                                                  "results.jsonl")}
    assert "error" not in statuses.values(), statuses
