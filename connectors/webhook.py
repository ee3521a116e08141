"""Webhook sink: POST each result as JSON, or as an Alertmanager v2 ``/api/v2/alerts`` body.

``format: result`` (default) posts the inspection result as is. ``format: alertmanager``
posts a list with one alert, so an existing Alertmanager routes mmdwatch's findings like
any other alert:

* ``firing``: alert ``MmdwatchChange`` (labels site, severity), ``endsAt`` = now +
  ``alert_ttl`` so it expires on its own if the agent goes away;
* ``ok``: the same alert with ``endsAt`` = now, which resolves it;
* a result with an ``incident`` block: the alert carries the label ``incident`` (its id)
  and the incident's sensors; it fires while the incident is open (every result re-sends
  it, so ``alert_ttl`` only ends it if the agent goes away) and resolves with the
  ``resolved`` event; while several incidents are open (``open_incidents``) each has its
  own alert;
* ``error``: alert ``MmdwatchInspectionError`` carrying the error message.
"""
from __future__ import annotations

import json
import logging
import ssl
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, ClassVar, Literal

import httpx
from pydantic import BaseModel, ConfigDict, Field, SecretStr

from connectors.base import Sink, SinkError, within_accepted_change
from connectors.json_safe import dumps, finite_or_none

log = logging.getLogger(__name__)


class WebhookTlsConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    ca_certs: Path | None = None
    verify: bool = True


class WebhookSinkConfig(BaseModel):
    """``sinks: - {type: webhook, url: https://..., format: result|alertmanager}``."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["webhook"] = "webhook"
    url: str = Field(pattern=r"^https?://")
    format: Literal["result", "alertmanager"] = "result"
    only_firing: bool = False  # format result: post firing results only
    headers: dict[str, SecretStr] = Field(default_factory=dict)  # e.g. Authorization
    timeout_s: float = Field(10.0, gt=0)
    alert_ttl: timedelta = timedelta(days=1)
    severity: str = "warning"
    generator_url: str | None = None  # link shown by Alertmanager (e.g. the report index)
    tls: WebhookTlsConfig | None = None


def _iso(ts: datetime) -> str:
    return ts.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def alertmanager_body(result: dict[str, Any], *, now: datetime, ttl: timedelta,
                      severity: str, generator_url: str | None = None) -> list[dict[str, Any]]:
    """The ``/api/v2/alerts`` body for one result (pure)."""
    site = str(result.get("site", ""))
    status = result.get("status")
    test = result.get("test") or {}
    annotations = {
        "summary": str(result.get("summary", "")),
        "selected_sensors": ", ".join(map(str, result.get("selected_sensors") or [])),
        "p_value": "" if test.get("p_value") is None else f"{test['p_value']:.4g}",
        "inspection_time": str(result.get("inspection_time", "")),
        "fingerprint": str(result.get("fingerprint", "")),
    }
    if status == "error":
        alert = {"labels": {"alertname": "MmdwatchInspectionError", "site": site,
                            "severity": severity},
                 "annotations": {**annotations, "error": str(result.get("error", ""))},
                 "startsAt": _iso(now), "endsAt": _iso(now + ttl)}
    elif result.get("incident"):
        # one alert per incident: the one this result is about, then any other open one
        # (``open_incidents``, present when several are open), so each stays firing
        incidents = [result["incident"]] + [
            other for other in result.get("open_incidents") or []
            if other.get("id") != result["incident"].get("id")]
        alerts = [_incident_alert(incident, site, severity, annotations, now, ttl)
                  for incident in incidents]
        if generator_url:
            for alert in alerts:
                alert["generatorURL"] = generator_url
        return alerts
    else:
        # a firing within a change an ack accepted ends its alert, as a quiet result does
        ends = now + ttl if status == "firing" and not within_accepted_change(result) else now
        alert = {"labels": {"alertname": "MmdwatchChange", "site": site,
                            "severity": severity},
                 "annotations": annotations, "startsAt": _iso(now), "endsAt": _iso(ends)}
    if generator_url:
        alert["generatorURL"] = generator_url
    return [alert]


def _incident_alert(incident: dict[str, Any], site: str, severity: str,
                    annotations: dict[str, str], now: datetime, ttl: timedelta
                    ) -> dict[str, Any]:
    """The ``MmdwatchChange`` alert of one incident (label ``incident``: its id)."""
    ends = now if incident.get("event") == "resolved" else now + ttl
    notes = {**annotations,
             "selected_sensors": ", ".join(map(str, incident.get("sensors") or [])),
             "incident_started": str(incident.get("started", ""))}
    for key in ("onset", "onset_low", "onset_high", "reason"):
        if incident.get(key):
            notes[f"incident_{key}"] = str(incident[key])
    return {"labels": {"alertname": "MmdwatchChange", "site": site, "severity": severity,
                       "incident": str(incident.get("id", ""))},
            "annotations": notes, "startsAt": _iso(now), "endsAt": _iso(ends)}


class WebhookSink(Sink):
    """POSTs results to an HTTP endpoint; 2xx = confirmed."""

    type: ClassVar[str] = "webhook"
    Config: ClassVar[type[WebhookSinkConfig]] = WebhookSinkConfig

    def __init__(self, config: WebhookSinkConfig | dict[str, Any], **_: Any) -> None:
        self.config = config if isinstance(config, WebhookSinkConfig) else \
            WebhookSinkConfig.model_validate(config)
        c = self.config
        verify: Any = True
        if c.tls is not None:
            if not c.tls.verify:
                verify = False
            elif c.tls.ca_certs is not None:
                verify = ssl.create_default_context(cafile=str(c.tls.ca_certs))
        headers = {k: v.get_secret_value() for k, v in c.headers.items()}
        headers.setdefault("Content-Type", "application/json")
        self._client = httpx.Client(timeout=c.timeout_s, verify=verify, headers=headers)

    def __repr__(self) -> str:
        return f"WebhookSink(url={self.config.url!r}, format={self.config.format!r})"

    @property
    def name(self) -> str:
        return f"webhook:{self.config.url}"

    def _body(self, result: dict[str, Any]) -> str | None:
        c = self.config
        if c.format == "alertmanager":
            body = alertmanager_body(result, now=datetime.now(UTC), ttl=c.alert_ttl,
                                     severity=c.severity, generator_url=c.generator_url)
            return json.dumps(finite_or_none(body))
        if c.only_firing and result.get("status") != "firing":
            return None
        return dumps(result)

    def send(self, result: dict[str, Any]) -> None:
        body = self._body(result)
        if body is None:
            return
        url = self.config.url
        try:
            response = self._client.post(url, content=body.encode("utf-8"))
        except httpx.HTTPError as exc:
            raise SinkError(f"webhook {url} unreachable ({exc}); check url (and tls.ca_certs "
                            "for https); the outbox retries") from exc
        if response.status_code >= 300:
            raise SinkError(f"webhook {url} answered HTTP {response.status_code}: "
                            f"{response.text[:200]!r}; the outbox retries")

    def close(self) -> None:
        self._client.close()
