"""Shared pytest fixtures: real mosquitto and influxd servers on free loopback ports.

Every server fixture starts its own process from a temporary config and stops it after the
test (see tests/servers.py). Variants:

* ``mosquitto``            anonymous, no persistence
* ``mosquitto_persistent`` anonymous, sessions/queues survive ``.restart()``
* ``mosquitto_auth``       username/password (``alice`` / ``s3cret``)
* ``mosquitto_tls``        username/password + TLS with a self-signed cert (``.tls.cert``)
* ``influxd``              no auth, HTTP
* ``influxd_secure``       auth (``admin`` / ``adm1n-pw``) + HTTPS with a self-signed cert

Tests using them should carry ``pytest.mark.integration``.
"""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.servers import (
    InfluxServer,
    MosquittoServer,
    SelfSignedCert,
    ServerUnavailable,
    make_self_signed_cert,
)

MQTT_USER, MQTT_PASSWORD = "alice", "s3cret"
INFLUX_USER, INFLUX_PASSWORD = "admin", "adm1n-pw"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The files with end-to-end (``integration``) tests first, then those with ``slow``
    ones, then the rest, each in collection order.

    ``make test`` hands whole files to two processes in this order
    (``--no-loadscope-reorder``); xdist's own order, most tests first, left the longest
    files (one agent replay each, 30-80 s) to the end, where one process ran them alone.
    """
    rank: dict[Path, int] = {}  # a file's most telling mark: 0 integration, 1 slow, 2 none
    first: dict[Path, int] = {}  # where a file's first test was collected
    for i, item in enumerate(items):
        marks = {m.name for m in item.iter_markers()}
        here = 0 if "integration" in marks else 1 if "slow" in marks else 2
        rank[item.path] = min(rank.get(item.path, 2), here)
        first.setdefault(item.path, i)
    items.sort(key=lambda item: (rank[item.path], first[item.path]))  # stable: in-file order


def _started(server):  # type: ignore[no-untyped-def]
    try:
        return server.start()
    except ServerUnavailable as exc:
        pytest.fail(str(exc))


@pytest.fixture(scope="session")
def tls_cert(tmp_path_factory: pytest.TempPathFactory) -> SelfSignedCert:
    """A self-signed certificate for localhost/127.0.0.1 (also the CA file to trust)."""
    return make_self_signed_cert(tmp_path_factory.mktemp("tls"))


@pytest.fixture
def mosquitto(tmp_path: Path) -> Iterator[MosquittoServer]:
    server = _started(MosquittoServer(tmp_path / "mosquitto"))
    yield server
    server.stop()


@pytest.fixture
def mosquitto_persistent(tmp_path: Path) -> Iterator[MosquittoServer]:
    server = _started(MosquittoServer(tmp_path / "mosquitto", persistent=True))
    yield server
    server.stop()


@pytest.fixture
def mosquitto_auth(tmp_path: Path) -> Iterator[MosquittoServer]:
    server = _started(MosquittoServer(tmp_path / "mosquitto", username=MQTT_USER,
                                      password=MQTT_PASSWORD))
    yield server
    server.stop()


@pytest.fixture
def mosquitto_tls(tmp_path: Path, tls_cert: SelfSignedCert) -> Iterator[MosquittoServer]:
    server = _started(MosquittoServer(tmp_path / "mosquitto", username=MQTT_USER,
                                      password=MQTT_PASSWORD, tls=tls_cert))
    yield server
    server.stop()


@pytest.fixture
def influxd(tmp_path: Path) -> Iterator[InfluxServer]:
    server = _started(InfluxServer(tmp_path / "influxd"))
    yield server
    server.stop()


@pytest.fixture
def influxd_secure(tmp_path: Path, tls_cert: SelfSignedCert) -> Iterator[InfluxServer]:
    server = _started(InfluxServer(tmp_path / "influxd", username=INFLUX_USER,
                                   password=INFLUX_PASSWORD, tls=tls_cert))
    yield server
    server.stop()


@pytest.fixture(autouse=True)
def _results_follow_the_contract(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every result made in-process is validated against docs/result.schema.json."""
    from monitor.inspection import Inspector
    from monitor.storage.state import AgentState
    from tests.result_contract import check

    run, commit = Inspector.run, AgentState.commit_inspection

    def checked_run(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        outcome = run(self, *args, **kwargs)
        check(outcome.result)
        return outcome

    def checked_commit(self, t, result, *args, **kwargs):  # type: ignore[no-untyped-def]
        if "schema" in result:  # hand-made stand-ins in state/outbox tests carry none
            check(result)
        return commit(self, t, result, *args, **kwargs)

    monkeypatch.setattr(Inspector, "run", checked_run)
    monkeypatch.setattr(AgentState, "commit_inspection", checked_commit)
