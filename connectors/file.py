"""File source: CSV (optionally .gz) or Parquet, long or wide, read in bulk or replayed.

* Long layout: a time column, a sensor column and a value column
  (e.g. ``timestamp,sensor_id,pressure_m``).
* Wide layout: a time column and one numeric column per sensor.

Column roles are detected from names and content unless named in the config. Naive
timestamps are taken in ``timezone`` (UTC by default); numeric times are epoch seconds.

As a :class:`WindowSource` it answers window queries from the whole file held in memory;
as a :class:`StreamSource` it replays the rows in time order at ``speed`` times real time
(``speed: null`` = as fast as the agent commits them).
"""
from __future__ import annotations

import io
import logging
import re
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from connectors.base import ConnectorError, DeliverFn, Reading, StreamSource, WindowSource

log = logging.getLogger(__name__)
#: pandas' name for a column with an empty header: a row number written beside the data
#: (``DataFrame.to_csv`` writes its index so), not a sensor
UNNAMED_COLUMN = re.compile(r"Unnamed: \d+")

_TIME_NAMES = ("time", "timestamp", "datetime", "date", "ts", "_time", "epoch")
_VALUE_NAMES = ("value", "reading", "val", "measurement", "_value")
_SENSOR_NAMES = ("sensor", "sensor_id", "sensorid", "id", "node", "tag", "name", "series")


class FileSourceConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal["file"] = "file"
    path: Path = Field(description="CSV, CSV.gz or Parquet file")
    format: Literal["auto", "csv", "parquet"] = "auto"
    layout: Literal["auto", "long", "wide"] = "auto"
    time_col: str | None = None
    sensor_col: str | None = None
    value_col: str | None = None
    delimiter: str | None = Field(
        None, min_length=1, max_length=1,
        description="CSV field separator; null = sniffed from the first rows (, ; tab |)")
    timezone: str = Field("UTC", description="zone of naive timestamps")
    time_format: str | None = Field(
        None, min_length=1,
        description="strftime format of the times (e.g. '%d.%m.%Y %H:%M:%S'); null = ISO 8601 "
                    "or epoch seconds")
    speed: float | None = Field(None, gt=0, description="replay speed factor; null = fastest")
    batch_size: int = Field(5000, ge=1, description="readings per delivered batch")


#: the count of blank value cells (no reading, not a bad one) among ``rejected``'s keys
EMPTY_VALUE = "empty_value"
#: suffixes of spreadsheet files, which are not read (their bytes would be taken for text)
SPREADSHEETS = (".xlsx", ".xlsm", ".xls", ".ods")
#: separators a CSV is sniffed for (sniff_delimiter), the first one wins a tie
DELIMITERS: tuple[str, ...] = (",", ";", "\t", "|")


#: lines of a CSV read to find its separator and where its table starts
SNIFF_LINES = 50


def _first_lines(path: Path, n: int = SNIFF_LINES) -> list[str]:
    """The first ``n`` lines of a CSV, plain or compressed."""
    from pandas.io.common import get_handle

    lines: list[str] = []
    with get_handle(path, "r", compression="infer", encoding="utf-8",
                    errors="replace") as handle:
        stream = handle.handle
        for _ in range(n):
            line = stream.readline() if isinstance(stream, io.TextIOBase) else str(
                stream.readline())
            if not line:
                break
            lines.append(line)
    return lines


def _table_width(lines: list[str], sep: str) -> int:
    """How many ``sep`` the table's rows hold: the most common count over the later half
    of the non-blank ``lines`` (a preamble above the header holds fewer)."""
    rows = [line for line in lines if line.strip()]
    if not rows:
        return 0
    counts = Counter(line.count(sep) for line in rows[len(rows) // 2:])
    return max(counts, key=lambda c: (counts[c], c))


def sniff_delimiter(lines: list[str]) -> str:
    """The field separator of a CSV from its first ``lines`` (:func:`_first_lines`): of
    :data:`DELIMITERS`, one that the table's rows hold, with the fewest lines above the
    header that it implies, then the most per row (``,`` when none is held). So a
    preamble above the header does not decide, nor do decimal commas beside a header of
    semicolons."""
    widths = {d: _table_width(lines, d) for d in DELIMITERS}
    held = [d for d in DELIMITERS if widths[d]]
    if not held:
        return ","
    return min(held, key=lambda d: (_header_index(lines, d, widths[d]), -widths[d],
                                    DELIMITERS.index(d)))


def _header_index(lines: list[str], sep: str, width: int) -> int:
    """The first line that holds as many ``sep`` as the table's rows (or more)."""
    return next((i for i, line in enumerate(lines) if line.count(sep) >= width), 0)


def preamble_lines(lines: list[str], sep: str) -> int:
    """How many of a CSV's first ``lines`` stand above its header: a logger's export
    often begins with its name, the site or ``#`` comments. The header is the first line
    that holds as many ``sep`` as the table's rows (or more); 0 for a file whose first
    line does."""
    width = _table_width(lines, sep)
    return 0 if width == 0 else _header_index(lines, sep, width)


#: a number written with a decimal comma: ``0,0547``, ``-12,5``, ``3,2e-05``
DECIMAL_COMMA = re.compile(r"\s*[-+]?(\d+,\d*|,\d+)([eE][-+]?\d+)?\s*")


def decimal_commas(raw: pd.DataFrame, sep: str) -> bool:
    """Whether a CSV read with separator ``sep`` (``raw``: its first rows) writes its
    numbers with decimal commas (a spreadsheet's export in much of Europe: ``;`` between
    fields, ``,`` in numbers): some text column nine tenths of whose values look like
    ``0,0547``. Never with the separator ``,``, where such a cell would have been split."""
    if sep == ",":
        return False
    for column in raw.columns:
        values = raw[column].dropna()
        if values.empty or pd.api.types.is_numeric_dtype(values):
            continue
        text = values.astype(str)
        if text.map(lambda v: DECIMAL_COMMA.fullmatch(v) is not None).mean() >= 0.9:
            return True
    return False


#: a clock time without a date: ``16:16:30``, ``9:05``, ``16:16:30.250``
CLOCK_TIME = re.compile(r"\d{1,2}:\d{2}(:\d{2}([.,]\d+)?)?")


def joined_date_and_time(raw: pd.DataFrame, path: Path) -> pd.DataFrame:
    """A logger's export with the date and the clock time in two columns (``date;time``):
    one ``datetime`` column of both, in their place. Without it the clock times were read
    alone, and no time parsed. Only where the columns are named ``date`` and ``time``
    and nine tenths of the first 200 times are clock times."""
    named = {c.lower(): c for c in raw.columns}
    date, clock = named.get("date"), named.get("time")
    if date is None or clock is None or "datetime" in named:
        return raw
    sample = raw[clock].head(200).dropna().astype(str).str.strip()
    if sample.empty or sample.map(lambda v: CLOCK_TIME.fullmatch(v) is not None).mean() < 0.9:
        return raw
    log.info("%s: columns %r and %r joined into one time", path, date, clock)
    joined = raw[date].astype(str).str.strip() + " " + raw[clock].astype(str).str.strip()
    out = raw.drop(columns=[date, clock])
    out.insert(0, "datetime", joined.where(raw[date].notna() & raw[clock].notna()))
    return out


def _pick(columns: list[str], names: tuple[str, ...]) -> str | None:
    lowered = {c.lower(): c for c in columns}
    for name in names:
        if name in lowered:
            return lowered[name]
    return None


def detect_roles(frame: pd.DataFrame, *, time_col: str | None = None,
                 sensor_col: str | None = None, value_col: str | None = None,
                 layout: str = "auto") -> tuple[str, str, str | None, str | None]:
    """Return ``(layout, time_col, sensor_col, value_col)``; sensor/value are None for wide."""
    columns = [str(c) for c in frame.columns]
    for given in (time_col, sensor_col, value_col):
        if given is not None and given not in columns:
            raise ConnectorError(f"column {given!r} is not in the file (columns: "
                                 f"{', '.join(columns)}); fix the column name")
    if time_col is None:
        time_col = _pick(columns, _TIME_NAMES) or next(
            (c for c in columns if "time" in c.lower() or "date" in c.lower()), None)
    if time_col is None:  # content: the first column most of whose values parse as times
        for c in columns:
            sample = frame[c].dropna().head(50)
            if sample.dtype == object or pd.api.types.is_string_dtype(sample):
                # utc=True: mixed offsets in one column must not raise here
                parsed = pd.to_datetime(sample, errors="coerce", format="mixed", utc=True)
                if len(sample) and parsed.notna().mean() > 0.9:
                    time_col = c
                    break
    if time_col is None:
        raise ConnectorError(f"no time column found among {', '.join(columns)}; name it with "
                             "time_col (or --time-col)")
    rest = [c for c in columns if c != time_col]
    numeric = [c for c in rest if _mostly_numeric(frame[c])]
    textual = [c for c in rest if c not in numeric]
    if layout == "auto":
        layout = "long" if (sensor_col or value_col or textual) else "wide"
        if layout == "long" and not (sensor_col or value_col) and _text_beside_sensors(
                frame[time_col], textual, numeric):
            layout = "wide"  # its text columns are left out, with a warning (read_readings)
    if layout == "wide":
        if not numeric:
            raise ConnectorError(
                f"wide layout needs numeric sensor columns besides {time_col!r}; these "
                f"columns are not numbers: {', '.join(textual[:10])}; check the file (its "
                "separator: delimiter, or --delimiter) or set layout: long")
        return "wide", time_col, None, None
    if sensor_col is None:
        sensor_col = _pick(textual, _SENSOR_NAMES) or (textual[0] if len(textual) == 1 else None)
        if sensor_col is None:
            sensor_col = _pick(rest, _SENSOR_NAMES)
    if sensor_col is None:
        raise ConnectorError(f"cannot tell which column holds sensor ids among {', '.join(rest)};"
                             " name it with sensor_col (or --sensor-col)")
    if value_col is None:
        candidates = [c for c in numeric if c != sensor_col]
        value_col = _pick(candidates, _VALUE_NAMES) or (
            candidates[0] if len(candidates) == 1 else None)
    if value_col is None:
        raise ConnectorError(f"cannot tell which column holds the values among "
                             f"{', '.join(c for c in rest if c != sensor_col)}; name it with "
                             "value_col (or --value-col)")
    return "long", time_col, sensor_col, value_col


def _text_beside_sensors(times: pd.Series, textual: list[str], numeric: list[str]) -> bool:
    """Whether a file with text columns is still wide: each row has a time of its own
    (a long file repeats a time for each sensor), none of its text columns is named as a
    sensor column, and it has several numeric columns none of which is named as a value
    column. A state or note column beside the sensors (``valve: open``) made such a file
    long, and the error then asked for a value column."""
    first = times.head(1000).dropna()
    return (bool(textual) and not first.empty and first.is_unique
            and _pick(textual, _SENSOR_NAMES) is None and len(numeric) >= 2
            and _pick(numeric, _VALUE_NAMES) is None)


def _mostly_numeric(column: pd.Series) -> bool:
    """A value column with a few unparsable cells ("n/a", "ERR") is still a value column:
    those rows are dropped and counted later instead of making the whole file unreadable."""
    if pd.api.types.is_numeric_dtype(column):
        return True
    present = column.dropna()
    if present.empty or pd.api.types.is_bool_dtype(present):
        return False
    # each distinct text parsed once, weighted by its count: a long file's sensor-id
    # column holds a few dozen ids in 10^5-10^6 rows (0.4 s parsed row by row on d1)
    counts = present.value_counts(sort=False)
    if len(counts) > len(present) // 2:  # mostly distinct texts: parse the rows as they are
        return bool(pd.to_numeric(present, errors="coerce").notna().mean() >= 0.9)
    parsed = pd.to_numeric(pd.Series(counts.index, dtype=object), errors="coerce")
    return bool(counts.to_numpy()[parsed.notna().to_numpy()].sum() >= 0.9 * len(present))


def _parse_times(column: pd.Series, timezone: str, time_format: str | None = None
                 ) -> pd.Series:
    if time_format is not None:
        parsed = pd.to_datetime(column.astype(str), errors="coerce", format=time_format,
                                utc=False)
        if parsed.dt.tz is None:
            return parsed.dt.tz_localize(timezone, ambiguous="NaT",
                                         nonexistent="NaT").dt.tz_convert("UTC")
        return parsed.dt.tz_convert("UTC")
    if pd.api.types.is_numeric_dtype(column):
        seconds = pd.to_numeric(column, errors="coerce").astype(float)
        if seconds.abs().median() > 1e11:  # epoch milliseconds
            seconds = seconds / 1000.0
        return pd.to_datetime(seconds, unit="s", utc=True, errors="coerce")
    if isinstance(column.dtype, pd.DatetimeTZDtype):
        return column.dt.tz_convert("UTC")
    if pd.api.types.is_datetime64_dtype(column):
        return column.dt.tz_localize(timezone).dt.tz_convert("UTC")
    text = column.astype(str)
    try:
        parsed = pd.to_datetime(text, errors="coerce", format="ISO8601")
    except (ValueError, TypeError):  # mixed offsets
        parsed = pd.to_datetime(text, errors="coerce", utc=True, format="mixed")
    if parsed.dt.tz is None:
        return parsed.dt.tz_localize(timezone, ambiguous="NaT",
                                     nonexistent="NaT").dt.tz_convert("UTC")
    return parsed.dt.tz_convert("UTC")


def read_readings(path: Path, *, format: str = "auto", layout: str = "auto",
                  time_col: str | None = None, sensor_col: str | None = None,
                  value_col: str | None = None, timezone: str = "UTC",
                  rejected: Counter[str] | None = None,
                  delimiter: str | None = None,
                  time_format: str | None = None) -> pd.DataFrame:
    """Read a file into a long frame ``time`` (UTC), ``sensor`` (str), ``value`` (float),
    sorted by time. Rows with unparsable times or values are dropped and counted; a file
    none of whose times parse is refused (:class:`ConnectorError` with a sample and the
    fix). A CSV's separator is ``delimiter``, else sniffed from its first rows
    (:func:`sniff_delimiter`); lines above its header are skipped
    (:func:`preamble_lines`); numbers written with decimal commas (``0,0547`` beside the
    separator ``;``) are read as such (:func:`decimal_commas`); ``date`` and ``time``
    columns are joined (:func:`joined_date_and_time`). ``time_format``: the times'
    strftime format, where they are not ISO 8601."""
    path = Path(path)
    if not path.exists():
        raise ConnectorError(f"data file {path} does not exist; check the path")
    if path.suffix.lower() in SPREADSHEETS:
        raise ConnectorError(f"{path} is a spreadsheet ({path.suffix}), which is not read: "
                             "save it as CSV (or Parquet) and give that file")
    fmt = format
    if fmt == "auto":
        fmt = "parquet" if path.suffix.lower() in (".parquet", ".pq") else "csv"
    sep = None
    try:
        if fmt == "parquet":
            raw = pd.read_parquet(path)
        else:
            # the separator, the lines above the header and the decimal mark, from the
            # first lines: the file itself is read once
            lines = _first_lines(path)
            sep = delimiter or sniff_delimiter(lines)
            skip = preamble_lines(lines, sep)
            if skip:
                log.info("%s: %d line(s) above the header skipped", path, skip)
            decimal = "," if sep != "," and decimal_commas(
                pd.read_csv(io.StringIO("".join(lines[skip:])), sep=sep), sep) else "."
            if decimal == ",":
                log.info("%s: numbers written with decimal commas (separator %r): read so",
                         path, sep)
            # pandas' converter parses each number as Python's float() does (correctly
            # rounded), the parse of an MQTT payload's value, so a CSV and its readings
            # replayed through MQTT give the agent and a backfill the same bits
            # (tests/monitor/test_file_source.py checks it)
            raw = pd.read_csv(path, sep=sep, skiprows=skip, decimal=decimal)
    except Exception as exc:  # noqa: BLE001 - pandas raises many types for unreadable files
        raise ConnectorError(f"cannot read {path} as {fmt}: {exc}; check the file and "
                             "format") from None
    if sep is not None and raw.shape[1] == 1:
        raise ConnectorError(
            f"{path}: one column {str(raw.columns[0])[:80]!r} read with the separator "
            f"{sep!r}; name the file's separator with delimiter (or --delimiter), e.g. ';'")
    if raw.empty:
        raise ConnectorError(f"{path} has no rows of readings (columns: "
                             f"{', '.join(map(str, raw.columns[:10]))}); check the file")
    if isinstance(raw.index, pd.DatetimeIndex):
        raw = raw.reset_index()
    # a header padded for the eye (" Pressure ; Current ") names the same sensors
    raw.columns = [str(c).strip() or f"Unnamed: {i}" for i, c in enumerate(raw.columns)]
    if time_col is None:
        raw = joined_date_and_time(raw, path)
    kind, tcol, scol, vcol = detect_roles(raw, time_col=time_col, sensor_col=sensor_col,
                                          value_col=value_col, layout=layout)
    if kind == "wide":
        unnamed = [c for c in raw.columns if c != tcol and UNNAMED_COLUMN.fullmatch(c)]
        if unnamed:
            # a counter read as a sensor rises in every window and fires on nothing
            log.warning("%s: column(s) %s have no name in the header: left out (row numbers "
                        "written beside the data, or a separator at the end of the header); "
                        "give a column a name to read it as a sensor", path,
                        ", ".join(str(raw.columns.get_loc(c) + 1) for c in unnamed))
            raw = raw.drop(columns=unnamed)
        text = [c for c in raw.columns if c != tcol and not _mostly_numeric(raw[c])]
        if text:
            log.warning("%s: column(s) %s are not numbers: left out (a wide file's sensors "
                        "are its numeric columns)", path, ", ".join(map(repr, text[:10])))
            raw = raw.drop(columns=text)
        # Sensor columns may be called anything, "value" and "sensor" included: melt
        # into names no column can have, then rename.
        long = raw.rename(columns={tcol: "\x00time"}).melt(
            id_vars=["\x00time"], var_name="\x00sensor", value_name="\x00value")
        long.columns = ["time", "sensor", "value"]
    else:
        long = raw[[tcol, scol, vcol]].rename(columns={tcol: "time", scol: "sensor",
                                                       vcol: "value"})
    times_read = long["time"]
    long["time"] = _parse_times(times_read, timezone, time_format)
    empty = long["value"].isna().to_numpy()  # a blank cell (or NaN): no reading there
    long["value"] = pd.to_numeric(long["value"], errors="coerce")
    bad_time = long["time"].isna()
    if len(long) and bad_time[times_read.notna()].all():
        sample = str(times_read.dropna().iloc[0]) if times_read.notna().any() else ""
        how = (f"do not match time_format {time_format!r}" if time_format is not None
               else "are not ISO 8601 times or epoch seconds")
        raise ConnectorError(
            f"{path}: none of the times in column {tcol!r} could be read: they {how} (the "
            f"first is {sample[:40]!r}); write them as ISO 8601 (2020-03-09 16:16:30) or "
            "name their format with time_format (or --time-format), e.g. '%d.%m.%Y %H:%M:%S'")
    bad_value = ~bad_time & ~np.isfinite(long["value"].to_numpy(dtype=float, na_value=np.nan))
    bad_sensor = long["sensor"].isna()
    if rejected is not None:
        rejected["bad_time"] += int(bad_time.sum())
        # a wide file's sensors of another cadence leave most of their cells blank
        rejected[EMPTY_VALUE] += int((bad_value & empty).sum())
        rejected["bad_value"] += int((bad_value & ~empty).sum())
        rejected["missing_sensor"] += int((bad_sensor & ~bad_time & ~bad_value).sum())
    long = long[~(bad_time | bad_value | bad_sensor)].copy()
    long["sensor"] = long["sensor"].astype(str)
    long["value"] = long["value"].astype(float)
    return long.sort_values("time", kind="stable").reset_index(drop=True)


class FileSource(StreamSource, WindowSource):
    """Readings from one file, read once and kept in memory."""

    type: ClassVar[str] = "file"
    Config: ClassVar[type[BaseModel]] = FileSourceConfig

    def __init__(self, config: FileSourceConfig) -> None:
        self.config = config
        self._frame: pd.DataFrame | None = None
        self._lock = threading.Lock()
        self._rejected: Counter[str] = Counter()
        self._accepted = 0
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._finished = threading.Event()

    # -- loading ------------------------------------------------------------------------------
    def frame(self) -> pd.DataFrame:
        """The whole file as a long frame (loaded on first use)."""
        with self._lock:
            if self._frame is None:
                c = self.config
                self._frame = read_readings(
                    c.path, format=c.format, layout=c.layout, time_col=c.time_col,
                    sensor_col=c.sensor_col, value_col=c.value_col, timezone=c.timezone,
                    rejected=self._rejected, delimiter=c.delimiter,
                    time_format=c.time_format)
                blank = self._rejected.pop(EMPTY_VALUE, 0)
                if blank:  # not a fault of the file: no warning, not counted as rejected
                    log.info("%s: %d blank value cell(s): no reading there", c.path, blank)
                if self._rejected.total():
                    log.warning("%s: skipped rows: %s", c.path, dict(self._rejected))
            return self._frame

    # -- WindowSource -------------------------------------------------------------------------
    def read_window(self, start: pd.Timestamp, end: pd.Timestamp, *,
                    resample: str | None = None, aggregate: str = "mean") -> pd.DataFrame:
        frame = self.frame()
        times = frame["time"]
        lo = times.searchsorted(pd.Timestamp(start), side="left")
        hi = times.searchsorted(pd.Timestamp(end), side="left")
        return frame.iloc[lo:hi].reset_index(drop=True)

    def watermark(self) -> pd.Timestamp | None:
        frame = self.frame()
        return None if frame.empty else frame["time"].iloc[-1]

    def first_time(self) -> pd.Timestamp | None:
        """The oldest reading's time: where an agent fed by this file starts (the store it
        replays into), asked by ``backfill`` to replay the agent's decisions."""
        frame = self.frame()
        return None if frame.empty else frame["time"].iloc[0]

    # -- StreamSource -------------------------------------------------------------------------
    def start(self, deliver: DeliverFn) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._replay, args=(deliver,),
                                        name="file-replay", daemon=True)
        self._thread.start()

    def _replay(self, deliver: DeliverFn) -> None:
        try:
            frame = self.frame()
        except ConnectorError as exc:
            log.error("file source: %s", exc)
            self._finished.set()
            return
        epoch = pd.Timestamp(0, tz="UTC")
        seconds = ((frame["time"] - epoch) / pd.Timedelta(seconds=1)).to_numpy(dtype=float)
        sensors = frame["sensor"].to_numpy()
        values = frame["value"].to_numpy()
        speed = self.config.speed
        size = self.config.batch_size
        wall0 = time.monotonic()
        t0 = seconds[0] if len(seconds) else 0.0
        i = 0
        n = len(seconds)
        while i < n and not self._stop.is_set():
            j = min(i + size, n)
            if speed is not None:
                # never put readings of a later data time in a batch before its due moment
                j = i + int(np.searchsorted(seconds[i:j], seconds[i], side="right")) \
                    if seconds[j - 1] != seconds[i] else j
                due = wall0 + (seconds[i] - t0) / speed
                delay = due - time.monotonic()
                if delay > 0 and self._stop.wait(delay):
                    break
            batch = [Reading(str(s), float(t), float(v))
                     for s, t, v in zip(sensors[i:j], seconds[i:j], values[i:j], strict=True)]
            while not self._stop.is_set():
                try:
                    deliver(batch)
                    break
                except Exception as exc:  # noqa: BLE001 - store failed: keep the batch, retry
                    log.error("file source: delivering %d readings failed (%s); retrying in 1 s",
                              len(batch), exc)
                    self._stop.wait(1.0)
            else:
                break
            self._accepted += len(batch)
            i = j
        if i >= n:
            self._finished.set()
            log.info("file source: replayed %d readings from %s", n, self.config.path)

    def finished(self) -> bool:
        return self._finished.is_set()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=10)
        self._thread = None

    def health(self) -> dict[str, Any]:
        return {"connected": True, "accepted": self._accepted,
                "rejected": dict(self._rejected), "finished": self.finished()}

    def close(self) -> None:
        self.stop()
