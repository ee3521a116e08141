"""Two changes three minutes apart in a one-second stream (issue 29, item 4): the second
comes while the first's incident is open, and both are seen, each with an incident of its
own, with a user's four options and nothing else."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from monitor.cli import main

START = pd.Timestamp("2026-03-02T10:00:00Z")
FIRST = START + pd.Timedelta(minutes=12)  # s03 drops
SECOND = FIRST + pd.Timedelta(minutes=3)  # s06 rises, the first still open
STEP = 7.0  # in units of a sensor's spread (AR(1), phi 0.8, one reading a second)
OPTIONS = ["--resample", "2s", "--before", "5min", "--after", "30s", "--every", "5s"]


def _stream(path: Path, seed: int) -> None:
    """Eight AR(1) sensors at one reading a second for 30 minutes, the two steps."""
    rng = np.random.default_rng(seed)
    n, d, phi = 30 * 60, 8, 0.8
    noise = rng.normal(0.0, np.sqrt(1 - phi**2), (n, d))
    x = np.empty((n, d))
    x[0] = rng.normal(size=d)
    for i in range(1, n):
        x[i] = phi * x[i - 1] + noise[i]
    x += np.arange(d) * 10.0
    index = pd.date_range(START, periods=n, freq="1s")
    x[index >= FIRST, 2] -= STEP
    x[index >= SECOND, 5] += STEP
    frame = pd.DataFrame(x, index=index, columns=[f"s{i + 1:02d}" for i in range(d)])
    frame.index.name = "time"
    frame.to_csv(path)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1])
def test_a_second_change_three_minutes_after_the_first_gets_its_own_incident(
        tmp_path: Path, seed: int) -> None:
    data, out = tmp_path / "pump.csv", tmp_path / "results.jsonl"
    _stream(data, seed)
    assert main(["backfill", "--data", str(data), "--start", START.isoformat(),
                 "--end", (START + pd.Timedelta(minutes=29)).isoformat(), *OPTIONS,
                 "--out", str(out)]) == 0
    results = [json.loads(line) for line in out.read_text().splitlines()]
    assert not [r for r in results if r["status"] == "error"]
    opened = [r for r in results if (r.get("incident") or {}).get("event") == "opened"]
    assert [r["incident"]["sensors"][0] for r in opened] == ["s03", "s06"], [
        (r["inspection_time"], r["incident"]["sensors"]) for r in opened]
    for result, change in zip(opened, (FIRST, SECOND), strict=True):
        incident = result["incident"]
        # seen within a minute of the change (the result exists at its after window's end)
        seen = pd.Timestamp(result["windows"]["after"]["end"])
        assert change <= seen <= change + pd.Timedelta(seconds=60)
        assert abs(pd.Timestamp(incident["onset"]) - change) <= pd.Timedelta(seconds=30)
    # both open at the second's opening, each under its own id
    second = opened[1]
    assert {i["id"] for i in second["open_incidents"]} == {r["incident"]["id"] for r in opened}
