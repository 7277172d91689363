//! What `--check-config` says of each bridge rule: the channels its
//! records land in here, read off the same claims table the broker routes
//! by, so an operator checks where a rule's records go without a second
//! routing table to keep in step.

use crate::bridge::{Direction, Rule};
use crate::config::{ChannelKind, Config};

use super::route::{kind_name, Router};

/// One line per bridge rule (a braced filter's spellings each their own),
/// in the order written: `bridge "up", in "a/#": lands in events (append)`.
pub fn bridge_rules(config: &Config) -> Vec<String> {
    let router = Router::new(config);
    let mut lines = Vec::new();
    for bridge in &config.bridges {
        for rule in &bridge.rules {
            let direction = match rule.direction {
                Direction::In => "in",
                Direction::Out => "out",
                Direction::Both => "both",
            };
            lines.push(format!(
                "  bridge {:?}, {direction} {:?}: {}",
                bridge.name,
                rule.filter,
                landing(&router, rule)
            ));
        }
    }
    lines
}

/// Where the rule's records are here: for an `in` rule, what its topic
/// template can produce; otherwise its filter. A queue is crossed by a
/// rule that reads (it is never served to a subscription), and is where
/// an `in` rule's records become jobs.
fn landing(router: &Router<'_>, rule: &Rule) -> String {
    let subject = match (rule.direction, &rule.topic) {
        (Direction::In, Some(template)) => template_as_filter(template),
        _ => rule.filter.clone(),
    };
    let rows = match router.route(&subject) {
        Ok(rows) => rows,
        Err(why) => return format!("lands nowhere: {why}"),
    };
    let mut lands = Vec::new();
    let mut crosses = Vec::new();
    for row in &rows {
        let Some(channel) = router.channel(row) else {
            lands.push("broadcast".to_string());
            continue;
        };
        let named = format!("{} ({})", channel.name, kind_name(&channel.kind));
        match channel.kind {
            ChannelKind::Queue(_) if rule.direction != Direction::In => crosses.push(named),
            _ => lands.push(named),
        }
    }
    let mut text = format!("lands in {}", lands.join(", "));
    if lands.is_empty() {
        text = "lands in nothing".to_string();
    }
    if !crosses.is_empty() {
        text += &format!("; crosses {}, never served", crosses.join(", "));
    }
    text
}

/// The topics a template can produce, as a filter: each `$N` one level,
/// `$#` any tail.
fn template_as_filter(template: &str) -> String {
    template
        .split('/')
        .map(|level| match level {
            "$#" => "#",
            _ if level.starts_with('$') => "+",
            _ => level,
        })
        .collect::<Vec<_>>()
        .join("/")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse;

    #[test]
    fn each_rule_says_where_its_records_land() {
        let text = "broker:\n  id: e\n  storage:\n    default: m\n    default_retention_period: none\n    default_retention_bytes: none\n    providers:\n      m:\n        type: memory\n        max_bytes: 64MiB\n        snapshot_dir: none\nchannels:\n  readings:\n    type: append\n    filter: readings/#\n  alerts:\n    type: latest\n    filter: alerts/#\n  jobs:\n    type: queue\n    filter: iot/jobs/#\n  events:\n    type: append\n    filter: iot/events/#\nbridges:\n  head-office:\n    peer: tcp://h:1\n    client_id: c\n    topics:\n      - filter: fleet/+/telemetry/#\n        topic: readings/telemetry/$1/$#\n        direction: in\n      - filter: alerts/#\n        direction: both\n      - filter: \"iot/{jobs,events}/#\"\n        direction: out\n        topic: up/$#\n      - filter: work/#\n        topic: iot/jobs/$#\n        direction: in\n      - filter: misc/#\n        direction: both\n";
        let config = parse(text, "saguin.yaml").unwrap();
        assert_eq!(
            bridge_rules(&config),
            [
                "  bridge \"head-office\", in \"fleet/+/telemetry/#\": lands in readings (append)",
                "  bridge \"head-office\", both \"alerts/#\": lands in alerts (latest)",
                "  bridge \"head-office\", out \"iot/jobs/#\": lands in jobs__dlq (append); crosses jobs (queue), never served",
                "  bridge \"head-office\", out \"iot/events/#\": lands in events (append)",
                "  bridge \"head-office\", in \"work/#\": lands in jobs (queue), jobs__dlq (append)",
                "  bridge \"head-office\", both \"misc/#\": lands in broadcast",
            ]
        );
    }
}
