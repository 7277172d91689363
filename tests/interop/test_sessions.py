"""Persistent sessions held by stock paho-mqtt clients across a restart of
the broker: the session comes back with Session Present and its
subscriptions, what was published to it while it was away is delivered
without a re-subscribe, and a retained value is still served."""

import pytest

from conftest import Broker, redb_storage

REDB = redb_storage("sessions.redb")

MEMORY = """
storage:
  default: volatile
  default_retention_period: none
  default_retention_bytes: none
  providers:
    volatile:
      type: memory
      max_bytes: 64MiB
      snapshot_dir: {dir}
"""


@pytest.mark.parametrize("storage", [REDB, MEMORY], ids=["redb", "memory"])
def test_a_paho_session_and_what_it_was_owed_survive_a_restart(
    start_broker, connect, storage
):
    broker = start_broker(storage)
    keeper = connect(broker, "paho-keeper", clean_start=False, session_expiry=600)
    assert keeper.subscribe("plant/#", qos=1) == [1]
    keeper.disconnect()
    publisher = connect(broker, "paho-publisher")
    for i in range(5):
        assert publisher.publish(f"plant/m{i}", f"v{i}", qos=1) == 0
    assert publisher.publish("state/lamp", "on", qos=1, retain=True) == 0
    publisher.close()

    directory = broker.config_path.parent
    broker.stop()
    restarted = Broker(directory, storage)
    try:
        resumed = connect(restarted, "paho-keeper", clean_start=False, session_expiry=600)
        assert resumed.session_present is True
        received = [resumed.expect() for _ in range(5)]
        assert [m.topic for m in received] == [f"plant/m{i}" for i in range(5)]
        assert [m.payload for m in received] == [f"v{i}".encode() for i in range(5)]
        reader = connect(restarted, "paho-reader")
        assert reader.subscribe("state/#", qos=1) == [1]
        value = reader.expect()
        assert (value.topic, value.payload, value.retain) == ("state/lamp", b"on", True)
        resumed.close()
        reader.close()
    finally:
        restarted.stop()
