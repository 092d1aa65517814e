//! The hooks of one event run at the same time, as git master's `run_hooks_opt` does when
//! `hook.jobs` (or `hook.<event>.jobs`) allows more than one and every configured hook of the
//! event has `hook.<name>.parallel` set: `run_processes_parallel` with `ungroup` off
//! (`run-command.c`).
//!
//! Up to `jobs` hooks run at once, started in list order into the first free slot; each gets
//! the whole stdin. Each hook's stdout and stderr share one pipe whose bytes are buffered per
//! hook. One hook, the *output owner* (the first slot at the start), has its output relayed as
//! it comes; the others' is kept until they exit. When a hook that is not the owner exits, its
//! output joins a buffer of finished output; when the owner exits, the rest of its output is
//! relayed, then that buffer, and the next slot with a running hook (round robin) becomes the
//! owner, its output so far relayed at once. So every hook's output reaches the sink whole,
//! never interleaved with another's. The event fails if any hook fails; a hook that cannot
//! start fails it and starts no further hook, as in git.
//!
//! Everything happens on the calling thread, in one `poll` loop over every running hook's
//! output and stdin: no thread per hook. While nothing has been relayed for the keepalive
//! interval, the sink is told ([`Output::Idle`]).

use std::io::{self, Read, Write};
use std::process::{Child, ChildStdin};
use std::time::Instant;

use super::process::{Hook, Invocation, Output, spawn_hook, spawn_piped};

/// Bytes of a hook's stdin written per `write`.
const STDIN_CHUNK: usize = 64 * 1024;

/// One running hook: git's `parallel_child`.
struct Running {
    child: Child,
    /// Its stdout and stderr; `None` once they are closed (git's `GIT_CP_WAIT_CLEANUP`).
    output: Option<io::PipeReader>,
    /// Its stdin while there is more to write.
    stdin: Option<ChildStdin>,
    written: usize,
    /// What it wrote that has not been relayed yet.
    buffered: Vec<u8>,
}

impl Running {
    fn working(&self) -> bool {
        self.output.is_some()
    }
}

/// The slots of `run_processes_parallel`. Dropped with hooks still running (the sink failed),
/// it kills and reaps them, so that none is left behind.
struct Slots(Vec<Option<Running>>);

impl Drop for Slots {
    fn drop(&mut self) {
        for r in self.0.iter_mut().filter_map(Option::take) {
            let mut child = r.child;
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Run `hooks` with up to `jobs` at once (see the module documentation). Returns whether every
/// hook exited with status 0.
pub(super) fn run(
    hooks: &[Hook],
    jobs: usize,
    inv: &Invocation<'_>,
    sink: &mut dyn FnMut(Output<'_>) -> io::Result<()>,
) -> io::Result<bool> {
    // Slots beyond the number of hooks would never be used: the lowest free one is taken.
    let n = jobs.min(hooks.len()).max(1);
    let mut slots = Slots((0..n).map(|_| None).collect());
    let input = inv.stdin.unwrap_or_default();
    let mut next = 0;
    let mut running = 0;
    let mut ok = true;
    let mut shutdown = false;
    let mut owner = 0;
    // Output of hooks that finished while another was the owner (git's `buffered_output`).
    let mut finished: Vec<u8> = Vec::new();
    let mut last_relayed = Instant::now();
    loop {
        while !shutdown && running < n && next < hooks.len() {
            let Some(slot) = slots.0.iter().position(Option::is_none) else {
                break;
            };
            match start(&hooks[next], inv, input) {
                Ok(r) => {
                    slots.0[slot] = Some(r);
                    running += 1;
                }
                Err(message) => {
                    sink(Output::Diagnostic(&message))?;
                    ok = false;
                    shutdown = true;
                }
            }
            next += 1;
        }
        if running == 0 {
            break;
        }
        let idle = pump(&mut slots.0, input, inv.keepalive, last_relayed)?;
        if idle {
            sink(Output::Idle)?;
            last_relayed = Instant::now();
        }
        // git's `pp_output`: the owner's output as it comes.
        if let Some(r) = slots.0[owner].as_mut().filter(|r| r.working()) {
            let bytes = std::mem::take(&mut r.buffered);
            relay(&bytes, sink, &mut last_relayed)?;
        }
        // git's `pp_collect_finished`, slot by slot.
        while let Some(i) = slots
            .0
            .iter()
            .position(|s| s.as_ref().is_some_and(|r| !r.working()))
        {
            let Some(mut r) = slots.0[i].take() else {
                break;
            };
            r.stdin = None;
            ok &= r.child.wait()?.success();
            running -= 1;
            if i != owner {
                finished.append(&mut r.buffered);
            } else {
                relay(&r.buffered, sink, &mut last_relayed)?;
                relay(&std::mem::take(&mut finished), sink, &mut last_relayed)?;
                let k = (0..n)
                    .find(|k| {
                        slots.0[(owner + k) % n]
                            .as_ref()
                            .is_some_and(Running::working)
                    })
                    .unwrap_or(n);
                owner = (owner + k) % n;
            }
        }
    }
    // git's `pp_cleanup`: what finished last, if its owner had already gone.
    relay(&finished, sink, &mut last_relayed)?;
    Ok(ok)
}

/// Relay `bytes` to `sink` in chunks of at most 128 bytes, as git's `copy_to_sideband` reads
/// them, noting when something was last relayed.
fn relay(
    bytes: &[u8],
    sink: &mut dyn FnMut(Output<'_>) -> io::Result<()>,
    last: &mut Instant,
) -> io::Result<()> {
    for chunk in bytes.chunks(128) {
        sink(Output::Data(chunk))?;
    }
    if !bytes.is_empty() {
        *last = Instant::now();
    }
    Ok(())
}

/// Start `hook` with its output on one pipe and `input` to be fed to its stdin; git's message
/// if it cannot start.
fn start(hook: &Hook, inv: &Invocation<'_>, input: &[u8]) -> Result<Running, String> {
    let (mut child, reader) = spawn_hook(hook, inv, spawn_piped)?;
    let stdin = child.stdin.take().filter(|_| !input.is_empty());
    if let Some(s) = &stdin {
        let nonblocking = rustix::fs::fcntl_getfl(s)
            .and_then(|flags| rustix::fs::fcntl_setfl(s, flags | rustix::fs::OFlags::NONBLOCK));
        if let Err(e) = nonblocking {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("error: cannot feed hook: {e}\n"));
        }
    }
    Ok(Running {
        child,
        output: Some(reader),
        stdin,
        written: 0,
        buffered: Vec::new(),
    })
}

/// One round of `poll` over every running hook (git's `pp_buffer_io`): feed the stdins that can
/// take more, buffer what the hooks wrote, note those whose output closed. Returns whether it
/// timed out with nothing relayed for the keepalive interval since `last_relayed`.
fn pump(
    slots: &mut [Option<Running>],
    input: &[u8],
    keepalive: Option<std::time::Duration>,
    last_relayed: Instant,
) -> io::Result<bool> {
    use rustix::event::{PollFd, PollFlags};
    // (slot, is stdin, ready)
    let mut ready: Vec<(usize, bool)> = Vec::with_capacity(slots.len() * 2);
    {
        let mut fds = Vec::with_capacity(slots.len() * 2);
        let mut which = Vec::with_capacity(slots.len() * 2);
        for (i, r) in slots.iter().enumerate() {
            let Some(r) = r.as_ref().filter(|r| r.working()) else {
                continue;
            };
            if let Some(out) = &r.output {
                fds.push(PollFd::new(out, PollFlags::IN));
                which.push((i, false));
            }
            if let Some(s) = &r.stdin {
                fds.push(PollFd::new(s, PollFlags::OUT));
                which.push((i, true));
            }
        }
        let timeout = keepalive.map(|k| {
            let left = k.saturating_sub(last_relayed.elapsed());
            rustix::event::Timespec {
                tv_sec: left.as_secs() as _,
                tv_nsec: left.subsec_nanos() as _,
            }
        });
        let n = match rustix::event::poll(&mut fds, timeout.as_ref()) {
            Ok(n) => n,
            Err(rustix::io::Errno::INTR) => return Ok(false),
            Err(e) => return Err(e.into()),
        };
        if n == 0 {
            return Ok(keepalive.is_some_and(|k| last_relayed.elapsed() >= k));
        }
        ready.extend(
            fds.iter()
                .zip(&which)
                .filter(|(fd, _)| !fd.revents().is_empty())
                .map(|(_, w)| *w),
        );
    }
    let mut buf = [0u8; 8192];
    for (i, is_stdin) in ready {
        let Some(r) = slots[i].as_mut() else {
            continue;
        };
        if is_stdin {
            if let Some(s) = r.stdin.as_mut() {
                let end = input.len().min(r.written + STDIN_CHUNK);
                match s.write(&input[r.written..end]) {
                    Ok(n) => r.written += n,
                    Err(e)
                        if matches!(
                            e.kind(),
                            io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                        ) => {}
                    // The hook does not read its input (EPIPE): fine, as with git.
                    Err(_) => r.written = input.len(),
                }
                if r.written >= input.len() {
                    r.stdin = None;
                }
            }
        } else if let Some(out) = r.output.as_mut() {
            match out.read(&mut buf) {
                Ok(0) => r.output = None,
                Ok(n) => r.buffered.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hook(name: &str, command: &str) -> Hook {
        Hook::Configured {
            name: name.into(),
            command: command.into(),
        }
    }

    /// Run `hooks` with `jobs` in a scratch directory, `stdin` on their input: whether all
    /// succeeded, what reached the sink, and how many keepalive ticks it was told of.
    fn run_in_dir(hooks: &[Hook], jobs: usize, stdin: &[u8]) -> (bool, String, usize) {
        let dir = tempfile::tempdir().unwrap();
        let inv = Invocation {
            git_dir: dir.path(),
            args: &[],
            stdin: Some(stdin),
            base_env: &[],
            env: &[],
            env_remove: &[],
            environment: &Default::default(),
            keepalive: Some(std::time::Duration::from_millis(300)),
            output: super::super::process::HookOutput::Relayed,
        };
        let mut out = Vec::new();
        let mut idle = 0;
        let ok = run(hooks, jobs, &inv, &mut |o| {
            match o {
                Output::Data(d) => {
                    assert!(d.len() <= 128);
                    out.extend_from_slice(d)
                }
                Output::Idle => idle += 1,
                Output::Diagnostic(m) => out.extend_from_slice(m.as_bytes()),
            }
            Ok(())
        })
        .unwrap();
        (ok, String::from_utf8(out).unwrap(), idle)
    }

    /// Wait (up to 10 s) for the file `$1` in the hooks' directory.
    const WAIT: &str =
        "w() { i=0; while [ ! -f \"$1\" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done; }";

    /// Wait (up to 10 s) until the process whose pid the file `$1` holds is gone (reaped).
    const GONE: &str = "gone() { i=0; while kill -0 \"$(cat \"$1\")\" 2>/dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done; }";

    /// git's order: the owner (the first slot) as it goes, then the others in the order they
    /// finished, when the owner exits before them...
    #[test]
    fn owner_first_then_the_others_in_the_order_they_finished() {
        let hooks = [
            hook("a", &format!("{WAIT}; echo A1; w b.done; echo A2")),
            // b finishes only once c was reaped: c's exit is seen first, whatever the speed.
            hook(
                "b",
                &format!("{WAIT}; {GONE}; w c.pid; gone c.pid; echo B1; echo B2; touch b.done"),
            ),
            hook("c", "echo $$ > c.tmp; mv c.tmp c.pid; echo C1; echo C2"),
        ];
        let (ok, out, _) = run_in_dir(&hooks, 3, b"");
        assert!(ok);
        assert_eq!(out, "A1\nA2\nC1\nC2\nB1\nB2\n");
    }

    /// ... and the next running slot, round robin, becomes the owner when the owner exits. c
    /// finishes only once a was reaped (its pid gone, [`GONE`]): the owner then passed to b in
    /// the same step, whatever the machine's speed (had c finished before a's exit was seen, c
    /// would rightly come before b, as in git).
    #[test]
    fn the_next_running_slot_becomes_the_owner() {
        let hooks = [
            hook("a", "echo $$ > a.tmp; mv a.tmp a.pid; echo A"),
            hook("b", &format!("{WAIT}; echo B0; w c.done; echo B1")),
            hook(
                "c",
                &format!("{WAIT}; {GONE}; w a.pid; gone a.pid; echo C; touch c.done"),
            ),
        ];
        let (ok, out, _) = run_in_dir(&hooks, 3, b"");
        assert!(ok);
        assert_eq!(out, "A\nB0\nB1\nC\n");
    }

    /// Every hook gets the whole stdin, more than a pipe holds, even one that reads none of it;
    /// one failure fails the event, and output longer than a packet stays whole.
    #[test]
    fn each_hook_gets_all_of_stdin_and_any_failure_fails() {
        let input: Vec<u8> = (0..5000)
            .flat_map(|i| format!("line {i:040}\n").into_bytes())
            .collect();
        let hooks = [
            hook("a", "echo a $(wc -l); exit 3"),
            hook("b", "echo b $(wc -c)"),
            hook("c", "printf '%0300d\\n' 7"),
            hook("d", "echo d $(wc -l)"),
        ];
        let (ok, out, _) = run_in_dir(&hooks, 2, &input);
        assert!(!ok);
        let mut lines: Vec<&str> = out.lines().collect();
        lines.sort();
        let mut want = vec![
            "a 5000".to_owned(),
            format!("b {}", input.len()),
            format!("{:0300}", 7),
            "d 5000".to_owned(),
        ];
        want.sort();
        assert_eq!(lines, want);
    }

    /// Silence is reported for keepalives; two hooks run at once (a ends only after b looked
    /// for its end; run one after the other, a would wait 10 s for b in vain and b find a
    /// done).
    #[test]
    fn silence_is_reported_and_hooks_overlap() {
        let hooks = [
            hook(
                "a",
                &format!("{WAIT}; touch a.started; w b.looked; sleep 0.7; touch a.done"),
            ),
            hook(
                "b",
                &format!("{WAIT}; w a.started; [ -f a.done ] || echo both; touch b.looked"),
            ),
        ];
        let (ok, out, idle) = run_in_dir(&hooks, 2, b"");
        assert!(ok);
        assert_eq!(out, "both\n");
        assert!(idle >= 1, "{idle}");
    }
}
