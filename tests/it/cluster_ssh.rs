//! `berth serve --cluster` over ssh: three berth nodes with their embedded ssh servers and a
//! real three-member etcd (the harness of `cluster.rs`), pushed to and fetched from with the
//! real git client over OpenSSH. An ssh push to a replica is committed through etcd and applied
//! everywhere; through the node that holds no replica it is forwarded (over the internal ssh
//! tunnel) with the same report and the same access rules; HTTP and ssh pushes to one
//! repository converge. Skipped (said on stderr) without `etcd`.

use crate::cluster::{Cluster, porcelain, push};
use crate::cluster_fixture::{Duplex, cluster, cluster_world};
use crate::common;
use common::World;

use std::collections::BTreeMap;
use std::process::{Command, Output};

/// A new ed25519 key `<world>/keys/<name>`, its public half in the keydir as `<name>.pub`.
fn user_key(w: &World, name: &str) {
    let dir = w.path("keys");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::create_dir_all(w.path("keydir")).unwrap();
    let out = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", name, "-f"])
        .arg(dir.join(name))
        .output()
        .expect("ssh-keygen (openssh-client) must be installed");
    assert!(out.status.success(), "{out:?}");
    std::fs::copy(
        dir.join(format!("{name}.pub")),
        w.path(&format!("keydir/{name}.pub")),
    )
    .unwrap();
}

/// The `berth serve` arguments that make a node serve ssh too: the keys of alice and bob (made
/// here) in the keydir, one host key (see [`crate::cluster_fixture::Setup::ssh`]).
pub(crate) fn ssh_args(w: &World) -> Vec<String> {
    user_key(w, "alice");
    user_key(w, "bob");
    let keydir = w.path("keydir").display().to_string();
    let host_key = w.path("host_key").display().to_string();
    ["--ssh-listen", "127.0.0.1:0", "--keydir", &keydir]
        .into_iter()
        .chain(["--ssh-host-key", &host_key])
        .map(str::to_owned)
        .collect()
}

/// Write `<world>/known_hosts`, which pins every node's address to its host key.
pub(crate) fn pin_host_keys(w: &World, c: &Cluster) {
    let lines: String = c
        .nodes
        .iter()
        .map(|n| {
            let p = n.process.as_ref().unwrap();
            let line = p
                .stdout
                .lines()
                .find_map(|l| l.trim().strip_prefix("berth serve: known_hosts "))
                .unwrap_or_else(|| panic!("no known_hosts line from {}: {:?}", n.name, p.stdout));
            format!("{line}\n")
        })
        .collect();
    std::fs::write(w.path("known_hosts"), lines).unwrap();
}

/// `ssh://git@127.0.0.1:<node i's ssh port>/<repo>`.
pub(crate) fn url(c: &Cluster, i: usize, repo: &str) -> String {
    let port = c.nodes[i].ssh_port.expect("node serves ssh");
    format!("ssh://git@127.0.0.1:{port}/{repo}")
}

/// `GIT_SSH_COMMAND` for `key`, pinning the host keys.
fn ssh_command(w: &World, key: &str) -> String {
    format!(
        "ssh -i {} -o IdentitiesOnly=yes -o BatchMode=yes -o UserKnownHostsFile={} \
         -o StrictHostKeyChecking=yes -o LogLevel=ERROR",
        w.path("keys").join(key).display(),
        w.path("known_hosts").display(),
    )
}

/// git in `repo` over ssh as `key`.
pub(crate) fn git_ssh(w: &World, key: &str, repo: &str, args: &[&str]) -> Output {
    w.git_cmd(repo)
        .env("GIT_SSH_COMMAND", ssh_command(w, key))
        .args(args)
        .output()
        .unwrap()
}

/// `git push --porcelain <url> <refspecs>` over ssh as `key`.
pub(crate) fn push_ssh(w: &World, key: &str, repo: &str, url: &str, refspecs: &[&str]) -> Output {
    let mut args = vec!["push", "--porcelain", url];
    args.extend_from_slice(refspecs);
    git_ssh(w, key, repo, &args)
}

fn must(out: Output, c: &Cluster, what: &str) -> Output {
    assert!(
        out.status.success(),
        "{what}: {}{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        c.logs()
    );
    out
}

/// The index of the node that holds no replica of `repo` (with `--replicas 2`).
fn non_holder(c: &Cluster, repo: &str) -> usize {
    let holders: Vec<String> = c.holders(repo).iter().map(|n| n.name.clone()).collect();
    assert_eq!(holders.len(), 2, "{holders:?}");
    (0..3)
        .find(|&i| !holders.contains(&c.nodes[i].name))
        .unwrap()
}

/// The porcelain report without its `To <url>` line and with the ref name made comparable.
fn report(out: &Output, dst: &str) -> String {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.starts_with("To "))
        .map(|l| format!("{}\n", l.replace(dst, "<ref>")))
        .collect()
}

#[test]
fn an_ssh_push_to_a_replica_is_replicated() {
    let Some(w) = cluster_world() else { return };
    let c = cluster(&w).ssh().start();
    let src = w.work("src");
    // The first push places and creates the repository; each later one goes to another node.
    for (i, content) in ["one", "two", "three", "four"].iter().enumerate() {
        let head = w.commit(&src, "a", content);
        let out = must(
            push_ssh(
                &w,
                "alice",
                &src,
                &url(&c, i % 3, "demo.git"),
                &["HEAD:refs/heads/main"],
            ),
            &c,
            &format!("ssh push {i}"),
        );
        assert_eq!(
            porcelain(&out).get("refs/heads/main"),
            Some(&true),
            "{out:?}"
        );
        let refs = c.converged(&w, "demo.git", 3);
        assert_eq!(refs.get("refs/heads/main"), Some(&head));
    }
    c.assert_fsck(&w, "demo.git");
    // Every entry was committed through the log: each replica applied 4 entries.
    for n in c.holders("demo.git") {
        let seq = std::fs::read_to_string(n.dir("demo.git").join("berth-cluster-seq")).unwrap();
        assert_eq!(seq.trim(), "4", "{}", n.name);
    }
    if let Some(keys) = c.etcd.keys("/berth/logs/demo") {
        assert_eq!(keys, vec!["/berth/logs/demo".to_owned()]);
    }
    // The accepting node logged the key's user as the pusher.
    assert!(
        c.nodes[0]
            .log()
            .lines()
            .any(|l| l.contains("route=\"receive-pack\"")
                && l.contains("method=SSH")
                && l.contains("user=alice")
                && l.contains("outcome=ok")),
        "{}",
        c.logs()
    );
    // An ssh clone from every node has main.
    for i in 0..3 {
        let dst = format!("clone{i}");
        must(
            git_ssh(
                &w,
                "alice",
                ".",
                &["clone", "-q", &url(&c, i, "demo.git"), &dst],
            ),
            &c,
            "clone",
        );
        assert_eq!(
            w.git(&dst, &["rev-parse", "HEAD"]),
            w.git(&src, &["rev-parse", "HEAD"])
        );
    }
}

#[test]
fn a_node_without_a_replica_forwards_ssh_pushes_and_fetches() {
    let Some(w) = cluster_world() else { return };
    let (c, src) = cluster(&w).replicas(2).ssh().with_repo("app.git");
    let away = non_holder(&c, "app.git");
    let near = (away + 1) % 3;

    // The same new branch pushed directly and through the node without a replica: the same
    // report, and the node still holds no replica.
    let head = w.commit(&src, "a", "two");
    let direct_url = url(&c, near, "app.git");
    let direct = push_ssh(&w, "alice", &src, &direct_url, &["HEAD:refs/heads/direct"]);
    let direct = must(direct, &c, "direct push");
    let away_url = url(&c, away, "app.git");
    let forwarded = push_ssh(&w, "alice", &src, &away_url, &["HEAD:refs/heads/forwarded"]);
    let forwarded = must(forwarded, &c, "forwarded push");
    assert_eq!(
        report(&forwarded, "refs/heads/forwarded"),
        report(&direct, "refs/heads/direct"),
    );
    assert!(
        String::from_utf8_lossy(&forwarded.stdout)
            .contains("*\tHEAD:refs/heads/forwarded\t[new branch]"),
        "{forwarded:?}"
    );
    // What the server said on stderr (`remote:` lines), the same too.
    assert_eq!(
        String::from_utf8_lossy(&forwarded.stderr).replace("forwarded", "<ref>"),
        String::from_utf8_lossy(&direct.stderr).replace("direct", "<ref>"),
    );
    let refs = c.converged(&w, "app.git", 2);
    assert_eq!(refs.get("refs/heads/forwarded"), Some(&head));
    assert_eq!(refs.get("refs/heads/direct"), Some(&head));
    assert!(!c.nodes[away].dir("app.git").exists());
    c.assert_fsck(&w, "app.git");
    // The replica that ran it logged the user the forwarding node authenticated, and the
    // client's address.
    assert!(
        c.logs()
            .lines()
            .any(|l| l.contains("route=\"receive-pack\"")
                && l.contains("method=SSH")
                && l.contains("user=alice")
                && l.contains("remote=127.0.0.1")),
        "{}",
        c.logs()
    );

    // Clone and fetch through the node without a replica.
    must(
        git_ssh(
            &w,
            "alice",
            ".",
            &["clone", "-q", "-b", "main", &away_url, "clone"],
        ),
        &c,
        "forwarded clone",
    );
    assert_eq!(
        w.git("clone", &["rev-parse", "refs/remotes/origin/forwarded"])
            .trim(),
        head
    );
    let three = w.commit(&src, "a", "three");
    must(
        push_ssh(&w, "alice", &src, &direct_url, &["HEAD:refs/heads/main"]),
        &c,
        "push",
    );
    c.converged(&w, "app.git", 2);
    must(
        git_ssh(&w, "alice", "clone", &["fetch", "-q", "origin"]),
        &c,
        "forwarded fetch",
    );
    assert_eq!(
        w.git("clone", &["rev-parse", "refs/remotes/origin/main"])
            .trim(),
        three
    );
    // Protocol v0 too (no GIT_PROTOCOL sent), and ls-remote.
    let out = must(
        git_ssh(
            &w,
            "alice",
            ".",
            &[
                "-c",
                "protocol.version=0",
                "ls-remote",
                &away_url,
                "refs/heads/main",
            ],
        ),
        &c,
        "forwarded ls-remote v0",
    );
    assert!(String::from_utf8_lossy(&out.stdout).starts_with(&three));
    // A repository that is nowhere: git's own message, through any node.
    let out = git_ssh(
        &w,
        "alice",
        ".",
        &["ls-remote", &url(&c, away, "nothing.git")],
    );
    assert!(!out.status.success());
    assert!(!c.nodes[away].dir("app.git").exists());
}

#[test]
fn access_rules_apply_through_a_forwarded_ssh_push() {
    let Some(w) = cluster_world() else { return };
    std::fs::write(
        w.path("access.conf"),
        "repo team/app\n    C   = alice\n    RW+ = alice\n    -   refs/tags/ = bob\n    RW  = bob\n\
         repo secret\n    C   = alice\n    RW+ = alice\n",
    )
    .unwrap();
    let access = w.path("access.conf").display().to_string();
    let c = cluster(&w)
        .replicas(2)
        .ssh()
        .args(&["--access", &access])
        .start();
    let src = w.work("src");
    w.commit(&src, "a", "1");
    w.git(&src, &["tag", "v1"]);
    must(
        push_ssh(
            &w,
            "alice",
            &src,
            &url(&c, 0, "team/app.git"),
            &["main:refs/heads/main"],
        ),
        &c,
        "alice creates team/app",
    );
    c.converged(&w, "team/app.git", 2);
    let away = non_holder(&c, "team/app.git");

    // bob, through the node without a replica: the branch lands, the tag is refused by the
    // `-` rule, in one push; as over ssh to a single node.
    w.git(&src, &["branch", "bobs"]);
    let out = push_ssh(
        &w,
        "bob",
        &src,
        &url(&c, away, "team/app.git"),
        &["bobs", "v1"],
    );
    assert!(!out.status.success(), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("*\trefs/heads/bobs:refs/heads/bobs\t[new branch]"),
        "{stdout}\n{}",
        c.logs()
    );
    assert!(
        stdout.contains("!\trefs/tags/v1:refs/tags/v1\t[remote rejected] (access denied"),
        "{stdout}"
    );
    let refs = c.converged(&w, "team/app.git", 2);
    assert!(refs.contains_key("refs/heads/bobs"), "{refs:?}");
    assert!(!refs.contains_key("refs/tags/v1"), "{refs:?}");
    assert!(!c.nodes[away].dir("team/app.git").exists());
    // The refusal reads the same, stdout and stderr, pushed directly or forwarded.
    let near = (away + 1) % 3;
    w.git(&src, &["tag", "v2"]);
    w.git(&src, &["tag", "v3"]);
    let direct = push_ssh(&w, "bob", &src, &url(&c, near, "team/app.git"), &["v2"]);
    let forwarded = push_ssh(&w, "bob", &src, &url(&c, away, "team/app.git"), &["v3"]);
    assert!(!direct.status.success() && !forwarded.status.success());
    assert_eq!(report(&forwarded, "v3"), report(&direct, "v2"));
    assert!(
        report(&forwarded, "v3").contains("(access denied"),
        "{forwarded:?}"
    );
    assert_eq!(
        String::from_utf8_lossy(&forwarded.stderr)
            .replace(&url(&c, away, "team/app.git").replace("git@", ""), "<url>")
            .replace("v3", "<ref>"),
        String::from_utf8_lossy(&direct.stderr)
            .replace(&url(&c, near, "team/app.git").replace("git@", ""), "<url>")
            .replace("v2", "<ref>"),
    );
    eprintln!(
        "a refused push's stderr: {:?}",
        String::from_utf8_lossy(&direct.stderr)
    );

    // alice creates `secret`; bob may not read it, even through the forwarding node.
    must(
        push_ssh(
            &w,
            "alice",
            &src,
            &url(&c, 1, "secret.git"),
            &["main:refs/heads/main"],
        ),
        &c,
        "alice creates secret",
    );
    c.converged(&w, "secret.git", 2);
    for i in 0..3 {
        let out = git_ssh(&w, "bob", ".", &["ls-remote", &url(&c, i, "secret.git")]);
        assert!(!out.status.success(), "bob read secret via n{i}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("not found"), "{err}");
        must(
            git_ssh(&w, "alice", ".", &["ls-remote", &url(&c, i, "secret.git")]),
            &c,
            "alice reads secret",
        );
    }
}

#[test]
fn http_and_ssh_pushes_to_one_repository_converge() {
    let Some(w) = cluster_world() else { return };
    let c = cluster(&w).ssh().start();
    let src = w.work("src");
    w.commit(&src, "a", "0");
    must(
        push(
            &w,
            &src,
            &c.nodes[2].url("mix.git"),
            &["HEAD:refs/heads/main"],
        ),
        &c,
        "http push creates",
    );
    // One after another, alternating transports and nodes, on the same branch.
    for i in 0..4 {
        let head = w.commit(&src, "a", &format!("step {i}"));
        let out = if i % 2 == 0 {
            push_ssh(
                &w,
                "alice",
                &src,
                &url(&c, i % 3, "mix.git"),
                &["HEAD:refs/heads/main"],
            )
        } else {
            push(
                &w,
                &src,
                &c.nodes[i % 3].url("mix.git"),
                &["HEAD:refs/heads/main"],
            )
        };
        must(out, &c, &format!("push {i}"));
        assert_eq!(
            c.converged(&w, "mix.git", 3).get("refs/heads/main"),
            Some(&head)
        );
    }
    // At once: clients over ssh and over HTTP, each its own branch, to different nodes.
    let mut commits = Vec::new();
    for t in 0..4 {
        let repo = format!("c{t}");
        w.git(".", &["clone", "-q", &c.nodes[0].url("mix.git"), &repo]);
        commits.push(w.commit(&repo, &format!("f{t}"), &format!("client {t}")));
    }
    let results: Vec<BTreeMap<String, bool>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|t| {
                let (w, c) = (&w, &c);
                s.spawn(move || {
                    let b = format!("HEAD:refs/heads/t{t}");
                    let repo = format!("c{t}");
                    let out = if t % 2 == 0 {
                        push_ssh(w, "alice", &repo, &url(c, t % 3, "mix.git"), &[&b])
                    } else {
                        push(w, &repo, &c.nodes[t % 3].url("mix.git"), &[&b])
                    };
                    porcelain(&out)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    eprintln!("concurrent http and ssh pushes, what each client was told: {results:?}");
    let refs = c.converged(&w, "mix.git", 3);
    c.assert_fsck(&w, "mix.git");
    let accepted = c.assert_told(&results, &refs, &commits);
    assert!(accepted > 0, "{results:?}\n{}", c.logs());
    // Every transport reads the same refs from every node.
    for i in 0..3 {
        let over_ssh = git_ssh(&w, "alice", ".", &["ls-remote", &url(&c, i, "mix.git")]);
        let over_http = w.git_out(".", &["ls-remote", &c.nodes[i].url("mix.git")]);
        assert_eq!(
            String::from_utf8_lossy(&must(over_ssh, &c, "ls-remote ssh").stdout),
            String::from_utf8_lossy(&must(over_http, &c, "ls-remote http").stdout)
        );
    }
}

#[test]
fn a_replica_behind_the_log_forwards_ssh_fetches() {
    let Some(w) = cluster_world() else { return };
    let c = cluster(&w).ssh().start();
    let src = w.work("src");
    w.commit(&src, "a", "one");
    // Over HTTP: what this test shows is the ssh fetch's routing alone.
    must(
        push(
            &w,
            &src,
            &c.nodes[0].url("lag.git"),
            &["HEAD:refs/heads/main"],
        ),
        &c,
        "push",
    );
    let head = w.commit(&src, "a", "two");
    must(
        push(
            &w,
            &src,
            &c.nodes[1].url("lag.git"),
            &["HEAD:refs/heads/main"],
        ),
        &c,
        "push",
    );
    c.converged(&w, "lag.git", 3);
    // n2 forgets it applied the log and cannot record catching up (its temporary file is a
    // directory): it stays behind, so it must not serve the repository itself.
    let dir = c.nodes[2].dir("lag.git");
    std::fs::create_dir(dir.join("berth-cluster-seq.tmp")).unwrap();
    std::fs::write(dir.join("berth-cluster-seq"), "1\n").unwrap();
    let upload_lines = |i: usize| {
        c.nodes[i]
            .log()
            .lines()
            .filter(|l| l.contains("route=\"upload-pack\"") && l.contains("user=alice"))
            .count()
    };
    must(
        git_ssh(
            &w,
            "alice",
            ".",
            &["clone", "-q", &url(&c, 2, "lag.git"), "clone"],
        ),
        &c,
        "clone through the node behind",
    );
    assert_eq!(w.git("clone", &["rev-parse", "HEAD"]).trim(), head);
    // Logged on n2 (which relayed it) and on the replica that served it.
    assert_eq!(upload_lines(2), 1, "{}", c.logs());
    assert_eq!(upload_lines(0) + upload_lines(1), 1, "{}", c.logs());
    // Able to record again, it catches up and serves again.
    std::fs::remove_dir(dir.join("berth-cluster-seq.tmp")).unwrap();
    c.converged(&w, "lag.git", 3);
}

/// One raw HTTP/1.1 request for the ssh tunnel to node `i` (as another node:
/// [`Cluster::internal`]): the status code and the connection, read up to the end of the
/// response head.
fn open_raw(c: &Cluster, i: usize, headers: &[(&str, &str)]) -> (u16, Box<dyn Duplex>) {
    use std::io::Read;
    let mut req = String::from(
        "POST /_berth/cluster/ssh HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n\
         Connection: upgrade\r\nUpgrade: berth-ssh\r\n",
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    let mut s = c.internal(i, &req);
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        s.read_exact(&mut b).unwrap();
        head.push(b[0]);
    }
    let status = String::from_utf8_lossy(&head[9..12]).parse().unwrap();
    (status, s)
}

fn status_of(c: &Cluster, i: usize, headers: &[(&str, &str)]) -> u16 {
    open_raw(c, i, headers).0
}

/// The frames a tunnel sends until it closes (kind, payload).
fn frames_until_closed(s: &mut Box<dyn Duplex>, c: &Cluster) -> Vec<(u8, Vec<u8>)> {
    use std::io::Read;
    let mut all = Vec::new();
    if let Err(e) = s.read_to_end(&mut all) {
        panic!("the tunnel did not close ({e}): read {all:?}\n{}", c.logs());
    }
    let mut out = Vec::new();
    let mut rest = &all[..];
    while rest.len() >= 5 {
        let len = u32::from_be_bytes([rest[1], rest[2], rest[3], rest[4]]) as usize;
        let end = (5 + len).min(rest.len());
        out.push((rest[0], rest[5..end].to_vec()));
        rest = &rest[end..];
    }
    out
}

#[test]
fn the_ssh_tunnel_endpoint_wants_the_secret_and_checks_what_it_is_asked() {
    let Some(w) = cluster_world() else { return };
    let (c, _) = cluster(&w)
        .replicas(2)
        .ssh()
        .args(&["--idle-timeout", "3"])
        .with_repo("app.git");
    let away = non_holder(&c, "app.git");
    let near = (away + 1) % 3;
    let good = [
        ("x-berth-ssh-service", "git-upload-pack"),
        ("x-berth-ssh-repo", "app.git"),
        ("x-berth-ssh-user", "alice"),
        ("x-berth-ssh-addr", "127.0.0.1:4242"),
    ];
    // Without the cluster secret, or with a wrong one: refused before anything is read.
    assert_eq!(status_of(&c, near, &good), 403);
    let mut wrong = good.to_vec();
    wrong.push(("x-berth-cluster-secret", "00"));
    assert_eq!(status_of(&c, near, &wrong), 403);
    let Some(secret) = c.etcd.value("/berth/secret") else {
        eprintln!(
            "etcdctl not usable (apt-get install etcd-client): the checks with the secret are not run"
        );
        return;
    };
    let asked = |i: usize, key: &str, value: Option<&str>| {
        let mut h: Vec<(&str, &str)> = good.iter().filter(|(k, _)| *k != key).copied().collect();
        if let Some(v) = value {
            h.push((key, v));
        }
        h.push(("x-berth-cluster-secret", &secret));
        status_of(&c, i, &h)
    };
    // With it: every header checked.
    for (key, bad) in [
        ("x-berth-ssh-service", Some("git-upload-archive")),
        ("x-berth-ssh-service", None),
        ("x-berth-ssh-repo", Some("../app.git")),
        ("x-berth-ssh-repo", None),
        ("x-berth-ssh-user", Some("-alice")),
        ("x-berth-ssh-user", None),
        ("x-berth-ssh-addr", Some("nowhere")),
        ("x-berth-ssh-protocol", Some("version=2;rm")),
    ] {
        assert_eq!(asked(near, key, bad), 400, "{key}: {bad:?}");
    }
    // A node that holds no replica does not serve the tunnel; a replica upgrades.
    assert_eq!(asked(away, "", None), 409);
    assert_eq!(asked(near, "", None), 101);

    // Bounds: a tunnel that says nothing is closed after --idle-timeout (3 s here), with the
    // exit status as its last frame; so is one that sends a frame over 1 MiB.
    let mut h: Vec<(&str, &str)> = good.to_vec();
    h.push(("x-berth-cluster-secret", &secret));
    let started = std::time::Instant::now();
    let (status, mut silent) = open_raw(&c, near, &h);
    assert_eq!(status, 101);
    let frames = frames_until_closed(&mut silent, &c);
    // Closed by the idle timeout (3 s): within ten times it.
    assert!(
        started.elapsed() < std::time::Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
    assert!(
        frames.iter().any(|f| f.0 == 1),
        "no advertisement: {frames:?}"
    );
    assert_eq!(frames.last().map(|f| f.0), Some(3), "{frames:?}");
    let (status, mut big) = open_raw(&c, near, &h);
    assert_eq!(status, 101);
    {
        use std::io::Write;
        let mut head = vec![1u8];
        head.extend_from_slice(&(2u32 << 20).to_be_bytes());
        big.write_all(&head).unwrap();
        let _ = big.write_all(&vec![b'0'; 4096]);
    }
    let frames = frames_until_closed(&mut big, &c);
    assert_eq!(frames.last().map(|f| f.0), Some(3), "{frames:?}");
}

#[test]
fn the_forwarding_node_killed_mid_ssh_push_ends_the_session_and_the_replicas_agree() {
    let Some(w) = cluster_world() else { return };
    let (mut c, src) = cluster(&w).replicas(2).ssh().with_repo("app.git");
    let away = non_holder(&c, "app.git");
    // The replica that runs the forwarded push holds it in pre-receive for 3 s.
    for n in c.holders("app.git") {
        let hook = n.dir("app.git").join("hooks/pre-receive");
        std::fs::write(&hook, "#!/bin/sh\ncat >/dev/null\nsleep 3\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let sessions = |c: &Cluster| {
        c.holders("app.git")
            .iter()
            .map(|n| {
                n.log()
                    .lines()
                    .filter(|l| l.contains("route=\"receive-pack\"") && l.contains("user=alice"))
                    .count()
            })
            .sum::<usize>()
    };
    let before = sessions(&c);
    let pushed = w.commit(&src, "a", "two");
    let away_url = url(&c, away, "app.git");
    let out = std::thread::scope(|s| {
        let push = s.spawn(|| push_ssh(&w, "alice", &src, &away_url, &["HEAD:refs/heads/late"]));
        std::thread::sleep(std::time::Duration::from_millis(1500));
        c.kill_node(away);
        push.join().unwrap()
    });
    // The client was not told `ok`.
    assert!(!out.status.success(), "{out:?}");
    assert_ne!(porcelain(&out).get("refs/heads/late"), Some(&true));
    // The replica's session ended (its access line is written when it does) ...
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while sessions(&c) <= before {
        assert!(
            std::time::Instant::now() < deadline,
            "the tunneled session did not end\n{}",
            c.logs()
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    for n in c.holders("app.git") {
        for l in n
            .log()
            .lines()
            .filter(|l| l.contains("route=\"receive-pack\""))
        {
            eprintln!("{}: {l}", n.name);
        }
    }
    // ... and the replicas agree: the push landed everywhere or nowhere.
    let refs = c.converged(&w, "app.git", 2);
    c.assert_fsck(&w, "app.git");
    match refs.get("refs/heads/late") {
        None => {}
        Some(id) => assert_eq!(id, &pushed),
    }
}

#[test]
fn a_replica_killed_moments_ago_is_passed_over_for_another() {
    let Some(w) = cluster_world() else { return };
    let (mut c, src) = cluster(&w).replicas(2).ssh().with_repo("app.git");
    let head = w.git(&src, &["rev-parse", "HEAD"]).trim().to_owned();
    let away = non_holder(&c, "app.git");
    // The replica the node without one forwards to first: the first one recorded.
    let Some(first) = c.etcd.value("/berth/repos/app/replicas").and_then(|v| {
        let name = v.split('"').nth(1)?.to_owned();
        c.nodes.iter().position(|n| n.name == name)
    }) else {
        eprintln!("etcdctl not usable (apt-get install etcd-client): test not run");
        return;
    };
    // Killed: still listed as live until its lease expires (10 s), but it does not answer.
    c.kill_node(first);
    let out = must(
        git_ssh(
            &w,
            "alice",
            ".",
            &["ls-remote", &url(&c, away, "app.git"), "refs/heads/main"],
        ),
        &c,
        "ls-remote through the node without a replica, its first replica dead",
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).starts_with(&head),
        "{out:?}"
    );
    // A push gets there too, and is refused by the cluster (2 replicas, one dead: no
    // quorum), not by the forwarding.
    w.commit(&src, "a", "two");
    let out = push_ssh(
        &w,
        "alice",
        &src,
        &url(&c, away, "app.git"),
        &["HEAD:refs/heads/main"],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("!\tHEAD:refs/heads/main\t[remote rejected]"),
        "{out:?}\n{}",
        c.logs()
    );
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("did not answer"),
        "{out:?}"
    );
}
