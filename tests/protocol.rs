//! The broker's answers to what a client sends, over real sockets: every
//! malformed packet, the connection bounds, the clocks, and shutdown.

mod common;

use std::time::Duration;

use common::{connect_packet, BrokerProcess, RawClient, Received};
use saguin::codec::malformed_cases::cases;
use saguin::codec::{
    Packet, PacketType, Properties, ProtocolVersion, PubAck, Publish, QoS, ReasonCode, Subscribe,
    SubscriptionOptions,
};

/// Every row of the codec's malformed-input table, sent over a socket:
/// MQTT 5 is told the row's code (on a CONNACK for a CONNECT, on a
/// DISCONNECT after), 3.1.1 is closed, and a bystander is served throughout.
#[test]
fn every_malformed_packet_gets_its_code_and_the_broker_keeps_serving() {
    let broker = BrokerProcess::start("");
    let mut bystander = RawClient::connect(&broker.address(), ProtocolVersion::V5, "bystander");
    let rows = cases();
    let mut covered_types = std::collections::BTreeSet::new();
    for row in &rows {
        let is_connect = row
            .bytes
            .first()
            .is_some_and(|b| b >> 4 == PacketType::Connect as u8);
        covered_types.insert(row.bytes[0] >> 4);
        let mut client = if is_connect {
            RawClient::open(&broker.address(), row.version)
        } else {
            RawClient::connect(
                &broker.address(),
                row.version,
                &format!("row-{}", row.name.replace(' ', "-")),
            )
        };
        client.send_bytes(&row.bytes);
        let before_close = client.recv_until_closed();
        // A CONNECT refused in its fixed header has not yet said which
        // version it speaks, so it is closed with nothing written.
        let refused_before_version =
            is_connect && saguin::codec::decode_fixed_header(&row.bytes).is_err();
        let expected_answer = match (is_connect, row.version, row.expected) {
            _ if refused_before_version => None,
            // A version the broker does not speak is told so in 3.1.1's words.
            (true, _, ReasonCode::UNSUPPORTED_PROTOCOL_VERSION) => {
                Some(Packet::Connack(saguin::codec::Connack {
                    reason_code: ReasonCode::UNSUPPORTED_PROTOCOL_VERSION,
                    ..Default::default()
                }))
            }
            (_, ProtocolVersion::V311, _) => None,
            (true, ProtocolVersion::V5, code) => Some(Packet::Connack(saguin::codec::Connack {
                reason_code: code,
                ..Default::default()
            })),
            (false, ProtocolVersion::V5, code) => {
                Some(Packet::Disconnect(saguin::codec::Disconnect {
                    reason_code: code,
                    ..Default::default()
                }))
            }
        };
        let answered = before_close
            .first()
            .map(|packet| strip_reason_string(packet.clone()));
        match expected_answer {
            None => assert!(
                before_close.is_empty(),
                "row {:?}: 3.1.1 is closed with nothing written, got {before_close:?}",
                row.name
            ),
            Some(expected) => {
                // The 3.1.1 CONNACK decodes its return code 0x01 as 0x84.
                assert_eq!(answered, Some(expected), "row {:?}", row.name)
            }
        }
        bystander.assert_alive();
    }
    // At least one row for every packet type a client may send.
    for packet_type in [1u8, 3, 4, 5, 6, 7, 8, 10, 12, 14, 15] {
        assert!(
            covered_types.contains(&packet_type),
            "no malformed row for packet type {packet_type}"
        );
    }
}

fn strip_reason_string(packet: Packet) -> Packet {
    match packet {
        Packet::Connack(mut connack) => {
            connack.properties = Properties::default();
            connack.session_present = false;
            Packet::Connack(connack)
        }
        Packet::Disconnect(mut disconnect) => {
            disconnect.properties = Properties::default();
            Packet::Disconnect(disconnect)
        }
        other => other,
    }
}

#[test]
fn a_connection_past_max_connections_is_told_server_busy_and_the_rest_are_served() {
    let broker = BrokerProcess::start("  limits:\n    max_connections: 2\n");
    let mut first = RawClient::connect(&broker.address(), ProtocolVersion::V5, "first");
    let mut second = RawClient::connect(&broker.address(), ProtocolVersion::V311, "second");

    for version in [ProtocolVersion::V5, ProtocolVersion::V311] {
        let mut third = RawClient::open(&broker.address(), version);
        third.send(&Packet::Connect(Box::new(connect_packet(version, "third"))));
        let answer = third.recv_until_closed();
        let code = match answer.as_slice() {
            [Packet::Connack(connack)] => connack.reason_code,
            other => panic!("expected one CONNACK, got {other:?}"),
        };
        let expected = match version {
            ProtocolVersion::V5 => ReasonCode::SERVER_BUSY,
            // 3.1.1 return code 0x03, Server unavailable.
            ProtocolVersion::V311 => ReasonCode::SERVER_UNAVAILABLE,
        };
        assert_eq!(code, expected);
    }
    first.assert_alive();
    second.assert_alive();

    // The slot a client gives back is free at once.
    drop(first);
    let deadline = std::time::Instant::now() + common::WAIT;
    loop {
        let mut again = RawClient::open(&broker.address(), ProtocolVersion::V5);
        again.send(&Packet::Connect(Box::new(connect_packet(
            ProtocolVersion::V5,
            "again",
        ))));
        if let Received::Packet(Packet::Connack(connack)) = again.recv() {
            if connack.reason_code == ReasonCode::SUCCESS {
                break;
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the freed slot was never reused"
        );
    }
}

#[test]
fn a_socket_that_sends_nothing_is_closed_at_connect_timeout() {
    let broker = BrokerProcess::start("  limits:\n    connect_timeout: 1s\n");
    let mut silent = RawClient::open(&broker.address(), ProtocolVersion::V5);
    let started = std::time::Instant::now();
    assert_eq!(silent.recv(), Received::Closed);
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "closed before connect_timeout"
    );
}

#[test]
fn a_client_silent_past_one_and_a_half_keepalives_is_disconnected() {
    let broker = BrokerProcess::start("");
    let mut client = RawClient::open(&broker.address(), ProtocolVersion::V5);
    let mut connect = connect_packet(ProtocolVersion::V5, "sleepy");
    connect.keep_alive_s = 1;
    // The clock starts before the CONNECT leaves: the broker cannot start
    // its keepalive earlier, so a slow CONNACK on a busy machine cannot make
    // a correct broker look early.
    let started = std::time::Instant::now();
    client.send(&Packet::Connect(Box::new(connect)));
    assert!(matches!(
        client.recv(),
        Received::Packet(Packet::Connack(_))
    ));
    let packets = client.recv_until_closed();
    assert!(
        started.elapsed() >= Duration::from_millis(1400),
        "disconnected before 1.5 keepalives"
    );
    match packets.as_slice() {
        [Packet::Disconnect(disconnect)] => {
            assert_eq!(disconnect.reason_code, ReasonCode::KEEP_ALIVE_TIMEOUT)
        }
        other => panic!("expected DISCONNECT 0x8D, got {other:?}"),
    }
}

#[test]
fn a_connect_over_max_connect_size_is_refused_unread() {
    let broker = BrokerProcess::start("  limits:\n    max_connect_size: 1KiB\n");
    for version in [ProtocolVersion::V5, ProtocolVersion::V311] {
        let mut client = RawClient::open(&broker.address(), version);
        let mut connect = connect_packet(version, "big");
        connect.password = Some(vec![b'p'; 2000]);
        connect.username = Some("user".into());
        client.send(&Packet::Connect(Box::new(connect)));
        let answer = client.recv_until_closed();
        match version {
            ProtocolVersion::V5 => match answer.as_slice() {
                [Packet::Connack(connack)] => {
                    assert_eq!(connack.reason_code, ReasonCode::PACKET_TOO_LARGE)
                }
                other => panic!("expected CONNACK 0x95, got {other:?}"),
            },
            ProtocolVersion::V311 => {
                assert!(answer.is_empty(), "3.1.1 has no code for it: {answer:?}")
            }
        }
    }
}

#[test]
fn a_publish_over_max_message_size_is_disconnected_with_packet_too_large() {
    let broker = BrokerProcess::start("  limits:\n    max_message_size: 4KiB\n    max_connect_size: 4KiB\n    session_queue_bytes: 1MiB\n");
    let mut client = RawClient::connect(&broker.address(), ProtocolVersion::V5, "big-publisher");
    let publish = Publish {
        topic: "t".into(),
        payload: vec![0; 5000],
        ..Publish::default()
    };
    client.send(&Packet::Publish(publish));
    match client.recv_until_closed().as_slice() {
        [Packet::Disconnect(disconnect)] => {
            assert_eq!(disconnect.reason_code, ReasonCode::PACKET_TOO_LARGE)
        }
        other => panic!("expected DISCONNECT 0x95, got {other:?}"),
    }
}

#[test]
fn qos1_between_raw_clients_carries_subscription_identifiers() {
    let broker = BrokerProcess::start("");
    let mut subscriber = RawClient::connect(&broker.address(), ProtocolVersion::V5, "sub");
    let mut properties = Properties::default();
    properties.subscription_identifiers.push(42);
    let options = SubscriptionOptions {
        qos: QoS::AtLeastOnce,
        ..Default::default()
    };
    subscriber.send(&Packet::Subscribe(Subscribe {
        packet_id: 1,
        properties,
        filters: vec![("a/+".into(), options)],
    }));
    assert!(matches!(
        subscriber.recv(),
        Received::Packet(Packet::Suback(_))
    ));

    let mut publisher = RawClient::connect(&broker.address(), ProtocolVersion::V5, "pub");
    let publish = Publish {
        qos: QoS::AtLeastOnce,
        topic: "a/b".into(),
        packet_id: Some(5),
        payload: b"hi".to_vec(),
        ..Publish::default()
    };
    publisher.send(&Packet::Publish(publish));
    assert_eq!(
        publisher.recv(),
        Received::Packet(Packet::Puback(PubAck {
            packet_id: 5,
            ..PubAck::default()
        }))
    );
    match subscriber.recv() {
        Received::Packet(Packet::Publish(delivered)) => {
            assert_eq!(delivered.payload, b"hi");
            assert_eq!(delivered.qos, QoS::AtLeastOnce);
            assert_eq!(delivered.properties.subscription_identifiers, vec![42]);
        }
        other => panic!("expected the delivery, got {other:?}"),
    }
}

#[test]
fn sigterm_says_goodbye_and_exits_cleanly() {
    let mut broker = BrokerProcess::start("");
    let mut client = RawClient::connect(&broker.address(), ProtocolVersion::V5, "stays");
    let status = broker.terminate();
    assert!(status.success(), "exit status {status}");
    match client.recv_until_closed().as_slice() {
        [Packet::Disconnect(disconnect)] => {
            assert_eq!(disconnect.reason_code, ReasonCode::SERVER_SHUTTING_DOWN)
        }
        other => panic!("expected DISCONNECT 0x8B, got {other:?}"),
    }
}

#[test]
fn version_and_check_config() {
    let binary = env!("CARGO_BIN_EXE_saguin");
    let output = std::process::Command::new(binary)
        .arg("--version")
        .output()
        .unwrap();
    assert!(output.status.success());
    assert_eq!(
        String::from_utf8_lossy(&output.stdout).trim(),
        format!("saguin {}", env!("CARGO_PKG_VERSION"))
    );

    let dir = common::TempDir::new("check-config");
    let good = dir.path().join("good.yaml");
    std::fs::write(&good, "broker:\n  id: edge\n").unwrap();
    let output = common::check_config(&good);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );

    let bad = dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        "broker:\n  id: edge\n  log_level: verbose\n  limits:\n    max_keepalive: 20h\n",
    )
    .unwrap();
    let output = common::check_config(&bad);
    assert!(!output.status.success());
    let message = String::from_utf8_lossy(&output.stderr);
    assert!(message.contains("bad.yaml"), "{message}");
    assert!(
        message.contains("log_level") && message.contains("verbose"),
        "{message}"
    );
    assert!(
        message.contains("max_keepalive") && message.contains("20h"),
        "{message}"
    );
}

#[test]
fn the_embedded_default_configuration_starts() {
    // --print-default-config shows the file the broker runs without --config.
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_saguin"))
        .arg("--print-default-config")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    assert_eq!(text, saguin::config::DEFAULT_CONFIG_YAML);
    // Valid, or this panics.
    saguin::config::default_config_in(std::path::Path::new("/srv"));
}
