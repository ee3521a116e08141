"""MQTT connectors (paho-mqtt 2.x): a stream source of readings and a results sink."""
from connectors.mqtt.payload import ParseResult, parse_payload
from connectors.mqtt.sink import MqttSink, MqttSinkConfig
from connectors.mqtt.source import MqttSource, MqttSourceConfig

__all__ = ["MqttSink", "MqttSinkConfig", "MqttSource", "MqttSourceConfig", "ParseResult",
           "parse_payload"]
