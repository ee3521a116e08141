"""InfluxDB sink: one batched line-protocol write per inspection result."""
from __future__ import annotations

import logging
from typing import Any, ClassVar, Literal

from connectors.base import Sink, SinkError
from connectors.influxdb.http import InfluxConnectionConfig, InfluxError, InfluxHttp
from connectors.influxdb.lineprotocol import INSPECTION, SENSOR_SCORE, result_lines

log = logging.getLogger(__name__)


class InfluxSinkConfig(InfluxConnectionConfig):
    """``sinks: - {type: influxdb, ...}``."""

    type: Literal["influxdb"] = "influxdb"
    inspection_measurement: str = INSPECTION
    score_measurement: str = SENSOR_SCORE


class InfluxSink(Sink):
    """Writes ``mmdwatch_inspection`` and ``mmdwatch_sensor_score`` points."""

    type: ClassVar[str] = "influxdb"
    Config: ClassVar[type[InfluxSinkConfig]] = InfluxSinkConfig

    def __init__(self, config: InfluxSinkConfig | dict[str, Any], **_: Any) -> None:
        self.config = config if isinstance(config, InfluxSinkConfig) else \
            InfluxSinkConfig.model_validate(config)
        if self.config.api == "v2":
            from connectors.influxdb.v2 import V2Writer  # optional dependency

            self._writer: Any = V2Writer(self.config)
        else:
            self._writer = InfluxHttp(self.config)

    def __repr__(self) -> str:
        return f"InfluxSink(url={self.config.url!r}, database={self.config.database!r})"

    @property
    def name(self) -> str:
        c = self.config
        return f"influxdb:{c.url}/{c.database or c.bucket}"

    def send(self, result: dict[str, Any]) -> None:
        try:
            lines = result_lines(result,
                                 inspection_measurement=self.config.inspection_measurement,
                                 score_measurement=self.config.score_measurement)
        except (KeyError, ValueError) as exc:
            raise SinkError(f"result cannot be written to InfluxDB ({exc!r}); it lacks "
                            "inspection_time or fields") from exc
        try:
            self._writer.write(lines)
        except InfluxError as exc:
            raise SinkError(f"{exc}; the outbox retries") from exc

    def close(self) -> None:
        self._writer.close()
