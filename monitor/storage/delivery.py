"""Delivers queued results from the outbox to every sink.

One worker thread per sink, so a slow or failing sink never holds the others back. A
worker takes the results its sink has not confirmed, oldest first; on failure it backs off
exponentially (``retry_initial`` doubling up to ``retry_max``) and tries again, keeping the
order of results for that sink.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from datetime import timedelta

from connectors.base import Sink
from monitor.service.metrics import Metrics
from monitor.storage.state import AgentState

log = logging.getLogger(__name__)


class _SinkWorker:
    def __init__(self, sink: Sink, state: AgentState, all_sinks: frozenset[str],
                 metrics: Metrics, retry_initial: float, retry_max: float) -> None:
        self.sink = sink
        self._state = state
        self._all = all_sinks
        self._metrics = metrics
        self._initial = retry_initial
        self._max = retry_max
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._idle = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"sink-{sink.name}",
                                        daemon=True)

    def start(self) -> None:
        self._thread.start()

    def wake(self) -> None:
        self._idle.clear()
        self._wake.set()

    def _loop(self) -> None:
        delay = self._initial
        while not self._stop.is_set():
            self._wake.clear()
            entries = self._state.pending(sink=self.sink.name)
            if not entries:
                self._idle.set()
                self._wake.wait(timeout=5.0)
                continue
            self._idle.clear()
            failed = False
            for entry in entries:
                if self._stop.is_set():
                    return
                try:
                    self.sink.send(entry.result)
                except Exception as exc:  # noqa: BLE001 - any sink failure is retried
                    self._metrics.sink_failed(self.sink.name)
                    log.warning("sink %s: delivering %s failed: %s; retrying in %.1f s",
                                self.sink.name, entry.fingerprint, exc, delay)
                    failed = True
                    break
                self._state.confirm(entry.fingerprint, self.sink.name, self._all)
                self._metrics.set_outbox_size(self._state.outbox_size())
                delay = self._initial
            if failed:
                self._stop.wait(delay)
                delay = min(delay * 2, self._max)

    def stop(self, timeout: float) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=timeout)

    def idle(self) -> bool:
        return self._idle.is_set() and not self._wake.is_set()


class Dispatcher:
    """Owns the sink workers; :meth:`notify` after new results are committed."""

    def __init__(self, sinks: Sequence[Sink], state: AgentState, metrics: Metrics, *,
                 retry_initial: timedelta = timedelta(seconds=1),
                 retry_max: timedelta = timedelta(minutes=5)) -> None:
        names = [s.name for s in sinks]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"two sinks share the name {', '.join(dupes)}; give one a "
                             "distinct 'name' in the config")
        self._state = state
        self._metrics = metrics
        self.sinks = list(sinks)
        all_sinks = frozenset(names)
        state.forget_sinks_except(all_sinks)
        self._workers = [
            _SinkWorker(s, state, all_sinks, metrics, retry_initial.total_seconds(),
                        retry_max.total_seconds()) for s in sinks]

    def start(self) -> None:
        self._metrics.set_outbox_size(self._state.outbox_size())
        for w in self._workers:
            w.start()
        self.notify()

    def notify(self) -> None:
        self._metrics.set_outbox_size(self._state.outbox_size())
        for w in self._workers:
            w.wake()

    def drain(self, timeout: float) -> bool:
        """Wait until the outbox is empty (or ``timeout`` s); True when it is."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._state.outbox_size() == 0:
                return True
            time.sleep(0.05)
        return self._state.outbox_size() == 0

    def stop(self, timeout: float = 5.0) -> None:
        for w in self._workers:
            w.stop(timeout)
        for s in self.sinks:
            try:
                s.close()
            except Exception:  # closing is best effort
                log.exception("sink %s: close failed", s.name)
