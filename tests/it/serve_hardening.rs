//! `berth serve` hardening (issue #21): a client cannot add or change a field of a text log
//! line (HTTP outcome, ssh refusal), hooks and `git upload-pack` get a clean environment over
//! HTTP and ssh (the server's secrets absent unless named with `--hook-env`, git's variables
//! present) while `berth receive-pack` keeps git's inherited one, and `/metrics` is served on
//! `--metrics-listen` or on a loopback main listener only. Driven by the real git client, raw
//! HTTP requests and OpenSSH's ssh.

use crate::common;
use crate::serve::{self, Serve};
use crate::ssh_serve;
use common::World;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Whether OpenSSH's client is installed; under CI a missing one is a failure, not a skip.
fn have_ssh(test: &str) -> bool {
    let ok = ["ssh", "ssh-keygen"]
        .iter()
        .all(|p| std::process::Command::new(p).arg("-V").output().is_ok());
    assert!(
        ok || std::env::var_os("CI").is_none(),
        "serve_hardening::{test}: no OpenSSH client under CI (apt-get install openssh-client)"
    );
    if !ok {
        eprintln!("SKIPPED serve_hardening::{test}: no OpenSSH client (ssh, ssh-keygen)");
    }
    ok
}

/// Wait (a hang guard, not a timing assertion) until `log()` has a line with `needle`.
fn line_with(log: impl Fn() -> String, needle: &str) -> String {
    let start = Instant::now();
    loop {
        if let Some(l) = log().lines().find(|l| l.contains(needle)) {
            return l.to_owned();
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no {needle:?} in:\n{}",
            log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The `key=value` fields of a text log line after `message`: a bare value runs to the next
/// space, a quoted one to its closing `"` (`\"` and `\\` inside). `None` when the line does not
/// split that way.
fn fields(line: &str, message: &str) -> Option<Vec<(String, String)>> {
    let (_, mut rest) = line.split_once(&format!(" {message} "))?;
    let mut out = Vec::new();
    while !rest.is_empty() {
        let (key, after) = rest.split_once('=')?;
        if key.is_empty() || !key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return None;
        }
        let (value, after) = match after.strip_prefix('"') {
            Some(q) => {
                let mut value = String::new();
                let mut chars = q.char_indices();
                let end = loop {
                    match chars.next()? {
                        (i, '"') => break i + 1,
                        (_, '\\') => value.push(chars.next()?.1),
                        (_, c) => value.push(c),
                    }
                };
                (value, &q[end..])
            }
            None => {
                let end = after.find(' ').unwrap_or(after.len());
                (after[..end].to_owned(), &after[end..])
            }
        };
        out.push((key.to_owned(), value));
        rest = match after.strip_prefix(' ') {
            Some(r) => r,
            None if after.is_empty() => after,
            None => return None,
        };
    }
    Some(out)
}

/// The one value of `key` in `fields`, or a panic naming the line when there are none or more.
fn only<'a>(fields: &'a [(String, String)], key: &str, line: &str) -> &'a str {
    let values: Vec<&str> = fields
        .iter()
        .filter(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
        .collect();
    assert_eq!(values.len(), 1, "{key} in {line:?}");
    values[0]
}

/// What a client sends to forge fields of the line its request is logged on.
const FORGED: &str = "x user=admin status=200";

#[test]
fn a_hostile_outcome_over_http_cannot_add_a_field() {
    let w = World::new();
    w.bare("repos/demo.git");
    let srv = Serve::start(&w, &[]);
    let r = serve::http(
        &srv.addr,
        "POST",
        "/demo.git/git-receive-pack",
        &[("Content-Type", FORGED)],
        b"0000",
    );
    assert_eq!(r.status, 415);
    let line = line_with(|| srv.log(), "status=415");
    let f = fields(&line, "request").unwrap_or_else(|| panic!("not key=value: {line:?}"));
    assert_eq!(only(&f, "user", &line), "anonymous");
    assert_eq!(only(&f, "status", &line), "415");
    assert!(only(&f, "outcome", &line).contains(FORGED), "{line:?}");
}

#[test]
fn a_hostile_refusal_over_ssh_cannot_add_a_field() {
    if !have_ssh("a_hostile_refusal_over_ssh_cannot_add_a_field") {
        return;
    }
    let w = ssh_serve::world();
    let srv = ssh_serve::Serve::start(&w, &[]);
    let out = ssh_serve::ssh(&w, &srv, "alice", &["git@127.0.0.1", FORGED]);
    assert!(!out.status.success());
    let line = line_with(|| srv.log(), "ssh request refused");
    let f =
        fields(&line, "ssh request refused").unwrap_or_else(|| panic!("not key=value: {line:?}"));
    assert_eq!(only(&f, "user", &line), "alice");
    assert!(only(&f, "refused", &line).contains(FORGED), "{line:?}");
    assert_eq!(f.len(), 3, "{line:?}");
}

/// The server's variables a hook must not see without `--hook-env`.
const SECRETS: [(&str, &str); 2] = [
    ("BERTH_TEST_SECRET", "hunter2"),
    ("DATABASE_URL", "postgres://berth:hunter2@db/berth"),
];

/// `repos/<name>` with pre- and post-receive hooks (and a `git upload-pack` pack-objects hook
/// in the global configuration the server reads) that dump their environment into
/// `<world>/<name>.<hook>.env`.
fn env_dumping_repo(w: &World, name: &str) {
    use std::os::unix::fs::PermissionsExt;
    w.bare(&format!("repos/{name}"));
    let repo = w.path(&format!("repos/{name}"));
    for hook in ["pre-receive", "post-receive"] {
        let dump = w.path(&format!("{name}.{hook}.env"));
        let path = repo.join("hooks").join(hook);
        std::fs::write(
            &path,
            format!("#!/bin/sh\ncat >/dev/null\nenv -0 > '{}'\n", dump.display()),
        )
        .unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    serve::ok(
        w.git_cmd(&repo)
            .args(["config", "receive.advertisePushOptions", "true"])
            .output()
            .unwrap(),
    );
    let pack_hook = w.path("pack-objects-hook");
    std::fs::write(
        &pack_hook,
        format!(
            "#!/bin/sh\nenv -0 > '{}'\nexec \"$@\"\n",
            w.path("upload-pack.env").display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&pack_hook, std::fs::Permissions::from_mode(0o755)).unwrap();
    serve::ok(
        w.git_cmd(".")
            .args(["config", "--global", "uploadpack.packObjectsHook"])
            .arg(&pack_hook)
            .output()
            .unwrap(),
    );
}

/// The environment a hook dumped.
fn dumped(w: &World, file: &str) -> BTreeMap<String, String> {
    let raw = std::fs::read(w.path(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
    String::from_utf8_lossy(&raw)
        .split('\0')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// Variables a hook of a clean environment may have: the base, git's configuration the test
/// world sets, the session's own, what git sets for its children (upload-pack's pack-objects
/// hook), and what the shell adds.
const CLEAN: &[&str] = &[
    "PATH",
    "HOME",
    "LANG",
    "LC_ALL",
    "GIT_CONFIG_NOSYSTEM",
    "GIT_CONFIG_GLOBAL",
    "GIT_AUTHOR_NAME",
    "GIT_AUTHOR_EMAIL",
    "GIT_AUTHOR_DATE",
    "GIT_COMMITTER_DATE",
    "GIT_DEFAULT_HASH",
    "GIT_DEFAULT_REF_FORMAT",
    "GIT_DIR",
    "GIT_QUARANTINE_PATH",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_PUSH_OPTION_COUNT",
    "GIT_PUSH_OPTION_0",
    "GIT_PROTOCOL",
    "GIT_COMMITTER_NAME",
    "GIT_COMMITTER_EMAIL",
    "REMOTE_USER",
    "REMOTE_ADDR",
    "GIT_EXEC_PATH",
    "GIT_NO_LAZY_FETCH",
    "PWD",
    "OLDPWD",
    "SHLVL",
    "_",
];

/// The pre-receive, post-receive and upload-pack dumps of a clean environment: no secret
/// unless `allowed`, git's and the session's variables there, nothing of the server's else.
fn check_clean(w: &World, name: &str, allowed: bool) {
    for file in [
        format!("{name}.pre-receive.env"),
        format!("{name}.post-receive.env"),
        "upload-pack.env".to_owned(),
    ] {
        let env = dumped(w, &file);
        for (k, v) in SECRETS {
            let expected = (allowed && k == "BERTH_TEST_SECRET").then_some(v);
            assert_eq!(
                env.get(k).map(String::as_str),
                expected,
                "{k} in {file}: {env:?}"
            );
        }
        for k in ["PATH", "HOME", "GIT_CONFIG_NOSYSTEM", "GIT_CONFIG_GLOBAL"] {
            assert!(env.contains_key(k), "{k} in {file}: {env:?}");
        }
        let extra: Vec<&String> = env
            .keys()
            .filter(|k| !(CLEAN.contains(&k.as_str()) || allowed && *k == "BERTH_TEST_SECRET"))
            .collect();
        assert!(extra.is_empty(), "{extra:?} in {file}: {env:?}");
    }
    let pre = dumped(w, &format!("{name}.pre-receive.env"));
    for k in [
        "GIT_DIR",
        "GIT_QUARANTINE_PATH",
        "GIT_OBJECT_DIRECTORY",
        "GIT_ALTERNATE_OBJECT_DIRECTORIES",
        "REMOTE_ADDR",
        "GIT_COMMITTER_NAME",
        "GIT_COMMITTER_EMAIL",
    ] {
        assert!(pre.contains_key(k), "{k} in pre-receive: {pre:?}");
    }
    assert_eq!(
        pre.get("GIT_PUSH_OPTION_COUNT").map(String::as_str),
        Some("1")
    );
    assert_eq!(
        pre.get("GIT_PUSH_OPTION_0").map(String::as_str),
        Some("hello")
    );
    let post = dumped(w, &format!("{name}.post-receive.env"));
    assert!(post.contains_key("GIT_DIR"), "{post:?}");
    assert_eq!(
        post.get("GIT_PUSH_OPTION_0").map(String::as_str),
        Some("hello")
    );
}

#[test]
fn hooks_and_upload_pack_over_http_get_a_clean_environment() {
    for allowed in [false, true] {
        let w = World::new();
        env_dumping_repo(&w, "h.git");
        let args: &[&str] = if allowed {
            &["--hook-env", "BERTH_TEST_SECRET"]
        } else {
            &[]
        };
        let srv = Serve::start_with_env(&w, args, &SECRETS);
        w.work("src");
        w.commit("src", "a", "1");
        serve::ok(serve::git(
            &w,
            "src",
            &["push", "-o", "hello", &srv.url("h.git"), "main"],
        ));
        serve::ok(serve::git(&w, ".", &["clone", &srv.url("h.git"), "dst"]));
        check_clean(&w, "h.git", allowed);
    }
}

#[test]
fn hooks_and_upload_pack_over_ssh_get_a_clean_environment() {
    if !have_ssh("hooks_and_upload_pack_over_ssh_get_a_clean_environment") {
        return;
    }
    for allowed in [false, true] {
        let w = ssh_serve::world();
        env_dumping_repo(&w, "h.git");
        let args: &[&str] = if allowed {
            &["--hook-env", "BERTH_TEST_SECRET"]
        } else {
            &[]
        };
        let srv = ssh_serve::Serve::start_with_env(&w, args, &SECRETS);
        w.work("src");
        w.commit("src", "a", "1");
        let url = srv.url("h.git");
        serve::ok(ssh_serve::git_ssh(
            &w,
            &srv,
            "alice",
            "src",
            &["push", "-o", "hello", &url, "main"],
        ));
        serve::ok(ssh_serve::git_ssh(
            &w,
            &srv,
            "alice",
            ".",
            &["clone", &url, "dst"],
        ));
        check_clean(&w, "h.git", allowed);
        let pre = dumped(&w, "h.git.pre-receive.env");
        assert_eq!(pre.get("REMOTE_USER").map(String::as_str), Some("alice"));
    }
}

#[test]
fn berth_receive_pack_still_passes_its_whole_environment_to_hooks() {
    let w = World::new();
    env_dumping_repo(&w, "h.git");
    w.work("src");
    w.commit("src", "a", "1");
    let receive_pack = format!("{} receive-pack", common::berth().display());
    let out = w
        .git_cmd("src")
        .envs(SECRETS)
        .args(["push", "-o", "hello", "--receive-pack", &receive_pack])
        .arg(w.path("repos/h.git"))
        .arg("main")
        .output()
        .unwrap();
    serve::ok(out);
    for hook in ["pre-receive", "post-receive"] {
        let env = dumped(&w, &format!("h.git.{hook}.env"));
        for (k, v) in SECRETS {
            assert_eq!(env.get(k).map(String::as_str), Some(v), "{k} in {hook}");
        }
        assert!(env.contains_key("GIT_DIR"), "{env:?}");
    }
}

/// `GET path` on `addr`: the status and the body.
fn get(addr: &str, path: &str) -> (u16, String) {
    let r = serve::http(addr, "GET", path, &[], b"");
    (r.status, String::from_utf8_lossy(&r.body).into_owned())
}

#[test]
fn metrics_on_their_own_listener_and_on_a_loopback_main_listener_only() {
    // Loopback, no --metrics-listen: served on the main listener, as before.
    let w = World::new();
    let srv = Serve::start(&w, &[]);
    let (status, body) = get(&srv.addr, "/metrics");
    assert_eq!(status, 200);
    assert!(body.contains("berth_pushes_total"), "{body}");
    drop(srv);

    // --metrics-listen: there (with /healthz), and 404 on the main listener.
    let srv = Serve::start(&w, &["--metrics-listen", "127.0.0.1:0"]);
    let line = line_with(|| srv.log(), "serving metrics");
    let metrics = line
        .split(" listen=")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or_else(|| panic!("{line:?}"))
        .to_owned();
    assert_eq!(get(&srv.addr, "/metrics").0, 404);
    assert_eq!(get(&srv.addr, "/healthz").0, 200);
    let (status, body) = get(&metrics, "/metrics");
    assert_eq!(status, 200);
    assert!(body.contains("berth_pushes_total"), "{body}");
    assert_eq!(get(&metrics, "/healthz"), (200, "ok\n".to_owned()));
    assert_eq!(
        get(&metrics, "/demo.git/info/refs?service=git-upload-pack").0,
        404
    );
    // curl, for the usual scraper's view.
    let out = std::process::Command::new("curl")
        .args(["-s", "-o", "/dev/null", "-w", "%{http_code}"])
        .arg(format!("http://{}/metrics", srv.addr))
        .output();
    if let Ok(out) = out {
        assert_eq!(String::from_utf8_lossy(&out.stdout), "404");
    }
    drop(srv);

    // Not on loopback, no --metrics-listen: nowhere.
    let creds = w.path("creds");
    std::fs::write(&creds, serve::credentials(&w, "alice", "s3cret")).unwrap();
    let srv = Serve::launch_at(
        &w,
        None,
        "0.0.0.0:0",
        &["--credentials", creds.to_str().unwrap()],
        &[],
    );
    let port = srv.addr.rsplit(':').next().unwrap();
    let local = format!("127.0.0.1:{port}");
    assert_eq!(get(&local, "/metrics").0, 404);
    assert_eq!(get(&local, "/healthz"), (200, "ok\n".to_owned()));
}
