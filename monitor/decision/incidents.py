"""Incidents: consecutive firing inspections on the same change are one incident.

A pure state machine over results, in inspection-time order. An incident opens at the
first firing inspection, takes the sensors of its strongest firing inspection (the lowest
p-value so far: the evidence grows as the after windows fill with the change), and
resolves once no inspection has fired for ``resolve_after``. Each step says which event
the result carries: ``opened``, ``updated`` (the named sensors changed), ``resolved`` or
none. Sinks publish on events, not at every inspection (docs/result.md, "Incidents").

The agent keeps the open incident in its state database, written in the same transaction
as the result, so a restart neither loses nor repeats an event.
"""
from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field, replace
from datetime import timedelta
from typing import Any

from connectors.timeutil import parse_time


@dataclass(frozen=True)
class IncidentSettings:
    resolve_after: timedelta = timedelta(hours=24)


@dataclass(frozen=True)
class Incident:
    id: str
    site: str
    state: str  # "open" or "resolved"
    started: str  # inspection time of the first firing inspection (ISO 8601 UTC)
    last_firing: str
    sensors: list[str] = field(default_factory=list)
    p_value: float | None = None  # the strongest (lowest) so far
    firing_inspections: int = 1
    resolved: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Incident:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


def incident_id(site: str, started: str) -> str:
    """Stable id: the same site and start give the same id after a restart or rerun."""
    digest = hashlib.sha256(f"{site}|{started}".encode()).hexdigest()[:8]
    return f"{site}-{started[:16].replace(':', '').replace('-', '')}-{digest}"


def _p(result: dict[str, Any]) -> float:
    p = result.get("test", {}).get("p_value")
    return 1.0 if p is None else float(p)


def _sensors(result: dict[str, Any], top: int = 3) -> list[str]:
    named = list(result.get("selected_sensors") or [])
    if named:
        return named
    return [s["sensor_id"] for s in result.get("sensors", [])[:top]]


def advance(current: Incident | None, result: dict[str, Any], settings: IncidentSettings
            ) -> tuple[Incident | None, str | None, Incident | None]:
    """One result -> (the incident still open after it, the event, the incident the event
    is about). Results must come in inspection-time order; ``error`` results change
    nothing (they carry no evidence either way)."""
    status = result.get("status")
    t = result["inspection_time"]
    if status == "firing":
        if current is None:
            opened = Incident(id=incident_id(result["site"], t), site=result["site"],
                              state="open", started=t, last_firing=t,
                              sensors=_sensors(result), p_value=_p(result))
            return opened, "opened", opened
        stronger = current.p_value is None or _p(result) < current.p_value
        sensors = _sensors(result) if stronger else current.sensors
        updated = replace(current, last_firing=t, sensors=sensors,
                          p_value=min(_p(result), current.p_value or 1.0),
                          firing_inspections=current.firing_inspections + 1)
        event = "updated" if set(sensors) != set(current.sensors) else None  # not for order
        return updated, event, updated
    if current is None or status in ("error", "incomplete"):  # no evidence either way
        return current, None, current
    quiet = parse_time(t) - parse_time(current.last_firing)
    if quiet >= settings.resolve_after:
        closed = replace(current, state="resolved", resolved=t)
        return None, "resolved", closed
    return current, None, current


def attach(result: dict[str, Any], event: str | None, incident: Incident | None) -> None:
    """Put the incident block into the result (``None`` when no incident is open)."""
    if incident is None:
        result["incident"] = None
        return
    block = incident.to_dict()
    block["event"] = event
    result["incident"] = block
