"""Shared pieces of the engine benchmarks: the paper's synthetic settings and scoring."""
from __future__ import annotations

import numpy as np

SETTINGS = ("shifted_means", "wider_variances", "narrower_variances", "laplace",
            "correlated_gaussian", "redundant_dirac")


def synthetic(setting: str, rng: np.random.Generator, *, d: int = 20, n_true: int = 2,
              n: int = 200) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The paper's Section 5 data: X ~ P = N(0, I_D); Y ~ Q, equal to P outside S.

    Returns X (n, d), Y (n, d) and the true set S (sorted indices). ``setting="null"``
    gives P = Q (S empty).
    """
    x = rng.normal(size=(n, d))
    y = rng.normal(size=(n, d))
    if setting == "null":
        return x, y, np.zeros(0, dtype=int)
    s = np.sort(rng.choice(d, size=n_true, replace=False))
    if setting in ("shifted_means", "redundant_dirac"):
        y[:, s] += 0.5
    elif setting == "wider_variances":
        y[:, s] *= np.sqrt(1.5)
    elif setting == "narrower_variances":
        y[:, s] *= np.sqrt(0.5)
    elif setting == "laplace":
        y[:, s] = rng.laplace(scale=1 / np.sqrt(2), size=(n, n_true))
    elif setting == "correlated_gaussian":
        y[:, s] = rng.normal(size=(n, 1))
    else:
        raise ValueError(f"unknown setting {setting!r}")
    if setting == "redundant_dirac":
        rest = np.setdiff1d(np.arange(d), s)
        x[:, rest] = 0.0
        y[:, rest] = 0.0
    return x, y, s


def precision_recall_f1(selected: list[int] | np.ndarray, truth: np.ndarray) -> tuple[float, float, float]:
    sel, tru = {int(i) for i in selected}, {int(i) for i in truth}
    hits = len(sel & tru)
    precision = hits / len(sel) if sel else 0.0
    recall = hits / len(tru) if tru else 0.0
    f1 = 2 * precision * recall / (precision + recall) if hits else 0.0
    return precision, recall, f1


def machine_load() -> str:
    try:
        import os

        one, five, _ = os.getloadavg()
        return f"load average {one:.1f} (1 min), {five:.1f} (5 min) on {os.cpu_count()} cores"
    except OSError:
        return "load average unavailable"
