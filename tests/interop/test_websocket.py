"""paho-mqtt with `transport="websockets"` through `ws` and `wss` doors: it
publishes and subscribes, meets clients of the TCP door, and over `wss`
is named by its client certificate. paho sends the door's own origin,
which `same_origin` (on by default) admits."""

from __future__ import annotations

import shutil

import paho.mqtt.client as mqtt
import pytest

from test_tls import authority, issue

WS_DOOR = """
ws:
  address: 127.0.0.1:0
"""


def test_paho_publishes_and_subscribes_over_ws(start_broker, connect):
    broker = start_broker(listen_yaml=WS_DOOR)
    port = broker.door_port("ws")
    web = connect(broker, "paho-ws", port=port, transport="websockets")
    tcp = connect(broker, "paho-tcp")
    assert web.subscribe("ws/#", qos=1) == [1]
    assert tcp.subscribe("ws/#", qos=1) == [1]
    assert web.publish("ws/reading", b"over websocket" * 1000, qos=1) == 0
    assert web.expect().payload == b"over websocket" * 1000
    assert tcp.expect().payload == b"over websocket" * 1000
    assert tcp.publish("ws/reply", b"from tcp", qos=1) == 0
    assert web.expect().topic == "ws/reply"
    # MQTT 3.1.1 over the same door.
    old = connect(broker, "paho-311", port=port, transport="websockets", protocol=mqtt.MQTTv311)
    assert old.subscribe("ws/#", qos=0) == [0]
    assert tcp.publish("ws/both", b"to both", qos=1) == 0
    assert old.expect().payload == b"to both"


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl is not installed")
def test_paho_over_wss_is_named_by_its_client_certificate(start_broker, connect, tmp_path):
    pki = tmp_path / "pki"
    pki.mkdir()
    ca = authority(pki, "estate-ca")
    cert, key = issue(pki, "estate-ca", "broker", "/CN=broker", "subjectAltName=IP:127.0.0.1")
    device_cert, device_key = issue(pki, "estate-ca", "device-7", "/CN=device-7", "extendedKeyUsage=clientAuth")
    broker = start_broker(listen_yaml=f"""
        ws:
          address: 127.0.0.1:0
          tls:
            cert_file: {cert}
            key_file: {key}
            client_ca_file: {ca}
    """)
    port = broker.door_port("ws")
    tls = {"ca_certs": str(ca), "certfile": str(device_cert), "keyfile": str(device_key)}
    secure = connect(broker, "paho-wss", port=port, transport="websockets", tls=tls)
    broker.wait_for_log('client paho-wss is user "device-7", named by its certificate')
    assert secure.subscribe("wss/echo", qos=1) == [1]
    assert secure.publish("wss/echo", b"over wss", qos=1) == 0
    assert secure.expect().payload == b"over wss"
    # Without a certificate the handshake is refused, before any upgrade.
    with pytest.raises(Exception):
        connect(broker, "paho-nocert", port=port, transport="websockets", tls={"ca_certs": str(ca)})
