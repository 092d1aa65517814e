//! Full resync (`src/cluster/resync.rs`): a replica whose copy of a repository is gone
//! after the log's entries were compacted away copies a current replica (`POST
//! /_berth/cluster/snapshot`, then the objects through `/_berth/cluster/pack`) and follows the
//! log from there. The harness is `cluster.rs`'s: three etcd members, three berth nodes, the
//! real git client over HTTP.
//!
//! Compaction deletes only the entries every replica published as applied, so a replica that
//! is merely down holds it back and never needs a resync; the cases that do are a lost copy,
//! tested here after compaction (nothing to replay from) and before it (entries kept, but
//! not from the first).

use crate::cluster::{Cluster, push_ok};
use crate::cluster_fixture::{cluster, cluster_world};
use crate::common::World;

use std::time::{Duration, Instant};

/// Wait until the log of `repo` (its cluster name) has no entries left in etcd.
fn wait_compacted(c: &Cluster, repo: &str) {
    let prefix = format!("/berth/repos/{repo}/entries/");
    let Some(mut left) = c.etcd.keys(&prefix) else {
        // No etcdctl: give compaction (every 5 s) time enough.
        std::thread::sleep(Duration::from_secs(15));
        return;
    };
    let deadline = Instant::now() + Duration::from_secs(120);
    while !left.is_empty() {
        assert!(
            Instant::now() < deadline,
            "not compacted: {left:?}\n{}",
            c.logs()
        );
        std::thread::sleep(Duration::from_millis(300));
        left = c.etcd.keys(&prefix).unwrap_or_default();
    }
}

/// Pushes through different nodes: two branches, an annotated tag, a branch deleted, a
/// branch moved; the source repository.
fn history(w: &World, c: &Cluster) -> String {
    let src = w.work("src");
    w.commit(&src, "a", "one");
    push_ok(w, &src, &c.nodes[0].url("r.git"), &["HEAD:refs/heads/main"]);
    w.commit(&src, "b", "two");
    push_ok(
        w,
        &src,
        &c.nodes[1].url("r.git"),
        &["HEAD:refs/heads/feature", "HEAD:refs/heads/gone"],
    );
    w.git(&src, &["tag", "-a", "-m", "release", "v1"]);
    push_ok(
        w,
        &src,
        &c.nodes[2].url("r.git"),
        &["refs/tags/v1:refs/tags/v1"],
    );
    push_ok(w, &src, &c.nodes[0].url("r.git"), &[":refs/heads/gone"]);
    w.commit(&src, "c", "three");
    push_ok(w, &src, &c.nodes[1].url("r.git"), &["HEAD:refs/heads/main"]);
    src
}

/// Every node's `git for-each-ref` and HEAD, and its recorded sequence number, identical;
/// fsck clean; node 2 says it resynced.
fn check_identical(w: &World, c: &Cluster) {
    let state = |i: usize| {
        let dir = c.nodes[i].dir("r.git");
        let refs = w.git(
            &dir,
            &[
                "for-each-ref",
                "--format=%(refname) %(objectname) %(objecttype)",
            ],
        );
        let head = w.git(&dir, &["symbolic-ref", "HEAD"]);
        let seq = std::fs::read_to_string(dir.join("berth-cluster-seq")).unwrap_or_default();
        (refs, head, seq)
    };
    let first = state(0);
    assert!(first.0.contains("refs/tags/v1"), "{}", first.0);
    assert!(!first.0.contains("refs/heads/gone"), "{}", first.0);
    assert!(!first.2.trim().is_empty());
    for i in 1..3 {
        assert_eq!(state(i), first, "node {i}\n{}", c.logs());
    }
    c.assert_fsck(w, "r.git");
    c.nodes[2].wait_log("resynced from a replica");
}

#[test]
fn a_replica_that_lost_its_copy_after_compaction_resyncs_from_another() {
    let Some(w) = cluster_world() else { return };
    let mut c = cluster(&w).start();
    let src = history(&w, &c);
    c.converged(&w, "r.git", 3);
    wait_compacted(&c, "r");
    c.kill_node(2);
    std::fs::remove_dir_all(c.nodes[2].dir("r.git")).unwrap();
    c.start_node(&w, 2);
    w.commit(&src, "d", "four");
    push_ok(
        &w,
        &src,
        &c.nodes[0].url("r.git"),
        &["HEAD:refs/heads/main"],
    );
    let refs = c.converged(&w, "r.git", 3);
    assert_eq!(
        refs.get("refs/heads/main"),
        Some(&w.git(&src, &["rev-parse", "HEAD"]).trim().to_owned())
    );
    check_identical(&w, &c);
    // Its /metrics counts the resync (the node restarted: its own since then).
    let copied = crate::serve::metric(
        &format!("127.0.0.1:{}", c.nodes[2].port),
        "berth_cluster_resyncs_total{outcome=\"copied\"}",
    );
    assert!(copied >= 1.0, "{copied}");
    // Node 2 serves the repository again (a clone from it is not forwarded).
    let clone = w.path("clone");
    w.git(
        w.root(),
        &[
            "clone",
            "--bare",
            &c.nodes[2].url("r.git"),
            clone.to_str().unwrap(),
        ],
    );
    assert_eq!(
        w.ref_map(&clone).get("refs/tags/v1"),
        refs.get("refs/tags/v1")
    );
}

#[test]
fn a_replica_down_during_pushes_that_lost_its_copy_resyncs_and_follows_the_log() {
    let Some(w) = cluster_world() else { return };
    let (mut c, src) = cluster(&w).with_repo("r.git");
    wait_compacted(&c, "r");
    // Down while the rest of the history is pushed: its entries stay in etcd (compaction
    // waits for node 2), but not from the first, which the lost copy would need.
    c.kill_node(2);
    w.commit(&src, "b", "two");
    push_ok(
        &w,
        &src,
        &c.nodes[0].url("r.git"),
        &["HEAD:refs/heads/feature", "HEAD:refs/heads/gone"],
    );
    w.git(&src, &["tag", "-a", "-m", "release", "v1"]);
    push_ok(
        &w,
        &src,
        &c.nodes[1].url("r.git"),
        &["refs/tags/v1:refs/tags/v1"],
    );
    push_ok(&w, &src, &c.nodes[0].url("r.git"), &[":refs/heads/gone"]);
    // Two compaction rounds (every 5 s): none passes the down replica.
    std::thread::sleep(Duration::from_secs(11));
    if let Some(kept) = c.etcd.keys("/berth/repos/r/entries/") {
        // Node 2 applied entry 1: the entries from 2 on stay.
        assert!(
            kept.first()
                .is_some_and(|k| k.ends_with(&format!("/entries/{:020}", 2))),
            "compacted past a down replica: {kept:?}"
        );
    }
    std::fs::remove_dir_all(c.nodes[2].dir("r.git")).unwrap();
    c.start_node(&w, 2);
    w.commit(&src, "c", "three");
    push_ok(
        &w,
        &src,
        &c.nodes[1].url("r.git"),
        &["HEAD:refs/heads/main"],
    );
    c.converged(&w, "r.git", 3);
    check_identical(&w, &c);
    // Once node 2 published what it applied, compaction goes on.
    wait_compacted(&c, "r");
}

/// `POST path` with `headers` and `body` to node `i`'s internal endpoint (as another node:
/// [`Cluster::internal`]): the status and the body.
fn post(c: &Cluster, i: usize, path: &str, headers: &[(&str, &str)], body: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut req = format!(
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    let mut s = c.internal(i, &req);
    s.write_all(body.as_bytes()).unwrap();
    let mut answer = Vec::new();
    let _ = s.read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let status = answer
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = answer
        .split_once("\r\n\r\n")
        .map(|b| b.1.to_owned())
        .unwrap_or_default();
    (status, body)
}

#[test]
fn the_snapshot_endpoint_wants_the_secret_and_answers_the_refs_at_the_applied_entry() {
    let Some(w) = cluster_world() else { return };
    let (c, src) = cluster(&w).with_repo("r.git");
    let path = "/_berth/cluster/snapshot";
    let ask = r#"{"repo":"r"}"#;
    assert_eq!(post(&c, 1, path, &[], ask).0, 403);
    assert_eq!(
        post(&c, 1, path, &[("x-berth-cluster-secret", "00")], ask).0,
        403
    );
    let Some(secret) = c.etcd.value("/berth/secret") else {
        eprintln!("etcdctl not usable: the checks with the secret are not run");
        return;
    };
    let with = [("x-berth-cluster-secret", secret.as_str())];
    for bad in [
        r#"{"repo":"../r"}"#,
        r#"{"repo":"r.git"}"#,
        r#"{}"#,
        "not json",
    ] {
        assert_eq!(post(&c, 1, path, &with, bad).0, 400, "{bad}");
    }
    assert_eq!(post(&c, 1, path, &with, r#"{"repo":"elsewhere"}"#).0, 404);
    let (status, body) = post(&c, 1, path, &with, ask);
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).expect(&body);
    let seq = std::fs::read_to_string(c.nodes[1].dir("r.git").join("berth-cluster-seq"))
        .unwrap_or_default();
    assert_eq!(
        v["seq"].as_u64().map(|s| s.to_string()),
        Some(seq.trim().to_owned())
    );
    assert_eq!(v["head"], "refs/heads/main");
    let main = w.git(&src, &["rev-parse", "HEAD"]).trim().to_owned();
    assert_eq!(v["refs"], serde_json::json!([["refs/heads/main", main]]));
}
