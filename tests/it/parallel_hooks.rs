//! Parallel hooks as git master runs them (`hook.jobs`, `hook.<event>.jobs`,
//! `hook.<name>.parallel`; `hook.c`, `run_processes_parallel`), pushed to with the real git
//! client.
//!
//! The machine's git (2.47) has no parallel hooks, so these tests assert git master's behaviour
//! directly rather than differentially. Each scenario also runs against any receive-pack named
//! in `BERTH_TEST_MASTER_RECEIVE_PACK` (a `--receive-pack=` value, e.g.
//! `env GIT_EXEC_PATH=/tmp/gitbuild /tmp/gitbuild/git-receive-pack` for a git master build), so
//! that the same assertions check git master by hand.
//!
//! Concurrency is proven with sentinel files, as git's t1800 does: a *sentinel* hook marks
//! itself started, waits (up to 3 s) for the *detector* to have decided, then marks itself
//! done; the detector, listed after it, waits for the sentinel to start and says `parallel` if
//! the sentinel is not done yet, `serial` if it is. Run at once, both finish at once; run one
//! after the other, the sentinel's wait times out first.

use crate::common;
use common::{Push, World};

/// The receive-packs every scenario runs against: berth, and git master when named.
fn receive_packs() -> Vec<String> {
    let mut rps = vec![format!("'{}' receive-pack", common::berth().display())];
    if let Ok(master) = std::env::var("BERTH_TEST_MASTER_RECEIVE_PACK") {
        rps.push(master);
    }
    rps
}

/// `git push --porcelain` from `src` to `srv.git` through `receive_pack`.
fn push(w: &World, receive_pack: &str, args: &[&str]) -> Push {
    let url = w.path("srv.git");
    let rp = format!("--receive-pack={receive_pack}");
    let mut all = vec!["push", "--porcelain", rp.as_str(), url.to_str().unwrap()];
    all.extend_from_slice(args);
    Push::from_output(&w.git_out("src", &all), w.root())
}

/// A bare `srv.git` with `config` set, and a client `src` with `main` and `refs` more branches
/// at its one commit.
fn world(config: &[(&str, &str)], refs: usize) -> World {
    let w = World::new();
    w.bare("srv.git");
    for (k, v) in config {
        w.git("srv.git", &["config", "--add", k, v]);
    }
    w.work("src");
    let head = w.commit("src", "a", "1");
    w.create_refs("src", "refs/heads/b", refs, &head);
    w
}

/// The sentinel's shell command; `$tag` names its files (in the world's root, `..` from the
/// hook's working directory, the git directory). It records how many lines of stdin it got.
fn sentinel(tag: &str) -> String {
    format!(
        "touch ../{tag}.started; wc -l <&0 >../{tag}.sentinel-lines; i=0; \
         while [ ! -f ../{tag}.decided ] && [ $i -lt 30 ]; do sleep 0.1; i=$((i+1)); done; \
         touch ../{tag}.done; echo sentinel {tag} done"
    )
}

/// The detector's shell command: writes `parallel`, `serial` or `timeout` to `<tag>.order`.
fn detector(tag: &str) -> String {
    format!(
        "wc -l <&0 >../{tag}.detector-lines; i=0; \
         while [ ! -f ../{tag}.started ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done; \
         if [ -f ../{tag}.done ]; then echo serial; elif [ -f ../{tag}.started ]; \
         then echo parallel; else echo timeout; fi >../{tag}.order; touch ../{tag}.decided; \
         echo detector {tag} done"
    )
}

fn read(w: &World, file: &str) -> String {
    std::fs::read_to_string(w.path(file))
        .unwrap_or_else(|e| panic!("{file}: {e}"))
        .trim()
        .to_owned()
}

/// Configuration for a sentinel hook and a detector hook on `event`, with `parallel` for each.
fn pair(event: &str, parallel: (bool, bool)) -> Vec<(String, String)> {
    let mut c = vec![
        ("hook.sentinel.event".into(), event.into()),
        ("hook.sentinel.command".into(), sentinel("s")),
        ("hook.detector.event".into(), event.into()),
        ("hook.detector.command".into(), detector("s")),
    ];
    if parallel.0 {
        c.push(("hook.sentinel.parallel".into(), "true".into()));
    }
    if parallel.1 {
        c.push(("hook.detector.parallel".into(), "true".into()));
    }
    c
}

/// Push `main` and `refs` branches to a server configured with `config` and a sentinel and a
/// detector for pre-receive (parallel as `parallel` says), through every receive-pack: how the
/// detector found them (the same for each), and the pushes.
fn detect(config: &[(&str, &str)], parallel: (bool, bool), refs: usize) -> (String, Vec<Push>) {
    let mut seen = Vec::new();
    let mut pushes = Vec::new();
    for rp in receive_packs() {
        let hooks = pair("pre-receive", parallel);
        let mut all: Vec<(&str, &str)> = config.to_vec();
        all.extend(hooks.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        let w = world(&all, refs);
        let p = push(&w, &rp, &["refs/heads/*:refs/heads/*"]);
        assert!(p.success, "{rp}: {p:#?}");
        // Each hook got the whole stdin: every command, one line each.
        assert_eq!(read(&w, "s.sentinel-lines"), (refs + 1).to_string(), "{rp}");
        assert_eq!(read(&w, "s.detector-lines"), (refs + 1).to_string(), "{rp}");
        seen.push(read(&w, "s.order"));
        pushes.push(p);
    }
    assert!(seen.windows(2).all(|s| s[0] == s[1]), "{seen:?}");
    (seen.swap_remove(0), pushes)
}

/// `hook.jobs=2` and every configured hook `parallel`: the two run at once, each with the whole
/// stdin (900 refs: more than a pipe holds), and the client sees each one's output whole, the
/// output owner's (the first hook's) first.
#[test]
fn hooks_of_an_event_run_at_once_with_hook_jobs_and_parallel() {
    let (order, pushes) = detect(&[("hook.jobs", "2")], (true, true), 900);
    assert_eq!(order, "parallel");
    for p in pushes {
        assert_eq!(
            p.remote_lines(),
            ["remote: sentinel s done", "remote: detector s done"]
        );
    }
}

/// One configured hook without `hook.<name>.parallel` makes the whole event serial, whatever
/// `hook.jobs` says.
#[test]
fn one_hook_without_parallel_keeps_the_event_serial() {
    let (order, _) = detect(&[("hook.jobs", "2")], (true, false), 0);
    assert_eq!(order, "serial");
}

/// So does a disabled configured hook without `parallel`, even one without a command (which
/// git warns about): git master's `get_hook_jobs` looks at every configured hook of the event,
/// enabled or not.
#[test]
fn a_disabled_hook_without_parallel_keeps_the_event_serial() {
    let config = [
        ("hook.jobs", "2"),
        ("hook.off.event", "pre-receive"),
        ("hook.off.command", "echo off"),
        ("hook.off.enabled", "false"),
    ];
    let (order, pushes) = detect(&config, (true, true), 0);
    assert_eq!(order, "serial");
    assert!(!pushes[0].stderr.contains("off"), "{:#?}", pushes[0]);
    let (order, pushes) = detect(&[config[0], config[1], config[3]], (true, true), 0);
    assert_eq!(order, "serial");
    for p in pushes {
        assert!(
            p.stderr
                .contains("warning: disabled hook 'off' has no command configured\n"),
            "{p:#?}"
        );
    }
}

/// Without `hook.jobs`, or with `hook.jobs=1`, hooks run one after the other.
#[test]
fn one_job_by_default_or_with_hook_jobs_1() {
    assert_eq!(detect(&[], (true, true), 0).0, "serial");
    assert_eq!(detect(&[("hook.jobs", "1")], (true, true), 0).0, "serial");
}

/// `hook.<event>.jobs` overrides `hook.jobs` for its event, both ways.
#[test]
fn hook_event_jobs_overrides_hook_jobs() {
    let config = [("hook.jobs", "1"), ("hook.pre-receive.jobs", "2")];
    assert_eq!(detect(&config, (true, true), 0).0, "parallel");
    let config = [("hook.jobs", "4"), ("hook.pre-receive.jobs", "1")];
    assert_eq!(detect(&config, (true, true), 0).0, "serial");
}

/// `hook.<event>.jobs=0` is ignored with git's warning on receive-pack's stderr (the client
/// shows it as is, not as a `remote:` line), and so is `hook.jobs=0`; the hooks then run one
/// after the other.
#[test]
fn zero_jobs_are_ignored_with_gits_warning() {
    let (order, pushes) = detect(
        &[("hook.jobs", "0"), ("hook.pre-receive.jobs", "0")],
        (true, true),
        0,
    );
    assert_eq!(order, "serial");
    for p in pushes {
        let warnings: Vec<&str> = p
            .stderr
            .lines()
            .filter(|l| l.starts_with("warning:"))
            .collect();
        assert_eq!(
            warnings,
            [
                "warning: hook.jobs must be a positive integer or -1, ignoring: '0'",
                "warning: hook.pre-receive.jobs must be a positive integer or -1, ignoring: '0'",
            ],
            "{p:#?}"
        );
    }
}

/// The number of online CPUs, as git's `online_cpus`.
fn online_cpus() -> usize {
    let out = std::process::Command::new("getconf")
        .arg("_NPROCESSORS_ONLN")
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

/// `-1` is the number of online CPUs, for `hook.jobs` and `hook.<event>.jobs`.
#[test]
fn minus_one_job_is_the_number_of_cpus() {
    let want = if online_cpus() > 1 {
        "parallel"
    } else {
        "serial"
    };
    assert_eq!(detect(&[("hook.jobs", "-1")], (true, true), 0).0, want);
    let config = [("hook.jobs", "1"), ("hook.pre-receive.jobs", "-1")];
    assert_eq!(detect(&config, (true, true), 0).0, want);
}

/// A hooks-directory hook needs no `parallel` flag: it runs at once with the configured ones.
/// (Here for post-receive, with the directory hook as the detector, listed last.)
#[test]
fn the_hooks_directory_hook_runs_at_once_without_a_flag() {
    for rp in receive_packs() {
        let w = world(
            &[
                ("hook.jobs", "2"),
                ("hook.sentinel.event", "post-receive"),
                ("hook.sentinel.command", &sentinel("s")),
                ("hook.sentinel.parallel", "true"),
            ],
            3,
        );
        let path = w.path("srv.git/hooks/post-receive");
        std::fs::write(&path, format!("#!/bin/sh\n{}\n", detector("s"))).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        let p = push(&w, &rp, &["refs/heads/*:refs/heads/*"]);
        assert!(p.success, "{p:#?}");
        assert_eq!(read(&w, "s.order"), "parallel", "{rp}");
        assert_eq!(read(&w, "s.detector-lines"), "4", "{rp}");
    }
}

/// The hooks of update (per ref, its arguments naming the ref), post-update and
/// reference-transaction (per state) run at once too: each invocation's sentinel and detector
/// are told apart by the hook's first argument.
#[test]
fn update_post_update_and_reference_transaction_hooks_run_at_once() {
    for rp in receive_packs() {
        let mut config = vec![("hook.jobs".to_owned(), "2".to_owned())];
        for event in ["update", "post-update", "reference-transaction"] {
            for (name, command) in [("sentinel", sentinel("s")), ("detector", detector("s"))] {
                // `$1`: the ref (update), the first updated ref (post-update), the state
                // (reference-transaction); each invocation has its own sentinel files.
                let command = command.replace("../s.", &format!("../{event}-${{1##*/}}."));
                let name = format!("{event}-{name}");
                config.push((format!("hook.{name}.event"), event.to_owned()));
                config.push((format!("hook.{name}.command"), command));
                config.push((format!("hook.{name}.parallel"), "true".to_owned()));
            }
        }
        let config: Vec<(&str, &str)> = config
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let w = world(&config, 1);
        let p = push(&w, &rp, &["refs/heads/*:refs/heads/*"]);
        assert!(p.success, "{p:#?}");
        for tag in [
            "update-main",
            "update-b00000",
            "post-update-b00000",
            "reference-transaction-preparing",
            "reference-transaction-prepared",
            "reference-transaction-committed",
        ] {
            assert_eq!(read(&w, &format!("{tag}.order")), "parallel", "{rp}: {tag}");
        }
    }
}

/// push-to-checkout always runs serially (git's `RUN_HOOKS_OPT_INIT_FORCE_SERIAL`), whatever
/// the configuration.
#[test]
fn push_to_checkout_always_runs_serially() {
    for rp in receive_packs() {
        let w = World::new();
        w.work("srv.git"); // a non-bare repository, its branch checked out
        w.commit("srv.git", "a", "0");
        for (k, v) in [
            ("receive.denyCurrentBranch", "updateInstead"),
            ("hook.jobs", "2"),
            ("hook.push-to-checkout.jobs", "2"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .chain(pair("push-to-checkout", (true, true)))
        {
            w.git("srv.git", &["config", &k, &v]);
        }
        w.git(".", &["clone", "-q", "srv.git", "src"]);
        w.commit("src", "a", "1");
        let p = push(&w, &rp, &["main"]);
        assert!(p.success, "{rp}: {p:#?}");
        // The hooks ran in the git directory, `srv.git/.git`: their files are in the worktree.
        assert_eq!(read(&w, "srv.git/s.order"), "serial", "{rp}");
    }
}

/// Wait (up to 10 s) until the process whose pid the file `$1` beside the git directory holds
/// is gone (reaped).
const GONE: &str = "gone() { i=0; while kill -0 \"$(cat \"../$1\")\" 2>/dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done; }";

/// Wait (up to 10 s) for the file `$1` beside the git directory.
const WAIT: &str =
    "w() { i=0; while [ ! -f \"../$1\" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done; }";

/// Three parallel pre-receive hooks, `commands` in that order, with `hook.jobs=3`: the client's
/// `remote:` lines.
fn three_hooks(commands: [String; 3]) -> Vec<Vec<String>> {
    receive_packs()
        .iter()
        .map(|rp| {
            let mut config = vec![("hook.jobs".to_owned(), "3".to_owned())];
            for (name, command) in ["a", "b", "c"].iter().zip(&commands) {
                config.push((format!("hook.{name}.event"), "pre-receive".into()));
                config.push((
                    format!("hook.{name}.command"),
                    format!("{WAIT}; {GONE}; {command}"),
                ));
                config.push((format!("hook.{name}.parallel"), "true".into()));
            }
            let config: Vec<(&str, &str)> = config
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            let w = world(&config, 0);
            let p = push(&w, rp, &["main"]);
            assert!(p.success, "{rp}: {p:#?}");
            p.remote_lines().iter().map(|l| l.to_string()).collect()
        })
        .collect()
}

/// Each hook's output reaches the client whole, in git's order: the output owner (the first
/// hook) as it goes, then the others in the order they finished; here a finishes last, c
/// first (b waits until c was reaped, so c's exit is seen first whatever the machine's
/// speed). Run one after the other, these hooks could not print this.
#[test]
fn output_is_whole_the_owners_first_then_in_the_order_hooks_finished() {
    for lines in three_hooks([
        "echo A1; w b.done; echo A2".into(),
        "w c.pid; gone c.pid; echo B1; echo B2; touch ../b.done".into(),
        "echo $$ > ../c.tmp; mv ../c.tmp ../c.pid; echo C1; echo C2".into(),
    ]) {
        assert_eq!(
            lines,
            ["A1", "A2", "C1", "C2", "B1", "B2"].map(|l| format!("remote: {l}"))
        );
    }
}

/// When the owner finishes, the next running hook (round robin) becomes the owner: its output
/// so far comes at once, and hooks that finish meanwhile wait for it. Here c finishes before b
/// but is shown after it. c finishes only once a was reaped (its pid gone): the owner passed
/// to b in that same step, whatever the machine's speed (had c finished before a's exit was
/// seen, c would rightly come before b, in git as in berth).
#[test]
fn output_owner_passes_to_the_next_running_hook() {
    for lines in three_hooks([
        "echo $$ > ../a.tmp; mv ../a.tmp ../a.pid; echo A".into(),
        "echo B0; w c.done; echo B1".into(),
        "w a.pid; gone a.pid; echo C; touch ../c.done".into(),
    ]) {
        assert_eq!(
            lines,
            ["A", "B0", "B1", "C"].map(|l| format!("remote: {l}"))
        );
    }
}

/// One failing pre-receive hook among parallel ones declines the push with git's message; the
/// others still ran, their output whole.
#[test]
fn a_failing_pre_receive_among_parallel_hooks_refuses_the_push() {
    for rp in receive_packs() {
        let w = world(
            &[
                ("hook.jobs", "2"),
                ("hook.a.event", "pre-receive"),
                ("hook.a.command", "cat >/dev/null; echo a refuses; exit 1"),
                ("hook.a.parallel", "true"),
                ("hook.b.event", "pre-receive"),
                ("hook.b.command", "cat >/dev/null; echo b accepts"),
                ("hook.b.parallel", "true"),
            ],
            2,
        );
        let p = push(&w, &rp, &["refs/heads/*:refs/heads/*"]);
        assert!(!p.success, "{rp}: {p:#?}");
        assert_eq!(
            p.remote_lines(),
            ["remote: a refuses", "remote: b accepts"],
            "{rp}"
        );
        for branch in ["main", "b00000", "b00001"] {
            assert!(
                p.stdout.contains(&format!(
                    "!\trefs/heads/{branch}:refs/heads/{branch}\t[remote rejected] (pre-receive hook declined)"
                )),
                "{rp}: {p:#?}"
            );
        }
        assert!(
            p.stderr.contains("error: failed to push some refs"),
            "{p:#?}"
        );
        assert_eq!(w.refs("srv.git"), "", "{rp}");
    }
}

/// A hook that cannot start (here a hooks-directory hook whose interpreter is missing) fails
/// its event, serial or parallel, with git's message on the client's band 2, where git master's
/// stderr goes while a receive hook runs; the other hooks still run. (git 2.47 writes the
/// message to receive-pack's stderr instead.)
#[test]
fn a_hook_that_cannot_start_fails_the_event_with_gits_message_on_band_2() {
    for jobs in ["1", "2"] {
        for rp in receive_packs() {
            let w = world(
                &[
                    ("hook.jobs", jobs),
                    ("hook.a.event", "pre-receive"),
                    ("hook.a.command", "echo a ran"),
                    ("hook.a.parallel", "true"),
                ],
                0,
            );
            let path = w.path("srv.git/hooks/pre-receive");
            std::fs::write(&path, "#!/nonexistent/sh\necho never\n").unwrap();
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
            let p = push(&w, &rp, &["main"]);
            assert!(!p.success, "{rp}: {p:#?}");
            // Serially, in list order; in parallel the start failure is told at once, while
            // the first hook's output waits for the poll loop.
            let ran = "remote: a ran";
            let fatal = "remote: fatal: cannot exec 'hooks/pre-receive': No such file or directory";
            assert_eq!(
                p.remote_lines(),
                if jobs == "1" {
                    [ran, fatal]
                } else {
                    [fatal, ran]
                },
                "{rp} jobs={jobs}"
            );
            assert!(
                p.stdout
                    .contains("[remote rejected] (pre-receive hook declined)"),
                "{rp}: {p:#?}"
            );
        }
    }
}
