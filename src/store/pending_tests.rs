//! A redb provider's open transaction: acknowledged batches share one
//! redb commit, reads see them, a failure inside it keeps the batches
//! before it, and a crash with it open loses nothing acknowledged.

use std::path::Path;

use super::conformance::{append, msg, TempDir};
use super::journal_tests::{crash_image, journal_only, ALL, MAX_BYTES};
use super::pending::PENDING_MAX_BATCHES;
use super::*;

/// A provider that never checkpoints on its own and whose open
/// transaction has no age bound.
pub(crate) fn open(file: &Path) -> RedbProvider {
    let mut p = journal_only(file);
    p.set_pending_max_age_ms(u64::MAX);
    p
}

pub(crate) fn offsets(p: &RedbProvider, channel: &str) -> Vec<u64> {
    match p
        .read(channel, p.channel(channel).floor, ALL)
        .expect("read")
    {
        Read::Records(b) => b.records.iter().map(|r| r.offset).collect(),
        other => panic!("expected records, got {other:?}"),
    }
}

/// `n` batches of one record each, every one acknowledged.
fn acknowledge(p: &mut RedbProvider, n: u64) {
    for i in 0..n {
        p.commit(&[append("c", msg("t", b"x", i + 1))])
            .expect("commit");
    }
}

#[test]
fn acknowledged_batches_share_one_redb_commit_and_a_read_sees_them() {
    let dir = TempDir::new("pending-share");
    let mut p = open(&dir.path().join("saguin.redb"));
    acknowledge(&mut p, 10);
    assert_eq!(p.redb_commits.get(), 0, "ten batches, no redb commit yet");
    assert_eq!(offsets(&p, "c"), (1..=10).collect::<Vec<_>>());
    assert_eq!(p.redb_commits.get(), 1, "the read committed them, once");
    acknowledge(&mut p, 1);
    assert_eq!(offsets(&p, "c"), (1..=11).collect::<Vec<_>>());
}

#[test]
fn an_open_transaction_is_committed_at_its_bound_without_a_read() {
    let dir = TempDir::new("pending-bound");
    let mut p = open(&dir.path().join("saguin.redb"));
    acknowledge(&mut p, PENDING_MAX_BATCHES as u64 - 1);
    assert_eq!(p.redb_commits.get(), 0);
    acknowledge(&mut p, 1);
    assert_eq!(p.redb_commits.get(), 1, "full at its bound: committed");
}

#[test]
fn a_batch_failing_in_the_open_transaction_keeps_the_batches_before_it() {
    let dir = TempDir::new("pending-fail");
    let file = dir.path().join("saguin.redb");
    let mut p = open(&file);
    acknowledge(&mut p, 5);
    let before = p.channel("c");
    p.fail_next_commit = true;
    assert!(p
        .commit(&[
            append("c", msg("t", b"bad", 9)),
            append("new", msg("t", b"x", 9))
        ])
        .is_err());
    assert_eq!(p.channel("c"), before);
    assert_eq!(p.channel("new"), ChannelState::default());
    assert_eq!(offsets(&p, "c"), (1..=5).collect::<Vec<_>>());
    // The failed batch consumed no offset, and the next ones follow on.
    acknowledge(&mut p, 2);
    assert_eq!(offsets(&p, "c"), (1..=7).collect::<Vec<_>>());
    let recovered = RedbProvider::open(
        "copy",
        &crash_image(&file, &dir.path().join("c.redb"), true),
        MAX_BYTES,
        0,
    )
    .expect("recover");
    assert_eq!(offsets(&recovered, "c"), (1..=7).collect::<Vec<_>>());
    assert_eq!(recovered.channel("new"), ChannelState::default());
}

#[test]
fn a_crash_with_batches_in_the_open_transaction_loses_none() {
    let dir = TempDir::new("pending-crash");
    let file = dir.path().join("saguin.redb");
    let mut p = open(&file);
    // One committed share, and more acknowledged since, not committed.
    acknowledge(&mut p, PENDING_MAX_BATCHES as u64 + 7);
    assert_eq!(p.redb_commits.get(), 1);
    let image = crash_image(&file, &dir.path().join("crashed.redb"), true);
    let recovered = RedbProvider::open("copy", &image, MAX_BYTES, 0).expect("recover");
    assert_eq!(recovered.channel("c"), p.channel("c"));
    assert_eq!(
        offsets(&recovered, "c"),
        (1..=PENDING_MAX_BATCHES as u64 + 7).collect::<Vec<_>>()
    );
    // A drop without a close (the transaction aborted) loses none either.
    drop(p);
    let reopened = open(&file);
    assert_eq!(
        offsets(&reopened, "c").len(),
        PENDING_MAX_BATCHES + 7,
        "replayed from the journal"
    );
}
