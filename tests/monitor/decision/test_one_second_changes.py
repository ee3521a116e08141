"""Two changes minutes apart in a one-second stream (issue 29, item 4): the second comes
while the first's incident is open, and both are seen, with a user's four options and
nothing else, from a ``--start`` off the epoch's 5-second grid: on another sensor, and on
the same one (seen against the incident's frozen reference)."""
from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from monitor.cli import main
from monitor.demo.simulate import _ar1
from tests.result_contract import check

START = pd.Timestamp("2026-03-02T10:00:00Z")
FIRST = START + pd.Timedelta(minutes=12)  # s03 drops
SECOND = FIRST + pd.Timedelta(minutes=3)  # s06 rises, the first still open
STEP = 15.0  # in units of a sensor's spread (AR(1), phi 0.8, one reading a second)
OPTIONS = ["--resample", "2s", "--before", "5min", "--after", "30s", "--every", "5s"]


def _stream(path: Path, seed: int, steps: Sequence[tuple[pd.Timestamp, int, float]] = (
        (FIRST, 2, -STEP), (SECOND, 5, STEP))) -> None:
    """Eight AR(1) sensors at one reading a second for 30 minutes, with ``steps`` (from,
    column, size): by default s03 drops at FIRST and s06 rises at SECOND."""
    n, d = 30 * 60, 8
    x = _ar1(np.random.default_rng(seed), n, 0.8, 1.0, d) + np.arange(d) * 10.0
    index = pd.date_range(START, periods=n, freq="1s")
    for at, column, size in steps:
        x[index >= at, column] += size
    frame = pd.DataFrame(x, index=index, columns=[f"s{i + 1:02d}" for i in range(d)])
    frame.index.name = "time"
    frame.to_csv(path)


def _seen(results: list[dict], change: pd.Timestamp, sensor: str) -> dict | None:
    """The first firing result within a minute of ``change`` (at its after window's end,
    when it exists) that names ``sensor`` first."""
    for r in results:
        at = pd.Timestamp(r["windows"]["after"]["end"])
        if (r["status"] == "firing" and change <= at <= change + pd.Timedelta(seconds=60)
                and r["sensors"][0]["sensor_id"] == sensor):
            return r
    return None


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 2])
def test_a_second_change_three_minutes_after_the_first_is_seen(tmp_path: Path,
                                                                seed: int) -> None:
    data, out = tmp_path / "pump.csv", tmp_path / "results.jsonl"
    _stream(data, seed)
    # off the epoch's 5-second grid: the agent replayed inspects at the times written,
    # so the events it raises are written too (on the epoch's grid they fell between)
    first = START + pd.Timedelta(seconds=3)
    assert main(["backfill", "--data", str(data), "--start", first.isoformat(),
                 "--end", (START + pd.Timedelta(minutes=29)).isoformat(), *OPTIONS,
                 "--out", str(out)]) == 0
    results = [json.loads(line) for line in out.read_text().splitlines()]
    assert not [r for r in results if r["status"] == "error"]
    one, two = _seen(results, FIRST, "s03"), _seen(results, SECOND, "s06")
    assert one is not None and two is not None
    opened = [r["incident"] for r in results
              if (r.get("incident") or {}).get("event") == "opened"]
    assert opened and opened[0]["sensors"][0] == "s03"
    assert abs(pd.Timestamp(opened[0]["onset"]) - FIRST) <= pd.Timedelta(seconds=30)
    # the second, on a sensor that had not fired for the first, is a change of its own
    # (docs/decision.md, "Several incidents at once")
    assert [i["sensors"][0] for i in opened] == ["s03", "s06"]
    assert abs(pd.Timestamp(opened[1]["onset"]) - SECOND) <= pd.Timedelta(seconds=30)
    assert two["incident"]["id"] == opened[1]["id"] != opened[0]["id"]
    assert {i["id"] for i in two["open_incidents"]} == {i["id"] for i in opened}


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1])
def test_a_second_step_of_the_same_sensor_is_seen_against_the_incident_reference(
        tmp_path: Path, seed: int) -> None:
    """s03 drops, and two minutes later drops again, inside its open incident. The first
    step is in the before window, whose spread it inflates: the sliding statistic saw
    the second step in 1 of seeds 0-3 before the reference could fire (38 s late), and
    never in these two. The incident's frozen reference sees it within the minute.

    Incidents are counted from the first step on (results whose after window reaches it):
    on two minutes of history, seed 1 also has a false incident at 10:08 that resolves
    50 s later (with the engine part's SMOOTH fit of issue 31; 1 of 12 such streams,
    none with FAST), which is not this test's subject."""
    data, out = tmp_path / "pump.csv", tmp_path / "results.jsonl"
    second = FIRST + pd.Timedelta(minutes=2)
    _stream(data, seed, steps=[(FIRST, 2, -STEP), (second, 2, -STEP)])  # s03 twice
    assert main(["backfill", "--data", str(data), "--start",
                 (START + pd.Timedelta(seconds=3)).isoformat(),
                 "--end", (START + pd.Timedelta(minutes=24)).isoformat(), *OPTIONS,
                 "--out", str(out)]) == 0
    results = [json.loads(line) for line in out.read_text().splitlines()]
    opened = [r["incident"] for r in results
              if (r.get("incident") or {}).get("event") == "opened"
              and pd.Timestamp(r["windows"]["after"]["end"]) >= FIRST]
    assert [i["sensors"][0] for i in opened] == ["s03"]
    seen = _seen(results, second, "s03")
    assert seen is not None
    block = seen["detection"]
    assert block["fired_by"] == "reference"
    assert block["reference"]["incident"] == opened[0]["id"] == seen["incident"]["id"]
    assert block["reference"]["value"] >= block["reference"]["threshold"]
    assert block["p_value"] < block["level"]
    assert seen["selected_sensors"][0] == "s03" and seen["sensors"][0]["selected"]
    assert "against the open incident's reference" in seen["summary"]
    check(seen)  # the result schema (docs/result.schema.json)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1])
def test_an_excursion_while_calibrating_leaves_the_threshold_alone(tmp_path: Path,
                                                                   seed: int) -> None:
    """s02 moves by 10 for 40 s while the history is being built, and s05 steps by 6 eight
    minutes later. Calibrating values beyond the history's fence stay out of it
    (docs/decision.md, "Calibrating values screened"), so the excursion does not lift the
    threshold past the step. Just before the step it was 4,240 and 10,192 without the
    fence (seeds 0 and 1), and the step was not seen; with it, 443 and 145."""
    data, out = tmp_path / "pump.csv", tmp_path / "results.jsonl"
    excursion = START + pd.Timedelta(minutes=6, seconds=20)
    step = START + pd.Timedelta(minutes=15)
    _stream(data, seed, steps=[(excursion, 1, 10.0),
                               (excursion + pd.Timedelta(seconds=40), 1, -10.0),
                               (step, 4, 6.0)])
    assert main(["backfill", "--data", str(data), "--start", START.isoformat(),
                 "--end", (START + pd.Timedelta(minutes=24)).isoformat(), *OPTIONS,
                 "--out", str(out)]) == 0
    results = [json.loads(line) for line in out.read_text().splitlines()]
    fired = [r for r in results if r["status"] == "firing"]
    assert fired and all(pd.Timestamp(r["windows"]["after"]["end"]) >= step for r in fired)
    assert _seen(results, step, "s05") is not None
    before = [r["detection"] for r in results if r["status"] == "ok"
              and pd.Timestamp(r["windows"]["after"]["end"]) < step]
    assert before[-1]["threshold"] < 1000


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1])
def test_a_hole_in_the_data_raises_no_alarm(tmp_path: Path, seed: int) -> None:
    """The logger stops for 64 s (SKAB's valve2_1 has such a hole) in a stream that does
    not change. The windows past the hole are filled across it, a straight line that the
    engine part's fit told from measured rows at once: its statistic reached 836-1,522,
    and the stream raised 3-4 false alarms (seeds 0-2, before the engine part abstained).
    Now the engine part abstains while its rows are filled across the gap, and the level
    part decides alone (docs/decision.md, "The engine part across a gap")."""
    data, out = tmp_path / "pump.csv", tmp_path / "results.jsonl"
    _stream(data, seed, steps=[])
    hole = START + pd.Timedelta(minutes=15)
    frame = pd.read_csv(data, parse_dates=["time"])
    frame = frame[(frame["time"] < hole) | (frame["time"] >= hole + pd.Timedelta(seconds=64))]
    frame.to_csv(data, index=False)
    assert main(["backfill", "--data", str(data), "--start", START.isoformat(),
                 "--end", (START + pd.Timedelta(minutes=29)).isoformat(), *OPTIONS,
                 "--out", str(out)]) == 0
    results = [json.loads(line) for line in out.read_text().splitlines()]
    assert not [r for r in results if r["status"] in ("firing", "error")]
    past = [r for r in results if r["status"] == "ok"
            and pd.Timestamp(r["windows"]["after"]["end"]) > hole]
    assert past and past[0]["data_quality"]["missing_fraction"] > 0.1
    engine = [r["detection"]["engine"]["value"] for r in past]
    assert engine[0] is None  # the before window's last rows are the filled line
    later = [v for v in engine if v is not None]
    assert later and max(later) < 20  # measured rows again: the part votes again


def test_inspect_just_past_a_hole_decides_on_the_level_part(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A one-shot ``inspect`` whose one time lies just past the hole: its engine part
    abstains (nothing is left to fit in its batch) and the level part decides."""
    data = tmp_path / "pump.csv"
    _stream(data, 0, steps=[])
    hole = START + pd.Timedelta(minutes=15)
    frame = pd.read_csv(data, parse_dates=["time"])
    frame = frame[(frame["time"] < hole) | (frame["time"] >= hole + pd.Timedelta(seconds=64))]
    frame.to_csv(data, index=False)
    at = hole + pd.Timedelta(seconds=70)  # the before window's last rows: the filled line
    config = tmp_path / "pump.yaml"  # inspect takes the schedule from a config
    config.write_text(f"site: pump\nsource: {{type: file, path: {data}}}\n"
                      "windows: {before: 5min, after: 30s, resample: 2s}\n"
                      "schedule: {every: 5s}\n")
    capsys.readouterr()
    assert main(["inspect", "--config", str(config), "--at", at.isoformat()]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["status"] == "ok", result.get("message")
    block = result["detection"]
    assert block["engine"]["value"] is None and block["level_p_value"] == block["p_value"]


def test_a_later_span_replays_the_agent_from_the_data_start(tmp_path: Path) -> None:
    """The agent's times are on --start's phase, and still from the source's start: a
    span written late in the file is calibrated from its first time."""
    data, out = tmp_path / "pump.csv", tmp_path / "results.jsonl"
    _stream(data, 0)
    late = START + pd.Timedelta(minutes=20, seconds=3)
    assert main(["backfill", "--data", str(data), "--start", late.isoformat(),
                 "--end", (late + pd.Timedelta(seconds=20)).isoformat(), *OPTIONS,
                 "--out", str(out)]) == 0
    results = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["inspection_time"][14:19] for r in results] == ["20:03", "20:08", "20:13",
                                                             "20:18", "20:23"]
    # replayed from the first window the data covers (10:04:33), every 5 s: the values
    # until the first change's incident opened at 10:12 (none joins while it is open)
    assert all(r["status"] in ("ok", "firing") for r in results)
    assert results[0]["detection"]["history_n"] > 60


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1])
def test_a_return_three_minutes_after_the_change_is_seen(tmp_path: Path, seed: int) -> None:
    """s03 drops and comes back three minutes later, its incident still open: the step is
    inside the before window, whose spread it inflates, so the sliding statistic does not
    see the return. The incident's frozen reference does, and names s03 returning (SKAB
    labels a valve's reopening as a change point). Before, a return counted 0 against
    the reference, and neither seed saw it. The reference judges it at its own threshold:
    the level history without the values quiet while the drop grew in the after window,
    which raised the level part's threshold (seed 0: 302, against 246 without them, and
    seed 0's return, below 302, went unseen)."""
    data, out = tmp_path / "pump.csv", tmp_path / "results.jsonl"
    back = FIRST + pd.Timedelta(minutes=3)
    _stream(data, seed, steps=[(FIRST, 2, -STEP), (back, 2, STEP)])
    assert main(["backfill", "--data", str(data), "--start", START.isoformat(),
                 "--end", (START + pd.Timedelta(minutes=24)).isoformat(), *OPTIONS,
                 "--out", str(out)]) == 0
    results = [json.loads(line) for line in out.read_text().splitlines()]
    assert _seen(results, FIRST, "s03") is not None
    seen = _seen(results, back, "s03")
    assert seen is not None
    block = seen["detection"]
    assert block["fired_by"] == "reference" and block["reference"]["returning"] == ["s03"]
    assert block["reference"]["z"]["s03"] > 0 and block["p_value"] < block["level"]
    assert block["reference"]["threshold"] < block["threshold"]
    assert block["reference"]["value"] >= block["reference"]["threshold"]
    assert seen["summary"].startswith("Return at") and "back at the open" in seen["summary"]
    # the firing a return raises is inside the incident the change opened, and starts
    # its resolution, as a quiet result back at the reference would
    incident = seen["incident"]
    assert incident["id"] == _seen(results, FIRST, "s03")["incident"]["id"]
    assert incident["returned_since"] == seen["inspection_time"]
    resolved = [r["incident"] for r in results
                if (r.get("incident") or {}).get("event") == "resolved"]
    assert [(i["id"], i["reason"], i["returned_since"]) for i in resolved] == [
        (incident["id"], "returned", seen["inspection_time"])]
    check(seen)
