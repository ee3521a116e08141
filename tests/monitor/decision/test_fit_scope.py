"""What an engine-part fit computes (``FitScope``): a first pass that fits without the
fit's own p-value (scope ``"decision"``, a backfill's written times and an agent catching
up) decides as the full fit does, and a firing result's engine block is then fitted in
full (``Inspector.complete_engine_blocks``): the block an inspection run alone reports."""
from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from monitor.cli import _window_reader
from monitor.compose import build_inspector
from monitor.config import validate_config
from monitor.decision.calibrated_rule import lacks_own_p_value
from monitor.demo.simulate import Scenario, simulate, write_csv
from monitor.inspection import prepare_many
from tests.monitor.test_backfill_agent import _close


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """A simulated stream from a Monday whose s04 drops by 0.9 on its fifteenth day at
    06:00: a week of before window, a week of history, then the change."""
    frame, _ = simulate(Scenario(n_sensors=8, days=17, change_at="2026-01-19T06:00:00Z",
                                 changes={"s04": -0.9}))
    path = tmp_path_factory.mktemp("fit-scope") / "net.csv"
    write_csv(frame, path)
    config = validate_config({"site": "net", "source": {"type": "file", "path": str(path)},
                              "sinks": []})
    inspector = build_inspector(config)
    read, close = _window_reader(config)
    yield inspector, read
    close()


def test_a_decision_fit_decides_as_the_full_fit_and_completes_to_it(site):
    inspector, read = site
    start = datetime(2026, 1, 19, tzinfo=UTC)
    before = [start - timedelta(hours=h) for h in range(160, 0, -1)]
    values = [v for v in inspector.detect_many(before, read) if v is not None]
    assert len(values) > 100
    times = [start + timedelta(hours=h) for h in range(24)]
    decision = prepare_many([(inspector, times, read)], scope="decision")[0]
    full = prepare_many([(inspector, times, read)], scope="full")[0]
    fired = 0
    for t in times:
        narrow = inspector.run(t, read, values, prepared=decision[t]).result
        whole = inspector.run(t, read, values, prepared=full[t]).result
        alone = inspector.run(t, read, values).result  # fitted here, in full
        assert narrow["status"] == whole["status"] == alone["status"]
        assert narrow["selected_sensors"] == whole["selected_sensors"]
        assert narrow["detection"] == whole["detection"]
        assert [s.get("engine_score") for s in narrow["sensors"]] == \
            [s.get("engine_score") for s in whole["sensors"]]
        assert lacks_own_p_value(narrow) == (narrow["engine"] is not None)
        completed = inspector.complete_engine_blocks([(narrow, decision[t])])
        assert completed == (1 if narrow["engine"] is not None else 0)
        assert not lacks_own_p_value(narrow)
        assert _close(narrow["engine"], alone["engine"], skip={"runtime_s"})
        fired += narrow["status"] == "firing" and narrow["engine"] is not None
    assert fired >= 2  # the change's firing results were completed and compared
    # a full fit's block is left as it is
    assert inspector.complete_engine_blocks([(whole, full[times[-1]])]) == 0
