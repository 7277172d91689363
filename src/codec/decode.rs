//! Turning bytes into [`Packet`]s, rejecting every malformation with the
//! MQTT 5 reason code the specification gives it.
//!
//! No input can make these functions panic or allocate more than the input
//! holds: every length is checked against the bytes present before use.

use super::packet::*;
use super::property_codec::{read_properties, Place};
use super::topic::{filter_form_error, is_valid_topic_name};
use super::wire::{parse_varint, Reader};
use super::{DecodeError, FixedHeader, Properties, ReasonCode};

/// A PUBLISH's property block, its Property Length first, filling `bytes`
/// exactly: how a stored publish keeps its properties (mosquitto.db).
pub fn decode_publish_properties(bytes: &[u8]) -> Result<Properties, DecodeError> {
    let mut reader = Reader::new(bytes);
    let properties = read_properties(&mut reader, Place::Publish)?;
    match reader.is_empty() {
        true => Ok(properties),
        false => Err(DecodeError::malformed("bytes after the property block")),
    }
}

/// Reads the fixed header at the start of `buf`.
///
/// Returns `Ok(None)` while `buf` does not yet hold the whole header. The
/// first byte is checked as soon as it arrives: packet type 0, reserved
/// flags other than those the spec fixes (0b0010 for PUBREL, SUBSCRIBE and
/// UNSUBSCRIBE, 0 for all but PUBLISH) and PUBLISH QoS 3 are all 0x81, as is
/// a remaining length longer than four bytes or not in its shortest form.
/// Whether AUTH exists depends on the protocol version, so a 3.1.1 AUTH is
/// refused by [`decode_packet`].
///
/// The Maximum Packet Size (0x95) is not checked here: the caller compares
/// [`FixedHeader::packet_len`] with its limit before reading the body.
pub fn decode_fixed_header(buf: &[u8]) -> Result<Option<FixedHeader>, DecodeError> {
    let Some((&first, rest)) = buf.split_first() else {
        return Ok(None);
    };
    let (packet_type, flags) = (first >> 4, first & 0x0F);
    check_type_and_flags(packet_type, flags)?;
    let Some((remaining_length, len_bytes)) = parse_varint(rest)? else {
        return Ok(None);
    };
    Ok(Some(FixedHeader {
        packet_type,
        flags,
        remaining_length,
        header_len: 1 + len_bytes,
    }))
}

/// [`decode_fixed_header`] for a connection's first packet, which must be a
/// CONNECT (MQTT-3.1.0-1): any other first byte is a protocol error as soon
/// as it arrives, so nothing it declares is waited for or read.
pub fn decode_first_header(buf: &[u8]) -> Result<Option<FixedHeader>, DecodeError> {
    if let Some(&first) = buf.first() {
        let packet_type = first >> 4;
        check_type_and_flags(packet_type, first & 0x0F)?;
        if packet_type != PacketType::Connect as u8 {
            return Err(NOT_CONNECT_FIRST);
        }
    }
    decode_fixed_header(buf)
}

const NOT_CONNECT_FIRST: DecodeError = DecodeError::protocol("first packet must be CONNECT");

/// The fixed header rules of spec section 2.1.3.
fn check_type_and_flags(packet_type: u8, flags: u8) -> Result<(), DecodeError> {
    let valid = match packet_type {
        0 | 16.. => return Err(DecodeError::malformed("reserved packet type")),
        3 => flags & 0b0110 != 0b0110,
        6 | 8 | 10 => flags == 0b0010,
        _ => flags == 0,
    };
    if valid {
        Ok(())
    } else if packet_type == 3 {
        Err(DecodeError::malformed("PUBLISH with QoS 3"))
    } else {
        Err(DecodeError::malformed("reserved fixed header flags"))
    }
}

/// Decodes a packet body (exactly `header.remaining_length` bytes).
///
/// `version` is `None` until the connection's CONNECT has been read: then
/// only a CONNECT is accepted, and after it a CONNECT is a protocol error.
/// The fixed header is checked again here because [`FixedHeader`] can be
/// built by hand.
pub fn decode_packet(
    header: &FixedHeader,
    body: &[u8],
    version: Option<ProtocolVersion>,
) -> Result<Packet, DecodeError> {
    check_type_and_flags(header.packet_type, header.flags)?;
    if usize::try_from(header.remaining_length) != Ok(body.len()) {
        return Err(DecodeError::malformed(
            "body length differs from the remaining length",
        ));
    }
    let is_connect = header.packet_type == PacketType::Connect as u8;
    match (version, is_connect) {
        (None, true) => decode_connect(body).map(|c| Packet::Connect(Box::new(c))),
        (None, false) => Err(NOT_CONNECT_FIRST),
        (Some(_), true) => Err(DecodeError::protocol("second CONNECT")),
        (Some(version), false) => {
            let mut reader = Reader::new(body);
            let packet = decode_body(header, &mut reader, version)?;
            reader.finish()?;
            Ok(packet)
        }
    }
}

/// Reads the protocol name and level of a CONNECT body, if this codec
/// speaks them; a refused CONNECT can then be answered in the right version.
pub fn peek_connect_version(body: &[u8]) -> Option<ProtocolVersion> {
    read_protocol(&mut Reader::new(body)).ok()
}

fn decode_body(
    header: &FixedHeader,
    reader: &mut Reader,
    version: ProtocolVersion,
) -> Result<Packet, DecodeError> {
    let v5 = version == ProtocolVersion::V5;
    Ok(match header.packet_type {
        2 => Packet::Connack(decode_connack(reader, v5)?),
        3 => Packet::Publish(decode_publish(reader, header.flags, v5)?),
        4 => Packet::Puback(decode_ack(reader, v5, PUBACK_REASONS)?),
        5 => Packet::Pubrec(decode_ack(reader, v5, PUBACK_REASONS)?),
        6 => Packet::Pubrel(decode_ack(reader, v5, PUBREL_REASONS)?),
        7 => Packet::Pubcomp(decode_ack(reader, v5, PUBREL_REASONS)?),
        8 => Packet::Subscribe(decode_subscribe(reader, v5)?),
        9 => Packet::Suback(decode_suback(reader, v5)?),
        10 => Packet::Unsubscribe(decode_unsubscribe(reader, v5)?),
        11 => Packet::Unsuback(decode_unsuback(reader, v5)?),
        12 => Packet::Pingreq,
        13 => Packet::Pingresp,
        14 => Packet::Disconnect(decode_disconnect(reader, v5)?),
        15 if v5 => Packet::Auth(decode_auth(reader)?),
        15 => return Err(DecodeError::malformed("AUTH does not exist in MQTT 3.1.1")),
        // CONNECT and the reserved types were handled by the caller.
        _ => return Err(DecodeError::malformed("reserved packet type")),
    })
}

// Reason codes each packet may carry (MQTT 5 sections 3.2.2.2 to 3.15.2.1).
const CONNACK_REASONS: &[u8] = &[
    0x00, 0x80, 0x81, 0x82, 0x83, 0x84, 0x85, 0x86, 0x87, 0x88, 0x89, 0x8A, 0x8C, 0x90, 0x95, 0x97,
    0x99, 0x9A, 0x9B, 0x9C, 0x9D, 0x9F,
];
const PUBACK_REASONS: &[u8] = &[0x00, 0x10, 0x80, 0x83, 0x87, 0x90, 0x91, 0x97, 0x99];
const PUBREL_REASONS: &[u8] = &[0x00, 0x92];
const SUBACK_REASONS: &[u8] = &[
    0x00, 0x01, 0x02, 0x80, 0x83, 0x87, 0x8F, 0x91, 0x97, 0x9E, 0xA1, 0xA2,
];
const SUBACK_RETURN_CODES_V311: &[u8] = &[0x00, 0x01, 0x02, 0x80];
const UNSUBACK_REASONS: &[u8] = &[0x00, 0x11, 0x80, 0x83, 0x87, 0x8F, 0x91];
const DISCONNECT_REASONS: &[u8] = &[
    0x00, 0x04, 0x80, 0x81, 0x82, 0x83, 0x87, 0x89, 0x8B, 0x8D, 0x8E, 0x8F, 0x90, 0x93, 0x94, 0x95,
    0x96, 0x97, 0x98, 0x99, 0x9A, 0x9B, 0x9C, 0x9D, 0x9E, 0x9F, 0xA0, 0xA1, 0xA2,
];
const AUTH_REASONS: &[u8] = &[0x00, 0x18, 0x19];

/// A reason code byte outside the packet's set is malformed.
fn reason_code(reader: &mut Reader, valid: &[u8]) -> Result<ReasonCode, DecodeError> {
    let code = reader.u8()?;
    if valid.contains(&code) {
        Ok(ReasonCode(code))
    } else {
        Err(DecodeError::malformed(
            "reason code not defined for this packet",
        ))
    }
}

/// A Packet Identifier where the spec requires a non-zero one (MQTT-2.2.1-3).
fn packet_id(reader: &mut Reader) -> Result<u16, DecodeError> {
    match reader.u16()? {
        0 => Err(DecodeError::protocol("packet identifier is 0")),
        id => Ok(id),
    }
}

fn properties_if_v5(
    reader: &mut Reader,
    v5: bool,
    place: Place,
) -> Result<Properties, DecodeError> {
    if v5 {
        read_properties(reader, place)
    } else {
        Ok(Properties::default())
    }
}

// ---- CONNECT ----

/// Protocol Name "MQTT" with level 4 or 5. Another level of MQTT, or MQTT
/// 3.1's own name "MQIsdp", is 0x84: a version this codec does not speak,
/// which its client is told. Any other name is not MQTT at all (MQTT-3.1.2-1
/// in both versions), so it is malformed and answered with nothing
/// (MQTT-3.1.4-1). The name is compared as raw bytes, so a name that is not
/// even UTF-8 is foreign too.
fn read_protocol(reader: &mut Reader) -> Result<ProtocolVersion, DecodeError> {
    let name = reader.binary()?;
    let level = reader.u8()?;
    match (name, level) {
        (b"MQTT", 4) => Ok(ProtocolVersion::V311),
        (b"MQTT", 5) => Ok(ProtocolVersion::V5),
        (b"MQTT" | b"MQIsdp", _) => Err(DecodeError {
            code: ReasonCode::UNSUPPORTED_PROTOCOL_VERSION,
            reason: "unsupported protocol level",
        }),
        _ => Err(DecodeError::malformed("protocol name is not MQTT")),
    }
}

/// The Connect Flags byte (spec section 3.1.2.3).
struct ConnectFlags {
    clean_start: bool,
    will: bool,
    will_qos: QoS,
    will_retain: bool,
    password: bool,
    username: bool,
}

impl ConnectFlags {
    fn parse(byte: u8, version: ProtocolVersion) -> Result<ConnectFlags, DecodeError> {
        if byte & 0x01 != 0 {
            return Err(DecodeError::malformed("CONNECT reserved flag set"));
        }
        let flags = ConnectFlags {
            clean_start: byte & 0x02 != 0,
            will: byte & 0x04 != 0,
            will_qos: QoS::from_bits((byte >> 3) & 0b11)
                .ok_or(DecodeError::malformed("Will QoS 3"))?,
            will_retain: byte & 0x20 != 0,
            password: byte & 0x40 != 0,
            username: byte & 0x80 != 0,
        };
        if !flags.will && flags.will_qos != QoS::AtMostOnce {
            return Err(DecodeError::malformed("Will QoS set without a Will"));
        }
        if !flags.will && flags.will_retain {
            return Err(DecodeError::protocol("Will Retain set without a Will"));
        }
        if version == ProtocolVersion::V311 && flags.password && !flags.username {
            return Err(DecodeError::protocol("password without user name"));
        }
        Ok(flags)
    }
}

fn decode_connect(body: &[u8]) -> Result<Connect, DecodeError> {
    let mut reader = Reader::new(body);
    let version = read_protocol(&mut reader)?;
    let v5 = version == ProtocolVersion::V5;
    let flags = ConnectFlags::parse(reader.u8()?, version)?;
    let keep_alive_s = reader.u16()?;
    let properties = properties_if_v5(&mut reader, v5, Place::Connect)?;
    if properties.authentication_data.is_some() && properties.authentication_method.is_none() {
        return Err(DecodeError::protocol(
            "Authentication Data without a method",
        ));
    }
    let client_id = reader.utf8()?.to_owned();
    let will = match flags.will {
        true => Some(read_will(&mut reader, &flags, v5)?),
        false => None,
    };
    let username = match flags.username {
        true => Some(reader.utf8()?.to_owned()),
        false => None,
    };
    let password = match flags.password {
        true => Some(reader.binary()?.to_vec()),
        false => None,
    };
    reader.finish()?;
    Ok(Connect {
        protocol_version: version,
        clean_start: flags.clean_start,
        keep_alive_s,
        client_id,
        will,
        username,
        password,
        properties,
    })
}

/// The Will Topic must be a valid Topic Name, as any PUBLISH topic.
fn read_will(reader: &mut Reader, flags: &ConnectFlags, v5: bool) -> Result<Will, DecodeError> {
    let properties = properties_if_v5(reader, v5, Place::Will)?;
    let topic = reader.utf8()?;
    if !is_valid_topic_name(topic) {
        return Err(DecodeError::protocol(
            "Will Topic is not a valid topic name",
        ));
    }
    Ok(Will {
        topic: topic.to_owned(),
        payload: reader.binary()?.to_vec(),
        qos: flags.will_qos,
        retain: flags.will_retain,
        properties,
    })
}

// ---- Server to client: CONNACK, SUBACK, UNSUBACK ----
// Read permissively beyond the wire rules: a client must be able to read them.

fn decode_connack(reader: &mut Reader, v5: bool) -> Result<Connack, DecodeError> {
    let flags = reader.u8()?;
    if flags & 0xFE != 0 {
        return Err(DecodeError::malformed("CONNACK reserved flags set"));
    }
    let reason_code = if v5 {
        reason_code(reader, CONNACK_REASONS)?
    } else {
        match reader.u8()? {
            code @ 0..=5 => ReasonCode::from_connack_return_code_v311(code),
            _ => return Err(DecodeError::malformed("unknown CONNACK return code")),
        }
    };
    Ok(Connack {
        session_present: flags & 0x01 != 0,
        reason_code,
        properties: properties_if_v5(reader, v5, Place::Connack)?,
    })
}

fn decode_suback(reader: &mut Reader, v5: bool) -> Result<Suback, DecodeError> {
    let packet_id = reader.u16()?;
    let properties = properties_if_v5(reader, v5, Place::Suback)?;
    let valid = if v5 {
        SUBACK_REASONS
    } else {
        SUBACK_RETURN_CODES_V311
    };
    let mut reason_codes = Vec::new();
    while !reader.is_empty() {
        reason_codes.push(reason_code(reader, valid)?);
    }
    Ok(Suback {
        packet_id,
        properties,
        reason_codes,
    })
}

fn decode_unsuback(reader: &mut Reader, v5: bool) -> Result<Unsuback, DecodeError> {
    let packet_id = reader.u16()?;
    let properties = properties_if_v5(reader, v5, Place::Unsuback)?;
    let mut reason_codes = Vec::new();
    // A 3.1.1 UNSUBACK has no payload; `finish` rejects any.
    while v5 && !reader.is_empty() {
        reason_codes.push(reason_code(reader, UNSUBACK_REASONS)?);
    }
    Ok(Unsuback {
        packet_id,
        properties,
        reason_codes,
    })
}

// ---- PUBLISH and its acknowledgements ----

fn decode_publish(reader: &mut Reader, flags: u8, v5: bool) -> Result<Publish, DecodeError> {
    let qos =
        QoS::from_bits((flags >> 1) & 0b11).ok_or(DecodeError::malformed("PUBLISH with QoS 3"))?;
    let dup = flags & 0b1000 != 0;
    if dup && qos == QoS::AtMostOnce {
        return Err(DecodeError::protocol("DUP set on a QoS 0 PUBLISH"));
    }
    let topic = reader.utf8()?;
    if topic.contains(['+', '#']) {
        return Err(DecodeError::protocol("wildcard in a PUBLISH topic"));
    }
    let packet_id = match qos {
        QoS::AtMostOnce => None,
        _ => Some(packet_id(reader)?),
    };
    let properties = properties_if_v5(reader, v5, Place::Publish)?;
    // MQTT 5 may leave the topic empty when a Topic Alias stands for it.
    if topic.is_empty() && properties.topic_alias.is_none() {
        return Err(DecodeError::protocol("empty PUBLISH topic"));
    }
    Ok(Publish {
        dup,
        qos,
        retain: flags & 0b0001 != 0,
        topic: topic.to_owned(),
        packet_id,
        properties,
        payload: reader.take_rest().to_vec(),
    })
}

/// PUBACK, PUBREC, PUBREL, PUBCOMP. On MQTT 5 the reason code may be left
/// out (meaning 0) and so may the properties after it (spec 3.4.2.1).
fn decode_ack(reader: &mut Reader, v5: bool, valid: &[u8]) -> Result<PubAck, DecodeError> {
    let mut ack = PubAck {
        packet_id: packet_id(reader)?,
        ..PubAck::default()
    };
    if v5 && !reader.is_empty() {
        ack.reason_code = reason_code(reader, valid)?;
        if !reader.is_empty() {
            ack.properties = read_properties(reader, Place::Ack)?;
        }
    }
    Ok(ack)
}

// ---- SUBSCRIBE and UNSUBSCRIBE ----
// A filter that is no topic filter at all (empty, a wildcard inside a
// level, a `$share/` without a name or a filter) is a protocol error. One
// that is well formed but not accepted is the broker's to refuse, per
// filter, in the SUBACK.

fn topic_filter(reader: &mut Reader, v5: bool) -> Result<String, DecodeError> {
    let filter = reader.utf8()?;
    match filter_form_error(filter, v5) {
        Some(why) => Err(DecodeError::protocol(why)),
        None => Ok(filter.to_owned()),
    }
}

fn decode_subscribe(reader: &mut Reader, v5: bool) -> Result<Subscribe, DecodeError> {
    let packet_id = packet_id(reader)?;
    let properties = properties_if_v5(reader, v5, Place::Subscribe)?;
    let mut filters = Vec::new();
    while !reader.is_empty() {
        let filter = topic_filter(reader, v5)?;
        let options = subscription_options(reader.u8()?, v5)?;
        filters.push((filter, options));
    }
    if filters.is_empty() {
        return Err(DecodeError::protocol("SUBSCRIBE without a topic filter"));
    }
    Ok(Subscribe {
        packet_id,
        properties,
        filters,
    })
}

/// The Subscription Options byte (spec 3.8.3.1); 3.1.1 has only the QoS.
fn subscription_options(byte: u8, v5: bool) -> Result<SubscriptionOptions, DecodeError> {
    let reserved_bits = if v5 { 0b1100_0000 } else { 0b1111_1100 };
    if byte & reserved_bits != 0 {
        return Err(DecodeError::malformed(
            "subscription options reserved bits set",
        ));
    }
    let qos = QoS::from_bits(byte & 0b11).ok_or(DecodeError::malformed("subscription QoS 3"))?;
    let retain_handling = match (byte >> 4) & 0b11 {
        0 => RetainHandling::SendAlways,
        1 => RetainHandling::SendIfNew,
        2 => RetainHandling::DoNotSend,
        _ => return Err(DecodeError::protocol("Retain Handling 3")),
    };
    Ok(SubscriptionOptions {
        qos,
        no_local: byte & 0b0100 != 0,
        retain_as_published: byte & 0b1000 != 0,
        retain_handling,
    })
}

fn decode_unsubscribe(reader: &mut Reader, v5: bool) -> Result<Unsubscribe, DecodeError> {
    let packet_id = packet_id(reader)?;
    let properties = properties_if_v5(reader, v5, Place::Unsubscribe)?;
    let mut filters = Vec::new();
    while !reader.is_empty() {
        filters.push(topic_filter(reader, v5)?);
    }
    if filters.is_empty() {
        return Err(DecodeError::protocol("UNSUBSCRIBE without a topic filter"));
    }
    Ok(Unsubscribe {
        packet_id,
        properties,
        filters,
    })
}

// ---- DISCONNECT and AUTH ----

/// A 3.1.1 DISCONNECT is empty; an MQTT 5 one may stop after any field.
fn decode_disconnect(reader: &mut Reader, v5: bool) -> Result<Disconnect, DecodeError> {
    let mut disconnect = Disconnect::default();
    if v5 && !reader.is_empty() {
        disconnect.reason_code = reason_code(reader, DISCONNECT_REASONS)?;
        if !reader.is_empty() {
            disconnect.properties = read_properties(reader, Place::Disconnect)?;
        }
    }
    Ok(disconnect)
}

/// AUTH is either empty (Success, no properties) or has both a reason code
/// and a Property Length (spec 3.15.2.1).
fn decode_auth(reader: &mut Reader) -> Result<Auth, DecodeError> {
    if reader.is_empty() {
        return Ok(Auth::default());
    }
    Ok(Auth {
        reason_code: reason_code(reader, AUTH_REASONS)?,
        properties: read_properties(reader, Place::Auth)?,
    })
}
