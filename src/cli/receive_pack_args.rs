//! `receive-pack`'s command line, parsed as git's `parse_options` parses `git receive-pack`'s
//! (`builtin/receive-pack.c`, `parse-options.c`): the same options with the same abbreviations
//! and negations, `-h` and `--help-all` on stdout, unknown or malformed options answered with
//! git's `error:` line and usage on stderr, exit status 129.
//!
//! berth adds one option, `--skip-connectivity-check`, taken only when spelled out in full so
//! that git's abbreviations (`--s` for `--stateless-rpc`) keep their meaning.

use std::ffi::OsString;

/// What the command line asks for.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Args {
    /// `-q`, `--quiet`.
    pub quiet: bool,
    /// `--stateless-rpc`.
    pub stateless_rpc: bool,
    /// `--http-backend-info-refs` (`--advertise-refs`).
    pub advertise_refs: bool,
    /// `--reject-thin-pack-for-testing`.
    pub reject_thin_pack: bool,
    /// `--skip-connectivity-check` (berth's).
    pub skip_connectivity_check: bool,
    /// The repository.
    pub directory: OsString,
}

/// The outcome of parsing: run, or exit with this output.
#[derive(Debug, PartialEq, Eq)]
pub enum Parsed {
    /// Receive into [`Args::directory`].
    Run(Args),
    /// Print and exit, as git's option parser does.
    Exit {
        /// For stdout.
        stdout: String,
        /// For stderr.
        stderr: String,
        /// The exit status.
        code: u8,
    },
}

const USAGE: &str = "usage: git receive-pack <git-dir>\n\n    -q, --[no-]quiet      quiet\n\n";
const USAGE_ALL: &str = "usage: git receive-pack <git-dir>\n\n    -q, --[no-]quiet      quiet\n    --[no-]stateless-rpc\n    --[no-]http-backend-info-refs\n    --[no-]advertise-refs alias of --http-backend-info-refs\n    --[no-]reject-thin-pack-for-testing\n\n";
/// `usage_msg_opt` prints the options as declared, where the alias is not hidden yet.
const USAGE_MSG: &str = "usage: git receive-pack <git-dir>\n\n    -q, --[no-]quiet      quiet\n    --[no-]advertise-refs ...\n                          alias of --http-backend-info-refs\n\n";
const COMPLETION: &str = "--quiet --no-quiet\n";
const COMPLETION_ALL: &str = "--quiet --stateless-rpc --http-backend-info-refs --advertise-refs --reject-thin-pack-for-testing --no-quiet -- --no-stateless-rpc --no-http-backend-info-refs --no-advertise-refs --no-reject-thin-pack-for-testing\n";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    Quiet,
    StatelessRpc,
    AdvertiseRefs,
    RejectThin,
}

/// git's options after `preprocess_options`: the alias is a hidden copy of its target.
const OPTIONS: &[(&str, Option<u8>, Field)] = &[
    ("quiet", Some(b'q'), Field::Quiet),
    ("stateless-rpc", None, Field::StatelessRpc),
    ("http-backend-info-refs", None, Field::AdvertiseRefs),
    ("advertise-refs", None, Field::AdvertiseRefs),
    ("reject-thin-pack-for-testing", None, Field::RejectThin),
];

/// `OPT_ALIAS(0, "advertise-refs", "http-backend-info-refs")`.
fn is_alias(a: usize, b: usize) -> bool {
    let group = |i: usize| matches!(OPTIONS[i].0, "advertise-refs" | "http-backend-info-refs");
    group(a) && group(b)
}

fn exit(stdout: &str, stderr: String, code: u8) -> Parsed {
    Parsed::Exit {
        stdout: stdout.to_owned(),
        stderr,
        code,
    }
}

/// Why the usage is printed on stdout, which decides the exit status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Usage {
    /// `-h`, `--help`, `--help-all`: the user asked; git master exits 0.
    Asked,
    /// After an `error:` (an ambiguous option): exit 129.
    AfterError,
}

impl Usage {
    fn code(self) -> u8 {
        match self {
            Usage::Asked => 0,
            Usage::AfterError => 129,
        }
    }
}

fn show_usage(why: Usage, stderr: String) -> Parsed {
    exit(USAGE, stderr, why.code())
}

fn error_only(msg: String) -> Parsed {
    exit("", format!("error: {msg}\n"), 129)
}

/// A long option's value as `get_value` sets it; `Err` is the `error:` text.
fn set(
    a: &mut Args,
    quiet: &mut u32,
    opt: usize,
    unset: bool,
    value: Option<&[u8]>,
) -> Result<(), String> {
    let name = OPTIONS[opt].0;
    if value.is_some() {
        return Err(if unset {
            format!("option `no-{name}' takes no value")
        } else {
            format!("option `{name}' takes no value")
        });
    }
    match OPTIONS[opt].2 {
        Field::Quiet => *quiet = if unset { 0 } else { *quiet + 1 },
        Field::StatelessRpc => a.stateless_rpc = !unset,
        Field::AdvertiseRefs => a.advertise_refs = !unset,
        Field::RejectThin => a.reject_thin_pack = !unset,
    }
    Ok(())
}

enum Long {
    Done,
    Unknown,
    Exit(Parsed),
}

/// git's `parse_long_opt`, for `arg` without its leading `--`.
fn parse_long(a: &mut Args, quiet: &mut u32, arg: &[u8], disallow_abbreviated: bool) -> Long {
    let arg_end = arg.iter().position(|&c| c == b'=').unwrap_or(arg.len());
    let mut start = 0;
    let mut unset = false;
    let mut no_no = false;
    if arg.starts_with(b"no-") {
        start = 3;
        if arg[3..].starts_with(b"no-") {
            start = 6;
            no_no = true;
        } else {
            unset = true;
        }
    }
    let arg_start = &arg[start..];
    let mut abbrev: Option<(usize, bool)> = None;
    let mut ambiguous: Option<(usize, bool)> = None;
    let mut register = |opt: usize, unset: bool| {
        if let Some((prev, prev_unset)) = abbrev
            && !(prev_unset == unset && is_alias(prev, opt))
        {
            ambiguous = Some((prev, prev_unset));
        }
        abbrev = Some((opt, unset));
    };
    for (i, (long, _, _)) in OPTIONS.iter().enumerate() {
        if no_no {
            // Only an option whose name starts with `no-` takes `--no-no-`.
            continue;
        }
        if let Some(rest) = arg_start.strip_prefix(long.as_bytes()) {
            let value = match rest.first() {
                Some(b'=') => Some(&rest[1..]),
                Some(_) => continue,
                None => None,
            };
            return match set(a, quiet, i, unset, value) {
                Ok(()) => Long::Done,
                Err(e) => Long::Exit(error_only(e)),
            };
        }
        let typed = &arg_start[..arg_end.saturating_sub(start).min(arg_start.len())];
        if long.as_bytes().starts_with(typed) {
            register(i, unset);
        }
        // "negated and abbreviated very much": `--n`, `--no`, `--no-`.
        if b"no-".starts_with(arg) {
            register(i, true);
        }
    }
    if disallow_abbreviated && (ambiguous.is_some() || abbrev.is_some()) {
        return Long::Exit(exit(
            "",
            format!(
                "fatal: disallowed abbreviated or ambiguous option '{}'\n",
                String::from_utf8_lossy(&arg[..arg_end])
            ),
            128,
        ));
    }
    if let (Some((amb, amb_unset)), Some((abb, abb_unset))) = (ambiguous, abbrev) {
        let no = |u: bool| if u { "no-" } else { "" };
        return Long::Exit(show_usage(
            Usage::AfterError,
            format!(
                "error: ambiguous option: {} (could be --{}{} or --{}{})\n",
                String::from_utf8_lossy(arg),
                no(amb_unset),
                OPTIONS[amb].0,
                no(abb_unset),
                OPTIONS[abb].0
            ),
        ));
    }
    if let Some((opt, unset)) = abbrev {
        let value = (arg_end < arg.len()).then(|| &arg[arg_end + 1..]);
        return match set(a, quiet, opt, unset, value) {
            Ok(()) => Long::Done,
            Err(e) => Long::Exit(error_only(e)),
        };
    }
    Long::Unknown
}

/// git's `check_typos`: `-quiet` or `-no-quiet` were meant with two dashes.
fn check_typos(arg: &[u8]) -> Option<Parsed> {
    if arg.len() < 3 {
        return None;
    }
    let typo = arg.starts_with(b"no-")
        || OPTIONS
            .iter()
            .any(|(long, _, _)| long.as_bytes().starts_with(arg));
    typo.then(|| {
        error_only(format!(
            "did you mean `--{}` (with two dashes)?",
            String::from_utf8_lossy(arg)
        ))
    })
}

/// git's `git_env_bool`: `Err` is the fatal message for a value that is not a boolean.
fn env_bool(name: &str, value: Option<&str>) -> Result<bool, String> {
    let Some(v) = value else {
        return Ok(false);
    };
    match v.to_ascii_lowercase().as_str() {
        "true" | "yes" | "on" => return Ok(true),
        "false" | "no" | "off" | "" => return Ok(false),
        _ => {}
    }
    parse_int(v)
        .map(|n| n != 0)
        .ok_or_else(|| format!("bad boolean environment value '{v}' for '{name}'"))
}

/// git's `git_parse_int`: `strtoimax(v, &end, 0)` with an optional `k`, `m` or `g` unit.
fn parse_int(v: &str) -> Option<i64> {
    let (body, factor) = match v.as_bytes().last()?.to_ascii_lowercase() {
        b'k' => (&v[..v.len() - 1], 1i64 << 10),
        b'm' => (&v[..v.len() - 1], 1 << 20),
        b'g' => (&v[..v.len() - 1], 1 << 30),
        _ => (v, 1),
    };
    let body = body.trim_start();
    let (negative, digits) = match body.as_bytes().first() {
        Some(b'-') => (true, &body[1..]),
        Some(b'+') => (false, &body[1..]),
        _ => (false, body),
    };
    let n = if let Some(hex) = digits
        .strip_prefix("0x")
        .or_else(|| digits.strip_prefix("0X"))
    {
        i64::from_str_radix(hex, 16).ok()?
    } else if digits.len() > 1 && digits.starts_with('0') {
        i64::from_str_radix(&digits[1..], 8).ok()?
    } else {
        digits.parse::<i64>().ok()?
    };
    (if negative { -n } else { n }).checked_mul(factor)
}

/// Parse the arguments after `receive-pack`; `disallow_abbreviated` is
/// `GIT_TEST_DISALLOW_ABBREVIATED_OPTIONS`, which git's test suite sets.
pub fn parse(args: &[OsString], disallow_abbreviated: Option<&str>) -> Parsed {
    let disallow_abbreviated = match env_bool(
        "GIT_TEST_DISALLOW_ABBREVIATED_OPTIONS",
        disallow_abbreviated,
    ) {
        Ok(b) => b,
        Err(e) => return exit("", format!("fatal: {e}\n"), 128),
    };
    let mut a = Args::default();
    let mut quiet = 0u32;
    let mut positional: Vec<OsString> = Vec::new();
    let total = args.len();
    let mut i = 0;
    while i < args.len() {
        let os = &args[i];
        let arg = os.as_encoded_bytes();
        i += 1;
        if arg.first() != Some(&b'-') || arg.len() == 1 {
            positional.push(os.clone());
            continue;
        }
        if total == 1 && arg == b"--git-completion-helper" {
            return exit(COMPLETION, String::new(), 0);
        }
        if total == 1 && arg == b"--git-completion-helper-all" {
            return exit(COMPLETION_ALL, String::new(), 0);
        }
        // The argument as the "unknown" report names it, and the unknown character.
        let unknown: (Vec<u8>, usize);
        if arg[1] != b'-' {
            let mut pos = 1;
            let known = |c: u8| c == b'q';
            if !known(arg[pos]) {
                if let Some(p) = check_typos(&arg[1..]) {
                    return p;
                }
                if arg[pos] == b'h' {
                    return show_usage(Usage::Asked, String::new());
                }
                unknown = (arg.to_vec(), pos);
            } else {
                quiet += 1;
                pos += 1;
                if pos < arg.len()
                    && let Some(p) = check_typos(&arg[1..])
                {
                    return p;
                }
                let mut bad = None;
                while pos < arg.len() {
                    if known(arg[pos]) {
                        quiet += 1;
                        pos += 1;
                        continue;
                    }
                    if arg[pos] == b'h' {
                        return show_usage(Usage::Asked, String::new());
                    }
                    // git reports the rest of the cluster as if it were its own argument.
                    let mut faked = vec![b'-'];
                    faked.extend_from_slice(&arg[pos..]);
                    bad = Some((faked, 1));
                    break;
                }
                match bad {
                    None => continue,
                    Some(b) => unknown = b,
                }
            }
        } else {
            if arg == b"--" || arg == b"--end-of-options" {
                positional.extend(args[i..].iter().cloned());
                break;
            }
            if arg == b"--help-all" {
                return exit(USAGE_ALL, String::new(), Usage::Asked.code());
            }
            if arg == b"--help" {
                return show_usage(Usage::Asked, String::new());
            }
            if arg == b"--skip-connectivity-check" {
                a.skip_connectivity_check = true;
                continue;
            }
            match parse_long(&mut a, &mut quiet, &arg[2..], disallow_abbreviated) {
                Long::Done => continue,
                Long::Exit(p) => return p,
                Long::Unknown => unknown = (arg.to_vec(), 2),
            }
        }
        let (argv0, at) = unknown;
        let msg = if argv0[1] == b'-' {
            format!("unknown option `{}'", String::from_utf8_lossy(&argv0[2..]))
        } else if argv0[at].is_ascii() {
            format!("unknown switch `{}'", argv0[at] as char)
        } else {
            format!(
                "unknown non-ascii option in string: `{}'",
                String::from_utf8_lossy(&argv0)
            )
        };
        return exit("", format!("error: {msg}\n{USAGE}"), 129);
    }
    a.quiet = quiet > 0;
    match positional.len() {
        0 => exit(
            "",
            format!("fatal: you must specify a directory\n\n{USAGE_MSG}"),
            129,
        ),
        1 => {
            a.directory = positional.remove(0);
            Parsed::Run(a)
        }
        _ => exit("", format!("fatal: too many arguments\n\n{USAGE_MSG}"), 129),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(args: &[&str]) -> Parsed {
        let args: Vec<OsString> = args.iter().map(OsString::from).collect();
        parse(&args, None)
    }

    fn stderr(args: &[&str]) -> String {
        match run(args) {
            Parsed::Exit { stderr, .. } => stderr,
            Parsed::Run(a) => panic!("{a:?}"),
        }
    }

    #[test]
    fn options_abbreviations_and_negations() {
        let Parsed::Run(a) = run(&["--qu", "--s", "--ad", "--no-ad", "-qq", "--r", "dir"]) else {
            panic!()
        };
        assert!(a.quiet && a.stateless_rpc && !a.advertise_refs && a.reject_thin_pack);
        assert_eq!(a.directory, "dir");
        let Parsed::Run(a) = run(&["--", "-h"]) else {
            panic!()
        };
        assert_eq!(a.directory, "-h");
    }

    #[test]
    fn help_asked_for_exits_0_on_stdout_errors_129() {
        for args in [
            &["-h"][..],
            &["-qh"],
            &["x", "-h"],
            &["--help"],
            &["--help-all"],
        ] {
            let Parsed::Exit {
                stdout,
                stderr,
                code,
            } = run(args)
            else {
                panic!("{args:?}")
            };
            assert!(stdout.starts_with("usage: git receive-pack"), "{args:?}");
            assert_eq!((stderr.as_str(), code), ("", 0), "{args:?}");
        }
        // The usage after an error still exits 129.
        let Parsed::Exit { stdout, code, .. } = run(&["--no"]) else {
            panic!()
        };
        assert_eq!((stdout.as_str(), code), (USAGE, 129));
        let Parsed::Exit { code, .. } = run(&["--bogus"]) else {
            panic!()
        };
        assert_eq!(code, 129);
    }

    #[test]
    fn errors_as_git() {
        assert_eq!(
            stderr(&["--no"]),
            "error: ambiguous option: no (could be --no-advertise-refs or \
             --no-reject-thin-pack-for-testing)\n"
        );
        assert_eq!(
            stderr(&["--no-"]),
            "error: ambiguous option: no- (could be --no-reject-thin-pack-for-testing or \
             --no-reject-thin-pack-for-testing)\n"
        );
        assert_eq!(stderr(&["--qu="]), "error: option `quiet' takes no value\n");
        assert_eq!(
            stderr(&["-htt"]),
            "error: did you mean `--htt` (with two dashes)?\n"
        );
        assert!(stderr(&["-qx"]).starts_with("error: unknown switch `x'\n"));
        assert!(stderr(&["-qé"]).starts_with("error: unknown non-ascii option in string: `-é'\n"));
        assert!(stderr(&["--=", "x"]).starts_with("error: ambiguous option: = (could be"));
    }
}
