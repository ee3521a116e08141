"""Durable agent state in ``state_dir/state.sqlite``: the inspection ledger and the outbox.

Both live in one SQLite file so that recording an inspection as done and putting its
result in the outbox is ONE transaction: after a crash either both happened (the result
is delivered from the outbox, the inspection is not repeated) or neither (the inspection
runs again and produces the same fingerprint).

* ledger: ``meta`` (the schedule anchor) and ``done`` (one row per finished inspection
  time, with its fingerprint and status).
* outbox: one row per result not yet confirmed by every sink, with the set of sinks that
  did confirm it. A row leaves only when every configured sink confirmed.
* sites: a multi-site agent keeps each site's ledger in ``site_done`` and its calibration
  history in ``site_history`` (keyed by site and time), and its anchor, open incident and
  decision memory under the meta keys ``anchor:<site>`` / ``incident:<site>`` /
  ``memory:<site>``; :meth:`AgentState.for_site` gives one site's view. A single-site agent
  uses ``done``, ``history``, ``anchor``, ``incident`` and ``memory``, so its state files
  stay as they were (``memory`` is a meta key added by later versions). One outbox serves
  all.
* ``published``: the fingerprints that the one-shot commands (``inspect --publish``,
  ``backfill --publish``) put in the outbox. They never touch the ledger, so a backfill
  does not move the agent's schedule or calibration history; :meth:`AgentState.publish`
  skips a fingerprint found here or in ``done``, so a rerun publishes nothing twice.
* ``acks``: operators' acceptances of an open incident (``mmdwatch ack``, the MQTT topic
  ``<prefix>/<site>/ack``), one row each: who, through what, when, and once the agent has
  applied it, when and at which inspection. ``site`` is NULL for a single-site agent and
  the site id in a multi-site one. Written by other processes (the CLI) while the agent
  runs: WAL mode and the busy timeout make that safe.
* history rows hold both statistics of the live decision: ``statistic`` (the level part)
  and ``engine_statistic`` (the engine part; NULL in rows written before it existed, a
  column added on open to older state files).
"""
from __future__ import annotations

import json
import math
import sqlite3
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS done (
    inspection_time REAL PRIMARY KEY,
    fingerprint TEXT NOT NULL,
    status TEXT NOT NULL,
    finished_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS history (
    inspection_time REAL PRIMARY KEY,
    statistic REAL NOT NULL,
    engine_statistic REAL
);
CREATE TABLE IF NOT EXISTS outbox (
    fingerprint TEXT PRIMARY KEY,
    inspection_time REAL NOT NULL,
    created_at REAL NOT NULL,
    result TEXT NOT NULL,
    delivered TEXT NOT NULL DEFAULT '[]'
);
CREATE TABLE IF NOT EXISTS published (
    fingerprint TEXT PRIMARY KEY,
    inspection_time REAL NOT NULL,
    queued_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS site_done (
    site TEXT NOT NULL,
    inspection_time REAL NOT NULL,
    fingerprint TEXT NOT NULL,
    status TEXT NOT NULL,
    finished_at REAL NOT NULL,
    PRIMARY KEY (site, inspection_time)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS site_done_fingerprint ON site_done(fingerprint);
CREATE TABLE IF NOT EXISTS site_history (
    site TEXT NOT NULL,
    inspection_time REAL NOT NULL,
    statistic REAL NOT NULL,
    engine_statistic REAL,
    PRIMARY KEY (site, inspection_time)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS acks (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    site TEXT,
    incident_id TEXT NOT NULL,
    requested_at REAL NOT NULL,
    by TEXT NOT NULL,
    via TEXT NOT NULL,
    note TEXT NOT NULL DEFAULT '',
    applied_at REAL,
    applied_result REAL
);
CREATE INDEX IF NOT EXISTS acks_pending ON acks(site, applied_at);
"""

#: How an ack reached the agent (``acks.via``).
ACK_VIA = ("cli", "mqtt")


class StateError(Exception):
    """The state database cannot be opened or written; names the path and the fix."""


@dataclass(frozen=True)
class OutboxEntry:
    fingerprint: str
    inspection_time: float
    result: dict[str, Any]
    delivered: frozenset[str]


@dataclass(frozen=True)
class Ack:
    """An operator's acceptance of an open incident's new state, not yet applied: the
    agent resolves the incident with ``reason: accepted`` at its next inspection and then
    marks the ack applied (:meth:`AgentState.mark_ack_applied`)."""

    id: int
    incident_id: str
    by: str  # a user name (CLI), or the payload's ``by`` plus the MQTT client (MQTT)
    via: str  # "cli" or "mqtt"
    note: str
    requested_at: float  # epoch seconds


def _site_key(site: str | None) -> str | None:
    """The ``acks.site`` value: NULL for a single-site agent ('' counts as none)."""
    return site or None


#: the statements that give an older state file the engine part's column (table names
#: cannot be SQL parameters, so each is written out)
_ENGINE_COLUMNS = (
    ("PRAGMA table_info(history)", "ALTER TABLE history ADD COLUMN engine_statistic REAL"),
    ("PRAGMA table_info(site_history)",
     "ALTER TABLE site_history ADD COLUMN engine_statistic REAL"),
)

#: one calibration-history value: (level statistic, engine statistic or None)
HistoryValue = tuple[float, "float | None"]


def _engine(value: float | None) -> float | None:
    """An engine statistic as stored: None (NULL) for a missing or non-finite value."""
    return None if value is None or not math.isfinite(value) else float(value)


class AgentState:
    """Ledger + outbox over one SQLite connection (serialised by a lock)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            self._conn = sqlite3.connect(self.path, check_same_thread=False,
                                         isolation_level=None, timeout=30.0)
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=FULL")  # results must survive power loss
            self._conn.executescript(_SCHEMA)
            self._add_engine_columns()
        except (OSError, sqlite3.Error) as exc:
            raise StateError(f"cannot open agent state {self.path}: {exc}; make state_dir "
                             "writable by this user or point state_dir elsewhere") from None
        self._lock = threading.RLock()

    def _add_engine_columns(self) -> None:
        """State files of versions before the engine part lack ``engine_statistic``: add
        it (NULL in the old rows, which then calibrate the level part alone)."""
        for columns_sql, add_sql in _ENGINE_COLUMNS:
            if "engine_statistic" not in {row[1] for row in self._conn.execute(columns_sql)}:
                self._conn.execute(add_sql)

    def _tx(self, fn: Any) -> Any:
        with self._lock:
            try:
                self._conn.execute("BEGIN IMMEDIATE")
                out = fn(self._conn)
                self._conn.execute("COMMIT")
                return out
            except sqlite3.Error as exc:
                if self._conn.in_transaction:
                    self._conn.execute("ROLLBACK")
                raise StateError(f"agent state {self.path}: {exc}; check free disk space "
                                 "and permissions") from None

    # -- ledger -------------------------------------------------------------------------------
    def get_meta(self, key: str) -> str | None:
        with self._lock:
            row = self._conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    def set_meta(self, key: str, value: str) -> None:
        self._tx(lambda c: self._put_meta(c, key, value))

    @staticmethod
    def _put_meta(c: sqlite3.Connection, key: str, value: str) -> None:
        c.execute("INSERT INTO meta(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET "
                  "value = excluded.value", (key, value))

    def for_site(self, site: str) -> SiteState:
        """One site's ledger, history, anchor and incident in a multi-site agent."""
        return SiteState(self, site)

    def is_done(self, t: float, site: str | None = None) -> bool:
        with self._lock:
            if site is not None:
                return self._conn.execute(
                    "SELECT 1 FROM site_done WHERE site = ? AND inspection_time = ?",
                    (site, t)).fetchone() is not None
            return self._conn.execute("SELECT 1 FROM done WHERE inspection_time = ?",
                                      (t,)).fetchone() is not None

    def last_done(self, site: str | None = None) -> float | None:
        with self._lock:
            if site is not None:
                return self._conn.execute("SELECT MAX(inspection_time) FROM site_done "
                                          "WHERE site = ?", (site,)).fetchone()[0]
            return self._conn.execute("SELECT MAX(inspection_time) FROM done").fetchone()[0]

    def done_times(self, site: str | None = None) -> list[float]:
        with self._lock:
            if site is not None:
                return [r[0] for r in self._conn.execute(
                    "SELECT inspection_time FROM site_done WHERE site = ? "
                    "ORDER BY inspection_time", (site,))]
            return [r[0] for r in self._conn.execute(
                "SELECT inspection_time FROM done ORDER BY inspection_time")]

    def commit_inspection(self, t: float, result: dict[str, Any], *,
                          statistic: HistoryValue | None = None,
                          incident: dict[str, Any] | list[dict[str, Any]] | None
                          | bool = False,
                          site: str | None = None,
                          applied_acks: Sequence[int] = (),
                          memory: dict[str, Any] | None = None) -> None:
        """Mark inspection ``t`` done and queue its result, atomically. Idempotent: a result
        already queued (same fingerprint) keeps its delivery state.

        In the same transaction: ``statistic`` joins the calibration history,
        ``incident`` (a dict, a list of dicts when several are open, oldest first, or None
        for "no open incident"; False leaves it as it is) becomes the open incidents, ``memory`` (a dict; None leaves it as it is) becomes the
        decision's memory (:meth:`decision_memory`), and the acks ``applied_acks`` are
        marked applied at ``t`` (as :meth:`mark_ack_applied`), so an ack is used up exactly
        when the result that applied it is recorded. ``site``: the site of a multi-site
        agent (its own ledger rows), None for a single-site agent."""
        fp = result["fingerprint"]
        payload = json.dumps(result, separators=(",", ":"), allow_nan=False)
        now = time.time()
        key = "incident" if site is None else f"incident:{site}"
        memory_key = "memory" if site is None else f"memory:{site}"

        def write(c: sqlite3.Connection) -> None:
            c.execute("INSERT INTO outbox(fingerprint, inspection_time, created_at, result) "
                      "VALUES (?, ?, ?, ?) ON CONFLICT(fingerprint) DO NOTHING",
                      (fp, t, now, payload))
            if site is None:
                c.execute("INSERT INTO done(inspection_time, fingerprint, status, "
                          "finished_at) VALUES (?, ?, ?, ?) ON CONFLICT(inspection_time) "
                          "DO NOTHING", (t, fp, result.get("status", "?"), now))
            else:
                c.execute("INSERT INTO site_done(site, inspection_time, fingerprint, status, "
                          "finished_at) VALUES (?, ?, ?, ?, ?) "
                          "ON CONFLICT(site, inspection_time) DO NOTHING",
                          (site, t, fp, result.get("status", "?"), now))
            if statistic is not None:
                self._add_history(c, [(t, statistic)], site)
            if incident is None:
                c.execute("DELETE FROM meta WHERE key = ?", (key,))
            elif incident is not False:
                self._put_meta(c, key, json.dumps(incident))
            if memory is not None:
                self._put_meta(c, memory_key, json.dumps(memory))
            if applied_acks:
                self._mark_applied(c, applied_acks, t, now)

        self._tx(write)

    @staticmethod
    def _add_history(c: sqlite3.Connection, values: Sequence[tuple[float, HistoryValue]],
                     site: str | None) -> None:
        rows = [(t, float(level), _engine(engine)) for t, (level, engine) in values]
        if site is None:
            c.executemany("INSERT INTO history(inspection_time, statistic, engine_statistic) "
                          "VALUES (?, ?, ?) ON CONFLICT(inspection_time) DO NOTHING", rows)
        else:
            c.executemany("INSERT INTO site_history(site, inspection_time, statistic, "
                          "engine_statistic) VALUES (?, ?, ?, ?) "
                          "ON CONFLICT(site, inspection_time) DO NOTHING",
                          [(site, *row) for row in rows])

    def publish(self, t: float, result: dict[str, Any]) -> bool:
        """Queue a one-shot command's result of inspection ``t`` for the sinks, unless its
        fingerprint was published before (by an earlier one-shot run, or by the agent:
        ``done``). True when it was queued. The ledger, history and incident are left to
        the agent."""
        fp = result["fingerprint"]
        payload = json.dumps(result, separators=(",", ":"), allow_nan=False)
        now = time.time()

        def write(c: sqlite3.Connection) -> bool:
            if c.execute("SELECT 1 FROM published WHERE fingerprint = ? UNION ALL "
                         "SELECT 1 FROM done WHERE fingerprint = ? UNION ALL "
                         "SELECT 1 FROM site_done WHERE fingerprint = ?",
                         (fp, fp, fp)).fetchone():
                return False
            c.execute("INSERT INTO published(fingerprint, inspection_time, queued_at) "
                      "VALUES (?, ?, ?)", (fp, t, now))
            c.execute("INSERT INTO outbox(fingerprint, inspection_time, created_at, result) "
                      "VALUES (?, ?, ?, ?) ON CONFLICT(fingerprint) DO NOTHING",
                      (fp, t, now, payload))
            return True

        return bool(self._tx(write))

    def published_pending(self) -> dict[str, frozenset[str]]:
        """Results the one-shot commands queued that some sink has not confirmed yet:
        fingerprint -> the sinks that did."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT o.fingerprint, o.delivered FROM outbox o JOIN published p "
                "USING (fingerprint)").fetchall()
        return {fp: frozenset(json.loads(delivered)) for fp, delivered in rows}

    # -- calibration history ------------------------------------------------------------------
    def add_history(self, values: Sequence[tuple[float, HistoryValue]],
                    site: str | None = None) -> None:
        """Backfilled (inspection time, (level, engine statistic)) rows; existing times
        are kept."""
        self._tx(lambda c: self._add_history(c, values, site))

    def history(self, since: float, site: str | None = None
                ) -> list[tuple[float, HistoryValue]]:
        """(inspection time, (level, engine statistic)) from ``since`` on, in time order;
        the engine statistic is None where it was not computed."""
        with self._lock:
            if site is not None:
                rows = self._conn.execute(
                    "SELECT inspection_time, statistic, engine_statistic FROM site_history "
                    "WHERE site = ? AND inspection_time >= ? ORDER BY inspection_time",
                    (site, since)).fetchall()
            else:
                rows = self._conn.execute(
                    "SELECT inspection_time, statistic, engine_statistic FROM history "
                    "WHERE inspection_time >= ? ORDER BY inspection_time", (since,)).fetchall()
        return [(t, (level, engine)) for t, level, engine in rows]

    def prune_history(self, before: float, site: str | None = None) -> None:
        if site is not None:
            self._tx(lambda c: c.execute("DELETE FROM site_history WHERE site = ? AND "
                                         "inspection_time < ?", (site, before)))
            return
        self._tx(lambda c: c.execute("DELETE FROM history WHERE inspection_time < ?",
                                     (before,)))

    def drop_engine_history(self, site: str | None = None) -> int:
        """Forget the engine part's stored statistics, keep the level's: after an upgrade
        that computes the engine statistic differently, old and new values would
        calibrate each other. Returns how many values were dropped."""
        def drop(c: sqlite3.Connection) -> int:
            if site is None:
                return c.execute("UPDATE history SET engine_statistic = NULL "
                                 "WHERE engine_statistic IS NOT NULL").rowcount
            return c.execute("UPDATE site_history SET engine_statistic = NULL WHERE site = ? "
                             "AND engine_statistic IS NOT NULL", (site,)).rowcount
        return int(self._tx(drop))

    def saved_incidents(self, site: str | None = None
                        ) -> dict[str, Any] | list[dict[str, Any]] | None:
        """The open incidents as the tracker saved them: None, one dict, or a list."""
        raw = self.get_meta("incident" if site is None else f"incident:{site}")
        return None if raw is None else json.loads(raw)

    def open_incident_list(self, site: str | None = None) -> list[dict[str, Any]]:
        """The open incidents of ``site`` (None: a single-site agent's), oldest first."""
        saved = self.saved_incidents(site)
        return [] if saved is None else saved if isinstance(saved, list) else [saved]

    def open_incident(self, site: str | None = None) -> dict[str, Any] | None:
        """The newest open incident of ``site`` (None when none is open)."""
        items = self.open_incident_list(site)
        return items[-1] if items else None

    def decision_memory(self, site: str | None = None) -> dict[str, Any] | None:
        """The decision's memory saved with the last result (``SiteTracker.memory``): the
        quarantine after the last incident and the sensors its ack accepted; None if none."""
        raw = self.get_meta("memory" if site is None else f"memory:{site}")
        return None if raw is None else json.loads(raw)

    def open_incidents(self) -> list[tuple[str | None, dict[str, Any]]]:
        """Every site's open incidents as ``(site, incident dict)``: site None for a
        single-site agent's (meta key ``incident``), the site id for ``incident:<site>``;
        in key order, a site's oldest first."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT key, value FROM meta WHERE key = 'incident' OR key LIKE 'incident:%' "
                "ORDER BY key").fetchall()
        out: list[tuple[str | None, dict[str, Any]]] = []
        for key, value in rows:
            site = None if key == "incident" else key[len("incident:"):]
            saved = json.loads(value)
            out.extend((site, item) for item in (saved if isinstance(saved, list) else [saved]))
        return out

    # -- acks -----------------------------------------------------------------------------
    def add_ack(self, incident_id: str, *, by: str, via: str, site: str | None = None,
                note: str = "", at: float | None = None) -> int:
        """Store an operator's acceptance of incident ``incident_id`` (of ``site``; None
        or '' for a single-site agent), requested at ``at`` (epoch s; default now).
        Returns its id. Whether the incident is open is the caller's check
        (:func:`monitor.storage.acks.record_ack`); the agent applies pending acks at its
        next inspection."""
        if via not in ACK_VIA:
            raise ValueError(f"ack via {via!r}: must be one of {', '.join(ACK_VIA)}")
        if not incident_id:
            raise ValueError("ack: incident_id must not be empty; give the incident's id")
        requested = time.time() if at is None else float(at)

        def write(c: sqlite3.Connection) -> int:
            cur = c.execute("INSERT INTO acks(site, incident_id, requested_at, by, via, note) "
                            "VALUES (?, ?, ?, ?, ?, ?)",
                            (_site_key(site), incident_id, requested, by, via, note))
            assert cur.lastrowid is not None
            return int(cur.lastrowid)

        return int(self._tx(write))

    def pending_acks(self, site: str | None = None) -> list[Ack]:
        """The acks of ``site`` (None or '': a single-site agent's) not applied yet, oldest
        first."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT id, incident_id, by, via, note, requested_at FROM acks "
                "WHERE site IS ? AND applied_at IS NULL ORDER BY requested_at, id",
                (_site_key(site),)).fetchall()
        return [Ack(int(i), inc, by, via, note, float(at)) for i, inc, by, via, note, at
                in rows]

    def mark_ack_applied(self, ack_id: int, t: float) -> None:
        """Record that ack ``ack_id`` was applied by the inspection at ``t`` (epoch s);
        it leaves :meth:`pending_acks`. An ack already applied keeps its first record."""
        self._tx(lambda c: self._mark_applied(c, [ack_id], t, time.time()))

    @staticmethod
    def _mark_applied(c: sqlite3.Connection, ack_ids: Sequence[int], t: float,
                      now: float) -> None:
        c.executemany("UPDATE acks SET applied_at = ?, applied_result = ? "
                      "WHERE id = ? AND applied_at IS NULL",
                      [(now, t, int(i)) for i in ack_ids])

    # -- outbox -------------------------------------------------------------------------------
    def pending(self, sink: str | None = None, limit: int = 100) -> list[OutboxEntry]:
        """Queued results, oldest inspection first; with ``sink``, only those it has not
        confirmed."""
        # the small columns of every entry first, then the results of the chosen ones
        # only: a backlog of thousands of results is not read and decoded at every poll
        with self._lock:
            rows = self._conn.execute(
                "SELECT fingerprint, inspection_time, delivered FROM outbox "
                "ORDER BY inspection_time, created_at").fetchall()
            chosen: list[tuple[str, float, frozenset[str]]] = []
            for fp, t, delivered in rows:
                got = frozenset(json.loads(delivered))
                if sink is None or sink not in got:
                    chosen.append((fp, t, got))
                    if len(chosen) >= limit:
                        break
            results = [self._conn.execute("SELECT result FROM outbox WHERE fingerprint = ?",
                                          (fp,)).fetchone() for fp, _, _ in chosen]
        return [OutboxEntry(fp, t, json.loads(row[0]), got)
                for (fp, t, got), row in zip(chosen, results, strict=True) if row is not None]

    def outbox_size(self) -> int:
        with self._lock:
            return self._conn.execute("SELECT COUNT(*) FROM outbox").fetchone()[0]

    def confirm(self, fp: str, sink: str, all_sinks: frozenset[str]) -> bool:
        """Record that ``sink`` delivered ``fp``; drop the entry once every sink in
        ``all_sinks`` has. Returns True when the entry left the outbox."""

        def write(c: sqlite3.Connection) -> bool:
            row = c.execute("SELECT delivered FROM outbox WHERE fingerprint = ?",
                            (fp,)).fetchone()
            if row is None:
                return True
            got = set(json.loads(row[0])) | {sink}
            if all_sinks <= got:
                c.execute("DELETE FROM outbox WHERE fingerprint = ?", (fp,))
                return True
            c.execute("UPDATE outbox SET delivered = ? WHERE fingerprint = ?",
                      (json.dumps(sorted(got)), fp))
            return False

        return self._tx(write)

    def forget_sinks_except(self, sinks: frozenset[str]) -> None:
        """Drop entries every current sink already confirmed (a sink was removed from the
        config since they were queued)."""
        for entry in self.pending(limit=1_000_000):
            if sinks <= entry.delivered:
                self._tx(lambda c, fp=entry.fingerprint: c.execute(
                    "DELETE FROM outbox WHERE fingerprint = ?", (fp,)))

    def close(self) -> None:
        with self._lock:
            self._conn.close()



class SiteState:
    """One site's view of :class:`AgentState` in a multi-site agent: the same ledger and
    history methods the agent calls on a single-site state, kept under the site's own key
    (``site_done``, ``site_history``, meta ``anchor:<site>`` / ``incident:<site>``); the
    outbox is the shared one."""

    def __init__(self, state: AgentState, site: str) -> None:
        self.state = state
        self.site = site

    def get_meta(self, key: str) -> str | None:
        return self.state.get_meta(f"{key}:{self.site}")

    def set_meta(self, key: str, value: str) -> None:
        self.state.set_meta(f"{key}:{self.site}", value)

    def is_done(self, t: float) -> bool:
        return self.state.is_done(t, self.site)

    def last_done(self) -> float | None:
        return self.state.last_done(self.site)

    def done_times(self) -> list[float]:
        return self.state.done_times(self.site)

    def commit_inspection(self, t: float, result: dict[str, Any], *,
                          statistic: HistoryValue | None = None,
                          incident: dict[str, Any] | list[dict[str, Any]] | None
                          | bool = False,
                          applied_acks: Sequence[int] = (),
                          memory: dict[str, Any] | None = None) -> None:
        self.state.commit_inspection(t, result, statistic=statistic, incident=incident,
                                     site=self.site, applied_acks=applied_acks,
                                     memory=memory)

    def add_history(self, values: Sequence[tuple[float, HistoryValue]]) -> None:
        self.state.add_history(values, self.site)

    def history(self, since: float) -> list[tuple[float, HistoryValue]]:
        return self.state.history(since, self.site)

    def prune_history(self, before: float) -> None:
        self.state.prune_history(before, self.site)

    def drop_engine_history(self) -> int:
        return self.state.drop_engine_history(self.site)

    def open_incident(self) -> dict[str, Any] | None:
        return self.state.open_incident(self.site)

    def saved_incidents(self) -> dict[str, Any] | list[dict[str, Any]] | None:
        return self.state.saved_incidents(self.site)

    def decision_memory(self) -> dict[str, Any] | None:
        return self.state.decision_memory(self.site)

    def add_ack(self, incident_id: str, *, by: str, via: str, note: str = "",
                at: float | None = None) -> int:
        return self.state.add_ack(incident_id, by=by, via=via, site=self.site, note=note,
                                  at=at)

    def pending_acks(self) -> list[Ack]:
        return self.state.pending_acks(self.site)

    def mark_ack_applied(self, ack_id: int, t: float) -> None:
        self.state.mark_ack_applied(ack_id, t)

    def outbox_size(self) -> int:
        return self.state.outbox_size()
