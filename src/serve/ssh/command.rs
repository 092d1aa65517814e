//! The commands an ssh client may run: what git sends (`git-receive-pack '<path>'`,
//! `git-upload-pack '<path>'`, and the `git receive-pack` spellings) and gitolite's `info`.

use super::super::routing::Service;
use crate::repo::Name;

/// A parsed exec request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Command {
    /// A git service on a repository ([`Name::from_ssh_path`]).
    Git { service: Service, repo: Name },
    /// The greeting: who you are and what you may read or write.
    Info,
}

/// Why an exec request is refused (shown to the client).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Refused(pub(super) String);

const USAGE: &str = "this server runs only git-receive-pack, git-upload-pack and info";

/// Parse an exec request as git's clients send it.
pub(super) fn parse(raw: &[u8]) -> Result<Command, Refused> {
    let text = std::str::from_utf8(raw)
        .map_err(|_| Refused(format!("command is not UTF-8; {USAGE}")))?
        .trim();
    let shown: String = text.chars().take(80).collect();
    let (verb, rest) = match text.split_once(|c: char| c.is_ascii_whitespace()) {
        Some((v, r)) => (v, r.trim_start()),
        None => (text, ""),
    };
    let (service, rest) = match verb {
        "git-receive-pack" => (Service::ReceivePack, rest),
        "git-upload-pack" => (Service::UploadPack, rest),
        "git" => {
            let (sub, rest) = match rest.split_once(|c: char| c.is_ascii_whitespace()) {
                Some((s, r)) => (s, r.trim_start()),
                None => (rest, ""),
            };
            match sub {
                "receive-pack" => (Service::ReceivePack, rest),
                "upload-pack" => (Service::UploadPack, rest),
                _ => return Err(Refused(format!("unknown command '{shown}'; {USAGE}"))),
            }
        }
        "info" if rest.is_empty() => return Ok(Command::Info),
        _ => return Err(Refused(format!("unknown command '{shown}'; {USAGE}"))),
    };
    let path = dequote(rest).ok_or_else(|| {
        Refused(format!(
            "expected one repository path after {}, got '{shown}'",
            service.name()
        ))
    })?;
    let repo = Name::from_ssh_path(&path).map_err(|e| {
        Refused(format!(
            "invalid repository path '{path}': {e} ({})",
            crate::repo::name::RULE
        ))
    })?;
    Ok(Command::Git { service, repo })
}

/// One argument as git's `sq_quote_buf` writes it (`'a'\''b'`), or a bare word.
fn dequote(s: &str) -> Option<String> {
    if !s.starts_with('\'') {
        return (!s.is_empty() && !s.contains(|c: char| c.is_ascii_whitespace() || c == '\''))
            .then(|| s.to_owned());
    }
    let mut out = String::new();
    let mut chars = s.chars();
    loop {
        // Outside quotes: a quote opens, `\'` / `\!` are literal, anything else ends the word.
        match chars.next() {
            None => return Some(out),
            Some('\'') => loop {
                match chars.next()? {
                    '\'' => break,
                    c => out.push(c),
                }
            },
            Some('\\') => match chars.next()? {
                c @ ('\'' | '!') => out.push(c),
                _ => return None,
            },
            Some(_) => return None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn git(service: Service, repo: &str) -> Result<Command, Refused> {
        Ok(Command::Git {
            service,
            repo: Name::new(repo).unwrap(),
        })
    }

    #[test]
    fn git_spellings() {
        assert_eq!(
            parse(b"git-receive-pack '/demo.git'"),
            git(Service::ReceivePack, "demo.git")
        );
        assert_eq!(
            parse(b"git-upload-pack 'team/x.git'"),
            git(Service::UploadPack, "team/x.git")
        );
        assert!(parse(b"git receive-pack '/a'\\''b.git'").is_err());
        assert_eq!(
            parse(b"git upload-pack demo.git"),
            git(Service::UploadPack, "demo.git")
        );
        assert_eq!(parse(b"info"), Ok(Command::Info));
    }

    #[test]
    fn refusals() {
        for bad in [
            &b"sh"[..],
            b"git-upload-archive '/x.git'",
            b"git-receive-pack",
            b"git-receive-pack '/x.git' extra",
            b"git-receive-pack '~/x.git'",
            b"git-receive-pack '/x.git",
            b"rm -rf /",
        ] {
            assert!(parse(bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
    }
}
