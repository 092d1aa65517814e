//! The objects a repository holds that are not known to be complete: `objects/info/berth-incomplete`,
//! one id in hex a line.
//!
//! berth's connectivity check ([`crate::objects::connectivity`]) stops at an object the
//! repository has and takes it as complete, where git's `rev-list --objects <tips> --not
//! --all` starts from the refs. As in git, a push whose refs are connected is accepted whole,
//! even if its pack also holds objects no new ref reaches that link to missing ones (a commit
//! whose parent nobody sent); those enter the repository with the rest. Without this list a
//! later push of a ref at such a commit, with no objects, would then be taken as complete, and
//! the ref would name a history with holes (git refuses it: `missing necessary objects`).
//!
//! So the objects of a push that are not complete are listed here before any of them moves
//! in ([`crate::objects::ingest::Quarantine::migrate`]), and the check walks through a listed
//! object instead of stopping at it. Nothing is listed for a push whose pack links only to
//! objects the repository has (the check's fast path, every push a git client makes). The
//! list only grows: an entry whose object was completed later (or pruned by `git gc`) costs
//! a walk through it, never a wrong verdict. Objects git itself put in the repository (a
//! push through `git receive-pack`) are not listed.
//!
//! Untrusted input: the list is bounded ([`MAX_BYTES`]); a push that would grow it past that
//! is refused at its migration.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use foldhash::HashSet;
use gix_hash::ObjectId;

/// The list's place under the object directory.
pub const FILE: &str = "info/berth-incomplete";

/// The list is not grown past this many bytes (about 390,000 SHA-1 ids).
pub const MAX_BYTES: u64 = 16 << 20;

/// Why the list could not be read or grown.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// It could not be read, written or synced.
    #[error("{path}: {source}")]
    Io {
        /// The list.
        path: PathBuf,
        /// What failed.
        #[source]
        source: io::Error,
    },
    /// Growing it would pass [`MAX_BYTES`].
    #[error(
        "{path} would pass {max} bytes: run `git gc --prune=now` to drop unreachable objects, then remove it"
    )]
    TooLarge {
        /// The list.
        path: PathBuf,
        /// [`MAX_BYTES`].
        max: u64,
    },
}

/// The objects of `objects_dir` listed as not known to be complete; none without a list.
/// A line that is not an id of `hash` is skipped.
pub fn read(objects_dir: &Path, hash: gix_hash::Kind) -> Result<HashSet<ObjectId>, Error> {
    let path = objects_dir.join(FILE);
    let data = match std::fs::read(&path) {
        Ok(d) => d,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(HashSet::default()),
        Err(source) => return Err(Error::Io { path, source }),
    };
    Ok(data
        .split(|b| *b == b'\n')
        .filter(|l| l.len() == hash.len_in_hex())
        .filter_map(|l| ObjectId::from_hex(l).ok())
        .collect())
}

/// Add `ids` to the list of `objects_dir` (one `write` in append mode, so that concurrent
/// pushes do not mix their lines), synced as `durability` says for objects, before the caller
/// moves them in.
pub fn append(
    objects_dir: &Path,
    ids: &[ObjectId],
    durability: crate::fsync::Durability,
) -> Result<(), Error> {
    if ids.is_empty() {
        return Ok(());
    }
    let path = objects_dir.join(FILE);
    let io = |source| Error::Io {
        path: path.clone(),
        source,
    };
    let mut lines = Vec::with_capacity(ids.len() * (ids[0].kind().len_in_hex() + 1));
    let mut hex = gix_hash::Kind::hex_buf();
    for id in ids {
        lines.extend_from_slice(id.hex_to_buf(&mut hex).as_bytes());
        lines.push(b'\n');
    }
    let (held, created) = match std::fs::metadata(&path) {
        Ok(m) => (m.len(), false),
        Err(e) if e.kind() == io::ErrorKind::NotFound => (0, true),
        Err(e) => return Err(io(e)),
    };
    if held.saturating_add(lines.len() as u64) > MAX_BYTES {
        return Err(Error::TooLarge {
            path,
            max: MAX_BYTES,
        });
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(io)?;
    }
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(&path)
        .map_err(io)?;
    file.write_all(&lines).map_err(io)?;
    durability
        .sync(crate::fsync::Components::OBJECTS, &file)
        .map_err(io)?;
    // A new list's name is made durable too: objects renamed in after it must not outlive it
    // on a power loss.
    if created && let Some(dir) = path.parent() {
        durability
            .sync_dir(crate::fsync::Components::OBJECTS, dir)
            .map_err(io)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listed_ids_are_read_back_and_the_list_is_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let sha1 = gix_hash::Kind::Sha1;
        assert!(read(dir.path(), sha1).unwrap().is_empty());
        let a = ObjectId::from_hex(b"1111111111111111111111111111111111111111").unwrap();
        let b = ObjectId::from_hex(b"2222222222222222222222222222222222222222").unwrap();
        append(dir.path(), &[a], Default::default()).unwrap();
        append(dir.path(), &[b, a], Default::default()).unwrap();
        append(dir.path(), &[], Default::default()).unwrap();
        let listed = read(dir.path(), sha1).unwrap();
        assert_eq!(listed.len(), 2);
        assert!(listed.contains(&a) && listed.contains(&b));
        // A line of another length or not hex is skipped.
        let path = dir.path().join(FILE);
        let mut data = std::fs::read(&path).unwrap();
        data.extend_from_slice(b"zz\n33333333333333333333333333333333333333zz\n");
        std::fs::write(&path, data).unwrap();
        assert_eq!(read(dir.path(), sha1).unwrap().len(), 2);
        // Past the bound, nothing is added.
        let f = std::fs::OpenOptions::new().append(true).open(&path).unwrap();
        f.set_len(MAX_BYTES - 10).unwrap();
        let err = append(dir.path(), &[b], Default::default()).unwrap_err();
        assert!(matches!(err, Error::TooLarge { .. }), "{err}");
        assert_eq!(std::fs::metadata(&path).unwrap().len(), MAX_BYTES - 10);
    }
}
