//! Test harness: isolated git environments, pushes with the real `git` client against either
//! `git receive-pack` or berth, and observations of what the client saw and the server holds.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

/// The all-zero object id of the tests' object format ([`object_format`]): formats as the hex
/// and dereferences to it.
pub const ZERO: Zero = Zero;

/// See [`ZERO`].
pub struct Zero;

impl std::ops::Deref for Zero {
    type Target = str;
    fn deref(&self) -> &'static str {
        const ZEROS: &str = "0000000000000000000000000000000000000000000000000000000000000000";
        &ZEROS[..object_format().len_in_hex()]
    }
}

impl std::fmt::Display for Zero {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self)
    }
}

/// The pack without objects that `git push` sends when the server has everything (32 bytes
/// with SHA-1, 44 with SHA-256): `v.extend(EMPTY_PACK)`.
pub const EMPTY_PACK: EmptyPack = EmptyPack;

/// See [`EMPTY_PACK`].
pub struct EmptyPack;

impl EmptyPack {
    /// The pack's bytes.
    pub fn bytes(&self) -> Vec<u8> {
        let mut pack = b"PACK\x00\x00\x00\x02\x00\x00\x00\x00".to_vec();
        let mut hasher = gix_hash::hasher(object_format());
        hasher.update(&pack);
        pack.extend_from_slice(hasher.try_finalize().unwrap().as_bytes());
        pack
    }
}

impl IntoIterator for EmptyPack {
    type Item = u8;
    type IntoIter = std::vec::IntoIter<u8>;
    fn into_iter(self) -> Self::IntoIter {
        self.bytes().into_iter()
    }
}

/// One pkt-line carrying `s`. With SHA-256 repositories, a line with capabilities (after a
/// NUL) that names no `object-format=` gets ` object-format=sha256`, as a SHA-256 client sends
/// it (git's send-pack: a client without it speaks SHA-1).
pub fn pkt(s: &str) -> Vec<u8> {
    let with_format;
    let s = match s.split_once('\0') {
        Some((_, caps)) if sha256() && !caps.contains("object-format=") => {
            let (line, nl) = match s.strip_suffix('\n') {
                Some(l) => (l, "\n"),
                None => (s, ""),
            };
            let sep = if line.ends_with('\0') { "" } else { " " };
            with_format = format!("{line}{sep}object-format=sha256{nl}");
            with_format.as_str()
        }
        _ => s,
    };
    let mut v = format!("{:04x}", s.len() + 4).into_bytes();
    v.extend_from_slice(s.as_bytes());
    v
}

/// A command list as a client sends it: `caps` after a NUL on the first command, then a flush.
/// A SHA-256 client also says `object-format=sha256`, as git's send-pack does ([`pkt`]).
pub fn request(cmds: &[String], caps: &str) -> Vec<u8> {
    let mut v = Vec::new();
    for (i, c) in cmds.iter().enumerate() {
        if i == 0 {
            v.extend(pkt(&format!("{c}\0{caps}")));
        } else {
            v.extend(pkt(c));
        }
    }
    v.extend(b"0000");
    v
}

/// A scratch directory holding `home/` with `gitconfig` as its global git configuration.
pub fn scratch(prefix: &str, gitconfig: &str) -> tempfile::TempDir {
    let dir = tempfile::Builder::new().prefix(prefix).tempdir().unwrap();
    std::fs::create_dir(dir.path().join("home")).unwrap();
    std::fs::write(dir.path().join("home/.gitconfig"), gitconfig).unwrap();
    dir
}

/// `program` in `cwd` with an isolated git environment: no system configuration, `home` as
/// HOME holding the only global one, a fixed identity and `date`, the C locale, stdin closed.
pub fn isolated_command(
    program: impl AsRef<std::ffi::OsStr>,
    cwd: &Path,
    home: &Path,
    date: &str,
) -> Command {
    let mut c = Command::new(program);
    c.current_dir(cwd)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", home.join(".gitconfig"))
        .env("GIT_AUTHOR_NAME", "A U Thor")
        .env("GIT_AUTHOR_EMAIL", "author@example.com")
        .env("GIT_COMMITTER_NAME", "C O Mitter")
        .env("GIT_COMMITTER_EMAIL", "committer@example.com")
        .env("GIT_AUTHOR_DATE", date)
        .env("GIT_COMMITTER_DATE", date)
        .env("LANG", "C")
        .env("LC_ALL", "C")
        .stdin(Stdio::null());
    if let Some(format) = ref_format() {
        c.env("GIT_DEFAULT_REF_FORMAT", format);
    }
    if let Some(format) = object_format_name() {
        c.env("GIT_DEFAULT_HASH", format);
    }
    c
}

/// The object format every repository of the tests (the server's and the client's) is
/// created with: `BERTH_TEST_OBJECT_FORMAT` (`sha1` or `sha256`), else git's default. CI runs
/// the push suites once with `sha256`.
pub fn object_format_name() -> Option<String> {
    std::env::var("BERTH_TEST_OBJECT_FORMAT")
        .ok()
        .filter(|f| !f.is_empty())
}

/// The tests' object format.
pub fn object_format() -> gix_hash::Kind {
    match object_format_name().as_deref() {
        Some("sha256") => gix_hash::Kind::Sha256,
        _ => gix_hash::Kind::Sha1,
    }
}

/// Whether the tests' repositories are SHA-256 repositories.
pub fn sha256() -> bool {
    object_format() == gix_hash::Kind::Sha256
}

/// The object format's name as git writes it in `object-format=`.
pub fn object_format_cap() -> &'static str {
    if sha256() { "sha256" } else { "sha1" }
}

/// The ref format every repository of the tests is created with: `BERTH_TEST_REF_FORMAT`
/// (`files` or `reftable`), else git's default. CI runs the push suites once with each.
pub fn ref_format() -> Option<String> {
    std::env::var("BERTH_TEST_REF_FORMAT")
        .ok()
        .filter(|f| !f.is_empty())
}

/// Whether the tests' repositories are reftable repositories.
pub fn reftable() -> bool {
    ref_format().as_deref() == Some("reftable")
}

/// Run `cmd` with `input` on its stdin (written from a thread, so a command that answers while
/// reading cannot deadlock) and return its output whatever the status.
pub fn run_with_stdin(mut cmd: Command, input: &[u8]) -> Output {
    use std::io::Write;
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_vec();
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    out
}

/// berth's process-wide counters (`berth::hooks::processes_started()`,
/// `berth::protocol::sideband::muxers_created()`) count for every test of this binary, all
/// running at once: a test that compares them before and after running berth in this process
/// holds this lock, and so does any test that runs berth in this process (`berth::receive::run`).
pub fn in_process_lock() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    // A test that panicked while holding it left nothing to repair.
    LOCK.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Which receive-pack the client talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Receiver {
    /// The machine's `git receive-pack`.
    Git,
    /// berth.
    Berth,
}

impl Receiver {
    /// The `--receive-pack=` value.
    pub fn command(self) -> String {
        match self {
            Receiver::Git => "git-receive-pack".into(),
            Receiver::Berth => format!("'{}' receive-pack", berth().display()),
        }
    }
}

/// Run `run` once against git receive-pack and once against berth and insist that what each
/// observed is the same; return berth's.
pub fn differential<T: PartialEq + std::fmt::Debug>(run: impl Fn(Receiver) -> T) -> T {
    let git = run(Receiver::Git);
    let berth = run(Receiver::Berth);
    assert_eq!(
        git, berth,
        "git receive-pack (left) and berth (right) differ"
    );
    berth
}

pub use crate::ports::free_ports;

/// The berth binary under test.
pub fn berth() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_berth"))
}

/// A global git configuration: one pack thread (the client's delta search, and so the packs it
/// sends, are deterministic) and `main` as the initial branch.
pub const PACK_ONE_THREAD_MAIN: &str = "[pack]
	threads = 1
[init]
	defaultBranch = main
";

/// A scratch world: a temp dir with a home of its own, so no user or system config leaks in.
/// It is `Sync`: threads of one test (racing pushes, parallel crash replays) build commands in
/// it at once.
pub struct World {
    dir: tempfile::TempDir,
    /// Commands built so far, each dated a minute after the previous one; `None`: every command
    /// at the same date.
    tick: Option<AtomicU64>,
}

// Threads of one test (races, crash) share a world.
const _: fn() = || {
    fn sync<T: Sync>() {}
    sync::<World>();
};

impl World {
    pub fn new() -> Self {
        // One pack thread: the client's delta search, and so the packs it sends, are deterministic.
        let dir = scratch(
            "berth-test-",
            "[pack]
	threads = 1
",
        );
        World {
            dir,
            tick: Some(AtomicU64::new(0)),
        }
    }

    /// A world named `<prefix>…` with `gitconfig` as its global configuration, whose commands
    /// all run at one date (1700000000 +0000): what a command does then depends neither on how
    /// many ran before it nor on which thread got there first, and a replayed command does
    /// exactly what it did the first time.
    pub fn fixed_clock(prefix: &str, gitconfig: &str) -> Self {
        World {
            dir: scratch(prefix, gitconfig),
            tick: None,
        }
    }

    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    /// A `git` command in `cwd` (relative to the world, or absolute) with a fixed identity and
    /// clock.
    pub fn git_cmd(&self, cwd: impl AsRef<Path>) -> Command {
        self.cmd("git", cwd)
    }

    /// `program` in `cwd` with the same isolated environment as [`World::git_cmd`].
    pub fn cmd(&self, program: impl AsRef<std::ffi::OsStr>, cwd: impl AsRef<Path>) -> Command {
        let date = match &self.tick {
            Some(tick) => {
                let t = tick.fetch_add(1, Ordering::Relaxed) + 1;
                format!("{} +0000", 1_700_000_000 + t * 60)
            }
            None => "1700000000 +0000".to_owned(),
        };
        isolated_command(
            program,
            &self.dir.path().join(cwd),
            &self.path("home"),
            &date,
        )
    }

    /// Run git, panicking with its output if it fails.
    pub fn git(&self, cwd: impl AsRef<Path>, args: &[&str]) -> String {
        let cwd = cwd.as_ref();
        let out = self.git_cmd(cwd).args(args).output().unwrap();
        assert!(
            out.status.success(),
            "git {args:?} in {} failed:\n{}{}",
            cwd.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// Run git and return its output whatever the status.
    pub fn git_out(&self, cwd: impl AsRef<Path>, args: &[&str]) -> Output {
        self.git_cmd(cwd).args(args).output().unwrap()
    }

    /// Run git with `input` on its stdin and return its output whatever the status.
    pub fn git_with_stdin(&self, cwd: impl AsRef<Path>, args: &[&str], input: &[u8]) -> Output {
        let mut cmd = self.git_cmd(cwd);
        cmd.args(args);
        self.git_with_stdin_cmd(cmd, input)
    }

    /// Run `cmd` with `input` on its stdin and return its output whatever the status.
    pub fn git_with_stdin_cmd(&self, cmd: Command, input: &[u8]) -> Output {
        run_with_stdin(cmd, input)
    }

    /// Create `n` refs `<prefix><i>` (zero-padded to 5 digits) at `oid` in `repo`, in one
    /// `git update-ref --stdin`.
    pub fn create_refs(&self, repo: &str, prefix: &str, n: usize, oid: &str) {
        let stdin: String = (0..n)
            .map(|i| format!("create {prefix}{i:05} {oid}\n"))
            .collect();
        let out = self.git_with_stdin(repo, &["update-ref", "--stdin"], stdin.as_bytes());
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// A server `srv.git` with `main` and `topic` at one commit, and a client `src` one commit
    /// ahead on `main`: `(server's commit, client's new commit)`.
    pub fn server_with_history(&self) -> (String, String) {
        self.bare("srv.git");
        self.work("src");
        let c1 = self.commit("src", "a", "1");
        self.git(
            "src",
            &["push", "-q", "../srv.git", "main", "main:refs/heads/topic"],
        );
        let c2 = self.commit("src", "a", "2");
        (c1, c2)
    }

    /// `git pack-objects --stdout` in `src`: with `revs`, of the revisions listed (as `git
    /// push` builds its pack), else of exactly the objects listed.
    pub fn pack(&self, revs: bool, list: &str) -> Vec<u8> {
        let mut args = vec!["pack-objects", "--stdout", "-q"];
        if revs {
            args.push("--revs");
        }
        let out = self.git_with_stdin("src", &args, list.as_bytes());
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    }

    /// `git init --bare <name>` in the world, and return its name.
    pub fn bare(&self, name: &str) -> String {
        self.git(".", &["init", "-q", "--bare", "-b", "main", name]);
        name.to_owned()
    }

    /// A bare `srv.git` without auto-maintenance, holding `main` (one commit) pushed from a
    /// work repository `src`; that commit's id.
    pub fn server_with_main(&self) -> String {
        self.bare("srv.git");
        self.git("srv.git", &["config", "receive.autogc", "false"]);
        self.work("src");
        let head = self.commit("src", "a", "1");
        self.git("src", &["push", "-q", "../srv.git", "main"]);
        head
    }

    /// A work repository `name` with `main` checked out.
    pub fn work(&self, name: &str) -> String {
        self.git(".", &["init", "-q", "-b", "main", name]);
        name.to_owned()
    }

    /// Commit a file with `content` in `repo` and return the commit id.
    pub fn commit(&self, repo: &str, file: &str, content: &str) -> String {
        let p = self.path(repo).join(file);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        std::fs::write(p, content).unwrap();
        self.git(repo, &["add", "-A"]);
        let summary: String = content.chars().take(40).collect();
        self.git(repo, &["commit", "-q", "-m", &format!("{file}: {summary}")]);
        self.git(repo, &["rev-parse", "HEAD"]).trim().to_owned()
    }

    /// `git push --porcelain` from `repo` to `remote` through `receiver`.
    pub fn push(&self, repo: &str, receiver: Receiver, remote: &str, args: &[&str]) -> Push {
        let url = self.path(remote);
        let rp = format!("--receive-pack={}", receiver.command());
        let mut all = vec!["push", "--porcelain", rp.as_str(), url.to_str().unwrap()];
        all.extend_from_slice(args);
        let out = self.git_out(repo, &all);
        Push::from_output(&out, self.root())
    }

    /// `git for-each-ref` in `repo`: `<oid> <type> <name>` lines.
    pub fn refs(&self, repo: impl AsRef<Path>) -> String {
        self.git(
            repo,
            &[
                "for-each-ref",
                "--format=%(objectname) %(objecttype) %(refname)",
            ],
        )
    }

    /// The refs of `repo` (`name → id`), asserting git reads every one of them without a
    /// complaint (a torn loose ref is "ignoring broken ref", a torn `packed-refs` is fatal).
    pub fn ref_map(&self, repo: impl AsRef<Path>) -> BTreeMap<String, String> {
        let repo = repo.as_ref();
        let out = self.git_out(repo, &["for-each-ref", "--format=%(objectname) %(refname)"]);
        assert!(
            out.status.success() && out.stderr.is_empty(),
            "for-each-ref in {}:\n{}",
            repo.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(|l| {
                let (id, name) = l.split_once(' ').unwrap();
                (name.to_owned(), id.to_owned())
            })
            .collect()
    }

    /// `git fsck --strict` of `repo`: every ref (and reflog entry) points at a complete object
    /// graph; else what fsck said.
    pub fn fsck(&self, repo: impl AsRef<Path>) -> Result<(), String> {
        let out = self.git_out(
            repo,
            &["fsck", "--strict", "--no-dangling", "--no-progress"],
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        let complaints: Vec<&str> = stderr
            .lines()
            .filter(|l| !l.starts_with("notice:"))
            .collect();
        if out.status.success() && complaints.is_empty() && out.stdout.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                stderr
            ))
        }
    }

    /// Assert `git fsck --strict` is clean and no quarantine or lock file is left behind.
    pub fn assert_clean(&self, repo: impl AsRef<Path>) {
        let repo = repo.as_ref();
        if let Err(e) = self.fsck(repo) {
            panic!("fsck of {}:\n{e}", repo.display());
        }
        let out = self.git_out(repo, &["refs", "verify", "--strict"]);
        assert!(
            out.status.success() && out.stderr.is_empty(),
            "git refs verify of {}:\n{}",
            repo.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        let leftovers = leftovers(&self.dir.path().join(repo));
        assert!(
            leftovers.is_empty(),
            "left behind in {}: {leftovers:?}",
            repo.display()
        );
    }

    /// Install `script` as `repo`'s hook `name` (`hooks/<name>`, executable).
    pub fn install_hook(&self, repo: &str, name: &str, script: &str) {
        use std::os::unix::fs::PermissionsExt;
        let path = self.path(repo).join("hooks").join(name);
        std::fs::write(&path, script).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    /// Every reflog of `repo`, newest entry first per ref: `<selector> <oid> <message>` lines.
    pub fn reflogs(&self, repo: &str) -> String {
        self.git(repo, &["reflog", "show", "--all", "--format=%gD %H %gs"])
    }
}

/// Waits until [`leftovers`] finds nothing under `repo` (a session removes its quarantine just
/// after its answer reaches the client) and returns what is left then: empty, or what stayed for
/// two minutes, hundreds of times what a quiet machine needs.
pub fn leftovers_after_session(repo: &Path) -> Vec<PathBuf> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        let left = leftovers(repo);
        if left.is_empty() || std::time::Instant::now() > deadline {
            return left;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Quarantine directories, lock files and keep files under a repository. `objects/maintenance.lock`
/// is not counted: it belongs to the detached `git maintenance run --auto` receive-pack starts
/// after every push (as git's does) and does not wait for, so it may outlive the session.
pub fn leftovers(repo: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![repo.to_owned()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            if name == "maintenance.lock" && dir.ends_with("objects") {
                continue;
            }
            if name.starts_with("tmp_objdir")
                || name.ends_with(".lock")
                || name.contains(".temp.")
                || name.ends_with(".keep")
                || name.starts_with("incoming-")
            {
                found.push(p.clone());
            }
            if p.is_dir() {
                stack.push(p);
            }
        }
    }
    found
}

/// What the client saw of one push.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Push {
    pub success: bool,
    /// `--porcelain` lines (the per-ref verdicts), with the world's path replaced by `$ROOT`.
    pub stdout: String,
    /// stderr, same replacement, without client-side progress lines.
    pub stderr: String,
}

impl Push {
    pub fn from_output(out: &Output, root: &Path) -> Self {
        let root = root.to_str().unwrap();
        let clean = |b: &[u8]| String::from_utf8_lossy(b).replace(root, "$ROOT");
        let stderr = clean(&out.stderr)
            .split(['\n', '\r'])
            .map(str::trim_end)
            .filter(|l| !l.is_empty() && !is_client_progress(l))
            .map(|l| format!("{l}\n"))
            .collect();
        Push {
            success: out.status.success(),
            stdout: clean(&out.stdout),
            stderr,
        }
    }

    /// The remote's `remote: …` lines.
    pub fn remote_lines(&self) -> Vec<&str> {
        self.stderr
            .lines()
            .filter(|l| l.starts_with("remote:"))
            .collect()
    }
}

fn is_client_progress(l: &str) -> bool {
    [
        "Enumerating objects",
        "Counting objects",
        "Delta compression",
        "Compressing objects",
        "Writing objects",
        "Total ",
        "remote: Resolving deltas",
        "remote: Checking connectivity",
    ]
    .iter()
    .any(|p| l.starts_with(p))
}

/// A started `berth serve`: its stderr collected into `log` by a thread, its first stdout
/// lines (up to the one `ready` accepts) read, the rest drained so it never blocks. Killed on
/// drop.
pub struct ServeProcess {
    pub child: std::process::Child,
    pub log: std::sync::Arc<std::sync::Mutex<String>>,
    /// The stdout lines read until `ready` was satisfied.
    pub stdout: String,
}

impl ServeProcess {
    /// Spawn `cmd` (stdout and stderr piped here) and read stdout until `ready(lines so far)`
    /// says the server is listening; a server that exits first fails the test with its log.
    pub fn spawn(mut cmd: Command, ready: impl Fn(&str) -> bool) -> ServeProcess {
        use std::io::{BufRead, BufReader};
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let mut stderr = BufReader::new(child.stderr.take().unwrap());
        let sink = log.clone();
        std::thread::spawn(move || {
            let mut line = String::new();
            while stderr.read_line(&mut line).unwrap_or(0) > 0 {
                sink.lock().unwrap().push_str(&line);
                line.clear();
            }
        });
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut lines = String::new();
        while !ready(&lines) {
            if out.read_line(&mut lines).unwrap_or(0) == 0 {
                let _ = child.kill();
                let _ = child.wait();
                std::thread::sleep(std::time::Duration::from_millis(100));
                panic!(
                    "berth serve did not start: stdout {lines:?}, stderr:\n{}",
                    log.lock().unwrap()
                );
            }
        }
        // Keep reading stdout so the server never blocks on it.
        std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
        ServeProcess {
            child,
            log,
            stdout: lines,
        }
    }

    /// Everything the server logged so far.
    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// Everything the server logged, once it has logged `needle`: its stderr is read by
    /// another thread, so a line written before a response may reach here after it. Waits up
    /// to 60 s, then fails the test with the log.
    pub fn wait_log(&self, needle: &str) -> String {
        let start = std::time::Instant::now();
        loop {
            let log = self.log();
            if log.contains(needle) {
                return log;
            }
            assert!(
                start.elapsed() < std::time::Duration::from_secs(60),
                "no {needle:?} in:\n{log}"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}

impl Drop for ServeProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
