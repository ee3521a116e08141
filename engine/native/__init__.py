"""The engine part's optimiser in C, for the CPU (``smooth_fit.c``).

The engine part (``engine.SMOOTH``: a cosine step size, no early stop, the last iterate)
fits every history time of a site. As a tensor program each epoch streams the whole
batch's pair differences from memory twice and runs a few hundred small operations; here
each set of data keeps its differences in the core's cache for all its epochs, and the
gradient is written out by hand. The same problems, the same Adam steps: the results
equal the tensor program's to float64 rounding (tests/engine/test_native.py), and, unlike
a batched matrix product whose kernel depends on the batch's size, each problem's
arithmetic is the same in any batch, so a fit alone and in a batch agree to the bit.

:func:`engine.optimiser.minimise` uses it where it applies (``_native_applies``: CPU,
float64, the quadratic estimator, the Gaussian kernel, no padded rows, the cosine
schedule without early stop). ``make install`` builds it (``python -m engine.native``,
with ``cc -march=native``: for the machine it runs on), the first fit builds it where
it is missing or older than its source, and without a C compiler the tensor program
runs instead.
"""
from __future__ import annotations

import ctypes
import logging
import os
import shutil
import subprocess
import threading
from pathlib import Path

import torch

log = logging.getLogger(__name__)
SOURCE = Path(__file__).with_name("smooth_fit.c")
LIBRARY = Path(__file__).with_name("_smooth_fit.so")
#: -fopenmp-simd: the loops' `omp simd` pragmas only (vectorised expm1 from glibc's
#: libmvec, vectorised sums), no OpenMP threads; no -ffast-math, so NaN and inf keep
#: their meaning
CFLAGS = ["-O3", "-march=native", "-fno-math-errno", "-fopenmp-simd", "-shared", "-fPIC"]
#: ``smooth_fit_abi()`` of the source this module calls (its arguments' order and types)
ABI = 2
_loaded: list[ctypes.CDLL | None] = []
_loading = threading.Lock()


class NativeBuildError(RuntimeError):
    """The C optimiser could not be compiled."""


def build(compiler: str | None = None) -> Path:
    """Compile ``smooth_fit.c`` into ``_smooth_fit.so`` beside it; returns its path.
    ``compiler``: default ``$CC``, else ``cc``."""
    cc = compiler or os.environ.get("CC") or "cc"
    if shutil.which(cc) is None:
        raise NativeBuildError(
            f"no C compiler {cc!r} found: install one (apt-get install gcc) or set CC; "
            "without it the engine runs its tensor program (slower on a CPU)")
    tmp = LIBRARY.with_suffix(f".{os.getpid()}.tmp")
    cmd = [cc, *CFLAGS, "-o", str(tmp), str(SOURCE), "-lm"]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise NativeBuildError(f"{' '.join(cmd)} failed:\n{done.stderr.strip()}")
    tmp.replace(LIBRARY)  # atomic: a process loading it never sees half a file
    return LIBRARY


def _stale() -> bool:
    return not LIBRARY.exists() or LIBRARY.stat().st_mtime < SOURCE.stat().st_mtime


def library() -> ctypes.CDLL | None:
    """The compiled optimiser, built on first use where it is missing or older than its
    source (about a second; ``make install`` builds it beforehand), or None where it
    cannot be built (logged once: the tensor program fits instead)."""
    with _loading:
        return _load()


def _load() -> ctypes.CDLL | None:
    if not _loaded:
        lib = None
        if _stale():
            _build_logged()
        if LIBRARY.exists():
            lib = _open()
            if lib is None:
                # built from another version of smooth_fit.c (a copied installation),
                # or not loadable: rebuilt for the next process; this one cannot load a
                # second library of the same name, so it fits with the tensor program
                _build_logged()
        _loaded.append(lib)
    return _loaded[0]


def _build_logged() -> None:
    try:
        log.info("building the engine's C optimiser (once): %s", LIBRARY)
        build()
    except (NativeBuildError, OSError) as exc:
        log.warning("the engine's C optimiser is not built (%s); the tensor program "
                    "fits on the CPU, slower", exc)


def _open() -> ctypes.CDLL | None:
    """The library with its functions' signatures, or None (logged) where it does not
    load or was built from another version of its source."""
    try:
        lib = ctypes.CDLL(str(LIBRARY))
        abi = lib.smooth_fit_abi
        abi.restype, abi.argtypes = ctypes.c_int, []
        fn = lib.smooth_minimise_f64
        fn.restype = ctypes.c_int
        fn.argtypes = [ctypes.c_long] * 5 + [ctypes.c_void_p] * 5 + [
            ctypes.c_long, ctypes.c_double, ctypes.c_double, ctypes.c_double,
            ctypes.c_double, ctypes.c_int]
    except (OSError, AttributeError) as exc:  # AttributeError: a version without the ABI
        log.warning("the engine's C optimiser %s does not load (%s); rebuilding it for "
                    "the next start", LIBRARY, exc)
        return None
    if lib.smooth_fit_abi() != ABI:
        log.warning("the engine's C optimiser %s was built from another version of "
                    "smooth_fit.c; rebuilding it for the next start", LIBRARY)
        return None
    return lib


def smooth_minimise(delta: torch.Tensor, n: int, m: int, gamma: torch.Tensor,
                    lambdas: torch.Tensor, u: torch.Tensor, *, epochs: int, lr: float,
                    betas: tuple[float, float], eps: float, ratio: bool
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """``epochs`` Adam steps with a cosine step size from ``lr`` on ``u = log a`` of every
    problem: ``delta`` (K, D, P), ``gamma`` (K, D), ``lambdas`` (K, L), the start ``u``
    (K, L, D), all float64 on the CPU. Returns the last iterate (K, L, D), a new tensor,
    and its objective (K, L). The ctypes call releases the GIL, so batches fitted in
    threads run at once."""
    lib = library()
    if lib is None:
        raise NativeBuildError("the C optimiser is not built: python -m engine.native")
    delta = delta.contiguous()
    gamma, lambdas = gamma.contiguous(), lambdas.contiguous()
    out = u.detach().clone().contiguous()
    k, d, _ = delta.shape
    loss = torch.empty(lambdas.shape, dtype=torch.float64)
    status = lib.smooth_minimise_f64(
        k, lambdas.shape[1], d, n, m, delta.data_ptr(), gamma.data_ptr(),
        lambdas.data_ptr(), out.data_ptr(), loss.data_ptr(), int(epochs), float(lr),
        float(betas[0]), float(betas[1]), float(eps), int(ratio))
    if status != 0:
        raise MemoryError("the C optimiser could not allocate its scratch memory")
    return out, loss


def main() -> int:
    """``python -m engine.native``: build the library (``make install`` runs it)."""
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        path = build()
    except NativeBuildError as exc:
        log.error("%s", exc)
        return 1
    log.info("built %s", path)
    return 0
