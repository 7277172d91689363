//! Batches of appends answered before redb holds them: a read, another
//! kind of write or an idle storage thread applies them first, a failure
//! applying one keeps every answered batch, and a crash loses none.

use std::path::PathBuf;
use std::time::Duration;

use super::ahead::BEHIND_MAX_BATCHES;
use super::conformance::{append, msg, TempDir};
use super::journal_tests::{crash_image, ALL, MAX_BYTES};
use super::pending_tests::{offsets, open};
use super::*;

/// `n` batches of one append each, from offset `first`.
fn acknowledge(p: &mut RedbProvider, first: u64, n: u64) {
    for offset in first..first + n {
        let outcomes = p
            .commit_owned(vec![append("c", msg("t", b"x", offset))])
            .map_err(|(e, _)| e)
            .expect("commit");
        assert_eq!(outcomes, vec![Outcome::Appended { offset }]);
    }
}

/// A fresh provider in a directory of its own, and its file's path.
fn provider(name: &str) -> (TempDir, PathBuf, RedbProvider) {
    let dir = TempDir::new(name);
    let file = dir.path().join("saguin.redb");
    let p = open(&file);
    (dir, file, p)
}

fn behind(p: &RedbProvider) -> bool {
    p.behind.borrow().is_some()
}

#[test]
fn appends_are_answered_before_the_apply_and_a_read_applies_them_first() {
    let (_dir, _, mut p) = provider("ahead-read");
    acknowledge(&mut p, 1, 3);
    assert!(
        behind(&p),
        "answered with the frame synced, not yet in redb"
    );
    assert_eq!(p.channel("c").next, 4, "the counters say what was answered");
    assert_eq!(offsets(&p, "c"), vec![1, 2, 3]);
    assert!(!behind(&p));
}

#[test]
fn another_kind_of_write_applies_the_answered_appends_first() {
    let (_dir, _, mut p) = provider("ahead-mixed");
    acknowledge(&mut p, 1, 2);
    let set = Write::SetPosition {
        channel: "c".into(),
        reader: "r".into(),
        offset: 2,
    };
    assert_eq!(
        p.commit(&[set]).expect("commit"),
        vec![Outcome::PositionSet]
    );
    assert!(!behind(&p));
    assert_eq!(p.position("c", "r").expect("position"), Some(2));
    assert_eq!(offsets(&p, "c"), vec![1, 2]);
}

#[test]
fn an_idle_storage_thread_applies_them_without_committing() {
    let (_dir, _, mut p) = provider("ahead-idle");
    acknowledge(&mut p, 1, 2);
    assert_eq!(p.checkpoint_due_in(), Some(Duration::ZERO));
    p.checkpoint().expect("idle");
    assert!(!behind(&p));
    assert_eq!(
        p.redb_commits.get(),
        0,
        "applied into the open transaction only"
    );
    assert_ne!(
        p.checkpoint_due_in(),
        Some(Duration::ZERO),
        "nothing left to do now"
    );
}

#[test]
fn at_most_a_bounded_number_wait_for_the_apply() {
    let (_dir, _, mut p) = provider("ahead-bound");
    acknowledge(&mut p, 1, BEHIND_MAX_BATCHES as u64);
    assert!(behind(&p));
    // The next batch finds the queue of answered batches full: they are
    // applied, and it goes the usual way.
    acknowledge(&mut p, BEHIND_MAX_BATCHES as u64 + 1, 1);
    assert!(!behind(&p));
}

#[test]
fn a_failed_apply_rebuilds_the_transaction_with_every_answered_batch() {
    let (_dir, _, mut p) = provider("ahead-fail");
    acknowledge(&mut p, 1, 2);
    p.checkpoint().expect("applied into the open transaction");
    acknowledge(&mut p, 3, 3);
    p.fail_next_apply.set(true);
    assert!(p.read("c", 1, ALL).is_err(), "the read reports the failure");
    assert_eq!(
        offsets(&p, "c"),
        vec![1, 2, 3, 4, 5],
        "nothing answered is lost"
    );
    acknowledge(&mut p, 6, 1);
    assert_eq!(offsets(&p, "c"), vec![1, 2, 3, 4, 5, 6]);
}

#[test]
fn a_crash_with_answered_batches_not_applied_loses_none() {
    let (dir, file, mut p) = provider("ahead-crash");
    acknowledge(&mut p, 1, 4);
    assert!(behind(&p));
    let image = crash_image(&file, &dir.path().join("crashed.redb"), true);
    let recovered = RedbProvider::open("copy", &image, MAX_BYTES, 0).expect("recover");
    assert_eq!(recovered.channel("c"), p.channel("c"));
    assert_eq!(offsets(&recovered, "c"), vec![1, 2, 3, 4]);
}

#[test]
fn a_checkpoint_puts_the_answered_batches_in_the_file_before_the_journal_restarts() {
    let (dir, file, mut p) = provider("ahead-checkpoint");
    acknowledge(&mut p, 1, 3);
    p.set_checkpoint_interval_ms(0);
    p.checkpoint().expect("checkpoint");
    assert!(!behind(&p));
    // The journal starts again: the file alone must hold the batches.
    let image = crash_image(&file, &dir.path().join("bare.redb"), false);
    let bare = RedbProvider::open("bare", &image, MAX_BYTES, 0).expect("open");
    assert_eq!(offsets(&bare, "c"), vec![1, 2, 3]);
}
