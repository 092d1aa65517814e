//! `berth bench many-refs`: both receivers and the floor program verified and timed, taking
//! turns, and a receiver that drops refs reported as failed.

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
    let out = bench(&["--refs", "200", "--runs", "2", "--json"]);
    let json = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{json}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(json.starts_with("{\"refs\":200,"), "{json}");
    // git, berth, and the floor program (this machine has cc: it builds berth).
    assert_eq!(json.matches("\"ok\":true").count(), 3, "{json}");
    assert!(
        json.contains("{\"command\":\"floor (C, packed-refs)\",\"ok\":true"),
        "{json}"
    );
    let floor = json.split("\"command\":").nth(3).unwrap();
    assert!(floor.contains("\"floor_ratio\":1.0000"), "{json}");
    assert!(json.contains("\"command\":\"git receive-pack\""), "{json}");
    assert!(json.contains("receive-pack\",\"ok\":true"), "{json}");
    assert!(json.contains("\"ratio\":1.0000"), "{json}");
    // The second receiver's ratio is a number, not null.
    let second = json.split("\"command\":").nth(2).unwrap();
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
            .any(|l| l.starts_with("git receive-pack") && l.contains(" 1.000x ")),
        "{table}"
    );
    assert!(!table.contains("FAILED"), "{table}");
    // Not a push the floor program handles (objects in the pack, atomic): it does not run.
    assert!(!table.contains("floor (C"), "{table}");
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
        script.to_str().unwrap(),
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
