//! The write logic of `apply.rs` over a redb write transaction: the
//! tables a batch writes into, with the channels it touched staged beside
//! the committed cache until the transaction commits.

use std::ops::Range;
use std::path::Path;

use ::redb::{ReadableTable, Table, TableDefinition, Value, WriteTransaction};

use super::apply::{apply_batch, RecordHead, Tables};
use super::budget::Budget;
use super::encoding::{encode_message, message_header, Encoder};
use super::error::db_error;
use super::error::StoreError;
use super::redb_schema::{
    encode_entry, ChannelEntry, ChannelMap, CHANNELS, ENTRIES, META, META_NEXT_CHANNEL_ID,
    POSITIONS, RECORDS,
};
use super::types::{ChannelState, Message, Outcome, Write};

/// The tables inside one write transaction, with the channels this batch
/// has touched staged beside the committed cache.
struct RedbTables<'a, 't> {
    path: &'a Path,
    txn: &'t WriteTransaction,
    // Opened on first use: a batch of appends never touches positions or
    // entries, and opening a table (and closing it at the batch's end)
    // costs a lookup and an update of redb's table of tables.
    records: Option<Table<'t, (u32, u64), &'static [u8]>>,
    positions: Option<Table<'t, (u32, &'static str), u64>>,
    entries: Option<Table<'t, (u32, &'static str), &'static [u8]>>,
    counters: Staging<'a>,
    /// A record no frame holds encoded is encoded here before it is
    /// stored: one buffer a batch, not one a record.
    scratch: Encoder,
    /// The batch's records as its journal frame already holds them.
    encoded: Option<EncodedRecords<'a>>,
}

/// The records of a batch encoded in its journal frame, in the order its
/// appends store them (`encode_batch`): the apply stores
/// these bytes rather than encoding each record a second time.
pub(crate) struct EncodedRecords<'f> {
    frame: &'f [u8],
    records: std::slice::Iter<'f, Range<usize>>,
}

impl<'f> EncodedRecords<'f> {
    pub(crate) fn new(frame: &'f [u8], records: &'f [Range<usize>]) -> Self {
        EncodedRecords {
            frame,
            records: records.iter(),
        }
    }

    fn next(&mut self) -> Option<&'f [u8]> {
        let record = self.records.next()?;
        self.frame.get(record.clone())
    }
}

/// The table in `slot`, opened in `txn` on first use.
fn opened<'s, 't, K: ::redb::Key + 'static, V: Value + 'static>(
    slot: &'s mut Option<Table<'t, K, V>>,
    txn: &'t WriteTransaction,
    definition: TableDefinition<K, V>,
    path: &Path,
    what: &'static str,
) -> Result<&'s mut Table<'t, K, V>, StoreError> {
    if slot.is_none() {
        let table = txn.open_table(definition);
        *slot = Some(table.map_err(db_error(path, what))?);
    }
    Ok(slot.as_mut().expect("opened above"))
}

impl<'t> RedbTables<'_, 't> {
    fn records(&mut self) -> Result<&mut Table<'t, (u32, u64), &'static [u8]>, StoreError> {
        let what = "open the records table";
        opened(&mut self.records, self.txn, RECORDS, self.path, what)
    }

    fn positions(&mut self) -> Result<&mut Table<'t, (u32, &'static str), u64>, StoreError> {
        let what = "open the positions table";
        opened(&mut self.positions, self.txn, POSITIONS, self.path, what)
    }

    fn entries(
        &mut self,
    ) -> Result<&mut Table<'t, (u32, &'static str), &'static [u8]>, StoreError> {
        let what = "open the entries table";
        opened(&mut self.entries, self.txn, ENTRIES, self.path, what)
    }
}

/// A batch's view of the channels' counters: those it changed, staged
/// over the provider's. Counters are all an append reads or changes, so
/// the same view forecasts a batch of appends without redb (`ahead.rs`).
pub(crate) struct Staging<'a> {
    committed: &'a ChannelMap,
    pub(crate) staged: ChannelMap,
    pub(crate) next_channel_id: u32,
}

impl<'a> Staging<'a> {
    pub(crate) fn new(committed: &'a ChannelMap, next_channel_id: u32) -> Self {
        Staging {
            committed,
            staged: ChannelMap::default(),
            next_channel_id,
        }
    }

    fn lookup(&self, channel: &str) -> Option<ChannelEntry> {
        self.staged
            .get(channel)
            .or_else(|| self.committed.get(channel))
            .copied()
    }

    /// The channel's id, assigning one to a channel this file has never
    /// held.
    fn id_for(&mut self, channel: &str) -> Result<u32, StoreError> {
        if let Some(entry) = self.lookup(channel) {
            return Ok(entry.id);
        }
        let id = self.next_channel_id;
        self.next_channel_id = id.checked_add(1).ok_or_else(|| {
            StoreError::Invalid("this provider has used every channel id".to_string())
        })?;
        self.staged.insert(
            channel.to_string(),
            ChannelEntry {
                id,
                state: ChannelState::default(),
            },
        );
        Ok(id)
    }

    pub(crate) fn state(&self, channel: &str) -> ChannelState {
        self.lookup(channel).map(|e| e.state).unwrap_or_default()
    }

    pub(crate) fn set_state(
        &mut self,
        channel: &str,
        state: ChannelState,
    ) -> Result<(), StoreError> {
        // Every write sets its channel's state: the name is copied only the
        // first time in a batch.
        if let Some(entry) = self.staged.get_mut(channel) {
            entry.state = state;
            return Ok(());
        }
        let id = self.id_for(channel)?;
        self.staged
            .insert(channel.to_string(), ChannelEntry { id, state });
        Ok(())
    }
}

impl Tables for RedbTables<'_, '_> {
    fn state(&mut self, channel: &str) -> Result<ChannelState, StoreError> {
        Ok(self.counters.state(channel))
    }

    fn set_state(&mut self, channel: &str, state: ChannelState) -> Result<(), StoreError> {
        self.counters.set_state(channel, state)
    }

    fn insert_record(
        &mut self,
        channel: &str,
        offset: u64,
        message: &Message,
    ) -> Result<(), StoreError> {
        let path = self.path;
        let id = self.counters.id_for(channel)?;
        self.scratch.buf.clear();
        let from_frame = self.encoded.as_mut().and_then(EncodedRecords::next);
        if from_frame.is_none() || cfg!(test) {
            encode_message(message, &mut self.scratch);
        }
        let encoded = std::mem::take(&mut self.scratch.buf);
        let bytes = match from_frame {
            Some(bytes) => {
                // The frame's appends and the apply's inserts pair up in
                // order; the tests check every pairing byte for byte.
                debug_assert!(!cfg!(test) || bytes == encoded.as_slice());
                bytes
            }
            None => encoded.as_slice(),
        };
        let existed = self
            .records()?
            .insert((id, offset), bytes)
            .map_err(db_error(path, "write a record"))?
            .is_some();
        self.scratch.buf = encoded;
        if existed {
            // The counters and the records disagree: storing over a record
            // would reuse an offset (invariant 9), so the batch fails.
            return Err(StoreError::format(
                path,
                format!("channel {channel:?} already holds offset {offset}, at or past its next: the file is damaged"),
            ));
        }
        Ok(())
    }

    fn oldest(&mut self, channel: &str, limit: usize) -> Result<Vec<RecordHead>, StoreError> {
        let path = self.path;
        let Some(entry) = self.counters.lookup(channel) else {
            return Ok(Vec::new());
        };
        let mut heads = Vec::with_capacity(limit.min(1024));
        let range = self
            .records()?
            .range((entry.id, 0)..=(entry.id, u64::MAX))
            .map_err(db_error(path, "read records"))?;
        for row in range.take(limit) {
            let (k, v) = row.map_err(db_error(path, "read a record"))?;
            let (received_at_ms, size_bytes) =
                message_header(v.value()).map_err(|e| StoreError::format(path, e.0))?;
            heads.push(RecordHead {
                offset: k.value().1,
                received_at_ms,
                size_bytes,
            });
        }
        Ok(heads)
    }

    fn remove_records(&mut self, channel: &str, offsets: &[u64]) -> Result<(), StoreError> {
        let path = self.path;
        let Some(entry) = self.counters.lookup(channel) else {
            return Ok(());
        };
        for &offset in offsets {
            self.records()?
                .remove((entry.id, offset))
                .map_err(db_error(path, "remove a record"))?;
        }
        Ok(())
    }

    fn position(&mut self, channel: &str, reader: &str) -> Result<Option<u64>, StoreError> {
        let path = self.path;
        let Some(entry) = self.counters.lookup(channel) else {
            return Ok(None);
        };
        Ok(self
            .positions()?
            .get((entry.id, reader))
            .map_err(db_error(path, "read a position"))?
            .map(|v| v.value()))
    }

    fn set_position(&mut self, channel: &str, reader: &str, offset: u64) -> Result<(), StoreError> {
        let path = self.path;
        let id = self.counters.id_for(channel)?;
        self.positions()?
            .insert((id, reader), offset)
            .map_err(db_error(path, "write a position"))?;
        Ok(())
    }

    fn remove_position(&mut self, channel: &str, reader: &str) -> Result<bool, StoreError> {
        let path = self.path;
        let Some(entry) = self.counters.lookup(channel) else {
            return Ok(false);
        };
        Ok(self
            .positions()?
            .remove((entry.id, reader))
            .map_err(db_error(path, "remove a position"))?
            .is_some())
    }

    fn record_head(
        &mut self,
        channel: &str,
        offset: u64,
    ) -> Result<Option<RecordHead>, StoreError> {
        let path = self.path;
        let Some(entry) = self.counters.lookup(channel) else {
            return Ok(None);
        };
        let Some(v) = self
            .records()?
            .get((entry.id, offset))
            .map_err(db_error(path, "read a record"))?
        else {
            return Ok(None);
        };
        let (received_at_ms, size_bytes) =
            message_header(v.value()).map_err(|e| StoreError::format(path, e.0))?;
        Ok(Some(RecordHead {
            offset,
            received_at_ms,
            size_bytes,
        }))
    }

    fn entry_len(&mut self, channel: &str, key: &str) -> Result<Option<u64>, StoreError> {
        let path = self.path;
        let Some(entry) = self.counters.lookup(channel) else {
            return Ok(None);
        };
        Ok(self
            .entries()?
            .get((entry.id, key))
            .map_err(db_error(path, "read an entry"))?
            .map(|v| v.value().len() as u64))
    }

    fn put_entry(&mut self, channel: &str, key: &str, value: &[u8]) -> Result<(), StoreError> {
        let path = self.path;
        let id = self.counters.id_for(channel)?;
        self.entries()?
            .insert((id, key), value)
            .map_err(db_error(path, "write an entry"))?;
        Ok(())
    }

    fn remove_entry(&mut self, channel: &str, key: &str) -> Result<(), StoreError> {
        let path = self.path;
        if let Some(entry) = self.counters.lookup(channel) {
            self.entries()?
                .remove((entry.id, key))
                .map_err(db_error(path, "remove an entry"))?;
        }
        Ok(())
    }
}

/// A batch applied inside a write transaction, and what the provider's
/// memory becomes if it commits.
pub(crate) struct Applied {
    pub(crate) outcomes: Vec<Outcome>,
    pub(crate) staged: ChannelMap,
    pub(crate) next_channel_id: u32,
    pub(crate) budget: Budget,
}

/// Applies `writes` in `txn` over the committed `channels`: the records,
/// each touched channel's row once, and the next channel id.
pub(crate) fn apply_in(
    txn: &WriteTransaction,
    path: &Path,
    channels: &ChannelMap,
    next_channel_id: u32,
    mut budget: Budget,
    writes: &[Write],
    encoded: Option<EncodedRecords<'_>>,
) -> Result<Applied, StoreError> {
    let (outcomes, staged, next_id) = {
        let mut tables = RedbTables {
            path,
            txn,
            records: None,
            positions: None,
            entries: None,
            counters: Staging::new(channels, next_channel_id),
            scratch: Encoder::default(),
            encoded,
        };
        let outcomes = apply_batch(&mut tables, &mut budget, writes)?;
        (
            outcomes,
            tables.counters.staged,
            tables.counters.next_channel_id,
        )
    };
    {
        // Each touched channel's row is written once for the batch.
        let mut rows = txn
            .open_table(CHANNELS)
            .map_err(db_error(path, "open the channels table"))?;
        for (name, entry) in &staged {
            rows.insert(name.as_str(), encode_entry(entry).as_slice())
                .map_err(db_error(path, "write a channel's counters"))?;
        }
    }
    if next_id != next_channel_id {
        let mut meta = txn
            .open_table(META)
            .map_err(db_error(path, "open the meta table"))?;
        meta.insert(META_NEXT_CHANNEL_ID, next_id.to_le_bytes().as_slice())
            .map_err(db_error(path, "write the next channel id"))?;
    }
    Ok(Applied {
        outcomes,
        staged,
        next_channel_id: next_id,
        budget,
    })
}
