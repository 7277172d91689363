//! What `mosquitto.db` held, written into the migrated redb provider as
//! the broker keeps it: retained values in `$retained`, sessions in
//! `$sessions`, and the QoS 1 and 2 messages a session was owed in the
//! broadcast log `$broadcast`, with the session's cursor at the first.
//!
//! The provider's file is new: the import refuses one that exists, and a
//! failure removes what it wrote, so a migration that fails leaves none.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use super::mosquitto_db::{Client, Db, StoredMessage};
use super::Failure;
use crate::codec::{QoS, RetainHandling, SubscriptionOptions};
use crate::core::session::record::{SessionRecord, StoredSubscription};
use crate::core::{BROADCAST_SPACE, RETAINED_SPACE, SESSIONS_SPACE};
use crate::store::{
    self, encoding, MessageIdGenerator, Outcome, Provider, RedbProvider, Write, MAX_ENTRY_KEY_BYTES,
};

/// Writes per commit, well below the store's own bound.
const COMMIT_WRITES: usize = 1_024;

/// What one import writes, and the report's lines about it.
#[derive(Default)]
pub(super) struct Import {
    /// The owed messages, in mosquitto's order, and whose they are.
    appends: Vec<(store::Message, Vec<String>)>,
    /// Retained values and session records.
    entries: Vec<Write>,
    pub notes: Vec<(&'static str, String)>,
}

impl Import {
    pub fn is_empty(&self) -> bool {
        self.appends.is_empty() && self.entries.is_empty()
    }
}

/// Why a retained value is not carried, as an index into the reasons the
/// report counts; `None` when it is.
fn left_behind(topic: &str, expiry_unix_s: i64, now_s: i64) -> Option<usize> {
    if expiry_unix_s != 0 && expiry_unix_s <= now_s {
        Some(0)
    } else if topic.starts_with('$') {
        Some(1)
    } else if topic.len() > MAX_ENTRY_KEY_BYTES {
        Some(2)
    } else {
        None
    }
}

fn stored(
    m: &StoredMessage,
    now_ms: u64,
    retain: bool,
    ids: &mut MessageIdGenerator,
) -> store::Message {
    let p = &m.properties;
    let now_s = (now_ms / 1000) as i64;
    store::Message {
        id: ids.next_id(now_ms),
        received_at_ms: now_ms,
        topic: m.topic.clone(),
        payload: m.payload.clone(),
        user_properties: p.user_properties.clone(),
        payload_format_indicator: p.payload_format_indicator,
        // What was left of it at the migration.
        message_expiry_interval_s: (m.expiry_unix_s != 0)
            .then(|| u32::try_from(m.expiry_unix_s - now_s).unwrap_or(u32::MAX)),
        content_type: p.content_type.clone(),
        response_topic: p.response_topic.clone(),
        correlation_data: p.correlation_data.clone(),
        publisher: None,
        qos: m.qos,
        retain,
    }
}

fn record(client: &Client, now_ms: u64) -> SessionRecord {
    let never = client.expiry_interval_s == u32::MAX || client.expiry_unix_s == 0;
    let disconnected_ms = match never {
        true => now_ms,
        false => (client.expiry_unix_s - i64::from(client.expiry_interval_s)).max(1) as u64 * 1000,
    };
    let subscriptions = client
        .subscriptions
        .iter()
        .map(|s| StoredSubscription {
            filter: s.filter.clone(),
            options: SubscriptionOptions {
                qos: QoS::from_bits(s.qos).unwrap_or(QoS::AtMostOnce),
                no_local: s.options & 0x04 != 0,
                retain_as_published: s.options & 0x08 != 0,
                retain_handling: match (s.options >> 4) & 0b11 {
                    1 => RetainHandling::SendIfNew,
                    2 => RetainHandling::DoNotSend,
                    _ => RetainHandling::SendAlways,
                },
            },
            subscription_id: Some(s.identifier).filter(|&id| id != 0),
            slice: None,
        })
        .collect();
    SessionRecord {
        expiry_interval_s: client.expiry_interval_s,
        disconnected_unix_ms: Some(disconnected_ms.max(1)),
        subscriptions,
        will: None,
    }
}

/// Counts of what was not carried, by reason, as one report line.
fn counted(what: &str, carried: usize, behind: &[(&'static str, usize)]) -> String {
    let mut line = format!("{carried} carried");
    for (why, n) in behind.iter().filter(|(_, n)| *n > 0) {
        line += &format!("; {n} not carried: {why}");
    }
    format!("{line} ({what})")
}

/// What `db` becomes, at `now_ms`.
pub(super) fn plan(db: &Db, now_ms: u64, ids: &mut MessageIdGenerator) -> Import {
    let now_s = (now_ms / 1000) as i64;
    let mut import = Import::default();
    let mut behind = [0; 3];
    for id in &db.retained {
        let message = &db.messages[id];
        match left_behind(&message.topic, message.expiry_unix_s, now_s) {
            Some(why) => behind[why] += 1,
            None => import.entries.push(Write::PutEntry {
                channel: RETAINED_SPACE.to_string(),
                key: message.topic.clone(),
                value: encoding::message_bytes(&stored(message, now_ms, true, ids)),
                use_reserve: false,
            }),
        }
    }
    let carried_retained = import.entries.len();
    import.notes.push((
        "retained values",
        counted(
            "topic, payload, QoS and MQTT 5 properties, kept in broker.retained.storage",
            carried_retained,
            &[
                ("past their message expiry", behind[0]),
                ("$ topics, as no $SYS tree is served here", behind[1]),
                ("topics longer than 4096 bytes", behind[2]),
            ],
        ),
    ));

    let (mut sessions_expired, mut sessions_long) = (0, 0);
    let (mut incoming, mut qos0, mut owed_expired, mut received) = (0, 0, 0, 0);
    // The owed messages by mosquitto's id, its publication order, and
    // the sessions owed each.
    let mut owed_to: BTreeMap<u64, Vec<String>> = BTreeMap::new();
    let mut owed = 0;
    for client in &db.clients {
        if client.expiry_unix_s != 0 && client.expiry_unix_s <= now_s {
            sessions_expired += 1;
            continue;
        }
        if client.id.len() > MAX_ENTRY_KEY_BYTES {
            sessions_long += 1;
            continue;
        }
        import.entries.push(Write::PutEntry {
            channel: SESSIONS_SPACE.to_string(),
            key: client.id.clone(),
            value: record(client, now_ms).to_bytes(),
            use_reserve: false,
        });
        for o in &client.messages {
            let message = &db.messages[&o.message];
            if !o.outgoing {
                incoming += 1;
            } else if o.received {
                received += 1;
            } else if o.qos == 0 || message.qos == 0 {
                qos0 += 1;
            } else if message.expiry_unix_s != 0 && message.expiry_unix_s <= now_s {
                owed_expired += 1;
            } else {
                owed += 1;
                owed_to
                    .entry(o.message)
                    .or_default()
                    .push(client.id.clone());
            }
        }
    }
    import.appends = owed_to
        .into_iter()
        .map(|(id, owners)| (stored(&db.messages[&id], now_ms, false, ids), owners))
        .collect();
    import.notes.push((
        "persistent sessions",
        counted(
            "client id, session expiry and subscriptions with their QoS, options and identifiers, kept in broker.session.storage; mosquitto keeps no Will in its file",
            import.entries.len() - carried_retained,
            &[
                ("expired", sessions_expired),
                ("client ids longer than 4096 bytes", sessions_long),
            ],
        ),
    ));
    import.notes.push((
        "queued messages",
        counted(
            "QoS 1 and 2 messages owed to a session, delivered when it resumes; a session there also receives what the log holds after its first owed message and its subscriptions match",
            owed,
            &[
                ("QoS 0, which is never queued here", qos0),
                ("past their message expiry", owed_expired),
                ("QoS 2 publishes received and not yet released by their publisher, which sends them again", incoming),
                ("QoS 2 deliveries the client had already received (its PUBREC came), whose release only was owed", received),
            ],
        ),
    ));
    if db.unknown_chunks > 0 {
        import.notes.push((
            "unknown chunks",
            format!(
                "{} not carried: of a type mosquitto 2.0 does not write",
                db.unknown_chunks
            ),
        ));
    }
    import
}

/// The provider's file and the two beside it a provider makes.
fn provider_files(redb: &Path) -> [PathBuf; 3] {
    let with = |suffix: &str| {
        let mut name = redb.as_os_str().to_os_string();
        name.push(suffix);
        PathBuf::from(name)
    };
    [redb.to_path_buf(), with(".lock"), with(".journal")]
}

/// Removes what [`write`] made.
pub(super) fn remove(redb: &Path) {
    for path in provider_files(redb) {
        let _ = fs::remove_file(path);
    }
    if let Some(parent) = redb.parent() {
        let _ = fs::File::open(parent).and_then(|d| d.sync_all());
    }
}

/// Writes `import` into a new redb provider `name` at `redb`, of
/// `max_bytes`. On failure nothing of it is left.
pub(super) fn write(
    import: Import,
    name: &str,
    redb: &Path,
    max_bytes: u64,
) -> Result<(), Failure> {
    for path in provider_files(redb) {
        if path.exists() {
            return Err(Failure::at(&path, None, "exists, and the migration never writes over a file: move it aside (or migrate with persistence false) and migrate again"));
        }
    }
    let done = write_new(import, name, redb, max_bytes);
    if done.is_err() {
        remove(redb);
    }
    done
}

fn write_new(import: Import, name: &str, redb: &Path, max_bytes: u64) -> Result<(), Failure> {
    let fail = |e: store::StoreError| {
        Failure::at(
            redb,
            None,
            format!("cannot take what mosquitto.db held: {e}"),
        )
    };
    let mut provider = RedbProvider::open(name, redb, max_bytes, 0).map_err(fail)?;
    let mut commit = |writes: &[Write]| -> Result<Vec<u64>, Failure> {
        let mut offsets = Vec::new();
        for batch in writes.chunks(COMMIT_WRITES) {
            for outcome in provider.commit(batch).map_err(fail)? {
                match outcome {
                    Outcome::Appended { offset } => offsets.push(offset),
                    Outcome::Refused(why) => return Err(Failure::at(redb, None, format!("mosquitto.db holds more than the provider's {max_bytes} bytes take ({why:?}): raise broker.storage.providers.{name}.max_bytes after migrating, or move mosquitto.db aside"))),
                    _ => {}
                }
            }
        }
        Ok(offsets)
    };
    let (messages, owners): (Vec<_>, Vec<_>) = import.appends.into_iter().unzip();
    let appends: Vec<Write> = messages
        .into_iter()
        .map(|message| Write::Append {
            channel: BROADCAST_SPACE.to_string(),
            message,
            channel_max_bytes: None,
        })
        .collect();
    let offsets = commit(&appends)?;
    // Each session's cursor: the first message it is owed.
    let mut cursors: BTreeMap<&str, u64> = BTreeMap::new();
    for (offset, owners) in offsets.iter().zip(&owners) {
        for owner in owners {
            cursors.entry(owner).or_insert(*offset);
        }
    }
    let mut writes = import.entries;
    writes.extend(
        cursors
            .into_iter()
            .map(|(reader, offset)| Write::SetPosition {
                channel: BROADCAST_SPACE.to_string(),
                reader: reader.to_string(),
                offset,
            }),
    );
    commit(&writes)?;
    Box::new(provider).close().map_err(fail)
}

#[cfg(test)]
mod tests {
    use super::super::mosquitto_db::{self, tests::Builder};
    use super::*;

    const NOW_S: u64 = 1_800_000_000;

    fn temp_dir(test: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("saguin-db-import-{}-{test}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn sample() -> Db {
        let mut b = Builder::new(6, false);
        b.cfg(9)
            .message(1, "state/lamp", b"on", 1, &[])
            .message(2, "$SYS/broker/x", b"1", 0, &[])
            .message(3, "dev/7/cmd", b"first", 1, &[])
            .message(4, "dev/8/cmd", b"second", 2, &[])
            .message(5, "dev/9/cmd", b"at-most-once", 0, &[])
            .client(6, "keeper", u32::MAX, 0)
            .client(6, "gone", 60, NOW_S - 1)
            .client(6, "other", 3600, NOW_S + 600)
            .sub("keeper", "dev/+/cmd", 2, 0x24, 0)
            .sub("other", "dev/#", 1, 0, 4)
            .queued("other", 4, 1)
            .queued("keeper", 3, 1)
            .queued("keeper", 4, 2)
            .queued("keeper", 5, 0)
            .queued("gone", 3, 1)
            .delivery("other", 3, 2, 9)
            .retain(1)
            .retain(2);
        mosquitto_db::read(&b.bytes).unwrap()
    }

    #[test]
    fn what_is_carried_and_what_is_not_is_counted() {
        let import = plan(
            &sample(),
            NOW_S * 1000,
            &mut MessageIdGenerator::with_seed(1),
        );
        let notes: Vec<String> = import
            .notes
            .iter()
            .map(|(w, o)| format!("{w}: {o}"))
            .collect();
        assert!(
            notes[0].starts_with("retained values: 1 carried; 1 not carried: $ topics"),
            "{notes:?}"
        );
        assert!(
            notes[1].starts_with("persistent sessions: 2 carried; 1 not carried: expired"),
            "{notes:?}"
        );
        assert!(
            notes[2].starts_with("queued messages: 3 carried; 1 not carried: QoS 0"),
            "{notes:?}"
        );
        // One record per owed message, in mosquitto's order.
        let owed: Vec<(&str, &Vec<String>)> = import
            .appends
            .iter()
            .map(|(m, o)| (m.topic.as_str(), o))
            .collect();
        assert_eq!(
            owed,
            vec![
                ("dev/7/cmd", &vec!["keeper".to_string()]),
                (
                    "dev/8/cmd",
                    &vec!["keeper".to_string(), "other".to_string()]
                )
            ]
        );
    }

    #[test]
    fn the_provider_holds_sessions_values_and_cursors_as_the_broker_reads_them() {
        let dir = temp_dir("written");
        let redb = dir.join("saguin.redb");
        let import = plan(
            &sample(),
            NOW_S * 1000,
            &mut MessageIdGenerator::with_seed(1),
        );
        write(import, "local", &redb, 16 * 1024 * 1024).unwrap();
        let provider = RedbProvider::open("local", &redb, 16 * 1024 * 1024, 0).unwrap();
        let retained = provider.entries(RETAINED_SPACE).unwrap();
        assert_eq!(retained.len(), 1);
        let value = encoding::message_from_bytes(&retained[0].1).unwrap();
        assert_eq!(
            (
                value.topic.as_str(),
                &value.payload[..],
                value.qos,
                value.retain
            ),
            ("state/lamp", &b"on"[..], 1, true)
        );
        let sessions = provider.entries(SESSIONS_SPACE).unwrap();
        let keeper = SessionRecord::from_bytes(&sessions[0].1).unwrap();
        assert_eq!(sessions[0].0, "keeper");
        assert_eq!(keeper.expiry_interval_s, u32::MAX);
        let sub = &keeper.subscriptions[0];
        assert_eq!(
            (
                sub.filter.as_str(),
                sub.options.qos,
                sub.options.no_local,
                sub.options.retain_handling
            ),
            (
                "dev/+/cmd",
                QoS::ExactlyOnce,
                true,
                RetainHandling::DoNotSend
            )
        );
        let other = SessionRecord::from_bytes(&sessions[1].1).unwrap();
        assert_eq!(other.subscriptions[0].subscription_id, Some(4));
        // Disconnected when mosquitto counted the expiry from.
        assert_eq!(
            other.disconnected_unix_ms,
            Some((NOW_S + 600 - 3600) * 1000)
        );
        assert_eq!(
            provider.position(BROADCAST_SPACE, "keeper").unwrap(),
            Some(1)
        );
        assert_eq!(
            provider.position(BROADCAST_SPACE, "other").unwrap(),
            Some(2)
        );
        Box::new(provider).close().unwrap();
        // A second import never writes over the first.
        let again = plan(
            &sample(),
            NOW_S * 1000,
            &mut MessageIdGenerator::with_seed(1),
        );
        let why = write(again, "local", &redb, 16 * 1024 * 1024).unwrap_err();
        assert!(why.why.contains("never writes over"), "{why}");
        assert!(redb.exists());
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn an_import_the_provider_cannot_hold_leaves_no_file() {
        let dir = temp_dir("full");
        let redb = dir.join("saguin.redb");
        let mut b = Builder::new(6, false);
        b.cfg(1)
            .message(1, "big", &vec![7; 64 * 1024], 1, &[])
            .retain(1);
        let import = plan(
            &mosquitto_db::read(&b.bytes).unwrap(),
            NOW_S * 1000,
            &mut MessageIdGenerator::with_seed(1),
        );
        let why = write(import, "local", &redb, 16 * 1024).unwrap_err();
        assert!(why.why.contains("more than the provider"), "{why}");
        assert!(provider_files(&redb).iter().all(|p| !p.exists()));
        let _ = fs::remove_dir_all(&dir);
    }
}
