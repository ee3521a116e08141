"""Three sites on one broker, one agent (``sites:``), one of them with a leak: only that
site alerts, and it names the right sensors.

Sites (hourly means of the shared L-Town delay scenarios, one JSON array per site and hour
on ``sensors/<site>/gateway``; the agent takes the site from the topic,
``sensor_from_topic: sensors/{site}/{sensor}``):

* ``dma-leak``: d1 from 2019-09-05, its leak starting 2019-09-16 07:45;
* ``dma-calm``: the leak-free first 11 days of d2, shifted 5 weeks back into September;
* ``dma-slow``: the leak-free first 11 days of d3, shifted 9 weeks back, inspected every
  2 hours (a per-site schedule);
* ``dma-dark``: configured, never publishes: its inspections end as ``error`` and block
  nothing; and ``ghost`` publishes without being configured: dropped and counted, logged.

The due inspections of different sites run concurrently on the default executor (a
local process pool of 2 workers).
"""
from __future__ import annotations

import itertools
import json
import time
from collections.abc import Iterator

import pandas as pd
import pytest

from monitor.storage.store import robust_clock
from tests.connectors.mqtt_helpers import Subscriber
from tests.integration import scenario as sc
from tests.results_file import read_results
from tests.shared_data import DELAY_DEV

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

LEAK, CALM, SLOW, DARK = "dma-leak", "dma-calm", "dma-slow", "dma-dark"
AFTER = pd.Timedelta(hours=16)


def _hourly(name: str, start: str, end: str, shift: pd.Timedelta) -> pd.DataFrame:
    """Hourly means of scenario ``name`` over [start, end), moved by ``shift`` (whole weeks:
    the weekly demand pattern stays on its weekdays)."""
    frame = pd.read_csv(DELAY_DEV / name / "pressures.csv.gz", parse_dates=["timestamp"])
    frame = frame[(frame["timestamp"] >= start) & (frame["timestamp"] < end)]
    frame = frame.assign(time=frame["timestamp"].dt.floor("1h") + shift)
    return frame.groupby(["time", "sensor_id"], as_index=False)["pressure_m"].mean()


def _messages(sites: dict[str, pd.DataFrame]) -> Iterator[tuple[str, bytes]]:
    """One JSON array per site and hour, the sites interleaved in time (one broker)."""
    stamps = sorted(set().union(*(set(f["time"]) for f in sites.values())))
    grouped = {site: dict(tuple(f.groupby("time"))) for site, f in sites.items()}
    for t in stamps:
        text = pd.Timestamp(t).strftime("%Y-%m-%dT%H:%M:%SZ")
        for site, groups in grouped.items():
            rows = groups.get(t)
            if rows is None:
                continue
            body = [{"sensor": s, "time": text, "value": round(float(v), 4)}
                    for s, v in zip(rows["sensor_id"], rows["pressure_m"], strict=True)]
            yield f"sensors/{site}/gateway", json.dumps(body).encode()
        if t.hour == 0 and t.day in (10, 11):  # a site nobody configured
            yield "sensors/ghost/gateway", b'[{"sensor": "g1", "value": 1.0}]'


@pytest.mark.skipif(not (DELAY_DEV / "d3").exists(),
                    reason="the shared L-Town delay scenarios are not here")
def test_three_sites_one_broker_only_the_leaking_site_alerts(tmp_path, mosquitto_persistent):
    broker = mosquitto_persistent
    truth = json.loads((DELAY_DEV / "d1" / "ground_truth.json").read_text())
    onset = pd.Timestamp(truth["target_leak_start"]).tz_localize("UTC")
    sites = {
        LEAK: _hourly("d1", "2019-09-05", "2019-09-17 12:00", pd.Timedelta(0)),
        CALM: _hourly("d2", "2019-10-07", "2019-10-18 06:00", pd.Timedelta(weeks=-5)),
        SLOW: _hourly("d3", "2019-11-04", "2019-11-15 06:00", pd.Timedelta(weeks=-9)),
    }
    conn = {"host": "127.0.0.1", "port": broker.port}
    state = tmp_path / "state"
    config = {
        "state_dir": str(state), "log_level": "INFO",
        "source": {"type": "mqtt", **conn, "topics": ["sensors/+/gateway"],
                   "sensor_from_topic": "sensors/{site}/{sensor}",
                   "client_id": "mmdwatch-fleet"},
        # the live profile's defaults, with 2 days of calibration history (docs/decision.md
        # figures: the same delays on d1-d4) so the replay stays short
        "decision": {"min_history": "2d"},
        "schedule": {"clock": "data", "poll": "0.5s"},
        "sites": [
            {"id": LEAK}, {"id": CALM},
            {"id": SLOW, "schedule": {"every": "2h"}},
            {"id": DARK, "schedule": {"every": "6h"}},
        ],
        "sinks": [{"type": "jsonl", "path": str(state / "results.jsonl"), "fsync": True},
                  {"type": "mqtt", **conn, "prefix": "mmdwatch"}],
    }
    path = sc.write_config(tmp_path / "agent.yaml", config)
    sub = Subscriber(broker, "mmdwatch/+/alert")
    agent = sc.AgentProcess(path, tmp_path / "agent.log", cwd=tmp_path)
    # the last inspection of each site whose after window its data complete
    final = {site: (f["time"].max().tz_localize("UTC") - AFTER).floor("2h")
             for site, f in sites.items()}
    # the dark site runs on the whole store's data clock, the lower median of every
    # sensor's newest time (monitor.storage.store.robust_clock); its error results come
    # after the others' and must be waited for too (CI once read them too early)
    store_clock = robust_clock(pd.Timestamp(t).timestamp() for f in sites.values()
                               for t in f.groupby("sensor_id")["time"].max())
    assert store_clock is not None
    final[DARK] = (pd.Timestamp(store_clock, unit="s", tz="UTC") - AFTER).floor("6h")
    try:
        assert agent.wait_for_log("MQTT source connected", timeout=60), agent.log_text()[-3000:]
        sc.publish_all("127.0.0.1", broker.port, _messages(sites))
        results_file = state / "results.jsonl"
        deadline = time.monotonic() + 480
        results: list[dict] = []
        while time.monotonic() < deadline:
            if results_file.exists():
                results = read_results(results_file)
                last = {r["site"]: pd.Timestamp(r["inspection_time"]) for r in results}
                if all(last.get(site, pd.Timestamp(0, tz="UTC")) >= final[site]
                       for site in final):
                    break
            assert agent.proc.poll() is None, agent.log_text()[-3000:]
            time.sleep(1)
        else:
            pytest.fail(f"not every site finished: {agent.log_text()[-3000:]}")
    finally:
        code = agent.stop()
    assert code == 0, agent.log_text()[-3000:]
    log = agent.log_text()
    by_site: dict[str, list[dict]] = {}
    for r in results:
        by_site.setdefault(r["site"], []).append(r)

    # every site ran on its own clock and schedule; each result once
    assert len({r["fingerprint"] for r in results}) == len(results)
    for site, rows in by_site.items():
        times = [pd.Timestamp(r["inspection_time"]) for r in rows]
        step = pd.Timedelta(hours={SLOW: 2, DARK: 6}.get(site, 1))
        assert all(b - a == step for a, b in itertools.pairwise(times)), site
    assert "local process pool, 2 worker process(es)" in log

    # the leak: one incident, opened after the onset, naming sensors the leak moves most
    leak = by_site[LEAK]
    events = [(pd.Timestamp(r["inspection_time"]), r["incident"]) for r in leak
              if (r.get("incident") or {}).get("event")]
    opened = [(t, inc) for t, inc in events if inc["event"] == "opened"]
    assert len(opened) == 1, [(str(t), inc["event"]) for t, inc in events]
    t_open, incident = opened[0]
    assert t_open + AFTER > onset and t_open + AFTER - onset <= pd.Timedelta(hours=24)
    assert incident["id"].startswith(f"{LEAK}-")
    top_effect = set(truth["sensors_by_leak_effect"][:3])
    firing = [r for r in leak if r["status"] == "firing"]
    assert firing and any({s["sensor_id"] for s in r["sensors"][:3]} & top_effect
                          for r in firing)
    assert set(incident["sensors"]) & set(truth["sensors_by_leak_effect"][:8])

    # the leak-free sites: calibrated, never firing, no incident
    for site in (CALM, SLOW):
        rows = by_site[site]
        assert {r["status"] for r in rows} <= {"calibrating", "ok"}, site
        assert any(r["status"] == "ok" for r in rows), site
        assert not any(r.get("incident") for r in rows), site
        assert len({s["sensor_id"] for s in rows[-1]["sensors"]}) == 30
    # no data at all: errors of its own, and the other sites went on regardless
    assert by_site[DARK] and all(r["status"] == "error" for r in by_site[DARK])
    # a site that is not configured: dropped, counted, logged with the fix, never a crash
    assert "names site 'ghost', which is not configured; add {id: ghost}" in log

    # MQTT: alerts on the leaking site's topic only, one per incident event
    alerts = list(sub.messages)
    assert {topic for topic, _, _ in alerts} == {f"mmdwatch/{LEAK}/alert"}
    assert [json.loads(p)["incident"]["event"] for _, p, _ in alerts] == \
        [inc["event"] for _, inc in events]
    sub.close()
