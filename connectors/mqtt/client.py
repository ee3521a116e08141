"""Connection settings and a paho client shared by the MQTT source and sink.

Connection failures never raise into the agent: paho's network thread retries with
exponential backoff (``reconnect_min_s`` doubling up to ``reconnect_max_s``), and each
failure is logged once per attempt with what to fix (wrong password, untrusted
certificate, nothing listening).
"""
from __future__ import annotations

import logging
import socket
import ssl
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


class ReportingClient(mqtt.Client):
    """A paho client that reports *why* a (re)connect attempt failed.

    paho swallows the OSError of a failed attempt in its network loop and retries; we
    pass it to ``on_connect_error`` first so the log can say what to fix.
    """

    on_connect_error: Callable[[BaseException], None] | None = None

    def reconnect(self) -> mqtt.MQTTErrorCode:
        try:
            return super().reconnect()
        except (OSError, ValueError) as exc:
            if self.on_connect_error is not None:
                self.on_connect_error(exc)
            if isinstance(exc, ValueError):  # e.g. bad host; let paho's loop retry
                raise OSError(str(exc)) from exc
            raise


def build_client(config: MqttConnectionConfig, *, client_id: str, clean_session: bool,
                 manual_ack: bool, logger: logging.Logger) -> ReportingClient:
    """A configured (not yet connected) paho 2.x client."""
    client = ReportingClient(
        mqtt.CallbackAPIVersion.VERSION2,
        client_id=client_id,
        clean_session=clean_session,
        protocol=mqtt.MQTTv311,
        manual_ack=manual_ack,
    )
    # paho doubles the delay after each failed attempt, up to max_delay.
    client.reconnect_delay_set(min_delay=config.reconnect_min_s,  # type: ignore[arg-type]
                               max_delay=max(config.reconnect_min_s, config.reconnect_max_s))
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
