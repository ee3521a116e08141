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

from typing import TYPE_CHECKING

import numpy as np
import torch

from engine.kernels import KernelName, kernel_matrices
from engine.permutation import mmd_permutation_pvalues
from engine.splits import block_ids, permutation_labels

if TYPE_CHECKING:
    from engine._fitting import Prepared


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
    z = torch.cat([prep.x, prep.y]).unsqueeze(0)  # (1, N, A)
    weights = torch.ones(1, z.shape[-1], dtype=z.dtype, device=z.device)
    kmat = kernel_matrices(z, weights, prep.gamma, kernel)  # (1, N, N)
    lab = torch.as_tensor(labels, dtype=z.dtype, device=z.device).unsqueeze(0)
    valid = torch.ones(1, n + m, dtype=z.dtype, device=z.device)
    return float(mmd_permutation_pvalues(kmat, lab, valid)[0])
