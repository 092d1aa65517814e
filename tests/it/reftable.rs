//! The reftable module against real git: tables git writes are read by berth exactly as
//! `git for-each-ref` lists them; tables berth writes are read by git (`for-each-ref`,
//! `show-ref`, `reflog`, `fsck`, `refs verify`) without complaint; for the same records berth's
//! table bytes equal git's; corrupt tables give errors, never panics.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use berth::ObjectId;
use berth::reftable::{
    LogRecord, LogUpdate, LogValue, RefRecord, RefValue, Stack, Table, WriteOptions,
    table::write_table,
};
use gix_object::bstr::{BString, ByteSlice};

fn git_cmd(dir: &Path) -> Command {
    let mut c = Command::new("git");
    c.current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("HOME", dir)
        .env("GIT_AUTHOR_NAME", "A U Thor")
        .env("GIT_AUTHOR_EMAIL", "author@example.com")
        .env("GIT_COMMITTER_NAME", "C O Mitter")
        .env("GIT_COMMITTER_EMAIL", "committer@example.com")
        .env("GIT_AUTHOR_DATE", "1700000000 +0130")
        .env("GIT_COMMITTER_DATE", "1700000000 +0130")
        .env_remove("GIT_DIR")
        .env_remove("GIT_TEST_REFTABLE_AUTOCOMPACTION");
    c
}

fn git_ok(dir: &Path, args: &[&str], stdin: Option<&str>) -> String {
    use std::io::Write;
    let mut c = git_cmd(dir);
    c.args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = c.spawn().expect("spawn git");
    let input = stdin.unwrap_or("").to_owned();
    let mut pipe = child.stdin.take().expect("stdin");
    let writer = std::thread::spawn(move || {
        let _ = pipe.write_all(input.as_bytes());
    });
    let out = child.wait_with_output().expect("git output");
    writer.join().expect("stdin writer");
    assert!(
        out.status.success(),
        "git {args:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("error") && !stderr.contains("warning"),
        "git {args:?} complained: {stderr}"
    );
    String::from_utf8(out.stdout).expect("utf8")
}

fn oid(hex: &str) -> ObjectId {
    ObjectId::from_hex(hex.trim().as_bytes()).expect("hex oid")
}

/// The object format of the tests' repositories: `BERTH_TEST_OBJECT_FORMAT` (`sha256`), as in
/// the push suites' harness, else SHA-1. The round trips below also run on SHA-256 always.
fn test_hash() -> gix_hash::Kind {
    match std::env::var("BERTH_TEST_OBJECT_FORMAT").as_deref() {
        Ok("sha256") => gix_hash::Kind::Sha256,
        _ => gix_hash::Kind::Sha1,
    }
}

fn init(dir: &Path, bare: bool) -> PathBuf {
    init_in(dir, bare, test_hash())
}

/// A reftable repository `repo` in `dir` whose object format is `hash`.
fn init_in(dir: &Path, bare: bool, hash: gix_hash::Kind) -> PathBuf {
    let format = match hash {
        gix_hash::Kind::Sha1 => "--object-format=sha1",
        _ => "--object-format=sha256",
    };
    let mut args = vec!["init", "-q", "--ref-format=reftable", format, "-b", "main"];
    if bare {
        args.push("--bare");
    }
    args.push("repo");
    git_ok(dir, &args, None);
    let repo = dir.join("repo");
    if bare { repo } else { repo.join(".git") }
}

/// A commit (and an annotated tag pointing at it) in `git_dir`.
fn objects(git_dir: &Path) -> (ObjectId, ObjectId) {
    let tree = git_ok(git_dir, &["mktree"], Some(""));
    let commit = git_ok(git_dir, &["commit-tree", "-m", "c", tree.trim()], None);
    let tag_text = format!(
        "object {}type commit\ntag v-annotated\ntagger T <t@example.com> 1700000000 +0000\n\nmsg\n",
        commit
    );
    let tag = git_ok(git_dir, &["mktag"], Some(&tag_text));
    (oid(&commit), oid(&tag))
}

/// berth's merged view, symrefs resolved, as `(objectname, refname)` lines like for-each-ref
/// prints (HEAD and refs outside `refs/` left out).
fn berth_for_each_ref(stack: &Stack) -> String {
    let refs: BTreeMap<BString, RefValue> = stack.refs().unwrap().into_iter().collect();
    let mut out = String::new();
    for (name, value) in &refs {
        if !name.starts_with(b"refs/") {
            continue;
        }
        let mut v = value.clone();
        for _ in 0..5 {
            match v {
                RefValue::Symref(t) => v = refs.get(&t).cloned().unwrap_or(RefValue::Deletion),
                _ => break,
            }
        }
        let id = match v {
            RefValue::Val1(id) | RefValue::Val2(id, _) => id,
            _ => continue,
        };
        out.push_str(&format!("{id} {name}\n"));
    }
    out
}

fn peeled_lines(stack: &Stack) -> String {
    let mut out = String::new();
    for (name, v) in stack.refs().unwrap() {
        if let RefValue::Val2(id, peeled) = v {
            out.push_str(&format!("{id} {peeled} {name}\n"));
        }
    }
    out
}

fn git_peeled_lines(git_dir: &Path) -> String {
    git_ok(
        git_dir,
        &[
            "for-each-ref",
            "--format=%(objectname) %(*objectname) %(refname)",
        ],
        None,
    )
    .lines()
    .filter(|l| l.split(' ').nth(1).is_some_and(|p| !p.is_empty()))
    .map(|l| format!("{l}\n"))
    .collect()
}

const FOR_EACH_REF: &[&str] = &["for-each-ref", "--format=%(objectname) %(refname)"];

#[test]
fn tables_written_by_git_read_like_for_each_ref() {
    git_tables_read_like_for_each_ref(test_hash());
}

/// git's SHA-256 tables (version 2, hash id `s256`, 32-byte values).
#[test]
fn sha256_tables_written_by_git_read_like_for_each_ref() {
    git_tables_read_like_for_each_ref(gix_hash::Kind::Sha256);
}

fn git_tables_read_like_for_each_ref(hash: gix_hash::Kind) {
    let tmp = tempfile::tempdir().unwrap();
    let git_dir = init_in(tmp.path(), false, hash);
    let work = git_dir.parent().unwrap().to_owned();
    git_ok(&work, &["commit", "-q", "--allow-empty", "-m", "one"], None);
    git_ok(&work, &["commit", "-q", "--allow-empty", "-m", "two"], None);
    let head = git_ok(&work, &["rev-parse", "HEAD"], None);
    let mut script = String::new();
    for i in 0..700 {
        script.push_str(&format!("create refs/heads/topic/{i:04} {}", head));
    }
    git_ok(&work, &["update-ref", "--stdin"], Some(&script));
    for i in 0..40 {
        git_ok(
            &work,
            &["tag", "-a", "-m", "annotated", &format!("v1.{i}")],
            None,
        );
    }
    git_ok(&work, &["tag", "light"], None);
    git_ok(
        &work,
        &["symbolic-ref", "refs/heads/alias", "refs/heads/main"],
        None,
    );
    for i in (0..700).step_by(7) {
        git_ok(
            &work,
            &["update-ref", "-d", &format!("refs/heads/topic/{i:04}")],
            None,
        );
    }
    git_ok(
        &work,
        &[
            "update-ref",
            "-m",
            "moved",
            "refs/heads/topic/0001",
            "HEAD~1",
        ],
        None,
    );

    let reftable = git_dir.join("reftable");
    let check = |stage: &str| {
        let stack = Stack::open(&reftable).unwrap();
        assert_eq!(
            berth_for_each_ref(&stack),
            git_ok(&work, FOR_EACH_REF, None),
            "{stage}: refs differ"
        );
        let peeled = peeled_lines(&stack);
        assert_eq!(
            peeled.lines().count(),
            40,
            "{stage}: annotated tags are peeled"
        );
        assert_eq!(
            peeled,
            git_peeled_lines(&work),
            "{stage}: peeled values differ"
        );
        assert_eq!(
            stack.read_ref(b"HEAD").unwrap(),
            Some(RefValue::Symref("refs/heads/main".into()))
        );
        assert_eq!(
            stack.read_ref(b"refs/heads/alias").unwrap(),
            Some(RefValue::Symref("refs/heads/main".into()))
        );
        assert_eq!(
            stack.read_ref(b"refs/heads/topic/0007").unwrap(),
            None,
            "deleted"
        );
        assert_eq!(
            stack.read_ref(b"refs/heads/topic/0002").unwrap(),
            Some(RefValue::Val1(oid(&head)))
        );
        for t in stack.tables() {
            t.verify().unwrap();
        }
        // Reflogs: the entries git shows for topic/0001 and main, newest first.
        let logs = stack.logs().unwrap();
        for r in ["refs/heads/topic/0001", "refs/heads/main"] {
            let ours: Vec<String> = logs
                .iter()
                .filter(|l| l.refname == r)
                .map(|l| match &l.value {
                    LogValue::Update(u) => {
                        format!("{} {}", u.new, u.message.trim_end().to_str_lossy())
                    }
                    LogValue::Deletion => unreachable!("tombstones are filtered"),
                })
                .collect();
            let git = git_ok(&work, &["log", "-g", "--format=%H %gs", r], None);
            let git: Vec<String> = git.lines().map(|l| l.trim_end().to_owned()).collect();
            let ours: Vec<String> = ours.iter().map(|l| l.trim_end().to_owned()).collect();
            assert!(!ours.is_empty(), "{stage}: {r} has a reflog");
            assert_eq!(ours, git, "{stage}: reflog of {r}");
        }
        stack.tables().len()
    };
    let before = check("stack as git left it");
    assert!(before >= 1);
    git_ok(&work, &["pack-refs", "--all"], None);
    assert_eq!(check("after git pack-refs"), 1);
}

fn sample_records(commit: ObjectId, tag: ObjectId, n: usize) -> Vec<RefRecord<'static>> {
    let mut refs = Vec::new();
    for i in 0..n {
        refs.push(RefRecord {
            name: BString::from(format!("refs/heads/branch-{i:05}")).into(),
            update_index: 0,
            value: RefValue::Val1(commit),
        });
    }
    for i in 0..n / 10 + 1 {
        refs.push(RefRecord {
            name: BString::from(format!("refs/tags/v{i}")).into(),
            update_index: 0,
            value: RefValue::Val2(tag, commit),
        });
    }
    refs.push(RefRecord {
        name: BString::from("refs/heads/alias").into(),
        update_index: 0,
        value: RefValue::Symref("refs/heads/branch-00001".into()),
    });
    refs
}

fn log_entry(name: &str, old: ObjectId, new: ObjectId, msg: &str) -> LogRecord {
    LogRecord {
        refname: name.into(),
        update_index: 0,
        value: LogValue::Update(LogUpdate {
            old,
            new,
            name: "C O Mitter".into(),
            email: "committer@example.com".into(),
            time: 1_700_000_000,
            tz_offset: 130,
            message: msg.into(),
        }),
    }
}

#[test]
fn tables_written_by_berth_are_read_by_git() {
    berth_tables_read_by_git(test_hash());
}

/// SHA-256 tables berth writes (on the stack git's `init` started) pass `git fsck` and
/// `git refs verify --strict`, and read as berth reads them.
#[test]
fn sha256_tables_written_by_berth_are_read_by_git() {
    berth_tables_read_by_git(gix_hash::Kind::Sha256);
}

fn berth_tables_read_by_git(hash: gix_hash::Kind) {
    let tmp = tempfile::tempdir().unwrap();
    let git_dir = init_in(tmp.path(), true, hash);
    let (commit, tag) = objects(&git_dir);
    assert_eq!(commit.kind(), hash);
    let null = ObjectId::null(hash);
    let mut stack = Stack::open(git_dir.join("reftable")).unwrap();
    let mut refs = sample_records(commit, tag, 2000);
    refs.push(RefRecord {
        name: BString::from("refs/heads/main").into(),
        update_index: 0,
        value: RefValue::Val1(commit),
    });
    let logs = vec![
        log_entry("refs/heads/main", null, commit, "push: created"),
        log_entry("refs/heads/branch-00001", null, commit, "push\n"),
    ];
    let ts = stack.add(&refs, &logs).unwrap();
    assert_eq!(ts, 2, "git init wrote update index 1");
    // A second transaction: delete some refs (tombstones), update one.
    let deletions: Vec<RefRecord> = (0..2000)
        .step_by(3)
        .map(|i| RefRecord {
            name: BString::from(format!("refs/heads/branch-{i:05}")).into(),
            update_index: 0,
            value: RefValue::Deletion,
        })
        .collect();
    stack
        .add(
            &deletions,
            &[LogRecord {
                refname: "refs/heads/branch-00001".into(),
                update_index: 0,
                value: LogValue::Update(LogUpdate {
                    message: "second".into(),
                    ..match &logs[1].value {
                        LogValue::Update(u) => u.clone(),
                        LogValue::Deletion => unreachable!(),
                    }
                }),
            }],
        )
        .unwrap();

    let want = berth_for_each_ref(&stack);
    assert_eq!(git_ok(&git_dir, FOR_EACH_REF, None), want);
    // 2000 branches less 667 deleted, 201 tags, main, the alias.
    assert_eq!(want.lines().count(), 2000 - 667 + 201 + 1 + 1);
    let show_ref = git_ok(&git_dir, &["show-ref", "-d"], None);
    assert_eq!(show_ref.lines().filter(|l| l.ends_with("^{}")).count(), 201);
    assert!(show_ref.contains(&format!("{commit} refs/tags/v7^{{}}")));
    git_ok(&git_dir, &["fsck", "--no-dangling"], None);
    git_ok(&git_dir, &["refs", "verify", "--strict"], None);
    assert_eq!(
        git_ok(&git_dir, &["symbolic-ref", "refs/heads/alias"], None).trim(),
        "refs/heads/branch-00001"
    );
    let reflog = git_ok(
        &git_dir,
        &[
            "log",
            "-g",
            "--format=%H %gs %gn <%ge>",
            "refs/heads/branch-00001",
        ],
        None,
    );
    assert_eq!(
        reflog,
        format!(
            "{commit} second C O Mitter <committer@example.com>\n\
             {commit} push C O Mitter <committer@example.com>\n"
        )
    );
    // git writes on top of berth's stack, and berth reads the result.
    git_ok(
        &git_dir,
        &["update-ref", "refs/heads/from-git", &commit.to_string()],
        None,
    );
    git_ok(&git_dir, &["pack-refs", "--all"], None);
    stack.reload().unwrap();
    assert_eq!(
        berth_for_each_ref(&stack),
        git_ok(&git_dir, FOR_EACH_REF, None)
    );
}

/// The newest table of a stack, by update index range.
fn only_table(reftable: &Path) -> (String, Vec<u8>) {
    let list = std::fs::read_to_string(reftable.join("tables.list")).unwrap();
    let names: Vec<&str> = list.lines().collect();
    assert_eq!(names.len(), 1, "git compacted to one table: {names:?}");
    (
        names[0].to_owned(),
        std::fs::read(reftable.join(names[0])).unwrap(),
    )
}

fn first_difference(a: &[u8], b: &[u8]) -> String {
    match a.iter().zip(b).position(|(x, y)| x != y) {
        Some(i) => format!("first difference at byte {i} of {}/{}", a.len(), b.len()),
        None => format!("lengths {} and {}", a.len(), b.len()),
    }
}

#[test]
fn berth_tables_equal_gits_byte_for_byte() {
    tables_equal_gits_byte_for_byte(test_hash());
}

/// The same for SHA-256 tables: version 2 with git's header and footer.
#[test]
fn sha256_berth_tables_equal_gits_byte_for_byte() {
    tables_equal_gits_byte_for_byte(gix_hash::Kind::Sha256);
}

fn tables_equal_gits_byte_for_byte(hash: gix_hash::Kind) {
    // (refs, some annotated tags, reftable.blockSize, reftable.restartInterval)
    let cases = [
        (3usize, false, 4096u32, 16u16),
        (200, true, 4096, 16),
        (1500, true, 4096, 16),
        (40_000, false, 4096, 16),
        // Small blocks: a multi-level ref index, obj records too big for a block (stored without
        // offsets, as git does).
        (5000, true, 256, 5),
        (3000, false, 8192, 64),
    ];
    for (n, annotated, block_size, restart_interval) in cases {
        let opts = WriteOptions {
            block_size,
            restart_interval,
            hash,
            ..WriteOptions::default()
        };
        let tmp = tempfile::tempdir().unwrap();
        let git_dir = init_in(tmp.path(), true, hash);
        let (commit, tag) = objects(&git_dir);
        let mut refs = Vec::new();
        let mut script = String::new();
        for i in 0..n {
            // Distinct object ids spread the obj index; reuse two real objects for values.
            let (name, value) = if annotated && i % 5 == 0 {
                (format!("refs/tags/t{i:06}"), RefValue::Val2(tag, commit))
            } else {
                (format!("refs/heads/h/{i:06}"), RefValue::Val1(commit))
            };
            let target = match &value {
                RefValue::Val2(t, _) => *t,
                RefValue::Val1(c) => *c,
                _ => unreachable!(),
            };
            script.push_str(&format!("create {name} {target}\n"));
            refs.push(RefRecord {
                name: BString::from(name).into(),
                update_index: 2,
                value,
            });
        }
        let bs = format!("reftable.blockSize={block_size}");
        let ri = format!("reftable.restartInterval={restart_interval}");
        git_ok(
            &git_dir,
            &["-c", &bs, "-c", &ri, "update-ref", "--stdin"],
            Some(&script),
        );
        let (git_name, git_bytes) = only_table(&git_dir.join("reftable"));
        assert!(
            git_name.starts_with("0x000000000001-0x000000000002-"),
            "{git_name}"
        );
        refs.push(RefRecord {
            name: BString::from("HEAD").into(),
            update_index: 1,
            value: RefValue::Symref("refs/heads/main".into()),
        });
        refs.sort_by(|a, b| a.name.cmp(&b.name));
        let (ours, empty) = write_table(opts, 1, 2, &refs, &[]).unwrap();
        assert!(!empty);
        let table = Table::from_bytes("git", git_bytes.clone()).unwrap();
        assert_eq!(table.refs().unwrap(), refs, "berth reads git's table");
        for r in refs.iter().step_by(97) {
            assert_eq!(table.read_ref(&r.name).unwrap().as_ref(), Some(r), "lookup");
        }
        assert_eq!(table.read_ref(b"refs/heads/zzz").unwrap(), None);
        assert_eq!(table.read_ref(b"A").unwrap(), None);
        println!(
            "{n} refs, block size {block_size}: git's table {} bytes, ref index at {}, obj section {:?}; berth's {} bytes",
            git_bytes.len(),
            table.ref_index_offset(),
            table.obj_section(),
            ours.len()
        );
        assert!(
            ours == git_bytes,
            "{n} refs: berth's table differs from git's: {}",
            first_difference(&ours, &git_bytes)
        );
    }
}

#[test]
fn berth_log_tables_compared_with_gits() {
    // A non-bare repository writes reflogs: one transaction creates refs with log records.
    let tmp = tempfile::tempdir().unwrap();
    let git_dir = init(tmp.path(), false);
    let (commit, _) = objects(&git_dir);
    let null = ObjectId::null(test_hash());
    let n = 300;
    let mut script = String::new();
    let mut refs = Vec::new();
    let mut logs = Vec::new();
    for i in 0..n {
        let name = format!("refs/heads/b{i:04}");
        script.push_str(&format!("create {name} {commit}\n"));
        refs.push(RefRecord {
            name: BString::from(name.clone()).into(),
            update_index: 2,
            value: RefValue::Val1(commit),
        });
        let mut l = log_entry(&name, null, commit, "msg\n");
        l.update_index = 2;
        logs.push(l);
    }
    git_ok(
        &git_dir,
        &["update-ref", "-m", "msg", "--stdin"],
        Some(&script),
    );
    let (_, git_bytes) = only_table(&git_dir.join("reftable"));
    refs.push(RefRecord {
        name: BString::from("HEAD").into(),
        update_index: 1,
        value: RefValue::Symref("refs/heads/main".into()),
    });
    refs.sort_by(|a, b| a.name.cmp(&b.name));
    let git_table = Table::from_bytes("git", git_bytes.clone()).unwrap();
    assert_eq!(
        git_table.logs().unwrap(),
        logs,
        "berth reads git's log records"
    );
    let opts = WriteOptions {
        hash: test_hash(),
        ..WriteOptions::default()
    };
    let (ours, _) = write_table(opts, 1, 2, &refs, &logs).unwrap();
    let our_table = Table::from_bytes("berth", ours.clone()).unwrap();
    assert_eq!(our_table.refs().unwrap(), git_table.refs().unwrap());
    assert_eq!(our_table.logs().unwrap(), logs);
    if ours == git_bytes {
        println!("log table: byte-identical ({} bytes)", ours.len());
    } else {
        // Log blocks are zlib streams: git links the system zlib, berth uses zlib-rs, whose
        // level-9 output may differ. Everything outside the deflated payloads must be equal.
        let log_start = git_bytes.windows(4).position(|w| w[0] == b'g').unwrap_or(0);
        println!(
            "log table: {} bytes from git, {} from berth; {} (ref section identical: {})",
            git_bytes.len(),
            ours.len(),
            first_difference(&ours, &git_bytes),
            ours[..log_start.min(ours.len())] == git_bytes[..log_start]
        );
    }
}

#[test]
fn ten_thousand_refs_in_one_table_fast() {
    let commit = oid("766b6579bab3caf736a4c65d66f50419cadd926f");
    let refs: Vec<RefRecord> = (0..10_000)
        .map(|i| RefRecord {
            name: BString::from(format!("refs/heads/branch-{i:05}")).into(),
            update_index: 1,
            value: RefValue::Val1(commit),
        })
        .collect();
    let start = Instant::now();
    let (bytes, _) = write_table(WriteOptions::default(), 1, 1, &refs, &[]).unwrap();
    let write = start.elapsed();
    let start = Instant::now();
    let table = Table::from_bytes("t", bytes.clone()).unwrap();
    let read = table.refs().unwrap();
    let read_time = start.elapsed();
    assert_eq!(read, refs);

    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("reftable");
    std::fs::create_dir(&dir).unwrap();
    let mut stack = Stack::open(&dir).unwrap();
    let start = Instant::now();
    stack.add(&refs, &[]).unwrap();
    let add = start.elapsed();
    println!(
        "10,000 refs: table of {} bytes written in {:?}, read in {:?}; Stack::add (fsync included) {:?}",
        bytes.len(),
        write,
        read_time,
        add
    );
    if !cfg!(debug_assertions) {
        assert!(write.as_millis() < 50, "writing took {write:?}");
    }
}

#[test]
fn corrupt_git_tables_give_errors_not_panics() {
    let tmp = tempfile::tempdir().unwrap();
    let git_dir = init(tmp.path(), false);
    let work = git_dir.parent().unwrap().to_owned();
    git_ok(&work, &["commit", "-q", "--allow-empty", "-m", "one"], None);
    let head = git_ok(&work, &["rev-parse", "HEAD"], None);
    let mut script = String::new();
    for i in 0..400 {
        script.push_str(&format!("create refs/heads/x{i:04} {head}"));
    }
    git_ok(
        &work,
        &["update-ref", "-m", "bulk", "--stdin"],
        Some(&script),
    );
    git_ok(&work, &["tag", "-a", "-m", "t", "v1"], None);
    git_ok(&work, &["pack-refs", "--all"], None);
    let (_, bytes) = only_table(&git_dir.join("reftable"));
    let good = Table::from_bytes("good", bytes.clone()).unwrap();
    good.verify().unwrap();
    let exercise = |data: Vec<u8>| -> bool {
        match Table::from_bytes("bad", data) {
            Ok(t) => {
                let a = t.refs().is_ok();
                let b = t.logs().is_ok();
                let c = t.read_ref(b"refs/heads/x0200").is_ok();
                let d = t.verify().is_ok();
                let _ = t.objects();
                a && b && c && d
            }
            Err(e) => {
                assert!(e.to_string().contains("bad"), "error names the table: {e}");
                false
            }
        }
    };
    for len in 0..bytes.len() {
        assert!(
            !exercise(bytes[..len].to_vec()),
            "prefix of {len} bytes accepted"
        );
    }
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut rejected = 0;
    let flips = 3000;
    for _ in 0..flips {
        let mut data = bytes.clone();
        for _ in 0..1 + (seed % 3) {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let at = (seed % data.len() as u64) as usize;
            data[at] ^= 1 << (seed >> 60 & 7);
        }
        if !exercise(data) {
            rejected += 1;
        }
    }
    println!("random flips: {rejected} of {flips} corrupted tables rejected, none panicked");
}

#[test]
fn stack_auto_compacts_like_git_and_interleaves_with_git_writers() {
    let tmp = tempfile::tempdir().unwrap();
    let git_dir = init(tmp.path(), true);
    let (commit, tag) = objects(&git_dir);
    let reftable = git_dir.join("reftable");
    let mut stack = Stack::open(&reftable).unwrap();
    let twin_tmp = tempfile::tempdir().unwrap();
    let twin = init(twin_tmp.path(), true);
    objects(&twin);
    let mut git_writes = 0;
    for i in 0..40 {
        let value = if i % 2 == 0 {
            RefValue::Val1(commit)
        } else {
            RefValue::Val2(tag, commit)
        };
        let ts = stack
            .add(
                &[RefRecord {
                    name: if i % 2 == 0 {
                        BString::from(format!("refs/heads/t{i:02}")).into()
                    } else {
                        BString::from(format!("refs/tags/t{i:02}")).into()
                    },
                    update_index: 0,
                    value,
                }],
                &[],
            )
            .unwrap();
        assert_eq!(ts, i + 2 + git_writes, "one update index per transaction");
        let (name, target) = if i % 2 == 0 {
            (format!("refs/heads/t{i:02}"), commit)
        } else {
            (format!("refs/tags/t{i:02}"), tag)
        };
        git_ok(&twin, &["update-ref", &name, &target.to_string()], None);
        if i % 10 == 5 {
            // git writes between berth's transactions.
            git_ok(
                &git_dir,
                &[
                    "update-ref",
                    &format!("refs/heads/g{i}"),
                    &commit.to_string(),
                ],
                None,
            );
            git_writes += 1;
            git_ok(
                &twin,
                &[
                    "update-ref",
                    &format!("refs/heads/g{i}"),
                    &commit.to_string(),
                ],
                None,
            );
        }
        let list = std::fs::read_to_string(reftable.join("tables.list")).unwrap();
        // git's geometric rule keeps the stack logarithmic.
        assert!(list.lines().count() <= 6, "after {i}: {list}");
        for name in list.lines() {
            let ok = name.len() == "0x000000000001-0x000000000002-12345678.ref".len()
                && name.starts_with("0x")
                && name.ends_with(".ref");
            assert!(ok, "git's naming: {name}");
        }
        assert!(
            !stack.compaction_required(),
            "after {i}: auto-compaction left nothing to do"
        );
    }
    // The same transactions done by git alone leave the same stack, table for table, byte for
    // byte (names differ only in their random part).
    let stack_of = |dir: &Path| -> Vec<(String, Vec<u8>)> {
        let list = std::fs::read_to_string(dir.join("reftable/tables.list")).unwrap();
        list.lines()
            .map(|n| {
                (
                    n[..29].to_owned(),
                    std::fs::read(dir.join("reftable").join(n)).unwrap(),
                )
            })
            .collect()
    };
    assert!(
        stack_of(&git_dir) == stack_of(&twin),
        "berth's stack differs from git's"
    );
    let entries = std::fs::read_dir(&reftable).unwrap().count();
    assert_eq!(
        entries,
        stack.tables().len() + 1,
        "no stale tables or locks left behind"
    );
    assert_eq!(
        berth_for_each_ref(&stack),
        git_ok(&git_dir, FOR_EACH_REF, None)
    );
    git_ok(&git_dir, &["refs", "verify", "--strict"], None);
    git_ok(&git_dir, &["fsck", "--no-dangling"], None);
    // A held tables.list.lock makes an addition fail with a lock error after the timeout.
    std::fs::write(reftable.join("tables.list.lock"), "").unwrap();
    let err = stack.add(
        &[RefRecord {
            name: BString::from("refs/heads/blocked").into(),
            update_index: 0,
            value: RefValue::Val1(commit),
        }],
        &[],
    );
    assert!(
        matches!(err, Err(berth::reftable::Error::Locked(_))),
        "{err:?}"
    );
    std::fs::remove_file(reftable.join("tables.list.lock")).unwrap();
    stack.compact_all().unwrap();
    assert_eq!(stack.tables().len(), 1);
    assert_eq!(
        berth_for_each_ref(&stack),
        git_ok(&git_dir, FOR_EACH_REF, None)
    );
}

#[test]
fn obj_section_with_distinct_objects_matches_git() {
    // Many distinct blobs make git abbreviate object ids to more than 2 bytes.
    let tmp = tempfile::tempdir().unwrap();
    let git_dir = init(tmp.path(), true);
    let n = 600;
    let mut import = String::new();
    for i in 0..n {
        let data = format!("blob number {i}\n");
        import.push_str(&format!(
            "blob\nmark :{}\ndata {}\n{data}\n",
            i + 1,
            data.len()
        ));
    }
    let marks = tmp.path().join("marks");
    git_ok(
        &git_dir,
        &[
            "fast-import",
            "--quiet",
            &format!("--export-marks={}", marks.display()),
        ],
        Some(&import),
    );
    let marks = std::fs::read_to_string(&marks).unwrap();
    let mut ids: Vec<(usize, ObjectId)> = marks
        .lines()
        .map(|l| {
            let (m, h) = l.split_once(' ').unwrap();
            (m[1..].parse::<usize>().unwrap() - 1, oid(h))
        })
        .collect();
    ids.sort();
    let mut script = String::new();
    let mut refs = Vec::new();
    for (i, id) in &ids {
        let name = format!("refs/blobs/{i:04}");
        script.push_str(&format!("create {name} {id}\n"));
        refs.push(RefRecord {
            name: BString::from(name).into(),
            update_index: 2,
            value: RefValue::Val1(*id),
        });
    }
    git_ok(
        &git_dir,
        &["-c", "reftable.blockSize=1024", "update-ref", "--stdin"],
        Some(&script),
    );
    let (_, git_bytes) = only_table(&git_dir.join("reftable"));
    refs.push(RefRecord {
        name: BString::from("HEAD").into(),
        update_index: 1,
        value: RefValue::Symref("refs/heads/main".into()),
    });
    refs.sort_by(|a, b| a.name.cmp(&b.name));
    let opts = WriteOptions {
        block_size: 1024,
        hash: test_hash(),
        ..WriteOptions::default()
    };
    let (ours, _) = write_table(opts, 1, 2, &refs, &[]).unwrap();
    let table = Table::from_bytes("git", git_bytes.clone()).unwrap();
    let (obj, id_len) = table.obj_section();
    println!(
        "{n} distinct objects: obj section at {obj}, object ids abbreviated to {id_len} bytes"
    );
    assert!(obj > 0 && id_len > 2);
    assert_eq!(table.objects().unwrap().len(), n);
    assert!(ours == git_bytes, "{}", first_difference(&ours, &git_bytes));
}
