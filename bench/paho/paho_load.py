#!/usr/bin/env python3
"""Loads a broker with stock paho-mqtt clients at their default settings
(no TCP_NODELAY, paho's own loop thread), the way a gateway's Python
services run, and prints one figure as `name value` lines.

  paho_load.py queue-drain --port P --jobs 300
      publishes a backlog to `work/paho/<i>`, then one worker subscribes to
      `$saguin/queue/work` and answers each job `ack` from its callback, as
      examples/queue_worker.py does; prints the time from SUBSCRIBE to the
      last answer's PUBACK.
  paho_load.py request-response --port P --round-trips 200
      a requester and a responder over broadcast QoS 1; prints the median,
      the longest round trip and how many took over 20 ms.

`--nodelay` sets TCP_NODELAY on every client socket, for comparison.
"""

from __future__ import annotations

import argparse
import socket
import statistics
import sys
import threading
import time

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

WAIT_S = 60.0
SLOW_ROUND_TRIP_S = 0.020


def new_client(client_id: str, port: int, nodelay: bool) -> mqtt.Client:
    client = mqtt.Client(
        callback_api_version=CallbackAPIVersion.VERSION2,
        client_id=client_id,
        protocol=mqtt.MQTTv5,
    )
    connected = threading.Event()
    client.on_connect = lambda *_args: connected.set()
    client.connect("127.0.0.1", port)
    if nodelay:
        client.socket().setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    client.loop_start()
    if not connected.wait(WAIT_S):
        sys.exit(f"{client_id}: no CONNACK")
    return client


def wait(event: threading.Event, what: str) -> None:
    if not event.wait(WAIT_S):
        sys.exit(f"timed out waiting for {what}")


def fill_backlog(port: int, jobs: int, nodelay: bool) -> None:
    producer = new_client("paho-producer", port, nodelay)
    infos = [producer.publish(f"work/paho/{i}", b"j" * 64, qos=1) for i in range(jobs)]
    for info in infos:
        info.wait_for_publish(WAIT_S)
    producer.disconnect()
    producer.loop_stop()


def queue_drain(args: argparse.Namespace) -> None:
    fill_backlog(args.port, args.jobs, args.nodelay)
    worker = new_client("paho-worker", args.port, args.nodelay)
    answered = 0
    finished = threading.Event()

    def on_publish(_client, _userdata, _mid, _reason, _properties):
        nonlocal answered
        answered += 1
        if answered == args.jobs:
            finished.set()

    def on_message(client, _userdata, job):
        answer = Properties(PacketTypes.PUBLISH)
        answer.CorrelationData = job.properties.CorrelationData
        client.publish(job.properties.ResponseTopic, "ack", qos=1, properties=answer)

    worker.on_publish = on_publish
    worker.on_message = on_message
    start = time.monotonic()
    worker.subscribe("$saguin/queue/work", options=mqtt.SubscribeOptions(qos=1))
    wait(finished, f"{args.jobs} answers")
    elapsed = time.monotonic() - start
    worker.disconnect()
    worker.loop_stop()
    print(f"drain_ms {elapsed * 1000:.1f}")


def request_response(args: argparse.Namespace) -> None:
    responder = new_client("paho-responder", args.port, args.nodelay)
    requester = new_client("paho-requester", args.port, args.nodelay)
    subscribed = threading.Event()
    responder.on_subscribe = lambda *_args: subscribed.set()
    responder.on_message = lambda client, _u, message: client.publish(
        "rr/response", message.payload, qos=1
    )
    responder.subscribe("rr/request", qos=1)
    wait(subscribed, "the responder's SUBACK")
    subscribed.clear()
    requester.on_subscribe = lambda *_args: subscribed.set()
    # Each request goes out from the callback that took the previous answer,
    # so paho writes it just before that answer's PUBACK, as an application
    # answering from its handler does.
    round_trips: list[float] = []
    sent_at = [0.0]
    finished = threading.Event()

    def on_answer(client, _userdata, _message):
        now = time.monotonic()
        round_trips.append(now - sent_at[0])
        if len(round_trips) == args.round_trips:
            finished.set()
            return
        sent_at[0] = now
        client.publish("rr/request", str(len(round_trips)).encode(), qos=1)

    requester.on_message = on_answer
    requester.subscribe("rr/response", qos=1)
    wait(subscribed, "the requester's SUBACK")
    sent_at[0] = time.monotonic()
    requester.publish("rr/request", b"0", qos=1)
    wait(finished, f"{args.round_trips} answers")
    for client in (requester, responder):
        client.disconnect()
        client.loop_stop()
    print(f"total_ms {sum(round_trips) * 1000:.1f}")
    print(f"median_us {statistics.median(round_trips) * 1e6:.0f}")
    print(f"max_us {max(round_trips) * 1e6:.0f}")
    print(f"slow {sum(1 for t in round_trips if t > SLOW_ROUND_TRIP_S)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("figure", choices=["queue-drain", "request-response"])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--jobs", type=int, default=300)
    parser.add_argument("--round-trips", type=int, default=200)
    parser.add_argument("--nodelay", action="store_true")
    args = parser.parse_args()
    if args.figure == "queue-drain":
        queue_drain(args)
    else:
        request_response(args)


if __name__ == "__main__":
    main()
