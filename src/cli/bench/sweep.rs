//! A sweep: every combination of the listed values (`--refs 1000,10000 --ref-format
//! files,reftable …`) is a case, run one after the other, each with every receiver taking turns.

use std::io::Write;
use std::path::PathBuf;

use super::case::{Case, ObjectFormat, RefFormat, Report, Scenario, Switch};
use super::receiver::Receiver;
use super::run::{self, Floor};

/// The values to sweep over (each list non-empty) and how to run each case.
#[derive(Debug, Clone)]
pub struct Options {
    /// Ref counts.
    pub refs: Vec<usize>,
    /// Distinct-commit counts.
    pub commits: Vec<usize>,
    /// Ref storages of the target.
    pub ref_formats: Vec<RefFormat>,
    /// Object formats.
    pub object_formats: Vec<ObjectFormat>,
    /// Where the objects come from.
    pub objects: Vec<Scenario>,
    /// Report-status versions.
    pub reports: Vec<Report>,
    /// side-band-64k off or on.
    pub sideband: Vec<Switch>,
    /// Atomic off or on.
    pub atomic: Vec<Switch>,
    /// The update hook off or on.
    pub update_hook: Vec<Switch>,
    /// Untimed runs per receiver and case.
    pub warmup: usize,
    /// Timed runs per receiver and case.
    pub runs: usize,
    /// The receivers, the baseline first.
    pub receivers: Vec<Receiver>,
    /// Where to build the repositories.
    pub workdir: Option<PathBuf>,
    /// Whether the floor runs where it applies.
    pub floor: Floor,
}

/// Why the sweep cannot run, or stopped.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A list is empty, or a count is 0.
    #[error("{0} must be at least 1")]
    Zero(&'static str),
    /// No receiver.
    #[error("no receiver to run")]
    NoReceiver,
    /// A case could not be set up.
    #[error("case {number}/{of} ({title}): {source}")]
    Case {
        /// Which case.
        number: usize,
        /// Of how many.
        of: usize,
        /// What it pushes.
        title: String,
        /// Why.
        source: run::Error,
    },
}

/// What a sweep gave.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// Timed runs per receiver and case.
    pub runs: usize,
    /// Warm-up runs per receiver and case.
    pub warmup: usize,
    /// Every case in the order run.
    pub cases: Vec<run::Outcome>,
}

impl Outcome {
    /// Whether every receiver of every case passed verification.
    pub fn all_ok(&self) -> bool {
        self.cases
            .iter()
            .all(|c| c.receivers.iter().all(|r| r.failure.is_none()))
    }
}

/// Every combination, ref counts innermost (so a plot's lines fill in as the sweep goes).
pub fn cases(o: &Options) -> Vec<Case> {
    let mut out = Vec::new();
    for &object_format in &o.object_formats {
        for &ref_format in &o.ref_formats {
            for &objects in &o.objects {
                for &report in &o.reports {
                    for &sideband in &o.sideband {
                        for &atomic in &o.atomic {
                            for &update_hook in &o.update_hook {
                                for &commits in &o.commits {
                                    for &refs in &o.refs {
                                        out.push(Case {
                                            refs,
                                            commits,
                                            ref_format,
                                            object_format,
                                            sideband,
                                            report,
                                            atomic,
                                            update_hook,
                                            objects,
                                        });
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    out
}

fn check(o: &Options) -> Result<(), Error> {
    let lists = [
        ("--refs", o.refs.len()),
        ("--commits", o.commits.len()),
        ("--ref-format", o.ref_formats.len()),
        ("--object-format", o.object_formats.len()),
        ("--objects", o.objects.len()),
        ("--report", o.reports.len()),
        ("--sideband", o.sideband.len()),
        ("--atomic", o.atomic.len()),
        ("--update-hook", o.update_hook.len()),
        ("--runs", o.runs),
    ];
    if let Some((what, _)) = lists.iter().find(|(_, n)| *n == 0) {
        return Err(Error::Zero(what));
    }
    if o.refs.contains(&0) {
        return Err(Error::Zero("each of --refs"));
    }
    if o.commits.contains(&0) {
        return Err(Error::Zero("each of --commits"));
    }
    if o.receivers.is_empty() {
        return Err(Error::NoReceiver);
    }
    Ok(())
}

/// Run every case, with progress (`case i/n: …`) on `progress`.
pub fn run(o: &Options, progress: &mut dyn Write) -> Result<Outcome, Error> {
    check(o)?;
    let all = cases(o);
    let of = all.len();
    let mut done = Vec::with_capacity(of);
    for (i, case) in all.iter().enumerate() {
        let number = i + 1;
        let _ = writeln!(progress, "bench: case {number}/{of}: {}", case.title());
        let prefix = if of > 1 {
            format!("case {number}/{of}: ")
        } else {
            String::new()
        };
        let outcome = run::case(
            &run::Options {
                case,
                warmup: o.warmup,
                runs: o.runs,
                receivers: &o.receivers,
                workdir: o.workdir.as_deref(),
                floor: o.floor,
                progress_prefix: &prefix,
            },
            progress,
        )
        .map_err(|source| Error::Case {
            number,
            of,
            title: case.title(),
            source,
        })?;
        done.push(outcome);
    }
    Ok(Outcome {
        runs: o.runs,
        warmup: o.warmup,
        cases: done,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options() -> Options {
        Options {
            refs: vec![100, 300],
            commits: vec![1],
            ref_formats: vec![RefFormat::Files, RefFormat::Reftable],
            object_formats: vec![ObjectFormat::Sha1],
            objects: vec![Scenario::Server],
            reports: vec![Report::V2],
            sideband: vec![Switch::Off],
            atomic: vec![Switch::Off],
            update_hook: vec![Switch::Off, Switch::On],
            warmup: 1,
            runs: 3,
            receivers: vec![Receiver {
                name: "git".into(),
                command: "git receive-pack".into(),
            }],
            workdir: None,
            floor: Floor::Off,
        }
    }

    #[test]
    fn every_combination_once_refs_innermost() {
        let all = cases(&options());
        assert_eq!(all.len(), 8);
        for (i, a) in all.iter().enumerate() {
            assert!(!all[..i].contains(a), "{a:?} twice");
        }
        let first: Vec<_> = all[..4]
            .iter()
            .map(|c| (c.ref_format, c.update_hook, c.refs))
            .collect();
        assert_eq!(
            first,
            [
                (RefFormat::Files, Switch::Off, 100),
                (RefFormat::Files, Switch::Off, 300),
                (RefFormat::Files, Switch::On, 100),
                (RefFormat::Files, Switch::On, 300),
            ]
        );
    }

    #[test]
    fn empty_lists_and_zero_counts_refused() {
        let mut o = options();
        o.ref_formats.clear();
        assert!(matches!(check(&o), Err(Error::Zero("--ref-format"))));
        let mut o = options();
        o.refs = vec![10, 0];
        assert!(matches!(check(&o), Err(Error::Zero("each of --refs"))));
        let mut o = options();
        o.receivers.clear();
        assert!(matches!(check(&o), Err(Error::NoReceiver)));
        assert!(check(&options()).is_ok());
    }
}
