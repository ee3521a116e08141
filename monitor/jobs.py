"""One inspection as a picklable job, and the function a worker runs on it.

An :class:`InspectionJob` holds everything a worker process (a local pool process or a Dask
worker on another host) needs to run one inspection, and nothing it must not touch: it
never carries an open store, a connection or the agent's SQLite. The worker rebuilds the
:class:`~monitor.inspection.Inspector` from :class:`InspectorSettings`, reads its windows
from what the job carries, and returns the same result dict as
``Inspector.run(t, read_window, history).result``::

    from monitor.jobs import InspectionJob, InspectorSettings, run_job

    settings = InspectorSettings.of(inspector)          # once per site
    job = InspectionJob.with_windows(settings, t, read_window, history=tracker.history_at(t))
    # or, for a window source a worker can reach itself (InfluxDB):
    job = InspectionJob.with_source(settings, t, config.source, history=...)
    future = executor.submit(run_job, job)              # monitor.executors.build_executor
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
advanced by the caller, in time order, when results come back (:mod:`monitor.fleet`).

:func:`run_detect` returns the detection statistic alone (a history value) for the same
job, for computing a calibration history on workers.

A :class:`~connectors.base.ConnectorError` raised while a worker reads its window
propagates out of ``run_job`` (no result: the caller retries later, as the agent does);
every other failure ends as a result with ``status: error``, exactly as inline.
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from monitor.inspection import DecisionSettings, EngineSettings, Inspector
from monitor.windows import WindowSpec

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd
    from pydantic import BaseModel

    from monitor.inspection import ReadWindow

log = logging.getLogger(__name__)

__all__ = ["InspectionJob", "InspectorSettings", "JobError", "SourceRead", "run_detect",
           "run_job"]


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
    history: tuple[float, ...] | None = None
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
                     history: np.ndarray | tuple[float, ...] | None = None) -> InspectionJob:
        """A job carrying the window frame read here with ``read_window`` (one query of
        ``[t - B, t + A)``, the same one ``Inspector.run`` makes)."""
        start, _, end = inspector.spec.bounds(t)
        return cls(inspector, t, _history(history), frame=read_window(start, end))

    @classmethod
    def with_source(cls, inspector: InspectorSettings, t: datetime, source: BaseModel,
                    history: np.ndarray | tuple[float, ...] | None = None) -> InspectionJob:
        """A job whose worker reads its own window from ``source`` (a window source's
        connector config, e.g. ``config.source`` of ``type: influxdb``)."""
        from monitor.timeutil import format_duration

        spec = inspector.spec
        read = SourceRead(source, resample=format_duration(spec.resample),
                          aggregate=spec.aggregate)
        return cls(inspector, t, _history(history), source=read)

    def read_window(self) -> ReadWindow:
        """The worker's ``read_window(start, end)``: the carried frame (as is, for the
        inspection's own bounds; sliced for any other range) or a read of the source."""
        if self.source is not None:
            return self.source.read
        frame = self.frame
        assert frame is not None
        start, _, end = self.inspector.spec.bounds(self.inspection_time)
        sliced: Callable[[pd.Timestamp, pd.Timestamp], pd.DataFrame] | None = None

        def read(a: pd.Timestamp, b: pd.Timestamp) -> pd.DataFrame:
            nonlocal sliced
            if a == start and b == end:
                return frame
            if sliced is None:
                from monitor.tracker import cached_reader

                sliced = cached_reader(frame)
            return sliced(a, b)

        return read


def _history(values: np.ndarray | tuple[float, ...] | None) -> tuple[float, ...] | None:
    return None if values is None else tuple(float(v) for v in values)


def run_job(job: InspectionJob) -> dict[str, Any]:
    """Run one inspection; returns its result JSON dict (``Inspector.run(...).result``).

    Picklable, module-level, no state: submit it to any executor
    (``executor.submit(run_job, job)``)."""
    import numpy as np

    inspector = job.inspector.build()
    history = None if job.history is None else np.asarray(job.history, dtype=float)
    outcome = inspector.run(job.inspection_time, job.read_window(), history)
    return outcome.result


def run_detect(job: InspectionJob) -> float | None:
    """The detection statistic alone at the job's time (one calibration-history value),
    None when the windows cannot give it; ``job.history`` is ignored."""
    return job.inspector.build().detect(job.inspection_time, job.read_window())
