"""Selectors end to end: known answers, determinism, labels, JSON, bad input, blocks."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch

from engine import (
    CVAggregation,
    EmptyInputError,
    InvalidParameterError,
    MMDBaseline,
    ModelSelection,
    NonFiniteInputError,
    OptimiserConfig,
    RegressionBaseline,
    ShapeMismatchError,
    TooFewSamplesError,
    TooFewVariablesError,
)

QUICK = {"optimiser": OptimiserConfig(max_epochs=80), "p_value_permutations": 199, "device": "cpu"}
CONTRACT_KEYS = {"method", "labels", "scores", "selected", "candidates", "p_value",
                 "p_value_parts", "threshold", "lambdas", "scores_per_lambda", "split_p_values",
                 "params", "device", "seed", "runtime_s"}


def shifted(n=80, d=10, shift=(3,), size=1.2, seed=0):
    rng = np.random.default_rng(seed)
    x, y = rng.normal(size=(n, d)), rng.normal(size=(n, d))
    y[:, list(shift)] += size
    return x, y


@pytest.fixture(scope="module")
def cv_fit():
    x, y = shifted()
    cols = [f"s{i}" for i in range(10)]
    return CVAggregation(seed=0, n_splits=4, **QUICK).fit(pd.DataFrame(x, columns=cols),
                                                          pd.DataFrame(y, columns=cols))


def test_cv_aggregation_ranks_shifted_variable_first(cv_fit):
    assert cv_fit.labels == [f"s{i}" for i in range(10)]
    assert cv_fit.selected[0] == "s3"
    assert int(np.argmax(cv_fit.scores)) == 3
    assert cv_fit.p_value < 0.05
    assert cv_fit.scores_per_lambda.shape == (6, 10) and cv_fit.lambdas.shape == (6,)
    assert np.all(np.diff(cv_fit.lambdas) > 0)
    assert len(cv_fit.split_p_values) == 4


def test_to_dict_is_json_safe_with_contract_keys(cv_fit):
    d = cv_fit.to_dict()
    assert set(d) == CONTRACT_KEYS
    back = json.loads(json.dumps(d, allow_nan=False))
    assert back["selected"][0] == "s3" and back["method"] == "cv-aggregation"
    assert back["device"] == "cpu" and back["seed"] == 0


@pytest.mark.parametrize("cls", [ModelSelection, MMDBaseline, RegressionBaseline])
def test_other_selectors_rank_shifted_variable_first(cls):
    x, y = shifted(n=100, size=1.5, seed=7)
    res = cls(seed=1, **QUICK).fit(x, y)
    assert res.selected and res.selected[0] == 3
    assert 0 < res.p_value <= 1
    json.dumps(res.to_dict(), allow_nan=False)


def test_same_seed_same_result_and_torch_input():
    x, y = shifted(n=40, d=5, seed=2)
    a = CVAggregation(seed=3, n_splits=2, **QUICK).fit(x, y)
    b = CVAggregation(seed=3, n_splits=2, **QUICK).fit(torch.as_tensor(x), torch.as_tensor(y))
    np.testing.assert_array_equal(a.scores, b.scores)
    assert a.p_value == b.p_value and a.selected == b.selected


def test_null_gives_no_small_p_value_and_selects_nothing():
    rng = np.random.default_rng(5)
    x, y = rng.normal(size=(60, 6)), rng.normal(size=(60, 6))
    res = CVAggregation(seed=0, n_splits=4, **QUICK).fit(x, y)
    assert res.p_value > 0.05
    # not significant: nothing selected, yet the rule's picks and the ranking are kept
    assert res.selected == [] and res.selected_index == []
    assert res.candidates and np.max(res.scores) > 0
    assert set(res.p_value_parts) == {"split", "moments"}
    parts = res.p_value_parts
    assert res.p_value == min(1.0, parts["split"] / 0.25, parts["moments"] / 0.75)


def test_significant_fit_selects_its_candidates(cv_fit):
    assert cv_fit.selected == cv_fit.candidates and cv_fit.p_value < cv_fit.params["alpha"]
    parts = cv_fit.p_value_parts
    assert cv_fit.p_value == min(1.0, parts["split"] / 0.25, parts["moments"] / 0.75)


def test_narrower_variance_is_detected_by_the_moment_part():
    rng = np.random.default_rng(11)
    x, y = rng.normal(size=(120, 8)), rng.normal(size=(120, 8))
    y[:, 5] *= np.sqrt(0.4)
    res = CVAggregation(seed=0, n_splits=4, **QUICK).fit(x, y)
    assert res.p_value_parts["moments"] < 0.01 and res.p_value < 0.05
    assert res.selected and res.selected[0] == 5


def test_bimodal_change_is_found_from_the_moment_start():
    # equal mean and variance; the paper's all-ones start does not see it
    rng = np.random.default_rng(4)
    n, d = 200, 10
    x, y = rng.normal(size=(n, d)), rng.normal(size=(n, d))
    y[:, 2] = rng.choice([-0.95, 0.95], size=n) + rng.normal(size=n) * np.sqrt(1 - 0.95**2)
    res = CVAggregation(seed=0, n_splits=4, **QUICK).fit(x, y)
    assert res.candidates[0] == 2 and res.details["moment_start_share"] > 0
    assert res.p_value < 0.05


def test_constant_column_is_never_selected():
    x, y = shifted(n=60, d=5, shift=(0,), size=2.0)
    x[:, 2] = 7.0
    y[:, 2] = 7.0
    res = CVAggregation(seed=0, n_splits=2, **QUICK).fit(x, y)
    assert 2 not in res.selected and res.scores[2] == 0 and res.selected[0] == 0


def test_all_constant_columns_give_empty_selection():
    x = np.ones((10, 3))
    res = CVAggregation(seed=0, **QUICK).fit(x, x.copy())
    assert res.selected == [] and res.p_value == 1.0
    json.dumps(res.to_dict(), allow_nan=False)


def test_block_size_fit_runs_with_uneven_blocks():
    x, y = shifted(n=70, d=6, shift=(1,), size=1.5, seed=3)
    res = CVAggregation(seed=0, n_splits=3, block_size=8, **QUICK).fit(x, y[:65])
    assert res.selected[0] == 1 and res.params["block_size"] == 8


@pytest.mark.parametrize("x,y,err", [
    (np.zeros((0, 3)), np.zeros((5, 3)), EmptyInputError),
    (np.full((6, 3), np.nan), np.zeros((6, 3)), NonFiniteInputError),
    (np.r_[np.zeros((5, 3)), [[np.inf, 0, 0]]], np.zeros((6, 3)), NonFiniteInputError),
    (np.zeros((6, 3)), np.zeros((6, 4)), ShapeMismatchError),
    (np.zeros(6), np.zeros(6), ShapeMismatchError),
    (np.zeros((3, 3)), np.zeros((6, 3)), TooFewSamplesError),
    (np.zeros((6, 1)), np.zeros((6, 1)), TooFewVariablesError),
    (pd.DataFrame({"a": [1.0] * 5, "b": 2.0}), pd.DataFrame({"a": [1.0] * 5, "c": 2.0}), ShapeMismatchError),
    (pd.DataFrame({"a": [1.0] * 5, "b": 2.0}), pd.DataFrame({"b": [1.0] * 5, "a": 2.0}), ShapeMismatchError),
])
def test_bad_input_raises_named_error(x, y, err):
    with pytest.raises(err) as info:
        CVAggregation(**QUICK).fit(x, y)
    assert len(str(info.value)) > 20


def test_too_few_blocks_and_bad_parameters():
    x, y = shifted(n=20, d=3, shift=(0,))
    with pytest.raises(TooFewSamplesError, match="block_size"):
        CVAggregation(block_size=8, **QUICK).fit(x, y)
    for kwargs in ({"kernel": "rbf"}, {"selection": "top"}, {"alpha": 2}, {"block_size": 0},
                   {"optimiser": "slow"}, {"device": "tpu"}, {"estimator": "cubic"}):
        with pytest.raises(InvalidParameterError):
            CVAggregation(**kwargs).fit(x, y)


def test_variants_run_laplace_mean_linear_mmd():
    x, y = shifted(n=64, d=4, shift=(2,), size=2.0, seed=4)
    for kwargs in ({"kernel": "laplace"}, {"length_scale": "mean"}, {"estimator": "linear"},
                   {"objective": "mmd"}, {"selection": "histogram"}):
        res = CVAggregation(seed=0, n_splits=2, **{**QUICK, **kwargs}).fit(x, y)
        assert int(np.argmax(res.scores)) == 2, kwargs


def test_gate_fallback_keeps_a_ranking_when_no_split_passes():
    x, y = shifted(n=60, d=5, shift=(1,), size=0.6, seed=7)
    # gate_alpha below the smallest possible gate p-value (1/50): no split can pass
    strict = {**QUICK, "n_splits": 3, "n_permutations": 49, "gate_alpha": 0.001}
    kept = CVAggregation(seed=0, **strict).fit(x, y)
    assert kept.details["gate_fallback"] is True
    assert np.max(kept.scores) > 0 and len(kept.selected) >= 1
    paper = CVAggregation(seed=0, gate_fallback=False, **strict).fit(x, y)
    assert np.all(paper.scores == 0) and paper.selected == []
    assert paper.details["gate_fallback"] is False
    # the fallback changes the scores only, never the p-value
    assert paper.p_value == kept.p_value


def test_search_epochs_must_be_positive():
    for bad in (0, -3, 2.5):
        with pytest.raises(InvalidParameterError, match="search_epochs"):
            CVAggregation(search_epochs=bad)
        with pytest.raises(InvalidParameterError, match="search_epochs"):
            ModelSelection(search_epochs=bad)
