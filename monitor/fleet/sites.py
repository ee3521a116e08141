"""Sites of one agent: which readings belong to which site, and each site's own schedule,
windows, ledger, calibration history and incident.

A single-site agent (``site:``) has one :class:`SiteRunner` over the agent's window source
and the state's own tables, exactly as before sites existed. A multi-site agent
(``sites:``) has one per site, each reading its windows from its own view of the one store
(:meth:`monitor.storage.store.ReadingStore.for_site`) or of the source (InfluxDB ``site_tag`` /
sensor list), and keeping its ledger rows under its id
(:meth:`monitor.storage.state.AgentState.for_site`); the outbox is shared. The agent
(:mod:`monitor.agent`) decides when each site's due inspection runs and where.
"""
from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from connectors.base import ConnectorError, Reading, WindowSource
from connectors.ratelimit import RateLimitedLog
from connectors.timeutil import format_duration, iso
from engine.live.engine_power import ENGINE_PART_VERSION
from engine.live.residual_shift import LEVEL_STATISTIC_VERSION
from monitor.decision.tracker import SiteTracker, history_times
from monitor.inspection import Inspector, Outcome
from monitor.schedule import InspectionPlan
from monitor.service.metrics import Metrics
from monitor.storage.store import site_key

if TYPE_CHECKING:
    import pandas as pd
    from pydantic import BaseModel

    from monitor.decision.calibrated_rule import Prepared
    from monitor.fleet.jobs import InspectionBatch, InspectionJob
    from monitor.storage.state import Ack, HistoryValue
    from monitor.windows import Windows

log = logging.getLogger(__name__)

#: How long past t + A a wall-clock site waits for its data to reach the end of the after
#: window before it runs the inspection anyway (it then ends ``incomplete``, so a site
#: whose data stopped still shows it). Late data within it is waited for, never filled.
LATE_DATA_GRACE = timedelta(hours=1)

#: Rejection reasons of the router (metric labels, like the MQTT payload reasons).
UNKNOWN_SITE = "unknown_site"
UNASSIGNED_SENSOR = "unassigned_sensor"
UNLISTED_SENSOR = "unlisted_sensor"


class Ledger(Protocol):
    """What a site needs of the state database (AgentState, or SiteState for one site)."""

    def get_meta(self, key: str) -> str | None: ...
    def set_meta(self, key: str, value: str) -> None: ...
    def is_done(self, t: float) -> bool: ...
    def last_done(self) -> float | None: ...
    def commit_inspection(self, t: float, result: dict[str, Any], *,
                          statistic: HistoryValue | None = None,
                          incident: dict[str, Any] | list[dict[str, Any]] | None
                          | bool = False,
                          applied_acks: Sequence[int] = (),
                          memory: dict[str, Any] | None = None) -> None: ...
    def pending_acks(self) -> list[Ack]: ...
    def add_history(self, values: Sequence[tuple[float, HistoryValue]]) -> None: ...
    def history(self, since: float) -> list[tuple[float, HistoryValue]]: ...
    def prune_history(self, before: float) -> None: ...
    def drop_engine_history(self) -> int: ...
    def open_incident(self) -> dict[str, Any] | None: ...
    def saved_incidents(self) -> dict[str, Any] | list[dict[str, Any]] | None: ...
    def decision_memory(self) -> dict[str, Any] | None: ...


#: The state's meta key naming how the stored engine-part statistics were computed.
ENGINE_PART_META = "engine_part"


def current_engine_statistics(state: Ledger, rows: list[tuple[float, HistoryValue]],
                              version: str, where: str = ""
                              ) -> list[tuple[float, HistoryValue]]:
    """``rows`` of the calibration history with the engine part's statistics dropped
    (here and in ``state``) when the state does not say they were computed as ``version``
    computes them: a state written by an earlier version holds values of another
    statistic, and calibrating new values against them would misplace every p-value.
    The level part's values stay; the engine part votes again once its history holds
    ``min_history`` of new values, and the level part decides alone until then. The state
    is marked with ``version`` either way."""
    stored = state.get_meta(ENGINE_PART_META)
    if stored == version:
        return rows
    if any(engine is not None for _, (_, engine) in rows):
        dropped = state.drop_engine_history()
        log.warning("calibration%s: the engine part's statistic is computed differently "
                    "since this version (%s; the state holds %s): its %d stored values "
                    "were dropped, the level part decides alone until the engine part has "
                    "min_history of new values", where, version,
                    stored or "values of an earlier version", dropped)
        rows = [(t, (level, None)) for t, (level, _) in rows]
    state.set_meta(ENGINE_PART_META, version)
    return rows


LEVEL_STATISTIC_META = "level_statistic"


def current_level_statistics(state: Ledger, rows: list[tuple[float, HistoryValue]],
                             version: str, where: str = ""
                             ) -> tuple[list[tuple[float, HistoryValue]], bool]:
    """``rows`` of the calibration history, or none when the state does not say its level
    values were computed as ``version`` computes them (then they are dropped from
    ``state`` too, and True says so): values of an earlier level statistic would set the
    threshold of another one. The caller computes the history again from the source's
    past where it can, as on a first start. The state is marked with ``version``."""
    stored = state.get_meta(LEVEL_STATISTIC_META)
    reset = stored != version and bool(rows)
    if reset:
        state.prune_history(math.inf)
        log.warning("calibration%s: the level statistic is computed differently since this "
                    "version (%s; the state holds %s): its %d stored values were dropped "
                    "and the history is computed again from the source where it holds the "
                    "past", where, version, stored or "values of an earlier version",
                    len(rows))
        rows = []
    state.set_meta(LEVEL_STATISTIC_META, version)
    return rows, reset


class SiteRouter:
    """Assigns each reading of a stream to its site and gives it the store's key.

    A reading that names its site (MQTT topic ``{site}`` level) goes to that site when it
    is configured (and, when the site lists its sensors, names one of them); one that does
    not goes to the site whose ``sensors`` list holds it. Anything else is dropped, counted
    by reason (``unknown_site``, ``unlisted_sensor``, ``unassigned_sensor``) and logged at
    most once a minute per reason with the fix: bad data never stops the agent.
    ``qualify``: store keys ``site\\x1fsensor`` (multi-site); False keeps bare ids (one site
    whose source names sites: only its own readings are kept).
    """

    def __init__(self, sensors: dict[str, list[str] | None], metrics: Metrics, *,
                 qualify: bool = True, log_interval_s: float = 60.0) -> None:
        self.sites = frozenset(sensors)
        self.lists = {site: frozenset(names) for site, names in sensors.items()
                      if names is not None}
        self.owner = {name: site for site, names in sensors.items() for name in names or ()}
        self.qualify = qualify
        self.metrics = metrics
        self._log = RateLimitedLog(log, log_interval_s)

    def route(self, batch: Iterable[Reading]) -> list[Reading]:
        out: list[Reading] = []
        dropped: dict[str, int] = {}
        for r in batch:
            site = r.site
            if site is None:
                site = self.owner.get(r.sensor)
                if site is None:
                    dropped[UNASSIGNED_SENSOR] = dropped.get(UNASSIGNED_SENSOR, 0) + 1
                    self._log.warning(UNASSIGNED_SENSOR, "reading of sensor %r dropped: no "
                                      "site lists it and its topic names no site; add it to "
                                      "a site's sensors", r.sensor)
                    continue
            elif site not in self.sites:
                dropped[UNKNOWN_SITE] = dropped.get(UNKNOWN_SITE, 0) + 1
                self._log.warning(UNKNOWN_SITE, "reading of sensor %r dropped: its topic names "
                                  "site %r, which is not configured; add {id: %s} to sites "
                                  "or stop publishing there", r.sensor, site, site)
                continue
            else:
                listed = self.lists.get(site)
                if listed is not None and r.sensor not in listed:
                    dropped[UNLISTED_SENSOR] = dropped.get(UNLISTED_SENSOR, 0) + 1
                    self._log.warning(UNLISTED_SENSOR, "reading of sensor %r dropped: site %r "
                                      "lists its sensors and not this one; add it to the "
                                      "site's sensors", r.sensor, site)
                    continue
            key = site_key(site, r.sensor) if self.qualify else r.sensor
            out.append(Reading(key, r.time, r.value, None, r.topic, r.received))
        for reason, count in dropped.items():
            self.metrics.rejected(reason, count)
        return out


class SiteRunner:
    """One site: its schedule and clock, its windows, its ledger, calibration history
    and incident. ``site`` is None for a single-site agent (its state keys are the
    original ones); ``source`` is the connector config a worker may read this site's
    windows from itself (a window source such as InfluxDB), None when the windows must be
    read here (the agent's store)."""

    def __init__(self, *, inspector: Inspector, windows: WindowSource, state: Ledger,
                 plan: InspectionPlan, tracker: SiteTracker | None = None,
                 clock: str = "wall", start: datetime | None = None,
                 site: str | None = None, source: BaseModel | None = None,
                 finished: Callable[[], bool] = lambda: False,
                 fallback: WindowSource | None = None) -> None:
        self.site = site
        self.inspector = inspector
        self.windows = windows
        self.state = state
        self.plan = plan
        self.tracker = tracker
        self.clock = clock
        self.start_time = start
        self.source = source
        self._finished = finished
        # the whole store: clock and first time of a site that has no readings yet, so its
        # inspections still come due (and end as error) instead of waiting silently
        self._fallback = fallback
        self.history_ready = tracker is None
        self.retry_at = 0.0  # monotonic time before which the source is not asked again
        self.backoff = 1.0
        # the first pass (windows, detection, engine-part fit) of due times, computed in
        # one batch by the agent's tick (Agent._prefit), taken by run()
        self.prepared: dict[datetime, Prepared] = {}
        # the due time an executor's first pass could not give (its windows incomplete,
        # no data): it goes as a job, and the site is not batched again until it has
        self.first_pass_miss: datetime | None = None

    @property
    def name(self) -> str:
        return self.site or self.inspector.site

    def __repr__(self) -> str:
        return f"SiteRunner({self.name!r})"

    # -- windows and clocks --------------------------------------------------------------
    def read_window(self, start: datetime, end: datetime) -> pd.DataFrame:
        import pandas as pd

        spec = self.inspector.spec
        return self.windows.read_window(pd.Timestamp(start), pd.Timestamp(end),
                                        resample=format_duration(spec.resample),
                                        aggregate=spec.aggregate)

    def watermark(self) -> datetime | None:
        wm = self.windows.watermark()
        if wm is None and self._fallback is not None:
            wm = self._fallback.watermark()
        return None if wm is None else wm.to_pydatetime().astimezone(UTC)

    def clock_now(self) -> datetime | None:
        """The time inspections are due against (see :mod:`monitor.schedule`)."""
        if self.clock == "wall":
            return datetime.now(UTC)
        wm = self.watermark()
        if wm is not None and self._finished():
            # a finished replay: its last bin is as complete as it will ever be
            wm += self.inspector.spec.resample
        return wm

    def anchor(self) -> datetime | None:
        """Earliest inspection time, fixed on first start and kept in the ledger."""
        saved = self.state.get_meta("anchor")
        if saved is not None:
            return datetime.fromtimestamp(float(saved), UTC)
        spec = self.inspector.spec
        if self.start_time is not None:
            anchor = self.start_time
        elif self.windows.inspect_from_oldest:  # the store a stream fills: all of it
            first = self.windows.first_time()
            if first is None and self._fallback is not None:
                first = self._fallback.first_time()
            if first is None:
                return None  # no data yet
            anchor = first.to_pydatetime().astimezone(UTC) + spec.before
        else:  # a database: from the newest complete inspection on
            now = self.clock_now()
            if now is None:
                return None
            anchor = now - spec.after  # the latest complete inspection runs at once
        self.state.set_meta("anchor", repr(anchor.timestamp()))
        log.info("first inspection time%s: on or after %s",
                 "" if self.site is None else f" of site {self.site}", iso(anchor))
        return anchor

    def due(self, limit: int = 10_000) -> list[datetime]:
        """Inspection times not yet done whose after window is complete, oldest first."""
        anchor = self.anchor()
        now = self.clock_now()
        if anchor is None or now is None:
            return []
        last = self.state.last_done()
        after = self.inspector.spec.after
        if last is None:
            times = self.plan.times(anchor)
        else:
            times = self.plan.times(max(anchor, datetime.fromtimestamp(last, UTC)),
                                    inclusive=False)
        out: list[datetime] = []
        reached = _Reached(self, now)
        for t in times:
            if t + after > now or len(out) >= limit:
                break
            if not self.state.is_done(t.timestamp()):
                if not reached(t + after):
                    # on the wall clock the data may lag (a late upload, a database's
                    # ingest delay): wait for it rather than inspect a window it does not
                    # cover; later times reach even further past the data
                    break
                out.append(t)
        return out

    # -- inspections ---------------------------------------------------------------------
    def prepare_history(self, first: datetime) -> None:
        """Load the calibration history, the open incident and the decision's memory (the
        quarantine after the last incident, the sensors an ack accepted) from the state
        database; on a first start, compute the history from what the source already holds
        (an InfluxDB with two weeks of data calibrates the first inspection)."""
        assert self.tracker is not None
        span = self.inspector.decision.calibration.history
        where = "" if self.site is None else f" of site {self.site}"
        rows, reset = current_level_statistics(
            self.state, self.state.history((first - span).timestamp()),
            LEVEL_STATISTIC_VERSION, where)
        rows = current_engine_statistics(self.state, rows, ENGINE_PART_VERSION, where)
        if not rows and (reset or self.state.last_done() is None) \
                and self.inspector.calibrated:
            times = history_times(self.inspector, first)
            added = self.tracker.backfill(times, self.read_window)
            rows = [(th.timestamp(), v) for th, v in sorted(self.tracker.history.items())]
            if added:
                self.state.add_history(rows)
                log.info("calibration%s: %d past inspection times computed from the source",
                         where, added)
        self.tracker.history = {datetime.fromtimestamp(th, UTC): v for th, v in rows}
        self.tracker.restore_incidents(self.state.saved_incidents())
        self.tracker.restore(self.state.decision_memory())
        self.history_ready = True

    def history_at(self, t: datetime) -> Any:
        """The calibration history for the inspection at ``t`` (None: engine rule)."""
        if self.tracker is None:
            return None
        if not self.history_ready:
            self.prepare_history(t)
        return self.tracker.history_at(t) if self.inspector.calibrated else None

    def run(self, t: datetime) -> Outcome:
        """The inspection at ``t``, here and now (the windows read in this process; or
        taken from :attr:`prepared`, the first pass of the due times, whose engine fit a
        firing result then gets in full: ``Inspector.complete_engine_blocks``)."""
        prepared = self.prepared.pop(t, None)
        outcome = self.inspector.run(t, self.read_window, self.history_at(t),
                                     prepared=prepared)
        if prepared is not None:
            self.inspector.complete_engine_blocks([(outcome.result, prepared)])
        return outcome

    def job(self, t: datetime) -> InspectionJob:
        """The inspection at ``t`` as a job for a worker: with the window frame read here,
        or, for a source a worker can reach itself, with that source's config."""
        from monitor.fleet.jobs import InspectionJob, InspectorSettings

        settings = InspectorSettings.of(self.inspector)
        history = self.history_at(t)
        if self.source is not None:
            return InspectionJob.with_source(settings, t, self.source, history=history)
        return InspectionJob.with_windows(settings, t, self.read_window, history=history)

    def first_pass_batch(self, times: Sequence[datetime]) -> InspectionBatch:
        """The first pass of ``times`` as a batch for a worker
        (:func:`monitor.fleet.jobs.run_first_pass`): with one frame of their whole span
        read here, or with the source's config for a source a worker reaches itself."""
        from monitor.fleet.jobs import InspectionBatch, InspectorSettings

        settings = InspectorSettings.of(self.inspector)
        if self.source is not None:
            return InspectionBatch.with_source(settings, times, self.source, first_pass=True)
        return InspectionBatch.with_windows(settings, times, self.read_window, first_pass=True)

    def commit(self, t: datetime, result: dict[str, Any], windows: Windows | None = None
               ) -> str | None:
        """Advance the history and incident with ``result`` and record it: ledger, outbox,
        history value and incident in ONE transaction. Returns the incident event.
        ``windows``: the result's windows when this process built them (not when it came
        back from an executor), which the incident checks then need not build again."""
        if self.tracker is None:
            self.state.commit_inspection(t.timestamp(), result)
            return None
        # Operators' acks (``mmdwatch ack``, the MQTT command topic) wait in the state
        # database; the one naming the open incident resolves it with this result. The acks
        # the tracker used are marked applied in the result's transaction: one for an
        # incident that is no longer open (a duplicate, a late one) has nothing left to
        # do; one for a second open incident waits for the next result.
        acks = self.state.pending_acks()
        kept, event = self.tracker.observe(result, self.read_window, acks, windows)
        self.state.commit_inspection(t.timestamp(), result, statistic=kept,
                                     incident=self.tracker.saved_incidents(),
                                     applied_acks=self.tracker.applied_acks,
                                     memory=self.tracker.memory())
        return event

    def prune_history(self, last: float) -> None:
        """Drop calibration history older than its span behind ``last`` (epoch s)."""
        if self.inspector.calibrated:
            from datetime import timedelta

            span = self.inspector.decision.calibration.history + timedelta(days=1)
            self.state.prune_history(last - span.total_seconds())


class _Reached:
    """``due``'s check that the data covers an after window: always on the data clock (the
    clock is the data); on the wall clock by the data's own clock, until
    :data:`LATE_DATA_GRACE` past the window's end. The watermark is asked at most once."""

    _UNASKED = object()

    def __init__(self, site: SiteRunner, now: datetime) -> None:
        self.site = site
        self.now = now
        self.wm: Any = self._UNASKED

    def __call__(self, end: datetime) -> bool:
        if self.site.clock != "wall" or self.now >= end + LATE_DATA_GRACE:
            return True
        if self.wm is self._UNASKED:
            try:
                self.wm = self.site.watermark()
            except ConnectorError:  # the source is down: wait; after the grace the run
                self.wm = None      # itself meets the error and backs off
        return self.wm is not None and self.wm >= end - self.site.inspector.spec.resample


class SensorFilter(WindowSource):
    """A window source seen through one site's ``sensors`` list, for a source that cannot
    narrow its own queries (a file read in bulk); None keeps every sensor."""

    type = "filtered"

    def __init__(self, source: WindowSource, sensors: Sequence[str] | None) -> None:
        self.source = source
        self.sensors = None if sensors is None else list(sensors)

    def read_window(self, start: pd.Timestamp, end: pd.Timestamp, *,
                    resample: str | None = None, aggregate: str = "mean") -> pd.DataFrame:
        frame = self.source.read_window(start, end, resample=resample, aggregate=aggregate)
        if self.sensors is None:
            return frame
        return frame[frame["sensor"].isin(self.sensors)].reset_index(drop=True)

    def watermark(self) -> pd.Timestamp | None:
        return self.source.watermark()

    def first_time(self) -> pd.Timestamp | None:
        return self.source.first_time()

    def close(self) -> None:
        self.source.close()


def sensor_lists(sites: Sequence[Any]) -> dict[str, list[str] | None]:
    """``{site id: its sensors list or None}`` of the config's ``sites`` entries."""
    return {site.id: site.sensors for site in sites}
