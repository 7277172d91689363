//! Work queues as the broker drives them: admitting a worker, offering
//! jobs, counting attempts, answering a worker's response, moving a job
//! to its dead-letter queue, and the storage answers behind each. The
//! queue's state and its pure rules live in [`crate::core::channel::queue`].

use crate::codec::{
    encoded_len, Packet, ProtocolVersion, Publish, QoS, ReasonCode, SubscriptionOptions,
};
use crate::core::channel::queue::rules::{
    available_at_ms, backoff_gap_ms, is_expired, DeliveryId, OFFER_TICK_MS,
};
use crate::core::channel::queue::*;
use crate::core::channel::Pending;
use crate::core::message::outgoing_publish;
use crate::core::message::{from_stored, labelled};
use crate::core::message::{Delivery, Message};
use crate::core::observe::QueueCounts;
use crate::core::refusal::Refusal;
use crate::core::session::{InFlight, OutboundStage};
use crate::core::StoreRequest;
use crate::core::{Broker, Key, Transport};
use crate::log_limit::{limited, LogLimit};
use crate::store::{self, Answer, MessageId, Outcome, Read, ReadLimit, Write};
use std::rc::Rc;

/// A worker's response the broker cannot act on: a worker stuck on a
/// superseded delivery would otherwise write a line per message.
pub(crate) static RESPONSE_IGNORED: LogLimit =
    LogLimit::new("ignoring a queue response", log::Level::Warn, 10, 10_000);

/// Jobs moved to a dead-letter channel: each is one an operator acts on,
/// but a queue nothing succeeds at moves them as fast as they arrive.
pub(crate) static DEAD_LETTERED: LogLimit =
    LogLimit::new("a job is dead-lettered", log::Level::Warn, 10, 10_000);

impl Broker {
    fn queue_name(&self, q: usize) -> &str {
        &self.channels[self.queues.list[q].channel].settings.name
    }

    fn queue_by_name(&self, name: &str) -> Option<usize> {
        self.queues
            .list
            .iter()
            .position(|q| self.channels[q.channel].settings.name == name)
    }

    fn provider_of(&self, q: usize) -> usize {
        self.channels[self.queues.list[q].channel].settings.provider
    }

    // ---- the way in ------------------------------------------------------

    /// A publish into a dead-letter channel is refused: it takes records
    /// from its queue's dead-lettering and from nowhere else.
    pub(crate) fn admit_queue_topic(&self, topic: &str) -> Result<(), Refusal> {
        self.admit_into_channel(self.channel_for(topic))
    }

    /// As [`Self::admit_queue_topic`], for a topic whose channel is known.
    pub(crate) fn admit_into_channel(&self, channel: Option<usize>) -> Result<(), Refusal> {
        match channel {
            Some(c) if self.queues.dead_letter_channels.contains(&c) => {
                Err(Refusal::DeadLetterPublish)
            }
            _ => Ok(()),
        }
    }

    /// Whether a topic under `$saguin/` is a queue's response topic.
    pub(crate) fn is_queue_response_topic(topic: &str) -> bool {
        rules::response_name(topic).is_some()
    }

    /// A message on its way into `channel`: a queue drops its retain flag
    /// (the job is the work, not a value to keep) and counts it.
    pub(crate) fn prepare_for_channel(&mut self, channel: usize, message: &mut Message) {
        if message.retain && self.queues.is_queue(channel) {
            message.retain = false;
            self.stats.queue_retain_ignored += 1;
            if let Some(&q) = self.queues.by_channel.get(&channel) {
                self.queues.list[q].counted.retain_ignored += 1;
            }
        }
    }

    /// A record was committed to a queue: it becomes an available job and
    /// is offered at once. Returns false for any other channel.
    pub(crate) fn queue_record_committed(
        &mut self,
        channel: usize,
        offset: u64,
        received_at_unix_ms: u64,
        now_ms: u64,
        out: &mut impl Transport,
    ) -> bool {
        let Some(&q) = self.queues.by_channel.get(&channel) else {
            return false;
        };
        self.queues.list[q].jobs.insert(
            offset,
            Job {
                received_at_unix_ms,
                attempts: 0,
                stored_attempts: 0,
                available_at_ms: 0,
                first_delivery_unix_ms: 0,
                last_delivery_unix_ms: 0,
                state: JobState::Available,
            },
        );
        self.service_queue(q, now_ms, out);
        true
    }

    // ---- workers ---------------------------------------------------------

    /// The checks a filter that is a queue's business meets, before anything
    /// is written of it: the queue it makes the session a worker of, or the
    /// refusal. `None` for every other filter.
    pub(crate) fn admit_queue_subscription(
        &self,
        conn: Key,
        session_key: Key,
        filter: &str,
        options: SubscriptionOptions,
    ) -> Option<Result<usize, Refusal>> {
        let Some(form) = rules::form_name(filter) else {
            return self.inside_a_queue(filter).map(Err);
        };
        let queue = form.ok().and_then(|name| self.queue_by_name(name));
        let Some(q) = queue else {
            return Some(Err(Refusal::NotAQueueForm));
        };
        if let Err(refusal) = self.authorize_worker(session_key, self.queues.list[q].channel) {
            return Some(Err(refusal));
        }
        if self.version(conn) != Some(ProtocolVersion::V5) {
            return Some(Err(Refusal::QueueNeedsMqtt5));
        }
        if options.no_local {
            return Some(Err(Refusal::QueueNoLocal));
        }
        if options.qos == QoS::AtMostOnce {
            return Some(Err(Refusal::QueueAtQos0));
        }
        let session = self.sessions.get(session_key)?;
        let is_new = !session.subscriptions.contains_key(filter);
        if is_new && session.subscriptions.len() >= self.settings.max_subscriptions as usize {
            return Some(Err(Refusal::TooManySubscriptions));
        }
        Some(Ok(q))
    }

    /// Answers a filter that is a queue's business: the form (granted at
    /// QoS 1 or refused with its code), another spelling under
    /// `$saguin/queue/`, or a plain filter lying inside a queue's filter.
    /// `None` for every other filter.
    pub(crate) fn subscribe_queue(
        &mut self,
        conn: Key,
        session_key: Key,
        filter: &str,
        options: SubscriptionOptions,
    ) -> Option<Result<ReasonCode, Refusal>> {
        let q = match self.admit_queue_subscription(conn, session_key, filter, options)? {
            Ok(q) => q,
            Err(refusal) => return Some(Err(refusal)),
        };
        self.enlist_worker(session_key, q, filter, options)?;
        Some(Ok(ReasonCode::GRANTED_QOS_1))
    }

    /// Records `filter` (a queue's form) in the session at QoS 1 and makes
    /// the session one of queue `q`'s workers. `None` without the session.
    fn enlist_worker(
        &mut self,
        session_key: Key,
        q: usize,
        filter: &str,
        options: SubscriptionOptions,
    ) -> Option<()> {
        let session = self.sessions.get_mut(session_key)?;
        let granted = SubscriptionOptions {
            qos: QoS::AtLeastOnce,
            ..options
        };
        session.subscriptions.insert(
            filter.into(),
            crate::core::session::SubscriptionEntry {
                options: granted,
                subscription_id: None,
                group: None,
                slice: None,
            },
        );
        self.sessions.recharge(session_key);
        let queue = &mut self.queues.list[q];
        if !queue.workers.contains(&session_key) {
            queue.workers.push(session_key);
        }
        Some(())
    }

    /// A restored session's subscription to a queue's form, made again as
    /// its SUBSCRIBE made it. `None` when `filter` is no queue's form,
    /// `Some(false)` when no queue has that name now.
    pub(crate) fn restore_queue_worker(&mut self, session_key: Key, filter: &str) -> Option<bool> {
        let form = rules::form_name(filter)?;
        let Some(q) = form.ok().and_then(|name| self.queue_by_name(name)) else {
            return Some(false);
        };
        self.enlist_worker(session_key, q, filter, SubscriptionOptions::default())?;
        Some(true)
    }

    /// A plain filter every topic of which a queue holds: refused, since a
    /// queue's records leave only through its form. A dead-letter filter is
    /// more exact than its queue's, so a filter inside it is a reader's.
    fn inside_a_queue(&self, filter: &str) -> Option<Refusal> {
        let filter = match crate::codec::topic::parse_shared(filter) {
            Some(Ok(shared)) => shared.filter,
            _ => filter,
        };
        for queue in &self.queues.list {
            let within = |c: usize| {
                self.channels[c]
                    .settings
                    .filters
                    .iter()
                    .any(|f| rules::filter_within(filter, f))
            };
            if within(queue.channel) && !queue.dlq.is_some_and(within) {
                return Some(Refusal::FilterInsideQueue);
            }
        }
        None
    }

    /// Offers work to a session that just subscribed or reopened its window.
    pub(crate) fn offer_to_worker(
        &mut self,
        session_key: Key,
        now_ms: u64,
        out: &mut impl Transport,
    ) {
        for q in 0..self.queues.list.len() {
            if self.queues.list[q].workers.contains(&session_key) {
                self.service_queue(q, now_ms, out);
            }
        }
    }

    /// A worker's form was unsubscribed: it is offered nothing more. A job
    /// it holds stays its own until answered or timed out.
    pub(crate) fn queue_unsubscribed(&mut self, session_key: Key, filter: &str) {
        let Some(Ok(name)) = rules::form_name(filter) else {
            return;
        };
        if let Some(q) = self.queue_by_name(name) {
            self.queues.list[q].workers.retain(|&w| w != session_key);
        }
    }

    /// A session ended: it is nobody's worker any more.
    pub(crate) fn queue_session_ended(&mut self, session_key: Key) {
        self.release_jobs_of(session_key);
        for queue in &mut self.queues.list {
            queue.workers.retain(|&w| w != session_key);
        }
    }

    /// A worker's connection ended: every job it held goes back at once,
    /// and a delivery still on the wire is forgotten, so a resumed session
    /// is never sent it again.
    pub(crate) fn queue_connection_ended(&mut self, session_key: Key) {
        let on_wire: Vec<u16> = self
            .queues
            .on_wire
            .iter()
            .filter(|(s, _)| *s == session_key)
            .map(|&(_, p)| p)
            .collect();
        if let Some(session) = self.sessions.get_mut(session_key) {
            for packet_id in &on_wire {
                if let Some(flight) = session.inflight.remove(packet_id) {
                    let cost = flight.delivery.message.cost_bytes();
                    session.inflight_bytes -= cost;
                    session.held_bytes -= cost;
                }
            }
        }
        for packet_id in on_wire {
            self.queues.on_wire.remove(&(session_key, packet_id));
        }
        self.release_jobs_of(session_key);
    }

    fn release_jobs_of(&mut self, session_key: Key) {
        for q in 0..self.queues.list.len() {
            let Some(offset) = self.queues.list[q].held.remove(&session_key) else {
                continue;
            };
            let Some(job) = self.queues.list[q].jobs.get(&offset).copied() else {
                continue;
            };
            self.count_release(q, job.attempts, |c| &mut c.redelivered);
            match job.state {
                // Never shown to have arrived: back with its attempt unspent.
                JobState::Delivering { .. } => self.set_available(q, offset, 0),
                // Measured from when the worker had it: its PUBACK.
                JobState::Leased { since_ms, .. } => {
                    let gap = self.gap_ms(q, job.attempts);
                    self.set_available(q, offset, available_at_ms(since_ms, gap));
                }
                _ => {}
            }
            log::debug!(
                "job {offset} of {} went back: its worker left",
                self.queue_name(q)
            );
        }
    }

    /// A job taken from its worker by `counter`'s cause; one whose last
    /// attempt that was goes to the dead-letter channel and is counted
    /// there instead, so each release is counted once.
    fn count_release(
        &mut self,
        q: usize,
        attempts: u32,
        counter: fn(&mut QueueCounts) -> &mut u64,
    ) {
        let queue = &mut self.queues.list[q];
        if attempts < queue.settings.max_attempts {
            *counter(&mut queue.counted) += 1;
        }
    }

    fn gap_ms(&self, q: usize, attempts: u32) -> u64 {
        let s = &self.queues.list[q].settings;
        backoff_gap_ms(s.backoff, s.backoff_base_ms, attempts)
    }

    /// Puts a job back; one whose attempts are spent is dead-lettered instead.
    fn set_available(&mut self, q: usize, offset: u64, available_at: u64) {
        let queue = &mut self.queues.list[q];
        // A job is in one state: one going back is no worker's.
        debug_assert!(queue.held.values().all(|&held| held != offset));
        if let Some(job) = queue.jobs.get_mut(&offset) {
            job.state = JobState::Available;
            job.available_at_ms = available_at;
            if job.attempts >= queue.settings.max_attempts {
                queue.exhausted.insert(offset);
            }
        }
    }

    // ---- the offer -------------------------------------------------------

    /// Runs every queue's clocks and offers: leases past their deadline go
    /// back, waiting jobs past `job_expires_after` are dead-lettered, and
    /// free workers are offered work. On the offer tick.
    ///
    /// The offer tick runs on the first call in each `OFFER_TICK_MS` slot
    /// of monotonic time, the slots due times are rounded to, rather than
    /// `OFFER_TICK_MS` after the last run: whatever the phase of the
    /// shell's tick, a job due at a slot's start goes out on the first call
    /// at or after it.
    pub(crate) fn queue_tick(&mut self, now_ms: u64, out: &mut impl Transport) {
        let slot = now_ms / OFFER_TICK_MS;
        if self
            .queues
            .last_offer_ms
            .is_some_and(|at| at / OFFER_TICK_MS >= slot)
        {
            return;
        }
        self.queues.last_offer_ms = Some(now_ms);
        for q in 0..self.queues.list.len() {
            let expired: Vec<(u64, Key, u64, u32)> = self.queues.list[q]
                .jobs
                .iter()
                .filter_map(|(&offset, job)| match job.state {
                    JobState::Leased {
                        worker,
                        since_ms,
                        deadline_ms,
                        ..
                    } if deadline_ms <= now_ms => Some((offset, worker, since_ms, job.attempts)),
                    _ => None,
                })
                .collect();
            for (offset, worker, since_ms, attempts) in expired {
                log::debug!("job {offset} of {}: its lease ran out", self.queue_name(q));
                self.queues.list[q].held.remove(&worker);
                self.count_release(q, attempts, |c| &mut c.redelivered);
                let gap = self.gap_ms(q, attempts);
                self.set_available(q, offset, available_at_ms(since_ms, gap));
            }
            self.store_unstored_counts(q, out);
            self.service_queue(q, now_ms, out);
        }
    }

    /// Offers a queue's available jobs to its free workers.
    pub(crate) fn service_queue(&mut self, q: usize, now_ms: u64, out: &mut impl Transport) {
        self.walk_queue(q, now_ms, out);
    }

    /// Walks a queue's jobs. Jobs out of attempts are dead-lettered first,
    /// wherever they stand. Then, in offset order, a job older than
    /// `job_expires_after` is dead-lettered and an available one whose
    /// backoff has passed and whose attempt count is stored is offered to
    /// the next free worker; a waiting one is skipped, never waited on. The walk stops where a body must first
    /// be read, and at the first due job no worker is free for: the jobs
    /// behind it arrived later, so none of them has expired either. On the
    /// tick this is the sweep of expired work.
    fn walk_queue(&mut self, q: usize, now_ms: u64, out: &mut impl Transport) {
        let may_move = now_ms >= self.queues.list[q].moves_paused_until_ms;
        let mut after = 0u64;
        while let Some(&offset) = self.queues.list[q].exhausted.range(after..).next() {
            if !may_move {
                break;
            }
            after = offset + 1;
            let available = self.queues.list[q]
                .jobs
                .get(&offset)
                .is_some_and(|job| job.state == JobState::Available);
            if !available {
                self.queues.list[q].exhausted.remove(&offset);
                continue;
            }
            let Some(body) = self.job_body(q, offset) else {
                self.read_bodies(q, offset, out);
                return;
            };
            self.queues.list[q].exhausted.remove(&offset);
            let reason = DeadReason::AttemptsExhausted;
            if !self.dead_letter(q, offset, &body, reason, now_ms, out) {
                // Storage is behind: tried again on the next walk.
                self.queues.list[q].exhausted.insert(offset);
                return;
            }
        }
        let now_unix_ms = self.unix_ms(now_ms);
        let mut after = 0u64;
        loop {
            let queue = &self.queues.list[q];
            let settings = &queue.settings;
            let next = queue
                .jobs
                .range(after..)
                .find(|(_, job)| job.state == JobState::Available)
                .map(|(&offset, job)| (offset, *job));
            let Some((offset, job)) = next else {
                return;
            };
            after = offset + 1;
            let expired = is_expired(
                job.received_at_unix_ms,
                settings.job_expires_after_ms,
                now_unix_ms,
            );
            let waiting = job.attempts >= settings.max_attempts
                || job.available_at_ms > now_ms
                || job.stored_attempts < job.attempts;
            if (expired && !may_move) || (!expired && waiting) {
                continue;
            }
            let worker = if expired {
                None
            } else {
                match self.next_free_worker(q) {
                    Some(worker) => Some(worker),
                    // The jobs behind arrived later: none has expired.
                    None => return,
                }
            };
            let Some(body) = self.job_body(q, offset) else {
                self.read_bodies(q, offset, out);
                return;
            };
            match worker {
                None => {
                    if !self.dead_letter(q, offset, &body, DeadReason::Expired, now_ms, out) {
                        return;
                    }
                }
                Some(worker) => self.offer(q, offset, worker, &body, now_ms, out),
            }
        }
    }

    /// The next worker, round-robin, that is connected, holds no job from
    /// this queue and has room on its wire.
    fn next_free_worker(&mut self, q: usize) -> Option<Key> {
        let count = self.queues.list[q].workers.len();
        for step in 0..count {
            let queue = &self.queues.list[q];
            let index = (queue.next_worker + step) % count;
            let worker = queue.workers[index];
            if queue.held.contains_key(&worker)
                || !self.session_has_room(worker)
                || !self.may_consume(worker, queue.channel)
            {
                continue;
            }
            self.queues.list[q].next_worker = index + 1;
            return Some(worker);
        }
        None
    }

    fn job_body(&self, q: usize, offset: u64) -> Option<Rc<Message>> {
        let queue = &self.queues.list[q];
        self.channels[queue.channel]
            .cached(offset)
            .or_else(|| queue.bodies.get(&offset).cloned())
    }

    fn read_bodies(&mut self, q: usize, from_offset: u64, out: &mut impl Transport) {
        if self.queues.list[q].reading {
            return;
        }
        let ticket = self.next_ticket();
        let request = StoreRequest::Read {
            ticket,
            channel: self.queue_name(q).to_string(),
            from_offset,
            limit: ReadLimit {
                max_records: READ_BATCH_RECORDS,
                max_bytes: READ_BATCH_BYTES,
            },
        };
        if out.store(self.provider_of(q), request) {
            self.queues.list[q].reading = true;
            let pending = QueuePending::Read {
                queue: q,
                from: from_offset,
            };
            self.pending.insert(ticket, Pending::Queue(pending));
        }
        // A busy storage thread is asked again on the next tick.
    }

    /// Sends one job to one worker: the publisher's message with the
    /// queue's labels, at QoS 1, on the worker's window.
    fn offer(
        &mut self,
        q: usize,
        offset: u64,
        worker: Key,
        body: &Rc<Message>,
        now_ms: u64,
        out: &mut impl Transport,
    ) {
        let Some(conn) = self.sessions.get(worker).and_then(|s| s.connection) else {
            return;
        };
        let Some(active) = self.connections.get(conn).and_then(|c| c.active.as_ref()) else {
            return;
        };
        let max_packet_size = active.client_max_packet_size;
        self.queues.next_delivery += 1;
        let delivery = self.queues.next_delivery;
        let attempt = self.queues.list[q].jobs[&offset].attempts + 1;
        let id = DeliveryId {
            run: self.queues.run,
            delivery,
            offset,
        };
        let name = self.queue_name(q).to_string();
        let now_unix_ms = self.unix_ms(now_ms);
        let message = Rc::new(job_message(body, &name, id, attempt, now_unix_ms));
        let delivery_entry = Delivery {
            message: Rc::clone(&message),
            qos: QoS::AtLeastOnce,
            retain: false,
            subscription_ids: Vec::new(),
            group: None,
            reader: None,
            latest: None,
        };
        let session = self.sessions.get_mut(worker).expect("checked above");
        let packet_id = session.allocate_packet_id();
        let packet = Packet::Publish(outgoing_publish(&delivery_entry, Some(packet_id), None));
        if encoded_len(&packet, ProtocolVersion::V5) > max_packet_size as usize {
            // The job stays available, its attempt unspent.
            let reason = Refusal::JobTooLarge;
            self.end_connection(conn, Some(reason), true, now_ms, out);
            return;
        }
        let cost = message.cost_bytes();
        session.inflight_bytes += cost;
        session.held_bytes += cost;
        session.inflight.insert(
            packet_id,
            InFlight {
                delivery: delivery_entry,
                stage: OutboundStage::Published,
            },
        );
        out.send(conn, ProtocolVersion::V5, &packet, false);
        log::debug!(
            "job {offset} of {name} offered to {} as delivery {delivery}, attempt {attempt}",
            session.client_id
        );
        self.stats.deliveries_sent += 1;
        self.queues.on_wire.insert((worker, packet_id));
        let queue = &mut self.queues.list[q];
        queue.counted.delivered += 1;
        let previous = queue.held.insert(worker, offset);
        debug_assert!(previous.is_none(), "a worker holds one job at a time");
        queue.bodies.remove(&offset);
        let job = queue.jobs.get_mut(&offset).expect("offered above");
        debug_assert_eq!(
            job.state,
            JobState::Available,
            "only a waiting job is offered"
        );
        job.state = JobState::Delivering {
            worker,
            packet_id,
            delivery,
        };
        if job.first_delivery_unix_ms == 0 {
            job.first_delivery_unix_ms = now_unix_ms;
        }
        job.last_delivery_unix_ms = now_unix_ms;
    }

    // ---- answers ---------------------------------------------------------

    /// A PUBACK from a worker: a job on the wire under that identifier is
    /// now leased, its attempt counted and its visibility clock started.
    /// The window it reopens is offered work at once.
    pub(crate) fn queue_puback(
        &mut self,
        session_key: Key,
        packet_id: u16,
        now_ms: u64,
        out: &mut impl Transport,
    ) {
        if self.queues.on_wire.remove(&(session_key, packet_id)) {
            for q in 0..self.queues.list.len() {
                let Some(&offset) = self.queues.list[q].held.get(&session_key) else {
                    continue;
                };
                let timeout_ms = self.queues.list[q].settings.visibility_timeout_ms;
                let Some(job) = self.queues.list[q].jobs.get_mut(&offset) else {
                    continue;
                };
                if let JobState::Delivering {
                    worker,
                    packet_id: on_wire,
                    delivery,
                } = job.state
                {
                    if on_wire == packet_id && worker == session_key {
                        debug_assert!(timeout_ms > 0, "a lease runs for a while");
                        job.state = JobState::Leased {
                            worker,
                            delivery,
                            since_ms: now_ms,
                            deadline_ms: now_ms + timeout_ms,
                        };
                        log::debug!(
                            "job {offset} of {} leased for {timeout_ms} ms",
                            self.queue_name(q)
                        );
                        self.count_attempt(q, offset, out);
                    }
                }
            }
        }
        self.offer_to_worker(session_key, now_ms, out);
    }

    fn count_attempt(&mut self, q: usize, offset: u64, out: &mut impl Transport) {
        let Some(job) = self.queues.list[q].jobs.get_mut(&offset) else {
            return;
        };
        job.attempts = job.attempts.saturating_add(1);
        self.store_attempts(q, offset, out);
    }

    /// Writes a job's attempt count as it stands; one storage cannot take
    /// now is written again on the tick.
    fn store_attempts(&mut self, q: usize, offset: u64, out: &mut impl Transport) {
        let Some(job) = self.queues.list[q].jobs.get(&offset) else {
            return;
        };
        let attempts = job.attempts;
        // Written into the reserve if need be: an attempt count is what
        // lets a job reach its dead-lettering (RFC 0005 "Bounds").
        let write = Write::PutEntry {
            channel: self.queue_name(q).to_string(),
            key: attempts_key(offset),
            value: attempts.to_be_bytes().to_vec(),
            use_reserve: true,
        };
        let pending = QueuePending::AttemptCount {
            queue: q,
            offset,
            attempts,
        };
        if self.queue_commit(q, vec![write], pending, out) {
            self.queues.list[q].unstored_counts.remove(&offset);
        } else {
            log::warn!("storage is behind: the attempt count of job {offset} is written again on the next tick");
            self.queues.list[q].unstored_counts.insert(offset);
        }
    }

    /// Writes again the attempt counts storage did not take. A job being
    /// resolved or moved is left: its count goes with it, and a write after
    /// that would outlive the job.
    fn store_unstored_counts(&mut self, q: usize, out: &mut impl Transport) {
        let offsets: Vec<u64> = self.queues.list[q]
            .unstored_counts
            .iter()
            .copied()
            .collect();
        for offset in offsets {
            let state = self.queues.list[q].jobs.get(&offset).map(|j| j.state);
            match state {
                None => {
                    self.queues.list[q].unstored_counts.remove(&offset);
                }
                Some(JobState::Resolving | JobState::Moving) => {}
                Some(_) => self.store_attempts(q, offset, out),
            }
        }
    }

    fn queue_commit(
        &mut self,
        q: usize,
        writes: Vec<Write>,
        pending: QueuePending,
        out: &mut impl Transport,
    ) -> bool {
        let ticket = self.next_ticket();
        let frees = writes
            .iter()
            .any(|w| matches!(w, Write::Remove { .. } | Write::Move { .. }));
        if out.store(self.provider_of(q), StoreRequest::Commit { ticket, writes }) {
            if frees {
                let channel = self.queues.list[q].channel;
                self.channels[channel].room_freed();
            }
            self.pending.insert(ticket, Pending::Queue(pending));
            true
        } else {
            false
        }
    }

    /// A publish on `$saguin/queue/<name>/response`. Applied only when its
    /// Correlation Data names the job's current delivery and the session
    /// answering is the one holding it; anything else is ignored and logged,
    /// and the lease runs out as it would have. `Err` when the topic names
    /// no queue; `Ok(true)` when an `ack` took `puback` (the answer's
    /// connection and PUBACK slot), to answer once the job's removal is
    /// committed, so a worker told its ack arrived never finds the job
    /// offered again after a power cut.
    pub(crate) fn handle_queue_response(
        &mut self,
        session_key: Key,
        publish: &Publish,
        puback: Option<(Key, u64)>,
        now_ms: u64,
        out: &mut impl Transport,
    ) -> Result<bool, Refusal> {
        let name = rules::response_name(&publish.topic).unwrap_or_default();
        let Some(q) = self.queue_by_name(name) else {
            return Err(Refusal::ResponseNamesNoQueue);
        };
        let client_id = self
            .sessions
            .get(session_key)
            .map(|s| s.client_id.to_string())
            .unwrap_or_default();
        let outcome = match publish.payload.as_slice() {
            b"ack" => Some(true),
            b"return" => Some(false),
            _ => None,
        };
        let Some(ack) = outcome else {
            limited!(RESPONSE_IGNORED, now_ms, "ignoring a response from {client_id} on {name}: its payload is neither ack nor return");
            return Ok(false);
        };
        let id = publish
            .properties
            .correlation_data
            .as_deref()
            .and_then(DeliveryId::decode)
            .filter(|id| id.run == self.queues.run);
        let Some(id) = id else {
            limited!(RESPONSE_IGNORED, now_ms, "ignoring a response from {client_id} on {name}: its Correlation Data names no delivery");
            return Ok(false);
        };
        let job = self.queues.list[q].jobs.get(&id.offset).copied();
        let holder = job.and_then(|job| match job.state {
            JobState::Delivering {
                worker, delivery, ..
            }
            | JobState::Leased {
                worker, delivery, ..
            } if delivery == id.delivery => {
                Some((worker, matches!(job.state, JobState::Delivering { .. })))
            }
            _ => None,
        });
        let Some((worker, unacknowledged)) = holder else {
            limited!(RESPONSE_IGNORED, now_ms, "ignoring a response from {client_id} on {name}: delivery {} of job {} is not the job's current one", id.delivery, id.offset);
            return Ok(false);
        };
        if worker != session_key {
            limited!(
                RESPONSE_IGNORED,
                now_ms,
                "ignoring a response from {client_id} on {name}: job {} is held by another session",
                id.offset
            );
            return Ok(false);
        }
        let offset = id.offset;
        self.queues.list[q].held.remove(&session_key);
        // An answer before the PUBACK is the proof the worker had the job.
        // The count dies with an acknowledged job, so only a return's is
        // written.
        if unacknowledged && ack {
            if let Some(job) = self.queues.list[q].jobs.get_mut(&offset) {
                job.attempts = job.attempts.saturating_add(1);
            }
        } else if unacknowledged {
            self.count_attempt(q, offset, out);
        }
        let queue = &mut self.queues.list[q];
        let mut deferred = false;
        if ack {
            queue.jobs.get_mut(&offset).expect("found above").state = JobState::Resolving;
            let name = name.to_string();
            let writes = vec![
                Write::Remove {
                    channel: name.clone(),
                    offset,
                },
                Write::DropEntry {
                    channel: name.clone(),
                    key: attempts_key(offset),
                },
            ];
            let pending = QueuePending::Resolve {
                queue: q,
                offset,
                puback,
            };
            if self.queue_commit(q, writes, pending, out) {
                self.queues.list[q].counted.acknowledged += 1;
                deferred = puback.is_some();
            } else {
                // Storage is behind: the job is offered again rather than
                // lost; its worker's answer cannot be kept now.
                log::warn!("storage is behind: job {offset} of {name} could not be resolved and is offered again");
                self.set_available(q, offset, 0);
                // An ack before the PUBACK counted its attempt in memory only.
                self.queues.list[q].unstored_counts.insert(offset);
            }
        } else {
            let attempts = self.queues.list[q].jobs[&offset].attempts;
            self.count_release(q, attempts, |c| &mut c.returned);
            let gap = self.gap_ms(q, attempts);
            log::debug!(
                "job {offset} of {name} returned by {client_id} after attempt {attempts}; offered again in {gap} ms"
            );
            self.set_available(q, offset, available_at_ms(now_ms, gap));
        }
        // An answer offers that worker its next job at once.
        self.offer_to_worker(session_key, now_ms, out);
        Ok(deferred)
    }

    // ---- dead letters ----------------------------------------------------

    /// Moves a job into its queue's dead-letter channel with the reasons it
    /// failed, dropping its attempt count, in one transaction. The move may
    /// use the provider's reserve: it is what drains a queue nothing
    /// succeeds at.
    fn dead_letter(
        &mut self,
        q: usize,
        offset: u64,
        body: &Rc<Message>,
        reason: DeadReason,
        now_ms: u64,
        out: &mut impl Transport,
    ) -> bool {
        let Some(dlq) = self.queues.list[q].dlq else {
            return false;
        };
        let job = self.queues.list[q].jobs[&offset];
        let name = self.queue_name(q).to_string();
        let claimed_by = self
            .claims
            .claim_for_topic(&body.topic)
            .filter(|c| c.channel == self.queues.list[q].channel)
            .map(|c| self.claims.filter(c).to_string())
            .unwrap_or_else(|| "#".to_string());
        let topic = dead_letter::dead_letter_topic(&claimed_by, &body.topic);
        let id = body
            .properties
            .user_properties
            .iter()
            .find(|(k, _)| k == "saguin-id")
            .map(|(_, v)| MessageId::from_publisher(v))
            .unwrap_or_else(|| self.id_generator.next_id(body.received_at_unix_ms));
        let mut user_properties: Vec<(String, String)> = body
            .properties
            .user_properties
            .iter()
            .filter(|(k, _)| !k.starts_with("saguin-"))
            .cloned()
            .collect();
        let headers = [
            ("saguin-dlq-channel", name.clone()),
            ("saguin-dlq-offset", offset.to_string()),
            ("saguin-dlq-attempts", job.attempts.to_string()),
            ("saguin-dlq-first", job.first_delivery_unix_ms.to_string()),
            ("saguin-dlq-last", job.last_delivery_unix_ms.to_string()),
            ("saguin-dlq-at", self.unix_ms(now_ms).to_string()),
            ("saguin-dlq-reason", reason.as_str().to_string()),
        ];
        user_properties.extend(headers.into_iter().map(|(k, v)| (k.to_string(), v)));
        let p = &body.properties;
        let now_unix_ms = self.unix_ms(now_ms);
        let message = store::Message {
            id,
            // A dead letter is received when it is filed, so the dead-letter
            // channel's retention counts from then: counted from the job's
            // own arrival it could delete the letter as it lands.
            received_at_ms: now_unix_ms,
            topic,
            payload: body.payload.clone(),
            user_properties,
            payload_format_indicator: p.payload_format_indicator,
            // What was left of the expiry when filed; none once it ran out.
            message_expiry_interval_s: body.remaining_expiry_s(now_unix_ms).ok().flatten(),
            content_type: p.content_type.clone(),
            response_topic: p.response_topic.clone(),
            correlation_data: p.correlation_data.clone(),
            publisher: body.publisher.as_deref().map(str::to_string),
            qos: body.qos as u8,
            retain: false,
        };
        // The attempt count goes with the record, and stays if the move is
        // refused: a refused write does not stop the rest of its batch.
        let writes = vec![Write::Move {
            channel: name.clone(),
            offset,
            to: self.channels[dlq].settings.name.clone(),
            message: message.clone(),
            drop_entry: Some(attempts_key(offset)),
        }];
        let pending = QueuePending::DeadLetter {
            queue: q,
            offset,
            reason,
            message: Box::new(message),
        };
        if !self.queue_commit(q, writes, pending, out) {
            return false;
        }
        if let Some(job) = self.queues.list[q].jobs.get_mut(&offset) {
            job.state = JobState::Moving;
        }
        true
    }

    // ---- storage answers -------------------------------------------------

    pub(crate) fn queue_store_answered(
        &mut self,
        pending: QueuePending,
        answer: Answer,
        now_ms: u64,
        out: &mut impl Transport,
    ) {
        match (pending, answer) {
            (QueuePending::Read { queue, from }, Answer::Read(result)) => {
                self.queues.list[queue].reading = false;
                let lost = match result {
                    Ok(Read::Records(batch)) => {
                        let q = &mut self.queues.list[queue];
                        q.bodies.clear();
                        for record in batch.records {
                            if q.jobs.contains_key(&record.offset) {
                                let message = from_stored(&record.message);
                                let body = labelled(message, &record.message.id, record.offset);
                                q.bodies.insert(record.offset, Rc::new(body));
                            }
                        }
                        (!q.bodies.contains_key(&from)).then_some(from + 1)
                    }
                    Ok(Read::BelowFloor { floor }) => Some(floor),
                    Ok(Read::PastNext { .. }) => Some(u64::MAX),
                    Err(error) => {
                        log::warn!("reading jobs failed: {error}; tried again on the next tick");
                        return;
                    }
                };
                if let Some(below) = lost {
                    self.forget_missing_jobs(queue, from, below);
                }
                self.service_queue(queue, now_ms, out);
            }
            (
                QueuePending::Resolve {
                    queue,
                    offset,
                    puback,
                },
                Answer::Committed(result),
            ) => {
                // A success either way: a worker is not told whether its
                // answer counted, only once the broker is done with it.
                if let Some((conn, slot)) = puback {
                    self.complete_puback(conn, slot, Ok(()), now_ms, out);
                }
                match result.as_deref() {
                    Ok([Outcome::Removed { floor, .. }, ..]) => {
                        log::debug!(
                            "job {offset} of {} acknowledged and deleted",
                            self.queue_name(queue)
                        );
                        self.forget_job(queue, offset, *floor);
                    }
                    other => {
                        log::warn!(
                            "job {offset} of {} was acknowledged but its removal failed ({other:?}); it is offered again",
                            self.queue_name(queue)
                        );
                        self.set_available(queue, offset, 0);
                        self.queues.list[queue].unstored_counts.insert(offset);
                    }
                }
            }
            (
                QueuePending::DeadLetter {
                    queue,
                    offset,
                    reason,
                    message,
                },
                Answer::Committed(result),
            ) => {
                match result.as_deref() {
                    Ok(
                        [Outcome::Moved {
                            to_offset: Some(at),
                            floor,
                        }, ..],
                    ) => {
                        limited!(
                            DEAD_LETTERED,
                            now_ms,
                            "job {offset} of {} is dead-lettered: {}",
                            self.queue_name(queue),
                            reason.as_str()
                        );
                        self.forget_job(queue, offset, *floor);
                        let counted = &mut self.queues.list[queue].counted;
                        counted.dead_lettered += 1;
                        counted.expired += u64::from(reason == DeadReason::Expired);
                        let dlq = self.queues.list[queue].dlq.expect("moved into it");
                        // Its readers are served as from any append.
                        self.record_committed(
                            dlq,
                            from_stored(&message),
                            message.id.clone(),
                            *at,
                            None,
                            now_ms,
                            out,
                        );
                    }
                    Ok(
                        [Outcome::Moved {
                            to_offset: None,
                            floor,
                        }, ..],
                    ) => {
                        log::error!(
                            "job {offset} of {} was no longer held when it was dead-lettered",
                            self.queue_name(queue)
                        );
                        self.forget_job(queue, offset, *floor);
                    }
                    other => {
                        // Refused or failed: the job stays as it was, its
                        // attempts untouched, and moves are tried again on
                        // the next tick.
                        let failure = format!("{other:?}");
                        let q = &mut self.queues.list[queue];
                        let warned = q.move_warnings.get(&offset).is_some_and(|(last, at)| {
                            *last == failure && now_ms.saturating_sub(*at) < MOVE_WARNING_EVERY_MS
                        });
                        if warned {
                            log::debug!("job {offset} still could not be dead-lettered");
                        } else {
                            log::warn!(
                                "job {offset} of {} could not be dead-lettered ({failure}); it is tried again each tick",
                                self.queue_name(queue)
                            );
                            self.queues.list[queue]
                                .move_warnings
                                .insert(offset, (failure, now_ms));
                        }
                        self.queues.list[queue].moves_paused_until_ms = now_ms + OFFER_TICK_MS;
                        self.set_available(queue, offset, 0);
                    }
                }
            }
            (
                QueuePending::AttemptCount {
                    queue,
                    offset,
                    attempts,
                },
                Answer::Committed(result),
            ) => {
                if !matches!(result.as_deref(), Ok([Outcome::EntryPut])) {
                    log::warn!("the attempt count of job {offset} was not stored ({result:?}); it is written again on the next tick");
                    if self.queues.list[queue].jobs.contains_key(&offset) {
                        self.queues.list[queue].unstored_counts.insert(offset);
                    }
                    return;
                }
                let Some(job) = self.queues.list[queue].jobs.get_mut(&offset) else {
                    return;
                };
                job.stored_attempts = job.stored_attempts.max(attempts);
                // A job held back for its count is offered once it is stored.
                if job.state == JobState::Available && job.stored_attempts >= job.attempts {
                    self.service_queue(queue, now_ms, out);
                }
            }
            (_, answer) => {
                log::error!("a queue's storage answer did not match its request: {answer:?}")
            }
        }
    }

    /// Jobs from `from` up to `below` the provider no longer holds: a head
    /// the core kept for a record that is gone, which no offer can serve.
    fn forget_missing_jobs(&mut self, q: usize, from: u64, below: u64) {
        let queue = &mut self.queues.list[q];
        let missing: Vec<u64> = queue
            .jobs
            .range(from..below)
            .filter(|(_, job)| job.state == JobState::Available)
            .map(|(&offset, _)| offset)
            .collect();
        for offset in missing {
            log::error!(
                "job {offset} of {} is not in storage any more; it is forgotten",
                self.channels[queue.channel].settings.name
            );
            queue.jobs.remove(&offset);
            queue.exhausted.remove(&offset);
            queue.move_warnings.remove(&offset);
        }
    }

    fn forget_job(&mut self, q: usize, offset: u64, floor: u64) {
        let queue = &mut self.queues.list[q];
        queue.jobs.remove(&offset);
        queue.bodies.remove(&offset);
        queue.move_warnings.remove(&offset);
        let channel = &mut self.channels[queue.channel];
        channel.floor = channel.floor.max(floor);
    }
}

impl Broker {
    /// Queue `name`'s unresolved jobs, oldest first, `max_rows` at most;
    /// `None` when no queue has that name.
    pub fn queue_view(
        &self,
        name: &str,
        max_rows: usize,
        now_ms: u64,
    ) -> Option<crate::core::observe::QueueView> {
        use crate::core::observe::{JobRow, QueueView};
        let q = self.queue_by_name(name)?;
        let queue = &self.queues.list[q];
        // Where the broker holds the record in memory: cached or read ahead
        // for offering, or on the wire to its worker. One only on disk is
        // not read for this.
        let topic = |offset: u64, state: &JobState| {
            let on_the_wire = match *state {
                JobState::Delivering {
                    worker, packet_id, ..
                } => self
                    .sessions
                    .get(worker)
                    .and_then(|s| s.inflight.get(&packet_id))
                    .map(|f| Rc::clone(&f.delivery.message)),
                _ => None,
            };
            on_the_wire
                .or_else(|| self.job_body(q, offset))
                .map(|m| m.topic.to_string())
        };
        let client_id = |worker: Key| {
            self.sessions
                .get(worker)
                .map(|s| s.client_id.to_string())
                .unwrap_or_default()
        };
        let seen = |unix_ms: u64| (unix_ms > 0).then_some(unix_ms);
        let rows = queue
            .jobs
            .iter()
            .take(max_rows)
            .map(|(&offset, job)| {
                let (state, holder, lease_until_unix_ms) = match job.state {
                    JobState::Delivering { worker, .. } => {
                        ("delivering", Some(client_id(worker)), None)
                    }
                    JobState::Leased {
                        worker,
                        deadline_ms,
                        ..
                    } => (
                        "leased",
                        Some(client_id(worker)),
                        Some(self.unix_ms(deadline_ms.max(now_ms))),
                    ),
                    JobState::Available | JobState::Resolving | JobState::Moving => {
                        ("waiting", None, None)
                    }
                };
                JobRow {
                    offset,
                    topic: topic(offset, &job.state),
                    attempts: job.attempts,
                    state,
                    holder,
                    lease_until_unix_ms,
                    first_seen_unix_ms: seen(job.first_delivery_unix_ms),
                    last_seen_unix_ms: seen(job.last_delivery_unix_ms),
                }
            })
            .collect();
        Some(QueueView {
            unresolved: queue.jobs.len() as u64,
            rows,
        })
    }
}
