//! A cluster over TLS (issue #23): etcd serving its clients over TLS with
//! `--client-cert-auth`, the nodes talking to each other over mutual TLS with one cluster CA
//! on their node listeners (`--cluster-listen`). Pushes over HTTP and ssh, through replicas
//! and through a node that holds none (forwarded, tunnelled), replicated and served by every
//! node; and a node whose certificate the cluster CA did not sign, or a client without one,
//! refused whatever secret it sends.

use crate::cluster::{Cluster, http, push};
use crate::cluster_fixture::{Certs, cluster, cluster_world};
use crate::cluster_ssh;
use crate::common;

use std::process::{Command, Output};
use std::time::{Duration, Instant};

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

#[test]
fn a_tls_cluster_replicates_http_and_ssh_pushes_and_serves_them_from_every_node() {
    let Some(w) = cluster_world() else { return };
    // Two replicas of three nodes: one node holds none and forwards (HTTP) or tunnels (ssh).
    let (c, src) = cluster(&w).tls().ssh().replicas(2).with_repo("app.git");
    let certs = c.etcd.certs.clone().unwrap();
    // Every node advertises its node listener, over TLS.
    for n in &c.nodes {
        let at = c.etcd.value(&format!("/berth/nodes/{}", n.name));
        if let Some(at) = at {
            assert_eq!(at, format!("https://127.0.0.1:{}", n.cluster_port));
        }
    }
    for i in 0..3 {
        w.commit(&src, "a", &format!("http {i}"));
        must(
            push(
                &w,
                &src,
                &c.nodes[i].url("app.git"),
                &["HEAD:refs/heads/main"],
            ),
            &c,
            &format!("HTTP push via n{i}"),
        );
        w.commit(&src, "b", &format!("ssh {i}"));
        let url = cluster_ssh::url(&c, i, "app.git");
        let out = cluster_ssh::push_ssh(&w, "alice", &src, &url, &["HEAD:refs/heads/main"]);
        must(out, &c, &format!("ssh push via n{i}"));
    }
    let refs = c.converged(&w, "app.git", 2);
    let head = w.git(&src, &["rev-parse", "HEAD"]).trim().to_owned();
    assert_eq!(refs.get("refs/heads/main"), Some(&head));
    c.assert_fsck(&w, "app.git");
    let outsider = c
        .nodes
        .iter()
        .position(|n| !n.dir("app.git").join("HEAD").is_file())
        .expect("one node holds no replica");
    // Read through every node, the one holding none included (forwarded over TLS).
    for n in &c.nodes {
        let dst = format!("clone-{}", n.name);
        must(
            w.git_out(".", &["clone", "-q", &n.url("app.git"), &dst]),
            &c,
            &format!("clone via {}", n.name),
        );
        assert_eq!(w.git(&dst, &["rev-parse", "HEAD"]).trim(), head);
    }
    let out = cluster_ssh::git_ssh(
        &w,
        "alice",
        ".",
        &[
            "clone",
            "-q",
            &cluster_ssh::url(&c, outsider, "app.git"),
            "ssh-clone",
        ],
    );
    must(out, &c, "ssh clone via the node holding no replica");
    assert_eq!(w.git("ssh-clone", &["rev-parse", "HEAD"]).trim(), head);
    // `berth cluster status` reads etcd over TLS with the client certificate.
    let status = Command::new(common::berth())
        .args([
            "cluster",
            "status",
            "--cluster",
            &c.etcd.urls(),
            "--replicas",
            "2",
        ])
        .args(certs.berth_etcd_args())
        .output()
        .unwrap();
    // 0, or 1 while the replicas' applied entries are not published yet (every 5 s); 2 is
    // etcd not read.
    assert!(
        matches!(status.status.code(), Some(0 | 1)),
        "{}{}",
        String::from_utf8_lossy(&status.stdout),
        String::from_utf8_lossy(&status.stderr)
    );
    assert!(String::from_utf8_lossy(&status.stdout).contains("nodes: 3 live"));
    // With a client certificate of another CA etcd does not answer it.
    let other = Certs::make(w.root(), "other");
    let status = Command::new(common::berth())
        .args(["cluster", "status", "--cluster", &c.etcd.urls()])
        .args(["--etcd-ca", certs.ca.to_str().unwrap()])
        .args(["--etcd-cert", other.cert.to_str().unwrap()])
        .args(["--etcd-key", other.key.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(status.status.code(), Some(2), "{status:?}");
}

/// `curl` of a POST of `body` to node listener `port`'s `path` with `args` (the CA to trust,
/// a client certificate or none, headers): the HTTP status, `None` when the TLS handshake (or
/// the connection) failed.
fn curl_node(port: u16, path: &str, body: &str, args: &[&str]) -> Option<u16> {
    let out = Command::new("curl")
        .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "-m", "10"])
        .args(args)
        .args(["-X", "POST", "-d", body])
        .arg(format!("https://127.0.0.1:{port}{path}"))
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .ok()
        .filter(|c| *c != 0)
}

#[test]
fn a_node_or_client_without_a_certificate_of_the_cluster_ca_is_refused() {
    let Some(w) = cluster_world() else { return };
    let (mut c, src) = cluster(&w).tls().with_repo("app.git");
    let certs = c.etcd.certs.clone().unwrap();
    let secret = c
        .etcd
        .value("/berth/secret")
        .expect("etcdctl reads the secret");
    let secret_header = format!("x-berth-cluster-secret: {secret}");
    // n1's certificate, and n1 named as the sender.
    let (n1_cert, n1_key) = certs.node("n1");
    let (ca, cert, key) = (
        certs.ca.to_str().unwrap(),
        n1_cert.to_str().unwrap(),
        n1_key.to_str().unwrap(),
    );
    let rogue = Certs::make(w.root(), "rogue");
    let (rogue_cert, rogue_key) = (rogue.cert.to_str().unwrap(), rogue.key.to_str().unwrap());
    let snapshot = "/_berth/cluster/snapshot";
    let body = r#"{"repo":"app"}"#;
    let port = c.nodes[0].cluster_port;
    // The cluster's certificate and the secret: served (both factors).
    let with = |extra: &[&str]| {
        let mut a = vec![
            "--cacert",
            ca,
            "-H",
            &secret_header,
            "-H",
            "x-berth-node: n1",
        ];
        a.extend_from_slice(extra);
        curl_node(port, snapshot, body, &a)
    };
    assert_eq!(with(&["--cert", cert, "--key", key]), Some(200));
    // The certificate without the secret: refused.
    assert_eq!(
        curl_node(
            port,
            snapshot,
            body,
            &[
                "--cacert",
                ca,
                "--cert",
                cert,
                "--key",
                key,
                "-H",
                "x-berth-node: n1"
            ]
        ),
        Some(403)
    );
    // The secret without a certificate, or with one of another CA: no TLS session at all.
    assert_eq!(with(&[]), None, "no client certificate");
    assert_eq!(
        with(&["--cert", rogue_cert, "--key", rogue_key]),
        None,
        "a certificate of another CA"
    );
    // The secret on the public listener: refused, not served.
    let got = http(c.nodes[0].port, "POST", snapshot, body);
    assert_eq!(got.as_ref().map(|g| g.0), Some(403), "{got:?}");
    let (_, text) = got.unwrap();
    assert!(text.contains("not a node of this cluster"), "{text}");
    {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(("127.0.0.1", c.nodes[0].port)).unwrap();
        write!(
            s,
            "POST {snapshot} HTTP/1.0\r\nHost: x\r\n{secret_header}\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        assert!(out.starts_with("HTTP/1.0 403"), "{out}");
        assert!(out.contains("on the cluster listener"), "{out}");
    }

    // A fourth node whose certificate another CA signed (it knows the cluster CA's certificate
    // and reaches etcd): it joins etcd, but no node talks to it, nor it to them.
    let ports = common::free_ports(2);
    let mut cmd = w.cmd(common::berth(), ".");
    cmd.env("RUST_LOG", "berth=info")
        .arg("serve")
        .arg("--root")
        .arg(w.path("node3"))
        .args(["--listen", &format!("127.0.0.1:{}", ports[0])])
        .args(["--cluster", &c.etcd.urls(), "--node", "n3"])
        .args(["--cluster-listen", &format!("127.0.0.1:{}", ports[1])])
        .args(["--advertise", &format!("https://127.0.0.1:{}", ports[1])])
        .args(["--cluster-ca", ca, "--cluster-cert", rogue_cert])
        .args(["--cluster-key", rogue_key])
        .args(certs.berth_etcd_args());
    let n3 = common::ServeProcess::spawn(cmd, |out| out.contains("listening on http://"));
    let n3_url = |repo: &str| format!("http://127.0.0.1:{}/{repo}", ports[0]);
    // Its forwarded push (it holds no replica of app) reaches no replica.
    w.commit(&src, "a", "via the rogue node");
    let out = push(&w, &src, &n3_url("app.git"), &["HEAD:refs/heads/main"]);
    assert!(!out.status.success(), "a push through n3 went through");
    // Its log is read from its stderr as it comes: the last lines may come after the answer.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !(n3.log().contains("cannot forward") && n3.log().contains("alert")) {
        assert!(Instant::now() < deadline, "n3's log:\n{}", n3.log());
        std::thread::sleep(Duration::from_millis(100));
    }
    let refs = c.converged(&w, "app.git", 3);
    assert_ne!(
        refs.get("refs/heads/main").map(String::as_str),
        Some(w.git(&src, &["rev-parse", "HEAD"]).trim())
    );

    // n2 gone: a new repository is placed on n0, n1 and n3; n3 cannot take part (n0 does not
    // trust its certificate), so the push is acknowledged by n0 and n1 alone, and n3 never
    // gets its copy's refs (its catch-up's requests are refused too).
    c.kill_node(2);
    let deadline = Instant::now() + Duration::from_secs(60);
    while c
        .etcd
        .keys("/berth/nodes/")
        .is_some_and(|k| k.iter().any(|k| k.ends_with("/n2")))
    {
        assert!(Instant::now() < deadline, "n2's lease did not expire");
        std::thread::sleep(Duration::from_millis(500));
    }
    must(
        push(
            &w,
            &src,
            &c.nodes[0].url("new.git"),
            &["HEAD:refs/heads/main"],
        ),
        &c,
        "a push of a new repository with n3 among its replicas",
    );
    let replicas = c
        .etcd
        .value("/berth/repos/new/replicas")
        .unwrap_or_default();
    assert!(replicas.contains("n3"), "n3 is a replica: {replicas}");
    std::thread::sleep(Duration::from_secs(7));
    let head = w.git(&src, &["rev-parse", "HEAD"]).trim().to_owned();
    for n in &c.nodes[..2] {
        assert_eq!(
            w.ref_map(n.dir("new.git")).get("refs/heads/main"),
            Some(&head),
            "{}",
            n.name
        );
        if let Err(e) = w.fsck(n.dir("new.git")) {
            panic!("git fsck --strict on {}: {e}", n.name);
        }
    }
    assert_no_main(&w, &w.path("node3").join("new.git"));
    drop(n3);
}

/// Node `node`'s `berth serve` with `cert` and `key` as its node certificate: its public port
/// and the process (its root `<world>/node-<node>`).
fn start_with_cert(
    w: &common::World,
    c: &Cluster,
    node: &str,
    cert: &std::path::Path,
    key: &std::path::Path,
) -> (u16, common::ServeProcess) {
    let certs = c.etcd.certs.clone().unwrap();
    let ports: Vec<u16> = common::free_ports(2);
    let mut cmd = w.cmd(common::berth(), ".");
    cmd.env("RUST_LOG", "berth=info")
        .arg("serve")
        .arg("--root")
        .arg(w.path(&format!("node-{node}")))
        .args(["--listen", &format!("127.0.0.1:{}", ports[0])])
        .args(["--cluster", &c.etcd.urls(), "--node", node])
        .args(["--cluster-listen", &format!("127.0.0.1:{}", ports[1])])
        .args(["--advertise", &format!("https://127.0.0.1:{}", ports[1])])
        .args(["--cluster-ca", certs.ca.to_str().unwrap()])
        .args(["--cluster-cert", cert.to_str().unwrap()])
        .args(["--cluster-key", key.to_str().unwrap()])
        .args(certs.berth_etcd_args());
    let p = common::ServeProcess::spawn(cmd, |out| out.contains("listening on http://"));
    (ports[0], p)
}

#[test]
fn a_node_with_another_nodes_certificate_is_refused_on_both_ends() {
    let Some(w) = cluster_world() else { return };
    let (c, src) = cluster(&w).tls().with_repo("app.git");
    let certs = c.etcd.certs.clone().unwrap();
    let secret = c
        .etcd
        .value("/berth/secret")
        .expect("etcdctl reads the secret");
    let secret_header = format!("x-berth-cluster-secret: {secret}");
    let (n1_cert, n1_key) = certs.node("n1");
    let snapshot = "/_berth/cluster/snapshot";
    let body = r#"{"repo":"app"}"#;
    // A client with n1's certificate and the secret, on n0's node listener: served as n1,
    // refused as n0, as n2 or as no node; the certificate naming no node (etcd's) is refused
    // as any node.
    let as_node = |cert: &std::path::Path, key: &std::path::Path, claimed: Option<&str>| {
        let claim = claimed.map(|n| format!("x-berth-node: {n}"));
        let mut a = vec![
            "--cacert",
            certs.ca.to_str().unwrap(),
            "--cert",
            cert.to_str().unwrap(),
            "--key",
            key.to_str().unwrap(),
            "-H",
            &secret_header,
        ];
        if let Some(h) = &claim {
            a.extend(["-H", h]);
        }
        curl_node(c.nodes[0].cluster_port, snapshot, body, &a)
    };
    assert_eq!(as_node(&n1_cert, &n1_key, Some("n1")), Some(200));
    assert_eq!(as_node(&n1_cert, &n1_key, Some("n0")), Some(403));
    assert_eq!(as_node(&n1_cert, &n1_key, Some("n2")), Some(403));
    assert_eq!(as_node(&n1_cert, &n1_key, None), Some(403));
    assert_eq!(as_node(&certs.cert, &certs.key, Some("n1")), Some(403));

    // A fourth node, n3, started with n1's certificate (of the cluster CA).
    let (n3_port, n3) = start_with_cert(&w, &c, "n3", &n1_cert, &n1_key);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !n3.log().contains("--cluster-cert does not name this node") {
        assert!(Instant::now() < deadline, "{}", n3.log());
        std::thread::sleep(Duration::from_millis(100));
    }
    // The listener's end: its requests claim n3, its certificate names n1. Its forwarded push
    // (it holds no replica of app) is refused by the replica.
    w.commit(&src, "a", "via n3");
    let out = push(
        &w,
        &src,
        &format!("http://127.0.0.1:{n3_port}/app.git"),
        &["HEAD:refs/heads/main"],
    );
    assert!(!out.status.success(), "a push through n3 went through");
    let refs = c.converged(&w, "app.git", 3);
    let head = w.git(&src, &["rev-parse", "HEAD"]).trim().to_owned();
    assert_ne!(refs.get("refs/heads/main"), Some(&head));
    // The dialler's end: a new repository placed with n3 among its replicas is pushed through
    // n0; n0's connections to n3 fail (n3 presents n1's certificate), the push is acknowledged
    // by the two others, and n3 gets nothing.
    let mut placed = None;
    for k in 0..20 {
        let repo = format!("new{k}.git");
        must(
            push(&w, &src, &c.nodes[0].url(&repo), &["HEAD:refs/heads/main"]),
            &c,
            &format!("a push of {repo}"),
        );
        let list = c
            .etcd
            .value(&format!("/berth/repos/new{k}/replicas"))
            .unwrap_or_default();
        if list.contains("\"n3\"") {
            placed = Some(repo);
            break;
        }
    }
    let repo = placed.expect("no new repository placed on n3 in 20");
    let deadline = Instant::now() + Duration::from_secs(30);
    let said = "presents the certificate of node n1, not of n3";
    while !c.nodes[0].log().contains(said) {
        assert!(
            Instant::now() < deadline,
            "n0 did not say '{said}'\n{}",
            c.logs()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_no_main(&w, &w.path("node-n3").join(&repo));
    drop(n3);
}

/// The serial number of the certificate the node listener at `port` presents (`openssl
/// s_client` with `cert` as the client certificate).
fn presented_serial(
    certs: &Certs,
    port: u16,
    cert: &std::path::Path,
    key: &std::path::Path,
) -> String {
    use std::io::Write;
    use std::process::Stdio;
    let out = Command::new("openssl")
        .args(["s_client", "-connect", &format!("127.0.0.1:{port}")])
        .args(["-CAfile", certs.ca.to_str().unwrap()])
        .args([
            "-cert",
            cert.to_str().unwrap(),
            "-key",
            key.to_str().unwrap(),
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let mut x509 = Command::new("openssl")
        .args(["x509", "-noout", "-serial"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    x509.stdin.take().unwrap().write_all(&out.stdout).unwrap();
    let got = x509.wait_with_output().unwrap();
    String::from_utf8_lossy(&got.stdout).trim().to_owned()
}

/// The serial number of the certificate in `file`.
fn file_serial(file: &std::path::Path) -> String {
    let out = Command::new("openssl")
        .args(["x509", "-noout", "-serial", "-in"])
        .arg(file)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

#[test]
fn a_node_reads_its_certificates_again_on_sighup() {
    let Some(w) = cluster_world() else { return };
    let (c, src) = cluster(&w).tls().with_repo("app.git");
    let certs = c.etcd.certs.clone().unwrap();
    let (n0_cert, n0_key) = certs.node("n0");
    let (n1_cert, n1_key) = certs.node("n1");
    let port = c.nodes[0].cluster_port;
    let old = file_serial(&n0_cert);
    assert!(old.starts_with("serial="), "{old}");
    assert_eq!(presented_serial(&certs, port, &n1_cert, &n1_key), old);
    // Files it cannot use: on SIGHUP it says so and keeps the certificate it has.
    let saved = (
        std::fs::read(&n0_cert).unwrap(),
        std::fs::read(&n0_key).unwrap(),
    );
    std::fs::write(&n0_cert, "not a certificate\n").unwrap();
    c.signal(0, "-HUP");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !c.nodes[0]
        .log()
        .contains("cannot read the cluster's TLS files again")
    {
        assert!(Instant::now() < deadline, "{}", c.nodes[0].log());
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(presented_serial(&certs, port, &n1_cert, &n1_key), old);
    std::fs::write(&n0_cert, &saved.0).unwrap();
    std::fs::write(&n0_key, &saved.1).unwrap();
    // A newly issued certificate (new key, new serial) in its files: presented once the node
    // had its SIGHUP, not before.
    certs.issue(&n0_cert, &n0_key, Some("n0"));
    let new = file_serial(&n0_cert);
    assert_ne!(new, old);
    assert_eq!(presented_serial(&certs, port, &n1_cert, &n1_key), old);
    c.signal(0, "-HUP");
    let deadline = Instant::now() + Duration::from_secs(30);
    while presented_serial(&certs, port, &n1_cert, &n1_key) != new {
        assert!(Instant::now() < deadline, "{}", c.nodes[0].log());
        std::thread::sleep(Duration::from_millis(200));
    }
    // Its own connections to the others use the new key too: pushes through it (streamed,
    // prepared, decided over TLS) and through the others (to it) still replicate.
    for i in [0, 1] {
        w.commit(&src, "a", &format!("after the reload, via n{i}"));
        must(
            push(
                &w,
                &src,
                &c.nodes[i].url("app.git"),
                &["HEAD:refs/heads/main"],
            ),
            &c,
            &format!("a push via n{i} after n0's reload"),
        );
    }
    let refs = c.converged(&w, "app.git", 3);
    let head = w.git(&src, &["rev-parse", "HEAD"]).trim().to_owned();
    assert_eq!(refs.get("refs/heads/main"), Some(&head));
}

/// The copy at `copy`, if there is one, has no `refs/heads/main`: the push never reached it.
fn assert_no_main(w: &common::World, copy: &std::path::Path) {
    let refs = if copy.join("HEAD").is_file() {
        w.ref_map(copy)
    } else {
        Default::default()
    };
    assert_eq!(
        refs.get("refs/heads/main"),
        None,
        "{} got the push",
        copy.display()
    );
}
