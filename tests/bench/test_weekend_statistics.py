"""bench.weekend_statistics: which inspections' after windows touch a weekend."""
from __future__ import annotations

import pandas as pd

from bench.weekend_statistics import touches_weekend


def test_an_after_window_touches_the_weekend_from_its_first_saturday_hour():
    # 16-hour after windows: Friday 08:00 ends at 23:59 Friday, Friday 09:00 reaches
    # Saturday 00:00; Sunday 23:00 is a weekend hour; Monday 00:00 is not.
    times = pd.Series(pd.to_datetime(["2024-01-05 08:00", "2024-01-05 09:00",
                                      "2024-01-07 23:00", "2024-01-08 00:00"], utc=True))
    assert touches_weekend(times).tolist() == [False, True, True, False]
