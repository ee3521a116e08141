"""ARD kernels and per-variable length scales.

Both kernels are ``k(x, y) = exp(-sum_d s_d * delta_d(x, y))`` with a per-variable scale
``s`` (from the ARD weights ``a`` and length scales ``gamma``) and a per-variable
difference ``delta``:

* Gaussian (the paper's):  ``s_d = a_d^2 / (D gamma_d^2)``, ``delta_d = (x_d - y_d)^2``;
* Laplace type:             ``s_d = |a_d| / (sqrt(D) gamma_d)``, ``delta_d = |x_d - y_d|``,
  i.e. the product over d of ``exp(-|r_d| / gamma_d)`` with ``r_d = a_d |x_d - y_d| / sqrt(D)``.

Writing the kernel this way lets the optimiser precompute ``delta`` once and evaluate the
kernels of all B weight vectors as one matrix product ``(B, D) @ (D, pairs)``.
"""
from __future__ import annotations

import math
from typing import Literal

import numpy as np
import torch

from engine.errors import InvalidParameterError

KernelName = Literal["gaussian", "laplace"]
HeuristicName = Literal["median", "mean"]
KERNELS: tuple[str, ...] = ("gaussian", "laplace")
HEURISTICS: tuple[str, ...] = ("median", "mean")


def check_kernel(kernel: str) -> None:
    if kernel not in KERNELS:
        raise InvalidParameterError(f"kernel must be one of {KERNELS}, got {kernel!r}")


def length_scales(z: np.ndarray, heuristic: HeuristicName = "median",
                  device: torch.device | str = "cpu") -> np.ndarray:
    """Per-variable length scales ``gamma`` (D,) of a pooled sample ``z`` (N, D).

    ``gamma_d^2`` is the median (or mean) of ``(z_id - z_jd)^2`` over distinct pairs i < j
    (an even count of pairs takes the mean of the two middle values, like NumPy).
    A zero median (many ties, e.g. sparse data) is replaced by the smallest positive
    ``gamma`` among the variables, as in the paper; if none is positive, by 1.
    Computed in float64 on ``device`` (NumPy on the CPU), a few variables at a time so that
    memory stays near 32 MB of pair differences.
    """
    if heuristic not in HEURISTICS:
        raise InvalidParameterError(
            f"length_scale must be one of {HEURISTICS}, got {heuristic!r}"
        )
    if torch.device(device).type == "cpu":
        return _positive(_length_scales_numpy(np.asarray(z, dtype=np.float64), heuristic))
    zt = torch.as_tensor(np.asarray(z, dtype=np.float64), device=device)
    return _positive(_length_scales_torch(zt, heuristic).cpu().numpy())


def _length_scales_torch(zt: torch.Tensor, heuristic: HeuristicName) -> torch.Tensor:
    """Unreplaced length scales (D,) of ``zt`` (N, D) with torch, on its device."""
    n, d = zt.shape
    iu, ju = torch.triu_indices(n, n, 1, device=zt.device)
    n_pairs = iu.numel()
    gamma2 = torch.empty(d, dtype=zt.dtype, device=zt.device)
    per_chunk = max(1, 4_000_000 // max(n_pairs, 1))
    for start in range(0, d, per_chunk):
        cols = zt[:, start:start + per_chunk]
        sq = (cols[iu] - cols[ju]).square()  # (pairs, chunk)
        if heuristic == "mean":
            gamma2[start:start + per_chunk] = sq.mean(0)
            continue
        low = torch.kthvalue(sq, (n_pairs + 1) // 2, dim=0).values
        high = torch.kthvalue(sq, n_pairs // 2 + 1, dim=0).values
        gamma2[start:start + per_chunk] = (low + high) / 2 if n_pairs % 2 == 0 else low
    return gamma2.sqrt()


def _length_scales_numpy(z: np.ndarray, heuristic: HeuristicName) -> np.ndarray:
    """The same on the CPU with NumPy (its partition-based median is faster there)."""
    n, d = z.shape
    iu, ju = np.triu_indices(n, k=1)
    gamma2 = np.empty(d)
    per_chunk = max(1, 4_000_000 // max(iu.size, 1))
    for start in range(0, d, per_chunk):
        sq = (z[iu, start:start + per_chunk] - z[ju, start:start + per_chunk]) ** 2
        gamma2[start:start + per_chunk] = (np.median(sq, axis=0) if heuristic == "median"
                                           else sq.mean(axis=0))
    return np.sqrt(gamma2)


def _positive(gamma: np.ndarray) -> np.ndarray:
    """Zero length scales -> the smallest positive one (1 if none is positive)."""
    positive = gamma[gamma > 0]
    fill = positive.min() if positive.size else 1.0
    return np.where(gamma > 0, gamma, fill)


def kernel_scale(weights: torch.Tensor, gamma: torch.Tensor, kernel: KernelName) -> torch.Tensor:
    """Per-variable scale ``s`` (..., D) of ARD weights (..., D) and length scales (D,)."""
    d = gamma.shape[-1]
    if kernel == "gaussian":
        return weights.square() / (gamma.square() * d)
    return weights.abs() / (gamma * math.sqrt(d))


def differences(a: torch.Tensor, b: torch.Tensor, kernel: KernelName) -> torch.Tensor:
    """Per-variable differences of all row pairs: a (..., n, D), b (..., m, D) -> (..., D, n*m).

    Squared for the Gaussian kernel, absolute for the Laplace kernel.
    """
    diff = a.unsqueeze(-2) - b.unsqueeze(-3)  # (..., n, m, D)
    diff = diff.square() if kernel == "gaussian" else diff.abs()
    return diff.flatten(-3, -2).transpose(-1, -2)


def pair_differences_into(out: torch.Tensor, x: torch.Tensor, y: torch.Tensor,
                           ix: torch.Tensor, jx: torch.Tensor, iy: torch.Tensor,
                           jy: torch.Tensor, kernel: KernelName) -> torch.Tensor:
    """Per-variable differences of the row pairs ``(ix, jx)`` of x (K, n, D), then
    ``(iy, jy)`` of y (K, m, D), then of every (x row, y row) as :func:`differences`
    orders them, written into ``out`` (K, D, P) and returned; squared for the Gaussian
    kernel, absolute for the Laplace kernel. Computed in the stored layout, where
    gathering rows, transposing each part and concatenating copied every value twice."""
    xt, yt = x.transpose(-1, -2), y.transpose(-1, -2)  # (K, D, n), (K, D, m)
    pxx, pyy = len(ix), len(iy)
    torch.sub(xt[..., ix], xt[..., jx], out=out[..., :pxx])
    torch.sub(yt[..., iy], yt[..., jy], out=out[..., pxx:pxx + pyy])
    cross = out[..., pxx + pyy:].unflatten(-1, (x.shape[-2], y.shape[-2]))
    torch.sub(xt.unsqueeze(-1), yt.unsqueeze(-2), out=cross)
    return out.square_() if kernel == "gaussian" else out.abs_()


def ard_kernel(
    x: torch.Tensor, y: torch.Tensor, weights: torch.Tensor, gamma: torch.Tensor,
    kernel: KernelName = "gaussian",
) -> torch.Tensor:
    """Kernel matrix (n, m) of x (n, D) and y (m, D) for one weight vector (D,)."""
    s = kernel_scale(weights, gamma, kernel)
    dist = s @ differences(x, y, kernel)
    return torch.exp(-dist).reshape(x.shape[0], y.shape[0])


def kernel_matrices(z: torch.Tensor, weights: torch.Tensor, gamma: torch.Tensor,
                    kernel: KernelName) -> torch.Tensor:
    """ARD kernel matrices (K, N, N) of pooled samples z (K, N, D), weights (K, D): the
    kernel of :func:`ard_kernel`, one weight vector per sample, written as distances of
    rows scaled by ``|a_d| / (sqrt(D) gamma_d)`` (``cdist``; the permutation tests' form)."""
    d = gamma.shape[-1]
    if kernel == "gaussian":
        scaled = z * (weights.abs() / (gamma * d**0.5)).unsqueeze(1)
        return torch.exp(-torch.cdist(scaled, scaled).square())
    scaled = z * (weights.abs() / (gamma * d**0.5)).unsqueeze(1)
    return torch.exp(-torch.cdist(scaled, scaled, p=1))
