//! The malformed table through the public API only, as the broker and its
//! integration tests see it. (The codec's unit tests run the same table and
//! also check which rule refused each row.)

use saguin::codec::malformed_cases::cases;
use saguin::codec::{
    decode_fixed_header, decode_packet, peek_connect_version, DecodeError, Packet,
};

fn decode_as_broker(
    case_bytes: &[u8],
    is_connect: bool,
    version: saguin::codec::ProtocolVersion,
) -> Result<Packet, DecodeError> {
    let header = decode_fixed_header(case_bytes)?.expect("a whole fixed header");
    assert_eq!(header.packet_len(), case_bytes.len(), "one whole packet");
    let body = &case_bytes[header.header_len..];
    decode_packet(&header, body, (!is_connect).then_some(version))
}

#[test]
fn every_row_is_refused_with_its_reason_code() {
    let cases = cases();
    assert!(cases.len() > 100);
    for case in cases {
        let is_connect = case.bytes[0] >> 4 == 1;
        let got = decode_as_broker(&case.bytes, is_connect, case.version).map_err(|e| e.code);
        assert_eq!(got, Err(case.expected), "{}", case.name);
    }
}

#[test]
fn refused_connects_of_a_known_version_can_be_answered_in_it() {
    for case in cases().into_iter().filter(|c| c.bytes[0] == 0x10) {
        let header = decode_fixed_header(&case.bytes).unwrap().unwrap();
        let body = &case.bytes[header.header_len..];
        let peeked = peek_connect_version(body);
        // The Protocol Name: a two-byte length, then the name.
        let names_mqtt = body.get(..6) == Some(&[0x00, 0x04, b'M', b'Q', b'T', b'T'][..]);
        match case.expected.0 {
            0x84 => assert_eq!(peeked, None, "{}", case.name),
            _ if !names_mqtt => assert_eq!(peeked, None, "{}", case.name),
            _ => assert_eq!(peeked, Some(case.version), "{}", case.name),
        }
    }
}
