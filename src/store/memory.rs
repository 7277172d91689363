//! `type: memory`: every channel in memory, bounded by the provider's
//! `max_bytes` with the same reserve as redb, and written to a snapshot
//! only at a graceful shutdown. Its durability is exactly the last
//! successful snapshot (invariant 14): a crash, an OOM kill or a power cut
//! loses everything since the last start.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::apply::{apply_batch, RecordHead, Tables};
use super::budget::Budget;
use super::disk::{Disk, RealDisk};
use super::error::StoreError;
pub(crate) use super::memory_channel::MemoryChannel;
use super::snapshot::{self, SnapshotDir};
use super::types::{
    empty_read, ChannelState, Message, Outcome, Read, ReadBatch, ReadLimit, Record, Usage, Write,
};
use super::validate::check_writes;
use super::Provider;

pub struct MemoryProvider {
    name: String,
    budget: Budget,
    channels: BTreeMap<String, MemoryChannel>,
    /// `None` for `snapshot_dir: none`: nothing is kept across a restart.
    snapshot: Option<SnapshotDir>,
    /// The shutdown this provider's snapshot will be, one past the last
    /// loaded, so a file left from an older one is recognised at load.
    generation: u64,
    warnings: Vec<String>,
}

impl MemoryProvider {
    /// Opens a memory provider: with a snapshot directory, takes its
    /// `saguin.lock` and loads what the last graceful shutdown wrote. A
    /// damaged or unreadable channel file stops the open, naming the file.
    pub fn open(
        name: &str,
        max_bytes: u64,
        reserve_bytes: u64,
        snapshot_dir: Option<&Path>,
    ) -> Result<MemoryProvider, StoreError> {
        Self::open_on(
            RealDisk::shared(),
            name,
            max_bytes,
            reserve_bytes,
            snapshot_dir,
        )
    }

    /// [`MemoryProvider::open`] with its snapshot read and written on
    /// `disk`.
    pub fn open_on(
        disk: Arc<dyn Disk>,
        name: &str,
        max_bytes: u64,
        reserve_bytes: u64,
        snapshot_dir: Option<&Path>,
    ) -> Result<MemoryProvider, StoreError> {
        let mut provider = MemoryProvider {
            name: name.to_string(),
            budget: Budget::new(max_bytes, reserve_bytes),
            channels: BTreeMap::new(),
            snapshot: None,
            generation: 1,
            warnings: Vec::new(),
        };
        let Some(dir) = snapshot_dir else {
            return Ok(provider);
        };
        let dir = SnapshotDir::open(disk, dir, name)?;
        let loaded = snapshot::load(&dir, snapshot::max_file_bytes(max_bytes))?;
        for warning in &loaded.warnings {
            log::warn!("storage provider {name}: {warning}");
        }
        provider.budget.used_bytes = loaded
            .channels
            .values()
            .map(MemoryChannel::used_bytes)
            .sum();
        provider.channels = loaded.channels;
        provider.generation = loaded.last_generation + 1;
        provider.warnings = loaded.warnings;
        provider.snapshot = Some(dir);
        Ok(provider)
    }

    /// What loading the snapshot found worth telling the operator, and
    /// not worth refusing to start over (the manifest's findings).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// The snapshot directory, if there is one.
    pub fn snapshot_dir(&self) -> Option<&PathBuf> {
        self.snapshot.as_ref().map(SnapshotDir::path)
    }
}

/// The channels, as the batch changes them. Nothing here can fail once the
/// batch has been validated, which is what makes a memory batch atomic.
struct MemoryTables<'a> {
    channels: &'a mut BTreeMap<String, MemoryChannel>,
}

impl MemoryTables<'_> {
    fn channel(&mut self, name: &str) -> &mut MemoryChannel {
        if !self.channels.contains_key(name) {
            self.channels
                .insert(name.to_string(), MemoryChannel::default());
        }
        self.channels
            .get_mut(name)
            .expect("inserted just above when absent")
    }
}

impl Tables for MemoryTables<'_> {
    fn state(&mut self, channel: &str) -> Result<ChannelState, StoreError> {
        Ok(self
            .channels
            .get(channel)
            .map(|c| c.state)
            .unwrap_or_default())
    }

    fn set_state(&mut self, channel: &str, state: ChannelState) -> Result<(), StoreError> {
        self.channel(channel).state = state;
        Ok(())
    }

    fn insert_record(
        &mut self,
        channel: &str,
        offset: u64,
        message: &Message,
    ) -> Result<(), StoreError> {
        self.channel(channel)
            .records
            .insert(offset, message.clone());
        Ok(())
    }

    fn oldest(&mut self, channel: &str, limit: usize) -> Result<Vec<RecordHead>, StoreError> {
        let Some(c) = self.channels.get(channel) else {
            return Ok(Vec::new());
        };
        Ok(c.records
            .iter()
            .take(limit)
            .map(|(&offset, m)| RecordHead {
                offset,
                received_at_ms: m.received_at_ms,
                size_bytes: m.size_bytes(),
            })
            .collect())
    }

    fn remove_records(&mut self, channel: &str, offsets: &[u64]) -> Result<(), StoreError> {
        if let Some(c) = self.channels.get_mut(channel) {
            for offset in offsets {
                c.records.remove(offset);
            }
        }
        Ok(())
    }

    fn position(&mut self, channel: &str, reader: &str) -> Result<Option<u64>, StoreError> {
        Ok(self
            .channels
            .get(channel)
            .and_then(|c| c.positions.get(reader).copied()))
    }

    fn set_position(&mut self, channel: &str, reader: &str, offset: u64) -> Result<(), StoreError> {
        self.channel(channel)
            .positions
            .insert(reader.to_string(), offset);
        Ok(())
    }

    fn remove_position(&mut self, channel: &str, reader: &str) -> Result<bool, StoreError> {
        Ok(self
            .channels
            .get_mut(channel)
            .is_some_and(|c| c.positions.remove(reader).is_some()))
    }

    fn record_head(
        &mut self,
        channel: &str,
        offset: u64,
    ) -> Result<Option<RecordHead>, StoreError> {
        Ok(self
            .channels
            .get(channel)
            .and_then(|c| c.records.get(&offset))
            .map(|m| RecordHead {
                offset,
                received_at_ms: m.received_at_ms,
                size_bytes: m.size_bytes(),
            }))
    }

    fn entry_len(&mut self, channel: &str, key: &str) -> Result<Option<u64>, StoreError> {
        Ok(self
            .channels
            .get(channel)
            .and_then(|c| c.entries.get(key))
            .map(|v| v.len() as u64))
    }

    fn put_entry(&mut self, channel: &str, key: &str, value: &[u8]) -> Result<(), StoreError> {
        self.channel(channel)
            .entries
            .insert(key.to_string(), value.to_vec());
        Ok(())
    }

    fn remove_entry(&mut self, channel: &str, key: &str) -> Result<(), StoreError> {
        if let Some(c) = self.channels.get_mut(channel) {
            c.entries.remove(key);
        }
        Ok(())
    }
}

impl Provider for MemoryProvider {
    fn name(&self) -> &str {
        &self.name
    }

    fn usage(&self) -> Usage {
        self.budget.usage()
    }

    fn channel(&self, channel: &str) -> ChannelState {
        self.channels
            .get(channel)
            .map(|c| c.state)
            .unwrap_or_default()
    }

    fn channels(&self) -> Vec<(String, ChannelState)> {
        self.channels
            .iter()
            .map(|(name, c)| (name.clone(), c.state))
            .collect()
    }

    fn commit(&mut self, writes: &[Write]) -> Result<Vec<Outcome>, StoreError> {
        check_writes(writes)?;
        if self.snapshot.is_some() {
            // A channel this provider could not write a snapshot of is
            // refused now, not lost at shutdown.
            for name in writes
                .iter()
                .flat_map(|w| std::iter::once(w.channel()).chain(w.other_channel()))
            {
                if !self.channels.contains_key(name) {
                    snapshot::snapshot_file_name(name).map_err(StoreError::Invalid)?;
                }
            }
        }
        let mut budget = self.budget;
        let outcomes = apply_batch(
            &mut MemoryTables {
                channels: &mut self.channels,
            },
            &mut budget,
            writes,
        )?;
        self.budget = budget;
        Ok(outcomes)
    }

    fn read(&self, channel: &str, from_offset: u64, limit: ReadLimit) -> Result<Read, StoreError> {
        let Some(c) = self.channels.get(channel) else {
            return Ok(empty_read(ChannelState::default(), from_offset));
        };
        let s = c.state;
        if from_offset < s.floor || from_offset > s.next {
            return Ok(empty_read(s, from_offset));
        }
        let mut records = Vec::new();
        let mut bytes = 0u64;
        for (&offset, message) in c.records.range(from_offset..) {
            if records.len() as u64 >= u64::from(limit.max_records) {
                break;
            }
            let size = message.size_bytes();
            if !records.is_empty() && bytes.saturating_add(size) > limit.max_bytes {
                break;
            }
            bytes += size;
            records.push(Record {
                offset,
                message: message.clone(),
            });
        }
        Ok(Read::Records(ReadBatch {
            floor: s.floor,
            next: s.next,
            records,
        }))
    }

    fn position(&self, channel: &str, reader: &str) -> Result<Option<u64>, StoreError> {
        Ok(self
            .channels
            .get(channel)
            .and_then(|c| c.positions.get(reader).copied()))
    }

    fn lowest_position(&self, channel: &str) -> Result<Option<u64>, StoreError> {
        Ok(self
            .channels
            .get(channel)
            .and_then(|c| c.positions.values().min().copied()))
    }

    fn first_at_or_after(&self, channel: &str, at_ms: u64) -> Result<Option<u64>, StoreError> {
        // Every record is looked at: receipt times can run backwards when
        // the clock is stepped, and the answer is the earliest offset.
        Ok(self.channels.get(channel).and_then(|c| {
            c.records
                .iter()
                .find(|(_, m)| m.received_at_ms >= at_ms)
                .map(|(&offset, _)| offset)
        }))
    }

    fn entries(&self, channel: &str) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
        Ok(self.channels.get(channel).map_or_else(Vec::new, |c| {
            c.entries
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        }))
    }

    fn entry(&self, channel: &str, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self
            .channels
            .get(channel)
            .and_then(|c| c.entries.get(key).cloned()))
    }

    fn close(self: Box<Self>) -> Result<(), StoreError> {
        match &self.snapshot {
            Some(dir) => snapshot::save(dir, &self.channels, self.generation),
            None => Ok(()),
        }
    }
}
