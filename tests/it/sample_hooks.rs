//! The sample hooks shipped in `hooks/`, each installed in a served repository and exercised
//! with the real git client, against berth and against `git receive-pack` alike.

use crate::common;
use common::{Push, Receiver, World};

fn install(w: &World, sample: &str, event: &str) {
    let from = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("hooks")
        .join(sample);
    let to = w.path("srv.git/hooks").join(event);
    std::fs::copy(from, &to).unwrap();
}

fn both(scenario: impl Fn(&World, Receiver) -> Vec<Push>) -> Vec<Push> {
    let run = |r| {
        let w = World::new();
        let p = scenario(&w, r);
        (p, w.refs("srv.git"))
    };
    common::differential(run).0
}

#[test]
fn protect_branches_refuses_rewrites_and_deletions_of_protected_branches() {
    let p = both(|w, r| {
        w.bare("srv.git");
        install(w, "protect-branches", "update");
        w.git(
            "srv.git",
            &[
                "config",
                "--add",
                "hooks.protectedBranch",
                "refs/heads/main",
            ],
        );
        w.git(
            "srv.git",
            &[
                "config",
                "--add",
                "hooks.protectedBranch",
                "refs/heads/release/*",
            ],
        );
        w.work("src");
        w.commit("src", "a", "1");
        w.commit("src", "a", "2");
        w.git("src", &["branch", "release/1"]);
        w.git("src", &["branch", "topic"]);
        let mut p = vec![w.push("src", r, "srv.git", &["main", "release/1", "topic"])];
        w.git("src", &["reset", "-q", "--hard", "HEAD~1"]);
        p.push(w.push("src", r, "srv.git", &["--force", "main", "main:topic"]));
        p.push(w.push("src", r, "srv.git", &[":refs/heads/release/1"]));
        p
    });
    assert!(p[0].success);
    assert!(
        p[1].stdout
            .contains("!\trefs/heads/main:refs/heads/main\t[remote rejected] (hook declined)"),
        "{:#?}",
        p[1]
    );
    assert!(
        p[1].stderr.contains(
            "remote: refusing non-fast-forward update of protected branch refs/heads/main"
        )
    );
    assert!(
        p[1].stdout
            .contains("+\trefs/heads/main:refs/heads/topic\t"),
        "{:#?}",
        p[1]
    );
    assert!(
        p[2].stderr
            .contains("remote: refusing to delete protected branch refs/heads/release/1"),
        "{:#?}",
        p[2]
    );
}

#[test]
fn max_file_size_refuses_big_files_and_leaves_nothing_behind() {
    let p = both(|w, r| {
        w.bare("srv.git");
        install(w, "max-file-size", "pre-receive");
        w.git("srv.git", &["config", "hooks.maxFileSize", "1k"]);
        w.work("src");
        w.commit("src", "small", "fine");
        let mut p = vec![w.push("src", r, "srv.git", &["main"])];
        w.commit("src", "dir/big", &"x".repeat(5000));
        p.push(w.push("src", r, "srv.git", &["main"]));
        let big = w.git("src", &["rev-parse", "HEAD:dir/big"]);
        assert!(
            !w.git_out("srv.git", &["cat-file", "-e", big.trim()])
                .status
                .success()
        );
        if r == Receiver::Berth {
            w.assert_clean("srv.git");
        }
        p
    });
    assert!(p[0].success);
    assert!(
        p[1].stdout
            .contains("[remote rejected] (pre-receive hook declined)"),
        "{:#?}",
        p[1]
    );
    assert!(p[1].stderr.contains("remote: refs/heads/main: dir/big is 5000 bytes, over the limit of 1024 (hooks.maxFileSize)"), "{:#?}", p[1]);
}

#[test]
fn log_pushes_records_every_updated_ref() {
    let w = World::new();
    w.bare("srv.git");
    install(&w, "log-pushes", "post-receive");
    w.git(
        "srv.git",
        &["config", "receive.advertisePushOptions", "true"],
    );
    w.work("src");
    let c1 = w.commit("src", "a", "1");
    w.git("src", &["branch", "topic"]);
    assert!(
        w.push(
            "src",
            Receiver::Berth,
            "srv.git",
            &["-o", "ci.skip", "main", "topic"]
        )
        .success
    );
    let log = std::fs::read_to_string(w.path("srv.git/push.log")).unwrap();
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(lines.len(), 2, "{log}");
    let z = common::ZERO;
    assert!(
        lines[0].ends_with(&format!(" {z} {c1} refs/heads/main ci.skip")),
        "{log}"
    );
    assert!(
        lines[1].ends_with(&format!(" {z} {c1} refs/heads/topic ci.skip")),
        "{log}"
    );
}
