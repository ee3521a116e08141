"""Batched minimisation of the regularised MMD-power objective.

All B = K * L problems of a run are solved as one tensor program: weights (K, L, D), one
forward and backward pass per epoch for all of them. Each problem keeps its own Adam
state, its own learning rate (reduced on a plateau, like torch's ``ReduceLROnPlateau``),
and its own early stop (the paper's rule: the objective's max - min over the last
``window`` epochs is below ``tol``); a stopped problem is frozen while the others go on.
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass, replace
from typing import Any

import torch

from engine import native
from engine.errors import InvalidParameterError
from engine.problems import ObjectiveName, ProblemSet

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class OptimiserConfig:
    """Adam + plateau learning-rate reduction + early stopping, per problem.

    Paper settings: ``lr=0.01``, ``window=100``, ``tol=1e-3``, ``max_epochs=99_999``;
    plateau reduction with torch's defaults (factor 0.1, patience 10, relative threshold
    1e-4). ``PAPER`` holds them.

    ``log_scale``: Adam steps on ``u = log a`` instead of ``a``. Additive steps of ``lr``
    need ``(sqrt(D) - 1) / lr`` epochs to grow a weight from 1 to the ~sqrt(D) a
    discriminating variable needs under the kernel's 1/D factor (hundreds at lr 0.01);
    multiplicative steps need tens. ``snap``: after the last epoch, weights below
    ``snap/8 ... snap`` times the problem's largest are set to exactly 0 where that lowers
    the objective (the L1 optimum is often exactly 0, which log-scale steps only approach).
    Weights start at 1 as in the paper: starting small (tried: 0.03) reaches a LOWER
    objective (on the wider-variances CV batch 2.8 vs the paper optimiser's 3.2) yet
    selects far worse (mean F1 0.38 vs 0.70 on 4 reps of the six settings), because as
    a -> 0 MMD^2 and sqrt(V) both scale with a^2, so the ratio tends to a finite limit
    while the L1 term vanishes: the objective has a degenerate small-weight valley, and
    the paper's method relies on a local search from 1. Objective values are therefore
    compared between optimisers only from the same start.

    ``backtrack``: when a problem's objective rises more than ``backtrack`` above the lowest
    it has reached, its weights go back to that best point, its step size is halved and its
    Adam moments restart (None: off). Large multiplicative steps can otherwise jump into
    the collapsed-kernel plateau (every off-diagonal kernel value ~0, MMD^2 and its
    variance ~0, no gradient) and stay there. With ``keep_best`` (the default) the best
    point seen is returned, not the last iterate; without it the last iterate (picking
    one iterate over another is a jump in the result). ``schedule``: ``"plateau"``
    (the reduction above) or ``"cosine"`` (lr down to 0 over ``max_epochs``, for every
    problem alike). ``tol=0`` never stops a problem early.

    ``FAST`` (the engine default): log scale, lr 0.5 (the paper's plateau reduction,
    patience 10, brings it down), backtrack 0.1, 20-epoch window, 80-epoch cap, snap 0.05.
    On the CV batches of ``python -m bench.speed`` (60 problems each) it reaches a lower
    mean objective than ``PAPER`` on shifted means and a slightly higher one on wider
    variances, in a tenth of the epochs or less (bench/results/speed.md). Without
    backtracking many wider-variance problems stall on the plateau (mean objective 5.49 vs
    2.19 with it). Tighter settings (backtrack 0.005, or 0: never accept a rise) come
    closer to ``PAPER`` there but select worse (``python -m bench.variants``, 30
    repetitions of the six synthetic settings: mean F1 0.720 vs 0.740, no backtracking
    0.692): a lower training objective is not a better selection, as with the small start
    above.
    """

    lr: float = 0.02
    max_epochs: int = 200
    window: int = 50
    tol: float = 1e-3
    patience: int = 10
    factor: float = 0.1
    threshold: float = 1e-4
    min_lr: float = 1e-5
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    nonnegative: bool = False
    log_scale: bool = False
    snap: float = 0.0
    backtrack: float | None = None
    keep_best: bool = True
    schedule: str = "plateau"

    def __post_init__(self) -> None:
        if not (self.lr > 0 and self.max_epochs >= 1 and self.window >= 2 and self.tol >= 0):
            raise InvalidParameterError(
                "optimiser needs lr > 0, max_epochs >= 1, window >= 2 and tol >= 0; got "
                f"{self}"
            )
        if self.schedule not in SCHEDULES:
            raise InvalidParameterError(
                f"optimiser schedule must be one of {SCHEDULES}, got {self.schedule!r}")


#: step-size schedules: "plateau" (reduce on a plateau, per problem) or "cosine" (from lr
#: down to 0 over max_epochs, the same for every problem)
SCHEDULES: tuple[str, ...] = ("plateau", "cosine")

PAPER = OptimiserConfig(lr=0.01, max_epochs=99_999, window=100, min_lr=0.0, nonnegative=False)
FAST = OptimiserConfig(lr=0.5, max_epochs=80, window=20, log_scale=True, snap=0.05,
                       backtrack=0.1)
#: Weights that are a continuous function of the data: every decision of ``FAST`` that
#: compares two numbers (the early stop, the plateau cut, backtracking, the best point
#: kept, the snap) is gone; 40 epochs whose step size falls from 0.5 to 0 on a cosine, and
#: the last iterate. Adam's steps near an optimum flip with the gradient's sign, and over
#: more epochs at a high step size a 1e-7 change of the data grows to a 1e-2 change of the
#: weights; the cosine's small last steps let the iterate settle instead (bench.sensitivity).
SMOOTH = OptimiserConfig(lr=0.5, max_epochs=40, window=20, tol=0.0, log_scale=True,
                         schedule="cosine", keep_best=False)


@dataclass
class OptimiseResult:
    """``weights`` (K, L, D); ``loss`` (K, L) final regularised objective; ``epochs`` (K, L)
    epochs each problem ran; ``total_epochs`` passes over the batch."""

    weights: torch.Tensor
    loss: torch.Tensor
    epochs: torch.Tensor
    total_epochs: int


@dataclass
class _Batch:
    """The per-problem state of one run, all (K, L) or (K, L, D) tensors.

    ``a``: the iterate (``log a`` on the log scale); ``m1``/``m2``/``steps``: Adam's
    moments and step counts; ``lr``: step sizes; ``best``/``bad``: the plateau reducer's
    reference and epochs without improvement; ``ring``: the last ``window`` objectives
    (early stop); ``active``/``epochs``: problems still running and epochs each ran;
    ``lowest``/``best_a``: the lowest objective seen and its iterate (backtracking and
    the returned point).
    """

    a: torch.Tensor
    m1: torch.Tensor
    m2: torch.Tensor
    steps: torch.Tensor
    lr: torch.Tensor
    best: torch.Tensor
    bad: torch.Tensor
    ring: torch.Tensor
    active: torch.Tensor
    epochs: torch.Tensor
    lowest: torch.Tensor
    best_a: torch.Tensor

    @classmethod
    def start(cls, a: torch.Tensor, shape: tuple[int, int], config: OptimiserConfig) -> _Batch:
        """Fresh state at the starting point ``a`` for ``shape`` = (K, L) problems."""
        dtype, device = a.dtype, a.device
        return cls(
            a=a, m1=torch.zeros_like(a), m2=torch.zeros_like(a),
            steps=torch.zeros(shape, dtype=dtype, device=device),
            lr=torch.full(shape, config.lr, dtype=dtype, device=device),
            best=torch.full(shape, float("inf"), dtype=dtype, device=device),
            bad=torch.zeros(shape, dtype=torch.int64, device=device),
            ring=torch.empty(config.window, *shape, dtype=dtype, device=device),
            active=torch.ones(shape, dtype=torch.bool, device=device),
            epochs=torch.zeros(shape, dtype=torch.int64, device=device),
            lowest=torch.full(shape, float("inf"), dtype=dtype, device=device),
            best_a=a.detach().clone(),
        )


def _starting_point(shape: tuple[int, int], d: int, dtype: torch.dtype, device: torch.device,
                    init: torch.Tensor | None, config: OptimiserConfig) -> torch.Tensor:
    """All ones (the paper's start) or ``init``, as the leaf tensor Adam steps on."""
    if init is None:
        a = torch.ones(*shape, d, dtype=dtype, device=device)
    else:
        a = init.to(dtype=dtype, device=device).clone()
    if config.log_scale:
        # Optimise u = log|a|: Adam's steps of ~lr in u are relative changes of a, so a
        # weight can grow from 1 to sqrt(D) or shrink towards 0 in tens of epochs, where
        # additive steps of lr need hundreds. The objective is even in every a_d, so
        # restricting to a > 0 loses nothing.
        a = a.abs().clamp_min(torch.finfo(dtype).tiny).log()
    a.requires_grad_(True)
    return a


def _track_lowest(s: _Batch, loss: torch.Tensor) -> None:
    """Remember each problem's lowest objective and the iterate that reached it."""
    lower = loss < s.lowest
    s.lowest = torch.where(lower, loss, s.lowest)
    s.best_a = torch.where(lower.unsqueeze(-1), s.a, s.best_a)


def _backtrack(s: _Batch, loss: torch.Tensor, grad: torch.Tensor,
               limit: float) -> tuple[torch.Tensor, torch.Tensor]:
    """A step that raised the objective by more than ``limit`` overshot (large
    multiplicative steps can jump into the collapsed-kernel plateau where every
    off-diagonal kernel value is ~0 and the gradient vanishes): go back to the best point,
    halve the step size and restart Adam's moments there. Returns (loss, grad) with the
    backtracked problems' entries replaced."""
    blown = (loss > s.lowest + limit) & s.active
    # On a CPU most epochs backtrack nothing and the test is free; on a GPU it would be a
    # host sync every epoch, so the masked update below always runs there.
    if s.a.device.type == "cpu" and not bool(blown.any()):
        return loss, grad
    s.a.copy_(torch.where(blown.unsqueeze(-1), s.best_a, s.a))
    keep = (~blown).unsqueeze(-1).to(s.a.dtype)
    s.m1.mul_(keep)
    s.m2.mul_(keep)
    s.steps = torch.where(blown, 0, s.steps)
    s.lr = torch.where(blown, s.lr * 0.5, s.lr)
    return torch.where(blown, s.lowest, loss), grad * keep


def _reduce_on_plateau(s: _Batch, loss: torch.Tensor, config: OptimiserConfig) -> None:
    """No relative improvement for ``patience`` epochs -> lr *= factor (torch's
    ``ReduceLROnPlateau``, per problem)."""
    improved = torch.isinf(s.best) | (loss < s.best - config.threshold * s.best.abs())
    s.best = torch.where(improved, loss, s.best)
    s.bad = torch.where(improved, 0, s.bad + 1)
    cut = s.bad > config.patience
    s.lr = torch.where(cut, (s.lr * config.factor).clamp_min(config.min_lr), s.lr)
    s.bad = torch.where(cut, 0, s.bad)


def _stop_flat(s: _Batch, loss: torch.Tensor, epoch: int, config: OptimiserConfig) -> None:
    """The paper's early stop: a problem whose objective's max - min over the last
    ``window`` epochs is below ``tol`` is frozen."""
    s.ring[epoch % config.window] = loss
    if epoch + 1 >= config.window:
        flat = (s.ring.amax(0) - s.ring.amin(0)) < config.tol
        s.active &= ~flat


def _adam_step(s: _Batch, grad: torch.Tensor, config: OptimiserConfig) -> None:
    """One Adam step of every active problem, each with its own step size and count."""
    b1, b2 = config.betas
    grad = torch.nan_to_num(grad) * s.active.unsqueeze(-1)
    act = s.active.to(s.a.dtype)
    s.steps += act
    s.m1.lerp_(grad, (1 - b1) * act.unsqueeze(-1))
    s.m2.lerp_(grad.square(), (1 - b2) * act.unsqueeze(-1))
    t = s.steps.clamp_min(1).unsqueeze(-1)
    step = s.lr.unsqueeze(-1) * (s.m1 / (1 - b1**t)) / ((s.m2 / (1 - b2**t)).sqrt() + config.eps)
    s.a -= step * act.unsqueeze(-1)
    if config.nonnegative and not config.log_scale:
        # The objective is even in each a_d, so its minimum over a >= 0 is its
        # minimum: projecting keeps weights that the L1 term drives to zero at
        # exactly zero instead of oscillating around it, so problems stop early.
        s.a.clamp_(min=0)
    s.epochs += s.active.to(torch.int64)


def _snap(problems: ProblemSet, a: torch.Tensor, final: torch.Tensor, lambdas: torch.Tensor,
          objective: ObjectiveName, snap: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Weights far below the problem's largest are set to exactly 0 where that lowers the
    objective (the L1 optimum is often exactly 0, which log-scale steps only approach).
    Thresholds snap/8 ... snap, best kept per problem: four extra evaluations for all
    problems together. Returns (weights, objective)."""
    top = a.abs().amax(-1, keepdim=True)
    for frac in (snap / 8, snap / 4, snap / 2, snap):
        snapped = torch.where(a.abs() < frac * top, torch.zeros_like(a), a)
        loss_snapped = problems.loss(snapped, lambdas, objective)
        better = loss_snapped < final
        a = torch.where(better.unsqueeze(-1), snapped, a)
        final = torch.where(better, loss_snapped, final)
    return a, final


def minimise(
    problems: ProblemSet, lambdas: torch.Tensor, *, objective: ObjectiveName = "ratio",
    config: OptimiserConfig = FAST, init: torch.Tensor | None = None,
) -> OptimiseResult:
    """Minimise ``-log l(a) + lambda |a|_1`` for every data set and every lambda at once.

    ``lambdas``: (L,) shared by all K data sets, or (K, L). ``init``: (K, L, D) starting
    weights (default: all ones, the paper's). Returns an :class:`OptimiseResult`.

    Each epoch: one forward and backward pass, then per problem: remember the lowest
    point, backtrack on a blow-up (``config.backtrack``), reduce the step size on a
    plateau (or follow the cosine schedule), stop when flat, and take an Adam step. At the
    end the best point seen is taken (``config.keep_best``) and, with ``config.snap``,
    small weights are snapped to 0.
    """
    dtype, device = problems.delta.dtype, problems.delta.device
    lambdas = lambdas.to(dtype=dtype, device=device)
    shape = (problems.n_sets, lambdas.shape[-1])
    a = _starting_point(shape, problems.delta.shape[1], dtype, device, init, config)
    if _native_applies(problems, config, objective):
        return _minimise_native(problems, lambdas, objective, config, a)
    s = _Batch.start(a, shape, config)
    weights_of = torch.exp if config.log_scale else (lambda w: w)
    # tol=0 never stops a problem (max - min is never < 0): no ring to keep, and on a GPU
    # no host sync to ask whether all stopped (SMOOTH)
    can_stop = config.tol > 0
    epoch = 0
    for epoch in range(config.max_epochs):
        loss = problems.loss(weights_of(s.a), lambdas, objective)
        (grad,) = torch.autograd.grad(loss.sum(), s.a)
        with torch.no_grad():
            loss = loss.detach()
            _track_lowest(s, loss)
            if config.backtrack is not None:
                loss, grad = _backtrack(s, loss, grad, config.backtrack)
            if config.schedule == "cosine":
                s.lr.fill_(config.lr * 0.5 * (1 + math.cos(math.pi * epoch / config.max_epochs)))
            else:
                _reduce_on_plateau(s, loss, config)
            if can_stop:
                _stop_flat(s, loss, epoch, config)
            _adam_step(s, grad, config)
        if can_stop and epoch % 10 == 9 and not bool(s.active.any()):
            break
    with torch.no_grad():
        # The best point seen (Adam's last iterate can sit above it).
        final_now = problems.loss(weights_of(s.a.detach()), lambdas, objective)
        if config.keep_best:
            a = weights_of(torch.where((final_now <= s.lowest).unsqueeze(-1), s.a.detach(),
                                       s.best_a))
            final = problems.loss(a, lambdas, objective)
        else:
            a, final = weights_of(s.a.detach()), final_now
        if config.snap > 0:
            a, final = _snap(problems, a, final, lambdas, objective, config.snap)
    log.debug("optimised %d problems in %d epochs", shape[0] * shape[1], epoch + 1)
    return OptimiseResult(a, final, s.epochs, epoch + 1)


def _native_applies(problems: ProblemSet, config: OptimiserConfig,
                    objective: ObjectiveName) -> bool:
    """Whether :mod:`engine.native` computes this run: ``SMOOTH``'s kind of schedule (log
    scale, cosine, no early stop, backtracking, best point or snap) on float64 CPU
    problems of the quadratic estimator and Gaussian kernel without padded rows, and the
    library is built."""
    return (problems.delta.device.type == "cpu" and problems.mx is None and problems.my is None
            and problems.n >= 2 and problems.m >= 2
            and native_settings(config, objective, problems.delta.dtype, problems.estimator,
                                problems.kernel))


def native_settings(config: OptimiserConfig, objective: ObjectiveName, dtype: torch.dtype,
                    estimator: str, kernel: str) -> bool:
    """Whether fits of these settings run in :mod:`engine.native` on the CPU (the part of
    :func:`_native_applies` that does not depend on the data): ``device="auto"`` keeps
    larger batches of them on the CPU, which the C optimiser made twice as fast
    (:data:`engine._fitting.AUTO_GPU_BYTES_NATIVE`)."""
    return (dtype == torch.float64 and estimator == "quadratic" and kernel == "gaussian"
            and config.log_scale and config.schedule == "cosine" and config.tol == 0
            and config.backtrack is None and not config.keep_best and config.snap == 0
            and objective in ("ratio", "mmd") and native.library() is not None)


def _minimise_native(problems: ProblemSet, lambdas: torch.Tensor, objective: ObjectiveName,
                     config: OptimiserConfig, u: torch.Tensor) -> OptimiseResult:
    """:func:`minimise` by :func:`engine.native.smooth_minimise`: the same epochs, each
    problem in the core's cache; the last iterate and its objective."""
    k, length = u.shape[0], u.shape[1]
    d = problems.delta.shape[1]
    gamma = problems.gamma.reshape(-1, d).expand(k, d)
    u, final = native.smooth_minimise(
        problems.delta, problems.n, problems.m, gamma, lambdas.expand(k, length), u,
        epochs=config.max_epochs, lr=config.lr, betas=config.betas, eps=config.eps,
        ratio=objective == "ratio")
    weights = torch.exp(u)
    epochs = torch.full((k, length), config.max_epochs, dtype=torch.int64)
    log.debug("optimised %d problems in %d epochs (C)", k * length, config.max_epochs)
    return OptimiseResult(weights, final, epochs, config.max_epochs)


def paper_config(**changes: Any) -> OptimiserConfig:
    """The paper's settings with optional changes (e.g. ``max_epochs``)."""
    return replace(PAPER, **changes)
