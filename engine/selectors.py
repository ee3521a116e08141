"""The four selectors: CVAggregation (default), ModelSelection, MMDBaseline,
RegressionBaseline. Parameters go to the constructor; ``fit(X, Y)`` returns a
:class:`engine.result.Selection`.

Every result carries a calibrated ``p_value`` for "X and Y differ", valid under the null
P = Q (exchangeable rows, or exchangeable blocks with ``block_size``): ARD weights are
learned on the training half of a split only, and the validation half is tested with the
MMD permutation test under that learned kernel; such a split p-value is exactly valid
because the kernel does not depend on the validation data. CVAggregation combines its
K cross-fitted split p-values by ``min(1, (K/k) p_(k))`` with k = ceil(K/2), i.e. twice
the lower median, which is valid under any dependence between them. With exchangeable
rows that split p-value is combined with a full-sample permutation test of per-variable
moments (engine/moment_test.py) as ``min(1, p_split / w, p_moments / (1 - w))`` (weighted
Bonferroni, w = ``split_weight``, 0.25 by default): still exactly valid, and far more
powerful for changes of one variable's spread or shape.

``selected`` is filled only when ``p_value < alpha``; ``candidates`` always holds what the
selection rule picks from the scores (the ranking is kept either way).
"""
from __future__ import annotations

import logging
import math
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch

from engine import _fitting as F
from engine.errors import EngineError, InvalidParameterError
from engine.kernels import HeuristicName, KernelName, check_kernel
from engine.lambdas import search_lambdas_many
from engine.moment_test import moment_permutation_pvalue
from engine.optimiser import FAST, PAPER, SMOOTH, OptimiserConfig, minimise, native_settings
from engine.permutation import combine_split_pvalues
from engine.problems import ESTIMATORS, OBJECTIVES, EstimatorName, ObjectiveName, ProblemSet
from engine.result import Selection
from engine.selection import DEFAULT_RULE, RuleName, check_rule, select, select_masks
from engine.splits import Splits, block_ids, make_splits, permutation_labels
from engine.starts import memberships, moment_starts, pick_lower

log = logging.getLogger(__name__)
#: the gate's test on a split's selected variables; ``"none"``: no gate, every split counts
#: (as with the gate fallback), for a caller that needs only the validation ratios (the
#: live decision's history values: a tenth of a fit's time less, the ratios bit-equal)
GATE_TESTS: tuple[str, ...] = ("sliced_wasserstein", "mmd", "none")
#: largest permutation-statistics batch (bytes) of the batched split fits on a CPU (cache);
#: on a GPU the training batch's limit, so that a batch's tests are a few launches
_PERMUTATION_BYTES = 4 * 2**20
STARTS: tuple[str, ...] = ("ones", "ones+moments", "moments")


@dataclass(frozen=True)
class SplitFit:
    """What :meth:`_Selector._split_fit` computes over K splits and L lambdas (A: the
    active variables).

    ``weights`` (K, L, A) learned ARD weights (absolute values); ``val_ratio`` (K, L)
    power ratio on the validation halves; ``subsets`` (K, L, A) selected variables;
    ``gate_p`` (K, L) gate p-values of the selections (NaN without a gate); ``split_p``
    (K,) split p-values of the learned-kernel MMD test; ``train_ratio`` (K, L) power ratio
    on the training halves (NaN in a batched fit without its p-value: only the split
    p-values read it);
    ``epochs`` passes of the optimiser over the batch; ``start`` (K, L) the start kept
    per problem (0 all ones, 1 moments; engine/starts.py).
    """

    weights: np.ndarray
    val_ratio: np.ndarray
    subsets: np.ndarray
    gate_p: np.ndarray
    split_p: np.ndarray
    train_ratio: np.ndarray
    epochs: int
    start: np.ndarray


@dataclass
class _SplitSetup:
    """What a split fit prepares before the optimiser: the splits, the training problems
    (K sets), the lambdas (L,), the starting weights (K, L, A) and which start each is
    (K, L)."""

    splits: Splits
    train: ProblemSet
    lam: torch.Tensor
    init: torch.Tensor
    start: torch.Tensor


def _optimiser(value: str | OptimiserConfig) -> OptimiserConfig:
    if isinstance(value, OptimiserConfig):
        return value
    if value == "fast":
        return FAST
    if value == "paper":
        return PAPER
    if value == "smooth":
        return SMOOTH
    raise InvalidParameterError(
        f"optimiser must be 'fast', 'paper', 'smooth' or an OptimiserConfig, got {value!r}"
    )


class _Selector:
    """Parameters shared by all selectors (see the subclasses for the method)."""

    method = "base"
    #: train/validation splits of one fit (CVAggregation sets its own)
    n_splits: int = 1

    def __init__(
        self, *, seed: int = 0, device: str = "auto", alpha: float = 0.05,
        block_size: int | None = None, selection: RuleName = DEFAULT_RULE,
        kernel: KernelName = "gaussian", length_scale: HeuristicName = "median",
        estimator: EstimatorName = "quadratic", objective: ObjectiveName = "ratio",
        optimiser: str | OptimiserConfig = "fast",
        n_permutations: int = 199, p_value_permutations: int = 999, n_projections: int = 10,
        train_fraction: float = 0.5, dtype: str = "float32", n_threads: int | None = 1,
        gate_test: str = "mmd", starts: str = "ones+moments", split_weight: float = 0.25,
        n_jobs: int | None = 1, compute_p_value: bool = True,
    ) -> None:
        self.n_jobs = n_jobs
        self.compute_p_value = bool(compute_p_value)
        self.gate_test = gate_test
        self.split_weight = float(split_weight)
        self.starts = starts
        self.seed = int(seed)
        self.device = device
        self.alpha = float(alpha)
        self.block_size = block_size
        self.selection = selection
        self.kernel = kernel
        self.length_scale = length_scale
        self.estimator = estimator
        self.objective = objective
        self.optimiser = optimiser
        self.n_permutations = int(n_permutations)
        self.p_value_permutations = int(p_value_permutations)
        self.n_projections = int(n_projections)
        self.train_fraction = float(train_fraction)
        self.dtype = dtype
        self.n_threads = n_threads
        self._check()

    def fit(self, x: Any, y: Any) -> Selection:
        """Select the variables in which X (n, D) and Y (m, D) differ."""
        with F.torch_threads(self.n_threads):
            return self._fit(x, y)

    def test_statistics(self, pairs: Sequence[tuple[Any, Any]]) -> np.ndarray:
        """The block test's statistic (:func:`engine.block_test.block_statistics`) of each
        (X (n, D), Y (m, D)) pair, shape (T,), the pairs prepared as :meth:`fit` prepares
        them; NaN for a pair that is bad input. No fit and no permutations: cheap enough
        to compute at many earlier times of a source."""
        from engine.block_test import block_statistics

        out = np.full(len(pairs), np.nan)
        with F.torch_threads(self.n_threads):
            good: list[tuple[int, F.Prepared]] = []
            for i, (x, y) in enumerate(pairs):
                try:
                    good.append((i, self._prepare(x, y)))
                except EngineError as exc:
                    log.debug("test statistic of pair %d: %s", i, exc)
            if good:
                out[[i for i, _ in good]] = block_statistics([p for _, p in good], self.kernel)
        return out

    def _fit(self, x: Any, y: Any) -> Selection:  # the method, in each subclass
        raise NotImplementedError

    def _check(self) -> None:
        check_rule(self.selection)
        check_kernel(self.kernel)
        if self.estimator not in ESTIMATORS:
            raise InvalidParameterError(f"estimator must be one of {ESTIMATORS}, got {self.estimator!r}")
        if self.objective not in OBJECTIVES:
            raise InvalidParameterError(f"objective must be one of {OBJECTIVES}, got {self.objective!r}")
        if not 0 < self.alpha < 1:
            raise InvalidParameterError(f"alpha must be in (0, 1), got {self.alpha}")
        if not 0 < self.train_fraction < 1:
            raise InvalidParameterError(f"train_fraction must be in (0, 1), got {self.train_fraction}")
        if self.n_permutations < 1 or self.p_value_permutations < 1 or self.n_projections < 1:
            raise InvalidParameterError("n_permutations, p_value_permutations and n_projections must be >= 1")
        if self.block_size is not None and (int(self.block_size) != self.block_size or self.block_size < 1):
            raise InvalidParameterError(f"block_size must be a positive integer or None, got {self.block_size!r}")
        if not 0 < self.split_weight < 1:
            raise InvalidParameterError(
                f"split_weight must be in (0, 1), got {self.split_weight} (0.25: the default)")
        if self.starts not in STARTS:
            raise InvalidParameterError(f"starts must be one of {STARTS}, got {self.starts!r}")
        if self.gate_test not in GATE_TESTS:
            raise InvalidParameterError(f"gate_test must be one of {GATE_TESTS}, got {self.gate_test!r}")
        _optimiser(self.optimiser)
        F.resolve_dtype(self.dtype)
        F.resolve_jobs(self.n_jobs)

    def get_params(self) -> dict[str, Any]:
        params = {k: v for k, v in vars(self).items() if not k.startswith("_")}
        if isinstance(params.get("optimiser"), OptimiserConfig):
            params["optimiser"] = repr(params["optimiser"])
        return params

    # -- shared steps ------------------------------------------------------------------
    def _p_value(self, prep: F.Prepared, split_p: np.ndarray,
                 moment_labels: torch.Tensor | None = None) -> tuple[float, dict[str, float]]:
        """The reported p-value and its parts.

        Rows exchangeable: ``min(1, p_split / w, p_moments / (1 - w))`` with w =
        ``split_weight``, a weighted Bonferroni combination (valid for any weights fixed
        in advance) of two exactly valid p-values: twice the lower median of the split
        p-values (learned kernels, validation halves; sees joint changes) and the
        full-sample permutation test of per-variable moments (:mod:`engine.moment_test`;
        sees changes of one variable's mean, spread or shape with all the rows). Whole
        blocks (block_size): a full-sample block permutation test, because a validation
        half has too few blocks to ever reach alpha (see engine/block_test.py).
        ``moment_labels``: :meth:`_moment_labels` of the data's shape, drawn once for many
        data sets (None: drawn here). ``compute_p_value=False``: NaN and no parts, nothing
        tested.
        """
        if not self.compute_p_value:
            return math.nan, {}
        if self.block_size is None:
            p_split = combine_split_pvalues(split_p)
            p_moments = self._moment_pvalue(prep, moment_labels)
            w = self.split_weight
            p = min(1.0, p_split / w, p_moments / (1 - w))
            return p, {"split": p_split, "moments": p_moments}
        from engine.block_test import block_permutation_pvalue

        p = block_permutation_pvalue(prep, int(self.block_size), self.p_value_permutations,
                                     self.seed, self.kernel)
        return p, {"block": p}

    @property
    def _own_p_value_labels(self) -> bool:
        """Whether the split p-values draw permutation labels of their own rather than
        reuse the gate's (another count, or whole blocks); never without a p-value."""
        return self.compute_p_value and (self.p_value_permutations != self.n_permutations
                                         or self.block_size is not None)

    def _moment_labels(self, n: int, m: int) -> torch.Tensor:
        """The moment test's permutation labels (B+1, n+m): a stream of their own (the
        splits' draws are unchanged by it), the same for every data set of n and m rows."""
        rng = np.random.default_rng([self.seed, 0x30E])
        return torch.as_tensor(permutation_labels(block_ids(n, None), block_ids(m, None),
                                                  self.p_value_permutations, rng))

    def _moment_pvalue(self, prep: F.Prepared, labels: torch.Tensor | None = None) -> float:
        if labels is None:
            labels = self._moment_labels(prep.x.shape[0], prep.y.shape[0])
        p, _ = moment_permutation_pvalue(prep.x, prep.y, labels)
        return p

    def _prepare(self, x: Any, y: Any, *, place: bool = True) -> F.Prepared:
        """The checked data on the fit's device. ``device="auto"``: on the CPU, and on the
        GPU only when the fit is big enough to gain there (``place=False``: left on the
        CPU, for :meth:`_placed` to decide for a whole batch)."""
        auto = self.device == "auto"
        prep = F.prepare(x, y, block_size=self.block_size, heuristic=self.length_scale,
                         device=torch.device("cpu") if auto else F.resolve_device(self.device),
                         dtype=F.resolve_dtype(self.dtype))
        return self._placed([prep])[0] if place else prep

    def _placed(self, preps: list[F.Prepared]) -> list[F.Prepared]:
        """Data sets of one shape fitted together, moved to the GPU under
        ``device="auto"`` when their training pair differences reach
        :data:`engine._fitting.AUTO_GPU_BYTES`, or :data:`~engine._fitting.
        AUTO_GPU_BYTES_NATIVE` for settings the C optimiser fits on the CPU (below it a
        fit is launch-bound there and the CPU is faster: docs/engine.md, "The GPU")."""
        if self.device != "auto" or not preps or preps[0].active.size == 0:
            return preps
        native = native_settings(_optimiser(self.optimiser), self.objective,
                                 F.resolve_dtype(self.dtype), self.estimator, self.kernel)
        device = F.auto_device(len(preps) * self._delta_bytes(*preps[0].shape), native)
        return preps if device.type == "cpu" else [p.to(device) for p in preps]

    def _delta_bytes(self, n: int, m: int, a: int) -> int:
        """Bytes of the training pair differences of one fit (its K splits) at ``dtype``."""
        n_t, m_t = round(n * self.train_fraction), round(m * self.train_fraction)
        pairs = n_t // 2 * n_t + m_t // 2 * m_t + n_t * m_t
        return self.n_splits * a * pairs * (4 if self.dtype == "float32" else 8)

    def _full_problem(self, prep: F.Prepared) -> ProblemSet:
        return self._full_problems([prep])

    def _full_problems(self, preps: list[F.Prepared]) -> ProblemSet:
        """The whole samples of data sets of one shape as one batch, built at once (each
        keeps its own length scales): ``ProblemSet.concat`` of one build each, value for
        value, without a build's fixed cost per data set."""
        gamma = preps[0].gamma
        if any(not torch.equal(p.gamma, gamma) for p in preps[1:]):
            gamma = torch.stack([p.gamma for p in preps]).unsqueeze(1)  # (N, 1, A)
        return ProblemSet.build(torch.stack([p.x for p in preps]),
                                torch.stack([p.y for p in preps]), gamma,
                                kernel=self.kernel, estimator=self.estimator)

    def _trivial(self, prep: F.Prepared, t0: float, n_lambdas: int = 1) -> Selection:
        """All columns constant: nothing can differ, nothing is selected, p = 1."""
        log.warning("every column is constant in X and Y together; nothing to select")
        d = prep.n_vars
        return self._result(prep, np.zeros(d), np.zeros(0, dtype=int), float("inf"), 1.0,
                            np.zeros(n_lambdas), np.zeros((n_lambdas, d)), [1.0], t0, {})

    def _result(self, prep: F.Prepared, scores: np.ndarray, chosen: np.ndarray, threshold: float,
                p_value: float | tuple[float, dict[str, float]], lambdas: np.ndarray,
                per_lambda: np.ndarray, split_p: list[float], t0: float,
                details: dict[str, Any]) -> Selection:
        """The Selection. ``chosen`` (the rule's picks, highest score first) become
        ``candidates``; they are also ``selected`` only when ``p_value < alpha``, so that a
        reader of ``selected`` alone never acts on an insignificant difference."""
        p, parts = p_value if isinstance(p_value, tuple) else (p_value, {})
        labels = prep.samples.labels
        candidates = [int(i) for i in chosen]
        significant = math.isfinite(p) and p < self.alpha
        selected = candidates if significant else []
        return Selection(
            method=self.method, labels=list(labels), scores=np.asarray(scores, dtype=float),
            selected=[labels[i] for i in selected], p_value=float(p),
            threshold=float(threshold), lambdas=np.asarray(lambdas, dtype=float),
            scores_per_lambda=np.asarray(per_lambda, dtype=float),
            split_p_values=[float(q) for q in split_p], params=self.get_params(),
            device=str(prep.device), seed=self.seed, runtime_s=time.perf_counter() - t0,
            selected_index=selected, details=details,
            candidates=[labels[i] for i in candidates], candidate_index=candidates,
            p_value_parts={k: float(v) for k, v in parts.items()},
        )

    def _split_fit(self, prep: F.Prepared, lambdas: np.ndarray, n_splits: int,
                   rng: np.random.Generator) -> SplitFit:
        """Optimise every lambda on the training half of every split (one batch), then
        compute on the validation halves: power ratio, selections, gate p-values, and
        the split p-values of the learned-kernel MMD test. See :class:`SplitFit`.
        """
        return self._split_fits([prep], [lambdas], n_splits, [rng])[0]

    def _split_fits(self, preps: list[F.Prepared], lambdas: list[np.ndarray], n_splits: int,
                    rngs: list[np.random.Generator]) -> list[SplitFit]:
        """:meth:`_split_fit` of several data sets of one shape, their training problems
        solved as ONE batch (N data sets x K splits x L lambdas); each data set draws from
        its own ``rng`` in the order a single fit does, so each gets the fit it would get
        alone.

        With the MMD gate a fit's draws (the splits, the permutation labels) depend on the
        shape alone, so data sets whose streams are in one state draw them once and every
        step after the optimiser is one batched computation too
        (:meth:`_split_fits_shared`)."""
        if self.gate_test in ("mmd", "none") and all(
                r.bit_generator.state == rngs[0].bit_generator.state for r in rngs[1:]):
            return self._split_fits_shared(preps, lambdas, n_splits, rngs)
        setups = [self._split_setup(p, lam, n_splits, rng)
                  for p, lam, rng in zip(preps, lambdas, rngs, strict=True)]
        train = ProblemSet.concat([s.train for s in setups])
        lam = torch.cat([s.lam.expand(s.train.n_sets, -1) for s in setups])  # (N*K, L)
        init = torch.cat([s.init for s in setups])
        res = minimise(train, lam, objective=self.objective, config=_optimiser(self.optimiser),
                       init=init)
        fits = []
        for i, (prep, setup, rng) in enumerate(zip(preps, setups, rngs, strict=True)):
            rows = slice(i * n_splits, (i + 1) * n_splits)
            fits.append(self._split_finish(prep, setup, res.weights[rows].abs(),
                                           int(res.total_epochs), rng))
        return fits

    def _split_fits_shared(self, preps: list[F.Prepared], lambdas: list[np.ndarray],
                           n_splits: int, rngs: list[np.random.Generator]) -> list[SplitFit]:
        """:meth:`_split_fits` for data sets that draw the same splits and labels: drawn
        once, and the N*K sets (data set major) computed together from the stacked data
        x (N, n, A), y (N, m, A)."""
        rng = rngs[0]
        n, m, _ = preps[0].shape
        splits = make_splits(n, m, n_splits, rng, train_fraction=self.train_fraction,
                             block_size=self.block_size)
        gated = self.gate_test != "none"
        gate_labels = F.validation_labels(splits, block_size=None,
                                          n_permutations=self.n_permutations, rng=rng) \
            if gated else None
        p_labels = gate_labels
        if self._own_p_value_labels or (not gated and self.compute_p_value):
            p_labels = F.validation_labels(splits, block_size=self.block_size,
                                           n_permutations=self.p_value_permutations, rng=rng)
        for other in rngs[1:]:  # each stream ends where a fit of its own leaves it
            other.bit_generator.state = rng.bit_generator.state
        x = torch.stack([p.x for p in preps])
        y = torch.stack([p.y for p in preps])
        gamma = torch.stack([p.gamma for p in preps])  # (N, A)
        train = F.stacked_split_problems(x, y, gamma, splits, "train", self.kernel,
                                         self.estimator)
        lam = torch.cat([torch.as_tensor(v, dtype=x.dtype, device=x.device).expand(n_splits, -1)
                         for v in lambdas])  # (N*K, L)
        init, start = self._starting_points(x, y, splits, train, lam)
        res = minimise(train, lam, objective=self.objective, config=_optimiser(self.optimiser),
                       init=init)
        weights = res.weights.abs()  # (N*K, L, A)
        val_problems = F.stacked_split_problems(x, y, gamma, splits, "val", self.kernel,
                                                self.estimator)
        with torch.no_grad():
            val_ratio = val_problems.ratio(weights).cpu().numpy()
            # only the split p-values' kernel choice reads the training ratios
            train_ratio = train.ratio(weights).cpu().numpy() if self.compute_p_value \
                else np.full(val_ratio.shape, np.nan)
        w_np = weights.cpu().numpy()
        subsets = select_masks(w_np, self.selection)
        gammas = gamma.repeat_interleave(n_splits, 0)  # (N*K, A)
        # The p-value kernel is chosen on training data only (highest unpenalised training
        # power), so each split p-value stays exactly valid.
        best = np.nan_to_num(train_ratio, nan=-np.inf).argmax(axis=1)
        w_best = weights[torch.arange(weights.shape[0]), torch.as_tensor(best)]
        gate_p = np.full(val_ratio.shape, np.nan)
        split_p = np.full(weights.shape[0], np.nan)
        if not gated and not self.compute_p_value:
            return self._shared_fits(len(preps), n_splits, w_np, val_ratio, subsets, gate_p,
                                     split_p, train_ratio, int(res.total_epochs), start)
        assert p_labels is not None
        # permutation statistics of a few data sets at a time: (K L, B+1, Nv) per data set
        gate_perms = weights.shape[1] * gate_labels.shape[1] if gate_labels is not None else 0
        per_set = n_splits * max(gate_perms, p_labels.shape[1]) \
            * p_labels.shape[2] * x.element_size()
        limit = _PERMUTATION_BYTES if x.device.type == "cpu" else F.batch_bytes(x.device)
        step = max(1, limit // max(per_set, 1))
        for first in range(0, len(preps), step):
            part = slice(first, min(first + step, len(preps)))
            rows = slice(part.start * n_splits, part.stop * n_splits)
            # The gate only weights the scores; the reported p-value carries the
            # false-alarm guarantee. With whole-day blocks a validation half has so few
            # blocks that a block-permuted gate could never pass (min p ~ 0.1), so the
            # gate permutes rows.
            val = None
            if gate_labels is not None:
                val = F.stacked_validation(x[part], y[part], splits, gate_labels)
                gate_p[rows] = F.gate_mmd_pvalues(val, weights[rows], subsets[rows],
                                                  gammas[rows], self.kernel)
            if not self.compute_p_value:
                continue
            val_p = val if val is not None and p_labels is gate_labels else \
                F.stacked_validation(x[part], y[part], splits, p_labels)
            split_p[rows] = F.split_mmd_pvalues(val_p, w_best[rows], gammas[rows], self.kernel)
        return self._shared_fits(len(preps), n_splits, w_np, val_ratio, subsets, gate_p,
                                 split_p, train_ratio, int(res.total_epochs), start)

    @staticmethod
    def _shared_fits(n_sets: int, n_splits: int, weights: np.ndarray, val_ratio: np.ndarray,
                     subsets: np.ndarray, gate_p: np.ndarray, split_p: np.ndarray,
                     train_ratio: np.ndarray, epochs: int, start: torch.Tensor
                     ) -> list[SplitFit]:
        """The stacked (N*K, ...) arrays of N data sets cut into one SplitFit each."""
        start_np = start.cpu().numpy()
        fits = []
        for i in range(n_sets):
            rows = slice(i * n_splits, (i + 1) * n_splits)
            fits.append(SplitFit(weights=weights[rows], val_ratio=val_ratio[rows],
                                 subsets=subsets[rows], gate_p=gate_p[rows],
                                 split_p=split_p[rows], train_ratio=train_ratio[rows],
                                 epochs=epochs, start=start_np[rows]))
        return fits

    def _split_setup(self, prep: F.Prepared, lambdas: np.ndarray, n_splits: int,
                     rng: np.random.Generator) -> _SplitSetup:
        n, m = prep.x.shape[0], prep.y.shape[0]
        splits = make_splits(n, m, n_splits, rng, train_fraction=self.train_fraction,
                             block_size=self.block_size)
        train = F.split_problems(prep, splits, "train", self.kernel, self.estimator)
        lam = torch.as_tensor(lambdas, dtype=prep.dtype, device=prep.device)
        init, start = self._starting_points(prep.x.unsqueeze(0), prep.y.unsqueeze(0), splits,
                                            train, lam)
        return _SplitSetup(splits, train, lam, init, start)

    def _split_finish(self, prep: F.Prepared, setup: _SplitSetup, weights: torch.Tensor,
                      epochs: int, rng: np.random.Generator) -> SplitFit:
        """Everything after the optimiser, for one data set: ``weights`` (K, L, A)."""
        splits, train, start = setup.splits, setup.train, setup.start
        val_problems = F.split_problems(prep, splits, "val", self.kernel, self.estimator)
        with torch.no_grad():
            val_ratio = val_problems.ratio(weights).cpu().numpy()
            train_ratio = train.ratio(weights).cpu().numpy()
        w_np = weights.cpu().numpy()
        subsets = select_masks(w_np, self.selection)
        # The gate only weights the scores; the reported p-value carries the false-alarm
        # guarantee. With whole-day blocks a validation half has so few blocks that a
        # block-permuted gate could never pass (min p ~ 0.1), so the gate permutes rows.
        val = None
        if self.gate_test == "none":
            gate_p = np.full(val_ratio.shape, np.nan)
        else:
            val = F.validation_set(prep, splits, block_size=None,
                                   n_permutations=self.n_permutations, rng=rng)
            gate_p = F.gate_mmd_pvalues(val, weights, subsets, prep.gamma, self.kernel) \
                if self.gate_test == "mmd" else \
                F.gate_pvalues(val, subsets, n_projections=self.n_projections, rng=rng)
        # The p-value kernel is chosen on training data only (highest unpenalised training
        # power), so each split p-value stays exactly valid.
        best = np.nan_to_num(train_ratio, nan=-np.inf).argmax(axis=1)
        w_best = weights[torch.arange(weights.shape[0]), torch.as_tensor(best)]
        split_p = np.full(weights.shape[0], np.nan)
        if self.compute_p_value:
            val_p = F.validation_set(prep, splits, block_size=self.block_size,
                                     n_permutations=self.p_value_permutations, rng=rng) \
                if self._own_p_value_labels or val is None else val
            split_p = F.split_mmd_pvalues(val_p, w_best, prep.gamma, self.kernel)
        return SplitFit(weights=w_np, val_ratio=val_ratio, subsets=subsets, gate_p=gate_p,
                        split_p=split_p, train_ratio=train_ratio,
                        epochs=epochs, start=start.cpu().numpy())

    def _starting_points(self, x: torch.Tensor, y: torch.Tensor, splits: Splits,
                         train: ProblemSet, lam: torch.Tensor
                         ) -> tuple[torch.Tensor, torch.Tensor]:
        """Initial weights (N*K, L, A) of the training problems of N data sets x (N, n, A),
        y (N, m, A) split alike, and which start each got (N*K, L; 0 all ones, 1 moments).
        ``lam``: (L,) or (N*K, L). ``starts="ones"``: the paper's all ones.
        ``"ones+moments"``: per split and lambda, whichever of all ones and the split's
        moment start (engine/starts.py) has the lower regularised training objective;
        ``"moments"``: the moment start alone (a continuous function of the data, where
        the pick between two starts is a jump)."""
        n_sets, n, a = x.shape
        m = y.shape[1]
        k_sets, n_lam = splits.n_splits * n_sets, lam.shape[-1]
        ones = torch.ones(k_sets, n_lam, a, dtype=x.dtype, device=x.device)
        if self.starts == "ones":
            return ones, torch.zeros(k_sets, n_lam, dtype=torch.int64)
        in_x = memberships(splits.x_train, n, 0, n + m)
        in_y = memberships(splits.y_train, m, n, n + m)
        moments = moment_starts(x, y, in_x, in_y).reshape(k_sets, a)  # (N*K, A)
        if self.starts == "moments":
            return (moments.unsqueeze(1).expand(-1, n_lam, -1).contiguous(),
                    torch.ones(k_sets, n_lam, dtype=torch.int64))
        both = torch.cat([ones, moments.unsqueeze(1).expand(-1, n_lam, -1)], dim=1)
        with torch.no_grad():
            loss = train.loss(both, torch.cat([lam, lam], dim=-1), self.objective)  # (., 2L)
        return pick_lower(both, loss, 2)


class _LambdaSelector(_Selector):
    """Selectors over Algorithm 3's candidate lambdas, with a gate on validation data:
    their shared parameters and the lambda search. ``search_epochs`` caps the optimiser's
    epochs in the lambda search (None: no extra cap). ``lambdas``: ``"search"`` (the
    paper's Algorithm 3, the default) or the penalties themselves (then ``n_lambdas`` is
    their count and nothing is searched)."""

    def __init__(self, *, n_lambdas: int = 6, lambda_lower: float = 0.01,
                 gate_alpha: float = 0.05, search_epochs: int | None = 30,
                 lambdas: str | Sequence[float] = "search", **kwargs: Any) -> None:
        self.search_epochs = search_epochs
        self.lambdas = lambdas if isinstance(lambdas, str) else tuple(float(v) for v in lambdas)
        if not isinstance(lambdas, str):
            n_lambdas = len(self.lambdas)
        self.n_lambdas = int(n_lambdas)
        self.lambda_lower = float(lambda_lower)
        self.gate_alpha = float(gate_alpha)
        super().__init__(**kwargs)
        if isinstance(self.lambdas, str) and self.lambdas != "search":
            raise InvalidParameterError(
                f"lambdas must be 'search' (Algorithm 3) or a sequence of penalties, got "
                f"{self.lambdas!r}")
        if not isinstance(self.lambdas, str) and (
                len(self.lambdas) < 1 or not all(v >= 0 for v in self.lambdas)):
            raise InvalidParameterError(
                f"lambdas must hold at least one penalty >= 0, got {self.lambdas!r}")
        if search_epochs is not None and (int(search_epochs) != search_epochs or search_epochs < 1):
            raise InvalidParameterError(
                f"search_epochs must be a positive integer or None (no cap), got {search_epochs!r}")

    def _lambda_candidates(self, prep: F.Prepared) -> tuple[np.ndarray, dict[str, Any]]:
        return self._lambda_candidates_many([prep])[0]

    def _lambda_candidates_many(self, preps: list[F.Prepared]
                                ) -> list[tuple[np.ndarray, dict[str, Any]]]:
        """Algorithm 3's candidate lambdas and search details of each data set (one shape),
        all searches solved together; ``lambdas`` given: those, for every data set (no
        search: the grid does not jump with the data)."""
        if not isinstance(self.lambdas, str):
            fixed = np.asarray(self.lambdas, dtype=np.float64)
            return [(fixed, {"lambda_upper": float(fixed.max()), "lambda_path": []})
                    for _ in preps]
        config = _optimiser(self.optimiser)
        if self.search_epochs is not None:
            # Algorithm 3 only needs each lambda's selected set, which settles before the
            # objective's last digits do.
            config = replace(config, max_epochs=min(config.max_epochs, self.search_epochs))
        searches = search_lambdas_many(
            self._full_problems(preps), rule=self.selection,
            lower=self.lambda_lower, n_candidates=self.n_lambdas, objective=self.objective,
            config=config,
        )
        return [(s.candidates, {"lambda_upper": s.upper, "lambda_path": s.path})
                for s in searches]


class CVAggregation(_LambdaSelector):
    """Algorithm 2 of the paper ("CV-aggregation"), the product default.

    For each candidate lambda (Algorithm 3) and each of ``n_splits`` random splits:
    optimise the ARD weights on the training half, select variables, compute the power
    ratio on the validation half and a permutation p-value of the selected variables
    there (the "gate"). ``gate_test="mmd"`` (default): MMD^2 under the ARD kernel learned
    on the training half, restricted to the selected variables; ``"sliced_wasserstein"``:
    the paper's statistic. The MMD gate is the default because it is more powerful for
    changes of scale (python -m bench.synthetic; the paper's choice is kept as an option).
    Scores ``Pi = mean_lambda mean_i I(p < gate_alpha) * max(l_val, 0) * a / max(a)``;
    variables are selected from ``Pi`` with ``selection``. ``gate_fallback`` (default on,
    a departure): when no split passes the gate at any lambda, the indicator is dropped,
    so the scores still rank the variables (the paper would return all zeros).
    All lambda x split problems are optimised as one batch.
    """

    method = "cv-aggregation"

    def __init__(self, *, n_splits: int = 10, gate_fallback: bool = True,
                 **kwargs: Any) -> None:
        self.gate_fallback = bool(gate_fallback)
        self.n_splits = int(n_splits)
        super().__init__(**kwargs)
        if self.n_splits < 1 or self.n_lambdas < 2 or self.lambda_lower <= 0:
            raise InvalidParameterError("need n_splits >= 1, n_lambdas >= 2, lambda_lower > 0")

    def _fit(self, x: Any, y: Any) -> Selection:
        t0 = time.perf_counter()
        prep = self._prepare(x, y)
        if prep.active.size == 0:
            return self._trivial(prep, t0, self.n_lambdas)
        return self._fit_group([prep], t0)[0]

    def fit_many(self, pairs: Sequence[tuple[Any, Any]], *, errors: str = "raise",
                 max_batch_bytes: int | None = None) -> list[Selection | EngineError]:
        """Fit many independent (X, Y) pairs; the same results as one :meth:`fit` each.

        Pairs of one shape (rows of X, rows of Y, non-constant variables) share one set of
        optimiser passes: their lambda searches and their K x L training problems are
        batched (N x K x L problems) up to ``max_batch_bytes`` of precomputed pair
        differences per batch (None: :func:`engine._fitting.batch_bytes`, cache-sized on a
        CPU, a share of the free memory on a GPU), and with ``n_jobs`` > 1 that many
        batches run at once, each in a thread of its own. Each pair draws from its own
        random stream, seeded like a single fit, and each problem keeps its own step
        sizes and early stop, so results equal separate fits up to floating-point
        rounding (tested), whatever the batches.
        ``errors="raise"``: a pair with bad input raises its :class:`EngineError`;
        ``"return"``: that pair's entry is the error and the others are fitted.
        ``runtime_s`` of each result is its share of its group's time.
        """
        if errors not in ("raise", "return"):
            raise InvalidParameterError(f"errors must be 'raise' or 'return', got {errors!r}")
        out: list[Selection | EngineError | None] = [None] * len(pairs)
        with F.torch_threads(self.n_threads):
            groups: dict[tuple[int, int, int], list[tuple[int, F.Prepared]]] = {}
            for i, (x, y) in enumerate(pairs):
                t0 = time.perf_counter()
                try:
                    prep = self._prepare(x, y, place=False)
                except EngineError as exc:
                    if errors == "raise":
                        raise
                    out[i] = exc
                    continue
                if prep.active.size == 0:
                    out[i] = self._trivial(prep, t0, self.n_lambdas)
                    continue
                groups.setdefault(prep.shape, []).append((i, prep))
            for (n, m, a), members in groups.items():
                preps = self._placed([p for _, p in members])
                limit = F.batch_bytes(preps[0].device) if max_batch_bytes is None \
                    else max_batch_bytes
                pair_bytes = max(self._delta_bytes(n, m, a), 1)
                cv_size = max(1, int(limit // pair_bytes))
                least = math.ceil(F.MIN_CPU_BATCH_BYTES / pair_bytes)
                t0 = time.perf_counter()
                results = self._fit_group(preps, t0, cv_size, least)
                share = (time.perf_counter() - t0) / len(members)
                for (i, _), res in zip(members, results, strict=True):
                    res.runtime_s = share
                    out[i] = res
        return [r for r in out if r is not None]

    def _fit_group(self, preps: list[F.Prepared], t0: float,
                   cv_size: int | None = None, least: int = 1) -> list[Selection]:
        """Algorithm 2 for data sets of one shape, in batches of at most ``cv_size`` data
        sets (None: one batch), ``n_jobs`` batches at once, split for the threads only
        into batches of at least ``least``: each batch's lambda searches are one batched
        solve, then its training problems another, then its scores and p-values."""
        rngs = [np.random.default_rng(self.seed) for _ in preps]
        jobs = F.resolve_jobs(self.n_jobs) if preps[0].device.type == "cpu" else 1
        parts = F.batch_slices(len(preps), cv_size or len(preps), jobs, least)
        labels = self._moment_labels(*preps[0].shape[:2]) \
            if self.block_size is None and self.compute_p_value else None

        def fit_part(part: slice) -> list[Selection]:
            candidates = self._lambda_candidates_many(preps[part])
            fits = self._split_fits(preps[part], [lam for lam, _ in candidates],
                                    self.n_splits, rngs[part])
            return [self._aggregate(prep, lambdas, dict(details), fit, t0, labels)
                    for prep, (lambdas, details), fit in zip(preps[part], candidates, fits,
                                                             strict=True)]

        return [res for chunk in F.map_batches(fit_part, parts, jobs) for res in chunk]

    def _aggregate(self, prep: F.Prepared, lambdas: np.ndarray, details: dict[str, Any],
                   fit: SplitFit, t0: float,
                   moment_labels: torch.Tensor | None = None) -> Selection:
        """The scores Pi from one data set's split fits, the selection and the p-value."""
        w, val_ratio, gate_p, split_p = fit.weights, fit.val_ratio, fit.gate_p, fit.split_p
        top = w.max(axis=-1, keepdims=True)
        normalised = np.divide(w, top, out=np.zeros_like(w), where=top > 0)
        passed = gate_p < self.gate_alpha
        if self.gate_test == "none":  # no gate: every split counts, nothing fell back
            passed = np.ones_like(passed)
        fell_back = self.gate_fallback and not passed.any()
        if fell_back:
            # No split passed at any lambda (a weak or no change): aggregate all of them,
            # weighted by validation power, rather than return all-zero scores. Like
            # Algorithm 1's "else smallest p" branch, it keeps a ranking when the gate
            # fails everywhere; the p-value, not the scores, says whether to alarm.
            # DEBUG: the result's details say it (gate_fallback), and the live agent's
            # quiet fits (each history value of a backlog) fall back as a rule.
            log.debug("no split passed the gate at any lambda; scores aggregate all splits")
            passed = np.ones_like(passed)
        gain = passed * np.clip(np.nan_to_num(val_ratio), 0, None)
        per_lambda = (gain[..., None] * normalised).mean(axis=0)  # (L, A)
        scores = per_lambda.mean(axis=0)
        chosen, thr = select(scores, self.selection)
        p_value = self._p_value(prep, split_p, moment_labels)
        details.update(gate_p_values=gate_p, val_ratio=val_ratio, epochs=fit.epochs,
                       moment_start_share=float(fit.start.mean()),
                       gate_fallback=bool(fell_back))
        return self._result(prep, prep.expand(scores), prep.active[chosen], thr, p_value,
                            lambdas, prep.expand(per_lambda), list(split_p), t0, details)


class ModelSelection(_LambdaSelector):
    """Algorithm 1 of the paper ("model-selection"): one split; among the candidate
    lambdas whose selected variables give a gate p-value < ``gate_alpha`` on validation,
    the one with the largest validation power; else the one with the smallest p-value.
    Scores are that lambda's ARD weights."""

    method = "model-selection"

    def _fit(self, x: Any, y: Any) -> Selection:
        t0 = time.perf_counter()
        prep = self._prepare(x, y)
        if prep.active.size == 0:
            return self._trivial(prep, t0, self.n_lambdas)
        rng = np.random.default_rng(self.seed)
        lambdas, details = self._lambda_candidates(prep)
        fit = self._split_fit(prep, lambdas, 1, rng)
        w, val_ratio, gate_p = fit.weights, fit.val_ratio, fit.gate_p
        p, ratio = gate_p[0], np.nan_to_num(val_ratio[0], nan=-np.inf)
        ok = p < self.gate_alpha if self.gate_test != "none" else np.ones_like(p, dtype=bool)
        best = int(np.argmax(np.where(ok, ratio, -np.inf))) if ok.any() else int(np.argmin(p))
        scores = w[0, best]
        chosen = np.flatnonzero(fit.subsets[0, best])
        chosen = chosen[np.argsort(-scores[chosen], kind="stable")]
        _, thr = select(scores, self.selection)
        details.update(chosen_lambda=float(lambdas[best]), gate_p_values=gate_p,
                       val_ratio=val_ratio, epochs=fit.epochs)
        return self._result(prep, prep.expand(scores), prep.active[chosen], thr,
                            self._p_value(prep, fit.split_p), lambdas, prep.expand(w[0]),
                            list(fit.split_p), t0, details)


class MMDBaseline(_Selector):
    """lambda = 0 (Sutherland et al. 2017): maximise the power ratio on the whole sample
    and select from the weights. Its p-value comes from one train/validation split (the
    weights are re-learned on the training half, tested on the other)."""

    method = "mmd-baseline"

    def _fit(self, x: Any, y: Any) -> Selection:
        t0 = time.perf_counter()
        prep = self._prepare(x, y)
        if prep.active.size == 0:
            return self._trivial(prep, t0)
        rng = np.random.default_rng(self.seed)
        zero = torch.zeros(1, dtype=prep.dtype, device=prep.device)
        res = minimise(self._full_problem(prep), zero, objective=self.objective,
                       config=_optimiser(self.optimiser))
        scores = res.weights[0, 0].abs().cpu().numpy()
        chosen, thr = select(scores, self.selection)
        split_p = self._split_fit(prep, np.zeros(1), 1, rng).split_p
        return self._result(prep, prep.expand(scores), prep.active[chosen], thr,
                            self._p_value(prep, split_p), np.zeros(1),
                            prep.expand(scores[None]), list(split_p), t0, {})


class RegressionBaseline(_Selector):
    """L1-regularised logistic regression classifying X vs Y (scikit-learn, standardised
    variables); C searched on ``Cs`` (default 10 values in [0.1, 4.0]) by 5-fold CV;
    variables selected from |coefficients| with ``selection``. ``lambdas`` holds 1/C.
    p-value: the classifier (C re-searched) is fitted on a training half, and the
    difference of mean decision values between X and Y on the validation half is
    permutation-tested."""

    method = "regression-baseline"

    def __init__(self, *, Cs: Any = None, cv: int = 5, **kwargs: Any) -> None:
        self.Cs = list(np.linspace(0.1, 4.0, 10)) if Cs is None else [float(c) for c in Cs]
        self.cv = int(cv)
        super().__init__(**kwargs)

    def _classifier(self, z: np.ndarray, labels: np.ndarray) -> Any:
        from sklearn.linear_model import LogisticRegressionCV
        from sklearn.model_selection import StratifiedKFold

        folds = StratifiedKFold(n_splits=self.cv, shuffle=True, random_state=self.seed)
        clf = LogisticRegressionCV(Cs=self.Cs, cv=folds, penalty="l1", solver="liblinear",
                                   random_state=self.seed, max_iter=1000)
        with warnings.catch_warnings():
            # scikit-learn 1.8+ announces renamed parameters; the fit is the same.
            warnings.simplefilter("ignore", FutureWarning)
            return clf.fit(z, labels)

    def _fit(self, x: Any, y: Any) -> Selection:
        t0 = time.perf_counter()
        prep = F.prepare(x, y, block_size=self.block_size, heuristic=self.length_scale,
                         device=torch.device("cpu"), dtype=torch.float64)
        if prep.active.size == 0:
            return self._trivial(prep, t0)
        rng = np.random.default_rng(self.seed)
        xa, ya = prep.x.numpy(), prep.y.numpy()
        pooled = np.concatenate([xa, ya])
        mean, std = pooled.mean(0), pooled.std(0)
        std[std == 0] = 1.0
        xs, ys = (xa - mean) / std, (ya - mean) / std
        labels = np.r_[np.ones(len(xs)), np.zeros(len(ys))]
        clf = self._classifier(np.concatenate([xs, ys]), labels)
        scores = np.abs(clf.coef_[0])
        chosen, thr = select(scores, self.selection)
        c_best = float(clf.C_[0])
        # p-value: classifier trained on one half, tested on the other.
        splits = make_splits(len(xs), len(ys), 1, rng, train_fraction=self.train_fraction,
                             block_size=self.block_size)
        tx, ty = splits.x_train.index[0], splits.y_train.index[0]
        clf_half = self._classifier(np.concatenate([xs[tx], ys[ty]]),
                                    np.r_[np.ones(len(tx)), np.zeros(len(ty))])
        vx, vy = splits.x_val.index[0], splits.y_val.index[0]
        dec = clf_half.decision_function(np.concatenate([xs[vx], ys[vy]]))
        from engine.splits import permutation_labels, relabel_blocks

        lab = permutation_labels(relabel_blocks(vx, self.block_size),
                                 relabel_blocks(vy, self.block_size),
                                 self.p_value_permutations, rng)
        nx = lab.sum(1)
        stat = lab @ dec / nx - (1 - lab) @ dec / (len(dec) - nx)
        p = float((1 + (stat[1:] >= stat[0] - 1e-12).sum()) / len(stat))
        details = {"C": c_best}
        return self._result(prep, prep.expand(scores), prep.active[chosen], thr, p,
                            np.array([1.0 / c_best]), prep.expand(scores[None]), [p], t0, details)
