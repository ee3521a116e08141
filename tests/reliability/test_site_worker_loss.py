"""A process of the agent's pool killed while the inspections of several sites run on it:
nothing is recorded for what did not come back, a fresh pool runs it again, and in the end
every inspection of every site is done once, none lost."""
from __future__ import annotations

import json
import logging
import os
import signal
import time

import pytest

from monitor.compose import build_agent
from monitor.config import validate_config
from monitor.storage.state import AgentState
from tests.monitor.fleet.test_sites_config import _network

pytestmark = [pytest.mark.timeout(300)]


def _two_sites(tmp_path, out):
    """Two sites of the shared test network on a local pool of 2, engine fits (slow enough
    to kill a worker mid-run) every 6h, results to ``out``."""
    _network(tmp_path / "net.csv")
    return validate_config({
        "state_dir": str(tmp_path / "state"),
        "source": {"type": "file", "path": str(tmp_path / "net.csv")},
        "profile": "retrospective",
        "windows": {"before": "7d", "after": "12h"},
        "schedule": {"every": "6h", "clock": "data", "poll": "0.2s"},
        "engine": {"method": "mmd-baseline", "block_size": None, "device": "cpu"},
        "executor": {"type": "local", "workers": 2},
        "sinks": [{"type": "jsonl", "path": str(out)}],
        "sites": [{"id": "north", "sensors": ["n1", "n2", "n3", "n4"]},
                  {"id": "south", "sensors": ["s1", "s2", "s3", "s4"]}],
    }, env={})


def _each_site_done_once(tmp_path, out):
    """The results in ``out``, after checking that each site's 7 inspections are there
    once and in its ledger (9 days of data, before 7d, after 12h, every 6h from 01-12
    00:00: 7 inspections)."""
    results = [json.loads(line) for line in out.read_text().splitlines()]
    state = AgentState(tmp_path / "state" / "state.sqlite")
    try:
        for site in ("north", "south"):
            times = [r["inspection_time"] for r in results if r["site"] == site]
            assert len(times) == len(set(times)) == 7, times
            assert len(state.for_site(site).done_times()) == 7
    finally:
        state.close()
    return results


def test_a_killed_pool_process_loses_no_inspection(tmp_path, caplog):
    out = tmp_path / "results.jsonl"
    config = _two_sites(tmp_path, out)
    caplog.set_level(logging.INFO)
    agent = build_agent(config)
    agent.start()
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and agent._executor is None:
            time.sleep(0.05)
        pool = agent._executor
        assert pool is not None
        while time.monotonic() < deadline and not (out.exists() and out.read_text()):
            time.sleep(0.05)  # the pool is warm: jobs are running on it
        victim = next(iter(pool._processes))  # a pool process of the agent
        os.kill(victim, signal.SIGKILL)
        assert agent.wait_idle(180), agent.due()
    finally:
        agent.stop()
    assert "executor lost a worker process" in caplog.text
    results = _each_site_done_once(tmp_path, out)
    assert all(r["status"] in ("ok", "firing") for r in results)


def test_an_inspection_that_kills_its_worker_every_time_is_recorded_and_its_site_goes_on(
        tmp_path, caplog):
    """The task of one inspection of site north kills its pool process every time it runs
    (as out-of-memory would). The agent runs it alone to tell cause from bystander,
    records it as an ``error`` result naming the cause after its second death, and both
    sites go on: every other inspection of both is done once, none lost."""
    from datetime import UTC, datetime

    from monitor.fleet.executors import LocalExecutor
    from tests.killing_executor import KillingExecutor

    out = tmp_path / "results.jsonl"
    config = _two_sites(tmp_path, out)
    caplog.set_level(logging.INFO)
    poison = datetime(2026, 1, 12, 12, tzinfo=UTC)
    agent = build_agent(config)
    # fault injection: the pool the composition root would build, with north's inspection
    # at 12:00 (and only it: south's runs at the same time) killing its process
    agent._executor_factory = lambda: KillingExecutor(LocalExecutor(2), poison, "north")
    agent.start()
    try:
        assert agent.wait_idle(180), agent.due()
    finally:
        agent.stop()
    assert "killed its worker process each time it ran" in caplog.text
    for r in _each_site_done_once(tmp_path, out):
        if r["site"] == "north" and r["inspection_time"] == "2026-01-12T12:00:00Z":
            assert r["status"] == "error" and "BrokenProcessPool" in r["error"]
            assert "worker process died each time" in r["summary"]
        else:
            assert r["status"] in ("ok", "firing"), r
