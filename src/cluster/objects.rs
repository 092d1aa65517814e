//! Objects between replicas: their ingestion and checks on the receiving replica (berth's
//! ingest, with the fsck the repository's configuration asks for, into a quarantine; then
//! berth's connectivity walk through the objects the pack brought, `objects::connectivity`,
//! with no `git` process; only then the move into the copy, [`admit`]), the pack
//! a catch-up asks for (`git pack-objects`; a push's pack is streamed as the client sent it,
//! `tee.rs`), the creation of a replica's repository, and the housekeeping its copy gets after
//! a push ([`housekeeping`]: git's maintenance once `git gc --auto`'s triggers, its packs or
//! its loose objects, say it is due).

use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::wire;
use crate::escape::Escaped;
use crate::objects::connectivity::{Check, Status};
use crate::objects::ingest;
use crate::objects::pack_links::Outside;
use crate::objects::settle;

/// Why objects from a peer could not be taken in, a pack for one made, or a copy created.
#[derive(Debug, thiserror::Error)]
pub(super) enum Error {
    /// The quarantine could not be created.
    #[error("quarantine: {0}")]
    Quarantine(#[source] std::io::Error),
    /// The pack was refused (berth's ingest or fsck).
    #[error("unpack: {0}")]
    Unpack(#[from] ingest::UnpackError),
    /// The quarantine's objects could not be moved into the repository.
    #[error("migrate: {0}")]
    Migrate(#[source] ingest::MigrateError),
    /// Objects the new tips reach are in neither the pack nor the repository.
    #[error("missing necessary objects")]
    MissingObjects,
    /// The list of objects not known to be complete changed under the check each time.
    #[error(transparent)]
    IncompleteChanging(#[from] settle::Unsettled),
    /// The repository's list of objects not known to be complete could not be read or grown.
    #[error("incomplete objects: {0}")]
    Incomplete(#[from] crate::objects::incomplete::Error),
    /// The new shallow roots could not be written to `$GIT_DIR/shallow` (git's report says
    /// `shallow error`).
    #[error("shallow error: {0}")]
    Shallow(#[source] std::io::Error),
    /// The copy's directory could not be created.
    #[error("cannot create directory: {0}")]
    CreateDir(#[source] std::io::Error),
    /// `git init` could not be run.
    #[error("cannot run git init: {0}")]
    RunInit(#[source] std::io::Error),
    /// `git init` failed.
    #[error("git init --bare failed")]
    Init,
    /// `git pack-objects` could not be run.
    #[error("cannot run git pack-objects: {0}")]
    RunPackObjects(#[source] std::io::Error),
    /// `git pack-objects` has no standard input.
    #[error("pack-objects: no stdin")]
    PackObjectsStdin,
    /// The pack could not be read from `git pack-objects`, or it could not be awaited.
    #[error("pack-objects: {0}")]
    PackObjectsIo(#[source] std::io::Error),
    /// `git pack-objects` failed, with what it said.
    #[error("git pack-objects failed: {stderr}")]
    PackObjects { stderr: String },
}

/// The index of a pack a peer sent, kept for the connectivity check after the pack itself moved
/// into the repository (the mapping outlives the rename), with the links its indexing took.
#[derive(Clone)]
pub(super) struct PackIndex(Arc<(gix_pack::index::File, Option<Outside>)>);

impl PackIndex {
    pub(super) fn file(&self) -> &gix_pack::index::File {
        &self.0.0
    }

    /// What the pack links to outside it, as its indexing found it.
    fn links(&self) -> Option<&Outside> {
        self.0.1.as_ref()
    }
}

impl std::fmt::Debug for PackIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PackIndex({} objects)", self.file().num_objects())
    }
}

/// A pack a peer sent, checked, in its quarantine, and its index (`None` for a pack without
/// objects); the copy it arrived for, as opened to take it in (`None`: not kept), so that the
/// push's prepare does not read its configuration again.
pub(super) struct Arrived {
    pub(super) quarantine: ingest::Quarantine,
    pub(super) index: Option<PackIndex>,
    pub(super) copy: Option<Box<crate::repo::Repository>>,
}

impl std::fmt::Debug for Arrived {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Arrived")
            .field("quarantine", &self.quarantine)
            .field("index", &self.index)
            .finish_non_exhaustive()
    }
}

/// The `.keep` files of a migrated pack, removed once the transaction is over.
pub(super) struct Keeps(pub(super) Vec<PathBuf>);

impl Drop for Keeps {
    fn drop(&mut self) {
        for k in &self.0 {
            let _ = std::fs::remove_file(k);
        }
    }
}

/// Ingest the pack read from `reader` into a new quarantine of `repo`, checking every object
/// as the repository's `receive.fsckObjects` asks, as a push from a client (thin packs
/// completed from the repository's objects), and leave it there: nothing is visible to the
/// repository until [`admit`]; dropping the quarantine removes it. `shallow`: the push's
/// shallow commits (the client's, or an entry's roots), whose parents the pack may lack,
/// besides the repository's own.
pub(super) fn receive(
    repo: &crate::repo::Repository,
    objects: &gix_odb::Handle,
    reader: &mut dyn Read,
    shallow: &[gix_hash::ObjectId],
) -> Result<Arrived, Error> {
    let mut q = repo.quarantine().map_err(Error::Quarantine)?;
    // Checked as the repository asks, as the accepting node checked it (checking more here, a
    // replica would refuse what a single node takes), and kept as it keeps it: a pack of
    // fewer objects than `receive.unpackLimit` becomes loose objects, so that small pushes do
    // not pile up packs every later lookup lists. Its objects are bounded by berth's default
    // only: the accepting node applied the repository's `berth.maxObjectSize` already.
    let options = ingest::Options {
        max_object_size: 0,
        ..repo.ingest_options(shallow)
    };
    let mut input = BufReader::with_capacity(64 * 1024, reader);
    let received = ingest::receive_pack(&mut input, &mut q, objects, options)?;
    Ok(Arrived {
        quarantine: q,
        index: received
            .index
            .map(|file| PackIndex(Arc::new((file, received.links)))),
        copy: None,
    })
}

/// Move the objects of `quarantine` (a pack and its `index`, from [`receive`]) into `repo`
/// once every object `tips` reach is there ([`connected`], with `shallow`), as the accepting
/// node moves a push's objects in only after its connectivity check: the check runs over the
/// quarantine (its objects and, through its `info/alternates`, the repository's). A pack that
/// fails it never enters the repository: berth's walks stop at objects a repository has,
/// taking them as complete, so objects left there by a refused pack (a commit whose parent
/// this copy lacks) would let a later push or catch-up build on what is not there. The new
/// shallow roots the tips need are recorded ([`record_shallow`]) once the objects are in, and
/// what of the pack needed roots is then known complete or listed for good
/// ([`crate::objects::incomplete::Pending::settle`]). The `.keep` files that protect the pack
/// until the transaction is over.
pub(super) fn admit(
    repo: &crate::repo::Repository,
    mut quarantine: ingest::Quarantine,
    index: Option<&PackIndex>,
    tips: &[gix_hash::ObjectId],
    shallow: &[gix_hash::ObjectId],
) -> Result<Keeps, Error> {
    let quarantined =
        gix_odb::at(quarantine.path(), repo.object_format).map_err(Error::Quarantine)?;
    let found = connected(repo, &quarantined, index, tips, shallow)?;
    let roots = found.roots;
    quarantine.set_incomplete(found.incomplete);
    drop(quarantined);
    let migrated = quarantine
        .migrate(&repo.objects_dir)
        .map_err(Error::Migrate)?;
    let keeps = Keeps(migrated.keeps);
    record_shallow(repo, &roots)?;
    if let Some(pending) = migrated.pending {
        repo.settle_incomplete(pending);
    }
    Ok(keeps)
}

/// A repository's object and ref format, as the cluster records it (`repos/<name>/format`)
/// so that every replica's copy is created alike, whatever each node's git defaults are.
pub(super) use super::wire::Format;

impl Format {
    /// The format of an open repository.
    pub(super) fn of(repo: &crate::repo::Repository) -> Format {
        Format {
            object_format: match repo.object_format {
                gix_hash::Kind::Sha256 => wire::ObjectFormat::Sha256,
                _ => wire::ObjectFormat::Sha1,
            },
            ref_format: match repo.ref_format {
                crate::repo::RefFormat::Reftable => wire::RefFormat::Reftable,
                crate::repo::RefFormat::Files => wire::RefFormat::Files,
            },
        }
    }

    /// The JSON the cluster records.
    pub(super) fn encode(&self) -> Vec<u8> {
        wire::encode(self)
    }

    /// The recorded JSON, checked.
    pub(super) fn decode(b: &[u8]) -> Result<Format, wire::Decode> {
        wire::decode("format", b)
    }
}

impl std::fmt::Display for Format {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}/{}",
            self.object_format.as_str(),
            self.ref_format.as_str()
        )
    }
}

/// Create the bare repository `dir` in `format` if it does not exist.
pub(super) fn ensure_repository(dir: &Path, format: &Format) -> Result<(), Error> {
    if crate::repo::is_git_dir(dir) {
        return Ok(());
    }
    if let Some(parent) = dir.parent() {
        std::fs::create_dir_all(parent).map_err(Error::CreateDir)?;
    }
    let mut init = std::process::Command::new("git");
    init.args(["init", "--quiet", "--bare"])
        .arg(format!("--object-format={}", format.object_format.as_str()))
        .arg(format!("--ref-format={}", format.ref_format.as_str()));
    let out = init
        .arg("--")
        .arg(dir)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(Error::RunInit)?;
    if !out.status.success() && !crate::repo::is_git_dir(dir) {
        return Err(Error::Init);
    }
    Ok(())
}

/// Whether every object reachable from `tips` is in `repo` (whose `objects` see the migrated
/// pack): git's `rev-list --objects <tips> --not --all`, as the accepting node checks it
/// (`objects::connectivity`): the walk goes through the objects of the pack `index` lists and
/// stops at objects the repository had, which a checked push or git itself put there (but
/// walks through those the repository lists as not known to be complete,
/// [`crate::objects::incomplete`]; what of the pack is not complete is returned, to list). Without
/// an index (the objects were fetched and checked before) each tip must exist.
///
/// `shallow` is the push's shallow roots (the client's `shallow` lines as the accepting node
/// recorded them): one whose parents this copy lacks ends the walk, as on the accepting node.
/// The ones that did are returned: this copy's new shallow roots, to record
/// ([`record_shallow`]) as git's receive-pack does with `receive.shallowUpdate`.
pub(super) fn connected(
    repo: &crate::repo::Repository,
    objects: &gix_odb::Handle,
    index: Option<&PackIndex>,
    tips: &[gix_hash::ObjectId],
    shallow: &[gix_hash::ObjectId],
) -> Result<Connected, Error> {
    let mut list = settle::Listed::new(&repo.objects_dir, repo.object_format);
    until_settled(repo, objects, index, tips, shallow, &mut list)
}

/// [`connected`] with the list of objects not known to be complete as `list` reads it, until
/// it stops changing under the check ([`settle`], as the accepting node's check runs).
fn until_settled(
    repo: &crate::repo::Repository,
    objects: &gix_odb::Handle,
    index: Option<&PackIndex>,
    tips: &[gix_hash::ObjectId],
    shallow: &[gix_hash::ObjectId],
    list: &mut dyn settle::List,
) -> Result<Connected, Error> {
    if tips.is_empty() && index.is_none() {
        return Ok(Connected::default());
    }
    let stops = settle::Stops {
        tips: tips.iter().copied(),
        shallow,
        links: settle::PackLinks::of(index.map(PackIndex::links)),
    };
    let suspects = settle::first_suspects(list, stops)?;
    settle::until_settled(list, suspects, |suspects| {
        let mut check = Check::new(objects, index.map(PackIndex::file), std::iter::empty())
            .with_pack_links(index.and_then(PackIndex::links))
            .with_shallow(
                repo.shallow().into_iter().collect(),
                shallow.iter().copied().collect(),
            )
            .with_suspects(suspects);
        let found = walk(&mut check, tips)?;
        Ok((found, check))
    })
}

/// One pass of [`connected`] over `tips` with the list `check` was given.
fn walk(check: &mut Check<'_>, tips: &[gix_hash::ObjectId]) -> Result<Connected, Error> {
    if check.self_contained(tips) {
        return Ok(Connected::default());
    }
    let mut roots = Vec::new();
    for tip in tips {
        if let Status::Missing(_) = check.tip(*tip) {
            return Err(Error::MissingObjects);
        }
        for root in check.new_roots() {
            if !roots.contains(root) {
                roots.push(*root);
            }
        }
    }
    Ok(Connected {
        roots,
        incomplete: check.incomplete(),
    })
}

/// What [`connected`] found of a push's objects.
#[derive(Default)]
pub(super) struct Connected {
    /// The copy's new shallow roots, to record ([`record_shallow`]).
    pub(super) roots: Vec<gix_hash::ObjectId>,
    /// The objects of the pack that are not complete (no tip reaches them), to list before
    /// they move in ([`crate::objects::incomplete`]), as the accepting node lists them; nothing
    /// when the pack's links vouched for it.
    pub(super) incomplete: crate::objects::incomplete::Found,
}

/// Record `roots` (from [`connected`]) in the copy's `$GIT_DIR/shallow`, before the refs that
/// need them are written (git's receive-pack writes it before its ref updates, too).
pub(super) fn record_shallow(
    repo: &crate::repo::Repository,
    roots: &[gix_hash::ObjectId],
) -> Result<(), Error> {
    if roots.is_empty() {
        return Ok(());
    }
    repo.add_shallow(roots).map_err(Error::Shallow)
}

/// A pack (not thin) of the objects reachable from `tips` and not from `have`; empty when
/// there are no tips. For the catch-up only.
pub(super) fn pack_objects(
    dir: &std::path::Path,
    tips: &[gix_hash::ObjectId],
    have: &[gix_hash::ObjectId],
) -> Result<Vec<u8>, Error> {
    use std::io::{Read, Write};
    if tips.is_empty() {
        return Ok(Vec::new());
    }
    let mut child = std::process::Command::new("git")
        .arg("--git-dir")
        .arg(dir)
        .args([
            "pack-objects",
            "--stdout",
            "--revs",
            "-q",
            "--delta-base-offset",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(Error::RunPackObjects)?;
    let mut input = String::new();
    for t in tips {
        input.push_str(&format!("{t}\n"));
    }
    input.push_str("--not\n");
    let mut seen = std::collections::HashSet::new();
    for h in have {
        if seen.insert(*h) {
            input.push_str(&format!("{h}\n"));
        }
    }
    let mut stdin = child.stdin.take().ok_or(Error::PackObjectsStdin)?;
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(input.as_bytes());
    });
    let mut pack = Vec::new();
    if let Some(mut out) = child.stdout.take() {
        out.read_to_end(&mut pack).map_err(Error::PackObjectsIo)?;
    }
    let _ = writer.join();
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut err);
    }
    let status = child.wait().map_err(Error::PackObjectsIo)?;
    if !status.success() {
        return Err(Error::PackObjects {
            stderr: err.trim().to_owned(),
        });
    }
    Ok(pack)
}

/// What git's receive-pack does after a push, for a replica's copy of repository `name` that a
/// push or a catch-up changed, output discarded: `git update-server-info` when
/// `receive.updateServerInfo` asks, and `git maintenance run --auto` (`receive.autogc`) once
/// the copy has grown past `git gc --auto`'s own triggers ([`maintenance_due`]). A replica
/// keeps each push as the accepting node does (loose objects below `receive.unpackLimit`, a
/// pack above), so without it those piled up forever; asked only then, a push costs a replica
/// no process (`cluster_stream`'s
/// `a_replica_prepares_and_commits_ten_pushes_without_a_git_process`). A failure is logged;
/// the push landed.
pub(super) fn housekeeping(
    name: &str,
    repo: &crate::repo::Repository,
    hooks: &crate::receive::HookEnvironment,
) {
    let limits = &repo.config.housekeeping;
    let grown = Grown {
        packs: unkept_packs(&repo.objects_dir.join("pack")),
        loose_in_17: loose_in_17(
            &repo.objects_dir,
            repo.object_format,
            loose_threshold(limits),
        ),
    };
    let maintain = match maintenance_due(grown, limits) {
        true => crate::receive::Maintenance::AsConfigured,
        false => crate::receive::Maintenance::Skip,
    };
    if let Err(e) = crate::receive::housekeeping_unattended(repo, hooks, maintain) {
        tracing::warn!(target: "berth::cluster", repo = %Escaped::token(name), error = %Escaped::text(&e.to_string()), "housekeeping after a replicated push");
    }
}

/// What of a copy's objects `git gc --auto` counts to decide whether it is due.
#[derive(Debug, Clone, Copy)]
struct Grown {
    /// Its packs, kept ones aside.
    packs: usize,
    /// Its loose objects in `objects/17`, counted up to one past [`loose_threshold`]: git's
    /// estimate of the loose objects, a 256th of them.
    loose_in_17: usize,
}

/// How many loose objects in `objects/17` `git gc --auto` allows: `gc.auto` / 256, rounded up
/// (git's `too_many_loose_objects`).
fn loose_threshold(limits: &crate::repo::config::Housekeeping) -> usize {
    let threshold = u64::try_from(limits.auto_threshold).unwrap_or(0);
    usize::try_from(threshold.div_ceil(256)).unwrap_or(usize::MAX)
}

/// Whether a copy that has `grown` so is due git's maintenance, by `git gc --auto`'s own
/// triggers (`need_to_gc`): more packs than `gc.autoPackLimit` (none at 0 or less), or more
/// loose objects in `objects/17` than [`loose_threshold`]; never when `gc.auto` is 0 or less
/// (`git gc --auto` would do nothing, and a process would be started for every push).
fn maintenance_due(grown: Grown, limits: &crate::repo::config::Housekeeping) -> bool {
    let too_many_packs = limits.auto_pack_limit > 0
        && i64::try_from(grown.packs).unwrap_or(i64::MAX) > limits.auto_pack_limit;
    limits.auto_threshold > 0 && (too_many_packs || grown.loose_in_17 > loose_threshold(limits))
}

/// The packs in `dir` without a `.keep`, as `git gc --auto` counts them (an unreadable
/// directory: none).
fn unkept_packs(dir: &std::path::Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let names: std::collections::HashSet<std::ffi::OsString> = entries
        .filter_map(|e| e.ok().map(|e| e.file_name()))
        .collect();
    names
        .iter()
        .filter_map(|n| n.to_str()?.strip_suffix(".pack"))
        .filter(|stem| !names.contains(std::ffi::OsStr::new(&format!("{stem}.keep"))))
        .count()
}

/// The loose objects in `objects/17` (names of the rest of an id of `hash` in lowercase hex),
/// counted until one past `threshold`, as git's `too_many_loose_objects` stops (an unreadable
/// directory: none).
fn loose_in_17(objects_dir: &std::path::Path, hash: gix_hash::Kind, threshold: usize) -> usize {
    let Ok(entries) = std::fs::read_dir(objects_dir.join("17")) else {
        return 0;
    };
    let rest = hash.len_in_hex() - 2;
    entries
        .filter_map(|e| e.ok().map(|e| e.file_name()))
        .filter(|n| {
            let n = n.as_encoded_bytes();
            n.len() == rest && n.iter().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        })
        .take(threshold.saturating_add(1))
        .count()
}

#[cfg(test)]
mod tests {
    use super::{
        Error, Format, Grown, admit, loose_in_17, loose_threshold, maintenance_due, receive,
        settle, unkept_packs, wire,
    };

    /// Maintenance is due past `gc.autoPackLimit` or past `gc.auto`'s share of loose objects in
    /// `objects/17`, never with `gc.auto` at 0 or less; kept packs and other files are not
    /// counted.
    #[test]
    fn maintenance_is_due_past_the_pack_limit_or_the_loose_objects_estimate() {
        let limit = |auto_pack_limit, auto_threshold| crate::repo::config::Housekeeping {
            auto_pack_limit,
            auto_threshold,
            ..Default::default()
        };
        let packs = |packs| Grown {
            packs,
            loose_in_17: 0,
        };
        let loose = |loose_in_17| Grown {
            packs: 0,
            loose_in_17,
        };
        assert!(!maintenance_due(packs(50), &limit(50, 6700)));
        assert!(maintenance_due(packs(51), &limit(50, 6700)));
        assert!(!maintenance_due(packs(1_000), &limit(0, 6700)));
        assert!(!maintenance_due(packs(1_000), &limit(-1, 6700)));
        // git: DIV_ROUND_UP(6700, 256) = 27 loose objects in objects/17, more is due.
        assert_eq!(loose_threshold(&limit(50, 6700)), 27);
        assert!(!maintenance_due(loose(27), &limit(50, 6700)));
        assert!(maintenance_due(loose(28), &limit(50, 6700)));
        assert!(maintenance_due(loose(28), &limit(0, 6700)));
        assert_eq!(loose_threshold(&limit(50, 1)), 1);
        assert!(maintenance_due(loose(2), &limit(50, 1)));
        // `gc.auto` at 0: git's gc --auto does nothing, so nothing is started.
        assert!(!maintenance_due(packs(1_000), &limit(50, 0)));
        assert!(!maintenance_due(loose(1_000), &limit(50, 0)));
        assert!(!maintenance_due(loose(1_000), &limit(50, -5)));
        let dir = tempfile::tempdir().unwrap();
        for f in [
            "a.pack", "a.idx", "b.pack", "b.keep", "c.pack", "c.rev", "d.idx",
        ] {
            std::fs::write(dir.path().join(f), "").unwrap();
        }
        assert_eq!(unkept_packs(dir.path()), 2);
        assert_eq!(unkept_packs(&dir.path().join("none")), 0);

        // Loose objects: only names of the rest of an id in lowercase hex, counted up to one
        // past the threshold.
        let objects = tempfile::tempdir().unwrap();
        let d17 = objects.path().join("17");
        std::fs::create_dir(&d17).unwrap();
        let rest = |i: usize| format!("{i:038x}");
        for i in 0..5 {
            std::fs::write(d17.join(rest(i)), "").unwrap();
        }
        for odd in [
            format!("{:037x}", 1),
            format!("{:039x}", 1),
            rest(9).to_uppercase().replace('0', "A"),
            format!("tmp_obj_{}", rest(1)),
        ] {
            std::fs::write(d17.join(odd), "").unwrap();
        }
        let sha1 = gix_hash::Kind::Sha1;
        assert_eq!(loose_in_17(objects.path(), sha1, 100), 5);
        assert_eq!(loose_in_17(objects.path(), sha1, 2), 3);
        assert_eq!(loose_in_17(objects.path(), gix_hash::Kind::Sha256, 100), 0);
        assert_eq!(loose_in_17(&objects.path().join("none"), sha1, 100), 0);
    }

    /// The pack git makes of `revs` (its `--revs` input) in `repo`, as bytes.
    fn pack_of(repo: &std::path::Path, revs: &str) -> Vec<u8> {
        let args = ["pack-objects", "--revs", "--stdout", "-q"];
        crate::test_git::git_bytes(repo, &args, revs.as_bytes())
    }

    /// What a copy's object directory holds: its packs and loose objects.
    fn held(objects: &std::path::Path) -> Vec<String> {
        let mut held = Vec::new();
        for entry in std::fs::read_dir(objects).unwrap() {
            let entry = entry.unwrap();
            let name = entry.file_name().to_string_lossy().into_owned();
            if name == "pack" || name.len() == 2 {
                for f in std::fs::read_dir(entry.path()).unwrap() {
                    held.push(format!(
                        "{name}/{}",
                        f.unwrap().file_name().to_string_lossy()
                    ));
                }
            }
        }
        held
    }

    /// A pack whose commits lack what they build on (a copy behind the log) is refused by
    /// [`admit`] and leaves nothing in the repository (berth's walks take an object that is
    /// there as complete); once what it builds on is there, it moves in.
    #[test]
    fn admit_moves_in_only_a_pack_whose_tips_are_connected() {
        use crate::test_git::git;
        let dir = tempfile::tempdir().unwrap();
        let commits = crate::test_git::history(dir.path());
        let (work, first, last) = (dir.path().join("r"), &commits[0], &commits[9]);
        git(dir.path(), &["init", "-q", "--bare", "copy.git"]);
        let copy = dir.path().join("copy.git");
        let repo =
            crate::repo::Repository::open(copy.to_str().unwrap(), &Default::default()).unwrap();
        let objects = gix_odb::at(&repo.objects_dir, repo.object_format).unwrap();
        let tip = gix_hash::ObjectId::from_hex(last.as_bytes()).unwrap();

        // The last commit without what the first reaches: the copy has none of that.
        let stream = pack_of(&work, &format!("{last}\n--not\n{first}\n"));
        let arrived = receive(&repo, &objects, &mut &stream[..], &[]).unwrap();
        let refused = admit(
            &repo,
            arrived.quarantine,
            arrived.index.as_ref(),
            &[tip],
            &[],
        );
        assert!(
            matches!(refused, Err(Error::MissingObjects)),
            "{:?}",
            refused.as_ref().map(|keeps| &keeps.0)
        );
        assert_eq!(held(&repo.objects_dir), Vec::<String>::new());

        // The first commit's history, then the same pack again: it moves in.
        let base = pack_of(&work, &format!("{first}\n"));
        let arrived = receive(&repo, &objects, &mut &base[..], &[]).unwrap();
        let first_id = gix_hash::ObjectId::from_hex(first.as_bytes()).unwrap();
        let q = arrived.quarantine;
        admit(&repo, q, arrived.index.as_ref(), &[first_id], &[]).unwrap();
        let arrived = receive(&repo, &objects, &mut &stream[..], &[]).unwrap();
        let _keeps = admit(
            &repo,
            arrived.quarantine,
            arrived.index.as_ref(),
            &[tip],
            &[],
        )
        .unwrap();
        assert!(repo.shallow().is_empty());
        git(&copy, &["cat-file", "-e", last]);
        git(&copy, &["cat-file", "-e", first]);
    }

    /// A replica's check looks through the list of objects not known to be complete again
    /// after it ran, as the accepting node's does: `lists[k]` is the list at the k-th time it
    /// is looked at or read (the last one from then on). The result, and how many times.
    fn settled(
        repo: &crate::repo::Repository,
        tip: gix_hash::ObjectId,
        lists: &[Vec<gix_hash::ObjectId>],
    ) -> (Result<super::Connected, Error>, usize) {
        let objects = gix_odb::at(&repo.objects_dir, repo.object_format).unwrap();
        let mut list = settle::InTurn { lists, reads: 0 };
        let result = super::until_settled(repo, &objects, None, &[tip], &[], &mut list);
        (result, list.reads)
    }

    /// A commit whose parent the copy lacks, not listed when the check began and listed by the
    /// time it ended (a concurrent push listed it, then moved it in): checked again and refused,
    /// not taken as complete for being there. A list that keeps growing under the check by what
    /// it relied on ends it after four passes.
    #[test]
    fn a_replica_checks_again_what_was_listed_while_its_check_ran() {
        use crate::test_git::git;
        let dir = tempfile::tempdir().unwrap();
        let commits = crate::test_git::history(dir.path());
        git(dir.path(), &["clone", "-q", "--bare", "r", "copy.git"]);
        let copy = dir.path().join("copy.git");
        let broken = crate::test_git::commit_without_parent(&copy, "x");
        let repo =
            crate::repo::Repository::open(copy.to_str().unwrap(), &Default::default()).unwrap();

        let (result, reads) = settled(&repo, broken, &[vec![], vec![broken]]);
        assert!(matches!(result, Err(Error::MissingObjects)), "{reads}");
        assert_eq!(
            reads, 3,
            "looked through, looked through again, read, then refused by the second pass"
        );
        let (result, reads) = settled(&repo, broken, &[vec![]]);
        assert!(result.is_ok());
        assert_eq!(
            reads, 2,
            "one pass, the list looked through before and after it"
        );
        let other = gix_hash::ObjectId::from_hex("cd".repeat(20).as_bytes()).unwrap();
        let (result, reads) = settled(&repo, broken, &[vec![], vec![other]]);
        assert!(
            result.is_ok(),
            "what the check did not rely on changes nothing"
        );
        assert_eq!(reads, 2);

        // Each read lists the commit the last pass stopped at: complete, but never settled.
        let ids: Vec<_> = commits
            .iter()
            .rev()
            .map(|c| gix_hash::ObjectId::from_hex(c.as_bytes()).unwrap())
            .collect();
        let lists: Vec<Vec<_>> = (0..ids.len()).map(|k| ids[..k].to_vec()).collect();
        let (result, reads) = settled(&repo, ids[0], &lists);
        assert!(
            matches!(
                result,
                Err(Error::IncompleteChanging(settle::Unsettled {
                    passes: settle::MAX_PASSES
                }))
            ),
            "{:?}",
            result.err()
        );
        assert_eq!(
            reads,
            2 * settle::MAX_PASSES,
            "looked through after each pass, read before the next"
        );
        let (result, _) = settled(&repo, ids[0], &lists[1..2]);
        assert!(
            result.is_ok(),
            "the tip listed from the start: walked through"
        );
    }

    #[test]
    fn format_round_trips_and_refuses_what_git_init_would_not_take() {
        let f = Format {
            object_format: wire::ObjectFormat::Sha256,
            ref_format: wire::RefFormat::Reftable,
        };
        assert_eq!(Format::decode(&f.encode()).unwrap(), f);
        assert_eq!(f.to_string(), "sha256/reftable");
        for bad in [
            r#"{"object_format":"md5","ref_format":"files"}"#,
            r#"{"object_format":"sha1","ref_format":"--upload-pack=x"}"#,
            r#"{"object_format":"sha1"}"#,
            "not json",
        ] {
            assert!(Format::decode(bad.as_bytes()).is_err(), "{bad}");
        }
    }
}
