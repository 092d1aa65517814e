//! `berth serve --cluster`: where reads are served. A read of a repository (ls-remote, clone,
//! fetch; over HTTP or ssh) through a node that holds no replica is served by a replica that
//! applied the whole log: a replica behind the log refuses a forwarded read and the next one
//! serves it; a replica killed moments ago (still listed until its lease expires) is passed
//! over, and so is a stopped one once its answer is late. The harness of `cluster.rs` (three etcd members, three berth nodes,
//! `--replicas 2`, so one node holds no replica); skipped (said on stderr) without `etcd`.

use crate::cluster::{Cluster, push_ok};
use crate::cluster_fixture::{cluster, cluster_world};
use crate::common;
use common::World;

use std::time::{Duration, Instant};

/// The replicas recorded for repository `name`, in their order (read with `etcdctl`);
/// `None` (and a note) when etcdctl is not installed.
pub(crate) fn replicas_of(c: &Cluster, name: &str) -> Option<Vec<String>> {
    let Some(text) = c.etcd.value(&format!("/berth/repos/{name}/replicas")) else {
        eprintln!("SKIPPED: etcdctl not usable (apt-get install etcd-client)");
        return None;
    };
    let list: Vec<String> = text
        .trim_start_matches('[')
        .trim_end_matches(']')
        .split(',')
        .map(|s| s.trim().trim_matches('"').to_owned())
        .filter(|s| !s.is_empty())
        .collect();
    Some(list)
}

/// The index of node `name`.
pub(crate) fn index(c: &Cluster, name: &str) -> usize {
    c.nodes.iter().position(|n| n.name == name).unwrap()
}

/// `repo` (`r.git`) pushed twice through node 0 and replicated on two nodes: the first push's
/// commit, the second's, the index of the repository's first replica (the one a forwarding
/// node tried alone before) and of the node holding no replica. `None`: no etcdctl.
fn two_pushes(w: &World, c: &Cluster) -> Option<(String, String, usize, usize)> {
    let src = w.work("src");
    let one = w.commit(&src, "a", "one");
    push_ok(w, &src, &c.nodes[0].url("r.git"), &["HEAD:refs/heads/main"]);
    let two = w.commit(&src, "a", "two");
    push_ok(w, &src, &c.nodes[0].url("r.git"), &["HEAD:refs/heads/main"]);
    c.converged(w, "r.git", 2);
    let order = replicas_of(c, "r")?;
    assert_eq!(order.len(), 2, "{order:?}");
    let first = index(c, &order[0]);
    let outsider = (0..3).find(|i| !order.contains(&c.nodes[*i].name)).unwrap();
    Some((one, two, first, outsider))
}

/// Make node `i`'s copy of `r.git` behind the log and stale: `main` back at `old`, the entry
/// of the second push not applied, and `main` locked (as by another process) so that its
/// catch-up cannot apply it.
fn make_stale(c: &Cluster, i: usize, old: &str) {
    let dir = c.nodes[i].dir("r.git");
    std::fs::write(dir.join("refs/heads/main.lock"), "").unwrap();
    std::fs::write(dir.join("refs/heads/main"), format!("{old}\n")).unwrap();
    let seq: u64 = std::fs::read_to_string(dir.join("berth-cluster-seq"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    std::fs::write(dir.join("berth-cluster-seq"), format!("{}\n", seq - 1)).unwrap();
}

/// `main` as `git ls-remote <url>` shows it (`Err`: what git said when it failed).
fn main_at(w: &World, url: &str, ssh: Option<&str>) -> Result<String, String> {
    let out = match ssh {
        None => w.git_out(".", &["ls-remote", url, "refs/heads/main"]),
        Some(key) => {
            crate::cluster_ssh::git_ssh(w, key, ".", &["ls-remote", url, "refs/heads/main"])
        }
    };
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_owned())
}

#[test]
fn a_replica_behind_the_log_serves_no_forwarded_http_read() {
    let Some(w) = cluster_world() else { return };
    if common::reftable() {
        eprintln!("SKIPPED under reftable: the test holds a files-backend ref lock");
        return;
    }
    let c = cluster(&w).replicas(2).start();
    let Some((one, two, first, outsider)) = two_pushes(&w, &c) else {
        return;
    };
    make_stale(&c, first, &one);
    // Through the node holding no replica (which sent reads to the first replica alone),
    // and through the stale replica itself: always the log's value, never the stale one.
    for round in 0..20 {
        for i in [outsider, first] {
            let got = main_at(&w, &c.nodes[i].url("r.git"), None);
            assert_eq!(
                got.as_deref(),
                Ok(two.as_str()),
                "round {round} via {} (stale value {one}):\n{}",
                c.nodes[i].name,
                c.logs()
            );
        }
    }
    w.git(
        ".",
        &["clone", "-q", &c.nodes[outsider].url("r.git"), "clone"],
    );
    assert_eq!(w.git("clone", &["rev-parse", "HEAD"]).trim(), two);
    // A push through the stale replica: its POST too goes to the current one (routed by the
    // head the stale replica's watch saw, `cluster/heads.rs`, or read), whose gate decides it:
    // short of a quorum, for the stale replica cannot prepare. Decided on the stale replica,
    // its gate would have refused it as behind the log.
    w.commit("clone", "a", "three");
    let out = crate::cluster::push(&w, "clone", &c.nodes[first].url("r.git"), &["HEAD:main"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("only 1 of 2 replicas could prepare"), "{err}");
    assert!(!err.contains("behind"), "{err}");
    // Released, it catches up (or refuses until it does).
    std::fs::remove_file(c.nodes[first].dir("r.git").join("refs/heads/main.lock")).unwrap();
}

#[test]
fn a_replica_behind_the_log_serves_no_forwarded_ssh_read() {
    let Some(w) = cluster_world() else { return };
    if common::reftable() {
        eprintln!("SKIPPED under reftable: the test holds a files-backend ref lock");
        return;
    }
    let c = cluster(&w).replicas(2).ssh().start();
    let Some((one, two, first, outsider)) = two_pushes(&w, &c) else {
        return;
    };
    make_stale(&c, first, &one);
    let url = crate::cluster_ssh::url(&c, outsider, "r.git");
    for round in 0..10 {
        let got = main_at(&w, &url, Some("alice"));
        assert_eq!(
            got.as_deref(),
            Ok(two.as_str()),
            "round {round} (stale value {one}):\n{}",
            c.logs()
        );
    }
}

#[test]
fn a_replica_killed_moments_ago_is_passed_over_for_http_reads() {
    let Some(w) = cluster_world() else { return };
    let mut c = cluster(&w).replicas(2).start();
    let Some((_, two, first, outsider)) = two_pushes(&w, &c) else {
        return;
    };
    let url = c.nodes[outsider].url("r.git");
    c.kill_node(first);
    let killed = Instant::now();
    // Its lease lives 10 s: the forwarding node still lists it.
    for round in 0..3 {
        let got = main_at(&w, &url, None);
        assert_eq!(
            got.as_deref(),
            Ok(two.as_str()),
            "round {round}:\n{}",
            c.logs()
        );
    }
    let out = w.git_out(".", &["clone", "-q", &url, "clone"]);
    assert!(
        out.status.success(),
        "clone: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        c.logs()
    );
    assert_eq!(w.git("clone", &["rev-parse", "HEAD"]).trim(), two);
    assert!(
        killed.elapsed() < Duration::from_secs(9),
        "the reads took longer than the killed node's lease: they do not show it was passed over"
    );
}

#[test]
fn a_stopped_replica_is_passed_over_for_http_reads_once_its_answer_is_late() {
    let Some(w) = cluster_world() else { return };
    // The wait for a replica's answer head: --idle-timeout + --push-slot-timeout, 5 s here.
    let c = cluster(&w)
        .replicas(2)
        .args(&["--idle-timeout", "4", "--push-slot-timeout", "1"])
        .start();
    let Some((_, two, first, outsider)) = two_pushes(&w, &c) else {
        return;
    };
    let url = c.nodes[outsider].url("r.git");
    c.signal(first, "-STOP");
    // It accepts connections (the kernel does) and answers nothing; still listed until its
    // lease expires (≤ 10 s): the first request, at least, is sent to it and passed over.
    let started = Instant::now();
    let got = main_at(&w, &url, None);
    c.signal(first, "-CONT");
    assert_eq!(got.as_deref(), Ok(two.as_str()), "{}", c.logs());
    assert!(
        started.elapsed() >= Duration::from_secs(5),
        "answered in {:?}: the stopped replica was not asked first",
        started.elapsed()
    );
    // Over TLS the stopped replica does not finish the handshake, which is part of the
    // connect: passed over when the connect times out (5 s), before any request is sent.
    let said = match c.etcd.certs {
        None => "replica passed over: no answer in time",
        Some(_) => "replica passed over: connect timed out",
    };
    c.nodes[outsider].wait_log(said);
}
