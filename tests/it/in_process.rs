//! In-process hooks for programs that embed berth: they run where the process hooks run, can
//! refuse with a message, and cost no process. Also: one muxer per session, and keepalives while
//! a hook is silent; a commit gate asked about objects a push lacks (its catch-up checked
//! again, its refusal in its words).

use crate::common;
use berth::hooks::{InProcess, InProcessHooks, Push, Verdict};
use berth::protocol::request::Command;
use berth::refs::{RefUpdate, TransactionState};
use common::{EMPTY_PACK, World, ZERO, pkt};
use std::sync::{Arc, Mutex};

#[derive(Default)]
struct Recorder {
    calls: Mutex<Vec<String>>,
}

impl InProcess for Recorder {
    fn pre_receive(&self, push: &Push<'_>) -> Verdict {
        self.calls.lock().unwrap().push(format!(
            "pre-receive {} quarantine={}",
            push.commands.len(),
            push.quarantine.is_some()
        ));
        Verdict::Accept
    }
    fn update(&self, command: &Command) -> Verdict {
        self.calls
            .lock()
            .unwrap()
            .push(format!("update {}", command.name));
        if command.name == "refs/heads/protected" {
            Verdict::Refuse("protected is read-only".into())
        } else {
            Verdict::Accept
        }
    }
    fn reference_transaction(&self, state: TransactionState, updates: &[RefUpdate]) -> Verdict {
        self.calls
            .lock()
            .unwrap()
            .push(format!("{} {}", state.name(), updates.len()));
        Verdict::Accept
    }
    fn post_receive(&self, push: &Push<'_>) {
        self.calls
            .lock()
            .unwrap()
            .push(format!("post-receive {}", push.commands.len()));
    }
}

fn creations(head: &str, names: &[&str]) -> Vec<u8> {
    let mut input = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let caps = if i == 0 { "\0 report-status" } else { "" };
        input.extend(pkt(&format!("{ZERO} {head} {name}{caps}")));
    }
    input.extend(b"0000");
    input.extend(EMPTY_PACK);
    input
}

#[test]
fn in_process_hooks_run_in_gits_places_and_can_refuse() {
    let w = World::new();
    let head = w.server_with_main();

    let recorder = Arc::new(Recorder::default());
    let options = berth::receive::Options {
        stateless_rpc: true,
        in_process: Some(InProcessHooks(recorder.clone())),
        ..Default::default()
    };
    // The counters are the whole process's: no other test runs berth in it meanwhile.
    let _counters = common::in_process_lock();
    let processes = berth::hooks::process::processes_started();
    let muxers = berth::protocol::sideband::muxers_created();
    let mut out = Vec::new();
    let mut err = Vec::new();
    let dir = w.path("srv.git");
    berth::receive::run(
        dir.to_str().unwrap(),
        &options,
        &creations(&head, &["refs/heads/a", "refs/heads/protected"])[..],
        &mut out,
        &mut err,
    )
    .unwrap();
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "000eunpack ok\n0014ok refs/heads/a\n002ang refs/heads/protected hook declined\n0000"
    );
    assert_eq!(
        String::from_utf8(err).unwrap(),
        "protected is read-only\nerror: hook declined to update refs/heads/protected\n"
    );
    assert_eq!(
        *recorder.calls.lock().unwrap(),
        vec![
            "pre-receive 2 quarantine=true",
            "update refs/heads/a",
            "update refs/heads/protected",
            "preparing 1",
            "prepared 1",
            "committed 1",
            "post-receive 1",
        ]
    );
    assert_eq!(
        berth::hooks::process::processes_started(),
        processes,
        "no process for in-process hooks"
    );
    assert_eq!(
        berth::protocol::sideband::muxers_created(),
        muxers + 1,
        "one muxer per session"
    );
    assert!(w.refs("srv.git").contains("refs/heads/a\n"));
    assert!(!w.refs("srv.git").contains("protected"));
}

#[test]
fn keepalives_while_a_hook_is_silent() {
    let w = World::new();
    w.bare("srv.git");
    w.git("srv.git", &["config", "receive.keepAlive", "1"]);
    w.git("srv.git", &["config", "receive.autogc", "false"]);
    let hook = w.path("srv.git/hooks/pre-receive");
    std::fs::write(&hook, "#!/bin/sh\ncat >/dev/null\nsleep 2.5\necho done\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
    w.work("src");
    let head = w.commit("src", "a", "1");
    w.git("src", &["push", "-q", "../srv.git", "main"]);
    let mut input = pkt(&format!(
        "{ZERO} {head} refs/heads/x\0 report-status side-band-64k"
    ));
    input.extend(b"0000");
    input.extend(EMPTY_PACK);
    let mut cmd = w.cmd(common::berth(), ".");
    cmd.args(["receive-pack", "--stateless-rpc", "srv.git"]);
    let out = w.git_with_stdin_cmd(cmd, &input);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let keepalives = stdout.matches("0005\u{1}").count();
    assert!(
        (1..=3).contains(&keepalives),
        "{keepalives} keepalives in {stdout:?}"
    );
    let first_keepalive = stdout.find("0005\u{1}").unwrap();
    assert!(
        first_keepalive < stdout.find("\u{2}done").unwrap(),
        "{stdout:?}"
    );
    assert!(stdout.ends_with("0000"));
}

/// A ref access check that records what it is asked and refuses one ref.
#[derive(Debug, Default)]
struct Gate {
    asked: Mutex<Vec<String>>,
}

impl berth::receive::RefAccess for Gate {
    fn check(
        &self,
        name: &gix_object::bstr::BStr,
        _old: gix_hash::ObjectId,
        _new: gix_hash::ObjectId,
        change: berth::receive::RefChange,
    ) -> Result<(), String> {
        self.asked
            .lock()
            .unwrap()
            .push(format!("{name} {change:?}"));
        if name == "refs/heads/side" {
            Err("access denied by rule 3\nwith a newline".into())
        } else {
            Ok(())
        }
    }
}

#[test]
fn ref_access_check_sees_each_change_before_any_hook() {
    let w = World::new();
    w.bare("srv.git");
    w.git("srv.git", &["config", "receive.autogc", "false"]);
    w.work("src");
    let c1 = w.commit("src", "a", "1");
    let c2 = w.commit("src", "b", "2");
    w.git("src", &["checkout", "-q", "--orphan", "other"]);
    let c3 = w.commit("src", "c", "3");
    w.git(
        "src",
        &[
            "push",
            "-q",
            "../srv.git",
            &format!("{c1}:refs/heads/main"),
            &format!("{c1}:refs/heads/gone"),
            &format!("{c2}:refs/heads/side"),
            &format!("{c2}:refs/keep/c2"),
            &format!("{c3}:refs/keep/c3"),
        ],
    );
    let gate = Arc::new(Gate::default());
    let recorder = Arc::new(Recorder::default());
    let options = berth::receive::Options {
        stateless_rpc: true,
        in_process: Some(InProcessHooks(recorder.clone())),
        ref_access: Some(gate.clone()),
        ..Default::default()
    };
    let mut input = Vec::new();
    for (i, line) in [
        format!("{c1} {c2} refs/heads/main"),
        format!("{c2} {c3} refs/heads/side"),
        format!("{ZERO} {c1} refs/heads/new"),
        format!("{c1} {ZERO} refs/heads/gone"),
    ]
    .iter()
    .enumerate()
    {
        let caps = if i == 0 {
            "\0 report-status delete-refs"
        } else {
            ""
        };
        input.extend(pkt(&format!("{line}{caps}")));
    }
    input.extend(b"0000");
    input.extend(EMPTY_PACK);
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let dir = w.path("srv.git");
    berth::receive::run(
        dir.to_str().unwrap(),
        &options,
        &input[..],
        &mut out,
        &mut err,
    )
    .unwrap();
    assert_eq!(
        *gate.asked.lock().unwrap(),
        vec![
            "refs/heads/main FastForward",
            "refs/heads/side Rewind",
            "refs/heads/new Create",
            "refs/heads/gone Delete",
        ]
    );
    let out = String::from_utf8(out).unwrap();
    assert!(
        out.contains("ng refs/heads/side access denied by rule 3 with a newline\n"),
        "{out}"
    );
    assert!(
        out.contains("ok refs/heads/main\n") && out.contains("ok refs/heads/gone\n"),
        "{out}"
    );
    // The update hook never saw the refused ref.
    let calls = recorder.calls.lock().unwrap();
    assert!(
        calls.contains(&"update refs/heads/main".to_owned()),
        "{calls:?}"
    );
    assert!(
        !calls.iter().any(|c| c == "update refs/heads/side"),
        "{calls:?}"
    );
    assert_eq!(
        w.git("srv.git", &["rev-parse", "refs/heads/side"]).trim(),
        c2
    );
}

/// A commit gate whose replica lacks what a push builds on: it commits whatever it is given,
/// and when asked about missing objects answers as told, after copying `src`'s packs into
/// the repository (a catch-up) for [`Lag::CatchesUp`]. How often it was asked.
#[derive(Debug)]
struct Lagging {
    lag: Lag,
    src_packs: std::path::PathBuf,
    packs: std::path::PathBuf,
    asked: std::sync::atomic::AtomicUsize,
}

#[derive(Debug, Clone, Copy)]
enum Lag {
    CatchesUp,
    Refuses,
    NotBehind,
}

/// The refusal's text: after `cluster: `.
#[derive(Debug)]
struct Behind;

impl std::fmt::Display for Behind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("not applied: behind; retry")
    }
}

impl std::error::Error for Behind {}

struct Go;

impl berth::receive::GateCommit for Go {
    fn finish(
        self: Box<Self>,
        _committed_here: bool,
    ) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        Ok(())
    }
}

impl berth::receive::CommitGate for Lagging {
    fn decide(
        &self,
        _updates: &[RefUpdate],
        _current: &berth::refs::Refs,
    ) -> Result<Box<dyn berth::receive::GateCommit>, berth::receive::GateRefusal> {
        Ok(Box::new(Go))
    }

    fn lost_ref_retries(&self) -> u32 {
        0
    }

    fn objects_missing(&self) -> berth::receive::Missing {
        use berth::receive::{GateRefusal, Missing};
        self.asked.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        match self.lag {
            Lag::CatchesUp => {
                for f in std::fs::read_dir(&self.src_packs).unwrap() {
                    let f = f.unwrap().path();
                    std::fs::copy(&f, self.packs.join(f.file_name().unwrap())).unwrap();
                }
                Missing::MayBeHere(GateRefusal::new(Behind))
            }
            Lag::Refuses => Missing::Refused(GateRefusal::new(Behind)),
            Lag::NotBehind => Missing::Stands,
        }
    }
}

#[test]
fn a_commit_gate_is_asked_about_missing_objects_and_its_catch_up_is_checked_again() {
    let w = World::new();
    w.work("src");
    let head = w.commit("src", "a", "1");
    w.git("src", &["repack", "-a", "-d", "-q"]);
    let src_packs = w.path("src/.git/objects/pack");
    // It runs berth in this process (the counters of other tests would see it).
    let _counters = common::in_process_lock();
    // Each push creates a branch at a commit the repository lacks, sending no pack.
    let run = |repo: &str, lag: Lag, asked_for: &str| {
        w.bare(repo);
        w.git(repo, &["config", "receive.autogc", "false"]);
        let gate = Arc::new(Lagging {
            lag,
            src_packs: src_packs.clone(),
            packs: w.path(repo).join("objects/pack"),
            asked: Default::default(),
        });
        let options = berth::receive::Options {
            stateless_rpc: true,
            commit_gate: Some(gate.clone()),
            ..Default::default()
        };
        let (mut out, mut err) = (Vec::new(), Vec::new());
        berth::receive::run(
            w.path(repo).to_str().unwrap(),
            &options,
            &creations(&head, &[asked_for])[..],
            &mut out,
            &mut err,
        )
        .unwrap();
        let asked = gate.asked.load(std::sync::atomic::Ordering::SeqCst);
        (
            String::from_utf8(out).unwrap(),
            String::from_utf8(err).unwrap(),
            asked,
        )
    };
    // Caught up: checked again, it lands.
    let (out, err, asked) = run("caught.git", Lag::CatchesUp, "refs/heads/a");
    assert_eq!(out, "000eunpack ok\n0014ok refs/heads/a\n0000", "{err}");
    assert_eq!(err, "");
    assert_eq!(asked, 1);
    assert_eq!(
        w.git("caught.git", &["rev-parse", "refs/heads/a"]).trim(),
        head
    );
    w.fsck("caught.git").unwrap();
    // Still behind: the gate's words, not git's.
    let (out, err, asked) = run("behind.git", Lag::Refuses, "refs/heads/a");
    assert_eq!(
        out,
        "000eunpack ok\n0038ng refs/heads/a cluster: not applied: behind; retry\n0000"
    );
    assert_eq!(err, "error: cluster: not applied: behind; retry\n");
    assert_eq!(asked, 1);
    assert!(!w.refs("behind.git").contains("refs/heads/a"));
    // Not the gate's doing: git's refusal stands.
    let (out, err, asked) = run("missing.git", Lag::NotBehind, "refs/heads/a");
    assert_eq!(
        out,
        "000eunpack ok\n002eng refs/heads/a missing necessary objects\n0000"
    );
    assert!(err.contains(&head), "{err}");
    assert_eq!(asked, 1);
}

#[test]
fn a_thin_pack_missing_its_base_is_refused_in_the_commit_gates_words_when_it_says_so() {
    let w = World::new();
    w.work("src");
    let text: String = (0..400)
        .map(|i| format!("line {i} of the base\n"))
        .collect();
    let base = w.commit("src", "f", &text);
    let tip = w.commit("src", "f", &format!("{text}one more\n"));
    // A thin pack of the tip against the base, which the repository does not have.
    let pack = w.git_with_stdin(
        "src",
        &["pack-objects", "--revs", "--thin", "--stdout", "-q"],
        format!("{tip}\n^{base}\n").as_bytes(),
    );
    assert!(pack.status.success());
    let _counters = common::in_process_lock();
    let run = |repo: &str, lag: Lag| {
        w.bare(repo);
        let gate = Arc::new(Lagging {
            lag,
            src_packs: w.path("nowhere"),
            packs: w.path(repo).join("objects/pack"),
            asked: Default::default(),
        });
        let options = berth::receive::Options {
            stateless_rpc: true,
            commit_gate: Some(gate.clone()),
            ..Default::default()
        };
        let mut input = pkt(&format!("{ZERO} {tip} refs/heads/a\0 report-status"));
        input.extend(b"0000");
        input.extend(&pack.stdout);
        let (mut out, mut err) = (Vec::new(), Vec::new());
        berth::receive::run(
            w.path(repo).to_str().unwrap(),
            &options,
            &input[..],
            &mut out,
            &mut err,
        )
        .unwrap();
        let asked = gate.asked.load(std::sync::atomic::Ordering::SeqCst);
        (String::from_utf8(out).unwrap(), asked)
    };
    // The gate's doing: its words on the unpack line and the ref's.
    let (out, asked) = run("behind.git", Lag::Refuses);
    assert!(
        out.contains("unpack cluster: not applied: behind; retry\n")
            && out.contains("ng refs/heads/a cluster: not applied: behind; retry\n"),
        "{out}"
    );
    assert_eq!(asked, 1);
    // Not the gate's: git's.
    let (out, asked) = run("git.git", Lag::NotBehind);
    assert!(
        out.contains("unpack unpack-objects abnormal exit\n")
            && out.contains("ng refs/heads/a unpacker error\n"),
        "{out}"
    );
    assert_eq!(asked, 1);
}
