//! A broker whose redb file was left all zeros by a power cut still
//! starts: the file is moved aside, publishes to its channels are refused
//! (0x83), and `/health` names the provider and the file.

mod common;

use common::http::{get_text, Answer};
use common::{BrokerProcess, RawClient, Received, TempDir};
use saguin::codec::{Packet, ProtocolVersion, PubAck, Publish, QoS};

const STORAGE: &str = "  storage:\n    default: local\n    default_retention_period: none\n    default_retention_bytes: none\n    providers:\n      local:\n        type: redb\n        file_path: {dir}/saguin.redb\n        max_bytes: 64MiB\n  operations:\n    listen:\n      tcp:\n        address: 127.0.0.1:0\n";

const CHANNELS: &str = "channels:\n  events:\n    type: append\n    filter: events/#\n";

#[test]
fn a_zeroed_redb_file_is_set_aside_and_the_broker_starts_refusing_its_channels() {
    let dir = TempDir::new("damaged-file");
    let file = dir.path().join("saguin.redb");
    std::fs::write(&file, vec![0u8; 64 << 10]).unwrap();
    let mut broker = BrokerProcess::start_in(dir.path(), STORAGE, CHANNELS);
    let line = broker.wait_for_log("operations door tcp bound to");
    let ops = line.rsplit("bound to ").next().unwrap().trim().to_string();
    broker.wait_for_log("damaged beyond repair");
    let aside: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("saguin.redb.damaged-")
        })
        .collect();
    assert_eq!(aside.len(), 1, "the zeroed file is kept aside");
    assert!(!file.exists(), "nothing was put in its place");

    let mut client = RawClient::connect(&broker.address(), ProtocolVersion::V5, "publisher");
    client.send(&Packet::Publish(Publish {
        qos: QoS::AtLeastOnce,
        topic: "events/a".into(),
        packet_id: Some(7),
        payload: b"x".to_vec(),
        ..Publish::default()
    }));
    match client.recv() {
        Received::Packet(Packet::Puback(PubAck { reason_code, .. })) => {
            assert_eq!(
                reason_code.0, 0x83,
                "refused as storage that cannot keep it"
            )
        }
        other => panic!("expected a PUBACK, got {other:?}"),
    }

    let health = Answer::parse(&get_text(&ops, "/health")).expect("an answer");
    assert_eq!(health.status, 503);
    assert_eq!(
        health.body,
        format!(
            "{{\"status\":\"unavailable\",\"failed\":[{{\"provider\":\"local\",\"file\":\"{}\"}}]}}",
            file.display()
        )
    );
}
