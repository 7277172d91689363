//! `broker.limits`: every bound on what a client may send or hold.
//!
//! Each key has a default, a range, and a rule for `none`; a value outside
//! them is refused with the reason it has no honest meaning. Sizes are held
//! as `u32` or `u64` explicitly, never `usize`, so a 32-bit gateway reads a
//! file exactly as a 64-bit one does.

use serde_yaml::Value;

use super::findings::{join, Findings};
use super::table::{table, Keys};
use super::units::{format_size, MS_PER_S};
use super::values::{
    count_key, duration_ms, size, to_u32, whole_number, whole_seconds, CountRule, NoneRule,
};

const MIB: u64 = 1 << 20;

/// The largest `max_message_size`: MQTT frames a packet with at most a
/// 5-byte fixed header and a 268,435,455-byte remainder, so 256MiB is the
/// largest round size every packet up to it can be framed in.
pub const MAX_MESSAGE_SIZE_CEILING: u32 = 256 * 1024 * 1024;

/// MQTT's Session Expiry Interval of 0xFFFFFFFF means "never expires",
/// which `max_session_expiry` exists to prevent, so the longest cap is one
/// second short of it.
pub const MAX_SESSION_EXPIRY_CEILING_S: u32 = u32::MAX - 1;

/// Server Keep Alive is a two-byte field.
pub const MAX_KEEPALIVE_CEILING_S: u16 = u16::MAX;

/// The default `max_connect_size` when `max_message_size` is not smaller.
pub const DEFAULT_MAX_CONNECT_SIZE: u32 = 100 * 1024;

/// The default `session_queue_bytes` when `max_message_size` is not larger.
pub const DEFAULT_SESSION_QUEUE_BYTES: u64 = MIB;

/// The bounds in `broker.limits`, in the units their names carry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Largest packet accepted, and the Maximum Packet Size advertised.
    pub max_message_size_bytes: u32,
    /// Longest topic name a publish may carry.
    pub max_topic_length: u32,
    /// Longest client id a CONNECT may carry; at least 23.
    pub max_client_id_length: u32,
    /// Most User Properties one publish may carry.
    pub max_header_count: u32,
    /// Most bytes of User Property keys and values one publish may carry.
    pub max_header_bytes: u32,
    /// Most connections held at once, across every door.
    pub max_connections: u32,
    /// Most topic filters one client may hold.
    pub max_subscriptions: u32,
    /// Most levels a topic name or filter may have.
    pub max_topic_levels: u32,
    /// Most sessions kept past their connections at once; past it a new
    /// one is granted a session that ends with its connection.
    pub max_persistent_sessions: u32,
    /// Most shared groups held at once; past it a SUBSCRIBE making a new
    /// one is refused 0x97 for that filter.
    pub max_shared_groups: u32,
    /// Cap on the Session Expiry Interval a client may ask for. `none` is
    /// refused, so this is never `u32::MAX` ("never expires").
    pub max_session_expiry_s: u32,
    /// Server Keep Alive ceiling; `None` for no ceiling.
    pub max_keepalive_s: Option<u16>,
    /// Publishes one client may make a second; `None` for no bound.
    pub publish_rate_per_s: Option<u32>,
    /// Bytes one client may publish a second; `None` for no bound.
    pub publish_bytes_per_s: Option<u64>,
    /// Longest wait to hand a packet to a client; `None` for no ceiling.
    pub write_timeout_ms: Option<u64>,
    /// Longest a socket may wait before sending CONNECT; at least 1.
    pub connect_timeout_s: u32,
    /// Largest CONNECT read before authentication; at most
    /// `max_message_size_bytes`.
    pub max_connect_size_bytes: u32,
    /// Connections each door accepts a second; `None` for no limit.
    pub max_connect_rate_per_s: Option<u32>,
    /// Most one session may hold of deliveries not yet acknowledged; at
    /// least `max_message_size_bytes`.
    pub session_queue_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_message_size_bytes: 1024 * 1024,
            max_topic_length: 1024,
            max_client_id_length: 256,
            max_header_count: 32,
            max_header_bytes: 8 * 1024,
            max_connections: 10_000,
            max_subscriptions: 10_000,
            max_topic_levels: 200,
            max_persistent_sessions: 10_000,
            max_shared_groups: 1_000,
            max_session_expiry_s: 30 * 24 * 60 * 60,
            max_keepalive_s: None,
            publish_rate_per_s: None,
            publish_bytes_per_s: None,
            write_timeout_ms: Some(5_000),
            connect_timeout_s: 10,
            max_connect_size_bytes: DEFAULT_MAX_CONNECT_SIZE,
            max_connect_rate_per_s: Some(500),
            session_queue_bytes: DEFAULT_SESSION_QUEUE_BYTES,
        }
    }
}

const KEYS: Keys = Keys {
    supported: &[
        "max_message_size",
        "max_topic_length",
        "max_client_id_length",
        "max_header_count",
        "max_header_bytes",
        "max_connections",
        "max_subscriptions",
        "max_topic_levels",
        "max_persistent_sessions",
        "max_shared_groups",
        "max_session_expiry",
        "max_keepalive",
        "publish_rate",
        "publish_bytes",
        "write_timeout",
        "connect_timeout",
        "max_connect_size",
        "max_connect_rate",
        "session_queue_bytes",
    ],
    not_yet: &[],
};

/// Reads `broker.limits`; absent reads as every default.
pub(super) fn parse(f: &mut Findings, path: &str, value: Option<&Value>) -> Option<Limits> {
    let t = table(f, path, value.unwrap_or(&Value::Null), &KEYS)?;
    let d = Limits::default();
    let key = |k: &str| (join(path, k), t.get(k));

    let max_message_size = match key("max_message_size") {
        (_, None) => Some(d.max_message_size_bytes),
        (p, Some(v)) => max_message_size(f, &p, v),
    };
    let max_topic_length = count_key(
        f,
        key("max_topic_length"),
        d.max_topic_length,
        CountRule {
            min: 1,
            max: 65_535,
            allowed: "it is a whole number from 1 to 65535, the longest topic MQTT can carry; omit the key for 1024",
            below: "a limit of 0 would refuse every publish",
            none: "a topic arrives from clients nobody vouches for and needs a bound",
        },
    );
    let max_client_id_length = count_key(
        f,
        key("max_client_id_length"),
        d.max_client_id_length,
        CountRule {
            min: 23,
            max: 65_535,
            allowed: "it is a whole number from 23 to 65535; omit the key for 256",
            below: "MQTT requires a server to accept every client id of 1 to 23 bytes",
            none: "a client id keys stored state, so its size needs a bound",
        },
    );
    let max_header_count = count_key(
        f,
        key("max_header_count"),
        d.max_header_count,
        CountRule {
            min: 1,
            max: u64::from(u32::MAX),
            allowed: "it is a whole number, 1 or more; omit the key for 32",
            below: "0 would refuse every publish carrying a User Property, Sagüin's own saguin-id among them",
            none: "what a client sends needs a bound",
        },
    );
    let max_header_bytes = match key("max_header_bytes") {
        (_, None) => Some(d.max_header_bytes),
        (p, Some(v)) => max_header_bytes(f, &p, v),
    };
    let max_connections = count_key(
        f,
        key("max_connections"),
        d.max_connections,
        CountRule {
            min: 1,
            max: u64::from(u32::MAX),
            allowed: "it is a whole number, 1 or more; omit the key for 10000",
            below: "0 would refuse every connection",
            none: "it sizes the session table allocated at startup",
        },
    );
    let max_subscriptions = count_key(
        f,
        key("max_subscriptions"),
        d.max_subscriptions,
        CountRule {
            min: 1,
            max: u64::from(u32::MAX),
            allowed: "it is a whole number, 1 or more; omit the key for 10000",
            below: "a value below 1 would refuse every SUBSCRIBE",
            none: "each filter a client holds is memory no other bound counts",
        },
    );
    let max_topic_levels = count_key(
        f,
        key("max_topic_levels"),
        d.max_topic_levels,
        CountRule {
            min: 1,
            max: u64::from(u32::MAX),
            allowed: "it is a whole number, 1 or more; omit the key for 200",
            below: "a value below 1 would refuse every publish and every SUBSCRIBE",
            none: "this bound is what stops one client taking the broker's memory one topic level at a time",
        },
    );
    let max_persistent_sessions = count_key(
        f,
        key("max_persistent_sessions"),
        d.max_persistent_sessions,
        CountRule {
            min: 1,
            max: u64::from(u32::MAX),
            allowed: "it is a whole number, 1 or more; omit the key for 10000",
            below: "0 would refuse every session a client asks to keep past its connection",
            none: "each session kept past its connection holds a queue of up to session_queue_bytes, so their number needs a bound",
        },
    );
    let max_shared_groups = count_key(
        f,
        key("max_shared_groups"),
        d.max_shared_groups,
        CountRule {
            min: 1,
            max: u64::from(u32::MAX),
            allowed: "it is a whole number, 1 or more; omit the key for 1000",
            below: "0 would refuse every shared subscription",
            none: "each shared group may hold a backlog of up to session_queue_bytes, so their number needs a bound",
        },
    );
    let max_session_expiry = match key("max_session_expiry") {
        (_, None) => Some(d.max_session_expiry_s),
        (p, Some(v)) => max_session_expiry(f, &p, v),
    };
    let max_keepalive = match key("max_keepalive") {
        (_, None) => Some(d.max_keepalive_s),
        (p, Some(v)) => max_keepalive(f, &p, v),
    };
    let publish_rate = match key("publish_rate") {
        (_, None) => Some(d.publish_rate_per_s),
        (p, Some(v)) => rate(
            f,
            &p,
            v,
            "it is a whole number of publishes a second, 1 or more; omit the key for no bound",
            "0 would refuse every publish, which is the opposite of no bound; omit the key for no bound",
        ),
    };
    let publish_bytes = match key("publish_bytes") {
        (_, None) => Some(d.publish_bytes_per_s),
        (p, Some(v)) => publish_bytes(f, &p, v),
    };
    let write_timeout = match key("write_timeout") {
        (_, None) => Some(d.write_timeout_ms),
        (p, Some(v)) => write_timeout(f, &p, v),
    };
    let connect_timeout = match key("connect_timeout") {
        (_, None) => Some(d.connect_timeout_s),
        (p, Some(v)) => connect_timeout(f, &p, v),
    };
    let max_connect_size = match key("max_connect_size") {
        (_, None) => max_message_size.map(|m| m.min(DEFAULT_MAX_CONNECT_SIZE)),
        (p, Some(v)) => max_connect_size(f, &p, v, max_message_size, path),
    };
    let max_connect_rate = match key("max_connect_rate") {
        (_, None) => Some(d.max_connect_rate_per_s),
        (p, Some(v)) => rate(
            f,
            &p,
            v,
            "it is a whole number of connections a second, 1 or more, or `none` for no limit; omit the key for 500",
            "0 would accept no connection at all; write `none` for no limit",
        ),
    };
    let session_queue_bytes = match key("session_queue_bytes") {
        (_, None) => max_message_size.map(|m| u64::from(m).max(DEFAULT_SESSION_QUEUE_BYTES)),
        (p, Some(v)) => session_queue_bytes(f, &p, v, max_message_size, path),
    };

    Some(Limits {
        max_message_size_bytes: max_message_size?,
        max_topic_length: max_topic_length?,
        max_client_id_length: max_client_id_length?,
        max_header_count: max_header_count?,
        max_header_bytes: max_header_bytes?,
        max_connections: max_connections?,
        max_subscriptions: max_subscriptions?,
        max_topic_levels: max_topic_levels?,
        max_persistent_sessions: max_persistent_sessions?,
        max_shared_groups: max_shared_groups?,
        max_session_expiry_s: max_session_expiry?,
        max_keepalive_s: max_keepalive?,
        publish_rate_per_s: publish_rate?,
        publish_bytes_per_s: publish_bytes?,
        write_timeout_ms: write_timeout?,
        connect_timeout_s: connect_timeout?,
        max_connect_size_bytes: max_connect_size?,
        max_connect_rate_per_s: max_connect_rate?,
        session_queue_bytes: session_queue_bytes?,
    })
}

fn max_message_size(f: &mut Findings, path: &str, value: &Value) -> Option<u32> {
    const ALLOWED: &str = "it is a size from 1B to 256MiB; omit the key for 1MiB";
    let n = size(
        f,
        path,
        value,
        NoneRule::Refused("every packet is checked against this bound before its body is read"),
        ALLOWED,
    )??;
    if n == 0 {
        f.value(
            path,
            value,
            format!("0 would refuse every packet; {ALLOWED}"),
        );
        return None;
    }
    if n > u64::from(MAX_MESSAGE_SIZE_CEILING) {
        f.value(
            path,
            value,
            format!("MQTT cannot frame a packet that large; {ALLOWED}"),
        );
        return None;
    }
    to_u32(f, path, value, n, ALLOWED)
}

fn max_header_bytes(f: &mut Findings, path: &str, value: &Value) -> Option<u32> {
    const ALLOWED: &str = "it is a size of 1B or more, below 4GiB; omit the key for 8KiB";
    let n = size(
        f,
        path,
        value,
        NoneRule::Refused("what a client sends needs a bound"),
        ALLOWED,
    )??;
    if n == 0 {
        f.value(
            path,
            value,
            format!("0 would refuse every publish carrying a User Property, Sagüin's own saguin-id among them; {ALLOWED}"),
        );
        return None;
    }
    to_u32(f, path, value, n, ALLOWED)
}

fn max_session_expiry(f: &mut Findings, path: &str, value: &Value) -> Option<u32> {
    const ALLOWED: &str =
        "it is a duration in whole seconds from 1s to 4294967294s (about 136 years); omit the key for 30d";
    let ms = duration_ms(
        f,
        path,
        value,
        NoneRule::Refused("a session that never expires is exactly what this bound prevents"),
        ALLOWED,
    )??;
    let s = whole_seconds(f, path, value, ms)?;
    if s == 0 {
        f.value(
            path,
            value,
            format!("0 would end every session with its connection, so no consumer could keep its position; {ALLOWED}"),
        );
        return None;
    }
    if s > u64::from(MAX_SESSION_EXPIRY_CEILING_S) {
        f.value(
            path,
            value,
            format!("MQTT reads 4294967295 seconds and above as never expiring, which this bound prevents; {ALLOWED}"),
        );
        return None;
    }
    u32::try_from(s).ok()
}

fn max_keepalive(f: &mut Findings, path: &str, value: &Value) -> Option<Option<u16>> {
    let Some(ms) = duration_ms(f, path, value, NoneRule::Allowed, "")? else {
        return Some(None);
    };
    let s = whole_seconds(f, path, value, ms)?;
    if s == 0 {
        f.value(
            path,
            value,
            "0 is not a ceiling (MQTT reads a keepalive of 0 as never idle); write `none` for no ceiling",
        );
        return None;
    }
    match u16::try_from(s) {
        Ok(s) => Some(Some(s)),
        Err(_) => {
            f.value_is(
                path,
                value,
                format!(
                    "is longer than MQTT can express, which is {} seconds (about 18 hours); write `none` for no ceiling",
                    MAX_KEEPALIVE_CEILING_S
                ),
            );
            None
        }
    }
}

fn publish_bytes(f: &mut Findings, path: &str, value: &Value) -> Option<Option<u64>> {
    const ALLOWED: &str = "it is a size a second, 1B or more; omit the key for no bound";
    let Some(n) = size(f, path, value, NoneRule::Allowed, ALLOWED)? else {
        return Some(None);
    };
    if n == 0 {
        f.value(
            path,
            value,
            "0 would refuse every publish, which is the opposite of no bound; omit the key for no bound",
        );
        return None;
    }
    Some(Some(n))
}

fn rate(
    f: &mut Findings,
    path: &str,
    value: &Value,
    allowed: &str,
    zero: &str,
) -> Option<Option<u32>> {
    let Some(n) = whole_number(f, path, value, NoneRule::Allowed, allowed)? else {
        return Some(None);
    };
    if n == 0 {
        f.value(path, value, zero);
        return None;
    }
    to_u32(f, path, value, n, allowed).map(Some)
}

fn write_timeout(f: &mut Findings, path: &str, value: &Value) -> Option<Option<u64>> {
    const ALLOWED: &str =
        "it is a duration from 1ms to 4294967295s, or `none` for no ceiling; omit the key for 5s";
    let Some(ms) = duration_ms(f, path, value, NoneRule::Allowed, ALLOWED)? else {
        return Some(None);
    };
    if ms == 0 {
        f.value(
            path,
            value,
            "0 would disconnect a client on any write that has to wait; write `none` for no ceiling",
        );
        return None;
    }
    if ms > u64::from(u32::MAX) * MS_PER_S {
        f.value(path, value, format!("too long; {ALLOWED}"));
        return None;
    }
    Some(Some(ms))
}

fn connect_timeout(f: &mut Findings, path: &str, value: &Value) -> Option<u32> {
    const ALLOWED: &str = "it is a duration in whole seconds, 1s or longer; omit the key for 10s";
    let ms = duration_ms(
        f,
        path,
        value,
        NoneRule::Refused(
            "this bound is all that stands between a socket that never sends CONNECT and the broker's descriptors",
        ),
        ALLOWED,
    )??;
    let s = whole_seconds(f, path, value, ms)?;
    if s == 0 {
        f.value(
            path,
            value,
            format!("0 would close every connection before its CONNECT; {ALLOWED}"),
        );
        return None;
    }
    match u32::try_from(s) {
        Ok(s) => Some(s),
        Err(_) => {
            f.value(path, value, format!("too long; {ALLOWED}"));
            None
        }
    }
}

fn max_connect_size(
    f: &mut Findings,
    path: &str,
    value: &Value,
    max_message_size: Option<u32>,
    limits_path: &str,
) -> Option<u32> {
    const ALLOWED: &str =
        "it is a size of 1B or more, up to max_message_size; omit the key for 100KiB (or max_message_size where that is smaller)";
    let n = size(
        f,
        path,
        value,
        NoneRule::Refused(
            "a CONNECT is read before its client has authenticated, so its size needs a bound",
        ),
        ALLOWED,
    )??;
    if n == 0 {
        f.value(
            path,
            value,
            format!("0 would refuse every CONNECT; {ALLOWED}"),
        );
        return None;
    }
    let ceiling = max_message_size.unwrap_or(MAX_MESSAGE_SIZE_CEILING);
    if n > u64::from(ceiling) {
        let why = match max_message_size {
            Some(m) => format!(
                "it may not exceed {}, which is {}; lower it, or raise max_message_size",
                join(limits_path, "max_message_size"),
                format_size(u64::from(m))
            ),
            None => format!("too large; {ALLOWED}"),
        };
        f.value(path, value, why);
        return None;
    }
    to_u32(f, path, value, n, ALLOWED)
}

fn session_queue_bytes(
    f: &mut Findings,
    path: &str,
    value: &Value,
    max_message_size: Option<u32>,
    limits_path: &str,
) -> Option<u64> {
    const ALLOWED: &str =
        "it is a size of at least max_message_size; omit the key for 1MiB (or max_message_size where that is larger)";
    let n = size(
        f,
        path,
        value,
        NoneRule::Refused("a session that stops reading would hold everything it is sent"),
        ALLOWED,
    )??;
    let floor = max_message_size.unwrap_or(1);
    if n < u64::from(floor) {
        let why = match max_message_size {
            Some(m) => format!(
                "it is below {}, which is {}, so a session could never queue the largest message a client may publish; raise it to at least that, or lower max_message_size",
                join(limits_path, "max_message_size"),
                format_size(u64::from(m))
            ),
            None => format!("0 would hold nothing for any session; {ALLOWED}"),
        };
        f.value(path, value, why);
        return None;
    }
    Some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_are_the_documented_ones() {
        let d = Limits::default();
        assert_eq!(d.max_message_size_bytes, 1_048_576);
        assert_eq!(d.max_topic_length, 1024);
        assert_eq!(d.max_client_id_length, 256);
        assert_eq!(d.max_header_count, 32);
        assert_eq!(d.max_header_bytes, 8_192);
        assert_eq!(d.max_connections, 10_000);
        assert_eq!(d.max_subscriptions, 10_000);
        assert_eq!(d.max_topic_levels, 200);
        assert_eq!(d.max_persistent_sessions, 10_000);
        assert_eq!(d.max_shared_groups, 1_000);
        assert_eq!(d.max_session_expiry_s, 2_592_000);
        assert_eq!(d.max_keepalive_s, None);
        assert_eq!(d.publish_rate_per_s, None);
        assert_eq!(d.publish_bytes_per_s, None);
        assert_eq!(d.write_timeout_ms, Some(5_000));
        assert_eq!(d.connect_timeout_s, 10);
        assert_eq!(d.max_connect_size_bytes, 102_400);
        assert_eq!(d.max_connect_rate_per_s, Some(500));
        assert_eq!(d.session_queue_bytes, 1_048_576);
        assert_eq!(u64::from(d.max_connect_size_bytes), 100 * 1024);
    }

    #[test]
    fn an_absent_block_reads_as_the_defaults() {
        let mut f = Findings::default();
        assert_eq!(
            parse(&mut f, "broker.limits", None),
            Some(Limits::default())
        );
        assert!(f.is_empty());
    }
}
