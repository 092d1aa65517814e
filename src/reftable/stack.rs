//! The stack of tables in `$GIT_DIR/reftable/`: `tables.list` names them oldest first; reads
//! merge them newest-wins with tombstones applied; an addition writes one table and appends it
//! under `tables.list.lock`; auto-compaction merges a suffix of the stack so that table sizes
//! stay a geometric sequence (git's `reftable/stack.c`). Merges stream: the tables are read
//! record by record in key order (git's merged iterator, `reftable/merged.c`) and a compaction
//! copies each winning record's bytes into the new table without decoding it; an addition that
//! auto-compaction would take in goes straight into the compacted table. A new table is written
//! to its file as its records come, never whole in memory.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use gix_object::bstr::BString;

use super::record::log_key_cmp;
use super::table::{Records, Table, TableWriter, WriteOptions};
use super::{Error, LogRecord, RefRecord, RefValue, Result};
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

/// An addition's ref records, one at a time: sorted by name, each name once.
pub type RefStream<'a> = Box<dyn Iterator<Item = Result<RefRecord<'a>>> + 'a>;

/// One input of a merge: a table's section read record by record, or the records of an
/// addition not written yet (sorted; the newest input).
enum Source<'t, 'r> {
    Table(Records<'t>),
    Refs(RefStream<'r>, Option<RefRecord<'r>>),
    Logs(&'r [LogRecord], usize, Vec<u8>),
}

impl Source<'_, '_> {
    /// Move to the next record; `false` at the end.
    fn advance(&mut self) -> Result<bool> {
        match self {
            Source::Table(r) => r.advance(),
            Source::Refs(recs, current) => {
                *current = recs.next().transpose()?;
                Ok(current.is_some())
            }
            Source::Logs(recs, next, key) => {
                *next += 1;
                let Some(l) = recs.get(*next - 1) else {
                    return Ok(false);
                };
                key.clear();
                super::record::put_log_key(key, &l.refname, l.update_index);
                Ok(true)
            }
        }
    }

    /// The current record's key.
    fn key(&self) -> &[u8] {
        match self {
            Source::Table(r) => r.key(),
            Source::Refs(_, current) => current.as_ref().map_or(&[][..], |r| r.name.as_ref()),
            Source::Logs(_, _, key) => key,
        }
    }
}

/// Walk `sources` (oldest first) in key order as git's merged iterator does
/// (`reftable/merged.c`): for each key, `emit` gets the source holding the newest record of
/// that key (a tombstone included); the older records of that key are skipped unread.
fn merge_records(
    sources: &mut [Source<'_, '_>],
    mut emit: impl FnMut(&Source<'_, '_>) -> Result<()>,
) -> Result<()> {
    // The sources with a current record, oldest first.
    let mut live = Vec::with_capacity(sources.len());
    for (i, s) in sources.iter_mut().enumerate() {
        if s.advance()? {
            live.push(i);
        }
    }
    while let Some(&first) = live.first() {
        let mut w = first;
        for &i in &live[1..] {
            if sources[i].key() <= sources[w].key() {
                w = i;
            }
        }
        emit(&sources[w])?;
        let mut k = 0;
        while k < live.len() {
            let i = live[k];
            if i != w && sources[i].key() == sources[w].key() && !sources[i].advance()? {
                live.remove(k);
                continue;
            }
            k += 1;
        }
        if !sources[w].advance()? {
            live.retain(|&i| i != w);
        }
    }
    Ok(())
}

/// The ref records of `tables` (oldest first) in name order, the newest of each name, without
/// tombstones.
fn merge_refs(tables: &[Table]) -> Result<Vec<RefRecord<'static>>> {
    let mut out = Vec::new();
    let mut sources: Vec<Source<'_, '_>> = tables
        .iter()
        .map(|t| Source::Table(t.ref_records()))
        .collect();
    merge_records(&mut sources, |s| match s {
        Source::Table(r) if r.extra() != super::record::REF_DELETION => {
            out.push(r.decode_ref()?);
            Ok(())
        }
        _ => Ok(()),
    })?;
    Ok(out)
}

/// The log records of `tables` (oldest first) in key order, the newest of each key, without
/// tombstones.
fn merge_logs(tables: &[Table]) -> Result<Vec<LogRecord>> {
    let mut out = Vec::new();
    let mut sources: Vec<Source<'_, '_>> = tables
        .iter()
        .map(|t| Source::Table(t.log_records()))
        .collect();
    merge_records(&mut sources, |s| match s {
        Source::Table(l) if l.extra() != 0 => {
            out.push(l.decode_log()?);
            Ok(())
        }
        _ => Ok(()),
    })?;
    Ok(out)
}

/// What a compaction puts on top of the tables it merges: the records of an addition not
/// written as a table of its own (their update index the table's; messages normalized as
/// adding them would have), or that addition's table.
enum Addition<'a> {
    Records(RefStream<'a>, &'a [LogRecord]),
    Table(&'a Table),
}

/// Write the table compacting `range` (oldest first) with `top` above it into `out` (the file
/// at `path`), covering update indexes `min..=max`, as git's `stack_write_compact`: the newest
/// record of each key streamed from the tables straight into the writer, tombstones dropped
/// when the range is the bottom of the stack, the tables' log messages kept exactly. Returns
/// `out` and whether the table is empty.
fn compacted_table<W: Write>(
    (out, path): (W, &Path),
    opts: WriteOptions,
    range: &[Table],
    top: Option<Addition<'_>>,
    at_bottom: bool,
    (min, max): (u64, u64),
) -> Result<(W, bool)> {
    use super::record::{REF_DELETION, REF_VAL1, REF_VAL2};
    let normalize = !opts.exact_log_message;
    let opts = WriteOptions {
        exact_log_message: true,
        ..opts
    };
    let mut tables: Vec<&Table> = range.iter().collect();
    let (mut refs, mut logs): (Vec<Source<'_, '_>>, Vec<Source<'_, '_>>) = (Vec::new(), Vec::new());
    match top {
        Some(Addition::Table(t)) => tables.push(t),
        Some(Addition::Records(r, l)) => {
            refs.push(Source::Refs(r, None));
            logs.push(Source::Logs(l, 0, Vec::new()));
        }
        None => {}
    }
    let table_sources =
        |f: fn(&Table) -> Records<'_>| tables.iter().map(move |t| Source::Table(f(t)));
    refs.splice(0..0, table_sources(Table::ref_records));
    logs.splice(0..0, table_sources(Table::log_records));
    let mut w = TableWriter::to(out, path.to_owned(), opts, min, max)?;
    merge_records(&mut refs, |s| match s {
        Source::Table(r) => {
            let extra = r.extra();
            if at_bottom && extra == REF_DELETION {
                return Ok(());
            }
            if matches!(extra, REF_VAL1 | REF_VAL2) && r.table().hash() != opts.hash {
                return Err(Error::InvalidRecord(format!(
                    "table {} holds {} ids, not {}",
                    r.table().name(),
                    r.table().hash(),
                    opts.hash
                )));
            }
            w.add_ref_raw(r.key(), r.update_index(), extra, r.payload())
        }
        Source::Refs(_, current) => match current {
            Some(r) if !(at_bottom && r.value == RefValue::Deletion) => w.add_ref(r),
            _ => Ok(()),
        },
        Source::Logs(..) => unreachable!("refs merged"),
    })?;
    drop(refs);
    merge_records(&mut logs, |s| match s {
        Source::Table(l) => {
            if at_bottom && l.extra() == 0 {
                return Ok(());
            }
            w.add_log_raw(l.key(), l.extra(), l.value())
        }
        Source::Logs(recs, next, _) => {
            let l = &recs[*next - 1];
            if at_bottom && l.value == super::LogValue::Deletion {
                return Ok(());
            }
            w.add_log_as(l, normalize)
        }
        Source::Refs(..) => unreachable!("logs merged"),
    })?;
    w.finish()
}

/// A table being written to a temporary file in the stack's directory (a block at a time,
/// through a buffer), to be renamed to its `<min>-<max>-<rnd>.ref` name when complete;
/// dropped before, the file is removed.
struct TableFile {
    out: std::io::BufWriter<tempfile::NamedTempFile>,
    path: PathBuf,
}

impl TableFile {
    /// What a table is written through: large enough for a few blocks per write.
    const BUFFER: usize = 64 * 1024;

    /// The writer of `out` and the path named in its errors.
    fn sink(&mut self) -> (&mut std::io::BufWriter<tempfile::NamedTempFile>, &Path) {
        (&mut self.out, &self.path)
    }
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
            .map(|r| (r.name.into_owned(), r.value))
            .collect())
    }

    /// All ref records (with their update indexes) of the stack, deletions applied.
    pub fn ref_records(&self) -> Result<Vec<RefRecord<'static>>> {
        merge_refs(&self.tables)
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
        merge_logs(&self.tables)
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
        self.lock()?.commit(updates.to_vec(), logs.to_vec())
    }
    /// A temporary file in the stack's directory for a table of update indexes `min..=max`.
    fn table_file(&self, min: u64, max: u64) -> Result<TableFile> {
        let tmp = tempfile::Builder::new()
            .prefix(&format!("{}.temp.", format_name(min, max)))
            .rand_bytes(6)
            // As git's `mks_tempfile_m(…, 0666)`: readable by all unless the umask says otherwise.
            .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o666))
            .tempfile_in(&self.dir)
            .map_err(io_err("create temporary table in", &self.dir))?;
        Ok(TableFile {
            path: tmp.path().to_owned(),
            out: std::io::BufWriter::with_capacity(TableFile::BUFFER, tmp),
        })
    }

    /// Make the table written to `table` durable and rename it to a fresh
    /// `<min>-<max>-<rnd>.ref` name.
    fn install_table(&self, table: TableFile, min: u64, max: u64) -> Result<String> {
        let TableFile { out, path } = table;
        let tmp = out
            .into_inner()
            .map_err(|e| io_err("write", &path)(e.into_error()))?;
        self.opts
            .fsync
            .sync(Components::REFERENCE, tmp.as_file())
            .map_err(io_err("write", &path))?;
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

    /// Where the segment auto-compaction would compact after adding a table of `size` bytes
    /// (as [`Stack::compaction_sizes`] weighs them) starts, when it ends with that table; `None`
    /// when it would compact nothing or a segment below it.
    fn segment_with(&self, size: u64) -> Option<usize> {
        if self.opts.disable_auto_compact || self.tables.is_empty() {
            return None;
        }
        let mut sizes = self.compaction_sizes();
        sizes.push(size);
        let (first, end) = suggest_compaction_segment(&sizes, self.opts.geometric_factor);
        (end > first + 1 && end == sizes.len()).then_some(first)
    }

    /// Lock tables `first..` for a compaction (`<name>.lock`, newest first); `None` when one
    /// of them is locked already (another process compacting).
    fn lock_tables(&self, first: usize) -> Result<Option<Vec<LockFile>>> {
        let mut table_locks = Vec::new();
        for t in self.tables[first..].iter().rev() {
            match LockFile::acquire(&self.dir.join(t.name()), Timeout::Once) {
                Ok(mut l) => {
                    l.close();
                    table_locks.push(l);
                }
                Err(Error::Locked(_)) => return Ok(None),
                Err(e) => return Err(e),
            }
        }
        Ok(Some(table_locks))
    }

    /// With `tables.list` locked (`lock`) and tables `first..` locked (`table_locks`): write
    /// the table compacting them with the addition `top` (update index `ts`) on top, in place
    /// of adding it and then compacting, and commit the list.
    fn compact_onto(
        &mut self,
        lock: LockFile,
        table_locks: Vec<LockFile>,
        first: usize,
        ts: u64,
        top: Addition<'_>,
    ) -> Result<()> {
        let range = &self.tables[first..];
        let min = range[0].min_update_index();
        let mut file = self.table_file(min, ts)?;
        let (_, empty) = compacted_table(
            file.sink(),
            self.opts,
            range,
            Some(top),
            first == 0,
            (min, ts),
        )?;
        let compacted: Vec<String> = range.iter().map(|t| t.name().to_owned()).collect();
        let before = self.names()[..first].to_vec();
        let table = (!empty).then_some(file);
        self.swap_in(lock, (&before, &[]), &compacted, (min, ts), table)?;
        drop(table_locks);
        Ok(())
    }

    /// With `tables.list` locked: put the compacted table (`table`, update indexes
    /// `min..=max`; none when it is empty) where the tables named `compacted` were, between
    /// the names `around`, commit the list, and delete the compacted tables.
    fn swap_in(
        &mut self,
        list_lock: LockFile,
        around: (&[String], &[String]),
        compacted: &[String],
        (min, max): (u64, u64),
        table: Option<TableFile>,
    ) -> Result<()> {
        let installed = match table {
            Some(t) => Some(self.install_table(t, min, max)?),
            None => None,
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
        let mut file = self.table_file(min, max)?;
        let (_, empty) =
            compacted_table(file.sink(), self.opts, range, None, first == 0, (min, max))?;
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
        let table = (!empty).then_some(file);
        self.swap_in(list_lock, around, &compacted, (min, max), table)?;
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
    pub fn commit(self, mut refs: Vec<RefRecord>, logs: Vec<LogRecord>) -> Result<u64> {
        refs.sort_unstable_by(|a, b| a.name.cmp(&b.name));
        if let Some(w) = refs.windows(2).find(|w| w[0].name == w[1].name) {
            return Err(Error::InvalidRecord(format!(
                "ref {} updated twice",
                w[0].name
            )));
        }
        let floor = super::table::size_floor(&refs, self.stack().opts.hash);
        self.commit_sorted(Box::new(refs.into_iter().map(Ok)), floor, logs)
    }

    /// [`Locked::commit`] of ref records given one at a time, sorted by name and each name
    /// once (the writer refuses others), never all in memory: `floor` is a size no table of
    /// them is below ([`super::table::size_floor`] of records that are as large or smaller).
    /// They are written to the new table, or to the compacted one, as they come.
    pub fn commit_sorted(
        self,
        refs: RefStream<'_>,
        floor: u64,
        mut logs: Vec<LogRecord>,
    ) -> Result<u64> {
        let Locked { mut stack, lock } = self;
        let stack: &mut Stack = stack.borrow_mut();
        let ts = stack.next_update_index();
        let mut refs = refs
            .map(move |r| {
                r.map(|r| RefRecord {
                    update_index: ts,
                    ..r
                })
            })
            .peekable();
        for l in &mut logs {
            if l.update_index == 0 {
                l.update_index = ts;
            }
        }
        fn key(l: &LogRecord) -> (&[u8], u64) {
            (l.refname.as_slice(), l.update_index)
        }
        logs.sort_unstable_by(|a, b| log_key_cmp(key(a), key(b)));
        if let Some(w) = logs
            .windows(2)
            .find(|w| log_key_cmp(key(&w[0]), key(&w[1])).is_eq())
        {
            return Err(Error::InvalidRecord(format!(
                "two log records for {} at update index {}",
                w[0].refname, w[0].update_index
            )));
        }
        if refs.peek().is_none() && logs.is_empty() {
            return Ok(ts);
        }
        // When the auto-compaction that would follow takes in the new table, write its result
        // at once: the same stack as adding the table and then compacting. Which tables it
        // takes in depends on the new table's size; when the smallest it can be (`floor`) and
        // any larger size give the same answer, the records go straight into the compacted
        // table, encoded once.
        let at_floor = stack.segment_with(floor);
        let certain = at_floor == stack.segment_with(u64::MAX >> 8);
        if let (true, Some(first)) = (certain, at_floor)
            && let Some(table_locks) = stack.lock_tables(first)?
        {
            let top = Addition::Records(Box::new(refs), &logs);
            stack.compact_onto(lock, table_locks, first, ts, top)?;
            return Ok(ts);
        }
        let mut file = stack.table_file(ts, ts)?;
        let (out, path) = file.sink();
        let mut w = TableWriter::to(out, path.to_owned(), stack.opts, ts, ts)?;
        for r in refs {
            w.add_ref(&r?)?;
        }
        for l in &logs {
            w.add_log(l)?;
        }
        w.finish()?;
        drop(logs);
        let written = file
            .out
            .flush()
            .and_then(|()| file.out.get_ref().as_file().metadata())
            .map_err(io_err("write", &file.path))?
            .len();
        let hash = stack.opts.hash;
        let weight = written.saturating_sub(
            (super::table::footer_size_for(hash) + super::table::header_size_for(hash) - 1) as u64,
        );
        if let (false, Some(first)) = (certain, stack.segment_with(weight))
            && let Some(table_locks) = stack.lock_tables(first)?
        {
            let new = Table::open(&file.path)?;
            stack.compact_onto(lock, table_locks, first, ts, Addition::Table(&new))?;
            return Ok(ts);
        }
        let name = stack.install_table(file, ts, ts)?;
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
    use crate::reftable::table::write_table;
    use crate::reftable::{LogUpdate, LogValue};

    /// [`compacted_table`] written into memory.
    fn compacted_table(
        opts: WriteOptions,
        range: &[Table],
        top: Option<Addition<'_>>,
        at_bottom: bool,
        limits: (u64, u64),
    ) -> Result<(Vec<u8>, bool)> {
        let out = (Vec::new(), Path::new(""));
        super::compacted_table(out, opts, range, top, at_bottom, limits)
    }

    /// An addition's records given as a slice.
    fn records<'a>(refs: &'a [RefRecord<'a>], logs: &'a [LogRecord]) -> Addition<'a> {
        Addition::Records(Box::new(refs.iter().cloned().map(Ok)), logs)
    }
    use std::collections::BTreeMap;

    /// The compaction as it was before it streamed (each table decoded into owned records,
    /// merged in memory, the newer table's records given as values): the reference the
    /// streaming merge must match byte for byte.
    mod owned {
        use super::*;

        fn merge_newer<'a>(
            older: Vec<RefRecord<'a>>,
            newer: Vec<RefRecord<'a>>,
        ) -> Vec<RefRecord<'a>> {
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

        pub fn merge_refs(tables: &[Table]) -> Vec<RefRecord<'static>> {
            let mut merged: Vec<RefRecord> = Vec::new();
            for t in tables {
                merged = merge_newer(merged, t.refs().expect("refs"));
            }
            merged
        }

        pub fn merge_logs(tables: &[Table]) -> BTreeMap<Vec<u8>, LogRecord> {
            let mut merged = BTreeMap::new();
            for t in tables {
                for l in t.logs().expect("logs") {
                    merged.insert(l.key(), l);
                }
            }
            merged
        }

        pub fn compacted_table(
            opts: WriteOptions,
            range: &[Table],
            at_bottom: bool,
            (min, max): (u64, u64),
            refs: &[RefRecord],
            logs: Vec<LogRecord>,
        ) -> (Vec<u8>, bool) {
            let mut merged = merge_newer(merge_refs(range), refs.to_vec());
            let mut merged_logs = merge_logs(range);
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
            write_table(opts, min, max, &merged, &merged_logs).expect("write")
        }
    }

    fn id(i: u32) -> gix_hash::ObjectId {
        let mut b = [0u8; 20];
        b[..4].copy_from_slice(&i.wrapping_mul(2_654_435_761).to_be_bytes());
        b[19] = i as u8;
        gix_hash::ObjectId::try_from(&b[..]).expect("20 bytes")
    }

    fn small_blocks() -> WriteOptions {
        WriteOptions {
            block_size: 512,
            ..WriteOptions::default()
        }
    }

    /// The records of addition `ts` (1, 2, 3...) of a stack: refs created, updated to
    /// annotated tags and symrefs, deleted (also refs that never existed), `HEAD`; reflog
    /// entries, their tombstones, messages git normalizes.
    fn addition(ts: u64) -> (Vec<RefRecord<'static>>, Vec<LogRecord>) {
        let t = ts as u32;
        let mut refs = vec![RefRecord {
            name: BString::from("HEAD").into(),
            update_index: ts,
            value: RefValue::Symref(format!("refs/heads/r{:04}", t * 7).into()),
        }];
        let mut logs = Vec::new();
        for i in (0..400u32).filter(|i| (i + t).is_multiple_of(t + 1)) {
            let name: BString = format!("refs/heads/r{i:04}").into();
            let value = match (i / 3 + t) % 5 {
                0 => RefValue::Val2(id(i + 100 * t), id(i + 1000 * t)),
                1 => RefValue::Symref(format!("refs/heads/r{:04}", i / 2).into()),
                2 if ts > 1 => RefValue::Deletion,
                _ => RefValue::Val1(id(i / 4 + t)),
            };
            if i % 3 != 0 {
                logs.push(LogRecord {
                    refname: name.clone(),
                    update_index: ts,
                    value: LogValue::Update(LogUpdate {
                        old: id(i),
                        new: id(i + t),
                        name: "C O Mitter".into(),
                        email: "c@example.com".into(),
                        time: 1_700_000_000 + u64::from(i * t),
                        tz_offset: -700,
                        message: format!("push {i}{}", "\n".repeat(i as usize % 3)).into(),
                    }),
                });
            }
            if ts > 1 && i % 11 == 0 {
                logs.push(LogRecord {
                    refname: name.clone(),
                    update_index: ts - 1,
                    value: LogValue::Deletion,
                });
            }
            refs.push(RefRecord {
                name: name.into(),
                update_index: ts,
                value,
            });
        }
        refs.sort_by(|a, b| a.name.cmp(&b.name));
        logs.sort_by_key(LogRecord::key);
        (refs, logs)
    }

    fn table(opts: WriteOptions, ts: u64) -> Table {
        let (refs, logs) = addition(ts);
        let (bytes, _) = write_table(opts, ts, ts, &refs, &logs).expect("write");
        Table::from_bytes(format!("t{ts}"), bytes).expect("parse")
    }

    #[test]
    fn streaming_compaction_writes_what_the_owned_merge_wrote() {
        for opts in [WriteOptions::default(), small_blocks()] {
            let tables: Vec<Table> = (1..=4).map(|ts| table(opts, ts)).collect();
            for (first, last) in [(0, 1), (0, 3), (1, 2), (1, 3), (2, 3)] {
                let range = &tables[first..=last];
                let (min, max) = (
                    range[0].min_update_index(),
                    range[last - first].max_update_index(),
                );
                for at_bottom in [first == 0, false] {
                    let old =
                        owned::compacted_table(opts, range, at_bottom, (min, max), &[], vec![]);
                    let new =
                        compacted_table(opts, range, None, at_bottom, (min, max)).expect("compact");
                    assert!(old == new, "{first}..={last} at bottom {at_bottom}");
                    let t = Table::from_bytes("c", new.0).expect("parse");
                    t.verify().expect("verify");
                    assert!(
                        t.logs()
                            .expect("logs")
                            .iter()
                            .any(|l| l.value == LogValue::Deletion)
                            != at_bottom
                    );
                }
            }
            // A push's addition compacted at once: the older tables with its records on top,
            // messages normalized as adding them would have.
            let (refs, logs) = addition(5);
            let (bytes, _) = write_table(opts, 5, 5, &refs, &logs).expect("write");
            let new_table = Table::from_bytes("new", bytes).expect("parse");
            let mut normalized = logs.clone();
            for l in &mut normalized {
                if let LogValue::Update(u) = &mut l.value {
                    u.message =
                        crate::reftable::table::normalize_log_message(&l.refname, &u.message)
                            .expect("one line")
                            .into();
                }
            }
            for first in [0, 2, 3] {
                let old = owned::compacted_table(
                    opts,
                    &tables[first..],
                    first == 0,
                    (first as u64 + 1, 5),
                    &refs,
                    normalized.clone(),
                );
                let range = &tables[first..];
                let limits = (first as u64 + 1, 5);
                for top in [Addition::Table(&new_table), records(&refs, &logs)] {
                    let new = compacted_table(opts, range, Some(top), first == 0, limits)
                        .expect("compact");
                    assert!(old == new, "addition on {first}..");
                }
            }
            // The merged reads of the stack.
            let with_deletions = owned::merge_refs(&tables);
            assert!(with_deletions.iter().any(|r| r.value == RefValue::Deletion));
            let live: Vec<RefRecord> = with_deletions
                .into_iter()
                .filter(|r| r.value != RefValue::Deletion)
                .collect();
            assert_eq!(merge_refs(&tables).expect("merge"), live);
            let live_logs: Vec<LogRecord> = owned::merge_logs(&tables)
                .into_values()
                .filter(|l| l.value != LogValue::Deletion)
                .collect();
            assert_eq!(merge_logs(&tables).expect("merge"), live_logs);
        }
    }

    #[test]
    fn size_floor_is_below_every_table_of_those_refs() {
        for opts in [WriteOptions::default(), small_blocks()] {
            for ts in 1..=5 {
                let (refs, logs) = addition(ts);
                let (bytes, _) = write_table(opts, ts, ts, &refs, &[]).expect("write");
                let t = Table::from_bytes("t", bytes).expect("parse");
                let weight = t.size() - (super::super::table::HEADER_SIZE_V1 as u64 - 1);
                let floor = super::super::table::size_floor(&refs, opts.hash);
                assert!(floor <= weight && floor * 3 > weight, "{floor} vs {weight}");
                let (with_logs, _) = write_table(opts, ts, ts, &refs, &logs).expect("write");
                assert!(floor <= with_logs.len() as u64);
            }
        }
    }

    /// An empty stack in a new temporary directory (kept while the first value lives), and
    /// its `reftable` directory.
    fn empty_stack() -> (tempfile::TempDir, PathBuf, Stack) {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("reftable");
        std::fs::create_dir(&path).expect("mkdir");
        let stack = Stack::open(&path).expect("open");
        (dir, path, stack)
    }

    /// Records streamed out of order fail the addition part way through its table, on both of
    /// its paths (a table of its own, one compacted with the stack): the stack is unchanged,
    /// no file of the half-written table is left, and `tables.list` is unlocked.
    #[test]
    fn a_stream_refused_part_way_leaves_nothing_behind() {
        let (_dir, path, mut stack) = empty_stack();
        let (r1, l1) = addition(1);
        stack.add(&r1, &l1).expect("add");
        let files = || {
            let mut f: Vec<String> = std::fs::read_dir(&path)
                .expect("read_dir")
                .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
                .collect();
            f.sort();
            f
        };
        let before = files();
        // Few records: a table of their own (too small to be compacted with the one below);
        // many: straight into a compaction with the table below.
        for n in [3, 3_000] {
            let good = (0..n).map(|i| RefRecord {
                name: BString::from(format!("refs/heads/s{i:05}")).into(),
                update_index: 0,
                value: RefValue::Val1(gix_hash::ObjectId::null(gix_hash::Kind::Sha1)),
            });
            let bad = good.chain(std::iter::once(RefRecord {
                name: BString::from("refs/heads/a").into(),
                update_index: 0,
                value: RefValue::Val1(gix_hash::ObjectId::null(gix_hash::Kind::Sha1)),
            }));
            let locked = stack.lock().expect("lock");
            let floor = 4 * n as u64;
            let e = locked
                .commit_sorted(Box::new(bad.map(Ok)), floor, Vec::new())
                .expect_err("out of order");
            assert!(matches!(e, Error::InvalidRecord(_)), "{e}");
            assert_eq!(files(), before, "{n} records");
            stack.reload().expect("reload");
            assert_eq!(stack.tables().len(), 1);
        }
        stack.lock().expect("unlocked");
    }

    /// A push onto a small stack: the compacted table written at once from its records is the
    /// one adding its table and then compacting the stack writes.
    #[test]
    fn an_addition_compacted_at_once_is_the_table_compaction_writes() {
        let (_dir, _, mut stack) = empty_stack();
        let (r1, l1) = addition(1);
        let small: Vec<RefRecord> = r1[..3].to_vec();
        let small_logs: Vec<LogRecord> = l1
            .iter()
            .filter(|l| small.iter().any(|r| *r.name == *l.refname))
            .cloned()
            .collect();
        assert_eq!(stack.add(&small, &small_logs).expect("add"), 1);
        let (r2, l2) = addition(2);
        let floor = super::super::table::size_floor(&r2, stack.opts.hash);
        assert_eq!(
            stack.segment_with(floor),
            Some(0),
            "certain without writing the table"
        );
        assert_eq!(stack.segment_with(u64::MAX >> 8), Some(0));
        let below = stack.tables().to_vec();
        assert_eq!(stack.add(&r2, &l2).expect("add"), 2);
        assert_eq!(stack.tables().len(), 1, "compacted");
        let mut normalized = l2.clone();
        for l in &mut normalized {
            if let LogValue::Update(u) = &mut l.value {
                u.message = crate::reftable::table::normalize_log_message(&l.refname, &u.message)
                    .expect("one line")
                    .into();
            }
        }
        let r2: Vec<RefRecord> = r2
            .into_iter()
            .map(|r| RefRecord {
                update_index: 2,
                ..r
            })
            .collect();
        let (want, _) = owned::compacted_table(stack.opts, &below, true, (1, 2), &r2, normalized);
        assert!(stack.tables()[0].bytes() == want.as_slice());
    }

    #[test]
    fn streaming_compaction_reports_a_corrupt_table() {
        let t = table(small_blocks(), 1);
        let mut bytes = t.bytes().to_vec();
        // A ref block's first record's key length, past what the block holds.
        bytes[super::super::table::HEADER_SIZE_V1 + 4 + 1] = 0xff;
        let Ok(bad) = Table::from_bytes("bad", bytes) else {
            panic!("the footer is intact");
        };
        let second = table(small_blocks(), 2);
        let err = compacted_table(small_blocks(), &[bad, second], None, true, (1, 2)).unwrap_err();
        assert!(
            matches!(err, Error::Corrupt { ref table, .. } if table == "bad"),
            "{err}"
        );
    }

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
