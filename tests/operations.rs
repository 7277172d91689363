//! The operations listener over real sockets: the broker binary with a
//! `broker.operations` block, asked by a plain HTTP client written here,
//! and the listener alone with a link whose answers the test decides.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use common::http::Answer;
use common::proxy::{proxy_v2, VERIFIED};
use common::{BrokerProcess, RawClient, TempDir, WAIT};
use saguin::codec::{Packet, ProtocolVersion, Publish, QoS};
use saguin::ops::operators::hash_line;

/// Sends `request` whole and reads until the listener closes.
fn exchange(mut stream: impl Read + Write, request: &str) -> Answer {
    stream.write_all(request.as_bytes()).unwrap();
    let mut bytes = Vec::new();
    stream.read_to_end(&mut bytes).unwrap();
    let text = String::from_utf8(bytes).unwrap();
    Answer::parse(&text).expect("a complete response")
}

fn tcp(address: &str) -> TcpStream {
    let stream = TcpStream::connect(address).unwrap();
    stream.set_read_timeout(Some(WAIT)).unwrap();
    stream
}

fn request(method: &str, path: &str, headers: &[(&str, &str)]) -> String {
    let mut text = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
    for (name, value) in headers {
        text.push_str(&format!("{name}: {value}\r\n"));
    }
    text + "\r\n"
}

fn get(address: &str, path: &str, headers: &[(&str, &str)]) -> Answer {
    exchange(tcp(address), &request("GET", path, headers))
}

fn publish_qos0(topic: &str, payload: &[u8]) -> Packet {
    Packet::Publish(Publish {
        dup: false,
        qos: QoS::AtMostOnce,
        retain: false,
        topic: topic.into(),
        packet_id: None,
        properties: Default::default(),
        payload: payload.to_vec(),
    })
}

fn basic(user: &str, password: &str) -> String {
    use base64ct::Encoding;
    let encoded = base64ct::Base64::encode_string(format!("{user}:{password}").as_bytes());
    format!("Basic {encoded}")
}

/// A broker with an operations TCP door on a port the kernel picks, and
/// that door's address.
fn broker_with(operations_yaml: &str, top_yaml: &str) -> (BrokerProcess, String, TempDir) {
    let dir = TempDir::new("ops");
    let block = format!("  operations:\n{operations_yaml}");
    let mut broker = BrokerProcess::start_in(dir.path(), &block, top_yaml);
    let line = broker.wait_for_log("operations door tcp bound to");
    let address = line.rsplit("bound to ").next().unwrap().trim().to_string();
    (broker, address, dir)
}

/// Any salt does for a test's operators.
const SALT: &[u8; 12] = b"test-salt-12";

const LOOPBACK_DOOR: &str = "    listen:\n      tcp:\n        address: 127.0.0.1:0\n";

fn write_operators(dir: &Path) -> String {
    let path = dir.join("operations.passwd");
    let lines = [
        format!("{}:/metrics", hash_line("prometheus", "scrape", SALT)),
        hash_line("oncall", "pager", SALT),
        format!(
            "{}:/v1/operations/sessions",
            hash_line("viewer", "look", SALT)
        ),
    ];
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    path.display().to_string()
}

#[test]
fn health_answers_ok_to_get_and_head_and_refuses_other_methods() {
    let (_broker, address, _dir) = broker_with(LOOPBACK_DOOR, "");
    let ok = get(&address, "/health", &[]);
    assert_eq!(ok.status, 200);
    assert_eq!(ok.body, "{\"status\":\"ok\"}");
    let head = exchange(tcp(&address), &request("HEAD", "/health", &[]));
    assert_eq!(head.status, 200);
    assert_eq!(head.body, "");
    assert_eq!(head.header("Content-Length").as_deref(), Some("15"));
    let post = exchange(tcp(&address), &request("POST", "/health", &[]));
    assert_eq!(post.status, 405);
    assert_eq!(post.header("Allow").as_deref(), Some("GET, HEAD"));
    assert_eq!(get(&address, "/nothing", &[]).status, 404);
    assert_eq!(get(&address, "/v1/operationsomething", &[]).status, 404);
}

#[test]
fn a_connection_serves_requests_in_turn_until_asked_to_close() {
    let (_broker, address, _dir) = broker_with(LOOPBACK_DOOR, "");
    let mut stream = tcp(&address);
    let both = "GET /health HTTP/1.1\r\n\r\nHEAD /health HTTP/1.1\r\nConnection: close\r\n\r\n";
    stream.write_all(both.as_bytes()).unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).unwrap();
    assert_eq!(text.matches("HTTP/1.1 200 OK\r\n").count(), 2, "{text}");
    assert_eq!(text.matches("{\"status\":\"ok\"}").count(), 1, "{text}");
    assert!(text.contains("Connection: keep-alive\r\n"));
    assert!(text.ends_with("Connection: close\r\n\r\n"), "{text}");
    // A head past the bound is refused, not read on.
    let huge = format!(
        "GET /health HTTP/1.1\r\nX-Pad: {}\r\n\r\n",
        "a".repeat(9000)
    );
    assert_eq!(exchange(tcp(&address), &huge).status, 431);
}

#[test]
fn metrics_are_prometheus_text_and_count_a_publish() {
    let (broker, address, _dir) = broker_with(LOOPBACK_DOOR, "");
    let mut client = RawClient::connect(&broker.address(), ProtocolVersion::V5, "pub-1");
    client.send(&publish_qos0("t/1", b"x"));
    client.assert_alive();
    let first = get(&address, "/metrics", &[]);
    assert_eq!(first.status, 200);
    assert_eq!(
        first.header("Content-Type").as_deref(),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
    assert!(
        first.body.contains("\nsaguin_publishes_received_total 1\n"),
        "{}",
        first.body
    );
    assert!(first
        .body
        .contains("saguin_connections_by_protocol{protocol=\"5\"} 1\n"));
    assert!(first.body.contains("saguin_build_info{version="));
    // Nobody subscribes to t/1: accepted, and matched by nothing.
    assert_eq!(sample(&first.body, "saguin_broadcast_unmatched_total"), 1.0);
    let broadcast = "saguin_published_total{channel=\"broadcast\"}";
    assert_eq!(sample(&first.body, broadcast), 1.0);
    assert!(first
        .body
        .contains("\nsaguin_process_resident_memory_bytes "));
    assert_parses_as_prometheus_text(&first.body);
    // A second scrape inside min_scrape_interval is answered from the
    // first, however much moved meanwhile.
    client.send(&publish_qos0("t/1", b"y"));
    client.assert_alive();
    assert_eq!(get(&address, "/metrics", &[]).body, first.body);
}

/// Python's `prometheus_client` parser reads every family, when it is
/// installed; the test says so loudly when it is not.
fn assert_parses_as_prometheus_text(body: &str) {
    let script = "import sys\nfrom prometheus_client.parser import text_string_to_metric_families as parse\nprint(len(list(parse(sys.stdin.read()))))\n";
    let Some(printed) = common::http::prometheus_client(script, body) else {
        return;
    };
    let families: usize = printed.trim().parse().unwrap();
    let announced = body.lines().filter(|l| l.starts_with("# TYPE ")).count();
    assert_eq!(families, announced);
}

#[test]
fn wills_are_counted_by_cause_and_a_return_cancels_one() {
    let limits = "  limits:\n    max_session_expiry: 1h\n";
    let dir = TempDir::new("ops-wills");
    let block = format!("{limits}  operations:\n{LOOPBACK_DOOR}");
    let mut broker = BrokerProcess::start_in(dir.path(), &block, "");
    let line = broker.wait_for_log("operations door tcp bound to");
    let address = line.rsplit("bound to ").next().unwrap().trim().to_string();
    let mqtt = broker.address();
    let with_will = |client_id: &str, delay_s: Option<u32>| {
        let mut connect = common::connect_packet(ProtocolVersion::V5, client_id);
        connect.clean_start = false;
        // Two hours asked, one granted.
        connect.properties.session_expiry_interval_s = Some(7200);
        let mut will = connect_will(&format!("wills/{client_id}"));
        will.properties.will_delay_interval_s = delay_s;
        connect.will = Some(will);
        let mut client = RawClient::open(&mqtt, ProtocolVersion::V5);
        client.send(&Packet::Connect(Box::new(connect)));
        assert!(matches!(
            client.recv(),
            common::Received::Packet(Packet::Connack(_))
        ));
        client
    };
    // Gone without a DISCONNECT, with a delay; back inside it.
    drop(with_will("returns", Some(600)));
    broker.wait_for_log("client returns disconnected");
    let (_back, present) = common::durable_connect(&mqtt, "returns");
    assert!(present);
    // Gone without a DISCONNECT and no delay.
    drop(with_will("dies", None));
    broker.wait_for_log("client dies disconnected");
    let scrape = get(&address, "/metrics", &[]).body;
    let cause = |c: &str| {
        sample(
            &scrape,
            &format!("saguin_wills_published_total{{cause=\"{c}\"}}"),
        )
    };
    assert_eq!(cause("immediate"), 1.0);
    assert_eq!(cause("delayed"), 0.0);
    assert_eq!(sample(&scrape, "saguin_wills_cancelled_total"), 1.0);
    assert_eq!(sample(&scrape, "saguin_wills_waiting"), 0.0);
    let shortened = sample(&scrape, "saguin_session_expiry_shortened_total");
    assert_eq!(shortened, 2.0, "the two CONNECTs that asked for two hours");
}

fn connect_will(topic: &str) -> saguin::codec::Will {
    saguin::codec::Will {
        topic: topic.into(),
        payload: b"gone".to_vec(),
        qos: QoS::AtMostOnce,
        retain: false,
        properties: Default::default(),
    }
}

#[test]
fn credentials_are_checked_and_scoped() {
    let dir = TempDir::new("ops-auth");
    let passwd = write_operators(dir.path());
    let yaml = format!("{LOOPBACK_DOOR}    password_file: {passwd}\n");
    let (_broker, address, _d) = broker_with(&yaml, "");
    let nothing = get(&address, "/metrics", &[]);
    assert_eq!(nothing.status, 401);
    assert!(nothing
        .header("WWW-Authenticate")
        .unwrap()
        .starts_with("Basic realm="));
    let wrong = get(
        &address,
        "/metrics",
        &[("Authorization", &basic("prometheus", "nope"))],
    );
    assert_eq!(wrong.status, 401);
    assert!(wrong.header("WWW-Authenticate").is_some());
    let scraper = basic("prometheus", "scrape");
    assert_eq!(
        get(&address, "/metrics", &[("Authorization", &scraper)]).status,
        200
    );
    let narrowed = get(
        &address,
        "/v1/operations/sessions",
        &[("Authorization", &scraper)],
    );
    assert_eq!(narrowed.status, 403);
    let oncall = basic("oncall", "pager");
    let sessions = get(
        &address,
        "/v1/operations/sessions",
        &[("Authorization", &oncall)],
    );
    assert_eq!(sessions.status, 200);
    assert_eq!(
        sessions.header("Content-Type").as_deref(),
        Some("application/json")
    );
    assert!(sessions.body.contains("\"total\":0"), "{}", sessions.body);
    // A scope at a segment boundary: the sessions route and nothing else.
    let viewer = basic("viewer", "look");
    assert_eq!(
        get(
            &address,
            "/v1/operations/sessions",
            &[("Authorization", &viewer)]
        )
        .status,
        200
    );
    assert_eq!(
        get(
            &address,
            "/v1/operations/consumers",
            &[("Authorization", &viewer)]
        )
        .status,
        403
    );
    // /health asks nobody.
    assert_eq!(get(&address, "/health", &[]).status, 200);
    // A principal header on a TCP door is not read.
    let claimed = get(&address, "/metrics", &[("X-Saguin-Principal", "oncall")]);
    assert_eq!(claimed.status, 401);
}

#[test]
fn a_caller_with_no_credential_must_address_the_broker_by_ip_or_localhost() {
    let (_broker, address, _dir) = broker_with(LOOPBACK_DOOR, "");
    let rebound = get(&address, "/metrics", &[("Host", "attacker.example:9090")]);
    assert_eq!(rebound.status, 403);
    assert!(
        rebound.body.contains("broker.operations.password_file"),
        "{}",
        rebound.body
    );
    assert_eq!(get(&address, "/metrics", &[("Host", &address)]).status, 200);
    assert_eq!(
        get(&address, "/metrics", &[("Host", "localhost:9090")]).status,
        200
    );
    // /health is not behind the rule.
    assert_eq!(
        get(&address, "/health", &[("Host", "attacker.example")]).status,
        200
    );
}

/// A broker with a loopback door and a Unix door at `ops.sock` carrying
/// `door_key` (one line), guarded by the test operators; the socket's
/// path, and the directories to keep until the test ends.
fn unix_door_broker(tag: &str, door_key: &str) -> (BrokerProcess, PathBuf, [TempDir; 2]) {
    let dir = TempDir::new(tag);
    let passwd = write_operators(dir.path());
    let socket = dir.path().join("ops.sock");
    let yaml = format!(
        "{LOOPBACK_DOOR}      unix:\n        path: {}\n        {door_key}\n    password_file: {passwd}\n",
        socket.display()
    );
    let (mut broker, _address, broker_dir) = broker_with(&yaml, "");
    broker.wait_for_log("operations door unix bound to");
    (broker, socket, [dir, broker_dir])
}

#[test]
fn a_unix_socket_carries_a_proxy_s_principal() {
    let (mut broker, socket, _dirs) = unix_door_broker("ops-unix", "mode: \"0600\"");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&socket).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let ask = |path: &str, headers: &[(&str, &str)]| {
        let stream = UnixStream::connect(&socket).unwrap();
        stream.set_read_timeout(Some(WAIT)).unwrap();
        exchange(stream, &request("GET", path, headers))
    };
    let named = [("X-Saguin-Principal", "oncall")];
    assert_eq!(ask("/v1/operations/consumers", &named).status, 200);
    // A name the file does not hold is scraped and nothing more.
    let stranger = [("X-Saguin-Principal", "grafana-agent")];
    assert_eq!(ask("/metrics", &stranger).status, 200);
    assert_eq!(ask("/v1/operations/sessions", &stranger).status, 403);
    // A password that fails ends there, whatever the header says.
    let both = [
        ("X-Saguin-Principal", "oncall"),
        ("Authorization", &basic("oncall", "wrong")),
    ];
    assert_eq!(ask("/metrics", &both).status, 401);
    // Nothing at all, with a password file: a credential is asked for.
    assert_eq!(ask("/metrics", &[]).status, 401);
    assert_eq!(
        ask("/metrics", &[("X-Saguin-Principal", "bad\u{85}name")]).status,
        403
    );
    // A clean stop takes its socket file with it.
    assert!(broker.terminate().success());
    assert!(!socket.exists());
}

#[test]
fn a_unix_door_behind_a_proxy_takes_the_verified_common_name_from_proxy_protocol_v2() {
    let (mut broker, socket, _dirs) = unix_door_broker("ops-proxy", "proxy_protocol: true");
    let ask = |header: &[u8], path: &str| {
        let mut stream = UnixStream::connect(&socket).unwrap();
        stream.set_read_timeout(Some(WAIT)).unwrap();
        stream.write_all(header).unwrap();
        exchange(stream, &request("GET", path, &[])).status
    };
    let oncall = proxy_v2(Some((VERIFIED, 0, Some("oncall"))));
    assert_eq!(ask(&oncall, "/v1/operations/consumers"), 200);
    // A scoped operator keeps its scope; a stranger is scraped only.
    let viewer = proxy_v2(Some((VERIFIED, 0, Some("viewer"))));
    assert_eq!(ask(&viewer, "/v1/operations/sessions"), 200);
    assert_eq!(ask(&viewer, "/v1/operations/consumers"), 403);
    let stranger = proxy_v2(Some((VERIFIED, 0, Some("grafana-agent"))));
    assert_eq!(ask(&stranger, "/metrics"), 200);
    assert_eq!(ask(&stranger, "/v1/operations/sessions"), 403);
    // A certificate the proxy could not verify names nobody: with a
    // password file, nobody is asked for a credential.
    let unverified = proxy_v2(Some((VERIFIED, 21, Some("oncall"))));
    assert_eq!(ask(&unverified, "/metrics"), 401);
    broker.wait_for_log("verify_result=21");
    assert_eq!(ask(&proxy_v2(None), "/metrics"), 401);
    // No header, or a v1 one, is answered 400 naming what is wrong.
    assert_eq!(ask(b"", "/metrics"), 400);
    assert_eq!(
        ask(b"PROXY TCP4 192.0.2.7 192.0.2.1 40000 9090\r\n", "/metrics"),
        400
    );
    broker.wait_for_log("proxy_protocol v2");
}

#[test]
fn behind_proxy_protocol_the_principal_header_names_nobody() {
    let (_broker, socket, _dirs) = unix_door_broker("ops-proxy-claim", "proxy_protocol: true");
    let ask = |header: &[u8], path: &str| {
        let mut stream = UnixStream::connect(&socket).unwrap();
        stream.set_read_timeout(Some(WAIT)).unwrap();
        stream.write_all(header).unwrap();
        let claim = [("X-Saguin-Principal", "oncall")];
        exchange(stream, &request("GET", path, &claim)).status
    };
    const VERIFIED: u8 = 0x01 | 0x02 | 0x04;
    // Behind the header, the request is the proxy's client's own bytes:
    // what it claims names nobody, and nobody is asked for a credential.
    let sessions = "/v1/operations/sessions";
    assert_eq!(ask(&proxy_v2(None), sessions), 401);
    assert_eq!(ask(&proxy_v2(Some((0x01, 0, None))), sessions), 401);
    let unverified = proxy_v2(Some((VERIFIED, 21, Some("viewer"))));
    assert_eq!(ask(&unverified, sessions), 401);
    // A certificate the proxy verified names its holder, whatever the
    // request claims: the viewer reaches the sessions and no further.
    let viewer = proxy_v2(Some((VERIFIED, 0, Some("viewer"))));
    assert_eq!(ask(&viewer, sessions), 200);
    assert_eq!(ask(&viewer, "/v1/operations/consumers"), 403);
}

#[test]
fn a_request_with_an_ambiguous_length_is_answered_400_and_nothing_behind_it_is_read() {
    let (_broker, address, _dir) = broker_with(LOOPBACK_DOOR, "");
    let behind = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    for lengths in [
        "Content-Length: 0\r\nContent-Length: 5\r\n",
        "Content-Length: 0\r\nContent-Length: 0\r\n",
        "Content-Length: 0, 5\r\n",
        "Transfer-Encoding: chunked\r\nContent-Length: 0\r\n",
        "Content-Length: +0\r\n",
    ] {
        let smuggling = format!("GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n{lengths}\r\n{behind}");
        let mut stream = send(&address, &smuggling);
        let mut text = String::new();
        stream.read_to_string(&mut text).unwrap();
        assert_eq!(text.matches("HTTP/1.1 ").count(), 1, "{lengths}: {text}");
        let answer = Answer::parse(&text).unwrap();
        assert_eq!(answer.status, 400, "{lengths}: {text}");
        assert!(answer.body.contains("Content-Length"), "{lengths}: {text}");
        assert_eq!(answer.header("Connection").as_deref(), Some("close"));
    }
    // One length of 0 is no body, as before.
    let one = "GET /health HTTP/1.1\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
    assert_eq!(exchange(tcp(&address), one).status, 200);
}

#[test]
fn a_cross_site_post_is_refused_and_writes_nothing() {
    let dir = TempDir::new("ops-cross-site");
    let block = format!("{REDB_EVENTS}  operations:\n{LOOPBACK_DOOR}");
    let mut broker = BrokerProcess::start_in(dir.path(), &block, "");
    let line = broker.wait_for_log("operations door tcp bound to");
    let ops = line.rsplit("bound to ").next().unwrap().trim().to_string();
    let copies = TempDir::new("ops-cross-site-copies");
    let path = format!("/v1/operations/backup?dir={}", copies.path().display());
    let post = |headers: &[(&str, &str)]| exchange(tcp(&ops), &request("POST", &path, headers));
    let ours = ("X-Saguin-Request", "backup");
    let host = ("Host", ops.as_str());
    let written = || std::fs::read_dir(copies.path()).unwrap().count();
    for (headers, rule) in [
        (
            vec![host, ("Origin", "https://evil.example"), ours],
            "Origin",
        ),
        (vec![host, ("Origin", "null"), ours], "Origin"),
        (
            vec![host, ("Sec-Fetch-Site", "cross-site"), ours],
            "Sec-Fetch-Site",
        ),
        (
            vec![host, ("Sec-Fetch-Site", "same-site"), ours],
            "Sec-Fetch-Site",
        ),
        // What a page's form sends carries no header of ours.
        (vec![host], "X-Saguin-Request"),
    ] {
        let refused = post(&headers);
        assert_eq!(refused.status, 403, "{headers:?}: {}", refused.body);
        assert!(refused.body.contains(rule), "{headers:?}: {}", refused.body);
    }
    assert_eq!(written(), 0, "a refused request wrote a copy");
    // The broker's own tool, and a page of this very door, are served.
    assert_eq!(post(&[host, ours]).status, 200);
    let origin = format!("http://{ops}");
    let same = [
        host,
        ("Origin", &origin),
        ("Sec-Fetch-Site", "same-origin"),
        ours,
    ];
    assert_eq!(post(&same).status, 200);
    assert_eq!(written(), 2);
}

/// Opens a connection and sends `request` without reading the answer.
fn send(address: &str, request: &str) -> TcpStream {
    let mut stream = tcp(address);
    stream.write_all(request.as_bytes()).unwrap();
    stream
}

/// Reads what is left of a connection's answers until the listener closes.
fn finish(mut stream: TcpStream) -> Answer {
    let mut bytes = Vec::new();
    stream.read_to_end(&mut bytes).unwrap();
    Answer::parse(&String::from_utf8(bytes).unwrap()).expect("a complete response")
}

/// Whether the listener has written nothing on `stream` yet.
fn unanswered(stream: &TcpStream) -> bool {
    stream.set_nonblocking(true).unwrap();
    let mut byte = [0u8; 1];
    let nothing =
        matches!(stream.peek(&mut byte), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock);
    stream.set_nonblocking(false).unwrap();
    nothing
}

/// Reads one keep-alive answer to `/health` off `stream`, leaving the
/// connection open.
fn read_health(stream: &mut TcpStream) {
    let mut text = Vec::new();
    let mut byte = [0u8; 1];
    while !text.ends_with(b"{\"status\":\"ok\"}") {
        assert_eq!(stream.read(&mut byte).unwrap(), 1, "closed mid-answer");
        text.push(byte[0]);
    }
}

#[test]
fn health_is_answered_while_idle_keep_alive_connections_hold_every_slot() {
    let (_broker, address, _dir) = broker_with(LOOPBACK_DOOR, "");
    let keep_alive = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
    let seats = saguin::ops::DEFAULT_MAX_CONNECTIONS;
    let mut idle: Vec<TcpStream> = (0..seats).map(|_| send(&address, keep_alive)).collect();
    for stream in &mut idle {
        read_health(stream);
    }
    // Every slot holds a connection waiting for its next request: the one
    // that has waited longest makes room.
    let probe = get(&address, "/health", &[]);
    assert_eq!(probe.status, 200, "{}", probe.body);
    let mut rest = Vec::new();
    idle[0].read_to_end(&mut rest).unwrap();
    assert!(rest.is_empty(), "the longest idle is closed unanswered");
    // Any route, not /health alone: the next longest idle makes room.
    assert_eq!(get(&address, "/metrics", &[]).status, 200);
    assert!(unanswered(&idle[seats - 1]), "the newest idle stays open");
}

#[test]
fn health_is_answered_while_half_sent_requests_hold_every_slot() {
    let (_broker, address, _dir) = broker_with(LOOPBACK_DOOR, "");
    let half = "GET /v1/operations/sessions HTTP/1.1\r\nHo";
    // As many as both tables seat.
    let seats = 2 * saguin::ops::DEFAULT_MAX_CONNECTIONS;
    let held: Vec<TcpStream> = (0..seats).map(|_| send(&address, half)).collect();
    let probe = get(&address, "/health", &[]);
    assert_eq!(probe.status, 200, "{}", probe.body);
    // A caller without a slot of its own is served past them too.
    assert_eq!(get(&address, "/metrics", &[]).status, 200);
    drop(held);
}

/// Iterations of PBKDF2 in the operators below that no password matches:
/// enough that a check outlasts a few requests by far (about a second in
/// a debug build).
const COSTLY_ITERATIONS: u32 = 50_000;

/// An operators line checked with `iterations` of PBKDF2 that no password
/// matches (its digest is zeros).
fn costly_line(name: &str, iterations: u32) -> String {
    use base64ct::Encoding;
    let salt = base64ct::Base64::encode_string(SALT);
    let digest = base64ct::Base64::encode_string(&[0u8; 64]);
    format!("{name}:$7${iterations}${salt}${digest}")
}

/// A `$6$` hash, one SHA-512 to check: `mosquitto_passwd -H sha512`'s
/// for `hunter2`.
const SHA512_HUNTER2: &str = "$6$DssEkUY/ld4blukw$9EvI2OdZOnUSp3rG8Qjszy7fwnQxLXJGRPu9kUowxiIPjM9xRKwAAn/h8/6b8fmq77JWiZKEY/HdIpz+/DUDrQ==";

/// A door whose operators are `slow` (costly, matching nothing),
/// `prometheus` (password `scrape`, 101 iterations) and `legacy` (one
/// SHA-512), with `operations_extra` under the block.
fn costly_operators_broker(
    tag: &str,
    operations_extra: &str,
) -> (BrokerProcess, String, [TempDir; 2]) {
    let dir = TempDir::new(tag);
    let path = dir.path().join("operations.passwd");
    let lines = [
        costly_line("slow", COSTLY_ITERATIONS),
        format!("{}:/metrics", hash_line("prometheus", "scrape", SALT)),
        format!("legacy:{SHA512_HUNTER2}"),
    ];
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    let yaml = format!(
        "{LOOPBACK_DOOR}    password_file: {}\n{operations_extra}",
        path.display()
    );
    let (broker, address, broker_dir) = broker_with(&yaml, "");
    (broker, address, [dir, broker_dir])
}

/// What the broker logs (at debug) as the `n`th check at once begins.
fn pending(n: usize) -> String {
    format!("checking a password off the operations thread, {n} pending")
}

fn metrics_as(user: &str, password: &str) -> String {
    request(
        "GET",
        "/metrics",
        &[("Authorization", &basic(user, password))],
    )
}

#[test]
fn a_refusal_costs_the_costliest_check_and_no_check_holds_up_health() {
    let (mut broker, address, _dirs) = costly_operators_broker("ops-costly", "");
    // Each refusal, alone among the checks, does the costliest entry's
    // work, and does it off the thread that answers /health.
    let cases = [
        ("slow", "the costly entry's own check"),
        ("nobody", "an unknown name costs as much"),
        ("legacy", "so does a wrong password for the cheapest entry"),
    ];
    for (at, (user, why)) in cases.into_iter().enumerate() {
        let refused = send(&address, &metrics_as(user, "guess"));
        broker.wait_for_nth_log(&pending(1), at + 1);
        assert_eq!(get(&address, "/health", &[]).status, 200);
        assert!(unanswered(&refused), "{why}");
        assert_eq!(finish(refused).status, 401);
    }
}

#[test]
fn password_checks_past_the_bound_are_answered_503_and_a_verified_credential_skips_them() {
    let (mut broker, address, _dirs) = costly_operators_broker("ops-checks", "");
    // Verified once, remembered.
    let scraper = metrics_as("prometheus", "scrape");
    assert_eq!(exchange(tcp(&address), &scraper).status, 200);
    // Sixteen connections take four checks at once.
    let bound = saguin::ops::password_checks::most_for(saguin::ops::DEFAULT_MAX_CONNECTIONS);
    assert_eq!(bound, 4);
    let guesses: Vec<TcpStream> = (0..bound)
        .map(|_| send(&address, &metrics_as("slow", "guess")))
        .collect();
    broker.wait_for_log(&pending(bound));
    for _ in 0..2 {
        let busy = exchange(tcp(&address), &metrics_as("slow", "guess"));
        assert_eq!(busy.status, 503, "{}", busy.body);
        assert_eq!(busy.header("Retry-After").as_deref(), Some("1"));
    }
    // The scraper verified before needs no check, and is answered while
    // the last guess still waits for the three before it.
    assert_eq!(exchange(tcp(&address), &scraper).status, 200);
    assert!(unanswered(guesses.last().unwrap()));
    for guess in guesses {
        assert_eq!(finish(guess).status, 401);
    }
}

#[test]
fn with_every_slot_working_health_is_still_answered_and_other_routes_429() {
    let (mut broker, address, _dirs) =
        costly_operators_broker("ops-overflow", "    max_connections: 1\n");
    // The one slot is held by a request being worked on, which nobody
    // may take from it.
    let working = send(&address, &metrics_as("slow", "guess"));
    broker.wait_for_log(&pending(1));
    let health = get(&address, "/health", &[]);
    assert_eq!(health.status, 200, "{}", health.body);
    let refused = get(&address, "/metrics", &[]);
    assert_eq!(refused.status, 429);
    assert_eq!(refused.header("Retry-After").as_deref(), Some("1"));
    assert!(refused.body.contains("/health"), "{}", refused.body);
    assert!(unanswered(&working));
    assert_eq!(finish(working).status, 401);
}

/// The listener alone, for a test that runs it in process: one TCP door
/// on a port the kernel picks.
fn one_loopback_door(
    password_file: Option<Arc<saguin::ops::operators::Operators>>,
) -> saguin::ops::Settings {
    saguin::ops::Settings {
        tcp: vec![saguin::ops::TcpDoor {
            name: "tcp".into(),
            address: "127.0.0.1:0".into(),
            password_file: None,
            tls: None,
        }],
        unix: Vec::new(),
        password_file,
        min_scrape_interval_s: 60,
        max_connections: saguin::ops::DEFAULT_MAX_CONNECTIONS,
        resolved: Default::default(),
    }
}

#[test]
fn health_is_unavailable_when_the_broker_says_a_restart_would_help() {
    let bound = saguin::ops::bind(&one_loopback_door(None)).unwrap();
    let address = bound.tcp_addresses()[0].to_string();
    let (link, asks) = saguin::ops::Link::new("t".into(), Arc::new(|| false), Vec::new());
    let _sockets = bound.spawn(link).unwrap();
    let health = get(&address, "/health", &[]);
    assert_eq!(health.status, 503);
    assert_eq!(health.body, "{\"status\":\"unavailable\"}");
    // An executor that cannot take the question: the route says so at once.
    drop(asks);
    assert_eq!(get(&address, "/metrics", &[]).status, 503);
}

#[test]
fn startup_refusals_name_the_key() {
    let dir = TempDir::new("ops-check");
    let check = |yaml: &str| {
        let path = dir.path().join("check.yaml");
        std::fs::write(&path, format!("broker:\n  id: a\n  operations:\n{yaml}")).unwrap();
        let output = common::check_config(&path);
        assert!(!output.status.success());
        String::from_utf8_lossy(&output.stderr).to_string()
    };
    let nobody = dir.path().join("empty.passwd");
    std::fs::write(&nobody, "\n").unwrap();
    let two_doors_one_name = "    listen:\n      tcp:\n        - name: a\n          address: 127.0.0.1:9090\n        - name: a\n          address: 127.0.0.1:9090\n";
    let cases: [(String, &[&str]); 7] = [
        (
            "    listen:\n      tcp:\n        address: 0.0.0.0:9090\n".into(),
            &["broker.operations.listen.tcp.address", "password_file"],
        ),
        (
            format!("{LOOPBACK_DOOR}    min_scrape_interval: 10s\n"),
            &["broker.operations.min_scrape_interval"],
        ),
        ("    listen: {}\n".into(), &["broker.operations.listen"]),
        (
            format!("{LOOPBACK_DOOR}        tls: {{}}\n"),
            &["broker.operations.listen.tcp.tls"],
        ),
        (
            two_doors_one_name.into(),
            &[
                "broker.operations.listen.tcp[1].name",
                "broker.operations.listen.tcp[1].address",
            ],
        ),
        (
            format!("{LOOPBACK_DOOR}    password_file: {}\n", nobody.display()),
            &["broker.operations.password_file", "names nobody"],
        ),
        (
            format!("{LOOPBACK_DOOR}        allow_anonymous: true\n"),
            &["broker.operations.listen.tcp.allow_anonymous"],
        ),
    ];
    for (yaml, expected) in cases {
        let refusal = check(&yaml);
        for needle in expected {
            assert!(refusal.contains(needle), "{yaml}: {refusal}");
        }
    }
    let mqtt_port = check("    listen:\n      tcp:\n        address: 127.0.0.1:1883\n");
    assert!(mqtt_port.contains("broker.mqtt.listen.tcp"), "{mqtt_port}");
}

/// The value of the sample `series` (name and labels as written) in a
/// scrape.
fn sample(body: &str, series: &str) -> f64 {
    common::http::sample(body, series)
}

/// The first number after `"key":` in a JSON body.
fn number(body: &str, key: &str) -> u64 {
    let after = body
        .split(&format!("\"{key}\":"))
        .nth(1)
        .expect("the key is present");
    let digits: String = after.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().unwrap()
}

const REDB_EVENTS: &str = "  storage:\n    default: local\n    default_retention_period: none\n    default_retention_bytes: none\n    providers:\n      local:\n        type: redb\n        file_path: {dir}/saguin.redb\n        max_bytes: 64MiB\n";

#[test]
fn retention_passing_a_stopped_consumer_raises_the_alert_and_names_it() {
    let dir = TempDir::new("ops-alert");
    let channels =
        "channels:\n  events:\n    type: append\n    filter: events/#\n    retention_bytes: 4KiB\n";
    let block = format!("{REDB_EVENTS}  operations:\n{LOOPBACK_DOOR}");
    let mut broker = BrokerProcess::start_in(dir.path(), &block, channels);
    let line = broker.wait_for_log("operations door tcp bound to");
    let ops = line.rsplit("bound to ").next().unwrap().trim().to_string();
    let address = broker.address();
    let (mut consumer, _) = common::durable_connect(&address, "truck-114");
    consumer.subscribe("events/#", QoS::AtLeastOnce);
    consumer.send(&Packet::Disconnect(Default::default()));
    drop(consumer);
    let mut publisher = RawClient::connect(&address, ProtocolVersion::V5, "publisher");
    let records: Vec<Vec<u8>> = (0..40).map(|i| vec![i as u8; 1024]).collect();
    common::publish_all(&mut publisher, "events/big", &records);
    broker.wait_for_log("retention removed");
    let scrape = get(&ops, "/metrics", &[]).body;
    let floor = sample(&scrape, "saguin_channel_floor_offset{channel=\"events\"}");
    let position_min = sample(
        &scrape,
        "saguin_channel_consumer_position_min{channel=\"events\"}",
    );
    assert!(
        floor > position_min,
        "the alert holds: floor {floor}, position {position_min}"
    );
    assert_eq!(
        sample(&scrape, "saguin_channel_consumers{channel=\"events\"}"),
        1.0
    );
    assert!(
        sample(
            &scrape,
            "saguin_channel_retention_removed_total{channel=\"events\"}"
        ) > 0.0
    );
    let provider = "{provider=\"local\"}";
    assert!(sample(&scrape, &format!("saguin_provider_bytes{provider}")) > 0.0);
    let max_bytes = sample(&scrape, &format!("saguin_provider_max_bytes{provider}"));
    assert_eq!(max_bytes, 64.0 * 1024.0 * 1024.0);
    let committed = sample(
        &scrape,
        &format!("saguin_storage_committed_records_total{provider}"),
    );
    assert!(committed >= 40.0, "{committed}");
    assert!(scrape.contains("saguin_provider_info{provider=\"local\",type=\"redb\"} 1\n"));
    let consumers = get(&ops, "/v1/operations/consumers", &[]).body;
    assert!(
        consumers.contains("\"reader\":\"mqtt:truck-114\""),
        "{consumers}"
    );
    // It comes back to a gap: told with Session Present 0, and named.
    let (_consumer, session_present) = common::durable_connect(&address, "truck-114");
    assert!(!session_present);
    let lost = get(&ops, "/v1/operations/position-lost", &[]).body;
    assert!(
        lost.contains("\"reader\":\"mqtt:truck-114\",\"channel\":\"events\",\"kind\":\"session\",\"reported\":true,\"count\":1,"),
        "{lost}"
    );
    // Retention may have moved on since the scrape; the row explains itself.
    let (position, floor_then) = (number(&lost, "last_position"), number(&lost, "last_floor"));
    assert_eq!(position as f64, position_min);
    assert!(floor_then as f64 >= floor);
    assert_eq!(number(&lost, "records_missed"), floor_then - position);
    assert!(
        lost.ends_with("\"returned\":1,\"tracked\":1,\"beyond\":0}"),
        "{lost}"
    );
}

#[test]
fn a_queue_route_lists_its_work_and_an_unknown_queue_is_404() {
    let dir = TempDir::new("ops-queue");
    let channels = "channels:\n  jobs:\n    type: queue\n    filter: jobs/#\n";
    let block = format!("{REDB_EVENTS}  operations:\n{LOOPBACK_DOOR}");
    let mut broker = BrokerProcess::start_in(dir.path(), &block, channels);
    let line = broker.wait_for_log("operations door tcp bound to");
    let ops = line.rsplit("bound to ").next().unwrap().trim().to_string();
    let mut publisher = RawClient::connect(&broker.address(), ProtocolVersion::V5, "producer");
    common::publish_all(
        &mut publisher,
        "jobs/a",
        &[b"one".to_vec(), b"two".to_vec()],
    );
    let queue = get(&ops, "/v1/operations/queues/jobs", &[]);
    assert_eq!(queue.status, 200);
    assert!(
        queue
            .body
            .starts_with("{\"channel\":\"jobs\",\"unresolved\":2,\"returned\":2,"),
        "{}",
        queue.body
    );
    assert!(
        queue
            .body
            .contains("\"topic\":\"jobs/a\",\"attempts\":0,\"state\":\"waiting\""),
        "{}",
        queue.body
    );
    assert!(!queue.body.contains("one"), "no payload: {}", queue.body);
    let unknown = get(&ops, "/v1/operations/queues/nothing", &[]);
    assert_eq!(unknown.status, 404);
    assert!(!unknown.body.contains("jobs"));
    let metrics = get(&ops, "/metrics", &[]).body;
    assert_eq!(
        sample(&metrics, "saguin_queue_depth{channel=\"jobs\"}"),
        2.0
    );
    let published = "saguin_published_total{channel=\"jobs\"}";
    assert_eq!(sample(&metrics, published), 2.0);
}

#[test]
fn a_reload_reads_the_operators_again_and_a_broken_file_changes_nothing() {
    let dir = TempDir::new("ops-reload");
    let path = dir.path().join("operations.passwd");
    std::fs::write(&path, hash_line("first", "one", SALT)).unwrap();
    let routes = saguin::ops::route::ROUTES;
    let operators = saguin::ops::operators::Operators::load(&path, routes).unwrap();
    let bound = saguin::ops::bind(&one_loopback_door(Some(Arc::new(operators)))).unwrap();
    let address = bound.tcp_addresses()[0].to_string();
    let reloader = bound.reloader();
    let (link, _asks) = saguin::ops::Link::new("t".into(), Arc::new(|| true), Vec::new());
    let _sockets = bound.spawn(link).unwrap();
    // Answered 403 rather than 401 once accepted: the route asks for a
    // scope the test grants below, and the credential is what is checked.
    let status = |user: &str, password: &str| {
        let credential = basic(user, password);
        get(
            &address,
            "/v1/operations/sessions",
            &[("Authorization", &credential)],
        )
        .status
    };
    assert_eq!(status("second", "two"), 401);
    let second = format!("{}:/metrics", hash_line("second", "two", SALT));
    std::fs::write(&path, second).unwrap();
    reloader.reload();
    assert_eq!(status("second", "two"), 403);
    assert_eq!(status("first", "one"), 401);
    // Half saved: refused, and the operators read before stay.
    std::fs::write(&path, "second").unwrap();
    reloader.reload();
    assert_eq!(status("second", "two"), 403);
}

#[test]
fn a_port_in_use_stops_the_broker_naming_the_door() {
    let dir = TempDir::new("ops-busy");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let path = dir.path().join("saguin.yaml");
    let yaml = format!(
        "broker:\n  id: a\n  mqtt:\n    listen:\n      tcp:\n        address: 127.0.0.1:0\n  operations:\n    listen:\n      tcp:\n        address: 127.0.0.1:{port}\n"
    );
    std::fs::write(&path, yaml).unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_saguin"))
        .arg("--config")
        .arg(&path)
        .output()
        .unwrap();
    assert!(!output.status.success());
    let said = String::from_utf8_lossy(&output.stdout) + String::from_utf8_lossy(&output.stderr);
    assert!(
        said.contains("broker.operations.listen.tcp \"tcp\""),
        "{said}"
    );
    drop(taken);
}

#[test]
fn a_start_says_how_many_sessions_it_put_back_and_ended() {
    let dir = TempDir::new("ops-restart");
    let block = format!("{REDB_EVENTS}  operations:\n{LOOPBACK_DOOR}");
    let start = |dir: &TempDir| {
        let mut broker = BrokerProcess::start_in(dir.path(), &block, "");
        let line = broker.wait_for_log("operations door tcp bound to");
        let ops = line.rsplit("bound to ").next().unwrap().trim().to_string();
        (broker, ops)
    };
    let (mut broker, _) = start(&dir);
    let (mut kept, _) = common::durable_connect(&broker.address(), "kept");
    kept.subscribe("t/#", QoS::AtLeastOnce);
    kept.send(&Packet::Disconnect(Default::default()));
    assert!(matches!(kept.recv(), common::Received::Closed));
    drop(kept);
    // Expires while the broker is stopped.
    let mut brief = RawClient::open(&broker.address(), ProtocolVersion::V5);
    let mut connect = common::connect_packet(ProtocolVersion::V5, "brief");
    connect.clean_start = false;
    connect.properties.session_expiry_interval_s = Some(1);
    brief.send(&Packet::Connect(Box::new(connect)));
    assert!(matches!(
        brief.recv(),
        common::Received::Packet(Packet::Connack(_))
    ));
    brief.send(&Packet::Disconnect(Default::default()));
    // The broker closes only once the DISCONNECT's session write has landed,
    // so the record holds the moment the expiry counts from.
    assert!(matches!(brief.recv(), common::Received::Closed));
    drop(brief);
    assert!(broker.terminate().success());
    drop(broker);
    // The condition is the wall clock itself: the brief session's second,
    // counted from its disconnect, has run out before the start.
    let due = std::time::SystemTime::now() + std::time::Duration::from_secs(1);
    while std::time::SystemTime::now() <= due {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let (_broker, ops) = start(&dir);
    let scrape = get(&ops, "/metrics", &[]).body;
    assert_eq!(sample(&scrape, "saguin_sessions_restored_total"), 1.0);
    let expired = "saguin_sessions_dropped_total{cause=\"expired_while_stopped\"}";
    assert_eq!(sample(&scrape, expired), 1.0);
}

#[test]
fn sigusr1_re_reads_the_operators_file() {
    let dir = TempDir::new("ops-usr1");
    let path = dir.path().join("operations.passwd");
    std::fs::write(&path, hash_line("first", "one", SALT)).unwrap();
    let yaml = format!("{LOOPBACK_DOOR}    password_file: {}\n", path.display());
    let (mut broker, address, _d) = broker_with(&yaml, "");
    let status = |user: &str, password: &str| {
        let credential = basic(user, password);
        get(&address, "/metrics", &[("Authorization", &credential)]).status
    };
    assert_eq!(status("second", "two"), 401);
    std::fs::write(&path, hash_line("second", "two", SALT)).unwrap();
    let sent = Command::new("kill")
        .arg("-USR1")
        .arg(broker.pid().to_string())
        .status()
        .unwrap();
    assert!(sent.success());
    broker.wait_for_log("operations: re-read");
    assert_eq!(status("second", "two"), 200);
    assert_eq!(status("first", "one"), 401);
}

/// A session row names what its connection said: the user, the door,
/// Clean Start and the partition slices it declared; a consumer row says
/// when its session was last heard from.
#[test]
fn a_session_names_its_user_door_clean_start_and_slices_and_a_consumer_its_last_seen() {
    let dir = TempDir::new("ops-session-rows");
    let channels = "channels:\n  events:\n    type: append\n    filter: events/#\n";
    // With no password file a user name is taken as stated only when asked.
    let block = format!(
        "    trust_unchecked_user_names: true\n{REDB_EVENTS}  operations:\n{LOOPBACK_DOOR}"
    );
    let mut broker = BrokerProcess::start_in(dir.path(), &block, channels);
    let line = broker.wait_for_log("operations door tcp bound to");
    let ops = line.rsplit("bound to ").next().unwrap().trim().to_string();

    let mut client = RawClient::open(&broker.address(), ProtocolVersion::V5);
    let mut connect = common::connect_packet(ProtocolVersion::V5, "north-17");
    connect.clean_start = false;
    connect.username = Some("cohort-north".into());
    connect.properties.session_expiry_interval_s = Some(3600);
    client.send(&Packet::Connect(Box::new(connect)));
    assert!(matches!(
        client.recv(),
        common::Received::Packet(Packet::Connack(_))
    ));
    let properties = saguin::codec::Properties {
        user_properties: ["topic_hash(3, 0)", "topic_hash(3, 2)"]
            .iter()
            .map(|v| ("saguin-filter".to_string(), v.to_string()))
            .collect(),
        ..Default::default()
    };
    let options = saguin::codec::SubscriptionOptions {
        qos: QoS::AtLeastOnce,
        ..Default::default()
    };
    client.send(&Packet::Subscribe(saguin::codec::Subscribe {
        packet_id: 1,
        properties,
        filters: vec![("events/+".into(), options)],
    }));
    assert!(matches!(
        client.recv(),
        common::Received::Packet(Packet::Suback(_))
    ));

    let sessions = get(&ops, "/v1/operations/sessions", &[]).body;
    assert!(
        sessions.contains("{\"client_id\":\"north-17\",\"connected\":true,\"user\":\"cohort-north\",\"protocol\":5,\"listener\":\"tcp\",\"remote\":\"127.0.0.1:"),
        "{sessions}"
    );
    assert!(
        sessions.contains("\"expires_after\":3600,\"clean_start\":false,\"subscriptions\":1,\"partitions\":[{\"filter\":\"events/+\",\"count\":3,\"indices\":[0,2]}]}"),
        "{sessions}"
    );
    // The position is stored by the storage thread after the SUBACK: wait
    // for it rather than race it.
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let consumers = get(&ops, "/v1/operations/consumers", &[]).body;
        if consumers
            .contains("{\"reader\":\"mqtt:north-17\",\"offset\":1,\"behind\":0,\"last_seen\":\"20")
        {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{consumers}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // Gone, its session is held: nothing its connection said is known,
    // and it was last seen when it went.
    client.send(&Packet::Disconnect(Default::default()));
    drop(client);
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let sessions = get(&ops, "/v1/operations/sessions", &[]).body;
        if sessions
            .contains("\"connected\":false,\"user\":null,\"protocol\":null,\"listener\":null")
        {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{sessions}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let consumers = get(&ops, "/v1/operations/consumers", &[]).body;
    assert!(
        consumers
            .contains("\"reader\":\"mqtt:north-17\",\"offset\":1,\"behind\":0,\"last_seen\":\"20"),
        "{consumers}"
    );
}
