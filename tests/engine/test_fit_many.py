"""CVAggregation.fit_many: many (X, Y) pairs as batched fits, the same as one fit each."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from engine import CVAggregation, NonFiniteInputError, OptimiserConfig
from engine.problems import ProblemSet

QUICK = {"optimiser": OptimiserConfig(max_epochs=40), "p_value_permutations": 199,
         "device": "cpu", "n_splits": 3}


def _pairs(count: int, n: int = 50, d: int = 6, seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        x, y = rng.normal(size=(n, d)), rng.normal(size=(n, d))
        y[:, i % d] += 1.5  # a clear change: the selection is far from any tie
        out.append((x, y))
    return out


def test_fit_many_equals_separate_fits_across_shapes():
    pairs = _pairs(4) + _pairs(2, n=40, d=5, seed=1)  # two shape groups
    sel = CVAggregation(seed=3, **QUICK)
    many = sel.fit_many(pairs)
    assert len(many) == len(pairs)
    for (x, y), got in zip(pairs, many, strict=True):
        want = sel.fit(x, y)
        assert got.selected == want.selected and got.candidates == want.candidates
        assert abs(got.p_value - want.p_value) <= 1e-6
        np.testing.assert_allclose(got.scores, want.scores, atol=1e-4)
        np.testing.assert_allclose(got.lambdas, want.lambdas, rtol=1e-6)


def test_small_batches_give_the_same_results():
    pairs = _pairs(3, seed=2)
    sel = CVAggregation(seed=0, **QUICK)
    one_batch = sel.fit_many(pairs)
    tiny = sel.fit_many(pairs, max_batch_bytes=1)  # one data set per training batch
    for a, b in zip(one_batch, tiny, strict=True):
        assert a.selected == b.selected and abs(a.p_value - b.p_value) <= 1e-6


def test_bad_pair_raises_or_is_returned():
    pairs = _pairs(2)
    bad = (np.full((50, 6), np.nan), np.zeros((50, 6)))
    sel = CVAggregation(seed=0, **QUICK)
    with pytest.raises(NonFiniteInputError):
        sel.fit_many([pairs[0], bad])
    out = sel.fit_many([pairs[0], bad, pairs[1]], errors="return")
    assert isinstance(out[1], NonFiniteInputError)
    assert out[0].selected == sel.fit(*pairs[0]).selected
    assert out[2].selected == sel.fit(*pairs[1]).selected


def test_concat_keeps_each_data_sets_length_scales():
    rng = np.random.default_rng(0)
    parts = []
    for scale in (1.0, 3.0):
        x = torch.as_tensor(rng.normal(size=(2, 9, 4)) * scale)
        y = torch.as_tensor(rng.normal(size=(2, 8, 4)) * scale)
        parts.append(ProblemSet.build(x, y, torch.full((4,), scale, dtype=torch.float64)))
    both = ProblemSet.concat(parts)
    w = torch.rand(4, 3, 4, dtype=torch.float64)
    want = torch.cat([parts[0].ratio(w[:2]), parts[1].ratio(w[2:])])
    torch.testing.assert_close(both.ratio(w), want)
    torch.testing.assert_close(both.sets(slice(2, 4)).ratio(w[2:]), want[2:])


def test_batches_in_threads_give_the_same_results():
    """n_jobs batches at once, each in its own thread: every pair's fit as in one thread,
    whatever the batch sizes (several batches per thread, uneven last batches)."""
    pairs = _pairs(5, seed=4)
    quick = {**QUICK, "dtype": "float64"}  # float32 rounds differently in other batches
    one = CVAggregation(seed=1, **quick).fit_many(pairs)
    for jobs, batch in ((2, 1), (3, None), (-1, 1)):
        many = CVAggregation(seed=1, n_jobs=jobs, **quick).fit_many(pairs, max_batch_bytes=batch)
        for a, b in zip(one, many, strict=True):
            assert a.selected == b.selected and a.candidates == b.candidates
            assert abs(a.p_value - b.p_value) <= 1e-12
            np.testing.assert_allclose(b.scores, a.scores, rtol=1e-9, atol=1e-12)
            np.testing.assert_allclose(b.details["val_ratio"], a.details["val_ratio"],
                                       rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("count,size,jobs,least", [
    (168, 69, 2, 1), (24, 69, 2, 1), (1, 69, 4, 1), (5, 1, 2, 1), (7, 3, 3, 1), (0, 5, 2, 1),
    (10, 100, 1, 1), (16, 63, 16, 16), (192, 63, 16, 16), (192, 63, 2, 16), (40, 8, 4, 16)])
def test_batch_slices_cover_every_item_once_in_even_batches(count, size, jobs, least):
    from engine._fitting import batch_slices

    parts = batch_slices(count, size, jobs, least)
    covered = [i for part in parts for i in range(count)[part]]
    assert covered == list(range(count))
    sizes = [part.stop - part.start for part in parts]
    assert all(0 < s <= max(size, 1) or len(parts) == 1 for s in sizes) or count == 0
    assert max(sizes, default=0) - min(sizes, default=0) <= 1
    needed = math.ceil(count / size)
    if len(parts) > needed:  # split further for the threads: never below `least` items
        assert min(sizes) >= least
    # a multiple of the threads, unless items (one each) or `least` run out first
    assert len(parts) % jobs == 0 or len(parts) == count or len(parts) == max(
        needed, count // least)


def test_threads_never_split_pairs_below_the_smallest_batch():
    """16 engine-part pairs (0.5 MB each) with 16 threads: two batches of 8, not 16 of one
    pair (each batch's Python holds the GIL, so tiny batches make threads queue)."""
    from engine._fitting import MIN_CPU_BATCH_BYTES, batch_slices

    least = math.ceil(MIN_CPU_BATCH_BYTES / 528_000)
    assert least == 8
    assert batch_slices(16, 63, 16, least) == [slice(0, 8), slice(8, 16)]
    assert len(batch_slices(192, 63, 16, least)) == 16
    assert len(batch_slices(100, 63, 16, least)) == 100 // least


@pytest.mark.parametrize("bad", [0, -2, 1.5, "2", True])
def test_n_jobs_must_be_a_count_or_minus_one(bad):
    from engine import InvalidParameterError

    with pytest.raises(InvalidParameterError, match="n_jobs must be a positive integer"):
        CVAggregation(n_jobs=bad)


def test_auto_device_takes_the_gpu_only_for_batches_that_gain(monkeypatch):
    """device="auto": a batch below AUTO_GPU_BYTES of pair differences stays on the CPU
    (a GPU fit of it is launch-bound), a larger one goes to CUDA when there is one."""
    from engine import _fitting as F

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert F.auto_device(F.AUTO_GPU_BYTES - 1).type == "cpu"
    assert F.auto_device(F.AUTO_GPU_BYTES).type == "cuda"
    sel = CVAggregation(dtype="float64")  # the engine part: 24 vs 16 rows, 33 sensors
    one_fit = sel._delta_bytes(24, 16, 33)
    assert F.auto_device(one_fit).type == "cpu"
    assert F.auto_device(168 * one_fit).type == "cuda"  # a week of history as one batch
    week = CVAggregation()._delta_bytes(168, 168, 33)  # float32, the paper's case study
    assert F.auto_device(week).type == "cuda"


def test_auto_device_keeps_more_of_what_the_c_optimiser_fits_on_the_cpu(monkeypatch):
    """Settings that the C optimiser fits on the CPU (the engine part's) go to the GPU only
    from AUTO_GPU_BYTES_NATIVE: 16 engine-part pairs (8 MiB) stay on the CPU, 64 go; the
    tensor program's settings keep AUTO_GPU_BYTES."""
    from engine import _fitting as F
    from engine.live.engine_power import ENGINE_PART_PARAMS

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert F.auto_device(F.AUTO_GPU_BYTES_NATIVE - 1, native=True).type == "cpu"
    assert F.auto_device(F.AUTO_GPU_BYTES_NATIVE, native=True).type == "cuda"
    one_fit = CVAggregation(**ENGINE_PART_PARAMS)._delta_bytes(24, 16, 33)
    assert F.auto_device(16 * one_fit, native=True).type == "cpu"
    assert F.auto_device(16 * one_fit, native=False).type == "cuda"
    assert F.auto_device(64 * one_fit, native=True).type == "cuda"


def test_auto_device_is_asked_with_the_fit_settings_native_or_not(monkeypatch):
    """CVAggregation tells auto_device whether the C optimiser would fit its settings."""
    from engine import _fitting as F
    from engine.live.engine_power import ENGINE_PART_PARAMS
    from engine.native import library

    asked: list[bool] = []

    def record(work_bytes: int, native: bool = False) -> torch.device:
        asked.append(native)
        return torch.device("cpu")

    monkeypatch.setattr(F, "auto_device", record)
    pairs = _pairs(2)
    CVAggregation(**{**ENGINE_PART_PARAMS, "device": "auto"}).fit_many(pairs)
    CVAggregation(**{**QUICK, "device": "auto"}).fit_many(pairs)
    assert asked and asked[0] is (library() is not None) and asked[-1] is False


def test_auto_device_without_a_gpu_fits_on_the_cpu():
    if torch.cuda.is_available():
        pytest.skip("a GPU is here")
    fit = CVAggregation(**{**QUICK, "device": "auto"}).fit_many(_pairs(2))
    assert all(f.device == "cpu" for f in fit)


@pytest.mark.parametrize("block_size", [None, 5])
def test_without_p_value_the_fit_is_the_same(block_size):
    """compute_p_value=False (the live engine part, calibrated on its history): no split or
    moment permutation test, p-value NaN and nothing selected; scores, candidates,
    validation ratios and gate p-values those of the full fit, batched (bit-equal) or alone
    (a single fit rounds differently from a batch)."""
    pairs = _pairs(3, seed=6)
    quick = {**QUICK, "dtype": "float64", "block_size": block_size}
    full = CVAggregation(seed=2, **quick).fit_many(pairs)
    bare_sel = CVAggregation(seed=2, compute_p_value=False, **quick)
    batched = bare_sel.fit_many(pairs)
    for a, b in zip(full, batched, strict=True):
        np.testing.assert_array_equal(a.scores, b.scores)
    for bare in (batched, [bare_sel.fit(x, y) for x, y in pairs]):
        for a, b in zip(full, bare, strict=True):
            assert np.isnan(b.p_value) and b.selected == [] and b.p_value_parts == {}
            assert a.candidates == b.candidates
            for got, want in ((b.scores, a.scores), (b.details["val_ratio"], a.details["val_ratio"]),
                              (b.details["gate_p_values"], a.details["gate_p_values"])):
                np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("compute_p_value", [False, True])
def test_without_a_gate_the_validation_ratios_are_the_same(compute_p_value):
    """gate_test="none" (the live decision's history values keep only the validation
    ratios): no gate test, every split counts in the scores; the validation ratios and
    weights are those of the gated fit, batched (bit-equal) or alone."""
    pairs = _pairs(3, seed=7)
    quick = {**QUICK, "dtype": "float64", "compute_p_value": compute_p_value}
    gated = CVAggregation(seed=4, **quick).fit_many(pairs)
    sel = CVAggregation(seed=4, gate_test="none", **quick)
    for bare in (sel.fit_many(pairs), [sel.fit(x, y) for x, y in pairs]):
        for a, b in zip(gated, bare, strict=True):
            assert np.isnan(b.details["gate_p_values"]).all()
            assert not b.details["gate_fallback"]
            np.testing.assert_allclose(b.details["val_ratio"], a.details["val_ratio"],
                                       rtol=1e-12, atol=1e-15)
            np.testing.assert_allclose(b.lambdas, a.lambdas, rtol=1e-12)
            # every split counts: the scores are the fallback's, all splits weighted by
            # their validation power, so the changed variable still ranks first
            assert b.candidates[0] == a.candidates[0]
            assert math.isnan(b.p_value) != compute_p_value
