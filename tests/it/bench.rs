//! `berth bench many-refs`: both receivers and the floor program verified and timed, taking
//! turns, a receiver that drops refs reported as failed, and a sweep of cases written as JSON,
//! CSV, markdown and an SVG plot.

use std::process::Command;

fn berth() -> &'static str {
    env!("CARGO_BIN_EXE_berth")
}

fn bench(args: &[&str]) -> std::process::Output {
    let tmp = tempfile::tempdir().unwrap();
    Command::new(berth())
        .args(["bench", "many-refs"])
        .args(args)
        .arg("--workdir")
        .arg(tmp.path())
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .unwrap()
}

#[test]
fn both_receivers_succeed_with_a_ratio() {
    let out = bench(&["--refs", "200", "--runs", "2", "--warmup", "1", "--json"]);
    let json = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{json}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        json.starts_with("{\"runs\":2,\"warmup\":1,\"cases\":[{\"refs\":200,"),
        "{json}"
    );
    // git, berth, and the floor program (this machine has cc: it builds berth).
    assert_eq!(json.matches("\"ok\":true").count(), 3, "{json}");
    assert!(json.contains("{\"name\":\"floor\",\"ok\":true"), "{json}");
    let floor = json.split("\"name\":").nth(3).unwrap();
    assert!(floor.contains("\"floor_ratio\":1.0000"), "{json}");
    assert!(json.contains("\"name\":\"git\",\"ok\":true"), "{json}");
    assert!(json.contains("\"name\":\"berth\",\"ok\":true"), "{json}");
    assert!(json.contains("\"ratio\":1.0000"), "{json}");
    // Starting a program as each receiver is started, timed once a run: its time taken from
    // every receiver's and the floor's for the ratio of their work.
    let start: f64 = json
        .split("\"start_ms\":")
        .nth(1)
        .unwrap()
        .split(',')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(start > 0.0, "{json}");
    // The floor over itself: 1, unless its few runs here were not longer than the start's
    // (then there is no such ratio).
    let beyond = floor
        .split("\"floor_ratio_beyond_start\":")
        .nth(1)
        .unwrap()
        .split(',')
        .next()
        .unwrap();
    assert!(beyond == "1.0000" || beyond == "null", "{json}");
    // The second receiver's ratio is a number, not null.
    let second = json.split("\"name\":").nth(2).unwrap();
    assert!(!second.contains("\"ratio\":null"), "{json}");
    assert_eq!(
        second
            .split("\"times_ms\":[")
            .nth(1)
            .unwrap()
            .split(']')
            .next()
            .unwrap()
            .split(',')
            .count(),
        2
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("run 2/2"), "progress on stderr: {stderr}");
    // The receivers take turns: every first run before any second one.
    let runs: Vec<&str> = stderr
        .lines()
        .filter_map(|l| l.rsplit_once(": run ").map(|(_, n)| n))
        .collect();
    assert_eq!(runs, ["1/2", "1/2", "1/2", "2/2", "2/2", "2/2"], "{stderr}");
    // A warm-up run of each first, verified but not timed.
    let first_run = stderr.find(": run 1/2").unwrap();
    assert_eq!(
        stderr[..first_run].matches(": warm-up 1/1").count(),
        3,
        "{stderr}"
    );
}

#[test]
fn table_with_sideband_v1_atomic_and_objects_in_the_pack() {
    let out = bench(&[
        "--refs",
        "150",
        "--commits",
        "30",
        "--runs",
        "1",
        "--warmup",
        "0",
        "--sideband",
        "--report",
        "v1",
        "--atomic",
        "--objects",
        "pack",
    ]);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{table}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        table.contains("150 new refs, 30 commits, objects in the pack"),
        "{table}"
    );
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("git ") && l.contains(" 1.000 ± 0.000 ")),
        "{table}"
    );
    assert!(!table.contains("FAILED"), "{table}");
    // Not a push the floor program handles (objects in the pack, atomic): it does not run.
    assert!(!table.lines().any(|l| l.starts_with("floor ")), "{table}");
}

#[test]
fn a_receiver_that_drops_refs_is_reported_failed() {
    let tmp = tempfile::tempdir().unwrap();
    // Runs git receive-pack on a copy of the request without its last command.
    let script = tmp.path().join("dropper");
    std::fs::write(
        &script,
        "#!/bin/sh\n# usage: dropper --stateless-rpc DIR\npython3 -c '\nimport sys\nd=sys.stdin.buffer.read()\nout=[];p=0\nwhile True:\n    n=int(d[p:p+4],16)\n    if n==0: break\n    out.append(d[p:p+n]);p+=n\nrest=d[p:]\nsys.stdout.buffer.write(b\"\".join(out[:-1])+rest)\n' | git receive-pack \"$@\"\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = bench(&[
        "--refs",
        "120",
        "--runs",
        "1",
        "--json",
        "--no-floor",
        "--receiver",
        "git receive-pack",
        "--receiver",
        &format!("dropper={}", script.display()),
    ]);
    let json = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{json}");
    assert_eq!(json.matches("\"ok\":true").count(), 1, "{json}");
    assert_eq!(json.matches("\"ok\":false").count(), 1, "{json}");
    assert!(
        json.contains("refs/heads/b/0000119"),
        "the dropped ref is named: {json}"
    );
    assert!(
        json.contains("\"median_ms\":null"),
        "a failed receiver is not timed: {json}"
    );
    // Without the floor, nothing is taken from its ratios: the start is not timed.
    assert!(json.contains("\"start_ms\":null,"), "{json}");
    // A bare command is named by itself, a NAME=COMMAND by its name.
    assert!(
        json.contains("{\"name\":\"git receive-pack\",\"ok\":true"),
        "{json}"
    );
    assert!(
        json.contains("{\"name\":\"dropper\",\"ok\":false"),
        "{json}"
    );
}

#[test]
fn reftable_targets_verified_for_both_receivers() {
    let out = bench(&[
        "--refs",
        "300",
        "--runs",
        "2",
        "--ref-format",
        "reftable",
        "--json",
    ]);
    let json = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{json}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(json.contains("\"ref_format\":\"reftable\""), "{json}");
    // The floor too (its report checked; it writes packed-refs, not tables).
    assert_eq!(json.matches("\"ok\":true").count(), 3, "{json}");
}

/// A tiny XML well-formedness check: every tag closed in order, attributes quoted, one root.
fn well_formed(xml: &str) -> Result<usize, String> {
    let mut stack: Vec<&str> = Vec::new();
    let mut elements = 0;
    let mut rest = xml;
    let mut roots = 0;
    while let Some(start) = rest.find('<') {
        if stack.is_empty() && !rest[..start].trim().is_empty() {
            return Err(format!("text outside the root: {:?}", &rest[..start]));
        }
        rest = &rest[start..];
        let end = rest.find('>').ok_or("unclosed tag")?;
        let tag = &rest[1..end];
        rest = &rest[end + 1..];
        if tag.starts_with('?') || tag.starts_with('!') {
            continue;
        }
        if !tag.matches('"').count().is_multiple_of(2) {
            return Err(format!("unbalanced quotes in <{tag}>"));
        }
        if let Some(name) = tag.strip_prefix('/') {
            match stack.pop() {
                Some(open) if open == name.trim() => {}
                other => return Err(format!("</{name}> closes {other:?}")),
            }
            continue;
        }
        let name = tag.split([' ', '/', '\n']).next().unwrap_or("");
        if name.is_empty() {
            return Err(format!("empty tag name in <{tag}>"));
        }
        elements += 1;
        if stack.is_empty() {
            roots += 1;
        }
        if !tag.ends_with('/') {
            stack.push(name);
        }
    }
    if !stack.is_empty() || roots != 1 || !rest.trim().is_empty() {
        return Err(format!("open at the end: {stack:?}, {roots} roots"));
    }
    Ok(elements)
}

/// Two ref counts × two formats × two named receivers, the second the baseline: the JSON has
/// every case with every receiver verified, CSV and markdown a row per case and receiver, and
/// the SVG is well-formed XML with one line per receiver and format in each of its charts (time
/// and peak RSS).
#[test]
fn a_sweep_over_refs_and_formats_in_every_output() {
    let tmp = tempfile::tempdir().unwrap();
    let me = format!("'{}' receive-pack", berth());
    let sweep = |format: &str, plot: Option<&std::path::Path>| {
        let mut args: Vec<String> = [
            "--refs",
            "100,300",
            "--ref-format",
            "files,reftable",
            "--runs",
            "2",
            "--warmup",
            "0",
            "--no-floor",
            "--receiver",
            "git-installed=git receive-pack",
            "--receiver",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.push(format!("mine={me}"));
        args.extend(["--baseline".into(), "mine".into(), format.into()]);
        if let Some(p) = plot {
            args.push("--plot".into());
            args.push(p.display().to_string());
        }
        let args: Vec<&str> = args.iter().map(|s| s.as_str()).collect();
        let out = bench(&args);
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{stdout}\n{stderr}");
        (stdout, stderr)
    };
    let svg = tmp.path().join("sweep.svg");
    let (json, stderr) = sweep("--json", Some(&svg));
    for (i, case) in ["1/4", "2/4", "3/4", "4/4"].iter().enumerate() {
        assert!(
            stderr.contains(&format!("bench: case {case}: ")),
            "case {i}: {stderr}"
        );
    }
    let cases: Vec<&str> = json.split("{\"refs\":").skip(1).collect();
    assert_eq!(cases.len(), 4, "{json}");
    let mut seen = Vec::new();
    for c in &cases {
        let refs = c.split(',').next().unwrap();
        let format = c
            .split("\"ref_format\":\"")
            .nth(1)
            .unwrap()
            .split('"')
            .next()
            .unwrap();
        seen.push(format!("{refs} {format}"));
        // The baseline first, both verified, two timed runs each.
        assert!(
            c.contains("\"receivers\":[{\"name\":\"mine\",\"ok\":true")
                && c.contains("{\"name\":\"git-installed\",\"ok\":true"),
            "{c}"
        );
        assert!(c.contains("\"ratio\":1.0000,\"ratio_sd\":"), "{c}");
        assert_eq!(c.matches("\"times_ms\":[").count(), 2, "{c}");
    }
    seen.sort();
    assert_eq!(
        seen,
        ["100 files", "100 reftable", "300 files", "300 reftable"]
    );

    let svg = std::fs::read_to_string(&svg).unwrap();
    well_formed(&svg).unwrap_or_else(|e| panic!("{e}\n{svg}"));
    assert!(svg.starts_with("<svg"), "{svg}");
    // Two charts: time, then peak RSS, each with every series in its legend.
    let (time, rss) = svg
        .split_once("\npeak RSS: the largest process")
        .unwrap_or_else(|| panic!("no peak RSS chart: {svg}"));
    assert!(rss.contains("\npeak RSS (MiB)\n"), "{rss}");
    for chart in [time, rss] {
        for label in [
            "mine, files",
            "mine, reftable",
            "git-installed, files",
            "git-installed, reftable",
        ] {
            assert_eq!(
                chart.matches(&format!("\n{label}\n")).count(),
                1,
                "{label}: {chart}"
            );
        }
        // One line per series (and its legend swatch), each in its own colour.
        let series: std::collections::BTreeSet<&str> = chart
            .split("<polyline ")
            .skip(1)
            .filter(|p| p.contains("stroke-width=\"2\""))
            .filter_map(|p| p.split("stroke=\"").nth(1)?.split('"').next())
            .collect();
        assert_eq!(series.len(), 4, "{chart}");
    }
    // The JSON has each receiver's peak RSS, in KiB.
    for c in &cases {
        for r in c.split("{\"name\":").skip(1) {
            let kib: u64 = r
                .split("\"peak_rss_kib\":")
                .nth(1)
                .and_then(|v| v.split(',').next()?.parse().ok())
                .unwrap_or_else(|| panic!("no peak_rss_kib: {r}"));
            assert!(kib > 0, "{r}");
        }
    }

    let (csv, _) = sweep("--csv", None);
    let lines: Vec<&str> = csv.lines().collect();
    assert!(lines[0].starts_with("refs,commits,ref_format,"), "{csv}");
    assert_eq!(lines.len(), 1 + 4 * 2, "{csv}");
    assert_eq!(
        lines.iter().filter(|l| l.contains(",mine,true,")).count(),
        4,
        "{csv}"
    );

    let (md, _) = sweep("--markdown", None);
    let rows: Vec<&str> = md.lines().filter(|l| l.starts_with("| ")).collect();
    assert_eq!(rows.len(), 1 + 4 * 2, "{md}");
    assert!(
        rows[0].starts_with("| refs | ref_format | receiver |"),
        "{md}"
    );
}

#[test]
fn an_unknown_baseline_is_a_usage_error() {
    let out = bench(&[
        "--refs",
        "10",
        "--baseline",
        "nope",
        "--receiver",
        "a=git receive-pack",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--baseline nope: no receiver has that name (they are: a)"),
        "{stderr}"
    );
}

/// `berth bench load --url <url> <args> --json`, the pushes in the tests' object format.
fn load(url: &str, args: &[&str]) -> (std::process::Output, String) {
    let format = crate::common::object_format_name().unwrap_or_else(|| "sha1".into());
    let out = Command::new(berth())
        .args(["bench", "load", "--url", url, "--json", "--object-format"])
        .arg(&format)
        .args(args)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .unwrap();
    let json = String::from_utf8_lossy(&out.stdout).into_owned();
    (out, json)
}

/// The branches `bench load` made, as the server has them.
fn load_branches(w: &crate::common::World, repo: &str) -> usize {
    w.git(repo, &["for-each-ref", "refs/heads/bench-load/"])
        .lines()
        .count()
}

/// Two clients, three pushes each, against `berth serve` over HTTP: six acknowledged, six
/// verified with `git ls-remote`, one branch per client on the server.
#[test]
fn load_over_http_counts_and_verifies_every_push() {
    let w = crate::common::World::new();
    w.bare("repos/load.git");
    let srv = crate::serve::Serve::start(&w, &[]);
    let (out, json) = load(&srv.url("load.git"), &["--clients", "2", "--pushes", "3"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{json}\n{stderr}\n{}", srv.log());
    assert!(
        json.contains("\"attempted\":6,\"acknowledged\":6,"),
        "{json}"
    );
    assert!(json.contains("\"errors\":[],\"verified\":6,"), "{json}");
    assert!(
        json.contains("\"verification_failures\":[],\"ok\":true"),
        "{json}"
    );
    assert!(!json.contains("\"pushes_per_s\":null"), "{json}");
    assert!(!json.contains("\"p99_ms\":null"), "{json}");
    assert_eq!(load_branches(&w, "repos/load.git"), 2);
}

/// `--url` twice (a cluster's entry points): client `c` pushes to, and is verified through, URL
/// `c mod 2`; two servers of their own show it: each holds the branches of its clients only.
#[test]
fn load_spreads_the_clients_over_several_urls() {
    let (a, b) = (crate::common::World::new(), crate::common::World::new());
    a.bare("repos/load.git");
    b.bare("repos/load.git");
    let (sa, sb) = (
        crate::serve::Serve::start(&a, &[]),
        crate::serve::Serve::start(&b, &[]),
    );
    let (ua, ub) = (sa.url("load.git"), sb.url("load.git"));
    let (out, json) = load(&ua, &["--url", &ub, "--clients", "3", "--pushes", "2"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{json}\n{stderr}");
    assert!(json.contains("\"errors\":[],\"verified\":6,"), "{json}");
    assert!(
        json.contains(&format!("\"urls\":[\"{ua}\",\"{ub}\"]")),
        "{json}"
    );
    // Clients 0 and 2 on the first server, client 1 on the second.
    assert_eq!(load_branches(&a, "repos/load.git"), 2);
    assert_eq!(load_branches(&b, "repos/load.git"), 1);
}

/// The same over ssh (`berth serve --ssh-listen`, a key from its keydir), and one repository
/// per client (`--auto-init` creates them).
#[test]
fn load_over_ssh_with_a_repository_each() {
    let w = crate::ssh_serve::world();
    let srv = crate::ssh_serve::Serve::start(&w, &["--auto-init"]);
    let key = w.path("keys/alice");
    let known = format!("UserKnownHostsFile={}", w.path("known_hosts").display());
    let (out, json) = load(
        &srv.url("many"),
        &[
            "--clients",
            "2",
            "--pushes",
            "3",
            "--repos",
            "each",
            "--identity",
            key.to_str().unwrap(),
            "--ssh-option",
            &known,
            "--ssh-option",
            "StrictHostKeyChecking=yes",
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{json}\n{stderr}\n{}", srv.log());
    assert!(json.contains("\"acknowledged\":6,"), "{json}");
    assert!(json.contains("\"errors\":[],\"verified\":6,"), "{json}");
    assert_eq!(load_branches(&w, "repos/many/c0.git"), 1);
    assert_eq!(load_branches(&w, "repos/many/c1.git"), 1);
}

/// Pushes a hook refuses and a URL that is no repository are counted as errors of their kind,
/// nothing is claimed verified, and the exit status is 1.
#[test]
fn load_counts_refused_pushes_and_http_errors() {
    let w = crate::common::World::new();
    w.bare("repos/strict.git");
    let hook = w.path("repos/strict.git/hooks/pre-receive");
    std::fs::write(&hook, "#!/bin/sh\necho no pushes today >&2\nexit 1\n").unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let srv = crate::serve::Serve::start(&w, &[]);
    let (out, json) = load(&srv.url("strict.git"), &["--clients", "2", "--pushes", "2"]);
    assert_eq!(out.status.code(), Some(1), "{json}");
    assert!(json.contains("\"acknowledged\":0,"), "{json}");
    assert!(
        json.contains("\"errors\":[{\"kind\":\"refused\",\"count\":4,"),
        "{json}"
    );
    assert!(json.contains("\"verified\":0,"), "{json}");
    assert_eq!(load_branches(&w, "repos/strict.git"), 0);

    let (out, json) = load(&srv.url("nope"), &["--clients", "1", "--pushes", "2"]);
    assert_eq!(out.status.code(), Some(1), "{json}");
    assert!(
        json.contains("\"errors\":[{\"kind\":\"http 404\",\"count\":2,"),
        "{json}"
    );

    // Nothing listening: transport errors.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let (out, json) = load(
        &format!("http://127.0.0.1:{port}/x.git"),
        &["--clients", "1", "--pushes", "1"],
    );
    assert_eq!(out.status.code(), Some(1), "{json}");
    assert!(
        json.contains("\"kind\":\"transport\",\"count\":1,"),
        "{json}"
    );
}

/// Over https (`berth serve --tls-cert`), the self-signed certificate given as `--ca-file`.
#[test]
fn load_over_https_with_a_ca_file() {
    let w = crate::common::World::new();
    let (cert, key) = (w.path("cert.pem"), w.path("key.pem"));
    // CA:FALSE: rustls does not take a CA certificate as the server's own.
    let out = Command::new("openssl")
        .args(["req", "-x509", "-newkey", "ec", "-pkeyopt"])
        .args(["ec_paramgen_curve:P-256", "-nodes", "-days", "2"])
        .args(["-subj", "/CN=localhost"])
        .args(["-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"])
        .args(["-addext", "basicConstraints=critical,CA:FALSE"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    w.bare("repos/load.git");
    let srv = crate::serve::Serve::start(
        &w,
        &[
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
        ],
    );
    let url = format!("https://{}/load.git", srv.addr);
    let args = ["--clients", "2", "--pushes", "2", "--ca-file"];
    let mut args: Vec<&str> = args.to_vec();
    args.push(cert.to_str().unwrap());
    let (out, json) = load(&url, &args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{json}\n{stderr}\n{}", srv.log());
    assert!(json.contains("\"acknowledged\":4,"), "{json}");
    assert!(json.contains("\"errors\":[],\"verified\":4,"), "{json}");
    assert_eq!(load_branches(&w, "repos/load.git"), 2);
}

/// `git http-backend` behind lighttpd (mod_cgi) serving `root` on an ephemeral loopback port:
/// the server `bench load` is compared against. `None` (said on stderr) without lighttpd; under
/// `CI` its absence fails the test.
struct Lighttpd {
    child: std::process::Child,
    port: u16,
}

impl Drop for Lighttpd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn lighttpd(w: &crate::common::World, root: &std::path::Path) -> Option<Lighttpd> {
    let Some(bin) = ["/usr/sbin/lighttpd", "/usr/local/sbin/lighttpd"]
        .into_iter()
        .find(|p| std::path::Path::new(p).is_file())
    else {
        assert!(
            std::env::var_os("CI").is_none(),
            "lighttpd is missing: install it (apt-get install -y lighttpd)"
        );
        eprintln!("SKIPPED: lighttpd is missing (apt-get install -y lighttpd)");
        return None;
    };
    let exec_path = w.git(".", &["--exec-path"]);
    let backend = std::path::Path::new(exec_path.trim()).join("git-http-backend");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let www = w.path("www");
    std::fs::create_dir_all(&www).unwrap();
    let conf = w.path("lighttpd.conf");
    std::fs::write(
        &conf,
        format!(
            r#"server.modules = ("mod_alias", "mod_cgi", "mod_setenv")
server.document-root = "{www}"
server.bind = "127.0.0.1"
server.port = {port}
server.errorlog = "{log}"
alias.url = ( "/git" => "{backend}" )
$HTTP["url"] =~ "^/git" {{
    cgi.assign = ( "" => "" )
    setenv.add-environment = (
        "GIT_PROJECT_ROOT" => "{root}",
        "GIT_HTTP_EXPORT_ALL" => ""
    )
}}
"#,
            www = www.display(),
            log = w.path("lighttpd-error.log").display(),
            backend = backend.display(),
            root = root.display(),
        ),
    )
    .unwrap();
    let child = Command::new(bin)
        .args(["-D", "-f"])
        .arg(&conf)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let server = Lighttpd { child, port };
    let start = std::time::Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(60),
            "lighttpd did not listen: {}",
            std::fs::read_to_string(w.path("lighttpd-error.log")).unwrap_or_default()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    Some(server)
}

/// Against git's own server (`git http-backend` behind lighttpd, pushes allowed with
/// `http.receivepack`): the same counts and verification as against berth.
#[test]
fn load_against_git_http_backend_behind_lighttpd() {
    let w = crate::common::World::new();
    w.bare("repos/load.git");
    w.git("repos/load.git", &["config", "http.receivepack", "true"]);
    let Some(server) = lighttpd(&w, &w.path("repos")) else {
        return;
    };
    let url = format!("http://127.0.0.1:{}/git/load.git", server.port);
    let (out, json) = load(&url, &["--clients", "2", "--pushes", "3"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{json}\n{stderr}\n{}",
        std::fs::read_to_string(w.path("lighttpd-error.log")).unwrap_or_default()
    );
    assert!(
        json.contains("\"attempted\":6,\"acknowledged\":6,"),
        "{json}"
    );
    assert!(json.contains("\"errors\":[],\"verified\":6,"), "{json}");
    assert_eq!(load_branches(&w, "repos/load.git"), 2);
    w.assert_clean("repos/load.git");
}
