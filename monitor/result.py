"""The inspection result (``mmdwatch.inspection/v1``) as typed objects.

The contract is docs/result.md and docs/result.schema.json. :class:`InspectionResult` is
what :class:`monitor.inspection.Inspector` builds; :meth:`InspectionResult.to_dict` gives
the JSON object every consumer sees (stdout, outbox, sinks, ``result.json``), written once
at the end of an inspection. :meth:`InspectionResult.from_dict` reads one back, as the
reports do.

Conventions:

* ``None`` is JSON ``null`` for a key the contract always writes (``test.p_value``,
  ``sensors[].score``, ``engine``, ...), and "absent" for an optional key
  (``calibration``, ``error``, ``test.decision``, the data-quality details). Non-finite
  numbers are never stored: the producer writes them as ``None`` (``null``).
* ``sensors[].z`` is written on every row of a calibrated result (``test.decision ==
  "calibrated"``), ``sensors[].engine_score`` on every row of a calibrated result the
  engine ran on (``engine`` not null): the producer's rule, so a produced result survives
  ``from_dict(...).to_dict()`` unchanged.
* :meth:`from_dict` is tolerant: blocks and keys a result lacks (an older result, one made
  by hand) get the defaults below, values of the wrong type are dropped to their default,
  and keys it does not know are kept in ``extra`` (the contract only adds fields within
  ``v1``) and written back by :meth:`to_dict`.

Standard library only (plus :mod:`monitor.decision.incidents`): importing it costs the CLI nothing.
"""
from __future__ import annotations

import copy
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from monitor.decision.incidents import Incident

SCHEMA = "mmdwatch.inspection/v1"
Status = Literal["ok", "firing", "error", "calibrating", "incomplete"]
STATUSES: tuple[str, ...] = get_args(Status)
CALIBRATED = "calibrated"  # test.decision of the calibrated rule


# --------------------------------------------------------------------------- readers
# Tolerant conversions for from_dict: a value of the wrong type becomes the default, a
# value of the right type is kept exactly as it is (1 stays 1, so JSON text round-trips).


def _dict(value: object) -> dict[str, Any]:
    return dict(value) if isinstance(value, Mapping) else {}


def _block(value: object) -> dict[str, Any] | None:
    return dict(value) if isinstance(value, Mapping) else None


def _num(value: object) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return value
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def _int(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            return int(float(value))
        except ValueError:
            return None
    return None


def _str(value: object, default: str = "") -> str:
    return default if value is None else str(value)


def _opt_str(value: object) -> str | None:
    return None if value is None else str(value)


def _strs(value: object) -> list[str]:
    return [str(x) for x in value] if isinstance(value, list | tuple) else []


def _list(value: object) -> list[Any]:
    return list(value) if isinstance(value, list | tuple) else []


def _extra(data: Mapping[str, Any], known: tuple[str, ...]) -> dict[str, Any]:
    return {str(k): copy.deepcopy(v) for k, v in data.items() if k not in known}


def finite(value: float, digits: int = 6) -> float | None:
    """``value`` rounded to ``digits`` decimals, or None (JSON null) when not finite: how
    the producer writes every number of the result."""
    value = float(value)
    return round(value, digits) if math.isfinite(value) else None


# --------------------------------------------------------------------------- blocks


@dataclass
class WindowBounds:
    """``windows.before`` / ``windows.after``: UTC ISO times and the resampled row count."""

    start: str = ""
    end: str = ""
    n: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    _KEYS = ("start", "end", "n")

    def to_dict(self) -> dict[str, Any]:
        return {"start": self.start, "end": self.end, "n": self.n, **copy.deepcopy(self.extra)}

    @classmethod
    def from_dict(cls, data: object) -> WindowBounds:
        d = _dict(data)
        return cls(start=_str(d.get("start")), end=_str(d.get("end")),
                   n=_int(d.get("n")) or 0, extra=_extra(d, cls._KEYS))


@dataclass
class WindowsBlock:
    """``windows``: the two windows' bounds and how readings were binned and scaled."""

    before: WindowBounds = field(default_factory=WindowBounds)
    after: WindowBounds = field(default_factory=WindowBounds)
    resample: str = ""
    aggregate: str = ""
    normalise: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    _KEYS = ("before", "after", "resample", "aggregate", "normalise")

    def to_dict(self) -> dict[str, Any]:
        return {"before": self.before.to_dict(), "after": self.after.to_dict(),
                "resample": self.resample, "aggregate": self.aggregate,
                "normalise": self.normalise, **copy.deepcopy(self.extra)}

    @classmethod
    def from_dict(cls, data: object) -> WindowsBlock:
        d = _dict(data)
        return cls(before=WindowBounds.from_dict(d.get("before")),
                   after=WindowBounds.from_dict(d.get("after")),
                   resample=_str(d.get("resample")), aggregate=_str(d.get("aggregate")),
                   normalise=_str(d.get("normalise")), extra=_extra(d, cls._KEYS))


@dataclass
class ChangeTest:
    """``test``: the decision's method, p-value and level (``decision`` only when
    calibrated). ``alpha`` and ``seed`` are None only in a result read back without them."""

    method: str = ""
    p_value: float | None = None
    alpha: float | None = None
    seed: int | None = None
    decision: str | None = None  # "calibrated", or absent (engine rule)
    extra: dict[str, Any] = field(default_factory=dict)

    _KEYS = ("method", "p_value", "alpha", "seed", "decision")

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"method": self.method, "p_value": self.p_value,
                               "alpha": self.alpha, "seed": self.seed}
        if self.decision is not None:
            out["decision"] = self.decision
        out.update(copy.deepcopy(self.extra))
        return out

    @classmethod
    def from_dict(cls, data: object) -> ChangeTest:
        d = _dict(data)
        return cls(method=_str(d.get("method")), p_value=_num(d.get("p_value")),
                   alpha=_num(d.get("alpha")), seed=_int(d.get("seed")),
                   decision=_opt_str(d.get("decision")), extra=_extra(d, cls._KEYS))


@dataclass
class SensorScore:
    """One entry of ``sensors`` (ranked, best first)."""

    sensor_id: str
    rank: int
    score: float | None  # None: not finite
    selected: bool = False
    mean_before: float | None = None  # normalised window means
    mean_after: float | None = None
    raw_mean_before: float | None = None  # in source units
    raw_mean_after: float | None = None
    z: float | None = None  # calibrated rule: the standardised level shift
    z_spread: float | None = None  # calibrated rule: the spread channel's z, weighted
    z_cycle: float | None = None  # calibrated rule: the cycle channel's z, weighted
    engine_score: float | None = None  # calibrated rule, engine ran: its score beside |z|
    expected_after: float | None = None  # calibrated rule: what the profile expected, source units
    change: str | None = None  # the change in words and source units (monitor/summary.py)
    extra: dict[str, Any] = field(default_factory=dict)

    _KEYS = ("sensor_id", "rank", "score", "selected", "mean_before", "mean_after",
             "raw_mean_before", "raw_mean_after", "z", "z_spread", "z_cycle", "engine_score",
             "expected_after", "change")

    def to_dict(self, *, with_z: bool = False, with_engine_score: bool = False
                ) -> dict[str, Any]:
        out: dict[str, Any] = {
            "sensor_id": self.sensor_id, "rank": self.rank, "score": self.score,
            "selected": self.selected, "mean_before": self.mean_before,
            "mean_after": self.mean_after, "raw_mean_before": self.raw_mean_before,
            "raw_mean_after": self.raw_mean_after}
        if with_z or self.z is not None:
            out["z"] = self.z
        if self.z_spread is not None:
            out["z_spread"] = self.z_spread
        if self.z_cycle is not None:
            out["z_cycle"] = self.z_cycle
        if with_engine_score or self.engine_score is not None:
            out["engine_score"] = self.engine_score
        if self.expected_after is not None:
            out["expected_after"] = self.expected_after
        if self.change is not None:
            out["change"] = self.change
        if self.extra:  # a row a sensor: an empty dict's deep copy costs 0.6 us
            out.update(copy.deepcopy(self.extra))
        return out

    @classmethod
    def from_dict(cls, data: object, position: int = 0) -> SensorScore | None:
        """None for an entry that is no sensor (not an object, or no ``sensor_id``)."""
        if not isinstance(data, Mapping) or data.get("sensor_id") is None:
            return None
        rank = _int(data.get("rank"))
        return cls(sensor_id=str(data["sensor_id"]),
                   rank=position + 1 if rank is None else rank,
                   score=_num(data.get("score")), selected=bool(data.get("selected", False)),
                   mean_before=_num(data.get("mean_before")),
                   mean_after=_num(data.get("mean_after")),
                   raw_mean_before=_num(data.get("raw_mean_before")),
                   raw_mean_after=_num(data.get("raw_mean_after")),
                   z=_num(data.get("z")), z_spread=_num(data.get("z_spread")),
                   z_cycle=_num(data.get("z_cycle")),
                   engine_score=_num(data.get("engine_score")),
                   expected_after=_num(data.get("expected_after")),
                   change=data["change"] if isinstance(data.get("change"), str) else None,
                   extra=_extra(data, cls._KEYS))


@dataclass
class DataQuality:
    """``data_quality``. The details (``dropped_reasons`` ...) are None (absent) when the
    windows could not be built."""

    missing_fraction: float | None = None
    dropped_sensors: list[str] = field(default_factory=list)
    dropped_reasons: dict[str, str] | None = None
    sensors_seen: int | None = None
    sensors_used: int | None = None
    unscaled_sensors: dict[str, str] | None = None
    after_covered: float | None = None  # present exactly when status is incomplete
    extra: dict[str, Any] = field(default_factory=dict)

    _KEYS = ("missing_fraction", "dropped_sensors", "dropped_reasons", "sensors_seen",
             "sensors_used", "unscaled_sensors", "after_covered")

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"missing_fraction": self.missing_fraction,
                               "dropped_sensors": list(self.dropped_sensors)}
        optional = (("dropped_reasons", self.dropped_reasons),
                    ("sensors_seen", self.sensors_seen), ("sensors_used", self.sensors_used),
                    ("unscaled_sensors", self.unscaled_sensors),
                    ("after_covered", self.after_covered))
        out.update({k: (dict(v) if isinstance(v, dict) else v)
                    for k, v in optional if v is not None})
        out.update(copy.deepcopy(self.extra))
        return out

    @classmethod
    def from_dict(cls, data: object) -> DataQuality:
        d = _dict(data)
        reasons, unscaled = _block(d.get("dropped_reasons")), _block(d.get("unscaled_sensors"))
        dropped: list[str] = []
        for item in _list(d.get("dropped_sensors")):
            if isinstance(item, Mapping):  # {sensor_id, reason}: not the contract, still read
                sid = _str(item.get("sensor_id", item.get("sensor")), "?")
                if item.get("reason") is not None:
                    reasons = {**(reasons or {}), sid: item["reason"]}
                dropped.append(sid)
            else:
                dropped.append(str(item))
        return cls(missing_fraction=_num(d.get("missing_fraction")), dropped_sensors=dropped,
                   dropped_reasons=None if reasons is None
                   else {str(k): str(v) for k, v in reasons.items()},
                   sensors_seen=_int(d.get("sensors_seen")),
                   sensors_used=_int(d.get("sensors_used")),
                   after_covered=_num(d.get("after_covered")),
                   unscaled_sensors=None if unscaled is None
                   else {str(k): str(v) for k, v in unscaled.items()},
                   extra=_extra(d, cls._KEYS))


@dataclass
class Generator:
    """``generator``: who made the result, on which torch device, in how long."""

    name: str = "mmdwatch"
    version: str = ""
    device: str | None = None  # None: the engine did not run
    runtime_s: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    _KEYS = ("name", "version", "device", "runtime_s")

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version, "device": self.device,
                "runtime_s": self.runtime_s, **copy.deepcopy(self.extra)}

    @classmethod
    def from_dict(cls, data: object) -> Generator:
        d = _dict(data)
        return cls(name=_str(d.get("name"), "mmdwatch"), version=_str(d.get("version")),
                   device=_opt_str(d.get("device")), runtime_s=_num(d.get("runtime_s")) or 0.0,
                   extra=_extra(d, cls._KEYS))


@dataclass
class EngineBlock:
    """``engine``: the selector's ``Selection.to_dict()`` (engine/result.py), open-ended.

    ``labels`` in the engine's column order; ``scores`` (D), ``lambdas`` (L),
    ``scores_per_lambda`` (L x D) with None for non-finite values."""

    method: str = ""
    labels: list[Any] = field(default_factory=list)
    scores: list[float | None] = field(default_factory=list)
    selected: list[Any] = field(default_factory=list)
    p_value: float | None = None
    threshold: float | None = None
    lambdas: list[float | None] = field(default_factory=list)
    scores_per_lambda: list[list[float | None]] = field(default_factory=list)
    split_p_values: list[Any] = field(default_factory=list)
    params: dict[str, Any] = field(default_factory=dict)
    device: str | None = None
    seed: int | None = None
    runtime_s: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    _KEYS = ("method", "labels", "scores", "selected", "p_value", "threshold", "lambdas",
             "scores_per_lambda", "split_p_values", "params", "device", "seed", "runtime_s")

    def to_dict(self) -> dict[str, Any]:
        return {"method": self.method, "labels": list(self.labels),
                "scores": list(self.scores), "selected": list(self.selected),
                "p_value": self.p_value, "threshold": self.threshold,
                "lambdas": list(self.lambdas),
                "scores_per_lambda": [list(r) for r in self.scores_per_lambda],
                "split_p_values": copy.deepcopy(self.split_p_values),
                "params": copy.deepcopy(self.params),
                "device": self.device, "seed": self.seed, "runtime_s": self.runtime_s,
                **copy.deepcopy(self.extra)}

    @classmethod
    def from_dict(cls, data: object) -> EngineBlock:
        d = _dict(data)
        per_lambda = d.get("scores_per_lambda")
        return cls(method=_str(d.get("method")), labels=_list(d.get("labels")),
                   scores=_list(d.get("scores")), selected=_list(d.get("selected")),
                   p_value=_num(d.get("p_value")), threshold=_num(d.get("threshold")),
                   lambdas=_list(d.get("lambdas")),
                   scores_per_lambda=[_list(r) for r in per_lambda]
                   if isinstance(per_lambda, list) else [],
                   split_p_values=copy.deepcopy(_list(d.get("split_p_values"))),
                   params=copy.deepcopy(_dict(d.get("params"))), device=_opt_str(d.get("device")),
                   seed=_int(d.get("seed")), runtime_s=_num(d.get("runtime_s")),
                   extra=_extra(d, cls._KEYS))


@dataclass
class EnginePart:
    """``detection.engine`` (calibrated rule with ``decision.engine_weight`` > 0): the
    engine part of the decision, CV-aggregation's validation power on the residual
    windows, calibrated on the site's own history like the level statistic.
    ``p_value`` and ``threshold`` are None until its history holds enough values."""

    statistic: str = "cv-aggregation-power"
    value: float | None = None
    p_value: float | None = None
    threshold: float | None = None  # on the statistic's scale, at weight x level
    weight: float | None = None
    history_n: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"statistic": self.statistic, "value": self.value, "p_value": self.p_value,
                "threshold": self.threshold, "weight": self.weight,
                "history_n": self.history_n}

    @classmethod
    def from_dict(cls, data: object) -> EnginePart:
        d = _dict(data)
        return cls(statistic=_opt_str(d.get("statistic")) or "cv-aggregation-power",
                   value=_num(d.get("value")), p_value=_num(d.get("p_value")),
                   threshold=_num(d.get("threshold")), weight=_num(d.get("weight")),
                   history_n=_int(d.get("history_n")))


@dataclass
class DetectionBlock:
    """``detection`` (calibrated rule): the level statistic and its calibration on the
    site's own history, the engine part beside it, and the decision's combined p-value.
    ``p_value`` and ``threshold`` are None while calibrating."""

    statistic: str | None = None
    value: float | None = None
    p_value: float | None = None  # the decision's: the parts' weighted Bonferroni
    level: float | None = None
    threshold: float | None = None  # on the statistic's scale (z**2), at the level part's share
    history_n: int | None = None
    history_needed: int | None = None
    false_incident_interval: str | None = None
    level_p_value: float | None = None  # the level part's own p-value
    fired_by: str | None = None  # "level" or "engine" on a firing result
    engine: EnginePart | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    _KEYS = ("statistic", "value", "p_value", "level", "threshold", "history_n",
             "history_needed", "false_incident_interval", "level_p_value", "fired_by",
             "engine")

    def to_dict(self) -> dict[str, Any]:
        return {"statistic": self.statistic, "value": self.value, "p_value": self.p_value,
                "level": self.level, "threshold": self.threshold, "history_n": self.history_n,
                "history_needed": self.history_needed,
                "false_incident_interval": self.false_incident_interval,
                "level_p_value": self.level_p_value, "fired_by": self.fired_by,
                "engine": None if self.engine is None else self.engine.to_dict(),
                **copy.deepcopy(self.extra)}

    @classmethod
    def from_dict(cls, data: object) -> DetectionBlock:
        d = _dict(data)
        engine = d.get("engine")
        return cls(statistic=_opt_str(d.get("statistic")), value=_num(d.get("value")),
                   p_value=_num(d.get("p_value")), level=_num(d.get("level")),
                   threshold=_num(d.get("threshold")), history_n=_int(d.get("history_n")),
                   history_needed=_int(d.get("history_needed")),
                   false_incident_interval=_opt_str(d.get("false_incident_interval")),
                   level_p_value=_num(d.get("level_p_value")),
                   fired_by=_opt_str(d.get("fired_by")),
                   engine=None if not isinstance(engine, Mapping)
                   else EnginePart.from_dict(engine),
                   extra=_extra(d, cls._KEYS))


def _incident_from_dict(data: Mapping[str, Any]) -> Incident:
    sensors = data.get("sensors")
    return Incident(id=_str(data.get("id")), site=_str(data.get("site")),
                    state=_str(data.get("state")), started=_str(data.get("started")),
                    last_firing=_str(data.get("last_firing")), sensors=_strs(sensors),
                    p_value=_num(data.get("p_value")),
                    firing_inspections=_int(data.get("firing_inspections")) or 1,
                    resolved=_opt_str(data.get("resolved")))


# --------------------------------------------------------------------------- the result


@dataclass
class InspectionResult:
    """One inspection's result (docs/result.md). ``status`` is one of :data:`STATUSES`
    when made by the code; a result read back may carry a status it does not know (treat
    it as "no alert")."""

    fingerprint: str
    site: str
    status: str
    inspection_time: str  # UTC ISO 8601, "Z"
    windows: WindowsBlock = field(default_factory=WindowsBlock)
    test: ChangeTest = field(default_factory=ChangeTest)
    sensors: list[SensorScore] = field(default_factory=list)
    selected_sensors: list[str] = field(default_factory=list)
    summary: str = ""
    data_quality: DataQuality = field(default_factory=DataQuality)
    generator: Generator = field(default_factory=Generator)
    engine: EngineBlock | None = None
    detection: DetectionBlock | None = None
    incident: Incident | None = None
    incident_event: str | None = None  # written as incident.event
    calibration: str | None = None  # present exactly when status is calibrating
    error: str | None = None  # present exactly when status is error
    incomplete: str | None = None  # present exactly when status is incomplete
    schema: str = SCHEMA
    extra: dict[str, Any] = field(default_factory=dict)

    _KEYS = ("schema", "fingerprint", "site", "status", "inspection_time", "windows", "test",
             "sensors", "selected_sensors", "summary", "data_quality", "generator", "engine",
             "detection", "incident", "calibration", "error", "incomplete")

    @property
    def calibrated(self) -> bool:
        """Decided by the calibrated rule (its statistic was computed)."""
        return self.test.decision == CALIBRATED

    @property
    def firing(self) -> bool:
        return self.status == "firing"

    def sensor(self, sensor_id: str) -> SensorScore | None:
        return next((s for s in self.sensors if s.sensor_id == sensor_id), None)

    def to_dict(self) -> dict[str, Any]:
        """The result JSON object (a new dict; nothing in it is shared with ``self``)."""
        with_z = self.calibrated
        with_engine_score = with_z and self.engine is not None
        out: dict[str, Any] = {
            "schema": self.schema,
            "fingerprint": self.fingerprint,
            "site": self.site,
            "status": self.status,
            "inspection_time": self.inspection_time,
            "windows": self.windows.to_dict(),
            "test": self.test.to_dict(),
            "sensors": [s.to_dict(with_z=with_z, with_engine_score=with_engine_score)
                        for s in self.sensors],
            "selected_sensors": list(self.selected_sensors),
            "summary": self.summary,
            "data_quality": self.data_quality.to_dict(),
            "generator": self.generator.to_dict(),
            "engine": None if self.engine is None else self.engine.to_dict(),
            "detection": None if self.detection is None else self.detection.to_dict(),
            "incident": None if self.incident is None
            else {**self.incident.to_dict(), "event": self.incident_event},
        }
        if self.calibration is not None:
            out["calibration"] = self.calibration
        if self.error is not None:
            out["error"] = self.error
        if self.incomplete is not None:
            out["incomplete"] = self.incomplete
        out.update(copy.deepcopy(self.extra))
        return out

    def to_json(self) -> str:
        """Strict JSON text (no NaN/Infinity), one line."""
        return json.dumps(self.to_dict(), allow_nan=False)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> InspectionResult:
        """Read a result JSON object back (tolerant: see the module docstring)."""
        if not isinstance(data, Mapping):
            raise TypeError(f"an inspection result must be a JSON object (dict), got "
                            f"{type(data).__name__}")
        sensors = data.get("sensors")
        rows = [SensorScore.from_dict(item, i)
                for i, item in enumerate(sensors if isinstance(sensors, list) else [])]
        engine, detection = _block(data.get("engine")), _block(data.get("detection"))
        incident = _block(data.get("incident"))
        return cls(
            schema=_str(data.get("schema"), SCHEMA),
            fingerprint=_str(data.get("fingerprint")),
            site=_str(data.get("site")),
            status=_str(data.get("status"), "unknown"),
            inspection_time=_str(data.get("inspection_time")),
            windows=WindowsBlock.from_dict(data.get("windows")),
            test=ChangeTest.from_dict(data.get("test")),
            sensors=[r for r in rows if r is not None],
            selected_sensors=_strs(data.get("selected_sensors")),
            summary=_str(data.get("summary")),
            data_quality=DataQuality.from_dict(data.get("data_quality")),
            generator=Generator.from_dict(data.get("generator")),
            engine=None if engine is None else EngineBlock.from_dict(engine),
            detection=None if detection is None else DetectionBlock.from_dict(detection),
            incident=None if incident is None else _incident_from_dict(incident),
            incident_event=None if incident is None else _opt_str(incident.get("event")),
            calibration=_opt_str(data.get("calibration")),
            error=_opt_str(data.get("error")),
            incomplete=_opt_str(data.get("incomplete")),
            extra=_extra(data, cls._KEYS),
        )

    @classmethod
    def from_json(cls, text: str) -> InspectionResult:
        return cls.from_dict(json.loads(text))
