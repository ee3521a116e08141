"""Estimators, variances and gradients against direct NumPy references."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from engine.estimators import linear_mmd2_and_variance, mmd2_and_variance, power_ratio
from engine.kernels import ard_kernel, differences, kernel_scale, length_scales
from engine.problems import ProblemSet


def np_kernel(a, b, w, gamma, kind):
    d = a.shape[1]
    diff = a[:, None, :] - b[None, :, :]
    if kind == "gaussian":
        return np.exp(-(w**2 * diff**2 / gamma**2).sum(-1) / d)
    return np.exp(-(np.abs(w) * np.abs(diff) / gamma).sum(-1) / np.sqrt(d))


def np_mmd2(kxx, kyy, kxy):
    n, m = len(kxx), len(kyy)
    return ((kxx.sum() - np.trace(kxx)) / (n * (n - 1)) + (kyy.sum() - np.trace(kyy)) / (m * (m - 1))
            - 2 * kxy.sum() / (n * m))


def np_paired_var(kxx, kyy, kxy):
    n = len(kxx)
    h = np.zeros((n, n))
    for i in range(n):
        for j in range(n):
            h[i, j] = kxx[i, j] + kyy[i, j] - kxy[i, j] - kxy[j, i]
    return 4 / n**3 * (h.sum(1) ** 2).sum() - 4 / n**4 * h.sum() ** 2


def np_projection_var(kxx, kyy, kxy):
    n, m = len(kxx), len(kyy)
    fx = np.array([(kxx[i].sum() - kxx[i, i]) / (n - 1) - kxy[i].mean() for i in range(n)])
    fy = np.array([(kyy[j].sum() - kyy[j, j]) / (m - 1) - kxy[:, j].mean() for j in range(m)])
    return 4 / n * fx.var() + 4 / m * fy.var()


@pytest.mark.parametrize("n,m,d,kind", [(6, 6, 2, "gaussian"), (9, 5, 3, "gaussian"),
                                        (7, 11, 4, "laplace"), (12, 12, 5, "laplace")])
def test_mmd2_and_variances_match_numpy(n, m, d, kind):
    rng = np.random.default_rng(n * 100 + m)
    x, y = rng.normal(size=(n, d)), rng.normal(1, 1.5, size=(m, d))
    w, gamma = rng.uniform(0.2, 2, d), rng.uniform(0.5, 2, d)
    kxx, kyy, kxy = (np_kernel(a, b, w, gamma, kind) for a, b in ((x, x), (y, y), (x, y)))
    t = lambda a: torch.as_tensor(a, dtype=torch.float64)
    tk = [ard_kernel(t(a), t(b), t(w), t(gamma), kind) for a, b in ((x, x), (y, y), (x, y))]
    np.testing.assert_allclose(tk[2].numpy(), kxy, rtol=1e-10)
    mmd2, var = mmd2_and_variance(*tk, variance="projection")
    assert mmd2.item() == pytest.approx(np_mmd2(kxx, kyy, kxy), rel=1e-10)
    assert var.item() == pytest.approx(np_projection_var(kxx, kyy, kxy), rel=1e-10)
    if n == m:
        _, pvar = mmd2_and_variance(*tk, variance="paired")
        assert pvar.item() == pytest.approx(np_paired_var(kxx, kyy, kxy), rel=1e-10)
        _, auto = mmd2_and_variance(*tk)
        assert auto.item() == pytest.approx(pvar.item(), rel=1e-12)
    ratio = power_ratio(mmd2, var)
    assert ratio.item() == pytest.approx(np_mmd2(kxx, kyy, kxy) / np.sqrt(max(var.item(), 0) + 1e-8))


def test_masked_estimates_equal_unpadded():
    rng = np.random.default_rng(3)
    x, y = rng.normal(size=(8, 3)), rng.normal(0.5, 1, size=(6, 3))
    gamma, w = torch.ones(3, dtype=torch.float64), torch.tensor([1.0, 0.5, 2.0], dtype=torch.float64)
    t = lambda a: torch.as_tensor(a, dtype=torch.float64)
    ref = mmd2_and_variance(ard_kernel(t(x), t(x), w, gamma), ard_kernel(t(y), t(y), w, gamma),
                            ard_kernel(t(x), t(y), w, gamma), variance="projection")
    xp = np.vstack([x, rng.normal(size=(3, 3))])  # 3 padded rows that must be ignored
    yp = np.vstack([y, rng.normal(size=(2, 3))])
    mx = t(np.r_[np.ones(8), np.zeros(3)])
    my = t(np.r_[np.ones(6), np.zeros(2)])
    got = mmd2_and_variance(ard_kernel(t(xp), t(xp), w, gamma), ard_kernel(t(yp), t(yp), w, gamma),
                            ard_kernel(t(xp), t(yp), w, gamma), mx, my)
    assert got[0].item() == pytest.approx(ref[0].item(), rel=1e-10)
    assert got[1].item() == pytest.approx(ref[1].item(), rel=1e-10)


def test_problem_set_batches_equal_single_problem_results():
    rng = np.random.default_rng(4)
    x, y = rng.normal(size=(2, 7, 3)), rng.normal(size=(2, 7, 3)) + 0.3
    gamma = torch.ones(3, dtype=torch.float64)
    ps = ProblemSet.build(torch.as_tensor(x), torch.as_tensor(y), gamma)
    w = torch.as_tensor(rng.uniform(0.1, 2, size=(2, 4, 3)))
    mmd2, var = ps.statistics(w)
    for k in range(2):
        for j in range(4):
            tk = [ard_kernel(torch.as_tensor(a), torch.as_tensor(b), w[k, j], gamma)
                  for a, b in ((x[k], x[k]), (y[k], y[k]), (x[k], y[k]))]
            ref = mmd2_and_variance(*tk)
            assert mmd2[k, j].item() == pytest.approx(ref[0].item(), rel=1e-10)
            assert var[k, j].item() == pytest.approx(ref[1].item(), rel=1e-10)


def test_linear_estimator_matches_numpy():
    rng = np.random.default_rng(5)
    n, d = 12, 3
    x, y = rng.normal(size=(n, d)), rng.normal(0.4, 1, size=(n, d))
    w, gamma = np.ones(d), np.ones(d)
    k = lambda a, b: np_kernel(a[None], b[None], w, gamma, "gaussian")[0, 0]
    h = np.array([k(x[2 * i], x[2 * i + 1]) + k(y[2 * i], y[2 * i + 1]) - k(x[2 * i], y[2 * i + 1])
                  - k(x[2 * i + 1], y[2 * i]) for i in range(n // 2)])
    ref_var = np.mean([(h[2 * l] - h[2 * l + 1]) ** 2 for l in range(n // 4)])  # (4/n) sum
    ps = ProblemSet.build(torch.as_tensor(x[None]), torch.as_tensor(y[None]),
                          torch.ones(d, dtype=torch.float64), estimator="linear")
    mmd2, var = ps.statistics(torch.ones(1, 1, d, dtype=torch.float64))
    assert mmd2.item() == pytest.approx(h.mean(), rel=1e-10)
    assert var.item() == pytest.approx(ref_var, rel=1e-10)
    m2, v2 = linear_mmd2_and_variance(torch.as_tensor(h))
    assert m2.item() == pytest.approx(h.mean()) and v2.item() == pytest.approx(ref_var)


@pytest.mark.parametrize("kind,objective", [("gaussian", "ratio"), ("laplace", "ratio"), ("gaussian", "mmd")])
def test_gradient_matches_finite_differences(kind, objective):
    rng = np.random.default_rng(6)
    x, y = rng.normal(size=(1, 9, 3)), rng.normal(size=(1, 8, 3)) + np.array([0.8, 0.0, 0.3])
    ps = ProblemSet.build(torch.as_tensor(x), torch.as_tensor(y), torch.ones(3, dtype=torch.float64),
                          kernel=kind)
    lam = torch.tensor([0.1], dtype=torch.float64)
    a = torch.tensor([[[0.9, 0.7, 1.2]]], dtype=torch.float64, requires_grad=True)
    (grad,) = torch.autograd.grad(ps.loss(a, lam, objective).sum(), a)
    eps = 1e-6
    for i in range(3):
        e = torch.zeros_like(a)
        e[..., i] = eps
        with torch.no_grad():
            fd = (ps.loss(a + e, lam, objective) - ps.loss(a - e, lam, objective)).item() / (2 * eps)
        assert grad[0, 0, i].item() == pytest.approx(fd, rel=1e-5, abs=1e-7)


def test_kernel_scale_and_differences_shapes():
    a, b = torch.randn(4, 5, 3), torch.randn(4, 6, 3)
    assert differences(a, b, "gaussian").shape == (4, 3, 30)
    w = torch.ones(2, 3)
    assert kernel_scale(w, torch.ones(3), "laplace").shape == (2, 3)


def test_length_scale_heuristics_paper_example():
    # Paper appendix: pooled {0,0,0,0,0,2}: squared distances {0 x10, 4 x5}: median 0, mean 4/3.
    z = np.array([[0, 1.0], [0, 2.0], [0, 3.0], [2, 4.0], [0, 5.0], [0, 6.0]])
    mean = length_scales(z, "mean")
    assert mean[0] ** 2 == pytest.approx(4 / 3)
    median = length_scales(z, "median")
    # median 0 is replaced by the smallest positive length scale (here the 2nd variable's).
    second = np.sqrt(np.median([(z[i, 1] - z[j, 1]) ** 2 for i in range(6) for j in range(i + 1, 6)]))
    assert median[0] == pytest.approx(second) and median[1] == pytest.approx(second)


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 8, 9])
def test_circulant_pair_row_sums_and_gradient_match_dense(n):
    from engine.problems import circulant_pairs, pair_gradient, pair_row_sums, pair_weights

    rng = np.random.default_rng(n)
    sym = rng.normal(size=(2, n, n))
    sym = sym + sym.transpose(0, 2, 1)
    sym[:, np.arange(n), np.arange(n)] = 0
    first, second = circulant_pairs(n)
    values = torch.as_tensor(sym[:, first.numpy(), second.numpy()])
    weights = pair_weights(n, None, torch.float64, torch.device("cpu"))
    if weights is not None:
        values = values * weights
    np.testing.assert_allclose(pair_row_sums(values, n).numpy(), sym.sum(-1), atol=1e-12)
    # every unordered pair i != j carries total weight 1
    total = np.zeros((n, n))
    w = np.ones(len(first)) if weights is None else weights.numpy()
    np.add.at(total, (first.numpy(), second.numpy()), w)
    np.testing.assert_allclose(total + total.T, 1 - np.eye(n))
    g = torch.as_tensor(rng.normal(size=(2, n)))
    np.testing.assert_allclose(pair_gradient(g, n).numpy(),
                               (g[:, first] + g[:, second]).numpy(), atol=1e-12)


@pytest.mark.parametrize("kind", ["gaussian", "laplace"])
def test_padded_problem_set_equals_unpadded_with_gradients(kind):
    rng = np.random.default_rng(8)
    x, y = rng.normal(size=(8, 3)), rng.normal(0.5, 1, size=(6, 3))
    xp = np.vstack([x, rng.normal(size=(2, 3))])  # padded rows must be ignored
    yp = np.vstack([y, rng.normal(size=(3, 3))])
    gamma = torch.ones(3, dtype=torch.float64)
    t = lambda a: torch.as_tensor(a[None], dtype=torch.float64)
    plain = ProblemSet.build(t(x), t(y), gamma, kernel=kind)
    padded = ProblemSet.build(t(xp), t(yp), gamma, kernel=kind,
                              mx=t(np.r_[np.ones(8), np.zeros(2)]),
                              my=t(np.r_[np.ones(6), np.zeros(3)]))
    lam = torch.tensor([0.05], dtype=torch.float64)
    grads = []
    for ps in (plain, padded):
        a = torch.tensor([[[0.9, 0.7, 1.2]]], dtype=torch.float64, requires_grad=True)
        loss = ps.loss(a, lam)
        grads.append((loss.item(), torch.autograd.grad(loss.sum(), a)[0].numpy()))
    mmd_plain = plain.statistics(torch.ones(1, 1, 3, dtype=torch.float64))
    mmd_padded = padded.statistics(torch.ones(1, 1, 3, dtype=torch.float64))
    assert mmd_padded[0].item() == pytest.approx(mmd_plain[0].item(), rel=1e-10)
    assert mmd_padded[1].item() == pytest.approx(mmd_plain[1].item(), rel=1e-10)
    assert grads[1][0] == pytest.approx(grads[0][0], rel=1e-10)
    np.testing.assert_allclose(grads[1][1], grads[0][1], rtol=1e-8)


@pytest.mark.parametrize("n", [2, 5, 6, 40])
def test_torch_length_scales_used_on_gpus_equal_numpy(n):
    from engine.kernels import _length_scales_numpy, _length_scales_torch

    rng = np.random.default_rng(n)
    z = rng.normal(size=(n, 5))
    z[:, 2] = np.round(z[:, 2])  # ties
    z[:, 4] = 0.0  # constant
    for heuristic in ("median", "mean"):
        np.testing.assert_allclose(_length_scales_torch(torch.as_tensor(z), heuristic).numpy(),
                                   _length_scales_numpy(z, heuristic), rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("kind", ["gaussian", "laplace"])
def test_pooled_kernel_matrices_are_the_ard_kernel(kind):
    """``kernel_matrices`` (the permutation tests' cdist form) and ``ard_kernel`` (the
    optimiser's scale-times-differences form) are one kernel."""
    from engine.kernels import kernel_matrices

    rng = np.random.default_rng(7)
    z = torch.as_tensor(rng.normal(size=(2, 9, 4)))
    w = torch.as_tensor(rng.uniform(0.2, 2, size=(2, 4)))
    gamma = torch.as_tensor(rng.uniform(0.5, 2, size=4))
    got = kernel_matrices(z, w, gamma, kind)
    for k in range(2):
        np.testing.assert_allclose(got[k].numpy(), ard_kernel(z[k], z[k], w[k], gamma, kind).numpy(),
                                   rtol=1e-10, atol=1e-12)
