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
from collections.abc import Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import chain
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from connectors.base import Reading, WindowSource
from connectors.ratelimit import RateLimitedLog
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

#: Rejection reasons of the data clock (metric labels, like the other reasons).
AHEAD_OF_DATA_CLOCK = "ahead_of_data_clock"
NO_TIME_ON_DATA_CLOCK = "no_time_on_data_clock"


@dataclass(frozen=True)
class ClockPolicy:
    """What one site's data clock refuses (set by the agent from the site's schedule).

    ``max_ahead_s``: a reading further ahead of the site's robust data clock than this is
    held back (refused, counted, logged). ``refuse_received``: a reading whose time is only
    its receive time (the message carried none) is refused: on ``clock: data`` the receive
    time says nothing about where the data is.
    """

    max_ahead_s: float
    refuse_received: bool = False


def robust_clock(newest: Iterable[float]) -> float | None:
    """The data clock of a group of sensors: the lower median of their newest times.

    One sensor (or fewer than half of them) far ahead cannot move it; it is always the
    newest time of a real sensor, never an average. None when there are no sensors."""
    times = sorted(newest)
    if not times:
        return None
    return times[(len(times) - 1) // 2]


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
        self._sensor_names = {id_: name for name, id_ in self._sensor_ids.items()}
        # sensor key -> its newest time: what the robust data clock is the median of. It
        # also counts the times of readings held back, so that after a real gap the clock
        # moves on once most sensors report from the far side (held-back times live in
        # memory only; a reopened store starts from what it holds).
        self._newest: dict[str, float] = self._query_newest(self._writer)
        self._clocks: dict[str | None, float | None] = {}  # site -> clock, per commit
        self._policies: dict[str | None, ClockPolicy] = {}
        self._refusals = RateLimitedLog(log, 60.0)

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
    def set_clock_policy(self, policy: ClockPolicy, site: str | None = None) -> None:
        """Guard the data clock of ``site`` (its ``site\x1f`` keys; None: the bare keys of
        a single-site store) with ``policy``. Without one only the wall clock guards."""
        self._policies[site] = policy

    def add(self, readings: Iterable[Reading]) -> int:
        """Commit a batch (one transaction); return how many were accepted.

        Non-finite values, times too far ahead of the wall clock and, for a site with a
        :class:`ClockPolicy`, times too far ahead of its data clock (and receive times on a
        data clock) are rejected and counted in the metrics by reason; the rest are
        committed before this returns.
        """
        horizon = time.time() + MAX_FUTURE_S
        rows: list[tuple[int, float, float]] = []
        pending: dict[str, int] = {}  # unseen sensor -> negative placeholder id
        bad_value = bad_time = 0
        ids = self._sensor_ids
        checked: list[Reading] = []
        for r in readings:
            t, v = r.time, r.value
            if not (isinstance(v, float | int) and math.isfinite(v)):
                bad_value += 1
                continue
            if not math.isfinite(t) or t > horizon:
                bad_time += 1
                continue
            checked.append(r)
        if self._policies:
            checked = self._guard_data_clock(checked)
        for r in checked:
            sid = ids.get(r.sensor)
            if sid is None:
                sid = pending.setdefault(r.sensor, -1 - len(pending))
            rows.append((sid, float(r.time), float(r.value)))
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
            self._advance(checked)
        self._metrics.readings(len(rows))
        return len(rows)

    def _advance(self, readings: Iterable[Reading]) -> None:
        """Move the per-sensor newest times by ``readings``; the clocks are recomputed when
        next asked."""
        newest = self._newest
        for r in readings:
            if r.time > newest.get(r.sensor, -math.inf):
                newest[r.sensor] = r.time
        self._clocks = {}

    def _guard_data_clock(self, readings: list[Reading]) -> list[Reading]:
        """The readings of ``readings`` that the data clocks of their sites accept.

        The clock a reading is judged against already counts this batch's claims (each
        sensor's newest in it): a network that comes back from a long gap all together
        moves its clock at once, while one sensor alone far ahead cannot move it."""
        by_site: dict[str | None, list[Reading]] = {}
        for r in readings:
            by_site.setdefault(site_of(r.sensor), []).append(r)
        kept: list[Reading] = []
        for site, group in by_site.items():
            policy = self._policies.get(site)
            if policy is None:
                kept += group
                continue
            timed = [r for r in group if not (policy.refuse_received and r.received)]
            for r in group:
                if policy.refuse_received and r.received:
                    self._refuse(NO_TIME_ON_DATA_CLOCK, r, site,
                                 "it carries no time, and on clock: data the receive time "
                                 "says nothing about where the data is; send its time")
            claims = dict(self._site_newest(site))
            for r in timed:
                if r.time > claims.get(r.sensor, -math.inf):
                    claims[r.sensor] = r.time
            clock = robust_clock(claims.values())
            limit = math.inf if clock is None else clock + policy.max_ahead_s
            for r in timed:
                if clock is None or r.time <= limit:
                    kept.append(r)
                    continue
                self._refuse(AHEAD_OF_DATA_CLOCK, r, site,
                             f"{(r.time - clock) / 3600:.1f} h ahead of the data clock "
                             f"{_iso(clock)} (the bound is "
                             f"{policy.max_ahead_s / 3600:g} h); fix the sender's clock")
                # its time still counts towards the clock (see _advance): after a gap,
                # once most sensors report from the far side, the clock moves there
                newest = self._newest
                if r.time > newest.get(r.sensor, -math.inf) and r.sensor in self._sensor_ids:
                    newest[r.sensor] = r.time
                    self._clocks = {}
        return kept

    def _refuse(self, reason: str, r: Reading, site: str | None, why: str) -> None:
        self._metrics.rejected(reason)
        sensor = r.sensor.partition(SITE_SEP)[2] if site is not None else r.sensor
        self._refusals.warning(reason, "reading of sensor %r%s%s held back (%s): %s",
                               sensor, "" if site is None else f" of site {site}",
                               "" if r.topic is None else f" on topic {r.topic!r}",
                               reason, why)

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
            # never a sensor's newest reading: the data clock (the median of the sensors'
            # newest times) must read the same after a restart as before the prune
            removed += self._writer.execute(
                "DELETE FROM readings WHERE sensor_id = ? AND time < ? AND time < "
                "(SELECT MAX(time) FROM readings WHERE sensor_id = ?)", (sid, before, sid)
            ).rowcount
        self._writer.execute("COMMIT")
        return removed

    # -- reading ------------------------------------------------------------------------------
    def last_time_s(self) -> float | None:
        """The data clock (epoch s) of the whole store: the lower median of the sensors'
        newest times (:func:`robust_clock`), None when empty (kept in memory)."""
        return self.clock(None, every_key=True)

    def watermark(self) -> pd.Timestamp | None:
        """The data clock of the whole store (see :meth:`last_time_s`), None when empty."""
        return _timestamp(self.last_time_s())

    def clock(self, site: str | None, *, every_key: bool = False) -> float | None:
        """The robust data clock of ``site`` (its ``site\x1f`` keys; None: bare keys, or
        every key with ``every_key``): the lower median of its sensors' newest times."""
        key = "\x00all" if every_key else site
        if key not in self._clocks:
            newest = (self._newest.values() if every_key
                      else (t for _, t in self._site_newest(site)))
            self._clocks[key] = robust_clock(newest)
        return self._clocks[key]

    def _site_newest(self, site: str | None) -> list[tuple[str, float]]:
        return [(name, t) for name, t in list(self._newest.items())
                if site_of(name) == site]

    @staticmethod
    def _query_newest(conn: sqlite3.Connection) -> dict[str, float]:
        # One index probe per sensor rather than a scan of every reading.
        return {name: t for name, t in conn.execute(
            "SELECT s.name, (SELECT MAX(time) FROM readings r WHERE r.sensor_id = s.id) "
            "FROM sensors s") if t is not None}

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
        return [(name, t, v) for name, found in self._sensor_rows(start, end, sensors)
                for t, v in found]

    def _sensor_rows(self, start: float, end: float, sensors: Sequence[str] | None
                     ) -> Iterator[tuple[str, list[tuple[float, float]]]]:
        """Each stored sensor (of ``sensors``, all when None) in id order with its
        ``(time, value)`` rows in ``[start, end)``, in time order."""
        conn = self._reader()
        names = {id_: name for id_, name in conn.execute("SELECT id, name FROM sensors")}
        chosen = None if sensors is None else set(sensors)
        for sid, name in names.items():
            if chosen is None or name in chosen:  # a range scan on the (sensor, time) key
                yield name, conn.execute(
                    "SELECT time, value FROM readings WHERE sensor_id = ? AND time >= ? "
                    "AND time < ? ORDER BY time", (sid, start, end)).fetchall()

    def window_frame(self, start: float, end: float, sensors: Sequence[str] | None = None,
                     *, strip: int = 0) -> pd.DataFrame:
        """The long frame of :meth:`fetch`'s rows (``time`` UTC, ``sensor``, ``value``), built
        from one array per sensor instead of a Python tuple per reading (a 4-day window
        of 24 sensors at 5 min is 28,000 rows, read at every inspection). ``strip``:
        characters cut from the front of each sensor name (a site's key prefix)."""
        import numpy as np
        import pandas as pd

        labels: list[str] = []
        counts: list[int] = []
        rows: list[tuple[float, float]] = []
        for name, found in self._sensor_rows(start, end, sensors):
            if found:
                labels.append(name[strip:])
                counts.append(len(found))
                rows += found
        # (n, 2) from the flat sequence: a third of np.asarray(rows)'s time
        both = np.fromiter(chain.from_iterable(rows), np.float64,
                           count=2 * len(rows)).reshape(-1, 2)
        sensor = pd.array(labels, dtype="str").take(np.repeat(np.arange(len(labels)), counts))
        return pd.DataFrame({"time": pd.to_datetime(both[:, 0], unit="s", utc=True),
                             "sensor": sensor, "value": both[:, 1]})

    def read_window(self, start: datetime | pd.Timestamp, end: datetime | pd.Timestamp, *,
                    resample: str | None = None, aggregate: str = "mean") -> pd.DataFrame:
        """Long frame ``time`` (UTC), ``sensor``, ``value`` for ``[start, end)``: the raw
        readings (``resample``/``aggregate`` are left to the monitor's own resampling)."""
        return self.window_frame(start.timestamp(), end.timestamp())

    def for_site(self, site: str, *, owner: bool = False) -> SiteReadings:
        """The readings of one site of a multi-site agent (keys ``site\x1fsensor``), as a
        window source of its own; ``owner``: closing it closes this store (a one-shot
        command's)."""
        return SiteReadings(self, site, owner=owner)

    def _site_ids(self, site: str) -> list[int]:
        prefix = site + SITE_SEP
        return [i for name, i in list(self._sensor_ids.items()) if name.startswith(prefix)]

    def site_watermark(self, site: str) -> float | None:
        """One site's data clock (epoch s; multi-site keys): the lower median of its
        sensors' newest times, None when it has none (kept in memory)."""
        return self.clock(site)

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
        return self.store.window_frame(start.timestamp(), end.timestamp(), keys,
                                       strip=len(prefix))

    def watermark(self) -> pd.Timestamp | None:
        return _timestamp(self.store.site_watermark(self.site))

    def first_time(self) -> pd.Timestamp | None:
        return _timestamp(self.store._site_extreme(self.site, "MIN"))

    def close(self) -> None:
        if self._owner:
            self.store.close()


def site_of(key: str) -> str | None:
    """The site of a store key (``north\x1fn12`` -> ``north``); None for a bare id."""
    site, sep, _ = key.partition(SITE_SEP)
    return site if sep else None


def _iso(epoch_s: float) -> str:
    return datetime.fromtimestamp(epoch_s, UTC).isoformat().replace("+00:00", "Z")


def _timestamp(epoch_s: float | None) -> pd.Timestamp | None:
    """Epoch seconds -> UTC Timestamp (microseconds, as ``datetime.fromtimestamp``)."""
    if epoch_s is None:
        return None
    import pandas as pd

    return pd.Timestamp(datetime.fromtimestamp(epoch_s, UTC))
