"""``--publish`` without a broker: the outbox's fingerprint deduplication, the ledger left to
the agent, a JSON Lines sink fed by two backfill runs, and the input checks."""
from __future__ import annotations

import json
import sqlite3
import subprocess
from pathlib import Path

import yaml

from monitor.demo.simulate import Scenario, simulate, write_csv
from monitor.storage.state import AgentState
from tests.cli_runner import run_mmdwatch

ROOT = Path(__file__).resolve().parents[3]


def mmdwatch(*args: str) -> subprocess.CompletedProcess:
    return run_mmdwatch(*args, cwd=ROOT)


def _result(fp: str, t: str = "2026-01-12T00:00:00Z") -> dict:
    return {"fingerprint": fp, "inspection_time": t, "status": "ok", "site": "s"}


def test_a_fingerprint_is_published_once_and_the_ledger_stays_the_agents(tmp_path):
    state = AgentState(tmp_path / "state.sqlite")
    assert state.publish(1.0, _result("a")) is True
    assert state.publish(1.0, _result("a")) is False  # still queued: not twice
    assert state.published_pending() == {"a": frozenset()}
    assert state.confirm("a", "jsonl", frozenset({"jsonl"}))
    assert state.outbox_size() == 0 and state.published_pending() == {}
    assert state.publish(1.0, _result("a")) is False  # delivered: a rerun sends nothing
    # the agent's own result (ledger `done`) is never published again by a one-shot run
    state.commit_inspection(2.0, _result("b"))
    assert state.publish(2.0, _result("b")) is False
    assert state.published_pending() == {}  # "b" is the agent's to deliver
    # a one-shot run does not move the agent's schedule or calibration history
    assert state.done_times() == [2.0] and state.history(0.0) == []
    state.close()


def _network(tmp_path: Path) -> Path:
    frame, _ = simulate(Scenario(n_sensors=6, changes={"s04": -0.9}))
    path = tmp_path / "net.csv"
    write_csv(frame, path)
    return path


def _config(tmp_path: Path, data: Path, sinks: list) -> Path:
    path = tmp_path / "agent.yaml"
    path.write_text(yaml.safe_dump({"site": "pubnet", "state_dir": str(tmp_path / "state"),
                                    "source": {"type": "file", "path": str(data)},
                                    "sinks": sinks}))
    return path


def test_backfill_publish_twice_writes_each_result_once_to_jsonl(tmp_path):
    out = tmp_path / "results.jsonl"
    config = _config(tmp_path, _network(tmp_path), [{"type": "jsonl", "path": str(out)}])
    args = ("backfill", "--config", str(config), "--start", "2026-01-11T12:00",
            "--end", "2026-01-12T12:00", "--every", "6h", "--method", "mmd-baseline",
            "--publish")
    first = mmdwatch(*args)
    assert first.returncode == 0, first.stderr
    assert "publish: 5 result(s) delivered" in first.stderr
    second = mmdwatch(*args)
    assert second.returncode == 0, second.stderr
    assert "publish: 0 result(s) delivered" in second.stderr
    assert "5 already published before (skipped)" in second.stderr
    printed = [json.loads(x)["fingerprint"] for x in first.stdout.splitlines()]
    assert [json.loads(x)["fingerprint"] for x in second.stdout.splitlines()] == printed
    assert [json.loads(x)["fingerprint"] for x in out.read_text().splitlines()] == printed
    with sqlite3.connect(tmp_path / "state" / "state.sqlite") as db:
        assert db.execute("SELECT COUNT(*) FROM outbox").fetchone()[0] == 0
        assert db.execute("SELECT COUNT(*) FROM published").fetchone()[0] == 5
        assert db.execute("SELECT COUNT(*) FROM done").fetchone()[0] == 0


def test_publish_needs_a_config_with_sinks(tmp_path):
    data = _network(tmp_path)
    no_config = mmdwatch("inspect", "--data", str(data), "--at", "2026-01-12", "--publish")
    assert no_config.returncode == 2 and "--publish needs --config" in no_config.stderr
    no_sinks = mmdwatch("inspect", "--config", str(_config(tmp_path, data, [])),
                        "--at", "2026-01-12", "--publish")
    assert no_sinks.returncode == 2 and "has no sinks" in no_sinks.stderr
    assert no_sinks.stdout == ""  # nothing computed


def test_one_shot_commands_get_the_configs_connectors_with_their_secrets(tmp_path):
    from monitor.cli import _one_shot_config, build_parser

    path = tmp_path / "agent.yaml"
    path.write_text(yaml.safe_dump({
        "site": "s", "state_dir": str(tmp_path / "state"),
        "source": {"type": "influxdb", "url": "http://127.0.0.1:1", "database": "d",
                   "measurement": "m", "username": "u", "password": "hunter2"},
        "sinks": [{"type": "mqtt", "host": "127.0.0.1", "username": "u",
                   "password": "pw2"}]}))
    path.chmod(0o600)
    args = build_parser().parse_args(["inspect", "--config", str(path), "--at", "2026-01-12",
                                      "--profile", "retrospective", "--before", "2d"])
    config = _one_shot_config(args)
    assert config.source.password.get_secret_value() == "hunter2"  # not "**********"
    assert config.sinks[0].password.get_secret_value() == "pw2"
    assert config.windows.before.days == 2 and config.profile == "retrospective"


def test_the_agents_dispatcher_delivers_what_a_one_shot_run_left_queued(tmp_path):
    from connectors.base import Sink
    from monitor.service.metrics import Metrics
    from monitor.storage.delivery import Dispatcher

    class Collect(Sink):
        type = "collect"

        def __init__(self) -> None:
            self.got: list[str] = []

        def send(self, result: dict) -> None:
            self.got.append(result["fingerprint"])

    state = AgentState(tmp_path / "state.sqlite")
    state.publish(1.0, _result("left-by-backfill"))  # its sinks were down: still queued
    sink = Collect()
    dispatcher = Dispatcher([sink], state, Metrics())  # the agent's, on its next start
    dispatcher.start()
    try:
        assert dispatcher.drain(timeout=10)
    finally:
        dispatcher.stop()
        state.close()
    assert sink.got == ["left-by-backfill"]
