//! How berth is started and what it refuses: under the name `git-receive-pack` (a symlink, as an
//! ssh forced command or in an exec-path would find it), repository formats it cannot write yet,
//! and `receive.maxInputSize`.

mod common;
use common::{Receiver, World, leftovers};

#[test]
fn symlink_named_git_receive_pack_behaves_as_receive_pack() {
    let w = World::new();
    std::fs::create_dir(w.path("bin")).unwrap();
    std::os::unix::fs::symlink(common::berth(), w.path("bin/git-receive-pack")).unwrap();
    w.bare("srv.git");
    w.work("src");
    let head = w.commit("src", "a", "1");
    let rp = format!(
        "--receive-pack={}",
        w.path("bin/git-receive-pack").display()
    );
    let out = w.git_out("src", &["push", &rp, "../srv.git", "main"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        w.refs("srv.git"),
        format!("{head} commit refs/heads/main\n")
    );
    w.assert_clean("srv.git");
}

#[test]
fn refuses_sha256_and_reftable_repositories_without_writing() {
    for init in [
        &["init", "-q", "--bare", "--object-format=sha256", "srv.git"][..],
        &["init", "-q", "--bare", "--ref-format=reftable", "srv.git"][..],
    ] {
        let w = World::new();
        w.git(".", init);
        w.work("src");
        w.commit("src", "a", "1");
        let p = w.push("src", Receiver::Berth, "srv.git", &["main"]);
        assert!(!p.success);
        assert!(
            p.stderr
                .contains("fatal: berth does not yet support repositories with extensions."),
            "{p:#?}"
        );
        assert_eq!(w.refs("srv.git"), "");
        assert!(leftovers(&w.path("srv.git")).is_empty());
    }
}

#[test]
fn max_input_size_refuses_large_packs() {
    let big: String = (0..20_000)
        .map(|i| format!("{i} some incompressible-ish text {}\n", i * 7919 % 10007))
        .collect();
    let run = |r: Receiver| {
        let w = World::new();
        w.bare("srv.git");
        w.git("srv.git", &["config", "receive.maxInputSize", "1000"]);
        w.work("src");
        w.commit("src", "big", &big);
        let p = w.push("src", r, "srv.git", &["main"]);
        assert_eq!(w.refs("srv.git"), "");
        assert!(leftovers(&w.path("srv.git")).is_empty());
        w.assert_clean("srv.git");
        p
    };
    let git = run(Receiver::Git);
    let berth = run(Receiver::Berth);
    assert_eq!(git, berth);
    assert!(
        berth
            .stderr
            .contains("remote: fatal: pack exceeds maximum allowed size"),
        "{berth:#?}"
    );
    assert!(
        berth.stdout.contains("[remote rejected] (unpacker error)"),
        "{berth:#?}"
    );
}
