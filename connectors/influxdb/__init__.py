"""InfluxDB connectors: a window source and a results sink over the v1 HTTP API
(optional v2 mode through influxdb-client).

Modules: ``http`` (v1 HTTP client, connection config, errors), ``config`` (the source
config and what the readers share), ``v1`` (InfluxQL reader), ``v2`` (Flux reader and v2
writer; optional dependency), ``source`` (the factory that picks a reader by ``api``),
``sink`` and ``lineprotocol`` (results out). Imports run one way, without a cycle:
``source`` -> ``v1`` | ``v2`` -> ``config`` -> ``http``.
"""
from connectors.influxdb.config import InfluxSourceConfig
from connectors.influxdb.http import (
    InfluxAuthError,
    InfluxDatabaseMissing,
    InfluxError,
    InfluxQueryError,
    InfluxUnreachable,
)
from connectors.influxdb.sink import InfluxSink, InfluxSinkConfig
from connectors.influxdb.source import InfluxSource

__all__ = ["InfluxAuthError", "InfluxDatabaseMissing", "InfluxError", "InfluxQueryError",
           "InfluxSink", "InfluxSinkConfig", "InfluxSource", "InfluxSourceConfig",
           "InfluxUnreachable"]
