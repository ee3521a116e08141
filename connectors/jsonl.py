"""JSON Lines sink: one result per line, appended, flushed and fsynced.

A result whose fingerprint is already among the file's recent lines is not written again,
so a redelivery after a crash does not duplicate it. A process killed in the middle of a write
leaves a torn last line; the first write after that ends it with a newline, so the torn line
stays one unreadable line (redelivered in full from the outbox) instead of swallowing the next
result.
"""
from __future__ import annotations

import json
import logging
import os
import threading
from collections import deque
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from connectors.base import Sink, SinkError

log = logging.getLogger(__name__)

_TAIL_BYTES = 4 << 20  # fingerprints are looked up in the last 4 MiB of the file


class JsonlSinkConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal["jsonl"] = "jsonl"
    path: Path = Field(description="file the results are appended to")
    name: str | None = None
    fsync: bool = True


class JsonlSink(Sink):
    type: ClassVar[str] = "jsonl"
    Config: ClassVar[type[BaseModel]] = JsonlSinkConfig

    def __init__(self, config: JsonlSinkConfig) -> None:
        self.config = config
        self._lock = threading.Lock()
        self._seen: deque[str] | None = None
        self._seen_set: set[str] = set()
        self._torn_tail = False

    @property
    def name(self) -> str:
        return self.config.name or f"jsonl:{self.config.path}"

    def _load_seen(self) -> None:
        self._seen = deque(maxlen=10000)
        self._seen_set = set()
        self._torn_tail = False
        path = self.config.path
        if not path.is_file():
            return
        with path.open("rb") as fh:
            fh.seek(max(0, path.stat().st_size - _TAIL_BYTES))
            tail = fh.read()
            self._torn_tail = bool(tail) and not tail.endswith(b"\n")
            if self._torn_tail:
                log.warning("jsonl %s: its last line is unfinished (a write cut short by a crash); "
                            "it is ended here and its result is written again in full", path)
            for line in tail.splitlines():
                try:
                    fp = json.loads(line).get("fingerprint")
                except (ValueError, AttributeError):
                    continue  # a partial first line from the seek, or a foreign line
                if fp:
                    self._remember(fp)

    def _remember(self, fp: str) -> None:
        assert self._seen is not None
        if len(self._seen) == self._seen.maxlen:
            self._seen_set.discard(self._seen[0])
        self._seen.append(fp)
        self._seen_set.add(fp)

    def send(self, result: dict[str, Any]) -> None:
        path = self.config.path
        line = json.dumps(result, separators=(",", ":"), allow_nan=False) + "\n"
        with self._lock:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                if self._seen is None:
                    self._load_seen()
                fp = result.get("fingerprint")
                if fp and fp in self._seen_set:
                    log.info("jsonl %s: %s already written; not duplicated", path, fp)
                    return
                if self._torn_tail:
                    line = "\n" + line
                with path.open("a", encoding="utf-8") as fh:
                    fh.write(line)
                    fh.flush()
                    if self.config.fsync:
                        os.fsync(fh.fileno())
            except OSError as exc:
                self._seen = None  # a write may have stopped halfway: look at the tail again
                raise SinkError(f"jsonl: cannot append to {path} ({exc.strerror or exc}); make "
                                "its folder exist and be writable") from None
            self._torn_tail = False
            if fp:
                self._remember(fp)
