//! One channel held whole in memory: what the memory provider keeps, what
//! a snapshot file carries, and what the tools and conversions load.

use std::collections::BTreeMap;

use super::apply::{entry_size_bytes, position_size_bytes};
use super::types::{ChannelState, Message};

/// One channel as the memory provider holds it, and as a snapshot file
/// carries it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct MemoryChannel {
    pub(crate) state: ChannelState,
    pub(crate) records: BTreeMap<u64, Message>,
    pub(crate) positions: BTreeMap<String, u64>,
    pub(crate) entries: BTreeMap<String, Vec<u8>>,
}

impl MemoryChannel {
    /// What this channel counts against its provider.
    pub(crate) fn used_bytes(&self) -> u64 {
        self.state.record_bytes + self.state.position_bytes + self.state.entry_bytes
    }
}

/// Recomputes a channel's byte counters from what it holds, for the check
/// a loaded snapshot must pass: records, positions, entries.
pub(crate) fn counted(c: &MemoryChannel) -> (u64, u64, u64) {
    let record_bytes = c.records.values().map(Message::size_bytes).sum();
    let position_bytes = c.positions.keys().map(|r| position_size_bytes(r)).sum();
    let entry_bytes = c
        .entries
        .iter()
        .map(|(k, v)| entry_size_bytes(k, v.len() as u64))
        .sum();
    (record_bytes, position_bytes, entry_bytes)
}
