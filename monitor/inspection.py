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
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from connectors.timeutil import format_duration, iso
from engine.live.calibration import CalibrationSettings, TailFit
from engine.live.residual_shift import STATISTIC, DetectorSettings
from monitor.names import DEFAULT_METHOD, SELECTORS
from monitor.result import (
    CALIBRATED,
    SCHEMA,
    ChangeTest,
    DataQuality,
    DetectionBlock,
    EngineBlock,
    Generator,
    InspectionResult,
    SensorScore,
    WindowBounds,
    WindowsBlock,
    finite,
)
from monitor.summary import format_change, format_deviation, summarise

if TYPE_CHECKING:  # pandas, numpy and torch load only when an inspection runs
    import numpy.typing as npt
    import pandas as pd

    from engine.result import Selection
    from monitor.windows import WindowIncomplete, Windows, WindowSpec

log = logging.getLogger(__name__)

__all__ = ["SCHEMA", "DecisionSettings", "EngineSettings", "Inspector", "Outcome",
           "ReadWindow", "Selector", "fingerprint", "summarise"]

#: read_window(start, end) -> long frame with columns time (UTC), sensor, value
ReadWindow = Callable[["pd.Timestamp", "pd.Timestamp"], "pd.DataFrame"]


class Selector(Protocol):
    """An engine selector (engine/selectors.py): before rows x, after rows y -> Selection."""

    def fit(self, x: pd.DataFrame, y: pd.DataFrame) -> Selection: ...


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
    ``rule="calibrated"``: the short-window statistic of :mod:`engine.live.residual_shift`, its
    p-value from the site's own history (:mod:`engine.live.calibration`) against the level
    that gives the target mean time between false incidents; the engine then names the
    sensors of every firing inspection.
    """

    rule: str = "engine"
    detector: DetectorSettings = field(default_factory=DetectorSettings)
    calibration: CalibrationSettings = field(default_factory=CalibrationSettings)


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

        try:
            fit_many = getattr(self.engine.make_selector(), "fit_many", None)
        except Exception:  # noqa: BLE001 - bad engine settings: run() records the error
            fit_many = None
        if self.calibrated or fit_many is None or len(times) < 2:
            return [self.run(t, read_window) for t in times]
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
            return [self.run(t, read_window) for t in times]
        prefit = dict(zip(windows, zip(windows.values(), fits, strict=True), strict=True))
        return [self.run(t, read_window, prefit=prefit.get(t)) for t in times]

    def run(self, t: datetime, read_window: ReadWindow,
            history: npt.ArrayLike | None = None,
            prefit: tuple[Windows, Selection | Exception] | None = None) -> Outcome:
        """Inspect at ``t``. Never raises for bad data: such inspections end as ``error``.

        ``history``: past values of the detection statistic of this site (calibrated rule
        only; shape (n,)), from inspections whose after window ended by ``t``.
        ``prefit``: the windows at ``t`` and the engine's fit of them (or its error), when
        :meth:`run_many` fitted several times together (engine rule).
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
                                   else None, result.sensors)
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

    def detect(self, t: datetime, read_window: ReadWindow) -> float | None:
        """The detection statistic alone at ``t`` (history backfill), None on bad data."""
        from engine.live.residual_shift import DetectionError, detect
        from monitor.windows import WindowError

        try:
            windows = self._windows(t, read_window)
            return detect(windows.before_raw, windows.after_raw, self.decision.detector).value
        except (WindowError, DetectionError):
            return None

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
        significant = math.isfinite(p) and p < self.engine.alpha
        result.status = "firing" if significant and result.selected_sensors else "ok"
        result.generator.device = str(sel.device)
        result.engine = EngineBlock.from_dict(sel.to_dict())

    def _decide_calibrated(self, result: InspectionResult, w: Windows,
                           history: npt.ArrayLike | None) -> None:
        """The calibrated rule: statistic -> p-value from history -> on firing, the sensors
        that fire the alert on their own, and the engine's CV-aggregation beside them."""
        import numpy as np

        from engine.live.residual_shift import detect

        d = self.decision
        det = detect(w.before_raw, w.after_raw, d.detector)
        hist = np.asarray([] if history is None else history, dtype=float)
        cal = d.calibration
        block = DetectionBlock(
            statistic=STATISTIC, value=_f(det.value), p_value=None, level=_f(cal.level, 8),
            threshold=None, history_n=int(hist.size), history_needed=cal.min_count,
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
        if hist.size < cal.min_count:
            have = hist.size * cal.inspection_interval / timedelta(days=1)
            need = cal.min_count * cal.inspection_interval / timedelta(days=1)
            result.status = "calibrating"
            result.calibration = (f"calibrating: {have:.1f} of {need:.1f} days of history; "
                                  "no alert until then (backfill the source's history, "
                                  "or wait)")
            self._sensor_rows(result, w, labels, evidence, set(), z, expected)
            return
        fit = TailFit.of(hist)
        p = fit.pvalue(det.value)
        limit = fit.threshold(cal.level)
        block.p_value = _f(p, 10)
        block.threshold = _f(limit)
        result.test.p_value = _f(p, 10)
        if p >= cal.level:
            result.status = "ok"
            self._sensor_rows(result, w, labels, evidence, set(), z, expected)
            return
        # Firing. Named: every sensor whose z**2 alone clears the alert threshold (at least
        # the strongest). The engine's CV-aggregation runs beside it on the residuals (the
        # after window against the latest before rows); on windows of hours it often ranks
        # a steady small shift above a strong one that fills part of the window
        # (README "Decision"), so its scores are reported, not used to rank.
        named = {s for s in labels if z[s] ** 2 >= limit} or {max(labels, key=lambda s: abs(z[s]))}
        self._sensor_rows(result, w, labels, evidence, named, z, expected)
        rows = max(4, d.detector.local_level_rows)  # the rows the statistic compares with
        selector = self.engine.make_selector()
        sel = selector.fit(det.before_residuals.iloc[-rows:], det.after_residuals)
        engine_scores = dict(zip([str(x) for x in sel.labels], [float(v) for v in sel.scores],
                                 strict=True))
        for row in result.sensors:
            row.engine_score = _f(engine_scores.get(row.sensor_id, 0.0))
        result.status = "firing"
        result.generator.device = str(sel.device)
        result.engine = EngineBlock.from_dict(sel.to_dict())
