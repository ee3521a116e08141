"""InfluxDB connectors: a window source and a results sink over the v1 HTTP API
(optional v2 mode through influxdb-client)."""
from connectors.influxdb.http import (
    InfluxAuthError,
    InfluxDatabaseMissing,
    InfluxError,
    InfluxQueryError,
    InfluxUnreachable,
)
from connectors.influxdb.sink import InfluxSink, InfluxSinkConfig
from connectors.influxdb.source import InfluxSource, InfluxSourceConfig

__all__ = ["InfluxAuthError", "InfluxDatabaseMissing", "InfluxError", "InfluxQueryError",
           "InfluxSink", "InfluxSinkConfig", "InfluxSource", "InfluxSourceConfig",
           "InfluxUnreachable"]
