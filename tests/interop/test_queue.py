"""A `queue` channel worked by stock paho-mqtt clients: the example worker
acknowledging and returning jobs, a paho handler answering before its own
PUBACK, and dead letters read by an ordinary subscriber."""

import queue
import subprocess
import sys

import pytest

from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from conftest import REPO, WAIT, redb_storage

STORAGE = redb_storage("queue.redb")

QUEUE = """
channels:
  jobs:
    type: queue
    filter: jobs/#
    retry:
      max_attempts: 1
"""


def label(message, name):
    return dict(getattr(message.properties, "UserProperty", None) or []).get(name)


def test_the_example_worker_acks_and_returns_and_the_poison_job_is_dead_lettered(
    start_broker, connect
):
    broker = start_broker(STORAGE, QUEUE)
    dead = connect(broker, "dead-letters")
    assert dead.subscribe("jobs/__dlq/#", qos=1) == [1]
    producer = connect(broker, "producer")
    for payload in ["resize 1", "poison 2", "resize 3"]:
        assert producer.publish(f"jobs/{payload.split()[1]}", payload, qos=1) == 0
    worker = subprocess.run(
        [
            sys.executable,
            str(REPO / "examples" / "queue_worker.py"),
            "--queue",
            "jobs",
            "--port",
            str(broker.port),
            "--count",
            "3",
        ],
        capture_output=True,
        text=True,
        timeout=WAIT * 4,
    )
    assert worker.returncode == 0, worker.stderr
    lines = worker.stdout.splitlines()
    assert lines == [
        "jobs/1 offset 1 attempt 1: ack",
        "jobs/2 offset 2 attempt 1: return",
        "jobs/3 offset 3 attempt 1: ack",
    ], worker.stdout
    # A return answered before paho's PUBACK still spent the one attempt.
    letter = dead.expect()
    assert letter.topic == "jobs/__dlq/2"
    assert letter.payload == b"poison 2"
    assert label(letter, "saguin-dlq-reason") == "attempts_exhausted"
    assert label(letter, "saguin-dlq-attempts") == "1"
    assert label(letter, "saguin-dlq-channel") == "jobs"


def test_a_paho_worker_is_handed_one_job_at_a_time(start_broker, connect):
    broker = start_broker(STORAGE, QUEUE)
    producer = connect(broker, "producer")
    for i in range(2):
        assert producer.publish(f"jobs/{i}", f"job {i}", qos=1) == 0
    worker = connect(broker, "worker")
    assert worker.subscribe("$saguin/queue/jobs", qos=1) == [1]
    first = worker.expect()
    assert first.properties.ResponseTopic == "$saguin/queue/jobs/response"
    assert len(first.properties.CorrelationData) <= 32
    # Held: nothing more comes until it is answered.
    with pytest.raises(queue.Empty):
        worker.messages.get(timeout=0.6)
    answer = Properties(PacketTypes.PUBLISH)
    answer.CorrelationData = first.properties.CorrelationData
    assert worker.publish(first.properties.ResponseTopic, "ack", qos=1, properties=answer) == 0
    second = worker.expect()
    assert second.payload == b"job 1"
    assert label(second, "saguin-attempt") == "1"
