//! The many-ref path of the files backend (`src/refs/packed.rs`): one `packed-refs` rewrite, no
//! file per ref, git's format byte for byte, and safe against a concurrent `git update-ref`.

use crate::common;
use common::{EMPTY_PACK, Receiver, World, ZERO};

use std::io::Write;
use std::process::{Command, Stdio};

/// `n` refs `refs/heads/b/<i>` → `head` in `repo`, as loose refs made by git.
fn make_refs(w: &World, repo: &str, prefix: &str, n: usize, oid: &str) {
    let mut stdin = String::new();
    for i in 0..n {
        stdin.push_str(&format!("update {prefix}{i:05} {oid}\n"));
    }
    let out = w.git_with_stdin(repo, &["update-ref", "--stdin"], stdin.as_bytes());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn files_under(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            if e.file_type().unwrap().is_dir() {
                stack.push(e.path());
            } else {
                out.push(e.path());
            }
        }
    }
    out
}

#[test]
fn ten_thousand_new_refs_are_one_packed_refs_file_that_git_agrees_with() {
    if common::reftable() {
        return; // about packed-refs, the files backend's
    }
    let w = World::new();
    w.bare("srv.git");
    w.work("src");
    let head = w.commit("src", "a", "1");
    make_refs(&w, "src", "refs/heads/b/", 10_000, &head);
    let p = w.push(
        "src",
        Receiver::Berth,
        "srv.git",
        &["refs/heads/*:refs/heads/*"],
    );
    assert!(p.success, "{p:#?}");
    w.assert_clean("srv.git");
    let srv = w.path("srv.git");
    assert!(
        files_under(&srv.join("refs")).is_empty(),
        "{:?}",
        files_under(&srv.join("refs"))
    );
    let packed = std::fs::read_to_string(srv.join("packed-refs")).unwrap();
    assert!(packed.starts_with("# pack-refs with: peeled fully-peeled sorted \n"));
    assert_eq!(packed.lines().count(), 10_002);
    let refs = w.refs("srv.git");
    assert_eq!(refs.lines().count(), 10_001);
    let names: Vec<String> = (0..10_000)
        .map(|i| format!("refs/heads/b/{i:05}"))
        .collect();
    let mut args = vec!["show-ref", "--verify"];
    args.extend(names.iter().map(String::as_str));
    let shown = w.git("srv.git", &args);
    assert_eq!(shown.lines().count(), 10_000);
    assert!(shown.lines().all(|l| l.starts_with(&head)));
}

/// A batch that updates refs that are loose and refs that are packed, creates some and (in an
/// atomic push, one batch) deletes some: the same outcome as git receive-pack.
#[test]
fn batch_over_loose_and_packed_refs_with_deletions_matches_git() {
    let scenario = |r: Receiver, atomic: bool| {
        let w = World::new();
        w.bare("srv.git");
        // Reflogs, so that each update's old value is written down: for a packed ref the batch
        // reads it again from `packed-refs` (src/refs/packed.rs, `Item::before`).
        w.git("srv.git", &["config", "core.logAllRefUpdates", "true"]);
        w.work("src");
        let one = w.commit("src", "a", "1");
        w.git("src", &["push", "-q", "../srv.git", "main"]);
        make_refs(&w, "srv.git", "refs/heads/p/", 120, &one);
        w.git("srv.git", &["pack-refs", "--all"]);
        make_refs(&w, "srv.git", "refs/heads/l/", 120, &one);
        let two = w.commit("src", "a", "2");
        w.git(
            "src",
            &["fetch", "-q", "../srv.git", "refs/heads/*:refs/remotes/s/*"],
        );
        let mut specs: Vec<String> = Vec::new();
        for i in 0..100 {
            specs.push(format!("{two}:refs/heads/p/{i:05}"));
            specs.push(format!("{two}:refs/heads/l/{i:05}"));
            specs.push(format!("{two}:refs/heads/n/{i:05}"));
        }
        for i in 100..120 {
            specs.push(format!(":refs/heads/p/{i:05}"));
            specs.push(format!(":refs/heads/l/{i:05}"));
        }
        let mut args: Vec<&str> = Vec::new();
        if atomic {
            args.push("--atomic");
        }
        args.extend(specs.iter().map(String::as_str));
        let push = w.push("src", r, "srv.git", &args);
        assert!(push.success, "{push:#?}");
        if r == Receiver::Berth {
            w.assert_clean("srv.git");
            let loose = files_under(&w.path("srv.git/refs/heads/l"));
            assert!(loose.is_empty(), "loose refs left: {loose:?}");
        }
        (push, w.refs("srv.git"), reflog_values(&w, "srv.git"))
    };
    for atomic in [false, true] {
        let git = scenario(Receiver::Git, atomic);
        let berth = scenario(Receiver::Berth, atomic);
        assert_eq!(
            git, berth,
            "atomic={atomic}: git (left) and berth (right) differ"
        );
        assert_eq!(berth.1.lines().count(), 1 + 100 * 3);
        if common::reftable() {
            continue;
        }
        // The 100 updated packed refs were logged with their packed value as the old one.
        let packed_updates = berth
            .2
            .iter()
            .filter(|l| l.starts_with("refs/heads/p/") && !l.contains(&format!(" {ZERO} ")))
            .count();
        assert_eq!(packed_updates, 100, "{:#?}", berth.2);
    }
}

/// A small push into a repository of thousands of packed refs (some of them peeled tags), whose
/// `packed-refs` berth searches where it is rather than reading every entry: each command is
/// judged against the packed value or the packed names around it (an update, a refused rewind,
/// a deletion, a new name between packed ones, names conflicting with a packed ref above and
/// below) exactly as git receive-pack judges it.
#[test]
fn a_small_push_among_thousands_of_packed_refs_is_judged_as_git_judges_it() {
    let scenario = |r: Receiver| {
        let w = World::new();
        w.bare("srv.git");
        w.work("src");
        let one = w.commit("src", "a", "1");
        w.git("src", &["tag", "-a", "-m", "t", "annotated"]);
        let tag = w.git("src", &["rev-parse", "annotated"]).trim().to_owned();
        let two = w.commit("src", "a", "2");
        w.git("src", &["push", "-q", "../srv.git", "main", "annotated"]);
        make_refs(&w, "srv.git", "refs/heads/p/", 3000, &one);
        make_refs(&w, "srv.git", "refs/heads/q/", 3000, &two);
        make_refs(&w, "srv.git", "refs/tags/t/", 1000, &tag);
        w.git("srv.git", &["pack-refs", "--all"]);
        let specs = [
            format!("{two}:refs/heads/p/00010"),
            format!("{one}:refs/heads/q/00020"),
            format!("{two}:refs/heads/p/00030/below"),
            format!("{two}:refs/heads/q"),
            ":refs/heads/p/00040".to_owned(),
            format!("{two}:refs/heads/p/00050-new"),
            format!("+{two}:refs/tags/t/00005"),
            format!("{two}:refs/heads/p/02999"),
        ];
        let args: Vec<&str> = specs.iter().map(String::as_str).collect();
        let push = w.push("src", r, "srv.git", &args);
        if r == Receiver::Berth {
            w.assert_clean("srv.git");
        }
        (push, w.refs("srv.git"))
    };
    let (mut git, berth) = (scenario(Receiver::Git), scenario(Receiver::Berth));
    // git master words a name conflict with a packed ref without 2.47's `cannot lock ref`
    // (`a_name_conflict_with_a_packed_ref_in_git_masters_words`), as berth does.
    git.0.stdout = git.0.stdout.replace(
        "[remote rejected] (failed to update ref)",
        "[remote rejected] (refname conflict)",
    );
    for name in ["refs/heads/p/00030/below", "refs/heads/q"] {
        git.0.stderr = git
            .0
            .stderr
            .replace(&format!("cannot lock ref '{name}': "), "");
    }
    assert_eq!(git.0, berth.0, "git (left) and berth (right) differ");
    let differ: Vec<_> = git
        .1
        .lines()
        .zip(berth.1.lines())
        .filter(|(g, b)| g != b)
        .collect();
    assert!(
        differ.is_empty() && git.1 == berth.1,
        "(git, berth): {differ:?}"
    );
    let verdicts = &berth.0.stdout;
    for (name, verdict) in [
        ("refs/heads/p/00010", "\t"),
        ("refs/heads/q/00020", "[rejected] (non-fast-forward)"),
        ("refs/heads/p/00030/below", "[remote rejected]"),
        ("refs/heads/q", "[remote rejected]"),
        ("refs/heads/p/00040", "[deleted]"),
        ("refs/heads/p/00050-new", "[new branch]"),
        ("refs/tags/t/00005", "(forced update)"),
        ("refs/heads/p/02999", "\t"),
    ] {
        assert!(
            verdicts
                .lines()
                .any(|l| l.contains(&format!(":{name}\t")) && l.contains(verdict)),
            "{name}: {verdict}\n{verdicts}"
        );
    }
    assert_eq!(
        berth.1.lines().count(),
        2 + 7000 - 1 + 1,
        "{}",
        berth.0.stdout
    );
}

/// Every reflog entry of `repo` as `<ref> <old> <new>` (the identity and time left out: they
/// differ between runs), sorted; with reftable, git's listing of them (which has no old values).
fn reflog_values(w: &World, repo: &str) -> Vec<String> {
    if common::reftable() {
        return w.reflogs(repo).lines().map(str::to_owned).collect();
    }
    let logs = w.path(repo).join("logs");
    let mut out = Vec::new();
    for f in files_under(&logs) {
        let name = f
            .strip_prefix(&logs)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        for line in std::fs::read_to_string(&f).unwrap().lines() {
            let mut fields = line.split(' ');
            let (old, new) = (fields.next().unwrap(), fields.next().unwrap());
            out.push(format!("{name} {old} {new}"));
        }
    }
    out.sort();
    out
}

/// A batch of 100 refs or more while `packed-refs.lock` is held (here stale) cannot be one
/// `packed-refs` rewrite; its creations and updates land as loose refs, as git writes them,
/// and in a non-atomic push only its deletions fail, each with git's lock message.
#[test]
fn batch_under_a_held_packed_refs_lock_lands_as_loose_refs_as_git() {
    if common::reftable() {
        return; // about packed-refs, the files backend's
    }
    let scenario = |r: Receiver| {
        let w = World::new();
        w.bare("srv.git");
        w.work("src");
        let one = w.commit("src", "a", "1");
        w.git("src", &["push", "-q", "../srv.git", "main"]);
        make_refs(&w, "srv.git", "refs/heads/p/", 60, &one);
        w.git("srv.git", &["pack-refs", "--all"]);
        std::fs::write(w.path("srv.git/packed-refs.lock"), "").unwrap();
        let two = w.commit("src", "a", "2");
        let mut specs: Vec<String> = Vec::new();
        for i in 0..50 {
            specs.push(format!("{two}:refs/heads/p/{i:05}"));
            specs.push(format!("{two}:refs/heads/n/{i:05}"));
        }
        for i in 50..52 {
            specs.push(format!(":refs/heads/p/{i:05}"));
        }
        let args: Vec<&str> = specs.iter().map(String::as_str).collect();
        let mut push = w.push("src", r, "srv.git", &args);
        // git 2.47 explains the lock at length, berth as git master in one line.
        push.stderr = push
            .stderr
            .lines()
            .filter(|l| !l.starts_with("remote:") || l.starts_with("remote: error:"))
            .map(|l| format!("{l}\n"))
            .collect();
        std::fs::remove_file(w.path("srv.git/packed-refs.lock")).unwrap();
        if r == Receiver::Berth {
            w.assert_clean("srv.git");
            assert_eq!(files_under(&w.path("srv.git/refs/heads/n")).len(), 50);
        }
        (push, w.refs("srv.git"))
    };
    let git = scenario(Receiver::Git);
    let berth = scenario(Receiver::Berth);
    assert_eq!(git, berth, "git (left) and berth (right) differ");
    let (push, refs) = berth;
    assert!(!push.success);
    assert_eq!(
        push.stdout
            .matches("[remote rejected] (failed to update ref)")
            .count(),
        2,
        "{push:#?}"
    );
    assert_eq!(
        push.remote_lines().len(),
        2,
        "one lock message per deletion: {push:#?}"
    );
    assert_eq!(refs.lines().count(), 1 + 60 + 50, "{refs}");
}

#[test]
fn annotated_tags_are_peeled_as_git_pack_refs_writes_them() {
    if common::reftable() {
        return; // about packed-refs, the files backend's
    }
    let w = World::new();
    w.work("src");
    let head = w.commit("src", "a", "1");
    let tree = w
        .git("src", &["rev-parse", "HEAD^{tree}"])
        .trim()
        .to_owned();
    let mut stdin = String::new();
    for i in 0..150 {
        let target = if i % 3 == 0 { &tree } else { &head };
        let kind = if i % 3 == 0 { "tree" } else { "commit" };
        let tag = format!(
            "object {target}\ntype {kind}\ntag t{i}\ntagger T <t@t> 1700000000 +0000\n\nt{i}\n"
        );
        let out = w.git_with_stdin(
            "src",
            &["hash-object", "-t", "tag", "-w", "--stdin"],
            tag.as_bytes(),
        );
        let oid = String::from_utf8(out.stdout).unwrap().trim().to_owned();
        stdin.push_str(&format!("update refs/tags/t{i:04} {oid}\n"));
        // A tag of a tag: peeled to the commit.
        if i % 10 == 1 {
            let tag2 = format!(
                "object {oid}\ntype tag\ntag u{i}\ntagger T <t@t> 1700000000 +0000\n\nu{i}\n"
            );
            let out = w.git_with_stdin(
                "src",
                &["hash-object", "-t", "tag", "-w", "--stdin"],
                tag2.as_bytes(),
            );
            let oid2 = String::from_utf8(out.stdout).unwrap().trim().to_owned();
            stdin.push_str(&format!("update refs/tags/u{i:04} {oid2}\n"));
        }
        stdin.push_str(&format!("update refs/tags/light{i:04} {head}\n"));
    }
    assert!(
        w.git_with_stdin("src", &["update-ref", "--stdin"], stdin.as_bytes())
            .status
            .success()
    );
    for (name, r) in [("git.git", Receiver::Git), ("berth.git", Receiver::Berth)] {
        w.bare(name);
        let p = w.push(
            "src",
            r,
            name,
            &["refs/heads/*:refs/heads/*", "refs/tags/*:refs/tags/*"],
        );
        assert!(p.success, "{p:#?}");
    }
    w.assert_clean("berth.git");
    w.git("git.git", &["pack-refs", "--all"]);
    let git = std::fs::read_to_string(w.path("git.git/packed-refs")).unwrap();
    let berth = std::fs::read_to_string(w.path("berth.git/packed-refs")).unwrap();
    // berth wrote the tags in one batch; main stays loose (git packs it too with --all).
    let without_main = |s: &str| -> String {
        s.lines()
            .filter(|l| !l.ends_with(" refs/heads/main"))
            .map(|l| format!("{l}\n"))
            .collect()
    };
    assert_eq!(without_main(&git), without_main(&berth));
    assert!(berth.contains("\n^"), "peeled lines present");
}

/// berth pushes 2,000 refs while `git update-ref` creates other refs, deletes packed ones and
/// races berth for one of its refs: nothing is lost and exactly one writer wins the contested
/// ref.
#[test]
fn concurrent_git_update_ref_loses_nothing_and_one_writer_wins() {
    for round in 0..3 {
        let w = World::new();
        w.bare("srv.git");
        w.work("src");
        let one = w.commit("src", "a", "1");
        let two = w.commit("src", "a", "2");
        w.git("src", &["push", "-q", "../srv.git", "main"]);
        make_refs(&w, "srv.git", "refs/heads/old/", 50, &one);
        w.git("srv.git", &["pack-refs", "--all"]);
        let n = 2_000;
        let contested = format!("refs/heads/b/{:07}", 1_000 + round);
        let mut input = Vec::new();
        for i in 0..n {
            let line = if i == 0 {
                format!(
                    "{ZERO} {one} refs/heads/b/{i:07}\0 report-status quiet object-format={}",
                    common::object_format_cap()
                )
            } else {
                format!("{ZERO} {one} refs/heads/b/{i:07}")
            };
            input.extend(format!("{:04x}{line}", line.len() + 4).into_bytes());
        }
        input.extend(b"0000");
        input.extend(EMPTY_PACK);
        let srv = w.path("srv.git");
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let racer = {
            let srv = srv.clone();
            let stop = stop.clone();
            let contested = contested.clone();
            let two = two.clone();
            std::thread::spawn(move || {
                let git = |args: &[&str]| {
                    Command::new("git")
                        .current_dir(&srv)
                        .env("GIT_CONFIG_NOSYSTEM", "1")
                        .env("GIT_CONFIG_GLOBAL", "/dev/null")
                        .args(args)
                        .output()
                        .unwrap()
                };
                let (mut created, mut deleted, mut won) = (Vec::new(), Vec::new(), false);
                let mut i = 0;
                loop {
                    let done = stop.load(std::sync::atomic::Ordering::SeqCst);
                    if !won
                        && git(&["update-ref", &contested, &two, &ZERO])
                            .status
                            .success()
                    {
                        won = true;
                    }
                    let name = format!("refs/heads/other/{i:05}");
                    if git(&["update-ref", &name, &two]).status.success() {
                        created.push(name);
                    }
                    if i < 50 {
                        let old = format!("refs/heads/old/{i:05}");
                        if git(&["update-ref", "-d", &old]).status.success() {
                            deleted.push(old);
                        }
                    }
                    i += 1;
                    if done {
                        return (created, deleted, won);
                    }
                }
            })
        };
        std::thread::sleep(std::time::Duration::from_millis(20 * round as u64));
        let mut child = w
            .cmd(common::berth(), "srv.git")
            .args(["receive-pack", "--stateless-rpc", "."])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(&input).unwrap();
        let out = child.wait_with_output().unwrap();
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
        let (created, deleted, git_won) = racer.join().unwrap();
        let report = String::from_utf8_lossy(&out.stdout);
        let berth_won = report.contains(&format!("ok {contested}\n"));
        assert!(
            berth_won != git_won,
            "exactly one winner for {contested}: berth {berth_won}, git {git_won}\n{report}"
        );
        let refs = w.refs("srv.git");
        let value = |name: &str| {
            refs.lines()
                .find(|l| l.ends_with(&format!(" {name}")))
                .map(|l| l[..common::object_format().len_in_hex()].to_owned())
        };
        let expected = if berth_won { &one } else { &two };
        assert_eq!(value(&contested).as_deref(), Some(expected.as_str()));
        for i in 0..n {
            let name = format!("refs/heads/b/{i:07}");
            if name != contested {
                assert!(report.contains(&format!("ok {name}\n")), "{name}: {report}");
                assert_eq!(value(&name).as_deref(), Some(one.as_str()), "{name}");
            }
        }
        for name in &created {
            assert_eq!(
                value(name).as_deref(),
                Some(two.as_str()),
                "git's {name} was lost"
            );
        }
        for name in &deleted {
            assert_eq!(value(name), None, "git's deletion of {name} was undone");
        }
        w.assert_clean("srv.git");
    }
}
