//! Shared subscriptions routed: a message for a group goes to the member
//! whose turn it is among those able to take it now, or waits in the
//! group's backlog, which members drain as they find room.

use std::rc::Rc;

use crate::codec::{encoded_len, Packet, QoS, SubscriptionOptions};
use crate::core::broadcast::shared::Member;
use crate::core::broadcast::topic_index::{Subscriber, Target};
use crate::core::message::{outgoing_publish, Delivery, Message};
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
                slice: None,
            };
            self.index.insert(filter, entry);
        }
        key
    }

    /// Takes `session` out of a group; the last member to leave ends the
    /// group and whatever it still held.
    pub(crate) fn leave_group(&mut self, group_key: Key, session: Key) {
        if let Some(group) = self.groups.leave(group_key, session) {
            let held = group.backlog().count() as u64;
            self.stats.shared_backlog_dropped += held;
            self.stats.shares_dropped_no_member_left += held;
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
        self.stats.shares_held += 1;
        self.stats.shared_backlog_dropped += dropped;
        self.stats.shares_dropped_backlog_full += dropped;
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
            let front = self.groups.get(group_key).and_then(|g| g.backlog().next());
            let Some(front) = front.cloned() else {
                return;
            };
            let Some(member) = self.next_able_member(group_key, &front) else {
                return;
            };
            let group = self.groups.get_mut(group_key).expect("checked above");
            let message = group.take_front().expect("front exists");
            self.stats.shares_drained += 1;
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
        // Asked on every acknowledgement: without a group there is no
        // subscription worth walking.
        if self.groups.is_empty() {
            return;
        }
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

    /// The member whose turn it is among those able to take `message`
    /// now: connected, under its Maximum Packet Size and, above QoS 0, with
    /// room in its window and nothing already waiting; and still allowed to
    /// read it. A member the message is too large for is passed over, not
    /// disconnected: the group needs only one member to take it.
    fn next_able_member(&mut self, group_key: Key, message: &Rc<Message>) -> Option<Member> {
        let group = self.groups.get(group_key)?;
        let index = group.turn_order().find(|&index| {
            let member = &group.members[index];
            self.member_is_able(member, message) && self.may_read(member.session, &message.topic)
        })?;
        let group = self.groups.get_mut(group_key).expect("checked above");
        Some(group.take_turn(index))
    }

    fn member_is_able(&self, member: &Member, message: &Rc<Message>) -> bool {
        if !self.fits_member(member, message) {
            return false;
        }
        if message.qos.min(member.options.qos) == QoS::AtMostOnce {
            return self.session_is_connected(member.session);
        }
        self.session_has_room(member.session)
    }

    /// Whether `message` as this member would be sent it is within the
    /// Maximum Packet Size its client set (measured as a queue's offer is).
    fn fits_member(&self, member: &Member, message: &Rc<Message>) -> bool {
        let Some(active) = self
            .sessions
            .get(member.session)
            .and_then(|s| s.connection)
            .and_then(|c| self.connections.get(c))
            .and_then(|c| c.active.as_ref())
        else {
            return false;
        };
        if active.client_max_packet_size == u32::MAX {
            return true;
        }
        let delivery = Delivery {
            qos: message.qos.min(member.options.qos),
            retain: false,
            subscription_ids: member.subscription_id.into_iter().collect(),
            group: None,
            reader: None,
            latest: None,
            message: Rc::clone(message),
        };
        let publish = outgoing_publish(&delivery, Some(1), None);
        encoded_len(&Packet::Publish(publish), active.version)
            <= active.client_max_packet_size as usize
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

    /// What an ending member leaves unfinished, each with whether it went
    /// on the wire: QoS 1 goes back to the front of its group, to be served
    /// again; QoS 2 that was sent goes to no other member (the member may
    /// have it), and QoS 2 that never left the member's queue goes back.
    pub(crate) fn return_to_groups(
        &mut self,
        deliveries: Vec<(Delivery, bool)>,
        now_ms: u64,
        out: &mut impl Transport,
    ) {
        let mut touched = Vec::new();
        for (delivery, sent) in deliveries.into_iter().rev() {
            let Some(group_key) = delivery.group else {
                continue;
            };
            let returnable = match delivery.qos {
                QoS::AtMostOnce => false,
                QoS::AtLeastOnce => true,
                QoS::ExactlyOnce => !sent,
            };
            if !returnable {
                self.stats.shared_dropped += 1;
                self.stats.shares_dropped_member_ended +=
                    u64::from(delivery.qos == QoS::ExactlyOnce);
                continue;
            }
            let Some(group) = self.groups.get_mut(group_key) else {
                self.stats.shared_dropped += 1;
                continue;
            };
            group.put_back(delivery.message);
            self.stats.shares_held += 1;
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
        self.stats.shares_dropped_expired += dropped;
    }
}
