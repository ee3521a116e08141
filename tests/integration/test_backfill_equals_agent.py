"""``mmdwatch backfill`` is the agent: a dev leak scenario replayed through a real mosquitto
into ``mmdwatch run`` (data clock, live defaults), then ``backfill`` of the same span from
the agent's first inspection and from the middle of its run. Result for result: the same
fingerprints, statuses and incident blocks; every p-value (the decision's, its level and
engine parts', the engine test's) within 1e-9 relative (docs/cli.md, backfill; issue 31).

Half of ``ltown-delay-dev/d1`` (its first 17 days: the agent inspects hourly from
2019-09-09, calibrates from 2019-09-13 15:00 on, opens an incident on the leak of
2019-09-16 07:45) keeps the run to a few minutes: about 220 hourly times, 100+ of them
calibrated, compared twice.
"""
from __future__ import annotations

import json

import pandas as pd
import pytest

from tests.cli_runner import run_mmdwatch
from tests.integration import scenario as sc
from tests.results_file import read_results
from tests.shared_data import DELAY_DEV

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(1800)]

SCENARIO = DELAY_DEV / "d1"
SITE = "l-town-d1"
CUT = pd.Timestamp("2019-09-19 00:00:00")  # readings published: before this
MIDDLE = "2019-09-14T00:25:00Z"  # a backfill started mid-run, off the hour on purpose
AFTER = pd.Timedelta(hours=16)  # the live profile's after window


def _messages(frame: pd.DataFrame):
    wide = frame.pivot_table(index="timestamp", columns="sensor_id", values="pressure_m")
    for t, row in wide.iterrows():
        stamp = pd.Timestamp(t).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = [{"sensor": s, "time": stamp, "value": float(v)}
                for s, v in row.items() if pd.notna(v)]
        yield f"sensors/{SITE}/gateway", json.dumps(body).encode()


def _by_time(results: list[dict]) -> dict[str, dict]:
    return {r["inspection_time"]: r for r in results}  # a redelivered result: the same one


def _backfill(config, start: str, end: str, out, cwd) -> list[dict]:
    done = run_mmdwatch("backfill", "--config", str(config), "--start", start, "--end", end,
                        "--out", str(out), cwd=cwd)
    assert done.returncode == 0, done.stderr[-3000:]
    return read_results(out)


def compare(agent: dict[str, dict], backfill: list[dict]) -> list[str]:
    """The differences between the backfill's results and the agent's at the same times."""
    problems = []
    for b in backfill:
        t = b["inspection_time"]
        a = agent.get(t)
        if a is None:
            problems.append(f"{t}: the agent has no result")
            continue
        for key in ("fingerprint", "status", "incident"):
            if a.get(key) != b.get(key):
                problems.append(f"{t}: {key} {a.get(key)!r} != {b.get(key)!r}")
        for name, pa, pb in _p_values(a, b):
            if (pa is None) != (pb is None) or (
                    pa is not None and abs(pa - pb) > 1e-9 * max(abs(pa), abs(pb))):
                problems.append(f"{t}: {name} {pa} != {pb}")
    return problems


def _p_values(a: dict, b: dict):
    """(name, agent's, backfill's) for every p-value of a result: the decision's, its
    level part's, its engine part's (issue 31: one answer for the same data) and the
    engine test's."""
    for name, path in (("detection.p_value", ("detection", "p_value")),
                       ("detection.level_p_value", ("detection", "level_p_value")),
                       ("detection.engine.p_value", ("detection", "engine", "p_value")),
                       ("test.p_value", ("test", "p_value"))):
        values = []
        for result in (a, b):
            value = result
            for key in path:
                value = (value or {}).get(key)
            values.append(value)
        yield name, values[0], values[1]


@pytest.mark.skipif(not SCENARIO.exists(), reason="the shared L-Town delay scenarios are not here")
def test_backfill_from_the_start_and_from_the_middle_equals_the_agent(tmp_path,
                                                                     mosquitto_persistent):
    broker = mosquitto_persistent
    frame = pd.read_csv(SCENARIO / "pressures.csv.gz")
    frame = frame[pd.to_datetime(frame["timestamp"]) < CUT]
    conn = {"host": "127.0.0.1", "port": broker.port}
    state = tmp_path / "state"
    config = {  # the live defaults, on the data clock
        "site": SITE, "state_dir": str(state), "log_level": "INFO",
        "source": {"type": "mqtt", **conn, "topics": [f"sensors/{SITE}/#"],
                   "client_id": "mmdwatch-backfill-equals-agent"},
        "schedule": {"clock": "data", "poll": "0.5s"},
        # the store keeps every reading: a backfill reads windows the store still holds
        # (the default retention, 12 d 16 h here, prunes the first week's before windows)
        "store": {"retention": "60d"},
        "sinks": [{"type": "jsonl", "path": str(state / "results.jsonl"), "fsync": True}],
    }
    path = sc.write_config(tmp_path / "agent.yaml", config)
    agent = sc.AgentProcess(path, tmp_path / "agent.log", cwd=tmp_path)
    try:
        assert agent.wait_for_log("MQTT source connected", timeout=60), agent.log_text()[-3000:]
        sc.publish_all("127.0.0.1", broker.port, _messages(frame))
        last = pd.Timestamp(frame["timestamp"].max()).tz_localize("UTC")
        final = (last - AFTER).floor("1h") - pd.Timedelta(hours=1)
        agent.wait_for_results(state / "results.jsonl", final, timeout=900)
    finally:
        agent.stop()
    ran = _by_time(read_results(state / "results.jsonl"))
    times = sorted(ran)
    first, end = times[0], times[-1]
    assert first == "2019-09-09T00:00:00Z"  # the first reading + the before window
    calibrated = [t for t in times if ran[t]["status"] in ("ok", "firing")]
    assert len(calibrated) >= 100
    events = [(t, ran[t]["incident"]["event"]) for t in times
              if (ran[t].get("incident") or {}).get("event")]
    assert ("opened" in {e for _, e in events}), events

    whole = _backfill(path, first, end, tmp_path / "whole.jsonl", tmp_path)
    middle = _backfill(path, MIDDLE, end, tmp_path / "middle.jsonl", tmp_path)
    assert [r["inspection_time"] for r in whole] == times
    assert [r["inspection_time"] for r in middle] == [t for t in times if t >= MIDDLE]
    assert len(middle) >= 100
    problems = compare(ran, whole) + compare(ran, middle)
    summary = (f"{len(whole)} + {len(middle)} times compared, {len(problems)} mismatches; "
               f"{len(calibrated)} calibrated; incident events {events}")
    print(summary)
    assert not problems, "\n".join([summary, *problems[:40]])
