//! What a push's client is told, and what is left, when the cluster does not simply say `ok`
//! (issue #23, item 7): each refusal reads `cluster: <outcome>: <why>` in `git push
//! --porcelain`'s line (`not applied`, `landed`, `may have landed`), a ref held by a push being
//! decided says so without server paths, a refused first push leaves no copy anywhere, and a
//! push whose POST reaches a replica behind the log that lacks what the push builds on says so
//! (or lands once that replica caught up) instead of git's `unpacker error`.

use std::time::{Duration, Instant};

use crate::cluster::{Cluster, porcelain, push, wait_for};
use crate::cluster_fixture::{cluster, cluster_world};
use crate::cluster_stream::eventually;
use crate::common::World;

/// Make node `i`'s `repo` pause in its reference-transaction state `state` while
/// `<world>/pause-<state>` exists (it creates `<world>/paused-<state>` then; 120 s at most).
fn pause_at(c: &Cluster, w: &World, i: usize, repo: &str, state: &str) {
    pause_as(c, w, i, repo, state, state);
    std::fs::write(w.path(&format!("pause-{state}")), "").unwrap();
}

/// [`pause_at`] under the files `<world>/pause-<name>` and `<world>/paused-<name>` (not made).
fn pause_as(c: &Cluster, w: &World, i: usize, repo: &str, state: &str, name: &str) {
    let hook = c.nodes[i].dir(repo).join("hooks/reference-transaction");
    let at = w.root().display().to_string();
    std::fs::write(
        &hook,
        format!(
            "#!/bin/sh\ncat >/dev/null\nif [ \"$1\" = '{state}' ] && [ -e '{at}/pause-{name}' ]; then : > '{at}/paused-{name}'; i=0; while [ -e '{at}/pause-{name}' ] && [ $i -lt 1200 ]; do sleep 0.1; i=$((i+1)); done; fi\nexit 0\n"
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// The porcelain line of `refname` in `git push --porcelain`'s output.
fn told(out: &std::process::Output, refname: &str) -> String {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find(|l| l.contains(&format!(":{refname}\t")))
        .unwrap_or_default()
        .to_owned()
}

#[test]
fn a_refused_first_push_leaves_no_copy_and_a_later_push_creates_the_repository() {
    let Some(w) = cluster_world() else { return };
    // Every node's pre-receive (core.hooksPath) refuses while `<world>/refuse` exists.
    let hooks = w.path("hooks");
    std::fs::create_dir_all(&hooks).unwrap();
    let refuse = w.path("refuse");
    std::fs::write(
        hooks.join("pre-receive"),
        format!(
            "#!/bin/sh\ncat >/dev/null\nif [ -e '{}' ]; then echo 'refused by policy' >&2; exit 1; fi\nexit 0\n",
            refuse.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(
        hooks.join("pre-receive"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    let hooks_dir = hooks.display().to_string();
    let c = cluster(&w)
        .env("GIT_CONFIG_COUNT", "1")
        .env("GIT_CONFIG_KEY_0", "core.hooksPath")
        .env("GIT_CONFIG_VALUE_0", &hooks_dir)
        .start();
    let src = w.work("src");
    let first = w.commit(&src, "a", "one");
    std::fs::write(&refuse, "").unwrap();
    let out = push(
        &w,
        &src,
        &c.nodes[0].url("new.git"),
        &["HEAD:refs/heads/main"],
    );
    assert_eq!(
        porcelain(&out).get("refs/heads/main"),
        Some(&false),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("refused by policy"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The copies (the accepting node's, and the replicas' its pack was streamed to) go once
    // the push is over.
    let deadline = Instant::now() + Duration::from_secs(90);
    while c.nodes.iter().any(|n| n.dir("new.git").exists()) {
        assert!(
            Instant::now() < deadline,
            "copies left: {:?}\n{}",
            c.nodes
                .iter()
                .filter(|n| n.dir("new.git").exists())
                .map(|n| &n.name)
                .collect::<Vec<_>>(),
            c.logs()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // No node serves it: not there, as before the push.
    for n in &c.nodes {
        let listed = w.git_out(".", &["ls-remote", &n.url("new.git")]);
        assert!(
            !listed.status.success(),
            "ls-remote through {}: {}",
            n.name,
            String::from_utf8_lossy(&listed.stdout)
        );
    }
    // Allowed now: created on every replica (its placement was kept).
    std::fs::remove_file(&refuse).unwrap();
    c.must_push(
        &w,
        &src,
        1,
        "new.git",
        &["HEAD:refs/heads/main"],
        "the second push",
    );
    let refs = c.converged(&w, "new.git", 3);
    assert_eq!(refs.get("refs/heads/main"), Some(&first));
    c.assert_fsck(&w, "new.git");
}

#[test]
fn a_push_committed_but_applied_on_fewer_replicas_than_the_quorum_reads_as_landed() {
    let Some(w) = cluster_world() else { return };
    let (mut c, src) = cluster(&w).args(&["--ack", "all"]).with_repo("landed.git");
    // Paused on node 0 after the commit point and its own commit, before the replicas are
    // told: node 2 is killed then, so only two of the three apply it before the answer.
    pause_at(&c, &w, 0, "landed.git", "committed");
    let new = w.commit(&src, "a", "two");
    let url = c.nodes[0].url("landed.git");
    let out = std::thread::scope(|s| {
        let pushing = s.spawn(|| push(&w, &src, &url, &["HEAD:refs/heads/main"]));
        wait_for(&w.path("paused-committed"), &c);
        c.kill_node(2);
        let _ = std::fs::remove_file(w.path("pause-committed"));
        pushing.join().unwrap()
    });
    let line = told(&out, "refs/heads/main");
    assert!(
        line.contains(
            "[remote rejected] (cluster: landed: committed to the log as entry 2, but only 2 of 3 \
             replicas applied it; the others catch up)"
        ),
        "{line}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cluster: landed: committed to the log"),
        "{err}"
    );
    // It did land: node 2 catches up to it.
    c.start_node(&w, 2);
    let refs = c.converged(&w, "landed.git", 3);
    assert_eq!(refs.get("refs/heads/main"), Some(&new));
    c.assert_fsck(&w, "landed.git");
}

#[test]
fn a_push_to_a_ref_held_by_a_push_being_decided_is_told_so_without_server_paths() {
    let Some(w) = cluster_world() else { return };
    let (c, src) = cluster(&w).with_repo("held.git");
    let other = w.work("other");
    w.git(
        &other,
        &["fetch", "-q", &c.nodes[1].url("held.git"), "main"],
    );
    w.git(&other, &["reset", "-q", "--hard", "FETCH_HEAD"]);
    // A's transaction on node 1 holds main's lock (prepared) while B pushes main there too.
    pause_at(&c, &w, 1, "held.git", "prepared");
    let a = w.commit(&src, "a", "from A");
    w.commit(&other, "b", "from B");
    let url = c.nodes[1].url("held.git");
    let (out_a, out_b) = std::thread::scope(|s| {
        let pushing = s.spawn(|| push(&w, &src, &url, &["HEAD:refs/heads/main"]));
        wait_for(&w.path("paused-prepared"), &c);
        // The hook pauses B's transaction too, if B gets that far: not paused again.
        let _ = std::fs::remove_file(w.path("paused-prepared"));
        let hook = c.nodes[1]
            .dir("held.git")
            .join("hooks/reference-transaction");
        let b = push(&w, &other, &url, &["HEAD:refs/heads/main"]);
        let _ = std::fs::remove_file(w.path("pause-prepared"));
        let _ = std::fs::remove_file(hook);
        (pushing.join().unwrap(), b)
    });
    let line = told(&out_b, "refs/heads/main");
    assert!(
        line.contains("[remote rejected] (cluster: ref is held by a push being decided; retry)"),
        "{line}\n{}\n{}",
        String::from_utf8_lossy(&out_b.stderr),
        c.logs()
    );
    for (what, text) in [
        ("stdout", String::from_utf8_lossy(&out_b.stdout)),
        ("stderr", String::from_utf8_lossy(&out_b.stderr)),
    ] {
        let root = c.nodes[1].root.display().to_string();
        assert!(
            !text.contains(&root) && !text.contains(".lock"),
            "B's {what} names a server path: {text}"
        );
    }
    assert_eq!(porcelain(&out_a).get("refs/heads/main"), Some(&true));
    let refs = c.converged(&w, "held.git", 3);
    assert_eq!(refs.get("refs/heads/main"), Some(&a));
}

/// `n` bytes of text that does not compress much (a small LCG over 64 characters).
fn noise(n: usize, seed: u64) -> String {
    let mut x = seed;
    (0..n)
        .map(|i| {
            if i % 80 == 79 {
                return '\n';
            }
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"[(x >> 58) as usize]
                as char
        })
        .collect()
}

#[test]
fn a_push_reaching_a_replica_behind_the_log_that_lacks_what_it_builds_on_reads_in_the_clusters_words()
 {
    let Some(w) = cluster_world() else { return };
    // Four nodes, three copies: one node holds none and forwards a push's POST to the
    // repository's first replica, which serves it without asking whether it is current (its
    // commit gate does; the unpack and connectivity checks come first).
    let mut c = cluster(&w).start();
    c.add_node(&w);
    let all = [0, 1, 2, 3];
    let src = w.work("src");
    w.commit(&src, "a", "one");
    c.must_push(
        &w,
        &src,
        0,
        "r.git",
        &["HEAD:refs/heads/main"],
        "the first push",
    );
    c.converged_among(&w, "r.git", 3, &all);
    let Some(order) = crate::cluster_reads::replicas_of(&c, "r") else {
        return;
    };
    let first = crate::cluster_reads::index(&c, &order[0]);
    let second = crate::cluster_reads::index(&c, &order[1]);
    let third = crate::cluster_reads::index(&c, &order[2]);
    let outsider = (0..4).find(|i| !order.contains(&c.nodes[*i].name)).unwrap();
    // The first replica takes no pack over 100 kB: it refuses the next entry's stream (the
    // others commit it) and cannot fetch its objects while catching up — behind the log, and
    // without the objects of entry 2.
    let config = c.nodes[first].dir("r.git").join("config");
    let config = config.to_str().unwrap();
    w.git(
        ".",
        &["config", "-f", config, "receive.maxInputSize", "100000"],
    );
    let big = noise(400_000, 7);
    let base = w.commit(&src, "big", &big);
    c.must_push(
        &w,
        &src,
        second,
        "r.git",
        &["HEAD:refs/heads/main"],
        "entry 2",
    );
    c.converged_among(&w, "r.git", 2, &[second, third]);
    let seq = |i: usize| {
        std::fs::read_to_string(c.nodes[i].dir("r.git").join("berth-cluster-seq"))
            .unwrap()
            .trim()
            .to_owned()
    };
    assert_eq!(seq(first), "1", "{}", c.logs());
    let behind = format!(
        "[remote rejected] (cluster: not applied: this replica ({}) is behind the repository's log \
         (at entry 1 of 2) and lacks objects the push builds on; nothing landed, retry)",
        c.nodes[first].name
    );
    let url = c.nodes[outsider].url("r.git");
    // The client's refs come from a current replica (the first refuses the forwarded read,
    // behind); its thin pack's delta base, the big file of entry 2, is not on the first.
    let mut edited = big.clone();
    edited.push_str("one more line\n");
    let tip = w.commit(&src, "big", &edited);
    let out = push(&w, &src, &url, &["HEAD:refs/heads/main"]);
    let line = told(&out, "refs/heads/main");
    assert!(
        line.contains(&behind),
        "{line}\n{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        c.logs()
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("error: cluster: not applied: this replica"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A new branch at entry 2's commit: no pack to complete, the connectivity check finds
    // the commit missing.
    let out = push(&w, &src, &url, &[&format!("{base}:refs/heads/other")]);
    let line = told(&out, "refs/heads/other");
    assert!(
        line.contains(&behind),
        "{line}\n{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        c.logs()
    );
    // Nothing landed anywhere.
    for i in [first, second, third] {
        let refs = w.ref_map(c.nodes[i].dir("r.git"));
        assert!(!refs.contains_key("refs/heads/other"), "{refs:?}");
        assert_ne!(refs.get("refs/heads/main"), Some(&tip), "{refs:?}");
    }
    // Once the first replica can catch up, the same branch lands: the push that lacks its
    // commit there waits for the catch-up it starts and is checked again (or, should the
    // replica's 5 s poll catch up first, finds it current).
    w.git(
        ".",
        &["config", "-f", config, "--unset", "receive.maxInputSize"],
    );
    let out = push(&w, &src, &url, &[&format!("{base}:refs/heads/other")]);
    assert_eq!(
        porcelain(&out).get("refs/heads/other"),
        Some(&true),
        "{}{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        c.logs()
    );
    let refs = c.converged_among(&w, "r.git", 3, &all);
    assert_eq!(refs.get("refs/heads/main"), Some(&base), "{refs:?}");
    assert_eq!(refs.get("refs/heads/other"), Some(&base), "{refs:?}");
    assert_eq!(seq(first), "3");
    c.assert_fsck(&w, "r.git");
    // Current again, it takes the push its thin pack was refused for.
    c.must_push(
        &w,
        &src,
        outsider,
        "r.git",
        &["HEAD:refs/heads/main"],
        "the retry",
    );
    let refs = c.converged_among(&w, "r.git", 3, &all);
    assert_eq!(refs.get("refs/heads/main"), Some(&tip));
    c.assert_fsck(&w, "r.git");
}

/// Two pushes of one branch through the two replicas of a repository, which both must prepare
/// (`--replicas 2`): the older push, paused in its reference-transaction `prepared` hook, holds
/// the branch's lock on its node while the younger, paused the same way, holds it on the other.
/// The older one's prepare then waits there for the younger to be decided (its turn,
/// `cluster/turns.rs`), and the younger, whose prepare meets the older holder, gives way: the
/// older lands. Without turns the older one's prepare was refused by the held lock, it was not
/// applied, and the younger landed instead; with both held at once through three nodes, all of
/// them could be refused.
#[test]
fn of_two_pushes_holding_one_ref_on_two_replicas_the_older_lands() {
    let Some(w) = cluster_world() else { return };
    let (c, _src) = cluster(&w).replicas(2).with_repo("demo.git");
    let holders: Vec<usize> = c
        .holders("demo.git")
        .iter()
        .map(|h| c.nodes.iter().position(|n| n.name == h.name).unwrap())
        .collect();
    assert_eq!(holders.len(), 2);
    for (&i, who) in holders.iter().zip(["older", "younger"]) {
        pause_as(&c, &w, i, "demo.git", "prepared", who);
    }
    let mut commits = Vec::new();
    for who in ["older", "younger"] {
        w.git(".", &["clone", "-q", &c.nodes[0].url("demo.git"), who]);
        commits.push(w.commit(who, "f", who));
        std::fs::write(w.path(&format!("pause-{who}")), "").unwrap();
    }
    let (older, younger) = std::thread::scope(|s| {
        let spawn = |who: &'static str, node: usize| {
            let (w, c) = (&w, &c);
            s.spawn(move || {
                push(
                    w,
                    who,
                    &c.nodes[node].url("demo.git"),
                    &["+HEAD:refs/heads/shared"],
                )
            })
        };
        // The older push holds the branch on its node; then the younger on the other.
        let older = spawn("older", holders[0]);
        wait_for(&w.path("paused-older"), &c);
        let younger = spawn("younger", holders[1]);
        wait_for(&w.path("paused-younger"), &c);
        // The older one asks the younger one's node to prepare: it waits there (or, without
        // turns, is refused).
        let _ = std::fs::remove_file(w.path("pause-older"));
        let there = &c.nodes[holders[1]];
        let met = eventually(Duration::from_secs(120), || {
            let log = there.log();
            log.contains("waiting for younger pushes") || log.contains("not prepared")
        });
        assert!(met, "no prepare met the lock:\n{}", c.logs());
        let _ = std::fs::remove_file(w.path("pause-younger"));
        (older.join().unwrap(), younger.join().unwrap())
    });
    let told = |o: &std::process::Output| porcelain(o).get("refs/heads/shared").copied();
    let said = format!(
        "older: {}\nyounger: {}",
        String::from_utf8_lossy(&older.stderr),
        String::from_utf8_lossy(&younger.stderr)
    );
    assert_eq!(told(&older), Some(true), "{said}\n{}", c.logs());
    assert_eq!(told(&younger), Some(false), "{said}");
    let refs = c.converged(&w, "demo.git", 2);
    assert_eq!(refs.get("refs/heads/shared"), Some(&commits[0]));
    c.assert_fsck(&w, "demo.git");
}
