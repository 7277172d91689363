//! The metrics catalogue in the Prometheus text exposition format.
//!
//! Every name is one the reference catalogue defines, with its type and
//! labels; a figure this edition does not hold is left out rather than
//! published as a zero that would read as a fact (rfcs/0011-operations.md
//! lists which). Every label value is a name the operator wrote - a
//! channel, a provider, a broker id - or one from a closed set.

use std::fmt::{Display, Write as _};

use super::link::Provider;
use super::process::Process;
use crate::core::observe::{ChannelObservation, Observation, WillCause};

/// What one scrape reports.
pub struct Figures<'a> {
    pub broker_id: &'a str,
    pub uptime_s: f64,
    pub observation: &'a Observation,
    pub providers: &'a [Provider],
    pub process: Process,
}

/// Writes the catalogue: `# HELP` and `# TYPE` once per name, then its
/// samples.
pub fn render(figures: &Figures<'_>) -> String {
    let mut out = Exposition::default();
    let o = figures.observation;
    let s = &o.stats;
    out.family(
        "saguin_build_info",
        "gauge",
        "Always 1; carries the version.",
    );
    out.sample(
        "saguin_build_info",
        &[
            ("version", env!("CARGO_PKG_VERSION")),
            ("broker_id", figures.broker_id),
        ],
        1u64,
    );
    out.one(
        "saguin_uptime_seconds",
        "gauge",
        "Seconds since the broker started.",
        figures.uptime_s,
    );
    out.one(
        "saguin_connections",
        "gauge",
        "Clients connected now.",
        o.connected_v311 + o.connected_v5,
    );
    out.family(
        "saguin_connections_by_protocol",
        "gauge",
        "Clients connected now, by MQTT version.",
    );
    out.sample(
        "saguin_connections_by_protocol",
        &[("protocol", "5")],
        o.connected_v5,
    );
    out.sample(
        "saguin_connections_by_protocol",
        &[("protocol", "3.1.1")],
        o.connected_v311,
    );
    out.one(
        "saguin_connections_total",
        "counter",
        "Connections accepted since start.",
        s.connections_accepted,
    );
    out.family(
        "saguin_connections_refused_total",
        "counter",
        "Connections refused, by reason.",
    );
    out.sample(
        "saguin_connections_refused_total",
        &[("reason", "server busy")],
        s.connections_refused_busy,
    );
    out.one(
        "saguin_sessions_offline",
        "gauge",
        "Sessions held with nothing connected to them.",
        o.sessions_offline,
    );
    out.one(
        "saguin_subscriptions",
        "gauge",
        "Subscriptions every session holds.",
        o.subscriptions,
    );
    out.one(
        "saguin_session_expiry_shortened_total",
        "counter",
        "CONNECTs that asked for a longer session than limits.max_session_expiry and were given the cap.",
        o.session_expiry_shortened,
    );
    out.one(
        "saguin_max_session_expiry_seconds",
        "gauge",
        "The configured limits.max_session_expiry.",
        o.max_session_expiry_s,
    );
    out.family(
        "saguin_wills_published_total",
        "counter",
        "Wills published on a client's behalf, by what made each due.",
    );
    for (cause, n) in WillCause::ALL.iter().zip(o.wills_published) {
        out.sample(
            "saguin_wills_published_total",
            &[("cause", cause.as_str())],
            n,
        );
    }
    out.one(
        "saguin_wills_cancelled_total",
        "counter",
        "Wills a client cancelled by resuming inside their delay.",
        o.wills_cancelled,
    );
    out.one(
        "saguin_wills_waiting",
        "gauge",
        "Wills waiting out their delay.",
        o.wills_waiting,
    );
    out.one(
        "saguin_sessions_restored_total",
        "counter",
        "Sessions the last start put back from the session store.",
        o.sessions_restored,
    );
    out.family(
        "saguin_sessions_dropped_total",
        "counter",
        "Sessions the session store could not keep, by cause.",
    );
    for (cause, n) in [
        ("storage_full", s.sessions_dropped_storage_full),
        ("expired_while_stopped", o.sessions_expired_while_stopped),
        ("subscription_refused", o.sessions_subscription_refused),
    ] {
        out.sample("saguin_sessions_dropped_total", &[("cause", cause)], n);
    }
    out.one(
        "saguin_session_queue_messages",
        "gauge",
        "QoS 1 and 2 deliveries sessions hold unacknowledged.",
        o.session_queue_messages,
    );
    out.one(
        "saguin_session_queue_bytes",
        "gauge",
        "What those deliveries cost against limits.session_queue_bytes.",
        o.session_queue_bytes,
    );
    out.one(
        "saguin_retained_messages",
        "gauge",
        "Retained messages held.",
        o.retained_messages,
    );
    out.one(
        "saguin_qos2_held",
        "gauge",
        "Exactly-once publishes received and not released.",
        o.qos2_held,
    );
    out.one(
        "saguin_qos2_abandoned_total",
        "counter",
        "Exactly-once publishes taken in and never released.",
        s.qos2_abandoned,
    );
    out.one(
        "saguin_qos2_max_inflight_per_client",
        "gauge",
        "The configured broker.qos2.max_inflight_per_client.",
        o.qos2_max_inflight_per_client,
    );
    out.one(
        "saguin_publishes_received_total",
        "counter",
        "PUBLISH packets received, refused ones included.",
        s.publishes_received,
    );
    out.one(
        "saguin_deliveries_sent_total",
        "counter",
        "Publishes sent to subscribers.",
        s.deliveries_sent,
    );
    out.one(
        "saguin_deliveries_dropped_total",
        "counter",
        "QoS 0 broadcasts shed because a subscriber's buffer was full.",
        s.deliveries_dropped,
    );
    out.one(
        "saguin_deliveries_expired_total",
        "counter",
        "Deliveries whose Message Expiry Interval ran out before they were sent.",
        s.deliveries_expired,
    );
    out.family(
        "saguin_session_deliveries_dropped_total",
        "counter",
        "Deliveries a session never received, by cause.",
    );
    for (cause, n) in [
        ("session_queue_full", s.session_queue_full),
        ("too_large", s.deliveries_too_large),
        ("no_shared_member", s.shared_dropped),
    ] {
        out.sample(
            "saguin_session_deliveries_dropped_total",
            &[("cause", cause)],
            n,
        );
    }
    out.one(
        "saguin_broadcast_unmatched_total",
        "counter",
        "Broadcast publishes that matched no subscription and no channel.",
        o.broadcast_unmatched,
    );
    channels(&mut out, figures);
    providers(&mut out, figures.providers);
    process(&mut out, &figures.process);
    out.text
}

fn provider_name(providers: &[Provider], index: usize) -> &str {
    providers.get(index).map_or("", |p| p.name.as_str())
}

fn channels(out: &mut Exposition, figures: &Figures<'_>) {
    let list = &figures.observation.channels;
    out.family(
        "saguin_channel_info",
        "gauge",
        "Always 1; the channel's filter, type and provider.",
    );
    for c in list {
        let provider = provider_name(figures.providers, c.provider);
        let labels = [
            ("channel", c.name.as_str()),
            ("filter", &c.filter),
            ("type", c.kind),
            ("provider", provider),
        ];
        out.sample("saguin_channel_info", &labels, 1u64);
    }
    let append = |c: &ChannelObservation| c.kind == "append";
    let every = |_: &ChannelObservation| true;
    // (name, type, help, which channels carry it, its value where it has one)
    type Row = (
        &'static str,
        &'static str,
        &'static str,
        fn(&ChannelObservation) -> bool,
        fn(&ChannelObservation) -> Option<u64>,
    );
    let rows: [Row; 10] = [
        (
            "saguin_channel_records",
            "gauge",
            "Records held: next minus floor, or a latest channel's topics.",
            every,
            |c| match c.kind {
                "append" => Some(c.next_offset.saturating_sub(c.floor_offset)),
                _ => c.latest_topics,
            },
        ),
        (
            "saguin_channel_next_offset",
            "gauge",
            "The offset the channel assigns next.",
            append,
            |c| Some(c.next_offset),
        ),
        (
            "saguin_channel_floor_offset",
            "gauge",
            "The oldest offset still readable.",
            append,
            |c| Some(c.floor_offset),
        ),
        (
            "saguin_channel_consumers",
            "gauge",
            "Durable consumers holding a position on the channel.",
            append,
            |c| Some(c.consumers),
        ),
        (
            "saguin_channel_consumer_position_min",
            "gauge",
            "The lowest durable consumer position; below the floor, records were lost to it.",
            append,
            |c| c.consumer_position_min,
        ),
        (
            "saguin_channel_retention_removed_total",
            "counter",
            "Records retention has deleted.",
            every,
            |c| Some(c.retention_removed),
        ),
        (
            "saguin_channel_position_lost_total",
            "counter",
            "Times the retention floor passed a reader's position.",
            every,
            |c| Some(c.position_lost),
        ),
        (
            "saguin_published_total",
            "counter",
            "Records stored per channel, and broadcast publishes accepted.",
            every,
            |c| Some(c.published),
        ),
        (
            "saguin_queue_depth",
            "gauge",
            "Unresolved work.",
            every,
            |c| c.queue.as_ref().map(|q| q.depth),
        ),
        (
            "saguin_queue_inflight",
            "gauge",
            "Work out with a worker now.",
            every,
            |c| c.queue.as_ref().map(|q| q.inflight),
        ),
    ];
    for (name, kind, help, carries, value) in rows {
        out.family(name, kind, help);
        for c in list.iter().filter(|c| carries(c)) {
            if let Some(value) = value(c) {
                out.sample(name, &[("channel", c.name.as_str())], value);
            }
        }
        if name == "saguin_published_total" {
            let broadcast = figures.observation.published_broadcast;
            out.sample(name, &[("channel", "broadcast")], broadcast);
        }
    }
}

fn providers(out: &mut Exposition, providers: &[Provider]) {
    out.family(
        "saguin_provider_info",
        "gauge",
        "Always 1; the provider's type.",
    );
    for p in providers {
        out.sample(
            "saguin_provider_info",
            &[("provider", &p.name), ("type", p.kind)],
            1u64,
        );
    }
    let stats: Vec<_> = providers.iter().map(|p| (p, (p.commits)())).collect();
    out.family(
        "saguin_provider_bytes",
        "gauge",
        "What the provider holds, as its max_bytes counts it.",
    );
    for (p, s) in &stats {
        out.sample(
            "saguin_provider_bytes",
            &[("provider", p.name.as_str())],
            s.used_bytes,
        );
    }
    out.family(
        "saguin_provider_max_bytes",
        "gauge",
        "The provider's max_bytes.",
    );
    for p in providers {
        out.sample(
            "saguin_provider_max_bytes",
            &[("provider", p.name.as_str())],
            p.max_bytes,
        );
    }
    out.family(
        "saguin_storage_commits_total",
        "counter",
        "Publish transactions, by what closed them.",
    );
    // A memory provider has no transaction to collect publishes into.
    let collecting = || {
        stats
            .iter()
            .filter(|(p, _)| p.publish_commit_max_records.is_some())
    };
    for (p, s) in collecting() {
        for (closed_by, n) in [
            ("records", s.closed_by_records),
            ("interval", s.closed_by_interval),
        ] {
            out.sample(
                "saguin_storage_commits_total",
                &[("provider", &p.name), ("closed_by", closed_by)],
                n,
            );
        }
    }
    out.family(
        "saguin_storage_committed_records_total",
        "counter",
        "Records appended by committed transactions.",
    );
    for (p, s) in collecting() {
        out.sample(
            "saguin_storage_committed_records_total",
            &[("provider", &p.name)],
            s.records,
        );
    }
    out.family(
        "saguin_storage_errors_total",
        "counter",
        "Storage transactions that failed; no series until one has.",
    );
    for (p, s) in &stats {
        if s.failed_commits > 0 {
            out.sample(
                "saguin_storage_errors_total",
                &[("provider", &p.name)],
                s.failed_commits,
            );
        }
    }
    out.family(
        "saguin_provider_publish_commit_max_records",
        "gauge",
        "The provider's publish_commit_max_records.",
    );
    for p in providers {
        if let Some(max) = p.publish_commit_max_records {
            out.sample(
                "saguin_provider_publish_commit_max_records",
                &[("provider", &p.name)],
                max,
            );
        }
    }
}

fn process(out: &mut Exposition, p: &Process) {
    let rows: [(&str, &str, &str, Option<f64>); 6] = [
        (
            "saguin_process_resident_memory_bytes",
            "gauge",
            "Resident memory.",
            p.resident_memory_bytes.map(|v| v as f64),
        ),
        (
            "saguin_process_virtual_memory_bytes",
            "gauge",
            "Virtual memory.",
            p.virtual_memory_bytes.map(|v| v as f64),
        ),
        (
            "saguin_process_open_fds",
            "gauge",
            "Open file descriptors.",
            p.open_fds.map(|v| v as f64),
        ),
        (
            "saguin_process_max_fds",
            "gauge",
            "The soft limit on open file descriptors.",
            p.max_fds.map(|v| v as f64),
        ),
        (
            "saguin_process_cpu_seconds_total",
            "counter",
            "User and system CPU time.",
            p.cpu_seconds,
        ),
        (
            "saguin_process_start_time_seconds",
            "gauge",
            "When the process started, in Unix seconds.",
            p.start_time_seconds,
        ),
    ];
    for (name, kind, help, value) in rows {
        if let Some(value) = value {
            out.one(name, kind, help, value);
        }
    }
}

#[derive(Default)]
struct Exposition {
    text: String,
}

impl Exposition {
    fn family(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.text, "# HELP {name} {help}\n# TYPE {name} {kind}");
    }

    fn one(&mut self, name: &str, kind: &str, help: &str, value: impl Display) {
        self.family(name, kind, help);
        self.sample(name, &[], value);
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: impl Display) {
        self.text.push_str(name);
        if !labels.is_empty() {
            self.text.push('{');
            for (i, (label, value)) in labels.iter().enumerate() {
                if i > 0 {
                    self.text.push(',');
                }
                let _ = write!(self.text, "{label}=\"");
                escape_label(&mut self.text, value);
                self.text.push('"');
            }
            self.text.push('}');
        }
        let _ = writeln!(self.text, " {value}");
    }
}

/// A label value's backslashes, quotes and line feeds escaped.
fn escape_label(out: &mut String, value: &str) {
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::observe::QueueObservation;

    fn channel(name: &str, kind: &'static str) -> ChannelObservation {
        ChannelObservation {
            name: name.into(),
            filter: format!("{name}/#"),
            kind,
            provider: 0,
            next_offset: 7,
            floor_offset: 2,
            latest_topics: (kind == "latest").then_some(3),
            consumers: 0,
            consumer_position_min: None,
            queue: (kind == "queue").then(QueueObservation::default),
            retention_removed: 0,
            position_lost: 0,
            published: 0,
        }
    }

    fn rendered(observation: &Observation) -> String {
        render(&Figures {
            broker_id: "edge \"1\"",
            uptime_s: 1.5,
            observation,
            providers: &[],
            process: Process::default(),
        })
    }

    #[test]
    fn label_values_are_escaped() {
        let text = rendered(&Observation::default());
        assert!(text.contains("broker_id=\"edge \\\"1\\\"\"} 1\n"), "{text}");
    }

    #[test]
    fn each_channel_carries_only_the_series_its_type_has() {
        let observation = Observation {
            channels: vec![
                channel("events", "append"),
                channel("state", "latest"),
                channel("jobs", "queue"),
            ],
            ..Observation::default()
        };
        let text = rendered(&observation);
        assert!(text.contains("saguin_channel_records{channel=\"events\"} 5\n"));
        assert!(text.contains("saguin_channel_records{channel=\"state\"} 3\n"));
        assert!(!text.contains("saguin_channel_records{channel=\"jobs\"}"));
        assert!(!text.contains("saguin_channel_next_offset{channel=\"state\"}"));
        assert!(text.contains("saguin_channel_consumers{channel=\"events\"} 0\n"));
        // Nobody holds a position: no minimum rather than a zero.
        assert!(!text.contains("saguin_channel_consumer_position_min{"));
        assert!(text.contains("saguin_queue_depth{channel=\"jobs\"} 0\n"));
        assert!(text.contains(
            "saguin_channel_info{channel=\"events\",filter=\"events/#\",type=\"append\",provider=\"\"} 1\n"
        ));
    }

    #[test]
    fn every_family_is_announced_once() {
        let observation = Observation {
            channels: vec![channel("a", "append"), channel("b", "append")],
            ..Observation::default()
        };
        let text = rendered(&observation);
        let types = text
            .lines()
            .filter(|l| l.starts_with("# TYPE saguin_channel_info "))
            .count();
        assert_eq!(types, 1);
    }
}
