//! Keys: the server's host key (created once, then reused) and the users' public keys in
//! gitolite's keydir convention, reread whenever the directory changes.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

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

/// What the keydir looked like when it was read: each `*.pub` file with its size and mtime.
type Stamp = Vec<(PathBuf, u64, Option<SystemTime>)>;

/// The users' keys, from a keydir: `<user>.pub` / `<user>@<anything>.pub` files (in
/// subdirectories too), each with one or more OpenSSH public key lines.
pub(super) struct Keydir {
    dir: PathBuf,
    state: Mutex<(Stamp, Arc<HashMap<KeyData, String>>)>,
}

impl Keydir {
    pub(super) fn open(dir: &Path) -> Result<Self, String> {
        if !dir.is_dir() {
            return Err(format!("keydir {} is not a directory", dir.display()));
        }
        let k = Keydir {
            dir: dir.to_owned(),
            state: Mutex::new((Vec::new(), Arc::new(HashMap::new()))),
        };
        k.keys();
        Ok(k)
    }

    /// The keys as the directory holds them now: reread when any `.pub` file was added,
    /// removed or changed since the last look (a directory walk and a stat per file).
    pub(super) fn keys(&self) -> Arc<HashMap<KeyData, String>> {
        let stamp = stamp(&self.dir);
        let Ok(mut g) = self.state.lock() else {
            return Arc::new(HashMap::new());
        };
        if g.0 != stamp || (g.0.is_empty() && g.1.is_empty()) {
            let keys = Arc::new(load(&stamp));
            tracing::info!(
                target: "berth::serve",
                keydir = %self.dir.display(),
                keys = keys.len(),
                "ssh keydir loaded"
            );
            *g = (stamp, keys);
        }
        g.1.clone()
    }

    /// The user whose key this is.
    pub(super) fn user(&self, key: &PublicKey) -> Option<String> {
        self.keys().get(key.key_data()).cloned()
    }
}

fn stamp(dir: &Path) -> Stamp {
    let mut out = Vec::new();
    let mut stack = vec![(dir.to_owned(), 0)];
    while let Some((d, depth)) = stack.pop() {
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
    out.sort();
    out
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
}
