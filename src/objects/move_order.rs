//! The order in which a push's loose objects move from the quarantine into the repository:
//! every object after the objects of the push it links to (a tree after its blobs and
//! subtrees, a commit after its tree and parents, a tag after its target).
//!
//! berth's connectivity walks stop at any object the repository has and take it as complete
//! (git's start from the refs). Moved in this order, a move cut short (the process killed
//! half way) leaves in the repository only objects whose links are all there, the rest being
//! removed with the quarantine; moved in directory order, it could leave a commit without its
//! tree, on which a later push of the same commit would then build a ref. A pack needs no
//! order: it moves in whole, its index last.
//!
//! The graph is the push's own objects, numbered as the pack's index lists them; links to
//! objects outside the push are not edges (the connectivity check found them in the
//! repository before anything moves).

/// The links between a push's objects: object `i` links to `targets[starts[i]..starts[i+1]]`.
#[derive(Debug, Default)]
pub struct Links {
    starts: Vec<u32>,
    targets: Vec<u32>,
}

impl Links {
    /// Links for `objects` objects, to be added in their order with [`Links::object`].
    pub fn with_capacity(objects: usize) -> Self {
        let mut starts = Vec::with_capacity(objects + 1);
        starts.push(0);
        Links {
            starts,
            targets: Vec::new(),
        }
    }

    /// Add the next object, which links to the objects `targets` (numbers of objects of the
    /// push, added before or after it).
    pub fn object(&mut self, targets: impl IntoIterator<Item = u32>) {
        if self.starts.is_empty() {
            self.starts.push(0);
        }
        self.targets.extend(targets);
        self.starts.push(self.targets.len() as u32);
    }

    /// How many objects were added.
    pub fn len(&self) -> usize {
        self.starts.len().saturating_sub(1)
    }

    /// Whether no object was added.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn of(&self, object: usize) -> &[u32] {
        &self.targets[self.starts[object] as usize..self.starts[object + 1] as usize]
    }

    /// Every object once, each after every object it links to (a depth-first walk's
    /// post-order, without recursion: a chain of a million commits is a million deep). A
    /// link to a number not added is ignored; so is a link back to an object the walk is
    /// inside of (a cycle, which object ids make impossible to build, cannot loop it).
    pub fn children_first(&self) -> Vec<u32> {
        #[derive(Clone, Copy, PartialEq)]
        enum Seen {
            Not,
            Entered,
            Placed,
        }
        let n = self.len();
        let mut seen = vec![Seen::Not; n];
        let mut order = Vec::with_capacity(n);
        // (object, how many of its links were followed)
        let mut stack: Vec<(u32, u32)> = Vec::new();
        for root in 0..n {
            if seen[root] != Seen::Not {
                continue;
            }
            seen[root] = Seen::Entered;
            stack.push((root as u32, 0));
            while let Some((object, followed)) = stack.last_mut() {
                let links = self.of(*object as usize);
                match links.get(*followed as usize) {
                    Some(&next) => {
                        *followed += 1;
                        if (next as usize) < n && seen[next as usize] == Seen::Not {
                            seen[next as usize] = Seen::Entered;
                            stack.push((next, 0));
                        }
                    }
                    None => {
                        let object = *object;
                        seen[object as usize] = Seen::Placed;
                        order.push(object);
                        stack.pop();
                    }
                }
            }
        }
        order
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn links(graph: &[&[u32]]) -> Links {
        let mut l = Links::with_capacity(graph.len());
        for targets in graph {
            l.object(targets.iter().copied());
        }
        l
    }

    /// Every object once, and every prefix of the order closed under the links: a move cut
    /// short anywhere leaves no object without what it links to.
    fn assert_children_first(graph: &[&[u32]]) -> Vec<u32> {
        let order = links(graph).children_first();
        let mut placed = vec![false; graph.len()];
        for &o in &order {
            assert!(!placed[o as usize], "{o} placed twice in {order:?}");
            for &t in graph[o as usize] {
                if (t as usize) < graph.len() && t != o {
                    assert!(placed[t as usize], "{o} placed before its link {t}: {order:?}");
                }
            }
            placed[o as usize] = true;
        }
        assert!(placed.iter().all(|p| *p), "not every object placed: {order:?}");
        order
    }

    #[test]
    fn a_commit_comes_after_its_tree_and_parent_and_a_tree_after_its_entries() {
        // 0: commit -> tree 2, parent 1; 1: commit -> tree 3; 2: tree -> 3 (subtree), 4 (blob);
        // 3: tree -> 4; 4: blob; 5: tag -> 0.
        let order = assert_children_first(&[&[2, 1], &[3], &[3, 4], &[4], &[], &[0]]);
        assert_eq!(order, vec![4, 3, 2, 1, 0, 5]);
    }

    #[test]
    fn a_long_chain_does_not_recurse_and_links_outside_are_ignored() {
        // A chain of 200,000 commits, each the parent of the one before it, listed newest
        // first; each also links to an object not in the push (number 10^9).
        let n = 200_000u32;
        let mut l = Links::with_capacity(n as usize);
        for i in 0..n {
            l.object([i + 1, 1_000_000_000].into_iter().filter(|&t| t < n || t == 1_000_000_000));
        }
        let order = l.children_first();
        assert_eq!(order.len(), n as usize);
        assert!(order.iter().rev().copied().eq(0..n), "oldest first");
    }

    #[test]
    fn a_cycle_or_a_self_link_ends_and_places_each_object_once() {
        let order = links(&[&[1], &[0], &[2]]).children_first();
        let mut sorted = order.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, vec![0, 1, 2]);
    }

    #[test]
    fn shared_objects_are_placed_once_before_everything_that_links_to_them() {
        assert_children_first(&[&[3], &[3, 2], &[3], &[], &[0, 1, 2, 3]]);
        assert!(links(&[]).children_first().is_empty());
    }
}
