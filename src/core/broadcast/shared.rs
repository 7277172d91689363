//! Shared subscriptions' groups: `$share/<group>/<filter>` makes a group
//! whose members take turns at its messages, with a backlog of what none
//! could take yet. How a message reaches a member is the broker's
//! (`broker/shared.rs`).

use std::collections::{HashMap, VecDeque};
use std::rc::Rc;

use crate::codec::{QoS, SubscriptionOptions};
use crate::core::message::Message;
use crate::core::slab::{Key, Slab};

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
    backlog: VecDeque<Rc<Message>>,
    backlog_bytes: u64,
}

impl SharedGroup {
    /// The QoS of the oldest message the backlog holds.
    pub fn front_qos(&self) -> Option<QoS> {
        self.backlog.front().map(|m| m.qos)
    }

    /// The messages the backlog holds, oldest first.
    pub fn backlog(&self) -> impl Iterator<Item = &Rc<Message>> {
        self.backlog.iter()
    }

    /// Members' indices in turn order, starting with whose turn it is.
    pub fn turn_order(&self) -> impl Iterator<Item = usize> + '_ {
        let count = self.members.len();
        (0..count).map(move |step| (self.next_member + step) % count)
    }

    /// Gives member `index` this turn; the next starts after it.
    pub fn take_turn(&mut self, index: usize) -> Member {
        debug_assert!(index < self.members.len());
        self.next_member = (index + 1) % self.members.len();
        self.members[index].clone()
    }

    /// Keeps `message` for a member to collect, giving up the oldest while
    /// the backlog would pass `bound_bytes`; returns how many it gave up.
    pub fn hold(&mut self, message: Rc<Message>, bound_bytes: u64) -> u64 {
        let cost = message.cost_bytes();
        let mut dropped = 0;
        while self.backlog_bytes + cost > bound_bytes {
            let Some(oldest) = self.backlog.pop_front() else {
                break;
            };
            self.backlog_bytes -= oldest.cost_bytes();
            dropped += 1;
        }
        self.backlog_bytes += cost;
        self.backlog.push_back(message);
        // One message is always held, however large.
        debug_assert!(self.backlog.len() == 1 || self.backlog_bytes <= bound_bytes);
        dropped
    }

    /// Adds restored messages behind what the backlog holds.
    pub fn restore(&mut self, messages: Vec<Rc<Message>>) {
        for message in messages {
            self.backlog_bytes += message.cost_bytes();
            self.backlog.push_back(message);
        }
    }

    /// Takes the oldest message out.
    pub fn take_front(&mut self) -> Option<Rc<Message>> {
        let message = self.backlog.pop_front()?;
        self.backlog_bytes -= message.cost_bytes();
        Some(message)
    }

    /// Puts back in front a message a member left unfinished.
    pub fn put_back(&mut self, message: Rc<Message>) {
        self.backlog_bytes += message.cost_bytes();
        self.backlog.push_front(message);
    }

    /// Gives up messages received `expires_after_ms` or longer before
    /// `now_unix_ms`; returns how many.
    fn expire(&mut self, now_unix_ms: u64, expires_after_ms: u64) -> u64 {
        let mut dropped = 0;
        while let Some(oldest) = self.backlog.front() {
            if now_unix_ms.saturating_sub(oldest.received_at_unix_ms) < expires_after_ms {
                break;
            }
            self.take_front();
            dropped += 1;
        }
        dropped
    }
}

/// Every shared group, by key and by its share name and filter. A group
/// lives while it has members.
pub(crate) struct SharedGroups {
    table: Slab<SharedGroup>,
    by_name: HashMap<(Box<str>, Box<str>), Key>,
}

impl SharedGroups {
    pub fn new() -> SharedGroups {
        SharedGroups {
            // Bounded by the subscriptions that make them.
            table: Slab::growable(u32::MAX as usize),
            by_name: HashMap::new(),
        }
    }

    pub fn get(&self, key: Key) -> Option<&SharedGroup> {
        self.table.get(key)
    }

    pub fn get_mut(&mut self, key: Key) -> Option<&mut SharedGroup> {
        self.table.get_mut(key)
    }

    pub fn keys(&self) -> Vec<Key> {
        self.table.keys()
    }

    /// Groups held, each named by its share name and filter.
    pub fn len(&self) -> usize {
        self.by_name.len()
    }

    /// Whether the group `share_name` over `filter` is held.
    pub fn contains(&self, share_name: &str, filter: &str) -> bool {
        self.by_name
            .contains_key(&(Box::<str>::from(share_name), Box::<str>::from(filter)))
    }

    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    /// Gives up every backlogged message past its time; returns how many.
    pub fn expire_backlogs(&mut self, now_unix_ms: u64, expires_after_ms: u64) -> u64 {
        let mut dropped = 0;
        for key in self.table.keys() {
            if let Some(group) = self.table.get_mut(key) {
                dropped += group.expire(now_unix_ms, expires_after_ms);
            }
        }
        dropped
    }

    /// Adds a member to the group `share_name` over `filter`, or updates
    /// the one it is; returns the group, and whether this made it.
    pub fn join(&mut self, share_name: &str, filter: &str, member: Member) -> (Key, bool) {
        let name = (Box::<str>::from(share_name), Box::<str>::from(filter));
        let (key, made) = match self.by_name.get(&name) {
            Some(&key) => (key, false),
            None => {
                let key = self
                    .table
                    .insert_with(|_| SharedGroup {
                        share_name: name.0.clone(),
                        filter: name.1.clone(),
                        members: Vec::new(),
                        next_member: 0,
                        backlog: VecDeque::new(),
                        backlog_bytes: 0,
                    })
                    .expect("groups are bounded by the subscriptions that make them");
                self.by_name.insert(name, key);
                (key, true)
            }
        };
        let group = self.table.get_mut(key).expect("found or made above");
        match group
            .members
            .iter_mut()
            .find(|m| m.session == member.session)
        {
            Some(existing) => *existing = member,
            None => group.members.push(member),
        }
        debug_assert_eq!(self.by_name.len(), self.table.len());
        (key, made)
    }

    /// Takes `session` out of a group; the group its last member leaves
    /// ends, and is handed back with whatever it still held.
    pub fn leave(&mut self, key: Key, session: Key) -> Option<SharedGroup> {
        let group = self.table.get_mut(key)?;
        group.members.retain(|m| m.session != session);
        if !group.members.is_empty() {
            return None;
        }
        let group = self.table.remove(key).expect("checked above");
        let named = self
            .by_name
            .remove(&(group.share_name.clone(), group.filter.clone()));
        debug_assert_eq!(named, Some(key), "a group is found by its name");
        debug_assert_eq!(self.by_name.len(), self.table.len());
        Some(group)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::Properties;

    fn message(payload_bytes: usize, received_at_unix_ms: u64) -> Rc<Message> {
        Rc::new(Message {
            topic: "t".into(),
            payload: vec![0; payload_bytes],
            qos: QoS::AtLeastOnce,
            retain: false,
            properties: Properties::default().into(),
            received_at_unix_ms,
            publisher: None,
        })
    }

    fn member(session: Key) -> Member {
        Member {
            session,
            options: SubscriptionOptions::default(),
            subscription_id: None,
        }
    }

    #[test]
    fn a_backlog_keeps_its_bound_by_giving_up_the_oldest() {
        let mut groups = SharedGroups::new();
        let (key, made) = groups.join("g", "t/#", member(Key::first(1)));
        assert!(made);
        let group = groups.get_mut(key).expect("made");
        let one = message(100, 0).cost_bytes();
        assert_eq!(group.hold(message(100, 0), 2 * one), 0);
        assert_eq!(group.hold(message(100, 1_000), 2 * one), 0);
        assert_eq!(
            group.hold(message(100, 2_000), 2 * one),
            1,
            "the oldest goes"
        );
        let kept: Vec<u64> = group.backlog().map(|m| m.received_at_unix_ms).collect();
        assert_eq!(kept, [1_000, 2_000]);
        assert_eq!(groups.expire_backlogs(2_500, 1_000), 1);
        assert_eq!(groups.get(key).expect("kept").backlog().count(), 1);
    }

    #[test]
    fn members_take_turns_and_the_last_to_leave_ends_the_group() {
        let mut groups = SharedGroups::new();
        let (a, b) = (Key::first(1), Key::first(2));
        let (key, _) = groups.join("g", "t", member(a));
        assert_eq!(groups.join("g", "t", member(b)), (key, false));
        let group = groups.get_mut(key).expect("made");
        assert_eq!(group.turn_order().collect::<Vec<_>>(), [0, 1]);
        assert_eq!(group.take_turn(0).session, a);
        assert_eq!(group.turn_order().collect::<Vec<_>>(), [1, 0]);
        assert!(groups.leave(key, a).is_none());
        assert!(groups.leave(key, b).is_some());
        assert!(groups.get(key).is_none());
        assert!(groups.join("g", "t", member(a)).1, "made anew");
    }
}
