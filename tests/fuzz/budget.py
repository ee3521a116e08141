"""How many generated inputs the fuzz suite feeds, and a tally of how many it did.

Each property draws a small *batch* of inputs per Hypothesis example, and the MQTT
properties feed each drawn message with damaged copies (tests/fuzz/mutations.py): an input
costs far more to generate than to check.
``MMDWATCH_FUZZ_SCALE`` multiplies every budget (``=10`` for a deeper run before a
release); the default totals about 125,000 inputs in about a minute and a half.
The CI profile is derandomised so CI never flakes on a newly found input; run with
``MMDWATCH_FUZZ_SEED=random`` to explore.
"""
from __future__ import annotations

import os
from collections import Counter

from hypothesis import HealthCheck, settings

#: inputs checked, per fuzz target (filled in as the properties run)
TALLY: Counter[str] = Counter()

#: the issue asks for at least this many generated inputs in total
REQUIRED_TOTAL = 100_000

SCALE = float(os.environ.get("MMDWATCH_FUZZ_SCALE", "1"))
RANDOM = os.environ.get("MMDWATCH_FUZZ_SEED", "") == "random"


def fuzz_settings(examples: int) -> settings:
    """Settings for one property: ``examples`` Hypothesis examples times the scale."""
    return settings(
        max_examples=max(1, int(examples * SCALE)),
        deadline=None,  # a loaded 2-core CI box must not turn slowness into failures
        derandomize=not RANDOM,
        database=None if not RANDOM else settings.default.database,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        print_blob=True,
    )


def count(target: str, n: int = 1) -> None:
    TALLY[target] += n
