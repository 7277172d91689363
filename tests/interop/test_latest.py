"""A `latest` channel read and written by stock paho-mqtt clients: current
state flagged RETAIN after the SUBACK, changes without it, deletions asked
for with `saguin-deletions`, point reads and the catalogue answered on the
client's own Response Topic, and the schema-registry convention."""

import json

import paho.mqtt.client as mqtt
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from conftest import redb_storage

STORAGE = redb_storage("latest.redb")

CHANNELS = """
channels:
  state:
    type: latest
    filter: iot/+/{state,location}
  schemas:
    type: latest
    filter: schemas/#
  events:
    type: append
    filter: events/#
"""


def label(message, name):
    """A User Property on a delivery."""
    properties = getattr(message.properties, "UserProperty", None) or []
    return dict(properties).get(name)


def ask(client, topic, payload, correlation=None, response_topic="replies/me"):
    """Publishes a request at QoS 1; returns its PUBACK reason code."""
    properties = Properties(PacketTypes.PUBLISH)
    if response_topic:
        properties.ResponseTopic = response_topic
    if correlation is not None:
        properties.CorrelationData = correlation
    return client.publish(topic, payload, qos=1, properties=properties)


def test_paho_gets_current_state_with_retain_then_changes_without(start_broker, connect):
    broker = start_broker(STORAGE, CHANNELS)
    device = connect(broker, "pump-7")
    assert device.publish("iot/pump-7/state", "off", qos=1) == 0
    assert device.publish("iot/pump-7/state", "on", qos=1) == 0
    assert device.publish("iot/pump-7/location", "hall", qos=1) == 0

    dashboard = connect(broker, "dashboard")
    assert dashboard.subscribe("iot/#", qos=1) == [1]
    state = [dashboard.expect() for _ in range(2)]
    assert [(m.topic, m.payload, m.retain) for m in state] == [
        ("iot/pump-7/state", b"on", True),
        ("iot/pump-7/location", b"hall", True),
    ]
    assert all(label(m, "saguin-id") and label(m, "saguin-timestamp") for m in state)
    assert int(label(state[0], "saguin-offset")) < int(label(state[1], "saguin-offset"))

    assert device.publish("iot/pump-7/state", "auto", qos=1, retain=True) == 0
    change = dashboard.expect()
    assert (change.payload, change.retain) == (b"auto", False)


def test_paho_asks_for_deletions_with_saguin_deletions(start_broker, connect):
    broker = start_broker(STORAGE, CHANNELS)
    device = connect(broker, "s-1")
    assert device.publish("iot/s-1/state", "up", qos=1) == 0
    assert device.publish("iot/s-2/state", "up", qos=1) == 0
    live = connect(broker, "live")
    assert live.subscribe("iot/+/state", qos=1) == [1]
    assert {live.expect().topic for _ in range(2)} == {"iot/s-1/state", "iot/s-2/state"}

    assert device.publish("iot/s-1/state", b"", qos=1) == 0
    deletion = live.expect()
    assert (deletion.topic, deletion.payload) == ("iot/s-1/state", b"")
    assert label(deletion, "saguin-offset")

    mirror = connect(broker, "mirror")
    properties = Properties(PacketTypes.SUBSCRIBE)
    properties.UserProperty = ("saguin-deletions", "")
    result, mid = mirror.paho.subscribe(
        "iot/+/state", options=mqtt.SubscribeOptions(qos=1), properties=properties
    )
    assert result == mqtt.MQTT_ERR_SUCCESS
    assert [c.value for c in mirror._wait_ack(mid, "SUBACK")] == [1]
    state = {m.topic: m.payload for m in (mirror.expect(), mirror.expect())}
    assert state == {"iot/s-2/state": b"up", "iot/s-1/state": b""}


def test_a_paho_point_read_answers_only_the_asker(start_broker, connect):
    broker = start_broker(STORAGE, CHANNELS)
    device = connect(broker, "pump-7")
    assert device.publish("iot/pump-7/state", "on", qos=1) == 0
    bystander = connect(broker, "bystander")
    assert bystander.subscribe("replies/#", qos=0) == [0]

    caller = connect(broker, "caller")
    assert ask(caller, "$saguin/kv/get", "iot/pump-7/state", correlation=b"r-1") == 0
    reply = caller.expect()
    assert (reply.topic, reply.payload) == ("replies/me", b"on")
    assert reply.properties.CorrelationData == b"r-1"
    assert label(reply, "saguin-timestamp")

    assert ask(caller, "$saguin/kv/get", "iot/pump-9/state") == 0
    empty = caller.expect()
    assert empty.payload == b""
    assert empty.properties.CorrelationData == b"iot/pump-9/state"

    # The bystander on the reply topic saw neither answer: the marker it
    # receives is the first thing that reaches it.
    assert device.publish("replies/marker", "m", qos=1) == 0
    assert bystander.collect_until("replies/marker") == []


def test_paho_point_read_refusals_carry_their_codes(start_broker, connect):
    broker = start_broker(STORAGE, CHANNELS)
    caller = connect(broker, "caller")
    assert ask(caller, "$saguin/kv/get", "iot/x/state", response_topic=None) == 0x83
    assert ask(caller, "$saguin/kv/get", "iot/+/state") == 0x90
    assert ask(caller, "$saguin/kv/get", "events/door") == 0x90
    assert ask(caller, "$saguin/kv/get", "not/claimed") == 0x90


def test_paho_reads_the_catalogue(start_broker, connect):
    broker = start_broker(STORAGE, CHANNELS)
    caller = connect(broker, "caller")
    assert ask(caller, "$saguin/catalogue/state", b"") == 0
    entry = json.loads(caller.expect().payload)
    assert entry == {
        "name": "state",
        "type": "latest",
        "filter": "iot/+/{state,location}",
        "verbs": ["write", "read", "delete"],
    }
    assert ask(caller, "$saguin/catalogue/missing", b"") == 0
    assert caller.expect().payload == b""


def test_a_paho_consumer_follows_the_schema_pointer(start_broker, connect):
    broker = start_broker(STORAGE, CHANNELS)
    registrar = connect(broker, "registrar")
    schema = b'syntax = "proto3"; message WaterLevel { float cm = 1; }'
    assert registrar.publish("schemas/acme/water-v1", schema, qos=1) == 0

    consumer = connect(broker, "consumer")
    assert consumer.subscribe("iot/+/state", qos=1) == [1]
    producer = connect(broker, "gauge-3")
    properties = Properties(PacketTypes.PUBLISH)
    properties.ContentType = "application/x-protobuf"
    properties.UserProperty = ("schema", "schemas/acme/water-v1")
    assert producer.publish("iot/gauge-3/state", b"\x0d\x00\x00\x48\x42", qos=1, properties=properties) == 0

    reading = consumer.expect()
    assert reading.properties.ContentType == "application/x-protobuf"
    pointer = label(reading, "schema")
    assert pointer == "schemas/acme/water-v1"
    assert ask(consumer, "$saguin/kv/get", pointer) == 0
    assert consumer.expect().payload == schema


def test_a_311_paho_subscriber_gets_state_with_retain(start_broker, connect):
    broker = start_broker(STORAGE, CHANNELS)
    device = connect(broker, "pump-7")
    assert device.publish("iot/pump-7/state", "on", qos=1) == 0
    old = connect(broker, "old", protocol=mqtt.MQTTv311)
    assert old.subscribe("iot/+/state", qos=1) == [1]
    value = old.expect()
    assert (value.payload, value.retain) == (b"on", True)
    assert device.publish("iot/pump-7/state", "off", qos=1) == 0
    change = old.expect()
    assert (change.payload, change.retain) == (b"off", False)


def test_the_point_read_example_runs_as_is(start_broker, connect):
    import subprocess
    import sys
    from pathlib import Path

    broker = start_broker(STORAGE, CHANNELS)
    device = connect(broker, "pump-7")
    assert device.publish("iot/pump-7/state", "on", qos=1) == 0
    example = Path(__file__).resolve().parents[2] / "examples" / "point_read.py"
    port = str(device.port)
    run = subprocess.run(
        [sys.executable, str(example), "--port", port, "iot/pump-7/state", "iot/pump-8/state"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    assert lines[0].startswith("iot/pump-7/state: on, set ")
    assert lines[1] == "iot/pump-8/state: (no value)"
    refused = subprocess.run(
        [sys.executable, str(example), "--port", port, "iot/+/state"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert refused.returncode == 1
    assert "refused 0x90" in refused.stdout
