//! The retained store kept in the provider `broker.retained.storage` names:
//! one keyed entry per topic in the broker-internal space `$retained`,
//! holding the value as a channel holds a record.
//!
//! A client's retained publish to a broadcast topic is written first: it
//! is routed, and acknowledged, once its value is committed, so a value a
//! publisher was told is kept survives what the provider survives. A
//! value the provider has no room for is refused `0x97`, as a channel at
//! its bound refuses, and one it fails to write `0x83`. Values that leave
//! (a deletion, the publisher's expiry, `retention_period`) are removed
//! from the provider as they leave memory.

use crate::core::refusal::Refusal;
use std::rc::Rc;

use crate::core::broadcast::retained::RETAINED_SPACE;
use crate::core::message::Message;
use crate::core::message::{from_stored, publisher_id, to_stored};
use crate::core::{Broker, Key, Transport};
use crate::core::{Then, Written};
use crate::store::{encoding, Write};

/// A retained publish waiting on its value's write.
pub(crate) struct RetainedWrite {
    conn: Key,
    /// The PUBACK slot of a QoS 1 publish.
    slot: Option<u64>,
    message: Message,
}

impl Broker {
    /// The write that keeps `message` as its topic's value, or removes the
    /// value for an empty payload.
    fn retained_write(&mut self, message: &Message) -> Write {
        if message.payload.is_empty() {
            return Write::DropEntry {
                channel: RETAINED_SPACE.to_string(),
                key: message.topic.to_string(),
            };
        }
        let id = publisher_id(message)
            .unwrap_or_else(|| self.id_generator.next_id(message.received_at_unix_ms));
        Write::PutEntry {
            channel: RETAINED_SPACE.to_string(),
            key: message.topic.to_string(),
            value: encoding::message_bytes(&to_stored(message, &id)),
            use_reserve: false,
        }
    }

    /// A client's retained publish to a broadcast topic, where the retained
    /// store has a provider: written first. Gives the message back when the
    /// store has no provider and the publish takes the ordinary path.
    pub(crate) fn retain_after_write(
        &mut self,
        conn: Key,
        slot: Option<u64>,
        message: Message,
        now_ms: u64,
        out: &mut impl Transport,
    ) -> Option<Message> {
        let Some(provider) = self.settings.retained_provider else {
            return Some(message);
        };
        if !message.retain || self.persist.writes_through {
            return Some(message);
        }
        if !self.retained.has_room_for(&message) {
            // Refused by the ordinary path, which says why.
            return Some(message);
        }
        let write = self.retained_write(&message);
        let then = Then::Retained(Box::new(RetainedWrite {
            conn,
            slot,
            message,
        }));
        if let Err(then) = self.send_write(provider, write, then, out) {
            self.finish_session_write(*then, Written::Failed, now_ms, out);
        }
        None
    }

    /// A retained value's write came back: the publish is routed and
    /// answered, or refused with nothing kept.
    pub(crate) fn retained_written(
        &mut self,
        write: RetainedWrite,
        written: Written,
        now_ms: u64,
        out: &mut impl Transport,
    ) {
        let RetainedWrite {
            conn,
            slot,
            message,
        } = write;
        let answer = match written {
            Written::Stored => {
                // Logged next where a durable session is owed it, and
                // answered from there.
                let Some(message) = self.log_before_route(Some(conn), slot, message, now_ms, out)
                else {
                    return;
                };
                let before = std::mem::replace(&mut self.persist.writes_through, true);
                let routed = self.accept_message(message, now_ms, out);
                self.persist.writes_through = before;
                routed
            }
            Written::Full => {
                self.stats.retained_refused += 1;
                Err(Refusal::RetainedProviderFull)
            }
            Written::Failed => Err(Refusal::RetainedNotStored),
        };
        match (slot, answer) {
            (Some(slot), answer) => {
                if let Err(reason) = answer {
                    self.stats.count_publish_refusal(reason);
                    log::warn!(
                        "refusing a retained publish from {}: {reason}",
                        self.client_id_of(conn)
                    );
                }
                self.complete_puback(conn, slot, answer, now_ms, out)
            }
            (None, Err(reason)) => {
                self.stats.count_publish_refusal(reason);
                log::warn!("a retained QoS 0 publish was not kept: {reason}");
            }
            (None, Ok(())) => {}
        }
    }

    /// Keeps a value set by a path nobody waits on (a Will, an exactly-once
    /// release) in the provider too. A value the provider refuses stays in
    /// memory until the broker stops, and the refusal is logged.
    pub(crate) fn retained_set_behind(&mut self, message: &Message, out: &mut impl Transport) {
        let Some(provider) = self.settings.retained_provider else {
            return;
        };
        if self.persist.writes_through {
            return;
        }
        let write = self.retained_write(message);
        self.send_retained_background(provider, write, out);
    }

    /// Removes the values that left memory from the provider.
    pub(crate) fn retained_left(&mut self, topics: Vec<Box<str>>, out: &mut impl Transport) {
        let Some(provider) = self.settings.retained_provider else {
            return;
        };
        for topic in topics {
            let write = Write::DropEntry {
                channel: RETAINED_SPACE.to_string(),
                key: topic.to_string(),
            };
            self.send_retained_background(provider, write, out);
        }
    }

    fn send_retained_background(
        &mut self,
        provider: usize,
        write: Write,
        out: &mut impl Transport,
    ) {
        let topic = match &write {
            Write::PutEntry { key, .. } | Write::DropEntry { key, .. } => key.as_str().into(),
            _ => Box::from(""),
        };
        if self
            .send_write(provider, write, Then::RetainedBehind { topic }, out)
            .is_err()
        {
            log::warn!("storage is behind: a retained value's change was not stored");
        }
    }

    /// Loads, as the broker starts, the values the provider kept.
    pub fn restore_retained(&mut self, entries: Vec<(String, Vec<u8>)>) {
        let mut loaded = 0u64;
        for (topic, bytes) in entries {
            let stored = match encoding::message_from_bytes(&bytes) {
                Ok(stored) => stored,
                Err(error) => {
                    log::error!(
                        "the retained value of {topic:?} cannot be read ({}); it is left as it is",
                        error.0
                    );
                    continue;
                }
            };
            let message = Rc::new(from_stored(&stored));
            if self.retained.set(message).is_err() {
                log::warn!("the retained value of {topic:?} does not fit the retained store's memory bound; it is not served");
                continue;
            }
            loaded += 1;
        }
        if loaded > 0 {
            log::info!("retained values restored: {loaded}");
        }
    }
}
