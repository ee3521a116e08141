"""Windows on hand-built series: exact bin means, normalisation, gaps, duplicates,
out-of-order input, UTC handling, zero references."""
from __future__ import annotations

from datetime import timedelta

import numpy as np
import pandas as pd
import pytest

from monitor.windows import WindowError, WindowSpec, build_windows, normalise, resample_window

T = pd.Timestamp("2024-03-10T00:00:00Z")  # US DST starts that day: irrelevant in UTC
SPEC = WindowSpec(before=timedelta(hours=6), after=timedelta(hours=6),
                  resample=timedelta(hours=1), normalise="none", min_coverage=0.5)


def readings(rows: list[tuple[str, str, float]]) -> pd.DataFrame:
    frame = pd.DataFrame(rows, columns=["time", "sensor", "value"])
    frame["time"] = pd.to_datetime(frame["time"], utc=True)
    return frame


def grid(sensor: str, start: pd.Timestamp, hours: int, step_min: int, f) -> list:
    out = []
    for k in range(hours * 60 // step_min):
        t = start + pd.Timedelta(minutes=k * step_min)
        out.append((t.isoformat(), sensor, f(t)))
    return out


def minute_value(t: pd.Timestamp) -> float:
    return float(t.hour * 100 + t.minute)


def test_hourly_means_are_exact_and_bins_start_at_window_start():
    start = T - pd.Timedelta(hours=6)
    rows = grid("a", start, 12, 10, minute_value) + grid("b", start, 12, 10, lambda t: 5.0)
    w = build_windows(readings(rows), T, SPEC)
    assert list(w.before.index) == list(pd.date_range(start, periods=6, freq="1h"))
    assert list(w.after.index) == list(pd.date_range(T, periods=6, freq="1h"))
    assert str(w.before.index.tz) == "UTC"
    # values at minutes 0..50 of hour h: mean = 100 h + 25
    assert w.before["a"].tolist() == [100 * h + 25.0 for h in range(18, 24)]
    assert w.after["a"].tolist() == [100 * h + 25.0 for h in range(6)]
    assert w.data_quality["missing_fraction"] == 0.0
    assert w.data_quality["dropped_sensors"] == []


def test_bins_are_counted_from_an_off_hour_inspection_time():
    t = T + pd.Timedelta(minutes=15)
    start = t - pd.Timedelta(hours=6)
    rows = grid("a", start, 12, 5, minute_value) + grid("b", start, 12, 5, lambda _: 1.0)
    w = build_windows(readings(rows), t, SPEC)
    assert w.after.index[0] == t
    # first after bin covers 00:15..01:10 -> values 15..55 and 100..110
    expected = np.mean([15, 20, 25, 30, 35, 40, 45, 50, 55, 100, 105, 110])
    assert w.after["a"].iloc[0] == pytest.approx(expected)


def test_naive_and_offset_times_are_utc():
    # the same instants written three ways give the same windows
    start = T - pd.Timedelta(hours=6)
    base = grid("a", start, 12, 30, minute_value) + grid("b", start, 12, 30, lambda _: 2.0)
    frame = readings(base)
    shifted = frame.assign(time=frame["time"].dt.tz_convert("America/New_York"))
    w1 = build_windows(frame, T, SPEC)
    w2 = build_windows(shifted, T, SPEC)
    w3 = build_windows(frame, "2024-03-10T00:00:00", SPEC)  # naive = UTC
    pd.testing.assert_frame_equal(w1.before, w2.before)
    pd.testing.assert_frame_equal(w1.after, w3.after)


def test_duplicates_and_out_of_order_readings():
    start = T - pd.Timedelta(hours=6)
    rows = grid("a", start, 12, 15, minute_value) + grid("b", start, 12, 15, lambda _: 3.0)
    clean = build_windows(readings(rows), T, SPEC)
    rng = np.random.default_rng(0)
    shuffled = [rows[i] for i in rng.permutation(len(rows))]
    # a repeated reading changes nothing; a corrected one (given later) replaces it
    dupes = [(t, s, v) for t, s, v in rows[:5]]
    w = build_windows(readings(shuffled + dupes), T, SPEC)
    pd.testing.assert_frame_equal(clean.before, w.before)
    pd.testing.assert_frame_equal(clean.after, w.after)
    corrected = [(rows[0][0], "a", 0.0)]
    w = build_windows(readings(rows + corrected), T, SPEC)
    assert w.before["a"].iloc[0] == pytest.approx((0 + 1815 + 1830 + 1845) / 4)


def test_gaps_are_interpolated_inside_a_window_and_reported():
    start = T - pd.Timedelta(hours=6)
    rows = [r for r in grid("a", start, 12, 60, lambda t: float(t.hour))
            if pd.Timestamp(r[0]).hour not in (20, 21)]  # two empty bins in the before window
    rows += grid("b", start, 12, 60, lambda _: 1.0)
    w = build_windows(readings(rows), T, SPEC)
    assert w.before["a"].tolist() == [18.0, 19.0, 20.0, 21.0, 22.0, 23.0]  # linear fill
    assert w.data_quality["missing_fraction"] == pytest.approx(2 / 24, abs=1e-6)
    # the after window is not used to fill the before window's edge
    rows = [r for r in grid("a", start, 12, 60, lambda t: float(t.hour))
            if pd.Timestamp(r[0]).hour != 23] + grid("b", start, 12, 60, lambda _: 1.0)
    w = build_windows(readings(rows), T, SPEC)
    assert w.before["a"].iloc[-1] == 22.0


def test_a_sensor_slower_than_the_bins_is_dropped_with_its_cadence_and_the_fix():
    """Readings every 3 hours in hourly bins cover a third of them: the sensor is left
    out, and the reason says its cadence and the resample that keeps it. One with a hole
    gets no such hint: its bins are not regularly spaced."""
    spec = WindowSpec(before=timedelta(hours=24), after=timedelta(hours=6),
                      resample=timedelta(hours=1), normalise="none", min_coverage=0.5)
    start = T - pd.Timedelta(hours=24)
    rows = grid("a", start, 30, 60, lambda _: 1.0) + grid("b", start, 30, 60, lambda _: 2.0)
    rows += grid("slow", start, 30, 180, lambda _: 3.0)
    rows += [r for r in grid("holed", start, 30, 60, lambda _: 4.0)
             if not 1 <= (pd.Timestamp(r[0]) - start) / pd.Timedelta(hours=1) < 17]
    w = build_windows(readings(rows), T, spec)
    reasons = w.data_quality["dropped_reasons"]
    assert set(w.data_quality["dropped_sensors"]) == {"slow", "holed"}
    assert reasons["slow"].endswith("its readings come about every 3h, fewer than the bins "
                                    "of 1h: resample at 3h or coarser, or lower "
                                    "windows.min_coverage, to keep it")
    assert "its readings come" not in reasons["holed"]


def test_the_windows_say_which_cells_were_filled():
    """``Windows.filled``: the before and after cells filled across a gap, over the kept
    sensors (the engine part abstains on them, docs/decision.md); None without a gap."""
    start = T - pd.Timedelta(hours=6)
    full = grid("a", start, 12, 60, lambda t: float(t.hour)) + \
        grid("b", start, 12, 60, lambda _: 1.0)
    assert build_windows(readings(full), T, SPEC).filled is None
    rows = [r for r in full if not (r[1] == "a" and pd.Timestamp(r[0]).hour in (20, 21, 2))]
    w = build_windows(readings(rows), T, SPEC)
    assert w.filled is not None
    before, after = w.filled
    assert before.shape == (6, 2) and after.shape == (6, 2)
    assert before[:, 0].tolist() == [False, False, True, True, False, False]  # 20:00, 21:00
    assert after[:, 0].tolist() == [False, False, True, False, False, False]  # 02:00
    assert not before[:, 1].any() and not after[:, 1].any()


def test_sensor_with_too_little_data_is_dropped_and_listed():
    start = T - pd.Timedelta(hours=6)
    rows = grid("a", start, 12, 30, minute_value) + grid("b", start, 12, 30, lambda _: 1.0)
    rows += grid("c", start, 12, 30, lambda _: 2.0)
    rows += grid("late", T, 6, 30, lambda _: 1.0)  # only in the after window
    rows += [r for r in grid("sparse", start, 12, 60, lambda _: 1.0)
             if pd.Timestamp(r[0]).hour in (18, 0)]
    w = build_windows(readings(rows), T, SPEC)
    assert list(w.before.columns) == ["a", "b", "c"]
    assert w.data_quality["dropped_sensors"] == ["late", "sparse"]
    assert "before window has data in 0%" in w.data_quality["dropped_reasons"]["late"]


def test_too_little_data_left_is_a_window_error():
    start = T - pd.Timedelta(hours=6)
    rows = grid("a", start, 12, 30, minute_value) + grid("late", T, 6, 30, lambda _: 1.0)
    with pytest.raises(WindowError, match="only 1 of 2 sensors"):
        build_windows(readings(rows), T, SPEC)
    with pytest.raises(WindowError, match="no readings"):
        build_windows(readings([]), T, SPEC)


def test_normalise_before_divides_both_windows_by_the_before_mean():
    start = T - pd.Timedelta(hours=6)
    rows = grid("a", start, 6, 60, lambda _: 10.0) + grid("a", T, 6, 60, lambda _: 9.0)
    rows += grid("b", start, 12, 60, lambda _: -4.0)
    w = build_windows(readings(rows), T, WindowSpec(**{**SPEC.__dict__, "normalise": "before"}))
    assert w.before["a"].tolist() == [1.0] * 6
    assert w.after["a"].tolist() == [0.9] * 6  # the level shift survives
    assert w.before["b"].tolist() == [-1.0] * 6  # |mean| keeps the sign readable
    assert w.before_raw["a"].tolist() == [10.0] * 6


def test_normalise_first_erases_a_shift_already_present_at_the_after_start():
    before = pd.DataFrame({"a": [10.0, 10.0, 10.0]})
    after = pd.DataFrame({"a": [9.0, 9.0, 9.0]})
    b, a, notes = normalise(before, after, "first")
    assert b["a"].tolist() == [1.0] * 3 and a["a"].tolist() == [1.0] * 3
    assert notes == {}


def test_zero_first_value_and_zero_mean_are_not_divided_by():
    before = pd.DataFrame({"z": [0.0, 1.0, 2.0], "c": [0.0, 0.0, 0.0], "ok": [2.0, 2.0, 2.0]})
    after = pd.DataFrame({"z": [0.0, 3.0, 3.0], "c": [0.0, 0.0, 0.0], "ok": [4.0, 4.0, 4.0]})
    b, a, notes = normalise(before, after, "first")
    assert np.isfinite(b.to_numpy()).all() and np.isfinite(a.to_numpy()).all()
    assert b["z"].tolist() == [0.0, 1.0, 2.0]  # left unscaled
    assert "first before-window value is zero" in notes["z"]
    assert a["ok"].tolist() == [1.0] * 3
    b, a, notes = normalise(before, after, "before")
    assert "before-window mean is zero" in notes["c"]
    assert a["c"].tolist() == [0.0] * 3 and a["z"].tolist() == [0.0, 3.0, 3.0]
    b, a, notes = normalise(before, after, "zscore")
    assert "sd is zero" in notes["c"] and "sd is zero" in notes["ok"]
    assert a["ok"].tolist() == [2.0] * 3  # centred only
    assert b["z"].tolist() == [-1.0, 0.0, 1.0]


def test_zero_reference_is_reported_in_data_quality():
    start = T - pd.Timedelta(hours=6)
    rows = grid("a", start, 12, 60, lambda t: 0.0 if t < T else 1.0)
    rows += grid("b", start, 12, 60, lambda _: 1.0)
    w = build_windows(readings(rows), T, WindowSpec(**{**SPEC.__dict__, "normalise": "before"}))
    assert "a" in w.data_quality["unscaled_sensors"]
    assert w.after["a"].tolist() == [1.0] * 6


def test_aggregate_and_period_are_configurable():
    start = T - pd.Timedelta(hours=6)
    rows = grid("a", start, 12, 10, minute_value) + grid("b", start, 12, 10, lambda _: 1.0)
    spec = WindowSpec(before=timedelta(hours=6), after=timedelta(hours=6),
                      resample=timedelta(hours=2), aggregate="max", normalise="none")
    w = build_windows(readings(rows), T, spec)
    assert len(w.before) == 3
    assert w.before["a"].tolist() == [1950.0, 2150.0, 2350.0]
    last = resample_window(readings(rows), start, T, timedelta(hours=1), "last")
    assert last["a"].iloc[0] == 1850.0


def _random_readings(rng: np.random.Generator, start: pd.Timestamp, hours: int) -> pd.DataFrame:
    """Three sensors at irregular times (some hours empty, one sensor silent for a while,
    a NaN reading and a duplicate), the kind of stream a backfill bins."""
    n = hours * 8
    times = start + pd.to_timedelta(np.sort(rng.uniform(0, hours * 3600, n)), unit="s")
    frame = pd.DataFrame({"time": np.repeat(times, 3),
                          "sensor": np.tile(["a", "b", "c"], n),
                          "value": rng.normal(10, 1, 3 * n)})
    silent = (frame["sensor"] == "c") & (frame["time"] > start + pd.Timedelta(hours=20)) \
        & (frame["time"] < start + pd.Timedelta(hours=27))
    frame = frame[~silent].reset_index(drop=True)
    frame.loc[5, "value"] = np.nan
    return pd.concat([frame, frame.iloc[[7]].assign(value=99.0)], ignore_index=True)


@pytest.mark.parametrize("aggregate", ["mean", "median", "last"])
def test_binned_span_gives_the_windows_of_build_windows(aggregate):
    """A backfill bins its span once and slices each time's windows: value for value the
    windows (and errors) that build_windows gives from the readings, on the grid and off
    it."""
    from dataclasses import replace

    from monitor.windows import BinnedSpan

    rng = np.random.default_rng(3)
    start = T - pd.Timedelta(hours=6)
    frame = _random_readings(rng, start, 40)
    spec = replace(SPEC, aggregate=aggregate, normalise="before", min_coverage=0.7)
    first, last = start, start + pd.Timedelta(hours=40)
    span = BinnedSpan(frame, first, last, spec)
    # on the span's grid, and off it at two offsets (each binned once, as its own grid)
    times = ([T + pd.Timedelta(hours=h) for h in range(34)] + [T + pd.Timedelta(minutes=90)]
             + [T + pd.Timedelta(minutes=20 + 60 * h) for h in range(0, 30, 3)])
    compared = 0
    for t in times:
        inside = frame[(frame["time"] >= t - spec.before) & (frame["time"] < spec.read_end(t))]
        try:
            want = build_windows(inside, t, spec)
        except WindowError as exc:
            with pytest.raises(type(exc), match="."):
                span.windows(t)
            continue
        got = span.windows(t)
        for name in ("before_raw", "after_raw", "before", "after"):
            pd.testing.assert_frame_equal(getattr(got, name), getattr(want, name),
                                          check_exact=True, check_freq=False)
        assert got.data_quality == want.data_quality
        # about 8 readings an hour: the spread channels are there, and equal too
        assert want.spread is not None and got.spread is not None
        assert got.spread.names == want.spread.names
        np.testing.assert_array_equal(got.spread.before, want.spread.before)
        np.testing.assert_array_equal(got.spread.after, want.spread.after)
        assert (got.filled is None) == (want.filled is None)
        if got.filled is not None and want.filled is not None:
            for mine, theirs in zip(got.filled, want.filled, strict=True):
                np.testing.assert_array_equal(mine, theirs)
        compared += 1
    assert compared >= 28
    assert len(span._grids) == 3  # one per offset, however many windows start there


def test_binned_span_at_one_second_equals_build_windows_to_the_bit():
    """Five-second inspections in 2-second bins: the windows start on even and on odd
    seconds (two grids), and 150-row windows are long enough for a column mean's order
    of additions to show: every frame, normalised ones included, equals build_windows'
    value for value."""
    from monitor.windows import BinnedSpan

    rng = np.random.default_rng(11)
    start = pd.Timestamp("2026-03-02T10:00:00Z")
    seconds = np.arange(20 * 60)
    seconds = seconds[rng.random(seconds.size) > 0.05]  # about 5 % of seconds skipped
    frame = pd.DataFrame({
        "time": np.repeat(start + pd.to_timedelta(seconds, unit="s"), 4),
        "sensor": np.tile([f"s{i}" for i in range(4)], seconds.size),
        "value": rng.normal(50.0, 3.0, 4 * seconds.size)})
    spec = WindowSpec(before=timedelta(minutes=5), after=timedelta(seconds=30),
                      resample=timedelta(seconds=2), normalise="before")
    times = [start + pd.Timedelta(minutes=5, seconds=3 + 5 * k) for k in range(150)]
    span = BinnedSpan(frame, spec.bounds(times[0])[0], spec.read_end(times[-1]), spec)
    for t in times:
        inside = frame[(frame["time"] >= t - spec.before) & (frame["time"] < spec.read_end(t))]
        want, got = build_windows(inside, t, spec), span.windows(t)
        for name in ("before_raw", "after_raw", "before", "after"):
            assert np.array_equal(getattr(got, name).to_numpy(),
                                  getattr(want, name).to_numpy()), (t, name)
    assert len(span._grids) == 2


def test_empty_last_bins_are_a_hole_when_the_data_goes_on():
    """At a fine cadence a window's last bin is often empty (a skipped second): when the
    data goes on within the bins read past the window, the window is complete and the
    sensor's gap is filled (capped by min_coverage); at the data's end it stays
    incomplete."""
    from dataclasses import replace

    from monitor.windows import WindowIncomplete

    spec = replace(SPEC, resample=pd.Timedelta(seconds=2), before=pd.Timedelta(minutes=2),
                   after=pd.Timedelta(seconds=30))
    start = T - spec.before
    rows = [((start + pd.Timedelta(seconds=k)).isoformat(), s, 1.0 + 0.01 * (k % 7))
            for k in range(150 + 40) for s in ("a", "b")]
    frame = readings(rows)
    last_bin = (frame["time"] >= T + pd.Timedelta(seconds=28)) & \
        (frame["time"] < T + pd.Timedelta(seconds=30))
    w = build_windows(frame[~last_bin], T, spec)  # the data goes on past the window
    assert w.after_raw.notna().all().all() and len(w.after_raw) == 15
    cut = frame[~last_bin & (frame["time"] < T + spec.after)]  # the data ends there
    with pytest.raises(WindowIncomplete, match="covered to 93%"):
        build_windows(cut, T, spec)


def test_a_hole_in_the_data_is_an_incomplete_window_that_names_it():
    from monitor.windows import WindowHole

    start = T - pd.Timedelta(hours=6)
    rows = grid("a", start, 12, 10, minute_value) + grid("b", start, 12, 10, lambda _: 1.0)
    hole = [r for r in rows if not (T - pd.Timedelta(hours=5) <= pd.Timestamp(r[0])
                                    < T - pd.Timedelta(hours=1))]
    with pytest.raises(WindowHole, match="hole: no sensor has a reading in 67% of the "
                                         "before window") as caught:
        build_windows(readings(hole), T, SPEC)
    assert caught.value.covered == pytest.approx(2 / 6)
    assert "2024-03-09T19:00:00+00:00 to 2024-03-09T23:00:00+00:00" in str(caught.value)


@pytest.mark.parametrize("how", ["before", "zscore", "none"])
def test_windows_without_a_gap_are_not_interpolated_and_equal_the_filled_ones(how):
    """A window where every sensor has every bin is used as binned (interpolating it would
    only copy it); one with a gap is interpolated. Either way the windows are what the
    resampled, filled and normalised frames give, value for value."""
    import monitor.windows as W

    start = T - pd.Timedelta(hours=6)
    rows = (grid("a", start, 12, 10, minute_value) + grid("b", start, 12, 10, lambda t: 5.0)
            + grid("c", start, 12, 30, lambda t: float(t.minute) - 20.0))
    gap = [r for r in rows if not (r[1] == "c" and r[0].startswith("2024-03-09T20"))]
    spec = WindowSpec(before=SPEC.before, after=SPEC.after, resample=SPEC.resample,
                      normalise=how, min_coverage=0.5)
    for data in (rows, gap):
        frame = readings(data)
        w = build_windows(frame, T, spec)
        before = W._fill(resample_window(frame, start, T, spec.resample))
        after = W._fill(resample_window(frame, T, T + spec.after, spec.resample))
        want_b, want_a, _ = normalise(before, after, how)
        for got, want in ((w.before_raw, before), (w.after_raw, after), (w.before, want_b),
                          (w.after, want_a)):
            pd.testing.assert_frame_equal(got, want, check_exact=True,
                                          check_column_type=False)
        assert w.data_quality["missing_fraction"] == (0.0 if data is rows else round(1 / 36, 6))


def _five_minute(start: pd.Timestamp, hours: int, noise: dict[str, float],
                 rng: np.random.Generator) -> pd.DataFrame:
    """Sensors at 5-minute readings: a daily cycle plus white noise of sd ``noise[s]``
    (0: the sensor is frozen at its level)."""
    times = pd.date_range(start, periods=hours * 12, freq="5min")
    cycle = np.sin(2 * np.pi * np.arange(len(times)) / 288)
    frames = [pd.DataFrame({"time": times, "sensor": s,
                            "value": 50 + (cycle + rng.normal(0, sd, len(times)) if sd else 0.0)})
              for s, sd in noise.items()]
    return pd.concat(frames, ignore_index=True)


def test_spread_channels_are_the_log_spread_within_each_bin():
    """5-minute readings in hourly bins give each sensor a spread channel: log(sd + floor),
    the floor a tenth of its median spread before; a sensor frozen in the after window
    reads log(floor) there, and its hourly means hardly say so."""
    from monitor.windows import SPREAD_FLOOR

    rng = np.random.default_rng(0)
    before = _five_minute(T - pd.Timedelta(hours=6), 6, {"a": 0.1, "b": 0.1}, rng)
    after = _five_minute(T, 6, {"a": 0.1, "b": 0.0}, rng)
    after.loc[after["sensor"] == "b", "value"] = 50.0  # frozen at its level
    w = build_windows(pd.concat([before, after], ignore_index=True), T, SPEC)
    assert w.spread is not None and w.spread.names == ("a", "b")
    assert w.spread.before.shape == (6, 2) and w.spread.after.shape == (6, 2)
    sds = before.assign(h=before["time"].dt.floor("h")).groupby(["sensor", "h"])["value"].std()
    floor_a = SPREAD_FLOOR * float(np.median(sds["a"].to_numpy()))
    floor_b = SPREAD_FLOOR * float(np.median(sds["b"].to_numpy()))
    np.testing.assert_allclose(w.spread.before[:, 0], np.log(sds["a"].to_numpy() + floor_a))
    np.testing.assert_allclose(w.spread.after[:, 1], np.log(floor_b))
    assert (w.spread.after[:, 0] > np.log(floor_a) + 1).all()
    # the medians the result states, in the source's units: b's after is frozen
    medians = w.spread.medians()
    assert medians["b"][0] == pytest.approx(float(np.median(sds["b"].to_numpy())))
    assert medians["b"][1] == pytest.approx(0.0, abs=1e-12)


def test_hourly_readings_in_hourly_bins_have_no_spread_channel():
    """One or two readings a bin say nothing of a spread: no channel (SKAB's one-second
    readings in two-second bins are such data)."""
    rows = grid("a", T - pd.Timedelta(hours=6), 12, 60, minute_value) + \
        grid("b", T - pd.Timedelta(hours=6), 12, 30, minute_value)
    w = build_windows(readings(rows), T, SPEC)
    assert w.spread is None
