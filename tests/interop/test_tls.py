"""paho-mqtt through a TLS door: the broker verified by its authority, a
client certificate verified by the broker and taken as the user name, and
the clients each side refuses. Certificates are made with `openssl` for
each test."""

from __future__ import annotations

import shutil
import ssl
import subprocess
from pathlib import Path

import paho.mqtt.client as mqtt
import pytest

from conftest import Client

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl is not installed")


def openssl(directory: Path, *args: str) -> None:
    subprocess.run(["openssl", *args], cwd=directory, check=True, capture_output=True)


def authority(directory: Path, name: str) -> Path:
    openssl(directory, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
            "-days", "30", "-nodes", "-subj", f"/CN={name}",
            "-keyout", f"{name}-key.pem", "-out", f"{name}.pem")
    return directory / f"{name}.pem"


def issue(directory: Path, ca: str, name: str, subject: str, extension: str) -> tuple[Path, Path]:
    """A key pair for `subject` signed by the authority `ca`, carrying
    `extension` (which also makes it X.509 version 3)."""
    openssl(directory, "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-subj", subject, "-addext", extension,
            "-keyout", f"{name}-key.pem", "-out", f"{name}.csr")
    openssl(directory, "x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem",
            "-CAkey", f"{ca}-key.pem", "-CAcreateserial", "-days", "30",
            "-copy_extensions", "copy", "-out", f"{name}.pem")
    return directory / f"{name}.pem", directory / f"{name}-key.pem"


@pytest.fixture
def pki(tmp_path):
    directory = tmp_path / "pki"
    directory.mkdir()
    ca = authority(directory, "estate-ca")
    stranger = authority(directory, "stranger-ca")
    server = issue(directory, "estate-ca", "broker", "/CN=broker", "subjectAltName=IP:127.0.0.1")
    device = issue(directory, "estate-ca", "device-7", "/CN=device-7", "extendedKeyUsage=clientAuth")
    intruder = issue(directory, "stranger-ca", "intruder", "/CN=device-7", "extendedKeyUsage=clientAuth")
    return {"ca": ca, "stranger": stranger, "server": server, "device": device, "intruder": intruder}


def mutual_tls_broker(start_broker, pki):
    cert, key = pki["server"]
    return start_broker(door_yaml=f"""
        tls:
          cert_file: {cert}
          key_file: {key}
          client_ca_file: {pki["ca"]}
    """)


def test_a_certified_client_publishes_and_receives_under_its_certificate_name(start_broker, connect, pki):
    broker = mutual_tls_broker(start_broker, pki)
    cert, key = pki["device"]
    tls = {"ca_certs": str(pki["ca"]), "certfile": str(cert), "keyfile": str(key)}
    client = connect(broker, "paho-device", tls=tls)
    broker.wait_for_log('client paho-device is user "device-7", named by its certificate')
    assert client.subscribe("tls/echo", qos=1) == [1]
    assert client.publish("tls/echo", b"over tls", qos=1) == 0
    assert client.expect().payload == b"over tls"


def test_a_client_without_a_certificate_is_refused(start_broker, pki):
    broker = mutual_tls_broker(start_broker, pki)
    with pytest.raises((AssertionError, ssl.SSLError, OSError)):
        Client(broker.port, "paho-anonymous", tls={"ca_certs": str(pki["ca"])})
    broker.wait_for_log("peer sent no certificates")


def test_a_certificate_from_another_authority_is_refused(start_broker, pki):
    broker = mutual_tls_broker(start_broker, pki)
    cert, key = pki["intruder"]
    tls = {"ca_certs": str(pki["ca"]), "certfile": str(cert), "keyfile": str(key)}
    with pytest.raises((AssertionError, ssl.SSLError, OSError)):
        Client(broker.port, "paho-intruder", tls=tls)
    broker.wait_for_log("UnknownIssuer")


def test_paho_refuses_a_broker_its_authority_did_not_sign(start_broker, pki):
    broker = mutual_tls_broker(start_broker, pki)
    cert, key = pki["device"]
    tls = {"ca_certs": str(pki["stranger"]), "certfile": str(cert), "keyfile": str(key)}
    with pytest.raises(ssl.SSLCertVerificationError):
        Client(broker.port, "paho-doubting", tls=tls)
