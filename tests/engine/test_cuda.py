"""On CUDA, when a GPU is there (skipped otherwise; the suite never depends on one): the
engine part's batched fits give the CPU's statistics and p-values within 1e-9 relative,
and a backfill's first pass the same decisions."""
from __future__ import annotations

import numpy as np
import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here")


def test_fit_many_on_cuda_equals_the_cpu():
    from engine import CVAggregation
    from engine.live.engine_power import ENGINE_PART_PARAMS, validation_power

    rng = np.random.default_rng(5)
    pairs = []
    for k in range(16):
        x, y = rng.normal(size=(24, 33)), rng.normal(size=(16, 33))
        if k % 2:
            y[:, k % 33] += 1.0
        pairs.append((x, y))
    # with the p-value the engine part skips, so that the permutation tests run on CUDA too
    params = {**ENGINE_PART_PARAMS, "compute_p_value": True}
    fits = {device: CVAggregation(seed=0, device=device, **params).fit_many(pairs)
            for device in ("cpu", "cuda")}
    for cpu, gpu in zip(fits["cpu"], fits["cuda"], strict=True):
        assert gpu.device.startswith("cuda")
        assert abs(gpu.p_value - cpu.p_value) <= 1e-9 * max(cpu.p_value, 1e-300)
        a, b = validation_power(cpu.details), validation_power(gpu.details)
        assert abs(a - b) <= 1e-9 * max(abs(a), 1e-300)
        assert list(gpu.selected) == list(cpu.selected)
