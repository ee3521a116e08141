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
    top: int = 5


def _num(value: Any, spec: str = ".3g") -> str:
    return "n/a" if value is None else format(value, spec)


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _decimals(before: float, after: float) -> int:
    """Decimals that show three significant digits of the larger mean (0 to 6): a change
    below that resolution is noise to an operator and shows as 0."""
    top = max(abs(before), abs(after))
    places = 2 - math.floor(math.log10(top)) if top > 0 else 0
    return min(max(places, 0), 6)


def format_change(before: Any, after: Any) -> str:
    """``36.1 -> 35.1 (-1.0)``: window means in the source's units and their change,
    rounded to three significant digits of the larger mean (``n/a`` where one is missing)."""
    if not (_finite(before) and _finite(after)):
        return f"{_num(before, '.4g')} -> {_num(after, '.4g')}"
    places = _decimals(before, after)
    delta = round(after - before, places) + 0.0  # + 0.0: no "-0.0"
    return f"{before:.{places}f} -> {after:.{places}f} ({delta:+.{places}f})"


def _sensor_line(s: dict[str, Any]) -> str:
    """One ranked sensor: its change in source units (raw window means) when the result
    has them, else the normalised means, marked so."""
    mark = "*" if s.get("selected") else " "
    if "raw_mean_before" in s or "raw_mean_after" in s:
        change = format_change(s.get("raw_mean_before"), s.get("raw_mean_after"))
    else:
        change = (f"{_num(s.get('mean_before'), '.4g')} -> {_num(s.get('mean_after'), '.4g')}"
                  " (normalised)")
    text = f"{s.get('sensor_id')}: {change}"
    return f"  {mark} #{s.get('rank'):<3} {text:<40} score {_num(s.get('score'))}"


def render_text(result: dict[str, Any], top: int = 5) -> str:
    """A few lines a person reads at a glance; firing results get a block with the top
    sensors and how their window means moved, in the source's units (no unit is shown:
    the source config names none)."""
    status = str(result.get("status", "?"))
    head = f"[{status.upper()}] {result.get('site')} {result.get('inspection_time')}"
    summary = result.get("summary", "")
    if status != "firing":
        return f"{head}  {summary}"
    lines = [f"{head}  {summary}"]
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
