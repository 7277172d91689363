//! The most memory the broker can be made to hold by what clients do,
//! term by term, each from the bound that limits it. The startup line and
//! `--check-config` print these terms; a board profile is sized so their
//! sum leaves the board's OS its share of RAM.
//!
//! `C` is `limits.max_connections`, `A` `limits.max_persistent_sessions`,
//! `S` `limits.max_subscriptions`, `M` `limits.max_message_size`, `Q`
//! `limits.session_queue_bytes`.

use super::{tls, websocket, Listen, Settings};
use crate::core::session::charge;
use crate::core::Broker;
use crate::store::ProviderKind;

/// One way memory grows, with its formula and the bytes it comes to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Term {
    pub name: &'static str,
    pub formula: String,
    pub bytes: u64,
}

/// Every term; `counted` are summed into the figure, `apart` would be
/// printed beside it (none today: every path has a bound of its own).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorstCase {
    pub counted: Vec<Term>,
    pub apart: Vec<Term>,
}

impl WorstCase {
    pub fn of(settings: &Settings) -> WorstCase {
        let core = &settings.core;
        let c = u64::from(core.max_connections);
        let a = u64::from(core.max_persistent_sessions);
        let s = u64::from(core.max_subscriptions);
        let m = u64::from(core.max_message_size_bytes);
        let q = core.session_queue_bytes;
        let per_connection = connection_bytes(settings);
        let hold_bytes = m + crate::store::RECORD_OVERHEAD_BYTES;
        let q2 = u64::from(core.qos2_max_inflight_per_client);
        // The largest a session can be charged: its longest id and S of
        // the deepest, longest shared filters.
        let levels = u64::from(core.max_topic_levels).saturating_sub(1);
        let filter_max = charge::FILTER_BYTES
            + charge::SHARED_FILTER_BYTES
            + charge::LEVEL_BYTES * levels
            + u64::from(core.max_topic_length);
        let session_max =
            charge::SESSION_BYTES + u64::from(core.max_client_id_length) + s * filter_max;
        let sessions_by_count = (c + a).saturating_mul(session_max);
        let channels = core.channels.len() as u64;
        let channel_bytes = crate::core::channel::TAIL_CACHE_BYTES
            .max(crate::core::latest::CACHE_BYTES)
            .max(crate::core::queue::READ_BATCH_BYTES);
        let providers = settings.providers.len() as u64;
        let requests = super::storage::STORAGE_QUEUE_REQUESTS as u64;
        let request_bytes = crate::store::REQUEST_BYTES as u64;
        let provider_own: u64 = settings.providers.iter().map(provider_bytes).sum();
        let peer_packet = super::bridge::MAX_PEER_PACKET_BYTES as u64;
        let bridge_bytes: u64 = settings
            .bridges
            .iter()
            .map(|b| u64::from(b.receive_maximum) * (m + peer_packet) + peer_packet)
            .sum();
        let handshake = 2 * super::connection::READ_CHUNK_BYTES as u64;
        let waiting_sockets = super::OVERFLOW_BUDGET as u64;
        let groups = u64::from(core.max_shared_groups);

        let counted = vec![
            Term {
                name: "connections",
                formula: format!(
                    "C x (read buffer, outbox pause, largest reply, Q, topic aliases{}) = {c} x {per_connection}",
                    tls_or_websocket(settings)
                ),
                bytes: c * per_connection,
            },
            Term {
                name: "sessions away",
                formula: format!("A x Q = {a} x {q}"),
                bytes: a * q,
            },
            Term {
                name: "QoS 2 holds",
                formula: format!(
                    "(C + A) x qos2.max_inflight_per_client x (M + record) = {} x {q2} x {hold_bytes}",
                    c + a
                ),
                bytes: (c + a) * q2 * hold_bytes,
            },
            Term {
                name: "session ids and subscriptions (topic index)",
                formula: format!(
                    "min(session memory bound {}, (C + A) x (session + id + S x filter) = {} x {session_max})",
                    core.session_memory_max_bytes,
                    c + a
                ),
                bytes: core.session_memory_max_bytes.min(sessions_by_count),
            },
            Term {
                name: "retained values",
                formula: format!("the retained store's bound {}", core.retained_max_bytes),
                bytes: core.retained_max_bytes,
            },
            Term {
                name: "waiting publishes",
                formula: "max(16MiB, 4 x M) + 2 x M".to_string(),
                bytes: Broker::waiting_publish_max_bytes(core) + 2 * m,
            },
            Term {
                name: "storage requests",
                formula: format!("providers x {requests} x {request_bytes} = {providers} x {requests} x {request_bytes}"),
                bytes: providers * requests * request_bytes,
            },
            Term {
                name: "storage providers",
                formula: "redb: its cache; memory: its max_bytes".to_string(),
                bytes: provider_own,
            },
            Term {
                name: "channel caches",
                formula: format!("channels x {channel_bytes} = {channels} x {channel_bytes}"),
                bytes: channels * channel_bytes,
            },
            Term {
                name: "bridge queues",
                formula: "per bridge: receive_maximum x (M + 16MiB peer packet) + 16MiB".to_string(),
                bytes: bridge_bytes,
            },
            Term {
                name: "shared group backlogs",
                formula: format!("limits.max_shared_groups x Q = {groups} x {q}"),
                bytes: groups * q,
            },
            Term {
                name: "sockets turned away",
                formula: format!("{waiting_sockets} x {handshake}"),
                bytes: waiting_sockets * handshake,
            },
        ];
        let apart = Vec::new();
        WorstCase { counted, apart }
    }

    pub fn total_bytes(&self) -> u64 {
        self.counted.iter().map(|t| t.bytes).sum()
    }

    /// One line a term, the sum first.
    pub fn lines(&self) -> Vec<String> {
        let mut lines = vec![format!(
            "worst case in memory: {} bytes, the sum of:",
            self.total_bytes()
        )];
        for t in &self.counted {
            lines.push(format!("  {}: {} bytes ({})", t.name, t.bytes, t.formula));
        }
        for t in &self.apart {
            lines.push(format!(
                "  outside the sum, {}: up to {} bytes ({})",
                t.name, t.bytes, t.formula
            ));
        }
        lines
    }
}

/// One connection at every bound: its buffers, queued deliveries and
/// replies, and its door's layer.
pub fn connection_bytes(settings: &Settings) -> u64 {
    let doors = &settings.doors;
    let tls_bytes = match doors.iter().any(|d| d.tls.is_some()) {
        true => tls::WORST_CASE_CONNECTION_BYTES,
        false => 0,
    };
    let websocket_bytes = match doors
        .iter()
        .any(|d| matches!(d.listen, Listen::WebSocket { .. }))
    {
        true => websocket::WORST_CASE_CONNECTION_BYTES,
        false => 0,
    };
    super::worst_case_connection_bytes(&settings.core) + tls_bytes + websocket_bytes
}

fn tls_or_websocket(settings: &Settings) -> &'static str {
    let tls = settings.doors.iter().any(|d| d.tls.is_some());
    let ws = settings
        .doors
        .iter()
        .any(|d| matches!(d.listen, Listen::WebSocket { .. }));
    match (tls, ws) {
        (true, true) => ", TLS, WebSocket",
        (true, false) => ", TLS",
        (false, true) => ", WebSocket",
        (false, false) => "",
    }
}

fn provider_bytes(provider: &crate::store::ProviderSettings) -> u64 {
    match provider.kind {
        ProviderKind::Redb { .. } => crate::store::REDB_CACHE_BYTES as u64,
        ProviderKind::Memory { .. } => provider.max_bytes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(limits: &str) -> Settings {
        let text = format!(
            "broker:\n  id: t\n  mqtt:\n    listen:\n      tcp:\n        address: 127.0.0.1:0\n  limits:\n{limits}"
        );
        crate::config::parse(&text, "test.yaml")
            .unwrap()
            .shell_settings()
    }

    fn worst(limits: &str) -> WorstCase {
        WorstCase::of(&settings(limits))
    }

    fn term(worst: &WorstCase, name: &str) -> u64 {
        worst
            .counted
            .iter()
            .chain(&worst.apart)
            .find(|t| t.name == name)
            .unwrap_or_else(|| panic!("no term {name}"))
            .bytes
    }

    #[test]
    fn each_kept_session_adds_its_queue_and_its_holds() {
        let base = "    session_queue_bytes: 1MiB\n    max_message_size: 64KiB\n";
        let one = worst(&format!("{base}    max_persistent_sessions: 1\n"));
        let two = worst(&format!("{base}    max_persistent_sessions: 2\n"));
        assert_eq!(
            term(&two, "sessions away") - term(&one, "sessions away"),
            1024 * 1024
        );
        assert_eq!(
            term(&two, "QoS 2 holds") - term(&one, "QoS 2 holds"),
            20 * (64 * 1024 + crate::store::RECORD_OVERHEAD_BYTES)
        );
    }

    #[test]
    fn the_sum_holds_every_counted_term_and_the_lines_name_each() {
        let limits = "    max_connections: 10\n";
        let w = worst(limits);
        assert_eq!(
            w.total_bytes(),
            w.counted.iter().map(|t| t.bytes).sum::<u64>()
        );
        assert_eq!(
            term(&w, "connections"),
            10 * connection_bytes(&settings(limits))
        );
        let lines = w.lines();
        assert_eq!(lines.len(), 1 + w.counted.len() + w.apart.len());
        assert!(lines[0].contains(&w.total_bytes().to_string()));
        assert_eq!(
            term(&w, "shared group backlogs"),
            1_000 * settings(limits).core.session_queue_bytes
        );
    }
}
