"""Selection rules, lambda search, block-aware splits and permutation tests."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from engine.errors import InvalidParameterError
from engine.lambdas import lambda_sequence, next_lambda, search_lambdas
from engine.optimiser import FAST, PAPER, minimise
from engine.permutation import (
    combine_split_pvalues,
    mmd_permutation_stats,
    random_projections,
    sliced_wasserstein_pvalues,
    sliced_wasserstein_stats,
)
from engine.problems import ProblemSet
from engine.selection import select, select_masks
from engine.splits import block_ids, make_splits, permutation_labels, relabel_blocks


def test_histogram_rule_paper_example_selects_fifth():
    chosen, thr = select(np.array([0.01, 0.02, 0.02, 0.03, 0.1]), "histogram")
    assert chosen.tolist() == [4] and thr == pytest.approx(0.03)


def test_first_empty_rule_takes_more_than_paper_rule():
    chosen, _ = select(np.array([0.01, 0.02, 0.02, 0.03, 0.1]), "first_empty")
    assert 4 in chosen and len(chosen) > 1


@pytest.mark.parametrize("rule", ["histogram", "gap", "first_empty"])
def test_rules_pick_clear_pair_and_handle_zero(rule):
    scores = np.r_[np.full(18, 0.02), 0.9, 1.0] + np.linspace(0, 0.01, 20)
    chosen, _ = select(scores, rule)
    assert set(chosen[:2]) == {18, 19}
    assert chosen[0] == 19  # highest first
    assert select(np.zeros(5), rule)[0].size == 0


def test_gap_rule_keeps_all_when_no_break():
    assert len(select(np.array([1.0, 0.95, 0.9]), "gap")[0]) == 3


def test_gap_rule_never_selects_the_score_just_below_its_gap():
    """Rounding of top * (score / top) put this score above its own threshold, so the
    selection (and Algorithm 3's stop, and with it the engine part's statistic) flipped
    with the data's last digit (issue 31). The rule compares the normalised scores now."""
    scores = np.array([1.4579602721385476, 0.28184776890398816, 0.4699509222543812,
                       0.1127827096131816, 0.07766424205302681])
    chosen, thr = select(scores, "gap")
    assert chosen.tolist() == [0]  # the widest gap lies between 1.458 and 0.470
    assert select_masks(scores[None, :]).tolist() == [[True, False, False, False, False]]
    assert thr == pytest.approx(0.4699509222543812, rel=1e-15)
    rng = np.random.default_rng(0)
    many = rng.lognormal(0, 2, (2000, 5))
    masks = select_masks(many)
    assert all(set(np.flatnonzero(m)) == set(select(v, "gap")[0])
               for v, m in zip(many, masks, strict=True))
    # the selection is always the scores above one gap of the sorted normalised scores
    for v, m in zip(many, masks, strict=True):
        assert v[m].min() > v[~m].max() if (~m).any() else m.all()


def test_unknown_rule_rejected():
    with pytest.raises(InvalidParameterError):
        select(np.ones(3), "nope")


def test_lambda_sequence_is_algorithm3_update():
    assert lambda_sequence(0.01, 9) == pytest.approx([0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 1.78])
    assert next_lambda(1.0) == 1.5


def test_lambda_search_terminates_with_increasing_candidates():
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(40, 5)), rng.normal(size=(40, 5))
    y[:, 1] += 1.0
    ps = ProblemSet.build(torch.as_tensor(x[None]), torch.as_tensor(y[None]), torch.ones(5, dtype=torch.float64))
    res = search_lambdas(ps, rule="gap", chunk=4, max_steps=12)
    assert len(res.candidates) == 6 and np.all(np.diff(res.candidates) > 0)
    assert res.candidates[0] == pytest.approx(0.01) and res.candidates[-1] == pytest.approx(res.upper)
    assert 1 <= len(res.path) <= 12


def test_batched_optimiser_equals_one_problem_at_a_time():
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(2, 30, 3)), rng.normal(size=(2, 30, 3)) + [1.5, 0, 0]
    g = torch.ones(3, dtype=torch.float64)
    lam = torch.tensor([0.01, 0.3], dtype=torch.float64)
    cfg = FAST.__class__(max_epochs=60)
    batch = minimise(ProblemSet.build(torch.as_tensor(x), torch.as_tensor(y), g), lam, config=cfg)
    for k in range(2):
        for j in range(2):
            one = minimise(ProblemSet.build(torch.as_tensor(x[k:k + 1]), torch.as_tensor(y[k:k + 1]), g),
                           lam[j:j + 1], config=cfg)
            np.testing.assert_allclose(one.weights[0, 0].numpy(), batch.weights[k, j].numpy(), rtol=1e-8)
    assert batch.total_epochs == 60 and batch.weights.shape == (2, 2, 3)


def test_fast_optimiser_reaches_paper_objective_with_exact_zeros():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(1, 60, 6))
    y = rng.normal(size=(1, 60, 6)) + [1.0, 0, 0, 0, 0, 0]
    ps = ProblemSet.build(torch.as_tensor(x), torch.as_tensor(y), torch.ones(6, dtype=torch.float64))
    lam = torch.tensor([0.01, 0.5], dtype=torch.float64)
    fast = minimise(ps, lam, config=FAST)
    paper = minimise(ps, lam, config=PAPER)
    assert fast.total_epochs <= FAST.max_epochs < paper.total_epochs
    # within 0.5% of the paper optimiser's objective, in a fraction of its epochs
    assert torch.all(fast.loss <= paper.loss * 1.005)
    w = fast.weights[0, 1]
    assert torch.all(w >= 0) and 0 in w.topk(2).indices and int((w == 0).sum()) >= 3


def test_block_ids_and_splits_keep_blocks_whole():
    assert block_ids(7, 3).tolist() == [0, 0, 0, 1, 1, 1, 2]
    rng = np.random.default_rng(2)
    n, m, b = 50, 47, 6  # neither a multiple of b
    sp = make_splits(n, m, 5, rng, block_size=b)
    for part, size in ((sp.x_train, n), (sp.x_val, n), (sp.y_train, m), (sp.y_val, m)):
        for k in range(5):
            rows = part.index[k][part.mask[k] == 1]
            blocks = set(rows // b)
            for blk in blocks:  # every block present is present entirely
                full = set(range(blk * b, min((blk + 1) * b, size)))
                assert full <= set(rows.tolist())
    for k in range(5):  # train and validation partition the rows
        xr = np.r_[sp.x_train.index[k][sp.x_train.mask[k] == 1], sp.x_val.index[k][sp.x_val.mask[k] == 1]]
        assert sorted(xr.tolist()) == list(range(n))


def test_block_permutations_move_whole_blocks():
    rng = np.random.default_rng(3)
    xb, yb = block_ids(10, 4), block_ids(9, 4)  # blocks of 4,4,2 and 4,4,1
    lab = permutation_labels(xb, yb, 200, rng)
    assert lab.shape == (201, 19)
    assert lab[0].tolist() == [1] * 10 + [0] * 9
    pooled = np.r_[xb, yb + 3]
    for row in lab:
        for blk in np.unique(pooled):
            assert len(set(row[pooled == blk])) == 1  # a block never straddles X and Y
    # X always receives 3 whole blocks
    assert all(len(np.unique(pooled[row == 1])) == 3 for row in lab)
    assert relabel_blocks(np.array([4, 5, 9, 10, 12]), 4).tolist() == [0, 0, 1, 1, 2]


def test_sliced_wasserstein_matches_pot():
    import ot

    rng = np.random.default_rng(4)
    x, y = rng.normal(size=(15, 4)), rng.normal(size=(11, 4)) + 0.5
    subset = np.array([[True, False, True, True]])
    proj = random_projections(subset, 20, np.array([7]))
    z = torch.as_tensor(np.vstack([x, y])[None])
    lab = torch.as_tensor(np.r_[np.ones(15), np.zeros(11)][None, None])
    stat = sliced_wasserstein_stats(z, lab, torch.ones(1, 26, dtype=torch.float64),
                                    torch.as_tensor(proj)).item()
    # POT with the same directions: pass them as the projection matrix
    ref = ot.sliced_wasserstein_distance(x[:, [0, 2, 3]], y[:, [0, 2, 3]], n_projections=20, p=1,
                                         projections=proj[0][[0, 2, 3]])
    assert stat == pytest.approx(float(ref), rel=1e-8)


def test_permutation_pvalues_calibrated_and_powerful():
    rng = np.random.default_rng(5)
    t, n = 40, 20
    z = torch.as_tensor(rng.normal(size=(t, 2 * n, 2)))
    z[0, :n, 0] += 3.0  # test 0 has a strong difference
    lab = torch.as_tensor(np.stack([permutation_labels(np.arange(n), np.arange(n), 99, rng) for _ in range(t)]))
    proj = torch.as_tensor(random_projections(np.ones((t, 2), bool), 10, np.arange(t)))
    p = sliced_wasserstein_pvalues(z, lab, torch.ones(t, 2 * n, dtype=torch.float64), proj).numpy()
    assert p[0] == pytest.approx(0.01)  # (0 + 1) / (99 + 1)
    assert np.all((p >= 0.01) & (p <= 1)) and np.mean(p[1:] < 0.05) < 0.2


def test_mmd_permutation_stats_observed_equals_estimator():
    from engine.estimators import mmd2_and_variance
    from engine.kernels import ard_kernel

    rng = np.random.default_rng(6)
    x, y = torch.as_tensor(rng.normal(size=(6, 2))), torch.as_tensor(rng.normal(size=(5, 2)))
    w, g = torch.ones(2, dtype=torch.float64), torch.ones(2, dtype=torch.float64)
    z = torch.cat([x, y])
    k = ard_kernel(z, z, w, g)
    lab = torch.as_tensor(np.r_[np.ones(6), np.zeros(5)])[None, None]
    stat = mmd_permutation_stats(k[None], lab, torch.ones(1, 11, dtype=torch.float64)).item()
    ref = mmd2_and_variance(ard_kernel(x, x, w, g), ard_kernel(y, y, w, g), ard_kernel(x, y, w, g))[0]
    assert stat == pytest.approx(ref.item(), rel=1e-10)


def test_combine_split_pvalues_twice_lower_median():
    assert combine_split_pvalues([0.3]) == 0.3
    assert combine_split_pvalues([0.01, 0.02, 0.5, 0.9]) == pytest.approx(0.04)
    assert combine_split_pvalues([0.9] * 10) == 1.0


def test_backtracking_returns_the_best_point_even_with_a_far_too_large_step():
    from dataclasses import replace

    from engine.optimiser import FAST, minimise
    from engine.problems import ProblemSet

    rng = np.random.default_rng(12)
    x, y = rng.normal(size=(1, 30, 6)), rng.normal(size=(1, 30, 6))
    y[..., :2] *= 1.3
    ps = ProblemSet.build(torch.as_tensor(x), torch.as_tensor(y), torch.ones(6, dtype=torch.float64))
    lam = torch.tensor([0.0, 0.05], dtype=torch.float64)
    start = ps.loss(torch.ones(1, 2, 6, dtype=torch.float64), lam)
    wild = replace(FAST, lr=4.0, snap=0.0)
    res = minimise(ps, lam, config=replace(wild, backtrack=0.1))
    assert bool((res.loss <= start + 1e-12).all())
    assert torch.allclose(res.loss, ps.loss(res.weights, lam))
