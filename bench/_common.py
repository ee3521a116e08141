"""Shared pieces of the engine benchmarks: the paper's synthetic settings and scoring.

``SETTINGS`` are the paper's six (Section 5). ``SHAPE_SETTINGS`` change the *shape* of the
variables in S at equal mean (0) and equal variance (1), so neither a mean nor a variance
test can see them:

- ``bimodal``: an equal mixture of N(-0.9, 0.19) and N(+0.9, 0.19) (a valve hunting
  between two set points);
- ``skewed``: the standardised exponential, Exp(1) - 1 (skewness 2);
- ``heavy_tails``: Student's t with 3 degrees of freedom scaled by 1/sqrt(3) (infinite
  kurtosis; heavier than the paper's Laplace);
- ``light_tails``: uniform on [-sqrt(3), sqrt(3)] (excess kurtosis -1.2).

``ALL_SETTINGS`` is both, the paper's first: ``ALL_SETTINGS.index(s) + 1`` is the seed
component the benches use, unchanged for the paper's six.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

SETTINGS = ("shifted_means", "wider_variances", "narrower_variances", "laplace",
            "correlated_gaussian", "redundant_dirac")
SHAPE_SETTINGS = ("bimodal", "skewed", "heavy_tails", "light_tails")
ALL_SETTINGS = SETTINGS + SHAPE_SETTINGS

#: half the distance between the two modes of ``bimodal`` (within-mode sd sqrt(1 - mu^2))
BIMODAL_MU = 0.9
#: degrees of freedom of ``heavy_tails``
HEAVY_TAILS_DOF = 3


def shape_sample(setting: str, rng: np.random.Generator, size: tuple[int, ...]) -> np.ndarray:
    """Draws of a ``SHAPE_SETTINGS`` distribution: mean 0, variance 1, not Gaussian."""
    if setting == "bimodal":
        modes = np.where(rng.random(size) < 0.5, -BIMODAL_MU, BIMODAL_MU)
        return modes + rng.normal(scale=np.sqrt(1 - BIMODAL_MU**2), size=size)
    if setting == "skewed":
        return rng.exponential(size=size) - 1.0
    if setting == "heavy_tails":
        nu = HEAVY_TAILS_DOF
        return rng.standard_t(nu, size=size) * np.sqrt((nu - 2) / nu)
    if setting == "light_tails":
        return rng.uniform(-np.sqrt(3.0), np.sqrt(3.0), size=size)
    raise ValueError(f"unknown shape setting {setting!r}")


def synthetic(setting: str, rng: np.random.Generator, *, d: int = 20, n_true: int = 2,
              n: int = 200) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The paper's Section 5 data: X ~ P = N(0, I_D); Y ~ Q, equal to P outside S.

    Returns X (n, d), Y (n, d) and the true set S (sorted indices). ``setting="null"``
    gives P = Q (S empty). ``setting`` is one of ``ALL_SETTINGS`` (the paper's six draw
    exactly what they drew before the shape settings were added).
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
    elif setting in SHAPE_SETTINGS:
        y[:, s] = shape_sample(setting, rng, (n, n_true))
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


def markdown_table(frame: pd.DataFrame, cell: Callable[[Any], str] = str) -> list[str]:
    """The lines of a Markdown table of ``frame``: a header, the rule, a row per row, each
    cell written by ``cell``."""
    lines = ["| " + " | ".join(str(c) for c in frame.columns) + " |",
             "|" + "---|" * len(frame.columns)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |"
              for row in frame.itertuples(index=False)]
    return lines
