//! MQTT on Unix-socket doors, over real sockets: the stock mosquitto
//! clients by the socket's path and through `socat`, the lock that keeps
//! one broker per socket, the peer the kernel names, and `proxy_protocol`
//! with headers built here and with HAProxy terminating TLS in front.

mod common;

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::certs::Authority;
use common::proxy::{proxy_v2, VERIFIED};
use common::{
    connect_packet, free_port, have_mosquitto_clients, have_tools, BrokerProcess, RawClient,
    Received, Stream, TempDir, WAIT,
};
use saguin::codec::{Packet, ProtocolVersion, Publish, QoS};

/// A `unix` door at `socket` with `keys` (lines at its own indent) beside
/// the test broker's TCP door.
fn unix_door(socket: &Path, keys: &str) -> String {
    format!("      unix:\n        path: {}\n{keys}", socket.display())
}

/// A mosquitto client (`tool`) at 127.0.0.1:`port`, MQTT 5 and QoS 1.
fn mosquitto(tool: &str, port: u16) -> Command {
    let mut command = Command::new(tool);
    command.args([
        "-h",
        "127.0.0.1",
        "-p",
        &port.to_string(),
        "-V",
        "5",
        "-q",
        "1",
    ]);
    command
}

/// Waits until something accepts connections on `port`.
fn wait_for_port(port: u16, what: &str) {
    let deadline = Instant::now() + WAIT;
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "{what} did not listen on {port}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A process the test started, ended with the test.
struct Helper(Child);

impl Drop for Helper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// This process's user id, as the kernel reports it to the broker.
fn own_uid() -> u32 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[test]
fn mosquitto_clients_reach_a_unix_door_through_socat_and_by_its_path() {
    let test = "mosquitto_clients_reach_a_unix_door_through_socat_and_by_its_path";
    if !have_mosquitto_clients(test) || !have_tools(test, &["socat"], "socat") {
        return;
    }
    let dir = TempDir::new("unix-mosquitto");
    let socket = dir.path().join("saguin.sock");
    let mut broker = BrokerProcess::start_in(dir.path(), &unix_door(&socket, ""), "");
    broker.wait_for_log(&format!("listener unix bound to {}", socket.display()));
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&socket).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o660, "the default mode: owner and group");

    // socat turns a TCP port into the socket for a client that has no
    // socket path to give.
    let port = free_port();
    let socat = Command::new("socat")
        .arg(format!("TCP-LISTEN:{port},bind=127.0.0.1,reuseaddr,fork"))
        .arg(format!("UNIX-CONNECT:{}", socket.display()))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start socat");
    let _socat = Helper(socat);
    wait_for_port(port, "socat");
    let published = mosquitto("mosquitto_pub", port)
        .arg("-r")
        .args([
            "-i",
            "through-socat",
            "-t",
            "door/a",
            "-m",
            "hello through socat",
        ])
        .output()
        .unwrap();
    assert!(published.status.success(), "{published:?}");
    // The retained value comes back by the socket's own path.
    let received = Command::new("mosquitto_sub")
        .arg("--unix")
        .arg(&socket)
        .args([
            "-V", "5", "-q", "1", "-C", "1", "-W", "20", "-v", "-t", "door/#",
        ])
        .output()
        .unwrap();
    assert!(received.status.success(), "{received:?}");
    assert_eq!(
        String::from_utf8_lossy(&received.stdout).trim(),
        "door/a hello through socat"
    );
    broker.wait_for_log(&format!(
        "client through-socat connected from uid {}",
        own_uid()
    ));
}

/// Runs a second broker on `config` to its end: whether it refused to
/// start (stopped of itself, failing), and what it logged. One still
/// running after `WAIT` started where it should not have, and is killed.
fn run_to_end(dir: &Path, config: &str) -> (bool, String) {
    let path = dir.join("second.yaml");
    std::fs::write(&path, config).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_saguin"))
        .arg("--config")
        .arg(&path)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + WAIT;
    let mut stopped = child.try_wait().unwrap();
    while stopped.is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
        stopped = child.try_wait().unwrap();
    }
    if stopped.is_none() {
        let _ = child.kill();
    }
    let output = child.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&output.stdout).into_owned()
        + &String::from_utf8_lossy(&output.stderr);
    (stopped.is_some_and(|status| !status.success()), said)
}

fn config_with_socket(socket: &Path) -> String {
    format!(
        "broker:\n  id: test\n  mqtt:\n    listen:\n      tcp:\n        address: 127.0.0.1:0\n{}",
        unix_door(socket, "")
    )
}

#[test]
fn a_live_brokers_socket_is_refused_naming_its_lock_and_a_stale_one_is_replaced() {
    let dir = TempDir::new("unix-lock");
    let socket = dir.path().join("saguin.sock");
    let mut first = BrokerProcess::start_with_config(dir.path(), &config_with_socket(&socket));
    first.wait_for_log("listener unix bound to");

    let (refused, said) = run_to_end(dir.path(), &config_with_socket(&socket));
    assert!(
        refused,
        "a second broker on a served socket must not start:\n{said}"
    );
    assert!(
        said.contains(&format!(
            "broker.mqtt.listen.unix \"unix\": cannot listen on {}: another running broker serves it: {}.lock is locked",
            socket.display(),
            socket.display()
        )),
        "{said}"
    );
    let mut client = RawClient::open_unix(&socket, ProtocolVersion::V5);
    assert_eq!(
        client.connect_with(connect_packet(ProtocolVersion::V5, "still")),
        0
    );
    client.assert_alive();

    // Killed, the broker leaves its socket behind; the next start
    // replaces it without anybody removing a file.
    first.kill();
    assert!(socket.exists());
    let mut next = BrokerProcess::start_with_config(dir.path(), &config_with_socket(&socket));
    next.wait_for_log("listener unix bound to");
    let mut client = RawClient::open_unix(&socket, ProtocolVersion::V311);
    assert_eq!(
        client.connect_with(connect_packet(ProtocolVersion::V311, "after")),
        0
    );
    drop(client);
    // A clean stop removes the socket and keeps the lock file.
    assert!(next.terminate().success());
    assert!(!socket.exists());
    assert!(dir.path().join("saguin.sock.lock").exists());

    // Anything at the path that is not a socket is left alone.
    std::fs::write(&socket, "not a socket").unwrap();
    let (refused, said) = run_to_end(dir.path(), &config_with_socket(&socket));
    assert!(refused, "{said}");
    assert!(
        said.contains("exists and is not a socket; it is left alone"),
        "{said}"
    );
    assert_eq!(std::fs::read_to_string(&socket).unwrap(), "not a socket");
}

/// A broker with a Unix door carrying `door_keys`, `mqtt_keys` under
/// `broker.mqtt`, and an operations door on loopback; its socket and the
/// operations door's address.
fn broker_with_operations(
    dir: &Path,
    door_keys: &str,
    mqtt_keys: &str,
) -> (BrokerProcess, PathBuf, String) {
    let socket = dir.join("saguin.sock");
    let yaml = format!(
        "{}{mqtt_keys}  operations:\n    listen:\n      tcp:\n        address: 127.0.0.1:0\n",
        unix_door(&socket, door_keys)
    );
    let mut broker = BrokerProcess::start_in(dir, &yaml, "");
    let line = broker.wait_for_log("operations door tcp bound to");
    let address = line.rsplit("bound to ").next().unwrap().trim().to_string();
    broker.wait_for_log("listener unix bound to");
    (broker, socket, address)
}

/// `/v1/operations/sessions` from the operations door at `address`.
fn sessions(address: &str) -> String {
    common::http::get_text(address, "/v1/operations/sessions")
}

#[test]
fn a_unix_doors_peer_is_named_by_the_kernel_in_the_log_and_in_sessions() {
    let dir = TempDir::new("unix-peer");
    let (mut broker, socket, operations) = broker_with_operations(dir.path(), "", "");
    let mut client = RawClient::open_unix(&socket, ProtocolVersion::V5);
    assert_eq!(
        client.connect_with(connect_packet(ProtocolVersion::V5, "local-tool")),
        0
    );
    let peer = format!("uid {} (pid {})", own_uid(), std::process::id());
    broker.wait_for_log(&format!("client local-tool connected from {peer}"));
    let listed = sessions(&operations);
    assert!(
        listed.contains("\"client_id\":\"local-tool\"")
            && listed.contains(&format!("\"remote\":\"{peer}\"")),
        "{listed}"
    );
    // A TCP client is named by its socket's peer address.
    let _tcp = RawClient::connect(&broker.address(), ProtocolVersion::V5, "on-tcp");
    let listed = sessions(&operations);
    assert!(
        listed.contains("\"client_id\":\"on-tcp\",\"connected\":true,\"user\":null,\"protocol\":5,\"listener\":\"tcp\",\"remote\":\"127.0.0.1:"),
        "{listed}"
    );
}

/// A role granting each named client its own alerts.
const ACL: &str = "roles:\n  device:\n    - topic: alerts/%u/#\n      allow: [read, write]\nusers:\n  \"device-*\": [device]\n";

/// A broker whose Unix door reads PROXY headers, with an acl_file on
/// `%u` and a password file.
fn proxied_broker(dir: &Path) -> (BrokerProcess, PathBuf, String) {
    std::fs::write(dir.join("acl.yaml"), ACL).unwrap();
    use saguin::auth::hash::{PasswordHash, SALT_BYTES};
    let hash = PasswordHash::new_pbkdf2(b"secret", &[7; SALT_BYTES]);
    std::fs::write(dir.join("clients.passwd"), format!("bob:{hash}\n")).unwrap();
    let mqtt = format!(
        "    password_file: {0}/clients.passwd\n    acl_file: {0}/acl.yaml\n",
        dir.display()
    );
    broker_with_operations(dir, "        proxy_protocol: true\n", &mqtt)
}

fn publish_qos1(client: &mut RawClient, topic: &str, packet_id: u16) -> u8 {
    client.send(&Packet::Publish(Publish {
        qos: QoS::AtLeastOnce,
        topic: topic.into(),
        packet_id: Some(packet_id),
        payload: b"fire".to_vec(),
        ..Publish::default()
    }));
    loop {
        match client.recv() {
            Received::Packet(Packet::Puback(ack)) if ack.packet_id == packet_id => {
                return ack.reason_code.0
            }
            Received::Packet(_) => continue,
            Received::Closed => panic!("closed while publishing"),
        }
    }
}

/// A client on `socket` that first writes `header`.
fn behind_proxy(socket: &Path, header: &[u8]) -> RawClient {
    let mut stream = UnixStream::connect(socket).unwrap();
    stream.write_all(header).unwrap();
    RawClient::over(Stream::Unix(stream), ProtocolVersion::V5)
}

#[test]
fn proxy_protocol_names_the_client_by_the_certificate_the_proxy_verified() {
    let dir = TempDir::new("unix-proxy");
    let (mut broker, socket, operations) = proxied_broker(dir.path());
    let mut device = behind_proxy(&socket, &proxy_v2(Some((VERIFIED, 0, Some("device-7")))));
    assert_eq!(
        device.connect_with(connect_packet(ProtocolVersion::V5, "d7")),
        0
    );
    broker.wait_for_log("a proxy speaks for 192.0.2.7:40000, named \"device-7\"");
    broker.wait_for_log("client d7 connected from 192.0.2.7:40000");
    broker.wait_for_log("client d7 is user \"device-7\", named by its certificate");
    // The ACL is asked of the certificate's name.
    assert_eq!(publish_qos1(&mut device, "alerts/device-7/fire", 1), 0x00);
    assert_eq!(publish_qos1(&mut device, "alerts/device-8/fire", 2), 0x87);
    assert!(sessions(&operations).contains("\"remote\":\"192.0.2.7:40000\""));

    // A certificate the proxy could not verify names nobody, so the
    // password file is asked, and nothing was offered.
    let mut unverified = behind_proxy(&socket, &proxy_v2(Some((VERIFIED, 21, Some("device-7")))));
    assert_eq!(
        unverified.connect_with(connect_packet(ProtocolVersion::V5, "u")),
        0x86
    );
    broker.wait_for_log("verify_result=21");
    // With a password instead, the door's file admits it.
    let mut with_password = behind_proxy(&socket, &proxy_v2(None));
    let mut connect = connect_packet(ProtocolVersion::V5, "b");
    connect.username = Some("bob".into());
    connect.password = Some(b"secret".to_vec());
    assert_eq!(with_password.connect_with(connect), 0);

    // No header, or a v1 one, and the connection is closed, logged.
    let mut bare = RawClient::open_unix(&socket, ProtocolVersion::V5);
    bare.send(&Packet::Connect(Box::new(connect_packet(
        ProtocolVersion::V5,
        "bare",
    ))));
    assert_eq!(bare.recv(), Received::Closed);
    broker.wait_for_log("did not start with a PROXY protocol v2 header");
    let mut v1 = behind_proxy(&socket, b"PROXY TCP4 192.0.2.7 192.0.2.1 40000 1883\r\n");
    v1.send(&Packet::Connect(Box::new(connect_packet(
        ProtocolVersion::V5,
        "v1",
    ))));
    assert_eq!(v1.recv(), Received::Closed);
    broker.wait_for_log("send-proxy-v2-ssl-cn");
    device.assert_alive();
}

/// HAProxy terminating TLS on `port`, verifying client certificates
/// against `ca`, and handing each connection to `socket` behind a PROXY
/// v2 header carrying the certificate's Common Name.
fn haproxy(dir: &Path, port: u16, server_pem: &Path, ca: &Path, socket: &Path) -> Helper {
    let config = dir.join("haproxy.cfg");
    std::fs::write(
        &config,
        format!(
            "defaults\n  mode tcp\n  timeout connect 5s\n  timeout client 60s\n  timeout server 60s\n\
             frontend mqtts\n  bind 127.0.0.1:{port} ssl crt {} ca-file {} verify required\n  default_backend saguin\n\
             backend saguin\n  server broker unix@{} send-proxy-v2-ssl-cn\n",
            server_pem.display(),
            ca.display(),
            socket.display()
        ),
    )
    .unwrap();
    let child = Command::new("haproxy")
        .arg("-db")
        .arg("-f")
        .arg(&config)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start haproxy");
    let helper = Helper(child);
    wait_for_port(port, "haproxy");
    helper
}

#[test]
fn haproxy_terminates_tls_and_the_broker_logs_the_real_source_and_authorizes_the_certificates_name()
{
    let test = "haproxy_terminates_tls_and_the_broker_logs_the_real_source_and_authorizes_the_certificates_name";
    if !have_mosquitto_clients(test)
        || !have_tools(test, &["haproxy", "openssl"], "haproxy openssl")
    {
        return;
    }
    let dir = TempDir::new("unix-haproxy");
    let ca = Authority::new(dir.path(), "estate-ca");
    let (cert, key) = ca.server("haproxy");
    let server_pem = dir.path().join("haproxy-combined.pem");
    let combined =
        std::fs::read_to_string(&cert).unwrap() + &std::fs::read_to_string(&key).unwrap();
    std::fs::write(&server_pem, combined).unwrap();
    let device = ca.issue(
        "device-7",
        "/CN=device-7",
        Some("extendedKeyUsage=clientAuth"),
        30,
    );
    let (mut broker, socket, operations) = proxied_broker(dir.path());
    let port = free_port();
    let _haproxy = haproxy(dir.path(), port, &server_pem, &ca.pem(), &socket);

    let tls = |command: &mut Command| {
        command
            .arg("--cafile")
            .arg(ca.pem())
            .arg("--cert")
            .arg(&device.0)
            .arg("--key")
            .arg(&device.1);
    };
    // A subscriber holding the certificate waits for its own alerts.
    let mut sub = mosquitto("mosquitto_sub", port);
    tls(&mut sub);
    let subscriber = sub
        .args([
            "-i",
            "watcher",
            "-t",
            "alerts/device-7/#",
            "-C",
            "1",
            "-W",
            "20",
            "-v",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    broker.wait_for_log("client watcher connected from 127.0.0.1:");
    let source = broker
        .wait_for_log("a proxy speaks for 127.0.0.1:")
        .split("a proxy speaks for ")
        .nth(1)
        .unwrap()
        .split(',')
        .next()
        .unwrap()
        .to_string();
    assert!(broker
        .wait_for_log(&format!("a proxy speaks for {source}"))
        .contains("named \"device-7\" by the certificate it verified"));
    broker.wait_for_log("client watcher is user \"device-7\", named by its certificate");
    assert!(sessions(&operations).contains(&format!("\"remote\":\"{source}\"")));

    // Another device's topic is refused by the ACL on the certificate's name.
    let mut refused = mosquitto("mosquitto_pub", port);
    tls(&mut refused);
    let refused = refused
        .args([
            "-i",
            "intruding",
            "-t",
            "alerts/device-8/fire",
            "-m",
            "not mine",
        ])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&refused.stderr).into_owned()
        + &String::from_utf8_lossy(&refused.stdout);
    assert!(said.contains("Not authorized"), "{refused:?}");
    let mut allowed = mosquitto("mosquitto_pub", port);
    tls(&mut allowed);
    let allowed = allowed
        .args(["-i", "own", "-t", "alerts/device-7/fire", "-m", "mine"])
        .output()
        .unwrap();
    assert!(allowed.status.success(), "{allowed:?}");
    let received = subscriber.wait_with_output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&received.stdout).trim(),
        "alerts/device-7/fire mine"
    );
}
