//! `saguin inspect FILE [--json]`: what a stopped broker's provider holds -
//! a redb file or a memory provider's snapshot directory - read without
//! changing it.
//!
//! Per channel: its records' count and bytes, floor and next, the oldest
//! and newest receipt times, its consumers' stored positions, and what its
//! keyed entries are: a queue job's attempt count, a session record, a
//! retained value, an exactly-once publish held unreleased.

use std::collections::BTreeMap;

use crate::core::queue::parse_attempts;
use crate::core::session::record::SessionRecord;
use crate::core::{is_hold_key, RETAINED_SPACE, SESSIONS_SPACE};
use crate::store::{ChannelSummary, StoreError, StoredProvider};

use super::json::{opt_number, string, utc};

/// A session record as inspect shows it.
#[derive(Debug, PartialEq, Eq)]
pub struct SessionRow {
    pub client_id: String,
    pub expiry_interval_s: u32,
    pub disconnected_unix_ms: Option<u64>,
    pub subscriptions: Vec<String>,
    pub will: bool,
}

/// A channel's keyed entries, sorted by what they are.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Entries {
    /// A queue job's offset and the attempts counted against it.
    pub jobs: Vec<(u64, u32)>,
    pub sessions: Vec<SessionRow>,
    /// Retained values, by topic.
    pub retained: Vec<String>,
    /// Exactly-once publishes held unreleased.
    pub held_qos2: usize,
    /// Entries of no kind inspect knows, and records that failed to decode.
    pub other: Vec<String>,
}

fn classify(channel: &str, entries: &BTreeMap<String, Vec<u8>>) -> Entries {
    let mut out = Entries::default();
    for (key, value) in entries {
        if channel == SESSIONS_SPACE {
            match SessionRecord::from_bytes(value) {
                Ok(record) => out.sessions.push(SessionRow {
                    client_id: key.clone(),
                    expiry_interval_s: record.expiry_interval_s,
                    disconnected_unix_ms: record.disconnected_unix_ms,
                    subscriptions: record.subscriptions.into_iter().map(|s| s.filter).collect(),
                    will: record.will.is_some(),
                }),
                Err(e) => out
                    .other
                    .push(format!("session {key:?} does not decode: {}", e.0)),
            }
        } else if channel == RETAINED_SPACE {
            out.retained.push(key.clone());
        } else if is_hold_key(key) {
            out.held_qos2 += 1;
        } else if let Some(job) = parse_attempts(key, value) {
            out.jobs.push(job);
        } else {
            out.other
                .push(format!("{} ({} bytes)", key.escape_debug(), value.len()));
        }
    }
    out
}

/// Everything inspect reads: the provider's description and each channel.
pub struct Report {
    pub path: String,
    pub kind: &'static str,
    pub described: String,
    pub notes: Vec<String>,
    pub channels: Vec<(ChannelSummary, Entries)>,
}

/// Reads every channel of the provider at `path`.
pub fn read(path: &std::path::Path) -> Result<Report, StoreError> {
    let stored = StoredProvider::open(path)?;
    let mut channels = Vec::new();
    for key in stored.channel_keys() {
        let summary = stored.summary(&key)?;
        let entries = classify(&summary.name, &summary.entries);
        channels.push((summary, entries));
    }
    channels.sort_by(|a, b| a.0.name.cmp(&b.0.name));
    Ok(Report {
        path: path.display().to_string(),
        kind: stored.kind().name(),
        described: stored.described.clone(),
        notes: stored.notes.clone(),
        channels,
    })
}

fn time(ms: Option<u64>) -> String {
    ms.map_or_else(|| "-".to_string(), utc)
}

/// The report for a person.
pub fn text(report: &Report) -> String {
    let mut out = format!("{}: {}\n", report.path, report.described);
    for note in &report.notes {
        out.push_str(&format!("note: {note}\n"));
    }
    for (c, entries) in &report.channels {
        let s = c.state;
        out.push_str(&format!(
            "\nchannel {}\n  records    {} ({} bytes), floor {}, next {}\n  received   oldest {}, newest {}\n",
            c.name,
            s.record_count,
            s.record_bytes,
            s.floor,
            s.next,
            time(c.oldest_received_at_ms),
            time(c.newest_received_at_ms),
        ));
        out.push_str(&format!("  positions  {}\n", c.positions.len()));
        for (reader, offset) in &c.positions {
            out.push_str(&format!("    {reader} at {offset}\n"));
        }
        if !entries.jobs.is_empty() {
            out.push_str(&format!("  jobs with attempts  {}\n", entries.jobs.len()));
            for (offset, attempts) in &entries.jobs {
                out.push_str(&format!("    job {offset}: {attempts} attempts\n"));
            }
        }
        if !entries.sessions.is_empty() {
            out.push_str(&format!("  sessions   {}\n", entries.sessions.len()));
            for session in &entries.sessions {
                let state = session.disconnected_unix_ms.map_or_else(
                    || "connected at the stop".to_string(),
                    |ms| format!("disconnected {}", utc(ms)),
                );
                out.push_str(&format!(
                    "    {}: {state}, expiry {} s, {} subscriptions [{}]{}\n",
                    session.client_id,
                    session.expiry_interval_s,
                    session.subscriptions.len(),
                    session.subscriptions.join(", "),
                    if session.will { ", a Will" } else { "" }
                ));
            }
        }
        if !entries.retained.is_empty() {
            out.push_str(&format!(
                "  retained   {}: {}\n",
                entries.retained.len(),
                entries.retained.join(", ")
            ));
        }
        if entries.held_qos2 > 0 {
            out.push_str(&format!("  held QoS 2 publishes  {}\n", entries.held_qos2));
        }
        for other in &entries.other {
            out.push_str(&format!("  entry      {other}\n"));
        }
    }
    if report.channels.is_empty() {
        out.push_str("no channels\n");
    }
    out
}

/// The report as one JSON object.
pub fn json(report: &Report) -> String {
    let channels: Vec<String> = report
        .channels
        .iter()
        .map(|(c, e)| {
            let s = c.state;
            let positions: Vec<String> = c
                .positions
                .iter()
                .map(|(reader, offset)| format!("{{\"reader\":{},\"offset\":{offset}}}", string(reader)))
                .collect();
            let jobs: Vec<String> = e
                .jobs
                .iter()
                .map(|(offset, attempts)| format!("{{\"offset\":{offset},\"attempts\":{attempts}}}"))
                .collect();
            let sessions: Vec<String> = e
                .sessions
                .iter()
                .map(|session| {
                    let subscriptions: Vec<String> = session.subscriptions.iter().map(|f| string(f)).collect();
                    format!(
                        "{{\"client_id\":{},\"expiry_interval_s\":{},\"disconnected_unix_ms\":{},\"subscriptions\":[{}],\"will\":{}}}",
                        string(&session.client_id),
                        session.expiry_interval_s,
                        opt_number(session.disconnected_unix_ms),
                        subscriptions.join(","),
                        session.will
                    )
                })
                .collect();
            let retained: Vec<String> = e.retained.iter().map(|t| string(t)).collect();
            let other: Vec<String> = e.other.iter().map(|t| string(t)).collect();
            format!(
                "{{\"name\":{},\"record_count\":{},\"record_bytes\":{},\"floor\":{},\"next\":{},\"oldest_received_unix_ms\":{},\"newest_received_unix_ms\":{},\"positions\":[{}],\"jobs\":[{}],\"sessions\":[{}],\"retained\":[{}],\"held_qos2\":{},\"other_entries\":[{}]}}",
                string(&c.name),
                s.record_count,
                s.record_bytes,
                s.floor,
                s.next,
                opt_number(c.oldest_received_at_ms),
                opt_number(c.newest_received_at_ms),
                positions.join(","),
                jobs.join(","),
                sessions.join(","),
                retained.join(","),
                e.held_qos2,
                other.join(",")
            )
        })
        .collect();
    let notes: Vec<String> = report.notes.iter().map(|n| string(n)).collect();
    format!(
        "{{\"path\":{},\"kind\":{},\"described\":{},\"notes\":[{}],\"channels\":[{}]}}",
        string(&report.path),
        string(report.kind),
        string(&report.described),
        notes.join(","),
        channels.join(",")
    )
}
