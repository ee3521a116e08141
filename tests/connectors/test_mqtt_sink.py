"""MqttSink against a real mosquitto: topics, retain flags, PUBACK, availability, failures."""
from __future__ import annotations

import json
import socket

import pytest

from connectors.base import SinkError
from connectors.mqtt import MqttSink
from tests.connectors.mqtt_helpers import Subscriber, wait_until

pytestmark = pytest.mark.integration


def _result(status: str, site: str = "l-town", fp: str = "abc") -> dict:
    return {"schema": "mmdwatch.inspection/v1", "fingerprint": fp, "site": site,
            "status": status, "inspection_time": "2018-06-01T00:00:00Z",
            "selected_sensors": ["n296"] if status == "firing" else [],
            "sensors": [{"sensor_id": "n296", "rank": 1, "score": 1.0, "selected": True,
                         "mean_before": float("nan"), "mean_after": 0.93}]}


def _sink(server, **extra) -> MqttSink:
    return MqttSink({"type": "mqtt", "prefix": "mmdwatch", "reconnect_min_s": 0.2,
                     "reconnect_max_s": 1.0, "connect_timeout_s": 3, **server.client_kwargs(),
                     **extra}, site="l-town")


def test_state_is_retained_and_only_firing_results_alert(mosquitto):
    sub = Subscriber(mosquitto, "mmdwatch/#")
    sink = _sink(mosquitto)
    try:
        sink.send(_result("ok", fp="one"))
        sink.send(_result("firing", fp="two"))
        assert wait_until(lambda: len(sub.on("mmdwatch/l-town/state")) == 2
                          and len(sub.on("mmdwatch/l-town/alert")) == 1)
    finally:
        sink.close()
        sub.close()
    alert, retained = sub.on("mmdwatch/l-town/alert")[0]
    body = json.loads(alert)
    assert body["fingerprint"] == "two" and not retained
    assert body["sensors"][0]["mean_before"] is None  # NaN never reaches the wire

    late = Subscriber(mosquitto, "mmdwatch/l-town/state")
    try:
        assert wait_until(lambda: late.on("mmdwatch/l-town/state"))
        payload, retained = late.on("mmdwatch/l-town/state")[0]
    finally:
        late.close()
    assert retained and json.loads(payload)["fingerprint"] == "two"


def test_availability_online_then_offline_on_close(mosquitto):
    sink = _sink(mosquitto)
    sub = Subscriber(mosquitto, "mmdwatch/l-town/availability")
    try:
        assert wait_until(lambda: [p for p, _ in sub.on("mmdwatch/l-town/availability")]
                          [-1:] == [b"online"])
        sink.close()
        assert wait_until(lambda: [p for p, _ in sub.on("mmdwatch/l-town/availability")]
                          [-1:] == [b"offline"])
    finally:
        sub.close()


def test_last_will_says_offline_when_the_agent_vanishes(mosquitto):
    sink = _sink(mosquitto, reconnect_min_s=30)
    sub = Subscriber(mosquitto, "mmdwatch/l-town/availability")
    try:
        assert wait_until(lambda: [p for p, _ in sub.on("mmdwatch/l-town/availability")]
                          [-1:] == [b"online"])
        # Cut the TCP connection without an MQTT DISCONNECT, as a crash would.
        sink._client.socket().shutdown(socket.SHUT_RDWR)
        assert wait_until(lambda: [p for p, _ in sub.on("mmdwatch/l-town/availability")]
                          [-1:] == [b"offline"])
    finally:
        sub.close()
        sink.close()


def test_site_may_come_from_the_result(mosquitto):
    sub = Subscriber(mosquitto, "alerts/#")
    sink = MqttSink({"type": "mqtt", "prefix": "alerts", **mosquitto.client_kwargs()})
    try:
        sink.send(_result("firing", site="north"))
        assert wait_until(lambda: sub.on("alerts/north/alert")
                          and sub.on("alerts/north/availability"))
    finally:
        sink.close()
        sub.close()


def test_unreachable_broker_raises_sink_error_for_the_outbox(mosquitto):
    port = mosquitto.port
    mosquitto.stop()
    sink = MqttSink({"type": "mqtt", "host": "127.0.0.1", "port": port,
                     "connect_timeout_s": 1, "reconnect_min_s": 0.2}, site="l-town")
    try:
        with pytest.raises(SinkError, match="nothing accepts connections.*outbox"):
            sink.send(_result("firing"))
        mosquitto.start()  # the retry of the outbox then succeeds
        sub = Subscriber(mosquitto, "mmdwatch/#")
        sink.send(_result("firing"))
        assert wait_until(lambda: sub.on("mmdwatch/l-town/alert"))
        sub.close()
    finally:
        sink.close()


def test_wrong_password_raises_a_clear_sink_error(mosquitto_tls):
    sink = _sink(mosquitto_tls, password="wrong")
    try:
        with pytest.raises(SinkError, match="refused the connection.*username and password"):
            sink.send(_result("ok"))
    finally:
        sink.close()


def test_tls_with_password_publishes(mosquitto_tls):
    sub = Subscriber(mosquitto_tls, "mmdwatch/#")
    sink = _sink(mosquitto_tls)
    try:
        sink.send(_result("firing"))
        assert wait_until(lambda: sub.on("mmdwatch/l-town/alert"))
    finally:
        sink.close()
        sub.close()
