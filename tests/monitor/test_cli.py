"""The ``mmdwatch`` CLI on real data: L-Town dev set (leak) and a stream with no change."""
from __future__ import annotations

import gc
import json
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from monitor.demo.simulate import Scenario, simulate, write_csv
from tests.cli_runner import run_mmdwatch
from tests.result_contract import check_output
from tests.shared_data import LTOWN

ROOT = Path(__file__).resolve().parents[2]


def mmdwatch(*args: str) -> subprocess.CompletedProcess:
    out = run_mmdwatch(*args, cwd=ROOT)
    check_output(out.stdout)  # every printed result follows docs/result.schema.json
    return out


def test_help_does_not_import_heavy_modules():
    code = ("import sys\nfrom monitor.cli import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in ('torch', 'pandas', 'ot', 'sklearn', 'matplotlib', "
            "'apscheduler') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, timeout=60, check=False)
    assert out.returncode == 0
    assert out.stdout.strip().splitlines()[-1] == "[]"
    for command in ("demo", "run", "inspect", "backfill", "check-config", "ack"):
        assert command in out.stdout


@pytest.mark.slow
@pytest.mark.skipif(not LTOWN.exists(), reason="shared L-Town data not present")
def test_inspect_ltown_fires_on_the_leak_sensors(tmp_path):
    truth = json.loads((LTOWN / "ground_truth.json").read_text())
    at = truth["inspection_time"].replace(" ", "T")
    out = mmdwatch("inspect", "--data", str(LTOWN / "pressures.csv.gz"), "--at", at,
                   "--profile", "retrospective", "--report", str(tmp_path), "--sensors-file", str(LTOWN / "sensors.csv"),
                   "--links-file", str(LTOWN / "network_links.csv"))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 1  # stdout carries exactly one result
    result = json.loads(lines[0])
    assert result["schema"] == "mmdwatch.inspection/v1"
    assert result["status"] == "firing", result["summary"]
    top3 = [s["sensor_id"] for s in result["sensors"][:3]]
    leak_top = truth["sensors_by_leak_effect"][:5]
    assert set(top3) & set(leak_top), (top3, leak_top)
    assert result["windows"]["before"]["n"] == 168 and result["windows"]["after"]["n"] == 168
    assert len(result["sensors"]) == 30 and result["data_quality"]["dropped_sensors"] == []
    assert [s["rank"] for s in result["sensors"]] == list(range(1, 31))
    assert result["test"]["p_value"] < result["test"]["alpha"]
    for key in ("lambdas", "scores_per_lambda", "threshold"):
        assert key in result["engine"]
    assert result["fingerprint"] and result["generator"]["runtime_s"] > 0
    # --sensors-file/--links-file reach the report without a config: the map is drawn
    (folder,) = tmp_path.iterdir()
    assert (folder / "network_map.png").is_file() and (folder / "index.html").is_file()


@pytest.mark.slow
def test_inspect_is_ok_on_a_stream_without_change(tmp_path):
    frame, _ = simulate(Scenario(change_at=None, seed=11))
    path = tmp_path / "calm.csv.gz"
    write_csv(frame, path)
    # the live default: data from 01-05 to 01-19, so 5.3 days of calibration history
    out = mmdwatch("inspect", "--data", str(path), "--at", "2026-01-18T00:00:00")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["status"] == "ok", result["summary"]
    assert result["detection"]["history_n"] >= 96
    assert len(result["sensors"]) == 12


@pytest.mark.slow
def test_backfill_writes_json_lines_and_progress(tmp_path):
    frame, _ = simulate(Scenario(n_sensors=8, changes={"s04": -0.9}))
    path = tmp_path / "net.csv"
    write_csv(frame, path)
    out_file = tmp_path / "out.jsonl"
    out = mmdwatch("backfill", "--data", str(path), "--start", "2026-01-12",
                   "--end", "2026-01-14", "--every", "1d", "--method", "mmd-baseline",
                   "--out", str(out_file))
    assert out.returncode == 0, out.stderr
    results = [json.loads(x) for x in out_file.read_text().splitlines()]
    assert [r["inspection_time"] for r in results] == [
        "2026-01-12T00:00:00Z", "2026-01-13T00:00:00Z", "2026-01-14T00:00:00Z"]
    # stderr is not a TTY here: progress comes as log lines, the last one at 100 %
    assert "backfill: 3/3 insp (100%" in out.stderr
    assert len({r["fingerprint"] for r in results}) == 3
    counts = {s: sum(r["status"] == s for r in results)
              for s in ("firing", "ok", "calibrating", "error", "incomplete")}
    assert "backfill: 3 inspections (" + ", ".join(
        f"{s} {n}" for s, n in counts.items()) + ")" in out.stderr


def test_a_backfill_keeps_its_results_in_memory_only_for_a_report():
    """The results are written as they come; only ``--report`` needs them all at the end
    (a year of them at many sensors would hold gigabytes)."""
    from monitor.cli import WrittenResults

    statuses = ["ok", "firing", "ok", "incomplete"]
    plain, for_report = WrittenResults(keep=False), WrittenResults(keep=True)
    for i, status in enumerate(statuses):
        for written in (plain, for_report):
            written.add({"inspection_time": f"2026-01-0{i + 1}T00:00:00Z", "status": status})
    assert plain.results == [] and plain.total == for_report.total == 4
    assert plain.counts == for_report.counts == {"ok": 2, "firing": 1, "incomplete": 1}
    assert [r["status"] for r in for_report.results] == statuses


@pytest.mark.slow
def test_the_mmdwatch_process_and_main_in_a_caller_give_the_same_results(tmp_path):
    """``entry`` (the console script, ``python -m monitor.cli``) freezes the heap for a
    one-shot command; ``main`` called in a process that goes on leaves its collector
    alone. Both write the same results."""
    frame, _ = simulate(Scenario(n_sensors=8, changes={"s04": -0.9}))
    path = tmp_path / "net.csv"
    write_csv(frame, path)
    args = ["backfill", "--data", str(path), "--start", "2026-01-12", "--end", "2026-01-14",
            "--every", "1d", "--method", "mmd-baseline"]
    frozen = gc.get_freeze_count()
    in_caller = run_mmdwatch(*args, "--out", str(tmp_path / "main.jsonl"), cwd=ROOT)
    assert in_caller.returncode == 0, in_caller.stderr
    assert gc.get_freeze_count() == frozen
    own = subprocess.run([sys.executable, "-m", "monitor.cli", *args,
                          "--out", str(tmp_path / "entry.jsonl")],
                         capture_output=True, text=True, cwd=ROOT, timeout=120, check=False)
    assert own.returncode == 0, own.stderr

    def essentials(name: str) -> list[tuple]:
        rows = [json.loads(x) for x in (tmp_path / name).read_text().splitlines()]
        return [(r["fingerprint"], r["status"], r["test"]["p_value"],
                 [s["sensor_id"] for s in r["sensors"]]) for r in rows]

    assert essentials("entry.jsonl") == essentials("main.jsonl")
    assert len(essentials("main.jsonl")) == 3


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's mallopt only")
def test_a_one_shot_process_keeps_the_memory_it_frees():
    """The allocator settings a one-shot command makes (``_keep_freed_memory``) are taken
    by glibc: ``mallopt`` accepts both. In a child process, so that the test process's
    own allocator is left as it is."""
    code = "from monitor.cli import _keep_freed_memory; print(_keep_freed_memory())"
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           cwd=ROOT, timeout=60, check=True)
    assert child.stdout.strip() == "True", child.stderr


def test_bad_input_exits_2(tmp_path):
    missing = mmdwatch("inspect", "--data", str(tmp_path / "nope.csv"), "--at", "2019-03-11")
    assert missing.returncode == 2 and "does not exist" in missing.stderr
    bad_time = mmdwatch("inspect", "--data", str(tmp_path / "x.csv"), "--at", "yesterday")
    assert bad_time.returncode == 2 and "ISO 8601" in bad_time.stderr
    no_source = mmdwatch("inspect", "--at", "2019-03-11")
    assert no_source.returncode == 2


def test_a_backfill_outside_the_data_is_refused_with_the_datas_range(tmp_path):
    """Every window outside the data (as when the data's times carry an offset and
    --start has none): exit 2 with the data's range and the fix, not an error result at
    each inspection. A range that only reaches past the data's end runs, and says which
    inspections will have no reading."""
    frame, _ = simulate(Scenario(n_sensors=4, days=3, change_at=None))
    path = tmp_path / "short.csv"
    write_csv(frame, path)
    out = mmdwatch("backfill", "--data", str(path), "--start", "2026-02-06",
                   "--end", "2026-02-07", "--every", "1d")
    assert out.returncode == 2 and out.stdout == ""
    assert "the data holds readings from 2026-01-05T00:00:00+00:00 to 2026-01-07T" in out.stderr
    assert "give the times the data's offset" in out.stderr
    past = mmdwatch("backfill", "--data", str(path), "--start", "2026-01-07T12:00:00",
                    "--end", "2026-01-16T12:00:00", "--every", "3d", "--out", str(tmp_path / "o.jsonl"))
    assert past.returncode == 0, past.stderr
    assert "inspections after 2026-01-14T" in past.stderr
    assert "their results will be errors: end the backfill by 2026-01-07T07:50" in past.stderr
    statuses = [json.loads(x)["status"] for x in (tmp_path / "o.jsonl").read_text().splitlines()]
    assert statuses[-1] == "error"


def _inspect_three_days(tmp_path, at: str, with_stderr: bool = False) -> Any:
    """``mmdwatch inspect`` at ``at`` on 3 days of 4 simulated sensors from 2026-01-05:
    the result (and stderr, ``with_stderr``)."""
    frame, _ = simulate(Scenario(n_sensors=4, days=3, change_at=None))
    path = tmp_path / "short.csv"
    write_csv(frame, path)
    out = mmdwatch("inspect", "--data", str(path), "--at", at)
    assert out.returncode == 0
    return (json.loads(out.stdout), out.stderr) if with_stderr else json.loads(out.stdout)


def test_an_inspection_whose_data_begins_inside_the_before_window_is_incomplete(tmp_path):
    """Too little data because the data has not begun yet is no error of the data: the
    result is incomplete and says from when the before window is full (issue 29)."""
    result = _inspect_three_days(tmp_path, "2026-01-06T00:00:00")
    assert result["status"] == "incomplete" and "error" not in result
    assert "the data begins inside it" in result["incomplete"]
    assert "inspections from 2026-01-12T00:00:00+00:00 on" in result["incomplete"]
    assert result["summary"].startswith("Inspection at 2026-01-06T00:00Z: the before window")


def test_an_inspection_with_no_data_at_all_is_status_error(tmp_path):
    """The result is an error (the result contract); stderr says the data's range."""
    result, stderr = _inspect_three_days(tmp_path, "2026-02-06T00:00:00", with_stderr=True)
    assert result["status"] == "error" and "no readings between" in result["error"]
    assert result["summary"].startswith("Inspection at 2026-02-06T00:00Z failed")
    assert "inspect: the data holds readings from 2026-01-05T00:00:00+00:00" in stderr


def test_a_backfill_names_each_sites_sensor_left_out_of_most_of_its_results(caplog):
    """Counted per site: a sensor of one site left out of most of that site's results is
    named with its site, one left out of a few is not."""
    from monitor.cli import WrittenResults

    written = WrittenResults(keep=False)
    why = {"t": "before window has data in 20% of bins (needs 50%)"}
    for k in range(4):
        written.add({"site": "a", "status": "ok",
                     "data_quality": {"dropped_sensors": ["t"], "dropped_reasons": why}})
        written.add({"site": "b", "status": "ok",
                     "data_quality": {"dropped_sensors": ["t"] if k == 0 else [],
                                      "dropped_reasons": why}})
    written.add({"site": "a", "status": "error"})
    with caplog.at_level("WARNING", logger="mmdwatch"):
        written.report_dropped()
    expected = ("backfill: sensor t of site a was left out of 4 of 4 judged results: "
                "before window has data in 20% of bins (needs 50%)")
    assert caplog.messages == [expected]
