//! Keys: the server's host key (created once, then reused) and the users' public keys in
//! gitolite's keydir convention, indexed by key and reindexed when the directory changes.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use russh::keys::ssh_key::public::KeyData;
use russh::keys::{PrivateKey, PublicKey};

/// The host key at `path`, or a new ed25519 key written there (mode 0600) when the file does
/// not exist. The bool says whether it was created.
pub(super) fn host_key(path: &Path) -> Result<(PrivateKey, bool), String> {
    match std::fs::read(path) {
        Ok(pem) => {
            let key = PrivateKey::from_openssh(&pem)
                .map_err(|e| format!("cannot read host key {}: {e}", path.display()))?;
            if key.is_encrypted() {
                return Err(format!(
                    "host key {} is encrypted with a passphrase; berth needs an unencrypted key",
                    path.display()
                ));
            }
            Ok((key, false))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let key = new_ed25519()
                .map_err(|e| format!("cannot make a host key for {}: {e}", path.display()))?;
            write_private(path, &key)
                .map_err(|e| format!("cannot write host key {}: {e}", path.display()))?;
            Ok((key, true))
        }
        Err(e) => Err(format!("cannot read host key {}: {e}", path.display())),
    }
}

fn new_ed25519() -> std::io::Result<PrivateKey> {
    use std::io::Read;
    let mut seed = [0u8; 32];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut seed)?;
    let pair = russh::keys::ssh_key::private::Ed25519Keypair::from_seed(&seed);
    let mut key = PrivateKey::from(pair);
    key.set_comment("berth serve host key");
    Ok(key)
}

/// Write the key with mode 0600 from the start, through a temporary file renamed into place, so
/// a concurrent start never reads half a key.
fn write_private(path: &Path, key: &PrivateKey) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let pem = key
        .to_openssh(russh::keys::ssh_key::LineEnding::LF)
        .map_err(std::io::Error::other)?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".tmp{}", std::process::id()));
    let tmp = PathBuf::from(tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(pem.as_bytes())?;
    f.sync_all()?;
    drop(f);
    // Never replace a key another process wrote meanwhile.
    match std::fs::hard_link(&tmp, path) {
        Ok(()) => std::fs::remove_file(&tmp),
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        }
    }
}

/// The `known_hosts` line for `key` served on `addr`: `[ip]:port key-type base64`.
pub(super) fn known_hosts_line(addr: std::net::SocketAddr, key: &PublicKey) -> String {
    let mut pk = key.clone();
    pk.set_comment("");
    let text = pk.to_openssh().unwrap_or_default();
    let host = match (addr.ip(), addr.port()) {
        (ip, 22) => ip.to_string(),
        (ip, port) => format!("[{ip}]:{port}"),
    };
    format!("{host} {}", text.trim())
}

/// The user a keydir file name names, as gitolite: `alice.pub` and `alice@laptop.pub` are
/// `alice`; `alice@example.com.pub` (a dot after the `@`) is `alice@example.com`. `None` for
/// a name gitolite would not accept.
pub(super) fn user_of(file_name: &str) -> Option<String> {
    let stem = file_name.strip_suffix(".pub")?;
    let user = match stem.rsplit_once('@') {
        Some((u, host)) if !host.contains('.') => u,
        _ => stem,
    };
    valid_user(user).then(|| user.to_owned())
}

/// Whether `user` is a user name gitolite would accept (and so one a keydir can name).
pub(super) fn valid_user(user: &str) -> bool {
    let mut chars = user.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphanumeric())
        && user.len() <= 256
        && chars.all(|c| c.is_ascii_alphanumeric() || "-._@+".contains(c))
}

/// Every `*.pub` file of the keydir with its size and mtime, in path order.
type Stamp = Vec<(PathBuf, u64, Option<SystemTime>)>;

/// What a directory looked like: an entry added, removed or renamed changes its times.
#[derive(Debug, Clone, PartialEq, Eq)]
struct DirStamp {
    modified: Option<SystemTime>,
    changed: (i64, i64),
    inode: (u64, u64),
}

impl DirStamp {
    fn of(dir: &Path) -> Option<DirStamp> {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(dir).ok()?;
        Some(DirStamp {
            modified: m.modified().ok(),
            changed: (m.ctime(), m.ctime_nsec()),
            inode: (m.dev(), m.ino()),
        })
    }
}

/// How often the whole keydir is walked for what no directory's times show (a key file
/// rewritten in place), on a thread of its own.
const RESCAN: Duration = Duration::from_secs(5);

/// The most directories a key lookup stats to see whether the keydir changed; a keydir with
/// more subdirectories relies on the rescan alone.
const MAX_WATCHED_DIRS: usize = 64;

/// The keys, indexed, and what the keydir looked like when they were read.
struct Index {
    keys: Arc<HashMap<KeyData, String>>,
    /// Each directory read, stamped before it was read.
    dirs: Vec<(PathBuf, Option<DirStamp>)>,
    files: Stamp,
}

impl Index {
    /// Whether a watched directory changed since (a stat per directory, at most
    /// [`MAX_WATCHED_DIRS`]).
    fn dirs_changed(&self) -> bool {
        self.dirs.len() <= MAX_WATCHED_DIRS
            && self.dirs.iter().any(|(d, st)| DirStamp::of(d) != *st)
    }
}

/// Why the keydir is being walked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Walk {
    /// A lookup saw a directory change.
    DirChanged,
    /// The periodic rescan.
    Rescan,
}

/// The users' keys, from a keydir: `<user>.pub` / `<user>@<anything>.pub` files (in
/// subdirectories too), each with one or more OpenSSH public key lines. A lookup is one hash
/// lookup whatever the keydir's size: the index is rebuilt when a directory of the keydir
/// changes (a stat per directory at each lookup, the walk on a blocking thread) and when the
/// rescan every [`RESCAN`] finds a file changed.
pub(super) struct Keydir {
    dir: PathBuf,
    index: Mutex<Arc<Index>>,
    /// Held while walking, so that one walk runs at a time.
    walking: Mutex<()>,
}

impl Keydir {
    pub(super) fn open(dir: &Path) -> Result<Arc<Self>, String> {
        if !dir.is_dir() {
            return Err(format!("keydir {} is not a directory", dir.display()));
        }
        let (dirs, files) = walk(dir);
        let keys = Arc::new(load(&files));
        tracing::info!(target: "berth::serve", keydir = %dir.display(), keys = keys.len(), "ssh keydir loaded");
        let k = Arc::new(Keydir {
            dir: dir.to_owned(),
            index: Mutex::new(Arc::new(Index { keys, dirs, files })),
            walking: Mutex::new(()),
        });
        let weak = Arc::downgrade(&k);
        std::thread::Builder::new()
            .name("berth-keydir".into())
            .spawn(move || {
                loop {
                    std::thread::sleep(RESCAN);
                    match weak.upgrade() {
                        Some(k) => k.refresh(Walk::Rescan),
                        None => return,
                    }
                }
            })
            .map_err(|e| format!("cannot start the keydir rescan: {e}"))?;
        Ok(k)
    }

    fn current(&self) -> Arc<Index> {
        self.index.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Walk the keydir (blocking) and rebuild the index if a key file changed.
    fn refresh(&self, why: Walk) {
        let _one = self.walking.lock().unwrap_or_else(|e| e.into_inner());
        let before = self.current();
        if why == Walk::DirChanged && !before.dirs_changed() {
            // Another lookup's walk saw the change first.
            return;
        }
        let (dirs, files) = walk(&self.dir);
        let keys = if files == before.files {
            before.keys.clone()
        } else {
            let keys = Arc::new(load(&files));
            tracing::info!(target: "berth::serve", keydir = %self.dir.display(), keys = keys.len(), "ssh keydir loaded");
            keys
        };
        *self.index.lock().unwrap_or_else(|e| e.into_inner()) =
            Arc::new(Index { keys, dirs, files });
    }

    /// The user whose key this is.
    pub(super) async fn user(self: &Arc<Self>, key: &PublicKey) -> Option<String> {
        if self.current().dirs_changed() {
            let me = self.clone();
            let _ = tokio::task::spawn_blocking(move || me.refresh(Walk::DirChanged)).await;
        }
        self.current().keys.get(key.key_data()).cloned()
    }
}

/// The keydir's directories (each stamped before it is read) and its `.pub` files.
fn walk(dir: &Path) -> (Vec<(PathBuf, Option<DirStamp>)>, Stamp) {
    let mut dirs = Vec::new();
    let mut out = Vec::new();
    let mut stack = vec![(dir.to_owned(), 0)];
    while let Some((d, depth)) = stack.pop() {
        dirs.push((d.clone(), DirStamp::of(&d)));
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let p = e.path();
            let Ok(md) = std::fs::metadata(&p) else {
                continue;
            };
            if md.is_dir() {
                if depth < 8 && !e.file_name().to_string_lossy().starts_with('.') {
                    stack.push((p, depth + 1));
                }
            } else if md.is_file() && p.extension().is_some_and(|x| x == "pub") {
                out.push((p, md.len(), md.modified().ok()));
            }
        }
    }
    dirs.sort_by(|a, b| a.0.cmp(&b.0));
    out.sort();
    (dirs, out)
}

fn load(stamp: &Stamp) -> HashMap<KeyData, String> {
    let mut keys = HashMap::new();
    for (path, _, _) in stamp {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let Some(user) = user_of(name) else {
            tracing::warn!(target: "berth::serve", file = %path.display(), "keydir: not a valid user name; file skipped");
            continue;
        };
        let Ok(text) = std::fs::read_to_string(path) else {
            continue;
        };
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            match PublicKey::from_openssh(line) {
                Ok(k) => {
                    let data = k.key_data().clone();
                    match keys.get(&data) {
                        Some(other) if other != &user => tracing::warn!(
                            target: "berth::serve",
                            file = %path.display(),
                            line = i + 1,
                            user = %other,
                            "keydir: key already belongs to another user; ignored here"
                        ),
                        _ => {
                            keys.insert(data, user.clone());
                        }
                    }
                }
                Err(e) => tracing::warn!(
                    target: "berth::serve",
                    file = %path.display(),
                    line = i + 1,
                    error = %e,
                    "keydir: not an OpenSSH public key line; skipped"
                ),
            }
        }
    }
    keys
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gitolite_names() {
        assert_eq!(user_of("alice.pub").as_deref(), Some("alice"));
        assert_eq!(user_of("alice@laptop.pub").as_deref(), Some("alice"));
        assert_eq!(
            user_of("alice@example.com.pub").as_deref(),
            Some("alice@example.com")
        );
        assert_eq!(user_of("alice.txt"), None);
        assert_eq!(user_of("-x.pub"), None);
        assert_eq!(user_of("a b.pub"), None);
    }

    fn key_line(seed: u8) -> String {
        let pair = russh::keys::ssh_key::private::Ed25519Keypair::from_seed(&[seed; 32]);
        PublicKey::from(pair.public).to_openssh().unwrap()
    }

    #[test]
    fn the_index_follows_directory_changes_and_the_rescan_sees_files_rewritten_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let key = |seed| PublicKey::from_openssh(&key_line(seed)).unwrap();
        std::fs::write(dir.path().join("alice.pub"), key_line(1)).unwrap();
        let k = Keydir::open(dir.path()).unwrap();
        let user = |seed| k.current().keys.get(key(seed).key_data()).cloned();
        assert_eq!(user(1).as_deref(), Some("alice"));
        assert!(!k.current().dirs_changed());
        // A new file in a new subdirectory: the top directory changed.
        std::fs::create_dir(dir.path().join("team")).unwrap();
        std::fs::write(dir.path().join("team/bob.pub"), key_line(2)).unwrap();
        assert!(k.current().dirs_changed());
        k.refresh(Walk::DirChanged);
        assert!(!k.current().dirs_changed());
        assert_eq!(user(2).as_deref(), Some("bob"));
        // Removed from the subdirectory: that directory changed.
        std::fs::remove_file(dir.path().join("team/bob.pub")).unwrap();
        assert!(k.current().dirs_changed());
        k.refresh(Walk::DirChanged);
        assert_eq!(user(2), None);
        // Rewritten in place: no directory changed; the rescan finds it.
        std::fs::write(dir.path().join("alice.pub"), "# revoked\n").unwrap();
        assert!(!k.current().dirs_changed());
        k.refresh(Walk::Rescan);
        assert_eq!(user(1), None);
    }
}
