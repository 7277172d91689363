//! `queue` channels in the core: a job is handed to one worker at a time,
//! held until that worker acknowledges or returns it, its lease runs out,
//! or its connection ends, and dead-lettered once its attempts are spent.
//!
//! A job is AVAILABLE, DELIVERING (its PUBLISH is on the wire and not yet
//! acknowledged: no clock runs), LEASED (acknowledged: the visibility
//! timeout runs from the PUBACK), or on its way out (resolved, or moving to
//! the dead-letter channel). The records themselves stay in the provider;
//! the core keeps only a small head per job (offset, receipt time,
//! attempts, when it may next be offered) and reads bodies when it offers
//! them.
//!
//! Every write that relieves a queue - the removal of a resolved job, the
//! attempt count and the move into the dead-letter channel - is allowed
//! into the provider's reserve, so a queue at its bound still drains.

#[cfg(test)]
pub(crate) mod broker_tests;
pub mod dead_letter;

use crate::core::observe::QueueCounts;
pub mod rules;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::rc::Rc;

use crate::codec::{Properties, QoS};
use crate::core::message::Message;
use crate::core::Key;
use crate::store::{self};
use rules::{Backoff, DeliveryId};

/// Records one body read brings in: enough to feed a few workers in turn.
pub(crate) const READ_BATCH_RECORDS: u32 = 32;
/// Bytes one body read may bring in.
pub(crate) const READ_BATCH_BYTES: u64 = 256 * 1024;
const _: () = assert!(READ_BATCH_RECORDS > 0 && READ_BATCH_BYTES > 0);
/// How often a dead-letter move that keeps failing the same way is warned of.
pub(crate) const MOVE_WARNING_EVERY_MS: u64 = 60_000;

/// One queue as configured, and the jobs its provider held at startup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueSettings {
    pub visibility_timeout_ms: u64,
    /// `None`: no job ever expires.
    pub job_expires_after_ms: Option<u64>,
    pub max_attempts: u32,
    pub backoff: Backoff,
    pub backoff_base_ms: u64,
    /// What the provider held at startup, ascending by offset.
    pub held: Vec<HeldJob>,
}

/// A job as the provider holds it, without its body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeldJob {
    pub offset: u64,
    pub received_at_unix_ms: u64,
    /// Attempts already counted, from its stored entry.
    pub attempts: u32,
}

/// The key a job's attempt count is stored under: zero-padded, so the
/// entries list in offset order.
pub fn attempts_key(offset: u64) -> String {
    format!("{offset:020}")
}

/// Reads a stored attempt count entry back.
pub fn parse_attempts(key: &str, value: &[u8]) -> Option<(u64, u32)> {
    let offset = key.parse().ok()?;
    let bytes: [u8; 4] = value.try_into().ok()?;
    Some((offset, u32::from_be_bytes(bytes)))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum JobState {
    Available,
    /// On the wire to `worker` under `packet_id`; no clock runs.
    Delivering {
        worker: Key,
        packet_id: u16,
        delivery: u64,
    },
    /// Acknowledged by `worker` at `since_ms`; taken back at `deadline_ms`.
    Leased {
        worker: Key,
        delivery: u64,
        since_ms: u64,
        deadline_ms: u64,
    },
    /// Acknowledged by its worker; its removal is being written.
    Resolving,
    /// Its move into the dead-letter channel is being written.
    Moving,
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct Job {
    pub(crate) received_at_unix_ms: u64,
    pub(crate) attempts: u32,
    /// The count storage has confirmed. A job is offered only when this has
    /// caught up with `attempts`: offering it sooner could hand out more
    /// attempts than a restart would find spent.
    pub(crate) stored_attempts: u32,
    /// Monotonic time before which it is not offered (its backoff).
    pub(crate) available_at_ms: u64,
    pub(crate) first_delivery_unix_ms: u64,
    pub(crate) last_delivery_unix_ms: u64,
    pub(crate) state: JobState,
}

/// Why a job left for the dead-letter channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DeadReason {
    AttemptsExhausted,
    Expired,
}

impl DeadReason {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            DeadReason::AttemptsExhausted => "attempts_exhausted",
            DeadReason::Expired => "expired",
        }
    }
}

pub(crate) struct Queue {
    pub(crate) settings: QueueSettings,
    /// Its channel, and its dead-letter channel, in the broker's list.
    pub(crate) channel: usize,
    pub(crate) dlq: Option<usize>,
    pub(crate) jobs: BTreeMap<u64, Job>,
    /// Sessions subscribed to its form, in the order they came.
    pub(crate) workers: Vec<Key>,
    /// Where the round-robin resumes.
    pub(crate) next_worker: usize,
    /// The job each worker holds, by session.
    pub(crate) held: HashMap<Key, u64>,
    /// Available jobs whose attempts are spent, to be dead-lettered.
    pub(crate) exhausted: BTreeSet<u64>,
    /// Bodies read from the provider and not yet offered.
    pub(crate) bodies: BTreeMap<u64, Rc<Message>>,
    pub(crate) reading: bool,
    /// A refused or failed dead-letter move holds every move back until
    /// the next tick, rather than retrying on each event.
    pub(crate) moves_paused_until_ms: u64,
    /// Jobs whose attempt count storage did not take: written again on
    /// the tick, since a restart reads the count from storage.
    pub(crate) unstored_counts: BTreeSet<u64>,
    /// Jobs whose dead-letter move failed, with the failure last warned of
    /// and when: a move that never fits is retried every tick, and warned
    /// of again only when its failure changes or a minute has passed.
    pub(crate) move_warnings: HashMap<u64, (String, u64)>,
    /// What the metrics catalogue counts of its work since start.
    pub(crate) counted: QueueCounts,
}

/// Every queue, and the deliveries of theirs on a wire.
#[derive(Default)]
pub(crate) struct Queues {
    pub(crate) list: Vec<Queue>,
    /// Queue index by channel index.
    pub(crate) by_channel: HashMap<usize, usize>,
    /// Channel indices that are a queue's dead-letter channel.
    pub(crate) dead_letter_channels: HashSet<usize>,
    /// Queue deliveries on a wire, by (session, packet identifier): they
    /// are never resent to a resumed session, whose job went back at the
    /// disconnect.
    pub(crate) on_wire: HashSet<(Key, u16)>,
    /// This run's nonce, the first part of every Delivery ID.
    pub(crate) run: u64,
    /// The last delivery counted in this run, over every queue, so no two
    /// attempts anywhere share an ID.
    pub(crate) next_delivery: u64,
    pub(crate) last_offer_ms: Option<u64>,
}

/// What a queue's storage request was for.
pub(crate) enum QueuePending {
    Read {
        queue: usize,
        from: u64,
    },
    Resolve {
        queue: usize,
        offset: u64,
        /// The connection and PUBACK slot of the `ack` answer, answered
        /// once the removal is committed.
        puback: Option<(Key, u64)>,
    },
    /// The move into the dead-letter channel; the letter is kept to serve
    /// that channel's readers once it is stored.
    DeadLetter {
        queue: usize,
        offset: u64,
        reason: DeadReason,
        message: Box<store::Message>,
    },
    AttemptCount {
        queue: usize,
        offset: u64,
        attempts: u32,
    },
}

impl Queues {
    /// Builds the queues from the channel list, taking the job heads out of
    /// it so they are held once; `run` makes this run's Delivery IDs unlike
    /// the last one's.
    pub fn new(channels: &mut [crate::core::ChannelSettings], run: u64) -> Queues {
        let mut queues = Queues {
            run,
            ..Queues::default()
        };
        let names: Vec<String> = channels.iter().map(|c| c.name.clone()).collect();
        for (index, channel) in channels.iter_mut().enumerate() {
            let Some(settings) = &mut channel.queue else {
                continue;
            };
            let held = std::mem::take(&mut settings.held);
            let dlq_name = dead_letter::dead_letter_channel_name(&channel.name);
            let dlq = names.iter().position(|n| *n == dlq_name);
            if let Some(dlq) = dlq {
                queues.dead_letter_channels.insert(dlq);
            }
            let jobs = held
                .iter()
                .map(|h| {
                    let job = Job {
                        received_at_unix_ms: h.received_at_unix_ms,
                        attempts: h.attempts,
                        stored_attempts: h.attempts,
                        // Restart: every held job is available at once.
                        available_at_ms: 0,
                        first_delivery_unix_ms: 0,
                        last_delivery_unix_ms: 0,
                        state: JobState::Available,
                    };
                    (h.offset, job)
                })
                .collect();
            let settings = settings.clone();
            let exhausted = settings_exhausted(&jobs, settings.max_attempts);
            queues.by_channel.insert(index, queues.list.len());
            queues.list.push(Queue {
                settings,
                channel: index,
                dlq,
                jobs,
                workers: Vec::new(),
                next_worker: 0,
                held: HashMap::new(),
                exhausted,
                bodies: BTreeMap::new(),
                reading: false,
                moves_paused_until_ms: 0,
                unstored_counts: BTreeSet::new(),
                move_warnings: HashMap::new(),
                counted: QueueCounts::default(),
            });
        }
        queues
    }

    pub fn is_queue(&self, channel: usize) -> bool {
        self.by_channel.contains_key(&channel)
    }

    pub fn is_dead_letter_channel(&self, channel: usize) -> bool {
        self.dead_letter_channels.contains(&channel)
    }

    /// Jobs a queue holds, in any state.
    #[cfg(test)]
    pub fn job_count(&self, channel: usize) -> Option<usize> {
        let q = self.by_channel.get(&channel)?;
        Some(self.list[*q].jobs.len())
    }
}

/// The jobs held at startup whose attempts are already spent.
fn settings_exhausted(jobs: &BTreeMap<u64, Job>, max_attempts: u32) -> BTreeSet<u64> {
    jobs.iter()
        .filter(|(_, job)| job.attempts >= max_attempts)
        .map(|(&offset, _)| offset)
        .collect()
}

/// A job as a worker is sent it: the publisher's topic, payload and
/// properties, the channel's labels, then `saguin-attempt`, with the
/// response topic and this attempt's Delivery ID.
pub(crate) fn job_message(
    body: &Message,
    queue: &str,
    id: DeliveryId,
    attempt: u32,
    now_unix_ms: u64,
) -> Message {
    let mut properties = Properties::clone(&body.properties);
    properties
        .user_properties
        .push(("saguin-attempt".into(), attempt.to_string()));
    properties.response_topic = Some(rules::response_topic(queue));
    properties.correlation_data = Some(id.encode());
    // The publisher's expiry is carried as what is left of it; one that has
    // run out is the worker's to judge from saguin-expires, not a reason to
    // withhold the job.
    properties.message_expiry_interval_s = body.remaining_expiry_s(now_unix_ms).ok().flatten();
    Message {
        topic: body.topic.clone(),
        payload: body.payload.clone(),
        qos: QoS::AtLeastOnce,
        retain: false,
        properties: Rc::new(properties),
        received_at_unix_ms: body.received_at_unix_ms,
        publisher: body.publisher.clone(),
    }
}

impl Queues {
    /// Channel `channel`'s depth and work out with workers, if it is a queue.
    pub(crate) fn observe(&self, channel: usize) -> Option<crate::core::observe::QueueObservation> {
        let queue = &self.list[*self.by_channel.get(&channel)?];
        let inflight = queue
            .jobs
            .values()
            .filter(|job| {
                matches!(
                    job.state,
                    JobState::Delivering { .. } | JobState::Leased { .. }
                )
            })
            .count();
        Some(crate::core::observe::QueueObservation {
            depth: queue.jobs.len() as u64,
            inflight: inflight as u64,
            counted: queue.counted.clone(),
        })
    }
}
