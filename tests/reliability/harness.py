"""Helpers for the fault tests: a real ``mmdwatch run`` process, its state on disk, and
mounts that make disk trouble real (a read-only or a tiny tmpfs)."""
from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from tests.integration import scenario as sc
from tests.results_file import read_results


def network_csv(path: Path, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The shared scenario network (24 sensors, 15 days, 5 min) as a long CSV."""
    times, values = sc.network(seed=seed)
    frame = pd.DataFrame({
        "time": np.repeat(times, len(sc.SENSORS)),
        "sensor": np.tile(sc.SENSORS, len(times)),
        "value": values.reshape(-1).round(3),
    })
    frame["time"] = pd.to_datetime(frame["time"], unit="s", utc=True).dt.strftime(
        "%Y-%m-%dT%H:%M:%SZ")
    frame.to_csv(path, index=False)
    return times, values


def fast_config(state_dir: Path) -> dict[str, Any]:
    """An agent config whose inspections are quick: 2-day windows, one fit per inspection.
    The statistics do not matter here; the plumbing does."""
    config = sc.base_config(state_dir)
    config["windows"] = {"before": "2d", "after": "2d", "resample": "1h", "normalise": "before"}
    config["schedule"] = {"every": "1d", "clock": "data", "start": sc.iso(sc.T0 + 2 * 86400),
                          "poll": "1s"}
    config["engine"] = {"method": "mmd-baseline", "alpha": 0.05, "seed": 0, "device": "cpu",
                        "block_size": None}
    config["outbox"] = {"retry_initial": "1s", "retry_max": "4s"}
    return config


#: inspection times of fast_config on the 15-day network: T0+2d ... T0+13d
FAST_TIMES = [sc.T0 + d * 86400 for d in range(2, 14)]


def query(db: Path, sql: str, params: tuple = ()) -> list[tuple]:
    """Read the agent's SQLite state from outside (WAL lets us read while it writes)."""
    if not db.exists():
        return []
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    try:
        return conn.execute(sql, params).fetchall()
    except sqlite3.OperationalError:
        return []  # schema not created yet
    finally:
        conn.close()


def store_count(state_dir: Path) -> int:
    rows = query(state_dir / "readings.sqlite", "SELECT count(*) FROM readings")
    return rows[0][0] if rows else 0


def done_times(state_dir: Path) -> list[float]:
    return [r[0] for r in query(state_dir / "state.sqlite",
                                "SELECT inspection_time FROM done ORDER BY inspection_time")]


def outbox_size(state_dir: Path) -> int:
    rows = query(state_dir / "state.sqlite", "SELECT count(*) FROM outbox")
    return rows[0][0] if rows else 0


def jsonl_results(path: Path) -> list[dict]:
    """The finished results of a JSONL sink whose agent these tests may have killed mid-write."""
    return read_results(path, skip_torn=True)


def wait_for(predicate, timeout: float, every: float = 0.1) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(every)
    return bool(predicate())


def start_agent(tmp_path: Path, config: dict, name: str = "agent") -> sc.AgentProcess:
    path = sc.write_config(tmp_path / f"{name}.yaml", config)
    return sc.AgentProcess(path, tmp_path / f"{name}.log", cwd=tmp_path)


def sigkill(agent: sc.AgentProcess) -> None:
    agent.proc.send_signal(signal.SIGKILL)
    agent.proc.wait(timeout=10)
    agent._log.close()


class Publisher(threading.Thread):
    """Publishes (topic, payload) pairs with QoS 1 in the background, a little at a time,
    so a test can crash the agent in the middle of the stream."""

    def __init__(self, port: int, messages: list[tuple[str, bytes]], pause_every: int = 50,
                 pause_s: float = 0.01) -> None:
        super().__init__(daemon=True)
        self.port, self.messages = port, messages
        self.pause_every, self.pause_s = pause_every, pause_s
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            for i in range(0, len(self.messages), self.pause_every):
                sc.publish_all("127.0.0.1", self.port, iter(self.messages[i:i + self.pause_every]))
                time.sleep(self.pause_s)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc


@contextlib.contextmanager
def tmpfs(path: Path, size: str, readonly: bool = False) -> Iterator[Path]:
    """Mount a tmpfs of ``size`` at ``path`` (root only); skip the test where mounting is
    not allowed (no CAP_SYS_ADMIN)."""
    path.mkdir(parents=True, exist_ok=True)
    opts = f"size={size},mode=0700" + (",ro" if readonly else "")
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "mmdwatch-test", str(path)],
                         capture_output=True, text=True, check=False)
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({res.stderr.strip() or res.returncode}); "
                    "run as root with CAP_SYS_ADMIN to test disk trouble")
    try:
        yield path
    finally:
        for _ in range(50):
            if subprocess.run(["umount", str(path)], capture_output=True, check=False).returncode == 0:
                break
            time.sleep(0.1)
        else:  # still busy (a child that outlived the test): detach it rather than leak it
            subprocess.run(["umount", "-l", str(path)], capture_output=True, check=False)


def remount(path: Path, size: str) -> None:
    subprocess.run(["mount", "-o", f"remount,size={size}", str(path)], check=True)


def can_mount() -> bool:
    return os.geteuid() == 0
