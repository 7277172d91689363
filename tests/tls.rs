//! TLS doors through stock clients: certificates made with `openssl` for
//! each test, `mosquitto_pub`/`mosquitto_sub` with `--cafile`, `--cert`
//! and `--key`, and the certificate swapped in place by SIGUSR1.

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Instant;

use common::certs::Authority;
use common::{have_mosquitto_clients, have_tools, BrokerProcess, TempDir, WAIT};

/// An extension for a device's certificate: what it is for, and what
/// makes it X.509 version 3.
const CLIENT_AUTH: &str = "extendedKeyUsage=clientAuth";

/// openssl to make the certificates, and the mosquitto clients to use them.
fn have_tools_for(test: &str) -> bool {
    have_tools(test, &["openssl"], "openssl") && have_mosquitto_clients(test)
}

/// Later openssl releases issue version 3 even without extensions.
fn ca_issues_v3_anyway(cert: &Path) -> bool {
    let text = Command::new("openssl")
        .args(["x509", "-noout", "-text", "-in"])
        .arg(cert)
        .output()
        .unwrap();
    !String::from_utf8_lossy(&text.stdout).contains("Version: 1 ")
}

/// What a mosquitto client is given to reach a TLS door.
struct Client<'a> {
    port: u16,
    cafile: &'a Path,
    identity: Option<&'a (PathBuf, PathBuf)>,
}

impl Client<'_> {
    fn args(&self, command: &mut Command, client_id: &str, topic: &str) {
        command
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-V",
                "5",
                "-q",
                "1",
            ])
            .args(["-i", client_id, "-t", topic, "--cafile"])
            .arg(self.cafile);
        if let Some((cert, key)) = self.identity {
            command.arg("--cert").arg(cert).arg("--key").arg(key);
        }
    }

    /// Publishes one retained message; whether the broker took it.
    fn publish(&self, topic: &str, payload: &str) -> bool {
        let mut command = Command::new("mosquitto_pub");
        self.args(&mut command, "publisher", topic);
        let output = run(command.args(["-r", "-m", payload]));
        output.status.success()
    }

    /// Subscribes and returns the first message's payload, or `None` when
    /// the connection is refused.
    fn receive_one(&self, topic: &str) -> Option<String> {
        let mut command = Command::new("mosquitto_sub");
        self.args(&mut command, "subscriber", topic);
        let output = run(command.args(["-C", "1", "-W", &WAIT.as_secs().to_string()]));
        output
            .status
            .success()
            .then(|| String::from_utf8_lossy(&output.stdout).trim().to_string())
    }

    /// A publisher that stays connected and publishes each line written
    /// to it.
    fn long_publisher(&self, topic: &str) -> Child {
        let mut command = Command::new("mosquitto_pub");
        self.args(&mut command, "long-publisher", topic);
        command
            .args(["-r", "-l"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start mosquitto_pub")
    }
}

fn run(command: &mut Command) -> Output {
    command
        .stdin(Stdio::null())
        .output()
        .expect("run a mosquitto client")
}

/// A broker with one plain door and one TLS door, `fleet`, whose `tls`
/// block holds `tls` (one key a line).
fn broker_with_tls(dir: &Path, tls: &str) -> (BrokerProcess, u16) {
    let tls: String = tls.lines().map(|l| format!("            {l}\n")).collect();
    let config = format!(
        "broker:\n  id: test\n  log_level: debug\n  limits:\n    connect_timeout: 2s\n  mqtt:\n    listen:\n      tcp:\n        - name: local\n          address: 127.0.0.1:0\n        - name: fleet\n          address: 127.0.0.1:0\n          tls:\n{tls}"
    );
    let mut broker = BrokerProcess::start_with_config(dir, &config);
    let port = broker.door_port("fleet");
    (broker, port)
}

fn tls_block(server: &(PathBuf, PathBuf), extra: &str) -> String {
    format!(
        "cert_file: {}\nkey_file: {}\n{extra}",
        server.0.display(),
        server.1.display()
    )
}

#[test]
fn stock_clients_publish_and_subscribe_through_a_tls_door() {
    if !have_tools_for("stock_clients_publish_and_subscribe_through_a_tls_door") {
        return;
    }
    let dir = TempDir::new("tls-door");
    let ca = Authority::new(dir.path(), "estate-ca");
    let stranger = Authority::new(dir.path(), "stranger-ca");
    let server = ca.server("broker");
    let (mut broker, port) = broker_with_tls(dir.path(), &tls_block(&server, ""));
    broker.wait_for_log("broker.mqtt.listen.tcp[fleet]: serving the certificate in");

    let trusting = Client {
        port,
        cafile: &ca.pem(),
        identity: None,
    };
    assert!(trusting.publish("door/state", "encrypted"));
    assert_eq!(
        trusting.receive_one("door/state").as_deref(),
        Some("encrypted")
    );

    // A client that trusts another authority refuses the broker.
    let doubting = Client {
        port,
        cafile: &stranger.pem(),
        identity: None,
    };
    assert!(!doubting.publish("door/state", "never"));

    // Plain MQTT on the TLS port gets no CONNACK; the plain door beside it
    // serves as before.
    let mut plain = common::RawClient::open(
        &format!("127.0.0.1:{port}"),
        saguin::codec::ProtocolVersion::V5,
    );
    plain.send(&saguin::codec::Packet::Connect(Box::new(
        common::connect_packet(saguin::codec::ProtocolVersion::V5, "plain"),
    )));
    assert_eq!(plain.recv_until_closed(), Vec::new());
    common::RawClient::connect(
        &broker.address(),
        saguin::codec::ProtocolVersion::V5,
        "local",
    )
    .assert_alive();
    broker.wait_for_log("broker.mqtt.listen.tcp[fleet]: TLS handshake with");
}

#[test]
fn client_certificates_are_verified_and_name_the_user() {
    if !have_tools_for("client_certificates_are_verified_and_name_the_user") {
        return;
    }
    let dir = TempDir::new("tls-clients");
    let ca = Authority::new(dir.path(), "estate-ca");
    let stranger = Authority::new(dir.path(), "stranger-ca");
    let server = ca.server("broker");
    let device = ca.issue("device-7", "/CN=device-7", Some(CLIENT_AUTH), 30);
    let san_only = ca.issue(
        "sensor",
        "/O=estate",
        Some("subjectAltName=DNS:sensor-9.example"),
        30,
    );
    let expired = ca.issue("expired", "/CN=device-old", Some(CLIENT_AUTH), -1);
    let intruder = stranger.issue("intruder", "/CN=device-7", Some(CLIENT_AUTH), 30);
    let extra = format!("client_ca_file: {}\n", ca.pem().display());
    let (mut broker, port) = broker_with_tls(dir.path(), &tls_block(&server, &extra));

    let cafile = ca.pem();
    let with = |identity| Client {
        port,
        cafile: &cafile,
        identity,
    };
    assert!(with(Some(&device)).publish("fleet/d7", "hello"));
    let line = broker.wait_for_log("named by its certificate");
    assert!(
        line.contains("client publisher is user \"device-7\""),
        "{line}"
    );
    assert_eq!(
        with(Some(&device)).receive_one("fleet/d7").as_deref(),
        Some("hello")
    );

    // With no Common Name, the first DNS name is the name.
    assert!(with(Some(&san_only)).publish("fleet/s9", "hi"));
    broker.wait_for_log("is user \"sensor-9.example\", named by its certificate");

    // Refused at the handshake: no certificate, another authority's, an
    // expired one.
    assert!(!with(None).publish("fleet/d7", "anonymous"));
    broker.wait_for_log("peer sent no certificates");
    assert!(!with(Some(&intruder)).publish("fleet/d7", "intruder"));
    broker.wait_for_log("UnknownIssuer");
    assert!(!with(Some(&expired)).publish("fleet/d7", "old"));
    broker.wait_for_log("Expired");
    // Version 1 is refused, and the log says how to reissue it.
    let v1 = ca.issue("version-1", "/CN=device-8", None, 30);
    if !ca_issues_v3_anyway(&v1.0) {
        assert!(!with(Some(&v1)).publish("fleet/d8", "v1"));
        broker.wait_for_log("is X.509 version 1, which is not accepted");
    }
    assert_eq!(
        with(Some(&device)).receive_one("fleet/d7").as_deref(),
        Some("hello")
    );
}

#[test]
fn without_require_certificate_a_client_may_come_without_one() {
    if !have_tools_for("without_require_certificate_a_client_may_come_without_one") {
        return;
    }
    let dir = TempDir::new("tls-optional");
    let ca = Authority::new(dir.path(), "estate-ca");
    let stranger = Authority::new(dir.path(), "stranger-ca");
    let server = ca.server("broker");
    let intruder = stranger.issue("intruder", "/CN=device-7", Some(CLIENT_AUTH), 30);
    let extra = format!(
        "client_ca_file: {}\nrequire_certificate: false\n",
        ca.pem().display()
    );
    let (_broker, port) = broker_with_tls(dir.path(), &tls_block(&server, &extra));
    let anonymous = Client {
        port,
        cafile: &ca.pem(),
        identity: None,
    };
    assert!(anonymous.publish("fleet/any", "no certificate"));
    // One presented is still verified.
    let intruding = Client {
        identity: Some(&intruder),
        ..anonymous
    };
    assert!(!intruding.publish("fleet/any", "intruder"));
}

#[test]
fn sigusr1_swaps_the_certificate_for_new_connections_only() {
    if !have_tools_for("sigusr1_swaps_the_certificate_for_new_connections_only") {
        return;
    }
    let dir = TempDir::new("tls-reload");
    let old_ca = Authority::new(dir.path(), "old-ca");
    let new_ca = Authority::new(dir.path(), "new-ca");
    let served = old_ca.server("broker");
    let (mut broker, port) = broker_with_tls(dir.path(), &tls_block(&served, ""));
    let old_client = Client {
        port,
        cafile: &old_ca.pem(),
        identity: None,
    };
    let new_client = Client {
        cafile: &new_ca.pem(),
        ..old_client
    };
    assert!(!new_client.publish("reload/state", "too early"));

    // A connection made before the swap, publishing on.
    let mut long = old_client.long_publisher("reload/state");
    let mut lines = long.stdin.take().unwrap();
    writeln!(lines, "before").unwrap();
    wait_for_payload(&old_client, "reload/state", "before");

    // The renewal lands: the new authority's pair over the old files.
    let renewed = new_ca.server("renewed");
    std::fs::copy(&renewed.0, &served.0).unwrap();
    std::fs::copy(&renewed.1, &served.1).unwrap();
    broker.signal("USR1");
    broker.wait_for_log("certificates re-read");

    assert!(new_client.publish("reload/other", "new certificate"));
    assert!(!old_client.publish("reload/other", "old certificate"));
    writeln!(lines, "after").unwrap();
    wait_for_payload(&new_client, "reload/state", "after");

    // A broken renewal (a key that is not the certificate's) changes
    // nothing: the pair in force stays.
    let stray = old_ca.server("stray");
    std::fs::copy(&stray.1, &served.1).unwrap();
    broker.signal("USR1");
    let error = broker.wait_for_log("ERROR");
    assert!(
        error.contains("broker.mqtt.listen.tcp[fleet].tls.key_file")
            && error.contains("is not the key of the certificate"),
        "{error}"
    );
    broker.wait_for_log("certificates not reloaded");
    assert!(new_client.publish("reload/other", "still served"));
    writeln!(lines, "still").unwrap();
    wait_for_payload(&new_client, "reload/state", "still");
    drop(lines);
    assert!(long.wait().unwrap().success());
}

/// The password files and the certificates are one reload: a broken
/// certificate keeps a user added to the password file out until both read.
#[test]
fn sigusr1_applies_password_files_and_certificates_all_or_nothing() {
    if !have_tools_for("sigusr1_applies_password_files_and_certificates_all_or_nothing") {
        return;
    }
    let dir = TempDir::new("tls-reload-both");
    let ca = Authority::new(dir.path(), "ca");
    let served = ca.server("broker");
    let kept_key = dir.path().join("kept-key.pem");
    std::fs::copy(&served.1, &kept_key).unwrap();
    // One salted hash of "hunter2"; the user name is not part of it.
    let hash = "$6$DssEkUY/ld4blukw$9EvI2OdZOnUSp3rG8Qjszy7fwnQxLXJGRPu9kUowxiIPjM9xRKwAAn/h8/6b8fmq77JWiZKEY/HdIpz+/DUDrQ==";
    let passwd = dir.path().join("clients.passwd");
    std::fs::write(&passwd, format!("bob:{hash}\n")).unwrap();
    let tls: String = tls_block(&served, "")
        .lines()
        .map(|l| format!("            {l}\n"))
        .collect();
    let config = format!(
        "broker:\n  id: test\n  log_level: debug\n  mqtt:\n    listen:\n      tcp:\n        - name: local\n          address: 127.0.0.1:0\n          password_file: {}\n        - name: fleet\n          address: 127.0.0.1:0\n          tls:\n{tls}",
        passwd.display()
    );
    let mut broker = BrokerProcess::start_with_config(dir.path(), &config);
    let local = broker.door_port("local");
    let admitted = |user: &str| {
        run(Command::new("mosquitto_pub")
            .args(["-h", "127.0.0.1", "-p", &local.to_string(), "-V", "5"])
            .args(["-u", user, "-P", "hunter2", "-t", "t", "-m", "x"]))
        .status
        .success()
    };
    assert!(admitted("bob"));
    assert!(!admitted("hank"));

    // hank is added while the served key is broken: nothing is applied.
    std::fs::write(&passwd, format!("bob:{hash}\nhank:{hash}\n")).unwrap();
    let stray = ca.server("stray");
    std::fs::copy(&stray.1, &served.1).unwrap();
    broker.signal("USR1");
    let line = broker.wait_for_log("certificates not reloaded");
    assert!(
        line.contains("ERROR")
            && line.contains("broker.mqtt.listen.tcp[fleet].tls.key_file")
            && line.contains("the password files read before stay in force"),
        "{line}"
    );
    assert!(
        !admitted("hank"),
        "the new password file waits for the certificates"
    );

    // Mended, both go into force together.
    std::fs::copy(&kept_key, &served.1).unwrap();
    broker.signal("USR1");
    let line = broker.wait_for_log("certificates re-read");
    assert!(line.contains("read again and in force"), "{line}");
    assert!(admitted("hank"));
}

/// Subscribes until the retained message on `topic` is `payload`.
fn wait_for_payload(client: &Client, topic: &str, payload: &str) {
    let deadline = Instant::now() + WAIT;
    loop {
        let got = client.receive_one(topic);
        if got.as_deref() == Some(payload) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the retained message on {topic} is {got:?}, not {payload:?}"
        );
    }
}

#[test]
fn stalled_handshakes_hold_nothing_for_long() {
    if !have_tools_for("stalled_handshakes_hold_nothing_for_long") {
        return;
    }
    let dir = TempDir::new("tls-stalled");
    let ca = Authority::new(dir.path(), "estate-ca");
    let server = ca.server("broker");
    let (mut broker, port) = broker_with_tls(dir.path(), &tls_block(&server, ""));
    // A hundred sockets that open a handshake and say nothing more.
    let mut stalled: Vec<std::net::TcpStream> = (0..100)
        .map(|_| std::net::TcpStream::connect(("127.0.0.1", port)).unwrap())
        .collect();
    for socket in &mut stalled[..50] {
        // The first bytes of a ClientHello record, then silence.
        socket.write_all(&[0x16, 0x03, 0x01, 0x02, 0x00]).unwrap();
    }
    let client = Client {
        port,
        cafile: &ca.pem(),
        identity: None,
    };
    assert!(client.publish("stalled/state", "through"));
    assert_eq!(
        client.receive_one("stalled/state").as_deref(),
        Some("through")
    );
    // Each is closed once the connect timeout runs out.
    broker.wait_for_log("did not finish in time");
    for mut socket in stalled {
        socket.set_read_timeout(Some(WAIT)).unwrap();
        let mut byte = [0u8; 1];
        let read = std::io::Read::read(&mut socket, &mut byte);
        assert!(
            matches!(read, Ok(0))
                || read
                    .as_ref()
                    .is_err_and(|e| e.kind() != std::io::ErrorKind::WouldBlock
                        && e.kind() != std::io::ErrorKind::TimedOut),
            "a stalled handshake was not closed: {read:?}"
        );
    }
}

#[test]
fn a_door_whose_files_cannot_serve_stops_the_broker_naming_door_and_file() {
    if !have_tools(
        "a_door_whose_files_cannot_serve_stops_the_broker",
        &["openssl"],
        "openssl",
    ) {
        return;
    }
    let dir = TempDir::new("tls-refusals");
    let ca = Authority::new(dir.path(), "estate-ca");
    let server = ca.server("broker");
    let other = ca.server("other");
    let check = |tls: &str| -> String {
        let tls: String = tls.lines().map(|l| format!("            {l}\n")).collect();
        let path = dir.path().join("check.yaml");
        std::fs::write(
            &path,
            format!("broker:\n  id: test\n  mqtt:\n    listen:\n      tcp:\n        - name: fleet\n          address: 127.0.0.1:0\n          tls:\n{tls}"),
        )
        .unwrap();
        let output = common::check_config(&path);
        assert!(!output.status.success(), "accepted: {tls}");
        String::from_utf8_lossy(&output.stderr).into_owned()
    };
    let missing = dir.path().join("missing.pem");
    let error = check(&format!(
        "cert_file: {}\nkey_file: {}",
        missing.display(),
        server.1.display()
    ));
    assert!(
        error.contains(&format!(
            "broker.mqtt.listen.tcp[fleet].tls.cert_file {}: cannot read it",
            missing.display()
        )),
        "{error}"
    );
    let error = check(&format!(
        "cert_file: {}\nkey_file: {}",
        server.0.display(),
        other.1.display()
    ));
    assert!(
        error.contains(&format!(
            "broker.mqtt.listen.tcp[fleet].tls.key_file {}: it is not the key of the certificate",
            other.1.display()
        )),
        "{error}"
    );
    let error = check(&format!(
        "cert_file: {}\nkey_file: {}\nclient_ca_file: {}",
        server.0.display(),
        server.1.display(),
        server.1.display()
    ));
    assert!(
        error.contains("tls.client_ca_file") && error.contains("holds no certificate"),
        "{error}"
    );

    // A start refuses what the check does, before any port opens.
    let config = dir.path().join("start.yaml");
    std::fs::write(
        &config,
        format!("broker:\n  id: test\n  mqtt:\n    listen:\n      tcp:\n        address: 127.0.0.1:0\n        tls:\n          cert_file: {}\n          key_file: {}\n", server.0.display(), other.1.display()),
    )
    .unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_saguin"))
        .arg("--config")
        .arg(&config)
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&output.stdout).into_owned()
        + &String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(log.contains("broker.mqtt.listen.tcp.tls.key_file"), "{log}");
    assert!(!log.contains("bound to"), "{log}");
}

#[test]
fn an_expired_certificate_is_logged_as_expired() {
    if !have_tools(
        "an_expired_certificate_is_logged_as_expired",
        &["openssl"],
        "openssl",
    ) {
        return;
    }
    let dir = TempDir::new("tls-expired");
    let ca = Authority::new(dir.path(), "estate-ca");
    let lapsed = ca.issue(
        "broker",
        "/CN=broker",
        Some("subjectAltName=IP:127.0.0.1"),
        -1,
    );
    let (mut broker, _port) = broker_with_tls(dir.path(), &tls_block(&lapsed, ""));
    let line = broker.wait_for_log("expired at");
    assert!(
        line.contains("WARN") && line.contains("broker.mqtt.listen.tcp[fleet]"),
        "{line}"
    );
}

#[test]
fn sigusr1_on_a_broker_without_tls_changes_nothing_and_stops_nothing() {
    let mut broker = BrokerProcess::start("");
    broker.signal("USR1");
    broker.wait_for_log("no door serves TLS");
    common::RawClient::connect(
        &broker.address(),
        saguin::codec::ProtocolVersion::V5,
        "after-signal",
    )
    .assert_alive();
}
