//! In-process hooks for programs that embed berth: they run where the process hooks run, can
//! refuse with a message, and cost no process. Also: one muxer per session, and keepalives while
//! a hook is silent.

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
    w.bare("srv.git");
    w.git("srv.git", &["config", "receive.autogc", "false"]);
    w.work("src");
    let head = w.commit("src", "a", "1");
    w.git("src", &["push", "-q", "../srv.git", "main"]);

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
