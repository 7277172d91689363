//! The redb file's schema: its tables and meta keys, the format check a
//! file passes at open, a channel's row, and the readers every layer above
//! shares (the provider, its replay, the tools and the backup).

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use ::redb::{
    Database, ReadOnlyTable, ReadableDatabase, ReadableTable, Table, TableDefinition, Value,
    WriteTransaction,
};

use super::encoding::{
    decode_channel_state, encode_channel_state, Decoder, Encoder, CHANNEL_STATE_BYTES,
};
use super::error::db_error;
use super::error::StoreError;
use super::types::ChannelState;

/// The file layout this build writes and reads.
pub const REDB_FORMAT_VERSION: u32 = 2;

/// redb's page cache. Its default is 1GiB, which is more than some of the
/// gateways this runs on have, and on 32-bit ARM a third of the address
/// space; a few MiB holds the hot end of every channel.
pub const REDB_CACHE_BYTES: usize = 8 << 20;

pub(crate) const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");
pub(crate) const CHANNELS: TableDefinition<&str, &[u8]> = TableDefinition::new("channels");
pub(crate) const RECORDS: TableDefinition<(u32, u64), &[u8]> = TableDefinition::new("records");
pub(crate) const POSITIONS: TableDefinition<(u32, &str), u64> = TableDefinition::new("positions");
pub(crate) const ENTRIES: TableDefinition<(u32, &str), &[u8]> = TableDefinition::new("entries");

pub(crate) const META_FORMAT_VERSION: &str = "format_version";
pub(crate) const META_CREATED_BY: &str = "created_by";
pub(crate) const META_CREATED_AT_MS: &str = "created_at_ms";
pub(crate) const META_NEXT_CHANNEL_ID: &str = "next_channel_id";
/// The id of the journal beside the file; a journal with another id was
/// written for another file.
pub(crate) const META_JOURNAL_ID: &str = "journal_id";
/// Every journal frame up to this sequence is in the file.
pub(crate) const META_JOURNAL_SEQUENCE: &str = "journal_sequence";

/// The journal's fixed size. A batch that does not fit is committed to
/// redb durably, a checkpoint, which empties the journal.
pub const JOURNAL_CAPACITY_BYTES: u64 = 4 << 20;

/// Each channel's counters, by name.
pub(crate) type ChannelMap = crate::fast_hash::FastHashMap<String, ChannelEntry>;

/// A channel's id and counters, as the cache and a batch hold them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ChannelEntry {
    pub(crate) id: u32,
    pub(crate) state: ChannelState,
}

pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

pub(crate) fn encode_entry(entry: &ChannelEntry) -> Vec<u8> {
    let mut e = Encoder::with_capacity(4 + CHANNEL_STATE_BYTES);
    e.u32(entry.id);
    encode_channel_state(&entry.state, &mut e);
    e.buf
}

pub(crate) fn decode_entry(
    path: &Path,
    name: &str,
    bytes: &[u8],
) -> Result<ChannelEntry, StoreError> {
    let mut d = Decoder::new(bytes);
    let decoded = d
        .u32("the channel id")
        .and_then(|id| Ok((id, decode_channel_state(&mut d)?)))
        .and_then(|pair| d.finish("the channel row").map(|()| pair));
    match decoded {
        Ok((id, state)) => Ok(ChannelEntry { id, state }),
        Err(e) => Err(StoreError::format(
            path,
            format!("the row of channel {name:?} is damaged: {}", e.0),
        )),
    }
}

/// Creates the tables and states the version in one transaction on a new
/// file, so a file never has one without the other; on an existing one,
/// refuses a version this build does not read, or tables with no version.
/// Returns the next channel id.
pub(crate) fn check_format(db: &Database, path: &Path) -> Result<u32, StoreError> {
    let txn = db
        .begin_write()
        .map_err(db_error(path, "begin a transaction"))?;
    let existing: Vec<String> = txn
        .list_tables()
        .map_err(db_error(path, "list the tables"))?
        .map(|t| ::redb::TableHandle::name(&t).to_string())
        .collect();
    let next_channel_id;
    {
        let mut meta = txn
            .open_table(META)
            .map_err(db_error(path, "open the meta table"))?;
        let read = |meta: &Table<&str, &[u8]>, key: &str| -> Result<Option<Vec<u8>>, StoreError> {
            Ok(meta
                .get(key)
                .map_err(db_error(path, "read the meta table"))?
                .map(|v| v.value().to_vec()))
        };
        match read(&meta, META_FORMAT_VERSION)? {
            Some(v) => {
                let version = <[u8; 4]>::try_from(v.as_slice())
                    .ok()
                    .map(u32::from_le_bytes);
                if version != Some(REDB_FORMAT_VERSION) {
                    return Err(format_refusal(path, &v, read(&meta, META_CREATED_BY)?));
                }
                next_channel_id = match read(&meta, META_NEXT_CHANNEL_ID)? {
                    Some(b) => <[u8; 4]>::try_from(b.as_slice())
                        .map(u32::from_le_bytes)
                        .map_err(|_| StoreError::format(path, "the next channel id is damaged"))?,
                    None => 0,
                };
            }
            None if !existing.is_empty() => return Err(not_a_provider(path, &existing)),
            None => {
                let by = concat!("saguin ", env!("CARGO_PKG_VERSION"));
                let insert = |meta: &mut Table<&str, &[u8]>, key: &str, value: &[u8]| {
                    meta.insert(key, value)
                        .map(drop)
                        .map_err(db_error(path, "write the meta table"))
                };
                insert(
                    &mut meta,
                    META_FORMAT_VERSION,
                    &REDB_FORMAT_VERSION.to_le_bytes(),
                )?;
                insert(&mut meta, META_CREATED_BY, by.as_bytes())?;
                insert(&mut meta, META_CREATED_AT_MS, &now_ms().to_le_bytes())?;
                insert(&mut meta, META_NEXT_CHANNEL_ID, &0u32.to_le_bytes())?;
                next_channel_id = 0;
            }
        }
    }
    txn.open_table(CHANNELS)
        .map_err(db_error(path, "create the channels table"))?;
    txn.open_table(RECORDS)
        .map_err(db_error(path, "create the records table"))?;
    txn.open_table(POSITIONS)
        .map_err(db_error(path, "create the positions table"))?;
    txn.open_table(ENTRIES)
        .map_err(db_error(path, "create the entries table"))?;
    txn.commit()
        .map_err(db_error(path, "commit the format version"))?;
    Ok(next_channel_id)
}

/// The refusal of a file whose format version this build does not read;
/// `raw` is the version as stored, `by` the build that created the file.
pub(crate) fn format_refusal(path: &Path, raw: &[u8], by: Option<Vec<u8>>) -> StoreError {
    let by = by
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_else(|| "an unknown build".into());
    let shown = <[u8; 4]>::try_from(raw)
        .map(|b| u32::from_le_bytes(b).to_string())
        .unwrap_or_else(|_| format!("{raw:?}"));
    StoreError::format(
        path,
        format!("redb provider format {shown} (created by {by}); this build reads format {REDB_FORMAT_VERSION} only: open it with the build that created it"),
    )
}

/// The refusal of a redb file some other program wrote.
pub(crate) fn not_a_provider(path: &Path, tables: &[String]) -> StoreError {
    StoreError::format(
        path,
        format!("a redb file with tables ({}) and no Sagüin format version: not a Sagüin provider, and it is not adopted", tables.join(", ")),
    )
}

pub(crate) fn load_channels(db: &Database, path: &Path) -> Result<ChannelMap, StoreError> {
    let txn = db
        .begin_read()
        .map_err(db_error(path, "begin a read transaction"))?;
    read_channel_rows(&txn, path)
}

/// Every channel's row, as one read transaction sees them.
pub(crate) fn read_channel_rows(
    txn: &::redb::ReadTransaction,
    path: &Path,
) -> Result<ChannelMap, StoreError> {
    let table = txn
        .open_table(CHANNELS)
        .map_err(db_error(path, "open the channels table"))?;
    let mut channels = ChannelMap::default();
    for row in table
        .iter()
        .map_err(db_error(path, "read the channels table"))?
    {
        let (k, v) = row.map_err(db_error(path, "read the channels table"))?;
        let name = k.value().to_string();
        let entry = decode_entry(path, &name, v.value())?;
        channels.insert(name, entry);
    }
    Ok(channels)
}

/// Calls `each` with every row of one channel in a table keyed by
/// (channel id, text) - its positions or its entries - in key order.
pub(crate) fn for_each_keyed<V: Value + 'static>(
    table: &ReadOnlyTable<(u32, &'static str), V>,
    id: u32,
    path: &Path,
    mut each: impl FnMut(&str, V::SelfType<'_>) -> Result<(), StoreError>,
) -> Result<(), StoreError> {
    for row in table
        .range((id, "")..)
        .map_err(db_error(path, "read a table"))?
    {
        let (k, v) = row.map_err(db_error(path, "read a row"))?;
        let (row_id, key) = k.value();
        if row_id != id {
            break;
        }
        each(key, v.value())?;
    }
    Ok(())
}

/// What the channels' counters say is held, as `max_bytes` counts it.
pub(crate) fn counted_bytes(channels: &ChannelMap) -> u64 {
    channels
        .values()
        .map(|c| c.state.record_bytes + c.state.position_bytes + c.state.entry_bytes)
        .sum()
}

pub(crate) fn write_meta_u64(
    txn: &WriteTransaction,
    path: &Path,
    key: &str,
    value: u64,
) -> Result<(), StoreError> {
    txn.open_table(META)
        .and_then(|mut meta| {
            meta.insert(key, value.to_le_bytes().as_slice())
                .map(drop)
                .map_err(Into::into)
        })
        .map_err(db_error(path, "write the meta table"))
}

/// A `u64` or `u32` value of the meta table, `None` where absent.
pub(crate) fn read_meta_number(
    db: &Database,
    path: &Path,
    key: &str,
) -> Result<Option<u64>, StoreError> {
    let txn = db
        .begin_read()
        .map_err(db_error(path, "begin a read transaction"))?;
    let meta = txn
        .open_table(META)
        .map_err(db_error(path, "open the meta table"))?;
    let Some(v) = meta
        .get(key)
        .map_err(db_error(path, "read the meta table"))?
    else {
        return Ok(None);
    };
    let bytes = v.value();
    let number = match bytes.len() {
        8 => <[u8; 8]>::try_from(bytes).map(u64::from_le_bytes).ok(),
        4 => <[u8; 4]>::try_from(bytes)
            .map(|b| u64::from(u32::from_le_bytes(b)))
            .ok(),
        _ => None,
    };
    number
        .map(Some)
        .ok_or_else(|| StoreError::format(path, format!("the meta value {key:?} is damaged")))
}

pub(crate) fn read_next_channel_id(db: &Database, path: &Path) -> Result<u32, StoreError> {
    let id = read_meta_number(db, path, META_NEXT_CHANNEL_ID)?.unwrap_or(0);
    u32::try_from(id).map_err(|_| StoreError::format(path, "the next channel id is damaged"))
}
