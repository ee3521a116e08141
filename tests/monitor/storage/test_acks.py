"""The ``acks`` table of the agent state: add / pending / applied, per site, old files,
and the open-incident check shared by ``mmdwatch ack`` and the MQTT topic."""
from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from monitor.storage.acks import AckRejected, find_open_incident, record_ack
from monitor.storage.state import Ack, AgentState, StateError


def _incident(iid: str, site: str = "l-town") -> dict:
    return {"id": iid, "site": site, "state": "open", "started": "2026-01-12T06:00:00Z",
            "last_firing": "2026-01-12T08:00:00Z", "sensors": ["s04"], "p_value": 1e-5,
            "firing_inspections": 3, "resolved": None}


def _result(fp: str) -> dict:  # a stand-in result (no "schema": not contract-checked)
    return {"fingerprint": fp, "status": "firing"}


@pytest.fixture
def state(tmp_path: Path):
    s = AgentState(tmp_path / "state.sqlite")
    yield s
    s.close()


def test_add_pending_applied_single_site(state):
    first = state.add_ack("inc-1", by="alice", via="cli", note="valve replaced", at=100.0)
    second = state.add_ack("inc-1", by="ops (mqtt client c1)", via="mqtt", at=50.0)
    assert state.pending_acks() == [  # oldest request first
        Ack(second, "inc-1", "ops (mqtt client c1)", "mqtt", "", 50.0),
        Ack(first, "inc-1", "alice", "cli", "valve replaced", 100.0)]
    assert state.pending_acks("") == state.pending_acks(None)  # '' = single site
    state.mark_ack_applied(second, 3600.0)
    assert [a.id for a in state.pending_acks()] == [first]
    state.mark_ack_applied(second, 7200.0)  # applied twice: the first record stays
    row = state._conn.execute("SELECT applied_at, applied_result, site FROM acks WHERE id = ?",
                              (second,)).fetchone()
    assert row[0] is not None and row[1] == 3600.0 and row[2] is None


def test_requested_at_defaults_to_now_and_ids_grow(state):
    import time

    before = time.time()
    a = state.add_ack("inc-1", by="alice", via="cli")
    b = state.add_ack("inc-1", by="bob", via="cli")
    assert b > a
    assert before <= state.pending_acks()[0].requested_at <= time.time()


def test_sites_are_kept_apart(state):
    north, south = state.for_site("dma-north"), state.for_site("dma-south")
    n = north.add_ack("north-1", by="alice", via="cli")
    s = south.add_ack("south-1", by="bob", via="mqtt", note="known work")
    single = state.add_ack("single-1", by="carol", via="cli")
    assert [a.id for a in north.pending_acks()] == [n]
    assert [a.id for a in south.pending_acks()] == [s]
    assert [a.id for a in state.pending_acks()] == [single]
    assert [a.id for a in state.pending_acks("dma-north")] == [n]
    south.mark_ack_applied(s, 10.0)
    assert south.pending_acks() == [] and len(north.pending_acks()) == 1


def test_via_and_incident_are_checked(state):
    with pytest.raises(ValueError, match="cli, mqtt"):
        state.add_ack("inc-1", by="alice", via="email")
    with pytest.raises(ValueError, match="incident"):
        state.add_ack("", by="alice", via="cli")


def test_commit_inspection_marks_acks_applied_in_its_transaction(state):
    site = state.for_site("dma-north")
    a = site.add_ack("north-1", by="alice", via="cli")
    site.commit_inspection(3600.0, _result("fp1"), incident=None, applied_acks=[a])
    assert site.pending_acks() == [] and site.open_incident() is None
    b = state.add_ack("inc-1", by="bob", via="cli")
    state.commit_inspection(7200.0, _result("fp2"), applied_acks=[b])
    assert state.pending_acks() == []
    assert state._conn.execute("SELECT applied_result FROM acks WHERE id = ?",
                               (b,)).fetchone()[0] == 7200.0


def test_open_incidents_of_every_site(state):
    assert state.open_incidents() == []
    state.commit_inspection(1.0, _result("a"), incident=_incident("single-1"))
    state.for_site("dma-south").commit_inspection(1.0, _result("b"),
                                                  incident=_incident("south-1", "dma-south"))
    state.for_site("dma-north").commit_inspection(1.0, _result("c"),
                                                  incident=_incident("north-1", "dma-north"))
    state.set_meta("anchor:dma-north", "0")  # other meta keys are not incidents
    got = state.open_incidents()
    assert [(site, inc["id"]) for site, inc in got] == [
        (None, "single-1"), ("dma-north", "north-1"), ("dma-south", "south-1")]
    state.for_site("dma-north").commit_inspection(2.0, _result("d"), incident=None)
    assert [site for site, _ in state.open_incidents()] == [None, "dma-south"]


def test_an_old_state_file_without_the_table_opens(tmp_path):
    path = tmp_path / "state.sqlite"
    with sqlite3.connect(path) as old:  # a state file from before acks existed
        old.executescript(
            "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);"
            "CREATE TABLE done (inspection_time REAL PRIMARY KEY, fingerprint TEXT NOT NULL, "
            "status TEXT NOT NULL, finished_at REAL NOT NULL);")
        old.execute("INSERT INTO meta VALUES ('incident', ?)",
                    ('{"id": "old-1", "site": "l-town", "state": "open"}',))
        old.execute("INSERT INTO done VALUES (5.0, 'fp', 'firing', 6.0)")
    state = AgentState(path)
    try:
        assert state.last_done() == 5.0 and state.open_incident()["id"] == "old-1"
        assert state.open_incidents() == [(None, state.open_incident())]
        assert state.pending_acks() == []
        ack_id, site = record_ack(state, "old-1", by="alice", via="cli")
        assert site is None and [a.id for a in state.pending_acks()] == [ack_id]
    finally:
        state.close()


def test_a_second_connection_sees_the_ack_at_once(tmp_path):
    """``mmdwatch ack`` writes through its own connection while the agent holds one."""
    agent = AgentState(tmp_path / "state.sqlite")
    cli = AgentState(tmp_path / "state.sqlite")
    try:
        agent.commit_inspection(1.0, _result("a"), incident=_incident("inc-1"))
        record_ack(cli, "inc-1", by="alice", via="cli", any_site=True)
        assert [a.incident_id for a in agent.pending_acks()] == ["inc-1"]
        assert agent._conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        cli.close()
        agent.close()


def test_record_ack_needs_the_open_incident(state):
    with pytest.raises(AckRejected, match="no incident is open"):
        record_ack(state, "nope", by="alice", via="cli", any_site=True)
    state.commit_inspection(1.0, _result("a"), incident=_incident("single-1"))
    state.for_site("dma-north").commit_inspection(1.0, _result("b"),
                                                  incident=_incident("north-1", "dma-north"))
    with pytest.raises(AckRejected) as info:
        record_ack(state, "nope", by="alice", via="cli", any_site=True)
    assert "single-1" in str(info.value) and "north-1 (site dma-north)" in str(info.value)
    assert "acknowledge one of these ids" in str(info.value)
    # with a site (the MQTT topic's): only that site's incident counts
    with pytest.raises(AckRejected, match="at site 'dma-south'"):
        record_ack(state, "north-1", by="alice", via="mqtt", site="dma-south")
    ack_id, site = record_ack(state, "north-1", by="alice", via="mqtt", site="dma-north")
    assert site == "dma-north"
    assert [a.id for a in state.for_site("dma-north").pending_acks()] == [ack_id]
    assert find_open_incident(state, "north-1", any_site=True)[0] == "dma-north"
    assert find_open_incident(state, "single-1")[0] is None
    assert state.pending_acks() == []  # nothing stored for the rejected ones


def test_unwritable_state_names_the_fix(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(StateError, match="state_dir"):
        AgentState(blocker / "state.sqlite")
