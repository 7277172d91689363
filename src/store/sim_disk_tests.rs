//! The simulated disk's rules, one test each: what a power cut keeps, and
//! what each planted fault does.

use super::disk::{Disk, DiskFile, Locked, OpenMode};
use super::sim_disk::{Fault, FaultKind, FaultOn, SimDisk, TornSector, SECTOR_BYTES};
use std::path::Path;

const SEEDS: u64 = 64;

fn create() -> OpenMode {
    OpenMode {
        create: true,
        permissions: 0o600,
        ..OpenMode::read_write()
    }
}

fn dsync() -> OpenMode {
    OpenMode {
        sync_writes: true,
        ..create()
    }
}

/// A disk with `/d` durable and `/d/f` durable and empty, the file open.
fn durable_file(disk: &SimDisk, mode: OpenMode) -> Box<dyn DiskFile> {
    disk.create_dir_all(Path::new("/d"), 0o700).unwrap();
    disk.sync_dir(Path::new("/")).unwrap();
    let file = disk.open(Path::new("/d/f"), mode).unwrap();
    file.sync_data().unwrap();
    disk.sync_dir(Path::new("/d")).unwrap();
    file
}

/// Plays the same history on a fresh disk for every seed and collects
/// what `/d/f` holds after the cut.
fn outcomes(history: impl Fn(&SimDisk), seeds: u64) -> Vec<Vec<u8>> {
    (0..seeds)
        .map(|seed| {
            let disk = SimDisk::new();
            history(&disk);
            disk.power_cut(seed);
            disk.contents(Path::new("/d/f")).unwrap_or_default()
        })
        .collect()
}

#[test]
fn a_synced_write_survives_every_cut_and_an_unsynced_one_only_some() {
    let synced = outcomes(
        |disk| {
            let file = durable_file(disk, create());
            file.write_all_at(b"kept", 0).unwrap();
            file.sync_data().unwrap();
        },
        SEEDS,
    );
    assert!(synced.iter().all(|data| data == b"kept"));
    let unsynced = outcomes(
        |disk| {
            let file = durable_file(disk, create());
            file.write_all_at(b"maybe", 0).unwrap();
            assert_eq!(disk.contents(Path::new("/d/f")).unwrap(), b"maybe");
        },
        SEEDS,
    );
    assert!(unsynced.iter().any(|data| data == b"maybe"));
    assert!(unsynced.iter().any(|data| data.is_empty()));
    // The last write may also be the one in flight, torn into garbage.
    assert!(unsynced
        .iter()
        .all(|data| data.len() == 5 || data.is_empty()));
}

#[test]
fn the_same_seed_keeps_the_same_bytes() {
    let history = |disk: &SimDisk| {
        let file = durable_file(disk, create());
        for i in 0..16u64 {
            file.write_all_at(&[i as u8; 700], i * 700).unwrap();
        }
    };
    assert_eq!(outcomes(history, 8), outcomes(history, 8));
}

#[test]
fn an_o_dsync_write_is_durable_when_it_returns() {
    let after = outcomes(
        |disk| {
            let file = durable_file(disk, dsync());
            file.write_all_at(b"first", 0).unwrap();
            file.write_all_at(b"second", 5).unwrap();
        },
        SEEDS,
    );
    assert!(after.iter().all(|data| data == b"firstsecond"));
}

#[test]
fn a_direct_write_needs_whole_sectors_and_a_sync() {
    let direct = OpenMode {
        direct: true,
        ..create()
    };
    let disk = SimDisk::new();
    let file = durable_file(&disk, direct);
    let error = file.write_at(&[1; 100], 0).unwrap_err();
    assert_eq!(error.raw_os_error(), Some(22), "EINVAL: {error}");
    let after = outcomes(
        |disk| {
            let file = durable_file(disk, direct);
            file.write_all_at(&[7; SECTOR_BYTES as usize], 0).unwrap();
        },
        SEEDS,
    );
    assert!(
        after.iter().any(|data| data.is_empty()),
        "O_DIRECT alone is not durable"
    );
}

#[test]
fn a_new_name_is_durable_only_once_its_directory_is_synced() {
    let dir = Path::new("/d");
    for seed in 0..SEEDS {
        let disk = SimDisk::new();
        disk.create_dir_all(dir, 0o700).unwrap();
        let file = disk.open(&dir.join("f"), create()).unwrap();
        file.write_all_at(b"data", 0).unwrap();
        file.sync_data().unwrap();
        disk.sync_dir(dir).unwrap();
        // `/d` itself was never synced into the root: all of it goes.
        disk.power_cut(seed);
        assert!(!disk.exists(dir).unwrap(), "seed {seed}");

        disk.create_dir_all(dir, 0o700).unwrap();
        disk.sync_dir(Path::new("/")).unwrap();
        let file = disk.open(&dir.join("f"), create()).unwrap();
        file.write_all_at(b"data", 0).unwrap();
        file.sync_data().unwrap();
        disk.power_cut(seed);
        assert!(disk.exists(dir).unwrap());
        assert!(
            !disk.exists(&dir.join("f")).unwrap(),
            "created, dir not synced"
        );

        let file = disk.open(&dir.join("f"), create()).unwrap();
        file.write_all_at(b"data", 0).unwrap();
        file.sync_data().unwrap();
        disk.sync_dir(dir).unwrap();
        disk.power_cut(seed);
        assert_eq!(disk.contents(&dir.join("f")).unwrap(), b"data");
    }
}

#[test]
fn a_rename_or_an_unlink_comes_undone_without_a_directory_sync() {
    let (a, b) = (Path::new("/d/f"), Path::new("/d/g"));
    let disk = SimDisk::new();
    let file = durable_file(&disk, create());
    file.write_all_at(b"x", 0).unwrap();
    file.sync_data().unwrap();
    disk.rename(a, b).unwrap();
    assert!(disk.exists(b).unwrap() && !disk.exists(a).unwrap());
    disk.power_cut(1);
    assert!(disk.exists(a).unwrap() && !disk.exists(b).unwrap());

    disk.rename(a, b).unwrap();
    disk.sync_dir(Path::new("/d")).unwrap();
    disk.remove_file(b).unwrap();
    assert!(!disk.exists(b).unwrap());
    disk.power_cut(2);
    assert_eq!(
        disk.contents(b).unwrap(),
        b"x",
        "the rename held, the unlink not"
    );
    assert!(!disk.exists(a).unwrap());

    disk.remove_file(b).unwrap();
    disk.sync_dir(Path::new("/d")).unwrap();
    disk.power_cut(3);
    assert_eq!(
        disk.read_dir(Path::new("/d")).unwrap(),
        Vec::<std::path::PathBuf>::new()
    );
}

#[test]
fn a_directory_removed_or_renamed_keeps_its_durable_entries() {
    let disk = SimDisk::new();
    let file = durable_file(&disk, create());
    file.write_all_at(b"y", 0).unwrap();
    file.sync_data().unwrap();
    disk.rename(Path::new("/d"), Path::new("/e")).unwrap();
    disk.sync_dir(Path::new("/")).unwrap();
    disk.power_cut(0);
    assert_eq!(disk.contents(Path::new("/e/f")).unwrap(), b"y");
    disk.remove_dir_all(Path::new("/e")).unwrap();
    assert!(!disk.exists(Path::new("/e")).unwrap());
    disk.power_cut(0);
    assert_eq!(disk.contents(Path::new("/e/f")).unwrap(), b"y");
}

#[test]
fn writes_between_two_syncs_come_back_in_any_subset() {
    let sector = SECTOR_BYTES as usize;
    let after = outcomes(
        |disk| {
            let file = durable_file(disk, create());
            file.write_all_at(&vec![0xAA; 2 * sector], 0).unwrap();
            file.sync_data().unwrap();
            file.write_all_at(&vec![1; sector], 0).unwrap();
            file.write_all_at(&vec![2; sector], SECTOR_BYTES).unwrap();
        },
        SEEDS,
    );
    let shape = |data: &Vec<u8>| (data[0], data[sector]);
    assert!(
        after.iter().any(|d| shape(d) == (0xAA, 2)),
        "the later kept, the earlier lost"
    );
    assert!(after.iter().any(|d| shape(d) == (1, 0xAA)));
    assert!(after.iter().any(|d| shape(d) == (1, 2)));
    assert!(after.iter().any(|d| shape(d) == (0xAA, 0xAA)));
}

/// A file of three durable sectors of `0xAA`, then a write over the second
/// half of sector 0 and all of sector 1 that is in flight when the
/// machine dies: what sector 0 reads back as, over many seeds.
fn torn_sector_zero(torn: TornSector) -> Vec<Vec<u8>> {
    let sector = SECTOR_BYTES as usize;
    (0..SEEDS * 4)
        .map(|seed| {
            let disk = SimDisk::new();
            disk.set_torn_sector(torn);
            let file = durable_file(&disk, dsync());
            file.write_all_at(&vec![0xAA; 3 * sector], 0).unwrap();
            disk.stop_after(1);
            let half = sector / 2;
            assert!(file
                .write_all_at(&vec![0x55; sector + half], half as u64)
                .is_err());
            assert!(disk.stopped());
            assert!(file.sync_data().is_err(), "nothing runs after the stop");
            disk.power_cut(seed);
            let data = disk.contents(Path::new("/d/f")).unwrap();
            assert_eq!(data.len(), 3 * sector);
            assert!(
                data[2 * sector..].iter().all(|b| *b == 0xAA),
                "untouched sector"
            );
            data[..sector].to_vec()
        })
        .collect()
}

#[test]
fn the_sector_in_flight_reads_back_old_new_or_garbage() {
    let sector = SECTOR_BYTES as usize;
    let half = sector / 2;
    let old = vec![0xAA; sector];
    let mut new = vec![0xAA; half];
    new.extend(vec![0x55; half]);
    let garbled = torn_sector_zero(TornSector::OldNewOrGarbage);
    assert!(garbled.contains(&old));
    assert!(garbled.contains(&new));
    // Garbage covers the whole sector, the acknowledged first half too.
    assert!(garbled
        .iter()
        .any(|s| s != &old && s != &new && s[..half] != old[..half]));

    let protected = torn_sector_zero(TornSector::OldOrNew);
    assert!(protected.contains(&old) && protected.contains(&new));
    assert!(protected.iter().all(|s| s == &old || s == &new));
}

#[test]
fn a_planned_stop_fails_everything_after_it_and_a_cut_restarts() {
    let disk = SimDisk::new();
    let file = durable_file(&disk, create());
    let before = disk.operations();
    disk.stop_after(2);
    file.write_all_at(b"one", 0).unwrap();
    assert_eq!(disk.operations().0, before.0 + 1);
    assert!(file.write_all_at(b"two", 3).is_err());
    assert!(disk.open(Path::new("/d/g"), create()).is_err());
    assert!(disk.sync_dir(Path::new("/d")).is_err());
    disk.power_cut(5);
    assert!(
        file.write_all_at(b"x", 0).is_err(),
        "a handle from before the cut is dead"
    );
    let shared = disk.shared();
    let again = shared.open(Path::new("/d/f"), create()).unwrap();
    again.write_all_at(b"ok", 0).unwrap();
    again.sync_data().unwrap();
}

#[test]
fn eio_on_the_nth_write_to_a_matching_path() {
    let disk = SimDisk::new();
    let file = durable_file(&disk, create());
    let other = disk.open(Path::new("/d/other"), create()).unwrap();
    disk.inject(Fault::new("/d/f", FaultOn::Write, 2, FaultKind::Eio));
    other.write_all_at(b"o", 0).unwrap();
    other.write_all_at(b"o", 1).unwrap();
    file.write_all_at(b"a", 0).unwrap();
    let error = file.write_all_at(b"b", 1).unwrap_err();
    assert!(error.to_string().contains("EIO"), "{error}");
    file.write_all_at(b"c", 1).unwrap();
    assert_eq!(disk.contents(Path::new("/d/f")).unwrap(), b"ac");
}

#[test]
fn a_full_disk_refuses_every_write_until_space_returns() {
    let disk = SimDisk::new();
    let file = durable_file(&disk, create());
    disk.inject(Fault::new("", FaultOn::Write, 1, FaultKind::NoSpace).sticky());
    for _ in 0..3 {
        let error = file.write_all_at(b"z", 0).unwrap_err();
        assert_eq!(error.raw_os_error(), Some(28), "ENOSPC: {error}");
    }
    assert!(file.set_len(10).is_err());
    disk.clear_faults();
    file.write_all_at(b"z", 0).unwrap();
    assert_eq!(disk.contents(Path::new("/d/f")).unwrap(), b"z");
}

#[test]
fn a_short_write_says_so_and_write_all_goes_on() {
    let disk = SimDisk::new();
    let file = durable_file(&disk, create());
    disk.inject(Fault::new("f", FaultOn::Write, 1, FaultKind::Short(3)));
    assert_eq!(file.write_at(b"abcdef", 0).unwrap(), 3);
    assert_eq!(disk.contents(Path::new("/d/f")).unwrap(), b"abc");
    disk.inject(Fault::new("f", FaultOn::Write, 1, FaultKind::Short(2)));
    file.write_all_at(b"123456", 0).unwrap();
    assert_eq!(disk.contents(Path::new("/d/f")).unwrap(), b"123456");
}

#[test]
fn a_failed_sync_leaves_its_writes_readable_and_never_durable() {
    for seed in 0..SEEDS {
        let disk = SimDisk::new();
        let file = durable_file(&disk, create());
        file.write_all_at(b"lost", 0).unwrap();
        disk.inject(Fault::new("f", FaultOn::Sync, 1, FaultKind::Eio));
        assert!(file.sync_data().is_err());
        assert_eq!(disk.contents(Path::new("/d/f")).unwrap(), b"lost");
        file.sync_data()
            .expect("the retry succeeds, and means nothing");
        disk.power_cut(seed);
        assert_eq!(
            disk.contents(Path::new("/d/f")).unwrap(),
            b"",
            "seed {seed}"
        );
    }
}

#[test]
fn a_lying_sync_returns_ok_and_keeps_nothing() {
    let after = outcomes(
        |disk| {
            let file = durable_file(disk, create());
            disk.inject(Fault::new("f", FaultOn::Sync, 1, FaultKind::Lie));
            file.write_all_at(b"told", 0).unwrap();
            file.sync_data().unwrap();
        },
        SEEDS,
    );
    assert!(after.iter().any(|data| data.is_empty()));
    let dsync_lie = outcomes(
        |disk| {
            let file = durable_file(disk, dsync());
            disk.inject(Fault::new("f", FaultOn::Write, 1, FaultKind::Lie));
            file.write_all_at(b"told", 0).unwrap();
        },
        SEEDS,
    );
    assert!(dsync_lie.iter().any(|data| data.is_empty()));
    let dir_lie = (0..SEEDS).any(|seed| {
        let disk = SimDisk::new();
        disk.inject(Fault::new("/", FaultOn::Sync, 1, FaultKind::Lie));
        disk.create_dir_all(Path::new("/d"), 0o700).unwrap();
        disk.sync_dir(Path::new("/")).unwrap();
        disk.power_cut(seed);
        !disk.exists(Path::new("/d")).unwrap()
    });
    assert!(dir_lie);
}

#[test]
fn flock_is_one_exclusive_or_many_shared_until_dropped_or_cut() {
    let disk = SimDisk::new();
    let first = durable_file(&disk, create());
    let path = Path::new("/d/f");
    let second = disk.open(path, OpenMode::read_only()).unwrap();
    assert_eq!(first.try_lock(false).unwrap(), Locked::Taken);
    assert_eq!(second.try_lock(false).unwrap(), Locked::HeldElsewhere);
    assert_eq!(second.try_lock(true).unwrap(), Locked::HeldElsewhere);
    drop(first);
    assert_eq!(second.try_lock(true).unwrap(), Locked::Taken);
    let third = disk.open(path, OpenMode::read_only()).unwrap();
    assert_eq!(third.try_lock(true).unwrap(), Locked::Taken);
    assert_eq!(third.try_lock(false).unwrap(), Locked::HeldElsewhere);
    disk.power_cut(0);
    let after = disk.open(path, OpenMode::read_only()).unwrap();
    assert_eq!(
        after.try_lock(false).unwrap(),
        Locked::Taken,
        "a cut frees every lock"
    );
}

#[test]
fn a_truncate_and_set_len_are_writes_like_any_other() {
    let after = outcomes(
        |disk| {
            let file = durable_file(disk, create());
            file.write_all_at(b"abcdef", 0).unwrap();
            file.sync_data().unwrap();
            file.set_len(2).unwrap();
            assert_eq!(file.size_bytes().unwrap(), 2);
        },
        SEEDS,
    );
    assert!(after.iter().any(|d| d == b"ab"));
    assert!(after.iter().any(|d| d == b"abcdef"));
    let disk = SimDisk::new();
    let file = durable_file(&disk, create());
    file.write_all_at(b"abc", 0).unwrap();
    file.sync_data().unwrap();
    let truncating = OpenMode {
        truncate: true,
        ..create()
    };
    drop(disk.open(Path::new("/d/f"), truncating).unwrap());
    assert_eq!(disk.file_len(Path::new("/d/f")).unwrap(), 0);
    assert!(disk
        .open(
            Path::new("/d/f"),
            OpenMode {
                create_new: true,
                ..create()
            }
        )
        .is_err());
}
