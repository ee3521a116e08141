"""bench.seeds' table: a delay per seed, named by a changed sensor or by one near the leak,
its median over the seeds that named the change, and false incidents summed."""
from __future__ import annotations

import pandas as pd

from bench.seeds import summary


def test_the_summary_keeps_each_seed_and_counts_what_the_seeds_share() -> None:
    rows = pd.DataFrame({
        "seed": [0, 1, 2, 0, 1, 2, 0, 1, 2],
        "scenario": ["d1"] * 3 + ["d2"] * 3 + ["null-0"] * 3,
        "delay_h": [7.25, 6.25, None, None, None, None, None, None, None],
        "delay_near_h": [7.25, 6.25, None, 5.5, None, None, None, None, None],
        "first_named": ["n202", "n202", None, "n337", None, None, None, None, None],
        "false_incidents": [0, 0, 1, 0, 0, 0, 1, 2, 2],
    })
    table = summary(rows).set_index("scenario")
    assert table.loc["d1", "seed 0"] == "7.25 n202" and table.loc["d1", "seed 2"] == "-"
    assert table.loc["d1", "median delay h"] == "6.75"
    assert table.loc["d1", "seeds named"] == "2 of 3"
    assert table.loc["d2", "seed 0"] == "near 5.5 n337" and table.loc["d2", "seed 1"] == "-"
    assert table.loc["d2", "median delay h"] == "-" and table.loc["d2", "seeds named"] == "0 of 3"
    assert table.loc["null-0", "false incidents"] == 5 and table.loc["d1", "false incidents"] == 1
