//! Keeping what the broker sends within the client's Maximum Packet Size
//! (MQTT-3.1.2-24). A packet too large loses what MQTT lets a server leave
//! out of it, in this order, until it fits:
//!
//! 1. the Reason String, and then
//! 2. the User Properties, which every packet but PUBLISH may lose so
//!    (MQTT-3.2.2-19, -20 on CONNACK, and the same rule on each other);
//! 3. on a CONNACK, the Topic Alias Maximum: without it the client sends
//!    no aliases, which asks less of the broker, not more.
//!
//! Nothing else is given up. The rest of a CONNACK states terms the broker
//! holds the client to (its packet size, Receive Maximum, Maximum QoS, the
//! expiry and keepalive it granted, the client id it assigned), and a
//! client told none of them would be held to terms it never heard. A
//! PUBLISH loses nothing: its properties are the message's. A packet still
//! too large is not sent at all.

use std::borrow::Cow;

use crate::codec::{encoded_len, Packet, Properties, ProtocolVersion};

/// `packet` as a client taking at most `max_bytes` may be sent it: as it
/// is, trimmed, or `None` when it cannot fit.
pub(crate) fn fitted(
    packet: &Packet,
    version: ProtocolVersion,
    max_bytes: u32,
) -> Option<Cow<'_, Packet>> {
    // 3.1.1 has no Maximum Packet Size, and most MQTT 5 clients set none.
    if max_bytes == u32::MAX || encoded_len(packet, version) <= max_bytes as usize {
        return Some(Cow::Borrowed(packet));
    }
    let mut trimmed = packet.clone();
    let trims = match packet {
        Packet::Connack(_) => TRIMS,
        _ => &TRIMS[..2],
    };
    for trim in trims {
        trim(properties_of(&mut trimmed)?);
        if encoded_len(&trimmed, version) <= max_bytes as usize {
            return Some(Cow::Owned(trimmed));
        }
    }
    None
}

/// What may be left out, in the order it is given up.
const TRIMS: &[fn(&mut Properties)] = &[
    |p| p.reason_string = None,
    |p| p.user_properties.clear(),
    |p| p.topic_alias_maximum = None,
];

/// The properties of a packet the broker may trim; `None` for a PUBLISH
/// and for packets without properties.
fn properties_of(packet: &mut Packet) -> Option<&mut Properties> {
    match packet {
        Packet::Connack(p) => Some(&mut p.properties),
        Packet::Puback(p) | Packet::Pubrec(p) | Packet::Pubrel(p) | Packet::Pubcomp(p) => {
            Some(&mut p.properties)
        }
        Packet::Suback(p) => Some(&mut p.properties),
        Packet::Unsuback(p) => Some(&mut p.properties),
        Packet::Disconnect(p) => Some(&mut p.properties),
        Packet::Auth(p) => Some(&mut p.properties),
        Packet::Connect(_)
        | Packet::Publish(_)
        | Packet::Subscribe(_)
        | Packet::Unsubscribe(_)
        | Packet::Pingreq
        | Packet::Pingresp => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{encode, Connack, Disconnect, PubAck, Publish, ReasonCode, Suback};
    use ProtocolVersion::{V311, V5};

    fn bytes(packet: &Packet, version: ProtocolVersion) -> Vec<u8> {
        let mut out = Vec::new();
        encode(packet, version, &mut out);
        out
    }

    /// The CONNACK the broker's defaults make: Topic Alias Maximum 16 and
    /// Maximum Packet Size 1 MiB.
    fn default_connack() -> Packet {
        Packet::Connack(Connack {
            session_present: false,
            reason_code: ReasonCode::SUCCESS,
            properties: Properties {
                topic_alias_maximum: Some(16),
                maximum_packet_size: Some(0x0010_0000),
                ..Properties::default()
            },
        })
    }

    #[test]
    fn a_connack_gives_up_its_topic_alias_maximum_and_no_more() {
        let connack = default_connack();
        let full = [
            0x20, 0x0B, 0x00, 0x00, 0x08, 0x22, 0x00, 0x10, 0x27, 0x00, 0x10, 0x00, 0x00,
        ];
        assert_eq!(bytes(&connack, V5), full);
        for max_bytes in [13, 100, u32::MAX] {
            let sent = fitted(&connack, V5, max_bytes).expect("fits");
            assert!(matches!(sent, Cow::Borrowed(_)), "untouched at {max_bytes}");
        }
        let without_aliases = [0x20, 0x08, 0x00, 0x00, 0x05, 0x27, 0x00, 0x10, 0x00, 0x00];
        for max_bytes in 10..=12 {
            let sent = fitted(&connack, V5, max_bytes).expect("fits trimmed");
            assert_eq!(bytes(&sent, V5), without_aliases, "at {max_bytes}");
        }
        // The broker's own packet size is a term, not a description.
        for max_bytes in 1..=9 {
            assert!(fitted(&connack, V5, max_bytes).is_none(), "at {max_bytes}");
        }
    }

    #[test]
    fn a_reply_loses_its_reason_string_then_its_user_properties() {
        let ack = Packet::Puback(PubAck {
            packet_id: 7,
            reason_code: ReasonCode::QUOTA_EXCEEDED,
            properties: Properties {
                reason_string: Some("the channel is at its max_bytes".into()),
                user_properties: vec![("k".into(), "v".into())],
                ..Properties::default()
            },
        });
        assert_eq!(bytes(&ack, V5).len(), 47);
        // The packet id, the code and the User Property.
        let without_reason = [
            0x40, 0x0B, 0x00, 0x07, 0x97, 0x07, 0x26, 0x00, 0x01, b'k', 0x00, 0x01, b'v',
        ];
        for max_bytes in [13, 46] {
            let sent = fitted(&ack, V5, max_bytes).expect("fits without its Reason String");
            assert_eq!(bytes(&sent, V5), without_reason, "at {max_bytes}");
        }
        let bare = bytes(&fitted(&ack, V5, 5).unwrap(), V5);
        assert_eq!(bare, [0x40, 0x03, 0x00, 0x07, 0x97]);
        assert!(fitted(&ack, V5, 4).is_none());
    }

    #[test]
    fn a_disconnect_and_a_suback_keep_their_codes() {
        let disconnect = Packet::Disconnect(Disconnect {
            reason_code: ReasonCode::PROTOCOL_ERROR,
            properties: Properties {
                reason_string: Some("a wildcard takes less than a whole level".into()),
                ..Properties::default()
            },
        });
        let sent = fitted(&disconnect, V5, 3).expect("the code alone fits");
        assert_eq!(bytes(&sent, V5), [0xE0, 0x01, 0x82]);
        assert!(fitted(&disconnect, V5, 2).is_none());
        let suback = Packet::Suback(Suback {
            packet_id: 1,
            properties: Properties::default(),
            reason_codes: vec![ReasonCode::GRANTED_QOS_1; 8],
        });
        assert!(fitted(&suback, V5, 12).is_none(), "no code is dropped");
        assert!(fitted(&suback, V5, 13).is_some());
    }

    #[test]
    fn a_publish_is_never_trimmed_and_3_1_1_is_never_measured() {
        let publish = Packet::Publish(Publish {
            topic: "t".into(),
            payload: vec![0; 32],
            properties: Properties {
                user_properties: vec![("k".into(), "v".into())],
                ..Properties::default()
            },
            ..Publish::default()
        });
        assert!(fitted(&publish, V5, 20).is_none());
        assert!(fitted(&publish, V311, u32::MAX).is_some());
    }
}
