"""InfluxSource / InfluxSink against a real influxd 1.x: windows, watermark, errors, auth, TLS."""
from __future__ import annotations

import pandas as pd
import pytest

from connectors.base import SinkError
from connectors.influxdb import (
    InfluxAuthError,
    InfluxDatabaseMissing,
    InfluxQueryError,
    InfluxSink,
    InfluxSource,
    InfluxUnreachable,
)
from connectors.influxdb.http import InfluxHttp
from tests.servers import free_port

pytestmark = pytest.mark.integration

T0 = pd.Timestamp("2024-06-01T00:00:00Z")
T0_S = int(T0.timestamp())


def _load(server, db: str = "scada", sensors=("a", "b", "c"), hours: int = 4) -> None:
    """5-minute points; value = sensor index * 100 + minute-of-run / 5."""
    server.create_database(db)
    lines = [f"pressure,sensor={s} value={k * 100 + i} {T0_S + 300 * i}"
             for k, s in enumerate(sensors) for i in range(hours * 12)]
    server.write_lines(db, lines)


def _source(server, **extra) -> InfluxSource:
    cfg = {"type": "influxdb", "url": server.url, "database": "scada",
           "measurement": "pressure", "sensor_tag": "sensor", "field": "value"}
    if server.username:
        cfg.update(username=server.username, password=server.password)
    if server.tls:
        cfg["tls"] = {"ca_certs": str(server.tls.cert)}
    return InfluxSource({**cfg, **extra})


def test_raw_window_returns_every_point_in_start_inclusive_end_exclusive(influxd):
    _load(influxd)
    source = _source(influxd)
    frame = source.read_window(T0, T0 + pd.Timedelta("1h"))
    assert list(frame.columns) == ["time", "sensor", "value"]
    assert len(frame) == 3 * 12
    assert frame["time"].min() == T0 and frame["time"].max() == T0 + pd.Timedelta("55min")
    assert str(frame["time"].dt.tz) == "UTC"
    b = frame[frame.sensor == "b"].sort_values("time")
    assert b["value"].tolist() == [100.0 + i for i in range(12)]


def test_server_side_hourly_means_aligned_to_the_window_start(influxd):
    _load(influxd)
    source = _source(influxd)
    start = T0 + pd.Timedelta("30min")  # not on an hour boundary
    frame = source.read_window(start, start + pd.Timedelta("2h"), resample="1h")
    a = frame[frame.sensor == "a"].sort_values("time")
    assert a["time"].tolist() == [start, start + pd.Timedelta("1h")]
    assert a["value"].tolist() == [sum(range(6, 18)) / 12, sum(range(18, 30)) / 12]
    maxes = source.read_window(T0, T0 + pd.Timedelta("1h"), resample="1h", aggregate="max")
    assert sorted(maxes["value"]) == [11.0, 111.0, 211.0]


def test_watermark_is_the_newest_point(influxd):
    influxd.create_database("scada")
    source = _source(influxd)
    assert source.watermark() is None
    _load(influxd)
    assert source.watermark() == T0 + pd.Timedelta("3h55min")


def test_empty_window_is_an_empty_frame(influxd):
    _load(influxd)
    frame = _source(influxd).read_window(T0 - pd.Timedelta(days=2), T0 - pd.Timedelta(days=1))
    assert frame.empty and list(frame.columns) == ["time", "sensor", "value"]


def test_clear_errors(influxd):
    influxd.create_database("scada")
    with pytest.raises(InfluxDatabaseMissing, match="CREATE DATABASE"):
        _source(influxd, database="nope").read_window(T0, T0 + pd.Timedelta("1h"))
    _load(influxd)
    with pytest.raises(InfluxQueryError, match="sensor_tag"):
        _source(influxd, sensor_tag="station").read_window(T0, T0 + pd.Timedelta("1h"))
    http = InfluxHttp(_source(influxd).config)
    with pytest.raises(InfluxQueryError, match="rejected the query"):
        http.query("SELEC nothing")
    with pytest.raises(InfluxUnreachable, match="cannot reach InfluxDB.*influxd runs"):
        InfluxSource({"type": "influxdb", "url": f"http://127.0.0.1:{free_port()}",
                      "database": "x", "measurement": "m"}).watermark()


def _result(status: str = "firing") -> dict:
    return {
        "schema": "mmdwatch.inspection/v1", "fingerprint": "f1", "site": "l town",
        "status": status, "inspection_time": "2018-06-01T00:00:00Z",
        "test": {"method": "cv-aggregation", "p_value": 0.004, "alpha": 0.05, "seed": 0},
        "sensors": [
            {"sensor_id": "n296", "rank": 1, "score": 1.0, "selected": True,
             "mean_before": 1.0, "mean_after": 0.93},
            {"sensor_id": "n,2", "rank": 2, "score": 0.1, "selected": False,
             "mean_before": float("nan"), "mean_after": 1.0},
        ],
        "selected_sensors": ["n296"],
        "summary": 'Change at 2018-06-01T00:00Z in 1 of 2 sensors: "n296"',
        "generator": {"name": "mmdwatch", "version": "0.1.0", "device": "cpu",
                      "runtime_s": 1.9},
    }


def test_sink_writes_inspection_and_sensor_score_points(influxd):
    influxd.create_database("results")
    sink = InfluxSink({"type": "influxdb", "url": influxd.url, "database": "results"})
    sink.send(_result())
    sink.close()
    t = int(pd.Timestamp("2018-06-01T00:00:00Z").timestamp())
    insp = influxd.query("SELECT * FROM mmdwatch_inspection", db="results")
    row = dict(zip(insp["results"][0]["series"][0]["columns"],
                   insp["results"][0]["series"][0]["values"][0], strict=True))
    assert row["time"] == t and row["site"] == "l town" and row["status"] == "firing"
    assert row["p_value"] == 0.004 and row["n_selected"] == 1 and row["fingerprint"] == "f1"
    assert row["summary"].endswith('"n296"')
    scores = influxd.query("SELECT score, rank, selected, mean_before FROM "
                           "mmdwatch_sensor_score GROUP BY site, sensor_id", db="results")
    by_sensor = {s["tags"]["sensor_id"]: s["values"][0] for s in scores["results"][0]["series"]}
    assert by_sensor == {"n296": [t, 1.0, 1, True, 1.0], "n,2": [t, 0.1, 2, False, None]}


def test_sink_errors_are_sink_errors_the_outbox_retries(influxd):
    sink = InfluxSink({"type": "influxdb", "url": influxd.url, "database": "missing"})
    with pytest.raises(SinkError, match="database 'missing' not found.*retries"):
        sink.send(_result())
    with pytest.raises(SinkError, match="inspection_time"):
        sink.send({"site": "x"})


def test_auth_and_tls(influxd_secure):
    _load(influxd_secure)
    frame = _source(influxd_secure).read_window(T0, T0 + pd.Timedelta("1h"), resample="1h")
    assert len(frame) == 3
    with pytest.raises(InfluxAuthError, match="username/password or token"):
        _source(influxd_secure, password="wrong").watermark()
    untrusted = {"type": "influxdb", "url": influxd_secure.url, "database": "scada",
                 "measurement": "pressure", "username": "admin", "password": "x"}
    with pytest.raises(InfluxUnreachable, match="not trusted.*tls.ca_certs"):
        InfluxSource(untrusted).watermark()
    sink = InfluxSink({"type": "influxdb", "url": influxd_secure.url, "database": "scada",
                       "username": influxd_secure.username,
                       "password": influxd_secure.password,
                       "tls": {"ca_certs": str(influxd_secure.tls.cert)}})
    sink.send(_result("ok"))
    out = influxd_secure.query("SELECT count(score) FROM mmdwatch_sensor_score", db="scada")
    assert out["results"][0]["series"][0]["values"][0][1] == 2


def test_token_goes_in_the_authorization_header_as_influx_2_expects():
    http = InfluxHttp(InfluxSource.Config.model_validate(
        {"type": "influxdb", "url": "http://h:1", "database": "d", "measurement": "m",
         "token": "tok-123"}))
    assert http._client.headers["Authorization"] == "Token tok-123"
    assert "tok-123" not in repr(http) and "tok-123" not in repr(http.config)


def test_secrets_stay_out_of_repr():
    src = InfluxSource({"type": "influxdb", "url": "http://h:1", "database": "d",
                        "measurement": "m", "username": "u", "password": "hunter2"})
    assert "hunter2" not in repr(src) and "hunter2" not in repr(src.config)


def test_answers_are_read_in_chunks_without_losing_points(influxd):
    _load(influxd)
    http = InfluxHttp(_source(influxd).config)
    series = http.query('SELECT "value" FROM "pressure" GROUP BY "sensor"', chunk_size=7)
    assert len(series) > 3  # each sensor's 48 points came in several chunks
    frame_points = sum(len(s["values"]) for s in series)
    assert frame_points == 3 * 48
