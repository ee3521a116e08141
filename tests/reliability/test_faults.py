"""Faults with real processes and real servers: crashes, outages, signals, disk trouble.

Each test runs ``mmdwatch run`` as a child process (tests/integration/scenario.py) against
mosquitto/influxd started by the shared fixtures, breaks something for real (SIGKILL,
stopping a server, a read-only or full filesystem) and checks what users count on: no
reading lost, no inspection skipped or delivered twice, clear messages, bounded stops.
"""
from __future__ import annotations

import re
import signal
import time
from pathlib import Path

import pytest

from tests.integration import scenario as sc
from tests.reliability import harness as h

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(600)]


def _mqtt_source(broker, client_id: str = "mmdwatch-faults") -> dict:  # type: ignore[no-untyped-def]
    return {"type": "mqtt", "host": "127.0.0.1", "port": broker.port,
            "topics": [f"{sc.TOPIC_PREFIX}/#"], "client_id": client_id,
            "reconnect_min_s": 0.5, "reconnect_max_s": 1.0}


# -- SIGKILL while ingesting ----------------------------------------------------------------
def test_sigkill_during_ingest_loses_no_reading(tmp_path: Path, mosquitto_persistent) -> None:
    broker = mosquitto_persistent
    times, values = sc.network(seed=3)
    messages = list(sc.mqtt_messages(times, values))
    total = times.size * len(sc.SENSORS)
    state = tmp_path / "state"
    config = h.fast_config(state)
    config["source"] = _mqtt_source(broker)
    config["schedule"]["start"] = sc.iso(sc.T0 + 60 * 86400)  # no inspection: ingest only
    agent = h.start_agent(tmp_path, config)
    assert agent.wait_for_log("MQTT source connected", timeout=60), agent.log_text()[-2000:]
    publisher = h.Publisher(broker.port, messages)
    publisher.start()
    # Crash it mid-stream: some readings committed, most not yet.
    assert h.wait_for(lambda: h.store_count(state) >= total // 10, timeout=120), \
        agent.log_text()[-2000:]
    h.sigkill(agent)
    at_kill = h.store_count(state)
    assert 0 < at_kill < total, "the crash must land mid-stream for this test to mean much"
    publisher.join(timeout=300)
    assert publisher.error is None, publisher.error
    # Restart: the persistent session hands over everything not acknowledged.
    agent = h.start_agent(tmp_path, config, name="agent2")
    try:
        assert h.wait_for(lambda: h.store_count(state) == total, timeout=180), \
            f"{h.store_count(state)} of {total} readings stored; {agent.log_text()[-2000:]}"
    finally:
        assert agent.stop() == 0
    assert h.store_count(state) == total
    print(f"\nSIGKILL at {at_kill:,}/{total:,} readings; after restart {total:,}/{total:,}")


# -- SIGKILL while delivering ------------------------------------------------------------------
def test_sigkill_during_delivery_no_inspection_skipped_or_duplicated(tmp_path: Path,
                                                                    influxd) -> None:
    data = tmp_path / "network.csv"
    h.network_csv(data, seed=4)
    state = tmp_path / "state"
    results = state / "results.jsonl"
    config = h.fast_config(state)
    config["source"] = {"type": "file", "path": str(data)}
    influxd.create_database("results")
    config["sinks"].append({"type": "influxdb", "url": influxd.url, "database": "results"})
    influxd.stop()  # the InfluxDB sink cannot confirm: results pile up in the outbox
    agent = h.start_agent(tmp_path, config)
    assert h.wait_for(lambda: len(h.done_times(state)) >= 3 and h.outbox_size(state) >= 3,
                      timeout=300), agent.log_text()[-3000:]
    h.sigkill(agent)
    done_at_kill = len(h.done_times(state))
    pending_at_kill = h.outbox_size(state)
    influxd.start()
    agent = h.start_agent(tmp_path, config, name="agent2")
    try:
        expected = [float(t) for t in h.FAST_TIMES]
        assert h.wait_for(lambda: h.done_times(state) == expected and h.outbox_size(state) == 0,
                          timeout=400), (h.done_times(state), h.outbox_size(state),
                                         agent.log_text()[-3000:])
    finally:
        assert agent.stop() == 0
    lines = h.jsonl_results(results)
    fps = [r["fingerprint"] for r in lines]
    assert len(fps) == len(set(fps)) == len(expected), "a result was skipped or written twice"
    assert sorted(r["inspection_time"] for r in lines) == [sc.iso(t) for t in h.FAST_TIMES]
    assert {r["status"] for r in lines} <= {"ok", "firing"}, "real results, not errors"
    rows = influxd.query("SELECT fingerprint FROM mmdwatch_inspection", db="results")
    series = rows["results"][0].get("series", [])
    influx_fps = [v[1] for s in series for v in s["values"]]
    assert sorted(influx_fps) == sorted(fps), "InfluxDB must hold every result exactly once"
    print(f"\nSIGKILL with {done_at_kill} inspections done, {pending_at_kill} undelivered; "
          f"after restart {len(expected)} inspections, each delivered once")


# -- InfluxDB outages ---------------------------------------------------------------------------
def test_influxd_stopped_during_sink_writes_recovers_with_backoff(tmp_path: Path,
                                                                 influxd) -> None:
    data = tmp_path / "network.csv"
    h.network_csv(data, seed=5)
    state = tmp_path / "state"
    config = h.fast_config(state)
    config["source"] = {"type": "file", "path": str(data), "speed": None}
    influxd.create_database("results")
    config["sinks"].append({"type": "influxdb", "url": influxd.url, "database": "results",
                            "timeout_s": 2})

    def in_influx() -> list[str]:
        try:
            rows = influxd.query("SELECT fingerprint FROM mmdwatch_inspection", db="results")
        except Exception:  # noqa: BLE001 - influxd may be down right now
            return []
        return [v[1] for s in rows["results"][0].get("series", []) for v in s["values"]]

    agent = h.start_agent(tmp_path, config)
    try:
        assert h.wait_for(lambda: len(in_influx()) >= 1, timeout=300), agent.log_text()[-3000:]
        influxd.stop()
        mark = len(agent.log_text())
        assert h.wait_for(lambda: h.outbox_size(state) >= 2, timeout=300), agent.log_text()[-3000:]
        # several failed attempts, spaced by a growing delay
        def failures() -> list[str]:
            return [ln for ln in agent.log_text()[mark:].splitlines()
                    if "sink influxdb" in ln and "retrying in" in ln]

        assert h.wait_for(lambda: len(failures()) >= 3, timeout=60), agent.log_text()[-3000:]
        # says what is wrong: a refused connection, or (when the write arrived while
        # influxd was stopping) its "HTTP 500: write failed", each named as such
        assert re.search(r"cannot reach InfluxDB|InfluxDB server error .*shutting down",
                         failures()[0]), failures()[0]
        delays = [float(ln.rsplit("retrying in ", 1)[1].split()[0]) for ln in failures()]
        assert delays[:3] == sorted(delays[:3]) and delays[2] > delays[0], delays
        influxd.start()
        expected = len(h.FAST_TIMES)
        assert h.wait_for(lambda: h.outbox_size(state) == 0 and len(h.done_times(state)) == expected,
                          timeout=400), agent.log_text()[-3000:]
    finally:
        assert agent.stop() == 0
    fps = in_influx()
    jsonl = [r["fingerprint"] for r in h.jsonl_results(state / "results.jsonl")]
    assert sorted(fps) == sorted(jsonl) and len(set(fps)) == expected
    print(f"\nInfluxDB down: retry delays {delays[:5]} s; all {expected} results delivered once")


def test_influxd_stopped_during_inspections_retries_instead_of_skipping(tmp_path: Path,
                                                                       influxd) -> None:
    """A source outage is not an inspection result: the inspection waits and runs later.

    The production default ``clock: wall`` reads each window once its after-window has
    passed, so the network is shifted to end tomorrow and the last days are due now."""
    times, values = sc.network(seed=6)
    midnight = int(time.time() // 86400) * 86400
    t0 = midnight - 14 * 86400
    influxd.create_database("scada")
    lines = sc.influx_lines(times - sc.T0 + t0, values)
    for i in range(0, len(lines), 20_000):
        influxd.write_lines("scada", lines[i:i + 20_000])
    state = tmp_path / "state"
    config = h.fast_config(state)
    config["schedule"].update(clock="wall", start=sc.iso(t0 + 2 * 86400))
    config["source"] = {"type": "influxdb", "url": influxd.url, "database": "scada",
                        "measurement": "pressure", "sensor_tag": "sensor", "field": "value",
                        "timeout_s": 2}

    def expected() -> list[float]:
        return [float(t0 + d * 86400) for d in range(2, 15) if t0 + (d + 2) * 86400 <= time.time()]

    # influxd goes away just as the inspections fall due (their windows cannot be read)
    influxd.stop()
    agent = h.start_agent(tmp_path, config)
    try:
        assert agent.wait_for_log("agent started", timeout=60), agent.log_text()[-3000:]
        # Not a sleep: two failed reads prove the agent tried (and backed off) while the
        # source was down, however slowly this machine runs.
        assert h.wait_for(lambda: agent.log_text().count("source unavailable") >= 2,
                          timeout=120), agent.log_text()[-3000:]
        during = len(h.done_times(state))
        outage_log = agent.log_text()
        assert during == 0, f"{during} inspections recorded as done while the source was down"
        influxd.start()
        assert h.wait_for(lambda: h.done_times(state) == expected()
                          and h.outbox_size(state) == 0, timeout=400), \
            (h.done_times(state), expected(), agent.log_text()[-3000:])
    finally:
        assert agent.stop() == 0
    results = h.jsonl_results(state / "results.jsonl")
    assert sorted(r["inspection_time"] for r in results) == [sc.iso(t) for t in expected()]
    errors = [r for r in results if r["status"] == "error"]
    assert not errors, [r.get("error") for r in errors]
    assert "retrying" in outage_log, outage_log[-2000:]
    retries = outage_log.count("retrying")
    print(f"\nInfluxDB down for 8 s: {retries} logged retries, nothing recorded; all "
          f"{len(results)} inspections ran once it was back")


# -- graceful stop ------------------------------------------------------------------------------
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_stops_within_bounded_time_and_loses_nothing(tmp_path: Path, mosquitto_persistent,
                                                           sig: signal.Signals) -> None:
    """Stop in the middle of a stream: exit 0 within 20 s, every acknowledged reading in the
    store, and a restart picks up exactly where it stopped."""
    broker = mosquitto_persistent
    times, values = sc.network(seed=7)
    messages = list(sc.mqtt_messages(times, values))
    total = times.size * len(sc.SENSORS)
    state = tmp_path / "state"
    config = h.fast_config(state)
    config["source"] = _mqtt_source(broker, client_id="mmdwatch-signals")
    agent = h.start_agent(tmp_path, config)
    assert agent.wait_for_log("MQTT source connected", timeout=60), agent.log_text()[-2000:]
    publisher = h.Publisher(broker.port, messages)
    publisher.start()
    assert h.wait_for(lambda: h.store_count(state) >= total // 10, timeout=120)
    t_signal = time.monotonic()
    agent.proc.send_signal(sig)
    try:
        code = agent.proc.wait(timeout=20)
    except Exception:  # noqa: BLE001 - report the log, then clean up
        agent.proc.kill()
        pytest.fail(f"no exit within 20 s of {sig.name}: {agent.log_text()[-3000:]}")
    stop_s = time.monotonic() - t_signal
    agent._log.close()
    assert code == 0, agent.log_text()[-3000:]
    assert f"received {sig.name}" in agent.log_text() and "stopped" in agent.log_text()
    publisher.join(timeout=300)
    agent = h.start_agent(tmp_path, config, name="agent2")
    try:
        assert h.wait_for(lambda: h.store_count(state) == total, timeout=180), \
            f"{h.store_count(state)} of {total}; {agent.log_text()[-2000:]}"
        # inspections resume too: every due time done once, nothing left in the outbox
        # (a live stream's newest reading is 5 min short of day 15: the last time is day 12)
        expected = [float(t) for t in h.FAST_TIMES[:-1]]
        assert h.wait_for(lambda: h.done_times(state) == expected
                          and h.outbox_size(state) == 0, timeout=400), \
            (h.done_times(state), agent.log_text()[-3000:])
    finally:
        assert agent.stop() == 0
    fps = [r["fingerprint"] for r in h.jsonl_results(state / "results.jsonl")]
    assert len(fps) == len(set(fps)) == len(expected)
    print(f"\n{sig.name}: exit 0 after {stop_s:.2f} s; {total:,} readings and "
          f"{len(fps)} inspections after restart")


def test_sigterm_during_an_inspection_finishes_or_repeats_it_once(tmp_path: Path) -> None:
    data = tmp_path / "network.csv"
    h.network_csv(data, seed=8)
    state = tmp_path / "state"
    config = h.fast_config(state)
    config["source"] = {"type": "file", "path": str(data)}
    config["engine"] = {"method": "cv-aggregation", "alpha": 0.05, "seed": 0, "device": "cpu",
                        "block_size": None}  # slow enough to be caught mid-inspection
    agent = h.start_agent(tmp_path, config)
    assert h.wait_for(lambda: len(h.done_times(state)) >= 1, timeout=300), agent.log_text()[-3000:]
    t_signal = time.monotonic()
    agent.proc.send_signal(signal.SIGTERM)
    code = agent.proc.wait(timeout=120)
    stop_s = time.monotonic() - t_signal
    agent._log.close()
    assert code == 0, agent.log_text()[-3000:]
    done_at_stop = len(h.done_times(state))
    agent = h.start_agent(tmp_path, config, name="agent2")
    try:
        assert h.wait_for(lambda: h.done_times(state) == [float(t) for t in h.FAST_TIMES]
                          and h.outbox_size(state) == 0, timeout=500), agent.log_text()[-3000:]
    finally:
        assert agent.stop() == 0
    fps = [r["fingerprint"] for r in h.jsonl_results(state / "results.jsonl")]
    assert len(fps) == len(set(fps)) == len(h.FAST_TIMES)
    print(f"\nSIGTERM mid-run: exit 0 after {stop_s:.2f} s with {done_at_stop} inspections done; "
          f"after restart all {len(fps)} once")


# -- disk trouble -------------------------------------------------------------------------------
def test_state_dir_not_writable_fails_fast_with_a_clear_error(tmp_path: Path) -> None:
    data = tmp_path / "network.csv"
    h.network_csv(data, seed=9)
    with h.tmpfs(tmp_path / "ro", "1m", readonly=True) as ro:
        config = h.fast_config(ro / "state")
        config["source"] = {"type": "file", "path": str(data)}
        config["sinks"] = [{"type": "console"}]
        agent = h.start_agent(tmp_path, config)
        t0 = time.monotonic()
        code = agent.proc.wait(timeout=60)
        took = time.monotonic() - t0
        agent._log.close()
    text = agent.log_text()
    assert code == 2, text[-2000:]
    assert str(ro / "state") in text and "Traceback" not in text, text[-2000:]
    assert "writable" in text or "Read-only" in text, text[-2000:]
    print(f"\nread-only state_dir: exit {code} after {took:.1f} s: {text.strip().splitlines()[-1]}")


def test_disk_full_during_ingest_keeps_running_says_so_and_loses_nothing(
        tmp_path: Path, mosquitto_persistent) -> None:
    broker = mosquitto_persistent
    times, values = sc.network(seed=10)
    messages = list(sc.mqtt_messages(times, values))
    total = times.size * len(sc.SENSORS)
    with h.tmpfs(tmp_path / "small", "1m") as small:
        state = small / "state"
        config = h.fast_config(state)
        config["source"] = _mqtt_source(broker, client_id="mmdwatch-diskfull")
        config["schedule"]["start"] = sc.iso(sc.T0 + 60 * 86400)  # ingest only
        config["sinks"] = [{"type": "console"}]
        agent = h.start_agent(tmp_path, config)
        try:
            assert agent.wait_for_log("MQTT source connected", timeout=60), agent.log_text()[-2000:]
            publisher = h.Publisher(broker.port, messages)
            publisher.start()
            assert agent.wait_for_log("could not commit", timeout=180), agent.log_text()[-3000:]
            kept = h.store_count(state)
            assert 0 < kept < total
            # a second failed commit: the agent outlived the first and retries
            assert h.wait_for(lambda: agent.log_text().count("could not commit") >= 2,
                              timeout=120), agent.log_text()[-3000:]
            assert agent.proc.poll() is None, "the agent died on a full disk"
            line = next(ln for ln in agent.log_text().splitlines() if "could not commit" in ln)
            assert "disk" in line or "full" in line, line
            publisher.join(timeout=300)
            assert publisher.error is None
            h.remount(small, "64m")  # space comes back: the retries succeed
            assert h.wait_for(lambda: h.store_count(state) == total, timeout=240), \
                f"{h.store_count(state)} of {total}; {agent.log_text()[-2000:]}"
        finally:
            code = agent.stop()
    assert code == 0
    print(f"\ndisk full at {kept:,} readings: '{line.split(': ', 1)[-1][:160]}'; after space "
          f"returned {total:,}/{total:,} stored")
