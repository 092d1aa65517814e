//! The `berth` command line: argument parsing only; the work is in the library.

#[path = "cli/bench/mod.rs"]
mod bench;
#[cfg(feature = "serve")]
#[path = "cli/config.rs"]
mod config;
#[path = "cli/duration.rs"]
mod duration;
#[path = "cli/receive_pack_args.rs"]
mod receive_pack_args;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Statically linked with glibc, std's spawn finds `posix_spawn_file_actions_addchdir_np`
/// through a weak reference, and a static link resolves a weak reference only to a function
/// something else pulled in: without this strong one it stayed null, and every child given a
/// working directory (each hook, `git maintenance`: git runs them in the repository) was
/// started by `fork` instead of `posix_spawn`. A fork copies the page tables of the whole
/// process and makes each of its pages copy-on-write; in `berth serve` that was 5 % of a
/// node's CPU (benches/README.md, "Children spawned, not forked, when statically linked").
#[cfg(all(target_os = "linux", target_env = "gnu", target_feature = "crt-static"))]
#[used]
static SPAWN_WITH_CHDIR: unsafe extern "C" fn(
    *mut libc::posix_spawn_file_actions_t,
    *const libc::c_char,
) -> libc::c_int = libc::posix_spawn_file_actions_addchdir_np;

#[derive(Parser)]
#[command(name = "berth", version = env!("BERTH_VERSION"), about = "A git server-side receive-pack")]
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
    Serve(Box<ServeArgs>),
    /// Print a credentials-file line `USER:<argon2 hash>` for the password read from stdin.
    #[cfg(feature = "serve")]
    Passwd(PasswdArgs),
    /// Benchmark receive-pack commands side by side on identical input.
    #[command(subcommand)]
    Bench(BenchCmd),
    /// Look at a replicated cluster (docs/cluster.md).
    #[cfg(feature = "serve")]
    #[command(subcommand)]
    Cluster(ClusterCmd),
}

#[cfg(feature = "serve")]
#[derive(Subcommand)]
enum ClusterCmd {
    /// The live nodes and every repository's replicas, log head and applied entries, with what
    /// is wrong (short of --replicas copies, a replica down or behind); exits 1 when anything
    /// is.
    Status(ClusterStatusArgs),
    /// Mark NODE draining: no new repositories are placed on it, each of its repositories is
    /// copied to another live node, then NODE is taken off its list; with --wait, wait until
    /// no repository lists NODE.
    Drain(ClusterDrainArgs),
}

#[cfg(feature = "serve")]
#[derive(clap::Args)]
struct ClusterDrainArgs {
    /// The node to drain, by its --node name.
    node: String,
    /// etcd client URLs (comma-separated), as the nodes' --cluster.
    #[arg(long, value_name = "URL[,URL...]")]
    cluster: String,
    /// Wait until no repository lists the node (exit 1 if it is still listed after
    /// --timeout).
    #[arg(long)]
    wait: bool,
    /// How long --wait waits, in seconds.
    #[arg(long, default_value_t = 3600)]
    timeout: u64,
    #[command(flatten)]
    etcd_tls: EtcdTlsArgs,
}

#[cfg(feature = "serve")]
#[derive(clap::Args)]
struct ClusterStatusArgs {
    /// etcd client URLs (comma-separated), as the nodes' --cluster.
    #[arg(long, value_name = "URL[,URL...]")]
    cluster: String,
    /// How many copies each repository should have [default: the cluster's --replicas, as its
    /// first node recorded it in etcd; 3 if none is recorded].
    #[arg(long, value_name = "K")]
    replicas: Option<usize>,
    /// Print JSON instead of the table.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    etcd_tls: EtcdTlsArgs,
}

/// `--etcd-ca`, `--etcd-cert`, `--etcd-key` (`berth serve`, `berth cluster status` and `drain`).
#[cfg(feature = "serve")]
#[derive(clap::Args)]
struct EtcdTlsArgs {
    /// TLS to etcd: the CA certificate (PEM) etcd's server certificate must chain to; the
    /// --cluster URLs are then https://. Needs --etcd-cert and --etcd-key.
    #[arg(long, value_name = "FILE", requires_all = ["etcd_cert", "etcd_key"])]
    etcd_ca: Option<std::path::PathBuf>,
    /// TLS to etcd: this client's certificate (PEM), signed by a CA etcd trusts
    /// (etcd's --client-cert-auth --trusted-ca-file).
    #[arg(long, value_name = "FILE", requires_all = ["etcd_ca", "etcd_key"])]
    etcd_cert: Option<std::path::PathBuf>,
    /// TLS to etcd: the private key of --etcd-cert (PEM).
    #[arg(long, value_name = "FILE", requires_all = ["etcd_ca", "etcd_cert"])]
    etcd_key: Option<std::path::PathBuf>,
}

#[cfg(feature = "serve")]
impl EtcdTlsArgs {
    fn files(self) -> Option<berth::serve::ClusterTlsFiles> {
        match (self.etcd_ca, self.etcd_cert, self.etcd_key) {
            (Some(ca), Some(cert), Some(key)) => Some(berth::serve::ClusterTlsFiles {
                ca,
                cert,
                key,
                flags: "etcd",
            }),
            _ => None,
        }
    }
}

#[derive(Subcommand)]
enum BenchCmd {
    /// N ref creations in one push, exactly as `git push` sends them, fed to each receiver.
    ManyRefs(Box<bench::ManyRefsArgs>),
    /// Many clients' small pushes at once to any server over smart HTTP or ssh: pushes/s,
    /// latencies, errors by kind, every acknowledged push verified with `git ls-remote`.
    Load(Box<bench::LoadArgs>),
}

#[cfg(feature = "serve")]
#[derive(clap::Args)]
struct ServeArgs {
    /// Read settings from this TOML file first: each key is a flag of `berth serve` without
    /// `--` (`listen = "0.0.0.0:8080"`, `auto-init = true`, `trusted-proxy = ["10.0.0.0/8"]`);
    /// flags on the command line override it (docs/berth.toml).
    #[arg(long, value_name = "FILE")]
    config: Option<std::path::PathBuf>,
    /// Print the effective settings (the file, the command line and the defaults) as TOML, and
    /// exit.
    #[arg(long)]
    print_config: bool,
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
    /// Access rules in a subset of gitolite's `gitolite.conf` (groups, `repo`, R/RW/RW+/-/C,
    /// refexes); re-read when the file changes.
    #[arg(long, value_name = "FILE")]
    access: Option<std::path::PathBuf>,
    /// The log's format on stderr: `text` (key=value, client-controlled values escaped) or
    /// `json` (one object per line).
    #[arg(long, value_enum, default_value = "text")]
    log_format: LogFormat,
    /// Accept --trusted-user-header only from these addresses or CIDRs (repeatable; default
    /// loopback: 127.0.0.0/8 and ::1).
    #[arg(long, value_name = "CIDR")]
    trusted_proxy: Vec<String>,
    /// Serve HTTPS: the certificate chain (PEM); needs --tls-key.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<std::path::PathBuf>,
    /// Serve HTTPS: the private key (PEM); needs --tls-cert.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<std::path::PathBuf>,
    /// Also serve git over ssh on this address (e.g. 127.0.0.1:2222); needs --keydir.
    #[arg(long, value_name = "ADDR")]
    ssh_listen: Option<String>,
    /// The ssh host key; an ed25519 key is created there on first start (mode 0600).
    #[arg(long, value_name = "FILE", default_value = "./ssh_host_ed25519_key")]
    ssh_host_key: std::path::PathBuf,
    /// Users' ssh public keys, gitolite style: `alice.pub`, `alice@laptop.pub` (one or more
    /// keys each) are user alice; reread when the directory changes.
    #[arg(long, value_name = "DIR")]
    keydir: Option<std::path::PathBuf>,
    /// Seconds an ssh connection may take to authenticate.
    #[arg(long, default_value_t = 30)]
    ssh_auth_timeout: u64,
    /// How many ssh connections are served at once; more are closed (after cutting off the
    /// one that has waited longest without authenticating, if any).
    #[arg(long, default_value_t = 64)]
    ssh_max_connections: usize,
    /// ssh connections from one address (IPv4, or IPv6 /64) at once, as --ssh-max-connections
    /// [default: half of --ssh-max-connections]; 0: no cap.
    #[arg(long, value_name = "N")]
    ssh_max_connections_per_address: Option<usize>,
    /// Join a replicated cluster: etcd client URLs (comma-separated). Every push is then
    /// replicated to the repository's replicas and committed through etcd (docs/cluster.md).
    #[arg(long, value_name = "URL[,URL...]", requires = "node")]
    cluster: Option<String>,
    /// This node's name in the cluster (letters, digits, '.', '_', '-'); needs --cluster.
    #[arg(long, value_name = "NAME", requires = "cluster")]
    node: Option<String>,
    /// The URL the other nodes reach this one at (default http://<listen address>, or
    /// https://<--cluster-listen address> with --cluster-ca).
    #[arg(long, value_name = "URL", requires = "cluster")]
    advertise: Option<String>,
    /// Serve the other nodes on this address of its own, over mutual TLS with the cluster CA
    /// (needs --cluster-ca, --cluster-cert, --cluster-key): the internal endpoints and
    /// forwarded requests are then honoured here only, never on --listen.
    #[arg(long, value_name = "ADDR", requires_all = ["cluster", "cluster_ca"])]
    cluster_listen: Option<String>,
    /// Mutual TLS between nodes: the cluster CA's certificate (PEM), the only root a peer's
    /// certificate may chain to (either way). Needs --cluster-cert, --cluster-key and
    /// --cluster-listen.
    #[arg(long, value_name = "FILE", requires_all = ["cluster", "cluster_cert", "cluster_key", "cluster_listen"])]
    cluster_ca: Option<std::path::PathBuf>,
    /// Mutual TLS between nodes: this node's certificate (PEM) signed by the cluster CA, with
    /// the advertise URL's host and the URI berth-node:<--node> in its subjectAltName, and
    /// serverAuth and clientAuth usage. Read again, with --cluster-ca and --cluster-key, on
    /// SIGHUP.
    #[arg(long, value_name = "FILE", requires = "cluster_ca")]
    cluster_cert: Option<std::path::PathBuf>,
    /// Mutual TLS between nodes: the private key of --cluster-cert (PEM).
    #[arg(long, value_name = "FILE", requires = "cluster_ca")]
    cluster_key: Option<std::path::PathBuf>,
    #[command(flatten)]
    etcd_tls: EtcdTlsArgs,
    /// How many nodes hold each repository: a push's quorum is reckoned from it, and a new
    /// repository is placed only while that quorum of nodes is live.
    #[arg(long, default_value_t = 3)]
    replicas: usize,
    /// How long a listed replica must have been down (no lease), as this node saw it, before
    /// a spare node replaces it (a whole number with s, m, h or d).
    #[arg(long, value_name = "DURATION", default_value = "10m", value_parser = duration::parse)]
    replace_after: std::time::Duration,
    /// How long after this node was removed from a repository's replica list it deletes its
    /// copy (if it is still not listed then, and no request is reading it).
    #[arg(long, value_name = "DURATION", default_value = "10m", value_parser = duration::parse)]
    delete_removed_after: std::time::Duration,
    /// When a push is acknowledged: once a majority of the --replicas copies applied it, or all.
    #[arg(long, value_enum, default_value = "majority")]
    ack: AckArg,
    /// What a node makes durable before it reports a push applied (its acknowledgement
    /// counts only then): `synced`: the objects, then the refs, then the applied sequence are
    /// fsynced, with their directories, whatever core.fsync says; `core-fsync`: only what the
    /// repository's core.fsync says (git's default: packs), so that a power loss of every
    /// replica can lose acknowledged pushes (docs/cluster.md).
    #[arg(long, value_enum, default_value = "synced")]
    cluster_durability: ClusterDurabilityArg,
    /// Also pass this variable of the server's environment to hooks and `git upload-pack`
    /// (repeatable). They get a clean environment: git's and the session's variables, PATH,
    /// HOME, USER, LOGNAME, TMPDIR, TZ, the locale, the GIT_* variables that configure git, and
    /// the names given here; nothing else of the server's.
    #[arg(long = "hook-env", value_name = "NAME")]
    hook_env: Vec<String>,
    /// Serve /metrics (and /healthz) on this address of its own, plain HTTP; the main listener
    /// then answers 404 for /metrics [default: /metrics on the main listener when that listens
    /// on loopback, else nowhere].
    #[arg(long, value_name = "ADDR")]
    metrics_listen: Option<String>,
    #[command(flatten)]
    limits: LimitArgs,
}

/// `berth serve --ack`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum AckArg {
    Majority,
    All,
}

/// `berth serve --cluster-durability`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum ClusterDurabilityArg {
    /// Objects, refs and the applied sequence fsynced (with their directories) first.
    Synced,
    /// Only what core.fsync says.
    CoreFsync,
}

/// `berth serve --log-format`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum LogFormat {
    /// `key=value` lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// `berth serve`'s connection, request and authentication limits (see `berth::serve::Limits`).
#[cfg(feature = "serve")]
#[derive(clap::Args)]
struct LimitArgs {
    /// Seconds from a request's first byte to its last header line (also: a new connection's
    /// wait for its first request, a TLS handshake).
    #[arg(long, value_name = "SECS", default_value_t = 10.0)]
    header_read_timeout: f64,
    /// Seconds a connection may wait idle for its next request.
    #[arg(long, value_name = "SECS", default_value_t = 60.0)]
    keepalive_timeout: f64,
    /// Seconds a response may wait for a client that does not read it.
    #[arg(long, value_name = "SECS", default_value_t = 60.0)]
    write_timeout: f64,
    /// Drop a request body arriving slower than this many bytes/s over --body-rate-window
    /// (counting only time spent waiting for the client); 0 turns it off.
    #[arg(long, value_name = "BYTES", default_value_t = 1024)]
    min_body_rate: u64,
    /// Seconds over which --min-body-rate is measured.
    #[arg(long, value_name = "SECS", default_value_t = 30.0)]
    body_rate_window: f64,
    /// Open connections at most [default: a quarter of the file descriptor limit, 8..10000].
    #[arg(long, value_name = "N")]
    max_connections: Option<usize>,
    /// Seconds a push (or fetch) waits for a slot before it gets 503 with Retry-After.
    #[arg(long, value_name = "SECS", default_value_t = 60.0)]
    push_slot_timeout: f64,
    /// `git upload-pack` processes at once; more wait as pushes do.
    #[arg(long, value_name = "N", default_value_t = 32)]
    max_concurrent_fetches: usize,
    /// Bytes of commands and push options in one push (berth.maxRequestBytes may lower it).
    #[arg(long, value_name = "BYTES", default_value_t = 64 << 20)]
    max_command_bytes: u64,
    /// argon2 password checks at once, ~19 MiB each [default: the number of CPUs].
    #[arg(long, value_name = "N")]
    max_concurrent_auth: Option<usize>,
    /// Seconds a verified user and password are trusted without a new argon2 check; 0: off.
    #[arg(long, value_name = "SECS", default_value_t = 60.0)]
    auth_cache_ttl: f64,
    /// Failed logins from one client address (IPv6: its /64), for any users, within
    /// --auth-failure-window before that address gets 429 with Retry-After. A user with this
    /// many failures from anywhere is under attack: an address that failed for them waits too;
    /// an address that has not failed never does. 0 turns it off.
    #[arg(long, value_name = "N", default_value_t = 10)]
    auth_max_failures: u32,
    /// Seconds of the --auth-max-failures window.
    #[arg(long, value_name = "SECS", default_value_t = 60.0)]
    auth_failure_window: f64,
    /// Open connections from one address (IPv4, or IPv6 /64) at once; at the cap the address's
    /// longest-idle connection makes room, else 503 [default: half of --max-connections];
    /// 0: no cap. Explicit --trusted-proxy addresses are not capped.
    #[arg(long, value_name = "N")]
    max_connections_per_address: Option<usize>,
    /// Push slots one address may hold or wait for at once [default: half of
    /// --max-concurrent-pushes]; 0: no cap. Explicit --trusted-proxy addresses are not capped.
    #[arg(long, value_name = "N")]
    max_pushes_per_address: Option<usize>,
    /// `git upload-pack` slots one address may hold or wait for at once [default: half of
    /// --max-concurrent-fetches]; 0: no cap.
    #[arg(long, value_name = "N")]
    max_fetches_per_address: Option<usize>,
    /// Drop a response (and its connection) whose client reads slower than this many bytes/s
    /// over --send-rate-window (counting only time spent waiting for the client); 0: off.
    #[arg(long, value_name = "BYTES", default_value_t = 1024)]
    min_send_rate: u64,
    /// Seconds over which --min-send-rate is measured.
    #[arg(long, value_name = "SECS", default_value_t = 30.0)]
    send_rate_window: f64,
    /// Seconds a request body may take in all, however fast it trickles (a push holds its slot
    /// meanwhile); the default lets 2 GiB through at 150 KB/s; 0: no limit.
    #[arg(long, value_name = "SECS", default_value_t = 14400.0)]
    max_body_time: f64,
}

#[cfg(feature = "serve")]
impl LimitArgs {
    fn limits(&self) -> berth::serve::Limits {
        let secs = |s: f64| std::time::Duration::from_secs_f64(s.clamp(0.0, 1e9));
        let d = berth::serve::Limits::default();
        berth::serve::Limits {
            header_read_timeout: secs(self.header_read_timeout)
                .max(std::time::Duration::from_millis(100)),
            keepalive_timeout: secs(self.keepalive_timeout),
            write_timeout: secs(self.write_timeout).max(std::time::Duration::from_millis(100)),
            min_body_rate: self.min_body_rate,
            body_rate_window: secs(self.body_rate_window),
            max_connections: self.max_connections,
            push_slot_timeout: secs(self.push_slot_timeout),
            max_concurrent_fetches: self.max_concurrent_fetches,
            max_command_bytes: self.max_command_bytes,
            max_concurrent_auth: self.max_concurrent_auth.unwrap_or(d.max_concurrent_auth),
            auth_cache_ttl: secs(self.auth_cache_ttl),
            auth_max_failures: self.auth_max_failures,
            auth_failure_window: secs(self.auth_failure_window),
            max_connections_per_address: self.max_connections_per_address,
            max_pushes_per_address: self.max_pushes_per_address,
            max_fetches_per_address: self.max_fetches_per_address,
            min_send_rate: self.min_send_rate,
            send_rate_window: secs(self.send_rate_window),
            max_body_time: secs(self.max_body_time),
            ..d
        }
    }
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
        // git's receive-pack says `GIT_DIR=.` in its own environment (`enter_repo`), and every
        // process it starts in the repository inherits it; so does this one (the session's
        // `HookEnvironment::InheritWithGitDir`), and std need not copy the environment for
        // each hook.
        // SAFETY: nothing has started a thread yet, so nothing reads the environment meanwhile.
        unsafe { std::env::set_var("GIT_DIR", ".") };
        init_logging(None);
        return receive_pack(&args[2..]);
    }
    // `berth serve --config FILE`: the file's settings become arguments before the command
    // line's.
    #[cfg(feature = "serve")]
    let args = match args.get(1).is_some_and(|a| a == "serve") {
        true => match config::with_file(&config::Keys::of(&serve_command()), args, 1) {
            Ok(a) => a,
            Err(e) => {
                eprintln!("berth serve: {e}");
                return ExitCode::from(2);
            }
        },
        false => args,
    };
    #[cfg(feature = "serve")]
    let serve_args = args.get(1..).map(<[_]>::to_vec).unwrap_or_default();
    let cli = Cli::parse_from(args);
    #[cfg(feature = "serve")]
    if let Cmd::Serve(a) = &cli.command
        && a.print_config
    {
        return match config::effective(&config::Keys::of(&serve_command()), &serve_args) {
            Ok(toml) => {
                print!("{toml}");
                ExitCode::SUCCESS
            }
            Err(e) => e.exit(),
        };
    }
    #[cfg(feature = "serve")]
    let serving = match &cli.command {
        Cmd::Serve(a) => Some(a.log_format),
        _ => None,
    };
    #[cfg(not(feature = "serve"))]
    let serving: Option<LogFormat> = None;
    init_logging(serving);
    match cli.command {
        Cmd::ReceivePack(a) => receive_pack(&a.args),
        #[cfg(feature = "serve")]
        Cmd::Serve(a) => serve(*a),
        #[cfg(feature = "serve")]
        Cmd::Passwd(a) => passwd(a),
        Cmd::Bench(BenchCmd::ManyRefs(a)) => bench::many_refs_main(*a),
        Cmd::Bench(BenchCmd::Load(a)) => bench::load_main(*a),
        #[cfg(feature = "serve")]
        Cmd::Cluster(ClusterCmd::Status(a)) => cluster_status(a),
        #[cfg(feature = "serve")]
        Cmd::Cluster(ClusterCmd::Drain(a)) => cluster_drain(a),
    }
}

/// `berth cluster drain`.
#[cfg(feature = "serve")]
fn cluster_drain(a: ClusterDrainArgs) -> ExitCode {
    use berth::serve::cluster_status as status;
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("berth cluster drain: {e}");
            return ExitCode::from(2);
        }
    };
    let endpoints = [a.cluster];
    let tls = a.etcd_tls.files();
    // Checked as a node name before anything is printed with it.
    if let Err(e) = runtime.block_on(status::drain(&endpoints, tls.as_ref(), &a.node)) {
        eprintln!("berth cluster drain: {e} (is etcd at the URL the nodes' --cluster names?)");
        return ExitCode::from(2);
    }
    let node = a.node.as_str();
    let start = std::time::Instant::now();
    let mut said = None;
    loop {
        // The K the nodes use does not matter here: only the lists are read.
        let listed = match runtime.block_on(status::read(&endpoints, tls.as_ref(), Some(1))) {
            Ok(s) => status::listing(&s, &a.node)
                .into_iter()
                .map(str::to_owned)
                .collect::<Vec<_>>(),
            Err(e) => {
                eprintln!("berth cluster drain: {e}");
                return ExitCode::from(2);
            }
        };
        if listed.is_empty() {
            println!("{node} is drained: no repository lists it");
            return ExitCode::SUCCESS;
        }
        if said != Some(listed.len()) {
            println!(
                "{node} is draining: {} repositories still list it",
                listed.len()
            );
            said = Some(listed.len());
        }
        if !a.wait {
            return ExitCode::SUCCESS;
        }
        if start.elapsed() > std::time::Duration::from_secs(a.timeout) {
            eprintln!(
                "berth cluster drain: {node} still listed by {} repositories after {} s (are --replicas nodes live besides it?)",
                listed.len(),
                a.timeout
            );
            return ExitCode::from(1);
        }
        std::thread::sleep(std::time::Duration::from_secs(2));
    }
}

/// `berth cluster status`.
#[cfg(feature = "serve")]
fn cluster_status(a: ClusterStatusArgs) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("berth cluster status: {e}");
            return ExitCode::from(2);
        }
    };
    let status = runtime.block_on(berth::serve::cluster_status::read(
        &[a.cluster],
        a.etcd_tls.files().as_ref(),
        a.replicas,
    ));
    match status {
        Ok(status) => {
            if a.json {
                match serde_json::to_string_pretty(&status) {
                    Ok(j) => println!("{j}"),
                    Err(e) => {
                        eprintln!("berth cluster status: {e}");
                        return ExitCode::from(2);
                    }
                }
            } else {
                print!("{status}");
            }
            if status.healthy() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(e) => {
            eprintln!("berth cluster status: {e} (is etcd at the URL the nodes' --cluster names?)");
            ExitCode::from(2)
        }
    }
}

/// clap's definition of `berth serve`: where the settings file's keys come from.
#[cfg(feature = "serve")]
fn serve_command() -> clap::Command {
    let mut cli = <Cli as clap::CommandFactory>::command();
    cli.build();
    cli.find_subcommand("serve")
        .cloned()
        .expect("berth has a serve subcommand")
}

/// `berth serve`'s log filter without `RUST_LOG`.
const DEFAULT_SERVE_LOG: &str = "berth=warn,berth::serve=info";

/// stderr logging: `RUST_LOG` when set (with each phase's span), else for `berth serve` one
/// line per request, as text or JSON (`--log-format`), and every warning and error of berth's
/// (a cluster's "no quorum prepared", a push's objects that could not be moved in); nothing
/// otherwise.
fn init_logging(serving: Option<LogFormat>) {
    use tracing_subscriber::prelude::*;
    use tracing_subscriber::{EnvFilter, Layer, Registry, fmt};
    let rust_log = std::env::var_os("RUST_LOG").is_some();
    let filter = match (rust_log, serving) {
        (true, _) => EnvFilter::from_default_env(),
        // A server logs one line per request by default, and what an operator must see.
        (false, Some(_)) => EnvFilter::new(DEFAULT_SERVE_LOG),
        (false, None) => return,
    };
    let spans = if serving.is_some() && !rust_log {
        fmt::format::FmtSpan::NONE
    } else {
        fmt::format::FmtSpan::CLOSE
    };
    let log: Box<dyn Layer<Registry> + Send + Sync> = match serving {
        // One JSON object per line for log shippers; every string properly escaped.
        Some(LogFormat::Json) => fmt::layer()
            .json()
            .flatten_event(true)
            .with_span_events(spans)
            .with_writer(std::io::stderr)
            .with_filter(filter)
            .boxed(),
        _ => fmt::layer()
            .with_ansi(serving.is_some() && std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .with_span_events(spans)
            .with_writer(std::io::stderr)
            .with_filter(filter)
            .boxed(),
    };
    // A server times every push's phases for /metrics, whatever the filter.
    #[cfg(feature = "serve")]
    let phases = serving.map(|_| berth::serve::phase_layer());
    #[cfg(not(feature = "serve"))]
    let phases: Option<tracing_subscriber::layer::Identity> = None;
    tracing_subscriber::registry().with(log).with(phases).init();
}

#[cfg(feature = "serve")]
fn serve(a: ServeArgs) -> ExitCode {
    if let Some(file) = &a.config {
        tracing::info!(target: "berth::serve", config = %file.display(), "settings read");
    }
    let ssh = match (a.ssh_listen, a.keydir) {
        (None, _) => None,
        (Some(_), None) => {
            eprintln!("berth serve: --ssh-listen needs --keydir DIR (the users' public keys)");
            return ExitCode::from(2);
        }
        (Some(listen), Some(keydir)) => Some(berth::serve::SshConfig {
            listen,
            host_key: a.ssh_host_key,
            keydir,
            auth_timeout: std::time::Duration::from_secs(a.ssh_auth_timeout.max(1)),
            max_connections: a.ssh_max_connections,
            max_connections_per_address: a.ssh_max_connections_per_address,
            on_listening: berth::serve::OnSshListening(std::sync::Arc::new(|l| {
                // Tests and scripts read the port and pin the host key from these lines.
                println!("berth serve: listening on ssh://{}/", l.addr);
                println!("berth serve: ssh host key {}", l.fingerprint);
                println!("berth serve: known_hosts {}", l.known_hosts);
                let _ = std::io::Write::flush(&mut std::io::stdout());
            })),
        }),
    };
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
        access: a.access,
        trusted_proxies: a.trusted_proxy,
        tls: match (a.tls_cert, a.tls_key) {
            (Some(cert), Some(key)) => Some(berth::serve::Tls { cert, key }),
            _ => None,
        },
        limits: a.limits.limits(),
        ssh,
        cluster: match (a.cluster, a.node) {
            (Some(etcd), Some(node)) => Some(berth::serve::ClusterConfig {
                etcd: vec![etcd],
                node,
                advertise: a.advertise,
                replicas: a.replicas.max(1),
                replace_after: a.replace_after,
                delete_removed_after: a.delete_removed_after,
                ack: match a.ack {
                    AckArg::Majority => berth::serve::Ack::Majority,
                    AckArg::All => berth::serve::Ack::All,
                },
                durability: match a.cluster_durability {
                    ClusterDurabilityArg::Synced => berth::serve::ClusterDurability::Synced,
                    ClusterDurabilityArg::CoreFsync => berth::serve::ClusterDurability::CoreFsync,
                },
                node_tls: match (a.cluster_ca, a.cluster_cert, a.cluster_key) {
                    (Some(ca), Some(cert), Some(key)) => Some(berth::serve::ClusterTlsFiles {
                        ca,
                        cert,
                        key,
                        flags: "cluster",
                    }),
                    _ => None,
                },
                cluster_listen: a.cluster_listen,
                etcd_tls: a.etcd_tls.files(),
            }),
            _ => None,
        },
        hook_env: a.hook_env,
        metrics_listen: a.metrics_listen,
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
    let scheme = if config.tls.is_some() {
        "https"
    } else {
        "http"
    };
    let announce = |local| {
        // Tests and scripts wait for this line to know the port.
        println!("berth serve: listening on {scheme}://{local}/");
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
    // The user becomes the reflog identity and a name in access rules: refuse what git would
    // strip or drop from an identity (ident.c's crud and `<`, `>`), `:` (the file's
    // separator), a leading `@` (a group in the rules) and `anonymous` (no authentication).
    let u = &a.user;
    if u.is_empty()
        || u.len() > 255
        || u.starts_with('@')
        || u == "anonymous"
        || u.chars().any(|c| {
            c.is_whitespace() || c.is_control() || ",:;<>\"\\'".contains(c) || c == '\u{7f}'
        })
    {
        eprintln!(
            "berth passwd: a user name must be 1 to 255 characters without whitespace, control \
             characters or any of , : ; < > \" \\ ' (git drops them from identities), not start \
             with '@', and not be 'anonymous'"
        );
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
        // git's contract: hooks inherit receive-pack's whole environment, `GIT_DIR=.` (set by
        // `main`) included.
        hook_environment: berth::receive::HookEnvironment::InheritWithGitDir,
        env: berth::receive::Environment::from_process(),
        // The stderr handed to the session below writes to it unbuffered.
        stderr: match std::os::fd::AsFd::as_fd(&std::io::stderr()).try_clone_to_owned() {
            Ok(fd) => berth::receive::SessionStderr::File(std::sync::Arc::new(fd)),
            Err(_) => berth::receive::SessionStderr::Writer,
        },
        ref_access: None,
        max_command_bytes: None,
        commit_gate: None,
        pack_tee: None,
    };
    let result = berth::receive::run(
        &dir,
        &options,
        std::io::stdin().lock(),
        std::io::stdout().lock(),
        std::io::stderr(),
    );
    match result {
        Ok(outcome) => {
            // The client has its report and the process ends now: freeing every command's name
            // one by one first is time the push waits for (3.45 % of a million-ref push's
            // samples, `perf record`; benches/README.md).
            std::mem::forget(outcome);
            ExitCode::SUCCESS
        }
        Err(e) => {
            let _ = std::io::Write::write_all(&mut std::io::stderr(), &e.die_lines());
            ExitCode::from(128)
        }
    }
}
