//! Durability (`core.fsync`, `core.fsyncMethod`): a real `git push` into berth, and into `git
//! receive-pack`, runs under `strace -f -y`, and the files each syncs are compared, as is the
//! order git relies on: a file is synced before the rename (or link) that publishes it.

use crate::common;
use common::{Receiver, World};

use std::collections::BTreeSet;

/// One traced system call.
#[derive(Debug, Clone)]
enum Call {
    /// `fsync`, `fdatasync` or `sync_file_range` of the file at `path`.
    Sync { call: String, path: String },
    /// `rename*` or `link*` of `from` to `to`.
    Move { from: String, to: String },
}

/// What a file is, for comparing git's names (`tmp_pack_XXXXXX`, `tmp_obj_XXXXXX`) with
/// berth's (`pack-<hash>.pack`, `xx/<38 hex>`).
fn kind(path: &str) -> String {
    let name = path.rsplit('/').next().unwrap_or(path);
    let parent = path.rsplit('/').nth(1).unwrap_or("");
    let hex = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_hexdigit());
    if name.starts_with("tmp_pack_") || name.ends_with(".pack") {
        "pack"
    } else if name.starts_with("tmp_idx_") || name.ends_with(".idx") {
        "idx"
    } else if name.starts_with("tmp_rev_") || name.ends_with(".rev") {
        "rev"
    } else if name.starts_with("tmp_obj_") || (hex(parent, 2) && hex(name, 38)) {
        "loose"
    } else if name.starts_with("bulk_fsync_") {
        "bulk-flush"
    } else if name == "tables.list.lock" {
        "tables.list"
    } else if path.contains("/reftable/") {
        "table"
    } else if name == "packed-refs.new" {
        "packed-refs"
    } else if path.contains("/refs/") && name.ends_with(".lock") {
        "ref-lock"
    } else {
        return format!("other:{name}");
    }
    .to_owned()
}

/// The quoted strings of a trace line (the paths of `rename`, `renameat`, `link`, ...).
fn quoted(line: &str) -> Vec<String> {
    line.split('"')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

fn parse(trace: &str) -> Vec<Call> {
    let mut calls = Vec::new();
    for line in trace.lines() {
        // `<pid> <call>(...) = <result>`, successful calls only.
        let line = line.trim_start_matches(|c: char| c.is_ascii_digit()).trim();
        if !line.ends_with("= 0") {
            continue;
        }
        let Some((call, _)) = line.split_once('(') else {
            continue;
        };
        match call {
            "fsync" | "fdatasync" | "sync_file_range" => {
                let (Some(start), Some(end)) =
                    (line.find('<'), line.find(">)").or(line.find(">,")))
                else {
                    continue;
                };
                calls.push(Call::Sync {
                    call: call.to_owned(),
                    path: line[start + 1..end].to_owned(),
                });
            }
            "rename" | "renameat" | "renameat2" | "link" | "linkat" => {
                let q = quoted(line);
                if q.len() >= 2 {
                    calls.push(Call::Move {
                        from: q[0].clone(),
                        to: q[q.len() - 1].clone(),
                    });
                }
            }
            _ => {}
        }
    }
    calls
}

/// Push `main` from `src` into a new bare repository `name` (`--ref-format=format`) configured
/// with `config`, through `receiver` under strace, and return the receiving side's calls.
fn traced_push(
    w: &World,
    receiver: Receiver,
    name: &str,
    format: &str,
    config: &[(&str, &str)],
    refspecs: &[&str],
) -> Vec<Call> {
    w.git(
        ".",
        &[
            "init",
            "-q",
            "--bare",
            "-b",
            "main",
            &format!("--ref-format={format}"),
            name,
        ],
    );
    for (k, v) in config {
        w.git(name, &["config", k, v]);
    }
    let trace = w.path(&format!("{name}.trace"));
    let rp = format!(
        "--receive-pack=strace -f -qq -e signal=none -y -s 4096 \
         -e trace=fsync,fdatasync,sync_file_range,rename,renameat,renameat2,link,linkat \
         -o '{}' {}",
        trace.display(),
        receiver.command()
    );
    let url = w.path(name);
    let mut args = vec!["push", "-q", rp.as_str(), url.to_str().unwrap()];
    args.extend_from_slice(refspecs);
    let out = w.git_out("src", &args);
    assert!(
        out.status.success(),
        "push into {name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    parse(&std::fs::read_to_string(trace).unwrap())
}

/// The kinds of file synced, each with the syscall used.
fn synced(calls: &[Call]) -> BTreeSet<(String, String)> {
    calls
        .iter()
        .filter_map(|c| match c {
            Call::Sync { call, path } => Some((kind(path), call.clone())),
            Call::Move { .. } => None,
        })
        .collect()
}

/// The position of the first call matching `f`.
fn first(calls: &[Call], what: &str, f: impl Fn(&Call) -> bool) -> usize {
    calls
        .iter()
        .position(f)
        .unwrap_or_else(|| panic!("no {what} in {calls:#?}"))
}

/// The position of the last sync of a file of kind `k`.
fn last_sync(calls: &[Call], k: &str) -> usize {
    calls
        .iter()
        .rposition(|c| matches!(c, Call::Sync { path, .. } if kind(path) == k))
        .unwrap_or_else(|| panic!("no sync of a {k} in {calls:#?}"))
}

/// The migration of the quarantine: a rename or link out of `tmp_objdir-*`.
fn is_migration(c: &Call) -> bool {
    matches!(c, Call::Move { from, to } if from.contains("/tmp_objdir-") && !to.contains("/tmp_objdir-"))
}

fn is_ref_commit(c: &Call) -> bool {
    matches!(c, Call::Move { from, to } if from.ends_with("refs/heads/main.lock") && to.ends_with("refs/heads/main"))
}

fn is_tables_list_commit(c: &Call) -> bool {
    matches!(c, Call::Move { to, .. } if to.ends_with("reftable/tables.list"))
}

fn set(items: &[(&str, &str)]) -> BTreeSet<(String, String)> {
    items
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

/// A client with one commit (three objects) on `main`.
fn world() -> World {
    let w = World::new();
    w.work("src");
    w.commit("src", "a", "1");
    w
}

/// Both receivers, same push, same configuration: berth's calls, after checking that berth
/// syncs the same kinds of file with the same calls as git.
fn same_as_git(
    w: &World,
    name: &str,
    format: &str,
    config: &[(&str, &str)],
    expected: &[(&str, &str)],
) -> Vec<Call> {
    let git = traced_push(
        w,
        Receiver::Git,
        &format!("git-{name}"),
        format,
        config,
        &["main"],
    );
    let berth = traced_push(
        w,
        Receiver::Berth,
        &format!("berth-{name}"),
        format,
        config,
        &["main"],
    );
    assert_eq!(synced(&git), set(expected), "git receive-pack, {config:?}");
    assert_eq!(
        synced(&berth),
        set(expected),
        "berth, {config:?}: {berth:#?}"
    );
    berth
}

const KEEP_PACK: (&str, &str) = ("receive.unpackLimit", "1");

#[test]
fn by_default_the_pack_and_its_indexes_are_synced_before_migration_and_refs() {
    let w = world();
    let calls = same_as_git(
        &w,
        "default",
        "files",
        &[KEEP_PACK],
        &[("pack", "fsync"), ("idx", "fsync"), ("rev", "fsync")],
    );
    let migration = first(&calls, "migration", is_migration);
    let ref_commit = first(&calls, "ref update", is_ref_commit);
    for k in ["pack", "idx", "rev"] {
        assert!(
            last_sync(&calls, k) < migration,
            "{k} synced before migration"
        );
    }
    assert!(migration < ref_commit);
}

#[test]
fn core_fsync_none_syncs_nothing() {
    let w = world();
    same_as_git(
        &w,
        "none",
        "files",
        &[KEEP_PACK, ("core.fsync", "none")],
        &[],
    );
    // Loose objects too.
    same_as_git(&w, "none-loose", "files", &[("core.fsync", "none")], &[]);
}

#[test]
fn core_fsync_reference_syncs_the_ref_lock_before_its_rename() {
    let w = world();
    let calls = same_as_git(
        &w,
        "reference",
        "files",
        &[KEEP_PACK, ("core.fsync", "reference")],
        &[
            ("pack", "fsync"),
            ("idx", "fsync"),
            ("rev", "fsync"),
            ("ref-lock", "fsync"),
        ],
    );
    let ref_commit = first(&calls, "ref update", is_ref_commit);
    assert!(last_sync(&calls, "ref-lock") < ref_commit);
    assert!(last_sync(&calls, "pack") < first(&calls, "migration", is_migration));
}

#[test]
fn reftable_tables_are_synced_before_tables_list_names_them() {
    let w = world();
    // git's default hardens no reference: tables are not synced.
    same_as_git(
        &w,
        "rt-default",
        "reftable",
        &[KEEP_PACK],
        &[("pack", "fsync"), ("idx", "fsync"), ("rev", "fsync")],
    );
    let calls = same_as_git(
        &w,
        "rt-reference",
        "reftable",
        &[KEEP_PACK, ("core.fsync", "reference")],
        &[
            ("pack", "fsync"),
            ("idx", "fsync"),
            ("rev", "fsync"),
            ("table", "fsync"),
            ("tables.list", "fsync"),
        ],
    );
    let commit = first(&calls, "tables.list rename", is_tables_list_commit);
    assert!(last_sync(&calls, "table") < commit);
    assert!(last_sync(&calls, "tables.list") < commit);
    assert!(last_sync(&calls, "pack") < first(&calls, "migration", is_migration));
}

#[test]
fn loose_objects_with_each_method() {
    let w = world();
    for (method, expected) in [
        ("fsync", &[("loose", "fsync")][..]),
        ("writeout-only", &[("loose", "sync_file_range")][..]),
        (
            "batch",
            &[("loose", "sync_file_range"), ("bulk-flush", "fsync")][..],
        ),
    ] {
        let calls = same_as_git(
            &w,
            &format!("loose-{method}"),
            "files",
            &[("core.fsync", "loose-object"), ("core.fsyncMethod", method)],
            expected,
        );
        let migration = first(&calls, "migration", is_migration);
        assert!(last_sync(&calls, "loose") < migration, "{method}");
        let synced_loose = calls
            .iter()
            .filter(|c| matches!(c, Call::Sync { path, .. } if kind(path) == "loose"))
            .count();
        assert_eq!(synced_loose, 3, "{method}: every object");
        if method == "batch" {
            assert!(last_sync(&calls, "bulk-flush") < migration);
        }
    }
    // The deprecated core.fsyncObjectFiles syncs loose objects whatever core.fsync says.
    same_as_git(
        &w,
        "loose-deprecated",
        "files",
        &[("core.fsyncObjectFiles", "true")],
        &[("loose", "fsync")],
    );
}

#[test]
fn pack_methods() {
    let w = world();
    // batch applies to loose objects only: packs are fsynced.
    same_as_git(
        &w,
        "batch-pack",
        "files",
        &[KEEP_PACK, ("core.fsyncMethod", "batch")],
        &[("pack", "fsync"), ("idx", "fsync"), ("rev", "fsync")],
    );
    same_as_git(
        &w,
        "writeout",
        "files",
        &[KEEP_PACK, ("core.fsyncMethod", "writeout-only")],
        &[
            ("pack", "sync_file_range"),
            ("idx", "sync_file_range"),
            ("rev", "sync_file_range"),
        ],
    );
}

/// A batch of refs large enough for berth's one-rewrite `packed-refs` path (git writes loose
/// refs for it, so this one is berth's alone).
#[test]
fn packed_refs_are_synced_before_their_rename() {
    let w = world();
    let specs: Vec<String> = (0..120)
        .map(|i| format!("main:refs/heads/b{i:03}"))
        .collect();
    let specs: Vec<&str> = specs.iter().map(String::as_str).collect();
    let calls = traced_push(
        &w,
        Receiver::Berth,
        "packed.git",
        "files",
        &[("core.fsync", "reference")],
        &specs,
    );
    let rename = first(
        &calls,
        "packed-refs rename",
        |c| matches!(c, Call::Move { from, .. } if from.ends_with("packed-refs.new")),
    );
    assert!(last_sync(&calls, "packed-refs") < rename, "{calls:#?}");
    let calls = traced_push(
        &w,
        Receiver::Berth,
        "packed-default.git",
        "files",
        &[],
        &specs,
    );
    assert!(!synced(&calls).iter().any(|(k, _)| k == "packed-refs"));
}
