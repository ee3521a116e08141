"""Any cadence (issue 29): the decision's durations derive from the windows and the
cadence, a value the config gives stays, impossible values are refused with the fix, a
profile-free detector for data without a daily cycle, and data that begins inside a window
or has a hole of minutes gives ``incomplete`` results, not errors."""
from __future__ import annotations

from datetime import timedelta

import numpy as np
import pandas as pd
import pytest

from monitor.config import ConfigError, validate_config
from monitor.windows import (
    WindowBeforeData,
    WindowHole,
    WindowIncomplete,
    WindowSpec,
    build_windows,
)
from tests.monitor.test_cli import mmdwatch

SOURCE = {"type": "file", "path": "x.csv"}


def _config(**sections):
    return validate_config({"site": "s", "source": SOURCE, **sections})


def test_hourly_defaults_are_the_values_chosen_on_the_benches():
    config = _config()
    d = config.decision
    assert (d.history, d.min_history, d.false_incident_interval) == (
        timedelta(days=28), timedelta(days=4), timedelta(days=30))
    assert d.local_level == d.engine_rows == d.resolve_after == timedelta(hours=24)
    assert d.daily_profile is True
    assert "decision.history 4w" in config.describe_derived()
    assert not config.derived_differ()  # nothing to say at the hourly defaults
    # the fingerprint's settings carry no new key at these values
    assert "daily_profile" not in config.inspection_settings()["decision"]
    retro = _config(profile="retrospective")
    assert retro.engine.block_size == timedelta(days=1)
    assert retro.decision.history == timedelta(days=28)
    fast = _config(profile="retrospective", schedule={"every": "30s"},
                   windows={"before": "5min", "after": "5min", "resample": "2s"})
    assert fast.engine.block_size == timedelta(seconds=42)
    assert fast.decision.history == timedelta(days=28)  # the source's earlier days


def test_one_second_data_derives_seconds_and_no_daily_profile():
    config = _config(windows={"before": "5min", "after": "30s", "resample": "2s"},
                     schedule={"every": "5s"})
    d = config.decision
    assert d.daily_profile is False
    assert d.local_level == d.engine_rows == d.resolve_after == timedelta(seconds=42)
    assert d.history == timedelta(minutes=56)  # 672 inspections, as hourly data has
    assert d.min_history == timedelta(seconds=125)  # the 25 values the calibration takes
    assert d.false_incident_interval == timedelta(hours=1)  # one per 720 inspections
    assert config.derived_differ()
    assert "daily_profile" in config.inspection_settings()["decision"]


def test_one_minute_data_with_a_daily_cycle_keeps_days():
    config = _config(windows={"before": "3d", "after": "2h", "resample": "1min"},
                     schedule={"every": "1min"})
    d = config.decision
    assert d.daily_profile is True and d.local_level == timedelta(hours=24)
    # weeks of history, but at most 20,000 inspection times
    assert d.history == timedelta(minutes=20_000)
    assert d.min_history == timedelta(days=4) and d.history >= d.min_history
    assert d.false_incident_interval == timedelta(days=30)


def test_the_engine_weight_follows_the_daily_profile():
    """The engine part's share of the level (docs/decision.md, "The weight"): 0.1 where
    the level statistic carries the cycle channels (a daily profile), 0.35 where it sees
    the level alone; a weight the config gives stays."""
    from engine.live.engine_power import ENGINE_WEIGHT
    from monitor.config import ENGINE_WEIGHT_DAILY

    assert _config().decision.engine_weight == 0.1 == ENGINE_WEIGHT == ENGINE_WEIGHT_DAILY
    second = {"windows": {"before": "5min", "after": "30s", "resample": "2s"},
              "schedule": {"every": "5s"}}
    fast = _config(**second)
    assert fast.decision.engine_weight == 0.35
    assert "decision.engine_weight 0.35" in fast.describe_derived()
    assert _config(**second, decision={"engine_weight": 0.2}).decision.engine_weight == 0.2
    assert _config(decision={"engine_weight": 0.35}).decision.engine_weight == 0.35
    # the weight is part of what the fingerprint hashes
    assert _config().inspection_settings()["decision"]["engine_weight"] == 0.1


def test_a_value_given_stays_and_the_others_are_derived():
    config = _config(windows={"before": "5min", "after": "30s", "resample": "2s"},
                     schedule={"every": "5s"}, decision={"min_history": "3min"})
    assert config.decision.min_history == timedelta(minutes=3)
    assert "decision.min_history" not in config.derived
    assert config.decision.local_level == timedelta(seconds=42)
    # a site with other windows derives its own values
    multi = validate_config({"source": SOURCE, "sites": [
        {"id": "slow", "sensors": ["a", "b"]},
        {"id": "fast", "sensors": ["c", "d"], "windows": {"before": "5min", "after": "30s",
                                                            "resample": "2s"},
         "schedule": {"every": "5s"}}]})
    slow, fast = multi.site_configs()
    assert slow.decision.local_level == timedelta(hours=24)
    assert fast.decision.local_level == timedelta(seconds=42)


@pytest.mark.parametrize(("sections", "words"), [
    ({"windows": {"before": "5min", "after": "30s", "resample": "2s"},
      "schedule": {"every": "5s"}, "decision": {"history": "28d"}},
     ["483,840 past inspection times", "shorten decision.history"]),
    ({"decision": {"local_level": "7d"}}, ["decision.local_level (1w)", "use at most"]),
    ({"profile": "retrospective", "windows": {"after": "2d"}, "engine": {"block_size": "1d"}},
     ["engine.block_size (1d)", "fewer than 4 blocks", "use at most 12h"]),
    ({"decision": {"history": "2d"}}, ["at least decision.min_history"]),
])
def test_impossible_values_are_refused_with_the_fix(sections, words):
    with pytest.raises(ConfigError) as caught:
        _config(**sections)
    text = str(caught.value)
    assert all(w in text for w in words), text


def test_without_a_daily_profile_the_residual_is_against_the_window_mean():
    from engine.live.residual_shift import DetectorSettings, profile_residuals, profile_table

    index = pd.date_range("2020-03-09 15:56", periods=150, freq="2s")
    before = pd.DataFrame({"a": np.linspace(0, 1, 150), "b": 5.0}, index=index)
    table = profile_table(before, DetectorSettings(daily_profile=False).period)
    assert table.shape == (1, 2) and table[0, 0] == pytest.approx(0.5)
    rb, _ = profile_residuals(before, before.iloc[:10], "none")
    assert np.allclose(rb.mean(axis=0), 0.0)


def _seconds(start: str, end: str, gap: tuple[str, str] | None = None) -> pd.DataFrame:
    times = pd.date_range(start, end, freq="1s", inclusive="left", tz="UTC")
    if gap is not None:
        times = times[(times < pd.Timestamp(gap[0], tz="UTC"))
                      | (times >= pd.Timestamp(gap[1], tz="UTC"))]
    rng = np.random.default_rng(1)
    return pd.DataFrame([(t, s, rng.normal()) for t in times for s in ("a", "b", "c")],
                        columns=["time", "sensor", "value"])


def _published(path, readings: pd.DataFrame):
    """``readings`` (long) written as SKAB publishes: wide, semicolons, naive times in a
    ``datetime`` column (a sensor's missing seconds are blank cells)."""
    wide = readings.pivot(index="time", columns="sensor", values="value")
    wide.index = wide.index.tz_localize(None)
    wide.rename_axis("datetime").to_csv(path, sep=";")
    return path


#: the issue's four options for one-second data
FOUR = ("--resample", "2s", "--before", "5min", "--after", "30s", "--every", "5s")

SPEC = WindowSpec(before=timedelta(minutes=5), after=timedelta(seconds=30),
                  resample=timedelta(seconds=2), min_sensors=2)


def test_data_that_begins_inside_the_before_window_is_incomplete():
    readings = _seconds("2020-03-09T12:00:00", "2020-03-09T12:10:00")
    t = pd.Timestamp("2020-03-09T12:01:00Z")
    with pytest.raises(WindowBeforeData) as caught:
        build_windows(readings, t.to_pydatetime(), SPEC)
    assert "inspections from 2020-03-09T12:05:00+00:00 on" in str(caught.value)


def test_no_flat_start_is_invented_where_the_data_begins_inside_the_before_window():
    """Covered above min_coverage (60 % of the bins) but begun late: the first readings
    are not carried back over the empty 40 %; a start of two empty bins still is."""
    readings = _seconds("2020-03-09T12:00:00", "2020-03-09T12:10:00")
    late = pd.Timestamp("2020-03-09T12:03:00Z")  # before window from 11:58:00
    with pytest.raises(WindowBeforeData) as caught:
        build_windows(readings, late.to_pydatetime(), SPEC)
    assert "(60% of its bins)" in str(caught.value)
    assert "inspections from 2020-03-09T12:05:00+00:00 on" in str(caught.value)
    nearly = pd.Timestamp("2020-03-09T12:05:04Z")  # 2 of 150 bins before the data
    w = build_windows(readings, nearly.to_pydatetime(), SPEC)
    assert len(w.before_raw) == 150 and not w.before_raw.isna().any().any()


def test_a_hole_of_a_minute_over_the_after_window_is_incomplete():
    readings = _seconds("2020-03-09T12:00:00", "2020-03-09T12:10:00",
                        gap=("2020-03-09T12:06:00", "2020-03-09T12:07:04"))
    # inside the hole: the data seems to end there (nothing in the bins read past it)
    with pytest.raises(WindowIncomplete):
        build_windows(readings, pd.Timestamp("2020-03-09T12:06:10Z").to_pydatetime(), SPEC)
    # the readings come back inside the after window: its empty first bins are a hole
    with pytest.raises(WindowHole) as caught:
        build_windows(readings, pd.Timestamp("2020-03-09T12:06:40Z").to_pydatetime(), SPEC)
    assert "hole" in str(caught.value)


def test_check_config_says_what_was_derived(tmp_path):
    path = tmp_path / "fast.yaml"
    path.write_text("site: pump\nsource: {type: file, path: x.csv}\n"
                    "windows: {before: 5min, after: 30s, resample: 2s}\n"
                    "schedule: {every: 5s}\n")
    out = mmdwatch("check-config", "--config", str(path))
    assert out.returncode == 0, out.stderr
    assert "derived from the windows and the cadence" in out.stdout
    assert "decision.history 56min" in out.stdout and "daily_profile false" in out.stdout


@pytest.mark.slow
def test_one_second_data_runs_with_four_options(tmp_path):
    """A semicolon file of one-second readings with a hole: only --resample, --before,
    --after and --every given; no result is an error."""
    path = _published(tmp_path / "pump.csv", _seconds(
        "2020-03-09T12:00:00", "2020-03-09T12:14:00",
        gap=("2020-03-09T12:09:00", "2020-03-09T12:10:04")))
    out = mmdwatch("backfill", "--data", str(path), "--start", "2020-03-09T12:00:00",
                   "--end", "2020-03-09T12:13:00", *FOUR, "--out", str(tmp_path / "r.jsonl"))
    assert out.returncode == 0, out.stderr
    assert "derived from the windows and the cadence" in out.stderr
    import json

    results = [json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    statuses = {r["status"] for r in results}
    assert "error" not in statuses and {"incomplete", "ok"} <= statuses
    assert len(results) == 157  # every 5 s from 12:00:00 to 12:13:00
    calibrated = [r for r in results if r["status"] == "ok"]
    assert all(r["detection"]["p_floor"] == pytest.approx(
        1 / (r["detection"]["history_n"] + 1)) for r in calibrated)


def test_inspect_takes_the_agents_interval_on_one_second_data(tmp_path):
    """``inspect --every 5s``: the past times 5 s apart calibrate the one at --at, and the
    decision's durations derive from that cadence; without it the profile's hourly
    schedule left one-second data calibrating for a day. With --config it is refused."""
    import json

    path = _published(tmp_path / "pump.csv",
                      _seconds("2020-03-09T12:00:00", "2020-03-09T12:10:00"))
    hourly = mmdwatch("inspect", "--data", str(path), "--at", "2020-03-09T12:09:00",
                      *FOUR[:-2])
    assert json.loads(hourly.stdout)["status"] == "calibrating"
    out = mmdwatch("inspect", "--data", str(path), "--at", "2020-03-09T12:09:00", *FOUR)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["status"] in ("ok", "firing"), result["summary"]
    assert result["detection"]["history_n"] == 43  # 12:05:00 .. 12:08:30, 5 s apart
    assert "decision.min_history 125s" in out.stderr
    config = tmp_path / "c.yaml"
    config.write_text(f"source: {{type: file, path: {path}}}\n")
    refused = mmdwatch("inspect", "--config", str(config), "--at", "2020-03-09T12:09:00",
                       "--every", "5s")
    assert refused.returncode == 2 and "the agent's interval is the config's" in refused.stderr


def test_a_backfill_names_a_sensor_it_left_out_of_most_results(tmp_path):
    """A temperature every 10 s beside one-second sensors, in 2-s bins: each result says
    "across 2 sensors"; the backfill's last lines say which sensor was left out and why."""
    long = _seconds("2020-03-09T12:00:00", "2020-03-09T12:09:00")
    slow = (long["sensor"] == "c") & (long["time"].dt.second % 10 != 0)
    path = _published(tmp_path / "mixed.csv", long[~slow])
    out = mmdwatch("backfill", "--data", str(path), "--start", "2020-03-09T12:06:00",
                   "--end", "2020-03-09T12:08:00", *FOUR, "--out", str(tmp_path / "r.jsonl"))
    assert out.returncode == 0, out.stderr
    assert "backfill: sensor c was left out of 25 of 25 judged results" in out.stderr
    assert "its readings come about every 10s" in out.stderr
    assert "sensor a was" not in out.stderr
