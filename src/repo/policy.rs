//! Server-side rules on ref names and updates: git's "funny refname" check, hidden refs
//! (`receive.hideRefs` / `transfer.hideRefs`) and the `receive.deny*` settings.

use gix_object::bstr::BStr;

/// Whether `name` may be updated (or, with `delete`, deleted) remotely: it must start with
/// `refs/` and what follows must be a valid ref name of at least two components (one is enough
/// for a deletion), as git's `update()` checks with `check_refname_format`.
pub fn is_valid_refname(name: &BStr, delete: bool) -> bool {
    let Some(rest) = name.strip_prefix(b"refs/") else {
        return false;
    };
    if rest.is_empty() || rest == b"@" {
        return false;
    }
    if !delete && !rest.contains(&b'/') {
        return false;
    }
    check_refname_format(rest)
}

/// git's `check_refname_format(name, REFNAME_ALLOW_ONELEVEL)` (refs.c): no empty component,
/// none starting with `.` or ending with `.lock`, no `..`, no `@{`, no control character,
/// space, `~ ^ : ? * [ \\` or DEL, not ending with `.`, not `@`.
///
/// One pass over the bytes, written here instead of `gix_validate::reference::name_partial`,
/// which was 8 % of the instructions of a 10,000-ref push (callgrind, `benches/README.md`).
fn check_refname_format(name: &[u8]) -> bool {
    /// git's `refname_disposition` as a yes/no: bytes no ref name may hold.
    static FORBIDDEN: [bool; 256] = {
        let mut t = [false; 256];
        let mut b = 0;
        while b <= 0x20 {
            t[b] = true;
            b += 1;
        }
        let mut i = 0;
        let bad = b"~^:?*[\\\x7f";
        while i < bad.len() {
            t[bad[i] as usize] = true;
            i += 1;
        }
        t
    };
    if name.is_empty() || name == b"@" || name.last() == Some(&b'.') {
        return false;
    }
    let mut prev = b'/';
    let mut component = 0;
    for (i, &b) in name.iter().enumerate() {
        if FORBIDDEN[b as usize] {
            return false;
        }
        match b {
            b'/' => {
                if prev == b'/' || name[component..i].ends_with(b".lock") {
                    return false;
                }
                component = i + 1;
            }
            b'.' if prev == b'/' || prev == b'.' => return false,
            b'{' if prev == b'@' => return false,
            _ => {}
        }
        prev = b;
    }
    prev != b'/' && !name[component..].ends_with(b".lock")
}

/// Whether `name` is hidden by `patterns` (git's `ref_is_hidden`: the last matching pattern
/// wins; `!` negates; `^` matches the full name, which equals `name` without namespaces).
pub fn is_hidden(name: &BStr, patterns: &[String]) -> bool {
    is_hidden_in_namespace(Some(name), name, patterns)
}

/// [`is_hidden`] under `GIT_NAMESPACE`: `name` is the ref's name inside the namespace (`None`
/// for a ref outside it), `full` its name in the repository; `^` patterns match `full`.
pub fn is_hidden_in_namespace(name: Option<&BStr>, full: &BStr, patterns: &[String]) -> bool {
    for pattern in patterns.iter().rev() {
        let (neg, pattern) = match pattern.strip_prefix('!') {
            Some(p) => (true, p),
            None => (false, pattern.as_str()),
        };
        let (subject, pattern) = match pattern.strip_prefix('^') {
            Some(p) => (Some(full), p),
            None => (name, pattern),
        };
        if let Some(rest) = subject.and_then(|s| s.strip_prefix(pattern.as_bytes()))
            && (rest.is_empty() || rest[0] == b'/')
        {
            return !neg;
        }
    }
    false
}

/// The prefix `GIT_NAMESPACE` puts before every ref name (git's `expand_namespace`):
/// `a/b` is `refs/namespaces/a/refs/namespaces/b/`; empty without a namespace.
pub fn namespace_prefix(namespace: &str) -> String {
    namespace
        .split('/')
        .filter(|c| !c.is_empty())
        .map(|c| format!("refs/namespaces/{c}/"))
        .collect()
}

/// The explanation git prints when `receive.denyCurrentBranch` is not configured.
pub const REFUSE_CURRENT_BRANCH_MSG: &str = "\
By default, updating the current branch in a non-bare repository
is denied, because it will make the index and work tree inconsistent
with what you pushed, and will require 'git reset --hard' to match
the work tree to HEAD.

You can set the 'receive.denyCurrentBranch' configuration variable
to 'ignore' or 'warn' in the remote repository to allow pushing into
its current branch; however, this is not recommended unless you
arranged to update its work tree to match what you pushed in some
other way.

To squelch this message and still keep the default behaviour, set
'receive.denyCurrentBranch' configuration variable to 'refuse'.";

/// The explanation git prints when `receive.denyDeleteCurrent` is not configured.
pub const REFUSE_DELETE_CURRENT_MSG: &str = "\
By default, deleting the current branch is denied, because the next
'git clone' won't result in any file checked out, causing confusion.

You can set 'receive.denyDeleteCurrent' configuration variable to
'warn' or 'ignore' in the remote repository to allow deleting the
current branch, with or without a warning message.

To squelch this message, you can set it to 'refuse'.";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn funny_refnames() {
        let ok = |n: &str, d: bool| is_valid_refname(n.into(), d);
        assert!(ok("refs/heads/main", false));
        assert!(ok("refs/tags/v1.0", false));
        assert!(!ok("HEAD", false));
        assert!(!ok("refs/foo", false));
        assert!(ok("refs/foo", true));
        for bad in [
            "refs/heads/a..b",
            "refs/../x",
            "refs/heads/x.lock",
            "refs/heads/a@{b",
            "refs/heads/a b",
            "refs/heads/\x01x",
            "refs/heads/x/",
            "refs/heads//x",
            "refs/heads/.x",
            "refs/heads/x.",
            "refs/heads/a:b",
            "refs/heads/a~b",
            "refs/heads/a^b",
            "refs/heads/a?b",
            "refs/heads/a*b",
            "refs/heads/a[b",
            "refs/heads/a\\b",
            "refs/",
            "refs/@",
        ] {
            assert!(!ok(bad, false), "{bad:?} must be refused");
        }
    }

    /// The one-pass check refuses exactly what gix-validate's does, over every name of up to
    /// four characters from an alphabet of each kind of byte that matters (as components of
    /// `a/…/b`), and over some longer ones.
    #[test]
    fn check_refname_format_agrees_with_gix_validate() {
        use gix_object::bstr::ByteSlice;
        let alphabet: &[u8] = b"a./@{}lock~^:?*[\\ \x01\x7f\xc3";
        let mut names: Vec<Vec<u8>> = vec![Vec::new()];
        let mut all = Vec::new();
        for _ in 0..4 {
            let mut next = Vec::new();
            for n in &names {
                for &b in alphabet {
                    let mut m = n.clone();
                    m.push(b);
                    next.push(m);
                }
            }
            all.extend(next.iter().cloned());
            names = next;
        }
        for n in ["x.lock", "x.lock/y", "a/b.lock.c", "a/.b", "a/b.", "a@b", "@", "a/@/b"] {
            all.push(n.as_bytes().to_vec());
        }
        for core in all {
            for name in [core.clone(), [b"a/", &core[..], b"/b"].concat()] {
                let gix = gix_validate::reference::name_partial(name.as_bstr()).is_ok();
                assert_eq!(
                    check_refname_format(&name),
                    gix,
                    "{:?}",
                    name.as_bstr()
                );
            }
        }
    }

    #[test]
    fn hidden() {
        let p = vec!["refs/hidden".to_string(), "!refs/hidden/shown".to_string()];
        assert!(is_hidden("refs/hidden".into(), &p));
        assert!(is_hidden("refs/hidden/x".into(), &p));
        assert!(!is_hidden("refs/hiddenx".into(), &p));
        assert!(!is_hidden("refs/hidden/shown/y".into(), &p));
        assert!(is_hidden("refs/a".into(), &["^refs/a".to_string()]));
    }
}
