"""Fault injection for executor tests: an executor whose task for one inspection time
kills the worker process running it (``os._exit``, as the kernel's OOM killer would),
every time it runs. Module-level, so that worker processes (spawned pools, Dask workers)
unpickle the wrapped task by reference."""
from __future__ import annotations

import os
from concurrent.futures import Executor, Future
from datetime import datetime
from typing import Any


def die_at(t_kill: datetime, site: str | None, fn: Any, job: Any) -> Any:
    """``fn(job)``, except that the process dies on the spot when ``job`` (an
    InspectionJob or InspectionBatch, or a list of batches: an agent's first pass) covers
    ``t_kill`` (of ``site``, when given)."""
    for one in job if isinstance(job, list) else [job]:
        times = getattr(one, "times", None) or (one.inspection_time,)
        if t_kill in times and site in (None, one.site):
            os._exit(1)
    return fn(job)


class KillingExecutor(Executor):
    """Submits each task to ``inner`` wrapped in :func:`die_at` (the inspection at
    ``t_kill``, of ``site`` when given); closing it closes ``inner``."""

    def __init__(self, inner: Any, t_kill: datetime, site: str | None = None) -> None:
        self.inner, self.t_kill, self.site = inner, t_kill, site

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = self.inner.submit(die_at, self.t_kill, self.site, fn, *args,
                                                **kwargs)
        return future

    def close(self) -> None:
        self.inner.close()
