//! One suite, written against [`Provider`], run against both providers:
//! two implementations of one contract are worth having only if they
//! agree, and a divergence is the failure nobody sees because neither
//! looks wrong on its own. Then what only one of them has: redb's crash
//! and format checks, the memory provider's snapshot.
//!
//! Every test works in a directory of its own under the system's temp
//! directory, so the suite runs in parallel and under QEMU.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use super::encoding::tests::{full_message, plain_message};
use super::memory::{MemoryChannel, MemoryProvider};
use super::message_id::MessageId;
use super::redb::{test_support, RedbProvider};
use super::snapshot::{encode_channel, snapshot_file_name};
use super::*;

/// A directory of one test's own, removed when it ends.
pub(crate) struct TempDir(PathBuf);

impl TempDir {
    pub(crate) fn new(test: &str) -> TempDir {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let path = std::env::temp_dir().join(format!(
            "saguin-store-{}-{}-{}",
            std::process::id(),
            test,
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&path);
        fs::create_dir_all(&path).expect("create a test directory");
        TempDir(path)
    }

    pub(crate) fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// How a test opens, closes and seeds one kind of provider.
pub(crate) trait Harness: Sized {
    type P: Provider + 'static;
    const NAME: &'static str;
    fn new(test: &str) -> Self;
    fn try_open_bounded(&self, max_bytes: u64, reserve_bytes: u64) -> Result<Self::P, StoreError>;
    /// Writes a channel's counters into the closed provider's storage.
    fn seed(&self, channel: &str, state: ChannelState);

    fn open_bounded(&self, max_bytes: u64, reserve_bytes: u64) -> Self::P {
        match self.try_open_bounded(max_bytes, reserve_bytes) {
            Ok(p) => p,
            Err(e) => panic!("open {}: {e}", Self::NAME),
        }
    }

    fn open(&self) -> Self::P {
        self.open_bounded(64 << 20, 64 << 10)
    }

    fn try_open(&self) -> Result<Self::P, StoreError> {
        self.try_open_bounded(64 << 20, 64 << 10)
    }

    /// A graceful close and an open, as a restart takes them.
    fn reopen(&self, p: Self::P) -> Self::P {
        let usage = p.usage();
        if let Err(e) = Box::new(p).close() {
            panic!("close {}: {e}", Self::NAME);
        }
        self.open_bounded(usage.max_bytes, usage.reserve_bytes)
    }
}

pub(crate) struct RedbHarness {
    dir: TempDir,
}

impl RedbHarness {
    fn file(&self) -> PathBuf {
        self.dir.path().join("saguin.redb")
    }
}

impl Harness for RedbHarness {
    type P = RedbProvider;
    const NAME: &'static str = "local";
    fn new(test: &str) -> Self {
        RedbHarness {
            dir: TempDir::new(&format!("redb-{test}")),
        }
    }
    fn try_open_bounded(
        &self,
        max_bytes: u64,
        reserve_bytes: u64,
    ) -> Result<RedbProvider, StoreError> {
        RedbProvider::open(Self::NAME, &self.file(), max_bytes, reserve_bytes)
    }
    fn seed(&self, channel: &str, state: ChannelState) {
        // Creates the file with its format first, as an open would.
        Box::new(self.open()).close().expect("close");
        test_support::seed_channel(&self.file(), channel, state);
    }
}

pub(crate) struct MemoryHarness {
    dir: TempDir,
}

impl Harness for MemoryHarness {
    type P = MemoryProvider;
    const NAME: &'static str = "volatile";
    fn new(test: &str) -> Self {
        MemoryHarness {
            dir: TempDir::new(&format!("memory-{test}")),
        }
    }
    fn try_open_bounded(
        &self,
        max_bytes: u64,
        reserve_bytes: u64,
    ) -> Result<MemoryProvider, StoreError> {
        MemoryProvider::open(Self::NAME, max_bytes, reserve_bytes, Some(self.dir.path()))
    }
    fn seed(&self, channel: &str, state: ChannelState) {
        let c = MemoryChannel {
            state,
            ..MemoryChannel::default()
        };
        let file = snapshot_file_name(channel).expect("a file name");
        fs::write(self.dir.path().join(file), encode_channel(channel, &c, 1)).expect("seed");
    }
}

// ---- helpers ------------------------------------------------------------

pub(crate) fn msg(topic: &str, payload: &[u8], received_at_ms: u64) -> Message {
    let mut m = plain_message(topic, payload);
    m.received_at_ms = received_at_ms;
    m
}

pub(crate) fn append(channel: &str, message: Message) -> Write {
    Write::Append {
        channel: channel.into(),
        message,
        channel_max_bytes: None,
    }
}

fn set_position(channel: &str, reader: &str, offset: u64) -> Write {
    Write::SetPosition {
        channel: channel.into(),
        reader: reader.into(),
        offset,
    }
}

fn trim(channel: &str, rule: TrimRule, max_records: u32) -> Write {
    Write::Trim {
        channel: channel.into(),
        rule,
        max_records,
    }
}

/// Through `commit_owned`, as the storage thread commits: on redb a batch
/// of appends is then answered before it is applied (`ahead.rs`), and
/// every read below checks that it was.
fn commit(p: &mut impl Provider, writes: Vec<Write>) -> Vec<Outcome> {
    match p.commit_owned(writes) {
        Ok(o) => o,
        Err((e, _)) => panic!("commit failed: {e}"),
    }
}

fn appended(offsets: &[u64]) -> Vec<Outcome> {
    offsets
        .iter()
        .map(|&offset| Outcome::Appended { offset })
        .collect()
}

const ALL: ReadLimit = ReadLimit {
    max_records: u32::MAX,
    max_bytes: u64::MAX,
};

fn records(p: &impl Provider, channel: &str, from: u64) -> Vec<Record> {
    match p.read(channel, from, ALL) {
        Ok(Read::Records(b)) => b.records,
        other => panic!("expected records, got {other:?}"),
    }
}

fn offsets(p: &impl Provider, channel: &str, from: u64) -> Vec<u64> {
    records(p, channel, from).iter().map(|r| r.offset).collect()
}

/// `n` records on `channel`, each the same size.
fn fill(p: &mut impl Provider, channel: &str, n: u64) -> Vec<Outcome> {
    let writes = (0..n)
        .map(|i| append(channel, msg("t/x", &[i as u8; 10], 1_000 + i)))
        .collect();
    commit(p, writes)
}

fn one_size() -> u64 {
    msg("t/x", &[0; 10], 1).size_bytes()
}

// ---- the suite ----------------------------------------------------------

fn offsets_start_at_one_and_strictly_rise<H: Harness>(h: &H) {
    let mut p = h.open();
    // Before anything is written, a channel is at the first offset, and a
    // read at 0 is below its floor: 0 is never an offset.
    let fresh = p.channel("events");
    assert_eq!((fresh.next, fresh.floor), (1, 1));
    assert_eq!(fresh, ChannelState::default());
    assert_eq!(
        p.read("events", 0, ALL).unwrap(),
        Read::BelowFloor { floor: 1 }
    );
    let out = commit(
        &mut p,
        vec![
            append("events", msg("a", b"1", 1)),
            append("events", msg("a", b"2", 2)),
            append("other", msg("b", b"3", 3)),
        ],
    );
    assert_eq!(
        out,
        vec![
            Outcome::Appended { offset: 1 },
            Outcome::Appended { offset: 2 },
            Outcome::Appended { offset: 1 },
        ]
    );
    assert_eq!(fill(&mut p, "events", 2), appended(&[3, 4]));
    assert_eq!(p.channel("events").next, 5);
    assert_eq!(p.channel("events").floor, 1);
    assert_eq!(p.channel("other").next, 2);
    assert_eq!(offsets(&p, "events", 1), vec![1, 2, 3, 4]);
    assert_eq!(
        p.read("events", 0, ALL).unwrap(),
        Read::BelowFloor { floor: 1 }
    );
}

fn offsets_are_never_reused_after_removal_or_restart<H: Harness>(h: &H) {
    let mut p = h.open();
    fill(&mut p, "events", 3);
    let out = commit(&mut p, vec![trim("events", TrimRule::BeforeOffset(4), 100)]);
    assert!(matches!(
        out[..],
        [Outcome::Trimmed(Trimmed {
            removed_records: 3,
            floor: 4,
            more: false,
            ..
        })]
    ));
    let mut p = h.reopen(p);
    let s = p.channel("events");
    assert_eq!(
        (s.next, s.floor, s.record_count, s.record_bytes),
        (4, 4, 0, 0)
    );
    assert_eq!(fill(&mut p, "events", 1), appended(&[4]));
    for below in [0, 1, 3] {
        assert_eq!(
            p.read("events", below, ALL).unwrap(),
            Read::BelowFloor { floor: 4 }
        );
    }
    let mut p = h.reopen(p);
    assert_eq!(fill(&mut p, "events", 1), appended(&[5]));
    assert_eq!(offsets(&p, "events", 4), vec![4, 5]);
}

fn counters_positions_and_records_persist<H: Harness>(h: &H) {
    let mut p = h.open();
    fill(&mut p, "events", 5);
    commit(
        &mut p,
        vec![
            trim("events", TrimRule::BeforeOffset(3), 100),
            set_position("events", "mqtt:a", 5),
            set_position("events", "mqtt:b", 3),
            Write::DropPosition {
                channel: "events".into(),
                reader: "mqtt:b".into(),
            },
        ],
    );
    let before_state = p.channel("events");
    let before_usage = p.usage();
    assert_eq!((before_state.floor, before_state.next), (3, 6));
    let before_records = records(&p, "events", 3);
    assert_eq!(before_records.len(), 3);
    let p = h.reopen(p);
    assert_eq!(p.channel("events"), before_state);
    assert_eq!(p.usage(), before_usage);
    assert_eq!(records(&p, "events", 3), before_records);
    assert_eq!(p.position("events", "mqtt:a").unwrap(), Some(5));
    assert_eq!(p.position("events", "mqtt:b").unwrap(), None);
    assert_eq!(p.channels(), vec![("events".to_string(), before_state)]);
}

fn every_field_round_trips<H: Harness>(h: &H) {
    let mut p = h.open();
    let full = full_message();
    let mut text_id = full_message();
    text_id.id = MessageId::Text("order-42".into());
    text_id.correlation_data = None;
    text_id.publisher = None;
    let mut empty = plain_message("", b"");
    empty.id = MessageId::Text(String::new());
    commit(
        &mut p,
        vec![
            append("c", full.clone()),
            append("c", text_id.clone()),
            append("c", empty.clone()),
        ],
    );
    let p = h.reopen(p);
    let got: Vec<(u64, Message)> = records(&p, "c", 1)
        .into_iter()
        .map(|r| (r.offset, r.message))
        .collect();
    assert_eq!(got, vec![(1, full), (2, text_id), (3, empty)]);
}

fn trimming_below_an_offset_raises_the_floor_with_the_removal<H: Harness>(h: &H) {
    let mut p = h.open();
    fill(&mut p, "c", 5);
    let size = one_size();
    let used = p.usage().used_bytes;
    let out = commit(&mut p, vec![trim("c", TrimRule::BeforeOffset(4), 100)]);
    assert_eq!(
        out,
        vec![Outcome::Trimmed(Trimmed {
            removed_records: 3,
            freed_bytes: 3 * size,
            floor: 4,
            more: false
        })]
    );
    let s = p.channel("c");
    assert_eq!(
        (s.floor, s.next, s.record_count, s.record_bytes),
        (4, 6, 2, 2 * size)
    );
    assert_eq!(p.usage().used_bytes, used - 3 * size);
    assert_eq!(p.read("c", 3, ALL).unwrap(), Read::BelowFloor { floor: 4 });
    assert_eq!(offsets(&p, "c", 4), vec![4, 5]);
    // Past what is held: the floor rises to next and no further.
    let out = commit(&mut p, vec![trim("c", TrimRule::BeforeOffset(100), 100)]);
    assert!(matches!(
        out[..],
        [Outcome::Trimmed(Trimmed {
            removed_records: 2,
            floor: 6,
            ..
        })]
    ));
    assert_eq!(offsets(&p, "c", 6), Vec::<u64>::new());
    // Below the floor: nothing moves, and a floor never falls.
    for below in [2, 0] {
        let out = commit(&mut p, vec![trim("c", TrimRule::BeforeOffset(below), 100)]);
        assert!(matches!(
            out[..],
            [Outcome::Trimmed(Trimmed {
                removed_records: 0,
                floor: 6,
                ..
            })]
        ));
    }
    assert_eq!(p.channel("c").floor, 6);
    // A channel nothing was written to stays at the first offset, whether
    // the trim reaches past it or below it.
    for before in [10, 0] {
        let out = commit(
            &mut p,
            vec![trim("never", TrimRule::BeforeOffset(before), 100)],
        );
        assert!(matches!(
            out[..],
            [Outcome::Trimmed(Trimmed {
                removed_records: 0,
                floor: 1,
                ..
            })]
        ));
    }
    assert_eq!(p.channel("never"), ChannelState::default());
}

fn trimming_by_age_stops_at_the_first_record_that_stays<H: Harness>(h: &H) {
    let mut p = h.open();
    // Offsets 1 to 5. The clock stepped back at offset 2; offset 4 has no
    // time.
    let times = [100, 50, 200, 0, 10];
    commit(
        &mut p,
        times
            .iter()
            .map(|&t| append("c", msg("t", b"x", t)))
            .collect(),
    );
    let out = commit(
        &mut p,
        vec![trim("c", TrimRule::OlderThan { cutoff_ms: 150 }, 100)],
    );
    assert!(matches!(
        out[..],
        [Outcome::Trimmed(Trimmed {
            removed_records: 2,
            floor: 3,
            ..
        })]
    ));
    commit(&mut p, vec![trim("c", TrimRule::BeforeOffset(4), 100)]);
    // A record with no time is never too old, and what lies behind it waits.
    let out = commit(
        &mut p,
        vec![trim("c", TrimRule::OlderThan { cutoff_ms: 1_000 }, 100)],
    );
    assert!(matches!(
        out[..],
        [Outcome::Trimmed(Trimmed {
            removed_records: 0,
            floor: 4,
            ..
        })]
    ));
    assert_eq!(offsets(&p, "c", 4), vec![4, 5]);
}

fn trimming_to_a_size_removes_the_oldest<H: Harness>(h: &H) {
    let mut p = h.open();
    fill(&mut p, "c", 5);
    let size = one_size();
    let out = commit(&mut p, vec![trim("c", TrimRule::ToBytes(2 * size), 100)]);
    assert!(matches!(
        out[..],
        [Outcome::Trimmed(Trimmed {
            removed_records: 3,
            floor: 4,
            ..
        })]
    ));
    assert_eq!(p.channel("c").record_bytes, 2 * size);
    assert_eq!(offsets(&p, "c", 4), vec![4, 5]);
    let out = commit(&mut p, vec![trim("c", TrimRule::ToBytes(2 * size), 100)]);
    assert!(matches!(
        out[..],
        [Outcome::Trimmed(Trimmed {
            removed_records: 0,
            ..
        })]
    ));
}

fn a_trim_is_bounded_and_says_when_there_is_more<H: Harness>(h: &H) {
    let mut p = h.open();
    fill(&mut p, "c", 5);
    let expect = [(2, 3, true), (2, 5, true), (1, 6, false)];
    for (removed, floor, more) in expect {
        let out = commit(&mut p, vec![trim("c", TrimRule::BeforeOffset(6), 2)]);
        match out[..] {
            [Outcome::Trimmed(t)] => {
                assert_eq!((t.removed_records, t.floor, t.more), (removed, floor, more))
            }
            _ => panic!("{out:?}"),
        }
    }
}

fn positions_are_set_read_and_dropped<H: Harness>(h: &H) {
    let mut p = h.open();
    fill(&mut p, "c", 3);
    let out = commit(
        &mut p,
        vec![
            set_position("c", "mqtt:r1", 2),
            set_position("c", "mqtt:r2", 4),
            set_position("c", "mqtt:r1", 3),
            set_position("c", "mqtt:r3", 5),
        ],
    );
    assert_eq!(
        out,
        vec![
            Outcome::PositionSet,
            Outcome::PositionSet,
            Outcome::PositionSet,
            Outcome::Refused(Refusal::PositionPastNext { next: 4 }),
        ]
    );
    assert_eq!(p.position("c", "mqtt:r1").unwrap(), Some(3));
    assert_eq!(p.position("c", "mqtt:r3").unwrap(), None);
    assert_eq!(p.lowest_position("c").unwrap(), Some(3));
    assert_eq!(p.channel("c").position_count, 2);
    let drop = |reader: &str| Write::DropPosition {
        channel: "c".into(),
        reader: reader.into(),
    };
    let out = commit(&mut p, vec![drop("mqtt:r1"), drop("mqtt:r1")]);
    assert_eq!(
        out,
        vec![
            Outcome::PositionDropped { existed: true },
            Outcome::PositionDropped { existed: false }
        ]
    );
    let s = p.channel("c");
    assert_eq!(
        (s.position_count, s.position_bytes),
        (1, POSITION_OVERHEAD_BYTES + "mqtt:r2".len() as u64)
    );
    // A channel nothing was published to takes a position at its next,
    // the first offset, and none past it.
    let out = commit(
        &mut p,
        vec![
            set_position("fresh", "bridge:up", 2),
            set_position("fresh", "bridge:up", 1),
        ],
    );
    assert_eq!(
        out,
        vec![
            Outcome::Refused(Refusal::PositionPastNext { next: 1 }),
            Outcome::PositionSet
        ]
    );
    // 0 is no offset: a position there is refused with its batch.
    match p.commit(&[set_position("fresh", "bridge:up", 0)]) {
        Err(StoreError::Invalid(why)) => assert!(why.contains("offsets start at 1"), "{why}"),
        other => panic!("expected a position at 0 refused, got {other:?}"),
    }
    let p = h.reopen(p);
    assert_eq!(p.position("c", "mqtt:r1").unwrap(), None);
    assert_eq!(p.position("c", "mqtt:r2").unwrap(), Some(4));
    assert_eq!(p.position("fresh", "bridge:up").unwrap(), Some(1));
    assert_eq!(p.lowest_position("c").unwrap(), Some(4));
    assert_eq!(p.lowest_position("none").unwrap(), None);
}

fn reads_respect_their_bounds<H: Harness>(h: &H) {
    let mut p = h.open();
    fill(&mut p, "c", 10);
    let size = one_size();
    let read = |from, max_records, max_bytes| -> Vec<u64> {
        match p
            .read(
                "c",
                from,
                ReadLimit {
                    max_records,
                    max_bytes,
                },
            )
            .unwrap()
        {
            Read::Records(b) => {
                assert_eq!((b.floor, b.next), (1, 11));
                b.records.iter().map(|r| r.offset).collect()
            }
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(read(1, 3, u64::MAX), vec![1, 2, 3]);
    assert_eq!(read(5, 100, 2 * size), vec![5, 6]);
    assert_eq!(read(5, 100, 2 * size + 1), vec![5, 6]);
    // The first record is always served, however small the byte bound.
    assert_eq!(read(5, 100, 1), vec![5]);
    assert_eq!(read(10, 100, u64::MAX), vec![10]);
    assert_eq!(read(11, 100, u64::MAX), Vec::<u64>::new());
    assert_eq!(p.read("c", 12, ALL).unwrap(), Read::PastNext { next: 11 });
    assert_eq!(p.read("c", 0, ALL).unwrap(), Read::BelowFloor { floor: 1 });
    // A channel nothing was written to: empty at the first offset, below
    // its floor at 0, past its next beyond.
    assert_eq!(
        p.read("never", 1, ALL).unwrap(),
        Read::Records(ReadBatch {
            floor: 1,
            next: 1,
            records: Vec::new()
        })
    );
    assert_eq!(
        p.read("never", 0, ALL).unwrap(),
        Read::BelowFloor { floor: 1 }
    );
    assert_eq!(p.read("never", 2, ALL).unwrap(), Read::PastNext { next: 1 });
}

fn a_full_provider_refuses_appends_and_keeps_the_reserve_for_positions<H: Harness>(h: &H) {
    let size = one_size();
    let reserve = 100;
    let mut p = h.open_bounded(4 * size + reserve, reserve);
    assert_eq!(fill(&mut p, "c", 4), appended(&[1, 2, 3, 4]));
    let out = fill(&mut p, "c", 1);
    assert_eq!(out, vec![Outcome::Refused(Refusal::ProviderFull)]);
    assert_eq!(p.channel("c").next, 5, "a refusal takes no offset");
    // Positions may use the reserve: 32 + 7 bytes each, two fit in 100.
    let out = commit(
        &mut p,
        vec![
            set_position("c", "mqtt:aa", 2),
            set_position("c", "mqtt:bb", 2),
            set_position("c", "mqtt:cc", 2),
            set_position("c", "mqtt:aa", 3),
        ],
    );
    assert_eq!(
        out,
        vec![
            Outcome::PositionSet,
            Outcome::PositionSet,
            Outcome::Refused(Refusal::ProviderFull),
            Outcome::PositionSet,
        ]
    );
    assert_eq!(
        p.usage().used_bytes,
        4 * size + 2 * (POSITION_OVERHEAD_BYTES + 7)
    );
    // Removing records frees room for appends again.
    let mut p = h.reopen(p);
    assert_eq!(
        fill(&mut p, "c", 1),
        vec![Outcome::Refused(Refusal::ProviderFull)]
    );
    commit(&mut p, vec![trim("c", TrimRule::BeforeOffset(3), 100)]);
    assert_eq!(
        fill(&mut p, "c", 2),
        vec![
            Outcome::Appended { offset: 5 },
            Outcome::Refused(Refusal::ProviderFull)
        ]
    );
}

fn a_channel_bound_refuses_one_record_and_not_the_batch<H: Harness>(h: &H) {
    let mut p = h.open();
    let size = one_size();
    let bounded = |i: u8| Write::Append {
        channel: "small".into(),
        message: msg("t/x", &[i; 10], 1),
        channel_max_bytes: Some(2 * size),
    };
    let out = commit(
        &mut p,
        vec![
            bounded(0),
            bounded(1),
            bounded(2),
            append("big", msg("t/x", &[3; 10], 1)),
        ],
    );
    assert_eq!(
        out,
        vec![
            Outcome::Appended { offset: 1 },
            Outcome::Appended { offset: 2 },
            Outcome::Refused(Refusal::ChannelFull),
            Outcome::Appended { offset: 1 },
        ]
    );
}

fn a_batch_is_all_or_nothing<H: Harness>(h: &H) {
    let mut p = h.open();
    fill(&mut p, "c", 1);
    let state = p.channel("c");
    let usage = p.usage();
    let mut long_topic = msg("t", b"x", 1);
    long_topic.topic = "x".repeat(MAX_STRING_BYTES + 1);
    for bad in [
        append("", msg("t", b"x", 1)),
        append("c", long_topic),
        trim("c", TrimRule::BeforeOffset(2), 0),
        set_position("c", "", 1),
        set_position("c", "mqtt:r", 0),
    ] {
        let batch = vec![
            append("c", msg("t", b"y", 2)),
            set_position("c", "mqtt:r", 2),
            trim("c", TrimRule::BeforeOffset(2), 10),
            append("d", msg("t", b"z", 3)),
            bad,
        ];
        match p.commit(&batch) {
            Err(StoreError::Invalid(why)) => assert!(why.starts_with("write 4:"), "{why}"),
            other => panic!("expected the batch refused, got {other:?}"),
        }
        assert_eq!(p.channel("c"), state);
        assert_eq!(p.channel("d"), ChannelState::default());
        assert_eq!(p.usage(), usage);
        assert_eq!(p.position("c", "mqtt:r").unwrap(), None);
    }
    let mut p = h.reopen(p);
    assert_eq!(p.channel("c"), state);
    assert_eq!(fill(&mut p, "c", 1), appended(&[2]));
    assert_eq!(offsets(&p, "c", 1), vec![1, 2]);
}

fn a_second_broker_is_refused_by_the_lock<H: Harness>(h: &H) {
    let p = h.open();
    let err = match h.try_open() {
        Err(e) => e,
        Ok(_) => panic!("a second open of {} succeeded", H::NAME),
    };
    match &err {
        StoreError::Locked {
            provider,
            lock_path,
        } => {
            assert_eq!(provider, H::NAME);
            assert!(
                lock_path.to_string_lossy().ends_with(".lock"),
                "{lock_path:?}"
            );
        }
        other => panic!("expected a lock refusal, got {other:?}"),
    }
    let text = err.to_string();
    assert!(text.contains(H::NAME) && text.contains(".lock"), "{text}");
    Box::new(p).close().expect("close");
    Box::new(h.open())
        .close()
        .expect("the lock is free once closed");
}

fn a_seek_by_time_takes_the_earliest_offset<H: Harness>(h: &H) {
    let mut p = h.open();
    let times = [100, 300, 200, 400];
    commit(
        &mut p,
        times
            .iter()
            .map(|&t| append("c", msg("t", b"x", t)))
            .collect(),
    );
    for (at, expect) in [
        (0, Some(1)),
        (150, Some(2)),
        (250, Some(2)),
        (350, Some(4)),
        (500, None),
    ] {
        assert_eq!(p.first_at_or_after("c", at).unwrap(), expect, "at {at}");
    }
    assert_eq!(p.first_at_or_after("never", 0).unwrap(), None);
}

fn offsets_past_32_bits_survive<H: Harness>(h: &H) {
    let start = (1u64 << 33) + 7;
    h.seed(
        "big",
        ChannelState {
            next: start,
            floor: start,
            ..ChannelState::default()
        },
    );
    let mut p = h.open();
    assert_eq!(p.channel("big").next, start);
    assert_eq!(fill(&mut p, "big", 2), appended(&[start, start + 1]));
    commit(&mut p, vec![set_position("big", "mqtt:x", start + 1)]);
    let p = h.reopen(p);
    assert_eq!(offsets(&p, "big", start), vec![start, start + 1]);
    assert_eq!(
        p.read("big", start - 1, ALL).unwrap(),
        Read::BelowFloor { floor: start }
    );
    assert_eq!(p.position("big", "mqtt:x").unwrap(), Some(start + 1));
}

/// Counters with a floor of 0 were never written by a layout whose offsets
/// start at 1: the open refuses them, naming the channel or its file,
/// rather than serve a channel where 0 could pass for an offset.
fn a_stored_floor_of_zero_is_refused<H: Harness>(h: &H) {
    h.seed(
        "zero",
        ChannelState {
            next: 3,
            floor: 0,
            ..ChannelState::default()
        },
    );
    let err = match h.try_open() {
        Err(e) => e.to_string(),
        Ok(p) => panic!("opened with {:?}", p.channels()),
    };
    assert!(err.contains("below the first offset 1"), "{err}");
    assert!(err.contains("zero"), "{err}");
}

fn usage_counts_records_and_positions_with_one_function<H: Harness>(h: &H) {
    let mut p = h.open();
    let a = full_message();
    let b = msg("x/y", &[1; 100], 5);
    commit(&mut p, vec![append("c", a.clone()), append("e", b.clone())]);
    assert_eq!(p.usage().used_bytes, a.size_bytes() + b.size_bytes());
    assert_eq!(p.channel("c").record_bytes, a.size_bytes());
    commit(&mut p, vec![set_position("c", "mqtt:me", 1)]);
    let expect = a.size_bytes() + b.size_bytes() + POSITION_OVERHEAD_BYTES + 7;
    assert_eq!(p.usage().used_bytes, expect);
    assert_eq!(p.usage().max_bytes, 64 << 20);
    assert_eq!(p.usage().append_limit_bytes(), (64 << 20) - (64 << 10));
    let p = h.reopen(p);
    assert_eq!(p.usage().used_bytes, expect);
}

fn remove(channel: &str, offset: u64) -> Write {
    Write::Remove {
        channel: channel.into(),
        offset,
    }
}

fn put_entry(channel: &str, key: &str, value: &[u8], use_reserve: bool) -> Write {
    Write::PutEntry {
        channel: channel.into(),
        key: key.into(),
        value: value.to_vec(),
        use_reserve,
    }
}

fn drop_entry(channel: &str, key: &str) -> Write {
    Write::DropEntry {
        channel: channel.into(),
        key: key.into(),
    }
}

fn a_record_is_removed_from_anywhere_and_the_floor_follows_the_oldest<H: Harness>(h: &H) {
    let mut p = h.open();
    fill(&mut p, "c", 5);
    let size = one_size();
    // From the middle: a gap, read around; the floor stays.
    assert_eq!(
        commit(&mut p, vec![remove("c", 3)]),
        vec![Outcome::Removed {
            existed: true,
            freed_bytes: size,
            floor: 1
        }]
    );
    assert_eq!(offsets(&p, "c", 1), vec![1, 2, 4, 5]);
    assert_eq!(offsets(&p, "c", 3), vec![4, 5]);
    // The oldest: the floor rises past the gap to the next record held.
    commit(&mut p, vec![remove("c", 1)]);
    let out = commit(&mut p, vec![remove("c", 2)]);
    assert_eq!(
        out,
        vec![Outcome::Removed {
            existed: true,
            freed_bytes: size,
            floor: 4
        }]
    );
    assert_eq!(p.read("c", 2, ALL).unwrap(), Read::BelowFloor { floor: 4 });
    // Absent, twice, or never held: nothing changes.
    assert_eq!(
        commit(
            &mut p,
            vec![remove("c", 2), remove("c", 99), remove("none", 1)]
        ),
        vec![
            Outcome::Removed {
                existed: false,
                freed_bytes: 0,
                floor: 4
            },
            Outcome::Removed {
                existed: false,
                freed_bytes: 0,
                floor: 4
            },
            Outcome::Removed {
                existed: false,
                freed_bytes: 0,
                floor: 1
            },
        ]
    );
    let s = p.channel("c");
    assert_eq!((s.record_count, s.record_bytes, s.next), (2, 2 * size, 6));
    assert_eq!(p.usage().used_bytes, 2 * size);
    // The last ones: the floor reaches `next`, and offsets are not reused.
    commit(&mut p, vec![remove("c", 5), remove("c", 4)]);
    let p2 = h.reopen(p);
    let s = p2.channel("c");
    assert_eq!((s.floor, s.next, s.record_count), (6, 6, 0));
    let mut p = p2;
    assert_eq!(fill(&mut p, "c", 1), appended(&[6]));
}

fn a_removal_may_use_the_reserve_and_frees_room<H: Harness>(h: &H) {
    let size = one_size();
    let mut p = h.open_bounded(3 * size + 10, 10);
    assert_eq!(fill(&mut p, "c", 3), appended(&[1, 2, 3]));
    assert_eq!(
        fill(&mut p, "c", 1),
        vec![Outcome::Refused(Refusal::ProviderFull)]
    );
    // A removal and the append it makes room for, in one batch.
    let out = commit(
        &mut p,
        vec![remove("c", 2), append("c", msg("t/x", &[9; 10], 7))],
    );
    assert!(matches!(out[0], Outcome::Removed { existed: true, .. }));
    assert_eq!(out[1], Outcome::Appended { offset: 4 });
    assert_eq!(offsets(&p, "c", 1), vec![1, 3, 4]);
}

fn move_to(channel: &str, offset: u64, to: &str, message: Message) -> Write {
    Write::Move {
        channel: channel.into(),
        offset,
        to: to.into(),
        message,
        drop_entry: None,
    }
}

fn a_record_moves_into_another_channel_whole_or_not_at_all<H: Harness>(h: &H) {
    let size = one_size();
    let mut p = h.open_bounded(3 * size + 10, 10);
    fill(&mut p, "q", 3);
    // At the bound, and no append fits: a move still does, into the reserve.
    assert_eq!(
        fill(&mut p, "q", 1),
        vec![Outcome::Refused(Refusal::ProviderFull)]
    );
    let letter = msg("t/__dlq", &[7; 12], 9);
    let out = commit(&mut p, vec![move_to("q", 1, "d", letter.clone())]);
    assert_eq!(
        out,
        vec![Outcome::Moved {
            to_offset: Some(1),
            floor: 2
        }]
    );
    assert_eq!(offsets(&p, "q", 2), vec![2, 3]);
    match p.read("d", 1, ALL).unwrap() {
        Read::Records(batch) => assert_eq!(batch.records[0].message, letter),
        other => panic!("{other:?}"),
    }
    assert_eq!(p.usage().used_bytes, 2 * size + letter.size_bytes());
    assert_eq!(p.channel("d").record_bytes, letter.size_bytes());
    // Nothing held there: nothing moves.
    let out = commit(&mut p, vec![move_to("q", 1, "d", letter.clone())]);
    assert_eq!(
        out,
        vec![Outcome::Moved {
            to_offset: None,
            floor: 2
        }]
    );
    assert_eq!(p.channel("d").record_count, 1);
    // Past max_bytes even with the reserve: refused, both channels as they were.
    let huge = msg("t/__dlq", &[1; 200], 9);
    let out = commit(&mut p, vec![move_to("q", 2, "d", huge)]);
    assert_eq!(out, vec![Outcome::Refused(Refusal::ProviderFull)]);
    assert_eq!(offsets(&p, "q", 2), vec![2, 3]);
    assert_eq!(p.channel("d").record_count, 1);
    let p = h.reopen(p);
    assert_eq!(offsets(&p, "d", 1), vec![1]);
    assert_eq!(p.usage().used_bytes, 2 * size + letter.size_bytes());
}

fn a_move_drops_its_entry_only_when_the_record_moves<H: Harness>(h: &H) {
    let entry_bytes = 2 + 4 + ENTRY_OVERHEAD_BYTES;
    let mut p = h.open_bounded(3 * one_size() + 10 + 2 * entry_bytes, 10);
    fill(&mut p, "q", 2);
    let put = |key: &str| Write::PutEntry {
        channel: "q".into(),
        key: key.into(),
        value: vec![0, 0, 0, 3],
        use_reserve: true,
    };
    commit(&mut p, vec![put("k1"), put("k2")]);
    let with_entry = |message: Message| Write::Move {
        channel: "q".into(),
        offset: 1,
        to: "d".into(),
        message,
        drop_entry: Some("k1".into()),
    };
    // Refused: the record and its entry both stay.
    let huge = msg("t/__dlq", &[1; 200], 9);
    let out = commit(&mut p, vec![with_entry(huge)]);
    assert_eq!(out, vec![Outcome::Refused(Refusal::ProviderFull)]);
    assert_eq!(p.entry("q", "k1").unwrap(), Some(vec![0, 0, 0, 3]));
    assert_eq!(offsets(&p, "q", 1), vec![1, 2]);
    // Moved: the entry goes with the record, and only that entry.
    let out = commit(&mut p, vec![with_entry(msg("t/__dlq", &[7; 12], 9))]);
    assert!(matches!(
        out[0],
        Outcome::Moved {
            to_offset: Some(1),
            ..
        }
    ));
    let p = h.reopen(p);
    assert_eq!(p.entry("q", "k1").unwrap(), None);
    assert_eq!(p.entry("q", "k2").unwrap(), Some(vec![0, 0, 0, 3]));
    assert_eq!(p.channel("q").entry_count, 1);
}

fn entries_are_put_replaced_dropped_and_counted<H: Harness>(h: &H) {
    let mut p = h.open();
    let cost = |key: &str, len: u64| key.len() as u64 + len + ENTRY_OVERHEAD_BYTES;
    let out = commit(
        &mut p,
        vec![
            put_entry("$sessions", "b-client", b"two", false),
            put_entry("$sessions", "a-client", b"one", false),
            put_entry("other", "a-client", b"elsewhere", false),
        ],
    );
    assert_eq!(out, vec![Outcome::EntryPut; 3]);
    assert_eq!(
        p.entries("$sessions").unwrap(),
        vec![
            ("a-client".to_string(), b"one".to_vec()),
            ("b-client".to_string(), b"two".to_vec())
        ]
    );
    assert_eq!(
        p.entry("other", "a-client").unwrap(),
        Some(b"elsewhere".to_vec())
    );
    assert_eq!(p.entry("other", "b-client").unwrap(), None);
    assert_eq!(p.entries("never").unwrap(), vec![]);
    // Replacing charges the difference; the count stays.
    commit(
        &mut p,
        vec![put_entry("$sessions", "a-client", b"longer one", false)],
    );
    let s = p.channel("$sessions");
    assert_eq!(s.entry_count, 2);
    assert_eq!(s.entry_bytes, cost("a-client", 10) + cost("b-client", 3));
    assert_eq!(
        p.usage().used_bytes,
        s.entry_bytes + cost("a-client", 9),
        "every channel's entries count against the provider"
    );
    // Entries live beside records and never touch offsets.
    assert_eq!((s.next, s.floor, s.record_count), (1, 1, 0));
    // Dropped once; a second drop finds nothing.
    assert_eq!(
        commit(
            &mut p,
            vec![
                drop_entry("$sessions", "b-client"),
                drop_entry("$sessions", "b-client")
            ]
        ),
        vec![
            Outcome::EntryDropped { existed: true },
            Outcome::EntryDropped { existed: false }
        ]
    );
    // They survive a restart, counted the same.
    let used = p.usage().used_bytes;
    let p = h.reopen(p);
    assert_eq!(p.usage().used_bytes, used);
    assert_eq!(
        p.entries("$sessions").unwrap(),
        vec![("a-client".to_string(), b"longer one".to_vec())]
    );
    assert_eq!(p.channel("$sessions").entry_count, 1);
}

fn an_entry_is_refused_at_the_bound_unless_it_may_use_the_reserve<H: Harness>(h: &H) {
    let overhead = ENTRY_OVERHEAD_BYTES + 1;
    // Room for one 100-byte entry outside a reserve of another.
    let mut p = h.open_bounded(2 * (overhead + 100), overhead + 100);
    let out = commit(
        &mut p,
        vec![
            put_entry("s", "a", &[1; 100], false),
            put_entry("s", "b", &[1; 100], false),
            put_entry("s", "b", &[1; 100], true),
            put_entry("s", "c", &[1; 1], true),
            // No larger than what it replaces: always fits.
            put_entry("s", "a", &[2; 100], false),
        ],
    );
    assert_eq!(
        out,
        vec![
            Outcome::EntryPut,
            Outcome::Refused(Refusal::ProviderFull),
            Outcome::EntryPut,
            Outcome::Refused(Refusal::ProviderFull),
            Outcome::EntryPut,
        ]
    );
    assert_eq!(p.entry("s", "c").unwrap(), None, "a refusal stores nothing");
    assert_eq!(p.usage().used_bytes, 2 * (overhead + 100));
}

fn a_batch_mixing_records_and_entries_is_all_or_nothing<H: Harness>(h: &H) {
    let mut p = h.open();
    fill(&mut p, "q", 2);
    let bad = vec![
        remove("q", 1),
        put_entry("q", "1", b"attempts", false),
        // Invalid: refused before anything is touched.
        put_entry("q", "", b"no key", false),
    ];
    assert!(p.commit(&bad).is_err());
    assert_eq!(offsets(&p, "q", 1), vec![1, 2]);
    assert_eq!(p.entries("q").unwrap(), vec![]);
    // The move a dead-letter takes: append elsewhere, remove, drop state.
    let out = commit(
        &mut p,
        vec![
            put_entry("q", "1", b"3", false),
            append("q__dlq", msg("t/x", b"job", 1)),
            remove("q", 1),
            drop_entry("q", "1"),
        ],
    );
    assert_eq!(
        out[1..],
        [
            Outcome::Appended { offset: 1 },
            Outcome::Removed {
                existed: true,
                freed_bytes: one_size(),
                floor: 2
            },
            Outcome::EntryDropped { existed: true }
        ]
    );
}

fn a_replacement_counts_only_its_growth_and_is_whole<H: Harness>(h: &H) {
    let size = one_size();
    let reserve = 100;
    let mut p = h.open_bounded(3 * size + reserve, reserve);
    assert_eq!(fill(&mut p, "v", 3), appended(&[1, 2, 3]));
    assert_eq!(
        fill(&mut p, "v", 1),
        vec![Outcome::Refused(Refusal::ProviderFull)]
    );
    let replace = |offset: u64, payload: &[u8]| Write::Replace {
        channel: "v".into(),
        offset,
        message: msg("t/x", payload, 9),
        channel_max_bytes: None,
    };
    // No larger than what it replaces: taken at the bound, the old one gone
    // in the same write.
    let out = commit(&mut p, vec![replace(2, &[1; 10]), replace(1, &[2; 4])]);
    assert_eq!(out, appended(&[4, 5]));
    assert_eq!(offsets(&p, "v", 3), vec![3, 4, 5]);
    assert_eq!(
        p.channel("v").floor,
        3,
        "the oldest went, so the floor rose"
    );
    let used = p.usage().used_bytes;
    assert_eq!(used, 2 * size + msg("t/x", &[2; 4], 9).size_bytes());
    // Larger, with no room for the growth: refused whole, the old one kept.
    let out = commit(&mut p, vec![replace(3, &[3; 200])]);
    assert_eq!(out, vec![Outcome::Refused(Refusal::ProviderFull)]);
    assert_eq!(offsets(&p, "v", 3), vec![3, 4, 5]);
    assert_eq!(p.usage().used_bytes, used);
    // Nothing held at the offset: a plain append, judged whole.
    let out = commit(&mut p, vec![replace(2, &[4; 10])]);
    assert_eq!(out, vec![Outcome::Refused(Refusal::ProviderFull)]);
    let p = h.reopen(p);
    assert_eq!(offsets(&p, "v", 3), vec![3, 4, 5]);
    assert_eq!(p.channel("v").next, 6);
    assert_eq!(p.usage().used_bytes, used);
}

/// Runs each named scenario against both providers, as a test of its own
/// in `redb_provider` and in `memory_provider`, each in a directory named
/// after it.
macro_rules! conformance {
    ($($scenario:ident),* $(,)?) => {
        mod redb_provider {
            use super::*;
            $(
                #[test]
                fn $scenario() {
                    super::$scenario(&RedbHarness::new(stringify!($scenario)));
                }
            )*
        }
        mod memory_provider {
            use super::*;
            $(
                #[test]
                fn $scenario() {
                    super::$scenario(&MemoryHarness::new(stringify!($scenario)));
                }
            )*
        }
    };
}

conformance!(
    offsets_start_at_one_and_strictly_rise,
    offsets_are_never_reused_after_removal_or_restart,
    counters_positions_and_records_persist,
    every_field_round_trips,
    trimming_below_an_offset_raises_the_floor_with_the_removal,
    trimming_by_age_stops_at_the_first_record_that_stays,
    trimming_to_a_size_removes_the_oldest,
    a_trim_is_bounded_and_says_when_there_is_more,
    positions_are_set_read_and_dropped,
    reads_respect_their_bounds,
    a_full_provider_refuses_appends_and_keeps_the_reserve_for_positions,
    a_channel_bound_refuses_one_record_and_not_the_batch,
    a_batch_is_all_or_nothing,
    a_second_broker_is_refused_by_the_lock,
    a_seek_by_time_takes_the_earliest_offset,
    offsets_past_32_bits_survive,
    a_stored_floor_of_zero_is_refused,
    usage_counts_records_and_positions_with_one_function,
    a_replacement_counts_only_its_growth_and_is_whole,
    a_record_is_removed_from_anywhere_and_the_floor_follows_the_oldest,
    a_removal_may_use_the_reserve_and_frees_room,
    a_record_moves_into_another_channel_whole_or_not_at_all,
    a_move_drops_its_entry_only_when_the_record_moves,
    entries_are_put_replaced_dropped_and_counted,
    an_entry_is_refused_at_the_bound_unless_it_may_use_the_reserve,
    a_batch_mixing_records_and_entries_is_all_or_nothing,
);

/// What only the redb provider promises: a crash loses nothing committed,
/// and a file it cannot read stops the open with the file's name.
mod redb_only {
    use super::*;

    #[test]
    fn a_crash_keeps_every_committed_record() {
        let h = RedbHarness::new("crash");
        let mut p = h.open();
        for batch in 0..10u64 {
            let writes = (0..10)
                .map(|i| append("c", msg("t", &[i as u8], batch * 10 + i + 1)))
                .collect();
            commit(&mut p, writes);
        }
        commit(&mut p, vec![set_position("c", "mqtt:a", 42)]);
        // The file as a process killed right now leaves it: no close, no
        // destructor. Copied while the provider still holds it.
        let crashed = h.dir.path().join("crashed.redb");
        fs::copy(h.file(), &crashed).expect("copy the live file");
        fs::copy(
            super::super::journal::journal_path_for(&h.file()),
            super::super::journal::journal_path_for(&crashed),
        )
        .expect("copy the live journal");
        let copy = RedbProvider::open("copy", &crashed, 64 << 20, 64 << 10).expect("recover");
        assert_eq!(offsets(&copy, "c", 1), (1..=100).collect::<Vec<_>>());
        assert_eq!(copy.channel("c").next, 101);
        assert_eq!(copy.position("c", "mqtt:a").unwrap(), Some(42));
        assert_eq!(copy.usage(), p.usage());
        // And the original, dropped without a clean close.
        drop(p);
        let mut p = h.open();
        assert_eq!(p.channel("c").next, 101);
        assert_eq!(fill(&mut p, "c", 1), appended(&[101]));
    }

    #[test]
    fn a_commit_that_fails_changes_nothing() {
        let h = RedbHarness::new("failed-commit");
        let mut p = h.open();
        fill(&mut p, "c", 2);
        let state = p.channel("c");
        let usage = p.usage();
        p.fail_next_commit = true;
        let batch = vec![
            append("c", msg("t", b"x", 1)),
            append("new", msg("t", b"x", 1)),
            set_position("c", "mqtt:a", 2),
            trim("c", TrimRule::BeforeOffset(2), 10),
        ];
        assert!(p.commit(&batch).is_err());
        assert_eq!(p.channel("c"), state);
        assert_eq!(p.channel("new"), ChannelState::default());
        assert_eq!(p.usage(), usage);
        let out = commit(&mut p, batch);
        assert_eq!(out[..2], appended(&[3, 1])[..]);
        let p = h.reopen(p);
        assert_eq!(offsets(&p, "c", 2), vec![2, 3]);
        assert_eq!(p.channels().len(), 2);
    }

    #[test]
    fn a_file_of_another_kind_is_refused_by_name() {
        let h = RedbHarness::new("foreign");
        fs::write(
            h.file(),
            b"this is not a database, it is a text file that is long enough",
        )
        .expect("write");
        let err = h.try_open().err().expect("refused").to_string();
        assert!(err.contains("saguin.redb"), "{err}");
        // A redb file with tables and no Sagüin version is not adopted.
        let h = RedbHarness::new("foreign-redb");
        {
            let db = ::redb::Database::create(h.file()).expect("create");
            let txn = db.begin_write().expect("begin");
            txn.open_table(::redb::TableDefinition::<u64, u64>::new("theirs"))
                .expect("table");
            txn.commit().expect("commit");
        }
        let err = h.try_open().err().expect("refused").to_string();
        assert!(
            err.contains("saguin.redb") && err.contains("theirs"),
            "{err}"
        );
        assert!(err.contains("not a Sagüin provider"), "{err}");
    }

    #[test]
    fn another_format_version_is_refused_by_name() {
        let h = RedbHarness::new("version");
        Box::new(h.open()).close().expect("close");
        {
            let db = ::redb::Database::create(h.file()).expect("open");
            let txn = db.begin_write().expect("begin");
            {
                let mut meta = txn
                    .open_table(::redb::TableDefinition::<&str, &[u8]>::new("meta"))
                    .expect("meta");
                meta.insert("format_version", 99u32.to_le_bytes().as_slice())
                    .expect("write");
            }
            txn.commit().expect("commit");
        }
        let err = h.try_open().err().expect("refused").to_string();
        assert!(
            err.contains("saguin.redb") && err.contains("format 99"),
            "{err}"
        );
        assert!(
            err.contains(&format!("reads format {REDB_FORMAT_VERSION}")),
            "{err}"
        );
    }

    #[test]
    fn the_file_and_its_lock_are_private() {
        use std::os::unix::fs::PermissionsExt;
        let h = RedbHarness::new("mode");
        let p = h.open();
        for path in [h.file(), h.dir.path().join("saguin.redb.lock")] {
            let mode = fs::metadata(&path).expect("stat").permissions().mode();
            assert_eq!(mode & 0o077, 0, "{path:?} is {mode:o}");
        }
        drop(p);
    }

    #[test]
    fn a_missing_directory_is_named() {
        let h = RedbHarness::new("missing");
        let path = h.dir.path().join("no/such/dir/saguin.redb");
        let err = RedbProvider::open("local", &path, 1 << 20, 0)
            .err()
            .expect("refused")
            .to_string();
        assert!(err.contains("no/such/dir"), "{err}");
    }
}

/// What only the memory provider has: a snapshot, written at a graceful
/// close and nowhere else, that refuses to load when damaged.
mod memory_only {
    use super::*;

    fn channel_file(h: &MemoryHarness, channel: &str) -> PathBuf {
        h.dir
            .path()
            .join(snapshot_file_name(channel).expect("name"))
    }

    fn with_one_channel(test: &str) -> MemoryHarness {
        let h = MemoryHarness::new(test);
        let mut p = h.open();
        fill(&mut p, "c.d", 3);
        Box::new(p).close().expect("close");
        h
    }

    fn refusal(h: &MemoryHarness) -> String {
        match h.try_open() {
            Err(e) => e.to_string(),
            Ok(p) => panic!("expected a refusal, opened with {:?}", p.channels()),
        }
    }

    #[test]
    fn a_crash_loses_everything_since_the_start() {
        let h = MemoryHarness::new("crash");
        let mut p = h.open();
        fill(&mut p, "c", 3);
        drop(p);
        let mut p = h.open();
        assert_eq!(p.channel("c"), ChannelState::default());
        fill(&mut p, "c", 3);
        let p = h.reopen(p);
        assert_eq!(offsets(&p, "c", 1), vec![1, 2, 3]);
    }

    #[test]
    fn a_close_leaves_no_temporary_files() {
        let h = with_one_channel("tidy");
        let mut names: Vec<String> = fs::read_dir(h.dir.path())
            .expect("list")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(
            names,
            vec!["c%2Ed.snapshot", "saguin.lock", "saguin.manifest"]
        );
    }

    #[test]
    fn a_flipped_byte_stops_the_start_naming_the_file() {
        let h = with_one_channel("flip");
        let path = channel_file(&h, "c.d");
        let mut bytes = fs::read(&path).expect("read");
        let middle = bytes.len() / 2;
        bytes[middle] ^= 0x01;
        fs::write(&path, bytes).expect("write");
        let err = refusal(&h);
        assert!(
            err.contains("c%2Ed.snapshot") && err.contains("damaged"),
            "{err}"
        );
    }

    #[test]
    fn a_truncated_file_stops_the_start_naming_the_file() {
        let h = with_one_channel("truncate");
        let path = channel_file(&h, "c.d");
        let bytes = fs::read(&path).expect("read");
        for keep in [bytes.len() - 1, bytes.len() / 2, 10, 0] {
            fs::write(&path, &bytes[..keep]).expect("write");
            let err = refusal(&h);
            assert!(err.contains("c%2Ed.snapshot"), "{err}");
        }
    }

    #[test]
    fn a_wrong_magic_or_version_or_kind_is_named() {
        let h = with_one_channel("format");
        let path = channel_file(&h, "c.d");
        let good = fs::read(&path).expect("read");
        let mut magic = good.clone();
        magic[..8].copy_from_slice(b"SQLite f");
        fs::write(&path, &magic).expect("write");
        assert!(refusal(&h).contains("not a Sagüin snapshot"));
        let mut version = good.clone();
        version[8..12].copy_from_slice(&99u32.to_le_bytes());
        fs::write(&path, &version).expect("write");
        let err = refusal(&h);
        assert!(
            err.contains("snapshot format 99") && err.contains("reads format 2"),
            "{err}"
        );
        fs::copy(h.dir.path().join("saguin.manifest"), &path).expect("copy");
        let err = refusal(&h);
        assert!(
            err.contains("holds a manifest where a channel snapshot"),
            "{err}"
        );
    }

    #[test]
    fn every_damaged_file_is_named() {
        let h = MemoryHarness::new("several");
        let mut p = h.open();
        fill(&mut p, "a", 1);
        fill(&mut p, "b", 1);
        Box::new(p).close().expect("close");
        for name in ["a", "b"] {
            fs::write(channel_file(&h, name), b"garbage").expect("write");
        }
        let err = refusal(&h);
        assert!(
            err.contains("a.snapshot") && err.contains("b.snapshot"),
            "{err}"
        );
    }

    #[test]
    fn a_file_whose_contents_contradict_its_counters_is_refused() {
        let h = MemoryHarness::new("counters");
        let mut c = MemoryChannel::default();
        c.records.insert(5, msg("t", b"x", 1));
        c.state = ChannelState {
            next: 5,
            floor: 1,
            record_count: 1,
            record_bytes: msg("t", b"x", 1).size_bytes(),
            ..ChannelState::default()
        };
        fs::write(channel_file(&h, "c"), encode_channel("c", &c, 1)).expect("write");
        let err = refusal(&h);
        assert!(err.contains("record 5 lies outside"), "{err}");
        // A position at 0, which no offset is.
        c.state.next = 6;
        c.positions.insert("mqtt:a".into(), 0);
        let (record_bytes, position_bytes, _) = super::memory_channel::counted(&c);
        c.state.record_bytes = record_bytes;
        c.state.position_bytes = position_bytes;
        c.state.position_count = 1;
        fs::write(channel_file(&h, "c"), encode_channel("c", &c, 1)).expect("write");
        let err = refusal(&h);
        assert!(err.contains("\"mqtt:a\" is at 0, outside"), "{err}");
        c.positions.clear();
        c.state.position_bytes = 0;
        c.state.position_count = 0;
        c.state.next = 5;
        c.state.next = 6;
        c.state.record_bytes += 1;
        fs::write(channel_file(&h, "c"), encode_channel("c", &c, 1)).expect("write");
        assert!(refusal(&h).contains("counters say"));
        // A channel file under another channel's name.
        c.state.record_bytes -= 1;
        fs::write(channel_file(&h, "other"), encode_channel("c", &c, 1)).expect("write");
        fs::remove_file(channel_file(&h, "c")).expect("remove");
        assert!(refusal(&h).contains("another file name"));
    }

    #[test]
    fn the_manifest_reports_what_the_directory_lost() {
        let h = MemoryHarness::new("manifest");
        let mut p = h.open();
        fill(&mut p, "a", 1);
        fill(&mut p, "b", 1);
        Box::new(p).close().expect("close");
        let a_then = fs::read(channel_file(&h, "a")).expect("read");
        let mut p = h.open();
        assert!(p.warnings().is_empty(), "{:?}", p.warnings());
        fill(&mut p, "a", 1);
        Box::new(p).close().expect("close");
        // a's file from the shutdown before, b's file gone.
        fs::write(channel_file(&h, "a"), a_then).expect("write");
        fs::remove_file(channel_file(&h, "b")).expect("remove");
        let p = h.open();
        let warnings = p.warnings().join("\n");
        assert!(warnings.contains("\"a\" was not rewritten"), "{warnings}");
        assert!(
            warnings.contains("\"b\" was written by the last shutdown"),
            "{warnings}"
        );
        assert_eq!(p.channel("a").next, 2);
        Box::new(p).close().expect("close");
        // A damaged manifest is a warning, not a refusal: it holds no records.
        fs::write(h.dir.path().join("saguin.manifest"), b"junk").expect("write");
        let p = h.open();
        assert!(p.warnings().join("\n").contains("saguin.manifest"));
    }

    #[test]
    fn no_snapshot_dir_keeps_nothing_and_locks_nothing() {
        let a = MemoryProvider::open("scratch", 1 << 20, 0, None).expect("open");
        let mut b = MemoryProvider::open("scratch", 1 << 20, 0, None).expect("open");
        fill(&mut b, "c", 2);
        Box::new(b).close().expect("close");
        assert_eq!(a.snapshot_dir(), None);
        let c = MemoryProvider::open("scratch", 1 << 20, 0, None).expect("open");
        assert_eq!(c.channels(), Vec::new());
    }

    #[test]
    fn a_missing_snapshot_dir_is_named() {
        let h = MemoryHarness::new("missing");
        let path = h.dir.path().join("nope");
        let err = MemoryProvider::open("volatile", 1 << 20, 0, Some(&path))
            .err()
            .expect("refused")
            .to_string();
        assert!(err.contains("nope"), "{err}");
    }

    #[test]
    fn a_snapshot_larger_than_the_bound_is_refused_before_it_is_read() {
        let h = MemoryHarness::new("too-large");
        let mut p = h.open_bounded(64 << 20, 0);
        commit(&mut p, vec![append("c", msg("t", &[7; 2 << 20], 1))]);
        Box::new(p).close().expect("close");
        let err = h
            .try_open_bounded(100_000, 0)
            .err()
            .expect("refused")
            .to_string();
        assert!(
            err.contains("c.snapshot") && err.contains("raise max_bytes"),
            "{err}"
        );
    }
}

/// From a provider's settings to an open provider.
mod from_settings {
    use super::*;
    use crate::store::{CommitPolicy, ProviderKind, ProviderSettings};

    #[test]
    fn a_configured_provider_opens_with_its_bound_and_reserve() {
        let dir = TempDir::new("from-config");
        let redb = ProviderSettings {
            name: "local".into(),
            max_bytes: 1 << 20,
            kind: ProviderKind::Redb {
                file_path: dir.path().join("s.redb"),
                commit: CommitPolicy::Interval {
                    interval_ms: 2,
                    max_records: 8,
                },
                checkpoint_interval_ms: DEFAULT_CHECKPOINT_INTERVAL_MS,
            },
            device_endurance_bytes: None,
        };
        let memory = ProviderSettings {
            name: "volatile".into(),
            max_bytes: 1 << 20,
            kind: ProviderKind::Memory {
                snapshot_dir: Some(dir.path().to_path_buf()),
            },
            device_endurance_bytes: None,
        };
        assert_eq!(
            redb.commit_policy(),
            CommitPolicy::Interval {
                interval_ms: 2,
                max_records: 8
            }
        );
        assert_eq!(memory.commit_policy(), CommitPolicy::Collect);
        for config in [redb, memory] {
            let p = open_provider(&config, 4_096).expect("open");
            assert_eq!(p.name(), config.name);
            assert_eq!(
                p.usage(),
                Usage {
                    max_bytes: 1 << 20,
                    reserve_bytes: 4_096,
                    used_bytes: 0
                }
            );
            assert!(matches!(
                open_provider(&config, 4_096),
                Err(StoreError::Locked { .. })
            ));
            p.close().expect("close");
        }
    }
}
