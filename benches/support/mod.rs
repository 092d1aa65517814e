//! What the benches share: git run in a fixed environment (no system or global config, fixed
//! identities and dates) and repositories of K commits made by `git fast-import`.
#![allow(dead_code)]

pub mod load;
#[path = "../../tests/it/ports.rs"]
pub mod ports;
pub mod server;

use std::fmt::Write as _;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use berth::ObjectId;

/// `git` in `dir`, isolated from the machine's configuration.
pub fn git(dir: &Path) -> Command {
    let mut c = Command::new("git");
    c.current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "berth bench")
        .env("GIT_AUTHOR_EMAIL", "bench@berth")
        .env("GIT_COMMITTER_NAME", "berth bench")
        .env("GIT_COMMITTER_EMAIL", "bench@berth")
        .env("GIT_AUTHOR_DATE", "1700000000 +0000")
        .env("GIT_COMMITTER_DATE", "1700000000 +0000");
    c
}

/// Run `c` with `stdin`, panicking with its stderr if it fails; its stdout.
pub fn run(mut c: Command, stdin: Option<&[u8]>) -> Vec<u8> {
    let what = format!("{c:?}");
    c.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut child = c.spawn().unwrap_or_else(|e| panic!("{what}: {e}"));
    let writer = stdin.map(|input| {
        let mut pipe = child.stdin.take().expect("stdin");
        let input = input.to_vec();
        std::thread::spawn(move || {
            let _ = pipe.write_all(&input);
        })
    });
    let out = child.wait_with_output().expect("wait");
    if let Some(w) = writer {
        let _ = w.join();
    }
    assert!(
        out.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// What each commit of [`commits`] holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// The empty tree (as `berth bench many-refs` makes them): the walk is commits only.
    EmptyTrees,
    /// Each commit changes one of 100 small files in 10 directories: a new root tree, subtree
    /// and blob per commit, the trees delta-compressed in the pack.
    Files,
}

/// `git init --bare <dir>`.
pub fn init(dir: &Path) {
    let parent = dir.parent().expect("parent");
    let mut c = git(parent);
    c.args(["init", "-q", "--bare"]).arg(dir);
    run(c, None);
}

/// K commits in a line on `refs/heads/main` of the bare repository `repo`, oldest first.
pub fn commits(repo: &Path, k: usize, shape: Shape) -> Vec<ObjectId> {
    commits_on(repo, k, shape, None)
}

/// [`commits`], the first of them on the commit `from` (its tree then carried on) if given.
pub fn commits_on(repo: &Path, k: usize, shape: Shape, from: Option<&str>) -> Vec<ObjectId> {
    let mut stream = String::with_capacity(k * 160);
    for i in 1..=k {
        let _ = write!(
            stream,
            "commit refs/heads/main\nmark :{i}\ncommitter berth bench <bench@berth> 1700000000 +0000\ndata <<EOF\ncommit {i}\nEOF\n"
        );
        if i > 1 {
            let _ = writeln!(stream, "from :{}", i - 1);
        } else if let Some(from) = from {
            let _ = writeln!(stream, "from {from}");
        }
        if shape == Shape::Files {
            let _ = write!(
                stream,
                "M 100644 inline d{}/f{}\ndata <<EOF\ncontent of commit {i}\nEOF\n",
                i % 10,
                i % 100
            );
        }
        stream.push('\n');
    }
    stream.push_str("done\n");
    let mut c = git(repo);
    c.args(["fast-import", "--quiet", "--done", "--export-marks=marks"]);
    run(c, Some(stream.as_bytes()));
    let marks = std::fs::read_to_string(repo.join("marks")).expect("marks");
    let mut out: Vec<(usize, ObjectId)> = marks
        .lines()
        .filter_map(|l| {
            let (m, oid) = l.split_once(' ')?;
            Some((
                m.strip_prefix(':')?.parse().ok()?,
                ObjectId::from_hex(oid.as_bytes()).ok()?,
            ))
        })
        .collect();
    out.sort();
    assert_eq!(out.len(), k, "fast-import made {} commits", out.len());
    out.into_iter().map(|(_, o)| o).collect()
}

/// The pack `git push` would send for `rev` of `repo` to an empty repository.
pub fn pack(repo: &Path, rev: &str) -> Vec<u8> {
    let mut c = git(repo);
    c.args([
        "pack-objects",
        "--stdout",
        "--revs",
        "--delta-base-offset",
        "-q",
    ]);
    run(c, Some(format!("{rev}\n").as_bytes()))
}

/// Median of `times` (sorted in place).
pub fn median(times: &mut [std::time::Duration]) -> std::time::Duration {
    times.sort();
    times[times.len() / 2]
}

/// Copy the directory tree `from` to `to`.
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for e in std::fs::read_dir(from).expect("readdir") {
        let e = e.expect("entry");
        let dest = to.join(e.file_name());
        if e.file_type().expect("type").is_dir() {
            copy_dir(&e.path(), &dest);
        } else {
            std::fs::copy(e.path(), &dest).expect("copy");
        }
    }
}

/// A push of K commits received into a quarantine of an empty repository, as the session has it
/// when the connectivity check starts.
pub struct Walk {
    /// The target repository (`srv.git`).
    pub srv: std::path::PathBuf,
    /// The quarantine holding the received pack.
    pub quarantine: berth::objects::ingest::Quarantine,
    /// What ingestion produced (the pack's index).
    pub received: berth::objects::ingest::Received,
    /// The new ref values (every commit, oldest first, for [`walk_fixture`]).
    pub tips: Vec<ObjectId>,
    /// The number of objects in the pack.
    pub objects: u32,
}

/// Build `src.git` with K commits of `shape` under `dir`, and receive their pack into a
/// quarantine of the empty `srv.git`.
pub fn walk_fixture(dir: &Path, k: usize, shape: Shape) -> Walk {
    let src = dir.join("src.git");
    let srv = dir.join("srv.git");
    init(&src);
    init(&srv);
    let tips = commits(&src, k, shape);
    let pack = pack(&src, "refs/heads/main");
    receive(srv, &mut &pack[..], tips)
}

/// Every branch and tag of the bare repository `repo` pushed to the empty `srv.git` under
/// `dir`: the pack (written to `dir/pack`, not held) received into a quarantine.
pub fn walk_of_repo(dir: &Path, repo: &Path) -> Walk {
    let srv = dir.join("srv.git");
    init(&srv);
    let mut c = git(repo);
    c.args([
        "for-each-ref",
        "--format=%(objectname)",
        "refs/heads/",
        "refs/tags/",
    ]);
    let tips: Vec<ObjectId> = String::from_utf8_lossy(&run(c, None))
        .lines()
        .filter_map(|l| ObjectId::from_hex(l.as_bytes()).ok())
        .collect();
    let path = dir.join("pack");
    let mut po = git(repo)
        .args([
            "pack-objects",
            "--stdout",
            "--revs",
            "--delta-base-offset",
            "-q",
        ])
        .stdin(Stdio::piped())
        .stdout(std::fs::File::create(&path).expect("pack file"))
        .spawn()
        .expect("pack-objects");
    {
        let mut stdin = po.stdin.take().expect("stdin");
        for t in &tips {
            writeln!(stdin, "{t}").expect("write");
        }
    }
    assert!(po.wait().expect("wait").success(), "pack-objects");
    let mut pack = std::io::BufReader::new(std::fs::File::open(&path).expect("pack"));
    let walk = receive(srv, &mut pack, tips);
    let _ = std::fs::remove_file(&path);
    walk
}

fn receive(srv: std::path::PathBuf, pack: &mut dyn std::io::BufRead, tips: Vec<ObjectId>) -> Walk {
    let mut quarantine =
        berth::objects::ingest::Quarantine::create(&srv.join("objects")).expect("quarantine");
    let repo_objects = gix_odb::at(srv.join("objects"), gix_hash::Kind::Sha1).expect("odb");
    let received = berth::objects::ingest::receive_pack(
        pack,
        &mut quarantine,
        &repo_objects,
        berth::objects::ingest::Options {
            unpack_limit: berth::objects::ingest::UNPACK_LIMIT,
            ..Default::default()
        },
    )
    .expect("ingest");
    let objects = received.objects;
    Walk {
        srv,
        quarantine,
        received,
        tips,
        objects,
    }
}

impl Walk {
    /// berth's check, as the session runs it: the quarantine's object database opened, then
    /// all tips checked together (the pass over the received pack, which must vouch for all of
    /// them here), then each checked in the order of the commands.
    pub fn berth(&self) {
        use berth::objects::connectivity::{Check, Status};
        let objects = gix_odb::at(self.quarantine.path(), gix_hash::Kind::Sha1).expect("odb");
        let mut check = Check::new(&objects, self.received.index.as_ref(), std::iter::empty());
        assert!(
            check.self_contained(&self.tips),
            "the pass over the pack cannot vouch for the tips"
        );
        for tip in &self.tips {
            assert_eq!(check.tip(*tip), Status::Connected);
        }
    }

    /// The command git's receive-pack runs for the same check (connected.c, with the
    /// quarantine's environment), with the tips on its stdin.
    pub fn git_command(&self) -> (Command, Vec<u8>) {
        let mut c = git(&self.srv);
        c.args([
            "rev-list",
            "--objects",
            "--stdin",
            "--not",
            "--exclude-hidden=receive",
            "--all",
            "--quiet",
            "--alternate-refs",
        ])
        .env("GIT_DIR", &self.srv)
        .env("GIT_OBJECT_DIRECTORY", self.quarantine.path())
        .env("GIT_QUARANTINE_PATH", self.quarantine.path())
        .env("GIT_ALTERNATE_OBJECT_DIRECTORIES", self.srv.join("objects"));
        let mut stdin = String::with_capacity(self.tips.len() * 41);
        for t in &self.tips {
            let _ = writeln!(stdin, "{t}");
        }
        (c, stdin.into_bytes())
    }

    /// git's check, run once.
    pub fn git(&self) {
        let (c, stdin) = self.git_command();
        run(c, Some(&stdin));
    }
}
