"""bench.skab's scoring, the leaderboard's way: a detection scores for a change point at
0 to 60 s after it, both ends included (SKAB's ``extract_cp_confusion_matrix``); any
other detection from the 400th row on is a false positive; a firing run counts once."""
from __future__ import annotations

from typing import Any

import pandas as pd

from bench.skab import SCORED_FROM_ROW, score

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
