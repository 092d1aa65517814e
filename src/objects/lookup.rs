//! Object lookups for one push that re-read the object directories at most once after a miss.
//!
//! gix-odb's handles, in their default mode, list the pack directories (and read the alternates)
//! again after every lookup that misses, to learn of packs written since. A request naming many
//! objects that do not exist would make each miss a rescan. git re-reads its packs once after a
//! miss (`reprepare_packed_git`) and then answers from what it saw; [`Objects`] does the same: a
//! lookup that misses while the push's [`Budget`] is [`Refresh::Available`] may refresh the view
//! of the packs, and spends the budget; every later lookup, through any [`Objects`] sharing the
//! budget, answers from the view the store has (loading the indices of packs it already knows,
//! never listing a directory again).
//!
//! A view opened after the quarantine was migrated lists the directories when it first loads,
//! so the migrated packs are seen whatever the budget says.

use std::cell::Cell;
use std::path::Path;
use std::rc::Rc;

use gix_hash::oid;
use gix_odb::store::RefreshMode;

/// Whether a lookup that misses may still re-read the object directories.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Refresh {
    /// No lookup has missed yet: the next miss refreshes the view of the packs once.
    #[default]
    Available,
    /// A lookup has missed (and refreshed): misses are answered from the view as it is.
    Spent,
}

/// The refresh allowance of one push, shared by every [`Objects`] of the push (clones share it).
#[derive(Debug, Clone, Default)]
pub struct Budget(Rc<Cell<Refresh>>);

impl Budget {
    /// Whether a refresh is still available.
    pub fn state(&self) -> Refresh {
        self.0.get()
    }
}

/// An object database whose misses refresh the view of the packs at most once per [`Budget`].
#[derive(Clone)]
pub struct Objects {
    /// Refreshes after a miss (gix-odb's default); asked while the budget is available.
    refreshing: gix_odb::Handle,
    /// Never refreshes; asked once the budget is spent. Both share one store, so this one sees
    /// what the other's refresh found.
    settled: gix_odb::Handle,
    budget: Budget,
}

impl Objects {
    /// Lookups through `handle` (whatever its refresh mode), spending `budget` on their misses.
    pub fn new(handle: &gix_odb::Handle, budget: Budget) -> Self {
        let mut refreshing = handle.clone();
        refreshing.refresh = RefreshMode::AfterAllIndicesLoaded;
        let mut settled = handle.clone();
        settled.refresh_never();
        Objects {
            refreshing,
            settled,
            budget,
        }
    }

    /// The object database at `objects_dir` (with its alternates), spending `budget`.
    pub fn at(
        objects_dir: &Path,
        hash: gix_hash::Kind,
        budget: Budget,
    ) -> std::io::Result<Self> {
        Ok(Self::new(&gix_odb::at(objects_dir, hash)?, budget))
    }

    /// The same lookups, spending `budget` instead.
    pub fn with_budget(self, budget: Budget) -> Self {
        Objects { budget, ..self }
    }

    /// Use `cache` (made anew for each handle) for the pack entries these lookups decode.
    pub fn set_pack_cache(&mut self, cache: impl Fn() -> Box<gix_odb::cache::PackCache> + Send + Sync + Clone + 'static) {
        self.refreshing.set_pack_cache(cache.clone());
        self.settled.set_pack_cache(cache);
    }

    /// gix-odb's handle that never refreshes, for code that needs gix-odb's own type (the ref
    /// transaction peeling tags): a miss there is answered from the view as it is.
    pub fn settled(&self) -> &gix_odb::Handle {
        &self.settled
    }

    /// The handle to ask: the refreshing one until a lookup has missed.
    fn handle(&self) -> &gix_odb::Handle {
        match self.budget.state() {
            Refresh::Available => &self.refreshing,
            Refresh::Spent => &self.settled,
        }
    }

    /// Note the outcome of a lookup: a miss spends the budget.
    fn found(&self, found: bool) {
        if !found {
            self.budget.0.set(Refresh::Spent);
        }
    }
}

impl gix_object::Exists for Objects {
    fn exists(&self, id: &oid) -> bool {
        let found = self.handle().exists(id);
        self.found(found);
        found
    }
}

impl gix_object::Find for Objects {
    fn try_find<'a>(
        &self,
        id: &oid,
        buffer: &'a mut Vec<u8>,
    ) -> gix_error::Result<Option<gix_object::Data<'a>>> {
        let found = self.handle().try_find(id, buffer)?;
        self.found(found.is_some());
        Ok(found)
    }
}

impl gix_odb::Header for Objects {
    fn try_header(&self, id: &oid) -> gix_error::Result<Option<gix_odb::find::Header>> {
        let found = self.handle().try_header(id)?;
        self.found(found.is_some());
        Ok(found)
    }
}

#[cfg(test)]
mod tests {
    //! Against a real repository made by git: misses list the pack directory once, hits and a
    //! view opened after a pack arrived still find everything.

    use std::path::Path;
    use std::process::Command;

    use gix_hash::ObjectId;
    use gix_object::{Exists, Find};
    use gix_odb::Header;

    use super::*;

    fn git(dir: &Path, args: &[&str]) -> String {
        let out = Command::new("git")
            .args(args)
            .current_dir(dir)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_AUTHOR_NAME", "A")
            .env("GIT_AUTHOR_EMAIL", "a@example.com")
            .env("GIT_COMMITTER_NAME", "C")
            .env("GIT_COMMITTER_EMAIL", "c@example.com")
            .output()
            .expect("git runs");
        assert!(out.status.success(), "git {args:?}: {out:?}");
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    }

    /// A bare repository with one packed commit, and that commit.
    fn packed_repo(dir: &Path) -> ObjectId {
        git(dir, &["init", "-q", "--bare", "r.git"]);
        let repo = dir.join("r.git");
        let tree = git(&repo, &["mktree"]);
        let commit = git(&repo, &["commit-tree", "-m", "1", &tree]);
        git(&repo, &["update-ref", "refs/heads/main", &commit]);
        git(&repo, &["repack", "-adq"]);
        ObjectId::from_hex(commit.as_bytes()).unwrap()
    }

    fn missing(i: u32) -> ObjectId {
        let mut bytes = [0x11u8; 20];
        bytes[..4].copy_from_slice(&i.to_be_bytes());
        ObjectId::from_bytes_or_panic(&bytes)
    }

    #[test]
    fn many_misses_refresh_once_and_hits_are_still_found() {
        let dir = tempfile::tempdir().unwrap();
        let commit = packed_repo(dir.path());
        let handle = gix_odb::at(dir.path().join("r.git/objects"), gix_hash::Kind::Sha1).unwrap();
        let budget = Budget::default();
        let objects = Objects::new(&handle, budget.clone());
        let mut buf = Vec::new();
        assert!(objects.exists(&commit));
        assert_eq!(budget.state(), Refresh::Available);
        let loaded = handle.store_ref().metrics().num_refreshes;
        for i in 0..1000 {
            assert!(!objects.exists(&missing(i)));
            assert!(objects.try_find(&missing(i), &mut buf).unwrap().is_none());
            assert!(objects.try_header(&missing(i)).unwrap().is_none());
        }
        assert_eq!(budget.state(), Refresh::Spent);
        // The first miss listed the directory once more; none of the others did.
        assert_eq!(handle.store_ref().metrics().num_refreshes, loaded + 1);
        assert!(objects.exists(&commit));
        let data = objects.try_find(&commit, &mut buf).unwrap().unwrap();
        assert_eq!(data.kind, gix_object::Kind::Commit);
    }

    /// Write a blob with `content` into a pack of its own.
    fn new_pack_with_blob(repo: &Path, content: &str) -> ObjectId {
        let file = repo.join("blob");
        std::fs::write(&file, content).unwrap();
        let blob = git(repo, &["hash-object", "-w", file.to_str().unwrap()]);
        let mut pack = Command::new("git")
            .args(["pack-objects", "-q", "objects/pack/pack"])
            .current_dir(repo)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        use std::io::Write as _;
        writeln!(pack.stdin.take().unwrap(), "{blob}").unwrap();
        assert!(pack.wait().unwrap().success());
        git(repo, &["prune-packed"]);
        ObjectId::from_hex(blob.as_bytes()).unwrap()
    }

    #[test]
    fn a_pack_written_after_the_view_was_loaded_is_found_until_a_miss() {
        let dir = tempfile::tempdir().unwrap();
        let commit = packed_repo(dir.path());
        let repo = dir.path().join("r.git");
        let budget = Budget::default();
        let objects = Objects::at(&repo.join("objects"), gix_hash::Kind::Sha1, budget.clone())
            .unwrap();
        assert!(objects.exists(&commit));
        // As the migrated quarantine's pack: the lookup refreshes and finds it.
        let first = new_pack_with_blob(&repo, "first");
        assert!(objects.exists(&first));
        assert_eq!(budget.state(), Refresh::Available);
        assert!(!objects.exists(&missing(0)));
        assert_eq!(budget.state(), Refresh::Spent);
        // Once spent, a pack written later is not looked for by this push ...
        let second = new_pack_with_blob(&repo, "second");
        assert!(!objects.exists(&second));
        assert!(objects.exists(&first));
        // ... but a view opened after it was written lists it.
        let later =
            Objects::at(&repo.join("objects"), gix_hash::Kind::Sha1, budget.clone()).unwrap();
        assert!(later.exists(&second));
    }
}
