//! The stack of tables in `$GIT_DIR/reftable/`: `tables.list` names them oldest first; reads
//! merge them newest-wins with tombstones applied; an addition writes one table and appends it
//! under `tables.list.lock`; auto-compaction merges a suffix of the stack so that table sizes
//! stay a geometric sequence (git's `reftable/stack.c`).

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use gix_object::bstr::BString;

use super::table::{Table, WriteOptions, write_table};
use super::{Error, LogRecord, LogValue, RefRecord, RefValue, Result};
use crate::fsync::{Components, Durability};
use crate::lockfile::Timeout;

const LIST: &str = "tables.list";

fn io_err<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> Error + 'a {
    move |source| Error::Io {
        op,
        path: path.to_owned(),
        source,
    }
}

/// A lock file created with `O_CREAT|O_EXCL`, removed on drop unless committed.
struct LockFile {
    lock_path: PathBuf,
    target: PathBuf,
    file: Option<File>,
    done: bool,
}

impl LockFile {
    /// Lock `target` by creating `target.lock`, retrying while it is held as `timeout`
    /// allows, with git's backoff (`flock_acquire`, `hold_lock_file_for_update_timeout`).
    fn acquire(target: &Path, timeout: Timeout) -> Result<LockFile> {
        let mut lock_path = target.as_os_str().to_owned();
        lock_path.push(".lock");
        let lock_path = PathBuf::from(lock_path);
        match crate::lockfile::create(&lock_path, timeout) {
            Ok(file) => Ok(LockFile {
                lock_path,
                target: target.to_owned(),
                file: Some(file),
                done: false,
            }),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                Err(Error::Locked(lock_path))
            }
            Err(e) => Err(io_err("create", &lock_path)(e)),
        }
    }

    /// Write `data`, make it durable as `fsync` says for refs, and rename the lock over its
    /// target (then sync the target's directory, when `fsync` syncs directories).
    fn write_all_and_commit(mut self, data: &[u8], fsync: Durability) -> Result<()> {
        let mut file = self.file.take().expect("lock file open");
        file.write_all(data)
            .and_then(|()| fsync.sync(Components::REFERENCE, &file))
            .map_err(io_err("write", &self.lock_path))?;
        drop(file);
        std::fs::rename(&self.lock_path, &self.target)
            .map_err(io_err("rename", &self.lock_path))?;
        self.done = true;
        if let Some(dir) = self.target.parent() {
            fsync
                .sync_dir(Components::REFERENCE, dir)
                .map_err(io_err("sync the directory of", &self.target))?;
        }
        Ok(())
    }

    /// Close the lock file but keep holding the lock.
    fn close(&mut self) {
        self.file = None;
    }
}

impl Drop for LockFile {
    fn drop(&mut self) {
        if !self.done {
            self.file = None;
            let _ = std::fs::remove_file(&self.lock_path);
        }
    }
}

/// The reftable stack of one repository.
#[derive(Debug)]
pub struct Stack {
    dir: PathBuf,
    tables: Vec<Table>,
    opts: WriteOptions,
}

/// A random 32-bit number for table names (git's `reftable_rand`).
fn random_u32() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.write_u32(std::process::id());
    h.finish() as u32
}

/// git's table name: `0x<min:012x>-0x<max:012x>-<random:08x>`.
pub fn format_name(min: u64, max: u64) -> String {
    format!("0x{min:012x}-0x{max:012x}-{:08x}", random_u32())
}

/// The compaction segment git's `suggest_compaction_segment` picks for table `sizes`:
/// `(start, end)` with `end` exclusive; `start == end` when none is needed.
pub fn suggest_compaction_segment(sizes: &[u64], factor: u8) -> (usize, usize) {
    let factor = u64::from(if factor == 0 { 2 } else { factor });
    let n = sizes.len();
    let (mut start, mut end) = (0, 0);
    if n <= 1 {
        return (0, 0);
    }
    let mut bytes = 0u64;
    let mut i = n - 1;
    while i > 0 {
        if sizes[i - 1] < sizes[i].saturating_mul(factor) {
            end = i + 1;
            bytes = sizes[i];
            break;
        }
        i -= 1;
    }
    while i > 0 {
        let curr = bytes;
        bytes = bytes.saturating_add(sizes[i - 1]);
        if sizes[i - 1] < curr.saturating_mul(factor) {
            start = i - 1;
        }
        i -= 1;
    }
    if end == 0 { (0, 0) } else { (start, end) }
}

fn parse_names(data: &[u8]) -> Vec<String> {
    data.split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| String::from_utf8_lossy(l).into_owned())
        .collect()
}

/// Merge the ref records of `tables` (oldest first) in name order: the newest record of each
/// name wins. Each table is sorted already, so this is one linear merge per table.
fn merge_refs(tables: &[Table]) -> Result<Vec<RefRecord>> {
    let mut merged: Vec<RefRecord> = Vec::new();
    for t in tables {
        merged = merge_newer(merged, t.refs()?);
    }
    Ok(merged)
}

/// `older` and `newer` (each sorted by name) merged, `newer` winning.
fn merge_newer(older: Vec<RefRecord>, newer: Vec<RefRecord>) -> Vec<RefRecord> {
    if older.is_empty() {
        return newer;
    }
    let mut out = Vec::with_capacity(older.len() + newer.len());
    let mut older = older.into_iter().peekable();
    for rec in newer {
        while let Some(o) = older.next_if(|o| o.name < rec.name) {
            out.push(o);
        }
        older.next_if(|o| o.name == rec.name);
        out.push(rec);
    }
    out.extend(older);
    out
}

/// The table compaction writes for `range` with `refs` and `logs` (already normalized) of a
/// newer table on top, covering update indexes `min..=max`: the newest record of each key,
/// tombstones dropped when the range is the bottom of the stack, log messages kept exactly.
fn compacted_table(
    opts: WriteOptions,
    range: &[Table],
    at_bottom: bool,
    min: u64,
    max: u64,
    refs: &[RefRecord],
    logs: Vec<LogRecord>,
) -> Result<(Vec<u8>, bool)> {
    let mut merged = merge_newer(merge_refs(range)?, refs.to_vec());
    let mut merged_logs = merge_logs(range)?;
    merged_logs.extend(logs.into_iter().map(|l| (l.key(), l)));
    let mut merged_logs: Vec<LogRecord> = merged_logs.into_values().collect();
    if at_bottom {
        merged.retain(|r| r.value != RefValue::Deletion);
        merged_logs.retain(|l| l.value != LogValue::Deletion);
    }
    let opts = WriteOptions {
        exact_log_message: true,
        ..opts
    };
    write_table(opts, min, max, &merged, &merged_logs)
}

/// Merge the log records of `tables` (oldest first), keyed by their log key.
fn merge_logs(tables: &[Table]) -> Result<BTreeMap<Vec<u8>, LogRecord>> {
    let mut merged = BTreeMap::new();
    for t in tables {
        for l in t.logs()? {
            merged.insert(l.key(), l);
        }
    }
    Ok(merged)
}

impl Stack {
    /// Open the stack in `reftable_dir` (`$GIT_DIR/reftable`) with git's default options, and
    /// the object format of its tables (SHA-1 when it has none).
    pub fn open(reftable_dir: impl Into<PathBuf>) -> Result<Stack> {
        let mut st = Stack::open_with(reftable_dir, WriteOptions::default())?;
        if let Some(t) = st.tables.first() {
            st.opts.hash = t.hash();
        }
        Ok(st)
    }

    /// Open the stack with the given write options.
    pub fn open_with(reftable_dir: impl Into<PathBuf>, opts: WriteOptions) -> Result<Stack> {
        let mut st = Stack {
            dir: reftable_dir.into(),
            tables: Vec::new(),
            opts,
        };
        st.reload()?;
        Ok(st)
    }

    /// The reftable directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The tables, oldest first.
    pub fn tables(&self) -> &[Table] {
        &self.tables
    }

    fn list_path(&self) -> PathBuf {
        self.dir.join(LIST)
    }

    fn read_list(&self) -> Result<Vec<String>> {
        let path = self.list_path();
        match std::fs::read(&path) {
            Ok(d) => Ok(parse_names(&d)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
            Err(e) => Err(io_err("read", &path)(e)),
        }
    }

    fn names(&self) -> Vec<String> {
        self.tables.iter().map(|t| t.name().to_owned()).collect()
    }

    /// Re-read `tables.list` and the tables it names. A table that vanished between reading the
    /// list and opening it (a concurrent compaction) makes it retry, as git does.
    pub fn reload(&mut self) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(3);
        loop {
            let names = self.read_list()?;
            let mut tables = Vec::with_capacity(names.len());
            let mut vanished = false;
            for name in &names {
                if let Some(t) = self.tables.iter().find(|t| t.name() == name) {
                    tables.push(t.clone());
                    continue;
                }
                if name.contains('/') || name.starts_with('.') {
                    return Err(Error::CorruptStack {
                        dir: self.dir.clone(),
                        reason: format!("bad table name {name:?} in {LIST}"),
                    });
                }
                match Table::open(&self.dir.join(name)) {
                    Ok(t) => tables.push(t),
                    Err(Error::Io { source, .. })
                        if source.kind() == std::io::ErrorKind::NotFound =>
                    {
                        vanished = true;
                        break;
                    }
                    Err(e) => return Err(e),
                }
            }
            if !vanished {
                self.tables = tables;
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(Error::CorruptStack {
                    dir: self.dir.clone(),
                    reason: format!("{LIST} names a table that does not exist"),
                });
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// The update index the next addition gets: the newest table's maximum plus one, 1 for an
    /// empty stack.
    pub fn next_update_index(&self) -> u64 {
        self.tables.last().map_or(1, |t| t.max_update_index() + 1)
    }

    /// All refs of the stack in name order, newest table wins, deletions applied.
    pub fn refs(&self) -> Result<Vec<(BString, RefValue)>> {
        Ok(merge_refs(&self.tables)?
            .into_iter()
            .filter(|r| r.value != RefValue::Deletion)
            .map(|r| (r.name, r.value))
            .collect())
    }

    /// All ref records (with their update indexes) of the stack, deletions applied.
    pub fn ref_records(&self) -> Result<Vec<RefRecord>> {
        Ok(merge_refs(&self.tables)?
            .into_iter()
            .filter(|r| r.value != RefValue::Deletion)
            .collect())
    }

    /// Look one ref up, newest table first.
    pub fn read_ref(&self, name: &[u8]) -> Result<Option<RefValue>> {
        for t in self.tables.iter().rev() {
            if let Some(r) = t.read_ref(name)? {
                return Ok(match r.value {
                    RefValue::Deletion => None,
                    v => Some(v),
                });
            }
        }
        Ok(None)
    }

    /// All reflog entries in key order (by ref name, newest first), tombstones applied.
    pub fn logs(&self) -> Result<Vec<LogRecord>> {
        Ok(merge_logs(&self.tables)?
            .into_values()
            .filter(|l| l.value != LogValue::Deletion)
            .collect())
    }

    /// Take `tables.list.lock` (waiting up to `reftable.lockTimeout`) and reload the stack under
    /// it: what the caller reads through [`Locked::stack`] is what [`Locked::commit`] writes on
    /// top of, so a compare-and-swap checked there cannot lose to a concurrent writer.
    pub fn lock(&mut self) -> Result<Locked<&mut Stack>> {
        let lock = LockFile::acquire(&self.list_path(), self.opts.lock_timeout)?;
        self.reload()?;
        Ok(Locked { stack: self, lock })
    }

    /// [`Stack::lock`], the lock owning the stack (to be kept beyond the caller's frame).
    pub fn into_locked(mut self) -> Result<Locked<Stack>> {
        let lock = LockFile::acquire(&self.list_path(), self.opts.lock_timeout)?;
        self.reload()?;
        Ok(Locked { stack: self, lock })
    }

    /// Write one new table holding `updates` and `logs` and append it to the stack, under
    /// `tables.list.lock`: [`Stack::lock`] then [`Locked::commit`].
    pub fn add(&mut self, updates: &[RefRecord], logs: &[LogRecord]) -> Result<u64> {
        self.lock()?.commit(updates, logs)
    }
    /// Write `bytes` to a temporary file and rename it to a fresh `<min>-<max>-<rnd>.ref` name.
    fn install_table(&self, min: u64, max: u64, bytes: &[u8]) -> Result<String> {
        let mut tmp = tempfile::Builder::new()
            .prefix(&format!("{}.temp.", format_name(min, max)))
            .rand_bytes(6)
            // As git's `mks_tempfile_m(…, 0666)`: readable by all unless the umask says otherwise.
            .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o666))
            .tempfile_in(&self.dir)
            .map_err(io_err("create temporary table in", &self.dir))?;
        tmp.write_all(bytes)
            .and_then(|()| self.opts.fsync.sync(Components::REFERENCE, tmp.as_file()))
            .map_err(io_err("write", tmp.path()))?;
        let name = format!("{}.ref", format_name(min, max));
        let path = self.dir.join(&name);
        tmp.persist(&path)
            .map_err(|e| io_err("rename temporary table to", &path)(e.error))?;
        // Its name on disk before `tables.list` names it.
        self.opts
            .fsync
            .sync_dir(Components::REFERENCE, &self.dir)
            .map_err(io_err("sync", &self.dir))?;
        Ok(name)
    }

    /// With `tables.list` locked (`lock`) and the new table of update index `ts` encoded
    /// (`bytes`, holding `refs` and `logs`): if auto-compaction after adding it would compact a
    /// segment ending with it, and that segment's tables can be locked, write the compacted
    /// table instead and commit the list; else give the lock back.
    fn add_compacted(
        &mut self,
        lock: LockFile,
        ts: u64,
        bytes: &[u8],
        refs: &[RefRecord],
        logs: &[LogRecord],
    ) -> Result<std::result::Result<(), LockFile>> {
        if self.opts.disable_auto_compact || self.tables.is_empty() {
            return Ok(Err(lock));
        }
        let mut sizes = self.compaction_sizes();
        let new_size = (bytes.len() - super::table::footer_size_for(self.opts.hash))
            .saturating_sub(super::table::header_size_for(self.opts.hash) - 1);
        sizes.push(new_size as u64);
        let (first, end) = suggest_compaction_segment(&sizes, self.opts.geometric_factor);
        if end <= first + 1 || end != sizes.len() {
            return Ok(Err(lock));
        }
        let mut table_locks = Vec::new();
        for t in self.tables[first..].iter().rev() {
            match LockFile::acquire(&self.dir.join(t.name()), Timeout::Once) {
                Ok(mut l) => {
                    l.close();
                    table_locks.push(l);
                }
                Err(Error::Locked(_)) => return Ok(Err(lock)),
                Err(e) => return Err(e),
            }
        }
        let range = &self.tables[first..];
        let min = range[0].min_update_index();
        let mut newer_logs = logs.to_vec();
        for l in &mut newer_logs {
            if let LogValue::Update(u) = &mut l.value {
                u.message = super::table::normalize_log_message(&l.refname, &u.message)?.into();
            }
        }
        let (bytes, empty) =
            compacted_table(self.opts, range, first == 0, min, ts, refs, newer_logs)?;
        let compacted: Vec<String> = range.iter().map(|t| t.name().to_owned()).collect();
        let before = self.names()[..first].to_vec();
        self.swap_in(lock, (&before, &[]), &compacted, (min, ts), &bytes, empty)?;
        drop(table_locks);
        Ok(Ok(()))
    }

    /// With `tables.list` locked: put the compacted table (`bytes`, update indexes `min..=max`;
    /// none when `empty`) where the tables named `compacted` were, between the names `around`,
    /// commit the list, and delete the compacted tables.
    fn swap_in(
        &mut self,
        list_lock: LockFile,
        around: (&[String], &[String]),
        compacted: &[String],
        (min, max): (u64, u64),
        bytes: &[u8],
        empty: bool,
    ) -> Result<()> {
        let installed = if empty {
            None
        } else {
            Some(self.install_table(min, max, bytes)?)
        };
        let text: String = around
            .0
            .iter()
            .chain(&installed)
            .chain(around.1)
            .map(|n| format!("{n}\n"))
            .collect();
        if let Err(e) = list_lock.write_all_and_commit(text.as_bytes(), self.opts.fsync) {
            if let Some(n) = installed {
                let _ = std::fs::remove_file(self.dir.join(n));
            }
            return Err(e);
        }
        self.reload()?;
        for n in compacted {
            let _ = std::fs::remove_file(self.dir.join(n));
        }
        Ok(())
    }

    /// Table sizes as git's auto-compaction weighs them: size without footer, minus the header
    /// size less one.
    fn compaction_sizes(&self) -> Vec<u64> {
        self.tables
            .iter()
            .map(|t| {
                t.size()
                    .saturating_sub(super::table::header_size_for(self.opts.hash) as u64 - 1)
            })
            .collect()
    }

    /// Whether auto-compaction would compact anything.
    pub fn compaction_required(&self) -> bool {
        if self.tables.len() < 2 {
            return false;
        }
        let (s, e) =
            suggest_compaction_segment(&self.compaction_sizes(), self.opts.geometric_factor);
        e > s
    }

    /// git's auto-compaction: compact the segment that restores the geometric sequence.
    pub fn auto_compact(&mut self) -> Result<()> {
        if self.tables.len() < 2 {
            return Ok(());
        }
        let (s, e) =
            suggest_compaction_segment(&self.compaction_sizes(), self.opts.geometric_factor);
        if e > s {
            self.compact_range(s, e - 1, true)
        } else {
            Ok(())
        }
    }

    /// Compact the whole stack into one table (`git pack-refs` / `git refs optimize`).
    pub fn compact_all(&mut self) -> Result<()> {
        let last = self.tables.len().saturating_sub(1);
        self.compact_range(0, last, false)
    }

    /// Compact tables `first..=last` into one, following git's protocol: lock `tables.list`,
    /// lock each table (`<name>.lock`, newest first), release `tables.list`, write the merged
    /// table, lock `tables.list` again, replace the range (found again if the stack grew
    /// meanwhile), then delete the old tables.
    fn compact_range(&mut self, first: usize, last: usize, best_effort: bool) -> Result<()> {
        if first >= last || last >= self.tables.len() {
            return Ok(());
        }
        let mut first = first;
        let list_lock = LockFile::acquire(&self.list_path(), self.opts.lock_timeout)?;
        if self.read_list()? != self.names() {
            return Err(Error::Outdated(self.dir.clone()));
        }
        let mut table_locks = Vec::new();
        for i in (first..=last).rev() {
            match LockFile::acquire(&self.dir.join(self.tables[i].name()), Timeout::Once) {
                Ok(mut l) => {
                    l.close();
                    table_locks.push(l);
                }
                Err(Error::Locked(p)) => {
                    if best_effort && last - i >= 2 {
                        first = i + 1;
                        break;
                    }
                    return Err(Error::Locked(p));
                }
                Err(e) => return Err(e),
            }
        }
        drop(list_lock);

        let range = &self.tables[first..=last];
        let min = range[0].min_update_index();
        let max = range[range.len() - 1].max_update_index();
        let (bytes, empty) =
            compacted_table(self.opts, range, first == 0, min, max, &[], Vec::new())?;
        let compacted: Vec<String> = range.iter().map(|t| t.name().to_owned()).collect();

        let list_lock = LockFile::acquire(&self.list_path(), self.opts.lock_timeout)?;
        let current = self.read_list()?;
        let Some(at) = current.iter().position(|n| *n == compacted[0]) else {
            return Err(Error::Outdated(self.dir.clone()));
        };
        if current.get(at..at + compacted.len()) != Some(&compacted[..]) {
            return Err(Error::Outdated(self.dir.clone()));
        }
        let around = (&current[..at], &current[at + compacted.len()..]);
        self.swap_in(list_lock, around, &compacted, (min, max), &bytes, empty)?;
        drop(table_locks);
        Ok(())
    }
}

/// The stack (`S`: [`Stack`] or `&mut Stack`) with `tables.list.lock` held; dropping it
/// releases the lock and writes nothing.
pub struct Locked<S> {
    stack: S,
    lock: LockFile,
}

impl<S: std::borrow::BorrowMut<Stack>> Locked<S> {
    /// The stack as reloaded under the lock.
    pub fn stack(&self) -> &Stack {
        self.stack.borrow()
    }

    /// Write one new table holding `updates` and `logs`, append it to the stack and release
    /// the lock, with git's update index rules: every ref record gets the stack's
    /// next update index; a log update with update index 0 gets it too (others keep theirs, at
    /// most the next index); log tombstones keep theirs. Then auto-compact as git does. Returns
    /// the update index used; adding nothing writes nothing.
    pub fn commit(self, updates: &[RefRecord], logs: &[LogRecord]) -> Result<u64> {
        let Locked { mut stack, lock } = self;
        let stack: &mut Stack = stack.borrow_mut();
        let ts = stack.next_update_index();
        let mut refs: Vec<RefRecord> = updates
            .iter()
            .map(|r| RefRecord {
                update_index: ts,
                ..r.clone()
            })
            .collect();
        refs.sort_by(|a, b| a.name.cmp(&b.name));
        if let Some(w) = refs.windows(2).find(|w| w[0].name == w[1].name) {
            return Err(Error::InvalidRecord(format!(
                "ref {} updated twice",
                w[0].name
            )));
        }
        let mut logs: Vec<LogRecord> = logs
            .iter()
            .map(|l| {
                let mut l = l.clone();
                if l.update_index == 0 {
                    l.update_index = ts;
                }
                l
            })
            .collect();
        logs.sort_by_key(LogRecord::key);
        if let Some(w) = logs.windows(2).find(|w| w[0].key() == w[1].key()) {
            return Err(Error::InvalidRecord(format!(
                "two log records for {} at update index {}",
                w[0].refname, w[0].update_index
            )));
        }
        let (bytes, empty) = write_table(stack.opts, ts, ts, &refs, &logs)?;
        if empty {
            return Ok(ts);
        }
        // When the auto-compaction that would follow takes in the new table, write its result
        // at once: the same stack as adding the table and then compacting, one write fewer.
        let lock = match stack.add_compacted(lock, ts, &bytes, &refs, &logs)? {
            Ok(()) => return Ok(ts),
            Err(lock) => lock,
        };
        let name = stack.install_table(ts, ts, &bytes)?;
        let mut list = String::new();
        for n in stack.names().iter().chain(std::iter::once(&name)) {
            list.push_str(n);
            list.push('\n');
        }
        if let Err(e) = lock.write_all_and_commit(list.as_bytes(), stack.opts.fsync) {
            let _ = std::fs::remove_file(stack.dir.join(&name));
            return Err(e);
        }
        stack.reload()?;
        if !stack.opts.disable_auto_compact {
            match stack.auto_compact() {
                Ok(()) | Err(Error::Locked(_)) | Err(Error::Outdated(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(ts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn geometric_segments_match_gits_examples() {
        assert_eq!(
            suggest_compaction_segment(&[64, 32, 16, 8, 4, 2, 1], 2),
            (0, 0)
        );
        assert_eq!(
            suggest_compaction_segment(&[64, 32, 16, 8, 4, 3, 1], 2),
            (0, 6)
        );
        assert_eq!(
            suggest_compaction_segment(&[128, 32, 16, 8, 4, 3, 1], 2),
            (1, 6)
        );
        assert_eq!(suggest_compaction_segment(&[1, 1], 2), (0, 2));
        assert_eq!(suggest_compaction_segment(&[10], 2), (0, 0));
    }
}
