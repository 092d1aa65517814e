//! One name, decided once (#21): the repository a request names is decoded and checked once, and
//! the access rules, creation, the filesystem and the log all see that one name. Each test plays
//! a hostile client with the real git client or raw HTTP against `berth serve`:
//! - a repository denied by its own `-` rule under a broader allowing rule, spelled with `%XX`
//!   escapes: not read, not pushed to, not created;
//! - a symbolic link pushed into a non-bare repository's worktree (`updateInstead`), or made by
//!   hand inside the root, never serves the repository it points at;
//! - a pushed symbolic ref is judged by the ref it really moves;
//! - concurrent first pushes to a missing repository create it once, and all of them land.

use crate::common::World;
use crate::serve::{Serve, credentials, git, http, server_refs, user_url};

/// Rules where `secret` and `new-secret` are denied to alice by their own rule, above `@all`
/// rules that would grant her everything.
const RULES: &str = "\
repo secret
    -   = alice
    RW+ = admin
repo new-secret
    -   = alice
repo @all
    RW+ = alice
    C   = alice
";

/// A server with credentials for alice (`alice-pw`) and admin (`admin-pw`) and `rules`.
fn serve_with_rules(w: &World, rules: &str) -> Serve {
    let creds = credentials(w, "alice", "alice-pw") + &credentials(w, "admin", "admin-pw");
    std::fs::write(w.path("creds"), creds).unwrap();
    std::fs::write(w.path("access.conf"), rules).unwrap();
    let (c, a) = (w.path("creds"), w.path("access.conf"));
    Serve::start(
        w,
        &[
            "--credentials",
            c.to_str().unwrap(),
            "--access",
            a.to_str().unwrap(),
        ],
    )
}

/// A server with [`RULES`], a work repository `src` with one commit, and `secret.git` holding
/// it as `main`: the server and the commit.
fn serve_with_a_secret(w: &World) -> (Serve, String) {
    let srv = serve_with_rules(w, RULES);
    w.work("src");
    let c1 = w.commit("src", "a", "1");
    w.bare("repos/secret.git");
    w.git(
        "src",
        &[
            "push",
            "-q",
            w.path("repos/secret.git").to_str().unwrap(),
            "main",
        ],
    );
    (srv, c1)
}

/// Every way of spelling `name` with one letter as a `%XX` escape, in both cases of hex.
fn escaped_spellings(name: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (i, c) in name.char_indices().filter(|(_, c)| c.is_ascii_alphabetic()) {
        for hex in [format!("%{:02x}", c as u8), format!("%{:02X}", c as u8)] {
            out.push(format!("{}{hex}{}", &name[..i], &name[i + 1..]));
        }
    }
    out.dedup();
    out
}

#[test]
fn escaped_names_are_judged_as_the_repository_they_open() {
    let w = World::new();
    let (srv, c1) = serve_with_a_secret(&w);
    let c2 = w.commit("src", "a", "2");
    for spelled in escaped_spellings("secret.git") {
        // Read: the refs' advertisement and a clone.
        let r = http(
            &srv.addr,
            "GET",
            &format!("/{spelled}/info/refs?service=git-upload-pack"),
            &[("Authorization", &crate::serve::basic("alice", "alice-pw"))],
            b"",
        );
        assert_eq!(r.status, 404, "{spelled}: read");
        let out = git(
            &w,
            ".",
            &["ls-remote", &user_url(&srv, "alice", "alice-pw", &spelled)],
        );
        assert!(!out.status.success(), "{spelled}: ls-remote");
        // Push: refused, the refs untouched.
        let out = git(
            &w,
            "src",
            &[
                "push",
                &user_url(&srv, "alice", "alice-pw", &spelled),
                "main",
            ],
        );
        assert!(!out.status.success(), "{spelled}: push");
    }
    assert_eq!(
        server_refs(&w, "repos/secret.git"),
        format!("{c1} commit refs/heads/main\n")
    );
    // Creation: refused, nothing made.
    for spelled in escaped_spellings("new-secret.git").into_iter().take(6) {
        let out = git(
            &w,
            "src",
            &[
                "push",
                &user_url(&srv, "alice", "alice-pw", &spelled),
                "main",
            ],
        );
        assert!(!out.status.success(), "{spelled}: create");
    }
    assert!(!w.path("repos/new-secret.git").exists());
    // The rules still grant what they grant, however it is spelled: admin reads the secret,
    // alice creates and pushes `o%70en.git`, which lands in `open.git`.
    let out = git(
        &w,
        ".",
        &[
            "ls-remote",
            &user_url(&srv, "admin", "admin-pw", "s%65cret.git"),
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains(&c1));
    let out = git(
        &w,
        "src",
        &[
            "push",
            &user_url(&srv, "alice", "alice-pw", "o%70en.git"),
            "main",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        server_refs(&w, "repos/open.git"),
        format!("{c2} commit refs/heads/main\n")
    );
    assert!(!w.path("repos/o%70en.git").exists());
    // The log names the repository as decoded, once.
    let log = srv.log();
    assert!(!log.contains("%65cret"), "{log}");
    assert!(log.contains("secret.git"), "{log}");
}

#[test]
fn a_symlink_pushed_into_a_worktree_or_made_in_the_root_serves_nothing() {
    let w = World::new();
    let (srv, c1) = serve_with_a_secret(&w);
    // A non-bare repository alice may push to, which checks out what she pushes.
    w.work("repos/site");
    w.commit("repos/site", "index.html", "hello");
    w.git(
        "repos/site",
        &["config", "receive.denyCurrentBranch", "updateInstead"],
    );
    let site = user_url(&srv, "alice", "alice-pw", "site");
    w.git(".", &["clone", "-q", &site, "mine"]);
    std::os::unix::fs::symlink("../secret.git", w.path("mine/leak.git")).unwrap();
    std::os::unix::fs::symlink("../secret.git", w.path("mine/leak")).unwrap();
    w.git("mine", &["add", "-A"]);
    w.git("mine", &["commit", "-q", "-m", "links"]);
    let out = git(&w, "mine", &["push", &site, "main"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The links are checked out in the served root...
    assert!(
        std::fs::symlink_metadata(w.path("repos/site/leak.git"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    // ...and serve nothing, whatever the spelling.
    for name in ["site/leak.git", "site/leak", "site/le%61k.git"] {
        let out = git(
            &w,
            ".",
            &["ls-remote", &user_url(&srv, "alice", "alice-pw", name)],
        );
        assert!(
            !out.status.success() && !String::from_utf8_lossy(&out.stdout).contains(&c1),
            "{name}: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        let out = git(
            &w,
            "src",
            &[
                "push",
                &user_url(&srv, "alice", "alice-pw", name),
                "main:refs/heads/x",
            ],
        );
        assert!(!out.status.success(), "{name}: push");
    }
    // Nor can a repository be created inside the worktree.
    let out = git(
        &w,
        "src",
        &[
            "push",
            &user_url(&srv, "alice", "alice-pw", "site/inner.git"),
            "main",
        ],
    );
    assert!(!out.status.success(), "created inside a worktree");
    assert!(!w.path("repos/site/inner.git").exists());
    // A link made in the root by hand, pointing inside it: refused (403), not followed.
    std::os::unix::fs::symlink("secret.git", w.path("repos/alias.git")).unwrap();
    let r = http(
        &srv.addr,
        "GET",
        "/alias.git/info/refs?service=git-upload-pack",
        &[("Authorization", &crate::serve::basic("alice", "alice-pw"))],
        b"",
    );
    assert_eq!(r.status, 403);
    assert_eq!(
        server_refs(&w, "repos/secret.git"),
        format!("{c1} commit refs/heads/main\n")
    );
}

#[test]
fn a_pushed_symbolic_ref_is_judged_by_the_ref_it_moves() {
    let w = World::new();
    let rules = "\
repo app
    RW+ alias      = alice
    RW+ feature/   = alice
    R              = alice
    RW+            = admin
";
    let srv = serve_with_rules(&w, rules);
    w.work("src");
    let c1 = w.commit("src", "a", "1");
    w.bare("repos/app.git");
    w.git(
        "src",
        &[
            "push",
            "-q",
            w.path("repos/app.git").to_str().unwrap(),
            "main",
            "main:feature/x",
        ],
    );
    // `alias` (which alice may write) points at `main` (which she may not).
    w.git(
        "repos/app.git",
        &["symbolic-ref", "refs/heads/alias", "refs/heads/main"],
    );
    let c2 = w.commit("src", "a", "2");
    let app = user_url(&srv, "alice", "alice-pw", "app.git");
    let out = git(
        &w,
        "src",
        &["push", "--porcelain", &app, "main:refs/heads/alias"],
    );
    assert!(!out.status.success());
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(text.contains("refs/heads/main"), "{text}");
    assert_eq!(
        w.git("repos/app.git", &["rev-parse", "refs/heads/main"])
            .trim(),
        c1
    );
    // Pointing at a ref she may write, the same push lands (through the symbolic ref).
    w.git(
        "repos/app.git",
        &["symbolic-ref", "refs/heads/alias", "refs/heads/feature/x"],
    );
    let out = git(&w, "src", &["push", &app, "main:refs/heads/alias"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        w.git("repos/app.git", &["rev-parse", "refs/heads/feature/x"])
            .trim(),
        c2
    );
    assert_eq!(
        w.git("repos/app.git", &["rev-parse", "refs/heads/main"])
            .trim(),
        c1
    );
    w.assert_clean("repos/app.git");
}

#[test]
fn concurrent_first_pushes_create_the_repository_once_and_all_land() {
    let w = World::new();
    let srv = Serve::start(&w, &[]);
    const CLIENTS: usize = 8;
    for client in 0..CLIENTS {
        let repo = format!("src{client}");
        w.work(&repo);
        w.commit(&repo, "f", &format!("client {client}"));
    }
    for round in 0..3 {
        let url = srv.url(&format!("new{round}.git"));
        let barrier = std::sync::Barrier::new(CLIENTS);
        let outs: Vec<_> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..CLIENTS)
                .map(|client| {
                    let (w, url, barrier) = (&w, &url, &barrier);
                    s.spawn(move || {
                        barrier.wait();
                        git(
                            w,
                            &format!("src{client}"),
                            &["push", url, &format!("main:refs/heads/b{client}")],
                        )
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for (client, out) in outs.iter().enumerate() {
            assert!(
                out.status.success(),
                "round {round}, client {client}: {}\n{}",
                String::from_utf8_lossy(&out.stderr),
                srv.log()
            );
        }
        let repo = format!("repos/new{round}.git");
        let refs = server_refs(&w, &repo);
        assert_eq!(refs.lines().count(), CLIENTS, "{refs}");
        w.assert_clean(&repo);
        // Nothing of the creation is left beside it.
        let left: Vec<_> = std::fs::read_dir(w.path("repos"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with('.'))
            .collect();
        assert!(left.is_empty(), "{left:?}");
    }
}
