"""Many sites in one agent config (``sites:``): validation with the fix named, per-site
overrides, the single-site config unchanged, readings routed to their site, one store and
one state database kept apart per site, and an in-process agent over three sites of which
one is bad."""
from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from connectors.base import Reading
from connectors.mqtt.payload import compile_topic_pattern, parse_payload
from monitor.compose import build_agent, build_inspector
from monitor.config import ConfigError, validate_config
from monitor.fleet.sites import SiteRouter
from monitor.service.metrics import Metrics
from monitor.storage.state import AgentState
from monitor.storage.store import ReadingStore, site_key

FILE = {"type": "file", "path": "data.csv"}
MQTT = {"type": "mqtt", "host": "127.0.0.1", "topics": ["sensors/#"],
        "sensor_from_topic": "sensors/{site}/{sensor}"}
INFLUX = {"type": "influxdb", "database": "scada", "measurement": "pressure",
          "site_tag": "dma"}
T = datetime(2026, 1, 12, tzinfo=UTC)


def problems(raw):
    with pytest.raises(ConfigError) as err:
        validate_config(raw, env={})
    return err.value.problems


def test_single_site_config_is_unchanged():
    c = validate_config({"site": "north", "source": FILE}, env={})
    assert c.sites is None and not c.multi_site and c.site_configs() == [c]
    # a site of `sites:` without overrides inspects exactly as `site:` (same fingerprint)
    m = validate_config({"sites": [{"id": "north", "sensors": ["a", "b"]}], "source": FILE},
                        env={})
    (north,) = m.site_configs()
    assert north.site == "north"
    assert build_inspector(north).fingerprint(T) == build_inspector(c).fingerprint(T)
    assert north.inspection_settings() == c.inspection_settings()


def test_per_site_overrides_lay_over_the_top_level_sections():
    c = validate_config({
        "source": MQTT, "windows": {"before": "3d"}, "schedule": {"every": "1h"},
        "sites": [
            {"id": "north"},
            {"id": "south", "windows": {"after": "8h"}, "schedule": {"cron": "0 * * * *"},
             "engine": {"seed": 3}, "decision": {"min_history": "2d"}},
        ]}, env={})
    north, south = c.site_configs()
    assert north.windows.before == south.windows.before == timedelta(days=3)
    assert north.windows.after == timedelta(hours=16) and south.windows.after == timedelta(hours=8)
    assert north.schedule.every == timedelta(hours=1) and north.schedule.cron is None
    assert south.schedule.cron == "0 * * * *" and south.schedule.every is None
    assert (north.engine.seed, south.engine.seed) == (0, 3)
    assert south.decision.min_history == timedelta(days=2)
    assert build_inspector(north).fingerprint(T) != build_inspector(south).fingerprint(T)
    assert build_inspector(south).site == "south"


@pytest.mark.parametrize(("raw", "expected"), [
    ({"site": "x", "sites": [{"id": "a", "sensors": ["s1"]}], "source": FILE},
     "site: give either site (one site) or sites"),
    ({"sites": [], "source": FILE}, "sites: is empty; list at least one site"),
    ({"sites": [{"id": "a", "sensors": ["s1"]}, {"id": "a", "sensors": ["s2"]}],
      "source": FILE}, "sites[1].id: 'a' is also the id of sites[0]; give each site its own"),
    ({"sites": [{"id": "a", "sensors": ["s1", "s2"]}, {"id": "b", "sensors": ["s2"]}],
      "source": FILE}, ("sites[1].sensors: 's2' is also claimed by site 'a'; a sensor belongs "
                       "to one site")),
    ({"sites": [{"id": "a"}], "source": FILE},
     "sites[0]: site 'a' lists no sensors and the source does not name sites; add sensors"),
    ({"sites": [{"id": "a b", "sensors": ["s"]}], "source": FILE},
     "sites[0].id: 'a b' may only hold letters, digits"),
    ({"sites": [{"id": "a", "sensors": []}], "source": FILE}, "sites[0].sensors: is empty"),
    ({"sites": [{"id": "a", "windows": {"aftr": "8h"}}], "source": MQTT},
     "sites[0].windows.aftr: unknown key; did you mean 'after'?"),
    ({"sites": [{"id": "a", "windows": {"after": "90min", "resample": "1h"}}],
      "source": MQTT}, "sites[0].windows: "),
    ({"sites": [{"id": "north"}], "source": {**MQTT, "topics": ["sensors/north/#",
                                                                 "sensors/west/#"]}},
     ("source.topics[1]: the topic is for site 'west', which is not in sites; add "
     "{id: west} to sites")),
])
def test_bad_site_configs_name_the_fix(raw, expected):
    found = problems(raw)
    assert any(p.startswith(expected) for p in found), found


def test_sources_that_name_sites():
    for source in (MQTT, INFLUX):
        c = validate_config({"sites": [{"id": "north"}, {"id": "south"}], "source": source},
                            env={})
        assert c.source.names_sites
    assert problems({"site": "x", "source": {**INFLUX, "site_tag": None, "site": "n"}})
    narrowed = validate_config({"site": "x", "source": INFLUX}, env={}).source.for_site(
        "north", ["n1"])
    assert (narrowed.site, narrowed.sensors) == ("north", ["n1"])


def test_topic_pattern_with_a_site_level():
    pattern = compile_topic_pattern("sensors/{site}/{sensor}")
    assert pattern.match("sensors/north/n1") == ("north", "n1")
    assert pattern.match("other/north/n1") == (None, None)
    assert compile_topic_pattern("sensors/+/{sensor}").match("sensors/north/n1") == (None, "n1")
    with pytest.raises(ValueError, match="one '{site}' level at most"):
        compile_topic_pattern("{site}/{site}/{sensor}")
    out = parse_payload(b'[{"sensor": "n1", "time": 1e9, "value": 1}, {"time": 1e9, '
                        b'"value": 2}]', "sensors/north/gw", 0.0, "sensors/{site}/{sensor}")
    assert out.readings == [Reading("n1", 1e9, 1.0, "north"), Reading("gw", 1e9, 2.0, "north")]
    out = parse_payload(b"4.5", "sensors/south/n7", 5.0, "sensors/{site}/{sensor}")
    assert out.readings == [Reading("n7", 5.0, 4.5, "south")]


def test_router_keeps_sites_apart_and_counts_what_it_drops():
    metrics = Metrics()
    router = SiteRouter({"north": None, "south": ["s1", "s2"], "east": ["e1"]}, metrics)
    routed = router.route([
        Reading("n1", 1.0, 1.0, "north"),   # site from the topic
        Reading("s1", 1.0, 2.0, "south"),   # listed
        Reading("x9", 1.0, 3.0, "south"),   # the topic's site does not list it
        Reading("n1", 1.0, 4.0, "ghost"),   # a site nobody configured
        Reading("e1", 1.0, 5.0),            # no site named: by the sensor lists
        Reading("zz", 1.0, 6.0),            # no site named, no list holds it
    ])
    assert [r.sensor for r in routed] == [site_key("north", "n1"), site_key("south", "s1"),
                                          site_key("east", "e1")]
    assert dict(metrics.readings_rejected) == {"unlisted_sensor": 1, "unknown_site": 1,
                                               "unassigned_sensor": 1}


def test_one_store_keeps_the_readings_of_sites_apart(tmp_path):
    store = ReadingStore(tmp_path / "readings.sqlite")
    t0 = T.timestamp()
    store.add([Reading(site_key("north", "n1"), t0 + 3600 * k, 1.0) for k in range(10)])
    store.add([Reading(site_key("south", "n1"), t0 + 3600 * k, 2.0) for k in range(20)])
    north, south = store.for_site("north"), store.for_site("south")
    frame = north.read_window(pd.Timestamp(T), pd.Timestamp(T + timedelta(days=2)))
    assert set(frame["sensor"]) == {"n1"} and set(frame["value"]) == {1.0} and len(frame) == 10
    assert len(south.read_window(pd.Timestamp(T), pd.Timestamp(T + timedelta(days=2)))) == 20
    assert north.watermark() == pd.Timestamp(T + timedelta(hours=9))
    assert south.watermark() == pd.Timestamp(T + timedelta(hours=19))
    assert north.first_time() == pd.Timestamp(T)
    assert store.for_site("west").watermark() is None
    assert store.prune(t0 + 3600 * 15, site="south") == 15  # north untouched
    assert store.count() == 15
    store.close()


def test_readings_of_sites_no_longer_configured_age_out(tmp_path):
    """A site removed from ``sites:`` (and bare keys of an earlier single-site config) is
    pruned under the same retention; configured sites are left to their own pruning."""
    store = ReadingStore(tmp_path / "readings.sqlite")
    t0 = T.timestamp()
    for key in (site_key("north", "n1"), site_key("gone", "g1"), "bare"):
        store.add([Reading(key, t0 + 3600 * k, 1.0) for k in range(10)])
    assert store.prune_others(t0 + 3600 * 4, ["north"]) == 8  # 4 of gone, 4 of bare
    assert store.count() == 22
    assert len(store.for_site("north").read_window(
        pd.Timestamp(T), pd.Timestamp(T + timedelta(days=1)))) == 10
    assert store.prune_others(t0 + 3600 * 4, ["north", "gone"]) == 0
    store.close()


def test_the_agent_prunes_a_removed_sites_readings(tmp_path):
    """A multi-site agent (stream source, not started) whose store still holds a site that
    left the config: a tick drops that site's readings older than the retention behind
    the newest reading, and keeps the configured site's."""
    config = validate_config({
        "state_dir": str(tmp_path / "state"), "source": dict(MQTT),
        "schedule": {"every": "1h", "clock": "data"}, "executor": {"type": "inline"},
        "windows": {"before": "2d", "after": "6h"}, "store": {"retention": "3d"},
        "sinks": [], "sites": [{"id": "north"}, {"id": "south"}]}, env={})
    agent = build_agent(config)
    try:
        assert agent.store is not None
        t0 = T.timestamp()
        for key in (site_key("north", "n1"), site_key("gone", "g1")):
            agent.store.add([Reading(key, t0 + 3600 * k, 1.0) for k in range(24 * 5)])
        agent.tick()
        left = agent.store.for_site("gone").read_window(
            pd.Timestamp(T), pd.Timestamp(T + timedelta(days=6)))
        assert pd.Timestamp(left["time"].min()) == pd.Timestamp(T + timedelta(days=2, hours=-1))
        north = agent.store.for_site("north").read_window(
            pd.Timestamp(T), pd.Timestamp(T + timedelta(days=6)))
        assert len(north) >= len(left)
    finally:
        agent.stop()


def test_state_keeps_each_sites_ledger_and_the_single_site_tables_apart(tmp_path):
    state = AgentState(tmp_path / "state.sqlite")
    north, south = state.for_site("north"), state.for_site("south")

    def result(site, fp):
        return {"fingerprint": fp, "site": site, "status": "ok"}

    north.commit_inspection(100.0, result("north", "f1"), statistic=(1.5, 0.2),
                            incident={"id": "north-1"})
    south.commit_inspection(100.0, result("south", "f2"))
    state.commit_inspection(100.0, result("x", "f3"), statistic=(7.0, None))  # single-site tables
    assert north.is_done(100.0) and south.is_done(100.0) and state.is_done(100.0)
    assert not north.is_done(200.0) and north.last_done() == 100.0
    assert north.history(0.0) == [(100.0, (1.5, 0.2))] and south.history(0.0) == []
    assert state.history(0.0) == [(100.0, (7.0, None))]
    assert north.open_incident() == {"id": "north-1"} and state.open_incident() is None
    north.set_meta("anchor", "1.0")
    assert north.get_meta("anchor") == "1.0" and state.get_meta("anchor") is None
    assert state.outbox_size() == 3  # one outbox for all
    assert not state.publish(100.0, result("north", "f1"))  # the agent's: never republished
    state.close()


def _network(path: Path) -> None:
    """9 days of hourly readings: north n1-n4, south s1-s4, lonely l1 (a bad site)."""
    rng = np.random.default_rng(0)
    times = pd.date_range("2026-01-05", periods=9 * 24, freq="1h", tz="UTC")
    rows = []
    for name in ["n1", "n2", "n3", "n4", "s1", "s2", "s3", "s4", "l1"]:
        level = rng.uniform(40, 60)
        daily = np.sin(2 * np.pi * np.arange(len(times)) / 24 + rng.uniform(0, 6))
        values = level + daily + rng.normal(0, 0.3, len(times))
        rows += [(t.strftime("%Y-%m-%dT%H:%M:%SZ"), name, round(v, 3))
                 for t, v in zip(times, values, strict=True)]
    pd.DataFrame(rows, columns=["time", "sensor", "value"]).to_csv(path, index=False)


def test_agent_runs_each_site_and_a_bad_site_ends_in_error_alone(tmp_path):
    _network(tmp_path / "net.csv")
    out = tmp_path / "results.jsonl"
    config = validate_config({
        "state_dir": str(tmp_path / "state"),
        "source": {"type": "file", "path": str(tmp_path / "net.csv")},
        "schedule": {"every": "6h", "clock": "data", "poll": "0.2s"},
        "windows": {"before": "7d", "after": "12h"},
        "executor": {"type": "inline"},
        "sinks": [{"type": "jsonl", "path": str(out)}],
        "sites": [
            {"id": "north", "sensors": ["n1", "n2", "n3", "n4"]},
            {"id": "south", "sensors": ["s1", "s2", "s3", "s4"],
             "schedule": {"every": "12h"}},
            {"id": "lonely", "sensors": ["l1"]},  # one sensor: every inspection an error
        ]}, env={})
    agent = build_agent(config)
    agent.start()
    try:
        assert agent.wait_idle(120), agent.due()
    finally:
        agent.stop()
    results = [json.loads(line) for line in out.read_text().splitlines()]
    by_site: dict[str, list[dict]] = {}
    for r in results:
        by_site.setdefault(r["site"], []).append(r)
    # 9 days, before 7d, after 12h: north every 6h from 01-12 00:00 to 01-13 12:00 at most
    assert [r["inspection_time"] for r in by_site["north"]][:2] == [
        "2026-01-12T00:00:00Z", "2026-01-12T06:00:00Z"]
    assert [r["inspection_time"] for r in by_site["south"]][:2] == [
        "2026-01-12T00:00:00Z", "2026-01-12T12:00:00Z"]
    assert len(by_site["north"]) == 2 * len(by_site["south"]) - 1
    assert {r["status"] for r in by_site["north"] + by_site["south"]} <= {"calibrating", "ok"}
    assert {s["sensor_id"] for s in by_site["north"][0]["sensors"]} == {"n1", "n2", "n3", "n4"}
    assert len(by_site["lonely"]) == len(by_site["north"])
    assert all(r["status"] == "error" for r in by_site["lonely"])
    assert "min_sensors" in by_site["lonely"][0]["error"] or \
        "sensors" in by_site["lonely"][0]["error"]
    # fingerprints differ per site; each site's ledger holds its own inspections
    assert len({r["fingerprint"] for r in results}) == len(results)
    state = AgentState(tmp_path / "state" / "state.sqlite")
    assert len(state.for_site("north").done_times()) == len(by_site["north"])
    assert state.done_times() == []  # the single-site ledger is not used
    state.close()


def test_one_shot_commands_inspect_one_site_of_many(tmp_path, capsys):
    import yaml

    from monitor.cli import main

    _network(tmp_path / "net.csv")
    path = tmp_path / "agent.yaml"
    path.write_text(yaml.safe_dump({
        "state_dir": str(tmp_path / "state"),
        "source": {"type": "file", "path": str(tmp_path / "net.csv")},
        "sites": [{"id": "north", "sensors": ["n1", "n2", "n3", "n4"]},
                  {"id": "south", "sensors": ["s1", "s2", "s3", "s4"],
                   "windows": {"after": "12h"}}]}))
    assert main(["check-config", "--config", str(path)]) == 0
    assert "2 sites: north, south" in capsys.readouterr().out
    assert main(["inspect", "--config", str(path), "--at", "2026-01-12T00:00:00"]) == 2
    assert "has 2 sites; pick one with --site (north, south)" in capsys.readouterr().err
    assert main(["inspect", "--config", str(path), "--at", "2026-01-12T00:00:00",
                 "--site", "south"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["site"] == "south" and result["windows"]["after"]["end"] == \
        "2026-01-12T12:00:00Z"
    assert {s["sensor_id"] for s in result["sensors"]} == {"s1", "s2", "s3", "s4"}
