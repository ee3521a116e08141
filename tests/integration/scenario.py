"""A sensor network with a known change, and a real ``mmdwatch run`` process to watch it.

Shared by the end-to-end tests and ``bench/mqtt_ingest.py --e2e``:

* :func:`network` - 15 days of 5-minute readings for 24 daily-periodic sensors; three of
  them (``CHANGED``) drop by a few metres from ``T_CHANGE`` on (a leak);
* :func:`write_config` - an agent config (YAML) for an MQTT or InfluxDB source;
* :class:`AgentProcess` - ``mmdwatch run --config`` as a child process
  (Popen -> SIGTERM -> wait), its log in a file.
"""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import paho.mqtt.client as mqtt
import yaml

T0 = 1_709_251_200  # 2024-03-01T00:00:00Z
STEP_S = 300
DAYS = 15
T_CHANGE = T0 + 7 * 86400  # inspection time: before [T0, T_CHANGE), after [T_CHANGE, +7d)
SENSORS = [f"s{k:02d}" for k in range(24)]
CHANGED = ["s03", "s11", "s17"]
DROP = 5.0  # metres of pressure lost by the changed sensors
SITE = "e2e-net"
TOPIC_PREFIX = f"sensors/{SITE}"


def iso(epoch_s: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch_s))


def network(seed: int = 0, drop: float = DROP, daily: float = 1.0
            ) -> tuple[np.ndarray, np.ndarray]:
    """``times`` (T,) epoch seconds and ``values`` (T, 24) for the whole 15 days."""
    rng = np.random.default_rng(seed)
    times = T0 + STEP_S * np.arange(DAYS * 86400 // STEP_S)
    hours = (times - T0) / 3600.0
    phase = rng.uniform(0, 2 * np.pi, len(SENSORS))
    level = rng.uniform(40, 60, len(SENSORS))
    cycle = daily * np.sin(2 * np.pi * hours[:, None] / 24 + phase[None, :])
    values = level[None, :] + cycle + rng.normal(0, 0.6, (len(times), len(SENSORS)))
    after = times >= T_CHANGE
    for name in CHANGED:
        values[after, SENSORS.index(name)] -= drop
    return times, values


def mqtt_messages(times: np.ndarray, values: np.ndarray) -> Iterator[tuple[str, bytes]]:
    """One JSON array per time step, all sensors (what a SCADA gateway sends)."""
    for i, t in enumerate(times):
        body = [{"sensor": s, "time": iso(int(t)), "value": round(float(v), 3)}
                for s, v in zip(SENSORS, values[i], strict=True)]
        yield f"{TOPIC_PREFIX}/gateway", json.dumps(body).encode()


def influx_lines(times: np.ndarray, values: np.ndarray, measurement: str = "pressure"
                 ) -> list[str]:
    return [f"{measurement},sensor={s} value={float(values[i, k]):.3f} {int(t)}"
            for i, t in enumerate(times) for k, s in enumerate(SENSORS)]


def publish_all(host: str, port: int, messages: Iterator[tuple[str, bytes]],
                **client_kwargs: Any) -> float:
    """Publish with QoS 1, wait for every PUBACK; return the time.monotonic() of the last."""
    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2)
    client.max_inflight_messages_set(200)
    client.max_queued_messages_set(0)
    if client_kwargs.get("username"):
        client.username_pw_set(client_kwargs["username"], client_kwargs.get("password"))
    client.connect(host, port)
    client.loop_start()
    infos = [client.publish(topic, payload, qos=1) for topic, payload in messages]
    for info in infos:
        info.wait_for_publish(120)
        if not info.is_published():
            raise RuntimeError("publish not acknowledged by the broker")
    done = time.monotonic()
    client.disconnect()
    client.loop_stop()
    return done


def base_config(state_dir: Path) -> dict[str, Any]:
    return {
        "site": SITE,
        "state_dir": str(state_dir),
        "log_level": "INFO",
        "profile": "retrospective",
        "windows": {"before": "7d", "after": "7d", "resample": "1h", "normalise": "before"},
        "schedule": {"every": "1d", "clock": "data", "start": iso(T_CHANGE), "poll": "1s"},
        # The synthetic noise is iid (no day-to-day dependence), so rows may be permuted
        # one by one. The engine's own defaults otherwise: a lighter search (2 splits,
        # 3 lambdas) left the weakest changed sensor unselected on some runs.
        "engine": {"method": "cv-aggregation", "alpha": 0.05, "seed": 0, "device": "cpu",
                   "block_size": None},
        "store": {"retention": "30d"},
        "outbox": {"retry_initial": "1s", "retry_max": "5s"},
        "sinks": [{"type": "jsonl", "path": str(state_dir / "results.jsonl"), "fsync": True}],
    }


def write_config(path: Path, config: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def mmdwatch_command() -> list[str]:
    script = Path(sys.executable).parent / "mmdwatch"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "import sys; from monitor.cli import main; sys.exit(main())"]


class AgentProcess:
    """``mmdwatch run --config FILE`` as a child process; log in ``log_path``."""

    def __init__(self, config_path: Path, log_path: Path, cwd: Path) -> None:
        self.log_path = log_path
        self._log = log_path.open("ab")
        self.proc = subprocess.Popen([*mmdwatch_command(), "run", "--config", str(config_path)],
                                     cwd=cwd, stdout=self._log, stderr=subprocess.STDOUT)

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_for_log(self, needle: str, timeout: float = 60.0, after: int = 0) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if needle in self.log_text()[after:]:
                return True
            if self.proc.poll() is not None:
                return needle in self.log_text()[after:]
            time.sleep(0.05)
        return False

    def wait_for_results(self, results_file: Path, final: Any, timeout: float = 600.0,
                         poll: float = 1.0) -> list[dict[str, Any]]:
        """The agent's finished results once one at inspection time ``final`` (a
        pd.Timestamp, UTC) or later is written; fails with the log's tail when the agent
        dies or ``timeout`` passes first."""
        import pandas as pd

        from tests.results_file import read_results

        deadline = time.monotonic() + timeout
        results: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            if results_file.exists():
                results = read_results(results_file)
                if results and pd.Timestamp(results[-1]["inspection_time"]) >= final:
                    return results
            assert self.proc.poll() is None, self.log_text()[-3000:]
            time.sleep(poll)
        raise AssertionError(f"no result at {final} within {timeout:.0f} s\n"
                             + self.log_text()[-3000:])

    def stop(self, timeout: float = 60.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        return int(self.proc.returncode)
