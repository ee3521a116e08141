"""The pure MQTT payload parser (no broker): formats, times, rejections, totality."""
from __future__ import annotations

import pytest

from connectors.base import Reading
from connectors.mqtt import MqttSource, parse_payload
from connectors.mqtt.payload import REASONS, compile_topic_pattern

T0 = 1_527_811_200.0  # 2018-06-01T00:00:00Z


@pytest.mark.parametrize("time_text", ["2018-06-01T00:00:00Z", "2018-06-01T02:00:00+02:00",
                                       "2018-06-01T00:00:00", "2018-06-01 00:00:00",
                                       1527811200, 1527811200.0, "1527811200"])
def test_time_formats(time_text):
    out = parse_payload(f'{{"sensor":"n1","time":{_json(time_text)},"value":2}}'.encode())
    assert out == parse_payload(b'{"sensor":"n1","time":1527811200,"value":2}')
    assert out.readings == [Reading("n1", T0, 2.0)]


def _json(v):
    return f'"{v}"' if isinstance(v, str) else str(v)


def test_array_items_are_judged_one_by_one():
    out = parse_payload(b'[{"sensor":"a","time":1,"value":1},{"sensor":"b","value":"x"},'
                        b'{"sensor":"c","time":"yesterday","value":1},7,'
                        b'{"sensor":"d","time":1527811200000,"value":1}]', received_at=5.0)
    assert out.readings == [Reading("a", 1.0, 1.0)]
    assert out.rejected == ["bad_value", "bad_time", "item_not_an_object", "time_out_of_range"]


def test_sensor_and_time_defaults():
    pattern = "plant/+/{sensor}/value"
    out = parse_payload(b'{"value": 3}', "plant/l-town/p7/value", 42.0, pattern)
    assert out.readings == [Reading("p7", 42.0, 3.0)]
    assert parse_payload(b"3", "plant/l-town/p7/other", 1.0, pattern).rejected == \
        ["bare_number_without_sensor_from_topic"]
    assert parse_payload(b"3").rejected == ["bare_number_without_sensor_from_topic"]
    assert parse_payload(b' 12.5\n', "s/x", 9.0, "s/{sensor}").readings == \
        [Reading("x", 9.0, 12.5)]


@pytest.mark.parametrize("payload, reason", [
    (b"\xff", "not_utf8"), (b"  ", "empty_payload"), (b"[]", "empty_array"),
    (b"{", "invalid_json"), (b"[" * 100_000, "invalid_json"), (b"true", "item_not_an_object"),
    (b'{"sensor":"a","value":NaN}', "non_finite_value"),
    (b'{"sensor":"a","value":1e999}', "non_finite_value"),
    (b'{"sensor":"a","value":true}', "bad_value"), (b'{"sensor":"a"}', "missing_value"),
    (b'{"value":1}', "missing_sensor"), (b'{"sensor":"","value":1}', "bad_sensor"),
    (b'{"sensor":"a","value":1,"time":-5}', "time_out_of_range"),
    (b'{"sensor":"a","value":1,"time":[1]}', "bad_time"),
])
def test_rejections_name_a_known_reason(payload, reason):
    out = parse_payload(payload)
    assert out.readings == [] and out.rejected == [reason] and reason in REASONS


def test_topic_pattern_validation():
    assert compile_topic_pattern("s/+/{sensor}/#").sensor("s/x/p1/a/b") == "p1"
    with pytest.raises(ValueError, match="exactly one"):
        compile_topic_pattern("sensors/+/x")
    with pytest.raises(ValueError, match="last level"):
        compile_topic_pattern("a/#/{sensor}")
    with pytest.raises(ValueError):
        MqttSource.Config.model_validate({"type": "mqtt", "topics": ["a/#"],
                                          "sensor_from_topic": "a/+"})
    with pytest.raises(ValueError, match="extra"):
        MqttSource.Config.model_validate({"type": "mqtt", "topics": ["a/#"], "hots": "x"})


def test_secrets_stay_out_of_repr():
    source = MqttSource({"type": "mqtt", "topics": ["a/#"], "username": "u",
                         "password": "hunter2"})
    assert "hunter2" not in repr(source) and "hunter2" not in repr(source.config)
    assert source.config.password.get_secret_value() == "hunter2"


def test_tls_is_on_only_when_asked_for():
    def tls(section):
        return MqttSource.Config.model_validate({"type": "mqtt", "topics": ["a/#"],
                                                 "tls": section}).tls.active
    assert not tls({"ca_certs": None, "certfile": None, "keyfile": None})  # the template
    assert tls({"ca_certs": "/etc/ca.pem"}) and tls({"enabled": True})
    assert not tls({"enabled": False, "ca_certs": "/etc/ca.pem"})
    with pytest.raises(ValueError, match="go together"):
        tls({"certfile": "/c.pem"})
