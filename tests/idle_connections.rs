//! Many idle connections, each served by one small task, over real
//! sockets: every one still gets what is published to it, and packets that
//! arrive in pieces, or several to a read, are read whole.

mod common;

use common::{BrokerProcess, RawClient, Received};
use saguin::codec::{encode, Packet, ProtocolVersion, Publish, QoS};

const IDLE_CLIENTS: usize = 200;

fn publish(topic: &str, payload: Vec<u8>) -> Packet {
    Packet::Publish(Publish {
        topic: topic.into(),
        payload,
        ..Publish::default()
    })
}

fn expect_publish(client: &mut RawClient, topic: &str, payload: &[u8]) {
    match client.recv() {
        Received::Packet(Packet::Publish(p)) => {
            assert_eq!(p.topic, topic);
            assert_eq!(p.payload, payload, "payload on {topic}");
        }
        other => panic!("expected a PUBLISH on {topic}, got {other:?}"),
    }
}

#[test]
fn every_idle_connection_gets_its_own_message_and_the_broadcast() {
    let broker = BrokerProcess::start("");
    let address = broker.address();
    let mut clients: Vec<RawClient> = (0..IDLE_CLIENTS)
        .map(|i| {
            let version = if i % 2 == 0 {
                ProtocolVersion::V311
            } else {
                ProtocolVersion::V5
            };
            let mut client = RawClient::connect(&address, version, &format!("idle-{i}"));
            client.subscribe(&format!("idle/{i}"), QoS::AtMostOnce);
            client.subscribe("idle/all", QoS::AtLeastOnce);
            client
        })
        .collect();
    let mut publisher = RawClient::connect(&address, ProtocolVersion::V311, "idle-publisher");
    for i in 0..IDLE_CLIENTS {
        publisher.send(&publish(
            &format!("idle/{i}"),
            format!("to {i}").into_bytes(),
        ));
    }
    publisher.send(&publish("idle/all", b"to all".to_vec()));
    for (i, client) in clients.iter_mut().enumerate() {
        expect_publish(client, &format!("idle/{i}"), format!("to {i}").as_bytes());
        expect_publish(client, "idle/all", b"to all");
        client.assert_alive();
    }
}

/// A publish larger than one read, sent a few bytes at a time, and
/// several packets in one write, reach the subscriber whole and in order.
#[test]
fn packets_split_across_reads_or_sharing_one_are_read_whole() {
    let broker = BrokerProcess::start("");
    let address = broker.address();
    let mut subscriber = RawClient::connect(&address, ProtocolVersion::V5, "pieces-sub");
    subscriber.subscribe("pieces/#", QoS::AtMostOnce);
    let mut publisher = RawClient::connect(&address, ProtocolVersion::V311, "pieces-pub");

    let large: Vec<u8> = (0..100_000u32).map(|i| i as u8).collect();
    let mut bytes = Vec::new();
    encode(
        &publish("pieces/large", large.clone()),
        ProtocolVersion::V311,
        &mut bytes,
    );
    // The first pieces are smaller than a fixed header, then a read's
    // worth and more.
    let mut sent = 0;
    for size in [1, 1, 3, 10_000, 30_000].into_iter().cycle() {
        let end = (sent + size).min(bytes.len());
        publisher.send_bytes(&bytes[sent..end]);
        sent = end;
        if sent == bytes.len() {
            break;
        }
    }
    expect_publish(&mut subscriber, "pieces/large", &large);

    let mut glued = Vec::new();
    for n in 0..50u8 {
        encode(
            &publish("pieces/small", vec![n; 10]),
            ProtocolVersion::V311,
            &mut glued,
        );
    }
    publisher.send_bytes(&glued);
    for n in 0..50u8 {
        expect_publish(&mut subscriber, "pieces/small", &[n; 10]);
    }
    publisher.assert_alive();
}

/// Connections read into one buffer in turn: a packet's start kept from
/// one connection's read survives other connections' reads before its
/// end arrives. Two publishers each send a whole publish and the first
/// half of another, then the halves' ends; every payload arrives intact,
/// each publisher's in order.
#[test]
fn halves_of_packets_from_two_connections_do_not_mix() {
    let broker = BrokerProcess::start("");
    let address = broker.address();
    let mut subscriber = RawClient::connect(&address, ProtocolVersion::V5, "mix-sub");
    subscriber.subscribe("mix/#", QoS::AtMostOnce);
    let mut publishers: Vec<(RawClient, Vec<u8>, Vec<Vec<u8>>)> = ["a", "b"]
        .into_iter()
        .enumerate()
        .map(|(i, name)| {
            let client =
                RawClient::connect(&address, ProtocolVersion::V311, &format!("mix-{name}"));
            let payloads = vec![
                vec![i as u8 + 1; 300],
                (0..8_000u32).map(|n| (n + i as u32) as u8).collect(),
            ];
            let mut bytes = Vec::new();
            for payload in &payloads {
                encode(
                    &publish(&format!("mix/{name}"), payload.clone()),
                    ProtocolVersion::V311,
                    &mut bytes,
                );
            }
            (client, bytes, payloads)
        })
        .collect();
    // The whole first publish and half of the second, from each in turn.
    let split_at = 300 + 4_000;
    for (client, bytes, _) in &mut publishers {
        client.send_bytes(&bytes[..split_at]);
    }
    for (client, bytes, _) in &mut publishers {
        client.send_bytes(&bytes[split_at..]);
    }
    let mut received: Vec<(String, Vec<u8>)> = Vec::new();
    while received.len() < 4 {
        match subscriber.recv() {
            Received::Packet(Packet::Publish(p)) => received.push((p.topic, p.payload)),
            other => panic!("expected a PUBLISH, got {other:?}"),
        }
    }
    for (name, (_, _, payloads)) in ["a", "b"].into_iter().zip(&publishers) {
        let topic = format!("mix/{name}");
        let got: Vec<&Vec<u8>> = received
            .iter()
            .filter(|(t, _)| *t == topic)
            .map(|(_, payload)| payload)
            .collect();
        assert_eq!(
            got,
            payloads.iter().collect::<Vec<_>>(),
            "payloads on {topic}"
        );
    }
}
