"""Synthetic inspections with the shapes of real ones, for the report benchmark, the report
tests, and trying the layout without data. The scores are *not* the engine's: they are a
per-sensor standardised mean shift, enough to give the figures realistic structure.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pandas as pd


@dataclass
class ExampleInspection:
    """A result dict plus the four window frames a report takes."""

    result: dict[str, Any]
    before_raw: pd.DataFrame
    after_raw: pd.DataFrame
    before: pd.DataFrame
    after: pd.DataFrame


def example_inspection(n_sensors: int = 33, n_lambdas: int = 6, *, n_changed: int = 3,
                       site: str = "example", at: str = "2019-03-11T00:00:00Z",
                       hours: int = 168, seed: int = 0) -> ExampleInspection:
    """Hourly before/after windows of ``n_sensors`` pressure-like sensors, the first
    ``n_changed`` of which drop after ``at``; a firing result ranking them."""
    rng = np.random.default_rng(seed)
    t0 = datetime.fromisoformat(at).astimezone(UTC)
    ids = [f"s{i:03d}" for i in range(n_sensors)]
    idx_before = pd.date_range(t0 - timedelta(hours=hours), periods=hours, freq="h", tz="UTC")
    idx_after = pd.date_range(t0, periods=hours, freq="h", tz="UTC")
    base = rng.uniform(30, 70, n_sensors)
    amp = rng.uniform(0.5, 3.0, n_sensors)

    def window(index: pd.DatetimeIndex, drop: np.ndarray) -> pd.DataFrame:
        hour = index.hour.to_numpy()[:, None]
        daily = amp * np.sin(2 * np.pi * (hour - 6) / 24)
        noise = rng.normal(0, 0.15, (len(index), n_sensors))
        return pd.DataFrame(base + daily + noise - drop, index=index, columns=ids)

    drop = np.zeros(n_sensors)
    drop[:n_changed] = np.linspace(1.2, 0.4, n_changed) if n_changed else []
    before_raw, after_raw = window(idx_before, np.zeros(n_sensors)), window(idx_after, drop)
    ref = before_raw.mean()
    before, after = before_raw / ref, after_raw / ref

    shift = ((after.mean() - before.mean()).abs() / before.std()).to_numpy()
    scores = shift / shift.max()
    if not n_changed:  # no significant split: the engine's scores stay near zero
        scores = 0.05 * scores
    order = np.argsort(-scores, kind="stable")
    lambdas = np.linspace(0.01, 1.0 + 0.5 * n_lambdas / 6, n_lambdas)
    # Scores fade with the penalty, the changed sensors slower than the rest.
    keep = np.exp(-np.outer(lambdas, 1.0 / (0.2 + 3 * scores)))
    per_lambda = np.clip(keep * scores + rng.normal(0, 0.01, (n_lambdas, n_sensors)), 0, None)
    threshold = float(np.sort(scores)[-n_changed - 1] + 1e-3) if n_changed else float(
        scores.max() + 0.01)
    selected = [ids[j] for j in order if scores[j] > threshold]
    p_value = 0.002 if selected else 0.41
    sensors = [{"sensor_id": ids[j], "rank": k + 1, "score": float(scores[j]),
                "selected": ids[j] in selected, "mean_before": float(before_raw[ids[j]].mean()),
                "mean_after": float(after_raw[ids[j]].mean())} for k, j in enumerate(order)]
    fmt = "%Y-%m-%dT%H:%M:%SZ"
    result = {
        "schema": "mmdwatch.inspection/v1",
        "fingerprint": f"example-{site}-{t0.strftime(fmt)}",
        "site": site,
        "status": "firing" if selected else "ok",
        "inspection_time": t0.strftime(fmt),
        "windows": {"before": {"start": idx_before[0].strftime(fmt), "end": t0.strftime(fmt),
                               "n": hours},
                    "after": {"start": t0.strftime(fmt),
                              "end": (t0 + timedelta(hours=hours)).strftime(fmt), "n": hours},
                    "resample": "1h", "aggregate": "mean", "normalise": "before"},
        "test": {"method": "cv-aggregation", "p_value": p_value, "alpha": 0.05, "seed": seed},
        "sensors": sensors,
        "selected_sensors": selected,
        "summary": (f"Change at {t0.strftime('%Y-%m-%dT%H:%MZ')} in {len(selected)} of "
                    f"{n_sensors} sensors: {', '.join(selected)} (p={p_value})"
                    if selected else f"No change at {t0.strftime('%Y-%m-%dT%H:%MZ')} (p={p_value})"),
        "data_quality": {"missing_fraction": 0.0, "dropped_sensors": []},
        "generator": {"name": "mmdwatch", "version": "0.1.0", "device": "cpu", "runtime_s": 0.0},
        "engine": {"method": "cv-aggregation", "labels": ids, "scores": scores.tolist(),
                   "selected": selected, "p_value": p_value, "threshold": threshold,
                   "lambdas": lambdas.tolist(), "scores_per_lambda": per_lambda.tolist(),
                   "split_p_values": rng.uniform(0, 0.05, (n_lambdas, 10)).tolist(),
                   "params": {"alpha": 0.05}, "device": "cpu", "seed": seed, "runtime_s": 0.0},
    }
    return ExampleInspection(result, before_raw, after_raw, before, after)


def example_backfill(n_sensors: int = 33, days: int = 20, change_day: int = 12,
                     site: str = "example", seed: int = 0) -> list[dict[str, Any]]:
    """Daily inspections; the change starts at ``change_day`` (firing from then on), and one
    inspection (day 3) ends in error, as a gap in the data would make it."""
    out = []
    start = datetime(2019, 3, 1, tzinfo=UTC)
    for d in range(days):
        at = (start + timedelta(days=d)).strftime("%Y-%m-%dT%H:%M:%SZ")
        ex = example_inspection(n_sensors, n_changed=3 if d >= change_day else 0, site=site,
                                at=at, hours=48, seed=seed + d)
        result = ex.result
        if d == 3:
            result = {k: result[k] for k in ("schema", "fingerprint", "site", "inspection_time",
                                             "windows")}
            result.update(status="error", sensors=[], selected_sensors=[],
                          summary="Inspection failed: not enough data in the before window",
                          error="before window has 2 of 48 hourly rows (need at least 4)")
        out.append(result)
    return out
