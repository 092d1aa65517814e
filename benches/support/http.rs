//! Small pushes over smart HTTP, as `git push` sends them, for the load benches (`http_load`,
//! `cluster_load`): the shapes of the workload, the request bodies made before the clock
//! starts, a minimal HTTP/1.1 client (one connection per request), one push (discovery, then
//! the request, checked by its report) and a `berth serve` process killed when dropped.

use std::path::Path;
use std::process::{Child, Command, Stdio};

use super::load::{self, History, pkt};

/// What the client asks for, as git 2.47 over HTTP.
pub const CAPABILITIES: &str =
    "report-status-v2 side-band-64k quiet object-format=sha1 agent=git/2.47.3";

/// One push, ready to send.
pub struct Push {
    pub repo: String,
    pub refname: String,
    pub body: Vec<u8>,
}

/// How the clients share the repositories.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// Every client on its own branch of one repository.
    Shared,
    /// One repository per client.
    Own,
    /// Each client alternates between its branch of the shared repository and its own one.
    Mixed,
}

impl Shape {
    /// `shared` (or `one`), `own`, `mixed`; exits with a message otherwise.
    pub fn parse(s: &str) -> Shape {
        match s {
            "shared" | "one" => Shape::Shared,
            "own" => Shape::Own,
            "mixed" => Shape::Mixed,
            other => {
                eprintln!("unknown shape {other:?} (shared, own, mixed)");
                std::process::exit(2);
            }
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Shape::Shared => "one repository",
            Shape::Own => "repository per client",
            Shape::Mixed => "mixed",
        }
    }

    /// The branches (repository, ref) and, per client, the branches it pushes, in turn.
    pub fn branches(self, clients: usize) -> (Vec<(String, String)>, Vec<Vec<usize>>) {
        let shared = |c: usize| ("shared.git".to_owned(), format!("refs/heads/c{c}"));
        let own = |c: usize| (format!("own{c}.git"), "refs/heads/main".to_owned());
        match self {
            Shape::Shared => (
                (0..clients).map(shared).collect(),
                (0..clients).map(|c| vec![c]).collect(),
            ),
            Shape::Own => (
                (0..clients).map(own).collect(),
                (0..clients).map(|c| vec![c]).collect(),
            ),
            Shape::Mixed => (
                (0..clients).flat_map(|c| [shared(c), own(c)]).collect(),
                (0..clients).map(|c| vec![2 * c, 2 * c + 1]).collect(),
            ),
        }
    }
}

/// The request body of a push of `old → new` to `refname` with `pack`.
pub fn body(old: &str, new: &str, refname: &str, pack: &[u8]) -> Vec<u8> {
    let mut body = pkt(&format!("{old} {new} {refname}\0{CAPABILITIES}\n"));
    body.extend_from_slice(b"0000");
    body.extend_from_slice(pack);
    body
}

/// The pushes of one shape and client count: the history and each client's pushes in order.
pub fn prepare(
    dir: &Path,
    shape: Shape,
    clients: usize,
    total: usize,
) -> (History, Vec<Vec<Push>>) {
    let per_client = (total / clients).max(1);
    let (branches, turns) = shape.branches(clients);
    let len = per_client.div_ceil(turns[0].len());
    let history = load::history(dir, &branches, len);
    let work = turns
        .iter()
        .map(|chains| {
            (0..per_client)
                .map(|i| {
                    let chain = chains[i % chains.len()];
                    let step = history.step(chain, i / chains.len() + 1);
                    let c = &history.chains[chain];
                    Push {
                        repo: c.repo.clone(),
                        refname: c.refname.clone(),
                        body: body(&step.old, &step.new, &c.refname, &step.pack),
                    }
                })
                .collect()
        })
        .collect();
    (history, work)
}

pub use super::load::{contains, http};

/// One push as `git push` makes it: `GET info/refs`, then `POST git-receive-pack` with `body`;
/// the answer's body (side-band framed). `Err` says what went wrong (a failed request or a
/// status other than 200).
pub fn exchange(
    addr: &str,
    prefix: &str,
    auth: Option<&str>,
    repo: &str,
    body: &[u8],
) -> Result<Vec<u8>, String> {
    let auth: Vec<(&str, &str)> = auth.map(|a| ("Authorization", a)).into_iter().collect();
    let (status, answer) = http(
        addr,
        "GET",
        &format!("{prefix}/{repo}/info/refs?service=git-receive-pack"),
        &auth,
        b"",
    )
    .map_err(|e| format!("GET: {e}"))?;
    if status != 200 || !contains(&answer, b"# service=git-receive-pack\n") {
        return Err(format!(
            "GET {repo}: status {status}: {}",
            String::from_utf8_lossy(&answer[..answer.len().min(200)])
        ));
    }
    let (status, answer) = http(
        addr,
        "POST",
        &format!("{prefix}/{repo}/git-receive-pack"),
        &[
            ("Content-Type", "application/x-git-receive-pack-request"),
            ("Accept", "application/x-git-receive-pack-result"),
        ]
        .into_iter()
        .chain(auth.iter().copied())
        .collect::<Vec<_>>(),
        body,
    )
    .map_err(|e| format!("POST {repo}: {e}"))?;
    if status != 200 {
        return Err(format!(
            "POST {repo}: status {status}: {}",
            String::from_utf8_lossy(&answer[..answer.len().min(300)])
        ));
    }
    Ok(answer)
}

/// [`exchange`] of one small push, which counts only if the report says `unpack ok` and
/// `ok <ref>`.
pub fn push(addr: &str, prefix: &str, auth: Option<&str>, p: &Push) -> Result<(), String> {
    let answer = exchange(addr, prefix, auth, &p.repo, &p.body)?;
    if !contains(&answer, b"unpack ok\n")
        || !contains(&answer, format!("ok {}\n", p.refname).as_bytes())
    {
        return Err(format!(
            "POST {} {}: {}",
            p.repo,
            p.refname,
            String::from_utf8_lossy(&answer[..answer.len().min(300)])
        ));
    }
    Ok(())
}

/// A running server, stopped (SIGKILL) when dropped.
pub struct Server {
    pub child: Child,
    /// `host:port`.
    pub addr: String,
    /// The path the repositories are under (`""` for berth).
    pub prefix: &'static str,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Spawn `cmd` (a `berth serve`; its stderr goes to `log`) and wait for its `listening on
/// http://…` line.
pub fn spawn_berth(mut cmd: Command, log: &Path) -> Server {
    let log = std::fs::File::create(log).unwrap();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    let addr = loop {
        line.clear();
        if std::io::BufRead::read_line(&mut out, &mut line).unwrap_or(0) == 0 {
            let _ = child.kill();
            let _ = child.wait();
            panic!("berth serve did not start: {cmd:?}");
        }
        if let Some(a) = line
            .trim()
            .strip_prefix("berth serve: listening on http://")
            .and_then(|a| a.strip_suffix('/'))
        {
            break a.to_owned();
        }
    };
    Server {
        child,
        addr,
        prefix: "",
    }
}
