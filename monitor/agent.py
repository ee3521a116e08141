"""The long-running agent: readings in, inspections on schedule, results out.

Everything it uses is built by :mod:`monitor.compose` and passed in. Inspections read
windows from ONE :class:`~connectors.base.WindowSource`, ``windows``: the source itself
(InfluxDB), or for a stream source the reading store that the stream fills. Threads:

* the source's own (a stream source calls :meth:`Agent.deliver` with batches, which are
  committed to the store before the call returns);
* one APScheduler job, ``tick``, every ``schedule.poll``: it runs every due inspection,
  oldest first, one at a time (a lock: no overlapping runs);
* one delivery worker per sink (:mod:`monitor.delivery`);
* one report worker, so drawing figures never delays delivery.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import pandas as pd

from connectors.base import ConnectorError, Reading, StreamSource, WindowSource
from monitor.delivery import Dispatcher
from monitor.inspection import Inspector, Outcome
from monitor.metrics import Metrics
from monitor.schedule import InspectionPlan
from monitor.state import AgentState
from monitor.store import ReadingStore
from monitor.timeutil import format_duration, iso
from monitor.tracker import SiteTracker, history_times

log = logging.getLogger(__name__)

Reporter = Callable[[Outcome], Any]


class Agent:
    """``windows`` answers every window query and the data clock; ``stream`` (a stream
    source) pushes readings into ``store``, the reading store that ``windows`` then is.
    Both are None for a window source. :func:`monitor.compose.build_windows` picks them."""

    def __init__(self, *, windows: WindowSource, stream: StreamSource | None = None,
                 store: ReadingStore | None = None, state: AgentState, inspector: Inspector,
                 plan: InspectionPlan, dispatcher: Dispatcher, metrics: Metrics,
                 clock: str = "wall", poll: timedelta = timedelta(seconds=5),
                 start: datetime | None = None, retention: timedelta = timedelta(days=15),
                 reporter: Reporter | None = None,
                 closers: Sequence[Callable[[], Any]] = (),
                 services: Sequence[Any] = (), tracker: SiteTracker | None = None) -> None:
        if (stream is None) != (store is None):
            raise ValueError("a stream source needs the store it fills, and only it does")
        self.windows = windows
        self.stream = stream
        self.store = store
        self.state = state
        self.inspector = inspector
        self.plan = plan
        self.dispatcher = dispatcher
        self.metrics = metrics
        self.clock = clock
        self.poll = poll
        self.start_time = start
        self.retention = retention
        self.reporter = reporter
        self._closers = list(closers)
        self._services = list(services)  # objects with start()/stop(), e.g. the health server
        self.tracker = tracker  # calibration history + open incident (None: engine rule)
        self._history_ready = tracker is None
        self._tick_lock = threading.Lock()
        self._stopping = threading.Event()
        self._scheduler: Any = None
        self._reports: ThreadPoolExecutor | None = None
        self._report_futures: list[Future[Any]] = []
        self._last_prune = 0.0
        self._started = False
        # backoff while the source cannot be read (e.g. influxd down): see tick()
        self._source_retry_at = 0.0
        self._source_backoff = max(1.0, self.poll.total_seconds())

    # -- readings -----------------------------------------------------------------------------
    def deliver(self, batch: Sequence[Reading]) -> None:
        """Commit a batch from the source; returns only once it is in the store."""
        assert self.store is not None
        self.store.add(batch)

    def read_window(self, start: datetime, end: datetime) -> pd.DataFrame:
        spec = self.inspector.spec
        return self.windows.read_window(pd.Timestamp(start), pd.Timestamp(end),
                                        resample=format_duration(spec.resample),
                                        aggregate=spec.aggregate)

    # -- clocks -------------------------------------------------------------------------------
    def watermark(self) -> datetime | None:
        wm = self.windows.watermark()
        return None if wm is None else wm.to_pydatetime().astimezone(UTC)

    def source_finished(self) -> bool:
        return self.stream is not None and self.stream.finished()

    def clock_now(self) -> datetime | None:
        """The time inspections are due against (see :mod:`monitor.schedule`)."""
        if self.clock == "wall":
            return datetime.now(UTC)
        wm = self.watermark()
        if wm is not None and self.source_finished():
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
            if first is None:
                return None  # no data yet
            anchor = first.to_pydatetime().astimezone(UTC) + spec.before
        else:  # a database: from the newest complete inspection on
            now = self.clock_now()
            if now is None:
                return None
            anchor = now - spec.after  # the latest complete inspection runs at once
        self.state.set_meta("anchor", repr(anchor.timestamp()))
        log.info("first inspection time: on or after %s", iso(anchor))
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
        for t in times:
            if t + after > now or len(out) >= limit:
                break
            if not self.state.is_done(t.timestamp()):
                out.append(t)
        return out

    # -- inspections --------------------------------------------------------------------------
    def tick(self) -> int:
        """Run every due inspection, oldest first; return how many ran."""
        if not self._tick_lock.acquire(blocking=False):
            return 0  # one already running: no overlapping runs
        if time.monotonic() < self._source_retry_at:
            self._tick_lock.release()
            return 0  # the source was unreachable: wait out the backoff
        ran = 0
        try:
            health = self.stream.health() if self.stream is not None else {}
            if "connected" in health:
                self.metrics.set_source_connected(bool(health["connected"]))
            if "rejected" in health:
                self.metrics.set_source_rejected(health["rejected"])
            while not self._stopping.is_set():
                pending = self.due(limit=1)
                if not pending:
                    break
                self.run_inspection(pending[0])
                ran += 1
                self._source_backoff = max(1.0, self.poll.total_seconds())
                if self.metrics.source_connected is False and self.stream is None:
                    self.metrics.set_source_connected(True)
            self._maybe_prune()
        except ConnectorError as exc:
            # Not an inspection result: nothing is recorded, the due inspection runs once
            # the source answers again (exponential backoff up to 5 min).
            delay = self._source_backoff
            self._source_retry_at = time.monotonic() + delay
            self._source_backoff = min(delay * 2, 300.0)
            self.metrics.set_source_connected(False)
            log.warning("source unavailable, inspections wait (%s); retrying in %.0f s",
                        exc, delay)
        except Exception:  # the daemon outlives any bug in one tick
            log.exception("scheduled tick failed; will retry at the next one")
        finally:
            self._tick_lock.release()
        return ran

    def _prepare_history(self, first: datetime) -> None:
        """Load the calibration history and the open incident from the state database; on
        a first start, compute the history from what the source already holds (an
        InfluxDB with two weeks of data calibrates the first inspection)."""
        assert self.tracker is not None
        span = self.inspector.decision.calibration.history
        rows = self.state.history((first - span).timestamp())
        if not rows and self.state.last_done() is None and self.inspector.calibrated:
            times = history_times(self.inspector, first)
            added = self.tracker.backfill(times, self.read_window)
            rows = [(th.timestamp(), v) for th, v in sorted(self.tracker.history.items())]
            if added:
                self.state.add_history(rows)
                log.info("calibration: %d past inspection times computed from the source", added)
        self.tracker.history = {datetime.fromtimestamp(th, UTC): v for th, v in rows}
        saved = self.state.open_incident()
        if saved is not None:
            from monitor.incidents import Incident

            self.tracker.incident = Incident.from_dict(saved)
        self._history_ready = True

    def run_inspection(self, t: datetime) -> dict[str, Any]:
        if self.tracker is None:
            outcome = self.inspector.run(t, self.read_window)
            result = outcome.result
            self.state.commit_inspection(t.timestamp(), result)
        else:
            if not self._history_ready:
                self._prepare_history(t)
            history = self.tracker.history_at(t) if self.inspector.calibrated else None
            outcome = self.inspector.run(t, self.read_window, history)
            result = outcome.result
            kept, event = self.tracker.observe(result)
            incident = self.tracker.incident
            # outbox + ledger + history + incident first (one transaction), then sinks
            self.state.commit_inspection(t.timestamp(), result, statistic=kept,
                                         incident=None if incident is None
                                         else incident.to_dict())
            if event is not None:
                log.warning("incident %s %s: %s", result["incident"]["id"], event,
                            ", ".join(result["incident"]["sensors"]))
        self.dispatcher.notify()
        self.metrics.inspection(result["status"], result["generator"]["runtime_s"],
                                result.get("error"))
        level = logging.WARNING if result["status"] == "error" else logging.INFO
        log.log(level, "%s", result["summary"])
        if self.reporter is not None and self._reports is not None:
            self._report_futures = [f for f in self._report_futures if not f.done()]
            self._report_futures.append(self._reports.submit(self._report, outcome))
        return result

    def _report(self, outcome: Outcome) -> None:
        try:
            assert self.reporter is not None
            self.reporter(outcome)
        except Exception:  # a report never stops the agent
            log.exception("report for %s failed", outcome.result.get("inspection_time"))

    def _maybe_prune(self) -> None:
        if time.monotonic() - self._last_prune < 60:
            return
        self._last_prune = time.monotonic()
        last = self.state.last_done()
        if last is not None and self.inspector.calibrated:  # history older than its span
            span = self.inspector.decision.calibration.history + timedelta(days=1)
            self.state.prune_history(last - span.total_seconds())
        if self.store is None:
            return
        wm = self.store.last_time_s()
        if wm is None:
            return
        horizon = wm - self.retention.total_seconds()
        pending = self.due(limit=1)  # never drop what a pending inspection still needs
        if pending:
            horizon = min(horizon, (pending[0] - self.inspector.spec.before).timestamp())
        removed = self.store.prune(horizon)
        if removed:
            log.info("store: dropped %d readings older than %s", removed,
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
        log.info("agent started (clock: %s, windows from %s)", self.clock,
                 "the reading store" if self.stream is not None else "the source")

    def idle(self) -> bool:
        """Nothing left to do right now: replay finished, nothing due, outbox empty."""
        if self.stream is not None and not self.stream.finished():
            return False
        if self._tick_lock.locked() or self.due(limit=1):
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
        """Graceful stop: the running inspection finishes, readings already received are
        committed, queued results stay in the outbox for the next start."""
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
