"""bench.skab_injected's block: one sensor raised by a multiple of its standard deviation
over the piece's first 400 rows, for a span of rows, and the change and its return as the
two change points; a block that does not fit is refused with the fix."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from bench.skab import SCORED_FROM_ROW
from bench.skab_injected import named_first, with_block


def _piece(path: Path, rows: int = 1000) -> Path:
    rng = np.random.default_rng(0)
    times = pd.date_range("2020-02-08 13:31:00", periods=rows, freq="1s")
    frame = pd.DataFrame({"datetime": times.strftime("%Y-%m-%d %H:%M:%S"),
                          "Current": rng.normal(2.4, 0.5, rows),
                          "Pressure": rng.normal(0.1, 0.25, rows)})
    frame.to_csv(path, sep=";", index=False)
    return path


def test_a_block_raises_one_sensor_for_its_rows_and_marks_change_and_return(
        tmp_path: Path) -> None:
    piece = _piece(tmp_path / "piece.csv")
    path, truth = with_block(piece, "Current", 8.0, 600, 180, tmp_path / "block.csv")
    before, after = pd.read_csv(piece, sep=";"), pd.read_csv(path, sep=";")
    sd = before["Current"].iloc[:SCORED_FROM_ROW].std()
    raised = after["Current"] - before["Current"]
    assert np.allclose(raised.iloc[600:780], 8.0 * sd)
    assert np.allclose(raised.drop(range(600, 780)), 0.0)
    assert after["Pressure"].equals(before["Pressure"])
    assert truth.index[truth["changepoint"] == 1].tolist() == [600, 780]
    assert truth["datetime"].equals(before["datetime"])


def test_a_block_that_does_not_fit_names_the_fix(tmp_path: Path) -> None:
    piece = _piece(tmp_path / "piece.csv", rows=700)
    with pytest.raises(ValueError, match="shorter --length"):
        with_block(piece, "Current", 8.0, 600, 180, tmp_path / "block.csv")


def test_named_first_is_the_share_of_firing_results_naming_the_sensor(tmp_path: Path) -> None:
    results = [{"status": "firing", "selected_sensors": ["Current", "Pressure"]},
               {"status": "firing", "selected_sensors": ["Pressure"]},
               {"status": "ok", "selected_sensors": []}]
    path = tmp_path / "r.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in results) + "\n")
    assert named_first(path, "Current") == 0.5
    path.write_text(json.dumps(results[2]) + "\n")
    assert named_first(path, "Current") is None
