"""The moment permutation test and the moment start (engine/moment_test.py, engine/starts.py)."""
from __future__ import annotations

import numpy as np
import torch

from engine.moment_test import moment_permutation_pvalue, moment_statistics, standardise
from engine.splits import block_ids, make_splits, permutation_labels
from engine.starts import memberships, moment_starts, pick_lower


def _labels(n: int, m: int, b: int, seed: int) -> torch.Tensor:
    rng = np.random.default_rng(seed)
    return torch.as_tensor(permutation_labels(block_ids(n, None), block_ids(m, None), b, rng))


def test_statistics_match_numpy_moments():
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(50, 3)), rng.exponential(size=(40, 3))
    z = standardise(torch.as_tensor(x), torch.as_tensor(y))
    t = moment_statistics(z, _labels(50, 40, 3, 0))[0].numpy()  # observed, (3, 4)
    zx, zy = z[:50].numpy(), z[50:].numpy()

    def skew(a: np.ndarray) -> np.ndarray:
        c = a - a.mean(0)
        return (c**3).mean(0) / a.var(0) ** 1.5

    def kurt(a: np.ndarray) -> np.ndarray:
        c = a - a.mean(0)
        return (c**4).mean(0) / a.var(0) ** 2

    se = np.sqrt(np.array([1, 2, 6, 24]) * (1 / 50 + 1 / 40))
    want = np.abs(np.stack([zx.mean(0) - zy.mean(0), np.log(zx.var(0) / zy.var(0)),
                            skew(zx) - skew(zy), kurt(zx) - kurt(zy)], -1)) / se
    np.testing.assert_allclose(t, want, rtol=1e-9)


def test_level_under_the_null_and_power_on_a_spread_change():
    # exact permutation validity: over 200 null data sets the rejection rate at 0.1
    # stays within a binomial band (mean 20, sd 4.2)
    rejections = 0
    for seed in range(200):
        rng = np.random.default_rng(seed)
        x, y = rng.standard_t(3, size=(30, 4)), rng.standard_t(3, size=(25, 4))
        p, _ = moment_permutation_pvalue(torch.as_tensor(x), torch.as_tensor(y),
                                         _labels(30, 25, 99, seed))
        rejections += p <= 0.1
    assert rejections <= 32
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(150, 10)), rng.normal(size=(150, 10))
    y[:, 4] *= 0.5
    p, t = moment_permutation_pvalue(torch.as_tensor(x), torch.as_tensor(y),
                                     _labels(150, 150, 199, 1))
    assert p <= 0.01 and int(t.amax(-1).argmax()) == 4


def test_moment_start_puts_the_weight_on_the_changed_variable():
    rng = np.random.default_rng(2)
    x, y = rng.normal(size=(300, 6)), rng.normal(size=(300, 6))
    y[:, 1] = rng.choice([-0.95, 0.95], size=300) + 0.2 * rng.normal(size=300)
    splits = make_splits(300, 300, 3, rng)
    in_x = memberships(splits.x_train, 300, 0, 600)
    in_y = memberships(splits.y_train, 300, 300, 600)
    assert in_x.sum(1).tolist() == [150] * 3 and in_y[:, :300].sum() == 0
    start = moment_starts(torch.as_tensor(x), torch.as_tensor(y), in_x, in_y)
    assert start.shape == (3, 6)
    assert (start.argmax(-1) == 1).all() and torch.allclose(start[:, 1], torch.full((3,), 6**0.5, dtype=start.dtype))


def test_pick_lower_keeps_the_start_with_the_lower_objective():
    w = torch.arange(2 * 4 * 3, dtype=torch.float64).reshape(2, 4, 3)  # K=2, S*L=2*2, A=3
    loss = torch.tensor([[1.0, 5.0, 2.0, 0.5], [float("nan"), 1.0, 0.0, 2.0]])
    kept, start = pick_lower(w, loss, 2)
    assert start.tolist() == [[0, 1], [1, 0]]
    torch.testing.assert_close(kept[0], torch.stack([w[0, 0], w[0, 3]]))
    torch.testing.assert_close(kept[1], torch.stack([w[1, 2], w[1, 1]]))
