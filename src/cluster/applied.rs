//! What this node applied of each repository's log: the last sequence number, in
//! `<git dir>/berth-cluster-seq`, recorded in log order under one lock ([`Applied::hold`]:
//! every entry applied here, by a decision, a catch-up or a resync, is applied and recorded
//! under it), and what it last published to etcd (`applied/<node>`) for compaction.
//!
//! The sequence is recorded after the entry's refs are written (and, with
//! `--cluster-durability synced`, on disk), and is itself synced before a replica answers
//! "applied": after a power loss it never names an entry whose refs were lost.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::fsync::{Components, Durability};

/// The last log sequence number this replica applied to the repository at `dir`.
pub(super) fn applied_seq(dir: &Path) -> u64 {
    std::fs::read_to_string(dir.join("berth-cluster-seq"))
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

/// Record that this replica applied the log up to `seq`: written to a temporary file, synced,
/// renamed, its directory synced, as `durability` says for refs (the sequence says which log
/// entries the refs hold: it is made durable with them, after them).
fn set_applied_seq(dir: &Path, seq: u64, durability: Durability) -> std::io::Result<()> {
    use std::io::Write;
    let tmp = dir.join("berth-cluster-seq.tmp");
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(format!("{seq}\n").as_bytes())?;
    durability.sync(Components::REFERENCE, &f)?;
    drop(f);
    std::fs::rename(tmp, dir.join("berth-cluster-seq"))?;
    durability.sync_dir(Components::REFERENCE, dir)
}

/// What a repository's replica here last published, and (on its first replica, which
/// compacts) the entries compacted up to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Published {
    pub(super) applied: u64,
    pub(super) compacted: u64,
}

/// What [`Applied::record`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Recorded {
    /// The entry is recorded as the last applied here.
    InOrder,
    /// Not recorded: the entry before it is not applied here yet (the catch-up applies it
    /// and records this one; its refs already hold their values).
    Gap,
}

/// The applied sequences of this node's copies: their lock and what was published.
#[derive(Debug, Default)]
pub(super) struct Applied {
    /// Held while a log entry is applied and recorded here (every repository: one at a time).
    lock: Mutex<()>,
    /// Per repository, what was last published to etcd.
    published: Mutex<HashMap<String, Published>>,
    /// How the sequence file is made durable (`--cluster-durability`, `GIT_TEST_FSYNC`).
    durability: Durability,
}

impl Applied {
    /// The applied sequences, their file made durable as `durability` says for refs.
    pub(super) fn new(durability: Durability) -> Applied {
        Applied {
            durability,
            ..Default::default()
        }
    }

    /// Record that the replica at `dir` applied the log up to `seq`, whatever it applied
    /// before (a catch-up, a resync), with the apply lock held ([`Applied::hold`]).
    pub(super) fn set(&self, dir: &Path, seq: u64) -> std::io::Result<()> {
        set_applied_seq(dir, seq, self.durability)
    }

    /// Hold the apply lock: no entry is applied or recorded here meanwhile.
    pub(super) fn hold(&self) -> MutexGuard<'_, ()> {
        self.lock.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Record that the replica at `dir` applied entry `seq` if it applied `seq - 1` before
    /// (log order).
    pub(super) fn record(&self, dir: &Path, seq: u64) -> std::io::Result<Recorded> {
        let _g = self.hold();
        if applied_seq(dir) + 1 != seq {
            return Ok(Recorded::Gap);
        }
        self.set(dir, seq).map(|()| Recorded::InOrder)
    }

    /// What was last published for repository `name` (`None`: nothing since this node started).
    pub(super) fn published(&self, name: &str) -> Option<Published> {
        self.published.lock().ok()?.get(name).copied()
    }

    /// Remember what was published for repository `name`.
    pub(super) fn set_published(&self, name: &str, p: Published) {
        if let Ok(mut m) = self.published.lock() {
            m.insert(name.to_owned(), p);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_recorded_in_log_order_only() {
        let dir = tempfile::tempdir().unwrap();
        let applied = Applied::default();
        assert_eq!(applied_seq(dir.path()), 0);
        assert_eq!(applied.record(dir.path(), 2).unwrap(), Recorded::Gap);
        assert_eq!(applied.record(dir.path(), 1).unwrap(), Recorded::InOrder);
        assert_eq!(applied.record(dir.path(), 2).unwrap(), Recorded::InOrder);
        assert_eq!(applied.record(dir.path(), 2).unwrap(), Recorded::Gap);
        assert_eq!(applied_seq(dir.path()), 2);
        assert_eq!(applied.published("r"), None);
        let p = Published {
            applied: 2,
            compacted: 1,
        };
        applied.set_published("r", p);
        assert_eq!(applied.published("r"), Some(p));
    }
}
