"""The JSONL sink after a crash: a torn last line does not swallow the next result."""
from __future__ import annotations

import json

import pytest

from connectors.jsonl import JsonlSink, JsonlSinkConfig
from tests.results_file import read_results


def _result(fp: str) -> dict:
    return {"fingerprint": fp, "status": "ok", "selected_sensors": ["n1"]}


def test_a_torn_last_line_is_ended_before_the_next_result(tmp_path, caplog):
    path = tmp_path / "results.jsonl"
    whole = json.dumps(_result("a")) + "\n"
    torn = json.dumps(_result("b"))[:17]  # a writer killed in the middle of "b"
    path.write_text(whole + torn)

    sink = JsonlSink(JsonlSinkConfig(path=path))
    sink.send(_result("b"))  # the outbox redelivers b in full
    sink.send(_result("c"))

    lines = path.read_text().split("\n")
    assert lines == [whole.strip(), torn, json.dumps(_result("b"), separators=(",", ":")),
                     json.dumps(_result("c"), separators=(",", ":")), ""]
    assert [r["fingerprint"] for r in read_results(path, skip_torn=True)] == ["a", "b", "c"]
    assert "last line is unfinished" in caplog.text
    with pytest.raises(ValueError):  # a reader that is not told to skip it sees the torn line
        read_results(path)


def test_a_finished_file_gets_no_blank_line_and_no_duplicate(tmp_path):
    path = tmp_path / "results.jsonl"
    path.write_text(json.dumps(_result("a")) + "\n")
    sink = JsonlSink(JsonlSinkConfig(path=path))
    sink.send(_result("a"))  # already there: not written twice
    sink.send(_result("b"))
    assert [r["fingerprint"] for r in read_results(path)] == ["a", "b"]
    assert "\n\n" not in path.read_text()


def test_a_reader_leaves_out_the_line_still_being_written(tmp_path):
    path = tmp_path / "results.jsonl"
    path.write_text(json.dumps(_result("a")) + "\n" + json.dumps(_result("b"))[:20])
    assert [r["fingerprint"] for r in read_results(path)] == ["a"]
