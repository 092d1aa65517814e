//! `berth bench many-refs`: the same many-ref push, byte for byte what `git push` sends, fed to
//! any number of receive-pack commands side by side.
//!
//! It builds a source repository (K distinct commits, N refs pointing at them round-robin) and a
//! target repository (files or reftable), generates the request `git push` sends for N ref
//! creations (commands with the chosen capabilities, flush, the pack: the 32-byte empty pack when
//! the objects are already on the server, else the pack of the K commits), and runs each receiver
//! `R` times as `<command> --stateless-rpc <target>` on that input, restoring the target from a
//! pristine copy before every run. The receivers take turns (run 1 of each, then run 2 of each,
//! …), so a drift of the machine's speed during the benchmark does not favour one of them. After
//! each run every ref must have its value and the report must say `ok` for each; a receiver that
//! fails this is reported as failed, with the reason, and not timed.
//!
//! The floor: when a C compiler (`cc`) is present and the push is one the floor program handles
//! (refs only: objects on the server, SHA-1, no atomic, no hook), `benches/floor.c` — the least
//! work such a push needs: parse, look the objects up in the pack index, write `packed-refs`
//! once, report — is built and run as one more receiver (`floor packed <target>`), and every
//! receiver's median is also given as a multiple of the floor's. The objects of the target are
//! then in a pack (the floor reads only a pack index), for every receiver alike.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

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

/// The object format of both repositories.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum ObjectFormat {
    /// SHA-1 ids.
    #[default]
    Sha1,
    /// SHA-256 ids (`extensions.objectFormat=sha256`).
    Sha256,
}

impl ObjectFormat {
    fn kind(self) -> gix_hash::Kind {
        match self {
            ObjectFormat::Sha1 => gix_hash::Kind::Sha1,
            ObjectFormat::Sha256 => gix_hash::Kind::Sha256,
        }
    }

    fn name(self) -> &'static str {
        match self {
            ObjectFormat::Sha1 => "sha1",
            ObjectFormat::Sha256 => "sha256",
        }
    }
}

/// The target repository's ref storage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RefFormat {
    /// Loose refs and `packed-refs`.
    Files,
    /// A reftable stack.
    Reftable,
}

/// Where the objects the new refs point at come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Scenario {
    /// Already on the server: the push carries the empty pack.
    Server,
    /// In the pushed pack (the target starts empty).
    Pack,
}

/// The report-status version the client asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Report {
    /// `report-status`
    V1,
    /// `report-status-v2`
    V2,
}

/// What to benchmark.
#[derive(Debug, Clone)]
pub struct Options {
    /// N: refs created by the push.
    pub refs: usize,
    /// K: distinct commits the refs point at (ref i points at commit i mod K).
    pub commits: usize,
    /// Timed runs per receiver.
    pub runs: usize,
    /// The target's ref storage.
    pub ref_format: RefFormat,
    /// The object format of the source and the target.
    pub object_format: ObjectFormat,
    /// Ask for `side-band-64k`.
    pub sideband: bool,
    /// The report-status version.
    pub report: Report,
    /// Ask for an atomic push.
    pub atomic: bool,
    /// Install an `update` hook (`exit 0`) in the target, and time spawning it N times.
    pub update_hook: bool,
    /// Where the objects come from.
    pub objects: Scenario,
    /// Receiver commands, each run as `<command> --stateless-rpc <target>` through `sh -c`.
    pub receivers: Vec<String>,
    /// Where to build the repositories (a temporary directory under it; default `$TMPDIR`).
    pub workdir: Option<PathBuf>,
    /// Build and run the floor program when the push is one it handles and `cc` is present.
    pub floor: bool,
}

/// The floor program's source (`../shared/bench/floor.c`, kept with the benches).
const FLOOR_C: &str = include_str!("../../benches/floor.c");

/// The floor receiver's name in the results.
pub const FLOOR: &str = "floor (C, packed-refs)";

/// Why the benchmark could not be run at all.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Setting up the repositories failed.
    #[error("setting up: {0}")]
    Setup(String),
    /// The options make no sense.
    #[error("{0}")]
    Usage(String),
}

/// One receiver's result.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The receiver command.
    pub command: String,
    /// Wall-clock time of each run (empty when it failed).
    pub times: Vec<Duration>,
    /// Why it failed, if it did.
    pub error: Option<String>,
}

impl Outcome {
    fn stat(&self, f: impl Fn(&[Duration]) -> Duration) -> Option<Duration> {
        let mut t = self.times.clone();
        t.sort();
        (self.error.is_none() && !t.is_empty()).then(|| f(&t))
    }
    /// The fastest run.
    pub fn min(&self) -> Option<Duration> {
        self.stat(|t| t[0])
    }
    /// The median run.
    pub fn median(&self) -> Option<Duration> {
        self.stat(|t| t[t.len() / 2])
    }
    /// The slowest run.
    pub fn max(&self) -> Option<Duration> {
        self.stat(|t| t[t.len() - 1])
    }
}

/// The results of one benchmark.
#[derive(Debug, Clone)]
pub struct Results {
    /// What was run.
    pub options: Options,
    /// One per receiver, in the order given.
    pub receivers: Vec<Outcome>,
    /// With `update_hook`: the median time of spawning the hook N times in a row, once per run.
    pub hook_spawn: Option<Duration>,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

impl Results {
    /// Each receiver's median over the first receiver's median.
    pub fn ratio(&self, i: usize) -> Option<f64> {
        let base = self.receivers.first()?.median()?;
        Some(self.receivers.get(i)?.median()?.as_secs_f64() / base.as_secs_f64())
    }

    /// Each receiver's median over the floor's median, when the floor ran.
    pub fn floor_ratio(&self, i: usize) -> Option<f64> {
        let floor = self
            .receivers
            .iter()
            .find(|r| r.command == FLOOR)?
            .median()?;
        Some(self.receivers.get(i)?.median()?.as_secs_f64() / floor.as_secs_f64())
    }

    /// Whether every receiver passed verification.
    pub fn all_ok(&self) -> bool {
        self.receivers.iter().all(|r| r.error.is_none())
    }

    fn title(&self) -> String {
        let o = &self.options;
        let mut t = format!(
            "{} new refs, {} commit{}, objects {}, {} backend, {}, report-status {}",
            o.refs,
            o.commits,
            if o.commits == 1 { "" } else { "s" },
            match o.objects {
                Scenario::Server => "already on the server",
                Scenario::Pack => "in the pack",
            },
            match o.ref_format {
                RefFormat::Files => "files",
                RefFormat::Reftable => "reftable",
            },
            o.object_format.name(),
            match o.report {
                Report::V1 => "v1",
                Report::V2 => "v2",
            },
        );
        for (on, what) in [
            (o.sideband, "side-band-64k"),
            (o.atomic, "atomic"),
            (o.update_hook, "update hook"),
        ] {
            if on {
                t.push_str(", ");
                t.push_str(what);
            }
        }
        let _ = write!(t, "; {} runs each", o.runs);
        t
    }

    /// The human-readable table.
    pub fn table(&self) -> String {
        let width = self
            .receivers
            .iter()
            .map(|r| r.command.len())
            .max()
            .unwrap_or(8)
            .max(20);
        let mut out = format!("{}\n", self.title());
        let _ = writeln!(
            out,
            "{:<width$}  {:>11} {:>11} {:>11} {:>8} {:>8}",
            "receiver", "min", "median", "max", "ratio", "x floor"
        );
        for (i, r) in self.receivers.iter().enumerate() {
            match (&r.error, r.min(), r.median(), r.max()) {
                (None, Some(min), Some(med), Some(max)) => {
                    let _ = writeln!(
                        out,
                        "{:<width$}  {:>8.1} ms {:>8.1} ms {:>8.1} ms {:>8} {:>8}",
                        r.command,
                        ms(min),
                        ms(med),
                        ms(max),
                        self.ratio(i).map_or("-".to_owned(), |x| format!("{x:.3}x")),
                        self.floor_ratio(i)
                            .map_or("-".to_owned(), |x| format!("{x:.2}x")),
                    );
                }
                (e, ..) => {
                    let _ = writeln!(
                        out,
                        "{:<width$}  FAILED: {}",
                        r.command,
                        e.as_deref().unwrap_or("no runs")
                    );
                }
            }
        }
        if let Some(h) = self.hook_spawn {
            let _ = writeln!(
                out,
                "spawning the update hook {} times in a row: {:.1} ms (median)",
                self.options.refs,
                ms(h)
            );
            for r in &self.receivers {
                if let Some(m) = r.median() {
                    let over = (m.as_secs_f64() / h.as_secs_f64() - 1.0) * 100.0;
                    let _ = writeln!(out, "  {}: {over:+.1} % over spawning", r.command);
                }
            }
        }
        out
    }

    /// The results as JSON.
    pub fn json(&self) -> String {
        let o = &self.options;
        let num = |d: Option<Duration>| d.map_or("null".to_owned(), |d| format!("{:.3}", ms(d)));
        let mut out = String::from("{");
        let _ = write!(
            out,
            "\"refs\":{},\"commits\":{},\"runs\":{},\"ref_format\":\"{}\",\"object_format\":\"{}\",\"objects\":\"{}\",\
             \"report\":\"{}\",\"sideband\":{},\"atomic\":{},\"update_hook\":{},",
            o.refs,
            o.commits,
            o.runs,
            match o.ref_format {
                RefFormat::Files => "files",
                RefFormat::Reftable => "reftable",
            },
            o.object_format.name(),
            match o.objects {
                Scenario::Server => "server",
                Scenario::Pack => "pack",
            },
            match o.report {
                Report::V1 => "v1",
                Report::V2 => "v2",
            },
            o.sideband,
            o.atomic,
            o.update_hook
        );
        out.push_str("\"receivers\":[");
        for (i, r) in self.receivers.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            let times: Vec<String> = r.times.iter().map(|t| format!("{:.3}", ms(*t))).collect();
            let _ = write!(
                out,
                "{{\"command\":{},\"ok\":{},\"error\":{},\"min_ms\":{},\"median_ms\":{},\"max_ms\":{},\"ratio\":{},\"floor_ratio\":{},\"times_ms\":[{}]}}",
                json_string(&r.command),
                r.error.is_none(),
                r.error.as_deref().map_or("null".to_owned(), json_string),
                num(r.min()),
                num(r.median()),
                num(r.max()),
                self.ratio(i)
                    .map_or("null".to_owned(), |x| format!("{x:.4}")),
                self.floor_ratio(i)
                    .map_or("null".to_owned(), |x| format!("{x:.4}")),
                times.join(",")
            );
        }
        let _ = write!(out, "],\"hook_spawn_ms\":{}}}", num(self.hook_spawn));
        out
    }
}

fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
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
    let what = format!("{c:?}");
    c.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut child = c
        .spawn()
        .map_err(|e| Error::Setup(format!("{what}: {e}")))?;
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
        .map_err(|e| Error::Setup(format!("{what}: {e}")))?;
    if let Some(w) = writer {
        let _ = w.join();
    }
    if !out.status.success() {
        return Err(Error::Setup(format!(
            "{what} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
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

/// The repositories and the request of one benchmark.
struct Setup {
    _tmp: tempfile::TempDir,
    pristine: PathBuf,
    target: PathBuf,
    input: Vec<u8>,
    /// `ref name → value` every run must leave.
    expected: Vec<(String, String)>,
    hook: Option<PathBuf>,
    /// The built floor program, when it runs.
    floor: Option<PathBuf>,
}

/// Whether the floor program handles this push: refs only, SHA-1, not atomic, no hook.
fn floor_handles(o: &Options) -> bool {
    o.floor
        && o.objects == Scenario::Server
        && o.object_format == ObjectFormat::Sha1
        && !o.atomic
        && !o.update_hook
}

/// Build the floor program in `dir` with `cc -O2`; `None` (with a note) without a compiler.
fn build_floor(dir: &Path, progress: &mut dyn Write) -> Option<PathBuf> {
    let src = dir.join("floor.c");
    let bin = dir.join("floor");
    if let Err(e) = std::fs::write(&src, FLOOR_C) {
        let _ = writeln!(progress, "bench: floor not built: {e}");
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
                "bench: floor not built: cc: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
            None
        }
        Err(e) => {
            let _ = writeln!(progress, "bench: floor not built: no C compiler (cc: {e})");
            None
        }
    }
}

fn setup(o: &Options, progress: &mut dyn Write) -> Result<Setup, Error> {
    let tmp = match &o.workdir {
        Some(d) => tempfile::Builder::new()
            .prefix("berth-bench-")
            .tempdir_in(d),
        None => tempfile::Builder::new().prefix("berth-bench-").tempdir(),
    }
    .map_err(|e| Error::Setup(format!("temporary directory: {e}")))?;
    let root = tmp.path().to_owned();
    let src = root.join("src");
    let pristine = root.join("pristine.git");
    let target = root.join("target.git");
    let _ = writeln!(progress, "bench: building {} commits", o.commits);
    run(
        {
            let mut c = git(&root);
            c.args(["init", "-q", "--bare", "src"]);
            c.arg(format!("--object-format={}", o.object_format.name()));
            c
        },
        None,
    )?;
    // K commits in a line, made by fast-import (distinct messages, empty trees).
    let mut stream = String::with_capacity(o.commits * 120);
    for i in 1..=o.commits {
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
            let mut c = git(&src);
            c.args(["fast-import", "--quiet", "--done", "--export-marks=marks"]);
            c
        },
        Some(stream.as_bytes()),
    )?;
    let marks = std::fs::read_to_string(src.join("marks"))
        .map_err(|e| Error::Setup(format!("fast-import marks: {e}")))?;
    let mut commits: Vec<(usize, String)> = marks
        .lines()
        .filter_map(|l| {
            let (m, oid) = l.split_once(' ')?;
            Some((m.strip_prefix(':')?.parse().ok()?, oid.to_owned()))
        })
        .collect();
    commits.sort();
    let commits: Vec<String> = commits.into_iter().map(|(_, o)| o).collect();
    if commits.len() != o.commits {
        return Err(Error::Setup(
            "fast-import made the wrong number of commits".into(),
        ));
    }

    let mut init = git(&root);
    init.args(["init", "-q", "--bare"]);
    init.arg(format!("--object-format={}", o.object_format.name()));
    if o.ref_format == RefFormat::Reftable {
        init.arg("--ref-format=reftable");
    }
    init.arg("pristine.git");
    run(init, None)?;
    let pack = match o.objects {
        Scenario::Server => {
            let _ = writeln!(progress, "bench: pushing the commits to the target");
            let mut c = git(&src);
            c.args(["push", "-q", pristine.to_str().unwrap_or_default(), "main"]);
            run(c, None)?;
            empty_pack(o.object_format.kind())
        }
        Scenario::Pack => {
            let mut c = git(&src);
            c.args(["pack-objects", "--stdout", "--revs", "-q"]);
            run(c, Some(b"refs/heads/main\n"))?
        }
    };
    let floor = if floor_handles(o) {
        build_floor(&root, progress)
    } else {
        None
    };
    if floor.is_some() {
        // The floor looks objects up in a pack index only.
        let mut c = git(&pristine);
        c.args(["repack", "-adq"]);
        run(c, None)?;
    }
    let hook = if o.update_hook {
        let h = pristine.join("hooks/update");
        std::fs::create_dir_all(pristine.join("hooks"))
            .and_then(|_| std::fs::write(&h, "#!/bin/sh\nexit 0\n"))
            .and_then(|_| {
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(&h, std::fs::Permissions::from_mode(0o755))
            })
            .map_err(|e| Error::Setup(format!("update hook: {e}")))?;
        Some(h)
    } else {
        None
    };

    // The request, as git push writes it.
    let zero = "0".repeat(o.object_format.kind().len_in_hex());
    let mut caps = String::from(match o.report {
        Report::V1 => "report-status",
        Report::V2 => "report-status-v2",
    });
    if o.sideband {
        caps.push_str(" side-band-64k");
    }
    caps.push_str(" quiet");
    if o.atomic {
        caps.push_str(" atomic");
    }
    caps.push_str(" object-format=");
    caps.push_str(o.object_format.name());
    caps.push_str(" agent=git/2.47.3");
    let (input, expected) = request(&commits, o.refs, &caps, &zero, &pack);
    Ok(Setup {
        _tmp: tmp,
        pristine,
        target,
        input,
        expected,
        hook,
        floor,
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

/// Check one run: the report says `unpack ok` and `ok` for every ref, and the target holds
/// exactly the expected values.
fn verify(setup: &Setup, sideband: bool, refs: bool, stdout: &[u8]) -> Result<(), String> {
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
        return Err(format!(
            "report does not start with 'unpack ok': {:?}",
            lines.first().map(|l| text(l))
        ));
    }
    let mut ok = std::collections::HashSet::new();
    for l in &lines[1..] {
        let t = text(l);
        if let Some(name) = t.strip_prefix("ok ") {
            ok.insert(name.to_owned());
        } else if t.starts_with("ng ") {
            return Err(format!("report: {t}"));
        }
    }
    if let Some((missing, _)) = setup.expected.iter().find(|(n, _)| !ok.contains(n)) {
        return Err(format!(
            "report has {} ok lines for {} refs (no ok for {missing})",
            ok.len(),
            setup.expected.len()
        ));
    }
    if !refs {
        return Ok(());
    }
    let mut c = git(&setup.target);
    c.args([
        "for-each-ref",
        "--format=%(refname) %(objectname)",
        "refs/heads/b/",
    ]);
    let listed = run(c, None).map_err(|e| e.to_string())?;
    let listed = String::from_utf8_lossy(&listed);
    let actual: HashMap<&str, &str> = listed.lines().filter_map(|l| l.split_once(' ')).collect();
    for (name, oid) in &setup.expected {
        match actual.get(name.as_str()) {
            None => return Err(format!("ref {name} is missing")),
            Some(v) if v != oid => return Err(format!("ref {name} is {v}, expected {oid}")),
            _ => {}
        }
    }
    if actual.len() != setup.expected.len() {
        return Err(format!(
            "{} refs under refs/heads/b/, expected {}",
            actual.len(),
            setup.expected.len()
        ));
    }
    Ok(())
}

/// Spawn the update hook once per ref, as a receiver would, and time it.
fn spawn_hook_n_times(hook: &Path, setup: &Setup, o: &Options) -> Duration {
    let start = Instant::now();
    let zero = "0".repeat(o.object_format.kind().len_in_hex());
    for (name, oid) in &setup.expected {
        let _ = Command::new(hook)
            .args([name.as_str(), zero.as_str(), oid.as_str()])
            .current_dir(&setup.pristine)
            .stdin(Stdio::null())
            .status();
    }
    start.elapsed()
}

/// Run the benchmark, with progress on `progress`.
pub fn many_refs(o: &Options, progress: &mut dyn Write) -> Result<Results, Error> {
    if o.refs == 0 || o.commits == 0 || o.runs == 0 {
        return Err(Error::Usage(
            "--refs, --commits and --runs must be at least 1".into(),
        ));
    }
    if o.receivers.is_empty() {
        return Err(Error::Usage("no receiver to run".into()));
    }
    let setup = setup(o, progress)?;
    // (label, script run by `sh -c` with the target as $1, whether it answers in side-band)
    let mut runs: Vec<(String, String, bool)> = o
        .receivers
        .iter()
        .map(|cmd| {
            (
                cmd.clone(),
                format!("{cmd} --stateless-rpc \"$1\""),
                o.sideband,
            )
        })
        .collect();
    if let Some(floor) = &setup.floor {
        let script = format!("'{}' packed \"$1\"", floor.display());
        runs.push((FLOOR.to_owned(), script, true));
    }
    let mut receivers: Vec<Outcome> = runs
        .iter()
        .map(|(label, ..)| Outcome {
            command: label.clone(),
            times: Vec::new(),
            error: None,
        })
        .collect();
    let mut hook_times = Vec::new();
    for run_no in 1..=o.runs {
        for ((label, script, sideband), outcome) in runs.iter().zip(&mut receivers) {
            if outcome.error.is_some() {
                continue;
            }
            let _ = writeln!(progress, "bench: {label}: run {run_no}/{}", o.runs);
            let _ = std::fs::remove_dir_all(&setup.target);
            if let Err(e) = copy_dir(&setup.pristine, &setup.target) {
                return Err(Error::Setup(format!("resetting the target: {e}")));
            }
            let mut c = Command::new("sh");
            c.args(["-c", script, "sh"])
                .arg(&setup.target)
                .env("GIT_CONFIG_NOSYSTEM", "1")
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            let start = Instant::now();
            let result = c.spawn().and_then(|mut child| {
                let mut stdin = child.stdin.take();
                let input = setup.input.clone();
                let writer = std::thread::spawn(move || {
                    if let Some(s) = stdin.as_mut() {
                        let _ = s.write_all(&input);
                    }
                });
                let mut stdout = Vec::new();
                if let Some(mut out) = child.stdout.take() {
                    out.read_to_end(&mut stdout)?;
                }
                let mut stderr = Vec::new();
                if let Some(mut err) = child.stderr.take() {
                    err.read_to_end(&mut stderr)?;
                }
                let status = child.wait()?;
                let _ = writer.join();
                Ok((status, stdout, stderr))
            });
            let elapsed = start.elapsed();
            // The floor writes packed-refs whatever the target's format: only its report is
            // checked on reftable.
            let refs_checked = label != FLOOR || o.ref_format == RefFormat::Files;
            let failure = match result {
                Err(e) => Some(format!("cannot run: {e}")),
                Ok((status, _, stderr)) if !status.success() => Some(format!(
                    "exit status {}: {}",
                    status.code().unwrap_or(-1),
                    String::from_utf8_lossy(&stderr).trim()
                )),
                Ok((_, stdout, _)) => verify(&setup, *sideband, refs_checked, &stdout).err(),
            };
            if let Some(f) = failure {
                let _ = writeln!(progress, "bench: {label}: FAILED: {f}");
                outcome.error = Some(f);
                outcome.times.clear();
                continue;
            }
            outcome.times.push(elapsed);
        }
        // The hook's own cost, in the same turn as the receivers.
        if let Some(h) = &setup.hook {
            let _ = writeln!(
                progress,
                "bench: spawning the update hook {} times: run {run_no}/{}",
                o.refs, o.runs
            );
            hook_times.push(spawn_hook_n_times(h, &setup, o));
        }
    }
    hook_times.sort();
    let hook_spawn = hook_times.get(hook_times.len() / 2).copied();
    Ok(Results {
        options: o.clone(),
        receivers,
        hook_spawn,
    })
}
