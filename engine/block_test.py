"""The p-value when rows come in exchangeable blocks (``block_size``, e.g. one day).

Hourly sensor data are autocorrelated and daily-periodic, so only whole days may be
exchanged under "nothing changed". The cross-fitted split test (learned kernel on a
training half, permutation test on the validation half) then has too few blocks: with
7-day windows a validation half holds 3 + 3 days, C(6, 3) = 20 labellings, half of them
mirror images, so no split p-value can fall below 0.1 and twice their median never below
0.2: the monitor could never fire (measured in ``bench/false_alarms.py``).

Instead, with blocks, the p-value comes from ONE permutation test on the whole sample:
unbiased MMD^2 with the ARD Gaussian kernel at unit weights and the per-variable median
length scales of the pooled sample. That kernel does not depend on which rows are X and
which are Y, so permuting whole blocks gives an exactly valid test whenever the blocks
are exchangeable, with C(14, 7) / 2 = 1,716 distinct labellings for 7 + 7 days. The
learned weights still rank and select the sensors; they just do not set the p-value.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch

from engine.kernels import KernelName, kernel_matrices
from engine.permutation import mmd_permutation_pvalues, mmd_permutation_stats
from engine.splits import block_ids, permutation_labels

if TYPE_CHECKING:
    from engine._fitting import Prepared


def _unit_kernels(x: torch.Tensor, y: torch.Tensor, gamma: torch.Tensor,
                  kernel: KernelName) -> torch.Tensor:
    """Kernel matrices (T, N, N) of the pooled samples [x; y], x (T, n, A), y (T, m, A),
    under the ARD kernel at unit weights and length scales ``gamma`` (T, A)."""
    z = torch.cat([x, y], dim=1)
    weights = torch.ones(z.shape[0], z.shape[-1], dtype=z.dtype, device=z.device)
    return kernel_matrices(z, weights, gamma, kernel)


def block_permutation_pvalue(prep: Prepared, block_size: int, n_permutations: int, seed: int,
                             kernel: KernelName = "gaussian") -> float:
    """p-value of "X and Y differ" by permuting whole blocks of the pooled sample.

    ``prep``: :class:`engine._fitting.Prepared` (x (n, A), y (m, A), gamma (A,)).
    Deterministic for a given ``seed``; ``(1 + #{T_b >= T_obs}) / (B + 1)``.
    """
    n, m = prep.x.shape[0], prep.y.shape[0]
    rng = np.random.default_rng([int(seed), 0xB10C])  # its own stream: splits unchanged
    labels = permutation_labels(block_ids(n, block_size), block_ids(m, block_size),
                                n_permutations, rng)
    kmat = _unit_kernels(prep.x.unsqueeze(0), prep.y.unsqueeze(0), prep.gamma.unsqueeze(0),
                         kernel)  # (1, N, N)
    lab = torch.as_tensor(labels, dtype=prep.x.dtype, device=prep.x.device).unsqueeze(0)
    valid = torch.ones(1, n + m, dtype=prep.x.dtype, device=prep.x.device)
    return float(mmd_permutation_pvalues(kmat, lab, valid)[0])


def block_statistics(preps: Sequence[Prepared], kernel: KernelName = "gaussian") -> np.ndarray:
    """The block test's statistic of each prepared pair, shape (T,): the unbiased MMD^2
    with the ARD kernel at unit weights and each pair's own median length scales, the
    value :func:`block_permutation_pvalue` ranks among its permutations.

    It does not saturate as a p-value does, so values at different times of one source
    can be ranked against each other (the retrospective decision's history calibration,
    :mod:`engine.live.calibration`). Pairs of one shape are one batched computation.

    >>> import torch
    >>> from engine._fitting import prepare
    >>> g = torch.Generator().manual_seed(0)
    >>> x, y = torch.randn(96, 3, generator=g), torch.randn(96, 3, generator=g)
    >>> same = prepare(x.numpy(), y.numpy(), block_size=24, heuristic="median",
    ...                device=torch.device("cpu"), dtype=torch.float64)
    >>> moved = prepare(x.numpy(), (y + 2).numpy(), block_size=24, heuristic="median",
    ...                 device=torch.device("cpu"), dtype=torch.float64)
    >>> s = block_statistics([same, moved])
    >>> bool(abs(s[0]) < 0.05 < s[1])
    True
    """
    out = np.full(len(preps), np.nan)
    groups: dict[tuple[int, int, int], list[int]] = {}
    for i, prep in enumerate(preps):
        groups.setdefault(prep.shape, []).append(i)
    for (n, m, a), members in groups.items():
        if a == 0:
            out[members] = 0.0  # nothing varies: no difference to measure
            continue
        first = preps[members[0]]
        x = torch.stack([preps[i].x for i in members])
        y = torch.stack([preps[i].y for i in members])
        gamma = torch.stack([preps[i].gamma for i in members])
        kmat = _unit_kernels(x, y, gamma, kernel)  # (T, N, N)
        lab = torch.cat([torch.ones(n), torch.zeros(m)]).to(first.x)
        labels = lab.expand(len(members), 1, n + m)
        valid = torch.ones(len(members), n + m, dtype=first.x.dtype, device=first.x.device)
        out[members] = mmd_permutation_stats(kmat, labels, valid)[:, 0].cpu().numpy()
    return out
