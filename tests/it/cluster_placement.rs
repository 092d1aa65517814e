//! K copies, always (issue #23): a repository placed short is filled up to `--replicas` when
//! a node comes back, `berth cluster drain` moves a node's repositories to the others before
//! taking it off their lists, and a node that joins later takes its rendezvous share, each
//! repository on exactly K nodes at the end, nothing acknowledged lost (`src/cluster/upkeep.rs`).

use crate::cluster::{Cluster, push};
use crate::cluster_fixture::{cluster, cluster_world};
use crate::common::World;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// The replica list etcd records for `repo` (its cluster name), empty when none.
fn listed(c: &Cluster, repo: &str) -> Vec<String> {
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
fn index(c: &Cluster, name: &str) -> usize {
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
fn listed_converged(w: &World, c: &Cluster, repo: &str) -> BTreeMap<String, String> {
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
    // n0 reads the live nodes at most a second old.
    std::thread::sleep(Duration::from_millis(1500));
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
    assert!(
        c.nodes[2]
            .log()
            .contains("joined the repository's replicas")
    );
}
