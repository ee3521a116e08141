"""The composition root: the ONLY place that turns a config into objects.

Everything else receives what it needs as arguments (no globals, no singletons), so tests
and the CLI's one-shot commands build just the parts they use.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from connectors import registry
from connectors.base import Sink, StreamSource, WindowSource
from engine.live.calibration import CalibrationSettings
from engine.live.residual_shift import DetectorSettings
from monitor.config import MonitorConfig, SiteConfig
from monitor.decision.calibrated_rule import EngineFits, fits_here
from monitor.decision.incidents import IncidentSettings
from monitor.decision.settings import DecisionSettings, EngineSettings
from monitor.inspection import Inspector, Outcome
from monitor.service.metrics import Metrics
from monitor.windows import WindowSpec

if TYPE_CHECKING:
    from monitor.storage.publish import Publisher
    from monitor.storage.store import ClockPolicy, ReadingStore

log = logging.getLogger(__name__)


def inspection_interval(config: MonitorConfig) -> timedelta:
    """Time between two inspections of the schedule (cron: its first two times)."""
    return config.schedule.interval()


#: A reading more than this many inspection intervals (or one after window, when that is
#: longer) ahead of its site's data clock is held back (docs/cli.md, "The data clock").
AHEAD_INTERVALS = 4


def clock_policy(config: MonitorConfig) -> ClockPolicy:
    """What the reading store refuses for one site (``config``: that site's config): a
    time further ahead of the site's data clock than ``AHEAD_INTERVALS`` inspection
    intervals or one after window, whichever is longer (a sender may publish an after
    window at once; one bogus time must not become the clock), and on ``clock: data`` a
    reading without a time of its own."""
    from monitor.storage.store import ClockPolicy

    bound = max(AHEAD_INTERVALS * inspection_interval(config), config.windows.after)
    return ClockPolicy(max_ahead_s=bound.total_seconds(),
                       refuse_received=config.schedule.clock == "data")


def build_decision(config: MonitorConfig) -> DecisionSettings:
    d = config.decision
    resample = config.windows.resample
    detector = DetectorSettings(local_level_rows=max(1, int(d.local_level / resample)),
                                common_modes=d.common_modes, weekly_profile=d.weekly_profile,
                                top_k=d.top_k, daily_profile=d.daily_profile)
    calibration = CalibrationSettings(false_incident_interval=d.false_incident_interval,
                                      inspection_interval=inspection_interval(config),
                                      min_history=d.min_history, history=d.history)
    return DecisionSettings(rule=d.rule, detector=detector, calibration=calibration,
                            engine_weight=d.engine_weight,
                            engine_rows=max(4, int(d.engine_rows / resample)),
                            source_history=d.source_history)


def build_inspector(config: MonitorConfig, engine_fits: EngineFits | None = None
                    ) -> Inspector:
    """The site's inspector; ``engine_fits``: where its batched engine-part fits run
    (default: in this process; a one-shot command passes its
    :class:`~monitor.engine_process.EngineProcess`)."""
    e = config.engine
    engine = EngineSettings(method=e.method, alpha=e.alpha, seed=e.seed, device=e.device,
                            block_rows=config.block_rows,
                            params=tuple(sorted(e.params.items())))
    return Inspector(config.site, WindowSpec.from_config(config.windows), engine,
                     config.inspection_settings(), build_decision(config),
                     engine_fits or fits_here)


def build_incidents(config: MonitorConfig) -> IncidentSettings:
    return IncidentSettings(resolve_after=config.decision.resolve_after)


def build_source(config: MonitorConfig) -> StreamSource | WindowSource:
    cls = registry.source_class(config.source.type)
    source = cls(config.source)
    if not isinstance(source, StreamSource | WindowSource):
        raise TypeError(f"source {config.source.type!r} is neither a stream nor a window "
                        "source")
    return source


@dataclass(frozen=True)
class Feed:
    """Where inspections read their windows (``windows``), and what fills it: for a stream
    source, ``stream`` pushes readings into ``store``, which is then ``windows``."""

    windows: WindowSource
    stream: StreamSource | None = None
    store: ReadingStore | None = None


def site_source(config: MonitorConfig, site: SiteConfig) -> tuple[WindowSource, Any]:
    """One site's window source over a window source (InfluxDB): the source narrowed to the
    site's points (``site_tag``) and listed sensors, and that narrowed connector config (a
    worker can read the same windows itself); or, for a source that cannot be narrowed,
    the source filtered here to the site's sensors (config None: read here only)."""
    narrow = getattr(config.source, "for_site", None)
    if narrow is not None:
        source_config = narrow(site.id, site.sensors)
        source = registry.source_class(source_config.type)(source_config)
        assert isinstance(source, WindowSource)
        return source, source_config
    from monitor.fleet.sites import SensorFilter

    base = build_source(config)
    assert isinstance(base, WindowSource)
    return SensorFilter(base, site.sensors), None


def one_site(config: MonitorConfig) -> SiteConfig | None:
    """The site a one-shot command's windows belong to: the (one picked) entry of
    ``sites``, or, for a single ``site`` over a source that names sites (InfluxDB
    ``site_tag``), that site, so the command reads the points the agent reads."""
    if config.sites:
        return config.sites[0]
    if getattr(config.source, "names_sites", False):
        return SiteConfig(id=config.site)
    return None


def build_windows(config: MonitorConfig, metrics: Metrics | None = None, *,
                  one_shot: bool = False, site: SiteConfig | None = None) -> Feed:
    """The ONE place that asks "stream or window source?"; everything after reads windows
    through :class:`~connectors.base.WindowSource` only.

    * A window source (InfluxDB) is read directly.
    * A stream source (MQTT) fills the reading store ``state_dir/readings.sqlite``, and the
      store answers the windows. A one-shot command (``one_shot``) reads the store the agent
      filled; it never creates one (:class:`~monitor.storage.store.StoreError` when there is none).
    * A source that is both (a file): the agent replays it into the store (the data clock
      then advances through it); a one-shot command reads it in bulk.

    ``site`` (one entry of a multi-site config's ``sites``; one-shot commands): the windows
    of that site only: its view of the store, or the source narrowed to it.
    """
    from monitor.storage.store import ReadingStore, StoreError

    source = build_source(config)
    if isinstance(source, WindowSource) and (one_shot or not isinstance(source, StreamSource)):
        if site is not None:
            source.close()
            return Feed(windows=site_source(config, site)[0])
        return Feed(windows=source)
    assert isinstance(source, StreamSource)
    path = Path(config.state_dir) / "readings.sqlite"
    if one_shot:
        if not path.exists():
            raise StoreError(f"source {config.source.type!r} is a stream and there is no "
                             f"store at {path} yet; run the agent first (mmdwatch run) or "
                             "use --data")
        store = ReadingStore(path, metrics)
        return Feed(windows=store if site is None else store.for_site(site.id, owner=True))
    store = ReadingStore(path, metrics)
    return Feed(windows=store, stream=source, store=store)


#: The site a sink's agent-level messages (MQTT availability) use in a multi-site agent
#: unless the sink names one; results still go to their own site's topics.
FLEET_SITE = "fleet"


def _sink_site(config: MonitorConfig) -> str:
    if not config.sites:
        return config.site
    return FLEET_SITE  # as documented (docs/mqtt.md), even for a one-entry list


def build_sinks(config: MonitorConfig, *, one_shot: bool = False) -> list[Sink]:
    sinks: list[Sink] = []
    for c in config.sinks:
        fields = type(c).model_fields
        # A sink whose config has a `site` key (MQTT: availability topic and last will,
        # needed before the first result) gets the top-level site unless it names one
        # (a multi-site agent: "fleet").
        if "site" in fields and getattr(c, "site", None) is None:
            c = c.model_copy(update={"site": _sink_site(config)})
        # A one-shot command is not the agent: a sink with a `role` key (MQTT) publishes
        # results only, leaving the agent's availability, session and retained state alone.
        if one_shot and "role" in fields:
            c = c.model_copy(update={"role": "publisher"})
        sinks.append(registry.sink_class(c.type)(c))
    return sinks


def build_publisher(config: MonitorConfig) -> Publisher:
    """The config's sinks behind the outbox in ``state_dir/state.sqlite``, for the one-shot
    commands' ``--publish`` (started: delivery runs while they compute)."""
    from monitor.storage.delivery import Dispatcher
    from monitor.storage.publish import Publisher
    from monitor.storage.state import AgentState

    state = AgentState(Path(config.state_dir) / "state.sqlite")
    try:
        dispatcher = Dispatcher(build_sinks(config, one_shot=True), state, Metrics(),
                                retry_initial=config.outbox.retry_initial,
                                retry_max=config.outbox.retry_max)
    except BaseException:
        state.close()
        raise
    publisher = Publisher(state, dispatcher)
    publisher.start()
    return publisher


def build_commands(config: MonitorConfig, state: Any) -> list[Any]:
    """One MQTT command listener per MQTT sink whose ``commands.ack`` is on (none by
    default): it subscribes to ``<prefix>/<site>/ack`` for each site of the agent and
    stores each ack whose incident is open in ``state`` (``AgentState``) with via
    ``mqtt`` (:func:`monitor.storage.acks.record_ack`); the agent applies it at the site's
    next inspection. Started and stopped with the agent's services."""
    listeners: list[Any] = []
    sites = [entry.id for entry in config.sites] if config.sites else [config.site]
    for c in config.sinks:
        commands = getattr(c, "commands", None)
        if commands is None or not commands.ack:
            continue
        from connectors.mqtt.commands import MqttCommandListener

        client_id = f"{c.client_id or 'mmdwatch-sink-' + (c.site or _sink_site(config))}" \
                    "-commands"
        listeners.append(MqttCommandListener(c, prefix=c.prefix, sites=sites,
                                             on_ack=ack_handler(state, bool(config.sites)),
                                             client_id=client_id))
    return listeners


def ack_handler(state: Any, multi_site: bool) -> Callable[[Any], int]:
    """The callback of an MQTT command listener: the ack (``AckCommand``) of an open
    incident of its topic's site is stored (a single-site agent's under site None); any
    other is refused (``CommandRejected``, logged by the listener with the open ids)."""
    from connectors.mqtt.commands import CommandRejected
    from monitor.storage.acks import AckRejected, record_ack

    def handle(command: Any) -> int:
        try:
            ack_id, _ = record_ack(state, command.incident, by=command.who, via="mqtt",
                                   site=command.site if multi_site else None,
                                   note=command.note)
        except AckRejected as exc:
            raise CommandRejected(str(exc)) from None
        return ack_id

    return handle


def build_reporter(report_dir: Path, sensors_file: Path | None = None,
                   links_file: Path | None = None) -> Any:
    """A callable that writes one inspection's report folder (monitor.report, imported on
    first use). Failures are the caller's to log."""

    def report(outcome: Outcome) -> Path:
        from monitor.report import write_inspection_report

        w = outcome.windows
        return write_inspection_report(
            outcome.result, report_dir,
            before_raw=None if w is None else w.before_raw,
            after_raw=None if w is None else w.after_raw,
            before=None if w is None else w.before,
            after=None if w is None else w.after,
            sensors_file=sensors_file, links_file=links_file)

    return report


def build_agent(config: MonitorConfig, metrics: Metrics | None = None) -> Any:
    """Source, store, ledger/outbox, sites (inspector, schedule, history and incident of
    each), executor, sinks -> a ready (unstarted) Agent."""
    from monitor.agent import Agent
    from monitor.storage.delivery import Dispatcher
    from monitor.storage.state import AgentState, StateError

    metrics = metrics or Metrics()
    state_dir = Path(config.state_dir)
    try:
        state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as exc:
        raise StateError(f"cannot create state_dir {state_dir}: {exc.strerror}; point "
                         "state_dir at a writable folder") from None
    for site_config in config.site_configs():
        if site_config.derived:
            log.info("%s: derived from the windows and the cadence: %s", site_config.site,
                     site_config.describe_derived())
    feed = build_windows(config, metrics)
    if feed.stream is None:
        metrics.set_source_connected(None)  # no connection to report between queries
    state = AgentState(state_dir / "state.sqlite")
    closers: list[Any] = [state.close, feed.windows.close]
    try:
        sites = build_sites(config, feed, state, closers)
    except BaseException:
        for close in closers:
            close()
        raise
    dispatcher = Dispatcher(build_sinks(config), state, metrics,
                            retry_initial=config.outbox.retry_initial,
                            retry_max=config.outbox.retry_max)
    reporter = None
    if config.report_dir is not None:
        reporter = build_reporter(Path(config.report_dir), config.sensors_file,
                                  config.links_file)
    services: list[Any] = []
    if config.health.port is not None:
        from monitor.service.health import HealthServer

        services.append(HealthServer.for_metrics(metrics, config.health))
    services.extend(build_commands(config, state))  # MQTT acks (off unless configured)
    router = build_router(config, feed, metrics)
    executor, workers = build_site_executor(config, len(sites))
    site_configs = config.site_configs()
    gaps = build_gaps(config, feed, dispatcher.sinks, metrics)
    if gaps is not None:
        services.append(gaps)
    return Agent(sites=sites, stream=feed.stream, store=feed.store, state=state,
                 dispatcher=dispatcher, metrics=metrics, gaps=gaps,
                 poll=min(c.schedule.poll for c in site_configs),
                 retention=max(c.retention for c in site_configs), reporter=reporter,
                 closers=closers, services=services, router=router, executor=executor,
                 workers=workers)


def build_gaps(config: MonitorConfig, feed: Feed, sinks: Sequence[Any],
               metrics: Metrics) -> Any:
    """The :class:`~monitor.service.gaps.GapWatch` of a stream source (None for a window source,
    whose holes are the database's, or with ``gaps: {enabled: false}``)."""
    if feed.stream is None or not config.gaps.enabled:
        return None
    from monitor.service.gaps import GapSite, GapWatch

    names = [e.id for e in config.sites] if config.sites else [config.site]
    sites = [GapSite(name, inspection_interval(c).total_seconds(), c.schedule.clock)
             for name, c in zip(names, config.site_configs(), strict=True)]
    stream = feed.stream

    def sessions() -> int | None:
        value = stream.health().get("sessions")
        return None if value is None else int(value)

    return GapWatch(sites, sinks, metrics, quiet_intervals=config.gaps.quiet_intervals,
                    hole_factor=config.gaps.hole_factor, sessions=sessions)


def build_sites(config: MonitorConfig, feed: Feed, state: Any,
                closers: list[Any]) -> list[Any]:
    """One :class:`~monitor.fleet.sites.SiteRunner` per site. A single-site config: the feed's
    windows and the state's own tables, as always. ``sites:``: each site reads its view
    of the store (or the source narrowed to it) and keeps its ledger under its id."""
    from monitor.decision.tracker import SiteTracker
    from monitor.fleet.sites import SiteRunner
    from monitor.schedule import InspectionPlan

    runners = []
    entries: list[SiteConfig | None] = list(config.sites) if config.sites else [None]
    for site_config, entry in zip(config.site_configs(), entries, strict=True):
        inspector = build_inspector(site_config)
        tracker = SiteTracker(inspector, build_incidents(site_config))
        schedule = site_config.schedule
        windows: WindowSource = feed.windows
        ledger: Any = state
        source = None
        fallback = None
        if entry is None:
            if feed.store is None and getattr(config.source, "names_sites", False):
                windows, _ = site_source(config, SiteConfig(id=config.site))
                closers.append(windows.close)
        else:
            ledger = state.for_site(entry.id)
            if feed.store is not None:
                windows, fallback = feed.store.for_site(entry.id), feed.store
            else:
                windows, source = site_source(config, entry)
                closers.append(windows.close)
        if feed.store is not None:
            feed.store.set_clock_policy(clock_policy(site_config),
                                        None if entry is None else entry.id)
        runners.append(SiteRunner(
            inspector=inspector, windows=windows, state=ledger,
            plan=InspectionPlan.from_config(schedule), tracker=tracker, clock=schedule.clock,
            start=schedule.start, site=None if entry is None else entry.id, source=source,
            finished=(feed.stream.finished if feed.stream is not None else lambda: False),
            fallback=fallback))
    return runners


def build_router(config: MonitorConfig, feed: Feed, metrics: Metrics) -> Any:
    """The :class:`~monitor.fleet.sites.SiteRouter` a stream's readings pass before the store:
    every ``sites:`` config; a single site only when its source names sites (it keeps its
    own site's readings, bare ids as before). None otherwise (readings stored as is)."""
    from monitor.fleet.sites import SiteRouter, sensor_lists

    if feed.stream is None:
        return None
    if config.sites:
        return SiteRouter(sensor_lists(config.sites), metrics)
    if getattr(config.source, "names_sites", False):
        return SiteRouter({config.site: None}, metrics, qualify=False)
    return None


def build_site_executor(config: MonitorConfig, n_sites: int
                        ) -> tuple[Callable[[], Any] | None, int]:
    """``(factory of the executor, inspections in flight at most)``. Inspections run in the
    agent's own thread (factory None) for one site unless the config names an executor,
    and for ``type: inline``; otherwise on :func:`monitor.fleet.executors.build_executor`, one
    inspection per site at a time, up to ``executor.workers`` (a Dask scheduler given by
    address: one per site; Dask queues the rest)."""
    from monitor.fleet.executors import build_executor, default_workers

    e = config.executor
    explicit = "executor" in config.model_fields_set
    if e.type == "inline" or (n_sites == 1 and not explicit):
        return None, 1
    if e.workers is not None:
        workers = e.workers
    elif e.type == "dask" and e.address is not None:
        workers = n_sites
    else:
        workers = default_workers()
    if workers == 1 and e.type == "local":
        return None, 1
    return (lambda: build_executor(e)), workers
