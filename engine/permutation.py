"""Batched, seeded permutation two-sample tests.

Labels come from :func:`engine.splits.permutation_labels` (row 0 = observed), so the same
code serves plain and block permutations. The p-value is ``(1 + #{b: T_b >= T_obs}) /
(B + 1)``, valid (never anti-conservative) for any B.

* :func:`sliced_wasserstein_pvalues`: sliced Wasserstein distance (p = 1) restricted to a
  variable subset, as the paper's permutation test on the selected variables. Projection
  directions come from POT (``ot.sliced.get_random_projections``) and the statistic
  equals ``ot.sliced_wasserstein_distance(..., p=1)`` for the same directions (tested);
  for all permutations at once it is computed from the pooled sorted projections as
  ``W_1 = sum_k |F_X(z_k) - F_Y(z_k)| (z_{k+1} - z_k)``, which needs no re-sorting.
* :func:`mmd_permutation_pvalues`: unbiased MMD^2 with a fixed kernel matrix, all
  permutations as one batched quadratic form.
"""
from __future__ import annotations

import numpy as np
import torch


def _pvalues(stats: torch.Tensor) -> torch.Tensor:
    """stats (T, B+1) with column 0 observed -> p (T,)."""
    obs = stats[:, :1]
    tol = 1e-7 * obs.abs().clamp_min(1e-12)
    exceed = (stats[:, 1:] >= obs - tol).sum(-1)
    return (1 + exceed).to(torch.float64) / stats.shape[1]


def random_projections(subsets: np.ndarray, n_projections: int, seeds: np.ndarray) -> np.ndarray:
    """Unit directions (T, D, n_projections) in the coordinate subspace of each subset.

    ``subsets`` (T, D) bool. Directions on the |S|-sphere are drawn by POT with the
    given per-test seeds and embedded in R^D (zero outside S).
    """
    import ot  # POT: heavy import, only when a test runs

    t, d = subsets.shape
    out = np.zeros((t, d, n_projections))
    for i in range(t):
        idx = np.flatnonzero(subsets[i])
        if idx.size:
            proj = ot.sliced.get_random_projections(idx.size, n_projections, seed=int(seeds[i]))
            out[i, idx] = np.asarray(proj).reshape(idx.size, n_projections)
    return out


def sliced_wasserstein_stats(
    z: torch.Tensor, labels: torch.Tensor, valid: torch.Tensor, projections: torch.Tensor,
    chunk: int = 64,
) -> torch.Tensor:
    """Sliced W_1 statistics (T, B+1).

    ``z`` (T, N, D) pooled samples, ``labels`` (T, B+1, N) 0/1 (1 = X), ``valid`` (T, N)
    0/1 (0 = padding), ``projections`` (T, D, J).
    """
    proj = torch.bmm(z, projections).transpose(1, 2)  # (T, J, N)
    values, order = proj.sort(-1)
    gaps = values.diff(dim=-1)  # (T, J, N-1)
    valid_sorted = valid.unsqueeze(1).expand_as(order).gather(-1, order)  # (T, J, N)
    out = []
    for start in range(0, labels.shape[1], chunk):
        lab = labels[:, start:start + chunk]  # (T, b, N)
        b = lab.shape[1]
        idx = order.unsqueeze(1).expand(-1, b, -1, -1)
        lab_s = lab.unsqueeze(2).expand(-1, -1, order.shape[1], -1).gather(-1, idx)
        vs = valid_sorted.unsqueeze(1)
        wx = lab_s * vs
        wy = (1 - lab_s) * vs
        nx = wx[..., 0, :].sum(-1)[..., None, None]  # per permutation (T, b, 1, 1)
        ny = wy[..., 0, :].sum(-1)[..., None, None]
        cdf = (wx / nx - wy / ny).cumsum(-1)[..., :-1]
        w1 = (cdf.abs() * gaps.unsqueeze(1)).sum(-1)  # (T, b, J)
        out.append(w1.mean(-1))
    return torch.cat(out, dim=1)


def sliced_wasserstein_pvalues(
    z: torch.Tensor, labels: torch.Tensor, valid: torch.Tensor, projections: torch.Tensor,
) -> torch.Tensor:
    """Permutation p-values (T,) of the sliced Wasserstein statistic. Tests whose
    projections are all zero (empty subset) get p = 1."""
    stats = sliced_wasserstein_stats(z, labels, valid, projections)
    p = _pvalues(stats)
    empty = projections.abs().sum(dim=(1, 2)) == 0
    return torch.where(empty, torch.ones_like(p), p)


def mmd_permutation_stats(kmat: torch.Tensor, labels: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Unbiased MMD^2 (T, B+1) for symmetric kernel matrices (T, N, N), labels (T, B+1, N)
    and validity masks (T, N); the diagonal of ``kmat`` is ignored.

    With ``x`` a permutation's X indicator and ``v = valid``, its Y indicator is ``v - x``,
    so the three sums need one batched product instead of two:
    ``Sxx = x'Kx``, ``Sxy = x'Kv - Sxx``, ``Syy = v'Kv - 2 x'Kv + Sxx``."""
    k0 = kmat * (1 - torch.eye(kmat.shape[-1], dtype=kmat.dtype, device=kmat.device))
    v = valid.to(kmat.dtype).unsqueeze(-1)  # (T, N, 1)
    lx = labels * valid.unsqueeze(1)  # (T, B+1, N)
    kv = torch.bmm(k0, v)  # (T, N, 1)
    sxx = (torch.bmm(lx, k0) * lx).sum(-1)  # (T, B+1)
    xkv = torch.bmm(lx, kv).squeeze(-1)  # (T, B+1)
    vkv = (kv * v).sum(dim=(1, 2)).unsqueeze(-1)  # (T, 1)
    sxy = xkv - sxx
    syy = vkv - 2 * xkv + sxx
    nx = lx.sum(-1)
    ny = v.sum(dim=(1, 2)).unsqueeze(-1) - nx
    return sxx / (nx * (nx - 1)) + syy / (ny * (ny - 1)) - 2 * sxy / (nx * ny)


def mmd_permutation_pvalues(kmat: torch.Tensor, labels: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Permutation p-values (T,) of the unbiased MMD^2 with fixed kernels."""
    return _pvalues(mmd_permutation_stats(kmat, labels, valid))


def combine_split_pvalues(p: np.ndarray) -> float:
    """Cross-fitted split p-values -> one p-value valid under any dependence between them.

    ``min(1, 2 * p_(ceil(K/2)))``: twice the lower median (Rueschendorf 1982; Meng 1993;
    Vovk & Wang 2020: ``(K/k) p_(k)`` is valid for arbitrary dependence). One p-value is
    returned as is.
    """
    p = np.sort(np.asarray(p, dtype=np.float64))
    if p.size == 1:
        return float(p[0])
    k = int(np.ceil(p.size / 2))
    return float(min(1.0, p.size / k * p[k - 1]))
