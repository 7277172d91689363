#!/usr/bin/env python3
"""Read the current value of topics on a Sagüin `latest` channel.

Usage:
    python3 examples/point_read.py [--host HOST] [--port PORT] TOPIC [TOPIC ...]

    python3 examples/point_read.py iot/pump-7/state iot/pump-7/location

Needs paho-mqtt 2 (`pip install paho-mqtt`). Each topic is asked for with a
QoS 1 publish to `$saguin/kv/get` whose payload is the topic. The broker
writes the answer to this connection alone, on the Response Topic given, with
the Correlation Data given - here the topic itself, so several reads can be
outstanding at once - and an empty answer means the topic has no value. A
request the broker cannot answer (a topic no `latest` channel holds, a
wildcard) is refused on its PUBACK, with a reason code and a Reason String.

Prints one line per topic: the value, with its age from `saguin-timestamp`,
or `(no value)`. Exits 1 if any read was refused.
"""

import argparse
import sys
import threading
import time
import uuid

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

WAIT_S = 10.0


def main() -> int:
    parser = argparse.ArgumentParser(description="Point-read topics of a Sagüin latest channel.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=1883)
    parser.add_argument("topics", nargs="+", metavar="TOPIC")
    args = parser.parse_args()

    reply_topic = f"replies/point-read/{uuid.uuid4().hex}"
    answers: dict[bytes, mqtt.MQTTMessage] = {}
    refusals: dict[int, str] = {}
    done = threading.Condition()
    connected = threading.Event()

    def on_connect(_client, _userdata, _flags, reason_code, _properties):
        if reason_code.value == 0:
            connected.set()

    def on_message(_client, _userdata, message):
        with done:
            answers[message.properties.CorrelationData] = message
            done.notify_all()

    def on_publish(_client, _userdata, mid, reason_code, properties):
        if reason_code.value != 0:
            why = getattr(properties, "ReasonString", "") if properties else ""
            with done:
                refusals[mid] = f"refused 0x{reason_code.value:02X} ({reason_code}): {why}"
                done.notify_all()

    client = mqtt.Client(
        callback_api_version=CallbackAPIVersion.VERSION2,
        client_id=f"point-read-{uuid.uuid4().hex[:8]}",
        protocol=mqtt.MQTTv5,
    )
    client.on_connect = on_connect
    client.on_message = on_message
    client.on_publish = on_publish
    client.connect(args.host, args.port)
    client.loop_start()
    if not connected.wait(WAIT_S):
        print(f"could not connect to {args.host}:{args.port}", file=sys.stderr)
        return 2

    requests = {}
    for topic in args.topics:
        properties = Properties(PacketTypes.PUBLISH)
        properties.ResponseTopic = reply_topic
        properties.CorrelationData = topic.encode()
        info = client.publish("$saguin/kv/get", topic, qos=1, properties=properties)
        requests[info.mid] = topic

    deadline = time.monotonic() + WAIT_S
    with done:
        while len(answers) + len(refusals) < len(requests):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            done.wait(left)
    client.disconnect()
    client.loop_stop()

    refused = False
    for mid, topic in requests.items():
        answer = answers.get(topic.encode())
        if mid in refusals:
            refused = True
            print(f"{topic}: {refusals[mid]}")
        elif answer is None:
            refused = True
            print(f"{topic}: no answer within {WAIT_S:.0f}s")
        elif not answer.payload:
            print(f"{topic}: (no value)")
        else:
            labels = dict(getattr(answer.properties, "UserProperty", None) or [])
            set_ms = int(labels.get("saguin-timestamp", "0"))
            age = f", set {time.time() - set_ms / 1000:.1f}s ago" if set_ms else ""
            print(f"{topic}: {answer.payload.decode(errors='replace')}{age}")
    return 1 if refused else 0


if __name__ == "__main__":
    sys.exit(main())
