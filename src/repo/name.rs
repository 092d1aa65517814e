//! The repository a request names, decided once: [`Name`].
//!
//! A server request names a repository as a URL path (smart HTTP, percent-encoded) or as an
//! argument of the remote command (ssh, literal). Either is decoded exactly once, checked
//! against the name rule, and becomes a [`Name`]; the access rules, repository creation, the
//! filesystem and the logs all take that value, never the text it came from. So
//! `te%61m/app.git` and `team/app.git` are one name, judged once, opened once.
//!
//! **The name rule:** at most [`MAX_LEN`] bytes of `/`-separated segments, each non-empty, of
//! ASCII letters, digits, `.`, `_` and `-`, not starting with `.` or `-`. So no `%`, newline,
//! escape sequence, space, option-like `-x` or hidden `.x` segment ever reaches a file name, a
//! git command line or a log line, and a name's text is its own canonical spelling: decoding it
//! again changes nothing.
//!
//! **Spellings of one repository:** `team/app` and `team/app.git` name the same repository, whose
//! [`key`](Name::key) (the name without one trailing `.git`) is what the access rules and the
//! cluster know it by, as gitolite does. [`Name::candidates`] are the directories such a name
//! may be opened at (git's `enter_repo` order), each with that same key: `team/app.git` does not
//! fall back to `team/app.git.git`, which is another repository (key `team/app.git`).

use std::fmt;
use std::path::{Path, PathBuf};

/// The longest repository name (decoded), in bytes.
pub const MAX_LEN: usize = 255;

/// The name rule, as a refusal tells it to the client.
pub const RULE: &str = "a repository name is at most 255 bytes of '/'-separated segments of \
                        ASCII letters, digits, '.', '_' and '-', none empty and none starting \
                        with '.' or '-'";

/// Why a request's repository path is not a repository name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    /// A `%` escape that decodes to bytes that are not UTF-8.
    #[error("bad escape or not UTF-8")]
    NotUtf8,
    /// Nothing at all.
    #[error("empty")]
    Empty,
    /// Longer than [`MAX_LEN`] bytes once decoded.
    #[error("longer than 255 bytes")]
    TooLong,
    /// A leading `/`, a trailing `/` or `//`.
    #[error("absolute or empty segment")]
    EmptySegment,
    /// A `.` or `..` segment.
    #[error("'.' or '..' segment")]
    DotSegment,
    /// A segment starting with `.` or `-`.
    #[error("a segment starts with '.' or '-'")]
    HiddenOrOption,
    /// A byte outside the name rule's alphabet (a `%` that is not an escape included).
    #[error("only letters, digits, '.', '_' and '-' in a segment")]
    Character,
}

/// A repository name: decoded, validated, canonical (see the module header).
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Name(String);

impl Name {
    /// The name `decoded` (already free of any transport encoding: an ssh argument), if it
    /// follows the name rule.
    pub fn new(decoded: &str) -> Result<Self, NameError> {
        check(decoded)?;
        Ok(Name(decoded.to_owned()))
    }

    /// The name a URL path's repository part spells (`%XX` escapes decoded once, as the URL
    /// standard has it; `+` is no space in a path).
    pub fn from_url_path(encoded: &str) -> Result<Self, NameError> {
        let decoded = percent_encoding::percent_decode_str(encoded)
            .decode_utf8()
            .map_err(|_| NameError::NotUtf8)?;
        Self::new(&decoded)
    }

    /// The name an ssh client's path argument spells: `ssh://host/repo.git` sends `/repo.git`,
    /// `host:repo.git` sends `repo.git`, both naming `repo.git`, as gitolite has it. The path is
    /// literal: `%` is no escape there, so it breaks the name rule.
    pub fn from_ssh_path(path: &str) -> Result<Self, NameError> {
        Self::new(path.strip_prefix('/').unwrap_or(path))
    }

    /// The name as requested (`team/app.git`): its one spelling in logs and messages.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// What the access rules and the cluster know the repository by: the name without one
    /// trailing `.git` (`team/app`).
    pub fn key(&self) -> &str {
        // Never empty: no segment of a name is `.git` alone (the name rule).
        self.0.strip_suffix(".git").unwrap_or(&self.0)
    }

    /// Whether the name ends in `.git` (`team/app.git`, not `team/app`).
    pub fn has_git_suffix(&self) -> bool {
        self.0.ends_with(".git")
    }

    /// The name as a path relative to a root: never absolute, never upwards.
    pub fn relative_path(&self) -> PathBuf {
        self.0.split('/').collect()
    }

    /// The directories under `root` this name may be opened at, in git's `enter_repo` order
    /// (`<p>/.git`, `<p>`, `<p>.git/.git`, `<p>.git`), less those whose key would differ: a name
    /// ending in `.git` does not try `<p>.git.git`.
    pub fn candidates(&self, root: &Path) -> Vec<PathBuf> {
        let base = root.join(self.relative_path());
        let mut out = vec![base.join(".git"), base.clone()];
        if !self.has_git_suffix() {
            let with_git = self.created_at(root);
            out.push(with_git.join(".git"));
            out.push(with_git);
        }
        out
    }

    /// Where a repository created by a push to this name goes under `root`: `<p>` for a name
    /// ending in `.git`, else `<p>.git` (which [`Name::candidates`] then finds).
    pub fn created_at(&self, root: &Path) -> PathBuf {
        let base = root.join(self.relative_path());
        if self.has_git_suffix() {
            base
        } else {
            let mut s = base.into_os_string();
            s.push(".git");
            PathBuf::from(s)
        }
    }
}

impl fmt::Display for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The name rule's alphabet needs no escaping anywhere.
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Name({:?})", self.0)
    }
}

/// The name rule.
fn check(name: &str) -> Result<(), NameError> {
    if name.is_empty() {
        return Err(NameError::Empty);
    }
    if name.len() > MAX_LEN {
        return Err(NameError::TooLong);
    }
    for seg in name.split('/') {
        match seg.as_bytes().first() {
            None => return Err(NameError::EmptySegment),
            Some(b'.') if seg == "." || seg == ".." => return Err(NameError::DotSegment),
            Some(b'.' | b'-') => return Err(NameError::HiddenOrOption),
            Some(_) => {}
        }
        if !seg
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
        {
            return Err(NameError::Character);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn name_rule() {
        for good in [
            "a.git",
            "team/app.git",
            "team/app",
            "A_b-c.1/x",
            &"x".repeat(255),
        ] {
            assert_eq!(Name::new(good).map(|n| n.0), Ok(good.to_owned()), "{good}");
        }
        for (bad, why) in [
            ("", NameError::Empty),
            ("/abs", NameError::EmptySegment),
            ("a//b", NameError::EmptySegment),
            ("a/", NameError::EmptySegment),
            (".", NameError::DotSegment),
            ("..", NameError::DotSegment),
            ("a/../b", NameError::DotSegment),
            (".hidden.git", NameError::HiddenOrOption),
            ("team/.git", NameError::HiddenOrOption),
            ("-upload-pack.git", NameError::HiddenOrOption),
            ("team/-x", NameError::HiddenOrOption),
            ("a\nb", NameError::Character),
            ("a\u{1b}[31m", NameError::Character),
            ("sp ace", NameError::Character),
            ("tab\t", NameError::Character),
            ("back\\slash", NameError::Character),
            ("nul\0", NameError::Character),
            ("ünïcode", NameError::Character),
            ("\u{202e}evil", NameError::Character),
            ("q?uery", NameError::Character),
            ("per%cent", NameError::Character),
            (&"x".repeat(256), NameError::TooLong),
        ] {
            assert_eq!(Name::new(bad), Err(why), "{bad:?}");
        }
    }

    #[test]
    fn url_paths_decode_once() {
        let n = |s: &str| Name::from_url_path(s);
        assert_eq!(n("team/app.git"), n("te%61m/app%2egit"));
        assert_eq!(n("te%61m/app.git").unwrap().as_str(), "team/app.git");
        assert_eq!(n("a%2Fb"), Name::new("a/b"));
        // Decoded once: `%2561` is `%61`, which is no name.
        assert_eq!(n("%2561"), Err(NameError::Character));
        assert_eq!(n("%2e%2e/x"), Err(NameError::DotSegment));
        assert_eq!(n("%2fabs"), Err(NameError::EmptySegment));
        assert_eq!(n("a%ff"), Err(NameError::NotUtf8));
        assert_eq!(n("a%zz"), Err(NameError::Character));
        assert_eq!(n("a+b"), Err(NameError::Character));
    }

    #[test]
    fn ssh_paths_are_literal() {
        assert_eq!(
            Name::from_ssh_path("/team/app.git"),
            Name::new("team/app.git")
        );
        assert_eq!(Name::from_ssh_path("app"), Name::new("app"));
        assert_eq!(Name::from_ssh_path("te%61m"), Err(NameError::Character));
        assert_eq!(Name::from_ssh_path("~/x"), Err(NameError::Character));
        assert_eq!(Name::from_ssh_path("//x"), Err(NameError::EmptySegment));
    }

    #[test]
    fn keys_and_candidates() {
        let root = Path::new("/r");
        let app = Name::new("team/app").unwrap();
        let app_git = Name::new("team/app.git").unwrap();
        assert_eq!(app.key(), "team/app");
        assert_eq!(app_git.key(), "team/app");
        assert_eq!(Name::new("x.git.git").unwrap().key(), "x.git");
        assert_eq!(Name::new("a/b.git").unwrap().key(), "a/b");
        assert_eq!(
            app.candidates(root),
            ["/r/team/app/.git", "/r/team/app", "/r/team/app.git/.git", "/r/team/app.git"]
                .map(PathBuf::from)
        );
        assert_eq!(
            app_git.candidates(root),
            ["/r/team/app.git/.git", "/r/team/app.git"].map(PathBuf::from)
        );
        assert_eq!(app.created_at(root), PathBuf::from("/r/team/app.git"));
        assert_eq!(app_git.created_at(root), PathBuf::from("/r/team/app.git"));
    }

    /// Every spelling of a name in a URL (each byte escaped or not, hex in either case) is that
    /// one name, and a decoded name is its own only spelling without escapes.
    #[test]
    fn every_encoding_of_a_name_is_that_name() {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for name in ["secret.git", "team/app", "a-b_c.d/e.git", "x"] {
            let want = Name::new(name).unwrap();
            for _ in 0..500 {
                let mut spelled = String::new();
                for b in name.bytes() {
                    match next() % 3 {
                        0 => spelled.push(b as char),
                        1 => spelled.push_str(&format!("%{b:02x}")),
                        _ => spelled.push_str(&format!("%{b:02X}")),
                    }
                }
                let got = Name::from_url_path(&spelled).unwrap();
                assert_eq!(got, want, "{spelled}");
                assert_eq!(got.key(), want.key());
                assert_eq!(Name::from_url_path(got.as_str()).unwrap(), got);
            }
        }
    }
}
