"""``source: {type: influxdb}``: a thin factory over the two InfluxDB readers.

``api: v1`` (default) is :class:`connectors.influxdb.v1.InfluxQLSource` (InfluxQL over the
v1 HTTP API); ``api: v2`` is :class:`connectors.influxdb.v2.FluxSource` (Flux through the
optional influxdb-client, imported only then). Both share
:mod:`connectors.influxdb.config` and never import each other.
"""
from __future__ import annotations

from typing import Any, ClassVar

from connectors.influxdb.config import InfluxReader, InfluxSourceConfig
from connectors.influxdb.v1 import InfluxQLSource

__all__ = ["InfluxSource", "InfluxSourceConfig"]


class InfluxSource:
    """``InfluxSource(config)`` is the reader that ``config.api`` names (a
    :class:`~connectors.base.WindowSource`); the registry and the config loader see this
    class, with the one ``Config`` both readers take."""

    type: ClassVar[str] = "influxdb"
    Config: ClassVar[type[InfluxSourceConfig]] = InfluxSourceConfig

    def __new__(cls, config: InfluxSourceConfig | dict[str, Any]  # type: ignore[misc]
                ) -> InfluxReader:
        config = config if isinstance(config, InfluxSourceConfig) else \
            InfluxSourceConfig.model_validate(config)
        if config.api == "v2":
            from connectors.influxdb.v2 import FluxSource  # optional dependency

            return FluxSource(config)
        return InfluxQLSource(config)
