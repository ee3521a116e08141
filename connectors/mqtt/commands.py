"""MQTT command topics: operators' acks on ``<prefix>/<site>/ack`` (docs/mqtt.md).

Off unless an MQTT sink's config says ``commands: {ack: true}``. The listener subscribes
with QoS 1, on a persistent MQTT 5 session (an ack sent while the agent is down arrives
when it is back), to the ack topic of every site the agent runs, under the sink's prefix
and connection settings. Each message is parsed here into an :class:`AckCommand` and
handed to the ``on_ack`` callback the composition root passes in (it checks the incident
and stores the ack; this module knows nothing of the agent). The broker's PUBACK follows
the callback, so an ack received but not stored when the process dies is sent again.

Who may publish an ack is the broker's business (authentication and ACLs on the topic):
an MQTT 3.1.1 subscriber learns nothing about the publisher, so the ack records the
payload's ``by`` and, when the publisher sends one (MQTT 5), the user property
``client_id``. A bad payload, a retained ack, or an ack the callback refuses
(:class:`CommandRejected`) is logged with the reason and dropped; nothing here raises
into paho's network thread.
"""
from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import paho.mqtt.client as mqtt
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from pydantic import BaseModel, ConfigDict

from connectors.mqtt.client import (
    MqttConnectionConfig,
    build_client,
    describe_connect_error,
    describe_refusal,
)

log = logging.getLogger(__name__)

#: How long the broker keeps the listener's session (and queues acks) while it is away.
SESSION_EXPIRY_S = 7 * 86400
MAX_PAYLOAD = 64 * 1024
MAX_FIELD = 256
MAX_NOTE = 2000
ACK_KEYS = ("incident", "by", "note")
#: The MQTT 5 user property naming the publishing client (recorded when present).
CLIENT_ID_PROPERTY = "client_id"
EXAMPLE = '{"incident": "<id>", "by": "<name>", "note": "<why>"}'


class MqttCommandsConfig(BaseModel):
    """``commands:`` of an MQTT sink: which command topics the agent subscribes to."""

    model_config = ConfigDict(extra="forbid")

    ack: bool = False  # subscribe to <prefix>/<site>/ack (off: no subscription at all)

    @property
    def any(self) -> bool:
        return self.ack


class BadCommand(ValueError):
    """A command message that cannot be read; the message says what to send instead."""


class CommandRejected(Exception):
    """Raised by an ``on_ack`` callback for an ack it refuses (e.g. no such open incident);
    logged as a warning with its message, the MQTT message is acknowledged and dropped."""


@dataclass(frozen=True)
class AckCommand:
    """One parsed ack: site (from the topic), incident id, who, why, the publisher's
    ``client_id`` user property (MQTT 5; None when not sent), and the topic."""

    site: str
    incident: str
    by: str
    note: str
    client_id: str | None
    topic: str

    @property
    def who(self) -> str:
        """``by`` plus the client identity the message carried, for the record."""
        if self.client_id is None:
            return f"{self.by} (mqtt client not given)"
        return f"{self.by} (mqtt client {self.client_id})"


def ack_topic(prefix: str, site: str) -> str:
    return f"{prefix}/{site}/ack"


def _text(data: dict[str, Any], key: str, limit: int, *, required: bool) -> str:
    value = data.get(key)
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value.strip()):
        what = {"incident": "the open incident's id", "by": "who accepts it",
                "note": "a free text"}[key]
        raise BadCommand(f"'{key}' must be a non-empty string ({what}); send {EXAMPLE}"
                         if required else f"'{key}' must be a string; send {EXAMPLE}")
    value = value.strip()
    if len(value) > limit:
        raise BadCommand(f"'{key}' is longer than {limit} characters; shorten it")
    if key != "note" and not value.isprintable():
        raise BadCommand(f"'{key}' holds control characters; send plain text")
    return value


def parse_ack(payload: bytes | bytearray, *, site: str, topic: str,
              client_id: str | None = None) -> AckCommand:
    """The ack in ``payload`` (JSON ``{"incident", "by", "note"}``, note optional);
    :class:`BadCommand` naming what is wrong and what to send."""
    if not payload:
        raise BadCommand(f"empty payload; send {EXAMPLE}")
    if len(payload) > MAX_PAYLOAD:
        raise BadCommand(f"payload of {len(payload)} bytes is over {MAX_PAYLOAD}; send "
                         f"{EXAMPLE}")
    try:
        data = json.loads(bytes(payload).decode("utf-8"))
    except UnicodeDecodeError:
        raise BadCommand(f"payload is not UTF-8; send {EXAMPLE}") from None
    except json.JSONDecodeError as exc:
        raise BadCommand(f"payload is not JSON ({exc.msg} at {exc.pos}); send {EXAMPLE}"
                         ) from None
    if not isinstance(data, dict):
        raise BadCommand(f"payload must be a JSON object, not {type(data).__name__}; send "
                         f"{EXAMPLE}")
    unknown = sorted(set(data) - set(ACK_KEYS))
    if unknown:
        raise BadCommand(f"unknown key(s) {', '.join(map(repr, unknown))}; an ack has only "
                         f"{', '.join(ACK_KEYS)}")
    return AckCommand(site=site, incident=_text(data, "incident", MAX_FIELD, required=True),
                      by=_text(data, "by", MAX_FIELD, required=True),
                      note=_text(data, "note", MAX_NOTE, required=False),
                      client_id=client_id, topic=topic)


def publisher_client_id(properties: Any) -> str | None:
    """The ``client_id`` user property of an MQTT 5 message (None: not sent, or 3.1.1)."""
    pairs = getattr(properties, "UserProperty", None) or []
    for key, value in pairs:
        if key == CLIENT_ID_PROPERTY and isinstance(value, str):
            text = value.strip()[:MAX_FIELD]
            if text and text.isprintable():
                return text
    return None


class MqttCommandListener:
    """Subscribes to ``<prefix>/<site>/ack`` for each of ``sites`` and hands each ack to
    ``on_ack``. ``start``/``stop``, as the agent's services."""

    def __init__(self, config: MqttConnectionConfig, *, prefix: str, sites: Sequence[str],
                 on_ack: Callable[[AckCommand], object], client_id: str) -> None:
        if not sites:
            raise ValueError("MqttCommandListener needs at least one site")
        self.config = config
        self.prefix = prefix.rstrip("/")
        self.topics = {ack_topic(self.prefix, site): site for site in sites}
        self.client_id = client_id
        self._on_ack = on_ack
        self._client: mqtt.Client | None = None
        self._subscribed = threading.Event()
        self.received = 0
        self.accepted = 0
        self.rejected = 0

    def __repr__(self) -> str:
        return (f"MqttCommandListener(host={self.config.host!r}, port={self.config.port}, "
                f"topics={sorted(self.topics)!r})")

    def start(self) -> None:
        if self._client is not None:
            return
        c = self.config
        client = build_client(c, client_id=self.client_id, clean_session=False,
                              manual_ack=False, logger=log, protocol=mqtt.MQTTv5)
        client.on_connect = self._on_connect
        client.on_subscribe = self._on_subscribe
        client.on_message = self._on_message
        client.on_connect_error = self._on_connect_error
        props = Properties(PacketTypes.CONNECT)
        props.SessionExpiryInterval = SESSION_EXPIRY_S
        client.connect_async(c.host, c.port, keepalive=c.keepalive_s, clean_start=False,
                             properties=props)
        client.loop_start()
        self._client = client
        log.info("MQTT commands: connecting to %s to receive acks on %s", c.address,
                 ", ".join(sorted(self.topics)))

    def wait_subscribed(self, timeout: float) -> bool:
        """True once the broker has confirmed the subscriptions (tests, start-up logs)."""
        return self._subscribed.wait(timeout)

    def stop(self) -> None:
        client, self._client = self._client, None
        if client is None:
            return
        client.disconnect()
        client.loop_stop()
        self._subscribed.clear()

    # -- paho callbacks (network thread; nothing may raise out of them) ---------------------
    def _on_connect(self, client: mqtt.Client, userdata: object, flags: mqtt.ConnectFlags,
                    reason: mqtt.ReasonCode, properties: object) -> None:
        if reason.is_failure:
            log.error("MQTT commands: %s (retrying with backoff)",
                      describe_refusal(reason, self.config))
            return
        # retained acks are never sent at subscribe (they would return after every
        # reconnect); a broker that sends them anyway has them dropped in _handle
        options = mqtt.SubscribeOptions(qos=1,
                                        retainHandling=mqtt.SubscribeOptions.RETAIN_DO_NOT_SEND)
        client.subscribe([(topic, options) for topic in sorted(self.topics)])
        log.info("MQTT commands connected to %s (session present: %s)", self.config.address,
                 flags.session_present)

    def _on_subscribe(self, client: mqtt.Client, userdata: object, mid: int,
                      reason_codes: list[mqtt.ReasonCode], properties: object) -> None:
        refused = [topic for topic, code in zip(sorted(self.topics), reason_codes,
                                                strict=False) if code.is_failure]
        if refused:
            log.error("MQTT commands: broker %s refused the subscription to %s; allow this "
                      "client (%s) to subscribe there in the broker's ACL, or turn "
                      "commands.ack off", self.config.address, ", ".join(refused),
                      self.client_id)
            return
        log.info("MQTT commands: subscribed to %s (QoS 1)", ", ".join(sorted(self.topics)))
        self._subscribed.set()

    def _on_connect_error(self, exc: BaseException) -> None:
        log.error("MQTT commands: %s (retrying with backoff)",
                  describe_connect_error(exc, self.config))

    def _on_message(self, client: mqtt.Client, userdata: object,
                    msg: mqtt.MQTTMessage) -> None:
        try:
            self._handle(msg)
        except Exception:  # never into paho's network thread
            self.rejected += 1
            log.exception("MQTT commands: the ack on %s could not be stored; it is dropped, "
                          "publish it again once the agent's state database is writable",
                          msg.topic)

    def _handle(self, msg: mqtt.MQTTMessage) -> None:
        self.received += 1
        site = self.topics.get(msg.topic)
        if site is None:  # not one of ours (a broker that delivers more than asked)
            self.rejected += 1
            log.warning("MQTT commands: message on %s ignored: not an ack topic of this "
                        "agent (%s)", msg.topic, ", ".join(sorted(self.topics)))
            return
        client_id = publisher_client_id(getattr(msg, "properties", None))
        sender = client_id or "not given"
        if msg.retain:
            self.rejected += 1
            log.warning("MQTT commands: retained ack on %s (client %s) ignored: publish acks "
                        "without retain (a retained one would return after every "
                        "reconnect); clear it with an empty retained message to %s",
                        msg.topic, sender, msg.topic)
            return
        try:
            command = parse_ack(msg.payload, site=site, topic=msg.topic, client_id=client_id)
        except BadCommand as exc:
            self.rejected += 1
            log.warning("MQTT commands: bad ack on %s (client %s) ignored: %s", msg.topic,
                        sender, exc)
            return
        log.info("MQTT commands: ack received on %s for incident %s by %s (client %s)",
                 msg.topic, command.incident, command.by, sender)
        try:
            self._on_ack(command)
        except CommandRejected as exc:
            self.rejected += 1
            log.warning("MQTT commands: ack on %s for incident %s by %s ignored: %s",
                        msg.topic, command.incident, command.by, exc)
            return
        self.accepted += 1
