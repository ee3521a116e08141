"""Progress of a long one-shot command (``backfill``) on stderr.

On a terminal: a tqdm bar, redrawn in place. When stderr is not a terminal (a log file, a
pipe, CI), tqdm's carriage returns make one line of megabytes; there a log line every 10 %
of the work or every 30 s, whichever comes first, says the same readably.
"""
from __future__ import annotations

import logging
import sys
import time
from typing import Any, Self, TextIO

log = logging.getLogger("monitor.progress")


class LogProgress:
    """tqdm's ``update``/``set_postfix_str``/context interface, as periodic log lines."""

    def __init__(self, total: int, desc: str, unit: str, *, every_fraction: float = 0.1,
                 every_s: float = 30.0, clock: Any = time.monotonic) -> None:
        self.total, self.desc, self.unit = total, desc, unit
        self.n = 0
        self._postfix = ""
        self._every_n = max(1, int(total * every_fraction))
        self._every_s = every_s
        self._clock = clock
        self._start = self._last_t = clock()
        self._last_n = 0

    def update(self, n: int = 1) -> None:
        self.n += n
        now = self._clock()
        if self.n - self._last_n >= self._every_n or now - self._last_t >= self._every_s \
                or self.n >= self.total:
            self._line(now)

    def set_postfix_str(self, text: str, refresh: bool = True) -> None:
        self._postfix = text

    def _line(self, now: float) -> None:
        self._last_n, self._last_t = self.n, now
        share = 100.0 * self.n / self.total if self.total else 100.0
        elapsed = now - self._start
        rate = self.n / elapsed if elapsed > 0 else 0.0
        log.info("%s: %d/%d %s (%.0f%%, %.2f %s/s)%s", self.desc, self.n, self.total,
                 self.unit, share, rate, self.unit, f" {self._postfix}" if self._postfix else "")

    def close(self) -> None:
        if self.n != self._last_n:
            self._line(self._clock())

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def progress_bar(total: int, desc: str, unit: str, stream: TextIO | None = None) -> Any:
    """A tqdm bar when ``stream`` (stderr) is a terminal, else a :class:`LogProgress`."""
    stream = stream if stream is not None else sys.stderr
    if stream.isatty():
        from tqdm import tqdm

        return tqdm(total=total, desc=desc, unit=unit, file=stream, dynamic_ncols=True)
    if log.level == logging.NOTSET and logging.getLogger().level <= logging.WARNING:
        # backfill logs at WARNING by default; its progress is what the user waits for,
        # so it shows unless they asked for less (--log-level ERROR)
        log.setLevel(logging.INFO)
    return LogProgress(total, desc, unit)
