"""The engine rule (the retrospective profile): the engine's p-value against
``engine.alpha``, calibrated on the source's own history where the source has one.

:func:`decide_on_engine` fits the two windows (or takes a batched fit of them) and decides
on the engine's p-value; :func:`calibrate_on_source` then combines that p-value with the
block statistic's p-value against its values at earlier daily times of the source
(:mod:`monitor.decision.source_history`, docs/decision.md "The retrospective decision and
the source's history").
"""
from __future__ import annotations

import logging
import math
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from connectors.timeutil import iso
from monitor.decision.sensor_rows import fill_sensor_rows
from monitor.result import DetectionBlock, EngineBlock, InspectionResult, finite

if TYPE_CHECKING:
    from engine.result import Selection
    from monitor.decision.settings import EngineSettings
    from monitor.decision.source_history import StatisticCache
    from monitor.windows import ReadWindow, Windows, WindowSpec

log = logging.getLogger(__name__)
_f = finite  # value -> rounded float, None when not finite


def decide_on_engine(result: InspectionResult, w: Windows, engine: EngineSettings,
                     fitted: Selection | Exception | None = None) -> None:
    """Fit the windows (or take ``fitted``, raising it when it is the fit's error), name
    the engine's candidates and decide on its p-value."""
    if isinstance(fitted, Exception):
        raise fitted
    sel = fitted if fitted is not None else engine.make_selector().fit(w.before, w.after)
    labels = [str(x) for x in sel.labels]
    # The engine's candidates, not its `selected` (empty when p >= alpha): the result
    # contract names the rule's picks on ok results too (docs/result.md).
    fill_sensor_rows(result, w, labels, [float(s) for s in sel.scores],
                     {str(s) for s in sel.candidates})
    p = float(sel.p_value)
    result.test.p_value = _f(p, 8)
    set_status(result, p, engine.alpha)
    result.generator.device = str(sel.device)
    result.engine = EngineBlock.from_dict(sel.to_dict())


def set_status(result: InspectionResult, p: float, alpha: float) -> None:
    """The engine rule's status from its decision p-value ``p``: firing below ``alpha``
    with a sensor named."""
    significant = math.isfinite(p) and p < alpha
    result.status = "firing" if significant and result.selected_sensors else "ok"


def calibrate_on_source(result: InspectionResult, w: Windows, t: datetime,
                        read_window: ReadWindow, spec: WindowSpec, engine: EngineSettings,
                        history: timedelta, cache: StatisticCache | None = None) -> None:
    """The decision of :func:`decide_on_engine`, calibrated on the source's history as
    well: the block statistic at ``t`` against its values at earlier daily times back over
    ``history``, and the decision on ``max(block p-value, history p-value)`` once the
    history holds enough values; ``detection`` reports it. A history that cannot be
    computed is logged and leaves the decision to the block p-value; a source that is
    down raises, as the windows' own read does."""
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

    alpha = engine.alpha
    try:
        hist = source_history(t, w, spec, read_window, engine.make_selector().test_statistics,
                              history, cache)
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
    set_status(result, p, alpha)
