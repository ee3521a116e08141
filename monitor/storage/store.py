"""The agent's reading store: embedded SQLite in WAL mode under ``state_dir``.

Readings are keyed by (sensor, time): a duplicate overwrites its twin (idempotent, and a
corrected value wins), out-of-order readings are simply inserted. Memory stays bounded
whatever the stream length: rows live on disk, SQLite's page cache is capped, and
:meth:`ReadingStore.prune` drops what no window needs any more.

One writer connection (behind a lock) takes batches from source threads; each reading
thread gets its own connection, which WAL lets run alongside the writer.

For inspections the store is a :class:`connectors.base.WindowSource` like InfluxDB: the
agent and the one-shot commands ask it for windows through that one interface.
"""
from __future__ import annotations

import logging
import math
import sqlite3
import threading
import time
from collections.abc import Collection, Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from connectors.base import Reading, WindowSource
from monitor.service.metrics import Metrics

if TYPE_CHECKING:
    import pandas as pd

log = logging.getLogger(__name__)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS sensors (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE);
CREATE TABLE IF NOT EXISTS readings (
    sensor_id INTEGER NOT NULL,
    time REAL NOT NULL,
    value REAL NOT NULL,
    PRIMARY KEY (sensor_id, time)
) WITHOUT ROWID;
"""
# Readings further ahead of the wall clock than this are rejected: one bogus future
# timestamp would otherwise push the data clock past every pending inspection.
MAX_FUTURE_S = 86400.0


#: Joins a site id and a sensor id into the store's sensor key in a multi-site agent
#: (``north\x1fn12``). Site ids hold only letters, digits, ``_.-``, and sensor ids are
#: printable, so the key splits unambiguously; a single-site store keeps bare sensor ids.
SITE_SEP = "\x1f"


def site_key(site: str, sensor: str) -> str:
    """The store's key of ``sensor`` of ``site`` (multi-site agents)."""
    return f"{site}{SITE_SEP}{sensor}"


class StoreError(Exception):
    """The store cannot be opened or written; the message names the path and the fix."""


class ReadingStore(WindowSource):
    """Readings on disk, queried by time window (a window source over what a stream source
    delivered)."""

    type: ClassVar[str] = "store"
    # A stream fills the store from the agent's first start: inspect all of it.
    inspect_from_oldest: ClassVar[bool] = True

    def __init__(self, path: Path, metrics: Metrics | None = None, *,
                 cache_kib: int = 16384) -> None:
        self.path = Path(path)
        self._metrics = metrics or Metrics()
        self._cache_kib = cache_kib
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            self._writer = self._connect()
            self._writer.executescript(_SCHEMA)
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(
                f"cannot open the reading store {self.path}: {exc}; make state_dir "
                "writable by this user or point state_dir elsewhere") from None
        self._write_lock = threading.Lock()
        self._local = threading.local()
        self._sensor_ids: dict[str, int] = {
            name: id_ for id_, name in self._writer.execute("SELECT id, name FROM sensors")}
        self._watermark: float | None = self._query_watermark(self._writer)
        self._site_watermarks: dict[str, float] = {}  # site -> newest (multi-site keys)
        self._sensor_names = {id_: name for name, id_ in self._sensor_ids.items()}

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None,
                               timeout=30.0)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")  # durable across process crashes in WAL
        conn.execute(f"PRAGMA cache_size=-{self._cache_kib}")
        return conn

    def _reader(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._connect()
            self._local.conn = conn
        return conn

    # -- writing ------------------------------------------------------------------------------
    def add(self, readings: Iterable[Reading]) -> int:
        """Commit a batch (one transaction); return how many were accepted.

        Non-finite values and times too far in the future are rejected and counted in the
        metrics by reason; the rest are committed before this returns.
        """
        horizon = time.time() + MAX_FUTURE_S
        rows: list[tuple[int, float, float]] = []
        pending: dict[str, int] = {}  # unseen sensor -> negative placeholder id
        bad_value = bad_time = 0
        ids = self._sensor_ids
        for r in readings:
            t, v = r.time, r.value
            if not (isinstance(v, float | int) and math.isfinite(v)):
                bad_value += 1
                continue
            if not math.isfinite(t) or t > horizon:
                bad_time += 1
                continue
            sid = ids.get(r.sensor)
            if sid is None:
                sid = pending.setdefault(r.sensor, -1 - len(pending))
            rows.append((sid, float(t), float(v)))
        if bad_value:
            self._metrics.rejected("non_finite_value", bad_value)
        if bad_time:
            self._metrics.rejected("time_out_of_range", bad_time)
        if not rows:
            return 0
        with self._write_lock:
            try:
                self._writer.execute("BEGIN IMMEDIATE")
                fresh: dict[int, int] = {}
                for name, placeholder in pending.items():
                    cur = self._writer.execute(
                        "INSERT INTO sensors(name) VALUES (?) "
                        "ON CONFLICT(name) DO UPDATE SET name=excluded.name RETURNING id",
                        (name,))
                    fresh[placeholder] = cur.fetchone()[0]
                if fresh:
                    rows = [(fresh[s] if s < 0 else s, t, v) for s, t, v in rows]
                self._writer.executemany(
                    "INSERT INTO readings(sensor_id, time, value) VALUES (?, ?, ?) "
                    "ON CONFLICT(sensor_id, time) DO UPDATE SET value=excluded.value", rows)
                self._writer.execute("COMMIT")
            except sqlite3.Error as exc:
                if self._writer.in_transaction:
                    self._writer.execute("ROLLBACK")
                raise StoreError(f"could not commit {len(rows)} readings to {self.path}: "
                                 f"{exc}; check free disk space and permissions") from None
            for name, placeholder in pending.items():
                ids[name] = fresh[placeholder]
                self._sensor_names[fresh[placeholder]] = name
            newest = max(t for _, t, _ in rows)
            if self._watermark is None or newest > self._watermark:
                self._watermark = newest
            if self._site_watermarks:
                self._advance_sites(rows)
        self._metrics.readings(len(rows))
        return len(rows)

    def prune(self, before: float, site: str | None = None) -> int:
        """Delete readings older than ``before`` (epoch s), of one ``site`` only when given
        (multi-site keys); return how many went."""
        with self._write_lock:
            ids = list(self._sensor_ids.values()) if site is None else self._site_ids(site)
            removed = self._delete_older(ids, before)
        if removed:
            log.debug("pruned %d readings older than %s", removed, before)
        return removed

    def prune_others(self, before: float, sites: Collection[str]) -> int:
        """Delete readings older than ``before`` (epoch s) of every key that belongs to none
        of ``sites``: a site since removed from the config, or the bare keys of an earlier
        single-site config. Nothing inspects them any more, so they age out under the
        same retention as the rest; return how many went."""
        prefixes = tuple(site + SITE_SEP for site in sites)
        with self._write_lock:
            return self._delete_older([i for name, i in list(self._sensor_ids.items())
                                       if not name.startswith(prefixes)], before)

    def _delete_older(self, ids: list[int], before: float) -> int:
        """Delete the readings of sensor ``ids`` older than ``before`` in one transaction
        (range deletes on the (sensor, time) key); the caller holds the write lock."""
        if not ids:
            return 0
        removed = 0
        self._writer.execute("BEGIN IMMEDIATE")
        for sid in ids:
            removed += self._writer.execute(
                "DELETE FROM readings WHERE sensor_id = ? AND time < ?", (sid, before)
            ).rowcount
        self._writer.execute("COMMIT")
        return removed

    # -- reading ------------------------------------------------------------------------------
    def last_time_s(self) -> float | None:
        """Time (epoch s) of the newest reading, None when empty (kept in memory)."""
        return self._watermark

    def watermark(self) -> pd.Timestamp | None:
        """Time of the newest reading, None when empty."""
        return _timestamp(self._watermark)

    @staticmethod
    def _query_watermark(conn: sqlite3.Connection) -> float | None:
        # One index probe per sensor rather than a scan of every reading.
        row = conn.execute(
            "SELECT MAX((SELECT MAX(time) FROM readings r WHERE r.sensor_id = s.id)) "
            "FROM sensors s").fetchone()
        return row[0] if row else None

    def first_time(self) -> pd.Timestamp | None:
        """Time of the oldest reading kept, None when empty."""
        row = self._reader().execute(
            "SELECT MIN((SELECT MIN(time) FROM readings r WHERE r.sensor_id = s.id)) "
            "FROM sensors s").fetchone()
        return _timestamp(row[0] if row else None)

    def sensors(self) -> list[str]:
        return sorted(self._sensor_ids)

    def count(self) -> int:
        return self._reader().execute("SELECT COUNT(*) FROM readings").fetchone()[0]

    def fetch(self, start: float, end: float, sensors: Sequence[str] | None = None
              ) -> list[tuple[str, float, float]]:
        """``(sensor, time, value)`` rows with ``start <= time < end``."""
        conn = self._reader()
        names = {id_: name for id_, name in conn.execute("SELECT id, name FROM sensors")}
        chosen = None if sensors is None else set(sensors)
        wanted = [i for i, n in names.items() if chosen is None or n in chosen]
        out: list[tuple[str, float, float]] = []
        for sid in wanted:  # per-sensor range scans on the (sensor, time) key
            name = names[sid]
            out.extend((name, t, v) for t, v in conn.execute(
                "SELECT time, value FROM readings WHERE sensor_id = ? AND time >= ? "
                "AND time < ? ORDER BY time", (sid, start, end)))
        return out

    def read_window(self, start: datetime | pd.Timestamp, end: datetime | pd.Timestamp, *,
                    resample: str | None = None, aggregate: str = "mean") -> pd.DataFrame:
        """Long frame ``time`` (UTC), ``sensor``, ``value`` for ``[start, end)``: the raw
        readings (``resample``/``aggregate`` are left to the monitor's own resampling)."""
        return _frame(self.fetch(start.timestamp(), end.timestamp()))

    def for_site(self, site: str, *, owner: bool = False) -> SiteReadings:
        """The readings of one site of a multi-site agent (keys ``site\x1fsensor``), as a
        window source of its own; ``owner``: closing it closes this store (a one-shot
        command's)."""
        return SiteReadings(self, site, owner=owner)

    def _site_ids(self, site: str) -> list[int]:
        prefix = site + SITE_SEP
        return [i for name, i in list(self._sensor_ids.items()) if name.startswith(prefix)]

    def _advance_sites(self, rows: list[tuple[int, float, float]]) -> None:
        """Move the newest time of the sites already asked about by the committed ``rows``
        (the others are read from the database when first asked)."""
        known = self._site_watermarks
        names = self._sensor_names
        newest: dict[int, float] = {}
        for sid, t, _ in rows:
            if t > newest.get(sid, -math.inf):
                newest[sid] = t
        for sid, t in newest.items():
            site, sep, _ = names.get(sid, "").partition(SITE_SEP)
            if sep and site in known and t > known[site]:
                known[site] = t

    def site_watermark(self, site: str) -> float | None:
        """Time (epoch s) of one site's newest reading (multi-site keys), None when it has
        none; kept in memory once asked."""
        wm = self._site_watermarks.get(site)
        if wm is None:
            with self._write_lock:  # no batch commits between the query and the cache
                wm = self._site_extreme(site, "MAX")
                if wm is not None:
                    self._site_watermarks[site] = wm
        return wm

    def _site_extreme(self, site: str, fn: str) -> float | None:
        """MIN or MAX reading time of one site: one index probe per sensor of the site."""
        conn = self._reader()
        query = ("SELECT MAX(time) FROM readings WHERE sensor_id = ?" if fn == "MAX" else
                 "SELECT MIN(time) FROM readings WHERE sensor_id = ?")
        found = [row[0] for sid in self._site_ids(site) for row in conn.execute(query, (sid,))
                 if row[0] is not None]
        if not found:
            return None
        return max(found) if fn == "MAX" else min(found)

    def close(self) -> None:
        with self._write_lock:
            self._writer.close()
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()


class SiteReadings(WindowSource):
    """One site's readings in a multi-site agent's store: a window source whose sensor ids
    are the site's own (the store's ``site\x1f`` prefix taken off). Closing it leaves the
    store open (the agent closes the store) unless it owns the store."""

    type: ClassVar[str] = "store"
    inspect_from_oldest: ClassVar[bool] = True

    def __init__(self, store: ReadingStore, site: str, *, owner: bool = False) -> None:
        self.store = store
        self.site = site
        self._owner = owner

    def __repr__(self) -> str:
        return f"SiteReadings({self.store.path}, site={self.site!r})"

    def read_window(self, start: datetime | pd.Timestamp, end: datetime | pd.Timestamp, *,
                    resample: str | None = None, aggregate: str = "mean") -> pd.DataFrame:
        prefix = self.site + SITE_SEP
        keys = [name for name in self.store.sensors() if name.startswith(prefix)]
        rows = self.store.fetch(start.timestamp(), end.timestamp(), keys) if keys else []
        cut = len(prefix)
        return _frame([(name[cut:], t, v) for name, t, v in rows])

    def watermark(self) -> pd.Timestamp | None:
        return _timestamp(self.store.site_watermark(self.site))

    def first_time(self) -> pd.Timestamp | None:
        return _timestamp(self.store._site_extreme(self.site, "MIN"))

    def close(self) -> None:
        if self._owner:
            self.store.close()


def _frame(rows: list[tuple[str, float, float]]) -> pd.DataFrame:
    """``(sensor, epoch s, value)`` rows -> the long frame ``time`` (UTC), ``sensor``,
    ``value`` of a window query."""
    import pandas as pd

    frame = pd.DataFrame(rows, columns=["sensor", "time", "value"])
    frame["time"] = pd.to_datetime(frame["time"], unit="s", utc=True)
    return frame[["time", "sensor", "value"]]


def _timestamp(epoch_s: float | None) -> pd.Timestamp | None:
    """Epoch seconds -> UTC Timestamp (microseconds, as ``datetime.fromtimestamp``)."""
    if epoch_s is None:
        return None
    import pandas as pd

    return pd.Timestamp(datetime.fromtimestamp(epoch_s, UTC))
