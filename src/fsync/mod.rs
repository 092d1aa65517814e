//! What is made durable, and how: git's `core.fsync` components and `core.fsyncMethod`
//! (`write-or-die.c`, `environment.c`), for every file a push writes.
//!
//! git hardens a file when its component is in `core.fsync` (by default `pack` and
//! `pack-metadata`: received packs and their `.idx`/`.rev`; not loose objects, not refs), always
//! before the rename that publishes it: a pack and its index before the quarantine is migrated
//! into `objects/pack`, a ref's lock file before it is renamed over the ref, `packed-refs.new`
//! before it replaces `packed-refs`, a new reftable table before `tables.list` names it (and
//! `tables.list.lock` before its rename). git fsyncs no directory and no `.keep`, reflog or
//! `shallow` file; neither does berth (`shallow` aside, which berth always syncs).
//!
//! `core.fsyncMethod`: `fsync` (the default on Linux) calls `fsync(2)`; `writeout-only` asks
//! for the write-back of the page cache without a hardware flush (Linux `sync_file_range(2)`,
//! `fsync` where that fails or elsewhere); `batch` does that for each loose object of a push and
//! then one `fsync` of a dummy file in the quarantine before it is migrated (git's bulk-checkin
//! flush; on Linux the dummy's fsync commits the file system's journal and flushes the disk
//! cache, which is the approximation git makes too). For every other component `batch` is
//! `fsync`, as in git. `GIT_TEST_FSYNC=false` (git's test suite sets it) syncs nothing.
//!
//! A cluster node acknowledges a push only once it is on disk ([`Floor::Synced`], `berth serve
//! --cluster-durability`): on top of `core.fsync`, objects and refs are synced, and so are the
//! directories they are renamed into ([`Directories::Synced`], [`Durability::sync_dir`]), each
//! right after its renames: the objects' before the refs that need them are written.

use std::fs::File;
use std::io;
use std::path::Path;

/// A set of `core.fsync` components (git's `enum fsync_component`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Components(u8);

impl Components {
    /// `none`.
    pub const NONE: Components = Components(0);
    /// `loose-object`: objects written as loose files (a push below `receive.unpackLimit`).
    pub const LOOSE_OBJECT: Components = Components(1 << 0);
    /// `pack`: received packs.
    pub const PACK: Components = Components(1 << 1);
    /// `pack-metadata`: pack indexes (`.idx`, `.rev`) and bitmaps.
    pub const PACK_METADATA: Components = Components(1 << 2);
    /// `commit-graph` (a push writes none).
    pub const COMMIT_GRAPH: Components = Components(1 << 3);
    /// `index` (a push writes none; `updateInstead` leaves it to `git read-tree`).
    pub const INDEX: Components = Components(1 << 4);
    /// `reference`: loose refs, `packed-refs`, reftable tables and `tables.list`.
    pub const REFERENCE: Components = Components(1 << 5);
    /// git's `FSYNC_COMPONENT_OBJECT_MAP` (no name of its own; part of `all`).
    pub const OBJECT_MAP: Components = Components(1 << 6);
    /// `objects`: `loose-object,pack`.
    pub const OBJECTS: Components = Components(1 | 1 << 1);
    /// `derived-metadata`: `pack-metadata,commit-graph`.
    pub const DERIVED_METADATA: Components = Components(1 << 2 | 1 << 3);
    /// `committed`: `objects,reference`.
    pub const COMMITTED: Components = Components(Self::OBJECTS.0 | Self::REFERENCE.0);
    /// `added`: `committed,index`.
    pub const ADDED: Components = Components(Self::COMMITTED.0 | Self::INDEX.0);
    /// `all`.
    pub const ALL: Components = Components(0x7f);
    /// git's `FSYNC_COMPONENTS_DEFAULT`: `objects,derived-metadata` without `loose-object`,
    /// that is `pack,pack-metadata,commit-graph`.
    pub const DEFAULT: Components =
        Components((Self::OBJECTS.0 | Self::DERIVED_METADATA.0) & !Self::LOOSE_OBJECT.0);

    /// git's `fsync_component_names`, in its order.
    const NAMES: [(&'static str, Components); 11] = [
        ("loose-object", Self::LOOSE_OBJECT),
        ("pack", Self::PACK),
        ("pack-metadata", Self::PACK_METADATA),
        ("commit-graph", Self::COMMIT_GRAPH),
        ("index", Self::INDEX),
        ("objects", Self::OBJECTS),
        ("reference", Self::REFERENCE),
        ("derived-metadata", Self::DERIVED_METADATA),
        ("committed", Self::COMMITTED),
        ("added", Self::ADDED),
        ("all", Self::ALL),
    ];

    /// Whether any component of `other` is in the set.
    pub fn intersects(self, other: Components) -> bool {
        self.0 & other.0 != 0
    }

    /// A `core.fsync` value, as git's `parse_fsync_components` reads it: comma-separated
    /// names, `-name` to remove one from [`Components::DEFAULT`] (what is named is added after
    /// the removals, so `all,-pack` is `all`); `none` (as the last item) starts from nothing
    /// instead; an empty value is the default. Like git, a name
    /// matches every component it is a prefix of (`pack` is also `pack-metadata`). What git
    /// warns about goes to `warn`, without `warning: `.
    pub fn parse(value: &str, mut warn: impl FnMut(String)) -> Components {
        let (mut current, mut positive, mut negative) = (Self::DEFAULT.0, 0u8, 0u8);
        let mut rest = value;
        loop {
            rest = rest.trim_start_matches([',', ' ', '\t', '\n', '\r']);
            let end = rest.find(',').unwrap_or(rest.len());
            // git compares the rest of the string: `none` counts only as the last item.
            if rest == "none" {
                current = 0;
                rest = &rest[end..];
                continue;
            }
            let mut item = &rest[..end];
            let negated = item.starts_with('-');
            if negated {
                item = &item[1..];
                if item.is_empty() {
                    warn("invalid value for variable core.fsync".into());
                }
            }
            if item.is_empty() {
                break;
            }
            let mut found = false;
            for (name, bits) in Self::NAMES {
                if name.starts_with(item) {
                    found = true;
                    if negated {
                        negative |= bits.0;
                    } else {
                        positive |= bits.0;
                    }
                }
            }
            if !found {
                warn(format!("ignoring unknown core.fsync component '{item}'"));
            }
            rest = &rest[end..];
        }
        Components((current & !negative) | positive)
    }
}

impl Default for Components {
    fn default() -> Self {
        Components::DEFAULT
    }
}

/// `core.fsyncMethod`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Method {
    /// `fsync` (the default): `fsync(2)`.
    #[default]
    Fsync,
    /// `writeout-only`: page-cache write-back without a hardware flush.
    WriteoutOnly,
    /// `batch`: write-back per loose object, one hardware flush before they are published.
    Batch,
}

impl Method {
    /// A `core.fsyncMethod` value; `None` for one git ignores with a warning.
    pub fn parse(value: &str) -> Option<Method> {
        match value {
            "fsync" => Some(Method::Fsync),
            "writeout-only" => Some(Method::WriteoutOnly),
            "batch" => Some(Method::Batch),
            _ => None,
        }
    }
}

/// Whether the directory a file is renamed into is synced after the rename.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Directories {
    /// Not synced, as in git: the rename is durable when the file system commits it.
    #[default]
    Unsynced,
    /// Synced after the renames into it, for every component that is synced (a cluster node's
    /// [`Floor::Synced`]).
    Synced,
}

/// What a cluster node makes durable whatever `core.fsync` says, before it reports a push
/// applied (`berth serve --cluster-durability`, whose default is [`Floor::Synced`]; outside a
/// cluster, [`Floor::CoreFsync`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Floor {
    /// Only what `core.fsync` says (git's default: packs and their indexes, not loose
    /// objects, not refs); a power loss of every replica can lose acknowledged pushes.
    #[default]
    CoreFsync,
    /// Loose objects, packs and their indexes, refs (loose, `packed-refs`, reftable tables
    /// and `tables.list`) and the directories they are renamed into, with `fsync(2)`
    /// (`writeout-only` is not a flush: it becomes `fsync`; `batch` stays).
    Synced,
}

/// What a push makes durable and how: `core.fsync`, `core.fsyncMethod`,
/// `core.fsyncObjectFiles` and `GIT_TEST_FSYNC`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Durability {
    /// `core.fsync`.
    pub components: Components,
    /// `core.fsyncMethod`.
    pub method: Method,
    /// `core.fsyncObjectFiles` (deprecated): true syncs loose objects whatever `core.fsync`
    /// says.
    pub object_files: bool,
    /// False when `GIT_TEST_FSYNC` is false: nothing is synced.
    pub enabled: bool,
    /// Whether the directories files are renamed into are synced (not in git).
    pub directories: Directories,
}

impl Default for Durability {
    fn default() -> Self {
        Durability {
            components: Components::DEFAULT,
            method: Method::Fsync,
            object_files: false,
            enabled: true,
            directories: Directories::Unsynced,
        }
    }
}

impl Durability {
    /// Nothing is synced (`core.fsync=none`).
    pub const NONE: Durability = Durability {
        components: Components::NONE,
        method: Method::Fsync,
        object_files: false,
        enabled: true,
        directories: Directories::Unsynced,
    };

    /// This durability raised to `floor`: what `core.fsync` names stays synced, and
    /// [`Floor::Synced`] adds every component a push publishes, and their directories.
    pub fn at_least(self, floor: Floor) -> Durability {
        match floor {
            Floor::CoreFsync => self,
            Floor::Synced => Durability {
                components: Components(
                    self.components.0 | Components::COMMITTED.0 | Components::PACK_METADATA.0,
                ),
                method: match self.method {
                    Method::WriteoutOnly => Method::Fsync,
                    m => m,
                },
                directories: Directories::Synced,
                ..self
            },
        }
    }

    /// Make the renames into directory `dir` of files of `component` durable, when
    /// directories are synced and that component is: `fsync(2)` of the directory.
    pub fn sync_dir(&self, component: Components, dir: &Path) -> io::Result<()> {
        if self.syncs_dirs(component) {
            File::open(dir)
                .and_then(|d| d.sync_all())
                .map_err(|e| fsync_error(dir, e))?;
        }
        Ok(())
    }

    /// Whether the directories files of `component` are renamed into are synced ([`sync_dir`]
    /// does something): a caller collects those directories only then.
    ///
    /// [`sync_dir`]: Durability::sync_dir
    pub fn syncs_dirs(&self, component: Components) -> bool {
        self.directories == Directories::Synced && self.syncs(component)
    }

    /// Whether files of `component` are synced.
    pub fn syncs(&self, component: Components) -> bool {
        self.enabled && self.components.intersects(component)
    }

    /// git's `fsync_component`: make `file` durable if its `component` is hardened.
    pub fn sync(&self, component: Components, file: &File) -> io::Result<()> {
        if self.syncs(component) {
            self.sync_file(file)?;
        }
        Ok(())
    }

    /// [`Durability::sync`] for a file written by someone else (gix-pack's pack and index),
    /// reopened by `path`.
    pub fn sync_path(&self, component: Components, path: &Path) -> io::Result<()> {
        if self.syncs(component) {
            self.sync_file(&File::open(path)?)
                .map_err(|e| fsync_error(path, e))?;
        }
        Ok(())
    }

    /// git's `close_loose_object` for the loose object written through `file` (`path` names it
    /// in an error): with `batch`, write-back only, the flush owed recorded in `batch`; else
    /// synced as its component says, or always with `core.fsyncObjectFiles`.
    pub fn sync_loose_object(&self, file: &File, path: &Path, batch: &mut Batch) -> io::Result<()> {
        if !self.enabled {
            return Ok(());
        }
        let hardened = self.components.intersects(Components::LOOSE_OBJECT);
        if !hardened && !self.object_files {
            return Ok(());
        }
        if hardened && self.method == Method::Batch {
            batch.pending = true;
            if writeout(file).is_ok() {
                return Ok(());
            }
        }
        self.sync_file(file).map_err(|e| fsync_error(path, e))
    }

    /// git's `maybe_fsync`: write-back only for `writeout-only` (where the platform can),
    /// else `fsync(2)`.
    fn sync_file(&self, file: &File) -> io::Result<()> {
        if !self.enabled {
            return Ok(());
        }
        if self.method == Method::WriteoutOnly && writeout(file).is_ok() {
            return Ok(());
        }
        file.sync_all()
    }
}

/// Loose objects written back but not yet flushed (`core.fsyncMethod=batch`); [`Batch::flush`]
/// before they are published.
#[derive(Debug, Default)]
pub struct Batch {
    pending: bool,
}

impl Batch {
    /// git's `odb_transaction_files_commit`: one `fsync` of a dummy `bulk_fsync_XXXXXX` file in
    /// `dir`, so that everything written back before is durable; nothing when nothing is owed.
    pub fn flush(self, dir: &Path) -> io::Result<()> {
        if !self.pending {
            return Ok(());
        }
        let dummy = tempfile::Builder::new()
            .prefix("bulk_fsync_")
            .tempfile_in(dir)?;
        dummy
            .as_file()
            .sync_all()
            .map_err(|e| fsync_error(dummy.path(), e))
    }
}

/// git's `fsync error on '<path>'`.
fn fsync_error(path: &Path, e: io::Error) -> io::Error {
    io::Error::new(
        e.kind(),
        format!("fsync error on '{}': {e}", path.display()),
    )
}

/// Write back `file`'s dirty pages and wait for them, without a hardware cache flush (git's
/// `git_fsync(fd, FSYNC_WRITEOUT_ONLY)`).
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
fn writeout(file: &File) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let flags = libc::SYNC_FILE_RANGE_WAIT_BEFORE
        | libc::SYNC_FILE_RANGE_WRITE
        | libc::SYNC_FILE_RANGE_WAIT_AFTER;
    // SAFETY: the descriptor is open while `file` is borrowed, and the call touches no memory
    // of ours.
    let r = unsafe { libc::sync_file_range(file.as_raw_fd(), 0, 0, flags) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// No write-back-only call here: callers fall back to `fsync(2)`, as git does.
#[cfg(not(target_os = "linux"))]
fn writeout(_file: &File) -> io::Result<()> {
    Err(io::Error::from(io::ErrorKind::Unsupported))
}

#[cfg(test)]
mod tests {
    use super::{Components as C, Method};

    fn parse(v: &str) -> (C, Vec<String>) {
        let mut w = Vec::new();
        (C::parse(v, |m| w.push(m)), w)
    }

    #[test]
    fn components_as_gits_parse_fsync_components() {
        // FSYNC_COMPONENTS_DEFAULT: pack, pack-metadata, commit-graph.
        assert_eq!(C::DEFAULT, C(0b1110));
        assert_eq!(parse(""), (C::DEFAULT, vec![]));
        assert_eq!(parse("none"), (C::NONE, vec![]));
        assert_eq!(parse("committed").0, C(C::DEFAULT.0 | C::COMMITTED.0));
        assert_eq!(parse("none,reference").0.0, C::REFERENCE.0 | C::DEFAULT.0);
        assert_eq!(parse("reference,none").0, C::REFERENCE);
        assert_eq!(parse("-pack").0, C(C::COMMIT_GRAPH.0));
        // Removals apply to the default only: what is named wins.
        assert_eq!(parse("all,-loose-object").0, C::ALL);
        assert_eq!(
            parse("-reference,committed").0.0,
            C::DEFAULT.0 | C::COMMITTED.0
        );
        assert_eq!(
            parse(" loose-object,\treference").0.0,
            C::DEFAULT.0 | 1 | C::REFERENCE.0
        );
        // Blanks are skipped before a name, not after it (git's strspn, then strncmp).
        assert_eq!(parse("reference ,pack").1.len(), 1);
        // A prefix names every component it begins: `c` is commit-graph and committed.
        assert_eq!(parse("none").0, C::NONE);
        assert_eq!(
            parse("-derived-metadata,-pack,c").0,
            C(C::COMMIT_GRAPH.0 | C::COMMITTED.0)
        );
        assert_eq!(
            parse("bogus,reference"),
            (
                C(C::DEFAULT.0 | C::REFERENCE.0),
                vec!["ignoring unknown core.fsync component 'bogus'".to_owned()]
            )
        );
        assert_eq!(
            parse("-").1,
            ["invalid value for variable core.fsync".to_owned()]
        );
        assert_eq!(Method::parse("batch"), Some(Method::Batch));
        assert_eq!(Method::parse("writeout-only"), Some(Method::WriteoutOnly));
        assert_eq!(Method::parse("Fsync"), None);
    }

    #[test]
    fn the_synced_floor_adds_objects_refs_and_directories_to_what_core_fsync_says() {
        use super::{Directories, Durability, Floor};
        let git = Durability::default();
        assert_eq!(git.at_least(Floor::CoreFsync), git);
        let synced = git.at_least(Floor::Synced);
        for c in [C::LOOSE_OBJECT, C::PACK, C::PACK_METADATA, C::REFERENCE] {
            assert!(synced.syncs(c), "{c:?}");
            assert!(!Durability::NONE.at_least(Floor::CoreFsync).syncs(c));
            assert!(Durability::NONE.at_least(Floor::Synced).syncs(c));
        }
        assert_eq!(synced.directories, Directories::Synced);
        assert_eq!(git.directories, Directories::Unsynced);
        // What core.fsync names beyond it stays.
        assert!(synced.syncs(C::COMMIT_GRAPH));
        // writeout-only flushes nothing to the disk: fsync; batch does, at the end.
        let writeout = Durability {
            method: Method::WriteoutOnly,
            ..git
        };
        assert_eq!(writeout.at_least(Floor::Synced).method, Method::Fsync);
        assert_eq!(
            writeout.at_least(Floor::CoreFsync).method,
            Method::WriteoutOnly
        );
        let batch = Durability {
            method: Method::Batch,
            ..git
        };
        assert_eq!(batch.at_least(Floor::Synced).method, Method::Batch);
        // GIT_TEST_FSYNC=false still syncs nothing.
        let off = Durability {
            enabled: false,
            ..git
        }
        .at_least(Floor::Synced);
        assert!(!off.syncs(C::REFERENCE));
    }

    #[test]
    fn a_directory_is_synced_only_when_directories_and_its_component_are() {
        use super::{Durability, Floor};
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing");
        // Nothing asked: the directory is not even opened.
        Durability::default()
            .sync_dir(C::REFERENCE, &missing)
            .unwrap();
        Durability::NONE
            .at_least(Floor::Synced)
            .sync_dir(C::COMMIT_GRAPH, &missing)
            .unwrap();
        let synced = Durability::NONE.at_least(Floor::Synced);
        synced.sync_dir(C::REFERENCE, dir.path()).unwrap();
        let e = synced.sync_dir(C::REFERENCE, &missing).unwrap_err();
        assert!(e.to_string().starts_with("fsync error on '"), "{e}");
    }
}
