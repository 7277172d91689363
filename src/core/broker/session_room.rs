//! Room for sessions within the bound on session memory
//! (`Settings::session_memory_max_bytes`), as the session store answers
//! when it is full: a session asking to outlive its connection with no
//! room is given one that ends with it (Session Expiry Interval 0; on
//! 3.1.1 a clean session), a Will with no room refuses the CONNECT
//! `0x97`, and a SUBSCRIBE with no room for its filters is refused `0x97`
//! for each, the session kept as it was. Connected sessions are bounded
//! by the connection table; this bounds the ones that are away, as does
//! `Settings::max_persistent_sessions` on their number, each holding a
//! queue of up to `session_queue_bytes` that the charge does not count.

use crate::codec::{Subscribe, Will};
use crate::core::refusal::Refusal;
use crate::core::session::charge;
use crate::core::Broker;

impl Broker {
    /// The Session Expiry Interval a CONNECT is granted once room is
    /// asked for: `expiry_s`, or 0 when a session outliving its connection
    /// has no room. A resumed session is counted already, so only its
    /// Will asks for more.
    pub(crate) fn session_room(
        &mut self,
        client_id: &str,
        clean_start: bool,
        expiry_s: u32,
        will: Option<&Will>,
    ) -> Result<u32, Refusal> {
        if expiry_s == 0 {
            return Ok(0);
        }
        let will_bytes = will.map_or(0, charge::will_bytes);
        let existing = self
            .sessions
            .key_of(client_id)
            .and_then(|k| self.sessions.get(k));
        // A session kept already is counted already, resumed or replaced.
        let counted = existing.is_some_and(|s| s.expiry_interval_s > 0);
        if !counted && self.persistent_sessions() >= self.settings.max_persistent_sessions as usize
        {
            log::warn!(
                "{} sessions are kept past their connections already: {client_id} is given a session that ends with its connection; raise broker.limits.max_persistent_sessions",
                self.settings.max_persistent_sessions
            );
            self.stats.sessions_dropped_persistent_full += 1;
            return Ok(0);
        }
        let (more_bytes, freed_bytes) = match existing {
            Some(_) if !clean_start => (will_bytes, 0),
            existing => (
                charge::session_bytes(client_id, []) + will_bytes,
                existing.map_or(0, |s| s.charged_bytes),
            ),
        };
        if self.sessions.has_room_for(more_bytes, freed_bytes) {
            return Ok(expiry_s);
        }
        if will.is_some() {
            return Err(Refusal::WillNoRoom);
        }
        log::warn!(
            "session memory is full ({} bytes charged): {client_id} is given a session that ends with its connection; raise the max_bytes of the provider broker.session.storage names",
            self.sessions.charged_bytes()
        );
        self.stats.sessions_dropped_storage_full += 1;
        Ok(0)
    }

    /// Sessions asking to outlive their connections, connected or not.
    /// Counted when a CONNECT asks for one, never per packet: the table
    /// holds at most `max_connections` more than the bound.
    fn persistent_sessions(&self) -> usize {
        self.sessions
            .iter()
            .filter(|(_, s)| s.expiry_interval_s > 0)
            .count()
    }

    /// Whether the filters `subscribe` would add fit the bound.
    pub(crate) fn room_for_filters(
        &self,
        session_key: crate::core::Key,
        subscribe: &Subscribe,
    ) -> bool {
        let Some(session) = self.sessions.get(session_key) else {
            return true;
        };
        let more_bytes = subscribe
            .filters
            .iter()
            .filter(|(filter, _)| !session.subscriptions.contains_key(filter.as_str()))
            .map(|(filter, _)| charge::filter_bytes(filter))
            .sum();
        self.sessions.has_room_for(more_bytes, 0)
    }
}
