"""Sustained ingest into the agent's reading store: readings per second and memory.

A 10,000-sensor network at 5-minute sampling needs 33 readings/s; after an outage the
agent must also swallow the backlog, so the target is at least 20,000 readings/s,
sustained, with flat memory. This benchmark streams synthetic readings into the real
:class:`monitor.storage.store.ReadingStore` (SQLite, WAL, on disk, one transaction per batch as
the sources deliver them) for ``--seconds`` of wall time, prunes with the store's
retention as the agent does, and samples the process's resident memory.

    python -m bench.ingest_load                       # 60 s, 10,000 sensors, batches of 5,000
    python -m bench.ingest_load --seconds 120 --sensors 33

Writes ``bench/results/ingest_load.md`` (summary) and ``bench/results/ingest_load.csv``
(RSS and rate every few seconds).
"""
from __future__ import annotations

import argparse
import csv
import logging
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from connectors.base import Reading

log = logging.getLogger("bench.ingest_load")
RESULTS = Path(__file__).resolve().parent / "results"


def rss_kib() -> tuple[int, int]:
    """(current RSS, peak RSS) of this process in KiB, from /proc (Linux)."""
    cur = peak = 0
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                cur = int(line.split()[1])
            elif line.startswith("VmHWM:"):
                peak = int(line.split()[1])
    return cur, peak


def batches(n_sensors: int, batch_size: int, step_s: float, start: float, seed: int = 0):
    """Endless batches of readings: every sensor once per ``step_s``, in time order."""
    rng = np.random.default_rng(seed)
    names = [f"sensor-{i:05d}" for i in range(n_sensors)]
    base = rng.uniform(30.0, 60.0, n_sensors)
    t, i = start, 0
    while True:
        out = []
        while len(out) < batch_size:
            take = min(batch_size - len(out), n_sensors - i)
            values = (base[i:i + take] + rng.normal(0.0, 0.1, take)).tolist()
            out.extend(Reading(names[i + k], t, values[k]) for k in range(take))
            i += take
            if i == n_sensors:
                i, t = 0, t + step_s
        yield out


def run(seconds: float, n_sensors: int, batch_size: int, retention_s: float, state: Path,
        sample_every: float = 5.0) -> dict:
    from monitor.service.metrics import Metrics
    from monitor.storage.store import ReadingStore

    metrics = Metrics()
    store = ReadingStore(state / "readings.sqlite", metrics)
    start_t = 1_700_000_000.0
    gen = batches(n_sensors, batch_size, 300.0, start_t)
    # Warm-up: the first batch creates the sensor rows; measure from a steady state.
    store.add(next(gen))
    rss0, peak0 = rss_kib()
    timeline = []
    t_begin = time.perf_counter()
    next_sample = t_begin + sample_every
    next_prune = t_begin + 10.0
    added = in_add = pruned = 0
    last_n, last_t = 0, t_begin
    while True:
        now = time.perf_counter()
        if now - t_begin >= seconds:
            break
        batch = next(gen)
        a0 = time.perf_counter()
        added += store.add(batch)
        in_add += time.perf_counter() - a0
        if now >= next_prune:
            wm = store.last_time_s() or start_t
            pruned += store.prune(wm - retention_s)
            next_prune = now + 10.0
        if now >= next_sample:
            cur, peak = rss_kib()
            rate = (added - last_n) / (now - last_t)
            timeline.append({"elapsed_s": round(now - t_begin, 1), "readings": added,
                             "rate_per_s": round(rate), "rss_mib": round(cur / 1024, 1),
                             "peak_rss_mib": round(peak / 1024, 1)})
            log.info("%6.1fs %9d readings  %7.0f/s  RSS %.1f MiB", now - t_begin, added, rate,
                     cur / 1024)
            last_n, last_t = added, now
            next_sample = now + sample_every
    wall = time.perf_counter() - t_begin
    rss1, peak1 = rss_kib()
    count = store.count()
    store.close()
    db_mib = sum(p.stat().st_size for p in state.glob("readings.sqlite*")) / 2**20
    return {"seconds": round(wall, 1), "sensors": n_sensors, "batch_size": batch_size,
            "readings": added, "rate_per_s": added / wall, "store_rate_per_s": added / in_add,
            "rss_start_mib": rss0 / 1024, "rss_end_mib": rss1 / 1024,
            "peak_rss_start_mib": peak0 / 1024, "peak_rss_end_mib": peak1 / 1024,
            "rows_in_store": count, "pruned": pruned, "db_mib": db_mib,
            "data_span_h": added / n_sensors * 300 / 3600, "timeline": timeline}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--sensors", type=int, default=10_000)
    ap.add_argument("--batch-size", type=int, default=5_000)
    ap.add_argument("--retention", type=float, default=15 * 86400.0,
                    help="seconds of data kept behind the newest reading (agent default 15 d)")
    ap.add_argument("--state", type=Path, default=None, help="store folder (default: a temp dir)")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="mmdwatch-ingest-") as tmp:
        state = args.state or Path(tmp)
        r = run(args.seconds, args.sensors, args.batch_size, args.retention, state)
    args.out.mkdir(parents=True, exist_ok=True)
    with (args.out / "ingest_load.csv").open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(r["timeline"][0]) if r["timeline"] else ["x"])
        w.writeheader()
        w.writerows(r["timeline"])
    command = "python -m bench.ingest_load " + " ".join(argv if argv is not None else sys.argv[1:])
    md = "\n".join([
        "# Sustained ingest into the reading store",
        "",
        f"Command: `{command.strip()}`",
        "",
        (f"{r['sensors']:,} sensors at 5-minute steps, batches of {r['batch_size']:,} readings "
         "(one SQLite transaction each, as a source delivers them), on-disk SQLite WAL store, "
         "pruned every 10 s to the retention. Target: >= 20,000 readings/s."),
        "",
        ("| wall s | readings | readings/s (end to end) | readings/s (inside store.add) | "
         "RSS start MiB | RSS end MiB | peak RSS start MiB | peak RSS end MiB | rows kept | "
         "data span h | store MiB |"),
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        (f"| {r['seconds']} | {r['readings']:,} | {r['rate_per_s']:,.0f} | "
         f"{r['store_rate_per_s']:,.0f} | {r['rss_start_mib']:.1f} | {r['rss_end_mib']:.1f} | "
         f"{r['peak_rss_start_mib']:.1f} | {r['peak_rss_end_mib']:.1f} | "
         f"{r['rows_in_store']:,} | {r['data_span_h']:.1f} | {r['db_mib']:.1f} |"),
        "",
        "RSS every 5 s: `ingest_load.csv`. End to end includes building the Reading objects.",
        "",
    ])
    (args.out / "ingest_load.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
