//! The configuration receive-pack reads, resolved once per session into a [`Config`].
//!
//! Sources are git's: system, global, the repository's `config`, `GIT_CONFIG_COUNT`/`KEY_n`/`VALUE_n`
//! and `GIT_CONFIG_PARAMETERS` (what `git -c k=v receive-pack` leaves in the environment), through
//! `gix-config`. Values are parsed as git parses them (`builtin/receive-pack.c`,
//! `receive_pack_config`).

use gix_config::File;

/// What to do when a push touches the checked-out branch (`receive.denyCurrentBranch`,
/// `receive.denyDeleteCurrent`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DenyAction {
    /// Not configured: refuse, with git's long explanation.
    Unconfigured,
    /// `ignore` / false.
    Ignore,
    /// `warn`: allow with a warning.
    Warn,
    /// `refuse` / true.
    Refuse,
    /// `updateInstead`: update the worktree too.
    UpdateInstead,
}

impl DenyAction {
    fn parse(value: &str) -> Result<Self, Error> {
        Ok(match value.to_ascii_lowercase().as_str() {
            "ignore" => DenyAction::Ignore,
            "warn" => DenyAction::Warn,
            "refuse" => DenyAction::Refuse,
            "updateinstead" => DenyAction::UpdateInstead,
            other => match parse_bool(other) {
                Some(true) => DenyAction::Refuse,
                Some(false) => DenyAction::Ignore,
                None => return Err(Error::BadBool(value.to_owned())),
            },
        })
    }
}

/// How ref updates are logged (`core.logAllRefUpdates`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogRefUpdates {
    /// Log nothing (the default in a bare repository).
    Never,
    /// Log branches, remote-tracking refs, notes and HEAD (the default in a non-bare repository).
    Normal,
    /// `always`: log every ref.
    Always,
}

/// A configuration value git would die on.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A boolean key had a value git does not take as a boolean.
    #[error("bad boolean config value '{0}'")]
    BadBool(String),
    /// A numeric key had a value git does not take as a number.
    #[error("bad numeric config value '{0}'")]
    BadNumber(String),
    /// The configuration could not be read.
    #[error("unable to read configuration: {0}")]
    Read(String),
    /// `receive.fsck.<msg-id>` with a severity git does not know.
    #[error("Unknown fsck message type: '{0}'")]
    FsckSeverity(String),
    /// A `receive.fsck.*` key without a value, given with `git -c`.
    #[error("unable to parse '{0}' from command-line config")]
    MissingValueParameter(String),
    /// A `reftable.*` value out of the range git accepts.
    #[error("{0}")]
    ReftableOption(String),
    /// A `receive.fsck.*` key without a value in a configuration file.
    #[error("bad config variable '{key}' in file '{file}' at line {line}")]
    MissingValue {
        /// The key, lower case.
        key: String,
        /// The file, as git names it.
        file: String,
        /// The line it is on.
        line: usize,
    },
}

/// Everything receive-pack consults, read once when the session starts.
#[derive(Debug, Clone)]
pub struct Config {
    /// `receive.denyDeletes`
    pub deny_deletes: bool,
    /// `receive.denyNonFastForwards`
    pub deny_non_fast_forwards: bool,
    /// `receive.denyCurrentBranch`
    pub deny_current_branch: DenyAction,
    /// `receive.denyDeleteCurrent`
    pub deny_delete_current: DenyAction,
    /// `transfer.hideRefs` and `receive.hideRefs`, in the order they were met.
    pub hide_refs: Vec<String>,
    /// `receive.advertiseAtomic`
    pub advertise_atomic: bool,
    /// `receive.advertisePushOptions`
    pub advertise_push_options: bool,
    /// `transfer.advertiseSID`: advertise `session-id`.
    pub advertise_sid: bool,
    /// `receive.certNonceSeed`: enables signed pushes (`push-cert=<nonce>`).
    pub cert_nonce_seed: Option<String>,
    /// `receive.certNonceSlop`: seconds by which another request's nonce may differ.
    pub cert_nonce_slop: i64,
    /// `repack.useDeltaBaseOffset` (advertises `ofs-delta`)
    pub use_delta_base_offset: bool,
    /// `receive.maxInputSize`, 0 for no limit.
    pub max_input_size: u64,
    /// `receive.unpackLimit`, else `transfer.unpackLimit`, else 100.
    pub unpack_limit: u32,
    /// `receive.procReceiveRefs`: which commands the proc-receive hook handles.
    pub proc_receive_refs: Vec<ProcReceiveRef>,
    /// `receive.keepAlive` in seconds; 0 or less disables keepalives.
    pub keep_alive: i64,
    /// `receive.shallowUpdate`
    pub shallow_update: bool,
    /// `core.logAllRefUpdates`, resolved against bareness.
    pub log_ref_updates: LogRefUpdates,
    /// `core.bare`, if set.
    pub bare: Option<bool>,
    /// `reftable.blockSize`, `restartInterval`, `indexObjects`, `geometricFactor`,
    /// `autoCompaction`, `lockTimeout` (and `GIT_TEST_REFTABLE_AUTOCOMPACTION`, which git's own
    /// tests set), for reftable repositories.
    pub reftable: crate::reftable::WriteOptions,
    /// `berth.maxCommands`: how many commands one push may carry.
    pub max_commands: usize,
    /// `berth.maxRequestBytes`: how many bytes the command list and push options may take.
    pub max_request_bytes: u64,
    /// `berth.maxPushOptions`: how many push options one push may carry.
    pub max_push_options: usize,
    /// `receive.autogc` (and `maintenance.auto`): run `git maintenance run --auto` after a push.
    pub auto_gc: bool,
    /// `maintenance.autoDetach`, else `gc.autoDetach`: let that maintenance run in the background.
    pub auto_detach: bool,
    /// `receive.updateServerInfo`: refresh the dumb-HTTP info files after a push.
    pub update_server_info: bool,
    /// `user.name`, for the reflog identity.
    pub user_name: Option<String>,
    /// `user.email`, for the reflog identity.
    pub user_email: Option<String>,
    /// `receive.fsckObjects`, else `transfer.fsckObjects`: check incoming objects as git's
    /// `index-pack --strict` does.
    pub fsck_objects: bool,
    /// `receive.fsck.<msg-id>` and `receive.fsck.skipList`, in configuration order (unknown ids
    /// already dropped with git's warning; skip lists relative to the repository).
    pub fsck: Vec<crate::objects::fsck::Setting>,
    /// Warnings git's receive-pack prints while reading this configuration.
    pub warnings: Vec<String>,
    /// `berth.maxObjectSize`: the largest object (or delta result) the pack may inflate to;
    /// bounds memory against deflate bombs.
    pub max_object_size: u64,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            deny_deletes: false,
            deny_non_fast_forwards: false,
            deny_current_branch: DenyAction::Unconfigured,
            deny_delete_current: DenyAction::Unconfigured,
            hide_refs: Vec::new(),
            advertise_atomic: true,
            advertise_push_options: false,
            advertise_sid: false,
            cert_nonce_seed: None,
            cert_nonce_slop: 0,
            use_delta_base_offset: true,
            max_input_size: 0,
            unpack_limit: 100,
            proc_receive_refs: Vec::new(),
            keep_alive: 5,
            shallow_update: false,
            log_ref_updates: LogRefUpdates::Never,
            bare: None,
            reftable: Default::default(),
            max_commands: 4_000_000,
            max_request_bytes: 1 << 30,
            max_push_options: 10_000,
            auto_gc: true,
            auto_detach: true,
            update_server_info: false,
            user_name: None,
            user_email: None,
            fsck_objects: false,
            fsck: Vec::new(),
            warnings: Vec::new(),
            max_object_size: 1 << 30,
        }
    }
}

impl Config {
    /// Read the configuration of the repository at `git_dir` with git's precedence.
    pub fn load(git_dir: &std::path::Path) -> Result<(Self, File), Error> {
        let mut file =
            File::from_git_dir(git_dir.to_owned()).map_err(|e| Error::Read(e.to_string()))?;
        if let Ok(params) = std::env::var("GIT_CONFIG_PARAMETERS") {
            for (key, value) in parse_config_parameters(&params) {
                let lower = key.to_ascii_lowercase();
                if value.is_none() && lower.starts_with("receive.fsck.") {
                    eprintln!("error: missing value for '{lower}'");
                    return Err(Error::MissingValueParameter(lower));
                }
                let _ = file.set_raw_value(key.as_str(), value.as_deref().unwrap_or("true"));
            }
        }
        let config = match Self::from_file(&file) {
            Err(Error::MissingValue { key, .. }) => {
                eprintln!("error: missing value for '{key}'");
                let (file, line) = config_line(&git_dir.join("config"), &key)
                    .map(|l| ("config".to_owned(), l))
                    .unwrap_or_else(|| ("config".to_owned(), 0));
                return Err(Error::MissingValue { key, file, line });
            }
            other => other?,
        };
        for w in &config.warnings {
            eprintln!("warning: {w}");
        }
        let mut config = config;
        for s in &mut config.fsck {
            if let crate::objects::fsck::Setting::SkipList { path, .. } = s {
                *path = git_dir.join(expand_home(path));
            }
        }
        Ok((config, file))
    }

    /// Interpret an already-loaded configuration.
    pub fn from_file(file: &File) -> Result<Self, Error> {
        let mut c = Config::default();
        let s = |key: &str| file.string(key).map(|v| v.to_string());
        let b = |key: &str, default: bool| -> Result<bool, Error> {
            match s(key) {
                None => Ok(default),
                Some(v) if v.is_empty() && file.raw_value(key).is_ok() => Ok(true),
                Some(v) => parse_bool(&v).ok_or(Error::BadBool(v)),
            }
        };
        let n = |key: &str, default: i64| -> Result<i64, Error> {
            match s(key) {
                None => Ok(default),
                Some(v) => parse_int(&v).ok_or(Error::BadNumber(v)),
            }
        };
        c.deny_deletes = b("receive.denyDeletes", false)?;
        c.deny_non_fast_forwards = b("receive.denyNonFastForwards", false)?;
        if let Some(v) = s("receive.denyCurrentBranch") {
            c.deny_current_branch = DenyAction::parse(&v)?;
        }
        if let Some(v) = s("receive.denyDeleteCurrent") {
            c.deny_delete_current = DenyAction::parse(&v)?;
        }
        for section in file.sections() {
            let name = section.header().name();
            let ours =
                name.eq_ignore_ascii_case(b"receive") || name.eq_ignore_ascii_case(b"transfer");
            if !ours || section.header().subsection_name().is_some() {
                continue;
            }
            for value in section.values("hideRefs") {
                let mut v = value.to_string();
                while v.len() > 1 && v.ends_with('/') {
                    v.pop();
                }
                c.hide_refs.push(v);
            }
        }
        c.advertise_atomic = b("receive.advertiseAtomic", true)?;
        c.advertise_push_options = b("receive.advertisePushOptions", false)?;
        c.advertise_sid = b("transfer.advertiseSID", false)?;
        c.cert_nonce_seed = s("receive.certNonceSeed");
        c.cert_nonce_slop = n("receive.certNonceSlop", 0)?;
        c.use_delta_base_offset = b("repack.useDeltaBaseOffset", true)?;
        c.max_input_size = n("receive.maxInputSize", 0)?.max(0) as u64;
        c.unpack_limit = n("receive.unpackLimit", n("transfer.unpackLimit", 100)?)?
            .clamp(0, u32::MAX as i64) as u32;
        c.proc_receive_refs = file
            .strings("receive.procReceiveRefs")
            .unwrap_or_default()
            .iter()
            .map(|v| ProcReceiveRef::parse(&v.to_string()))
            .collect();
        c.keep_alive = n("receive.keepAlive", 5)?;
        c.shallow_update = b("receive.shallowUpdate", false)?;
        c.bare = match s("core.bare") {
            None => None,
            Some(v) => Some(parse_bool(&v).ok_or(Error::BadBool(v))?),
        };
        let bare = c.bare.unwrap_or(false);
        c.log_ref_updates = match s("core.logAllRefUpdates") {
            None if bare => LogRefUpdates::Never,
            None => LogRefUpdates::Normal,
            Some(v) if v.eq_ignore_ascii_case("always") => LogRefUpdates::Always,
            Some(v) => match parse_bool(&v) {
                Some(true) => LogRefUpdates::Normal,
                Some(false) => LogRefUpdates::Never,
                None => return Err(Error::BadBool(v)),
            },
        };
        let rt = &mut c.reftable;
        let block_size = n("reftable.blockSize", rt.block_size.into())?;
        if !(0..=16_777_215).contains(&block_size) {
            return Err(Error::ReftableOption(
                "reftable block size cannot exceed 16MB".into(),
            ));
        }
        if block_size > 0 {
            rt.block_size = block_size as u32;
        }
        let restart_interval = n("reftable.restartInterval", rt.restart_interval.into())?;
        if !(0..=i64::from(u16::MAX)).contains(&restart_interval) {
            return Err(Error::ReftableOption(format!(
                "reftable block size cannot exceed {}",
                u16::MAX
            )));
        }
        if restart_interval > 0 {
            rt.restart_interval = restart_interval as u16;
        }
        rt.index_objects = b("reftable.indexObjects", true)?;
        rt.geometric_factor = n("reftable.geometricFactor", 2)?.clamp(0, 255) as u8;
        rt.lock_timeout_ms = n("reftable.lockTimeout", 100)?;
        rt.disable_auto_compact = !b("reftable.autoCompaction", true)?
            || std::env::var("GIT_TEST_REFTABLE_AUTOCOMPACTION")
                .ok()
                .and_then(|v| parse_bool(&v))
                == Some(false);
        c.max_commands = n("berth.maxCommands", c.max_commands as i64)?.max(1) as usize;
        c.max_request_bytes = n("berth.maxRequestBytes", c.max_request_bytes as i64)?.max(1) as u64;
        c.max_push_options = n("berth.maxPushOptions", c.max_push_options as i64)?.max(0) as usize;
        c.auto_gc = b("receive.autogc", true)? && b("maintenance.auto", true)?;
        c.auto_detach = match s("maintenance.autoDetach") {
            Some(_) => b("maintenance.autoDetach", true)?,
            None => b("gc.autoDetach", true)?,
        };
        c.update_server_info = b("receive.updateServerInfo", false)?;
        c.user_name = s("user.name");
        c.user_email = s("user.email");
        c.fsck_objects = match s("receive.fsckObjects") {
            Some(_) => b("receive.fsckObjects", false)?,
            None => b("transfer.fsckObjects", false)?,
        };
        read_fsck_settings(file, &mut c)?;
        c.max_object_size = n("berth.maxObjectSize", c.max_object_size as i64)?.max(1) as u64;
        Ok(c)
    }
}

/// `receive.fsck.*` as git's `receive_pack_config` reads it: `skipList` is a path, any other key
/// a message id whose value must be `error`, `warn` or `ignore` (an unknown id is skipped with
/// a warning; an unknown severity is fatal; a missing value is fatal).
fn read_fsck_settings(file: &File, c: &mut Config) -> Result<(), Error> {
    let Some(sections) = file.sections_by_name("receive") else {
        return Ok(());
    };
    for section in sections {
        if section.header().subsection_name().map(|n| n.as_ref()) != Some(&b"fsck"[..]) {
            continue;
        }
        let body = section.body();
        let mut seen: Vec<String> = Vec::new();
        for name in body.value_names() {
            let lower = name.to_ascii_lowercase();
            let nth = seen.iter().filter(|s| **s == lower).count();
            seen.push(lower.clone());
            let values = body.values(&name);
            let key = format!("receive.fsck.{lower}");
            let Some(value) = values.get(nth) else {
                return Err(Error::MissingValue {
                    key,
                    file: String::new(),
                    line: 0,
                });
            };
            let value = value.to_string();
            if lower == "skiplist" {
                c.fsck.push(crate::objects::fsck::Setting::SkipList {
                    path: std::path::PathBuf::from(&value),
                    configured: value,
                });
                continue;
            }
            if crate::objects::fsck::Msg::parse(&lower).is_none() {
                c.warnings
                    .push(format!("skipping unknown msg id '{lower}'"));
                continue;
            }
            if crate::objects::fsck::parse_severity(&value).is_none() {
                return Err(Error::FsckSeverity(value));
            }
            c.fsck.push(crate::objects::fsck::Setting::Severity {
                id: lower,
                severity: value,
            });
        }
    }
    Ok(())
}

/// The line of `path` that sets `key` (`section.subsection.name`) without a value, for git's
/// "bad config variable" message.
fn config_line(path: &std::path::Path, key: &str) -> Option<usize> {
    let text = std::fs::read_to_string(path).ok()?;
    let name = key.rsplit('.').next()?;
    text.lines()
        .position(|l| l.trim().eq_ignore_ascii_case(name))
        .map(|i| i + 1)
}

/// git's `git_config_pathname`: a leading `~/` is the home directory.
fn expand_home(p: &std::path::Path) -> std::path::PathBuf {
    match (p.strip_prefix("~"), std::env::var_os("HOME")) {
        (Ok(rest), Some(home)) => std::path::PathBuf::from(home).join(rest),
        _ => p.to_owned(),
    }
}

/// One `receive.procReceiveRefs` value: `[<modifiers>:]<prefix>`, modifiers `a` (create), `d`
/// (delete), `m` (modify) and `!` (refs not under the prefix); no modifiers means `adm`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcReceiveRef {
    /// The ref prefix, without trailing `/`.
    pub prefix: String,
    /// Matches creations.
    pub add: bool,
    /// Matches deletions.
    pub delete: bool,
    /// Matches updates.
    pub modify: bool,
    /// Matches refs *not* under the prefix.
    pub negative: bool,
}

impl ProcReceiveRef {
    fn parse(value: &str) -> Self {
        let (mods, prefix) = match value.split_once(':') {
            Some((mods, prefix)) => (Some(mods), prefix),
            None => (None, value),
        };
        let has = |c: char| mods.is_none_or(|m| m.contains(c));
        ProcReceiveRef {
            prefix: prefix.trim_end_matches('/').to_owned(),
            add: has('a'),
            delete: has('d'),
            modify: has('m'),
            negative: mods.is_some_and(|m| m.contains('!')),
        }
    }

    /// Whether a command `old → new` on `name` is selected (git's `proc_receive_ref_matches`
    /// applied over all values).
    pub fn selects(refs: &[ProcReceiveRef], name: &[u8], old_null: bool, new_null: bool) -> bool {
        for p in refs {
            if (!p.add && old_null)
                || (!p.delete && new_null)
                || (!p.modify && !old_null && !new_null)
            {
                continue;
            }
            let under = name
                .strip_prefix(p.prefix.as_bytes())
                .is_some_and(|rest| rest.is_empty() || rest[0] == b'/');
            if under != p.negative {
                return true;
            }
        }
        false
    }
}

/// git's boolean syntax.
pub fn parse_bool(v: &str) -> Option<bool> {
    match v.to_ascii_lowercase().as_str() {
        "true" | "yes" | "on" | "" => Some(true),
        "false" | "no" | "off" => Some(false),
        other => parse_int(other).map(|n| n != 0),
    }
}

/// git's integer syntax, with the `k`, `m`, `g` suffixes.
pub fn parse_int(v: &str) -> Option<i64> {
    let v = v.trim();
    let (digits, factor) = match v.chars().last()?.to_ascii_lowercase() {
        'k' => (&v[..v.len() - 1], 1i64 << 10),
        'm' => (&v[..v.len() - 1], 1 << 20),
        'g' => (&v[..v.len() - 1], 1 << 30),
        _ => (v, 1),
    };
    digits.parse::<i64>().ok()?.checked_mul(factor)
}

/// Parse `GIT_CONFIG_PARAMETERS`: single-quoted `'key'='value'` (or old-style `'key=value'`)
/// entries separated by spaces. A key without `=` has no value.
pub fn parse_config_parameters(s: &str) -> Vec<(String, Option<String>)> {
    fn quoted(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) -> Option<String> {
        // git's sq_quote: 'a'\''b' is a'b.
        let mut out = String::new();
        loop {
            if chars.next_if_eq(&'\'').is_none() {
                return if out.is_empty() { None } else { Some(out) };
            }
            for c in chars.by_ref() {
                if c == '\'' {
                    break;
                }
                out.push(c);
            }
            if chars.peek() == Some(&'\\') {
                chars.next();
                if let Some(c) = chars.next() {
                    out.push(c);
                }
            } else {
                return Some(out);
            }
        }
    }
    let mut out = Vec::new();
    let mut chars = s.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let Some(first) = quoted(&mut chars) else {
            break;
        };
        if chars.next_if_eq(&'=').is_some() {
            // `'key'=` without a quoted value is git's encoding of a key without a value.
            let value = quoted(&mut chars);
            out.push((first, value));
        } else if let Some((k, v)) = first.split_once('=') {
            out.push((k.to_owned(), Some(v.to_owned())));
        } else {
            out.push((first, None));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_parameters() {
        assert_eq!(
            parse_config_parameters("'receive.denydeletes'='false' 'a.b=c' 'x.y' 'q.r'='it'\\''s'"),
            vec![
                ("receive.denydeletes".into(), Some("false".into())),
                ("a.b".into(), Some("c".into())),
                ("x.y".into(), None),
                ("q.r".into(), Some("it's".into())),
            ]
        );
        // git master writes a key given without a value as `'key'=`.
        assert_eq!(
            parse_config_parameters("'receive.fsck.skiplist'= 'a.b'=''"),
            vec![
                ("receive.fsck.skiplist".into(), None),
                ("a.b".into(), Some(String::new()))
            ]
        );
    }

    #[test]
    fn values() {
        assert_eq!(parse_int("1k"), Some(1024));
        assert_eq!(parse_bool("On"), Some(true));
        assert_eq!(
            DenyAction::parse("updateInstead").unwrap(),
            DenyAction::UpdateInstead
        );
        assert_eq!(DenyAction::parse("false").unwrap(), DenyAction::Ignore);
        let file =
            File::try_from("[receive]\n\thideRefs = refs/a/\n[transfer]\n\thideRefs = !refs/a/b\n")
                .unwrap();
        let c = Config::from_file(&file).unwrap();
        assert_eq!(
            c.hide_refs,
            vec!["refs/a".to_string(), "!refs/a/b".to_string()]
        );
    }
}
