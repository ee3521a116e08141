"""InfluxDB ``api: v1`` reader: one InfluxQL query per window over the v1 HTTP API
(:mod:`connectors.influxdb.http`), for all sensors at once.

With ``resample`` the server computes the bins (``GROUP BY time(1h, offset), sensor``,
bins aligned to the window start), so a week of 10,000 sensors at 5-minute sampling comes
back as 1.7 M hourly means instead of 20 M raw points. Without it, raw points.
"""
from __future__ import annotations

import logging
from typing import Any

import numpy as np
import pandas as pd

from connectors.base import BIN_COUNT, BIN_SD
from connectors.influxdb.config import AGGREGATES, InfluxReader, InfluxSourceConfig, bin_grid
from connectors.influxdb.http import InfluxHttp, InfluxQueryError, _quote_ident
from connectors.timeutil import to_utc

log = logging.getLogger(__name__)


def influx_time(ts: pd.Timestamp) -> str:
    """RFC 3339 literal for InfluxQL (naive = UTC)."""
    return "'" + to_utc(ts).strftime("%Y-%m-%dT%H:%M:%S.%fZ") + "'"


def window_query(config: InfluxSourceConfig, measurement_ref: str, start: pd.Timestamp,
                 end: pd.Timestamp, resample: str | None, aggregate: str) -> str:
    """The InfluxQL for one window."""
    field, tag = _quote_ident(config.field), _quote_ident(config.sensor_tag)
    where = f"time >= {influx_time(start)} AND time < {influx_time(end)}" + \
        "".join(f" AND {f}" for f in tag_filters(config))
    if resample is None:
        return f"SELECT {field} FROM {measurement_ref} WHERE {where} GROUP BY {tag}"
    try:
        fn = AGGREGATES[aggregate]
    except KeyError:
        raise InfluxQueryError(f"aggregate {aggregate!r} has no InfluxQL equivalent; use one "
                               f"of {', '.join(AGGREGATES)}") from None
    step, offset = bin_grid(start, resample)
    if step <= 0:
        raise InfluxQueryError(f"resample {resample!r} must be a positive duration like '1h'")
    # the standard deviation and count of each bin's points beside its aggregate: the
    # spread channels of the calibrated rule need them (docs/influxdb.md)
    return (f"SELECT {fn}({field}) AS \"value\", stddev({field}) AS \"{BIN_SD}\", "
            f"count({field}) AS \"{BIN_COUNT}\" FROM {measurement_ref} WHERE {where} "
            f"GROUP BY time({step}s, {offset}s), {tag} fill(none)")


def _quote_string(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def tag_filters(config: InfluxSourceConfig) -> list[str]:
    """InfluxQL conditions narrowing the points to one site (``site_tag = site``) and to
    the listed ``sensors``."""
    out = []
    if config.site_tag is not None and config.site is not None:
        out.append(f"{_quote_ident(config.site_tag)} = {_quote_string(config.site)}")
    if config.sensors:
        tag = _quote_ident(config.sensor_tag)
        out.append("(" + " OR ".join(f"{tag} = {_quote_string(s)}" for s in config.sensors)
                   + ")")
    return out


def _numbers(rows: np.ndarray, k: int) -> np.ndarray:
    """Column ``k`` of a series' rows as floats (NaN where not a number)."""
    return pd.to_numeric(pd.Series(rows[:, k]), errors="coerce").to_numpy(dtype=float)


def series_to_frame(series: list[dict[str, Any]], sensor_tag: str) -> pd.DataFrame:
    """InfluxDB JSON series (epoch=ms) -> long frame ``time, sensor, value``; binned by
    the server (:func:`window_query` with ``resample``), also each bin's standard deviation
    and count of points (:data:`connectors.base.BIN_SD`, ``BIN_COUNT``)."""
    times: list[np.ndarray] = []
    values: list[np.ndarray] = []
    sensors: list[np.ndarray] = []
    extra: dict[str, list[np.ndarray]] = {BIN_SD: [], BIN_COUNT: []}
    binned = bool(series) and all(
        set(extra) <= set(s.get("columns") or []) for s in series if s.get("values"))
    for s in series:
        rows = s.get("values") or []
        if not rows:
            continue
        sensor = (s.get("tags") or {}).get(sensor_tag, "")
        if not sensor:
            raise InfluxQueryError(
                f"points of measurement {s.get('name')!r} carry no tag {sensor_tag!r}; set "
                "sensor_tag to the tag that holds the sensor id (SHOW TAG KEYS lists them)")
        arr = np.asarray(rows, dtype=object)
        t = arr[:, 0].astype(np.int64)
        columns = list(s.get("columns") or [])
        times.append(t)
        values.append(_numbers(arr, columns.index("value") if binned else 1))
        sensors.append(np.full(len(t), sensor, dtype=object))
        if binned:
            for name, parts in extra.items():
                parts.append(_numbers(arr, columns.index(name)))
    if not times:
        return pd.DataFrame({"time": pd.Series([], dtype="datetime64[ns, UTC]"),
                             "sensor": pd.Series([], dtype=object),
                             "value": pd.Series([], dtype=float)})
    frame = pd.DataFrame({
        "time": pd.to_datetime(np.concatenate(times), unit="ms", utc=True),
        "sensor": np.concatenate(sensors),
        "value": np.concatenate(values),
        **({name: np.concatenate(parts) for name, parts in extra.items()} if binned else {}),
    })
    return frame[np.isfinite(frame["value"].to_numpy())].reset_index(drop=True)


class InfluxQLSource(InfluxReader):
    """Reads windows straight from InfluxDB 1.x (or a 2.x/3.x v1 compatibility API)."""

    def __init__(self, config: InfluxSourceConfig | dict[str, Any]) -> None:
        super().__init__(config)
        self._http = InfluxHttp(self.config)

    def read_window(self, start: pd.Timestamp, end: pd.Timestamp, *,
                    resample: str | None = None, aggregate: str = "mean") -> pd.DataFrame:
        q = window_query(self.config, self._http.measurement_ref(self.config.measurement),
                         start, end, resample, aggregate)
        frame = series_to_frame(self._http.query(q), self.config.sensor_tag)
        log.debug("InfluxDB window [%s, %s): %d rows", start, end, len(frame))
        return frame

    def watermark(self) -> pd.Timestamp | None:
        ref = self._http.measurement_ref(self.config.measurement)
        where = " AND ".join(tag_filters(self.config))
        series = self._http.query(f"SELECT last({_quote_ident(self.config.field)}) FROM {ref}"
                                  + (f" WHERE {where}" if where else ""))
        if not series or not series[0].get("values"):
            return None
        return pd.Timestamp(int(series[0]["values"][0][0]), unit="ms", tz="UTC")

    def close(self) -> None:
        self._http.close()
