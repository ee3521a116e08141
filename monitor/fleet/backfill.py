"""A backfill spread over an executor: many inspection times (and sites) at once, results
in time order, identical to the one-at-a-time backfill.

The work travels as jobs of :mod:`monitor.fleet.jobs` run on the executor
(:mod:`monitor.fleet.executors`). What keeps the results identical to ``mmdwatch
backfill`` without ``--cluster``:

* **Engine rule** (retrospective profile): inspections are independent; consecutive times
  of a site travel together as one :class:`~monitor.fleet.jobs.InspectionBatch` (up to
  :data:`MAX_BATCH`, fewer when there are few times per worker), run by
  :func:`~monitor.fleet.jobs.run_batch` with their fits batched (``CVAggregation.fit_many``), and
  only the order of output is restored here.
* **Calibrated rule** (live profile): the p-value at t uses the history of the detection
  statistic at earlier times whose after window ended by t, *without* the firing ones, so
  it depends on earlier decisions. In two passes, as inline: the first pass of a site's
  next :data:`~monitor.inspection.PREFIT_TIMES` times (windows, detections, engine-part
  fits; none of it depends on a decision) goes to the executor as
  :func:`~monitor.fleet.jobs.run_first_pass` batches of :func:`batch_size` times, each one
  ``fit_many``. The decision at t is taken here once every earlier result it can depend on
  (each t' with t' + A <= t) has been observed by the site's
  :class:`~monitor.decision.tracker.SiteTracker`, in time order; its history is then
  exactly ``tracker.history_at(t)``, as inline. A time whose first pass was lost with its
  worker travels as one ``run_job``, submitted at that same point (16 per site at once for
  hourly inspections and A = 16h); sites are independent of each other.
* Incidents are advanced by the tracker as results are observed, in time order, never on
  a worker.
* The agent's own decisions (:func:`plan_backfill`): under the calibrated rule a backfill
  replays the agent's schedule from the agent's first inspection time (its anchor) up to
  the last time asked for; the times before ``--start``, and the schedule's times between
  the ones asked for, are inspected and observed *silently* (their results are not
  written), so the history and the incident at each written time are the ones the agent
  had there. A time asked for that is not on the agent's schedule (``--every`` off its
  grid) is a *probe*: inspected with the history the agent had then, and its incident block
  is the one an observation would give, on a copy of the tracker: it never changes the
  agent's state.
* The calibration history before the first time is computed as
  :meth:`SiteTracker.backfill` does (one read of the whole span, sliced per time), with
  the statistics computed by :func:`~monitor.fleet.jobs.run_detect_many` on the executor,
  :func:`batch_size` times per job (their engine fits one ``fit_many``).
  A statistic whose worker keeps dying is left out of the history (as one whose windows
  cannot give it), under the rule below.

Every submitted job yields its results at most once (a Dask worker lost mid-task: the
scheduler runs the task again elsewhere, up to its ``allowed-failures``); a result is
emitted once, at its place in time order. A job whose worker keeps dying (out of memory, a
crash in native code) is not fatal:

* Dask gives up on it with ``KilledWorker``, having run it on other workers: a batch is
  sent again one time per job, and a single time is recorded as an ``error`` result naming
  the cause.
* A local process pool that loses a process breaks, taking every job in it (given a
  :class:`~monitor.fleet.executors.RenewableExecutor`, a fresh pool is started and used from
  then on). Those jobs run again one at a time, so that the next
  death names its cause: a batch that dies alone is split into single times, and a single
  time that has killed its process :data:`~monitor.fleet.jobs.WORKER_DEATHS` times alone is
  recorded as an ``error`` result. The rest of the backfill goes on.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Executor, Future, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from monitor.fleet.executors import DaskExecutor, InlineExecutor, LocalExecutor, RenewableExecutor
from monitor.fleet.jobs import (
    InspectionBatch,
    InspectionJob,
    InspectorSettings,
    WorkerDeaths,
    killed_worker,
    run_batch,
    run_detect_many,
    run_first_pass,
    run_job,
    worker_died_error,
)

if TYPE_CHECKING:
    from pydantic import BaseModel

    from monitor.decision.calibrated_rule import Prepared
    from monitor.decision.tracker import SiteTracker
    from monitor.inspection import Inspector
    from monitor.schedule import InspectionPlan
    from monitor.storage.state import HistoryValue
    from monitor.windows import ReadWindow, Windows

log = logging.getLogger(__name__)

__all__ = ["MAX_BATCH", "BackfillPlan", "SiteBackfill", "backfill_history", "batch_size",
           "capacity", "observe", "plan_backfill", "run_backfill"]

OnResult = Callable[[dict[str, Any]], None]

#: Engine-rule inspections of one site fitted together (one InspectionBatch, one
#: ``fit_many``); small enough that results, and the progress bar, come every few seconds.
MAX_BATCH = 24


@dataclass(frozen=True)
class BackfillPlan:
    """The times one site's backfill inspects: ``times`` in order; ``emit``, the ones
    written (the rest are the agent's silent times); ``probes``, the ones not on the
    agent's schedule (inspected with the agent's state, never observed into it)."""

    times: list[datetime]
    emit: frozenset[datetime]
    probes: frozenset[datetime] = frozenset()

    @property
    def silent(self) -> int:
        return len(self.times) - len(self.emit)


def plan_backfill(outputs: Sequence[datetime], schedule: InspectionPlan | None,
                  anchor: datetime | None) -> BackfillPlan:
    """What a backfill inspects to write ``outputs`` (the times asked for, in order).

    ``schedule`` (the agent's, calibrated rule; None under the engine rule: the outputs
    alone, inspections being independent) and ``anchor`` (the agent's first inspection
    time; None when it cannot be known: the agent is taken to start at the first output):
    every schedule time from the first one at or after the anchor up to the last output
    is inspected and observed, as the agent did. Outputs before the agent's first time
    are inspected and observed as by an agent that started there; outputs off the
    schedule are probes.
    """
    outputs = sorted(outputs)
    if schedule is None or not outputs:
        return BackfillPlan(list(outputs), frozenset(outputs))
    first = next(iter(schedule.times(outputs[0] if anchor is None else anchor)), None)
    last = outputs[-1]
    agent = set() if first is None or first > last else set(schedule.between(first, last))
    observed = agent | {t for t in outputs if first is None or t < first}
    probes = frozenset(t for t in outputs if t not in observed)
    return BackfillPlan(sorted(observed | probes), frozenset(outputs), probes)


def observe(tracker: SiteTracker, result: dict[str, Any], read_window: ReadWindow,
            probe: bool = False, windows: Windows | None = None) -> None:
    """``tracker.observe(result)``; a probe (a time off the agent's schedule) is observed
    on a copy, so its result gets the incident block the agent would have given it while
    the agent's history and incident stay as they were. ``windows``: the result's own
    windows, when this process built them (:meth:`SiteTracker.observe`)."""
    if probe:
        import copy

        memo = {id(tracker.inspector): tracker.inspector, id(tracker.incidents): tracker.incidents}
        tracker = copy.deepcopy(tracker, memo)
    tracker.observe(result, read_window, windows=windows)


@dataclass
class SiteBackfill:
    """One site's part of a backfill.

    ``read_window``: the agent-side window reader (the job then carries the frame);
    ``source``: a window source's connector config that workers read themselves instead
    (InfluxDB); ``tracker``: the site's history and incident (calibrated rule), None under
    the engine rule. ``emit``: the times whose results are written (None: all; the others
    are observed silently); ``probes``: times observed on a copy of the tracker
    (:class:`BackfillPlan`).
    """

    inspector: Inspector
    times: list[datetime]
    read_window: ReadWindow
    source: BaseModel | None = None
    tracker: SiteTracker | None = None
    emit: frozenset[datetime] | None = None
    probes: frozenset[datetime] = frozenset()
    settings: InspectorSettings = field(init=False)

    def __post_init__(self) -> None:
        self.times = sorted(self.times)
        self.settings = InspectorSettings.of(self.inspector)

    def emits(self, i: int) -> bool:
        """Whether the result of the i-th time is written."""
        return self.emit is None or self.times[i] in self.emit

    @property
    def n_emitted(self) -> int:
        return sum(self.emits(i) for i in range(len(self.times)))

    def job(self, i: int) -> InspectionJob:
        """The job of the i-th time, with its history (taken now: call when it is ready)."""
        t = self.times[i]
        history = None if self.tracker is None else self.tracker.history_at(t)
        if self.source is not None:
            return InspectionJob.with_source(self.settings, t, self.source, history)
        return InspectionJob.with_windows(self.settings, t, self.read_window, history)

    def batch_job(self, first: int, stop: int, *, first_pass: bool = False
                  ) -> InspectionBatch:
        """The times ``first .. stop - 1`` as one batch: engine-rule inspections, or
        (``first_pass``) the first pass of calibrated-rule ones."""
        times = self.times[first:stop]
        if self.source is not None:
            return InspectionBatch.with_source(self.settings, times, self.source,
                                               first_pass=first_pass)
        return InspectionBatch.with_windows(self.settings, times, self.read_window,
                                            first_pass=first_pass)

    def units(self, batch: int) -> list[tuple[int, int]]:
        """The ``(first, stop)`` index ranges of times that travel as one job: runs of up
        to ``batch`` consecutive times under the engine rule, single times under the
        calibrated rule (each needs the results before it)."""
        size = 1 if self.tracker is not None else max(1, batch)
        return [(i, min(i + size, len(self.times))) for i in range(0, len(self.times), size)]

    def needs(self) -> list[int]:
        """For each time, how many earlier results must be observed before its job can be
        built: those whose after window ended by it (calibrated rule), else none."""
        if self.tracker is None:
            return [0] * len(self.times)
        after = self.inspector.spec.after
        out, j = [], 0
        for t in self.times:
            while j < len(self.times) and self.times[j] + after <= t:
                j += 1
            out.append(j)
        return out


def capacity(executor: Executor) -> int:
    """How many jobs to keep in flight: four per worker (at least 4), so workers never
    wait on the reads and the submissions of the agent."""
    if isinstance(executor, RenewableExecutor):
        executor = executor.current
    if isinstance(executor, InlineExecutor):
        return 1
    if isinstance(executor, LocalExecutor):
        return max(4, 4 * executor.workers)
    if isinstance(executor, DaskExecutor):
        return max(4, 4 * executor.n_workers())
    return 8


def batch_size(executor: Executor, n_times: int) -> int:
    """Times per engine-rule job: at most :data:`MAX_BATCH`, and few enough that there are
    about eight jobs per worker (twice the executor's :func:`capacity`), so that workers
    finish together: the last jobs' imbalance would cost more than batching saves."""
    return max(1, min(MAX_BATCH, n_times // (2 * capacity(executor))))


def _can_renew(executor: Executor) -> bool:
    """Whether a broken process pool of ``executor`` can be replaced by a fresh one."""
    return isinstance(executor, RenewableExecutor) and executor.renewable


def _detect_all(executor: Executor, settings: InspectorSettings, times: Sequence[datetime],
                read: ReadWindow, limit: int, batch: int) -> list[HistoryValue | None]:
    """``inspector.detect_many(times, read)`` on the executor: ``batch`` times per job
    (:func:`~monitor.fleet.jobs.run_detect_many`, their engine fits one ``fit_many``), at
    most ``limit`` jobs in flight. A job whose worker dies is handled as
    :func:`run_backfill` handles a batch: one that caused it (it died alone, or Dask gave
    up on it) is sent again one time per job; a single time that keeps killing its worker
    gives None (:class:`~monitor.fleet.jobs.WorkerDeaths`; a broken pool of a
    :class:`RenewableExecutor` is renewed), as a statistic that cannot be computed. Any
    other exception is raised."""
    out: list[HistoryValue | None] = [None] * len(times)
    size = max(1, batch)
    units = [tuple(range(a, min(a + size, len(times)))) for a in range(0, len(times), size)]
    todo = units[::-1]  # popped from the end: in order, retries first
    pending: dict[Future[Any], tuple[int, ...]] = {}
    deaths = WorkerDeaths()
    while todo or pending:
        room = 1 if deaths.suspects else limit  # a suspect runs alone: its death is its own
        while todo and len(pending) < room:
            unit = todo.pop()
            job = InspectionBatch.with_windows(settings, [times[i] for i in unit], read,
                                               first_pass=True)
            pending[executor.submit(run_detect_many, job)] = unit
        finished, _ = wait(list(pending), return_when=FIRST_COMPLETED)
        if any(isinstance(f.exception(), BrokenProcessPool) for f in finished):
            finished, _ = wait(list(pending))  # the pool took every job in it
        dead: list[tuple[tuple[int, ...], BaseException]] = []
        for future in finished:
            unit = pending.pop(future)
            exc = future.exception()
            if exc is None:
                deaths.forget(unit)
                for i, value in zip(unit, future.result(), strict=True):
                    out[i] = value
            elif killed_worker(exc) or (isinstance(exc, BrokenProcessPool)
                                        and _can_renew(executor)):
                dead.append((unit, exc))
            else:
                for other in pending:
                    other.cancel()
                raise exc
        if any(isinstance(exc, BrokenProcessPool) for _, exc in dead):
            assert isinstance(executor, RenewableExecutor)
            log.error("the process pool lost a process with %d calibration job(s) in it; a "
                      "fresh pool runs them again", len(dead))
            executor.renew()
        for unit, exc in dead:
            alone = len(dead) == 1
            if len(unit) > 1 and (alone or killed_worker(exc)):
                log.warning("a batch of %d calibration statistics killed its worker (%s); "
                            "computing them one by one", len(unit), exc)
                singles = [(i,) for i in unit]
                deaths.split(unit, singles, exc)
                todo.extend(singles[::-1])
            elif deaths.died(unit, exc, alone=alone):
                log.error("the calibration statistic of %s at %s killed its worker each "
                          "time it ran (%s); left out of the history", settings.site,
                          times[unit[0]], exc)
            else:
                todo.append(unit)
    return out


def backfill_history(site: SiteBackfill, times: list[datetime], executor: Executor) -> int:
    """:meth:`SiteTracker.backfill` with the statistics computed on ``executor``, in
    batches of :func:`batch_size` times (each batch's engine fits one ``fit_many``): the
    values and their order in the history are the same, but for a statistic whose worker
    keeps dying, which is left out. Returns how many were added."""
    if site.tracker is None:
        return 0

    def detect_many(ts: list[datetime], read: ReadWindow) -> list[HistoryValue | None]:
        return _detect_all(executor, site.settings, ts, read, capacity(executor),
                           batch_size(executor, len(ts)))

    return site.tracker.backfill(times, site.read_window, detect_many)


Unit = tuple[int, int, int]  # (site index, index of its first time, one past its last)


def run_backfill(sites: Sequence[SiteBackfill], executor: Executor, on_result: OnResult,
                 *, max_in_flight: int | None = None, batch: int | None = None) -> int:
    """Run every site's inspections on ``executor``; ``on_result(result)`` is called once
    per written inspection (:attr:`SiteBackfill.emit`), in time order (ties: in the order
    of ``sites``), after its site's tracker observed it (incident attached). ``batch``: times per engine-rule job (None:
    :func:`batch_size`; 1: one job per time). A :class:`RenewableExecutor` (the one
    :func:`backfill_history` ran on) replaces a local process pool that breaks (a process
    died); its caller closes it. Returns the number of results.

    An exception from a job (a source a worker cannot read; a broken process pool that
    cannot be renewed) is raised here after the jobs in flight are cancelled; what was
    emitted stays emitted. A job whose worker died (Dask's ``KilledWorker``, a broken pool
    that is renewed) is run again, alone, and ends as an ``error`` result if it keeps
    killing its worker: see the module's docstring.
    """
    return _Backfill(sites, executor, on_result, max_in_flight, batch).run()


class _Backfill:
    """The state of one :func:`run_backfill`: units of work (one job each), the results
    not yet observed or emitted, and the jobs whose worker died."""

    def __init__(self, sites: Sequence[SiteBackfill], executor: Executor,
                 on_result: OnResult, max_in_flight: int | None, batch: int | None) -> None:
        self.sites = sites
        self.executor = executor
        self.on_result = on_result
        self.limit = max_in_flight or capacity(executor)
        if batch is None:
            batch = batch_size(executor, sum(len(s.times) for s in sites if s.tracker is None))
        self.needs = [s.needs() for s in sites]
        self.units = [s.units(batch) for s in sites]
        self.done: list[dict[int, dict[str, Any]]] = [{} for _ in sites]  # not yet observed
        self.observed = [0] * len(sites)  # per site: results observed so far
        self.submitted = [0] * len(sites)  # per site: units submitted so far
        self.retry: list[Unit] = []  # units to send again (first)
        self.deaths = WorkerDeaths()  # units whose worker died; suspects run alone
        self.order = sorted(((t, k, i) for k, s in enumerate(sites)
                             for i, t in enumerate(s.times) if s.emits(i)),
                            key=lambda x: (x[0], x[1]))
        self.ready_out: list[dict[int, dict[str, Any]]] = [{} for _ in sites]  # not emitted
        self.emitted = 0
        self.pending: dict[Future[Any], Unit] = {}
        # calibrated rule: the first pass of each site's times (windows, detections and
        # engine fits, batched on the executor), taken a chunk ahead of the decisions
        self.prepared: list[dict[int, Prepared]] = [{} for _ in sites]
        self.prefit_to = [0] * len(sites)  # per site: times whose first pass was tried
        # the windows of the times decided here, for the tracker's incident checks (a
        # result from a worker has its windows built again)
        self.windows: list[dict[int, Windows]] = [{} for _ in sites]

    def run(self) -> int:
        try:
            while self.emitted < len(self.order):
                self._submit_ready()
                if self.pending:
                    finished, _ = wait(list(self.pending), return_when=FIRST_COMPLETED)
                    broken = []
                    for future in finished:
                        unit = self.pending.pop(future)
                        if not self._collect(future, unit):
                            broken.append(unit)
                    if broken:
                        self._pool_broke(broken)
                self._observe_and_emit()
                if not self.pending and not self.retry and self.emitted < len(self.order) \
                        and all(self._next_unit(k) is None for k in range(len(self.sites))):
                    raise RuntimeError("backfill stalled: no job ready and none in flight")
        except BaseException:
            for f in self.pending:
                f.cancel()
            raise
        return self.emitted

    # -- sending -------------------------------------------------------------------------
    def _submit(self, unit: Unit) -> None:
        k, first, stop = unit
        site = self.sites[k]
        if site.tracker is None:
            self.pending[self.executor.submit(run_batch, site.batch_job(first, stop))] = unit
            return
        if first >= self.prefit_to[k]:
            self._first_pass(k, first)
        prepared = self.prepared[k].pop(first, None)
        if prepared is None:  # its first pass's worker died: the time travels alone
            self.pending[self.executor.submit(run_job, site.job(first))] = unit
            return
        # decided here, in order, on the first pass's windows and fits (what run_job on
        # a worker would compute for this one time, batched)
        t = site.times[first]
        outcome = site.inspector.run(t, site.read_window, site.tracker.history_at(t),
                                     prepared=prepared)
        if outcome.windows is not None:
            self.windows[k][first] = outcome.windows
        done: Future[Any] = Future()
        done.set_result(outcome.result)
        self.pending[done] = unit

    def _first_pass(self, k: int, first: int) -> None:
        """The first pass of site k's next :data:`~monitor.inspection.PREFIT_TIMES` times
        from ``first``, on the executor in jobs of :func:`batch_size` times
        (:func:`~monitor.fleet.jobs.run_first_pass`), waited for here. A job whose worker
        dies leaves its times to one :func:`~monitor.fleet.jobs.run_job` each (the rules
        above then apply to them); any other exception is raised."""
        from monitor.inspection import PREFIT_TIMES

        site = self.sites[k]
        stop = min(first + PREFIT_TIMES, len(site.times))
        self.prefit_to[k] = stop
        size = batch_size(self.executor, stop - first)
        jobs: dict[Future[Any], range] = {}
        for a in range(first, stop, size):
            b = min(a + size, stop)
            batch = site.batch_job(a, b, first_pass=True)
            jobs[self.executor.submit(run_first_pass, [batch])] = range(a, b)
        lost = 0
        broke = False
        for future in wait(list(jobs))[0]:
            exc = future.exception()
            if exc is None:
                by_time = future.result()[0]  # the times whose windows gave a detection
                for i in jobs[future]:
                    if site.times[i] in by_time:
                        self.prepared[k][i] = by_time[site.times[i]]
            elif isinstance(exc, BrokenProcessPool) and _can_renew(self.executor):
                broke, lost = True, lost + len(jobs[future])
            elif killed_worker(exc):
                lost += len(jobs[future])
            else:
                raise exc
        if broke:
            assert isinstance(self.executor, RenewableExecutor)
            self.executor.renew()
        if lost:
            log.warning("the first pass of %d inspection(s) of %s lost its worker; they run "
                        "one job each", lost, site.inspector.site)

    def _next_unit(self, k: int) -> tuple[int, int] | None:
        """Site k's next unit when its job can be built now."""
        if self.submitted[k] >= len(self.units[k]):
            return None
        first, stop = self.units[k][self.submitted[k]]
        return (first, stop) if self.observed[k] >= self.needs[k][first] else None

    def _submit_ready(self) -> None:
        # retries first; while a suspect is about, one job at a time, so that a death
        # names its cause; else in time order across sites, so the earliest results (the
        # ones output waits for) are computed first
        room = 1 if self.deaths.suspects else self.limit
        while self.retry and len(self.pending) < room:
            self._submit(self.retry.pop(0))
        while len(self.pending) < room:
            best: tuple[datetime, int] | None = None
            for k, s in enumerate(self.sites):
                unit = self._next_unit(k)
                if unit is not None and (best is None or s.times[unit[0]] < best[0]):
                    best = (s.times[unit[0]], k)
            if best is None:
                return
            k = best[1]
            self._submit((k, *self.units[k][self.submitted[k]]))
            self.submitted[k] += 1

    # -- receiving -----------------------------------------------------------------------
    def _collect(self, future: Future[Any], unit: Unit) -> bool:
        """Store a finished job's results (or handle its worker's death); False when the
        process pool broke under it (handled by :meth:`_pool_broke`)."""
        k, first, stop = unit
        try:
            value = future.result()
        except BrokenProcessPool:
            if not _can_renew(self.executor):
                raise
            return False
        except Exception as exc:
            if not killed_worker(exc):
                raise
            # Dask already ran it on other workers: its cause is known
            self._died(unit, exc, certain=True)
            return True
        self.deaths.forget(unit)
        results = value if isinstance(value, list) else [value]
        for i, result in zip(range(first, stop), results, strict=True):
            self.done[k][i] = result
        return True

    def _pool_broke(self, broken: list[Unit]) -> None:
        """A local pool lost a process: every job in it died with it. Collect the others
        (finished or dead), start a fresh pool, and decide on each dead job."""
        rest, _ = wait(list(self.pending))
        for future in rest:
            unit = self.pending.pop(future)
            if not self._collect(future, unit):
                broken.append(unit)
        assert isinstance(self.executor, RenewableExecutor)
        self.executor.renew()
        log.error("the process pool lost a process with %d job(s) in it; a fresh pool runs "
                  "them again", len(broken))
        for unit in broken:  # alone, the one job in the pool was the cause
            self._died(unit, BrokenProcessPool("a pool process died"),
                       certain=len(broken) == 1)

    def _died(self, unit: Unit, exc: BaseException, *, certain: bool) -> None:
        """``unit``'s worker died running it (``certain``: it was the cause). A batch that
        caused it is sent again one time per job; anything else runs again, alone, until
        it is known to kill its worker (:class:`~monitor.fleet.jobs.WorkerDeaths`), and is then
        recorded as an ``error`` result."""
        k, first, stop = unit
        site = self.sites[k]
        if stop - first > 1 and (certain or killed_worker(exc)):
            log.warning("a batch of %d inspections of %s killed its worker (%s); running "
                        "them one by one", stop - first, site.inspector.site, exc)
            singles = [(k, i, i + 1) for i in range(first, stop)]
            self.deaths.split(unit, singles, exc)
            self.retry.extend(singles)
            return
        if not self.deaths.died(unit, exc, alone=certain):
            self.retry.append(unit)
            return
        t = site.times[first]
        log.error("the inspection of %s at %s killed its worker each time it ran (%s); "
                  "recorded as an error", site.inspector.site, t, exc)
        self.done[k][first] = site.inspector.failed(t, worker_died_error(exc))

    def _observe_and_emit(self) -> None:
        for k, s in enumerate(self.sites):  # observe each site's results in time order
            while self.observed[k] in self.done[k]:
                i = self.observed[k]
                result = self.done[k].pop(i)
                if s.tracker is not None:
                    observe(s.tracker, result, s.read_window, s.times[i] in s.probes,
                            self.windows[k].pop(i, None))
                if s.emits(i):
                    self.ready_out[k][i] = result
                self.observed[k] += 1
        while self.emitted < len(self.order):  # emit in global time order
            _, k, i = self.order[self.emitted]
            if i not in self.ready_out[k]:
                break
            self.on_result(self.ready_out[k].pop(i))
            self.emitted += 1

