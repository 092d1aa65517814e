//! A connectivity check that holds while concurrent pushes grow the list of objects not known
//! to be complete ([`crate::objects::incomplete`]). A push lists what it moves in that is not
//! complete before it moves it, so an object that one pass of a check found in the repository
//! and took as complete may be listed by the time the pass ends. The list is looked through
//! again after each pass, and the pass run again with the new list while it names an object
//! the pass relied on ([`until_settled`]). The accepting node's check (`receive::connectivity`)
//! and a replica's (`cluster::objects`) both run their passes through this one loop.
//!
//! The first pass's list ([`first_suspects`]) is read only when it names an object the pass's
//! walks could stop at; a list that does not concern the push is looked through, never
//! collected (a list of 390,000 ids collected into a set twice a push cost 235 ms).

use foldhash::HashSet;
use std::path::Path;

use gix_hash::ObjectId;

use crate::objects::connectivity::Check;
use crate::objects::incomplete;
use crate::objects::pack_links::Outside;

/// How many passes [`until_settled`] runs before it gives up ([`Unsettled`]): only pushes
/// that keep listing what this one builds on get there.
pub const MAX_PASSES: usize = 4;

/// A push of more tips than this collects the list before its first pass rather than look for
/// its tips in it: a set of as many tips costs more than the list can (at most
/// [`incomplete::MAX_BYTES`] of ids, about 390,000).
const MAX_TIPS_LOOKED_FOR: usize = 1 << 16;

/// The list of objects not known to be complete, as the passes of a check read it.
pub trait List {
    /// Every object on it (a pass's suspects).
    fn read(&mut self) -> Result<HashSet<ObjectId>, incomplete::Error>;
    /// Whether it names an object `wanted` says `true` to, nothing collected; of what was on
    /// it when it was last read whole, or looked through to the end, this may ask nothing
    /// again (the check relies on every such object being a suspect or no stop of its walks,
    /// [`first_suspects`]).
    fn any(
        &mut self,
        wanted: &mut dyn FnMut(&ObjectId) -> bool,
    ) -> Result<bool, incomplete::Error>;
}

/// A repository's list, in its objects directory. What was on the list when it was last read
/// whole is not read again when the list is looked through ([`incomplete::lists_any_since`]):
/// after a pass, only what was listed meanwhile can make it stale.
pub struct Listed<'a> {
    objects_dir: &'a Path,
    hash: gix_hash::Kind,
    seen: incomplete::Seen,
}

impl<'a> Listed<'a> {
    /// The list of the repository whose objects directory is `objects_dir`.
    pub fn new(objects_dir: &'a Path, hash: gix_hash::Kind) -> Self {
        Listed {
            objects_dir,
            hash,
            seen: incomplete::Seen::default(),
        }
    }
}

impl List for Listed<'_> {
    fn read(&mut self) -> Result<HashSet<ObjectId>, incomplete::Error> {
        incomplete::read_noting(self.objects_dir, self.hash, &mut self.seen)
    }

    fn any(
        &mut self,
        wanted: &mut dyn FnMut(&ObjectId) -> bool,
    ) -> Result<bool, incomplete::Error> {
        incomplete::lists_any_since(self.objects_dir, self.hash, &mut self.seen, wanted)
    }
}

/// What the received pack links to outside it, as the first pass's guess needs it.
#[derive(Clone, Copy)]
pub enum PackLinks<'a> {
    /// No pack arrived: the walks go through no object of the push.
    NoPack,
    /// What the pack's commits, trees and tags link to outside it, as indexing took it.
    Known(&'a Outside),
    /// Indexing did not take them.
    Unknown,
}

impl<'a> PackLinks<'a> {
    /// The links of a received pack (`None` when none arrived) whose indexing took `links`
    /// (`None` when it did not look).
    pub fn of(pack: Option<Option<&'a Outside>>) -> Self {
        match pack {
            None => PackLinks::NoPack,
            Some(Some(links)) => PackLinks::Known(links),
            Some(None) => PackLinks::Unknown,
        }
    }
}

/// The objects a pass's walks could stop at, and so rely on: a walk goes through the pack's
/// objects and stops at the first other object it meets, taken as complete unless listed. So
/// it meets a listed object only as a tip, a client shallow commit, or a link out of the pack
/// (or through a listed one it met so).
pub struct Stops<'a, T> {
    /// The new values of the refs to check.
    pub tips: T,
    /// The client's shallow commits.
    pub shallow: &'a [ObjectId],
    /// What the pack links to outside it.
    pub links: PackLinks<'a>,
}

/// The list kept changing under the check: each of [`MAX_PASSES`] passes relied on an object
/// that was listed while it ran.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("the list of incomplete objects kept changing under the connectivity check ({passes} passes)")]
pub struct Unsettled {
    /// How many passes ran.
    pub passes: usize,
}

/// The first pass's suspects: the list, or nothing when it names none of the objects the pass
/// could stop at (`stops`). Those are known when indexing took the pack's links and the tips
/// are not too many to look for ([`MAX_TIPS_LOOKED_FOR`]); else the list is read.
pub fn first_suspects(
    list: &mut dyn List,
    stops: Stops<'_, impl Iterator<Item = ObjectId> + Clone>,
) -> Result<HashSet<ObjectId>, incomplete::Error> {
    let links = match stops.links {
        PackLinks::NoPack => None,
        PackLinks::Known(Ok(links)) => Some(links),
        PackLinks::Known(Err(_)) | PackLinks::Unknown => return list.read(),
    };
    let mut tips = stops.tips;
    if tips.clone().nth(MAX_TIPS_LOOKED_FOR).is_some() {
        return list.read();
    }
    // The tips and the client's shallow commits as one set (a hostile request's many shallow
    // lines are not searched through for each id of a long list), made only once the list
    // turns out to name anything (most repositories list nothing).
    let mut stop_set: Option<HashSet<ObjectId>> = None;
    let stops_at = &mut |id: &ObjectId| {
        let set = stop_set
            .get_or_insert_with(|| tips.by_ref().chain(stops.shallow.iter().copied()).collect());
        set.contains(id) || links.is_some_and(|links| links.contains_key(id))
    };
    Ok(match list.any(stops_at)? {
        true => list.read()?,
        false => HashSet::default(),
    })
}

/// Run `pass` with `suspects` (from [`first_suspects`]) as the list, then look through the list
/// again: while it names an object the pass's [`Check`] relied on that it was not given
/// ([`Check::made_stale_by`]), run `pass` again with the list as it is now; at most
/// [`MAX_PASSES`] times. What the last pass found.
pub fn until_settled<'c, T, E>(
    list: &mut dyn List,
    mut suspects: HashSet<ObjectId>,
    mut pass: impl FnMut(HashSet<ObjectId>) -> Result<(T, Check<'c>), E>,
) -> Result<T, E>
where
    E: From<incomplete::Error> + From<Unsettled>,
{
    let mut passes = 0;
    loop {
        let (found, check) = pass(suspects)?;
        passes += 1;
        if !list.any(&mut |id| check.made_stale_by(id))? {
            return Ok(found);
        }
        if passes == MAX_PASSES {
            return Err(Unsettled { passes }.into());
        }
        tracing::debug!(
            "an object the connectivity check relied on was listed meanwhile: checking again"
        );
        suspects = list.read()?;
    }
}

/// A list that concurrent pushes change under a check, for tests: `lists[k]` is the list at
/// the k-th time it is looked at or read (the last one from then on), and `reads` counts them.
#[cfg(test)]
pub(crate) struct InTurn<'a> {
    pub(crate) lists: &'a [Vec<ObjectId>],
    pub(crate) reads: usize,
}

#[cfg(test)]
impl InTurn<'_> {
    fn next(&mut self) -> &[ObjectId] {
        let list = &self.lists[self.reads.min(self.lists.len() - 1)];
        self.reads += 1;
        list
    }
}

#[cfg(test)]
impl List for InTurn<'_> {
    fn read(&mut self) -> Result<HashSet<ObjectId>, incomplete::Error> {
        Ok(self.next().iter().copied().collect())
    }

    fn any(
        &mut self,
        wanted: &mut dyn FnMut(&ObjectId) -> bool,
    ) -> Result<bool, incomplete::Error> {
        Ok(self.next().iter().any(wanted))
    }
}
