"""What a site's decisions remember between inspections: the calibration history of the
detection statistic, the open incidents with their frozen references, and the memory of the
last incident (the quarantine after it, the sensors an ack accepted, the history values
the completed calibration sample left out). In memory; the agent
persists all three in its state database with each result, ``backfill`` keeps them for
one run.

The history holds only inspections judged normal (docs/decision.md, "Calibration
history"): none while an incident is open until the windows are past its change (a
before window that starts after its first firing's after window), none within
``local_level`` (a day) after it resolved, when the sliding reference still holds the
change; and none whose own p-value is below the pre-alert level (``PRE_ALERT`` times the
alert level) while the history is short (``PRE_ALERT_HISTORY`` values): a change that
stays below the alert level must not raise the threshold that would let it fire. A long
history keeps out only the values that fired: one cleaned of the null's own largest
values has too light a tail, and its thresholds fire too often (docs/decision.md,
"Calibration history"). Without a daily profile, a calibrating value (no p-value yet)
beyond the history's fence stays out too (:func:`beyond_fence`), and so do the first
values beyond the fence of the whole calibration sample, once it is complete
(:meth:`SiteTracker._screen`).
"""
from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from connectors.timeutil import iso, parse_time, to_utc
from monitor.decision.incidents import (
    Incident,
    IncidentSettings,
    accept,
    advance,
    attach,
    fired_sensors,
    hold,
    is_new_change,
    mark_accepted,
    opened,
)

if TYPE_CHECKING:
    from engine.live.calibration import TailFit
    from monitor.decision.reference_firing import ReferenceFiring
    from monitor.inspection import Inspector
    from monitor.storage.state import Ack, HistoryValue
    from monitor.windows import ReadWindow, Windows

#: detect_many(times, read_window) -> (level, engine statistic) at each time (None: bad data)
DetectMany = Callable[[list[datetime], "ReadWindow"], "list[HistoryValue | None]"]

#: while the history holds fewer than PRE_ALERT_HISTORY values, a value whose p-value is
#: below PRE_ALERT x the alert level is kept out of it; from then on only a value below
#: the alert level (one that fired). A short history's tail moves with one value, so a
#: change's run-up must not join it; a long one's selection bias is what counts: kept
#: out, the null's own largest values left too light a tail (docs/decision.md)
PRE_ALERT = 5.0
PRE_ALERT_HISTORY = 300
#: data without a daily profile (a testbed's minutes): a calibrating value, which has no
#: p-value yet, is kept out of the history when it lies above the history's third
#: quartile plus CALIBRATING_FENCE interquartile ranges, once the history holds
#: CALIBRATING_FENCE_FROM values. A change during calibration then cannot lift the
#: threshold past itself. Not with a daily profile: there the statistic's spread moves
#: with the hours and weekdays the after window holds, so a fence drawn on the first
#: hours cuts normal values of later ones (docs/decision.md, "Calibrating values
#: screened")
CALIBRATING_FENCE = 3.0
CALIBRATING_FENCE_FROM = 12
#: rows of the last day of the before window the onset scan also looks at
ONSET_LOOKBACK_ROWS = 24

log = logging.getLogger(__name__)


class SiteTracker:
    """History of ``(inspection time, (level, engine statistic))`` from inspections judged
    normal, and the open incidents (oldest first; several when a new change began while
    one was open, docs/decision.md "Several incidents at once")."""

    def __init__(self, inspector: Inspector, incidents: IncidentSettings,
                 history: Iterable[tuple[datetime, HistoryValue]] = (),
                 open_incidents: Iterable[Incident] = ()) -> None:
        self.inspector = inspector
        self.incidents = incidents
        self.history: dict[datetime, HistoryValue] = dict(history)
        self.open_incidents: list[Incident] = list(open_incidents)
        self.quarantine_until: datetime | None = None  # no history before this time
        self.accepted: set[str] = set()  # sensors that may not reopen until a quiet result
        # history values the completed calibration sample left out (:meth:`_screen`)
        self.left_out: set[datetime] = set()
        self.applied_acks: list[int] = []  # the acks the last observed result used up
        # the site's windows at the result being observed (or why there are none), built
        # once for its onset scan, a new frozen reference and each open incident's check
        self._windows_memo: tuple[datetime, Any, Exception | None] | None = None

    @property
    def incident(self) -> Incident | None:
        """The newest open incident (None when none is open)."""
        return self.open_incidents[-1] if self.open_incidents else None

    def restore_incidents(self, saved: dict[str, Any] | list[dict[str, Any]] | None) -> None:
        """The open incidents as the state database keeps them (:meth:`saved_incidents`)."""
        if saved is None:
            self.open_incidents = []
        else:
            items = saved if isinstance(saved, list) else [saved]
            self.open_incidents = [Incident.from_dict(item) for item in items]

    def saved_incidents(self) -> dict[str, Any] | list[dict[str, Any]] | None:
        """The open incidents for the state database: None, one incident's dict (as before
        several could be open, so older readers still read it), or a list, oldest first."""
        if not self.open_incidents:
            return None
        if len(self.open_incidents) == 1:
            return self.open_incidents[0].to_state()
        return [incident.to_state() for incident in self.open_incidents]

    def memory(self) -> dict[str, Any]:
        """What the decision holds besides the history and the open incident, as JSON: the
        end of the quarantine after the last incident and the sensors its ack accepted.
        Saved with each result, so a restart neither lets the change just accepted reopen
        an incident nor lets the sliding window's change into the history."""
        return {"quarantine_until": None if self.quarantine_until is None
                else iso(self.quarantine_until),
                "accepted": sorted(self.accepted),
                "left_out": [iso(th) for th in sorted(self.left_out)]}

    def restore(self, memory: dict[str, Any] | None) -> None:
        """Take back what :meth:`memory` saved (None or ``{}``: nothing to remember)."""
        memory = memory or {}
        until = memory.get("quarantine_until")
        self.quarantine_until = None if until is None else parse_time(until)
        self.accepted = set(memory.get("accepted") or ())
        self.left_out = {parse_time(th) for th in memory.get("left_out") or ()}

    def history_at(self, t: datetime) -> np.ndarray:
        """Values whose after window ended by ``t`` and that lie within the history span:
        (n, 3), the level statistic, the engine statistic (NaN where not computed) and the
        inspection time of each (seconds since the epoch: which hours of the week the
        history has seen)."""
        times = self._history_times(t)
        values = [self.history[th] for th in times]
        # column by column: a backfill asks at every inspection, over a month of values
        out = np.empty((len(times), 3), dtype=float)
        out[:, 0] = [level for level, _ in values]
        out[:, 1] = [np.nan if engine is None else engine for _, engine in values]
        out[:, 2] = [th.timestamp() for th in times]
        return out

    def _history_times(self, t: datetime) -> list[datetime]:
        last = t - self.inspector.spec.after  # the after window ended by t
        first = t - self.inspector.decision.calibration.history
        return sorted(th for th in self.history
                      if first <= th <= last and th not in self.left_out)

    def observe(self, result: dict[str, Any], read_window: ReadWindow | None = None,
                acks: Sequence[Ack] = (), windows: Windows | None = None
                ) -> tuple[HistoryValue | None, str | None]:
        """Record one result (in time order): keep its statistic if it is judged normal,
        apply an operator's ack of the open incident, advance the incident (opening it
        with its onset and frozen reference, checking it against that reference while it
        is open) and attach it to ``result``. ``read_window``: the site's windows, for
        the onset, the reference and the check (None: the quiet-for-a-day rule alone).
        ``windows``: the windows the inspection at this time was decided on, used as they
        are instead of reading and binning the same windows again (a reference check at
        each result of an open incident otherwise rebuilds them: 45 ms an inspection on
        d1, more than its decision). Returns (value kept, incident event)."""
        t = parse_time(result["inspection_time"])
        status = result.get("status")
        detection = result.get("detection") or {}
        self._report_history(result, t)
        was_open = bool(self.open_incidents)
        if windows is not None:
            self._windows_memo = (t, windows, None)
        try:
            event, about = self._step(result, t, status, read_window, acks)
        finally:
            self._windows_memo = None  # the windows belong to this result alone
        value = detection.get("value")
        kept: HistoryValue | None = None
        if (value is not None and status in ("ok", "calibrating") and event is None
                and (not was_open or self._settled(t))
                and self._normal(detection, t, float(value), status == "calibrating")):
            engine_value = (detection.get("engine") or {}).get("value")
            kept = (float(value), None if engine_value is None else float(engine_value))
            self.history[t] = kept
            self._trim(t)
            self._screen(t)
        attach(result, event, about)
        if len(self.open_incidents) > 1:
            result["open_incidents"] = [i.to_dict() for i in self.open_incidents]
        return kept, event

    def _screen(self, t: datetime) -> None:
        """Without a daily profile: when the value just kept at ``t`` completes the
        calibration sample (the ``min_count`` values the first alert waits for), leave
        out those of its values above the fence drawn on them all (:func:`fence`).

        Why: :func:`beyond_fence` screens a calibrating value from the
        ``CALIBRATING_FENCE_FROM``-th on, so the first values are kept unscreened. A
        recording that begins inside an excursion (a piece of SKAB's normal recording:
        five of its first eight values 55-126, against 1-12 later) kept them, and they
        held the thresholds at 1,000-10,000 for the rest of the file. Drawn on the whole
        sample, the fence passes over a few such values."""
        if self.inspector.decision.detector.period != "none":
            return
        span = self.inspector.decision.calibration.history
        times = sorted(th for th in self.history if th >= t - span and th not in self.left_out)
        if len(times) != self.inspector.decision.calibration.min_count:
            return
        values = np.array([self.history[th][0] for th in times], dtype=float)
        limit = fence(values)
        out = {th for th, v in zip(times, values, strict=True) if v > limit}
        if out:
            log.info("calibration: %d of its first %d values left out, above %.4g (the third "
                     "quartile plus %g interquartile ranges)", len(out), len(times), limit,
                     CALIBRATING_FENCE)
            self.left_out |= out

    def _report_history(self, result: dict[str, Any], t: datetime) -> None:
        """The history's size and span in the result's detection block."""
        block = result.get("detection")
        if not isinstance(block, dict):
            return
        times = self._history_times(t)
        block["history_span"] = [iso(times[0]), iso(times[-1])] if times else None

    def _settled(self, t: datetime) -> bool:
        """Whether every open incident's change lies wholly before the windows at ``t``:
        its first firing's after window, where the change showed, ended before this
        inspection's before window starts. Such windows compare the new state with
        itself, so a quiet value there is a value of the statistic's null, and it may
        join the history: without it a long incident froze the calibration at the values
        from before it (issue 28: 116 values for nine days)."""
        spec = self.inspector.spec
        return all(parse_time(incident.started) + spec.after + spec.before <= t
                   for incident in self.open_incidents)

    def _normal(self, detection: dict[str, Any], t: datetime, value: float,
                calibrating: bool) -> bool:
        """Whether a quiet or calibrating ``value`` at ``t`` may join the history: not in
        the quarantine after an incident, not below the pre-alert level while the history
        is short (only below the level later), and, calibrating without a daily profile,
        not beyond the history's fence (:func:`beyond_fence`)."""
        if self.quarantine_until is not None and t < self.quarantine_until:
            return False
        if calibrating and self.inspector.decision.detector.period == "none":
            return not beyond_fence(value, self.history_at(t)[:, 0])
        p, level = detection.get("p_value"), detection.get("level")
        short = int(detection.get("history_n") or 0) < PRE_ALERT_HISTORY
        return p is None or level is None or \
            float(p) >= (PRE_ALERT if short else 1.0) * float(level)

    def _step(self, result: dict[str, Any], t: datetime, status: Any,
              read_window: ReadWindow | None, acks: Sequence[Ack]
              ) -> tuple[str | None, Incident | None]:
        """The incidents' moves at ``result``: (event, the incident the event is about, or
        the newest open one when there is no event). A result carries at most one event:
        an ack first, then the firing's (opened or updated), then one resolution; a
        second resolution due at the same result waits for the next."""
        stamp = result["inspection_time"]
        accepted = self._apply_acks(stamp, t, acks)
        if accepted is not None:
            return "resolved", accepted
        event: str | None = None
        about: Incident | None = None
        owner: str | None = None
        by_reference = None
        if status == "ok" and self.open_incidents and read_window is not None:
            by_reference = self._fire_on_references(result, t, read_window)
            if by_reference is not None:
                status = "firing"
        if status == "firing":
            fired = fired_sensors(result)
            if not self.open_incidents:
                if self.accepted and set(fired) <= self.accepted:
                    mark_accepted(result)  # the accepted change, still in the sliding window
                    return None, None
                new = opened(result, **self._freeze(result, t, fired, read_window))
                self.open_incidents.append(new)
                return "opened", new
            current = self._owner(fired)
            if current is None:
                onset = self._freeze(result, t, fired, read_window, reference=False)
                nearest = self._naming(fired) or self.open_incidents[-1]
                if is_new_change(nearest, fired, onset.get("onset_low"), self._horizon()):
                    extra = self._freeze(result, t, fired, read_window)
                    current = opened(result, **extra)
                    self.open_incidents.append(current)
                    log.info("incident %s: a new change on %s (onset %s) while %s is open",
                             current.id, ", ".join(fired), extra.get("onset"), nearest.id)
                    event, about = "opened", current
                else:
                    current = nearest
            if event is None:
                if (by_reference is not None and by_reference.returned
                        and by_reference.incident_id == current.id):
                    # the repair the incident waits for: its resolution starts here, as at
                    # a quiet result back at the reference, instead of waiting
                    # resolve_after past the return's firing results
                    back, current = self._back(current, t, read_window)
                    nxt, event, about = advance(current, {**result, "status": "ok"},
                                                self.incidents, back)
                else:
                    nxt, event, about = advance(current, result, self.incidents)
                self._put(current.id, nxt)
                if nxt is None and about is not None:
                    self._closed(about, t)
            owner = current.id
        elif self.accepted and status == "ok":
            self.accepted = set()
        # every other open incident on its own sensors: a firing for another incident is a
        # quiet result for this one
        calm = {**result, "status": "ok"} if status == "firing" else result
        for incident in list(self.open_incidents):
            if incident.id == owner:
                continue
            back = None
            if calm.get("status") == "ok" and incident.reference:
                back, incident = self._back(incident, t, read_window)
            if event is not None:
                self._put(incident.id, hold(incident, stamp, back))
                continue
            nxt, ev, ab = advance(incident, calm, self.incidents, back)
            self._put(incident.id, nxt)
            if nxt is None and ab is not None:
                self._closed(ab, t)
            if ev is not None:
                event, about = ev, ab
        if about is None:
            about = self.incident
        return event, about

    def _apply_acks(self, stamp: str, t: datetime, acks: Sequence[Ack]) -> Incident | None:
        """Resolve the first open incident an ack names (``reason: accepted``) and return
        it. Acks naming no open incident (a duplicate, a late one) are used up too; acks
        of a second open incident wait for the next result (one event per result)."""
        self.applied_acks = []
        closed: Incident | None = None
        for ack in acks:
            target = next((i for i in self.open_incidents if i.id == ack.incident_id), None)
            if target is not None and closed is not None:
                continue
            self.applied_acks.append(ack.id)
            if target is None:
                continue
            closed = accept(target, stamp, ack.by)
            log.info("incident %s accepted by %s (%s) at %s", closed.id, ack.by, ack.via,
                     stamp)
            self._put(target.id, None)
            self._closed(closed, t)
        return closed

    def _fire_on_references(self, result: dict[str, Any], t: datetime,
                            read_window: ReadWindow) -> ReferenceFiring | None:
        """What an open incident's frozen reference sees at the ``ok`` ``result``
        (:mod:`monitor.decision.reference_firing`; None: nothing); where it sees a
        change, the result becomes ``firing``, named by the reference, at the level
        part's share of its own calibration (:meth:`_reference_fits`)."""
        from engine.live.calibration import TailFit
        from engine.live.reference import Reference
        from engine.live.residual_shift import DetectionError
        from monitor.decision.reference_firing import mark_firing, reference_firing
        from monitor.windows import WindowError

        detection = result.get("detection") or {}
        threshold, level = detection.get("threshold"), detection.get("level")
        references = [(i.id, Reference.from_dict(i.reference))
                      for i in self.open_incidents if i.reference]
        if threshold is None or level is None or not references:
            return None
        engine = detection.get("engine") or {}
        # the level part's share: all of the level while the engine part cannot vote
        weight = float(engine.get("weight") or 0.0) if engine.get("p_value") is not None \
            else 0.0
        changes = self._changes()
        fits = self._reference_fits(t, changes)
        limits: dict[str, float] = {}
        for incident_id, fit in fits.items():
            limit = math.inf if fit is None else fit.threshold(float(level) * (1.0 - weight))
            if not math.isfinite(limit):  # its history cannot reach the level part's share
                fits[incident_id], limit = None, float(threshold)
            limits[incident_id] = limit
        try:
            w = self._windows_at(t, read_window)
            n_b, n_a = len(w.before_raw), len(w.after_raw)
            local = max(1, min(self.inspector.decision.detector.local_level_rows,
                               n_b - n_a - 1))
            firing = reference_firing(references, w.before_raw.iloc[-local:], w.after_raw,
                                      limits, before=w.before_raw,
                                      changes=changes,
                                      own={i.id: i.fired for i in self.open_incidents})
        except (WindowError, DetectionError) as exc:
            log.warning("no check against the open incidents' references at %s (%s)",
                        iso(t), exc)
            return None
        if firing is None:
            return None
        fit = fits.get(firing.incident_id) or TailFit.of(self.history_at(t)[:, 0])
        p_level = fit.pvalue(firing.value)
        mark_firing(result, firing, min(1.0, p_level / (1.0 - weight)), p_level)
        log.info("incident %s: its reference sees %s at %s on %s", firing.incident_id,
                 "a return" if firing.returned else "a new change", iso(t),
                 ", ".join(firing.z))
        return firing

    def _reference_fits(self, t: datetime,
                        changes: dict[str, tuple[pd.Timestamp, pd.Timestamp]] | None = None
                        ) -> dict[str, TailFit | None]:
        """Each open incident's calibration at ``t`` for its reference: the level history
        without the values whose after window held the incident's change (inspections
        after its reference's end, up to its first firing; ``changes``: :meth:`_changes`,
        where the caller has them). None where fewer values than
        calibration waits for are left: the level part's threshold then stands, as where
        the values left cannot reach the level part's share of the level.

        Why: as a change grows towards the alert level, the results on its way are quiet,
        and their values join the history. On SKAB's one-second data a block of 8
        standard deviations on the flow gave four such values (24-168) before its first
        firing, and they held the level part's threshold at 1,341 against 225 before,
        above the block's return (``z**2`` 373-398 against the reference, which its own
        threshold, 243, sees)."""
        from engine.live.calibration import TailFit

        after = self.inspector.spec.after
        times = self._history_times(t)
        fits: dict[str, TailFit | None] = {}
        for incident_id, (since, end) in (self._changes() if changes is None
                                          else changes).items():
            # after windows that ended past the change's start and began by the first
            # firing inspection (whose after window ends at ``end``)
            values = np.array([self.history[th][0] for th in times
                               if not since - after < th <= end - after], dtype=float)
            enough = values.size >= self.inspector.decision.calibration.min_count
            fits[incident_id] = TailFit.of(values) if enough else None
        return fits

    def _changes(self) -> dict[str, tuple[pd.Timestamp, pd.Timestamp]]:
        """Each open incident's change: from its reference's end (or its onset's earliest
        estimate) to its first firing inspection's after window's end."""
        after = self.inspector.spec.after
        spans: dict[str, tuple[pd.Timestamp, pd.Timestamp]] = {}
        for i in self.open_incidents:
            since = i.baseline or i.onset_low or i.onset or i.started
            spans[i.id] = (pd.Timestamp(since), pd.Timestamp(i.started) + after)
        return spans

    def _horizon(self) -> timedelta:
        """How long after an incident's onset the sliding statistic still holds its change:
        an after window plus the local level it is compared with (40 h on the live
        profile). A change on other sensors that begins within it is taken for a
        consequence of the first (on d2, n95 shifted for a day 19 h after the leak)."""
        spec = self.inspector.spec
        return spec.after + spec.resample * self.inspector.decision.detector.local_level_rows

    def _owner(self, fired: list[str]) -> Incident | None:
        """The newest open incident that one of the ``fired`` sensors fired for before."""
        for incident in reversed(self.open_incidents):
            if set(fired) & set(incident.fired):
                return incident
        return None

    def _naming(self, fired: list[str]) -> Incident | None:
        """The newest open incident that names one of the ``fired`` sensors (among the
        first ranked at a firing, without having fired on its own)."""
        for incident in reversed(self.open_incidents):
            if set(fired) & set(incident.sensors):
                return incident
        return None

    def _put(self, incident_id: str, incident: Incident | None) -> None:
        """Replace the open incident ``incident_id`` (None: remove it, it resolved)."""
        at = next(i for i, item in enumerate(self.open_incidents) if item.id == incident_id)
        if incident is None:
            del self.open_incidents[at]
        else:
            self.open_incidents[at] = incident

    def _closed(self, incident: Incident, t: datetime) -> None:
        """After an incident ends: the sliding reference still holds the change for a
        day; after an ack, the same sensors may not reopen until the statistic is quiet."""
        self.quarantine_until = max(
            self.quarantine_until or t,
            t + self.inspector.spec.resample * max(
                1, self.inspector.decision.detector.local_level_rows))
        if incident.reason == "accepted":
            self.accepted |= set(incident.sensors) | set(incident.fired)

    def _freeze(self, result: dict[str, Any], t: datetime, fired: list[str],
                read_window: ReadWindow | None, reference: bool = True) -> dict[str, Any]:
        """The onset estimate and the frozen reference of a new incident (empty when the
        windows cannot give them: the incident then resolves by the quiet rule).
        ``reference=False``: the onset alone (is a firing a new change?)."""
        if read_window is None:
            return {}
        from engine.live.onset import estimate_onset
        from engine.live.reference import Reference
        from engine.live.residual_shift import DetectionError, detect, profile_deviation
        from monitor.windows import WindowError

        inspector = self.inspector
        try:
            w = self._windows_at(t, read_window)
            det = detect(w.before_raw, w.after_raw, inspector.decision.detector)
        except (WindowError, DetectionError) as exc:
            log.warning("incident at %s: no onset or reference (%s)", iso(t), exc)
            return {}
        cols = [c for c in fired if c in det.z.index] or [str(det.z.abs().idxmax())]
        residuals = pd.concat([det.before_residuals.iloc[-ONSET_LOOKBACK_ROWS:],
                               det.after_residuals])[cols]
        raw = pd.concat([w.before_raw, w.after_raw])
        onset = estimate_onset(residuals.to_numpy(), np.sign(det.z[cols].to_numpy()),
                               raw=raw.loc[residuals.index, cols].to_numpy(),
                               profile=profile_deviation(w.before_raw[cols], residuals.index,
                                                         inspector.decision.detector.period))
        times = residuals.index
        extra: dict[str, Any] = {
            "onset": iso(times[onset.index].to_pydatetime()),
            "onset_low": iso(times[onset.low].to_pydatetime()),
            "onset_high": iso(times[onset.high].to_pydatetime())}
        if not reference:
            return extra
        normal = raw[raw.index < times[onset.low]].iloc[-len(w.before_raw):]
        try:
            ref = Reference.fit(normal, len(w.after_raw), inspector.decision.detector)
        except DetectionError as exc:
            log.warning("incident at %s: no frozen reference (%s)", iso(t), exc)
            return extra
        extra["baseline"] = iso(times[onset.low].to_pydatetime())
        extra["reference"] = ref.to_dict()
        log.info("incident at %s: onset %s (%s .. %s, %s scan), reference frozen at %s",
                 iso(t), extra["onset"], extra["onset_low"], extra["onset_high"], onset.kind,
                 extra["baseline"])
        return extra

    def _back(self, incident: Incident, t: datetime, read_window: ReadWindow | None
              ) -> tuple[bool | None, Incident]:
        """Whether ``incident``'s sensors are back at its frozen reference at ``t`` (None
        when the window cannot tell), and the incident with that check recorded."""
        from engine.live.reference import Reference
        from engine.live.residual_shift import DetectionError
        from monitor.windows import WindowError

        assert incident.reference is not None
        if read_window is None:
            return None, incident
        try:
            w = self._windows_at(t, read_window)
            check = Reference.from_dict(incident.reference).compare(w.after_raw)
        except (WindowError, DetectionError) as exc:
            log.warning("incident %s: no check against its reference at %s (%s)",
                        incident.id, iso(t), exc)
            return None, incident
        checked = replace(incident, baseline_check=check.by_sensor(incident.sensors))
        self._put(incident.id, checked)
        return not check.changed(incident.fired or incident.sensors), checked

    def _windows_at(self, t: datetime, read_window: ReadWindow) -> Any:
        """The site's windows at ``t``, built once per observed result; raises the same
        :class:`~monitor.windows.WindowError` each time when they cannot be built."""
        from monitor.windows import WindowError

        if self._windows_memo is None or self._windows_memo[0] != t:
            try:
                self._windows_memo = (t, self.inspector._windows(t, read_window), None)
            except WindowError as exc:
                self._windows_memo = (t, None, exc)
        _, windows, error = self._windows_memo
        if error is not None:
            raise error
        return windows

    def _trim(self, t: datetime) -> None:
        horizon = t - self.inspector.decision.calibration.history - timedelta(days=1)
        for th in [th for th in self.history if th < horizon]:
            del self.history[th]
        self.left_out = {th for th in self.left_out if th >= horizon}

    def backfill(self, times: list[datetime], read_window: ReadWindow,
                 detect_many: DetectMany | None = None) -> int:
        """Compute the statistics at past ``times`` from the source (one read) and add the
        values to the history. ``detect_many(times, read)``: the statistics of those times
        (default: ``inspector.detect_many``, whose engine fits are one batched program; a
        backfill passes one that maps them over its executor). Returns how many could be
        computed."""
        if not times:
            return 0
        spec = self.inspector.spec
        frame = read_window(pd.Timestamp(min(times) - spec.before), spec.read_end(max(times)))
        read = cached_reader(frame)
        if frame.empty:
            return 0
        # a before window that starts ahead of the data is padded, not measured: skip it
        first = pd.Timestamp(frame["time"].min())
        first = to_utc(first)
        times = [th for th in times if pd.Timestamp(th - spec.before) >= first]
        values = (detect_many(times, read) if detect_many is not None
                  else self.inspector.detect_many(times, read))
        added = 0
        for th, value in zip(times, values, strict=True):
            if value is not None:
                self.history[th] = value
                added += 1
        log.info("calibration history of %s: %d of %d past inspection times computed",
                 self.inspector.site, added, len(times))
        return added


def beyond_fence(value: float, history: np.ndarray) -> bool:
    """Whether ``value`` lies above ``history``'s third quartile plus
    :data:`CALIBRATING_FENCE` interquartile ranges ((n,) level statistics; NaN left
    out); never with fewer than :data:`CALIBRATING_FENCE_FROM` values."""
    values = history[np.isfinite(history)]
    if values.size < CALIBRATING_FENCE_FROM:
        return False
    return bool(value > fence(values))


def fence(values: np.ndarray) -> float:
    """The third quartile of ``values`` (n,) plus :data:`CALIBRATING_FENCE`
    interquartile ranges (NaN left out)."""
    q1, q3 = np.quantile(values[np.isfinite(values)], [0.25, 0.75])
    return float(q3 + CALIBRATING_FENCE * (q3 - q1))


def cached_reader(frame: pd.DataFrame) -> ReadWindow:
    """read_window(start, end) over one frame already read (sorted once, sliced by time)."""
    if frame.empty:
        return lambda start, end: frame
    frame = frame.sort_values("time", kind="stable").reset_index(drop=True)
    times = frame["time"]
    if times.dt.tz is None:
        times = times.dt.tz_localize("UTC")
        frame = frame.assign(time=times)
    stamps = times.dt.tz_convert("UTC").dt.tz_localize(None).to_numpy()  # datetime64, UTC

    def read(start: pd.Timestamp, end: pd.Timestamp) -> pd.DataFrame:
        lo = np.searchsorted(stamps, pd.Timestamp(start).to_datetime64(), side="left")
        hi = np.searchsorted(stamps, pd.Timestamp(end).to_datetime64(), side="left")
        return frame.iloc[lo:hi]

    return read


def history_times(inspector: Inspector, t: datetime) -> list[datetime]:
    """Past inspection times, one ``inspection_interval`` apart and aligned on ``t``, whose
    statistic calibrates the one at ``t`` (after window ended by ``t``, within the span)."""
    cal = inspector.decision.calibration
    after = inspector.spec.after
    step = cal.inspection_interval
    first = t - cal.history
    out: list[datetime] = []
    th = t - step
    while th >= first:
        if th + after <= t:
            out.append(th)
        th -= step
    return out[::-1]
