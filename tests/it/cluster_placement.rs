//! K copies, always (issue #23): a repository placed short is filled up to `--replicas` when
//! a node comes back, `berth cluster drain` moves a node's repositories to the others before
//! taking it off their lists, and a node that joins later takes its rendezvous share, each
//! repository on exactly K nodes at the end, nothing acknowledged lost (`src/cluster/upkeep.rs`).

use crate::cluster::{Cluster, push};
use crate::cluster_fixture::{cluster, cluster_world};
use crate::common::{self, World};

use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant};

/// The replica list etcd records for `repo` (its cluster name), empty when none.
pub(crate) fn listed(c: &Cluster, repo: &str) -> Vec<String> {
    let v = c
        .etcd
        .value(&format!("/berth/repos/{repo}/replicas"))
        .expect("etcdctl (apt-get install etcd-client) reads the replica lists");
    if v.is_empty() {
        return Vec::new();
    }
    serde_json::from_str(&v).unwrap_or_else(|e| panic!("replica list {v:?}: {e}"))
}

/// The index of node `name`.
pub(crate) fn index(c: &Cluster, name: &str) -> usize {
    c.nodes.iter().position(|n| n.name == name).unwrap()
}

/// Wait (`what`, at most `limit`) until `done`.
fn wait_until(c: &Cluster, what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(
            start.elapsed() < limit,
            "{what}: not after {limit:?}\n{}",
            c.logs()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// A new commit on `main` of `src` pushed to `repo` through node `via` (then the next ones in
/// turn), tried until acknowledged (a push in flight while the replica list changes may be
/// refused, nothing landed, and is tried again); the commit.
fn push_new(w: &World, c: &Cluster, src: &str, via: &[usize], repo: &str, n: usize) -> String {
    let commit = w.commit(src, "a", &format!("push {n}"));
    let mut why = Vec::new();
    for attempt in 0..20 {
        let i = via[attempt % via.len()];
        let out = push(w, src, &c.nodes[i].url(repo), &["HEAD:refs/heads/main"]);
        if out.status.success() {
            return commit;
        }
        why.push(format!(
            "via {}: {}",
            c.nodes[i].name,
            String::from_utf8_lossy(&out.stderr)
        ));
        std::thread::sleep(Duration::from_millis(500));
    }
    panic!(
        "push {n} of {repo} never acknowledged: {why:#?}\n{}",
        c.logs()
    );
}

/// Wait until every node on `repo`'s list holds the same refs and applied entry as the others;
/// those refs. `repo` is the URL path (`x.git`).
pub(crate) fn listed_converged(w: &World, c: &Cluster, repo: &str) -> BTreeMap<String, String> {
    let name = repo.trim_end_matches(".git");
    let start = Instant::now();
    loop {
        let list = listed(c, name);
        let states: Vec<(BTreeMap<String, String>, String)> = list
            .iter()
            .map(|n| {
                let dir = c.nodes[index(c, n)].dir(repo);
                let seq =
                    std::fs::read_to_string(dir.join("berth-cluster-seq")).unwrap_or_default();
                (
                    if dir.join("HEAD").is_file() {
                        w.ref_map(&dir)
                    } else {
                        BTreeMap::new()
                    },
                    seq,
                )
            })
            .collect();
        if !states.is_empty() && states.windows(2).all(|p| p[0] == p[1]) {
            for n in &list {
                if let Err(e) = w.fsck(c.nodes[index(c, n)].dir(repo)) {
                    panic!("git fsck --strict of {repo} on {n}: {e}\n{}", c.logs());
                }
            }
            return states.into_iter().next().map(|s| s.0).unwrap_or_default();
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "{repo}'s listed replicas {list:?} did not converge: {states:#?}\n{}",
            c.logs()
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

#[test]
fn a_repository_placed_short_is_filled_up_to_k_when_the_node_comes_back() {
    let Some(w) = cluster_world() else { return };
    let mut c = cluster(&w).args(&["--ack", "majority"]).start();
    c.kill_node(2);
    wait_until(&c, "n2's lease expired", Duration::from_secs(120), || {
        c.etcd.keys("/berth/nodes/").is_some_and(|k| k.len() == 2)
    });
    // Placing reads the live nodes from etcd then, not as cached a second ago.
    let src = w.work("src");
    let mut n = 0;
    let mut last = push_new(&w, &c, &src, &[0, 1], "short.git", n);
    assert_eq!(
        listed(&c, "short").len(),
        2,
        "placed on the two live nodes: {:?}\n{}",
        c.etcd.keys("/berth/nodes/"),
        c.logs()
    );
    for _ in 0..3 {
        n += 1;
        last = push_new(&w, &c, &src, &[0, 1], "short.git", n);
    }
    // n2 comes back with its data directory: it copies the repository and joins its list,
    // while pushes go on.
    c.start_node(&w, 2);
    let start = Instant::now();
    while listed(&c, "short").len() < 3 {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "short was never filled up to 3: {:?}\n{}",
            listed(&c, "short"),
            c.logs()
        );
        n += 1;
        last = push_new(&w, &c, &src, &[n % 2, (n + 1) % 2], "short.git", n);
        std::thread::sleep(Duration::from_millis(300));
    }
    let list = listed(&c, "short");
    assert!(list.contains(&"n2".to_string()), "{list:?}");
    // Pushes through every node, the new replica's too.
    for via in [2, 0, 1] {
        n += 1;
        last = push_new(&w, &c, &src, &[via], "short.git", n);
    }
    let refs = listed_converged(&w, &c, "short.git");
    assert_eq!(refs.get("refs/heads/main"), Some(&last), "{refs:?}");
    assert!(c.nodes[2].dir("short.git").join("HEAD").is_file());
    assert_eq!(w.ref_map(c.nodes[2].dir("short.git")), refs);
    c.nodes[2].wait_log("joined the repository's replicas");
}

#[test]
fn a_drained_node_is_taken_off_every_list_after_its_repositories_are_copied_elsewhere() {
    let Some(w) = cluster_world() else { return };
    // Removed copies are deleted 3 s after their removal (10 minutes by default).
    let c = cluster(&w)
        .replicas(2)
        .args(&["--delete-removed-after", "3s"])
        .start();
    let repos = ["d0.git", "d1.git", "d2.git"];
    let mut srcs = Vec::new();
    let mut last = Vec::new();
    for repo in repos {
        let src = w.work(&format!("src-{repo}"));
        last.push(push_new(&w, &c, &src, &[0], repo, 0));
        srcs.push(src);
    }
    // The node to drain: d0's first replica; the pushes go through the other two.
    let drained = listed(&c, "d0")[0].clone();
    let others: Vec<usize> = (0..3).filter(|&i| c.nodes[i].name != drained).collect();
    // The repositories whose copies the drained node holds.
    let held: Vec<&str> = repos
        .iter()
        .copied()
        .filter(|r| listed(&c, r.trim_end_matches(".git")).contains(&drained))
        .collect();
    for r in &held {
        let d = index(&c, &drained);
        assert!(c.nodes[d].dir(r).join("HEAD").is_file(), "{drained}: {r}");
    }
    let urls = c.etcd.cluster_args();
    let (drain, pushed) = std::thread::scope(|s| {
        let pushing = s.spawn(|| {
            let mut acked = Vec::new();
            for n in 1..=8 {
                acked.push(push_new(&w, &c, &srcs[0], &others, repos[0], n));
                std::thread::sleep(Duration::from_millis(700));
            }
            acked
        });
        let drain = Command::new(common::berth())
            .args(["cluster", "drain", &drained])
            .args(&urls)
            .args(["--wait", "--timeout", "180"])
            .output()
            .unwrap();
        (drain, pushing.join().unwrap())
    });
    let said = String::from_utf8_lossy(&drain.stdout);
    assert!(
        drain.status.success(),
        "berth cluster drain {drained}: {said}{}\n{}",
        String::from_utf8_lossy(&drain.stderr),
        c.logs()
    );
    assert!(
        said.contains(&format!("{drained} is drained: no repository lists it")),
        "{said}"
    );
    last[0] = pushed.last().cloned().unwrap();
    for (i, repo) in repos.iter().enumerate() {
        let name = repo.trim_end_matches(".git");
        let list = listed(&c, name);
        assert!(!list.contains(&drained), "{repo}: {list:?}");
        assert_eq!(list.len(), 2, "{repo}: {list:?}");
        let refs = listed_converged(&w, &c, repo);
        assert_eq!(
            refs.get("refs/heads/main"),
            Some(&last[i]),
            "{repo}: {refs:?}"
        );
    }
    // The drained node deletes its copies once they have been unlisted for 3 s (the list
    // read again first); the listed copies stay.
    let d = index(&c, &drained);
    wait_until(
        &c,
        "the drained node's copies deleted",
        Duration::from_secs(60),
        || repos.iter().all(|r| !c.nodes[d].dir(r).exists()),
    );
    let log = c.nodes[d].log();
    for r in &held {
        let line = format!(
            "deleted the copy of a repository whose replicas no longer include this node repo={}",
            r.trim_end_matches(".git")
        );
        assert!(log.contains(&line), "{r}: no {line:?}\n{log}");
    }
    for (i, repo) in repos.iter().enumerate() {
        let name = repo.trim_end_matches(".git");
        for n in listed(&c, name) {
            let refs = w.ref_map(c.nodes[index(&c, &n)].dir(repo));
            assert_eq!(refs.get("refs/heads/main"), Some(&last[i]), "{n}: {repo}");
        }
    }
    // A new repository goes to the nodes not draining.
    let src = w.work("src-new");
    push_new(&w, &c, &src, &others, "fresh.git", 0);
    assert!(!listed(&c, "fresh").contains(&drained));
    // Still draining: status says so, judged against the cluster's recorded K (2) when no
    // --replicas is given.
    let status = Command::new(common::berth())
        .args(["cluster", "status"])
        .args(&urls)
        .output()
        .unwrap();
    let status = String::from_utf8_lossy(&status.stdout);
    assert!(status.contains("(draining)"), "{status}");
    assert!(status.contains("; 2 copies wanted)"), "{status}");
}

/// The rendezvous top `k` of `nodes` for `repo` (the cluster's own hashing: blake2b-256 of
/// the node, a zero byte and the name; the first 8 bytes, highest first).
pub(crate) fn top(repo: &str, nodes: &[&str], k: usize) -> Vec<String> {
    use blake2::digest::Digest;
    let mut scored: Vec<([u8; 8], &str)> = nodes
        .iter()
        .map(|n| {
            let mut h = blake2::Blake2b256::new();
            h.update(n.as_bytes());
            h.update([0]);
            h.update(repo.as_bytes());
            let mut s = [0u8; 8];
            s.copy_from_slice(&h.finalize()[..8]);
            (s, *n)
        })
        .collect();
    scored.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(b.1)));
    let mut top: Vec<String> = scored.into_iter().take(k).map(|s| s.1.to_owned()).collect();
    top.sort();
    top
}

#[test]
fn a_node_started_later_takes_its_rendezvous_share_one_copy_at_a_time() {
    let Some(w) = cluster_world() else { return };
    let mut c = cluster(&w).start();
    let repos = ["j0.git", "j1.git", "j2.git", "j3.git"];
    let mut srcs = Vec::new();
    let mut last = Vec::new();
    for repo in repos {
        let src = w.work(&format!("src-{repo}"));
        last.push(push_new(&w, &c, &src, &[0], repo, 0));
        srcs.push(src);
    }
    let want: Vec<Vec<String>> = repos
        .iter()
        .map(|r| top(r.trim_end_matches(".git"), &["n0", "n1", "n2", "n3"], 3))
        .collect();
    assert!(
        want.iter().any(|t| t.contains(&"n3".to_string())),
        "n3 is in no repository's top 3: {want:?}"
    );
    let new = c.add_node(&w);
    let start = Instant::now();
    let mut n = 0;
    loop {
        let lists: Vec<Vec<String>> = repos
            .iter()
            .map(|r| {
                let mut l = listed(&c, r.trim_end_matches(".git"));
                // Never more than one copy beyond K.
                assert!(l.len() <= 4, "{r}: {l:?}");
                l.sort();
                l
            })
            .collect();
        if lists == want {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(240),
            "placement never reached {want:?}: {lists:?}\n{}",
            c.logs()
        );
        // Pushes go on while repositories move.
        n += 1;
        let i = n % repos.len();
        last[i] = push_new(&w, &c, &srcs[i], &[n % 3, new], repos[i], n);
        std::thread::sleep(Duration::from_millis(300));
    }
    for (i, repo) in repos.iter().enumerate() {
        n += 1;
        last[i] = push_new(&w, &c, &srcs[i], &[new, 0], repo, n);
        let refs = listed_converged(&w, &c, repo);
        assert_eq!(
            refs.get("refs/heads/main"),
            Some(&last[i]),
            "{repo}: {refs:?}"
        );
    }
    assert!(
        c.nodes[new]
            .log()
            .contains("joined the repository's replicas")
    );
}

/// `etcdctl put key value` on the cluster's etcd.
fn etcd_put(c: &Cluster, key: &str, value: &str) {
    let ok = c
        .etcd
        .etcdctl()
        .args(["put", key, value])
        .output()
        .expect("etcdctl (apt-get install etcd-client)");
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
}

#[test]
fn a_node_taken_off_the_list_while_its_push_is_prepared_does_not_acknowledge_it() {
    let Some(w) = cluster_world() else { return };
    let c = cluster(&w).replicas(2).start();
    let src = w.work("src");
    let first = push_new(&w, &c, &src, &[0], "moved.git", 0);
    let list = listed(&c, "moved");
    let (a, b) = (index(&c, &list[0]), index(&c, &list[1]));
    let third = (0..3).find(|i| *i != a && *i != b).unwrap();
    c.pause_hook(&w, a, "moved.git");
    let pause = w.path("pause-prepared");
    std::fs::write(&pause, "").unwrap();
    w.commit(&src, "a", "while moved");
    let url = c.nodes[a].url("moved.git");
    let out = std::thread::scope(|s| {
        // Accepted on a (a replica then), paused with its ref transaction prepared, before
        // the cluster's prepare and commit point.
        let pushing = s.spawn(|| push(&w, &src, &url, &["HEAD:refs/heads/main"]));
        crate::cluster::wait_for(&w.path("paused-prepared"), &c);
        // Meanwhile a is taken off the list (and marked draining, so that it does not join
        // again): b and the third node hold the repository now.
        etcd_put(&c, &format!("/berth/drain/{}", c.nodes[a].name), "draining");
        let moved = format!("[\"{}\",\"{}\"]", c.nodes[b].name, c.nodes[third].name);
        etcd_put(&c, "/berth/repos/moved/replicas", &moved);
        let _ = std::fs::remove_file(&pause);
        pushing.join().unwrap()
    });
    let told = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // a and b alone would be the quorum of two: without the list's compare it was `ok`.
    assert!(
        !out.status.success(),
        "acknowledged on a removed node: {told}"
    );
    assert!(told.contains("no longer holds"), "{told}\n{}", c.logs());
    assert_eq!(
        w.ref_map(c.nodes[b].dir("moved.git"))
            .get("refs/heads/main"),
        Some(&first),
        "nothing landed on b"
    );
    let head = c.etcd.value("/berth/logs/moved").unwrap_or_default();
    assert!(head.contains("\"seq\":1"), "nothing committed: {head}");
    // The next push goes to the new list and lands on both of its nodes.
    let last = push_new(&w, &c, &src, &[a, b], "moved.git", 1);
    let refs = listed_converged(&w, &c, "moved.git");
    assert_eq!(refs.get("refs/heads/main"), Some(&last));
}

#[test]
fn a_node_down_for_good_is_drained_from_the_copies_of_the_others() {
    let Some(w) = cluster_world() else { return };
    let mut c = cluster(&w).replicas(2).start();
    let src = w.work("src");
    push_new(&w, &c, &src, &[0], "gone.git", 0);
    let gone = listed(&c, "gone")[0].clone();
    let others: Vec<usize> = (0..3).filter(|&i| c.nodes[i].name != gone).collect();
    // With K=2 its pushes need both copies: none is acknowledged until a third node has
    // taken the killed one's place.
    c.kill_node(index(&c, &gone));
    let drain = Command::new(common::berth())
        .args(["cluster", "drain", &gone])
        .args(c.etcd.cluster_args())
        .args(["--wait", "--timeout", "180"])
        .output()
        .unwrap();
    assert!(
        drain.status.success(),
        "berth cluster drain {gone}: {}{}\n{}",
        String::from_utf8_lossy(&drain.stdout),
        String::from_utf8_lossy(&drain.stderr),
        c.logs()
    );
    let list = listed(&c, "gone");
    assert!(!list.contains(&gone), "{list:?}");
    assert_eq!(list.len(), 2, "{list:?}");
    let last = push_new(&w, &c, &src, &others, "gone.git", 1);
    let refs = listed_converged(&w, &c, "gone.git");
    assert_eq!(refs.get("refs/heads/main"), Some(&last));
}
