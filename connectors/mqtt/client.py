"""Connection settings and a paho client shared by the MQTT source and sink.

Connection failures never raise into the agent: paho's network thread retries, and each
failure is logged once per attempt with what to fix (wrong password, untrusted
certificate, nothing listening).

The waits between attempts come from :class:`ReconnectBackoff`, not from paho's own
doubling: for the first ``reconnect_fast_s`` (60 s) of an outage every wait is
``reconnect_min_s`` to twice that (1-2 s by default, jittered so that many clients do not
return in step), and only then do they double up to ``reconnect_max_s``. A broker that
crashes and is back 20 s later is found again within about 2 s; paho's plain doubling had
grown to 16 s by then, and everything published meanwhile to a broker that had lost the
agent's session went to nobody.
"""
from __future__ import annotations

import logging
import random
import socket
import ssl
import threading
import time
from collections.abc import Callable
from pathlib import Path

import paho.mqtt.client as mqtt
from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator


class MqttTlsConfig(BaseModel):
    """TLS towards the broker.

    On when ``enabled`` is true, or (``enabled`` left out) when any file is set, so the
    all-null template ``tls: {ca_certs: null, certfile: null, keyfile: null}`` stays plain
    TCP. ``ca_certs`` null = the system CAs.
    """

    model_config = ConfigDict(extra="forbid")

    enabled: bool | None = None
    ca_certs: Path | None = None
    certfile: Path | None = None  # client certificate (mutual TLS)
    keyfile: Path | None = None

    @model_validator(mode="after")
    def _pair(self) -> MqttTlsConfig:
        if (self.certfile is None) != (self.keyfile is None):
            raise ValueError("tls.certfile and tls.keyfile go together: set both or neither")
        return self

    @property
    def active(self) -> bool:
        if self.enabled is not None:
            return self.enabled
        return any(v is not None for v in (self.ca_certs, self.certfile, self.keyfile))


class MqttConnectionConfig(BaseModel):
    """Keys common to the MQTT source and sink."""

    model_config = ConfigDict(extra="forbid")

    host: str = "127.0.0.1"
    port: int = Field(1883, ge=1, le=65535)
    client_id: str | None = None
    username: str | None = None
    password: SecretStr | None = None
    tls: MqttTlsConfig | None = None  # see MqttTlsConfig for when TLS is on
    keepalive_s: int = Field(30, ge=5)
    reconnect_min_s: float = Field(1.0, gt=0)
    reconnect_max_s: float = Field(60.0, gt=0)
    # how long into an outage the waits stay at reconnect_min_s..2x (then they double)
    reconnect_fast_s: float = Field(60.0, ge=0)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


def describe_connect_error(exc: BaseException, config: MqttConnectionConfig) -> str:
    """One line saying what went wrong connecting to the broker and what to change."""
    where = f"MQTT broker {config.address}"
    if isinstance(exc, ssl.SSLCertVerificationError):
        return (f"TLS certificate of {where} is not trusted ({exc.verify_message}); set "
                "tls.ca_certs to the CA file that signed the broker's certificate "
                "(and connect by the host name the certificate names)")
    if isinstance(exc, ssl.SSLError):
        return (f"TLS handshake with {where} failed ({exc}); check that this port speaks "
                "TLS and that tls.certfile/tls.keyfile are a valid pair")
    if isinstance(exc, ConnectionRefusedError):
        return f"nothing accepts connections at {where}; check host/port and that the broker runs"
    if isinstance(exc, socket.gaierror):
        return f"cannot resolve host of {where} ({exc}); check the host key"
    if isinstance(exc, (FileNotFoundError, PermissionError)):
        return f"cannot read a TLS file for {where} ({exc}); check the tls.* paths"
    return f"cannot connect to {where}: {exc!r}; check host/port and the network"


def describe_refusal(reason: mqtt.ReasonCode, config: MqttConnectionConfig) -> str:
    """One line for a CONNACK refusal (bad credentials and the like)."""
    text = str(reason)
    fix = "check the broker's configuration"
    if reason.value in (4, 5, 134, 135):  # bad user name or password / not authorized
        fix = ("check username and password (use ${ENV_VAR} in the config for secrets)"
               if config.username else "the broker requires a username and password")
    elif reason.value in (2, 133):  # identifier rejected / client identifier not valid
        fix = "choose another client_id"
    return f"MQTT broker {config.address} refused the connection: {text}; {fix}"


class ReconnectBackoff:
    """The wait before each reconnect attempt.

    For the first ``fast_s`` seconds of an outage (counted from its first attempt): a
    uniform draw in ``[min_s, 2 * min_s]`` (capped at ``max_s``), so a short broker outage
    costs at most about ``2 * min_s`` and many agents do not reconnect in lockstep. After
    that: doubling from ``2 * min_s`` up to ``max_s``, each wait drawn from the upper half
    of its step ("equal jitter"), so a broker that stays away is not hammered.
    """

    def __init__(self, min_s: float, max_s: float, fast_s: float = 60.0, *,
                 rng: Callable[[], float] = random.random,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.min_s = min_s
        self.max_s = max(min_s, max_s)
        self.fast_s = fast_s
        self._rng = rng
        self._clock = clock
        self._lock = threading.Lock()
        self._since: float | None = None  # first attempt of the current outage
        self._slow_steps = 0

    def reset(self) -> None:
        """Connected: the next outage starts afresh."""
        with self._lock:
            self._since = None
            self._slow_steps = 0

    def outage_s(self) -> float:
        """Seconds since the current outage's first attempt (0 when connected)."""
        with self._lock:
            return 0.0 if self._since is None else self._clock() - self._since

    def next_delay(self) -> float:
        """The wait before the next attempt; starts the outage clock on its first call."""
        with self._lock:
            now = self._clock()
            if self._since is None:
                self._since = now
            if now - self._since < self.fast_s:
                return min(self.max_s, self.min_s * (1.0 + self._rng()))
            self._slow_steps += 1
            step = min(self.max_s, self.min_s * 2.0 ** (self._slow_steps + 1))
            return max(self.min_s, step * (0.5 + 0.5 * self._rng()))


class ReportingClient(mqtt.Client):
    """A paho client that reports *why* a (re)connect attempt failed, and waits between
    attempts as :class:`ReconnectBackoff` says.

    paho swallows the OSError of a failed attempt in its network loop and retries; we
    pass it to ``on_connect_error`` first so the log can say what to fix.

    The backoff goes through paho's public ``reconnect_delay_set``: paho waits
    ``min_delay`` before the first attempt after a reset of its delay (which that call
    does), so setting min = max = our delay after every attempt makes paho's next wait
    exactly ours. ``note_connected`` (called from the owner's ``on_connect``) ends the
    outage.
    """

    on_connect_error: Callable[[BaseException], None] | None = None
    backoff: ReconnectBackoff | None = None

    def _arm(self, delay: float) -> None:
        self.reconnect_delay_set(min_delay=delay, max_delay=delay)  # type: ignore[arg-type]

    def note_connected(self) -> None:
        """A CONNACK accepted the connection: the next loss waits the short delay again."""
        if self.backoff is not None:
            self.backoff.reset()
            self._arm(self.backoff.min_s * (1.0 + random.random()))

    def reconnect(self) -> mqtt.MQTTErrorCode:
        try:
            return super().reconnect()
        except (OSError, ValueError) as exc:
            if self.on_connect_error is not None:
                self.on_connect_error(exc)
            if isinstance(exc, ValueError):  # e.g. bad host; let paho's loop retry
                raise OSError(str(exc)) from exc
            raise
        finally:
            # Whatever came of this attempt, the wait before the next one (used only if
            # this one fails, or its session is lost again before note_connected).
            if self.backoff is not None:
                self._arm(self.backoff.next_delay())


def build_client(config: MqttConnectionConfig, *, client_id: str, clean_session: bool,
                 manual_ack: bool, logger: logging.Logger,
                 protocol: mqtt.MQTTProtocolVersion = mqtt.MQTTv311) -> ReportingClient:
    """A configured (not yet connected) paho 2.x client. ``protocol`` MQTTv311 (default)
    or MQTTv5; under MQTT 5 ``clean_session`` is not a client setting: pass ``clean_start``
    and the session expiry to ``connect_async`` instead."""
    client = ReportingClient(
        mqtt.CallbackAPIVersion.VERSION2,
        client_id=client_id,
        clean_session=None if protocol == mqtt.MQTTv5 else clean_session,
        protocol=protocol,
        manual_ack=manual_ack,
    )
    # Short jittered waits for the first minute of an outage, then doubling (see
    # ReconnectBackoff); the first wait is armed here for a failing first connect.
    client.backoff = ReconnectBackoff(config.reconnect_min_s, config.reconnect_max_s,
                                      config.reconnect_fast_s)
    client.note_connected()
    if config.username is not None:
        password = config.password.get_secret_value() if config.password else None
        client.username_pw_set(config.username, password)
    if config.tls is not None and config.tls.active:
        tls = config.tls
        client.tls_set(
            ca_certs=str(tls.ca_certs) if tls.ca_certs else None,
            certfile=str(tls.certfile) if tls.certfile else None,
            keyfile=str(tls.keyfile) if tls.keyfile else None,
        )
    return client
