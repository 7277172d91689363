"""The authorization file as the Paho interoperability suite expects it: a
filter the client's roles do not cover is refused per filter, 0x87 on
MQTT 5 and 0x80 on 3.1.1, while the others in the same SUBSCRIBE are
granted."""

import subprocess

import paho.mqtt.client as mqtt

from conftest import broker_binary

PASSWORD = "tester's secret"

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
    # An acl_file governs authenticated names: it needs a password file.
    passwd = tmp_path / "clients.passwd"
    subprocess.run(
        [str(broker_binary()), "--passwd", str(passwd), "add", "tester"],
        input=PASSWORD + "\n",
        text=True,
        check=True,
        capture_output=True,
    )
    return start_broker(
        "qos2: {}", mqtt_yaml=f"acl_file: {acl}\npassword_file: {passwd}"
    )


def test_a_denied_filter_is_refused_per_filter(start_broker, tmp_path, connect):
    broker = start_with_acl(start_broker, tmp_path)
    v5 = connect(broker, "acl-v5", username="tester", password=PASSWORD)
    assert v5.subscribe("test/nosubscribe", qos=1) == [0x87]
    assert v5.subscribe("TopicA/#", qos=1) == [1]
    old = connect(broker, "acl-v311", protocol=mqtt.MQTTv311, username="tester", password=PASSWORD)
    assert old.subscribe("test/nosubscribe", qos=1) == [0x80]
    assert old.subscribe("Topic/C", qos=1) == [1]
    assert v5.publish("TopicA/B", b"granted", qos=1) == 0
    assert v5.expect().payload == b"granted"
