"""Turn user input (NumPy, pandas, torch, nested lists) into checked float arrays.

Everything the engine accepts goes through :func:`prepare_samples`, so bad input is
rejected here with an :mod:`engine.errors` exception instead of failing deep in torch.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from engine.errors import (
    EmptyInputError,
    InvalidParameterError,
    NonFiniteInputError,
    ShapeMismatchError,
    TooFewSamplesError,
    TooFewVariablesError,
)

MIN_ROWS = 4


@dataclass(frozen=True)
class Samples:
    """Checked samples. ``x``: (n, D), ``y``: (m, D), float64; ``labels``: D labels;
    ``constant``: (D,) bool, True where the pooled column takes a single value."""

    x: np.ndarray
    y: np.ndarray
    labels: list[Any]
    constant: np.ndarray


def _to_array(data: Any, name: str) -> tuple[np.ndarray, list[Any] | None]:
    labels = None
    if hasattr(data, "columns") and hasattr(data, "to_numpy"):  # pandas DataFrame
        labels = data.columns.tolist()
        try:
            arr = data.to_numpy(dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise ShapeMismatchError(
                f"{name} has non-numeric columns ({exc}); pass only numeric sensor columns"
            ) from exc
    elif type(data).__module__.startswith("torch"):
        arr = data.detach().cpu().to(dtype=__import__("torch").float64).numpy()
    else:
        try:
            arr = np.asarray(data, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise ShapeMismatchError(
                f"{name} could not be read as a numeric 2-D array ({exc}); pass an (n, D) "
                "array or DataFrame of numbers"
            ) from exc
    if arr.ndim != 2:
        raise ShapeMismatchError(
            f"{name} must be 2-D (rows = samples, columns = variables), got shape {arr.shape}; "
            "reshape a single variable to (n, 1) only if you have D >= 2 variables"
        )
    if arr.shape[0] == 0 or arr.shape[1] == 0:
        raise EmptyInputError(
            f"{name} is empty (shape {arr.shape}); pass at least {MIN_ROWS} rows and 2 columns"
        )
    if not np.isfinite(arr).all():
        bad = int((~np.isfinite(arr)).sum())
        raise NonFiniteInputError(
            f"{name} holds {bad} NaN/inf value(s); drop or impute them before calling fit"
        )
    return arr, labels


def prepare_samples(x: Any, y: Any, *, block_size: int | None = None) -> Samples:
    """Check X (n, D) and Y (m, D) and return them as float64 arrays with labels.

    Raises the :mod:`engine.errors` exception that names what is wrong: empty input,
    non-2-D input, NaN/inf, different D or labels, fewer than 4 rows (or 2 blocks) per
    sample, D = 1.
    """
    xa, xl = _to_array(x, "X")
    ya, yl = _to_array(y, "Y")
    if xa.shape[1] != ya.shape[1]:
        raise ShapeMismatchError(
            f"X has {xa.shape[1]} columns but Y has {ya.shape[1]}; both samples must hold "
            "the same variables in the same order"
        )
    if xl is not None and yl is not None and list(xl) != list(yl):
        if set(map(str, xl)) == set(map(str, yl)) and len(xl) == len(yl):
            raise ShapeMismatchError(
                "X and Y hold the same columns in a different order; reorder Y as "
                "Y[X.columns] before calling fit"
            )
        raise ShapeMismatchError(
            "X and Y have different column labels; pass the same variables in both"
        )
    labels = xl if xl is not None else (yl if yl is not None else list(range(xa.shape[1])))
    if xa.shape[1] < 2:
        raise TooFewVariablesError(
            "only one variable (D = 1): there is nothing to select; pass at least two "
            "columns, or use a plain two-sample test for a single variable"
        )
    for name, arr in (("X", xa), ("Y", ya)):
        if arr.shape[0] < MIN_ROWS:
            raise TooFewSamplesError(
                f"{name} has {arr.shape[0]} rows; at least {MIN_ROWS} are needed (half for "
                "training, half for validation); use a longer window"
            )
    if block_size is not None:
        if int(block_size) != block_size or block_size < 1:
            raise InvalidParameterError(
                f"block_size must be a positive integer or None, got {block_size!r}"
            )
        for name, arr in (("X", xa), ("Y", ya)):
            n_blocks = -(-arr.shape[0] // int(block_size))
            if n_blocks < MIN_ROWS:
                raise TooFewSamplesError(
                    f"{name} has {arr.shape[0]} rows = {n_blocks} block(s) of "
                    f"block_size={block_size}; at least {MIN_ROWS} blocks are needed to split "
                    "and permute whole blocks; use a longer window or a smaller block_size"
                )
    pooled = np.concatenate([xa, ya], axis=0)
    constant = (pooled.max(axis=0) - pooled.min(axis=0)) == 0
    return Samples(x=xa, y=ya, labels=list(labels), constant=constant)
