"""``backfill --publish`` and ``inspect --publish`` through a real mosquitto and a JSON Lines
file: every result reaches each sink exactly once over reruns, a broker that is down leaves
the results queued (exit 3), and the next run delivers them."""
from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from connectors.mqtt.sink import is_alert, topics
from monitor.demo.simulate import Scenario, simulate, write_csv
from monitor.storage.state import AgentState
from tests.cli_runner import run_mmdwatch
from tests.connectors.mqtt_helpers import Subscriber, wait_until
from tests.servers import MosquittoServer

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[2]
SITE = "pubnet"
TOPICS = topics("mmdwatch", SITE)


def mmdwatch(*args: str) -> subprocess.CompletedProcess:
    return run_mmdwatch(*args, cwd=ROOT)


def _config(tmp_path: Path, broker: MosquittoServer) -> Path:
    frame, _ = simulate(Scenario(n_sensors=8, days=20, change_at="2026-01-21T06:00:00Z",
                                 changes={"s04": -1.5}))
    data = tmp_path / "net.csv"
    write_csv(frame, data)
    path = tmp_path / "agent.yaml"
    path.write_text(yaml.safe_dump({
        "site": SITE, "state_dir": str(tmp_path / "state"),
        "source": {"type": "file", "path": str(data)},
        "sinks": [{"type": "jsonl", "path": str(tmp_path / "results.jsonl")},
                  {"type": "mqtt", **broker.client_kwargs(), "connect_timeout_s": 1}]}))
    return path


def _fingerprints(sub: Subscriber, topic: str) -> list[str]:
    return sorted(json.loads(payload)["fingerprint"] for payload, _ in sub.on(topic))


def test_backfill_publish_twice_reaches_mqtt_and_jsonl_once(tmp_path, mosquitto):
    config = _config(tmp_path, mosquitto)
    sub = Subscriber(mosquitto, f"mmdwatch/{SITE}/#")
    # hourly around the first after windows that hold the change (2026-01-21 06:00): the
    # incident opens at one of these times (a backfill writes only the times asked for)
    args = ("backfill", "--config", str(config), "--start", "2026-01-20T14:00",
            "--end", "2026-01-20T20:00", "--every", "1h", "--method", "mmd-baseline",
            "--engine-weight", "0",  # publishing is under test: no engine fit per hour
            "--publish")
    try:
        first = mmdwatch(*args)
        assert first.returncode == 0, first.stderr
        results = [json.loads(x) for x in first.stdout.splitlines()]
        fps = sorted(r["fingerprint"] for r in results)
        assert len(fps) == 7 and f"publish: {len(fps)} result(s) delivered" in first.stderr
        assert wait_until(lambda: len(sub.on(TOPICS["state"])) >= len(fps))
        second = mmdwatch(*args)
        assert second.returncode == 0, second.stderr
        assert f"{len(fps)} already published before (skipped)" in second.stderr
        time.sleep(1.0)  # anything sent twice would have arrived by now
        assert _fingerprints(sub, TOPICS["state"]) == fps  # each exactly once
        # the calibrated rule's incidents ride along (SiteTracker), alerts once each
        alerts = sorted(r["fingerprint"] for r in results if is_alert(r))
        assert alerts and any(r.get("incident") for r in results)
        assert _fingerprints(sub, TOPICS["alert"]) == alerts
        # a one-shot publisher is not the agent: no availability, state not retained
        assert sub.on(TOPICS["availability"]) == []
        assert not any(retained for _, retained in sub.on(TOPICS["state"]))
    finally:
        sub.close()
    lines = (tmp_path / "results.jsonl").read_text().splitlines()
    assert sorted(json.loads(x)["fingerprint"] for x in lines) == fps
    state = AgentState(tmp_path / "state" / "state.sqlite")
    try:
        assert state.outbox_size() == 0 and state.done_times() == []
    finally:
        state.close()


def test_inspect_publish_keeps_the_result_queued_while_the_broker_is_down(tmp_path,
                                                                          mosquitto):
    config = _config(tmp_path, mosquitto)
    args = ("inspect", "--config", str(config), "--at", "2026-01-21T00:00",
            "--method", "mmd-baseline", "--publish", "--publish-timeout", "3s")
    mosquitto.stop()
    down = mmdwatch(*args)
    assert down.returncode == 3, down.stderr
    assert "1 result(s) not confirmed within 3 s by mqtt:" in down.stderr
    assert "stay queued" in down.stderr
    result = json.loads(down.stdout)  # stdout still carries the result
    state = AgentState(tmp_path / "state" / "state.sqlite")
    try:
        (entry,) = state.pending()
        assert entry.fingerprint == result["fingerprint"]
        assert entry.delivered == {f"jsonl:{tmp_path / 'results.jsonl'}"}  # jsonl took it
    finally:
        state.close()

    mosquitto.start()
    sub = Subscriber(mosquitto, f"mmdwatch/{SITE}/#")
    try:
        up = mmdwatch(*args)
        assert up.returncode == 0, up.stderr
        assert "1 already published before (skipped)" in up.stderr
        assert wait_until(lambda: len(sub.on(TOPICS["state"])) >= 1)
        time.sleep(1.0)
        assert _fingerprints(sub, TOPICS["state"]) == [result["fingerprint"]]
    finally:
        sub.close()
    lines = (tmp_path / "results.jsonl").read_text().splitlines()
    assert [json.loads(x)["fingerprint"] for x in lines] == [result["fingerprint"]]
