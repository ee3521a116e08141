"""Small real-broker helpers for the MQTT tests: a publisher, a subscriber, a store stand-in."""
from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable

import paho.mqtt.client as mqtt

from connectors.base import Reading
from tests.servers import MosquittoServer


def wait_until(predicate: Callable[[], bool], timeout: float = 10.0, every: float = 0.02) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(every)
    return predicate()


class Collected:
    """A deliver() target that keeps readings in memory (the store's place in these tests)."""

    def __init__(self, fail_times: int = 0) -> None:
        self.readings: list[Reading] = []
        self.calls = 0
        self.fail_times = fail_times
        self._lock = threading.Lock()

    def __call__(self, batch) -> None:
        with self._lock:
            self.calls += 1
            if self.calls <= self.fail_times:
                raise OSError("disk full (test)")
            self.readings.extend(batch)

    def __len__(self) -> int:
        with self._lock:
            return len(self.readings)

    def keys(self) -> set[tuple[str, float]]:
        with self._lock:
            return {(r.sensor, r.time) for r in self.readings}


def _client(server: MosquittoServer, client_id: str = "") -> mqtt.Client:
    kw = server.client_kwargs()
    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id)
    if kw.get("username"):
        client.username_pw_set(kw["username"], kw["password"])
    if kw.get("tls"):
        client.tls_set(ca_certs=kw["tls"]["ca_certs"])
    return client


def publish(server: MosquittoServer, messages: Iterable[tuple[str, bytes | str]],
            qos: int = 1) -> int:
    """Publish (topic, payload) pairs with QoS 1 and wait for every PUBACK."""
    client = _client(server)
    client.max_inflight_messages_set(200)
    client.connect(server.client_kwargs()["host"], server.port)
    client.loop_start()
    infos = [client.publish(topic, payload, qos=qos) for topic, payload in messages]
    for info in infos:
        info.wait_for_publish(30)
        assert info.is_published()
    client.disconnect()
    client.loop_stop()
    return len(infos)


class Subscriber:
    """Collects (topic, payload, retain) from a topic filter in the background."""

    def __init__(self, server: MosquittoServer, topic: str) -> None:
        self.messages: list[tuple[str, bytes, bool]] = []
        self._client = _client(server)
        self._ready = threading.Event()

        def on_connect(c, u, f, rc, p):
            c.subscribe(topic, qos=1)

        self._client.on_connect = on_connect
        self._client.on_subscribe = lambda *a: self._ready.set()
        self._client.on_message = lambda c, u, m: self.messages.append(
            (m.topic, m.payload, bool(m.retain)))
        self._client.connect(server.client_kwargs()["host"], server.port)
        self._client.loop_start()
        assert self._ready.wait(30), "subscription not acknowledged"

    def on(self, topic: str) -> list[tuple[bytes, bool]]:
        return [(p, r) for t, p, r in list(self.messages) if t == topic]

    def close(self) -> None:
        self._client.disconnect()
        self._client.loop_stop()
