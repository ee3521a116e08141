"""Publishing from the one-shot commands: ``inspect --publish`` and ``backfill --publish``.

The results take the agent's own path to the sinks: the outbox in ``state_dir/state.sqlite``
and the :class:`~monitor.storage.delivery.Dispatcher` (one worker per sink, retries with backoff).
:meth:`monitor.storage.state.AgentState.publish` queues a result only if its fingerprint was never
published before, by an earlier one-shot run or by the agent, so a rerun publishes nothing
twice. Before the command exits, :meth:`Publisher.finish` waits for the sinks to confirm;
what they did not confirm in time stays in the outbox, and the agent (``mmdwatch run``) or
the next ``--publish`` run delivers it.
"""
from __future__ import annotations

import logging
import time
from typing import Any

from monitor.storage.delivery import Dispatcher
from monitor.storage.state import AgentState

log = logging.getLogger("mmdwatch")


class Publisher:
    """Queues results and delivers them while the command keeps computing."""

    def __init__(self, state: AgentState, dispatcher: Dispatcher) -> None:
        self.state = state
        self.dispatcher = dispatcher
        self.queued = 0
        self.skipped = 0
        self._started = False

    def start(self) -> None:
        self.dispatcher.start()
        self._started = True

    def publish(self, t: float, result: dict[str, Any]) -> bool:
        """Queue one result (inspection time ``t``, epoch s); False when its fingerprint was
        already published."""
        if self.state.publish(t, result):
            self.queued += 1
            self.dispatcher.notify()
            return True
        self.skipped += 1
        return False

    def finish(self, timeout: float, *, progress_every: float = 5.0) -> str | None:
        """Wait up to ``timeout`` s for the sinks to confirm everything the one-shot commands
        queued (this run and earlier ones), logging progress; then stop the workers and close
        the sinks. Returns what was left undelivered, None when nothing was."""
        names = [s.name for s in self.dispatcher.sinks]
        deadline = time.monotonic() + timeout
        next_note = time.monotonic() + progress_every
        waiting = self.state.published_pending()
        if waiting:
            log.warning("publish: waiting up to %.0f s for %s to confirm %d result(s)",
                        timeout, ", ".join(names), len(waiting))
        while waiting and time.monotonic() < deadline:
            time.sleep(0.1)
            waiting = self.state.published_pending()
            if waiting and time.monotonic() >= next_note:
                log.warning("publish: %d result(s) still waiting for %s", len(waiting),
                            _missing(waiting, names))
                next_note = time.monotonic() + progress_every
        self.close()
        if waiting:
            return (f"{len(waiting)} result(s) not confirmed within {timeout:g} s by "
                    f"{_missing(waiting, names)}; they stay queued in {self.state.path} and "
                    "the agent (mmdwatch run) or the next --publish run delivers them")
        log.warning("publish: %d result(s) delivered to %s; %d already published before "
                    "(skipped)", self.queued, ", ".join(names), self.skipped)
        return None

    def close(self) -> None:
        """Stop delivering (queued results stay in the outbox) and release everything."""
        if self._started:
            self.dispatcher.stop(timeout=5.0)  # closes the sinks too
            self._started = False
        else:
            for sink in self.dispatcher.sinks:
                sink.close()
        self.state.close()


def _missing(waiting: dict[str, frozenset[str]], names: list[str]) -> str:
    """``"mqtt:host:1883/mmdwatch (3)"``: the sinks that have not confirmed, with counts."""
    counts = {n: sum(n not in got for got in waiting.values()) for n in names}
    return ", ".join(f"{n} ({c})" for n, c in counts.items() if c) or "the sinks"
