//! The `berth` command line: argument parsing only; the work is in the library.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "berth", version, about = "A git server-side receive-pack")]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Receive what `git push` sends into a repository (a drop-in for `git receive-pack`).
    ReceivePack(ReceivePackArgs),
}

#[derive(clap::Args)]
struct ReceivePackArgs {
    /// Suppress progress.
    #[arg(short, long)]
    quiet: bool,
    /// Smart HTTP POST mode: no advertisement.
    #[arg(long, hide = true)]
    stateless_rpc: bool,
    /// Smart HTTP GET mode: only the advertisement.
    #[arg(long, alias = "advertise-refs", hide = true)]
    http_backend_info_refs: bool,
    /// Do not check that the pushed objects are complete.
    #[arg(long)]
    skip_connectivity_check: bool,
    /// The repository.
    directory: Vec<String>,
}

fn main() -> ExitCode {
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_span_events(tracing_subscriber::fmt::format::FmtSpan::CLOSE)
            .with_writer(std::io::stderr)
            .init();
    }
    // Started as `git-receive-pack` (a symlink), behave as `berth receive-pack`.
    let mut args: Vec<String> = std::env::args().collect();
    let invoked = args
        .first()
        .and_then(|a| std::path::Path::new(a).file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if invoked == "git-receive-pack" {
        args.insert(1, "receive-pack".into());
    }
    let cli = Cli::parse_from(args);
    match cli.command {
        Cmd::ReceivePack(a) => receive_pack(a),
    }
}

fn receive_pack(a: ReceivePackArgs) -> ExitCode {
    let dir = match a.directory.as_slice() {
        [] => return usage("you must specify a directory"),
        [dir] => dir.clone(),
        _ => return usage("too many arguments"),
    };
    let options = berth::session::Options {
        stateless_rpc: a.stateless_rpc,
        advertise_refs: a.http_backend_info_refs,
        quiet: a.quiet,
        skip_connectivity_check: a.skip_connectivity_check,
        protocol_version: std::env::var("GIT_PROTOCOL")
            .map(|p| berth::session::protocol_version(&p))
            .unwrap_or(0),
        committer: None,
        in_process: None,
    };
    let result = berth::session::run(
        &dir,
        &options,
        std::io::stdin().lock(),
        std::io::stdout().lock(),
        std::io::stderr(),
    );
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("fatal: {e}");
            ExitCode::from(128)
        }
    }
}

fn usage(msg: &str) -> ExitCode {
    eprintln!("error: {msg}\nusage: berth receive-pack <git-dir>");
    ExitCode::from(129)
}
