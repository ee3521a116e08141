"""A backfill spread over an executor: many inspection times (and sites) at once, results
in time order, identical to the one-at-a-time backfill.

Each inspection is an :class:`~monitor.jobs.InspectionJob` run by
:func:`~monitor.jobs.run_job` on the executor (:mod:`monitor.executors`). What keeps the
results identical to ``mmdwatch backfill`` without ``--cluster``:

* **Engine rule** (retrospective profile): inspections are independent; consecutive times
  of a site travel together as one :class:`~monitor.jobs.InspectionBatch` (up to
  :data:`MAX_BATCH`, fewer when there are few times per worker), run by
  :func:`~monitor.jobs.run_batch` with their fits batched (``CVAggregation.fit_many``), and
  only the order of output is restored here.
* **Calibrated rule** (live profile): the p-value at t uses the history of the detection
  statistic at earlier times whose after window ended by t, *without* the firing ones, so
  it depends on earlier decisions. The job at t is submitted once every earlier result it
  can depend on (each t' with t' + A <= t) has come back and been observed by the site's
  :class:`~monitor.tracker.SiteTracker`, in time order; its history is then exactly
  ``tracker.history_at(t)``, as inline. Inspections inside one after window of each other
  run concurrently (16 per site for hourly inspections and A = 16h), and sites are
  independent of each other.
* Incidents are advanced by the tracker as results are observed, in time order, never on
  a worker.
* The calibration history before the first time is computed as
  :meth:`SiteTracker.backfill` does (one read of the whole span, sliced per time), with
  each time's statistic computed by :func:`~monitor.jobs.run_detect` on the executor.

Every submitted job yields its results at most once (a Dask worker lost mid-task: the
scheduler runs the task again elsewhere, up to its ``allowed-failures``); a result is
emitted once, at its place in time order. A job that still ends in ``KilledWorker`` (it
took its worker down every time: out of memory, a crash in native code) is not fatal: a
batch is split into one job per time, and a single inspection that kills its worker ends
as an ``error`` result naming the cause, so the rest of the backfill goes on.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Executor, Future, wait
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from monitor.jobs import (
    InspectionBatch,
    InspectionJob,
    InspectorSettings,
    killed_worker,
    run_batch,
    run_detect,
    run_job,
    worker_died_error,
)

if TYPE_CHECKING:
    from pydantic import BaseModel

    from monitor.inspection import Inspector, ReadWindow
    from monitor.tracker import SiteTracker

log = logging.getLogger(__name__)

__all__ = ["MAX_BATCH", "SiteBackfill", "backfill_history", "batch_size", "capacity",
           "run_backfill"]

OnResult = Callable[[dict[str, Any]], None]

#: Engine-rule inspections of one site fitted together (one InspectionBatch, one
#: ``fit_many``); small enough that results, and the progress bar, come every few seconds.
MAX_BATCH = 24


@dataclass
class SiteBackfill:
    """One site's part of a backfill.

    ``read_window``: the agent-side window reader (the job then carries the frame);
    ``source``: a window source's connector config that workers read themselves instead
    (InfluxDB); ``tracker``: the site's history and incident (calibrated rule), None under
    the engine rule.
    """

    inspector: Inspector
    times: list[datetime]
    read_window: ReadWindow
    source: BaseModel | None = None
    tracker: SiteTracker | None = None
    settings: InspectorSettings = field(init=False)

    def __post_init__(self) -> None:
        self.times = sorted(self.times)
        self.settings = InspectorSettings.of(self.inspector)

    def job(self, i: int) -> InspectionJob:
        """The job of the i-th time, with its history (taken now: call when it is ready)."""
        t = self.times[i]
        history = None if self.tracker is None else self.tracker.history_at(t)
        if self.source is not None:
            return InspectionJob.with_source(self.settings, t, self.source, history)
        return InspectionJob.with_windows(self.settings, t, self.read_window, history)

    def batch_job(self, first: int, stop: int) -> InspectionBatch:
        """The engine-rule times ``first .. stop - 1`` as one batch."""
        times = self.times[first:stop]
        if self.source is not None:
            return InspectionBatch.with_source(self.settings, times, self.source)
        return InspectionBatch.with_windows(self.settings, times, self.read_window)

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
    from monitor.executors import DaskExecutor, InlineExecutor, LocalExecutor

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


def _map_ordered(executor: Executor, fn: Callable[[Any], Any], jobs: Sequence[Any],
                 limit: int) -> list[Any]:
    """``[fn(job) for job in jobs]`` on the executor, at most ``limit`` in flight."""
    out: list[Any] = [None] * len(jobs)
    pending: dict[Future[Any], int] = {}
    nxt = 0
    while nxt < len(jobs) or pending:
        while nxt < len(jobs) and len(pending) < limit:
            pending[executor.submit(fn, jobs[nxt])] = nxt
            nxt += 1
        done, _ = wait(list(pending), return_when=FIRST_COMPLETED)
        for f in done:
            out[pending.pop(f)] = f.result()
    return out


def backfill_history(site: SiteBackfill, times: list[datetime], executor: Executor) -> int:
    """:meth:`SiteTracker.backfill` with the statistics computed on ``executor``: the
    values and their order in the history are the same. Returns how many were added."""
    if site.tracker is None:
        return 0

    def detect_many(ts: list[datetime], read: ReadWindow) -> list[float | None]:
        jobs = [InspectionJob.with_windows(site.settings, th, read) for th in ts]
        return _map_ordered(executor, run_detect, jobs, capacity(executor))

    return site.tracker.backfill(times, site.read_window, detect_many)


def run_backfill(sites: Sequence[SiteBackfill], executor: Executor, on_result: OnResult,
                 *, max_in_flight: int | None = None, batch: int | None = None) -> int:
    """Run every site's inspections on ``executor``; ``on_result(result)`` is called once
    per inspection, in time order (ties: in the order of ``sites``), after its site's
    tracker observed it (incident attached). ``batch``: times per engine-rule job (None:
    :func:`batch_size`; 1: one job per time). Returns the number of results.

    An exception from a job (a source a worker cannot read, a broken process pool) is
    raised here after the jobs in flight are cancelled; what was emitted stays emitted.
    ``KilledWorker`` is not raised: see the module's docstring.
    """
    limit = max_in_flight or capacity(executor)
    if batch is None:
        batch = batch_size(executor, sum(len(s.times) for s in sites if s.tracker is None))
    needs = [s.needs() for s in sites]
    units = [s.units(batch) for s in sites]
    done: list[dict[int, dict[str, Any]]] = [{} for _ in sites]  # results not yet observed
    observed: list[int] = [0] * len(sites)  # per site: results observed so far
    submitted: list[int] = [0] * len(sites)  # per site: units submitted so far
    retry: list[tuple[int, int, int]] = []  # (site, first, stop) split from killed batches
    order = sorted(((t, k, i) for k, s in enumerate(sites) for i, t in enumerate(s.times)),
                   key=lambda x: (x[0], x[1]))
    ready_out: list[dict[int, dict[str, Any]]] = [{} for _ in sites]  # observed, not emitted
    emitted = 0
    pending: dict[Future[Any], tuple[int, int, int]] = {}

    def submit(k: int, first: int, stop: int) -> None:
        site = sites[k]
        future = (executor.submit(run_job, site.job(first)) if site.tracker is not None
                  else executor.submit(run_batch, site.batch_job(first, stop)))
        pending[future] = (k, first, stop)

    def next_unit(k: int) -> tuple[int, int] | None:
        """Site k's next unit when its job can be built now."""
        if submitted[k] >= len(units[k]):
            return None
        first, stop = units[k][submitted[k]]
        return (first, stop) if observed[k] >= needs[k][first] else None

    def submit_ready() -> None:
        # time order across sites, so the earliest results (the ones output waits for)
        # are computed first; split-off retries before anything new
        while retry and len(pending) < limit:
            submit(*retry.pop(0))
        while len(pending) < limit:
            best: tuple[datetime, int] | None = None
            for k, s in enumerate(sites):
                unit = next_unit(k)
                if unit is not None and (best is None or s.times[unit[0]] < best[0]):
                    best = (s.times[unit[0]], k)
            if best is None:
                return
            k = best[1]
            submit(k, *units[k][submitted[k]])
            submitted[k] += 1

    def collect(future: Future[Any], k: int, first: int, stop: int) -> None:
        """Store a finished job's results (or what replaces them after KilledWorker)."""
        try:
            value = future.result()
        except Exception as exc:
            if not killed_worker(exc):
                raise
            if stop - first > 1:
                log.warning("a batch of %d inspections of %s killed its worker each time it "
                            "ran (%s); running them one by one", stop - first,
                            sites[k].inspector.site, exc)
                retry.extend((k, i, i + 1) for i in range(first, stop))
                return
            t = sites[k].times[first]
            log.error("the inspection of %s at %s killed its worker each time it ran "
                      "(%s); recorded as an error", sites[k].inspector.site, t, exc)
            done[k][first] = sites[k].inspector.failed(t, worker_died_error(exc))
            return
        results = value if isinstance(value, list) else [value]
        for i, result in zip(range(first, stop), results, strict=True):
            done[k][i] = result

    try:
        while emitted < len(order):
            submit_ready()
            if pending:
                finished, _ = wait(list(pending), return_when=FIRST_COMPLETED)
                for f in finished:
                    collect(f, *pending.pop(f))
            for k, s in enumerate(sites):  # observe each site's results in time order
                while observed[k] in done[k]:
                    result = done[k].pop(observed[k])
                    if s.tracker is not None:
                        s.tracker.observe(result)
                    ready_out[k][observed[k]] = result
                    observed[k] += 1
            while emitted < len(order):  # emit in global time order
                _, k, i = order[emitted]
                if i not in ready_out[k]:
                    break
                on_result(ready_out[k].pop(i))
                emitted += 1
            if not pending and not retry and emitted < len(order) and not any(
                    next_unit(k) is not None for k in range(len(sites))):
                raise RuntimeError("backfill stalled: no job ready and none in flight")
    except BaseException:
        for f in pending:
            f.cancel()
        raise
    return emitted
