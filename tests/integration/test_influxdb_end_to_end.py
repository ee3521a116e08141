"""End to end over a real influxd: data in through /write, ``mmdwatch run`` with the InfluxDB
source (server-side hourly means), result points written back by the InfluxDB sink."""
from __future__ import annotations

import json

import pytest

from tests.connectors.mqtt_helpers import wait_until
from tests.integration import scenario as sc

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(900)]


def test_inspection_from_influxdb_and_points_written_back(tmp_path, influxd):
    times, values = sc.network(seed=2)
    influxd.create_database("scada")
    influxd.create_database("mmdwatch")
    lines = sc.influx_lines(times, values)
    for i in range(0, len(lines), 20_000):
        influxd.write_lines("scada", lines[i:i + 20_000])

    config = sc.base_config(tmp_path / "state")
    config["source"] = {"type": "influxdb", "url": influxd.url, "database": "scada",
                        "measurement": "pressure", "sensor_tag": "sensor", "field": "value"}
    config["sinks"].append({"type": "influxdb", "url": influxd.url, "database": "mmdwatch"})
    path = sc.write_config(tmp_path / "agent.yaml", config)
    results = tmp_path / "state" / "results.jsonl"
    agent = sc.AgentProcess(path, tmp_path / "agent.log", cwd=tmp_path)
    try:
        assert wait_until(lambda: results.exists() and results.read_text().strip(),
                          timeout=600), agent.log_text()[-3000:]

        def written() -> list:
            out = influxd.query("SELECT * FROM mmdwatch_inspection", db="mmdwatch")
            return out["results"][0].get("series", [])

        assert wait_until(lambda: bool(written()), timeout=60), agent.log_text()[-3000:]
    finally:
        code = agent.stop()
    assert code == 0, agent.log_text()[-3000:]

    result = json.loads(results.read_text().splitlines()[0])
    assert result["status"] == "firing"
    # The changed sensors lead the ranking and only changed sensors are selected. (Not
    # necessarily all three: the L1-penalised selection can leave out a change that adds
    # little once the others already separate the windows; the MQTT e2e checks all three.)
    top = [s["sensor_id"] for s in result["sensors"][:len(sc.CHANGED)]]
    assert set(top) == set(sc.CHANGED), top
    assert result["selected_sensors"] and set(result["selected_sensors"]) <= set(sc.CHANGED)
    assert result["windows"]["before"]["n"] == result["windows"]["after"]["n"] == 168

    series = written()[0]
    row = dict(zip(series["columns"], series["values"][0], strict=True))
    assert row["time"] == sc.T_CHANGE
    assert (row["site"], row["status"]) == (sc.SITE, "firing")
    assert row["fingerprint"] == result["fingerprint"]
    assert row["n_sensors"] == len(sc.SENSORS)
    scores = influxd.query("SELECT score, rank, selected FROM mmdwatch_sensor_score "
                           "GROUP BY sensor_id", db="mmdwatch")["results"][0]["series"]
    by_sensor = {s["tags"]["sensor_id"]: s["values"][0] for s in scores}
    assert set(by_sensor) == set(sc.SENSORS)
    for sensor in result["sensors"]:
        t, score, rank, selected = by_sensor[sensor["sensor_id"]]
        assert (t, rank, selected) == (sc.T_CHANGE, sensor["rank"], sensor["selected"])
        assert score == pytest.approx(sensor["score"])
