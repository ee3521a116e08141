"""The block-permutation p-value (engine/block_test.py): its resolution lets a real change
reach alpha with whole-day blocks, and it is deterministic. The false-alarm rate itself is
measured by ``bench/false_alarms.py`` (hundreds of inspections), not here."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from engine import CVAggregation
from engine._fitting import prepare
from engine.block_test import block_permutation_pvalue
from engine.selectors import _Selector


def _days(n_days: int, d: int, rng: np.random.Generator, shift: float = 0.0) -> pd.DataFrame:
    hours = np.arange(n_days * 24)
    daily = np.sin(2 * np.pi * hours / 24)[:, None] * np.linspace(1, 3, d)
    day_level = np.repeat(rng.normal(0, 0.3, (n_days, d)), 24, axis=0)  # days differ
    x = 10 + daily + day_level + rng.normal(0, 0.2, (n_days * 24, d))
    x[:, 0] += shift
    return pd.DataFrame(x, columns=[f"s{i}" for i in range(d)])


def _prep(x: pd.DataFrame, y: pd.DataFrame):  # type: ignore[no-untyped-def]
    return prepare(x, y, block_size=24, heuristic="median", device=torch.device("cpu"),
                   dtype=torch.float32)


def test_a_clear_change_reaches_a_small_p_with_day_blocks() -> None:
    rng = np.random.default_rng(1)
    x, y = _days(7, 6, rng), _days(7, 6, rng, shift=2.0)
    p = block_permutation_pvalue(_prep(x, y), 24, 999, seed=0)
    # 7 + 7 days: 1,716 distinct labellings; observed is the most extreme
    assert p <= 0.005
    assert p == block_permutation_pvalue(_prep(x, y), 24, 999, seed=0)  # deterministic


def test_no_change_gives_a_large_p_typically() -> None:
    rng = np.random.default_rng(2)
    ps = [block_permutation_pvalue(_prep(_days(7, 6, rng), _days(7, 6, rng)), 24, 199, seed=s)
          for s in range(20)]
    assert np.mean(np.array(ps) < 0.05) <= 0.2  # 20 nulls: a loose sanity bound
    assert np.median(ps) > 0.2


def test_selectors_use_the_block_test_only_with_blocks() -> None:
    rng = np.random.default_rng(3)
    prep = _prep(_days(7, 4, rng), _days(7, 4, rng))
    sel = _Selector(block_size=None)
    p, parts = sel._p_value(prep, np.array([0.01, 0.02, 0.5, 0.6]))
    # rows: twice the lower median of the splits, weighted-Bonferroni with the moments
    assert parts["split"] == pytest.approx(0.04) and set(parts) == {"split", "moments"}
    assert p == pytest.approx(min(1.0, parts["split"] / 0.25, parts["moments"] / 0.75))
    blocked = _Selector(block_size=24, p_value_permutations=199)
    p, parts = blocked._p_value(prep, np.array([0.0]))
    assert p == block_permutation_pvalue(prep, 24, 199, 0) and parts == {"block": p}


@pytest.mark.slow
def test_cv_aggregation_with_day_blocks_fires_and_names_the_changed_sensor() -> None:
    """The regression that mattered: with block_size = 1 day both the p-value and the
    gate of CV-aggregation used to be unable to pass alpha, so nothing ever fired."""
    rng = np.random.default_rng(4)
    x, y = _days(7, 5, rng), _days(7, 5, rng, shift=1.5)
    sel = CVAggregation(seed=0, device="cpu", block_size=24, n_splits=4).fit(x, y)
    assert sel.p_value < 0.05
    assert sel.selected and sel.selected[0] == "s0"
