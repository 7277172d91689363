//! The `/v1/operations` bodies. Every key is a field name this broker
//! chose and every client-chosen string is a value; every list is capped
//! at [`super::route::MAX_ROWS`] and says how many rows exist beside how
//! many it carries.

use super::json::{string, timestamp};
use crate::core::observe::{ChannelConsumers, LossesView, QueueView, RefusedView, SessionsView};

/// `/v1/operations/consumers`: per channel, the furthest behind first.
pub fn consumers(channels: &[ChannelConsumers]) -> String {
    let channels: Vec<String> = channels
        .iter()
        .map(|c| {
            let positions: Vec<String> = c
                .rows
                .iter()
                .map(|row| {
                    format!(
                        "{{\"reader\":{},\"offset\":{},\"behind\":{},\"last_seen\":{}}}",
                        string(&row.reader),
                        row.offset,
                        c.next_offset.saturating_sub(row.offset),
                        timestamp(row.last_seen_unix_ms)
                    )
                })
                .collect();
            format!(
                "{{\"channel\":{},\"next_offset\":{},\"consumers\":{},\"returned\":{},\"positions\":[{}]}}",
                string(&c.channel),
                c.next_offset,
                c.consumers,
                c.rows.len(),
                positions.join(",")
            )
        })
        .collect();
    format!("{{\"channels\":[{}]}}", channels.join(","))
}

/// `/v1/operations/sessions`: held sessions first. `doors` names the MQTT
/// doors in order, for each row's `listener`; a bridge's own session came
/// through none, and says `bridge` instead.
pub fn sessions(view: &SessionsView, doors: &[(String, &'static str)]) -> String {
    let rows: Vec<String> = view
        .rows
        .iter()
        .map(|row| {
            let optional = |value: Option<String>| value.unwrap_or_else(|| "null".to_string());
            let listener = row
                .door
                .and_then(|door| doors.get(door))
                .map(|(name, _)| string(name));
            let partitions = if row.partitions.is_empty() {
                String::new()
            } else {
                let slices: Vec<String> = row
                    .partitions
                    .iter()
                    .map(|p| {
                        let indices: Vec<String> = p.indices.iter().map(u32::to_string).collect();
                        format!(
                            "{{\"filter\":{},\"count\":{},\"indices\":[{}]}}",
                            string(&p.filter),
                            p.count,
                            indices.join(",")
                        )
                    })
                    .collect();
                format!(",\"partitions\":[{}]", slices.join(","))
            };
            format!(
                "{{\"client_id\":{},\"connected\":{},\"user\":{},\"protocol\":{},\"listener\":{},\"remote\":{},\"bridge\":{},\"keepalive\":{},\"expires_after\":{},\"clean_start\":{},\"subscriptions\":{}{partitions}}}",
                string(&row.client_id),
                row.connected,
                optional(row.user.as_deref().map(string)),
                optional(row.protocol.map(|p| if p == 5 { "5".into() } else { "\"3.1.1\"".into() })),
                optional(listener),
                optional(row.remote.as_deref().map(string)),
                row.bridge,
                optional(row.keepalive_s.map(|k| k.to_string())),
                row.expiry_interval_s,
                optional(row.clean_start.map(|c| c.to_string())),
                row.subscriptions
            )
        })
        .collect();
    format!(
        "{{\"sessions\":[{}],\"total\":{},\"connected\":{},\"offline\":{},\"returned\":{}}}",
        rows.join(","),
        view.total,
        view.connected,
        view.total - view.connected,
        view.rows.len()
    )
}

/// `/v1/operations/position-lost`: who lost most first.
pub fn position_lost(view: &LossesView) -> String {
    let rows: Vec<String> = view
        .rows
        .iter()
        .map(|l| {
            format!(
                "{{\"reader\":{},\"channel\":{},\"kind\":\"{}\",\"reported\":{},\"count\":{},\"records_missed\":{},\"last_position\":{},\"last_floor\":{},\"last_seen\":{}}}",
                string(&l.reader),
                string(&l.channel),
                l.kind.as_str(),
                l.reported,
                l.count,
                l.records_missed,
                l.last_position,
                l.last_floor,
                timestamp(Some(l.last_seen_unix_ms))
            )
        })
        .collect();
    format!(
        "{{\"readers\":[{}],\"returned\":{},\"tracked\":{},\"beyond\":{}}}",
        rows.join(","),
        view.rows.len(),
        view.tracked,
        view.beyond
    )
}

/// `/v1/operations/refused`: the clients refused most first.
pub fn refused(view: &RefusedView) -> String {
    let rows: Vec<String> = view
        .rows
        .iter()
        .map(|r| {
            format!(
                "{{\"client_id\":{},\"user\":{},\"reason\":{},\"count\":{},\"last_seen\":{}}}",
                string(&r.client_id),
                r.user.as_deref().map_or_else(|| "null".to_string(), string),
                string(r.reason),
                r.count,
                timestamp(Some(r.last_seen_unix_ms))
            )
        })
        .collect();
    format!(
        "{{\"clients\":[{}],\"returned\":{},\"tracked\":{},\"beyond\":{}}}",
        rows.join(","),
        view.rows.len(),
        view.tracked,
        view.beyond
    )
}

/// `/v1/operations/users`: who may connect, broker-wide and through each
/// MQTT door; each list of names sorted and capped, with its count.
pub fn users(
    authentication: &crate::auth::Authentication,
    doors: &[(String, &'static str)],
    max_rows: usize,
) -> String {
    let names = |mut users: Vec<&str>| {
        users.sort_unstable();
        users.dedup();
        let total = users.len();
        let listed: Vec<String> = users.into_iter().take(max_rows).map(string).collect();
        format!("\"users\":[{}],\"users_total\":{total}", listed.join(","))
    };
    let rules = authentication.rules();
    let listeners: Vec<String> = doors
        .iter()
        .enumerate()
        .map(|(index, (name, certificate))| {
            let users = authentication
                .door_file(index)
                .map_or_else(Vec::new, |file| file.users().collect());
            // A door without a rule admits everybody.
            let anonymous = rules.get(index).is_none_or(|r| r.allow_anonymous);
            format!(
                "{}:{{{},\"anonymous_allowed\":{anonymous},\"certificate\":\"{certificate}\"}}",
                string(name),
                names(users)
            )
        })
        .collect();
    let everyone: Vec<&str> = authentication
        .files()
        .iter()
        .flat_map(|f| f.users())
        .collect();
    let anonymous = rules.is_empty() || rules.iter().any(|r| r.allow_anonymous);
    format!(
        "{{{},\"anonymous_allowed\":{anonymous},\"listeners\":{{{}}}}}",
        names(everyone),
        listeners.join(",")
    )
}

/// `/v1/operations/queues/<channel>`: the oldest unresolved work first.
/// `holder` and `lease_until` appear only on a leased job.
pub fn queue(channel: &str, view: &QueueView) -> String {
    let rows: Vec<String> = view
        .rows
        .iter()
        .map(|job| {
            let lease = match (&job.holder, job.state) {
                (Some(holder), "leased") => format!(
                    ",\"holder\":{},\"lease_until\":{}",
                    string(holder),
                    timestamp(job.lease_until_unix_ms)
                ),
                _ => String::new(),
            };
            format!(
                "{{\"offset\":{},\"topic\":{},\"attempts\":{},\"state\":\"{}\"{lease},\"first_seen\":{},\"last_seen\":{}}}",
                job.offset,
                job.topic.as_deref().map_or_else(|| "null".to_string(), string),
                job.attempts,
                job.state,
                timestamp(job.first_seen_unix_ms),
                timestamp(job.last_seen_unix_ms)
            )
        })
        .collect();
    format!(
        "{{\"channel\":{},\"unresolved\":{},\"returned\":{},\"records\":[{}]}}",
        string(channel),
        view.unresolved,
        view.rows.len(),
        rows.join(",")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::observe::{ConsumerRow, SessionRow};

    #[test]
    fn consumers_carry_how_far_behind_each_is() {
        let body = consumers(&[ChannelConsumers {
            channel: "events".into(),
            next_offset: 75,
            consumers: 312,
            rows: vec![ConsumerRow {
                reader: "mqtt:north-17".into(),
                offset: 12,
                last_seen_unix_ms: Some(1_787_934_447_000),
            }],
        }]);
        assert_eq!(
            body,
            "{\"channels\":[{\"channel\":\"events\",\"next_offset\":75,\"consumers\":312,\"returned\":1,\"positions\":[{\"reader\":\"mqtt:north-17\",\"offset\":12,\"behind\":63,\"last_seen\":\"2026-08-28T16:27:27Z\"}]}]}"
        );
    }

    #[test]
    fn sessions_count_what_they_leave_out() {
        let body = sessions(
            &SessionsView {
                total: 3,
                connected: 2,
                rows: vec![SessionRow {
                    client_id: "a\"b".into(),
                    expiry_interval_s: 60,
                    subscriptions: 1,
                    remote: Some("192.0.2.7:40000".into()),
                    ..SessionRow::default()
                }],
            },
            &[],
        );
        assert!(body.contains("\"client_id\":\"a\\\"b\""), "{body}");
        // Away, nothing its connection said is known, and no slice is
        // declared: no partitions at all.
        assert!(body.contains("\"user\":null,\"protocol\":null,\"listener\":null,\"remote\":\"192.0.2.7:40000\",\"bridge\":false,\"keepalive\":null,\"expires_after\":60,\"clean_start\":null,\"subscriptions\":1}"), "{body}");
        assert!(body.ends_with("\"total\":3,\"connected\":2,\"offline\":1,\"returned\":1}"));
    }

    #[test]
    fn a_connected_session_names_its_user_door_and_slices() {
        let body = sessions(
            &SessionsView {
                total: 1,
                connected: 1,
                rows: vec![SessionRow {
                    client_id: "north-17".into(),
                    connected: true,
                    protocol: Some(5),
                    keepalive_s: Some(60),
                    expiry_interval_s: 3600,
                    subscriptions: 2,
                    remote: None,
                    user: Some("cohort-north".into()),
                    door: Some(1),
                    bridge: false,
                    clean_start: Some(false),
                    partitions: vec![crate::core::observe::PartitionRow {
                        filter: "iot/+/events/+".into(),
                        count: 3,
                        indices: vec![0, 2],
                    }],
                }],
            },
            &[("plant".into(), "none"), ("local".into(), "none")],
        );
        assert!(body.contains("{\"client_id\":\"north-17\",\"connected\":true,\"user\":\"cohort-north\",\"protocol\":5,\"listener\":\"local\",\"remote\":null,\"bridge\":false,\"keepalive\":60,\"expires_after\":3600,\"clean_start\":false,\"subscriptions\":2,\"partitions\":[{\"filter\":\"iot/+/events/+\",\"count\":3,\"indices\":[0,2]}]}"), "{body}");
    }
}
