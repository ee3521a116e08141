"""backfill's progress off a terminal: log lines every 10 % or 30 s, not one huge line."""
from __future__ import annotations

import io
import logging

from monitor.progress import LogProgress, progress_bar


def test_not_a_terminal_gives_periodic_log_lines(caplog):
    assert isinstance(progress_bar(100, "backfill", "insp", stream=io.StringIO()), LogProgress)
    now = [0.0]
    with caplog.at_level(logging.INFO, logger="monitor.progress"), \
            LogProgress(100, "backfill", "insp", clock=lambda: now[0]) as bar:
        for i in range(100):
            now[0] = i * 0.1
            bar.set_postfix_str(f"t{i}")
            bar.update(1)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 10  # every 10 %
    assert lines[0].startswith("backfill: 10/100 insp (10%") and lines[-1].startswith(
        "backfill: 100/100 insp (100%") and lines[-1].endswith("t99")


def test_a_slow_backfill_logs_every_30_s(caplog):
    now = [0.0]
    with caplog.at_level(logging.INFO, logger="monitor.progress"):
        bar = LogProgress(1000, "backfill", "insp", clock=lambda: now[0])
        for _ in range(3):
            now[0] += 31
            bar.update(1)
        bar.close()
    assert [r.getMessage().split(" (")[0] for r in caplog.records] == [
        "backfill: 1/1000 insp", "backfill: 2/1000 insp", "backfill: 3/1000 insp"]
