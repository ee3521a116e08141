"""MQTT sink: every result to ``<prefix>/<site>/state`` (retained); to
``<prefix>/<site>/alert`` (not retained) the results that carry an incident event (opened,
updated, resolved), or, for results with no incident (a one-shot ``inspect``), the firing
ones; QoS 1;
availability with a last will; agent events such as ``data_gap`` to ``<prefix>/<site>/status``
(QoS 1, not retained).

``send`` returns only after the broker's PUBACK for each message, so the outbox marks a
result delivered only when the broker has it. Results carry their ``fingerprint``:
consumers that must see each alert once deduplicate on it (a timed-out send is retried
by the outbox, and paho may still deliver the first copy after a reconnect).

``role: publisher`` (what ``inspect --publish`` and ``backfill --publish`` use) sends results
only: ``state`` not retained (the agent's latest result stays the retained one), no
availability messages or last will, and a client id of its own, so a one-shot command never
takes over the agent's session or says it is offline.
"""
from __future__ import annotations

import builtins
import logging
import os
import threading
import time
from typing import Any, ClassVar, Literal

import paho.mqtt.client as mqtt
from pydantic import Field, field_validator

from connectors.base import Sink as SinkBase
from connectors.base import SinkError, within_accepted_change
from connectors.json_safe import dumps
from connectors.mqtt.client import (
    MqttConnectionConfig,
    build_client,
    describe_connect_error,
    describe_refusal,
)
from connectors.mqtt.commands import MqttCommandsConfig

log = logging.getLogger(__name__)

ONLINE, OFFLINE = "online", "offline"


class MqttSinkConfig(MqttConnectionConfig):
    """``sinks: - {type: mqtt, ...}``."""

    type: Literal["mqtt"] = "mqtt"
    prefix: str = "mmdwatch"
    # Usually left out: the agent passes the top-level ``site`` to the constructor, and
    # every result names its site anyway.
    site: str | None = None
    publish_timeout_s: float = Field(10.0, gt=0)
    connect_timeout_s: float = Field(10.0, gt=0)
    # agent: availability + last will, `state` retained. publisher: results only (set by
    # the one-shot --publish commands; see the module docstring).
    role: Literal["agent", "publisher"] = "agent"
    # command topics the agent subscribes to on this broker (docs/mqtt.md, "Acks"); off
    # by default. Used by the agent only (monitor.compose.build_commands), never by --publish.
    commands: MqttCommandsConfig = Field(default_factory=MqttCommandsConfig)

    @field_validator("prefix")
    @classmethod
    def _prefix(cls, value: str) -> str:
        if not value or any(ch in value for ch in "+#\0"):
            raise ValueError(f"prefix {value!r} must be a plain topic prefix without "
                             "wildcards, e.g. 'mmdwatch'")
        return value.rstrip("/")


def is_alert(result: dict[str, Any]) -> bool:
    """An incident event (docs/result.md, "Incidents"), or a firing result with no incident
    that is not within a change an operator's ack accepted (``detection.accepted``)."""
    incident = result.get("incident")
    if incident:
        return bool(incident.get("event"))
    if within_accepted_change(result):
        return False
    return result.get("status") == "firing"


def topics(prefix: str, site: str) -> dict[str, str]:
    """The topics of one site."""
    base = f"{prefix}/{site}"
    return {"state": f"{base}/state", "alert": f"{base}/alert",
            "availability": f"{base}/availability", "status": f"{base}/status"}


class MqttSink(SinkBase):
    """Publishes inspection results to the broker."""

    type: ClassVar[str] = "mqtt"
    Config: ClassVar[builtins.type[MqttSinkConfig]] = MqttSinkConfig

    def __init__(self, config: MqttSinkConfig | dict[str, Any], *,
                 site: str | None = None) -> None:
        self.config = config if isinstance(config, MqttSinkConfig) else \
            MqttSinkConfig.model_validate(config)
        self._site = site or self.config.site
        self._client: mqtt.Client | None = None
        self._lock = threading.Lock()
        self._connected = threading.Event()
        self._last_error: str | None = None
        if self._site:
            self._connect(self._site)

    def __repr__(self) -> str:
        return f"MqttSink(host={self.config.host!r}, port={self.config.port}, " \
               f"prefix={self.config.prefix!r}, site={self._site!r})"

    @property
    def name(self) -> str:
        return f"mqtt:{self.config.host}:{self.config.port}/{self.config.prefix}"

    def _connect(self, site: str) -> None:
        c = self.config
        self._site = site
        agent = c.role == "agent"
        client_id = c.client_id or f"mmdwatch-sink-{site}"
        if not agent:  # never the agent's id: the broker would drop the agent's session
            client_id = f"{client_id}-publish-{os.getpid()}"
        client = build_client(c, client_id=client_id,
                              clean_session=True, manual_ack=False, logger=log)
        availability = topics(c.prefix, site)["availability"]
        if agent:
            client.will_set(availability, OFFLINE, qos=1, retain=True)

        def on_connect(cl: mqtt.Client, userdata: object, flags: object,
                       reason: mqtt.ReasonCode, properties: object) -> None:
            if reason.is_failure:
                self._last_error = describe_refusal(reason, c)
                log.error("%s (retrying with backoff)", self._last_error)
                return
            self._last_error = None
            client.note_connected()
            if agent:
                cl.publish(availability, ONLINE, qos=1, retain=True)
            self._connected.set()
            log.info("MQTT sink connected to %s, publishing under %s/%s/",
                     c.address, c.prefix, site)

        def on_disconnect(*_: object) -> None:
            self._connected.clear()

        def on_connect_error(exc: BaseException) -> None:
            self._last_error = describe_connect_error(exc, c)
            log.error("%s (retrying with backoff)", self._last_error)

        client.on_connect = on_connect
        client.on_disconnect = on_disconnect
        client.on_connect_error = on_connect_error
        client.connect_async(c.host, c.port, keepalive=c.keepalive_s)
        client.loop_start()
        self._client = client

    def _ready(self, message: dict[str, Any], what: str) -> tuple[mqtt.Client, str]:
        """The connected client and the site ``message`` goes under."""
        site = message.get("site") or self._site
        if not site:
            raise SinkError(f"{what} has no 'site' and the MQTT sink was given none; "
                            "set the top-level 'site' key")
        with self._lock:
            if self._client is None:
                self._connect(str(site))
        if not self._connected.wait(self.config.connect_timeout_s):
            raise SinkError(f"MQTT sink not connected to {self.config.address}: "
                            f"{self._last_error or 'no answer yet'}; the outbox keeps the "
                            "result and retries")
        assert self._client is not None
        return self._client, str(site)

    def send(self, result: dict[str, Any]) -> None:
        client, site = self._ready(result, "result")
        names = topics(self.config.prefix, site)
        payload = dumps(result)
        infos = [client.publish(names["state"], payload, qos=1,
                                retain=self.config.role == "agent")]
        if is_alert(result):
            infos.append(client.publish(names["alert"], payload, qos=1, retain=False))
        self._wait(infos)

    def send_event(self, event: dict[str, Any]) -> None:
        """An agent event (``data_gap``) on ``<prefix>/<site>/status``, QoS 1, not
        retained: a retained gap would greet every new subscriber as if it were current."""
        if self.config.role != "agent":
            return  # one-shot commands publish results only
        client, site = self._ready(event, "event")
        self._wait([client.publish(topics(self.config.prefix, site)["status"], dumps(event),
                                   qos=1, retain=False)])

    def _wait(self, infos: list[mqtt.MQTTMessageInfo]) -> None:
        deadline = time.monotonic() + self.config.publish_timeout_s
        for info in infos:
            try:
                info.wait_for_publish(max(0.0, deadline - time.monotonic()))
            except (RuntimeError, ValueError) as exc:
                raise SinkError(f"MQTT publish to {self.config.address} failed ({exc}); "
                                "the outbox retries") from exc
            if not info.is_published():
                raise SinkError(f"no PUBACK from MQTT broker {self.config.address} within "
                                f"{self.config.publish_timeout_s:g}s; the outbox retries")

    def close(self) -> None:
        """Publish ``offline`` (retained), then disconnect. Idempotent."""
        client, self._client = self._client, None
        if client is None:
            return
        if self._connected.is_set() and self._site and self.config.role == "agent":
            info = client.publish(topics(self.config.prefix, self._site)["availability"],
                                  OFFLINE, qos=1, retain=True)
            try:
                info.wait_for_publish(2.0)
            except (RuntimeError, ValueError):
                pass
        client.disconnect()
        client.loop_stop()
        self._connected.clear()
