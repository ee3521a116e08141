"""One inspection as a picklable job, and the function a worker runs on it.

An :class:`InspectionJob` holds everything a worker process (a local pool process or a Dask
worker on another host) needs to run one inspection, and nothing it must not touch: it
never carries an open store, a connection or the agent's SQLite. The worker rebuilds the
:class:`~monitor.inspection.Inspector` from :class:`InspectorSettings`, reads its windows
from what the job carries, and returns the same result dict as
``Inspector.run(t, read_window, history).result``::

    from monitor.fleet.jobs import InspectionJob, InspectorSettings, run_job

    settings = InspectorSettings.of(inspector)          # once per site
    job = InspectionJob.with_windows(settings, t, read_window, history=tracker.history_at(t))
    # or, for a window source a worker can reach itself (InfluxDB):
    job = InspectionJob.with_source(settings, t, config.source, history=...)
    future = executor.submit(run_job, job)              # monitor.fleet.executors.build_executor
    result = future.result()                            # the result JSON dict

Windows come in one of two ways:

* ``frame``: the long frame (``time, sensor, value``) of ``[t - B, t + A)`` as the agent's
  own ``read_window`` returned it (a stream source's store, a file); the worker answers the
  inspection's one window query from it, so the windows are exactly those the agent would
  have built.
* ``source``: a :class:`SourceRead` (the source's validated connector config, with the
  window's ``resample`` and ``aggregate``); the worker opens the source, reads the window
  and closes it (InfluxDB: server-side bins). Secrets in the config travel to the worker
  with the job (pickled; use TLS on the Dask comms across hosts).

``history`` is the calibration history (calibrated rule) at ``t``: the values
``SiteTracker.history_at(t)`` gives, in that order; ``None`` under the engine rule. The
worker decides nothing beyond the one inspection: incidents and the history itself are
advanced by the caller, in time order, when results come back (:mod:`monitor.fleet.backfill`).

An :class:`InspectionBatch` carries several times of one site under the engine rule (no
history), with one frame of their whole span or the source; :func:`run_batch` runs them
through ``Inspector.run_many``, so their engine fits share one batched tensor program
(``CVAggregation.fit_many``) and the agent reads and ships one frame instead of one per
time. Its results equal one :func:`run_job` per time.

Under the calibrated rule, batches of several sites (``first_pass=True``) go to
:func:`run_first_pass`: the first pass of their due times (windows, detections and
engine-part fits, :func:`monitor.inspection.prepare_many`, one ``fit_many`` across the
sites configured alike), which decides nothing; the agent decides each time in order
with them, as it does with its own first pass.

:func:`run_detect` returns both statistics alone (a history value) for the same job, and
:func:`run_detect_many` those of a ``first_pass`` batch's times, for computing a
calibration history on workers.

A :class:`~connectors.base.ConnectorError` raised while a worker reads its window
propagates out of ``run_job`` (no result: the caller retries later, as the agent does);
every other failure ends as a result with ``status: error``, exactly as inline.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from monitor.decision.settings import DecisionSettings, EngineSettings
from monitor.inspection import Inspector
from monitor.windows import WindowSpec

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd
    from pydantic import BaseModel

    from monitor.decision.calibrated_rule import Prepared
    from monitor.storage.state import HistoryValue
    from monitor.windows import ReadWindow

log = logging.getLogger(__name__)

#: the calibration history a job carries: (level, engine statistic, inspection time in
#: seconds since the epoch) per past time, the engine statistic NaN where it was not
#: computed (``SiteTracker.history_at``'s rows; older callers' two columns are kept as they
#: are, the time unknown)
JobHistory = tuple[tuple[float, ...], ...]

__all__ = ["WORKER_DEATHS", "InspectionBatch", "InspectionJob", "InspectorSettings", "JobError",
           "SourceRead", "WorkerDeaths", "killed_worker", "run_batch", "run_detect",
           "run_detect_many", "run_first_pass", "run_job", "worker_died_error"]


#: Deaths of its worker process, while it ran alone, after which an inspection is recorded
#: as an error result (the first may be bad luck: a worker killed from outside).
WORKER_DEATHS = 2


def killed_worker(exc: BaseException) -> bool:
    """Dask gave up on a task whose worker died more than ``allowed-failures`` times
    (``distributed.KilledWorker``, told by name: importing distributed to check is not
    worth it where the executor is a local pool)."""
    return type(exc).__name__ == "KilledWorker"


def worker_died_error(exc: BaseException) -> str:
    """The error of an inspection recorded after its worker process died each time it ran
    it (``exc``: the executor's exception), naming the likely causes and the fix."""
    return (f"its worker process died each time it ran it ({type(exc).__name__}: out of "
            "memory, or a crash in native code); run it alone with `mmdwatch inspect --at` "
            "to see why, or give the workers more memory")


class WorkerDeaths:
    """Which jobs' worker processes died under them, and when a job is known to be the
    cause. Keys are the caller's job ids. A death while other jobs shared the worker (a
    local pool breaks with every job in it) names no cause: the job becomes a *suspect*,
    and the caller runs jobs one at a time while there are suspects, so that its next
    death is its own. A job is known to kill its worker after :data:`WORKER_DEATHS` deaths
    while it ran alone, or at once on Dask's ``KilledWorker`` (the scheduler has already
    retried it on other workers)."""

    def __init__(self) -> None:
        self.suspects: set[Any] = set()
        self._alone: dict[Any, int] = {}  # deaths while the job ran alone

    def died(self, key: Any, exc: BaseException, *, alone: bool) -> bool:
        """Record that ``key``'s worker died (``exc``; ``alone``: no other job shared the
        worker). True when ``key`` is now known to kill its worker (record it as an error;
        it is forgotten here), False when it should run again, alone."""
        if not killed_worker(exc):
            self.suspects.add(key)
            if not alone:
                return False
            self._alone[key] = self._alone.get(key, 0) + 1
            if self._alone[key] < WORKER_DEATHS:
                return False
        self.forget(key)
        return True

    def split(self, batch: Any, singles: Sequence[Any], exc: BaseException) -> None:
        """A batch of several jobs caused its worker's death (``exc``) and is sent again
        as ``singles``, one job each: they become suspects, so that the next death names
        its job, except on Dask's ``KilledWorker``, where the scheduler tells the cause."""
        self.forget(batch)
        if not killed_worker(exc):
            self.suspects.update(singles)

    def forget(self, key: Any) -> None:
        """``key`` came back or was recorded: no longer a suspect."""
        self.suspects.discard(key)
        self._alone.pop(key, None)


class JobError(ValueError):
    """An inspection job is malformed; the message says what to give."""


@dataclass(frozen=True)
class InspectorSettings:
    """What rebuilds an :class:`~monitor.inspection.Inspector` on a worker (all plain,
    picklable values; ``settings`` is the dict hashed into fingerprints)."""

    site: str
    spec: WindowSpec
    engine: EngineSettings
    settings: dict[str, Any]
    decision: DecisionSettings = field(default_factory=DecisionSettings)

    @classmethod
    def of(cls, inspector: Inspector) -> InspectorSettings:
        return cls(site=inspector.site, spec=inspector.spec, engine=inspector.engine,
                   settings=inspector.settings, decision=inspector.decision)

    def build(self) -> Inspector:
        return Inspector(self.site, self.spec, self.engine, self.settings, self.decision)

    def read_span(self, t: datetime) -> tuple[pd.Timestamp, pd.Timestamp]:
        """What an inspection at ``t`` reads (:func:`monitor.inspection.read_span`)."""
        from monitor.inspection import read_span

        return read_span(self.spec, self.decision, t)


@dataclass(frozen=True)
class SourceRead:
    """How a worker reads a window itself: the source's connector config (validated, as in
    ``MonitorConfig.source``), and the window query's ``resample`` (e.g. ``"1h"``) and
    ``aggregate``."""

    source: BaseModel
    resample: str | None = None
    aggregate: str = "mean"

    def read(self, start: pd.Timestamp, end: pd.Timestamp) -> pd.DataFrame:
        """Open the source, read ``[start, end)``, close it."""
        from connectors import registry
        from connectors.base import WindowSource

        cls = registry.source_class(self.source.type)  # type: ignore[attr-defined]
        source = cls(self.source)
        if not isinstance(source, WindowSource):
            raise JobError(f"source {self.source.type!r} is not a window source; "  # type: ignore[attr-defined]
                           "send the window frame with the job (InspectionJob.with_windows)")
        try:
            frame: pd.DataFrame = source.read_window(start, end, resample=self.resample,
                                                     aggregate=self.aggregate)
        finally:
            source.close()
        return frame


@dataclass(frozen=True)
class InspectionJob:
    """One inspection of one site at one time; give exactly one of ``frame`` or ``source``.

    ``inspector``: the site's :class:`InspectorSettings`; ``inspection_time``: t (aware
    UTC, or naive = UTC); ``history``: the calibration history at t (calibrated rule), None
    under the engine rule; ``frame``: the readings of ``[t - B, t + A)`` as the agent read
    them; ``source``: how the worker reads them itself.
    """

    inspector: InspectorSettings
    inspection_time: datetime
    history: JobHistory | None = None
    frame: pd.DataFrame | None = field(default=None, repr=False)
    source: SourceRead | None = None

    def __post_init__(self) -> None:
        if (self.frame is None) == (self.source is None):
            raise JobError("an InspectionJob needs exactly one of frame= (the windows the "
                           "agent read) or source= (a SourceRead for the worker to read)")

    @property
    def site(self) -> str:
        return self.inspector.site

    @classmethod
    def with_windows(cls, inspector: InspectorSettings, t: datetime, read_window: ReadWindow,
                     history: np.ndarray | JobHistory | None = None) -> InspectionJob:
        """A job carrying the window frame read here with ``read_window`` (one query of
        ``[t - B, t + A)``, the same one ``Inspector.run`` makes, reaching back over the
        source's history under the engine rule: ``InspectorSettings.read_span``)."""
        return cls(inspector, t, _history(history),
                   frame=read_window(*inspector.read_span(t)))

    @classmethod
    def with_source(cls, inspector: InspectorSettings, t: datetime, source: BaseModel,
                    history: np.ndarray | JobHistory | None = None) -> InspectionJob:
        """A job whose worker reads its own window from ``source`` (a window source's
        connector config, e.g. ``config.source`` of ``type: influxdb``)."""
        return cls(inspector, t, _history(history), source=_source_read(inspector, source))

    def read_window(self) -> ReadWindow:
        """The worker's ``read_window(start, end)``: the carried frame (as is, for the
        span it was read for; sliced for any other range) or a read of the source."""
        return _carried_reader(self.frame, self.source,
                               self.inspector.read_span(self.inspection_time))


@dataclass(frozen=True)
class InspectionBatch:
    """Several inspection times of one site under the engine rule, run together by
    :func:`run_batch` (``Inspector.run_many``: their fits share one batched tensor program,
    ``CVAggregation.fit_many``). Give exactly one of ``frame`` (the readings of the whole
    span ``[times[0] - B, times[-1] + A)``, one read by the agent instead of one per time)
    or ``source``. No history: the calibrated rule's p-value at t depends on the results
    before t, so its inspections travel one per :class:`InspectionJob`.
    """

    inspector: InspectorSettings
    times: tuple[datetime, ...]
    frame: pd.DataFrame | None = field(default=None, repr=False)
    source: SourceRead | None = None
    #: for :func:`run_first_pass` or :func:`run_detect_many` (any rule: they decide
    #: nothing), not :func:`run_batch`
    first_pass: bool = False

    def __post_init__(self) -> None:
        if (self.frame is None) == (self.source is None):
            raise JobError("an InspectionBatch needs exactly one of frame= (the span the "
                           "agent read) or source= (a SourceRead for the worker to read)")
        if not self.times or list(self.times) != sorted(self.times):
            raise JobError("an InspectionBatch needs one or more times in increasing order")
        if self.inspector.decision.rule == "calibrated" and not self.first_pass:
            raise JobError("the calibrated rule needs each inspection's history: send "
                           "InspectionJobs one at a time, or a first_pass=True batch to "
                           "run_first_pass, not an InspectionBatch to run_batch")

    @property
    def site(self) -> str:
        return self.inspector.site

    def span(self) -> tuple[pd.Timestamp, pd.Timestamp]:
        """``[times[0] - B, times[-1] + A)`` (from further back with the source's history):
        every read of the batch lies inside."""
        return _span(self.inspector, self.times)

    @classmethod
    def with_windows(cls, inspector: InspectorSettings, times: Sequence[datetime],
                     read_window: ReadWindow, *, first_pass: bool = False) -> InspectionBatch:
        """A batch carrying the readings of its whole span, read here in one query."""
        ts = tuple(sorted(times))
        return cls(inspector, ts, frame=read_window(*_span(inspector, ts)),
                   first_pass=first_pass)

    @classmethod
    def with_source(cls, inspector: InspectorSettings, times: Sequence[datetime],
                    source: BaseModel, *, first_pass: bool = False) -> InspectionBatch:
        """A batch whose worker reads each window from ``source`` itself (InfluxDB: the
        same server-side bins as one job per time)."""
        return cls(inspector, tuple(sorted(times)), source=_source_read(inspector, source),
                   first_pass=first_pass)

    def read_window(self) -> ReadWindow:
        """The worker's ``read_window``: slices of the carried span, or source reads."""
        return _carried_reader(self.frame, self.source, None)


def _span(inspector: InspectorSettings, times: Sequence[datetime]
          ) -> tuple[pd.Timestamp, pd.Timestamp]:
    """From the first read's start to the last window's end of sorted ``times``."""
    return inspector.read_span(times[0])[0], inspector.read_span(times[-1])[1]


def _source_read(inspector: InspectorSettings, source: BaseModel) -> SourceRead:
    """How a worker reads the windows of ``inspector`` from ``source`` itself."""
    from connectors.timeutil import format_duration

    spec = inspector.spec
    return SourceRead(source, resample=format_duration(spec.resample), aggregate=spec.aggregate)


def _carried_reader(frame: pd.DataFrame | None, source: SourceRead | None,
                    own: tuple[pd.Timestamp, pd.Timestamp] | None) -> ReadWindow:
    """``read_window`` over what a job carries: ``source`` reads, or the ``frame`` itself
    for the range ``own`` it was read for and slices of it (sorted once, on first use) for
    any other range."""
    if source is not None:
        return source.read
    assert frame is not None
    sliced: Callable[[pd.Timestamp, pd.Timestamp], pd.DataFrame] | None = None

    def read(a: pd.Timestamp, b: pd.Timestamp) -> pd.DataFrame:
        nonlocal sliced
        if own is not None and a == own[0] and b == own[1]:
            return frame
        if sliced is None:
            from monitor.decision.tracker import cached_reader

            sliced = cached_reader(frame)
        return sliced(a, b)

    return read


def _history(values: np.ndarray | JobHistory | None) -> JobHistory | None:
    """``history_at``'s (n, 3) array as plain tuples (small to pickle); a one-column
    history (the level statistic alone) gets NaN engine values."""
    if values is None:
        return None
    import numpy as np

    rows = np.asarray(values, dtype=float)
    if rows.ndim == 1:
        rows = np.column_stack([rows, np.full(rows.size, np.nan)])
    rows = rows.reshape(-1, rows.shape[1] if rows.ndim == 2 else 2)
    return tuple(tuple(float(v) for v in row) for row in rows)


def run_job(job: InspectionJob) -> dict[str, Any]:
    """Run one inspection; returns its result JSON dict (``Inspector.run(...).result``).

    Picklable, module-level, no state: submit it to any executor
    (``executor.submit(run_job, job)``)."""
    import numpy as np

    inspector = job.inspector.build()
    history = None if job.history is None else np.asarray(job.history, dtype=float)
    outcome = inspector.run(job.inspection_time, job.read_window(), history)
    return outcome.result


def run_batch(batch: InspectionBatch) -> list[dict[str, Any]]:
    """Run a batch's inspections (``Inspector.run_many``); their result JSON dicts in the
    order of ``batch.times``, each as :func:`run_job` would give it. Picklable,
    module-level, no state, like :func:`run_job`."""
    inspector = batch.inspector.build()
    outcomes = inspector.run_many(list(batch.times), batch.read_window())
    return [outcome.result for outcome in outcomes]


def run_first_pass(batches: Sequence[InspectionBatch]) -> list[dict[datetime, Prepared]]:
    """The first pass of several sites' due times (one ``first_pass`` batch per site),
    as :func:`monitor.inspection.prepare_many` gives it in the agent's own process: for
    each batch, its times' windows, detections and engine-part fits, those of sites
    configured alike in one ``fit_many``. Picklable, module-level, no state."""
    from monitor.inspection import prepare_many

    return prepare_many([(batch.inspector.build(), list(batch.times), batch.read_window())
                         for batch in batches])


def run_detect(job: InspectionJob) -> HistoryValue | None:
    """Both statistics alone at the job's time (one calibration-history value),
    None when the windows cannot give it; ``job.history`` is ignored."""
    return job.inspector.build().detect(job.inspection_time, job.read_window())


def run_detect_many(batch: InspectionBatch) -> list[HistoryValue | None]:
    """:func:`run_detect` at each of a ``first_pass`` batch's times, in their order
    (``Inspector.detect_many``: their engine fits one batched program, as a history
    computed in the agent's process). Picklable, module-level, no state."""
    if not batch.first_pass:
        raise JobError("run_detect_many decides nothing: send a first_pass=True batch")
    return batch.inspector.build().detect_many(list(batch.times), batch.read_window())
