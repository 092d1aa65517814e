//! Criterion benchmark of the ref transaction: N new refs (1,000 and 10,000) committed through
//! `RefStore::transaction` (prepare, then commit) of `refs::FilesStore` into a files-backend repository that already has 110 refs (100 in
//! `packed-refs`, 10 loose). Every iteration gets a fresh copy of the repository (made outside
//! the timing); the time is the store's commit alone: checks against the snapshot, locks, the
//! `packed-refs` rewrite, the rename.
//!
//! `TMPDIR=/dev/shm cargo bench --bench ref_transaction`

mod support;

use berth::refs::{Atomicity, Change, FilesStore, Options, RefStore, RefUpdate};
use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use std::fmt::Write as _;

fn bench(c: &mut Criterion) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let pristine = tmp.path().join("pristine.git");
    support::init(&pristine);
    let commit = support::commits(&pristine, 1, support::Shape::EmptyTrees)[0];
    // The existing refs: 100 packed, then 10 loose.
    let mut stdin = String::new();
    for i in 0..100 {
        let _ = writeln!(stdin, "create refs/tags/v{i:03} {commit}");
    }
    let mut u = support::git(&pristine);
    u.args(["update-ref", "--stdin"]);
    support::run(u, Some(stdin.as_bytes()));
    let mut p = support::git(&pristine);
    p.args(["pack-refs", "--all"]);
    support::run(p, None);
    let mut stdin = String::new();
    for i in 0..10 {
        let _ = writeln!(stdin, "create refs/heads/topic{i} {commit}");
    }
    let mut u = support::git(&pristine);
    u.args(["update-ref", "--stdin"]);
    support::run(u, Some(stdin.as_bytes()));

    // Sample hooks are not needed in every copy.
    let _ = std::fs::remove_dir_all(pristine.join("hooks"));
    let existing = FilesStore::open(
        &pristine,
        gix_hash::Kind::Sha1,
        berth::repo::config::LogRefUpdates::Never,
    )
    .snapshot()
    .expect("snapshot")
    .iter()
    .count();
    assert_eq!(existing, 111, "main, 100 packed tags, 10 loose branches");
    let committer = gix_actor::Signature {
        name: "berth bench".into(),
        email: "bench@berth".into(),
        time: gix_date::Time::new(1_700_000_000, 0),
    };
    let mut group = c.benchmark_group("ref transaction");
    group
        .sample_size(10)
        .warm_up_time(std::time::Duration::from_secs(1))
        .measurement_time(std::time::Duration::from_secs(3));
    for n in [1_000usize, 10_000] {
        let updates: Vec<RefUpdate> = (0..n)
            .map(|i| RefUpdate {
                name: format!("refs/heads/b/{i:07}").into(),
                change: Change::Create { new: commit },
            })
            .collect();
        group.bench_function(format!("{n} new refs"), |b| {
            b.iter_batched(
                || {
                    // Removed when criterion drops the routine's output, outside the timing.
                    let dir = tempfile::tempdir_in(tmp.path()).expect("tempdir");
                    support::copy_dir(&pristine, dir.path());
                    let store = FilesStore::open(
                        dir.path(),
                        gix_hash::Kind::Sha1,
                        berth::repo::config::LogRefUpdates::Never,
                    );
                    let current = store.snapshot().expect("snapshot");
                    assert_eq!(current.iter().count(), existing);
                    let objects =
                        gix_odb::at(dir.path().join("objects"), gix_hash::Kind::Sha1).expect("odb");
                    (dir, store, current, objects)
                },
                |(dir, store, current, objects)| {
                    let results = transact(&store, &updates, &current, &committer, &objects);
                    assert!(results.iter().all(Result::is_ok));
                    dir
                },
                BatchSize::PerIteration,
            )
        });
        // The result, checked on one more copy.
        let dir = tempfile::tempdir_in(tmp.path()).expect("tempdir");
        support::copy_dir(&pristine, dir.path());
        let store = FilesStore::open(
            dir.path(),
            gix_hash::Kind::Sha1,
            berth::repo::config::LogRefUpdates::Never,
        );
        let current = store.snapshot().expect("snapshot");
        let objects = gix_odb::at(dir.path().join("objects"), gix_hash::Kind::Sha1).expect("odb");
        transact(&store, &updates, &current, &committer, &objects);
        assert_eq!(
            store.snapshot().expect("snapshot").iter().count(),
            existing + n
        );
    }
    group.finish();
}

/// One non-atomic transaction of `updates`, prepared and committed, with no observer.
fn transact(
    store: &FilesStore,
    updates: &[RefUpdate],
    current: &berth::refs::Refs,
    committer: &gix_actor::Signature,
    objects: &gix_odb::Handle,
) -> Vec<berth::refs::RefResult> {
    let options = Options {
        atomicity: Atomicity::PerRef,
        current,
        committer,
        objects,
    };
    let mut observer = |_: berth::refs::TransactionState, _: &[RefUpdate]| true;
    store
        .transaction(options)
        .prepare(updates, &mut observer)
        .expect("prepare")
        .commit()
        .expect("commit")
}

criterion_group!(benches, bench);
criterion_main!(benches);
