//! `append` channels in the core: a publish becomes a record once its
//! provider has committed it, and each subscribed session reads the channel
//! through a cursor of its own.
//!
//! The core never touches a provider. It asks through
//! [`Transport::store`](crate::core::Transport::store) and is answered through
//! [`Broker::handle_store_completion`], so a commit (an fsync) never runs on
//! the thread that serves connections.

pub mod append;
pub mod claimed_retained;
pub mod claims;
pub mod latest;
pub mod load;
pub(crate) mod positions;
pub mod queue;

use crate::core::refusal::Refusal;
use std::cell::RefCell;
use std::collections::{BTreeSet, VecDeque};
use std::rc::Rc;

use crate::codec::{topic, QoS, SubscriptionOptions};
use crate::core::channel::append::seek::SeekReply;
use crate::core::channel::positions::OwedDrop;
use crate::core::message::{labelled, Delivery, Message};
use crate::core::partition::{self, Slice};
use crate::core::Key;
use crate::store::{self, MessageId, Outcome};

/// Where a reader with no stored position starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChannelStart {
    /// Everything the channel still holds.
    Floor,
    /// Only what arrives next.
    Tail,
}

/// One `append` channel as the core needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChannelSettings {
    pub name: String,
    /// The filters it claims, `{a,b}` already expanded.
    pub filters: Vec<String>,
    /// Index of its provider in the shell's provider list.
    pub provider: usize,
    pub start: ChannelStart,
    pub max_bytes: Option<u64>,
    pub retention_period_s: Option<u64>,
    pub retention_bytes: Option<u64>,
    /// `next` and `floor` as the provider held them at startup.
    pub next: u64,
    pub floor: u64,
    /// The filter as the configuration writes it, braces and all, for the
    /// catalogue.
    pub written_filter: String,
    /// Set for a `latest` channel.
    pub latest: Option<crate::core::channel::latest::LatestSettings>,
    /// Set when the channel is a `queue`.
    pub queue: Option<crate::core::channel::queue::QueueSettings>,
}

/// How a stored record or value fared on its way to a session.
pub(crate) enum StoredSend {
    /// The session has no connection to send on.
    NoConnection,
    /// Its Message Expiry passed: counted, not sent.
    Expired,
    /// Larger than the client's Maximum Packet Size: not sent.
    TooLarge { conn: Key, delivery: Delivery },
    /// At QoS 1 or 2, with the session's deliveries.
    Queued,
    /// At QoS 0: whether the connection's buffer took it.
    Sent(bool),
}

/// Records a reader is handed per storage read: enough to fill a window,
/// few enough that one consumer catching up never holds the others.
pub(crate) const READ_BATCH_RECORDS: u32 = 64;
/// Recent records a channel keeps in memory, so that live readers are
/// served without a storage read.
pub(crate) const TAIL_CACHE_BYTES: u64 = 256 * 1024;
/// Records removed per trim write, so a sweep never holds the storage
/// thread for long.
pub(crate) const TRIM_BATCH_RECORDS: u32 = 1_000;
// A batch of none would never make progress.
const _: () = assert!(READ_BATCH_RECORDS > 0 && TRIM_BATCH_RECORDS > 0 && TAIL_CACHE_BYTES > 0);

pub(crate) struct Channel {
    pub settings: ChannelSettings,
    pub next: u64,
    pub floor: u64,
    /// The newest records, oldest first, for live readers.
    pub(crate) tail: VecDeque<Cached>,
    pub(crate) tail_bytes: u64,
    pub readers: Vec<Key>,
    /// A retention trim is in flight.
    pub(crate) trimming: bool,
    /// Its last append was refused for its `max_bytes` and nothing has
    /// been removed from it since: a QoS 2 publish into it is refused at
    /// PUBREC rather than accepted and refused at PUBREL.
    pub at_bound: bool,
    /// A `latest` channel's current values and subscribers.
    pub latest: Option<Box<crate::core::channel::latest::LatestState>>,
}

impl Channel {
    pub fn new(mut settings: ChannelSettings) -> Channel {
        Channel {
            latest: crate::core::channel::latest::LatestState::for_channel(&mut settings),
            next: settings.next,
            floor: settings.floor,
            settings,
            tail: VecDeque::new(),
            tail_bytes: 0,
            readers: Vec::new(),
            trimming: false,
            at_bound: false,
        }
    }

    /// A write that removes records was sent: the channel may have room.
    pub(crate) fn room_freed(&mut self) {
        self.at_bound = false;
    }

    /// Keeps a committed record for live readers, as stored: it is
    /// labelled the first time one is sent it.
    pub(crate) fn cache(&mut self, offset: u64, message: Message, id: MessageId) {
        // Counted as labelled, whether or not it ever is.
        let cost_bytes = message.cost_bytes() + LABELS_MAX_BYTES;
        self.tail_bytes += cost_bytes;
        self.tail.push_back(Cached {
            offset,
            cost_bytes,
            body: RefCell::new(CachedBody::Stored(message, id)),
        });
        while self.tail_bytes > TAIL_CACHE_BYTES && self.tail.len() > 1 {
            self.drop_oldest();
        }
    }

    /// Forgets the oldest cached record.
    pub(crate) fn drop_oldest(&mut self) {
        if let Some(old) = self.tail.pop_front() {
            self.tail_bytes -= old.cost_bytes;
        }
    }

    /// The record at `offset` as readers are sent it, if it is cached.
    pub(crate) fn cached(&self, offset: u64) -> Option<Rc<Message>> {
        let first = self.tail.front()?.offset;
        let index = offset.checked_sub(first)?;
        let cached = self.tail.get(usize::try_from(index).ok()?)?;
        Some(cached.labelled())
    }
}

/// The most a record's four labels (`saguin-id`, `-offset`, `-timestamp`,
/// `-expires`) add to its cost: names, values, and 4 bytes each.
const LABELS_MAX_BYTES: u64 = 160;

/// A record in a channel's tail. Most records of a channel nobody reads
/// live are never sent from here, so their labels are made only when one
/// is.
pub(crate) struct Cached {
    pub(crate) offset: u64,
    /// What the tail counts for it, fixed when it was cached.
    cost_bytes: u64,
    body: RefCell<CachedBody>,
}

enum CachedBody {
    Stored(Message, MessageId),
    Labelled(Rc<Message>),
    /// Only while being labelled.
    Taken,
}

impl Cached {
    fn labelled(&self) -> Rc<Message> {
        let mut body = self.body.borrow_mut();
        let labelled = match std::mem::replace(&mut *body, CachedBody::Taken) {
            CachedBody::Stored(message, id) => Rc::new(labelled(message, &id, self.offset)),
            CachedBody::Labelled(message) => message,
            CachedBody::Taken => unreachable!("a record is labelled once, under its borrow"),
        };
        *body = CachedBody::Labelled(Rc::clone(&labelled));
        labelled
    }
}

/// One of a session's filters as a channel reader holds it.
#[derive(Debug, Clone)]
pub(crate) struct ReaderFilter {
    pub filter: Box<str>,
    pub options: SubscriptionOptions,
    pub subscription_id: Option<u32>,
    /// The slice its SUBSCRIBE declared; `None` takes every topic.
    pub slice: Option<Rc<Slice>>,
    /// It reaches more than one channel, so its records say which one they
    /// are in (`saguin-channel`). Worked out by `subscribe_channels`.
    pub names_channel: bool,
}

impl ReaderFilter {
    /// Whether a record on `topic_name` is owed through this filter.
    pub fn reaches(&self, topic_name: &str) -> bool {
        topic::matches(&self.filter, topic_name)
            && partition::admits(self.slice.as_deref(), topic_name)
    }

    /// Adds `entry` to `filters`, replacing the one for its filter.
    pub fn set(filters: &mut Vec<ReaderFilter>, entry: ReaderFilter) {
        match filters.iter_mut().find(|f| f.filter == entry.filter) {
            Some(existing) => *existing = entry,
            None => filters.push(entry),
        }
    }
}

/// One session's cursor into one channel.
pub(crate) struct Reader {
    pub session: Key,
    pub channel: usize,
    /// The session's filters that reach this channel.
    pub filters: Vec<ReaderFilter>,
    /// False until the stored position, if any, has been read.
    pub(crate) ready: bool,
    /// A read of the stored position is with storage.
    pub(crate) loading: bool,
    /// A seek's position is being stored: until it is, this reader's own
    /// position is not written, so it cannot land after the seek's.
    pub seeking: bool,
    /// The next offset to consider sending.
    pub(crate) next_offset: u64,
    /// Offsets on the wire and not yet acknowledged.
    pub(crate) unacked: BTreeSet<u64>,
    /// Records read from storage and not yet served.
    pub(crate) buffer: VecDeque<(u64, Rc<Message>)>,
    pub(crate) reading: bool,
    /// The position changed since it was last stored.
    pub(crate) dirty: bool,
    /// Asked for with Retain Handling 2: start at the head, whatever is stored.
    pub(crate) from_head: bool,
    /// Bumped by a seek: an acknowledgement for a delivery sent before it
    /// must not move the position the seek just set.
    pub(crate) era: u32,
}

impl Reader {
    /// Where a reconnecting consumer resumes: the lowest unacknowledged
    /// offset, or the next one to send when nothing is on the wire.
    pub fn position(&self) -> u64 {
        self.unacked.first().copied().unwrap_or(self.next_offset)
    }

    /// The position, once the stored one has been read.
    pub fn known_position(&self) -> Option<u64> {
        self.ready.then(|| self.position())
    }
}

/// A committed record owed to durable shared groups, waiting on its log
/// write, with its publisher's answer.
pub(crate) type RecordForGroups = (Rc<Message>, Option<(Key, PendingAck)>);

/// What a storage request was for, so its completion can be answered.
pub(crate) enum Pending {
    /// A publish waiting for its record to be committed.
    Publish {
        conn: Key,
        /// The PUBACK slot of a QoS 1 publish, or the packet id of a released
        /// QoS 2 one awaiting its PUBCOMP.
        ack: PendingAck,
        channel: usize,
        message: Message,
        id: MessageId,
    },
    /// A Will, or another publish with nobody to answer.
    Unanswered {
        channel: usize,
        message: Message,
        id: MessageId,
    },
    Read {
        reader: Key,
        /// The reader's era when asked: a seek since makes the answer stale.
        era: u32,
    },
    Position {
        reader: Key,
    },
    /// Moved positions being stored: how many, for the debug line.
    Positions {
        writes: usize,
    },
    /// Stored positions dropped as their session ended or began: written
    /// again while they are still owed when the commit fails.
    PositionDrops {
        drops: Vec<OwedDrop>,
    },
    /// A session's positions, written ahead of its clean close.
    CloseAfterPositions {
        conn: Key,
    },
    Trim {
        channel: usize,
    },
    SeekTime {
        reply: SeekReply,
        session: Key,
        channel: usize,
        at_unix_ms: u64,
    },
    SeekStored {
        reply: SeekReply,
        session: Key,
        channel: usize,
        offset: u64,
    },
    /// A `latest` channel's own request.
    Latest(crate::core::channel::latest::LatestPending),
    Queue(crate::core::channel::queue::QueuePending),
}

impl Pending {
    /// The connection this request's answer is a reply to, if it is one.
    pub(crate) fn reply_to(&self) -> Option<Key> {
        match self {
            Pending::SeekTime { reply, .. } | Pending::SeekStored { reply, .. } => Some(reply.conn),
            Pending::Latest(crate::core::channel::latest::LatestPending::PointRead(read)) => {
                Some(read.reply.conn)
            }
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Copy)]
pub(crate) enum PendingAck {
    None,
    Puback { slot: u64 },
    Pubcomp { packet_id: u16 },
}

/// Lets a reader's position move past a delivery that is done with: its
/// last answer came, or it was passed over. A delivery from before a seek
/// (an older era) moves nothing.
pub(crate) fn release_reader_mark(
    readers: &mut crate::core::slab::Slab<Reader>,
    delivery: &Delivery,
) {
    let Some((reader_key, offset, era)) = delivery.reader else {
        return;
    };
    if let Some(reader) = readers.get_mut(reader_key).filter(|r| r.era == era) {
        reader.unacked.remove(&offset);
        reader.dirty = true;
    }
}

/// The offset a one-append commit stored its record at, or the refusal
/// its publisher is answered with.
pub(crate) fn commit_answer(
    result: Result<Vec<Outcome>, store::StoreError>,
) -> Result<u64, Refusal> {
    match result.as_deref() {
        Ok([Outcome::Appended { offset }, ..]) => Ok(*offset),
        Ok([Outcome::Refused(store::Refusal::ChannelFull), ..]) => Err(Refusal::ChannelFull),
        Ok([Outcome::Refused(_), ..]) => Err(Refusal::ChannelProviderFull),
        Ok(other) => {
            log::error!("a commit of one append came back as {other:?}");
            Err(Refusal::StorageUnexpected)
        }
        // A full device is answered as a full provider (0x97): space
        // returns, and the publisher may try again.
        Err(error @ store::StoreError::DeviceFull { .. }) => {
            log::warn!("storing a record failed: {error}");
            Err(Refusal::ChannelProviderFull)
        }
        // A failed provider said why once, at ERROR, when it failed; each
        // publish it refuses after is counted, not logged again in full.
        Err(error @ store::StoreError::Failed(_)) => {
            log::debug!("storing a record failed: {error}");
            Err(Refusal::RecordNotStored)
        }
        Err(error) => {
            log::error!("storing a record failed: {error}");
            Err(Refusal::RecordNotStored)
        }
    }
}

pub(crate) fn start_offset(channel: &Channel, from_head: bool) -> u64 {
    match (from_head, channel.settings.start) {
        (true, _) | (false, ChannelStart::Tail) => channel.next,
        (false, ChannelStart::Floor) => channel.floor,
    }
}

/// The delivery of one record to a reader: the highest QoS its matching
/// filters grant, every one of their Subscription Identifiers, and RETAIN
/// only where one asked for Retain As Published. `None` when no filter of
/// the session matches this record's topic, or No Local withholds it.
pub(crate) fn delivery_for(
    reader_key: Key,
    reader: &Reader,
    message: &Rc<Message>,
    offset: u64,
    own: bool,
) -> Option<Delivery> {
    let mut granted: Option<QoS> = None;
    let mut ids = Vec::new();
    let mut retain_as_published = false;
    // No Local is read per filter, against the publisher the record keeps.
    let owed = |f: &&ReaderFilter| f.reaches(&message.topic) && !(f.options.no_local && own);
    for entry in reader.filters.iter().filter(owed) {
        let options = entry.options;
        granted = Some(granted.map_or(options.qos, |q| q.max(options.qos)));
        ids.extend(entry.subscription_id);
        retain_as_published |= options.retain_as_published;
    }
    Some(Delivery {
        qos: granted?.min(message.qos),
        retain: retain_as_published && message.retain,
        subscription_ids: ids,
        group: None,
        reader: Some((reader_key, offset, reader.era)),
        latest: None,
        message: Rc::clone(message),
    })
}
