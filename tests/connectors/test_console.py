"""The console sink's text: the top sensors' change in the source's units."""
from __future__ import annotations

import io

from connectors.console import ConsoleSink, ConsoleSinkConfig, clock, render_text
from monitor.summary import format_change


def _result(**sensor_extra):
    sensor = {"sensor_id": "s06", "rank": 1, "score": 0.42, "selected": True,
              "mean_before": 1.0, "mean_after": 0.9729,
              "raw_mean_before": 36.12, "raw_mean_after": 35.14,
              "change": format_change(36.12, 35.14)}  # as the inspection writes it
    sensor.update(sensor_extra)
    return {"status": "firing", "site": "demo", "inspection_time": "2026-01-12T00:00:00Z",
            "summary": "Change", "test": {"method": "cv-aggregation", "p_value": 0.002,
                                          "alpha": 0.05},
            "selected_sensors": ["s06"], "sensors": [sensor], "fingerprint": "abc"}


def test_format_change_rounds_to_the_magnitude():
    assert format_change(36.12, 35.14) == "36.1 -> 35.1 (-1.0)"
    assert format_change(56.1, 55.2) == "56.1 -> 55.2 (-0.9)"
    assert format_change(0.01234, 0.01301) == "0.0123 -> 0.0130 (+0.0007)"
    assert format_change(1234.5, 1201.2) == "1234 -> 1201 (-33)"
    # a change below three significant digits of the level is shown as none (no "-0.0")
    assert format_change(48.3072, 48.3071) == "48.3 -> 48.3 (+0.0)"
    assert format_change(5.0, 5.0) == "5.00 -> 5.00 (+0.00)"
    assert format_change(-2.5, -2.25) == "-2.50 -> -2.25 (+0.25)"
    assert format_change(0.0, 0.0) == "0 -> 0 (+0)"
    assert format_change(None, 2.0) == "n/a -> 2"


def test_console_shows_raw_means_and_no_invented_unit():
    text = render_text(_result())
    line = next(x for x in text.splitlines() if "#1" in x)
    assert "s06: 36.1 -> 35.1 (-1.0)" in line
    assert "0.9729" not in text  # the normalised means are not shown
    assert "score 0.42" in line


def test_console_falls_back_to_raw_means_without_a_change_text():
    result = _result()
    del result["sensors"][0]["change"]  # a result written before the change text existed
    line = next(x for x in render_text(result).splitlines() if "#1" in x)
    assert "s06: 36.12 -> 35.14" in line


def test_console_falls_back_to_normalised_means_and_says_so():
    result = _result()
    for key in ("raw_mean_before", "raw_mean_after", "change"):
        del result["sensors"][0][key]
    line = next(x for x in render_text(result).splitlines() if "#1" in x)
    assert "1 -> 0.9729 (normalised)" in line


def test_console_sink_writes_the_text():
    out = io.StringIO()
    ConsoleSink(ConsoleSinkConfig(), stream=out).send(_result())
    assert out.getvalue().startswith("[FIRING] demo 2026-01-12T00:00:00Z")
    assert "s06: 36.1 -> 35.1 (-1.0)" in out.getvalue()


def _incident(event, **extra):
    block = {"id": "demo-20260114T0000-abcd1234", "state": "open", "event": event,
             "sensors": ["s04", "s06"], "onset": "2026-01-14T10:00:00Z",
             "onset_low": "2026-01-14T09:00:00Z", "onset_high": "2026-01-14T11:00:00Z"}
    block.update(extra)
    return block


def test_console_states_the_incident_event_with_its_onset_or_reason():
    firing = _result()
    firing["incident"] = _incident("opened")
    lines = render_text(firing).splitlines()
    assert lines[1] == ("  incident demo-20260114T0000-abcd1234 opened: s04, s06; onset "
                        "2026-01-14 10:00 (2026-01-14 09:00 .. 2026-01-14 11:00)")
    ok = {"status": "ok", "site": "demo", "inspection_time": "2026-01-15T08:00:00Z",
          "summary": "No change",
          "incident": _incident("resolved", state="resolved", reason="accepted",
                                accepted_by="operator")}
    assert render_text(ok).splitlines()[1] == \
        "  incident demo-20260114T0000-abcd1234 resolved (accepted by operator)"
    ok["incident"].update(reason="returned", accepted_by=None)
    assert render_text(ok).endswith("resolved (returned)")
    ok["incident"]["event"] = None  # an open incident without an event: no line
    assert render_text(ok) == "[OK] demo 2026-01-15T08:00:00Z  No change"


def test_console_shows_the_seconds_of_a_one_second_sources_onset():
    # inspections every 5 s: an onset to the minute would hide which of 12 it was
    assert clock("2026-12-07T06:07:05Z") == "2026-12-07 06:07:05"
    assert clock("2026-12-07T06:07:05.889358Z") == "2026-12-07 06:07:05"
    assert clock("2026-12-07T06:07:00.500000Z") == "2026-12-07 06:07:00"
    assert clock("2026-01-14T10:00:00Z") == "2026-01-14 10:00"  # hourly: as before
    assert clock("2026-01-14T10:00Z") == "2026-01-14 10:00"
    assert clock("not a time") == "not a time"


def test_console_only_events_prints_incident_events_only():
    out = io.StringIO()
    sink = ConsoleSink(ConsoleSinkConfig(only_events=True), stream=out)
    quiet = {"status": "ok", "site": "demo", "inspection_time": "2026-01-15T07:00:00Z",
             "summary": "No change", "incident": _incident(None)}
    sink.send(quiet)
    sink.send({**quiet, "incident": None})
    firing_without_event = _result()
    firing_without_event["incident"] = _incident(None)
    sink.send(firing_without_event)
    assert out.getvalue() == ""
    opened = _result()
    opened["incident"] = _incident("opened")
    sink.send(opened)
    assert out.getvalue().startswith("[FIRING] demo 2026-01-12T00:00:00Z")
    assert "opened: s04, s06" in out.getvalue()
