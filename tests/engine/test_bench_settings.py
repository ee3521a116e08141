"""The benchmark's synthetic settings (bench/_common.py): the paper's six draw exactly what
they drew before the shape settings were added; the shape settings change the variables in
S at equal mean (0) and variance (1), and are not Gaussian."""
from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from bench._common import (
    ALL_SETTINGS,
    HEAVY_TAILS_DOF,
    SETTINGS,
    SHAPE_SETTINGS,
    shape_sample,
    synthetic,
)

# x.sum() + 2 * y.sum() and S of synthetic(setting, default_rng([0, i + 1, 0])), recorded
# from the code before the shape settings existed.
PAPER_DRAWS = {
    "shifted_means": ([1, 8], 353.049950358),
    "wider_variances": ([0, 17], 267.916540269),
    "narrower_variances": ([9, 16], -124.291796763),
    "laplace": ([17, 18], -17.398140828),
    "correlated_gaussian": ([1, 16], 56.258555832),
    "redundant_dirac": ([0, 13], 324.785692024),
}


def test_setting_tuples():
    assert SETTINGS == tuple(PAPER_DRAWS)
    assert ALL_SETTINGS == SETTINGS + SHAPE_SETTINGS
    assert SHAPE_SETTINGS == ("bimodal", "skewed", "heavy_tails", "light_tails")


@pytest.mark.parametrize("setting", SETTINGS)
def test_paper_settings_draw_as_before(setting):
    x, y, s = synthetic(setting, np.random.default_rng([0, ALL_SETTINGS.index(setting) + 1, 0]))
    truth, checksum = PAPER_DRAWS[setting]
    assert s.tolist() == truth
    assert float(x.sum() + 2 * y.sum()) == pytest.approx(checksum, abs=1e-6)


@pytest.mark.parametrize("setting", SHAPE_SETTINGS)
def test_shape_settings_have_mean_0_variance_1(setting):
    z = shape_sample(setting, np.random.default_rng(0), (400_000,))
    assert abs(z.mean()) < 0.01
    # t_3 has no fourth moment: its sample variance converges slowly.
    assert z.var() == pytest.approx(1.0, abs=0.06 if setting == "heavy_tails" else 0.015)


def test_heavy_tails_scale_gives_unit_variance():
    nu = HEAVY_TAILS_DOF
    assert nu > 2
    assert stats.t(nu).var() * (nu - 2) / nu == pytest.approx(1.0)


@pytest.mark.parametrize("setting", SHAPE_SETTINGS)
def test_shape_settings_change_only_s_and_are_not_gaussian(setting):
    x, y, s = synthetic(setting, np.random.default_rng([7, 1]), n=20_000)
    assert len(s) == 2
    for j in range(x.shape[1]):
        col = y[:, j]
        assert abs(col.mean()) < 0.03
        assert col.var() == pytest.approx(1.0, abs=0.1)
        p = stats.kstest(col, "norm").pvalue
        if j in s:
            assert p < 1e-10, (setting, j, p)
        else:
            assert p > 1e-4, (setting, j, p)
        assert stats.kstest(x[:, j], "norm").pvalue > 1e-4


def test_unknown_setting_raises():
    with pytest.raises(ValueError, match="unknown"):
        synthetic("nope", np.random.default_rng(0))
    with pytest.raises(ValueError, match="unknown"):
        shape_sample("laplace", np.random.default_rng(0), (3,))


def test_binomial_check_flags_only_a_significant_excess():
    from bench.synthetic import binomial_check

    p, flagged = binomial_check(10, 200, 0.05)
    assert p > 0.05 and not flagged
    p, flagged = binomial_check(18, 200, 0.05)
    assert p < 0.05 and flagged
    assert binomial_check(0, 40, 0.05) == (1.0, False)


def test_a_fit_that_raises_is_a_crash_row_not_an_abort(monkeypatch):
    import bench.synthetic as bs

    def boom(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(bs, "fit_engine", boom)
    (row,) = bs.run_dataset(("bimodal", 0, 0, ("cv-aggregation",), (), 0.05, None, None))
    assert row["crashed"] and row["error"] == "RuntimeError: boom"
    assert row["f1"] == 0.0 and not row["detected"]
    x, y, truth = bs.dataset("bimodal", 0, 0)
    assert row["data_sha"] == bs.data_sha(x, y, truth)
    assert row["truth"] == " ".join(map(str, truth))


def test_peers_without_alibi_detect_name_the_extra(tmp_path, capsys):
    try:
        import alibi_detect  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("alibi-detect is installed here")
    from bench.synthetic import main

    assert main(["--methods", "none", "--peers", "--reps", "1", "--null-reps", "0",
                 "--out", str(tmp_path)]) == 2
    assert "pip install -e '.[peers]'" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_merged_peer_rows_keep_the_null_and_must_match_the_data(tmp_path):
    import pandas as pd

    from bench.synthetic import data_sha, dataset, merge_peers

    rows = []
    for setting, rep in (("null", 0), ("bimodal", 0), ("bimodal", 1), ("skewed", 0)):
        rows.append({"setting": setting, "rep": rep, "seed": 0, "method": "alibi-mmd",
                     "data_sha": data_sha(*dataset(setting, rep, 0)), "f1": float("nan"),
                     "selected": "", "truth": "", "error": "", "detected": False})
    rows[2]["data_sha"] = "0" * 16  # a data set that is not this code's bimodal rep 1
    rows.append({**rows[1], "method": "cv-aggregation"})  # not a peer: never merged
    path = tmp_path / "peers.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    wanted = {("null", 0), ("bimodal", 0), ("bimodal", 1)}
    saved, differ = merge_peers(path, wanted, seed=0)
    assert differ == 1
    assert sorted(zip(saved.setting, saved.rep)) == [("bimodal", 0), ("null", 0)]
    assert set(saved.method) == {"alibi-mmd"}
    assert merge_peers(path, wanted, seed=1)[0].empty
