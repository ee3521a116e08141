"""engine.live: the onset scan and the frozen reference (and their docstring examples)."""
from __future__ import annotations

import doctest

import numpy as np
import pandas as pd
import pytest

import engine.live.engine_power
import engine.live.onset
import engine.live.reference
import engine.live.residual_shift
from engine.live.onset import estimate_onset, mean_shift_scan
from engine.live.reference import Reference
from engine.live.residual_shift import DetectionError, DetectorSettings, SpreadChannels


@pytest.mark.parametrize("module", [engine.live.onset, engine.live.reference,
                                    engine.live.engine_power,
                                    engine.live.residual_shift])
def test_docstring_examples_run(module) -> None:
    failed, tried = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert failed == 0
    assert tried > 0 or module is engine.live.residual_shift


def _network(days: int = 9, sensors: int = 8, seed: int = 0) -> pd.DataFrame:
    idx = pd.date_range("2024-01-01", periods=days * 24, freq="h")
    rng = np.random.default_rng(seed)
    cycle = np.sin(2 * np.pi * idx.hour.to_numpy() / 24)[:, None] * rng.uniform(0.5, 1.5, sensors)
    return pd.DataFrame(40 + cycle + 0.05 * rng.standard_normal((len(idx), sensors)),
                        index=idx, columns=[f"s{i}" for i in range(sensors)])


@pytest.mark.parametrize("at", [5, 17, 30])
def test_onset_of_a_step_is_found_within_an_hour(at: int) -> None:
    rng = np.random.default_rng(at)
    r = rng.standard_normal((40, 3))
    r[at:, :2] -= 1.5
    est = estimate_onset(r[:, :2], sign=np.array([-1.0, -1.0]))
    assert abs(est.index - at) <= 1
    assert est.low <= at <= est.high
    assert est.kind == "level"


def test_onset_of_a_stuck_sensor_comes_from_the_spread_scan() -> None:
    rng = np.random.default_rng(3)
    r = rng.standard_normal(40)
    r[22:] = 0.01 * rng.standard_normal(18)  # stuck: the residual loses its variance
    est = estimate_onset(r[:, None])
    assert est.kind == "spread"
    assert abs(est.index - 22) <= 2


def test_onset_of_a_sensor_stuck_at_its_mean_comes_from_its_raw_steps() -> None:
    """Stuck at its daily mean: its residuals keep the cycle it lost (no level shift, a
    larger spread), its raw hour-to-hour steps drop to 0 at the onset, and its readings
    repeat one value exactly from there on."""
    rng = np.random.default_rng(4)
    hours = np.arange(48)
    cycle = np.sin(2 * np.pi * hours / 24)
    raw = 40 + cycle + 0.05 * rng.standard_normal(48)
    raw[31:] = 40.0
    residuals = (raw - 40 - cycle)[:, None] / 0.05
    est = estimate_onset(residuals, raw=raw[:, None])
    assert est.kind == "stuck"
    assert est.index == 31 and est.low == 30 and est.high == 32
    # the same steps without the exact repeat (a sensor that barely moves): the scan
    raw[31:] += 1e-6 * rng.standard_normal(17)
    est = estimate_onset(residuals, raw=raw[:, None])
    assert est.kind == "roughness" and abs(est.index - 31) <= 1


def test_a_stuck_sensor_is_found_at_its_first_repeated_value() -> None:
    """A large cycle frozen at its evening value: the first fully frozen hour, whatever
    the scans make of the lost cycle; a sensor frozen for the whole stretch, or only for
    its last two rows, gives no onset."""
    from engine.live.onset import stuck_since

    hours = np.arange(40) + 15
    raw = np.stack([50 + 2 * np.sin(2 * np.pi * hours / 24),
                    40 + 0.3 * np.cos(2 * np.pi * hours / 24)], axis=1)
    raw[25:, 0] = raw[24, 0] - 0.4  # part of row 24's hour, then frozen
    assert stuck_since(raw) == 25
    assert stuck_since(raw[:, 1:]) is None
    assert stuck_since(np.full((10, 1), 3.0)) is None
    short = raw[:27].copy()  # frozen for rows 25 and 26 only
    assert stuck_since(short) is None


@pytest.mark.parametrize("at", [9, 21, 27])
def test_onset_of_a_damped_daily_cycle_comes_from_the_cycle_scan(at: int) -> None:
    """Two sensors' daily cycles halved at row ``at``: their residuals are minus half the
    profile's deviation, positive at some hours and negative at others. The level scan
    averages that away and finds the onset only when the deviation keeps one sign for
    hours; the cycle scan fits the residuals to the profile and finds the first hour."""
    rng = np.random.default_rng(at)
    hours = np.arange(40) + 15  # from 15:00
    profile = np.stack([np.sin(2 * np.pi * hours / 24), 1.2 * np.sin(2 * np.pi * hours / 24)],
                       axis=1) * 4.0  # (40, 2) in units of the residuals' spread
    r = 0.5 * rng.standard_normal((40, 2))
    r[at:] -= 0.5 * profile[at:]
    est = estimate_onset(r, sign=np.array([-1.0, -1.0]), profile=profile)
    assert est.kind == "cycle"
    assert 0 <= est.index - at <= 2  # row 21 is noon, where the profile crosses its mean
    assert est.low <= at <= est.high
    # without the profile, the onset falls where the damped cycle has one sign for hours
    assert estimate_onset(r, sign=np.array([-1.0, -1.0])).kind != "cycle"


def test_the_cycle_scan_leaves_a_step_to_the_level_scan() -> None:
    rng = np.random.default_rng(5)
    hours = np.arange(40) + 15
    profile = np.sin(2 * np.pi * hours / 24)[:, None] * np.array([[3.0, 3.5]])
    r = rng.standard_normal((40, 2))
    r[24:] -= 2.0
    est = estimate_onset(r, sign=np.array([-1.0, -1.0]), profile=profile)
    assert est.kind == "level" and abs(est.index - 24) <= 1


def test_profile_deviation_is_the_cycle_in_residual_units() -> None:
    from engine.live.residual_shift import profile_deviation

    net = _network(days=9)
    dev = profile_deviation(net.iloc[:7 * 24], net.index[-24:], "day")
    assert dev.shape == (24, net.shape[1])
    assert np.allclose(dev.mean(axis=0), 0.0, atol=1e-9)  # the deviation from the daily mean
    # the sine cycle over 0.05 noise: tens of spreads, positive in the morning
    assert (np.abs(dev).max(axis=0) > 10).all() and (dev[6] > 0).all()
    assert np.allclose(profile_deviation(net.iloc[:7 * 24], net.index[-24:], "none"), 0.0)


def test_scan_is_zero_where_a_segment_is_too_short() -> None:
    stat = mean_shift_scan(np.arange(10.0), min_segment=3)
    assert (stat[:3] == 0).all() and (stat[8:] == 0).all() and stat[3:8].min() > 0


def test_reference_sees_a_change_that_stays_and_not_normal_days() -> None:
    x = _network(days=12)
    ref = Reference.fit(x.iloc[:168], after_rows=16, settings=DetectorSettings())
    normal = [ref.compare(x.iloc[s:s + 16]) for s in range(168, 12 * 24 - 16, 8)]
    assert not any(c.changed(["s0", "s1"]) for c in normal)
    drop = x.iloc[240:256].copy()
    drop["s0"] -= 0.5  # ten noise sd, two days after the reference
    assert ref.compare(drop).changed(["s0"])
    stuck = x.iloc[240:256].copy()
    stuck["s1"] = float(x["s1"].iloc[:168].mean())  # stuck at its mean: the cycle is gone
    check = ref.compare(stuck)
    assert check.changed(["s1"]) and check.energy_z[1] > 3


def test_reference_round_trips_through_json() -> None:
    import json

    x = _network()
    ref = Reference.fit(x.iloc[:168], after_rows=16, settings=DetectorSettings())
    again = Reference.from_dict(json.loads(json.dumps(ref.to_dict())))
    a, b = ref.compare(x.iloc[180:196]), again.compare(x.iloc[180:196])
    np.testing.assert_allclose(a.z, b.z)
    np.testing.assert_allclose(a.energy_z, b.energy_z)


def test_reference_needs_enough_rows_and_its_sensors() -> None:
    x = _network()
    with pytest.raises(DetectionError, match="lengthen windows.before"):
        Reference.fit(x.iloc[:20], after_rows=16, settings=DetectorSettings())
    ref = Reference.fit(x.iloc[:168], after_rows=16, settings=DetectorSettings())
    with pytest.raises(DetectionError, match="lacks sensors"):
        ref.compare(x.iloc[170:186].drop(columns=["s3"]))
    # the reference's sensors by name: another order and an extra sensor change nothing
    window = x.iloc[170:186]
    shuffled = window[window.columns[::-1]].assign(extra=1.0)
    assert np.array_equal(ref.residuals(shuffled), ref.residuals(window))


@pytest.mark.parametrize("dependence", ["independent", "identical", "opposite"])
def test_the_weighted_bonferroni_combination_keeps_the_level(dependence: str) -> None:
    """Two valid p-values, however they depend on each other, combine to a valid one:
    P(min(p_level / (1 - w), p_engine / w) < level) <= level."""
    from engine.live.engine_power import combine

    rng = np.random.default_rng(5)
    trials, weight = 20_000, 0.35
    p_level = rng.uniform(size=trials)
    p_engine = {"independent": rng.uniform(size=trials), "identical": p_level,
                "opposite": 1 - p_level}[dependence]
    for level in (0.05, 0.01):
        hits = sum(combine(a, b, weight).p_value < level
                   for a, b in zip(p_level, p_engine, strict=True))
        assert hits / trials <= level + 3 * np.sqrt(level * (1 - level) / trials)


def test_the_combination_names_the_part_that_gave_it() -> None:
    from engine.live.engine_power import combine

    assert combine(1e-5, 0.9, 0.35).part == "level"
    assert combine(0.9, 1e-5, 0.35).part == "engine"
    assert combine(1e-5, 1e-5, 0.35).part == "level"  # a tie goes to the level part
    # no engine history yet, or the part switched off: the level part at the whole level
    assert combine(0.004, None, 0.35).p_value == 0.004
    assert combine(0.004, 1e-9, 0.0).p_value == 0.004


def test_robust_loadings_keep_one_sensors_step_off_the_others() -> None:
    """A step on one sensor moves the least-squares loadings, and through them every
    sensor's residual; Huber loadings leave the other sensors where they were."""
    from engine.live.residual_shift import CommonMode, robust_loadings

    rng = np.random.default_rng(3)
    d, n = 20, 48
    direction = rng.normal(size=(d, 1))
    direction /= np.linalg.norm(direction)
    clean = rng.normal(0, 1, size=(n, 1)) @ direction.T * 5 + rng.normal(0, 0.3, size=(n, d))
    mode = CommonMode(beta=np.zeros(d), directions=direction)
    stepped = clean.copy()
    stepped[:, 7] += 40.0
    others = [i for i in range(d) if i != 7]
    plain = np.abs(mode.apply(stepped) - mode.apply(clean))[:, others].max()
    robust = np.abs(mode.apply(stepped, robust=True)
                    - mode.apply(clean, robust=True))[:, others].max()
    assert plain > 1.0 and robust < 0.1
    # without outliers the robust loadings are the least-squares ones, nearly
    ls = clean @ direction
    assert np.abs(robust_loadings(clean, direction) - ls).max() < 0.05 * np.abs(ls).max()


@pytest.mark.parametrize("shape", [(150, 8), (150, 7), (3, 40, 33), (5, 1), (4, 2),
                                   (2, 6, 300)])
def test_row_median_is_numpys_median_to_the_bit(shape: tuple[int, ...]) -> None:
    from engine.live.residual_shift import row_median

    rng = np.random.default_rng(sum(shape))
    for scale in (1e-8, 1.0, 1e8):
        a = rng.normal(size=shape) * scale
        for x in (a, np.round(a / scale, 1) * scale):  # ties too
            assert np.array_equal(row_median(x), np.median(x, axis=-1, keepdims=True))
    a[..., 0] = np.nan  # NaN rows: numpy's own median
    assert np.array_equal(row_median(a), np.median(a, axis=-1, keepdims=True), equal_nan=True)


def test_robust_loadings_on_one_direction_equal_the_general_solve() -> None:
    """The one-direction case divides instead of solving n 1 x 1 systems: the loadings
    of the general iteration (np.linalg.solve), to float64 rounding."""
    from engine.live.residual_shift import robust_loadings, row_median

    def by_solve(r: np.ndarray, p: np.ndarray) -> np.ndarray:
        coef = r @ p
        for _ in range(6):
            resid = r - coef @ p.T
            scale = np.maximum(1.4826 * row_median(np.abs(resid)), 1e-12)
            w = np.minimum(1.0, 1.345 * scale / np.maximum(np.abs(resid), 1e-300))
            gram = np.einsum("nd,dk,dj->nkj", w, p, p)
            rhs = np.einsum("nd,dk->nk", w * r, p)
            coef = np.linalg.solve(gram + 1e-12 * np.eye(1), rhs[..., None])[..., 0]
        return coef

    rng = np.random.default_rng(5)
    d, n = 12, 60
    p = rng.normal(size=(d, 1))
    p /= np.linalg.norm(p)
    r = rng.normal(size=(n, 1)) @ p.T * 4 + rng.normal(0, 0.3, size=(n, d))
    r[:, 3] += 25.0
    np.testing.assert_allclose(robust_loadings(r, p), by_solve(r, p), rtol=1e-14, atol=0)


@pytest.mark.parametrize("unit", ["s", "ms", "us", "ns"])
@pytest.mark.parametrize("tz", ["UTC", None, "Europe/Berlin"])
def test_profile_slots_are_the_calendar_hour_and_weekend(unit, tz):
    """The profile's slots, computed from the epoch for UTC, are pandas' hour of day (plus
    24 on Saturdays and Sundays), at every index unit, before 1970 too; other zones use
    their local calendar."""
    from engine.live.residual_shift import _slots

    index = pd.date_range("1969-12-20", "1970-01-20", freq="37min", tz=tz).as_unit(unit)
    hour, weekend = np.asarray(index.hour), np.asarray(index.day_of_week) >= 5
    assert np.array_equal(_slots(index, "day"), hour)
    assert np.array_equal(_slots(index, "week"), hour + 24 * weekend)
    assert not _slots(index, "none").any()


def _noisy_sensor_windows(seed: int) -> tuple[pd.DataFrame, pd.DataFrame, SpreadChannels]:
    """Hourly means and log within-hour spreads of 6 sensors over 7 days + 16 h, sensor
    "c" ten times as noisy in the after window at an unchanged mean: its hourly means move
    by a third of their spread, its log spread by log(10)."""
    rng = np.random.default_rng(seed)
    idx = pd.date_range("2024-01-01", periods=168 + 16, freq="h", tz="UTC")
    cols = list("abcdef")
    means = pd.DataFrame(rng.normal(0, 1, (len(idx), 6)), index=idx, columns=cols)
    spread = pd.DataFrame(rng.normal(np.log(0.3), 0.3, (len(idx), 6)), index=idx,
                          columns=cols)
    means.iloc[168:, 2] *= 1.3
    spread.iloc[168:, 2] += np.log(10)
    values = spread.to_numpy()
    return means.iloc[:168], means.iloc[168:], SpreadChannels(tuple(cols), values[:168],
                                                              values[168:])


def test_a_sensor_turned_noisy_is_seen_by_its_spread_channel() -> None:
    """The spread channel's z (times spread_weight) enters the statistic beside the level
    z; with the weight 0 the statistic is the level part's alone."""
    from engine.live.residual_shift import detect

    before, after, spread = _noisy_sensor_windows(0)
    settings = DetectorSettings(local_level_rows=24)
    with_spread = detect(before, after, settings, spread)
    level_only = detect(before, after, DetectorSettings(local_level_rows=24, spread_weight=0))
    assert abs(with_spread.z["c"]) < 4  # the hourly means barely move
    assert with_spread.z_spread["c"] > 10 * settings.spread_weight
    assert with_spread.value == pytest.approx(with_spread.z_spread["c"] ** 2)
    assert level_only.value == pytest.approx(float((level_only.z ** 2).max()))
    assert level_only.z_spread.empty
    pd.testing.assert_series_equal(with_spread.z, level_only.z)
    evidence = with_spread.evidence()
    assert max(evidence, key=evidence.__getitem__) == "c"


def test_spread_channels_in_a_batch_equal_one_at_a_time() -> None:
    """detect_many with spreads gives each pair's own numbers, to the bit."""
    from engine.live.residual_shift import detect, detect_many

    settings = DetectorSettings(local_level_rows=24)
    cases = [_noisy_sensor_windows(seed) for seed in range(3)]
    many = detect_many([(b, a) for b, a, _ in cases], settings, [s for _, _, s in cases])
    for (b, a, s), got in zip(cases, many, strict=True):
        one = detect(b, a, settings, s)
        assert not isinstance(got, DetectionError)
        assert got.value == one.value
        pd.testing.assert_series_equal(got.z_spread, one.z_spread, check_exact=True)


def test_stacks_bounded_by_bytes_equal_one_stack(monkeypatch: pytest.MonkeyPatch) -> None:
    """A group larger than MAX_STACK_BYTES is computed in several stacks: each pair's
    detection is the one a single stack of all of them gives, to the bit, spread
    channels included."""
    import engine.live.residual_shift as rs

    settings = DetectorSettings(local_level_rows=24)
    cases = [_noisy_sensor_windows(seed) for seed in range(5)]
    pairs, spreads = [(b, a) for b, a, _ in cases], [s for _, _, s in cases]
    one_stack = rs.detect_many(pairs, settings, spreads)
    n_b, d = cases[0][0].shape
    calls: list[int] = []
    stacked = rs._detect_stacked
    monkeypatch.setattr(rs, "_detect_stacked",
                        lambda p, *a: calls.append(len(p)) or stacked(p, *a))
    monkeypatch.setattr(rs, "MAX_STACK_BYTES", 2 * 8 * n_b * d)  # two windows a stack
    bounded = rs.detect_many(pairs, settings, spreads)
    assert calls == [2, 2, 1]
    for got, want in zip(bounded, one_stack, strict=True):
        assert not isinstance(got, DetectionError) and not isinstance(want, DetectionError)
        assert got.value == want.value
        pd.testing.assert_series_equal(got.z, want.z, check_exact=True)
        pd.testing.assert_series_equal(got.z_spread, want.z_spread, check_exact=True)
        pd.testing.assert_frame_equal(got.after_residuals, want.after_residuals,
                                      check_exact=True)


@pytest.mark.parametrize(("shape", "modes"), [((4, 30, 60), 1), ((3, 20, 45), 2),
                                               ((3, 40, 33), 1)])
def test_principal_directions_are_the_svds(shape: tuple[int, int, int], modes: int) -> None:
    """Wider windows than rows take the Gram matrix's eigenvectors: the same directions as
    the SVD's (their projections agree to rounding); taller ones are the SVD's to the
    bit. A window of rank below ``modes`` falls back to the SVD."""
    from engine.live.residual_shift import principal_directions

    rng = np.random.default_rng(sum(shape))
    x = rng.normal(size=shape)
    x -= x.mean(axis=1, keepdims=True)
    x[0] = 0.0  # no direction at all: the SVD's arbitrary one, as before
    got = principal_directions(x, modes)
    _, _, vt = np.linalg.svd(x, full_matrices=False)
    want = np.swapaxes(vt[:, :modes], 1, 2)
    assert got.shape == (shape[0], shape[2], modes)
    if shape[1] >= shape[2]:
        assert np.array_equal(got, want)
    projection = got @ np.swapaxes(got, 1, 2)
    assert np.abs(projection - want @ np.swapaxes(want, 1, 2)).max() < 1e-12
    assert np.array_equal(got[0], want[0])


def test_principal_directions_are_removed_only_with_eight_sensors_each() -> None:
    from engine.live.residual_shift import learnable_modes

    assert [learnable_modes(1, d) for d in (2, 3, 7, 8, 30)] == [0, 0, 0, 1, 1]
    assert [learnable_modes(2, d) for d in (8, 15, 16, 300)] == [1, 1, 2, 2]
    assert learnable_modes(0, 30) == 0


def test_one_sensors_step_stays_on_it_among_few_sensors() -> None:
    """With three sensors a principal direction of the before window is mostly its noise:
    projected out, it moved one sensor's step onto the others, and in 61 of these 200
    windows another sensor had the largest |z| (1 of 200 now, as with no direction
    removed)."""
    from engine.live.residual_shift import detect_many

    rng = np.random.default_rng(0)
    settings = DetectorSettings(local_level_rows=8, daily_profile=False, weekly_profile=False)
    index = pd.date_range("2024-01-01", periods=70, freq="2s")
    pairs = []
    for _ in range(200):
        x = rng.standard_normal((70, 3))
        x[60:, 0] -= 3.0  # the after window's 10 rows: 3 standard deviations down
        frame = pd.DataFrame(x, index=index, columns=["flow", "pressure", "current"])
        pairs.append((frame.iloc[:60], frame.iloc[60:]))
    named = [d.z.abs().idxmax() for d in detect_many(pairs, settings)]
    assert named.count("flow") >= 195
