//! One case of a benchmark: the push every receiver is given (how many refs, which formats,
//! capabilities and hook), and how it is described in progress lines, tables and files.

use std::fmt::Write as _;

/// The object format of both repositories.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum ObjectFormat {
    /// SHA-1 ids.
    #[default]
    Sha1,
    /// SHA-256 ids (`extensions.objectFormat=sha256`).
    Sha256,
}

impl ObjectFormat {
    pub(super) fn kind(self) -> gix_hash::Kind {
        match self {
            ObjectFormat::Sha1 => gix_hash::Kind::Sha1,
            ObjectFormat::Sha256 => gix_hash::Kind::Sha256,
        }
    }

    /// As git spells it.
    pub fn name(self) -> &'static str {
        match self {
            ObjectFormat::Sha1 => "sha1",
            ObjectFormat::Sha256 => "sha256",
        }
    }
}

/// The target repository's ref storage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RefFormat {
    /// Loose refs and `packed-refs`.
    Files,
    /// A reftable stack.
    Reftable,
}

impl RefFormat {
    /// As git spells it.
    pub fn name(self) -> &'static str {
        match self {
            RefFormat::Files => "files",
            RefFormat::Reftable => "reftable",
        }
    }
}

/// Where the objects the new refs point at come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Scenario {
    /// Already on the server: the push carries the empty pack.
    Server,
    /// In the pushed pack (the target starts empty).
    Pack,
}

impl Scenario {
    /// As the option spells it.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Server => "server",
            Scenario::Pack => "pack",
        }
    }
}

/// The report-status version the client asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Report {
    /// `report-status`
    V1,
    /// `report-status-v2`
    V2,
}

impl Report {
    /// As the option spells it.
    pub fn name(self) -> &'static str {
        match self {
            Report::V1 => "v1",
            Report::V2 => "v2",
        }
    }
}

/// A feature of the push that is there or not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Switch {
    /// Not asked for.
    Off,
    /// Asked for.
    On,
}

impl Switch {
    /// Whether it is on.
    pub fn on(self) -> bool {
        self == Switch::On
    }

    /// As the option spells it.
    pub fn name(self) -> &'static str {
        match self {
            Switch::Off => "off",
            Switch::On => "on",
        }
    }
}

/// The push of one case.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Case {
    /// N: refs created by the push.
    pub refs: usize,
    /// K: distinct commits the refs point at (ref i points at commit i mod K).
    pub commits: usize,
    /// The target's ref storage.
    pub ref_format: RefFormat,
    /// The object format of the source and the target.
    pub object_format: ObjectFormat,
    /// Ask for `side-band-64k`.
    pub sideband: Switch,
    /// The report-status version.
    pub report: Report,
    /// Ask for an atomic push.
    pub atomic: Switch,
    /// An `update` hook (`exit 0`) in the target, and the time of spawning it N times.
    pub update_hook: Switch,
    /// Where the objects come from.
    pub objects: Scenario,
}

impl Case {
    /// One line saying what is pushed.
    pub fn title(&self) -> String {
        let mut t = format!(
            "{} new refs, {} commit{}, objects {}, {} backend, {}, report-status {}",
            self.refs,
            self.commits,
            if self.commits == 1 { "" } else { "s" },
            match self.objects {
                Scenario::Server => "already on the server",
                Scenario::Pack => "in the pack",
            },
            self.ref_format.name(),
            self.object_format.name(),
            self.report.name(),
        );
        for (on, what) in [
            (self.sideband, "side-band-64k"),
            (self.atomic, "atomic"),
            (self.update_hook, "update hook"),
        ] {
            if on.on() {
                let _ = write!(t, ", {what}");
            }
        }
        t
    }

    /// The fields as `(column, value)`, in the order of the CSV and JSON.
    pub fn fields(&self) -> [(&'static str, String); 9] {
        [
            ("refs", self.refs.to_string()),
            ("commits", self.commits.to_string()),
            ("ref_format", self.ref_format.name().to_owned()),
            ("object_format", self.object_format.name().to_owned()),
            ("objects", self.objects.name().to_owned()),
            ("report", self.report.name().to_owned()),
            ("sideband", self.sideband.name().to_owned()),
            ("atomic", self.atomic.name().to_owned()),
            ("update_hook", self.update_hook.name().to_owned()),
        ]
    }
}
