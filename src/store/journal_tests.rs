//! The redb provider with its journal: what a crash between a journal sync
//! and the next checkpoint leaves, what a full journal does, and that the
//! tools and backups see what only the journal holds.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::conformance::{append, msg, TempDir};
use super::journal::journal_path_for;
use super::*;

pub(crate) const MAX_BYTES: u64 = 64 << 20;
pub(crate) const ALL: ReadLimit = ReadLimit {
    max_records: u32::MAX,
    max_bytes: u64::MAX,
};

/// A provider that never checkpoints on its own: everything after its
/// open is durable only in the journal.
pub(crate) fn journal_only(file: &Path) -> RedbProvider {
    let mut p = RedbProvider::open("local", file, MAX_BYTES, 0).expect("open");
    p.set_checkpoint_interval_ms(u64::MAX);
    p
}

/// The two files as a process killed right now leaves them: copied while
/// the provider holds them, no close, no destructor. Without the journal
/// when `with_journal` is false.
pub(crate) fn crash_image(file: &Path, to: &Path, with_journal: bool) -> PathBuf {
    fs::copy(file, to).expect("copy the live file");
    if with_journal {
        fs::copy(journal_path_for(file), journal_path_for(to)).expect("copy the live journal");
    }
    to.to_path_buf()
}

/// The provider a restart on the crash image of `file` opens, the image
/// taken without the journal: what the redb file alone holds.
fn file_alone(file: &Path, to: &Path) -> RedbProvider {
    RedbProvider::open("bare", &crash_image(file, to, false), MAX_BYTES, 0).expect("open")
}

fn payloads_at(p: &impl Provider, channel: &str) -> Vec<(u64, Vec<u8>)> {
    match p
        .read(channel, p.channel(channel).floor, ALL)
        .expect("read")
    {
        Read::Records(b) => b
            .records
            .into_iter()
            .map(|r| (r.offset, r.message.payload))
            .collect(),
        other => panic!("expected records, got {other:?}"),
    }
}

/// Appends `n` records one commit each, as a publisher waiting for every
/// PUBACK does, and returns each acknowledged (offset, payload).
fn acknowledge(p: &mut RedbProvider, channel: &str, n: u64) -> Vec<(u64, Vec<u8>)> {
    (0..n)
        .map(|i| {
            let payload = format!("{channel}-{i}").into_bytes();
            let outcomes = p
                .commit(&[append(channel, msg("t", &payload, 1_000 + i))])
                .expect("commit");
            match outcomes[..] {
                [Outcome::Appended { offset }] => (offset, payload),
                ref other => panic!("{other:?}"),
            }
        })
        .collect()
}

#[test]
fn a_crash_after_acknowledgements_and_before_a_checkpoint_loses_nothing() {
    let dir = TempDir::new("journal-crash");
    let file = dir.path().join("saguin.redb");
    let mut p = journal_only(&file);
    let acknowledged = acknowledge(&mut p, "c", 200);
    p.commit(&[
        Write::SetPosition {
            channel: "c".into(),
            reader: "mqtt:a".into(),
            offset: 150,
        },
        Write::PutEntry {
            channel: "$sessions".into(),
            key: "a".into(),
            value: b"session".to_vec(),
            use_reserve: false,
        },
        Write::Trim {
            channel: "c".into(),
            rule: TrimRule::BeforeOffset(11),
            max_records: 100,
        },
    ])
    .expect("commit");

    // Without its journal the file holds none of it: the journal is what
    // keeps these records.
    let bare = file_alone(&file, &dir.path().join("bare.redb"));
    assert_eq!(bare.channel("c").next, FIRST_OFFSET);
    drop(bare);

    let image = crash_image(&file, &dir.path().join("crashed.redb"), true);
    // A byte bound lowered before the restart refuses nothing acknowledged.
    let recovered = RedbProvider::open("copy", &image, 1 << 10, 0).expect("recover");
    assert_eq!(payloads_at(&recovered, "c"), acknowledged[10..].to_vec());
    assert_eq!(recovered.channel("c"), p.channel("c"));
    assert_eq!(recovered.position("c", "mqtt:a").unwrap(), Some(150));
    assert_eq!(
        recovered.entry("$sessions", "a").unwrap(),
        Some(b"session".to_vec())
    );
    assert_eq!(recovered.usage().used_bytes, p.usage().used_bytes);
    // The replay was made durable: a second crash right after the restart,
    // without the journal this time, still holds everything.
    let again = file_alone(&image, &dir.path().join("again.redb"));
    assert_eq!(payloads_at(&again, "c"), acknowledged[10..].to_vec());
}

#[test]
fn writes_after_a_replay_take_the_offsets_that_follow() {
    let dir = TempDir::new("journal-follow");
    let file = dir.path().join("saguin.redb");
    let mut p = journal_only(&file);
    acknowledge(&mut p, "c", 5);
    let image = crash_image(&file, &dir.path().join("crashed.redb"), true);
    drop(p);
    let mut p = journal_only(&image);
    let more = acknowledge(&mut p, "c", 3);
    assert_eq!(more.iter().map(|r| r.0).collect::<Vec<_>>(), vec![6, 7, 8]);
    // And a crash again: the journal, restarted at its beginning, chains on.
    let twice = crash_image(&image, &dir.path().join("twice.redb"), true);
    let recovered = RedbProvider::open("twice", &twice, MAX_BYTES, 0).expect("recover");
    assert_eq!(
        payloads_at(&recovered, "c")
            .iter()
            .map(|r| r.0)
            .collect::<Vec<_>>(),
        (1..=8).collect::<Vec<_>>()
    );
}

#[test]
fn a_batch_that_does_not_fit_the_journal_is_a_checkpoint() {
    let dir = TempDir::new("journal-full");
    let file = dir.path().join("saguin.redb");
    let mut p = journal_only(&file);
    // Four batches of a MiB each fill the 4MiB journal; the fourth is
    // committed to redb durably instead, with the three before it.
    let big = vec![7u8; 1 << 20];
    for i in 0..4u64 {
        p.commit(&[append("c", msg("t", &big, i + 1))])
            .expect("commit");
    }
    let bare = file_alone(&file, &dir.path().join("bare.redb"));
    assert_eq!(bare.channel("c").next, 5, "all four are in the file alone");
}

#[test]
fn the_storage_thread_checkpoints_when_idle() {
    let dir = TempDir::new("journal-idle");
    let file = dir.path().join("saguin.redb");
    let mut provider = RedbProvider::open("local", &file, MAX_BYTES, 0).expect("open");
    provider.set_checkpoint_interval_ms(20);
    let (tx, rx) = mpsc::channel();
    let thread = StorageThread::spawn(Box::new(provider), CommitPolicy::Collect, 16, move |c| {
        let _ = tx.send(c);
    })
    .expect("spawn");
    thread
        .handle()
        .try_commit(Ticket(1), vec![append("c", msg("t", b"one", 1))])
        .expect("queued");
    rx.recv_timeout(Duration::from_secs(30)).expect("committed");
    // Nothing more is submitted; the file alone comes to hold the record.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut n = 0;
    loop {
        n += 1;
        let bare = file_alone(&file, &dir.path().join(format!("bare-{n}.redb")));
        if bare.channel("c").next == 2 {
            break;
        }
        assert!(Instant::now() < deadline, "no checkpoint while idle");
        std::thread::sleep(Duration::from_millis(20));
    }
    thread.shutdown().expect("shutdown");
}

#[test]
fn tools_and_backups_see_what_only_the_journal_holds() {
    let dir = TempDir::new("journal-tools");
    let file = dir.path().join("saguin.redb");
    let mut p = journal_only(&file);
    let acknowledged = acknowledge(&mut p, "c", 20);

    // An online backup: redb's read view holds the journalled commits.
    let view = p.backup_view().expect("a view").expect("begun");
    let backup = dir.path().join("backup.redb");
    take_backup(view, &backup).expect("backup");
    let copy = RedbProvider::open("copy", &backup, MAX_BYTES, 0).expect("open the backup");
    assert_eq!(payloads_at(&copy, "c"), acknowledged);
    drop(copy);

    // The tools read a crashed broker's files, journal included.
    let image = crash_image(&file, &dir.path().join("crashed.redb"), true);
    let stored = StoredProvider::open(&image).expect("inspect");
    assert_eq!(stored.summary("c").expect("summary").state.next, 21);
    assert!(
        stored.notes.iter().any(|n| n.contains("journal")),
        "{:?}",
        stored.notes
    );
    drop(stored);
    let snapshots = dir.path().join("snapshots");
    let converted = redb_to_snapshots(&image, &snapshots).expect("convert");
    assert_eq!(converted.records, 20);
    // The tool only read: the crash image is still the broker's to replay.
    let recovered = RedbProvider::open("copy", &image, MAX_BYTES, 0).expect("recover");
    assert_eq!(payloads_at(&recovered, "c"), acknowledged);
}

#[test]
fn a_restored_backup_does_not_take_up_the_live_journal() {
    let dir = TempDir::new("journal-restore");
    let file = dir.path().join("saguin.redb");
    let mut p = journal_only(&file);
    acknowledge(&mut p, "c", 3);
    let backup = dir.path().join("backup.redb");
    take_backup(p.backup_view().unwrap().unwrap(), &backup).expect("backup");
    acknowledge(&mut p, "c", 4);
    Box::new(p).close().expect("close");
    // The operator restores the backup over the file; the journal stays.
    fs::copy(&backup, &file).expect("restore");
    let p = RedbProvider::open("local", &file, MAX_BYTES, 0).expect("open");
    assert_eq!(
        p.channel("c").next,
        4,
        "the backup's state, nothing replayed onto it"
    );
    let aside: Vec<_> = fs::read_dir(dir.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().contains(".set-aside-"))
        .collect();
    assert_eq!(aside.len(), 1, "the old journal is kept, set aside");
}

/// The journal beside `file` with the block of its `index`th frame (from
/// 0) overwritten by garbage, as a failing device may leave it.
fn garble_frame_block(file: &Path, index: u64) {
    use std::os::unix::fs::FileExt;
    let f = fs::OpenOptions::new()
        .write(true)
        .open(journal_path_for(file))
        .expect("open the journal");
    f.write_all_at(&[0x5au8; 4096], super::journal::FRAMES_START + index * 4096)
        .expect("garble");
}

#[test]
fn a_damaged_frame_followed_by_later_ones_is_reported_and_the_journal_kept() {
    let dir = TempDir::new("journal-damaged");
    let file = dir.path().join("saguin.redb");
    let mut p = journal_only(&file);
    let acknowledged = acknowledge(&mut p, "c", 10);
    let image = crash_image(&file, &dir.path().join("crashed.redb"), true);
    drop(p);
    // The fifth batch's block is damaged; the five after it check out.
    garble_frame_block(&image, 4);
    let counted = super::replay::damaged_journals_total();
    crate::captured_log::start();
    let mut recovered = RedbProvider::open("copy", &image, MAX_BYTES, 0).expect("still opens");
    let errors = crate::captured_log::warnings();
    let report = errors
        .iter()
        .find(|l| l.contains("is damaged"))
        .unwrap_or_else(|| panic!("no report among {errors:#?}"));
    let journal = journal_path_for(&image);
    assert!(report.contains(&journal.display().to_string()), "{report}");
    assert!(report.contains("batches 5 to 5"), "{report}");
    assert!(super::replay::damaged_journals_total() > counted, "counted");
    // The batches before the damage are back; none after it is applied
    // out of place.
    assert_eq!(payloads_at(&recovered, "c"), acknowledged[..4].to_vec());
    // The damaged journal is kept aside and a new one takes the writes.
    let aside = fs::read_dir(dir.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.starts_with("crashed.redb.journal.set-aside-")
        })
        .count();
    assert_eq!(aside, 1, "the damaged journal is kept");
    let more = acknowledge(&mut recovered, "d", 2);
    let again = crash_image(&image, &dir.path().join("again.redb"), true);
    drop(recovered);
    let reopened = RedbProvider::open("again", &again, MAX_BYTES, 0).expect("reopen");
    assert_eq!(payloads_at(&reopened, "d"), more);
}

#[test]
fn a_torn_last_frame_is_dropped_without_a_damage_report() {
    let dir = TempDir::new("journal-torn-tail");
    let file = dir.path().join("saguin.redb");
    let mut p = journal_only(&file);
    let acknowledged = acknowledge(&mut p, "c", 6);
    let image = crash_image(&file, &dir.path().join("crashed.redb"), true);
    drop(p);
    // A seventh batch torn in its block: garbage where it was going.
    garble_frame_block(&image, 6);
    crate::captured_log::start();
    let recovered = RedbProvider::open("copy", &image, MAX_BYTES, 0).expect("open");
    let errors = crate::captured_log::warnings();
    assert!(
        !errors.iter().any(|l| l.contains("is damaged")),
        "{errors:#?}"
    );
    assert_eq!(payloads_at(&recovered, "c"), acknowledged);
}

#[test]
fn a_journal_of_format_1_is_replayed_then_replaced() {
    let dir = TempDir::new("journal-format-1");
    let file = dir.path().join("saguin.redb");
    let mut p = journal_only(&file);
    let acknowledged = acknowledge(&mut p, "c", 7);
    let image = crash_image(&file, &dir.path().join("crashed.redb"), true);
    drop(p);
    let journal = journal_path_for(&image);
    super::journal::rewrite_as_packed(&journal);
    assert_eq!(super::journal::version_of(&journal), 1);
    let mut recovered = journal_only(&image);
    assert_eq!(payloads_at(&recovered, "c"), acknowledged);
    assert_eq!(super::journal::version_of(&journal), 2, "replaced");
    // The new journal takes appends, and a crash after them replays them.
    let more = acknowledge(&mut recovered, "c", 3);
    let again = crash_image(&image, &dir.path().join("again.redb"), true);
    drop(recovered);
    let reopened = RedbProvider::open("again", &again, MAX_BYTES, 0).expect("reopen");
    let all: Vec<_> = acknowledged.into_iter().chain(more).collect();
    assert_eq!(payloads_at(&reopened, "c"), all);
}
