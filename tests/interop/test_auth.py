"""Who may connect, as paho-mqtt sees it: a password file written by
`saguin --passwd`, the CONNACK for each credential on MQTT 5 and 3.1.1,
and SIGUSR1 putting a newly added user in force."""

import queue
import signal
import subprocess

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.enums import CallbackAPIVersion

from conftest import WAIT, broker_binary

BAD_USER_NAME_OR_PASSWORD = 0x86


def add_user(path, user: str, password: str) -> None:
    subprocess.run(
        [str(broker_binary()), "--passwd", str(path), "add", user],
        input=password + "\n",
        text=True,
        check=True,
        capture_output=True,
    )


def connack_code(port: int, protocol: int, username=None, password=None) -> int:
    """The CONNACK's code paho reports for one connection attempt; 3.1.1's
    return codes come as the MQTT 5 reason codes paho maps them to."""
    client = mqtt.Client(
        callback_api_version=CallbackAPIVersion.VERSION2,
        client_id="auth-probe",
        protocol=protocol,
        reconnect_on_failure=False,
    )
    if username is not None:
        client.username_pw_set(username, password)
    codes: queue.Queue = queue.Queue()
    client.on_connect = lambda _c, _u, _f, reason_code, _p: codes.put(reason_code)
    client.connect("127.0.0.1", port)
    client.loop_start()
    try:
        return codes.get(timeout=WAIT).value
    finally:
        client.disconnect()
        client.loop_stop()


@pytest.fixture
def guarded(start_broker, tmp_path):
    """A broker whose one door admits the users of its password file only."""
    path = tmp_path / "clients.passwd"
    add_user(path, "paho", "correct horse")
    broker = start_broker(mqtt_yaml=f"password_file: {path}")
    return broker, path


@pytest.mark.parametrize("protocol", [mqtt.MQTTv5, mqtt.MQTTv311])
def test_each_credential_gets_its_connack(guarded, protocol):
    broker, _ = guarded
    assert connack_code(broker.port, protocol, "paho", "correct horse") == 0
    for username, password in [
        ("paho", "wrong"),
        ("stranger", "correct horse"),
        ("paho", None),
        (None, None),
    ]:
        code = connack_code(broker.port, protocol, username, password)
        assert code == BAD_USER_NAME_OR_PASSWORD, (username, code)


def test_sigusr1_puts_a_new_user_in_force(guarded):
    broker, path = guarded
    add_user(path, "late", "arrival")
    assert connack_code(broker.port, mqtt.MQTTv5, "late", "arrival") == BAD_USER_NAME_OR_PASSWORD
    broker.process.send_signal(signal.SIGUSR1)
    broker.wait_for_log("SIGUSR1: read again and in force")
    assert connack_code(broker.port, mqtt.MQTTv5, "late", "arrival") == 0
