"""Faults with real processes and real servers: crashes, outages, signals, disk trouble.

Each test runs ``mmdwatch run`` as a child process (tests/integration/scenario.py) against
mosquitto/influxd started by the shared fixtures, breaks something for real (SIGKILL,
stopping a server, a read-only or full filesystem) and checks what users count on: no
reading lost, no inspection skipped or delivered twice, clear messages, bounded stops.
"""
from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from tests.integration import scenario as sc
from tests.reliability import harness as h

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(600)]


def _mqtt_source(broker, client_id: str = "mmdwatch-faults") -> dict:  # type: ignore[no-untyped-def]
    return {"type": "mqtt", "host": "127.0.0.1", "port": broker.port,
            "topics": [f"{sc.TOPIC_PREFIX}/#"], "client_id": client_id,
            "reconnect_min_s": 0.5, "reconnect_max_s": 1.0}


# -- SIGKILL while ingesting ----------------------------------------------------------------
def test_sigkill_during_ingest_loses_no_reading(tmp_path: Path, mosquitto_persistent) -> None:
    broker = mosquitto_persistent
    times, values = sc.network(seed=3)
    messages = list(sc.mqtt_messages(times, values))
    total = times.size * len(sc.SENSORS)
    state = tmp_path / "state"
    config = h.fast_config(state)
    config["source"] = _mqtt_source(broker)
    config["schedule"]["start"] = sc.iso(sc.T0 + 60 * 86400)  # no inspection: ingest only
    agent = h.start_agent(tmp_path, config)
    assert agent.wait_for_log("MQTT source connected", timeout=60), agent.log_text()[-2000:]
    publisher = h.Publisher(broker.port, messages)
    publisher.start()
    # Crash it mid-stream: some readings committed, most not yet.
    assert h.wait_for(lambda: h.store_count(state) >= total // 10, timeout=120), \
        agent.log_text()[-2000:]
    h.sigkill(agent)
    at_kill = h.store_count(state)
    assert 0 < at_kill < total, "the crash must land mid-stream for this test to mean much"
    publisher.join(timeout=300)
    assert publisher.error is None, publisher.error
    # Restart: the persistent session hands over everything not acknowledged.
    agent = h.start_agent(tmp_path, config, name="agent2")
    try:
        assert h.wait_for(lambda: h.store_count(state) == total, timeout=180), \
            f"{h.store_count(state)} of {total} readings stored; {agent.log_text()[-2000:]}"
    finally:
        assert agent.stop() == 0
    assert h.store_count(state) == total
    print(f"\nSIGKILL at {at_kill:,}/{total:,} readings; after restart {total:,}/{total:,}")


# -- SIGKILL while delivering ------------------------------------------------------------------
def test_sigkill_during_delivery_no_inspection_skipped_or_duplicated(tmp_path: Path,
                                                                    influxd) -> None:
    data = tmp_path / "network.csv"
    h.network_csv(data, seed=4)
    state = tmp_path / "state"
    results = state / "results.jsonl"
    config = h.fast_config(state)
    config["source"] = {"type": "file", "path": str(data)}
    influxd.create_database("results")
    config["sinks"].append({"type": "influxdb", "url": influxd.url, "database": "results"})
    influxd.stop()  # the InfluxDB sink cannot confirm: results pile up in the outbox
    agent = h.start_agent(tmp_path, config)
    assert h.wait_for(lambda: len(h.done_times(state)) >= 3 and h.outbox_size(state) >= 3,
                      timeout=300), agent.log_text()[-3000:]
    h.sigkill(agent)
    done_at_kill = len(h.done_times(state))
    pending_at_kill = h.outbox_size(state)
    influxd.start()
    agent = h.start_agent(tmp_path, config, name="agent2")
    try:
        expected = [float(t) for t in h.FAST_TIMES]
        assert h.wait_for(lambda: h.done_times(state) == expected and h.outbox_size(state) == 0,
                          timeout=400), (h.done_times(state), h.outbox_size(state),
                                         agent.log_text()[-3000:])
    finally:
        assert agent.stop() == 0
    lines = h.jsonl_results(results)
    fps = [r["fingerprint"] for r in lines]
    assert len(fps) == len(set(fps)) == len(expected), "a result was skipped or written twice"
    assert sorted(r["inspection_time"] for r in lines) == [sc.iso(t) for t in h.FAST_TIMES]
    rows = influxd.query("SELECT fingerprint FROM mmdwatch_inspection", db="results")
    series = rows["results"][0].get("series", [])
    influx_fps = [v[1] for s in series for v in s["values"]]
    assert sorted(influx_fps) == sorted(fps), "InfluxDB must hold every result exactly once"
    print(f"\nSIGKILL with {done_at_kill} inspections done, {pending_at_kill} undelivered; "
          f"after restart {len(expected)} inspections, each delivered once")
