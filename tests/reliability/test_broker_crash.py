"""A broker crash (SIGKILL) during a replay: what is lost, and whether it shows.

A QoS 1 publisher that keeps its session (fixed client id, clean session off) replays
the scenario network into mosquitto while ``mmdwatch run`` ingests it. mosquitto is
SIGKILLed for a few seconds and restarted on the same port (with the same persistence
file, when it has one). The readings lost are counted against the store.

* With the settings of /work/notes/issue19-outage.md (``persistence true``,
  ``autosave_interval 1`` + ``autosave_on_changes true``: the broker's state is saved
  after every change, not only on a clean shutdown) nothing is lost.
* Without persistence the broker forgets the agent's session; what the publisher sent
  before the agent subscribed again goes to nobody. That loss must show: a ``data_gap``
  event on ``mmdwatch/<site>/status`` whose span and sensors cover every lost reading.
"""
from __future__ import annotations

import calendar
import json
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import paho.mqtt.client as mqtt
import pytest

from tests.connectors.mqtt_helpers import Subscriber
from tests.integration import scenario as sc
from tests.reliability import harness as h
from tests.servers import MosquittoServer

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

STATUS_TOPIC = f"mmdwatch/{sc.SITE}/status"
STEPS = 3 * 288  # three days of 5-minute readings: 864 messages of 24 readings
OUTAGE_S = 4.0
TAIL = 12  # messages published only after the agent is back (an hour of readings)


@dataclass
class CrashableMosquitto(MosquittoServer):
    """mosquitto that can be SIGKILLed, with the persistence settings under test."""

    autosave: bool = False

    def _write_config(self) -> Path:
        path = super()._write_config()
        if self.persistent and self.autosave:
            # Saved after every change (a QoS 1 message in, a PUBACK out), not only on a
            # clean stop: what SIGKILL takes is at most the change being made.
            path.write_text(path.read_text() + "autosave_interval 1\nautosave_on_changes true\n")
        return path

    def kill(self) -> None:
        """SIGKILL: no goodbye, nothing saved beyond what autosave already wrote."""
        assert self._proc is not None
        self._proc.kill()
        self._proc.wait()
        self._proc = None
        if self._log is not None:
            self._log.close()  # type: ignore[attr-defined]
            self._log = None


class SessionPublisher(threading.Thread):
    """A QoS 1 publisher that keeps its session across broker restarts: paho queues what
    is published while disconnected and sends it (and resends what was not acknowledged)
    once connected again, which it tries every 0.1 s."""

    def __init__(self, port: int, messages: list[tuple[str, bytes]], pause_s: float = 0.01
                 ) -> None:
        super().__init__(daemon=True)
        self.messages, self.pause_s = messages, pause_s
        self.client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2,
                                  client_id="scada-gateway", clean_session=False)
        self.client.max_inflight_messages_set(50)
        self.client.max_queued_messages_set(0)
        self.client.reconnect_delay_set(0.1, 0.1)  # type: ignore[arg-type]
        self.client.connect("127.0.0.1", port)
        # PUBACKs by message id: a message published while disconnected has an info whose
        # rc says "not connected" although paho queued it and sends it later
        self.acked: set[int] = set()
        self.client.on_publish = lambda c, u, mid, rc, props: self.acked.add(mid)
        self.client.loop_start()
        self.infos: list[mqtt.MQTTMessageInfo] = []
        self.sent = 0  # messages handed to paho so far
        # the last TAIL messages wait for release(): sent once the agent is back, they
        # reach it whatever the broker lost, so the test knows when the replay is in
        self.released = threading.Event()

    def run(self) -> None:
        for i, (topic, payload) in enumerate(self.messages):
            if i == len(self.messages) - TAIL:
                self.released.wait(120)
            self.infos.append(self.client.publish(topic, payload, qos=1))
            self.sent += 1
            time.sleep(self.pause_s)

    def acknowledged(self) -> bool:
        return self.sent == len(self.messages) and all(i.mid in self.acked for i in self.infos)

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


def _stored(state: Path) -> set[tuple[str, float]]:
    rows = h.query(state / "readings.sqlite", "SELECT s.name, r.time FROM readings r "
                   "JOIN sensors s ON s.id = r.sensor_id")
    return {(name, float(t)) for name, t in rows}


def _replay_through_a_crash(tmp_path: Path, broker: CrashableMosquitto
                            ) -> tuple[set[tuple[str, float]], list[dict], float, str]:
    """Replay, SIGKILL the broker for OUTAGE_S, restart it; return the readings lost, the
    data_gap events seen on the status topic, the seconds from the restart to the agent's
    resubscription, and the agent's log."""
    times, values = sc.network(seed=3)
    times, values = times[:STEPS], values[:STEPS]
    messages = list(sc.mqtt_messages(times, values))
    sent = {(s, float(t)) for t in times for s in sc.SENSORS}
    state = tmp_path / "state"
    config = h.fast_config(state)
    # the agent's defaults for reconnecting: what is measured is what users get
    config["source"] = {"type": "mqtt", "host": "127.0.0.1", "port": broker.port,
                        "topics": [f"{sc.TOPIC_PREFIX}/#"], "client_id": "mmdwatch-crash"}
    config["schedule"]["start"] = sc.iso(sc.T0 + 60 * 86400)  # ingest only: no inspection
    config["sinks"] = [{"type": "mqtt", "host": "127.0.0.1", "port": broker.port}]
    agent = h.start_agent(tmp_path, config)
    publisher: SessionPublisher | None = None
    sub: Subscriber | None = None
    try:
        assert agent.wait_for_log("MQTT source connected", timeout=60), agent.log_text()[-3000:]
        publisher = SessionPublisher(broker.port, messages)
        publisher.start()
        # a third of the replay is in the store: the crash comes mid-stream
        assert h.wait_for(lambda: len(_stored(state)) >= len(sent) // 3, timeout=120), \
            agent.log_text()[-3000:]
        broker.kill()
        mark = len(agent.log_text())
        # The broker is down for OUTAGE_S, and comes back just after one of the agent's
        # reconnect attempts failed: its next one is then at least reconnect_min_s away,
        # so the publisher (0.1 s) is back first, as in the incident of issue 19.
        down_at = time.monotonic()
        assert h.wait_for(lambda: time.monotonic() - down_at >= OUTAGE_S, timeout=OUTAGE_S + 1)
        refused = "connectors.mqtt.source: nothing accepts connections"  # not the sink's
        failures = agent.log_text()[mark:].count(refused)
        assert h.wait_for(lambda: agent.log_text()[mark:].count(refused) > failures,
                          timeout=30), agent.log_text()[-3000:]
        broker.start()
        restarted = time.monotonic()
        sub = Subscriber(broker, STATUS_TOPIC)
        assert agent.wait_for_log("MQTT source connected", timeout=30, after=mark), \
            agent.log_text()[-3000:]
        back_after = time.monotonic() - restarted
        publisher.released.set()
        publisher.join(timeout=120)
        assert h.wait_for(publisher.acknowledged, timeout=120), "the publisher's replay stalled"
        last_time = float(times[-1])
        # the last message reached the store (published once the agent was back)
        assert h.wait_for(lambda: (sc.SENSORS[0], last_time) in _stored(state), timeout=60), \
            agent.log_text()[-3000:]
        lost = sent - _stored(state)
        if lost:  # wait for the gap check (1 s) and the event to arrive
            h.wait_for(lambda: sub is not None and sub.on(STATUS_TOPIC), timeout=30)
        events = [json.loads(p) for p, _ in sub.on(STATUS_TOPIC)]
    finally:
        if sub is not None:
            sub.close()
        if publisher is not None:
            publisher.close()
        code = agent.stop()
    assert code == 0, agent.log_text()[-3000:]
    return lost, events, back_after, agent.log_text()


def _covered(reading: tuple[str, float], events: list[dict]) -> bool:
    sensor, t = reading
    for e in events:
        start = calendar.timegm(time.strptime(e["start"], "%Y-%m-%dT%H:%M:%SZ"))
        end = calendar.timegm(time.strptime(e["end"], "%Y-%m-%dT%H:%M:%SZ"))
        if sensor in e["sensors"] and start < t < end:
            return True
    return False


def test_persistent_broker_killed_mid_replay_loses_nothing(tmp_path: Path) -> None:
    broker = CrashableMosquitto(tmp_path / "mosquitto", persistent=True, autosave=True).start()
    try:
        lost, events, back_after, log = _replay_through_a_crash(tmp_path, broker)
    finally:
        broker.stop()
    print(f"\npersistent broker SIGKILLed {OUTAGE_S:g}s: {len(lost)} readings lost, "
          f"agent resubscribed {back_after:.2f}s after the restart")
    assert not lost, f"{len(lost)} readings lost, e.g. {sorted(lost)[:5]}"
    assert [e for e in events if e["kind"] == "hole"] == []
    assert back_after <= 2.5, back_after  # reconnect_min_s 1 s: waits of 1-2 s
    assert re.search(r"MQTT source connected to \S+ after \d+\.\ds away", log)


def test_broker_without_persistence_loses_readings_and_says_so(tmp_path: Path) -> None:
    broker = CrashableMosquitto(tmp_path / "mosquitto", persistent=False).start()
    try:
        lost, events, back_after, log = _replay_through_a_crash(tmp_path, broker)
    finally:
        broker.stop()
    holes = [e for e in events if e["kind"] == "hole"]
    print(f"\nbroker without persistence SIGKILLed {OUTAGE_S:g}s: {len(lost)} readings lost, "
          f"agent resubscribed {back_after:.2f}s after the restart; data_gap events: "
          + "; ".join(f"{e['start']}..{e['end']} {len(e['sensors'])} sensors "
                      f"~{e['missing_readings']} readings" for e in holes))
    assert lost, "the broker forgot the session, yet nothing was lost: the test proves nothing"
    assert holes and all(e["event"] == "data_gap" and e["after_reconnect"] for e in holes)
    uncovered = [r for r in lost if not _covered(r, holes)]
    assert not uncovered, f"{len(uncovered)} lost readings outside every data_gap span"
    assert sum(e["missing_readings"] for e in holes) == len(lost)
    assert "data gap at site" in log and "after a reconnect" in log
