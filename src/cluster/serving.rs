//! The requests this node serves from its own copies, by repository: a copy this node was
//! removed from the replicas of is deleted only while none is (`upkeep.rs`). A request holds
//! a [`Reading`] from routing until its answer (or its ssh session) ends.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// How many requests read each repository's copy here.
#[derive(Debug, Default)]
pub(super) struct Serving(Arc<Mutex<HashMap<String, usize>>>);

/// One request reading a copy: counted until dropped.
#[derive(Debug)]
pub struct Reading {
    of: Arc<Mutex<HashMap<String, usize>>>,
    name: String,
}

impl Serving {
    /// A request begins to read `name`'s copy.
    pub(super) fn begin(&self, name: &str) -> Reading {
        if let Ok(mut m) = self.0.lock() {
            *m.entry(name.to_owned()).or_default() += 1;
        }
        Reading {
            of: self.0.clone(),
            name: name.to_owned(),
        }
    }

    /// How many requests read `name`'s copy now.
    pub(super) fn count(&self, name: &str) -> usize {
        self.0
            .lock()
            .map(|m| m.get(name).copied().unwrap_or(0))
            .unwrap_or(0)
    }
}

impl Drop for Reading {
    fn drop(&mut self) {
        if let Ok(mut m) = self.of.lock()
            && let Some(n) = m.get_mut(&self.name)
        {
            *n -= 1;
            if *n == 0 {
                m.remove(&self.name);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_is_read_until_its_last_reading_is_dropped() {
        let s = Serving::default();
        assert_eq!(s.count("r"), 0);
        let a = s.begin("r");
        let b = s.begin("r");
        let other = s.begin("s");
        assert_eq!((s.count("r"), s.count("s")), (2, 1));
        drop(a);
        assert_eq!(s.count("r"), 1);
        drop(b);
        drop(other);
        assert_eq!((s.count("r"), s.count("s")), (0, 0));
        assert!(s.0.lock().unwrap().is_empty());
    }
}
