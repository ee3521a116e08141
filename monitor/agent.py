"""The long-running agent: readings in, inspections on schedule, results out.

Everything it uses is built by :mod:`monitor.compose` and passed in. Inspections read
windows from ONE :class:`~connectors.base.WindowSource`, ``windows``: the source itself
(InfluxDB), or for a stream source the reading store that the stream fills. Threads:

* the source's own (a stream source calls :meth:`Agent.deliver` with batches, which are
  committed to the store before the call returns);
* one APScheduler job, ``tick``, every ``schedule.poll``: it runs every due inspection,
  oldest first within each site (a lock: no overlapping ticks). One site's inspections run
  one at a time, in this thread; with several sites (``sites:``), the due inspections of
  different sites run concurrently on the executor (``executor.workers``, a process pool
  or Dask: :mod:`monitor.fleet.executors`), each as a :class:`monitor.fleet.jobs.InspectionJob`. The
  ledger, history, incident and outbox are written here, in ONE transaction per result,
  only once it came back: a lost worker means the inspection runs again, with the same
  fingerprint;
* one delivery worker per sink (:mod:`monitor.storage.delivery`);
* one report worker, so drawing figures never delays delivery.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Executor, Future, ThreadPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from datetime import UTC, datetime, timedelta
from typing import Any

from connectors.base import ConnectorError, Reading, StreamSource, WindowSource
from connectors.timeutil import iso
from monitor.decision.tracker import SiteTracker
from monitor.fleet.executors import close_executor
from monitor.fleet.jobs import (
    WorkerDeaths,
    killed_worker,
    run_first_pass,
    worker_died_error,
)
from monitor.fleet.sites import SiteRouter, SiteRunner
from monitor.inspection import PREFIT_TIMES, Inspector, Outcome, prepare_many
from monitor.service.metrics import Metrics
from monitor.storage.delivery import Dispatcher
from monitor.storage.state import AgentState
from monitor.storage.store import ReadingStore

log = logging.getLogger(__name__)

Reporter = Callable[[Outcome], Any]

#: seconds without batched first passes on the executor after one killed its worker (its
#: times then go one job each, so that a time that kills its worker is found and recorded)
FIRST_PASS_PAUSE_S = 300.0


class Agent:
    """``sites`` are the site runners (one for a single-site config); each reads its
    windows from its own :class:`~connectors.base.WindowSource`. ``stream`` (a stream
    source) pushes readings into ``store``, the reading store those windows read; both are
    None for a window source. ``router`` assigns a stream's readings to sites (None: one
    site, readings stored as they come). ``executor`` builds the executor the inspections
    of different sites run on (None: here, one at a time). :mod:`monitor.compose` builds
    all of them."""

    def __init__(self, *, sites: Sequence[SiteRunner], stream: StreamSource | None = None,
                 store: ReadingStore | None = None, state: AgentState,
                 dispatcher: Dispatcher, metrics: Metrics,
                 poll: timedelta = timedelta(seconds=5),
                 retention: timedelta = timedelta(days=15),
                 reporter: Reporter | None = None,
                 closers: Sequence[Callable[[], Any]] = (),
                 services: Sequence[Any] = (), router: SiteRouter | None = None,
                 executor: Callable[[], Executor] | None = None, workers: int = 1,
                 gaps: Any = None) -> None:
        if (stream is None) != (store is None):
            raise ValueError("a stream source needs the store it fills, and only it does")
        if not sites:
            raise ValueError("an agent needs at least one site")
        self.sites = list(sites)
        self.stream = stream
        self.store = store
        self.state = state
        self.dispatcher = dispatcher
        self.metrics = metrics
        self.poll = poll
        self.retention = retention
        self.reporter = reporter
        self.router = router
        self.gaps = gaps  # monitor.service.gaps.GapWatch: sees each committed batch (None: off)
        self.workers = max(1, workers)
        self._executor_factory = executor
        self._executor: Executor | None = None
        self._closers = list(closers)
        self._services = list(services)  # objects with start()/stop(), e.g. the health server
        self._tick_lock = threading.Lock()
        self._stopping = threading.Event()
        self._scheduler: Any = None
        self._reports: ThreadPoolExecutor | None = None
        self._report_futures: list[Future[Any]] = []
        self._last_prune = 0.0
        self._started = False
        self._next_site = 0  # round robin over sites when workers are scarce
        # inspections (site index, time) whose worker process died under them
        self._deaths = WorkerDeaths()
        self._first_pass_paused_until = float("-inf")  # monotonic seconds
        for site in self.sites:
            site.backoff = max(1.0, self.poll.total_seconds())

    # -- the single-site view (a config with `site:`) ------------------------------------------
    @property
    def windows(self) -> WindowSource:
        return self.sites[0].windows

    @property
    def inspector(self) -> Inspector:
        return self.sites[0].inspector

    @property
    def tracker(self) -> SiteTracker | None:
        return self.sites[0].tracker

    def read_window(self, start: datetime, end: datetime) -> Any:
        return self.sites[0].read_window(start, end)

    def watermark(self) -> datetime | None:
        return self.sites[0].watermark()

    def clock_now(self) -> datetime | None:
        return self.sites[0].clock_now()

    def anchor(self) -> datetime | None:
        return self.sites[0].anchor()

    def run_inspection(self, t: datetime) -> dict[str, Any]:
        """Run the (first) site's inspection at ``t`` here and record it."""
        site = self.sites[0]
        outcome = site.run(t)
        return self._finish(site, t, outcome)

    # -- readings -----------------------------------------------------------------------------
    def deliver(self, batch: Sequence[Reading]) -> None:
        """Commit a batch from the source; returns only once it is in the store. With
        sites, each reading is first given to its site (unknown ones are dropped and
        counted: bad data never stops the agent)."""
        assert self.store is not None
        if self.router is not None:
            batch = self.router.route(batch)
        self.store.add(batch)
        if self.gaps is not None:
            self.gaps.observe(batch)

    def source_finished(self) -> bool:
        return self.stream is not None and self.stream.finished()

    # -- schedule -----------------------------------------------------------------------------
    def due(self, limit: int = 10_000) -> list[datetime]:
        """Inspection times not yet done whose after window is complete, oldest first (of
        every site: a time appears once per site due at it)."""
        if len(self.sites) == 1:
            return self.sites[0].due(limit)
        out: list[datetime] = []
        for site in self.sites:
            out += site.due(limit)
        return sorted(out)[:limit]

    def _any_due(self) -> bool:
        return any(site.due(limit=1) for site in self.sites)

    # -- inspections --------------------------------------------------------------------------
    def tick(self) -> int:
        """Run every due inspection of every site, oldest first within a site; return how
        many ran."""
        if not self._tick_lock.acquire(blocking=False):
            return 0  # one already running: no overlapping runs
        ran = 0
        try:
            health = self.stream.health() if self.stream is not None else {}
            if "connected" in health:
                self.metrics.set_source_connected(bool(health["connected"]))
            if "rejected" in health:
                self.metrics.set_source_rejected(health["rejected"])
            if self._executor_factory is None:
                ran = self._run_here()
            else:
                ran = self._run_on_executor()
            self._maybe_prune()
        except Exception:  # the daemon outlives any bug in one tick
            log.exception("scheduled tick failed; will retry at the next one")
        finally:
            self._tick_lock.release()
        return ran

    def _waiting(self, site: SiteRunner) -> bool:
        """The site's source was unreachable and its backoff has not passed."""
        return time.monotonic() < site.retry_at

    def _source_failed(self, site: SiteRunner, exc: ConnectorError) -> None:
        """Not an inspection result: nothing is recorded, the site's due inspection runs
        once the source answers again (exponential backoff up to 5 min)."""
        delay = self._backoff(site)
        self.metrics.set_source_connected(False)
        where = "" if len(self.sites) == 1 else f" for site {site.name}"
        log.warning("source unavailable, inspections%s wait (%s); retrying in %.0f s",
                    where, exc, delay)

    def _source_ok(self, site: SiteRunner) -> None:
        site.backoff = max(1.0, self.poll.total_seconds())
        if self.metrics.source_connected is False and self.stream is None:
            self.metrics.set_source_connected(True)

    @staticmethod
    def _backoff(site: SiteRunner) -> float:
        """The site waits ``site.backoff`` seconds, and the next wait doubles (5 min at
        most); a result that comes back resets it (:meth:`_source_ok`)."""
        delay = site.backoff
        site.retry_at = time.monotonic() + delay
        site.backoff = min(delay * 2, 300.0)
        return delay

    def _site_failed(self, site: SiteRunner, what: str) -> None:
        """One site's trouble (not its source's) never holds the others back: logged, and
        the site waits with exponential backoff while the others go on."""
        delay = self._backoff(site)
        log.exception("site %s: %s; retrying in %.0f s", site.name, what, delay)

    def _due(self, site: SiteRunner, limit: int = 1) -> list[datetime]:
        """The site's oldest due inspection times (at most ``limit``); empty when none is
        due or finding them failed (reported, and the site backs off)."""
        try:
            return site.due(limit=limit)
        except ConnectorError as exc:
            self._source_failed(site, exc)
        except Exception:  # noqa: BLE001 - logged with its traceback by _site_failed
            self._site_failed(site, "finding its due inspections failed")
        return []

    def _next_due(self, site: SiteRunner) -> datetime | None:
        """The site's oldest due inspection time, None when none is due or it failed."""
        pending = self._due(site)
        return pending[0] if pending else None

    def _first_pass_work(self) -> list[tuple[SiteRunner, list[datetime]]]:
        """The calibrated, not waiting sites with their due times (up to
        :data:`~monitor.inspection.PREFIT_TIMES` each), worth a batched first pass: empty
        when fewer than two times are due in all. A site whose due times cannot be found
        is left out; the inspection that runs next meets the trouble and reports it."""
        work: list[tuple[SiteRunner, list[datetime]]] = []
        for site in self.sites:
            if not site.inspector.calibrated or self._waiting(site):
                continue
            try:
                times = site.due(limit=PREFIT_TIMES)
            except Exception:  # noqa: BLE001, S112 - reported by the run that meets it
                continue
            if times and not self._missed(site, times[0]):
                work.append((site, times))
        return work if sum(len(times) for _, times in work) >= 2 else []

    def _prefit(self) -> bool:
        """The first pass of the calibrated sites' due inspections (the sites due at the
        same hour; an agent catching up after a restart or replaying on the data clock):
        their windows, level statistics and engine-part fits as one batched program
        (:func:`monitor.inspection.prepare_many`; the fits without their own p-value,
        which a firing result gets as it runs), decided one by one after. A single
        due time is fitted as it runs; anything that fails here is left to that run.
        False when the batched pass failed (the caller does not retry it this tick)."""
        work = self._first_pass_work()
        if not work:
            return True
        try:
            prepared = prepare_many([(site.inspector, times, site.read_window)
                                     for site, times in work], scope="decision")
        except Exception as exc:  # noqa: BLE001 - each time is then computed as it runs
            log.warning("batched first pass of %d due inspection(s) failed (%s); they run "
                        "one by one", sum(len(times) for _, times in work), exc)
            return False
        for (site, _), done in zip(work, prepared, strict=True):
            site.prepared = done
        return True

    def _run_here(self) -> int:
        """Every due inspection, in this thread, one at a time: each site's oldest first,
        the sites taking turns (their first pass batched: :meth:`_prefit`)."""
        try:
            return self._run_due()
        finally:
            for site in self.sites:
                site.prepared = {}

    def _run_due(self, *, prepared_only: bool = False) -> int:
        """The rounds of :meth:`_run_here`. Each round that finds every first pass used up
        batches the times due by then: readings that arrive in a burst while a tick runs
        (a gateway flushing its buffer, a replay) are caught up in batches too, not one
        fit at a time. ``prepared_only``: only the times of the sites' first passes (the
        executor's, :meth:`_first_pass_on_executor`), each site's in order until its next
        due time is not among them; nothing is fitted here."""
        ran = 0
        progress = True
        # False once a batched pass failed: this tick runs one by one
        batched = not prepared_only
        while progress and not self._stopping.is_set():
            progress = False
            if batched and not any(site.prepared for site in self.sites
                                   if not self._waiting(site)):
                batched = self._prefit()
            for site in self.sites:
                if self._stopping.is_set():
                    break
                if self._waiting(site) or (prepared_only and not site.prepared):
                    continue
                t = self._next_due(site)
                if t is None:
                    continue
                if prepared_only and t not in site.prepared:
                    site.prepared = {}  # the rest of this site's times go as jobs
                    if not self._missed(site, t):
                        site.first_pass_miss = t
                    continue
                try:
                    outcome = site.run(t)
                except ConnectorError as exc:
                    self._source_failed(site, exc)
                    continue
                except Exception:  # noqa: BLE001 - e.g. its history backfill failed
                    self._site_failed(site, f"its inspection at {iso(t)} failed")
                    continue
                self._finish(site, t, outcome)
                self._source_ok(site)
                ran += 1
                progress = True
        return ran

    def _executor_now(self) -> Executor:
        if self._executor is None:
            assert self._executor_factory is not None
            self._executor = self._executor_factory()
        return self._executor

    def _close_executor(self) -> None:
        executor, self._executor = self._executor, None
        if executor is None:
            return
        try:
            close_executor(executor)
        except Exception:
            log.exception("closing the executor failed")

    def _submit(self, busy: set[int], hold_backlogs: bool = False
                ) -> tuple[SiteRunner, datetime, Any, Future[Any]] | None:
        """The next site (round robin) that is free and has a due inspection: its job,
        submitted. None when no site has one (or no executor can take it now).
        ``hold_backlogs``: a calibrated site with two or more due times sends no job; it
        waits for the batched first pass that follows once nothing is in flight."""
        n = len(self.sites)
        for k in range(n):
            i = (self._next_site + k) % n
            site = self.sites[i]
            if i in busy or self._waiting(site):
                continue
            pending = self._due(site, limit=2)
            if not pending or (hold_backlogs and self._has_backlog(site, pending)):
                continue
            t = pending[0]
            try:
                job = site.job(t)  # reads the windows here for the agent's store
            except ConnectorError as exc:
                self._source_failed(site, exc)
                continue
            except Exception:  # noqa: BLE001 - logged with its traceback by _site_failed
                self._site_failed(site, "preparing its inspection failed")
                continue
            future = self._submit_job(job)
            if future is None:
                return None  # no executor now: every site waits for the next tick
            self._next_site = (i + 1) % n
            busy.add(i)
            return site, t, job, future
        return None

    @staticmethod
    def _missed(site: SiteRunner, t: datetime) -> bool:
        """Whether ``t``, the site's next due time, is at or before the time an executor's
        first pass could not give: that one goes as a job first (batching the site again
        before it would fit its later times for nothing)."""
        return site.first_pass_miss is not None and t <= site.first_pass_miss

    def _has_backlog(self, site: SiteRunner, pending: list[datetime]) -> bool:
        """Whether ``site`` is calibrated and its due times ``pending`` (its first two)
        are two that the next first pass can take: worth a batch rather than a job
        each."""
        return (site.inspector.calibrated and len(pending) >= 2
                and not self._missed(site, pending[0]))

    def _first_pass_allowed(self) -> bool:
        """No suspect job (a time that may kill its worker runs alone) and batching not
        paused after a first pass killed its worker."""
        return not self._deaths.suspects and time.monotonic() >= self._first_pass_paused_until

    def _submit_job(self, job: Any) -> Future[Any] | None:
        """Submit one job; a pool that broke while idle (a process died) is replaced once.
        None when no executor can take it now (logged; the tick ends, the next retries)."""
        from monitor.fleet.jobs import run_job

        for attempt in (1, 2):
            try:
                return self._executor_now().submit(run_job, job)
            except BrokenProcessPool as exc:
                log.error("the executor lost a worker process while idle (%s); starting a "
                          "fresh one", exc)
                self._close_executor()
                if attempt == 2:
                    return None
            except Exception:  # e.g. ExecutorUnavailable: the daemon goes on
                log.exception("no executor for the due inspections; retrying at the next "
                              "tick")
                self._close_executor()
                return None
        return None

    def _first_pass_on_executor(self) -> tuple[int, bool]:
        """The first pass of the calibrated sites' due times on the executor, then their
        decisions here, in time order; returns how many ran, and False when a batch
        failed (the tick sends no further one). The sites are dealt into at most
        ``workers`` batches (:func:`monitor.fleet.jobs.run_first_pass`), so that the
        sites due at the same hour, or an agent catching up, are fitted together (one
        ``fit_many`` per batch) rather than one job per time. Fewer than two due times
        in all, a suspect job, or a batch that fails: those times go as jobs, one at a
        time, as before (a batch that killed its worker turns batching off for
        :data:`FIRST_PASS_PAUSE_S`)."""
        if not self._first_pass_allowed():
            return 0, True
        work = self._first_pass_work()
        if not work:
            return 0, True
        groups = [work[k::self.workers] for k in range(min(self.workers, len(work)))]
        futures: dict[Future[Any], list[tuple[SiteRunner, list[datetime]]]] = {}
        ok = True
        for group in groups:
            try:
                batches = [site.first_pass_batch(times) for site, times in group]
                futures[self._executor_now().submit(run_first_pass, batches)] = group
            except Exception as exc:  # noqa: BLE001 - those sites' times go as jobs
                ok = False
                log.warning("batched first pass of %d site(s) not sent (%s); their "
                            "inspections run one by one", len(group), exc)
        pending = set(futures)
        while pending and not self._stopping.is_set():
            _, pending = wait(pending, timeout=self.poll.total_seconds())
        if self._stopping.is_set():
            for future in pending:
                future.cancel()
            return 0, ok
        for future, group in futures.items():
            try:
                prepared = future.result()
            except Exception as exc:  # noqa: BLE001 - those sites' times go as jobs
                ok = False
                died = isinstance(exc, BrokenProcessPool) or killed_worker(exc)
                if died:
                    self._close_executor()
                    self._first_pass_paused_until = time.monotonic() + FIRST_PASS_PAUSE_S
                log.warning("batched first pass of %d due inspection(s) failed (%s: %s); "
                            "they run one by one", sum(len(t) for _, t in group),
                            type(exc).__name__, exc)
                continue
            for (site, times), done in zip(group, prepared, strict=True):
                site.prepared = done
                if times[0] not in done:
                    # its times up to the first one the pass could give (incomplete
                    # windows at the data's start, no data at all) go as jobs, the site
                    # batched again after them
                    given = [t for t in times if t in done]
                    site.first_pass_miss = max(t for t in times if not given or t < given[0])
        try:
            return self._run_due(prepared_only=True), ok
        finally:
            for site in self.sites:
                site.prepared = {}

    def _run_on_executor(self) -> int:
        """The due inspections of different sites concurrently on the executor, at most
        ``workers`` at a time and one per site (a site's history and incident advance in
        time order); each result is recorded here as it comes back. The calibrated
        sites' due times are fitted in batches first (:meth:`_first_pass_on_executor`),
        and again whenever nothing is in flight: readings that arrive in a burst while the
        tick runs are caught up in batches too, the sites with a backlog sending no job
        while others are in flight."""
        ran = 0
        batched = True  # False once a batch failed: this tick sends jobs alone
        in_flight: dict[Future[Any], tuple[int, SiteRunner, datetime, Any]] = {}
        busy: set[int] = set()
        while True:
            if batched and not in_flight and not self._stopping.is_set():
                done_here, batched = self._first_pass_on_executor()
                ran += done_here
                if done_here:
                    continue  # what fell due meanwhile is batched next, before any job
            room = 1 if self._deaths.suspects else self.workers  # a suspect runs alone
            while len(in_flight) < room and not self._stopping.is_set():
                # While jobs are in flight, a site whose readings came in a burst waits
                # for them: once nothing is in flight its backlog goes as a first pass
                # (at the loop's top), not one job per time that keeps the pool busy.
                hold = batched and bool(in_flight) and self._first_pass_allowed()
                submitted = self._submit(busy, hold_backlogs=hold)
                if submitted is None:
                    break
                site, t, job, future = submitted
                in_flight[future] = (self.sites.index(site), site, t, job)
            if not in_flight:
                return ran
            if self._stopping.is_set():
                # Nothing of these was recorded: they run again (same fingerprints) after
                # the restart. Waiting on them could block a stop for good (a hung task, a
                # Dask scheduler without workers).
                for future in in_flight:
                    future.cancel()
                return ran
            done, _ = wait(list(in_flight), timeout=self.poll.total_seconds(),
                           return_when=FIRST_COMPLETED)
            alone = len(in_flight) == 1  # what dies now, died of itself
            for future in done:
                i, site, t, job = in_flight.pop(future)
                busy.discard(i)
                try:
                    result = future.result()
                except ConnectorError as exc:  # a worker could not read the source
                    self._source_failed(site, exc)
                    continue
                except BrokenProcessPool as exc:
                    # a pool process died: nothing was recorded, the inspection runs again
                    # (same fingerprint) on a fresh pool, after the site's backoff: an
                    # inspection that kills its worker every time must not respawn pools
                    # in a loop and take the other sites' inspections down with it
                    self._close_executor()
                    if self._worker_died(i, site, t, exc, alone):
                        ran += 1
                        continue
                    log.error("executor lost a worker process (%s); site %s at %s runs "
                              "again in %.0f s", exc, site.name, iso(t), site.backoff)
                    self._backoff(site)
                    continue
                except Exception as exc:  # noqa: BLE001 - the daemon outlives the executor
                    if killed_worker(exc) and self._worker_died(i, site, t, exc, alone):
                        ran += 1
                        continue
                    log.error("inspection of site %s at %s did not come back from the "
                              "executor (%s: %s); it runs again in %.0f s",
                              site.name, iso(t), type(exc).__name__, exc, site.backoff)
                    self._backoff(site)
                    continue
                self._cleared(i, t)
                self._finish(site, t, Outcome(result), job)
                self._source_ok(site)
                ran += 1

    def _worker_died(self, i: int, site: SiteRunner, t: datetime, exc: BaseException,
                     alone: bool) -> bool:
        """The worker process running site ``i``'s inspection at ``t`` died (``exc``).
        Returns True when the inspection is now recorded as an ``error`` result, once it
        is known to kill its worker (:class:`~monitor.fleet.jobs.WorkerDeaths`); else it runs
        again, alone. Without this an inspection that kills its worker every time would
        hold its site back for good, retried forever."""
        if not self._deaths.died((i, t), exc, alone=alone):
            return False
        self._cleared(i, t)
        log.error("the inspection of site %s at %s killed its worker process each time it "
                  "ran; recorded as an error so that the site goes on", site.name, iso(t))
        self._finish(site, t, Outcome(site.inspector.failed(t, worker_died_error(exc))))
        return True

    def _cleared(self, i: int, t: datetime) -> None:
        """Site ``i``'s inspection at ``t`` came back or was recorded: it and the site's
        earlier ones are suspects no more."""
        for key in [k for k in self._deaths.suspects if k[0] == i and k[1] <= t]:
            self._deaths.forget(key)

    def _finish(self, site: SiteRunner, t: datetime, outcome: Outcome,
                job: Any = None) -> dict[str, Any]:
        """Record one result (ledger + outbox + history + incident, one transaction), then
        hand it to the sinks, the metrics, the log and the report worker."""
        result = outcome.result
        event = site.commit(t, result, outcome.windows)
        if event is not None:
            log.warning("incident %s %s: %s", result["incident"]["id"], event,
                        ", ".join(result["incident"]["sensors"]))
        self.dispatcher.notify()
        self.metrics.inspection(result["status"], result["generator"]["runtime_s"],
                                result.get("error"))
        level = logging.WARNING if result["status"] == "error" else logging.INFO
        if site.site is None:
            log.log(level, "%s", result["summary"])
        else:
            log.log(level, "site %s: %s", site.site, result["summary"])
        if self.reporter is not None and self._reports is not None:
            self._report_futures = [f for f in self._report_futures if not f.done()]
            self._report_futures.append(self._reports.submit(self._report, outcome, site,
                                                             job))
        return result

    def _report(self, outcome: Outcome, site: SiteRunner | None = None,
                job: Any = None) -> None:
        try:
            assert self.reporter is not None
            if outcome.windows is None and job is not None and site is not None \
                    and job.frame is not None \
                    and outcome.result.get("status") not in ("error", "incomplete"):
                # ran on a worker: the figures' windows again from the frame it was sent
                from monitor.windows import build_windows

                _, t_utc, _ = site.inspector.spec.bounds(job.inspection_time)
                outcome = Outcome(outcome.result,
                                  build_windows(job.frame, t_utc, site.inspector.spec))
            self.reporter(outcome)
        except Exception:  # a report never stops the agent
            log.exception("report for %s failed", outcome.result.get("inspection_time"))

    def _maybe_prune(self) -> None:
        if time.monotonic() - self._last_prune < 60:
            return
        self._last_prune = time.monotonic()
        for site in self.sites:
            last = site.state.last_done()
            if last is not None:  # history older than its span
                site.prune_history(last)
        if self.store is None:
            return
        if self.router is None or not self.router.qualify:
            self._prune(self.sites, self.store.last_time_s(), None)
            return
        for site in self.sites:  # each site's readings behind its own newest
            wm = site.windows.watermark()
            if wm is not None:
                self._prune([site], wm.timestamp(), site.site)
        newest = self.store.last_time_s()
        if newest is not None:  # sites no longer configured: behind the newest of all
            removed = self.store.prune_others(newest - self.retention.total_seconds(),
                                              [s.site for s in self.sites if s.site])
            if removed:
                log.info("store: dropped %d old readings of sites no longer configured",
                         removed)

    def _prune(self, sites: list[SiteRunner], newest: float | None, key: str | None) -> None:
        assert self.store is not None
        if newest is None:
            return
        horizon = newest - self.retention.total_seconds()
        for site in sites:  # never drop what a pending inspection still needs
            pending = site.due(limit=1)
            if pending:
                horizon = min(horizon, (pending[0] - site.inspector.spec.before).timestamp())
        removed = self.store.prune(horizon, site=key)
        if removed:
            log.info("store: dropped %d readings%s older than %s", removed,
                     "" if key is None else f" of site {key}",
                     iso(datetime.fromtimestamp(horizon, UTC)))

    # -- lifecycle ----------------------------------------------------------------------------
    def start(self) -> None:
        from apscheduler.schedulers.background import BackgroundScheduler
        from apscheduler.triggers.interval import IntervalTrigger

        logging.getLogger("apscheduler").setLevel(logging.WARNING)
        self._reports = ThreadPoolExecutor(max_workers=1, thread_name_prefix="report")
        for service in self._services:
            service.start()
        self.dispatcher.start()
        if self.stream is not None:
            self.stream.start(self.deliver)
        self._scheduler = BackgroundScheduler(timezone=UTC)
        self._scheduler.add_job(self.tick, IntervalTrigger(seconds=self.poll.total_seconds()),
                                # _tick_lock already forbids overlap; 2 instances lets a
                                # wake-up during a long tick return quietly, not warn
                                id="tick", max_instances=2, coalesce=True,
                                next_run_time=datetime.now(UTC), misfire_grace_time=None)
        self._scheduler.start()
        self._started = True
        clocks = sorted({site.clock for site in self.sites})
        log.info("agent started (clock: %s, windows from %s%s)", ", ".join(clocks),
                 "the reading store" if self.stream is not None else "the source",
                 "" if len(self.sites) == 1 else f"; {len(self.sites)} sites, up to "
                 f"{self.workers} inspections at a time")

    def idle(self) -> bool:
        """Nothing left to do right now: replay finished, nothing due, outbox empty."""
        if self.stream is not None and not self.stream.finished():
            return False
        if self._tick_lock.locked() or self._any_due():
            return False
        if any(not f.done() for f in self._report_futures):
            return False
        return self.state.outbox_size() == 0

    def wait_idle(self, timeout: float, poll: float = 0.1) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not self._stopping.is_set():
            if self.idle():
                return True
            time.sleep(poll)
        return self.idle()

    def wake(self) -> None:
        """Check for due work now rather than at the next poll."""
        if self._scheduler is not None:
            self._scheduler.modify_job("tick", next_run_time=datetime.now(UTC))

    def run_forever(self, stop: threading.Event) -> None:
        self.start()
        try:
            while not stop.wait(0.5):
                pass
        finally:
            self.stop()

    def stop(self, timeout: float = 10.0) -> None:
        """Graceful stop: the running inspections finish and are recorded, readings already
        received are committed, queued results stay in the outbox for the next start."""
        if self._stopping.is_set():
            return
        self._stopping.set()
        log.info("stopping")
        if self.stream is not None:
            try:
                self.stream.stop()
            except Exception:
                log.exception("source stop failed")
        if self._scheduler is not None:
            self._scheduler.shutdown(wait=True)
        self._close_executor()
        if self._started:
            self.dispatcher.drain(timeout=min(timeout, 3.0))
            self.dispatcher.stop(timeout=timeout)
        if self._reports is not None:
            self._reports.shutdown(wait=True, cancel_futures=False)
        for service in self._services:
            try:
                service.stop()
            except Exception:
                log.exception("service stop failed")
        for close in self._closers:
            try:
                close()
            except Exception:
                log.exception("close failed")
        log.info("stopped")
