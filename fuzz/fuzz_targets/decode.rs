//! Feeds arbitrary bytes to the decoder as a first packet and as a packet on
//! 3.1.1 and MQTT 5 connections. It must never panic, whatever decodes
//! must re-encode to bytes that decode to the same packet, and a SUBSCRIBE
//! or UNSUBSCRIBE that decodes names topic filters only.

#![no_main]

use libfuzzer_sys::fuzz_target;
use saguin::codec::topic::filter_form_error;
use saguin::codec::{
    decode_fixed_header, decode_packet, encode, encoded_len, Packet, ProtocolVersion,
};

fuzz_target!(|data: &[u8]| {
    let Ok(Some(header)) = decode_fixed_header(data) else {
        return;
    };
    let Some(body) = data.get(header.header_len..header.packet_len()) else {
        return;
    };
    for version in [None, Some(ProtocolVersion::V311), Some(ProtocolVersion::V5)] {
        let Ok(packet) = decode_packet(&header, body, version) else {
            continue;
        };
        let write_version = match &packet {
            Packet::Connect(connect) => connect.protocol_version,
            _ => version.expect("only a CONNECT decodes without a version"),
        };
        let mut bytes = Vec::new();
        encode(&packet, write_version, &mut bytes);
        assert_eq!(bytes.len(), encoded_len(&packet, write_version));
        let again_header = decode_fixed_header(&bytes)
            .expect("re-encoded header decodes")
            .expect("re-encoded header is whole");
        assert_eq!(again_header.packet_len(), bytes.len());
        let again = decode_packet(&again_header, &bytes[again_header.header_len..], version)
            .expect("re-encoded packet decodes");
        assert_eq!(again, packet);
        let filters: Vec<&str> = match &packet {
            Packet::Subscribe(s) => s.filters.iter().map(|(f, _)| f.as_str()).collect(),
            Packet::Unsubscribe(u) => u.filters.iter().map(String::as_str).collect(),
            _ => Vec::new(),
        };
        let v5 = write_version == ProtocolVersion::V5;
        for filter in filters {
            assert_eq!(filter_form_error(filter, v5), None, "{filter:?}");
        }
    }
});
