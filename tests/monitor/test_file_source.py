"""File source: long/wide, CSV/.gz/Parquet, roles from names or content, replay."""
from __future__ import annotations

import io
import time

import pandas as pd
import pytest

from connectors.base import ConnectorError
from connectors.file import FileSource, FileSourceConfig, read_readings

TIMES = pd.date_range("2019-03-04", periods=6, freq="5min")


def long_frame() -> pd.DataFrame:
    return pd.DataFrame({"timestamp": [t.strftime("%Y-%m-%d %H:%M:%S") for t in TIMES] * 2,
                         "sensor_id": ["n1"] * 6 + ["n2"] * 6,
                         "pressure_m": [float(i) for i in range(12)]})


def check(frame: pd.DataFrame) -> None:
    assert list(frame.columns) == ["time", "sensor", "value"]
    assert str(frame["time"].dt.tz) == "UTC"
    assert frame["time"].is_monotonic_increasing
    assert sorted(frame["sensor"].unique()) == ["n1", "n2"]
    n1 = frame[frame["sensor"] == "n1"]
    assert n1["value"].tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    assert n1["time"].iloc[0] == pd.Timestamp("2019-03-04T00:00:00Z")


@pytest.mark.parametrize("name", ["d.csv", "d.csv.gz", "d.parquet"])
def test_long_layout_roles_detected(tmp_path, name):
    path = tmp_path / name
    frame = long_frame()
    frame.to_parquet(path) if name.endswith("parquet") else frame.to_csv(path, index=False)
    check(read_readings(path))


def test_wide_layout_and_content_detected_time_column(tmp_path):
    wide = pd.DataFrame({"when": [t.isoformat() for t in TIMES],
                         "n1": [0.0, 1, 2, 3, 4, 5], "n2": [6.0, 7, 8, 9, 10, 11]})
    path = tmp_path / "w.csv"
    wide.rename(columns={"when": "stamp"}).to_csv(path, index=False)  # name gives no hint
    check(read_readings(path))


def test_named_columns_epoch_times_and_bad_rows(tmp_path):
    frame = pd.DataFrame({"t": [int(t.timestamp()) for t in TIMES] * 2,
                          "where": ["n1"] * 6 + ["n2"] * 6,
                          "a": range(12), "b": [str(float(i)) for i in range(12)]})
    frame.loc[3, "b"] = "oops"
    path = tmp_path / "e.csv"
    frame.to_csv(path, index=False)
    with pytest.raises(ConnectorError, match="time_col"):  # "t" holds numbers: not guessed
        read_readings(path)
    from collections import Counter
    rejected: Counter[str] = Counter()
    got = read_readings(path, time_col="t", sensor_col="where", value_col="b",
                        rejected=rejected)
    assert rejected["bad_value"] == 1 and len(got) == 11
    with pytest.raises(ConnectorError, match="'nope' is not in the file"):
        read_readings(path, time_col="nope")


def test_timezone_of_naive_times(tmp_path):
    path = tmp_path / "d.csv"
    long_frame().to_csv(path, index=False)
    got = read_readings(path, timezone="Europe/Paris")
    assert got["time"].iloc[0] == pd.Timestamp("2019-03-03T23:00:00Z")


def test_window_reads_and_replay_at_speed(tmp_path):
    path = tmp_path / "d.csv"
    long_frame().to_csv(path, index=False)
    source = FileSource(FileSourceConfig(path=path, speed=600.0, batch_size=1000))
    window = source.read_window(pd.Timestamp("2019-03-04T00:05Z"),
                                pd.Timestamp("2019-03-04T00:15Z"))
    assert len(window) == 4
    assert source.watermark() == pd.Timestamp("2019-03-04T00:25Z")
    got = []

    def deliver(batch):
        got.append((time.monotonic(), list(batch)))

    started = time.monotonic()
    source.start(deliver)
    while not source.finished() and time.monotonic() - started < 10:
        time.sleep(0.01)
    source.stop()
    # 25 min of data at 600x = 2.5 s; one batch per data timestamp, in time order
    assert 2.0 < got[-1][0] - started < 5.0
    assert len(got) == 6 and all(len(b) == 2 for _, b in got)
    times = [r.time for _, b in got for r in b]
    assert times == sorted(times)
    assert source.health()["accepted"] == 12


def test_a_few_unparsable_cells_are_counted_not_fatal(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """One "ERR" in the value column must not make the whole file unreadable."""
    from collections import Counter

    rows = ["time,sensor,value"]
    rows += [f"2026-01-01T{h:02d}:00:00Z,s{h % 3},{h}.5" for h in range(24)]
    rows += ["2026-01-01T05:00:00Z,s1,ERR", "yesterday-ish,s2,1.0"]
    path = tmp_path / "readings.csv"
    path.write_text("\n".join(rows) + "\n")
    rejected: Counter[str] = Counter()
    frame = read_readings(path, rejected=rejected)
    assert len(frame) == 24
    assert rejected["bad_value"] == 1 and rejected["bad_time"] == 1


SKAB_LIKE = ("datetime;Accelerometer1RMS;Current;Pressure;Volume Flow RateRMS\n"
             "2020-03-09 15:56:30;0.0276077;1.29048;0.054711;32.0362\n"
             "2020-03-09 15:56:31;0.0271656;1.28565;0.382638;32.9649\n"
             "2020-03-09 15:56:32;0.0275;1.3;0.38;31.5\n")


@pytest.mark.parametrize("gz", [False, True])
def test_a_semicolon_file_with_a_datetime_column_is_read_as_published(tmp_path, gz):
    """A published CSV whose separator is ';' (SKAB's): the separator is sniffed from the
    header, the 'datetime' column is the time, the rest are sensors (wide layout)."""
    import gzip

    path = tmp_path / ("skab.csv.gz" if gz else "skab.csv")
    if gz:
        with gzip.open(path, "wt", encoding="utf-8") as f:
            f.write(SKAB_LIKE)
    else:
        path.write_text(SKAB_LIKE)
    frame = read_readings(path)
    assert sorted(frame["sensor"].unique()) == ["Accelerometer1RMS", "Current", "Pressure",
                                                "Volume Flow RateRMS"]
    assert len(frame) == 12 and frame["value"].iloc[0] in (0.0276077, 1.29048, 0.054711,
                                                          32.0362)
    assert str(frame["time"].min()) == "2020-03-09 15:56:30+00:00"


def test_a_wrong_delimiter_names_the_fix(tmp_path):
    path = tmp_path / "skab.csv"
    path.write_text(SKAB_LIKE)
    with pytest.raises(ConnectorError, match=r"separator ','.*delimiter \(or --delimiter\)"):
        read_readings(path, delimiter=",")
    tabbed = tmp_path / "tabbed.csv"
    tabbed.write_text(SKAB_LIKE.replace(";", "\t"))
    assert len(read_readings(tabbed)) == 12
    assert len(FileSource(FileSourceConfig(path=path, delimiter=";")).frame()) == 12


def test_a_column_without_a_name_is_a_row_number_not_a_sensor(tmp_path, caplog):
    """A frame written with its index (``to_csv(index=True)``): the first column has an
    empty header and counts rows. It is left out with a warning, not read as a sensor
    that rises in every window; an unnamed column of times is still the time column."""
    frame = pd.read_csv(io.StringIO(SKAB_LIKE), sep=";")
    path = tmp_path / "indexed.csv"
    frame.to_csv(path, sep=";", index=True)
    with caplog.at_level("WARNING", logger="connectors.file"):
        read = read_readings(path)
    assert sorted(read["sensor"].unique()) == ["Accelerometer1RMS", "Current", "Pressure",
                                               "Volume Flow RateRMS"]
    assert "column(s) 1 have no name in the header" in caplog.text
    timed = tmp_path / "timed.csv"
    frame.set_index(pd.to_datetime(frame.pop("datetime")).rename(None)).to_csv(timed)
    assert len(read_readings(timed)) == 12


def test_decimal_commas_beside_semicolons_are_read_as_numbers(tmp_path):
    """A spreadsheet's European export: ';' between fields, ',' in numbers. Read as the
    same numbers, not refused as text columns (whose hint would send the user to
    sensor_col)."""
    path = tmp_path / "komma.csv"
    path.write_text(SKAB_LIKE.replace(".", ",").replace(
        "datetime", "Zeit"))
    frame = read_readings(path)
    same = read_readings(_written(tmp_path / "dots.csv", SKAB_LIKE))
    pd.testing.assert_frame_equal(frame, same)


def test_times_in_another_format_are_refused_with_a_sample_or_read_with_their_format(
        tmp_path):
    """Day-first dotted dates are not ISO 8601: nothing is guessed (09.03 is March 9th or
    September 3rd); the error names the column, a sample and time_format, and with the
    format the file reads as its ISO twin."""
    dotted = SKAB_LIKE.replace("2020-03-09", "09.03.2020")
    path = _written(tmp_path / "dotted.csv", dotted)
    with pytest.raises(ConnectorError, match=r"column 'datetime' could be read.*"
                                             r"'09\.03\.2020 15:56:30'.*time_format"):
        read_readings(path)
    frame = read_readings(path, time_format="%d.%m.%Y %H:%M:%S")
    pd.testing.assert_frame_equal(frame, read_readings(_written(tmp_path / "iso.csv",
                                                                SKAB_LIKE)))
    source = FileSource(FileSourceConfig(path=path, time_format="%d.%m.%Y %H:%M:%S"))
    assert str(source.first_time()) == "2020-03-09 15:56:30+00:00"


def _written(path, text: str):
    path.write_text(text)
    return path


def test_a_text_column_beside_the_sensors_is_left_out_of_a_wide_file(tmp_path, caplog):
    """A state column (``open``/``shut``) beside numeric sensors, one row a time: still a
    wide file, the text column left out with a warning naming it. A long file with two
    measurements per station (times repeat) is not taken for one: its error asks which
    column holds the values."""
    stated = SKAB_LIKE.replace("\n", ";open\n").replace(
        "Volume Flow RateRMS;open", "Volume Flow RateRMS;valve")
    with caplog.at_level("WARNING", logger="connectors.file"):
        frame = read_readings(_written(tmp_path / "stated.csv", stated))
    assert sorted(frame["sensor"].unique()) == ["Accelerometer1RMS", "Current", "Pressure",
                                                "Volume Flow RateRMS"]
    assert "column(s) 'valve' are not numbers: left out" in caplog.text
    stations = ("time,station,pressure,temperature\n"
                "2024-01-01T00:00:00Z,a,1.0,20.0\n2024-01-01T00:00:00Z,b,2.0,21.0\n"
                "2024-01-01T00:01:00Z,a,1.1,20.1\n2024-01-01T00:01:00Z,b,2.1,21.1\n")
    with pytest.raises(ConnectorError, match="which column holds the values"):
        read_readings(_written(tmp_path / "stations.csv", stations))


def test_a_spreadsheet_or_a_header_alone_is_refused_with_what_it_is(tmp_path):
    """Neither is sent to the separator or the column options, which would not help."""
    book = tmp_path / "readings.xlsx"
    book.write_bytes(b"PK\x03\x04 a zip archive")
    with pytest.raises(ConnectorError, match=r"spreadsheet \(\.xlsx\).*save it as CSV"):
        read_readings(book)
    header = _written(tmp_path / "header.csv", SKAB_LIKE.splitlines()[0] + "\n")
    with pytest.raises(ConnectorError, match=r"no rows of readings \(columns: datetime, "):
        read_readings(header)


def test_blank_cells_of_a_slower_sensor_are_no_readings_not_rejected_rows(tmp_path, caplog):
    """A wide file whose temperature comes every 10 s beside one-second sensors leaves
    nine cells in ten blank: no reading there, so no warning and no rejection counted (the
    agent's metrics copy the source's); an unparsable cell still is both."""
    times = pd.date_range("2020-03-09 16:00:00", periods=30, freq="1s")
    frame = pd.DataFrame({"datetime": times.strftime("%Y-%m-%d %H:%M:%S"),
                          "flow": [str(k) for k in range(30)],
                          "temperature": [20.0 if k % 10 == 0 else None for k in range(30)]})
    frame.loc[5, "flow"] = "ERR"
    path = tmp_path / "mixed.csv"
    frame.to_csv(path, sep=";", index=False)
    source = FileSource(FileSourceConfig(path=path))
    with caplog.at_level("INFO", logger="connectors.file"):
        read = source.frame()
    assert (read["sensor"] == "temperature").sum() == 3 and (read["sensor"] == "flow").sum() == 29
    assert source.health()["rejected"] == {"bad_time": 0, "bad_value": 1, "missing_sensor": 0}
    assert "27 blank value cell(s)" in caplog.text
    assert "skipped rows: {'bad_time': 0, 'bad_value': 1" in caplog.text


def test_a_date_column_and_a_clock_time_column_are_one_time(tmp_path):
    """A logger's export with ``date;time``: read as the file with one ``datetime``
    column; with day-first dates, time_format names the joined format."""
    iso = read_readings(_written(tmp_path / "iso.csv", SKAB_LIKE))
    split = SKAB_LIKE.replace("datetime;", "date;time;").replace(" 15:56:", ";15:56:")
    assert read_readings(_written(tmp_path / "split.csv", split)).equals(iso)
    dotted = split.replace("2020-03-09", "09.03.2020")
    frame = read_readings(_written(tmp_path / "dotted.csv", dotted),
                          time_format="%d.%m.%Y %H:%M:%S")
    assert frame.equals(iso)


def test_lines_above_the_header_are_skipped(tmp_path):
    """A logger's export that begins with its name, the site and a blank line, or with
    ``#`` comments: read as the file without them, its separator sniffed from the table
    (the first line has none)."""
    iso = read_readings(_written(tmp_path / "iso.csv", SKAB_LIKE))
    for k, preamble in enumerate(("# exported by logger X\n# site: pump 1\n",
                                  "Logger X export\nsite;pump 1\n\n")):
        path = _written(tmp_path / f"preamble{k}.csv", preamble + SKAB_LIKE)
        assert read_readings(path).equals(iso)
    trailing = SKAB_LIKE.replace("Volume Flow RateRMS\n", "Volume Flow RateRMS;\n")
    assert len(read_readings(_written(tmp_path / "trailing.csv", trailing))) == 12
    padded = SKAB_LIKE.replace(";", " ; ")  # a header padded for the eye: the same ids
    assert read_readings(_written(tmp_path / "padded.csv", padded)).equals(iso)


def test_a_column_that_is_not_a_number_is_named(tmp_path):
    path = tmp_path / "text.csv"
    path.write_text("time,state\n2024-01-01T00:00:00Z,open\n2024-01-01T00:01:00Z,shut\n")
    with pytest.raises(ConnectorError, match="not numbers: state"):
        read_readings(path, layout="wide")


def test_a_csv_value_is_the_float_an_mqtt_payload_gives(tmp_path):
    """One parse for a reading, whatever the source: a CSV's numbers are the floats that
    Python's float() (the MQTT payload's parse) gives, bit for bit, so an agent fed through
    MQTT and a backfill of the CSV compute from the same numbers."""
    import numpy as np

    rng = np.random.default_rng(0)
    texts = [f"{v:.{d}f}" for v, d in zip(rng.uniform(0, 100, 20_000),
                                          rng.integers(3, 17, 20_000), strict=True)]
    texts += ["51.844687499999996", "0.1", "2.675", "1e-320", "123456789.123456789"]
    path = tmp_path / "values.csv"
    path.write_text("time,sensor,value\n" + "".join(
        f"2024-01-01T00:00:{i % 60:02d}Z,s{i},{v}\n" for i, v in enumerate(texts)))
    frame = read_readings(path)
    got = dict(zip(frame["sensor"], frame["value"], strict=True))
    assert all(got[f"s{i}"] == float(v) for i, v in enumerate(texts))
