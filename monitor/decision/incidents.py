"""Incidents: one change is one incident, open until the cause is fixed or accepted.

A pure state machine over results, in inspection-time order. An incident opens at the
first firing inspection. It names the sensors of that inspection; later firing
inspections add sensors behind the first-named (who stay first). It carries the onset, the
estimated time the change started, and the reference: the detector's model of the last
normal time before the onset, frozen (:mod:`engine.live.reference`). While it is open the
site tracker (:mod:`monitor.decision.tracker`) compares each inspection with that
reference and says whether the named sensors are ``back`` at it. The incident resolves:

* ``reason: returned``: the named sensors have been back at the frozen reference for
  ``resolve_after`` (24 h) with no firing inspection in between; without a reference (no
  windows to freeze), after ``resolve_after`` with no firing inspection, as before;
* ``reason: accepted``: an operator accepted the new state (``mmdwatch ack``, or the MQTT
  command topic); the reference moves on with the data.

Each step says which event the result carries: ``opened``, ``updated`` (a new sensor
entered the first three named, or the p-value fell tenfold since the last event),
``resolved`` or none. Sinks publish on events, not at every inspection (docs/result.md,
"Incidents").

Several incidents may be open at once: a firing on sensors that did not fire for an open
incident, whose onset comes more than an after window and a local level (40 h) past that
incident's, is a new change and opens its own incident (:func:`is_new_change`). Each
incident resolves on its own sensors; a result carries at most one event (the tracker lets
a second resolution wait for the next result).

The agent keeps the open incident in its state database, written in the same transaction
as the result, so a restart neither loses nor repeats an event.
"""
from __future__ import annotations

import copy
import hashlib
from dataclasses import dataclass, field, fields, replace
from datetime import timedelta
from typing import Any

from connectors.timeutil import parse_time


@dataclass(frozen=True)
class IncidentSettings:
    resolve_after: timedelta = timedelta(hours=24)


#: the keys of the open incident kept in the state database but not put in results
PRIVATE = ("reference", "announced_p", "fired")
#: keys a result carries only when set (older results and bare incidents have none)
OPTIONAL = ("reason", "accepted_by", "onset", "onset_low", "onset_high", "baseline",
            "returned_since", "baseline_check")


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
    reason: str | None = None  # on resolution: "returned" or "accepted"
    accepted_by: str | None = None
    onset: str | None = None  # estimated start of the change (ISO 8601 UTC)
    onset_low: str | None = None  # its interval
    onset_high: str | None = None
    baseline: str | None = None  # the reference is the before window ending here
    returned_since: str | None = None  # first inspection of the current stretch back
    baseline_check: dict[str, dict[str, float]] | None = None  # the named sensors vs it
    announced_p: float | None = None  # the p-value of the last opened/updated event
    reference: dict[str, Any] | None = None  # engine.live.reference.Reference.to_dict()
    fired: list[str] = field(default_factory=list)  # sensors that fired on their own

    def to_dict(self) -> dict[str, Any]:
        """The incident block of a result (without the frozen reference's arrays, which
        are not copied first: ``asdict`` of the whole incident cost 5 ms a result)."""
        out = {f.name: copy.deepcopy(getattr(self, f.name)) for f in fields(self)
               if f.name not in PRIVATE}
        for key in OPTIONAL:
            if out.get(key) is None:
                out.pop(key, None)
        return out

    def to_state(self) -> dict[str, Any]:
        """Everything, for the state database, which writes it as JSON at once: the
        fields themselves, not copies (``asdict`` deep-copied the frozen reference's
        arrays at every result while an incident was open)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

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


def named_sensors(result: dict[str, Any], top: int = 3) -> list[str]:
    """The sensors a firing result names: its selected sensors, then the next ranked ones
    up to ``top``. An operator reads the first three as where to look; a sensor that falls
    just short of the alert threshold on its own (a leak's second-nearest sensor) belongs
    there more than nowhere, and a full first three at opening spares the later
    ``updated`` messages of a list that grows one sensor at a time."""
    named = [str(s) for s in result.get("selected_sensors") or []]
    for row in result.get("sensors", []):
        if len(named) >= top:
            break
        if row["sensor_id"] not in named:
            named.append(str(row["sensor_id"]))
    return named


def fired_sensors(result: dict[str, Any]) -> list[str]:
    """The sensors a firing result selects on their own (its strongest when none): the
    evidence an incident's onset and its return to the reference are judged on."""
    return [str(s) for s in result.get("selected_sensors") or []] or named_sensors(result)[:1]


def opened(result: dict[str, Any], **extra: Any) -> Incident:
    """A new incident from its first firing result (``extra``: onset, reference ...)."""
    t = result["inspection_time"]
    return Incident(id=incident_id(result["site"], t), site=result["site"], state="open",
                    started=t, last_firing=t, sensors=named_sensors(result),
                    p_value=_p(result), announced_p=_p(result),
                    fired=fired_sensors(result), **extra)


def advance(current: Incident | None, result: dict[str, Any], settings: IncidentSettings,
            back: bool | None = None) -> tuple[Incident | None, str | None, Incident | None]:
    """One result -> (the incident still open after it, the event, the incident the event
    is about). Results must come in inspection-time order; ``error`` and ``incomplete``
    results change nothing (they carry no evidence either way). ``back``: whether the
    incident's sensors are back at its frozen reference at this result (None: no
    reference to ask). A firing result with no incident open opens one (the tracker opens
    it itself with :func:`opened`, adding the onset and the frozen reference)."""
    status = result.get("status")
    t = result["inspection_time"]
    if current is None and status == "firing":
        new_incident = opened(result)
        return new_incident, "opened", new_incident
    if current is None or status in ("error", "incomplete"):
        return current, None, current
    if status == "firing":
        p = _p(result)
        # later firing inspections add what they select on their own, not their ranking
        selected = fired_sensors(result)
        new = [s for s in selected if s not in current.sensors]
        fired = current.fired + [s for s in selected if s not in current.fired]
        sensors = current.sensors + new  # the first-named stay first
        announced = current.announced_p if current.announced_p is not None else 1.0
        material = sensors[:3] != current.sensors[:3] or p < announced / 10
        updated = replace(current, last_firing=t, sensors=sensors,
                          p_value=min(p, current.p_value if current.p_value is not None
                                      else 1.0),
                          firing_inspections=current.firing_inspections + 1,
                          returned_since=None, fired=fired,
                          announced_p=p if material else current.announced_p)
        return updated, "updated" if material else None, updated
    if back is None:  # no reference: quiet for resolve_after is back
        quiet = parse_time(t) - parse_time(current.last_firing)
        if quiet >= settings.resolve_after:
            closed = replace(current, state="resolved", resolved=t, reason="returned")
            return None, "resolved", closed
        return current, None, current
    if not back:
        still = replace(current, returned_since=None)
        return still, None, still
    since = current.returned_since or t
    if (parse_time(t) - parse_time(since) >= settings.resolve_after
            and parse_time(t) - parse_time(current.last_firing) >= settings.resolve_after):
        closed = replace(current, state="resolved", resolved=t, reason="returned",
                         returned_since=since)
        return None, "resolved", closed
    waiting = replace(current, returned_since=since)
    return waiting, None, waiting


def hold(current: Incident, t: str, back: bool | None) -> Incident:
    """An open incident at a result that fired for another incident: it counts the time
    its own sensors are back at its frozen reference (``back``) but neither resolves nor
    carries an event here (a result carries one event; it may resolve at the next)."""
    if back is None:
        return current
    if not back:
        return replace(current, returned_since=None)
    return replace(current, returned_since=current.returned_since or t)


def is_new_change(current: Incident, fired: list[str], onset_low: str | None,
                  horizon: timedelta) -> bool:
    """Whether a firing while ``current`` is open is a change of its own (docs/decision.md,
    "Several incidents at once"): none of the sensors it ``fired`` on fired for
    ``current`` before (being ranked among its first three is not enough: there a
    sensor can stand for noise, or for the first change seen through the common mode),
    and its onset interval begins more than ``horizon`` (the tracker's: an after window
    plus the local level) past the end of ``current``'s (its start when it has no
    onset). A later firing of the same change that selects a further sensor has its
    onset where the incident's is, and joins it."""
    if onset_low is None or set(fired) & set(current.fired):
        return False
    end = current.onset_high or current.onset or current.started
    return parse_time(onset_low) - parse_time(end) > horizon


def accept(current: Incident, t: str, by: str) -> Incident:
    """The incident resolved by an operator at the inspection at ``t``."""
    return replace(current, state="resolved", resolved=t, reason="accepted", accepted_by=by)


#: Appended to the summary of a firing result whose change an operator's ack accepted.
ACCEPTED_NOTE = " (within the change an ack accepted: no incident, no alert)"


def mark_accepted(result: dict[str, Any]) -> None:
    """A firing result on sensors an ack accepted, whose change the sliding window still
    holds: ``detection.accepted`` is true, so that sinks do not alert it again
    (``connectors.base.within_accepted_change``), and its summary says why."""
    detection = result.get("detection")
    if isinstance(detection, dict):
        detection["accepted"] = True
    summary = result.get("summary")
    if isinstance(summary, str) and not summary.endswith(ACCEPTED_NOTE):
        result["summary"] = summary + ACCEPTED_NOTE


def attach(result: dict[str, Any], event: str | None, incident: Incident | None) -> None:
    """Put the incident block into the result (``None`` when no incident is open)."""
    if incident is None:
        result["incident"] = None
        return
    block = incident.to_dict()
    block["event"] = event
    result["incident"] = block
