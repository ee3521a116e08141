"""A one-second stream through a real mosquitto into ``mmdwatch run`` on the wall clock,
as a pump station's logger would send it (issue 29, "Any cadence"): the agent catches up
on the minutes already published, then inspects every 2 s as the readings come, and a step
on one sensor opens an incident that names it, announced on the ``alert`` topic with the
inspection's time to the second.

Four sensors of Gaussian noise, one reading a second each, stamped with the wall clock:
150 s of the past published at once, then 30 s as they happen, with sensor ``p2`` raised
by 12 standard deviations from the 8th second on. The windows are those of a short test
(1 min before, 10 s after, 1-s bins, every 2 s): the decision's durations derive from them
(docs/config.md, "Derived durations"), 25 history values (50 s) before the first alert.
"""
from __future__ import annotations

import itertools
import json
import math
import time

import numpy as np
import paho.mqtt.client as mqtt
import pandas as pd
import pytest

from tests.connectors.mqtt_helpers import Subscriber
from tests.integration import scenario as sc

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(300)]

SITE = "pump-1s"
SENSORS = ["p0", "p1", "p2", "p3"]
STEPPED, STEP_SD = "p2", 12.0
PAST_S, LIVE_S, STEP_AT_S = 150, 30, 8  # seconds of the past; live; the step, into the live


def _body(t: int, values: np.ndarray) -> bytes:
    stamp = sc.iso(t)
    return json.dumps([{"sensor": s, "time": stamp, "value": round(float(v), 4)}
                       for s, v in zip(SENSORS, values, strict=True)]).encode()


def test_the_agent_keeps_pace_with_one_second_readings_and_names_a_step(tmp_path, mosquitto):
    rng = np.random.default_rng(3)
    now = math.floor(time.time())
    times = np.arange(now - PAST_S, now + LIVE_S + 1)
    values = 50.0 + rng.normal(0.0, 1.0, (len(times), len(SENSORS)))
    step = now + STEP_AT_S
    values[times >= step, SENSORS.index(STEPPED)] += STEP_SD
    topic = f"sensors/{SITE}/logger"
    conn = {"host": "127.0.0.1", "port": mosquitto.port}
    state = tmp_path / "state"
    config = {
        "site": SITE, "state_dir": str(state), "log_level": "INFO",
        "source": {"type": "mqtt", **conn, "topics": [f"sensors/{SITE}/#"],
                   "client_id": "mmdwatch-1s"},
        "windows": {"before": "1min", "after": "10s", "resample": "1s"},
        "schedule": {"every": "2s", "poll": "0.5s"},  # clock: wall, the default
        "engine": {"device": "cpu"},
        "sinks": [{"type": "jsonl", "path": str(state / "results.jsonl"), "fsync": True},
                  {"type": "mqtt", **conn, "prefix": "mmdwatch"}],
    }
    path = sc.write_config(tmp_path / "agent.yaml", config)
    alerts = Subscriber(mosquitto, f"mmdwatch/{SITE}/alert")
    agent = sc.AgentProcess(path, tmp_path / "agent.log", cwd=tmp_path)
    try:
        assert agent.wait_for_log("MQTT source connected", timeout=60), agent.log_text()[-3000:]
        past = times < now
        sc.publish_all("127.0.0.1", mosquitto.port,
                       ((topic, _body(int(t), v)) for t, v in zip(times[past], values[past],
                                                                   strict=True)))
        live = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="logger-1s")
        live.connect("127.0.0.1", mosquitto.port)
        live.loop_start()
        for t, v in zip(times[~past], values[~past], strict=True):
            time.sleep(max(0.0, t - time.time()))  # each second when it has come
            live.publish(topic, _body(int(t), v), qos=1).wait_for_publish(10)
        live.disconnect()
        live.loop_stop()
        # the last inspection whose after window the published seconds fill
        final = pd.Timestamp(int(times[-1]) - 10, unit="s", tz="UTC").floor("2s")
        results = agent.wait_for_results(state / "results.jsonl", final, timeout=120)
    finally:
        agent.stop()
        alerts.close()
    stamps = [pd.Timestamp(r["inspection_time"]) for r in results]
    # every 2 s from the first reading + the before window, none skipped
    assert stamps[0] == pd.Timestamp(int(times[0]) + 60, unit="s", tz="UTC").ceil("2s")
    assert all(b - a == pd.Timedelta(seconds=2) for a, b in itertools.pairwise(stamps))
    assert {r["status"] for r in results} <= {"calibrating", "ok", "firing"}, \
        [(r["inspection_time"], r["summary"]) for r in results if r["status"] not in
         ("calibrating", "ok", "firing")]
    assert any(r["status"] == "ok" for r in results)  # calibrated before the step
    opened = [r for r in results if (r.get("incident") or {}).get("event") == "opened"]
    assert len(opened) == 1, [(r["inspection_time"], r["incident"]) for r in opened]
    first = opened[0]
    t_open = pd.Timestamp(first["inspection_time"])
    after_end = t_open + pd.Timedelta(seconds=10)
    step_at = pd.Timestamp(step, unit="s", tz="UTC")
    assert t_open < step_at < after_end  # its after window holds the step
    assert after_end - step_at <= pd.Timedelta(seconds=12)
    assert first["incident"]["sensors"][0] == STEPPED
    assert first["selected_sensors"] == [STEPPED]
    # the alert on MQTT, its summary at the inspection's second, not its minute
    messages = [json.loads(payload) for payload, _ in alerts.on(f"mmdwatch/{SITE}/alert")]
    sent = [m for m in messages if (m.get("incident") or {}).get("event") == "opened"]
    assert [m["fingerprint"] for m in sent] == [first["fingerprint"]]
    assert first["summary"].startswith(f"Change at {t_open.strftime('%Y-%m-%dT%H:%M')}")
    if t_open.second:
        assert first["summary"].startswith(
            f"Change at {t_open.strftime('%Y-%m-%dT%H:%M:%S')}Z in 1 of 4 sensors: {STEPPED}")
