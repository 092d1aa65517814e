//! The `berth` command line: argument parsing only; the work is in the library.

#[path = "cli/bench.rs"]
mod bench;
#[path = "cli/receive_pack_args.rs"]
mod receive_pack_args;

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
    /// Serve pushes (and fetches) of the repositories under a root over git's smart HTTP.
    #[cfg(feature = "serve")]
    Serve(ServeArgs),
    /// Print a credentials-file line `USER:<argon2 hash>` for the password read from stdin.
    #[cfg(feature = "serve")]
    Passwd(PasswdArgs),
    /// Benchmark receive-pack commands side by side on identical input.
    #[command(subcommand)]
    Bench(BenchCmd),
}

#[derive(Subcommand)]
enum BenchCmd {
    /// N ref creations in one push, exactly as `git push` sends them, fed to each receiver.
    ManyRefs(ManyRefsArgs),
}

#[derive(clap::Args)]
struct ManyRefsArgs {
    /// How many refs the push creates.
    #[arg(long, default_value_t = 10_000)]
    refs: usize,
    /// How many distinct commits the refs point at (round-robin).
    #[arg(long, default_value_t = 1)]
    commits: usize,
    /// Timed runs per receiver.
    #[arg(long, default_value_t = 7)]
    runs: usize,
    /// The target repository's ref storage.
    #[arg(long, value_enum, default_value = "files")]
    ref_format: bench::RefFormat,
    /// The object format of the repositories.
    #[arg(long, value_enum, default_value = "sha1")]
    object_format: bench::ObjectFormat,
    /// Ask for side-band-64k.
    #[arg(long)]
    sideband: bool,
    /// The report-status version.
    #[arg(long, value_enum, default_value = "v2")]
    report: bench::Report,
    /// Push atomically.
    #[arg(long)]
    atomic: bool,
    /// Install an `update` hook in the target (and time spawning it N times).
    #[arg(long)]
    update_hook: bool,
    /// Where the objects come from: already on the server, or in the pushed pack.
    #[arg(long, value_enum, default_value = "server")]
    objects: bench::Scenario,
    /// A receiver command, run as `<command> --stateless-rpc <repo>` (repeat; default:
    /// `git receive-pack` and this berth).
    #[arg(long = "receiver")]
    receivers: Vec<String>,
    /// Print the results as JSON on stdout instead of the table.
    #[arg(long)]
    json: bool,
    /// Build the repositories under this directory (default: $TMPDIR).
    #[arg(long)]
    workdir: Option<std::path::PathBuf>,
}

#[cfg(feature = "serve")]
#[derive(clap::Args)]
struct ServeArgs {
    /// The directory holding the repositories (created if missing).
    #[arg(long, default_value = "./repos")]
    root: std::path::PathBuf,
    /// The address to listen on; port 0 picks a free port (the bound address is printed).
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: String,
    /// Create a bare repository on the first push to a missing `<name>.git` (on by default on
    /// loopback when no authentication is configured).
    #[arg(long)]
    auto_init: bool,
    /// Accept pushes without authentication (implied on loopback when no authentication is
    /// configured).
    #[arg(long)]
    allow_anonymous_push: bool,
    /// HTTP Basic credentials for pushes: `user:<argon2 hash>` lines, from `berth passwd USER`.
    #[arg(long, value_name = "FILE")]
    credentials: Option<std::path::PathBuf>,
    /// Take the pushing user from this request header, set by a reverse proxy that
    /// authenticates (only safe when clients cannot reach berth directly).
    #[arg(long, value_name = "NAME")]
    trusted_user_header: Option<String>,
    /// The largest request body accepted, after gzip decoding.
    #[arg(long, default_value_t = 2 << 30)]
    max_request_bytes: u64,
    /// How many pushes run at once; more wait for a slot.
    #[arg(long, default_value_t = 16)]
    max_concurrent_pushes: usize,
    /// Seconds a request body may stall before the request is abandoned.
    #[arg(long, default_value_t = 300)]
    idle_timeout: u64,
}

#[cfg(feature = "serve")]
#[derive(clap::Args)]
struct PasswdArgs {
    /// The user name (no `:`, no whitespace).
    user: String,
}

/// `receive-pack` as listed by `berth --help`; its arguments are parsed as git parses
/// them ([`receive_pack_args`]), never by clap.
#[derive(clap::Args)]
#[command(disable_help_flag = true)]
struct ReceivePackArgs {
    /// `[-q | --quiet] <git-dir>`, as `git receive-pack`.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    args: Vec<std::ffi::OsString>,
}

fn main() -> ExitCode {
    let serving = std::env::args_os().nth(1).is_some_and(|a| a == "serve");
    if serving && std::env::var_os("RUST_LOG").is_none() {
        // A server logs one line per request by default.
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new("berth::serve=info"))
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .with_writer(std::io::stderr)
            .init();
    } else if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_span_events(tracing_subscriber::fmt::format::FmtSpan::CLOSE)
            .with_writer(std::io::stderr)
            .init();
    }
    // Started as `git-receive-pack` (a symlink), behave as `berth receive-pack`.
    let mut args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let invoked = args
        .first()
        .and_then(|a| std::path::Path::new(a).file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if invoked == "git-receive-pack" {
        args.insert(1, "receive-pack".into());
    }
    // receive-pack answers its command line as git's builtin does, not as clap would.
    if args.get(1).is_some_and(|a| a == "receive-pack") {
        return receive_pack(&args[2..]);
    }
    let cli = Cli::parse_from(args);
    match cli.command {
        Cmd::ReceivePack(a) => receive_pack(&a.args),
        #[cfg(feature = "serve")]
        Cmd::Serve(a) => serve(a),
        #[cfg(feature = "serve")]
        Cmd::Passwd(a) => passwd(a),
        Cmd::Bench(BenchCmd::ManyRefs(a)) => bench_many_refs(a),
    }
}

fn bench_many_refs(a: ManyRefsArgs) -> ExitCode {
    let mut receivers = a.receivers;
    if receivers.is_empty() {
        let me = std::env::current_exe()
            .map(|p| p.display().to_string())
            .unwrap_or_else(|_| "berth".into());
        receivers = vec![
            "git receive-pack".into(),
            format!("'{}' receive-pack", me.replace('\'', "'\\''")),
        ];
    }
    let options = bench::Options {
        refs: a.refs,
        commits: a.commits,
        runs: a.runs,
        ref_format: a.ref_format,
        object_format: a.object_format,
        sideband: a.sideband,
        report: a.report,
        atomic: a.atomic,
        update_hook: a.update_hook,
        objects: a.objects,
        receivers,
        workdir: a.workdir,
    };
    match bench::many_refs(&options, &mut std::io::stderr()) {
        Ok(r) => {
            if a.json {
                println!("{}", r.json());
            } else {
                print!("{}", r.table());
            }
            if r.all_ok() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("berth bench: {e}");
            ExitCode::from(2)
        }
    }
}

#[cfg(feature = "serve")]
fn serve(a: ServeArgs) -> ExitCode {
    let config = berth::serve::Config {
        root: a.root,
        listen: a.listen,
        auto_init: a.auto_init,
        allow_anonymous_push: a.allow_anonymous_push,
        credentials: a.credentials,
        trusted_user_header: a.trusted_user_header,
        max_request_bytes: a.max_request_bytes,
        max_concurrent_pushes: a.max_concurrent_pushes,
        idle_timeout: std::time::Duration::from_secs(a.idle_timeout.max(1)),
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("berth serve: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let announce = |local| {
        // Tests and scripts wait for this line to know the port.
        println!("berth serve: listening on http://{local}/");
        let _ = std::io::Write::flush(&mut std::io::stdout());
    };
    match runtime.block_on(berth::serve::run(config, announce)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("berth serve: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(feature = "serve")]
fn passwd(a: PasswdArgs) -> ExitCode {
    use std::io::{BufRead, IsTerminal};
    if a.user.is_empty()
        || a.user.contains(':')
        || a.user.chars().any(|c| c.is_whitespace() || c.is_control())
    {
        eprintln!("berth passwd: a user name must be non-empty, without ':' or whitespace");
        return ExitCode::from(2);
    }
    if std::io::stdin().is_terminal() {
        eprint!("Password for {} (echoed): ", a.user);
    }
    let mut line = String::new();
    if let Err(e) = std::io::stdin().lock().read_line(&mut line) {
        eprintln!("berth passwd: cannot read the password: {e}");
        return ExitCode::FAILURE;
    }
    let password = line.strip_suffix('\n').unwrap_or(&line);
    let password = password.strip_suffix('\r').unwrap_or(password);
    if password.is_empty() {
        eprintln!("berth passwd: empty password");
        return ExitCode::from(2);
    }
    match berth::serve::hash_password(password) {
        Ok(h) => {
            println!("{}:{h}", a.user);
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("berth passwd: {e}");
            ExitCode::FAILURE
        }
    }
}

fn receive_pack(args: &[std::ffi::OsString]) -> ExitCode {
    use std::io::Write;
    let disallow = std::env::var("GIT_TEST_DISALLOW_ABBREVIATED_OPTIONS").ok();
    let a = match receive_pack_args::parse(args, disallow.as_deref()) {
        receive_pack_args::Parsed::Run(a) => a,
        receive_pack_args::Parsed::Exit {
            stdout,
            stderr,
            code,
        } => {
            let _ = std::io::stdout().write_all(stdout.as_bytes());
            let _ = std::io::stdout().flush();
            let _ = std::io::stderr().write_all(stderr.as_bytes());
            return ExitCode::from(code);
        }
    };
    let dir = a.directory.to_string_lossy().into_owned();
    let options = berth::receive::Options {
        stateless_rpc: a.stateless_rpc,
        advertise_refs: a.advertise_refs,
        quiet: a.quiet,
        skip_connectivity_check: a.skip_connectivity_check,
        reject_thin_pack: a.reject_thin_pack,
        protocol_version: std::env::var("GIT_PROTOCOL")
            .map(|p| berth::receive::protocol_version(&p))
            .unwrap_or(0),
        in_process: None,
        hook_env: Vec::new(),
        env: berth::receive::Environment::from_process(),
    };
    let result = berth::receive::run(
        &dir,
        &options,
        std::io::stdin().lock(),
        std::io::stdout().lock(),
        std::io::stderr(),
    );
    match result {
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => {
            let _ = std::io::Write::write_all(&mut std::io::stderr(), &e.die_lines());
            ExitCode::from(128)
        }
    }
}
