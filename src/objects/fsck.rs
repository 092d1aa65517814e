//! fsck on receive: git's object checks (`fsck.c`) for what a push brings, as `git index-pack
//! --strict` / `git unpack-objects --strict` run them when `receive.fsckObjects` (or
//! `transfer.fsckObjects`) is on.
//!
//! This module owns the message ids and their severities (`receive.fsck.<msg-id>`, with git's
//! names and defaults, strict mode turning warnings into errors), the skip list
//! (`receive.fsck.skipList`), the checks of commits, tags, trees and `.gitmodules` /
//! `.gitattributes` blobs, and the wording of every finding (`object <oid>: <msgId>: <text>`).
//! It parses raw object bytes itself where git is stricter than gix-object's parsers, and reads
//! objects through any [`gix_object::Find`]: [`crate::objects::ingest`] runs it over the received pack.

use std::collections::HashSet;
use std::path::Path;

use gix_hash::ObjectId;
use gix_object::Kind;
use gix_object::bstr::ByteSlice;

/// How a finding is treated (git's `enum fsck_msg_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    /// Not reported.
    Ignore,
    /// Reported as a warning; never elevated by strict mode.
    Info,
    /// Reported as an error; may not be demoted.
    Fatal,
    /// Reported as an error: the object is refused.
    Error,
    /// Reported as a warning (an error in strict mode unless configured).
    Warn,
}

/// Parse a configured severity: git accepts exactly `error`, `warn` and `ignore`.
pub fn parse_severity(s: &str) -> Option<Severity> {
    match s {
        "error" => Some(Severity::Error),
        "warn" => Some(Severity::Warn),
        "ignore" => Some(Severity::Ignore),
        _ => None,
    }
}

macro_rules! msg_ids {
    ($($variant:ident = $snake:literal $sev:ident,)*) => {
        /// git's fsck message ids (`FOREACH_FSCK_MSG_ID` in `fsck.h`).
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        #[allow(missing_docs)]
        pub enum Msg { $($variant,)* }
        const TABLE: &[(Msg, &str, Severity)] = &[$((Msg::$variant, $snake, Severity::$sev),)*];
    };
}

msg_ids! {
    NulInHeader = "NUL_IN_HEADER" Fatal,
    UnterminatedHeader = "UNTERMINATED_HEADER" Fatal,
    BadHeaderContinuation = "BAD_HEADER_CONTINUATION" Error,
    BadDate = "BAD_DATE" Error,
    BadDateOverflow = "BAD_DATE_OVERFLOW" Error,
    BadEmail = "BAD_EMAIL" Error,
    BadGpgsig = "BAD_GPGSIG" Error,
    BadHeadTarget = "BAD_HEAD_TARGET" Error,
    BadName = "BAD_NAME" Error,
    BadObjectSha1 = "BAD_OBJECT_SHA1" Error,
    BadPackedRefEntry = "BAD_PACKED_REF_ENTRY" Error,
    BadPackedRefHeader = "BAD_PACKED_REF_HEADER" Error,
    BadParentSha1 = "BAD_PARENT_SHA1" Error,
    BadReferentName = "BAD_REFERENT_NAME" Error,
    BadRefContent = "BAD_REF_CONTENT" Error,
    BadRefFiletype = "BAD_REF_FILETYPE" Error,
    BadRefName = "BAD_REF_NAME" Error,
    BadRefOid = "BAD_REF_OID" Error,
    BadTimezone = "BAD_TIMEZONE" Error,
    BadTree = "BAD_TREE" Error,
    BadTreeSha1 = "BAD_TREE_SHA1" Error,
    BadType = "BAD_TYPE" Error,
    DuplicateEntries = "DUPLICATE_ENTRIES" Error,
    GitattributesBlob = "GITATTRIBUTES_BLOB" Error,
    GitattributesLarge = "GITATTRIBUTES_LARGE" Error,
    GitattributesLineLength = "GITATTRIBUTES_LINE_LENGTH" Error,
    GitattributesMissing = "GITATTRIBUTES_MISSING" Error,
    GitmodulesBlob = "GITMODULES_BLOB" Error,
    GitmodulesLarge = "GITMODULES_LARGE" Error,
    GitmodulesMissing = "GITMODULES_MISSING" Error,
    GitmodulesName = "GITMODULES_NAME" Error,
    GitmodulesPath = "GITMODULES_PATH" Error,
    GitmodulesSymlink = "GITMODULES_SYMLINK" Error,
    GitmodulesUpdate = "GITMODULES_UPDATE" Error,
    GitmodulesUrl = "GITMODULES_URL" Error,
    MissingAuthor = "MISSING_AUTHOR" Error,
    MissingCommitter = "MISSING_COMMITTER" Error,
    MissingEmail = "MISSING_EMAIL" Error,
    MissingNameBeforeEmail = "MISSING_NAME_BEFORE_EMAIL" Error,
    MissingObject = "MISSING_OBJECT" Error,
    MissingSpaceBeforeDate = "MISSING_SPACE_BEFORE_DATE" Error,
    MissingSpaceBeforeEmail = "MISSING_SPACE_BEFORE_EMAIL" Error,
    MissingTag = "MISSING_TAG" Error,
    MissingTagEntry = "MISSING_TAG_ENTRY" Error,
    MissingTree = "MISSING_TREE" Error,
    MissingType = "MISSING_TYPE" Error,
    MissingTypeEntry = "MISSING_TYPE_ENTRY" Error,
    MultipleAuthors = "MULTIPLE_AUTHORS" Error,
    PackedRefEntryNotTerminated = "PACKED_REF_ENTRY_NOT_TERMINATED" Error,
    PackedRefUnsorted = "PACKED_REF_UNSORTED" Error,
    TreeNotSorted = "TREE_NOT_SORTED" Error,
    UnknownType = "UNKNOWN_TYPE" Error,
    ZeroPaddedDate = "ZERO_PADDED_DATE" Error,
    BadReftableTableName = "BAD_REFTABLE_TABLE_NAME" Warn,
    EmptyName = "EMPTY_NAME" Warn,
    FullPathname = "FULL_PATHNAME" Warn,
    HasDot = "HAS_DOT" Warn,
    HasDotdot = "HAS_DOTDOT" Warn,
    HasDotgit = "HAS_DOTGIT" Warn,
    LargePathname = "LARGE_PATHNAME" Warn,
    NullSha1 = "NULL_SHA1" Warn,
    NulInCommit = "NUL_IN_COMMIT" Warn,
    ZeroPaddedFilemode = "ZERO_PADDED_FILEMODE" Warn,
    BadFilemode = "BAD_FILEMODE" Info,
    BadTagName = "BAD_TAG_NAME" Info,
    EmptyPackedRefsFile = "EMPTY_PACKED_REFS_FILE" Info,
    GitattributesSymlink = "GITATTRIBUTES_SYMLINK" Info,
    GitignoreSymlink = "GITIGNORE_SYMLINK" Info,
    GitmodulesParse = "GITMODULES_PARSE" Info,
    MailmapSymlink = "MAILMAP_SYMLINK" Info,
    MissingTaggerEntry = "MISSING_TAGGER_ENTRY" Info,
    RefMissingNewline = "REF_MISSING_NEWLINE" Info,
    SymlinkRef = "SYMLINK_REF" Info,
    SymrefTargetIsNotARef = "SYMREF_TARGET_IS_NOT_A_REF" Info,
    TrailingRefContent = "TRAILING_REF_CONTENT" Info,
    ExtraHeaderEntry = "EXTRA_HEADER_ENTRY" Ignore,
}

impl Msg {
    /// The id as git prints it: `missingEmail`, `hasDotgit`, …
    pub fn camel_case(self) -> String {
        let snake = TABLE[self as usize].1;
        let mut out = String::with_capacity(snake.len());
        let mut upper = false;
        for c in snake.chars() {
            if c == '_' {
                upper = true;
            } else if upper {
                out.push(c);
                upper = false;
            } else {
                out.push(c.to_ascii_lowercase());
            }
        }
        out
    }

    /// git's built-in severity.
    pub fn default_severity(self) -> Severity {
        TABLE[self as usize].2
    }

    /// Look an id up as git's `parse_msg_id` does: lower case, without underscores
    /// (`missingemail`), which is how config keys arrive.
    pub fn parse(text: &str) -> Option<Msg> {
        TABLE
            .iter()
            .find(|(m, _, _)| m.camel_case().to_ascii_lowercase() == text)
            .map(|(m, _, _)| *m)
    }
}

/// One `receive.fsck.*` entry, in configuration order (git builds its `--strict=` list so).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Setting {
    /// `receive.fsck.<msg-id> = <severity>`; `id` is lower case, both already validated.
    Severity {
        /// The message id as configured (lower case).
        id: String,
        /// `error`, `warn` or `ignore`.
        severity: String,
    },
    /// `receive.fsck.skipList = <path>`.
    SkipList {
        /// The file to read (relative paths are relative to the repository, where git's
        /// receive-pack runs).
        path: std::path::PathBuf,
        /// The value as configured, for messages.
        configured: String,
    },
}

/// Why the checks could not even start; the text is what git's child process dies with.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// A fatal message id was configured below `error`.
    #[error("Cannot demote {id} to {severity}")]
    CannotDemote {
        /// The id as configured.
        id: String,
        /// The severity asked for.
        severity: String,
    },
    /// A skip list could not be opened.
    #[error("could not open object name list: {0}")]
    SkipListOpen(String),
    /// A skip list line is not an object id.
    #[error("invalid object name: {0}")]
    SkipListEntry(String),
    /// An unknown id or severity (validated earlier by the configuration; kept for safety).
    #[error("Unhandled message id: {0}")]
    Unhandled(String),
}

/// The resolved fsck configuration of one push.
#[derive(Debug, Clone)]
pub struct Options {
    severity: Vec<Severity>,
    skip: HashSet<ObjectId>,
}

impl Default for Options {
    /// Strict mode with git's defaults: warnings are errors.
    fn default() -> Self {
        Options {
            severity: TABLE
                .iter()
                .map(|(_, _, s)| {
                    if *s == Severity::Warn {
                        Severity::Error
                    } else {
                        *s
                    }
                })
                .collect(),
            skip: HashSet::new(),
        }
    }
}

impl Options {
    /// Strict mode plus the configured `settings`; relative skip-list paths are relative to
    /// `base` (the repository, where git's receive-pack runs).
    /// Skip-list ids are of the repository's object format `hash`.
    pub fn from_settings(
        settings: &[Setting],
        base: &Path,
        hash: gix_hash::Kind,
    ) -> Result<Self, SetupError> {
        let mut o = Options::default();
        for s in settings {
            match s {
                Setting::Severity { id, severity } => {
                    let msg = Msg::parse(id).ok_or_else(|| SetupError::Unhandled(id.clone()))?;
                    let sev = parse_severity(severity)
                        .ok_or_else(|| SetupError::Unhandled(severity.clone()))?;
                    if sev != Severity::Error && msg.default_severity() == Severity::Fatal {
                        return Err(SetupError::CannotDemote {
                            id: id.clone(),
                            severity: severity.clone(),
                        });
                    }
                    o.severity[msg as usize] = sev;
                }
                Setting::SkipList { path, configured } => {
                    let text = std::fs::read(base.join(path))
                        .map_err(|_| SetupError::SkipListOpen(configured.clone()))?;
                    for line in text.lines() {
                        let line = match line.find_byte(b'#') {
                            Some(i) => &line[..i],
                            None => line,
                        };
                        let line = line.trim();
                        if line.is_empty() {
                            continue;
                        }
                        let id = (line.len() == hash.len_in_hex())
                            .then(|| ObjectId::from_hex(line).ok())
                            .flatten()
                            .ok_or_else(|| {
                                SetupError::SkipListEntry(line.to_str_lossy().into_owned())
                            })?;
                        o.skip.insert(id);
                    }
                }
            }
        }
        Ok(o)
    }

    /// The effective severity of `msg`, as reported (fatal shows as error, info as warning).
    fn reported(&self, msg: Msg) -> Severity {
        match self.severity[msg as usize] {
            Severity::Fatal => Severity::Error,
            Severity::Info => Severity::Warn,
            s => s,
        }
    }
}

/// One line of output, as git's error callback prints it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// `true` for `error:`, `false` for `warning:`.
    pub error: bool,
    /// The message id, if the finding has one.
    pub msg: Option<Msg>,
    /// The whole line without newline: `error: object <oid>: <msgId>: <text>`.
    pub line: String,
}

/// git's `ATTR_MAX_FILE_SIZE` and `ATTR_MAX_LINE_LENGTH`.
const ATTR_MAX_FILE_SIZE: u64 = 100 * 1024 * 1024;
const ATTR_MAX_LINE_LENGTH: usize = 2048;
/// git's `max_tree_entry_len` default.
const MAX_TREE_ENTRY_LEN: usize = 4096;

/// Runs the checks over objects one at a time and collects what they report. A clone checks on
/// another thread: its findings are taken object by object ([`Checker::take_findings`]) and the
/// blobs its trees named handed back with [`Checker::merge_named_blobs`].
#[derive(Debug, Clone)]
pub struct Checker {
    options: Options,
    gitmodules: HashSet<ObjectId>,
    gitattributes: HashSet<ObjectId>,
    done: HashSet<ObjectId>,
    /// Everything reported so far, in order.
    pub findings: Vec<Finding>,
}

impl Checker {
    /// A checker with `options`.
    pub fn new(options: Options) -> Self {
        Checker {
            options,
            gitmodules: HashSet::new(),
            gitattributes: HashSet::new(),
            done: HashSet::new(),
            findings: Vec::new(),
        }
    }

    /// The findings so far, taken out.
    pub fn take_findings(&mut self) -> Vec<Finding> {
        std::mem::take(&mut self.findings)
    }

    /// Add the `.gitmodules` and `.gitattributes` blobs `other`'s trees named (and those it
    /// checked) to this checker's.
    pub fn merge_named_blobs(&mut self, other: &Checker) {
        self.gitmodules.extend(other.gitmodules.iter().copied());
        self.gitattributes.extend(other.gitattributes.iter().copied());
        self.done.extend(other.done.iter().copied());
    }

    /// Whether any finding so far is an error.
    pub fn has_errors(&self) -> bool {
        self.findings.iter().any(|f| f.error)
    }

    /// Report `msg` about `oid`; returns whether it counts as an error.
    fn report(&mut self, oid: &ObjectId, msg: Msg, text: impl std::fmt::Display) -> bool {
        if self.options.skip.contains(oid) {
            return false;
        }
        let sev = self.options.reported(msg);
        if sev == Severity::Ignore {
            return false;
        }
        let error = sev == Severity::Error;
        let line = format!(
            "{}: object {oid}: {}: {text}",
            if error { "error" } else { "warning" },
            msg.camel_case()
        );
        self.findings.push(Finding {
            error,
            msg: Some(msg),
            line,
        });
        error
    }

    /// Report `line` as an error without a message id: one of git's own lines (a too-short
    /// tree, its object table refusing a second meeting of an object as another kind), kept
    /// in order with the findings.
    pub fn plain_error(&mut self, line: String) {
        self.findings.push(Finding {
            error: true,
            msg: None,
            line,
        });
    }

    /// Check one object; returns whether it has errors. Blobs are only checked when a tree
    /// named them `.gitmodules` or `.gitattributes` (see [`Checker::wants_blob`]).
    pub fn check(&mut self, oid: &ObjectId, kind: Kind, data: &[u8]) -> bool {
        match kind {
            Kind::Commit => self.commit(oid, data),
            Kind::Tag => self.tag(oid, data),
            Kind::Tree => self.tree(oid, data),
            Kind::Blob => self.blob(oid, data),
        }
    }

    /// Whether a blob must be read for [`Checker::check`]: a tree named it `.gitmodules` or
    /// `.gitattributes` and it was not checked yet.
    pub fn wants_blob(&self, oid: &ObjectId) -> bool {
        (self.gitmodules.contains(oid) || self.gitattributes.contains(oid))
            && !self.done.contains(oid)
    }

    /// The `.gitmodules` / `.gitattributes` blobs named by checked trees but not checked
    /// themselves yet (git's `fsck_finish` reads them from the repository).
    pub fn pending_blobs(&self) -> Vec<ObjectId> {
        let mut v: Vec<ObjectId> = self
            .gitmodules
            .iter()
            .chain(self.gitattributes.iter())
            .filter(|o| !self.done.contains(*o))
            .copied()
            .collect();
        v.sort();
        v.dedup();
        v
    }

    /// `fsck_finish` for one pending blob that is there: `found` is its kind and data (for a
    /// missing one, [`Checker::blob_missing`]).
    pub fn finish_blob(&mut self, oid: &ObjectId, found: (Kind, &[u8])) -> bool {
        match found {
            (Kind::Blob, data) => self.blob(oid, data),
            (kind, _) => {
                self.done.insert(*oid);
                let mut err = false;
                if self.gitmodules.contains(oid) {
                    err |= self.report(
                        oid,
                        Msg::GitmodulesBlob,
                        format_args!("non-blob found at .gitmodules"),
                    );
                }
                if self.gitattributes.contains(oid) {
                    err |= self.report(
                        oid,
                        Msg::GitattributesBlob,
                        format_args!("non-blob found at .gitattributes"),
                    );
                }
                let _ = kind;
                err
            }
        }
    }

    /// `fsck_finish` for a pending blob the repository lacks too: `gitmodulesMissing` /
    /// `gitattributesMissing` (`unable to read .gitmodules blob`). index-pack's error callback
    /// does not report a missing `.gitmodules` but prints its id on stdout (for `git fetch`
    /// to fetch it), which receive-pack does not expect: with `index_pack`, the second part
    /// says whether that id was printed (the finding neither ignored nor on the skip list).
    pub fn blob_missing(&mut self, oid: &ObjectId, index_pack: bool) -> (bool, bool) {
        self.done.insert(*oid);
        let (mut err, mut printed) = (false, false);
        if self.gitmodules.contains(oid) {
            if index_pack {
                printed = !self.options.skip.contains(oid)
                    && self.options.reported(Msg::GitmodulesMissing) != Severity::Ignore;
            } else {
                err |= self.report(oid, Msg::GitmodulesMissing, "unable to read .gitmodules blob");
            }
        }
        if self.gitattributes.contains(oid) {
            err |= self.report(
                oid,
                Msg::GitattributesMissing,
                "unable to read .gitattributes blob",
            );
        }
        (err, printed)
    }

    /// A blob too large to read (its size is known): git's `*Large` findings.
    pub fn blob_too_large(&mut self, oid: &ObjectId) -> bool {
        self.done.insert(*oid);
        let mut err = false;
        if self.gitmodules.contains(oid) {
            err |= self.report(oid, Msg::GitmodulesLarge, ".gitmodules too large to parse");
        }
        if self.gitattributes.contains(oid) {
            err |= self.report(
                oid,
                Msg::GitattributesLarge,
                ".gitattributes too large to parse",
            );
        }
        err
    }

    fn blob(&mut self, oid: &ObjectId, data: &[u8]) -> bool {
        if self.options.skip.contains(oid) {
            return false;
        }
        let mut err = false;
        if self.gitmodules.contains(oid) {
            self.done.insert(*oid);
            err |= self.gitmodules_blob(oid, data);
        }
        if self.gitattributes.contains(oid) {
            self.done.insert(*oid);
            if data.len() as u64 > ATTR_MAX_FILE_SIZE {
                return self.report(
                    oid,
                    Msg::GitattributesLarge,
                    ".gitattributes too large to parse",
                ) || err;
            }
            // git scans up to the first NUL.
            let text = match data.find_byte(0) {
                Some(n) => &data[..n],
                None => data,
            };
            if text.lines_with_terminator().any(|l| {
                let l = l.strip_suffix(b"\n").unwrap_or(l);
                l.len() >= ATTR_MAX_LINE_LENGTH
            }) {
                err |= self.report(
                    oid,
                    Msg::GitattributesLineLength,
                    ".gitattributes has too long lines to parse",
                );
            }
        }
        err
    }

    fn gitmodules_blob(&mut self, oid: &ObjectId, data: &[u8]) -> bool {
        use crate::objects::gitmodules::Finding;
        let mut err = false;
        for finding in crate::objects::gitmodules::check(data) {
            let (msg, text) = match finding {
                Finding::Name(n) => (
                    Msg::GitmodulesName,
                    format!("disallowed submodule name: {}", n.as_bstr()),
                ),
                Finding::Url(u) => (
                    Msg::GitmodulesUrl,
                    format!("disallowed submodule url: {}", u.as_bstr()),
                ),
                Finding::Path(p) => (
                    Msg::GitmodulesPath,
                    format!("disallowed submodule path: {}", p.as_bstr()),
                ),
                Finding::Update(u) => (
                    Msg::GitmodulesUpdate,
                    format!("disallowed submodule update setting: {}", u.as_bstr()),
                ),
                Finding::Parse => (
                    Msg::GitmodulesParse,
                    "could not parse gitmodules blob".to_owned(),
                ),
            };
            err |= self.report(oid, msg, text);
        }
        err
    }

    /// git's `verify_headers`: a NUL in the header or a missing final newline is fatal.
    /// `Some(error)` when parsing must stop there.
    fn verify_headers(&mut self, oid: &ObjectId, data: &[u8]) -> Option<bool> {
        for (i, &b) in data.iter().enumerate() {
            match b {
                0 => {
                    return Some(self.report(
                        oid,
                        Msg::NulInHeader,
                        format_args!("unterminated header: NUL at offset {i}"),
                    ));
                }
                b'\n' if data.get(i + 1) == Some(&b'\n') => return None,
                _ => {}
            }
        }
        if data.last() == Some(&b'\n') {
            return None;
        }
        Some(self.report(oid, Msg::UnterminatedHeader, "unterminated header"))
    }

    fn commit(&mut self, oid: &ObjectId, data: &[u8]) -> bool {
        if let Some(err) = self.verify_headers(oid, data) {
            return err;
        }
        let mut rest = data;
        let Some(r) = rest.strip_prefix(b"tree ") else {
            return self.report(
                oid,
                Msg::MissingTree,
                "invalid format - expected 'tree' line",
            );
        };
        rest = r;
        if !hex_line(rest, oid.kind())
            && self.report(
                oid,
                Msg::BadTreeSha1,
                "invalid 'tree' line format - bad sha1",
            )
        {
            return true;
        }
        rest = after_newline(rest);
        while let Some(r) = rest.strip_prefix(b"parent ") {
            if !hex_line(r, oid.kind())
                && self.report(
                    oid,
                    Msg::BadParentSha1,
                    "invalid 'parent' line format - bad sha1",
                )
            {
                return true;
            }
            rest = after_newline(r);
        }
        let mut authors = 0;
        while let Some(r) = rest.strip_prefix(b"author ") {
            authors += 1;
            let (err, next) = self.ident(oid, r);
            if err {
                return true;
            }
            rest = next;
        }
        if authors < 1 {
            return self.report(
                oid,
                Msg::MissingAuthor,
                "invalid format - expected 'author' line",
            );
        }
        if authors > 1
            && self.report(
                oid,
                Msg::MultipleAuthors,
                "invalid format - multiple 'author' lines",
            )
        {
            return true;
        }
        let Some(r) = rest.strip_prefix(b"committer ") else {
            return self.report(
                oid,
                Msg::MissingCommitter,
                "invalid format - expected 'committer' line",
            );
        };
        let (err, _) = self.ident(oid, r);
        if err {
            return true;
        }
        if data.contains(&0) {
            return self.report(oid, Msg::NulInCommit, "NUL byte in the commit object body");
        }
        false
    }

    /// git's `fsck_ident` on the rest of an author/committer/tagger line; returns whether it
    /// reported an error and the input after the line.
    fn ident<'a>(&mut self, oid: &ObjectId, input: &'a [u8]) -> (bool, &'a [u8]) {
        let nl = input.find_byte(b'\n').unwrap_or(input.len());
        let line = &input[..nl];
        let next = input.get(nl + 1..).unwrap_or(&[]);
        (self.ident_line(oid, line), next)
    }

    fn ident_line(&mut self, oid: &ObjectId, line: &[u8]) -> bool {
        // The line ends in '\n' in git's buffer; `at` reads that newline past the end.
        let at = |i: usize| line.get(i).copied().unwrap_or(b'\n');
        const PRE: &str = "invalid author/committer line - ";
        if at(0) == b'<' {
            return self.report(
                oid,
                Msg::MissingNameBeforeEmail,
                format_args!("{PRE}missing space before email"),
            );
        }
        let mut p = 0;
        loop {
            match at(p) {
                b'\n' => {
                    return self.report(oid, Msg::MissingEmail, format_args!("{PRE}missing email"));
                }
                b'>' => return self.report(oid, Msg::BadName, format_args!("{PRE}bad name")),
                b'<' => break,
                _ => p += 1,
            }
        }
        if p == 0 || at(p - 1) != b' ' {
            return self.report(
                oid,
                Msg::MissingSpaceBeforeEmail,
                format_args!("{PRE}missing space before email"),
            );
        }
        p += 1;
        loop {
            match at(p) {
                b'<' | b'\n' => {
                    return self.report(oid, Msg::BadEmail, format_args!("{PRE}bad email"));
                }
                b'>' => break,
                _ => p += 1,
            }
        }
        p += 1;
        if at(p) != b' ' {
            return self.report(
                oid,
                Msg::MissingSpaceBeforeDate,
                format_args!("{PRE}missing space before date"),
            );
        }
        p += 1;
        while at(p) == b' ' || at(p) == b'\t' {
            p += 1;
        }
        if !at(p).is_ascii_digit() {
            return self.report(oid, Msg::BadDate, format_args!("{PRE}bad date"));
        }
        if at(p) == b'0' && at(p + 1) != b' ' {
            return self.report(
                oid,
                Msg::ZeroPaddedDate,
                format_args!("{PRE}zero-padded date"),
            );
        }
        let start = p;
        while at(p).is_ascii_digit() {
            p += 1;
        }
        // git gives up at 23 digits (TIME_MAX), and time_t is signed 64-bit.
        let overflow = p - start > 23
            || std::str::from_utf8(&line[start..p])
                .ok()
                .and_then(|d| d.parse::<u64>().ok())
                .is_none_or(|t| t > i64::MAX as u64);
        if overflow {
            return self.report(
                oid,
                Msg::BadDateOverflow,
                format_args!("{PRE}date causes integer overflow"),
            );
        }
        if at(p) != b' ' {
            return self.report(oid, Msg::BadDate, format_args!("{PRE}bad date"));
        }
        p += 1;
        if !matches!(at(p), b'+' | b'-')
            || !(1..=4).all(|i| at(p + i).is_ascii_digit())
            || at(p + 5) != b'\n'
        {
            return self.report(oid, Msg::BadTimezone, format_args!("{PRE}bad time zone"));
        }
        false
    }

    fn tag(&mut self, oid: &ObjectId, data: &[u8]) -> bool {
        if let Some(err) = self.verify_headers(oid, data) {
            return err;
        }
        let Some(r) = data.strip_prefix(b"object ") else {
            return self.report(
                oid,
                Msg::MissingObject,
                "invalid format - expected 'object' line",
            );
        };
        if !hex_line(r, oid.kind())
            && self.report(
                oid,
                Msg::BadObjectSha1,
                "invalid 'object' line format - bad sha1",
            )
        {
            return true;
        }
        let rest = after_newline(r);
        let Some(r) = rest.strip_prefix(b"type ") else {
            return self.report(
                oid,
                Msg::MissingTypeEntry,
                "invalid format - expected 'type' line",
            );
        };
        let Some(eol) = r.find_byte(b'\n') else {
            return self.report(
                oid,
                Msg::MissingType,
                "invalid format - unexpected end after 'type' line",
            );
        };
        if !matches!(&r[..eol], b"commit" | b"tree" | b"blob" | b"tag")
            && self.report(oid, Msg::BadType, "invalid 'type' value")
        {
            return true;
        }
        let rest = &r[eol + 1..];
        let Some(r) = rest.strip_prefix(b"tag ") else {
            return self.report(
                oid,
                Msg::MissingTagEntry,
                "invalid format - expected 'tag' line",
            );
        };
        let Some(eol) = r.find_byte(b'\n') else {
            return self.report(
                oid,
                Msg::MissingTag,
                "invalid format - unexpected end after 'type' line",
            );
        };
        let name = &r[..eol];
        let mut full = b"refs/tags/".to_vec();
        full.extend_from_slice(name);
        if gix_validate::reference::name(full.as_bstr()).is_err()
            && self.report(
                oid,
                Msg::BadTagName,
                format_args!("invalid 'tag' name: {}", name.as_bstr()),
            )
        {
            return true;
        }
        let mut rest = &r[eol + 1..];
        match rest.strip_prefix(b"tagger ") {
            None => {
                if self.report(
                    oid,
                    Msg::MissingTaggerEntry,
                    "invalid format - expected 'tagger' line",
                ) {
                    return true;
                }
            }
            Some(r) => {
                let (err, next) = self.ident(oid, r);
                if err {
                    return true;
                }
                rest = next;
            }
        }
        let sig = rest
            .strip_prefix(b"gpgsig ")
            .or_else(|| rest.strip_prefix(b"gpgsig-sha256 "));
        if let Some(r) = sig {
            let Some(eol) = r.find_byte(b'\n') else {
                return self.report(
                    oid,
                    Msg::BadGpgsig,
                    "invalid format - unexpected end after 'gpgsig' or 'gpgsig-sha256' line",
                );
            };
            rest = &r[eol + 1..];
            while rest.first() == Some(&b' ') {
                let Some(eol) = rest.find_byte(b'\n') else {
                    return self.report(
                        oid,
                        Msg::BadHeaderContinuation,
                        "invalid format - unexpected end in 'gpgsig' or 'gpgsig-sha256' continuation line",
                    );
                };
                rest = &rest[eol + 1..];
            }
        }
        if !rest.is_empty() && rest[0] != b'\n' {
            return self.report(
                oid,
                Msg::ExtraHeaderEntry,
                "invalid format - extra header(s) after 'tagger'",
            );
        }
        false
    }

    fn tree(&mut self, oid: &ObjectId, data: &[u8]) -> bool {
        let mut flags = TreeFlags::default();
        let mut prev: Option<(u32, &[u8])> = None;
        let mut candidates: Vec<&[u8]> = Vec::new();
        let mut err = false;
        let mut rest = data;
        while !rest.is_empty() {
            let entry = match tree_entry(rest, oid.kind()) {
                Ok(entry) => entry,
                Err(bad) => {
                    self.plain_error(format!("error: {bad}"));
                    err |= self.report(oid, Msg::BadTree, "cannot be parsed as a tree");
                    if prev.is_none() {
                        return err;
                    }
                    break;
                }
            };
            let TreeEntry {
                mode,
                name,
                id,
                raw_mode,
                len,
            } = entry;
            flags.null_sha1 |= id.iter().all(|&b| b == 0);
            flags.full_path |= name.contains(&b'/');
            flags.empty_name |= name.is_empty();
            flags.dot |= name == b".";
            flags.dotdot |= name == b"..";
            flags.dotgit |= is_hfs_dotgit(name) || is_ntfs_dotgit(name);
            flags.zero_pad |= raw_mode.first() == Some(&b'0');
            flags.large_name |= name.len() > MAX_TREE_ENTRY_LEN;
            let entry_oid = oid_of(id);
            let is_link = mode & 0o170000 == 0o120000;
            if is_hfs_dot(name, "gitmodules") || is_ntfs_dot(name, "gitmodules", "gi7eba") {
                if !is_link {
                    self.gitmodules.insert(entry_oid);
                } else {
                    err |= self.report(
                        oid,
                        Msg::GitmodulesSymlink,
                        ".gitmodules is a symbolic link",
                    );
                }
            }
            if is_hfs_dot(name, "gitattributes") || is_ntfs_dot(name, "gitattributes", "gi7d29") {
                if !is_link {
                    self.gitattributes.insert(entry_oid);
                } else {
                    err |= self.report(
                        oid,
                        Msg::GitattributesSymlink,
                        ".gitattributes is a symlink",
                    );
                }
            }
            if is_link {
                if is_hfs_dot(name, "gitignore") || is_ntfs_dot(name, "gitignore", "gi250a") {
                    err |= self.report(oid, Msg::GitignoreSymlink, ".gitignore is a symlink");
                }
                if is_hfs_dot(name, "mailmap") || is_ntfs_dot(name, "mailmap", "maba30") {
                    err |= self.report(oid, Msg::MailmapSymlink, ".mailmap is a symlink");
                }
            }
            let mut bs = name;
            while let Some(i) = bs.find_byte(b'\\') {
                bs = &bs[i + 1..];
                flags.dotgit |= is_ntfs_dotgit(bs);
                if is_ntfs_dot(bs, "gitmodules", "gi7eba") {
                    if !is_link {
                        self.gitmodules.insert(entry_oid);
                    } else {
                        err |= self.report(
                            oid,
                            Msg::GitmodulesSymlink,
                            ".gitmodules is a symbolic link",
                        );
                    }
                }
            }
            match mode {
                0o100755 | 0o100644 | 0o120000 | 0o040000 | 0o160000 => {}
                _ => flags.bad_modes = true,
            }
            if let Some((pmode, pname)) = prev {
                match verify_ordered(pmode, pname, mode, name, &mut candidates) {
                    Order::Unordered => flags.unsorted = true,
                    Order::Dups => flags.dups = true,
                    Order::Ok => {}
                }
            }
            prev = Some((mode, name));
            rest = &rest[len..];
        }
        let checks: [(bool, Msg, &str); 11] = [
            (
                flags.null_sha1,
                Msg::NullSha1,
                "contains entries pointing to null sha1",
            ),
            (
                flags.full_path,
                Msg::FullPathname,
                "contains full pathnames",
            ),
            (flags.empty_name, Msg::EmptyName, "contains empty pathname"),
            (flags.dot, Msg::HasDot, "contains '.'"),
            (flags.dotdot, Msg::HasDotdot, "contains '..'"),
            (flags.dotgit, Msg::HasDotgit, "contains '.git'"),
            (
                flags.zero_pad,
                Msg::ZeroPaddedFilemode,
                "contains zero-padded file modes",
            ),
            (flags.bad_modes, Msg::BadFilemode, "contains bad file modes"),
            (
                flags.dups,
                Msg::DuplicateEntries,
                "contains duplicate file entries",
            ),
            (flags.unsorted, Msg::TreeNotSorted, "not properly sorted"),
            (
                flags.large_name,
                Msg::LargePathname,
                "contains excessively large pathname",
            ),
        ];
        for (set, msg, text) in checks {
            if set {
                err |= self.report(oid, msg, text);
            }
        }
        err
    }
}

#[derive(Default)]
struct TreeFlags {
    null_sha1: bool,
    full_path: bool,
    empty_name: bool,
    dot: bool,
    dotdot: bool,
    dotgit: bool,
    zero_pad: bool,
    bad_modes: bool,
    dups: bool,
    unsorted: bool,
    large_name: bool,
}

/// One raw tree entry as git's `decode_tree_entry` reads it.
pub struct TreeEntry<'a> {
    /// The mode, as git keeps it (16 bits).
    pub mode: u32,
    /// The name.
    pub name: &'a [u8],
    /// The raw object id (20 bytes for SHA-1, 32 for SHA-256).
    pub id: &'a [u8],
    /// The mode's digits as written.
    pub raw_mode: &'a [u8],
    /// The entry's length in the tree.
    pub len: usize,
}

/// Why git's `decode_tree_entry` refuses the entry at the start of what is left of a tree, in
/// its words.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum BadEntry {
    /// Fewer bytes left than the smallest entry, or no NUL where the last entry's name ends.
    #[error("too-short tree object")]
    TooShort,
    /// The mode is not octal digits up to a space.
    #[error("malformed mode in tree entry")]
    MalformedMode,
    /// The name is empty.
    #[error("empty filename in tree entry")]
    EmptyName,
}

/// The tree entry at the start of `buf` in a tree of `hash` ids, or why git refuses it.
pub fn tree_entry(buf: &[u8], hash: gix_hash::Kind) -> Result<TreeEntry<'_>, BadEntry> {
    let hashsz = hash.len_in_bytes();
    if buf.len() < hashsz + 3 || buf[buf.len() - (hashsz + 1)] != 0 {
        return Err(BadEntry::TooShort);
    }
    if buf[0] == b' ' {
        return Err(BadEntry::MalformedMode);
    }
    let sp = buf.find_byte(b' ').ok_or(BadEntry::MalformedMode)?;
    let raw_mode = &buf[..sp];
    let mut mode: u32 = 0;
    for &c in raw_mode {
        if !(b'0'..=b'7').contains(&c) {
            return Err(BadEntry::MalformedMode);
        }
        // git keeps the mode in 16 bits.
        mode = ((mode << 3) + u32::from(c - b'0')) & 0xffff;
    }
    let name_start = sp + 1;
    // There is a NUL before the last id (checked above), so before this entry's id.
    let nul = name_start
        + buf[name_start..]
            .find_byte(0)
            .ok_or(BadEntry::TooShort)?;
    let name = &buf[name_start..nul];
    if name.is_empty() {
        return Err(BadEntry::EmptyName);
    }
    let id = buf
        .get(nul + 1..nul + 1 + hashsz)
        .ok_or(BadEntry::TooShort)?;
    Ok(TreeEntry {
        mode,
        name,
        id,
        raw_mode,
        len: nul + 1 + hashsz,
    })
}

/// Why git's `parse_object_buffer` refuses a commit or tag before any fsck check runs
/// (index-pack and unpack-objects then die with `invalid <type>`; the walk with `bad object`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unparsable {
    /// No `tree <hex>` line first (`parse_commit_buffer`'s `bogus commit object`).
    BogusCommit,
    /// The `tree` line's id is not hex (`bad tree pointer in commit`).
    BadTreePointer,
    /// A `parent` line is cut short or not hex (`bad parents in commit`).
    BadParents,
    /// The tag's `type` names no kind of object (`unknown tag type '<type>'`).
    UnknownTagType(gix_object::bstr::BString),
    /// A tag without the `object`, `type` and `tag` lines git wants: refused without a word.
    MalformedTag,
}

impl Unparsable {
    /// The `error:` line git prints about the object `oid`, if it prints one.
    pub fn error_line(&self, oid: &ObjectId) -> Option<String> {
        match self {
            Unparsable::BogusCommit => Some(format!("error: bogus commit object {oid}")),
            Unparsable::BadTreePointer => Some(format!("error: bad tree pointer in commit {oid}")),
            Unparsable::BadParents => Some(format!("error: bad parents in commit {oid}")),
            Unparsable::UnknownTagType(t) => Some(format!("error: unknown tag type '{t}' in {oid}")),
            Unparsable::MalformedTag => None,
        }
    }
}

/// Whether git's `parse_object_buffer` parses `data` as a `kind` of the object format `hash`
/// (trees and blobs are not parsed there).
pub fn parse(kind: Kind, data: &[u8], hash: gix_hash::Kind) -> Result<(), Unparsable> {
    let hex = hash.len_in_hex();
    match kind {
        Kind::Commit => {
            // parse_commit_buffer: "tree <hex>\n", then well-formed parent lines.
            let (tree_line, parent_line) = (5 + hex + 1, 7 + hex + 1);
            if data.len() <= tree_line
                || !data.starts_with(b"tree ")
                || data[tree_line - 1] != b'\n'
            {
                return Err(Unparsable::BogusCommit);
            }
            if !data[5..5 + hex].iter().all(u8::is_ascii_hexdigit) {
                return Err(Unparsable::BadTreePointer);
            }
            let mut rest = &data[tree_line..];
            while rest.len() > parent_line - 1 && rest.starts_with(b"parent ") {
                if rest.len() <= parent_line
                    || !rest[7..7 + hex].iter().all(u8::is_ascii_hexdigit)
                    || rest[7 + hex] != b'\n'
                {
                    return Err(Unparsable::BadParents);
                }
                rest = &rest[parent_line..];
            }
            Ok(())
        }
        Kind::Tag => {
            // parse_tag_buffer.
            let malformed = Unparsable::MalformedTag;
            if data.len() < hex + 24 {
                return Err(malformed);
            }
            let r = data.strip_prefix(b"object ").ok_or(Unparsable::MalformedTag)?;
            if !hex_line(r, hash) {
                return Err(malformed);
            }
            let r = r[hex + 1..]
                .strip_prefix(b"type ")
                .ok_or(Unparsable::MalformedTag)?;
            let nl = r.find_byte(b'\n').ok_or(Unparsable::MalformedTag)?;
            if nl >= 20 {
                return Err(malformed);
            }
            let t = &r[..nl];
            if !matches!(t, b"blob" | b"tree" | b"commit" | b"tag") {
                return Err(Unparsable::UnknownTagType(t.into()));
            }
            let r = &r[nl + 1..];
            if !(r.len() > 4 && r.starts_with(b"tag ")) || r[4..].find_byte(b'\n').is_none() {
                return Err(malformed);
            }
            Ok(())
        }
        Kind::Tree | Kind::Blob => Ok(()),
    }
}

/// Why an object's links cannot all be read (git's walk refuses it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unlinkable {
    /// A commit or tag git does not parse.
    Unparsable(Unparsable),
    /// A tree entry git's tree walker refuses.
    BadEntry(BadEntry),
}

/// The object ids a commit, tree or tag links to with the kind each must have (git's
/// `fsck_walk`; gitlinks are not followed), in the object's order, or why the object cannot be
/// read that far. Raw bytes, as git reads them: modes and idents are not judged here. `hash` is
/// the object format of the ids in `data`.
pub fn links(
    kind: Kind,
    data: &[u8],
    hash: gix_hash::Kind,
) -> Result<Vec<(ObjectId, Kind)>, Unlinkable> {
    let mut out = Vec::new();
    for_each_link(kind, data, hash, |id, kind| out.push((id, kind)))?;
    Ok(out)
}

/// [`links`] without collecting them: `visit` is called with each link in the object's order
/// (for a tree with a bad entry, the links before it were visited).
pub fn for_each_link(
    kind: Kind,
    data: &[u8],
    hash: gix_hash::Kind,
    mut visit: impl FnMut(ObjectId, Kind),
) -> Result<(), Unlinkable> {
    // What git's `parse_commit_buffer` / `parse_tag_buffer` refuse does not parse, whatever
    // links could be read from it; what they take has the lines read below.
    parse(kind, data, hash).map_err(Unlinkable::Unparsable)?;
    match kind {
        Kind::Blob => {}
        Kind::Tree => {
            let mut rest = data;
            while !rest.is_empty() {
                let TreeEntry { mode, id, len, .. } =
                    tree_entry(rest, hash).map_err(Unlinkable::BadEntry)?;
                let kind = match mode & 0o170000 {
                    0o040000 => Some(Kind::Tree),
                    0o100000 | 0o120000 => Some(Kind::Blob),
                    _ => None,
                };
                if let Some(kind) = kind {
                    visit(oid_of(id), kind);
                }
                rest = &rest[len..];
            }
        }
        Kind::Commit => {
            let bogus = || Unlinkable::Unparsable(Unparsable::BogusCommit);
            let r = data.strip_prefix(b"tree ").ok_or_else(bogus)?;
            visit(hex_id(r, hash).ok_or_else(bogus)?, Kind::Tree);
            let mut rest = after_newline(r);
            while let Some(r) = rest.strip_prefix(b"parent ") {
                visit(
                    hex_id(r, hash).ok_or(Unlinkable::Unparsable(Unparsable::BadParents))?,
                    Kind::Commit,
                );
                rest = after_newline(r);
            }
        }
        Kind::Tag => {
            let malformed = || Unlinkable::Unparsable(Unparsable::MalformedTag);
            let r = data.strip_prefix(b"object ").ok_or_else(malformed)?;
            let id = hex_id(r, hash).ok_or_else(malformed)?;
            let t = after_newline(r).strip_prefix(b"type ").ok_or_else(malformed)?;
            let t = &t[..t.find_byte(b'\n').ok_or_else(malformed)?];
            visit(id, Kind::from_bytes(t).map_err(|_| malformed())?);
        }
    }
    Ok(())
}

/// The id of a raw tree entry hash ([`tree_entry`] guarantees a hash's length).
fn oid_of(raw: &[u8]) -> ObjectId {
    ObjectId::try_from(raw).expect("tree_entry returns a hash's length")
}

fn hex_id(r: &[u8], hash: gix_hash::Kind) -> Option<ObjectId> {
    if hex_line(r, hash) {
        ObjectId::from_hex(&r[..hash.len_in_hex()]).ok()
    } else {
        None
    }
}

/// A `hash` id in hex followed by a newline (git's `parse_oid_hex` then `*p == '\n'`).
fn hex_line(r: &[u8], hash: gix_hash::Kind) -> bool {
    let n = hash.len_in_hex();
    r.len() > n && r[..n].iter().all(u8::is_ascii_hexdigit) && r[n] == b'\n'
}

fn after_newline(r: &[u8]) -> &[u8] {
    match r.find_byte(b'\n') {
        Some(i) => &r[i + 1..],
        None => &[],
    }
}

enum Order {
    Ok,
    Unordered,
    Dups,
}

fn is_less_than_slash(c: u8) -> bool {
    c != 0 && c < b'/'
}

/// git's `verify_ordered`, with its stack of file names that may collide with a later
/// directory of the same name.
fn verify_ordered<'a>(
    mode1: u32,
    name1: &'a [u8],
    mode2: u32,
    name2: &'a [u8],
    candidates: &mut Vec<&'a [u8]>,
) -> Order {
    let len = name1.len().min(name2.len());
    match name1[..len].cmp(&name2[..len]) {
        std::cmp::Ordering::Less => return Order::Ok,
        std::cmp::Ordering::Greater => return Order::Unordered,
        std::cmp::Ordering::Equal => {}
    }
    let mut c1 = name1.get(len).copied().unwrap_or(0);
    let mut c2 = name2.get(len).copied().unwrap_or(0);
    if c1 == 0 && c2 == 0 {
        return Order::Dups;
    }
    let is_dir = |m: u32| m & 0o170000 == 0o040000;
    if c1 == 0 && is_dir(mode1) {
        c1 = b'/';
    }
    if c2 == 0 && is_dir(mode2) {
        c2 = b'/';
    }
    if c1 == 0 && is_less_than_slash(c2) {
        candidates.push(name1);
    } else if c2 == b'/' && is_less_than_slash(c1) {
        while let Some(f) = candidates.pop() {
            let Some(p) = name2.strip_prefix(f) else {
                continue;
            };
            if p.is_empty() {
                return Order::Dups;
            }
            if is_less_than_slash(p[0]) {
                candidates.push(f);
                break;
            }
        }
    }
    if c1 < c2 { Order::Ok } else { Order::Unordered }
}

/// One UTF-8 character as git's `pick_one_utf8_char`; `None` for malformed input, `Some(0)` at
/// the end.
fn next_utf8(s: &mut &[u8]) -> Option<u32> {
    let b = |i: usize| s.get(i).copied().unwrap_or(0);
    let s0 = b(0);
    let (ch, incr) = if s0 < 0x80 {
        (u32::from(s0), 1)
    } else if s0 & 0xe0 == 0xc0 {
        if b(1) & 0xc0 != 0x80 || s0 & 0xfe == 0xc0 {
            return None;
        }
        ((u32::from(s0 & 0x1f) << 6) | u32::from(b(1) & 0x3f), 2)
    } else if s0 & 0xf0 == 0xe0 {
        if b(1) & 0xc0 != 0x80
            || b(2) & 0xc0 != 0x80
            || (s0 == 0xe0 && b(1) & 0xe0 == 0x80)
            || (s0 == 0xed && b(1) & 0xe0 == 0xa0)
            || (s0 == 0xef && b(1) == 0xbf && b(2) & 0xfe == 0xbe)
        {
            return None;
        }
        (
            (u32::from(s0 & 0x0f) << 12) | (u32::from(b(1) & 0x3f) << 6) | u32::from(b(2) & 0x3f),
            3,
        )
    } else if s0 & 0xf8 == 0xf0 {
        if b(1) & 0xc0 != 0x80
            || b(2) & 0xc0 != 0x80
            || b(3) & 0xc0 != 0x80
            || (s0 == 0xf0 && b(1) & 0xf0 == 0x80)
            || (s0 == 0xf4 && b(1) > 0x8f)
            || s0 > 0xf4
        {
            return None;
        }
        (
            (u32::from(s0 & 0x07) << 18)
                | (u32::from(b(1) & 0x3f) << 12)
                | (u32::from(b(2) & 0x3f) << 6)
                | u32::from(b(3) & 0x3f),
            4,
        )
    } else {
        return None;
    };
    *s = s.get(incr..).unwrap_or(&[]);
    Some(ch)
}

/// git's `next_hfs_char`: the next character HFS+ does not ignore; 0 for the end or for
/// malformed UTF-8.
fn next_hfs_char(s: &mut &[u8]) -> u32 {
    loop {
        let Some(c) = next_utf8(s) else {
            *s = &[];
            return 0;
        };
        match c {
            0x200c..=0x200f | 0x202a..=0x202e | 0x206a..=0x206f | 0xfeff => continue,
            _ => return c,
        }
    }
}

/// git's `is_hfs_dot_generic`: `.<needle>` as HFS+ would see it.
fn is_hfs_dot(path: &[u8], needle: &str) -> bool {
    let mut s = path;
    if next_hfs_char(&mut s) != u32::from(b'.') {
        return false;
    }
    for &n in needle.as_bytes() {
        let c = next_hfs_char(&mut s);
        if c > 127 || (c as u8).to_ascii_lowercase() != n {
            return false;
        }
    }
    let c = next_hfs_char(&mut s);
    c == 0 || c == u32::from(b'/')
}

/// git's `is_hfs_dotgit`.
pub fn is_hfs_dotgit(path: &[u8]) -> bool {
    is_hfs_dot(path, "git")
}

/// git's `is_ntfs_dotgit`: `.git`, `git~1`, followed by spaces and dots, and/or an alternate
/// data stream, or a directory separator.
pub fn is_ntfs_dotgit(name: &[u8]) -> bool {
    let at = |i: usize| name.get(i).copied().unwrap_or(0);
    let mut i;
    if at(0) == b'.' {
        if !at(1).eq_ignore_ascii_case(&b'g')
            || !at(2).eq_ignore_ascii_case(&b'i')
            || !at(3).eq_ignore_ascii_case(&b't')
        {
            return false;
        }
        i = 4;
    } else if at(0).eq_ignore_ascii_case(&b'g') {
        if !at(1).eq_ignore_ascii_case(&b'i')
            || !at(2).eq_ignore_ascii_case(&b't')
            || at(3) != b'~'
            || at(4) != b'1'
        {
            return false;
        }
        i = 5;
    } else {
        return false;
    }
    loop {
        let c = at(i);
        i += 1;
        if c == 0 || c == b'/' || c == b'\\' || c == b':' {
            return true;
        }
        if c != b'.' && c != b' ' {
            return false;
        }
    }
}

/// git's `is_ntfs_dot_generic` (`.gitmodules`, its short names `gitmod~1` and `gi7eba~1`, …).
fn is_ntfs_dot(name: &[u8], dotgit_name: &str, shortname_prefix: &str) -> bool {
    let at = |i: usize| name.get(i).copied().unwrap_or(0);
    let only_spaces_and_periods = |mut i: usize| loop {
        let c = at(i);
        i += 1;
        if c == 0 || c == b':' {
            return true;
        }
        if c != b' ' && c != b'.' {
            return false;
        }
    };
    let needle = dotgit_name.as_bytes();
    let len = needle.len();
    if at(0) == b'.' && name.len() > len && name[1..=len].eq_ignore_ascii_case(needle) {
        return only_spaces_and_periods(len + 1);
    }
    if name.len() >= 8
        && name[..6].eq_ignore_ascii_case(&needle[..6])
        && at(6) == b'~'
        && (b'1'..=b'4').contains(&at(7))
    {
        return only_spaces_and_periods(8);
    }
    let prefix = shortname_prefix.as_bytes();
    let mut saw_tilde = false;
    let mut i = 0;
    while i < 8 {
        let c = at(i);
        if c == 0 {
            return false;
        } else if saw_tilde {
            if !c.is_ascii_digit() {
                return false;
            }
        } else if c == b'~' {
            i += 1;
            if !(b'1'..=b'9').contains(&at(i)) {
                return false;
            }
            saw_tilde = true;
        } else if i >= 6 || c & 0x80 != 0 || c.to_ascii_lowercase() != prefix[i] {
            return false;
        }
        i += 1;
    }
    only_spaces_and_periods(8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_gits() {
        assert_eq!(Msg::MissingEmail.camel_case(), "missingEmail");
        assert_eq!(Msg::HasDotdot.camel_case(), "hasDotdot");
        assert_eq!(Msg::BadObjectSha1.camel_case(), "badObjectSha1");
        assert_eq!(
            Msg::parse("zeropaddedfilemode"),
            Some(Msg::ZeroPaddedFilemode)
        );
        assert_eq!(Msg::parse("whatever"), None);
    }

    #[test]
    fn dotgit_variants() {
        for n in [
            ".git",
            ".GIT",
            ".git.",
            ".git ",
            "git~1",
            ".git::$INDEX_ALLOCATION",
        ] {
            assert!(is_ntfs_dotgit(n.as_bytes()), "{n}");
        }
        assert!(is_hfs_dotgit(".g\u{200c}it".as_bytes()));
        assert!(is_hfs_dotgit(".Git".as_bytes()));
        assert!(!is_hfs_dotgit(b".gitx"));
        assert!(!is_ntfs_dotgit(b".gitx"));
        assert!(is_ntfs_dot(b"gitmod~1", "gitmodules", "gi7eba"));
        assert!(is_ntfs_dot(b"GI7EBA~1", "gitmodules", "gi7eba"));
        assert!(is_ntfs_dot(b".gitmodules ..", "gitmodules", "gi7eba"));
        assert!(!is_ntfs_dot(b".gitmodulesx", "gitmodules", "gi7eba"));
    }

    fn findings(kind: Kind, data: &[u8]) -> Vec<String> {
        let mut c = Checker::new(Options::default());
        c.check(&ObjectId::null(gix_hash::Kind::Sha1), kind, data);
        c.findings.into_iter().map(|f| f.line).collect()
    }

    #[test]
    fn commit_idents() {
        let tree = "4b825dc642cb6eb9a060e54bf8d69288fbee4904";
        let f = findings(
            Kind::Commit,
            format!(
                "tree {tree}\nauthor Bugs Bunny 1234567890 +0000\ncommitter B <b@b> 1 +0000\n\nx\n"
            )
            .as_bytes(),
        );
        assert_eq!(
            f,
            vec![
                "error: object 0000000000000000000000000000000000000000: missingEmail: invalid author/committer line - missing email"
            ]
        );
        for (ident, id) in [
            ("A <a@b> 0123 +0000", "zeroPaddedDate"),
            ("A <a@b> 1 +00000", "badTimezone"),
            ("A <a@b>1 +0000", "missingSpaceBeforeDate"),
            ("A<a@b> 1 +0000", "missingSpaceBeforeEmail"),
            ("<a@b> 1 +0000", "missingNameBeforeEmail"),
            ("A> <a@b> 1 +0000", "badName"),
            ("A <a<b> 1 +0000", "badEmail"),
            ("A <a@b> x +0000", "badDate"),
            ("A <a@b> 99999999999999999999 +0000", "badDateOverflow"),
        ] {
            let f = findings(
                Kind::Commit,
                format!("tree {tree}\nauthor {ident}\ncommitter B <b@b> 1 +0000\n\nx\n").as_bytes(),
            );
            assert_eq!(f.len(), 1, "{ident}: {f:?}");
            assert!(f[0].contains(&format!(": {id}: ")), "{ident}: {f:?}");
        }
        let f = findings(Kind::Commit, b"tree x\n");
        assert!(f[0].contains("badTreeSha1"), "{f:?}");
        let f = findings(Kind::Commit, b"tree x");
        assert!(f[0].contains("unterminatedHeader"), "{f:?}");
    }

    #[test]
    fn trees() {
        let id = [1u8; 20];
        let entry = |mode: &str, name: &[u8]| {
            let mut v = format!("{mode} ").into_bytes();
            v.extend_from_slice(name);
            v.push(0);
            v.extend_from_slice(&id);
            v
        };
        let t = [entry("100644", b".git"), entry("100644", b"a")].concat();
        assert!(findings(Kind::Tree, &t)[0].contains("hasDotgit"));
        let t = [entry("100644", b"b"), entry("100644", b"a")].concat();
        assert!(findings(Kind::Tree, &t)[0].contains("treeNotSorted"));
        let t = [entry("100644", b"a"), entry("100644", b"a")].concat();
        assert!(findings(Kind::Tree, &t)[0].contains("duplicateEntries"));
        let t = [
            entry("100644", b"a"),
            entry("100644", b"a.c"),
            entry("40000", b"a"),
        ]
        .concat();
        assert!(findings(Kind::Tree, &t)[0].contains("duplicateEntries"));
        let t = entry("0100644", b"a");
        assert!(findings(Kind::Tree, &t)[0].contains("zeroPaddedFilemode"));
        let t = entry("100664", b"a");
        assert!(findings(Kind::Tree, &t)[0].starts_with("warning: "));
        assert!(findings(Kind::Tree, b"100644 a\0short")[1].contains("badTree"));
    }

    /// Why links cannot be read is typed, and git's line about it comes from the type.
    #[test]
    fn unlinkable_objects_say_why() {
        let hash = gix_hash::Kind::Sha1;
        let hex = "1".repeat(40);
        let oid = ObjectId::from_hex(hex.as_bytes()).unwrap();
        let why = |kind, data: &[u8]| links(kind, data, hash).unwrap_err();
        let unparsable = |u| Unlinkable::Unparsable(u);
        assert_eq!(why(Kind::Commit, b"author x\n"), unparsable(Unparsable::BogusCommit));
        let bad_tree = format!("tree {}\nauthor x\n", "z".repeat(40));
        assert_eq!(why(Kind::Commit, bad_tree.as_bytes()), unparsable(Unparsable::BadTreePointer));
        let bad_parent = format!("tree {hex}\nparent {}\n", "z".repeat(40));
        assert_eq!(why(Kind::Commit, bad_parent.as_bytes()), unparsable(Unparsable::BadParents));
        let odd_type = format!("object {hex}\ntype thing\ntag v\n");
        let t = Unparsable::UnknownTagType("thing".into());
        assert_eq!(t.error_line(&oid).unwrap(), format!("error: unknown tag type 'thing' in {oid}"));
        assert_eq!(why(Kind::Tag, odd_type.as_bytes()), unparsable(t));
        let no_tag_line = format!("object {hex}\ntype commit\ntagger x\n");
        assert_eq!(why(Kind::Tag, no_tag_line.as_bytes()), unparsable(Unparsable::MalformedTag));
        assert_eq!(Unparsable::MalformedTag.error_line(&oid), None);
        assert_eq!(why(Kind::Tree, b"100644 \0"), Unlinkable::BadEntry(BadEntry::TooShort));
        // What parses links to its tree and parents, in order.
        let good = format!("tree {hex}\nparent {hex}\nauthor x\n");
        assert_eq!(
            links(Kind::Commit, good.as_bytes(), hash).unwrap(),
            vec![(oid, Kind::Tree), (oid, Kind::Commit)]
        );
    }
}
