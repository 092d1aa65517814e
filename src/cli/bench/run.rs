//! One case, every receiver: the same many-ref push, byte for byte what `git push` sends, fed to
//! each receive-pack command in turn, verified after every run, and timed.
//!
//! It builds a source repository (K distinct commits, N refs pointing at them round-robin) and a
//! target repository (files or reftable), generates the request `git push` sends for N ref
//! creations (commands with the chosen capabilities, flush, the pack: the 32-byte empty pack when
//! the objects are already on the server, else the pack of the K commits), and runs each receiver
//! as `<command> --stateless-rpc <target>` on that input, restoring the target from a pristine
//! copy before every run. The receivers take turns (warm-up runs first, then timed run 1 of
//! each, run 2 of each, …), so a drift of the machine's speed does not favour one of them. After
//! each run, warm-up or timed, every ref must have its value and the report must say `ok` for
//! each; a receiver that fails this is reported as failed, with the reason, and not timed.
//!
//! The floor: when a C compiler (`cc`) is present and the push is one the floor program handles
//! (refs only: objects on the server, SHA-1, no atomic, no hook), `benches/floor.c` — the least
//! work such a push needs: parse, look the objects up in the pack index, write `packed-refs`
//! once, report — is built and run as one more receiver (`floor packed <target>`). The objects
//! of the target are then in a pack (the floor reads only a pack index), for every receiver alike.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::case::{Case, ObjectFormat, RefFormat, Report, Scenario};
use super::receiver::Receiver;

/// The floor program's source, kept with the benches.
const FLOOR_C: &str = include_str!("../../../benches/floor.c");

/// The program that measures a run's peak RSS, kept with the benches.
const PEAK_RSS_C: &str = include_str!("../../../benches/peak_rss.c");

/// The floor receiver's name in the results.
pub const FLOOR: &str = "floor";

/// Whether to build and run the floor program where it applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Floor {
    /// When the push is one it handles and `cc` is present.
    WhereItApplies,
    /// Never (`--no-floor`).
    Off,
}

/// How to run one case.
#[derive(Debug, Clone)]
pub struct Options<'a> {
    /// The push.
    pub case: &'a Case,
    /// Untimed (but verified) runs per receiver before the timed ones.
    pub warmup: usize,
    /// Timed runs per receiver.
    pub runs: usize,
    /// The receivers, the baseline first.
    pub receivers: &'a [Receiver],
    /// Where to build the repositories (a temporary directory under it; default `$TMPDIR`).
    pub workdir: Option<&'a Path>,
    /// Whether the floor runs.
    pub floor: Floor,
    /// Put before every progress line (`case 2/8: `).
    pub progress_prefix: &'a str,
}

/// Why a case could not be run at all.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file or directory of the setup.
    #[error("setting up: {what}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The error.
        source: std::io::Error,
    },
    /// A git command of the setup could not start or failed.
    #[error("setting up: {command} failed: {message}")]
    Git {
        /// The command.
        command: String,
        /// Its stderr, or why it did not start.
        message: String,
    },
    /// fast-import made another number of commits than asked.
    #[error("setting up: fast-import made {made} commits, not {asked}")]
    Commits {
        /// How many it made.
        made: usize,
        /// How many were asked for.
        asked: usize,
    },
}

/// Why a receiver's run does not count.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Failure {
    /// It could not be started or read.
    #[error("cannot run: {0}")]
    Spawn(String),
    /// It exited unsuccessfully.
    #[error("exit status {code}: {stderr}")]
    Exit {
        /// The status (-1 for a signal).
        code: i32,
        /// What it wrote on stderr.
        stderr: String,
    },
    /// The report's first line is not `unpack ok`.
    #[error("report does not start with 'unpack ok': {0:?}")]
    Unpack(Option<String>),
    /// The report rejects a ref.
    #[error("report: {0}")]
    Rejected(String),
    /// The report lacks an `ok` for a ref.
    #[error("report has {ok} ok lines for {refs} refs (no ok for {missing})")]
    MissingOk {
        /// How many `ok` lines.
        ok: usize,
        /// How many refs were pushed.
        refs: usize,
        /// The first ref without one.
        missing: String,
    },
    /// Listing the target's refs failed.
    #[error("listing the refs: {0}")]
    Listing(String),
    /// A ref is not there.
    #[error("ref {0} is missing")]
    RefMissing(String),
    /// A ref has another value.
    #[error("ref {name} is {actual}, expected {expected}")]
    RefValue {
        /// The ref.
        name: String,
        /// What it is.
        actual: String,
        /// What it should be.
        expected: String,
    },
    /// More refs than pushed.
    #[error("{actual} refs under refs/heads/b/, expected {expected}")]
    RefCount {
        /// How many there are.
        actual: usize,
        /// How many were pushed.
        expected: usize,
    },
}

/// One receiver's runs in one case.
#[derive(Debug, Clone)]
pub struct Measured {
    /// The receiver's name.
    pub name: String,
    /// Wall-clock time of each timed run (empty when it failed).
    pub times: Vec<Duration>,
    /// The peak resident set of each timed run, in KiB: `ru_maxrss` of the run's `sh`, which
    /// is the largest of it and the processes it and they waited for (the receiver, and git's
    /// index-pack or hooks under it), so the biggest single process, not their sum; measured
    /// by `benches/peak_rss.c` (empty without a C compiler).
    pub peak_rss_kib: Vec<u64>,
    /// Why it failed, if it did.
    pub failure: Option<Failure>,
}

/// What one case gave.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The push.
    pub case: Case,
    /// One per receiver, the baseline first, then the floor when it ran.
    pub receivers: Vec<Measured>,
    /// With an update hook: the time of spawning it N times in a row, once per timed run.
    pub hook_spawn: Vec<Duration>,
    /// The request's size in bytes (commands and pack), fed to every receiver.
    pub request_bytes: usize,
    /// Starting a program that does nothing with the request ([`START`]) as each receiver is
    /// started (the peak RSS program, `sh -c`, the request on a pipe), once per timed turn
    /// where the floor runs (nothing otherwise): the part of every receiver's time that is not
    /// its work.
    pub start: Vec<Duration>,
}

/// The program timed as [`Outcome::start`]: it reads the request and answers nothing.
pub const START: &str = "cat > /dev/null";

/// The empty pack `git push` sends when the server has every object already: the header of a
/// pack of no objects and its trailer, the header's hash in the repository's format.
pub fn empty_pack(hash: gix_hash::Kind) -> Vec<u8> {
    let mut pack = b"PACK\x00\x00\x00\x02\x00\x00\x00\x00".to_vec();
    let mut hasher = gix_hash::hasher(hash);
    hasher.update(&pack);
    if let Ok(id) = hasher.try_finalize() {
        pack.extend_from_slice(id.as_bytes());
    }
    pack
}

/// A git command with the benchmark's fixed environment.
fn git(dir: &Path) -> Command {
    let mut c = Command::new("git");
    c.current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "berth bench")
        .env("GIT_AUTHOR_EMAIL", "bench@berth")
        .env("GIT_COMMITTER_NAME", "berth bench")
        .env("GIT_COMMITTER_EMAIL", "bench@berth")
        .env("GIT_AUTHOR_DATE", "1700000000 +0000")
        .env("GIT_COMMITTER_DATE", "1700000000 +0000");
    c
}

fn run(mut c: Command, stdin: Option<&[u8]>) -> Result<Vec<u8>, Error> {
    let command = format!("{c:?}");
    let failed = |message: String| Error::Git {
        command: command.clone(),
        message,
    };
    c.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut child = c.spawn().map_err(|e| failed(e.to_string()))?;
    let writer = stdin.map(|input| {
        let mut pipe = child.stdin.take();
        let input = input.to_vec();
        std::thread::spawn(move || {
            if let Some(p) = pipe.as_mut() {
                let _ = p.write_all(&input);
            }
        })
    });
    let out = child
        .wait_with_output()
        .map_err(|e| failed(e.to_string()))?;
    if let Some(w) = writer {
        let _ = w.join();
    }
    if !out.status.success() {
        return Err(failed(
            String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        ));
    }
    Ok(out.stdout)
}

fn copy_dir(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for e in std::fs::read_dir(from)? {
        let e = e?;
        let t = e.file_type()?;
        let dest = to.join(e.file_name());
        if t.is_dir() {
            copy_dir(&e.path(), &dest)?;
        } else if t.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(e.path())?, &dest)?;
        } else {
            std::fs::copy(e.path(), &dest)?;
        }
    }
    Ok(())
}

/// The repositories and the request of one case.
struct Setup {
    _tmp: tempfile::TempDir,
    pristine: PathBuf,
    target: PathBuf,
    /// Shared with each run's writer thread: a copy made per run was in every receiver's time
    /// (a million refs: 101 MiB copied, about 60 ms).
    input: std::sync::Arc<[u8]>,
    /// `ref name → value` every run must leave.
    expected: Vec<(String, String)>,
    hook: Option<PathBuf>,
    /// The built floor program, when it runs.
    floor: Option<PathBuf>,
    /// The built peak RSS program, when there is a C compiler.
    peak_rss: Option<PathBuf>,
}

/// Whether the floor program handles this push: refs only, SHA-1, not atomic, no hook.
pub fn floor_handles(c: &Case) -> bool {
    c.objects == Scenario::Server
        && c.object_format == ObjectFormat::Sha1
        && !c.atomic.on()
        && !c.update_hook.on()
}

/// Build the program `name` from `source` in `dir` with `cc -O2`; `None` (with a note)
/// without a compiler.
fn build_c(dir: &Path, name: &str, source: &str, progress: &mut dyn Write) -> Option<PathBuf> {
    let src = dir.join(format!("{name}.c"));
    let bin = dir.join(name);
    if let Err(e) = std::fs::write(&src, source) {
        let _ = writeln!(progress, "bench: {name} not built: {e}");
        return None;
    }
    match Command::new("cc")
        .args(["-O2", "-o"])
        .arg(&bin)
        .arg(&src)
        .stdin(Stdio::null())
        .output()
    {
        Ok(out) if out.status.success() => Some(bin),
        Ok(out) => {
            let _ = writeln!(
                progress,
                "bench: {name} not built: cc: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
            None
        }
        Err(e) => {
            let _ = writeln!(progress, "bench: {name} not built: no C compiler (cc: {e})");
            None
        }
    }
}

fn setup(o: &Options, progress: &mut dyn Write) -> Result<Setup, Error> {
    let c = o.case;
    let tmp = match o.workdir {
        Some(d) => tempfile::Builder::new()
            .prefix("berth-bench-")
            .tempdir_in(d),
        None => tempfile::Builder::new().prefix("berth-bench-").tempdir(),
    }
    .map_err(|source| Error::Io {
        what: "temporary directory",
        source,
    })?;
    let root = tmp.path().to_owned();
    let src = root.join("src");
    let pristine = root.join("pristine.git");
    let target = root.join("target.git");
    let _ = writeln!(
        progress,
        "bench: {}building {} commits",
        o.progress_prefix, c.commits
    );
    run(
        {
            let mut g = git(&root);
            g.args(["init", "-q", "--bare", "src"]);
            g.arg(format!("--object-format={}", c.object_format.name()));
            g
        },
        None,
    )?;
    // K commits in a line, made by fast-import (distinct messages, empty trees).
    let mut stream = String::with_capacity(c.commits * 120);
    for i in 1..=c.commits {
        let _ = write!(
            stream,
            "commit refs/heads/main\nmark :{i}\ncommitter berth bench <bench@berth> 1700000000 +0000\ndata <<EOF\ncommit {i}\nEOF\n"
        );
        if i > 1 {
            let _ = writeln!(stream, "from :{}", i - 1);
        }
        stream.push('\n');
    }
    let _ = writeln!(stream, "done");
    run(
        {
            let mut g = git(&src);
            g.args(["fast-import", "--quiet", "--done", "--export-marks=marks"]);
            g
        },
        Some(stream.as_bytes()),
    )?;
    let marks = std::fs::read_to_string(src.join("marks")).map_err(|source| Error::Io {
        what: "fast-import marks",
        source,
    })?;
    let mut commits: Vec<(usize, String)> = marks
        .lines()
        .filter_map(|l| {
            let (m, oid) = l.split_once(' ')?;
            Some((m.strip_prefix(':')?.parse().ok()?, oid.to_owned()))
        })
        .collect();
    commits.sort();
    let commits: Vec<String> = commits.into_iter().map(|(_, o)| o).collect();
    if commits.len() != c.commits {
        return Err(Error::Commits {
            made: commits.len(),
            asked: c.commits,
        });
    }

    let mut init = git(&root);
    init.args(["init", "-q", "--bare"]);
    init.arg(format!("--object-format={}", c.object_format.name()));
    if c.ref_format == RefFormat::Reftable {
        init.arg("--ref-format=reftable");
    }
    init.arg("pristine.git");
    run(init, None)?;
    let pack = match c.objects {
        Scenario::Server => {
            let _ = writeln!(
                progress,
                "bench: {}pushing the commits to the target",
                o.progress_prefix
            );
            let mut g = git(&src);
            g.args(["push", "-q", pristine.to_str().unwrap_or_default(), "main"]);
            run(g, None)?;
            empty_pack(c.object_format.kind())
        }
        Scenario::Pack => {
            let mut g = git(&src);
            g.args(["pack-objects", "--stdout", "--revs", "-q"]);
            run(g, Some(b"refs/heads/main\n"))?
        }
    };
    let floor = if o.floor == Floor::WhereItApplies && floor_handles(c) {
        build_c(&root, "floor", FLOOR_C, progress)
    } else {
        None
    };
    let peak_rss = build_c(&root, "peak_rss", PEAK_RSS_C, progress);
    if floor.is_some() {
        // The floor looks objects up in a pack index only.
        let mut g = git(&pristine);
        g.args(["repack", "-adq"]);
        run(g, None)?;
    }
    let hook = if c.update_hook.on() {
        let h = pristine.join("hooks/update");
        std::fs::create_dir_all(pristine.join("hooks"))
            .and_then(|_| std::fs::write(&h, "#!/bin/sh\nexit 0\n"))
            .and_then(|_| {
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(&h, std::fs::Permissions::from_mode(0o755))
            })
            .map_err(|source| Error::Io {
                what: "update hook",
                source,
            })?;
        Some(h)
    } else {
        None
    };

    // The request, as git push writes it.
    let zero = "0".repeat(c.object_format.kind().len_in_hex());
    let mut caps = String::from(match c.report {
        Report::V1 => "report-status",
        Report::V2 => "report-status-v2",
    });
    if c.sideband.on() {
        caps.push_str(" side-band-64k");
    }
    caps.push_str(" quiet");
    if c.atomic.on() {
        caps.push_str(" atomic");
    }
    caps.push_str(" object-format=");
    caps.push_str(c.object_format.name());
    caps.push_str(" agent=git/2.47.3");
    let (input, expected) = request(&commits, c.refs, &caps, &zero, &pack);
    Ok(Setup {
        _tmp: tmp,
        pristine,
        target,
        input: input.into(),
        expected,
        hook,
        floor,
        peak_rss,
    })
}

/// The request `git push` sends to create `refs/heads/b/<i, 7 digits>` for each i < `refs` at
/// `commits[i mod K]`: the commands (`caps` after the first; `zero` is the null id), the flush
/// and `pack`. Also `ref name → value`, what the push must leave.
pub fn request(
    commits: &[String],
    refs: usize,
    caps: &str,
    zero: &str,
    pack: &[u8],
) -> (Vec<u8>, Vec<(String, String)>) {
    let mut input = Vec::with_capacity(refs * 110 + pack.len());
    let mut expected = Vec::with_capacity(refs);
    for i in 0..refs {
        let name = format!("refs/heads/b/{i:07}");
        let oid = &commits[i % commits.len()];
        let line = if i == 0 {
            format!("{zero} {oid} {name}\0 {caps}")
        } else {
            format!("{zero} {oid} {name}")
        };
        let _ = write!(input, "{:04x}{line}", line.len() + 4);
        expected.push((name, oid.clone()));
    }
    input.extend_from_slice(b"0000");
    input.extend_from_slice(pack);
    (input, expected)
}

/// The payload of the pkt-lines in `data` (stops at the end or a malformed length).
pub fn pkt_lines(data: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos + 4 <= data.len() {
        let Some(len) = std::str::from_utf8(&data[pos..pos + 4])
            .ok()
            .and_then(|h| usize::from_str_radix(h, 16).ok())
        else {
            break;
        };
        if len < 4 {
            pos += 4;
            continue;
        }
        if pos + len > data.len() {
            break;
        }
        out.push(&data[pos + 4..pos + len]);
        pos += len;
    }
    out
}

/// What a run's refs are checked against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Check {
    /// The report and the target's refs.
    ReportAndRefs,
    /// The report only (the floor on reftable writes packed-refs, not tables).
    ReportOnly,
    /// Nothing: [`START`], which answers nothing.
    Nothing,
}

/// Check one run: the report says `unpack ok` and `ok` for every ref, and the target holds
/// exactly the expected values.
fn verify(setup: &Setup, sideband: bool, check: Check, stdout: &[u8]) -> Result<(), Failure> {
    if let Check::Nothing = check {
        return Ok(());
    }
    let report: Vec<u8> = if sideband {
        pkt_lines(stdout)
            .into_iter()
            .filter(|p| p.first() == Some(&1))
            .flat_map(|p| p[1..].to_vec())
            .collect()
    } else {
        stdout.to_vec()
    };
    let lines = pkt_lines(&report);
    let text = |l: &[u8]| String::from_utf8_lossy(l).trim_end().to_owned();
    if lines.first().map(|l| text(l)) != Some("unpack ok".to_owned()) {
        return Err(Failure::Unpack(lines.first().map(|l| text(l))));
    }
    let mut ok = std::collections::HashSet::new();
    for l in &lines[1..] {
        let t = text(l);
        if let Some(name) = t.strip_prefix("ok ") {
            ok.insert(name.to_owned());
        } else if t.starts_with("ng ") {
            return Err(Failure::Rejected(t));
        }
    }
    if let Some((missing, _)) = setup.expected.iter().find(|(n, _)| !ok.contains(n)) {
        return Err(Failure::MissingOk {
            ok: ok.len(),
            refs: setup.expected.len(),
            missing: missing.clone(),
        });
    }
    if check == Check::ReportOnly {
        return Ok(());
    }
    let mut c = git(&setup.target);
    c.args([
        "for-each-ref",
        "--format=%(refname) %(objectname)",
        "refs/heads/b/",
    ]);
    let listed = run(c, None).map_err(|e| Failure::Listing(e.to_string()))?;
    let listed = String::from_utf8_lossy(&listed);
    let actual: HashMap<&str, &str> = listed.lines().filter_map(|l| l.split_once(' ')).collect();
    for (name, oid) in &setup.expected {
        match actual.get(name.as_str()) {
            None => return Err(Failure::RefMissing(name.clone())),
            Some(v) if v != oid => {
                return Err(Failure::RefValue {
                    name: name.clone(),
                    actual: (*v).to_owned(),
                    expected: oid.clone(),
                });
            }
            _ => {}
        }
    }
    if actual.len() != setup.expected.len() {
        return Err(Failure::RefCount {
            actual: actual.len(),
            expected: setup.expected.len(),
        });
    }
    Ok(())
}

/// Spawn the update hook once per ref, as a receiver would, and time it.
fn spawn_hook_n_times(hook: &Path, setup: &Setup, c: &Case) -> Duration {
    let start = Instant::now();
    let zero = "0".repeat(c.object_format.kind().len_in_hex());
    for (name, oid) in &setup.expected {
        let _ = Command::new(hook)
            .args([name.as_str(), zero.as_str(), oid.as_str()])
            .current_dir(&setup.pristine)
            .stdin(Stdio::null())
            .status();
    }
    start.elapsed()
}

/// One run of `script` on the request; its time and peak RSS (KiB, when measured), or why it
/// does not count.
fn run_once(
    setup: &Setup,
    script: &str,
    sideband: bool,
    check: Check,
) -> Result<(Duration, Option<u64>), Failure> {
    let _ = std::fs::remove_dir_all(&setup.target);
    copy_dir(&setup.pristine, &setup.target)
        .map_err(|e| Failure::Spawn(format!("resetting the target: {e}")))?;
    // Through the peak RSS program when it was built (see benches/peak_rss.c for why not
    // wait4 here); it is in the time, as `sh` is, alike for every receiver.
    let rss_file = setup
        .peak_rss
        .as_ref()
        .map(|_| setup.target.with_extension("rss"));
    let mut c = match (&setup.peak_rss, &rss_file) {
        (Some(helper), Some(out)) => {
            let mut c = Command::new(helper);
            c.arg(out).arg("sh");
            c
        }
        _ => Command::new("sh"),
    };
    c.args(["-c", script, "sh"])
        .arg(&setup.target)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let start = Instant::now();
    let result = c.spawn().and_then(|mut child| {
        let mut stdin = child.stdin.take();
        let input = std::sync::Arc::clone(&setup.input);
        let writer = std::thread::spawn(move || {
            if let Some(s) = stdin.as_mut() {
                let _ = s.write_all(&input);
            }
        });
        let mut stderr = Vec::new();
        let mut err = child.stderr.take();
        let reader = std::thread::spawn(move || {
            if let Some(e) = err.as_mut() {
                let _ = e.read_to_end(&mut stderr);
            }
            stderr
        });
        // Room for the report up front (`ok <name>` a ref) rather than grown, each growth a
        // copy made while the receiver may wait on a full pipe (not measured on its own).
        let mut stdout = Vec::with_capacity(setup.expected.len() * 48 + 1024);
        if let Some(mut out) = child.stdout.take() {
            out.read_to_end(&mut stdout)?;
        }
        let status = child.wait()?;
        let _ = writer.join();
        let stderr = reader.join().unwrap_or_default();
        Ok((status, stdout, stderr))
    });
    let elapsed = start.elapsed();
    match result {
        Err(e) => Err(Failure::Spawn(e.to_string())),
        Ok((status, _, stderr)) if !status.success() => Err(Failure::Exit {
            code: status.code().unwrap_or(-1),
            stderr: String::from_utf8_lossy(&stderr).trim().to_owned(),
        }),
        Ok((_, stdout, _)) => {
            verify(setup, sideband, check, &stdout)?;
            let rss = rss_file.and_then(|f| {
                let kib = std::fs::read_to_string(&f).ok()?.trim().parse().ok();
                let _ = std::fs::remove_file(&f);
                kib
            });
            Ok((elapsed, rss))
        }
    }
}

/// Which run of a turn: a warm-up or a timed one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Turn {
    WarmUp(usize),
    Timed(usize),
}

/// Run one case, with progress on `progress`.
pub fn case(o: &Options, progress: &mut dyn Write) -> Result<Outcome, Error> {
    let c = o.case;
    let setup = setup(o, progress)?;
    // (name, script run by `sh -c` with the target as $1, whether it answers in side-band, check)
    let mut runs: Vec<(String, String, bool, Check)> = o
        .receivers
        .iter()
        .map(|r| {
            (
                r.name.clone(),
                format!("{} --stateless-rpc \"$1\"", r.command),
                c.sideband.on(),
                Check::ReportAndRefs,
            )
        })
        .collect();
    if let Some(floor) = &setup.floor {
        let script = format!("'{}' packed \"$1\"", floor.display());
        let check = match c.ref_format {
            RefFormat::Files => Check::ReportAndRefs,
            RefFormat::Reftable => Check::ReportOnly,
        };
        runs.push((FLOOR.to_owned(), script, true, check));
    }
    let mut receivers: Vec<Measured> = runs
        .iter()
        .map(|(name, ..)| Measured {
            name: name.clone(),
            times: Vec::new(),
            peak_rss_kib: Vec::new(),
            failure: None,
        })
        .collect();
    let turns = (1..=o.warmup)
        .map(Turn::WarmUp)
        .chain((1..=o.runs).map(Turn::Timed));
    let mut hook_spawn = Vec::new();
    let mut start = Vec::new();
    // The hook's own cost, in the same turn as the receivers: first in every other turn, so
    // that neither side always runs on the caches (and the CPU frequency) the other left.
    let mut time_hook = |i: usize, progress: &mut dyn Write| {
        if let Some(h) = &setup.hook {
            let _ = writeln!(
                progress,
                "bench: {}spawning the update hook {} times: run {i}/{}",
                o.progress_prefix, c.refs, o.runs
            );
            hook_spawn.push(spawn_hook_n_times(h, &setup, c));
        }
    };
    for turn in turns {
        if let Turn::Timed(i) = turn
            && i % 2 == 0
        {
            time_hook(i, progress);
        }
        for ((name, script, sideband, check), measured) in runs.iter().zip(&mut receivers) {
            if measured.failure.is_some() {
                continue;
            }
            let _ = match turn {
                Turn::WarmUp(i) => writeln!(
                    progress,
                    "bench: {}{name}: warm-up {i}/{}",
                    o.progress_prefix, o.warmup
                ),
                Turn::Timed(i) => writeln!(
                    progress,
                    "bench: {}{name}: run {i}/{}",
                    o.progress_prefix, o.runs
                ),
            };
            match run_once(&setup, script, *sideband, *check) {
                Ok((t, rss)) => {
                    if let Turn::Timed(_) = turn {
                        measured.times.push(t);
                        measured.peak_rss_kib.extend(rss);
                    }
                }
                Err(f) => {
                    let _ = writeln!(progress, "bench: {}{name}: FAILED: {f}", o.progress_prefix);
                    measured.failure = Some(f);
                    measured.times.clear();
                    measured.peak_rss_kib.clear();
                }
            }
        }
        if let Turn::Timed(i) = turn {
            // The start is only printed beside the floor's ratios.
            if setup.floor.is_some()
                && let Ok((t, _)) = run_once(&setup, START, false, Check::Nothing)
            {
                start.push(t);
            }
            if i % 2 == 1 {
                time_hook(i, progress);
            }
        }
    }
    Ok(Outcome {
        case: c.clone(),
        receivers,
        hook_spawn,
        request_bytes: setup.input.len(),
        start,
    })
}
