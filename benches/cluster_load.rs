//! What replication costs (issue #15): the same pushes into one plain `berth serve` and into a
//! three-node `berth serve --cluster … --replicas 3 --ack majority` over a three-member etcd,
//! all on loopback, in one run:
//!
//! 1. small pushes: `BERTH_LOAD_PUSHES` (default 1000) one-commit fast-forwards from
//!    `BERTH_LOAD_CLIENTS` (default 8) concurrent clients, pushes/s, p50 and p99, and the
//!    cluster's ratio to the plain node, made by `berth bench load` (the binary built with this
//!    bench, `support/load.rs`; in the cluster with the three nodes' URLs, so client `c` pushes
//!    to node `c mod 3`). Client `c` pushes its own repository `c<c>.git` (`--repos each`):
//!    every repository of the cluster has one log in etcd, and a replica refuses a prepare
//!    decided against another entry than the one it applied last, so clients pushing
//!    different branches of one repository at once would measure their collisions (refused
//!    pushes: no quorum) rather than what replication costs; `BERTH_LOAD_SHAPE=one` measures
//!    that instead.
//! 2. the 10,000-ref push (`BERTH_BENCH_REFS`), as `berth bench many-refs` generates it (one
//!    commit already on the server, the empty pack, ref i at `refs/heads/b/<i>`), over HTTP
//!    into a new repository seeded with that commit: `BERTH_BENCH_RUNS` (default 5) runs into
//!    each, the plain node and the cluster taking turns, min / median / max and the ratio of
//!    the medians.
//!
//! The pushes are raw HTTP requests as `git push` sends them (`GET info/refs`, then `POST
//! git-receive-pack` with the commands and a pack made before the clock started), one
//! connection per request; a push counts only if its report says `unpack ok` and `ok <ref>`.
//! The repositories are created through pushes (a cluster places a repository at its first
//! push): a first `bench load` run of one push per client creates them and a branch each, and
//! every replica has caught up before the timed run starts (whose clients push new branches). The plain node and the cluster run side by side, each idle while the other is
//! measured. Each case also prints where its time went: the push phases from the nodes'
//! `/metrics`, the CPU time of the nodes, their git children and etcd, and etcd's calls.
//!
//! After each case, so that failures cannot pass for speed: `bench load`'s own check (every
//! branch, through the node its client pushed to, at its last acknowledged commit), every
//! replica caught up (the same `git for-each-ref` and the same applied log entry on the three
//! roots), `git fsck --strict` clean on each, and in the cluster the repositories' applied log
//! sequence numbers summing to the pushes acknowledged (both runs): a push that landed without
//! being acknowledged, or the reverse, shows there. Anything else is reported FAILED and the
//! bench exits 1 (its directory kept).
//!
//! ```text
//! cargo bench --bench cluster_load          # needs etcd (Debian: etcd-server); installs nothing
//! ```
//!
//! Bounded: a request times out after 120 s (`bench load`'s), a catch-up wait after 60 s.
//! Every process started (etcd, the berth nodes) is killed when the bench ends or panics.
//! etcd runs with its default request limit, 1.5 MiB (`BERTH_CLUSTER_ETCD_MAX_REQUEST_BYTES`
//! sets `--max-request-bytes`): the commit point's txn of a 10,000-ref push writes the entry
//! once (`entries/<seq>`; the log head is small), its updates packed (~5 bytes a ref here,
//! `cluster/wire/packed.rs`), which fits.
//! `BERTH_CLUSTER_ACK=all` runs the cluster with `--ack all`; `BERTH_CLUSTER_DURABILITY`, a
//! comma-separated list of `--cluster-durability` values (`synced,core-fsync`), runs one
//! three-node cluster per value, each on its own etcd, beside the one node in the same run
//! (unset: one cluster, the nodes' default); `BERTH_LOAD_ROUNDS` (default 1)
//! repeats the small-push cases, each round on fresh servers, the first target alternating;
//! `BERTH_CLUSTER_TLS=1` adds a third target beside the two, measured in the same run, taking
//! its turn: the same cluster over TLS (a CA and one certificate made with `openssl`; etcd
//! serving its clients over TLS with `--client-cert-auth`, the nodes talking to each other
//! over mutual TLS on `--cluster-listen`; clients still push over plain HTTP);
//! `BERTH_LOAD_KEEP=1` keeps the directory (the nodes' logs are `*/node<i>.log`; `RUST_LOG` is
//! passed to them).

mod support;

#[path = "../src/cli/bench/mod.rs"]
// The unit tests' imports are unused without the test harness.
#[allow(dead_code, unused_imports)]
mod bench;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bench::load::{contains, http, pkt};
use support::load::{Load, Loaded, Repos, env_usize, fsck, load_average, ms};
use support::ports::free_ports;
use support::server::{Server, spawn_berth};

/// The zero id (SHA-1).
const ZERO: &str = "0000000000000000000000000000000000000000";

/// What the client asks for, as git 2.47 over HTTP.
const CAPABILITIES: &str =
    "report-status-v2 side-band-64k quiet object-format=sha1 agent=git/2.47.3";

/// How long a caught-up check waits.
const CATCH_UP: Duration = Duration::from_secs(60);

/// A three-member etcd on loopback, killed when dropped.
struct Etcd {
    members: Vec<Child>,
    /// The client URLs, comma-separated (`--cluster`).
    urls: String,
    /// The members' plain HTTP addresses (`host:port`): the client URLs, or over TLS the
    /// metrics URLs (`/metrics`, `/health`).
    clients: Vec<String>,
}

/// `BERTH_CLUSTER_TLS=1`: a CA and the certificates it signed (for 127.0.0.1, server and client
/// usage): one presented by the etcd members and by the nodes to etcd, and one per node naming
/// it (`URI:berth-node:n<i>`), which the nodes present to each other (a node refuses a peer
/// whose certificate does not name exactly the node it meant, docs/cluster.md).
struct Certs {
    ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
    /// Node `i`'s certificate and key.
    nodes: Vec<(PathBuf, PathBuf)>,
}

impl Certs {
    fn make(dir: &Path) -> Certs {
        let c = Certs {
            ca: dir.join("ca.pem"),
            cert: dir.join("node.pem"),
            key: dir.join("node.key"),
            nodes: (0..3)
                .map(|i| (dir.join(format!("n{i}.pem")), dir.join(format!("n{i}.key"))))
                .collect(),
        };
        let ec = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
        ];
        let openssl = |args: &[&str]| {
            let out = Command::new("openssl")
                .current_dir(dir)
                .args(args)
                .output()
                .unwrap_or_else(|e| panic!("cannot run openssl: {e}"));
            assert!(out.status.success(), "openssl {args:?}: {out:?}");
        };
        let mut ca = vec!["req", "-x509", "-days", "2", "-subj", "/CN=bench CA"];
        ca.extend(ec);
        ca.extend(["-addext", "basicConstraints=critical,CA:TRUE"]);
        ca.extend(["-addext", "keyUsage=critical,keyCertSign,cRLSign"]);
        ca.extend(["-keyout", "ca.key", "-out", "ca.pem"]);
        openssl(&ca);
        // The shared certificate (stem "node", naming no node), then one per node.
        let stems: Vec<(String, &str)> = std::iter::once(("node".to_owned(), ""))
            .chain((0..3).map(|i| (format!("n{i}"), ["n0", "n1", "n2"][i])))
            .collect();
        for (stem, node) in &stems {
            let (key, csr, pem, ext) = (
                format!("{stem}.key"),
                format!("{stem}.csr"),
                format!("{stem}.pem"),
                format!("{stem}.ext"),
            );
            let mut req = vec!["req", "-subj", "/CN=berth node"];
            req.extend(ec);
            req.extend(["-keyout", &key, "-out", &csr]);
            openssl(&req);
            let uri = match node.is_empty() {
                true => String::new(),
                false => format!(",URI:berth-node:{node}"),
            };
            std::fs::write(
                dir.join(&ext),
                format!(
                    "subjectAltName=IP:127.0.0.1{uri}\nbasicConstraints=CA:FALSE\n\
                     keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth,clientAuth\n"
                ),
            )
            .unwrap();
            openssl(&[
                "x509",
                "-req",
                "-days",
                "2",
                "-CAcreateserial",
                "-in",
                &csr,
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-extfile",
                &ext,
                "-out",
                &pem,
            ]);
        }
        c
    }

    /// The paths as arguments: `(ca, cert, key)`.
    fn args(&self) -> [String; 3] {
        [&self.ca, &self.cert, &self.key].map(|p| p.to_str().unwrap().to_owned())
    }
}

impl Etcd {
    /// Three members, each accepting requests of up to `max_request_bytes`; over TLS with
    /// client certificates required when `tls`.
    fn start(dir: &Path, max_request_bytes: usize, tls: Option<&Certs>) -> Etcd {
        let ports = free_ports(9);
        let (client, rest) = ports.split_at(3);
        let (peer, metrics) = rest.split_at(3);
        let scheme = if tls.is_some() { "https" } else { "http" };
        let client_url = |p: u16| format!("{scheme}://127.0.0.1:{p}");
        let url = |p: u16| format!("http://127.0.0.1:{p}");
        let initial: Vec<String> = (0..3).map(|i| format!("e{i}={}", url(peer[i]))).collect();
        let plain = if tls.is_some() { metrics } else { client };
        let mut etcd = Etcd {
            members: Vec::new(),
            urls: client
                .iter()
                .map(|&p| client_url(p))
                .collect::<Vec<_>>()
                .join(","),
            clients: plain.iter().map(|p| format!("127.0.0.1:{p}")).collect(),
        };
        for i in 0..3 {
            let log = std::fs::File::create(dir.join(format!("etcd{i}.log"))).unwrap();
            let mut cmd = Command::new("etcd");
            if let Some(c) = tls {
                let [ca, cert, key] = c.args();
                cmd.args(["--cert-file", &cert, "--key-file", &key])
                    .args(["--trusted-ca-file", &ca, "--client-cert-auth"])
                    .args(["--listen-metrics-urls", &url(metrics[i])]);
            }
            let child = cmd
                .args(["--name", &format!("e{i}")])
                .arg("--data-dir")
                .arg(dir.join(format!("etcd{i}")))
                .args(["--listen-client-urls", &client_url(client[i])])
                .args(["--advertise-client-urls", &client_url(client[i])])
                .args(["--listen-peer-urls", &url(peer[i])])
                .args(["--initial-advertise-peer-urls", &url(peer[i])])
                .args(["--initial-cluster", &initial.join(",")])
                .args(["--initial-cluster-state", "new"])
                .args(["--initial-cluster-token", "berth-bench"])
                .args(["--max-request-bytes", &max_request_bytes.to_string()])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .unwrap_or_else(|e| panic!("cannot run etcd (Debian: etcd-server): {e}"));
            etcd.members.push(child);
        }
        // Up when every member accepts a write (the cluster has a leader); over TLS, when
        // every member's /health says so.
        let deadline = Instant::now() + Duration::from_secs(30);
        for addr in &etcd.clients {
            let put = br#"{"key":"L2JlcnRoLWJlbmNo","value":"eQ=="}"#;
            let up = || match tls {
                None => matches!(http(addr, "POST", "/v3/kv/put", &[], put), Ok((200, _))),
                Some(_) => matches!(http(addr, "GET", "/health", &[], b""),
                    Ok((200, body)) if contains(&body, b"true")),
            };
            while !up() {
                assert!(Instant::now() < deadline, "etcd did not start (etcd*.log)");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        etcd
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        for c in &mut self.members {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// One plain node or the three nodes of a cluster, with their roots. The servers are
/// killed (field order) before etcd.
struct Target {
    name: String,
    servers: Vec<Server>,
    roots: Vec<PathBuf>,
    etcd: Option<Etcd>,
}

impl Target {
    fn plain(dir: &Path) -> Target {
        let root = dir.join("root0");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_berth"));
        cmd.args(["serve", "--listen", "127.0.0.1:0", "--root"])
            .arg(&root);
        Target {
            name: "one node".into(),
            servers: vec![spawn_berth(cmd, &dir.join("node0.log"))],
            roots: vec![root],
            etcd: None,
        }
    }

    /// Three nodes over a new etcd; `durability` is their `--cluster-durability` (`None`: the
    /// default, not passed); `tls`: mutual TLS between the nodes and to etcd.
    fn cluster(
        dir: &Path,
        ack: &str,
        durability: Option<&str>,
        etcd_max_request: usize,
        tls: bool,
    ) -> Target {
        let certs = tls.then(|| Certs::make(dir));
        let etcd = Etcd::start(dir, etcd_max_request, certs.as_ref());
        let ports = free_ports(6);
        let roots: Vec<PathBuf> = (0..3).map(|i| dir.join(format!("root{i}"))).collect();
        let servers = (0..3)
            .map(|i| {
                let listen = format!("127.0.0.1:{}", ports[i]);
                let mut cmd = Command::new(env!("CARGO_BIN_EXE_berth"));
                cmd.args(["serve", "--listen", &listen, "--root"])
                    .arg(&roots[i])
                    .args(["--cluster", &etcd.urls, "--node", &format!("n{i}")])
                    .args(["--replicas", "3", "--ack", ack]);
                match &certs {
                    None => cmd.args(["--advertise", &format!("http://{listen}")]),
                    Some(c) => {
                        let node = format!("127.0.0.1:{}", ports[3 + i]);
                        let [ca, cert, key] = c.args();
                        let (own_cert, own_key) = &c.nodes[i];
                        cmd.args(["--cluster-listen", &node])
                            .args(["--advertise", &format!("https://{node}")])
                            .args(["--cluster-ca", &ca, "--cluster-cert"])
                            .arg(own_cert)
                            .arg("--cluster-key")
                            .arg(own_key)
                            .args(["--etcd-ca", &ca, "--etcd-cert", &cert, "--etcd-key", &key])
                    }
                };
                if let Some(d) = durability {
                    cmd.args(["--cluster-durability", d]);
                }
                spawn_berth(cmd, &dir.join(format!("node{i}.log")))
            })
            .collect();
        Target {
            name: format!(
                "3 nodes, --ack {ack}{}{}",
                durability.map_or(String::new(), |d| format!(", --cluster-durability {d}")),
                if tls { ", TLS" } else { "" }
            ),
            servers,
            roots,
            etcd: Some(etcd),
        }
    }

    fn is_cluster(&self) -> bool {
        self.etcd.is_some()
    }

    /// The address client `c` pushes to.
    fn addr(&self, c: usize) -> &str {
        &self.servers[c % self.servers.len()].addr
    }

    /// The servers' URLs (client `c` of `bench load` takes the one at `c mod n`).
    fn urls(&self, repos: Repos) -> Vec<String> {
        self.servers.iter().map(|s| repos.url(&s.url())).collect()
    }

    /// Wait until every root holds each of `repos` with the same refs and (in a cluster) the
    /// same applied log entry; per repository, its refs (`name → id`) and that entry.
    fn caught_up(&self, repos: &[String]) -> Result<Vec<State>, String> {
        let deadline = Instant::now() + CATCH_UP;
        let mut out = Vec::new();
        for repo in repos {
            loop {
                let states: Vec<State> = self.roots.iter().map(|r| state(&r.join(repo))).collect();
                let present = self
                    .roots
                    .iter()
                    .all(|r| r.join(repo).join("HEAD").is_file());
                if present && states.windows(2).all(|p| p[0] == p[1]) {
                    out.push(states.into_iter().next().expect("a root"));
                    break;
                }
                if Instant::now() > deadline {
                    let seqs: Vec<u64> = states.iter().map(|s| s.1).collect();
                    return Err(format!(
                        "{repo}: the replicas did not agree within {CATCH_UP:?} (present on all: \
                         {present}; refs per replica {:?}; applied entries {seqs:?})",
                        states.iter().map(|s| s.0.len()).collect::<Vec<_>>()
                    ));
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        Ok(out)
    }
}

/// Every sample of a Prometheus text exposition, by name and labels (`name{labels}`).
fn samples(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (k, v) = l.rsplit_once(' ')?;
            Some((k.to_owned(), v.parse().ok()?))
        })
        .collect()
}

/// CPU seconds of process `pid` (`self` for this one): its own, and its reaped children's.
fn cpu_of(pid: &str) -> (f64, f64) {
    // SAFETY: sysconf has no preconditions.
    let tick = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // After the command name: state, …, utime (11), stime, cutime, cstime (14).
    let f: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let n = |i: usize| f.get(i).and_then(|x| x.parse::<f64>().ok()).unwrap_or(0.0) / tick;
    (n(11) + n(12), n(13) + n(14))
}

/// The machine's CPU seconds since boot, all cores: busy, and in all (`/proc/stat`).
fn machine_cpu() -> (f64, f64) {
    // SAFETY: sysconf has no preconditions.
    let tick = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let v: Vec<f64> = stat
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    let at = |i: usize| v.get(i).copied().unwrap_or(0.0) / tick;
    // user nice system idle iowait irq softirq steal
    let busy = at(0) + at(1) + at(2) + at(5) + at(6) + at(7);
    (busy, busy + at(3) + at(4))
}

/// The counters of every node's and etcd member's `/metrics`, summed over them, and the CPU
/// time of the nodes, their children, etcd, this process and the machine (`cpu:` keys).
fn scrape(t: &Target) -> BTreeMap<String, f64> {
    let etcd = t
        .etcd
        .iter()
        .flat_map(|e| e.clients.iter().map(String::as_str));
    let mut total = BTreeMap::new();
    for addr in t.servers.iter().map(|s| s.addr.as_str()).chain(etcd) {
        if let Ok((200, body)) = http(addr, "GET", "/metrics", &[], b"") {
            for (k, v) in samples(&String::from_utf8_lossy(&body)) {
                *total.entry(k).or_insert(0.0) += v;
            }
        }
    }
    let mut add = |k: &str, v: f64| *total.entry(format!("cpu:{k}")).or_insert(0.0) += v;
    for s in &t.servers {
        let (own, children) = cpu_of(&s.child.id().to_string());
        add("berth", own);
        add("children", children);
    }
    for m in t.etcd.iter().flat_map(|e| &e.members) {
        add("etcd", cpu_of(&m.id().to_string()).0);
    }
    add("bench", cpu_of("self").0);
    let (busy, all) = machine_cpu();
    add("busy", busy);
    add("all", all);
    total
}

/// Where a case's time went, from the difference of two [`scrape`]s over `pushes` pushes:
/// each push phase's mean (berth's `berth_push_phase_seconds`, on the accepting node: the
/// cluster's commit gate runs inside `update`), and in a cluster etcd's calls and WAL fsyncs
/// per push.
fn breakdown(
    before: &BTreeMap<String, f64>,
    after: &BTreeMap<String, f64>,
    pushes: usize,
) -> String {
    let d = |k: &str| after.get(k).copied().unwrap_or(0.0) - before.get(k).copied().unwrap_or(0.0);
    let per = |x: f64| x / pushes.max(1) as f64;
    let mut parts = Vec::new();
    for k in after.keys() {
        if let Some(phase) = k
            .strip_prefix("berth_push_phase_seconds_sum{phase=\"")
            .and_then(|p| p.strip_suffix("\"}"))
        {
            let ms = per(d(k)) * 1e3;
            if ms >= 0.05 {
                parts.push(format!("{phase} {ms:.1} ms"));
            }
        }
    }
    let mut out = format!("phases per push: {}", parts.join(", "));
    let calls = |method: &str| {
        after
            .keys()
            .filter(|k| {
                k.starts_with("grpc_server_handled_total{")
                    && k.contains(&format!("grpc_method=\"{method}\""))
            })
            .map(|k| d(k))
            .sum::<f64>()
    };
    let ms = |k: &str| per(d(&format!("cpu:{k}"))) * 1e3;
    let ours: f64 = ["berth", "children", "etcd", "bench"]
        .iter()
        .map(|k| d(&format!("cpu:{k}")))
        .sum();
    let (busy, all) = (d("cpu:busy"), d("cpu:all").max(1e-9));
    out.push_str(&format!(
        "; CPU per push: berth {:.1} ms, its children (git) {:.1} ms, etcd {:.1} ms, the \
         clients {:.1} ms; the machine's cores {:.0} % busy, {:.0} % of them by other processes",
        ms("berth"),
        ms("children"),
        ms("etcd"),
        ms("bench"),
        busy / all * 100.0,
        (busy - ours).max(0.0) / all * 100.0,
    ));
    let fsyncs = d("etcd_disk_wal_fsync_duration_seconds_count");
    if fsyncs > 0.0 {
        out.push_str(&format!(
            "; etcd per push: {:.1} Range, {:.1} Txn, {:.1} Put, {:.1} WAL fsyncs (all members) of \
             {:.2} ms mean, {:.1} ms of backend commits",
            per(calls("Range")),
            per(calls("Txn")),
            per(calls("Put")),
            per(fsyncs),
            d("etcd_disk_wal_fsync_duration_seconds_sum") / fsyncs * 1e3,
            per(d("etcd_disk_backend_commit_duration_seconds_sum")) * 1e3,
        ));
    }
    out
}

/// A push that creates `refname` (and the repository, if it is the first): not timed, tried
/// twice. In a cluster the first push of a repository can fail with `500 cannot create
/// repository: git init --bare failed` when the node's 5-second catch-up poll, which creates
/// the replicas it is placed on, runs `git init` in the same directory at the same moment (seen
/// in this bench: `cannot copy '…/templates/info/exclude' …: File exists`).
fn seed_push(addr: &str, repo: &str, body: &[u8], refname: &str) -> Result<(), String> {
    let once = || expect_ok(&exchange(addr, repo, body)?, &[refname]);
    once().or_else(|e| {
        println!("  seeding {repo}: {}; trying again", e.replace('\n', " | "));
        std::thread::sleep(Duration::from_secs(1));
        once()
    })
}

/// A replica's refs (`name → id`) and the log entry it applied (0: none, or not a cluster).
type State = (BTreeMap<String, String>, u64);

/// `git for-each-ref` of the repository `dir` and its applied log entry.
fn state(dir: &Path) -> State {
    let mut c = support::git(dir);
    c.args(["for-each-ref", "--format=%(refname) %(objectname)"]);
    let refs = c
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    let refs = refs
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(n, id)| (n.to_owned(), id.to_owned()))
        .collect();
    let seq = std::fs::read_to_string(dir.join("berth-cluster-seq"))
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0);
    (refs, seq)
}

/// The report in a side-band answer must say `unpack ok` and `ok` for every one of `refs`,
/// and nothing else.
fn expect_ok(answer: &[u8], refs: &[&str]) -> Result<(), String> {
    let report: Vec<u8> = bench::run::pkt_lines(answer)
        .into_iter()
        .filter(|p| p.first() == Some(&1))
        .flat_map(|p| p[1..].to_vec())
        .collect();
    let lines: Vec<String> = bench::run::pkt_lines(&report)
        .into_iter()
        .map(|l| String::from_utf8_lossy(l).trim_end().to_owned())
        .collect();
    if lines.first().map(String::as_str) != Some("unpack ok") {
        return Err(format!("report: {:?}", lines.first()));
    }
    if let Some(bad) = lines[1..].iter().find(|l| !l.starts_with("ok ")) {
        return Err(format!("report: {bad}"));
    }
    let ok: std::collections::HashSet<&str> = lines[1..].iter().map(|l| &l[3..]).collect();
    if lines.len() - 1 != refs.len() || refs.iter().any(|r| !ok.contains(r)) {
        return Err(format!(
            "report: {} ok lines for {} refs",
            lines.len() - 1,
            refs.len()
        ));
    }
    Ok(())
}

/// The request body of a push of `old → new` to `refname` with `pack`.
fn body(old: &str, new: &str, refname: &str, pack: &[u8]) -> Vec<u8> {
    let mut body = pkt(&format!("{old} {new} {refname}\0{CAPABILITIES}\n"));
    body.extend_from_slice(b"0000");
    body.extend_from_slice(pack);
    body
}

/// One push as `git push` makes it: `GET info/refs`, then `POST git-receive-pack` with `body`;
/// the answer's body (side-band framed). `Err` says what went wrong (a failed request or a
/// status other than 200).
fn exchange(addr: &str, repo: &str, body: &[u8]) -> Result<Vec<u8>, String> {
    let (status, answer) = http(
        addr,
        "GET",
        &format!("/{repo}/info/refs?service=git-receive-pack"),
        &[],
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
        &format!("/{repo}/git-receive-pack"),
        &[
            ("Content-Type", "application/x-git-receive-pack-request"),
            ("Accept", "application/x-git-receive-pack-result"),
        ],
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

/// What a small-push case gave: the timed run's report, and what went wrong.
struct Small {
    report: Option<Loaded>,
    /// Where the time went ([`breakdown`]).
    breakdown: String,
    problems: Vec<String>,
}

/// `bench load` against `t`: one push per client (creating the repositories and a branch
/// each), every replica caught up, then the timed run of `per_client` pushes per client, and
/// [`check_small`].
fn small_pushes(t: &Target, dir: &Path, repos: Repos, clients: usize, per_client: usize) -> Small {
    let load = |pushes: usize| Load {
        urls: t.urls(repos),
        clients,
        pushes,
        repos,
        extra: Vec::new(),
        workdir: dir.to_owned(),
    };
    let names = repos.repos(clients);
    let failed = |problems: Vec<String>| Small {
        report: None,
        breakdown: String::new(),
        problems,
    };
    let seeded = match load(1).run() {
        Ok(r) if r.ok => r.acknowledged,
        Ok(r) => return failed([vec!["seeding:".into()], r.problems()].concat()),
        Err(e) => return failed(vec![format!("seeding: {e}")]),
    };
    if let Err(e) = t.caught_up(&names) {
        return failed(vec![format!("seeding: {e}")]);
    }
    let before = scrape(t);
    let report = match load(per_client).run() {
        Ok(r) => r,
        Err(e) => return failed(vec![e]),
    };
    let breakdown = breakdown(&before, &scrape(t), report.acknowledged);
    let mut problems = report.problems();
    problems.extend(check_small(t, &names, seeded + report.acknowledged));
    Small {
        report: Some(report),
        breakdown,
        problems,
    }
}

/// Every replica caught up and `git fsck --strict` clean, and in a cluster the repositories'
/// log entries as many as the pushes acknowledged.
fn check_small(t: &Target, repos: &[String], acked: usize) -> Vec<String> {
    let states = match t.caught_up(repos) {
        Ok(s) => s,
        Err(e) => return vec![e],
    };
    let mut problems = Vec::new();
    for (i, root) in t.roots.iter().enumerate() {
        problems.extend(
            fsck(root, repos)
                .into_iter()
                .map(|p| format!("node {i}: {p}")),
        );
    }
    let entries: u64 = states.iter().map(|(_, seq)| seq).sum();
    if t.is_cluster() && entries != acked as u64 {
        problems.push(format!(
            "{acked} pushes acknowledged, but the repositories' logs hold {entries} entries"
        ));
    }
    problems
}

/// The many-ref push: its request, what it must leave, and the commit and pack that seed it.
struct ManyRefs {
    request: Vec<u8>,
    expected: Vec<(String, String)>,
    commit: String,
    seed_pack: Vec<u8>,
}

fn many_refs_setup(dir: &Path, refs: usize) -> ManyRefs {
    let gen_dir = dir.join("many-gen.git");
    support::init(&gen_dir);
    let commit = support::commits(&gen_dir, 1, support::Shape::EmptyTrees)[0].to_string();
    let seed_pack = support::pack(&gen_dir, "refs/heads/main");
    let caps = CAPABILITIES;
    let empty = bench::run::empty_pack(gix_hash::Kind::Sha1);
    let (request, expected) =
        bench::run::request(std::slice::from_ref(&commit), refs, caps, ZERO, &empty);
    ManyRefs {
        request,
        expected,
        commit,
        seed_pack,
    }
}

/// Run `run`: seed `many<run>.git` with the commit, wait for the replicas, time the push,
/// check its report and, once the replicas caught up, every ref on every one of them.
fn many_refs_run(t: &Target, m: &ManyRefs, run: usize) -> Result<Duration, String> {
    let repo = format!("many{run}.git");
    let addr = t.addr(run);
    let seed = body(ZERO, &m.commit, "refs/heads/main", &m.seed_pack);
    seed_push(addr, &repo, &seed, "refs/heads/main")?;
    t.caught_up(std::slice::from_ref(&repo))?;
    let start = Instant::now();
    let answer = exchange(addr, &repo, &m.request)?;
    let elapsed = start.elapsed();
    let names: Vec<&str> = m.expected.iter().map(|(n, _)| n.as_str()).collect();
    expect_ok(&answer, &names)?;
    let (refs, seq) = t
        .caught_up(std::slice::from_ref(&repo))?
        .pop()
        .expect("one repository");
    let mut want: BTreeMap<String, String> = m.expected.iter().cloned().collect();
    want.insert("refs/heads/main".into(), m.commit.clone());
    if refs != want {
        return Err(format!(
            "{repo}: {} refs, expected {}",
            refs.len(),
            want.len()
        ));
    }
    if t.is_cluster() && seq != 2 {
        return Err(format!("{repo}: applied log entry {seq}, expected 2"));
    }
    Ok(elapsed)
}

fn report_small(round: usize, t: &Target, s: &Small, pushes: usize) -> bool {
    let ok = s.problems.is_empty();
    let breakdown = (!s.breakdown.is_empty()).then(|| format!("\n    {}", s.breakdown));
    match (&s.report, ok) {
        (Some(x), true) => println!(
            "  round {round}, {}: {} of {pushes} pushes acknowledged and verified: {:.1} pushes/s, \
             {} (load average {}){}",
            t.name,
            x.acknowledged,
            x.pushes_per_s.unwrap_or(0.0),
            x.latencies(),
            load_average(),
            breakdown.unwrap_or_default()
        ),
        _ => {
            println!(
                "  round {round}, {}: FAILED: {} of {pushes} acknowledged, {} problems",
                t.name,
                s.report.as_ref().map_or(0, |r| r.acknowledged),
                s.problems.len()
            );
            for e in s.problems.iter().take(8) {
                println!("    {}", e.replace('\n', " | "));
            }
        }
    }
    ok
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` does not, and a load run has no
    // place in a test run.
    if !std::env::args().any(|a| a == "--bench") {
        println!("cluster_load: a load run; run it with `cargo bench --bench cluster_load`");
        return;
    }
    let failed = run();
    if failed {
        std::process::exit(1);
    }
}

/// The whole bench; whether anything failed. Everything it starts is stopped when it returns.
fn run() -> bool {
    let clients = env_usize("BERTH_LOAD_CLIENTS", 8).max(1);
    let total = env_usize("BERTH_LOAD_PUSHES", 1000).max(1);
    let rounds = env_usize("BERTH_LOAD_ROUNDS", 1).max(1);
    let refs = env_usize("BERTH_BENCH_REFS", 10_000).max(1);
    let runs = env_usize("BERTH_BENCH_RUNS", 5).max(1);
    let ack = std::env::var("BERTH_CLUSTER_ACK").unwrap_or_else(|_| "majority".into());
    let tls = std::env::var("BERTH_CLUSTER_TLS").as_deref() == Ok("1");
    let durability: Vec<Option<String>> = match std::env::var("BERTH_CLUSTER_DURABILITY") {
        Ok(list) if !list.trim().is_empty() => {
            list.split(',').map(|d| Some(d.trim().to_owned())).collect()
        }
        _ => vec![None],
    };
    let etcd_max_request = env_usize("BERTH_CLUSTER_ETCD_MAX_REQUEST_BYTES", 1536 << 10);
    let shape = Repos::parse(&std::env::var("BERTH_LOAD_SHAPE").unwrap_or_else(|_| "each".into()));
    let per_client = (total / clients).max(1);
    let pushes = per_client * clients;
    let tmp = tempfile::Builder::new()
        .prefix("cluster-load-")
        .tempdir()
        .unwrap();
    let dir = tmp.path();
    let mut git_version = support::git(dir);
    git_version.arg("--version");
    let git_version = String::from_utf8(support::run(git_version, None)).unwrap();
    println!(
        "cluster_load: {}, {} (--max-request-bytes {etcd_max_request}) in {}; load average {}",
        git_version.trim(),
        etcd_version(),
        dir.display(),
        load_average()
    );

    let t0 = Instant::now();
    let many = many_refs_setup(dir, refs);
    println!(
        "{pushes} small pushes from {clients} clients ({}), and a {refs}-ref push, prepared in {:.1} s",
        shape.name(),
        t0.elapsed().as_secs_f64()
    );

    let mut failed = false;
    let mut small_rows: Vec<(usize, String, Option<Loaded>, bool)> = Vec::new();
    // The plain node, then one cluster per durability, then (BERTH_CLUSTER_TLS=1) one over TLS.
    let count = 1 + durability.len() + usize::from(tls);
    let mut names: Vec<String> = Vec::new();
    let mut many_times: Vec<Vec<Duration>> = vec![Vec::new(); count];
    let mut many_failed: Vec<Option<String>> = vec![None; count];
    for round in 0..rounds {
        let rdir = dir.join(format!("round{round}"));
        let pdir = rdir.join("plain");
        std::fs::create_dir_all(&pdir).unwrap();
        let mut targets = vec![Target::plain(&pdir)];
        for (i, d) in durability.iter().enumerate() {
            let cdir = rdir.join(format!("cluster{i}"));
            std::fs::create_dir_all(&cdir).unwrap();
            targets.push(Target::cluster(
                &cdir,
                &ack,
                d.as_deref(),
                etcd_max_request,
                false,
            ));
        }
        if tls {
            let tdir = rdir.join("tls");
            std::fs::create_dir_all(&tdir).unwrap();
            targets.push(Target::cluster(&tdir, &ack, None, etcd_max_request, true));
        }
        names = targets.iter().map(|t| t.name.clone()).collect();
        let mut order: Vec<usize> = (0..targets.len()).collect();
        if round % 2 == 1 {
            order.reverse();
        }
        for i in order {
            let t = &targets[i];
            let s = small_pushes(t, &rdir, shape, clients, per_client);
            let ok = report_small(round, t, &s, pushes);
            failed |= !ok;
            small_rows.push((round, t.name.clone(), s.report, ok));
        }
        if round > 0 {
            continue;
        }
        // The many-ref push: the targets take turns, run by run.
        for run in 0..runs {
            for (i, t) in targets.iter().enumerate() {
                if many_failed[i].is_some() {
                    continue;
                }
                match many_refs_run(t, &many, run) {
                    Ok(d) => {
                        println!("  {refs} refs, {}: run {}: {}", t.name, run + 1, ms(d));
                        many_times[i].push(d);
                    }
                    Err(e) => {
                        println!("  {refs} refs, {}: run {}: FAILED: {e}", t.name, run + 1);
                        many_failed[i] = Some(e);
                        failed = true;
                    }
                }
            }
        }
    }

    println!();
    println!(
        "| case | target | round | pushes acknowledged | wall | pushes/s | p50 | p99 | max | cluster/one node pushes/s | p50 |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    let case = format!("{pushes} pushes, {clients} clients, {}", shape.name());
    let f = |x: Option<f64>| x.map_or("-".into(), |v| format!("{v:.1} ms"));
    for (round, name, s, ok) in &small_rows {
        let plain = small_rows
            .iter()
            .find(|r| r.0 == *round && r.1 == "one node")
            .and_then(|r| r.2.as_ref());
        let ratio = match (s, plain, name.as_str()) {
            (Some(s), Some(p), n) if n != "one node" => format!(
                "{:.2}x | {:.2}x",
                s.pushes_per_s.unwrap_or(0.0) / p.pushes_per_s.unwrap_or(1.0).max(1e-9),
                s.p50_ms.unwrap_or(0.0) / p.p50_ms.unwrap_or(1.0).max(1e-9)
            ),
            _ => " | ".into(),
        };
        match (s, ok) {
            (Some(s), true) => println!(
                "| {case} | {name} | {round} | {} | {:.2} s | {:.1} | {} | {} | {} | {ratio} |",
                s.acknowledged,
                s.wall_s,
                s.pushes_per_s.unwrap_or(0.0),
                f(s.p50_ms),
                f(s.p99_ms),
                f(s.max_ms)
            ),
            _ => println!("| {case} | {name} | {round} | FAILED | | | | | | | |"),
        }
    }
    println!();
    println!("| push | target | runs | min | median | max | cluster/one node (median) |");
    println!("|---|---|---|---|---|---|---|");
    let medians: Vec<Option<Duration>> = many_times
        .iter_mut()
        .map(|t| (!t.is_empty()).then(|| support::median(t)))
        .collect();
    for (i, name) in names.iter().enumerate() {
        let times = &many_times[i];
        let ratio = match (i, medians[0], medians[i]) {
            (1.., Some(p), Some(c)) => format!("{:.2}x", c.as_secs_f64() / p.as_secs_f64()),
            _ => String::new(),
        };
        match (&many_failed[i], medians[i]) {
            (None, Some(m)) => println!(
                "| {refs} refs, one push | {name} | {} | {} | {} | {} | {ratio} |",
                times.len(),
                ms(times[0]),
                ms(m),
                ms(*times.last().expect("runs"))
            ),
            _ => println!("| {refs} refs, one push | {name} | FAILED | | | | |"),
        }
    }
    // The plain cluster is the first (the nodes' default durability, as the TLS one runs);
    // the TLS cluster is the last target.
    if let (true, Some(Some(plain)), Some(Some(over_tls))) = (tls, medians.get(1), medians.last()) {
        println!(
            "TLS between nodes and to etcd, {refs}-ref push: {:.2}x the plain cluster's median",
            over_tls.as_secs_f64() / plain.as_secs_f64()
        );
    }
    if failed || std::env::var("BERTH_LOAD_KEEP").as_deref() == Ok("1") {
        println!("cluster_load: kept {}", tmp.keep().display());
    }
    failed
}

fn etcd_version() -> String {
    Command::new("etcd")
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .map(str::to_owned)
        })
        .unwrap_or_else(|| "etcd: not found".into())
}
