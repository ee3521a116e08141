"""The tiny interfaces every connector implements (Telegraf-style plugins).

A connector class is picked by the ``type`` key of its config section (see
:mod:`connectors.registry`). Each class carries its own pydantic model as ``Config``
(``extra="forbid"``, a ``type: Literal[...]`` field) and is built as ``cls(config)``;
the monitor validates the YAML section with ``cls.Config`` and never reads connector keys
itself.

Two kinds of sources exist because readings live in two kinds of places:

* :class:`StreamSource` pushes readings as they arrive (MQTT, a replayed file). The agent
  commits them to its own store; the source acknowledges upstream only after ``deliver``
  returned, so a crash between receipt and commit loses nothing.
* :class:`WindowSource` answers "give me every reading in [start, end)" (InfluxDB, a file
  read in bulk). The agent then needs no store of its own for that source.

A source may be both (the file source is). Inspections only ever ask a
:class:`WindowSource`: the source itself, or for a stream source the agent's reading store
(:class:`monitor.storage.store.ReadingStore`), which is a window source too. Which one is decided
once, in :func:`monitor.compose.build_windows`.
"""
from __future__ import annotations

import abc
import builtins
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import pandas as pd
from pydantic import BaseModel


class ConnectorError(Exception):
    """A connector could not do its job; the message names the problem and the fix."""


class SinkError(ConnectorError):
    """A sink failed to deliver one result. The outbox keeps it and retries later."""


@dataclass(frozen=True, slots=True)
class Reading:
    """One sensor value.

    ``time`` is epoch seconds, UTC (float: cheap to store and compare at 20k readings/s).
    ``site``: the site the source says the reading belongs to (an MQTT topic level
    ``{site}``), None when the source does not say (the agent then goes by the sites'
    sensor lists).
    ``topic``: where it came from (an MQTT topic), for the log line of a refused reading.
    ``received``: True when the message carried no time and ``time`` is when it was
    received; a site on the data clock refuses such readings (the receive time says
    nothing about where the data is).
    """

    sensor: str
    time: float
    value: float
    site: str | None = None
    # provenance, not data: two readings of the same sensor, time and value are equal
    topic: str | None = field(default=None, compare=False)
    received: bool = field(default=False, compare=False)


#: Called by a stream source with a batch of accepted readings. It returns only after the
#: readings are committed to the store; it raises if they could not be (the source must
#: then not acknowledge them upstream).
DeliverFn = Callable[[Sequence[Reading]], None]


class StreamSource(abc.ABC):
    """Pushes readings to the agent as they arrive."""

    type: ClassVar[str]
    Config: ClassVar[builtins.type[BaseModel]]

    @abc.abstractmethod
    def start(self, deliver: DeliverFn) -> None:
        """Begin streaming in the background; return promptly."""

    @abc.abstractmethod
    def stop(self) -> None:
        """Stop streaming and release resources; idempotent."""

    def finished(self) -> bool:
        """True when a finite stream (a replayed file) has delivered everything."""
        return False

    def health(self) -> dict[str, Any]:
        """``{"connected": bool, "accepted": int, "rejected": {reason: count}, ...}``."""
        return {}


#: columns beside ``value`` of a window a source binned itself (``read_window`` with
#: ``resample``; InfluxDB's ``GROUP BY time``): each bin's standard deviation and count of
#: readings, which the spread channels need (docs/decision.md, "The spread channels")
BIN_SD, BIN_COUNT = "sd", "n"


class WindowSource(abc.ABC):
    """Answers window queries directly (the readings already live in a database or file)."""

    type: ClassVar[str]
    Config: ClassVar[builtins.type[BaseModel]]

    #: Where an agent's first start begins inspecting. False (a database, a file read in
    #: bulk): at the newest complete inspection, since the source may hold years nobody
    #: asked to re-inspect (``mmdwatch backfill`` does that). True (the agent's reading
    #: store, filled by a stream source): at the first inspection whose before window the
    #: oldest reading (:meth:`first_time`) fills, so a replay is inspected from its start.
    inspect_from_oldest: ClassVar[bool] = False

    @abc.abstractmethod
    def read_window(
        self,
        start: pd.Timestamp,
        end: pd.Timestamp,
        *,
        resample: str | None = None,
        aggregate: str = "mean",
    ) -> pd.DataFrame:
        """Readings with ``start <= time < end`` as a long frame.

        Columns ``time`` (tz-aware UTC Timestamps), ``sensor`` (str), ``value`` (float).
        With ``resample`` (e.g. ``"1h"``) the source may aggregate server-side, bins
        aligned to ``start``; the monitor resamples again either way, so doing it here is
        only an optimisation. Such bins also carry :data:`BIN_SD` and :data:`BIN_COUNT`.
        """

    @abc.abstractmethod
    def watermark(self) -> pd.Timestamp | None:
        """Time of the newest reading available (for ``clock: data``), or None if empty."""

    def first_time(self) -> pd.Timestamp | None:
        """Time of the oldest reading, None when empty or not known. Asked only where
        :attr:`inspect_from_oldest` is True."""
        return None

    def close(self) -> None:
        """Release resources."""


def within_accepted_change(result: dict[str, Any]) -> bool:
    """A firing result inside a change an operator's ack accepted (``detection.accepted``,
    docs/result.md): no sink alerts it again."""
    return bool((result.get("detection") or {}).get("accepted"))


class Sink(abc.ABC):
    """Delivers inspection results (the JSON dict of docs/result.md) somewhere."""

    type: ClassVar[str]
    Config: ClassVar[builtins.type[BaseModel]]

    @property
    def name(self) -> str:
        """Stable id of this sink instance, used by the outbox to track confirmations."""
        return self.type

    @abc.abstractmethod
    def send(self, result: dict[str, Any]) -> None:
        """Deliver one result; return only once it is confirmed. Raise SinkError otherwise."""

    def send_event(self, event: dict[str, Any]) -> None:
        """Deliver one agent event (``{"event": "data_gap", "site": ..., ...}``, not a
        result: docs/mqtt.md "Status events"). Best effort, never queued in the outbox:
        an event describes the agent's input now, a late copy after a restart would
        mislead. Raise SinkError when it could not be delivered. Default: sinks that have
        no place for events ignore them."""

    def close(self) -> None:
        """Release resources."""
