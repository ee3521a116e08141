"""One inspection: windows -> engine selector -> the result JSON of docs/result.md.

An inspection is a pure job ``(site, inspection_time, settings)`` that reads its windows
through a function it is given, so it runs the same in the daemon, in ``inspect``, in a
backfill, or (later) on a distributed worker. It builds a typed
:class:`monitor.result.InspectionResult` and serialises it once, at the end.
"""
from __future__ import annotations

import hashlib
import json
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from connectors.timeutil import format_duration, iso
from engine.live.calibration import CalibrationSettings, TailFit
from engine.live.engine_power import ENGINE_ROWS, ENGINE_STATISTIC, ENGINE_WEIGHT
from engine.live.residual_shift import STATISTIC, DetectorSettings
from monitor.names import DEFAULT_METHOD, SELECTORS
from monitor.result import (
    CALIBRATED,
    SCHEMA,
    ChangeTest,
    DataQuality,
    DetectionBlock,
    EngineBlock,
    EnginePart,
    Generator,
    InspectionResult,
    SensorScore,
    WindowBounds,
    WindowsBlock,
    finite,
)
from monitor.summary import format_change, format_deviation, summarise

if TYPE_CHECKING:  # pandas, numpy and torch load only when an inspection runs
    import numpy as np
    import numpy.typing as npt
    import pandas as pd

    from engine.live.residual_shift import Detection
    from engine.result import Selection
    from monitor.decision.source_history import StatisticCache
    from monitor.storage.state import HistoryValue
    from monitor.windows import WindowIncomplete, Windows, WindowSpec

log = logging.getLogger(__name__)

__all__ = ["SCHEMA", "DecisionSettings", "EngineSettings", "Inspector", "Outcome",
           "ReadWindow", "Selector", "fingerprint", "read_span", "summarise"]

#: read_window(start, end) -> long frame with columns time (UTC), sensor, value
ReadWindow = Callable[["pd.Timestamp", "pd.Timestamp"], "pd.DataFrame"]


class Selector(Protocol):
    """An engine selector (engine/selectors.py): before rows x, after rows y -> Selection."""

    def fit(self, x: pd.DataFrame, y: pd.DataFrame) -> Selection: ...

    def test_statistics(self, pairs: Sequence[tuple[pd.DataFrame, pd.DataFrame]]
                        ) -> npt.NDArray[np.float64]: ...


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


@dataclass(frozen=True)
class EngineSettings:
    method: str = DEFAULT_METHOD
    alpha: float = 0.05
    seed: int = 0
    device: str = "auto"
    block_rows: int | None = None
    params: tuple[tuple[str, Any], ...] = ()

    def make_selector(self) -> Selector:
        """The engine selector for these settings (imports torch: call it lazily)."""
        import engine

        cls = getattr(engine, SELECTORS[self.method])
        selector: Selector = cls(seed=self.seed, device=self.device, alpha=self.alpha,
                                 block_size=self.block_rows, **dict(self.params))
        return selector


@dataclass(frozen=True)
class DecisionSettings:
    """How an inspection decides to fire.

    ``rule="engine"``: the engine's p-value against ``alpha`` (the retrospective profile).
    ``rule="calibrated"``: two statistics, each with its p-value from the site's own
    history (:mod:`engine.live.calibration`): the level part
    (:mod:`engine.live.residual_shift`) and the engine part, CV-aggregation's validation
    power on the same residuals (:mod:`engine.live.engine_power`). The decision fires when
    their weighted Bonferroni combination (``engine_weight`` to the engine part) is below
    the level that gives the target mean time between false incidents.
    ``engine_rows``: before-window rows the engine part compares with the after window.
    ``source_history`` (engine rule): the block p-value is combined with the block
    statistic's p-value against its values at earlier daily times of the source, back over
    ``calibration.history`` (:mod:`monitor.decision.source_history`).
    """

    rule: str = "engine"
    detector: DetectorSettings = field(default_factory=DetectorSettings)
    calibration: CalibrationSettings = field(default_factory=CalibrationSettings)
    engine_weight: float = ENGINE_WEIGHT
    engine_rows: int = ENGINE_ROWS
    source_history: bool = True


def read_span(spec: WindowSpec, decision: DecisionSettings, t: datetime
              ) -> tuple[pd.Timestamp, pd.Timestamp]:
    """``[start, end)`` of the readings an inspection at ``t`` reads: its two windows and,
    under the engine rule with ``source_history``, the windows of its history's earlier
    times (a job that carries its readings to a worker carries this span)."""
    start, _, end = spec.bounds(t)
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


@dataclass(frozen=True)
class Prepared:
    """What the calibrated rule computes at one time before it needs the history: the
    windows, the level statistic's detection and the engine part's fit of the residuals
    (None: the engine part is off; an exception: its fit failed)."""

    windows: Windows
    detection: Detection
    engine_fit: Selection | Exception | None = None


_f = finite  # value -> rounded float, None when not finite


class Inspector:
    """Runs inspections for one site with fixed window and engine settings."""

    def __init__(self, site: str, spec: WindowSpec, engine: EngineSettings,
                 settings: dict[str, Any], decision: DecisionSettings | None = None) -> None:
        self.site = site
        self.spec = spec
        self.engine = engine
        self.settings = settings  # hashed into fingerprints
        self.decision = decision or DecisionSettings()

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
            history_cache: StatisticCache | None = None) -> Outcome:
        """Inspect at ``t``. Never raises for bad data: such inspections end as ``error``.

        ``history``: past values of the two statistics of this site (calibrated rule only;
        shape (n, 2): level, engine statistic with NaN where missing; (n,): the level
        statistic alone), from inspections whose after window ended by ``t``.
        ``prefit``: the windows at ``t`` and the engine's fit of them (or its error), when
        :meth:`run_many` fitted several times together (engine rule).
        ``history_cache``: the source history's statistics that :meth:`run_many` shares
        between its times (engine rule with ``source_history``).
        """
        from connectors.base import ConnectorError
        from engine.live.residual_shift import DetectionError
        from monitor.windows import WindowError, WindowIncomplete

        started = time.perf_counter()
        result = self._base(t)
        windows = None
        try:
            windows = prefit[0] if prefit is not None else self._windows(t, read_window)
            if self.calibrated:
                self._decide_calibrated(result, windows, history)
            else:
                self._fill(result, windows, None if prefit is None else prefit[1])
                if self.decision.source_history:
                    self._calibrate_on_source(result, windows, t, read_window, history_cache)
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
        # a batched fit's share of its batch (run_many) is part of this inspection's time
        fit_share = float(getattr(prefit[1], "runtime_s", 0.0)) if prefit is not None else 0.0
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

        start, t_utc, end = self.spec.bounds(t)
        return build_windows(read_window(start, end), t_utc, self.spec)

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

        fits = self.fit_engine_many(times, read_window)
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

    def engine_part_selector(self) -> Selector:
        """The engine part's CV-aggregation (whatever ``engine.method`` names for the
        engine rule and reports): the engine settings in float64, so that a
        batched fit (the history, :meth:`detect_many`) and a single one (each inspection,
        one per job on an executor) agree to 1e-14, not float32's 1e-6, and a history
        computed here or on a cluster calibrates the same p-values."""
        params = {**dict(self.engine.params), "dtype": "float64"}
        return replace(self.engine, method="cv-aggregation",
                       params=tuple(sorted(params.items()))).make_selector()

    def fit_engine_many(self, times: Sequence[datetime], read_window: ReadWindow
                        ) -> dict[datetime, Prepared]:
        """The windows, the detection and the engine part's fit at each of ``times``
        whose windows can give the detection (calibrated rule), the engine fits in one
        batched program."""
        from engine.live.engine_power import residual_pair
        from engine.live.residual_shift import DetectionError, detect
        from monitor.windows import WindowError

        out: dict[datetime, Prepared] = {}
        for t in times:
            try:
                w = self._windows(t, read_window)
                out[t] = Prepared(w, detect(w.before_raw, w.after_raw, self.decision.detector))
            except (WindowError, DetectionError):
                continue
        if self.decision.engine_weight <= 0 or not out:
            return out
        rows = self.decision.engine_rows
        fits = self.engine_part_selector().fit_many(  # type: ignore[attr-defined]
            [residual_pair(p.detection, rows) for p in out.values()], errors="return")
        return {t: replace(p, engine_fit=f) for (t, p), f in zip(out.items(), fits, strict=True)}

    def _sensor_rows(self, result: InspectionResult, w: Windows, labels: list[str],
                     scores: list[float], chosen: set[str],
                     z: dict[str, float] | None = None,
                     expected: dict[str, float] | None = None) -> None:
        """Fill ``sensors`` (ranked: score, then |z|, then name) and ``selected_sensors``."""
        z = z or {}
        order = sorted(range(len(labels)),
                       key=lambda i: (-scores[i] if math.isfinite(scores[i]) else math.inf,
                                      -abs(z.get(labels[i], 0.0)), labels[i]))
        mb, ma = w.before.mean(), w.after.mean()
        rb, ra = w.before_raw.mean(), w.after_raw.mean()
        rows = []
        for r, i in enumerate(order):
            name = labels[i]
            rows.append(SensorScore(
                sensor_id=name, rank=r + 1, score=_f(scores[i]), selected=name in chosen,
                mean_before=_f(mb[name]), mean_after=_f(ma[name]),
                raw_mean_before=_f(rb[name]), raw_mean_after=_f(ra[name]),
                z=_f(z[name], 4) if name in z else None,
                expected_after=_f(expected[name]) if expected and name in expected else None,
                change=(format_deviation(_f(ra[name]), _f(expected[name]))
                        if expected and name in expected
                        else format_change(_f(rb[name]), _f(ra[name])))))
        result.sensors = rows
        # selected sensors listed by rank
        result.selected_sensors = [s.sensor_id for s in rows if s.selected]

    def _fill(self, result: InspectionResult, w: Windows,
              fitted: Selection | Exception | None = None) -> None:
        """The engine rule: fit the windows (or take ``fitted``, raising it when it is the
        fit's error) and decide on its p-value."""
        if isinstance(fitted, Exception):
            raise fitted
        sel = fitted if fitted is not None else self.engine.make_selector().fit(w.before, w.after)
        labels = [str(x) for x in sel.labels]
        # The engine's candidates, not its `selected` (empty when p >= alpha): the result
        # contract names the rule's picks on ok results too (docs/result.md).
        self._sensor_rows(result, w, labels, [float(s) for s in sel.scores],
                          {str(s) for s in sel.candidates})
        p = float(sel.p_value)
        result.test.p_value = _f(p, 8)
        self._decide_engine(result, p)
        result.generator.device = str(sel.device)
        result.engine = EngineBlock.from_dict(sel.to_dict())

    def _decide_engine(self, result: InspectionResult, p: float) -> None:
        """The engine rule's status from its decision p-value ``p``."""
        significant = math.isfinite(p) and p < self.engine.alpha
        result.status = "firing" if significant and result.selected_sensors else "ok"

    def _calibrate_on_source(self, result: InspectionResult, w: Windows, t: datetime,
                             read_window: ReadWindow,
                             cache: StatisticCache | None = None) -> None:
        """The engine rule's decision, calibrated on the source's history as well: the
        block statistic at ``t`` against its values at earlier daily times, and the
        decision on ``max(block p-value, history p-value)`` once the history holds enough
        values (:mod:`monitor.decision.source_history`); ``detection`` reports it."""
        from monitor.decision.source_history import (
            SOURCE_HISTORY,
            SOURCE_STATISTIC,
            history_needed,
            source_history,
        )

        p_block = result.test.p_value
        if p_block is None:
            return
        from connectors.base import ConnectorError

        alpha = self.engine.alpha
        try:
            hist = source_history(t, w, self.spec, read_window,
                                  self.engine.make_selector().test_statistics,
                                  self.decision.calibration.history, cache)
        except ConnectorError:
            raise  # the source is down: retried, as the windows' own read is
        except Exception:  # the block p-value still decides
            log.exception("the source's history at %s could not be computed; the block "
                          "p-value decides alone", iso(t))
            return
        block = DetectionBlock(statistic=SOURCE_STATISTIC, value=_f(hist.value),
                               level=_f(alpha, 8), history_n=int(hist.values.size),
                               history_needed=history_needed(alpha),
                               extra={"history_span": hist.span})
        result.detection = block
        vote = hist.vote(alpha)
        if vote is None:
            return  # the block p-value decides alone
        p_history, threshold = vote
        block.p_value = _f(p_history, 10)
        block.threshold = _f(threshold)
        p = max(float(p_block), p_history)
        result.test.p_value = _f(p, 8)
        result.test.decision = SOURCE_HISTORY
        self._decide_engine(result, p)

    def _decide_calibrated(self, result: InspectionResult, w: Windows,
                           history: npt.ArrayLike | None) -> None:
        """The calibrated rule: the level statistic and the engine part's statistic, each
        with its p-value from the history; the decision on their weighted Bonferroni
        combination (:mod:`engine.live.engine_power`); on firing, the sensors named by the
        part that fired."""
        import numpy as np

        from engine.live.engine_power import combine
        from engine.live.residual_shift import detect

        d = self.decision
        det = detect(w.before_raw, w.after_raw, d.detector)
        hist = np.asarray([] if history is None else history, dtype=float)
        hist = hist.reshape(-1, 2) if hist.ndim == 2 or hist.size == 0 else \
            np.column_stack([hist, np.full(hist.size, np.nan)])
        level_hist = hist[:, 0]
        engine_hist = hist[np.isfinite(hist[:, 1]), 1]
        cal = d.calibration
        block = DetectionBlock(
            statistic=STATISTIC, value=_f(det.value), p_value=None, level=_f(cal.level, 8),
            threshold=None, history_n=int(level_hist.size), history_needed=cal.min_count,
            false_incident_interval=format_duration(cal.false_incident_interval))
        result.detection = block
        result.test.decision = CALIBRATED
        labels = [str(c) for c in w.before.columns]
        z = {s: float(v) for s, v in det.z.items()}
        # what the sensor was expected to read over the after window: its raw mean less the
        # shift the statistic measured (profile, local level and common mode accounted for)
        raw_after = w.after_raw.mean()
        expected = {s: float(raw_after[s] - det.shift[s]) for s in labels}
        evidence = [abs(z[s]) for s in labels]  # the sensors' share of the statistic
        sel, power = self._engine_part(det)
        engine_scores: dict[str, float] = {}
        if sel is not None:
            engine_scores = dict(zip([str(x) for x in sel.labels],
                                     [float(v) for v in sel.scores], strict=True))
            result.generator.device = str(sel.device)
        part = None
        if d.engine_weight > 0:
            part = EnginePart(statistic=ENGINE_STATISTIC,
                              value=None if power is None else _f(power),
                              weight=d.engine_weight, history_n=int(engine_hist.size))
        block.engine = part
        if level_hist.size < cal.min_count:
            have = level_hist.size * cal.inspection_interval / timedelta(days=1)
            need = cal.min_count * cal.inspection_interval / timedelta(days=1)
            result.status = "calibrating"
            result.calibration = (f"calibrating: {have:.1f} of {need:.1f} days of history; "
                                  "no alert until then (backfill the source's history, "
                                  "or wait)")
            self._sensor_rows(result, w, labels, evidence, set(), z, expected)
            self._engine_scores(result, engine_scores)
            return
        level_fit = TailFit.of(level_hist)  # sorted once, asked for a p-value and a threshold
        p_level = level_fit.pvalue(det.value)
        p_engine = None
        if part is not None and power is not None and engine_hist.size >= cal.min_count:
            engine_fit = TailFit.of(engine_hist)
            p_engine = engine_fit.pvalue(power)
            part.p_value = _f(p_engine, 10)
            part.threshold = _f(engine_fit.threshold(cal.level * d.engine_weight))
        combined = combine(p_level, p_engine, d.engine_weight)
        # the level part's share of the level: all of it while the engine part cannot vote
        level_share = cal.level * (1 - d.engine_weight) if p_engine is not None else cal.level
        limit = level_fit.threshold(level_share)
        block.p_value = _f(combined.p_value, 10)
        block.level_p_value = _f(p_level, 10)
        block.threshold = _f(limit)
        result.test.p_value = _f(combined.p_value, 10)
        if combined.p_value >= cal.level:
            result.status = "ok"
            self._sensor_rows(result, w, labels, evidence, set(), z, expected)
            self._engine_scores(result, engine_scores)
            return
        result.status = "firing"
        block.fired_by = combined.part
        if combined.part == "engine" and sel is not None:
            # Named by the engine: its candidates (the variables CV-aggregation selects
            # from its scores), ranked by those scores; at least its top sensor.
            chosen = {str(c) for c in sel.candidates} or {max(engine_scores,
                                                              key=engine_scores.__getitem__)}
            scores = [engine_scores.get(s, 0.0) for s in labels]
            self._sensor_rows(result, w, labels, scores, chosen, z, expected)
        else:
            # Named by the level part: every sensor whose z**2 alone clears its threshold
            # (at least the strongest), ranked by |z|.
            named = {s for s in labels if z[s] ** 2 >= limit} or {
                max(labels, key=lambda s: abs(z[s]))}
            self._sensor_rows(result, w, labels, evidence, named, z, expected)
        self._engine_scores(result, engine_scores)
        if sel is not None:
            result.engine = EngineBlock.from_dict(sel.to_dict())

    def _engine_part(self, det: Detection) -> tuple[Selection | None, float | None]:
        """The engine part's fit of the residual windows and its statistic; (None, None)
        when the part is off or its fit failed, which leaves the decision to the level
        part (logged, never an error)."""
        from engine.live.engine_power import residual_pair, validation_power

        d = self.decision
        if d.engine_weight <= 0:
            return None, None
        fit: Selection | Exception
        try:
            fit = self.engine_part_selector().fit(*residual_pair(det, d.engine_rows))
        except Exception as exc:  # noqa: BLE001 - the level part still decides
            fit = exc
        if isinstance(fit, Exception):
            log.warning("engine part: CV-aggregation could not fit the residual windows "
                        "(%s); the level part decides alone", fit)
            return None, None
        return fit, validation_power(fit.details)

    @staticmethod
    def _engine_scores(result: InspectionResult, scores: dict[str, float]) -> None:
        """Each sensor row's CV-aggregation score on the residual windows."""
        if scores:
            for row in result.sensors:
                row.engine_score = _f(scores.get(row.sensor_id, 0.0))
