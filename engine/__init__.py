"""mmdwatch engine: ARD-MMD two-sample variable selection (Mitsuzawa et al.).

    from engine import CVAggregation
    sel = CVAggregation(seed=0).fit(X, Y)    # X (n, D), Y (m, D)
    sel.selected, sel.scores, sel.p_value, sel.to_dict()

Pure computation: no I/O, no global state. Torch is imported with this package; the
CLI imports the engine lazily.

Two families live here:

* the selectors of the paper (``engine.selectors``: torch), imported lazily on first use of
  a name below, so that ``engine.live`` (NumPy only) loads without torch;
* ``engine.live``: the live profile's short-window statistics (residual shift, calibration
  against a site's history, onset estimate).
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from engine.errors import (
        EmptyInputError,
        EngineError,
        InvalidParameterError,
        NonFiniteInputError,
        ShapeMismatchError,
        TooFewSamplesError,
        TooFewVariablesError,
    )
    from engine.optimiser import FAST, PAPER, SMOOTH, OptimiserConfig
    from engine.result import Selection
    from engine.selectors import CVAggregation, MMDBaseline, ModelSelection, RegressionBaseline

_HOMES = {
    **dict.fromkeys(["EmptyInputError", "EngineError", "InvalidParameterError",
                     "NonFiniteInputError", "ShapeMismatchError", "TooFewSamplesError",
                     "TooFewVariablesError"], "engine.errors"),
    **dict.fromkeys(["FAST", "PAPER", "SMOOTH", "OptimiserConfig"], "engine.optimiser"),
    "Selection": "engine.result",
    **dict.fromkeys(["CVAggregation", "MMDBaseline", "ModelSelection", "RegressionBaseline"],
                    "engine.selectors"),
}


def __getattr__(name: str) -> Any:
    """Load a selector-side name on first use (PEP 562)."""
    if name == "METHODS":  # method name (each selector's ``method``) -> selector class
        selectors = importlib.import_module("engine.selectors")
        return {cls.method: cls for cls in (selectors.CVAggregation, selectors.ModelSelection,
                                            selectors.MMDBaseline,
                                            selectors.RegressionBaseline)}
    if name in _HOMES:
        return getattr(importlib.import_module(_HOMES[name]), name)
    raise AttributeError(f"module 'engine' has no attribute {name!r}")

__all__ = [
    "FAST",
    "METHODS",
    "PAPER",
    "SMOOTH",
    "CVAggregation",
    "EmptyInputError",
    "EngineError",
    "InvalidParameterError",
    "MMDBaseline",
    "ModelSelection",
    "NonFiniteInputError",
    "OptimiserConfig",
    "RegressionBaseline",
    "Selection",
    "ShapeMismatchError",
    "TooFewSamplesError",
    "TooFewVariablesError",
]
