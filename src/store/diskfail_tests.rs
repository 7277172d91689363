//! What a failing disk gets: a failed sync stops the provider, which then
//! refuses everything without touching the disk, and a full device refuses
//! only the commit it met. Either way every acknowledged record survives
//! a power cut and a restart.

use std::path::{Path, PathBuf};

use super::conformance::{append, msg, TempDir};
use super::sim_disk::{Fault, FaultKind, FaultOn, SimDisk};
use super::*;

const MAX_BYTES: u64 = 64 << 20;
const EIO: i32 = 5;
const ENOSPC: i32 = 28;

/// A provider's directory on `disk`, durable in every parent. The same
/// path is a real directory too, for the files not yet on the seam.
fn durable_dir(disk: &SimDisk, dir: &Path) {
    let sim = disk.shared();
    sim.create_dir_all(dir, 0o700).expect("mkdir");
    for at in dir.ancestors() {
        sim.sync_dir(at).expect("sync the directory");
    }
}

fn open(disk: &SimDisk, file: &Path) -> RedbProvider {
    let mut p = RedbProvider::open_on(disk.shared(), "p", file, MAX_BYTES, 0).expect("open");
    // Only the test decides when a checkpoint comes.
    p.set_checkpoint_interval_ms(3_600_000);
    p
}

fn payload(i: u64) -> Vec<u8> {
    format!("record {i}").into_bytes()
}

fn publish(p: &mut RedbProvider, i: u64) -> Result<Vec<Outcome>, StoreError> {
    p.commit(&[append("c", msg("t", &payload(i), i + 1))])
}

/// Commits `n` records, returning each acknowledged (offset, payload).
fn acknowledged(p: &mut RedbProvider, n: u64) -> Vec<(u64, Vec<u8>)> {
    (0..n)
        .map(|i| match publish(p, i).expect("commit").as_slice() {
            [Outcome::Appended { offset }] => (*offset, payload(i)),
            other => panic!("expected an append, got {other:?}"),
        })
        .collect()
}

fn everything(p: &RedbProvider) -> Vec<(u64, Vec<u8>)> {
    let limit = ReadLimit {
        max_records: 1_000,
        max_bytes: u64::MAX,
    };
    match p.read("c", FIRST_OFFSET, limit).expect("read") {
        Read::Records(batch) => batch
            .records
            .into_iter()
            .map(|r| (r.offset, r.message.payload.to_vec()))
            .collect(),
        other => panic!("expected records, got {other:?}"),
    }
}

/// Cuts the power on a provider left running, reopens it as a restart
/// would, and checks every acknowledged record is back, with its bytes,
/// and that the only other record is `unacknowledged` at the next offset.
fn cut_and_check(
    disk: &SimDisk,
    p: RedbProvider,
    file: &Path,
    seed: u64,
    acked: &[(u64, Vec<u8>)],
    unacknowledged: Vec<u8>,
) {
    drop(p);
    disk.power_cut(seed);
    let again = open(disk, file);
    let held = everything(&again);
    assert_eq!(
        &held[..acked.len()],
        acked,
        "seed {seed}: acknowledged records"
    );
    let next = acked.last().map_or(FIRST_OFFSET, |(o, _)| o + 1);
    for extra in &held[acked.len()..] {
        assert_eq!(extra, &(next, unacknowledged.clone()), "seed {seed}");
    }
    assert!(held.len() <= acked.len() + 1, "seed {seed}: {held:?}");
}

fn failure_of(e: &StoreError) -> &Failure {
    match e {
        StoreError::Failed(failure) => failure,
        other => panic!("expected a failed provider, got {other}"),
    }
}

/// A second commit after the failure is refused with the same failure,
/// and touches nothing on the disk; so is a read.
fn refused_without_the_disk(disk: &SimDisk, p: &mut RedbProvider, file: &Path) {
    let before = disk.operations();
    let e = publish(p, 99).expect_err("refused");
    assert_eq!(failure_of(&e).provider, "p");
    let e = p
        .commit_owned(vec![append("c", msg("t", b"y", 1))])
        .map_err(|(e, _)| e)
        .expect_err("refused");
    failure_of(&e);
    let limit = ReadLimit {
        max_records: 10,
        max_bytes: u64::MAX,
    };
    assert!(p.read("c", FIRST_OFFSET, limit).is_err());
    assert!(p.checkpoint().is_err());
    assert_eq!(
        disk.operations(),
        before,
        "nothing touched {}",
        file.display()
    );
}

fn journal_of(file: &Path) -> PathBuf {
    let mut name = file.as_os_str().to_owned();
    name.push(".journal");
    PathBuf::from(name)
}

#[test]
fn a_failed_sync_of_the_redb_file_stops_the_provider_and_loses_nothing_acknowledged() {
    for seed in 0..4 {
        let dir = TempDir::new("eio-redb");
        let file = dir.path().join("p.redb");
        let disk = SimDisk::new();
        durable_dir(&disk, dir.path());
        let mut p = open(&disk, &file);
        let acked = acknowledged(&mut p, 6);
        // The journal's appends are writes (O_DSYNC), so the first sync of
        // a path holding the file's name is the checkpoint's, of the file.
        disk.inject(Fault::new("p.redb", FaultOn::Sync, 1, FaultKind::Eio));
        p.set_checkpoint_interval_ms(0);
        let e = publish(&mut p, 6).expect_err("the checkpoint's sync failed");
        let failure = failure_of(&e);
        assert_eq!(failure.path, file);
        assert!(failure.action.contains("sync"), "{failure}");
        assert!(e.to_string().contains("restart"), "{e}");
        refused_without_the_disk(&disk, &mut p, &file);
        cut_and_check(&disk, p, &file, seed, &acked, payload(6));
    }
}

#[test]
fn a_failed_journal_sync_stops_the_provider_and_loses_nothing_acknowledged() {
    for (seed, owned) in [(0, false), (1, true), (2, false), (3, true)] {
        let dir = TempDir::new("eio-journal");
        let file = dir.path().join("p.redb");
        let disk = SimDisk::new();
        durable_dir(&disk, dir.path());
        let mut p = open(&disk, &file);
        let acked = acknowledged(&mut p, 5);
        // The frame's write is its sync (O_DSYNC): EIO from it.
        p.fail_next_append = Some(EIO);
        let writes = vec![append("c", msg("t", &payload(5), 6))];
        let e = if owned {
            // The storage thread's way: a batch of appends answered ahead.
            p.commit_owned(writes).map_err(|(e, _)| e)
        } else {
            p.commit(&writes)
        }
        .expect_err("the frame's sync failed");
        assert_eq!(failure_of(&e).path, journal_of(&file));
        refused_without_the_disk(&disk, &mut p, &file);
        cut_and_check(&disk, p, &file, seed, &acked, payload(5));
    }
}

#[test]
fn a_full_device_under_the_journal_refuses_that_commit_only() {
    for (seed, owned) in [(0, false), (1, true)] {
        let dir = TempDir::new("enospc-journal");
        let file = dir.path().join("p.redb");
        let disk = SimDisk::new();
        durable_dir(&disk, dir.path());
        let mut p = open(&disk, &file);
        let mut acked = acknowledged(&mut p, 3);
        p.fail_next_append = Some(ENOSPC);
        let writes = vec![append("c", msg("t", b"refused", 4))];
        let e = if owned {
            p.commit_owned(writes).map_err(|(e, _)| e)
        } else {
            p.commit(&writes)
        }
        .expect_err("no room");
        assert!(matches!(e, StoreError::DeviceFull { .. }), "{e}");
        assert!(e.is_device_error());
        // Space is back: the next commit is taken, at the offset the
        // refused one did not consume.
        match publish(&mut p, 3).expect("taken again").as_slice() {
            [Outcome::Appended { offset }] => acked.push((*offset, payload(3))),
            other => panic!("{other:?}"),
        }
        assert_eq!(acked[3].0, acked[2].0 + 1);
        acked.extend(acknowledged(&mut p, 2));
        assert_eq!(everything(&p), acked);
        cut_and_check(&disk, p, &file, seed, &acked, b"refused".to_vec());
    }
}

/// `ENOSPC` on the redb file, once or until space is freed: the commit
/// that met it, and every call until the file opens again, is refused as
/// a full provider, nothing acknowledged is lost, and writes resume.
#[test]
fn a_full_device_under_the_redb_file_refuses_until_there_is_room() {
    for (seed, sticky) in [(0, false), (1, true), (2, false), (3, true)] {
        let dir = TempDir::new("enospc-redb");
        let file = dir.path().join("p.redb");
        let disk = SimDisk::new();
        durable_dir(&disk, dir.path());
        let mut p = open(&disk, &file);
        p.set_room_retry_ms(0);
        let mut acked = acknowledged(&mut p, 4);
        // A checkpoint's commit writes only the redb file.
        let fault = Fault::new("p.redb", FaultOn::Write, 1, FaultKind::NoSpace);
        disk.inject(if sticky { fault.sticky() } else { fault });
        p.set_checkpoint_interval_ms(0);
        let e = publish(&mut p, 4).expect_err("no room");
        assert!(
            matches!(&e, StoreError::DeviceFull { path, .. } if path == &file),
            "{e}"
        );
        if sticky {
            let e = publish(&mut p, 4).expect_err("still no room");
            assert!(matches!(e, StoreError::DeviceFull { .. }), "{e}");
            let limit = ReadLimit {
                max_records: 10,
                max_bytes: u64::MAX,
            };
            assert!(matches!(
                p.read("c", FIRST_OFFSET, limit),
                Err(StoreError::DeviceFull { .. })
            ));
            disk.clear_faults();
        }
        p.set_checkpoint_interval_ms(3_600_000);
        // Room again: the next commit is taken, at the offset the refused
        // ones did not use, and everything acknowledged is served.
        match publish(&mut p, 4).expect("room again").as_slice() {
            [Outcome::Appended { offset }] => acked.push((*offset, payload(4))),
            other => panic!("{other:?}"),
        }
        assert_eq!(acked[4].0, acked[3].0 + 1);
        assert_eq!(everything(&p), acked);
        cut_and_check(&disk, p, &file, seed, &acked, payload(99));
    }
}

/// A full device is tried again while idle (the storage thread calls
/// `checkpoint` when `checkpoint_due_in` runs out), so a reader is served
/// again without waiting for a publish.
#[test]
fn a_full_device_is_tried_again_while_idle() {
    let dir = TempDir::new("enospc-idle");
    let file = dir.path().join("p.redb");
    let disk = SimDisk::new();
    durable_dir(&disk, dir.path());
    let mut p = open(&disk, &file);
    p.set_room_retry_ms(0);
    let acked = acknowledged(&mut p, 2);
    disk.inject(Fault::new("p.redb", FaultOn::Write, 1, FaultKind::NoSpace).sticky());
    p.set_checkpoint_interval_ms(0);
    assert!(matches!(
        publish(&mut p, 2),
        Err(StoreError::DeviceFull { .. })
    ));
    p.set_checkpoint_interval_ms(3_600_000);
    // Still full: refused, and due again at once (the retry is 0 here).
    let due = p.checkpoint_due_in().expect("a retry is due");
    assert_eq!(due, std::time::Duration::ZERO);
    assert!(matches!(p.checkpoint(), Err(StoreError::DeviceFull { .. })));
    disk.clear_faults();
    p.checkpoint().expect("room again");
    assert_eq!(everything(&p), acked);
}

fn settings(file: &Path) -> ProviderSettings {
    ProviderSettings {
        name: "p".into(),
        max_bytes: MAX_BYTES,
        kind: ProviderKind::Redb {
            file_path: file.to_path_buf(),
            commit: CommitPolicy::Collect,
            checkpoint_interval_ms: DEFAULT_CHECKPOINT_INTERVAL_MS,
        },
        device_endurance_bytes: None,
    }
}

/// The names in `dir` on `disk` that begin with `prefix`.
fn named(disk: &SimDisk, dir: &Path, prefix: &str) -> Vec<PathBuf> {
    let entries = disk.shared().read_dir(dir).expect("list");
    entries
        .into_iter()
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with(prefix))
        })
        .collect()
}

/// A redb file damaged past redb's recovery is moved aside under a name
/// saying when and why, nothing takes its place, and the provider opens
/// failed: it refuses writes, its storage thread's watch names it from the
/// start, and a metric counts it.
#[test]
fn a_file_damaged_beyond_repair_is_moved_aside_and_its_provider_stands_failed() {
    for damage in ["garbage", "zeros"] {
        let dir = TempDir::new("damaged");
        let file = dir.path().join("p.redb");
        let disk = SimDisk::new();
        durable_dir(&disk, dir.path());
        let mut p = open(&disk, &file);
        acknowledged(&mut p, 20);
        Box::new(p).close().expect("close");
        let sim = disk.shared();
        let length = sim.file_len(&file).expect("length");
        let f = sim
            .open(&file, disk::OpenMode::read_write())
            .expect("open the file to damage it");
        // Zeros over it all, as a power cut on flash can leave a file; or
        // garbage over everything after redb's header page.
        let (bytes, at): (Vec<u8>, u64) = match damage {
            "zeros" => (vec![0; length as usize], 0),
            _ => ((4_096..length).map(|i| (i * 7 + 13) as u8).collect(), 4_096),
        };
        f.write_all_at(&bytes, at).expect("damage");
        f.sync_data().expect("sync");
        drop(f);
        let before = damaged_files_total();
        let opened = open_provider_on(disk.shared(), &settings(&file), 0);
        let mut p = match opened {
            Ok(p) => p,
            Err(e) => panic!("{damage}: the broker must start: {e}"),
        };
        let failure = p.failure().expect("the provider stands failed");
        assert_eq!(failure.path, file);
        assert!(failure.cause.contains(".damaged-"), "{failure}");
        assert!(damaged_files_total() > before);
        assert!(!sim.exists(&file).unwrap(), "{damage}: nothing replaces it");
        let aside = named(&disk, dir.path(), "p.redb.damaged-");
        assert_eq!(aside.len(), 1, "{damage}");
        assert_eq!(sim.file_len(&aside[0]).unwrap(), length);
        let e = p
            .commit(&[append("c", msg("t", b"x", 1))])
            .expect_err("refused");
        assert!(matches!(e, StoreError::Failed(_)), "{e}");
        // The move is durable.
        let thread = StorageThread::spawn(p, CommitPolicy::Collect, 4, |_| {}).expect("spawn");
        assert_eq!(thread.watch().failure().expect("watched").path, file);
        thread.shutdown().expect("shutdown");
        disk.power_cut(0);
        assert_eq!(named(&disk, dir.path(), "p.redb.damaged-"), aside);
    }
}

/// A file that is not redb's at all (another program's, a path written
/// wrong) is no damage of ours: the open fails naming it, and it stays.
#[test]
fn a_foreign_file_is_refused_and_left_where_it_is() {
    let dir = TempDir::new("foreign");
    let file = dir.path().join("p.redb");
    let disk = SimDisk::new();
    durable_dir(&disk, dir.path());
    let sim = disk.shared();
    let mode = disk::OpenMode {
        create: true,
        ..disk::OpenMode::read_write()
    };
    let f = sim.open(&file, mode).expect("create");
    f.write_all_at(b"SQLite format 3\0 and more", 0)
        .expect("write");
    drop(f);
    let e = match open_provider_on(disk.shared(), &settings(&file), 0) {
        Ok(_) => panic!("a foreign file opened"),
        Err(e) => e,
    };
    assert!(e.to_string().contains("p.redb"), "{e}");
    assert!(sim.exists(&file).unwrap());
    assert!(named(&disk, dir.path(), "p.redb.damaged-").is_empty());
}

/// The journal on the simulated disk: its frame's `O_DSYNC` write, which
/// is the frame's sync, fails with `EIO` or `ENOSPC` at the device.
#[test]
fn a_journal_write_the_device_fails_on_the_simulated_disk() {
    for (seed, kind) in [(0, FaultKind::Eio), (1, FaultKind::NoSpace)] {
        let dir = TempDir::new("journal-fault");
        let file = dir.path().join("p.redb");
        let disk = SimDisk::new();
        durable_dir(&disk, dir.path());
        let mut p = open(&disk, &file);
        let mut acked = acknowledged(&mut p, 4);
        disk.inject(Fault::new("p.redb.journal", FaultOn::Write, 1, kind));
        let e = publish(&mut p, 4).expect_err("the frame's write failed");
        if kind == FaultKind::Eio {
            assert_eq!(failure_of(&e).path, journal_of(&file));
            refused_without_the_disk(&disk, &mut p, &file);
            cut_and_check(&disk, p, &file, seed, &acked, payload(4));
            continue;
        }
        assert!(matches!(e, StoreError::DeviceFull { .. }), "{e}");
        match publish(&mut p, 4).expect("room again").as_slice() {
            [Outcome::Appended { offset }] => acked.push((*offset, payload(4))),
            other => panic!("{other:?}"),
        }
        cut_and_check(&disk, p, &file, seed, &acked, payload(99));
    }
}
