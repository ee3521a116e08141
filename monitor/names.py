"""Names the monitor shares between its modules, in one place.

Standard library only, so the CLI's ``--help`` and config validation can import it without
pandas or torch. The engine keeps its own names on its selector classes (``method``) and
in ``engine.METHODS``; the monitor cannot import the engine eagerly (torch), so
``tests/engine/test_names.py`` checks that the two agree.
"""
from __future__ import annotations

from typing import Literal, get_args

#: engine method name -> engine selector class name (imported lazily, see
#: ``monitor.decision.settings.EngineSettings.make_selector``)
SELECTORS: dict[str, str] = {
    "cv-aggregation": "CVAggregation",
    "model-selection": "ModelSelection",
    "mmd-baseline": "MMDBaseline",
    "regression-baseline": "RegressionBaseline",
}
METHODS: tuple[str, ...] = tuple(SELECTORS)
DEFAULT_METHOD = "cv-aggregation"

#: how the windows are normalised (see ``monitor.windows``)
Normalise = Literal["before", "first", "zscore", "none"]
NORMALISE: tuple[str, ...] = get_args(Normalise)
DEFAULT_NORMALISE: Normalise = "before"
