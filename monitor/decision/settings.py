"""The settings an inspection decides with: the engine's (:class:`EngineSettings`, and the
:class:`Selector` it makes) and the decision rule's (:class:`DecisionSettings`). They live
here, below both the inspection (:mod:`monitor.inspection`) and the rules that read them
(:mod:`monitor.decision.engine_rule`, :mod:`monitor.decision.calibrated_rule`), so that
neither imports the other for its types; :mod:`monitor.compose` builds them from the
config.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from engine.live.calibration import CalibrationSettings
from engine.live.engine_power import ENGINE_ROWS, ENGINE_WEIGHT
from engine.live.residual_shift import DetectorSettings
from monitor.names import DEFAULT_METHOD, SELECTORS

if TYPE_CHECKING:  # pandas, numpy and torch load only when an inspection runs
    import numpy as np
    import numpy.typing as npt
    import pandas as pd

    from engine.result import Selection

__all__ = ["DecisionSettings", "EngineSettings", "Selector"]


class Selector(Protocol):
    """An engine selector (engine/selectors.py): before rows x, after rows y -> Selection."""

    def fit(self, x: pd.DataFrame, y: pd.DataFrame) -> Selection: ...

    def test_statistics(self, pairs: Sequence[tuple[pd.DataFrame, pd.DataFrame]]
                        ) -> npt.NDArray[np.float64]: ...


@dataclass(frozen=True)
class EngineSettings:
    method: str = DEFAULT_METHOD
    alpha: float = 0.05
    seed: int = 0
    device: str = "auto"
    block_rows: int | None = None
    params: tuple[tuple[str, Any], ...] = ()

    def selector_spec(self) -> tuple[str, dict[str, Any]]:
        """The selector's class name in :mod:`engine` and its constructor's arguments,
        without importing the engine (what a one-shot command sends the process that fits,
        :mod:`monitor.engine_process`)."""
        return SELECTORS[self.method], {"seed": self.seed, "device": self.device,
                                        "alpha": self.alpha, "block_size": self.block_rows,
                                        **dict(self.params)}

    def make_selector(self) -> Selector:
        """The engine selector for these settings (imports torch: call it lazily)."""
        import engine

        name, kwargs = self.selector_spec()
        selector: Selector = getattr(engine, name)(**kwargs)
        return selector


@dataclass(frozen=True)
class DecisionSettings:
    """How an inspection decides to fire (the rules: :mod:`monitor.decision.engine_rule`,
    :mod:`monitor.decision.calibrated_rule`).

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
