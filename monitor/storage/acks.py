"""Operators' acks: checked against the open incidents and stored in the agent's state.

One path for both ways in (``mmdwatch ack``, the MQTT topic ``<prefix>/<site>/ack``): an
ack names an incident that is open in ``state_dir/state.sqlite``, is stored in the table
``acks`` (:meth:`~monitor.storage.state.AgentState.add_ack`) and logged; the running agent
applies it at the site's next inspection, resolving the incident with ``reason:
accepted``.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from monitor.storage.state import AgentState

log = logging.getLogger(__name__)


class AckRejected(Exception):
    """An ack that cannot be stored (no such open incident); the message names the fix."""


class NoAgentState(AckRejected):
    """The config's ``state_dir`` holds no agent state: that agent has not run there."""


def _where(site: str | None) -> str:
    return "this agent" if site is None else f"site {site!r}"


def find_open_incident(state: AgentState, incident_id: str, site: str | None = None,
                       *, any_site: bool = False) -> tuple[str | None, dict[str, Any]]:
    """``(site, incident)`` of the open incident ``incident_id``: of ``site`` (None: a
    single-site agent's), or, with ``any_site``, of whichever site holds it. Raises
    :class:`AckRejected` listing the open incidents when there is none by that id."""
    incidents = state.open_incidents()
    for where, incident in incidents:
        if incident.get("id") == incident_id and (any_site or where == (site or None)):
            return where, incident
    place = "" if any_site else f" at {_where(site or None)}"
    scope = incidents if any_site else [(w, i) for w, i in incidents if w == (site or None)]
    if not scope:
        raise AckRejected(f"no open incident {incident_id!r}{place}: no incident is open "
                          "(it may have resolved already); nothing to acknowledge")
    listed = ", ".join(str(i.get("id")) + ("" if w is None else f" (site {w})")
                       for w, i in scope)
    raise AckRejected(f"no open incident {incident_id!r}{place}; open: {listed}; "
                      "acknowledge one of these ids")


def record_ack(state: AgentState, incident_id: str, *, by: str, via: str,
               site: str | None = None, note: str = "", any_site: bool = False
               ) -> tuple[int, str | None]:
    """Check that ``incident_id`` is open (of ``site``, or of any site with ``any_site``),
    store the ack and log it. Returns ``(ack id, the incident's site)``; raises
    :class:`AckRejected` when no such incident is open."""
    where, _ = find_open_incident(state, incident_id, site, any_site=any_site)
    ack_id = state.add_ack(incident_id, by=by, via=via, site=where, note=note)
    log.info("ack %d stored: incident %s%s accepted by %s via %s%s; the agent resolves "
                "it at its next inspection (reason: accepted)", ack_id, incident_id,
                "" if where is None else f" (site {where})", by, via,
                f" (note: {note})" if note else "")
    return ack_id, where


def acknowledge(config_path: Path, incident_id: str, *, by: str, note: str = "",
                via: str = "cli") -> str:
    """``mmdwatch ack``: store an operator's ack of ``incident_id`` in the state of the agent
    that ``config_path`` configures, and return the reply for the operator. Raises
    :class:`NoAgentState` when that agent has not run (no state is ever created here) and
    :class:`AckRejected` when no such incident is open. The CLI and the demo both call it."""
    from monitor.config import load_config

    config = load_config(config_path)
    path = Path(config.state_dir) / "state.sqlite"
    if not path.exists():  # never create an empty state: the agent has not run here
        raise NoAgentState(f"no agent state at {path}: the agent of {config_path} has not "
                           "run there yet, so no incident is open; check --config (its "
                           "state_dir)")
    state = AgentState(path)
    try:
        ack_id, site = record_ack(state, incident_id, by=by, via=via, note=note,
                                  any_site=True)
    finally:
        state.close()
    where = "" if site is None else f" (site {site})"
    return (f"ack {ack_id}: incident {incident_id}{where} accepted by {by}; the running "
            "agent resolves it at its next inspection (reason: accepted)")
