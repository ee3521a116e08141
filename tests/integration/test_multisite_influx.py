"""Two sites in one InfluxDB measurement, told apart by a tag (``site_tag: dma``), with the
same sensor ids: one agent inspects both, each from its own points only; the workers of
the process pool read their windows from influxd themselves."""
from __future__ import annotations

import json

import pytest

from tests.connectors.mqtt_helpers import wait_until
from tests.integration import scenario as sc
from tests.results_file import read_results

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]


def test_sites_selected_by_an_influxdb_tag(tmp_path, influxd):
    influxd.create_database("scada")
    for site, seed, drop in (("east", 2, sc.DROP), ("west", 3, 0.0)):
        times, values = sc.network(seed=seed, drop=drop)
        lines = [line.replace("pressure,", f"pressure,dma={site},", 1)
                 for line in sc.influx_lines(times, values)]
        for i in range(0, len(lines), 20_000):
            influxd.write_lines("scada", lines[i:i + 20_000])

    config = sc.base_config(tmp_path / "state")
    del config["site"]
    config["sites"] = [{"id": "east"}, {"id": "west"}]
    config["source"] = {"type": "influxdb", "url": influxd.url, "database": "scada",
                        "measurement": "pressure", "sensor_tag": "sensor", "field": "value",
                        "site_tag": "dma"}
    path = sc.write_config(tmp_path / "agent.yaml", config)
    out = tmp_path / "state" / "results.jsonl"
    agent = sc.AgentProcess(path, tmp_path / "agent.log", cwd=tmp_path)
    try:
        assert wait_until(lambda: len(read_results(out)) >= 2,
                          timeout=400), agent.log_text()[-3000:]
    finally:
        code = agent.stop()
    assert code == 0, agent.log_text()[-3000:]
    assert "local process pool, 2 worker process(es)" in agent.log_text()

    results = {r["site"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert set(results) == {"east", "west"}
    east, west = results["east"], results["west"]
    assert east["inspection_time"] == west["inspection_time"] == sc.iso(sc.T_CHANGE)
    assert east["fingerprint"] != west["fingerprint"]
    # each site saw its own 24 sensors only (the same ids in both)
    for r in (east, west):
        assert {s["sensor_id"] for s in r["sensors"]} == set(sc.SENSORS)
        assert r["windows"]["before"]["n"] == r["windows"]["after"]["n"] == 168
    assert east["status"] == "firing"
    assert {s["sensor_id"] for s in east["sensors"][:3]} == set(sc.CHANGED)
    # east's drop of 5 m is not in west's windows
    for r, expected in ((east, sc.DROP), (west, 0.0)):
        rows = {s["sensor_id"]: s for s in r["sensors"]}
        for name in sc.CHANGED:
            change = rows[name]["raw_mean_before"] - rows[name]["raw_mean_after"]
            assert change == pytest.approx(expected, abs=0.5), (r["site"], name)


def test_engine_rule_batches_read_their_windows_from_influxd(tmp_path, influxd):
    """A backfill's engine-rule batches (InspectionBatch with the source config) on a
    process pool of 2: each worker reads its windows from influxd itself and fits them
    through fit_many; the results equal the inline backfill, one time at a time."""
    from datetime import UTC, datetime, timedelta

    from monitor.cli import _site_backfill, _window_reader
    from monitor.compose import build_inspector
    from monitor.config import validate_config
    from monitor.fleet.backfill import plan_backfill, run_backfill
    from monitor.fleet.executors import InlineExecutor, LocalExecutor
    from tests.integration.test_dask_executor import assert_identical
    from tests.result_contract import check

    influxd.create_database("scada")
    times, values = sc.network(seed=2, drop=sc.DROP)
    lines = sc.influx_lines(times, values)
    for i in range(0, len(lines), 20_000):
        influxd.write_lines("scada", lines[i:i + 20_000])
    raw = sc.base_config(tmp_path / "state")
    raw["sinks"] = []
    raw["source"] = {"type": "influxdb", "url": influxd.url, "database": "scada",
                     "measurement": "pressure", "sensor_tag": "sensor", "field": "value"}
    config = validate_config(raw)
    inspector = build_inspector(config)
    read, close = _window_reader(config)
    t0 = datetime.fromtimestamp(sc.T_CHANGE, UTC)
    span = [t0 + timedelta(hours=h) for h in range(6)]
    try:
        plan = plan_backfill(span, None, None)  # exactly these times
        site = _site_backfill(config, inspector, read, plan)
        assert site.source is not None  # the workers query influxd, no frame travels
        inline: list[dict] = []
        run_backfill([site], InlineExecutor(), inline.append, batch=1)
        pool = LocalExecutor(2)
        batched: list[dict] = []
        try:
            run_backfill([_site_backfill(config, inspector, read, plan)], pool,
                         batched.append, batch=3)
        finally:
            pool.close()
    finally:
        close()
    for r in batched:
        check(r)
    assert_identical(inline, batched)
    assert batched[0]["status"] == "firing"
    assert {s["sensor_id"] for s in batched[0]["sensors"][:3]} == set(sc.CHANGED)
