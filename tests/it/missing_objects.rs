//! A hostile request: many `create` commands naming objects that do not exist, with the empty
//! pack. Each is refused as git refuses it (`missing necessary objects`), no ref is created, and
//! the object directories are not listed again for each command: under `strace -f -c`, the
//! directory-scanning syscalls of 2,000 and of 20,000 such commands are the same, and the stats
//! grow by what one lookup of a loose object costs, not by a rescan.
//!
//! And a kept pack (`receive.unpackLimit=1`) whose objects link to objects nobody has: the
//! connectivity check's pass over the pack cannot vouch for it, and the tips are then judged
//! one by one as git judges them; an unreachable broken object in an otherwise complete pack
//! refuses nothing; and a ref for each commit of a history missing its root blob is refused
//! as git refuses it, each object read once over all the tips.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Output;

use crate::common;
use common::{EMPTY_PACK, Receiver, World, ZERO, pkt};

/// An id of the tests' object format that no object has (`dead…` and the number).
fn missing(i: usize) -> String {
    let width = ZERO.len();
    format!("dead{i:0>w$x}", w = width - 4)
}

/// `n` creates of `refs/heads/b<i>` at missing objects, with capabilities `caps` and the pack
/// git sends when there are no objects to send.
fn request(n: usize, caps: &str) -> Vec<u8> {
    let mut input = Vec::with_capacity(n * 100);
    for i in 0..n {
        let line = format!("{ZERO} {} refs/heads/b{i}", missing(i));
        if i == 0 {
            input.extend(pkt(&format!("{line}\0{caps}")));
        } else {
            input.extend(pkt(&line));
        }
    }
    input.extend(b"0000");
    input.extend(EMPTY_PACK);
    input
}

/// A world with `srv.git` holding one pushed commit (its objects loose, its directories there).
fn world() -> World {
    let w = World::new();
    w.server_with_main();
    w
}

fn receive_pack(w: &World, receiver: Receiver, input: &[u8]) -> Output {
    let mut cmd = match receiver {
        Receiver::Git => w.git_cmd("."),
        Receiver::Berth => w.cmd(common::berth(), "."),
    };
    cmd.args(["receive-pack", "--stateless-rpc", "srv.git"]);
    w.git_with_stdin_cmd(cmd, input)
}

#[test]
fn creates_of_missing_objects_are_refused_as_git_refuses_them() {
    let caps = "report-status side-band-64k";
    let input = request(50, caps);
    let seen = common::differential(|r| {
        let w = world();
        let out = receive_pack(&w, r, &input);
        (
            out.status.success(),
            out.stdout,
            String::from_utf8_lossy(&out.stderr).into_owned(),
            w.refs("srv.git"),
        )
    });
    let (_, stdout, stderr, refs) = seen;
    let stdout = String::from_utf8_lossy(&stdout);
    for i in 0..50 {
        assert!(
            stdout.contains(&format!("ng refs/heads/b{i} missing necessary objects\n")),
            "{stdout}"
        );
        assert!(stderr.contains(&format!("fatal: bad object {}\n", missing(i))));
    }
    assert_eq!(refs.lines().count(), 1, "{refs}");
}

/// Syscall counts (`strace -f -c`) of berth receiving `n` creates of missing objects, after
/// checking that each was refused and no ref created.
fn syscalls(n: usize) -> BTreeMap<String, u64> {
    let w = world();
    let summary = w.path("summary");
    let mut cmd = w.cmd("strace", ".");
    cmd.args([
        "-f",
        "-c",
        "-e",
        "trace=openat,statx,newfstatat,getdents64",
        "-o",
    ])
    .arg(&summary)
    .arg(common::berth())
    .args(["receive-pack", "--stateless-rpc", "srv.git"]);
    let out = w.git_with_stdin_cmd(cmd, &request(n, "report-status"));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Without the sideband the report is plain pkt-lines.
    let report = String::from_utf8_lossy(&out.stdout);
    let refused = report.matches(" missing necessary objects\n").count();
    assert_eq!(refused, n, "{report}");
    assert!(report.contains(&format!("ng refs/heads/b{} missing", n - 1)));
    assert_eq!(w.refs("srv.git").lines().count(), 1);
    // `% time  seconds  usecs/call  calls  [errors]  syscall`
    std::fs::read_to_string(&summary)
        .unwrap()
        .lines()
        .filter_map(|l| {
            let fields: Vec<&str> = l.split_whitespace().collect();
            let calls = fields.get(3)?.parse().ok()?;
            Some((fields.last()?.to_string(), calls))
        })
        .collect()
}

#[test]
fn missing_objects_do_not_rescan_the_object_directories() {
    let (few, many) = (2_000, 20_000);
    let small = syscalls(few);
    let large = syscalls(many);
    let count = |m: &BTreeMap<String, u64>, names: &[&str]| -> u64 {
        names.iter().map(|n| m.get(*n).copied().unwrap_or(0)).sum()
    };
    // Listing a directory: opening it and reading its entries.
    let scans = |m| count(m, &["openat", "getdents64"]);
    assert!(
        scans(&large) < scans(&small) + 20,
        "directory scans grow with the commands: {small:?} for {few}, {large:?} for {many}"
    );
    // A missing object's lookup stats a loose path in the quarantine and the repository; a
    // rescan of the packs would stat every file of the pack directories too.
    let stats = |m| count(m, &["statx", "newfstatat"]);
    let per_command = (stats(&large).saturating_sub(stats(&small))) / (many - few) as u64;
    assert!(
        per_command <= 2,
        "{per_command} stats per missing object: {small:?} for {few}, {large:?} for {many}"
    );
}

#[test]
fn a_pushed_commit_is_found_after_a_miss_spent_the_refresh() {
    // The miss comes first (in the connectivity check); the decision for the pushed commit
    // happens after the quarantine's migration, with the push's refresh spent.
    let seen = common::differential(|r| {
        let w = world();
        let old = w.git("src", &["rev-parse", "main"]);
        let new = w.commit("src", "b", "2");
        let pack = w.pack(true, &format!("{new}\n^{}\n", old.trim()));
        let mut input = pkt(&format!(
            "{ZERO} {} refs/heads/gone\0report-status",
            missing(0)
        ));
        input.extend(pkt(&format!("{ZERO} {new} refs/heads/new")));
        input.extend(b"0000");
        input.extend(pack);
        let out = receive_pack(&w, r, &input);
        (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            w.refs("srv.git"),
        )
    });
    let (report, refs) = seen;
    assert!(report.contains("ng refs/heads/gone missing necessary objects"));
    assert!(report.contains("ok refs/heads/new"), "{report}");
    assert!(refs.contains("refs/heads/new"), "{refs}");
}

/// A world whose `srv.git` keeps every pack it receives, and in `src` a new commit on top of
/// `srv.git`'s and a tree naming a blob nobody has: `(old, new, broken tree)`.
fn kept_pack_world() -> (World, String, String, String) {
    let w = world();
    w.git("srv.git", &["config", "receive.unpackLimit", "1"]);
    let old = w.git("src", &["rev-parse", "main"]).trim().to_owned();
    let new = w.commit("src", "b", "2");
    let out = w.git_with_stdin(
        "src",
        &["mktree", "--missing"],
        format!("100644 blob {}\tgone\n", missing(7)).as_bytes(),
    );
    assert!(out.status.success(), "{out:?}");
    let broken = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    (w, old, new, broken)
}

/// Every object of `new` that `srv.git` lacks, and `extra`, one id per line.
fn objects_of(w: &World, old: &str, new: &str, extra: &[&str]) -> String {
    let list = w.git("src", &["rev-list", "--objects", new, &format!("^{old}")]);
    let mut ids: Vec<&str> = list.lines().map(|l| &l[..ZERO.len()]).collect();
    ids.extend_from_slice(extra);
    ids.join("\n") + "\n"
}

/// A commit `bad` of the `broken` tree on `old`, and a request creating `refs/heads/bad` at it
/// and `refs/heads/new` at `new`, with the pack of both (the broken tree's blob left out).
fn bad_beside_new(w: &World, old: &str, new: &str, broken: &str) -> (String, Vec<u8>) {
    let bad = w
        .git("src", &["commit-tree", "-p", old, "-m", "bad", broken])
        .trim()
        .to_owned();
    let pack = w.pack(false, &objects_of(w, old, new, &[&bad, broken]));
    let mut input = pkt(&format!("{ZERO} {bad} refs/heads/bad\0report-status"));
    input.extend(pkt(&format!("{ZERO} {new} refs/heads/new")));
    input.extend(b"0000");
    input.extend(pack);
    (bad, input)
}

#[test]
fn a_kept_pack_linking_to_a_missing_blob_is_refused_as_git_refuses_it() {
    let seen = common::differential(|r| {
        let (w, old, new, broken) = kept_pack_world();
        let (_, input) = bad_beside_new(&w, &old, &new, &broken);
        let out = receive_pack(&w, r, &input);
        (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
            w.refs("srv.git"),
        )
    });
    let (report, stderr, refs) = seen;
    assert!(
        report.contains("ng refs/heads/bad missing necessary objects"),
        "{report}"
    );
    assert!(report.contains("ok refs/heads/new"), "{report}");
    assert!(
        stderr.contains(&format!("missing blob object '{}'", missing(7))),
        "{stderr}"
    );
    assert!(
        refs.contains("refs/heads/new") && !refs.contains("refs/heads/bad"),
        "{refs}"
    );
}

#[test]
fn an_unreachable_broken_tree_in_a_kept_pack_refuses_nothing() {
    let seen = common::differential(|r| {
        let (w, old, new, broken) = kept_pack_world();
        let pack = w.pack(false, &objects_of(&w, &old, &new, &[&broken]));
        let mut input = pkt(&format!("{old} {new} refs/heads/main\0report-status"));
        input.extend(b"0000");
        input.extend(pack);
        let out = receive_pack(&w, r, &input);
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            w.refs("srv.git"),
        )
    });
    let (ok, report, refs) = seen;
    assert!(ok && report.contains("ok refs/heads/main"), "{report}");
    assert!(refs.contains("refs/heads/main"), "{refs}");
}

/// A real `git push` of a history large enough to be kept as a pack (more objects than
/// `receive.unpackLimit`'s 100): the connectivity check vouches for its tips with the links
/// the pack's indexing took (its debug line says so under `RUST_LOG`), decodes nothing again
/// and walks no tip, and the repository is one `git fsck --strict` accepts.
#[test]
fn a_pushed_history_is_vouched_for_by_the_links_its_indexing_took() {
    let w = world();
    for i in 0..60 {
        w.commit("src", &format!("d{}/f{i}", i % 3), &format!("{i}\n"));
    }
    let tip = w.git("src", &["rev-parse", "main"]).trim().to_owned();
    let rp = format!(
        "--receive-pack=env RUST_LOG=berth=debug {} receive-pack",
        common::berth().display()
    );
    let url = w.path("srv.git");
    let out = w.git_out(
        "src",
        &["push", "--porcelain", &rp, url.to_str().unwrap(), "main"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    // The links were taken as the pack was indexed: no object decoded a second time.
    assert!(
        stderr.contains("links vouch for its tips found_by=\"indexing\""),
        "the links were not taken while indexing:\n{stderr}"
    );
    assert!(
        !stderr.contains("pack_links"),
        "the pack was decoded again:\n{stderr}"
    );
    assert!(!stderr.contains("walking each tip"), "{stderr}");
    assert!(
        w.refs("srv.git")
            .contains(&format!("{tip} commit refs/heads/main"))
    );
    let packs = std::fs::read_dir(w.path("srv.git/objects/pack"))
        .unwrap()
        .count();
    assert!(packs > 0, "the push was not kept as a pack");
    w.assert_clean("srv.git");
}

/// A create for each commit of a chain of 100 on a root whose tree names a blob nobody has, and
/// the pack of them, kept: every ref is refused as git refuses it (the report and stderr are
/// git's), and berth reads each object once over all the tips (its debug log counts them); a
/// walk that forgot its failures read the chain again for every tip (over 5,000 reads).
#[test]
fn refs_into_one_history_missing_its_root_blob_are_refused_reading_each_object_once() {
    let chain = |w: &World, broken: &str| {
        let mut commits = vec![
            w.git("src", &["commit-tree", "-m", "root", broken])
                .trim()
                .to_owned(),
        ];
        for i in 0..100 {
            let parent = commits.last().unwrap().clone();
            let c = w.git(
                "src",
                &["commit-tree", "-p", &parent, "-m", &format!("c{i}"), broken],
            );
            commits.push(c.trim().to_owned());
        }
        commits
    };
    let request = |w: &World, commits: &[String], broken: &str| {
        let mut input = Vec::new();
        for (i, c) in commits.iter().enumerate() {
            let line = format!("{ZERO} {c} refs/heads/b{i}");
            input.extend(pkt(&if i == 0 {
                format!("{line}\0report-status")
            } else {
                line
            }));
        }
        input.extend(b"0000");
        input.extend(w.pack(false, &(commits.join("\n") + &format!("\n{broken}\n"))));
        input
    };
    let (report, stderr) = common::differential(|r| {
        let (w, _, _, broken) = kept_pack_world();
        let commits = chain(&w, &broken);
        let out = receive_pack(&w, r, &request(&w, &commits, &broken));
        assert!(
            w.git("srv.git", &["for-each-ref", "refs/heads/b*"])
                .is_empty()
        );
        (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    });
    assert_eq!(
        report.matches("missing necessary objects").count(),
        101,
        "{report}"
    );
    assert!(
        stderr.contains(&format!("missing blob object '{}'", missing(7))),
        "{stderr}"
    );

    let (w, _, _, broken) = kept_pack_world();
    let commits = chain(&w, &broken);
    let mut cmd = w.cmd(common::berth(), ".");
    cmd.env("RUST_LOG", "berth=debug")
        .args(["receive-pack", "--stateless-rpc", "srv.git"]);
    let out = w.git_with_stdin_cmd(cmd, &request(&w, &commits, &broken));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let read: u64 = stderr
        .split("objects_read=")
        .nth(1)
        .and_then(|s| s.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no objects_read in the debug log:\n{stderr}"));
    // The 101 commits and the broken tree.
    assert_eq!(read, 102, "{stderr}");
}

/// A broken commit that came in with a push whose other ref was accepted (so its pack was
/// kept) is not thereby complete: a later push of a ref at it, with no objects, is refused as
/// git refuses it (git's walk starts from the new tip, not from what the repository holds).
#[test]
fn a_broken_commit_left_by_an_earlier_push_is_still_refused() {
    broken_commit_left_behind(Kept::Pack);
}

/// [`a_broken_commit_left_by_an_earlier_push_is_still_refused`] with the push's objects
/// unpacked as loose objects (`receive.unpackLimit`'s default).
#[test]
fn a_broken_loose_commit_left_by_an_earlier_push_is_still_refused() {
    broken_commit_left_behind(Kept::Loose);
}

/// How the first push's objects are kept.
#[derive(Clone, Copy, PartialEq)]
enum Kept {
    Pack,
    Loose,
}

fn broken_commit_left_behind(kept: Kept) {
    let seen = common::differential(|r| {
        let (w, old, new, broken) = kept_pack_world();
        if kept == Kept::Loose {
            w.git("srv.git", &["config", "--unset", "receive.unpackLimit"]);
        }
        let (bad, input) = bad_beside_new(&w, &old, &new, &broken);
        push_then_ref_at(&w, r, &input, &bad)
    });
    assert_refused_later(seen, "refs/heads/new");
}

/// A new commit on a broken commit an earlier push left behind, pushed alone (the broken one
/// is only a link out of the pack, never a tip), is refused as git refuses it; the list is
/// looked through for what the pack links to, not only for the push's tips, so the check
/// walks through the broken commit in its first pass (not after finding it listed).
#[test]
fn a_commit_on_a_broken_commit_left_by_an_earlier_push_is_refused() {
    // The first push, then the request of the second.
    let setup = |r: Receiver, kept: Kept| {
        let (w, old, new, broken) = kept_pack_world();
        let (old, new, broken) = (&old, &new, &broken);
        if kept == Kept::Loose {
            w.git("srv.git", &["config", "--unset", "receive.unpackLimit"]);
        }
        let (bad, input) = bad_beside_new(&w, old, new, broken);
        let first = receive_pack(&w, r, &input);
        let tree = w.git("src", &["rev-parse", &format!("{old}^{{tree}}")]);
        let on_bad = w.git("src", &["commit-tree", "-p", &bad, "-m", "on", tree.trim()]);
        let on_bad = on_bad.trim();
        let mut again = pkt(&format!("{ZERO} {on_bad} refs/heads/again\0report-status"));
        again.extend(b"0000");
        again.extend(w.pack(false, &format!("{on_bad}\n")));
        (
            w,
            String::from_utf8_lossy(&first.stdout).into_owned(),
            again,
        )
    };
    for kept in [Kept::Pack, Kept::Loose] {
        let seen = common::differential(|r| {
            let (w, first, again) = setup(r, kept);
            let out = receive_pack(&w, r, &again);
            let report = String::from_utf8_lossy(&out.stdout).into_owned();
            (first, report, w.refs("srv.git"))
        });
        assert_refused_later(seen, "refs/heads/new");

        let (w, _, again) = setup(Receiver::Berth, kept);
        let out = berth_logging(&w, "berth=debug", &again);
        let report = String::from_utf8_lossy(&out.stdout);
        assert!(
            report.contains("ng refs/heads/again missing necessary objects"),
            "{report}"
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("checking again"), "{stderr}");
    }
}

/// `berth receive-pack --stateless-rpc srv.git` with `input`, logging as `rust_log` says.
fn berth_logging(w: &World, rust_log: &str, input: &[u8]) -> Output {
    let mut cmd = w.cmd(common::berth(), ".");
    cmd.env("RUST_LOG", rust_log)
        .args(["receive-pack", "--stateless-rpc", "srv.git"]);
    w.git_with_stdin_cmd(cmd, input)
}

/// `first` into `srv.git`, then a create of `refs/heads/again` at `commit` with no objects
/// and no shallow lines: the reports of both, and the refs after.
fn push_then_ref_at(
    w: &World,
    r: Receiver,
    first: &[u8],
    commit: &str,
) -> (String, String, String) {
    let first = receive_pack(w, r, first);
    let mut again = pkt(&format!("{ZERO} {commit} refs/heads/again\0report-status"));
    again.extend(b"0000");
    again.extend(EMPTY_PACK);
    let out = receive_pack(w, r, &again);
    (
        String::from_utf8_lossy(&first.stdout).into_owned(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        w.refs("srv.git"),
    )
}

/// The first push of [`push_then_ref_at`] took `ok_ref`; the later ref was refused as git
/// refuses it.
fn assert_refused_later((first, report, refs): (String, String, String), ok_ref: &str) {
    assert!(first.contains(&format!("ok {ok_ref}")), "{first}");
    assert!(
        report.contains("ng refs/heads/again missing necessary objects"),
        "{report}"
    );
    assert!(!refs.contains("refs/heads/again"), "{refs}");
}

/// A commit the client calls shallow, whose parent nobody has, sent beside a good update no
/// shallow commit is under (so no shallow root is recorded): a later push of a ref at it, with
/// no shallow lines and no objects, is refused as git refuses it.
#[test]
fn a_shallow_commit_left_by_an_earlier_push_without_its_root_is_still_refused() {
    let seen = common::differential(|r| {
        let (w, old, new, _) = kept_pack_world();
        let (cut, input) = cut_beside_main(&w, &old, &new);
        push_then_ref_at(&w, r, &input, &cut)
    });
    assert_refused_later(seen, "refs/heads/main");
}

/// A commit `cut` of `new`'s tree whose parent nobody has, and a request that calls it
/// shallow and updates `refs/heads/main` from `old` to `new` (not under it), with the pack of
/// both: `cut` needs a shallow root the update does not record.
fn cut_beside_main(w: &World, old: &str, new: &str) -> (String, Vec<u8>) {
    let tree = w.git("src", &["rev-parse", &format!("{new}^{{tree}}")]);
    let lost = missing(3);
    let body = format!(
        "tree {}\nparent {lost}\nauthor A <a@x> 0 +0000\ncommitter C <c@x> 0 +0000\n\ncut\n",
        tree.trim()
    );
    let out = w.git_with_stdin(
        "src",
        &[
            "hash-object",
            "-t",
            "commit",
            "-w",
            "--stdin",
            "--literally",
        ],
        body.as_bytes(),
    );
    assert!(out.status.success(), "{out:?}");
    let cut = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    let pack = w.pack(false, &objects_of(w, old, new, &[&cut]));
    let mut input = pkt(&format!("shallow {cut}"));
    input.extend(pkt(&format!("{old} {new} refs/heads/main\0report-status")));
    input.extend(b"0000");
    input.extend(pack);
    (cut, input)
}

/// Mark `objects`' list of incomplete objects as pruned a moment ago (its gate's time), so
/// that no push prunes it for a minute.
fn pruned_just_now(objects: &Path) {
    std::fs::create_dir_all(objects.join("info")).unwrap();
    std::fs::File::create(objects.join("info/berth-incomplete.gate"))
        .unwrap()
        .set_modified(std::time::SystemTime::now())
        .unwrap();
}

/// The list of incomplete objects of the repository whose objects are `objects`, made `room`
/// bytes short of its 16 MiB bound and marked pruned a moment ago ([`pruned_just_now`]): its
/// path.
fn list_with_room(objects: &Path, room: u64) -> std::path::PathBuf {
    let list = objects.join("info/berth-incomplete");
    pruned_just_now(objects);
    std::fs::File::create(&list)
        .unwrap()
        .set_len((16 << 20) - room)
        .unwrap();
    list
}

/// The list of incomplete objects is bounded: a push that would grow it past 16 MiB, when the
/// list was pruned less than a minute ago, is refused whole at its migration (git's `unable to
/// migrate objects to permanent storage`), nothing of it enters the repository and its
/// quarantine is removed; the operator's log says why. A push with nothing to list is not
/// affected.
#[test]
fn a_push_that_would_grow_the_incomplete_list_past_its_bound_is_refused_whole() {
    let (w, old, new, broken) = kept_pack_world();
    let list = list_with_room(&w.path("srv.git/objects"), 10);
    let (bad, input) = bad_beside_new(&w, &old, &new, &broken);
    let out = berth_logging(&w, "berth=error", &input);
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        report.contains("ng refs/heads/new unable to migrate objects to permanent storage"),
        "{report}"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("berth-incomplete would pass"), "{stderr}");
    assert_eq!(std::fs::metadata(&list).unwrap().len(), (16 << 20) - 10);
    assert!(!w.refs("srv.git").contains("refs/heads/new"));
    let objects: Vec<String> = std::fs::read_dir(w.path("srv.git/objects"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        !objects.iter().any(|n| n.starts_with("tmp_objdir")),
        "{objects:?}"
    );
    for id in [&new, &bad] {
        let out = w.git_out("srv.git", &["cat-file", "-e", id]);
        assert!(!out.status.success(), "{id} entered the repository");
    }

    // A push whose pack vouches for itself lists nothing and is taken.
    let mut input = pkt(&format!("{old} {new} refs/heads/main\0report-status"));
    input.extend(b"0000");
    input.extend(w.pack(true, &format!("{new}\n^{old}\n")));
    let out = receive_pack(&w, Receiver::Berth, &input);
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(report.contains("ok refs/heads/main"), "{report}");
}

/// A push whose commits need a shallow root is admitted only with room in the list for them
/// (and for every push's own file, each of which may settle into it): beside a full list it is
/// refused whole at its migration, as a push that lists objects is, and leaves no file of its
/// own. Before, it was taken, and its file, unable to settle into the full list, stayed and was
/// read by every later push: one more file with each such push.
#[test]
fn a_push_whose_shallow_commits_could_not_settle_into_a_full_list_is_refused_whole() {
    let (w, old, new, _) = kept_pack_world();
    let objects = w.path("srv.git/objects");
    let list = list_with_room(&objects, 10);
    let (cut, input) = cut_beside_main(&w, &old, &new);
    let out = receive_pack(&w, Receiver::Berth, &input);
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        report.contains("ng refs/heads/main unable to migrate objects to permanent storage"),
        "{report}"
    );
    assert_eq!(std::fs::metadata(&list).unwrap().len(), (16 << 20) - 10);
    let own_files = std::fs::read_dir(objects.join("info/berth-incomplete.d"))
        .map(|d| d.count())
        .unwrap_or(0);
    assert_eq!(own_files, 0);
    assert_eq!(w.git("srv.git", &["rev-parse", "main"]).trim(), old);
    let out = w.git_out("srv.git", &["cat-file", "-e", &cut]);
    assert!(!out.status.success(), "{cut} entered the repository");
}

/// The file a push left that died before settling it counts against the list's room; a push
/// that finds no room settles such files before it is refused (as a push that settles its own
/// does): one whose roots the repository has recorded since goes, and the push is taken.
/// Without that, the file held the room until a push was admitted to settle it: none was.
#[test]
fn a_push_that_finds_no_room_settles_the_files_dead_pushes_left_first() {
    let (w, old, new, broken) = kept_pack_world();
    let objects = w.path("srv.git/objects");
    let room = 150;
    let list = list_with_room(&objects, room);
    // Two commits that needed a shallow root, recorded by now: 131 bytes, with the push's
    // objects (82 bytes) more than the room.
    let root = missing(5);
    std::fs::write(w.path("srv.git/shallow"), format!("{root}\n")).unwrap();
    let dead = objects.join("info/berth-incomplete.d/tmp_objdir-incoming-dead");
    std::fs::create_dir_all(dead.parent().unwrap()).unwrap();
    std::fs::write(
        &dead,
        format!("{}\n{}\nshallow {root}\n", missing(8), missing(9)),
    )
    .unwrap();
    let (bad, input) = bad_beside_new(&w, &old, &new, &broken);
    let out = receive_pack(&w, Receiver::Berth, &input);
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(report.contains("ok refs/heads/new"), "{report}");
    assert!(!dead.exists());
    let listed = std::fs::metadata(&list).unwrap().len();
    assert_eq!(listed, (16 << 20) - room + 2 * (ZERO.len() as u64 + 1));
    let tail = std::fs::read_to_string(&list).unwrap();
    assert!(tail.ends_with(&format!("{bad}\n")) || tail.ends_with(&format!("{broken}\n")));
}

/// The same with the real client: a `git push` from a shallow clone (its commits need a new
/// shallow root, so the push needs room in the list for them) into a repository whose list is
/// full but for the file of a dead push. Where the dead push's root has been recorded since,
/// its file is settled first, to nothing, and the push is taken, its root recorded and nothing
/// left listed of it; where it has not, settling the file lists its commits for good, and the
/// room left is too little: the push is refused whole.
#[test]
fn a_shallow_git_push_that_finds_no_room_settles_a_dead_push_s_file_first() {
    for recorded in [true, false] {
        let w = World::new();
        // An earlier shallow push records a root; the dead push's file names its commits.
        let (earlier, root, tip) = shallow_clone_world(&w, 1);
        let push = w.push(
            &earlier,
            Receiver::Berth,
            "srv.git",
            &["main:refs/heads/b1"],
        );
        assert!(push.success, "{push:#?}");
        let (clone, new_root, new_tip) = shallow_clone_world(&w, 0);
        // Full, and marked pruned just before the push (a prune is due a minute later).
        let objects = w.path("srv.git/objects");
        let list = list_with_room(&objects, 150);
        let dead_root = if recorded { root.clone() } else { missing(5) };
        let dead = objects.join("info/berth-incomplete.d/tmp_objdir-incoming-dead");
        std::fs::create_dir_all(dead.parent().unwrap()).unwrap();
        std::fs::write(&dead, format!("{tip}\n{root}\nshallow {dead_root}\n")).unwrap();
        let push = w.push(&clone, Receiver::Berth, "srv.git", &["main:refs/heads/b0"]);
        if recorded {
            assert!(push.success, "{push:#?}");
            assert!(!dead.exists(), "the dead push's file was settled");
            assert_eq!(w.git("srv.git", &["rev-parse", "b0"]).trim(), new_tip);
            let shallow = std::fs::read_to_string(w.path("srv.git/shallow")).unwrap();
            assert!(
                shallow.contains(&new_root) && shallow.contains(&root),
                "{shallow}"
            );
            assert_eq!(std::fs::metadata(&list).unwrap().len(), (16 << 20) - 150);
            assert_eq!(listed(&w).1, Vec::<String>::new());
        } else {
            assert!(!push.success, "{push:#?}");
            assert!(
                push.stdout
                    .contains("unable to migrate objects to permanent storage"),
                "{push:#?}"
            );
            // Settled all the same, its commits listed for good (not known complete): 82
            // bytes of the 150, too few left for this push's.
            assert!(!dead.exists());
            assert_eq!(
                std::fs::metadata(&list).unwrap().len(),
                (16 << 20) - 150 + 2 * (ZERO.len() as u64 + 1)
            );
            let out = w.git_out("srv.git", &["rev-parse", "--verify", "-q", "b0"]);
            assert!(!out.status.success(), "b0 was created");
        }
    }
}

/// A full list is pruned before a push is refused for want of room: entries whose objects are
/// gone (pruned by `git gc`) leave it, the push is taken, and the list then holds what is
/// still incomplete (this push's broken commit and tree), so that a later ref at the broken
/// commit is still refused. A second push that finds the list full within the minute is
/// refused: a client cannot make every push prune it.
#[test]
fn a_full_list_of_incomplete_objects_is_pruned_before_a_push_is_refused_for_room() {
    let (w, old, new, broken) = kept_pack_world();
    let objects = w.path("srv.git/objects");
    let list = objects.join("info/berth-incomplete");
    std::fs::create_dir_all(objects.join("info")).unwrap();
    // About 16 MiB of entries whose objects are gone.
    let mut gone = Vec::with_capacity(16 << 20);
    for i in 0u32..((16 << 20) / 41) {
        gone.extend_from_slice(format!("{i:040x}\n").as_bytes());
    }
    std::fs::write(&list, &gone).unwrap();
    let (bad, input) = bad_beside_new(&w, &old, &new, &broken);
    let out = receive_pack(&w, Receiver::Berth, &input);
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(report.contains("ok refs/heads/new"), "{report}");
    assert!(
        report.contains("ng refs/heads/bad missing necessary objects"),
        "{report}"
    );
    let mut left: Vec<String> = std::fs::read_to_string(&list)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    left.sort();
    let mut want = vec![bad.clone(), broken.clone()];
    want.sort();
    assert_eq!(left, want);
    w.git("srv.git", &["fsck", "--strict", "--connectivity-only"]);

    // A ref at the broken commit, no objects: still refused.
    let mut input = pkt(&format!("{ZERO} {bad} refs/heads/again\0report-status"));
    input.extend(b"0000");
    input.extend(EMPTY_PACK);
    let out = receive_pack(&w, Receiver::Berth, &input);
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        report.contains("ng refs/heads/again missing necessary objects"),
        "{report}"
    );

    // Full again: not pruned again within the minute, the push is refused whole. The first
    // push's prune recorded when it started (the gate's time, the epoch until then); the gate
    // is set to now here so that the minute does not depend on how fast this machine is.
    let gate = objects.join("info/berth-incomplete.gate");
    let pruned_at = std::fs::metadata(&gate).unwrap().modified().unwrap();
    assert!(
        pruned_at > std::time::UNIX_EPOCH,
        "the prune recorded its start"
    );
    pruned_just_now(&objects);
    std::fs::write(&list, &gone).unwrap();
    let new2 = w.commit("src", "c", "3");
    let (_, input) = bad_beside_new(&w, &new, &new2, &broken);
    let out = receive_pack(&w, Receiver::Berth, &input);
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        report.contains("ng refs/heads/new unable to migrate objects to permanent storage"),
        "{report}"
    );
    assert_eq!(std::fs::read(&list).unwrap(), gone);
}

/// A list that cannot be read ends the push before anything moves in, with a `fatal:` line
/// naming the list (a directory in its place here), not a refusal that hides the cause.
#[test]
fn a_list_of_incomplete_objects_that_cannot_be_read_ends_the_push_and_changes_nothing() {
    let (w, old, new, _broken) = kept_pack_world();
    std::fs::create_dir_all(w.path("srv.git/objects/info/berth-incomplete")).unwrap();
    let mut input = pkt(&format!("{old} {new} refs/heads/main\0report-status"));
    input.extend(b"0000");
    input.extend(w.pack(true, &format!("{new}\n^{old}\n")));
    let out = receive_pack(&w, Receiver::Berth, &input);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("fatal: unable to read the list of incomplete objects: ")
            && stderr.contains("berth-incomplete"),
        "{stderr}"
    );
    assert!(!out.status.success());
    assert_eq!(
        w.git("srv.git", &["rev-parse", "refs/heads/main"]).trim(),
        old
    );
    let out = w.git_out("srv.git", &["cat-file", "-e", &new]);
    assert!(!out.status.success(), "{new} entered the repository");
    let left: Vec<String> = std::fs::read_dir(w.path("srv.git/objects"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("tmp_objdir"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// `berth serve` with no `RUST_LOG` logs why a push's objects could not be moved in (here the
/// list's bound): the client's report says only `unable to migrate objects to permanent
/// storage`, as git's does, so the operator's log is the one place the cause shows.
#[test]
fn berth_serve_logs_why_a_push_could_not_move_its_objects_in_by_default() {
    let (w, old, new, broken) = kept_pack_world();
    std::fs::create_dir_all(w.path("repos")).unwrap();
    std::fs::rename(w.path("srv.git"), w.path("repos/srv.git")).unwrap();
    list_with_room(&w.path("repos/srv.git/objects"), 10);
    let (_, input) = bad_beside_new(&w, &old, &new, &broken);
    let srv = crate::serve::Serve::start(&w, &[]);
    let r = crate::serve::http(
        &srv.addr,
        "POST",
        "/srv.git/git-receive-pack",
        &[("Content-Type", "application/x-git-receive-pack-request")],
        &input,
    );
    let report = String::from_utf8_lossy(&r.body);
    assert!(
        report.contains("ng refs/heads/new unable to migrate objects to permanent storage"),
        "{report}"
    );
    crate::serve::wait_log(&srv, "route=\"receive-pack\"");
    let log = srv.log();
    assert!(
        log.contains("ERROR") && log.contains("cannot move the push's objects into the repository"),
        "{log}"
    );
    assert!(log.contains("berth-incomplete would pass"), "{log}");
}

/// `srv.git` (empty, `receive.shallowUpdate`) and a shallow clone (`--depth=1`) of a history
/// of three commits it knows nothing about, with a new commit on top: the clone, its shallow
/// root and the new commit.
fn shallow_clone_world(w: &World, n: usize) -> (String, String, String) {
    if !w.path("srv.git").exists() {
        w.bare("srv.git");
        w.git("srv.git", &["config", "receive.shallowUpdate", "true"]);
    }
    let up = w.work(&format!("up{n}"));
    for i in 0..3 {
        w.commit(&up, "a", &format!("{n} {i}"));
    }
    let url = format!("file://{}", w.path(&up).display());
    let clone = format!("shallow{n}");
    w.git(".", &["clone", "-q", "--depth=1", &url, &clone]);
    let root = w.git(&clone, &["rev-parse", "HEAD"]).trim().to_owned();
    let tip = w.commit(&clone, "b", &format!("new {n}"));
    (clone, root, tip)
}

/// What `srv.git` lists as not known to be complete: the list's ids, and the names of the
/// pushes' own files (`objects/info/berth-incomplete.d`).
fn listed(w: &World) -> (Vec<String>, Vec<String>) {
    let list = std::fs::read_to_string(w.path("srv.git/objects/info/berth-incomplete"))
        .unwrap_or_default();
    let pending = std::fs::read_dir(w.path("srv.git/objects/info/berth-incomplete.d"))
        .map(|d| {
            d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    (list.lines().map(str::to_owned).collect(), pending)
}

/// A create of `refs/heads/again` at `commit`, with no objects and no shallow lines, into
/// `srv.git`: the report.
fn ref_at(w: &World, r: Receiver, commit: &str) -> String {
    let mut again = pkt(&format!("{ZERO} {commit} refs/heads/again\0report-status"));
    again.extend(b"0000");
    again.extend(EMPTY_PACK);
    String::from_utf8_lossy(&receive_pack(w, r, &again).stdout).into_owned()
}

/// Pushes from shallow clones whose new shallow roots are recorded (`receive.shallowUpdate`)
/// leave nothing listed as not known to be complete: their commits are complete once their
/// roots are the repository's. Before, every commit that needed a root was listed for good, so
/// a repository fed by shallow pushes grew its list ~41 bytes a commit until pushes were
/// refused at its bound. A ref at a recorded root, with no objects, is taken, as git takes it.
#[test]
fn shallow_pushes_whose_roots_are_recorded_leave_nothing_listed() {
    let seen = common::differential(|r| {
        let w = World::new();
        let mut seen = Vec::new();
        let mut roots = Vec::new();
        for n in 0..2 {
            let (clone, root, tip) = shallow_clone_world(&w, n);
            let push = w.push(&clone, r, "srv.git", &[&format!("main:refs/heads/b{n}")]);
            assert!(push.success, "{r:?}: {push:#?}");
            seen.push(w.git("srv.git", &["rev-parse", &format!("refs/heads/b{n}")]) == tip + "\n");
            roots.push(root);
        }
        // git writes its shallow file in no set order.
        let mut shallow: Vec<String> = std::fs::read_to_string(w.path("srv.git/shallow"))
            .unwrap()
            .lines()
            .map(str::to_owned)
            .collect();
        shallow.sort();
        roots.sort();
        assert_eq!(shallow, roots, "{r:?}");
        if r == Receiver::Berth {
            assert_eq!(listed(&w), (Vec::new(), Vec::new()));
            w.assert_clean("srv.git");
        }
        (seen, ref_at(&w, r, &roots[0]), w.refs("srv.git"))
    });
    assert_eq!(seen.0, vec![true, true]);
    assert!(seen.1.contains("ok refs/heads/again"), "{}", seen.1);
}

/// A shallow push whose ref the `update` hook declines: its objects stay in the repository (as
/// git's do) and its root is not recorded, so its commits are listed for good, and a later push
/// of a ref at its commit, with no objects, is refused as git refuses it. The same push again,
/// the hook gone, is taken and records the root, as git takes it: the shallow commit the
/// repository holds but does not know complete needs its root as if it were not there (before,
/// berth refused it: `missing necessary objects`).
#[test]
fn a_shallow_push_whose_root_is_not_recorded_stays_listed() {
    let seen = common::differential(|r| {
        let w = World::new();
        let (clone, root, tip) = shallow_clone_world(&w, 0);
        w.install_hook("srv.git", "update", "#!/bin/sh\necho no >&2\nexit 1\n");
        let push = w.push(&clone, r, "srv.git", &["main:refs/heads/b0"]);
        assert!(!w.path("srv.git/shallow").exists(), "{r:?}");
        if r == Receiver::Berth {
            let (list, pending) = listed(&w);
            assert!(list.contains(&root) && list.contains(&tip), "{list:?}");
            assert_eq!(pending, Vec::<String>::new());
        }
        let later = ref_at(&w, r, &tip);
        std::fs::remove_file(w.path("srv.git/hooks/update")).unwrap();
        let again = w.push(&clone, r, "srv.git", &["main:refs/heads/b0"]);
        let shallow = std::fs::read_to_string(w.path("srv.git/shallow")).unwrap_or_default();
        assert_eq!(shallow, format!("{root}\n"), "{r:?}: {again:#?}");
        (push, later, again.success, w.refs("srv.git"))
    });
    assert!(
        seen.0.stdout.contains("[remote rejected] (hook declined)"),
        "{:#?}",
        seen.0
    );
    assert!(
        seen.1
            .contains("ng refs/heads/again missing necessary objects"),
        "{}",
        seen.1
    );
    assert!(seen.2);
    assert!(seen.3.ends_with(" commit refs/heads/b0\n"), "{}", seen.3);
}

/// The same push with the list 10 bytes short of its bound (pruned a moment ago): the commits
/// its own file would list could not settle into the list once the hook declines, so it is
/// refused whole at its migration and leaves no file of its own. Before, it was taken, its file
/// could not settle and stayed, read by every later push: one more with each such push.
#[test]
fn a_shallow_push_with_no_room_to_settle_its_commits_is_refused_whole() {
    let w = World::new();
    let (clone, _root, tip) = shallow_clone_world(&w, 0);
    w.install_hook("srv.git", "update", "#!/bin/sh\necho no >&2\nexit 1\n");
    let objects = w.path("srv.git/objects");
    let list = list_with_room(&objects, 10);
    let push = w.push(&clone, Receiver::Berth, "srv.git", &["main:refs/heads/b0"]);
    assert!(
        push.stdout
            .contains("[remote rejected] (unable to migrate objects to permanent storage)"),
        "{push:#?}"
    );
    assert_eq!(listed(&w).1, Vec::<String>::new(), "{push:#?}");
    assert_eq!(std::fs::metadata(&list).unwrap().len(), (16 << 20) - 10);
    let out = w.git_out("srv.git", &["cat-file", "-e", &tip]);
    assert!(!out.status.success(), "{tip} entered the repository");
}

/// A shallow push killed after its objects moved in, before its root was recorded (its
/// `update` hook kills berth): the push's own list stays and is read, so a later push of a ref
/// at its commit, with no objects, is refused, not taken as complete on the strength of
/// objects that are present. A later shallow push settles its own file, then the killed
/// push's (nobody holds it locked): its root is recorded by then, so it is removed.
#[test]
fn a_shallow_push_killed_before_its_root_is_recorded_leaves_its_commits_listed() {
    let w = World::new();
    let (clone, root, tip) = shallow_clone_world(&w, 0);
    w.install_hook("srv.git", "update", "#!/bin/sh\nkill -9 $PPID\nsleep 5\n");
    let push = w.push(&clone, Receiver::Berth, "srv.git", &["main:refs/heads/b0"]);
    assert!(!push.success, "{push:#?}");
    let out = w.git_out("srv.git", &["cat-file", "-e", &tip]);
    assert!(
        out.status.success(),
        "the push's objects moved in: {push:#?}"
    );
    assert!(!w.path("srv.git/shallow").exists());
    let (list, pending) = listed(&w);
    assert_eq!((list, pending.len()), (Vec::new(), 1), "{push:#?}");
    let file = w.path(&format!(
        "srv.git/objects/info/berth-incomplete.d/{}",
        pending[0]
    ));
    let ids = std::fs::read_to_string(&file).unwrap();
    assert!(ids.contains(&root) && ids.contains(&tip), "{ids}");

    let report = ref_at(&w, Receiver::Berth, &tip);
    assert!(
        report.contains("ng refs/heads/again missing necessary objects"),
        "{report}"
    );
    assert_eq!(w.refs("srv.git"), "");

    // The same push again, with the hook gone: its root is recorded, its own file settled,
    // and the killed push's file with it.
    std::fs::remove_file(w.path("srv.git/hooks/update")).unwrap();
    let push = w.push(&clone, Receiver::Berth, "srv.git", &["main:refs/heads/b0"]);
    assert!(push.success, "{push:#?}");
    assert_eq!(
        std::fs::read_to_string(w.path("srv.git/shallow")).unwrap(),
        format!("{root}\n")
    );
    assert_eq!(listed(&w), (Vec::new(), Vec::new()));
    assert_eq!(w.fsck("srv.git"), Ok(()));
}
