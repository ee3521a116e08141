"""A full-sample permutation test of per-variable moments, the engine's second p-value.

The split test (learned ARD kernel on a training half, permutation test on the validation
half) sees joint changes (correlations, redundant variables), but it tests only half of
the rows with a kernel learned on the other half: on the paper's narrower-variances
setting it passed 0.05 in 4 of 10 data sets, on Laplace never. Changes that show in one
variable's distribution (its mean, spread, asymmetry or tails) are found far more often by
a test on ALL the rows of a statistic that needs no learning:

    T = max over variables d and moments r of |t_{d,r}|,

with ``t`` the difference between X and Y of the mean, the log variance, the skewness and
the kurtosis of variable d, each divided by its standard error under a Gaussian reference
(``sqrt(s^2/n + s^2/m)``, ``sqrt(2/n + 2/m)``, ``sqrt(6/n + 6/m)``, ``sqrt(24/n + 24/m)``).
The scaling only weighs the moments against each other; validity does not rest on it:
the p-value ranks the observed T among T of permuted labels, ``(1 + #{T_b >= T_obs}) /
(B + 1)``, exactly valid whenever the rows are exchangeable under the null (whole blocks
with ``block_size``), for any data distribution.

The engine reports ``min(1, p_split / w, p_moments / (1 - w))``, a weighted Bonferroni
combination of the two valid p-values (still exactly valid), with ``split_weight`` w =
0.25 by default; ``python -m bench.synthetic`` measures it.
"""
from __future__ import annotations

import torch

#: moments compared per variable, in the order of the statistic's last axis
MOMENTS: tuple[str, ...] = ("mean", "log_variance", "skewness", "kurtosis")


def moment_statistics(z: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """|t| of the four moment differences for every labelling: (B+1, A, 4).

    ``z`` (N, A) pooled rows [X; Y], standardised (mean 0, sd 1 per column over all rows);
    ``labels`` (B+1, N) 0/1, 1 = "in X", row 0 observed. Computed in the dtype of ``z``
    (use float64: fourth powers of standardised data lose digits in float32).
    """
    return weighted_moment_statistics(z, labels, 1 - labels)


def weighted_moment_statistics(z: torch.Tensor, in_x: torch.Tensor,
                               in_y: torch.Tensor) -> torch.Tensor:
    """The same for R pairs of row sets: ``in_x``, ``in_y`` (R, N) 0/1 memberships of the
    two samples (rows in neither are left out, e.g. a split's validation rows).
    Returns (R, A, 4); stacked data sets z (S, N, A) give (S, R, A, 4)."""
    nx = in_x.sum(-1, keepdim=True)  # (R, 1)
    ny = in_y.sum(-1, keepdim=True)
    powers = torch.stack([z, z.square(), z.pow(3), z.pow(4)])  # (4, [S,] N, A)
    if z.dim() == 3:  # (4, S, N, A): the memberships broadcast over the data sets
        in_x, in_y, nx, ny = in_x[None], in_y[None], nx[None], ny[None]
    cx = _central(torch.matmul(in_x / nx, powers))  # (4, R, A)
    cy = _central(torch.matmul(in_y / ny, powers))
    tiny = torch.finfo(z.dtype).tiny
    vx, vy = cx[1].clamp_min(tiny), cy[1].clamp_min(tiny)
    t_mean = (cx[0] - cy[0]) / torch.sqrt(1 / nx + 1 / ny)  # the pooled variance is 1
    t_var = (vx.log() - vy.log()) / torch.sqrt(2 / nx + 2 / ny)
    t_skew = (cx[2] / vx.pow(1.5) - cy[2] / vy.pow(1.5)) / torch.sqrt(6 / nx + 6 / ny)
    t_kurt = (cx[3] / vx.square() - cy[3] / vy.square()) / torch.sqrt(24 / nx + 24 / ny)
    return torch.stack([t_mean, t_var, t_skew, t_kurt], dim=-1).abs()


def standardise(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Pooled rows [x; y] (N, A) in float64, mean 0 and sd 1 per column over all rows (a
    transform that does not depend on which rows are X). Stacked data sets, x (S, n, A)
    and y (S, m, A), give (S, N, A)."""
    z = torch.cat([x, y], dim=-2).to(torch.float64)
    sd = z.std(-2, keepdim=True).clamp_min(torch.finfo(torch.float64).tiny)
    return (z - z.mean(-2, keepdim=True)) / sd


def _central(raw: torch.Tensor) -> torch.Tensor:
    """Raw moments E z^1..4 (4, ...) -> mean, variance, third and fourth central moments."""
    m1, m2, m3, m4 = raw
    var = m2 - m1.square()
    c3 = m3 - 3 * m1 * m2 + 2 * m1.pow(3)
    c4 = m4 - 4 * m1 * m3 + 6 * m1.square() * m2 - 3 * m1.pow(4)
    return torch.stack([m1, var, c3, c4])


def moment_permutation_pvalue(x: torch.Tensor, y: torch.Tensor,
                              labels: torch.Tensor) -> tuple[float, torch.Tensor]:
    """p-value of "X and Y differ" from the max moment statistic, and the observed |t|.

    ``x`` (n, A), ``y`` (m, A) non-constant columns; ``labels`` (B+1, n+m) from
    :func:`engine.splits.permutation_labels` (row 0 observed). Returns ``(p, t_obs)`` with
    ``t_obs`` (A, 4).
    """
    z = standardise(x, y)
    t = moment_statistics(z, labels.to(device=z.device, dtype=z.dtype))
    top = t.flatten(1).amax(-1)  # (B+1,)
    obs = top[0]
    exceed = int((top[1:] >= obs - 1e-9 * obs.abs()).sum())
    return (1 + exceed) / top.shape[0], t[0]
