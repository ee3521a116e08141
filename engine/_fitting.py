"""Shared steps of the ARD selectors: data preparation, splits, validation tests.

Kept apart from :mod:`engine.selectors` so each selector's ``fit`` reads as its algorithm.
"""
from __future__ import annotations

import itertools
import logging
import math
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import torch

from engine._inputs import Samples, prepare_samples
from engine.errors import InvalidParameterError
from engine.kernels import HeuristicName, KernelName, kernel_matrices, length_scales
from engine.permutation import (
    mmd_permutation_pvalues,
    random_projections,
    sliced_wasserstein_pvalues,
)
from engine.problems import EstimatorName, ProblemSet
from engine.splits import PaddedIndex, Splits, permutation_labels, relabel_blocks

log = logging.getLogger(__name__)
T = TypeVar("T")
#: pair differences of one training batch on a CPU. Measured on the engine part's fits of
#: a d1 backfill (bench.engine_part_batches, 2 cores): 32 MiB as fast as 64 MiB alone and
#: faster when two processes share the cores; smaller batches repeat the per-epoch work
CPU_BATCH_BYTES = 32 * 2**20
#: the smallest batch that ``n_jobs`` threads split the pairs into on a CPU. Each batch
#: pays a fixed cost in Python (its lambda search, splits and scores) that holds the GIL,
#: so small batches make threads queue on it: 96 engine-part pairs (0.5 MB each) with two
#: threads took 5.84 s in batches of 1 pair, 2.44 s of 4, 1.85 s of 8, 1.56 s of 16 and
#: 1.31 s of 48 (2-core VM), and on a 16-core machine 16 threads of one pair each made a
#: 16-pair ``fit_many`` take 4.4 s (0.3 s on the 2-core VM). 16 pairs with two threads:
#: 0.32 s as two batches of 8, 0.46 s as one of 16, hence 8 pairs (4 MiB)
MIN_CPU_BATCH_BYTES = 4 * 2**20
#: ``device="auto"`` fits a batch on the GPU from this many bytes of training pair
#: differences on: on an H200, 16 engine-part pairs (8 MiB) took 0.34 s on CUDA, as long
#: as on the 2-core VM's CPU (0.33 s), and 64 pairs 0.57 s against 1.0 s; one pair is
#: launch-bound on CUDA (bench/results/throughput_h200, docs/engine.md "The GPU")
AUTO_GPU_BYTES = 8 * 2**20
#: the same for fits that the C optimiser runs on the CPU (:func:`engine.optimiser.
#: native_settings`, the engine part's): with it the 2-core VM fits 16 engine-part pairs
#: (p-values included, D = 33) at 97 pairs/s, 64 at 109 and 256 at 111, against the H200's
#: CUDA 47, 113 and 181 (2026-11-28); at D = 300, 18-19 pairs/s against CUDA's 35, 96 and
#: 183. Fitted as a fixed cost plus a cost per byte, the GPU's 0.27-0.39 s start is
#: repaid from 29 MiB (D = 33) and 36 MiB (D = 300) of pair differences on: 64 engine-part
#: pairs at D = 33, 7 at D = 300 (docs/engine.md "The GPU")
AUTO_GPU_BYTES_NATIVE = 32 * 2**20
#: the share of a GPU's free memory that one training batch's pair differences may take
#: (the epoch's intermediates are a few times their size)
GPU_BATCH_SHARE = 0.125


def resolve_device(device: str | torch.device) -> torch.device:
    """``"auto"`` -> CUDA when available, else CPU; anything else is passed to torch."""
    if isinstance(device, torch.device):
        return device
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise InvalidParameterError(
            f"device must be 'auto', 'cpu' or 'cuda[:i]', got {device!r}"
        ) from exc
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise InvalidParameterError("device='cuda' but no CUDA device is available; use 'auto'")
    return dev


@contextmanager
def torch_threads(n_threads: int | None) -> Iterator[None]:
    """Run with ``n_threads`` intra-op CPU threads, restoring the previous setting.

    The engine's tensors are small (a few MB): with OpenMP threads on a loaded machine the
    spin-waiting costs far more than the parallelism gains (measured: one epoch 3 ms with
    one thread, 390 ms with two on a busy 2-core host), hence the default of 1.
    """
    if n_threads is None:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(int(n_threads))
    try:
        yield
    finally:
        torch.set_num_threads(before)


def auto_device(work_bytes: int, native: bool = False) -> torch.device:
    """``device="auto"`` for a batch of ``work_bytes`` of training pair differences: CUDA
    when there is a GPU and the batch reaches :data:`AUTO_GPU_BYTES`
    (:data:`AUTO_GPU_BYTES_NATIVE` for fits the C optimiser runs on the CPU: ``native``),
    else the CPU."""
    if work_bytes >= (AUTO_GPU_BYTES_NATIVE if native else AUTO_GPU_BYTES) \
            and torch.cuda.is_available():
        return torch.device("cuda")
    return torch.device("cpu")


def resolve_jobs(n_jobs: int | None) -> int:
    """``n_jobs`` as a count of batches fitted at once: None or 1 -> 1, -1 -> one per CPU
    core this process may run on, k > 1 -> k."""
    if n_jobs is None:
        return 1
    if isinstance(n_jobs, bool) or not isinstance(n_jobs, int) or n_jobs == 0 or n_jobs < -1:
        raise InvalidParameterError(
            f"n_jobs must be a positive integer, -1 (every core) or None (1), got {n_jobs!r}")
    if n_jobs == -1:
        return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") \
            else os.cpu_count() or 1
    return n_jobs


def batch_bytes(device: torch.device) -> int:
    """The largest training batch (bytes of pair differences) for ``device``: cache-sized
    on a CPU, :data:`GPU_BATCH_SHARE` of the free memory on a GPU, where a bigger batch
    costs no more launches."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return max(CPU_BATCH_BYTES, int(free * GPU_BATCH_SHARE))
    return CPU_BATCH_BYTES


def batch_slices(count: int, size: int, jobs: int, least: int = 1) -> list[slice]:
    """``count`` items in batches of at most ``size``, their number a multiple of ``jobs``
    where there are enough items (so that ``jobs`` threads finish together), sizes within
    one of each other. More batches than ``size`` needs are made only while each keeps
    at least ``least`` items (a batch's fixed cost is not split across threads)."""
    n_parts = math.ceil(count / max(size, 1))
    spread = max(n_parts, count // max(least, 1))
    n_parts = min(count, spread, math.ceil(n_parts / jobs) * jobs) if count else 0
    bounds = [round(i * count / n_parts) for i in range(n_parts + 1)] if n_parts else [0]
    return [slice(a, b) for a, b in itertools.pairwise(bounds)]


def map_batches(fn: Callable[[slice], T], parts: Sequence[slice], jobs: int) -> list[T]:
    """``fn`` of each batch, in order; ``jobs`` > 1: that many at once in threads.

    Threads, not processes: the batches' time is in torch kernels, which release the
    GIL, and each runs on one core (the intra-op pool stays at one thread). Unlike
    OpenMP's threads they never spin, so a busy machine time-shares them instead of
    stalling (docs/engine.md, "Speed")."""
    if jobs <= 1 or len(parts) <= 1:
        return [fn(part) for part in parts]
    with ThreadPoolExecutor(max_workers=min(jobs, len(parts)),
                            thread_name_prefix="engine-batch") as pool:
        return list(pool.map(fn, parts))


def resolve_dtype(dtype: str) -> torch.dtype:
    if dtype not in ("float32", "float64"):
        raise InvalidParameterError(f"dtype must be 'float32' or 'float64', got {dtype!r}")
    return torch.float32 if dtype == "float32" else torch.float64


@dataclass
class Prepared:
    """Checked data restricted to the non-constant ("active") columns.

    ``x`` (n, A), ``y`` (m, A) tensors on the device; ``gamma`` (A,); ``active`` (A,)
    indices into the D input columns.
    """

    samples: Samples
    active: np.ndarray
    x: torch.Tensor
    y: torch.Tensor
    gamma: torch.Tensor
    device: torch.device
    dtype: torch.dtype

    @property
    def n_vars(self) -> int:
        return len(self.samples.labels)

    @property
    def shape(self) -> tuple[int, int, int]:
        """(n, m, A): pairs of one shape are computed in one batch."""
        return self.x.shape[0], self.y.shape[0], self.x.shape[1]

    def to(self, device: torch.device) -> Prepared:
        """The same data on ``device``."""
        return Prepared(self.samples, self.active, self.x.to(device), self.y.to(device),
                        self.gamma.to(device), device, self.dtype)

    def expand(self, scores: np.ndarray) -> np.ndarray:
        """Scores on active columns (..., A) -> all columns (..., D), 0 elsewhere."""
        out = np.zeros(scores.shape[:-1] + (self.n_vars,))
        out[..., self.active] = scores
        return out


def prepare(x_in: Any, y_in: Any, *, block_size: int | None, heuristic: HeuristicName,
            device: torch.device, dtype: torch.dtype) -> Prepared:
    samples = prepare_samples(x_in, y_in, block_size=block_size)
    active = np.flatnonzero(~samples.constant)
    xa, ya = samples.x[:, active], samples.y[:, active]
    gamma = (length_scales(np.concatenate([xa, ya]), heuristic, device) if active.size
             else np.ones(0))
    return Prepared(
        samples, active,
        torch.as_tensor(xa, dtype=dtype, device=device),
        torch.as_tensor(ya, dtype=dtype, device=device),
        torch.as_tensor(gamma, dtype=dtype, device=device),
        device, dtype,
    )


def gather(data: torch.Tensor, idx: PaddedIndex) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows of N stacked data sets, data (N, n, A), for K padded index sets ->
    (N*K, w, A), data set major, and the mask (K, w) of one data set."""
    index = torch.as_tensor(idx.index, device=data.device)
    mask = torch.as_tensor(idx.mask, dtype=data.dtype, device=data.device)
    return data[:, index].flatten(0, 1), mask


def split_problems(prep: Prepared, splits: Splits, part: str, kernel: KernelName,
                   estimator: EstimatorName) -> ProblemSet:
    """ProblemSet of the train (``part="train"``) or validation halves of K splits."""
    return stacked_split_problems(prep.x.unsqueeze(0), prep.y.unsqueeze(0),
                                  prep.gamma.unsqueeze(0), splits, part, kernel, estimator)


def stacked_split_problems(x: torch.Tensor, y: torch.Tensor, gamma: torch.Tensor,
                           splits: Splits, part: str, kernel: KernelName,
                           estimator: EstimatorName) -> ProblemSet:
    """:func:`split_problems` of N data sets of one shape, x (N, n, A), y (N, m, A) with
    length scales gamma (N, A), split alike: N*K sets, data set major."""
    xi = splits.x_train if part == "train" else splits.x_val
    yi = splits.y_train if part == "train" else splits.y_val
    n_sets = x.shape[0]
    xs, mx = gather(x, xi)
    ys, my = gather(y, yi)
    k_sets = xi.index.shape[0]
    gammas = gamma.repeat_interleave(k_sets, 0).unsqueeze(1)  # (N*K, 1, A)
    return ProblemSet.build(xs, ys, gammas, mx=mx.repeat(n_sets, 1), my=my.repeat(n_sets, 1),
                            kernel=kernel, estimator=estimator)


@dataclass
class Validation:
    """Pooled validation samples of K splits, with permutation labels.

    ``z`` (K, N, A) = [X_val rows (padded to wx); Y_val rows (padded)], ``valid`` (K, N),
    ``labels`` (K, B+1, N) 0/1 with row 0 observed.
    """

    z: torch.Tensor
    valid: torch.Tensor
    labels: torch.Tensor


def validation_labels(splits: Splits, *, block_size: int | None, n_permutations: int,
                      rng: np.random.Generator) -> np.ndarray:
    """Permutation labels (K, B+1, wx + wy) of the validation halves of K splits (row 0
    observed; padded rows 0). They depend on the splits alone, not on the data."""
    k_sets, wx = splits.x_val.index.shape
    wy = splits.y_val.index.shape[1]
    labels = np.zeros((k_sets, n_permutations + 1, wx + wy))
    for k in range(k_sets):  # K small: one vectorised draw of all permutations per split
        rx = splits.x_val.index[k][splits.x_val.mask[k] == 1]
        ry = splits.y_val.index[k][splits.y_val.mask[k] == 1]
        lab = permutation_labels(relabel_blocks(rx, block_size), relabel_blocks(ry, block_size),
                                 n_permutations, rng)
        labels[k][:, : rx.size] = lab[:, : rx.size]
        labels[k][:, wx: wx + ry.size] = lab[:, rx.size:]
    return labels


def validation_set(prep: Prepared, splits: Splits, *, block_size: int | None,
                   n_permutations: int, rng: np.random.Generator) -> Validation:
    labels = validation_labels(splits, block_size=block_size, n_permutations=n_permutations,
                               rng=rng)
    return stacked_validation(prep.x.unsqueeze(0), prep.y.unsqueeze(0), splits, labels)


def stacked_validation(x: torch.Tensor, y: torch.Tensor, splits: Splits,
                       labels: np.ndarray) -> Validation:
    """The validation halves of K splits of N data sets of one shape, x (N, n, A) and
    y (N, m, A), as N*K sets (data set major), all with the same ``labels`` (K, B+1, Nv)
    from :func:`validation_labels`."""
    n_sets = x.shape[0]
    xs, mx = gather(x, splits.x_val)
    ys, my = gather(y, splits.y_val)
    z = torch.cat([xs, ys], dim=1)
    valid = torch.cat([mx, my], dim=1).repeat(n_sets, 1)
    lab = torch.as_tensor(labels, dtype=z.dtype, device=z.device).repeat(n_sets, 1, 1)
    return Validation(z, valid, lab)


def split_mmd_pvalues(val: Validation, weights: torch.Tensor, gamma: torch.Tensor,
                      kernel: KernelName) -> np.ndarray:
    """Per-split p-values (K,) of the MMD permutation test on validation data with the
    ARD kernel learned on the training half (weights (K, A); gamma (A,) or each set's
    (K, A)). All-zero weights -> p = 1."""
    kmat = kernel_matrices(val.z, weights, gamma, kernel)
    p = mmd_permutation_pvalues(kmat, val.labels, val.valid).cpu().numpy()
    dead = (weights.abs().sum(-1) == 0).cpu().numpy()
    return np.where(dead, 1.0, p)


def gate_pvalues(val: Validation, subsets: np.ndarray, *, n_projections: int,
                 rng: np.random.Generator) -> np.ndarray:
    """Sliced-Wasserstein permutation p-values (K, L) of validation data restricted to each
    selected subset (K, L, A) bool; identical subsets of one split are tested once."""
    k_sets, n_lambda, _ = subsets.shape
    keys: dict[tuple[int, bytes], int] = {}
    test_split: list[int] = []
    test_subset: list[np.ndarray] = []
    which = np.zeros((k_sets, n_lambda), dtype=np.int64)
    for k in range(k_sets):
        for j in range(n_lambda):
            key = (k, subsets[k, j].tobytes())
            if key not in keys:
                keys[key] = len(test_split)
                test_split.append(k)
                test_subset.append(subsets[k, j])
            which[k, j] = keys[key]
    seeds = rng.integers(0, 2**31 - 1, size=len(test_split))
    proj = random_projections(np.array(test_subset), n_projections, seeds)
    split_idx = torch.as_tensor(test_split, device=val.z.device)
    p = sliced_wasserstein_pvalues(
        val.z[split_idx], val.labels[split_idx], val.valid[split_idx],
        torch.as_tensor(proj, dtype=val.z.dtype, device=val.z.device),
    ).cpu().numpy()
    return p[which]


def gate_mmd_pvalues(val: Validation, weights: torch.Tensor, subsets: np.ndarray,
                     gamma: torch.Tensor, kernel: KernelName) -> np.ndarray:
    """MMD permutation p-values (K, L) of validation data under each learned ARD kernel
    (weights (K, L, A)) restricted to its selected subset (K, L, A) bool; an empty subset
    gets p = 1. ``gamma``: (A,), or (K, A) for sets with their own length scales. More
    powerful than the sliced Wasserstein gate for changes of scale or
    shape, because the kernel is the one trained (on the training half) to detect them."""
    k_sets, n_lambda, n_vars = weights.shape
    mask = torch.as_tensor(subsets, dtype=weights.dtype, device=weights.device)
    w = (weights.abs() * mask).reshape(k_sets * n_lambda, n_vars)
    z = val.z.repeat_interleave(n_lambda, 0)
    if gamma.dim() == 2:  # (K, A): each set's own length scales
        gamma = gamma.repeat_interleave(n_lambda, 0)
    kmat = kernel_matrices(z, w, gamma, kernel)
    p = mmd_permutation_pvalues(kmat, val.labels.repeat_interleave(n_lambda, 0),
                                val.valid.repeat_interleave(n_lambda, 0)).cpu().numpy()
    p = np.where(subsets.reshape(k_sets * n_lambda, n_vars).any(-1), p, 1.0)
    return p.reshape(k_sets, n_lambda)
