//! `berth bench load`: N concurrent clients, each making M small pushes (one new commit on its
//! own branch per push) to any server over smart HTTP or ssh; pushes/s, p50 / p99 / max
//! latency, errors by kind; then every acknowledged push checked on the server with
//! `git ls-remote`.
//!
//! The client is not `git push`: each push is made as `git push` makes it — the server's
//! advertisement read (`GET info/refs?service=git-receive-pack`, or the first answer of
//! `git-receive-pack '<path>'` over `ssh`), then the command, the flush and the pack
//! `git pack-objects` made for it — from requests built before the clock starts. That measures
//! the server: a real `git push` costs tens of milliseconds of client CPU (a handful of
//! processes per push: push, remote-http or ssh, pack-objects), which on a small machine
//! competes with the server under test and dominates the latency. Over ssh the `ssh` client
//! (a new connection, key exchange and authentication per push, as every `git push` over ssh)
//! is in the latency, as it is for a user.
//!
//! `https://` goes through rustls (ring), the server's certificate checked against
//! `--ca-file` or the system's roots.
//!
//! Each client `c` pushes `refs/heads/bench-load/<run>/c<c>` (`<run>` is the start time and the
//! process id, so runs never collide): its first push creates the branch with a root commit,
//! each next one fast-forwards it by one commit (commit, tree, one ~1 KiB blob). A push counts
//! (is acknowledged) only when the report says `unpack ok` and `ok <ref>`. A failed push leaves
//! the branch where it was: the client's next push is made (its pack too, before its clock
//! starts) from the last acknowledged commit. After the run, `git ls-remote` must show each
//! client's branch at its last acknowledged commit (absent when none was).
//!
//! `--url` repeated spreads the clients over several entry points of one server (the nodes of a
//! cluster): client `c` pushes to, and is verified through, URL `c mod <count>`.
//!
//! The cargo benches `http_load`, `ssh_load` and `cluster_load` run this command (the binary
//! built with them) against the servers they start, and read its `--json` report.

use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

/// How the clients share repositories.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Repos {
    /// Every client on its own branch of the repository at the URL.
    One,
    /// Client `c` in the repository `<URL>/c<c>.git` (it must exist, or the server create it
    /// on push, as `berth serve --auto-init` does).
    Each,
}

/// The command line of `berth bench load`.
#[derive(clap::Args)]
pub struct LoadArgs {
    /// The repository (`--repos one`) or the directory of repositories (`--repos each`):
    /// `http[s]://[USER:PASSWORD@]HOST[:PORT]/PATH` or `ssh://[USER@]HOST[:PORT]/PATH`.
    /// Repeat it for a server with several entry points (the nodes of a cluster): client `c`
    /// pushes to the URL `c mod <count>`, each URL naming the same repositories.
    #[arg(long = "url", required = true)]
    urls: Vec<String>,
    /// How many clients push at once.
    #[arg(long, default_value_t = 4)]
    clients: usize,
    /// How many pushes each client makes, one after the other.
    #[arg(long, default_value_t = 10)]
    pushes: usize,
    /// One repository for all clients, or one each.
    #[arg(long, value_enum, default_value = "one")]
    repos: Repos,
    /// ssh: the private key (`ssh -i FILE -o IdentitiesOnly=yes`); default: the user's ssh
    /// configuration.
    #[arg(long, value_name = "FILE")]
    identity: Option<PathBuf>,
    /// ssh: one more `-o OPTION` for `ssh` (repeat), e.g. `StrictHostKeyChecking=no`.
    #[arg(long = "ssh-option", value_name = "OPTION")]
    ssh_options: Vec<String>,
    /// https: check the server's certificate against the certificates in this PEM file
    /// (default: `$SSL_CERT_FILE`, else /etc/ssl/certs/ca-certificates.crt). A self-signed
    /// server certificate must say CA:FALSE: rustls does not take a CA's as a server's own.
    #[arg(long, value_name = "FILE")]
    ca_file: Option<PathBuf>,
    /// The repositories' object format.
    #[arg(long, value_parser = ["sha1", "sha256"], default_value = "sha1")]
    object_format: String,
    /// Print the results as JSON on stdout instead of the text.
    #[arg(long)]
    json: bool,
    /// Build the pushes under this directory (default: $TMPDIR).
    #[arg(long)]
    workdir: Option<PathBuf>,
}

/// Where the pushes go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transport {
    /// Smart HTTP, over TLS for `https://`.
    Http {
        /// `host:port`.
        addr: String,
        /// `https://`.
        tls: bool,
        /// `Authorization` header value, from the URL's user and password.
        auth: Option<String>,
    },
    /// `ssh [-p PORT] DEST git-receive-pack '<path>'`.
    Ssh {
        /// `[user@]host`.
        dest: String,
        /// The port, when the URL has one.
        port: Option<u16>,
    },
}

/// A parsed `--url`: the transport and the path on the server (`/…`, no trailing slash).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Url {
    /// `scheme://authority`, as given.
    pub origin: String,
    /// How to reach the server.
    pub transport: Transport,
    /// The path.
    pub path: String,
}

/// `Basic base64(user:password)`.
pub fn basic(user_password: &str) -> String {
    use base64::Engine;
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(user_password)
    )
}

/// Parse `--url`.
pub fn parse_url(url: &str) -> Result<Url, String> {
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| format!("{url}: not a URL (http://… or ssh://…)"))?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let path = path.trim_end_matches('/').to_owned();
    let (userinfo, hostport) = match authority.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, authority),
    };
    if hostport.is_empty() {
        return Err(format!("{url}: no host"));
    }
    let transport = match scheme {
        "http" | "https" => Transport::Http {
            addr: if hostport
                .rsplit_once(':')
                .is_some_and(|(_, p)| !p.ends_with(']'))
            {
                hostport.to_owned()
            } else if scheme == "https" {
                format!("{hostport}:443")
            } else {
                format!("{hostport}:80")
            },
            tls: scheme == "https",
            auth: userinfo.map(basic),
        },
        "ssh" => {
            let (host, port) = match hostport.rsplit_once(':') {
                Some((h, p)) => (
                    h,
                    Some(p.parse().map_err(|_| format!("{url}: bad port {p:?}"))?),
                ),
                None => (hostport, None),
            };
            Transport::Ssh {
                dest: match userinfo {
                    Some(u) => format!("{u}@{host}"),
                    None => host.to_owned(),
                },
                port,
            }
        }
        other => {
            return Err(format!(
                "{url}: unknown scheme {other:?} (http, https, ssh)"
            ));
        }
    };
    Ok(Url {
        origin: format!("{scheme}://{authority}"),
        transport,
        path,
    })
}

/// A pkt-line.
pub fn pkt(s: &str) -> Vec<u8> {
    format!("{:04x}{s}", s.len() + 4).into_bytes()
}

/// The payloads of the pkt-lines in `data`, a flush as `None`; stops at the end or at a
/// malformed length.
fn pkt_lines(data: &[u8]) -> Vec<Option<&[u8]>> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos + 4 <= data.len() {
        let Some(len) = std::str::from_utf8(&data[pos..pos + 4])
            .ok()
            .and_then(|h| usize::from_str_radix(h, 16).ok())
        else {
            break;
        };
        if len < 4 {
            out.push(None);
            pos += 4;
            continue;
        }
        if pos + len > data.len() {
            break;
        }
        out.push(Some(&data[pos + 4..pos + len]));
        pos += len;
    }
    out
}

/// `needle` in `hay`.
pub fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// A minimal HTTP/1.1 exchange on a new connection (`Connection: close`): the status and the
/// body, de-chunked.
pub fn http(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> std::io::Result<(u16, Vec<u8>)> {
    let mut s = TcpStream::connect(addr)?;
    s.set_nodelay(true)?;
    s.set_read_timeout(Some(Duration::from_secs(120)))?;
    exchange(&mut s, addr, method, path, headers, body)
}

/// [`http`] over TLS (`https://`), the server's certificate checked against `tls`'s roots.
#[cfg(feature = "serve")]
pub fn https(
    tls: &std::sync::Arc<tokio_rustls::rustls::ClientConfig>,
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> std::io::Result<(u16, Vec<u8>)> {
    use tokio_rustls::rustls;
    let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let name = rustls_pki_types::ServerName::try_from(host.to_owned())
        .map_err(|e| std::io::Error::other(format!("{host}: {e}")))?;
    let conn = rustls::ClientConnection::new(tls.clone(), name).map_err(std::io::Error::other)?;
    let s = TcpStream::connect(addr)?;
    s.set_nodelay(true)?;
    s.set_read_timeout(Some(Duration::from_secs(120)))?;
    let mut s = rustls::StreamOwned::new(conn, s);
    exchange(&mut s, addr, method, path, headers, body)
}

/// The roots `https://` is checked against: `ca_file`, else `$SSL_CERT_FILE`, else
/// `/etc/ssl/certs/ca-certificates.crt` (PEM).
#[cfg(feature = "serve")]
pub fn tls_config(
    ca_file: Option<&Path>,
) -> Result<std::sync::Arc<tokio_rustls::rustls::ClientConfig>, String> {
    use rustls_pki_types::CertificateDer;
    use rustls_pki_types::pem::PemObject;
    use tokio_rustls::rustls;
    let file = ca_file.map(Path::to_path_buf).unwrap_or_else(|| {
        std::env::var_os("SSL_CERT_FILE")
            .map(PathBuf::from)
            .unwrap_or_else(|| "/etc/ssl/certs/ca-certificates.crt".into())
    });
    let mut roots = rustls::RootCertStore::empty();
    let certs = CertificateDer::pem_file_iter(&file)
        .and_then(|i| i.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("{}: {e}", file.display()))?;
    let (added, _) = roots.add_parsable_certificates(certs);
    if added == 0 {
        return Err(format!("{}: no certificate", file.display()));
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(std::sync::Arc::new(config))
}

/// One request and its answer on `s`.
fn exchange(
    s: &mut (impl Read + Write),
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> std::io::Result<(u16, Vec<u8>)> {
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: git/2.47.3\r\n");
    for (k, v) in headers {
        let _ = write!(req, "{k}: {v}\r\n");
    }
    if method == "POST" {
        let _ = write!(req, "Content-Length: {}\r\n", body.len());
    }
    req.push_str("Connection: close\r\n\r\n");
    let mut buf = req.into_bytes();
    buf.extend_from_slice(body);
    s.write_all(&buf)?;
    s.flush()?;
    let mut resp = Vec::new();
    match s.read_to_end(&mut resp) {
        Ok(_) => {}
        // A TLS server that closes without close_notify: the answer is complete when its
        // length says so, which the parsing below checks.
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !resp.is_empty() => {}
        Err(e) => return Err(e),
    }
    let bad = |what: &str| std::io::Error::other(format!("bad HTTP response: {what}"));
    let end = resp
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| bad("no end of headers"))?;
    let head = String::from_utf8_lossy(&resp[..end]).into_owned();
    let status: u16 = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| bad("no status"))?;
    let chunked = head.lines().any(|l| {
        let l = l.to_ascii_lowercase();
        l.starts_with("transfer-encoding:") && l.contains("chunked")
    });
    let mut rest = &resp[end + 4..];
    if !chunked {
        return Ok((status, rest.to_vec()));
    }
    let mut out = Vec::new();
    loop {
        let nl = rest
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or_else(|| bad("chunk size"))?;
        let size = std::str::from_utf8(&rest[..nl])
            .ok()
            .and_then(|s| usize::from_str_radix(s.split(';').next()?.trim(), 16).ok())
            .ok_or_else(|| bad("chunk size"))?;
        rest = &rest[nl + 2..];
        if size == 0 {
            return Ok((status, out));
        }
        if rest.len() < size + 2 {
            return Err(bad("truncated chunk"));
        }
        out.extend_from_slice(&rest[..size]);
        rest = &rest[size + 2..];
    }
}

/// What one run of the clients gave.
pub struct Outcome<E> {
    /// From the start signal to the last client's end.
    pub wall: Duration,
    /// One per push the server confirmed, in no particular order.
    pub latencies: Vec<Duration>,
    /// One per push that failed, saying why.
    pub errors: Vec<E>,
}

/// Run one thread per entry of `work`, all released at once; each pushes its items in order
/// with `push`, timed from call to return. `push` says what went wrong, if anything.
pub fn run_clients<T: Sync, E: Send>(
    work: &[Vec<T>],
    push: impl Fn(usize, &T) -> Result<(), E> + Sync,
) -> Outcome<E> {
    let barrier = std::sync::Barrier::new(work.len() + 1);
    std::thread::scope(|s| {
        let handles: Vec<_> = work
            .iter()
            .enumerate()
            .map(|(w, items)| {
                let (barrier, push) = (&barrier, &push);
                s.spawn(move || {
                    let mut lat = Vec::with_capacity(items.len());
                    let mut errors = Vec::new();
                    barrier.wait();
                    for item in items {
                        let t = Instant::now();
                        match push(w, item) {
                            Ok(()) => lat.push(t.elapsed()),
                            Err(e) => errors.push(e),
                        }
                    }
                    (lat, errors)
                })
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        let mut latencies = Vec::new();
        let mut errors = Vec::new();
        for h in handles {
            if let Ok((l, e)) = h.join() {
                latencies.extend(l);
                errors.extend(e);
            }
        }
        Outcome {
            wall: start.elapsed(),
            latencies,
            errors,
        }
    })
}

/// Throughput and latency of the confirmed pushes.
#[derive(Debug, Clone, Copy)]
pub struct Summary {
    /// Pushes counted.
    pub pushes: usize,
    /// Wall time.
    pub wall: Duration,
    /// Pushes per second.
    pub rate: f64,
    /// Median latency.
    pub p50: Duration,
    /// 99th percentile latency.
    pub p99: Duration,
    /// Slowest push.
    pub max: Duration,
}

impl<E> Outcome<E> {
    /// The summary of the confirmed pushes (`None` if there were none).
    pub fn summary(&mut self) -> Option<Summary> {
        summarize(&mut self.latencies, self.wall)
    }
}

/// The summary of `latencies` (sorted in place) over `wall`; `None` for none.
pub fn summarize(latencies: &mut [Duration], wall: Duration) -> Option<Summary> {
    latencies.sort();
    let max = *latencies.last()?;
    Some(Summary {
        pushes: latencies.len(),
        wall,
        rate: latencies.len() as f64 / wall.as_secs_f64(),
        p50: percentile(latencies, 50.0),
        p99: percentile(latencies, 99.0),
        max,
    })
}

/// The nearest-rank percentile of sorted `v`.
pub fn percentile(v: &[Duration], p: f64) -> Duration {
    let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
    v[rank.clamp(1, v.len()) - 1]
}

/// `d` in milliseconds, one decimal.
pub fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

/// The load average, as `uptime` shows it (for the record next to the figures).
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

/// Why a push was not acknowledged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PushError {
    /// The server answered and refused: `unpack <error>` or `ng <ref> <reason>`.
    Refused(String),
    /// An HTTP status other than 200.
    Status(u16, String),
    /// Connecting, reading or writing failed, ssh exited unsuccessfully, or the answer was not
    /// git's protocol.
    Transport(String),
}

impl PushError {
    /// The kind, as the report groups errors: `refused`, `http <status>`, `transport`.
    pub fn kind(&self) -> String {
        match self {
            PushError::Refused(_) => "refused".into(),
            PushError::Status(s, _) => format!("http {s}"),
            PushError::Transport(_) => "transport".into(),
        }
    }

    /// What went wrong.
    pub fn message(&self) -> &str {
        match self {
            PushError::Refused(m) | PushError::Status(_, m) | PushError::Transport(m) => m,
        }
    }
}

/// What a push needs from the advertisement: the capabilities to ask for.
fn capabilities(advertisement: &[u8], object_format: &str) -> Result<String, PushError> {
    let first = pkt_lines(advertisement)
        .into_iter()
        .flatten()
        .find(|l| !l.starts_with(b"# service="))
        .ok_or_else(|| PushError::Transport("empty advertisement".into()))?;
    let caps = first
        .iter()
        .position(|&b| b == 0)
        .map(|i| String::from_utf8_lossy(&first[i + 1..]).trim().to_owned())
        .unwrap_or_default();
    let offered: Vec<&str> = caps.split(' ').collect();
    let server_format = offered
        .iter()
        .find_map(|c| c.strip_prefix("object-format="))
        .unwrap_or("sha1");
    if server_format != object_format {
        return Err(PushError::Transport(format!(
            "the repository is {server_format}, the pushes {object_format} (--object-format)"
        )));
    }
    if !offered.contains(&"report-status") {
        return Err(PushError::Transport(
            "the server does not offer report-status: a push cannot be confirmed".into(),
        ));
    }
    let mut out = String::from("report-status");
    for c in ["side-band-64k", "quiet"] {
        if offered.contains(&c) {
            out.push(' ');
            out.push_str(c);
        }
    }
    if object_format != "sha1" {
        let _ = write!(out, " object-format={object_format}");
    }
    out.push_str(concat!(" agent=berth-bench/", env!("CARGO_PKG_VERSION")));
    Ok(out)
}

/// The report in `answer` (side-band demultiplexed when `sideband`): `Ok` when it says
/// `unpack ok` and `ok <refname>`.
fn check_report(answer: &[u8], sideband: bool, refname: &str) -> Result<(), PushError> {
    let report: Vec<u8> = if sideband {
        pkt_lines(answer)
            .into_iter()
            .flatten()
            .filter(|p| p.first() == Some(&1))
            .flat_map(|p| p[1..].to_vec())
            .collect()
    } else {
        answer.to_vec()
    };
    let lines: Vec<String> = pkt_lines(&report)
        .into_iter()
        .flatten()
        .map(|l| String::from_utf8_lossy(l).trim_end().to_owned())
        .collect();
    match lines.first().map(String::as_str) {
        Some("unpack ok") => {}
        Some(u) if u.starts_with("unpack ") => return Err(PushError::Refused(u.to_owned())),
        _ => {
            return Err(PushError::Transport(format!(
                "no report: {}",
                String::from_utf8_lossy(&answer[..answer.len().min(300)])
            )));
        }
    }
    for l in &lines[1..] {
        if l.strip_prefix("ok ") == Some(refname) {
            return Ok(());
        }
        if l.starts_with("ng ") {
            return Err(PushError::Refused(l.clone()));
        }
    }
    Err(PushError::Transport(format!(
        "the report has no ok for {refname}: {lines:?}"
    )))
}

/// How to push to one server.
pub struct Client {
    /// The URL.
    pub url: Url,
    /// ssh: the identity file.
    pub identity: Option<PathBuf>,
    /// ssh: `-o` options.
    pub ssh_options: Vec<String>,
    /// https: the roots (for `git ls-remote` too, as `GIT_SSL_CAINFO`).
    pub ca_file: Option<PathBuf>,
    /// The object format of the pushes.
    pub object_format: String,
    /// `https://`: the TLS client's configuration.
    #[cfg(feature = "serve")]
    pub tls: Option<std::sync::Arc<tokio_rustls::rustls::ClientConfig>>,
}

/// One push: its command and pack.
pub struct Push<'a> {
    /// The repository's path on the server.
    pub path: &'a str,
    /// The ref.
    pub refname: &'a str,
    /// The old value (the zero id to create).
    pub old: &'a str,
    /// The new value.
    pub new: &'a str,
    /// The pack.
    pub pack: &'a [u8],
}

impl Client {
    /// The `ssh` command for `path`'s `git-receive-pack` (or another service).
    pub fn ssh(&self, service: &str, path: &str) -> Command {
        let mut c = Command::new("ssh");
        c.args(["-o", "BatchMode=yes"]);
        if let Some(id) = &self.identity {
            c.arg("-i").arg(id).args(["-o", "IdentitiesOnly=yes"]);
        }
        for o in &self.ssh_options {
            c.arg("-o").arg(o);
        }
        if let Transport::Ssh { dest, port } = &self.url.transport {
            if let Some(p) = port {
                c.arg("-p").arg(p.to_string());
            }
            c.arg(dest);
        }
        c.arg(format!("{service} '{}'", path.replace('\'', "'\\''")));
        c
    }

    /// The URL of the repository at `path` (for `git ls-remote`).
    pub fn repo_url(&self, path: &str) -> String {
        format!("{}{path}", self.url.origin)
    }

    /// Make one push; `Ok` when the server acknowledged it.
    pub fn push(&self, p: &Push) -> Result<(), PushError> {
        match &self.url.transport {
            Transport::Http { addr, auth, .. } => self.push_http(addr, auth.as_deref(), p),
            Transport::Ssh { .. } => self.push_ssh(p),
        }
    }

    fn request(&self, caps: &str, p: &Push) -> Vec<u8> {
        let mut body = pkt(&format!("{} {} {}\0{caps}\n", p.old, p.new, p.refname));
        body.extend_from_slice(b"0000");
        body.extend_from_slice(p.pack);
        body
    }

    /// One HTTP request, over TLS for `https://`.
    fn request_http(
        &self,
        addr: &str,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> std::io::Result<(u16, Vec<u8>)> {
        #[cfg(feature = "serve")]
        if let Some(tls) = &self.tls {
            return https(tls, addr, method, path, headers, body);
        }
        if let Transport::Http { tls: true, .. } = self.url.transport {
            return Err(std::io::Error::other("https needs berth built with serve"));
        }
        http(addr, method, path, headers, body)
    }

    fn push_http(&self, addr: &str, auth: Option<&str>, p: &Push) -> Result<(), PushError> {
        let auth: Vec<(&str, &str)> = auth.map(|a| ("Authorization", a)).into_iter().collect();
        let transport =
            |what: &str, e: std::io::Error| PushError::Transport(format!("{what}: {e}"));
        let excerpt = |b: &[u8]| {
            String::from_utf8_lossy(&b[..b.len().min(200)])
                .trim()
                .to_owned()
        };
        let (status, adv) = self
            .request_http(
                addr,
                "GET",
                &format!("{}/info/refs?service=git-receive-pack", p.path),
                &auth,
                b"",
            )
            .map_err(|e| transport("GET info/refs", e))?;
        if status != 200 {
            return Err(PushError::Status(
                status,
                format!("GET {}/info/refs: {}", p.path, excerpt(&adv)),
            ));
        }
        if !contains(&adv, b"# service=git-receive-pack\n") {
            return Err(PushError::Transport(format!(
                "GET {}/info/refs: not a smart HTTP answer: {}",
                p.path,
                excerpt(&adv)
            )));
        }
        let caps = capabilities(&adv, &self.object_format)?;
        let mut headers = vec![
            ("Content-Type", "application/x-git-receive-pack-request"),
            ("Accept", "application/x-git-receive-pack-result"),
        ];
        headers.extend(auth.iter().copied());
        let (status, answer) = self
            .request_http(
                addr,
                "POST",
                &format!("{}/git-receive-pack", p.path),
                &headers,
                &self.request(&caps, p),
            )
            .map_err(|e| transport("POST git-receive-pack", e))?;
        if status != 200 {
            return Err(PushError::Status(
                status,
                format!("POST {}/git-receive-pack: {}", p.path, excerpt(&answer)),
            ));
        }
        check_report(&answer, caps.contains("side-band-64k"), p.refname)
    }

    fn push_ssh(&self, p: &Push) -> Result<(), PushError> {
        let transport =
            |what: &str, e: std::io::Error| PushError::Transport(format!("ssh: {what}: {e}"));
        let mut child = self
            .ssh("git-receive-pack", p.path)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| transport("spawning", e))?;
        let mut stderr = child.stderr.take();
        let reader = std::thread::spawn(move || {
            let mut s = Vec::new();
            if let Some(e) = stderr.as_mut() {
                let _ = e.read_to_end(&mut s);
            }
            s
        });
        let mut stdin = child.stdin.take();
        let mut stdout = child.stdout.take();
        // The advertisement: pkt-lines up to the flush.
        let mut adv = Vec::new();
        let read_adv = (|| -> std::io::Result<bool> {
            let Some(out) = stdout.as_mut() else {
                return Ok(false);
            };
            loop {
                let mut len = [0u8; 4];
                out.read_exact(&mut len)?;
                adv.extend_from_slice(&len);
                let n = std::str::from_utf8(&len)
                    .ok()
                    .and_then(|h| usize::from_str_radix(h, 16).ok())
                    .ok_or_else(|| std::io::Error::other("bad pkt-line length"))?;
                if n == 0 {
                    return Ok(true);
                }
                let mut payload = vec![0u8; n.saturating_sub(4)];
                out.read_exact(&mut payload)?;
                adv.extend_from_slice(&payload);
            }
        })();
        let result = match read_adv {
            Ok(true) => match capabilities(&adv, &self.object_format) {
                Ok(caps) => {
                    let body = self.request(&caps, p);
                    let written = stdin.as_mut().map(|s| s.write_all(&body));
                    drop(stdin.take());
                    let mut answer = Vec::new();
                    let read = stdout.as_mut().map(|o| o.read_to_end(&mut answer));
                    match (written, read) {
                        (Some(Err(e)), _) => Err(transport("writing the request", e)),
                        (_, Some(Err(e))) => Err(transport("reading the report", e)),
                        _ => Ok((answer, caps.contains("side-band-64k"))),
                    }
                }
                Err(e) => {
                    // Tell the server there is nothing to push.
                    if let Some(s) = stdin.as_mut() {
                        let _ = s.write_all(b"0000");
                    }
                    Err(e)
                }
            },
            Ok(false) => Err(PushError::Transport("ssh: no stdout".into())),
            Err(e) => Err(transport("reading the advertisement", e)),
        };
        drop(stdin);
        let status = child.wait().map_err(|e| transport("waiting", e))?;
        let stderr = reader.join().unwrap_or_default();
        let stderr = String::from_utf8_lossy(&stderr).trim().to_owned();
        let (answer, sideband) = result.map_err(|e| match e {
            PushError::Transport(m) if !stderr.is_empty() => {
                PushError::Transport(format!("{m}: {stderr}"))
            }
            e => e,
        })?;
        if !status.success() && answer.is_empty() {
            return Err(PushError::Transport(format!("ssh: {status}: {stderr}")));
        }
        check_report(&answer, sideband, p.refname)
    }
}

/// A git command isolated from the machine's configuration, with fixed identities.
fn git(dir: &Path) -> Command {
    let mut c = Command::new("git");
    c.current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "berth bench")
        .env("GIT_AUTHOR_EMAIL", "bench@berth")
        .env("GIT_COMMITTER_NAME", "berth bench")
        .env("GIT_COMMITTER_EMAIL", "bench@berth");
    c
}

/// Run `c` with `stdin`; its stdout, or its stderr as the error.
fn run(mut c: Command, stdin: Option<&[u8]>) -> Result<Vec<u8>, String> {
    let what = format!("{c:?}");
    c.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut child = c.spawn().map_err(|e| format!("{what}: {e}"))?;
    let writer = stdin.map(|input| {
        let mut pipe = child.stdin.take();
        let input = input.to_vec();
        std::thread::spawn(move || {
            if let Some(p) = pipe.as_mut() {
                let _ = p.write_all(&input);
            }
        })
    });
    let out = child
        .wait_with_output()
        .map_err(|e| format!("{what}: {e}"))?;
    if let Some(w) = writer {
        let _ = w.join();
    }
    if !out.status.success() {
        return Err(format!(
            "{what}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(out.stdout)
}

/// One client's work: its repository, branch, commits (oldest first) and the pack of each
/// push made from the previous commit.
struct Chain {
    path: String,
    refname: String,
    commits: Vec<String>,
    packs: Vec<Vec<u8>>,
}

/// Make each client's chain of `pushes` commits in `gen.git` under `dir` (one fast-import),
/// and the packs of the pushes.
fn chains(
    dir: &Path,
    object_format: &str,
    run_id: &str,
    targets: &[(String, String)],
    pushes: usize,
) -> Result<(PathBuf, Vec<Chain>), String> {
    let gen_dir = dir.join("gen.git");
    let mut init = git(dir);
    init.args(["init", "-q", "--bare"])
        .arg(format!("--object-format={object_format}"))
        .arg(&gen_dir);
    run(init, None)?;
    let mut stream = String::new();
    let mut mark = 0usize;
    let mut marks = Vec::new();
    for c in 0..targets.len() {
        let mut chain = Vec::new();
        for k in 0..pushes {
            mark += 1;
            let msg = format!("berth bench load {run_id}: client {c}, push {}\n", k + 1);
            let mut content = String::new();
            let mut x =
                (mark as u64 ^ std::process::id() as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
            while content.len() < 1024 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let _ = writeln!(content, "{x:016x}");
            }
            let _ = write!(
                stream,
                "commit refs/heads/c{c}\nmark :{mark}\ncommitter berth bench <bench@berth> {} +0000\ndata {}\n{msg}",
                1_700_000_000 + mark,
                msg.len()
            );
            if let Some(prev) = chain.last() {
                let _ = writeln!(stream, "from :{prev}");
            }
            let _ = write!(
                stream,
                "M 100644 inline file.txt\ndata {}\n{content}\n",
                content.len()
            );
            chain.push(mark);
        }
        marks.push(chain);
    }
    let marks_file = dir.join("marks");
    let mut c = git(&gen_dir);
    c.args(["fast-import", "--quiet"])
        .arg(format!("--export-marks={}", marks_file.display()));
    run(c, Some(stream.as_bytes()))?;
    let text = std::fs::read_to_string(&marks_file).map_err(|e| format!("marks: {e}"))?;
    let mut ids = vec![String::new(); mark + 1];
    for line in text.lines() {
        if let Some((m, id)) = line.split_once(' ')
            && let Ok(m) = m.trim_start_matches(':').parse::<usize>()
            && m <= mark
        {
            ids[m] = id.to_owned();
        }
    }
    let mut out = Vec::new();
    for ((path, refname), chain) in targets.iter().zip(&marks) {
        let commits: Vec<String> = chain.iter().map(|m| ids[*m].clone()).collect();
        let mut packs = Vec::new();
        for k in 0..commits.len() {
            let prev = k.checked_sub(1).map(|p| commits[p].as_str());
            packs.push(pack(&gen_dir, &commits[k], prev)?);
        }
        out.push(Chain {
            path: path.clone(),
            refname: refname.clone(),
            commits,
            packs,
        });
    }
    Ok((gen_dir, out))
}

/// The pack `git push` sends for `new`, the server having `old` (and nothing else of ours).
fn pack(gen_dir: &Path, new: &str, old: Option<&str>) -> Result<Vec<u8>, String> {
    let mut c = git(gen_dir);
    c.args(["pack-objects", "--revs", "--stdout", "-q"]);
    let revs = match old {
        Some(o) => format!("{new}\n^{o}\n"),
        None => format!("{new}\n"),
    };
    run(c, Some(revs.as_bytes()))
}

/// What a run gave.
pub struct Report {
    /// The URLs, in the order clients take them.
    pub urls: Vec<String>,
    /// Clients and pushes per client.
    pub clients: usize,
    /// Pushes each client made.
    pub pushes: usize,
    /// How the clients share repositories.
    pub repos: Repos,
    /// The load average at the start.
    pub load_average: String,
    /// The acknowledged pushes' figures (`None` when none was).
    pub summary: Option<Summary>,
    /// Wall time of the run.
    pub wall: Duration,
    /// Errors by kind: (kind, count, first message), in order of first occurrence.
    pub errors: Vec<(String, usize, String)>,
    /// Pushes acknowledged whose result `git ls-remote` does not show, or why it could not be
    /// checked.
    pub verification: Vec<String>,
    /// The acknowledged pushes checked.
    pub verified: usize,
}

impl Report {
    /// Every push acknowledged and verified.
    pub fn ok(&self) -> bool {
        self.errors.is_empty() && self.verification.is_empty()
    }
}

/// The zero id of `object_format`.
fn zero(object_format: &str) -> String {
    "0".repeat(if object_format == "sha256" { 64 } else { 40 })
}

/// The branches `git ls-remote <url>` lists: `ref → id`.
fn ls_remote(
    client: &Client,
    path: &str,
) -> Result<std::collections::HashMap<String, String>, String> {
    let mut c = Command::new("git");
    c.args(["ls-remote", "--heads"])
        .arg(client.repo_url(path))
        .env("GIT_TERMINAL_PROMPT", "0");
    if let Some(ca) = &client.ca_file {
        c.env("GIT_SSL_CAINFO", ca);
    }
    if let Transport::Ssh { .. } = client.url.transport {
        // The same ssh command as the pushes (git adds -p and the destination).
        let mut ssh = String::from("ssh -o BatchMode=yes");
        if let Some(id) = &client.identity {
            let _ = write!(ssh, " -i '{}' -o IdentitiesOnly=yes", id.display());
        }
        for o in &client.ssh_options {
            let _ = write!(ssh, " -o '{o}'");
        }
        c.env("GIT_SSH_COMMAND", ssh);
    }
    let out = run(c, None)?;
    Ok(String::from_utf8_lossy(&out)
        .lines()
        .filter_map(|l| {
            let (id, name) = l.split_once('\t')?;
            Some((name.to_owned(), id.to_owned()))
        })
        .collect())
}

/// Run the load and check the result.
pub fn run_load(a: &LoadArgs, progress: &mut dyn Write) -> Result<Report, String> {
    let urls = a
        .urls
        .iter()
        .map(|u| parse_url(u))
        .collect::<Result<Vec<Url>, String>>()?;
    if a.clients == 0 || a.pushes == 0 {
        return Err("--clients and --pushes must be at least 1".into());
    }
    let servers = urls
        .into_iter()
        .map(|url| {
            #[cfg(feature = "serve")]
            let tls = match url.transport {
                Transport::Http { tls: true, .. } => Some(tls_config(a.ca_file.as_deref())?),
                _ => None,
            };
            Ok(Client {
                url,
                identity: a.identity.clone(),
                ssh_options: a.ssh_options.clone(),
                ca_file: a.ca_file.clone(),
                object_format: a.object_format.clone(),
                #[cfg(feature = "serve")]
                tls,
            })
        })
        .collect::<Result<Vec<Client>, String>>()?;
    // Client `c`'s server.
    let client = |c: usize| &servers[c % servers.len()];
    let tmp = match &a.workdir {
        Some(d) => tempfile::Builder::new()
            .prefix("berth-bench-load-")
            .tempdir_in(d),
        None => tempfile::Builder::new()
            .prefix("berth-bench-load-")
            .tempdir(),
    }
    .map_err(|e| format!("temporary directory: {e}"))?;
    let started = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let run_id = format!("{started}-{}", std::process::id());
    let targets: Vec<(String, String)> = (0..a.clients)
        .map(|c| {
            let path = match a.repos {
                Repos::One => client(c).url.path.clone(),
                Repos::Each => format!("{}/c{c}.git", client(c).url.path),
            };
            (path, format!("refs/heads/bench-load/{run_id}/c{c}"))
        })
        .collect();
    let _ = writeln!(
        progress,
        "bench load: making {} pushes ({} clients × {})",
        a.clients * a.pushes,
        a.clients,
        a.pushes
    );
    let (gen_dir, chains) = chains(tmp.path(), &a.object_format, &run_id, &targets, a.pushes)?;
    let zero = zero(&a.object_format);
    let load_average = load_average();
    let _ = writeln!(
        progress,
        "bench load: pushing to {} (load average {load_average})",
        a.urls.join(" ")
    );
    // Per client: the index of its last acknowledged commit, and how many were.
    type Acked = std::sync::Mutex<(Option<usize>, usize)>;
    let acked: Vec<Acked> = (0..a.clients)
        .map(|_| std::sync::Mutex::new((None, 0)))
        .collect();
    let work: Vec<Vec<usize>> = (0..a.clients).map(|_| (0..a.pushes).collect()).collect();
    // `run_clients` times each call; a push after a failure needs a pack made from the last
    // acknowledged commit, which is made here, before this push's clock starts.
    let mut outcome = run_clients(&work, |c, &k| -> Result<(), PushError> {
        let chain = &chains[c];
        let (last, _) = *acked[c].lock().unwrap_or_else(|e| e.into_inner());
        let fresh;
        let (old, pack) = match last {
            Some(l) if l + 1 == k => (chain.commits[l].as_str(), chain.packs[k].as_slice()),
            None if k == 0 => (zero.as_str(), chain.packs[0].as_slice()),
            l => {
                let old = l.map(|l| chain.commits[l].as_str());
                fresh = pack(&gen_dir, &chain.commits[k], old)
                    .map_err(|e| PushError::Transport(format!("making the pack: {e}")))?;
                (old.unwrap_or(&zero), fresh.as_slice())
            }
        };
        let p = Push {
            path: &chain.path,
            refname: &chain.refname,
            old,
            new: &chain.commits[k],
            pack,
        };
        client(c).push(&p)?;
        let mut a = acked[c].lock().unwrap_or_else(|e| e.into_inner());
        *a = (Some(k), a.1 + 1);
        Ok(())
    });
    let mut errors: Vec<(String, usize, String)> = Vec::new();
    for e in &outcome.errors {
        let kind = e.kind();
        match errors.iter_mut().find(|(k, ..)| *k == kind) {
            Some(entry) => entry.1 += 1,
            None => errors.push((kind, 1, e.message().to_owned())),
        }
    }
    let _ = writeln!(progress, "bench load: verifying with git ls-remote");
    let mut verification = Vec::new();
    let mut verified = 0;
    // Each repository listed once per URL, through the URL its clients pushed to.
    type Listed = ((usize, String), std::collections::HashMap<String, String>);
    let mut listed: Vec<Listed> = Vec::new();
    for (c, chain) in chains.iter().enumerate() {
        let (last, count) = *acked[c].lock().unwrap_or_else(|e| e.into_inner());
        if last.is_none() {
            // Nothing acknowledged, nothing to verify (the server may be unreachable).
            continue;
        }
        let key = (c % servers.len(), chain.path.clone());
        if !listed.iter().any(|(k, _)| *k == key) {
            match ls_remote(client(c), &chain.path) {
                Ok(refs) => listed.push((key.clone(), refs)),
                Err(e) => {
                    verification.push(format!("git ls-remote: {e}"));
                    listed.push((key, Default::default()));
                    continue;
                }
            }
        }
        let refs = &listed.iter().find(|(k, _)| *k == key).map(|(_, r)| r);
        let Some(refs) = refs else { continue };
        let want = last.map(|l| chain.commits[l].as_str());
        // Each push named the previous acknowledged commit as its old value, so the last one
        // in place means every acknowledged push of the chain landed.
        match (want, refs.get(&chain.refname).map(String::as_str)) {
            (Some(w), Some(got)) if w == got => verified += count,
            (None, None) => {}
            (w, got) => verification.push(format!(
                "client {c}: {} {} is {}, its last acknowledged push set {}",
                chain.path,
                chain.refname,
                got.unwrap_or("absent"),
                w.unwrap_or("nothing (no push acknowledged)")
            )),
        }
    }
    let summary = outcome.summary();
    Ok(Report {
        urls: a.urls.clone(),
        clients: a.clients,
        pushes: a.pushes,
        repos: a.repos,
        load_average,
        summary,
        wall: outcome.wall,
        errors,
        verification,
        verified,
    })
}

fn json_string(s: &str) -> String {
    serde_json::Value::from(s).to_string()
}

fn repos_name(r: Repos) -> &'static str {
    match r {
        Repos::One => "one",
        Repos::Each => "each",
    }
}

/// The report as text.
pub fn text(r: &Report) -> String {
    let mut out = String::new();
    let attempted = r.clients * r.pushes;
    let _ = writeln!(
        out,
        "{}: {} client{} × {} push{}, {} repository{}; load average {}",
        r.urls.join(" "),
        r.clients,
        if r.clients == 1 { "" } else { "s" },
        r.pushes,
        if r.pushes == 1 { "" } else { "es" },
        repos_name(r.repos),
        if r.repos == Repos::One { "" } else { " each" },
        r.load_average
    );
    match &r.summary {
        Some(s) => {
            let _ = writeln!(
                out,
                "pushes     {} acknowledged of {attempted} in {:.2} s: {:.1} pushes/s",
                s.pushes,
                s.wall.as_secs_f64(),
                s.rate
            );
            let _ = writeln!(
                out,
                "latency    p50 {}, p99 {}, max {}",
                ms(s.p50),
                ms(s.p99),
                ms(s.max)
            );
        }
        None => {
            let _ = writeln!(out, "pushes     none acknowledged of {attempted}");
        }
    }
    if r.errors.is_empty() {
        let _ = writeln!(out, "errors     none");
    }
    for (kind, n, first) in &r.errors {
        let _ = writeln!(out, "errors     {n} {kind}; the first: {first}");
    }
    let _ = writeln!(
        out,
        "verified   {} of {} acknowledged pushes on the server (git ls-remote)",
        r.verified,
        r.summary.map_or(0, |s| s.pushes)
    );
    for v in &r.verification {
        let _ = writeln!(out, "VERIFICATION FAILED: {v}");
    }
    out
}

/// The report as JSON.
pub fn json(r: &Report) -> String {
    let num =
        |d: Option<Duration>| d.map_or("null".into(), |d| format!("{:.3}", d.as_secs_f64() * 1e3));
    let s = r.summary;
    let errors: Vec<String> = r
        .errors
        .iter()
        .map(|(k, n, first)| {
            format!(
                "{{\"kind\":{},\"count\":{n},\"first\":{}}}",
                json_string(k),
                json_string(first)
            )
        })
        .collect();
    let verification: Vec<String> = r.verification.iter().map(|v| json_string(v)).collect();
    format!(
        "{{\"url\":{},\"urls\":{},\"clients\":{},\"pushes_per_client\":{},\"repos\":\"{}\",\"load_average\":{},\
         \"attempted\":{},\"acknowledged\":{},\"wall_s\":{:.3},\"pushes_per_s\":{},\"p50_ms\":{},\
         \"p99_ms\":{},\"max_ms\":{},\"errors\":[{}],\"verified\":{},\"verification_failures\":[{}],\
         \"ok\":{}}}",
        json_string(&r.urls[0]),
        serde_json::Value::from(r.urls.clone()),
        r.clients,
        r.pushes,
        repos_name(r.repos),
        json_string(&r.load_average),
        r.clients * r.pushes,
        s.map_or(0, |s| s.pushes),
        r.wall.as_secs_f64(),
        s.map_or("null".into(), |s| format!("{:.2}", s.rate)),
        num(s.map(|s| s.p50)),
        num(s.map(|s| s.p99)),
        num(s.map(|s| s.max)),
        errors.join(","),
        r.verified,
        verification.join(","),
        r.ok()
    )
}

/// Run `berth bench load`: exit 0 when every push was acknowledged and verified, 1 when one
/// was not, 2 when the benchmark could not run.
pub fn load_main(a: LoadArgs) -> ExitCode {
    match run_load(&a, &mut std::io::stderr()) {
        Err(e) => {
            eprintln!("berth bench load: {e}");
            ExitCode::from(2)
        }
        Ok(r) => {
            if a.json {
                println!("{}", json(&r));
            } else {
                print!("{}", text(&r));
            }
            if r.ok() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let u = parse_url("http://bob:pw@127.0.0.1:8080/a/b.git/").unwrap();
        assert_eq!(u.path, "/a/b.git");
        assert_eq!(u.origin, "http://bob:pw@127.0.0.1:8080");
        assert_eq!(
            u.transport,
            Transport::Http {
                addr: "127.0.0.1:8080".into(),
                tls: false,
                auth: Some("Basic Ym9iOnB3".into())
            }
        );
        let u = parse_url("ssh://git@host:2222/r.git").unwrap();
        assert_eq!(
            u.transport,
            Transport::Ssh {
                dest: "git@host".into(),
                port: Some(2222)
            }
        );
        let u = parse_url("https://host/r").unwrap();
        assert_eq!(
            u.transport,
            Transport::Http {
                addr: "host:443".into(),
                tls: true,
                auth: None
            }
        );
        assert!(parse_url("host:r").is_err());
    }

    #[test]
    fn reports() {
        let report = |lines: &[&str]| {
            let mut b = Vec::new();
            for l in lines {
                b.extend(pkt(&format!("{l}\n")));
            }
            b.extend(b"0000");
            b
        };
        let r = "refs/heads/x";
        assert_eq!(
            check_report(&report(&["unpack ok", "ok refs/heads/x"]), false, r),
            Ok(())
        );
        assert_eq!(
            check_report(
                &report(&["unpack ok", "ng refs/heads/x hook declined"]),
                false,
                r
            ),
            Err(PushError::Refused("ng refs/heads/x hook declined".into()))
        );
        assert_eq!(
            check_report(&report(&["unpack index-pack failed"]), false, r).map_err(|e| e.kind()),
            Err("refused".into())
        );
        let mut band = Vec::new();
        band.push(1u8);
        band.extend(report(&["unpack ok", "ok refs/heads/x"]));
        let mut sb = pkt(&String::from_utf8(band).unwrap());
        sb.extend(b"0000");
        assert_eq!(check_report(&sb, true, r), Ok(()));
    }

    #[test]
    fn capabilities_follow_the_advertisement() {
        let adv = [
            pkt("# service=git-receive-pack\n"),
            b"0000".to_vec(),
            pkt(&format!(
                "{} capabilities^{{}}\0report-status delete-refs quiet\n",
                zero("sha1")
            )),
            b"0000".to_vec(),
        ]
        .concat();
        let caps = capabilities(&adv, "sha1").unwrap();
        assert!(caps.starts_with("report-status quiet agent="), "{caps}");
        assert!(capabilities(&adv, "sha256").is_err());
    }
}
