//! The files of a kept pack as git's `index-pack` leaves them: read-only (`0444` less the umask,
//! then adjusted by `core.sharedRepository`, git's `adjust_shared_perm`), and with a `.rev`
//! reverse index next to the `.idx` unless `pack.writeReverseIndex` is false
//! (gitformat-pack(5), "pack-*.rev files"); the pack made durable if `core.fsync` has `pack`,
//! its `.idx` and `.rev` if it has `pack-metadata` (both by default), before the quarantine
//! that holds them is migrated. The `.keep` is not synced (git's `write_special_file` does not).

use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::fsync::{Components, Durability};

/// `core.sharedRepository`: who besides the owner may read what the repository holds (git's
/// `git_config_perm`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SharedRepository {
    /// `umask` / false (the default): the process's umask decides.
    #[default]
    Umask,
    /// `group` / true / `all`: these permission bits are added (`0660` or `0664`, write bits
    /// only where the owner may write).
    Add(u32),
    /// An octal mode (`0640`, …): the permission bits are exactly these (write bits likewise).
    Exactly(u32),
}

/// A `core.sharedRepository` value git refuses.
#[derive(Debug, thiserror::Error)]
#[error(
    "problem with core.sharedRepository filemode value (0{0:03o}).\nThe owner of files must always have read and write permissions."
)]
pub struct BadSharedRepository(pub u32);

impl SharedRepository {
    /// git's `git_config_perm`: `value` is `None` for a key without `=` (which means `group`).
    pub fn parse(value: Option<&str>) -> Result<Self, BadSharedRepository> {
        const GROUP: SharedRepository = SharedRepository::Add(0o660);
        const EVERYBODY: SharedRepository = SharedRepository::Add(0o664);
        let Some(value) = value else {
            return Ok(GROUP);
        };
        match value {
            "umask" => return Ok(SharedRepository::Umask),
            "group" => return Ok(GROUP),
            "all" | "world" | "everybody" => return Ok(EVERYBODY),
            _ => {}
        }
        // strtol(value, &end, 8), then a boolean when anything is left.
        let trimmed = value.trim_start();
        let (negative, digits) = match trimmed.as_bytes().first() {
            Some(b'-') => (true, &trimmed[1..]),
            Some(b'+') => (false, &trimmed[1..]),
            _ => (false, trimmed),
        };
        let end = digits
            .bytes()
            .position(|b| !(b'0'..=b'7').contains(&b))
            .unwrap_or(digits.len());
        let parsed = if end == 0 {
            // No digits: strtol stops at the start, so only "" is a number (0).
            value.is_empty().then_some(0)
        } else if end == digits.len() {
            let n = i64::from_str_radix(digits, 8).unwrap_or(i64::MAX);
            Some(if negative { -n } else { n })
        } else {
            None
        };
        let Some(n) = parsed else {
            // git_config_bool: true, yes, on (any case) or a non-zero number.
            let lower = value.to_ascii_lowercase();
            let yes = matches!(lower.as_str(), "true" | "yes" | "on")
                || lower.parse::<i64>().is_ok_and(|n| n != 0);
            return Ok(if yes { GROUP } else { SharedRepository::Umask });
        };
        match n {
            0 => Ok(SharedRepository::Umask),
            1 => Ok(GROUP),
            2 => Ok(EVERYBODY),
            n => {
                let mode = (n as u32) & 0o7777;
                if mode & 0o600 != 0o600 {
                    return Err(BadSharedRepository(mode));
                }
                Ok(SharedRepository::Exactly(mode & 0o666))
            }
        }
    }

    /// git's `calc_shared_perm` for a file of mode `mode`.
    pub fn adjust(self, mode: u32) -> u32 {
        let (tweak, exact) = match self {
            SharedRepository::Umask => return mode,
            SharedRepository::Add(t) => (t, false),
            SharedRepository::Exactly(t) => (t, true),
        };
        let mut tweak = tweak;
        if mode & 0o200 == 0 {
            tweak &= !0o222;
        }
        if mode & 0o100 != 0 {
            tweak |= (tweak & 0o444) >> 2;
        }
        if exact {
            (mode & !0o777) | tweak
        } else {
            mode | tweak
        }
    }
}

impl SharedRepository {
    /// git's `adjust_shared_perm` for a directory of mode `mode`: as a file, the read bits
    /// copied to the execute bits, and set-group-id when the group gains access.
    pub fn adjust_dir(self, mode: u32) -> u32 {
        if self == SharedRepository::Umask {
            return mode;
        }
        let mut mode = self.adjust(mode);
        mode |= (mode & 0o444) >> 2;
        if mode & 0o060 != 0 {
            mode |= 0o2000;
        }
        mode
    }
}

/// What to write next to a received pack; the default is git's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// `pack.writeReverseIndex` (default true since git 2.41): write the `.rev` file.
    pub write_reverse_index: bool,
    /// `core.sharedRepository`.
    pub shared: SharedRepository,
    /// `core.fsync` and `core.fsyncMethod`, for the pack, its `.idx` and `.rev`, and loose
    /// objects.
    pub durability: Durability,
    /// `core.looseCompression`, else `core.compression`, else zlib's best speed: how loose
    /// objects are compressed.
    pub loose_compression: gix_zlib::Compression,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            write_reverse_index: true,
            shared: SharedRepository::Umask,
            durability: Durability::default(),
            loose_compression: gix_zlib::Compression::BEST_SPEED,
        }
    }
}

/// Make the pack and its index durable as `core.fsync` says, write the `.rev` of the pack whose
/// index is at `index_path` (when asked for) and make the pack's files read-only as git does.
/// Returns the `.rev`'s path if one was written.
pub fn finish(
    index_path: &Path,
    pack_path: &Path,
    index: &gix_pack::index::File,
    options: Options,
) -> io::Result<Option<PathBuf>> {
    let durability = options.durability;
    durability.sync_path(Components::PACK, pack_path)?;
    durability.sync_path(Components::PACK_METADATA, index_path)?;
    let mode = options.shared.adjust(read_only_mode(index_path.parent())?);
    let rev = if options.write_reverse_index {
        let rev_path = index_path.with_extension("rev");
        write_reverse_index(&rev_path, index, durability)?;
        Some(rev_path)
    } else {
        None
    };
    for path in [Some(pack_path), rev.as_deref(), Some(index_path)]
        .into_iter()
        .flatten()
    {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
    }
    Ok(rev)
}

/// The mode a file created read-only gets under the process's umask (`0444` less the umask),
/// found by creating one in `dir`, as git's `odb_mkstemp` creates its files.
fn read_only_mode(dir: Option<&Path>) -> io::Result<u32> {
    let dir = dir.unwrap_or(Path::new("."));
    let probe = tempfile::Builder::new()
        .prefix("tmp_mode_")
        .permissions(std::fs::Permissions::from_mode(0o444))
        .tempfile_in(dir)?;
    let mode = probe.as_file().metadata()?.permissions().mode() & 0o7777;
    Ok(mode)
}

/// The reverse index of `index`: `RIDX`, version 1, the hash id, the index position of every
/// object in pack order, the pack's checksum and the checksum of all that.
pub fn reverse_index(index: &gix_pack::index::File) -> io::Result<Vec<u8>> {
    let kind = index.object_hash();
    let mut by_offset: Vec<(u64, u32)> = index
        .iter()
        .enumerate()
        .map(|(position, entry)| (entry.pack_offset, position as u32))
        .collect();
    by_offset.sort_unstable();
    let mut out = Vec::with_capacity(12 + 4 * by_offset.len() + 2 * kind.len_in_bytes());
    out.extend_from_slice(b"RIDX");
    out.extend_from_slice(&1u32.to_be_bytes());
    let hash_id: u32 = match kind {
        gix_hash::Kind::Sha1 => 1,
        #[allow(unreachable_patterns)]
        _ => 2,
    };
    out.extend_from_slice(&hash_id.to_be_bytes());
    for (_, position) in by_offset {
        out.extend_from_slice(&position.to_be_bytes());
    }
    out.extend_from_slice(index.pack_checksum().as_bytes());
    let mut hasher = gix_hash::hasher(kind);
    hasher.update(&out);
    let checksum = hasher.try_finalize().map_err(io::Error::other)?;
    out.extend_from_slice(checksum.as_bytes());
    Ok(out)
}

fn write_reverse_index(
    path: &Path,
    index: &gix_pack::index::File,
    durability: Durability,
) -> io::Result<()> {
    let data = reverse_index(index)?;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o444)
        .open(path)?;
    file.write_all(&data)?;
    durability.sync(Components::PACK_METADATA, &file)
}

#[cfg(test)]
mod tests {
    use super::SharedRepository as S;

    #[test]
    fn shared_repository_values_as_git_config_perm() {
        assert_eq!(S::parse(None).unwrap(), S::Add(0o660));
        assert_eq!(S::parse(Some("")).unwrap(), S::Umask);
        assert_eq!(S::parse(Some("umask")).unwrap(), S::Umask);
        assert_eq!(S::parse(Some("false")).unwrap(), S::Umask);
        assert_eq!(S::parse(Some("true")).unwrap(), S::Add(0o660));
        assert_eq!(S::parse(Some("group")).unwrap(), S::Add(0o660));
        assert_eq!(S::parse(Some("1")).unwrap(), S::Add(0o660));
        assert_eq!(S::parse(Some("world")).unwrap(), S::Add(0o664));
        assert_eq!(S::parse(Some("2")).unwrap(), S::Add(0o664));
        assert_eq!(S::parse(Some("0640")).unwrap(), S::Exactly(0o640));
        assert_eq!(S::parse(Some("0777")).unwrap(), S::Exactly(0o666));
        assert!(S::parse(Some("0440")).is_err());
    }

    #[test]
    fn read_only_files_as_calc_shared_perm() {
        assert_eq!(S::Umask.adjust(0o444), 0o444);
        assert_eq!(S::Add(0o660).adjust(0o400), 0o440);
        assert_eq!(S::Add(0o664).adjust(0o444), 0o444);
        assert_eq!(S::Exactly(0o640).adjust(0o444), 0o440);
        assert_eq!(S::Exactly(0o600).adjust(0o444), 0o400);
        assert_eq!(S::Add(0o660).adjust_dir(0o755), 0o2775);
        assert_eq!(S::Exactly(0o600).adjust_dir(0o755), 0o700);
        assert_eq!(S::Umask.adjust_dir(0o755), 0o755);
    }
}
