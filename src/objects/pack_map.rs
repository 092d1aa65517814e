//! A received pack mapped for one pass over its entries, giving each page back once read.
//!
//! Resolving a pack's deltas reads every entry once, in the order of the delta tree, not of the
//! file. Through a plain mapping every page read stays in the process's resident set until the
//! mapping goes, so a whole-history push held its whole pack (hundreds of MiB) resident on top
//! of the index being built, where git's `index-pack` reads with `pread` and holds none of it.
//! [`PackMap`] counts, for each page, the bytes of the entries a pass will read from it; once a
//! page's entries have all been read, it is dropped from the mapping (`MADV_DONTNEED`). The
//! file's pages stay in the page cache, so a page read again (a race between threads, a second
//! pass) is faulted back in with the same bytes: dropping is never a correctness question, only
//! one of memory. Fault-around is turned off (`MADV_RANDOM`), or a fault would map back the
//! dropped neighbours of the page it reads.
//!
//! Written here because neither gix-pack (whose resolvers borrow from a plain mapping) nor
//! memmap2 (which maps but does not account) tracks what a pass has left to read.

#![allow(unsafe_code)]

use std::cell::RefCell;
use std::fs::File;
use std::io;
use std::ops::Range;
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};

/// Pages a reader collects before giving them back in one go (fewer `madvise` calls, and
/// neighbouring pages merged into one): 4 MiB a thread. Measured on git.git's whole history
/// (419,403 objects, 303 MiB): 32 pages cost +0.5 s of system time over not giving pages back,
/// 1,024 pages +0.25 s, for 98 against 105 MiB of peak RSS (392 MiB not giving back).
const RELEASE_BATCH: usize = 1024;

/// A read-only mapping of a pack file with, per page, the bytes a pass has still to read.
pub struct PackMap {
    map: memmap2::Mmap,
    page: usize,
    /// Bytes of expected reads left on each page; a page at zero is dropped by the reader that
    /// took it there.
    left: Box<[AtomicU32]>,
}

impl PackMap {
    /// Map the pack at `path`; no reads are expected yet (see [`PackMap::expect`]).
    pub fn open(path: &Path) -> io::Result<Self> {
        let file = File::open(path)?;
        // SAFETY: the pack is a finished file in a directory only this process writes (the
        // quarantine) or a pack git never rewrites in place; nothing truncates or changes it
        // while it is mapped.
        let map = unsafe { memmap2::Mmap::map(&file)? };
        // Best effort: without it, faults map the neighbours of each page read as well.
        let _ = map.advise(memmap2::Advice::Random);
        let page = page_size();
        let pages = map.len().div_ceil(page);
        Ok(PackMap {
            map,
            page,
            left: (0..pages).map(|_| AtomicU32::new(0)).collect(),
        })
    }

    /// The whole file.
    pub fn bytes(&self) -> &[u8] {
        &self.map
    }

    /// A pass will read `range` once through a [`Reader`]: count its bytes on their pages.
    pub fn expect(&self, range: Range<u64>) {
        self.each_page(range, |page, bytes| {
            self.left[page].fetch_add(bytes, Ordering::Relaxed);
        });
    }

    /// Give back every whole page inside `range` (a pass over it is done).
    pub fn release(&self, range: Range<usize>) {
        let start = range.start.div_ceil(self.page);
        let end = range.end.min(self.map.len()) / self.page;
        if start < end {
            self.drop_pages(start..end);
        }
    }

    /// The header of each entry at `offsets` (ascending) to `f` with its position, read front
    /// to back, the pages behind given back every MiB and all of them at the end; `None` when
    /// an offset is outside the pack, a header does not decode, or `f` says `None`.
    pub fn each_header(
        &self,
        offsets: &[u64],
        object_hash: gix_hash::Kind,
        mut f: impl FnMut(usize, gix_pack::data::Entry) -> Option<()>,
    ) -> Option<()> {
        /// Bytes read between two give-backs.
        const BEHIND: u64 = 1 << 20;
        let mut released = 0;
        let mut result = Some(());
        for (at, &offset) in offsets.iter().enumerate() {
            if offset.saturating_sub(released) >= BEHIND {
                self.release(released as usize..offset as usize);
                released = offset;
            }
            let entry = usize::try_from(offset)
                .ok()
                .and_then(|o| self.map.get(o..))
                .and_then(|bytes| gix_pack::data::Entry::from_bytes(bytes, offset, object_hash).ok());
            result = entry.and_then(|entry| f(at, entry));
            if result.is_none() {
                break;
            }
        }
        self.release(0..self.map.len());
        result
    }

    /// Each page `range` touches, with the number of its bytes in `range`.
    fn each_page(&self, range: Range<u64>, mut f: impl FnMut(usize, u32)) {
        let len = self.map.len() as u64;
        let (start, end) = (range.start.min(len), range.end.min(len));
        let page = self.page as u64;
        let mut at = start;
        while at < end {
            let next = ((at / page + 1) * page).min(end);
            // A page's share is at most the page size, which fits.
            f((at / page) as usize, (next - at) as u32);
            at = next;
        }
    }

    fn drop_pages(&self, pages: Range<usize>) {
        let offset = pages.start * self.page;
        let len = (pages.end * self.page).min(self.map.len()) - offset;
        // SAFETY: the mapping is a private, read-only mapping of a file nobody changes while
        // it is mapped; after MADV_DONTNEED a read of these pages faults them back in from the
        // file with the same bytes, so a slice another thread still reads stays valid and
        // unchanged. Best effort: a failure only leaves the pages resident.
        let _ = unsafe {
            self.map
                .unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, offset, len)
        };
    }
}

/// One thread's reads from a [`PackMap`] during a pass: each read's pages are counted down,
/// and a page at zero is given back after the read that emptied it is over (at a later read of
/// the same thread, since the caller still uses the bytes it was given). Cloning gives a new
/// thread its own, empty, list; a `Reader` is not `Sync`, so one thread uses it.
#[derive(Default)]
pub struct Reader {
    done: RefCell<Vec<usize>>,
}

impl Clone for Reader {
    fn clone(&self) -> Self {
        Reader::default()
    }
}

impl Reader {
    /// The bytes of `range`, one of the reads [`PackMap::expect`] counted; `None` when it lies
    /// outside the file.
    pub fn read<'m>(&self, range: Range<u64>, map: &'m PackMap) -> Option<&'m [u8]> {
        let bytes = map
            .map
            .get(usize::try_from(range.start).ok()?..usize::try_from(range.end).ok()?)?;
        let mut done = self.done.borrow_mut();
        if done.len() >= RELEASE_BATCH {
            release_runs(map, &mut done);
        }
        map.each_page(range, |page, bytes| {
            // A read nobody announced (or announced once and read twice) finds the count at
            // zero: leave it there rather than wrap.
            let left = &map.left[page];
            if left
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(bytes))
                .is_ok_and(|before| before == bytes)
            {
                done.push(page);
            }
        });
        Some(bytes)
    }

    /// This reader as the resolver gix-pack's delta-tree traversal calls for each entry's
    /// bytes (one clone per thread).
    pub fn into_resolver(
        self,
    ) -> impl for<'r> Fn(gix_pack::data::EntryRange, &'r PackMap) -> Option<&'r [u8]> + Send + Clone
    {
        move |range, map| self.read(range, map)
    }
}

/// Give back the pages in `done`, each run of neighbours in one call.
fn release_runs(map: &PackMap, done: &mut Vec<usize>) {
    done.sort_unstable();
    let mut pages = done.drain(..);
    let Some(first) = pages.next() else {
        return;
    };
    let mut run = first..first + 1;
    for page in pages {
        if page == run.end {
            run.end += 1;
        } else {
            map.drop_pages(run);
            run = page..page + 1;
        }
    }
    map.drop_pages(run);
}

/// The size of a page, the unit `madvise` works in.
fn page_size() -> usize {
    // SAFETY: sysconf reads a constant of the system and has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(n).ok().filter(|&n| n > 0).unwrap_or(4096)
}

/// The resident pages of this process that map `map` (its `Rss` in `/proc/self/smaps`), for
/// tests.
#[cfg(test)]
fn resident_pages(map: &PackMap) -> usize {
    let maps = std::fs::read_to_string("/proc/self/smaps").expect("smaps");
    let start = format!("{:x}-", map.map.as_ptr() as usize);
    let mut lines = maps.lines().skip_while(|l| !l.starts_with(&start));
    lines.next().expect("the mapping is listed");
    lines
        .find_map(|l| l.strip_prefix("Rss:"))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .and_then(|v| v.trim().parse::<usize>().ok())
        .map(|kb| kb * 1024 / map.page)
        .expect("Rss of the mapping")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(pages: usize) -> (tempfile::TempDir, std::path::PathBuf, usize) {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("pack");
        let page = page_size();
        let bytes: Vec<u8> = (0..pages * page).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &bytes).expect("write");
        (dir, path, page)
    }

    #[test]
    fn pages_are_given_back_once_every_read_on_them_is_over() {
        let pages = 3 * RELEASE_BATCH;
        let (_dir, path, page) = file(pages);
        let map = PackMap::open(&path).expect("map");
        // Entries of 100 bytes, each straddling pages now and then, read back to front.
        let entries: Vec<Range<u64>> = (0..(pages * page) as u64 / 100)
            .map(|i| i * 100..(i + 1) * 100)
            .collect();
        for e in &entries {
            map.expect(e.clone());
        }
        let reader = Reader::default();
        let mut sum = 0u64;
        for e in entries.iter().rev() {
            let bytes = reader.read(e.clone(), &map).expect("in the file");
            assert_eq!(bytes, &map.bytes()[e.start as usize..e.end as usize]);
            sum += bytes.iter().map(|&b| u64::from(b)).sum::<u64>();
        }
        assert!(sum > 0);
        // All but the last batch of pages was given back.
        let resident = resident_pages(&map);
        assert!(resident <= RELEASE_BATCH + 2, "{resident} of {pages} pages resident");
        // Whatever was given back reads back the same.
        assert_eq!(map.bytes(), &std::fs::read(&path).expect("read")[..]);
    }

    #[test]
    fn a_page_with_reads_left_stays_and_an_unannounced_read_changes_nothing() {
        let (_dir, path, page) = file(4);
        let map = PackMap::open(&path).expect("map");
        let p = page as u64;
        map.expect(0..p / 2);
        map.expect(p / 2..p);
        let reader = Reader::default();
        reader.read(0..p / 2, &map);
        reader.read(3 * p..3 * p + 10, &map); // never announced
        assert_eq!(map.left[0].load(Ordering::Relaxed), p as u32 / 2);
        assert_eq!(map.left[3].load(Ordering::Relaxed), 0);
        assert!(reader.done.borrow().is_empty());
        reader.read(p / 2..p, &map);
        assert_eq!(*reader.done.borrow(), vec![0]);
        assert!(reader.read(4 * p..4 * p + 1, &map).is_none(), "past the end");
    }

    #[test]
    fn release_gives_back_only_whole_pages() {
        let (_dir, path, page) = file(8);
        let map = PackMap::open(&path).expect("map");
        let touched: u64 = map.bytes().iter().map(|&b| u64::from(b)).sum();
        assert!(touched > 0);
        assert_eq!(resident_pages(&map), 8);
        map.release(page / 2..3 * page + 1); // pages 1 and 2
        assert_eq!(resident_pages(&map), 6);
        map.release(0..map.bytes().len());
        assert_eq!(resident_pages(&map), 0);
    }
}
