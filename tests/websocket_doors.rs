//! MQTT over WebSocket on `ws` doors, over real sockets: packets split
//! across frames in any way, the origin check before the upgrade, and
//! malformed input answered as RFC 6455 says without disturbing another
//! connection. Frames are built here by hand; paho-mqtt and MQTT.js speak
//! to the same doors in `tests/interop` and `tests/browser.rs`.

mod common;

use common::websocket::{self, Framed};
use common::{connect_packet, BrokerProcess, RawClient, Received, Stream, TempDir};
use saguin::codec::{encode, Packet, ProtocolVersion, Publish, QoS};

/// A `ws` door with `keys` (lines at its own indent) beside the test
/// broker's TCP door.
fn ws_door(keys: &str) -> String {
    format!("      ws:\n        address: 127.0.0.1:0\n{keys}")
}

/// A broker with a `ws` door carrying `keys` and `extra` under `broker:`;
/// the ws door's address.
fn broker(keys: &str, extra: &str) -> (BrokerProcess, String) {
    let mut broker = BrokerProcess::start(&format!("{}{extra}", ws_door(keys)));
    let port = broker.door_port("ws");
    (broker, format!("127.0.0.1:{port}"))
}

fn bytes_of(packet: &Packet, version: ProtocolVersion) -> Vec<u8> {
    let mut bytes = Vec::new();
    encode(packet, version, &mut bytes);
    bytes
}

/// An MQTT client over a WebSocket at `address`, CONNECTed as `client_id`.
fn ws_client(address: &str, client_id: &str) -> RawClient {
    let framed = websocket::connect(address);
    let mut client = RawClient::over(Stream::WebSocket(Box::new(framed)), ProtocolVersion::V5);
    assert_eq!(
        client.connect_with(connect_packet(ProtocolVersion::V5, client_id)),
        0
    );
    client
}

#[test]
fn packets_split_across_frames_in_any_way_are_read_whole_and_a_ping_is_answered() {
    let (_broker, address) = broker("", "");
    let mut framed = websocket::connect(&address);
    // The CONNECT one byte a frame, as one fragmented message.
    let connect = bytes_of(
        &Packet::Connect(Box::new(connect_packet(ProtocolVersion::V5, "split"))),
        ProtocolVersion::V5,
    );
    let last = connect.len() - 1;
    for (i, byte) in connect.iter().enumerate() {
        let first = match (i, i == last) {
            (0, _) => 0x02,
            (_, false) => 0x00,
            (_, true) => 0x80,
        };
        framed.send_raw(&Framed::frame(first, &[*byte], true));
        if i == 3 {
            // A ping in the middle of the message is answered, and the
            // message goes on.
            framed.send_raw(&Framed::frame(0x89, b"still there?", true));
        }
    }
    // The pong comes first, unmasked, carrying the ping's payload.
    let mut pong = [0u8; 14];
    std::io::Read::read_exact(&mut framed.socket(), &mut pong).unwrap();
    assert_eq!(&pong, b"\x8a\x0cstill there?");
    let mut client = RawClient::over(Stream::WebSocket(Box::new(framed)), ProtocolVersion::V5);
    assert!(matches!(client.recv(), Received::Packet(Packet::Connack(c)) if c.reason_code.0 == 0));
    // A SUBSCRIBE and a PUBLISH in one frame, and the delivery back.
    client.subscribe("ws/#", QoS::AtMostOnce);
    let publish = Publish {
        qos: QoS::AtMostOnce,
        topic: "ws/a".into(),
        payload: vec![7; 70_000],
        ..Publish::default()
    };
    client.send(&Packet::Publish(publish));
    match client.recv() {
        Received::Packet(Packet::Publish(p)) => assert_eq!(p.payload, vec![7; 70_000]),
        other => panic!("expected the delivery, got {other:?}"),
    }
    client.assert_alive();
}

#[test]
fn a_ws_client_and_a_tcp_client_share_the_one_broker() {
    let (broker, address) = broker("", "");
    let mut tcp = RawClient::connect(&broker.address(), ProtocolVersion::V5, "on-tcp");
    tcp.subscribe("shared/#", QoS::AtLeastOnce);
    let mut ws = ws_client(&address, "on-ws");
    let publish = Publish {
        qos: QoS::AtLeastOnce,
        topic: "shared/x".into(),
        packet_id: Some(1),
        payload: b"from the browser side".to_vec(),
        ..Publish::default()
    };
    ws.send(&Packet::Publish(publish));
    assert!(matches!(ws.recv(), Received::Packet(Packet::Puback(_))));
    match tcp.recv() {
        Received::Packet(Packet::Publish(p)) => assert_eq!(p.payload, b"from the browser side"),
        other => panic!("{other:?}"),
    }
}

/// The operations listener's view of every session.
fn sessions(operations: &str) -> String {
    common::http::get_text(operations, "/v1/operations/sessions")
}

#[test]
fn an_origin_outside_allowed_origins_gets_403_and_no_session_and_its_slot_back() {
    let operations = "  operations:\n    listen:\n      tcp:\n        address: 127.0.0.1:0\n";
    let limits = "  limits:\n    max_connections: 1\n";
    let keys = "        same_origin: false\n        allowed_origins: [\"http://dashboard.example:8080\"]\n";
    let (mut broker, address) = broker(keys, &format!("{operations}{limits}"));
    let operations = broker
        .wait_for_log("operations door tcp bound to")
        .rsplit("bound to ")
        .next()
        .unwrap()
        .trim()
        .to_string();
    let refused = websocket::request(&address, "Origin: http://evil.example\r\n");
    let (_socket, head, _) = websocket::send_request(&address, &refused);
    assert_eq!(websocket::status(&head), 403, "{head}");
    broker.wait_for_log("refused a WebSocket upgrade from 127.0.0.1:");
    broker.wait_for_log("with 403: origin \"http://evil.example\"");
    // The one slot went back before the answer: a client gets it now.
    let mut listed = ws_client_with_origin(&address, "http://dashboard.example:8080", "listed");
    listed.assert_alive();
    let known = sessions(&operations);
    assert!(known.contains("\"total\":1,"), "{known}");
    assert!(known.contains("\"client_id\":\"listed\""), "{known}");
}

fn ws_client_with_origin(address: &str, origin: &str, client_id: &str) -> RawClient {
    let request = websocket::request(address, &format!("Origin: {origin}\r\n"));
    let (socket, head, rest) = websocket::send_request(address, &request);
    assert_eq!(websocket::status(&head), 101, "{head}");
    let framed = Framed::new(socket, rest);
    let mut client = RawClient::over(Stream::WebSocket(Box::new(framed)), ProtocolVersion::V5);
    assert_eq!(
        client.connect_with(connect_packet(ProtocolVersion::V5, client_id)),
        0
    );
    client
}

#[test]
fn same_origin_admits_the_doors_own_pages_and_clients_that_send_no_origin() {
    let (_broker, address) = broker("", "");
    ws_client_with_origin(&address, &format!("http://{address}"), "own").assert_alive();
    ws_client(&address, "no-origin").assert_alive();
    let other = websocket::request(&address, "Origin: http://127.0.0.1:1\r\n");
    assert_eq!(
        websocket::status(&websocket::send_request(&address, &other).1),
        403
    );
}

#[test]
fn malformed_websocket_input_gets_the_rfc_6455_answer_and_disturbs_no_other_connection() {
    let limits = "  limits:\n    max_message_size: 64KiB\n";
    let (broker, address) = broker("", limits);
    let mut ws_bystander = ws_client(&address, "ws-bystander");
    let mut tcp_bystander =
        RawClient::connect(&broker.address(), ProtocolVersion::V5, "tcp-bystander");

    // Handshakes the door refuses, each with the status that says why.
    let good = websocket::request(&address, "");
    let handshakes = [
        (good.replace("GET", "POST"), 405),
        (good.replace("HTTP/1.1", "HTTP/1.0"), 505),
        (good.replace("Upgrade: websocket\r\n", ""), 426),
        (
            good.replace("Sec-WebSocket-Version: 13", "Sec-WebSocket-Version: 8"),
            426,
        ),
        (good.replace(websocket::KEY, "dG9vIHNob3J0"), 400),
        (
            good.replace(
                "Sec-WebSocket-Protocol: mqtt",
                "Sec-WebSocket-Protocol: chat",
            ),
            400,
        ),
        ("PUT nonsense\r\n\r\n".to_string(), 400),
    ];
    for (request, status) in handshakes {
        let (_, head, _) = websocket::send_request(&address, &request);
        assert_eq!(websocket::status(&head), status, "{request:?}: {head}");
        ws_bystander.assert_alive();
    }

    // Frames after a good upgrade, each answered with a close carrying
    // the RFC's code for it.
    let connect = bytes_of(
        &Packet::Connect(Box::new(connect_packet(ProtocolVersion::V5, "bad"))),
        ProtocolVersion::V5,
    );
    // Refused on the length its header declares, before any payload.
    let (oversized, len) =
        saguin::net::websocket::frame::binary_header(65 * 1024, Some([1, 2, 3, 4]));
    let frames: Vec<(&str, Vec<u8>, u16)> = vec![
        ("unmasked", Framed::frame(0x82, &connect, false), 1002),
        ("oversized", oversized[..len].to_vec(), 1009),
        ("text", Framed::frame(0x81, b"{\"hello\":1}", true), 1003),
        ("fragmented ping", Framed::frame(0x09, b"x", true), 1002),
        (
            "continuation first",
            Framed::frame(0x80, &connect, true),
            1002,
        ),
        ("reserved bit", Framed::frame(0xc2, &connect, true), 1002),
        ("long ping", Framed::frame(0x89, &[0; 126], true), 1002),
        ("reserved opcode", Framed::frame(0x83, b"x", true), 1002),
        (
            "a new message inside another",
            [
                Framed::frame(0x02, &connect[..3], true),
                Framed::frame(0x82, &connect[3..], true),
            ]
            .concat(),
            1002,
        ),
    ];
    for (what, bytes, code) in frames {
        let mut framed = websocket::connect(&address);
        framed.send_raw(&bytes);
        assert_eq!(framed.close_code_at_end(), Some(code), "{what}");
        ws_bystander.assert_alive();
        tcp_bystander.assert_alive();
    }

    // A close in the middle of a packet ends the connection, answered with
    // the client's own code.
    let mut framed = websocket::connect(&address);
    framed.send_raw(&Framed::frame(0x82, &connect[..connect.len() / 2], true));
    framed.send_raw(&Framed::frame(0x88, &1001u16.to_be_bytes(), true));
    assert_eq!(framed.close_code_at_end(), Some(1001));
    ws_bystander.assert_alive();
    tcp_bystander.assert_alive();
}

#[test]
fn a_ws_socket_past_max_connections_is_closed_with_nothing_written() {
    let (broker, address) = broker("", "  limits:\n    max_connections: 1\n");
    let _holder = RawClient::connect(&broker.address(), ProtocolVersion::V5, "holder");
    let (_, head, rest) = websocket::send_request(&address, &websocket::request(&address, ""));
    assert!(head.is_empty() && rest.is_empty(), "answered: {head:?}");
}

/// The per-connection figure of the startup line.
fn per_connection_bytes(broker: &mut BrokerProcess) -> u64 {
    let line = broker.wait_for_log("each holding at most");
    line.split("each holding at most ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap()
}

#[test]
fn the_startup_line_counts_what_a_websocket_connection_holds_beyond_tcps() {
    let dir = TempDir::new("ws-figure");
    let mut plain = BrokerProcess::start_in(dir.path(), "", "");
    let plain_bytes = per_connection_bytes(&mut plain);
    drop(plain);
    let mut with_ws = BrokerProcess::start_in(dir.path(), &ws_door(""), "");
    assert_eq!(
        per_connection_bytes(&mut with_ws) - plain_bytes,
        saguin::net::websocket::WORST_CASE_CONNECTION_BYTES
    );
}

#[test]
fn a_ws_doors_own_password_file_admits_its_users_and_nobody_else() {
    use saguin::auth::hash::{PasswordHash, SALT_BYTES};
    let dir = TempDir::new("ws-password");
    let hash = PasswordHash::new_pbkdf2(b"secret", &[7; SALT_BYTES]);
    std::fs::write(dir.path().join("clients.passwd"), format!("bob:{hash}\n")).unwrap();
    let door = ws_door("        password_file: {dir}/clients.passwd\n");
    let mut broker = BrokerProcess::start_in(dir.path(), &door, "");
    let address = format!("127.0.0.1:{}", broker.door_port("ws"));
    let over_ws = || {
        RawClient::over(
            Stream::WebSocket(Box::new(websocket::connect(&address))),
            ProtocolVersion::V5,
        )
    };
    assert_eq!(
        over_ws().connect_with(connect_packet(ProtocolVersion::V5, "nobody")),
        0x86
    );
    let mut bob = connect_packet(ProtocolVersion::V5, "bob");
    bob.username = Some("bob".into());
    bob.password = Some(b"secret".to_vec());
    assert_eq!(over_ws().connect_with(bob), 0);
    // The TCP door beside it writes nothing of its own: anybody.
    RawClient::connect(&broker.address(), ProtocolVersion::V5, "anyone").assert_alive();
}
