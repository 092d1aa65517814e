//! Criterion benchmark of the connectivity walk (`connectivity::Check`): 10,000 new refs, one per
//! commit of a 10,000-commit history pushed as a pack into the quarantine of an empty repository,
//! checked as the session does (object database opened, every tip in command order). Two shapes:
//! commits with the empty tree (the walk is the commits; `berth bench many-refs --commits`), and
//! commits that each change one of 100 files (a root tree, a subtree and a blob per commit, trees
//! delta-compressed).
//!
//! `TMPDIR=/dev/shm cargo bench --bench connectivity`; side by side with git's own walk:
//! `cargo bench --bench walk_vs_git`.

mod support;

use criterion::{Criterion, criterion_group, criterion_main};

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("connectivity");
    group
        .sample_size(10)
        .warm_up_time(std::time::Duration::from_secs(1))
        .measurement_time(std::time::Duration::from_secs(3));
    for (name, shape) in [
        ("empty trees", support::Shape::EmptyTrees),
        ("files", support::Shape::Files),
    ] {
        let tmp = tempfile::tempdir().expect("tempdir");
        let walk = support::walk_fixture(tmp.path(), 10_000, shape);
        group.bench_function(
            format!("10k tips, 10k commits, {name} ({} objects)", walk.objects),
            |b| b.iter(|| walk.berth()),
        );
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
