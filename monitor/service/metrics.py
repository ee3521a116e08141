"""Counters and gauges describing what the agent is doing.

One :class:`Metrics` object is created in the composition root (:mod:`monitor.compose`)
and passed to whatever records into it (store, agent, outbox); the health endpoint reads
:meth:`Metrics.snapshot`. Thread-safe: sources deliver readings from their own threads
while inspections run on the scheduler's.
"""
from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any


class Metrics:
    """Readings accepted/rejected, inspections by status and duration, outbox size,
    last success time and source connectivity."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.readings_accepted = 0
        self.readings_rejected: Counter[str] = Counter()  # by the store
        # Sources count their own rejections (a payload never becomes a reading); they
        # report cumulative totals, copied here on each agent tick.
        self.source_rejected: dict[str, int] = {}
        self.inspections: Counter[str] = Counter()
        self.inspection_seconds_sum = 0.0
        self.inspection_seconds_count = 0
        self.last_inspection_seconds: float | None = None
        self.last_inspection_status: str | None = None
        self.last_inspection_error: str | None = None
        self.outbox_size = 0
        self.last_success_time: float | None = None  # epoch s of the last non-error result
        self.source_connected: bool | None = None  # None: no source (e.g. one-shot inspect)
        self.sink_failures: Counter[str] = Counter()
        self.data_gaps: Counter[str] = Counter()  # data_gap events by kind (monitor.service.gaps)
        self.started_at = time.time()

    # -- recording ---------------------------------------------------------------------------
    def readings(self, accepted: int) -> None:
        with self._lock:
            self.readings_accepted += accepted

    def rejected(self, reason: str, count: int = 1) -> None:
        with self._lock:
            self.readings_rejected[reason] += count

    def set_source_rejected(self, counts: dict[str, int]) -> None:
        with self._lock:
            self.source_rejected = {str(k): int(v) for k, v in counts.items() if v}

    def inspection(self, status: str, seconds: float, error: str | None = None) -> None:
        with self._lock:
            self.inspections[status] += 1
            self.inspection_seconds_sum += seconds
            self.inspection_seconds_count += 1
            self.last_inspection_seconds = seconds
            self.last_inspection_status = status
            self.last_inspection_error = error
            if status != "error":
                self.last_success_time = time.time()

    def set_outbox_size(self, size: int) -> None:
        with self._lock:
            self.outbox_size = size

    def set_source_connected(self, connected: bool | None) -> None:
        with self._lock:
            self.source_connected = connected

    def sink_failed(self, sink: str) -> None:
        with self._lock:
            self.sink_failures[sink] += 1

    def data_gap(self, kind: str) -> None:
        with self._lock:
            self.data_gaps[kind] += 1

    # -- reading -----------------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        """A JSON-safe copy of every value."""
        with self._lock:
            return {
                "readings_accepted": self.readings_accepted,
                "readings_rejected": dict(self.readings_rejected
                                          + Counter(self.source_rejected)),
                "inspections": dict(self.inspections),
                "inspection_seconds_sum": self.inspection_seconds_sum,
                "inspection_seconds_count": self.inspection_seconds_count,
                "last_inspection_seconds": self.last_inspection_seconds,
                "last_inspection_status": self.last_inspection_status,
                "last_inspection_error": self.last_inspection_error,
                "outbox_size": self.outbox_size,
                "last_success_time": self.last_success_time,
                "source_connected": self.source_connected,
                "sink_failures": dict(self.sink_failures),
                "data_gaps": dict(self.data_gaps),
                "started_at": self.started_at,
            }
