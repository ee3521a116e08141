"""Optional ``api: v2`` mode: Flux queries and v2 writes through ``influxdb-client``.

Only for InfluxDB 2.x users who cannot map a DBRP for the v1 compatibility API. Needs
``pip install 'mmdwatch[influx2]'``. Its tests run only against a real 2.x server named
by environment variables (see tests/connectors/test_influxdb_v2.py).
"""
from __future__ import annotations

from typing import Any

import pandas as pd

from connectors.base import ConnectorError
from connectors.influxdb.config import AGGREGATES, InfluxReader, InfluxSourceConfig, bin_grid
from connectors.influxdb.http import InfluxConnectionConfig, InfluxError, InfluxUnreachable
from connectors.timeutil import to_utc


def _client(config: InfluxConnectionConfig) -> Any:
    try:
        from influxdb_client import InfluxDBClient
    except ImportError as exc:
        raise ConnectorError("api: v2 needs the influxdb-client package; run "
                             "pip install 'mmdwatch[influx2]' or use api: v1") from exc
    assert config.token is not None
    kwargs: dict[str, Any] = {"url": config.url, "token": config.token.get_secret_value(),
                              "org": config.org, "timeout": int(config.timeout_s * 1000)}
    if config.tls is not None:
        kwargs["verify_ssl"] = config.tls.verify
        if config.tls.ca_certs is not None:
            kwargs["ssl_ca_cert"] = str(config.tls.ca_certs)
    return InfluxDBClient(**kwargs)


def _flux_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _site_filters(c: InfluxSourceConfig) -> str:
    """Flux filters narrowing the points to one site and to the listed sensors."""
    out = ""
    if c.site_tag is not None and c.site is not None:
        out += (f"  |> filter(fn: (r) => r[{_flux_string(c.site_tag)}] == "
                f"{_flux_string(c.site)})\n")
    if c.sensors:
        names = ", ".join(_flux_string(s) for s in c.sensors)
        out += (f"  |> filter(fn: (r) => contains(value: r[{_flux_string(c.sensor_tag)}], "
                f"set: [{names}]))\n")
    return out


def _rfc3339(ts: pd.Timestamp) -> str:
    return to_utc(ts).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _wrap(exc: Exception, url: str) -> InfluxError:
    if isinstance(exc, OSError) or "Connection" in type(exc).__name__:
        return InfluxUnreachable(f"cannot reach InfluxDB 2.x at {url} ({exc}); check url")
    return InfluxError(f"InfluxDB 2.x at {url} failed: {exc}; check token, org and bucket")


class FluxSource(InfluxReader):
    """The ``api: v2`` reader: window queries in Flux (same frame as the v1 reader)."""

    def __init__(self, config: InfluxSourceConfig | dict[str, Any]) -> None:
        super().__init__(config)
        self._client = _client(self.config)

    def _flux(self, start: pd.Timestamp, end: pd.Timestamp, resample: str | None,
              aggregate: str) -> str:
        c = self.config
        assert c.bucket is not None  # api: v2 requires it
        flux = (f"from(bucket: {_flux_string(c.bucket)})\n"
                f"  |> range(start: {_rfc3339(start)}, stop: {_rfc3339(end)})\n"
                f"  |> filter(fn: (r) => r._measurement == {_flux_string(c.measurement)}"
                f" and r._field == {_flux_string(c.field)})\n") + _site_filters(c)
        if resample is not None:
            # bins aligned to the window start, as the v1 reader's: without the offset
            # they fell on the epoch's grid, a second off the windows that start on odd
            # seconds (5-s inspections in 2-s bins)
            step, offset = bin_grid(start, resample)
            fn = AGGREGATES.get(aggregate, "mean")
            flux += (f"  |> aggregateWindow(every: {step}s, offset: {offset}s, fn: {fn}, "
                     "createEmpty: false, timeSrc: \"_start\")\n")
        flux += f"  |> keep(columns: [\"_time\", \"_value\", {_flux_string(c.sensor_tag)}])\n"
        return flux

    def read_window(self, start: pd.Timestamp, end: pd.Timestamp, *,
                    resample: str | None = None, aggregate: str = "mean") -> pd.DataFrame:
        try:
            tables = self._client.query_api().query(self._flux(start, end, resample, aggregate))
        except Exception as exc:
            raise _wrap(exc, self.config.url) from exc
        rows = [(rec.get_time(), rec.values.get(self.config.sensor_tag), rec.get_value())
                for table in tables for rec in table.records]
        frame = pd.DataFrame(rows, columns=["time", "sensor", "value"])
        frame["time"] = pd.to_datetime(frame["time"], utc=True)
        frame["value"] = pd.to_numeric(frame["value"], errors="coerce")
        return frame.dropna(subset=["sensor", "value"]).reset_index(drop=True)

    def watermark(self) -> pd.Timestamp | None:
        c = self.config
        assert c.bucket is not None  # api: v2 requires it
        flux = (f"from(bucket: {_flux_string(c.bucket)})\n  |> range(start: 0)\n"
                f"  |> filter(fn: (r) => r._measurement == {_flux_string(c.measurement)}"
                f" and r._field == {_flux_string(c.field)})\n" + _site_filters(c) +
                "  |> last()\n  |> group()\n  |> max(column: \"_time\")\n")
        try:
            tables = self._client.query_api().query(flux)
        except Exception as exc:
            raise _wrap(exc, c.url) from exc
        times = [rec.get_time() for table in tables for rec in table.records]
        return pd.Timestamp(max(times)).tz_convert("UTC") if times else None

    def close(self) -> None:
        self._client.close()


class V2Writer:
    """Line-protocol writes through ``/api/v2/write`` (synchronous: returns when stored)."""

    def __init__(self, config: Any) -> None:
        self.config = config
        self._client = _client(config)

    def write(self, lines: list[str]) -> None:
        from influxdb_client.client.write_api import SYNCHRONOUS

        try:
            self._client.write_api(write_options=SYNCHRONOUS).write(
                bucket=self.config.bucket, org=self.config.org, record=lines,
                write_precision="ns")
        except Exception as exc:
            raise _wrap(exc, self.config.url) from exc

    def close(self) -> None:
        self._client.close()
