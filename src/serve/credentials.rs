//! The credentials file (`--credentials`, lines from `berth passwd USER`): parsed into users and
//! their argon2 hashes, checked against, and reread when the file changes (as the access rules
//! are): a changed password or a removed user takes effect on the next request; a file that no
//! longer parses keeps the last good credentials, with an error in the log.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use super::Error;
use crate::escape::Escaped;

/// The users allowed to push and their argon2 hashes.
pub(super) struct Credentials {
    users: HashMap<String, Arc<str>>,
    /// Verified against for unknown users, so both cases take the same time.
    dummy: Arc<str>,
}

impl Credentials {
    fn parse(path: &Path, text: &str, dummy: Arc<str>) -> Result<Self, Error> {
        let mut users = HashMap::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let bad = || Error::CredentialsLine {
                path: path.to_owned(),
                line: i + 1,
            };
            let (user, hash) = line.split_once(':').ok_or_else(bad)?;
            if user.is_empty()
                || argon2::password_hash::phc::PasswordHash::new(hash).is_err()
                || !hash.starts_with("$argon2")
            {
                return Err(bad());
            }
            users.insert(user.to_owned(), Arc::from(hash));
        }
        Ok(Credentials { users, dummy })
    }

    /// `user`'s stored hash: what a cached verification was made against.
    pub(super) fn hash_of(&self, user: &str) -> Option<&Arc<str>> {
        self.users.get(user)
    }

    /// Whether `password` is `user`'s (blocking: argon2 is deliberately slow). `memory` is the
    /// caller's argon2 working memory, grown to the hash's `m` parameter and kept for the next
    /// check: the allocator does not get to fragment ~19 MiB per check (it did, to gigabytes).
    pub(super) fn verify(
        &self,
        user: &str,
        password: &str,
        memory: &mut Vec<argon2::Block>,
    ) -> bool {
        let (hash, known) = match self.users.get(user) {
            Some(h) => (&**h, true),
            None => (&*self.dummy, false),
        };
        verify_hash(hash, password, memory) && known
    }
}

/// What the file looked like when read: a rewrite in place or a rename over it changes one of
/// these.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stamp {
    modified: Option<SystemTime>,
    changed: (i64, i64),
    len: u64,
    inode: (u64, u64),
}

impl Stamp {
    fn of(path: &Path) -> Option<Stamp> {
        let m = std::fs::metadata(path).ok()?;
        Some(Stamp {
            modified: m.modified().ok(),
            changed: (m.ctime(), m.ctime_nsec()),
            len: m.len(),
            inode: (m.dev(), m.ino()),
        })
    }
}

/// The credentials file and the credentials last read from it.
pub(super) struct CredentialsFile {
    path: PathBuf,
    dummy: Arc<str>,
    state: Mutex<(Option<Stamp>, Arc<Credentials>)>,
}

impl CredentialsFile {
    /// Read `path`; an error here stops the server from starting.
    pub(super) fn load(path: &Path) -> Result<Self, Error> {
        let dummy: Arc<str> = Arc::from(super::auth::hash_password("not a password")?);
        let (stamp, creds) = read(path, dummy.clone())?;
        Ok(CredentialsFile {
            path: path.to_owned(),
            dummy,
            state: Mutex::new((stamp, Arc::new(creds))),
        })
    }

    /// The credentials as of now: reread when the file changed (a stat per call). A file that
    /// no longer loads keeps the last good credentials, with an error logged once per change.
    pub(super) fn current(&self) -> Arc<Credentials> {
        let now = Stamp::of(&self.path);
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if now.is_some() && now != state.0 {
            match read(&self.path, self.dummy.clone()) {
                Ok((stamp, creds)) => {
                    tracing::info!(
                        target: "berth::serve",
                        file = %self.path.display(),
                        users = creds.users.len(),
                        "credentials reloaded"
                    );
                    *state = (stamp, Arc::new(creds));
                }
                Err(e) => {
                    tracing::error!(
                        target: "berth::serve",
                        error = %Escaped::text(&e.to_string()),
                        "credentials not reloaded; keeping the previous ones"
                    );
                    state.0 = now;
                }
            }
        }
        state.1.clone()
    }
}

fn read(path: &Path, dummy: Arc<str>) -> Result<(Option<Stamp>, Credentials), Error> {
    // The stamp first: a change while reading is seen by the next call.
    let stamp = Stamp::of(path);
    let text = std::fs::read_to_string(path).map_err(|source| Error::CredentialsFile {
        path: path.to_owned(),
        source,
    })?;
    Ok((stamp, Credentials::parse(path, &text, dummy)?))
}

/// The most argon2 memory a stored hash may ask for (1 GiB), so a credentials line cannot make
/// every check allocate without bound.
const MAX_ARGON2_BLOCKS: usize = 1 << 20;

fn verify_hash(hash: &str, password: &str, memory: &mut Vec<argon2::Block>) -> bool {
    use argon2::password_hash::phc::PasswordHash;
    let Ok(phc) = PasswordHash::new(hash) else {
        return false;
    };
    let (Some(salt), Some(expected)) = (&phc.salt, &phc.hash) else {
        return false;
    };
    let Ok(params) = argon2::Params::try_from(&phc) else {
        return false;
    };
    let Ok(algorithm) = argon2::Algorithm::try_from(phc.algorithm.as_str()) else {
        return false;
    };
    let version = match phc.version.map(argon2::Version::try_from).transpose() {
        Ok(v) => v.unwrap_or_default(),
        Err(_) => return false,
    };
    let blocks = params.block_count();
    if blocks > MAX_ARGON2_BLOCKS {
        return false;
    }
    if memory.len() < blocks {
        memory.resize_with(blocks, argon2::Block::default);
    }
    let expected: &[u8] = expected.as_ref();
    let mut out = vec![0u8; expected.len()];
    let ok = argon2::Argon2::new(algorithm, version, params)
        .hash_password_into_with_memory(
            password.as_bytes(),
            salt.as_ref(),
            &mut out,
            &mut memory[..blocks],
        )
        .is_ok();
    // Constant time in the output's length.
    ok && out.iter().zip(expected).fold(0u8, |d, (a, b)| d | (a ^ b)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reloads_on_change_and_keeps_the_last_good_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("creds");
        let line =
            |u: &str, p: &str| format!("{u}:{}\n", super::super::auth::hash_password(p).unwrap());
        std::fs::write(&path, line("alice", "old")).unwrap();
        let f = CredentialsFile::load(&path).unwrap();
        let mut mem = Vec::new();
        assert!(f.current().verify("alice", "old", &mut mem));
        std::fs::write(&path, line("alice", "new") + &line("bob", "b")).unwrap();
        let now = f.current();
        assert!(!now.verify("alice", "old", &mut mem));
        assert!(now.verify("alice", "new", &mut mem));
        assert!(now.verify("bob", "b", &mut mem));
        std::fs::write(&path, "alice:garbage\n").unwrap();
        assert!(
            f.current().verify("alice", "new", &mut mem),
            "last good kept"
        );
        assert!(
            CredentialsFile::load(&path).is_err(),
            "but a start refuses it"
        );
    }
}
