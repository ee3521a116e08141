"""MMD estimators and their variances, batched over any leading dimensions.

Kernel blocks come in as ``kxx`` (..., n, n), ``kyy`` (..., m, m), ``kxy`` (..., n, m).
Optional 0/1 masks ``mx`` (..., n) and ``my`` (..., m) (broadcastable to the blocks'
leading dimensions) mark which rows are real: padded rows let splits of different sizes
(whole blocks of uneven length) share one tensor.

Variance of the unbiased MMD^2 (``mmd2_variance``):

* ``"paired"`` (the paper's, Liu et al. 2020; needs n = m and no masks):
  ``V = 4/n^3 sum_i (sum_j H_ij)^2 - 4/n^4 (sum_ij H_ij)^2`` with
  ``H_ij = k(X_i,X_j) + k(Y_i,Y_j) - k(X_i,Y_j) - k(Y_i,X_j)``.
* ``"projection"`` (any n, m, masks): the first-order (Hoeffding) variance
  ``V = 4/n var_i f_x(X_i) + 4/m var_j f_y(Y_j)`` with
  ``f_x(X_i) = mean_{j != i} k(X_i,X_j) - mean_j k(X_i,Y_j)`` and
  ``f_y(Y_j) = mean_{j' != j} k(Y_j,Y_j') - mean_i k(X_i,Y_j)`` (variances over rows,
  divided by the count, like the paper's formula). For n = m it equals the paired form up
  to the cross term ``cov(f_x(X_i), f_y(Y_i))``, whose expectation is zero.
* ``"auto"``: paired when n = m and no masks, else projection.
"""
from __future__ import annotations

from typing import Literal

import torch

from engine.errors import InvalidParameterError

VarianceName = Literal["auto", "paired", "projection"]
RATIO_CONSTANT = 1e-8


def _masked_sums(kxx: torch.Tensor, kyy: torch.Tensor, kxy: torch.Tensor,
                 mx: torch.Tensor | None, my: torch.Tensor | None
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Row sums of the three blocks, restricted to real rows.

    Returns rxx (..., n) = sum_j mx_j kxx_ij (diagonal included), ryy (..., m),
    rxy (..., n) = sum_j my_j kxy_ij, cxy (..., m) = sum_i mx_i kxy_ij.
    """
    if mx is None or my is None:
        return kxx.sum(-1), kyy.sum(-1), kxy.sum(-1), kxy.sum(-2)
    rxx = (kxx * mx.unsqueeze(-2)).sum(-1)
    ryy = (kyy * my.unsqueeze(-2)).sum(-1)
    rxy = (kxy * my.unsqueeze(-2)).sum(-1)
    cxy = (kxy * mx.unsqueeze(-1)).sum(-2)
    return rxx, ryy, rxy, cxy


def _diag_mean(k: torch.Tensor) -> torch.Tensor:
    return torch.diagonal(k, dim1=-2, dim2=-1)


def mmd2_and_variance(
    kxx: torch.Tensor, kyy: torch.Tensor, kxy: torch.Tensor,
    mx: torch.Tensor | None = None, my: torch.Tensor | None = None,
    variance: VarianceName = "auto",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Unbiased MMD^2_U and its variance estimate, each of shape (...)."""
    if (mx is None) != (my is None):
        raise InvalidParameterError("pass both masks or neither")
    sums = _masked_sums(kxx, kyy, kxy, mx, my)
    return mmd2_and_variance_from_sums(
        *sums, _diag_mean(kxx), _diag_mean(kyy), mx, my, variance=variance,
        n_rows=(kxx.shape[-1], kyy.shape[-1]),
    )


def mmd2_and_variance_from_sums(
    rxx: torch.Tensor, ryy: torch.Tensor, rxy: torch.Tensor, cxy: torch.Tensor,
    dx: torch.Tensor | float, dy: torch.Tensor | float,
    mx: torch.Tensor | None, my: torch.Tensor | None, *, variance: VarianceName = "auto",
    n_rows: tuple[int, int],
) -> tuple[torch.Tensor, torch.Tensor]:
    """MMD^2_U and its variance from kernel row sums (what both need, and all they need).

    ``rxx`` (..., n) = sum_j mx_j kxx_ij (diagonal included), ``ryy`` (..., m), ``rxy``
    (..., n) = sum_j my_j kxy_ij, ``cxy`` (..., m) = sum_i mx_i kxy_ij; ``dx``, ``dy`` the
    diagonals k(x_i, x_i) (..., n), (..., m) or one number for all; ``n_rows`` the padded
    row counts. Row sums can come from the full blocks (:func:`mmd2_and_variance`) or from
    each unordered pair once (:class:`engine.problems.ProblemSet`, a third less work).
    """
    n_pad, m_pad = n_rows
    if (mx is None) != (my is None):
        raise InvalidParameterError("pass both masks or neither")
    if mx is None or my is None:
        n = torch.full((), n_pad, dtype=rxx.dtype, device=rxx.device)
        m = torch.full((), m_pad, dtype=ryy.dtype, device=ryy.device)
        sxx = rxx.sum(-1) - (dx.sum(-1) if isinstance(dx, torch.Tensor) else dx * n_pad)
        syy = ryy.sum(-1) - (dy.sum(-1) if isinstance(dy, torch.Tensor) else dy * m_pad)
        sxy = rxy.sum(-1)
    else:
        n, m = mx.sum(-1), my.sum(-1)
        sxx = ((rxx - dx) * mx).sum(-1)
        syy = ((ryy - dy) * my).sum(-1)
        sxy = (rxy * mx).sum(-1)
    mmd2 = sxx / (n * (n - 1)) + syy / (m * (m - 1)) - 2 * sxy / (n * m)

    paired_ok = mx is None and n_pad == m_pad
    if variance == "paired" and not paired_ok:
        raise InvalidParameterError("the paired variance needs n = m and no masks; use 'projection'")
    if variance == "paired" or (variance == "auto" and paired_ok):
        row_h = rxx + ryy - rxy - cxy  # sum_j H_ij, (..., n)
        var = 4 / n**3 * row_h.square().sum(-1) - 4 / n**4 * row_h.sum(-1).square()
        return mmd2, var
    fx = (rxx - dx) / (n.unsqueeze(-1) - 1 if n.dim() else n - 1) - rxy / (
        m.unsqueeze(-1) if m.dim() else m)
    fy = (ryy - dy) / (m.unsqueeze(-1) - 1 if m.dim() else m - 1) - cxy / (
        n.unsqueeze(-1) if n.dim() else n)
    if mx is None or my is None:
        # the mean square deviation by hand: torch's var over a short last dimension is
        # ten times slower on a CPU (its two-pass kernel per row), the same to rounding
        var_x = (fx - fx.mean(-1, keepdim=True)).square().mean(-1)
        var_y = (fy - fy.mean(-1, keepdim=True)).square().mean(-1)
    else:
        mean_x = (fx * mx).sum(-1) / n
        mean_y = (fy * my).sum(-1) / m
        var_x = ((fx - mean_x.unsqueeze(-1)).square() * mx).sum(-1) / n
        var_y = ((fy - mean_y.unsqueeze(-1)).square() * my).sum(-1) / m
    return mmd2, 4 / n * var_x + 4 / m * var_y


def power_ratio(mmd2: torch.Tensor, var: torch.Tensor, c: float = RATIO_CONSTANT) -> torch.Tensor:
    """Test-power proxy ``MMD^2 / sqrt(V + C)``; a negative variance estimate counts as 0."""
    return mmd2 / torch.sqrt(var.clamp_min(0) + c)


def linear_h(kxx_pair: torch.Tensor, kyy_pair: torch.Tensor, kxy_a: torch.Tensor,
             kxy_b: torch.Tensor) -> torch.Tensor:
    """Terms ``h_i = k(X_2i-1, X_2i) + k(Y_2i-1, Y_2i) - k(X_2i-1, Y_2i) - k(X_2i, Y_2i-1)``."""
    return kxx_pair + kyy_pair - kxy_a - kxy_b


def linear_mmd2_and_variance(h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Linear-time MMD^2_l = mean of h (..., P) and the paper's variance estimate.

    ``sigma^2 = (4/n) sum_l (h_{2l-1} - h_{2l})^2`` over consecutive pairs of terms
    (Gretton et al. 2012, eq. 7; n = 2P rows), i.e. the mean of squared differences of
    consecutive h terms. An odd last term is dropped from the variance.
    """
    mmd2 = h.mean(-1)
    p2 = (h.shape[-1] // 2) * 2
    pairs = h[..., :p2].unflatten(-1, (p2 // 2, 2))
    var = (pairs[..., 0] - pairs[..., 1]).square().mean(-1)
    return mmd2, var
