"""The /healthz and /metrics endpoint, over real HTTP on a free loopback port."""
from __future__ import annotations

import json
import re
import urllib.error
import urllib.request

import pytest

from monitor.service.health import (
    HealthConfig,
    HealthServer,
    HealthSnapshot,
    evaluate,
    render_prometheus,
)

# One sample line of the Prometheus text format 0.0.4: name{labels} value
SAMPLE = re.compile(r'^[a-zA-Z_:][a-zA-Z0-9_:]*(\{([a-zA-Z_][a-zA-Z0-9_]*="([^"\\]|\\.)*",?)*\})? '
                    r'(-?[0-9.e+-]+|NaN|\+Inf|-Inf)$')


def _get(url: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.headers["Content-Type"], r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers["Content-Type"], e.read().decode()


def test_healthy_agent_answers_ok_and_metrics() -> None:
    snap = HealthSnapshot(readings_accepted=1234, rejected={"not json": 3, "non-finite value": 1},
                          inspections={"ok": 5, "firing": 2}, inspection_seconds_sum=9.5,
                          inspection_seconds_count=7, outbox_size=0,
                          last_success_time=1_700_000_000.0, source_connected=True)
    with HealthServer(lambda: snap, port=0) as server:
        code, ctype, body = _get(server.address + "/healthz")
        assert (code, json.loads(body)) == (200, {"status": "ok", "reasons": []})
        assert ctype == "application/json"
        code, ctype, text = _get(server.address + "/metrics")
        assert code == 200 and ctype.startswith("text/plain; version=0.0.4")
    samples = [ln for ln in text.splitlines() if ln and not ln.startswith("#")]
    assert all(SAMPLE.match(ln) for ln in samples), [ln for ln in samples if not SAMPLE.match(ln)]
    assert "mmdwatch_readings_accepted_total 1234" in samples
    assert 'mmdwatch_readings_rejected_total{reason="not json"} 3' in samples
    assert 'mmdwatch_inspections_total{status="firing"} 2' in samples
    assert 'mmdwatch_inspections_total{status="error"} 0' in samples
    assert "mmdwatch_inspection_duration_seconds_count 7" in samples
    assert "mmdwatch_last_success_timestamp_seconds 1700000000" in samples
    assert "mmdwatch_source_connected 1" in samples
    assert "mmdwatch_healthy 1" in samples
    # every family announced once with HELP and TYPE
    names = re.findall(r"^# TYPE (\S+) ", text, flags=re.MULTILINE)
    assert len(names) == len(set(names))


@pytest.mark.parametrize(
    ("snap", "expected"),
    [
        (HealthSnapshot(source_connected=False), ["source disconnected"]),
        (HealthSnapshot(outbox_size=101), ["outbox backlog"]),
        (HealthSnapshot(last_inspection_status="error", last_inspection_error="window empty"),
         ["last inspection ended in error: window empty"]),
        (HealthSnapshot(source_connected=False, outbox_size=500, last_inspection_status="error"),
         ["source disconnected", "outbox backlog", "last inspection ended in error"]),
    ],
)
def test_degraded_reasons_over_http(snap: HealthSnapshot, expected: list[str]) -> None:
    with HealthServer(lambda: snap, port=0, max_outbox=100) as server:
        code, _, body = _get(server.address + "/healthz")
        _, _, metrics = _get(server.address + "/metrics")
    payload = json.loads(body)
    assert code == 503 and payload["status"] == "degraded"
    assert len(payload["reasons"]) == len(expected)
    for reason, prefix in zip(payload["reasons"], expected, strict=True):
        assert reason.startswith(prefix)
    assert "mmdwatch_healthy 0" in metrics.splitlines()


def test_outbox_at_limit_is_still_ok() -> None:
    assert evaluate(HealthSnapshot(outbox_size=100), max_outbox=100) == ("ok", [])


def test_label_values_are_escaped() -> None:
    text = render_prometheus(HealthSnapshot(rejected={'bad "quote"\\\n': 1}))
    assert 'mmdwatch_readings_rejected_total{reason="bad \\"quote\\"\\\\\\n"} 1' in text


def test_unknown_path_404_and_broken_metrics_500() -> None:
    def broken() -> HealthSnapshot:
        raise RuntimeError("boom")

    with HealthServer(lambda: HealthSnapshot(), port=0) as server:
        assert _get(server.address + "/nope")[0] == 404
    with HealthServer(broken, port=0) as server:
        code, _, body = _get(server.address + "/healthz")
        assert code == 500 and "boom" in body
        # the server survives a failing reader
        assert _get(server.address + "/metrics")[0] == 500


def test_off_by_default_and_validated() -> None:
    assert HealthConfig().port is None
    assert HealthConfig(port=9108).host == "127.0.0.1"
    with pytest.raises(ValueError):
        HealthConfig(port=70000)
    with pytest.raises(ValueError):
        HealthConfig(port=1, bogus=True)


def test_serves_the_agents_metrics_object() -> None:
    from monitor.service.metrics import Metrics

    metrics = Metrics()
    metrics.set_source_connected(True)
    metrics.readings(500)
    metrics.rejected("not json", 2)
    metrics.inspection("ok", 1.5)
    metrics.sink_failed("mqtt")
    with HealthServer.for_metrics(metrics, HealthConfig(port=0)) as server:
        code, _, body = _get(server.address + "/healthz")
        assert code == 200
        text = _get(server.address + "/metrics")[2]
        assert "mmdwatch_readings_accepted_total 500" in text
        assert 'mmdwatch_sink_failures_total{sink="mqtt"} 1' in text
        # live: a later failure shows up on the next request
        metrics.inspection("error", 0.1, error="not enough data in the before window")
        metrics.set_source_connected(False)
        code, _, body = _get(server.address + "/healthz")
    assert code == 503
    assert json.loads(body)["reasons"][1].endswith("not enough data in the before window")


@pytest.mark.integration
def test_running_agent_serves_health_and_metrics(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """``mmdwatch run`` with ``health: {port: N}``: the endpoint answers while the agent
    ingests, and counts what it ingested."""
    import time

    from tests.integration import scenario as sc
    from tests.reliability import harness as h
    from tests.servers import free_port

    data = tmp_path / "network.csv"
    h.network_csv(data, seed=12)
    with data.open("a") as fh:  # rows the file source must count, not store
        fh.write("2026-01-01T00:00:00Z,s01,not-a-number\nnot-a-time,s01,1.0\n")
    port = free_port()
    config = h.fast_config(tmp_path / "state")
    config["source"] = {"type": "file", "path": str(data)}
    config["schedule"]["start"] = sc.iso(sc.T0 + 60 * 86400)  # no inspections needed here
    config["health"] = {"port": port}
    agent = h.start_agent(tmp_path, config)
    try:
        url = f"http://127.0.0.1:{port}"
        assert h.wait_for(lambda: _reachable(url + "/healthz"), timeout=60), agent.log_text()[-2000:]
        total = 4320 * len(sc.SENSORS)

        def accepted() -> int:
            text = _get(url + "/metrics")[2]
            line = next(ln for ln in text.splitlines()
                        if ln.startswith("mmdwatch_readings_accepted_total "))
            return int(float(line.split()[1]))

        assert h.wait_for(lambda: accepted() == total, timeout=120)
        samples = ["mmdwatch_readings_rejected_total{reason=\"" + reason + "\"} 1"
                   for reason in ("bad_value", "bad_time")]
        # the agent copies the source's rejection counts on its next tick (poll: 1 s)
        assert h.wait_for(lambda: all(s in _get(url + "/metrics")[2] for s in samples),
                          timeout=30), _get(url + "/metrics")[2]
        code, _, body = _get(url + "/healthz")
        assert code == 200 and json.loads(body)["status"] == "ok", body
        time.sleep(0.1)
    finally:
        assert agent.stop() == 0
    assert not _reachable(url + "/healthz")  # closed on stop


def _reachable(url: str) -> bool:
    try:
        _get(url)
        return True
    except OSError:
        return False
