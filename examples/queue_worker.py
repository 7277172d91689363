#!/usr/bin/env python3
"""A small worker for a Sagüin queue, on paho-mqtt (pip install paho-mqtt).

    python3 examples/queue_worker.py --queue jobs [--host 127.0.0.1] [--port 1883]
        [--fail-word poison] [--count N]

It subscribes to `$saguin/queue/<queue>` at QoS 1 and handles one job at a
time: a job whose payload contains the fail word is returned (`return`),
every other one is printed and acknowledged (`ack`). Each answer goes to
the job's own Response Topic, carrying its Correlation Data, from inside
the message handler - so the answer leaves before paho's PUBACK, which is
how the broker counts an attempt either way.

The queue must exist in the broker's configuration, for instance:

    channels:
      jobs:
        type: queue
        filter: jobs/#

and work is any publish to a topic the queue claims:

    mosquitto_pub -V 5 -q 1 -t jobs/resize/42 -m 'thumbnail 42'

`--count N` stops after N jobs (the interoperability tests use it); without
it the worker runs until interrupted.
"""

import argparse
import sys
import threading

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties


def label(job, name):
    """One of the broker's User Properties on a job, such as saguin-attempt."""
    return dict(getattr(job.properties, "UserProperty", None) or []).get(name)


def main(argv=None):
    parser = argparse.ArgumentParser(description="ack or return jobs from a Sagüin queue")
    parser.add_argument("--queue", required=True, help="the queue's name (its channel name)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=1883)
    parser.add_argument("--client-id", default="", help="empty: the broker assigns one")
    parser.add_argument("--fail-word", default="poison", help="jobs containing it are returned")
    parser.add_argument("--count", type=int, default=0, help="stop after this many jobs")
    args = parser.parse_args(argv)

    done = threading.Event()
    handled = 0

    def on_connect(client, _userdata, _flags, reason_code, _properties):
        if reason_code.is_failure:
            print(f"connect refused: {reason_code}", file=sys.stderr)
            done.set()
            return
        # QoS 1 and MQTT 5 are required: the lease starts at the PUBACK, and
        # the answer needs the job's Response Topic and Correlation Data.
        client.subscribe(f"$saguin/queue/{args.queue}", options=mqtt.SubscribeOptions(qos=1))

    def on_subscribe(_client, _userdata, _mid, reason_codes, _properties):
        if reason_codes[0].is_failure:
            print(f"subscription refused: {reason_codes[0]}", file=sys.stderr)
            done.set()

    def on_message(client, _userdata, job):
        nonlocal handled
        failed = args.fail_word.encode() in job.payload
        outcome = "return" if failed else "ack"
        print(
            f"{job.topic} offset {label(job, 'saguin-offset')} "
            f"attempt {label(job, 'saguin-attempt')}: {outcome}",
            flush=True,
        )
        answer = Properties(PacketTypes.PUBLISH)
        answer.CorrelationData = job.properties.CorrelationData
        client.publish(job.properties.ResponseTopic, outcome, qos=1, properties=answer)
        handled += 1
        if args.count and handled >= args.count:
            done.set()

    client = mqtt.Client(
        callback_api_version=CallbackAPIVersion.VERSION2,
        client_id=args.client_id,
        protocol=mqtt.MQTTv5,
    )
    client.on_connect = on_connect
    client.on_subscribe = on_subscribe
    client.on_message = on_message
    client.connect(args.host, args.port)
    client.loop_start()
    try:
        done.wait()
    except KeyboardInterrupt:
        pass
    client.disconnect()
    client.loop_stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
