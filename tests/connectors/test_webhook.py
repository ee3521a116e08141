"""WebhookSink against a real local HTTP server (stdlib ThreadingHTTPServer on loopback)."""
from __future__ import annotations

import json
import threading
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from connectors.base import SinkError
from connectors.webhook import WebhookSink, alertmanager_body
from tests.servers import free_port


class Receiver:
    def __init__(self, status: int = 200) -> None:
        self.requests: list[tuple[str, dict, bytes]] = []
        self.status = status
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                outer.requests.append((self.path, dict(self.headers), body))
                self.send_response(outer.status)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver():
    r = Receiver()
    yield r
    r.close()


RESULT = {"fingerprint": "fp", "site": "l-town", "status": "firing",
          "inspection_time": "2018-06-01T00:00:00Z", "summary": "Change in n296",
          "test": {"p_value": 0.004}, "selected_sensors": ["n296"],
          "sensors": [{"sensor_id": "n296", "mean_before": float("nan")}]}


def test_posts_the_result_json_with_configured_headers(receiver):
    sink = WebhookSink({"type": "webhook", "url": receiver.url + "/hook",
                        "headers": {"Authorization": "Bearer s3"}})
    sink.send(RESULT)
    sink.close()
    path, headers, body = receiver.requests[0]
    assert path == "/hook" and headers["Authorization"] == "Bearer s3"
    assert headers["Content-Type"] == "application/json"
    doc = json.loads(body)
    assert doc["fingerprint"] == "fp" and doc["sensors"][0]["mean_before"] is None
    assert "s3" not in repr(sink) and "s3" not in repr(sink.config)


def test_only_firing_skips_ok_results(receiver):
    sink = WebhookSink({"type": "webhook", "url": receiver.url, "only_firing": True})
    sink.send({**RESULT, "status": "ok"})
    sink.send(RESULT)
    assert len(receiver.requests) == 1


def test_alertmanager_body_fires_and_resolves(receiver):
    sink = WebhookSink({"type": "webhook", "url": receiver.url + "/api/v2/alerts",
                        "format": "alertmanager"})
    sink.send(RESULT)
    sink.send({**RESULT, "status": "ok"})
    firing, resolved = (json.loads(b) for _, _, b in receiver.requests)
    assert firing[0]["labels"] == {"alertname": "MmdwatchChange", "site": "l-town",
                                   "severity": "warning"}
    assert firing[0]["annotations"]["selected_sensors"] == "n296"
    parse = lambda s: datetime.fromisoformat(s)
    assert parse(firing[0]["endsAt"]) > datetime.now(UTC) + timedelta(hours=23)
    assert parse(resolved[0]["endsAt"]) <= datetime.now(UTC)


def test_error_results_become_their_own_alert():
    now = datetime(2024, 1, 1, tzinfo=UTC)
    body = alertmanager_body({**RESULT, "status": "error", "error": "too little data"},
                             now=now, ttl=timedelta(hours=1), severity="critical")
    assert body[0]["labels"]["alertname"] == "MmdwatchInspectionError"
    assert body[0]["annotations"]["error"] == "too little data"
    assert body[0]["endsAt"] == "2024-01-01T01:00:00.000000Z"


def test_failures_raise_sink_errors():
    bad = Receiver(status=503)
    try:
        with pytest.raises(SinkError, match="HTTP 503.*outbox retries"):
            WebhookSink({"type": "webhook", "url": bad.url}).send(RESULT)
    finally:
        bad.close()
    with pytest.raises(SinkError, match="unreachable"):
        WebhookSink({"type": "webhook", "url": f"http://127.0.0.1:{free_port()}"}).send(RESULT)
