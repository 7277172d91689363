"""Fixtures for driving the real `saguin` binary with the paho-mqtt client.

Every test gets its own broker process on a port the kernel picks, with its
configuration in the test's own temporary directory, so tests can run in
parallel. Waits are on conditions (queues and conditions fed by paho callbacks,
or lines of the broker's log), never on a bare sleep, and each gives up after
`WAIT` seconds so a failure is quick.
"""

from __future__ import annotations

import os
import queue
import re
import signal
import socket
import subprocess
import textwrap
import threading
import time
from pathlib import Path

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

REPO = Path(__file__).resolve().parents[2]

# Longest any single wait may take; a passing test never gets near it.
WAIT = 5.0

BOUND_RE = re.compile(r"listener \S+ bound to 127\.0\.0\.1:(\d+)")


def redb_storage(file_name: str) -> str:
    """A `broker.storage` block with one redb provider, `local`, keeping its
    file in the test's own directory, and no default retention."""
    return f"""
storage:
  default: local
  default_retention_period: none
  default_retention_bytes: none
  providers:
    local:
      type: redb
      file_path: {{dir}}/{file_name}
      max_bytes: 64MiB
"""


def broker_binary() -> Path:
    if os.environ.get("SAGUIN_BIN"):
        return Path(os.environ["SAGUIN_BIN"])
    target = Path(os.environ.get("CARGO_TARGET_DIR") or REPO / "target")
    if not target.is_absolute():
        target = REPO / target
    return target / "debug" / "saguin"


class Broker:
    """One broker process; its log lines are kept for waits and for failures."""

    def __init__(self, directory: Path, extra_yaml: str, top_yaml: str = "", mqtt_yaml: str = "", door_yaml: str = "",
                 listen_yaml: str = ""):
        self.config_path = directory / "saguin.yaml"
        # `extra_yaml` is written as if at column 0 under `broker:`, and
        # `top_yaml` (channels) after it; `{dir}` in either is this broker's
        # own directory.
        extra_yaml = extra_yaml.replace("{dir}", str(directory))
        top = textwrap.dedent(top_yaml).replace("{dir}", str(directory)).strip("\n")
        extra = textwrap.indent(textwrap.dedent(extra_yaml).strip("\n"), "  ")
        # `mqtt_yaml` goes under `broker.mqtt:`, beside `listen:`.
        mqtt_keys = textwrap.indent(textwrap.dedent(mqtt_yaml).strip("\n"), "    ")
        # `door_yaml` (a `tls` block, say) goes inside the one tcp door.
        door = textwrap.indent(textwrap.dedent(door_yaml).strip("\n"), " " * 8)
        # `listen_yaml` (a `ws` door, say) goes under `listen:`, beside it.
        others = textwrap.indent(textwrap.dedent(listen_yaml).replace("{dir}", str(directory)).strip("\n"), " " * 6)
        self.config_path.write_text(
            "broker:\n"
            "  id: interop\n"
            "  log_level: debug\n"
            "  mqtt:\n"
            + (mqtt_keys.replace("{dir}", str(directory)) + "\n" if mqtt_keys.strip() else "")
            + "    listen:\n"
            "      tcp:\n"
            "        address: 127.0.0.1:0\n"
            + (door + "\n" if door.strip() else "")
            + (others + "\n" if others.strip() else "")
            + (extra + "\n" if extra.strip() else "")
            + (top + "\n" if top.strip() else "")
        )
        binary = broker_binary()
        if not binary.exists():
            pytest.fail(f"broker binary {binary} not found: run `cargo build` or set SAGUIN_BIN")
        self.lines: list[str] = []
        self._lines_changed = threading.Condition()
        ports: queue.Queue = queue.Queue()
        self.process = subprocess.Popen(
            [str(binary), "--config", str(self.config_path)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
        )
        self._reader = threading.Thread(target=self._read, args=(ports,), daemon=True)
        self._reader.start()
        try:
            port = ports.get(timeout=20)
        except queue.Empty:
            port = None
        if port is None:
            self.stop()
            pytest.fail("broker did not report its port:\n" + self.log())
        self.port: int = port

    def _read(self, ports: queue.Queue) -> None:
        for line in self.process.stdout:
            with self._lines_changed:
                self.lines.append(line.rstrip("\n"))
                self._lines_changed.notify_all()
            match = BOUND_RE.search(line)
            if match:
                ports.put(int(match.group(1)))
        ports.put(None)  # EOF: the broker stopped before (or after) binding

    def wait_for_log(self, fragment: str, timeout: float = WAIT) -> str:
        """Waits until a log line contains `fragment`, and returns it."""
        deadline = time.monotonic() + timeout
        with self._lines_changed:
            while True:
                for line in self.lines:
                    if fragment in line:
                        return line
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"no broker log line containing {fragment!r}")
                self._lines_changed.wait(left)

    def door_port(self, name: str) -> int:
        """The port the door `name` bound, from its log line."""
        line = self.wait_for_log(f"listener {name} bound to 127.0.0.1:")
        return int(line.rsplit(":", 1)[1])

    def log(self) -> str:
        with self._lines_changed:
            return "\n".join(self.lines)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        # The reader ends at EOF, so the log is complete once it has.
        self._reader.join(timeout=WAIT)
        self.process.stdout.close()


class Client:
    """A paho client on its own loop thread, with its callbacks recorded.

    Received messages, CONNACKs and disconnects go into queues; SUBACK and
    publish completions are kept by message id, so a test can wait on the
    exact packet it caused.
    """

    def __init__(
        self,
        port: int,
        client_id: str,
        protocol: int = mqtt.MQTTv5,
        clean_start: bool = True,
        session_expiry: int | None = None,
        connect_properties: Properties | None = None,
        keepalive: int = 60,
        will: dict | None = None,
        username: str | None = None,
        password: str | None = None,
        tls: dict | None = None,
        transport: str = "tcp",
    ):
        self.port = port
        self.protocol = protocol
        self.messages: queue.Queue = queue.Queue()
        self.connacks: queue.Queue = queue.Queue()
        self.disconnects: queue.Queue = queue.Queue()
        self._acks: dict = {}
        self._acks_changed = threading.Condition()
        kwargs = {}
        if protocol != mqtt.MQTTv5:
            kwargs["clean_session"] = clean_start
        # No reconnecting: a test that is disconnected must stay disconnected,
        # or a taken-over client would take the session back.
        self.paho = mqtt.Client(
            callback_api_version=CallbackAPIVersion.VERSION2,
            client_id=client_id,
            protocol=protocol,
            reconnect_on_failure=False,
            transport=transport,
            **kwargs,
        )
        self.paho.on_connect = self._on_connect
        self.paho.on_message = lambda _c, _u, message: self.messages.put(message)
        self.paho.on_disconnect = self._on_disconnect
        self.paho.on_subscribe = self._on_subscribe
        self.paho.on_publish = self._on_publish
        if will:
            self.paho.will_set(**will)
        if username is not None:
            self.paho.username_pw_set(username, password)
        if tls:
            # paho's tls_set: ca_certs, and certfile/keyfile for a client
            # certificate. The broker's name is always verified.
            self.paho.tls_set(**tls)
        connect_kwargs = {}
        if protocol == mqtt.MQTTv5:
            connect_kwargs["clean_start"] = clean_start
            properties = connect_properties or Properties(PacketTypes.CONNECT)
            if session_expiry is not None:
                properties.SessionExpiryInterval = session_expiry
            connect_kwargs["properties"] = properties
        self.paho.connect("127.0.0.1", port, keepalive=keepalive, **connect_kwargs)
        self.paho.loop_start()
        try:
            connack = self.connacks.get(timeout=WAIT)
        except queue.Empty:
            self.paho.loop_stop()
            raise AssertionError(f"no CONNACK for {client_id!r}") from None
        self.session_present, self.reason_code, self.connack_properties = connack
        if self.reason_code.value != 0:
            self.paho.loop_stop()
            raise AssertionError(f"CONNACK refused {client_id!r}: {self.reason_code}")

    # -- callbacks (paho's loop thread) --

    def _on_connect(self, _client, _userdata, flags, reason_code, properties):
        self.connacks.put((flags.session_present, reason_code, properties))

    def _on_disconnect(self, _client, _userdata, _flags, reason_code, properties):
        self.disconnects.put((reason_code, properties))

    def _record(self, mid, value):
        with self._acks_changed:
            self._acks[mid] = value
            self._acks_changed.notify_all()

    def _on_subscribe(self, _client, _userdata, mid, reason_codes, _properties):
        self._record(mid, reason_codes)

    def _on_publish(self, _client, _userdata, mid, reason_code, _properties):
        self._record(mid, reason_code)

    def _wait_ack(self, mid: int, what: str):
        deadline = time.monotonic() + WAIT
        with self._acks_changed:
            while mid not in self._acks:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"no {what} for message id {mid}")
                self._acks_changed.wait(left)
            return self._acks.pop(mid)

    # -- what tests call --

    def subscribe(
        self,
        topic: str,
        qos: int = 0,
        options: mqtt.SubscribeOptions | None = None,
        subscription_id: int | None = None,
        check_filter: bool = True,
    ) -> list[int]:
        """Subscribes and returns the SUBACK's reason codes as integers.

        `check_filter=False` lets through a filter paho would refuse to send,
        to see the broker refuse it.
        """
        if not check_filter:
            self.paho._filter_wildcard_len_check = lambda _filter: mqtt.MQTT_ERR_SUCCESS
        properties = None
        if subscription_id is not None:
            properties = Properties(PacketTypes.SUBSCRIBE)
            properties.SubscriptionIdentifier = subscription_id
        if self.protocol == mqtt.MQTTv5:
            options = options or mqtt.SubscribeOptions(qos=qos)
            result, mid = self.paho.subscribe(topic, options=options, properties=properties)
        else:
            result, mid = self.paho.subscribe(topic, qos=qos)
        assert result == mqtt.MQTT_ERR_SUCCESS, result
        return [code.value for code in self._wait_ack(mid, "SUBACK")]

    def publish(
        self,
        topic: str,
        payload: bytes | str = b"",
        qos: int = 0,
        retain: bool = False,
        properties: Properties | None = None,
    ) -> int:
        """Publishes and waits until paho reports it done (PUBACK/PUBCOMP
        above QoS 0); returns the reason code paho reported."""
        info = self.paho.publish(topic, payload, qos=qos, retain=retain, properties=properties)
        assert info.rc == mqtt.MQTT_ERR_SUCCESS, info.rc
        return self._wait_ack(info.mid, "publish completion").value

    def expect(self, timeout: float = WAIT) -> mqtt.MQTTMessage:
        try:
            return self.messages.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError("no message arrived") from None

    def collect_until(self, marker_topic: str) -> list[mqtt.MQTTMessage]:
        """The messages that arrive before one on `marker_topic`.

        The broker sends one session's deliveries in order, so a marker
        published after the event under test proves nothing else is coming.
        """
        before = []
        while True:
            message = self.expect()
            if message.topic == marker_topic:
                return before
            before.append(message)

    def drop(self) -> None:
        """Ends the connection without DISCONNECT, as a crashing device would."""
        self.paho.socket().shutdown(socket.SHUT_RDWR)
        self.disconnects.get(timeout=WAIT)
        self.paho.loop_stop()

    def disconnect(self, reasoncode=None, properties=None) -> None:
        self.paho.disconnect(reasoncode=reasoncode, properties=properties)
        self.paho.loop_stop()

    def close(self) -> None:
        if self.paho.is_connected():
            self.paho.disconnect()
        self.paho.loop_stop()


@pytest.fixture
def start_broker(tmp_path):
    """Factory: `start_broker(extra_yaml)` starts a broker whose configuration
    has `extra_yaml` (e.g. "limits:\\n  max_keepalive: 5s") under `broker:`."""
    started: list[Broker] = []

    def start(extra_yaml: str = "", top_yaml: str = "", mqtt_yaml: str = "", door_yaml: str = "",
              listen_yaml: str = "") -> Broker:
        directory = tmp_path / f"broker{len(started)}"
        directory.mkdir()
        broker = Broker(directory, extra_yaml, top_yaml, mqtt_yaml, door_yaml, listen_yaml)
        started.append(broker)
        return broker

    yield start
    for broker in started:
        broker.stop()
        # Shown by pytest only when the test failed.
        print(f"--- broker log ({broker.config_path}) ---\n{broker.log()}")


@pytest.fixture
def broker(start_broker) -> Broker:
    """A broker on the default limits."""
    return start_broker()


@pytest.fixture
def connect(start_broker):
    """Factory: `connect(broker, client_id, **Client options)` returns a
    connected `Client`; every client is closed before the brokers stop."""
    clients: list[Client] = []

    def make(broker: Broker, client_id: str, port: int | None = None, **kwargs) -> Client:
        client = Client(port or broker.port, client_id, **kwargs)
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()
