"""``mmdwatch ack`` on the command line (in the test process: tests/cli_runner.py) against a state
database made through the state API."""
from __future__ import annotations

import getpass
import subprocess
import time
from pathlib import Path

import pytest

from monitor.storage.state import AgentState
from tests.cli_runner import run_mmdwatch

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "monitor" / "demo" / "data" / "demo-network.csv.gz"


def mmdwatch(*args: str) -> subprocess.CompletedProcess:
    return run_mmdwatch(*args, cwd=ROOT)


def _config(tmp_path: Path, sites: list[str] | None = None) -> Path:
    lines = [f"source: {{type: file, path: {DATA}}}", f"state_dir: {tmp_path / 'state'}",
             "sinks: [{type: console}]"]
    if sites:
        entries = [f"{{id: {s}, sensors: [s0{i + 1}]}}" for i, s in enumerate(sites)]
        lines.append("sites: [" + ", ".join(entries) + "]")
    else:
        lines.append("site: l-town")
    path = tmp_path / "agent.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def _incident(iid: str, site: str) -> dict:
    return {"id": iid, "site": site, "state": "open", "started": "2026-01-12T06:00:00Z",
            "last_firing": "2026-01-12T08:00:00Z", "sensors": ["s04", "s06"],
            "p_value": 1e-6, "firing_inspections": 3, "resolved": None}


def _open(tmp_path: Path, iid: str, site: str | None = None) -> None:
    state = AgentState(tmp_path / "state" / "state.sqlite")
    try:
        ledger = state if site is None else state.for_site(site)
        ledger.commit_inspection(time.time(), {"fingerprint": iid, "status": "firing"},
                                 incident=_incident(iid, site or "l-town"))
    finally:
        state.close()


def _pending(tmp_path: Path, site: str | None = None) -> list:
    state = AgentState(tmp_path / "state" / "state.sqlite")
    try:
        return state.pending_acks(site)
    finally:
        state.close()


def test_ack_stores_it_for_the_agent(tmp_path):
    config = _config(tmp_path)
    _open(tmp_path, "l-town-20260112T0600-abcd1234")
    out = mmdwatch("ack", "l-town-20260112T0600-abcd1234", "--config", str(config),
                   "--by", "alice", "--note", "valve replaced, new level is normal")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 1 and "accepted by alice" in lines[0]
    assert "next inspection" in lines[0] and "reason: accepted" in lines[0]
    assert "ack 1 stored" in out.stderr  # logged
    (ack,) = _pending(tmp_path)
    assert (ack.incident_id, ack.by, ack.via, ack.note) == (
        "l-town-20260112T0600-abcd1234", "alice", "cli", "valve replaced, new level is normal")


def test_by_defaults_to_the_os_user(tmp_path):
    config = _config(tmp_path)
    _open(tmp_path, "inc-1")
    out = mmdwatch("ack", "inc-1", "--config", str(config))
    assert out.returncode == 0, out.stderr
    assert [a.by for a in _pending(tmp_path)] == [getpass.getuser()]


def test_a_wrong_id_exits_2_naming_the_open_ones(tmp_path):
    config = _config(tmp_path)
    _open(tmp_path, "inc-1")
    out = mmdwatch("ack", "inc-2", "--config", str(config), "--by", "alice")
    assert out.returncode == 2
    assert "no open incident 'inc-2'" in out.stderr and "open: inc-1" in out.stderr
    assert out.stdout == "" and _pending(tmp_path) == []


def test_no_state_yet_exits_2_and_creates_nothing(tmp_path):
    config = _config(tmp_path)
    out = mmdwatch("ack", "inc-1", "--config", str(config))
    assert out.returncode == 2 and "has not run there yet" in out.stderr
    assert not (tmp_path / "state").exists()


def test_several_sites_the_incident_names_its_site(tmp_path):
    config = _config(tmp_path, ["dma-north", "dma-south"])
    _open(tmp_path, "south-1", "dma-south")
    out = mmdwatch("ack", "south-1", "--config", str(config), "--by", "bob")
    assert out.returncode == 0, out.stderr
    assert "(site dma-south)" in out.stdout
    assert [a.incident_id for a in _pending(tmp_path, "dma-south")] == ["south-1"]
    assert _pending(tmp_path, "dma-north") == [] and _pending(tmp_path) == []


@pytest.mark.parametrize("args", [["ack", "--help"], ["--help"]])
def test_help_lists_ack(args):
    out = mmdwatch(*args)
    assert out.returncode == 0 and "ack" in out.stdout
