//! Two requests answered to the asking connection alone, on the Response
//! Topic it names: `$saguin/kv/get` (the current value of one topic of a
//! `latest` channel) and `$saguin/catalogue/<channel>` (what a channel
//! is). The reply carries an answer and nothing else - an empty one means
//! "no value" or "no such channel" - so every refusal rides the PUBACK.
//! Both are asked at QoS 1; at QoS 0 there is no PUBACK to refuse in, and
//! the request is dropped. Answering one is the broker's
//! (`broker/point_read.rs`).

use crate::core::slab::Key;

pub(crate) const KV_GET: &str = "$saguin/kv/get";
pub(crate) const CATALOGUE_PREFIX: &str = "$saguin/catalogue/";

/// Whether a publish to `topic` is one of these requests.
pub fn is_request(topic: &str) -> bool {
    topic == KV_GET || topic.starts_with(CATALOGUE_PREFIX)
}

/// Where an answer goes: the asking connection, its Response Topic, the
/// Correlation Data it is answered with, and its PUBACK slot.
#[derive(Debug, Clone)]
pub(crate) struct ReplyTo {
    pub conn: Key,
    pub topic: String,
    /// `None` only for a catalogue request that sent none: a point read's
    /// answer always carries one.
    pub correlation_data: Option<Vec<u8>>,
    pub slot: u64,
}

/// A point read waiting for a value's body.
pub(crate) struct PointRead {
    pub reply: ReplyTo,
    pub channel: usize,
    pub key: String,
    pub offset: u64,
}

/// The one JSON string writer, shared with `saguin --acl`.
pub(crate) use crate::acl::explain::json_string;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_strings_escape_what_json_requires() {
        assert_eq!(json_string("a/{b,c}/#"), r#""a/{b,c}/#""#);
        assert_eq!(json_string("q\"b\\s\n"), r#""q\"b\\s\u000a""#);
    }

    #[test]
    fn only_the_two_request_topics_are_requests() {
        assert!(is_request("$saguin/kv/get"));
        assert!(is_request("$saguin/catalogue/readings"));
        assert!(!is_request("$saguin/kv/get/x"));
        assert!(!is_request("$saguin/kv"));
    }
}
