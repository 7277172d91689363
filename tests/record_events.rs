//! At `log_level: debug` every durable record event is one line, and a
//! line a client can make the broker repeat is written a bounded number of
//! times: over real sockets, on a redb provider.

mod common;

use common::{BrokerProcess, RawClient, Received, TempDir};
use saguin::codec::{Connect, Packet, Properties, ProtocolVersion, PubAck, Publish, QoS};

const V5: ProtocolVersion = ProtocolVersion::V5;

const REDB: &str = "  storage:\n    default: local\n    default_retention_period: none\n    default_retention_bytes: none\n    providers:\n      local:\n        type: redb\n        file_path: {dir}/saguin.redb\n        max_bytes: 64MiB\n";

const CHANNELS: &str = "channels:\n  events:\n    type: append\n    filter: events/#\n  state:\n    type: latest\n    filter: state/#\n  jobs:\n    type: queue\n    filter: jobs/#\n    retry:\n      max_attempts: 2\n";

fn publish(client: &mut RawClient, topic: &str, payload: &[u8]) {
    let acknowledged = common::publish_all(client, topic, &[payload.to_vec()]);
    assert_eq!(acknowledged.len(), 1, "{topic} was not acknowledged");
}

/// Reads one record of `events` and acknowledges it.
fn read_record(client: &mut RawClient) {
    loop {
        match client.recv() {
            Received::Packet(Packet::Publish(p)) => {
                client.send(&Packet::Puback(PubAck {
                    packet_id: p.packet_id.unwrap(),
                    ..PubAck::default()
                }));
                return;
            }
            Received::Packet(_) => continue,
            Received::Closed => panic!("the consumer was closed"),
        }
    }
}

/// A seek of the consumer's position in `events` to `offset`, waiting for
/// its PUBACK.
fn seek(client: &mut RawClient, offset: u64) {
    let publish = Publish {
        qos: QoS::AtLeastOnce,
        topic: "$saguin/consumer/events/seek".into(),
        packet_id: Some(700),
        payload: offset.to_string().into_bytes(),
        properties: Properties::default(),
        ..Publish::default()
    };
    client.send(&Packet::Publish(publish));
    loop {
        match client.recv() {
            Received::Packet(Packet::Puback(ack)) if ack.packet_id == 700 => {
                assert_eq!(ack.reason_code.0, 0, "the seek was refused");
                return;
            }
            Received::Packet(Packet::Publish(p)) => {
                if let Some(packet_id) = p.packet_id {
                    client.send(&Packet::Puback(PubAck {
                        packet_id,
                        ..PubAck::default()
                    }));
                }
            }
            Received::Packet(_) => continue,
            Received::Closed => panic!("closed while seeking"),
        }
    }
}

#[test]
fn debug_writes_one_line_per_durable_record_event() {
    let dir = TempDir::new("record-events");
    let mut broker = BrokerProcess::start_in(dir.path(), REDB, CHANNELS);
    let address = broker.address();

    // A durable consumer reads a record, seeks back, and leaves: its
    // position is stored.
    let mut device = RawClient::connect(&address, V5, "device-1");
    publish(&mut device, "events/a", b"one");
    publish(&mut device, "events/a", b"two");
    let (mut reader, _) = common::durable_connect(&address, "reader-1");
    reader.subscribe("events/#", QoS::AtLeastOnce);
    read_record(&mut reader);
    read_record(&mut reader);
    seek(&mut reader, 1);
    broker.wait_for_log("a seek moved a consumer of events to offset 1, stored");
    reader.send(&Packet::Disconnect(Default::default()));
    drop(reader);
    broker.wait_for_log("storing the position of reader-1 in events: offset");
    broker.wait_for_log("consumer positions stored before a close");

    // A latest value set, then deleted by an empty retained publish.
    publish(&mut device, "state/boiler", b"on");
    device.send(&Packet::Publish(Publish {
        qos: QoS::AtLeastOnce,
        retain: true,
        topic: "state/boiler".into(),
        packet_id: Some(800),
        payload: Vec::new(),
        ..Publish::default()
    }));
    assert!(matches!(
        device.recv(),
        Received::Packet(Packet::Puback(a)) if a.packet_id == 800 && a.reason_code.0 == 0
    ));
    broker.wait_for_log("the value of \"state/boiler\" in state is deleted");

    // One job acknowledged (offsets start at 1); another returned twice, which dead-letters it.
    publish(&mut device, "jobs/a", b"job 0");
    publish(&mut device, "jobs/a", b"job 1");
    let mut worker = RawClient::connect(&address, V5, "worker-1");
    worker.subscribe("$saguin/queue/jobs", QoS::AtLeastOnce);
    let mut early = Vec::new();
    let first = common::take_job(&mut worker, &mut early);
    broker.wait_for_log("job 1 of jobs offered to worker-1 as delivery");
    broker.wait_for_log("job 1 of jobs leased for");
    common::answer_job(&mut worker, "jobs", &first, "ack", &mut early);
    broker.wait_for_log("job 1 of jobs acknowledged and deleted");
    for attempt in 1..=2 {
        let job = common::take_job(&mut worker, &mut early);
        common::answer_job(&mut worker, "jobs", &job, "return", &mut early);
        if attempt == 1 {
            broker.wait_for_log("job 2 of jobs returned by worker-1 after attempt 1");
        }
    }
    broker.wait_for_log("job 2 of jobs is dead-lettered");
}

#[test]
fn a_client_repeating_a_refused_connect_writes_a_bounded_number_of_lines() {
    let mut broker = BrokerProcess::start("");
    let address = broker.address();
    // The reserved prefix: refused to anything but a bridge, every time.
    let attempts = 30;
    for i in 0..attempts {
        let mut client = RawClient::open(&address, V5);
        let connect: Connect = common::connect_packet(V5, &format!("saguin-bridge/x{i}"));
        let code = client.connect_with(connect);
        assert_ne!(code, 0, "attempt {i} was accepted");
    }
    // A line after all of them, so every refusal's line has been read.
    let _ = RawClient::connect(&address, V5, "after");
    broker.wait_for_log("client after connected");
    let refusals = broker
        .log_lines
        .iter()
        .filter(|l| l.contains("refusing CONNECT from client id"))
        .count();
    assert!(
        (1..=10).contains(&refusals),
        "{refusals} refusal lines for {attempts} refused CONNECTs"
    );
}
