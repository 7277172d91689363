//! Turning [`Packet`]s into bytes for either protocol version.
//!
//! One generic writer serves both [`encode`] and [`encoded_len`] (through a
//! counting sink), so the two can never disagree.

use super::packet::*;
use super::property_codec::{properties_len, write_properties, Place};
use super::wire::{varint_len, Counter, Sink};
use super::{Properties, ReasonCode, MAX_REMAINING_LENGTH};

/// Appends `packet` to `out` as `version` writes it.
///
/// On 3.1.1, fields that version lacks (properties, most reason codes) are
/// dropped, and AUTH, which it lacks entirely, writes nothing. On MQTT 5
/// the short forms are used wherever the spec allows them.
pub fn encode(packet: &Packet, version: ProtocolVersion, out: &mut Vec<u8>) {
    match plain_ack(packet) {
        Some(bytes) => out.extend_from_slice(&bytes),
        None => encode_any(packet, version, out),
    }
}

/// [`encode`] for every packet, without the shortcut.
pub(super) fn encode_any(packet: &Packet, version: ProtocolVersion, out: &mut Vec<u8>) {
    if !exists_in(packet, version) {
        debug_assert!(false, "AUTH cannot be encoded on MQTT 3.1.1");
        return;
    }
    let body_len = body_len(packet, version);
    let len_field = remaining_length_field(body_len);
    out.reserve(1 + varint_len(len_field) + body_len);
    out.put_u8(first_byte(packet));
    out.put_varint(len_field);
    write_body(packet, version, out);
}

/// A PUBACK, PUBREC, PUBREL or PUBCOMP with a Success reason and no
/// properties: the same four bytes in both versions (MQTT 5 leaves the
/// reason and the empty properties out). One is sent for every QoS 1 and
/// 2 publish, so it skips the general path's measuring pass.
fn plain_ack(packet: &Packet) -> Option<[u8; 4]> {
    let (Packet::Puback(ack) | Packet::Pubrec(ack) | Packet::Pubrel(ack) | Packet::Pubcomp(ack)) =
        packet
    else {
        return None;
    };
    if ack.reason_code != ReasonCode::SUCCESS || !ack.properties.is_empty() {
        return None;
    }
    let [high, low] = ack.packet_id.to_be_bytes();
    Some([first_byte(packet), 2, high, low])
}

/// The exact number of bytes [`encode`] appends, computed without
/// allocating.
pub fn encoded_len(packet: &Packet, version: ProtocolVersion) -> usize {
    if !exists_in(packet, version) {
        return 0;
    }
    let body_len = body_len(packet, version);
    1 + varint_len(remaining_length_field(body_len)) + body_len
}

/// A body past the largest remaining length is a caller bug (the caller
/// checks sizes against the Maximum Packet Size); the field is clamped.
fn remaining_length_field(body_len: usize) -> u32 {
    debug_assert!(
        body_len <= MAX_REMAINING_LENGTH as usize,
        "packet too large"
    );
    u32::try_from(body_len)
        .unwrap_or(u32::MAX)
        .min(MAX_REMAINING_LENGTH)
}

fn exists_in(packet: &Packet, version: ProtocolVersion) -> bool {
    !matches!((packet, version), (Packet::Auth(_), ProtocolVersion::V311))
}

fn body_len(packet: &Packet, version: ProtocolVersion) -> usize {
    let mut counter = Counter::default();
    write_body(packet, version, &mut counter);
    counter.len
}

/// Packet type in the high nibble, flags in the low one (spec 2.1.3).
fn first_byte(packet: &Packet) -> u8 {
    let flags = match packet {
        Packet::Publish(publish) => {
            // DUP on QoS 0 is a protocol error (MQTT-3.3.1-2): a message
            // downgraded to QoS 0 loses it here.
            let dup = publish.dup && publish.qos != QoS::AtMostOnce;
            u8::from(dup) << 3 | (publish.qos as u8) << 1 | u8::from(publish.retain)
        }
        Packet::Pubrel(_) | Packet::Subscribe(_) | Packet::Unsubscribe(_) => 0b0010,
        _ => 0,
    };
    (packet.packet_type() as u8) << 4 | flags
}

fn write_body<S: Sink>(packet: &Packet, version: ProtocolVersion, sink: &mut S) {
    let v5 = version == ProtocolVersion::V5;
    match packet {
        Packet::Connect(connect) => write_connect(connect, version, sink),
        Packet::Connack(connack) => write_connack(connack, v5, sink),
        Packet::Publish(publish) => write_publish(publish, v5, sink),
        Packet::Puback(ack) | Packet::Pubrec(ack) | Packet::Pubrel(ack) | Packet::Pubcomp(ack) => {
            write_ack(ack, v5, sink)
        }
        Packet::Subscribe(subscribe) => write_subscribe(subscribe, v5, sink),
        Packet::Suback(suback) => write_suback(suback, v5, sink),
        Packet::Unsubscribe(unsubscribe) => write_unsubscribe(unsubscribe, v5, sink),
        Packet::Unsuback(unsuback) => write_unsuback(unsuback, v5, sink),
        Packet::Pingreq | Packet::Pingresp => {}
        Packet::Disconnect(disconnect) if v5 => write_reason_and_properties(
            disconnect.reason_code,
            &disconnect.properties,
            Place::Disconnect,
            sink,
        ),
        Packet::Disconnect(_) => {}
        Packet::Auth(auth) => write_auth(auth, sink),
    }
}

fn write_properties_if_v5<S: Sink>(properties: &Properties, v5: bool, place: Place, sink: &mut S) {
    if v5 {
        write_properties(properties, place, sink);
    }
}

/// The connection's version is the one written, whatever
/// `connect.protocol_version` says.
fn write_connect<S: Sink>(connect: &Connect, version: ProtocolVersion, sink: &mut S) {
    let v5 = version == ProtocolVersion::V5;
    sink.put_str("MQTT");
    sink.put_u8(version.level());
    sink.put_u8(connect_flags(connect));
    sink.put_u16(connect.keep_alive_s);
    write_properties_if_v5(&connect.properties, v5, Place::Connect, sink);
    sink.put_str(&connect.client_id);
    if let Some(will) = &connect.will {
        write_properties_if_v5(&will.properties, v5, Place::Will, sink);
        sink.put_str(&will.topic);
        sink.put_binary(&will.payload);
    }
    if let Some(username) = &connect.username {
        sink.put_str(username);
    }
    if let Some(password) = &connect.password {
        sink.put_binary(password);
    }
}

fn connect_flags(connect: &Connect) -> u8 {
    let will = connect.will.as_ref();
    u8::from(connect.username.is_some()) << 7
        | u8::from(connect.password.is_some()) << 6
        | u8::from(will.is_some_and(|w| w.retain)) << 5
        | will.map_or(0, |w| w.qos as u8) << 3
        | u8::from(will.is_some()) << 2
        | u8::from(connect.clean_start) << 1
}

fn write_connack<S: Sink>(connack: &Connack, v5: bool, sink: &mut S) {
    sink.put_u8(u8::from(connack.session_present));
    if v5 {
        sink.put_u8(connack.reason_code.0);
        write_properties(&connack.properties, Place::Connack, sink);
    } else {
        sink.put_u8(connack.reason_code.connack_return_code_v311());
    }
}

fn write_publish<S: Sink>(publish: &Publish, v5: bool, sink: &mut S) {
    sink.put_str(&publish.topic);
    if publish.qos != QoS::AtMostOnce {
        debug_assert!(
            publish.packet_id.is_some(),
            "QoS > 0 PUBLISH without a packet id"
        );
        sink.put_u16(publish.packet_id.unwrap_or(0));
    }
    write_properties_if_v5(&publish.properties, v5, Place::Publish, sink);
    sink.put(&publish.payload);
}

/// MQTT 5 leaves out a Success reason code and empty properties.
fn write_ack<S: Sink>(ack: &PubAck, v5: bool, sink: &mut S) {
    sink.put_u16(ack.packet_id);
    if v5 {
        write_reason_and_properties(ack.reason_code, &ack.properties, Place::Ack, sink);
    }
}

/// The MQTT 5 tail that PUBACK-likes and DISCONNECT may shorten: nothing
/// for Success without properties, the reason code alone without
/// properties, else both.
fn write_reason_and_properties<S: Sink>(
    reason_code: ReasonCode,
    properties: &Properties,
    place: Place,
    sink: &mut S,
) {
    let has_properties = properties_len(properties, place) > 0;
    if reason_code != ReasonCode::SUCCESS || has_properties {
        sink.put_u8(reason_code.0);
    }
    if has_properties {
        write_properties(properties, place, sink);
    }
}

fn write_subscribe<S: Sink>(subscribe: &Subscribe, v5: bool, sink: &mut S) {
    sink.put_u16(subscribe.packet_id);
    write_properties_if_v5(&subscribe.properties, v5, Place::Subscribe, sink);
    for (filter, options) in &subscribe.filters {
        sink.put_str(filter);
        sink.put_u8(options_byte(options, v5));
    }
}

fn options_byte(options: &SubscriptionOptions, v5: bool) -> u8 {
    let qos = options.qos as u8;
    if !v5 {
        return qos;
    }
    (options.retain_handling as u8) << 4
        | u8::from(options.retain_as_published) << 3
        | u8::from(options.no_local) << 2
        | qos
}

/// 3.1.1 knows one failure code, 0x80.
fn write_suback<S: Sink>(suback: &Suback, v5: bool, sink: &mut S) {
    sink.put_u16(suback.packet_id);
    write_properties_if_v5(&suback.properties, v5, Place::Suback, sink);
    for code in &suback.reason_codes {
        let byte = match (v5, code.is_error()) {
            (false, true) => ReasonCode::UNSPECIFIED_ERROR.0,
            _ => code.0,
        };
        sink.put_u8(byte);
    }
}

fn write_unsubscribe<S: Sink>(unsubscribe: &Unsubscribe, v5: bool, sink: &mut S) {
    sink.put_u16(unsubscribe.packet_id);
    write_properties_if_v5(&unsubscribe.properties, v5, Place::Unsubscribe, sink);
    for filter in &unsubscribe.filters {
        sink.put_str(filter);
    }
}

/// A 3.1.1 UNSUBACK is the packet id alone.
fn write_unsuback<S: Sink>(unsuback: &Unsuback, v5: bool, sink: &mut S) {
    sink.put_u16(unsuback.packet_id);
    if v5 {
        write_properties(&unsuback.properties, Place::Unsuback, sink);
        for code in &unsuback.reason_codes {
            sink.put_u8(code.0);
        }
    }
}

/// AUTH may be empty, but never the reason code alone (spec 3.15.2.1).
fn write_auth<S: Sink>(auth: &Auth, sink: &mut S) {
    if auth.reason_code == ReasonCode::SUCCESS && properties_len(&auth.properties, Place::Auth) == 0
    {
        return;
    }
    sink.put_u8(auth.reason_code.0);
    write_properties(&auth.properties, Place::Auth, sink);
}
