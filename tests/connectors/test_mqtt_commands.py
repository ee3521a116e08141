"""The MQTT ack topic ``<prefix>/<site>/ack``: payload parsing, and against a real mosquitto
the listener the agent builds (``monitor.compose``) storing acks in a real state database."""
from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from connectors.mqtt.commands import BadCommand, MqttCommandListener, parse_ack
from monitor.compose import build_agent, build_commands
from monitor.config import validate_config
from monitor.storage.state import AgentState
from tests.connectors.mqtt_helpers import wait_until

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "monitor" / "demo" / "data" / "demo-network.csv.gz"


# -- parsing (no server) --------------------------------------------------------------------
def test_parse_ack_reads_the_fields():
    cmd = parse_ack(b'{"incident": " inc-1 ", "by": "alice", "note": "repaired"}',
                    site="l-town", topic="mmdwatch/l-town/ack", client_id="console-7")
    assert (cmd.site, cmd.incident, cmd.by, cmd.note) == ("l-town", "inc-1", "alice",
                                                          "repaired")
    assert cmd.who == "alice (mqtt client console-7)"
    bare = parse_ack(b'{"incident": "inc-1", "by": "alice"}', site="s", topic="t")
    assert bare.note == "" and bare.who == "alice (mqtt client not given)"


@pytest.mark.parametrize("payload, reason", [
    (b"", "empty payload"),
    (b"\xff\xfe", "not UTF-8"),
    (b"{nope", "not JSON"),
    (b'["inc-1"]', "JSON object"),
    (b'{"by": "alice"}', "'incident' must be a non-empty string"),
    (b'{"incident": "", "by": "alice"}', "'incident' must be a non-empty string"),
    (b'{"incident": 7, "by": "alice"}', "'incident' must be a non-empty string"),
    (b'{"incident": "inc-1"}', "'by' must be a non-empty string"),
    (b'{"incident": "inc-1", "by": "alice", "note": 3}', "'note' must be a string"),
    (b'{"incident": "inc-1", "by": "alice", "notes": "x"}', "unknown key(s) 'notes'"),
    (b'{"incident": "inc-1", "by": "al\\nice"}', "control characters"),
    (json.dumps({"incident": "i" * 300, "by": "a"}).encode(), "longer than 256"),
])
def test_parse_ack_refuses_with_the_reason(payload, reason):
    with pytest.raises(BadCommand) as info:
        parse_ack(payload, site="l-town", topic="mmdwatch/l-town/ack")
    assert reason in str(info.value)


# -- against a real broker --------------------------------------------------------------------
def _config(server, tmp_path: Path, *, ack: bool | None, sites: list[str] | None = None):
    kw = server.client_kwargs()
    sink = {"type": "mqtt", "host": kw["host"], "port": server.port, "prefix": "mmdwatch",
            "reconnect_min_s": 0.2, "reconnect_max_s": 1.0}
    if ack is not None:
        sink["commands"] = {"ack": ack}
    raw = {"source": {"type": "file", "path": str(DATA)}, "state_dir": str(tmp_path / "st"),
           "sinks": [sink]}
    if sites:
        raw["sites"] = [{"id": s, "sensors": [f"s0{i + 1}"]} for i, s in enumerate(sites)]
    else:
        raw["site"] = "l-town"
    return validate_config(raw)


def _incident(iid: str, site: str) -> dict:
    return {"id": iid, "site": site, "state": "open", "started": "2026-01-12T06:00:00Z",
            "last_firing": "2026-01-12T08:00:00Z", "sensors": ["s04"], "p_value": 1e-6,
            "firing_inspections": 2, "resolved": None}


def _send(server, topic: str, payload: str | bytes, *, v5_client_id: str | None = None,
          retain: bool = False) -> None:
    """Publish one message with QoS 1 and wait for its PUBACK (MQTT 5 with the
    ``client_id`` user property when given, else MQTT 3.1.1)."""
    v5 = v5_client_id is not None
    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="",
                         protocol=mqtt.MQTTv5 if v5 else mqtt.MQTTv311)
    client.connect(server.client_kwargs()["host"], server.port)
    client.loop_start()
    props = None
    if v5:
        props = Properties(PacketTypes.PUBLISH)
        props.UserProperty = ("client_id", v5_client_id)
    info = client.publish(topic, payload, qos=1, retain=retain, properties=props)
    info.wait_for_publish(10)
    assert info.is_published()
    client.disconnect()
    client.loop_stop()


@pytest.fixture
def state(tmp_path):
    s = AgentState(tmp_path / "state.sqlite")
    yield s
    s.close()


def _stop(agent) -> None:
    """Stop an agent that was built but not started, closing its sinks too."""
    agent.stop()
    for sink in agent.dispatcher.sinks:
        sink.close()


def _listen(config, state) -> MqttCommandListener:
    (listener,) = build_commands(config, state)
    listener.start()
    assert listener.wait_subscribed(10), "ack subscription not confirmed"
    return listener


@pytest.mark.integration
def test_an_ack_lands_in_the_state_database(mosquitto, tmp_path, state, caplog):
    caplog.set_level(logging.INFO)
    state.commit_inspection(1.0, {"fingerprint": "a", "status": "firing"},
                            incident=_incident("inc-1", "l-town"))
    listener = _listen(_config(mosquitto, tmp_path, ack=True), state)
    try:
        _send(mosquitto, "mmdwatch/l-town/ack",
              json.dumps({"incident": "inc-1", "by": "alice", "note": "new pump"}),
              v5_client_id="ops-console")
        _send(mosquitto, "mmdwatch/l-town/ack", '{"incident": "inc-1", "by": "bob"}')
        assert wait_until(lambda: len(state.pending_acks()) == 2)
    finally:
        listener.stop()
    first, second = state.pending_acks()
    assert (first.incident_id, first.via, first.note) == ("inc-1", "mqtt", "new pump")
    assert first.by == "alice (mqtt client ops-console)"
    assert second.by == "bob (mqtt client not given)"  # MQTT 3.1.1: no properties
    assert "ack received on mmdwatch/l-town/ack for incident inc-1 by alice" in caplog.text
    assert "ack 1 stored" in caplog.text


@pytest.mark.integration
def test_bad_acks_are_logged_and_dropped_and_the_listener_goes_on(mosquitto, tmp_path,
                                                                   state, caplog):
    caplog.set_level(logging.INFO)
    state.commit_inspection(1.0, {"fingerprint": "a", "status": "firing"},
                            incident=_incident("inc-1", "l-town"))
    listener = _listen(_config(mosquitto, tmp_path, ack=True), state)
    try:
        _send(mosquitto, "mmdwatch/l-town/ack", b"{not json")
        _send(mosquitto, "mmdwatch/l-town/ack", '{"incident": "inc-1"}')
        _send(mosquitto, "mmdwatch/l-town/ack", '{"incident": "inc-9", "by": "eve"}')
        _send(mosquitto, "mmdwatch/l-town/ack", '{"incident": "inc-1", "by": "mallory"}',
              retain=True)
        _send(mosquitto, "mmdwatch/l-town/ack", '{"incident": "inc-1", "by": "alice"}')
        assert wait_until(lambda: listener.received == 5)
        assert wait_until(lambda: len(state.pending_acks()) == 2)
    finally:
        listener.stop()
        _send(mosquitto, "mmdwatch/l-town/ack", b"", retain=True)  # clear the retained one
    # a message published with retain reaches a live subscription as a live one (MQTT)
    assert [a.by for a in state.pending_acks()] == ["mallory (mqtt client not given)",
                                                    "alice (mqtt client not given)"]
    assert (listener.accepted, listener.rejected) == (2, 3)
    text = caplog.text
    assert "bad ack on mmdwatch/l-town/ack (client not given) ignored: payload is not JSON" \
        in text
    assert "'by' must be a non-empty string" in text
    assert "no open incident 'inc-9' at this agent; open: inc-1" in text


@pytest.mark.integration
def test_a_retained_ack_is_not_applied_again_on_subscribe(mosquitto, tmp_path, state,
                                                          caplog):
    caplog.set_level(logging.INFO)
    state.commit_inspection(1.0, {"fingerprint": "a", "status": "firing"},
                            incident=_incident("inc-1", "l-town"))
    _send(mosquitto, "mmdwatch/l-town/ack", '{"incident": "inc-1", "by": "old"}', retain=True)
    listener = _listen(_config(mosquitto, tmp_path, ack=True), state)
    try:
        time.sleep(0.5)  # the broker does not send it (retain handling: do not send)
        _send(mosquitto, "mmdwatch/l-town/ack", '{"incident": "inc-1", "by": "new"}')
        assert wait_until(lambda: listener.received >= 1)
        time.sleep(0.2)
    finally:
        listener.stop()
        _send(mosquitto, "mmdwatch/l-town/ack", b"", retain=True)
    assert listener.received == 1
    assert [a.by for a in state.pending_acks()] == ["new (mqtt client not given)"]


@pytest.mark.integration
def test_an_ack_sent_while_the_agent_is_away_arrives_later(mosquitto, tmp_path, state):
    """The persistent MQTT 5 session: the broker queues acks for the listener."""
    state.commit_inspection(1.0, {"fingerprint": "a", "status": "firing"},
                            incident=_incident("inc-1", "l-town"))
    config = _config(mosquitto, tmp_path, ack=True)
    _listen(config, state).stop()  # the broker now knows the session
    _send(mosquitto, "mmdwatch/l-town/ack", '{"incident": "inc-1", "by": "night-shift"}')
    later = _listen(config, state)
    try:
        assert wait_until(lambda: len(state.pending_acks()) == 1)
    finally:
        later.stop()
    assert state.pending_acks()[0].by.startswith("night-shift")


@pytest.mark.integration
def test_several_sites_each_topic_acks_its_own_site(mosquitto, tmp_path, state, caplog):
    caplog.set_level(logging.INFO)
    for site in ("dma-north", "dma-south"):
        state.for_site(site).commit_inspection(1.0, {"fingerprint": site, "status": "firing"},
                                               incident=_incident(f"{site}-1", site))
    config = _config(mosquitto, tmp_path, ack=True, sites=["dma-north", "dma-south"])
    listener = _listen(config, state)
    try:
        assert sorted(listener.topics) == ["mmdwatch/dma-north/ack", "mmdwatch/dma-south/ack"]
        assert listener.client_id == "mmdwatch-sink-fleet-commands"
        _send(mosquitto, "mmdwatch/dma-south/ack", '{"incident": "dma-south-1", "by": "a"}')
        # an incident of another site on this site's topic is refused
        _send(mosquitto, "mmdwatch/dma-south/ack", '{"incident": "dma-north-1", "by": "b"}')
        assert wait_until(lambda: listener.received == 2)
        assert wait_until(lambda: len(state.pending_acks("dma-south")) == 1)
    finally:
        listener.stop()
    assert state.pending_acks("dma-north") == [] and state.pending_acks() == []
    assert "no open incident 'dma-north-1' at site 'dma-south'" in caplog.text


@pytest.mark.integration
@pytest.mark.parametrize("ack", [None, False])
def test_disabled_means_no_subscription_and_nothing_stored(mosquitto, tmp_path, state, ack):
    config = _config(mosquitto, tmp_path, ack=ack)
    assert build_commands(config, state) == []
    agent = build_agent(config)  # the agent's services hold no command listener
    try:
        assert not [s for s in agent._services if isinstance(s, MqttCommandListener)]
        agent.state.commit_inspection(1.0, {"fingerprint": "a", "status": "firing"},
                                      incident=_incident("inc-1", "l-town"))
        for service in agent._services:  # what Agent.start does with each service
            service.start()
        _send(mosquitto, "mmdwatch/l-town/ack", '{"incident": "inc-1", "by": "alice"}')
        time.sleep(0.5)
        assert agent.state.pending_acks() == []
    finally:
        _stop(agent)


@pytest.mark.integration
def test_the_agent_starts_and_stops_the_listener_as_a_service(mosquitto, tmp_path):
    config = _config(mosquitto, tmp_path, ack=True)
    agent = build_agent(config)
    (listener,) = [s for s in agent._services if isinstance(s, MqttCommandListener)]
    assert listener.client_id == "mmdwatch-sink-l-town-commands"
    state = agent.state
    state.commit_inspection(1.0, {"fingerprint": "a", "status": "firing"},
                            incident=_incident("inc-1", "l-town"))
    listener.start()  # what Agent.start does with each service
    try:
        assert listener.wait_subscribed(10)
        _send(mosquitto, "mmdwatch/l-town/ack", '{"incident": "inc-1", "by": "alice"}')
        assert wait_until(lambda: len(state.pending_acks()) == 1)
    finally:
        _stop(agent)  # stops the services (the listener disconnects), closes the state
    assert listener._client is None
