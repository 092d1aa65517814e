//! A [`Prepared`] that is dropped releases its locks, writes nothing, and announces `aborted`,
//! on both backends; one that is committed announces `committed`.

use std::path::Path;

use gix_hash::ObjectId;

use super::{Atomicity, Options, Prepared, TransactionState};
use crate::refs::{
    Change, Expected, FilesStore, PACKED_BATCH_THRESHOLD, RefStore, RefUpdate, Refs, ReftableStore,
};
use crate::repo::config::LogRefUpdates;

fn id(hex_digit: char) -> ObjectId {
    ObjectId::from_hex(hex_digit.to_string().repeat(40).as_bytes()).expect("hex")
}

fn create(name: &str) -> RefUpdate {
    RefUpdate {
        name: name.into(),
        change: Change::Create { new: id('1') },
    }
}

/// A bare repository's skeleton: `objects/`, `refs/heads/`, `reftable/`.
fn repo() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    for d in ["objects", "refs/heads", "reftable"] {
        std::fs::create_dir_all(dir.path().join(d)).expect("mkdir");
    }
    dir
}

fn signature() -> gix_actor::Signature {
    gix_actor::Signature {
        name: "t".into(),
        email: "t@t".into(),
        time: gix_date::Time::new(1_700_000_000, 0),
    }
}

/// The lock files under `git_dir`, relative and sorted.
fn locks(git_dir: &Path) -> Vec<String> {
    fn walk(dir: &Path, base: &Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let path = e.path();
            if path.is_dir() {
                walk(&path, base, out);
            } else if path.extension().is_some_and(|x| x == "lock") {
                let rel = path.strip_prefix(base).expect("below");
                out.push(rel.to_string_lossy().into_owned());
            }
        }
    }
    let mut out = Vec::new();
    walk(git_dir, git_dir, &mut out);
    out.sort();
    out
}

/// Prepare `updates` on `store`, run `then` on the result, and return the states the observer
/// saw, each with the number of updates and the lock files present at that moment.
fn run(
    store: &dyn RefStore,
    git_dir: &Path,
    updates: &[RefUpdate],
    refuse: Option<TransactionState>,
    then: impl FnOnce(Prepared<'_>),
) -> Vec<(TransactionState, usize, Vec<String>)> {
    let current: Refs = store.snapshot().expect("snapshot");
    let objects = gix_odb::at(git_dir.join("objects"), gix_hash::Kind::Sha1).expect("odb");
    let committer = signature();
    let options = Options {
        atomicity: Atomicity::PerRef,
        current: &current,
        committer: &committer,
        objects: &objects,
    };
    let mut seen = Vec::new();
    let mut observer = |state: TransactionState, batch: &[RefUpdate]| {
        seen.push((state, batch.len(), locks(git_dir)));
        Some(state) != refuse
    };
    match store.transaction(options).prepare(updates, &mut observer) {
        Ok(prepared) => then(prepared),
        Err(e) => assert_eq!(refuse, e.hook_aborted_state(), "{e}"),
    }
    seen
}

impl super::prepare::Error {
    fn hook_aborted_state(&self) -> Option<TransactionState> {
        match self {
            super::prepare::Error::HookAborted(s) => Some(*s),
            _ => None,
        }
    }
}

use TransactionState::{Aborted, Committed, Prepared as PreparedState, Preparing};

#[test]
fn files_few_refs_dropped_releases_the_locks_and_announces_aborted() {
    let dir = repo();
    let git_dir = dir.path();
    std::fs::write(git_dir.join("refs/heads/old"), format!("{}\n", id('2'))).expect("write");
    let store = FilesStore::open(git_dir, gix_hash::Kind::Sha1, LogRefUpdates::Never);
    let updates = [
        create("refs/heads/new"),
        RefUpdate {
            name: "refs/heads/old".into(),
            change: Change::Delete {
                old: Expected::MustBe(id('2')),
            },
        },
    ];
    let held = vec![
        "packed-refs.lock".to_owned(),
        "refs/heads/new.lock".into(),
        "refs/heads/old.lock".into(),
    ];
    let seen = run(&store, git_dir, &updates, None, |prepared| {
        assert_eq!(locks(git_dir), held, "the Prepared holds the locks");
        assert_eq!(prepared.updates().count(), 2);
        drop(prepared);
    });
    assert_eq!(
        seen,
        [
            (Preparing, 2, vec![]),
            (PreparedState, 2, held),
            (Aborted, 2, vec![]),
        ]
    );
    assert!(locks(git_dir).is_empty());
    assert!(!git_dir.join("refs/heads/new").exists(), "nothing written");
    assert_eq!(
        std::fs::read_to_string(git_dir.join("refs/heads/old")).expect("old"),
        format!("{}\n", id('2'))
    );
}

#[test]
fn files_many_refs_dropped_releases_packed_refs_lock_and_announces_aborted() {
    let dir = repo();
    let git_dir = dir.path();
    let store = FilesStore::open(git_dir, gix_hash::Kind::Sha1, LogRefUpdates::Never);
    let updates: Vec<RefUpdate> = (0..PACKED_BATCH_THRESHOLD)
        .map(|i| create(&format!("refs/heads/b{i:04}")))
        .collect();
    let n = updates.len();
    let seen = run(&store, git_dir, &updates, None, |prepared| {
        assert_eq!(locks(git_dir), ["packed-refs.lock"]);
        prepared.abort();
    });
    assert_eq!(
        seen,
        [
            (Preparing, n, vec![]),
            (PreparedState, n, vec!["packed-refs.lock".into()]),
            (Aborted, n, vec![]),
        ]
    );
    assert!(locks(git_dir).is_empty());
    assert!(!git_dir.join("packed-refs").exists(), "nothing written");
}

#[test]
fn reftable_dropped_releases_the_stack_lock_and_announces_aborted() {
    let dir = repo();
    let git_dir = dir.path();
    let store = ReftableStore::open(git_dir, LogRefUpdates::Never, Default::default());
    let updates = [create("refs/heads/a"), create("refs/heads/b")];
    let held = vec!["reftable/tables.list.lock".to_owned()];
    let seen = run(&store, git_dir, &updates, None, |prepared| {
        assert_eq!(locks(git_dir), held);
        drop(prepared);
    });
    assert_eq!(
        seen,
        [
            (Preparing, 2, vec![]),
            (PreparedState, 2, held),
            (Aborted, 2, vec![]),
        ]
    );
    assert!(locks(git_dir).is_empty());
    assert!(
        store.snapshot().expect("snapshot").is_empty(),
        "nothing written"
    );
}

#[test]
fn committed_is_announced_once_written_on_both_backends() {
    let dir = repo();
    let git_dir = dir.path();
    let files = FilesStore::open(git_dir, gix_hash::Kind::Sha1, LogRefUpdates::Never);
    let reftable = ReftableStore::open(git_dir, LogRefUpdates::Never, Default::default());
    for store in [&files as &dyn RefStore, &reftable] {
        let updates = [create("refs/heads/c")];
        let seen = run(store, git_dir, &updates, None, |prepared| {
            let results = prepared.commit().expect("commit");
            assert!(results.iter().all(Result::is_ok));
        });
        let states: Vec<_> = seen.iter().map(|(s, n, _)| (*s, *n)).collect();
        assert_eq!(states, [(Preparing, 1), (PreparedState, 1), (Committed, 1)]);
        assert!(
            seen[2].2.is_empty(),
            "the locks are gone when committed is told"
        );
        assert_eq!(
            store.snapshot().expect("snapshot").get(b"refs/heads/c"),
            Some(id('1'))
        );
    }
}

#[test]
fn a_refusal_in_prepared_releases_the_locks_before_aborted_on_both_backends() {
    let dir = repo();
    let git_dir = dir.path();
    let files = FilesStore::open(git_dir, gix_hash::Kind::Sha1, LogRefUpdates::Never);
    let reftable = ReftableStore::open(git_dir, LogRefUpdates::Never, Default::default());
    for store in [&files as &dyn RefStore, &reftable] {
        let updates = [create("refs/heads/d")];
        let seen = run(store, git_dir, &updates, Some(PreparedState), |_| {
            panic!("refused in prepared")
        });
        let states: Vec<_> = seen.iter().map(|(s, n, _)| (*s, *n)).collect();
        assert_eq!(states, [(Preparing, 1), (PreparedState, 1), (Aborted, 1)]);
        assert!(!seen[1].2.is_empty() && seen[2].2.is_empty());
        assert!(
            store
                .snapshot()
                .expect("snapshot")
                .get(b"refs/heads/d")
                .is_none()
        );
    }
}

/// A batch of a million refs on the files backend's packed path holds a million items (issue
/// 24: memory per command).
#[test]
fn a_batch_item_is_small() {
    assert_eq!(std::mem::size_of::<crate::refs::packed::Item>(), 16);
}
