//! Sessions that outlive their connections, kept in the provider
//! `broker.session.storage` names: one keyed entry per client id in the
//! broker-internal space `$sessions`.
//!
//! What a client is told waits for the write that makes it true: a CONNACK,
//! a SUBACK or an UNSUBACK goes out once the record that holds the change
//! is committed, and a clean DISCONNECT closes its connection once the
//! record no longer holds the Will it withdrew. While such a write is in
//! flight the connection's later packets wait, in order, so a second
//! change is never written before the first. Writes nobody waits on (a
//! disconnect moment, a Will that fell due) are written again every second
//! until they land.
//!
//! The session table in memory stays the broker's truth; the record is
//! rebuilt from it for every write, so a retry always writes what is true
//! now rather than what was true when the first attempt failed.

use crate::core::refusal::{Refusal, V311Answer};
use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::rc::Rc;

use crate::codec::{
    Connack, Disconnect, Packet, Properties, ProtocolVersion, QoS, ReasonCode, RetainHandling,
    Suback, Subscribe, SubscriptionOptions, Unsuback, Unsubscribe,
};
use crate::core::broker::connect::ConnackReader;
use crate::core::broker::subscribe::{filter_refusal, packet_reading, Form};
use crate::core::channel::ReaderFilter;
use crate::core::session::record::{SessionRecord, StoredSubscription, StoredWill};
use crate::core::session::Session;
use crate::core::{Broker, Key, StoreRequest, Then, Transport, Written};
use crate::store::{self, Answer, Completion, Outcome, Write};

/// The internal space of session records.
pub const SESSIONS_SPACE: &str = "$sessions";

/// How often a refused or unqueued background write is tried again.
const RETRY_MS: u64 = 1_000;

/// The Will moment that means none: the Will of a session whose
/// connection a stop cut waits for the session's end, not for a delay.
pub(crate) const NO_MOMENT: u64 = u64::MAX;

/// What the broker keeps about session records beside the sessions.
#[derive(Default)]
pub(crate) struct Persistence {
    /// Set as the broker stops: a stop is not a disconnect, so the records
    /// of connected sessions are left reading as connected.
    pub stopping: bool,
    /// Set while a packet whose record is already stored is served, so
    /// its handler does not write it again.
    pub writes_through: bool,
    /// Client ids the store may hold a record for.
    stored: HashSet<Box<str>>,
    /// Client ids whose record must be written again.
    dirty: BTreeSet<Box<str>>,
    /// Session writes in flight, by ticket.
    writes: HashMap<u64, Then>,
    /// Connections waiting on a session write, with what they sent since.
    paused: HashMap<Key, Paused>,
    /// Sessions whose CONNACK waits on a write, and the connection it is for.
    connecting: HashMap<Key, Key>,
    /// What a CONNECT waiting on its write changed of the session it
    /// resumes, to be put back if it is refused (invariant 17).
    claimed: HashMap<Key, Claimed>,
    /// The user name each client id's CONNECT carried, kept with its Will.
    user_names: HashMap<Box<str>, Box<str>>,
    last_retry_ms: u64,
    /// The broadcast log's offsets and cursors.
    pub log: crate::core::broadcast::log::BroadcastLog,
    /// The removal of a stored hold, to go in the commit of its release.
    pub release_drop: Option<Write>,
    /// Client ids whose stored cursor and window must be dropped before
    /// anything else is stored for the id: an ended session's, or what an
    /// earlier session may have left behind a new one.
    log_ends: BTreeSet<Box<str>>,
    /// Session writes carrying such drops, by ticket.
    log_ends_riding: HashMap<u64, Box<str>>,
}

/// A resumed session as it stood before the CONNECT claiming it.
pub(crate) struct Claimed {
    expiry_interval_s: u32,
    expires_at_ms: Option<u64>,
    pending_will: Option<Box<(crate::codec::Will, u64)>>,
    user_name: Option<Box<str>>,
}

/// What a connection sent while it waited on a session write, with the
/// bytes it came to on the wire.
#[derive(Default)]
pub(crate) struct Paused {
    packets: VecDeque<(Packet, u64)>,
    bytes: u64,
}

impl Persistence {
    /// The user name a stored session last connected under.
    pub(crate) fn user_name_of(&self, client_id: &str) -> Option<&str> {
        self.user_names.get(client_id).map(|name| &**name)
    }

    pub fn is_paused(&self, conn: Key) -> bool {
        self.paused.contains_key(&conn)
    }

    /// Holds a packet a paused connection sent; false when what it holds
    /// would pass `max_bytes` (one packet is always held).
    pub fn hold(&mut self, conn: Key, packet: Packet, len_bytes: u64, max_bytes: u64) -> bool {
        let paused = self.paused.entry(conn).or_default();
        if !paused.packets.is_empty() && paused.bytes + len_bytes > max_bytes {
            return false;
        }
        paused.bytes += len_bytes;
        paused.packets.push_back((packet, len_bytes));
        true
    }

    /// The connection whose CONNACK waits on a write for `session`.
    pub fn connecting_conn(&self, session: Key) -> Option<Key> {
        self.connecting.get(&session).copied()
    }

    pub fn forget_connection(&mut self, conn: Key) {
        self.paused.remove(&conn);
        self.connecting.retain(|_, c| *c != conn);
    }

    pub(crate) fn track(&mut self, ticket: u64, then: Then) {
        self.writes.insert(ticket, then);
    }

    pub(crate) fn take(&mut self, ticket: u64) -> Option<Then> {
        self.writes.remove(&ticket)
    }
}

impl Broker {
    /// Whether `session` keeps a record: it outlives its connection and a
    /// provider is named for sessions.
    pub(crate) fn keeps_record(&self, session_key: Key) -> bool {
        self.settings.session_provider.is_some()
            && self
                .sessions
                .get(session_key)
                .is_some_and(|s| s.expiry_interval_s > 0)
    }

    /// The record of a session as memory holds it now.
    pub(crate) fn session_record(&self, session_key: Key, now_ms: u64) -> Option<SessionRecord> {
        let session = self.sessions.get(session_key)?;
        let subscriptions = session
            .subscriptions
            .iter()
            .map(|(filter, entry)| StoredSubscription {
                filter: filter.to_string(),
                options: entry.options,
                subscription_id: entry.subscription_id,
                slice: entry.slice.as_deref().cloned(),
            })
            .collect();
        let user_name = self
            .persist
            .user_names
            .get(&*session.client_id)
            .map(|n| n.to_string());
        let conn = session
            .connection
            .or_else(|| self.persist.connecting_conn(session_key));
        let active = conn
            .and_then(|c| self.connections.get(c))
            .and_then(|c| c.active.as_ref());
        let (disconnected_unix_ms, will) = match active {
            Some(active) => (
                None,
                active.will.as_ref().map(|will| StoredWill {
                    will: (**will).clone(),
                    user_name,
                    due_unix_ms: None,
                }),
            ),
            None => {
                let moment_ms = match (session.expires_at_ms(), session.expiry_interval_s) {
                    (Some(at), expiry_s) if expiry_s != u32::MAX => {
                        at.saturating_sub(u64::from(expiry_s) * 1000)
                    }
                    _ => now_ms,
                };
                let will = session.pending_will.as_ref().map(|pending| StoredWill {
                    will: pending.0.clone(),
                    user_name,
                    due_unix_ms: (pending.1 != NO_MOMENT).then(|| self.unix_ms(pending.1)),
                });
                (Some(self.unix_ms(moment_ms)), will)
            }
        };
        Some(SessionRecord {
            expiry_interval_s: session.expiry_interval_s,
            disconnected_unix_ms,
            subscriptions,
            will,
        })
    }

    fn record_write(client_id: &str, record: &SessionRecord) -> Write {
        Write::PutEntry {
            channel: SESSIONS_SPACE.to_string(),
            key: client_id.to_string(),
            value: record.to_bytes(),
            use_reserve: false,
        }
    }

    /// Sends one session write; gives `then` back when the storage thread
    /// could not take it.
    fn send_session_write(
        &mut self,
        write: Write,
        then: Then,
        out: &mut impl Transport,
    ) -> Result<(), Box<Then>> {
        let Some(provider) = self.settings.session_provider else {
            return Err(Box::new(then));
        };
        let mut writes = Vec::new();
        let mut riding = None;
        if let Write::PutEntry { key, .. } | Write::DropEntry { key, .. } = &write {
            let client_id: Box<str> = key.as_str().into();
            if self.persist.log_ends.remove(&client_id) {
                // In the record's own commit: the record never lands
                // beside a cursor or window an earlier session left.
                writes.extend(log_drops(&client_id));
                self.persist.log.forget_stored(&client_id);
                riding = Some(client_id.clone());
            }
        }
        if let Write::PutEntry { key, .. } = &write {
            self.persist.stored.insert(key.as_str().into());
            // What the session acknowledged is stored before its record,
            // in the same order on the same provider.
            let session = self.sessions.key_of(key.as_str());
            let cursors = session.map(|s| self.cursor_writes(s)).unwrap_or_default();
            if riding.is_some() {
                writes.extend(cursors);
            } else if !cursors.is_empty() {
                let ticket = self.next_ticket();
                let request = StoreRequest::Commit {
                    ticket,
                    writes: cursors,
                };
                if !out.store(provider, request) {
                    // Not taken: written again with the record's retry.
                    self.persist.log.forget_window(key);
                    return Err(Box::new(then));
                }
                // A failure has them written again at the next interval.
                self.persist.track(ticket, Then::Cursors);
            }
        }
        writes.push(write);
        let ticket = self.next_ticket();
        if !out.store(provider, StoreRequest::Commit { ticket, writes }) {
            if let Some(client_id) = riding {
                self.persist.log_ends.insert(client_id);
            }
            return Err(Box::new(then));
        }
        self.persist.track(ticket, then);
        if let Some(client_id) = riding {
            self.persist.log_ends_riding.insert(ticket, client_id);
        }
        Ok(())
    }

    /// A session write that carried a cursor and window drop came back
    /// unstored: the drops are owed again.
    fn log_ends_answered(&mut self, ticket: u64, stored: bool) {
        if let Some(client_id) = self.persist.log_ends_riding.remove(&ticket) {
            if !stored {
                self.persist.log.forget_window(&client_id);
                self.persist.log_ends.insert(client_id);
            }
        }
    }

    /// Sends the cursor and window drops owed for ids no session holds now:
    /// at an end, and again every `ack_commit_interval` until they land.
    pub(crate) fn send_log_ends(&mut self, out: &mut impl Transport) {
        let Some(provider) = self.settings.session_provider else {
            return;
        };
        let owed: Vec<Box<str>> = self
            .persist
            .log_ends
            .iter()
            .filter(|id| self.sessions.key_of(id).is_none())
            .cloned()
            .collect();
        for client_id in owed {
            self.persist.log_ends.remove(&client_id);
            self.persist.log.forget_stored(&client_id);
            let ticket = self.next_ticket();
            let request = StoreRequest::Commit {
                ticket,
                writes: log_drops(&client_id),
            };
            if out.store(provider, request) {
                self.persist.track(ticket, Then::LogEnded { client_id });
            } else {
                self.persist.log_ends.insert(client_id);
            }
        }
    }

    /// Sends one write to `provider`, to be answered through `then`.
    pub(crate) fn send_write(
        &mut self,
        provider: usize,
        write: Write,
        then: Then,
        out: &mut impl Transport,
    ) -> Result<(), Box<Then>> {
        let ticket = self.next_ticket();
        let request = StoreRequest::Commit {
            ticket,
            writes: vec![write],
        };
        if !out.store(provider, request) {
            return Err(Box::new(then));
        }
        self.persist.track(ticket, then);
        Ok(())
    }

    /// Writes a session's record as memory holds it, or drops it when the
    /// session no longer outlives its connection. Nobody waits on it.
    pub(crate) fn save_session(&mut self, session_key: Key, now_ms: u64, out: &mut impl Transport) {
        if self.settings.session_provider.is_none() || self.persist.stopping {
            return;
        }
        let Some(session) = self.sessions.get(session_key) else {
            return;
        };
        let client_id: Box<str> = session.client_id.as_ref().into();
        let write = if session.expiry_interval_s == 0 {
            if !self.persist.stored.remove(&client_id) {
                return;
            }
            Write::DropEntry {
                channel: SESSIONS_SPACE.to_string(),
                key: client_id.to_string(),
            }
        } else {
            let record = self
                .session_record(session_key, now_ms)
                .expect("the session was found above");
            Self::record_write(&client_id, &record)
        };
        self.persist.dirty.remove(&client_id);
        let then = Then::Background {
            client_id: client_id.clone(),
        };
        if self.send_session_write(write, then, out).is_err() {
            self.persist.dirty.insert(client_id);
        }
    }

    /// The record of an ended session goes, after its Will.
    pub(crate) fn session_record_ended(&mut self, client_id: &str, out: &mut impl Transport) {
        if self.settings.session_provider.is_none() {
            return;
        }
        // A session that replaced it under the same id writes its own.
        if self.sessions.key_of(client_id).is_some() {
            return;
        }
        self.persist.user_names.remove(client_id);
        // Dropped unconditionally: the provider may hold what memory
        // forgot (a drop that failed before a restart).
        self.persist.log_ends.insert(client_id.into());
        if !self.persist.stored.contains(client_id) {
            self.send_log_ends(out);
        }
        if !self.persist.stored.remove(client_id) {
            return;
        }
        let write = Write::DropEntry {
            channel: SESSIONS_SPACE.to_string(),
            key: client_id.to_string(),
        };
        self.persist.dirty.remove(client_id);
        let then = Then::Background {
            client_id: client_id.into(),
        };
        if self.send_session_write(write, then, out).is_err() {
            self.persist.dirty.insert(client_id.into());
            self.persist.stored.insert(client_id.into());
        }
    }

    /// Writes again, every second, what the store refused or could not
    /// take.
    pub(crate) fn retry_session_writes(&mut self, now_ms: u64, out: &mut impl Transport) {
        if now_ms.saturating_sub(self.persist.last_retry_ms) < RETRY_MS {
            return;
        }
        self.flush_session_writes(now_ms, out);
    }

    /// Writes again, now, every record still owed a write: each second,
    /// and as the broker stops.
    pub(crate) fn flush_session_writes(&mut self, now_ms: u64, out: &mut impl Transport) {
        if self.persist.dirty.is_empty() {
            return;
        }
        self.persist.last_retry_ms = now_ms;
        let dirty = std::mem::take(&mut self.persist.dirty);
        for client_id in dirty {
            match self.sessions.key_of(&client_id) {
                Some(session) => self.save_session(session, now_ms, out),
                None => {
                    self.persist.stored.insert(client_id.clone());
                    self.session_record_ended(&client_id, out);
                }
            }
        }
    }

    /// At CONNECT: the record of a session that outlives its connection is
    /// written before its CONNACK, which then waits for the commit. Returns
    /// the CONNACK back when nothing needs writing.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn connack_after_write(
        &mut self,
        conn: Key,
        session_key: Key,
        connack: Connack,
        made: bool,
        user_name: Option<&str>,
        now_ms: u64,
        out: &mut impl Transport,
    ) -> Option<Connack> {
        if self.settings.session_provider.is_none() {
            return Some(connack);
        }
        let session = self.sessions.get(session_key)?;
        let client_id: Box<str> = session.client_id.as_ref().into();
        match user_name {
            Some(name) => {
                self.persist
                    .user_names
                    .insert(client_id.clone(), name.into());
            }
            None => {
                self.persist.user_names.remove(&client_id);
            }
        }
        let write = if session.expiry_interval_s == 0 {
            if !self.persist.stored.contains(&client_id) {
                return Some(connack);
            }
            // A record left by an earlier session goes before this one,
            // which keeps none, is answered.
            self.persist.stored.remove(&client_id);
            Write::DropEntry {
                channel: SESSIONS_SPACE.to_string(),
                key: client_id.to_string(),
            }
        } else {
            let record = self.session_record_for_connect(conn, session_key, now_ms)?;
            Self::record_write(&client_id, &record)
        };
        if made && session.expiry_interval_s > 0 {
            // Whatever an earlier session of the id left goes with the
            // first record of this one.
            self.persist.log_ends.insert(client_id.clone());
        }
        self.persist.dirty.remove(&client_id);
        let then = Then::Connack {
            conn,
            session: session_key,
            connack: Box::new(connack),
            made,
        };
        self.persist.paused.insert(conn, Paused::default());
        self.persist.connecting.insert(session_key, conn);
        if let Err(then) = self.send_session_write(write, then, out) {
            self.finish_session_write(*then, Written::Failed, now_ms, out);
        }
        None
    }

    fn session_record_for_connect(
        &self,
        conn: Key,
        session_key: Key,
        now_ms: u64,
    ) -> Option<SessionRecord> {
        let mut record = self.session_record(session_key, now_ms)?;
        let active = self.connections.get(conn)?.active.as_ref()?;
        let user_name = self
            .sessions
            .get(session_key)
            .and_then(|s| self.persist.user_names.get(&*s.client_id))
            .map(|n| n.to_string());
        record.disconnected_unix_ms = None;
        record.will = active.will.as_ref().map(|will| StoredWill {
            will: (**will).clone(),
            user_name,
            due_unix_ms: None,
        });
        Some(record)
    }

    /// Notes what a CONNECT is about to change of a session it resumes,
    /// where its CONNACK will wait on a write that may be refused.
    pub(crate) fn remember_claimed(&mut self, session_key: Key) {
        if self.settings.session_provider.is_none() {
            return;
        }
        let Some(session) = self.sessions.get(session_key) else {
            return;
        };
        if session.is_new {
            self.persist.claimed.remove(&session_key);
            return;
        }
        let claimed = Claimed {
            expiry_interval_s: session.expiry_interval_s,
            expires_at_ms: session.expires_at_ms(),
            pending_will: session.pending_will.clone(),
            user_name: self.persist.user_names.get(&*session.client_id).cloned(),
        };
        self.persist.claimed.insert(session_key, claimed);
    }

    /// A CONNECT refused after its claim: the session it resumed is put
    /// back as it stood, its waiting Will, its expiry clock and its grants
    /// included, and its record written again as memory holds it.
    fn give_claim_back(
        &mut self,
        session_key: Key,
        claimed: Claimed,
        now_ms: u64,
        out: &mut impl Transport,
    ) {
        let Some(session) = self.sessions.get_mut(session_key) else {
            return;
        };
        session.expiry_interval_s = claimed.expiry_interval_s;
        session.set_expires_at_ms(claimed.expires_at_ms);
        session.pending_will = claimed.pending_will;
        let client_id: Box<str> = session.client_id.as_ref().into();
        self.give_grants_back(session_key, claimed.user_name.as_deref());
        match claimed.user_name {
            Some(name) => self.persist.user_names.insert(client_id, name),
            None => self.persist.user_names.remove(&client_id),
        };
        self.save_session(session_key, now_ms, out);
    }

    /// A CONNECT whose session write failed: its client is refused, and a
    /// session this CONNECT made ends with it, since its client never heard
    /// it had one.
    #[allow(clippy::too_many_arguments)]
    fn refuse_after_claim(
        &mut self,
        conn: Key,
        session_key: Key,
        made: bool,
        refusal: Refusal,
        now_ms: u64,
        out: &mut impl Transport,
    ) {
        let Some(active) = self
            .connections
            .get_mut(conn)
            .and_then(|c| c.active.as_mut())
        else {
            return;
        };
        let client = ConnackReader {
            version: active.version,
            problem_information: active.problem_information,
            max_packet_size: active.client_max_packet_size,
        };
        // Its Will was never accepted.
        active.will = None;
        log::warn!(
            "refusing CONNECT from {}: {}",
            self.client_id_of(conn),
            refusal.reason()
        );
        self.connection_refused(conn, None, refusal.into(), now_ms);
        let (code, reason) = (refusal.code(), refusal.reason());
        self.send_connack_refusal(conn, client, code, reason, out);
        self.persist.forget_connection(conn);
        let claimed = self.persist.claimed.remove(&session_key);
        if let (Some(claimed), Some(session)) = (&claimed, self.sessions.get_mut(session_key)) {
            // Its connection's end must not end a session it did not own.
            session.expiry_interval_s = claimed.expiry_interval_s;
        }
        self.end_connection(conn, None, false, now_ms, out);
        if let Some(claimed) = claimed {
            self.give_claim_back(session_key, claimed, now_ms, out);
        }
        if made {
            if let Some(session) = self.sessions.get_mut(session_key) {
                session.expiry_interval_s = 0;
            }
            self.end_session(session_key, now_ms, out);
        }
    }

    /// Puts a packet from a connection waiting on a session write at the
    /// back of its queue; gives it back when the connection is not waiting.
    pub(crate) fn hold_while_paused(
        &mut self,
        conn: Key,
        packet: Packet,
        now_ms: u64,
        out: &mut impl Transport,
    ) -> Option<Packet> {
        if !self.persist.is_paused(conn) {
            return Some(packet);
        }
        let version = self.version(conn).unwrap_or(ProtocolVersion::V5);
        let len_bytes = crate::codec::encoded_len(&packet, version) as u64;
        // What waits is bounded as a session's outbound buffer is: the
        // client is sending faster than the broker can store.
        let max_bytes = self.settings.session_queue_bytes / 2;
        if !self.persist.hold(conn, packet, len_bytes, max_bytes) {
            self.persist.forget_connection(conn);
            let reason = Refusal::SessionWritesBehind;
            self.end_connection(conn, Some(reason), true, now_ms, out);
        }
        None
    }

    /// Serves, in order, what a connection sent while it waited.
    fn resume_connection(&mut self, conn: Key, now_ms: u64, out: &mut impl Transport) {
        let Some(paused) = self.persist.paused.remove(&conn) else {
            return;
        };
        let mut queue = paused.packets;
        while let Some((packet, _)) = queue.pop_front() {
            if !self.connections.contains(conn) {
                return;
            }
            self.handle_packet(conn, packet, now_ms, out);
            if let Some(again) = self.persist.paused.get_mut(&conn) {
                // A packet started another write: the rest wait for it.
                again.bytes += queue.iter().map(|(_, len)| len).sum::<u64>();
                again.packets.extend(queue);
                return;
            }
        }
    }

    /// The session of `conn` and its record as it stands, where a change
    /// to it must be stored before it is answered; `None` where nothing is
    /// written first.
    fn record_to_rewrite(&self, conn: Key, now_ms: u64) -> Option<(Key, SessionRecord)> {
        let session_key = self.session_of(conn)?;
        if !self.keeps_record(session_key) || self.persist.writes_through {
            return None;
        }
        Some((session_key, self.session_record(session_key, now_ms)?))
    }

    /// A SUBSCRIBE to a session that keeps a record: the record with the
    /// filters it adds is written first, and the SUBSCRIBE is served once
    /// it is stored. False when nothing needs writing first.
    pub(crate) fn subscribe_after_write(
        &mut self,
        conn: Key,
        subscribe: &Subscribe,
        now_ms: u64,
        out: &mut impl Transport,
    ) -> bool {
        let Some((session_key, mut record)) = self.record_to_rewrite(conn, now_ms) else {
            return false;
        };
        let (packet_refusal, slice) = packet_reading(subscribe);
        for (filter, options) in &subscribe.filters {
            // What is refused is never written, so never restored.
            if filter_refusal(packet_refusal, slice.as_deref(), filter).is_some() {
                continue;
            }
            // A queue's form is granted at QoS 1, as the queue keeps it;
            // its checks come before the write, as a plain filter's do.
            let queue_form =
                match self.admit_queue_subscription(conn, session_key, filter, *options) {
                    Some(Ok(_)) => true,
                    Some(Err(_)) => continue,
                    None => false,
                };
            if !queue_form && self.admit_filter(session_key, filter).is_err() {
                continue;
            }
            let options = SubscriptionOptions {
                qos: if queue_form {
                    QoS::AtLeastOnce
                } else {
                    options.qos.min(QoS::ExactlyOnce)
                },
                ..*options
            };
            let stored = StoredSubscription {
                filter: filter.clone(),
                options,
                subscription_id: subscribe
                    .properties
                    .subscription_identifiers
                    .first()
                    .copied(),
                slice: slice.as_deref().cloned(),
            };
            match record
                .subscriptions
                .iter_mut()
                .find(|s| s.filter == *filter)
            {
                Some(existing) => *existing = stored,
                None => record.subscriptions.push(stored),
            }
        }
        let then = Then::Subscribe {
            conn,
            subscribe: subscribe.clone(),
        };
        self.write_before(conn, session_key, record, then, now_ms, out)
    }

    /// An UNSUBSCRIBE from a session that keeps a record: written first.
    pub(crate) fn unsubscribe_after_write(
        &mut self,
        conn: Key,
        unsubscribe: &Unsubscribe,
        now_ms: u64,
        out: &mut impl Transport,
    ) -> bool {
        let Some((session_key, mut record)) = self.record_to_rewrite(conn, now_ms) else {
            return false;
        };
        record
            .subscriptions
            .retain(|s| !unsubscribe.filters.contains(&s.filter));
        let then = Then::Unsubscribe {
            conn,
            unsubscribe: unsubscribe.clone(),
        };
        self.write_before(conn, session_key, record, then, now_ms, out)
    }

    /// A DISCONNECT from a session that keeps a record: the record without
    /// the Will it withdraws, with its disconnect moment and any expiry it
    /// carries, is written before the connection closes.
    pub(crate) fn disconnect_after_write(
        &mut self,
        conn: Key,
        disconnect: &Disconnect,
        now_ms: u64,
        out: &mut impl Transport,
    ) -> bool {
        let Some(session_key) = self.session_of(conn) else {
            return false;
        };
        let stored = self
            .sessions
            .get(session_key)
            .is_some_and(|s| self.persist.stored.contains(&*s.client_id));
        if !stored || self.persist.writes_through {
            return false;
        }
        let Some(active) = self.connections.get(conn).and_then(|c| c.active.as_ref()) else {
            return false;
        };
        let connect_expiry_s = active.connect_expiry_s;
        let will = active.will.clone();
        let Some(mut record) = self.session_record(session_key, now_ms) else {
            return false;
        };
        if let Some(expiry_s) = disconnect.properties.session_expiry_interval_s {
            if connect_expiry_s == 0 && expiry_s != 0 {
                return false;
            }
            record.expiry_interval_s = expiry_s.min(self.settings.max_session_expiry_s);
        }
        record.disconnected_unix_ms = Some(self.unix_ms(now_ms));
        let user_name = record.will.take().and_then(|w| w.user_name);
        if disconnect.reason_code == ReasonCode::DISCONNECT_WITH_WILL {
            // A Will with a delay waits on the record; one without is
            // published as the connection closes.
            if let Some(will) = will {
                let delay_s = will.properties.will_delay_interval_s.unwrap_or(0);
                if delay_s > 0 && record.expiry_interval_s > 0 {
                    record.will = Some(StoredWill {
                        will: *will,
                        user_name,
                        due_unix_ms: Some(self.unix_ms(now_ms + u64::from(delay_s) * 1000)),
                    });
                }
            }
        }
        let client_id = self.client_id_of(conn).to_string();
        let write = if record.expiry_interval_s == 0 {
            self.persist.stored.remove(client_id.as_str());
            Write::DropEntry {
                channel: SESSIONS_SPACE.to_string(),
                key: client_id,
            }
        } else {
            Self::record_write(&client_id, &record)
        };
        let then = Then::Disconnect {
            conn,
            disconnect: disconnect.clone(),
        };
        self.persist.paused.insert(conn, Paused::default());
        if let Err(then) = self.send_session_write(write, then, out) {
            self.finish_session_write(*then, Written::Failed, now_ms, out);
        }
        true
    }

    /// Writes `record` before the packet `then` serves is answered; the
    /// connection's later packets wait for it.
    fn write_before(
        &mut self,
        conn: Key,
        session_key: Key,
        record: SessionRecord,
        then: Then,
        now_ms: u64,
        out: &mut impl Transport,
    ) -> bool {
        let Some(session) = self.sessions.get(session_key) else {
            return false;
        };
        let client_id = Rc::clone(&session.client_id);
        let write = Self::record_write(&client_id, &record);
        let too_large = matches!(&write, Write::PutEntry { value, .. } if value.len() > store::MAX_ENTRY_VALUE_BYTES);
        self.persist.paused.insert(conn, Paused::default());
        if too_large {
            self.finish_session_write(then, Written::Full, now_ms, out);
        } else if let Err(then) = self.send_session_write(write, then, out) {
            self.finish_session_write(*then, Written::Failed, now_ms, out);
        }
        true
    }

    /// Runs `body` with the session hooks writing through, for a packet
    /// whose record is already stored.
    fn serve_through(&mut self, body: impl FnOnce(&mut Broker)) {
        let before = std::mem::replace(&mut self.persist.writes_through, true);
        body(self);
        self.persist.writes_through = before;
    }

    /// A session write came back.
    pub(crate) fn session_write_completed(
        &mut self,
        then: Then,
        completion: Completion,
        now_ms: u64,
        out: &mut impl Transport,
    ) {
        let then = match then {
            Then::Logged(logged) => {
                return self.logged(*logged, Some(completion.answer), now_ms, out);
            }
            Then::Hold(hold) => {
                return self.hold_written(*hold, Some(completion.answer), now_ms, out);
            }
            then => then,
        };
        let written = written(completion.answer);
        let stored = matches!(written, Written::Stored);
        self.log_ends_answered(completion.ticket.0, stored);
        self.finish_session_write(then, written, now_ms, out);
    }

    /// Answers what waited on a session write.
    pub(crate) fn finish_session_write(
        &mut self,
        then: Then,
        written: Written,
        now_ms: u64,
        out: &mut impl Transport,
    ) {
        match then {
            Then::Background { client_id } => {
                if matches!(written, Written::Stored) {
                    log::debug!("the session record of {client_id} is stored");
                } else {
                    log::warn!("the session record of {client_id} was not stored; it is written again every second");
                    self.persist.dirty.insert(client_id);
                }
            }
            Then::Connack {
                conn,
                session,
                connack,
                made,
            } => self.connack_written(conn, session, *connack, made, written, now_ms, out),
            Then::Subscribe { conn, subscribe } => {
                match written {
                    Written::Stored => {
                        self.serve_through(|b| b.handle_subscribe(conn, subscribe, now_ms, out))
                    }
                    refused => self.refuse_subscribe(conn, &subscribe, refused, out),
                }
                self.resume_connection(conn, now_ms, out);
            }
            Then::Unsubscribe { conn, unsubscribe } => {
                match written {
                    Written::Stored => {
                        self.serve_through(|b| b.handle_unsubscribe(conn, unsubscribe, now_ms, out))
                    }
                    _ => self.refuse_unsubscribe(conn, &unsubscribe, now_ms, out),
                }
                self.resume_connection(conn, now_ms, out);
            }
            Then::Retained(write) => self.retained_written(*write, written, now_ms, out),
            Then::Logged(logged) => self.logged(*logged, None, now_ms, out),
            Then::Hold(hold) => self.hold_written(*hold, None, now_ms, out),
            Then::Pubrel { conn, reply } => self.pubrel_written(conn, reply, written, now_ms, out),
            Then::LogEnded { client_id } => {
                if !matches!(written, Written::Stored) {
                    log::warn!("the cursor and window of the ended session {client_id} were not dropped; they are dropped at the next interval");
                    self.persist.log_ends.insert(client_id);
                }
            }
            Then::Cursors => {
                if !matches!(written, Written::Stored) {
                    log::warn!("the broadcast log's cursors were not stored; they are written again at the next interval");
                    self.persist.log.forget_cursors();
                }
            }
            Then::Window { session } => {
                let stored = matches!(written, Written::Stored);
                self.send_unsent(session, stored, now_ms, out)
            }
            Then::RetainedBehind { topic } => {
                if !matches!(written, Written::Stored) {
                    log::warn!("the retained value of {topic:?} changed in memory and not in its provider; it is served until the broker stops");
                }
            }
            Then::Disconnect { conn, disconnect } => {
                let client_id: Box<str> = self.client_id_of(conn).into();
                if !matches!(written, Written::Stored) {
                    log::warn!("the disconnect of {client_id} was not stored; it is written again every second");
                    self.persist.dirty.insert(client_id);
                }
                self.persist.forget_connection(conn);
                self.serve_through(|b| b.handle_disconnect(conn, disconnect, now_ms, out));
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn connack_written(
        &mut self,
        conn: Key,
        session_key: Key,
        mut connack: Connack,
        made: bool,
        written: Written,
        now_ms: u64,
        out: &mut impl Transport,
    ) {
        // A newer CONNECT that took the session over while this write was
        // in flight waits on its own write: its wait is not this one's.
        let current = self.persist.connecting.get(&session_key) == Some(&conn);
        if current {
            self.persist.connecting.remove(&session_key);
        }
        if !self.connections.contains(conn) {
            self.persist.forget_connection(conn);
            return;
        }
        match written {
            Written::Stored => {}
            Written::Full => {
                let has_will = self
                    .connections
                    .get(conn)
                    .and_then(|c| c.active.as_ref())
                    .is_some_and(|a| a.will.is_some());
                if has_will {
                    // MQTT has no way to say "your Will is not held".
                    self.refuse_after_claim(
                        conn,
                        session_key,
                        made,
                        Refusal::WillNoRoom,
                        now_ms,
                        out,
                    );
                    return;
                }
                // Accepted, told its session ends with this connection.
                log::warn!(
                    "the session store is full: {} is given a session that ends with its connection",
                    self.client_id_of(conn)
                );
                self.stats.sessions_dropped_storage_full += 1;
                if let Some(session) = self.sessions.get_mut(session_key) {
                    session.expiry_interval_s = 0;
                }
                if let Some(active) = self
                    .connections
                    .get_mut(conn)
                    .and_then(|c| c.active.as_mut())
                {
                    active.connect_expiry_s = 0;
                }
                connack.properties.session_expiry_interval_s = Some(0);
            }
            Written::Failed => {
                self.refuse_after_claim(
                    conn,
                    session_key,
                    made,
                    Refusal::SessionStoreFailedAtConnect,
                    now_ms,
                    out,
                );
                return;
            }
        }
        // Accepted: what the CONNECT changed stands.
        if current {
            self.persist.claimed.remove(&session_key);
        }
        self.complete_connect(conn, session_key, connack, now_ms, out);
        self.resume_connection(conn, now_ms, out);
    }

    pub(crate) fn refuse_subscribe(
        &mut self,
        conn: Key,
        subscribe: &Subscribe,
        written: Written,
        out: &mut impl Transport,
    ) {
        let Some(version) = self.version(conn) else {
            return;
        };
        let refusal = match written {
            Written::Full => Refusal::SessionStoreFullAtSubscribe,
            _ => Refusal::SessionStoreFailedAtSubscribe,
        };
        let (code, reason) = (refusal.suback_code(version), refusal.reason());
        for _ in &subscribe.filters {
            self.stats.subscriptions_refused.count(refusal);
        }
        log::warn!(
            "refusing a SUBSCRIBE from {}: {reason}",
            self.client_id_of(conn)
        );
        let suback = Suback {
            packet_id: subscribe.packet_id,
            properties: Properties {
                reason_string: self.reason_string(conn, reason),
                ..Properties::default()
            },
            reason_codes: vec![code; subscribe.filters.len()],
        };
        self.send(conn, &Packet::Suback(suback), out);
    }

    fn refuse_unsubscribe(
        &mut self,
        conn: Key,
        unsubscribe: &Unsubscribe,
        now_ms: u64,
        out: &mut impl Transport,
    ) {
        let refusal = Refusal::UnsubscribeNotStored;
        if self.version(conn) != Some(ProtocolVersion::V5) {
            // A 3.1.1 UNSUBACK has no code to say it with.
            debug_assert_eq!(refusal.rule().v311, V311Answer::Close);
            self.persist.forget_connection(conn);
            self.end_connection(conn, Some(refusal), true, now_ms, out);
            return;
        }
        let unsuback = Unsuback {
            packet_id: unsubscribe.packet_id,
            properties: Properties {
                reason_string: self.reason_string(conn, refusal.reason()),
                ..Properties::default()
            },
            reason_codes: vec![refusal.code(); unsubscribe.filters.len()],
        };
        self.send(conn, &Packet::Unsuback(unsuback), out);
    }

    /// Brings back, as the broker starts, the sessions a provider kept, and
    /// ends those whose time ran out while it was stopped. A Will that
    /// carries a moment is published before its session's record goes; a
    /// Will with none (its connection was cut by the stop) waits on the
    /// restored session.
    pub fn restore_sessions(
        &mut self,
        entries: Vec<(String, Vec<u8>)>,
        log: &crate::core::broadcast::log::LogAtStart,
        now_ms: u64,
        out: &mut impl Transport,
    ) {
        self.restore_log(log);
        let mut replayed = HashMap::new();
        let now_unix_ms = self.unix_ms(now_ms);
        let (mut restored, mut ended) = (0u64, 0u64);
        for (client_id, bytes) in entries {
            let record = match SessionRecord::from_bytes(&bytes) {
                Ok(record) => record,
                Err(error) => {
                    // Nothing is written in its place: a CONNECT for the id
                    // begins a session the store then replaces.
                    log::error!(
                        "the stored session of {client_id} cannot be read ({}); it is left as it is",
                        error.0
                    );
                    continue;
                }
            };
            self.persist.stored.insert(client_id.as_str().into());
            // Held to the limit configured now, as a CONNECT's is.
            let mut record = record;
            record.expiry_interval_s = record
                .expiry_interval_s
                .min(self.settings.max_session_expiry_s);
            if record.expiry_interval_s == 0 {
                self.session_record_ended(&client_id, out);
                continue;
            }
            let key = self
                .sessions
                .insert(Session::new(&client_id, record.expiry_interval_s));
            let expires_unix_ms = match (record.expiry_interval_s, record.disconnected_unix_ms) {
                (u32::MAX, _) => None,
                (expiry_s, Some(at)) => Some(at.saturating_add(u64::from(expiry_s) * 1000)),
                // Cut by the stop: its time away starts now.
                (expiry_s, None) => Some(now_unix_ms.saturating_add(u64::from(expiry_s) * 1000)),
            };
            let mut will_due_now = None;
            if let Some(stored) = record.will {
                if let Some(name) = &stored.user_name {
                    self.persist
                        .user_names
                        .insert(client_id.as_str().into(), name.as_str().into());
                }
                match stored.due_unix_ms {
                    Some(due) if due <= now_unix_ms => will_due_now = Some(stored.will),
                    Some(due) => {
                        let due_ms = due.saturating_sub(self.settings.start_unix_ms);
                        self.set_pending_will(key, stored.will, due_ms);
                    }
                    None => self.set_pending_will(key, stored.will, NO_MOMENT),
                }
            }
            if let Some(session) = self.sessions.get_mut(key) {
                session.is_new = false;
                session.set_expires_at_ms(
                    expires_unix_ms.map(|at| at.saturating_sub(self.settings.start_unix_ms)),
                );
            }
            let mut refused = false;
            for s in &record.subscriptions {
                refused |= !self.restore_subscription(key, s, out);
            }
            self.latest_readers_restored(key);
            let expired = expires_unix_ms.is_some_and(|at| at <= now_unix_ms);
            if let Some(will) = will_due_now {
                // Published before the record that holds it changes.
                let id: Rc<str> = client_id.as_str().into();
                self.tallies
                    .will_published(crate::core::observe::WillCause::Start);
                self.publish_will(will, id, now_ms, out);
            }
            if expired || refused {
                log::info!("session {client_id} ended at start: it expired while the broker was stopped, or holds a refused subscription");
                if refused {
                    log::warn!("the session of {client_id} holds a subscription this broker now refuses; it ends");
                }
                // Only a Will with a moment falls due at a start.
                if let Some(session) = self.sessions.get_mut(key) {
                    if session
                        .pending_will
                        .as_ref()
                        .is_some_and(|p| p.1 == NO_MOMENT)
                    {
                        session.pending_will = None;
                    }
                }
                self.end_session(key, now_ms, out);
                ended += 1;
                if refused {
                    self.tallies.sessions_subscription_refused += 1;
                } else {
                    self.tallies.sessions_expired_while_stopped += 1;
                }
            } else {
                restored += 1;
                self.tallies.sessions_restored += 1;
                self.replay_log(key, log, &mut replayed, now_ms, out);
                self.save_session(key, now_ms, out);
            }
        }
        self.replay_groups(log, &mut replayed, now_ms, out);
        if restored + ended > 0 {
            log::info!("sessions restored: {restored}; ended at start: {ended}");
        }
    }

    fn set_pending_will(&mut self, session_key: Key, will: crate::codec::Will, due_ms: u64) {
        if let Some(session) = self.sessions.get_mut(session_key) {
            session.pending_will = Some(Box::new((will, due_ms)));
        }
    }

    /// Subscribes a restored session again, as its SUBSCRIBE did; false
    /// when the broker now refuses the filter.
    fn restore_subscription(
        &mut self,
        session_key: Key,
        stored: &StoredSubscription,
        out: &mut impl Transport,
    ) -> bool {
        // A queue's form is a worker's subscription, kept by the queue.
        if let Some(restored) = self.restore_queue_worker(session_key, &stored.filter) {
            return restored;
        }
        let form = match self.admit_filter(session_key, &stored.filter) {
            Ok(form) => form,
            Err(reason) => {
                log::warn!(
                    "a stored subscription to {:?} is refused: {reason}",
                    stored.filter
                );
                return false;
            }
        };
        let slice = stored.slice.clone().map(Rc::new);
        self.subscribe_one(
            session_key,
            &stored.filter,
            form,
            stored.options,
            stored.subscription_id,
            slice.clone(),
        );
        if let Form::Plain(filter) = form {
            // The stored position decides where a restored reader resumes.
            let entry = ReaderFilter {
                filter: filter.into(),
                options: SubscriptionOptions {
                    retain_handling: RetainHandling::SendAlways,
                    ..stored.options
                },
                subscription_id: stored.subscription_id,
                slice,
                names_channel: false,
            };
            self.subscribe_channels(session_key, entry, out);
        }
        true
    }
}

/// The drops of a client id's stored cursor and window.
fn log_drops(client_id: &str) -> Vec<Write> {
    vec![
        Write::DropEntry {
            channel: crate::core::broadcast::log::BROADCAST_SPACE.to_string(),
            key: crate::core::broadcast::log::window_key(client_id),
        },
        Write::DropPosition {
            channel: crate::core::broadcast::log::BROADCAST_SPACE.to_string(),
            reader: client_id.to_string(),
        },
    ]
}

/// What a session write's answer says of it.
pub(crate) fn written(answer: Answer) -> Written {
    match answer {
        // A batch is stored whole unless one of its writes was refused.
        Answer::Committed(Ok(outcomes)) => {
            if outcomes.iter().any(|o| matches!(o, Outcome::Refused(_))) {
                Written::Full
            } else {
                Written::Stored
            }
        }
        // A full device is a full provider to the client (0x97).
        Answer::Committed(Err(error @ store::StoreError::DeviceFull { .. })) => {
            log::warn!("a session record could not be stored: {error}");
            Written::Full
        }
        Answer::Committed(Err(error)) => {
            log::error!("a session record could not be stored: {error}");
            Written::Failed
        }
        other => {
            log::error!("a session write was answered {other:?}");
            Written::Failed
        }
    }
}
