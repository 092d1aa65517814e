//! `berth bench many-refs`'s command line (lists where a sweep makes sense) and its entry point:
//! parse, run the sweep, write the chosen output and the plot.

use std::path::PathBuf;
use std::process::ExitCode;

use super::case::{ObjectFormat, RefFormat, Report, Scenario, Switch};
use super::receiver::{self, Receiver};
use super::run::Floor;
use super::{output, plot, stats, sweep};

/// The command line of `berth bench many-refs`. Options taking a list sweep over it: every
/// combination is a case (`--refs 1000,10000 --ref-format files,reftable` is four).
#[derive(clap::Args)]
pub struct ManyRefsArgs {
    /// How many refs the push creates (a list sweeps: 1000,10000,100000).
    #[arg(long, value_delimiter = ',', default_value = "10000")]
    refs: Vec<usize>,
    /// How many distinct commits the refs point at, round-robin (a list sweeps).
    #[arg(long, value_delimiter = ',', default_value = "1")]
    commits: Vec<usize>,
    /// Timed runs per receiver and case.
    #[arg(long, default_value_t = 7)]
    runs: usize,
    /// Untimed (but verified) runs per receiver and case before the timed ones.
    #[arg(long, default_value_t = 1)]
    warmup: usize,
    /// The target repository's ref storage (a list sweeps: files,reftable).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "files")]
    ref_format: Vec<RefFormat>,
    /// The object format of the repositories (a list sweeps).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "sha1")]
    object_format: Vec<ObjectFormat>,
    /// Ask for side-band-64k (`--sideband` alone is `on`; `off,on` sweeps).
    #[arg(long, value_enum, value_delimiter = ',', num_args = 0..=1, default_value = "off", default_missing_value = "on")]
    sideband: Vec<Switch>,
    /// The report-status version (a list sweeps).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "v2")]
    report: Vec<Report>,
    /// Push atomically (`--atomic` alone is `on`; `off,on` sweeps).
    #[arg(long, value_enum, value_delimiter = ',', num_args = 0..=1, default_value = "off", default_missing_value = "on")]
    atomic: Vec<Switch>,
    /// Install an `update` hook in the target and time spawning it N times (`--update-hook`
    /// alone is `on`; `off,on` sweeps).
    #[arg(long, value_enum, value_delimiter = ',', num_args = 0..=1, default_value = "off", default_missing_value = "on")]
    update_hook: Vec<Switch>,
    /// Where the objects come from: already on the server, or in the pushed pack (a list sweeps).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "server")]
    objects: Vec<Scenario>,
    /// A receiver, `NAME=COMMAND` (or a bare COMMAND, named by itself), run as
    /// `COMMAND --stateless-rpc <repo>` (repeat; default: `git=git receive-pack` and
    /// `berth=<this berth> receive-pack`).
    #[arg(long = "receiver", value_name = "NAME=COMMAND")]
    receivers: Vec<String>,
    /// The receiver the others' ratios are against (default: the first).
    #[arg(long, value_name = "NAME")]
    baseline: Option<String>,
    /// Print the results as JSON on stdout instead of the table.
    #[arg(long, group = "format")]
    json: bool,
    /// Print the results as CSV on stdout, one line per case and receiver.
    #[arg(long, group = "format")]
    csv: bool,
    /// Print the results as a markdown table on stdout.
    #[arg(long, group = "format")]
    markdown: bool,
    /// Also draw median time against ref count into this SVG file.
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<PathBuf>,
    /// Warn that the machine is too noisy when the floor's (else the baseline's) runs vary by
    /// more than this percentage (σ/mean).
    #[arg(long, value_name = "PERCENT", default_value_t = stats::NOISY_CV * 100.0)]
    noisy_cv: f64,
    /// Do not build and run the floor program (`benches/floor.c`).
    #[arg(long)]
    no_floor: bool,
    /// Build the repositories under this directory (default: $TMPDIR).
    #[arg(long)]
    workdir: Option<PathBuf>,
}

/// The default receivers: git's and this berth's.
fn default_receivers() -> Vec<Receiver> {
    let me = std::env::current_exe()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| "berth".into());
    vec![
        Receiver {
            name: "git".into(),
            command: "git receive-pack".into(),
        },
        Receiver {
            name: "berth".into(),
            command: format!("'{}' receive-pack", me.replace('\'', "'\\''")),
        },
    ]
}

/// Run `berth bench many-refs`: exit 0 when every receiver passed, 1 when one failed, 2 when
/// the benchmark could not run.
pub fn many_refs_main(a: ManyRefsArgs) -> ExitCode {
    let given: Result<Vec<Receiver>, receiver::Error> =
        a.receivers.iter().map(|s| receiver::parse(s)).collect();
    let receivers = given.and_then(|g| {
        let g = if g.is_empty() { default_receivers() } else { g };
        receiver::ordered(g, a.baseline.as_deref())
    });
    let receivers = match receivers {
        Ok(r) => r,
        Err(e) => {
            eprintln!("berth bench: {e}");
            return ExitCode::from(2);
        }
    };
    let noisy_cv = a.noisy_cv / 100.0;
    let options = sweep::Options {
        refs: a.refs,
        commits: a.commits,
        ref_formats: a.ref_format,
        object_formats: a.object_format,
        objects: a.objects,
        reports: a.report,
        sideband: a.sideband,
        atomic: a.atomic,
        update_hook: a.update_hook,
        warmup: a.warmup,
        runs: a.runs,
        receivers,
        workdir: a.workdir,
        floor: if a.no_floor {
            Floor::Off
        } else {
            Floor::WhereItApplies
        },
    };
    let outcome = match sweep::run(&options, &mut std::io::stderr()) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("berth bench: {e}");
            return ExitCode::from(2);
        }
    };
    if a.json {
        println!("{}", output::json(&outcome, noisy_cv));
    } else if a.csv {
        print!("{}", output::csv(&outcome, noisy_cv));
    } else if a.markdown {
        print!("{}", output::markdown(&outcome, noisy_cv));
    } else {
        print!("{}", output::table(&outcome, noisy_cv));
    }
    // The warnings on stderr too, where a redirected stdout does not hide them.
    if a.json || a.csv || a.markdown {
        for c in &outcome.cases {
            if let Some(w) = output::noise_warning(&output::view(c, noisy_cv).noise, noisy_cv) {
                eprintln!("bench: {}: {w}", c.case.title());
            }
        }
    }
    if let Some(path) = &a.plot {
        let written = plot::svg(&outcome, noisy_cv)
            .map_err(|e| e.to_string())
            .and_then(|svg| {
                std::fs::write(path, svg).map_err(|e| format!("{}: {e}", path.display()))
            });
        match written {
            Ok(()) => eprintln!("bench: plot written to {}", path.display()),
            Err(e) => {
                eprintln!("berth bench: --plot: {e}");
                return ExitCode::from(2);
            }
        }
    }
    if outcome.all_ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
