"""What the InfluxDB readers share: the ``source: {type: influxdb}`` config, the aggregate
names, and a base class. The v1 reader (:mod:`connectors.influxdb.v1`) and the v2 reader
(:mod:`connectors.influxdb.v2`) import this module and never each other;
:class:`connectors.influxdb.source.InfluxSource` picks one by ``api``.
"""
from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field

from connectors.base import WindowSource
from connectors.influxdb.http import InfluxConnectionConfig

#: window ``aggregate`` name -> InfluxQL / Flux function
AGGREGATES: dict[str, str] = {
    "mean": "mean", "median": "median", "min": "min", "max": "max", "sum": "sum",
    "first": "first", "last": "last",
}


class InfluxSourceConfig(InfluxConnectionConfig):
    """``source: {type: influxdb, ...}`` (docs/influxdb.md)."""

    type: Literal["influxdb"] = "influxdb"
    measurement: str = Field(min_length=1)
    sensor_tag: str = Field("sensor", min_length=1)
    field: str = Field("value", min_length=1)


class InfluxReader(WindowSource):
    """A window source over one InfluxDB measurement (one subclass per ``api``)."""

    type: ClassVar[str] = "influxdb"
    Config: ClassVar[type[InfluxSourceConfig]] = InfluxSourceConfig

    def __init__(self, config: InfluxSourceConfig | dict[str, Any]) -> None:
        self.config = config if isinstance(config, InfluxSourceConfig) else \
            InfluxSourceConfig.model_validate(config)

    def __repr__(self) -> str:
        c = self.config
        where = f"bucket={c.bucket!r}" if c.api == "v2" else f"database={c.database!r}"
        return f"{type(self).__name__}(url={c.url!r}, {where}, measurement={c.measurement!r})"
