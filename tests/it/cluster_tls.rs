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
    let (ca, cert, key) = (
        certs.ca.to_str().unwrap(),
        certs.cert.to_str().unwrap(),
        certs.key.to_str().unwrap(),
    );
    let rogue = Certs::make(w.root(), "rogue");
    let (rogue_cert, rogue_key) = (rogue.cert.to_str().unwrap(), rogue.key.to_str().unwrap());
    let snapshot = "/_berth/cluster/snapshot";
    let body = r#"{"repo":"app"}"#;
    let port = c.nodes[0].cluster_port;
    // The cluster's certificate and the secret: served (both factors).
    let with = |extra: &[&str]| {
        let mut a = vec!["--cacert", ca, "-H", &secret_header];
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
            &["--cacert", ca, "--cert", cert, "--key", key]
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
    let ports = {
        let l: Vec<_> = (0..2)
            .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
            .collect();
        l.iter()
            .map(|l| l.local_addr().unwrap().port())
            .collect::<Vec<u16>>()
    };
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
    assert!(
        n3.log().contains("cannot forward") && n3.log().contains("alert"),
        "n3's log:\n{}",
        n3.log()
    );
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
    let n3_copy = w.path("node3").join("new.git");
    let n3_refs = if n3_copy.join("HEAD").is_file() {
        w.ref_map(&n3_copy)
    } else {
        Default::default()
    };
    assert_eq!(n3_refs.get("refs/heads/main"), None, "n3 got the push");
    drop(n3);
}
