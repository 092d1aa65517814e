//! `berth serve` end to end: the built binary on an ephemeral loopback port, driven by the real
//! git client (push, clone, credentials) and by raw HTTP requests where the client cannot say
//! what we need to (path escapes, gzip bodies, content types, byte-level answers).

use crate::common;
use common::World;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// A running `berth serve`, killed when dropped.
pub(crate) struct Serve {
    pub(crate) addr: String,
    pub(crate) process: common::ServeProcess,
}

impl Serve {
    /// Start `berth serve --root <world>/repos --listen 127.0.0.1:0 <args>` and wait for the
    /// address it prints.
    pub(crate) fn start(w: &World, args: &[&str]) -> Serve {
        Serve::launch(w, None, args, &[])
    }

    /// As [`Serve::start`], with more environment for the server process.
    pub(crate) fn start_with_env(w: &World, args: &[&str], env: &[(&str, &str)]) -> Serve {
        Serve::launch(w, None, args, env)
    }

    /// As [`Serve::start`], with the descriptor limit (soft and hard) set to `nofile` first.
    fn start_with_nofile(w: &World, nofile: u32, args: &[&str]) -> Serve {
        Serve::launch(w, Some(nofile), args, &[])
    }

    fn launch(w: &World, nofile: Option<u32>, args: &[&str], env: &[(&str, &str)]) -> Serve {
        Serve::launch_at(w, nofile, "127.0.0.1:0", args, env)
    }

    /// As [`Serve::start_with_env`], listening on `listen` instead of `127.0.0.1:0`.
    pub(crate) fn launch_at(
        w: &World,
        nofile: Option<u32>,
        listen: &str,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Serve {
        let mut cmd = match nofile {
            None => w.cmd(common::berth(), "."),
            Some(n) => {
                let mut c = w.cmd("sh", ".");
                c.args(["-c", &format!("ulimit -n {n} && exec \"$0\" \"$@\"")])
                    .arg(common::berth());
                c
            }
        };
        cmd.envs(env.iter().copied())
            .arg("serve")
            .arg("--root")
            .arg(w.path("repos"))
            .args(["--listen", listen])
            .args(args);
        let process = common::ServeProcess::spawn(cmd, |out| out.contains('\n'));
        let line = process.stdout.trim();
        let addr = line
            .strip_prefix("berth serve: listening on http://")
            .or_else(|| line.strip_prefix("berth serve: listening on https://"))
            .and_then(|a| a.strip_suffix('/'))
            .unwrap_or_else(|| panic!("berth serve said {line:?}:\n{}", process.log()))
            .to_owned();
        Serve { addr, process }
    }

    pub(crate) fn url(&self, repo: &str) -> String {
        format!("http://{}/{repo}", self.addr)
    }

    pub(crate) fn log(&self) -> String {
        self.process.log()
    }

    /// The access-log lines of POST git-receive-pack requests.
    fn push_log_lines(&self) -> Vec<String> {
        self.log()
            .lines()
            .filter(|l| l.contains("route=\"receive-pack\""))
            .map(str::to_owned)
            .collect()
    }

    fn terminate(&self) {
        let ok = Command::new("sh")
            .args(["-c", &format!("kill -TERM {}", self.process.child.id())])
            .status()
            .unwrap()
            .success();
        assert!(ok);
    }

    /// Wait up to `limit` for the server to exit.
    fn wait_exit(&mut self, limit: Duration) -> std::process::ExitStatus {
        let start = Instant::now();
        loop {
            if let Some(s) = self.process.child.try_wait().unwrap() {
                return s;
            }
            assert!(
                start.elapsed() < limit,
                "server still running:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// A log line's `key=<number>` field.
fn field(line: &str, key: &str) -> Option<u64> {
    let rest = line.split(&format!(" {key}=")).nth(1)?;
    rest.split(' ').next()?.parse().ok()
}

/// git in `repo` of the world with prompts off (a 401 must fail, not hang).
pub(crate) fn git(w: &World, repo: &str, args: &[&str]) -> Output {
    w.git_cmd(repo)
        .env("GIT_TERMINAL_PROMPT", "0")
        .args(args)
        .output()
        .unwrap()
}

pub(crate) fn ok(out: Output) -> String {
    assert!(
        out.status.success(),
        "failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// A parsed HTTP/1.1 response.
#[derive(Debug)]
pub(crate) struct Http {
    pub(crate) status: u16,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: Vec<u8>,
}

impl Http {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// One raw HTTP/1.1 request (no normalisation of the path, unlike curl), read to the end.
pub(crate) fn http(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Http {
    let mut s = TcpStream::connect(addr).unwrap();
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    if method == "POST" {
        req.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    s.write_all(body).unwrap();
    read_response(s)
}

pub(crate) fn read_response(mut s: TcpStream) -> Http {
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("end of headers");
    let head = String::from_utf8(raw[..split].to_vec()).unwrap();
    let mut lines = head.split("\r\n");
    let status = lines.next().unwrap().split(' ').nth(1).unwrap();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(": "))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    let mut body = raw[split + 4..].to_vec();
    let r = Http {
        status: status.parse().unwrap(),
        headers,
        body: Vec::new(),
    };
    if r.header("transfer-encoding") == Some("chunked") {
        let mut out = Vec::new();
        let mut rest = &body[..];
        loop {
            let eol = rest.windows(2).position(|w| w == b"\r\n").unwrap();
            let n = usize::from_str_radix(std::str::from_utf8(&rest[..eol]).unwrap(), 16).unwrap();
            if n == 0 {
                break;
            }
            out.extend_from_slice(&rest[eol + 2..eol + 2 + n]);
            rest = &rest[eol + 2 + n + 2..];
        }
        body = out;
    }
    Http { body, ..r }
}

/// pkt-lines as payloads (`None` for a flush), `agent=…` masked.
fn pkt_lines(mut b: &[u8]) -> Vec<Option<String>> {
    let mut out = Vec::new();
    while b.len() >= 4 {
        let n = usize::from_str_radix(std::str::from_utf8(&b[..4]).unwrap(), 16).unwrap();
        if n == 0 {
            out.push(None);
            b = &b[4..];
            continue;
        }
        let payload = String::from_utf8_lossy(&b[4..n]).into_owned();
        let masked = match payload.find("agent=") {
            Some(i) => {
                let end = payload[i..]
                    .find([' ', '\n'])
                    .map_or(payload.len(), |e| i + e);
                format!("{}agent=AGENT{}", &payload[..i], &payload[end..])
            }
            None => payload,
        };
        out.push(Some(masked));
        b = &b[n..];
    }
    assert!(b.is_empty(), "trailing bytes {b:?}");
    out
}

fn pkt(s: &str) -> Vec<u8> {
    common::pkt(s)
}

/// `refs` of a bare repository in the world as `git for-each-ref` prints them.
pub(crate) fn server_refs(w: &World, repo: &str) -> String {
    w.refs(repo)
}

/// The reflog of `name` in `repo` as git reads it (from files or a reftable stack), newest first:
/// `<new> <name> <email> <message>` lines.
fn reflog(w: &World, repo: &str, name: &str) -> String {
    w.git(repo, &["log", "-g", "--format=%H %gn <%ge> %gs", name])
}

/// The refs a client has as `<oid> <type> <name>` lines for `refs/heads`/`refs/tags`.
fn local_refs(w: &World, repo: &str) -> String {
    w.git(
        repo,
        &[
            "for-each-ref",
            "--format=%(objectname) %(objecttype) %(refname)",
            "refs/heads",
            "refs/tags",
        ],
    )
}

pub(crate) fn credentials(w: &World, user: &str, password: &str) -> String {
    let mut child = w
        .cmd(common::berth(), ".")
        .args(["passwd", user])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(format!("{password}\n").as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let line = String::from_utf8(out.stdout).unwrap();
    assert!(
        line.starts_with(&format!("{user}:$argon2id$")),
        "passwd printed {line:?}"
    );
    line
}

#[test]
fn zero_config_push_new_repository_more_refs_and_clone_back() {
    let w = World::new();
    let srv = Serve::start(&w, &[]);
    w.work("src");
    w.commit("src", "a", "1");
    w.commit("src", "b", "2");

    // A push to a repository that does not exist creates it (auto-init on loopback).
    let out = ok(git(
        &w,
        "src",
        &["push", "--porcelain", &srv.url("demo.git"), "main"],
    ));
    assert!(
        out.contains("*\trefs/heads/main:refs/heads/main\t[new branch]"),
        "{out}"
    );
    assert!(w.path("repos/demo.git/HEAD").is_file());
    assert_eq!(
        server_refs(&w, "repos/demo.git"),
        local_refs(&w, "src"),
        "server refs after the first push"
    );
    w.assert_clean("repos/demo.git");

    // More refs: a branch, an annotated tag, a fast-forward of main.
    w.git("src", &["branch", "topic"]);
    w.git("src", &["tag", "-a", "-m", "v1", "v1"]);
    w.commit("src", "c", "3");
    let out = ok(git(
        &w,
        "src",
        &[
            "push",
            "--porcelain",
            &srv.url("demo.git"),
            "main",
            "topic",
            "v1",
        ],
    ));
    assert!(out.contains("\trefs/heads/main:refs/heads/main\t"), "{out}");
    assert!(
        out.contains("*\trefs/heads/topic:refs/heads/topic\t[new branch]"),
        "{out}"
    );
    assert!(
        out.contains("*\trefs/tags/v1:refs/tags/v1\t[new tag]"),
        "{out}"
    );
    assert_eq!(server_refs(&w, "repos/demo.git"), local_refs(&w, "src"));
    w.assert_clean("repos/demo.git");

    // Clone it back (git-upload-pack through the same URL) and compare every ref and object.
    ok(git(
        &w,
        ".",
        &["clone", "--mirror", &srv.url("demo.git"), "back.git"],
    ));
    assert_eq!(server_refs(&w, "back.git"), local_refs(&w, "src"));
    assert_eq!(
        w.git("back.git", &["rev-list", "--objects", "--all"]),
        w.git("src", &["rev-list", "--objects", "--all"])
    );
    w.assert_clean("back.git");

    // One access-log line per request, with user, bytes and status.
    let pushes = srv.push_log_lines();
    assert_eq!(pushes.len(), 2, "{}", srv.log());
    for l in &pushes {
        assert!(
            l.contains("user=anonymous") && l.contains("status=200"),
            "{l}"
        );
        assert!(field(l, "bytes_in").unwrap() > 100, "{l}");
    }
}

#[test]
fn advertisement_matches_git_http_backend() {
    let w = World::new();
    let srv = Serve::start(&w, &[]);
    w.work("src");
    w.commit("src", "a", "1");
    w.bare("repos/adv.git");
    ok(git(&w, "src", &["push", &srv.url("adv.git"), "main"]));

    for (proto, env) in [(None, None), (Some("version=1"), Some("version=1"))] {
        let headers: Vec<(&str, &str)> = proto.map(|p| ("Git-Protocol", p)).into_iter().collect();
        let r = http(
            &srv.addr,
            "GET",
            "/adv.git/info/refs?service=git-receive-pack",
            &headers,
            b"",
        );
        assert_eq!(r.status, 200);
        assert_eq!(
            r.header("content-type"),
            Some("application/x-git-receive-pack-advertisement")
        );
        assert_eq!(r.header("expires"), Some("Fri, 01 Jan 1980 00:00:00 GMT"));
        assert_eq!(r.header("pragma"), Some("no-cache"));
        assert_eq!(
            r.header("cache-control"),
            Some("no-cache, max-age=0, must-revalidate")
        );
        let mut cmd = w.git_cmd(".");
        cmd.args(["receive-pack", "--http-backend-info-refs", "repos/adv.git"]);
        if let Some(e) = env {
            cmd.env("GIT_PROTOCOL", e);
        }
        let git_out = cmd.output().unwrap();
        assert!(git_out.status.success());
        let mut expected = b"001f# service=git-receive-pack\n0000".to_vec();
        expected.extend_from_slice(&git_out.stdout);
        assert_eq!(
            pkt_lines(&r.body),
            pkt_lines(&expected),
            "protocol {proto:?}"
        );
    }

    // upload-pack with protocol v2: no preamble, git's own v2 capability advertisement.
    let r = http(
        &srv.addr,
        "GET",
        "/adv.git/info/refs?service=git-upload-pack",
        &[("Git-Protocol", "version=2")],
        b"",
    );
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("content-type"),
        Some("application/x-git-upload-pack-advertisement")
    );
    let git_out = w
        .git_cmd(".")
        .env("GIT_PROTOCOL", "version=2")
        .args(["upload-pack", "--advertise-refs", "repos/adv.git"])
        .output()
        .unwrap();
    assert_eq!(r.body, git_out.stdout);
    assert!(r.body.starts_with(b"000eversion 2\n"));
}

#[test]
fn content_type_probe_and_methods() {
    let w = World::new();
    let srv = Serve::start(&w, &[]);
    w.bare("repos/x.git");
    let r = http(
        &srv.addr,
        "POST",
        "/x.git/git-receive-pack",
        &[("Content-Type", "text/plain")],
        b"0000",
    );
    assert_eq!(r.status, 415);
    assert_eq!(
        r.body,
        b"Expected POST with Content-Type 'application/x-git-receive-pack-request', but received 'text/plain' instead.\n"
    );
    // git's probe before a chunked push: a bare flush, answered 200 with an empty body.
    let r = http(
        &srv.addr,
        "POST",
        "/x.git/git-receive-pack",
        &[("Content-Type", "application/x-git-receive-pack-request")],
        b"0000",
    );
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("content-type"),
        Some("application/x-git-receive-pack-result")
    );
    assert_eq!(r.body, b"");
    let r = http(&srv.addr, "GET", "/x.git/git-receive-pack", &[], b"");
    assert_eq!(r.status, 405);
    assert_eq!(r.header("allow"), Some("POST"));
    let r = http(&srv.addr, "GET", "/x.git/info/refs", &[], b"");
    assert_eq!(r.status, 403, "dumb HTTP is not served");
    let r = http(
        &srv.addr,
        "GET",
        "/missing/info/refs?service=git-upload-pack",
        &[],
        b"",
    );
    assert_eq!(r.status, 404);
    // A file that is not a repository.
    std::fs::write(w.path("repos/file.git"), "x").unwrap();
    let r = http(
        &srv.addr,
        "GET",
        "/file.git/info/refs?service=git-receive-pack",
        &[],
        b"",
    );
    assert_eq!(r.status, 404);
    let r = http(&srv.addr, "GET", "/metrics", &[], b"");
    assert_eq!(r.status, 200);
    let m = String::from_utf8(r.body).unwrap();
    assert!(
        m.contains("berth_http_requests_total{service=\"receive-pack\",code=\"415\"} 1"),
        "{m}"
    );
    // The probe carries no commands: it is not a push. The refused content type is an error.
    assert!(m.contains("berth_pushes_total{result=\"ok\"} 0"), "{m}");
    assert!(m.contains("berth_pushes_total{result=\"error\"} 1"), "{m}");
}

/// A push's outcome decides how it is logged and counted: every ref accepted is `ok`, some
/// `partial`, none `rejected` (a declining hook is not a success), a broken pack `error`.
#[test]
fn push_outcome_decides_log_line_and_metrics() {
    let w = World::new();
    let srv = Serve::start(&w, &[]);
    w.work("src");
    let c1 = w.commit("src", "a", "1");
    ok(git(&w, "src", &["push", &srv.url("demo.git"), "main"]));
    let hooks = w.path("repos/demo.git/hooks");
    let hook = |name: &str, body: &str| {
        use std::os::unix::fs::PermissionsExt;
        let p = hooks.join(name);
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    };
    // Every ref refused by pre-receive.
    hook("pre-receive", "exit 1");
    let out = git(
        &w,
        "src",
        &["push", &srv.url("demo.git"), "main:refs/heads/b1"],
    );
    assert!(!out.status.success());
    std::fs::remove_file(hooks.join("pre-receive")).unwrap();
    // One of two refs refused by update.
    hook("update", "test \"$1\" != refs/heads/no");
    let out = git(
        &w,
        "src",
        &[
            "push",
            &srv.url("demo.git"),
            "main:refs/heads/yes",
            "main:refs/heads/no",
        ],
    );
    assert!(!out.status.success());
    // A pack that is cut short: the unpack fails, nothing is updated.
    let mut body = push_request(&w, "src", &c1);
    body.truncate(body.len() - 30);
    let r = http(
        &srv.addr,
        "POST",
        "/demo.git/git-receive-pack",
        &[("Content-Type", "application/x-git-receive-pack-request")],
        &body,
    );
    assert_eq!(r.status, 200);
    assert!(
        String::from_utf8_lossy(&r.body).contains("unpack "),
        "{:?}",
        String::from_utf8_lossy(&r.body)
    );
    assert_eq!(
        server_refs(&w, "repos/demo.git").lines().count(),
        2,
        "only main and yes"
    );

    // The last line is written as its response ends: wait for it rather than race it.
    let start = Instant::now();
    while srv.push_log_lines().len() < 4 && start.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let outcomes: Vec<String> = srv
        .push_log_lines()
        .iter()
        .filter_map(|l| {
            let o = l.split("outcome=").nth(1)?;
            Some(format!(
                "{} {} {}",
                o.split_whitespace().next()?,
                field(l, "refs_updated")?,
                field(l, "refs_refused")?
            ))
        })
        .collect();
    assert_eq!(
        outcomes,
        ["ok 1 0", "rejected 0 1", "partial 1 1", "error 0 1"],
        "{}",
        srv.log()
    );
    let m = String::from_utf8(http(&srv.addr, "GET", "/metrics", &[], b"").body).unwrap();
    for line in [
        "berth_pushes_total{result=\"ok\"} 1",
        "berth_pushes_total{result=\"partial\"} 1",
        "berth_pushes_total{result=\"rejected\"} 1",
        "berth_pushes_total{result=\"error\"} 1",
        "berth_push_refs_total{result=\"updated\"} 2",
        "berth_push_refs_total{result=\"refused\"} 3",
    ] {
        assert!(m.contains(line), "{line} in\n{m}");
    }
}

#[test]
fn credentials_wrong_refused_right_lands_with_user_as_reflog_identity() {
    let w = World::new();
    let line = credentials(&w, "alice", "s3cret");
    std::fs::write(w.path("creds"), format!("# push users\n{line}")).unwrap();
    let creds = w.path("creds");
    let srv = Serve::start(
        &w,
        &["--credentials", creds.to_str().unwrap(), "--auto-init"],
    );
    w.bare("repos/priv.git");
    w.git(
        "repos/priv.git",
        &["config", "core.logAllRefUpdates", "true"],
    );
    w.work("src");
    let c = w.commit("src", "a", "1");
    let addr = &srv.addr;

    // No credentials: 401 with a Basic challenge, before anything else.
    let r = http(
        addr,
        "GET",
        "/priv.git/info/refs?service=git-receive-pack",
        &[],
        b"",
    );
    assert_eq!(r.status, 401);
    assert_eq!(r.header("www-authenticate"), Some("Basic realm=\"berth\""));
    let out = git(&w, "src", &["push", &srv.url("priv.git"), "main"]);
    assert!(!out.status.success());

    // Wrong password, unknown user: git says so, nothing is written or created.
    for userinfo in ["alice:wrong", "mallory:s3cret"] {
        for repo in ["priv.git", "new.git"] {
            let url = format!("http://{userinfo}@{addr}/{repo}");
            let out = git(&w, "src", &["push", &url, "main"]);
            assert!(!out.status.success());
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(err.contains("Authentication failed"), "{err}");
        }
    }
    assert_eq!(server_refs(&w, "repos/priv.git"), "");
    assert!(!w.path("repos/new.git").exists());

    // The right password lands, and the reflog names the user as git-http-backend does.
    let url = format!("http://alice:s3cret@{addr}/priv.git");
    ok(git(&w, "src", &["push", &url, "main"]));
    assert_eq!(
        server_refs(&w, "repos/priv.git"),
        format!("{c} commit refs/heads/main\n")
    );
    assert_eq!(
        reflog(&w, "repos/priv.git", "refs/heads/main"),
        format!("{c} alice <alice@http.127.0.0.1> push\n")
    );
    w.assert_clean("repos/priv.git");
    // --auto-init with credentials: the authenticated push creates the repository.
    let url = format!("http://alice:s3cret@{addr}/new.git");
    ok(git(&w, "src", &["push", &url, "main"]));
    assert_eq!(server_refs(&w, "repos/new.git"), local_refs(&w, "src"));
    // Reading does not need credentials.
    ok(git(
        &w,
        ".",
        &["clone", "--mirror", &srv.url("priv.git"), "back.git"],
    ));
    assert_eq!(server_refs(&w, "back.git"), local_refs(&w, "src"));
    assert!(
        srv.push_log_lines()
            .iter()
            .any(|l| l.contains("user=alice") && l.contains("status=200")),
        "{}",
        srv.log()
    );
}

#[test]
fn hooks_get_git_http_backends_cgi_environment() {
    use std::os::unix::fs::PermissionsExt;
    let w = World::new();
    let line = credentials(&w, "alice", "s3cret");
    std::fs::write(w.path("creds"), line).unwrap();
    let creds = w.path("creds");
    let srv = Serve::start(&w, &["--credentials", creds.to_str().unwrap()]);
    w.bare("repos/h.git");
    let seen = w.path("seen");
    let hook = w.path("repos/h.git/hooks/pre-receive");
    std::fs::write(
        &hook,
        format!(
            "#!/bin/sh\nprintf '%s|%s|%s|%s|%s\\n' \"$REMOTE_USER\" \"$REMOTE_ADDR\" \
             \"$GIT_PROTOCOL\" \"$GIT_COMMITTER_NAME\" \"$GIT_COMMITTER_EMAIL\" >> '{}'\n",
            seen.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
    w.work("src");
    let c = w.commit("src", "a", "1");
    let url = format!("http://alice:s3cret@{}/h.git", srv.addr);
    // protocol.version=1 makes git send `Git-Protocol: version=1` (it downgrades v2 for push).
    ok(git(
        &w,
        "src",
        &["-c", "protocol.version=1", "push", &url, "main"],
    ));
    assert_eq!(
        server_refs(&w, "repos/h.git"),
        format!("{c} commit refs/heads/main\n")
    );
    assert_eq!(
        std::fs::read_to_string(&seen).unwrap(),
        "alice|127.0.0.1|version=1|alice|alice@http.127.0.0.1\n"
    );
}

#[test]
fn trusted_user_header_and_no_anonymous_push() {
    let w = World::new();
    let srv = Serve::start(&w, &["--trusted-user-header", "X-Remote-User"]);
    w.bare("repos/t.git");
    w.git("repos/t.git", &["config", "core.logAllRefUpdates", "true"]);
    w.work("src");
    let c = w.commit("src", "a", "1");
    // Auth configured: no anonymous pushes and no auto-init.
    let out = git(&w, "src", &["push", &srv.url("t.git"), "main"]);
    assert!(!out.status.success());
    let r = http(
        &srv.addr,
        "GET",
        "/t.git/info/refs?service=git-receive-pack",
        &[],
        b"",
    );
    assert_eq!(r.status, 401);
    assert_eq!(server_refs(&w, "repos/t.git"), "");
    let out = git(
        &w,
        "src",
        &[
            "-c",
            "http.extraHeader=X-Remote-User: bob",
            "push",
            &srv.url("other.git"),
            "main",
        ],
    );
    assert!(!out.status.success(), "no auto-init unless asked");
    assert!(!w.path("repos/other.git").exists());

    ok(git(
        &w,
        "src",
        &[
            "-c",
            "http.extraHeader=X-Remote-User: bob",
            "push",
            &srv.url("t.git"),
            "main",
        ],
    ));
    assert_eq!(
        server_refs(&w, "repos/t.git"),
        format!("{c} commit refs/heads/main\n")
    );
    let reflog = reflog(&w, "repos/t.git", "refs/heads/main");
    assert!(reflog.contains(" bob <bob@http.127.0.0.1> "), "{reflog}");
}

#[test]
fn paths_outside_the_root_are_refused() {
    let w = World::new();
    let srv = Serve::start(&w, &[]);
    w.bare("outside/x.git");
    std::fs::create_dir_all(w.path("repos")).unwrap();
    std::os::unix::fs::symlink(w.path("outside"), w.path("repos/link")).unwrap();
    std::os::unix::fs::symlink(w.path("outside/x.git"), w.path("repos/alias.git")).unwrap();
    let abs = w.path("outside/x.git");
    let abs = abs.to_str().unwrap();
    let q = "info/refs?service=git-receive-pack";
    for (path, status) in [
        (format!("/../outside/x.git/{q}"), 400),
        (format!("/%2e%2e/outside/x.git/{q}"), 400),
        (format!("/a/%2E%2E/%2E%2E/outside/x.git/{q}"), 400),
        (format!("/.%2e/outside/x.git/{q}"), 400),
        (format!("/{abs}/{q}"), 400),
        (format!("/{}/{q}", abs.replace('/', "%2F")), 400),
        (format!("/./x.git/{q}"), 400),
        (format!("/link/x.git/{q}"), 403),
        (format!("/alias.git/{q}"), 403),
        (format!("/alias/{q}"), 403),
        (format!("/link/new.git/{q}"), 403),
        ("/link/new.git/git-receive-pack".to_owned(), 403),
    ] {
        let r = http(
            &srv.addr,
            if path.ends_with("receive-pack") && !path.contains('?') {
                "POST"
            } else {
                "GET"
            },
            &path,
            &[("Content-Type", "application/x-git-receive-pack-request")],
            b"0000",
        );
        assert_eq!(
            r.status,
            status,
            "{path}: {}",
            String::from_utf8_lossy(&r.body)
        );
    }
    // The real client through the symlink: refused, the outside repository untouched.
    w.work("src");
    w.commit("src", "a", "1");
    for repo in ["link/x.git", "alias.git", "link/new.git"] {
        let out = git(&w, "src", &["push", &srv.url(repo), "main"]);
        assert!(!out.status.success(), "{repo}");
    }
    assert_eq!(server_refs(&w, "outside/x.git"), "");
    assert!(!w.path("outside/new.git").exists());
    // A repository inside another repository is not created either.
    w.bare("repos/outer.git");
    let out = git(
        &w,
        "src",
        &["push", &srv.url("outer.git/objects/in.git"), "main"],
    );
    assert!(!out.status.success());
    assert!(!w.path("repos/outer.git/objects/in.git").exists());
}

/// Deterministic incompressible bytes.
pub(crate) fn noise(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

#[test]
fn large_push_goes_through_the_probe_and_a_chunked_body() {
    let w = World::new();
    let srv = Serve::start(&w, &[]);
    w.work("src");
    std::fs::write(w.path("src/big.bin"), noise(6 << 20, 7)).unwrap();
    w.git("src", &["add", "big.bin"]);
    w.git("src", &["commit", "-q", "-m", "big"]);
    ok(git(
        &w,
        "src",
        &[
            "-c",
            "http.postBuffer=65536",
            "push",
            &srv.url("big.git"),
            "main",
        ],
    ));
    assert_eq!(server_refs(&w, "repos/big.git"), local_refs(&w, "src"));
    w.assert_clean("repos/big.git");
    let sizes: Vec<u64> = srv
        .push_log_lines()
        .iter()
        .map(|l| field(l, "bytes_in").unwrap())
        .collect();
    assert_eq!(sizes.len(), 2, "{}", srv.log());
    assert_eq!(sizes[0], 4, "the probe is a bare flush");
    assert!(sizes[1] > 6 << 20, "{sizes:?}");
}

/// A push request without sideband: one create command, then a pack of `commit`.
pub(crate) fn push_request(w: &World, repo: &str, commit: &str) -> Vec<u8> {
    let zero = common::ZERO.to_string();
    let mut req = pkt(&format!("{zero} {commit} refs/heads/main\0report-status\n"));
    req.extend_from_slice(b"0000");
    let pack = w.git_with_stdin(
        repo,
        &["pack-objects", "--revs", "--stdout", "-q"],
        format!("{commit}\n").as_bytes(),
    );
    assert!(pack.status.success());
    req.extend_from_slice(&pack.stdout);
    req
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut child = Command::new("gzip")
        .args(["-c", "-n"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let data = data.to_vec();
    let t = std::thread::spawn(move || stdin.write_all(&data).unwrap());
    let out = child.wait_with_output().unwrap();
    t.join().unwrap();
    assert!(out.status.success());
    out.stdout
}

#[test]
fn gzip_request_body_is_inflated_and_truncated_gzip_changes_nothing() {
    let w = World::new();
    let srv = Serve::start(&w, &[]);
    w.bare("repos/gz.git");
    w.work("src");
    w.commit("src", "a", "1");
    let c = w.commit("src", "b", "2");
    let req = push_request(&w, "src", &c);
    let body = gzip(&req);
    let headers = [
        ("Content-Type", "application/x-git-receive-pack-request"),
        ("Content-Encoding", "gzip"),
    ];
    // Cut short: the push fails and leaves nothing behind.
    let r = http(
        &srv.addr,
        "POST",
        "/gz.git/git-receive-pack",
        &headers,
        &body[..body.len() / 2],
    );
    assert_ne!(
        r.body, b"000eunpack ok\n0017ok refs/heads/main\n0000",
        "{}",
        r.status
    );
    assert_eq!(server_refs(&w, "repos/gz.git"), "");
    assert_eq!(
        common::leftovers_after_session(&w.path("repos/gz.git")),
        Vec::<std::path::PathBuf>::new()
    );

    let r = http(
        &srv.addr,
        "POST",
        "/gz.git/git-receive-pack",
        &headers,
        &body,
    );
    assert_eq!(r.status, 200);
    assert_eq!(r.body, b"000eunpack ok\n0017ok refs/heads/main\n0000");
    assert_eq!(
        server_refs(&w, "repos/gz.git"),
        format!("{c} commit refs/heads/main\n")
    );
    w.assert_clean("repos/gz.git");
    let last = srv.push_log_lines().pop().unwrap();
    assert_eq!(field(&last, "bytes_in"), Some(req.len() as u64), "{last}");
}

#[test]
fn request_body_limit() {
    let w = World::new();
    let srv = Serve::start(&w, &["--max-request-bytes", "2000"]);
    w.bare("repos/l.git");
    w.work("src");
    let small = w.commit("src", "a", "1");
    let headers = [("Content-Type", "application/x-git-receive-pack-request")];
    let gz = [headers[0], ("Content-Encoding", "gzip")];

    // Over the limit by Content-Length: 413 before the session starts.
    std::fs::write(w.path("src/big.bin"), noise(20_000, 3)).unwrap();
    w.git("src", &["add", "big.bin"]);
    w.git("src", &["commit", "-q", "-m", "big"]);
    let big = w.git("src", &["rev-parse", "HEAD"]).trim().to_owned();
    let req = push_request(&w, "src", &big);
    assert!(req.len() > 2000);
    let r = http(&srv.addr, "POST", "/l.git/git-receive-pack", &headers, &req);
    assert_eq!(r.status, 413);

    // Small when gzipped, over the limit inflated (the limit counts inflated bytes): 413 too.
    let zero = common::ZERO.to_string();
    let mut req = Vec::new();
    for i in 0..200 {
        req.extend(pkt(&format!("{zero} {zero} refs/heads/gone-{i}\n")));
    }
    req.extend_from_slice(b"0000");
    let body = gzip(&req);
    assert!(
        body.len() < 2000 && req.len() > 2000,
        "{} {}",
        body.len(),
        req.len()
    );
    let r = http(&srv.addr, "POST", "/l.git/git-receive-pack", &gz, &body);
    assert_eq!(r.status, 413, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(server_refs(&w, "repos/l.git"), "");
    // The session ends (and removes its quarantine) just after the answer.
    assert_eq!(
        common::leftovers_after_session(&w.path("repos/l.git")),
        Vec::<std::path::PathBuf>::new()
    );

    // Under the limit it lands.
    let req = push_request(&w, "src", &small);
    assert!(req.len() < 2000);
    let r = http(&srv.addr, "POST", "/l.git/git-receive-pack", &headers, &req);
    assert_eq!(r.body, b"000eunpack ok\n0017ok refs/heads/main\n0000");
    assert_eq!(
        server_refs(&w, "repos/l.git"),
        format!("{small} commit refs/heads/main\n")
    );
    w.assert_clean("repos/l.git");
}

#[test]
fn eight_concurrent_pushes_to_one_and_to_different_repositories() {
    let w = World::new();
    let srv = Serve::start(&w, &["--max-concurrent-pushes", "4"]);
    w.work("src");
    w.commit("src", "base", "0");
    ok(git(&w, "src", &["push", &srv.url("one.git"), "main"]));
    // The four pushes to one.git take turns at its refs: in a reftable repository (CI's second
    // pass) each waits for the stack's lock, by default git's 100 ms, which a loaded machine
    // running every test at once can exceed ("cannot lock references").
    w.git(
        "repos/one.git",
        &["config", "reftable.lockTimeout", "10000"],
    );
    let mut tips = Vec::new();
    for i in 0..4 {
        w.git("src", &["checkout", "-q", "-b", &format!("b{i}"), "main"]);
        tips.push(w.commit("src", &format!("f{i}"), &format!("branch {i}")));
    }
    w.git("src", &["checkout", "-q", "main"]);
    let mut children = Vec::new();
    for i in 0..4 {
        let mut cmd = w.git_cmd("src");
        cmd.env("GIT_TERMINAL_PROMPT", "0")
            .args(["push", &srv.url("one.git"), &format!("b{i}")]);
        children.push(
            cmd.stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap(),
        );
        let mut cmd = w.git_cmd("src");
        cmd.env("GIT_TERMINAL_PROMPT", "0").args([
            "push",
            &srv.url(&format!("r{i}.git")),
            "main",
            &format!("b{i}"),
        ]);
        children.push(
            cmd.stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap(),
        );
    }
    for c in children {
        ok(c.wait_with_output().unwrap());
    }
    let main = w.git("src", &["rev-parse", "main"]).trim().to_owned();
    let mut expected = String::new();
    for (i, t) in tips.iter().enumerate() {
        expected.push_str(&format!("{t} commit refs/heads/b{i}\n"));
    }
    expected.push_str(&format!("{main} commit refs/heads/main\n"));
    assert_eq!(server_refs(&w, "repos/one.git"), expected);
    w.assert_clean("repos/one.git");
    for (i, t) in tips.iter().enumerate() {
        let repo = format!("repos/r{i}.git");
        assert_eq!(
            server_refs(&w, &repo),
            format!("{t} commit refs/heads/b{i}\n{main} commit refs/heads/main\n")
        );
        w.assert_clean(&repo);
    }
}

#[test]
fn sigterm_lets_a_push_in_flight_finish() {
    let w = World::new();
    let mut srv = Serve::start(&w, &[]);
    w.bare("repos/g.git");
    w.work("src");
    let c = w.commit("src", "a", "1");
    let req = push_request(&w, "src", &c);
    let mut s = TcpStream::connect(&srv.addr).unwrap();
    let head = format!(
        "POST /g.git/git-receive-pack HTTP/1.1\r\nHost: {}\r\nContent-Type: application/x-git-receive-pack-request\r\nTransfer-Encoding: chunked\r\n\r\n",
        srv.addr
    );
    s.write_all(head.as_bytes()).unwrap();
    let (a, b) = req.split_at(req.len() / 2);
    let chunk = |d: &[u8]| {
        let mut v = format!("{:x}\r\n", d.len()).into_bytes();
        v.extend_from_slice(d);
        v.extend_from_slice(b"\r\n");
        v
    };
    s.write_all(&chunk(a)).unwrap();
    s.flush().unwrap();
    // Once the server runs the session (a fixed wait is not enough on a loaded machine, with
    // every test of the binary running at once), ask it to stop mid-request.
    let start = Instant::now();
    while !String::from_utf8(http(&srv.addr, "GET", "/metrics", &[], b"").body)
        .unwrap()
        .contains("berth_pushes_in_flight 1\n")
    {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the push did not start:\n{}",
            srv.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    srv.terminate();
    std::thread::sleep(Duration::from_millis(300));
    s.write_all(&chunk(b)).unwrap();
    s.write_all(b"0\r\n\r\n").unwrap();
    let r = read_response(s);
    assert_eq!(r.status, 200);
    assert_eq!(r.body, b"000eunpack ok\n0017ok refs/heads/main\n0000");
    let status = srv.wait_exit(Duration::from_secs(10));
    assert!(status.success(), "{status:?}\n{}", srv.log());
    assert_eq!(
        server_refs(&w, "repos/g.git"),
        format!("{c} commit refs/heads/main\n")
    );
    w.assert_clean("repos/g.git");
}

#[test]
fn refuses_to_start_unauthenticated_on_a_public_address() {
    let w = World::new();
    let mut child = w
        .cmd(common::berth(), ".")
        .arg("serve")
        .arg("--root")
        .arg(w.path("repos"))
        .args(["--listen", "0.0.0.0:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > Duration::from_secs(10) {
            let _ = child.kill();
            panic!("berth serve started on 0.0.0.0 without authentication");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let out = child.wait_with_output().unwrap();
    assert!(!status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("not a loopback address, without authentication"),
        "{err}"
    );
    assert!(out.stdout.is_empty());
}

/// A user's URL for `repo` on `srv`.
pub(crate) fn user_url(srv: &Serve, user: &str, password: &str, repo: &str) -> String {
    format!("http://{user}:{password}@{}/{repo}", srv.addr)
}

/// `Authorization: Basic …` for `user:password`.
pub(crate) fn basic(user: &str, password: &str) -> String {
    // A tiny base64 encoder: the tests need no dependency for one header.
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let raw = format!("{user}:{password}").into_bytes();
    let mut out = String::new();
    for chunk in raw.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (b[0] as u32) << 16 | (b[1] as u32) << 8 | b[2] as u32;
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(T[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    format!("Basic {out}")
}

/// The porcelain line of `dst` in `git push --porcelain` output.
fn porcelain<'a>(out: &'a str, dst: &str) -> &'a str {
    out.lines()
        .find(|l| l.contains(&format!(":{dst}\t")))
        .unwrap_or_else(|| panic!("no line for {dst} in:\n{out}"))
}

const ACCESS: &str = "\
# berth --access, gitolite syntax
@devs = alice bob

repo team/app
    RW+              = alice
    -   refs/tags/   = bob
    RW  main dev/    = @devs
    R                = carol

repo public
    R                = @all
    RW+              = alice

repo team/new-.*
    C                = alice
    RW+              = alice

repo secret
    RW+              = alice
";

#[test]
fn access_rules_each_kind_with_the_real_client() {
    use std::os::unix::fs::PermissionsExt;
    let w = World::new();
    let mut creds = String::new();
    for u in ["alice", "bob", "carol"] {
        creds.push_str(&credentials(&w, u, &format!("{u}-pw")));
    }
    std::fs::write(w.path("creds"), creds).unwrap();
    std::fs::write(w.path("access.conf"), ACCESS).unwrap();
    let (c, a) = (w.path("creds"), w.path("access.conf"));
    let srv = Serve::start(
        &w,
        &[
            "--credentials",
            c.to_str().unwrap(),
            "--access",
            a.to_str().unwrap(),
        ],
    );
    let addr = srv.addr.clone();
    w.work("src");
    let c1 = w.commit("src", "a", "1");
    w.git("src", &["branch", "dev/x"]);
    for repo in ["repos/team/app.git", "repos/public.git", "repos/secret.git"] {
        w.bare(repo);
        w.git(
            "src",
            &[
                "push",
                "-q",
                w.path(repo).to_str().unwrap(),
                "main",
                "dev/x",
            ],
        );
    }
    // The update hook records the refs it is asked about: refused refs never reach it (the
    // pre-receive hook gets every command, as git gives it the refs it refused itself).
    let seen = w.path("seen");
    let hook = w.path("repos/team/app.git/hooks/update");
    std::fs::write(
        &hook,
        format!("#!/bin/sh\necho \"$1 $2 $3\" >> '{}'\n", seen.display()),
    )
    .unwrap();
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
    let up = "info/refs?service=git-upload-pack";
    let rp = "info/refs?service=git-receive-pack";
    let get = |path: &str, auth: Option<(&str, &str)>| {
        let h = auth.map(|(u, p)| basic(u, p));
        let headers: Vec<(&str, &str)> = h.iter().map(|v| ("Authorization", v.as_str())).collect();
        http(&addr, "GET", path, &headers, b"").status
    };

    // R for @all: anonymous clones; no rule: 404; a rule for signed-in users only: 401.
    ok(git(
        &w,
        ".",
        &["clone", "-q", &srv.url("public.git"), "pub"],
    ));
    assert_eq!(get(&format!("/public.git/{up}"), None), 200);
    assert_eq!(get(&format!("/secret.git/{up}"), None), 401);
    assert_eq!(get(&format!("/nothing.git/{up}"), None), 404);
    let out = git(&w, ".", &["clone", &srv.url("secret.git"), "s1"]);
    assert!(!out.status.success());
    // Signed in without read access: 404, exactly as for a repository that does not exist.
    assert_eq!(
        get(&format!("/secret.git/{up}"), Some(("carol", "carol-pw"))),
        404
    );
    assert_eq!(
        get(&format!("/secret/{rp}"), Some(("carol", "carol-pw"))),
        404
    );
    assert_eq!(
        get(&format!("/nothing.git/{up}"), Some(("carol", "carol-pw"))),
        404
    );
    assert_eq!(
        get(&format!("/secret.git/{up}"), Some(("alice", "alice-pw"))),
        200
    );
    // A wrong password is a 401 for reads too.
    assert_eq!(
        get(&format!("/public.git/{up}"), Some(("alice", "nope"))),
        401
    );
    // R but not RW: carol reads team/app (named without .git too), a push is a 403.
    ok(git(
        &w,
        ".",
        &[
            "clone",
            "-q",
            &user_url(&srv, "carol", "carol-pw", "team/app"),
            "c",
        ],
    ));
    assert_eq!(
        get(&format!("/team/app.git/{rp}"), Some(("carol", "carol-pw"))),
        403
    );
    let out = git(
        &w,
        "src",
        &[
            "push",
            &user_url(&srv, "carol", "carol-pw", "team/app.git"),
            "main",
        ],
    );
    assert!(!out.status.success());
    // Anonymous push where signing in could help: 401 (git would prompt).
    assert_eq!(get(&format!("/team/app.git/{rp}"), None), 401);

    // RW with refexes, and a deny rule first: bob's push of main, a tag and a branch outside
    // his refexes lands main only; the others get ng naming the rule, before any hook.
    let c2 = w.commit("src", "b", "2");
    w.git("src", &["tag", "v1"]);
    w.git("src", &["branch", "topic"]);
    let bob = user_url(&srv, "bob", "bob-pw", "team/app.git");
    // Atomic: one denied ref refuses them all.
    let out = git(
        &w,
        "src",
        &["push", "--porcelain", "--atomic", &bob, "main", "v1"],
    );
    assert!(!out.status.success());
    let out = String::from_utf8(out.stdout).unwrap();
    assert!(porcelain(&out, "refs/heads/main").starts_with('!'), "{out}");
    assert_eq!(
        w.git("repos/team/app.git", &["rev-parse", "refs/heads/main"])
            .trim(),
        c1
    );
    let out = git(
        &w,
        "src",
        &["push", "--porcelain", &bob, "main", "v1", "topic"],
    );
    assert!(!out.status.success());
    let out = String::from_utf8(out.stdout).unwrap();
    assert!(porcelain(&out, "refs/heads/main").starts_with(' '), "{out}");
    assert!(
        porcelain(&out, "refs/tags/v1")
            .contains("[remote rejected] (access denied by `- refs/tags/ = bob` (access.conf:6))"),
        "{out}"
    );
    assert!(
        porcelain(&out, "refs/heads/topic").contains("[remote rejected] (access denied: no rule in access.conf gives RW on refs/heads/topic to bob)"),
        "{out}"
    );
    assert_eq!(
        w.git("repos/team/app.git", &["rev-parse", "refs/heads/main"])
            .trim(),
        c2
    );
    assert!(
        w.git_out(
            "repos/team/app.git",
            &["rev-parse", "--verify", "-q", "refs/tags/v1"]
        )
        .stdout
        .is_empty()
    );
    let hook_saw = std::fs::read_to_string(&seen).unwrap();
    assert_eq!(hook_saw, format!("refs/heads/main {c1} {c2}\n"));
    // RW is not RW+: bob may not rewind or delete; alice may.
    w.git("src", &["reset", "-q", "--hard", &c1]);
    w.commit("src", "c", "3");
    let out = git(
        &w,
        "src",
        &["push", "--porcelain", "-f", &bob, "main", ":dev/x"],
    );
    assert!(!out.status.success());
    let out = String::from_utf8(out.stdout).unwrap();
    for dst in ["refs/heads/main", "refs/heads/dev/x"] {
        assert!(
            porcelain(&out, dst).contains("gives RW+ (rewind or delete) on"),
            "{out}"
        );
    }
    assert_eq!(
        w.git("repos/team/app.git", &["rev-parse", "refs/heads/main"])
            .trim(),
        c2
    );
    let alice = user_url(&srv, "alice", "alice-pw", "team/app.git");
    ok(git(
        &w,
        "src",
        &["push", "-f", &alice, "main", ":dev/x", "v1"],
    ));
    assert_eq!(
        w.git(
            "repos/team/app.git",
            &["for-each-ref", "--format=%(refname)"]
        ),
        "refs/heads/main\nrefs/tags/v1\n"
    );

    // C: only alice creates team/new-*; bob and anonymous create nothing, and neither does
    // alice's GET of the advertisement (an empty one).
    let out = git(
        &w,
        "src",
        &[
            "push",
            &user_url(&srv, "bob", "bob-pw", "team/new-x.git"),
            "main",
        ],
    );
    assert!(!out.status.success());
    let out = git(&w, "src", &["push", &srv.url("team/new-x.git"), "main"]);
    assert!(!out.status.success());
    let r = http(
        &addr,
        "GET",
        &format!("/team/new-x.git/{rp}"),
        &[("Authorization", &basic("alice", "alice-pw"))],
        b"",
    );
    assert_eq!(r.status, 200);
    let lines = pkt_lines(&r.body);
    assert_eq!(lines[0].as_deref(), Some("# service=git-receive-pack\n"));
    assert!(
        lines[2].as_deref().unwrap().starts_with(&format!(
            "{} capabilities^{{}}\0report-status",
            common::ZERO
        )),
        "{lines:?}"
    );
    assert!(!w.path("repos/team/new-x.git").exists());
    // alice may not create outside the pattern.
    let out = git(
        &w,
        "src",
        &[
            "push",
            &user_url(&srv, "alice", "alice-pw", "other.git"),
            "main",
        ],
    );
    assert!(!out.status.success());
    assert!(!w.path("repos/other.git").exists());
    ok(git(
        &w,
        "src",
        &[
            "push",
            &user_url(&srv, "alice", "alice-pw", "team/new-x"),
            "main",
        ],
    ));
    assert_eq!(
        server_refs(&w, "repos/team/new-x.git"),
        format!(
            "{} commit refs/heads/main\n",
            w.git("src", &["rev-parse", "main"]).trim()
        )
    );

    // The rules reload without a restart: carol gets RW on team/app.
    std::fs::write(
        w.path("access.conf"),
        ACCESS.replace(
            "    R                = carol",
            "    RW               = carol",
        ),
    )
    .unwrap();
    ok(git(
        &w,
        "src",
        &[
            "push",
            &user_url(&srv, "carol", "carol-pw", "team/app.git"),
            "main:refs/heads/carol",
        ],
    ));
    wait_log(&srv, "access rules reloaded");
}

#[test]
fn a_creation_a_crash_interrupted_is_removed_when_the_server_starts() {
    let w = World::new();
    let stale = w.path("repos/team/.berth-init-crashed");
    std::fs::create_dir_all(stale.join("objects")).unwrap();
    let two_hours = std::time::SystemTime::now() - Duration::from_secs(7200);
    std::fs::File::open(&stale)
        .unwrap()
        .set_modified(two_hours)
        .unwrap();
    let srv = Serve::start(&w, &[]);
    wait_log(&srv, "removed a repository creation a crash interrupted");
    assert!(!stale.exists());
    assert!(w.path("repos/team").is_dir());
}

#[test]
fn missing_repository_get_creates_nothing_and_failed_creation_leaves_nothing() {
    let w = World::new();
    let srv = Serve::start(&w, &[]);
    let r = http(
        &srv.addr,
        "GET",
        "/new.git/info/refs?service=git-receive-pack",
        &[],
        b"",
    );
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("content-type"),
        Some("application/x-git-receive-pack-advertisement")
    );
    let lines = pkt_lines(&r.body);
    assert_eq!(lines.len(), 4, "{lines:?}");
    assert!(
        lines[2]
            .as_deref()
            .unwrap()
            .starts_with(&format!("{} capabilities^{{}}\0", common::ZERO)),
        "{lines:?}"
    );
    assert_eq!(lines[3], None);
    assert!(!w.path("repos/new.git").exists());
    // A POST that is not a push (wrong content type) creates nothing either.
    let r = http(
        &srv.addr,
        "POST",
        "/new.git/git-receive-pack",
        &[("Content-Type", "text/plain")],
        b"0000",
    );
    assert_eq!(r.status, 415);
    assert!(!w.path("repos/new.git").exists());
    // Fetching a missing repository: 404, nothing created either.
    let r = http(
        &srv.addr,
        "GET",
        "/new.git/info/refs?service=git-upload-pack",
        &[],
        b"",
    );
    assert_eq!(r.status, 404);
    assert!(!w.path("repos/new.git").exists());
    drop(srv);

    // git init fails (a configuration it rejects): no directory is left behind.
    let srv = Serve::start_with_env(
        &w,
        &[],
        &[("GIT_CONFIG_PARAMETERS", "'core.sharedrepository'='bogus'")],
    );
    w.work("src");
    w.commit("src", "a", "1");
    let out = git(&w, "src", &["push", &srv.url("deep/er/new.git"), "main"]);
    assert!(!out.status.success());
    assert!(!w.path("repos/deep").exists());
    wait_log(&srv, "git init --bare failed");
}

/// Wait up to 60 s for `needle` in the server's log ([`ServeProcess::wait_log`]).
pub(crate) fn wait_log(srv: &Serve, needle: &str) {
    srv.process.wait_log(needle);
}

#[test]
fn first_pushed_branch_becomes_head_and_clone_checks_it_out() {
    let w = World::new();
    let srv = Serve::start(&w, &[]);
    w.work("src");
    let c = w.commit("src", "a", "1");
    w.git("src", &["branch", "-m", "trunk"]);
    ok(git(&w, "src", &["push", &srv.url("fresh.git"), "trunk"]));
    assert_eq!(
        w.git("repos/fresh.git", &["symbolic-ref", "HEAD"]),
        "refs/heads/trunk\n"
    );
    let out = git(&w, ".", &["clone", &srv.url("fresh.git"), "back"]);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{err}");
    assert!(!err.contains("warning"), "{err}");
    assert_eq!(
        w.git("back", &["symbolic-ref", "HEAD"]),
        "refs/heads/trunk\n"
    );
    assert_eq!(w.git("back", &["rev-parse", "HEAD"]).trim(), c);
    // A later branch does not move it.
    w.git("src", &["branch", "other"]);
    ok(git(&w, "src", &["push", &srv.url("fresh.git"), "other"]));
    assert_eq!(
        w.git("repos/fresh.git", &["symbolic-ref", "HEAD"]),
        "refs/heads/trunk\n"
    );
}

#[test]
fn hostile_names_refused_and_log_lines_without_control_characters() {
    let w = World::new();
    let srv = Serve::start(&w, &[]);
    w.bare("repos/ok.git");
    let q = "info/refs?service=git-receive-pack";
    let long = "a".repeat(300);
    for path in [
        format!("/a%0ab%1b.git/{q}"),
        format!("/x%0d%0aINFO%20fake=1.git/{q}"),
        format!("/-upload-pack=evil.git/{q}"),
        format!("/team/-x.git/{q}"),
        format!("/.hidden.git/{q}"),
        format!("/sp%20ace.git/{q}"),
        format!("/%e2%80%aeevil.git/{q}"),
        format!("/{long}.git/{q}"),
    ] {
        let r = http(&srv.addr, "GET", &path, &[], b"");
        assert_eq!(r.status, 400, "{path}");
    }
    assert_eq!(std::fs::read_dir(w.path("repos")).unwrap().count(), 1);
    // The real client with a hostile name: refused, nothing created.
    w.work("src");
    w.commit("src", "a", "1");
    let out = git(&w, "src", &["push", &srv.url("-bad.git"), "main"]);
    assert!(!out.status.success());
    // An ERR packet and control characters in a push request, and in an upload-pack one.
    let mut body = pkt("ERR \x1b[2Kfake\nINFO request status=200\r\n");
    body.extend(b"0000");
    let r = http(
        &srv.addr,
        "POST",
        "/ok.git/git-receive-pack",
        &[("Content-Type", "application/x-git-receive-pack-request")],
        &body,
    );
    assert!(r.status >= 200);
    let mut body = pkt("want \x1b[31mnot-an-id\nINFO forged line\n");
    body.extend(b"0000");
    http(
        &srv.addr,
        "POST",
        "/ok.git/git-upload-pack",
        &[("Content-Type", "application/x-git-upload-pack-request")],
        &body,
    );
    // Wait for the last request's log line.
    let start = Instant::now();
    while srv.log().matches("route=\"upload-pack\"").count() < 1 {
        assert!(start.elapsed() < Duration::from_secs(60), "{}", srv.log());
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(100));
    let log = srv.log();
    for line in log.lines() {
        assert!(
            !line.chars().any(|c| c.is_control() && c != '\t'),
            "raw control character in {line:?}"
        );
    }
    assert!(!log.lines().any(|l| l.starts_with("INFO ")), "{log}");
}

#[test]
fn json_log_lines() {
    let w = World::new();
    let srv = Serve::start(&w, &["--log-format", "json"]);
    let r = http(
        &srv.addr,
        "GET",
        "/a%0ab.git/info/refs?service=git-receive-pack",
        &[],
        b"",
    );
    assert_eq!(r.status, 400);
    wait_log(&srv, "\"route\"");
    let log = srv.log();
    let line = log.lines().find(|l| l.contains("\"route\"")).unwrap();
    assert!(line.starts_with('{') && line.ends_with('}'), "{line}");
    assert!(line.contains("\"status\":400"), "{line}");
    assert!(line.contains("\"repo\":\"a%0ab.git\""), "{line}");
}

#[test]
fn hostile_user_name_gets_a_well_formed_reflog() {
    let w = World::new();
    let srv = Serve::start(&w, &["--trusted-user-header", "X-Remote-User"]);
    w.bare("repos/t.git");
    w.git("repos/t.git", &["config", "core.logAllRefUpdates", "true"]);
    w.work("src");
    let c = w.commit("src", "a", "1");
    ok(git(
        &w,
        "src",
        &[
            "-c",
            "http.extraHeader=X-Remote-User: <ev>il> \"x\"",
            "push",
            &srv.url("t.git"),
            "main",
        ],
    ));
    // git reads the line (a malformed one it would skip): name and email without < >.
    assert_eq!(
        reflog(&w, "repos/t.git", "refs/heads/main"),
        format!("{c} evil \"x <evil \"x\"@http.127.0.0.1> push\n")
    );
    // berth passwd refuses names git cannot keep in an identity.
    for bad in ["a<b", "x>", "anonymous", "@devs", "a,b", "tab\there"] {
        let out = w
            .cmd(common::berth(), ".")
            .args(["passwd", bad])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{bad}");
    }
}

// ---- Limits (issue #12, part B): slow and idle clients, authentication floods, sizes, TLS.

/// The value of an unlabelled or labelled sample in the `/metrics` text, e.g.
/// `berth_password_verifications_total`.
pub(crate) fn metric(addr: &str, sample: &str) -> f64 {
    let m = String::from_utf8(http(addr, "GET", "/metrics", &[], b"").body).unwrap();
    m.lines()
        .find_map(|l| l.strip_prefix(sample)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("{sample} not in\n{m}"))
}

/// Open a POST git-receive-pack to `repo` declaring `len` body bytes and send `first` of them.
pub(crate) fn start_post(addr: &str, repo: &str, len: usize, first: &[u8]) -> TcpStream {
    let mut s = TcpStream::connect(addr).unwrap();
    let head = format!(
        "POST /{repo}/git-receive-pack HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\
         Content-Type: application/x-git-receive-pack-request\r\nContent-Length: {len}\r\n\r\n"
    );
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(first).unwrap();
    s
}

/// How long a test waits for the server to close a connection when the test is not about how
/// soon: only a guard against hanging forever, far beyond what a loaded machine needs.
pub(crate) const HANG_GUARD: Duration = Duration::from_secs(120);

/// Whether the server closed `s` (or answered and closed) within `limit`.
pub(crate) fn closed_within(s: &mut TcpStream, limit: Duration) -> bool {
    s.set_read_timeout(Some(limit)).unwrap();
    let mut buf = [0u8; 4096];
    let start = Instant::now();
    loop {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(_) => return false,
        }
        if start.elapsed() > limit {
            return false;
        }
    }
}

#[test]
fn slow_bodies_are_dropped_with_their_quarantine_while_a_normal_push_lands() {
    let w = World::new();
    let srv = Serve::start(
        &w,
        &[
            "--max-concurrent-pushes",
            "2",
            "--min-body-rate",
            "200",
            "--body-rate-window",
            "1",
        ],
    );
    w.bare("repos/s.git");
    w.work("src");
    let c = w.commit("src", "a", "1");
    std::fs::write(w.path("src/big.bin"), noise(30_000, 7)).unwrap();
    w.git("src", &["add", "big.bin"]);
    w.git("src", &["commit", "-q", "-m", "big"]);
    let big = w.git("src", &["rev-parse", "HEAD"]).trim().to_owned();
    let req = push_request(&w, "src", &big);
    // Two clients take both push slots, send the commands and half the pack, then trickle
    // one byte every 300 ms (slower than 200 bytes/s).
    let mut slow: Vec<TcpStream> = (0..2)
        .map(|_| start_post(&srv.addr, "s.git", req.len(), &req[..req.len() / 2]))
        .collect();
    let trickle = {
        let mut streams: Vec<TcpStream> = slow.iter().map(|s| s.try_clone().unwrap()).collect();
        let rest = req[req.len() / 2..].to_vec();
        std::thread::spawn(move || {
            for b in rest.iter().take(20) {
                std::thread::sleep(Duration::from_millis(300));
                for s in &mut streams {
                    let _ = s.write_all(&[*b]);
                }
            }
        })
    };
    std::thread::sleep(Duration::from_millis(200));
    // A normal push lands, within the window plus its own time.
    let start = Instant::now();
    ok(git(&w, "src", &["push", &srv.url("s.git"), "main"]));
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(
        server_refs(&w, "repos/s.git"),
        format!("{big} commit refs/heads/main\n")
    );
    for s in &mut slow {
        assert!(
            closed_within(s, Duration::from_secs(10)),
            "slow client still held"
        );
    }
    trickle.join().unwrap();
    assert_ne!(big, c);
    assert_eq!(
        common::leftovers_after_session(&w.path("repos/s.git")),
        Vec::<std::path::PathBuf>::new()
    );
    assert!(
        srv.log().contains("slower than --min-body-rate"),
        "{}",
        srv.log()
    );
    assert_eq!(
        metric(&srv.addr, "berth_timeouts_total{reason=\"body_rate\"}"),
        2.0
    );
}

#[test]
fn idle_sockets_under_a_low_descriptor_limit_do_not_lock_anyone_out() {
    let w = World::new();
    // 64 descriptors: the default connection cap is 16; the header-read timeout is long, so
    // what keeps the server answering is that the longest-idle connection makes room.
    let srv = Serve::start_with_nofile(&w, 64, &["--header-read-timeout", "60"]);
    w.work("src");
    let c = w.commit("src", "a", "1");
    let idle: Vec<TcpStream> = (0..80)
        .map(|_| TcpStream::connect(&srv.addr).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let r = http(&srv.addr, "GET", "/healthz", &[], b"");
    assert_eq!(r.status, 200);
    assert_eq!(r.body, b"ok\n");
    ok(git(&w, "src", &["push", &srv.url("n.git"), "main"]));
    assert_eq!(
        server_refs(&w, "repos/n.git"),
        format!("{c} commit refs/heads/main\n")
    );
    ok(git(&w, ".", &["clone", "-q", &srv.url("n.git"), "back"]));
    assert!(metric(&srv.addr, "berth_timeouts_total{reason=\"evicted\"}") >= 64.0);
    drop(idle);
}

#[test]
fn header_read_and_keepalive_timeouts_close_connections() {
    let w = World::new();
    let srv = Serve::start(
        &w,
        &["--header-read-timeout", "0.5", "--keepalive-timeout", "1"],
    );
    // Nothing sent: closed after the header-read timeout, not before. How long after is not
    // the behaviour (a loaded machine is slow to run the timer); that the timer closed it is,
    // and the metric below says so.
    let mut s = TcpStream::connect(&srv.addr).unwrap();
    let t = Instant::now();
    assert!(closed_within(&mut s, HANG_GUARD));
    assert!(
        t.elapsed() >= Duration::from_millis(400),
        "{:?}",
        t.elapsed()
    );
    // Half a request line, then nothing: closed too.
    let mut s = TcpStream::connect(&srv.addr).unwrap();
    s.write_all(b"GET /healthz HTT").unwrap();
    assert!(closed_within(&mut s, HANG_GUARD));
    assert!(metric(&srv.addr, "berth_timeouts_total{reason=\"header_read\"}") >= 2.0);
    // A kept-alive connection is answered, then closed after the keep-alive timeout (not the
    // shorter header-read one).
    let mut s = TcpStream::connect(&srv.addr).unwrap();
    s.write_all(format!("GET /healthz HTTP/1.1\r\nHost: {}\r\n\r\n", srv.addr).as_bytes())
        .unwrap();
    let mut buf = [0u8; 1024];
    s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    let n = s.read(&mut buf).unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
    let t = Instant::now();
    assert!(closed_within(&mut s, HANG_GUARD));
    assert!(
        t.elapsed() >= Duration::from_millis(800),
        "{:?}",
        t.elapsed()
    );
    assert!(metric(&srv.addr, "berth_timeouts_total{reason=\"keepalive\"}") >= 1.0);
}

#[test]
fn a_push_waiting_past_the_slot_deadline_gets_503_with_retry_after() {
    let w = World::new();
    let srv = Serve::start(
        &w,
        &[
            "--max-concurrent-pushes",
            "1",
            "--push-slot-timeout",
            "1",
            "--min-body-rate",
            "0",
        ],
    );
    w.bare("repos/q.git");
    w.work("src");
    let c = w.commit("src", "a", "1");
    let req = push_request(&w, "src", &c);
    let mut holder = start_post(&srv.addr, "q.git", req.len(), &req[..req.len() / 2]);
    std::thread::sleep(Duration::from_millis(200));
    let t = Instant::now();
    let r = http(
        &srv.addr,
        "POST",
        "/q.git/git-receive-pack",
        &[("Content-Type", "application/x-git-receive-pack-request")],
        &req,
    );
    assert_eq!(r.status, 503, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.header("retry-after"), Some("1"));
    // Refused at the one-second slot deadline, not held (bounded at ten times it).
    assert!(t.elapsed() < Duration::from_secs(10));
    // The holder finishes and its push lands.
    holder.write_all(&req[req.len() / 2..]).unwrap();
    let r = read_response(holder);
    assert_eq!(r.body, b"000eunpack ok\n0017ok refs/heads/main\n0000");
    assert_eq!(
        metric(&srv.addr, "berth_busy_total{reason=\"push_slot\"}"),
        1.0
    );
}

#[test]
fn trusted_user_header_only_from_proxies_once_and_never_beside_a_wrong_password() {
    let w = World::new();
    let line = credentials(&w, "alice", "s3cret");
    std::fs::write(w.path("creds"), line).unwrap();
    let creds = w.path("creds");
    let args = [
        "--credentials",
        creds.to_str().unwrap(),
        "--trusted-user-header",
        "X-Remote-User",
    ];
    let srv = Serve::start(&w, &args);
    w.bare("repos/t.git");
    w.work("src");
    let c = w.commit("src", "a", "1");
    let probe = "/t.git/info/refs?service=git-receive-pack";
    use base64_basic as b64;
    let wrong = format!("Basic {}", b64("alice:wrong"));
    // Wrong password + header: the password decides.
    let r = http(
        &srv.addr,
        "GET",
        probe,
        &[("Authorization", &wrong), ("X-Remote-User", "alice")],
        b"",
    );
    assert_eq!(r.status, 401);
    // The header twice: refused.
    let r = http(
        &srv.addr,
        "GET",
        probe,
        &[("X-Remote-User", "mallory"), ("X-Remote-User", "alice")],
        b"",
    );
    assert_eq!(r.status, 400, "{}", String::from_utf8_lossy(&r.body));
    // Once, from loopback (the default --trusted-proxy): accepted.
    let r = http(&srv.addr, "GET", probe, &[("X-Remote-User", "bob")], b"");
    assert_eq!(r.status, 200);
    drop(srv);

    // From an address that is not a trusted proxy: refused, even for a push git would make.
    let mut args = args.to_vec();
    args.extend(["--trusted-proxy", "10.9.0.0/16"]);
    let srv = Serve::start(&w, &args);
    let r = http(&srv.addr, "GET", probe, &[("X-Remote-User", "bob")], b"");
    assert_eq!(r.status, 403, "{}", String::from_utf8_lossy(&r.body));
    let out = git(
        &w,
        "src",
        &[
            "-c",
            "http.extraHeader=X-Remote-User: bob",
            "push",
            &srv.url("t.git"),
            "main",
        ],
    );
    assert!(!out.status.success());
    assert_eq!(server_refs(&w, "repos/t.git"), "");
    // A password still works there.
    ok(git(
        &w,
        "src",
        &[
            "push",
            &format!("http://alice:s3cret@{}/t.git", srv.addr),
            "main",
        ],
    ));
    assert_eq!(
        server_refs(&w, "repos/t.git"),
        format!("{c} commit refs/heads/main\n")
    );
}

/// `base64(s)`, for Basic credentials in raw requests.
pub(crate) fn base64_basic(s: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(s)
}

#[test]
fn a_push_verifies_the_password_once_and_failed_logins_get_429() {
    let w = World::new();
    let line = credentials(&w, "alice", "s3cret");
    std::fs::write(w.path("creds"), line).unwrap();
    let creds = w.path("creds");
    let srv = Serve::start(
        &w,
        &[
            "--credentials",
            creds.to_str().unwrap(),
            "--auth-max-failures",
            "3",
            "--auth-failure-window",
            "30",
        ],
    );
    w.bare("repos/a.git");
    w.work("src");
    w.commit("src", "a", "1");
    let url = format!("http://alice:s3cret@{}/a.git", srv.addr);
    let verifications = "berth_password_verifications_total";
    ok(git(&w, "src", &["push", &url, "main"]));
    assert_eq!(
        metric(&srv.addr, verifications),
        1.0,
        "one push, one argon2 check"
    );
    let c2 = w.commit("src", "a", "2");
    ok(git(&w, "src", &["push", &url, "main"]));
    assert_eq!(metric(&srv.addr, verifications), 1.0, "cached");
    assert!(metric(&srv.addr, "berth_auth_cache_hits_total") >= 3.0);

    // Three wrong passwords: 401; then 429 with Retry-After, without a verification.
    let probe = "/a.git/info/refs?service=git-receive-pack";
    let wrong = format!("Basic {}", base64_basic("alice:nope"));
    for _ in 0..3 {
        let r = http(&srv.addr, "GET", probe, &[("Authorization", &wrong)], b"");
        assert_eq!(r.status, 401);
    }
    let before = metric(&srv.addr, verifications);
    let r = http(&srv.addr, "GET", probe, &[("Authorization", &wrong)], b"");
    assert_eq!(r.status, 429);
    let retry: u64 = r.header("retry-after").unwrap().parse().unwrap();
    assert!((1..=30).contains(&retry), "{retry}");
    // Another user from the same address is limited too (per address).
    let other = format!("Basic {}", base64_basic("bob:guess"));
    let r = http(&srv.addr, "GET", probe, &[("Authorization", &other)], b"");
    assert_eq!(r.status, 429);
    assert_eq!(metric(&srv.addr, verifications), before);
    assert_eq!(metric(&srv.addr, "berth_auth_rate_limited_total"), 2.0);
    // Credentials verified before are still good (cached): alice is not locked out.
    let c3 = w.commit("src", "a", "3");
    ok(git(&w, "src", &["push", &url, "main"]));
    assert_ne!(c2, c3);
    assert_eq!(
        server_refs(&w, "repos/a.git"),
        format!("{c3} commit refs/heads/main\n")
    );
}

#[test]
fn a_thousand_concurrent_wrong_passwords_keep_memory_bounded() {
    let w = World::new();
    let line = credentials(&w, "alice", "s3cret");
    std::fs::write(w.path("creds"), line).unwrap();
    let creds = w.path("creds");
    // No failure limit, so every request reaches the verifiers; two at once.
    let srv = Serve::start(
        &w,
        &[
            "--credentials",
            creds.to_str().unwrap(),
            "--auth-max-failures",
            "0",
            "--max-concurrent-auth",
            "2",
        ],
    );
    w.bare("repos/m.git");
    let hwm = |pid: u32| -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap()
    };
    let pid = srv.process.child.id();
    let base = hwm(pid);
    let auth = format!("Basic {}", base64_basic("alice:wrong"));
    let req = format!(
        "GET /m.git/info/refs?service=git-receive-pack HTTP/1.1\r\nHost: {}\r\n\
         Authorization: {auth}\r\nConnection: close\r\n\r\n",
        srv.addr
    );
    let mut socks: Vec<TcpStream> = (0..1000)
        .map(|_| TcpStream::connect(&srv.addr).unwrap())
        .collect();
    for s in &mut socks {
        s.write_all(req.as_bytes()).unwrap();
    }
    let mut statuses = std::collections::BTreeMap::new();
    for s in socks {
        *statuses.entry(read_response(s).status).or_insert(0) += 1;
    }
    let peak = hwm(pid);
    eprintln!("statuses {statuses:?}; VmHWM {base} kB before, {peak} kB after");
    assert_eq!(statuses.keys().copied().collect::<Vec<_>>(), [401, 503]);
    // The bound: the idle server, plus each verifier's argon2 memory (~19 MiB, allocated once
    // and reused), plus ~24 MiB for a thousand connections and their requests. Measured:
    // 34 MB → 78 MB (it was 3.2 GB for 120 requests before the verifiers were bounded).
    assert!(
        peak < base + (2 * 20 + 24) * 1024,
        "VmHWM {peak} kB (from {base} kB)"
    );
    assert!(srv.log().lines().count() >= 1000);
}

#[test]
fn a_body_crossing_the_limit_mid_stream_gets_413_and_command_bytes_are_capped() {
    let w = World::new();
    let srv = Serve::start(
        &w,
        &["--max-request-bytes", "2000", "--max-command-bytes", "1000"],
    );
    w.bare("repos/l.git");
    w.work("src");
    std::fs::write(w.path("src/big.bin"), noise(20_000, 5)).unwrap();
    w.git("src", &["add", "big.bin"]);
    w.git("src", &["commit", "-q", "-m", "big"]);
    let big = w.git("src", &["rev-parse", "HEAD"]).trim().to_owned();
    let req = push_request(&w, "src", &big);
    // Chunked: no declared length, the limit is crossed while streaming.
    let mut s = TcpStream::connect(&srv.addr).unwrap();
    let head = format!(
        "POST /l.git/git-receive-pack HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\
         Content-Type: application/x-git-receive-pack-request\r\nTransfer-Encoding: chunked\r\n\r\n",
        srv.addr
    );
    s.write_all(head.as_bytes()).unwrap();
    for chunk in req.chunks(1000) {
        if s.write_all(format!("{:x}\r\n", chunk.len()).as_bytes())
            .is_err()
            || s.write_all(chunk).is_err()
            || s.write_all(b"\r\n").is_err()
        {
            break;
        }
    }
    let _ = s.write_all(b"0\r\n\r\n");
    let r = read_response(s);
    assert_eq!(r.status, 413, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(server_refs(&w, "repos/l.git"), "");
    // The session ends (and removes its quarantine) just after the answer.
    assert_eq!(
        common::leftovers_after_session(&w.path("repos/l.git")),
        Vec::<std::path::PathBuf>::new()
    );

    // Commands over --max-command-bytes: refused with a message that says so.
    let zero = common::ZERO.to_string();
    let mut cmds = Vec::new();
    // Just over 1,000 bytes of commands, whatever the object format's id length.
    for i in 0.. {
        cmds.extend(pkt(&format!("{zero} {big} refs/heads/b-{i}\n")));
        if cmds.len() > 1000 {
            break;
        }
    }
    cmds.extend_from_slice(b"0000");
    assert!(cmds.len() > 1000 && cmds.len() < 2000);
    let r = http(
        &srv.addr,
        "POST",
        "/l.git/git-receive-pack",
        &[("Content-Type", "application/x-git-receive-pack-request")],
        &cmds,
    );
    assert_eq!(r.status, 413, "{}", String::from_utf8_lossy(&r.body));
    assert!(
        String::from_utf8_lossy(&r.body).contains("request larger than 1000 bytes"),
        "{}",
        String::from_utf8_lossy(&r.body)
    );
    assert_eq!(server_refs(&w, "repos/l.git"), "");
}

/// A self-signed certificate for localhost and 127.0.0.1 in the world: (cert, key).
pub(crate) fn certificate(w: &World) -> (std::path::PathBuf, std::path::PathBuf) {
    let (cert, key) = (w.path("cert.pem"), w.path("key.pem"));
    let out = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
        ])
        .args(["-nodes", "-days", "2", "-subj", "/CN=localhost"])
        .args(["-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (cert, key)
}

#[test]
fn push_and_clone_over_tls_with_a_self_signed_certificate() {
    let w = World::new();
    let (cert, key) = certificate(&w);
    let srv = Serve::start(
        &w,
        &[
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
        ],
    );
    w.work("src");
    let c = w.commit("src", "a", "1");
    let url = format!("https://{}/tls.git", srv.addr);
    let ca = format!("http.sslCAInfo={}", cert.display());
    // Without the CA the client refuses the certificate.
    let out = git(&w, "src", &["push", &url, "main"]);
    assert!(!out.status.success());
    ok(git(&w, "src", &["-c", &ca, "push", &url, "main"]));
    assert_eq!(
        server_refs(&w, "repos/tls.git"),
        format!("{c} commit refs/heads/main\n")
    );
    ok(git(&w, ".", &["-c", &ca, "clone", "-q", &url, "back"]));
    assert_eq!(w.git("back", &["rev-parse", "origin/main"]).trim(), c);
    // Plain HTTP on the TLS port gets nothing useful.
    let mut s = TcpStream::connect(&srv.addr).unwrap();
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut buf = Vec::new();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let _ = s.read_to_end(&mut buf);
    assert!(!buf.starts_with(b"HTTP/1.1 200"));
}

#[test]
fn metrics_time_each_phase_and_healthz_answers() {
    let w = World::new();
    let srv = Serve::start(&w, &[]);
    w.work("src");
    w.commit("src", "a", "1");
    // The first push creates the repository (its advertisement is the empty one, made without a
    // session); the second runs every phase.
    ok(git(&w, "src", &["push", &srv.url("p.git"), "main"]));
    w.commit("src", "b", "2");
    ok(git(&w, "src", &["push", &srv.url("p.git"), "main"]));
    // The second push's phases are timed by the time its last metric is: wait for it first.
    let start = Instant::now();
    while metric(&srv.addr, "berth_push_duration_seconds_count") < 2.0
        && start.elapsed() < Duration::from_secs(60)
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    for phase in [
        "advertise",
        "read_commands",
        "ingest",
        "connectivity",
        "update",
        "report",
    ] {
        let n = metric(
            &srv.addr,
            &format!("berth_push_phase_seconds_count{{phase=\"{phase}\"}}"),
        );
        assert!(n >= 1.0, "{phase}: {n}");
    }
    // A push is counted when its response has been sent, which may be just after the client
    // is done: wait for the second one.
    let counted = |sample: &str| {
        let start = Instant::now();
        loop {
            let n = metric(&srv.addr, sample);
            if n >= 2.0 || start.elapsed() > Duration::from_secs(60) {
                return n;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    assert_eq!(counted("berth_push_duration_seconds_count"), 2.0);
    assert_eq!(counted("berth_pushes_total{result=\"ok\"}"), 2.0);
    assert!(metric(&srv.addr, "berth_open_connections") >= 1.0);
    let r = http(&srv.addr, "GET", "/healthz", &[], b"");
    assert_eq!((r.status, r.body.as_slice()), (200, &b"ok\n"[..]));
}

#[test]
fn a_client_that_stops_reading_is_dropped_after_the_write_timeout() {
    let w = World::new();
    let srv = Serve::start(&w, &["--write-timeout", "1"]);
    // The files backend whatever BERTH_TEST_REF_FORMAT says: the refs are written as packed-refs.
    w.git(
        ".",
        &["init", "-q", "--bare", "--ref-format=files", "repos/r.git"],
    );
    w.work("src");
    let c = w.commit("src", "a", "1");
    ok(git(&w, "src", &["push", &srv.url("r.git"), "main"]));
    // 200,000 refs: an advertisement of ~12 MB, more than the socket buffers hold.
    let mut packed = String::from("# pack-refs with: peeled fully-peeled sorted \n");
    for i in 0..200_000 {
        packed.push_str(&format!("{c} refs/tags/t{i:07}\n"));
    }
    std::fs::write(w.path("repos/r.git/packed-refs"), packed).unwrap();
    let mut s = TcpStream::connect(&srv.addr).unwrap();
    s.write_all(
        format!(
            "GET /r.git/info/refs?service=git-upload-pack HTTP/1.1\r\nHost: {}\r\n\r\n",
            srv.addr
        )
        .as_bytes(),
    )
    .unwrap();
    // Read nothing; the server gives up on us and ends git upload-pack.
    let deadline = Instant::now() + Duration::from_secs(20);
    let write_timeouts = "berth_timeouts_total{reason=\"write\"}";
    let m = || String::from_utf8(http(&srv.addr, "GET", "/metrics", &[], b"").body).unwrap();
    while !m().contains(&format!("{write_timeouts} 1")) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(metric(&srv.addr, write_timeouts), 1.0);
    while metric(&srv.addr, "berth_upload_packs_in_flight") != 0.0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(metric(&srv.addr, "berth_upload_packs_in_flight"), 0.0);
    drop(s);
}

#[test]
fn memory_of_a_push_with_many_push_options_is_released_after_it() {
    let w = World::new();
    let srv = Serve::start(&w, &[]);
    w.bare("repos/o.git");
    w.git(
        "repos/o.git",
        &["config", "receive.advertisePushOptions", "true"],
    );
    w.work("src");
    let c = w.commit("src", "a", "1");
    let rss = |pid: u32| -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap()
    };
    let pid = srv.process.child.id();
    // 1,000 push options of 50 KB: 50 MB, under the 64 MiB --max-command-bytes.
    let zero = common::ZERO.to_string();
    let mut req = pkt(&format!(
        "{zero} {c} refs/heads/main\0report-status push-options\n"
    ));
    req.extend_from_slice(b"0000");
    let option = "o".repeat(50_000);
    for _ in 0..1000 {
        req.extend(pkt(&format!("{option}\n")));
    }
    req.extend_from_slice(b"0000");
    let pack = w.git_with_stdin(
        "src",
        &["pack-objects", "--revs", "--stdout", "-q"],
        format!("{c}\n").as_bytes(),
    );
    req.extend_from_slice(&pack.stdout);
    let before = rss(pid);
    let r = http(
        &srv.addr,
        "POST",
        "/o.git/git-receive-pack",
        &[("Content-Type", "application/x-git-receive-pack-request")],
        &req,
    );
    assert_eq!(r.body, b"000eunpack ok\n0017ok refs/heads/main\n0000");
    std::thread::sleep(Duration::from_millis(300));
    let after = rss(pid);
    eprintln!("VmRSS {before} kB before, {after} kB after a 50 MB push");
    assert!(after < before + 16 * 1024, "{before} kB → {after} kB");
}

#[test]
fn upload_packs_are_capped_and_a_fetch_waiting_past_the_deadline_gets_503() {
    let w = World::new();
    let srv = Serve::start(
        &w,
        &[
            "--max-concurrent-fetches",
            "1",
            "--push-slot-timeout",
            "1",
            "--min-body-rate",
            "0",
        ],
    );
    w.work("src");
    let c = w.commit("src", "a", "1");
    ok(git(&w, "src", &["push", &srv.url("f.git"), "main"]));
    // A fetch whose request body never ends holds the only git upload-pack slot.
    let want = pkt(&format!("want {c}\n"));
    let mut s = TcpStream::connect(&srv.addr).unwrap();
    s.write_all(
        format!(
            "POST /f.git/git-upload-pack HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\
             Content-Type: application/x-git-upload-pack-request\r\nContent-Length: 1000\r\n\r\n",
            srv.addr
        )
        .as_bytes(),
    )
    .unwrap();
    s.write_all(&want).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(metric(&srv.addr, "berth_upload_packs_in_flight"), 1.0);
    let r = http(
        &srv.addr,
        "GET",
        "/f.git/info/refs?service=git-upload-pack",
        &[],
        b"",
    );
    assert_eq!(r.status, 503);
    assert_eq!(r.header("retry-after"), Some("1"));
    assert_eq!(
        metric(&srv.addr, "berth_busy_total{reason=\"upload_pack\"}"),
        1.0
    );
    // Once it is gone, clones work again.
    drop(s);
    let deadline = Instant::now() + Duration::from_secs(120);
    while metric(&srv.addr, "berth_upload_packs_in_flight") != 0.0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    ok(git(&w, ".", &["clone", "-q", &srv.url("f.git"), "back"]));
}
