//! Pushes from shallow clones into the cluster (issue #23, item 8): the client's `shallow`
//! lines travel with the pack stream and the prepare to the other replicas (and the new
//! shallow roots in the log entry, for the catch-up), so every replica checks connectivity
//! with them and records the roots in `$GIT_DIR/shallow`, as git's receive-pack does with
//! `receive.shallowUpdate`. Real etcd, real nodes, real `git clone --depth 1` and `git push`.

use crate::cluster::{porcelain, push};
use crate::cluster_fixture::{cluster, cluster_world};
use crate::common::World;

/// Every node's environment: `receive.shallowUpdate=true`, as `git -c` would give it.
const SHALLOW_UPDATE: [(&str, &str); 3] = [
    ("GIT_CONFIG_COUNT", "1"),
    ("GIT_CONFIG_KEY_0", "receive.shallowUpdate"),
    ("GIT_CONFIG_VALUE_0", "true"),
];

/// A shallow clone (`--depth 1`) of a local repository of three commits, with a new commit of
/// its own: the clone's name and its shallow root (the upstream tip, whose parents the
/// cluster never gets).
fn shallow_clone(w: &World) -> (String, String) {
    let up = w.work("upstream");
    for i in 0..3 {
        w.commit(&up, "f", &format!("upstream {i}"));
    }
    let url = format!("file://{}", w.path(&up).display());
    w.git(".", &["clone", "-q", "--depth", "1", &url, "shallow"]);
    let root = w.git("shallow", &["rev-parse", "HEAD"]).trim().to_owned();
    (String::from("shallow"), root)
}

/// The shallow roots node `dir` records (`$GIT_DIR/shallow`).
fn shallow_file(dir: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("shallow"))
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Node `dir`'s copy lists nothing as not known to be complete (`objects/info/berth-incomplete`
/// and the pushes' own files): the commits that needed a root are complete once it is recorded.
fn assert_nothing_listed(dir: &std::path::Path, node: &str) {
    let list = dir.join("objects/info/berth-incomplete");
    assert!(
        !list.exists(),
        "{node}: {:?}",
        std::fs::read_to_string(&list)
    );
    let pending: Vec<_> = std::fs::read_dir(dir.join("objects/info/berth-incomplete.d"))
        .map(|d| d.map(|e| e.unwrap().file_name()).collect())
        .unwrap_or_default();
    assert!(pending.is_empty(), "{node}: {pending:?}");
}

#[test]
fn a_push_from_a_shallow_clone_lands_on_every_replica_with_its_shallow_root() {
    let Some(w) = cluster_world() else { return };
    let mut setup = cluster(&w);
    for (k, v) in SHALLOW_UPDATE {
        setup = setup.env(k, v);
    }
    let (mut c, _src) = setup.with_repo("s.git");
    let (clone, root) = shallow_clone(&w);

    // Through the prepare: node 0 accepts, nodes 1 and 2 ingest the streamed pack with the
    // client's shallow lines, check connectivity with the roots and record them.
    let tip = w.commit(&clone, "g", "one");
    let out = push(
        &w,
        &clone,
        &c.nodes[0].url("s.git"),
        &["HEAD:refs/heads/shallow"],
    );
    assert_eq!(
        porcelain(&out).get("refs/heads/shallow"),
        Some(&true),
        "{}{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        c.logs()
    );
    let refs = c.converged(&w, "s.git", 3);
    assert_eq!(refs.get("refs/heads/shallow"), Some(&tip));
    for n in &c.nodes {
        assert_eq!(
            shallow_file(&n.dir("s.git")),
            vec![root.clone()],
            "{}'s shallow file",
            n.name
        );
        assert_nothing_listed(&n.dir("s.git"), &n.name);
    }
    c.assert_fsck(&w, "s.git");
    // A read through another node: the branch, and its objects.
    let listed = w.git(".", &["ls-remote", &c.nodes[2].url("s.git")]);
    assert!(
        listed.contains(&format!("{tip}\trefs/heads/shallow")),
        "{listed}"
    );
    let fetched = w.git_out(
        &clone,
        &[
            "fetch",
            "-q",
            &c.nodes[1].url("s.git"),
            "refs/heads/main:refs/remotes/n1/main",
        ],
    );
    assert!(
        fetched.status.success(),
        "fetch through node 1: {}",
        String::from_utf8_lossy(&fetched.stderr)
    );

    // Through the catch-up: node 2 is down while a second shallow history is pushed; it
    // applies the entry from the log, with the entry's shallow root.
    let (clone2, root2) = {
        let up = w.work("upstream2");
        for i in 0..3 {
            w.commit(&up, "h", &format!("second upstream {i}"));
        }
        let url = format!("file://{}", w.path(&up).display());
        w.git(".", &["clone", "-q", "--depth", "1", &url, "shallow2"]);
        let root = w.git("shallow2", &["rev-parse", "HEAD"]).trim().to_owned();
        (String::from("shallow2"), root)
    };
    let tip2 = w.commit(&clone2, "i", "two");
    c.kill_node(2);
    let out = push(
        &w,
        &clone2,
        &c.nodes[1].url("s.git"),
        &["HEAD:refs/heads/second"],
    );
    assert_eq!(
        porcelain(&out).get("refs/heads/second"),
        Some(&true),
        "{}{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        c.logs()
    );
    c.start_node(&w, 2);
    let refs = c.converged(&w, "s.git", 3);
    assert_eq!(refs.get("refs/heads/second"), Some(&tip2));
    let mut both = vec![root.clone(), root2.clone()];
    both.sort();
    for n in &c.nodes {
        assert_eq!(
            shallow_file(&n.dir("s.git")),
            both,
            "{}'s shallow file",
            n.name
        );
        assert_nothing_listed(&n.dir("s.git"), &n.name);
    }
    c.assert_fsck(&w, "s.git");

    // A replica stopped during the push, then continued: left out, then resolved from the
    // log or caught up; the same refs and roots everywhere.
    let tip3 = w.commit(&clone2, "i", "three");
    c.signal(2, "-STOP");
    let out = push(
        &w,
        &clone2,
        &c.nodes[0].url("s.git"),
        &["HEAD:refs/heads/second"],
    );
    c.signal(2, "-CONT");
    assert_eq!(
        porcelain(&out).get("refs/heads/second"),
        Some(&true),
        "{}{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        c.logs()
    );
    let refs = c.converged(&w, "s.git", 3);
    assert_eq!(refs.get("refs/heads/second"), Some(&tip3));
    for n in &c.nodes {
        assert_eq!(
            shallow_file(&n.dir("s.git")),
            both,
            "{}'s shallow file",
            n.name
        );
    }
    c.assert_fsck(&w, "s.git");
}
