//! Server-side rules on ref names and updates: git's "funny refname" check, hidden refs
//! (`receive.hideRefs` / `transfer.hideRefs`) and the `receive.deny*` settings.

use gix_object::bstr::{BStr, ByteSlice};

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
    gix_validate::reference::name_partial(rest.as_bstr()).is_ok()
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
