"""Logging that cannot flood: one line per key per interval, with a count of the rest."""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable


class RateLimitedLog:
    """Log at most one message per ``key`` every ``interval_s`` seconds.

    Suppressed messages are counted and the count is appended to the next line logged
    for that key, so an operator sees both an example and the volume.
    """

    def __init__(self, logger: logging.Logger, interval_s: float = 60.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._logger = logger
        self._interval = interval_s
        self._clock = clock
        self._last: dict[str, float] = {}
        self._suppressed: dict[str, int] = {}
        self._lock = threading.Lock()

    def log(self, level: int, key: str, msg: str, *args: object) -> bool:
        """Log ``msg % args`` unless ``key`` was logged recently; True when logged."""
        now = self._clock()
        with self._lock:
            last = self._last.get(key)
            if last is not None and now - last < self._interval:
                self._suppressed[key] = self._suppressed.get(key, 0) + 1
                return False
            self._last[key] = now
            skipped = self._suppressed.pop(key, 0)
        if skipped:
            msg += f" ({skipped} similar messages suppressed in the last {self._interval:g}s)"
        self._logger.log(level, msg, *args)
        return True

    def warning(self, key: str, msg: str, *args: object) -> bool:
        return self.log(logging.WARNING, key, msg, *args)
