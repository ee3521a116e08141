"""bench.skab's scoring, the leaderboard's way: a detection scores for a change point at
0 to 60 s after it, both ends included (SKAB's ``extract_cp_confusion_matrix``); any
other detection from the 400th row on is a false positive; a firing run counts once. A
recording of normal operation has no change point, and is reported apart. Scored with
SKAB's own conversion too (``abs(prediction.diff())``: turning ok is a detection)."""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from bench.skab import (
    OPTIONS,
    SCORED_FROM_ROW,
    _write_grids,
    _write_markdown,
    find_files,
    grid_counts,
    normal_pieces,
    normal_recording,
    score,
    scored_hours,
    strip_labels,
)

T0 = pd.Timestamp("2020-03-09T12:00:00")


def _truth(change_rows: list[int], n: int = 1200) -> pd.DataFrame:
    times = [T0 + pd.Timedelta(seconds=i) for i in range(n)]
    return pd.DataFrame({"datetime": [t.strftime("%Y-%m-%d %H:%M:%S") for t in times],
                         "changepoint": [int(i in change_rows) for i in range(n)]})


def _result(at_row: int, status: str) -> dict[str, Any]:
    """A result whose after window ends ``at_row`` seconds after the file's first row."""
    end = (T0 + pd.Timedelta(seconds=at_row)).tz_localize("UTC")
    return {"status": status, "windows": {"after": {"end": end.isoformat()}}}


def test_a_detection_exactly_60_s_after_a_change_point_is_on_time() -> None:
    truth = _truth([600])
    got = score([_result(655, "ok"), _result(660, "firing")], truth)
    assert (got["missed"], got["false_positives"], got["median_delay_s"]) == (0, 0, 60.0)


def test_a_detection_61_s_after_is_a_miss_and_a_false_positive() -> None:
    got = score([_result(655, "ok"), _result(661, "firing")], _truth([600]))
    assert (got["missed"], got["false_positives"]) == (1, 1)


def test_a_firing_run_counts_once_and_before_row_400_not_at_all() -> None:
    results = [_result(SCORED_FROM_ROW - 10, "firing"), _result(500, "ok"),
               _result(610, "firing"), _result(615, "firing"), _result(620, "incomplete"),
               _result(625, "firing"), _result(900, "ok"), _result(950, "firing")]
    got = score(results, _truth([600]))
    assert (got["missed"], got["false_positives"], got["median_delay_s"]) == (0, 1, 10.0)
    assert got["n_firing"] == 5 and got["n_incomplete"] == 1


def test_skabs_conversion_counts_turning_ok_as_a_detection_too() -> None:
    """Change points at rows 600 and 700. Firing from 610 to 705 (turns ok at 705, inside
    the second point's window), an unjudged result between, then a short firing run at
    900-910: rising edges alone find the first point only; both edges find both, and the
    run at 900 gives two false positives instead of one."""
    results = [_result(500, "ok"), _result(610, "firing"), _result(650, "incomplete"),
               _result(700, "firing"), _result(705, "ok"), _result(800, "calibrating"),
               _result(900, "firing"), _result(910, "ok")]
    got = score(results, _truth([600, 700]))
    assert (got["missed"], got["false_positives"]) == (1, 1)
    assert (got["missed_both_edges"], got["false_positives_both_edges"]) == (0, 2)
    assert got["median_delay_s"] == 10.0  # the headline's delays: rising edges


def test_a_normal_recording_has_no_change_point_so_every_detection_is_false(
        tmp_path: Path) -> None:
    truth = _truth([])
    source = tmp_path / "anomaly-free_x.csv"
    truth.drop(columns=["changepoint"]).assign(Pressure=1.0).to_csv(source, sep=";",
                                                                   index=False)
    path, normal = normal_recording(source)
    assert path == source and not normal["changepoint"].any()
    got = score([_result(500, "firing"), _result(505, "ok"), _result(900, "firing")], normal)
    assert (got["change_points"], got["missed"], got["false_positives"]) == (0, 0, 2)
    assert scored_hours(normal) == pytest.approx((1199 - SCORED_FROM_ROW) / 3600)
    labelled = tmp_path / "valve.csv"
    _truth([600]).to_csv(labelled, sep=";", index=False)
    with pytest.raises(ValueError, match="labelled"):
        normal_recording(labelled)


def test_the_normal_recording_is_reported_apart_from_the_total(tmp_path: Path) -> None:
    rows = [{"file": "valve2_0", "labelled": True, "scored_h": 0.2, "change_points": 4,
             "missed": 1, "false_positives": 1, "false_positives_by_reference": 0,
             "median_delay_s": 20.0,
             "missed_both_edges": 0, "false_positives_both_edges": 2},
            {"file": "anomaly-free", "labelled": False, "scored_h": 2.5, "change_points": 0,
             "missed": 0, "false_positives": 3, "false_positives_by_reference": 1,
             "median_delay_s": None,
             "missed_both_edges": 0, "false_positives_both_edges": 5}]
    table = pd.DataFrame([{**r, "wall_s": 1.0, **{f"n_{k}": 0 for k in (
        "firing", "ok", "calibrating", "incomplete", "error")}} for r in rows])
    out = tmp_path / "skab.md"
    _write_markdown(table, out, OPTIONS, "load", argparse.Namespace(data=tmp_path))
    text = out.read_text()
    assert "Total: 1 of 4 change points missed, 1 false positives (0 by a reference)" in text
    assert "Both edges (SKAB's conversion): 0 missed, 2 false positives." in text
    assert "| valve2_0 | 4 | 1 | 1 | 0 | 20 | 0 / 2 |" in text
    assert "| anomaly-free | 2.5 | 3 | 1 | 1.20 | 5 |" in text
    assert "Files: valve2_0 (" in text
    assert "--start <first row> --end" in text
    _write_markdown(table, out, OPTIONS, "load",
                    argparse.Namespace(data=tmp_path, grid_offset=2))
    assert "--start <first row + 2 s> --end" in out.read_text()


def test_false_positives_an_open_incident_reference_fired_are_counted_apart() -> None:
    """A reference-fired detection inside a change point's window scores for it; one
    outside is a false positive and counts among those by a reference too."""
    def fired(at_row: int, by: str) -> dict[str, Any]:
        return {**_result(at_row, "firing"), "detection": {"fired_by": by}}

    results = [_result(500, "ok"), fired(620, "reference"), _result(640, "ok"),
               fired(800, "reference"), _result(820, "ok"), fired(900, "level"),
               _result(950, "ok")]
    got = score(results, _truth([600]))
    assert (got["missed"], got["false_positives"]) == (0, 2)
    assert got["false_positives_by_reference"] == 1


def test_the_normal_recording_is_cut_into_pieces_of_a_file_s_length(tmp_path: Path) -> None:
    """Each piece is a file as published (semicolons, no labels), calibrated afresh by
    its own backfill; the rows past the last whole piece are dropped."""
    source = tmp_path / "anomaly-free_x.csv"
    _truth([], n=2500).drop(columns=["changepoint"]).assign(Pressure=1.0).to_csv(
        source, sep=";", index=False)
    pieces = normal_pieces(source, tmp_path, rows=1000)
    assert [p.name for p, _ in pieces] == ["anomaly-free_x_piece1.csv",
                                          "anomaly-free_x_piece2.csv"]
    second = pd.read_csv(pieces[1][0], sep=";")
    assert list(second.columns) == ["datetime", "Pressure"] and len(second) == 1000
    assert second["datetime"].iloc[0] == (T0 + pd.Timedelta(seconds=1000)).strftime(
        "%Y-%m-%d %H:%M:%S")
    assert not pieces[1][1]["changepoint"].any()
    labelled = tmp_path / "valve.csv"
    _truth([600]).to_csv(labelled, sep=";", index=False)
    with pytest.raises(ValueError, match="labelled"):
        normal_pieces(labelled, tmp_path, rows=1000)


def test_the_pieces_are_summed_apart(tmp_path: Path) -> None:
    common = {"labelled": False, "change_points": 0, "missed": 0,
              "false_positives_by_reference": 0, "median_delay_s": None,
              "missed_both_edges": 0, "false_positives_both_edges": 0, "wall_s": 1.0,
              **{f"n_{k}": 0 for k in ("firing", "ok", "calibrating", "incomplete", "error")}}
    rows = [{**common, "file": "valve2_0", "labelled": True, "scored_h": 0.2,
             "change_points": 4, "missed": 1, "false_positives": 0, "piece": False},
            {**common, "file": "anomaly-free", "scored_h": 2.5, "false_positives": 3,
             "piece": False},
            {**common, "file": "anomaly-free_piece1", "scored_h": 0.2, "false_positives": 1,
             "piece": True},
            {**common, "file": "anomaly-free_piece2", "scored_h": 0.25, "false_positives": 0,
             "piece": True}]
    out = tmp_path / "skab.md"
    _write_markdown(pd.DataFrame(rows), out, OPTIONS, "load",
                    argparse.Namespace(data=tmp_path))
    text = out.read_text()
    assert "cut into 2 files of a labelled file's length" in text
    assert "1 false positives in 0.45 scored hours (0.50 a file)" in text


def test_skabs_own_folders_and_the_flat_copies_are_found_and_named_alike(tmp_path: Path
                                                                         ) -> None:
    # SKAB's repository keeps data/valve1/0.csv ...; skab-dev's copies are flat and gzipped
    own, flat = tmp_path / "data", tmp_path / "flat"
    for path in (own / "valve1" / "0.csv", own / "other" / "13.csv",
                 own / "anomaly-free" / "anomaly-free.csv", flat / "valve1_0.csv.gz",
                 flat / "anomaly-free_anomaly-free.csv.gz"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"")
    files, normal = find_files(own)
    assert [name for name, _ in files] == ["other_13", "valve1_0"]
    assert [name for name, _ in normal] == ["anomaly-free_anomaly-free"]
    assert dict(files)["valve1_0"] == own / "valve1" / "0.csv"
    files, normal = find_files(flat)
    assert [name for name, _ in files] == ["valve1_0"]
    assert [name for name, _ in normal] == ["anomaly-free_anomaly-free"]


def test_files_of_the_same_name_in_two_folders_keep_apart(tmp_path: Path) -> None:
    # valve1/0.csv and valve2/0.csv: their label-free copies must not overwrite each other
    rows = "datetime;Pressure;anomaly;changepoint\n2020-03-09 12:00:00;{};0;0\n"
    for folder, value in (("valve1", 1.0), ("valve2", 2.0)):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "0.csv").write_text(rows.format(value))
    out = tmp_path / "out"
    out.mkdir()
    written = [strip_labels(path, out, name)[0] for name, path in find_files(tmp_path)[0]]
    assert [p.name for p in written] == ["valve1_0.csv", "valve2_0.csv"]
    assert [pd.read_csv(p, sep=";")["Pressure"].tolist() for p in written] == [[1.0], [2.0]]
    assert list(pd.read_csv(written[0], sep=";").columns) == ["datetime", "Pressure"]


def test_a_file_of_at_most_400_rows_has_nothing_scored() -> None:
    truth = _truth([100, 300], n=SCORED_FROM_ROW)
    scored = score([_result(350, "ok"), _result(390, "firing")], truth)
    assert (scored["change_points"], scored["missed"], scored["false_positives"]) == (0, 0, 0)
    assert scored_hours(truth) == 0.0


def test_each_grid_is_counted_apart_and_summed(tmp_path: Path) -> None:
    """``--grids``: the labelled files, the whole normal recording and its pieces are
    counted per grid offset, and the sum over the grids closes the table."""
    def row(grid: int, file: str, labelled: bool, piece: bool, missed: int, fp: int
            ) -> dict[str, Any]:
        return {"file": file, "grid_offset": grid, "labelled": labelled, "piece": piece,
                "change_points": 4 if labelled else 0, "missed": missed,
                "false_positives": fp, "missed_both_edges": max(0, missed - 1),
                "false_positives_both_edges": 2 * fp}
    table = pd.DataFrame([
        row(0, "valve2_0", True, False, 1, 0), row(0, "valve2_1", True, False, 2, 1),
        row(0, "normal", False, False, 0, 3), row(0, "normal_piece1", False, True, 0, 1),
        row(1, "valve2_0", True, False, 3, 1), row(1, "valve2_1", True, False, 0, 0),
        row(1, "normal", False, False, 0, 5), row(1, "normal_piece1", False, True, 0, 0)])
    got = grid_counts(table).set_index("grid_offset")
    assert got.loc[0, ["change_points", "missed", "false_positives"]].tolist() == [8, 3, 1]
    assert got.loc[1, ["missed", "false_positives", "missed_both_edges"]].tolist() == [3, 1, 2]
    assert got["normal_false_positives"].tolist() == [3, 5]
    assert got["pieces_false_positives"].tolist() == [1, 0]
    out = tmp_path / "skab_grids.md"
    _write_grids(table, out, OPTIONS, "load")
    text = out.read_text()
    assert "| 0 | 3 of 8 | 1 | 1 / 2 | 3 | 1 |" in text
    assert "| 1 | 3 of 8 | 1 | 2 / 2 | 5 | 0 |" in text
    assert "| all | 6 of 16 | 2 | 3 / 4 | 8 | 1 |" in text
