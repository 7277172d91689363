"""The authorization file as the Paho interoperability suite expects it: a
filter the client's roles do not cover is refused per filter, 0x87 on
MQTT 5 and 0x80 on 3.1.1, while the others in the same SUBSCRIBE are
granted."""

import paho.mqtt.client as mqtt

ACL = """
roles:
  tester:
    - topic: TopicA/#
      allow: [read, write]
    - topic: Topic/#
      allow: [read, write]
users:
  tester: [tester]
"""


def start_with_acl(start_broker, tmp_path):
    acl = tmp_path / "acl.yaml"
    acl.write_text(ACL)
    # The first line is indented under broker.mqtt; the second sits at
    # broker's own level, so the block keeps its shape when dedented.
    return start_broker(f"  acl_file: {acl}\nqos2: {{}}")


def test_a_denied_filter_is_refused_per_filter(start_broker, tmp_path, connect):
    broker = start_with_acl(start_broker, tmp_path)
    v5 = connect(broker, "acl-v5", username="tester")
    assert v5.subscribe("test/nosubscribe", qos=1) == [0x87]
    assert v5.subscribe("TopicA/#", qos=1) == [1]
    old = connect(broker, "acl-v311", protocol=mqtt.MQTTv311, username="tester")
    assert old.subscribe("test/nosubscribe", qos=1) == [0x80]
    assert old.subscribe("Topic/C", qos=1) == [1]
    assert v5.publish("TopicA/B", b"granted", qos=1) == 0
    assert v5.expect().payload == b"granted"
