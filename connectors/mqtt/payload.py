"""Turning one MQTT message into readings: a pure function, no I/O, never raises.

Accepted payloads (docs/mqtt.md, "Payload forms"):

* a JSON object ``{"sensor": "n296", "time": "2018-06-01T00:00:00Z", "value": 41.2}``;
* a JSON array of such objects (each item judged on its own);
* a bare number ``41.2`` when ``sensor_from_topic`` names the topic level holding the
  sensor id (time = receive time).

``time`` is ISO 8601 (naive = UTC) or epoch seconds; when missing, the receive time, and
the reading is marked ``received`` (a site on the data clock refuses it).
``sensor`` may be left out of an object when the topic carries it. Everything else is
rejected with a short reason string (counted per reason by the source).
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import lru_cache

from connectors.base import Reading

# Times outside [1970, 2200) are refused: they are almost always epoch milliseconds or
# nanoseconds sent where seconds were meant.
_MIN_EPOCH = 0.0
_MAX_EPOCH = 7_258_118_400.0  # 2200-01-01T00:00:00Z
_MAX_SENSOR_LEN = 256

# Rejection reasons (stable strings: they are metric labels).
NOT_UTF8 = "not_utf8"
EMPTY = "empty_payload"
INVALID_JSON = "invalid_json"
NOT_AN_OBJECT = "item_not_an_object"
EMPTY_ARRAY = "empty_array"
MISSING_SENSOR = "missing_sensor"
BAD_SENSOR = "bad_sensor"
MISSING_VALUE = "missing_value"
BAD_VALUE = "bad_value"
NON_FINITE_VALUE = "non_finite_value"
BAD_TIME = "bad_time"
TIME_OUT_OF_RANGE = "time_out_of_range"
BARE_NUMBER_WITHOUT_SENSOR = "bare_number_without_sensor_from_topic"

REASONS: tuple[str, ...] = (
    NOT_UTF8, EMPTY, INVALID_JSON, NOT_AN_OBJECT, EMPTY_ARRAY, MISSING_SENSOR, BAD_SENSOR,
    MISSING_VALUE, BAD_VALUE, NON_FINITE_VALUE, BAD_TIME, TIME_OUT_OF_RANGE,
    BARE_NUMBER_WITHOUT_SENSOR,
)


@dataclass(frozen=True, slots=True)
class ParseResult:
    """What one message gave: accepted readings and one reason per rejected item."""

    readings: list[Reading] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class TopicPattern:
    """A ``sensor_from_topic`` pattern such as ``sensors/+/{sensor}``, split into levels;
    optionally with a ``{site}`` level (``sensors/{site}/{sensor}``: many sites on one
    broker)."""

    levels: tuple[str, ...]
    sensor_level: int
    site_level: int | None = None

    def _parts(self, topic: str) -> list[str] | None:
        """The topic's levels when it matches the pattern, else None."""
        parts = topic.split("/")
        for i, level in enumerate(self.levels):
            if level == "#":
                break
            if i >= len(parts):
                return None
            if level not in ("+", "{sensor}", "{site}") and level != parts[i]:
                return None
        else:
            if len(parts) != len(self.levels):
                return None
        return parts

    def sensor(self, topic: str) -> str | None:
        """The sensor id the topic carries, or None when the topic does not match."""
        return self.match(topic)[1]

    def match(self, topic: str) -> tuple[str | None, str | None]:
        """(site, sensor) the topic carries; None for what it does not (no ``{site}``
        level, a topic that does not match, a level that is no valid id)."""
        parts = self._parts(topic)
        if parts is None:
            return None, None
        sensor = parts[self.sensor_level] if self.sensor_level < len(parts) else None
        site = None
        if self.site_level is not None and self.site_level < len(parts):
            site = parts[self.site_level]
            if not _SITE_ID.fullmatch(site):
                site = None
        return site, sensor if _valid_sensor(sensor) else None


_SITE_ID = re.compile(r"[A-Za-z0-9_.-]+")


@lru_cache(maxsize=64)
def compile_topic_pattern(pattern: str) -> TopicPattern:
    """Parse ``sensor_from_topic``; ValueError (naming the fix) when it is malformed."""
    levels = tuple(pattern.split("/"))
    marks = [i for i, level in enumerate(levels) if level == "{sensor}"]
    if len(marks) != 1:
        raise ValueError(f"sensor_from_topic {pattern!r} must contain exactly one "
                         "'{sensor}' level, e.g. 'sensors/+/{sensor}'")
    sites = [i for i, level in enumerate(levels) if level == "{site}"]
    if len(sites) > 1:
        raise ValueError(f"sensor_from_topic {pattern!r} may contain one '{{site}}' level "
                         "at most, e.g. 'sensors/{site}/{sensor}'")
    if "#" in levels and levels.index("#") != len(levels) - 1:
        raise ValueError(f"sensor_from_topic {pattern!r}: '#' may only be the last level")
    if "#" in levels and levels.index("#") < max(marks + sites):
        raise ValueError(f"sensor_from_topic {pattern!r}: '{{sensor}}' and '{{site}}' must "
                         "come before '#'")
    return TopicPattern(levels=levels, sensor_level=marks[0],
                        site_level=sites[0] if sites else None)


def _valid_sensor(value: object) -> bool:
    return (isinstance(value, str) and 0 < len(value) <= _MAX_SENSOR_LEN
            and value.isprintable())


def parse_time(value: object) -> float | str:
    """Epoch seconds from ISO 8601 text or an epoch number; a rejection reason otherwise."""
    if isinstance(value, bool):
        return BAD_TIME
    if isinstance(value, (int, float)):
        seconds = float(value)
    elif isinstance(value, str):
        text = value.strip()
        try:
            seconds = float(text)
        except ValueError:
            try:
                parsed = datetime.fromisoformat(text)
            except ValueError:
                return BAD_TIME
            if parsed.tzinfo is None:
                parsed = parsed.replace(tzinfo=UTC)
            try:
                seconds = parsed.timestamp()
            except (OverflowError, ValueError, OSError):
                return BAD_TIME
    else:
        return BAD_TIME
    if not math.isfinite(seconds):
        return BAD_TIME
    if not _MIN_EPOCH <= seconds < _MAX_EPOCH:
        return TIME_OUT_OF_RANGE
    return seconds


def parse_value(value: object) -> float | str:
    """A finite float from a JSON number or numeric text; a rejection reason otherwise."""
    if isinstance(value, bool) or value is None:
        return BAD_VALUE if value is not None else MISSING_VALUE
    if isinstance(value, (int, float)):
        try:
            number = float(value)
        except OverflowError:  # ints beyond float range
            return NON_FINITE_VALUE
    elif isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            return BAD_VALUE
    else:
        return BAD_VALUE
    if not math.isfinite(number):
        return NON_FINITE_VALUE
    return number


def _parse_item(item: object, topic_sensor: str | None, received_at: float,
                site: str | None, topic: str,
                times: dict[str, float | str]) -> Reading | str:
    """One item of a message as a reading of ``site`` from ``topic``, or why it is refused.
    ``times``: the message's time texts already parsed (a gateway's array shares one)."""
    if not isinstance(item, dict):
        return NOT_AN_OBJECT
    sensor = item.get("sensor", topic_sensor)
    if sensor is None:
        return MISSING_SENSOR
    if isinstance(sensor, (int, float)) and not isinstance(sensor, bool):
        sensor = str(sensor)  # numeric ids are common in SCADA exports
    if not _valid_sensor(sensor):
        return BAD_SENSOR
    if "value" not in item:
        return MISSING_VALUE
    value = parse_value(item["value"])
    if isinstance(value, str):
        return value
    stamp = item.get("time")
    if stamp is None:
        return Reading(sensor, received_at, value, site, topic, received=True)
    if isinstance(stamp, str):
        time_s = times.get(stamp)
        if time_s is None:
            time_s = times[stamp] = parse_time(stamp)
    else:
        time_s = parse_time(stamp)
    if isinstance(time_s, str):
        return time_s
    return Reading(sensor, time_s, value, site, topic)


def parse_payload(
    payload: bytes | bytearray | str,
    topic: str = "",
    received_at: float = 0.0,
    sensor_from_topic: str | None = None,
) -> ParseResult:
    """Readings in one MQTT message, plus one rejection reason per item refused.

    Pure and total: any bytes and any topic give a ParseResult, never an exception
    (a malformed ``sensor_from_topic`` is the caller's config error, checked at load).
    """
    topic_site, topic_sensor = (compile_topic_pattern(sensor_from_topic).match(topic)
                                if sensor_from_topic else (None, None))
    if isinstance(payload, (bytes, bytearray)):
        try:
            text = bytes(payload).decode("utf-8")
        except UnicodeDecodeError:
            return ParseResult(rejected=[NOT_UTF8])
    else:
        text = payload
    if not text.strip():
        return ParseResult(rejected=[EMPTY])
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):
        # Not JSON; a bare number written without JSON rules (e.g. "  41.2\n") is still
        # handled below through parse_value.
        doc = text
    if isinstance(doc, (int, float, str)) and not isinstance(doc, bool):
        number = parse_value(doc)
        if isinstance(number, str):
            return ParseResult(rejected=[INVALID_JSON if isinstance(doc, str) else number])
        if topic_sensor is None:
            return ParseResult(rejected=[BARE_NUMBER_WITHOUT_SENSOR])
        return ParseResult(readings=[Reading(topic_sensor, received_at, number, topic_site,
                                             topic, received=True)])
    items = doc if isinstance(doc, list) else [doc]
    if not items:
        return ParseResult(rejected=[EMPTY_ARRAY])
    readings: list[Reading] = []
    rejected: list[str] = []
    times: dict[str, float | str] = {}
    for item in items:
        out = _parse_item(item, topic_sensor, received_at, topic_site, topic, times)
        if isinstance(out, Reading):
            readings.append(out)
        else:
            rejected.append(out)
    return ParseResult(readings=readings, rejected=rejected)
