"""Config loading: ${ENV} expansion, unknown keys, every problem listed, connector sections
validated by the connector's own model."""
from __future__ import annotations

import subprocess
from datetime import timedelta
from pathlib import Path

import pytest

from monitor.config import ConfigError, load_config, validate_config
from tests.cli_runner import run_mmdwatch

ROOT = Path(__file__).resolve().parents[2]
GOOD = {"site": "x", "source": {"type": "file", "path": "data.csv"}}


def problems(raw, env=None):
    with pytest.raises(ConfigError) as err:
        validate_config(raw, env=env or {})
    return err.value.problems


def test_defaults_and_derived_values():
    c = validate_config(GOOD, env={})
    # the live profile: hourly inspections of a 6-hour after window, calibrated
    assert c.profile == "live" and c.decision.rule == "calibrated"
    assert c.windows.before == timedelta(days=7) and c.windows.after == timedelta(hours=16)
    assert c.windows.resample == timedelta(hours=1) and c.windows.normalise == "before"
    assert c.schedule.every == timedelta(hours=1) and c.schedule.clock == "wall"
    assert c.engine.method == "cv-aggregation" and c.block_rows is None
    assert c.health.port is None and c.report_dir is None
    assert c.source.type == "file" and [s.type for s in c.sinks] == ["console"]
    assert c.retention == timedelta(days=7, hours=16) + timedelta(days=1) + timedelta(days=4)
    # the retrospective profile: the paper's setting
    c = validate_config({**GOOD, "profile": "retrospective"}, env={})
    assert c.windows.after == timedelta(days=7) and c.windows.normalise == "before"
    assert c.schedule.cron == "0 0 * * *" and c.block_rows == 24
    # the store keeps the earlier days the decision calibrates on (decision.history)
    assert c.decision.rule == "engine" and c.retention == timedelta(days=15 + 28)
    off = validate_config({**GOOD, "profile": "retrospective",
                           "decision": {"source_history": False}}, env={})
    assert off.retention == timedelta(days=15)
    # keys given win over the profile's
    c = validate_config({**GOOD, "profile": "retrospective", "schedule": {"every": "1h"},
                         "windows": {"after": "1d"}}, env={})
    assert c.schedule.every == timedelta(hours=1) and c.schedule.cron is None
    assert c.windows.after == timedelta(days=1) and c.windows.before == timedelta(days=7)
    c = validate_config({**GOOD, "engine": {"block_size": None}}, env={})
    assert c.block_rows is None


def test_env_expansion():
    raw = {**GOOD, "site": "${SITE}", "state_dir": "${BASE:-/tmp}/state",
           "sinks": [{"type": "jsonl", "path": "${OUT}/r.jsonl"}]}
    c = validate_config(raw, env={"SITE": "l-town", "OUT": "/var/out"})
    assert c.site == "l-town" and str(c.state_dir) == "/tmp/state"
    assert str(c.sinks[0].path) == "/var/out/r.jsonl"
    found = problems({**raw, "site": "ok"}, env={})
    assert any("OUT is not set" in p for p in found)


def test_unset_whole_value_becomes_null_and_a_required_key_says_so():
    found = problems({"source": {"type": "file", "path": "${DATA_PATH}"}})
    assert any(p.startswith("source.path") and "DATA_PATH" in p for p in found)


def test_every_problem_is_listed_with_its_key():
    raw = {
        "site": "bad site", "sorce": 1,
        "source": {"type": "file", "pth": "x"},
        "windows": {"before": "seven days", "normalise": "median", "extra": 1},
        "schedule": {"cron": "* * *", "timezone": "Nowhere/City"},
        "engine": {"method": "lasso", "alpha": 1.5},
        "sinks": [{"type": "console", "colour": "red"}, {"type": "jsonl"}, {"type": "fax"}],
    }
    found = problems(raw)
    keys = [p.split(":")[0] for p in found]
    for key in ("site", "sorce", "source.path", "source.pth", "windows.before",
                "windows.normalise", "windows.extra", "schedule.cron", "schedule.timezone",
                "engine.method", "engine.alpha", "sinks[0].colour", "sinks[1].path",
                "sinks[2].type"):
        assert key in keys, (key, found)
    assert any("did you mean 'source'" in p for p in found)
    assert any("did you mean 'path'" in p for p in found)


def test_cross_field_rules():
    assert any("whole number" in p for p in problems(
        {**GOOD, "windows": {"before": "90min", "resample": "1h"}}))
    assert any("block_size" in p for p in problems(
        {**GOOD, "engine": {"block_size": "50min"}}))
    assert any("either schedule.cron or schedule.every" in p for p in problems(
        {**GOOD, "schedule": {"cron": "0 0 * * *", "every": "1d"}}))
    assert problems({"site": "x"}) == [
        "source: required; add e.g. source: {type: file, path: data.csv.gz}"]


def test_yaml_syntax_error_names_the_line(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("site: x\nsource: {type: file\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert "line" in err.value.problems[0]


def test_example_config_is_valid():
    c = load_config(ROOT / "config.example.yaml", env={})
    assert c.source.type == "file" and (ROOT / c.source.path).exists()


def _check(path: Path) -> subprocess.CompletedProcess:
    return run_mmdwatch("check-config", "--config", str(path), cwd=ROOT)


def test_check_config_cli_lists_each_problem_and_exits_2(tmp_path):
    broken = tmp_path / "broken.yaml"
    broken.write_text(
        "site: demo\nstate_dir: ./s\nsource: {type: file}\n"
        "windows: {before: 7d, normalise: median}\n"
        "engine: {method: lasso}\n"
        "sinks:\n  - {type: console, colour: red}\n  - {type: smtp}\n")
    out = _check(broken)
    assert out.returncode == 2
    for key in ("source.path", "windows.normalise", "engine.method", "sinks[0].colour",
                "sinks[1].type"):
        assert f"- {key}:" in out.stdout, out.stdout
    assert "5 problem(s)" in out.stdout
    ok = _check(ROOT / "config.example.yaml")
    assert ok.returncode == 0 and "OK" in ok.stdout


def test_self_referencing_yaml_alias_is_a_config_error(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("site: x\nloop: &x [*x]\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert "refers to itself" in err.value.problems[0]
