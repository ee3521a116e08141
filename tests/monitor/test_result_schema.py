"""docs/result.schema.json describes what the code really writes: results made by the real
Inspector and by ``mmdwatch inspect`` on the bundled demo data (computed, calibrating and
error ones) validate against it, and a result with an unknown status does not."""
from __future__ import annotations

import copy
import json
import math
from datetime import UTC, datetime
from typing import Any

import jsonschema  # the dev extra (pip install -e '.[dev]')
import numpy as np
import pytest

from connectors.timeutil import format_duration
from monitor import cli
from monitor.compose import build_inspector, build_source
from monitor.config import validate_config
from monitor.demo import DATA_FILE, demo_config, write_bundled_data
from monitor.inspection import SCHEMA, EngineSettings, Inspector
from monitor.result import InspectionResult
from monitor.windows import WindowSpec
from tests import result_contract

# The demo's leak starts 2026-01-12 06:00 and the data span 2026-01-05 .. 2026-01-18.
AT = datetime(2026, 1, 12, tzinfo=UTC)
BEFORE_THE_DATA = datetime(2025, 1, 12, tzinfo=UTC)
# Light engine settings (the product default method, far fewer splits, lambdas, epochs
# and permutations), so the test takes seconds on a CPU.
LIGHT = {"n_splits": 2, "n_lambdas": 2, "search_epochs": 10, "n_permutations": 49,
         "p_value_permutations": 99}


@pytest.fixture(scope="module")
def validator() -> Any:
    checker = result_contract.validator()  # the one every produced result is checked with
    jsonschema.Draft202012Validator.check_schema(checker.schema)
    return checker


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any]:
    """The demo's own config (file source on the bundled data) with a light engine, and a
    read_window over that source."""
    if not DATA_FILE.exists():
        write_bundled_data()
    raw = demo_config(tmp_path_factory.mktemp("state"), report=False)
    raw["source"].pop("speed", None)  # read in bulk, no replay
    raw["engine"].update(device="cpu", params=LIGHT)
    config = validate_config(raw, origin="test")
    source = build_source(config)
    resample = format_duration(config.windows.resample)

    def read(start: Any, end: Any) -> Any:
        return source.read_window(start, end, resample=resample,
                                  aggregate=config.windows.aggregate)

    return config, read


@pytest.fixture(scope="module")
def inspector(demo: tuple[Any, Any]) -> Inspector:
    """The config's window and engine settings; firing decided by the engine's p-value."""
    config, _ = demo
    e = config.engine
    engine = EngineSettings(method=e.method, alpha=e.alpha, seed=e.seed, device=e.device,
                            block_rows=config.block_rows,
                            params=tuple(sorted(e.params.items())))
    return Inspector(config.site, WindowSpec.from_config(config.windows), engine,
                     config.inspection_settings())


@pytest.fixture(scope="module")
def computed(inspector: Inspector, demo: tuple[Any, Any]) -> dict[str, Any]:
    return inspector.run(AT, demo[1]).result


def _errors(validator: Any, result: dict[str, Any]) -> list[str]:
    # through JSON, as every sink sees it (allow_nan=False as the outbox writes it)
    doc = json.loads(json.dumps(result, allow_nan=False))
    return [f"{'/'.join(map(str, e.absolute_path)) or '(top)'}: {e.message}"
            for e in validator.iter_errors(doc)]


def test_schema_names_the_format_the_code_writes(validator: Any) -> None:
    assert validator.schema["properties"]["schema"]["const"] == SCHEMA


def test_a_computed_inspection_validates(validator: Any, computed: dict[str, Any]) -> None:
    assert computed["status"] in {"ok", "firing"}, computed.get("error")
    assert isinstance(computed["engine"], dict) and computed["sensors"]
    assert _errors(validator, computed) == []


def test_the_inspection_the_config_builds_validates(validator: Any,
                                                    demo: tuple[Any, Any]) -> None:
    """Whatever status the composition root's inspector gives on the demo data."""
    config, read = demo
    result = build_inspector(config).run(AT, read).result
    assert result["schema"] == SCHEMA
    assert _errors(validator, result) == []


@pytest.mark.parametrize("case", ["no data in the windows", "one sensor left"])
def test_an_error_inspection_validates(validator: Any, inspector: Inspector,
                                       demo: tuple[Any, Any], case: str) -> None:
    read = demo[1]
    if case == "no data in the windows":
        result = inspector.run(BEFORE_THE_DATA, read).result
    else:  # fewer than windows.min_sensors (2) sensors with data
        def one_sensor(start: Any, end: Any) -> Any:
            frame = read(start, end)
            return frame[frame["sensor"] == "s01"]

        result = inspector.run(AT, one_sensor).result
    assert result["status"] == "error"
    assert result["error"]
    assert _errors(validator, result) == []


@pytest.mark.parametrize("at", ["2026-01-13T00:00:00", "2026-01-14T12:00:00"])
def test_what_mmdwatch_inspect_prints_validates(validator: Any, at: str,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """The CLI with its default profile (today: live, calibrated on the data's own history;
    the demo data hold too little history at the first time, enough at the second)."""
    if not DATA_FILE.exists():
        write_bundled_data()
    code = cli.main(["inspect", "--data", str(DATA_FILE), "--at", at, "--device", "cpu"])
    out = capsys.readouterr().out.splitlines()
    assert code == cli.EXIT_OK and len(out) == 1
    result = json.loads(out[0])
    assert result["inspection_time"] == at + "Z"
    assert _errors(validator, result) == []
    _round_trips(result)


def _round_trips(result: dict[str, Any]) -> None:
    """The typed result reads a produced result back and writes it out unchanged: the same
    keys, values and key order (the JSON text is identical)."""
    typed = InspectionResult.from_dict(result)
    assert typed.to_dict() == result
    assert json.dumps(typed.to_dict()) == json.dumps(result)


def test_the_typed_result_round_trips_what_the_inspector_writes(
        validator: Any, inspector: Inspector, demo: tuple[Any, Any],
        computed: dict[str, Any]) -> None:
    error = inspector.run(BEFORE_THE_DATA, demo[1])
    for result in (computed, error.result):
        _round_trips(result)
        assert _errors(validator, InspectionResult.from_dict(result).to_dict()) == []
    assert error.inspection.status == "error" and error.inspection.error


def test_unknown_status_fails_validation(validator: Any, computed: dict[str, Any]) -> None:
    bogus = copy.deepcopy(computed)
    bogus["status"] = "bogus"
    assert any(e.startswith("status:") for e in _errors(validator, bogus))


def test_new_fields_and_the_calibrating_status_are_allowed(
        validator: Any, computed: dict[str, Any]) -> None:
    result = copy.deepcopy(computed)
    result["status"] = "calibrating"
    result["calibration"] = "calibrating: 0.5 of 2.0 days of history"
    result["detection"] = {"anything": [1, 2]}
    result["incident"] = None
    result["something_new"] = {"nested": True}
    assert _errors(validator, result) == []


def test_the_suites_check_decides_as_the_reference(computed: dict[str, Any]) -> None:
    """``result_contract.check`` (jsonschema-rs first, for speed) accepts and refuses what
    ``jsonschema`` does, NumPy scalars and NaN included, and its error names the field."""
    result_contract.check(computed)
    numpy_scalar = copy.deepcopy(computed)
    numpy_scalar["test"]["p_value"] = np.float64(0.5)  # jsonschema-rs does not take these
    result_contract.check(numpy_scalar)
    not_a_number = copy.deepcopy(computed)
    not_a_number["test"]["p_value"] = math.nan  # a number to jsonschema, not to the other
    result_contract.check(not_a_number)
    bogus = copy.deepcopy(computed)
    bogus["status"] = "bogus"
    with pytest.raises(jsonschema.ValidationError, match="bogus"):
        result_contract.check(bogus)
