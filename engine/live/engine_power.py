"""The paper's engine inside the live decision: CV-aggregation's test power on the
detector's residual windows, and its weighted Bonferroni combination with the level part.

At every inspection of the live profile, CV-aggregation (:class:`engine.CVAggregation`)
fits the detector's residuals (hour-of-day profile and common mode removed, see
:mod:`engine.live.residual_shift`): the last ``rows`` hours of the before window against
the after window. Its statistic is the **validation power**

    P = mean over splits k and lambdas l of max(l_val[k, l], 0),

the power ratio (unbiased MMD^2 over its standard deviation) of the kernel learned on a
split's training half, measured on its validation half. It sees a change of a sensor's
distribution (noise, a stuck value, a changed daily cycle), not only of its level, and it
does not saturate as a permutation p-value does (a p-value at its 1/(B+1) floor cannot be
ranked against a history).

Why not the engine's own p-value: the residuals of the before rows are in-sample for the
profile they were taken from and those of the after rows are out-of-sample, and the rows
are autocorrelated, so a permutation p-value on residuals is not calibrated (on dev-cycle
it was below 0.005 on 1 of 17 unchanged inspections). ``P`` is therefore calibrated like
the level statistic, against the same statistic at the site's earlier inspections
(:mod:`engine.live.calibration`), which carry the same bias.

The decision combines the two calibrated p-values by a weighted Bonferroni rule, valid for
weights fixed in advance (each part is at most ``weight x level`` often below its share):

    p = min(1, p_level / (1 - w), p_engine / w),     w = ``engine_weight``.

Shapes: residual frames are (n, D) with the sensors as columns.

>>> c = combine(0.0004, 0.5, 0.35)
>>> round(c.p_value, 7), c.part
(0.0006154, 'level')
>>> combine(0.2, 0.0002, 0.35).part
'engine'
>>> combine(0.01, None, 0.35)  # no engine history yet: the level part alone, unweighted
Combined(p_value=0.01, part='level')
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

    from engine.live.residual_shift import Detection

#: the name of the engine part's statistic in results
ENGINE_STATISTIC = "cv-aggregation-power"
#: the engine part's share of the alert level with a daily profile (docs/decision.md, "The
#: weight"); a config derives 0.35 for data without one
#: (monitor.config.ENGINE_WEIGHT_WITHOUT_PROFILE)
ENGINE_WEIGHT = 0.1
#: before-window rows (hours) the engine compares with the after window
ENGINE_ROWS = 24
#: The engine part's CV-aggregation settings over the engine section's: float64, so that
#: a batched fit and a single one agree to 1e-14; ``engine.SMOOTH`` (40 epochs, a cosine
#: step size down to 0, the last iterate; no early stop, plateau cut, backtracking or
#: snap), so that the statistic is a continuous function of the data: a 1e-9 change of
#: the fit's inputs moves it by 5e-8 at the 99th percentile of the hours of d1-d4, where
#: ``FAST`` moved it by 5e-6 (``python -m bench.sensitivity``). Over six seeds it names
#: the benches' changes as FAST did (docs/decision.md, "The engine part"). Issue 31.
ENGINE_PART_PARAMS: dict[str, Any] = {"dtype": "float64", "optimiser": "smooth"}
#: How the engine part's statistic is computed, stored with the site's calibration
#: history: a state whose engine values another version computed drops them
#: (``monitor.fleet.sites.current_engine_statistics``).
ENGINE_PART_VERSION = "cv-aggregation, engine.SMOOTH (issue 31)"
#: ... and over those for a history value, of which only the statistic is kept: no split
#: or moment permutation test (the fit's own p-value, reported in a firing result's
#: ``engine`` block; a sixth of a fit's time) and no gate test (it only weights the
#: scores; a tenth). The statistic is bit-equal either way.
HISTORY_PARAMS: dict[str, Any] = {"compute_p_value": False, "gate_test": "none"}
#: ... and over those for a result that is not yet known to fire: the statistic and each
#: sensor's score (the gate weights the scores that every result reports), without the
#: fit's own p-value, which only a firing result reports (a third of a fit's time on
#: d1-sized residuals). Scores, candidates and the statistic are bit-equal to a full fit.
DECISION_PARAMS: dict[str, Any] = {"compute_p_value": False}
#: Its defaults where the engine section sets nothing: its batches on every core, threads
#: that time-share a busy machine rather than spin (docs/engine.md, "Speed"); an engine
#: section's ``params: {n_jobs: 1}`` keeps it on one.
ENGINE_PART_DEFAULTS: dict[str, Any] = {"n_jobs": -1}
#: The engine part before issue 31, for comparison (``bench.sensitivity``): the same search
#: with ``engine.FAST`` (early stop, plateau cuts, backtracking, the best iterate, snap).
#: Its Adam steps at lr 0.5 amplify a change of the data about a thousandfold.
FAST_PARAMS: dict[str, Any] = {"dtype": "float64", "optimiser": "fast"}


@dataclass(frozen=True)
class Combined:
    """The decision's p-value and the part that gave it ("level" or "engine")."""

    p_value: float
    part: str


def residual_pair(detection: Detection, rows: int = ENGINE_ROWS
                  ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The engine's two samples: the last ``rows`` before residuals, (rows, D), and the
    after residuals, (n_a, D), both scaled and with the common mode removed."""
    return detection.before_residuals.iloc[-rows:], detection.after_residuals


def validation_power(details: dict[str, Any]) -> float:
    """``P``, the mean of max(l_val, 0) over splits and lambdas, from a CV-aggregation fit's
    ``details["val_ratio"]`` ((K, L); NaN where a split could not be measured counts 0).

    >>> validation_power({"val_ratio": [[1.0, -2.0], [float("nan"), 3.0]]})
    1.0
    """
    ratio = np.asarray(details.get("val_ratio", []), dtype=float)
    if ratio.size == 0:
        return 0.0
    return float(np.clip(np.nan_to_num(ratio, nan=0.0), 0.0, None).mean())


def combine(p_level: float, p_engine: float | None, weight: float) -> Combined:
    """The weighted Bonferroni combination of the two calibrated p-values. ``p_engine``
    None (the engine part has no calibrated history yet) or ``weight`` 0: the level part
    alone at the whole level."""
    if p_engine is None or weight <= 0:
        return Combined(float(p_level), "level")
    level_part = p_level / (1.0 - weight)
    engine_part = p_engine / weight
    if engine_part < level_part:
        return Combined(float(min(1.0, engine_part)), "engine")
    return Combined(float(min(1.0, level_part)), "level")
