//! `berth serve` end to end: the built binary on an ephemeral loopback port, driven by the real
//! git client (push, clone, credentials) and by raw HTTP requests where the client cannot say
//! what we need to (path escapes, gzip bodies, content types, byte-level answers).

use crate::common;
use common::World;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A running `berth serve`, killed when dropped.
struct Serve {
    child: Child,
    addr: String,
    log: Arc<Mutex<String>>,
}

impl Serve {
    /// Start `berth serve --root <world>/repos --listen 127.0.0.1:0 <args>` and wait for the
    /// address it prints.
    fn start(w: &World, args: &[&str]) -> Serve {
        let mut child = w
            .cmd(common::berth(), ".")
            .arg("serve")
            .arg("--root")
            .arg(w.path("repos"))
            .args(["--listen", "127.0.0.1:0"])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let log = Arc::new(Mutex::new(String::new()));
        let mut stderr = BufReader::new(child.stderr.take().unwrap());
        let sink = log.clone();
        std::thread::spawn(move || {
            let mut line = String::new();
            while stderr.read_line(&mut line).unwrap_or(0) > 0 {
                sink.lock().unwrap().push_str(&line);
                line.clear();
            }
        });
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        let Some(addr) = line
            .trim()
            .strip_prefix("berth serve: listening on http://")
            .and_then(|a| a.strip_suffix('/'))
        else {
            let _ = child.kill();
            let _ = child.wait();
            std::thread::sleep(Duration::from_millis(100));
            panic!(
                "berth serve did not start: stdout {line:?}, stderr:\n{}",
                log.lock().unwrap()
            );
        };
        Serve {
            addr: addr.to_owned(),
            child,
            log,
        }
    }

    fn url(&self, repo: &str) -> String {
        format!("http://{}/{repo}", self.addr)
    }

    fn log(&self) -> String {
        self.log.lock().unwrap().clone()
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
            .args(["-c", &format!("kill -TERM {}", self.child.id())])
            .status()
            .unwrap()
            .success();
        assert!(ok);
    }

    /// Wait up to `limit` for the server to exit.
    fn wait_exit(&mut self, limit: Duration) -> std::process::ExitStatus {
        let start = Instant::now();
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
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

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A log line's `key=<number>` field.
fn field(line: &str, key: &str) -> Option<u64> {
    let rest = line.split(&format!(" {key}=")).nth(1)?;
    rest.split(' ').next()?.parse().ok()
}

/// git in `repo` of the world with prompts off (a 401 must fail, not hang).
fn git(w: &World, repo: &str, args: &[&str]) -> Output {
    w.git_cmd(repo)
        .env("GIT_TERMINAL_PROMPT", "0")
        .args(args)
        .output()
        .unwrap()
}

fn ok(out: Output) -> String {
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
struct Http {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
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
fn http(addr: &str, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Http {
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

fn read_response(mut s: TcpStream) -> Http {
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
fn server_refs(w: &World, repo: &str) -> String {
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

fn credentials(w: &World, user: &str, password: &str) -> String {
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
fn noise(n: usize, seed: u64) -> Vec<u8> {
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
fn push_request(w: &World, repo: &str, commit: &str) -> Vec<u8> {
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
    assert!(common::leftovers(&w.path("repos/gz.git")).is_empty());

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
    assert!(common::leftovers(&w.path("repos/l.git")).is_empty());

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
