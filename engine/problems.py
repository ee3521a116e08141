"""A batch of regularised MMD-power problems sharing precomputed per-variable differences.

K data sets (the full sample, or K train or validation splits) each carry L weight vectors
(one per lambda): B = K * L problems. The per-variable differences of every row pair are
computed once per data set, shape (K, D, P), so the kernels of all weight vectors are one
batched matrix product (K, L, D) @ (K, D, P) per evaluation.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch

from engine.estimators import linear_mmd2_and_variance, mmd2_and_variance, power_ratio
from engine.kernels import KernelName, differences, kernel_scale

EstimatorName = Literal["quadratic", "linear"]
ObjectiveName = Literal["ratio", "mmd"]
ESTIMATORS: tuple[str, ...] = ("quadratic", "linear")
OBJECTIVES: tuple[str, ...] = ("ratio", "mmd")
# MMD^2 estimates can be <= 0; below this floor log(MMD^2) continues linearly (value and
# slope match at the floor), so the objective stays finite and still pushes MMD^2 up.
MMD2_FLOOR = 1e-5


def log_positive(mmd2: torch.Tensor, floor: float = MMD2_FLOOR) -> torch.Tensor:
    """``log(mmd2)`` above ``floor``, its tangent line below it (finite for any input)."""
    safe = mmd2.clamp_min(floor)
    return torch.where(mmd2 > floor, torch.log(safe), math.log(floor) + mmd2 / floor - 1)


@dataclass
class ProblemSet:
    """Precomputed differences of K data sets.

    ``delta`` (K, D, P); for the quadratic estimator P = n^2 + m^2 + n*m (blocks xx, yy,
    xy, rows padded to n and m with masks ``mx`` (K, 1, n), ``my`` (K, 1, m) or None);
    for the linear estimator P = 4 * (c/2) (the four pair terms of each of c/2 quadruples).
    """

    delta: torch.Tensor
    n: int
    m: int
    mx: torch.Tensor | None
    my: torch.Tensor | None
    gamma: torch.Tensor
    kernel: KernelName
    estimator: EstimatorName

    @property
    def n_sets(self) -> int:
        return self.delta.shape[0]

    @classmethod
    def build(
        cls, x: torch.Tensor, y: torch.Tensor, gamma: torch.Tensor, *,
        mx: torch.Tensor | None = None, my: torch.Tensor | None = None,
        kernel: KernelName = "gaussian", estimator: EstimatorName = "quadratic",
    ) -> ProblemSet:
        """From x (K, n, D), y (K, m, D) and optional 0/1 masks (K, n), (K, m).

        Padded rows must come after the real rows of each data set.
        """
        if estimator == "linear":
            if mx is not None:
                c = int(min(mx.sum(-1).min().item(), my.sum(-1).min().item()))
            else:
                c = min(x.shape[1], y.shape[1])
            c = (c // 2) * 2
            x, y = x[:, :c], y[:, :c]
            pair_diffs = [
                differences(x[:, 0::2].unsqueeze(-2), x[:, 1::2].unsqueeze(-2), kernel),
                differences(y[:, 0::2].unsqueeze(-2), y[:, 1::2].unsqueeze(-2), kernel),
                differences(x[:, 0::2].unsqueeze(-2), y[:, 1::2].unsqueeze(-2), kernel),
                differences(x[:, 1::2].unsqueeze(-2), y[:, 0::2].unsqueeze(-2), kernel),
            ]  # each (K, c/2, D, 1)
            delta = torch.cat([p.squeeze(-1).transpose(-1, -2) for p in pair_diffs], dim=-1)
            return cls(delta, c, c, None, None, gamma, kernel, estimator)
        delta = torch.cat(
            [differences(x, x, kernel), differences(y, y, kernel), differences(x, y, kernel)],
            dim=-1,
        )
        if mx is not None and bool((mx == 1).all()) and bool((my == 1).all()):
            mx = my = None
        mx3 = None if mx is None else mx.unsqueeze(1)
        my3 = None if my is None else my.unsqueeze(1)
        return cls(delta, x.shape[1], y.shape[1], mx3, my3, gamma, kernel, estimator)

    def statistics(self, weights: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """MMD^2 estimate and its variance estimate, each (K, L), for weights (K, L, D)."""
        s = kernel_scale(weights, self.gamma, self.kernel)
        # k - 1, not k: MMD^2 and its variance do not change when a constant is added to
        # every kernel value, and with small weights k = 1 - tiny, so in float32 sums of k
        # cancel to rounding noise while sums of expm1 = k - 1 keep their precision.
        k = torch.expm1(-torch.bmm(s, self.delta))  # (K, L, P)
        if self.estimator == "linear":
            q = self.n // 2
            kxx, kyy, kxa, kxb = k.split([q, q, q, q], dim=-1)
            return linear_mmd2_and_variance(kxx + kyy - kxa - kxb)
        n, m = self.n, self.m
        kxx, kyy, kxy = k.split([n * n, m * m, n * m], dim=-1)
        lead = k.shape[:-1]
        return mmd2_and_variance(
            kxx.reshape(*lead, n, n), kyy.reshape(*lead, m, m), kxy.reshape(*lead, n, m),
            self.mx, self.my,
        )

    def ratio(self, weights: torch.Tensor) -> torch.Tensor:
        """Test-power ratio MMD^2 / sqrt(V + C), (K, L)."""
        mmd2, var = self.statistics(weights)
        return power_ratio(mmd2, var)

    def loss(self, weights: torch.Tensor, lambdas: torch.Tensor,
             objective: ObjectiveName = "ratio") -> torch.Tensor:
        """Regularised objective (K, L): ``-log l(a) + lambda * sum_d |a_d|``.

        ``objective="ratio"``: l = MMD^2 / sqrt(V + C) (the paper's);
        ``"mmd"``: l = MMD^2 (the plain-MMD variant of the appendix).
        ``lambdas`` broadcasts against (K, L): shape (L,) or (K, L).
        """
        mmd2, var = self.statistics(weights)
        data_term = -log_positive(mmd2)
        if objective == "ratio":
            data_term = data_term + 0.5 * torch.log(var.clamp_min(0) + 1e-8)
        return data_term + lambdas * weights.abs().sum(-1)
