"""bench.leak_delay's scoring of one replay: which incident event counts as naming the
leak, under the strict criterion (a top-3 sensor by leak effect among the incident's first
three) and the nearest-sensor one (one of the 3 sensors nearest the leak counts too)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from bench.leak_delay import Scenario, score, summary

ONSET = pd.Timestamp("2024-03-01T10:00:00Z")
AFTER = pd.Timedelta(hours=16)


def _result(t: str, sensors: list[str] | None = None, event: str | None = None,
            status: str = "ok") -> dict[str, Any]:
    """A result as far as the scoring reads it: its after window, status, runtime, ranked
    sensors and incident block."""
    start = pd.Timestamp(t)
    ranked = sensors or ["s9", "s8", "s7"]
    out: dict[str, Any] = {
        "status": status,
        "windows": {"after": {"start": start.isoformat(), "end": (start + AFTER).isoformat()}},
        "generator": {"runtime_s": 0.25},
        "sensors": [{"sensor_id": s} for s in ranked],
    }
    if event is not None:
        out["incident"] = {"event": event, "id": "site-1", "sensors": ranked,
                           "onset": "2024-03-01T10:30:00Z",
                           "onset_low": "2024-03-01T09:00:00Z",
                           "onset_high": "2024-03-01T11:00:00Z"}
    return out


def _leak() -> Scenario:
    return Scenario("dx", "leak", Path("unused.csv.gz"), ONSET, ["a", "b", "c"],
                    nearest=["near", "b", "far"])


def test_an_incident_naming_the_nearest_sensor_counts_only_under_the_nearest_criterion(
        ) -> None:
    results = [
        _result("2024-02-29T12:00:00Z"),
        # exists at 2024-03-01 16:00, 6 h after the onset: names the nearest sensor only
        _result("2024-03-01T00:00:00Z", ["near", "x", "y"], "opened", "firing"),
        # 3 h later the incident also names "a", a top sensor by effect
        _result("2024-03-01T03:00:00Z", ["near", "a", "y"], "updated", "firing"),
    ]
    row = score(results, _leak(), pd.Timestamp("2024-03-03T00:00:00Z"))
    assert row["named_near"] is True and row["delay_near_h"] == 6.0
    assert row["named"] is True and row["delay_h"] == 9.0
    assert row["first_named"] == "near" and row["first_named_changed"] is False
    assert row["nearest"] == "near b far"
    assert row["false_incidents"] == 0 and row["open_to_end"] is True
    lines = summary(pd.DataFrame([row]))
    assert any("named within 24 h: 1 of 1" in line for line in lines)
    assert any("the 3 nearest the leak counting: 1 of 1 (delays h: dx 6.0)" in line
               for line in lines)


def test_an_incident_naming_neither_counts_under_neither() -> None:
    results = [_result("2024-03-01T00:00:00Z", ["x", "y", "z"], "opened", "firing")]
    row = score(results, _leak(), pd.Timestamp("2024-03-03T00:00:00Z"))
    assert row["named"] is False and row["named_near"] is False
    assert row["delay_h"] is None and row["delay_near_h"] is None
    assert any("the 3 nearest the leak counting: 0 of 1 (delays h: dx -)" in line
               for line in summary(pd.DataFrame([row])))


def test_shape_changes_have_no_nearest_criterion() -> None:
    shape = Scenario("dev-x", "shape", Path("unused.csv.gz"), ONSET, ["a"])
    row = score([_result("2024-03-01T00:00:00Z", ["a", "y"], "opened", "firing")], shape,
                pd.Timestamp("2024-03-03T00:00:00Z"))
    assert row["named"] is True and row["named_near"] is None and row["delay_near_h"] is None


def test_a_scenario_cut_to_start_on_a_weekday(tmp_path):
    """--start-days: the data begins at its first midnight on that weekday."""
    import pandas as pd

    from bench.leak_delay import Scenario, data_range, starting_on

    times = pd.date_range("2019-09-02 00:00", "2019-09-12 23:55", freq="5min")  # a Monday
    path = tmp_path / "p.csv.gz"
    pd.DataFrame({"timestamp": times, "sensor_id": "n1", "pressure_m": 1.0}).to_csv(
        path, index=False)
    sc = Scenario("d9", "leak", path)
    assert starting_on(sc, None, tmp_path) is sc
    sat = starting_on(sc, "sat", tmp_path)
    first, last = data_range(sat.data)
    assert sat.name == "d9@sat" and str(first) == "2019-09-07 00:00:00+00:00"
    assert first.weekday() == 5 and str(last) == "2019-09-12 23:55:00+00:00"
    mon = starting_on(sc, "mon", tmp_path)
    assert str(data_range(mon.data)[0]) == "2019-09-02 00:00:00+00:00"
