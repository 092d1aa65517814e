//! Crash safety: berth is killed with SIGKILL at hundreds of points of a push, and every time the
//! repository must hold, for every ref, either its value before the push or the value the push
//! gives it (never a third value, never a torn or unreadable ref), every ref must point at a
//! complete object graph (`git fsck --strict`), and the next normal push must succeed.
//!
//! The kill points are syscalls. One traced run of the push (`strace -f -y`) lists every
//! `write`, `openat`, `rename`, `unlink`, `mkdir`, … berth makes, with the file it touches; then
//! the same push is replayed under `strace -e inject=<syscall>:signal=SIGKILL:when=<n>`, which
//! kills the process exactly at the n-th such syscall of the main thread: during ingest (pack
//! and index writes in the quarantine), during the migration out of the quarantine, between a
//! ref's `.lock` and its rename, during the `packed-refs` rewrite, during reflog writes, and in a
//! reftable repository while the new table and `tables.list` are written and compacted. Each
//! scenario's output says how many points were tried, how many really killed berth, and where.
//!
//! Stale locks: git never removes a stale `*.lock` by itself (its message says "remove the file
//! manually to continue"), and neither does berth. When a kill leaves one, the next push is run
//! both through `git receive-pack` (on a copy) and through berth: git refuses exactly the refs
//! whose `<ref>.lock` exists (and every deletion while `packed-refs.lock` exists), and berth must
//! refuse exactly those too (see [`run_point`]); then the locks are removed, as git tells the
//! operator to do, and the push must succeed and leave exactly the refs it pushed. Quarantine directories (`objects/tmp_objdir-incoming-*`) and `.keep` files
//! left by a kill are left alone, as git leaves its own (`git gc` / `git prune` remove them).
#![allow(clippy::type_complexity)]

use crate::common::{PACK_ONE_THREAD_MAIN, World, ZERO, berth, pkt};

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The syscalls a kill point can be placed on.
const SYSCALLS: &[&str] = &[
    "write",
    "pwrite64",
    "openat",
    "rename",
    "renameat",
    "renameat2",
    "unlink",
    "unlinkat",
    "link",
    "linkat",
    "mkdir",
    "mkdirat",
    "fsync",
    "fdatasync",
    "ftruncate",
];

/// How many refs of each kind a scenario has and touches.
struct Shape {
    /// Refs only in `packed-refs` (`refs/heads/p…`).
    packed: usize,
    /// Refs only loose (`refs/heads/l…`).
    loose: usize,
    /// Refs loose with an older value still in `packed-refs` (`refs/heads/d…`).
    both: usize,
    /// New refs the push creates (`refs/heads/new/n…`), each on a new commit.
    create: usize,
    /// Of each kind, how many the push updates (the first ones) ...
    update: usize,
    /// ... and how many it deletes (the last ones).
    delete: usize,
    /// An atomic push.
    atomic: bool,
    /// A reftable repository (the ref kinds are then only names: `pack-refs` compacts the stack).
    reftable: bool,
}

/// One push to crash: a server to start from, the request, and the refs before and after.
struct Scenario {
    name: &'static str,
    /// Every run starts from a copy of this bare repository.
    template: PathBuf,
    /// A work repository whose `refs/heads/*` are what the push means to leave on the server.
    client: PathBuf,
    /// The `--stateless-rpc` request: commands, flush, pack.
    request: PathBuf,
    before: BTreeMap<String, String>,
    after: BTreeMap<String, String>,
    /// Every commit the refs of `after` reach, one id a line (for
    /// [`assert_present_commits_whole`]).
    commits: String,
    reftable: bool,
}

/// A fast-import commit on `refs/heads/<name>` with one file, from `parent` (an id) if any.
fn fi_commit(out: &mut String, name: &str, parent: Option<&str>, content: &str, time: u64) {
    out.push_str(&format!(
        "commit refs/heads/{name}\ncommitter C O Mitter <committer@example.com> {time} +0000\ndata {}\n{content}\n",
        content.len()
    ));
    if let Some(p) = parent {
        out.push_str(&format!("from {p}\n"));
    }
    let file = name.replace('/', "_");
    out.push_str(&format!(
        "M 100644 inline {file}\ndata {}\n{content}\n\n",
        content.len()
    ));
}

fn fast_import(env: &World, repo: &Path, stream: &str) {
    let out = env.git_with_stdin(repo, &["fast-import", "--quiet"], stream.as_bytes());
    assert!(
        out.status.success(),
        "fast-import: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn build(env: &World, name: &'static str, shape: &Shape) -> Scenario {
    let client = env.path(&format!("{name}-client"));
    let template = env.path(&format!("{name}-template.git"));
    env.git(env.root(), &["init", "-q", client.to_str().unwrap()]);
    let format = if shape.reftable {
        "--ref-format=reftable"
    } else {
        "--ref-format=files"
    };
    env.git(
        env.root(),
        &["init", "-q", "--bare", format, template.to_str().unwrap()],
    );
    for (k, v) in [
        ("receive.autogc", "false"),
        ("core.logAllRefUpdates", "true"),
    ] {
        env.git(&template, &["config", k, v]);
    }
    let names = |prefix: &str, n: usize| -> Vec<String> {
        (0..n).map(|i| format!("{prefix}{i:03}")).collect()
    };
    let (packed, loose, both) = (
        names("p", shape.packed),
        names("l", shape.loose),
        names("d", shape.both),
    );
    let mut t = 1_700_000_000;
    let mut tick = || {
        t += 1;
        t
    };

    // Stage 1: main, the packed refs and the refs that will be both; push, pack them.
    let mut s = String::new();
    fi_commit(&mut s, "main", None, "base", tick());
    fast_import(env, &client, &s);
    let base = env.git(&client, &["rev-parse", "main"]).trim().to_owned();
    let mut s = String::new();
    for r in packed.iter().chain(&both) {
        fi_commit(&mut s, r, Some(&base), &format!("{r} v1"), tick());
    }
    fast_import(env, &client, &s);
    let url = template.to_str().unwrap();
    env.git(&client, &["push", "-q", url, "refs/heads/*:refs/heads/*"]);
    env.git(&template, &["pack-refs", "--all"]);

    // Stage 2: the loose refs, and new values of the `both` refs, pushed as loose refs.
    let mut s = String::new();
    for r in &loose {
        fi_commit(&mut s, r, Some(&base), &format!("{r} v1"), tick());
    }
    for r in &both {
        let old = env.git(&client, &["rev-parse", r]).trim().to_owned();
        fi_commit(&mut s, r, Some(&old), &format!("{r} v2"), tick());
    }
    fast_import(env, &client, &s);
    env.git(&client, &["push", "-q", url, "refs/heads/*:refs/heads/*"]);
    let before = env.ref_map(&template);

    // Stage 3: what the push does, in the client.
    let mut s = String::new();
    let mut deletes = Vec::new();
    for kind in [&packed, &loose, &both] {
        for r in kind.iter().take(shape.update) {
            let old = before[&format!("refs/heads/{r}")].clone();
            fi_commit(&mut s, r, Some(&old), &format!("{r} v3"), tick());
        }
        for r in kind.iter().rev().take(shape.delete) {
            deletes.push(format!("delete refs/heads/{r}\n"));
        }
    }
    for r in names("new/n", shape.create) {
        fi_commit(&mut s, &r, Some(&base), &format!("{r} new"), tick());
    }
    fast_import(env, &client, &s);
    let out = env.git_with_stdin(
        &client,
        &["update-ref", "--stdin"],
        deletes.concat().as_bytes(),
    );
    assert!(out.status.success());
    let after = env.ref_map(&client);

    // The request, as a client would send it: one command per changed ref, then the pack.
    let mut caps =
        "report-status side-band-64k quiet object-format=sha1 agent=git/2.47.3".to_owned();
    if shape.atomic {
        caps.push_str(" atomic");
    }
    let names: BTreeSet<&String> = before.keys().chain(after.keys()).collect();
    let mut request = Vec::new();
    let mut revs = String::new();
    for name in names {
        let (old, new) = (before.get(name), after.get(name));
        if old == new {
            continue;
        }
        let old = old.map_or(&*ZERO, |s| s.as_str());
        let new = new.map_or(&*ZERO, |s| s.as_str());
        let line = if request.is_empty() {
            format!("{old} {new} {name}\0{caps}\n")
        } else {
            format!("{old} {new} {name}\n")
        };
        request.extend(pkt(&line));
        if new != &*ZERO {
            revs.push_str(&format!("{new}\n"));
        }
    }
    request.extend_from_slice(b"0000");
    for id in before.values().collect::<BTreeSet<_>>() {
        revs.push_str(&format!("^{id}\n"));
    }
    let pack = env.git_with_stdin(
        &client,
        &["pack-objects", "--stdout", "--revs", "-q"],
        revs.as_bytes(),
    );
    assert!(pack.status.success());
    request.extend_from_slice(&pack.stdout);
    let request_path = env.path(&format!("{name}.request"));
    std::fs::write(&request_path, &request).unwrap();
    let mut tips: Vec<&str> = after.values().map(String::as_str).collect();
    tips.sort_unstable();
    tips.dedup();
    let mut args = vec!["rev-list"];
    args.extend(tips);
    let commits = env.git(&client, &args);
    Scenario {
        name,
        template,
        client,
        request: request_path,
        before,
        after,
        commits,
        reftable: shape.reftable,
    }
}

/// A kill point: the `n`-th `syscall` of berth's main thread, and what it touches.
#[derive(Debug, Clone)]
struct Point {
    syscall: &'static str,
    n: usize,
    site: String,
}

/// One traced run without injection: every syscall of interest the main thread makes, in order.
fn trace(env: &World, sc: &Scenario, work: &Path) -> Vec<(String, String)> {
    let repo = work.join("srv.git");
    copy_repo(&sc.template, &repo);
    let trace = work.join("trace");
    let (status, stdout) = strace_berth(env, sc, &repo, &trace, None);
    assert!(status.success(), "{}: the traced push failed", sc.name);
    assert_full_success(sc, &stdout);
    let text = std::fs::read_to_string(&trace).unwrap();
    let main = text
        .lines()
        .next()
        .and_then(|l| l.split_whitespace().next())
        .unwrap()
        .to_owned();
    text.lines()
        .filter_map(|l| {
            let (pid, rest) = l.split_once(char::is_whitespace)?;
            let rest = rest.trim_start();
            let call = rest.split('(').next()?;
            (pid == main && SYSCALLS.contains(&call)).then(|| (call.to_owned(), site_of(rest)))
        })
        .collect()
}

/// Where a traced syscall line points: the repository-relative file it names or writes to.
fn site_of(line: &str) -> String {
    let mut site = String::new();
    for part in line.split(['<', '>', '"']) {
        if let Some(i) = part.find("srv.git/") {
            if !site.is_empty() {
                site.push_str(" -> ");
            }
            site.push_str(&part[i + "srv.git/".len()..]);
        }
    }
    // One name per quarantine and per temporary file, so sites compare across runs.
    let mut out = String::new();
    for word in site.split('/') {
        if !out.is_empty() {
            out.push('/');
        }
        if let Some(stem) = word.strip_prefix("tmp_objdir-incoming-") {
            let _ = stem;
            out.push_str("tmp_objdir-incoming-*");
        } else {
            out.push_str(word);
        }
    }
    out
}

/// The phase of a push a site belongs to, for the summary.
fn phase(site: &str) -> &'static str {
    if site.contains("tmp_objdir")
        && !site.contains(" -> objects/pack")
        && !site.contains(" -> objects/")
    {
        "ingest (quarantine)"
    } else if site.starts_with("objects/") || site.contains(" -> objects/") {
        "migrate (objects)"
    } else if site.starts_with("reftable/") {
        "reftable stack (table, tables.list, compaction)"
    } else if site.contains("packed-refs") {
        "packed-refs rewrite"
    } else if site.starts_with("logs/") {
        "reflog"
    } else if site.starts_with("refs/") {
        "loose ref (lock, write, rename, unlink)"
    } else {
        "other"
    }
}

fn copy_repo(from: &Path, to: &Path) {
    let _ = std::fs::remove_dir_all(to);
    let st = Command::new("cp")
        .arg("-a")
        .arg(from)
        .arg(to)
        .status()
        .unwrap();
    assert!(st.success());
}

/// Run berth on the scenario's request under strace, killing it at `point` if given.
fn strace_berth(
    env: &World,
    sc: &Scenario,
    repo: &Path,
    trace: &Path,
    point: Option<&Point>,
) -> (std::process::ExitStatus, Vec<u8>) {
    let mut cmd = env.cmd("strace", repo.parent().unwrap());
    cmd.args(["-f", "-qq", "-y", "-o"])
        .arg(trace)
        .arg("-e")
        .arg(format!("trace={}", SYSCALLS.join(",")));
    if let Some(p) = point {
        cmd.arg("-e")
            .arg(format!("inject={}:signal=SIGKILL:when={}", p.syscall, p.n));
    }
    cmd.arg(berth())
        .args(["receive-pack", "--stateless-rpc"])
        .arg(repo)
        .stdin(std::fs::File::open(&sc.request).unwrap())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let out = cmd.output().unwrap();
    (out.status, out.stdout)
}

/// The report of a push that ran to the end: `unpack ok` and `ok` for every command.
fn assert_full_success(sc: &Scenario, stdout: &[u8]) {
    let text = String::from_utf8_lossy(stdout);
    assert!(text.contains("unpack ok\n"), "{}: {text}", sc.name);
    assert!(!text.contains("ng refs/"), "{}: {text}", sc.name);
    let changed = sc
        .before
        .keys()
        .chain(sc.after.keys())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .filter(|n| sc.before.get(*n) != sc.after.get(*n));
    for name in changed {
        assert!(
            text.contains(&format!("ok {name}\n")),
            "{}: no ok for {name}",
            sc.name
        );
    }
}

/// What one kill point did.
struct Outcome {
    killed: bool,
    /// Where berth died (the site of the last traced syscall of the killed thread).
    site: String,
    stale_locks: Vec<String>,
}

/// The `*.lock` files under a repository, relative to it.
fn locks(repo: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![repo.to_owned()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension() == Some(OsStr::new("lock")) {
                found.push(p.strip_prefix(repo).unwrap().display().to_string());
            }
        }
    }
    found.sort();
    found
}

/// `git push --porcelain --force --prune` of the client's branches to `repo` through
/// `receive_pack`; returns success and the refs the push rejected.
fn next_push(
    env: &World,
    sc: &Scenario,
    repo: &Path,
    receive_pack: &str,
) -> (bool, BTreeSet<String>, String) {
    let rp = format!("--receive-pack={receive_pack}");
    let out = env.git_out(
        &sc.client,
        &[
            "push",
            "--porcelain",
            "--force",
            "--prune",
            &rp,
            repo.to_str().unwrap(),
            "refs/heads/*:refs/heads/*",
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let rejected = stdout
        .lines()
        .filter(|l| l.starts_with('!'))
        .filter_map(|l| l.split('\t').nth(1))
        .map(|spec| spec.rsplit(':').next().unwrap().to_owned())
        .collect();
    let text = format!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    (out.status.success(), rejected, text)
}

/// The refs a push of the client's branches changes on a server holding `refs`.
fn commands(sc: &Scenario, refs: &BTreeMap<String, String>) -> BTreeSet<String> {
    sc.after
        .keys()
        .chain(refs.keys())
        .filter(|n| refs.get(*n) != sc.after.get(*n))
        .cloned()
        .collect()
}

/// Every commit of the push that a kill left in `repo` is whole: its tree, blobs and parents are
/// there too. Loose objects move in each after what they link to (`src/objects/move_order.rs`),
/// because berth's walks take an object the repository has as complete: a commit moved in
/// before its tree would let a later push name it with no objects. git's fsck does not see
/// this (it walks only what the refs reach), so it is checked here: the push's commits present
/// are found with `cat-file --batch-check`, then walked with `rev-list --objects`.
fn assert_present_commits_whole(env: &World, sc: &Scenario, repo: &Path, where_: &str) {
    let out = env.git_with_stdin(repo, &["cat-file", "--batch-check"], sc.commits.as_bytes());
    let present: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.ends_with(" missing"))
        .filter_map(|l| l.split(' ').next().map(str::to_owned))
        .collect();
    if present.is_empty() {
        return;
    }
    let mut args = vec!["rev-list", "--objects", "--quiet"];
    args.extend(present.iter().map(String::as_str));
    let out = env.git_out(repo, &args);
    assert!(
        out.status.success(),
        "{where_}: a commit of the push is in the repository without what it links to:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn run_point(env: &World, sc: &Scenario, point: &Point, work: &Path) -> Outcome {
    let repo = work.join("srv.git");
    copy_repo(&sc.template, &repo);
    let trace = work.join("trace");
    let (status, stdout) = strace_berth(env, sc, &repo, &trace, Some(point));
    let killed = status.signal() == Some(9);
    let where_ = format!(
        "{}: {} #{} ({})",
        sc.name, point.syscall, point.n, point.site
    );
    let site = if killed {
        let text = std::fs::read_to_string(&trace).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        let dead = lines
            .iter()
            .rev()
            .find(|l| l.contains("+++ killed by SIGKILL"))
            .and_then(|l| l.split_whitespace().next())
            .unwrap_or_default();
        lines
            .iter()
            .rev()
            .filter(|l| l.split_whitespace().next() == Some(dead))
            .find(|l| !l.contains("+++") && !l.contains("---"))
            .map(|l| site_of(l))
            .unwrap_or_default()
    } else {
        assert!(
            status.success(),
            "{where_}: berth failed without being killed"
        );
        assert_full_success(sc, &stdout);
        String::new()
    };

    // Every ref holds its old or its new value, and git reads every ref.
    let refs = env.ref_map(&repo);
    let names: BTreeSet<&String> = sc
        .before
        .keys()
        .chain(sc.after.keys())
        .chain(refs.keys())
        .collect();
    for name in names {
        let (now, old, new) = (refs.get(name), sc.before.get(name), sc.after.get(name));
        assert!(
            now == old || now == new,
            "{where_}: {name} is {now:?}, neither its old value {old:?} nor its new value {new:?}"
        );
    }
    if let Err(e) = env.fsck(&repo) {
        panic!("{where_}: git fsck --strict after the kill:\n{e}");
    }
    assert_present_commits_whole(env, sc, &repo, &where_);

    // The next push. With a stale lock, berth must refuse what git refuses.
    let stale_locks = locks(&repo);
    let berth_rp = format!("{} receive-pack", berth().display());
    if !stale_locks.is_empty() {
        let now = env.ref_map(&repo);
        let pending = commands(sc, &now);
        // git's rule: a ref whose `<ref>.lock` exists cannot be updated, and no ref can be
        // deleted while `packed-refs.lock` exists. In reftable, nothing can be written while
        // `tables.list.lock` exists (a table's own lock only keeps compaction away).
        let packed_locked = stale_locks.iter().any(|l| l == "packed-refs.lock");
        let stack_locked = stale_locks.iter().any(|l| l == "reftable/tables.list.lock");
        let locked: BTreeSet<String> = pending
            .iter()
            .filter(|r| {
                if sc.reftable {
                    return stack_locked;
                }
                stale_locks.contains(&format!("{r}.lock"))
                    || (packed_locked && !sc.after.contains_key(*r))
            })
            .cloned()
            .collect();
        let copy = work.join("git.git");
        copy_repo(&repo, &copy);
        let (_, git_rejected, git_text) = next_push(env, sc, &copy, "git-receive-pack");
        let (_, berth_rejected, berth_text) = next_push(env, sc, &repo, &berth_rp);
        // git receive-pack follows that rule (when it gets to the ref updates at all: after a
        // kill between migration and the ref update it may refuse the re-sent pack).
        if !git_text.contains("unable to migrate objects") {
            assert_eq!(
                git_rejected, locked,
                "{where_}: with stale {stale_locks:?} git refused other refs than expected\n{git_text}"
            );
        }
        // berth refuses exactly those refs too.
        assert_eq!(
            berth_rejected, locked,
            "{where_}: with stale {stale_locks:?}, berth and git refused different refs\n\
             --- git:\n{git_text}\n--- berth:\n{berth_text}"
        );
        for l in &stale_locks {
            std::fs::remove_file(repo.join(l)).unwrap();
        }
    }
    let (ok, rejected, text) = next_push(env, sc, &repo, &berth_rp);
    assert!(
        ok && rejected.is_empty(),
        "{where_}: the next push failed:\n{text}"
    );
    assert_eq!(
        env.ref_map(&repo),
        sc.after,
        "{where_}: refs after the next push"
    );
    if let Err(e) = env.fsck(&repo) {
        panic!("{where_}: git fsck --strict after the next push:\n{e}");
    }
    assert_eq!(
        locks(&repo),
        Vec::<String>::new(),
        "{where_}: locks after the next push"
    );
    Outcome {
        killed,
        site,
        stale_locks,
    }
}

/// Pick about `budget` kill points from the traced syscalls, each counted per syscall as strace
/// counts them: the renames, unlinks, links and syncs (where a file becomes visible or goes away)
/// get up to half the budget, `write`, `openat` and `mkdir` the rest, spread evenly over the push.
fn choose(calls: &[(String, String)], budget: usize) -> Vec<Point> {
    let mut per: BTreeMap<&'static str, Vec<(usize, &str)>> = BTreeMap::new();
    for (call, site) in calls {
        let call: &'static str = SYSCALLS.iter().find(|s| *s == call).unwrap();
        let list = per.entry(call).or_default();
        let n = list.len() + 1;
        list.push((n, site.as_str()));
    }
    let critical = |c: &str| !matches!(c, "write" | "pwrite64" | "openat" | "mkdir" | "mkdirat");
    let spread = |list: &[(usize, &str)], call: &'static str, k: usize, out: &mut Vec<Point>| {
        let k = k.clamp(1, list.len());
        for j in 0..k {
            let (n, site) = list[j * list.len() / k];
            out.push(Point {
                syscall: call,
                n,
                site: site.to_owned(),
            });
        }
    };
    let mut points = Vec::new();
    for (group, share) in [(true, budget / 2), (false, 0)] {
        let share = if group {
            share
        } else {
            budget.saturating_sub(points.len())
        };
        let lists: Vec<_> = per.iter().filter(|(c, _)| critical(c) == group).collect();
        let total: usize = lists.iter().map(|(_, l)| l.len()).sum();
        for (call, list) in lists {
            spread(
                list,
                call,
                (share * list.len()).div_ceil(total.max(1)),
                &mut points,
            );
        }
    }
    points
}

fn crash_sweep(name: &'static str, shape: Shape, budget: usize) -> usize {
    let start = std::time::Instant::now();
    let env = World::fixed_clock("berth-crash-", PACK_ONE_THREAD_MAIN);
    let sc = build(&env, name, &shape);
    let work0 = env.path("work-trace");
    std::fs::create_dir(&work0).unwrap();
    let calls = trace(&env, &sc, &work0);
    // CRASH_BUDGET=<n> overrides the number of kill points (for quick local runs).
    let budget = std::env::var("CRASH_BUDGET")
        .ok()
        .and_then(|b| b.parse().ok())
        .unwrap_or(budget);
    let points = choose(&calls, budget);
    let next = AtomicUsize::new(0);
    let outcomes = Mutex::new(Vec::new());
    let workers = std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .min(4);
    std::thread::scope(|s| {
        for w in 0..workers {
            let (env, sc, points, next, outcomes) = (&env, &sc, &points, &next, &outcomes);
            s.spawn(move || {
                let work = env.path(&format!("work-{w}"));
                std::fs::create_dir(&work).unwrap();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(p) = points.get(i) else { break };
                    let t = std::time::Instant::now();
                    let o = run_point(env, sc, p, &work);
                    if std::env::var_os("CRASH_VERBOSE").is_some() {
                        eprintln!(
                            "{} #{} {:?} {:?} {:?}",
                            p.syscall,
                            p.n,
                            t.elapsed(),
                            o.site,
                            o.stale_locks
                        );
                    }
                    outcomes.lock().unwrap().push(o);
                }
            });
        }
    });
    let outcomes = outcomes.into_inner().unwrap();
    let hit = outcomes.iter().filter(|o| o.killed).count();
    let mut by_phase: BTreeMap<&str, usize> = BTreeMap::new();
    for o in outcomes.iter().filter(|o| o.killed) {
        *by_phase.entry(phase(&o.site)).or_default() += 1;
    }
    let stale: usize = outcomes
        .iter()
        .filter(|o| !o.stale_locks.is_empty())
        .count();
    let mut stale_files: BTreeMap<String, usize> = BTreeMap::new();
    for o in &outcomes {
        for l in &o.stale_locks {
            let key = if l.starts_with("refs/") {
                "refs/**/*.lock".to_owned()
            } else if l.starts_with("logs/") {
                "logs/**/*.lock".to_owned()
            } else {
                l.clone()
            };
            *stale_files.entry(key).or_default() += 1;
        }
    }
    println!(
        "crash sweep {name}: {} syscalls traced, {} kill points tried, {hit} hit (berth died there), \
         {} ran to completion; by phase: {by_phase:?}; {stale} left stale locks {stale_files:?}, \
         berth refused the same refs as git receive-pack in each; \
         the next push succeeded once the locks were removed; {:.1?}",
        calls.len(),
        outcomes.len(),
        outcomes.len() - hit,
        start.elapsed()
    );
    hit
}

#[test]
fn kill_anywhere_in_a_large_push() {
    // 300 creates (one packed-refs rewrite), updates and deletions of packed, loose and
    // loose-over-packed refs, a pack of ~1000 objects kept as a pack.
    let hit = crash_sweep(
        "large",
        Shape {
            packed: 40,
            loose: 30,
            both: 20,
            create: 300,
            update: 10,
            delete: 10,
            atomic: false,
            reftable: false,
        },
        130,
    );
    assert!(hit >= 115, "only {hit} kill points hit");
}

#[test]
fn kill_anywhere_in_a_small_push() {
    // A few refs of each kind (one loose ref file each), a pack small enough to become loose
    // objects.
    let hit = crash_sweep(
        "small",
        Shape {
            packed: 8,
            loose: 8,
            both: 6,
            create: 4,
            update: 3,
            delete: 2,
            atomic: false,
            reftable: false,
        },
        95,
    );
    assert!(hit >= 85, "only {hit} kill points hit");
}

#[test]
fn kill_anywhere_in_a_reftable_push() {
    // Creates, updates and deletions in a reftable repository whose stack holds a compacted
    // table and a newer one: the push writes one table, and its compaction rewrites the stack.
    let hit = crash_sweep(
        "reftable",
        Shape {
            packed: 20,
            loose: 10,
            both: 6,
            create: 40,
            update: 5,
            delete: 4,
            atomic: false,
            reftable: true,
        },
        60,
    );
    assert!(hit >= 50, "only {hit} kill points hit");
}
