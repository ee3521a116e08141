"""A one-shot command's engine process (monitor/engine_process.py): the engine part's fits
in a forked child equal this process's to the bit, a child that dies leaves them to this
process, and the ``mmdwatch`` process of a backfill fits in one.

The forks happen in a child Python of the test, as in the ``mmdwatch`` process: the test
process runs threads (pytest-xdist's), and a fork is for a process without any."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from monitor.demo.simulate import Scenario, simulate, write_csv

ROOT = Path(__file__).resolve().parents[2]
#: what the engine-part fits compute (monitor.decision.calibrated_rule.FitScope)
SCOPES = ("history", "decision", "full")

#: Fits the residual pairs of eight inspection times of a simulated stream three ways, in
#: each scope (SCOPES, its arguments after the file): in an EngineProcess (as ``mmdwatch
#: backfill``), in one whose child dies before its first fit, and in this process. Prints
#: the fits as JSON, and whether torch was loaded here after the EngineProcess had fitted.
SCRIPT = r"""
import json, logging, os, sys
from datetime import UTC, datetime, timedelta

logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s %(message)s")
from monitor.cli import _settle_engine_child, _window_reader
from monitor.engine_process import EngineProcess

child = EngineProcess(_settle_engine_child)  # forked before pandas and torch load, as the CLI
dead = EngineProcess(lambda: os._exit(3))

from monitor.compose import build_inspector
from monitor.config import validate_config
from monitor.decision.calibrated_rule import fits_here
from engine.live.engine_power import residual_pair

config = validate_config({"site": "net", "source": {"type": "file", "path": sys.argv[1]},
                          "sinks": []})
inspector = build_inspector(config)
read, close = _window_reader(config)
times = [datetime(2026, 1, 12, tzinfo=UTC) + timedelta(hours=3 * i) for i in range(8)]
pairs = [residual_pair(p.detection, inspector.decision.engine_rows)
         for p in inspector.detect_windows(times, read).values()]

SCOPES = sys.argv[2:]

def dump(fits):  # each fit as its JSON, less its own run time
    return [repr(f) if isinstance(f, Exception) else
            {k: v for k, v in f.to_dict().items() if k != "runtime_s"} for f in fits]

out = {"pairs": len(pairs)}
for scope in SCOPES:
    out[f"child {scope}"] = dump(child(inspector.engine, pairs, scope)())
out["torch before fitting here"] = "torch" in sys.modules
for scope in SCOPES:
    out[f"dead {scope}"] = dump(dead(inspector.engine, pairs, scope)())
    out[f"here {scope}"] = dump(fits_here(inspector.engine, pairs, scope)())
child.close()
dead.close()
close()
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def three_ways(tmp_path_factory) -> tuple[dict, str]:
    frame, _ = simulate(Scenario(n_sensors=8, changes={"s04": -0.9}))
    path = tmp_path_factory.mktemp("engine-process") / "net.csv"
    write_csv(frame, path)
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(path), *SCOPES], capture_output=True,
                          text=True, cwd=ROOT, timeout=240, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


def test_the_engine_process_fits_as_this_process_does(three_ways):
    out, _ = three_ways
    assert out["pairs"] == 8
    for scope in SCOPES:
        here = out[f"here {scope}"]
        assert len(here) == 8 and all(isinstance(f, dict) for f in here)
        assert out[f"child {scope}"] == here  # to the bit: the same code, other process
    # the p-value's own permutation tests ran only where asked for
    assert all(f["p_value"] is not None for f in out["here full"])
    assert all(f["p_value"] is None for f in out["here decision"] + out["here history"])
    # the command's process itself never loaded torch while the child fitted
    assert out["torch before fitting here"] is False


def test_a_dead_engine_process_leaves_the_fits_to_this_one(three_ways):
    out, log = three_ways
    for scope in SCOPES:
        assert out[f"dead {scope}"] == out[f"here {scope}"]
    assert log.count("the engine's child process died") == 1  # said once, then here


@pytest.mark.slow
def test_a_backfill_process_fits_in_its_engine_process(tmp_path):
    """``python -m monitor.cli backfill`` (the process of a one-shot command) starts its
    engine process and says so; its results equal ``main`` in a caller's process, which
    fits in that process (tests/monitor/test_cli.py compares the two on results)."""
    frame, _ = simulate(Scenario(n_sensors=8, changes={"s04": -0.9}))
    path = tmp_path / "net.csv"
    write_csv(frame, path)
    args = ["backfill", "--data", str(path), "--start", "2026-01-12", "--end", "2026-01-13",
            "--every", "1d"]
    own = subprocess.run([sys.executable, "-m", "monitor.cli", "--log-level", "INFO", *args,
                          "--out", str(tmp_path / "own.jsonl")],
                         capture_output=True, text=True, cwd=ROOT, timeout=120, check=False)
    assert own.returncode == 0, own.stderr
    assert "the engine part fits in a child process" in own.stderr
    assert len((tmp_path / "own.jsonl").read_text().splitlines()) == 2
    retro = subprocess.run([sys.executable, "-m", "monitor.cli", "--log-level", "INFO", *args,
                            "--profile",
                            "retrospective", "--out", str(tmp_path / "retro.jsonl")],
                           capture_output=True, text=True, cwd=ROOT, timeout=120,
                           check=False)
    assert retro.returncode == 0, retro.stderr
    assert "the engine part fits in a child process" not in retro.stderr  # engine rule


def test_a_one_shot_process_runs_one_blas_thread_unless_told_otherwise():
    """``_one_blas_thread`` (a one-shot command's process, before NumPy loads): OpenBLAS's
    spinning threads would take the cores of the engine process's fits; a number the
    environment gives stays."""
    from monitor.cli import _one_blas_thread

    unset: dict[str, str] = {}
    _one_blas_thread(unset)
    assert unset == {"OPENBLAS_NUM_THREADS": "1"}
    given = {"OPENBLAS_NUM_THREADS": "4"}
    _one_blas_thread(given)
    assert given == {"OPENBLAS_NUM_THREADS": "4"}


def test_a_command_whose_engine_process_cannot_start_fits_in_its_own(monkeypatch, caplog):
    """Where the child cannot be started (no fork, no semaphores: a sandbox without
    /dev/shm), the command says so and fits in its own process."""
    import monitor.engine_process
    from monitor.cli import _start_engine_process

    def refuse(_prepare_child):
        raise OSError(38, "Function not implemented")

    monkeypatch.setattr(monitor.engine_process, "EngineProcess", refuse)
    assert _start_engine_process() is None
    assert "its child process could not start" in caplog.text


def _children(pid: int) -> list[int]:
    """The processes ``pid``'s threads forked (Linux's /proc)."""
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            out += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            pass
    return out


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="Linux's /proc")
def test_the_engine_process_ends_with_a_killed_command(tmp_path):
    """A ``mmdwatch backfill`` killed (SIGKILL: no ``close``) takes its engine process
    with it; the child would otherwise wait on its work queue forever, holding the
    engine's memory."""
    frame, _ = simulate(Scenario(n_sensors=8, changes={"s04": -0.9}))
    path = tmp_path / "net.csv"
    write_csv(frame, path)
    command = subprocess.Popen(
        [sys.executable, "-m", "monitor.cli", "backfill", "--data", str(path), "--start",
         "2026-01-12", "--end", "2026-01-18", "--out", str(tmp_path / "out.jsonl")],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    children: list[int] = []
    while not children and command.poll() is None and time.monotonic() < deadline:
        children = _children(command.pid)
        time.sleep(0.01)
    assert children, "the backfill ended before its engine process was seen"
    os.kill(command.pid, signal.SIGKILL)
    command.wait(timeout=30)
    deadline = time.monotonic() + 10
    while any(map(_alive, children)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(map(_alive, children))


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for its reaper does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"
