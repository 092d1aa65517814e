//! End-to-end pushes with the real git client, each run twice: once against `git receive-pack`
//! and once against berth, on identical repositories. The client-visible result and the
//! resulting refs must be the same, and the berth side is checked with `git fsck --strict`.

use crate::common;
use common::{Push, Receiver, World};

/// What one scenario produced: every push as the client saw it, and the server's refs.
#[derive(Debug, PartialEq, Eq)]
struct Outcome {
    pushes: Vec<Push>,
    refs: String,
    reflogs: String,
}

/// Run `scenario` against git and berth and insist on identical outcomes; return berth's.
fn differential(scenario: impl Fn(&World, Receiver) -> Vec<Push>) -> Outcome {
    common::differential(|r| {
        let w = World::new();
        let pushes = scenario(&w, r);
        let refs = w.refs("srv.git");
        let reflogs = w.reflogs("srv.git");
        if r == Receiver::Berth {
            w.assert_clean("srv.git");
        }
        Outcome {
            pushes,
            refs,
            reflogs,
        }
    })
}

fn ok(p: &Push) -> &Push {
    assert!(p.success, "push failed: {p:#?}");
    p
}

#[test]
fn first_push_into_empty_repository() {
    let o = differential(|w, r| {
        w.bare("srv.git");
        w.work("src");
        w.commit("src", "a", "1");
        w.commit("src", "b", "2");
        vec![w.push("src", r, "srv.git", &["main"])]
    });
    assert!(
        ok(&o.pushes[0])
            .stdout
            .contains("*\trefs/heads/main:refs/heads/main\t[new branch]")
    );
    assert!(o.refs.ends_with(" commit refs/heads/main\n"), "{}", o.refs);
}

#[test]
fn new_branch_fast_forward_forced_update_and_delete() {
    let o = differential(|w, r| {
        w.bare("srv.git");
        w.work("src");
        w.commit("src", "a", "1");
        let mut p = vec![w.push("src", r, "srv.git", &["main"])];
        w.git("src", &["checkout", "-q", "-b", "topic"]);
        w.commit("src", "t", "topic");
        p.push(w.push("src", r, "srv.git", &["topic"])); // new branch
        w.commit("src", "t", "topic 2");
        p.push(w.push("src", r, "srv.git", &["topic"])); // fast-forward
        w.git("src", &["reset", "-q", "--hard", "HEAD~2"]);
        w.commit("src", "u", "rewritten");
        p.push(w.push("src", r, "srv.git", &["topic"])); // non-ff, refused by the client
        p.push(w.push("src", r, "srv.git", &["--force", "topic"])); // forced
        p.push(w.push("src", r, "srv.git", &[":refs/heads/topic"])); // delete
        p
    });
    let p = &o.pushes;
    assert!(ok(&p[1]).stdout.contains("[new branch]"));
    assert!(
        ok(&p[2])
            .stdout
            .contains(" \trefs/heads/topic:refs/heads/topic\t")
    );
    assert!(!p[3].success && p[3].stdout.contains("[rejected] (non-fast-forward)"));
    assert!(
        ok(&p[4])
            .stdout
            .contains("+\trefs/heads/topic:refs/heads/topic\t")
            && p[4].stdout.contains("(forced update)")
    );
    assert!(ok(&p[5]).stdout.contains("-\t:refs/heads/topic\t[deleted]"));
    assert_eq!(o.refs.lines().count(), 1, "{}", o.refs);
}

#[test]
fn deny_non_fast_forwards_refuses_forced_push() {
    let o = differential(|w, r| {
        w.bare("srv.git");
        w.git(
            "srv.git",
            &["config", "receive.denyNonFastForwards", "true"],
        );
        w.work("src");
        w.commit("src", "a", "1");
        w.commit("src", "a", "2");
        let mut p = vec![w.push("src", r, "srv.git", &["main"])];
        w.git("src", &["reset", "-q", "--hard", "HEAD~1"]);
        w.commit("src", "b", "other");
        p.push(w.push("src", r, "srv.git", &["--force", "main"]));
        p
    });
    let p = &o.pushes[1];
    assert!(!p.success);
    assert!(
        p.stdout
            .contains("!\trefs/heads/main:refs/heads/main\t[remote rejected] (non-fast-forward)"),
        "{p:#?}"
    );
    assert!(
        p.remote_lines().contains(
            &"remote: error: denying non-fast-forward refs/heads/main (you should pull first)"
        ),
        "{p:#?}"
    );
}

#[test]
fn deny_deletes_refuses_branch_deletion_only() {
    let o = differential(|w, r| {
        w.bare("srv.git");
        w.git("srv.git", &["config", "receive.denyDeletes", "true"]);
        w.work("src");
        w.commit("src", "a", "1");
        w.git("src", &["tag", "v1"]);
        w.git("src", &["branch", "topic"]);
        let mut p = vec![w.push("src", r, "srv.git", &["main", "topic", "v1"])];
        p.push(w.push("src", r, "srv.git", &[":refs/heads/topic", ":refs/tags/v1"]));
        p
    });
    let p = &o.pushes[1];
    assert!(
        p.stdout.contains("[remote rejected] (deletion prohibited)"),
        "{p:#?}"
    );
    assert!(p.stdout.contains("-\t:refs/tags/v1\t[deleted]"), "{p:#?}");
    assert!(o.refs.contains("refs/heads/topic") && !o.refs.contains("refs/tags/v1"));
}

#[test]
fn annotated_tag() {
    let o = differential(|w, r| {
        w.bare("srv.git");
        w.work("src");
        w.commit("src", "a", "1");
        w.git("src", &["tag", "-a", "-m", "release 1", "v1"]);
        vec![w.push("src", r, "srv.git", &["main", "v1"])]
    });
    assert!(
        ok(&o.pushes[0])
            .stdout
            .contains("*\trefs/tags/v1:refs/tags/v1\t[new tag]")
    );
    assert!(o.refs.contains(" tag refs/tags/v1\n"), "{}", o.refs);
}

#[test]
fn second_push_arrives_as_thin_pack() {
    let big: String = (0..2000)
        .map(|i| format!("line {i} of a file that deltas well\n"))
        .collect();
    let o = differential(|w, r| {
        w.bare("srv.git");
        w.work("src");
        w.commit("src", "big", &big);
        let mut p = vec![w.push("src", r, "srv.git", &["main"])];
        w.commit("src", "big", &format!("{big}one more line\n"));
        // What the client sends is thin: the new blob is a delta against a blob only the
        // server has, so the pack cannot be indexed without completing it.
        let pack = w
            .git_with_stdin(
                "src",
                &["pack-objects", "--thin", "--stdout", "--revs"],
                b"main
^main~1
",
            )
            .stdout;
        let out = w.git_with_stdin("src", &["index-pack", "--stdin"], &pack);
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("unresolved delta"),
            "pack is not thin"
        );
        p.push(w.push("src", r, "srv.git", &["--thin", "main"]));
        p
    });
    ok(&o.pushes[1]);
}

/// A small thin push into a repository whose objects are packed: the pushed objects become
/// loose objects, as git's `unpack-objects` writes them, and the base the pack was completed
/// with, which the repository has in its pack, is not written out again beside it.
#[test]
fn a_small_thin_push_leaves_the_same_loose_objects_as_git() {
    let big: String = (0..2000)
        .map(|i| format!("line {i} of a file that deltas well\n"))
        .collect();
    let loose = common::differential(|r| {
        let w = World::new();
        w.bare("srv.git");
        w.work("src");
        w.commit("src", "big", &big);
        ok(&w.push("src", r, "srv.git", &["main"]));
        w.git("srv.git", &["repack", "-adq"]);
        w.commit("src", "big", &format!("{big}one more line\n"));
        ok(&w.push("src", r, "srv.git", &["--thin", "main"]));
        w.fsck("srv.git").unwrap();
        loose_objects(&w, "srv.git")
            .into_iter()
            .map(|(id, _)| id)
            .collect::<Vec<_>>()
    });
    assert_eq!(loose.len(), 3, "a commit, a tree and a blob: {loose:?}");
}

/// A push whose blobs are one long chain of deltas, unpacked to loose objects under a raised
/// `receive.unpackLimit`: berth decodes the pack in its order, each delta from the base kept
/// for it (`objects/pending_bases.rs`), and leaves the same loose objects as git's
/// unpack-objects, fsck clean.
#[test]
fn a_long_delta_chain_unpacks_to_the_same_loose_objects_as_git() {
    let loose = common::differential(|r| {
        let w = World::new();
        w.bare("srv.git");
        w.git("srv.git", &["config", "receive.unpackLimit", "1000"]);
        w.work("src");
        // Each version of the file one line off the one before: its nearest base.
        let mut lines: Vec<String> = (0..300)
            .map(|j| format!("line {j:4} as it was\n"))
            .collect();
        for i in 0..80 {
            lines[i * 7 % 300] = format!("line {:4} changed in {i:2}\n", i * 7 % 300);
            w.commit("src", "f", &lines.concat());
        }
        // The pack a push sends holds long chains.
        let pack = w
            .git_with_stdin(
                "src",
                &["pack-objects", "--revs", "--stdout", "--delta-base-offset"],
                b"main\n",
            )
            .stdout;
        w.git_with_stdin("src", &["index-pack", "--stdin"], &pack);
        let idx = w.git("src", &["rev-parse", "--git-path", "objects/pack"]);
        let verify = std::fs::read_dir(w.path("src").join(idx.trim()))
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.extension().is_some_and(|e| e == "idx"))
            .map(|p| w.git("src", &["verify-pack", "-v", p.to_str().unwrap()]))
            .unwrap();
        let longest = verify
            .lines()
            .filter_map(|l| l.strip_prefix("chain length = "))
            .filter_map(|l| l.split(':').next()?.trim().parse::<u32>().ok())
            .max()
            .unwrap_or(0);
        assert!(longest >= 20, "{verify}");
        ok(&w.push("src", r, "srv.git", &["main"]));
        w.fsck("srv.git").unwrap();
        loose_objects(&w, "srv.git")
            .into_iter()
            .map(|(id, _)| id)
            .collect::<Vec<_>>()
    });
    assert_eq!(loose.len(), 240, "a commit, a tree and a blob a version");
}

/// `srv.git`, a new repository (with `fan_out`, its 256 fan-out directories made first, as in
/// one that has objects), and the request of a push of one commit of `n` new files to it.
fn small_push(n: usize, fan_out: bool) -> (World, Vec<u8>) {
    let w = World::new();
    w.bare("srv.git");
    w.git("srv.git", &["config", "receive.autogc", "false"]);
    if fan_out {
        for i in 0..=255u8 {
            std::fs::create_dir(w.path(&format!("srv.git/objects/{i:02x}"))).unwrap();
        }
    }
    w.work("src");
    for i in 1..n {
        std::fs::write(w.path("src").join(format!("f{i}")), format!("file {i}\n")).unwrap();
    }
    let commit = w.commit("src", "f0", "file 0\n");
    let pack = w
        .git_with_stdin("src", &["pack-objects", "--revs", "--stdout"], b"main\n")
        .stdout;
    let mut input = common::pkt(&format!(
        "{} {commit} refs/heads/main\0report-status",
        common::ZERO
    ));
    input.extend(b"0000");
    input.extend(pack);
    (w, input)
}

/// berth's `receive-pack --stateless-rpc <args> srv.git` on `input` under `strace -f
/// <strace> -o <file>`: its output and the file's text.
fn traced_receive_pack(
    w: &World,
    strace: &[&str],
    args: &[&str],
    input: &[u8],
) -> (std::process::Output, String) {
    let trace = w.path("trace");
    let mut cmd = w.cmd("strace", ".");
    cmd.arg("-f")
        .args(strace)
        .arg("-o")
        .arg(&trace)
        .arg(common::berth())
        .args(["receive-pack", "--stateless-rpc"])
        .args(args)
        .arg("srv.git");
    let out = w.git_with_stdin_cmd(cmd, input);
    (out, std::fs::read_to_string(&trace).unwrap())
}

/// The push of [`small_push`] under `strace`, checked accepted and whole (its objects loose,
/// under `receive.unpackLimit`): the trace.
fn traced_small_push(n: usize, fan_out: bool, strace: &[&str]) -> String {
    let (w, input) = small_push(n, fan_out);
    let (out, trace) = traced_receive_pack(&w, strace, &[], &input);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("ok refs/heads/main"),
        "{out:?}"
    );
    w.fsck("srv.git").unwrap();
    assert_eq!(loose_objects(&w, "srv.git").len(), n + 2);
    trace
}

/// The `stat` calls (`strace -f -c`) of [`traced_small_push`].
fn stats_of_a_small_push(n: usize, fan_out: bool) -> u64 {
    let summary = traced_small_push(n, fan_out, &["-c", "-e", "trace=statx,newfstatat"]);
    // `% time  seconds  usecs/call  calls  [errors]  syscall`, then `total`.
    summary
        .lines()
        .filter(|l| !l.ends_with("total"))
        .filter_map(|l| l.split_whitespace().nth(3)?.parse::<u64>().ok())
        .sum()
}

/// The loose objects of a small push move in from the quarantine with one call each
/// (`renameat2` that does not replace: an object already there stays), with no `stat` of
/// their place first, and a fan-out directory is made with one `mkdir`, not a `stat` and a
/// `mkdir`, and one that is there already costs that `mkdir` alone. What is left grows with
/// the quarantine's fan-out directories (listed once each), so 60 more objects cost fewer than
/// 60 more stats (they cost 164 more before: 2.7 each), whether or not the repository's fan-out
/// directories are there.
#[test]
fn a_small_push_moves_its_loose_objects_in_without_a_stat_each() {
    for fan_out in [false, true] {
        let (small, large) = (
            stats_of_a_small_push(20, fan_out),
            stats_of_a_small_push(80, fan_out),
        );
        assert!(
            large < small + 60,
            "fan-out directories there: {fan_out}: {small} stats for 22 objects, {large} for 82"
        );
    }
}

/// A push's object stores after its first (the quarantine's for the connectivity check, the
/// repository's after the migration) are opened with the first one's count of pack slots:
/// opening one no longer lists the pack directories and resolves the alternates to count
/// them (gix-odb's default): a one-commit push into a new repository lists its
/// `objects/pack` twice, where it listed it four times.
#[test]
fn a_small_push_lists_the_pack_directory_twice() {
    let trace = traced_small_push(1, false, &["-e", "trace=openat"]);
    let listed = trace
        .lines()
        .filter(|l| l.contains("srv.git/objects/pack\"") && l.contains("O_DIRECTORY"))
        .count();
    assert_eq!(listed, 2, "{trace}");
}

/// How many times a trace of `openat` calls opened the repository's `packed-refs`.
fn packed_refs_reads(trace: &str) -> usize {
    trace
        .lines()
        .filter(|l| l.contains("srv.git/packed-refs\""))
        .count()
}

/// `input` through berth's receive-pack under `strace`: its answer, checked to have read
/// `packed-refs` once.
fn push_reading_packed_refs_once(w: &World, input: &[u8]) -> String {
    let (out, trace) = traced_receive_pack(w, &["-e", "trace=openat"], &[], input);
    assert_eq!(packed_refs_reads(&trace), 1, "{trace}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A server with history, without auto maintenance, every ref packed and `names` naming its
/// first commit too: the world and that commit.
fn packed_server(names: &[&str]) -> (World, String) {
    let w = World::new();
    let (c1, _) = w.server_with_history();
    w.git("srv.git", &["config", "receive.autogc", "false"]);
    for name in names {
        w.git("srv.git", &["update-ref", name, &c1]);
    }
    w.git("srv.git", &["pack-refs", "--all"]);
    (w, c1)
}

/// A push reads `packed-refs` once: its transaction takes the file from the push's snapshot
/// when `stat` says it has not been replaced since, as git keeps its packed snapshot (before,
/// the transaction read the whole file again: 19.5 MB for 300,000 refs).
#[test]
fn a_small_push_reads_packed_refs_once() {
    if common::reftable() {
        return; // about packed-refs, the files backend's
    }
    let (w, input) = small_push(1, false);
    let tree = w.git("srv.git", &["hash-object", "-w", "-t", "tree", "/dev/null"]);
    let base = w.git("srv.git", &["commit-tree", "-m", "base", tree.trim()]);
    w.git("srv.git", &["update-ref", "refs/heads/base", base.trim()]);
    w.git("srv.git", &["pack-refs", "--all"]);
    let answer = push_reading_packed_refs_once(&w, &input);
    assert!(answer.contains("ok refs/heads/main"), "{answer}");
    assert_eq!(w.git("srv.git", &["rev-parse", "base"]), base);
    w.fsck("srv.git").unwrap();
}

/// A push of many refs (one `packed-refs` rewrite) reads the old `packed-refs` once too: under
/// `packed-refs.lock` it takes the push's snapshot's while `stat` says it is the same file.
#[test]
fn a_push_of_many_refs_reads_packed_refs_once() {
    if common::reftable() {
        return; // about packed-refs, the files backend's
    }
    let (w, c1) = packed_server(&[]);
    let commands: Vec<String> = (0..150)
        .map(|i| format!("{} {c1} refs/heads/many/{i:03}", common::ZERO))
        .collect();
    let mut input = common::request(&commands, " report-status");
    input.extend(common::EMPTY_PACK);
    let answer = push_reading_packed_refs_once(&w, &input);
    assert_eq!(
        answer.matches("ok refs/heads/many/").count(),
        150,
        "{answer}"
    );
    let listed = w.git("srv.git", &["for-each-ref", "refs/heads/many/"]);
    assert_eq!(listed.lines().count(), 150);
    w.fsck("srv.git").unwrap();
}

/// A push that deletes a packed ref reads `packed-refs` once too: the rewrite without it, under
/// `packed-refs.lock`, takes the file as the transaction's first step had it while `stat` says
/// it is the same one (before, it read the whole file again).
#[test]
fn a_deletion_reads_packed_refs_once() {
    if common::reftable() {
        return; // about packed-refs, the files backend's
    }
    let (w, c1) = packed_server(&["refs/heads/gone", "refs/heads/kept"]);
    let input = common::request(
        &[format!("{c1} {} refs/heads/gone", common::ZERO)],
        "report-status delete-refs",
    );
    let answer = push_reading_packed_refs_once(&w, &input);
    assert!(answer.contains("ok refs/heads/gone"), "{answer}");
    let packed = std::fs::read_to_string(w.path("srv.git/packed-refs")).unwrap();
    assert!(!packed.contains("refs/heads/gone"), "{packed}");
    assert!(
        packed.contains(&format!("{c1} refs/heads/kept")),
        "{packed}"
    );
    let listed = w.git(
        "srv.git",
        &["for-each-ref", "--format=%(refname)", "refs/heads/"],
    );
    assert!(
        listed.contains("refs/heads/kept\n") && !listed.contains("gone"),
        "{listed}"
    );
    w.fsck("srv.git").unwrap();
}

/// An advertisement (smart HTTP's `GET info/refs`) runs no hook, so it looks none up (nor does
/// git): no path under `hooks/` is looked at.
#[test]
fn an_advertisement_looks_up_no_hook() {
    let w = World::new();
    w.server_with_main();
    let (out, trace) = traced_receive_pack(&w, &["-e", "trace=%file"], &["--advertise-refs"], b"");
    assert!(out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("refs/heads/main"),
        "{out:?}"
    );
    assert!(trace.contains("srv.git/HEAD"), "{trace}");
    assert!(!trace.contains("srv.git/hooks/"), "{trace}");
}

/// Each loose object of `repo` (its id, without the fan-out's `/`) with its file's bytes.
fn loose_objects(w: &World, repo: &str) -> Vec<(String, Vec<u8>)> {
    let mut all = Vec::new();
    for dir in std::fs::read_dir(w.path(&format!("{repo}/objects"))).unwrap() {
        let dir = dir.unwrap();
        let name = dir.file_name().to_string_lossy().into_owned();
        if name.len() != 2 {
            continue;
        }
        for f in std::fs::read_dir(dir.path()).unwrap() {
            let f = f.unwrap();
            let id = format!("{name}{}", f.file_name().to_string_lossy());
            all.push((id, std::fs::read(f.path()).unwrap()));
        }
    }
    all.sort();
    all
}

#[test]
fn atomic_push_with_one_stale_ref_changes_nothing() {
    let o = differential(|w, r| {
        w.bare("srv.git");
        w.work("src");
        w.commit("src", "a", "1");
        w.git("src", &["branch", "topic"]);
        let mut p = vec![w.push("src", r, "srv.git", &["main", "topic"])];
        // Someone else moves topic on the server.
        w.git(".", &["clone", "-q", "srv.git", "other"]);
        w.git("other", &["checkout", "-q", "topic"]);
        w.commit("other", "o", "other's work");
        p.push(w.push("other", r, "srv.git", &["topic"]));
        // Our topic is now stale: an atomic push of main and topic must change nothing.
        w.commit("src", "a", "2");
        w.git("src", &["checkout", "-q", "topic"]);
        w.commit("src", "t", "mine");
        p.push(w.push("src", r, "srv.git", &["--atomic", "main", "topic"]));
        p.push(w.push("src", r, "srv.git", &["main", "topic"]));
        p
    });
    let atomic = &o.pushes[2];
    assert!(!atomic.success);
    assert!(
        atomic
            .stdout
            .contains("!\trefs/heads/main:refs/heads/main\t[rejected] (atomic push failed)"),
        "{atomic:#?}"
    );
    let plain = &o.pushes[3];
    assert!(
        plain
            .stdout
            .contains(" \trefs/heads/main:refs/heads/main\t"),
        "{plain:#?}"
    );
    assert!(
        plain
            .stdout
            .contains("!\trefs/heads/topic:refs/heads/topic\t[rejected]"),
        "{plain:#?}"
    );
}

#[test]
fn ten_thousand_refs_in_one_push() {
    let o = differential(|w, r| {
        w.bare("srv.git");
        w.work("src");
        let head = w.commit("src", "a", "1");
        w.create_refs("src", "refs/heads/b/", 10_000, &head);
        vec![w.push("src", r, "srv.git", &["refs/heads/*:refs/heads/*"])]
    });
    ok(&o.pushes[0]);
    assert_eq!(o.refs.lines().count(), 10_001);
}

#[test]
fn push_options_reach_the_server_only_when_advertised() {
    let o = differential(|w, r| {
        w.bare("srv.git");
        w.work("src");
        w.commit("src", "a", "1");
        let mut p = vec![w.push("src", r, "srv.git", &["-o", "ci.skip", "main"])];
        w.git(
            "srv.git",
            &["config", "receive.advertisePushOptions", "true"],
        );
        p.push(w.push(
            "src",
            r,
            "srv.git",
            &["-o", "ci.skip", "-o", "x=y z", "main"],
        ));
        p
    });
    assert!(!o.pushes[0].success);
    assert!(
        o.pushes[0]
            .stderr
            .contains("the receiving end does not support push options")
    );
    ok(&o.pushes[1]);
}

#[test]
fn hidden_refs_are_not_advertised_and_cannot_be_updated() {
    let o = differential(|w, r| {
        w.bare("srv.git");
        w.work("src");
        w.commit("src", "a", "1");
        w.git("src", &["branch", "secret/x"]);
        let mut p = vec![w.push("src", r, "srv.git", &["main", "secret/x"])];
        w.git(
            "srv.git",
            &["config", "receive.hideRefs", "refs/heads/secret"],
        );
        w.commit("src", "a", "2");
        p.push(w.push("src", r, "srv.git", &["main:refs/heads/secret/y"]));
        p
    });
    assert!(
        o.pushes[1]
            .stdout
            .contains("[remote rejected] (deny updating a hidden ref)"),
        "{:#?}",
        o.pushes[1]
    );
}

#[test]
fn refuses_to_update_checked_out_branch_of_non_bare_repository() {
    let o = differential(|w, r| {
        w.work("srv.git"); // non-bare, `main` checked out
        w.commit("srv.git", "x", "server");
        w.work("src");
        w.commit("src", "a", "1");
        vec![
            w.push("src", r, "srv.git/.git", &["--force", "main"]),
            w.push("src", r, "srv.git", &["main:refs/heads/other"]),
        ]
    });
    let p = &o.pushes[0];
    assert!(
        p.stdout
            .contains("[remote rejected] (branch is currently checked out)"),
        "{p:#?}"
    );
    assert!(
        p.stderr
            .contains("remote: error: refusing to update checked out branch: refs/heads/main")
    );
    ok(&o.pushes[1]);
}

#[test]
fn resolving_deltas_progress_on_band_2_unless_quiet() {
    // Enough objects for git's index-pack path, most of them deltas.
    let resolving = |r: Receiver, quiet: bool| {
        let w = World::new();
        w.bare("srv.git");
        w.work("src");
        let base: String = (0..300).map(|i| format!("line {i}\n")).collect();
        for i in 0..40 {
            w.commit("src", "f", &format!("{base}{i}\n"));
        }
        let rp = format!("--receive-pack={}", r.command());
        let url = w.path("srv.git");
        let mut args = vec![
            "push",
            "--progress",
            rp.as_str(),
            url.to_str().unwrap(),
            "main",
        ];
        if quiet {
            args.insert(1, "--quiet");
        }
        let out = w.git_out("src", &args);
        assert!(out.status.success());
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        stderr
            .split(['\r', '\n'])
            .filter(|l| l.starts_with("remote: Resolving deltas: 100%"))
            .map(|l| l.trim_end().to_owned())
            .next_back()
    };
    let git = resolving(Receiver::Git, false);
    assert!(git.is_some());
    assert_eq!(git, resolving(Receiver::Berth, false));
    assert_eq!(resolving(Receiver::Berth, true), None);
}

/// A thin pack completed from the repository ends index-pack's progress with `completed with
/// N local object(s)` instead of `done` (JGit reads the line as the end of the progress).
#[test]
fn thin_pack_progress_counts_the_local_objects_that_completed_it() {
    let big = |tag: &str| -> String {
        (0..2000)
            .map(|i| format!("line {i} of {tag}, a file that deltas well\n"))
            .collect()
    };
    let resolving = |r: Receiver, files: &[&str], ofs_delta: bool| {
        let w = World::new();
        w.bare("srv.git");
        // index-pack for every pack, however small.
        w.git("srv.git", &["config", "receive.unpackLimit", "1"]);
        if !ofs_delta {
            // Every delta a REF_DELTA, those against objects of the pack too.
            w.git("srv.git", &["config", "repack.useDeltaBaseOffset", "false"]);
        }
        w.work("src");
        for f in files {
            w.commit("src", f, &big(f));
        }
        ok(&w.push("src", r, "srv.git", &["main"]));
        for f in files {
            std::fs::write(w.path("src").join(f), format!("{}one more\n", big(f))).unwrap();
        }
        w.git("src", &["commit", "-q", "-am", "more"]);
        let rp = format!("--receive-pack={}", r.command());
        let url = w.path("srv.git");
        let out = w.git_out(
            "src",
            &["push", "--progress", &rp, url.to_str().unwrap(), "main"],
        );
        assert!(out.status.success());
        if r == Receiver::Berth {
            w.assert_clean("srv.git");
        }
        String::from_utf8_lossy(&out.stderr)
            .split(['\r', '\n'])
            .filter(|l| l.starts_with("remote: Resolving deltas: 100%"))
            .map(|l| l.trim_end().to_owned())
            .next_back()
    };
    let one = common::differential(|r| resolving(r, &["a"], true));
    assert_eq!(
        one.as_deref(),
        Some("remote: Resolving deltas: 100% (1/1), completed with 1 local object.")
    );
    let two = common::differential(|r| resolving(r, &["a", "b"], true));
    assert_eq!(
        two.as_deref(),
        Some("remote: Resolving deltas: 100% (2/2), completed with 2 local objects.")
    );
    common::differential(|r| resolving(r, &["a", "b", "c"], false));
}

/// A kept pack is left as git's index-pack leaves it: `.pack`, `.idx` and `.rev` read-only,
/// the mode adjusted by `core.sharedRepository`, no `.rev` with `pack.writeReverseIndex=false`;
/// and berth's `.rev` is byte for byte what `git index-pack --rev-index` writes for that pack.
#[test]
fn kept_packs_are_read_only_with_a_reverse_index() {
    use std::os::unix::fs::PermissionsExt;
    let files = |w: &World, dir: &str| -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(w.path(dir))
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                let mode = e.metadata().unwrap().permissions().mode() & 0o7777;
                format!("{:o} {}", mode, e.file_name().to_string_lossy())
            })
            .collect();
        v.sort();
        v
    };
    let run = |r: Receiver, config: &[(&str, &str)]| {
        let w = World::new();
        w.bare("srv.git");
        w.git("srv.git", &["config", "receive.unpackLimit", "1"]);
        for (k, v) in config {
            w.git("srv.git", &["config", k, v]);
        }
        w.work("src");
        w.commit("src", "a", "1");
        w.commit("src", "b", "2");
        ok(&w.push("src", r, "srv.git", &["main"]));
        // A thin one too: completed from the repository, so berth's pack is its own.
        let big: String = (0..500).map(|i| format!("line {i}\n")).collect();
        w.commit("src", "big", &big);
        ok(&w.push("src", r, "srv.git", &["main"]));
        w.commit("src", "big", &format!("{big}more\n"));
        ok(&w.push("src", r, "srv.git", &["main"]));
        if r == Receiver::Berth {
            w.assert_clean("srv.git");
            let pack_dir = w.path("srv.git/objects/pack");
            for e in std::fs::read_dir(&pack_dir).unwrap() {
                let p = e.unwrap().path();
                if p.extension().is_some_and(|x| x == "idx") {
                    let out = w.git_out("srv.git", &["verify-pack", p.to_str().unwrap()]);
                    assert!(out.status.success(), "{out:?}");
                }
                if p.extension().is_some_and(|x| x == "rev") {
                    let copy = w.path("copy.pack");
                    std::fs::copy(p.with_extension("pack"), &copy).unwrap();
                    // Outside a repository, index-pack needs the pack's object format.
                    let format = format!("--object-format={}", common::object_format_cap());
                    w.git(".", &["index-pack", &format, "--rev-index", "copy.pack"]);
                    assert_eq!(
                        std::fs::read(w.path("copy.rev")).unwrap(),
                        std::fs::read(&p).unwrap(),
                        "{}",
                        p.display()
                    );
                    for f in ["copy.pack", "copy.idx", "copy.rev"] {
                        std::fs::remove_file(w.path(f)).unwrap();
                    }
                }
            }
        }
        // The names of the thin packs differ (each side completes the pack its own way).
        files(&w, "srv.git/objects/pack")
            .into_iter()
            .map(|l| {
                let (mode, name) = l.split_once(' ').unwrap();
                let ext = name.rsplit('.').next().unwrap();
                format!("{mode} {ext}")
            })
            .collect::<Vec<_>>()
    };
    let default = common::differential(|r| run(r, &[]));
    assert!(default.iter().any(|l| l.ends_with(" rev")), "{default:?}");
    assert!(default.iter().all(|l| !l.starts_with("600")), "{default:?}");
    let group = common::differential(|r| run(r, &[("core.sharedRepository", "group")]));
    assert!(group.iter().all(|l| l.starts_with("44")), "{group:?}");
    let exact = common::differential(|r| run(r, &[("core.sharedRepository", "0640")]));
    assert!(exact.iter().all(|l| l.starts_with("440 ")), "{exact:?}");
    let no_rev = common::differential(|r| run(r, &[("pack.writeReverseIndex", "false")]));
    assert!(no_rev.iter().all(|l| !l.ends_with(" rev")), "{no_rev:?}");
}

/// `core.sharedRepository` as git applies it to what a push writes: loose objects, the
/// directories they go to, and kept packs (mode of every path under `objects/`).
#[test]
fn shared_repository_modes_of_what_a_push_writes() {
    use std::os::unix::fs::PermissionsExt;
    fn modes(root: &std::path::Path, dir: &std::path::Path, out: &mut Vec<String>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        entries.sort();
        for p in entries {
            let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o7777;
            let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            // Pack names differ where each side completes a thin pack its own way.
            let rel = match rel.strip_prefix("pack/pack-") {
                Some(name) => format!("pack/{}", name.rsplit('.').next().unwrap()),
                None => rel,
            };
            out.push(format!("{mode:o} {rel}"));
            if p.is_dir() {
                modes(root, &p, out);
            }
        }
    }
    for shared in ["group", "all", "0640", "umask"] {
        let run = |r: Receiver| {
            let w = World::new();
            w.bare("srv.git");
            w.git("srv.git", &["config", "core.sharedRepository", shared]);
            w.work("src");
            w.commit("src", "a", "1");
            ok(&w.push("src", r, "srv.git", &["main"]));
            // The next push is kept as a pack.
            w.git("srv.git", &["config", "receive.unpackLimit", "1"]);
            w.commit("src", "b", "2");
            ok(&w.push("src", r, "srv.git", &["main"]));
            if r == Receiver::Berth {
                w.assert_clean("srv.git");
            }
            let root = w.path("srv.git/objects");
            let mut out = Vec::new();
            modes(&root, &root, &mut out);
            out
        };
        let berth = common::differential(run);
        if shared == "group" {
            assert!(berth.iter().any(|l| l.starts_with("2775 ")), "{berth:?}");
        }
    }
}

/// Like git, a push of fewer than `receive.unpackLimit` objects becomes loose objects and a
/// larger one is kept as one pack.
#[test]
fn small_pushes_become_loose_objects_large_ones_stay_packed() {
    fn storage(w: &World) -> (usize, usize) {
        let out = w.git("srv.git", &["count-objects", "-v"]);
        let field = |k: &str| {
            out.lines()
                .find_map(|l| l.strip_prefix(k))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(usize::MAX)
        };
        (field("count:"), field("packs:"))
    }
    let run = |r: Receiver| {
        let w = World::new();
        w.bare("srv.git");
        w.work("src");
        w.commit("src", "a", "1");
        w.commit("src", "b", "2");
        ok(&w.push("src", r, "srv.git", &["main"]));
        let small = storage(&w);
        for i in 0..40 {
            w.commit("src", &format!("f{i}"), &format!("{i}"));
        }
        ok(&w.push("src", r, "srv.git", &["main"]));
        let large = storage(&w);
        w.git("srv.git", &["config", "receive.unpackLimit", "1"]);
        w.commit("src", "c", "3");
        ok(&w.push("src", r, "srv.git", &["main"]));
        if r == Receiver::Berth {
            w.assert_clean("srv.git");
        }
        (small, large, storage(&w))
    };
    let berth = run(Receiver::Berth);
    assert_eq!(run(Receiver::Git), berth);
    assert_eq!(berth.0, (6, 0));
    assert_eq!(berth.1.1, 1);
    assert_eq!(berth.2.1, 2);
}

/// Loose objects are compressed at `core.looseCompression` (else `core.compression`, else 1), as
/// git's unpack-objects writes them: the zlib header's level bits of every object a push
/// wrote, against git's; a level out of zlib's range ends the push with git's `fatal:` line.
#[test]
fn loose_objects_are_compressed_at_core_loose_compression() {
    /// The zlib header's level bits (FLEVEL, the second byte's top two) of each loose object in
    /// `srv.git`, by id. The rest of that byte is a check over the first, which names the
    /// window: berth's is the smallest that holds the object, git's always 32 KiB.
    fn levels(w: &World) -> Vec<(String, u8)> {
        loose_objects(w, "srv.git")
            .into_iter()
            .map(|(id, bytes)| (id, bytes[1] >> 6))
            .collect()
    }
    let run = |r: Receiver| {
        let mut seen = Vec::new();
        for config in [
            vec![],
            vec![("core.compression", "9")],
            vec![("core.compression", "9"), ("core.looseCompression", "0")],
            vec![("core.looseCompression", "-1")],
        ] {
            let w = World::new();
            w.bare("srv.git");
            for (k, v) in &config {
                w.git("srv.git", &["config", k, v]);
            }
            w.work("src");
            w.commit("src", "a", &"text that compresses well ".repeat(40));
            ok(&w.push("src", r, "srv.git", &["main"]));
            if r == Receiver::Berth {
                w.assert_clean("srv.git");
            }
            seen.push(levels(&w));
        }
        let w = World::new();
        w.bare("srv.git");
        w.git("srv.git", &["config", "core.compression", "10"]);
        w.work("src");
        w.commit("src", "a", "1");
        let refused = w.push("src", r, "srv.git", &["main"]);
        (
            seen,
            refused.success,
            refused
                .stderr
                .contains("fatal: bad zlib compression level 10"),
        )
    };
    let berth = run(Receiver::Berth);
    assert_eq!(run(Receiver::Git), berth);
    // zlib's level bits: 0 for levels 0 and 1 (git's second byte 0x01), 2 for 6 (0x9c), 3
    // for 9 (0xda).
    let flags: Vec<u8> = berth.0.iter().map(|objects| objects[0].1).collect();
    assert_eq!(flags, [0, 3, 0, 2]);
    assert!(berth.0.iter().all(|objects| objects.len() == 3));
    assert_eq!((berth.1, berth.2), (false, true));
}

#[test]
fn update_instead_updates_the_checked_out_worktree_or_refuses() {
    let o = differential(|w, r| {
        w.work("srv.git"); // non-bare, main checked out
        w.commit("srv.git", "a", "1");
        w.git(
            "srv.git",
            &["config", "receive.denyCurrentBranch", "updateInstead"],
        );
        w.git(".", &["clone", "-q", "srv.git", "src"]);
        w.commit("src", "a", "2");
        let mut p = vec![w.push("src", r, "srv.git", &["main"])];
        let deployed = std::fs::read_to_string(w.path("srv.git/a")).unwrap();
        assert_eq!(deployed, "2", "{r:?} did not update the worktree");
        std::fs::write(w.path("srv.git/a"), "dirty").unwrap();
        w.commit("src", "a", "3");
        p.push(w.push("src", r, "srv.git", &["main"]));
        p
    });
    assert!(
        o.pushes[1]
            .stdout
            .contains("[remote rejected] (Working directory has unstaged changes)"),
        "{:#?}",
        o.pushes[1]
    );
}

#[test]
fn push_to_checkout_hook_decides_for_update_instead() {
    let o = differential(|w, r| {
        w.work("srv.git");
        w.commit("srv.git", "a", "1");
        w.git(
            "srv.git",
            &["config", "receive.denyCurrentBranch", "updateInstead"],
        );
        let hook = w.path("srv.git/.git/hooks/push-to-checkout");
        std::fs::write(&hook, "#!/bin/sh\necho \"to $1 in $(basename \"$GIT_WORK_TREE\")\" >&2\ngit read-tree -u -m HEAD \"$1\"\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
        w.git(".", &["clone", "-q", "srv.git", "src"]);
        w.commit("src", "a", "2");
        let p = vec![w.push("src", r, "srv.git", &["main"])];
        assert_eq!(std::fs::read_to_string(w.path("srv.git/a")).unwrap(), "2");
        p
    });
    assert!(o.pushes[0].success);
    assert!(
        o.pushes[0].stderr.contains("to ") && o.pushes[0].stderr.contains(" in srv.git"),
        "{:#?}",
        o.pushes[0]
    );
}

#[test]
fn symref_pushed_with_its_target() {
    let o = differential(|w, r| {
        w.bare("srv.git");
        w.work("src");
        w.commit("src", "a", "1");
        let mut p = vec![w.push("src", r, "srv.git", &["main"])];
        w.git(
            "srv.git",
            &["symbolic-ref", "refs/heads/alias", "refs/heads/main"],
        );
        w.commit("src", "a", "2");
        // Consistent: the alias is skipped, main moves.
        p.push(w.push("src", r, "srv.git", &["main", "main:refs/heads/alias"]));
        w.commit("src", "a", "3");
        w.git("src", &["branch", "-f", "other", "HEAD~2"]);
        // Inconsistent: both refused.
        p.push(w.push(
            "src",
            r,
            "srv.git",
            &["--force", "main", "other:refs/heads/alias"],
        ));
        // Alone: the alias updates what it points to.
        p.push(w.push("src", r, "srv.git", &["main:refs/heads/alias"]));
        p
    });
    assert!(o.pushes[1].success, "{:#?}", o.pushes[1]);
    assert!(
        o.pushes[2].stdout.contains("(inconsistent aliased update)"),
        "{:#?}",
        o.pushes[2]
    );
    assert!(
        o.pushes[2].stderr.contains(
            "remote: error: refusing inconsistent update between symref 'refs/heads/alias'"
        ),
        "{:#?}",
        o.pushes[2]
    );
    assert!(o.pushes[3].success, "{:#?}", o.pushes[3]);
}

/// A pushed name that is a symbolic ref whose chain never ends (a loop) is refused as git
/// refuses it, while the push's other refs land: one symbolic ref among many names.
#[test]
fn a_pushed_symref_in_a_loop_is_refused_as_broken() {
    let o = differential(|w, r| {
        w.bare("srv.git");
        w.work("src");
        w.commit("src", "a", "1");
        let mut p = vec![w.push("src", r, "srv.git", &["main"])];
        w.git("srv.git", &["symbolic-ref", "refs/heads/a", "refs/heads/b"]);
        w.git("srv.git", &["symbolic-ref", "refs/heads/b", "refs/heads/a"]);
        w.commit("src", "a", "2");
        p.push(w.push(
            "src",
            r,
            "srv.git",
            &["main", "main:refs/heads/a", "main:refs/heads/c"],
        ));
        // The loop goes, for fsck to look at what the push wrote.
        for symref in ["refs/heads/a", "refs/heads/b"] {
            w.git("srv.git", &["update-ref", "--no-deref", "-d", symref]);
        }
        p
    });
    let p = &o.pushes;
    assert!(
        p[1].stdout
            .contains("refs/heads/main:refs/heads/a\t[remote rejected] (broken symref)"),
        "{:#?}",
        p[1]
    );
    assert!(
        p[1].stderr
            .contains("remote: error: refusing update to broken symref 'refs/heads/a'"),
        "{:#?}",
        p[1]
    );
    assert!(
        p[1].stdout
            .contains("refs/heads/main:refs/heads/c\t[new branch]")
            && p[1].stdout.contains("\trefs/heads/main:refs/heads/main\t"),
        "main and c land: {:#?}",
        o
    );
}

#[test]
fn pushes_from_shallow_clones_need_receive_shallow_update() {
    let o = differential(|w, r| {
        w.bare("srv.git");
        w.work("full");
        for i in 0..3 {
            w.commit("full", "a", &i.to_string());
        }
        w.git("full", &["push", "-q", "../srv.git", "main"]);
        // A shallow clone of a repository the server knows nothing about.
        w.work("other");
        for i in 0..3 {
            w.commit("other", "b", &i.to_string());
        }
        let url = format!("file://{}", w.path("other").display());
        w.git(".", &["clone", "-q", "--depth=1", &url, "shallow"]);
        w.commit("shallow", "c", "new");
        let mut p = vec![w.push("shallow", r, "srv.git", &["main:refs/heads/from-shallow"])];
        w.git("srv.git", &["config", "receive.shallowUpdate", "true"]);
        p.push(w.push("shallow", r, "srv.git", &["main:refs/heads/from-shallow"]));
        let shallow_file = std::fs::read_to_string(w.path("srv.git/shallow")).unwrap_or_default();
        assert_eq!(shallow_file.lines().count(), 1, "{r:?}: {shallow_file:?}");
        p
    });
    assert!(
        o.pushes[0]
            .stdout
            .contains("[remote rejected] (shallow update not allowed)"),
        "{:#?}",
        o.pushes[0]
    );
    assert!(o.pushes[1].success, "{:#?}", o.pushes[1]);
}

/// A stale `<ref>.lock` (a crashed writer) fails that ref alone, with git's wording, as
/// git receive-pack does; the other refs of the push land.
#[test]
fn stale_ref_lock_fails_only_that_ref() {
    if common::reftable() {
        return;
    }
    let o = differential(|w, r| {
        w.bare("srv.git");
        w.work("src");
        w.commit("src", "a", "1");
        w.git("src", &["branch", "locked"]);
        let mut p = vec![w.push("src", r, "srv.git", &["main", "locked"])];
        std::fs::write(w.path("srv.git/refs/heads/locked.lock"), "").unwrap();
        w.commit("src", "a", "2");
        w.git("src", &["branch", "-f", "locked"]);
        let mut last = w.push("src", r, "srv.git", &["main", "locked"]);
        // git 2.47 names the lock through `./` and explains at length; the verdicts are the same.
        last.stderr = last
            .stderr
            .lines()
            .filter(|l| !l.starts_with("remote:"))
            .map(|l| format!("{l}\n"))
            .collect();
        p.push(last);
        std::fs::remove_file(w.path("srv.git/refs/heads/locked.lock")).unwrap();
        p
    });
    let p = &o.pushes[1];
    assert!(
        p.stdout.contains(" \trefs/heads/main:refs/heads/main\t"),
        "{p:#?}"
    );
    assert!(
        p.stdout.contains(
            "!\trefs/heads/locked:refs/heads/locked\t[remote rejected] (failed to update ref)"
        ),
        "{p:#?}"
    );
}

/// A server with `packed` and `delpacked` only in `packed-refs`, `loose` and `delloose` only as
/// loose files, `both` in both, all at the client's first commit, and a stale
/// `packed-refs.lock` (a crashed `git pack-refs`); the client is one commit ahead.
fn server_with_stale_packed_refs_lock(w: &World) {
    w.bare("srv.git");
    w.work("src");
    w.commit("src", "a", "1");
    let packed = ["main:refs/heads/packed", "main:refs/heads/delpacked"];
    w.git(
        "src",
        &[
            &["push", "-q", "../srv.git", "main:refs/heads/both"][..],
            &packed,
        ]
        .concat(),
    );
    w.git("srv.git", &["pack-refs", "--all"]);
    w.git(
        "src",
        &[
            "push",
            "-q",
            "../srv.git",
            "main:refs/heads/loose",
            "main:refs/heads/delloose",
        ],
    );
    w.git(
        "srv.git",
        &["update-ref", "refs/heads/both", "refs/heads/loose"],
    );
    std::fs::write(w.path("srv.git/packed-refs.lock"), "").unwrap();
    w.commit("src", "a", "2");
}

/// The client's view of a push without git's explanation of a lock: git 2.47 explains at
/// length, git master (and berth) in one line; the first line is the same.
fn without_lock_explanation(mut p: Push) -> Push {
    p.stderr = p
        .stderr
        .lines()
        .filter(|l| !l.starts_with("remote:") || l.starts_with("remote: error:"))
        .map(|l| format!("{l}\n"))
        .collect();
    p
}

const PACKED_REFS_LOCKED: &str =
    "remote: error: Unable to create '$ROOT/srv.git/./packed-refs.lock': File exists.\n";

/// With `packed-refs.lock` held, git takes it only to delete refs: creations and updates of
/// loose and packed refs land, each deletion fails with git's lock message (once per
/// deletion, as git 2.47's one transaction per ref), and once the lock is gone they succeed.
#[test]
fn stale_packed_refs_lock_fails_only_deletions() {
    if common::reftable() {
        return; // packed-refs is the files backend's
    }
    let o = differential(|w, r| {
        server_with_stale_packed_refs_lock(w);
        let mut p = vec![without_lock_explanation(w.push(
            "src",
            r,
            "srv.git",
            &[
                "main:refs/heads/new",
                "main:refs/heads/loose",
                "main:refs/heads/packed",
                "main:refs/heads/both",
                ":refs/heads/delloose",
                ":refs/heads/delpacked",
            ],
        ))];
        std::fs::remove_file(w.path("srv.git/packed-refs.lock")).unwrap();
        p.push(w.push(
            "src",
            r,
            "srv.git",
            &[":refs/heads/delloose", ":refs/heads/delpacked"],
        ));
        p
    });
    let p = &o.pushes[0];
    assert!(!p.success, "{p:#?}");
    for name in ["loose", "packed", "both"] {
        assert!(
            p.stdout
                .contains(&format!(" \trefs/heads/main:refs/heads/{name}\t")),
            "{name}: {p:#?}"
        );
    }
    assert!(
        p.stdout
            .contains("*\trefs/heads/main:refs/heads/new\t[new branch]"),
        "{p:#?}"
    );
    for name in ["delloose", "delpacked"] {
        assert!(
            p.stdout.contains(&format!(
                "!\t:refs/heads/{name}\t[remote rejected] (failed to update ref)"
            )),
            "{name}: {p:#?}"
        );
    }
    assert_eq!(
        p.remote_lines(),
        [PACKED_REFS_LOCKED.trim_end(); 2],
        "{p:#?}"
    );
    assert!(ok(&o.pushes[1]).stdout.contains("[deleted]"));
    let heads: Vec<&str> = o
        .refs
        .lines()
        .map(|l| &l[l.rfind('/').unwrap() + 1..])
        .collect();
    assert_eq!(heads, ["both", "loose", "new", "packed"], "{}", o.refs);
    let tips: std::collections::BTreeSet<&str> = o.refs.lines().map(|l| &l[..40]).collect();
    assert_eq!(tips.len(), 1, "every ref at the pushed commit: {}", o.refs);
}

/// An atomic push under a stale `packed-refs.lock`: without deletions it lands whole; with one
/// it fails whole, with git's lock message once.
#[test]
fn stale_packed_refs_lock_fails_an_atomic_push_only_if_it_deletes() {
    if common::reftable() {
        return; // packed-refs is the files backend's
    }
    let o = differential(|w, r| {
        server_with_stale_packed_refs_lock(w);
        let mut p = vec![without_lock_explanation(w.push(
            "src",
            r,
            "srv.git",
            &[
                "--atomic",
                "main:refs/heads/loose",
                "main:refs/heads/delpacked",
                ":refs/heads/delloose",
            ],
        ))];
        p.push(w.push(
            "src",
            r,
            "srv.git",
            &[
                "--atomic",
                "main:refs/heads/new",
                "main:refs/heads/loose",
                "main:refs/heads/packed",
            ],
        ));
        std::fs::remove_file(w.path("srv.git/packed-refs.lock")).unwrap();
        p
    });
    let p = &o.pushes[0];
    assert!(!p.success, "{p:#?}");
    assert_eq!(
        p.stdout
            .matches("[remote rejected] (atomic transaction failed)")
            .count(),
        3,
        "{p:#?}"
    );
    assert_eq!(p.remote_lines(), [PACKED_REFS_LOCKED.trim_end()], "{p:#?}");
    let p = ok(&o.pushes[1]);
    assert!(p.stdout.contains("[new branch]"), "{p:#?}");
    assert_eq!(o.refs.lines().count(), 6, "{}", o.refs);
}

/// A deletion waits for a `packed-refs.lock` held by a live writer (git's
/// `core.packedRefsTimeout`, one second) and goes through once it is released; an update of a
/// loose ref does not wait at all.
#[test]
fn deletion_waits_for_a_held_packed_refs_lock() {
    if common::reftable() {
        return; // packed-refs is the files backend's
    }
    let w = World::new();
    server_with_stale_packed_refs_lock(&w);
    let lock = w.path("srv.git/packed-refs.lock");
    let start = std::time::Instant::now();
    let p = w.push(
        "src",
        Receiver::Berth,
        "srv.git",
        &["main:refs/heads/loose"],
    );
    assert!(p.success, "{p:#?}");
    let released = std::thread::spawn({
        let lock = lock.clone();
        move || {
            std::thread::sleep(std::time::Duration::from_millis(300));
            std::fs::remove_file(lock).unwrap();
        }
    });
    let p = w.push(
        "src",
        Receiver::Berth,
        "srv.git",
        &[":refs/heads/delpacked", ":refs/heads/delloose"],
    );
    released.join().unwrap();
    assert!(p.success, "{p:#?}");
    assert!(start.elapsed() >= std::time::Duration::from_millis(300));
    let refs = w.refs("srv.git");
    assert!(!refs.contains("refs/heads/del"), "{refs}");
    let packed = std::fs::read_to_string(w.path("srv.git/packed-refs")).unwrap();
    assert!(!packed.contains("delpacked"), "{packed}");
    w.assert_clean("srv.git");
}

/// In a reftable repository a held `tables.list.lock` fails the whole transaction: git master
/// prints `cannot lock references` once and rejects every ref with "failed to update refs"
/// (git 2.47, one transaction per ref, says it once per ref). Nothing changes.
#[test]
fn held_stack_lock_fails_the_push_as_git_master_does() {
    let w = World::new();
    w.git(
        ".",
        &["init", "-q", "--bare", "--ref-format=reftable", "srv.git"],
    );
    w.work("src");
    w.commit("src", "a", "1");
    w.git("src", &["branch", "side"]);
    ok(&w.push("src", Receiver::Berth, "srv.git", &["main", "side"]));
    let before = w.refs("srv.git");
    w.commit("src", "a", "2");
    let lock = w.path("srv.git/reftable/tables.list.lock");
    std::fs::write(&lock, "").unwrap();
    let p = w.push(
        "src",
        Receiver::Berth,
        "srv.git",
        &["main", ":side", "main:new"],
    );
    std::fs::remove_file(&lock).unwrap();
    assert!(!p.success, "{p:#?}");
    assert_eq!(
        p.stderr
            .matches("remote: error: cannot lock references")
            .count(),
        1,
        "{p:#?}"
    );
    for name in ["main", "side", "new"] {
        assert!(
            p.stdout.contains(&format!(
                "refs/heads/{name}\t[remote rejected] (failed to update refs)"
            )),
            "{name}: {p:#?}"
        );
    }
    assert_eq!(w.refs("srv.git"), before);
    w.assert_clean("srv.git");
}

/// `receive.updateServerInfo`: after the push, `info/refs` lists the pushed refs as git's
/// `update-server-info` writes it, the same through both receivers.
#[test]
fn update_server_info_after_a_push() {
    let o = common::differential(|r| {
        let w = World::new();
        w.bare("srv.git");
        w.git("srv.git", &["config", "receive.updateServerInfo", "true"]);
        w.work("src");
        w.commit("src", "a", "1");
        let push = w.push("src", r, "srv.git", &["main"]);
        assert!(push.success, "{push:#?}");
        std::fs::read_to_string(w.path("srv.git").join("info/refs")).unwrap_or_default()
    });
    assert!(o.ends_with("\trefs/heads/main\n"), "{o:?}");
}

/// `berth.maxObjectSize` holds for a pack that is named while it arrives: a big push
/// (1,000 objects and more, into a repository without objects, is read as it comes) whose one
/// blob of 2 MiB is over a limit of 1 MiB is refused in berth's words, and nothing of it stays;
/// under a limit of 4 MiB it lands, and `git fsck --strict` accepts the repository.
/// The blob is small enough for the pack reader to keep what it inflates to, so it reached the
/// resolvers already inflated, where the limit was not checked (accepted before 2026-12-06's
/// review).
#[test]
fn an_object_over_berth_max_object_size_in_a_big_push_is_refused() {
    let w = World::new();
    w.bare("srv.git");
    w.git("srv.git", &["config", "berth.maxObjectSize", "1m"]);
    w.work("src");
    for i in 0..1_200 {
        let path = w.path("src").join(format!("d{}/f{i}", i % 10));
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, format!("file {i}\n")).unwrap();
    }
    std::fs::write(w.path("src").join("big"), vec![b'x'; 2 << 20]).unwrap();
    w.git("src", &["add", "-A"]);
    w.git("src", &["commit", "-q", "-m", "many files and a big one"]);
    let push = w.push("src", Receiver::Berth, "srv.git", &["main"]);
    assert!(!push.success, "{push:?}");
    assert!(
        push.stderr.contains(
            "fatal: object too large to inflate (more than 1048576 bytes, see berth.maxObjectSize)"
        ),
        "{}",
        push.stderr
    );
    assert_eq!(w.refs("srv.git"), "");
    w.assert_clean("srv.git");
    // Within the limit, the same push is named as it arrives and lands whole.
    w.git("srv.git", &["config", "berth.maxObjectSize", "4m"]);
    ok(&w.push("src", Receiver::Berth, "srv.git", &["main"]));
    assert_eq!(
        w.git("srv.git", &["rev-parse", "main"]),
        w.git("src", &["rev-parse", "main"])
    );
    w.assert_clean("srv.git");
}
