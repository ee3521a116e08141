"""One inspection: windows -> the decision rule -> the result JSON of docs/result.md.

An inspection is a pure job ``(site, inspection_time, settings)`` that reads its windows
through a function it is given, so it runs the same in the daemon, in ``inspect``, in a
backfill, or on a distributed worker. It builds a typed
:class:`monitor.result.InspectionResult` and serialises it once, at the end. The two
decision rules that fill it live in ``monitor/decision/``: ``engine_rule.py`` (the
retrospective profile) and ``calibrated_rule.py`` (the live profile).
"""
from __future__ import annotations

import functools
import hashlib
import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from connectors.timeutil import format_duration, iso
from monitor.decision.calibrated_rule import (
    EngineFits,
    FitScope,
    PendingFits,
    Prepared,
    decide_calibrated,
    engine_abstains,
    fits_here,
    lacks_own_p_value,
)
from monitor.decision.engine_rule import calibrate_on_source, decide_on_engine
from monitor.decision.settings import DecisionSettings, EngineSettings, Selector
from monitor.result import (
    SCHEMA,
    ChangeTest,
    DataQuality,
    EngineBlock,
    Generator,
    InspectionResult,
    WindowBounds,
    WindowsBlock,
)
from monitor.summary import summarise

if TYPE_CHECKING:  # pandas, numpy and torch load only when an inspection runs
    import numpy.typing as npt
    import pandas as pd

    from engine.result import Selection
    from monitor.decision.source_history import StatisticCache
    from monitor.storage.state import HistoryValue
    from monitor.windows import ReadWindow, WindowIncomplete, Windows, WindowSpec

log = logging.getLogger(__name__)

#: Calibrated-rule times of one site whose windows, level statistics and engine-part fits
#: are computed together before they are decided in order (:func:`prepare_many`; a
#: backfill, an agent catching up): a week of hourly times fills the optimiser's batch,
#: and the windows of that many times stay small (~0.2 MB each at 33 sensors).
PREFIT_TIMES = 168

__all__ = ["PREFIT_TIMES", "SCHEMA", "DecisionSettings", "EngineSettings", "Inspector",
           "Outcome", "Selector", "begin_prepare_many", "fingerprint", "prepare_many",
           "read_span", "summarise"]


@functools.cache
def _version() -> str:
    try:
        from importlib.metadata import version

        return version("mmdwatch")
    except Exception:  # noqa: BLE001 - not installed (running from a source tree)
        return "0.1.0"


def fingerprint(site: str, inspection_time: datetime, settings: dict[str, Any]) -> str:
    """Stable id of one inspection: the same site, time and settings give the same value."""
    payload = json.dumps({"site": site, "inspection_time": iso(inspection_time),
                          "settings": settings}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(payload.encode()).hexdigest()[:32]


def read_span(spec: WindowSpec, decision: DecisionSettings, t: datetime
              ) -> tuple[pd.Timestamp, pd.Timestamp]:
    """``[start, end)`` of the readings an inspection at ``t`` reads: its two windows (and
    the few bins past them that tell a hole from the data's end,
    :meth:`~monitor.windows.WindowSpec.read_end`) and, under the engine rule with
    ``source_history``, the windows of its history's earlier times (a job that carries its
    readings to a worker carries this span)."""
    start, _, _ = spec.bounds(t)
    end = spec.read_end(t)
    if decision.rule != "calibrated" and decision.source_history:
        from monitor.decision.source_history import history_start

        start = min(start, history_start(t, spec, decision.calibration.history))
    return start, end


@dataclass
class Outcome:
    """The result JSON object (serialised once from the typed result; the agent adds its
    incident block to it) plus the frames reports draw from (None when the windows
    failed)."""

    result: dict[str, Any]
    windows: Windows | None = None

    @property
    def inspection(self) -> InspectionResult:
        """``result`` read back as the typed result (as it is now: incident included)."""
        return InspectionResult.from_dict(self.result)


class Inspector:
    """Runs inspections for one site with fixed window and engine settings.

    ``engine_fits``: where the calibrated rule's batched engine-part fits run
    (:meth:`fit_engine_many`): in this process by default, or a one-shot command's
    :class:`~monitor.engine_process.EngineProcess`."""

    def __init__(self, site: str, spec: WindowSpec, engine: EngineSettings,
                 settings: dict[str, Any], decision: DecisionSettings | None = None,
                 engine_fits: EngineFits = fits_here) -> None:
        self.site = site
        self.spec = spec
        self.engine = engine
        self.settings = settings  # hashed into fingerprints
        self.decision = decision or DecisionSettings()
        self.engine_fits = engine_fits

    @property
    def calibrated(self) -> bool:
        return self.decision.rule == "calibrated"

    def fingerprint(self, t: datetime) -> str:
        return fingerprint(self.site, t, self.settings)

    def _base(self, t: datetime) -> InspectionResult:
        """The result of an inspection that has not got anywhere yet (status error)."""
        start, _, end = self.spec.bounds(t)
        spec = self.spec
        return InspectionResult(
            fingerprint=self.fingerprint(t),
            site=self.site,
            status="error",
            inspection_time=iso(t),
            windows=WindowsBlock(before=WindowBounds(iso(start), iso(t)),
                                 after=WindowBounds(iso(t), iso(end)),
                                 resample=format_duration(spec.resample),
                                 aggregate=spec.aggregate, normalise=spec.normalise),
            test=ChangeTest(method=self.engine.method, alpha=self.engine.alpha,
                            seed=self.engine.seed),
            generator=Generator(version=_version()),
        )

    def run_many(self, times: Sequence[datetime], read_window: ReadWindow) -> list[Outcome]:
        """Inspect at each of ``times`` (engine rule): the same outcomes as :meth:`run` at
        each time, but the engine fits of all times whose windows could be built go to the
        selector's ``fit_many`` together (CVAggregation: one batch per shape, see
        engine/selectors.py). The calibrated rule, whose p-value needs the history of the
        times before, and selectors without ``fit_many`` run one time after the other."""
        from monitor.windows import WindowError

        cache: StatisticCache = {}  # the source's history, shared by consecutive times
        try:
            fit_many = getattr(self.engine.make_selector(), "fit_many", None)
        except Exception:  # noqa: BLE001 - bad engine settings: run() records the error
            fit_many = None
        if self.calibrated or fit_many is None or len(times) < 2:
            return [self.run(t, read_window, history_cache=cache) for t in times]
        from connectors.base import ConnectorError

        windows: dict[datetime, Windows] = {}
        try:
            for t in times:
                try:
                    windows[t] = self._windows(t, read_window)
                except WindowError:
                    pass  # run() below reads the window again and records the error
            fits = fit_many([(w.before, w.after) for w in windows.values()], errors="return")
        except ConnectorError:
            raise  # the source is down: no result, the caller retries (as run() does)
        except Exception:  # e.g. out of memory in the larger batch: one time at a time
            log.exception("batched fits of %d inspections failed; running them one by one",
                          len(times))
            return [self.run(t, read_window, history_cache=cache) for t in times]
        prefit = dict(zip(windows, zip(windows.values(), fits, strict=True), strict=True))
        return [self.run(t, read_window, prefit=prefit.get(t), history_cache=cache)
                for t in times]

    def run(self, t: datetime, read_window: ReadWindow,
            history: npt.ArrayLike | None = None,
            prefit: tuple[Windows, Selection | Exception] | None = None,
            history_cache: StatisticCache | None = None,
            prepared: Prepared | None = None) -> Outcome:
        """Inspect at ``t``. Never raises for bad data: such inspections end as ``error``.

        ``history``: past values of the two statistics of this site (calibrated rule only;
        shape (n, 2): level, engine statistic with NaN where missing; (n,): the level
        statistic alone), from inspections whose after window ended by ``t``.
        ``prefit``: the windows at ``t`` and the engine's fit of them (or its error), when
        :meth:`run_many` fitted several times together (engine rule).
        ``history_cache``: the source history's statistics that :meth:`run_many` shares
        between its times (engine rule with ``source_history``).
        ``prepared``: the windows, detection and engine-part fit at ``t`` from
        :meth:`fit_engine_many` (calibrated rule: a backfill's first pass), which do not
        depend on the history; the same outcome as without it.
        """
        from connectors.base import ConnectorError
        from engine.live.residual_shift import DetectionError
        from monitor.windows import WindowError, WindowIncomplete

        started = time.perf_counter()
        result = self._base(t)
        windows = None
        try:
            if prepared is not None:
                windows = prepared.windows
            else:
                windows = prefit[0] if prefit is not None else self._windows(t, read_window)
            if self.calibrated:
                decide_calibrated(result, windows, history, self.decision, self.engine,
                                  prepared)
            else:
                decide_on_engine(result, windows, self.engine,
                                 None if prefit is None else prefit[1])
                if self.decision.source_history:
                    calibrate_on_source(result, windows, t, read_window, self.spec,
                                        self.engine, self.decision.calibration.history,
                                        history_cache)
        except WindowIncomplete as exc:
            self._incomplete(result, exc)
        except (WindowError, DetectionError) as exc:
            self._fail(result, str(exc))
        except ConnectorError:
            # The source could not be read (a server is down): no inspection happened, so
            # there is no result to record. The caller retries later (Agent.tick backs off).
            raise
        except Exception as exc:
            from engine.errors import EngineError  # lazy: importing engine imports torch

            if isinstance(exc, EngineError):
                self._fail(result, f"engine: {exc}")
            else:
                log.exception("inspection at %s failed unexpectedly", iso(t))
                self._fail(result, f"{type(exc).__name__}: {exc}")
        if windows is not None:
            result.data_quality = DataQuality.from_dict(windows.data_quality)
            result.windows.before.n = len(windows.before)
            result.windows.after.n = len(windows.after)
        # a batched fit's share of its batch (run_many, a first pass) is part of its time
        batched = prefit[1] if prefit is not None else \
            prepared.engine_fit if prepared is not None else None
        fit_share = float(getattr(batched, "runtime_s", 0.0) or 0.0)
        result.generator.runtime_s = round(time.perf_counter() - started + fit_share, 3)
        n = len(result.sensors) or result.data_quality.sensors_used or 0
        result.summary = summarise(result.status, t, n, result.selected_sensors,
                                   result.test.p_value,
                                   result.error or result.calibration or result.incomplete,
                                   self.engine.alpha,
                                   self.decision.calibration.level if self.calibrated
                                   else None, result.sensors,
                                   result.detection.fired_by if result.detection else None)
        return Outcome(result.to_dict(), windows)

    def failed(self, t: datetime, message: str) -> dict[str, Any]:
        """The result JSON of an inspection at ``t`` that could not be run at all (status
        error, ``message`` as its error), e.g. one whose worker process died every time."""
        result = self._base(t)
        self._fail(result, message)
        result.summary = summarise(result.status, t, 0, [], None, message)
        return result.to_dict()

    @staticmethod
    def _incomplete(result: InspectionResult, exc: WindowIncomplete) -> None:
        """The after window reaches past the data: no decision either way, and no
        carried values standing in for the missing part (docs/result.md, Status)."""
        result.status = "incomplete"
        result.incomplete = str(exc)
        result.data_quality.after_covered = round(exc.covered, 6)

    @staticmethod
    def _fail(result: InspectionResult, message: str) -> None:
        result.status = "error"
        result.error = message

    def _windows(self, t: datetime, read_window: ReadWindow) -> Windows:
        """The before and after windows of the inspection at ``t``."""
        from monitor.windows import build_windows

        start, t_utc, _ = self.spec.bounds(t)
        return build_windows(read_window(start, self.spec.read_end(t)), t_utc, self.spec)

    def _windows_many(self, times: Sequence[datetime], read_window: ReadWindow
                      ) -> dict[datetime, Windows]:
        """The windows at each of ``times`` that can be built (the others are left out),
        from ONE read of their span binned once (:class:`monitor.windows.BinnedSpan`) for
        each grid their before windows start on (:func:`monitor.windows.grid_groups`).

        One read per grid, not one for all: a source that bins on its server (InfluxDB,
        ``GROUP BY time(2s, offset)``) aligns the bins to the read's start, so windows on
        another grid (5-s inspections in 2-s bins start on even and on odd seconds) were
        sliced from bins a second off theirs, unlike the same window read alone."""
        from monitor.windows import BinnedSpan, WindowError, grid_groups

        out: dict[datetime, Windows] = {}
        for group in grid_groups(times, self.spec):
            first, _, _ = self.spec.bounds(min(group))
            last = self.spec.read_end(max(group))
            span = BinnedSpan(read_window(first, last), first, last, self.spec)
            for t in group:
                try:
                    out[t] = span.windows(t)
                except WindowError:
                    continue
        return {t: out[t] for t in times if t in out}  # in the order given, as before

    def detect(self, t: datetime, read_window: ReadWindow) -> HistoryValue | None:
        """Both statistics alone at ``t`` (one history value), None on bad data."""
        return self.detect_many([t], read_window)[0]

    def detect_many(self, times: Sequence[datetime], read_window: ReadWindow
                    ) -> list[HistoryValue | None]:
        """(level, engine statistic) at each of ``times`` (history backfill), None where
        the windows cannot give the level statistic; the engine statistic is None where
        the engine part is off or its fit failed. The engine fits of all times are one
        batched program (``fit_many``)."""
        from engine.live.engine_power import validation_power

        fits = self.fit_engine_many(times, read_window, scope="history")
        out: list[HistoryValue | None] = []
        for t in times:
            prepared = fits.get(t)
            if prepared is None:
                out.append(None)
                continue
            fit = prepared.engine_fit
            power = None if fit is None or isinstance(fit, Exception) \
                else validation_power(fit.details)
            out.append((prepared.detection.value, power))
        return out

    def fit_engine_many(self, times: Sequence[datetime], read_window: ReadWindow, *,
                        scope: FitScope = "full") -> dict[datetime, Prepared]:
        """The windows, the detection and the engine part's fit at each of ``times``
        whose windows can give the detection (calibrated rule), the engine fits in one
        batched program (``scope``: what they compute,
        :data:`~monitor.decision.calibrated_rule.FitScope`)."""
        return prepare_many([(self, times, read_window)], scope=scope)[0]

    def begin_fit_engine_many(self, times: Sequence[datetime], read_window: ReadWindow, *,
                              scope: FitScope = "full"
                              ) -> Callable[[], dict[datetime, Prepared]]:
        """:meth:`fit_engine_many` in two steps: the windows and detections now, the engine
        fits started (where :attr:`engine_fits` runs them elsewhere, they run while this
        process goes on); the returned function gives the result."""
        finish = begin_prepare_many([(self, times, read_window)], scope=scope)
        return lambda: finish()[0]

    def complete_engine_blocks(self, decided: Sequence[tuple[dict[str, Any], Prepared]]
                               ) -> int:
        """Each ``(result, prepared)`` whose result fired with an engine block from a fit
        of scope ``"decision"`` (without the fit's own p-value): those residual pairs
        fitted again in full, in one batch, and each block replaced by its full fit's, as
        an inspection run alone reports it (fits are deterministic: the same statistic,
        scores and candidates, and now the p-value). Returns how many were fitted."""
        from engine.live.engine_power import residual_pair

        todo = [(result, p) for result, p in decided if lacks_own_p_value(result)]
        if not todo:
            return 0
        pairs = [residual_pair(p.detection, self.decision.engine_rows) for _, p in todo]
        fits = self.engine_fits(self.engine, pairs, "full")()
        for (result, _), fit in zip(todo, fits, strict=True):
            if isinstance(fit, Exception):  # fitted once already: not expected
                log.warning("engine part: the full fit of the firing result at %s failed "
                            "(%s); its engine block keeps no p-value",
                            result.get("inspection_time"), fit)
                continue
            result["engine"] = EngineBlock.from_dict(fit.to_dict()).to_dict()
        return len(todo)

    def detect_windows(self, times: Sequence[datetime], read_window: ReadWindow
                       ) -> dict[datetime, Prepared]:
        """The windows and the level statistic's detection at each of ``times`` whose
        windows can give it (no engine fit yet: :func:`prepare_many`)."""
        from engine.live.residual_shift import DetectionError, detect_many

        windows = self._windows_many(times, read_window)
        detections = detect_many([(w.before_raw, w.after_raw) for w in windows.values()],
                                 self.decision.detector,
                                 [w.spread for w in windows.values()])
        return {t: Prepared(w, d) for (t, w), d in zip(windows.items(), detections, strict=True)
                if not isinstance(d, DetectionError)}


def prepare_many(work: Sequence[tuple[Inspector, Sequence[datetime], ReadWindow]], *,
                 scope: FitScope = "full") -> list[dict[datetime, Prepared]]:
    """The first pass of the calibrated rule for several sites at once: for each
    ``(inspector, times, read_window)``, the windows, detection and engine-part fit at each
    time (:meth:`Inspector.fit_engine_many`), the engine fits of all sites whose engine
    part is configured alike in ONE ``fit_many`` (sites due at the same hour share a
    batch; pairs of one shape share its optimiser passes). None of it depends on a
    decision, so each site's results equal its inspections run one by one.
    ``scope``: what the engine fits compute
    (:data:`~monitor.decision.calibrated_rule.FitScope`): ``"history"`` for history
    values (only the statistic is kept), ``"decision"`` where the firing results' blocks
    are completed after (:meth:`Inspector.complete_engine_blocks`)."""
    return begin_prepare_many(work, scope=scope)()


def begin_prepare_many(work: Sequence[tuple[Inspector, Sequence[datetime], ReadWindow]], *,
                       scope: FitScope = "full"
                       ) -> Callable[[], list[dict[datetime, Prepared]]]:
    """:func:`prepare_many` in two steps: the windows and detections now, each group's
    engine fits started through its first inspector's ``engine_fits``; the returned
    function waits for the fits and gives the result."""
    from engine.live.engine_power import residual_pair

    detected = [inspector.detect_windows(times, read) for inspector, times, read in work]
    groups: dict[str, list[int]] = {}  # alike engine parts (settings and rows) together
    for i, (inspector, _, _) in enumerate(work):
        if inspector.decision.engine_weight > 0 and detected[i]:
            key = repr((inspector.engine, inspector.decision.engine_rows))
            groups.setdefault(key, []).append(i)
    started: list[tuple[list[int], PendingFits]] = []
    for members in groups.values():
        first = work[members[0]][0]
        rows = first.decision.engine_rows
        # windows filled across a gap are not fitted (calibrated_rule.engine_abstains)
        for i in members:
            detected[i] = {t: replace(p, engine_fit=engine_abstains(p.windows, rows))
                           for t, p in detected[i].items()}
        pairs = [residual_pair(p.detection, rows) for i in members
                 for p in detected[i].values() if p.engine_fit is None]
        started.append((members, first.engine_fits(first.engine, pairs, scope) if pairs
                        else list))  # every window abstains: nothing to fit

    def finish() -> list[dict[datetime, Prepared]]:
        for members, pending in started:
            fits = iter(pending())
            for i in members:
                detected[i] = {t: p if p.engine_fit is not None
                               else replace(p, engine_fit=next(fits))
                               for t, p in detected[i].items()}
        return detected

    return finish
