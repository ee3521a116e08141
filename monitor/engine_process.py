"""The engine part's fits of a one-shot command in a child process, so that loading the
engine overlaps the command's own work.

A one-shot ``mmdwatch backfill`` or ``inspect`` under the calibrated rule spent a third of
its time importing torch (about a second on a 2-core VM), and needs torch only for the
engine part's fits (:func:`monitor.decision.calibrated_rule.fit_engine_pairs`). The
reading of the source, the windows, the level statistics and the decisions are NumPy and
pandas. :class:`EngineProcess` forks one child at the start of the command, which loads
the engine while the parent reads and builds windows; the parent then sends it the
residual pairs (a few KB each, as :class:`Table`: the child loads no pandas) and the
selector's settings, and gets the fits back. The parent does not import torch for them.

The child runs the same code as the parent would, with the same threads
(``fit_many``'s batches), so the fits are the same to the bit (tests/monitor/
test_engine_process.py). Where the child dies (out of memory, a crash in native code),
the pool breaks: that call and every later one fits in this process instead, logged once.

Only a one-shot command's own process (``monitor.cli.entry``) uses it: it forks before
any thread exists there (the executor's management thread starts after the fork). The
daemon, which keeps the engine loaded for its whole life, fits in its own process.
"""
from __future__ import annotations

import logging
import multiprocessing
import os
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # none of them loads before the fork
    import numpy as np
    import numpy.typing as npt
    import pandas as pd

    from engine.result import Selection
    from monitor.decision.calibrated_rule import FitScope, PendingFits
    from monitor.decision.settings import EngineSettings

log = logging.getLogger(__name__)

__all__ = ["EngineProcess", "Table", "fit_tables"]


#: Linux's ``prctl`` option: the signal a process gets when its parent dies
_PR_SET_PDEATHSIG = 1


def _ready() -> bool:
    """The first task: returns once the child has run its initializer (loaded the engine)."""
    return True


def _start_child(prepare_child: Callable[[], None], parent: int) -> None:
    """The child's initializer: bound to its parent's life, then ``prepare_child``."""
    _die_with(parent)
    prepare_child()


def _die_with(parent: int) -> None:
    """End this child when the command's process ends without closing it (killed, or a
    timeout's SIGTERM): it would otherwise wait on its work queue forever, holding the
    engine's memory, because the fork left it the queue's other end too. Linux's
    ``PR_SET_PDEATHSIG``; where there is no ``prctl``, nothing changes. A parent that died
    before the call has left this child to another process: it ends at once."""
    import ctypes
    import signal

    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return
    prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:
        os._exit(0)


@dataclass(frozen=True)
class Table:
    """A residual frame as the engine reads a DataFrame (``engine._inputs``: its columns'
    labels and its numbers as float64), so that the child unpickles its work without
    pandas, whose import would be on its way to the first fit.

    ``values`` (n, D) float64; ``columns`` (D,) the labels (an object array)."""

    values: npt.NDArray[np.float64]
    columns: npt.NDArray[np.object_]

    @classmethod
    def of(cls, frame: pd.DataFrame) -> Table:
        import numpy as np

        return cls(frame.to_numpy(dtype=np.float64),
                   np.asarray(frame.columns.tolist(), dtype=object))

    def to_numpy(self, dtype: Any = None) -> npt.NDArray[Any]:
        return self.values if dtype is None else self.values.astype(dtype, copy=False)


def fit_tables(selector: tuple[str, dict[str, Any]], pairs: list[tuple[Table, Table]]
               ) -> list[Selection | Exception]:
    """In the child: ``fit_many`` of the selector ``(class name in engine, constructor
    arguments)`` (:meth:`~monitor.decision.settings.EngineSettings.selector_spec`) on
    ``pairs``, each entry the fit or its error (:func:`~monitor.decision.calibrated_rule.
    fit_engine_pairs` on the frames the tables were made of)."""
    import engine

    name, kwargs = selector
    fits: list[Selection | Exception] = getattr(engine, name)(**kwargs).fit_many(
        pairs, errors="return")
    return fits


class EngineProcess:
    """Engine-part fits in one forked child process; an ``EngineFits`` callable
    (:data:`monitor.decision.calibrated_rule.EngineFits`).

    ``prepare_child`` runs first in the child (it loads the engine: the import that
    overlaps the parent's work). Close it with :meth:`close`."""

    def __init__(self, prepare_child: Callable[[], None]) -> None:
        # what this process has buffered would be written twice: once here, once when the
        # child exits (multiprocessing flushes its standard streams)
        sys.stdout.flush()
        sys.stderr.flush()
        context = multiprocessing.get_context("fork")
        self._pool: ProcessPoolExecutor | None = ProcessPoolExecutor(
            max_workers=1, mp_context=context, initializer=_start_child,
            initargs=(prepare_child, os.getpid()))
        before = set(multiprocessing.active_children())
        self._pool.submit(_ready)  # forks now: the child loads the engine meanwhile
        self._child = [p for p in multiprocessing.active_children() if p not in before]
        log.info("the engine part fits in a child process (pid %s), which loads the "
                 "engine meanwhile", ", ".join(str(p.pid) for p in self._child))

    def __call__(self, engine: EngineSettings, pairs: Sequence[tuple[Any, Any]],
                 scope: FitScope) -> PendingFits:
        """The engine part's fits of the residual frame ``pairs``
        (:func:`~monitor.decision.calibrated_rule.fit_engine_pairs`) started in the child;
        the returned function waits for them (fits them here where the child has died)."""
        # here, not at the top: this module loads before the fork, the rule's NumPy and
        # pandas after it
        from monitor.decision.calibrated_rule import engine_part_settings, fit_engine_pairs

        pairs = list(pairs)
        future = None
        if self._pool is not None:
            selector = engine_part_settings(engine, scope=scope).selector_spec()
            tables = [(Table.of(x), Table.of(y)) for x, y in pairs]
            try:
                future = self._pool.submit(fit_tables, selector, tables)
            except BrokenProcessPool as exc:
                self._lost(exc)

        def result() -> list[Selection | Exception]:
            if future is not None:
                try:
                    return future.result()
                except BrokenProcessPool as exc:
                    self._lost(exc)
            return fit_engine_pairs(engine, pairs, scope)

        return result

    def _lost(self, exc: BaseException) -> None:
        """The child died: every fit from now on runs in this process."""
        if self._pool is not None:
            log.warning("the engine's child process died (%s); fitting in this process "
                        "from now on", exc)
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    def close(self) -> None:
        """Stop the child at once: idle once the command's fits are back, or still loading
        the engine where the command ended early (bad input), which need not wait."""
        pool, self._pool = self._pool, None
        if pool is None:
            return
        for child in self._child:
            child.terminate()
        pool.shutdown(wait=True, cancel_futures=True)
