"""The one UTC-normalising helper for pandas timestamps.

It lives in ``connectors`` because both layers need it and the imports go one way
(``monitor`` -> ``connectors``, never back): the InfluxDB readers and writers use it, and
``monitor.windows`` re-exports it. Text and epoch instants without pandas are parsed by
``monitor.timeutil.parse_time``.
"""
from __future__ import annotations

from typing import Any

import pandas as pd


def to_utc(value: Any) -> pd.Timestamp:
    """Anything ``pd.Timestamp`` reads -> an aware UTC timestamp (naive = UTC)."""
    stamp = pd.Timestamp(value)
    return stamp.tz_localize("UTC") if stamp.tzinfo is None else stamp.tz_convert("UTC")
