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
                        "{{\"reader\":{},\"offset\":{},\"behind\":{}}}",
                        string(&format!("mqtt:{}", row.client_id)),
                        row.offset,
                        c.next_offset.saturating_sub(row.offset)
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

/// `/v1/operations/sessions`: held sessions first.
pub fn sessions(view: &SessionsView) -> String {
    let rows: Vec<String> = view
        .rows
        .iter()
        .map(|row| {
            let optional = |value: Option<String>| value.unwrap_or_else(|| "null".to_string());
            format!(
                "{{\"client_id\":{},\"connected\":{},\"protocol\":{},\"keepalive\":{},\"expires_after\":{},\"subscriptions\":{},\"remote\":{}}}",
                string(&row.client_id),
                row.connected,
                optional(row.protocol.map(|p| if p == 5 { "5".into() } else { "\"3.1.1\"".into() })),
                optional(row.keepalive_s.map(|k| k.to_string())),
                row.expiry_interval_s,
                row.subscriptions,
                optional(row.remote.as_deref().map(string))
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
                "{{\"offset\":{},\"attempts\":{},\"state\":\"{}\"{lease},\"first_seen\":{},\"last_seen\":{}}}",
                job.offset,
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
                client_id: "north-17".into(),
                offset: 12,
            }],
        }]);
        assert_eq!(
            body,
            "{\"channels\":[{\"channel\":\"events\",\"next_offset\":75,\"consumers\":312,\"returned\":1,\"positions\":[{\"reader\":\"mqtt:north-17\",\"offset\":12,\"behind\":63}]}]}"
        );
    }

    #[test]
    fn sessions_count_what_they_leave_out() {
        let body = sessions(&SessionsView {
            total: 3,
            connected: 2,
            rows: vec![SessionRow {
                client_id: "a\"b".into(),
                connected: false,
                protocol: None,
                keepalive_s: None,
                expiry_interval_s: 60,
                subscriptions: 1,
                remote: Some("192.0.2.7:40000".into()),
            }],
        });
        assert!(body.contains("\"client_id\":\"a\\\"b\""), "{body}");
        assert!(body.contains("\"remote\":\"192.0.2.7:40000\"}"), "{body}");
        assert!(body.ends_with("\"total\":3,\"connected\":2,\"offline\":1,\"returned\":1}"));
    }
}
