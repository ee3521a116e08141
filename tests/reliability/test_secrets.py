"""Secrets never leak: a real agent with password-protected TLS MQTT and InfluxDB, logging at
DEBUG, writing results and a report; afterwards every byte it wrote is searched for the
passwords (logs, results, state databases, reports, what it published, what it wrote to
InfluxDB, and check-config output)."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import INFLUX_PASSWORD, MQTT_PASSWORD
from tests.connectors.mqtt_helpers import Subscriber, publish
from tests.integration import scenario as sc
from tests.reliability import harness as h

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(600)]


def _all_bytes(root: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_no_secret_in_logs_results_reports_or_outputs(tmp_path: Path, mosquitto_tls,
                                                     influxd_secure) -> None:
    broker, influx = mosquitto_tls, influxd_secure
    influx.create_database("results")
    state = tmp_path / "state"
    config = h.fast_config(state)
    config["log_level"] = "DEBUG"
    config["report_dir"] = str(tmp_path / "reports")
    tls = {"ca_certs": str(broker.tls.cert)}
    config["source"] = {"type": "mqtt", "host": "localhost", "port": broker.port,
                        "topics": [f"{sc.TOPIC_PREFIX}/#"], "client_id": "mmdwatch-secrets",
                        "username": broker.username, "password": "${MQTT_PASSWORD}", "tls": tls}
    config["sinks"] += [
        {"type": "mqtt", "host": "localhost", "port": broker.port, "prefix": "mmdwatch",
         "username": broker.username, "password": "${MQTT_PASSWORD}", "tls": tls},
        {"type": "influxdb", "url": influx.url, "database": "results",
         "username": influx.username, "password": "${INFLUX_PASSWORD}",
         "tls": {"ca_certs": str(influx.tls.cert)}},
    ]
    os.environ["MQTT_PASSWORD"], os.environ["INFLUX_PASSWORD"] = MQTT_PASSWORD, INFLUX_PASSWORD
    try:
        config_path = sc.write_config(tmp_path / "agent.yaml", config)
        config_path.chmod(0o600)
        check = subprocess.run([*sc.mmdwatch_command(), "check-config", "--config",
                                str(config_path)], capture_output=True, text=True, timeout=120,
                               check=False)
        assert check.returncode == 0, check.stdout + check.stderr
        sub = Subscriber(broker, f"mmdwatch/{sc.SITE}/#")
        agent = h.start_agent(tmp_path, config)
        try:
            assert agent.wait_for_log("MQTT source connected", timeout=60), agent.log_text()[-3000:]
            times, values = sc.network(seed=11)
            publish(broker, list(sc.mqtt_messages(times, values)))  # TLS + password
            assert h.wait_for(lambda: len(h.done_times(state)) >= 3 and h.outbox_size(state) == 0,
                              timeout=400), agent.log_text()[-3000:]
            assert h.wait_for(lambda: bool(sub.on(f"mmdwatch/{sc.SITE}/state")), timeout=60)
        finally:
            assert agent.stop() == 0
        published = b"".join(payload for _, payload, _ in sub.messages)
        sub.close()
        stored = str(influx.query("SELECT * FROM /.*/", db="results")).encode()
    finally:
        del os.environ["MQTT_PASSWORD"], os.environ["INFLUX_PASSWORD"]
    files = _all_bytes(tmp_path / "state") | _all_bytes(tmp_path / "reports")
    files[tmp_path / "agent.log"] = (tmp_path / "agent.log").read_bytes()
    assert h.jsonl_results(state / "results.jsonl"), "the agent produced no results to search"
    assert any(p.suffix in (".html", ".png", ".json") for p in files), "no report written"
    assert b"DEBUG" in files[tmp_path / "agent.log"]
    outputs = {"check-config": (check.stdout + check.stderr).encode(), "published": published,
               "influxdb": stored, **{str(p): b for p, b in files.items()}}
    for secret in (MQTT_PASSWORD, INFLUX_PASSWORD):
        leaks = [where for where, data in outputs.items() if secret.encode() in data]
        assert not leaks, f"secret found in {leaks}"
    print(f"\nsearched {len(outputs)} outputs ({sum(map(len, outputs.values())):,} bytes): "
          "no secret")

