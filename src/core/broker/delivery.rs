//! From an admitted message to the sessions whose filters match it, and
//! from a session's queue onto its connection's wire.

use std::rc::Rc;

use crate::codec::{encoded_len, Packet, QoS};
use crate::core::broadcast::topic_index::{Matched, Target};
use crate::core::channel::release_reader_mark;
use crate::core::message::{outgoing_publish, Delivery, Message};
use crate::core::partition::topic_hash;
use crate::core::session::{InFlight, OutboundStage};
use crate::core::{Broker, Key, Transport};

/// One delivery for all of one session's subscriptions that matched.
fn merge_subscriptions(matched: &[Matched], message: &Rc<Message>) -> Delivery {
    let granted = matched
        .iter()
        .map(|s| s.options.qos)
        .max()
        .unwrap_or(QoS::AtMostOnce);
    // RETAIN is kept where any matching subscription asked for Retain As
    // Published, so the answer does not depend on their order.
    let retain_as_published = matched.iter().any(|s| s.options.retain_as_published);
    Delivery {
        message: Rc::clone(message),
        qos: granted.min(message.qos),
        retain: retain_as_published && message.retain,
        subscription_ids: matched.iter().filter_map(|s| s.subscription_id).collect(),
        group: None,
        reader: None,
        latest: None,
    }
}

impl Broker {
    /// Whether a session can put one more delivery on the wire now.
    pub(crate) fn session_has_room(&self, session_key: Key) -> bool {
        let Some(session) = self.sessions.get(session_key) else {
            return false;
        };
        let Some(active) = session
            .connection
            .and_then(|c| self.connections.get(c))
            .and_then(|c| c.active.as_ref())
        else {
            return false;
        };
        session.waiting.is_empty()
            && session.inflight.len() < usize::from(active.client_receive_maximum)
            && session.inflight_bytes < self.settings.session_queue_bytes / 2
    }

    pub(crate) fn session_is_connected(&self, session_key: Key) -> bool {
        self.sessions
            .get(session_key)
            .and_then(|s| s.connection)
            .and_then(|c| self.connections.get(c))
            .is_some_and(|c| c.active.is_some())
    }

    /// Hands `message` to every session with a matching subscription: one
    /// copy per session, at the highest QoS among its matching
    /// subscriptions (never above the message's), carrying every matching
    /// Subscription Identifier; and to one member of each matching shared
    /// group.
    pub(crate) fn route(&mut self, message: Rc<Message>, now_ms: u64, out: &mut impl Transport) {
        let mut matches = std::mem::take(&mut self.match_scratch);
        matches.clear();
        // A subscription whose declared slice leaves this topic out is not
        // a match; another of the session's may still be (the union rule).
        let mut hash = None;
        self.index.for_each_match(&message.topic, |subscriber| {
            let admitted = subscriber.slice.as_ref().is_none_or(|slice| {
                slice.admits_hash(*hash.get_or_insert_with(|| topic_hash(&message.topic)))
            });
            if admitted {
                matches.push(subscriber.matched());
            }
        });
        // No Local is read off each subscription, against the publisher's
        // client id.
        if let Some(publisher) = &message.publisher {
            let sessions = &self.sessions;
            matches.retain(|s| match s.target {
                Target::Session(key) if s.options.no_local => sessions
                    .get(key)
                    .is_none_or(|session| session.client_id != *publisher),
                _ => true,
            });
        }
        self.tallies.broadcast(!matches.is_empty());
        matches.sort_unstable_by_key(|s| s.target);
        // The topic's channel is looked up once for every target's check.
        let read_check = self.read_check(&message.topic);
        let mut start = 0;
        while start < matches.len() {
            let target = matches[start].target;
            let end = start
                + matches[start..]
                    .iter()
                    .take_while(|s| s.target == target)
                    .count();
            match target {
                Target::Group(group) => self.route_to_group(group, &message, now_ms, out),
                Target::Session(session) if self.may_read_checked(session, &read_check) => {
                    let delivery = merge_subscriptions(&matches[start..end], &message);
                    self.deliver(session, delivery, now_ms, out);
                }
                Target::Session(_) => {}
            }
            start = end;
        }
        self.match_scratch = matches;
    }

    /// Queues one delivery for one session and sends what its window allows.
    pub(crate) fn deliver(
        &mut self,
        session_key: Key,
        delivery: Delivery,
        now_ms: u64,
        out: &mut impl Transport,
    ) {
        let Some(session) = self.sessions.get_mut(session_key) else {
            return;
        };
        if delivery.qos == QoS::AtMostOnce {
            // QoS 0 is never queued: sent now if there is room, or shed.
            if let Some(conn) = session.connection {
                self.send_now(conn, &delivery, None, now_ms, true, out);
            }
            return;
        }
        let bound = self.settings.session_queue_bytes;
        let cost = delivery.message.cost_bytes();
        if delivery.reader.is_some() || delivery.latest.is_some() {
            // A channel's record is pulled only when the session has room,
            // and is never given up: it waits for the window like any other.
            session.held_bytes += cost;
            session.waiting.push_back(delivery);
            self.pump(session_key, now_ms, out);
            return;
        }
        // Full means the oldest that is not on the wire goes.
        while session.held_bytes + cost > bound && session.drop_oldest_waiting() {
            self.stats.session_queue_full += 1;
        }
        if session.held_bytes + cost > bound && !session.inflight.is_empty() {
            // Nothing left that can be given up: this delivery is refused.
            self.stats.session_queue_full += 1;
            self.stats.deliveries_refused += 1;
            return;
        }
        let traffic = &mut **session;
        traffic.held_bytes += cost;
        traffic.waiting.push_back(delivery);
        self.pump(session_key, now_ms, out);
    }

    /// Moves waiting deliveries onto the wire while the client's Receive
    /// Maximum and half of `session_queue_bytes` allow; one is always sent
    /// when nothing is on the wire, however large.
    pub(crate) fn pump(&mut self, session_key: Key, now_ms: u64, out: &mut impl Transport) {
        let now_unix_ms = self.unix_ms(now_ms);
        let Some(session) = self.sessions.get_mut(session_key) else {
            return;
        };
        let Some(conn) = session.connection else {
            return;
        };
        let Some(active) = self.connections.get(conn).and_then(|c| c.active.as_ref()) else {
            return;
        };
        let (version, receive_maximum, max_packet_size) = (
            active.version,
            usize::from(active.client_receive_maximum),
            active.client_max_packet_size,
        );
        let half_bound = self.settings.session_queue_bytes / 2;
        let durable = session.expiry_interval_s > 0;
        if session.waiting.is_empty() {
            // Nothing to move, and no traffic box to make.
            self.send_after_window(session_key, out);
            return;
        }
        // Through the traffic box once, not at every field.
        let traffic = &mut **session;
        while let Some(front) = traffic.waiting.front() {
            let cost = front.message.cost_bytes();
            let on_wire = !traffic.inflight.is_empty();
            if traffic.inflight.len() >= receive_maximum
                || (on_wire && traffic.inflight_bytes + cost > half_bound)
            {
                break;
            }
            let delivery = traffic.waiting.pop_front().expect("front exists");
            let Ok(remaining_expiry_s) = delivery.remaining_expiry_s(now_unix_ms) else {
                traffic.held_bytes -= cost;
                self.stats.deliveries_expired += 1;
                // An expired record is passed over; its cursor moves on.
                release_reader_mark(&mut self.readers, &delivery);
                continue;
            };
            let packet_id = traffic.allocate_packet_id();
            let packet = Packet::Publish(outgoing_publish(
                &delivery,
                Some(packet_id),
                remaining_expiry_s,
            ));
            // Measured only for a client that set a Maximum Packet Size.
            if max_packet_size != u32::MAX
                && encoded_len(&packet, version) > max_packet_size as usize
            {
                // The client said it cannot take a packet this large.
                traffic.held_bytes -= cost;
                self.stats.deliveries_too_large += 1;
                continue;
            }
            // A logged QoS 1 or 2 delivery to a durable session goes on the wire
            // once the window naming it is stored (rfcs/0007).
            if delivery.qos != QoS::AtMostOnce
                && durable
                && self.persist.log.is_logged(&delivery.message)
            {
                self.persist.log.hold_unsent(session_key, packet_id);
            } else {
                out.send(conn, version, &packet, false);
            }
            self.stats.deliveries_sent += 1;
            traffic.inflight_bytes += cost;
            debug_assert!(!traffic.inflight.contains_key(&packet_id));
            traffic.inflight.insert(
                packet_id,
                InFlight {
                    delivery,
                    stage: OutboundStage::Published,
                },
            );
        }
        self.send_after_window(session_key, out);
    }

    /// What a session is owed, asked again of the grants it holds now
    /// (invariant 16). At a resume the connection may be another user's,
    /// or the file may have been re-read while the session was away; at a
    /// reload a connected session's waiting deliveries were judged by the
    /// file before. A broadcast it may not read is dropped; one a shared
    /// group handed it goes back to the group; a channel record goes back
    /// to its reader, which stalls there until a grant returns. With
    /// `on_wire`, what was sent and not acknowledged is asked too: at a
    /// resume it would be sent again.
    pub(crate) fn take_back_unreadable(
        &mut self,
        session_key: Key,
        on_wire: bool,
        now_ms: u64,
        out: &mut impl Transport,
    ) {
        if !self.has_acl() {
            return;
        }
        let Some(session) = self.sessions.get(session_key) else {
            return;
        };
        // A `latest` value is withdrawn by its own reader's rules.
        let refused =
            |d: &Delivery| d.latest.is_none() && !self.may_read(session_key, &d.message.topic);
        let sent: Vec<u16> = session
            .inflight
            .iter()
            .filter(|(_, f)| on_wire && f.stage == OutboundStage::Published)
            .filter(|(_, f)| refused(&f.delivery))
            .map(|(&id, _)| id)
            .collect();
        let waiting: Vec<usize> = (0..session.waiting.len())
            .filter(|&i| refused(&session.waiting[i]))
            .collect();
        if sent.is_empty() && waiting.is_empty() {
            return;
        }
        let session = self.sessions.get_mut(session_key).expect("found above");
        let traffic = &mut **session;
        let mut taken: Vec<(Delivery, bool)> = Vec::new();
        for id in sent {
            let delivery = traffic.inflight.remove(&id).expect("listed above").delivery;
            traffic.inflight_bytes -= delivery.message.cost_bytes();
            taken.push((delivery, true));
        }
        for index in waiting.into_iter().rev() {
            taken.push((traffic.waiting.remove(index).expect("listed above"), false));
        }
        for (delivery, _) in &taken {
            traffic.held_bytes -= delivery.message.cost_bytes();
        }
        log::debug!(
            "client {}: {} deliveries it may not read are taken back",
            session.client_id,
            taken.len()
        );
        for (delivery, _) in &taken {
            self.return_to_reader(delivery);
        }
        taken.retain(|(d, _)| d.group.is_some());
        self.return_to_groups(taken, now_ms, out);
    }

    /// Sends a QoS 0 delivery at once, or sheds it when it has expired, is
    /// too large for the client, or finds the connection's buffer full.
    fn send_now(
        &mut self,
        conn: Key,
        delivery: &Delivery,
        packet_id: Option<u16>,
        now_ms: u64,
        droppable: bool,
        out: &mut impl Transport,
    ) {
        let Some(active) = self.connections.get(conn).and_then(|c| c.active.as_ref()) else {
            return;
        };
        let (version, max_packet_size) = (active.version, active.client_max_packet_size);
        let Ok(remaining_expiry_s) = delivery.remaining_expiry_s(self.unix_ms(now_ms)) else {
            self.stats.deliveries_expired += 1;
            return;
        };
        let packet = Packet::Publish(outgoing_publish(delivery, packet_id, remaining_expiry_s));
        if max_packet_size != u32::MAX && encoded_len(&packet, version) > max_packet_size as usize {
            self.stats.deliveries_too_large += 1;
            return;
        }
        if out.send(conn, version, &packet, droppable) {
            self.stats.deliveries_sent += 1;
        } else {
            self.stats.deliveries_dropped += 1;
        }
    }
}
