"""End to end over a real mosquitto: readings in over MQTT, ``mmdwatch run``, alert out.

15 days of 5-minute readings for 24 sensors, three of which drop at a known time, are
published to the broker; the agent (a real ``mmdwatch run`` process, ``clock: data``)
consumes them, inspects at the change time and publishes an alert naming the changed
sensors on ``mmdwatch/<site>/alert``.
"""
from __future__ import annotations

import json
import sqlite3
import time

import pytest

from tests.connectors.mqtt_helpers import Subscriber, wait_until
from tests.integration import scenario as sc

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(900)]

ALERT_TOPIC = f"mmdwatch/{sc.SITE}/alert"
STATE_TOPIC = f"mmdwatch/{sc.SITE}/state"
AVAILABILITY_TOPIC = f"mmdwatch/{sc.SITE}/availability"
INSPECTION_TIMEOUT_S = 600  # the engine on a loaded 2-core CI machine


def _agent(tmp_path, broker, reconnect_min_s: float = 0.5):
    config = sc.base_config(tmp_path / "state")
    conn = {"host": "127.0.0.1", "port": broker.port}
    config["source"] = {"type": "mqtt", **conn, "topics": [f"{sc.TOPIC_PREFIX}/#"],
                        "client_id": "mmdwatch-e2e", "reconnect_min_s": reconnect_min_s,
                        "reconnect_max_s": reconnect_min_s * 2}
    config["sinks"].append({"type": "mqtt", **conn, "prefix": "mmdwatch",
                            "reconnect_min_s": 0.5, "reconnect_max_s": 2})
    path = sc.write_config(tmp_path / "agent.yaml", config)
    agent = sc.AgentProcess(path, tmp_path / "agent.log", cwd=tmp_path)
    assert agent.wait_for_log("MQTT source connected", timeout=60), agent.log_text()[-3000:]
    return agent


def _check_alert(payload: bytes) -> dict:
    alert = json.loads(payload)
    assert alert["status"] == "firing"
    assert alert["site"] == sc.SITE
    assert alert["inspection_time"].startswith(sc.iso(sc.T_CHANGE)[:16])
    assert set(sc.CHANGED) <= set(alert["selected_sensors"])
    top = [s["sensor_id"] for s in sorted(alert["sensors"], key=lambda s: s["rank"])]
    assert set(top[:len(sc.CHANGED)]) == set(sc.CHANGED)
    assert len(alert["sensors"]) == len(sc.SENSORS)
    return alert


def test_alert_names_the_changed_sensors(tmp_path, mosquitto_persistent):
    broker = mosquitto_persistent
    times, values = sc.network()
    sub = Subscriber(broker, f"mmdwatch/{sc.SITE}/#")
    agent = _agent(tmp_path, broker)
    try:
        # Availability is announced at start-up, before any result.
        assert wait_until(lambda: [p for p, _ in sub.on(AVAILABILITY_TOPIC)] == [b"online"])
        # Bad payloads in the stream are counted and skipped, never fatal.
        sc.publish_all("127.0.0.1", broker.port,
                       iter([(f"{sc.TOPIC_PREFIX}/junk", b"not json"),
                             (f"{sc.TOPIC_PREFIX}/junk", b'{"sensor": "s00"}')]))
        last_sent = sc.publish_all("127.0.0.1", broker.port, sc.mqtt_messages(times, values))
        assert wait_until(lambda: sub.on(ALERT_TOPIC), timeout=INSPECTION_TIMEOUT_S), \
            agent.log_text()[-3000:]
        latency = time.monotonic() - last_sent
        alert = _check_alert(sub.on(ALERT_TOPIC)[0][0])
        assert not sub.on(ALERT_TOPIC)[0][1]  # alerts are not retained
        assert wait_until(lambda: sub.on(STATE_TOPIC))
        assert [p for p, _ in sub.on(AVAILABILITY_TOPIC)][:1] == [b"online"]
        assert alert["windows"]["after"]["n"] == alert["windows"]["before"]["n"] == 168
        print(f"\nlast reading published -> alert on the broker: {latency:.2f}s "
              f"(engine runtime {alert['generator']['runtime_s']}s)")
    finally:
        code = agent.stop()
    try:
        assert code == 0, agent.log_text()[-3000:]
        assert "rejected an item" in agent.log_text()
        # A graceful stop says so on the retained availability topic.
        assert wait_until(lambda: [p for p, _ in sub.on(AVAILABILITY_TOPIC)][-1:] == [b"offline"])
    finally:
        sub.close()

def test_broker_restart_while_the_agent_runs_loses_nothing(tmp_path, mosquitto_persistent):
    broker = mosquitto_persistent
    times, values = sc.network(seed=1)
    messages = list(sc.mqtt_messages(times, values))
    half = len(messages) // 2
    # Its first retry comes 15-30 s after the loss (jittered): time enough to publish the
    # second half on a loaded machine before it is back.
    agent = _agent(tmp_path, broker, reconnect_min_s=15.0)
    try:
        sc.publish_all("127.0.0.1", broker.port, iter(messages[:half]))
        # Everything published so far reached the agent before the broker goes away.
        mark = len(agent.log_text())
        broker.restart()  # sessions and queued messages persist across the restart
        # Published while the agent is still disconnected.
        sc.publish_all("127.0.0.1", broker.port, iter(messages[half:]))
        assert "MQTT source connected" not in agent.log_text()[mark:], \
            "the agent reconnected before the second half was published; the test proves nothing"
        assert agent.wait_for_log("lost", timeout=30, after=0), agent.log_text()[-3000:]
        assert agent.wait_for_log("MQTT source connected", timeout=60, after=mark)
        sub = Subscriber(broker, f"mmdwatch/{sc.SITE}/#")
        # The state topic is retained: it is there even if the result came before we subscribed.
        assert wait_until(lambda: sub.on(STATE_TOPIC), timeout=INSPECTION_TIMEOUT_S), \
            agent.log_text()[-3000:]
        _check_alert(sub.on(STATE_TOPIC)[-1][0])
        sub.close()
    finally:
        code = agent.stop()
    assert code == 0, agent.log_text()[-3000:]
    db = sqlite3.connect(tmp_path / "state" / "readings.sqlite")
    try:
        stored = db.execute("SELECT count(*) FROM readings").fetchone()[0]
    finally:
        db.close()
    assert stored == times.size * len(sc.SENSORS)
