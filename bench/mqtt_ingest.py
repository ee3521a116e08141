"""How many readings per second the MQTT source commits into the agent's store.

A real mosquitto (started here on a free loopback port, as the tests do) and the real
``MqttSource`` -> ``monitor.storage.store.ReadingStore`` path (SQLite, WAL). Two modes:

* ``backlog``: the readings are queued on the broker for the source's persistent session
  while it is away (as after an agent restart); timed from ``start`` to the last commit.
  This measures the source and the store, not the publisher.
* ``live``: a separate publisher process publishes while the source runs; timed from the
  first publish to the last commit (the Python publisher may be the limit here).

Each run varies the payload shape: one reading per message (one JSON object, the usual
device behaviour) or a JSON array of readings per message (gateways).

``--e2e N`` also measures, N times, the end-to-end latency of a real ``mmdwatch run``
(the e2e test's scenario: 24 sensors, 15 days at 5 min, a leak in 3 sensors): everything
up to the last reading before ``t + after`` is published and committed first; then the one
reading that completes the after window is published, and the clock runs from its PUBACK
to the alert's arrival on ``mmdwatch/<site>/alert`` (schedule poll 1 s + windows + engine
+ outbox + MQTT publish).

    python -m bench.mqtt_ingest                      # default table
    python -m bench.mqtt_ingest --readings 200000 --per-message 1 50
    python -m bench.mqtt_ingest --e2e 3

Writes bench/results/mqtt_ingest.csv (and mqtt_e2e_latency.csv) and prints a table.
"""
from __future__ import annotations

import argparse
import csv
import json
import multiprocessing
import os
import platform
import tempfile
import time
from pathlib import Path

import paho.mqtt.client as mqtt

from connectors.mqtt import MqttSource
from monitor.storage.store import ReadingStore
from tests.servers import MosquittoServer

RESULTS = Path(__file__).resolve().parent / "results"
T0 = 1_717_200_000


def payloads(n_readings: int, per_message: int, n_sensors: int = 1000) -> list[bytes]:
    """Messages holding ``n_readings`` readings of ``n_sensors`` sensors at 5-min steps."""
    out: list[bytes] = []
    items = []
    for i in range(n_readings):
        items.append({"sensor": f"s{i % n_sensors:05d}", "time": T0 + 300 * (i // n_sensors),
                      "value": (i % 997) / 10})
        if len(items) == per_message:
            out.append(json.dumps(items[0] if per_message == 1 else items).encode())
            items = []
    if items:
        out.append(json.dumps(items).encode())
    return out


def publish(port: int, messages: list[bytes], topic: str = "sensors/bench") -> None:
    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2)
    client.max_inflight_messages_set(1000)
    client.max_queued_messages_set(0)
    client.connect("127.0.0.1", port)
    client.loop_start()
    # Packet ids are 16-bit: never have more than 65,535 messages in flight at once.
    for i in range(0, len(messages), 20_000):
        infos = [client.publish(topic, m, qos=1) for m in messages[i:i + 20_000]]
        for info in infos:
            info.wait_for_publish(120)
    client.disconnect()
    client.loop_stop()


def _source(port: int) -> MqttSource:
    return MqttSource({"type": "mqtt", "host": "127.0.0.1", "port": port,
                       "topics": ["sensors/#"], "client_id": "bench-agent",
                       "reconnect_min_s": 0.2})


def _wait_for(store: ReadingStore, source: MqttSource, n: int, timeout: float) -> float:
    deadline = time.monotonic() + timeout
    while source.health()["accepted"] < n:
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {source.health()['accepted']} of {n} readings committed")
        time.sleep(0.005)
    return time.perf_counter()


def run_one(mode: str, n_readings: int, per_message: int, workdir: Path) -> dict:
    messages = payloads(n_readings, per_message)
    with MosquittoServer(workdir / f"broker-{mode}-{per_message}") as broker:
        store = ReadingStore(workdir / f"store-{mode}-{per_message}.sqlite")
        source = _source(broker.port)
        if mode == "backlog":
            source.start(store.add)  # registers the persistent session and subscription
            while not source.health()["connected"]:
                time.sleep(0.01)
            source.stop()
            publish(broker.port, messages)
            source = _source(broker.port)
            t0 = time.perf_counter()
            source.start(store.add)
            t1 = _wait_for(store, source, n_readings, timeout=600)
        else:
            source.start(store.add)
            while not source.health()["connected"]:
                time.sleep(0.01)
            proc = multiprocessing.Process(target=publish, args=(broker.port, messages))
            t0 = time.perf_counter()
            proc.start()
            t1 = _wait_for(store, source, n_readings, timeout=600)
            proc.join()
        source.stop()
        health = source.health()
        stored = store.count() if hasattr(store, "count") else None
        store.close()
    seconds = t1 - t0
    return {"mode": mode, "readings": n_readings, "per_message": per_message,
            "messages": len(messages), "seconds": round(seconds, 3),
            "readings_per_s": round(n_readings / seconds),
            "messages_per_s": round(len(messages) / seconds),
            "accepted": health["accepted"], "stored": stored,
            "machine": f"{platform.machine()} {multiprocessing.cpu_count()} cores",
            "load_1min": round(os.getloadavg()[0], 1)}


def run_e2e(workdir: Path) -> dict:
    """One end-to-end latency measurement with a real ``mmdwatch run`` process."""
    import sqlite3

    from tests.connectors.mqtt_helpers import Subscriber, wait_until
    from tests.integration import scenario as sc

    times, values = sc.network()
    closing = int(sc.T_CHANGE + 7 * 86400)  # the first reading at t + after completes it
    messages = list(sc.mqtt_messages(times, values))
    cut = int(list(times).index(closing))
    workdir.mkdir(parents=True)
    with MosquittoServer(workdir / "broker", persistent=True) as broker:
        config = sc.base_config(workdir / "state")
        conn = {"host": "127.0.0.1", "port": broker.port}
        config["source"] = {"type": "mqtt", **conn, "topics": [f"{sc.TOPIC_PREFIX}/#"],
                            "client_id": "mmdwatch-bench"}
        config["sinks"].append({"type": "mqtt", **conn, "prefix": "mmdwatch"})
        agent = sc.AgentProcess(sc.write_config(workdir / "agent.yaml", config),
                                workdir / "agent.log", cwd=workdir)
        sub = Subscriber(broker, f"mmdwatch/{sc.SITE}/alert")
        try:
            if not agent.wait_for_log("MQTT source connected", timeout=60):
                raise RuntimeError(agent.log_text()[-2000:])
            sc.publish_all("127.0.0.1", broker.port, iter(messages[:cut]))
            expected = cut * len(sc.SENSORS)
            store = workdir / "state" / "readings.sqlite"

            def committed() -> bool:
                db = sqlite3.connect(store)
                try:
                    return db.execute("SELECT count(*) FROM readings").fetchone()[0] >= expected
                finally:
                    db.close()

            if not wait_until(committed, timeout=120):
                raise RuntimeError("the agent did not commit the readings")
            time.sleep(2.0)  # let a few idle schedule ticks pass
            sent = sc.publish_all("127.0.0.1", broker.port, iter(messages[cut:cut + 1]))
            if not wait_until(lambda: sub.on(f"mmdwatch/{sc.SITE}/alert"), timeout=900,
                              every=0.005):
                raise RuntimeError("no alert: " + agent.log_text()[-2000:])
            latency = time.monotonic() - sent
            alert = json.loads(sub.on(f"mmdwatch/{sc.SITE}/alert")[0][0])
        finally:
            sub.close()
            agent.stop()
    return {"latency_s": round(latency, 3),
            "engine_runtime_s": alert["generator"]["runtime_s"],
            "selected": " ".join(alert["selected_sensors"]),
            "p_value": alert["test"]["p_value"],
            "machine": f"{platform.machine()} {multiprocessing.cpu_count()} cores",
            "load_1min": round(os.getloadavg()[0], 1)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--readings", type=int, default=100_000)
    parser.add_argument("--per-message", type=int, nargs="+", default=[1, 100])
    parser.add_argument("--modes", nargs="+", default=["backlog", "live"],
                        choices=["backlog", "live"])
    parser.add_argument("--out", type=Path, default=RESULTS / "mqtt_ingest.csv")
    parser.add_argument("--e2e", type=int, default=0, metavar="N",
                        help="also measure the reading-to-alert latency N times")
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="mmdwatch-bench-") as tmp:
        e2e_rows = []
        for i in range(args.e2e):
            row = run_e2e(Path(tmp) / f"e2e-{i}")
            e2e_rows.append(row)
            print(f"e2e {i}: last after-window reading -> alert on the broker "
                  f"{row['latency_s']:.2f}s (engine {row['engine_runtime_s']}s, "
                  f"selected {row['selected']}, p={row['p_value']})", flush=True)
        if e2e_rows:
            e2e_out = args.out.with_name("mqtt_e2e_latency.csv")
            e2e_out.parent.mkdir(parents=True, exist_ok=True)
            with e2e_out.open("w", newline="") as f:
                writer = csv.DictWriter(f, fieldnames=list(e2e_rows[0]))
                writer.writeheader()
                writer.writerows(e2e_rows)
            print(f"wrote {e2e_out}")
        for mode in args.modes:
            for per in args.per_message:
                row = run_one(mode, args.readings, per, Path(tmp))
                rows.append(row)
                print(f"{row['mode']:8s} {row['per_message']:4d}/msg {row['readings']:8d} "
                      f"readings in {row['seconds']:7.2f}s = {row['readings_per_s']:8d} "
                      f"readings/s ({row['messages_per_s']} msg/s)", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
