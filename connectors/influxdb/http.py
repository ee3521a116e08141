"""The InfluxDB v1 HTTP API (``/query``, ``/write``) through httpx, with clear errors.

InfluxDB 1.x serves this API natively; 2.x and 3.x serve it as compatibility endpoints
(token in ``Authorization: Token ...``, database mapped to a bucket by DBRP).
"""
from __future__ import annotations

import json
import logging
import ssl
from pathlib import Path
from typing import Any, Literal

import httpx
from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator

from connectors.base import ConnectorError

log = logging.getLogger(__name__)


class InfluxError(ConnectorError):
    """InfluxDB could not do what was asked; the message names the problem and the fix."""


class InfluxUnreachable(InfluxError):
    """No HTTP answer (connection refused, DNS, TLS, timeout)."""


class InfluxServerError(InfluxError):
    """The server answered 5xx: it is failing, overloaded, or shutting down (influxd
    answers ``500 write failed`` to writes that arrive while it stops)."""


class InfluxAuthError(InfluxError):
    """Credentials missing or refused."""


class InfluxDatabaseMissing(InfluxError):
    """The configured database does not exist."""


class InfluxQueryError(InfluxError):
    """The server rejected a query or a write as malformed."""


class InfluxTlsConfig(BaseModel):
    """HTTPS settings: ``ca_certs`` = CA file to trust (null: system CAs)."""

    model_config = ConfigDict(extra="forbid")

    ca_certs: Path | None = None
    verify: bool = True  # false only for experiments: anyone could impersonate the server


class InfluxConnectionConfig(BaseModel):
    """Keys shared by the InfluxDB source and sink."""

    model_config = ConfigDict(extra="forbid")

    url: str = "http://127.0.0.1:8086"
    # v1 API: the database (on 2.x/3.x, a database name mapped to a bucket by DBRP)
    database: str | None = Field(None, min_length=1)
    retention_policy: str | None = None
    username: str | None = None
    password: SecretStr | None = None
    token: SecretStr | None = None  # InfluxDB 2.x/3.x compatibility API
    tls: InfluxTlsConfig | None = None
    timeout_s: float = Field(30.0, gt=0)
    # v2: Flux and /api/v2/write through the optional influxdb-client (pip install
    # 'mmdwatch[influx2]'), with org + bucket + token instead of database.
    api: Literal["v1", "v2"] = "v1"
    org: str | None = None
    bucket: str | None = None

    @model_validator(mode="after")
    def _auth(self) -> InfluxConnectionConfig:
        if self.api == "v1" and not self.database:
            raise ValueError("database is required (the InfluxDB database to use)")
        if self.api == "v2" and not (self.bucket and self.org and self.token):
            raise ValueError("api: v2 needs bucket, org and token")
        if not self.url.startswith(("http://", "https://")):
            raise ValueError(f"url {self.url!r} must start with http:// or https://")
        if self.token is not None and self.username is not None:
            raise ValueError("set either token or username/password, not both")
        return self


def _quote_ident(name: str) -> str:
    return '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'


class InfluxHttp:
    """A small v1 API client: ``query`` (InfluxQL, JSON) and ``write`` (line protocol)."""

    def __init__(self, config: InfluxConnectionConfig) -> None:
        self.config = config
        kwargs: dict[str, Any] = {"base_url": config.url, "timeout": config.timeout_s}
        tls = config.tls
        if tls is not None and not tls.verify:
            kwargs["verify"] = False
        elif tls is not None and tls.ca_certs is not None:
            try:
                kwargs["verify"] = ssl.create_default_context(cafile=str(tls.ca_certs))
            except (OSError, ssl.SSLError) as exc:
                raise InfluxError(f"cannot load tls.ca_certs {tls.ca_certs} ({exc}); point it "
                                  "at the PEM file of the CA that signed the server") from exc
        headers = {}
        if config.token is not None:
            headers["Authorization"] = f"Token {config.token.get_secret_value()}"
        elif config.username is not None:
            password = config.password.get_secret_value() if config.password else ""
            kwargs["auth"] = (config.username, password)
        self._client = httpx.Client(headers=headers, **kwargs)

    def __repr__(self) -> str:
        return f"InfluxHttp(url={self.config.url!r}, database={self.config.database!r})"

    def close(self) -> None:
        self._client.close()

    def measurement_ref(self, measurement: str) -> str:
        """``"db"."rp"."measurement"`` as InfluxQL wants it."""
        rp = _quote_ident(self.config.retention_policy) if self.config.retention_policy else ""
        return f"{_quote_ident(self.config.database)}.{rp}.{_quote_ident(measurement)}"

    def _post(self, path: str, **kwargs: Any) -> httpx.Response:
        url = self.config.url
        try:
            return self._client.post(path, **kwargs)
        except httpx.ConnectError as exc:
            if "CERTIFICATE_VERIFY_FAILED" in str(exc):
                raise InfluxUnreachable(
                    f"TLS certificate of InfluxDB at {url} is not trusted ({exc}); set "
                    "tls.ca_certs to the CA file that signed it") from exc
            raise InfluxUnreachable(f"cannot reach InfluxDB at {url} ({exc}); check url and "
                                    "that influxd runs") from exc
        except httpx.TimeoutException as exc:
            raise InfluxUnreachable(f"InfluxDB at {url} did not answer within "
                                    f"{self.config.timeout_s:g}s; raise timeout_s or check "
                                    "the server load") from exc
        except httpx.HTTPError as exc:
            raise InfluxUnreachable(f"HTTP error talking to InfluxDB at {url}: {exc}") from exc

    def _raise_for(self, response: httpx.Response, what: str) -> None:
        if response.status_code < 300:
            return
        try:
            message = response.json().get("error", response.text)
        except ValueError:
            message = response.text.strip()
        db = self.config.database
        if response.status_code in (401, 403):
            raise InfluxAuthError(f"InfluxDB at {self.config.url} refused the {what}: "
                                  f"{message}; check username/password or token")
        if "database not found" in message:
            raise InfluxDatabaseMissing(f"database {db!r} not found on {self.config.url}; "
                                        f"create it (CREATE DATABASE \"{db}\") or fix the "
                                        "database key")
        if response.status_code == 400:
            raise InfluxQueryError(f"InfluxDB rejected the {what}: {message}; check "
                                   "measurement, field, sensor_tag and retention_policy")
        if response.status_code >= 500:
            # Named apart from a refused connection, but as plainly: while influxd stops,
            # the first failure is often this answer rather than a refusal.
            raise InfluxServerError(f"InfluxDB server error at {self.config.url}: the {what} "
                                    f"failed with HTTP {response.status_code} ({message}); "
                                    "influxd is failing or shutting down, check its log")
        raise InfluxError(f"InfluxDB {what} failed with HTTP {response.status_code}: "
                          f"{message}")

    def query(self, q: str, *, epoch: str = "ms", chunk_size: int = 50_000
              ) -> list[dict[str, Any]]:
        """Series of the single statement ``q`` (``[]`` when it matched nothing).

        Asked for in chunks (one JSON document per line), so a server row limit
        (``max-row-limit``) never truncates a window silently and the server streams
        instead of building one huge answer. Chunks of one series are returned in order.
        """
        response = self._post("/query", params={"db": self.config.database, "epoch": epoch,
                                                "chunked": "true",
                                                "chunk_size": str(chunk_size)},
                              data={"q": q})
        self._raise_for(response, "query")
        series: list[dict[str, Any]] = []
        for text in response.text.splitlines():
            if not text.strip():
                continue
            try:
                doc = json.loads(text)
            except ValueError as exc:
                raise InfluxError(f"InfluxDB at {self.config.url} sent an answer that is not "
                                  f"JSON ({text[:80]!r}); check that url points at InfluxDB"
                                  ) from exc
            if "error" in doc:
                self._statement_error(doc["error"], q)
            for result in doc.get("results", []):
                if "error" in result:
                    self._statement_error(result["error"], q)
                series.extend(result.get("series", []))
        return series

    def _statement_error(self, message: str, q: str) -> None:
        if "database not found" in message:
            db = self.config.database
            raise InfluxDatabaseMissing(
                f"database {db!r} not found on {self.config.url}; create it "
                f"(CREATE DATABASE \"{db}\") or fix the database key")
        raise InfluxQueryError(f"InfluxDB rejected the query ({message}); check "
                               f"measurement, field and sensor_tag. Query: {q}")

    def write(self, lines: list[str], *, precision: str = "ns") -> None:
        """Write line-protocol ``lines`` in one request."""
        params = {"db": self.config.database, "precision": precision}
        if self.config.retention_policy:
            params["rp"] = self.config.retention_policy
        response = self._post("/write", params=params,
                              content="\n".join(lines).encode("utf-8"))
        self._raise_for(response, "write")
