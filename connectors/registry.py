"""Maps the config's ``type`` key to a connector class, imported lazily.

Import strings rather than classes keep ``mmdwatch --help`` fast and let optional
dependencies (paho, influxdb-client) load only when a config asks for them.
"""
from __future__ import annotations

import importlib
from typing import Any, Protocol

from pydantic import BaseModel

from connectors.base import ConnectorError, Sink, StreamSource, WindowSource


class SourceClass(Protocol):
    """A source connector class: its config model, and a constructor taking a config."""

    Config: type[BaseModel]

    def __call__(self, config: Any, /) -> StreamSource | WindowSource: ...


class SinkClass(Protocol):
    """A sink connector class: its config model, and a constructor taking a config."""

    Config: type[BaseModel]

    def __call__(self, config: Any, /) -> Sink: ...

SOURCES: dict[str, str] = {
    "file": "connectors.file:FileSource",
    "mqtt": "connectors.mqtt:MqttSource",
    "influxdb": "connectors.influxdb:InfluxSource",
}

SINKS: dict[str, str] = {
    "console": "connectors.console:ConsoleSink",
    "jsonl": "connectors.jsonl:JsonlSink",
    "mqtt": "connectors.mqtt:MqttSink",
    "influxdb": "connectors.influxdb:InfluxSink",
    "webhook": "connectors.webhook:WebhookSink",
}


def _load(table: dict[str, str], kind: str, type_: str) -> Any:
    try:
        target = table[type_]
    except (KeyError, TypeError):  # TypeError: a list/mapping where a name belongs
        known = ", ".join(sorted(table))
        raise ConnectorError(f"unknown {kind} type {type_!r}; use one of: {known}") from None
    module_name, _, class_name = target.partition(":")
    module = importlib.import_module(module_name)
    return getattr(module, class_name)


def source_class(type_: str) -> SourceClass:
    """The source class registered for ``type_``."""
    return _load(SOURCES, "source", type_)


def sink_class(type_: str) -> SinkClass:
    """The sink class registered for ``type_``."""
    return _load(SINKS, "sink", type_)
