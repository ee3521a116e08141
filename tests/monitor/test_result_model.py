"""monitor.result: the typed inspection result writes the JSON of docs/result.md and reads
it back, tolerant of older and hand-made results."""
from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from monitor.decision.incidents import Incident
from monitor.report import write_backfill_report, write_inspection_report
from monitor.report.example import example_backfill, example_inspection
from monitor.report.view import InspectionView
from monitor.result import (
    SCHEMA,
    ChangeTest,
    DetectionBlock,
    InspectionResult,
    SensorScore,
    WindowBounds,
    WindowsBlock,
)

ROOT = Path(__file__).resolve().parents[2]
REQUIRED = ("schema", "fingerprint", "site", "status", "inspection_time", "windows", "test",
            "sensors", "selected_sensors", "summary", "data_quality", "generator")


def _doc_examples() -> list[dict[str, Any]]:
    """The JSON examples of docs/result.md (shortened with "...", still JSON objects)."""
    text = (ROOT / "docs" / "result.md").read_text()
    blocks = re.findall(r"```json\n(.*?)```", text, flags=re.DOTALL)
    return [json.loads(b) for b in blocks]


def _calibrated_firing() -> dict[str, Any]:
    docs = [d for d in _doc_examples() if d["status"] == "firing"
            and d["test"].get("decision") == "calibrated"]
    assert docs, "docs/result.md has a calibrated firing example"
    return copy.deepcopy(docs[0])


def test_every_documented_example_reads_back_and_writes_out_unchanged() -> None:
    examples = _doc_examples()
    assert {e["status"] for e in examples} == {"firing", "calibrating", "error"}
    for example in examples:
        typed = InspectionResult.from_dict(example)
        assert typed.to_dict() == example
        assert json.dumps(typed.to_dict()) == json.dumps(example)  # key order too


def test_typed_fields_carry_the_values() -> None:
    typed = InspectionResult.from_dict(_calibrated_firing())
    assert typed.calibrated and typed.firing and typed.schema == SCHEMA
    assert typed.selected_sensors == ["n202"]
    top = typed.sensors[0]
    assert (top.sensor_id, top.rank, top.selected) == ("n202", 1, True)
    assert top.z == pytest.approx(-14.5607) and top.engine_score == pytest.approx(0.529305)
    assert typed.detection is not None and typed.detection.history_needed == 96
    assert typed.engine is not None and typed.engine.method == "cv-aggregation"
    assert typed.windows.after.n == 16 and typed.generator.device == "cpu"
    assert typed.sensor("n587") is not None and typed.sensor("nope") is None


def test_z_and_engine_score_keys_follow_the_rule_even_when_null() -> None:
    """A calibrated result writes ``z`` on every row (also null), and ``engine_score`` on
    every row when the engine ran; an engine-rule result writes neither."""
    result = InspectionResult(
        fingerprint="f", site="s", status="ok", inspection_time="2026-01-12T00:00:00Z",
        test=ChangeTest(method="cv-aggregation", p_value=0.5, alpha=0.05, seed=0,
                        decision="calibrated"),
        sensors=[SensorScore("a", 1, None, z=None), SensorScore("b", 2, 0.1, z=0.1)],
        detection=DetectionBlock(statistic="residual-top-k"))
    rows = result.to_dict()["sensors"]
    assert [r["z"] for r in rows] == [None, 0.1]
    assert all("engine_score" not in r for r in rows)
    assert InspectionResult.from_dict(result.to_dict()).to_dict() == result.to_dict()

    result.test.decision = None
    assert all("z" not in r or r["z"] is not None
               for r in result.to_dict()["sensors"])  # only a known z is kept


def test_an_empty_or_bare_object_still_reads() -> None:
    typed = InspectionResult.from_dict({})
    assert typed.status == "unknown" and typed.sensors == [] and typed.engine is None
    out = typed.to_dict()
    assert set(REQUIRED) <= set(out)
    assert out["engine"] is None and out["detection"] is None and out["incident"] is None
    with pytest.raises(TypeError, match="JSON object"):
        InspectionResult.from_dict([1, 2])  # type: ignore[arg-type]


def test_an_older_result_without_the_optional_blocks_reads() -> None:
    """No engine, detection, incident, raw means or data-quality details."""
    example = example_inspection(6, 2).result
    older = {k: v for k, v in example.items() if k != "engine"}
    typed = InspectionResult.from_dict(older)
    assert typed.engine is None and typed.detection is None and typed.incident is None
    assert typed.sensors[0].raw_mean_before is None
    assert typed.data_quality.dropped_reasons is None
    out = typed.to_dict()
    assert "dropped_reasons" not in out["data_quality"]  # optional keys stay absent
    assert all("z" not in r and "engine_score" not in r for r in out["sensors"])


def test_wrong_types_fall_back_and_unknown_keys_are_kept() -> None:
    result = _calibrated_firing()
    result["sensors"] = [{"rank": 1}, "junk", {"sensor_id": "x", "score": "0.5"},
                         {"sensor_id": "y", "rank": 2, "score": None, "colour": "red"}]
    result["engine"] = "not an object"
    result["windows"]["before"]["n"] = "many"
    result["something_new"] = {"nested": [1, 2]}
    result["test"]["power"] = 0.9
    typed = InspectionResult.from_dict(result)
    assert [(s.sensor_id, s.rank, s.score) for s in typed.sensors] == [("x", 3, 0.5),
                                                                        ("y", 2, None)]
    assert typed.engine is None and typed.windows.before.n == 0
    out = typed.to_dict()
    assert out["something_new"] == {"nested": [1, 2]} and out["test"]["power"] == 0.9
    assert out["sensors"][1]["colour"] == "red"
    out["something_new"]["nested"].append(3)  # the dict shares nothing with the object
    assert typed.extra["something_new"] == {"nested": [1, 2]}


def test_the_incident_block_is_an_incident_plus_its_event() -> None:
    result = _calibrated_firing()
    result["incident"] = {"id": "pressures-20190916T0300-abcdef12", "site": "pressures",
                          "state": "open", "started": "2019-09-16T03:00:00Z",
                          "last_firing": "2019-09-16T03:00:00Z", "sensors": ["n202"],
                          "p_value": 1.04107e-05, "firing_inspections": 1, "resolved": None,
                          "event": "opened"}
    typed = InspectionResult.from_dict(result)
    assert isinstance(typed.incident, Incident) and typed.incident_event == "opened"
    assert typed.incident.sensors == ["n202"]
    assert typed.to_dict() == result


def test_a_produced_result_validates_against_the_schema() -> None:
    schema = json.loads((ROOT / "docs" / "result.schema.json").read_text())
    result = InspectionResult(
        fingerprint="0" * 32, site="site-1", status="error",
        inspection_time="2026-01-12T00:00:00Z",
        windows=WindowsBlock(WindowBounds("2026-01-05T00:00:00Z", "2026-01-12T00:00:00Z"),
                             WindowBounds("2026-01-12T00:00:00Z", "2026-01-19T00:00:00Z"),
                             resample="1h", aggregate="mean", normalise="before"),
        test=ChangeTest(method="cv-aggregation", alpha=0.05, seed=0),
        summary="Inspection at 2026-01-12T00:00Z failed: no data", error="no data")
    result.generator.version = "0.1.0"
    doc = json.loads(result.to_json())
    assert list(jsonschema.Draft202012Validator(schema).iter_errors(doc)) == []


def test_reports_take_the_typed_result(tmp_path: Path) -> None:
    ex = example_inspection(6, 2)
    typed = InspectionResult.from_dict(ex.result)
    folder = write_inspection_report(typed, tmp_path, before=ex.before, after=ex.after)
    assert json.loads((folder / "result.json").read_text()) == typed.to_dict()
    view = InspectionView.from_result(typed)
    assert view.result is typed and view.selected == ex.result["selected_sensors"]
    results = [InspectionResult.from_dict(r) for r in example_backfill(6, days=4,
                                                                        change_day=2)]
    folder = write_backfill_report(results, tmp_path)
    assert len((folder / "results.jsonl").read_text().splitlines()) == 4


def test_a_report_of_a_dict_writes_it_back_as_delivered(tmp_path: Path) -> None:
    """A hand-made result missing required blocks is written back as it came, not filled
    in."""
    ex = example_inspection(6, 2)
    bare = {k: ex.result[k] for k in ("schema", "site", "status", "inspection_time",
                                      "sensors", "selected_sensors")}
    folder = write_inspection_report(bare, tmp_path)
    assert json.loads((folder / "result.json").read_text()) == bare


def test_importing_the_result_loads_no_heavy_module() -> None:
    code = ("import sys\nimport monitor.result\n"
            "print(sorted(m for m in ('torch', 'pandas', 'numpy', 'matplotlib') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]"
