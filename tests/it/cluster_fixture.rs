//! The cluster suites' fixture: what every `cluster*` test does before what it asserts.
//!
//! ```ignore
//! #[test]
//! fn a_stopped_replica_does_not_hold_pushes_up_and_catches_up_when_continued() {
//!     let Some(w) = cluster_world() else { return };
//!     let (c, src) = cluster(&w).with_repo("r.git");
//!     c.signal(2, "-STOP");
//!     // ... what the test asserts
//! }
//! ```
//!
//! [`cluster_world`] is the world of a test that needs etcd: without `etcd` on the PATH the
//! test says so on stderr and returns, and under CI (`CI` set) it fails instead. [`cluster`]
//! starts three etcd members and three berth nodes on it ([`Setup`]: how many replicas, more
//! arguments or environment for the nodes or etcd, ssh too), and [`Setup::with_repo`] also
//! creates a repository with a first push and waits until it is replicated.

use crate::cluster::{Cluster, Etcd, push};
use crate::cluster_ssh;
use crate::common::World;

use std::process::{Command, Stdio};

/// Whether `etcd` can run here; if not, say so (the test is skipped, not passed silently).
/// Under CI (`CI` set) a missing etcd fails the test.
fn etcd_present(test: &str) -> bool {
    let ok = Command::new("etcd")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    // CI installs etcd (.ci/run): there a missing one is a failure, not a skip.
    assert!(
        ok || std::env::var_os("CI").is_none(),
        "{test}: no `etcd` on the PATH under CI (apt-get install etcd-server)"
    );
    if !ok {
        eprintln!(
            "SKIPPED {test}: no `etcd` on the PATH (apt-get install etcd-server; .ci/run does)"
        );
    }
    ok
}

/// A new world for a test that needs etcd; `None` when there is none (the test returns: see
/// [`etcd_present`]). The test is named by its thread, as libtest names it.
pub(crate) fn cluster_world() -> Option<World> {
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("a cluster test");
    etcd_present(test).then(World::new)
}

/// How to start a cluster on a world: three etcd members and three berth nodes.
pub(crate) struct Setup<'w> {
    w: &'w World,
    replicas: usize,
    args: Vec<String>,
    env: Vec<(String, String)>,
    etcd_args: Vec<String>,
    ssh: bool,
}

/// A cluster on `w`: `--replicas 3`, no more arguments, HTTP only, until told otherwise.
pub(crate) fn cluster(w: &World) -> Setup<'_> {
    Setup {
        w,
        replicas: 3,
        args: Vec::new(),
        env: Vec::new(),
        etcd_args: Vec::new(),
        ssh: false,
    }
}

impl Setup<'_> {
    /// Every node with `--replicas n`.
    pub(crate) fn replicas(mut self, n: usize) -> Self {
        self.replicas = n;
        self
    }

    /// More `berth serve` arguments for every node.
    pub(crate) fn args(mut self, args: &[&str]) -> Self {
        self.args.extend(args.iter().map(|s| s.to_string()));
        self
    }

    /// More environment for every node.
    pub(crate) fn env(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.to_owned(), value.to_owned()));
        self
    }

    /// More arguments for every etcd member.
    pub(crate) fn etcd_args(mut self, args: &[&str]) -> Self {
        self.etcd_args.extend(args.iter().map(|s| s.to_string()));
        self
    }

    /// Every node serves ssh too ([`cluster_ssh::ssh_args`]: the keys of alice and bob, one
    /// host key); `<world>/known_hosts` pins every node's.
    pub(crate) fn ssh(mut self) -> Self {
        self.ssh = true;
        self
    }

    /// Start etcd, then the three nodes.
    pub(crate) fn start(self) -> Cluster {
        let w = self.w;
        let mut args = if self.ssh {
            cluster_ssh::ssh_args(w)
        } else {
            Vec::new()
        };
        args.extend(self.args);
        let etcd_args: Vec<&str> = self.etcd_args.iter().map(String::as_str).collect();
        let etcd = Etcd::start_with(w.root(), &etcd_args);
        let c = Cluster::start_on(w, etcd, self.replicas, args, self.env);
        if self.ssh {
            cluster_ssh::pin_host_keys(w, &c);
        }
        c
    }

    /// [`Setup::start`], then `repo` created by a first push (the commit of a file `a` in a
    /// new source repository `src`) of `main` through node 0 (over ssh as alice with
    /// [`Setup::ssh`]), and replicated on all its replicas; the cluster and `src`.
    pub(crate) fn with_repo(self, repo: &str) -> (Cluster, String) {
        let (w, replicas, ssh) = (self.w, self.replicas, self.ssh);
        let c = self.start();
        let src = w.work("src");
        w.commit(&src, "a", "one");
        let main = ["HEAD:refs/heads/main"];
        let out = if ssh {
            cluster_ssh::push_ssh(w, "alice", &src, &cluster_ssh::url(&c, 0, repo), &main)
        } else {
            push(w, &src, &c.nodes[0].url(repo), &main)
        };
        assert!(
            out.status.success(),
            "the first push of {repo}: {}{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            c.logs()
        );
        c.converged(w, repo, replicas);
        (c, src)
    }
}
