"""Holes in a stream source's data: noticed, logged, counted and published.

A broker that crashed without persistence, an agent that reconnected late, a gateway that
stopped: the readings that never came leave nothing behind but a lower coverage. This
module makes such holes visible while the agent runs. Three kinds, each one WARNING log
line, one count in the metric ``mmdwatch_data_gaps_total{kind}`` and one ``data_gap``
event on every sink that takes events (MQTT: ``<prefix>/<site>/status``, docs/mqtt.md):

``hole``
    A sensor's readings resumed after a step longer than ``gaps.hole_factor`` (1.5) times
    its own cadence (the shortest of its last few steps between readings), unless such
    steps are the sensor's habit (a step of at most 3 cadences that is 2 % or more of its
    last 200: a one-second logger that skips a second now and then, :data:`HABIT_SHARE`).
    The span is
    closed: from its last reading before to its first reading after. A hole waits 5 s
    (``settle_s``) for late readings before it is published: after a reconnect a broker may
    deliver what it had queued for the old session after what publishers sent since, and
    a late reading inside a hole splits it (nothing lost, only reordered). All holes of one
    site that settle in one check (1 s) are one event, so a reconnect that shows a hole in
    500 sensors is one message; ``after_reconnect`` says whether the source connected anew
    between the two readings (the source's ``health()["sessions"]`` changed).
``quiet``
    Sensors whose newest reading is more than ``gaps.quiet_intervals`` (2) inspection
    intervals behind the site's clock (wall clock, or the site's newest reading under
    ``clock: data``). The span is open (``end`` null); once the sensor speaks again the
    closed span comes as a ``hole``.
``site_quiet``
    No reading of the site arrived for ``gaps.quiet_intervals`` inspection intervals of
    wall time (under ``clock: data`` the site's own data clock stops with it, so only
    arrival time can tell).

Why these thresholds: a hole is judged against the sensor's own cadence so that one lost
reading of a regular sensor shows (a step of 2x); 1.5 leaves room for timestamp jitter.
Quiet is judged in inspection intervals because that is when a silent sensor starts to
cost coverage in the windows; 2 intervals warns before one whole after window is lost at
the usual B = A = several intervals, without firing on one late batch.

What it cannot see: a hole in a sensor that has sent fewer than three readings since the
agent started (no cadence yet), and a hole that ends before the agent starts.
"""
from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from connectors.base import Reading, Sink, SinkError
from monitor.service.metrics import Metrics
from monitor.storage.store import MAX_FUTURE_S, SITE_SEP

log = logging.getLogger(__name__)


_STEPS_KEPT = 4
#: the steps (holes too) a sensor's habit is judged on, and the share of them at least as
#: long as a step (less the hole factor's slack) that makes that step habitual, not a
#: hole; judged once RECENT_FROM steps are known. SKAB's one-second logger skips a second
#: in about 6 % of its steps (5.9-7.1 % in the five skab-dev files): each skip was a
#: WARNING and an event, one every 15 s on average. 2 %, not 5 %: 200 steps at 6 % hold
#: fewer than 10 skips a quarter of the time, and fewer than 4 one time in 500. A regular
#: sensor's one lost reading is 1 step in 200, still a hole
RECENT_KEPT = 200
RECENT_FROM = 50
HABIT_SHARE = 0.02
#: only a step of at most this many cadences can be a habit (a skipped reading or two): a
#: publisher that drops out for an hour now and then loses data each time, and each time
#: is a hole however often it happens
HABIT_MAX_CADENCES = 3.0


def _iso(epoch_s: float) -> str:
    return datetime.fromtimestamp(epoch_s, UTC).isoformat().replace("+00:00", "Z")


@dataclass(frozen=True, slots=True)
class GapSite:
    """What the watch needs of one site: its name, inspection interval and clock."""

    name: str
    interval_s: float
    clock: str = "wall"  # "wall" | "data"


@dataclass(slots=True)
class _Track:
    newest: float
    session: int | None
    steps: deque[float] = field(default_factory=lambda: deque(maxlen=_STEPS_KEPT))
    quiet: bool = False  # a `quiet` event was sent and the sensor has not spoken since
    #: the last RECENT_KEPT steps, holes included: what the sensor habitually does
    recent: deque[float] = field(default_factory=lambda: deque(maxlen=RECENT_KEPT))

    def habitual(self, step: float, factor: float) -> bool:
        """Whether steps as long as ``step`` (from ``step / factor`` on) are at least
        HABIT_SHARE of the sensor's recent ones: its logger's habit, not a loss."""
        if len(self.recent) < RECENT_FROM:
            return False
        floor = step / factor
        return sum(s >= floor for s in self.recent) >= HABIT_SHARE * len(self.recent)


@dataclass(slots=True)
class _Hole:
    sensor: str
    start: float
    end: float
    cadence: float
    after_reconnect: bool
    found: float  # monotonic time it was found

    @property
    def missing(self) -> int:
        return max(1, round((self.end - self.start) / self.cadence) - 1)


class GapWatch:
    """Finds the gaps of one agent's stream (see the module docstring).

    :meth:`observe` runs on the source's deliver thread with every committed batch (cheap:
    a dict lookup per reading); a background thread (:meth:`start`) checks every
    ``check_every_s`` for quiet sensors and sites and publishes what was found. A site key
    ``"<site>\\x1f<sensor>"`` (multi-site store keys) names its site; a bare sensor belongs
    to the first site.
    """

    def __init__(self, sites: Sequence[GapSite], sinks: Sequence[Sink], metrics: Metrics, *,
                 quiet_intervals: float = 2.0, hole_factor: float = 1.5,
                 sessions: Callable[[], int | None] = lambda: None,
                 check_every_s: float = 1.0, settle_s: float = 5.0,
                 wall: Callable[[], float] = time.time,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        if not sites:
            raise ValueError("GapWatch needs at least one site")
        self._sites = {s.name: s for s in sites}
        self._default = sites[0].name
        self._sinks = list(sinks)
        self._metrics = metrics
        self.quiet_intervals = quiet_intervals
        self.hole_factor = hole_factor
        self._sessions = sessions
        self._every = check_every_s
        self._settle = settle_s
        self._wall = wall
        self._mono = monotonic
        self._lock = threading.Lock()
        self._tracks: dict[str, dict[str, _Track]] = {s: {} for s in self._sites}
        # holes found and not yet published, by (site, sensor): they wait settle_s for late
        # readings, since after a reconnect a broker may deliver what it had queued for the
        # old session after what publishers sent since (nothing lost, only reordered)
        self._holes: dict[tuple[str, str], list[_Hole]] = {}
        self._arrived: dict[str, float] = {s: monotonic() for s in self._sites}
        self._site_quiet: set[str] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # the latest events, newest last (tests, debugging); bounded for a long-lived agent
        self.events: deque[dict[str, Any]] = deque(maxlen=100)

    # -- the deliver thread ----------------------------------------------------------------
    def observe(self, batch: Sequence[Reading]) -> None:
        """Readings just committed to the store (after routing: site-qualified keys)."""
        if not batch:
            return
        session = self._sessions()
        now_mono = self._mono()
        horizon = self._wall() + MAX_FUTURE_S  # what the store refuses
        with self._lock:
            for r in batch:
                site, sep, sensor = r.sensor.partition(SITE_SEP)
                if not sep or site not in self._tracks:
                    site, sensor = self._default, r.sensor
                if r.time > horizon:
                    continue  # refused by the store; must not become the sensor's newest
                self._arrived[site] = now_mono
                tracks = self._tracks[site]
                track = tracks.get(sensor)
                if track is None:
                    tracks[sensor] = _Track(r.time, session)
                    continue
                track.quiet = False
                step = r.time - track.newest
                if step <= 0:  # a redelivered duplicate, or a late reading
                    if step < 0:
                        self._fill((site, sensor), r.time)
                    continue
                track.recent.append(step)
                if len(track.steps) >= 2:
                    cadence = min(track.steps)
                    if step > self.hole_factor * cadence:
                        if (step <= HABIT_MAX_CADENCES * cadence
                                and track.habitual(step, self.hole_factor)):
                            track.newest, track.session = r.time, session
                            continue  # its logger's habit; not a cadence either
                        self._holes.setdefault((site, sensor), []).append(_Hole(
                            sensor, track.newest, r.time, cadence,
                            session is not None and session != track.session, now_mono))
                        track.newest, track.session = r.time, session
                        continue  # the hole's step is not a cadence
                track.steps.append(step)
                track.newest, track.session = r.time, session

    def _fill(self, key: tuple[str, str], t: float) -> None:
        """A late reading at ``t``: the pending hole around it splits in two, and each
        part stays a hole only if it is still longer than the sensor's cadence allows."""
        holes = self._holes.get(key)
        if not holes:
            return
        for i, hole in enumerate(holes):
            if hole.start < t < hole.end:
                parts = [_Hole(hole.sensor, a, b, hole.cadence, hole.after_reconnect,
                               hole.found)
                         for a, b in ((hole.start, t), (t, hole.end))
                         if b - a > self.hole_factor * hole.cadence]
                holes[i:i + 1] = parts
                break
        if not holes:
            del self._holes[key]

    # -- the check thread ------------------------------------------------------------------
    def start(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="data-gaps", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=15)
            self._thread = None
        # No last check: the agent stops its services after closing the sinks, so an
        # event found in the last second could not be published anyway.

    def _run(self) -> None:
        while not self._stop.wait(self._every):
            try:
                self.check()
            except Exception:  # the watch must outlive any bug in one check
                log.exception("data gap check failed; trying again in %.0fs", self._every)

    def check(self) -> list[dict[str, Any]]:
        """Turn what was observed into events: log, count, publish. Returns them."""
        events = self._collect()
        for event in events:
            self._emit(event)
        return events

    def _collect(self) -> list[dict[str, Any]]:
        now_wall, now_mono = self._wall(), self._mono()
        events: list[dict[str, Any]] = []
        with self._lock:
            holes: dict[str, list[_Hole]] = {}
            for key in list(self._holes):
                ready = [h for h in self._holes[key] if now_mono - h.found >= self._settle]
                if ready:
                    holes.setdefault(key[0], []).extend(ready)
                    rest = [h for h in self._holes[key] if now_mono - h.found < self._settle]
                    if rest:
                        self._holes[key] = rest
                    else:
                        del self._holes[key]
            for site_name, found in holes.items():
                events.append({
                    "event": "data_gap", "kind": "hole", "site": site_name,
                    "start": _iso(min(h.start for h in found)),
                    "end": _iso(max(h.end for h in found)),
                    "sensors": sorted({h.sensor for h in found}),
                    "missing_readings": sum(h.missing for h in found),
                    "holes": len({(h.start, h.end) for h in found}),
                    "after_reconnect": any(h.after_reconnect for h in found),
                    "detected_at": _iso(now_wall)})
            for site in self._sites.values():
                limit = self.quiet_intervals * site.interval_s
                tracks = self._tracks[site.name]
                silent_s = now_mono - self._arrived[site.name]
                if silent_s > limit:
                    if site.name not in self._site_quiet:
                        self._site_quiet.add(site.name)
                        newest = max((t.newest for t in tracks.values()), default=None)
                        events.append({
                            "event": "data_gap", "kind": "site_quiet", "site": site.name,
                            "start": None if newest is None else _iso(newest), "end": None,
                            "sensors": sorted(tracks), "quiet_for_s": round(silent_s, 1),
                            "detected_at": _iso(now_wall)})
                    continue  # the whole site is silent: no per-sensor events on top
                self._site_quiet.discard(site.name)
                if not tracks:
                    continue
                clock = now_wall if site.clock == "wall" else \
                    max(t.newest for t in tracks.values())
                quiet = [(name, t) for name, t in tracks.items()
                         if not t.quiet and clock - t.newest > limit]
                if quiet:
                    for _, t in quiet:
                        t.quiet = True
                    start = min(t.newest for _, t in quiet)
                    events.append({
                        "event": "data_gap", "kind": "quiet", "site": site.name,
                        "start": _iso(start), "end": None,
                        "sensors": sorted(name for name, _ in quiet),
                        "quiet_for_s": round(clock - start, 1),
                        "detected_at": _iso(now_wall)})
        return events

    def _emit(self, event: dict[str, Any]) -> None:
        self.events.append(event)
        self._metrics.data_gap(event["kind"])
        sensors = event["sensors"]
        named = ", ".join(sensors[:5]) + (f" and {len(sensors) - 5} more"
                                          if len(sensors) > 5 else "")
        if event["kind"] == "hole":
            # holes that settle together are one event: "without readings from start to
            # end" holds for one span, not for many short ones spread over it (a replayed
            # file of one-second readings that skips seconds: 100 spans in 20 minutes)
            span = ("without readings from %s to %s" if event["holes"] == 1
                    else f"{event['holes']} holes between %s and %s")
            log.warning("data gap at site %s: %d sensor(s) (%s) " + span + ", about %d "
                        "readings missing%s", event["site"], len(sensors), named,
                        event["start"], event["end"], event["missing_readings"],
                        " (after a reconnect of the source: the broker did not keep them; "
                        "see docs/mqtt.md \"Broker settings that matter\")"
                        if event["after_reconnect"] else "")
        elif event["kind"] == "quiet":
            log.warning("data gap at site %s: %d sensor(s) (%s) silent since %s, more than "
                        "%g inspection intervals behind the site's clock", event["site"],
                        len(sensors), named, event["start"], self.quiet_intervals)
        else:
            log.warning("data gap at site %s: no reading arrived for %.0fs (more than %g "
                        "inspection intervals); newest reading %s", event["site"],
                        event["quiet_for_s"], self.quiet_intervals, event["start"])
        for sink in self._sinks:
            try:
                sink.send_event(event)
            except SinkError as exc:
                log.warning("sink %s could not publish the data_gap event: %s", sink.name, exc)
            except Exception:  # a broken sink must not stop the watch
                log.exception("sink %s failed on a data_gap event", sink.name)
