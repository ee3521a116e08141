"""The engine part's optimiser in C (engine/native): the tensor program's results, in any
batch, and the tensor program where it does not apply."""
from __future__ import annotations

import ctypes
import os
from dataclasses import replace

import pytest
import torch

from engine import native
from engine import optimiser as opt
from engine.optimiser import FAST, SMOOTH, minimise
from engine.problems import ProblemSet

LAMBDAS = torch.tensor([0.01, 0.04, 0.16, 0.64], dtype=torch.float64)


@pytest.fixture(scope="module", autouse=True)
def _built() -> None:
    if native.library() is None:
        pytest.skip("no C compiler here: the engine runs its tensor program")


def _problems(k: int, n: int, m: int, d: int, *, per_set_gamma: bool, seed: int = 0
              ) -> ProblemSet:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(k, n, d, generator=gen, dtype=torch.float64)
    y = 1.3 * torch.randn(k, m, d, generator=gen, dtype=torch.float64) + 0.4
    shape = (k, 1, d) if per_set_gamma else (d,)
    gamma = torch.rand(shape, generator=gen, dtype=torch.float64) + 0.5
    return ProblemSet.build(x, y, gamma)


def _tensor_program(monkeypatch: pytest.MonkeyPatch, *args, **kwargs) -> opt.OptimiseResult:
    with monkeypatch.context() as patch:
        patch.setattr(opt, "_native_applies", lambda *_: False)
        return minimise(*args, **kwargs)


@pytest.mark.parametrize(("n", "m", "d", "per_set_gamma", "objective"), [
    (12, 8, 30, True, "ratio"),   # the engine part's training halves: even sizes
    (13, 9, 7, False, "ratio"),   # odd sizes: no doubled slab
    (10, 10, 5, True, "ratio"),   # n = m: the paired variance
    (24, 16, 6, True, "mmd"),     # the lambda search's full samples, the MMD objective
])
def test_the_c_optimiser_gives_the_tensor_programs_weights(monkeypatch, n, m, d,
                                                           per_set_gamma, objective):
    problems = _problems(6, n, m, d, per_set_gamma=per_set_gamma)
    init = torch.rand(6, len(LAMBDAS), d, dtype=torch.float64,
                      generator=torch.Generator().manual_seed(1)) + 0.5
    assert opt._native_applies(problems, SMOOTH, objective)
    got = minimise(problems, LAMBDAS, objective=objective, config=SMOOTH, init=init)
    want = _tensor_program(monkeypatch, problems, LAMBDAS, objective=objective,
                           config=SMOOTH, init=init)
    # SMOOTH's 40 Adam steps carry float64 rounding (~1e-16) up to ~1e-11
    torch.testing.assert_close(got.weights, want.weights, rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(got.loss, want.loss, rtol=1e-9, atol=1e-12)
    assert torch.equal(got.epochs, want.epochs) and got.total_epochs == want.total_epochs


def test_a_problem_gets_the_same_bits_alone_and_in_a_batch():
    problems = _problems(5, 12, 8, 9, per_set_gamma=True)
    together = minimise(problems, LAMBDAS, config=SMOOTH)
    for k in range(problems.n_sets):
        alone = minimise(problems.sets(slice(k, k + 1)), LAMBDAS, config=SMOOTH)
        assert torch.equal(alone.weights[0], together.weights[k])


def test_other_runs_stay_with_the_tensor_program():
    problems = _problems(2, 12, 8, 4, per_set_gamma=False)
    assert not opt._native_applies(problems, FAST, "ratio")  # early stop, best point, snap
    assert not opt._native_applies(problems, replace(SMOOTH, schedule="plateau"), "ratio")
    as_float32 = ProblemSet.build(torch.randn(2, 12, 4), torch.randn(2, 8, 4), torch.ones(4))
    assert not opt._native_applies(as_float32, SMOOTH, "ratio")
    mask = torch.ones(2, 12, dtype=torch.float64)
    mask[:, -1] = 0  # padded rows (uneven blocks)
    padded = ProblemSet.build(torch.randn(2, 12, 4, dtype=torch.float64),
                              torch.randn(2, 8, 4, dtype=torch.float64),
                              torch.ones(4, dtype=torch.float64), mx=mask,
                              my=torch.ones(2, 8, dtype=torch.float64))
    assert not opt._native_applies(padded, SMOOTH, "ratio")


def test_a_missing_compiler_is_named_with_the_fix(monkeypatch):
    monkeypatch.setenv("CC", "no-such-cc")
    with pytest.raises(native.NativeBuildError, match="install one"):
        native.build()


def test_a_library_of_another_version_is_rebuilt_not_called(tmp_path, monkeypatch):
    """A library compiled from another version of smooth_fit.c (a copied installation)
    is never called with this version's arguments: this process fits with the tensor
    program, and the library is rebuilt for the next."""
    current = native.SOURCE.read_text()
    assert f"#define SMOOTH_FIT_ABI {native.ABI}" in current
    source, library = tmp_path / "smooth_fit.c", tmp_path / "_smooth_fit.so"
    monkeypatch.setattr(native, "SOURCE", source)
    monkeypatch.setattr(native, "LIBRARY", library)
    source.write_text(current.replace(f"#define SMOOTH_FIT_ABI {native.ABI}",
                                      f"#define SMOOTH_FIT_ABI {native.ABI - 1}"))
    native.build()  # an earlier version's library
    source.write_text(current)
    os.utime(source, (0, 0))  # older than the library: only its version tells
    monkeypatch.setattr(native, "_loaded", [])
    assert native.library() is None
    problems = _problems(2, 12, 8, 4, per_set_gamma=False)
    assert not opt._native_applies(problems, SMOOTH, "ratio")
    # the file on disk is now this version's (opened under another name: a process
    # keeps the library it loaded first under a name)
    rebuilt = tmp_path / "rebuilt.so"
    rebuilt.write_bytes(library.read_bytes())
    assert ctypes.CDLL(str(rebuilt)).smooth_fit_abi() == native.ABI
