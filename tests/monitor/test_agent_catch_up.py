"""An agent whose readings arrive in a burst while a tick runs (a gateway flushing its
buffer, a replay on the data clock) catches up in batches (issue 27, the daemon): each time
its first pass is used up, the times due by then are fitted as one batch, not one at a
time, and every result equals the one-at-a-time agent's."""
from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pytest

from connectors.base import Reading
from monitor import agent as agent_module
from monitor.compose import build_agent
from monitor.config import validate_config

T0 = datetime(2026, 1, 5, tzinfo=UTC).timestamp()  # a Monday
HOUR = 3600.0
SENSORS = [f"n{k}" for k in range(6)]
FIRST_HOURS = 24 * 4 + 8  # readings before the tick: the history and two due times
BURST_HOURS = 16  # readings that arrive while the tick runs


def _readings(first: int, last: int) -> list[Reading]:
    rng = np.random.default_rng(7)
    values = 50 + np.sin(np.arange(last)[:, None] * 2 * np.pi / 24 + np.arange(6)) \
        + rng.normal(0, 0.3, (last, len(SENSORS)))
    return [Reading(s, T0 + HOUR * k, float(values[k, j]))
            for k in range(first, last) for j, s in enumerate(SENSORS)]


def _agent(tmp_path, name: str):
    return build_agent(validate_config({
        "site": "burst", "state_dir": str(tmp_path / name), "sinks": [],
        "source": {"type": "mqtt", "host": "127.0.0.1", "topics": ["sensors/#"]},
        "windows": {"before": "2d", "after": "4h"},
        "schedule": {"every": "1h", "clock": "data"},
        "decision": {"min_history": "1d", "engine_rows": "12h"},
        "engine": {"params": {"n_splits": 2, "n_lambdas": 2}},
    }, env={}))


def _recorded(site, monkeypatch, results: dict[str, dict], after_run=None) -> None:
    """Keep each result the site's inspections give (the agent is not started, so its
    sinks deliver nothing); ``after_run(t)`` runs after each."""
    run = site.run

    def recorded(t):
        outcome = run(t)
        results[outcome.result["inspection_time"]] = outcome.result
        if after_run is not None:
            after_run(t)
        return outcome

    monkeypatch.setattr(site, "run", recorded)


@pytest.mark.slow
def test_a_burst_that_arrives_during_a_tick_is_caught_up_in_batches(tmp_path, monkeypatch):
    batches: list[int] = []
    original = agent_module.prepare_many

    def counted(work, **kwargs):
        batches.append(sum(len(times) for _, times, _ in work))
        return original(work, **kwargs)

    monkeypatch.setattr(agent_module, "prepare_many", counted)
    burst = _agent(tmp_path, "burst")
    got: dict[str, dict] = {}
    try:
        burst.deliver(_readings(0, FIRST_HOURS))

        def deliver_the_burst(t):  # it lands while the tick's first time runs
            if len(got) == 1:
                burst.deliver(_readings(FIRST_HOURS, FIRST_HOURS + BURST_HOURS))

        _recorded(burst.sites[0], monkeypatch, got, deliver_the_burst)
        ran = burst.tick()
    finally:
        burst.stop()
    assert ran >= BURST_HOURS  # the tick went on through the burst
    assert batches[0] >= 2 and len(batches) == 2
    assert batches[1] >= BURST_HOURS - 1  # the burst as one batch, not one fit at a time

    monkeypatch.setattr(agent_module, "prepare_many", original)
    alone = _agent(tmp_path, "alone")  # the same readings, one hour per tick
    want: dict[str, dict] = {}
    _recorded(alone.sites[0], monkeypatch, want)
    try:
        for k in range(0, FIRST_HOURS + BURST_HOURS, 1):
            alone.deliver(_readings(k, k + 1))
            alone.tick()
    finally:
        alone.stop()
    assert sorted(got) == sorted(want) and len(got) == ran
    for t, result in got.items():
        other = want[t]
        assert result["status"] == other["status"], t
        detection, expected = result.get("detection") or {}, other.get("detection") or {}
        for key in ("p_value", "level_p_value"):
            a, b = detection.get(key), expected.get(key)
            assert (a is None) == (b is None), (t, key)
            if a is not None:
                assert abs(a - b) <= 1e-9 * max(abs(a), abs(b)), (t, key, a, b)
