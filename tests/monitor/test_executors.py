"""The executor config, ``--cluster`` parsing, inspection jobs and the in-process executor
(no worker processes here: tests/integration/test_dask_executor.py starts real ones)."""
from __future__ import annotations

import pickle
from datetime import UTC, datetime

import numpy as np
import pandas as pd
import pytest

from monitor.config import ConfigError, ExecutorConfig, validate_config, validate_executor
from monitor.executors import InlineExecutor, build_executor, default_workers, parse_cluster
from monitor.jobs import InspectionJob, InspectorSettings, JobError, run_detect, run_job
from monitor.simulate import Scenario, simulate


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
    from monitor.tracker import cached_reader

    inspector = _inspector()
    read = cached_reader(_frame())
    t = datetime(2026, 1, 8, 6, tzinfo=UTC)
    job = InspectionJob.with_windows(InspectorSettings.of(inspector), t, read,
                                     history=np.array([1.0, 2.0]))
    assert job.history == (1.0, 2.0) and job.site == "sim"
    shipped = pickle.loads(pickle.dumps(job))
    result = run_job(shipped)
    inline = inspector.run(t, read).result
    assert result["fingerprint"] == inline["fingerprint"]
    assert result["status"] == inline["status"]
    assert result["test"]["p_value"] == pytest.approx(inline["test"]["p_value"], abs=1e-6)
    assert result["selected_sensors"] == inline["selected_sensors"]
    assert run_detect(shipped) == inspector.detect(t, read)
