//! What is left, and what a push's client is told, when the cluster does not simply say `ok`
//! (issue #23, item 7): a refused first push leaves no copy anywhere.

use std::time::{Duration, Instant};

use crate::cluster::{porcelain, push};
use crate::cluster_fixture::{cluster, cluster_world};

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
