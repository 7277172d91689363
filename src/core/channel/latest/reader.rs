//! Serving a `latest` channel to one session: the state a subscription is
//! handed, the changes after it, and what a resumed session missed.
//!
//! State - what a SUBSCRIBE or a resume is owed - is served by cursors
//! over the channel's values in offset order, so a reader holds a few
//! numbers for it however many topics the channel has. Changes since are
//! waiting entries, at most one per topic, keyed by the offset of the
//! topic's current value: a newer value takes the place of one still
//! waiting, so a subscriber that falls behind is sent what is current when
//! it has room, never every value in between. A value is only ever sent as
//! its topic's current one and current offsets only rise, so a subscriber
//! is never sent an older value of a topic after a newer one. The
//! publisher never waits for any of this (invariant 16): a commit only
//! marks topics as waiting.

use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;

use crate::codec::QoS;
use crate::core::channel::latest::LatestState;
use crate::core::channel::ReaderFilter;
use crate::core::message::{Delivery, Message};
use crate::core::Key;

/// Values a reader asks storage for at once.
pub(crate) const READ_BATCH_RECORDS: u32 = 64;

/// Changes a reader holds one by one. Past this a subscriber that has
/// fallen behind is served its changes by a cursor from the lowest one
/// waiting instead, so what it holds stays small however many topics move.
pub(crate) const WAITING_CHANGES_MAX: usize = 1_024;
const _: () = assert!(READ_BATCH_RECORDS > 0 && WAITING_CHANGES_MAX > 0);

/// A cursor over the channel's current values: sent as state (RETAIN
/// set) for a SUBSCRIBE's state pass or what a resume missed, or as changes
/// for a subscriber whose waiting changes passed their bound.
pub(crate) struct Pass {
    /// The filter it serves; `None` for every filter of the reader.
    pub(crate) filter: Option<Box<str>>,
    /// Deletions are served too (`saguin-deletions`).
    pub(crate) deletions: bool,
    /// The next offset to consider.
    pub(crate) next: u64,
    /// The channel's next offset when it began: what is committed after
    /// that reaches the reader as a change. `u64::MAX` for a pass of
    /// changes, which takes every change until it has caught up.
    pub(crate) end: u64,
    /// Served as state rather than as changes.
    pub(crate) as_state: bool,
}

/// One session's subscription to one `latest` channel.
pub(crate) struct LatestReader {
    pub(crate) session: Key,
    pub(crate) channel: usize,
    /// The session's filters that reach this channel.
    pub(crate) filters: Vec<ReaderFilter>,
    /// Changes waiting to be sent, by the offset of the topic's current
    /// value.
    pub(crate) waiting: BTreeMap<u64, Rc<str>>,
    /// The offset each waiting topic waits under.
    pub(crate) waiting_topics: HashMap<Rc<str>, u64>,
    /// State still to be sent; at most one pass per filter, and one for a
    /// resume.
    pub(crate) passes: Vec<Pass>,
    /// Bodies of one storage read, by offset.
    pub(crate) bodies: HashMap<u64, Rc<Message>>,
    pub(crate) reading: bool,
    /// While its session is away: where a resume is served from, the
    /// lowest offset not yet delivered.
    pub(crate) resume_from: Option<u64>,
    /// The lowest offset of a value that could not be delivered (larger
    /// than the client's Maximum Packet Size): a resume starts below it.
    pub(crate) missed_from: Option<u64>,
}

/// A reader's storage read, to be matched with its answer.
pub(crate) struct ReadFor {
    pub(crate) reader: Key,
    pub(crate) from_offset: u64,
}

impl LatestReader {
    /// Whether its session declared a partition slice on a filter that
    /// reaches the channel.
    pub(crate) fn declares_slice(&self) -> bool {
        self.filters.iter().any(|f| f.slice.is_some())
    }

    /// How many passes and waiting changes it holds, for tests of its bound.
    #[cfg(test)]
    pub(crate) fn held(&self) -> (usize, usize) {
        (self.passes.len(), self.waiting.len())
    }

    /// Adds a change of `topic` at `offset`, replacing an older one. Past
    /// the bound, the waiting changes become one pass of changes from the
    /// lowest of them, which also takes every change after (current
    /// offsets only rise, so nothing a change pass has not reached is lost).
    /// Returns whether the change took the place of one still waiting.
    pub(crate) fn offer(&mut self, topic: &Rc<str>, offset: u64) -> bool {
        if self.passes.iter().any(|pass| !pass.as_state) {
            return false;
        }
        let mut superseded = false;
        if let Some(&queued) = self.waiting_topics.get(topic) {
            if queued >= offset {
                return false;
            }
            self.waiting.remove(&queued);
            superseded = true;
        }
        self.waiting_topics.insert(Rc::clone(topic), offset);
        self.waiting.insert(offset, Rc::clone(topic));
        if self.waiting.len() > WAITING_CHANGES_MAX {
            let from = self.waiting.keys().next().copied().unwrap_or(offset);
            self.waiting.clear();
            self.waiting_topics.clear();
            self.passes.push(Pass {
                filter: None,
                // A live deletion reaches every subscriber.
                deletions: true,
                next: from,
                end: u64::MAX,
                as_state: false,
            });
        }
        superseded
    }

    pub(crate) fn withdraw(&mut self, offset: u64) {
        if let Some(topic) = self.waiting.remove(&offset) {
            self.waiting_topics.remove(&topic);
        }
    }

    /// Moves each pass to its next value, dropping the passes that are
    /// done; returns the lowest offset a pass offers, and whether a state
    /// pass offers it.
    pub(crate) fn settle_passes(&mut self, latest: &LatestState) -> Option<(u64, bool)> {
        let filters = &self.filters;
        for pass in &mut self.passes {
            let found = latest
                .by_offset
                .range(pass.next..pass.end)
                .find(|(_, name)| {
                    let deleted = latest.values.get(*name).is_some_and(|v| v.deleted);
                    let reached = match &pass.filter {
                        Some(filter) => filters
                            .iter()
                            .any(|f| f.filter == *filter && f.reaches(name)),
                        None => filters.iter().any(|f| f.reaches(name)),
                    };
                    reached && (pass.deletions || !deleted)
                })
                .map(|(&offset, _)| offset);
            pass.next = found.unwrap_or(pass.end);
        }
        self.passes.retain(|pass| pass.next < pass.end);
        let lowest = self.passes.iter().map(|pass| pass.next).min()?;
        let as_state = self
            .passes
            .iter()
            .any(|pass| pass.as_state && pass.next == lowest);
        Some((lowest, as_state))
    }

    /// Marks `offset` as served: taken off the waiting changes, and every
    /// pass standing on it moves past it.
    pub(crate) fn served(&mut self, offset: u64) {
        self.withdraw(offset);
        for pass in &mut self.passes {
            if pass.next == offset {
                pass.next = offset + 1;
            }
        }
    }

    /// The lowest offset still owed, for a resume position.
    pub(crate) fn lowest_owed(&self) -> Option<u64> {
        let waiting = self.waiting.keys().next().copied();
        let passes = self.passes.iter().map(|pass| pass.next).min();
        [waiting, passes, self.missed_from]
            .into_iter()
            .flatten()
            .min()
    }

    pub(crate) fn matches(&self, topic_name: &str) -> bool {
        self.filters.iter().any(|f| f.reaches(topic_name))
    }

    /// Only QoS 0 is granted: nothing is acknowledged, so nothing can be
    /// known to have arrived, and a resume is served the whole state.
    pub(crate) fn at_most_once(&self) -> bool {
        self.filters
            .iter()
            .all(|f| f.options.qos == QoS::AtMostOnce)
    }

    /// The delivery of `message` to this reader: the highest QoS its
    /// matching filters grant, their identifiers, RETAIN for state and
    /// otherwise only under Retain As Published. `None` when no filter
    /// matches, or No Local withholds it from every one that does.
    pub(crate) fn delivery_for(
        &self,
        message: &Rc<Message>,
        offset: u64,
        as_state: bool,
        client_id: &str,
    ) -> Option<Delivery> {
        let own = message.publisher.as_deref() == Some(client_id);
        let mut granted: Option<QoS> = None;
        let mut ids = Vec::new();
        let mut retain_as_published = false;
        for entry in &self.filters {
            let options = entry.options;
            if !entry.reaches(&message.topic) || (options.no_local && own) {
                continue;
            }
            granted = Some(granted.map_or(options.qos, |q| q.max(options.qos)));
            ids.extend(entry.subscription_id);
            retain_as_published |= options.retain_as_published;
        }
        let mut qos = granted?.min(message.qos);
        // A bridge's outbound rule is owed each change whatever QoS it was
        // published at, so one made while the link is down waits for it.
        if crate::core::is_bridge_client_id(client_id) {
            qos = qos.max(QoS::AtLeastOnce);
        }
        Some(Delivery {
            qos,
            retain: as_state || (retain_as_published && message.retain),
            subscription_ids: ids,
            group: None,
            reader: None,
            latest: Some(offset),
            message: Rc::clone(message),
        })
    }
}
