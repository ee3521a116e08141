"""Console sink: a readable alert (or the raw JSON) on stdout or stderr."""
from __future__ import annotations

import builtins
import json
import math
import sys
import threading
from typing import Any, ClassVar, Literal, TextIO

from pydantic import BaseModel, ConfigDict

from connectors.base import Sink, SinkError


class ConsoleSinkConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal["console"] = "console"
    name: str | None = None
    format: Literal["text", "json"] = "text"
    stream: Literal["stdout", "stderr"] = "stdout"
    only_firing: bool = False
    #: only results that carry an incident event (opened, updated, resolved): the story of
    #: each incident, as the MQTT alert topic tells it, not every inspection
    only_events: bool = False
    top: int = 5


def _num(value: Any, spec: str = ".3g") -> str:
    return "n/a" if value is None else format(value, spec)


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _sensor_line(s: dict[str, Any]) -> str:
    """One ranked sensor: the change text the result carries (source units), else its raw
    window means, else the normalised means, marked so."""
    mark = "*" if s.get("selected") else " "
    if isinstance(s.get("change"), str):  # written by the inspection (monitor/summary.py)
        change = s["change"]
    elif "raw_mean_before" in s or "raw_mean_after" in s:
        change = f"{_num(s.get('raw_mean_before'), '.4g')} -> {_num(s.get('raw_mean_after'), '.4g')}"
    else:
        change = (f"{_num(s.get('mean_before'), '.4g')} -> {_num(s.get('mean_after'), '.4g')}"
                  " (normalised)")
    text = f"{s.get('sensor_id')}: {change}"
    return f"  {mark} #{s.get('rank'):<3} {text:<40} score {_num(s.get('score'))}"


def clock(stamp: Any) -> str:
    """``2026-01-15T09:40:00Z`` -> ``2026-01-15 09:40``; ``...T09:40:05Z`` (a one-second
    source's onset) -> ``2026-01-15 09:40:05`` (other text unchanged)."""
    text = str(stamp)
    if len(text) < 16 or text[10:11] != "T":
        return text
    has_seconds = text[16:17] == ":" and (text[16:19] != ":00" or text[19:20] == ".")
    return (text[:19] if has_seconds else text[:16]).replace("T", " ")


def incident_line(result: dict[str, Any]) -> str | None:
    """The result's incident event in one line (None when it carries none): who is named,
    the estimated onset with its interval, or why it resolved."""
    incident = result.get("incident")
    if not isinstance(incident, dict) or not incident.get("event"):
        return None
    event = incident["event"]
    head = f"  incident {incident.get('id')} {event}"
    if event == "resolved":
        reason = incident.get("reason") or "?"
        by = incident.get("accepted_by")
        return f"{head} ({reason}{f' by {by}' if by and reason == 'accepted' else ''})"
    text = f"{head}: {', '.join(incident.get('sensors') or [])}"
    if incident.get("onset"):
        text += f"; onset {clock(incident['onset'])}"
        if incident.get("onset_low") and incident.get("onset_high"):
            text += f" ({clock(incident['onset_low'])} .. {clock(incident['onset_high'])})"
    return text


def render_text(result: dict[str, Any], top: int = 5) -> str:
    """A few lines a person reads at a glance; firing results get a block with the top
    sensors and how their window means moved, in the source's units (no unit is shown:
    the source config names none)."""
    status = str(result.get("status", "?"))
    head = f"[{status.upper()}] {result.get('site')} {result.get('inspection_time')}"
    summary = result.get("summary", "")
    event = incident_line(result)
    if status != "firing":
        return f"{head}  {summary}" + ("" if event is None else f"\n{event}")
    lines = [f"{head}  {summary}"]
    if event is not None:
        lines.append(event)
    test = result.get("test", {})
    lines.append(f"  test: {test.get('method')}, p={_num(test.get('p_value'))}, "
                 f"alpha={test.get('alpha')}")
    lines.append(f"  changed sensors: {', '.join(result.get('selected_sensors', []))}")
    lines.extend(_sensor_line(s) for s in result.get("sensors", [])[:top])
    lines.append(f"  fingerprint: {result.get('fingerprint')}")
    return "\n".join(lines)


class ConsoleSink(Sink):
    type: ClassVar[str] = "console"
    Config: ClassVar[builtins.type[BaseModel]] = ConsoleSinkConfig

    def __init__(self, config: ConsoleSinkConfig, stream: TextIO | None = None) -> None:
        self.config = config
        self._stream = stream
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        return self.config.name or "console"

    def send(self, result: dict[str, Any]) -> None:
        if self.config.only_firing and result.get("status") != "firing":
            return
        if self.config.only_events and not (result.get("incident") or {}).get("event"):
            return
        out = self._stream or (sys.stdout if self.config.stream == "stdout" else sys.stderr)
        if self.config.format == "json":
            text = json.dumps(result, separators=(",", ":"), allow_nan=False)
        else:
            text = render_text(result, self.config.top)
        try:
            with self._lock:
                out.write(text + "\n")
                out.flush()
        except (OSError, ValueError) as exc:
            raise SinkError(f"console: cannot write ({exc}); is the output closed?") from None
