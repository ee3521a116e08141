"""Inspection results as InfluxDB line protocol (docs/influxdb.md).

* ``mmdwatch_inspection``   tags ``site, status``; fields p_value, alpha, n_sensors,
  n_selected, runtime_s, fingerprint, method, summary (, error) - one point per result;
* ``mmdwatch_sensor_score`` tags ``site, sensor_id``; fields score, rank, selected
  (, mean_before, mean_after, z) - one point per sensor;
* ``mmdwatch_incident``     tags ``site, incident_id, event``; fields state, started,
  sensors, p_value, firing_inspections, onset, onset_low, onset_high and reason (those
  four when set) - one point per incident event (opened, updated,
  resolved), none otherwise.

All points carry the inspection time, so Grafana plots them on the data's time axis.
Non-finite floats are left out (line protocol has no NaN); a point keeps at least one field.
"""
from __future__ import annotations

import math
from typing import Any

from connectors.timeutil import to_utc

INSPECTION = "mmdwatch_inspection"
SENSOR_SCORE = "mmdwatch_sensor_score"
INCIDENT = "mmdwatch_incident"


def _escape_key(text: str) -> str:
    """Measurement, tag key/value or field key: escape commas, spaces, equals signs."""
    return (str(text).replace("\\", "\\\\").replace(",", "\\,").replace("=", "\\=")
            .replace(" ", "\\ ").replace("\n", "\\n"))


def _escape_measurement(text: str) -> str:
    return str(text).replace("\\", "\\\\").replace(",", "\\,").replace(" ", "\\ ")


def _field_value(value: Any) -> str | None:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return f"{value}i"
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else None
    if value is None:
        return None
    text = str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{text}"'


def line(measurement: str, tags: dict[str, Any], fields: dict[str, Any], time_ns: int) -> str:
    """One line; empty tag values are dropped (line protocol refuses them)."""
    tag_part = "".join(f",{_escape_key(k)}={_escape_key(v)}"
                       for k, v in sorted(tags.items()) if v not in (None, ""))
    field_items = [(k, _field_value(v)) for k, v in fields.items()]
    field_part = ",".join(f"{_escape_key(k)}={v}" for k, v in field_items if v is not None)
    if not field_part:
        raise ValueError(f"point of {measurement} has no finite field")
    return f"{_escape_measurement(measurement)}{tag_part} {field_part} {time_ns}"


def _time_ns(result: dict[str, Any]) -> int:
    return int(to_utc(result["inspection_time"]).value)


def result_lines(result: dict[str, Any], *, inspection_measurement: str = INSPECTION,
                 score_measurement: str = SENSOR_SCORE,
                 incident_measurement: str = INCIDENT) -> list[str]:
    """All points of one result (raises KeyError/ValueError on a result without a time)."""
    t = _time_ns(result)
    site = result.get("site", "")
    sensors = result.get("sensors") or []
    test = result.get("test") or {}
    generator = result.get("generator") or {}
    fields: dict[str, Any] = {
        "fingerprint": result.get("fingerprint", ""),
        "p_value": _float(test.get("p_value")),
        "alpha": _float(test.get("alpha")),
        "method": test.get("method"),
        "n_sensors": len(sensors),
        "n_selected": len(result.get("selected_sensors") or []),
        "selected_sensors": ",".join(map(str, result.get("selected_sensors") or [])),
        "runtime_s": _float(generator.get("runtime_s")),
        "summary": result.get("summary"),
        "error": result.get("error"),
        "detection_value": _float((result.get("detection") or {}).get("value")),
    }
    lines = [line(inspection_measurement, {"site": site, "status": result.get("status")},
                  fields, t)]
    for s in sensors:
        sensor_fields = {
            "score": _float(s.get("score")),
            "rank": int(s["rank"]) if s.get("rank") is not None else None,
            "selected": bool(s.get("selected", False)),
            "mean_before": _float(s.get("mean_before")),
            "mean_after": _float(s.get("mean_after")),
            "z": _float(s.get("z")),
        }
        lines.append(line(score_measurement, {"site": site, "sensor_id": s.get("sensor_id")},
                          sensor_fields, t))
    incident = result.get("incident") or {}
    if incident.get("event"):
        lines.append(line(incident_measurement,
                          {"site": site, "incident_id": incident.get("id"),
                           "event": incident["event"]},
                          {"state": incident.get("state"), "started": incident.get("started"),
                           "sensors": ",".join(map(str, incident.get("sensors") or [])),
                           "p_value": _float(incident.get("p_value")),
                           "firing_inspections": incident.get("firing_inspections"),
                           "onset": incident.get("onset"),
                           "onset_low": incident.get("onset_low"),
                           "onset_high": incident.get("onset_high"),
                           "reason": incident.get("reason")}, t))
    return lines


def _float(value: Any) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None
