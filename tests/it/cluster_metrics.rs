//! The cluster's series in `/metrics` (issue #23): a real three-member etcd and three berth
//! nodes, pushed to with the real git client; each node's `/metrics` (served on its loopback
//! listener) read as text.

use crate::cluster::push;
use crate::cluster_fixture::{cluster, cluster_world};
use crate::common::World;
use crate::serve::{Serve, http};

use std::time::{Duration, Instant};

/// The `/metrics` text of the node listening on `port`.
fn metrics(port: u16) -> String {
    let r = http(&format!("127.0.0.1:{port}"), "GET", "/metrics", &[], b"");
    assert_eq!(r.status, 200);
    String::from_utf8(r.body).unwrap()
}

/// The value of `sample` (a name with its labels, as exposed) in `text`, if it is there.
fn sample(text: &str, sample: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(sample)?.strip_prefix(' ')?.parse().ok())
}

/// `repo`'s lag series for `replica`.
fn lag(repo: &str, replica: &str) -> String {
    format!("berth_cluster_replica_lag_entries{{repo=\"{repo}\",replica=\"{replica}\"}}")
}

/// Wait until node `port`'s `/metrics` has `what` hold of `sample` (120 s at most).
fn wait_for_sample(port: u16, name: &str, what: &str, ok: impl Fn(f64) -> bool) -> f64 {
    let start = Instant::now();
    loop {
        let text = metrics(port);
        if let Some(v) = sample(&text, name).filter(|v| ok(*v)) {
            return v;
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "{name}: never {what}:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

#[test]
fn cluster_metrics_count_prepares_commits_etcd_requests_lag_and_quorum_failures() {
    let Some(w) = cluster_world() else { return };
    // The first push, through n0, creates the repository on all three nodes.
    let (mut c, src) = cluster(&w).with_repo("m.git");
    let n0 = c.nodes[0].port;
    let text = metrics(n0);
    // n0 accepted it: each other replica answered its prepare once (and at least one
    // prepared, or there would be no quorum), one entry committed, through etcd.
    let prepares = |outcome: &str| {
        sample(
            &text,
            &format!("berth_cluster_prepares_total{{outcome=\"{outcome}\"}}"),
        )
        .unwrap_or_else(|| panic!("no {outcome} prepares in\n{text}"))
    };
    let answers: f64 = ["prepared", "refused", "unreachable", "late"]
        .into_iter()
        .map(prepares)
        .sum();
    assert_eq!(answers, 2.0, "{text}");
    assert!(prepares("prepared") >= 1.0, "{text}");
    assert_eq!(
        sample(&text, "berth_cluster_commits_total"),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, "berth_cluster_quorum_failures_total"),
        Some(0.0),
        "{text}"
    );
    for op in ["txn", "range"] {
        let count = format!("berth_cluster_etcd_request_seconds_count{{op=\"{op}\"}}");
        assert!(sample(&text, &count).is_some_and(|n| n > 0.0), "{text}");
    }
    // n1 accepted nothing.
    let text = metrics(c.nodes[1].port);
    assert_eq!(
        sample(&text, "berth_cluster_commits_total"),
        Some(0.0),
        "{text}"
    );
    // Every replica current: no lag anywhere, as n0 sees it.
    for r in ["n0", "n1", "n2"] {
        wait_for_sample(n0, &lag("m", r), "0", |v| v == 0.0);
    }

    // n2 down, a push through n0: acknowledged by n0 and n1, and n2 behind.
    c.kill_node(2);
    w.commit(&src, "a", "two");
    c.must_push(&w, &src, 0, "m.git", &["HEAD:refs/heads/main"], "n2 down");
    wait_for_sample(n0, &lag("m", "n2"), "above 0", |v| v >= 1.0);
    wait_for_sample(n0, &lag("m", "n1"), "0", |v| v == 0.0);
    let text = metrics(n0);
    assert_eq!(sample(&text, &lag("m", "n0")), Some(0.0), "{text}");
    assert_eq!(
        sample(&text, "berth_cluster_commits_total"),
        Some(2.0),
        "{text}"
    );

    // n1 down too: only n0 prepares, short of the majority of three.
    c.kill_node(1);
    w.commit(&src, "a", "three");
    let out = push(
        &w,
        &src,
        &c.nodes[0].url("m.git"),
        &["HEAD:refs/heads/main"],
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("only 1 of 3 replicas could prepare"), "{err}");
    let text = metrics(n0);
    assert_eq!(
        sample(&text, "berth_cluster_quorum_failures_total"),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, "berth_cluster_commits_total"),
        Some(2.0),
        "{text}"
    );

    // Both back: n2 catches up, and n0 sees every replica current again.
    c.start_node(&w, 1);
    c.start_node(&w, 2);
    c.converged(&w, "m.git", 3);
    for r in ["n0", "n1", "n2"] {
        wait_for_sample(n0, &lag("m", r), "back to 0", |v| v == 0.0);
    }
    wait_for_sample(
        c.nodes[2].port,
        "berth_cluster_catchups_total{outcome=\"applied\"}",
        "above 0",
        |v| v >= 1.0,
    );
}

/// A push over HTTP reads its repository's log head from etcd twice on the node that accepts
/// it: for its advertisement (`GET info/refs`: a client that saw a push acknowledged elsewhere
/// sees it here) and at its commit point (the gate's base). Its `POST` is routed by the head the
/// node's watch of the logs saw (`cluster/heads.rs`), with no read of its own.
#[test]
fn an_http_push_reads_the_log_head_for_its_advertisement_and_its_commit_point_only() {
    let Some(w) = cluster_world() else { return };
    let (c, src) = cluster(&w).with_repo("m.git");
    let n0 = c.nodes[0].port;
    let ranges = || {
        sample(
            &metrics(n0),
            "berth_cluster_etcd_request_seconds_count{op=\"range\"}",
        )
        .unwrap_or(0.0)
    };
    // Each push's reads on their own: the node's upkeep reads every 5 s too, so the fewest a
    // push took is what a push costs, however slow the machine.
    let mut fewest = f64::MAX;
    for i in 0..6 {
        w.commit(&src, "a", &format!("push {i}"));
        let before = ranges();
        c.must_push(&w, &src, 0, "m.git", &["HEAD:refs/heads/main"], "push");
        fewest = fewest.min(ranges() - before);
    }
    assert_eq!(
        fewest,
        2.0,
        "etcd range requests of a push on the accepting node\n{}",
        c.logs()
    );
}

#[test]
fn without_cluster_no_cluster_series() {
    let w = World::new();
    let srv = Serve::start(&w, &[]);
    let text = String::from_utf8(http(&srv.addr, "GET", "/metrics", &[], b"").body).unwrap();
    assert!(text.contains("berth_pushes_total"), "{text}");
    assert!(!text.contains("berth_cluster_"), "{text}");
}
