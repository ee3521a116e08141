"""Property-based tests of the file reader (CSV/CSV.gz, long or wide): any file either
reads into clean readings, with every dropped row counted under a reason, or fails with a
ConnectorError whose message says what to fix. Never another exception."""
from __future__ import annotations

import gzip
import math
import tempfile
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
from hypothesis import given
from hypothesis import strategies as st

from connectors.base import ConnectorError
from connectors.file import read_readings
from tests.fuzz.budget import count, fuzz_settings

REASONS = {"bad_time", "bad_value", "empty_value", "missing_sensor"}
TMP = Path(tempfile.mkdtemp(prefix="mmdwatch-fuzz-file-"))

cells = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers(-10**20, 10**20).map(str),
    st.sampled_from(["", "NaN", "inf", "-inf", "abc", "1e309", "2019-03-04 00:00:00",
                     "2019-03-04T00:05:00Z", "0001-01-01", "9999-12-31T23:59:59",
                     "1700000000", "1.7e12", "n105", "\"quoted, comma\"", "2019-13-45"]),
    st.text(st.characters(exclude_characters="\r\n\x00", codec="utf-8"), max_size=12),
)
header_names = st.sampled_from(["timestamp", "time", "sensor_id", "sensor", "value",
                                "pressure_m", "n1", "n2", "x", "date", "id", ""])


def _check_clean(frame: pd.DataFrame) -> None:
    assert list(frame.columns) == ["time", "sensor", "value"]
    if len(frame):
        assert str(frame["time"].dt.tz) == "UTC"
        assert frame["time"].notna().all()
        assert np.isfinite(frame["value"].to_numpy(dtype=float)).all()
        assert frame["time"].is_monotonic_increasing
        assert all(isinstance(s, str) for s in frame["sensor"])


def _write(text: str, gz: bool, i: int) -> Path:
    path = TMP / (f"f{i}.csv.gz" if gz else f"f{i}.csv")
    if gz:
        with gzip.open(path, "wt", encoding="utf-8") as fh:
            fh.write(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


@fuzz_settings(400)
@given(st.lists(header_names, min_size=1, max_size=5),
       st.lists(st.lists(cells, min_size=0, max_size=6), max_size=12),
       st.booleans())
def test_arbitrary_csv_reads_clean_or_fails_clearly(header: list, rows: list, gz: bool) -> None:
    text = ",".join(header) + "\n" + "\n".join(",".join(r) for r in rows) + "\n"
    path = _write(text, gz, 0)
    rejected: Counter[str] = Counter()
    try:
        frame = read_readings(path, rejected=rejected)
    except ConnectorError as exc:
        assert str(exc).strip(), "a rejection must say why"
    else:
        _check_clean(frame)
        assert set(rejected) <= REASONS
    count("file reader")


@fuzz_settings(400)
@given(st.lists(st.tuples(
    st.one_of(st.datetimes(min_value=pd.Timestamp("1700-01-01").to_pydatetime(),
                           max_value=pd.Timestamp("2250-01-01").to_pydatetime())
              .map(lambda d: d.isoformat(sep=" ")),
              st.floats(-1e13, 1e13).map(repr), cells),
    st.one_of(st.sampled_from(["n105", "n108", "s 1", "NaN", ""]), cells),
    st.one_of(st.floats(allow_nan=True, allow_infinity=True).map(repr), cells),
), min_size=1, max_size=15))
def test_long_file_every_row_kept_or_counted(rows: list) -> None:
    """Named columns: rows out + rows counted as rejected = rows in."""
    import csv
    import io

    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(["timestamp", "sensor_id", "pressure_m"])
    writer.writerows(rows)
    path = _write(buf.getvalue(), False, 1)
    rejected: Counter[str] = Counter()
    try:
        frame = read_readings(path, time_col="timestamp", sensor_col="sensor_id",
                              value_col="pressure_m", layout="long", rejected=rejected)
    except ConnectorError as exc:
        assert str(exc).strip()
    else:
        _check_clean(frame)
        assert set(rejected) <= REASONS
        assert len(frame) + sum(rejected.values()) == len(rows), (len(frame), rejected)
    count("file reader")


@fuzz_settings(200)
@given(st.integers(1, 6), st.lists(st.tuples(
    st.datetimes(min_value=pd.Timestamp("2000-01-01").to_pydatetime(),
                 max_value=pd.Timestamp("2030-01-01").to_pydatetime()),
    st.lists(st.floats(allow_nan=True, allow_infinity=True), min_size=6, max_size=6)),
    min_size=1, max_size=20))
def test_wide_file_values_kept_or_counted(n_sensors: int, rows: list) -> None:
    frame_in = pd.DataFrame(
        [[t.isoformat()] + vals[:n_sensors] for t, vals in rows],
        columns=["time"] + [f"n{i}" for i in range(n_sensors)],
    )
    path = TMP / "wide.csv"
    frame_in.to_csv(path, index=False)
    rejected: Counter[str] = Counter()
    frame = read_readings(path, layout="wide", rejected=rejected)
    _check_clean(frame)
    finite = sum(math.isfinite(v) for _, vals in rows for v in vals[:n_sensors])
    assert len(frame) == finite
    assert len(frame) + sum(rejected.values()) == len(rows) * n_sensors
    count("file reader")


def test_missing_and_unreadable_files_fail_clearly(tmp_path: Path) -> None:
    for path, text in [(tmp_path / "absent.csv", None), (tmp_path / "bin.parquet", b"\x00junk")]:
        if text is not None:
            path.write_bytes(text)
        try:
            read_readings(path)
        except ConnectorError as exc:
            assert str(path) in str(exc)
        else:
            raise AssertionError(f"{path} should not read")
