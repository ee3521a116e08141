"""The agent's YAML config: load, expand ``${ENV}``, validate, and explain every problem.

Core sections are pydantic models with ``extra="forbid"``; the ``source`` and each
``sinks[]`` section are validated by the connector class's own ``Config`` model, looked
up by ``type`` in :mod:`connectors.registry`, so a new connector needs no change here.

Relative paths are relative to the working directory the agent is started from.
"""
from __future__ import annotations

import difflib
import os
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)

from connectors.timeutil import format_duration, parse_duration, parse_time
from monitor.names import METHODS, Normalise  # the health section belongs to the endpoint
from monitor.service.health import HealthConfig

Duration = Annotated[
    timedelta,
    BeforeValidator(parse_duration),
    PlainSerializer(format_duration, return_type=str),
]
Instant = Annotated[datetime, BeforeValidator(parse_time)]



class ConfigError(Exception):
    """The config is unusable; ``problems`` lists each one as "key: what is wrong. Fix"."""

    def __init__(self, problems: list[str], source: str = "config") -> None:
        self.problems = problems
        self.source = source
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"{source}: {len(problems)} problem(s):\n{lines}")


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_default=True)


class WindowsConfig(_Section):
    before: Duration = Field(timedelta(days=7), description="length B of the before window")
    after: Duration = Field(timedelta(days=7), description="length A of the after window")
    resample: Duration = Field(timedelta(hours=1), description="bin width, aligned to window start")
    aggregate: Literal["mean", "median", "min", "max", "first", "last"] = "mean"
    normalise: Normalise = "before"
    min_coverage: float = Field(0.5, gt=0.0, le=1.0,
                                description="least share of bins with data, per sensor and window")
    min_sensors: int = Field(2, ge=2, description="fewer usable sensors -> status error")

    @model_validator(mode="after")
    def _bins_fit(self) -> WindowsConfig:
        for name in ("before", "after"):
            length = getattr(self, name)
            if length <= timedelta(0) or self.resample <= timedelta(0):
                raise ValueError(f"windows.{name} and windows.resample must be positive")
            if (length / self.resample) != int(length / self.resample):
                raise ValueError(
                    f"windows.{name} ({format_duration(length)}) is not a whole number of "
                    f"windows.resample ({format_duration(self.resample)}); pick lengths that "
                    "divide evenly, e.g. before: 7d with resample: 1h"
                )
            if length / self.resample < 4:
                raise ValueError(
                    f"windows.{name} holds fewer than 4 bins of windows.resample; "
                    "lengthen the window or shorten resample"
                )
        return self


class ScheduleConfig(_Section):
    cron: str | None = Field(None, description='crontab "min hour dom mon dow"')
    every: Duration | None = Field(None, description="fixed interval instead of cron")
    timezone: str = "UTC"
    clock: Literal["wall", "data"] = "wall"
    start: Instant | None = Field(None, description="earliest inspection time")
    poll: Duration = Field(timedelta(seconds=5), description="how often due work is checked")

    @field_validator("cron")
    @classmethod
    def _crontab(cls, value: str | None) -> str | None:
        if value is None:
            return value
        from apscheduler.triggers.cron import CronTrigger

        try:
            CronTrigger.from_crontab(value)
        except ValueError as exc:
            raise ValueError(
                f"{value!r} is not a crontab expression ({exc}); write 5 fields "
                '"minute hour day month weekday", e.g. "0 0 * * *"') from None
        return value

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(
                f"unknown time zone {value!r}; use an IANA name such as UTC or Europe/Paris"
            ) from None
        return value

    def interval(self) -> timedelta:
        """Time between two inspections: ``every``, or a cron's first two times after
        2020-01-01 (as the UTC wall clock the schedule's cron runs on)."""
        if self.every is not None:
            return self.every
        from apscheduler.triggers.cron import CronTrigger

        trigger = CronTrigger.from_crontab(self.cron or "0 0 * * *", timezone="UTC")
        first = trigger.get_next_fire_time(None, datetime(2020, 1, 1, tzinfo=UTC))
        second = trigger.get_next_fire_time(first, first + timedelta(microseconds=1))
        return second - first

    @model_validator(mode="after")
    def _one_trigger(self) -> ScheduleConfig:
        if self.cron and self.every:
            raise ValueError("give either schedule.cron or schedule.every, not both")
        if not self.cron and not self.every:
            self.cron = "0 0 * * *"
        if self.every is not None and self.every <= timedelta(0):
            raise ValueError("schedule.every must be positive, e.g. every: 1d")
        return self


class EngineConfig(_Section):
    method: Literal[METHODS] = "cv-aggregation"  # type: ignore[valid-type]
    alpha: float = Field(0.05, gt=0.0, lt=1.0)
    seed: int = 0
    device: str = Field("auto", pattern=r"^(auto|cpu|cuda(:\d+)?|mps)$")
    block_size: Duration | None = Field(
        timedelta(days=1),
        description="rows that move together in splits and permutations; null = iid rows",
    )
    params: dict[str, Any] = Field(default_factory=dict,
                                   description="extra keyword arguments for the selector")


#: the engine part's share of the alert level (docs/decision.md, "The weight"), the
#: default of decision.engine_weight: with a daily profile, where the level statistic
#: carries the cycle channels (engine.live.engine_power.ENGINE_WEIGHT, not imported, so
#: that loading a config loads no NumPy), and without one
ENGINE_WEIGHT_DAILY = 0.1
ENGINE_WEIGHT_WITHOUT_PROFILE = 0.35


class DecisionConfig(_Section):
    """When an inspection fires (README "Decision"); the profile sets ``rule``."""

    rule: Literal["calibrated", "engine"] = Field(
        "calibrated", description="calibrated: detection statistic vs the site's history; "
        "engine: the engine's p-value vs engine.alpha")
    # The durations' defaults (30d, 4d, 28d, 24h at hourly cadence) are derived from the
    # windows and the inspection interval when the config leaves them out
    # (MonitorConfig._derive, docs/config.md "Derived durations").
    false_incident_interval: Duration = Field(
        timedelta(days=30), description="target mean time between false incidents")
    min_history: Duration = Field(timedelta(days=4),
                                  description="history needed before the first alert")
    history: Duration = Field(timedelta(days=28), description="history kept for calibration")
    resolve_after: Duration = Field(timedelta(hours=24),
                                    description="quiet time that resolves an incident")
    local_level: Duration = Field(timedelta(hours=24),
                                  description="latest part of the before window compared")
    common_modes: int = Field(1, ge=0, le=10, description="network-wide modes removed "
                              "(one per 8 sensors at most)")
    daily_profile: bool = Field(
        True, description="remove each sensor's hour-of-day profile (false: the window "
        "mean alone, for data without a daily cycle); derived: true when windows.before "
        "holds 2 days or more")
    weekly_profile: bool = True
    top_k: int = Field(1, ge=1, description="sensors the statistic averages over")
    engine_weight: float = Field(
        ENGINE_WEIGHT_DAILY, ge=0.0, le=0.9,
        description="the engine part's share of the alert level (weighted Bonferroni with "
        "the level part; 0: the level part alone, no engine fit per inspection); derived: "
        f"{ENGINE_WEIGHT_DAILY} with a daily profile, else {ENGINE_WEIGHT_WITHOUT_PROFILE}")
    engine_rows: Duration = Field(timedelta(hours=24),
                                  description="latest part of the before window the engine "
                                  "compares with the after window")
    source_history: bool = Field(
        True, description="engine rule: calibrate the decision also against the block "
        "statistic at earlier daily times the source holds (decision.history back); false: "
        "the block p-value alone")

    @model_validator(mode="after")
    def _positive(self) -> DecisionConfig:
        for name in ("false_incident_interval", "min_history", "history", "resolve_after",
                     "local_level", "engine_rows"):
            if getattr(self, name) <= timedelta(0):
                raise ValueError(f"decision.{name} must be positive, e.g. 30d or 24h")
        return self  # history >= min_history: MonitorConfig, once both are derived


#: What each profile fills in where the config is silent (README "Profiles").
PROFILES: dict[str, dict[str, dict[str, Any]]] = {
    # alerts within hours: hourly inspections of a 16-hour after window, calibrated
    # (lengths chosen on bench.leak_delay: README "Decision")
    "live": {
        "windows": {"before": "7d", "after": "16h", "resample": "1h", "normalise": "before"},
        "schedule": {"every": "1h"},
        "engine": {"block_size": None},
        "decision": {"rule": "calibrated"},
    },
    # the paper's setting: "what changed around t", 7 days against 7 days, daily. Normalised
    # by the before-window mean, not the paper's `first`: on the shared L-Town leak `first`
    # ranks a sensor cut off from the leak (n389) first (README "Profiles")
    "retrospective": {
        "windows": {"before": "7d", "after": "7d", "resample": "1h", "normalise": "before"},
        "schedule": {"cron": "0 0 * * *"},
        "decision": {"rule": "engine"},
    },
}


def apply_profile(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with the profile's values filled in where the config gives none."""
    name = data.get("profile", "live")
    if name not in PROFILES:
        return data  # the profile field itself reports the unknown name
    out = dict(data)
    for section, defaults in PROFILES[name].items():
        given = out.get(section)
        if given is None:
            given = {}
        if not isinstance(given, dict):
            continue  # the section's own validation reports it
        merged = dict(given)
        for key, value in defaults.items():
            if section == "schedule" and key in ("cron", "every") and (
                    given.get("cron") is not None or given.get("every") is not None):
                continue
            merged.setdefault(key, value)
        out[section] = merged
    return out


class StoreConfig(_Section):
    retention: Duration | None = Field(
        None, description="readings kept behind the newest; default before + after + 1d, "
        "plus the history the decision reads (decision.min_history; engine rule with "
        "decision.source_history: decision.history)"
    )


class GapsConfig(_Section):
    """Data gaps of a stream source (monitor/service/gaps.py, docs/mqtt.md "Status events")."""

    enabled: bool = True
    quiet_intervals: float = Field(
        2.0, gt=0, description="a sensor or site silent this many inspection intervals = a gap")
    hole_factor: float = Field(
        1.5, gt=1.0, description="a step this many times a sensor's cadence = a hole")


class OutboxConfig(_Section):
    retry_initial: Duration = timedelta(seconds=1)
    retry_max: Duration = timedelta(minutes=5)


class ExecutorConfig(_Section):
    """Where inspections run (monitor/fleet/executors.py, docs/architecture.md "Executors").

    ``local`` (default): a process pool on this machine, ``workers`` processes (default
    min(2, CPUs)); ``workers: 1`` runs in-process. ``inline``: in-process, one at a time.
    ``dask``: tasks on the Dask cluster at ``address`` (``tcp://host:8786``); without an
    address a ``LocalCluster`` of ``workers`` processes is started on this machine.
    """

    type: Literal["local", "inline", "dask"] = "local"
    workers: int | None = Field(None, ge=1, description="processes (local, dask LocalCluster)")
    address: str | None = Field(None, description="Dask scheduler, e.g. tcp://host:8786")
    connect_timeout: Duration = Field(timedelta(seconds=5),
                                      description="give up reaching the scheduler after this")
    retries: int = Field(3, ge=0, description="Dask: reruns of a task that raised (a task whose worker died is "
                         "rerun by the scheduler, up to its allowed-failures)")

    @model_validator(mode="after")
    def _address_for_dask(self) -> ExecutorConfig:
        if self.address is not None and self.type != "dask":
            raise ValueError("executor.address is only for type: dask; remove it or set "
                             "type: dask")
        if self.address is not None and "://" not in self.address:
            raise ValueError(f"executor.address {self.address!r} needs a scheme, e.g. "
                             "tcp://scheduler:8786")
        if self.connect_timeout <= timedelta(0):
            raise ValueError("executor.connect_timeout must be positive, e.g. 5s")
        return self


def check_site_id(value: str) -> str:
    """A site id: letters, digits, ``_``, ``.``, ``-`` (it becomes part of MQTT topics,
    InfluxDB tags and file names); ValueError naming the fix otherwise."""
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", value):
        raise ValueError(f"{value!r} may only hold letters, digits, '_', '.' and '-' (it "
                         "becomes part of MQTT topics and file names); e.g. l-town")
    return value


#: The sections a site of ``sites:`` may override (partially: keys given win).
SITE_SECTIONS = ("windows", "schedule", "engine", "decision")


class SiteConfig(_Section):
    """One entry of ``sites:`` (README "Sites"): the site's id, which readings are its own
    (``sensors``: an explicit list; else the source names the site: an MQTT topic level
    ``{site}`` in ``sensor_from_topic``, an InfluxDB ``site_tag``), and partial overrides
    of the top-level ``windows``, ``schedule``, ``engine`` and ``decision`` sections."""

    id: str
    sensors: list[str] | None = Field(
        None, description="this site's sensors; none: the source names the site")
    windows: dict[str, Any] | None = None
    schedule: dict[str, Any] | None = None
    engine: dict[str, Any] | None = None
    decision: dict[str, Any] | None = None

    @field_validator("id")
    @classmethod
    def _site_id(cls, value: str) -> str:
        return check_site_id(value)

    @field_validator("sensors")
    @classmethod
    def _sensors(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return value
        if not value:
            raise ValueError("is empty; list the site's sensor ids, or leave sensors out "
                             "when the source names the site (MQTT '{site}' topic level, "
                             "InfluxDB site_tag)")
        seen: set[str] = set()
        for name in value:
            if not name or not name.isprintable():
                raise ValueError(f"{name!r} is not a sensor id; use printable text")
            if name in seen:
                raise ValueError(f"{name!r} is listed twice; list each sensor once")
            seen.add(name)
        return value


class MonitorConfig(_Section):
    profile: Literal["live", "retrospective"] = "live"
    site: str = "default"
    sites: list[SiteConfig] | None = Field(
        None, description="many sites in one agent (README \"Sites\"); instead of site")
    state_dir: Path = Path("./state")
    source: Any = None
    sinks: list[Any] = Field(default_factory=lambda: [{"type": "console"}])
    windows: WindowsConfig = Field(default_factory=WindowsConfig)
    schedule: ScheduleConfig = Field(default_factory=ScheduleConfig)
    engine: EngineConfig = Field(default_factory=EngineConfig)
    decision: DecisionConfig = Field(default_factory=DecisionConfig)
    store: StoreConfig = Field(default_factory=StoreConfig)
    outbox: OutboxConfig = Field(default_factory=OutboxConfig)
    gaps: GapsConfig = Field(default_factory=GapsConfig)
    executor: ExecutorConfig = Field(default_factory=ExecutorConfig)
    health: HealthConfig = Field(default_factory=HealthConfig)
    report_dir: Path | None = None
    sensors_file: Path | None = None
    links_file: Path | None = None
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    _derived: dict[str, Any] = PrivateAttr(default_factory=dict)

    @field_validator("site")
    @classmethod
    def _site_id(cls, value: str) -> str:
        return check_site_id(value)

    @model_validator(mode="before")
    @classmethod
    def _profile(cls, data: Any) -> Any:
        return apply_profile(data) if isinstance(data, dict) else data

    @model_validator(mode="after")
    def _derive(self) -> MonitorConfig:
        """Fill the durations the config leaves out from the windows and the cadence
        (:func:`derived_durations`), then refuse values that cannot work."""
        derived = derived_durations(self)
        given_decision = self.decision.model_fields_set
        decision = {k: v for k, v in derived.items()
                    if k in DERIVED_DECISION_KEYS and k not in given_decision}
        if decision:
            self.decision = self.decision.model_copy(update=decision)
        self._derived = {f"decision.{k}": v for k, v in decision.items()}
        if "block_size" not in self.engine.model_fields_set and self.decision.rule == "engine":
            self.engine = self.engine.model_copy(update={"block_size": derived["block_size"]})
            self._derived["engine.block_size"] = derived["block_size"]
        check_durations(self)
        return self

    @property
    def derived(self) -> dict[str, Any]:
        """The values filled in from the windows and the cadence (``section.key``: value);
        the config's own values are not listed."""
        return dict(self._derived)

    def describe_derived(self) -> str:
        """One line for ``check-config`` and the agent's first log lines."""
        parts = []
        for key, value in self.derived.items():
            text = (format_duration(value) if isinstance(value, timedelta)
                    else "null" if value is None else str(value).lower())
            parts.append(f"{key} {text}")
        return ", ".join(parts)

    def derived_differ(self) -> bool:
        """Whether a derived value differs from the hourly default (a cadence or windows
        other than the hourly profile's, worth saying in a one-shot command's log)."""
        defaults = {"decision": DecisionConfig(), "engine": EngineConfig()}
        return any(getattr(defaults[key.split(".")[0]], key.split(".")[1]) != value
                   for key, value in self.derived.items())

    def given_dump(self, **kwargs: Any) -> dict[str, Any]:
        """``model_dump(mode="json")`` without the derived values, so that a config
        re-validated with other windows or cadence derives them anew."""
        data = self.model_dump(mode="json", **kwargs)
        for key in self.derived:
            section, name = key.split(".")
            if isinstance(data.get(section), dict):
                data[section].pop(name, None)
        return data

    @model_validator(mode="after")
    def _block_fits(self) -> MonitorConfig:
        block = self.engine.block_size
        if block is not None:
            rows = block / self.windows.resample
            if rows != int(rows) or rows < 1:
                raise ValueError(
                    f"engine.block_size ({format_duration(block)}) is not a whole number of "
                    f"windows.resample ({format_duration(self.windows.resample)}); use e.g. "
                    "block_size: 1d with resample: 1h, or block_size: null"
                )
        return self

    # -- derived values ---------------------------------------------------------------------
    @property
    def block_rows(self) -> int | None:
        """``engine.block_size`` in resampled rows (24 for 1d at 1h), None for iid rows."""
        block = self.engine.block_size
        return None if block is None else int(block / self.windows.resample)

    @property
    def retention(self) -> timedelta:
        w = self.windows
        span = w.before + w.after + timedelta(days=1)
        if self.decision.rule == "calibrated":  # the history backfill reads this far back
            span += self.decision.min_history
        elif self.decision.source_history:  # the retrospective decision's earlier days
            span += self.decision.history
        return self.store.retention or span

    def inspection_settings(self) -> dict[str, Any]:
        """What determines an inspection's result (hashed into its fingerprint)."""
        settings = {
            "windows": self.windows.model_dump(mode="json"),
            "engine": self.engine.model_dump(mode="json"),
        }
        if self.decision.rule == "calibrated":
            # a key added later enters the fingerprint only at a value other than the one
            # that reproduces the earlier behaviour, so that existing results keep theirs
            exclude = {"resolve_after"} | ({"daily_profile"} if self.decision.daily_profile
                                           else set())
            settings["decision"] = self.decision.model_dump(mode="json", exclude=exclude)
        elif self.decision.source_history:  # without it, engine-rule fingerprints as before
            settings["decision"] = self.decision.model_dump(
                mode="json", include={"source_history", "history"})
        return settings

    # -- sites ------------------------------------------------------------------------------
    @property
    def multi_site(self) -> bool:
        """True for a ``sites:`` config (even of one site): readings are routed to sites
        and the state is kept per site."""
        return self.sites is not None

    def for_site(self, site: SiteConfig) -> MonitorConfig:
        """This config as seen by one site of ``sites``: ``site`` is its id, and its
        ``windows``/``schedule``/``engine``/``decision`` overrides are laid over the
        top-level sections (keys given win; a site's ``cron`` or ``every`` replaces both of
        the top level's). A site without overrides inspects exactly as ``site: <id>`` with
        the same sections would: same settings, same fingerprints. Raises pydantic's
        ValidationError when the merged sections are invalid (checked at load time)."""
        data = self.given_dump(exclude={"source", "sinks", "sites"})
        data["site"] = site.id
        for name in SITE_SECTIONS:
            override = getattr(site, name)
            if not override:
                continue
            base = dict(data[name])
            if name == "schedule" and ("cron" in override or "every" in override):
                base.pop("cron", None)
                base.pop("every", None)
            data[name] = {**base, **override}
        merged = MonitorConfig.model_validate(data)
        return merged.model_copy(update={"source": self.source, "sinks": self.sinks})

    def site_configs(self) -> list[MonitorConfig]:
        """One config per site: ``for_site`` of each entry of ``sites``, or this config
        itself for a single-site config."""
        if self.sites is None:
            return [self]
        return [self.for_site(site) for site in self.sites]


# ------------------------------------------------------------------------------------------
# derived durations (docs/config.md "Derived durations")
# ------------------------------------------------------------------------------------------
#: decision keys whose default is derived from the windows and the cadence
DERIVED_DECISION_KEYS = ("history", "min_history", "false_incident_interval", "local_level",
                         "engine_rows", "resolve_after", "daily_profile", "engine_weight")
#: the cadence the hourly defaults were chosen at (bench.leak_delay): faster inspections
#: scale the history, min_history and false-incident interval by interval / this
REFERENCE_INTERVAL = timedelta(hours=1)
#: history values the calibration needs at least (engine.live.calibration: 5 x the tail's
#: MIN_EXCEEDANCES)
MIN_CALIBRATION = 25
#: past inspection times a calibration history may hold at most (a 28-day history at a
#: 5-second cadence would be 484,000 fits)
MAX_HISTORY_TIMES = 20_000


def _floor_to(value: timedelta, step: timedelta) -> timedelta:
    """``value`` rounded down to a whole number of ``step`` (at least one step)."""
    return max(step, step * int(value / step))


def derived_durations(config: MonitorConfig) -> dict[str, Any]:
    """What the durations default to for ``config``'s windows and cadence (the rules of
    docs/config.md "Derived durations"). At the hourly defaults (before 7d, every 1h)
    every duration is the one the project used before they were derived: history 28d,
    min_history 4d, false_incident_interval 30d, local_level, engine_rows and
    resolve_after 24h, block_size (engine rule) 1d, daily profile on; and engine_weight
    0.1 (0.35 before 2026-12-04, and still without a daily profile)."""
    w = config.windows
    daily = w.before >= timedelta(days=2)  # two of each hour of day: a profile to learn
    # "the last day" of the before window: a day for daily-cycle data, else a seventh of
    # the window (a day of the 7-day default), leaving room for the after window
    spare = w.before - w.after - w.resample
    day = timedelta(days=1) if daily else _floor_to(w.before / 7, w.resample)
    day = min(day, _floor_to(spare, w.resample)) if spare > timedelta(0) else day
    shortest = min(w.before, w.after)
    block = (timedelta(days=1) if shortest >= timedelta(days=4)
             else _floor_to(shortest / 7, w.resample))
    # the engine part's share of the level: a backstop where the level statistic carries
    # the cycle channels (a daily profile), more where it sees the level alone
    weight = ENGINE_WEIGHT_DAILY if daily else ENGINE_WEIGHT_WITHOUT_PROFILE
    out: dict[str, Any] = {"local_level": day, "engine_rows": day, "resolve_after": day,
                           "block_size": block, "daily_profile": daily,
                           "engine_weight": weight}
    interval = config.schedule.interval()
    if config.decision.rule == "calibrated" and daily:
        # daily-cycle data: weeks of history and a month between false incidents, as
        # chosen on the hourly benches, whatever the cadence (at most MAX_HISTORY_TIMES)
        history = min(timedelta(days=28), interval * MAX_HISTORY_TIMES)
        out.update(history=history, min_history=min(timedelta(days=4), history),
                   false_incident_interval=timedelta(days=30))
    elif config.decision.rule == "calibrated":
        # no daily cycle (a testbed logged each second): the numbers of inspections
        # hourly data has (672 in the history, a false incident per 720) at this cadence;
        # the first alert after MIN_CALIBRATION values, the fewest the calibration's tail
        # fit takes (a short recording must not spend itself calibrating)
        scale = min(1.0, interval / REFERENCE_INTERVAL)
        out.update(history=timedelta(days=28) * scale,
                   min_history=min(timedelta(days=4) * scale, interval * MIN_CALIBRATION),
                   false_incident_interval=timedelta(days=30) * scale)
    else:  # the retrospective decision reads the source's earlier days, a day apart
        # (monitor.decision.source_history.HISTORY_STEP): its history is in days
        out.update(history=timedelta(days=28), min_history=timedelta(days=4),
                   false_incident_interval=timedelta(days=30))
    return out


def check_durations(config: MonitorConfig) -> None:
    """Refuse durations that cannot work at ``config``'s windows and cadence (rather than
    clamping them in silence); each message names the fix."""
    w, d = config.windows, config.decision
    if d.history < d.min_history:
        raise ValueError("decision.history must be at least decision.min_history")
    spare = w.before - w.after - w.resample
    for name in ("local_level", "engine_rows"):
        value = getattr(d, name)
        if timedelta(0) < spare < value:
            raise ValueError(
                f"decision.{name} ({format_duration(value)}) must leave room for the after "
                f"window inside windows.before ({format_duration(w.before)} - "
                f"{format_duration(w.after)}); use at most {format_duration(spare)}, or leave "
                "it out to derive it (windows.before / 7)")
    if d.rule == "calibrated":
        interval = config.schedule.interval()
        times = d.history / interval
        if times > MAX_HISTORY_TIMES:
            raise ValueError(
                f"decision.history ({format_duration(d.history)}) at one inspection every "
                f"{format_duration(interval)} is {int(times):,} past inspection times, more "
                f"than {MAX_HISTORY_TIMES:,}; shorten decision.history to at most "
                f"{format_duration(interval * MAX_HISTORY_TIMES)}, or leave it (and "
                "min_history, false_incident_interval) out to derive them from the cadence")
    block = config.engine.block_size
    if d.rule == "engine" and block is not None:
        shortest = min(w.before, w.after)
        if shortest / block < 4:
            raise ValueError(
                f"engine.block_size ({format_duration(block)}) leaves fewer than 4 blocks "
                f"in a {format_duration(shortest)} window (the block test needs 4); use at "
                f"most {format_duration(_floor_to(shortest / 4, w.resample))}, null, or "
                "leave it out to derive it (the shorter window / 7)")


# ------------------------------------------------------------------------------------------
# ${ENV} expansion
# ------------------------------------------------------------------------------------------
_ENV = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-(.*?))?\}")


@dataclass
class _Expansion:
    unset_whole: dict[str, str] = field(default_factory=dict)  # key path -> var
    problems: list[str] = field(default_factory=list)


def expand_env(node: Any, env: dict[str, str], path: str = "", out: _Expansion | None = None
               ) -> Any:
    """Replace ``${VAR}`` / ``${VAR:-default}`` in every string. A value that is exactly
    ``${VAR}`` with VAR unset becomes null (so optional secrets may be left unset); an unset
    variable inside a longer string is a problem."""
    out = out if out is not None else _Expansion()
    if isinstance(node, dict):
        return {k: expand_env(v, env, f"{path}.{k}" if path else str(k), out)
                for k, v in node.items()}
    if isinstance(node, list):
        return [expand_env(v, env, f"{path}[{i}]", out) for i, v in enumerate(node)]
    if not isinstance(node, str) or "${" not in node:
        return node
    whole = _ENV.fullmatch(node)
    if whole and whole.group(1) not in env and whole.group(2) is None:
        out.unset_whole[path] = whole.group(1)
        return None

    def sub(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        if name in env:
            return env[name]
        if default is not None:
            return default
        out.problems.append(
            f"{path}: environment variable {name} is not set; export it or write "
            f"${{{name}:-default}}"
        )
        return ""

    return _ENV.sub(sub, node)


# ------------------------------------------------------------------------------------------
# Error formatting
# ------------------------------------------------------------------------------------------
def _loc(prefix: str, loc: tuple[Any, ...]) -> str:
    text = prefix
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text = f"{text}.{part}" if text else str(part)
    return text or "(top level)"


def _known_fields(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """Field names of the (sub)model that owns ``loc[:-1]``."""
    current: Any = model
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        info = getattr(current, "model_fields", {}).get(part)
        if info is None:
            return []
        annotation = info.annotation
        current = annotation if isinstance(annotation, type) else None
        if current is None or not issubclass(current, BaseModel):
            return []
    return list(getattr(current, "model_fields", {}))


def _describe(model: type[BaseModel], exc: ValidationError, prefix: str,
              unset: dict[str, str]) -> list[str]:
    problems = []
    for err in exc.errors():
        key = _loc(prefix, err["loc"])
        if err["type"] == "extra_forbidden":
            name = str(err["loc"][-1])
            known = _known_fields(model, err["loc"])
            close = difflib.get_close_matches(name, known, n=1)
            hint = f"did you mean {close[0]!r}?" if close else (
                f"known keys here: {', '.join(known)}" if known else "remove it")
            problems.append(f"{key}: unknown key; {hint}")
            continue
        msg = err["msg"]
        msg = msg.removeprefix("Value error, ")
        if err["type"] == "missing":
            msg = "required key is missing; add it"
        if err["type"] == "literal_error":
            msg = f"{msg} (got {err.get('input')!r})"
        var = unset.get(key)
        if var:
            msg += f" (it came from ${{{var}}}, which is not set: export {var})"
        problems.append(f"{key}: {msg}")
    return problems


# ------------------------------------------------------------------------------------------
# Loading
# ------------------------------------------------------------------------------------------
def _validate_connector(kind: str, section: Any, key: str, unset: dict[str, str]
                        ) -> tuple[BaseModel | None, list[str]]:
    from connectors import registry
    from connectors.base import ConnectorError

    if not isinstance(section, dict):
        return None, [f"{key}: must be a mapping with a 'type' key, e.g. {{type: console}}"]
    type_ = section.get("type")
    if not type_:
        table = registry.SOURCES if kind == "source" else registry.SINKS
        return None, [f"{key}.type: required; use one of: {', '.join(sorted(table))}"]
    try:
        cls = registry.source_class(type_) if kind == "source" else registry.sink_class(type_)
    except ConnectorError as exc:
        return None, [f"{key}.type: {exc}"]
    except ImportError as exc:
        return None, [(f"{key}.type: {type_!r} connector cannot be loaded ({exc}); "
                       "install its dependencies or pick another type")]
    try:
        return cls.Config.model_validate(section), []
    except ValidationError as exc:
        return None, _describe(cls.Config, exc, key, unset)


def validate_config(raw: Any, *, env: dict[str, str] | None = None, origin: str = "config",
                    require_source: bool = True) -> MonitorConfig:
    """Validate a parsed YAML mapping; raise :class:`ConfigError` listing every problem."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(["(top level): must be a mapping of keys such as site, source, sinks"],
                          origin)
    expansion = _Expansion()
    data = expand_env(raw, dict(os.environ if env is None else env), out=expansion)
    problems = list(expansion.problems)

    config: MonitorConfig | None = None
    try:
        config = MonitorConfig.model_validate(data)
    except ValidationError as exc:
        problems += _describe(MonitorConfig, exc, "", expansion.unset_whole)

    source_model = None
    if data.get("source") is None:
        if require_source:
            problems.append("source: required; add e.g. source: {type: file, path: data.csv.gz}")
    else:
        source_model, errs = _validate_connector("source", data["source"], "source",
                                                 expansion.unset_whole)
        problems += errs
    sink_models = []
    sinks = data.get("sinks", [{"type": "console"}])
    if not isinstance(sinks, list):
        problems.append("sinks: must be a list, e.g. sinks: [{type: console}]")
        sinks = []
    for i, section in enumerate(sinks):
        model, errs = _validate_connector("sink", section, f"sinks[{i}]", expansion.unset_whole)
        problems += errs
        sink_models.append(model)
    if config is not None and isinstance(data, dict):
        problems += _site_problems(config, data, source_model, expansion.unset_whole)
    if problems or config is None:
        raise ConfigError(problems, origin)
    return config.model_copy(update={"source": source_model, "sinks": sink_models})


def _site_problems(config: MonitorConfig, data: dict[str, Any], source: Any,
                   unset: dict[str, str]) -> list[str]:
    """The ``sites:`` checks that need the whole config: ``site`` and ``sites`` together,
    an empty list, duplicate ids, a sensor claimed by two sites, a site the source cannot
    tell apart, a topic naming a site that is not configured, and each site's merged
    sections."""
    if config.sites is None:
        return []
    problems: list[str] = []
    if "site" in data:
        problems.append("site: give either site (one site) or sites (a list of sites, each "
                        "with an id), not both; remove site")
    if not config.sites:
        problems.append("sites: is empty; list at least one site, e.g. sites: [{id: north, "
                        "sensors: [n1, n2]}], or remove sites and set site")
        return problems
    names_sites = bool(getattr(source, "names_sites", False))
    first: dict[str, int] = {}
    owner: dict[str, str] = {}
    for i, site in enumerate(config.sites):
        if site.id in first:
            problems.append(f"sites[{i}].id: {site.id!r} is also the id of sites[{first[site.id]}]; "
                            "give each site its own id")
            continue
        first[site.id] = i
        for name in site.sensors or []:
            if name in owner:
                problems.append(f"sites[{i}].sensors: {name!r} is also claimed by site "
                                f"{owner[name]!r}; a sensor belongs to one site, remove it "
                                "from one of the lists")
            else:
                owner[name] = site.id
        if site.sensors is None and source is not None and not names_sites:
            problems.append(
                f"sites[{i}]: site {site.id!r} lists no sensors and the source does not "
                "name sites; add sensors: [...] to the site, or let the source name it "
                "(MQTT sensor_from_topic such as 'sensors/{site}/{sensor}', InfluxDB "
                "site_tag)")
        try:
            config.for_site(site)
        except ValidationError as exc:
            problems += _describe(MonitorConfig, exc, f"sites[{i}]", unset)
    for where, site_id in (getattr(source, "sites_in_topics", None) or {}).items():
        if site_id not in first:
            problems.append(f"source.{where}: the topic is for site {site_id!r}, which is not "
                            f"in sites; add {{id: {site_id}}} to sites or remove the topic")
    return problems


def validate_executor(raw: Any, *, origin: str = "executor") -> ExecutorConfig:
    """An ``executor:`` mapping alone (``backfill --cluster``); ConfigError lists problems."""
    try:
        return ExecutorConfig.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(_describe(ExecutorConfig, exc, "executor", {}), origin) from None


def load_config(path: str | Path, *, env: dict[str, str] | None = None,
                require_source: bool = True) -> MonitorConfig:
    """Read and validate a YAML config file; raise :class:`ConfigError` listing problems."""
    import yaml

    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError([f"cannot read {path}: {exc.strerror}; check the path"], str(path)
                          ) from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError([(f"not valid YAML{where}: {getattr(exc, 'problem', exc)}; fix the "
                            "syntax (indentation, colons, quotes)")], str(path)) from None
    from monitor.service.security import exposed_secret_warning

    try:
        warning = exposed_secret_warning(path, raw)
        if warning:  # a leaked password is worth a warning, not a refusal to start
            import logging

            logging.getLogger(__name__).warning("%s", warning)
        return validate_config(raw, env=env, origin=str(path), require_source=require_source)
    except RecursionError:
        # YAML aliases can make a value contain itself (a: &x [*x]), or nest absurdly deep
        raise ConfigError([("(top level): the YAML nests too deeply or refers to itself "
                            "through an alias (&name / *name); write the values out plainly")],
                          str(path)) from None
