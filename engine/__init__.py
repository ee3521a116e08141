"""mmdwatch engine: ARD-MMD two-sample variable selection (Mitsuzawa et al.).

    from engine import CVAggregation
    sel = CVAggregation(seed=0).fit(X, Y)    # X (n, D), Y (m, D)
    sel.selected, sel.scores, sel.p_value, sel.to_dict()

Pure computation: no I/O, no global state. Torch is imported with this package; the
CLI imports the engine lazily.
"""
from engine.errors import (
    EmptyInputError,
    EngineError,
    InvalidParameterError,
    NonFiniteInputError,
    ShapeMismatchError,
    TooFewSamplesError,
    TooFewVariablesError,
)
from engine.optimiser import FAST, PAPER, OptimiserConfig
from engine.result import Selection
from engine.selectors import CVAggregation, MMDBaseline, ModelSelection, RegressionBaseline

#: method name (each selector's ``method``) -> selector class
METHODS = {cls.method: cls for cls in (CVAggregation, ModelSelection, MMDBaseline,
                                       RegressionBaseline)}

__all__ = [
    "FAST",
    "METHODS",
    "PAPER",
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
