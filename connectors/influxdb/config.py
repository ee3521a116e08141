"""What the InfluxDB readers share: the ``source: {type: influxdb}`` config, the aggregate
names, and a base class. The v1 reader (:mod:`connectors.influxdb.v1`) and the v2 reader
(:mod:`connectors.influxdb.v2`) import this module and never each other;
:class:`connectors.influxdb.source.InfluxSource` picks one by ``api``.
"""
from __future__ import annotations

from typing import Any, ClassVar, Literal

import pandas as pd
from pydantic import Field, model_validator

from connectors.base import WindowSource
from connectors.influxdb.http import InfluxConnectionConfig

#: window ``aggregate`` name -> InfluxQL / Flux function
AGGREGATES: dict[str, str] = {
    "mean": "mean", "median": "median", "min": "min", "max": "max", "sum": "sum",
    "first": "first", "last": "last",
}


def bin_grid(start: pd.Timestamp, resample: str) -> tuple[int, int]:
    """``(step, offset)`` in seconds of the server's bins for a window from ``start``:
    ``resample`` wide, aligned to the window start (``start mod step``), not to the
    epoch, as the monitor's own bins are. ``step`` 0 or less: ``resample`` is not a
    positive duration."""
    step = int(pd.Timedelta(resample).total_seconds())
    return step, (int(pd.Timestamp(start).timestamp()) % step if step > 0 else 0)


class InfluxSourceConfig(InfluxConnectionConfig):
    """``source: {type: influxdb, ...}`` (docs/influxdb.md)."""

    type: Literal["influxdb"] = "influxdb"
    measurement: str = Field(min_length=1)
    sensor_tag: str = Field("sensor", min_length=1)
    field: str = Field("value", min_length=1)
    # Many sites in one measurement: the tag whose value is the site id. The agent reads
    # each site's windows with ``site`` set (only points whose ``site_tag`` equals it).
    site_tag: str | None = Field(None, min_length=1)
    site: str | None = Field(None, min_length=1)
    # Only these sensors (the agent sets it from a site's ``sensors`` list).
    sensors: list[str] | None = Field(None, min_length=1)

    @model_validator(mode="after")
    def _site_needs_tag(self) -> InfluxSourceConfig:
        if self.site is not None and self.site_tag is None:
            raise ValueError("site needs site_tag: name the tag that holds the site id, "
                             "e.g. site_tag: dma")
        return self

    @property
    def names_sites(self) -> bool:
        """True when each point's site is its ``site_tag`` tag (one source, many sites)."""
        return self.site_tag is not None

    def for_site(self, site: str | None, sensors: list[str] | None = None
                 ) -> InfluxSourceConfig:
        """This config narrowed to one site's points (``site``, when ``site_tag`` is set)
        and to ``sensors`` (when given)."""
        update: dict[str, Any] = {"sensors": sensors}
        if self.site_tag is not None:
            update["site"] = site
        return self.model_copy(update=update)


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
