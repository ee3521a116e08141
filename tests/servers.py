"""Real mosquitto and influxd servers for tests, on free loopback ports.

Each server is a child process started from a temporary config (``Popen`` -> ``terminate``
-> ``wait``; never daemonised, never killed by name). Variants: plain, username/password,
TLS with a self-signed certificate made here with ``openssl``. See ``shared/infra.md``
for why the configs look the way they do (``user root``, the influxd RPC port).

Used through the fixtures in ``tests/conftest.py``; importable directly for benchmarks.
"""
from __future__ import annotations

import json
import os
import random
import shutil
import socket
import ssl
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Self

import httpx

MOSQUITTO_CANDIDATES = ("/usr/sbin/mosquitto", "/usr/bin/mosquitto")


class ServerUnavailable(RuntimeError):
    """A server binary is missing or did not start; the message says how to fix it."""


_HANDED_OUT: set[int] = set()
# Server ports come from a band below Linux's ephemeral range (32768-60999), so no client
# socket's local port can take one between its choice and the server's bind. Each pytest
# -xdist worker (PYTEST_XDIST_WORKER = gw0, gw1, ...) draws from its own slice of the band,
# so two test processes never choose the same port.
_PORT_BAND = (10_000, 32_000)


def _port_slice() -> range:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    index = int(worker.removeprefix("gw")) if worker.removeprefix("gw").isdigit() else 0
    width = (_PORT_BAND[1] - _PORT_BAND[0]) // max(count, 1)
    low = _PORT_BAND[0] + index * width
    return range(low, low + width)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now, never the same one twice
    in a test process (influxd failed at start-up when its HTTP and RPC ports came out
    equal: "address already in use"), and never one another xdist worker may choose."""
    ports = _port_slice()
    start = random.randrange(len(ports))
    for k in range(len(ports)):
        port = ports[(start + k) % len(ports)]
        if port in _HANDED_OUT:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue  # taken by something else on this machine
        _HANDED_OUT.add(port)
        return port
    raise ServerUnavailable(f"no free TCP port left in {ports.start}-{ports.stop - 1}; "
                            "close the servers earlier tests left running")


def _wait_for_port(port: int, proc: subprocess.Popen, what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ServerUnavailable(f"{what} exited with code {proc.returncode} at start-up")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.01)
    raise ServerUnavailable(f"{what} did not accept connections on port {port} in {timeout}s")


@dataclass(frozen=True)
class SelfSignedCert:
    """A self-signed server certificate for ``localhost`` and ``127.0.0.1``."""

    cert: Path  # also the CA file clients trust
    key: Path


def make_self_signed_cert(directory: Path) -> SelfSignedCert:
    """Create ``server.crt``/``server.key`` in ``directory`` with openssl (about 0.1 s)."""
    directory.mkdir(parents=True, exist_ok=True)
    cert, key = directory / "server.crt", directory / "server.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes",
         "-keyout", str(key), "-out", str(cert), "-days", "2",
         "-subj", "/CN=localhost",
         "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
        check=True, capture_output=True,
    )
    return SelfSignedCert(cert=cert, key=key)


def mosquitto_binary() -> str:
    for candidate in (shutil.which("mosquitto"), *MOSQUITTO_CANDIDATES):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise ServerUnavailable("mosquitto is not installed; run `make system-deps` "
                            "(apt-get install mosquitto mosquitto-clients)")


def influxd_binary() -> str:
    found = shutil.which("influxd")
    if not found:
        raise ServerUnavailable("influxd is not installed; run `make system-deps` "
                                "(apt-get install influxdb influxdb-client)")
    return found


class _ChildServer:
    """Stop/context-manager plumbing shared by the server fixtures: each runs as a child
    process (``Popen`` -> ``terminate`` -> ``wait``; never daemonised) with its log file."""

    _proc: subprocess.Popen | None
    _log: object
    _stop_timeout: ClassVar[float] = 10.0

    def start(self) -> Self:
        raise NotImplementedError

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def stop(self) -> None:
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=self._stop_timeout)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            self._proc = None
        if self._log is not None:
            self._log.close()  # type: ignore[attr-defined]
            self._log = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _dynamic_security(directory: Path, subscribable: tuple[str, ...]) -> list[str]:
    """mosquitto.conf lines loading the dynamic-security plugin with a policy under which
    anonymous clients may subscribe to ``subscribable`` only."""
    plugins = sorted(Path("/usr/lib").glob("*/mosquitto_dynamic_security.so"))
    if not plugins:
        raise ServerUnavailable("mosquitto_dynamic_security.so not found: install the "
                                "Debian package mosquitto (2.0 or later)")
    policy = {
        "defaultACLAccess": {"publishClientSend": True, "publishClientReceive": True,
                             "subscribe": False, "unsubscribe": True},
        "clients": [],
        "groups": [{"groupname": "anonymous", "roles": [{"rolename": "reader"}]}],
        "roles": [{"rolename": "reader", "acls": [
            {"acltype": "subscribePattern", "topic": topic, "priority": 0, "allow": True}
            for topic in subscribable]}],
        "anonymousGroup": "anonymous",
    }
    path = directory / "dynamic-security.json"
    path.write_text(json.dumps(policy))
    return [f"plugin {plugins[0]}", f"plugin_opt_config_file {path}"]


@dataclass
class MosquittoServer(_ChildServer):
    """One mosquitto broker on 127.0.0.1.

    ``username``/``password`` set: anonymous access refused. ``tls`` set: the listener
    speaks TLS only, clients trust ``tls.cert``. ``persistent``: sessions and queued QoS 1
    messages survive :meth:`restart` (saved on SIGTERM), as on a production broker.
    """

    directory: Path
    username: str | None = None
    password: str | None = None
    tls: SelfSignedCert | None = None
    persistent: bool = False
    # anonymous clients may subscribe only to these filters, others are refused (SUBACK
    # 0x80); mosquitto's acl_file cannot refuse a subscription, its dynamic-security plugin can
    subscribable: tuple[str, ...] | None = None
    port: int = field(default_factory=free_port)
    host: str = "127.0.0.1"
    _proc: subprocess.Popen | None = field(default=None, repr=False)
    _log: object = field(default=None, repr=False)

    @property
    def log_path(self) -> Path:
        return self.directory / "mosquitto.log"

    def _write_config(self) -> Path:
        self.directory.mkdir(parents=True, exist_ok=True)
        lines = [
            f"listener {self.port} 127.0.0.1",
            # Root otherwise drops to user mosquitto, which cannot read 0700 temp dirs.
            "user root",
            "log_dest stderr",
            "log_type error",
            "log_type warning",
            "log_type notice",
            # Tests queue tens of thousands of QoS 1 readings for an offline client; the
            # default (1000) would drop them. Production brokers need the same setting.
            "max_queued_messages 0",
        ]
        if self.persistent:
            lines += ["persistence true", f"persistence_location {self.directory}/"]
        else:
            lines.append("persistence false")
        if self.username is not None:
            passwd = self.directory / "passwd"
            subprocess.run(["mosquitto_passwd", "-c", "-b", str(passwd),
                            self.username, self.password or ""],
                           check=True, capture_output=True)
            lines += ["allow_anonymous false", f"password_file {passwd}"]
        else:
            lines.append("allow_anonymous true")
        if self.tls is not None:
            lines += [f"certfile {self.tls.cert}", f"keyfile {self.tls.key}"]
        if self.subscribable is not None:
            lines += _dynamic_security(self.directory, self.subscribable)
        path = self.directory / "mosquitto.conf"
        path.write_text("\n".join(lines) + "\n")
        return path

    def start(self) -> MosquittoServer:
        if self._proc is not None:
            return self
        config = self._write_config()
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        self._proc = subprocess.Popen([mosquitto_binary(), "-c", str(config)],
                                      stdout=self._log, stderr=subprocess.STDOUT)
        try:
            _wait_for_port(self.port, self._proc, f"mosquitto (log: {self.log_path})")
        except ServerUnavailable:
            self.stop()
            raise
        return self

    def restart(self) -> None:
        """Stop and start again on the same port (sessions kept when ``persistent``)."""
        self.stop()
        self.start()

    def client_kwargs(self) -> dict:
        """Keys of an mmdwatch MQTT source/sink config that reach this broker."""
        out: dict = {"host": "localhost" if self.tls else self.host, "port": self.port}
        if self.username is not None:
            out["username"] = self.username
            out["password"] = self.password
        if self.tls is not None:
            out["tls"] = {"ca_certs": str(self.tls.cert)}
        return out


@dataclass
class InfluxServer(_ChildServer):
    """One influxd 1.x on 127.0.0.1 (HTTP port + its own RPC port).

    ``username``/``password`` set: auth enabled, that user created as admin. ``tls`` set:
    HTTPS only, clients trust ``tls.cert``.
    """

    directory: Path
    username: str | None = None
    password: str | None = None
    tls: SelfSignedCert | None = None
    port: int = field(default_factory=free_port)
    rpc_port: int = field(default_factory=free_port)
    host: str = "127.0.0.1"
    _proc: subprocess.Popen | None = field(default=None, repr=False)
    _log: object = field(default=None, repr=False)
    _stop_timeout: ClassVar[float] = 15.0

    @property
    def url(self) -> str:
        scheme = "https" if self.tls else "http"
        host = "localhost" if self.tls else self.host
        return f"{scheme}://{host}:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.directory / "influxd.log"

    def _write_config(self) -> Path:
        self.directory.mkdir(parents=True, exist_ok=True)
        d = self.directory
        http = [
            "[http]",
            f'  bind-address = "127.0.0.1:{self.port}"',
            "  log-enabled = false",
        ]
        if self.username is not None:
            http.append("  auth-enabled = true")
        if self.tls is not None:
            http += ["  https-enabled = true",
                     f'  https-certificate = "{self.tls.cert}"',
                     f'  https-private-key = "{self.tls.key}"']
        text = "\n".join([
            "reporting-disabled = true",
            f'bind-address = "127.0.0.1:{self.rpc_port}"',
            "[meta]", f'  dir = "{d}/meta"',
            "[data]", f'  dir = "{d}/data"', f'  wal-dir = "{d}/wal"',
            "  query-log-enabled = false",
            "[monitor]", "  store-enabled = false",
            *http,
        ]) + "\n"
        path = d / "influxd.conf"
        path.write_text(text)
        return path

    def client(self, *, auth: bool = True) -> httpx.Client:
        """An httpx client for this server (test set-up and checks)."""
        kwargs: dict = {"base_url": self.url, "timeout": 10.0}
        if self.tls is not None:
            kwargs["verify"] = ssl.create_default_context(cafile=str(self.tls.cert))
        if auth and self.username is not None:
            kwargs["auth"] = (self.username, self.password or "")
        return httpx.Client(**kwargs)

    def start(self) -> InfluxServer:
        if self._proc is not None:
            return self
        config = self._write_config()
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        self._proc = subprocess.Popen([influxd_binary(), "-config", str(config)],
                                      stdout=self._log, stderr=subprocess.STDOUT)
        try:
            self._wait_ready()
            if self.username is not None:
                # The first admin may be created without credentials.
                with self.client(auth=False) as c:
                    pw = (self.password or "").replace("'", "\\'")
                    r = c.post("/query", data={"q": f"CREATE USER \"{self.username}\" "
                                                    f"WITH PASSWORD '{pw}' WITH ALL PRIVILEGES"})
                    r.raise_for_status()
        except Exception:
            self.stop()
            raise
        return self

    def _wait_ready(self, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        assert self._proc is not None
        with self.client(auth=False) as c:
            while time.monotonic() < deadline:
                if self._proc.poll() is not None:
                    raise ServerUnavailable(f"influxd exited with code {self._proc.returncode}"
                                            f" at start-up (log: {self.log_path})")
                try:
                    if c.get("/ping").status_code == 204:
                        return
                except httpx.HTTPError:
                    pass
                time.sleep(0.02)
        raise ServerUnavailable(f"influxd did not answer /ping in {timeout}s (log: {self.log_path})")

    def query(self, q: str, db: str | None = None) -> dict:
        """Run InfluxQL, return the decoded JSON (raises on HTTP errors)."""
        params = {"q": q, "epoch": "s"}
        if db:
            params["db"] = db
        with self.client() as c:
            r = c.post("/query", params=params)
            r.raise_for_status()
            return r.json()

    def create_database(self, name: str) -> None:
        self.query(f'CREATE DATABASE "{name}"')

    def write_lines(self, db: str, lines: list[str] | str, precision: str = "s") -> None:
        body = lines if isinstance(lines, str) else "\n".join(lines)
        with self.client() as c:
            r = c.post("/write", params={"db": db, "precision": precision}, content=body)
            if r.status_code != 204:
                raise RuntimeError(f"influx write failed: {r.status_code} {r.text}")


@dataclass
class DaskScheduler(_ChildServer):
    """A real ``dask scheduler`` on 127.0.0.1 (no dashboard), from this venv's python."""

    directory: Path
    port: int = field(default_factory=free_port)
    _proc: subprocess.Popen | None = field(default=None, repr=False)
    _log: object = field(default=None, repr=False)

    @property
    def address(self) -> str:
        return f"tcp://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.directory / "scheduler.log"

    def start(self) -> DaskScheduler:
        import sys

        self.directory.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("wb")
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "dask", "scheduler", "--host", "127.0.0.1",
             "--port", str(self.port), "--no-dashboard", "--no-show"],
            stdout=self._log, stderr=subprocess.STDOUT, cwd=self.directory)
        _wait_for_port(self.port, self._proc, "dask scheduler", timeout=30.0)
        return self


@dataclass
class DaskWorker(_ChildServer):
    """One real ``dask worker`` process (no nanny, one thread) attached to ``scheduler``;
    its working directory is the repository, so it imports ``monitor`` as the tests do.
    ``kill()`` ends it with SIGKILL, as a crashed host would."""

    directory: Path
    scheduler: str
    name: str = "worker"
    _proc: subprocess.Popen | None = field(default=None, repr=False)
    _log: object = field(default=None, repr=False)

    @property
    def log_path(self) -> Path:
        return self.directory / f"{self.name}.log"

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    def start(self) -> DaskWorker:
        import sys

        self.directory.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("wb")
        repo = Path(__file__).resolve().parents[1]
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "dask", "worker", self.scheduler, "--host", "127.0.0.1",
             "--nthreads", "1", "--no-nanny", "--no-dashboard", "--name", self.name,
             "--death-timeout", "60", "--local-directory", str(self.directory)],
            stdout=self._log, stderr=subprocess.STDOUT, cwd=repo)
        return self

    def kill(self) -> None:
        """SIGKILL: no goodbye to the scheduler, tasks in hand lost."""
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()
