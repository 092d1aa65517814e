//! `berth serve --cluster` end to end (issue #15): a real three-member etcd on loopback ports
//! and three berth nodes, pushed to with the real git client over HTTP, to different nodes and
//! concurrently; then every node's refs (`git for-each-ref`) must be identical once caught up,
//! `git fsck --strict` clean everywhere, and each push's client-visible result consistent with
//! the final refs. Needs Debian's `etcd-server` (`.ci/run` installs it); without `etcd` on
//! the PATH each test says so on stderr and returns.

use crate::common;
use common::World;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Whether `etcd` can run here; if not, say so (the test is skipped, not passed silently).
pub(crate) fn etcd_present(test: &str) -> bool {
    let ok = Command::new("etcd")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        eprintln!(
            "SKIPPED cluster::{test}: no `etcd` on the PATH (apt-get install etcd-server; .ci/run does)"
        );
    }
    ok
}

fn free_ports(n: usize) -> Vec<u16> {
    let listeners: Vec<_> = (0..n)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    listeners
        .iter()
        .map(|l| l.local_addr().unwrap().port())
        .collect()
}

/// One HTTP/1.0 request; the status and body (`None` when nothing answers).
fn http(port: u16, method: &str, path: &str, body: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        s,
        "{method} {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    let status = out.split(' ').nth(1)?.parse().ok()?;
    let body = out.split_once("\r\n\r\n").map(|b| b.1.to_owned())?;
    Some((status, body))
}

/// A three-member etcd on loopback, killed when dropped.
struct Etcd {
    members: Vec<Option<Child>>,
    client_ports: Vec<u16>,
    commands: Vec<Command>,
    dir: PathBuf,
}

impl Etcd {
    fn start(dir: &Path) -> Etcd {
        let ports = free_ports(6);
        let (client, peer) = ports.split_at(3);
        let initial: Vec<String> = (0..3)
            .map(|i| format!("e{i}=http://127.0.0.1:{}", peer[i]))
            .collect();
        let initial = initial.join(",");
        let commands: Vec<Command> = (0..3)
            .map(|i| {
                let c = format!("http://127.0.0.1:{}", client[i]);
                let p = format!("http://127.0.0.1:{}", peer[i]);
                let mut cmd = Command::new("etcd");
                cmd.args(["--name", &format!("e{i}")])
                    .arg("--data-dir")
                    .arg(dir.join(format!("etcd{i}")))
                    .args(["--listen-client-urls", &c, "--advertise-client-urls", &c])
                    .args([
                        "--listen-peer-urls",
                        &p,
                        "--initial-advertise-peer-urls",
                        &p,
                    ])
                    .args(["--initial-cluster", &initial])
                    .args(["--initial-cluster-state", "new"])
                    .args(["--initial-cluster-token", "berth-test"])
                    .stdout(Stdio::null());
                cmd
            })
            .collect();
        let mut etcd = Etcd {
            members: vec![None, None, None],
            client_ports: client.to_vec(),
            commands,
            dir: dir.to_owned(),
        };
        for i in 0..3 {
            etcd.restart(i);
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        for &port in &etcd.client_ports {
            loop {
                let put = r#"{"key":"L2JlcnRoLXRlc3Q=","value":"eQ=="}"#;
                if let Some((200, _)) = http(port, "POST", "/v3/kv/put", put) {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "etcd did not start (see etcd*.log)"
                );
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        etcd
    }

    fn urls(&self) -> String {
        let urls: Vec<String> = self
            .client_ports
            .iter()
            .map(|p| format!("http://127.0.0.1:{p}"))
            .collect();
        urls.join(",")
    }

    /// The keys under `prefix`, read with `etcdctl` (etcd-client); `None` (and a note) when
    /// it is not installed.
    fn keys(&self, prefix: &str) -> Option<Vec<String>> {
        let out = Command::new("etcdctl")
            .env("ETCDCTL_API", "3")
            .args([
                "--endpoints",
                &self.urls(),
                "get",
                "--prefix",
                "--keys-only",
                prefix,
            ])
            .output();
        match out {
            Ok(o) if o.status.success() => Some(
                String::from_utf8_lossy(&o.stdout)
                    .lines()
                    .filter(|l| !l.is_empty())
                    .map(str::to_owned)
                    .collect(),
            ),
            _ => {
                eprintln!(
                    "etcdctl not usable (apt-get install etcd-client): etcd's keys not checked"
                );
                None
            }
        }
    }

    /// (Re)start member `i` (a data directory that exists already is the member's state).
    fn restart(&mut self, i: usize) {
        if self.members[i].is_some() {
            return;
        }
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join(format!("etcd{i}.log")))
            .unwrap();
        self.members[i] = Some(self.commands[i].stderr(log).spawn().unwrap());
    }

    fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.members[i].take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            self.kill(i);
        }
    }
}

/// One berth node: its root, port and process (if running).
pub(crate) struct Node {
    pub(crate) name: String,
    pub(crate) root: PathBuf,
    pub(crate) port: u16,
    pub(crate) process: Option<common::ServeProcess>,
}

impl Node {
    pub(crate) fn url(&self, repo: &str) -> String {
        format!("http://127.0.0.1:{}/{repo}", self.port)
    }

    pub(crate) fn dir(&self, repo: &str) -> PathBuf {
        self.root.join(repo)
    }

    fn log(&self) -> String {
        self.process.as_ref().map(|p| p.log()).unwrap_or_default()
    }
}

/// Three etcd members and three berth nodes, each node with `--replicas replicas`.
pub(crate) struct Cluster {
    etcd: Etcd,
    pub(crate) nodes: Vec<Node>,
    replicas: usize,
    /// More arguments for every node.
    extra: Vec<String>,
    /// More environment for every node.
    env: Vec<(String, String)>,
}

impl Cluster {
    pub(crate) fn start(w: &World, replicas: usize) -> Cluster {
        Cluster::start_with(w, replicas, &[])
    }

    /// [`Cluster::start`] with more `berth serve` arguments for every node.
    fn start_with(w: &World, replicas: usize, extra: &[&str]) -> Cluster {
        Cluster::start_with_env(w, replicas, extra, &[])
    }

    /// [`Cluster::start_with`] with more environment for every node.
    pub(crate) fn start_with_env(
        w: &World,
        replicas: usize,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Cluster {
        let etcd = Etcd::start(w.root());
        let ports = free_ports(3);
        let nodes = (0..3)
            .map(|i| Node {
                name: format!("n{i}"),
                root: w.path(&format!("node{i}")),
                port: ports[i],
                process: None,
            })
            .collect();
        let mut c = Cluster {
            etcd,
            nodes,
            replicas,
            extra: extra.iter().map(|s| s.to_string()).collect(),
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        };
        for i in 0..3 {
            c.start_node(w, i);
        }
        c
    }

    pub(crate) fn start_node(&mut self, w: &World, i: usize) {
        let urls = self.etcd.urls();
        let n = &mut self.nodes[i];
        let mut cmd = w.cmd(common::berth(), ".");
        cmd.env("RUST_LOG", "berth=info")
            .arg("serve")
            .arg("--root")
            .arg(&n.root)
            .args(["--listen", &format!("127.0.0.1:{}", n.port)])
            .args(["--cluster", &urls, "--node", &n.name])
            .args(["--advertise", &format!("http://127.0.0.1:{}", n.port)])
            .args(["--replicas", &self.replicas.to_string()])
            .args(&self.extra)
            .envs(self.env.iter().map(|(k, v)| (k, v)));
        n.process = Some(common::ServeProcess::spawn(cmd, |out| {
            out.contains("listening on")
        }));
    }

    /// kill -9 node `i`.
    pub(crate) fn kill_node(&mut self, i: usize) {
        if let Some(mut p) = self.nodes[i].process.take() {
            let _ = p.child.kill();
            let _ = p.child.wait();
        }
    }

    /// The nodes that hold `repo`.
    pub(crate) fn holders(&self, repo: &str) -> Vec<&Node> {
        self.nodes
            .iter()
            .filter(|n| n.dir(repo).join("HEAD").is_file())
            .collect()
    }

    pub(crate) fn logs(&self) -> String {
        self.nodes
            .iter()
            .map(|n| format!("---- {}:\n{}", n.name, n.log()))
            .collect()
    }

    /// Wait until every holder of `repo` has the same refs and the same applied log entry;
    /// those refs.
    pub(crate) fn converged(
        &self,
        w: &World,
        repo: &str,
        holders: usize,
    ) -> BTreeMap<String, String> {
        self.converged_among(w, repo, holders, &[0, 1, 2])
    }

    /// [`Cluster::converged`] among the nodes `among` only.
    fn converged_among(
        &self,
        w: &World,
        repo: &str,
        holders: usize,
        among: &[usize],
    ) -> BTreeMap<String, String> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let nodes: Vec<&Node> = self
                .holders(repo)
                .into_iter()
                .filter(|n| among.iter().any(|&i| self.nodes[i].name == n.name))
                .collect();
            let states: Vec<(BTreeMap<String, String>, String)> = nodes
                .iter()
                .map(|n| {
                    let seq = std::fs::read_to_string(n.dir(repo).join("berth-cluster-seq"))
                        .unwrap_or_default();
                    (w.ref_map(n.dir(repo)), seq)
                })
                .collect();
            if nodes.len() == holders && states.windows(2).all(|p| p[0] == p[1]) {
                return states.into_iter().next().map(|s| s.0).unwrap_or_default();
            }
            assert!(
                Instant::now() < deadline,
                "replicas of {repo} did not converge: {states:#?}\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Send `signal` (`-STOP`, `-CONT`) to node `i`'s process.
    pub(crate) fn signal(&self, i: usize, signal: &str) {
        let Some(p) = self.nodes[i].process.as_ref() else {
            return;
        };
        let pid = p.child.id();
        let ok = Command::new("kill")
            .args([signal, &pid.to_string()])
            .status()
            .unwrap();
        assert!(ok.success());
    }

    /// Make node `i`'s `repo` pause in the reference-transaction state `state` while
    /// `<world>/pause-<state>` exists: it creates `<world>/paused-<state>` and sleeps.
    fn pause_hook(&self, w: &World, i: usize, repo: &str) {
        let hook = self.nodes[i].dir(repo).join("hooks/reference-transaction");
        let at = w.root().display().to_string();
        std::fs::write(
            &hook,
            format!(
                "#!/bin/sh\ncat >/dev/null\nif [ -e '{at}/pause-'\"$1\" ]; then : > '{at}/paused-'\"$1\"; sleep 25; fi\nexit 0\n"
            ),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    pub(crate) fn assert_fsck(&self, w: &World, repo: &str) {
        for n in self.holders(repo) {
            if let Err(e) = w.fsck(n.dir(repo)) {
                panic!("git fsck --strict on {}: {e}\n{}", n.name, self.logs());
            }
        }
    }
}

/// What the client was told about each ref: `name → accepted`.
pub(crate) fn porcelain(out: &std::process::Output) -> BTreeMap<String, bool> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let (flag, rest) = l.split_at_checked(1)?;
            let (_, dst) = rest
                .trim_start_matches('\t')
                .split_once('\t')?
                .0
                .split_once(':')?;
            Some((dst.to_owned(), flag != "!"))
        })
        .collect()
}

/// `git push --porcelain <url> <refspecs>` from `repo`.
pub(crate) fn push(w: &World, repo: &str, url: &str, refspecs: &[&str]) -> std::process::Output {
    let mut args = vec!["push", "--porcelain", url];
    args.extend_from_slice(refspecs);
    w.git_out(repo, &args)
}

/// [`push`] that must be acknowledged.
pub(crate) fn push_ok(w: &World, repo: &str, url: &str, refspecs: &[&str]) -> std::process::Output {
    let out = push(w, repo, url, refspecs);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

#[test]
fn pushes_to_any_node_replicate_to_all_and_concurrent_results_match_the_final_refs() {
    if !etcd_present("pushes_to_any_node_replicate_to_all") {
        return;
    }
    let w = World::new();
    let c = Cluster::start(&w, 3);
    let src = w.work("src");
    let first = w.commit(&src, "a", "one");
    // The first push creates the repository on all three nodes; each later one goes to
    // another node.
    for (i, content) in ["one", "two", "three", "four"].iter().enumerate() {
        let head = if i == 0 {
            first.clone()
        } else {
            w.commit(&src, "a", content)
        };
        let out = push(
            &w,
            &src,
            &c.nodes[i % 3].url("demo.git"),
            &["HEAD:refs/heads/main"],
        );
        assert!(
            out.status.success(),
            "push {i}: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            c.logs()
        );
        let refs = c.converged(&w, "demo.git", 3);
        assert_eq!(refs.get("refs/heads/main"), Some(&head));
    }
    // Every node serves the repository: a clone from each has main.
    for n in &c.nodes {
        let dst = format!("clone-{}", n.name);
        w.git(".", &["clone", "-q", &n.url("demo.git"), &dst]);
        assert_eq!(
            w.git(&dst, &["rev-parse", "HEAD"]).trim(),
            w.git(&src, &["rev-parse", "HEAD"]).trim()
        );
    }

    // Six clients at once, to the three nodes: each its own branch, and all of them force-push
    // the same `shared` branch.
    let mut commits = Vec::new();
    for t in 0..6 {
        let repo = format!("c{t}");
        w.git(".", &["clone", "-q", &c.nodes[0].url("demo.git"), &repo]);
        commits.push(w.commit(&repo, &format!("f{t}"), &format!("client {t}")));
    }
    let results: Vec<BTreeMap<String, bool>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..6)
            .map(|t| {
                let (w, c) = (&w, &c);
                s.spawn(move || {
                    let url = c.nodes[t % 3].url("demo.git");
                    let b = format!("HEAD:refs/heads/t{t}");
                    let out = push(w, &format!("c{t}"), &url, &[&b, "+HEAD:refs/heads/shared"]);
                    porcelain(&out)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    eprintln!("concurrent pushes, what each client was told: {results:?}");
    let refs = c.converged(&w, "demo.git", 3);
    c.assert_fsck(&w, "demo.git");
    let mut accepted = 0;
    for (t, told) in results.iter().enumerate() {
        let branch = format!("refs/heads/t{t}");
        match told.get(&branch) {
            Some(true) => {
                accepted += 1;
                assert_eq!(
                    refs.get(&branch),
                    Some(&commits[t]),
                    "{branch} was acknowledged"
                );
            }
            Some(false) => assert_eq!(refs.get(&branch), None, "{branch} was refused"),
            None => panic!("no result for {branch}: {told:?}"),
        }
    }
    assert!(
        accepted > 0,
        "no concurrent push went through:\n{results:?}\n{}",
        c.logs()
    );
    // Once every replica applied every entry, the log's entries are compacted away (the
    // log key, the last entry, stays).
    if let Some(left) = c.etcd.keys("/berth/repos/demo/entries/") {
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut left = left;
        while !left.is_empty() {
            assert!(
                Instant::now() < deadline,
                "not compacted: {left:?}\n{}",
                c.logs()
            );
            std::thread::sleep(Duration::from_millis(300));
            left = c
                .etcd
                .keys("/berth/repos/demo/entries/")
                .unwrap_or_default();
        }
        assert_eq!(
            c.etcd.keys("/berth/repos/demo/log").map(|k| k.len()),
            Some(1)
        );
    }
    match refs.get("refs/heads/shared") {
        None => assert!(
            results
                .iter()
                .all(|r| r.get("refs/heads/shared") != Some(&true)),
            "shared acknowledged but absent"
        ),
        Some(id) => {
            let t = commits
                .iter()
                .position(|c| c == id)
                .expect("shared is a client's commit");
            assert_eq!(
                results[t].get("refs/heads/shared"),
                Some(&true),
                "shared holds client {t}'s commit, whose push of it was refused"
            );
        }
    }
}

#[test]
fn a_node_without_a_replica_forwards_pushes_and_fetches() {
    if !etcd_present("a_node_without_a_replica_forwards_pushes_and_fetches") {
        return;
    }
    let w = World::new();
    let c = Cluster::start(&w, 2);
    let src = w.work("src");
    w.commit(&src, "a", "one");
    // Pushes through every node, so at least one of them holds no replica.
    for (i, content) in ["two", "three", "four"].iter().enumerate() {
        let out = push(
            &w,
            &src,
            &c.nodes[i].url("app.git"),
            &["HEAD:refs/heads/main"],
        );
        assert!(
            out.status.success(),
            "push via {}: {}\n{}",
            c.nodes[i].name,
            String::from_utf8_lossy(&out.stderr),
            c.logs()
        );
        w.commit(&src, "a", content);
    }
    let holders: Vec<String> = c
        .holders("app.git")
        .iter()
        .map(|n| n.name.clone())
        .collect();
    assert_eq!(holders.len(), 2, "two replicas: {holders:?}");
    let outsider = c.nodes.iter().find(|n| !holders.contains(&n.name)).unwrap();
    let refs = c.converged(&w, "app.git", 2);
    c.assert_fsck(&w, "app.git");
    // A clone through the node that holds nothing.
    w.git(
        ".",
        &["clone", "-q", &outsider.url("app.git"), "via-outsider"],
    );
    assert_eq!(
        Some(
            &w.git("via-outsider", &["rev-parse", "HEAD"])
                .trim()
                .to_owned()
        ),
        refs.get("refs/heads/main")
    );
}

#[test]
fn a_killed_replica_and_a_killed_etcd_member_do_not_stop_pushes_and_the_replica_catches_up() {
    if !etcd_present("a_killed_replica_and_a_killed_etcd_member") {
        return;
    }
    let w = World::new();
    let mut c = Cluster::start(&w, 3);
    let src = w.work("src");
    w.commit(&src, "a", "one");
    push_ok(
        &w,
        &src,
        &c.nodes[0].url("r.git"),
        &["HEAD:refs/heads/main"],
    );
    c.converged(&w, "r.git", 3);

    // kill -9 of a replica that is not accepting: its lease is still alive, so the push
    // prepares on it and fails there; two of three is a majority, the push is acknowledged.
    c.kill_node(2);
    let mut heads = Vec::new();
    for (i, content) in ["two", "three"].iter().enumerate() {
        heads.push(w.commit(&src, "a", content));
        let out = push(
            &w,
            &src,
            &c.nodes[i].url("r.git"),
            &[
                "HEAD:refs/heads/main",
                &format!("HEAD:refs/heads/while-down-{i}"),
            ],
        );
        assert!(
            out.status.success(),
            "push with n2 down: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            c.logs()
        );
    }
    // kill -9 of one etcd member of three: the nodes go on with the other two.
    c.etcd.kill(0);
    heads.push(w.commit(&src, "a", "four"));
    let out = push(
        &w,
        &src,
        &c.nodes[1].url("r.git"),
        &["HEAD:refs/heads/main"],
    );
    assert!(
        out.status.success(),
        "push with an etcd member down: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        c.logs()
    );

    // The replica comes back and catches up from the log, objects from its peers. Until it
    // has, it does not serve the repository (it forwards): a clone at once is never stale.
    c.start_node(&w, 2);
    w.git(".", &["clone", "-q", &c.nodes[2].url("r.git"), "at-once"]);
    assert_eq!(
        Some(&w.git("at-once", &["rev-parse", "HEAD"]).trim().to_owned()),
        heads.last()
    );
    let refs = c.converged(&w, "r.git", 3);
    assert_eq!(refs.get("refs/heads/main"), heads.last());
    assert!(refs.contains_key("refs/heads/while-down-0"));
    assert!(refs.contains_key("refs/heads/while-down-1"));
    c.assert_fsck(&w, "r.git");
    // And serves it: a clone from it.
    w.git(".", &["clone", "-q", &c.nodes[2].url("r.git"), "from-n2"]);
    assert_eq!(
        Some(&w.git("from-n2", &["rev-parse", "HEAD"]).trim().to_owned()),
        heads.last()
    );
}

/// Wait for `path` to exist (at most 60 s).
pub(crate) fn wait_for(path: &Path, c: &Cluster) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !path.exists() {
        assert!(
            Instant::now() < deadline,
            "{} never appeared:\n{}",
            path.display(),
            c.logs()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A cluster with `r.git` pushed once through node 0 and replicated; the source repository.
pub(crate) fn cluster_with_repo(w: &World) -> (Cluster, String) {
    let c = Cluster::start(w, 3);
    let src = w.work("src");
    w.commit(&src, "a", "one");
    push_ok(w, &src, &c.nodes[0].url("r.git"), &["HEAD:refs/heads/main"]);
    c.converged(w, "r.git", 3);
    (c, src)
}

#[test]
fn accepting_node_killed_after_the_commit_point_the_push_lands_everywhere() {
    if !etcd_present("accepting_node_killed_after_the_commit_point") {
        return;
    }
    let w = World::new();
    let (mut c, src) = cluster_with_repo(&w);
    // Node 0 pauses once its own commit is written: after the etcd commit point, before it
    // tells the other replicas.
    c.pause_hook(&w, 0, "r.git");
    std::fs::write(w.path("pause-committed"), "").unwrap();
    let new = w.commit(&src, "a", "two");
    let url = c.nodes[0].url("r.git");
    let told = std::thread::scope(|s| {
        let pushing = s.spawn(|| porcelain(&push(&w, &src, &url, &["HEAD:refs/heads/main"])));
        wait_for(&w.path("paused-committed"), &c);
        c.kill_node(0);
        pushing.join().unwrap()
    });
    std::fs::remove_file(w.path("pause-committed")).unwrap();
    // The client never heard `ok`: its connection died with the node.
    assert_ne!(told.get("refs/heads/main"), Some(&true), "{told:?}");
    // The entry is in the log: the prepared replicas, without a decision, ask the log and
    // commit it.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let refs = c.converged_among(&w, "r.git", 2, &[1, 2]);
        if refs.get("refs/heads/main") == Some(&new) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "never applied: {refs:?}\n{}",
            c.logs()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // The accepting node comes back: its refs hold the entry already; it records it.
    c.start_node(&w, 0);
    let refs = c.converged(&w, "r.git", 3);
    assert_eq!(refs.get("refs/heads/main"), Some(&new));
    c.assert_fsck(&w, "r.git");
}

#[test]
fn accepting_node_killed_before_the_commit_point_nothing_lands_and_it_recovers() {
    if !etcd_present("accepting_node_killed_before_the_commit_point") {
        return;
    }
    let w = World::new();
    let (mut c, src) = cluster_with_repo(&w);
    let old = w.git(&src, &["rev-parse", "HEAD"]).trim().to_owned();
    // Node 0 pauses with its transaction prepared (main.lock held), before the replicas are
    // asked and before etcd.
    c.pause_hook(&w, 0, "r.git");
    std::fs::write(w.path("pause-prepared"), "").unwrap();
    w.commit(&src, "a", "two");
    let url = c.nodes[0].url("r.git");
    let told = std::thread::scope(|s| {
        let pushing = s.spawn(|| porcelain(&push(&w, &src, &url, &["HEAD:refs/heads/main"])));
        wait_for(&w.path("paused-prepared"), &c);
        c.kill_node(0);
        pushing.join().unwrap()
    });
    std::fs::remove_file(w.path("pause-prepared")).unwrap();
    assert_ne!(told.get("refs/heads/main"), Some(&true), "{told:?}");
    let refs = c.converged_among(&w, "r.git", 2, &[1, 2]);
    assert_eq!(
        refs.get("refs/heads/main"),
        Some(&old),
        "nothing was committed"
    );
    // The other nodes go on.
    let newer = w.commit(&src, "a", "three");
    let out = push(
        &w,
        &src,
        &c.nodes[1].url("r.git"),
        &["HEAD:refs/heads/main"],
    );
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        c.logs()
    );
    // Node 0 comes back with main.lock left by the killed transaction: removed at start-up,
    // then it catches up.
    c.start_node(&w, 0);
    let refs = c.converged(&w, "r.git", 3);
    assert_eq!(refs.get("refs/heads/main"), Some(&newer));
    c.assert_fsck(&w, "r.git");
    assert!(
        c.nodes[0].log().contains("removed a ref lock"),
        "{}",
        c.nodes[0].log()
    );
}

#[test]
fn a_stopped_replica_does_not_hold_pushes_up_and_catches_up_when_continued() {
    if !etcd_present("a_stopped_replica_does_not_hold_pushes_up") {
        return;
    }
    let w = World::new();
    let (c, src) = cluster_with_repo(&w);
    c.signal(2, "-STOP");
    let mut last = String::new();
    for (i, content) in ["two", "three"].iter().enumerate() {
        last = w.commit(&src, "a", content);
        let start = Instant::now();
        let out = push(
            &w,
            &src,
            &c.nodes[i].url("r.git"),
            &["HEAD:refs/heads/main"],
        );
        assert!(
            out.status.success(),
            "push with n2 stopped: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            c.logs()
        );
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "{:?}",
            start.elapsed()
        );
    }
    c.signal(2, "-CONT");
    let refs = c.converged(&w, "r.git", 3);
    assert_eq!(refs.get("refs/heads/main"), Some(&last));
    c.assert_fsck(&w, "r.git");
}

/// Why a push was not acknowledged, in a few words: the server's `error:` line, or the
/// client's own failure.
fn reason(out: &std::process::Output) -> String {
    let err = String::from_utf8_lossy(&out.stderr);
    let line = err
        .lines()
        .find(|l| l.contains("error: cluster:"))
        .or_else(|| {
            err.lines()
                .find(|l| l.contains("error:") || l.contains("fatal:"))
        })
        .unwrap_or("no report");
    let line = line.trim_start_matches("remote: ").trim();
    // Without ids, ports and node names, so that alike reasons count together.
    let words: Vec<&str> = line
        .split_whitespace()
        .filter(|w| !w.chars().any(|c| c.is_ascii_digit()))
        .take(12)
        .collect();
    words.join(" ")
}

/// A small deterministic generator (xorshift64*), seeded from `BERTH_FAULT_SEED` or the clock.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The randomized fault script (not a CI test; docs/cluster.md has its results):
/// `BERTH_FAULT_SEED=N BERTH_FAULT_ROUNDS=N cargo test --test it cluster::randomized -- --ignored --nocapture`.
///
/// One client force-pushes new commits to four refs through random nodes, one push at a time,
/// while the script kills (-9) and restarts nodes, stops and continues them (SIGSTOP/SIGCONT),
/// and kills and restarts etcd members, some of it during a push. At the end everything is
/// restarted and must converge, fsck clean, and for every ref the final value must be the last
/// acknowledged one or one pushed after it without an acknowledgement (a push the client was
/// not told about may land; an acknowledged one is never lost or overwritten by an older one).
#[test]
#[ignore]
fn randomized_faults() {
    if !etcd_present("randomized_faults") {
        return;
    }
    let seed = std::env::var("BERTH_FAULT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                | 1
        });
    let rounds: usize = std::env::var("BERTH_FAULT_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    eprintln!("randomized_faults: seed {seed}, {rounds} rounds");
    let mut rng = Rng(seed);
    let w = World::new();
    let (mut c, src) = cluster_with_repo(&w);
    let mut stopped: Option<usize> = None;
    // Per ref: every value pushed, and whether the client was told `ok`.
    let mut history: BTreeMap<String, Vec<(String, bool)>> = BTreeMap::new();
    let (mut acked, mut refused, mut faults) = (0, 0, Vec::new());
    let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
    for round in 0..rounds {
        match rng.below(10) {
            0..=5 => {
                let mut node = rng.below(3) as usize;
                if stopped == Some(node) {
                    // A push to a stopped node waits for it: not in this script.
                    node = (node + 1) % 3;
                }
                let r = format!("refs/heads/r{}", rng.below(4));
                let value = w.commit(&src, "a", &format!("round {round}"));
                // Sometimes a fault during the push: kill -9 or SIGSTOP of a random node after
                // a random delay.
                let during = (rng.below(3) == 0)
                    .then(|| (rng.below(3) as usize, rng.below(4), rng.below(400)));
                let url = c.nodes[node].url("r.git");
                let spec = format!("+HEAD:{r}");
                let out = std::thread::scope(|s| {
                    let pushing = s.spawn(|| {
                        let mut cmd = w.cmd("timeout", &src);
                        cmd.args(["120", "git", "push", "--porcelain", &url, &spec]);
                        cmd.output().unwrap()
                    });
                    if let Some((victim, kind, delay)) = during {
                        std::thread::sleep(Duration::from_millis(delay));
                        if kind == 0 && c.nodes[victim].process.is_some() {
                            faults.push(format!(
                                "round {round}: kill -9 n{victim} during a push via n{node}"
                            ));
                            c.kill_node(victim);
                        } else if stopped.is_none() && c.nodes[victim].process.is_some() {
                            faults.push(format!(
                                "round {round}: SIGSTOP n{victim} 2 s during a push via n{node}"
                            ));
                            c.signal(victim, "-STOP");
                            std::thread::sleep(Duration::from_secs(2));
                            c.signal(victim, "-CONT");
                        }
                    }
                    pushing.join().unwrap()
                });
                let ok = porcelain(&out).get(&r) == Some(&true);
                if ok {
                    acked += 1;
                } else {
                    refused += 1;
                    *reasons.entry(reason(&out)).or_insert(0) += 1;
                }
                history.entry(r).or_default().push((value, ok));
            }
            6 => {
                let victim = rng.below(3) as usize;
                if c.nodes[victim].process.is_some() && stopped != Some(victim) {
                    faults.push(format!("round {round}: kill -9 n{victim}"));
                    c.kill_node(victim);
                }
            }
            7 => match stopped.take() {
                Some(v) => c.signal(v, "-CONT"),
                None => {
                    let victim = rng.below(3) as usize;
                    if c.nodes[victim].process.is_some() {
                        faults.push(format!("round {round}: SIGSTOP n{victim}"));
                        c.signal(victim, "-STOP");
                        stopped = Some(victim);
                    }
                }
            },
            8 => {
                let m = rng.below(3) as usize;
                if c.etcd.members.iter().all(Option::is_some) {
                    faults.push(format!("round {round}: kill -9 etcd member {m}"));
                    c.etcd.kill(m);
                } else {
                    for i in 0..3 {
                        c.etcd.restart(i);
                    }
                }
            }
            _ => {
                for i in 0..3 {
                    if c.nodes[i].process.is_none() {
                        c.start_node(&w, i);
                    }
                }
            }
        }
    }
    if let Some(v) = stopped.take() {
        c.signal(v, "-CONT");
    }
    for i in 0..3 {
        c.etcd.restart(i);
        if c.nodes[i].process.is_none() {
            c.start_node(&w, i);
        }
    }
    let refs = c.converged(&w, "r.git", 3);
    c.assert_fsck(&w, "r.git");
    for (r, pushes) in &history {
        let last_ack = pushes.iter().rposition(|p| p.1);
        let allowed: Vec<&String> = match last_ack {
            Some(i) => pushes[i..]
                .iter()
                .enumerate()
                .filter(|(j, p)| *j == 0 || !p.1)
                .map(|(_, p)| &p.0)
                .collect(),
            None => pushes.iter().map(|p| &p.0).collect(),
        };
        let fin = refs.get(r);
        let fine = match fin {
            Some(v) => allowed.contains(&v),
            None => last_ack.is_none(),
        };
        assert!(
            fine,
            "seed {seed}: {r} is {fin:?}, allowed {allowed:?}; pushes {pushes:?}\n{faults:#?}\n{}",
            c.logs()
        );
    }
    eprintln!(
        "randomized_faults: seed {seed}: {rounds} rounds, {acked} pushes acknowledged, {refused} not ({reasons:?}); {} faults:\n{}\nfinal refs {refs:?}",
        faults.len(),
        faults.join("\n")
    );
}

#[test]
fn ack_all_refuses_a_push_that_one_replica_cannot_apply() {
    if !etcd_present("ack_all_refuses_a_push_that_one_replica_cannot_apply") {
        return;
    }
    let w = World::new();
    let mut c = Cluster::start_with(&w, 3, &["--ack", "all"]);
    let src = w.work("src");
    let first = w.commit(&src, "a", "one");
    push_ok(
        &w,
        &src,
        &c.nodes[0].url("all.git"),
        &["HEAD:refs/heads/main"],
    );
    c.converged(&w, "all.git", 3);
    // One replica down: every replica must apply, so the push is refused, and nothing lands.
    c.kill_node(2);
    w.commit(&src, "a", "two");
    let out = push(
        &w,
        &src,
        &c.nodes[1].url("all.git"),
        &["HEAD:refs/heads/main"],
    );
    assert_eq!(
        porcelain(&out).get("refs/heads/main"),
        Some(&false),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("only 2 of 3 replicas could prepare"), "{err}");
    // `git push --porcelain` reports on stdout: `!\tHEAD:refs/heads/main\t[remote rejected] (failed to update ref)`.
    let told = String::from_utf8_lossy(&out.stdout);
    assert!(told.contains("(failed to update ref)"), "{told}");
    let refs = c.converged_among(&w, "all.git", 2, &[0, 1]);
    assert_eq!(refs.get("refs/heads/main"), Some(&first));
    // Back with all three: acknowledged.
    c.start_node(&w, 2);
    c.converged(&w, "all.git", 3);
    let third = w.commit(&src, "a", "three");
    let out = push(
        &w,
        &src,
        &c.nodes[2].url("all.git"),
        &["HEAD:refs/heads/main"],
    );
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        c.logs()
    );
    let refs = c.converged(&w, "all.git", 3);
    assert_eq!(refs.get("refs/heads/main"), Some(&third));
    c.assert_fsck(&w, "all.git");
}
