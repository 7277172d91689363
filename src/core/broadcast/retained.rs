//! The retained store: one current value per broadcast topic, bounded in
//! bytes, refusing a new value rather than dropping one it holds.

use std::collections::HashMap;
use std::rc::Rc;

use crate::codec::topic;
use crate::core::message::Message;

/// The internal space of retained values in the provider that keeps them.
pub const RETAINED_SPACE: &str = "$retained";

/// Why a value was not stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreFull;

pub struct RetainedStore {
    values: HashMap<Box<str>, Rc<Message>>,
    held_bytes: u64,
    max_bytes: u64,
}

impl RetainedStore {
    pub fn new(max_bytes: u64) -> RetainedStore {
        RetainedStore {
            values: HashMap::new(),
            held_bytes: 0,
            max_bytes,
        }
    }

    pub fn len(&self) -> usize {
        self.values.len()
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    pub fn held_bytes(&self) -> u64 {
        self.held_bytes
    }

    /// Whether `message` would be stored: a deletion always is.
    pub fn has_room_for(&self, message: &Message) -> bool {
        if message.payload.is_empty() {
            return true;
        }
        let old_bytes = self
            .values
            .get(&message.topic)
            .map_or(0, |old| old.cost_bytes());
        self.held_bytes - old_bytes + message.cost_bytes() <= self.max_bytes
    }

    /// Makes `message` its topic's current value; an empty payload deletes
    /// the value instead. Refuses, changing nothing, when the new value
    /// would take the store past its bound.
    pub fn set(&mut self, message: Rc<Message>) -> Result<(), StoreFull> {
        let old_bytes = self
            .values
            .get(&message.topic)
            .map_or(0, |old| old.cost_bytes());
        if message.payload.is_empty() {
            if let Some(old) = self.values.remove(&message.topic) {
                self.held_bytes -= old.cost_bytes();
            }
            return Ok(());
        }
        let new_bytes = message.cost_bytes();
        let after = self.held_bytes - old_bytes + new_bytes;
        if after > self.max_bytes {
            return Err(StoreFull);
        }
        self.held_bytes = after;
        self.values.insert(message.topic.clone(), message);
        debug_assert!(self.held_bytes <= self.max_bytes);
        Ok(())
    }

    /// The values whose topics `filter` matches, skipping any whose
    /// publisher's expiry has run out by `now_ms`.
    pub fn matching<'a>(
        &'a self,
        filter: &'a str,
        now_ms: u64,
    ) -> impl Iterator<Item = &'a Rc<Message>> + 'a {
        self.values.values().filter(move |m| {
            topic::matches(filter, &m.topic) && m.remaining_expiry_s(now_ms).is_ok()
        })
    }

    /// Removes values whose publisher's expiry has run out, or that were
    /// set longer than `retention_ms` ago; returns their topics.
    pub fn expire(&mut self, now_ms: u64, retention_ms: Option<u64>) -> Vec<Box<str>> {
        let mut freed = 0;
        let mut gone = Vec::new();
        self.values.retain(|topic, m| {
            let retained_too_long = retention_ms
                .is_some_and(|period| now_ms.saturating_sub(m.received_at_unix_ms) >= period);
            let keep = m.remaining_expiry_s(now_ms).is_ok() && !retained_too_long;
            if !keep {
                freed += m.cost_bytes();
                gone.push(topic.clone());
            }
            keep
        });
        self.held_bytes -= freed;
        gone
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{Properties, QoS};

    fn message(topic: &str, payload: &[u8], expiry_s: Option<u32>) -> Rc<Message> {
        Rc::new(Message {
            topic: topic.into(),
            payload: payload.to_vec(),
            qos: QoS::AtMostOnce,
            retain: true,
            properties: Properties {
                message_expiry_interval_s: expiry_s,
                ..Properties::default()
            }
            .into(),
            received_at_unix_ms: 0,
            publisher: None,
        })
    }

    #[test]
    fn an_empty_payload_deletes_and_the_bound_refuses_without_dropping() {
        let one = message("a", &[1; 100], None).cost_bytes();
        let mut store = RetainedStore::new(one * 2);
        store.set(message("a", &[1; 100], None)).unwrap();
        store.set(message("b", &[2; 100], None)).unwrap();
        assert_eq!(store.set(message("c", &[3; 100], None)), Err(StoreFull));
        assert_eq!(store.len(), 2, "what was held is untouched");
        // Replacing a value with one of the same size fits.
        store.set(message("a", &[4; 100], None)).unwrap();
        store.set(message("a", b"", None)).unwrap();
        assert_eq!(store.len(), 1);
        store.set(message("c", &[3; 100], None)).unwrap();
        assert_eq!(store.held_bytes(), one * 2);
    }

    #[test]
    fn matching_follows_mqtt_and_skips_expired_values() {
        let mut store = RetainedStore::new(u64::MAX);
        store
            .set(message("home/kitchen/temp", b"20", None))
            .unwrap();
        store
            .set(message("home/hall/temp", b"18", Some(10)))
            .unwrap();
        store.set(message("$SYS/x", b"1", None)).unwrap();
        assert_eq!(store.matching("home/+/temp", 0).count(), 2);
        assert_eq!(store.matching("home/+/temp", 10_000).count(), 1);
        assert_eq!(
            store.matching("#", 0).count(),
            2,
            "# does not reach $ topics"
        );
        assert_eq!(
            store.expire(10_000, None),
            vec![Box::from("home/hall/temp")]
        );
        assert_eq!(store.len(), 2);
        // retention_period removes by the time a value was set.
        assert_eq!(store.expire(10_000, Some(20_000)), Vec::<Box<str>>::new());
        assert_eq!(store.expire(20_000, Some(20_000)).len(), 2);
        assert!(store.is_empty());
    }
}
