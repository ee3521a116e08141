"""Time for the whole project: durations ("7d", "1h", "30min") and instants (ISO 8601,
naive = UTC) without pandas, so config validation and ``--help`` stay light, and the one
UTC-normalising helper for pandas timestamps (pandas loads only when it is called).

It lives in ``connectors`` because every layer needs it and the imports go one way
(``monitor`` -> ``connectors``, never back): the InfluxDB readers and writers, the store,
the windows and the config all use it.
"""
from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

_UNITS = {
    "ms": timedelta(milliseconds=1),
    "s": timedelta(seconds=1), "sec": timedelta(seconds=1),
    "m": timedelta(minutes=1), "min": timedelta(minutes=1),
    "h": timedelta(hours=1), "hr": timedelta(hours=1),
    "d": timedelta(days=1), "day": timedelta(days=1), "days": timedelta(days=1),
    "w": timedelta(weeks=1),
}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-z]+)\s*$")


def parse_duration(text: str | float | timedelta) -> timedelta:
    """``"7d"`` -> 7 days. Units: ms, s, min (or m), h, d, w. Numbers alone are seconds."""
    if isinstance(text, timedelta):
        return text
    if isinstance(text, bool):
        raise ValueError(  # noqa: TRY004 - pydantic reports ValueErrors as config problems
f"{text!r} is not a duration; write e.g. 7d, 1h, 30min, 10s")
    try:  # OverflowError (1e300 s) is not a ValueError: validators would not catch it
        if isinstance(text, int | float):
            return timedelta(seconds=float(text))
        match = _DURATION.match(str(text).lower())
        if not match or match.group(2) not in _UNITS:
            raise ValueError(f"{text!r} is not a duration; write e.g. 7d, 1h, 30min, 10s")
        return float(match.group(1)) * _UNITS[match.group(2)]
    except OverflowError:
        raise ValueError(f"{text!r} is too long a duration; write e.g. 7d, 1h, 30min") from None


def format_duration(delta: timedelta) -> str:
    """The shortest exact text for ``delta``: 7 days -> ``"7d"``, 90 minutes -> ``"90min"``."""
    seconds = delta.total_seconds()
    for unit, size in (("w", 604800), ("d", 86400), ("h", 3600), ("min", 60), ("s", 1)):
        if seconds and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds}s"


def parse_time(text: str | datetime | float) -> datetime:
    """ISO 8601 (``2019-03-11T13:15:00``, ``...Z``, ``...+01:00``) or epoch seconds -> aware
    UTC datetime. Naive times are UTC."""
    if isinstance(text, datetime):
        value = text
    elif isinstance(text, int | float) and not isinstance(text, bool):
        try:
            return datetime.fromtimestamp(float(text), UTC)
        except (OverflowError, OSError, ValueError):  # 1e20, NaN: not a time
            raise ValueError(f"{text!r} is not a time in epoch seconds; write e.g. "
                             "2019-03-11T13:15:00 or 1552262400") from None
    else:
        raw = str(text).strip()
        if raw.endswith(("Z", "z")):
            raw = raw[:-1] + "+00:00"
        try:
            value = datetime.fromisoformat(raw)
        except ValueError:
            raise ValueError(
                f"{text!r} is not an ISO 8601 time; write e.g. 2019-03-11T13:15:00 (UTC) "
                "or 2019-03-11T13:15:00+01:00"
            ) from None
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


def on_whole_minute(value: datetime) -> bool:
    """Whether ``value`` falls on a whole minute (hourly and daily inspections). Times
    written for people give their seconds only where it does not (a one-second source's
    inspections every 5 s): summaries and report titles alike."""
    return value.second == 0 and value.microsecond == 0


def iso(value: datetime) -> str:
    """``2019-03-11T00:00:00Z`` (UTC, seconds, or microseconds when present)."""
    value = value.astimezone(UTC)
    spec = "microseconds" if value.microsecond else "seconds"
    return value.replace(tzinfo=None).isoformat(timespec=spec) + "Z"


def to_utc(value: Any) -> pd.Timestamp:
    """Anything ``pd.Timestamp`` reads -> an aware UTC timestamp (naive = UTC)."""
    import pandas as pd

    stamp = pd.Timestamp(value)
    return stamp.tz_localize("UTC") if stamp.tzinfo is None else stamp.tz_convert("UTC")
