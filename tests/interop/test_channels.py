"""An `append` channel read and written by stock paho-mqtt clients: records
labelled with their offsets, a durable consumer resuming where it stopped,
and a seek answered on the client's own Response Topic."""

from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from conftest import redb_storage

STORAGE = redb_storage("channels.redb")

CHANNELS = """
channels:
  events:
    type: append
    filter: events/#
"""


def label(message, name):
    """A User Property the broker put on a channel delivery."""
    properties = getattr(message.properties, "UserProperty", None) or []
    return dict(properties).get(name)


def test_a_durable_paho_consumer_resumes_where_it_stopped(start_broker, connect):
    broker = start_broker(STORAGE, CHANNELS)
    consumer = connect(broker, "reader", clean_start=False, session_expiry=600)
    assert consumer.subscribe("events/#", qos=1) == [1]
    publisher = connect(broker, "writer")
    for i in range(3):
        assert publisher.publish("events/door", f"e{i}", qos=1) == 0
    first = [consumer.expect() for _ in range(3)]
    assert [m.payload for m in first] == [b"e0", b"e1", b"e2"]
    assert [label(m, "saguin-offset") for m in first] == ["1", "2", "3"]
    assert all(label(m, "saguin-id") and label(m, "saguin-timestamp") for m in first)
    consumer.disconnect()

    for i in range(3, 6):
        assert publisher.publish("events/door", f"e{i}", qos=1) == 0
    resumed = connect(broker, "reader", clean_start=False, session_expiry=600)
    assert resumed.session_present is True
    missed = [resumed.expect() for _ in range(3)]
    assert [m.payload for m in missed] == [b"e3", b"e4", b"e5"]
    assert [label(m, "saguin-offset") for m in missed] == ["4", "5", "6"]


def test_a_paho_seek_is_answered_on_its_response_topic(start_broker, connect):
    broker = start_broker(STORAGE, CHANNELS)
    consumer = connect(broker, "seeker", clean_start=True, session_expiry=600)
    assert consumer.subscribe("events/#", qos=1) == [1]
    assert consumer.subscribe("replies/seeker", qos=0) == [0]
    publisher = connect(broker, "writer")
    for i in range(4):
        assert publisher.publish("events/x", f"r{i}", qos=1) == 0
    assert [consumer.expect().payload for _ in range(4)] == [b"r0", b"r1", b"r2", b"r3"]

    properties = Properties(PacketTypes.PUBLISH)
    properties.ResponseTopic = "replies/seeker"
    properties.CorrelationData = b"seek-1"
    assert consumer.publish("$saguin/consumer/events/seek", "2", qos=1, properties=properties) == 0
    reply = consumer.expect()
    assert (reply.topic, reply.payload) == ("replies/seeker", b"2")
    assert reply.properties.CorrelationData == b"seek-1"
    replayed = [consumer.expect() for _ in range(3)]
    assert [label(m, "saguin-offset") for m in replayed] == ["2", "3", "4"]
