"""Inspections on real executors: a process pool, a Dask ``LocalCluster`` of 2 worker
processes, and a real ``dask scheduler`` + ``dask worker`` pair started as subprocesses on
free loopback ports (tests/servers.py). No mocks.

* ``backfill --cluster`` gives the same results as the inline backfill (same fingerprints,
  statuses, selected sensors, sensor order, incidents; p-values within 1e-6), in time
  order, on the shared L-Town dev data (d1, across the first firing inspections).
* A Dask worker killed (SIGKILL) while it holds tasks, a ``dask worker`` subprocess (the
  other worker finishes) or a ``LocalCluster`` worker process (its nanny starts a new one
  that joins): the scheduler reruns the tasks; every inspection comes back exactly once,
  identical to inline.
* Engine-rule times in batches (InspectionBatch) give the results of one job per time; an
  inspection that kills its worker every time (Dask's KilledWorker, or a local pool that
  breaks each time and is replaced) ends as an ``error`` result and the backfill goes on.
* A config with two sites: one backfill covers both, each site as its own backfill.
* An unreachable scheduler: exit 2 and a message that names the fix.
"""
from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from monitor.cli import main
from tests.killing_executor import KillingExecutor
from tests.result_contract import check
from tests.servers import DaskScheduler, DaskWorker, free_port
from tests.shared_data import DELAY_DEV

# Each backfill of d1 on a cluster takes 1-2.5 min on a slow 2-core VM beside the rest of
# the suite (137 s on 2026-11-29): three times that, as for the other replays here.
pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

D1 = DELAY_DEV / "d1" / "pressures.csv.gz"
# live profile: ok, then the first firing inspections of d1 (an incident opens at 23:00,
# an hour later than before the engine part took its share of the alert level)
LIVE = ["--start", "2019-09-15T21:00", "--end", "2019-09-16T00:00", "--every", "1h"]


def _backfill(tmp_path: Path, name: str, *extra: str) -> list[dict[str, Any]]:
    out = tmp_path / f"{name}.jsonl"
    code = main(["backfill", "--data", str(D1), *LIVE, "--out", str(out), *extra])
    assert code == 0
    results = [json.loads(line) for line in out.read_text().splitlines()]
    for r in results:
        check(r)  # results made on workers escape the in-process schema fixture
    return results


def assert_identical(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> None:
    """Same inspections in the same order, same decisions, p-values within 1e-6, scores
    within float32 rounding."""
    assert [r["inspection_time"] for r in a] == [r["inspection_time"] for r in b]
    for x, y in zip(a, b, strict=True):
        assert x["fingerprint"] == y["fingerprint"]
        assert x["status"] == y["status"], x["inspection_time"]
        assert x["selected_sensors"] == y["selected_sensors"], x["inspection_time"]
        # the same score per sensor up to the optimiser's float32 rounding (a batched fit
        # follows a single one's steps, engine/selectors.py fit_many), 1e-4 of the largest
        # score; hence the same ranking but for sensors whose scores tie within it
        sx = {s["sensor_id"]: s["score"] for s in x["sensors"]}
        sy = {s["sensor_id"]: s["score"] for s in y["sensors"]}
        assert sx.keys() == sy.keys(), x["inspection_time"]
        tol = 1e-4 * max([abs(v) for v in sx.values() if v is not None] + [1e-12])
        for name, score in sx.items():
            other = sy[name]
            assert (score is None) == (other is None), (x["inspection_time"], name)
            if score is not None:
                assert abs(score - other) <= tol, (x["inspection_time"], name, score, other)
        px, py = x["test"]["p_value"], y["test"]["p_value"]
        assert (px is None) == (py is None)
        if px is not None:
            assert abs(px - py) <= 1e-6
        assert x.get("incident") == y.get("incident")
        assert (x.get("detection") or {}).get("history_n") == \
            (y.get("detection") or {}).get("history_n")


@pytest.fixture(scope="module")
def inline(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """The reference: the ordinary one-at-a-time backfill."""
    results = _backfill(tmp_path_factory.mktemp("inline"), "inline")
    assert [r["status"] for r in results] == ["ok", "ok", "firing", "firing"]
    assert results[2]["incident"]["event"] == "opened"
    return results


@pytest.fixture
def scheduler(tmp_path: Path) -> Iterator[DaskScheduler]:
    server = DaskScheduler(tmp_path / "dask").start()
    yield server
    server.stop()


def test_local_pool_gives_the_inline_results(inline: list[dict[str, Any]],
                                             tmp_path: Path) -> None:
    assert_identical(inline, _backfill(tmp_path, "local", "--cluster", "local:2"))


def test_dask_local_cluster_gives_the_inline_results(inline: list[dict[str, Any]],
                                                     tmp_path: Path) -> None:
    assert_identical(inline, _backfill(tmp_path, "dask", "--cluster", "dask:2"))


def test_dask_scheduler_and_worker_give_the_inline_results(
        inline: list[dict[str, Any]], scheduler: DaskScheduler, tmp_path: Path) -> None:
    with DaskWorker(tmp_path / "w", scheduler.address, name="w0"):
        results = _backfill(tmp_path, "remote", "--cluster", scheduler.address)
    assert_identical(inline, results)


def test_unreachable_scheduler_names_the_fix(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    address = f"tcp://127.0.0.1:{free_port()}"  # nothing listens there
    code = main(["backfill", "--data", str(D1), *LIVE, "--out", str(tmp_path / "x.jsonl"),
                 "--cluster", address])
    assert code == 2
    err = capsys.readouterr().err
    assert f"cannot reach the Dask scheduler at {address}" in err
    assert "dask scheduler" in err and "type: local" in err
    assert not (tmp_path / "x.jsonl").exists() or not (tmp_path / "x.jsonl").read_text()


def test_scheduler_without_workers_names_the_fix(scheduler: DaskScheduler, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    # jobs sent to a scheduler without workers would never come back: refuse after 15 s
    code = main(["backfill", "--data", str(D1), *LIVE, "--out", str(tmp_path / "x.jsonl"),
                 "--cluster", scheduler.address])
    assert code == 2
    err = capsys.readouterr().err
    assert "has 0 worker(s)" in err and "dask worker" in err


@pytest.fixture(scope="module")
def engine_rule() -> Iterator[tuple[Any, list[datetime], list[dict[str, Any]]]]:
    """(site backfill factory, times, inline results) under the engine rule: independent
    inspections, the live windows and mmd-baseline keeping each fit near a second."""
    from monitor.cli import _site_backfill, _window_reader
    from monitor.compose import build_inspector
    from monitor.config import validate_config
    from monitor.fleet.backfill import plan_backfill, run_backfill
    from monitor.fleet.executors import InlineExecutor

    config = validate_config({"site": "d1", "source": {"type": "file", "path": str(D1)},
                              "sinks": [], "decision": {"rule": "engine"},
                              "engine": {"method": "mmd-baseline"}})
    inspector = build_inspector(config)
    read, close = _window_reader(config)
    t0 = datetime(2019, 9, 15, tzinfo=UTC)
    times = [t0 + timedelta(hours=3 * i) for i in range(6)]

    def site() -> Any:
        return _site_backfill(config, inspector, read, plan_backfill(times, None, None))

    reference: list[dict[str, Any]] = []
    run_backfill([site()], InlineExecutor(), reference.append)
    yield site, times, reference
    close()


def _kill_on_first_result(executor: Any, kill: Any, killed: list[str],
                          results: list[dict[str, Any]]) -> Any:
    """on_result for run_backfill: at the first result, ``kill(address)`` a worker that
    holds tasks right now (records its address in ``killed``)."""

    def on_result(result: dict[str, Any]) -> None:
        results.append(result)
        if not killed:
            busy = [addr for addr, keys in executor.client.processing().items() if keys]
            if busy:
                kill(busy[0])
                killed.append(busy[0])

    return on_result


def _check_once(results: list[dict[str, Any]], reference: list[dict[str, Any]],
                killed: list[str]) -> None:
    assert killed, "no worker held a task when the first result came back"
    for r in results:
        check(r)
    done = [r["inspection_time"] for r in results]
    assert len(done) == len(set(done)) == len(reference)  # none lost, none doubled
    assert_identical(reference, results)


def test_worker_killed_mid_backfill_every_inspection_exactly_once(
        engine_rule: Any, scheduler: DaskScheduler, tmp_path: Path) -> None:
    """Two ``dask worker`` processes; the one holding tasks when the first result arrives
    is killed with SIGKILL; the other finishes its tasks (Dask reschedules them)."""
    from monitor.fleet.backfill import run_backfill
    from monitor.fleet.executors import DaskExecutor

    site, _, reference = engine_rule
    workers = [DaskWorker(tmp_path / f"w{i}", scheduler.address, name=f"w{i}").start()
               for i in range(2)]
    executor = DaskExecutor(scheduler.address, retries=0)  # worker loss is not a retry
    killed: list[str] = []
    results: list[dict[str, Any]] = []
    try:
        executor.wait_for_workers(2, timeout=40)
        info = executor.client.scheduler_info(n_workers=-1)["workers"]
        by_address = {a: next(w for w in workers if w.name == i.get("name"))
                      for a, i in info.items()}
        run_backfill([site()], executor, _kill_on_first_result(
            executor, lambda addr: by_address[addr].kill(), killed, results))
    finally:
        executor.close()
        for w in workers:
            w.stop()
    _check_once(results, reference, killed)


def test_local_cluster_worker_killed_its_nanny_restarts_it(engine_rule: Any) -> None:
    """A ``LocalCluster`` of 2: the worker process holding tasks is SIGKILLed; its nanny
    starts a new worker process that joins, and every inspection comes back once. The
    workers, the new one too, are forked from the forkserver that holds the inspection
    code: torch is imported in them before they have run anything."""
    import os
    import signal
    import sys

    from monitor.fleet.backfill import run_backfill
    from monitor.fleet.executors import DaskExecutor

    site, _, reference = engine_rule
    executor = DaskExecutor(None, workers=2, retries=0)
    killed: list[str] = []
    results: list[dict[str, Any]] = []
    try:
        executor.wait_for_workers(2, timeout=60)
        assert all(executor.client.run(lambda: "torch" in sys.modules).values())
        pids = executor.client.run(os.getpid)  # worker address -> its process id
        run_backfill([site()], executor, _kill_on_first_result(
            executor, lambda addr: os.kill(pids[addr], signal.SIGKILL), killed, results))
        executor.wait_for_workers(2, timeout=60)  # the nanny's new worker joined
        after = executor.client.run(os.getpid)
        assert set(after.values()).isdisjoint({pids[a] for a in killed})
        new = [a for a in after if a not in pids]
        assert new and all(executor.client.run(lambda: "torch" in sys.modules,
                                               workers=new).values())
    finally:
        executor.close()
    _check_once(results, reference, killed)

def test_batches_on_dask_give_the_results_of_one_job_per_time(engine_rule: Any) -> None:
    """Engine-rule times travel three to a job (InspectionBatch) on a LocalCluster of 2:
    every inspection once, in time order, identical to inline one at a time."""
    from monitor.fleet.backfill import run_backfill
    from monitor.fleet.executors import DaskExecutor

    site, _, reference = engine_rule
    executor = DaskExecutor(None, workers=2)
    results: list[dict[str, Any]] = []
    try:
        run_backfill([site()], executor, results.append, batch=3)
    finally:
        executor.close()
    for r in results:
        check(r)
    assert_identical(reference, results)


def _check_killer_recorded(results: list[dict[str, Any]], reference: list[dict[str, Any]],
                           killer: int, cause: str) -> None:
    """Every time once, in order; the ``killer``-th an error naming ``cause`` with its
    usual fingerprint, the others identical to ``reference``."""
    for r in results:
        check(r)
    assert [r["inspection_time"] for r in results] == [r["inspection_time"] for r in reference]
    bad = results[killer]
    assert bad["status"] == "error" and cause in bad["error"]
    assert bad["fingerprint"] == reference[killer]["fingerprint"]
    others = [r for i, r in enumerate(results) if i != killer]
    assert_identical([r for i, r in enumerate(reference) if i != killer], others)


def test_an_inspection_that_kills_its_worker_every_time_ends_as_an_error(
        engine_rule: Any) -> None:
    """Dask gives up on a task whose worker died ``allowed-failures`` times (KilledWorker):
    its batch is split into one job per time, the one inspection that kills its worker
    ends as an ``error`` result naming the cause, and every other inspection comes back
    once, identical to inline. One worker and one task in flight, so that no innocent task
    shares the dying worker."""
    import dask
    import distributed  # noqa: F401 - loads the distributed.* config defaults

    from monitor.fleet.backfill import run_backfill
    from monitor.fleet.executors import DaskExecutor

    site, times, reference = engine_rule
    with dask.config.set({"distributed.scheduler.allowed-failures": 0}):
        executor = DaskExecutor(None, workers=1, retries=0)
    results: list[dict[str, Any]] = []
    try:
        run_backfill([site()], KillingExecutor(executor, times[2]), results.append,
                     batch=3, max_in_flight=1)
    finally:
        executor.close()
    _check_killer_recorded(results, reference, 2, "KilledWorker")


def test_a_pool_that_loses_a_process_is_replaced_and_the_backfill_goes_on(
        engine_rule: Any) -> None:
    """A local pool of 2 whose task for one time kills its process every time (as
    `backfill --cluster local:2` builds it, a RenewableExecutor): each broken pool is replaced;
    the jobs that died with it run again one at a time, a batch split into single times,
    and the time that kills its process is recorded as an ``error`` after its second death
    alone. The other five come back once, identical to inline."""
    from monitor.fleet.backfill import run_backfill
    from monitor.fleet.executors import LocalExecutor, RenewableExecutor

    site, times, reference = engine_rule

    def pool() -> KillingExecutor:
        return KillingExecutor(LocalExecutor(2), times[2])

    executor = RenewableExecutor(pool(), pool)
    results: list[dict[str, Any]] = []
    try:
        run_backfill([site()], executor, results.append, batch=3)
    finally:
        executor.close()
    _check_killer_recorded(results, reference, 2, "BrokenProcessPool")


def test_a_calibration_statistic_that_kills_its_process_is_left_out_and_the_backfill_goes_on(
        ) -> None:
    """The calibration history of a live-profile backfill on a local pool of 2 (as
    `backfill --cluster local:2` builds it: a RenewableExecutor), a few times per job: the
    statistic of one history time kills its process every time. The pool is replaced, the
    jobs that died with it run again alone, the batch that then dies alone is sent again
    one time per job, and that one time is left out of the history after its second death
    alone; the inspections then run on the fresh pool. History and results equal the inline
    backfill's with that time left out of its history."""
    from monitor.cli import _site_backfill, _window_reader
    from monitor.compose import build_inspector
    from monitor.config import validate_config
    from monitor.decision.tracker import history_times
    from monitor.fleet.backfill import backfill_history, plan_backfill, run_backfill
    from monitor.fleet.executors import InlineExecutor, LocalExecutor, RenewableExecutor

    config = validate_config({"site": "d1", "source": {"type": "file", "path": str(D1)},
                              "sinks": [], "engine": {"method": "mmd-baseline"},
                              "decision": {"history": "2d", "min_history": "1d"}})
    inspector = build_inspector(config)
    read, close = _window_reader(config)
    t0 = datetime(2019, 9, 15, 21, tzinfo=UTC)
    times = [t0, t0 + timedelta(hours=1)]
    past = history_times(inspector, t0)
    t_kill = past[4]
    try:
        inline = _site_backfill(config, inspector, read, plan_backfill(times, None, None))
        backfill_history(inline, past, InlineExecutor())
        assert inline.tracker is not None and t_kill in inline.tracker.history
        del inline.tracker.history[t_kill]
        reference: list[dict[str, Any]] = []
        run_backfill([inline], InlineExecutor(), reference.append)

        pools: list[KillingExecutor] = []

        def pool() -> KillingExecutor:
            pools.append(KillingExecutor(LocalExecutor(2), t_kill))
            return pools[-1]

        executor = RenewableExecutor(pool(), pool)
        site = _site_backfill(config, inspector, read, plan_backfill(times, None, None))
        results: list[dict[str, Any]] = []
        try:
            added = backfill_history(site, past, executor)
            run_backfill([site], executor, results.append)
        finally:
            executor.close()
    finally:
        close()
    assert site.tracker is not None
    assert added == len(past) - 1
    assert list(site.tracker.history) == list(inline.tracker.history)  # t_kill in neither
    # (level, engine statistic) per time; the engine part's fits are float64 (1e-14)
    assert np.ravel(list(site.tracker.history.values())).tolist() == pytest.approx(
        np.ravel(list(inline.tracker.history.values())).tolist(), rel=1e-9)
    # the first broke with others in it; then t_kill's batch broke one alone and was sent
    # again one time per job; then t_kill broke one alone, twice
    assert len(pools) == 5
    for r in results:
        check(r)
    assert_identical(reference, results)


SENSORS = ['n131', 'n150', 'n202', 'n23', 'n248', 'n253', 'n262', 'n285', 'n3', 'n313', 'n32',
           'n323', 'n330', 'n334', 'n340', 'n401', 'n412', 'n447', 'n475', 'n478', 'n566',
           'n587', 'n607', 'n631', 'n634', 'n657', 'n693', 'n732', 'n747', 'n75']


def test_backfill_of_several_sites_matches_each_site_alone(tmp_path: Path) -> None:
    """A config with two sites (d1's sensors split in two): ``--cluster local:2`` covers
    both sites, in time order, each result as the site's own single-site backfill gives."""
    import yaml

    config = tmp_path / "fleet.yaml"
    config.write_text(yaml.safe_dump({
        "source": {"type": "file", "path": str(D1)}, "sinks": [],
        "state_dir": str(tmp_path / "state"),
        # fewer history times, and no engine part (the other tests here keep it): faster
        "decision": {"history": "3d", "min_history": "2d", "engine_weight": 0},
        "sites": [{"id": "west", "sensors": SENSORS[::2]},
                  {"id": "east", "sensors": SENSORS[1::2]}]}))
    span = ["--start", "2019-09-15T21:00", "--end", "2019-09-15T22:00", "--every", "1h"]

    def backfill(name: str, *extra: str) -> list[dict[str, Any]]:
        out = tmp_path / f"{name}.jsonl"
        assert main(["backfill", "--config", str(config), *span, "--out", str(out),
                     *extra]) == 0
        results = [json.loads(line) for line in out.read_text().splitlines()]
        for r in results:
            check(r)
        return results

    fleet = backfill("fleet", "--cluster", "local:2")
    assert [(r["inspection_time"][11:16], r["site"]) for r in fleet] == [
        ("21:00", "west"), ("21:00", "east"), ("22:00", "west"), ("22:00", "east")]
    for site in ("west", "east"):
        alone = backfill(site, "--site", site)
        assert_identical(alone, [r for r in fleet if r["site"] == site])
