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
    return search_lambdas_many(problems, rule=rule, lower=lower, n_candidates=n_candidates,
                               n_history=n_history, chunk=chunk, max_steps=max_steps,
                               objective=objective, config=config)[0]


def search_lambdas_many(
    problems: ProblemSet, *, rule: RuleName, lower: float = 0.01, n_candidates: int = 6,
    n_history: int = 3, chunk: int = 6, max_steps: int = 48,
    objective: ObjectiveName = "ratio", config: OptimiserConfig = FAST,
) -> list[LambdaSearch]:
    """Algorithm 3 for each of the ``problems.n_sets`` data sets, all walks at once: each
    round solves the next chunk of every data set still searching as one batch (lambdas
    (K, chunk), one row per data set), then walks each chunk as the sequential algorithm
    would. Each problem is optimised on its own (own step sizes and early stop), so every
    data set gets the search it would get alone.
    """
    n_sets = problems.n_sets
    paths: list[list[float]] = [[] for _ in range(n_sets)]
    selections: list[list[tuple[int, ...]]] = [[] for _ in range(n_sets)]
    lams = [lower] * n_sets
    searching = list(range(n_sets))
    dtype = problems.delta.dtype
    while searching:
        steps = min(chunk, max_steps - len(paths[searching[0]]))  # equal for all searching
        seqs = [lambda_sequence(lams[i], steps) for i in searching]
        batch = problems if len(searching) == n_sets else problems.sets(
            torch.as_tensor(searching, device=problems.delta.device))
        result = minimise(batch, torch.tensor(seqs, dtype=dtype), objective=objective,
                          config=config)
        weights = result.weights.abs().cpu().numpy()
        still = []
        for row, i in enumerate(searching):
            stopped = False
            for j, value in enumerate(seqs[row]):
                chosen, _ = select(weights[row, j], rule)
                paths[i].append(value)
                selections[i].append(tuple(sorted(int(c) for c in chosen)))
                lams[i] = next_lambda(value)
                if len(chosen) == 1 or (
                    len(selections[i]) >= n_history
                    and len(set(selections[i][-n_history:])) == 1
                ):
                    stopped = True
                    break
            if stopped:
                continue
            if len(paths[i]) >= max_steps:
                log.warning("lambda search did not stop within %d values; using %.3g",
                            max_steps, lams[i])
                continue
            still.append(i)
        searching = still
    return [LambdaSearch(np.linspace(lower, lams[i], n_candidates), lams[i], paths[i],
                         selections[i]) for i in range(n_sets)]
