"""One reading without a time in a ``clock: data`` replay (issue 19, item 1).

Four days of 2019 L-Town pressures go through a real mosquitto into ``mmdwatch run`` on
the data clock, one JSON array per 5-minute step; halfway through, ``{"sensor": "n4",
"value": 30}`` arrives with no time. Stamped with the receive time (years after the data)
it used to move the clock years ahead: every pending inspection became due and ended as
``error``, and retention pruned the store. Now it is refused, counted once, and nothing
else changes: no reading pruned, no error result.
"""
from __future__ import annotations

import itertools
import json
import urllib.request

import pandas as pd
import pytest

from monitor.storage.store import NO_TIME_ON_DATA_CLOCK, ReadingStore
from tests.integration import scenario as sc
from tests.servers import free_port
from tests.shared_data import LTOWN

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(600)]

SITE = "l-town-clock"
DAYS = 4


def _messages(frame: pd.DataFrame, inject_at: int):
    wide = frame.pivot_table(index="timestamp", columns="sensor_id", values="pressure_m")
    for i, (t, row) in enumerate(wide.iterrows()):
        if i == inject_at:  # a gateway that forgot the time on one reading
            yield f"sensors/{SITE}/n4", b'{"sensor":"n4","value":30}'
        stamp = pd.Timestamp(t).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = [{"sensor": s, "time": stamp, "value": float(v)}
                for s, v in row.items() if pd.notna(v)]
        yield f"sensors/{SITE}/gateway", json.dumps(body).encode()


def _rejected(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("mmdwatch_readings_rejected_total{"):
            labels, value = line.rsplit(" ", 1)
            out[labels.split('reason="')[1].split('"')[0]] = float(value)
    return out


@pytest.mark.skipif(not (LTOWN / "pressures.csv.gz").exists(),
                    reason="the shared L-Town dev data set is not here")
def test_a_reading_without_time_neither_prunes_nor_errors(tmp_path, mosquitto):
    frame = pd.read_csv(LTOWN / "pressures.csv.gz")
    first = pd.Timestamp(frame["timestamp"].min())
    frame = frame[pd.to_datetime(frame["timestamp"]) < first + pd.Timedelta(days=DAYS)]
    steps = frame["timestamp"].nunique()
    conn = {"host": "127.0.0.1", "port": mosquitto.port}
    state = tmp_path / "state"
    health = free_port()
    config = {
        "site": SITE, "state_dir": str(state), "log_level": "INFO",
        "source": {"type": "mqtt", **conn, "topics": [f"sensors/{SITE}/#"],
                   "client_id": "mmdwatch-clock"},
        # short windows and a light engine: the test is about time, not statistics
        "profile": "retrospective",
        "windows": {"before": "1d", "after": "12h", "resample": "1h"},
        "schedule": {"every": "6h", "clock": "data", "poll": "0.5s"},
        "engine": {"method": "mmd-baseline", "device": "cpu", "seed": 0, "block_size": None},
        "store": {"retention": "30d"},  # whatever is pruned, a bad clock pruned it
        "health": {"port": health},
        "sinks": [{"type": "jsonl", "path": str(state / "results.jsonl"), "fsync": True}],
    }
    path = sc.write_config(tmp_path / "agent.yaml", config)
    agent = sc.AgentProcess(path, tmp_path / "agent.log", cwd=tmp_path)
    last = pd.Timestamp(frame["timestamp"].max()).tz_localize("UTC")
    # the newest time whose 12 h after window the data clock (the last step) has passed
    final = (last - pd.Timedelta(hours=12)).floor("6h")
    try:
        assert agent.wait_for_log("MQTT source connected", timeout=60), agent.log_text()[-3000:]
        sc.publish_all("127.0.0.1", mosquitto.port, _messages(frame, inject_at=steps // 2))
        results = agent.wait_for_results(state / "results.jsonl", final, timeout=400)
        rejected = _rejected(health)
    finally:
        agent.stop()
    log_text = agent.log_text()
    assert rejected == {NO_TIME_ON_DATA_CLOCK: 1.0}, rejected
    assert f"on topic 'sensors/{SITE}/n4'" in log_text and "'n4'" in log_text
    assert [r["error"] for r in results if r["status"] == "error"] == []
    times = [pd.Timestamp(r["inspection_time"]) for r in results]
    assert all(b - a == pd.Timedelta(hours=6) for a, b in itertools.pairwise(times))
    assert times[-1] == final  # nothing beyond the data came due
    assert "store: dropped" not in log_text
    store = ReadingStore(state / "readings.sqlite")
    try:
        sent = frame.dropna().drop_duplicates(["timestamp", "sensor_id"])
        assert store.count() == len(sent)  # every real reading, none pruned
    finally:
        store.close()
