"""MqttSource against a real mosquitto: formats, persistence, acks, restarts, auth, TLS."""
from __future__ import annotations

import json
import logging

import pytest

from connectors.mqtt import MqttSource
from tests.connectors.mqtt_helpers import Collected, publish, wait_until
from tests.servers import MosquittoServer

pytestmark = pytest.mark.integration

T0 = 1_717_200_000  # 2024-06-01T00:00:00Z


def _source(server, **extra) -> MqttSource:
    config = {"type": "mqtt", "topics": ["sensors/#"], "client_id": "test-agent",
              "reconnect_min_s": 0.2, "reconnect_max_s": 1.0, **server.client_kwargs(), **extra}
    return MqttSource(config)


def _readings(n: int, sensor: str = "s1", start: int = T0) -> list[tuple[str, str]]:
    return [("sensors/site", json.dumps({"sensor": sensor, "time": start + 300 * i, "value": i}))
            for i in range(n)]


def test_accepts_every_payload_format_and_counts_rejections(mosquitto, caplog):
    source = _source(mosquitto, sensor_from_topic="sensors/+/{sensor}")
    got = Collected()
    source.start(got)
    try:
        assert wait_until(lambda: source.health()["subscribed"])
        publish(mosquitto, [
            ("sensors/x/n1", json.dumps({"sensor": "n1", "time": "2024-06-01T00:00:00Z",
                                         "value": 1.5})),
            ("sensors/x/n2", json.dumps([{"time": T0, "value": 2}, {"time": T0 + 300,
                                                                     "value": "3.5"}])),
            ("sensors/x/n3", "4.25"),                     # bare number, sensor from topic
            ("sensors/x/n4", "not a number"),             # rejected
            ("sensors/x/n5", json.dumps({"time": T0, "value": None})),  # rejected
            ("sensors/x/n6", b"\xff\xfe"),                # rejected
        ])
        assert wait_until(lambda: len(got) == 4 and source.health()["messages"] == 6)
    finally:
        source.stop()
    by_sensor = {(r.sensor, r.value) for r in got.readings}
    assert by_sensor == {("n1", 1.5), ("n2", 2.0), ("n2", 3.5), ("n3", 4.25)}
    assert next(r.time for r in got.readings if r.sensor == "n1") == T0
    health = source.health()
    assert health["accepted"] == 4
    assert health["rejected"] == {"invalid_json": 1, "missing_value": 1, "not_utf8": 1}
    assert "rejected an item" in caplog.text


def test_rejection_logs_are_rate_limited(mosquitto, caplog):
    source = _source(mosquitto)
    source.start(Collected())
    try:
        assert wait_until(lambda: source.health()["subscribed"])
        with caplog.at_level(logging.WARNING, logger="connectors.mqtt.source"):
            publish(mosquitto, [("sensors/a", "garbage")] * 50)
            assert wait_until(lambda: source.health()["rejected"].get("invalid_json") == 50)
    finally:
        source.stop()
    lines = [r for r in caplog.records if "rejected an item" in r.getMessage()]
    assert len(lines) == 1


def test_persistent_session_keeps_readings_published_while_the_agent_is_down(mosquitto):
    first = _source(mosquitto)
    got = Collected()
    first.start(got)
    assert wait_until(lambda: first.health()["subscribed"])
    first.stop()  # subscription and session stay on the broker
    publish(mosquitto, _readings(500))
    second = _source(mosquitto)
    second.start(got)
    try:
        assert wait_until(lambda: len(got) == 500)
    finally:
        second.stop()
    assert len(got.keys()) == 500


def test_readings_not_committed_are_not_acknowledged_and_come_back(mosquitto):
    first = _source(mosquitto)

    def store_down(batch):
        raise OSError("disk full (test)")

    first.start(store_down)
    assert wait_until(lambda: first.health()["subscribed"])
    publish(mosquitto, _readings(50))
    assert wait_until(lambda: first.health()["deliver_failures"] >= 1)
    first.stop()  # nothing was committed, so nothing was acknowledged
    assert first.health()["accepted"] == 0

    got = Collected()
    second = _source(mosquitto)
    second.start(got)
    try:
        assert wait_until(lambda: len(got.keys()) == 50)
    finally:
        second.stop()


def test_store_failures_are_retried_without_losing_readings(mosquitto):
    got = Collected(fail_times=2)
    source = _source(mosquitto)
    source.start(got)
    try:
        assert wait_until(lambda: source.health()["subscribed"])
        publish(mosquitto, _readings(100))
        assert wait_until(lambda: len(got.keys()) == 100, timeout=15)
    finally:
        source.stop()
    assert source.health()["deliver_failures"] == 2


def test_broker_restart_loses_nothing(mosquitto_persistent):
    broker = mosquitto_persistent
    got = Collected()
    source = _source(broker, reconnect_min_s=1.0, reconnect_max_s=2.0)
    source.start(got)
    try:
        assert wait_until(lambda: source.health()["subscribed"])
        publish(broker, _readings(100, start=T0))
        assert wait_until(lambda: len(got) == 100)
        broker.restart()
        # Published before the source has reconnected: the broker queues them for its session.
        publish(broker, _readings(100, start=T0 + 100 * 300))
        disconnected_while_publishing = not source.health()["connected"]
        assert wait_until(lambda: len(got.keys()) == 200, timeout=20)
        assert source.health()["connected"]
    finally:
        source.stop()
    assert disconnected_while_publishing


def test_resubscribes_after_a_broker_that_forgot_the_session(mosquitto):
    got = Collected()
    source = _source(mosquitto)
    source.start(got)
    try:
        assert wait_until(lambda: source.health()["subscribed"])
        mosquitto.restart()  # no persistence: subscriptions are gone
        # connected again on a NEW session (the broker forgot the old one)
        assert wait_until(lambda: source.health()["sessions"] == 2, timeout=10)
        # and subscribed again: what is published before that goes to nobody
        assert wait_until(lambda: source.health()["subscribed"])
        publish(mosquitto, _readings(10))
        assert wait_until(lambda: len(got) == 10)
    finally:
        source.stop()


def test_wrong_password_is_a_clear_error_and_a_retry(mosquitto_auth, caplog):
    source = _source(mosquitto_auth, password="wrong")
    source.start(Collected())
    try:
        assert wait_until(lambda: source.health()["connect_failures"] >= 2, timeout=10)
        health = source.health()
    finally:
        source.stop()
    assert not health["connected"]
    assert "refused the connection" in health["last_error"]
    assert "username and password" in health["last_error"]
    assert "wrong" not in caplog.text  # the secret is never logged
    assert "retrying" in caplog.text


def test_untrusted_certificate_is_a_clear_error_and_a_retry(mosquitto_tls, caplog):
    source = _source(mosquitto_tls, tls={"enabled": True})  # system CAs only
    source.start(Collected())
    try:
        assert wait_until(lambda: source.health()["connect_failures"] >= 2, timeout=10)
        health = source.health()
    finally:
        source.stop()
    assert not health["connected"]
    assert "not trusted" in health["last_error"]
    assert "tls.ca_certs" in health["last_error"]


def test_tls_and_password_deliver_readings(mosquitto_tls):
    got = Collected()
    source = _source(mosquitto_tls)
    source.start(got)
    try:
        assert wait_until(lambda: source.health()["subscribed"])
        publish(mosquitto_tls, _readings(20))
        assert wait_until(lambda: len(got) == 20)
    finally:
        source.stop()



def test_a_refused_subscription_is_a_clear_error_not_connected(tmp_path, caplog):
    # anonymous clients may read sensors/# only: the second filter is refused (SUBACK 0x80)
    broker = MosquittoServer(tmp_path / "mosquitto", subscribable=("sensors/#",)).start()
    source = _source(broker, topics=["sensors/#", "scada/#"])
    source.start(Collected())
    try:
        assert wait_until(lambda: source.health()["last_error"] is not None, timeout=10)
        health = source.health()
    finally:
        source.stop()
        broker.stop()
    assert health["connected"] and not health["subscribed"]
    assert "refused the subscription to scada/#" in health["last_error"]
    assert "ACL" in health["last_error"] and "test-agent" in health["last_error"]
    assert "MQTT source connected" not in caplog.text  # never said while not subscribed
