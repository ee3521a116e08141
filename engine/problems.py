"""A batch of regularised MMD-power problems sharing precomputed per-variable differences.

K data sets (the full sample, or K train or validation splits) each carry L weight vectors
(one per lambda): B = K * L problems. The per-variable differences of every row pair are
computed once per data set, shape (K, D, P), so the kernels of all weight vectors are one
batched matrix product (K, L, D) @ (K, D, P) per evaluation. Within X and within Y each
unordered pair i != j is kept once (the blocks are symmetric with a constant diagonal): a
third fewer pairs than the full blocks, and this product, reading ``delta`` forward and
back, is most of an epoch's time. One CV-batch epoch (K=10, L=6, D=33, 84 + 84 rows, one
CPU thread) took 11.7 ms with full blocks and autograd, 6.8 ms with the circulant pairs
and the hand-written backward of :class:`_KernelRowSums`.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch

from engine.estimators import (
    linear_mmd2_and_variance,
    mmd2_and_variance_from_sums,
    power_ratio,
)
from engine.kernels import KernelName, differences, kernel_scale, pair_differences_into

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


def circulant_pairs(n: int, device: torch.device | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Row pairs ``(i, (i + s) mod n)`` for shifts s = 1 .. n//2, slab by slab: (n//2 * n,)
    each. Every unordered pair i != j appears once, except for even n the pairs of shift
    n/2, which appear twice (their values get weight 1/2, see :func:`pair_weights`).

    This layout, unlike ``triu_indices``, gives row sums of the symmetric matrix without
    scatter or gather (:func:`pair_row_sums`)."""
    shifts = torch.arange(1, n // 2 + 1, device=device)
    first = torch.arange(n, device=device).repeat(len(shifts))
    second = (first + shifts.repeat_interleave(n)) % n
    return first, second


def pair_weights(n: int, mask: torch.Tensor | None, dtype: torch.dtype,
                 device: torch.device) -> torch.Tensor | None:
    """Weights (..., n//2 * n) of the circulant pairs: 1/2 on the doubled slab (even n),
    times ``mask_i * mask_j`` for padded rows; None when all are 1."""
    n_slabs = n // 2
    w = torch.ones(n_slabs, n, dtype=dtype, device=device)
    if n % 2 == 0 and n_slabs:
        w[-1] = 0.5
    w = w.flatten()
    if mask is not None:
        first, second = circulant_pairs(n, device)
        w = w * mask[..., first] * mask[..., second]
    elif n % 2 == 1:
        return None
    return w


def pair_row_sums(values: torch.Tensor, n: int) -> torch.Tensor:
    """Row sums (..., n) of a symmetric matrix with zero diagonal, given its circulant pair
    values (..., n//2 * n) (already weighted). Row i collects slab s at i (pair (i, i+s))
    and at i - s (pair (i-s, i)); the second is a strided view of the slabs laid twice
    side by side, where slab s read from offset n - s is slab s rolled by s."""
    n_slabs = n // 2
    slabs = values.unflatten(-1, (n_slabs, n))
    twice = torch.cat([slabs, slabs], dim=-1)  # (..., S, 2n), contiguous
    lead = twice.shape[:-2]
    rolled = twice.as_strided(
        (*lead, n_slabs, n), (*twice.stride()[:-2], 2 * n - 1, 1),
        twice.storage_offset() + n - 1,
    )
    return slabs.sum(-2) + rolled.sum(-2)


def pair_gradient(grad_rows: torch.Tensor, n: int) -> torch.Tensor:
    """Adjoint of :func:`pair_row_sums`: row-sum gradients (..., n) -> pair gradients
    (..., n//2 * n), ``g_i + g_{(i+s) mod n}`` for the pair (i, i+s) (before weights)."""
    n_slabs = n // 2
    twice = torch.cat([grad_rows, grad_rows], dim=-1).contiguous()  # (..., 2n)
    lead = twice.shape[:-1]
    ahead = twice.as_strided((*lead, n_slabs, n), (*twice.stride()[:-1], 1, 1),
                             twice.storage_offset() + 1)  # [s-1, i] = g_{(i+s) mod n}
    return (ahead + grad_rows.unsqueeze(-2)).flatten(-2)


class _KernelRowSums(torch.autograd.Function):
    """``k - 1 = expm1(-s @ delta)`` and the kernel row sums the estimators need, with a
    hand-written backward: autograd's generic one keeps and revisits several (K, L, P)
    intermediates (the split, the weights, the strided views), and P is large. Forward
    returns rxx (K, L, n), ryy
    (K, L, m), rxy (K, L, n), cxy (K, L, m) as in
    :func:`engine.estimators.mmd2_and_variance_from_sums`."""

    @staticmethod
    def forward(ctx, minus_s, delta, n, m, wx, wy, mx, my):
        k = torch.expm1(torch.bmm(minus_s, delta))  # (K, L, P)
        kxx, kyy, kxy = k.split([n // 2 * n, m // 2 * m, n * m], dim=-1)
        kxy = kxy.unflatten(-1, (n, m))
        if wx is not None:
            kxx = kxx * wx
        if wy is not None:
            kyy = kyy * wy
        if mx is None:
            rxy, cxy = kxy.sum(-1), kxy.sum(-2)
        else:
            rxy = (kxy * my.unsqueeze(-2)).sum(-1)
            cxy = (kxy * mx.unsqueeze(-1)).sum(-2)
        ctx.save_for_backward(delta, k, wx, wy, mx, my)
        ctx.sizes = (n, m)
        return pair_row_sums(kxx, n), pair_row_sums(kyy, m), rxy, cxy

    @staticmethod
    def backward(ctx, g_rxx, g_ryy, g_rxy, g_cxy):
        delta, k, wx, wy, mx, my = ctx.saved_tensors
        n, m = ctx.sizes
        gxx = pair_gradient(g_rxx, n)
        gyy = pair_gradient(g_ryy, m)
        if wx is not None:
            gxx = gxx * wx
        if wy is not None:
            gyy = gyy * wy
        if mx is None:
            gxy = g_rxy.unsqueeze(-1) + g_cxy.unsqueeze(-2)
        else:
            gxy = (g_rxy.unsqueeze(-1) * my.unsqueeze(-2)
                   + g_cxy.unsqueeze(-2) * mx.unsqueeze(-1))
        grad_k = torch.cat([gxx, gyy, gxy.flatten(-2)], dim=-1)
        # d expm1(e)/de = (k - 1) + 1, in place: grad_k is this function's own (a fresh
        # allocation of this size costs more than the product on a CPU)
        grad_exponent = grad_k.addcmul_(k, grad_k)
        # (K, D, P) @ (K, P, L), not (K, L, P) @ (K, P, D): it reads delta as it is stored,
        # where the other order wants a pairs-major copy (on the CPU 3.6 vs 4.3 ms at
        # K=420, D=30, P=200, and the copy doubled the memory an epoch streams)
        grad_minus_s = torch.bmm(delta, grad_exponent.transpose(-1, -2)).transpose(-1, -2)
        return grad_minus_s, None, None, None, None, None, None, None


@dataclass
class ProblemSet:
    """Precomputed differences of K data sets.

    ``delta`` (K, D, P); for the quadratic estimator P = n//2 * n + m//2 * m + n*m (the
    circulant pairs of X and of Y, :func:`circulant_pairs`, then all X-Y pairs; rows padded
    to n and m with masks ``mx`` (K, 1, n), ``my`` (K, 1, m) or None, and pair weights
    ``wx``, ``wy`` (pairs,) or (K, 1, pairs) or None); ``gamma`` the length scales (D,),
    or (K, 1, D) when the data sets have their own (:meth:`concat`); for the linear
    estimator P = 4 * (c/2) (the four pair terms of each of c/2 quadruples).
    """

    delta: torch.Tensor
    n: int
    m: int
    mx: torch.Tensor | None
    my: torch.Tensor | None
    gamma: torch.Tensor
    kernel: KernelName
    estimator: EstimatorName
    wx: torch.Tensor | None = None
    wy: torch.Tensor | None = None

    @property
    def n_sets(self) -> int:
        return self.delta.shape[0]

    def sets(self, index: slice | torch.Tensor) -> ProblemSet:
        """The data sets ``index`` of this batch: a slice shares its tensors, an index
        tensor (dim 0) copies them."""
        def cut(t: torch.Tensor | None) -> torch.Tensor | None:
            return t[index] if t is not None and t.dim() == 3 else t

        gamma = self.gamma[index] if self.gamma.dim() == 3 else self.gamma
        return ProblemSet(self.delta[index], self.n, self.m, cut(self.mx), cut(self.my),
                          gamma, self.kernel, self.estimator, cut(self.wx),
                          cut(self.wy))

    @classmethod
    def concat(cls, parts: list[ProblemSet]) -> ProblemSet:
        """The data sets of several batches of equal n, m, D, kernel and estimator as one
        batch (how ``fit_many`` solves many fits together). Each part keeps its own length
        scales: ``gamma`` becomes (K, 1, D) when they differ between parts."""
        first = parts[0]
        if len(parts) == 1:
            return first
        if any((p.n, p.m, p.delta.shape[1:], p.kernel, p.estimator)
               != (first.n, first.m, first.delta.shape[1:], first.kernel, first.estimator)
               for p in parts):
            raise ValueError("ProblemSet.concat needs parts of equal n, m, D, kernel and "
                             "estimator; group the fits by shape first")

        def per_set(get: Callable[[ProblemSet], torch.Tensor | None], width: int
                    ) -> torch.Tensor | None:
            """Each part's tensor as (K_i, 1, width), all None -> None."""
            values = [get(p) for p in parts]
            if all(v is None for v in values):
                return None
            out = []
            for p, v in zip(parts, values, strict=True):
                if v is None:
                    v = torch.ones(width, dtype=p.delta.dtype, device=p.delta.device)
                out.append(v.expand(p.n_sets, 1, width) if v.dim() < 3 else v)
            return torch.cat(out)

        d = first.delta.shape[1]
        gamma = (first.gamma if all(torch.equal(p.gamma, first.gamma) for p in parts)
                 else torch.cat([p.gamma.expand(p.n_sets, 1, d) if p.gamma.dim() < 3
                                 else p.gamma for p in parts]))
        return cls(torch.cat([p.delta for p in parts]), first.n, first.m,
                   per_set(lambda p: p.mx, first.n), per_set(lambda p: p.my, first.m),
                   gamma, first.kernel, first.estimator,
                   per_set(lambda p: p.wx, first.n // 2 * first.n),
                   per_set(lambda p: p.wy, first.m // 2 * first.m))

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
            if mx is not None and my is not None:
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
        n, m = x.shape[1], y.shape[1]
        ix, jx = circulant_pairs(n, x.device)
        iy, jy = circulant_pairs(m, y.device)
        delta = pair_differences_into(
            torch.empty(x.shape[0], x.shape[2], len(ix) + len(iy) + n * m, dtype=x.dtype,
                        device=x.device), x, y, ix, jx, iy, jy, kernel)
        if (mx is not None and my is not None
                and bool(mx.eq(1).all()) and bool(my.eq(1).all())):
            mx = my = None
        mx3 = None if mx is None else mx.unsqueeze(1)
        my3 = None if my is None else my.unsqueeze(1)
        wx = pair_weights(n, mx3, x.dtype, x.device)
        wy = pair_weights(m, my3, y.dtype, y.device)
        return cls(delta, n, m, mx3, my3, gamma, kernel, estimator, wx, wy)

    def statistics(self, weights: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """MMD^2 estimate and its variance estimate, each (K, L), for weights (K, L, D)."""
        # Negated on the small (K, L, D) side, not on the large (K, L, P) product.
        minus_s = -kernel_scale(weights, self.gamma, self.kernel)
        if self.estimator == "linear":
            # k - 1, not k: MMD^2 and its variance do not change when a constant is added
            # to every kernel value, and with small weights k = 1 - tiny, so in float32
            # sums of k cancel to rounding noise while sums of expm1 = k - 1 keep theirs.
            k = torch.expm1(torch.bmm(minus_s, self.delta))  # (K, L, P)
            q = self.n // 2
            kxx, kyy, kxa, kxb = k.split([q, q, q, q], dim=-1)
            return linear_mmd2_and_variance(kxx + kyy - kxa - kxb)
        # The same k - 1 for the quadratic estimator, inside _KernelRowSums.
        rxx, ryy, rxy, cxy = _KernelRowSums.apply(
            minus_s, self.delta, self.n, self.m, self.wx, self.wy, self.mx, self.my)
        # Diagonals of k - 1 are 0.
        return mmd2_and_variance_from_sums(
            rxx, ryy, rxy, cxy, 0.0, 0.0, self.mx, self.my, n_rows=(self.n, self.m),
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
