//! The metrics catalogue in the Prometheus text exposition format.
//!
//! Every name is one the reference catalogue defines, with its type and
//! labels; a figure this edition does not hold is left out rather than
//! published as a zero that would read as a fact (rfcs/0011-operations.md
//! lists which). Every label value is a name the operator wrote - a
//! channel, a provider, a broker id - or one from a closed set.

use std::fmt::{Display, Write as _};

use super::link::{BridgeObservation, Provider};
use super::process::Process;
use crate::core::observe::{
    ChannelObservation, Observation, QueueCounts, QueueObservation, WillCause,
};
use crate::core::refusal_counts::ReasonCounts;

/// What one scrape reports.
pub struct Figures<'a> {
    pub broker_id: &'a str,
    pub uptime_s: f64,
    pub observation: &'a Observation,
    pub bridges: &'a [BridgeObservation],
    /// Each provider's channels' record bytes, by provider index; `None`
    /// for a provider whose storage thread did not answer.
    pub channel_bytes: &'a [Option<Vec<(String, u64)>>],
    pub providers: &'a [Provider],
    pub process: Process,
    /// The MQTT doors' names, in door order.
    pub doors: &'a [(String, &'static str)],
    /// Each provider's writes and the wear they forecast, by provider index.
    pub wear: &'a [super::wear::Wear],
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
    out.family(
        "saguin_connections_by_listener",
        "gauge",
        "Clients connected now, by the MQTT door they came through; a bridge's own sessions come through none.",
    );
    for (index, (door, _)) in figures.doors.iter().enumerate() {
        let n = o.connected_by_door.get(index).copied().unwrap_or(0);
        out.sample(
            "saguin_connections_by_listener",
            &[("listener", door.as_str())],
            n,
        );
    }
    out.one(
        "saguin_connections_total",
        "counter",
        "Connections accepted since start.",
        s.connections_accepted,
    );
    let mut connections_refused = s.connections_refused.clone();
    connections_refused.add_busy(s.connections_refused_busy);
    by_reason(
        &mut out,
        "saguin_connections_refused_total",
        "Connections refused at CONNECT or ended for a refusal, by reason.",
        &connections_refused,
    );
    by_reason(
        &mut out,
        "saguin_publish_refused_total",
        "Publishes refused, by the reason their client was answered with.",
        &s.publish_refused,
    );
    by_reason(
        &mut out,
        "saguin_subscriptions_refused_total",
        "Topic filters a SUBACK refused, by reason.",
        &s.subscriptions_refused,
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
        ("persistent_full", s.sessions_dropped_persistent_full),
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
        "saguin_bytes_received_total",
        "counter",
        "Bytes read from MQTT connections.",
        s.bytes_received,
    );
    out.one(
        "saguin_bytes_sent_total",
        "counter",
        "Bytes written to MQTT connections.",
        s.bytes_sent,
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
        "saguin_deliveries_refused_total",
        "counter",
        "Broadcast deliveries refused because the session already held limits.session_queue_bytes.",
        s.deliveries_refused,
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
        // Never: Receive Maximum keeps a session's identifiers from
        // running out.
        ("packet_ids_exhausted", 0),
        ("no_shared_member", s.shared_dropped),
        ("storage_full", s.log_dropped),
        ("too_large", s.deliveries_too_large),
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
    shares(&mut out, s);
    channels(&mut out, figures);
    queues(&mut out, &o.channels);
    providers(&mut out, figures.providers);
    wear(&mut out, figures.providers, figures.wear);
    bridges(&mut out, figures.bridges);
    process(&mut out, &figures.process);
    out.text
}

/// A family labelled by refusal reason: a series for each reason counted,
/// none for a reason nobody was answered with.
fn by_reason(out: &mut Exposition, name: &str, help: &str, counts: &ReasonCounts) {
    out.family(name, "counter", help);
    for (reason, n) in counts.nonzero() {
        out.sample(name, &[("reason", reason)], n);
    }
}

fn shares(out: &mut Exposition, s: &crate::core::Stats) {
    out.one(
        "saguin_shares_held_total",
        "counter",
        "Deliveries put on a shared group's backlog.",
        s.shares_held,
    );
    out.one(
        "saguin_shares_drained_total",
        "counter",
        "Deliveries a shared group handed from its backlog to a member.",
        s.shares_drained,
    );
    out.family(
        "saguin_shares_dropped_total",
        "counter",
        "Backlogged shared deliveries dropped, by cause.",
    );
    for (cause, n) in [
        ("backlog_full", s.shares_dropped_backlog_full),
        ("no_member_left", s.shares_dropped_no_member_left),
        ("expired", s.shares_dropped_expired),
        // Never: a backlog is held in memory, and one nobody may read
        // waits rather than being dropped.
        ("storage_full", 0),
        ("member_ended", s.shares_dropped_member_ended),
        ("not_authorized", 0),
    ] {
        out.sample("saguin_shares_dropped_total", &[("cause", cause)], n);
    }
}

fn queues(out: &mut Exposition, channels: &[ChannelObservation]) {
    type Row = (
        &'static str,
        &'static str,
        &'static str,
        fn(&QueueCounts) -> u64,
    );
    type Gauge = (&'static str, &'static str, fn(&QueueObservation) -> u64);
    let gauges: [Gauge; 2] = [
        ("saguin_queue_depth", "Unresolved work.", |q| q.depth),
        (
            "saguin_queue_inflight",
            "Work out with a worker now.",
            |q| q.inflight,
        ),
    ];
    for (name, help, value) in gauges {
        out.family(name, "gauge", help);
        for c in channels {
            if let Some(q) = &c.queue {
                out.sample(name, &[("channel", c.name.as_str())], value(q));
            }
        }
    }
    let counters: [Row; 7] = [
        (
            "saguin_queue_delivered_total",
            "counter",
            "Jobs handed to a worker, once per hand-over.",
            |q| q.delivered,
        ),
        (
            "saguin_queue_acknowledged_total",
            "counter",
            "Jobs a worker acknowledged.",
            |q| q.acknowledged,
        ),
        (
            "saguin_queue_returned_total",
            "counter",
            "Jobs handed back by a worker.",
            |q| q.returned,
        ),
        (
            "saguin_queue_redelivered_total",
            "counter",
            "Jobs taken back from a worker that did not answer in its lease or left.",
            |q| q.redelivered,
        ),
        (
            "saguin_queue_dead_lettered_total",
            "counter",
            "Jobs moved to the dead-letter channel.",
            |q| q.dead_lettered,
        ),
        (
            "saguin_queue_expired_total",
            "counter",
            "Jobs that aged out unresolved.",
            |q| q.expired,
        ),
        (
            "saguin_queue_retain_ignored_total",
            "counter",
            "Retained publishes taken as ordinary work, the flag dropped.",
            |q| q.retain_ignored,
        ),
    ];
    for (name, kind, help, value) in counters {
        out.family(name, kind, help);
        for c in channels {
            if let Some(q) = &c.queue {
                out.sample(name, &[("channel", c.name.as_str())], value(&q.counted));
            }
        }
    }
}

fn bridges(out: &mut Exposition, bridges: &[BridgeObservation]) {
    out.family(
        "saguin_bridge_info",
        "gauge",
        "Always 1; the bridge's peer.",
    );
    for b in bridges {
        let labels = [("bridge", b.name.as_str()), ("peer", b.peer.as_str())];
        out.sample("saguin_bridge_info", &labels, 1u64);
    }
    type Row = (
        &'static str,
        &'static str,
        &'static str,
        fn(&BridgeObservation) -> u64,
    );
    let rows: [Row; 7] = [
        (
            "saguin_bridge_connected",
            "gauge",
            "1 while the link to the peer is up.",
            |b| u64::from(b.connected),
        ),
        // This edition never halts a bridge: it redials whatever ended the link.
        (
            "saguin_bridge_stopped",
            "gauge",
            "1 when the bridge halted itself; never, here.",
            |_| 0,
        ),
        (
            "saguin_bridge_sent_total",
            "counter",
            "Records forwarded to the peer.",
            |b| b.stats.sent,
        ),
        (
            "saguin_bridge_loops_skipped_total",
            "counter",
            "Records not forwarded because they arrived over a bridge.",
            |b| b.stats.loops_skipped,
        ),
        (
            "saguin_bridge_received_total",
            "counter",
            "Records that arrived from the peer.",
            |b| b.stats.received,
        ),
        (
            "saguin_bridge_reconnects_total",
            "counter",
            "Times the link to the peer was dialled again.",
            |b| b.stats.reconnects,
        ),
        (
            "saguin_bridge_unsent_total",
            "counter",
            "Records an outbound rule did not send the peer, by cause.",
            |_| 0,
        ),
    ];
    for (name, kind, help, value) in rows {
        out.family(name, kind, help);
        if name == "saguin_bridge_unsent_total" {
            for b in bridges {
                let s = &b.stats;
                for (cause, n) in [
                    ("peer_refused", s.unsent_peer_refused),
                    ("broadcast_refused", s.unsent_live_down),
                    ("unmappable", s.unsent_unmappable),
                    ("live_queue_full", s.unsent_live_queue_full),
                    ("superseded", s.unsent_superseded),
                ] {
                    out.sample(name, &[("bridge", b.name.as_str()), ("cause", cause)], n);
                }
            }
            continue;
        }
        for b in bridges {
            out.sample(name, &[("bridge", b.name.as_str())], value(b));
        }
    }
    let name = "saguin_bridge_unstored_total";
    out.family(
        name,
        "counter",
        "Records from the peer the bridge did not store, by cause.",
    );
    for b in bridges {
        let s = &b.stats;
        for (cause, n) in [
            ("no_rule", s.unstored_no_rule),
            ("unmappable", s.unstored_unmappable),
            ("never_accepted", s.unstored_never_accepted),
            ("queue_full", s.unstored_queue_full),
        ] {
            out.sample(name, &[("bridge", b.name.as_str()), ("cause", cause)], n);
        }
    }
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
    out.family(
        "saguin_channel_bytes",
        "gauge",
        "Record bytes an append or queue channel holds, as its provider counts them.",
    );
    // A latest channel has none: measuring a replacement would mean
    // reading the value it replaces.
    for c in list.iter().filter(|c| c.kind != "latest") {
        let Some(Some(held)) = figures.channel_bytes.get(c.provider) else {
            continue;
        };
        let bytes = held
            .iter()
            .find(|(name, _)| *name == c.name)
            .map_or(0, |(_, b)| *b);
        out.sample(
            "saguin_channel_bytes",
            &[("channel", c.name.as_str())],
            bytes,
        );
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
            "saguin_channel_partitioned_consumers",
            "gauge",
            "Subscribers that declared a partition slice on the channel.",
            every,
            |c| Some(c.partitioned_consumers),
        ),
        (
            "saguin_latest_superseded_total",
            "counter",
            "Values a latest subscriber was not sent because a newer one took their place.",
            every,
            |c| c.latest_superseded,
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
            ("commit", s.closed_by_commit),
            ("unbatched", s.unbatched),
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
        "saguin_journal_damaged_total",
        "counter",
        "Journals found at a start with a damaged frame that later frames follow: acknowledged batches lost to the device, not to a crash.",
    );
    out.sample(
        "saguin_journal_damaged_total",
        &[],
        crate::store::damaged_journals_total(),
    );
    out.family(
        "saguin_storage_damaged_files_total",
        "counter",
        "redb files found at a start damaged beyond repair and moved aside; their providers take no writes until restored or restarted empty.",
    );
    out.sample(
        "saguin_storage_damaged_files_total",
        &[],
        crate::store::damaged_files_total(),
    );
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

/// What each provider wrote to its device, and the forecast it gives: a
/// figure `/proc` or the configuration does not give has no series.
fn wear(out: &mut Exposition, providers: &[Provider], wear: &[super::wear::Wear]) {
    type Row = (
        &'static str,
        &'static str,
        &'static str,
        fn(&super::wear::Wear) -> Option<f64>,
    );
    let rows: [Row; 4] = [
        (
            "saguin_provider_written_bytes_total",
            "counter",
            "Bytes the provider's storage thread has had written to the device since start (its write_bytes in /proc); 0 on a file system in memory.",
            |w| w.written_bytes.map(|b| b as f64),
        ),
        (
            "saguin_provider_written_bytes_per_day",
            "gauge",
            "Bytes written a day, over the last day, or since start on a broker up less than a day.",
            |w| w.bytes_per_day,
        ),
        (
            "saguin_provider_device_endurance_bytes",
            "gauge",
            "The provider's device_endurance: what its device is rated to be written before it wears out.",
            |w| w.endurance_bytes.map(|b| b as f64),
        ),
        (
            "saguin_provider_device_life_years",
            "gauge",
            "Years the device's endurance lasts at the written bytes a day; what it was written before this start is not counted.",
            |w| w.life_years,
        ),
    ];
    for (name, kind, help, value) in rows {
        out.family(name, kind, help);
        for (p, w) in providers.iter().zip(wear) {
            if let Some(v) = value(w) {
                out.sample(name, &[("provider", p.name.as_str())], v);
            }
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
            latest_superseded: (kind == "latest").then_some(0),
            partitioned_consumers: 0,
        }
    }

    fn rendered(observation: &Observation) -> String {
        render(&Figures {
            broker_id: "edge \"1\"",
            uptime_s: 1.5,
            observation,
            bridges: &[],
            channel_bytes: &[],
            providers: &[],
            process: Process::default(),
            doors: &[],
            wear: &[],
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
    fn damaged_journals_are_counted_in_the_catalogue() {
        let before = crate::store::damaged_journals_total();
        let text = rendered(&Observation::default());
        assert!(text.contains("# TYPE saguin_journal_damaged_total counter\n"));
        let value: u64 = text
            .lines()
            .find_map(|l| l.strip_prefix("saguin_journal_damaged_total "))
            .expect("a sample")
            .parse()
            .expect("a count");
        assert!(value >= before, "{value} < {before}");
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
