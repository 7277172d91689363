//! A latest channel's values as the broker keeps them: what a publish
//! replaces, what storage confirmed, what expired, and reads of one value.
//! The state and its pure rules live in [`crate::core::channel::latest`].

use crate::core::channel::latest::*;
use crate::core::channel::{Pending, PendingAck};
use crate::core::message::labelled;
use crate::core::message::Message;
use crate::core::refusal::Refusal;
use crate::core::StoreRequest;
use crate::core::{Broker, Transport};
use crate::store::{self, Answer, MessageId, Outcome, Write};
use std::rc::Rc;

impl Broker {
    /// A deletion of a topic that has no value, and none on its way to
    /// storage: there is nothing to say is gone, so nothing is stored.
    pub(crate) fn latest_delete_of_nothing(&self, channel: usize, message: &Message) -> bool {
        let Some(latest) = self.channels[channel].latest.as_deref() else {
            return false;
        };
        message.payload.is_empty()
            && latest.live_value(&message.topic).is_none()
            && !latest.storing.contains_key(&*message.topic)
    }

    /// A deletion of nothing: nothing to say is gone, so nothing is stored
    /// and it is answered at once - unless it is an exactly-once release
    /// whose hold is stored. Then the answer waits for the hold's removal:
    /// a restart finding it still held would take the client's next
    /// publish under that identifier for a resend (invariant 18). Gives
    /// the message back when storage cannot take the removal now.
    pub(crate) fn latest_release_of_nothing(
        &mut self,
        channel: usize,
        message: Message,
        conn: Option<(crate::core::Key, PendingAck)>,
        release_drop: Option<Write>,
        now_ms: u64,
        out: &mut impl Transport,
    ) -> Result<(), Box<Message>> {
        let provider = self.channels[channel].settings.provider;
        match (release_drop, conn) {
            (Some(drop), Some((conn, ack))) => {
                let ticket = self.next_ticket();
                let writes = vec![drop];
                if !out.store(provider, StoreRequest::Commit { ticket, writes }) {
                    return Err(Box::new(message));
                }
                let message = Box::new(message);
                let pending = LatestPending::ReleaseDropped { conn, ack, message };
                self.pending.insert(ticket, Pending::Latest(pending));
            }
            (drop, conn) => {
                self.holds_dropped(drop.map(|d| (provider, d)).into_iter().collect(), out);
                if let Some((conn, ack)) = conn {
                    self.answer_publish(conn, ack, Ok(()), now_ms, out);
                }
            }
        }
        Ok(())
    }

    /// The record a new value for `topic` replaces, for a `latest`
    /// channel: its current one, stored or a deletion. The write that
    /// stores the new value removes it in the same transaction, so a value
    /// no larger than the last is taken even by a full provider. Where
    /// another value of the topic is still on its way, the record named
    /// here may already be gone when the write runs; the write is then a
    /// plain append, and the one in between is removed after its commit.
    pub(crate) fn latest_replaces(&self, channel: usize, topic: &str) -> Option<u64> {
        let latest = self.channels[channel].latest.as_deref()?;
        latest.values.get(topic).map(|v| v.offset)
    }

    /// Counts a publish to a `latest` topic on its way to storage
    /// (`started`) or answered.
    pub(crate) fn latest_storing(&mut self, channel: usize, topic: &str, started: bool) {
        let Some(latest) = self.channels[channel].latest.as_deref_mut() else {
            return;
        };
        if started {
            *latest.storing.entry(topic.into()).or_insert(0) += 1;
        } else if let Some(count) = latest.storing.get_mut(topic) {
            *count -= 1;
            if *count == 0 {
                latest.storing.remove(topic);
            }
        }
    }

    /// A value was committed at `offset`: it becomes its topic's current
    /// value, the record it replaced is removed, and every subscriber is
    /// handed it (a deletion too: that is how a subscriber learns of it).
    pub(crate) fn latest_committed(
        &mut self,
        channel: usize,
        message: Message,
        id: &MessageId,
        offset: u64,
        now_ms: u64,
        out: &mut impl Transport,
    ) {
        let labelled = Rc::new(labelled(message, id, offset));
        let ch = &mut self.channels[channel];
        ch.next = ch.next.max(offset + 1);
        let latest = ch.latest.as_deref_mut().expect("a latest channel");
        let topic: Rc<str> = latest
            .topic(&labelled.topic)
            .unwrap_or_else(|| Rc::from(&*labelled.topic));
        let value = Value {
            offset,
            received_at_ms: labelled.received_at_unix_ms,
            deleted: labelled.payload.is_empty(),
        };
        if value.deleted {
            log::debug!(
                "the value of {topic:?} in {} is deleted, at offset {offset}",
                ch.settings.name
            );
        }
        let replaced = latest.values.insert(Rc::clone(&topic), value);
        latest.by_offset.insert(offset, Rc::clone(&topic));
        latest.cache.insert(offset, Rc::clone(&labelled));
        if let Some(old) = replaced {
            latest.by_offset.remove(&old.offset);
            latest.cache.forget(old.offset);
            *latest.removing.entry(Rc::clone(&topic)).or_insert(0) += 1;
            self.remove_replaced(channel, vec![(Rc::clone(&topic), old.offset)], out);
        }
        self.offer_change(channel, &topic, offset, now_ms, out);
        // A shared group is served changes, one member at a time.
        self.hand_to_groups(&labelled, now_ms, out);
    }

    /// Removes records newer values replaced, in a write of their own after
    /// the new value's commit: a batch holding both would remove the old
    /// value even where the new one is refused. What storage cannot take
    /// now is tried again at the next tick (and a crash in between is
    /// mended at startup).
    fn remove_replaced(
        &mut self,
        channel: usize,
        removals: Vec<(Rc<str>, u64)>,
        out: &mut impl Transport,
    ) {
        let settings = &self.channels[channel].settings;
        let (name, provider) = (settings.name.clone(), settings.provider);
        let writes = removals
            .iter()
            .map(|&(_, offset)| Write::Remove {
                channel: name.clone(),
                offset,
            })
            .collect();
        let ticket = self.next_ticket();
        if out.store(provider, StoreRequest::Commit { ticket, writes }) {
            self.channels[channel].room_freed();
            let pending = LatestPending::Superseded { channel, removals };
            self.pending.insert(ticket, Pending::Latest(pending));
        } else if let Some(latest) = self.channels[channel].latest.as_deref_mut() {
            latest.unremoved.extend(removals);
        }
    }

    /// At each tick: removals storage could not take, and subscribers with
    /// values still waiting.
    pub(crate) fn latest_tick(&mut self, now_ms: u64, out: &mut impl Transport) {
        for channel in 0..self.channels.len() {
            let Some(latest) = self.channels[channel].latest.as_deref_mut() else {
                continue;
            };
            if latest.unremoved.is_empty() {
                continue;
            }
            let batch = latest.unremoved.len().min(store::MAX_BATCH_WRITES);
            let removals: Vec<(Rc<str>, u64)> = latest.unremoved.drain(..batch).collect();
            self.remove_replaced(channel, removals, out);
        }
        self.pump_all_latest(now_ms, out);
    }

    /// Asks for the values past their period to be removed: a value older
    /// than `retention_period`, a deletion older than
    /// `deletion_retention_period`. A topic whose value goes is then
    /// absent, exactly as one never set.
    pub(crate) fn sweep_latest(&mut self, channel: usize, now_ms: u64, out: &mut impl Transport) {
        let now_unix_ms = self.unix_ms(now_ms);
        let ch = &self.channels[channel];
        let Some(latest) = ch.latest.as_deref() else {
            return;
        };
        if latest.sweeping {
            return;
        }
        let cutoff = |period_s: Option<u64>| {
            period_s.map(|s| now_unix_ms.saturating_sub(s.saturating_mul(1000)))
        };
        let value_cutoff_ms = cutoff(ch.settings.retention_period_s);
        let deletion_cutoff_ms = cutoff(latest.deletion_retention_period_s);
        let mut removed = Vec::new();
        let mut more = false;
        for (topic, value) in &latest.values {
            if latest.removing.contains_key(topic) {
                // Taken at a later sweep, once what it replaced is gone.
                continue;
            }
            let cutoff_ms = if value.deleted {
                deletion_cutoff_ms
            } else {
                value_cutoff_ms
            };
            // A record with no receipt time is never too old.
            let expired =
                cutoff_ms.is_some_and(|c| value.received_at_ms != 0 && value.received_at_ms < c);
            if !expired {
                continue;
            }
            if removed.len() == SWEEP_BATCH_RECORDS {
                more = true;
                break;
            }
            removed.push((Rc::clone(topic), value.offset));
        }
        if removed.is_empty() {
            return;
        }
        let writes = removed
            .iter()
            .map(|(_, offset)| Write::Remove {
                channel: ch.settings.name.clone(),
                offset: *offset,
            })
            .collect();
        let provider = ch.settings.provider;
        let ticket = self.next_ticket();
        if out.store(provider, StoreRequest::Commit { ticket, writes }) {
            self.channels[channel].room_freed();
            let pending = LatestPending::Sweep {
                channel,
                removed,
                more,
            };
            self.pending.insert(ticket, Pending::Latest(pending));
            if let Some(latest) = self.channels[channel].latest.as_deref_mut() {
                latest.sweeping = true;
            }
        }
    }

    pub(crate) fn latest_answered(
        &mut self,
        pending: LatestPending,
        answer: Answer,
        now_ms: u64,
        out: &mut impl Transport,
    ) {
        match (pending, answer) {
            (LatestPending::Superseded { channel, removals }, Answer::Committed(result)) => {
                match result {
                    Ok(outcomes) => {
                        self.floor_after_removals(channel, &outcomes);
                        if let Some(latest) = self.channels[channel].latest.as_deref_mut() {
                            for (topic, _) in &removals {
                                latest.removed_replaced(topic);
                            }
                        }
                    }
                    Err(error) => {
                        log::warn!(
                            "removing replaced values of {} failed: {error}; it is tried again",
                            self.channels[channel].settings.name
                        );
                        if let Some(latest) = self.channels[channel].latest.as_deref_mut() {
                            latest.unremoved.extend(removals);
                        }
                    }
                }
            }
            (
                LatestPending::Sweep {
                    channel,
                    removed,
                    more,
                },
                Answer::Committed(result),
            ) => {
                if let Some(latest) = self.channels[channel].latest.as_deref_mut() {
                    latest.sweeping = false;
                }
                match result {
                    Ok(outcomes) => {
                        self.floor_after_removals(channel, &outcomes);
                        self.expired(channel, &removed);
                        if more {
                            self.sweep_latest(channel, now_ms, out);
                        }
                    }
                    Err(error) => log::warn!(
                        "a retention sweep of {} failed: {error}; it runs again at the next sweep",
                        self.channels[channel].settings.name
                    ),
                }
            }
            (LatestPending::ReaderRead(read), Answer::Read(result)) => {
                self.latest_read_completed(read, result, now_ms, out)
            }
            (LatestPending::PointRead(read), Answer::Read(result)) => {
                self.point_read_completed(read, result, now_ms, out)
            }
            (LatestPending::ReleaseDropped { conn, ack, message }, Answer::Committed(result)) => {
                match result {
                    Ok(_) => self.answer_publish(conn, ack, Ok(()), now_ms, out),
                    Err(error) => {
                        log::warn!("removing an exactly-once publish's hold failed: {error}");
                        // Still stored, so held again: the PUBREL on the
                        // next connection completes it.
                        if let PendingAck::Pubcomp { packet_id } = ack {
                            self.hold_again(conn, packet_id, *message, now_ms);
                        }
                        let refusal = Refusal::ExactlyOnceNotCompleted;
                        self.answer_publish(conn, ack, Err(refusal), now_ms, out);
                    }
                }
            }
            (_, answer) => {
                log::error!("a storage answer did not match its latest request: {answer:?}")
            }
        }
    }

    fn floor_after_removals(&mut self, channel: usize, outcomes: &[Outcome]) {
        let ch = &mut self.channels[channel];
        for outcome in outcomes {
            if let Outcome::Removed { floor, .. } = outcome {
                ch.floor = ch.floor.max(*floor);
            }
        }
    }

    /// Values the sweep removed leave the index, and nobody is sent one
    /// still waiting: a value past its period is not there at all.
    fn expired(&mut self, channel: usize, removed: &[(Rc<str>, u64)]) {
        let ch = &mut self.channels[channel];
        let name = ch.settings.name.clone();
        let latest = ch.latest.as_deref_mut().expect("a latest channel");
        let mut gone = Vec::new();
        for (topic, offset) in removed {
            // A newer value committed since the sweep asked stays.
            if latest
                .values
                .get(topic)
                .is_some_and(|v| v.offset == *offset)
            {
                latest.values.remove(topic);
                latest.by_offset.remove(offset);
                latest.cache.forget(*offset);
                gone.push(*offset);
            }
        }
        if !gone.is_empty() {
            log::info!(
                "retention removed {} values and deletions from {name}",
                gone.len()
            );
        }
        self.withdraw_waiting(channel, &gone);
    }

    /// Reads a `latest` channel's stored value for a point read or a
    /// reader: one storage read from `from_offset`.
    pub(crate) fn read_latest(
        &mut self,
        channel: usize,
        from_offset: u64,
        limit: store::ReadLimit,
        pending: LatestPending,
        out: &mut impl Transport,
    ) -> bool {
        let settings = &self.channels[channel].settings;
        let (name, provider) = (settings.name.clone(), settings.provider);
        let ticket = self.next_ticket();
        let request = StoreRequest::Read {
            ticket,
            channel: name,
            from_offset,
            limit,
        };
        if !out.store(provider, request) {
            return false;
        }
        self.park(ticket, Pending::Latest(pending));
        true
    }
}
