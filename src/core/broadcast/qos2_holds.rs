//! Exactly-once publishes held between PUBREC and PUBREL, for a session
//! that outlives its connection, as their stored entries are named: each
//! sits in the space its release writes to, under a key naming the client
//! id and packet identifier. Holding and releasing one is the broker's
//! (`broker/exactly_once.rs`).

/// Leads every hold's key, so holds never meet another use of a space.
const HOLD_PREFIX: &str = "$qos2\u{0}";

/// A hold as a provider kept it, read at start.
#[derive(Debug)]
pub struct StoredHold {
    pub provider: usize,
    /// The space it sits in: a channel's name, or the broadcast log's.
    pub space: String,
    pub key: String,
    pub value: Vec<u8>,
}

/// Whether an entry key is a hold's.
pub fn is_hold_key(key: &str) -> bool {
    key.starts_with(HOLD_PREFIX)
}

pub(crate) fn hold_key(client_id: &str, packet_id: u16) -> String {
    format!("{HOLD_PREFIX}{client_id}\u{0}{packet_id}")
}

pub(crate) fn parse_hold_key(key: &str) -> Option<(&str, u16)> {
    let rest = key.strip_prefix(HOLD_PREFIX)?;
    let (client_id, packet_id) = rest.rsplit_once('\u{0}')?;
    Some((client_id, packet_id.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hold_key_reads_back_and_is_told_apart() {
        let key = hold_key("sensor/1", 42);
        assert!(is_hold_key(&key));
        assert_eq!(parse_hold_key(&key), Some(("sensor/1", 42)));
        assert!(!is_hold_key("sensor/1"));
        assert_eq!(parse_hold_key("$qos2\u{0}no-id"), None);
    }
}
