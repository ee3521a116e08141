"""MQTT stream source: subscribe, parse, hand batches to the store, then acknowledge.

Why no reading is lost:

* QoS 1 subscriptions on a persistent session (fixed ``client_id``, clean_session off):
  while the agent is away the broker queues readings for it;
* subscriptions are renewed in ``on_connect`` (a broker restarted without persistence
  forgets them);
* paho's automatic acknowledgement is off: a message's PUBACK is sent only after
  ``deliver`` (the store commit) returned. A crash in between leaves the message
  unacknowledged, and the broker sends it again on the next session (the store ignores
  the duplicate).

Messages are batched for throughput: the network thread only parses and queues; a worker
thread takes everything queued so far, delivers it in one call, then acknowledges it in
arrival order (MQTT requires PUBACKs in order).
"""
from __future__ import annotations

import builtins
import logging
import queue
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import paho.mqtt.client as mqtt
from pydantic import Field, field_validator

from connectors.base import ConnectorError, DeliverFn, Reading, StreamSource
from connectors.mqtt.client import (
    MqttConnectionConfig,
    ReportingClient,
    build_client,
    describe_connect_error,
    describe_refusal,
)
from connectors.mqtt.payload import compile_topic_pattern, parse_payload
from connectors.ratelimit import RateLimitedLog

log = logging.getLogger(__name__)


class MqttSourceConfig(MqttConnectionConfig):
    """``source: {type: mqtt, ...}`` (docs/mqtt.md, config.example.yaml)."""

    type: Literal["mqtt"] = "mqtt"
    topics: list[str] = Field(min_length=1)
    sensor_from_topic: str | None = None
    client_id: str = "mmdwatch"  # fixed: the broker keys the persistent session on it
    qos: Literal[0, 1, 2] = 1
    max_batch: int = Field(5000, ge=1)  # readings per deliver() call, at most
    reject_log_interval_s: float = Field(60.0, ge=0)

    @field_validator("sensor_from_topic")
    @classmethod
    def _pattern(cls, value: str | None) -> str | None:
        if value is not None:
            compile_topic_pattern(value)  # raises ValueError naming the fix
        return value

    @field_validator("topics")
    @classmethod
    def _topics(cls, value: list[str]) -> list[str]:
        for topic in value:
            if not topic or "#" in topic[:-1] or "\0" in topic:
                raise ValueError(f"topic filter {topic!r} is not valid MQTT; "
                                 "'#' may only end a filter, e.g. 'sensors/l-town/#'")
        return value

    @property
    def names_sites(self) -> bool:
        """True when each reading's site comes from its topic (a ``{site}`` level in
        ``sensor_from_topic``): one source for many sites."""
        return (self.sensor_from_topic is not None
                and compile_topic_pattern(self.sensor_from_topic).site_level is not None)

    @property
    def sites_in_topics(self) -> dict[str, str]:
        """``{"topics[i]": site}`` for each subscription whose ``{site}`` level is a literal
        (``sensors/north/#``), so the config can name a topic whose site is not configured."""
        if not self.names_sites:
            return {}
        assert self.sensor_from_topic is not None
        level = compile_topic_pattern(self.sensor_from_topic).site_level
        assert level is not None
        out: dict[str, str] = {}
        for i, topic in enumerate(self.topics):
            parts = topic.split("/")
            if "#" in parts[:level + 1] or level >= len(parts):
                continue
            if parts[level] != "+":
                out[f"topics[{i}]"] = parts[level]
        return out


@dataclass(slots=True)
class _Received:
    mid: int
    qos: int
    session: int  # connection number: a mid is meaningful only on its own connection
    readings: list[Reading]


class MqttSource(StreamSource):
    """Readings from MQTT topics, acknowledged after they are in the store."""

    type: ClassVar[str] = "mqtt"
    Config: ClassVar[builtins.type[MqttSourceConfig]] = MqttSourceConfig

    def __init__(self, config: MqttSourceConfig | dict[str, Any], *,
                 clock: Callable[[], float] = time.time) -> None:
        self.config = config if isinstance(config, MqttSourceConfig) else \
            MqttSourceConfig.model_validate(config)
        self._clock = clock
        self._queue: queue.Queue[_Received] = queue.Queue()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._rejects = RateLimitedLog(log, self.config.reject_log_interval_s)
        self._client: mqtt.Client | None = None
        self._worker: threading.Thread | None = None
        self._deliver: DeliverFn | None = None
        # health counters (read from other threads; ints are replaced atomically)
        self._connected = False
        self._subscribed = False
        # (outage note, session present) from the last CONNACK, logged once subscribed
        self._connect_note: tuple[str, bool] = ("", False)
        self._session = 0
        self._accepted = 0
        self._messages = 0
        self._rejected: Counter[str] = Counter()
        self._connect_attempts = 0
        self._connect_failures = 0
        self._last_error: str | None = None
        self._deliver_failures = 0
        self._lost_at: float | None = None  # monotonic time the connection was lost
        self.last_outage_s: float | None = None  # lost -> connected again, the last time

    def __repr__(self) -> str:
        c = self.config
        return f"MqttSource(host={c.host!r}, port={c.port}, topics={c.topics!r})"

    # -- lifecycle -------------------------------------------------------------------------

    def start(self, deliver: DeliverFn) -> None:
        if self._client is not None:
            raise ConnectorError("MqttSource.start called twice; build a new source instead")
        self._deliver = deliver
        c = self.config
        client = build_client(c, client_id=c.client_id, clean_session=False,
                              manual_ack=c.qos > 0, logger=log)
        client.on_connect = self._on_connect
        client.on_disconnect = self._on_disconnect
        client.on_subscribe = self._on_subscribe
        client.on_message = self._on_message
        client.on_connect_error = self._on_connect_error
        self._client = client
        self._worker = threading.Thread(target=self._drain, name="mqtt-source-deliver",
                                        daemon=True)
        self._worker.start()
        self._connect_attempts += 1
        client.connect_async(c.host, c.port, keepalive=c.keepalive_s)
        client.loop_start()
        log.info("MQTT source connecting to %s, topics %s", c.address, c.topics)

    def stop(self) -> None:
        """Stop: deliver and acknowledge what is in hand, then disconnect. Idempotent."""
        if self._stop.is_set():
            return
        self._stop.set()
        if self._worker is not None:
            self._worker.join(timeout=30)
        if self._client is not None:
            self._client.disconnect()
            self._client.loop_stop()
        self._connected = False

    def health(self) -> dict[str, Any]:
        return {
            "connected": self._connected,
            # the broker confirmed the subscriptions on this connection
            "subscribed": self._subscribed,
            "accepted": self._accepted,
            "messages": self._messages,
            "rejected": dict(self._rejected),
            "pending_messages": self._queue.qsize(),
            "connect_attempts": self._connect_attempts,
            # connections accepted so far: a change tells a reader that readings after it
            # came over a new connection (a hole there is an outage's, see monitor.service.gaps)
            "sessions": self._session,
            "connect_failures": self._connect_failures,
            "deliver_failures": self._deliver_failures,
            "last_error": self._last_error,
            "last_outage_s": self.last_outage_s,
        }

    # -- paho callbacks (network thread) ------------------------------------------------

    def _on_connect(self, client: mqtt.Client, userdata: object, flags: mqtt.ConnectFlags,
                    reason: mqtt.ReasonCode, properties: object) -> None:
        if reason.is_failure:
            self._connect_failures += 1
            self._last_error = describe_refusal(reason, self.config)
            log.error("%s (retrying with backoff)", self._last_error)
            return
        if isinstance(client, ReportingClient):
            client.note_connected()
        with self._lock:
            self._session += 1
        self._connected = True
        self._last_error = None
        subscriptions: list[tuple[str, int]] = [(topic, int(self.config.qos))
                                                for topic in self.config.topics]
        outage = ""
        if self._lost_at is not None:
            # how long the agent was away: what a broker without the session lost is
            # whatever its publishers sent in this time (monitor.service.gaps reports the hole)
            self.last_outage_s = time.monotonic() - self._lost_at
            outage = f" after {self.last_outage_s:.1f}s away"
            self._lost_at = None
        # "connected" is said once the broker has confirmed the subscriptions (_on_subscribe):
        # before that, what a publisher sends does not reach this agent
        self._connect_note = (outage, bool(flags.session_present))
        client.subscribe(subscriptions)
        log.debug("MQTT source: %s accepted the connection; subscribing to %s",
                  self.config.address, self.config.topics)

    def _on_subscribe(self, client: mqtt.Client, userdata: object, mid: int,
                      reason_codes: list[mqtt.ReasonCode], properties: object) -> None:
        refused = [topic for topic, code in zip(self.config.topics, reason_codes, strict=False)
                   if code.is_failure]
        if refused:
            self._last_error = (f"broker {self.config.address} refused the subscription to "
                                f"{', '.join(refused)}; allow this client "
                                f"({self.config.client_id}) to read there in the broker's "
                                f"ACL, or change source.topics")
            log.error("MQTT source: %s", self._last_error)
            return
        outage, session_present = self._connect_note
        self._subscribed = True
        log.info("MQTT source connected to %s%s (session present: %s), subscribed to %s",
                 self.config.address, outage, session_present, self.config.topics)

    def _on_connect_error(self, exc: BaseException) -> None:
        self._connect_attempts += 1
        self._connect_failures += 1
        self._last_error = describe_connect_error(exc, self.config)
        log.error("%s (retrying with backoff)", self._last_error)

    def _on_disconnect(self, client: mqtt.Client, userdata: object,
                       flags: mqtt.DisconnectFlags, reason: mqtt.ReasonCode,
                       properties: object) -> None:
        was = self._connected
        self._connected = False
        self._subscribed = False
        if was:
            self._lost_at = time.monotonic()
        if not self._stop.is_set():
            self._connect_attempts += 1
            if was:
                log.warning("MQTT source lost %s (%s); reconnecting with backoff",
                            self.config.address, reason)

    def _on_message(self, client: mqtt.Client, userdata: object,
                    msg: mqtt.MQTTMessage) -> None:
        result = parse_payload(msg.payload, msg.topic, self._clock(),
                               self.config.sensor_from_topic)
        self._messages += 1
        for reason in result.rejected:
            self._rejected[reason] += 1
            self._rejects.warning(reason, "MQTT source rejected an item on %r: %s "
                                  "(payload starts %r)", msg.topic, reason, msg.payload[:80])
        # Rejected-only messages are queued too: their ack must keep its place in order.
        self._queue.put(_Received(msg.mid, msg.qos, self._session, result.readings))

    # -- worker thread ----------------------------------------------------------------------

    def _take_batch(self) -> list[_Received]:
        try:
            first = self._queue.get(timeout=0.2)
        except queue.Empty:
            return []
        batch, size = [first], len(first.readings)
        while size < self.config.max_batch:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            batch.append(item)
            size += len(item.readings)
        return batch

    def _drain(self) -> None:
        assert self._deliver is not None
        while not self._stop.is_set():
            batch = self._take_batch()
            if not batch:
                continue
            readings = [r for item in batch for r in item.readings]
            if readings and not self._deliver_with_retry(readings):
                return  # stopping: unacknowledged messages come back next session
            self._accepted += len(readings)
            self._ack(batch)

    def _deliver_with_retry(self, readings: list[Reading]) -> bool:
        assert self._deliver is not None
        delay = 0.5
        while True:
            try:
                self._deliver(readings)
                return True
            except Exception as exc:  # noqa: BLE001 - a store failure must not kill the source
                self._deliver_failures += 1
                log.error("could not commit %d MQTT readings to the store (%s); retrying in "
                          "%.1fs, the broker keeps them until then", len(readings), exc, delay)
                if self._stop.wait(delay):
                    return False
                delay = min(delay * 2, 30.0)

    def _ack(self, batch: list[_Received]) -> None:
        client = self._client
        if client is None:
            return
        with self._lock:
            session = self._session
        for item in batch:
            # After a reconnect the broker resends unacknowledged messages under the same
            # or new ids; acknowledging an old id on the new connection could ack the
            # wrong message, so stale ones are left for redelivery.
            if item.qos > 0 and item.session == session:
                client.ack(item.mid, item.qos)
