//! Read-only views of the broker for the operations listener.
//!
//! Each view copies numbers and short strings out of the core's tables so
//! the caller can format them elsewhere: nothing here writes, and every
//! list is capped by its caller's `max_rows` with the count of what was
//! left out.

/// The broker-wide figures of one scrape.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Observation {
    pub stats: super::Stats,
    /// Clients that completed a CONNECT, by protocol.
    pub connected_v311: u64,
    pub connected_v5: u64,
    /// Clients connected now by the MQTT door they came through, indexed
    /// as the doors are configured; a bridge's own sessions come through
    /// none and are not in it.
    pub connected_by_door: Vec<u64>,
    /// Sessions held with no connection.
    pub sessions_offline: u64,
    /// Subscriptions every session holds.
    pub subscriptions: u64,
    pub retained_messages: u64,
    /// Exactly-once publishes received and not yet released.
    pub qos2_held: u64,
    /// QoS 1 and 2 deliveries sessions hold unacknowledged, and their cost.
    pub session_queue_messages: u64,
    pub session_queue_bytes: u64,
    /// Wills waiting out their delay.
    pub wills_waiting: u64,
    pub max_session_expiry_s: u32,
    pub qos2_max_inflight_per_client: u32,
    /// Broadcast publishes accepted, and those nobody subscribed to.
    pub published_broadcast: u64,
    pub broadcast_unmatched: u64,
    /// Sessions the start put back, and ended for their expiry or for a
    /// subscription now refused.
    pub sessions_restored: u64,
    pub sessions_expired_while_stopped: u64,
    pub sessions_subscription_refused: u64,
    /// Wills published, in [`WillCause::ALL`] order, and cancelled.
    pub wills_published: [u64; WillCause::ALL.len()],
    pub wills_cancelled: u64,
    pub session_expiry_shortened: u64,
    pub channels: Vec<ChannelObservation>,
}

/// What one channel holds, for the catalogue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChannelObservation {
    pub name: String,
    /// The filter as written, braces and all.
    pub filter: String,
    /// `append`, `latest` or `queue`.
    pub kind: &'static str,
    pub provider: usize,
    pub next_offset: u64,
    pub floor_offset: u64,
    /// Topics holding a current value, on a `latest` channel.
    pub latest_topics: Option<u64>,
    /// Durable consumers with a position read, and the lowest of them.
    pub consumers: u64,
    pub consumer_position_min: Option<u64>,
    pub queue: Option<QueueObservation>,
    /// Records retention removed since start.
    pub retention_removed: u64,
    /// Passings of a reader's position by the floor since start.
    pub position_lost: u64,
    /// Records stored since start.
    pub published: u64,
    /// On a `latest` channel, values replaced while waiting for a
    /// subscriber.
    pub latest_superseded: Option<u64>,
    /// Subscribers that declared a partition slice on it.
    pub partitioned_consumers: u64,
}

/// A queue's work, as the catalogue counts it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueueObservation {
    /// Unresolved jobs.
    pub depth: u64,
    /// Jobs out with a worker now.
    pub inflight: u64,
    pub counted: QueueCounts,
}

/// A queue's work since start, as the catalogue counts it: a release
/// lands in exactly one of `returned`, `redelivered` and `dead_lettered`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueueCounts {
    /// Jobs written to a worker, once per hand-over.
    pub delivered: u64,
    pub acknowledged: u64,
    /// Handed back by their worker with attempts left.
    pub returned: u64,
    /// Taken back from a worker that did not answer in its lease or left,
    /// with attempts left.
    pub redelivered: u64,
    pub dead_lettered: u64,
    /// Dead-lettered for age rather than attempts.
    pub expired: u64,
    /// Retained publishes taken as ordinary work, the flag dropped.
    pub retain_ignored: u64,
}

/// One unresolved job, for `/v1/operations/queues/<channel>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobRow {
    pub offset: u64,
    /// Its record's topic, where the broker holds the record in memory
    /// (read ahead to be offered, or on the wire to its worker); `None`
    /// for one only on disk, which a route does not read.
    pub topic: Option<String>,
    pub attempts: u32,
    /// `waiting`, `delivering` or `leased`.
    pub state: &'static str,
    /// The worker's client id, while one holds it.
    pub holder: Option<String>,
    pub lease_until_unix_ms: Option<u64>,
    pub first_seen_unix_ms: Option<u64>,
    pub last_seen_unix_ms: Option<u64>,
}

/// A queue's jobs, oldest first and capped, beside how many there are.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueueView {
    pub unresolved: u64,
    pub rows: Vec<JobRow>,
}

/// One durable consumer's place in a channel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerRow {
    /// Its scheme and name: `mqtt:<client id>`, or `bridge:<bridge>/<rule>`
    /// for an outbound rule (see [`reader_name`]).
    pub reader: String,
    pub offset: u64,
    /// When its session was last heard from: now, if connected; when it
    /// went away, if not; `None` for a session away that never expires.
    pub last_seen_unix_ms: Option<u64>,
}

/// How the operations routes name a reader whose session has `client_id`:
/// a bridge's outbound rule, which reads through a session of the
/// reserved `saguin-bridge/` space, as `bridge:<bridge>/<rule hash>`, and
/// any other as `mqtt:<client id>`. The scheme keeps a device calling
/// itself `bridge:x` apart from the rule.
pub fn reader_name(client_id: &str) -> String {
    match client_id.strip_prefix(super::BRIDGE_CLIENT_ID_PREFIX) {
        Some(rule) => format!("bridge:{rule}"),
        None => format!("mqtt:{client_id}"),
    }
}

/// A channel's consumers, worst first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChannelConsumers {
    pub channel: String,
    pub next_offset: u64,
    pub consumers: u64,
    pub rows: Vec<ConsumerRow>,
}

/// One session, for `/v1/operations/sessions`. What its connection said
/// is known only while it is connected.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SessionRow {
    pub client_id: String,
    pub connected: bool,
    /// 5 or 4 (3.1.1) while connected.
    pub protocol: Option<u8>,
    pub keepalive_s: Option<u16>,
    pub expiry_interval_s: u32,
    pub subscriptions: u64,
    /// Where its connection comes from, where the door learnt that: the
    /// client a proxy speaks for, or a Unix socket's peer.
    pub remote: Option<String>,
    /// The user its connection was admitted as.
    pub user: Option<String>,
    /// The MQTT door it came through, by index; `None` for a bridge's own
    /// session, which comes through none.
    pub door: Option<usize>,
    /// A bridge's own session.
    pub bridge: bool,
    /// Its CONNECT's Clean Start.
    pub clean_start: Option<bool>,
    /// Each filter it declared a partition slice on.
    pub partitions: Vec<PartitionRow>,
}

/// One filter's partition slice, as a SUBSCRIBE declared it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionRow {
    pub filter: String,
    pub count: u32,
    pub indices: Vec<u32>,
}

/// Sessions, held ones first, capped.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionsView {
    pub total: u64,
    pub connected: u64,
    pub rows: Vec<SessionRow>,
}

/// Readers the position-loss record holds at most; a newcomer past it
/// displaces the one that lost least, or is counted in `beyond`.
pub const MAX_LOSSES_HELD: usize = 1_000;

/// How a reader learned of its loss, as `/v1/operations/position-lost`
/// names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LossKind {
    /// Overtaken while reading, or found passed when its stored position
    /// was read: nothing told it.
    Consumer,
    /// Came back to a session whose position had been passed, and was told
    /// with Session Present 0.
    Session,
    /// A bridge's outbound rule: it resumes at the floor, and the peer is
    /// told nothing.
    Bridge,
}

impl LossKind {
    pub fn as_str(self) -> &'static str {
        match self {
            LossKind::Consumer => "consumer",
            LossKind::Session => "session",
            LossKind::Bridge => "bridge",
        }
    }

    fn reported(self) -> bool {
        self == LossKind::Session
    }
}

/// One reader's losses on one channel, summed over every passing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Loss {
    pub reader: String,
    pub channel: String,
    /// The most recent passing's kind.
    pub kind: LossKind,
    /// False once any passing went untold.
    pub reported: bool,
    pub count: u64,
    pub records_missed: u64,
    pub last_position: u64,
    pub last_floor: u64,
    pub last_seen_unix_ms: u64,
}

/// The losses held, worst first, and how many did not fit.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LossesView {
    pub rows: Vec<Loss>,
    pub tracked: u64,
    pub beyond: u64,
}

/// Clients the refused-clients record holds at most; past it a newcomer
/// displaces one refused only once, or is counted in `beyond`.
pub const MAX_REFUSED_HELD: usize = 1_000;

/// One client refused at CONNECT or ended for a refusal, for
/// `/v1/operations/refused`; empty `client_id` where its CONNECT named
/// none or could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusedClient {
    pub client_id: String,
    pub user: Option<String>,
    /// The most recent refusal's reason, as the catalogue labels it.
    pub reason: &'static str,
    pub count: u64,
    pub last_seen_unix_ms: u64,
}

/// The refused clients held, most refused first, and how many did not fit.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RefusedView {
    pub rows: Vec<RefusedClient>,
    pub tracked: u64,
    pub beyond: u64,
}

/// What made a Will due.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WillCause {
    /// The connection ended without a DISCONNECT and with no delay.
    Immediate,
    /// Its Will Delay Interval ran out.
    Delayed,
    /// Its session ended while the Will waited.
    SessionEnded,
    /// A start found it already due.
    Start,
}

impl WillCause {
    pub const ALL: [WillCause; 4] = [
        WillCause::Immediate,
        WillCause::Delayed,
        WillCause::SessionEnded,
        WillCause::Start,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            WillCause::Immediate => "immediate",
            WillCause::Delayed => "delayed",
            WillCause::SessionEnded => "session_ended",
            WillCause::Start => "start",
        }
    }
}

/// What the core counts for the operations listener alone, beside the
/// figures its tables already hold.
#[derive(Debug, Default)]
pub(crate) struct Tallies {
    /// Records retention removed, by channel index.
    pub(crate) retention_removed: std::collections::HashMap<usize, u64>,
    /// Passings of a reader by the floor, by channel index.
    pub(crate) position_lost: std::collections::HashMap<usize, u64>,
    pub(crate) losses: Vec<Loss>,
    pub(crate) beyond: u64,
    /// Clients refused, bounded by [`MAX_REFUSED_HELD`].
    pub(crate) refused: Vec<RefusedClient>,
    pub(crate) refused_beyond: u64,
    /// Records stored, by channel index; sized once at startup.
    pub(crate) published: Vec<u64>,
    /// Values a `latest` subscriber was not sent because a newer one of
    /// the topic replaced them while they waited, by channel index.
    pub(crate) latest_superseded: Vec<u64>,
    /// Broadcast publishes accepted, and those of them nobody matched.
    pub(crate) published_broadcast: u64,
    pub(crate) broadcast_unmatched: u64,
    /// Wills published, by [`WillCause`], and Wills a resuming client
    /// cancelled inside their delay.
    pub(crate) wills_published: [u64; WillCause::ALL.len()],
    pub(crate) wills_cancelled: u64,
    /// CONNECTs granted less session expiry than they asked for.
    pub(crate) session_expiry_shortened: u64,
    /// What the last start did with the stored sessions.
    pub(crate) sessions_restored: u64,
    pub(crate) sessions_expired_while_stopped: u64,
    pub(crate) sessions_subscription_refused: u64,
}

impl Tallies {
    pub(crate) fn new(channels: usize) -> Tallies {
        Tallies {
            published: vec![0; channels],
            latest_superseded: vec![0; channels],
            ..Tallies::default()
        }
    }

    pub(crate) fn will_published(&mut self, cause: WillCause) {
        self.wills_published[cause as usize] += 1;
    }

    /// A record stored in channel `channel`.
    pub(crate) fn published(&mut self, channel: usize) {
        if let Some(count) = self.published.get_mut(channel) {
            *count += 1;
        }
    }

    pub(crate) fn latest_superseded(&mut self, channel: usize) {
        if let Some(count) = self.latest_superseded.get_mut(channel) {
            *count += 1;
        }
    }

    /// A broadcast publish accepted; `matched` when anybody took it.
    pub(crate) fn broadcast(&mut self, matched: bool) {
        self.published_broadcast += 1;
        self.broadcast_unmatched += u64::from(!matched);
    }

    pub(crate) fn retention_removed(&mut self, channel: usize, records: u64) {
        *self.retention_removed.entry(channel).or_default() += records;
    }

    /// Records that the floor passed `reader`'s position on a channel.
    pub(crate) fn position_lost(&mut self, passing: Loss, channel: usize) {
        *self.position_lost.entry(channel).or_default() += 1;
        if let Some(held) = self
            .losses
            .iter_mut()
            .find(|l| l.reader == passing.reader && l.channel == passing.channel)
        {
            held.kind = passing.kind;
            held.reported &= passing.reported;
            held.count += 1;
            held.records_missed += passing.records_missed;
            held.last_position = passing.last_position;
            held.last_floor = passing.last_floor;
            held.last_seen_unix_ms = passing.last_seen_unix_ms;
            return;
        }
        if self.losses.len() < MAX_LOSSES_HELD {
            self.losses.push(passing);
            return;
        }
        self.beyond += 1;
        let least = self
            .losses
            .iter()
            .enumerate()
            .min_by_key(|(_, l)| l.records_missed)
            .map(|(i, l)| (i, l.records_missed));
        if let Some((index, missed)) = least {
            if passing.records_missed > missed {
                self.losses[index] = passing;
            }
        }
    }

    /// A refusal of `client`. A client refused before is counted again; a
    /// newcomer to a full record displaces one refused only once, so a
    /// device that starts flapping later is still seen, and is what does
    /// not fit when every one held is a repeat.
    pub(crate) fn refused(&mut self, client: RefusedClient) {
        if let Some(held) = self
            .refused
            .iter_mut()
            .find(|r| r.client_id == client.client_id && r.user == client.user)
        {
            held.count += 1;
            held.reason = client.reason;
            held.last_seen_unix_ms = client.last_seen_unix_ms;
            return;
        }
        if self.refused.len() < MAX_REFUSED_HELD {
            self.refused.push(client);
            return;
        }
        self.refused_beyond += 1;
        let once = self
            .refused
            .iter()
            .enumerate()
            .filter(|(_, r)| r.count == 1)
            .min_by_key(|(_, r)| r.last_seen_unix_ms)
            .map(|(i, _)| i);
        if let Some(index) = once {
            self.refused[index] = client;
        }
    }

    pub(crate) fn refused_view(&self, max_rows: usize) -> RefusedView {
        let mut rows = self.refused.clone();
        rows.sort_by(|a, b| {
            b.count
                .cmp(&a.count)
                .then(b.last_seen_unix_ms.cmp(&a.last_seen_unix_ms))
                .then_with(|| a.client_id.cmp(&b.client_id))
        });
        rows.truncate(max_rows);
        RefusedView {
            rows,
            tracked: self.refused.len() as u64,
            beyond: self.refused_beyond,
        }
    }

    pub(crate) fn view(&self, max_rows: usize) -> LossesView {
        let mut rows = self.losses.clone();
        rows.sort_by(|a, b| {
            b.records_missed
                .cmp(&a.records_missed)
                .then_with(|| a.reader.cmp(&b.reader))
        });
        rows.truncate(max_rows);
        LossesView {
            rows,
            tracked: self.losses.len() as u64,
            beyond: self.beyond,
        }
    }
}

impl Loss {
    /// One passing: the session `client_id` read from stood at
    /// `position` when the floor was `floor`. A bridge rule's is a
    /// [`LossKind::Bridge`] passing however it was found.
    pub(crate) fn new(
        client_id: &str,
        channel: &str,
        kind: LossKind,
        position: u64,
        floor: u64,
        unix_ms: u64,
    ) -> Loss {
        let reader = reader_name(client_id);
        let kind = if reader.starts_with("bridge:") {
            LossKind::Bridge
        } else {
            kind
        };
        Loss {
            reader,
            channel: channel.to_string(),
            kind,
            reported: kind.reported(),
            count: 1,
            records_missed: floor.saturating_sub(position),
            last_position: position,
            last_floor: floor,
            last_seen_unix_ms: unix_ms,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loss(reader: &str, missed: u64) -> Loss {
        Loss::new(reader, "events", LossKind::Consumer, 10, 10 + missed, 0)
    }

    #[test]
    fn passings_of_one_reader_accumulate_and_untold_ones_stick() {
        let mut tallies = Tallies::default();
        let mut told = loss("a", 5);
        told.kind = LossKind::Session;
        told.reported = true;
        tallies.position_lost(told, 0);
        tallies.position_lost(loss("a", 3), 0);
        let view = tallies.view(100);
        assert_eq!(view.rows.len(), 1);
        assert_eq!(view.rows[0].count, 2);
        assert_eq!(view.rows[0].records_missed, 8);
        assert!(!view.rows[0].reported);
        assert_eq!(tallies.position_lost[&0], 2);
    }

    #[test]
    fn a_bridge_rules_reader_is_named_and_kinded_as_a_bridge() {
        let passed = Loss::new(
            "saguin-bridge/up/0123",
            "events",
            LossKind::Consumer,
            1,
            5,
            0,
        );
        assert_eq!(passed.reader, "bridge:up/0123");
        assert_eq!((passed.kind.as_str(), passed.reported), ("bridge", false));
        assert_eq!(reader_name("north-17"), "mqtt:north-17");
        // Only the reserved prefix names a bridge.
        assert_eq!(reader_name("bridge:up"), "mqtt:bridge:up");
    }

    fn refused(client_id: &str, at: u64) -> RefusedClient {
        RefusedClient {
            client_id: client_id.into(),
            user: None,
            reason: "not authorized",
            count: 1,
            last_seen_unix_ms: at,
        }
    }

    #[test]
    fn a_full_refused_record_gives_up_a_one_off_and_never_a_repeat() {
        let mut tallies = Tallies::default();
        for i in 0..MAX_REFUSED_HELD {
            tallies.refused(refused(&format!("c{i}"), i as u64));
        }
        // Every one but c0 comes back, so c0 is the only one-off.
        for i in 1..MAX_REFUSED_HELD {
            tallies.refused(refused(&format!("c{i}"), 5_000));
        }
        tallies.refused(refused("newcomer", 6_000));
        assert!(tallies.refused.iter().all(|r| r.client_id != "c0"));
        // Now every one held but the newcomer is a repeat; a second
        // newcomer displaces the first.
        tallies.refused(refused("late", 7_000));
        let view = tallies.refused_view(3);
        assert_eq!(view.beyond, 2);
        assert_eq!(view.tracked, MAX_REFUSED_HELD as u64);
        assert!(tallies.refused.iter().any(|r| r.client_id == "late"));
        assert!(tallies.refused.iter().all(|r| r.client_id != "newcomer"));
        assert_eq!(view.rows[0].count, 2);
        assert_eq!(view.rows.len(), 3);
    }

    #[test]
    fn a_full_record_keeps_the_worst_and_counts_what_did_not_fit() {
        let mut tallies = Tallies::default();
        for i in 0..MAX_LOSSES_HELD {
            tallies.position_lost(loss(&format!("r{i}"), 10), 0);
        }
        tallies.position_lost(loss("small", 1), 0);
        tallies.position_lost(loss("large", 100), 0);
        let view = tallies.view(2);
        assert_eq!(view.beyond, 2);
        assert_eq!(view.tracked, MAX_LOSSES_HELD as u64);
        assert_eq!(view.rows[0].reader, "mqtt:large");
        assert!(tallies.losses.iter().all(|l| l.reader != "mqtt:small"));
    }
}
