"""One home for names: the monitor's torch-free method names agree with the engine's
selectors; the engine raises only EngineError subclasses on purpose."""
from __future__ import annotations

import engine
from monitor import names


def test_monitor_method_names_match_the_engine():
    assert names.METHODS == tuple(engine.METHODS)
    for method, class_name in names.SELECTORS.items():
        cls = getattr(engine, class_name)
        assert cls.method == method
        assert engine.METHODS[method] is cls
    assert names.DEFAULT_METHOD in names.METHODS


def test_estimator_argument_errors_are_engine_errors():
    import pytest
    import torch

    from engine.estimators import mmd2_and_variance

    k = torch.ones(4, 4)
    with pytest.raises(engine.EngineError, match="both masks"):
        mmd2_and_variance(k, k, k, mx=torch.ones(4))
    with pytest.raises(engine.EngineError, match="paired variance"):
        mmd2_and_variance(k, k, k, mx=torch.ones(4), my=torch.ones(4), variance="paired")
