//! What a session costs the broker's memory, counted against the bound on
//! session memory: the figure the reference charges for a session, since
//! that is what it costs while its client is away for up to
//! `max_session_expiry`. A level two filters share is charged to each, so
//! this bounds what sessions take rather than measuring it.

use crate::codec::Will;

/// A session's own charge, before its client id and filters.
pub const SESSION_BYTES: u64 = 3_500;
/// Each filter's charge, before its levels and length.
pub const FILTER_BYTES: u64 = 800;
/// What a shared filter adds: its group's membership.
pub const SHARED_FILTER_BYTES: u64 = 400;
/// Each level of a filter after its first.
pub const LEVEL_BYTES: u64 = 600;
/// The bound on session memory where no provider keeps sessions: a
/// memory provider's size in the reference's examples.
pub const DEFAULT_SESSION_MEMORY_BYTES: u64 = 64 * 1024 * 1024;

/// One filter as the client wrote it (`$share/<group>/` and all).
pub fn filter_bytes(filter: &str) -> u64 {
    let (shared, plain) = match filter.strip_prefix("$share/") {
        Some(rest) => (true, rest.split_once('/').map_or(rest, |(_, f)| f)),
        None => (false, filter),
    };
    let levels = plain.split('/').count() as u64;
    FILTER_BYTES
        + if shared { SHARED_FILTER_BYTES } else { 0 }
        + LEVEL_BYTES * levels.saturating_sub(1)
        + filter.len() as u64
}

/// A session with `client_id` and `filters`.
pub fn session_bytes<'a>(client_id: &str, filters: impl IntoIterator<Item = &'a str>) -> u64 {
    SESSION_BYTES + client_id.len() as u64 + filters.into_iter().map(filter_bytes).sum::<u64>()
}

/// A Will's topic, payload and properties.
pub fn will_bytes(will: &Will) -> u64 {
    let p = &will.properties;
    let user: usize = p
        .user_properties
        .iter()
        .map(|(k, v)| k.len() + v.len())
        .sum();
    let optional = p.content_type.as_ref().map_or(0, String::len)
        + p.response_topic.as_ref().map_or(0, String::len)
        + p.correlation_data.as_ref().map_or(0, Vec::len);
    (will.topic.len() + will.payload.len() + user + optional) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_filter_costs_its_levels_its_length_and_its_group() {
        assert_eq!(filter_bytes("a"), 800 + 1);
        assert_eq!(filter_bytes("a/b/c"), 800 + 2 * 600 + 5);
        assert_eq!(filter_bytes("$share/g/a/b"), 800 + 400 + 600 + 12);
    }

    #[test]
    fn a_session_costs_its_client_id_and_its_filters() {
        assert_eq!(session_bytes("dev", []), 3_503);
        assert_eq!(session_bytes("dev", ["a", "a/b"]), 3_503 + 801 + 1_403);
    }
}
