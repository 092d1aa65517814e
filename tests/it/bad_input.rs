//! The bad-input catalogue: every way a client (or a broken or hostile one) can get a push wrong,
//! each fed as raw bytes to berth and, where git has an answer, to `git receive-pack` on a copy
//! of the same repository. Every case asserts what the client sees (git's bytes where git is
//! deterministic), that the repository is unchanged (refs, objects, no quarantine, lock or keep
//! file left), and that a normal push through berth still works afterwards.

use crate::common;
use common::{EMPTY_PACK, Receiver, World, ZERO, leftovers, pkt, request};
use std::io::Write;
use std::process::Stdio;

fn pkt_bytes(s: &[u8]) -> Vec<u8> {
    let mut v = format!("{:04x}", s.len() + 4).into_bytes();
    v.extend_from_slice(s);
    v
}

/// What one receive-pack run produced.
#[derive(Debug, PartialEq, Eq)]
struct Run {
    status: Option<i32>,
    stdout: String,
    stderr: String,
}

/// The ids a case builds its request from.
struct Ids {
    /// `main` and `topic` on the server.
    c1: String,
    /// One commit more on the client's `main`, not on the server.
    c2: String,
}

/// A server `srv.git` with `main` and `topic` at c1, and a client `src` one commit ahead.
fn world() -> (World, Ids) {
    let w = World::new();
    let (c1, c2) = w.server_with_history();
    (w, Ids { c1, c2 })
}

fn run(w: &World, git: bool, repo: &str, input: &[u8], close_early: bool) -> Run {
    let mut cmd = if git {
        let mut c = w.git_cmd(".");
        c.arg("receive-pack");
        c
    } else {
        let mut c = w.cmd(common::berth(), ".");
        c.arg("receive-pack");
        c
    };
    cmd.arg(repo)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_vec();
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
        if !close_early {
            // Keep the pipe open a moment, as a client waiting for the report would.
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    });
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    let root = w.root().to_str().unwrap();
    let clean = |b: &[u8]| {
        mask_agent(
            &String::from_utf8_lossy(b)
                .replace(root, "$ROOT")
                .replace("git.git", "srv.git"),
        )
    };
    Run {
        status: out.status.code(),
        stdout: clean(&out.stdout),
        stderr: clean(&out.stderr),
    }
}

/// Replace `agent=<x>` by `agent=AGENT` in the first pkt-line and fix its length.
fn mask_agent(s: &str) -> String {
    let Some(start) = s.find("agent=") else {
        return s.to_owned();
    };
    let end = start + s[start..].find('\n').unwrap_or(s.len() - start);
    if s.len() < 4 || !s.is_char_boundary(4) {
        return s.to_owned();
    }
    let Ok(len) = usize::from_str_radix(&s[..4], 16) else {
        return s.to_owned();
    };
    if len <= start {
        return s.to_owned();
    }
    let new_len = len - (end - start) + "agent=AGENT".len();
    format!("{new_len:04x}{}agent=AGENT{}", &s[4..start], &s[end..])
}

/// Everything a push may change: refs, and every file under `objects/`.
fn state(w: &World, repo: &str) -> (String, Vec<String>) {
    let mut files = Vec::new();
    let base = w.path(repo).join("objects");
    let mut stack = vec![base.clone()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                files.push(p.strip_prefix(&base).unwrap().display().to_string());
            }
        }
    }
    files.sort();
    (w.refs(repo), files)
}

/// One catalogue entry.
struct Case {
    name: &'static str,
    /// `git config` pairs for the server.
    config: &'static [(&'static str, &'static str)],
    /// Extra setup on the client `src` (objects to send), returning values for `input`.
    input: fn(&World, &Ids) -> Vec<u8>,
    /// Compare berth's output with git's byte for byte.
    differential: bool,
    /// Substrings berth's stderr (and report) must contain.
    expect: &'static [&'static str],
    /// The client closes its end early (disconnect).
    close_early: bool,
    /// The configuration itself is what is wrong: unset it before pushing afterwards.
    reset_config: bool,
    /// git takes the push, or some of its commands (a mistake git lets through): berth must
    /// take the same, to the same refs, and the repository need not pass `git fsck` afterwards.
    accepted: bool,
}

impl Case {
    const fn new(name: &'static str, input: fn(&World, &Ids) -> Vec<u8>) -> Self {
        Case {
            name,
            config: &[],
            input,
            differential: true,
            expect: &[],
            close_early: false,
            reset_config: false,
            accepted: false,
        }
    }
    const fn accepted(mut self) -> Self {
        self.accepted = true;
        self
    }
    const fn config(mut self, c: &'static [(&'static str, &'static str)]) -> Self {
        self.config = c;
        self
    }
    const fn berth_only(mut self) -> Self {
        self.differential = false;
        self
    }
    const fn expect(mut self, e: &'static [&'static str]) -> Self {
        self.expect = e;
        self
    }
    const fn reset_config(mut self) -> Self {
        self.reset_config = true;
        self
    }
    const fn close_early(mut self) -> Self {
        self.close_early = true;
        self
    }

    fn check(&self) {
        let (w, ids) = world();
        for (k, v) in self.config {
            w.git("srv.git", &["config", k, v]);
        }
        let input = (self.input)(&w, &ids);
        let copy = w.path("git.git");
        let status = std::process::Command::new("cp")
            .arg("-a")
            .arg(w.path("srv.git"))
            .arg(&copy)
            .status()
            .unwrap();
        assert!(status.success());
        let before = state(&w, "srv.git");
        let berth = run(&w, false, "srv.git", &input, self.close_early);
        let name = self.name;
        if self.differential {
            let git = run(&w, true, "git.git", &input, self.close_early);
            assert_eq!(
                git, berth,
                "{name}: git receive-pack (left) and berth (right) differ"
            );
        }
        if !self.differential && std::env::var_os("BERTH_CATALOGUE_SHOW_GIT").is_some() {
            // Where berth and git differ on purpose (or git is not deterministic), show both.
            let git = run(&w, true, "git.git", &input, self.close_early);
            eprintln!(
                "{name}:\n  git:   {:?}\n  berth: {:?}",
                git.stderr, berth.stderr
            );
        }
        let seen = format!("{}{}", berth.stdout, berth.stderr);
        for e in self.expect {
            assert!(seen.contains(e), "{name}: expected {e:?} in {berth:#?}");
        }
        if self.accepted {
            assert_ne!(w.refs("srv.git"), before.0, "{name}: berth did not take it");
            assert_eq!(
                w.refs("srv.git"),
                w.refs("git.git"),
                "{name}: git took other refs"
            );
            return;
        }
        // Nothing changed, nothing left behind.
        assert_eq!(state(&w, "srv.git"), before, "{name}: repository changed");
        let left = leftovers(&w.path("srv.git"));
        assert!(left.is_empty(), "{name}: left behind {left:?}");
        // And the server still works.
        if self.reset_config {
            for (k, _) in self.config {
                w.git("srv.git", &["config", "--unset-all", k]);
            }
        }
        let push = w.push("src", Receiver::Berth, "srv.git", &["main"]);
        assert!(push.success, "{name}: push afterwards failed: {push:?}");
        w.assert_clean("srv.git");
    }
}

/// A create of `name` at c1 (which the server has) with an empty pack.
fn create_ref(ids: &Ids, name: &[u8]) -> Vec<u8> {
    let mut line = format!("{ZERO} {} ", ids.c1).into_bytes();
    line.extend_from_slice(name);
    line.push(0);
    line.extend_from_slice(b"report-status");
    if common::sha256() {
        line.extend_from_slice(b" object-format=sha256");
    }
    let mut v = pkt_bytes(&line);
    v.extend(b"0000");
    v.extend(EMPTY_PACK);
    v
}

/// `git pack-objects --stdout` of the objects listed (ids, one per line) in `src`.
fn pack_objects(w: &World, ids: &[String]) -> Vec<u8> {
    w.pack(
        false,
        &format!(
            "{}
",
            ids.join(
                "
"
            )
        ),
    )
}

/// The pack of c2 (what the server lacks), as `git push` would send it.
fn c2_pack(w: &World, ids: &Ids) -> Vec<u8> {
    w.pack(
        true,
        &format!(
            "{}
^{}
",
            ids.c2, ids.c1
        ),
    )
}

fn update_main(ids: &Ids, pack: &[u8]) -> Vec<u8> {
    let mut v = request(
        &[format!("{} {} refs/heads/main", ids.c1, ids.c2)],
        "report-status",
    );
    v.extend_from_slice(pack);
    v
}

/// Write a raw object into `src` and return its id.
fn raw_object(w: &World, kind: &str, data: &[u8]) -> String {
    object_in(w, "src", kind, data)
}

/// Write a raw object into `repo` and return its id.
fn object_in(w: &World, repo: &str, kind: &str, data: &[u8]) -> String {
    let out = w.git_with_stdin(
        repo,
        &["hash-object", "--literally", "-t", kind, "-w", "--stdin"],
        data,
    );
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

fn hex2raw(hex: &str) -> Vec<u8> {
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect()
}

fn tree_entry(mode: &str, name: &[u8], id: &str) -> Vec<u8> {
    let mut v = format!("{mode} ").into_bytes();
    v.extend_from_slice(name);
    v.push(0);
    v.extend(hex2raw(id));
    v
}

fn blob(w: &World, content: &str) -> String {
    raw_object(w, "blob", content.as_bytes())
}

/// A commit of `tree` on c1, with the given ident lines.
fn commit_of(w: &World, ids: &Ids, tree: &str, author: &str) -> String {
    raw_object(
        w,
        "commit",
        format!(
            "tree {tree}\nparent {}\nauthor {author}\ncommitter C O Mitter <c@example.com> 1700000000 +0000\n\nbad\n",
            ids.c1
        )
        .as_bytes(),
    )
}

/// Push a commit on c1 whose tree has `entries` (with any blob ids the entries name also sent):
/// the request creates refs/heads/bad.
fn push_tree(w: &World, ids: &Ids, entries: &[Vec<u8>], extra: &[String]) -> Vec<u8> {
    let tree = raw_object(w, "tree", &entries.concat());
    let commit = commit_of(w, ids, &tree, "A U Thor <a@example.com> 1700000000 +0000");
    let mut objs = vec![commit.clone(), tree];
    objs.extend_from_slice(extra);
    let mut v = request(
        &[format!("{ZERO} {commit} refs/heads/bad")],
        "report-status",
    );
    v.extend(pack_objects(w, &objs));
    v
}

fn push_commit_with_author(w: &World, ids: &Ids, author: &str) -> Vec<u8> {
    let tree = w.git("src", &["rev-parse", &format!("{}^{{tree}}", ids.c1)]);
    let commit = commit_of(w, ids, tree.trim(), author);
    let mut v = request(
        &[format!("{ZERO} {commit} refs/heads/bad")],
        "report-status",
    );
    v.extend(pack_objects(w, &[commit]));
    v
}

/// A tree naming one blob as a blob (`a`) and as a tree (`b`), the blob sent too.
fn both_kinds(w: &World, ids: &Ids) -> Vec<u8> {
    let b = blob(w, "one blob, two kinds\n");
    push_tree(
        w,
        ids,
        &[
            tree_entry("100644", b"a", &b),
            tree_entry("40000", b"b", &b),
        ],
        std::slice::from_ref(&b),
    )
}

/// A commit on c1 whose tree is a blob, the blob sent too.
fn commit_of_a_blob(w: &World, ids: &Ids) -> Vec<u8> {
    let b = blob(w, "not a tree\n");
    let commit = commit_of(w, ids, &b, "A U Thor <a@example.com> 1700000000 +0000");
    let mut v = request(
        &[format!("{ZERO} {commit} refs/heads/bad")],
        "report-status",
    );
    v.extend(pack_objects(w, &[commit, b]));
    v
}

/// A tree naming the server's tree of c1 as a blob (`a`) and as a tree (`b`).
fn servers_tree_as_both(w: &World, ids: &Ids) -> Vec<u8> {
    let tree = w.git("src", &["rev-parse", &format!("{}^{{tree}}", ids.c1)]);
    let tree = tree.trim();
    push_tree(
        w,
        ids,
        &[
            tree_entry("100644", b"a", tree),
            tree_entry("40000", b"b", tree),
        ],
        &[],
    )
}

/// A tree whose entry `b` has a tree's mode and names a blob the server has.
fn servers_blob_as_a_tree(w: &World, ids: &Ids) -> Vec<u8> {
    let listing = w.git("src", &["ls-tree", &ids.c1]);
    let line = listing.lines().find(|l| l.contains(" blob ")).unwrap();
    let b = line.split_whitespace().nth(2).unwrap().to_owned();
    push_tree(w, ids, &[tree_entry("40000", b"b", &b)], &[])
}

/// Two commits on c1, each with a bad email (a warning, as the cases set it) and a tree with a
/// zero-padded mode (an error): what is reported before the first error is the order git
/// checks the objects in (unpack-objects walks depth first from each commit).
fn warned_twice(w: &World, ids: &Ids) -> Vec<u8> {
    let b = blob(w, "warned\n");
    let commit = |tree: &str, parent: &str, n: u32| {
        raw_object(
            w,
            "commit",
            format!(
                "tree {tree}\nparent {parent}\nauthor A <a@example.com 1700000000 +0000\n\
                 committer C <c@example.com> 1700000000 +0000\n\n{n}\n"
            )
            .as_bytes(),
        )
    };
    let t1 = raw_object(w, "tree", &tree_entry("0100644", b"one", &b));
    let t2 = raw_object(w, "tree", &tree_entry("0100644", b"two", &b));
    let c1 = commit(&t1, &ids.c1, 1);
    let c2 = commit(&t2, &c1, 2);
    let mut v = request(&[format!("{ZERO} {c2} refs/heads/bad")], "report-status");
    v.extend(pack_objects(w, &[c2, c1, t2, t1, b]));
    v
}

/// A new commit of c1's tree in `src` whose one parent is `parent`, whatever that is.
fn commit_on(w: &World, ids: &Ids, parent: &str, message: &str) -> String {
    let tree = w.git("src", &["rev-parse", &format!("{}^{{tree}}", ids.c1)]);
    raw_object(
        w,
        "commit",
        format!(
            "tree {}\nparent {parent}\nauthor A <a@example.com> 1700000000 +0000\n\
             committer C <c@example.com> 1700000000 +0000\n\n{message}\n",
            tree.trim()
        )
        .as_bytes(),
    )
}

/// A tree with a submodule named `name` whose commit nothing has.
fn absent_submodule(w: &World, ids: &Ids, name: &[u8]) -> Vec<u8> {
    push_tree(w, ids, &[tree_entry("160000", name, &absent())], &[])
}

fn absent_submodule_gitattributes(w: &World, ids: &Ids) -> Vec<u8> {
    absent_submodule(w, ids, b".gitattributes")
}

fn absent_submodule_gitmodules(w: &World, ids: &Ids) -> Vec<u8> {
    absent_submodule(w, ids, b".gitmodules")
}

/// An id nothing has.
fn absent() -> String {
    "ab".repeat(common::object_format().len_in_bytes())
}

/// A request creating refs/heads/orphan at a new commit (of c1's tree) whose parent nobody has.
fn orphan(w: &World, ids: &Ids) -> Vec<u8> {
    let absent = "ab".repeat(common::object_format().len_in_bytes());
    let orphan = commit_on(w, ids, &absent, "orphan");
    let mut v = request(
        &[format!("{ZERO} {orphan} refs/heads/orphan")],
        "report-status",
    );
    v.extend(pack_objects(w, &[orphan]));
    v
}

/// Delete every ref of the server (its HEAD is left naming an unborn branch).
fn drop_refs(w: &World) {
    let names = w.git("srv.git", &["for-each-ref", "--format=%(refname)"]);
    for name in names.lines() {
        w.git("srv.git", &["update-ref", "-d", name]);
    }
}

/// A request creating refs/tags/bad at a tag of `object` saying it is a `kind`, and a pack of
/// the tag and, unless the server has it, the object.
fn tag_of(w: &World, object: &str, kind: &str) -> Vec<u8> {
    let tag = raw_object(
        w,
        "tag",
        format!(
            "object {object}\ntype {kind}\ntag bad\ntagger T <t@example.com> 1700000000 +0000\n\nx\n"
        )
        .as_bytes(),
    );
    let mut objects = vec![tag.clone()];
    let on_server = w
        .git_cmd("srv.git")
        .args(["cat-file", "-e", object])
        .status();
    if !on_server.unwrap().success() {
        objects.push(object.to_owned());
    }
    let mut v = request(&[format!("{ZERO} {tag} refs/tags/bad")], "report-status");
    v.extend(pack_objects(w, &objects));
    v
}

/// A pack header plus entries plus its trailer.
fn pack(entries: &[Vec<u8>]) -> Vec<u8> {
    let mut v = b"PACK\x00\x00\x00\x02".to_vec();
    v.extend((entries.len() as u32).to_be_bytes());
    for e in entries {
        v.extend(e);
    }
    let mut h = pack_hash(&v);
    v.append(&mut h);
    v
}

/// The hash of the tests' object format (a pack's trailer).
fn pack_hash(data: &[u8]) -> Vec<u8> {
    let mut hasher = gix_hash::hasher(common::object_format());
    hasher.update(data);
    hasher.try_finalize().unwrap().as_bytes().to_vec()
}

/// A pack entry header: type and size, git's variable-length encoding.
fn entry_header(kind: u8, mut size: u64) -> Vec<u8> {
    let mut v = vec![(kind << 4) | (size & 0x0f) as u8];
    size >>= 4;
    while size > 0 {
        *v.last_mut().unwrap() |= 0x80;
        v.push((size & 0x7f) as u8);
        size >>= 7;
    }
    v
}

fn deflate(data: &[u8]) -> Vec<u8> {
    // A stored (uncompressed) zlib stream: enough for small test objects.
    let mut v = vec![0x78, 0x01];
    let chunks: Vec<&[u8]> = if data.is_empty() {
        vec![&[][..]]
    } else {
        data.chunks(65535).collect()
    };
    for (i, c) in chunks.iter().enumerate() {
        v.push(u8::from(i + 1 == chunks.len()));
        let len = c.len() as u16;
        v.extend(len.to_le_bytes());
        v.extend((!len).to_le_bytes());
        v.extend_from_slice(c);
    }
    let (mut a, mut b) = (1u32, 0u32);
    for &x in data {
        a = (a + u32::from(x)) % 65521;
        b = (b + a) % 65521;
    }
    v.extend(((b << 16) | a).to_be_bytes());
    v
}

/// A blob entry whose zlib stream ends in a wrong Adler-32.
fn bad_checksum_blob() -> Vec<u8> {
    let mut e = entry_header(3, 4);
    e.extend(deflate(b"oops"));
    *e.last_mut().unwrap() ^= 1;
    e
}

fn cases() -> Vec<Case> {
    vec![
        // ---- pkt-line framing ----
        Case::new("truncated pkt-line", |_, ids| {
            let mut v = pkt(&format!("{ZERO} {} refs/heads/x\0report-status", ids.c1));
            v.truncate(v.len() - 5);
            v
        }),
        Case::new("oversized pkt-line", |_, _| {
            let mut v = b"ffff".to_vec();
            v.extend(vec![b'a'; 65531]);
            v
        }),
        Case::new("pkt-line length 65520", |_, _| {
            let mut v = b"fff0".to_vec();
            v.extend(vec![b'a'; 65516]);
            v
        }),
        Case::new("bad hex length", |_, _| b"00zz".to_vec()),
        Case::new("negative-looking length", |_, _| b"-001abc".to_vec()),
        Case::new("length with a space", |_, _| b" 010".to_vec()),
        Case::new("0001 in the command list", |_, ids| {
            let mut v = pkt(&format!("{ZERO} {} refs/heads/x\0report-status", ids.c1));
            v.extend(b"00010000");
            v
        }),
        Case::new("0002 in the command list", |_, ids| {
            let mut v = pkt(&format!("{ZERO} {} refs/heads/x\0report-status", ids.c1));
            v.extend(b"00020000");
            v
        }),
        Case::new("0003 in the command list", |_, ids| {
            let mut v = pkt(&format!("{ZERO} {} refs/heads/x\0report-status", ids.c1));
            v.extend(b"0003");
            v
        }),
        Case::new("missing flush", |_, ids| {
            pkt(&format!("{ZERO} {} refs/heads/x\0report-status", ids.c1))
        }),
        Case::new("empty data packet as a command", |_, ids| {
            let mut v = pkt(&format!("{ZERO} {} refs/heads/x\0report-status", ids.c1));
            v.extend(b"00040000");
            v
        }),
        Case::new("garbage command", |_, _| {
            [pkt("garbage\n"), b"0000".to_vec()].concat()
        }),
        Case::new("nothing at all", |_, _| Vec::new()),
        // ---- malformed ids ----
        Case::new("short old id", |_, ids| {
            request(&[format!("1234 {} refs/heads/x", ids.c1)], "report-status")
        }),
        Case::new("non-hex new id", |_, _| {
            request(
                &[format!(
                    "{ZERO} {} refs/heads/x",
                    "g".repeat(common::object_format().len_in_hex())
                )],
                "report-status",
            )
        }),
        Case::new("missing ref name", |_, ids| {
            request(&[format!("{ZERO} {}", ids.c1)], "report-status")
        }),
        Case::new("unknown new id in upper case", |_, _| {
            let mut v = request(
                &[format!(
                    "{ZERO} {} refs/heads/x",
                    "AB".repeat(common::object_format().len_in_bytes())
                )],
                "report-status",
            );
            v.extend(EMPTY_PACK);
            v
        }),
        Case::new("stale old id", |_, ids| {
            let mut v = request(
                &[format!("{} {} refs/heads/main", ids.c2, ids.c1)],
                "report-status",
            );
            v.extend(EMPTY_PACK);
            v
        })
        // git 2.47 says "failed to update ref"; master (and berth) name the reason.
        .berth_only()
        .expect(&["ng refs/heads/main incorrect old value provided"]),
        // ---- hostile ref names ----
        Case::new("refs/../x", |_, ids| create_ref(ids, b"refs/../x")),
        Case::new("refs/heads/a..b", |_, ids| {
            create_ref(ids, b"refs/heads/a..b")
        }),
        Case::new("@{ in a ref name", |_, ids| {
            create_ref(ids, b"refs/heads/a@{1}")
        }),
        Case::new("control byte in a ref name", |_, ids| {
            create_ref(ids, b"refs/heads/a\x01b")
        }),
        Case::new(".lock suffix", |_, ids| {
            create_ref(ids, b"refs/heads/x.lock")
        }),
        Case::new("HEAD", |_, ids| create_ref(ids, b"HEAD")),
        Case::new("refs/heads/", |_, ids| create_ref(ids, b"refs/heads/")),
        Case::new("one-level ref", |_, ids| create_ref(ids, b"refs/x")),
        Case::new("path outside refs", |_, ids| {
            create_ref(ids, b"../../config")
        }),
        Case::new("double slash", |_, ids| create_ref(ids, b"refs/heads//x")),
        Case::new("unknown capabilities", |_, ids| {
            let mut v = request(
                &[format!("{ZERO} {} refs/heads/a..b", ids.c1)],
                "report-status frobnicate=1 side-band-9000 x",
            );
            v.extend(EMPTY_PACK);
            v
        }),
        Case::new("unsupported object format", |_, ids| {
            request(
                &[format!("{ZERO} {} refs/heads/x", ids.c1)],
                "report-status object-format=sha256",
            )
        }),
        Case::new("duplicate commands for one ref", |_, ids| {
            let mut v = request(
                &[
                    format!("{ZERO} {} refs/heads/d", ids.c1),
                    format!("{ZERO} {} refs/heads/d", ids.c1),
                ],
                "report-status",
            );
            v.extend(EMPTY_PACK);
            v
        })
        // git 2.47 lets the first win; master (and berth) refuse both.
        .berth_only()
        .expect(&["multiple updates for ref 'refs/heads/d' not allowed"]),
        // ---- limits ----
        Case::new("too many commands", |_, ids| {
            request(
                &(0..3)
                    .map(|i| format!("{ZERO} {} refs/heads/n{i}", ids.c1))
                    .collect::<Vec<_>>(),
                "report-status",
            )
        })
        .config(&[("berth.maxCommands", "2")])
        .berth_only()
        .expect(&["fatal: protocol error: too many commands (more than 2"]),
        Case::new("too many push options", |_, ids| {
            let mut v = request(
                &[format!("{ZERO} {} refs/heads/n", ids.c1)],
                "report-status push-options",
            );
            v.extend(pkt("a"));
            v.extend(pkt("b"));
            v.extend(b"0000");
            v
        })
        .config(&[
            ("berth.maxPushOptions", "1"),
            ("receive.advertisePushOptions", "true"),
        ])
        .berth_only()
        .expect(&["fatal: protocol error: too many push options (more than 1"]),
        Case::new("request too large", |_, ids| {
            request(
                &(0..40)
                    .map(|i| format!("{ZERO} {} refs/heads/n{i}", ids.c1))
                    .collect::<Vec<_>>(),
                "report-status",
            )
        })
        .config(&[("berth.maxRequestBytes", "1000")])
        .berth_only()
        .expect(&["fatal: protocol error: request larger than 1000 bytes"]),
        // ---- packs ----
        Case::new("no pack", |_, ids| update_main(ids, b"")),
        Case::new("pack signature mismatch", |_, ids| {
            update_main(ids, b"JUNKJUNKJUNK")
        }),
        Case::new("pack version 4", |_, ids| {
            update_main(ids, b"PACK\x00\x00\x00\x04\x00\x00\x00\x00")
        }),
        Case::new("bad pack checksum", |w, ids| {
            let mut p = c2_pack(w, ids);
            let n = p.len();
            p[n - 1] ^= 0xff;
            update_main(ids, &p)
        })
        .berth_only()
        .expect(&[
            "fatal: final sha1 did not match",
            "ng refs/heads/main unpacker error",
            "unpack-objects abnormal exit",
        ]),
        Case::new("truncated pack", |w, ids| {
            let mut p = c2_pack(w, ids);
            p.truncate(p.len() - 30);
            update_main(ids, &p)
        })
        .berth_only()
        .expect(&["fatal: early EOF", "ng refs/heads/main unpacker error"]),
        Case::new("truncated pack, index-pack", |w, ids| {
            let mut p = c2_pack(w, ids);
            p.truncate(p.len() - 30);
            update_main(ids, &p)
        })
        .config(&[("receive.unpackLimit", "1")])
        .berth_only()
        .expect(&[
            "fatal: early EOF",
            "index-pack abnormal exit",
            "ng refs/heads/main unpacker error",
        ]),
        Case::new("pack claiming more objects", |w, ids| {
            let mut p = c2_pack(w, ids);
            p[11] += 2;
            update_main(ids, &p)
        })
        .berth_only()
        .expect(&["ng refs/heads/main unpacker error"]),
        Case::new("unresolvable REF_DELTA", |_, ids| {
            // A delta against a base nobody has.
            let mut e = entry_header(7, 6);
            e.extend(hex2raw(
                &"ab".repeat(common::object_format().len_in_bytes()),
            ));
            e.extend(deflate(&[3, 3, 0x90, 3, 0, 0]));
            update_main(ids, &pack(&[e]))
        })
        .berth_only()
        .expect(&[
            "fatal: unresolved deltas left after unpacking",
            "ng refs/heads/main unpacker error",
        ]),
        Case::new("OFS_DELTA before the pack start", |_, ids| {
            let mut e = entry_header(6, 6);
            e.push(0x7f);
            e.extend(deflate(&[3, 3, 0x90, 3, 0, 0]));
            update_main(ids, &pack(&[e]))
        })
        .expect(&[
            "fatal: offset value out of bound for delta base object",
            "ng refs/heads/main unpacker error",
        ]),
        Case::new("reserved object type 5", |_, ids| {
            let mut e = entry_header(5, 3);
            e.extend(deflate(b"abc"));
            update_main(ids, &pack(&[e]))
        })
        .expect(&["ng refs/heads/main unpacker error"]),
        Case::new("inflated size differs from the header", |_, ids| {
            let mut e = entry_header(3, 10);
            e.extend(deflate(b"abc"));
            update_main(ids, &pack(&[e]))
        })
        .expect(&["ng refs/heads/main unpacker error"]),
        // zlib's Z_DATA_ERROR (a stream whose checksum is wrong): git's `git_inflate` says
        // why, then unpack-objects `inflate returned -3` and exits, or index-pack dies naming
        // the entry's offset.
        Case::new(
            "a deflate stream with a bad checksum, unpacked",
            |_, ids| update_main(ids, &pack(&[bad_checksum_blob()])),
        )
        .expect(&[
            "error: inflate: data stream error (incorrect data check)",
            "error: inflate returned -3",
            "ng refs/heads/main unpacker error",
        ]),
        Case::new("a deflate stream with a bad checksum, kept", |_, ids| {
            let good = entry_header(3, 3)
                .into_iter()
                .chain(deflate(b"abc"))
                .collect();
            update_main(ids, &pack(&[good, bad_checksum_blob()]))
        })
        .config(&[("receive.unpackLimit", "1")])
        .expect(&[
            "fatal: pack has bad object at offset 27: inflate returned -3",
            "ng refs/heads/main unpacker error",
        ]),
        Case::new("pack over receive.maxInputSize", |w, ids| {
            update_main(ids, &c2_pack(w, ids))
        })
        .config(&[("receive.maxInputSize", "64"), ("receive.unpackLimit", "1")])
        .reset_config()
        .expect(&[
            "fatal: pack exceeds maximum allowed size (64 bytes)",
            "ng refs/heads/main unpacker error",
        ]),
        Case::new("deflate bomb over berth.maxObjectSize", |w, ids| {
            // 64 MiB of zeros in about 64 KiB.
            let id = raw_object(w, "blob", &vec![0u8; 64 << 20]);
            update_main(ids, &pack_objects(w, &[id]))
        })
        .config(&[("berth.maxObjectSize", "1m")])
        .berth_only()
        .expect(&[
            "fatal: object too large to inflate (more than 1048576 bytes, see berth.maxObjectSize)",
            "ng refs/heads/main unpacker error",
        ]),
        Case::new("object over berth.maxObjectSize, kept", |w, ids| {
            // 2 MiB: small enough for the pack reader to keep what it inflates to
            // (`objects::pack_read::KEEP`), in a pack kept and resolved as it arrives.
            let id = raw_object(w, "blob", &vec![7u8; 2 << 20]);
            update_main(ids, &pack_objects(w, &[id]))
        })
        .config(&[("berth.maxObjectSize", "1m"), ("receive.unpackLimit", "1")])
        .berth_only()
        .expect(&[
            "fatal: object too large to inflate (more than 1048576 bytes, see berth.maxObjectSize)",
            "ng refs/heads/main unpacker error",
        ]),
        Case::new("header claiming a 1 TiB object", |_, ids| {
            let mut e = entry_header(3, 1 << 40);
            e.extend(deflate(b"tiny"));
            update_main(ids, &pack(&[e]))
        })
        .berth_only()
        .expect(&["ng refs/heads/main unpacker error"]),
        Case::new("client disconnects mid-pack", |w, ids| {
            let p = c2_pack(w, ids);
            update_main(ids, &p[..p.len() / 2])
        })
        .close_early()
        .berth_only()
        .expect(&["fatal: early EOF", "ng refs/heads/main unpacker error"]),
        Case::new("missing objects without fsck", |w, ids| {
            // The commit alone: its tree and blob are missing.
            update_main(ids, &pack_objects(w, std::slice::from_ref(&ids.c2)))
        }),
        // ---- fsck (receive.fsckObjects) ----
        Case::new("fsck: missingEmail", |w, ids| {
            push_commit_with_author(w, ids, "Bugs Bunny 1234567890 +0000")
        })
        .config(&[("receive.fsckObjects", "true")])
        .expect(&["missingEmail", "fsck error in packed object"]),
        Case::new("fsck: badTimezone, index-pack", |w, ids| {
            push_commit_with_author(w, ids, "A <a@b> 1234567890 +00000")
        })
        .config(&[
            ("receive.fsckObjects", "true"),
            ("receive.unpackLimit", "1"),
        ])
        .expect(&["badTimezone", "index-pack abnormal exit"]),
        Case::new("fsck: zeroPaddedDate via transfer.fsckObjects", |w, ids| {
            push_commit_with_author(w, ids, "A <a@b> 01234567890 +0000")
        })
        .config(&[("transfer.fsckObjects", "true")])
        .expect(&["zeroPaddedDate"]),
        Case::new("fsck: hasDotgit", |w, ids| {
            let b = blob(w, "x\n");
            push_tree(w, ids, &[tree_entry("100644", b".GIT", &b)], &[b])
        })
        .config(&[("receive.fsckObjects", "true")])
        .expect(&["hasDotgit"]),
        Case::new("fsck: hasDotgit, NTFS short name", |w, ids| {
            let b = blob(w, "x\n");
            push_tree(w, ids, &[tree_entry("100644", b"git~1", &b)], &[b])
        })
        .config(&[("receive.fsckObjects", "true")])
        .expect(&["hasDotgit"]),
        Case::new("fsck: hasDotgit, HFS ignorable", |w, ids| {
            let b = blob(w, "x\n");
            push_tree(
                w,
                ids,
                &[tree_entry("100644", ".g\u{200c}it".as_bytes(), &b)],
                &[b],
            )
        })
        .config(&[("receive.fsckObjects", "true")])
        .expect(&["hasDotgit"]),
        Case::new("fsck: hasDotdot", |w, ids| {
            let b = blob(w, "x\n");
            push_tree(w, ids, &[tree_entry("100644", b"..", &b)], &[b])
        })
        .config(&[("receive.fsckObjects", "true")])
        .expect(&["hasDotdot"]),
        Case::new("fsck: zeroPaddedFilemode and duplicateEntries", |w, ids| {
            let b = blob(w, "x\n");
            push_tree(
                w,
                ids,
                &[
                    tree_entry("0100644", b"a", &b),
                    tree_entry("100644", b"a", &b),
                ],
                &[b],
            )
        })
        .config(&[("receive.fsckObjects", "true")])
        .expect(&["zeroPaddedFilemode", "duplicateEntries"]),
        Case::new(
            "fsck: two commits and their trees, unpack-objects' order",
            warned_twice,
        )
        .config(&[
            ("receive.fsckObjects", "true"),
            ("receive.fsck.badEmail", "warn"),
        ])
        .expect(&[
            "badEmail",
            "zeroPaddedFilemode",
            "fsck error in packed object",
        ])
        .reset_config(),
        Case::new(
            "fsck: two commits and their trees, index-pack's order",
            warned_twice,
        )
        .config(&[
            ("receive.fsckObjects", "true"),
            ("receive.fsck.badEmail", "warn"),
            ("receive.unpackLimit", "1"),
        ])
        .expect(&[
            "badEmail",
            "zeroPaddedFilemode",
            "fsck error in packed object",
        ])
        .reset_config(),
        Case::new("fsck: treeNotSorted", |w, ids| {
            let b = blob(w, "x\n");
            push_tree(
                w,
                ids,
                &[
                    tree_entry("100644", b"b", &b),
                    tree_entry("100644", b"a", &b),
                ],
                &[b],
            )
        })
        .config(&[("receive.fsckObjects", "true")])
        .expect(&["treeNotSorted"]),
        Case::new("fsck: fullPathname", |w, ids| {
            let b = blob(w, "x\n");
            push_tree(w, ids, &[tree_entry("100644", b"a/b", &b)], &[b])
        })
        .config(&[("receive.fsckObjects", "true")])
        .expect(&["fullPathname"]),
        Case::new("fsck: gitmodulesUrl", |w, ids| {
            let b = blob(
                w,
                "[submodule \"x\"]\n\tpath = x\n\turl = -oProxyCommand=evil\n",
            );
            push_tree(w, ids, &[tree_entry("100644", b".gitmodules", &b)], &[b])
        })
        .config(&[("receive.fsckObjects", "true")])
        .expect(&["gitmodulesUrl"]),
        Case::new("fsck: gitmodulesName", |w, ids| {
            let b = blob(w, "[submodule \"../../x\"]\n\tpath = x\n\turl = ./x\n");
            push_tree(w, ids, &[tree_entry("100644", b".gitmodules", &b)], &[b])
        })
        .config(&[("receive.fsckObjects", "true")])
        .expect(&["gitmodulesName"]),
        Case::new("fsck: gitmodulesSymlink", |w, ids| {
            let b = blob(w, "target");
            push_tree(w, ids, &[tree_entry("120000", b".gitmodules", &b)], &[b])
        })
        .config(&[("receive.fsckObjects", "true")])
        .expect(&["gitmodulesSymlink"]),
        Case::new("fsck: badType in a tag", |w, ids| {
            let tag = raw_object(
                w,
                "tag",
                format!(
                    "object {}\ntype bogus\ntag t\ntagger T <t@t> 1 +0000\n\nm\n",
                    ids.c1
                )
                .as_bytes(),
            );
            let mut v = request(&[format!("{ZERO} {tag} refs/tags/t")], "report-status");
            v.extend(pack_objects(w, &[tag]));
            v
        })
        .config(&[("receive.fsckObjects", "true")])
        // git's tag parser refuses it before fsck's badType check.
        .expect(&["unknown tag type 'bogus'", "fatal: invalid tag"]),
        Case::new("fsck: linked object missing", |w, ids| {
            let tree = raw_object(
                w,
                "tree",
                &tree_entry(
                    "100644",
                    b"a",
                    &"ab".repeat(common::object_format().len_in_bytes()),
                ),
            );
            let commit = commit_of(w, ids, &tree, "A <a@b> 1 +0000");
            let mut v = request(
                &[format!("{ZERO} {commit} refs/heads/bad")],
                "report-status",
            );
            v.extend(pack_objects(w, &[commit, tree]));
            v
        })
        .config(&[
            ("receive.fsckObjects", "true"),
            ("receive.unpackLimit", "1"),
        ])
        .expect(&["did not receive expected object abababab"]),
        // An object met as two kinds: git's object table refuses the second meeting.
        Case::new(
            "fsck: a blob named as a blob and as a tree, index-pack",
            both_kinds,
        )
        .config(&[
            ("receive.fsckObjects", "true"),
            ("receive.unpackLimit", "1"),
        ])
        .expect(&["is a blob, not a tree", "are reachable"]),
        Case::new(
            "fsck: a blob named as a blob and as a tree, unpack-objects",
            both_kinds,
        )
        .config(&[("receive.fsckObjects", "true")])
        .expect(&["is a blob, not a tree", "Error on reachable objects of"]),
        Case::new(
            "fsck: a commit whose tree is a blob, index-pack",
            commit_of_a_blob,
        )
        .config(&[
            ("receive.fsckObjects", "true"),
            ("receive.unpackLimit", "1"),
        ])
        .expect(&["fatal: invalid"]),
        Case::new(
            "fsck: a commit whose tree is a blob, unpack-objects",
            commit_of_a_blob,
        )
        .config(&[("receive.fsckObjects", "true")])
        .expect(&["fatal: invalid"]),
        Case::new(
            "fsck: the server's tree named as a blob and as a tree, index-pack",
            servers_tree_as_both,
        )
        .config(&[
            ("receive.fsckObjects", "true"),
            ("receive.unpackLimit", "1"),
        ])
        .expect(&["is a blob, not a tree", "are reachable"]),
        Case::new(
            "fsck: the server's tree named as a blob and as a tree, unpack-objects",
            servers_tree_as_both,
        )
        .config(&[("receive.fsckObjects", "true")])
        .expect(&["fatal: object of unexpected type"]),
        // Objects of another kind than their links want, without fsck: git's connectivity
        // walk (rev-list) parses what a commit, a tag or an entry with a tree's mode names.
        Case::new("a commit whose tree is a blob", commit_of_a_blob).expect(&[
            "not a tree",
            "bad tree object",
            "missing necessary objects",
        ]),
        Case::new(
            "a commit whose tree is a blob, kept as a pack",
            commit_of_a_blob,
        )
        .config(&[("receive.unpackLimit", "1")])
        .expect(&["bad tree object"])
        .reset_config(),
        Case::new("an entry with a tree's mode naming a blob", |w, ids| {
            let b = blob(w, "a blob, not a tree\n");
            push_tree(
                w,
                ids,
                &[tree_entry("40000", b"b", &b)],
                std::slice::from_ref(&b),
            )
        })
        .expect(&["bad tree object"]),
        Case::new(
            "an entry with a tree's mode naming the server's blob",
            servers_blob_as_a_tree,
        )
        .expect(&["has tree mode, but is not a tree"]),
        Case::new(
            "an entry with a tree's mode naming the server's blob, kept as a pack",
            servers_blob_as_a_tree,
        )
        .config(&[("receive.unpackLimit", "1")])
        .expect(&["has tree mode, but is not a tree"])
        .reset_config(),
        Case::new(
            "one blob named as a blob and as a tree, kept as a pack",
            both_kinds,
        )
        .config(&[("receive.unpackLimit", "1")])
        .expect(&["has tree mode, but is not a tree"])
        .reset_config(),
        Case::new("one blob named as a blob and as a tree", both_kinds)
            .expect(&["has tree mode, but is not a tree"]),
        Case::new("a commit whose parent is a blob", |w, ids| {
            let b = blob(w, "a blob, not a commit\n");
            let commit = commit_on(w, ids, &b, "x");
            let mut v = request(
                &[format!("{ZERO} {commit} refs/heads/bad")],
                "report-status",
            );
            v.extend(pack_objects(w, &[commit, b]));
            v
        })
        .expect(&["not a commit", "revision walk setup failed"]),
        Case::new("a tag saying commit of a blob", |w, _| {
            let b = blob(w, "a blob, not a commit\n");
            tag_of(w, &b, "commit")
        })
        .expect(&["is a commit, not a blob", "bad object"]),
        Case::new(
            "a commit naming the server's commit as its tree and its parent",
            |w, ids| {
                let commit = raw_object(
                    w,
                    "commit",
                    format!(
                        "tree {c1}\nparent {c1}\nauthor A <a@example.com> 1700000000 +0000\n\
                     committer C <c@example.com> 1700000000 +0000\n\nx\n",
                        c1 = ids.c1
                    )
                    .as_bytes(),
                );
                let mut v = request(
                    &[format!("{ZERO} {commit} refs/heads/bad")],
                    "report-status",
                );
                v.extend(pack_objects(w, &[commit]));
                v
            },
        )
        .expect(&["is a tree, not a commit", "bad parent", "fatal: bad object"]),
        Case::new(
            "an entry with a tree's mode naming the server's commit",
            |w, ids| push_tree(w, ids, &[tree_entry("40000", b"c", &ids.c1)], &[]),
        )
        .expect(&[
            "is a commit, not a tree",
            "has tree mode, but is not a tree",
        ]),
        Case::new(
            "an entry with a blob's mode naming the server's commit",
            |w, ids| push_tree(w, ids, &[tree_entry("100644", b"c", &ids.c1)], &[]),
        )
        .expect(&[
            "is a commit, not a blob",
            "has blob mode, but is not a blob",
        ]),
        Case::new(
            "an entry with a blob's mode naming a commit pushed to another ref, kept as a pack",
            |w, ids| {
                let tree = w.git("src", &["rev-parse", &format!("{}^{{tree}}", ids.c1)]);
                let other = w.git(
                    "src",
                    &["commit-tree", "-p", &ids.c1, "-m", "o", tree.trim()],
                );
                let other = other.trim().to_owned();
                let named = raw_object(w, "tree", &tree_entry("100644", b"c", &other));
                let commit = commit_of(w, ids, &named, "A U Thor <a@example.com> 1700000000 +0000");
                let mut v = request(
                    &[
                        format!("{ZERO} {other} refs/heads/other"),
                        format!("{ZERO} {commit} refs/heads/bad"),
                    ],
                    "report-status",
                );
                v.extend(pack_objects(w, &[other, named, commit]));
                v
            },
        )
        .config(&[("receive.unpackLimit", "1")])
        .expect(&["has blob mode, but is not a blob"])
        .accepted(),
        // The walk of the first ref met the commit only as an entry with a blob's mode: the
        // second ref's walk must still read it, and find its parent missing.
        Case::new(
            "a commit with a missing parent, named first by an entry with a blob's mode",
            |w, ids| {
                let absent = "ab".repeat(common::object_format().len_in_bytes());
                let orphan = commit_on(w, ids, &absent, "orphan");
                let named = raw_object(w, "tree", &tree_entry("100644", b"c", &orphan));
                let commit = commit_of(w, ids, &named, "A U Thor <a@example.com> 1700000000 +0000");
                let mut v = request(
                    &[
                        format!("{ZERO} {commit} refs/heads/bad"),
                        format!("{ZERO} {orphan} refs/heads/orphan"),
                    ],
                    "report-status",
                );
                v.extend(pack_objects(w, &[commit, named, orphan]));
                v
            },
        )
        .expect(&["ng refs/heads/orphan missing necessary objects"])
        .accepted(),
        // git words a missing parent by how its rev-list walks: limited when a commit is
        // among the tips it excludes (every ref, hidden ones too, and a detached HEAD, peeled).
        Case::new(
            "a missing parent, the refs hidden: git's walk is limited",
            orphan,
        )
        .config(&[("receive.hideRefs", "refs/heads")])
        .reset_config()
        .expect(&["Could not read", "revision walk setup failed"]),
        Case::new(
            "a missing parent, no ref: git's walk is not limited",
            |w, ids| {
                drop_refs(w);
                orphan(w, ids)
            },
        )
        .expect(&["Failed to traverse parents of commit"]),
        Case::new(
            "a missing parent, the one ref a tag of a blob: git's walk is not limited",
            |w, ids| {
                drop_refs(w);
                let b = object_in(w, "srv.git", "blob", b"b\n");
                let tag = object_in(
                    w,
                    "srv.git",
                    "tag",
                    format!(
                        "object {b}\ntype blob\ntag b\n\
                         tagger T <t@example.com> 1700000000 +0000\n\nx\n"
                    )
                    .as_bytes(),
                );
                w.git("srv.git", &["update-ref", "refs/tags/b", &tag]);
                orphan(w, ids)
            },
        )
        .expect(&["Failed to traverse parents of commit"]),
        Case::new(
            "a missing parent, no ref but a detached HEAD at a commit: git's walk is limited",
            |w, ids| {
                drop_refs(w);
                w.git("srv.git", &["update-ref", "--no-deref", "HEAD", &ids.c1]);
                orphan(w, ids)
            },
        )
        .expect(&["Could not read", "revision walk setup failed"]),
        // The client says the commit it pushes is shallow (its history cut there) and the
        // server lacked it: git's receive-pack marks every ref that reaches such a commit
        // (`assign_shallow_commits_to_refs`), though the server has its parent.
        Case::new(
            "a client shallow commit the push brings, its parent on the server",
            |w, ids| {
                let mut v = pkt_bytes(format!("shallow {}", ids.c2).as_bytes());
                v.extend(update_main(ids, &c2_pack(w, ids)));
                v
            },
        )
        .config(&[("receive.unpackLimit", "1")])
        .expect(&["ng refs/heads/main shallow update not allowed"]),
        Case::new(
            "a client shallow commit the push brings, kept as a pack",
            |w, ids| {
                let mut v = pkt_bytes(format!("shallow {}", ids.c2).as_bytes());
                v.extend(update_main(ids, &c2_pack(w, ids)));
                v
            },
        )
        .expect(&["ng refs/heads/main shallow update not allowed"]),
        // One the server had, sent again (a push into an empty namespace sends everything):
        // git's "ours", reachable from a ref, needs no new root.
        Case::new(
            "a client shallow commit the server had, sent again, is no new root",
            |w, ids| {
                let mut v = pkt_bytes(format!("shallow {}", ids.c1).as_bytes());
                v.extend(update_main(ids, &w.pack(true, &format!("{}\n", ids.c2))));
                v
            },
        )
        .config(&[("receive.unpackLimit", "1")])
        .expect(&["ok refs/heads/main"])
        .accepted(),
        // fsck_finish reads every `.gitmodules` / `.gitattributes` a tree names, whatever the
        // entry's mode but a symlink's: a submodule so named whose commit is not there is
        // `gitmodulesMissing` / `gitattributesMissing`, except that index-pack's callback
        // prints a missing `.gitmodules` on stdout, where receive-pack reads the pack's name
        // (index-pack dies writing it, without a word).
        Case::new(
            "fsck: a submodule named .gitattributes, not there, unpacked",
            absent_submodule_gitattributes,
        )
        .config(&[("receive.fsckObjects", "true")])
        .expect(&["gitattributesMissing: unable to read .gitattributes blob"]),
        Case::new(
            "fsck: a submodule named .gitattributes, not there, kept",
            absent_submodule_gitattributes,
        )
        .config(&[
            ("receive.fsckObjects", "true"),
            ("receive.unpackLimit", "1"),
        ])
        .expect(&["gitattributesMissing: unable to read .gitattributes blob"]),
        Case::new(
            "fsck: a submodule named .gitmodules, not there, unpacked",
            absent_submodule_gitmodules,
        )
        .config(&[("receive.fsckObjects", "true")])
        .expect(&["gitmodulesMissing: unable to read .gitmodules blob"]),
        // git's outcome here is a race: index-pack dies of SIGPIPE only if receive-pack has
        // closed the pipe before index-pack writes the pack's name; else the push lands. berth
        // refuses it every time, as git does when it dies (not differential: git is not
        // deterministic).
        Case::new(
            "fsck: a submodule named .gitmodules, not there, kept",
            absent_submodule_gitmodules,
        )
        .berth_only()
        .config(&[
            ("receive.fsckObjects", "true"),
            ("receive.unpackLimit", "1"),
        ])
        .expect(&["unpack index-pack abnormal exit"]),
        // git's `decode_tree_entry` says which part of the entry is wrong.
        Case::new("fsck: a tree entry without a name", |w, ids| {
            let f = blob(w, "f\n");
            push_tree(w, ids, &[tree_entry("100644", b"", &f)], &[f])
        })
        .config(&[("receive.fsckObjects", "true")])
        .expect(&["error: empty filename in tree entry"]),
        Case::new("fsck: a tree entry with a malformed mode", |w, ids| {
            let f = blob(w, "f\n");
            push_tree(w, ids, &[tree_entry("10064x", b"f", &f)], &[f])
        })
        .config(&[("receive.fsckObjects", "true")])
        .expect(&["error: malformed mode in tree entry"]),
        // git always has the empty tree (its in-memory object source), written or not.
        Case::new("a commit of the empty tree, never written", |w, ids| {
            let empty = common::object_format().empty_tree().to_string();
            let commit = commit_of(w, ids, &empty, "A U Thor <a@example.com> 1700000000 +0000");
            let mut v = request(
                &[format!("{ZERO} {commit} refs/heads/bad")],
                "report-status",
            );
            v.extend(pack_objects(w, &[commit]));
            v
        })
        .config(&[("receive.fsckObjects", "true")])
        .expect(&["ok refs/heads/bad"])
        .accepted(),
        // Without fsck, git's walk still parses each commit and tag it meets.
        Case::new("a tag without its tag line, no fsck", |w, ids| {
            let tag = raw_object(
                w,
                "tag",
                format!(
                    "object {}\ntype commit\ntagger T <t@example.com> 1700000000 +0000\n\nx\n",
                    ids.c1
                )
                .as_bytes(),
            );
            let mut v = request(&[format!("{ZERO} {tag} refs/tags/bad")], "report-status");
            v.extend(pack_objects(w, &[tag]));
            v
        })
        .expect(&[
            "fatal: bad object",
            "ng refs/tags/bad missing necessary objects",
        ]),
        Case::new("a commit without its tree line, no fsck", |w, ids| {
            let commit = raw_object(
                w,
                "commit",
                format!(
                    "parent {}\nauthor A <a@example.com> 1700000000 +0000\n\
                     committer C <c@example.com> 1700000000 +0000\n\nx\n",
                    ids.c1
                )
                .as_bytes(),
            );
            let mut v = request(
                &[format!("{ZERO} {commit} refs/heads/bad")],
                "report-status",
            );
            v.extend(pack_objects(w, &[commit]));
            v
        })
        .expect(&["error: bogus commit object", "fatal: bad object"]),
        Case::new("a tree entry without a name, no fsck", |w, ids| {
            let f = blob(w, "f\n");
            push_tree(w, ids, &[tree_entry("100644", b"", &f)], &[f])
        })
        .expect(&["fatal: empty filename in tree entry"]),
        Case::new("a tag saying blob of a commit", |w, _| {
            let tree = w.git("src", &["mktree"]);
            let commit = w.git("src", &["commit-tree", "-m", "new", tree.trim()]);
            tag_of(w, commit.trim(), "blob")
        })
        .expect(&["is a blob, not a commit", "bad object"]),
        Case::new(
            "an entry with a blob's mode naming a new tree is taken, as git takes it",
            |w, ids| {
                let f = blob(w, "f\n");
                let inner = raw_object(w, "tree", &tree_entry("100644", b"f", &f));
                push_tree(
                    w,
                    ids,
                    &[tree_entry("100644", b"a", &inner)],
                    &[inner.clone(), f],
                )
            },
        )
        .accepted(),
        Case::new("fsck: unterminatedHeader cannot be demoted", |w, ids| {
            update_main(ids, &c2_pack(w, ids))
        })
        .config(&[
            ("receive.fsckObjects", "true"),
            ("receive.fsck.unterminatedHeader", "warn"),
        ])
        .expect(&["Cannot demote unterminatedheader to warn"])
        .reset_config(),
        Case::new("fsck: skipList that does not exist", |w, ids| {
            update_main(ids, &c2_pack(w, ids))
        })
        .config(&[
            ("receive.fsckObjects", "true"),
            ("receive.fsck.skipList", "does-not-exist"),
        ])
        .expect(&["could not open object name list: does-not-exist"])
        .reset_config(),
        Case::new("fsck: skipList that is not a list of ids", |w, ids| {
            update_main(ids, &c2_pack(w, ids))
        })
        .config(&[
            ("receive.fsckObjects", "true"),
            ("receive.fsck.skipList", "config"),
        ])
        .expect(&["invalid object name: "])
        .reset_config(),
        Case::new("fsck: unknown severity", |_, _| b"0000".to_vec())
            .config(&[("receive.fsck.missingEmail", "bogus")])
            .expect(&["fatal: Unknown fsck message type: 'bogus'"])
            .reset_config(),
        Case::new("fsck: bogus commit", |w, _| {
            let commit = raw_object(w, "commit", b"tree 1234\n\nmessage\n");
            let mut v = request(
                &[format!("{ZERO} {commit} refs/heads/bad")],
                "report-status",
            );
            v.extend(pack_objects(w, &[commit]));
            v
        })
        .config(&[
            ("receive.fsckObjects", "true"),
            ("receive.unpackLimit", "1"),
        ])
        .expect(&["bogus commit object", "fatal: invalid commit"]),
    ]
}

fn run_cases(filter: impl Fn(usize) -> bool) {
    let all = cases();
    assert!(all.len() >= 40, "{} cases", all.len());
    for (i, case) in all.iter().enumerate().filter(|(i, _)| filter(*i)) {
        eprintln!("case {i}: {}", case.name);
        case.check();
    }
}

// Split over several tests so they run in parallel.
#[test]
fn catalogue_part_0() {
    run_cases(|i| i % 4 == 0);
}
#[test]
fn catalogue_part_1() {
    run_cases(|i| i % 4 == 1);
}
#[test]
fn catalogue_part_2() {
    run_cases(|i| i % 4 == 2);
}
#[test]
fn catalogue_part_3() {
    run_cases(|i| i % 4 == 3);
}

/// The same bad commit, refused by git and berth with the same message id, and accepted by
/// both once its finding is demoted or its id is on the skip list.
#[test]
fn fsck_severities_and_skip_list_match_git() {
    for (config, ok) in [
        (&[("receive.fsck.missingEmail", "warn")][..], true),
        (&[("receive.fsck.missingEmail", "ignore")][..], true),
        (&[("receive.fsck.whatEver", "error")][..], false),
        (&[("receive.fsck.skipList", "SKIP")][..], true),
    ] {
        let (w, ids) = world();
        w.git("srv.git", &["config", "receive.fsckObjects", "true"]);
        for (k, v) in config {
            w.git("srv.git", &["config", k, v]);
        }
        let input = push_commit_with_author(&w, &ids, "Bugs Bunny 1234567890 +0000");
        let hex = common::object_format().len_in_hex();
        let bad = String::from_utf8_lossy(&input[5 + hex..5 + 2 * hex]).into_owned();
        std::fs::write(
            w.path("srv.git/SKIP"),
            format!("# comment\n  {bad} # it\n\n"),
        )
        .unwrap();
        std::process::Command::new("cp")
            .arg("-a")
            .arg(w.path("srv.git"))
            .arg(w.path("git.git"))
            .status()
            .unwrap();
        let git = run(&w, true, "git.git", &input, false);
        let berth = run(&w, false, "srv.git", &input, false);
        assert_eq!(git, berth, "{config:?}");
        assert_eq!(berth.stdout.contains("ok refs/heads/bad"), ok, "{berth:?}");
        assert_eq!(w.refs("srv.git"), w.refs("git.git"));
        assert!(leftovers(&w.path("srv.git")).is_empty());
    }
}

#[test]
fn fsck_config_without_value_is_fatal() {
    let (w, _) = world();
    let out = w
        .cmd(common::berth(), ".")
        .args(["receive-pack", "srv.git"])
        .env("GIT_CONFIG_PARAMETERS", "'receive.fsck.skipList'")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(128));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "error: missing value for 'receive.fsck.skiplist'\nfatal: unable to parse 'receive.fsck.skiplist' from command-line config\n"
    );
}

/// `.gitmodules` as git's fsck reads it (`receive.fsckObjects`): the submodule URLs git refuses
/// since CVE-2020-5260 / CVE-2020-11008 (a newline once url-decoded, `../` escaping to the host,
/// a URL git-remote-curl would get that `url_normalize` refuses), names, paths and `update`
/// commands, entries in file order, and git's configuration syntax. Each pushed with the real
/// git client to git receive-pack and to berth: the same verdict and the same `remote:` lines.
#[test]
fn gitmodules_checks_match_git() {
    let cases: &[(&str, bool)] = &[
        // Refused.
        ("[submodule \"x\"]\n\turl = ./%0ahost\n", false),
        ("[submodule \"x\"]\n\turl = ../%0a\n", false),
        ("[submodule \"x\"]\n\turl = git://h/%0Ax\n", false),
        ("[submodule \"x\"]\n\turl = ../../:x\n", false),
        ("[submodule \"x\"]\n\turl = ..\\\\/x\n", false),
        ("[submodule \"x\"]\n\turl = ./../..//x\n", false),
        ("[submodule \"x\"]\n\turl = https:///example.com/x\n", false),
        (
            "[submodule \"x\"]\n\turl = http::https:///example.com/x\n",
            false,
        ),
        (
            "[submodule \"x\"]\n\turl = https://example.com/%0a\n",
            false,
        ),
        (
            "[submodule \"x\"]\n\turl = https://u%0a@example.com/\n",
            false,
        ),
        (
            "[submodule \"x\"]\n\turl = \"https://example.com/a\\nb\"\n",
            false,
        ),
        ("[submodule \"x\"]\n\turl = https://example.com:0/\n", false),
        (
            "[submodule \"x\"]\n\turl = https://example.com:123456/\n",
            false,
        ),
        ("[submodule \"x\"]\n\turl = https://ex%41mple.com/\n", false),
        (
            "[submodule \"x\"]\n\turl = https://example.com/../x\n",
            false,
        ),
        (
            "[submodule \"x\"]\n\turl = https://example.com/%zz\n",
            false,
        ),
        ("[submodule \"x\"]\n\turl = ftp://exa mple.com/\n", false),
        ("[submodule \"x\"]\n\turl = -oProxyCommand=x\n", false),
        ("[submodule \"x\"]\n\tpath = -p\n", false),
        ("[submodule \"x\"]\n\tupdate = !rm -rf\n", false),
        ("[submodule \"..\"]\n\tpath = x\n", false),
        ("[submodule \"x\\\\..\"]\n\turl = ok\n", false),
        ("[Submodule.X]\n\tpath = -p\n", false),
        (
            "[submodule \"../a\"]\n\turl = ./%0a\n\tpath = -p\n\turl = ok\n\
             [submodule \"b\"]\n\tupdate = !x ; c\n",
            false,
        ),
        // A syntax error after a bad entry: the entry is still reported.
        ("[submodule \"x\"]\n\turl = ./%0a\n[broken\n", false),
        // Accepted.
        (
            "[submodule \"x\"]\n\turl = https://example.com/x.git\n",
            true,
        ),
        ("[submodule \"x\"]\n\turl = HTTPS:///example.com\n", true),
        (
            "[submodule \"x\"]\n\turl = foo::https:///example.com\n",
            true,
        ),
        ("[submodule \"x\"]\n\turl = ./%0a:host\n", true),
        (
            "[submodule \"x\"]\n\turl = https://example.com:00443/a/./b/../c\n",
            true,
        ),
        ("[submodule \"x\"]\n\turl = https://[::1]:8080/x\n", true),
        (
            "[submodule \"x\"]\n\turl = https://example.com/%250a\n",
            true,
        ),
        ("[submodule \"x\"]\n\turl = git@example.com:x.git\n", true),
        ("[submodule \"x\"]\n\turl\n", true),
        ("[submodule]\n\turl = ./%0a\n", true),
        ("[other \"x\"]\n\turl = ./%0a\n", true),
        ("[submodule \"x\"]\n\turl = ok\n[broken\n", true),
        // In a blob git does not skip a UTF-8 BOM, and on x86 a 0xff byte ends the input.
        ("\u{feff}[submodule \"x\"]\r\n\turl = ok\r\n", true),
    ];
    let mut cases: Vec<(Vec<u8>, bool)> = cases
        .iter()
        .map(|(text, ok)| (text.as_bytes().to_vec(), *ok))
        .collect();
    cases.push((b"[submodule \"x\"]\n\turl = ./%0a\xff\n".to_vec(), false));
    cases.push((b"[submodule \"x\"]\n\tpath = -\xff\n".to_vec(), false));
    cases.push((b"[submodule \"x\"]\n\turl\xffpath = -p\n".to_vec(), true));
    for (i, (gitmodules, ok)) in cases.iter().enumerate() {
        eprintln!("case {i}: {:?}", String::from_utf8_lossy(gitmodules));
        let push = |r: Receiver| {
            let w = World::new();
            w.bare("srv.git");
            w.git("srv.git", &["config", "receive.fsckObjects", "true"]);
            w.work("src");
            std::fs::write(w.path("src/.gitmodules"), gitmodules).unwrap();
            w.git("src", &["add", "-A"]);
            w.git("src", &["commit", "-q", "-m", "gitmodules"]);
            let p = w.push("src", r, "srv.git", &["main"]);
            (p, w.refs("srv.git"))
        };
        let (berth, refs) = common::differential(push);
        assert_eq!(berth.success, *ok, "case {i}: {berth:#?}");
        assert_eq!(refs.is_empty(), !ok, "case {i}");
    }
}

/// A kept pack (`receive.unpackLimit` 1) whose delta names a base nobody has is refused in the
/// same words whether the repository has objects to complete a thin pack from or none (then
/// the pack is read as it comes, without the thin-pack completion).
#[test]
fn an_unresolvable_ref_delta_is_refused_alike_in_an_empty_repository() {
    let (w, ids) = world();
    let z = "0".repeat(common::object_format().len_in_hex());
    let mut e = entry_header(7, 6);
    e.extend(hex2raw(
        &"ab".repeat(common::object_format().len_in_bytes()),
    ));
    e.extend(deflate(&[3, 3, 0x90, 3, 0, 0]));
    let base = raw_object(&w, "blob", b"base\n");
    let mut blob = entry_header(3, 5);
    blob.extend(deflate(b"base\n"));
    let pack = pack(&[blob, e]);
    w.bare("empty.git");
    let mut outs = Vec::new();
    for (repo, old) in [("srv.git", ids.c2.as_str()), ("empty.git", z.as_str())] {
        w.git(repo, &["config", "receive.unpackLimit", "1"]);
        let mut input = request(&[format!("{old} {base} refs/heads/main")], "report-status");
        input.extend_from_slice(&pack);
        let out = run(&w, false, repo, &input, false);
        assert!(
            out.stderr.contains("fatal: pack has unresolved deltas"),
            "{repo}: {out:?}"
        );
        assert!(
            out.stdout.contains("ng refs/heads/main unpacker error"),
            "{repo}: {out:?}"
        );
        outs.push(out.stderr);
        w.assert_clean(repo);
    }
    assert_eq!(outs[0], outs[1]);
}
