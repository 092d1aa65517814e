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
//! creates a repository with a first push and waits until it is replicated. With
//! [`Setup::tls`] etcd serves its clients over TLS and requires client certificates, and the
//! nodes talk to each other over mutual TLS on their node listeners ([`Certs`]).

use crate::cluster::{Cluster, Etcd, push};
use crate::cluster_ssh;
use crate::common::World;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// A CA made with `openssl` in a directory, and one certificate it signed (for localhost and
/// 127.0.0.1, server and client usage) that every etcd member and etcdctl presents; each node
/// presents its own ([`Certs::node`]), which names it.
#[derive(Debug, Clone)]
pub(crate) struct Certs {
    /// The CA's certificate.
    pub(crate) ca: PathBuf,
    /// The CA's key.
    pub(crate) ca_key: PathBuf,
    /// The certificate it signed, and its key.
    pub(crate) cert: PathBuf,
    pub(crate) key: PathBuf,
}

fn openssl(args: &[&str], paths: &[&Path]) {
    let out = Command::new("openssl")
        .args(args)
        .args(paths)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

const EC: [&str; 5] = [
    "-newkey",
    "ec",
    "-pkeyopt",
    "ec_paramgen_curve:P-256",
    "-nodes",
];

impl Certs {
    /// A new CA `<dir>/<name>-ca.pem` and a certificate `<dir>/<name>.pem` signed by it (for
    /// localhost and 127.0.0.1, naming no node: etcd's and etcdctl's).
    pub(crate) fn make(dir: &Path, name: &str) -> Certs {
        let p = |f: &str| dir.join(format!("{name}{f}"));
        let c = Certs {
            ca: p("-ca.pem"),
            ca_key: p("-ca.key"),
            cert: p(".pem"),
            key: p(".key"),
        };
        let mut ca = vec!["req", "-x509", "-days", "2", "-subj"];
        let subject = format!("/CN={name} test CA");
        ca.push(&subject);
        ca.extend(EC);
        ca.extend(["-addext", "basicConstraints=critical,CA:TRUE"]);
        ca.extend(["-addext", "keyUsage=critical,keyCertSign,cRLSign"]);
        ca.push("-keyout");
        openssl(&ca, &[&c.ca_key, Path::new("-out"), &c.ca]);
        c.issue(&c.cert, &c.key, None);
        c
    }

    /// A new key at `key` and a certificate for it at `cert`, signed by the CA: for
    /// localhost and 127.0.0.1, server and client usage, and naming `node` (URI SAN
    /// `berth-node:<node>`) when given (docs/cluster.md, "Making the CA and the
    /// certificates"). Each call makes a new key and serial number.
    pub(crate) fn issue(&self, cert: &Path, key: &Path, node: Option<&str>) {
        let csr = cert.with_extension("csr");
        let mut req = vec!["req", "-subj", "/CN=berth node"];
        req.extend(EC);
        req.push("-keyout");
        openssl(&req, &[key, Path::new("-out"), &csr]);
        let ext = cert.with_extension("ext");
        let uri = node
            .map(|n| format!(",URI:berth-node:{n}"))
            .unwrap_or_default();
        std::fs::write(
            &ext,
            format!(
                "subjectAltName=DNS:localhost,IP:127.0.0.1{uri}\nbasicConstraints=CA:FALSE\n\
                 keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth,clientAuth\n"
            ),
        )
        .unwrap();
        openssl(
            &["x509", "-req", "-days", "2", "-CAcreateserial", "-in"],
            &[
                &csr,
                Path::new("-CA"),
                &self.ca,
                Path::new("-CAkey"),
                &self.ca_key,
                Path::new("-extfile"),
                &ext,
                Path::new("-out"),
                cert,
            ],
        );
    }

    /// Node `node`'s certificate and key (`<dir>/node-<node>.pem`, `.key`), naming it; issued
    /// on first use.
    pub(crate) fn node(&self, node: &str) -> (PathBuf, PathBuf) {
        let dir = self.ca.parent().unwrap();
        let cert = dir.join(format!("node-{node}.pem"));
        let key = dir.join(format!("node-{node}.key"));
        if !cert.is_file() {
            self.issue(&cert, &key, Some(node));
        }
        (cert, key)
    }

    fn s(p: &Path) -> String {
        p.to_str().unwrap().to_owned()
    }

    /// An etcd member's arguments: its server certificate, and client certificates of the CA
    /// required.
    pub(crate) fn etcd_args(&self) -> Vec<String> {
        vec![
            "--cert-file".into(),
            Self::s(&self.cert),
            "--key-file".into(),
            Self::s(&self.key),
            "--trusted-ca-file".into(),
            Self::s(&self.ca),
            "--client-cert-auth".into(),
        ]
    }

    /// `etcdctl`'s, `berth cluster status`'s and a node's etcd arguments.
    pub(crate) fn etcdctl_args(&self) -> Vec<String> {
        vec![
            "--cacert".into(),
            Self::s(&self.ca),
            "--cert".into(),
            Self::s(&self.cert),
            "--key".into(),
            Self::s(&self.key),
        ]
    }

    /// `berth`'s `--etcd-ca`, `--etcd-cert`, `--etcd-key`.
    pub(crate) fn berth_etcd_args(&self) -> Vec<String> {
        vec![
            "--etcd-ca".into(),
            Self::s(&self.ca),
            "--etcd-cert".into(),
            Self::s(&self.cert),
            "--etcd-key".into(),
            Self::s(&self.key),
        ]
    }

    /// Node `node`'s TLS arguments: to etcd, and between nodes on its node listener at
    /// `port` (advertised as `https://127.0.0.1:<port>`) with its own certificate.
    pub(crate) fn node_args(&self, node: &str, port: u16) -> Vec<String> {
        let (cert, key) = self.node(node);
        let mut args = self.berth_etcd_args();
        args.extend([
            "--cluster-listen".into(),
            format!("127.0.0.1:{port}"),
            "--advertise".into(),
            format!("https://127.0.0.1:{port}"),
            "--cluster-ca".into(),
            Self::s(&self.ca),
            "--cluster-cert".into(),
            Self::s(&cert),
            "--cluster-key".into(),
            Self::s(&key),
        ]);
        args
    }

    /// The status of a POST of `body` to etcd's `path` on `port`, over TLS with the client
    /// certificate (`curl`); `None` when nothing answered.
    pub(crate) fn curl_etcd(&self, port: u16, path: &str, body: &str) -> Option<u16> {
        let out = Command::new("curl")
            .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "-m", "5"])
            .args(self.etcdctl_args())
            .args(["-X", "POST", "-d", body])
            .arg(format!("https://127.0.0.1:{port}{path}"))
            .output()
            .ok()?;
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .ok()
            .filter(|c| *c != 0)
    }
}

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
    tls: bool,
}

/// A cluster on `w`: `--replicas 3`, no more arguments, HTTP only (over TLS with
/// `BERTH_TEST_CLUSTER_TLS=1`), until told otherwise.
pub(crate) fn cluster(w: &World) -> Setup<'_> {
    Setup {
        w,
        replicas: 3,
        args: Vec::new(),
        env: Vec::new(),
        etcd_args: Vec::new(),
        ssh: false,
        // BERTH_TEST_CLUSTER_TLS=1: every cluster test over TLS (the tests that call a node's
        // internal endpoints on its public port themselves expect plain HTTP there).
        tls: std::env::var("BERTH_TEST_CLUSTER_TLS").as_deref() == Ok("1"),
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

    /// etcd over TLS with client certificates, the nodes to each other over mutual TLS on
    /// their node listeners (`--cluster-listen`), with one CA made in the world ([`Certs`]).
    pub(crate) fn tls(mut self) -> Self {
        self.tls = true;
        self
    }

    /// Plain HTTP to etcd and between nodes even under `BERTH_TEST_CLUSTER_TLS=1` (for the
    /// tests that trace what a node writes: strace sees TLS records, not the requests).
    pub(crate) fn plain(mut self) -> Self {
        self.tls = false;
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
        let certs = self.tls.then(|| Certs::make(w.root(), "cluster"));
        let etcd = Etcd::start_certs(w.root(), &etcd_args, certs);
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

/// A connection to a node's internal endpoints, as another node opens one.
pub(crate) trait Duplex: std::io::Read + std::io::Write + Send {}
impl<T: std::io::Read + std::io::Write + Send> Duplex for T {}

/// A TLS client stream whose peer's close without `close_notify` reads as the end.
struct TlsStream(
    tokio_rustls::rustls::StreamOwned<tokio_rustls::rustls::ClientConnection, std::net::TcpStream>,
);

impl std::io::Read for TlsStream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self.0.read(buf) {
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(0),
            r => r,
        }
    }
}

impl std::io::Write for TlsStream {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

impl Certs {
    /// A client configuration trusting the CA only and presenting `cert` (with `key`).
    pub(crate) fn client(
        &self,
        cert: &Path,
        key: &Path,
    ) -> std::sync::Arc<tokio_rustls::rustls::ClientConfig> {
        use rustls_pki_types::pem::PemObject;
        use rustls_pki_types::{CertificateDer, PrivateKeyDer};
        use tokio_rustls::rustls;
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_file_iter(&self.ca).unwrap() {
            roots.add(c.unwrap()).unwrap();
        }
        let chain: Vec<_> = CertificateDer::pem_file_iter(cert)
            .unwrap()
            .map(Result::unwrap)
            .collect();
        let key = PrivateKeyDer::from_pem_file(key).unwrap();
        let config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .unwrap();
        std::sync::Arc::new(config)
    }
}

impl Cluster {
    /// A connection to node `i`'s internal endpoints (`/_berth/cluster/…`) as another node
    /// opens one, with `head` (a request line and headers, each ending in `\r\n`) sent: on a
    /// TLS cluster to its node listener, over mutual TLS with the next node's certificate
    /// and that node's name in `x-berth-node` (as a node's requests carry it); otherwise to
    /// its public port. The caller writes the body and reads the answer.
    pub(crate) fn internal(&self, i: usize, head: &str) -> Box<dyn Duplex> {
        use std::io::Write;
        let caller = &self.nodes[(i + 1) % self.nodes.len()].name;
        let head = format!("{head}x-berth-node: {caller}\r\n\r\n");
        let timeout = Some(std::time::Duration::from_secs(120));
        let mut s: Box<dyn Duplex> = match &self.etcd.certs {
            None => {
                let s = std::net::TcpStream::connect(("127.0.0.1", self.nodes[i].port)).unwrap();
                s.set_read_timeout(timeout).unwrap();
                Box::new(s)
            }
            Some(certs) => {
                let (cert, key) = certs.node(caller);
                let tcp = std::net::TcpStream::connect(("127.0.0.1", self.nodes[i].cluster_port))
                    .unwrap();
                tcp.set_read_timeout(timeout).unwrap();
                let conn = tokio_rustls::rustls::ClientConnection::new(
                    certs.client(&cert, &key),
                    rustls_pki_types::ServerName::try_from("127.0.0.1").unwrap(),
                )
                .unwrap();
                Box::new(TlsStream(tokio_rustls::rustls::StreamOwned::new(conn, tcp)))
            }
        };
        s.write_all(head.as_bytes()).unwrap();
        s
    }
}
