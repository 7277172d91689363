//! Every session the broker holds, by key and by client id.

use std::hash::{BuildHasher, RandomState};

use hashbrown::HashTable;

use crate::core::session::charge;
use crate::core::session::Session;
use crate::core::slab::{Key, Slab};

/// The secret the ids the broker assigns are derived from: drawn from the
/// operating system's random source at every start by the shell, so that
/// no assigned id can be guessed from another and a client cannot walk
/// the ids to take over a session it was never told of. Zero in the
/// core's own tests, which want the same ids every run.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct ClientIdKey(pub [u8; 32]);

impl std::fmt::Debug for ClientIdKey {
    // Never shown: with the key, every assigned id could be computed.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClientIdKey(..)")
    }
}

pub(crate) struct Sessions {
    table: Slab<Session>,
    /// Each client id's session: every entry names a session the table
    /// holds, and a session another has replaced may be absent from it.
    /// An entry is the session's key alone (8 B), hashed and compared by
    /// the client id the session holds: the id is kept once.
    by_client_id: HashTable<Key>,
    hasher: RandomState,
    /// How many client ids the broker has assigned, and the secret each
    /// is derived from with that count.
    assigned_ids: u64,
    client_id_key: ClientIdKey,
    /// The last session epoch given.
    last_epoch: u64,
    /// What every session held is charged, and the bound on it.
    charged_bytes: u64,
    max_charged_bytes: u64,
}

impl Sessions {
    /// A table whose sessions' charges are bounded by `max_charged_bytes`:
    /// a session may outlive its connection, or take another filter, only
    /// within it.
    pub fn new(max_charged_bytes: u64, client_id_key: ClientIdKey) -> Sessions {
        Sessions {
            // Sessions outliving their connections are bounded by their
            // charges (see `has_room_for`), connected ones by the
            // connection table; the slab grows with use within both.
            table: Slab::growable(u32::MAX as usize),
            by_client_id: HashTable::new(),
            hasher: RandomState::new(),
            assigned_ids: 0,
            client_id_key,
            last_epoch: 0,
            charged_bytes: 0,
            max_charged_bytes,
        }
    }

    pub fn get(&self, key: Key) -> Option<&Session> {
        self.table.get(key)
    }

    pub fn get_mut(&mut self, key: Key) -> Option<&mut Session> {
        self.table.get_mut(key)
    }

    pub fn contains(&self, key: Key) -> bool {
        self.table.contains(key)
    }

    pub fn len(&self) -> usize {
        self.table.len()
    }

    pub fn keys(&self) -> Vec<Key> {
        self.table.keys()
    }

    pub fn iter(&self) -> impl Iterator<Item = (Key, &Session)> {
        self.table.iter()
    }

    /// The session `client_id` names, if one does.
    pub fn key_of(&self, client_id: &str) -> Option<Key> {
        let hash = self.hasher.hash_one(client_id);
        self.by_client_id
            .find(hash, |&key| self.id_of(key) == Some(client_id))
            .copied()
    }

    fn id_of(&self, key: Key) -> Option<&str> {
        self.table.get(key).map(|session| &*session.client_id)
    }

    /// Adds a session for its client id, which names it from now on. What
    /// the id named before must have been ended first.
    pub fn insert(&mut self, mut session: Session) -> Key {
        self.last_epoch += 1;
        session.epoch = self.last_epoch;
        session.charged_bytes = charge_of(&session);
        self.charged_bytes += session.charged_bytes;
        let hash = self.hasher.hash_one(&*session.client_id);
        let key = self
            .table
            .insert_with(|_| session)
            .expect("the session table is bounded far above its use");
        // The id names one session: an entry it had before is given the
        // new key (its session should have been ended first, see above).
        let table = &self.table;
        let hasher = &self.hasher;
        let id = &*table.get(key).expect("just inserted").client_id;
        let earlier = |&old: &Key| old != key && table.get(old).is_none_or(|s| *s.client_id == *id);
        match self.by_client_id.find_entry(hash, earlier) {
            Ok(mut entry) => {
                debug_assert!(!table.contains(*entry.get()), "ended first");
                *entry.get_mut() = key;
            }
            Err(_) => {
                self.by_client_id.insert_unique(hash, key, |&k| {
                    hasher.hash_one(table.get(k).map_or("", |s| &*s.client_id))
                });
            }
        }
        debug_assert!(self.by_client_id.len() <= self.table.len());
        key
    }

    /// Takes a session out; its client id names nothing after, unless it
    /// already named a newer session.
    pub fn remove(&mut self, key: Key) -> Option<Session> {
        let session = self.table.remove(key)?;
        self.charged_bytes -= session.charged_bytes;
        let hash = self.hasher.hash_one(&*session.client_id);
        if let Ok(entry) = self.by_client_id.find_entry(hash, |&k| k == key) {
            entry.remove();
        }
        debug_assert!(self.by_client_id.len() <= self.table.len());
        Some(session)
    }

    /// Counts `key`'s session again after its filters changed.
    pub fn recharge(&mut self, key: Key) {
        let Some(session) = self.table.get_mut(key) else {
            return;
        };
        let charged = charge_of(session);
        self.charged_bytes = self.charged_bytes - session.charged_bytes + charged;
        session.charged_bytes = charged;
    }

    /// Whether `more_bytes` fit the bound once `freed_bytes` (a session
    /// about to be replaced) are given back.
    pub fn has_room_for(&self, more_bytes: u64, freed_bytes: u64) -> bool {
        self.charged_bytes
            .saturating_sub(freed_bytes)
            .saturating_add(more_bytes)
            <= self.max_charged_bytes
    }

    pub fn charged_bytes(&self) -> u64 {
        self.charged_bytes
    }

    /// A client id for a client that sent none, unlike any held now: 128
    /// bits of SHA-512 over the start's secret and a count, so the ids
    /// given out say nothing of the next one.
    pub fn assign_client_id(&mut self) -> String {
        use sha2::{Digest, Sha512};
        loop {
            self.assigned_ids += 1;
            let digest = Sha512::new()
                .chain_update(self.client_id_key.0)
                .chain_update(self.assigned_ids.to_le_bytes())
                .finalize();
            let id: String = std::iter::once("saguin-".to_string())
                .chain(digest[..16].iter().map(|byte| format!("{byte:02x}")))
                .collect();
            if self.key_of(&id).is_none() {
                return id;
            }
        }
    }
}

fn charge_of(session: &Session) -> u64 {
    charge::session_bytes(
        &session.client_id,
        session.subscriptions.keys().map(|f| &**f),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_id_names_its_newest_session_until_that_one_ends() {
        let mut sessions = Sessions::new(u64::MAX, ClientIdKey::default());
        let old = sessions.insert(Session::new("a", 60));
        assert_eq!(sessions.key_of("a"), Some(old));
        assert!(sessions.remove(old).is_some());
        assert_eq!(sessions.key_of("a"), None);
        let new = sessions.insert(Session::new("a", 60));
        assert_eq!(sessions.key_of("a"), Some(new));
        assert!(sessions.get(new).unwrap().epoch > 0, "epochs start at 1");
        assert_eq!(sessions.len(), 1);
    }

    #[test]
    fn assigned_client_ids_are_unlike_those_held_and_follow_from_the_key() {
        let mut sessions = Sessions::new(u64::MAX, ClientIdKey::default());
        let first = sessions.assign_client_id();
        assert!(
            first.starts_with("saguin-") && first.len() == 7 + 32,
            "{first}"
        );
        let mut again = Sessions::new(u64::MAX, ClientIdKey::default());
        again.insert(Session::new(&first, 0));
        let second = again.assign_client_id();
        assert_ne!(second, first, "an id held is never given again");
        assert_eq!(
            second,
            sessions.assign_client_id(),
            "the same key, the same ids"
        );
        let mut other = Sessions::new(u64::MAX, ClientIdKey([1; 32]));
        assert_ne!(other.assign_client_id(), first, "another key, other ids");
    }

    #[test]
    fn the_index_finds_every_id_as_it_grows_and_as_sessions_end() {
        let mut sessions = Sessions::new(u64::MAX, ClientIdKey::default());
        // Enough ids for the index to grow, and rehash, several times.
        let keys: Vec<Key> = (0..1000)
            .map(|n| sessions.insert(Session::new(&format!("client-{n}"), 0)))
            .collect();
        for (n, key) in keys.iter().enumerate() {
            assert_eq!(sessions.key_of(&format!("client-{n}")), Some(*key));
        }
        for key in keys.iter().step_by(2) {
            sessions.remove(*key);
        }
        for (n, key) in keys.iter().enumerate() {
            let expected = (n % 2 == 1).then_some(*key);
            assert_eq!(sessions.key_of(&format!("client-{n}")), expected);
        }
        assert_eq!(sessions.key_of("client-1000"), None);
        assert_eq!(sessions.by_client_id.len(), 500);
    }
}
