//! What the broker keeps for one connection: when it was accepted and last
//! heard from, and once its CONNECT is accepted, what was agreed - version,
//! keepalive, the client's limits, its topic aliases, its Will and the
//! order its PUBACKs go out in.

pub(crate) mod budget;
pub mod origin;
pub(crate) mod packet_size;

use std::collections::VecDeque;
use std::rc::Rc;

use crate::codec::{ProtocolVersion, Will};
use crate::core::refusal::Refusal;
use crate::core::slab::Key;
use crate::core::TOPIC_ALIAS_MAXIMUM;
use origin::Origin;

/// A connection that has sent its CONNECT and been accepted.
pub(crate) struct Active {
    pub version: ProtocolVersion,
    pub session: Key,
    /// The keepalive in force, after any Server Keep Alive; 0 for none.
    pub keep_alive_s: u16,
    pub client_max_packet_size: u32,
    pub client_receive_maximum: u16,
    pub topic_aliases: TopicAliases,
    /// False when the client asked not to be sent Reason Strings.
    pub problem_information: bool,
    /// Its CONNECT's Clean Start (Clean Session in 3.1.1), as it wrote it.
    pub clean_start: bool,
    /// The Session Expiry Interval granted at CONNECT.
    pub connect_expiry_s: u32,
    /// Boxed: a Will with its properties is large, and most have none.
    pub will: Option<Box<Will>>,
    pub pubacks: PubackOrder,
}

/// One QoS 1 publish's place in the PUBACK order, and its answer once known.
struct PubackSlot {
    slot: u64,
    packet_id: u16,
    answer: Option<Result<(), Refusal>>,
}

/// QoS 1 publishes awaiting their PUBACK, in arrival order: MQTT has
/// PUBACKs sent in that order, and a stored publish is answered only once
/// its commit returns (MQTT-4.6.0-2).
#[derive(Default)]
pub(crate) struct PubackOrder {
    /// Made on the first QoS 1 publish: a connection that never sends one
    /// (most of an idle fleet) holds a pointer, not a queue.
    waiting: Option<Box<Waiting>>,
}

#[derive(Default)]
struct Waiting {
    slots: VecDeque<PubackSlot>,
    /// The place the next publish takes.
    next_slot: u64,
}

impl PubackOrder {
    /// Takes the next place in the order for a publish just received.
    pub fn reserve(&mut self, packet_id: u16) -> u64 {
        let waiting = self.waiting.get_or_insert_with(Default::default);
        let slot = waiting.next_slot;
        waiting.next_slot += 1;
        debug_assert!(waiting.slots.back().is_none_or(|last| last.slot < slot));
        waiting.slots.push_back(PubackSlot {
            slot,
            packet_id,
            answer: None,
        });
        slot
    }

    /// Records the answer for `slot`, once known: stored, or why not.
    pub fn answer(&mut self, slot: u64, answer: Result<(), Refusal>) {
        let waiting = self.waiting.as_mut();
        debug_assert!(
            waiting.as_ref().is_some_and(|w| slot < w.next_slot),
            "a slot this order handed out"
        );
        if let Some(entry) = waiting.and_then(|w| w.slots.iter_mut().find(|e| e.slot == slot)) {
            debug_assert!(entry.answer.is_none(), "a publish is answered once");
            entry.answer = Some(answer);
        }
    }

    /// The next PUBACK due - the oldest publish's, once it has its answer -
    /// as its packet identifier and answer. A later publish answered first
    /// waits behind it.
    pub fn next_due(&mut self) -> Option<(u16, Result<(), Refusal>)> {
        let slots = &mut self.waiting.as_mut()?.slots;
        let answer = slots.front()?.answer?;
        let entry = slots.pop_front()?;
        Some((entry.packet_id, answer))
    }
}

/// Topic aliases one client registered on one connection. Their number is
/// fixed when the broker is built, and told to each MQTT 5 client in its
/// CONNACK, so the table is a fixed-capacity one.
#[derive(Default)]
pub(crate) struct TopicAliases {
    /// Made on the first alias: most connections never use one.
    slots: Option<Box<AliasTable>>,
}

/// Each registered alias with its topic.
type AliasTable = heapless::Vec<(u16, Box<str>), ALIASES>;

const ALIASES: usize = TOPIC_ALIAS_MAXIMUM as usize;
// An alias is a nonzero u16, and the CONNACK advertises the bound.
const _: () = assert!(ALIASES >= 1 && ALIASES <= u16::MAX as usize);

impl TopicAliases {
    /// Applies a PUBLISH's Topic Alias to its `topic`: an empty topic
    /// takes the topic the alias names, and a topic (re)registers the
    /// alias - unless it is over `max_topic_length_bytes`, which refuses
    /// the publish later and must not be remembered.
    pub fn resolve(
        &mut self,
        alias: u16,
        topic: &mut String,
        max_topic_length_bytes: usize,
    ) -> Result<(), Refusal> {
        if alias == 0 || alias > TOPIC_ALIAS_MAXIMUM {
            return Err(Refusal::TopicAliasAboveMaximum);
        }
        let slots = self.slots.get_or_insert_with(Default::default);
        let found = slots.iter_mut().find(|(a, _)| *a == alias);
        if topic.is_empty() {
            match found {
                Some((_, registered)) => *topic = registered.to_string(),
                None => return Err(Refusal::TopicAliasUnregistered),
            }
        } else if topic.len() <= max_topic_length_bytes {
            match found {
                Some((_, registered)) => *registered = topic.as_str().into(),
                None => {
                    // Aliases are distinct numbers in 1..=ALIASES.
                    let pushed = slots.push((alias, topic.as_str().into()));
                    debug_assert!(pushed.is_ok(), "one slot per alias");
                }
            }
        }
        Ok(())
    }
}

pub(crate) struct Connection {
    /// Until its CONNECT is accepted, when the socket was accepted (the
    /// connect timeout counts from it); after, when the client was last
    /// heard from (the keepalive counts from it). One field for both
    /// keeps the entry, which every idle connection pays, 8 B smaller.
    pub heard_ms: u64,
    pub active: Option<Active>,
    /// A bridge's own session here: its publishes keep the mark that
    /// stops a record which came over a bridge from leaving over one.
    pub bridge: bool,
    pub origin: Origin,
    /// Whom the connection speaks for once admitted; `None` if anonymous.
    /// Shared with the connection's log scope.
    pub user: Option<Rc<str>>,
    /// Its CONNECT's credentials as the shell checked them off the
    /// executor; `None` where the core checks them itself.
    pub checked: Option<crate::auth::Verdict>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A connection's entry in the core's table is touched for every
    /// socket, idle or not: rarely used parts are boxed to keep it here;
    /// the source, which nearly every connection has, is inline.
    const MAX_CONNECTION_ENTRY_BYTES: usize = 128;

    #[test]
    fn a_connection_entry_stays_small() {
        let size_bytes = std::mem::size_of::<Connection>();
        assert!(
            size_bytes <= MAX_CONNECTION_ENTRY_BYTES,
            "a connection entry is {size_bytes} B, over {MAX_CONNECTION_ENTRY_BYTES} B"
        );
    }

    #[test]
    fn pubacks_go_out_in_arrival_order_once_answered() {
        let mut order = PubackOrder::default();
        assert!(order.next_due().is_none());
        let first = order.reserve(7);
        let second = order.reserve(9);
        order.answer(second, Ok(()));
        assert!(
            order.next_due().is_none(),
            "the second waits behind the first"
        );
        order.answer(first, Ok(()));
        assert_eq!(order.next_due(), Some((7, Ok(()))));
        assert_eq!(order.next_due(), Some((9, Ok(()))));
        assert!(order.next_due().is_none());
    }
}
