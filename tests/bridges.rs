//! Bridges against real peers on loopback, started by the tests: Debian's
//! `mosquitto`, a second Sagüin, and a peer the test plays. Every case
//! whose peer listens runs twice, over `tcp://` (or `tls://`) and over
//! `ws://` (or `wss://`): `over_both!` makes the two tests.

mod common;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::certs::Authority;
use common::mosquitto::{have_mosquitto, Mosquitto};
use common::websocket::Framed;
use common::{free_port, have_tools, BrokerProcess, RawClient, Received, Stream, TempDir, WAIT};
use saguin::codec::{Connect, Packet, ProtocolVersion, PubAck, Publish, QoS};

const REDB: &str = "  storage:\n    default: local\n    default_retention_period: none\n    default_retention_bytes: none\n    providers:\n      local:\n        type: redb\n        file_path: {dir}/saguin.redb\n        max_bytes: 64MiB\n  session:\n    storage: local\n";
const EVENTS: &str = "channels:\n  events:\n    type: append\n    filter: events/#\n";

/// How a bridge reaches its peer.
#[derive(Clone, Copy, Debug)]
enum Transport {
    Tcp,
    WebSocket,
}

impl Transport {
    /// The `peer` key for a peer taking the bridge on `port`.
    fn peer(self, port: u16) -> String {
        match self {
            Transport::Tcp => format!("tcp://127.0.0.1:{port}"),
            Transport::WebSocket => format!("ws://127.0.0.1:{port}/mqtt"),
        }
    }

    /// The `peer` key for a peer taking the bridge over TLS on `port`.
    fn secure_peer(self, port: u16) -> String {
        match self {
            Transport::Tcp => format!("tls://127.0.0.1:{port}"),
            Transport::WebSocket => format!("wss://127.0.0.1:{port}/mqtt"),
        }
    }

    /// A mosquitto listener on `port` for the bridge. Debian's 2.0.11
    /// serves WebSocket on an address only with `socket_domain ipv4`.
    fn mosquitto_listener(self, port: u16) -> String {
        match self {
            Transport::Tcp => format!("listener {port} 127.0.0.1\n"),
            Transport::WebSocket => {
                format!("listener {port} 127.0.0.1\nprotocol websockets\nsocket_domain ipv4\n")
            }
        }
    }

    /// The door a Sagüin hub takes the bridge on, beside its TCP door.
    fn hub_door(self) -> &'static str {
        match self {
            Transport::Tcp => "",
            Transport::WebSocket => "      ws:\n        address: 127.0.0.1:0\n",
        }
    }

    /// The port of that door.
    fn hub_port(self, hub: &mut BrokerProcess) -> u16 {
        match self {
            Transport::Tcp => hub.port,
            Transport::WebSocket => hub.door_port("ws"),
        }
    }
}

/// The two tests of a case taking a [`Transport`]: `<case>::tcp` and
/// `<case>::ws`.
macro_rules! over_both {
    ($case:ident) => {
        mod $case {
            #[test]
            fn tcp() {
                super::$case(super::Transport::Tcp)
            }

            #[test]
            fn ws() {
                super::$case(super::Transport::WebSocket)
            }
        }
    };
}

/// A Sagüin hub for a bridge to dial over `transport`, and the port the
/// bridge dials.
fn hub(transport: Transport) -> (BrokerProcess, u16) {
    let mut hub = BrokerProcess::start(transport.hub_door());
    let port = transport.hub_port(&mut hub);
    (hub, port)
}

/// A mosquitto broker persisting its sessions in `dir`, so that a
/// subscriber's queue outlives a restart of it. The test's own clients
/// reach it over TCP on its `port`.
struct Peer;

impl Peer {
    /// Taking the bridge on `bridge_port` over `transport`; over TCP, the
    /// test's clients use that port too.
    fn start(dir: &Path, bridge_port: u16, transport: Transport) -> Mosquitto {
        match transport {
            Transport::Tcp => Peer::start_with(dir, bridge_port, ""),
            Transport::WebSocket => {
                Peer::start_with(dir, free_port(), &transport.mosquitto_listener(bridge_port))
            }
        }
    }

    /// With `extra` appended to its configuration: another listener, say.
    fn start_with(dir: &Path, port: u16, extra: &str) -> Mosquitto {
        let config = format!(
            "allow_anonymous true\npersistence true\npersistence_location {}/\nmax_queued_messages 100000\nlistener {port} 127.0.0.1\n{extra}",
            dir.display()
        );
        Mosquitto::start(dir, &config, port)
    }
}

fn durable(client_id: &str) -> Connect {
    let mut connect = common::connect_packet(ProtocolVersion::V311, client_id);
    connect.clean_start = false;
    connect
}

/// A durable 3.1.1 client at `address` (mosquitto keeps its session).
fn durable_client(address: &str, client_id: &str) -> RawClient {
    let mut client = RawClient::open(address, ProtocolVersion::V311);
    client.send(&Packet::Connect(Box::new(durable(client_id))));
    assert!(matches!(
        client.recv(),
        Received::Packet(Packet::Connack(_))
    ));
    client
}

fn publish(client: &mut RawClient, topic: &str, payload: &str, id: u16) {
    client.send(&Packet::Publish(Publish {
        qos: QoS::AtLeastOnce,
        topic: topic.into(),
        packet_id: Some(id),
        payload: payload.as_bytes().to_vec(),
        ..Publish::default()
    }));
    loop {
        match client.recv() {
            Received::Packet(Packet::Puback(ack)) if ack.packet_id == id => {
                assert!(!ack.reason_code.is_error(), "refused: {ack:?}");
                return;
            }
            Received::Packet(_) => continue,
            Received::Closed => panic!("closed while publishing"),
        }
    }
}

/// Payloads received, acknowledged, until `last` arrives (included).
fn receive_until(client: &mut RawClient, last: &str) -> Vec<String> {
    let mut got = Vec::new();
    loop {
        match client.recv() {
            Received::Packet(Packet::Publish(p)) => {
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
            Received::Packet(_) => continue,
            Received::Closed => panic!("closed after {got:?}"),
        }
    }
}

/// Disconnects cleanly and waits for the broker to close: everything sent
/// before the DISCONNECT has then been handled there.
fn disconnect_and_wait(mut client: RawClient) {
    client.send(&Packet::Disconnect(Default::default()));
    while let Received::Packet(_) = client.recv() {}
}

fn bridge_yaml(peer: &str, rules: &str) -> String {
    format!("bridges:\n  up:\n    peer: {peer}\n    client_id: gw-1\n    topics:\n{rules}")
}

over_both!(
    records_published_while_mosquitto_is_down_arrive_upstream_in_order_once_across_a_sigkill
);
fn records_published_while_mosquitto_is_down_arrive_upstream_in_order_once_across_a_sigkill(
    transport: Transport,
) {
    if !have_mosquitto(
        "records_published_while_mosquitto_is_down_arrive_upstream_in_order_once_across_a_sigkill",
    ) {
        return;
    }
    let peer_dir = TempDir::new("mosquitto");
    let port = free_port();
    // The upstream subscriber's session exists before any record crosses.
    let peer = Peer::start(peer_dir.path(), port, transport);
    let mut watcher = durable_client(&peer.address(), "watcher");
    watcher.subscribe("up/#", QoS::AtLeastOnce);

    let dir = TempDir::new("bridge-out");
    let rules = "      - filter: events/#\n        direction: out\n        topic: up/$#\n";
    let top = format!("{EVENTS}{}", bridge_yaml(&transport.peer(port), rules));
    // The longest interval: only the link's end stores the position in time.
    let broker = format!("{REDB}    ack_commit_interval: 1s\n");
    let mut saguin = BrokerProcess::start_in(dir.path(), &broker, &top);
    saguin.wait_for_log("bridge up: reading its out filter");
    saguin.wait_for_log("bridge up: link to");
    let mut device = RawClient::connect(&saguin.address(), ProtocolVersion::V5, "device");
    for n in 1..=10 {
        publish(&mut device, "events/a", &n.to_string(), n);
    }
    assert_eq!(
        receive_until(&mut watcher, "10"),
        (1..=10).map(|n| n.to_string()).collect::<Vec<_>>()
    );
    // The watcher's acknowledgements are taken before mosquitto stops, or
    // it keeps those deliveries and sends them again (DUP) on resume.
    disconnect_and_wait(watcher);
    peer.stop();
    // The link's end stores the rule's position (1..10 taken by the peer)
    // before it is logged; a stored position may otherwise lag by
    // `ack_commit_interval`, and a SIGKILL inside that lag sends the peer
    // the lag again (RFC 0004, at-least-once). The store commits in the order it is asked,
    // so the PUBACK of the first publish below, which follows its own
    // commit, says the position is stored too.
    saguin.wait_for_log(" down (");

    // The peer is down: these wait in the channel, at the bridge's position.
    for n in 11..=200 {
        publish(
            &mut device,
            "events/a",
            &n.to_string(),
            (n % 60000) as u16 + 1,
        );
    }
    // The gateway itself goes down too, hard, before the uplink returns:
    // the bridge's position is its stored session's.
    drop(device);
    saguin.kill();
    drop(saguin);
    let saguin = BrokerProcess::start_in(dir.path(), &broker, &top);
    let mut device = RawClient::connect(&saguin.address(), ProtocolVersion::V5, "device");
    let peer = Peer::start(peer_dir.path(), port, transport);
    let mut watcher = durable_client(&peer.address(), "watcher");
    publish(&mut device, "events/a", "end", 7);
    let got = receive_until(&mut watcher, "end");
    let mut want: Vec<String> = (11..=200).map(|n| n.to_string()).collect();
    want.push("end".into());
    assert_eq!(got, want, "everything once, in order");
    drop(peer);
}

over_both!(inbound_records_are_stored_before_they_are_acknowledged_and_survive_sigkill);
fn inbound_records_are_stored_before_they_are_acknowledged_and_survive_sigkill(
    transport: Transport,
) {
    if !have_mosquitto(
        "inbound_records_are_stored_before_they_are_acknowledged_and_survive_sigkill",
    ) {
        return;
    }
    let peer_dir = TempDir::new("mosquitto-in");
    let port = free_port();
    let peer = Peer::start(peer_dir.path(), port, transport);
    let dir = TempDir::new("bridge-in");
    let rules = "      - filter: field/+/#\n        direction: in\n        topic: events/$1/$#\n";
    let top = format!("{EVENTS}{}", bridge_yaml(&transport.peer(port), rules));
    let mut saguin = BrokerProcess::start_in(dir.path(), REDB, &top);
    saguin.wait_for_log("bridge up: link to");
    // The bridge's SUBSCRIBE at the peer goes out right after its CONNACK;
    // a probe published until it lands says the subscription is in place.
    let mut reader = RawClient::connect(&saguin.address(), ProtocolVersion::V5, "reader");
    reader.subscribe("events/#", QoS::AtLeastOnce);
    let mut field = RawClient::connect(&peer.address(), ProtocolVersion::V311, "field");
    until_crossed(&mut field, "field/probe/x", &mut reader);
    publish(&mut field, "field/probe/x", "marked", 90);
    let marked = loop {
        match reader.recv() {
            Received::Packet(Packet::Publish(p)) if p.payload == b"marked" => break p,
            Received::Packet(Packet::Publish(p)) => {
                reader.send(&Packet::Puback(PubAck {
                    packet_id: p.packet_id.unwrap(),
                    ..PubAck::default()
                }));
            }
            Received::Packet(_) => continue,
            Received::Closed => panic!("closed"),
        }
    };
    reader.send(&Packet::Puback(PubAck {
        packet_id: marked.packet_id.unwrap(),
        ..PubAck::default()
    }));
    assert_eq!(marked.topic, "events/probe/x");
    assert!(
        marked
            .properties
            .user_properties
            .iter()
            .any(|(k, v)| k == "saguin-bridged" && v == "up"),
        "the mark is stored with the record: {marked:?}"
    );
    for n in 1..=50 {
        publish(&mut field, "field/v7/psi", &n.to_string(), 100 + n);
    }
    publish(&mut field, "field/v7/psi", "end", 99);
    let live = receive_until(&mut reader, "end");
    assert_eq!(live.iter().filter(|p| *p == "end").count(), 1);
    drop(reader);
    // Every record the reader saw was stored: after SIGKILL, a fresh
    // reader from the floor is served all of them, each once.
    saguin.kill();
    drop(saguin);
    let saguin = BrokerProcess::start_in(dir.path(), REDB, &top);
    let mut again = RawClient::connect(&saguin.address(), ProtocolVersion::V5, "again");
    again.subscribe("events/v7/#", QoS::AtLeastOnce);
    let mut want: Vec<String> = (1..=50).map(|n| n.to_string()).collect();
    want.push("end".into());
    assert_eq!(receive_until(&mut again, "end"), want);
    drop(peer);
}

over_both!(two_saguins_bridged_both_ways_on_one_topic_make_no_loop);
fn two_saguins_bridged_both_ways_on_one_topic_make_no_loop(transport: Transport) {
    let (hub, port) = hub(transport);
    let dir = TempDir::new("edge");
    let rules = "      - filter: t/#\n        direction: both\n";
    let peer = bridge_yaml(&transport.peer(port), rules);
    let mut edge = BrokerProcess::start_in(dir.path(), "", &peer);
    edge.wait_for_log("bridge up: link to");
    let mut at_edge = RawClient::connect(&edge.address(), ProtocolVersion::V5, "at-edge");
    at_edge.subscribe("t/#", QoS::AtLeastOnce);
    let mut at_hub = RawClient::connect(&hub.address(), ProtocolVersion::V5, "at-hub");
    at_hub.subscribe("t/#", QoS::AtLeastOnce);
    // Until the bridge's own subscription at the hub is in place, a
    // publish there does not cross.
    let mut hub_publisher = RawClient::connect(&hub.address(), ProtocolVersion::V5, "hub-pub");
    let id = until_crossed(&mut hub_publisher, "t/probe", &mut at_edge);
    let probes_at_hub = receive_until(&mut at_hub, &format!("probe-{}", id - 1));
    assert!(probes_at_hub.iter().all(|p| p.starts_with("probe-")));

    let mut edge_publisher = RawClient::connect(&edge.address(), ProtocolVersion::V5, "edge-pub");
    publish(&mut edge_publisher, "t/a", "from-edge", 1);
    publish(&mut hub_publisher, "t/b", "from-hub", id);
    // A copy echoed back would cross on its topic ahead of these fences,
    // which take the same ways: t/a from the hub, t/b from the edge.
    publish(&mut hub_publisher, "t/a", "fence-hub", id + 1);
    publish(&mut edge_publisher, "t/b", "fence-edge", 2);
    for client in [&mut at_hub, &mut at_edge] {
        let mut got: Vec<String> = receive_all_of(client, &["fence-hub", "fence-edge"])
            .into_iter()
            .filter(|p| !p.starts_with("probe-"))
            .collect();
        got.sort();
        assert_eq!(
            got,
            vec!["fence-edge", "fence-hub", "from-edge", "from-hub"]
        );
    }
}

/// Payloads received, acknowledged, until every one of `markers` has come.
fn receive_all_of(client: &mut RawClient, markers: &[&str]) -> Vec<String> {
    let mut got: Vec<String> = Vec::new();
    while !markers.iter().all(|m| got.iter().any(|g| g == m)) {
        let last = markers
            .iter()
            .find(|m| !got.iter().any(|g| g == *m))
            .expect("one is missing");
        got.extend(receive_until(client, last));
    }
    got
}

/// Publishes probes on `topic` until `receiver` is sent one: a bridge's
/// subscription at its peer is then in place. Returns the next packet id.
fn until_crossed(publisher: &mut RawClient, topic: &str, receiver: &mut RawClient) -> u16 {
    let deadline = Instant::now() + WAIT;
    let mut id = 1;
    loop {
        publish(publisher, topic, &format!("probe-{id}"), id);
        id += 1;
        while let Some(Received::Packet(packet)) = receiver.recv_within(Duration::from_millis(200))
        {
            if let Packet::Publish(p) = packet {
                if let Some(packet_id) = p.packet_id {
                    receiver.send(&Packet::Puback(PubAck {
                        packet_id,
                        ..PubAck::default()
                    }));
                }
                return id;
            }
        }
        assert!(Instant::now() < deadline, "nothing crossed on {topic}");
    }
}

over_both!(a_record_that_came_in_over_one_bridge_never_leaves_over_another);
fn a_record_that_came_in_over_one_bridge_never_leaves_over_another(transport: Transport) {
    let (hub, port) = hub(transport);
    let dir = TempDir::new("relay");
    let bridges = format!(
        "bridges:\n  pull:\n    peer: {peer}\n    client_id: edge-pull\n    topics:\n      - filter: from/#\n        direction: in\n        topic: t/$#\n  push:\n    peer: {peer}\n    client_id: edge-push\n    topics:\n      - filter: t/#\n        direction: out\n        topic: to/$#\n",
        peer = transport.peer(port)
    );
    let mut edge = BrokerProcess::start_in(dir.path(), "", &bridges);
    edge.wait_for_log("bridge push: reading its out filter");
    let mut at_edge = RawClient::connect(&edge.address(), ProtocolVersion::V5, "at-edge");
    at_edge.subscribe("t/#", QoS::AtLeastOnce);
    let mut at_hub = RawClient::connect(&hub.address(), ProtocolVersion::V5, "at-hub");
    at_hub.subscribe("to/#", QoS::AtLeastOnce);
    let mut hub_publisher = RawClient::connect(&hub.address(), ProtocolVersion::V5, "hub-pub");
    let id = until_crossed(&mut hub_publisher, "from/probe", &mut at_edge);
    publish(&mut hub_publisher, "from/x", "remote", id);
    assert_eq!(
        receive_until(&mut at_edge, "remote").last().unwrap(),
        "remote"
    );
    // Behind the pulled record on the same topic: had the pulled one been
    // pushed, it would reach the hub first.
    let mut edge_publisher = RawClient::connect(&edge.address(), ProtocolVersion::V5, "edge-pub");
    publish(&mut edge_publisher, "t/x", "local", 1);
    let pushed: Vec<String> = receive_until(&mut at_hub, "local")
        .into_iter()
        .filter(|p| !p.starts_with("probe-"))
        .collect();
    assert_eq!(pushed, vec!["local"]);
}

/// A peer played by the test over a raw socket: it reads the bridge's
/// packets with the crate's codec and writes its own.
struct FakePeer {
    stream: Stream,
    buf: Vec<u8>,
    version: Option<ProtocolVersion>,
}

impl FakePeer {
    /// The next link the bridge dials, over `transport`.
    fn accept(listener: &TcpListener, transport: Transport) -> FakePeer {
        let (stream, _) = listener.accept().unwrap();
        stream.set_read_timeout(Some(WAIT)).unwrap();
        let stream = match transport {
            Transport::Tcp => Stream::Tcp(stream),
            Transport::WebSocket => Stream::WebSocket(Box::new(Framed::accept(stream))),
        };
        FakePeer {
            stream,
            buf: Vec::new(),
            version: None,
        }
    }

    fn recv(&mut self) -> Packet {
        use std::io::Read;
        loop {
            if let Ok(Some(header)) = saguin::codec::decode_fixed_header(&self.buf) {
                if self.buf.len() >= header.packet_len() {
                    let body = self.buf[header.header_len..header.packet_len()].to_vec();
                    self.buf.drain(..header.packet_len());
                    let packet = saguin::codec::decode_packet(&header, &body, self.version)
                        .expect("the bridge sent a valid packet");
                    if let Packet::Connect(c) = &packet {
                        self.version = Some(c.protocol_version);
                    }
                    return packet;
                }
            }
            let mut chunk = [0u8; 4096];
            let n = self.stream.read(&mut chunk).expect("the bridge went quiet");
            assert!(n > 0, "the bridge closed the link");
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    fn send(&mut self, packet: &Packet) {
        use std::io::Write;
        let mut bytes = Vec::new();
        saguin::codec::encode(packet, self.version.unwrap(), &mut bytes);
        self.stream.write_all(&bytes).unwrap();
    }

    /// Answers the CONNECT, and the SUBSCRIBE of a new session.
    fn handshake(&mut self, session_present: bool) {
        assert!(matches!(self.recv(), Packet::Connect(_)));
        self.send(&Packet::Connack(saguin::codec::Connack {
            session_present,
            ..Default::default()
        }));
        if !session_present {
            let Packet::Subscribe(subscribe) = self.recv() else {
                panic!("expected a SUBSCRIBE")
            };
            self.send(&Packet::Suback(saguin::codec::Suback {
                packet_id: subscribe.packet_id,
                reason_codes: vec![saguin::codec::ReasonCode::GRANTED_QOS_1],
                ..Default::default()
            }));
        }
    }

    fn publish(&mut self, payload: &str, id: u16, dup: bool) {
        self.send(&Packet::Publish(Publish {
            dup,
            qos: QoS::AtLeastOnce,
            topic: "feed/x".into(),
            packet_id: Some(id),
            payload: payload.as_bytes().to_vec(),
            ..Publish::default()
        }));
    }

    /// The next PUBLISH the bridge sends, answering pings on the way.
    fn next_publish(&mut self) -> Publish {
        loop {
            match self.recv() {
                Packet::Publish(publish) => return publish,
                Packet::Pingreq => self.send(&Packet::Pingresp),
                other => panic!("expected a PUBLISH, got {other:?}"),
            }
        }
    }

    /// Answers a record the bridge sent with `code`.
    fn answer(&mut self, publish: &Publish, code: saguin::codec::ReasonCode) {
        self.send(&Packet::Puback(PubAck {
            packet_id: publish.packet_id.expect("sent at QoS 1"),
            reason_code: code,
            ..PubAck::default()
        }));
    }

    /// The next PUBACK the bridge sends, skipping pings.
    fn puback(&mut self) -> u16 {
        loop {
            match self.recv() {
                Packet::Puback(ack) => return ack.packet_id,
                Packet::Pingreq => self.send(&Packet::Pingresp),
                other => panic!("expected a PUBACK, got {other:?}"),
            }
        }
    }
}

over_both!(a_qos1_redelivery_after_a_dropped_link_is_stored_once);
fn a_qos1_redelivery_after_a_dropped_link_is_stored_once(transport: Transport) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let peer = transport.peer(port);
    let dir = TempDir::new("redelivery");
    // A long ack_interval holds the acknowledgement back, so the link can
    // be cut after the record is stored and before the peer is told.
    let top = format!(
        "{EVENTS}bridges:\n  up:\n    peer: {peer}\n    client_id: gw-1\n    ack_interval: 1s\n    topics:\n      - filter: feed/#\n        direction: in\n        topic: events/$#\n"
    );
    let saguin = BrokerProcess::start_in(dir.path(), REDB, &top);
    let mut reader = RawClient::connect(&saguin.address(), ProtocolVersion::V5, "reader");
    reader.subscribe("events/#", QoS::AtLeastOnce);

    let mut peer = FakePeer::accept(&listener, transport);
    peer.handshake(false);
    peer.publish("once", 5, false);
    assert_eq!(receive_until(&mut reader, "once"), vec!["once"]);
    drop(peer);

    // The bridge dials again; the peer resumes the session and redelivers.
    let mut peer = FakePeer::accept(&listener, transport);
    peer.handshake(true);
    peer.publish("once", 5, true);
    assert_eq!(peer.puback(), 5, "the redelivery is acknowledged");
    peer.publish("end", 6, false);
    assert_eq!(peer.puback(), 6);
    assert_eq!(
        receive_until(&mut reader, "end"),
        vec!["end"],
        "stored once"
    );
}

over_both!(a_peer_refusing_one_rules_records_holds_that_rule_and_no_other);
fn a_peer_refusing_one_rules_records_holds_that_rule_and_no_other(transport: Transport) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let peer = transport.peer(port);
    let dir = TempDir::new("per-rule");
    let top = format!(
        "{EVENTS}bridges:\n  up:\n    peer: {peer}\n    client_id: gw-1\n    receive_maximum: 2\n    topics:\n      - filter: events/stuck/#\n        direction: out\n        topic: up/stuck/$#\n      - filter: events/free/#\n        direction: out\n        topic: up/free/$#\n"
    );
    let mut saguin = BrokerProcess::start_in(dir.path(), REDB, &top);
    saguin.wait_for_log("reading its out filter \"events/stuck/#\"");
    saguin.wait_for_log("reading its out filter \"events/free/#\"");
    // More of the refused rule's records than a window holds, then one of
    // the other rule's.
    let mut device = RawClient::connect(&saguin.address(), ProtocolVersion::V5, "device");
    for n in 1..=4 {
        publish(&mut device, &format!("events/stuck/{n}"), "s", n);
    }
    publish(&mut device, "events/free/x", "free", 5);

    let mut peer = FakePeer::accept(&listener, transport);
    peer.handshake(true);
    let deadline = Instant::now() + WAIT;
    loop {
        assert!(
            Instant::now() < deadline,
            "the other rule's record never came"
        );
        let publish = peer.next_publish();
        if publish.topic.starts_with("up/stuck/") {
            peer.answer(&publish, saguin::codec::ReasonCode::QUOTA_EXCEEDED);
            continue;
        }
        assert_eq!(publish.topic, "up/free/x");
        assert_eq!(publish.payload, b"free");
        break;
    }
}

over_both!(an_append_record_published_at_qos0_is_held_at_the_rules_position_through_an_outage);
fn an_append_record_published_at_qos0_is_held_at_the_rules_position_through_an_outage(
    transport: Transport,
) {
    let port = free_port();
    let peer = transport.peer(port);
    let dir = TempDir::new("qos0-outage");
    let top = format!(
        "{EVENTS}bridges:\n  up:\n    peer: {peer}\n    client_id: gw-1\n    topics:\n      - filter: events/#\n        direction: out\n        topic: up/$#\n"
    );
    // The peer is down; the gateway is stopped and started again before
    // it returns, so nothing held in memory can carry the record.
    let mut saguin = BrokerProcess::start_in(dir.path(), REDB, &top);
    saguin.wait_for_log("reading its out filter");
    let mut device = RawClient::connect(&saguin.address(), ProtocolVersion::V5, "device");
    device.send(&Packet::Publish(Publish {
        qos: QoS::AtMostOnce,
        topic: "events/a".into(),
        payload: b"at-most-once".to_vec(),
        ..Publish::default()
    }));
    publish(&mut device, "events/a", "at-least-once", 1);
    saguin.terminate();

    let listener = TcpListener::bind(("127.0.0.1", port)).unwrap();
    let _saguin = BrokerProcess::start_in(dir.path(), REDB, &top);
    let mut peer = FakePeer::accept(&listener, transport);
    peer.handshake(true);
    for payload in ["at-most-once", "at-least-once"] {
        let record = peer.next_publish();
        assert_eq!(
            (record.topic.as_str(), record.payload.as_slice(), record.qos),
            ("up/a", payload.as_bytes(), QoS::AtLeastOnce)
        );
        peer.answer(&record, saguin::codec::ReasonCode::SUCCESS);
    }
}

over_both!(a_rule_edited_is_a_new_reader_and_the_old_rules_position_is_dropped);
fn a_rule_edited_is_a_new_reader_and_the_old_rules_position_is_dropped(transport: Transport) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let peer = transport.peer(port);
    let dir = TempDir::new("rule-edit");
    let config = |topic: &str| {
        format!("{EVENTS}bridges:\n  up:\n    peer: {peer}\n    client_id: gw-1\n    topics:\n      - filter: events/#\n        direction: out\n        topic: {topic}/$#\n")
    };
    // Runs the broker on `topic`'s rule: `payload` is published and must
    // be the first record the peer is sent.
    let run = |topic: &str, payload: &str| -> BrokerProcess {
        // A dial the last broker made as it stopped may wait in the
        // backlog, dead: the peer answers only this broker's.
        listener.set_nonblocking(true).unwrap();
        while listener.accept().is_ok() {}
        listener.set_nonblocking(false).unwrap();
        let mut saguin = BrokerProcess::start_in(dir.path(), REDB, &config(topic));
        saguin.wait_for_log("reading its out filter");
        let mut peer = FakePeer::accept(&listener, transport);
        peer.handshake(true);
        let mut device = RawClient::connect(&saguin.address(), ProtocolVersion::V5, "device");
        publish(&mut device, "events/a", payload, 1);
        let first = peer.next_publish();
        assert_eq!(
            (first.topic.as_str(), first.payload.as_slice()),
            (format!("{topic}/a").as_str(), payload.as_bytes())
        );
        peer.answer(&first, saguin::codec::ReasonCode::SUCCESS);
        saguin
    };
    run("up", "1").terminate();
    // The topic edited: a new reader, and the old rule's session ended.
    let mut edited = run("moved", "2");
    edited.wait_for_log("belongs to no configured rule");
    edited.terminate();
    // Back to the first rule: had its position survived, "2" (written
    // after it) would come first.
    run("up", "3").terminate();
}

over_both!(through_an_outage_latest_keeps_its_newest_broadcast_is_live_and_a_queue_never_crosses);
fn through_an_outage_latest_keeps_its_newest_broadcast_is_live_and_a_queue_never_crosses(
    transport: Transport,
) {
    if !have_mosquitto(
        "through_an_outage_latest_keeps_its_newest_broadcast_is_live_and_a_queue_never_crosses",
    ) {
        return;
    }
    let peer_dir = TempDir::new("mosquitto-kinds");
    let port = free_port();
    let peer = Peer::start(peer_dir.path(), port, transport);
    let mut watcher = durable_client(&peer.address(), "watcher");
    watcher.subscribe("up/#", QoS::AtLeastOnce);
    drop(watcher);

    let dir = TempDir::new("bridge-kinds");
    let channels = "channels:\n  events:\n    type: append\n    filter: events/#\n  state:\n    type: latest\n    filter: state/#\n  jobs:\n    type: queue\n    filter: jobs/#\n";
    let rules = "      - filter: '#'\n        direction: out\n        topic: up/$#\n";
    let top = format!("{channels}{}", bridge_yaml(&transport.peer(port), rules));
    let mut saguin = BrokerProcess::start_in(dir.path(), REDB, &top);
    saguin.wait_for_log("bridge up: reading its out filter");
    saguin.wait_for_log("bridge up: link to");
    peer.stop();
    saguin.wait_for_log(" down (");

    let mut device = RawClient::connect(&saguin.address(), ProtocolVersion::V5, "device");
    publish(&mut device, "jobs/j", "job", 1);
    publish(&mut device, "b/x", "live-while-down", 2);
    publish(&mut device, "state/s", "v1", 3);
    publish(&mut device, "state/s", "v2", 4);
    publish(&mut device, "events/a", "e1", 5);
    let peer = Peer::start(peer_dir.path(), port, transport);
    let mut watcher = durable_client(&peer.address(), "watcher");
    saguin.wait_for_log("session resumed");
    // Fences behind each topic's records, on the same topics; broadcast
    // crosses now that the link is up.
    publish(&mut device, "b/x", "live-after", 6);
    publish(&mut device, "state/s", "v3", 7);
    publish(&mut device, "events/a", "e2", 8);
    let mut got = receive_all_of(&mut watcher, &["live-after", "v3", "e2"]);
    got.sort();
    assert_eq!(got, vec!["e1", "e2", "live-after", "v2", "v3"]);
}

/// A client of `address` connecting as `user` with `password`, V5.
fn client_as(address: &str, client_id: &str, user: &str, password: &[u8]) -> RawClient {
    let mut client = RawClient::open(address, ProtocolVersion::V5);
    let mut connect = common::connect_packet(ProtocolVersion::V5, client_id);
    connect.username = Some(user.into());
    connect.password = Some(password.to_vec());
    client.send(&Packet::Connect(Box::new(connect)));
    match client.recv() {
        Received::Packet(Packet::Connack(c)) => assert_eq!(c.reason_code.0, 0, "{c:?}"),
        other => panic!("expected a CONNACK, got {other:?}"),
    }
    client
}

over_both!(a_broker_with_a_password_file_and_an_acl_file_still_runs_its_bridge_both_ways);
fn a_broker_with_a_password_file_and_an_acl_file_still_runs_its_bridge_both_ways(
    transport: Transport,
) {
    use saguin::auth::hash::{PasswordHash, SALT_BYTES};
    let (hub, port) = hub(transport);
    let dir = TempDir::new("secured-edge");
    let hash = PasswordHash::new_pbkdf2(b"secret", &[7; SALT_BYTES]);
    std::fs::write(dir.path().join("clients.passwd"), format!("gw:{hash}\n")).unwrap();
    // The one user may use t/#; nothing names the bridge, whose session
    // holds no user name and offers no password.
    std::fs::write(
        dir.path().join("acl.yaml"),
        "roles:\n  t:\n    - topic: \"t/#\"\n      allow: [write, read]\nusers:\n  gw: [t]\n",
    )
    .unwrap();
    let mqtt = "    acl_file: {dir}/acl.yaml\n    password_file: {dir}/clients.passwd\n";
    let rules = "      - filter: t/#\n        direction: both\n";
    let peer = bridge_yaml(&transport.peer(port), rules);
    let mut edge = BrokerProcess::start_in(dir.path(), mqtt, &peer);
    edge.wait_for_log("bridge up: link to");

    let mut at_edge = client_as(&edge.address(), "at-edge", "gw", b"secret");
    at_edge.subscribe("t/#", QoS::AtLeastOnce);
    let mut at_hub = RawClient::connect(&hub.address(), ProtocolVersion::V5, "at-hub");
    at_hub.subscribe("t/#", QoS::AtLeastOnce);
    // In: the bridge publishes at the edge what the hub receives.
    let mut hub_publisher = RawClient::connect(&hub.address(), ProtocolVersion::V5, "hub-pub");
    until_crossed(&mut hub_publisher, "t/in", &mut at_edge);
    // Out: the bridge reads at the edge what it carries to the hub.
    let mut edge_publisher = client_as(&edge.address(), "edge-pub", "gw", b"secret");
    let id = until_crossed(&mut edge_publisher, "t/out", &mut at_hub);
    publish(&mut edge_publisher, "t/out", "fence", id);
    assert_eq!(receive_until(&mut at_hub, "fence").last().unwrap(), "fence");
}

#[test]
fn an_ordinary_client_is_refused_a_bridge_client_id() {
    let broker = BrokerProcess::start("");
    // 0x85 Client Identifier not valid; the codec reads 3.1.1's return
    // code 2, its counterpart, as the same.
    for version in [ProtocolVersion::V5, ProtocolVersion::V311] {
        let mut client = RawClient::open(&broker.address(), version);
        client.send(&Packet::Connect(Box::new(common::connect_packet(
            version,
            "saguin-bridge/up",
        ))));
        match client.recv() {
            Received::Packet(Packet::Connack(c)) => assert_eq!(c.reason_code.0, 0x85, "{c:?}"),
            other => panic!("expected a CONNACK, got {other:?}"),
        }
        assert!(matches!(client.recv(), Received::Closed));
    }
    // The prefix alone is reserved: a name merely like it is not.
    RawClient::connect(&broker.address(), ProtocolVersion::V5, "saguin-bridge-up");
}

/// A mosquitto TLS listener on `port` over `transport` serving `server`,
/// asking for a client certificate signed by `client_ca` when there is one.
fn tls_listener(
    port: u16,
    transport: Transport,
    server: &(PathBuf, PathBuf),
    client_ca: Option<&Path>,
) -> String {
    let mut lines = format!(
        "{}certfile {}\nkeyfile {}\n",
        transport.mosquitto_listener(port),
        server.0.display(),
        server.1.display()
    );
    if let Some(ca) = client_ca {
        lines += &format!("cafile {}\nrequire_certificate true\n", ca.display());
    }
    lines
}

/// mosquitto drops to its own user, which must read what openssl wrote.
fn readable_by_all(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
}

/// A TCP forwarder on a port of its own: each connection it accepts is
/// joined to whichever local port it is pointed at then. Lets a test move
/// a peer's address from one broker to another without restarting either.
struct Forwarder {
    port: u16,
    target: std::sync::Arc<std::sync::atomic::AtomicU16>,
}

impl Forwarder {
    fn start(target: u16) -> Forwarder {
        use std::sync::atomic::{AtomicU16, Ordering};
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let target = std::sync::Arc::new(AtomicU16::new(target));
        let to = target.clone();
        std::thread::spawn(move || {
            for inbound in listener.incoming() {
                let Ok(inbound) = inbound else { return };
                let port = to.load(Ordering::SeqCst);
                let Ok(outbound) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
                    continue;
                };
                for (mut from, mut into) in [
                    (inbound.try_clone().unwrap(), outbound.try_clone().unwrap()),
                    (outbound, inbound),
                ] {
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut from, &mut into);
                        let _ = into.shutdown(std::net::Shutdown::Both);
                    });
                }
            }
        });
        Forwarder { port, target }
    }

    fn point_at(&self, port: u16) {
        self.target.store(port, std::sync::atomic::Ordering::SeqCst);
    }
}

over_both!(a_tls_peer_is_verified_refused_when_another_authority_signed_it_and_retried);
fn a_tls_peer_is_verified_refused_when_another_authority_signed_it_and_retried(
    transport: Transport,
) {
    let test = "a_tls_peer_is_verified_refused_when_another_authority_signed_it_and_retried";
    if !have_mosquitto(test) || !have_tools(test, &["openssl"], "openssl") {
        return;
    }
    let certs = TempDir::new("bridge-certs");
    let ca = Authority::new(certs.path(), "peer-ca");
    let genuine = ca.server("peer");
    let bridge_identity = ca.issue(
        "bridge",
        "/CN=gw-1",
        Some("extendedKeyUsage=clientAuth"),
        30,
    );
    let stranger = Authority::new(certs.path(), "stranger");
    let imposter = stranger.server("imposter");
    readable_by_all(certs.path());

    // The genuine peer asks for the bridge's own certificate, so records
    // cross only if it was presented and accepted. Its watcher comes over
    // plain TCP.
    let peer_dir = TempDir::new("mosquitto-tls");
    let (plain_port, tls_port) = (free_port(), free_port());
    let peer = Peer::start_with(
        peer_dir.path(),
        plain_port,
        &tls_listener(tls_port, transport, &genuine, Some(&ca.pem())),
    );
    let mut watcher = durable_client(&peer.address(), "watcher");
    watcher.subscribe("up/#", QoS::AtLeastOnce);

    // But an imposter answers first: a certificate from an authority the
    // bridge was not told of.
    let imposter_dir = TempDir::new("mosquitto-imposter");
    let (imposter_plain, imposter_tls) = (free_port(), free_port());
    let _imposter_peer = Peer::start_with(
        imposter_dir.path(),
        imposter_plain,
        &tls_listener(imposter_tls, transport, &imposter, None),
    );
    let address = Forwarder::start(imposter_tls);

    let dir = TempDir::new("bridge-tls");
    let top = format!(
        "{EVENTS}bridges:\n  up:\n    peer: {}\n    client_id: gw-1\n    ca_file: {}\n    cert_file: {}\n    key_file: {}\n    topics:\n      - filter: events/#\n        direction: out\n        topic: up/$#\n",
        transport.secure_peer(address.port),
        ca.pem().display(),
        bridge_identity.0.display(),
        bridge_identity.1.display()
    );
    let mut saguin = BrokerProcess::start_in(dir.path(), REDB, &top);
    saguin.wait_for_log(&format!(
        "bridge up: {} refused: TLS handshake failed",
        transport.secure_peer(address.port)
    ));
    // A new rule reads what is written once it has subscribed.
    saguin.wait_for_log("bridge up: reading its out filter");
    let mut device = RawClient::connect(&saguin.address(), ProtocolVersion::V5, "device");
    for n in 1..=5 {
        publish(&mut device, "events/a", &n.to_string(), n);
    }

    // The address now reaches the genuine peer: the link retries and the
    // records waiting cross.
    address.point_at(tls_port);
    assert_eq!(
        receive_until(&mut watcher, "5"),
        (1..=5).map(|n| n.to_string()).collect::<Vec<_>>()
    );
    saguin.wait_for_log("bridge up: link to");
}

#[test]
fn check_config_says_where_each_rule_lands() {
    let dir = TempDir::new("check-landing");
    let path = dir.path().join("saguin.yaml");
    let rules =
        "      - filter: \"fleet/{a,b}/#\"\n        direction: in\n        topic: events/$#\n";
    let storage = REDB.replace("{dir}", &dir.path().display().to_string());
    std::fs::write(
        &path,
        format!(
            "broker:\n  id: t\n{storage}{EVENTS}{}",
            bridge_yaml("tcp://127.0.0.1:1883", rules)
        ),
    )
    .unwrap();
    let output = common::check_config(&path);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}");
    for spelling in ["a", "b"] {
        let line = format!("bridge \"up\", in \"fleet/{spelling}/#\": lands in events (append)");
        assert!(stdout.contains(&line), "no {line:?} in:\n{stdout}");
    }
}

/// A bridge's sessions are the broker's own: a client asking to hang one
/// up (anybody may, on a broker without an acl_file) is told nothing is
/// connected under that id, and the bridge goes on carrying records.
#[test]
fn a_bridge_s_own_session_cannot_be_hung_up() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let dir = TempDir::new("bridge-hang-up");
    let top = format!(
        "{EVENTS}bridges:\n  up:\n    peer: tcp://127.0.0.1:{port}\n    client_id: gw-1\n    topics:\n      - filter: events/#\n        direction: out\n        topic: up/$#\n"
    );
    let mut saguin = BrokerProcess::start_in(dir.path(), REDB, &top);
    saguin.wait_for_log("reading its out filter");
    let mut peer = FakePeer::accept(&listener, Transport::Tcp);
    // An out rule alone subscribes to nothing on the peer.
    peer.handshake(true);
    let mut anyone = RawClient::connect(&saguin.address(), ProtocolVersion::V5, "anyone");
    for victim in ["saguin-bridge/up", "nobody"] {
        anyone.send(&Packet::Publish(Publish {
            qos: QoS::AtLeastOnce,
            topic: "$saguin/sessions/disconnect".into(),
            packet_id: Some(1),
            payload: victim.as_bytes().to_vec(),
            properties: saguin::codec::Properties {
                response_topic: Some("replies/x".into()),
                ..Default::default()
            },
            ..Publish::default()
        }));
        match anyone.recv() {
            Received::Packet(Packet::Publish(reply)) => {
                assert_eq!(reply.payload, b"no-such-client", "{victim}")
            }
            other => panic!("expected the reply, got {other:?}"),
        }
        match anyone.recv() {
            Received::Packet(Packet::Puback(ack)) => assert_eq!(ack.reason_code.0, 0),
            other => panic!("expected the PUBACK, got {other:?}"),
        }
    }
    publish(&mut anyone, "events/a", "after", 2);
    let record = peer.next_publish();
    assert_eq!(
        (record.topic.as_str(), record.payload.as_slice()),
        ("up/a", &b"after"[..])
    );
    assert!(
        !saguin
            .log_lines
            .iter()
            .any(|l| l.contains("the bridge stops")),
        "{:?}",
        saguin.log_lines
    );
}
