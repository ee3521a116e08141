"""Where inspections run: in-process, a process pool on this machine, or a Dask cluster.

:func:`build_executor` turns the config's ``executor:`` section
(:class:`monitor.config.ExecutorConfig`) into a :class:`concurrent.futures.Executor`:
``submit(fn, *args)`` returns a :class:`concurrent.futures.Future`, so
``concurrent.futures.wait`` / ``as_completed`` work the same whatever runs the task::

    from monitor.fleet.executors import build_executor
    from monitor.fleet.jobs import run_job

    with build_executor(config.executor) as executor:   # close() on exit
        futures = [executor.submit(run_job, job) for job in jobs]
        results = [f.result() for f in futures]

* ``type: inline`` (or ``local`` with ``workers: 1``): :class:`InlineExecutor`, the task
  runs inside ``submit`` in this process (nothing to pickle, nothing to start).
* ``type: local``: :class:`LocalExecutor`, a ``ProcessPoolExecutor`` of ``workers``
  processes (default ``min(2, CPUs)``), forked from a ``forkserver`` that imported the
  inspection code (torch, pandas) once (:data:`WORKER_PRELOAD`): no fork of a process
  that holds client threads, and a pool or a replacement worker starts without importing
  torch again (3 s or more of CPU each on a small server). A pool process that dies
  breaks the pool (``BrokenProcessPool``): no retry, the caller reruns what did not come
  back.
* ``type: dask``: :class:`DaskExecutor`, tasks on the Dask scheduler at ``address`` through
  ``Client.get_executor(pure=False, retries=...)``; without an address, a
  ``LocalCluster`` of ``workers`` single-threaded worker processes is started and closed
  with the executor; its nannies fork the workers from the same forkserver
  (:func:`use_forkserver_for_dask_workers`). Worker loss is Dask's business: the
  scheduler reruns the task of a worker that died (up to the scheduler's
  ``distributed.scheduler.allowed-failures``, 3 by default; then the future raises
  ``KilledWorker``) and ``retries`` more times a task that raised, so a submitted task
  yields one result or one error, never two results. The scheduler's dashboard URL
  (``Client.dashboard_link``) is logged at INFO when the client connects (the dashboard
  itself needs ``bokeh`` installed where the scheduler runs).

An unreachable scheduler raises :class:`ExecutorUnavailable` after
``executor.connect_timeout`` (5 s), with the fix in the message.
"""
from __future__ import annotations

import logging
import os
from collections.abc import Callable
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from monitor.config import ExecutorConfig

log = logging.getLogger(__name__)

__all__ = ["DaskExecutor", "ExecutorUnavailable", "InlineExecutor", "LocalExecutor",
           "RenewableExecutor", "build_executor", "close_executor", "default_workers",
           "describe", "parse_cluster"]


class ExecutorUnavailable(RuntimeError):
    """The executor cannot start or reach its cluster; the message names the fix."""


def default_workers() -> int:
    """Worker processes when the config names none: min(2, CPUs)."""
    return max(1, min(2, os.cpu_count() or 1))


class InlineExecutor(Executor):
    """Runs each task inside ``submit``, in this process; the returned future is done."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller via the future
            future.set_exception(exc)
        return future

    def close(self) -> None:
        """Nothing to release."""

    def __repr__(self) -> str:
        return "InlineExecutor()"


#: What the forkserver of :class:`LocalExecutor` imports before it forks a worker: the
#: job code and the engine's heavy imports, which importing the job code leaves lazy.
WORKER_PRELOAD = ["monitor.fleet.jobs", "monitor.inspection", "torch"]


#: The Dask config key that says how a nanny starts its worker process (Dask's default:
#: ``spawn``, a fresh interpreter that imports everything again).
DASK_START_METHOD = "distributed.worker.multiprocessing-method"


def use_forkserver_for_dask_workers() -> None:
    """Let a ``LocalCluster``'s nannies fork their workers from the forkserver of
    :class:`LocalExecutor` (:data:`WORKER_PRELOAD` and ``distributed`` imported once)
    instead of spawning interpreters that import torch each: a worker, and a worker that
    replaces a dead one, starts without importing torch again. Only where the
    start method is still Dask's default ``spawn``: a method set in the Dask config
    stays. Dask's own forkserver preload (:func:`distributed.utils.get_mp_context`) is
    set first so that it does not replace this one."""
    import dask.config
    from distributed.utils import get_mp_context  # loads distributed's config keys too

    if dask.config.get(DASK_START_METHOD) != "spawn":
        return
    dask.config.set({DASK_START_METHOD: "forkserver"})
    get_mp_context().set_forkserver_preload([*WORKER_PRELOAD, "distributed"])


class LocalExecutor(ProcessPoolExecutor):
    """A process pool of ``workers`` processes on this machine, forked from a
    ``forkserver`` process that holds :data:`WORKER_PRELOAD` (one per agent process; it
    runs no threads and no torch operation, so forking it is safe)."""

    def __init__(self, workers: int) -> None:
        import multiprocessing

        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(WORKER_PRELOAD)
        super().__init__(max_workers=workers, mp_context=context)
        self.workers = workers
        log.info("executor: local process pool, %d worker process(es)", workers)

    def close(self) -> None:
        """Wait for running tasks, then stop the processes."""
        self.shutdown(wait=True, cancel_futures=True)

    def __repr__(self) -> str:
        return f"LocalExecutor(workers={self.workers})"


class DaskExecutor(Executor):
    """Tasks on a Dask cluster: the scheduler at ``address``, or a ``LocalCluster`` of
    ``workers`` processes started here when ``address`` is None."""

    def __init__(self, address: str | None = None, *, workers: int | None = None,
                 connect_timeout: float = 5.0, retries: int = 3) -> None:
        try:
            from distributed import Client, LocalCluster
        except ImportError as exc:  # pragma: no cover - a core dependency
            raise ExecutorUnavailable(
                f"executor type dask needs dask.distributed ({exc}); pip install "
                "'dask[distributed]' or use executor: {type: local}") from None
        self.address = address
        self.retries = retries
        self.cluster: Any = None
        if address is None:
            n = workers or default_workers()
            use_forkserver_for_dask_workers()
            try:
                self.cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True,
                                            dashboard_address=":0", silence_logs=logging.WARNING)
            except Exception as exc:
                raise ExecutorUnavailable(
                    f"cannot start a Dask LocalCluster of {n} worker(s) ({exc}); use "
                    "executor: {type: local} or give an address") from exc
            target: Any = self.cluster
        else:
            target = address
        self.client: Any = None  # set below; close() copes with None
        try:
            self.client = Client(target, timeout=connect_timeout, set_as_default=False)
            self._executor = self.client.get_executor(pure=False, retries=retries)
            log.info("executor: dask scheduler %s, %d worker(s); dashboard %s",
                     self.scheduler_address, self.n_workers(), self.dashboard_link)
        except (OSError, TimeoutError) as exc:
            self.close()  # never leave a LocalCluster's processes behind
            raise ExecutorUnavailable(
                f"cannot reach the Dask scheduler at {address} within {connect_timeout:g} s "
                f"({type(exc).__name__}); start one with `dask scheduler` (and workers with "
                f"`dask worker {address}`), check the address, or use executor: "
                "{type: local}") from None
        except BaseException:
            self.close()
            raise

    @property
    def scheduler_address(self) -> str:
        """The scheduler's address as the client sees it (``tcp://host:port``)."""
        return str(self.client.scheduler_info().get("address", self.address))

    @property
    def dashboard_link(self) -> str | None:
        """The scheduler's dashboard URL (served when bokeh is installed there)."""
        try:
            return str(self.client.dashboard_link)
        except Exception:  # noqa: BLE001 - no dashboard service on that scheduler
            return None

    def n_workers(self) -> int:
        """Workers connected to the scheduler right now."""
        return len(self.client.scheduler_info(n_workers=-1).get("workers", {}))

    def wait_for_workers(self, n: int, timeout: float = 30.0) -> None:
        """Block until ``n`` workers are connected (ExecutorUnavailable after ``timeout``)."""
        try:
            self.client.wait_for_workers(n, timeout=timeout)
        except TimeoutError:
            raise ExecutorUnavailable(
                f"the Dask scheduler at {self.scheduler_address} has "
                f"{self.n_workers()} worker(s), not {n}, after {timeout:g} s; start workers "
                "with `dask worker ADDRESS`") from None

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = self._executor.submit(fn, *args, **kwargs)
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self.close()

    def close(self) -> None:
        """Close the client (tasks still running are released) and the LocalCluster if
        this executor started one. Idempotent."""
        client, self.client = getattr(self, "client", None), None
        if client is not None:
            client.close()
        cluster, self.cluster = self.cluster, None
        if cluster is not None:
            cluster.close()

    def __repr__(self) -> str:
        return f"DaskExecutor(address={self.address!r}, retries={self.retries})"


def build_executor(config: ExecutorConfig) -> InlineExecutor | LocalExecutor | DaskExecutor:
    """The executor for an ``executor:`` config section (every kind has ``close()``)."""
    if config.type == "dask":
        return DaskExecutor(config.address, workers=config.workers,
                            connect_timeout=config.connect_timeout.total_seconds(),
                            retries=config.retries)
    workers = config.workers or default_workers()
    if config.type == "inline" or workers == 1:
        return InlineExecutor()
    return LocalExecutor(workers)


def close_executor(executor: Executor) -> None:
    """Close any executor: its ``close()`` (ours: a Dask client and cluster, a pool), else
    ``shutdown``."""
    close = getattr(executor, "close", None)
    if close is not None:
        close()
    else:
        executor.shutdown(wait=True, cancel_futures=True)


class RenewableExecutor(Executor):
    """An executor that its user can replace when it breaks: a local process pool that lost
    a process is broken for good (every later ``submit`` raises ``BrokenProcessPool``).
    Tasks go to :attr:`current`; :meth:`renew` closes a broken executor it built and puts
    a fresh one from ``build`` in its place, so that the stages of one backfill (the
    calibration history, then the inspections) go on on the same, renewed pool.

    :meth:`close` closes every executor held, the first included; :meth:`close_renewed`
    only the one ``build`` made last (those before it were closed when renewed)."""

    def __init__(self, first: Executor, build: Callable[[], Executor] | None = None) -> None:
        self.first = first
        self.current = first
        self.build = build

    @property
    def renewable(self) -> bool:
        return self.build is not None

    def renew(self) -> None:
        """Replace :attr:`current` with a fresh executor from ``build``."""
        if self.build is None:
            raise RuntimeError("this executor cannot be renewed: give build")
        self.close_renewed()
        self.current = self.build()

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        return self.current.submit(fn, *args, **kwargs)

    def close_renewed(self) -> None:
        if self.current is not self.first:
            close_executor(self.current)
            self.current = self.first

    def close(self) -> None:
        self.close_renewed()
        close_executor(self.first)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"RenewableExecutor({self.current!r})"


def parse_cluster(value: str) -> dict[str, Any]:
    """``--cluster`` as an ``executor:`` mapping: ``local`` / ``local:N`` (process pool),
    ``dask`` / ``dask:N`` (a Dask LocalCluster), ``inline``, or a scheduler address
    (``tcp://host:8786``, ``host:8786``). ValueError names the accepted forms."""
    text = value.strip()
    kind, _, n = text.partition(":")
    if kind in ("local", "dask", "inline") and "//" not in text:
        out: dict[str, Any] = {"type": kind}
        if n:
            if not n.isdigit() or int(n) < 1:
                raise ValueError(f"--cluster {value!r}: the number of workers must be a "
                                 "positive integer, e.g. local:2")
            out["workers"] = int(n)
        return out
    if not text or text.startswith(":"):
        raise ValueError(f"--cluster {value!r}: give local[:N], dask[:N], inline, or a Dask "
                         "scheduler address such as tcp://host:8786")
    return {"type": "dask", "address": text if "://" in text else f"tcp://{text}"}


def describe(executor: Executor) -> str:
    """One line naming the executor (logs, benchmark tables)."""
    return repr(executor)
