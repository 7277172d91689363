//! Shared subscriptions routed: a message for a group goes to the member
//! whose turn it is among those able to take it now, or waits in the
//! group's backlog, which members drain as they find room.

use std::rc::Rc;

use crate::codec::{QoS, SubscriptionOptions};
use crate::core::broadcast::shared::Member;
use crate::core::broadcast::topic_index::{Subscriber, Target};
use crate::core::message::{Delivery, Message};
use crate::core::{Broker, Key, Transport};

impl Broker {
    /// Adds `session` to the group `share_name` over `filter`, making the
    /// group on its first member. Returns the group.
    pub(crate) fn join_group(&mut self, share_name: &str, filter: &str, member: Member) -> Key {
        let (key, made) = self.groups.join(share_name, filter, member);
        if made {
            let entry = Subscriber {
                target: Target::Group(key),
                options: SubscriptionOptions::default(),
                subscription_id: None,
            };
            self.index.insert(filter, entry);
        }
        key
    }

    /// Takes `session` out of a group; the last member to leave ends the
    /// group and whatever it still held.
    pub(crate) fn leave_group(&mut self, group_key: Key, session: Key) {
        if let Some(group) = self.groups.leave(group_key, session) {
            self.stats.shared_backlog_dropped += group.backlog().count() as u64;
            self.index.remove(&group.filter, Target::Group(group_key));
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
        if group.front_qos().is_none() {
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
        // The backlog is bounded like a session's queue.
        let bound_bytes = self.settings.session_queue_bytes;
        let group = self.groups.get_mut(group_key).expect("checked above");
        let dropped = group.hold(Rc::clone(message), bound_bytes);
        self.stats.shared_backlog_dropped += dropped;
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
                .and_then(|g| g.backlog().next())
                .map(Rc::clone)
            else {
                return;
            };
            let Some(member) = self.next_able_member(group_key, &front) else {
                return;
            };
            let group = self.groups.get_mut(group_key).expect("checked above");
            let message = group.take_front().expect("front exists");
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
        let index = group.turn_order().find(|&index| {
            let member = &group.members[index];
            self.member_is_able(member, message.qos)
                && self.may_read(member.session, &message.topic)
        })?;
        let group = self.groups.get_mut(group_key).expect("checked above");
        Some(group.take_turn(index))
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
            group.put_back(delivery.message);
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
        let dropped = self.groups.expire_backlogs(now_unix_ms, expires_after_ms);
        self.stats.shared_backlog_dropped += dropped;
    }
}
