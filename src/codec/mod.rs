//! The MQTT 3.1.1 and 5 wire format: pure functions over byte slices.
//!
//! Reading is in two steps so that a connection can refuse a packet by its
//! declared size before reading its body:
//!
//! 1. [`decode_fixed_header`] reads the first byte and the remaining length
//!    ([`decode_first_header`] for a connection's first packet, which is
//!    refused on its first byte unless that byte is a CONNECT's);
//! 2. [`decode_packet`] reads the body once it has fully arrived.
//!
//! Every malformation maps to the MQTT 5 reason code the specification gives
//! it ([`DecodeError::code`]); on 3.1.1 the caller closes the connection.

mod decode;
mod encode;
#[doc(hidden)]
pub mod malformed_cases;
pub mod packet;
pub mod properties;
mod property_codec;
pub mod reason;
#[cfg(test)]
mod tests;
pub mod topic;
mod wire;

pub use decode::{
    decode_first_header, decode_fixed_header, decode_packet, decode_publish_properties,
    peek_connect_version,
};
pub use encode::{encode, encoded_len};
pub use packet::*;
pub use properties::Properties;
pub use reason::ReasonCode;

/// The largest remaining length a four-byte variable byte integer holds.
pub const MAX_REMAINING_LENGTH: u32 = 268_435_455;

/// The first byte and the remaining length of a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FixedHeader {
    /// The high nibble of the first byte.
    pub packet_type: u8,
    /// The low nibble of the first byte.
    pub flags: u8,
    pub remaining_length: u32,
    /// Bytes taken by the first byte plus the length (2 to 5).
    pub header_len: usize,
}

impl FixedHeader {
    /// The whole packet's size on the wire, header included.
    pub fn packet_len(&self) -> usize {
        self.header_len + self.remaining_length as usize
    }
}

/// Why a packet could not be read, as the reason code to answer with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecodeError {
    /// 0x81 malformed, 0x82 protocol error, 0x84 unsupported protocol
    /// version, 0x94 topic alias invalid, 0x95 packet too large.
    pub code: ReasonCode,
    /// What was wrong, for logs and Reason Strings.
    pub reason: &'static str,
}

impl DecodeError {
    pub const fn malformed(reason: &'static str) -> DecodeError {
        DecodeError {
            code: ReasonCode::MALFORMED_PACKET,
            reason,
        }
    }

    pub const fn protocol(reason: &'static str) -> DecodeError {
        DecodeError {
            code: ReasonCode::PROTOCOL_ERROR,
            reason,
        }
    }
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (reason code 0x{:02X})", self.reason, self.code.0)
    }
}

impl std::error::Error for DecodeError {}
