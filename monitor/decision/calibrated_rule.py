"""The calibrated rule (the live profile): two statistics of the residual windows, each
calibrated against the site's own history, and the decision on their weighted Bonferroni
combination (docs/decision.md "The calibrated rule").

The statistics are :mod:`engine.live.residual_shift` (the level part) and
CV-aggregation's validation power on the same residuals (:mod:`engine.live.engine_power`,
the engine part); their calibration is :mod:`engine.live.calibration`. This module applies
them to one inspection's windows and fills its result: the detection block, the status,
and the sensors named by the part that fired.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import timedelta
from functools import partial
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

from connectors.timeutil import format_duration
from engine.live.calibration import TailFit
from engine.live.engine_power import ENGINE_STATISTIC
from engine.live.residual_shift import STATISTIC, uncovered_slots
from monitor.decision.sensor_rows import (
    add_engine_scores,
    by_name,
    fill_sensor_rows,
    means_by_name,
)
from monitor.result import (
    CALIBRATED,
    DetectionBlock,
    EngineBlock,
    EnginePart,
    InspectionResult,
    finite,
)

if TYPE_CHECKING:
    import numpy.typing as npt

    from engine.live.residual_shift import Detection
    from engine.result import Selection
    from monitor.decision.settings import DecisionSettings, EngineSettings, Selector
    from monitor.windows import Windows

log = logging.getLogger(__name__)
_f = finite  # value -> rounded float, None when not finite


@dataclass(frozen=True)
class Prepared:
    """What the calibrated rule computes at one time before it needs the history: the
    windows, the level statistic's detection and the engine part's fit of the residuals
    (None: the engine part is off; an exception: its fit failed)."""

    windows: Windows
    detection: Detection
    engine_fit: Selection | Exception | None = None


def _history_span(values: int, cal: Any) -> str:
    """``values`` history values as time: "2.0 days" at an hourly cadence (as before),
    "60s" at 5 s."""
    span = values * cal.inspection_interval
    if span >= timedelta(days=1) or cal.inspection_interval >= timedelta(hours=1):
        return f"{span / timedelta(days=1):.1f} days"
    return "0s" if not span else format_duration(span)


#: What an engine-part fit computes. ``"full"``: everything a firing result's ``engine``
#: block reports, the fit's own permutation p-value included. ``"decision"``: what every
#: result needs, the statistic and each sensor's score (and the candidates the engine
#: names), without that p-value (:data:`~engine.live.engine_power.DECISION_PARAMS`): a
#: firing result's block is then fitted again in full
#: (:meth:`monitor.inspection.Inspector.complete_engine_blocks`). ``"history"``: the
#: statistic alone, for a history value (:data:`~engine.live.engine_power.HISTORY_PARAMS`).
FitScope: TypeAlias = Literal["full", "decision", "history"]


#: The engine part abstains where more than this share of the readings of its two
#: samples (the before window's last ``engine_rows``, the after window) were filled by
#: interpolation across a gap: a filled stretch is a straight line, which the fit tells
#: from measured rows at once (docs/decision.md, "The engine part across a gap").
ENGINE_MAX_FILLED = 0.1


class EngineAbstains(Exception):
    """The engine part does not fit these windows (the message says why); the level part
    decides alone, at the whole level, as whenever the engine part cannot vote."""


def engine_abstains(windows: Windows, rows: int) -> EngineAbstains | None:
    """Why the engine part should not fit ``windows``: more than :data:`ENGINE_MAX_FILLED`
    of the readings of its samples (the before window's last ``rows``, the after window)
    filled across a gap (None: it fits them)."""
    import numpy as np

    if windows.filled is None:
        return None
    before, after = windows.filled
    cells = np.concatenate([before[-rows:].ravel(), after.ravel()])
    share = float(cells.mean()) if cells.size else 0.0
    if share <= ENGINE_MAX_FILLED:
        return None
    return EngineAbstains(f"{share:.0%} of the readings it would compare were filled across "
                          f"a gap in the data (at most {ENGINE_MAX_FILLED:.0%})")


def engine_part_settings(engine: EngineSettings, *, scope: FitScope = "full"
                         ) -> EngineSettings:
    """The engine part's CV-aggregation (whatever ``engine.method`` names for the engine
    rule and reports): the engine settings with
    :data:`~engine.live.engine_power.ENGINE_PART_PARAMS` over them (and
    :data:`~engine.live.engine_power.ENGINE_PART_DEFAULTS` under them): float64, so that a
    batched fit (the history) and a single one (each inspection, one per job on an
    executor) agree to 1e-14, not float32's 1e-6, and a history computed here or on a
    cluster calibrates the same p-values. ``scope``: what the fits compute
    (:data:`FitScope`); the statistic is bit-equal in every scope."""
    from engine.live.engine_power import (
        DECISION_PARAMS,
        ENGINE_PART_DEFAULTS,
        ENGINE_PART_PARAMS,
        HISTORY_PARAMS,
    )

    narrowed = {"full": {}, "decision": DECISION_PARAMS, "history": HISTORY_PARAMS}[scope]
    params = {**ENGINE_PART_DEFAULTS, **dict(engine.params), **ENGINE_PART_PARAMS,
              **narrowed}
    return replace(engine, method="cv-aggregation", params=tuple(sorted(params.items())))


def engine_part_selector(engine: EngineSettings, *, scope: FitScope = "full") -> Selector:
    """The selector of :func:`engine_part_settings` (imports torch)."""
    return engine_part_settings(engine, scope=scope).make_selector()


def fit_engine_pairs(engine: EngineSettings, pairs: Sequence[tuple[Any, Any]],
                     scope: FitScope) -> list[Selection | Exception]:
    """The engine part's fits of residual ``pairs`` ((before, after) frames), one batched
    ``fit_many``; each entry the fit or its error. ``scope``: as
    :func:`engine_part_selector`."""
    return engine_part_selector(engine, scope=scope).fit_many(  # type: ignore[attr-defined]
        list(pairs), errors="return")


#: Fits that were started: called, it returns them (waiting where they run elsewhere).
PendingFits: TypeAlias = Callable[[], "list[Selection | Exception]"]
#: Where an inspector's engine-part fits run: called with (engine, pairs, scope) as
#: :func:`fit_engine_pairs`, it starts them and returns them pending.
#: :func:`fits_here` (this process, when they are asked for), or a one-shot command's
#: :class:`monitor.engine_process.EngineProcess` (a child process, at once).
EngineFits: TypeAlias = Callable[["EngineSettings", Sequence[tuple[Any, Any]], FitScope],
                                 PendingFits]


def fits_here(engine: EngineSettings, pairs: Sequence[tuple[Any, Any]], scope: FitScope
              ) -> PendingFits:
    """:func:`fit_engine_pairs` in this process, run when the pending fits are asked for."""
    return partial(fit_engine_pairs, engine, list(pairs), scope)


def lacks_own_p_value(result: dict[str, Any]) -> bool:
    """Whether a result's ``engine`` block came from a fit of scope ``"decision"`` (a
    firing result of a first pass: a backfill's written times, an agent catching up),
    which leaves out the fit's own p-value."""
    block = result.get("engine")
    return isinstance(block, dict) and \
        (block.get("params") or {}).get("compute_p_value") is False


def engine_part(det: Detection, decision: DecisionSettings, engine: EngineSettings,
                fit: Selection | Exception | None = None
                ) -> tuple[Selection | None, float | None]:
    """The engine part's fit of the residual windows and its statistic; (None, None) when
    the part is off or its fit failed, which leaves the decision to the level part (logged,
    never an error). ``fit``: the fit already computed in a batch (:class:`Prepared`),
    else it is fitted here."""
    from engine.live.engine_power import residual_pair, validation_power

    if decision.engine_weight <= 0:
        return None, None
    if fit is None:
        try:
            fit = engine_part_selector(engine).fit(*residual_pair(det, decision.engine_rows))
        except Exception as exc:  # noqa: BLE001 - the level part still decides
            fit = exc
    if isinstance(fit, EngineAbstains):
        log.info("engine part: not fitted (%s); the level part decides alone", fit)
        return None, None
    if isinstance(fit, Exception):
        log.warning("engine part: CV-aggregation could not fit the residual windows "
                    "(%s); the level part decides alone", fit)
        return None, None
    return fit, validation_power(fit.details)


def decide_calibrated(result: InspectionResult, w: Windows, history: npt.ArrayLike | None,
                      decision: DecisionSettings, engine: EngineSettings,
                      prepared: Prepared | None = None) -> None:
    """The level statistic and the engine part's statistic, each with its p-value from
    ``history`` ((n, 2): level, engine statistic with NaN where missing; (n,): the level
    statistic alone); the decision on their weighted Bonferroni combination; on firing,
    the sensors named by the part that fired. ``prepared``: the detection and the engine
    fit of ``w`` computed beforehand in a batch (a backfill's first pass), used as they
    are: the decision is the same as with them computed here."""
    import numpy as np

    from engine.live.engine_power import combine
    from engine.live.residual_shift import detect, seconds_after

    d = decision
    det = prepared.detection if prepared is not None else \
        detect(w.before_raw, w.after_raw, d.detector, w.spread)
    hist = np.asarray([] if history is None else history, dtype=float)
    if hist.ndim == 1 and hist.size:
        hist = np.column_stack([hist, np.full(hist.size, np.nan)])
    hist = hist.reshape(-1, hist.shape[1] if hist.ndim == 2 else 2)
    level_hist = hist[:, 0]
    engine_hist = hist[np.isfinite(hist[:, 1]), 1]
    cal = d.calibration
    block = DetectionBlock(
        statistic=STATISTIC, value=_f(det.value), p_value=None, level=_f(cal.level, 8),
        threshold=None, history_n=int(level_hist.size), history_needed=cal.min_count,
        false_incident_interval=format_duration(cal.false_incident_interval))
    result.detection = block
    result.test.decision = CALIBRATED
    labels = [str(c) for c in w.before.columns.tolist()]
    # what the sensor was expected to read over the after window: its raw mean less the
    # shift the statistic measured (profile, local level and common mode accounted for)
    raw_after, shift = means_by_name(w.after_raw), by_name(det.shift)
    expected = {s: float(raw_after[s] - shift[s]) for s in labels}
    # every call names the same channels: their z and what the change text states
    rows = partial(fill_sensor_rows, z=by_name(det.z), expected=expected,
                   z_spread=by_name(det.z_spread),
                   spreads=w.spread.medians() if w.spread is not None else {},
                   z_cycle=by_name(det.z_cycle), cycles=by_name(det.cycle_factor))
    strength = det.evidence()
    evidence = [strength[s] for s in labels]  # the sensors' share of the statistic
    fit = prepared.engine_fit if prepared is not None else None
    sel, power = engine_part(det, d, engine,
                             fit if fit is not None else engine_abstains(w, d.engine_rows))
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
        result.status = "calibrating"
        result.calibration = (f"calibrating: {_history_span(level_hist.size, cal)} of "
                              f"{_history_span(cal.min_count, cal)} of history; "
                              "no alert until then (backfill the source's history, "
                              "or wait)")
        rows(result, w, labels, evidence, set())
        add_engine_scores(result, engine_scores)
        return
    if hist.shape[1] > 2:
        # hours of the week the history has not seen (data that begin on a Monday, on
        # their first weekend): said, not acted on (docs/decision.md, "The first weekend")
        offsets = seconds_after(w.after_raw.index, w.t)
        block.extra["uncovered_slots"] = uncovered_slots(hist[:, 2], offsets, w.t.timestamp(),
                                                         d.detector.period)
    level_fit = TailFit.of(level_hist)  # sorted once, asked for a p-value and a threshold
    p_level = level_fit.pvalue(det.value)
    # how far a short history reaches: its own values give p >= 1 / (n + 1); below that
    # only the fitted tail speaks (none: the history cannot give a smaller p-value)
    block.extra["p_floor"] = _f(1.0 / (level_hist.size + 1), 10)
    block.extra["tail_fitted"] = bool(level_fit.scale > 0)
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
        rows(result, w, labels, evidence, set())
        add_engine_scores(result, engine_scores)
        return
    result.status = "firing"
    block.fired_by = combined.part
    if combined.part == "engine" and sel is not None:
        # Named by the engine: its candidates (the variables CV-aggregation selects from
        # its scores), ranked by those scores; at least its top sensor.
        chosen = {str(c) for c in sel.candidates} or {max(engine_scores,
                                                          key=engine_scores.__getitem__)}
        scores = [engine_scores.get(s, 0.0) for s in labels]
        rows(result, w, labels, scores, chosen)
    else:
        # Named by the level part: every sensor whose z**2 alone clears its threshold (at
        # least the strongest), ranked by |z|.
        named = {s for s in labels if strength[s] ** 2 >= limit} or {
            max(labels, key=lambda s: strength[s])}
        rows(result, w, labels, evidence, named)
    add_engine_scores(result, engine_scores)
    if sel is not None:
        result.engine = EngineBlock.from_dict(sel.to_dict())
