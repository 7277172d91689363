//! `saguin --route CONFIG [TOPIC-OR-FILTER] [--json]`: where a topic lands,
//! or what a filter would be served, against a configuration, without
//! starting a broker or publishing anything.
//!
//! It asks the claims table the broker builds ([`Claims`]) over the same
//! expanded filters in the same order, so the answer cannot drift from
//! what a running broker does. With a subject on the command line it
//! answers in a paragraph per channel - provider, bounds, retention - and
//! ends with the routing table; with none it reads subjects from standard
//! input, one a line, and answers each in four tab-separated columns.

use std::io::{self, BufRead};

use crate::codec::topic::{is_valid_topic_filter, is_valid_topic_name};
use crate::config::{format_seconds, format_size, ChannelConfig, ChannelKind, Config, Start};
use crate::core::claims::Claims;
use crate::core::dead_letter::dead_letter_channel_name;
use crate::store::ProviderKind;

use super::json::{opt_number, opt_string, string};

/// One answer: a channel a subject reaches, or broadcast.
#[derive(Debug, PartialEq, Eq)]
pub struct Row {
    pub subject: String,
    /// The channel's index in the configuration; `None` for broadcast.
    pub channel: Option<usize>,
    /// For a topic, the filter that claimed it; for a filter, what a
    /// subscriber is served from that channel.
    pub why: Option<String>,
}

/// Routes subjects against one configuration's channels.
pub struct Router<'c> {
    config: &'c Config,
    claims: Claims,
}

/// The channel type as the reference's columns spell it.
pub(super) fn kind_name(kind: &ChannelKind) -> &'static str {
    match kind {
        ChannelKind::Append => "append",
        ChannelKind::Latest { .. } => "latest",
        ChannelKind::Queue(_) => "queue",
    }
}

/// What a subscriber with a wildcard filter is served from a channel.
fn served(channel: &ChannelConfig) -> &'static str {
    match (channel.kind, channel.start) {
        (ChannelKind::Append, Start::Floor) => "replayed",
        (ChannelKind::Append, Start::Tail) => "from now on",
        (ChannelKind::Latest { .. }, _) => "current",
        // Jobs go to workers on `$saguin/queue/<name>`, never to a filter.
        (ChannelKind::Queue(_), _) => "excluded",
    }
}

fn is_filter(subject: &str) -> bool {
    subject.split('/').any(|level| level == "+" || level == "#")
}

impl<'c> Router<'c> {
    pub fn new(config: &'c Config) -> Router<'c> {
        let list: Vec<(&str, &[String])> = config
            .channels
            .iter()
            .map(|c| (c.name.as_str(), c.filters.as_slice()))
            .collect();
        Router {
            config,
            claims: Claims::new(&list),
        }
    }

    /// Every channel `subject` reaches, or why it is not a topic or filter.
    pub fn route(&self, subject: &str) -> Result<Vec<Row>, String> {
        let row = |channel: Option<usize>, why: Option<String>| Row {
            subject: subject.to_string(),
            channel,
            why,
        };
        if is_filter(subject) {
            if !is_valid_topic_filter(subject) {
                return Err(format!("{subject:?} is not a valid MQTT topic filter: a + or # must be a whole level, and # the last"));
            }
            let reach = self.claims.reach(subject);
            let mut rows: Vec<Row> = reach
                .channels
                .iter()
                .map(|&c| row(Some(c), Some(served(&self.config.channels[c]).into())))
                .collect();
            if reach.broadcast {
                rows.push(row(None, Some("live only".into())));
            }
            return Ok(rows);
        }
        if !is_valid_topic_name(subject) {
            return Err(format!("{subject:?} is not a valid MQTT topic"));
        }
        Ok(vec![match self.claims.claim_for_topic(subject) {
            Some(claim) => row(
                Some(claim.channel),
                Some(self.claims.filter(claim).to_string()),
            ),
            None => row(None, None),
        }])
    }

    pub(super) fn channel(&self, row: &Row) -> Option<&ChannelConfig> {
        row.channel.map(|c| &self.config.channels[c])
    }

    /// The four columns: subject, channel, type, why.
    pub fn columns(&self, row: &Row) -> String {
        let channel = self.channel(row);
        format!(
            "{}\t{}\t{}\t{}",
            row.subject,
            channel.map_or("-", |c| c.name.as_str()),
            channel.map_or("broadcast", |c| kind_name(&c.kind)),
            row.why.as_deref().unwrap_or("-")
        )
    }

    /// The columns as one JSON object; a `-` is `null`.
    pub fn json_line(&self, row: &Row) -> String {
        let channel = self.channel(row);
        format!(
            "{{\"subject\":{},\"channel\":{},\"type\":{},\"why\":{}}}",
            string(&row.subject),
            opt_string(channel.map(|c| c.name.as_str())),
            string(channel.map_or("broadcast", |c| kind_name(&c.kind))),
            opt_string(row.why.as_deref())
        )
    }

    /// Where a channel's records are kept, as one phrase.
    fn provider_phrase(&self, channel: &ChannelConfig) -> String {
        let provider = self
            .config
            .broker
            .storage
            .as_ref()
            .and_then(|s| s.provider(&channel.storage));
        match provider {
            Some(p) => {
                let place = match &p.kind {
                    ProviderKind::Redb { file_path, .. } => {
                        format!("redb, {}", file_path.display())
                    }
                    ProviderKind::Memory {
                        snapshot_dir: Some(dir),
                    } => {
                        format!("memory, snapshot at a graceful stop to {}", dir.display())
                    }
                    ProviderKind::Memory { snapshot_dir: None } => {
                        "memory, nothing kept across a restart".to_string()
                    }
                };
                format!(
                    "{} ({place}; max_bytes {})",
                    p.name,
                    format_size(p.max_bytes)
                )
            }
            None => channel.storage.clone(),
        }
    }

    /// The paragraph a subject given on the command line is answered with.
    pub fn paragraph(&self, row: &Row) -> String {
        let Some(channel) = self.channel(row) else {
            let why = if is_filter(&row.subject) {
                "it also matches topics no channel claims: those are delivered live to connected subscribers"
            } else {
                "no channel's filter matches it: it is delivered live to connected subscribers and stored nowhere"
            };
            return format!(
                "{}\n  channel    - (broadcast)\n  why        {why}\n",
                row.subject
            );
        };
        let why = match &row.why {
            Some(served) if is_filter(&row.subject) => {
                format!(
                    "{served}: a subscriber is served this channel's records ({})",
                    match served.as_str() {
                        "replayed" => "from the floor, then as they arrive",
                        "from now on" =>
                            "from the moment it subscribes, as the channel's start: tail says",
                        "current" => "each topic's current value, then each new one",
                        _ => "none: a queue's jobs go only to workers on $saguin/queue/<name>",
                    }
                )
            }
            Some(filter) => format!("claimed by {filter}, the most exact filter that matches it"),
            None => "-".to_string(),
        };
        let bytes = |b: Option<u64>| b.map_or_else(|| "none".to_string(), format_size);
        let period = channel
            .retention_period_s
            .map_or_else(|| "none".to_string(), format_seconds);
        let mut out = format!(
            "{}\n  channel    {} ({})\n  why        {why}\n  provider   {}\n  bounds     max_bytes {}\n  retention  period {period}, bytes {}\n",
            row.subject,
            channel.name,
            kind_name(&channel.kind),
            self.provider_phrase(channel),
            bytes(channel.max_bytes),
            bytes(channel.retention_bytes),
        );
        if let ChannelKind::Latest {
            deletion_retention_period_s,
        } = channel.kind
        {
            let kept = deletion_retention_period_s.map_or_else(|| "none".into(), format_seconds);
            out.push_str(&format!("  deletions  kept {kept}\n"));
        }
        if let ChannelKind::Queue(q) = channel.kind {
            out.push_str(&format!(
                "  queue      visibility timeout {}, max_attempts {}, dead letters to {}\n",
                format_seconds(q.visibility_timeout_s),
                q.max_attempts,
                dead_letter_channel_name(&channel.name)
            ));
        }
        out
    }

    /// Every channel and what each filter expanded to.
    pub fn routing_table(&self) -> String {
        let mut out =
            String::from("# routing table: channel, type, provider, filter as expanded\n");
        if self.config.channels.is_empty() {
            out.push_str("# no channels: every topic is broadcast\n");
        }
        for channel in &self.config.channels {
            for filter in &channel.filters {
                out.push_str(&format!(
                    "{}\t{}\t{}\t{filter}\n",
                    channel.name,
                    kind_name(&channel.kind),
                    channel.storage
                ));
            }
        }
        out
    }

    /// One subject's rows as one JSON object, with the routing table.
    pub fn json_object(&self, subject: &str, rows: &[Row]) -> String {
        let answers: Vec<String> = rows
            .iter()
            .map(|row| {
                let channel = self.channel(row);
                format!(
                    "{{\"channel\":{},\"type\":{},\"why\":{},\"provider\":{},\"max_bytes\":{},\"retention_period_s\":{},\"retention_bytes\":{}}}",
                    opt_string(channel.map(|c| c.name.as_str())),
                    string(channel.map_or("broadcast", |c| kind_name(&c.kind))),
                    opt_string(row.why.as_deref()),
                    opt_string(channel.map(|c| c.storage.as_str())),
                    opt_number(channel.and_then(|c| c.max_bytes)),
                    opt_number(channel.and_then(|c| c.retention_period_s)),
                    opt_number(channel.and_then(|c| c.retention_bytes)),
                )
            })
            .collect();
        let table: Vec<String> = self
            .config
            .channels
            .iter()
            .map(|c| {
                let filters: Vec<String> = c.filters.iter().map(|f| string(f)).collect();
                format!(
                    "{{\"channel\":{},\"type\":{},\"provider\":{},\"filters\":[{}]}}",
                    string(&c.name),
                    string(kind_name(&c.kind)),
                    string(&c.storage),
                    filters.join(",")
                )
            })
            .collect();
        format!(
            "{{\"subject\":{},\"answers\":[{}],\"routing_table\":[{}]}}",
            string(subject),
            answers.join(","),
            table.join(",")
        )
    }
}

/// A line of standard input that asks nothing: blank, or a note. A lone
/// `#` is the widest filter there is, and is asked.
fn is_note(line: &str) -> bool {
    line.is_empty() || (line.starts_with('#') && line != "#")
}

/// Answers one subject given as an operand. Returns whether it was valid.
pub fn answer_one(
    router: &Router,
    subject: &str,
    json: bool,
    out: &mut impl io::Write,
) -> io::Result<bool> {
    let rows = match router.route(subject) {
        Ok(rows) => rows,
        Err(why) => {
            eprintln!("saguin --route: {why}");
            return Ok(false);
        }
    };
    if json {
        writeln!(out, "{}", router.json_object(subject, &rows))?;
        return Ok(true);
    }
    for row in &rows {
        write!(out, "{}", router.paragraph(row))?;
    }
    write!(out, "\n{}", router.routing_table())?;
    Ok(true)
}

/// Answers every line of `input`; returns how many were not valid.
pub fn answer_lines(
    router: &Router,
    input: impl BufRead,
    json: bool,
    out: &mut impl io::Write,
) -> io::Result<usize> {
    if !json {
        writeln!(out, "# topic-or-filter\tchannel\ttype\twhy")?;
    }
    let mut invalid = 0;
    for line in input.lines() {
        let line = line?;
        let subject = line.trim();
        if is_note(subject) {
            continue;
        }
        match router.route(subject) {
            Ok(rows) => {
                for row in &rows {
                    let text = if json {
                        router.json_line(row)
                    } else {
                        router.columns(row)
                    };
                    writeln!(out, "{text}")?;
                }
            }
            Err(why) => {
                eprintln!("saguin --route: {why}");
                invalid += 1;
            }
        }
    }
    out.flush()?;
    Ok(invalid)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG: &str = "broker:
  id: t
  storage:
    default: local
    default_retention_period: 7d
    default_retention_bytes: none
    providers:
      local: {type: memory, max_bytes: 64MiB, snapshot_dir: none}
channels:
  events: {type: append, filter: 'iot/+/events/+'}
  state: {type: latest, filter: 'iot/+/state/+'}
  jobs: {type: queue, filter: 'iot/+/jobs/+'}
  alarms: {type: append, filter: 'iot/hq/{alarms,faults}/#'}
";

    fn config() -> Config {
        crate::config::parse(CONFIG, "saguin.yaml").expect("valid")
    }

    fn lines(input: &str, json: bool) -> String {
        let config = config();
        let router = Router::new(&config);
        let mut out = Vec::new();
        answer_lines(&router, input.as_bytes(), json, &mut out).expect("write");
        String::from_utf8(out).expect("utf8")
    }

    #[test]
    fn a_topic_names_its_channel_and_the_filter_that_claimed_it() {
        let out = lines("iot/d/state/x\niot/d/health/x\n\n# a note\n", false);
        assert_eq!(
            out,
            "# topic-or-filter\tchannel\ttype\twhy\niot/d/state/x\tstate\tlatest\tiot/+/state/+\niot/d/health/x\t-\tbroadcast\t-\n"
        );
    }

    #[test]
    fn a_filter_is_a_line_per_channel_it_reaches_dead_letters_included() {
        let out = lines("#\n", false);
        assert!(out.contains("#\tevents\tappend\treplayed\n"), "{out}");
        assert!(out.contains("#\tstate\tlatest\tcurrent\n"), "{out}");
        assert!(out.contains("#\tjobs\tqueue\texcluded\n"), "{out}");
        assert!(out.contains("#\tjobs__dlq\tappend\treplayed\n"), "{out}");
        assert!(out.contains("#\t-\tbroadcast\tlive only\n"), "{out}");
    }

    #[test]
    fn json_lines_use_null_where_the_columns_show_a_dash() {
        let out = lines("iot/d/health/x\n", true);
        assert_eq!(
            out,
            "{\"subject\":\"iot/d/health/x\",\"channel\":null,\"type\":\"broadcast\",\"why\":null}\n"
        );
    }

    #[test]
    fn an_operand_gets_provider_bounds_retention_and_the_expanded_table() {
        let config = config();
        let router = Router::new(&config);
        let paragraph = |subject: &str| {
            let mut out = Vec::new();
            assert!(answer_one(&router, subject, false, &mut out).expect("write"));
            String::from_utf8(out).expect("utf8")
        };
        let out = paragraph("iot/d/events/x");
        assert!(out.contains("channel    events (append)"), "{out}");
        assert!(out.contains("claimed by iot/+/events/+"), "{out}");
        assert!(
            out.contains(
                "provider   local (memory, nothing kept across a restart; max_bytes 64MiB"
            ),
            "{out}"
        );
        assert!(out.contains("retention  period 7d, bytes none"), "{out}");
        assert!(
            out.contains("alarms\tappend\tlocal\tiot/hq/alarms/#\n"),
            "{out}"
        );
        assert!(
            out.contains("alarms\tappend\tlocal\tiot/hq/faults/#\n"),
            "{out}"
        );
        assert!(
            out.contains("jobs__dlq\tappend\tlocal\tiot/+/jobs/+/__dlq\n"),
            "{out}"
        );
        let out = paragraph("iot/d/jobs/b");
        assert!(out.contains("channel    jobs (queue)"), "{out}");
        assert!(
            out.contains("max_attempts 5, dead letters to jobs__dlq"),
            "{out}"
        );
    }

    #[test]
    fn an_invalid_subject_is_refused() {
        let config = config();
        let router = Router::new(&config);
        assert!(router.route("iot/#/x").is_err());
        assert!(router.route("").is_err());
    }
}
