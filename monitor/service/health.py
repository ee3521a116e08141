"""A small HTTP endpoint for orchestrators and Prometheus: ``/healthz`` and ``/metrics``.

Off by default; ``health: {port: 9108}`` in the config turns it on (``port: 0`` picks a free
port, useful in tests). It only reads the agent's :class:`monitor.service.metrics.Metrics`, which
the composition root creates and passes in, so serving never touches the store, the
engine or a connector and cannot slow an inspection down.

* ``GET /healthz``: ``{"status": "ok" | "degraded", "reasons": [...]}``, HTTP 200 when ok
  and 503 when degraded, so a plain HTTP probe (Kubernetes, Docker, Consul) can use it.
  Degraded when the source is disconnected, the outbox holds more results than
  ``max_outbox`` (sinks are not confirming), or the last inspection ended in ``error``.
* ``GET /metrics``: Prometheus text exposition format 0.0.4.

Binds to 127.0.0.1 unless ``host`` says otherwise: metrics of a water network are nobody
else's business by default.
"""
from __future__ import annotations

import json
import logging
import math
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol, Self

from pydantic import BaseModel, ConfigDict, Field

log = logging.getLogger(__name__)

PROMETHEUS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class HealthConfig(BaseModel):
    """The ``health:`` config section."""

    model_config = ConfigDict(extra="forbid")

    port: int | None = Field(
        default=None, ge=0, le=65535,
        description="TCP port of /healthz and /metrics; null (default) = no endpoint; 0 = any free port",
    )
    host: str = Field(default="127.0.0.1", description="address to bind; 0.0.0.0 exposes it")
    max_outbox: int = Field(
        default=100, ge=0, description="more results than this waiting in the outbox = degraded"
    )


@dataclass(frozen=True)
class HealthSnapshot:
    """What /healthz and /metrics show, read from the agent's metrics at request time.

    ``inspections`` maps status (ok, firing, error) to a count; ``rejected`` maps a reason
    to a count; ``source_connected`` is None when the source has no connection (a file).
    """

    readings_accepted: int = 0
    rejected: Mapping[str, int] = field(default_factory=dict)
    inspections: Mapping[str, int] = field(default_factory=dict)
    inspection_seconds_sum: float = 0.0
    inspection_seconds_count: int = 0
    last_inspection_seconds: float | None = None
    outbox_size: int = 0
    last_success_time: float | None = None
    last_inspection_status: str | None = None
    last_inspection_error: str | None = None
    source_connected: bool | None = None
    sink_failures: Mapping[str, int] = field(default_factory=dict)
    started_at: float | None = None
    data_gaps: Mapping[str, int] = field(default_factory=dict)

    @classmethod
    def from_metrics(cls, snapshot: Mapping[str, Any]) -> HealthSnapshot:
        """From :meth:`monitor.service.metrics.Metrics.snapshot` (unknown keys ignored)."""
        return cls(
            readings_accepted=int(snapshot.get("readings_accepted", 0)),
            rejected=dict(snapshot.get("readings_rejected", {})),
            inspections=dict(snapshot.get("inspections", {})),
            inspection_seconds_sum=float(snapshot.get("inspection_seconds_sum", 0.0)),
            inspection_seconds_count=int(snapshot.get("inspection_seconds_count", 0)),
            last_inspection_seconds=snapshot.get("last_inspection_seconds"),
            outbox_size=int(snapshot.get("outbox_size", 0)),
            last_success_time=snapshot.get("last_success_time"),
            last_inspection_status=snapshot.get("last_inspection_status"),
            last_inspection_error=snapshot.get("last_inspection_error"),
            source_connected=snapshot.get("source_connected"),
            sink_failures=dict(snapshot.get("sink_failures", {})),
            started_at=snapshot.get("started_at"),
            data_gaps=dict(snapshot.get("data_gaps", {})),
        )


class MetricsSource(Protocol):
    """What the agent's ``Metrics`` offers the health server."""

    def snapshot(self) -> Mapping[str, Any]: ...


class MetricsReader(Protocol):
    """Anything that turns the agent's live metrics into a :class:`HealthSnapshot`."""

    def __call__(self) -> HealthSnapshot: ...


def evaluate(snapshot: HealthSnapshot, max_outbox: int) -> tuple[str, list[str]]:
    """``("ok", [])`` or ``("degraded", reasons)``; each reason says what to look at."""
    reasons: list[str] = []
    if snapshot.source_connected is False:
        reasons.append("source disconnected: the agent is retrying; check the broker/database")
    if snapshot.outbox_size > max_outbox:
        reasons.append(
            f"outbox backlog: {snapshot.outbox_size} results waiting (more than {max_outbox}); "
            "a sink is not confirming deliveries"
        )
    if snapshot.last_inspection_status == "error":
        detail = f": {snapshot.last_inspection_error}" if snapshot.last_inspection_error else ""
        reasons.append(f"last inspection ended in error{detail}")
    return ("degraded" if reasons else "ok"), reasons


def _escape_label(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _number(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value)) if not float(value).is_integer() else str(int(value))


def _family(
    name: str, kind: str, help_: str, samples: Iterable[tuple[Mapping[str, str], float]]
) -> list[str]:
    lines = [f"# HELP {name} {help_}", f"# TYPE {name} {kind}"]
    for labels, value in samples:
        label_text = ",".join(f'{k}="{_escape_label(str(v))}"' for k, v in sorted(labels.items()))
        lines.append(f"{name}{{{label_text}}} {_number(value)}" if label_text else f"{name} {_number(value)}")
    return lines


def render_prometheus(snapshot: HealthSnapshot, max_outbox: int = 100) -> str:
    """The snapshot in Prometheus text exposition format 0.0.4 (ends with a newline)."""
    statuses = {"ok": 0, "firing": 0, "error": 0, **dict(snapshot.inspections)}
    status, _ = evaluate(snapshot, max_outbox)
    lines: list[str] = []
    lines += _family(
        "mmdwatch_readings_accepted_total", "counter",
        "Readings committed to the store.", [({}, snapshot.readings_accepted)],
    )
    lines += _family(
        "mmdwatch_readings_rejected_total", "counter", "Readings rejected, by reason.",
        [({"reason": r}, n) for r, n in sorted(snapshot.rejected.items())],
    )
    lines += _family(
        "mmdwatch_inspections_total", "counter", "Inspections finished, by result status.",
        [({"status": s}, n) for s, n in sorted(statuses.items())],
    )
    lines += _family(
        "mmdwatch_inspection_duration_seconds", "summary", "Wall time of inspections.",
        [],
    )
    lines.append(f"mmdwatch_inspection_duration_seconds_sum {_number(snapshot.inspection_seconds_sum)}")
    lines.append(f"mmdwatch_inspection_duration_seconds_count {snapshot.inspection_seconds_count}")
    if snapshot.last_inspection_seconds is not None:
        lines += _family(
            "mmdwatch_last_inspection_duration_seconds", "gauge",
            "Wall time of the latest inspection.", [({}, snapshot.last_inspection_seconds)],
        )
    lines += _family(
        "mmdwatch_outbox_size", "gauge", "Results waiting for at least one sink.",
        [({}, snapshot.outbox_size)],
    )
    if snapshot.last_success_time is not None:
        lines += _family(
            "mmdwatch_last_success_timestamp_seconds", "gauge",
            "Unix time of the latest inspection that did not end in error.",
            [({}, snapshot.last_success_time)],
        )
    if snapshot.source_connected is not None:
        lines += _family(
            "mmdwatch_source_connected", "gauge", "1 when the source is connected.",
            [({}, 1.0 if snapshot.source_connected else 0.0)],
        )
    lines += _family(
        "mmdwatch_sink_failures_total", "counter", "Failed delivery attempts, by sink.",
        [({"sink": k}, n) for k, n in sorted(snapshot.sink_failures.items())],
    )
    lines += _family(
        "mmdwatch_data_gaps_total", "counter",
        "data_gap events (monitor.service.gaps), by kind: hole, quiet, site_quiet.",
        [({"kind": k}, n) for k, n in sorted(snapshot.data_gaps.items())],
    )
    if snapshot.started_at is not None:
        lines += _family(
            "mmdwatch_start_time_seconds", "gauge", "Unix time the agent started.",
            [({}, snapshot.started_at)],
        )
    lines += _family(
        "mmdwatch_healthy", "gauge", "1 when /healthz says ok, 0 when degraded.",
        [({}, 1.0 if status == "ok" else 0.0)],
    )
    return "\n".join(lines) + "\n"


class HealthServer:
    """Serves /healthz and /metrics from a background thread until :meth:`stop`."""

    @classmethod
    def for_metrics(cls, metrics: MetricsSource, config: HealthConfig) -> HealthServer:
        """A server over the agent's ``Metrics`` (anything with ``snapshot() -> dict``)."""
        port = 0 if config.port is None else config.port
        return cls(lambda: HealthSnapshot.from_metrics(metrics.snapshot()), port=port,
                   host=config.host, max_outbox=config.max_outbox)

    def __init__(self, read: MetricsReader, *, port: int = 0, host: str = "127.0.0.1",
                 max_outbox: int = 100) -> None:
        self._read = read
        self._max_outbox = max_outbox
        self._httpd = ThreadingHTTPServer((host, port), self._handler_class())
        self._httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        """The bound port (useful with ``port: 0``)."""
        return int(self._httpd.server_address[1])

    @property
    def address(self) -> str:
        host = self._httpd.server_address[0]
        return f"http://{host if isinstance(host, str) else host.decode()}:{self.port}"

    def start(self) -> Self:
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, name="mmdwatch-health", daemon=True
        )
        self._thread.start()
        log.info("health endpoint on %s (/healthz, /metrics)", self.address)
        return self

    def stop(self) -> None:
        """Stop serving and close the socket; idempotent."""
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join(timeout=5)
            self._thread = None
        self._httpd.server_close()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            server_version = "mmdwatch-health"

            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                try:
                    snapshot = server._read()
                except Exception as exc:  # a metrics bug must not take the endpoint down
                    log.exception("health: reading metrics failed")
                    self._send(500, "text/plain; charset=utf-8", f"metrics unavailable: {exc}\n")
                    return
                if path == "/healthz":
                    status, reasons = evaluate(snapshot, server._max_outbox)
                    body = json.dumps({"status": status, "reasons": reasons}) + "\n"
                    self._send(200 if status == "ok" else 503, "application/json", body)
                elif path == "/metrics":
                    self._send(200, PROMETHEUS_CONTENT_TYPE,
                               render_prometheus(snapshot, server._max_outbox))
                else:
                    self._send(404, "text/plain; charset=utf-8", "not found: try /healthz or /metrics\n")

            def _send(self, code: int, ctype: str, body: str) -> None:
                data = body.encode("utf-8")
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                log.debug("health: " + format, *args)

        return Handler
