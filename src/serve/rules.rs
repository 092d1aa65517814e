//! Access rules (`berth serve --access FILE`): a documented subset of gitolite's
//! `gitolite.conf`, parsed into [`Rules`] and evaluated in-process.
//!
//! ```text
//! @devs    = alice bob          # a group (defining it again adds members; groups may nest)
//! @public  = docs site
//! repo team/app @public         # names, patterns (regexes, anchored), @groups, @all
//!     RW+            = alice    # read, create, fast-forward, rewind, delete
//!     -   refs/tags/ = bob      # deny: first matching rule wins per ref
//!     RW  main dev/  = @devs    # refexes: prefix-matched regexes, refs/heads/ implied
//!     R              = @all     # everyone, including anonymous requests
//! repo team/..*
//!     C              = @devs    # may create a matching repository by pushing to it
//!     RW+            = @devs
//! ```
//!
//! How a request is decided, as gitolite does it:
//! - The rules that apply are those whose `repo` line names the repository (its URL name
//!   without `.git`) and whose user list names the user, in the order of the file.
//! - **Repository level** (may read, may push at all, may create): the first applying rule
//!   whose permission grants it (`R`, `RW`, `RW+` read; `RW`, `RW+` write, whatever their
//!   refexes; only `C` creates). Unlike gitolite's default, a `-` rule *without* refexes denies
//!   the repository itself when it comes first (gitolite's `option deny-rules = 1`), so
//!   `- = mallory` before `R = @all` keeps mallory out; `-` rules with refexes only deny
//!   pushes to those refs.
//! - **Ref level** (each pushed ref): the first applying rule whose refexes match the ref name
//!   (a rule without refexes matches every ref) and that either is `-` (denied) or grants the
//!   change: `RW` creates and fast-forwards, `RW+` also rewinds and deletes. No such rule:
//!   denied.
//! - `@all` is every user, anonymous requests included; the user name `anonymous` stands for
//!   requests without authentication (a credentials user cannot be named so).
//!
//! Not supported (refused when loading, so that no rule silently means something else):
//! `include`, `subconf`, `option`, `config`, VREFs, the `RWC`/`RWD`/`M` permission forms, and
//! gitolite's wild-repository `CREATOR`/`READERS`/`WRITERS`.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use regex::Regex;

use crate::repo::Name;

/// Who asks: a signed-in user or an anonymous request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Who<'a> {
    /// Authenticated as this user.
    User(&'a str),
    /// No authentication.
    Anonymous,
}

impl fmt::Display for Who<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Who::User(u) => f.write_str(u),
            Who::Anonymous => f.write_str("anonymous"),
        }
    }
}

/// What a request wants of a repository as a whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Want {
    /// Fetch or clone (`R`).
    Read,
    /// Push to it at all (`RW` or `RW+`, any refex).
    Write,
    /// Create it by pushing (`C`).
    Create,
}

impl Want {
    fn as_str(self) -> &'static str {
        match self {
            Want::Read => "R",
            Want::Write => "W",
            Want::Create => "C",
        }
    }
}

/// What a pushed ref update needs: `W` (create, fast-forward) or `+` (rewind, delete).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RefWant {
    /// `RW` is enough.
    Write,
    /// `RW+` is needed.
    Rewind,
}

/// A rule's permission.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Perm {
    /// `R`
    Read,
    /// `RW`
    Write,
    /// `RW+`
    Rewind,
    /// `-`
    Deny,
    /// `C`
    Create,
}

impl Perm {
    fn grants(self, want: Want) -> bool {
        matches!(
            (self, want),
            (Perm::Read | Perm::Write | Perm::Rewind, Want::Read)
                | (Perm::Write | Perm::Rewind, Want::Write)
                | (Perm::Create, Want::Create)
        )
    }
    fn grants_ref(self, want: RefWant) -> bool {
        matches!(
            (self, want),
            (Perm::Write | Perm::Rewind, RefWant::Write) | (Perm::Rewind, RefWant::Rewind)
        )
    }
}

/// How a `repo` line names repositories.
#[derive(Debug, Clone)]
enum RepoSpec {
    /// A plain name, compared as is.
    Name(String),
    /// A regex, matched against the whole name.
    Pattern(Regex),
    /// `@all`.
    All,
}

impl RepoSpec {
    fn matches(&self, repo: &str) -> bool {
        match self {
            RepoSpec::Name(n) => n == repo,
            RepoSpec::Pattern(re) => re.is_match(repo),
            RepoSpec::All => true,
        }
    }
}

/// One rule line under a `repo` line.
#[derive(Debug, Clone)]
struct Rule {
    /// Its 1-based line number.
    line: usize,
    /// The line as written (trimmed), for messages.
    text: String,
    repos: Arc<Vec<RepoSpec>>,
    perm: Perm,
    /// Prefix-anchored regexes; empty matches every ref.
    refexes: Vec<Regex>,
    /// User names, `@group`s, `@all`, `anonymous`.
    users: Vec<String>,
}

/// Why the rules did not load.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}:{line}: {message}")]
pub(crate) struct ParseError {
    file: String,
    line: usize,
    message: String,
}

/// A refusal, naming the rule that refused (or that none allowed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Denied(pub(crate) String);

impl fmt::Display for Denied {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Parsed access rules.
#[derive(Debug, Default)]
pub(crate) struct Rules {
    /// The file name, for messages.
    file: String,
    groups: HashMap<String, Vec<String>>,
    rules: Vec<Rule>,
}

/// gitolite's wild-repository words, which berth does not support.
const WILD_KEYWORDS: [&str; 3] = ["CREATOR", "READERS", "WRITERS"];

/// Whether a `repo` line's token (without `.git`) is a name rather than a pattern: every
/// [`Name::key`] is one (a leading `_` included, which the name rule allows), so that a rule
/// written with a repository's name always applies to it.
fn is_plain_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || "-._@/+".contains(c))
}

fn is_group_name(s: &str) -> bool {
    s.len() > 1
        && s.starts_with('@')
        && s[1..]
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-._".contains(c))
}

impl Rules {
    /// Parse `text`; `file` names it in messages.
    pub(crate) fn parse(text: &str, file: &str) -> Result<Rules, ParseError> {
        let mut rules = Rules {
            file: file.to_owned(),
            ..Default::default()
        };
        let err = |line: usize, message: String| ParseError {
            file: file.to_owned(),
            line,
            message,
        };
        let mut current: Option<Arc<Vec<RepoSpec>>> = None;
        // Repository tokens by group, resolved when a `repo` line uses them.
        let mut pending = String::new();
        let mut start = 0;
        for (i, raw) in text.lines().enumerate() {
            let n = i + 1;
            let line = match raw.find('#') {
                Some(c) => &raw[..c],
                None => raw,
            };
            if pending.is_empty() {
                start = n;
            }
            // gitolite's line continuation.
            if let Some(l) = line.trim_end().strip_suffix('\\') {
                pending.push_str(l);
                pending.push(' ');
                continue;
            }
            pending.push_str(line);
            let line = std::mem::take(&mut pending);
            let line = line.trim();
            if line.is_empty() {
                continue;
            }
            if line.chars().any(|c| c.is_control() && c != '\t') {
                return Err(err(start, "control character".into()));
            }
            let words: Vec<&str> = line.split_whitespace().collect();
            let first = words[0];
            if first.starts_with('@') && line.contains('=') {
                let (name, members) = line.split_once('=').unwrap_or((line, ""));
                let name = name.trim();
                if !is_group_name(name) || name == "@all" {
                    return Err(err(start, format!("bad group name '{name}'")));
                }
                let members: Vec<String> = members.split_whitespace().map(str::to_owned).collect();
                rules
                    .groups
                    .entry(name.to_owned())
                    .or_default()
                    .extend(members);
                continue;
            }
            match first {
                "repo" => {
                    if words.len() < 2 {
                        return Err(err(start, "`repo` names no repository".into()));
                    }
                    let mut specs = Vec::new();
                    if let Some(k) = WILD_KEYWORDS.iter().find(|k| line.contains(*k)) {
                        return Err(err(
                            start,
                            format!("gitolite's wild-repository '{k}' is not supported"),
                        ));
                    }
                    for w in &words[1..] {
                        rules
                            .repo_specs(w, &mut specs, 0)
                            .map_err(|m| err(start, m))?;
                    }
                    current = Some(Arc::new(specs));
                    continue;
                }
                "include" | "subconf" | "option" | "config" => {
                    return Err(err(
                        start,
                        format!(
                            "`{first}` lines are not supported by berth's subset of gitolite.conf"
                        ),
                    ));
                }
                _ => {}
            }
            let Some((lhs, users)) = line.split_once('=') else {
                return Err(err(
                    start,
                    "expected `repo …`, `@group = …` or `<perm> [refex…] = <users>`".into(),
                ));
            };
            let lhs: Vec<&str> = lhs.split_whitespace().collect();
            let Some(&perm) = lhs.first() else {
                return Err(err(start, "a rule needs a permission".into()));
            };
            let perm = match perm {
                "R" => Perm::Read,
                "RW" => Perm::Write,
                "RW+" => Perm::Rewind,
                "-" => Perm::Deny,
                "C" => Perm::Create,
                other => {
                    return Err(err(
                        start,
                        format!(
                            "permission '{other}' is not supported (berth knows R, RW, RW+, - and C)"
                        ),
                    ));
                }
            };
            let Some(repos) = current.clone() else {
                return Err(err(start, "a rule before any `repo` line".into()));
            };
            let mut refexes = Vec::new();
            for r in &lhs[1..] {
                if perm == Perm::Create {
                    return Err(err(start, "`C` takes no refex".into()));
                }
                if r.starts_with("VREF/") {
                    return Err(err(start, "VREFs are not supported".into()));
                }
                let full = if r.starts_with("refs/") {
                    (*r).to_owned()
                } else {
                    format!("refs/heads/{r}")
                };
                let re = Regex::new(&format!("^(?:{full})"))
                    .map_err(|e| err(start, format!("bad refex '{r}': {e}")))?;
                refexes.push(re);
            }
            let users: Vec<String> = users.split_whitespace().map(str::to_owned).collect();
            if users.is_empty() {
                return Err(err(start, "a rule names no user".into()));
            }
            if let Some(u) = users.iter().find(|u| WILD_KEYWORDS.contains(&u.as_str())) {
                return Err(err(
                    start,
                    format!("gitolite's wild-repository '{u}' is not supported"),
                ));
            }
            rules.rules.push(Rule {
                line: start,
                text: line.split_whitespace().collect::<Vec<_>>().join(" "),
                repos,
                perm,
                refexes,
                users,
            });
        }
        if !pending.is_empty() {
            return Err(err(
                start,
                "a line continues past the end of the file".into(),
            ));
        }
        Ok(rules)
    }

    /// The specs one token of a `repo` line stands for.
    fn repo_specs(&self, w: &str, out: &mut Vec<RepoSpec>, depth: usize) -> Result<(), String> {
        if depth > 16 {
            return Err(format!("groups nest too deeply at '{w}'"));
        }
        if w == "@all" {
            out.push(RepoSpec::All);
        } else if is_group_name(w) {
            let members = self
                .groups
                .get(w)
                .ok_or_else(|| format!("group '{w}' used before it is defined"))?;
            for m in members {
                self.repo_specs(m, out, depth + 1)?;
            }
        } else {
            let name = w.strip_suffix(".git").unwrap_or(w);
            if is_plain_name(name) {
                out.push(RepoSpec::Name(name.to_owned()));
            } else {
                let re = Regex::new(&format!("^(?:{w})$"))
                    .map_err(|e| format!("bad repository pattern '{w}': {e}"))?;
                out.push(RepoSpec::Pattern(re));
            }
        }
        Ok(())
    }

    /// Whether the user token `token` (a name, `@group`, `@all`, `anonymous`) covers `who`.
    fn user_matches(&self, token: &str, who: Who<'_>, depth: usize) -> bool {
        if token == "@all" {
            return true;
        }
        if token.starts_with('@') {
            return depth < 16
                && self.groups.get(token).is_some_and(|members| {
                    members.iter().any(|m| self.user_matches(m, who, depth + 1))
                });
        }
        match who {
            Who::User(u) => token == u && token != "anonymous",
            Who::Anonymous => token == "anonymous",
        }
    }

    /// The rules for `repo` (its [`Name::key`]) and `who`, in file order.
    fn applying<'s>(&'s self, repo: &'s Name, who: Who<'s>) -> impl Iterator<Item = &'s Rule> + 's {
        let repo = repo.key();
        self.rules.iter().filter(move |r| {
            r.repos.iter().any(|s| s.matches(repo))
                && r.users.iter().any(|u| self.user_matches(u, who, 0))
        })
    }

    fn denied_by(&self, rule: &Rule) -> Denied {
        Denied(format!(
            "access denied by `{}` ({}:{})",
            rule.text, self.file, rule.line
        ))
    }

    /// Whether `who` may `want` the repository `repo` as a whole.
    pub(crate) fn repo_access(&self, repo: &Name, who: Who<'_>, want: Want) -> Result<(), Denied> {
        for rule in self.applying(repo, who) {
            if rule.perm == Perm::Deny && rule.refexes.is_empty() {
                return Err(self.denied_by(rule));
            }
            if rule.perm.grants(want) {
                return Ok(());
            }
        }
        Err(Denied(format!(
            "access denied: no rule in {} gives {} on {} to {who}",
            self.file,
            want.as_str(),
            repo.key()
        )))
    }

    /// Whether `who` may change `refname` of `repo` as `want` says.
    pub(crate) fn ref_access(
        &self,
        repo: &Name,
        who: Who<'_>,
        refname: &str,
        want: RefWant,
    ) -> Result<(), Denied> {
        for rule in self.applying(repo, who) {
            if !rule.refexes.is_empty() && !rule.refexes.iter().any(|r| r.is_match(refname)) {
                continue;
            }
            if rule.perm == Perm::Deny {
                return Err(self.denied_by(rule));
            }
            if rule.perm.grants_ref(want) {
                return Ok(());
            }
        }
        let what = match want {
            RefWant::Write => "RW",
            RefWant::Rewind => "RW+ (rewind or delete)",
        };
        Err(Denied(format!(
            "access denied: no rule in {} gives {what} on {refname} to {who}",
            self.file
        )))
    }

    /// Whether some signed-in user could get `want` on `repo`: then asking an anonymous
    /// client to authenticate (401) can help.
    pub(crate) fn signed_in_could(&self, repo: &Name, want: Want) -> bool {
        let key = repo.key();
        self.rules.iter().any(|r| {
            r.perm.grants(want)
                && r.repos.iter().any(|s| s.matches(key))
                && r.users.iter().any(|u| u != "anonymous")
        })
    }
}

/// A file's modification time and size, to tell that it changed.
type Stamp = Option<(SystemTime, u64)>;

/// The rules file, re-read when it changes (checked on every request: one `stat`).
#[derive(Debug)]
pub(crate) struct RulesFile {
    path: PathBuf,
    state: Mutex<(Stamp, Arc<Rules>)>,
}

impl RulesFile {
    /// Load `path`; an error here stops the server from starting.
    pub(crate) fn load(path: &Path) -> Result<RulesFile, String> {
        let (stamp, rules) = Self::read(path)?;
        Ok(RulesFile {
            path: path.to_owned(),
            state: Mutex::new((stamp, Arc::new(rules))),
        })
    }

    fn read(path: &Path) -> Result<(Stamp, Rules), String> {
        let meta = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut rules =
            Rules::parse(&text, &path.display().to_string()).map_err(|e| e.to_string())?;
        // Clients see refusals naming a rule: the file's name, not where it lives.
        rules.file = path.file_name().map_or_else(
            || "access rules".into(),
            |n| n.to_string_lossy().into_owned(),
        );
        Ok((meta.modified().ok().map(|m| (m, meta.len())), rules))
    }

    /// The rules as of now: re-read when the file's time or size changed. A file that no
    /// longer loads keeps the last good rules (with a warning), never none.
    pub(crate) fn current(&self) -> Arc<Rules> {
        let now = std::fs::metadata(&self.path)
            .ok()
            .and_then(|m| Some((m.modified().ok()?, m.len())));
        let Ok(mut state) = self.state.lock() else {
            return Arc::new(Rules::default());
        };
        if now.is_some() && now != state.0 {
            match Self::read(&self.path) {
                Ok((stamp, rules)) => {
                    tracing::info!(target: "berth::serve", file = %self.path.display(), rules = rules.rules.len(), "access rules reloaded");
                    *state = (stamp, Arc::new(rules));
                }
                Err(e) => {
                    tracing::warn!(target: "berth::serve", error = %crate::escape::Escaped::text(&e), "access rules not reloaded; keeping the previous ones");
                    state.0 = now;
                }
            }
        }
        state.1.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(s: &str) -> Name {
        Name::new(s).unwrap()
    }

    const CONF: &str = r#"
# comment
@devs = alice bob
@devs = carol        # adds
@leads = @devs dave
@pub = docs site

repo team/app
    RW+              = dave
    -   refs/tags/   = bob
    RW  main dev/    = @devs
    R                = @all

repo @pub
    R                = anonymous
    RW               = alice

repo team/new.*
    C                = @leads
    RW+              = @leads

repo secret
    -                = mallory
    R                = @all
    RW \
        = alice
"#;

    fn rules() -> Rules {
        Rules::parse(CONF, "access.conf").unwrap()
    }

    const A: Who = Who::User("alice");
    const B: Who = Who::User("bob");
    const D: Who = Who::User("dave");

    #[test]
    fn repository_level() {
        let r = rules();
        // R for everyone, anonymous included, through @all; RW through a group.
        assert!(
            r.repo_access(&n("team/app.git"), Who::Anonymous, Want::Read)
                .is_ok()
        );
        assert!(r.repo_access(&n("team/app"), A, Want::Write).is_ok());
        assert!(
            r.repo_access(&n("team/app.git"), Who::User("zed"), Want::Write)
                .is_err()
        );
        // Repository groups, and the reserved anonymous.
        assert!(
            r.repo_access(&n("docs.git"), Who::Anonymous, Want::Read)
                .is_ok()
        );
        assert!(
            r.repo_access(&n("site"), Who::User("zed"), Want::Read)
                .is_err()
        );
        assert!(
            r.repo_access(&n("docs"), Who::User("anonymous"), Want::Read)
                .is_err()
        );
        // C: only by the pattern, only for @leads (nested group).
        assert!(r.repo_access(&n("team/new.git"), D, Want::Create).is_ok());
        assert!(
            r.repo_access(&n("team/new.git"), Who::User("carol"), Want::Create)
                .is_ok()
        );
        assert!(
            r.repo_access(&n("team/new.git"), Who::User("zed"), Want::Create)
                .is_err()
        );
        assert!(r.repo_access(&n("other/new.git"), D, Want::Create).is_err());
        // A pattern is anchored.
        assert!(r.repo_access(&n("xteam/new"), D, Want::Create).is_err());
        // RW does not create; C does not read.
        assert!(r.repo_access(&n("team/app"), A, Want::Create).is_err());
        assert!(r.repo_access(&n("secret"), A, Want::Create).is_err());
        // A refex-less deny keeps mallory out before `R = @all`; continuation lines work.
        let e = r
            .repo_access(&n("secret"), Who::User("mallory"), Want::Read)
            .unwrap_err();
        assert_eq!(e.0, "access denied by `- = mallory` (access.conf:23)");
        assert!(r.repo_access(&n("secret"), A, Want::Write).is_ok());
        assert!(r.repo_access(&n("secret"), B, Want::Read).is_ok());
        assert!(r.repo_access(&n("secret"), B, Want::Write).is_err());
        // A ref-level deny does not deny the repository.
        assert!(r.repo_access(&n("team/app"), B, Want::Write).is_ok());
        assert!(r.signed_in_could(&n("team/app"), Want::Write));
        assert!(!r.signed_in_could(&n("nothing"), Want::Read));
    }

    /// Found by the `repo_path` property: `_private.git` was read as a pattern (which keeps its
    /// `.git`), so its own `-` rule never applied and `@all` let mallory in.
    #[test]
    fn a_name_starting_with_underscore_is_a_name() {
        let r = Rules::parse(
            "repo _private.git\n    - = mallory\nrepo @all\n    R = @all\n",
            "t",
        )
        .unwrap();
        for spelled in ["_private", "_private.git"] {
            assert!(
                r.repo_access(&n(spelled), Who::User("mallory"), Want::Read)
                    .is_err()
            );
            assert!(
                r.repo_access(&n(spelled), Who::User("x"), Want::Read)
                    .is_ok()
            );
        }
    }

    #[test]
    fn ref_level_first_match_wins() {
        let r = rules();
        let ok = |who, name, want| r.ref_access(&n("team/app.git"), who, name, want);
        assert!(ok(D, "refs/tags/v1", RefWant::Rewind).is_ok());
        assert!(ok(A, "refs/heads/main", RefWant::Write).is_ok());
        assert!(ok(A, "refs/heads/dev/x", RefWant::Write).is_ok());
        // Prefix match: `main` covers `main2`, as in gitolite.
        assert!(ok(A, "refs/heads/main2", RefWant::Write).is_ok());
        let e = ok(A, "refs/heads/main", RefWant::Rewind).unwrap_err();
        assert_eq!(
            e.0,
            "access denied: no rule in access.conf gives RW+ (rewind or delete) on \
             refs/heads/main to alice"
        );
        assert!(ok(A, "refs/heads/topic", RefWant::Write).is_err());
        let e = ok(B, "refs/tags/v1", RefWant::Write).unwrap_err();
        assert_eq!(
            e.0,
            "access denied by `- refs/tags/ = bob` (access.conf:10)"
        );
        // Alice is not denied tags, but no rule gives her any.
        assert!(ok(A, "refs/tags/v1", RefWant::Write).is_err());
        assert!(ok(Who::Anonymous, "refs/heads/main", RefWant::Write).is_err());
    }

    #[test]
    fn parse_errors_name_the_line() {
        for (text, line, what) in [
            ("RW = a\n", 1, "before any `repo`"),
            ("repo x\n  RWC = a\n", 2, "not supported"),
            ("repo x\n  RW = \n", 2, "no user"),
            ("repo x\noption deny-rules = 1\n", 2, "not supported"),
            ("repo x(\n", 1, "bad repository pattern"),
            ("repo x\n RW ma(in = a\n", 2, "bad refex"),
            ("repo @nope\n", 1, "before it is defined"),
            ("repo x\n C main = a\n", 2, "no refex"),
            ("repo x\n RW VREF/NAME/x = a\n", 2, "VREF"),
            ("repo x\n bogus\n", 2, "expected"),
            ("repo u/CREATOR/..*\n", 1, "wild-repository"),
            ("repo x\n RW+ = CREATOR\n", 2, "wild-repository"),
        ] {
            let e = Rules::parse(text, "f").unwrap_err();
            assert_eq!(e.line, line, "{text:?}: {e}");
            assert!(e.to_string().contains(what), "{text:?}: {e}");
        }
    }

    #[test]
    fn reloads_on_change_and_keeps_the_last_good_rules() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("access.conf");
        std::fs::write(&path, "repo x\n R = @all\n").unwrap();
        let f = RulesFile::load(&path).unwrap();
        assert!(f.current().repo_access(&n("x"), A, Want::Read).is_ok());
        std::fs::write(&path, "repo y\n  R = @all\n").unwrap();
        assert!(f.current().repo_access(&n("x"), A, Want::Read).is_err());
        assert!(f.current().repo_access(&n("y"), A, Want::Read).is_ok());
        std::fs::write(&path, "repo y\n  bogus line\n").unwrap();
        assert!(f.current().repo_access(&n("y"), A, Want::Read).is_ok());
    }
}
