"""The shared server fixtures really start servers that speak their protocols."""
from __future__ import annotations

import ssl

import httpx
import paho.mqtt.client as mqtt
import pytest

pytestmark = pytest.mark.integration


def _connect(server, **overrides):
    kw = {**server.client_kwargs(), **overrides}
    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2)
    if kw.get("username"):
        client.username_pw_set(kw["username"], kw.get("password"))
    if kw.get("tls"):
        client.tls_set(ca_certs=kw["tls"]["ca_certs"])
    codes = []
    client.on_connect = lambda c, u, f, rc, p: codes.append(rc)
    client.connect(kw["host"], kw["port"])
    client.loop_start()
    import time
    deadline = time.monotonic() + 5
    while not codes and time.monotonic() < deadline:
        time.sleep(0.01)
    client.disconnect()
    client.loop_stop()
    return codes


@pytest.mark.parametrize("fixture", ["mosquitto", "mosquitto_auth", "mosquitto_tls"])
def test_mosquitto_variants_accept_their_credentials(fixture, request):
    server = request.getfixturevalue(fixture)
    codes = _connect(server)
    assert codes and not codes[0].is_failure


def test_mosquitto_auth_refuses_a_wrong_password(mosquitto_auth):
    codes = _connect(mosquitto_auth, password="wrong")
    assert codes and codes[0].is_failure


def test_mosquitto_tls_refuses_untrusting_clients(mosquitto_tls):
    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2)
    client.tls_set()  # system CAs only: the self-signed cert is not trusted
    with pytest.raises(ssl.SSLCertVerificationError):
        client.connect("localhost", mosquitto_tls.port)


def test_influxd_plain_writes_and_reads(influxd):
    influxd.create_database("t")
    influxd.write_lines("t", ["m,sensor=a value=1.5 1700000000"])
    series = influxd.query("SELECT value FROM m", db="t")["results"][0]["series"][0]
    assert series["values"] == [[1700000000, 1.5]]


def test_influxd_secure_needs_auth_and_tls(influxd_secure):
    influxd_secure.create_database("t")
    with influxd_secure.client(auth=False) as c:
        r = c.post("/query", params={"q": "SHOW DATABASES"})
    assert r.status_code == 401
    with pytest.raises(httpx.ConnectError):
        httpx.get(influxd_secure.url + "/ping")  # system CAs do not trust the cert
