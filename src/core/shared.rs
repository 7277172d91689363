//! Shared subscriptions: `$share/<group>/<filter>` hands each message to
//! one member of the group, taking turns among the members able to take it
//! now, and holds what none can take yet.

use std::collections::VecDeque;
use std::rc::Rc;

use super::session::{Delivery, Message};
use super::topic_index::{Subscriber, Target};
use super::{Broker, Key, Transport};
use crate::codec::{QoS, SubscriptionOptions};

#[derive(Debug, Clone)]
pub struct Member {
    pub session: Key,
    pub options: SubscriptionOptions,
    pub subscription_id: Option<u32>,
}

pub struct SharedGroup {
    pub share_name: Box<str>,
    pub filter: Box<str>,
    pub members: Vec<Member>,
    /// Where the next turn starts.
    next_member: usize,
    /// QoS 1 and 2 messages no member could take yet, oldest first.
    pub backlog: VecDeque<Rc<Message>>,
    pub backlog_bytes: u64,
}

impl Broker {
    /// Adds `session` to the group `share_name` over `filter`, making the
    /// group on its first member. Returns the group.
    pub(crate) fn join_group(&mut self, share_name: &str, filter: &str, member: Member) -> Key {
        let name = (Box::<str>::from(share_name), Box::<str>::from(filter));
        let key = match self.groups_by_name.get(&name) {
            Some(&key) => key,
            None => {
                let key = self
                    .groups
                    .insert_with(|_| SharedGroup {
                        share_name: name.0.clone(),
                        filter: name.1.clone(),
                        members: Vec::new(),
                        next_member: 0,
                        backlog: VecDeque::new(),
                        backlog_bytes: 0,
                    })
                    .expect("groups are bounded by the subscriptions that make them");
                let entry = Subscriber {
                    target: Target::Group(key),
                    options: SubscriptionOptions::default(),
                    subscription_id: None,
                };
                self.index.insert(filter, entry);
                self.groups_by_name.insert(name, key);
                key
            }
        };
        let group = self.groups.get_mut(key).expect("found or made above");
        match group
            .members
            .iter_mut()
            .find(|m| m.session == member.session)
        {
            Some(existing) => *existing = member,
            None => group.members.push(member),
        }
        key
    }

    /// Takes `session` out of a group; the last member to leave ends the
    /// group and whatever it still held.
    pub(crate) fn leave_group(&mut self, group_key: Key, session: Key) {
        let Some(group) = self.groups.get_mut(group_key) else {
            return;
        };
        group.members.retain(|m| m.session != session);
        if group.members.is_empty() {
            let group = self.groups.remove(group_key).expect("checked above");
            self.stats.shared_backlog_dropped += group.backlog.len() as u64;
            self.index.remove(&group.filter, Target::Group(group_key));
            self.groups_by_name
                .remove(&(group.share_name, group.filter));
        }
    }

    /// Hands `message` to one member of the group, or holds it in the
    /// group's backlog when none can take it now. A message arriving while
    /// the backlog holds anything waits behind it, to keep one publisher's
    /// messages in order.
    pub(crate) fn route_to_group(
        &mut self,
        group_key: Key,
        message: &Rc<Message>,
        now_ms: u64,
        out: &mut impl Transport,
    ) {
        let Some(group) = self.groups.get(group_key) else {
            return;
        };
        if group.backlog.is_empty() {
            if let Some(member) = self.next_able_member(group_key, message) {
                self.deliver_to_member(group_key, member, Rc::clone(message), now_ms, out);
                return;
            }
        }
        if message.qos == QoS::AtMostOnce {
            // A QoS 0 message is owed to nobody: no member could take it.
            self.stats.shared_dropped += 1;
            return;
        }
        if !self.group_can_hold(group_key) {
            self.stats.shared_dropped += 1;
            return;
        }
        let bound = self.settings.session_queue_bytes;
        let group = self.groups.get_mut(group_key).expect("checked above");
        let cost = message.cost_bytes();
        // The backlog is bounded like a session's queue: the oldest goes.
        while group.backlog_bytes + cost > bound {
            let Some(oldest) = group.backlog.pop_front() else {
                break;
            };
            group.backlog_bytes -= oldest.cost_bytes();
            self.stats.shared_backlog_dropped += 1;
        }
        group.backlog_bytes += cost;
        group.backlog.push_back(Rc::clone(message));
        self.drain_group(group_key, now_ms, out);
    }

    /// A backlog is kept only while a member can come to collect it: one
    /// that is connected, or whose session outlives its connection.
    fn group_can_hold(&self, group_key: Key) -> bool {
        let Some(group) = self.groups.get(group_key) else {
            return false;
        };
        group.members.iter().any(|m| {
            self.sessions
                .get(m.session)
                .is_some_and(|s| s.connection.is_some() || s.expiry_interval_s > 0)
        })
    }

    /// Hands backlogged messages to members while any can take one.
    pub(crate) fn drain_group(&mut self, group_key: Key, now_ms: u64, out: &mut impl Transport) {
        loop {
            let Some(front) = self
                .groups
                .get(group_key)
                .and_then(|g| g.backlog.front())
                .map(Rc::clone)
            else {
                return;
            };
            let Some(member) = self.next_able_member(group_key, &front) else {
                return;
            };
            let group = self.groups.get_mut(group_key).expect("checked above");
            let message = group.backlog.pop_front().expect("front exists");
            group.backlog_bytes -= message.cost_bytes();
            self.deliver_to_member(group_key, member, message, now_ms, out);
        }
    }

    /// Drains every group `session` belongs to, once it has room.
    pub(crate) fn drain_groups_of(
        &mut self,
        session_key: Key,
        now_ms: u64,
        out: &mut impl Transport,
    ) {
        let Some(session) = self.sessions.get(session_key) else {
            return;
        };
        let groups: Vec<Key> = session
            .subscriptions
            .values()
            .filter_map(|s| s.group)
            .collect();
        for group in groups {
            self.drain_group(group, now_ms, out);
        }
    }

    /// The member whose turn it is among those able to take a message of
    /// `message`'s QoS now: connected and, above QoS 0, with room in its
    /// window and nothing already waiting; and still allowed to read it.
    fn next_able_member(&mut self, group_key: Key, message: &Message) -> Option<Member> {
        let group = self.groups.get(group_key)?;
        let count = group.members.len();
        for step in 0..count {
            let index = (group.next_member + step) % count;
            let member = &group.members[index];
            if self.member_is_able(member, message.qos)
                && self.may_read(member.session, &message.topic)
            {
                let member = member.clone();
                let group = self.groups.get_mut(group_key).expect("checked above");
                group.next_member = (index + 1) % count;
                return Some(member);
            }
        }
        None
    }

    fn member_is_able(&self, member: &Member, qos: QoS) -> bool {
        if qos.min(member.options.qos) == QoS::AtMostOnce {
            return self.session_is_connected(member.session);
        }
        self.session_has_room(member.session)
    }

    fn deliver_to_member(
        &mut self,
        group_key: Key,
        member: Member,
        message: Rc<Message>,
        now_ms: u64,
        out: &mut impl Transport,
    ) {
        let delivery = Delivery {
            qos: message.qos.min(member.options.qos),
            retain: member.options.retain_as_published && message.retain,
            subscription_ids: member.subscription_id.into_iter().collect(),
            group: Some(group_key),
            reader: None,
            latest: None,
            message,
        };
        self.deliver(member.session, delivery, now_ms, out);
    }

    /// What an ending member leaves unfinished: QoS 1 goes back to the front
    /// of its group, to be served again; QoS 2 goes to no other member.
    pub(crate) fn return_to_groups(
        &mut self,
        deliveries: Vec<Delivery>,
        now_ms: u64,
        out: &mut impl Transport,
    ) {
        let mut touched = Vec::new();
        for delivery in deliveries.into_iter().rev() {
            let Some(group_key) = delivery.group else {
                continue;
            };
            if delivery.qos != QoS::AtLeastOnce {
                self.stats.shared_dropped += 1;
                continue;
            }
            let Some(group) = self.groups.get_mut(group_key) else {
                self.stats.shared_dropped += 1;
                continue;
            };
            group.backlog_bytes += delivery.message.cost_bytes();
            group.backlog.push_front(delivery.message);
            if !touched.contains(&group_key) {
                touched.push(group_key);
            }
        }
        for group_key in touched {
            self.drain_group(group_key, now_ms, out);
        }
    }

    /// Drops backlogged messages older than `broker.share.expires_after`.
    pub(crate) fn expire_group_backlogs(&mut self, now_ms: u64) {
        let Some(expires_after_ms) = self.settings.share_expires_after_ms else {
            return;
        };
        let now_unix_ms = self.unix_ms(now_ms);
        for key in self.groups.keys() {
            let group = self.groups.get_mut(key).expect("key just listed");
            while let Some(oldest) = group.backlog.front() {
                if now_unix_ms.saturating_sub(oldest.received_at_unix_ms) < expires_after_ms {
                    break;
                }
                group.backlog_bytes -= oldest.cost_bytes();
                group.backlog.pop_front();
                self.stats.shared_backlog_dropped += 1;
            }
        }
    }
}
