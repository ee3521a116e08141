"""Reports how many generated inputs the fuzz properties checked."""
from __future__ import annotations

import pytest

from tests.fuzz.budget import REQUIRED_TOTAL, TALLY


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not TALLY:
        return
    parts = ", ".join(f"{k}: {v:,}" for k, v in sorted(TALLY.items()))
    total = sum(TALLY.values())
    terminalreporter.write_line(
        f"fuzz: {total:,} generated inputs checked ({parts}); required in total: "
        f"{REQUIRED_TOTAL:,}"
    )
