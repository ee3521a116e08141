"""Candidate regularisation parameters (the paper's Algorithm 3), batched.

The doubling-then-adding sequence 0.01, 0.02, ..., 0.64, 1.28, 1.78, 2.28, ... is known in
advance, so a whole chunk of it is solved as one batch; the chunk is then walked exactly
as the sequential algorithm would, and a further chunk is solved only if no stop occurred.
The chunk (6: 0.01 ... 0.32) covers the stop of most data sets seen in the benchmarks, and
a batch's cost grows with its size, so a longer chunk would mostly solve unused lambdas.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import torch

from engine.optimiser import FAST, OptimiserConfig, minimise
from engine.problems import ObjectiveName, ProblemSet
from engine.selection import RuleName, select

log = logging.getLogger(__name__)


def next_lambda(lam: float) -> float:
    """Algorithm 3's Update: double below 1, else add 0.5."""
    return 2 * lam if 0 < lam < 1.0 else lam + 0.5


def lambda_sequence(lower: float, count: int) -> list[float]:
    seq = [lower]
    while len(seq) < count:
        seq.append(next_lambda(seq[-1]))
    return seq


@dataclass
class LambdaSearch:
    """``candidates`` (n_candidates,) increasing; ``upper``; the walked ``path`` of lambdas
    and the selections (tuples of indices) found along it."""

    candidates: np.ndarray
    upper: float
    path: list[float]
    selections: list[tuple[int, ...]]


def search_lambdas(
    problems: ProblemSet, *, rule: RuleName, lower: float = 0.01, n_candidates: int = 6,
    n_history: int = 3, chunk: int = 6, max_steps: int = 48,
    objective: ObjectiveName = "ratio", config: OptimiserConfig = FAST,
) -> LambdaSearch:
    """Run Algorithm 3 on one data set (``problems.n_sets == 1``).

    Stops when exactly one variable is selected or the selection is unchanged over the last
    ``n_history`` lambdas; ``upper`` is then the Update of the stopping lambda, as in the
    paper's pseudo-code. Gives up after ``max_steps`` lambdas (upper = the last one).
    """
    path: list[float] = []
    selections: list[tuple[int, ...]] = []
    lam = lower
    stopped = False
    while not stopped and len(path) < max_steps:
        seq = lambda_sequence(lam, min(chunk, max_steps - len(path)))
        dtype = problems.delta.dtype
        result = minimise(problems, torch.tensor(seq, dtype=dtype), objective=objective,
                          config=config)
        weights = result.weights[0].abs().cpu().numpy()
        for i, value in enumerate(seq):
            chosen, _ = select(weights[i], rule)
            path.append(value)
            selections.append(tuple(sorted(int(c) for c in chosen)))
            lam = next_lambda(value)
            if len(chosen) == 1 or (
                len(selections) >= n_history
                and len(set(selections[-n_history:])) == 1
            ):
                stopped = True
                break
    if not stopped:
        log.warning("lambda search did not stop within %d values; using %.3g", max_steps, lam)
    upper = lam
    candidates = np.linspace(lower, upper, n_candidates)
    return LambdaSearch(candidates, upper, path, selections)
