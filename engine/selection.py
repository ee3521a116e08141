"""Rules that turn a score vector (ARD weights or aggregated importances) into a selection.

Every rule returns a threshold; the selected variables are those with score > threshold
(strictly). Zero or non-positive scores are never selected, and if no score is positive
nothing is selected (threshold = +inf).

* ``"histogram"`` (the paper's, Appendix "Variable selection"): build a 100-bin histogram
  of the scores; the threshold sits in its deepest (widest) valley of empty bins, the
  "smallest local minimum"; selected are the scores above that valley. This reproduces
  the paper's worked example (0.01, 0.02, 0.02, 0.03, 0.1) -> threshold 0.03 -> {5th}.
* ``"first_empty"``: everything above the first empty bin of the same histogram (what
  the authors' code does; it keeps 6-9 of 20 variables on the synthetic benchmark).
* ``"gap"``: the largest gap between consecutive sorted scores, measured on the scores
  rescaled to [0, 1] by the maximum and including the gap down to 0 (so that a single
  dominant variable or a group of similar strong variables are both handled); selected
  are the scores above the gap.

The default (see ``DEFAULT_RULE``) is the one more accurate on ``python -m bench.synthetic``.
"""
from __future__ import annotations

from typing import Literal

import numpy as np

from engine.errors import InvalidParameterError

RuleName = Literal["histogram", "first_empty", "gap"]
RULES: tuple[str, ...] = ("histogram", "first_empty", "gap")
DEFAULT_RULE: RuleName = "gap"


def check_rule(rule: str) -> None:
    if rule not in RULES:
        raise InvalidParameterError(f"selection must be one of {RULES}, got {rule!r}")


def _histogram(scores: np.ndarray, bins: int) -> tuple[np.ndarray, np.ndarray]:
    lo, hi = float(scores.min()), float(scores.max())
    if hi <= lo:
        hi = lo + 1.0
    return np.histogram(scores, bins=bins, range=(lo, hi))


def histogram_threshold(scores: np.ndarray, bins: int = 100) -> float:
    """The paper's rule: threshold inside the widest run of empty histogram bins.

    Returns the largest score below that run (so ``scores > threshold`` selects the
    scores above it). Ties between equally wide runs go to the lowest run. With no empty
    bin (all scores in adjacent bins) the threshold is below the minimum (select all).
    """
    scores = np.asarray(scores, dtype=np.float64)
    counts, edges = _histogram(scores, bins)
    empty = counts == 0
    best_len, best_start, run_start = 0, -1, -1
    for i, e in enumerate(empty):
        if e and run_start < 0:
            run_start = i
        if (not e or i == len(empty) - 1) and run_start >= 0:
            end = i if not e else i + 1
            if end - run_start > best_len:
                best_len, best_start = end - run_start, run_start
            run_start = -1
    if best_start < 0:
        return float(np.nextafter(scores.min(), -np.inf))
    below = scores[scores < edges[best_start + 1]]
    return float(below.max())


def first_empty_threshold(scores: np.ndarray, bins: int = 100) -> float:
    """Largest score below the first empty bin of a ``bins``-bin histogram."""
    scores = np.asarray(scores, dtype=np.float64)
    counts, edges = _histogram(scores, bins)
    empty = np.flatnonzero(counts == 0)
    if empty.size == 0:
        return float(np.nextafter(scores.min(), -np.inf))
    below = scores[scores < edges[empty[0] + 1]]
    return float(below.max())


def _gap_rule(scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The gap rule on score vectors (..., D) of absolute values: (mask (..., D), threshold
    (...,)). The largest gap between max-normalised sorted scores, counting the gap from
    the lowest score down to 0 only when it is the largest (then all positive scores are
    selected). The mask compares the max-normalised scores with the normalised score below
    the widest gap, the very numbers the gap was measured on. Comparing raw scores with
    ``top * s`` instead let rounding put the score just below the gap on either side of
    its own threshold (a selection that flips with the last digit of the data, issue 31)."""
    top = scores.max(axis=-1, keepdims=True)
    positive = top > 0
    normalised = np.clip(scores / np.where(positive, top, 1.0), 0, None)
    s = np.sort(normalised, axis=-1)
    if scores.shape[-1] == 1:
        keep_all = np.ones(s.shape[:-1] + (1,), dtype=bool)
        cut = s[..., :1]
    else:
        gaps = np.diff(s, axis=-1)
        i = gaps.argmax(axis=-1)[..., None]
        cut = np.take_along_axis(s, i, axis=-1)
        # every score far from zero and no clear break: keep them all
        keep_all = s[..., :1] > np.take_along_axis(gaps, i, axis=-1)
    mask = np.where(keep_all, normalised > 0, normalised > cut) & positive
    thr = np.where(keep_all, np.nextafter(top * s[..., :1], -np.inf), top * cut)
    thr = np.where(positive, thr, np.inf)
    return mask, thr[..., 0]


def select(scores: np.ndarray, rule: RuleName = DEFAULT_RULE, bins: int = 100) -> tuple[np.ndarray, float]:
    """Selected indices (highest score first) and the threshold of a score vector (D,)."""
    check_rule(rule)
    scores = np.abs(np.asarray(scores, dtype=np.float64))
    if scores.size == 0 or scores.max() <= 0:
        return np.zeros(0, dtype=np.int64), float("inf")
    if rule == "gap":
        mask, gap_thr = _gap_rule(scores)
        thr, chosen = max(float(gap_thr), 0.0), np.flatnonzero(mask)
    else:
        thr = histogram_threshold(scores, bins) if rule == "histogram" else (
            first_empty_threshold(scores, bins))
        thr = max(thr, 0.0)
        chosen = np.flatnonzero(scores > thr)
    chosen = chosen[np.argsort(-scores[chosen], kind="stable")]
    return chosen, thr


def select_masks(scores: np.ndarray, rule: RuleName = DEFAULT_RULE, bins: int = 100
                 ) -> np.ndarray:
    """:func:`select` of many score vectors at once: scores (..., D) -> bool (..., D), True
    where selected. The gap rule is computed for all vectors together (the same arithmetic
    as :func:`select`, so the same picks); the others one vector at a time."""
    scores = np.abs(np.asarray(scores, dtype=np.float64))
    out = np.zeros(scores.shape, dtype=bool)
    if scores.size == 0:
        return out
    if rule != "gap":
        check_rule(rule)
        flat, mask = scores.reshape(-1, scores.shape[-1]), out.reshape(-1, scores.shape[-1])
        for row in range(flat.shape[0]):
            mask[row, select(flat[row], rule, bins)[0]] = True
        return out
    return _gap_rule(scores)[0]
