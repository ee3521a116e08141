"""Damaged copies of a generated message: cut short, one unit replaced, one doubled, a span
dropped, as a broker or a gateway can deliver them.

Hypothesis spends about a millisecond generating each structured message and microseconds
checking it. Feeding each drawn message with a few mutants, drawn from the example's own
``random.Random`` (``st.randoms()``: reproducible, derandomised in CI), reaches the fuzz
budget with two-fifths of the examples and adds the truncated and corrupted payloads
that the drawn ones rarely are.
"""
from __future__ import annotations

import random
from typing import TypeVar

#: mutants fed after each drawn message
MUTANTS = 4
#: the characters that change how JSON parses: what a replaced unit is drawn from half the time
JSON_SIGNIFICANT = '{}[]",:.eE+-0123456789 \\ntfalsru'

Message = TypeVar("Message", bytes, str)


def mutants(message: Message, rng: random.Random, n: int = MUTANTS) -> list[Message]:
    """``n`` damaged copies of ``message`` (bytes or text), each with one damage."""
    return [_mutate(message, rng) for _ in range(n)]


def _mutate(message: Message, rng: random.Random) -> Message:
    if not message:
        return _unit(message, rng)
    i = rng.randrange(len(message))
    damage = rng.randrange(4)
    if damage == 0:  # cut short
        return message[:i]
    if damage == 1:  # one unit replaced
        return message[:i] + _unit(message, rng) + message[i + 1:]
    if damage == 2:  # one unit doubled
        return message[:i + 1] + message[i:]
    return message[:i] + message[rng.randrange(i, len(message) + 1):]  # a span dropped


def _unit(like: Message, rng: random.Random) -> Message:
    """One byte or character: JSON-significant half the time, else any."""
    if isinstance(like, bytes):
        if rng.random() < 0.5:
            return rng.choice(JSON_SIGNIFICANT).encode()
        return bytes([rng.randrange(256)])
    if rng.random() < 0.5:
        return rng.choice(JSON_SIGNIFICANT)
    return chr(rng.choice((rng.randrange(0x20, 0x7F), rng.randrange(0x80, 0xD800))))
