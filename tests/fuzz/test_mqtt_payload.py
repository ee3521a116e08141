"""Property-based tests of the MQTT payload parser: any message, no exception, every
rejected item counted with a known reason, every accepted reading well-formed."""
from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from random import Random

from hypothesis import given
from hypothesis import strategies as st

from connectors.mqtt.payload import (
    BAD_SENSOR,
    BARE_NUMBER_WITHOUT_SENSOR,
    NON_FINITE_VALUE,
    REASONS,
    TIME_OUT_OF_RANGE,
    ParseResult,
    parse_payload,
)
from tests.fuzz.budget import count, fuzz_settings
from tests.fuzz.mutations import MUTANTS, Message, mutants

MAX_EPOCH = datetime(2200, 1, 1, tzinfo=UTC).timestamp()
PATTERNS = [None, "sensors/+/{sensor}", "{sensor}", "a/{sensor}/#", "site/{sensor}/value"]
RECEIVED = 1_700_000_000.0

topics = st.one_of(
    st.sampled_from(["sensors/l-town/n296", "n1", "a/b/c/d", "", "site/x/value", "/", "+/#"]),
    st.text(max_size=40),
)
json_docs = st.recursive(
    st.none() | st.booleans() | st.floats() | st.integers() | st.text(max_size=12),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.sampled_from(["sensor", "time", "value", "x"]) | st.text(max_size=6),
                      children, max_size=4),
    max_leaves=8,
)


def check_invariants(result: ParseResult) -> None:
    assert isinstance(result, ParseResult)
    assert result.readings or result.rejected, "a message must be accepted or rejected"
    for reason in result.rejected:
        assert reason in REASONS, f"rejection without a known reason: {reason!r}"
    for r in result.readings:
        assert isinstance(r.sensor, str) and 0 < len(r.sensor) <= 256 and r.sensor.isprintable()
        assert isinstance(r.value, float) and math.isfinite(r.value)
        assert isinstance(r.time, float) and 0.0 <= r.time < MAX_EPOCH


def check_damaged_copies(message: Message, rng: Random, topic: str,
                         pattern: str | None = None) -> None:
    """The invariants on MUTANTS damaged copies of ``message`` (tests/fuzz/mutations.py):
    cut short, a unit replaced or doubled, a span dropped, as in transit."""
    for variant in mutants(message, rng):
        check_invariants(parse_payload(variant, topic, RECEIVED, pattern))


@fuzz_settings(1000)
@given(st.lists(st.tuples(st.binary(max_size=96), topics, st.sampled_from(PATTERNS)),
                min_size=1, max_size=10), st.randoms(use_true_random=False))
def test_arbitrary_bytes_never_raise(messages: list, rng: Random) -> None:
    for payload, topic, pattern in messages:
        check_invariants(parse_payload(payload, topic, RECEIVED, pattern))
        check_damaged_copies(payload, rng, topic, pattern)
    count("mqtt payload", len(messages) * (1 + MUTANTS))


@fuzz_settings(1000)
@given(st.lists(st.tuples(st.text(max_size=64), topics, st.sampled_from(PATTERNS)),
                min_size=1, max_size=10), st.randoms(use_true_random=False))
def test_arbitrary_text_never_raises(messages: list, rng: Random) -> None:
    for payload, topic, pattern in messages:
        check_invariants(parse_payload(payload, topic, RECEIVED, pattern))
        check_damaged_copies(payload, rng, topic, pattern)
    count("mqtt payload", len(messages) * (1 + MUTANTS))


@fuzz_settings(1000)
@given(st.lists(st.tuples(json_docs, topics, st.sampled_from(PATTERNS)), min_size=1, max_size=6),
       st.randoms(use_true_random=False))
def test_arbitrary_json_every_item_accounted_for(messages: list, rng: Random) -> None:
    for doc, topic, pattern in messages:
        text = json.dumps(doc)
        result = parse_payload(text, topic, RECEIVED, pattern)
        check_invariants(result)
        if isinstance(doc, list) and doc:
            # each array item is judged on its own: none lost, none invented
            assert len(result.readings) + len(result.rejected) == len(doc)
        check_damaged_copies(text, rng, topic, pattern)
    count("mqtt payload", len(messages) * (1 + MUTANTS))


# Readings with every field drawn from good and bad values, checked against what the
# contract says must happen to each.
good_sensors = st.text(st.characters(codec="utf-8", categories=["L", "N", "Pd"]),
                       min_size=1, max_size=20)
bad_sensors = st.sampled_from(["", "x" * 257, "tab\there", "line\nbreak", True, [], {}])
times_in_range = st.datetimes(min_value=datetime(1970, 1, 2), max_value=datetime(2199, 12, 30))
times_out_of_range = st.one_of(
    st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(1969, 12, 30)),
    st.datetimes(min_value=datetime(2200, 1, 2), max_value=datetime(9999, 12, 30)),
)
finite_values = st.floats(allow_nan=False, allow_infinity=False) | st.integers(-10**12, 10**12)
non_finite = st.sampled_from([math.nan, math.inf, -math.inf, 10**400, "nan", "-Infinity"])


def _iso(dt: datetime, style: int) -> object:
    if style == 0:
        return dt.isoformat()  # naive = UTC
    if style == 1:
        return dt.replace(tzinfo=UTC).isoformat().replace("+00:00", "Z")
    return dt.replace(tzinfo=UTC).timestamp()  # epoch seconds


@fuzz_settings(1500)
@given(st.lists(st.tuples(good_sensors, finite_values, times_in_range, st.integers(0, 2)),
                min_size=1, max_size=8), st.randoms(use_true_random=False))
def test_well_formed_readings_are_accepted_exactly(batch: list, rng: Random) -> None:
    items = [{"sensor": s, "value": v, "time": _iso(t, k)} for s, v, t, k in batch]
    body = json.dumps(items).encode()
    result = parse_payload(body, "any/topic", RECEIVED)
    assert result.rejected == []
    assert len(result.readings) == len(items)
    for reading, (sensor, value, t, _) in zip(result.readings, batch, strict=True):
        expected = t.replace(tzinfo=UTC).timestamp()
        assert reading.sensor == sensor
        assert reading.value == float(value)
        assert math.isclose(reading.time, expected, abs_tol=1e-3)
    check_damaged_copies(body, rng, "any/topic")
    count("mqtt payload", len(items) + MUTANTS)


@fuzz_settings(1500)
@given(st.lists(st.one_of(
    st.tuples(st.just("value"), good_sensors, non_finite, times_in_range),
    st.tuples(st.just("time"), good_sensors, finite_values, times_out_of_range),
    st.tuples(st.just("sensor"), bad_sensors, finite_values, times_in_range),
), min_size=1, max_size=8), st.randoms(use_true_random=False))
def test_bad_fields_rejected_with_their_reason(batch: list, rng: Random) -> None:
    expected_reason = {"value": NON_FINITE_VALUE, "time": TIME_OUT_OF_RANGE, "sensor": BAD_SENSOR}
    items = [{"sensor": s, "value": v, "time": _iso(t, 1)} for _, s, v, t in batch]
    # json.dumps writes NaN/Infinity tokens, which the parser must also survive
    body = json.dumps(items)
    result = parse_payload(body, "t", RECEIVED)
    assert result.readings == []
    assert result.rejected == [expected_reason[kind] for kind, *_ in batch]
    check_damaged_copies(body, rng, "t")
    count("mqtt payload", len(items) + MUTANTS)


@fuzz_settings(700)
@given(st.lists(st.tuples(st.from_regex(r"[A-Za-z0-9_-]{1,12}", fullmatch=True),
                          st.floats(allow_nan=False, allow_infinity=False)),
                min_size=1, max_size=10), st.randoms(use_true_random=False))
def test_bare_numbers_take_sensor_from_topic(batch: list, rng: Random) -> None:
    for sensor, value in batch:
        body, topic = repr(value), f"sensors/l-town/{sensor}"
        result = parse_payload(body, topic, RECEIVED, "sensors/+/{sensor}")
        assert [(r.sensor, r.time, r.value) for r in result.readings] == [(sensor, RECEIVED, value)]
        without = parse_payload(body, topic, RECEIVED, None)
        assert without.rejected == [BARE_NUMBER_WITHOUT_SENSOR]
        check_damaged_copies(body, rng, topic, "sensors/+/{sensor}")  # "1.5e-0", "1.55e-07"
    count("mqtt payload", (2 + MUTANTS) * len(batch))


def test_far_future_epoch_milliseconds_and_deep_nesting() -> None:
    ms = parse_payload(json.dumps({"sensor": "a", "value": 1, "time": 1.7e12}))
    assert ms.rejected == [TIME_OUT_OF_RANGE]
    deep = parse_payload("[" * 100_000 + "]" * 100_000)
    check_invariants(deep)
    huge = parse_payload(json.dumps([{"sensor": f"s{i}", "value": i, "time": 1e9}
                                     for i in range(10_000)]))
    assert len(huge.readings) == 10_000 and huge.rejected == []
    assert parse_payload(b"\xff\xfe").rejected == ["not_utf8"]
