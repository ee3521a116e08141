"""Accuracy and detection on the paper's synthetic benchmark (Section 5), shape changes, null.

    python -m bench.synthetic [--reps 30] [--null-reps 200] [--settings ...]
        [--methods M ... | none] [--peers | --merge-peers CSV] [--jobs 1] [--threads 1]
        [--alpha 0.05] [--seed 0] [--out bench/results] [--name synthetic]

D = 20, |S| = 2, n = m = 200. Settings (``bench._common``): the paper's six
(``SETTINGS``) and four shape changes at equal mean and variance (``SHAPE_SETTINGS``:
bimodal, skewed, heavy_tails, light_tails); all ten by default. For each setting and
repetition every method is fitted with its defaults on the same data set; precision,
recall, F1 of the selected set (and the F1 of the engine's ``candidates``, the rule's pick
at any p-value, when its results have them), the detection rate (the fraction of data sets
with p_value < alpha) and the seconds per fit are reported (mean +/- sd). A fit that raises is
recorded as a crash (F1 0, not detected), not an abort. For CVAggregation the final scores
are also re-selected with every selection rule (``rule_*`` columns).

The null (P = Q, ``--null-reps`` data sets) runs CVAggregation (when in ``--methods``) and
the peers; the rejection count is checked with an exact one-sided binomial test of
H0: rate <= alpha (``scipy.stats.binomtest``).

Peers (``--peers``): alibi-detect's ``KSDrift`` (per-feature two-sample KS, Bonferroni
correction, p_val = alpha; detection = ``is_drift``, attribution = the features whose
p-value is below alpha / D; method ``alibi-ks``) and ``MMDDrift`` (its defaults: Gaussian
kernel with the median heuristic, 100 permutations; pytorch backend; detection =
``is_drift``, no attribution; method ``alibi-mmd``). alibi-detect is an optional extra:
``pip install -e '.[peers]'``; it pins numpy < 2 and pandas < 3, so install it into a venv
of its own (docs/engine.md, Benchmarks). Run the peers alone with ``--methods none --peers`` (writes
``<out>/synthetic_peers.*``), and merge the saved rows into a later engine run with
``--merge-peers bench/results/synthetic_peers.csv`` (same ``--seed``: same data sets).

``--jobs N`` fits the data sets in N processes, each with ``--threads`` torch threads
(default 1: on a loaded shared machine two threads per fit were 20 times slower). Writes
``<out>/<name>.csv`` (one row per fit, with a fingerprint of its data set),
``<name>_summary.csv`` and ``<name>.md``.
"""
from __future__ import annotations

import argparse
import hashlib
import logging
import multiprocessing
import shlex
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from tqdm import tqdm

from bench._common import (
    ALL_SETTINGS,
    SETTINGS,
    SHAPE_SETTINGS,
    machine_load,
    precision_recall_f1,
    synthetic,
)
from monitor.names import METHODS as ENGINE_METHODS

RESULTS = Path(__file__).resolve().parent / "results"
#: the peer methods of ``--peers`` (alibi-detect)
PEERS = ("alibi-ks", "alibi-mmd")
#: how to get them
PEERS_HINT = ("alibi-detect is not installed: pip install -e '.[peers]' (it pins numpy < 2 "
              "and pandas < 3: use a venv of its own, see docs/engine.md, Benchmarks)")
MMD_BACKENDS = ("pytorch", "tensorflow", "keops")

#: one data set: (setting, rep, seed, engine methods, peers, alpha, MMDDrift backend, threads)
Job = tuple[str, int, int, tuple[str, ...], tuple[str, ...], float, str | None, int | None]


def dataset(setting: str, rep: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The data set of ``setting`` (or ``"null"``) and repetition ``rep``: X, Y, S."""
    component = ALL_SETTINGS.index(setting) + 1 if setting in ALL_SETTINGS else 0
    return synthetic(setting, np.random.default_rng([seed, component, rep]))


def data_sha(x: np.ndarray, y: np.ndarray, truth: np.ndarray) -> str:
    """A short fingerprint of one data set: merged rows must come from the same data."""
    h = hashlib.sha256()
    for a in (x, y, truth):
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()[:16]


def _quiet_alibi() -> None:
    logging.getLogger("alibi_detect").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", module="alibi_detect")


def mmd_backend() -> str | None:
    """The first MMDDrift backend that fits a tiny problem, or None without alibi-detect."""
    try:
        from alibi_detect.cd import MMDDrift
    except ImportError:
        return None
    _quiet_alibi()
    x = np.random.default_rng(0).normal(size=(20, 3)).astype(np.float32)
    for backend in MMD_BACKENDS:
        try:
            MMDDrift(x, backend=backend, p_val=0.05, n_permutations=5).predict(x + 1)
            return backend
        except Exception as exc:  # noqa: BLE001 - a missing or broken backend: try the next
            print(f"MMDDrift backend {backend} unusable ({type(exc).__name__}: {exc})",
                  file=sys.stderr)
    raise RuntimeError(f"alibi-detect's MMDDrift runs on none of the backends {MMD_BACKENDS}")


def fit_engine(method: str, x: np.ndarray, y: np.ndarray, truth: np.ndarray, rep: int,
               alpha: float) -> dict[str, Any]:
    """One engine fit with its defaults: scores, p-value, and the ``rule_*`` F1 for CVAggregation."""
    from engine import METHODS
    from engine.selection import RULES, select

    t0 = time.perf_counter()
    res = METHODS[method](seed=rep).fit(x, y)
    secs = time.perf_counter() - t0
    p, r, f = precision_recall_f1(res.selected, truth)
    row: dict[str, Any] = {"precision": p, "recall": r, "f1": f, "seconds": secs,
                           "p_value": res.p_value, "detected": bool(res.p_value < alpha),
                           "n_selected": len(res.selected),
                           "selected": " ".join(map(str, res.selected))}
    candidates = getattr(res, "candidates", None)
    if candidates is not None:
        row["candidates_f1"] = precision_recall_f1(candidates, truth)[2]
    if method == "cv-aggregation":
        for rule in RULES:
            chosen, _ = select(res.scores, rule)
            row[f"rule_{rule}_f1"] = precision_recall_f1(chosen, truth)[2]
    return row


def fit_peer(peer: str, x: np.ndarray, y: np.ndarray, truth: np.ndarray, rep: int,
             alpha: float, backend: str | None) -> dict[str, Any]:
    """One alibi-detect detector, reference X, test Y; its defaults but ``p_val = alpha``."""
    from alibi_detect.cd import KSDrift, MMDDrift

    _quiet_alibi()
    t0 = time.perf_counter()
    if peer == "alibi-ks":
        out = KSDrift(x, p_val=alpha, correction="bonferroni").predict(y, drift_type="batch",
                                                                       return_p_val=True)["data"]
        per_feature = np.asarray(out["p_val"], dtype=float)
        selected = np.flatnonzero(per_feature < alpha / x.shape[1])
        secs = time.perf_counter() - t0
        p, r, f = precision_recall_f1(selected, truth)
        return {"precision": p, "recall": r, "f1": f, "seconds": secs,
                # Bonferroni-adjusted smallest p: is_drift <=> p_value < alpha
                "p_value": float(min(1.0, per_feature.min() * x.shape[1])),
                "detected": bool(out["is_drift"]), "n_selected": len(selected),
                "selected": " ".join(map(str, selected))}
    if peer == "alibi-mmd":
        import torch

        np.random.seed(rep)
        torch.manual_seed(rep)
        det = MMDDrift(x.astype(np.float32), backend=backend or "pytorch", p_val=alpha)
        out = det.predict(y.astype(np.float32))["data"]
        return {"precision": np.nan, "recall": np.nan, "f1": np.nan,
                "seconds": time.perf_counter() - t0, "p_value": float(out["p_val"]),
                "detected": bool(out["is_drift"]), "n_selected": np.nan, "selected": ""}
    raise ValueError(f"unknown peer {peer!r}")


def run_dataset(job: Job) -> list[dict[str, Any]]:
    """Every method on one data set; a method that raises gives a crash row."""
    setting, rep, seed, methods, peers, alpha, backend, threads = job
    if threads is not None:
        import torch

        torch.set_num_threads(threads)
    x, y, truth = dataset(setting, rep, seed)
    rows = []
    for method in (*methods, *peers):
        base = {"setting": setting, "rep": rep, "seed": seed, "method": method,
                "truth": " ".join(map(str, truth)), "data_sha": data_sha(x, y, truth),
                "crashed": False, "error": ""}
        t0 = time.perf_counter()
        try:
            if method in PEERS:
                row = fit_peer(method, x, y, truth, rep, alpha, backend)
            else:
                row = fit_engine(method, x, y, truth, rep, alpha)
        except Exception as exc:  # noqa: BLE001 - a crash is a result, not an abort
            f1 = np.nan if method == "alibi-mmd" else 0.0
            row = {"precision": f1, "recall": f1, "f1": f1, "seconds": time.perf_counter() - t0,
                   "p_value": np.nan, "detected": False, "n_selected": 0, "selected": "",
                   "crashed": True, "error": f"{type(exc).__name__}: {exc}"[:300]}
        rows.append({**base, **row})
    return rows


def versions() -> str:
    """The interpreter and the versions that make the figures (peers run in a venv of their own)."""
    from importlib.metadata import PackageNotFoundError, version

    found = []
    for package in ("numpy", "scipy", "pandas", "torch", "alibi-detect"):
        try:
            found.append(f"{package} {version(package)}")
        except PackageNotFoundError:
            continue
    return f"Python `{sys.executable}`: " + ", ".join(found) + "."


def binomial_check(k: int, n: int, alpha: float) -> tuple[float, bool]:
    """One-sided exact binomial p-value of H0: rejection rate <= alpha given k of n; flag."""
    from scipy.stats import binomtest

    p = float(binomtest(k, n, alpha, alternative="greater").pvalue) if n else float("nan")
    return p, bool(p < 0.05)


def summarise(df: pd.DataFrame) -> pd.DataFrame:
    """Per setting and method: precision, recall, F1, detection rate, seconds, crashes."""
    alt = df[df.setting != "null"]
    summary = alt.groupby(["setting", "method"], sort=False).agg(
        precision_mean=("precision", "mean"), precision_sd=("precision", "std"),
        recall_mean=("recall", "mean"), recall_sd=("recall", "std"),
        f1_mean=("f1", "mean"), f1_sd=("f1", "std"),
        detection_rate=("detected", "mean"), detections=("detected", "sum"),
        seconds_mean=("seconds", "mean"), seconds_sd=("seconds", "std"),
        reps=("rep", "size"), crashes=("crashed", "sum"),
    ).reset_index()
    if "candidates_f1" in alt:
        cand = alt.groupby(["setting", "method"], sort=False).candidates_f1.mean()
        summary = summary.merge(cand.rename("candidates_f1_mean").reset_index(), how="left")
    return summary


def order(df: pd.DataFrame, methods: list[str]) -> pd.DataFrame:
    """Rows in setting order (``ALL_SETTINGS``, then the null), method order, repetition."""
    settings = [*ALL_SETTINGS, "null"]
    key_s = df.setting.map({s: i for i, s in enumerate(settings)})
    key_m = df.method.map({m: i for i, m in enumerate(methods)}).fillna(len(methods))
    return (df.assign(_s=key_s, _m=key_m).sort_values(["_s", "_m", "rep"], kind="stable")
            .drop(columns=["_s", "_m"]).reset_index(drop=True))


def merge_peers(path: Path, wanted: set[tuple[str, int]], seed: int) -> tuple[pd.DataFrame, int]:
    """The saved peer rows of ``path`` for the data sets in ``wanted`` (same seed, same data).

    Rows whose data fingerprint differs from this run's data set are dropped; returns the
    rows kept and the number dropped so.
    """
    # keep_default_na=False: the setting "null" must not be read as a missing value
    text = ("data_sha", "selected", "truth", "error")
    saved = pd.read_csv(path, keep_default_na=False, na_values=[""],
                        dtype={c: str for c in text})
    saved = saved[saved.method.isin(PEERS) & (saved.seed == seed)]
    keep = np.array([(s, int(r)) in wanted for s, r in zip(saved.setting, saved.rep)], dtype=bool)
    saved = saved[keep].copy()
    sha = {key: data_sha(*dataset(key[0], key[1], seed))
           for key in {(s, int(r)) for s, r in zip(saved.setting, saved.rep)}}
    same = np.array([sha[(s, int(r))] == d for s, r, d in
                     zip(saved.setting, saved.rep, saved.data_sha)], dtype=bool)
    for col in text[1:]:
        saved[col] = saved[col].fillna("")
    return saved[same], int((~same).sum())


def markdown(df: pd.DataFrame, summary: pd.DataFrame, args: argparse.Namespace, command: str,
             loads: tuple[str, str], notes: list[str]) -> str:
    """The report: per setting and method, side by side, rules, null with its binomial check."""

    def pm(mean: float, sd: float) -> str:
        if np.isnan(mean):
            return "n/a"
        return f"{mean:.2f} ± {0 if np.isnan(sd) else sd:.2f}"

    lines = ["# Synthetic benchmark (paper Section 5: D=20, |S|=2, n=m=200; shape changes)", "",
             (f"Command: `{command}`; {args.reps} data sets per setting, {args.null_reps} null; "
              f"alpha = {args.alpha}; {loads[0]} at start, {loads[1]} at end (shared machine: "
              "seconds are noisy)."), "",
             ("Settings: the paper's six, then shape changes of the two variables in S at equal "
              "mean 0 and variance 1 (bimodal: mixture of N(±0.9, 0.19); skewed: Exp(1) - 1; "
              "heavy_tails: t with 3 dof scaled to variance 1; light_tails: uniform). "
              "Detection rate: fraction of data sets with p_value < alpha (alibi: `is_drift`). "
              "alibi-mmd attributes nothing (precision, recall, F1 n/a)."), ""]
    lines += [f"- {n}" for n in notes] + ([""] if notes else [])
    cand = "candidates_f1_mean" in summary
    if cand:
        lines += [("F1 is of `selected` (empty when p_value >= alpha); F1 candidates is of the "
                   "engine's `candidates` (the rule's pick from the scores at any p-value)."), ""]
    lines += ["| setting | method | precision | recall | F1 | detection rate | seconds |"
              + (" F1 candidates |" if cand else ""), "|---|---|---|---|---|---|---|"
              + ("---|" if cand else "")]
    for _, r in summary.iterrows():
        det = f"{r.detection_rate:.2f} ({int(r.detections)}/{int(r.reps)})"
        lines.append(f"| {r.setting} | {r.method} | {pm(r.precision_mean, r.precision_sd)} | "
                     f"{pm(r.recall_mean, r.recall_sd)} | {pm(r.f1_mean, r.f1_sd)} | {det} | "
                     f"{pm(r.seconds_mean, r.seconds_sd)} |"
                     + (f" {pm(r.candidates_f1_mean, np.nan).split(' ')[0]} |" if cand else ""))
    alt = df[df.setting != "null"]
    crashes = alt[alt.crashed.astype(bool)]
    lines += ["", f"Crashes: {len(crashes)} of {len(alt)} fits."]
    for (s, m), g in crashes.groupby(["setting", "method"], sort=False):
        lines.append(f"- {s} / {m}: {len(g)} (first: {g.error.iloc[0]})")
    methods = list(dict.fromkeys(summary.method))
    if len(methods):
        f1 = summary.pivot(index="setting", columns="method", values="f1_mean")
        det = summary.pivot(index="setting", columns="method", values="detection_rate")
        settings = [s for s in ALL_SETTINGS if s in f1.index]
        lines += ["", "## Side by side (mean F1 / detection rate)", "",
                  "| setting | " + " | ".join(f"F1 {m}" for m in methods) + " | "
                  + " | ".join(f"detection {m}" for m in methods) + " |",
                  "|---|" + "---|" * (2 * len(methods))]
        ran = set(zip(summary.setting, summary.method))

        def cell(table: pd.DataFrame, s: str, m: str) -> str:
            if (s, m) not in ran:
                return "—"
            return "n/a" if np.isnan(table.at[s, m]) else f"{table.at[s, m]:.2f}"

        for s in settings:
            lines.append(f"| {s} | " + " | ".join(cell(f1, s, m) for m in methods) + " | "
                         + " | ".join(cell(det, s, m) for m in methods) + " |")
        for label, group in (("the paper's six", SETTINGS), ("the shape settings", SHAPE_SETTINGS)):
            sub = alt[alt.setting.isin(group)]
            if len(sub):
                f1m = sub.groupby("method", sort=False).f1.mean()
                detm = sub.groupby("method", sort=False).detected.mean()
                candm = (sub.groupby("method", sort=False).candidates_f1.mean()
                         if "candidates_f1" in sub else pd.Series(dtype=float))

                also = {m: "" if np.isnan(c) else f" (candidates {c:.2f})"
                        for m, c in candm.items()}
                lines += ["", f"Mean over {label}: " + "; ".join(
                    f"{m} F1 {'n/a' if np.isnan(f1m[m]) else f'{f1m[m]:.2f}'}{also.get(m, '')}, "
                    f"detection {detm[m]:.2f}" for m in f1m.index)]
    cv = alt[alt.method == "cv-aggregation"]
    rules = [c[len("rule_"):-len("_f1")] for c in df.columns
             if c.startswith("rule_") and c.endswith("_f1")]
    if len(cv) and rules:
        lines += ["", "## Selection rule applied to CVAggregation's final scores (mean F1)", "",
                  "| setting | " + " | ".join(rules) + " |", "|---|" + "---|" * len(rules)]
        for setting, g in cv.groupby("setting", sort=False):
            lines.append(f"| {setting} | " + " | ".join(f"{g[f'rule_{r}_f1'].mean():.2f}" for r in rules) + " |")
        lines.append("| all | " + " | ".join(f"{cv[f'rule_{r}_f1'].mean():.2f}" for r in rules) + " |")
    null = df[df.setting == "null"]
    if len(null):
        lines += ["", f"## Null (P = Q), {args.null_reps} data sets", "",
                  (f"Exact one-sided binomial test of H0: rejection rate <= {args.alpha} "
                   "(`scipy.stats.binomtest`, alternative 'greater'); flagged when its p < 0.05."),
                  "", ("| method | rejections | rate | rate <= alpha | binomial p | flagged | "
                       "crashes | median p_value | mean selected | seconds |"),
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for method, g in null.groupby("method", sort=False):
            k, n = int(g.detected.sum()), len(g)
            p, flag = binomial_check(k, n, args.alpha)
            sel = "n/a" if g.n_selected.isna().all() else f"{g.n_selected.mean():.2f}"
            lines.append(f"| {method} | {k} of {n} | {k / n:.1%} | "
                         f"{'yes' if k / n <= args.alpha else 'no'} | {p:.3f} | "
                         f"{'**yes**' if flag else 'no'} | {int(g.crashed.sum())} | "
                         f"{g.p_value.median():.3f} | {sel} | "
                         f"{g.seconds.mean():.2f} ± {g.seconds.std():.2f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=30, help="data sets per setting (default 30)")
    ap.add_argument("--null-reps", type=int, default=200, help="null data sets (default 200)")
    ap.add_argument("--methods", nargs="+", default=list(ENGINE_METHODS),
                    choices=[*ENGINE_METHODS, "none"],
                    help="engine methods (default all); 'none' runs no engine method")
    ap.add_argument("--settings", nargs="+", default=list(ALL_SETTINGS), choices=ALL_SETTINGS,
                    help="default: the paper's six and the shape settings")
    ap.add_argument("--alpha", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=0)
    peers = ap.add_mutually_exclusive_group()
    peers.add_argument("--peers", action="store_true",
                       help="also run alibi-detect's KSDrift and MMDDrift (pip install -e '.[peers]')")
    peers.add_argument("--merge-peers", type=Path, metavar="CSV",
                       help="add the saved peer rows of CSV (e.g. bench/results/synthetic_peers.csv)")
    ap.add_argument("--jobs", type=int, default=1, help="processes over data sets; default 1")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads per process (default 1); 0: torch's default")
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--name", default=None,
                    help="output file stem (default synthetic, or synthetic_peers with --methods none)")
    args = ap.parse_args(argv)
    methods = [] if "none" in args.methods else list(dict.fromkeys(args.methods))
    peer_methods = list(PEERS) if args.peers else []
    if not methods and not peer_methods:
        ap.error("nothing to run: give engine --methods, or --peers")
    if args.jobs < 1 or args.threads < 0:
        ap.error("--jobs must be >= 1 and --threads >= 0")
    name = args.name or ("synthetic" if methods else "synthetic_peers")
    backend = None
    if args.peers:
        backend = mmd_backend()
        if backend is None:
            print(PEERS_HINT, file=sys.stderr)
            return 2
    args.out.mkdir(parents=True, exist_ok=True)
    command = "python -m bench.synthetic " + shlex.join(sys.argv[1:] if argv is None else argv)

    threads = args.threads or None
    null_methods = tuple(m for m in methods if m == "cv-aggregation")
    jobs: list[Job] = [(s, r, args.seed, tuple(methods), tuple(peer_methods), args.alpha, backend,
                        threads) for s in args.settings for r in range(args.reps)]
    jobs += [("null", r, args.seed, null_methods, tuple(peer_methods), args.alpha, backend, threads)
             for r in range(args.null_reps)]
    jobs = [j for j in jobs if j[3] or j[4]]
    rows: list[dict[str, Any]] = []
    loads = [machine_load()]
    csv = args.out / f"{name}.csv"
    bar = tqdm(total=len(jobs), file=sys.stderr, desc="synthetic", unit="data set")
    if args.jobs == 1:
        results = map(run_dataset, jobs)
    else:
        pool = multiprocessing.get_context("spawn").Pool(args.jobs)
        results = pool.imap(run_dataset, jobs)
    try:
        for got in results:
            rows.extend(got)
            bar.update()
            pd.DataFrame(rows).to_csv(csv, index=False)
    finally:
        bar.close()
        if args.jobs > 1:
            pool.close()
            pool.join()
    loads.append(machine_load())

    notes = [versions() + f" {args.jobs} process(es), "
             + (f"{args.threads} torch thread(s) each." if args.threads else "torch's default threads.")]
    if backend is not None:
        notes.append(f"alibi-mmd: MMDDrift backend {backend}.")
    df = pd.DataFrame(rows)
    if args.merge_peers is not None:
        wanted = {(s, r) for s in args.settings for r in range(args.reps)}
        wanted |= {("null", r) for r in range(args.null_reps)}
        saved, differ = merge_peers(args.merge_peers, wanted, args.seed)
        df = pd.concat([df, saved], ignore_index=True)
        notes.append(f"Peer rows ({', '.join(PEERS)}) merged from `{args.merge_peers}` "
                     f"({len(saved)} rows, seed {args.seed}): the same data sets (checked by "
                     "fingerprint), not re-run.")
        if differ:
            msg = f"{differ} saved peer rows dropped: their data set differs from this run's."
            notes.append(msg)
            print(msg, file=sys.stderr)
        for peer in PEERS:
            have = {(s, int(r)) for s, r in zip(saved.setting[saved.method == peer],
                                                 saved.rep[saved.method == peer])}
            if wanted - have:
                msg = f"{peer}: {len(wanted - have)} of {len(wanted)} data sets missing in the merged file."
                notes.append(msg)
                print(msg, file=sys.stderr)
        peer_methods = list(PEERS)
    df = order(df, [*methods, *peer_methods])
    df.to_csv(csv, index=False)
    summary = summarise(df)
    summary.to_csv(args.out / f"{name}_summary.csv", index=False)
    text = markdown(df, summary, args, command, (loads[0], loads[1]), notes)
    (args.out / f"{name}.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
