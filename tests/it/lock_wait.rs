//! Locks held by another writer: a push waits for them as git does (`core.filesRefLockTimeout`
//! for `<ref>.lock`, `core.packedRefsTimeout` for `packed-refs.lock`, `reftable.lockTimeout`
//! for `tables.list.lock`, each retried with git's backoff) and goes through when the lock is
//! released in time; held longer, the push fails with git's exact error. And many real `git
//! push`es at once into one repository, each on its own branch, all go through, in both ref
//! backends: contention alone refuses nothing git would let through.
//!
//! The lock is taken at a precise moment by a `pre-receive` hook (which runs just before the
//! ref transaction): it creates the lock file and leaves behind a process that removes it after
//! a while, or leaves it for the test to remove after the push. The files-backend cases run
//! against `git receive-pack` too, which must do the same (git 2.47 reads both `core.*`
//! timeouts; it has no `reftable.lockTimeout`, which is git master's).

use crate::common::{self, Push, Receiver, World};

/// A `pre-receive` hook in `repo` that creates `lock` (absolute) and, with `release_ms`, has it
/// removed that many milliseconds later; without, the lock stays until the test removes it.
fn hold_lock_in_pre_receive(
    w: &World,
    repo: &str,
    lock: &std::path::Path,
    release_ms: Option<u64>,
) {
    let lock = lock.display();
    let release = match release_ms {
        Some(ms) => format!(
            "(sleep {}.{:03}; rm -f '{lock}') </dev/null >/dev/null 2>&1 &\n",
            ms / 1000,
            ms % 1000
        ),
        None => String::new(),
    };
    let hook = w.path(repo).join("hooks/pre-receive");
    std::fs::create_dir_all(hook.parent().unwrap()).unwrap();
    std::fs::write(&hook, format!("#!/bin/sh\n: > '{lock}'\n{release}exit 0\n")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// An empty bare `srv.git` of `format`, without auto maintenance.
fn bare_server(w: &World, format: &str) {
    let format = format!("--ref-format={format}");
    w.git(
        ".",
        &["init", "-q", "--bare", "-b", "main", &format, "srv.git"],
    );
    w.git(".", &["-C", "srv.git", "config", "receive.autogc", "false"]);
}

/// A bare `srv.git` of `format` with `main` and `gone` (packed) at one commit, and a client
/// `src` one commit ahead on `main`.
fn server(w: &World, format: &str) {
    bare_server(w, format);
    w.git(
        ".",
        &[
            "init",
            "-q",
            "-b",
            "main",
            &format!("--ref-format={format}"),
            "src",
        ],
    );
    w.commit("src", "a", "1");
    w.git(
        "src",
        &["push", "-q", "../srv.git", "main", "main:refs/heads/gone"],
    );
    if format == "files" {
        w.git("srv.git", &["pack-refs", "--all"]);
    }
    w.commit("src", "a", "2");
}

/// The push as the client saw it, git's multi-line lock explanation left out (git 2.47
/// explains at length after the first line, git master and berth do not).
fn first_lines(mut p: Push) -> Push {
    p.stderr = p
        .stderr
        .lines()
        .filter(|l| !l.starts_with("remote:") || l.starts_with("remote: error:"))
        .map(|l| format!("{l}\n"))
        .collect();
    p
}

/// `scenario` against git receive-pack and berth, each in a fresh world; the same pushes seen.
fn same_as_git(scenario: impl Fn(&World, Receiver) -> Push) -> Push {
    common::differential(|r| {
        let w = World::new();
        let p = first_lines(scenario(&w, r));
        if r == Receiver::Berth {
            w.assert_clean("srv.git");
        }
        p
    })
}

/// `<ref>.lock` held for 300 ms with `core.filesRefLockTimeout=5000`: the update waits for it
/// and lands, as with git.
#[test]
fn a_ref_lock_released_within_files_ref_lock_timeout_is_waited_for() {
    let p = same_as_git(|w, r| {
        server(w, "files");
        w.git("srv.git", &["config", "core.filesRefLockTimeout", "5000"]);
        let lock = w.path("srv.git/refs/heads/main.lock");
        hold_lock_in_pre_receive(w, "srv.git", &lock, Some(300));
        let p = w.push("src", r, "srv.git", &["main"]);
        assert!(!lock.exists());
        p
    });
    assert!(p.success, "{p:#?}");
    assert!(
        p.stdout.contains(" \trefs/heads/main:refs/heads/main\t"),
        "{p:#?}"
    );
}

/// `<ref>.lock` held through the push with the default timeout (100 ms): that ref fails with
/// git's message, after waiting.
#[test]
fn a_ref_lock_held_past_files_ref_lock_timeout_fails_as_git() {
    let p = same_as_git(|w, r| {
        server(w, "files");
        let lock = w.path("srv.git/refs/heads/main.lock");
        hold_lock_in_pre_receive(w, "srv.git", &lock, None);
        let start = std::time::Instant::now();
        let p = w.push("src", r, "srv.git", &["main"]);
        assert!(start.elapsed() >= std::time::Duration::from_millis(100));
        std::fs::remove_file(&lock).unwrap();
        p
    });
    assert!(!p.success, "{p:#?}");
    assert_eq!(
        p.remote_lines(),
        [
            "remote: error: cannot lock ref 'refs/heads/main': Unable to create \
          '$ROOT/srv.git/./refs/heads/main.lock': File exists."
        ],
        "{p:#?}"
    );
    assert!(
        p.stdout.contains(
            "!\trefs/heads/main:refs/heads/main\t[remote rejected] (failed to update ref)"
        ),
        "{p:#?}"
    );
}

/// `packed-refs.lock` held for 1.5 s, longer than the default `core.packedRefsTimeout` but
/// within the configured 5 s: the deletion of a packed ref waits and goes through, as with git.
#[test]
fn packed_refs_lock_released_within_packed_refs_timeout_is_waited_for() {
    let p = same_as_git(|w, r| {
        server(w, "files");
        w.git("srv.git", &["config", "core.packedRefsTimeout", "5000"]);
        let lock = w.path("srv.git/packed-refs.lock");
        hold_lock_in_pre_receive(w, "srv.git", &lock, Some(1500));
        w.push("src", r, "srv.git", &[":refs/heads/gone"])
    });
    assert!(p.success, "{p:#?}");
    assert!(p.stdout.contains("[deleted]"), "{p:#?}");
}

/// `packed-refs.lock` held through the push with `core.packedRefsTimeout=200`: the deletion
/// fails with git's message; the update beside it lands.
#[test]
fn packed_refs_lock_held_past_packed_refs_timeout_fails_as_git() {
    let p = same_as_git(|w, r| {
        server(w, "files");
        w.git("srv.git", &["config", "core.packedRefsTimeout", "200"]);
        let lock = w.path("srv.git/packed-refs.lock");
        hold_lock_in_pre_receive(w, "srv.git", &lock, None);
        let p = w.push("src", r, "srv.git", &["main", ":refs/heads/gone"]);
        std::fs::remove_file(&lock).unwrap();
        p
    });
    assert!(!p.success, "{p:#?}");
    assert_eq!(
        p.remote_lines(),
        ["remote: error: Unable to create '$ROOT/srv.git/./packed-refs.lock': File exists."],
        "{p:#?}"
    );
    assert!(
        p.stdout.contains(" \trefs/heads/main:refs/heads/main\t"),
        "{p:#?}"
    );
    assert!(
        p.stdout
            .contains("!\t:refs/heads/gone\t[remote rejected] (failed to update ref)"),
        "{p:#?}"
    );
}

/// `tables.list.lock` held for 300 ms with `reftable.lockTimeout=5000`: the transaction waits
/// and lands.
#[test]
fn reftable_lock_released_within_lock_timeout_is_waited_for() {
    let w = World::new();
    server(&w, "reftable");
    w.git("srv.git", &["config", "reftable.lockTimeout", "5000"]);
    let lock = w.path("srv.git/reftable/tables.list.lock");
    hold_lock_in_pre_receive(&w, "srv.git", &lock, Some(300));
    let p = w.push(
        "src",
        Receiver::Berth,
        "srv.git",
        &["main", ":refs/heads/gone"],
    );
    assert!(p.success, "{p:#?}");
    let refs = w.git("srv.git", &["for-each-ref", "--format=%(refname)"]);
    assert_eq!(refs, "refs/heads/main\n");
    w.assert_clean("srv.git");
}

/// `tables.list.lock` held through the push with the default timeout (100 ms): the whole
/// transaction fails with git master's `cannot lock references`, after waiting.
#[test]
fn reftable_lock_held_past_lock_timeout_fails_as_git_master() {
    let w = World::new();
    server(&w, "reftable");
    let before = w.refs("srv.git");
    let lock = w.path("srv.git/reftable/tables.list.lock");
    hold_lock_in_pre_receive(&w, "srv.git", &lock, None);
    let start = std::time::Instant::now();
    let p = w.push("src", Receiver::Berth, "srv.git", &["main"]);
    assert!(start.elapsed() >= std::time::Duration::from_millis(100));
    std::fs::remove_file(&lock).unwrap();
    assert!(!p.success, "{p:#?}");
    assert_eq!(
        p.remote_lines(),
        ["remote: error: cannot lock references"],
        "{p:#?}"
    );
    assert!(
        p.stdout
            .contains("refs/heads/main\t[remote rejected] (failed to update refs)"),
        "{p:#?}"
    );
    assert_eq!(w.refs("srv.git"), before);
    w.assert_clean("srv.git");
}

/// `reftable.lockTimeout` takes -1 (forever) but no other negative value, as git.
#[test]
fn reftable_lock_timeout_below_minus_one_is_refused_as_git() {
    let w = World::new();
    server(&w, "reftable");
    w.git("srv.git", &["config", "reftable.lockTimeout", "-2"]);
    let p = w.push("src", Receiver::Berth, "srv.git", &["main"]);
    assert!(!p.success, "{p:#?}");
    assert!(
        p.stderr
            .contains("reftable lock timeout does not support negative values other than -1"),
        "{p:#?}"
    );
}

/// `clients` real `git push`es at once (each its own process, through berth receive-pack),
/// each creating then fast-forwarding its own branch of one repository of `format`: every push
/// goes through, every branch ends at its last commit, and the repository is clean.
fn concurrent_pushes_on_distinct_branches(format: &str, clients: usize) {
    let w = World::new();
    bare_server(&w, format);
    // What is shown is that concurrent writers wait for each other instead of failing; git's
    // default waits (100 ms for a ref or `tables.list.lock`) are the timed tests' subject. A
    // loaded CI machine can hold a lock longer than that, so the waits here are long.
    for (key, value) in [
        ("reftable.lockTimeout", "10000"),
        ("core.filesRefLockTimeout", "10000"),
        ("core.packedRefsTimeout", "10000"),
    ] {
        w.git(".", &["-C", "srv.git", "config", key, value]);
    }
    for c in 0..clients {
        w.work(&format!("src{c}"));
    }
    let barrier = std::sync::Barrier::new(clients);
    let mut tips = vec![String::new(); clients];
    for round in 0..3 {
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..clients)
                .map(|c| {
                    let (w, barrier) = (&w, &barrier);
                    s.spawn(move || {
                        let src = format!("src{c}");
                        let tip = w.commit(&src, "f", &format!("client {c} round {round}"));
                        barrier.wait();
                        let p = w.push(
                            &src,
                            Receiver::Berth,
                            "srv.git",
                            &[&format!("main:refs/heads/c{c}")],
                        );
                        assert!(p.success, "client {c}, round {round}: {p:#?}");
                        tip
                    })
                })
                .collect();
            for (c, h) in handles.into_iter().enumerate() {
                tips[c] = h.join().unwrap();
            }
        });
    }
    for (c, tip) in tips.iter().enumerate() {
        let got = w.git("srv.git", &["rev-parse", &format!("refs/heads/c{c}")]);
        assert_eq!(got.trim(), tip, "c{c}");
    }
    w.assert_clean("srv.git");
}

#[test]
fn concurrent_pushes_on_distinct_branches_all_land_files() {
    concurrent_pushes_on_distinct_branches("files", 8);
}

#[test]
fn concurrent_pushes_on_distinct_branches_all_land_reftable() {
    concurrent_pushes_on_distinct_branches("reftable", 8);
}
