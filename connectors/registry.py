"""Maps the config's ``type`` key to a connector class, imported lazily.

Import strings rather than classes keep ``mmdwatch --help`` fast and let optional
dependencies (paho, influxdb-client) load only when a config asks for them.
"""
from __future__ import annotations

import importlib

from connectors.base import ConnectorError

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


def _load(table: dict[str, str], kind: str, type_: str) -> type:
    try:
        target = table[type_]
    except (KeyError, TypeError):  # TypeError: a list/mapping where a name belongs
        known = ", ".join(sorted(table))
        raise ConnectorError(f"unknown {kind} type {type_!r}; use one of: {known}") from None
    module_name, _, class_name = target.partition(":")
    module = importlib.import_module(module_name)
    return getattr(module, class_name)


def source_class(type_: str) -> type:
    """The source class registered for ``type_``."""
    return _load(SOURCES, "source", type_)


def sink_class(type_: str) -> type:
    """The sink class registered for ``type_``."""
    return _load(SINKS, "sink", type_)
