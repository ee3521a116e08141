"""The executor config, ``--cluster`` parsing, inspection jobs and the in-process executor
(no worker processes here: tests/integration/test_dask_executor.py starts real ones)."""
from __future__ import annotations

import pickle
from datetime import UTC, datetime

import numpy as np
import pandas as pd
import pytest

from monitor.config import ConfigError, ExecutorConfig, validate_config, validate_executor
from monitor.demo.simulate import Scenario, simulate
from monitor.fleet.executors import InlineExecutor, build_executor, default_workers, parse_cluster
from monitor.fleet.jobs import InspectionJob, InspectorSettings, JobError, run_detect, run_job


def test_executor_defaults_to_a_local_pool() -> None:
    config = validate_config({"source": {"type": "file", "path": "x.csv"}})
    assert config.executor.type == "local" and config.executor.workers is None
    assert 1 <= default_workers() <= 2


@pytest.mark.parametrize("raw, problem", [
    ({"type": "local", "address": "tcp://h:8786"}, "only for type: dask"),
    ({"type": "dask", "address": "h:8786"}, "needs a scheme"),
    ({"type": "dask", "workers": 0}, "greater than or equal to 1"),
    ({"type": "kubernetes"}, "'local', 'inline' or 'dask'"),
    ({"type": "dask", "adress": "tcp://h:8786"}, "did you mean 'address'"),
])
def test_bad_executor_sections_name_the_fix(raw: dict, problem: str) -> None:
    with pytest.raises(ConfigError) as info:
        validate_executor(raw)
    assert problem in str(info.value)


@pytest.mark.parametrize("text, expected", [
    ("local", {"type": "local"}),
    ("local:3", {"type": "local", "workers": 3}),
    ("dask:2", {"type": "dask", "workers": 2}),
    ("inline", {"type": "inline"}),
    ("tcp://10.0.0.5:8786", {"type": "dask", "address": "tcp://10.0.0.5:8786"}),
    ("scheduler:8786", {"type": "dask", "address": "tcp://scheduler:8786"}),
])
def test_cluster_option_forms(text: str, expected: dict) -> None:
    assert parse_cluster(text) == expected
    validate_executor(expected)


@pytest.mark.parametrize("text", ["local:0", "local:x", "", ":8786"])
def test_bad_cluster_option(text: str) -> None:
    with pytest.raises(ValueError, match="local"):
        parse_cluster(text)


def test_one_worker_or_inline_runs_in_process() -> None:
    for config in (ExecutorConfig(type="inline"), ExecutorConfig(type="local", workers=1)):
        executor = build_executor(config)
        assert isinstance(executor, InlineExecutor)
        assert executor.submit(pow, 2, 5).result() == 32
        failed = executor.submit(int, "x")
        assert isinstance(failed.exception(), ValueError)
        executor.close()


def _inspector():  # type: ignore[no-untyped-def]
    from monitor.compose import build_inspector

    config = validate_config({"site": "sim", "source": {"type": "file", "path": "x.csv"},
                              "decision": {"rule": "engine"},
                              "engine": {"method": "mmd-baseline"}})
    return build_inspector(config)


def _frame() -> pd.DataFrame:
    frame, _ = simulate(Scenario(days=9, change_at=None, seed=3))
    return frame


def test_job_needs_exactly_one_way_to_its_windows() -> None:
    settings = InspectorSettings.of(_inspector())
    t = datetime(2026, 1, 9, tzinfo=UTC)
    with pytest.raises(JobError, match="exactly one of frame"):
        InspectionJob(settings, t)


def test_a_job_pickles_and_gives_the_inline_result() -> None:
    from monitor.decision.tracker import cached_reader

    inspector = _inspector()
    read = cached_reader(_frame())
    t = datetime(2026, 1, 8, 6, tzinfo=UTC)
    job = InspectionJob.with_windows(InspectorSettings.of(inspector), t, read,
                                     history=np.array([[1.0, 0.4], [2.0, 0.6]]))
    assert job.history == ((1.0, 0.4), (2.0, 0.6)) and job.site == "sim"
    shipped = pickle.loads(pickle.dumps(job))
    result = run_job(shipped)
    inline = inspector.run(t, read).result
    assert result["fingerprint"] == inline["fingerprint"]
    assert result["status"] == inline["status"]
    assert result["test"]["p_value"] == pytest.approx(inline["test"]["p_value"], abs=1e-6)
    assert result["selected_sensors"] == inline["selected_sensors"]
    assert run_detect(shipped) == inspector.detect(t, read)


def _counting(read):  # type: ignore[no-untyped-def]
    """``read`` that records the ranges asked of it."""
    asked: list[tuple[pd.Timestamp, pd.Timestamp]] = []

    def counted(start: pd.Timestamp, end: pd.Timestamp) -> pd.DataFrame:
        asked.append((start, end))
        return read(start, end)

    return counted, asked


def _same(a: dict, b: dict) -> None:
    assert a["fingerprint"] == b["fingerprint"]
    assert a["status"] == b["status"]
    assert a["selected_sensors"] == b["selected_sensors"]
    assert [s["sensor_id"] for s in a["sensors"]] == [s["sensor_id"] for s in b["sensors"]]
    assert a["test"]["p_value"] == pytest.approx(b["test"]["p_value"], abs=1e-6)


def test_a_batch_reads_its_span_once_and_gives_one_job_per_time() -> None:
    """An InspectionBatch (CV-aggregation: the fits go through fit_many on the worker)
    carries one frame of its whole span, pickles, and gives the results of one job per
    time, in time order."""
    from monitor.compose import build_inspector
    from monitor.decision.tracker import cached_reader
    from monitor.fleet.jobs import InspectionBatch, run_batch

    config = validate_config({"site": "sim", "source": {"type": "file", "path": "x.csv"},
                              "decision": {"rule": "engine"},
                              "engine": {"method": "cv-aggregation",
                                         "params": {"n_splits": 3}}})
    inspector = build_inspector(config)
    settings = InspectorSettings.of(inspector)
    # from a week before the first window: a before window the data begins inside is
    # incomplete (nothing is carried back over it)
    frame, _ = simulate(Scenario(start="2026-01-01T00:00:00Z", days=13,
                                 change_at="2026-01-08T07:00:00Z", seed=4))
    read, asked = _counting(cached_reader(frame))
    times = [datetime(2026, 1, 8, h, tzinfo=UTC) for h in (9, 6, 12)]
    batch = InspectionBatch.with_windows(settings, times, read)
    assert batch.times == tuple(sorted(times)) and batch.site == "sim"
    assert asked == [batch.span()]  # one read for the three windows
    results = run_batch(pickle.loads(pickle.dumps(batch)))
    assert [r["inspection_time"][11:13] for r in results] == ["06", "09", "12"]
    for t, result in zip(sorted(times), results, strict=True):
        _same(result, run_job(InspectionJob.with_windows(settings, t, read)))
    assert results[-1]["status"] == "firing"  # the change is inside the last after window


def test_batch_needs_sorted_times_one_way_to_its_windows_and_the_engine_rule() -> None:
    from monitor.compose import build_inspector
    from monitor.fleet.jobs import InspectionBatch

    settings = InspectorSettings.of(_inspector())
    t = datetime(2026, 1, 9, tzinfo=UTC)
    frame = _frame()
    with pytest.raises(JobError, match="exactly one of frame"):
        InspectionBatch(settings, (t,))
    with pytest.raises(JobError, match="increasing order"):
        InspectionBatch(settings, (t, datetime(2026, 1, 8, tzinfo=UTC)), frame=frame)
    with pytest.raises(JobError, match="increasing order"):
        InspectionBatch(settings, (), frame=frame)
    calibrated = build_inspector(validate_config(
        {"site": "sim", "source": {"type": "file", "path": "x.csv"}}))
    with pytest.raises(JobError, match="one at a time"):
        InspectionBatch(InspectorSettings.of(calibrated), (t,), frame=frame)


def test_backfill_in_batches_equals_one_job_per_time() -> None:
    """run_backfill under the engine rule: batches of 4 (the last one short) give the
    results of one job per time, each once, in time order; calibrated sites still go one
    time per job."""
    from datetime import timedelta

    from monitor.decision.tracker import cached_reader
    from monitor.fleet.backfill import MAX_BATCH, SiteBackfill, batch_size, run_backfill

    inspector = _inspector()
    read = cached_reader(_frame())
    times = [datetime(2026, 1, 8, tzinfo=UTC) + timedelta(hours=h) for h in range(10)]
    site = SiteBackfill(inspector, times, read)
    assert site.units(4) == [(0, 4), (4, 8), (8, 10)]
    one: list[dict] = []
    batched: list[dict] = []
    assert run_backfill([site], InlineExecutor(), one.append, batch=1) == 10
    assert run_backfill([site], InlineExecutor(), batched.append, batch=4) == 10
    for a, b in zip(one, batched, strict=True):
        _same(a, b)
    assert batch_size(InlineExecutor(), 10_000) == MAX_BATCH
    assert batch_size(InlineExecutor(), 0) == 1


def test_a_failed_inspection_result_keeps_the_contract() -> None:
    from tests.result_contract import check

    inspector = _inspector()
    t = datetime(2026, 1, 8, 6, tzinfo=UTC)
    result = inspector.failed(t, "its worker process died each time it ran it")
    check(result)
    assert result["status"] == "error" and result["fingerprint"] == inspector.fingerprint(t)
    assert "died each time" in result["summary"]


class _CountingExecutor(InlineExecutor):
    """An inline executor that counts its closes."""

    def __init__(self) -> None:
        self.closed = 0

    def close(self) -> None:
        self.closed += 1


def test_a_renewable_executor_closes_what_it_built_and_its_owner_the_rest() -> None:
    from monitor.fleet.executors import RenewableExecutor

    first = _CountingExecutor()
    built: list[_CountingExecutor] = []

    def build() -> _CountingExecutor:
        built.append(_CountingExecutor())
        return built[-1]

    executor = RenewableExecutor(first, build)
    assert executor.submit(pow, 2, 5).result() == 32 and executor.current is first
    executor.renew()
    executor.renew()  # the second closes the first one it built, never ``first``
    assert executor.current is built[1] and executor.submit(pow, 3, 2).result() == 9
    assert [first.closed, built[0].closed, built[1].closed] == [0, 1, 0]
    executor.close_renewed()  # only what it built
    assert [first.closed, built[1].closed] == [0, 1] and executor.current is first
    executor.close()
    assert first.closed == 1
    with pytest.raises(RuntimeError, match="give build"):
        RenewableExecutor(first).renew()
