//! The proc-receive hook's pkt-line protocol (git's `run_proc_receive_hook` and
//! `read_proc_receive_report`), apart from the process that speaks it: version negotiation, the
//! commands and push options sent, and the hook's report (`ok <ref>`, `ng <ref> [<reason>]`,
//! `option refname|old-oid|new-oid|forced-update|fall-through`).
//!
//! [`converse`] talks to a [`Peer`]: the session's is the running hook
//! ([`crate::hooks::Conversation`]), the fuzz target's ([`Replay`]) is the bytes a hook wrote.

use std::io;

use gix_hash::ObjectId;
use gix_object::bstr::BString;

use crate::hooks::{self, HookPacket};
use crate::protocol::report::{Reason, Rewrite};
use crate::protocol::request::Command;

/// A command's relation to the proc-receive hook.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proc {
    /// Not selected (or handed back with `option fall-through`): berth updates the ref.
    No,
    /// Selected by `receive.procReceiveRefs`.
    Scheduled,
    /// Selected, and the hook reported on it.
    Returned,
}

/// One command of the push as the conversation sees and changes it.
#[derive(Debug, Clone)]
pub struct Slot<'a> {
    /// The command as the client sent it.
    pub command: &'a Command,
    /// Handled through another command: not sent to the hook.
    pub skip_update: bool,
    /// Whether the hook handles it; the report may change it.
    pub proc: Proc,
    /// The command's error, if any; `ng` and a missing report set it.
    pub error: Option<Reason>,
    /// What the hook reported it did (`option` lines after `ok`).
    pub rewrites: Vec<Rewrite>,
}

impl Slot<'_> {
    /// Still to be decided and written (git's `should_process_cmd`).
    fn should_process(&self) -> bool {
        self.error.is_none() && !self.skip_update
    }
}

/// What went wrong while talking to the proc-receive hook, in git's words
/// (`run_proc_receive_hook` / `read_proc_receive_report`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Problem {
    /// The hook did not answer the version negotiation.
    #[error("fail to negotiate version with proc-receive hook")]
    Negotiation,
    /// The hook asked for a version git does not speak.
    #[error("proc-receive version '{0}' is not supported")]
    Version(u32),
    /// The commands could not be written to the hook.
    #[error("fail to write commands to proc-receive hook")]
    WriteCommands,
    /// The push options could not be written to the hook.
    #[error("fail to write push-options to proc-receive hook")]
    WritePushOptions,
    /// The hook ended without reporting anything.
    #[error("proc-receive exited abnormally")]
    ExitedAbnormally,
    /// A report line without a ref name.
    #[error("proc-receive reported incomplete status line: '{0}'")]
    IncompleteStatus(String),
    /// An `option` line before any `ok`/`ng`.
    #[error("proc-receive reported 'option' without a matching 'ok/ng' directive")]
    OptionWithoutStatus,
    /// A status other than `ok`, `ng` or `option`.
    #[error("proc-receive reported bad status '{status}' on ref '{refname}'")]
    BadStatus {
        /// The status word.
        status: String,
        /// The ref.
        refname: String,
    },
    /// A status on a ref the push did not have.
    #[error("proc-receive reported status on unknown ref: {0}")]
    UnknownRef(String),
    /// A status on a ref the hook was not given.
    #[error("proc-receive reported status on unexpected ref: {0}")]
    UnexpectedRef(String),
}

/// How the conversation with the proc-receive hook went.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reported {
    /// Every command it was given was reported `ok` and nothing went wrong.
    pub ok: bool,
    /// What went wrong, in order.
    pub problems: Vec<Problem>,
}

impl Reported {
    fn failed(problem: Problem) -> Self {
        Reported {
            ok: false,
            problems: vec![problem],
        }
    }

    /// The problems as git prints them: one `error:` message, a line each.
    pub fn message(&self) -> Option<String> {
        (!self.problems.is_empty()).then(|| {
            self.problems
                .iter()
                .map(Problem::to_string)
                .collect::<Vec<_>>()
                .join("\n")
        })
    }
}

/// The other end of the conversation.
pub trait Peer {
    /// Write bytes to the hook's stdin. Fails if the hook stopped reading.
    fn send(&mut self, data: &[u8]) -> io::Result<()>;
    /// The hook's next packet.
    fn read_packet(&mut self) -> io::Result<HookPacket>;
}

/// A running proc-receive hook, its stderr relayed to `sink`.
pub struct Running<'c, 's> {
    /// The hook.
    pub conversation: &'c mut hooks::Conversation,
    /// Where its stderr (and keepalive ticks) go.
    pub sink: &'s mut dyn FnMut(hooks::Output<'_>) -> io::Result<()>,
}

impl Peer for Running<'_, '_> {
    fn send(&mut self, data: &[u8]) -> io::Result<()> {
        self.conversation.send(data, self.sink)
    }
    fn read_packet(&mut self) -> io::Result<HookPacket> {
        self.conversation.read_packet(self.sink)
    }
}

/// The output of a hook given as bytes, framed as [`hooks::Conversation`] frames the hook's
/// stdout; what is sent to it is dropped (after `sends` successful sends, a send fails, as to a
/// hook that stopped reading).
#[derive(Debug, Clone)]
pub struct Replay<'a> {
    output: &'a [u8],
    sends: Option<usize>,
}

impl<'a> Replay<'a> {
    /// A hook that wrote `output`, and accepts `sends` writes (`None`: any number).
    pub fn new(output: &'a [u8], sends: Option<usize>) -> Self {
        Replay { output, sends }
    }
}

impl Peer for Replay<'_> {
    fn send(&mut self, _data: &[u8]) -> io::Result<()> {
        match &mut self.sends {
            Some(0) => Err(io::ErrorKind::BrokenPipe.into()),
            Some(n) => {
                *n -= 1;
                Ok(())
            }
            None => Ok(()),
        }
    }
    fn read_packet(&mut self) -> io::Result<HookPacket> {
        match hooks::frame(self.output) {
            hooks::Framed::Packet(packet, used) => {
                self.output = self.output.get(used..).unwrap_or_default();
                Ok(packet)
            }
            hooks::Framed::Bad(message) => {
                self.output = &[];
                Err(io::Error::new(io::ErrorKind::InvalidData, message))
            }
            hooks::Framed::Incomplete => {
                self.output = &[];
                Ok(HookPacket::Eof)
            }
        }
    }
}

fn send_line(peer: &mut dyn Peer, line: &[u8]) -> io::Result<()> {
    let mut pkt = Vec::with_capacity(line.len() + 4);
    crate::protocol::pktline::write_data(&mut pkt, line)?;
    peer.send(&pkt)
}

/// The proc-receive pkt-line protocol: version negotiation, the commands, the push options if
/// the hook wants them, then its report (git's `read_proc_receive_report`). Updates `slots`
/// from the report, and says whether all went well and what went wrong on the way.
pub fn converse(
    peer: &mut dyn Peer,
    slots: &mut [Slot<'_>],
    atomic: bool,
    push_options: bool,
    options: &[BString],
) -> io::Result<Reported> {
    let caps: Vec<&str> = [
        atomic.then_some("atomic"),
        push_options.then_some("push-options"),
    ]
    .into_iter()
    .flatten()
    .collect();
    let first = if caps.is_empty() {
        "version=1\n".to_owned()
    } else {
        format!("version=1\0{}\n", caps.join(" "))
    };
    let mut version = 0;
    let mut hook_push_options = false;
    let mut negotiated = send_line(peer, first.as_bytes())
        .and_then(|_| peer.send(b"0000"))
        .is_ok();
    while negotiated {
        match peer.read_packet()? {
            HookPacket::Data(line) => {
                if line.len() > 8 && line.starts_with(b"version=") {
                    let (v, features) = match line.iter().position(|&b| b == 0) {
                        Some(nul) => (&line[8..nul], Some(&line[nul + 1..])),
                        None => (&line[8..], None),
                    };
                    let digits: Vec<u8> =
                        v.iter().copied().take_while(u8::is_ascii_digit).collect();
                    version = std::str::from_utf8(&digits)
                        .ok()
                        .and_then(|d| d.parse().ok())
                        .unwrap_or(0);
                    hook_push_options = features
                        .is_some_and(|f| f.split(|&b| b == b' ').any(|w| w == b"push-options"));
                }
            }
            HookPacket::Flush => break,
            HookPacket::Eof => negotiated = false,
        }
    }
    if !negotiated {
        return Ok(Reported::failed(Problem::Negotiation));
    }
    if version > 1 {
        return Ok(Reported::failed(Problem::Version(version)));
    }
    let mut sent: io::Result<()> = Ok(());
    for s in slots
        .iter()
        .filter(|s| s.proc != Proc::No && s.should_process())
    {
        let c = s.command;
        let line = format!("{} {} {}", c.old, c.new, c.name);
        sent = send_line(peer, line.as_bytes());
        if sent.is_err() {
            break;
        }
    }
    if sent.and_then(|_| peer.send(b"0000")).is_err() {
        return Ok(Reported::failed(Problem::WriteCommands));
    }
    if hook_push_options {
        let mut sent: io::Result<()> = Ok(());
        for o in options {
            sent = send_line(peer, o);
            if sent.is_err() {
                break;
            }
        }
        if sent.and_then(|_| peer.send(b"0000")).is_err() {
            return Ok(Reported::failed(Problem::WritePushOptions));
        }
    }
    // The report.
    let mut ok = true;
    let mut problems = Vec::new();
    let mut hint: Option<usize> = None;
    let mut have_report = false;
    let mut new_report = false;
    let mut warned_option = false;
    let mut responses = 0;
    loop {
        let line = match peer.read_packet()? {
            HookPacket::Data(line) => line,
            HookPacket::Eof if responses == 0 => {
                return Ok(Reported::failed(Problem::ExitedAbnormally));
            }
            HookPacket::Eof | HookPacket::Flush => break,
        };
        responses += 1;
        let line = String::from_utf8_lossy(&line).into_owned();
        let Some((head, rest)) = line.split_once(' ') else {
            problems.push(Problem::IncompleteStatus(line.clone()));
            ok = false;
            continue;
        };
        if head == "option" {
            let Some(h) = hint.filter(|_| have_report || new_report) else {
                if !warned_option {
                    warned_option = true;
                    problems.push(Problem::OptionWithoutStatus);
                }
                ok = false;
                continue;
            };
            let Some(slot) = slots.get_mut(h) else {
                continue;
            };
            if new_report {
                slot.rewrites.push(Rewrite::default());
                new_report = false;
                have_report = true;
            }
            let (key, val) = match rest.split_once(' ') {
                Some((k, v)) => (k, Some(v)),
                None => (rest, None),
            };
            // The ids are of the repository's object format, as the commands' (git's
            // get_oid_hex with the_hash_algo).
            let hex_len = slot.command.old.kind().len_in_hex();
            let parse = |v: Option<&str>| {
                v.and_then(|v| ObjectId::from_hex(v.get(..hex_len)?.as_bytes()).ok())
            };
            match key {
                "refname" => {
                    if let Some(r) = slot.rewrites.last_mut() {
                        r.refname = val.map(BString::from);
                    }
                }
                "old-oid" => {
                    if let (Some(r), Some(id)) = (slot.rewrites.last_mut(), parse(val)) {
                        r.old = Some(id);
                    }
                }
                "new-oid" => {
                    if let (Some(r), Some(id)) = (slot.rewrites.last_mut(), parse(val)) {
                        r.new = Some(id);
                    }
                }
                "forced-update" => {
                    if let Some(r) = slot.rewrites.last_mut() {
                        r.forced = true;
                    }
                }
                "fall-through" => slot.proc = Proc::No,
                _ => {}
            }
            continue;
        }
        have_report = false;
        new_report = false;
        let (refname, reason) = match rest.split_once(' ') {
            Some((r, reason)) => (r, Some(reason)),
            None => (rest, None),
        };
        if head != "ok" && head != "ng" {
            problems.push(Problem::BadStatus {
                status: head.to_owned(),
                refname: refname.to_owned(),
            });
            ok = false;
            continue;
        }
        let find = |from: usize| {
            (from..slots.len()).find(|&i| slots[i].command.name == refname.as_bytes())
        };
        hint = hint.and_then(find).or_else(|| find(0));
        let Some(slot) = hint.and_then(|h| slots.get_mut(h)) else {
            problems.push(Problem::UnknownRef(refname.to_owned()));
            ok = false;
            continue;
        };
        if slot.proc == Proc::No {
            problems.push(Problem::UnexpectedRef(refname.to_owned()));
            ok = false;
            continue;
        }
        slot.proc = Proc::Returned;
        if head == "ng" {
            slot.error = Some(Reason::ProcReceive(
                reason.map_or_else(|| "failed".to_owned(), str::to_owned),
            ));
            ok = false;
            continue;
        }
        new_report = true;
    }
    for s in slots.iter_mut() {
        if s.proc == Proc::Scheduled && s.error.is_none() {
            s.error = Some(Reason::ProcReceiveNoReport);
            ok = false;
        }
    }
    Ok(Reported { ok, problems })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pkt(s: &str) -> Vec<u8> {
        let mut out = Vec::new();
        crate::protocol::pktline::write_data(&mut out, s.as_bytes()).unwrap();
        out
    }

    const A: &str = "ce858e653cdbf70f7c1ae1f2a6c2a1a9d4b0e1e8";

    fn commands() -> Vec<Command> {
        [
            "refs/heads/main",
            "refs/for/main/topic",
            "refs/for/next/topic",
        ]
        .into_iter()
        .map(|name| Command {
            old: gix_hash::Kind::Sha1.null(),
            new: ObjectId::from_hex(A.as_bytes()).unwrap(),
            name: name.into(),
        })
        .collect()
    }

    fn run<'a>(output: &[u8], commands: &'a [Command]) -> (bool, Vec<Slot<'a>>, String) {
        let mut slots: Vec<Slot<'_>> = commands
            .iter()
            .map(|c| Slot {
                command: c,
                skip_update: false,
                proc: if c.name.starts_with(b"refs/for/") {
                    Proc::Scheduled
                } else {
                    Proc::No
                },
                error: None,
                rewrites: Vec::new(),
            })
            .collect();
        let reported = converse(&mut Replay::new(output, None), &mut slots, false, true, &[])
            .unwrap();
        (reported.ok, slots, reported.message().unwrap_or_default())
    }

    #[test]
    fn report_with_rewrites_ng_and_fall_through() {
        let out = [
            pkt("version=1\0push-options\n"),
            b"0000".to_vec(),
            pkt("ok refs/for/main/topic\n"),
            pkt("option refname refs/pull/123/head\n"),
            pkt(&format!("option old-oid {A}\n")),
            pkt("option forced-update\n"),
            pkt("ok refs/for/main/topic\n"),
            pkt("ng refs/for/next/topic target branch not exist\n"),
            b"0000".to_vec(),
        ]
        .concat();
        let commands = commands();
        let (ok, slots, errmsg) = run(&out, &commands);
        assert!(!ok, "an ng makes the conversation fail");
        assert_eq!(errmsg, "");
        assert_eq!(slots[0].proc, Proc::No);
        assert_eq!(slots[1].proc, Proc::Returned);
        // A second `ok` without options adds no rewrite (as git's report list).
        assert_eq!(slots[1].rewrites.len(), 1);
        assert_eq!(
            slots[1].rewrites[0].refname,
            Some("refs/pull/123/head".into())
        );
        assert!(slots[1].rewrites[0].forced && slots[1].rewrites[0].old.is_some());
        assert_eq!(
            slots[2].error.as_ref().map(Reason::as_str),
            Some("target branch not exist")
        );

        let out = [
            pkt("version=1\n"),
            b"0000".to_vec(),
            pkt("option refname refs/x\n"),
            pkt("ok refs/heads/main\n"),
            pkt("ok refs/for/next/topic\n"),
            pkt("option fall-through\n"),
            b"0000".to_vec(),
        ]
        .concat();
        let (ok, slots, errmsg) = run(&out, &commands);
        assert!(!ok);
        assert_eq!(
            errmsg,
            "proc-receive reported 'option' without a matching 'ok/ng' directive\n\
             proc-receive reported status on unexpected ref: refs/heads/main"
        );
        assert_eq!(slots[2].proc, Proc::No, "fall-through hands the ref back");
        assert_eq!(slots[1].error, Some(Reason::ProcReceiveNoReport));
    }

    #[test]
    fn negotiation_failures() {
        let commands = commands();
        let (ok, _, errmsg) = run(&[pkt("version=2\n"), b"0000".to_vec()].concat(), &commands);
        assert!(!ok);
        assert_eq!(errmsg, "proc-receive version '2' is not supported");
        let (ok, _, errmsg) = run(&pkt("version=1\n"), &commands);
        assert!(!ok);
        assert_eq!(errmsg, "fail to negotiate version with proc-receive hook");
        let (ok, _, errmsg) = run(&[pkt("version=1\n"), b"0000".to_vec()].concat(), &commands);
        assert!(!ok);
        assert_eq!(errmsg, "proc-receive exited abnormally");
        assert_eq!(
            hooks::frame(b"0003ok"),
            hooks::Framed::Bad("protocol error: bad line length 3".into()),
            "length 3 is not a pkt-line"
        );
        assert_eq!(hooks::frame(b"000aok"), hooks::Framed::Incomplete);
        assert_eq!(
            hooks::frame(b"+00aok"),
            hooks::Framed::Bad("protocol error: bad line length character: +00a".into()),
            "only hex digits, as git's hex2chr"
        );
        assert_eq!(
            hooks::frame(b"fff1"),
            hooks::Framed::Bad("protocol error: bad line length 65521".into())
        );
    }
}
