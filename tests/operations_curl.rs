//! The operations listener asked by the real `curl`: every route, every
//! answer authentication gives, a DNS-rebinding `Host` refused, and a Unix
//! socket carrying a proxy's `X-Saguin-Principal`.

mod common;

use std::net::TcpStream;
use std::path::Path;
use std::process::Command;

use common::certs::Authority;
use common::http::Answer;
use common::{BrokerProcess, RawClient, Received, TempDir};
use saguin::codec::{Packet, ProtocolVersion};
use saguin::ops::operators::hash_line;

/// Runs curl with `args`, the head included in what it prints.
fn curl(args: &[&str]) -> Answer {
    let output = common::output_of(
        Command::new("curl")
            .args(["-s", "-i", "--max-time", "20"])
            .args(args),
        "apt-get install curl",
    );
    let text = String::from_utf8(output.stdout).unwrap();
    Answer::parse(&text)
        .unwrap_or_else(|| panic!("curl {args:?} printed no whole response: {text}"))
}

fn have_curl() -> bool {
    common::have_tools("the curl tests", &["curl"], "curl")
}

const SALT: &[u8; 12] = b"test-salt-12";
const STORAGE: &str = "  storage:\n    default: volatile\n    default_retention_period: none\n    default_retention_bytes: none\n    providers:\n      volatile:\n        type: memory\n        max_bytes: 64MiB\n        snapshot_dir: none\n";
const CHANNELS: &str = "channels:\n  events:\n    type: append\n    filter: events/#\n  jobs:\n    type: queue\n    filter: jobs/#\n";
const ACL: &str =
    "roles:\n  writer:\n    - channel: events\n      allow: [write]\nusers:\n  writer: [writer]\n";

fn write_operators(dir: &Path) -> String {
    let path = dir.join("operations.passwd");
    let lines = [
        format!("{}:/metrics", hash_line("prometheus", "scrape", SALT)),
        hash_line("oncall", "pager", SALT),
    ];
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    path.display().to_string()
}

/// A broker with an acl_file, an MQTT password file, a queue and the
/// operations block `operations`; and its operations TCP address.
fn start(dir: &TempDir, operations: &str) -> (BrokerProcess, String) {
    let passwd = dir.path().join("clients.passwd");
    std::fs::write(
        &passwd,
        format!("{}\n", hash_line("writer", "secret", SALT)),
    )
    .unwrap();
    std::fs::write(dir.path().join("acl.yaml"), ACL).unwrap();
    let block = format!(
        "    acl_file: {{dir}}/acl.yaml\n    password_file: {{dir}}/clients.passwd\n{STORAGE}  operations:\n    listen:\n      tcp:\n        address: 127.0.0.1:0\n{operations}"
    );
    let mut broker = BrokerProcess::start_in(dir.path(), &block, CHANNELS);
    let line = broker.wait_for_log("operations door tcp bound to");
    let address = line.rsplit("bound to ").next().unwrap().trim().to_string();
    (broker, address)
}

#[test]
fn every_route_answers_curl_on_a_loopback_door() {
    if !have_curl() {
        return;
    }
    let dir = TempDir::new("ops-curl");
    let (broker, ops) = start(&dir, "");
    let url = |path: &str| format!("http://{ops}{path}");
    // A client refused for its password is named on the refused route.
    let mut refused = RawClient::open(&broker.address(), ProtocolVersion::V5);
    let mut connect = common::connect_packet(ProtocolVersion::V5, "sensor-9");
    connect.username = Some("writer".into());
    connect.password = Some(b"wrong".to_vec());
    refused.send(&Packet::Connect(Box::new(connect)));
    assert!(
        matches!(refused.recv(), Received::Packet(Packet::Connack(c)) if c.reason_code.0 == 0x86)
    );

    let health = curl(&[&url("/health")]);
    assert_eq!(
        (health.status, health.body.as_str()),
        (200, "{\"status\":\"ok\"}")
    );
    assert_eq!(curl(&["-I", &url("/health")]).status, 200);
    let post = curl(&["-X", "POST", &url("/health")]);
    assert_eq!(post.status, 405);
    assert_eq!(post.header("Allow").as_deref(), Some("GET, HEAD"));
    assert_eq!(curl(&[&url("/nothing")]).status, 404);

    let metrics = curl(&[&url("/metrics")]);
    assert_eq!(metrics.status, 200);
    assert!(metrics
        .body
        .contains("saguin_connections_refused_total{reason=\"bad user name or password\"} 1\n"));
    for route in ["consumers", "sessions", "position-lost", "queues/jobs"] {
        let answer = curl(&[&url(&format!("/v1/operations/{route}"))]);
        assert_eq!(answer.status, 200, "{route}: {}", answer.body);
        assert_eq!(
            answer.header("Content-Type").as_deref(),
            Some("application/json")
        );
    }
    assert_eq!(curl(&[&url("/v1/operations/queues/events")]).status, 404);

    let refused = curl(&[&url("/v1/operations/refused")]);
    assert_eq!(refused.status, 200);
    assert!(
        refused.body.starts_with("{\"clients\":[{\"client_id\":\"sensor-9\",\"user\":\"writer\",\"reason\":\"bad user name or password\",\"count\":1,\"last_seen\":\""),
        "{}",
        refused.body
    );
    assert!(
        refused
            .body
            .ends_with("\"returned\":1,\"tracked\":1,\"beyond\":0}"),
        "{}",
        refused.body
    );

    let acl = curl(&[&url("/v1/operations/acl?user=writer&client_id=w-1")]);
    assert_eq!(acl.status, 200);
    assert!(
        acl.body.contains("\"pattern_applied\":\"writer\""),
        "{}",
        acl.body
    );
    assert!(
        acl.body.contains("\"client_id_allowed\":true"),
        "{}",
        acl.body
    );
    let nobody = curl(&[&url("/v1/operations/acl?user=printer-3")]);
    assert!(
        nobody
            .body
            .contains("\"pattern_applied\":null,\"patterns_matched\":[]"),
        "{}",
        nobody.body
    );
    assert_eq!(curl(&[&url("/v1/operations/acl")]).status, 400);

    // Who may connect: names, never a hash.
    let users = curl(&[&url("/v1/operations/users")]);
    assert_eq!(users.status, 200);
    assert_eq!(
        users.body,
        "{\"users\":[\"writer\"],\"users_total\":1,\"anonymous_allowed\":false,\"listeners\":{\"tcp\":{\"users\":[\"writer\"],\"users_total\":1,\"anonymous_allowed\":false,\"certificate\":\"none\"}}}"
    );

    // A page whose name was re-resolved to this address sends its own
    // Host, and a caller with no credential is refused for it.
    let rebound = curl(&["-H", "Host: attacker.example:9090", &url("/metrics")]);
    assert_eq!(rebound.status, 403);
    assert!(rebound.body.contains("broker.operations.password_file"));
    assert_eq!(
        curl(&["-H", "Host: attacker.example", &url("/health")]).status,
        200
    );
}

#[test]
fn authentication_answers_401_and_403_to_curl_past_connections_holding_every_slot() {
    if !have_curl() {
        return;
    }
    let dir = TempDir::new("ops-curl-auth");
    let passwd = write_operators(dir.path());
    let (_broker, ops) = start(&dir, &format!("    password_file: {passwd}\n"));
    let url = |path: &str| format!("http://{ops}{path}");
    let nothing = curl(&[&url("/metrics")]);
    assert_eq!(nothing.status, 401);
    assert!(nothing
        .header("WWW-Authenticate")
        .unwrap()
        .starts_with("Basic realm=\"saguin\""));
    assert_eq!(
        curl(&["-u", "prometheus:nope", &url("/metrics")]).status,
        401
    );
    assert_eq!(
        curl(&["-u", "prometheus:scrape", &url("/metrics")]).status,
        200
    );
    assert_eq!(
        curl(&["-u", "prometheus:scrape", &url("/v1/operations/refused")]).status,
        403
    );
    assert_eq!(
        curl(&["-u", "oncall:pager", &url("/v1/operations/acl?user=writer")]).status,
        200
    );
    // A header naming somebody is not read on a TCP door.
    assert_eq!(
        curl(&["-H", "X-Saguin-Principal: oncall", &url("/metrics")]).status,
        401
    );
    // Every slot held by a connection that sends nothing: the probe takes
    // the place of the one that has waited longest.
    let held: Vec<TcpStream> = (0..saguin::ops::DEFAULT_MAX_CONNECTIONS)
        .map(|_| TcpStream::connect(&ops).unwrap())
        .collect();
    assert_eq!(curl(&[&url("/health")]).status, 200);
    assert_eq!(
        curl(&["-u", "prometheus:scrape", &url("/metrics")]).status,
        200
    );
    drop(held);
}

#[test]
fn a_unix_socket_request_carries_a_proxys_principal_to_curl() {
    if !have_curl() {
        return;
    }
    let dir = TempDir::new("ops-curl-unix");
    let passwd = write_operators(dir.path());
    let socket = dir.path().join("ops.sock");
    let block = format!(
        "      unix:\n        path: {}\n    password_file: {passwd}\n",
        socket.display()
    );
    let (mut broker, _ops) = start(&dir, &block);
    broker.wait_for_log("operations door unix bound to");
    let socket = socket.display().to_string();
    let ask = |header: &str, path: &str| {
        let url = format!("http://localhost{path}");
        match header {
            "" => curl(&["--unix-socket", &socket, &url]),
            _ => curl(&["--unix-socket", &socket, "-H", header, &url]),
        }
    };
    let named = "X-Saguin-Principal: oncall";
    assert_eq!(ask(named, "/v1/operations/consumers").status, 200);
    let stranger = "X-Saguin-Principal: grafana-agent";
    assert_eq!(ask(stranger, "/metrics").status, 200);
    assert_eq!(ask(stranger, "/v1/operations/sessions").status, 403);
    assert_eq!(ask("", "/metrics").status, 401);
}

/// A self-signed certificate for 127.0.0.1 in `NAME.pem`, its key in
/// `NAME-key.pem`.
fn self_signed(dir: &Path, name: &str) {
    let made = Command::new("openssl")
        .current_dir(dir)
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
        ])
        .args(["-days", "30", "-nodes", "-subj", &format!("/CN={name}")])
        .args(["-addext", "subjectAltName=IP:127.0.0.1"])
        .args([
            "-keyout",
            &format!("{name}-key.pem"),
            "-out",
            &format!("{name}.pem"),
        ])
        .output()
        .expect("run openssl");
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
}

/// Whether curl, trusting only `cacert`, completes a request to `url`.
fn trusts(cacert: &Path, url: &str) -> bool {
    Command::new("curl")
        .args(["-s", "-o", "/dev/null", "--max-time", "20", "--cacert"])
        .arg(cacert)
        .arg(url)
        .status()
        .expect("run curl")
        .success()
}

#[test]
fn sigusr1_swaps_an_operations_door_certificate_and_keeps_it_through_a_broken_renewal() {
    if !have_curl() || !common::have_tools("the operations TLS test", &["openssl"], "openssl") {
        return;
    }
    let dir = TempDir::new("ops-curl-tls-reload");
    for name in ["served", "renewed", "stray"] {
        self_signed(dir.path(), name);
    }
    let at = |file: &str| dir.path().join(file);
    std::fs::copy(at("served.pem"), at("ops.pem")).unwrap();
    std::fs::copy(at("served-key.pem"), at("ops-key.pem")).unwrap();
    let tls = format!(
        "        tls:\n          cert_file: {0}/ops.pem\n          key_file: {0}/ops-key.pem\n",
        dir.path().display()
    );
    let (mut broker, ops) = start(&dir, &tls);
    let health = format!("https://{ops}/health");
    assert!(trusts(&at("served.pem"), &health));
    assert!(!trusts(&at("renewed.pem"), &health));

    // The renewal lands over the files the door was started with.
    std::fs::copy(at("renewed.pem"), at("ops.pem")).unwrap();
    std::fs::copy(at("renewed-key.pem"), at("ops-key.pem")).unwrap();
    broker.signal("USR1");
    let line = broker.wait_for_log("certificate re-read; new connections are served with it");
    assert!(line.contains("broker.operations.listen.tcp"), "{line}");
    assert!(trusts(&at("renewed.pem"), &health));
    assert!(!trusts(&at("served.pem"), &health));

    // A key that is not the certificate's: logged naming the key and the
    // file, and the renewed pair goes on serving.
    std::fs::copy(at("stray-key.pem"), at("ops-key.pem")).unwrap();
    broker.signal("USR1");
    let error = broker.wait_for_log("the certificate served before stays in force");
    assert!(
        error.contains("ERROR")
            && error.contains("broker.operations.listen.tcp.tls.key_file")
            && error.contains("is not the key of the certificate"),
        "{error}"
    );
    assert!(trusts(&at("renewed.pem"), &health));
}

/// What curl, presenting `identity` (certificate, key) if any, is
/// answered for `url`; `None` when the handshake refused it.
fn status_with(
    cacert: &Path,
    identity: Option<&(std::path::PathBuf, std::path::PathBuf)>,
    extra: &[&str],
    url: &str,
) -> Option<u16> {
    let mut command = Command::new("curl");
    command
        .args([
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "--max-time",
            "20",
        ])
        .arg("--cacert")
        .arg(cacert)
        .args(extra);
    if let Some((cert, key)) = identity {
        command.arg("--cert").arg(cert).arg("--key").arg(key);
    }
    let output = command.arg(url).output().expect("run curl");
    let code: u16 = String::from_utf8_lossy(&output.stdout)
        .trim()
        .parse()
        .ok()?;
    (output.status.success() && code != 0).then_some(code)
}

#[test]
fn client_certificates_name_callers_on_an_operations_door() {
    if !have_curl() || !common::have_tools("the operations TLS test", &["openssl"], "openssl") {
        return;
    }
    let dir = TempDir::new("ops-curl-client-certs");
    let ca = Authority::new(dir.path(), "operators-ca");
    let other_ca = Authority::new(dir.path(), "other-ca");
    let served = ca.server("ops");
    let client = |file: &str, subject: &str, authority: &Authority| {
        authority.issue(file, subject, Some("extendedKeyUsage=clientAuth"), 30)
    };
    let oncall = client("oncall", "/CN=oncall", &ca);
    let agent = client("agent", "/CN=grafana-agent", &ca);
    let unnamed = client("unnamed", "/O=fleet", &ca);
    let outsider = client("outsider", "/CN=oncall", &other_ca);
    // oncall is in the operators file with every route; nobody else is.
    let passwd = dir.path().join("operations.passwd");
    std::fs::write(&passwd, format!("{}\n", hash_line("oncall", "pager", SALT))).unwrap();
    let tls = format!(
        "        tls:\n          cert_file: {}\n          key_file: {}\n          client_ca_file: {}\n    password_file: {}\n",
        served.0.display(),
        served.1.display(),
        ca.pem().display(),
        passwd.display()
    );
    let (_broker, ops) = start(&dir, &tls);
    let cacert = ca.pem();
    let ask = |identity, extra: &[&str], path: &str| {
        status_with(&cacert, identity, extra, &format!("https://{ops}{path}"))
    };
    let sessions = "/v1/operations/sessions";
    assert_eq!(ask(Some(&oncall), &[], "/metrics"), Some(200));
    assert_eq!(ask(Some(&oncall), &[], sessions), Some(200));
    // A name the operators file does not hold is scraped and no more, and
    // so is a certificate that names nobody.
    assert_eq!(ask(Some(&agent), &[], "/metrics"), Some(200));
    assert_eq!(ask(Some(&agent), &[], sessions), Some(403));
    assert_eq!(ask(Some(&unnamed), &[], "/metrics"), Some(200));
    assert_eq!(ask(Some(&unnamed), &[], sessions), Some(403));
    // A password offered beside the certificate decides alone.
    let wrong = ["-u", "oncall:wrong"];
    assert_eq!(ask(Some(&oncall), &wrong, "/metrics"), Some(401));
    // Without a certificate, or with one another authority signed, the
    // handshake refuses: the certificate is required by default.
    assert_eq!(ask(None, &[], "/health"), None);
    assert_eq!(ask(Some(&outsider), &[], "/health"), None);
    assert_eq!(ask(Some(&oncall), &[], "/health"), Some(200));
    // The config route names the door's files, and that it requires a
    // certificate.
    let config = Command::new("curl")
        .args(["-s", "--max-time", "20", "--cacert"])
        .arg(&cacert)
        .arg("--cert")
        .arg(&oncall.0)
        .arg("--key")
        .arg(&oncall.1)
        .arg(format!("https://{ops}/v1/operations/config"))
        .output()
        .unwrap();
    let config = String::from_utf8_lossy(&config.stdout);
    let authorities = format!("\"client_ca_file\":\"{}\"", ca.pem().display());
    assert!(
        config.contains(&authorities) && config.contains("\"require_certificate\":true"),
        "{config}"
    );

    // Required certificates let a door off loopback without a password
    // file; certificates that are only accepted do not.
    let check = |extra: &str| {
        let path = dir.path().join("check.yaml");
        let yaml = format!(
            "broker:\n  id: a\n  operations:\n    listen:\n      tcp:\n        address: 0.0.0.0:9090\n        tls:\n          cert_file: {}\n          key_file: {}\n          client_ca_file: {}\n{extra}",
            served.0.display(),
            served.1.display(),
            ca.pem().display()
        );
        std::fs::write(&path, yaml).unwrap();
        common::check_config(&path)
    };
    let required = check("");
    assert!(
        required.status.success(),
        "{}",
        String::from_utf8_lossy(&required.stderr)
    );
    let optional = check("          require_certificate: false\n");
    let refusal = String::from_utf8_lossy(&optional.stderr);
    assert!(!optional.status.success());
    assert!(
        refusal.contains("broker.operations.listen.tcp.address")
            && refusal.contains("require_certificate: false does not count"),
        "{refusal}"
    );
}

#[test]
fn a_tcp_door_serves_its_routes_over_tls_to_curl() {
    if !have_curl() || !common::have_tools("the operations TLS test", &["openssl"], "openssl") {
        return;
    }
    let dir = TempDir::new("ops-curl-tls");
    self_signed(dir.path(), "ops");
    let passwd = write_operators(dir.path());
    let tls = format!(
        "        tls:\n          cert_file: {0}/ops.pem\n          key_file: {0}/ops-key.pem\n    password_file: {passwd}\n",
        dir.path().display()
    );
    let (_broker, ops) = start(&dir, &tls);
    let cacert = dir.path().join("ops.pem").display().to_string();
    let url = |path: &str| format!("https://{ops}{path}");
    let health = curl(&["--cacert", &cacert, &url("/health")]);
    assert_eq!(
        (health.status, health.body.as_str()),
        (200, "{\"status\":\"ok\"}")
    );
    let scrape = curl(&[
        "--cacert",
        &cacert,
        "-u",
        "prometheus:scrape",
        &url("/metrics"),
    ]);
    assert_eq!(scrape.status, 200);
    assert!(scrape.body.contains("saguin_build_info{"));
    assert_eq!(curl(&["--cacert", &cacert, &url("/metrics")]).status, 401);
    // Plain HTTP on the TLS door is not served.
    let plain = Command::new("curl")
        .args(["-s", "--max-time", "20", &format!("http://{ops}/health")])
        .output()
        .unwrap();
    assert!(!plain.status.success() || plain.stdout.is_empty());
}

#[test]
fn the_config_route_serves_the_resolved_configuration_and_no_byte_of_a_file_it_names() {
    if !have_curl() {
        return;
    }
    let dir = TempDir::new("ops-curl-config");
    let passwd = write_operators(dir.path());
    let (_broker, ops) = start(&dir, &format!("    password_file: {passwd}\n"));
    let url = |path: &str| format!("http://{ops}{path}");
    let ask = |path: &str| curl(&["-u", "oncall:pager", &url(path)]);
    let whole = ask("/v1/operations/config");
    assert_eq!(whole.status, 200);
    assert_eq!(
        whole.header("Content-Type").as_deref(),
        Some("application/json")
    );
    // Resolved: defaults the file never wrote are filled in.
    for expected in [
        "\"id\":\"test\"",
        "\"max_connections\":",
        "\"session_queue_bytes\":",
        "\"events\":{\"type\":\"append\",\"filter\":\"events/#\",\"storage\":\"volatile\"",
        "\"min_scrape_interval\":\"60s\",\"max_connections\":16}",
    ] {
        assert!(
            whole.body.contains(expected),
            "{expected} not in {}",
            whole.body
        );
    }
    // Files are named by path, and nothing they hold comes back.
    for file in ["operations.passwd", "clients.passwd", "acl.yaml"] {
        let path = dir.path().join(file);
        assert!(
            whole.body.contains(&path.display().to_string()),
            "{file} is not named"
        );
        for line in std::fs::read_to_string(&path).unwrap().lines() {
            for part in line.split([':', ' ']).filter(|p| p.len() > 12) {
                assert!(!whole.body.contains(part), "{file}'s {part:?} came back");
            }
        }
    }
    let providers = ask("/v1/operations/config?section=providers");
    assert_eq!(
        providers.body,
        "{\"providers\":{\"volatile\":{\"max_bytes\":67108864,\"type\":\"memory\",\"snapshot_dir\":null}}}"
    );
    let two = ask("/v1/operations/config?section=bridges&section=limits");
    assert!(
        two.body
            .starts_with("{\"bridges\":{},\"limits\":{\"max_message_size\":"),
        "{}",
        two.body
    );
    let typo = ask("/v1/operations/config?section=provider");
    assert_eq!(typo.status, 400);
    assert!(typo.body.contains("providers"), "{}", typo.body);
}

#[test]
fn check_config_output_prints_the_resolved_configuration_as_yaml() {
    let dir = TempDir::new("check-config-output");
    let path = dir.path().join("saguin.yaml");
    let written = format!(
        "broker:\n  id: edge-1\n  mqtt:\n    listen:\n      tcp:\n        address: 127.0.0.1:0\n{STORAGE}{CHANNELS}"
    );
    std::fs::write(&path, written).unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_saguin"))
        .arg("--check-config")
        .arg(&path)
        .arg("--output")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let yaml: serde_yaml::Value = serde_yaml::from_slice(&output.stdout).unwrap();
    assert_eq!(yaml["broker"]["id"].as_str(), Some("edge-1"));
    // Not written, and there with its default.
    assert!(
        yaml["broker"]["limits"]["max_connections"]
            .as_u64()
            .unwrap()
            > 0
    );
    assert_eq!(yaml["broker"]["log_level"].as_str(), Some("info"));
    assert_eq!(yaml["channels"]["jobs"]["type"].as_str(), Some("queue"));
    assert!(yaml["channels"]["jobs"]["retry"]["max_attempts"]
        .as_u64()
        .is_some());
    assert_eq!(
        yaml["broker"]["mqtt"]["listen"]["tcp"]["tcp"]["address"].as_str(),
        Some("127.0.0.1:0")
    );
}

/// A request carrying a body to a route that does not take its method is
/// told the methods the route takes, its body unread; one whose method
/// the route takes is told no route takes a body.
#[test]
fn a_body_sent_with_a_method_a_route_does_not_take_is_answered_405_with_allow() {
    if !have_curl() {
        return;
    }
    let dir = TempDir::new("ops-curl-body");
    let (_broker, ops) = start(&dir, "");
    let url = |path: &str| format!("http://{ops}{path}");
    for path in ["/health", "/metrics", "/"] {
        let post = curl(&["-X", "POST", "-d", "probe=1", &url(path)]);
        assert_eq!(post.status, 405, "{path}: {}", post.body);
        assert_eq!(post.header("Allow").as_deref(), Some("GET, HEAD"), "{path}");
    }
    let put = curl(&["-X", "PUT", "-d", "x", &url(saguin::ops::backup::ROUTE)]);
    assert_eq!(
        (put.status, put.header("Allow").as_deref()),
        (405, Some("POST"))
    );
    let get = curl(&["-X", "GET", "-d", "x", &url("/metrics")]);
    assert_eq!(get.status, 413, "{}", get.body);
    assert_eq!(
        curl(&["-X", "POST", "-d", "x", &url("/nothing")]).status,
        404
    );
}

/// The page and the catalogue go out gzipped to a client that asks, and
/// as they are to one that does not; what curl inflates is the same text.
#[test]
fn the_page_and_the_metrics_are_gzipped_for_a_client_that_accepts_it() {
    if !have_curl() {
        return;
    }
    let dir = TempDir::new("ops-curl-gzip");
    let (_broker, ops) = start(&dir, "");
    let url = |path: &str| format!("http://{ops}{path}");
    let plain = curl(&[&url("/metrics")]);
    let gzipped = curl(&["--compressed", &url("/metrics")]);
    assert_eq!(plain.header("Content-Encoding"), None);
    assert_eq!(gzipped.header("Content-Encoding").as_deref(), Some("gzip"));
    assert_eq!(gzipped.header("Vary").as_deref(), Some("Accept-Encoding"));
    // The second is the first scrape, answered again inside the interval.
    assert_eq!(gzipped.body, plain.body);
    assert!(plain.header("Age").is_some());
    let on_the_wire = common::output_of(
        Command::new("curl").args([
            "-s",
            "-H",
            "Accept-Encoding: gzip",
            "-o",
            "-",
            &url("/metrics"),
        ]),
        "apt-get install curl",
    );
    assert!(
        on_the_wire.stdout.len() * 3 < plain.body.len(),
        "gzip does not shrink it"
    );

    let page = curl(&[&url("/")]);
    assert_eq!(page.status, 200);
    assert_eq!(
        page.header("Content-Type").as_deref(),
        Some("text/html; charset=utf-8")
    );
    assert!(page.body.starts_with("<!doctype html>"), "{}", page.body);
    let page_gzipped = curl(&["--compressed", &url("/")]);
    assert_eq!(
        page_gzipped.header("Content-Encoding").as_deref(),
        Some("gzip")
    );
    assert_eq!(page_gzipped.body, page.body);
    let policy = page.header("Content-Security-Policy").unwrap();
    assert!(
        policy.starts_with("default-src 'none'; script-src 'sha256-"),
        "{policy}"
    );
    for (name, value) in [
        ("X-Frame-Options", "DENY"),
        ("X-Content-Type-Options", "nosniff"),
        ("Referrer-Policy", "no-referrer"),
        ("Cache-Control", "no-store"),
    ] {
        assert_eq!(page.header(name).as_deref(), Some(value), "{name}");
    }
}

/// `saguin --passwd FILE scope` narrows an operator to some routes and
/// `all` widens it again; the page stays open to it either way, and a
/// route outside its scope is refused by the page's own fetch as by curl.
#[test]
fn passwd_scope_writes_the_routes_an_operator_reaches() {
    if !have_curl() {
        return;
    }
    let dir = TempDir::new("ops-curl-scope");
    let file = dir.path().join("operations.passwd");
    let passwd = |args: &[&str], input: &str| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_saguin"));
        command.arg("--passwd").arg(&file).args(args);
        common::output_with_input(&mut command, input).unwrap()
    };
    assert!(passwd(&["add", "grafana"], "viewer\n").status.success());
    let narrowed = passwd(
        &["scope", "grafana", "/metrics,/v1/operations/consumers"],
        "",
    );
    assert!(
        narrowed.status.success(),
        "{}",
        String::from_utf8_lossy(&narrowed.stderr)
    );
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(
        text.trim_end()
            .ends_with(":/metrics,/v1/operations/consumers"),
        "{text}"
    );
    // A route no route is refused, and the file left as it was.
    let wrong = passwd(&["scope", "grafana", "/v2"], "");
    assert!(!wrong.status.success());
    assert!(String::from_utf8_lossy(&wrong.stderr).contains("names no route"));
    assert_eq!(std::fs::read_to_string(&file).unwrap(), text);
    // A new password keeps the routes.
    assert!(passwd(&["add", "grafana"], "viewer2\n").status.success());
    let again = std::fs::read_to_string(&file).unwrap();
    assert!(
        again
            .trim_end()
            .ends_with(":/metrics,/v1/operations/consumers"),
        "{again}"
    );

    let operators = format!("    password_file: {}\n", file.display());
    let (mut broker, ops) = start(&dir, &operators);
    let url = |path: &str| format!("http://{ops}{path}");
    let ask = |path: &str| curl(&["-u", "grafana:viewer2", &url(path)]).status;
    assert_eq!(ask("/metrics"), 200);
    assert_eq!(ask("/v1/operations/consumers"), 200);
    assert_eq!(ask("/v1/operations/sessions"), 403);
    assert_eq!(ask("/"), 200);
    assert_eq!(curl(&[&url("/")]).status, 401);

    assert!(passwd(&["scope", "grafana", "all"], "").status.success());
    broker.signal("USR1");
    broker.wait_for_log("operations: re-read");
    assert_eq!(ask("/v1/operations/sessions"), 200);
}
