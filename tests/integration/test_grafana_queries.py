"""The Grafana dashboard in docs/grafana/ against a real influxd holding real mmdwatch results.

Results come from the real code path: ``mmdwatch backfill`` (retrospective profile,
``mmd-baseline``, daily over 3 days) on two simulated networks, one with a leak and one
without, then ``SiteTracker.observe`` (which attaches the incident blocks, as the agent
does) and the real ``InfluxSink``. Every InfluxQL query of the dashboard (panel targets,
nested row panels, query variables, annotations) is read from the JSON, its Grafana macros
are replaced as Grafana would, and it must return rows. A panel added later is covered
without touching this file; a new template variable needs a value in ``_values``.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml

from connectors.influxdb import InfluxSink
from connectors.influxdb.lineprotocol import INCIDENT, INSPECTION, SENSOR_SCORE
from monitor.cli import main
from monitor.compose import build_incidents, build_inspector
from monitor.config import validate_config
from monitor.decision.tracker import SiteTracker
from monitor.demo.simulate import Scenario, simulate, write_csv

ROOT = Path(__file__).resolve().parents[2]
GRAFANA = ROOT / "docs" / "grafana"
DASHBOARD = GRAFANA / "dashboards" / "mmdwatch.json"
DATASOURCE_YAML = GRAFANA / "provisioning" / "datasources" / "mmdwatch-influxdb.yaml"
PROVIDER_YAML = GRAFANA / "provisioning" / "dashboards" / "mmdwatch.yaml"

DB = "mmdwatch"
LEAK_SITE, CALM_SITE = "leak-net", "calm-net"
MEASUREMENTS = (INSPECTION, SENSOR_SCORE, INCIDENT)
# $name, ${name}, ${name:format}, [[name]]: Grafana's variable syntaxes
VARIABLE = re.compile(r"\$(\w+)|\$\{(\w+)(?::\w+)?\}|\[\[(\w+)\]\]")


# ------------------------------------------------------------------------------------------
# the dashboard
# ------------------------------------------------------------------------------------------
def _load_dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text(encoding="utf-8"))


def _walk_panels(panels: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Panels, with the panels of collapsed rows."""
    out = []
    for panel in panels:
        out.append(panel)
        out.extend(_walk_panels(panel.get("panels") or []))
    return out


def _is_influx(datasource: Any) -> bool:
    return isinstance(datasource, dict) and datasource.get("type") == "influxdb"


def dashboard_queries(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """``(where, InfluxQL)`` for every query the dashboard sends to InfluxDB."""
    out: list[tuple[str, str]] = []
    for panel in _walk_panels(dashboard.get("panels") or []):
        for target in panel.get("targets") or []:
            if _is_influx(target.get("datasource") or panel.get("datasource")):
                where = f"panel {panel.get('id')} {panel.get('title')!r} {target.get('refId')}"
                out.append((where, target.get("query", "")))
    for var in (dashboard.get("templating") or {}).get("list") or []:
        if var.get("type") == "query":
            query = var.get("query")
            if isinstance(query, dict):  # newer Grafana saves {query, refId}
                query = query.get("query")
            out.append((f"variable ${var['name']}", query or ""))
    for anno in (dashboard.get("annotations") or {}).get("list") or []:
        if _is_influx(anno.get("datasource")):
            query = (anno.get("target") or {}).get("query") or anno.get("query") or ""
            out.append((f"annotation {anno.get('name')!r}", query))
    return out


def _regex_escape(value: str) -> str:
    """How Grafana escapes a multi-value variable's value inside an InfluxQL regex."""
    return re.sub(r"([\\^$*+?.()|{}\[\]/])", r"\\\1", value)


def render(query: str, values: dict[str, str]) -> str:
    """Replace Grafana variables and macros; an unknown one is an error."""
    def sub(match: re.Match[str]) -> str:
        name = next(g for g in match.groups() if g)
        if name not in values:
            raise KeyError(f"no test value for ${name} in {query!r}: add it to _values()")
        return values[name]

    return VARIABLE.sub(sub, query)


# ------------------------------------------------------------------------------------------
# structure (no server)
# ------------------------------------------------------------------------------------------
def test_dashboard_structure_and_provisioning_files():
    dashboard = _load_dashboard()
    assert isinstance(dashboard.get("uid"), str) and dashboard["uid"]
    assert isinstance(dashboard.get("title"), str) and dashboard["title"]
    assert isinstance(dashboard.get("schemaVersion"), int) and dashboard["schemaVersion"] >= 36
    panels = _walk_panels(dashboard.get("panels") or [])
    assert panels
    ids = [p.get("id") for p in panels]
    assert all(isinstance(i, int) for i in ids) and len(set(ids)) == len(ids), ids
    for panel in panels:
        assert panel.get("type") and panel.get("title") and panel.get("gridPos"), panel
        for target in panel.get("targets") or []:
            assert target.get("refId") and target.get("rawQuery") is True, (panel["id"], target)
            assert target.get("resultFormat") in ("time_series", "table"), target
    types = {p["type"] for p in panels}
    assert {"table", "stat", "timeseries", "heatmap"} <= types, types

    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["site"]["type"] == "query"
    assert variables["site"]["query"] == \
        'SHOW TAG VALUES FROM "mmdwatch_inspection" WITH KEY = "site"'
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "influxdb"

    queries = dashboard_queries(dashboard)
    assert len(queries) >= len([t for p in panels for t in p.get("targets") or []]) + 2
    for where, query in queries:
        assert query.strip(), where
        if not query.lstrip().upper().startswith("SHOW"):
            assert "$timeFilter" in query, f"{where}: the time range must apply: {query}"
            froms = re.findall(r'FROM\s+"([^"]+)"', query)
            assert froms and set(froms) <= set(MEASUREMENTS), (where, froms)
    annotations = [a for a in dashboard["annotations"]["list"] if _is_influx(a.get("datasource"))]
    assert any(INCIDENT in a["target"]["query"] for a in annotations)
    # log-scale p-values
    pvalue = next(p for p in panels if p["type"] == "timeseries" and "p-value" in p["title"])
    assert pvalue["fieldConfig"]["defaults"]["custom"]["scaleDistribution"]["type"] == "log"

    # provisioning: the data source the dashboard defaults to, and a file provider
    datasource = yaml.safe_load(DATASOURCE_YAML.read_text())["datasources"][0]
    assert datasource["type"] == "influxdb" and datasource["jsonData"]["version"] == "InfluxQL"
    assert variables["datasource"]["current"]["value"] == datasource["uid"]
    provider = yaml.safe_load(PROVIDER_YAML.read_text())["providers"][0]
    assert provider["type"] == "file" and provider["options"]["path"]


# ------------------------------------------------------------------------------------------
# every query against influxd with real results
# ------------------------------------------------------------------------------------------
def _backfill(data: Path, site: str, out: Path) -> list[dict[str, Any]]:
    code = main(["backfill", "--data", str(data), "--site", site, "--start", "2026-01-12",
                 "--end", "2026-01-14", "--every", "1d", "--profile", "retrospective",
                 "--method", "mmd-baseline", "--out", str(out)])
    assert code == 0
    results = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(results) == 3
    # what the agent does with each result: the tracker advances the incident and attaches
    # it; the sinks then write the result
    config = validate_config({"site": site, "profile": "retrospective",
                              "source": {"type": "file", "path": str(data)}, "sinks": [],
                              "engine": {"method": "mmd-baseline"}}, origin="test")
    tracker = SiteTracker(build_inspector(config), build_incidents(config))
    for result in results:
        tracker.observe(result)
    return results


def _rows(answer: dict[str, Any]) -> tuple[int, str | None]:
    """Rows over all statements and series of a /query answer, and the first error."""
    rows, error = 0, answer.get("error")
    for statement in answer.get("results", []):
        error = error or statement.get("error")
        for series in statement.get("series", []):
            rows += len(series.get("values") or [])
    return rows, error


def _values(dashboard: dict[str, Any], time_filter: str, site: str | None,
            sensor: str | None, all_values: dict[str, list[str]]) -> dict[str, str]:
    """Values of the dashboard's variables: one site and sensor, or None for "All"."""
    values = {"timeFilter": time_filter, "__interval": "1h", "interval": "1h"}
    chosen = {"site": site, "sensor": sensor}
    for var in dashboard["templating"]["list"]:
        name = var["name"]
        if var["type"] == "datasource":
            values[name] = "mmdwatch-influxdb"
            continue
        assert name in chosen, f"variable ${name} has no test value; add it to _values()"
        if chosen[name] is not None:
            values[name] = _regex_escape(chosen[name])
        else:  # "All": the variable's allValue, else every value as Grafana joins them
            values[name] = var.get("allValue") or \
                "(" + "|".join(map(_regex_escape, all_values[name])) + ")"
    return values


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_every_dashboard_query_returns_rows_from_real_results(tmp_path, influxd):
    leak_frame, _ = simulate(Scenario(n_sensors=8, changes={"s04": -0.9}))
    calm_frame, _ = simulate(Scenario(n_sensors=8, change_at=None, seed=11))
    write_csv(leak_frame, tmp_path / "leak.csv")
    write_csv(calm_frame, tmp_path / "calm.csv")
    leak = _backfill(tmp_path / "leak.csv", LEAK_SITE, tmp_path / "leak.jsonl")
    calm = _backfill(tmp_path / "calm.csv", CALM_SITE, tmp_path / "calm.jsonl")
    events = [r["incident"] for r in leak if (r.get("incident") or {}).get("event")]
    assert events, [(r["inspection_time"], r["status"]) for r in leak]

    influxd.create_database(DB)
    sink = InfluxSink({"type": "influxdb", "url": influxd.url, "database": DB})
    try:
        for result in leak + calm:
            sink.send(result)
    finally:
        sink.close()

    times = [pd.Timestamp(r["inspection_time"]) for r in leak + calm]
    start, end = min(times) - pd.Timedelta(days=1), max(times) + pd.Timedelta(days=1)
    # what Grafana's InfluxQL backend puts in for $timeFilter
    time_filter = f"time >= {start.value // 10**6}ms and time <= {end.value // 10**6}ms"
    sensor = events[0]["sensors"][0]

    def run(query: str) -> dict[str, Any]:
        with influxd.client() as client:
            r = client.post("/query", params={"db": DB, "q": query, "epoch": "ms"})
        assert r.status_code in (200, 400), r.text
        return r.json()

    # the real schema, to catch a misspelt field or tag (which InfluxDB answers with nulls)
    keys: set[str] = set(MEASUREMENTS)
    for measurement in MEASUREMENTS:
        for show in ("FIELD", "TAG"):
            answer = run(f'SHOW {show} KEYS FROM "{measurement}"')
            for series in answer["results"][0].get("series", []):
                keys |= {row[0] for row in series["values"]}

    dashboard = _load_dashboard()
    queries = dashboard_queries(dashboard)
    all_values = {"site": [LEAK_SITE, CALM_SITE],
                  "sensor": sorted({s["sensor_id"] for r in leak + calm for s in r["sensors"]})}
    selections = {f"site={LEAK_SITE}, sensor={sensor}": (LEAK_SITE, sensor),
                  "All sites and sensors": (None, None)}
    failures = []
    for label, (site, chosen_sensor) in selections.items():
        values = _values(dashboard, time_filter, site, chosen_sensor, all_values)
        for where, query in queries:
            rendered = render(query, values)
            aliases = set(re.findall(r'\bAS\s+"([^"]+)"', rendered, flags=re.IGNORECASE))
            unknown = set(re.findall(r'"([^"]+)"', rendered)) - keys - aliases
            if unknown:
                failures.append(f"{where} [{label}]: unknown keys {sorted(unknown)}: {rendered}")
                continue
            answer = run(rendered)
            rows, error = _rows(answer)
            if error or rows == 0:
                failures.append(f"{where} [{label}]: {error or 'no rows'}: {rendered}")
    assert not failures, "\n".join(failures)

    # the variables list what was written
    site_var = next(q for w, q in queries if w == "variable $site")
    answer = run(render(site_var, {}))
    assert {row[1] for row in answer["results"][0]["series"][0]["values"]} == \
        {LEAK_SITE, CALM_SITE}
