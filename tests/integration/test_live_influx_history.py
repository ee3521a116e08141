"""An InfluxDB with two weeks of history gives calibrated alerts from the first inspection.

The d1 dev scenario (30 L-Town sensors, leak at 2019-09-16 07:45) goes into a real influxd;
``mmdwatch run`` starts with the live defaults, the data clock and its first inspection
set just before the leak. On first start the agent computes the calibration history from
the source's past, so the first inspection is already calibrated (never ``calibrating``),
and an incident opens on the leak, naming the sensor nearest it, written back as a
``mmdwatch_incident`` point.
"""
from __future__ import annotations

import json

import pandas as pd
import pytest

from tests.connectors.mqtt_helpers import wait_until
from tests.integration import scenario as sc
from tests.results_file import read_results
from tests.shared_data import DELAY_DEV

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(900)]

SCENARIO = DELAY_DEV / "d1"
SITE = "l-town-d1"


@pytest.mark.skipif(not SCENARIO.exists(), reason="the shared L-Town delay scenarios are not here")
def test_first_inspection_is_calibrated_from_the_sources_history(tmp_path, influxd):
    truth = json.loads((SCENARIO / "ground_truth.json").read_text())
    frame = pd.read_csv(SCENARIO / "pressures.csv.gz", parse_dates=["timestamp"])
    frame = frame[frame["timestamp"] < pd.Timestamp("2019-09-17")]  # up to the leak's day
    epoch = (frame["timestamp"] - pd.Timestamp("1970-01-01")) // pd.Timedelta(seconds=1)
    lines = [f"pressure,sensor={s} value={v} {t}" for s, v, t in
             zip(frame["sensor_id"], frame["pressure_m"], epoch, strict=True)]
    influxd.create_database("scada")
    influxd.create_database("mmdwatch")
    for i in range(0, len(lines), 20_000):
        influxd.write_lines("scada", lines[i:i + 20_000])

    state = tmp_path / "state"
    config = {  # live defaults: only the source, sinks, clock and first time are given
        "site": SITE, "state_dir": str(state), "log_level": "INFO",
        "source": {"type": "influxdb", "url": influxd.url, "database": "scada",
                   "measurement": "pressure", "sensor_tag": "sensor", "field": "value"},
        "schedule": {"clock": "data", "poll": "0.5s", "start": "2019-09-15T20:00:00Z"},
        "sinks": [{"type": "jsonl", "path": str(state / "results.jsonl"), "fsync": True},
                  {"type": "influxdb", "url": influxd.url, "database": "mmdwatch"}],
    }
    path = sc.write_config(tmp_path / "agent.yaml", config)
    results_file = state / "results.jsonl"
    # the last inspection whose 16-hour after window the data cover: 2019-09-16T07:00
    last = "2019-09-16T07:00:00Z"

    def results() -> list[dict]:
        return read_results(results_file)

    agent = sc.AgentProcess(path, tmp_path / "agent.log", cwd=tmp_path)
    try:
        assert wait_until(lambda: any(r["inspection_time"] == last for r in results()),
                          timeout=600), agent.log_text()[-3000:]

        def incident_points() -> list:
            out = influxd.query("SELECT * FROM mmdwatch_incident", db="mmdwatch")
            return out["results"][0].get("series", [])

        assert wait_until(lambda: bool(incident_points()), timeout=60)
    finally:
        assert agent.stop() == 0, agent.log_text()[-3000:]
    got = results()
    assert got[0]["inspection_time"] == "2019-09-15T20:00:00Z"
    assert "calibrating" not in {r["status"] for r in got}, got[0]["summary"]
    assert got[0]["detection"]["history_n"] >= 96  # computed from the source's past
    assert "calibration history" in agent.log_text() or "calibration:" in agent.log_text()
    opened = [r for r in got if (r["incident"] or {}).get("event") == "opened"]
    assert len(opened) == 1, [r["summary"] for r in got]
    first = opened[0]
    assert first["status"] == "firing"
    assert first["selected_sensors"][0] == truth["sensors_by_leak_effect"][0]
    series = incident_points()[0]
    row = dict(zip(series["columns"], series["values"][0], strict=True))
    assert (row["site"], row["event"], row["incident_id"]) == (
        SITE, "opened", first["incident"]["id"])
