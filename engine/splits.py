"""Train/validation splits and permutations that move whole blocks of consecutive rows.

With ``block_size=b`` the rows of X (and, separately, of Y) are cut into consecutive blocks
``[0, b), [b, 2b), ...``; the last block is shorter when n is not a multiple of b. Splits
put whole blocks on either side, and permutations exchange whole blocks between the two
samples, so autocorrelation within a block (e.g. 24 hourly rows = one day) never leaks
across a split or breaks exchangeability under the null. ``block_size=None`` is b = 1.

Index sets are returned padded to a common length with a 0/1 mask, so that K splits of
slightly different sizes still form one (K, n_max) tensor.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def block_ids(n: int, block_size: int | None) -> np.ndarray:
    """Block number of each of n rows: (n,) ints 0..n_blocks-1."""
    b = 1 if block_size is None else int(block_size)
    return np.arange(n) // b


@dataclass(frozen=True)
class PaddedIndex:
    """Row indices (K, width) padded with 0, and mask (K, width) with 1 for real rows."""

    index: np.ndarray
    mask: np.ndarray

    @property
    def counts(self) -> np.ndarray:
        return self.mask.sum(axis=1)

    @property
    def padded(self) -> bool:
        return bool((self.mask == 0).any())


def _pad(rows: list[np.ndarray]) -> PaddedIndex:
    width = max(len(r) for r in rows)
    index = np.zeros((len(rows), width), dtype=np.int64)
    mask = np.zeros((len(rows), width), dtype=np.float64)
    for k, r in enumerate(rows):
        index[k, : len(r)] = r
        mask[k, : len(r)] = 1.0
    return PaddedIndex(index, mask)


@dataclass(frozen=True)
class Splits:
    """K train/validation splits of X and Y (indices into X and into Y)."""

    x_train: PaddedIndex
    x_val: PaddedIndex
    y_train: PaddedIndex
    y_val: PaddedIndex

    @property
    def n_splits(self) -> int:
        return self.x_train.index.shape[0]


def _split_one(n: int, block_size: int | None, n_splits: int, train_fraction: float,
               rng: np.random.Generator) -> tuple[PaddedIndex, PaddedIndex]:
    ids = block_ids(n, block_size)
    n_blocks = int(ids[-1]) + 1
    n_train = min(max(round(n_blocks * train_fraction), 2), n_blocks - 2)
    order = np.argsort(rng.random((n_splits, n_blocks)), axis=1)
    train_rows, val_rows = [], []
    for k in range(n_splits):
        is_train = np.zeros(n_blocks, dtype=bool)
        is_train[order[k, :n_train]] = True
        train_rows.append(np.flatnonzero(is_train[ids]))
        val_rows.append(np.flatnonzero(~is_train[ids]))
    return _pad(train_rows), _pad(val_rows)


def make_splits(n: int, m: int, n_splits: int, rng: np.random.Generator, *,
                train_fraction: float = 0.5, block_size: int | None = None) -> Splits:
    """K random splits of X (n rows) and Y (m rows), each into train and validation.

    Each side keeps at least two blocks (two rows), so every unbiased estimate is defined.
    """
    x_train, x_val = _split_one(n, block_size, n_splits, train_fraction, rng)
    y_train, y_val = _split_one(m, block_size, n_splits, train_fraction, rng)
    return Splits(x_train, x_val, y_train, y_val)


def permutation_labels(x_blocks: np.ndarray, y_blocks: np.ndarray, n_permutations: int,
                       rng: np.random.Generator) -> np.ndarray:
    """Sample labels for a pooled sample [X rows; Y rows] under block permutations.

    ``x_blocks`` (n,) and ``y_blocks`` (m,) give each row's block number within its sample.
    Returns (n_permutations + 1, n + m) float 0/1 labels, 1 = "in X"; row 0 is the observed
    labelling. Each permutation draws as many whole blocks for X as X has, so permuted
    sample sizes differ from n only when blocks are uneven.
    """
    n_bx = int(x_blocks.max()) + 1 if x_blocks.size else 0
    n_by = int(y_blocks.max()) + 1 if y_blocks.size else 0
    pooled_block = np.concatenate([x_blocks, y_blocks + n_bx])
    n_b = n_bx + n_by
    order = np.argsort(rng.random((n_permutations, n_b)), axis=1)
    block_in_x = np.zeros((n_permutations + 1, n_b))
    block_in_x[0, :n_bx] = 1.0
    np.put_along_axis(block_in_x[1:], order[:, :n_bx], 1.0, axis=1)
    return block_in_x[:, pooled_block]


def relabel_blocks(rows: np.ndarray, block_size: int | None) -> np.ndarray:
    """Block numbers 0..k-1 of selected rows (sorted), keeping their original grouping."""
    ids = block_ids(int(rows.max()) + 1 if rows.size else 0, block_size)[rows]
    _, dense = np.unique(ids, return_inverse=True)
    return dense
