"""Security properties that need no server: permissions, config warnings, and a static
scan for eval/pickle/unsafe YAML/shell and for SQL built from strings."""
from __future__ import annotations

import ast
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from monitor.service.security import exposed_secret_warning, literal_secrets

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ["engine", "connectors", "monitor"]
SECRET = "Pa55-literal-SECRET-9431"
ENV_SECRET = "env-SECRET-value-7710"


def _mmdwatch(*args: str, env: dict | None = None, cwd: Path | None = None
              ) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-c", "import sys; from monitor.cli import main; sys.exit(main())",
           *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=cwd or ROOT, check=False,
                          env={**os.environ, **(env or {})})


def _config(tmp_path: Path, password: str) -> dict:
    return {
        "site": "sec",
        "state_dir": str(tmp_path / "state"),
        "source": {"type": "mqtt", "host": "127.0.0.1", "port": 1, "topics": ["s/#"],
                   "username": "alice", "password": password},
        "sinks": [{"type": "influxdb", "url": "http://127.0.0.1:1", "database": "x",
                   "username": "admin", "password": "${INFLUX_PASSWORD}"},
                  {"type": "console"}],
    }


def test_literal_secrets_found_env_references_not() -> None:
    raw = {"source": {"password": "s3cret", "token": "${TOKEN}", "username": "u"},
           "sinks": [{"type": "webhook", "headers": {"Authorization": "Bearer abc"}},
                     {"type": "influxdb", "token": "${T:-}"}, {"password": None}]}
    assert literal_secrets(raw) == ["source.password", "sinks[0].headers"]


@pytest.mark.parametrize(("mode", "warns"), [(0o644, True), (0o640, True), (0o600, False)])
def test_config_readable_by_others_with_a_secret_warns(tmp_path: Path, mode: int,
                                                      warns: bool) -> None:
    path = tmp_path / "agent.yaml"
    raw = _config(tmp_path, SECRET)
    path.write_text(yaml.safe_dump(raw))
    path.chmod(mode)
    warning = exposed_secret_warning(path, raw)
    assert (warning is not None) == warns
    if warning:
        assert "source.password" in warning and "chmod 600" in warning
        assert SECRET not in warning


def test_check_config_warns_and_never_prints_a_secret(tmp_path: Path) -> None:
    path = tmp_path / "agent.yaml"
    path.write_text(yaml.safe_dump(_config(tmp_path, SECRET)))
    path.chmod(0o644)
    ok = _mmdwatch("check-config", "--config", str(path), env={"INFLUX_PASSWORD": ENV_SECRET})
    out = ok.stdout + ok.stderr
    assert ok.returncode == 0, out
    assert "readable by other users" in out and "source.password" in out
    # broken config: the problems are listed, the secrets are not
    broken = _config(tmp_path, SECRET)
    broken["source"]["port"] = "not-a-port"
    broken["sinks"][0]["url"] = 12
    path.write_text(yaml.safe_dump(broken))
    bad = _mmdwatch("check-config", "--config", str(path), env={"INFLUX_PASSWORD": ENV_SECRET})
    out = bad.stdout + bad.stderr
    assert bad.returncode == 2 and "source.port" in out, out
    for secret in (SECRET, ENV_SECRET):
        assert secret not in ok.stdout + ok.stderr
        assert secret not in out


def test_private_config_with_env_secrets_does_not_warn(tmp_path: Path) -> None:
    path = tmp_path / "agent.yaml"
    path.write_text(yaml.safe_dump(_config(tmp_path, "${MQTT_PASSWORD}")))
    path.chmod(0o644)  # readable, but holds only ${ENV} references
    res = _mmdwatch("check-config", "--config", str(path),
                    env={"INFLUX_PASSWORD": ENV_SECRET, "MQTT_PASSWORD": SECRET})
    assert res.returncode == 0 and "readable by other users" not in res.stderr


def test_state_dir_is_created_private(tmp_path: Path) -> None:
    from monitor.compose import build_agent
    from monitor.config import validate_config

    data = ROOT / "monitor" / "demo" / "data" / "demo-network.csv.gz"
    assert data.exists()
    config = validate_config({"site": "perm", "state_dir": str(tmp_path / "new" / "state"),
                              "source": {"type": "file", "path": str(data)},
                              "sinks": [{"type": "jsonl", "path": str(tmp_path / "r.jsonl")}]})
    agent = build_agent(config)
    try:
        mode = stat.S_IMODE((tmp_path / "new" / "state").stat().st_mode)
        assert mode & 0o077 == 0, oct(mode)
    finally:
        agent.stop()


# -- static scan -------------------------------------------------------------------------------
def _modules() -> list[tuple[Path, ast.Module]]:
    out = []
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            out.append((path, ast.parse(path.read_text(), filename=str(path))))
    return out


def test_no_eval_exec_pickle_unsafe_yaml_or_shell() -> None:
    banned_calls = {"eval", "exec", "compile", "__import__"}
    banned_modules = {"pickle", "cPickle", "marshal", "shelve", "dill", "cloudpickle"}
    problems = []
    for path, tree in _modules():
        for node in ast.walk(tree):
            where = f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', '?')}"
            if isinstance(node, ast.Call):
                f = node.func
                if isinstance(f, ast.Name) and f.id in banned_calls and not (
                        f.id == "__import__" and node.args
                        and isinstance(node.args[0], ast.Constant)):  # a fixed module is fine
                    problems.append(f"{where} calls {f.id}()")
                if isinstance(f, ast.Attribute) and f.attr in ("load", "load_all") and \
                        isinstance(f.value, ast.Name) and f.value.id == "yaml":
                    problems.append(f"{where} yaml.{f.attr}: use yaml.safe_load")
                if isinstance(f, ast.Attribute) and f.attr == "unsafe_load":
                    problems.append(f"{where} unsafe_load")
                if isinstance(f, ast.Attribute) and f.attr in ("read_pickle", "loads") and \
                        isinstance(f.value, ast.Name) and f.value.id in ("pd", "pickle"):
                    problems.append(f"{where} {f.value.id}.{f.attr}")
                for kw in node.keywords:
                    if kw.arg == "shell" and isinstance(kw.value, ast.Constant) and kw.value.value:
                        problems.append(f"{where} subprocess with shell=True")
                    if kw.arg == "weights_only" and isinstance(kw.value, ast.Constant) and \
                            kw.value.value is False:
                        problems.append(f"{where} torch.load(weights_only=False) unpickles")
            if isinstance(node, ast.Import | ast.ImportFrom):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) \
                    else [node.module or ""]
                for name in names:
                    if name.split(".")[0] in banned_modules:
                        problems.append(f"{where} imports {name}")
    assert not problems, "\n".join(problems)


def _is_literal_sql(node: ast.AST) -> bool:
    """A constant string, or an f-string whose only holes are PRAGMA integers."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return True
    if isinstance(node, ast.JoinedStr):
        text = "".join(v.value for v in node.values if isinstance(v, ast.Constant))
        return text.lstrip().upper().startswith("PRAGMA ")
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):  # implicit line joins
        return _is_literal_sql(node.left) and _is_literal_sql(node.right)
    return False


def test_sql_is_parameterised() -> None:
    """Every sqlite execute/executemany/executescript takes a literal SQL string; values go
    through ? placeholders. (PRAGMA cannot take parameters; its f-string holes are ints.)"""
    problems = []
    calls = 0
    for path, tree in _modules():
        if "sqlite3" not in path.read_text():
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                    node.func.attr in ("execute", "executemany", "executescript") and node.args:
                calls += 1
                sql = node.args[0]
                if isinstance(sql, ast.Name):
                    continue  # a module constant such as _SCHEMA, checked below
                if not _is_literal_sql(sql):
                    problems.append(f"{path.relative_to(ROOT)}:{node.lineno}: SQL built at run "
                                    "time; use ? placeholders")
    assert calls > 0, "no sqlite calls found: the scan is looking in the wrong place"
    assert not problems, "\n".join(problems)
