"""``mmdwatch demo`` end to end: the bundled network through the real agent."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_demo_runs_end_to_end_and_names_the_changed_sensors(tmp_path):
    state = tmp_path / "demo"
    out = subprocess.run([sys.executable, "-m", "monitor.cli", "demo", "--state-dir",
                          str(state), "--no-report"], capture_output=True, text=True,
                         cwd=ROOT, timeout=300, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    truth = json.loads((ROOT / "monitor" / "data" / "demo-network.truth.json").read_text())
    results = [json.loads(x) for x in (state / "results.jsonl").read_text().splitlines()]
    # 14 days of data, 7-day windows: the one complete inspection is at 2026-01-12, six
    # hours before the injected leak
    assert [r["inspection_time"] for r in results] == ["2026-01-12T00:00:00Z"]
    result = results[0]
    assert result["status"] == "firing", result["summary"]
    assert set(result["selected_sensors"]) & set(truth["changed_sensors"])
    assert result["sensors"][0]["sensor_id"] in truth["changed_sensors"]
    # the console alert and the closing lines
    assert "[FIRING] demo-network 2026-01-12T00:00:00Z" in out.stdout
    assert "changed sensors:" in out.stdout
    assert str(state / "results.jsonl") in out.stdout
    assert "Injected change: s04, s06" in out.stdout
    # both injected sensors are named by the alert
    assert set(result["selected_sensors"]) == set(truth["changed_sensors"])
    # nothing left undelivered
    import sqlite3

    with sqlite3.connect(state / "state.sqlite") as conn:
        assert conn.execute("SELECT COUNT(*) FROM outbox").fetchone()[0] == 0
        assert conn.execute("SELECT COUNT(*) FROM done").fetchone()[0] == 1
