//! `berth serve --config FILE`: a TOML file of `serve`'s flags, turned into arguments before
//! the command line's.
//!
//! The keys are not listed anywhere: they are read from clap's own definition of the `serve`
//! subcommand at run time ([`Keys::of`]), so every flag, including one added later, is a key
//! of the same name (the long flag without `--`) with the same default and the same value
//! parser. A flag (`auto-init = true`), an option (`listen = "0.0.0.0:8080"`,
//! `max-concurrent-pushes = 32`) or a repeatable option as an array (`trusted-proxy =
//! ["10.0.0.0/8"]`). A flag given on the command line replaces the file's key entirely (a
//! repeatable one too: its values are the command line's alone). An unknown key, a value of the
//! wrong shape or one the flag's parser refuses is an error naming the key and its line.
//!
//! [`effective`] renders the settings a command line (with its file) comes to, as TOML that
//! `--config` reads back: `berth serve --print-config`.

use std::ffi::{OsStr, OsString};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use clap::{Arg, ArgAction, Command};

/// The flags that steer the file itself, never keys in it.
const FILE_FLAGS: [&str; 2] = ["config", "print-config"];

/// Why the settings file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("--config needs a file name")]
    NoFileName,
    #[error("cannot read the settings file {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: {source}", path.display())]
    Toml {
        path: PathBuf,
        source: Box<toml::de::Error>,
    },
    #[error("{}: line {line}: {why}", path.display())]
    Key {
        path: PathBuf,
        line: usize,
        why: KeyError,
    },
}

/// What is wrong with one key of the file.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error(
        "unknown key `{0}` (the keys are `berth serve`'s flags without `--`: see berth serve --help)"
    )]
    Unknown(String),
    #[error("`{0}` steers the settings file and is a command-line flag only")]
    FileFlag(String),
    #[error("`{key}` takes {shape}")]
    Shape { key: String, shape: Shape },
    #[error("`{key}`: {}", first_line(.source))]
    Value {
        key: String,
        source: Box<clap::Error>,
    },
}

/// The TOML shape a key's flag takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// A flag without a value: `true` or `false`.
    Bool,
    /// One string, number or boolean.
    Scalar,
    /// A repeatable option: an array of scalars.
    Array,
}

impl std::fmt::Display for Shape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Shape::Bool => "true or false",
            Shape::Scalar => "one value (a string, a number or a boolean)",
            Shape::Array => "an array of values (it is a repeatable flag)",
        })
    }
}

fn first_line(e: &clap::Error) -> String {
    let s = e.to_string();
    let line = s.lines().next().unwrap_or_default();
    line.strip_prefix("error: ").unwrap_or(line).to_owned()
}

/// One key: the flag it stands for.
#[derive(Debug, Clone)]
struct Key {
    long: String,
    shape: Shape,
    arg: Arg,
}

impl Key {
    /// Whether the flag's own value parser takes `value` (alone: the flag's relations to
    /// other flags are the whole command line's to check).
    fn check(&self, value: &str) -> Result<(), clap::Error> {
        let alone = Arg::new(self.arg.get_id().clone())
            .allow_hyphen_values(true)
            .action(self.arg.get_action().clone())
            .value_parser(self.arg.get_value_parser().clone());
        let argv = ["berth", value];
        match self.shape {
            Shape::Bool => Ok(()),
            Shape::Scalar | Shape::Array => Command::new("berth")
                .arg(alone)
                .try_get_matches_from(argv)
                .map(drop),
        }
    }
}

/// The keys of a subcommand, read from its clap definition.
#[derive(Debug, Clone)]
pub struct Keys {
    cmd: Command,
    keys: Vec<Key>,
}

impl Keys {
    /// Every long flag of `cmd` (built), less help and version: the keys a settings file may set.
    pub fn of(cmd: &Command) -> Keys {
        let mut cmd = cmd.clone();
        cmd.build();
        let keys = cmd
            .get_arguments()
            .filter_map(|a| {
                let long = a.get_long()?;
                let shape = match a.get_action() {
                    ArgAction::SetTrue | ArgAction::SetFalse => Shape::Bool,
                    ArgAction::Set => Shape::Scalar,
                    ArgAction::Append => Shape::Array,
                    _ => return None,
                };
                Some(Key {
                    long: long.to_owned(),
                    shape,
                    arg: a.clone(),
                })
            })
            .collect();
        Keys { cmd, keys }
    }

    fn get(&self, long: &str) -> Option<&Key> {
        self.keys.iter().find(|k| k.long == long)
    }
}

/// Where `--config` points in the arguments after the subcommand, if anywhere.
pub fn config_path(args: &[OsString]) -> Result<Option<PathBuf>, ConfigError> {
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "--" {
            break;
        }
        if a == "--config" {
            return match it.next() {
                Some(p) => Ok(Some(PathBuf::from(p))),
                None => Err(ConfigError::NoFileName),
            };
        }
        if let Some(p) = a.to_str().and_then(|s| s.strip_prefix("--config=")) {
            return Ok(Some(PathBuf::from(p)));
        }
    }
    Ok(None)
}

/// The long flags the arguments after the subcommand name (`--name` or `--name=value`).
fn flags_given(args: &[OsString]) -> Vec<String> {
    args.iter()
        .map_while(|a| (a != "--").then_some(a))
        .filter_map(|a| a.to_str()?.strip_prefix("--"))
        .map(|s| s.split_once('=').map_or(s, |(n, _)| n).to_owned())
        .collect()
}

/// The arguments the settings `text` (read from `path`) stand for, less the keys whose flag
/// `given` (the command line after the subcommand) has: to be put before the command line's.
pub fn file_args(
    keys: &Keys,
    path: &Path,
    text: &str,
    given: &[OsString],
) -> Result<Vec<OsString>, ConfigError> {
    type Table = std::collections::BTreeMap<toml::Spanned<String>, toml::Spanned<toml::Value>>;
    let table: Table = toml::from_str(text).map_err(|e| ConfigError::Toml {
        path: path.to_owned(),
        source: Box::new(e),
    })?;
    let on_command_line = flags_given(given);
    let mut entries: Vec<_> = table.into_iter().collect();
    // File order: the first bad key is the first one an editor shows.
    entries.sort_by_key(|(k, _)| k.span().start);
    let mut out = Vec::new();
    for (key, value) in entries {
        let line = text[..key.span().start].matches('\n').count() + 1;
        let fail = |why| ConfigError::Key {
            path: path.to_owned(),
            line,
            why,
        };
        let name = key.get_ref().as_str();
        let k = keys
            .get(name)
            .ok_or_else(|| fail(KeyError::Unknown(name.to_owned())))?;
        if FILE_FLAGS.contains(&name) {
            return Err(fail(KeyError::FileFlag(name.to_owned())));
        }
        let values = values_of(k, value.get_ref()).map_err(&fail)?;
        for v in &values {
            k.check(v).map_err(|e| {
                fail(KeyError::Value {
                    key: name.to_owned(),
                    source: Box::new(e),
                })
            })?;
        }
        if on_command_line.contains(&k.long) {
            continue;
        }
        match k.shape {
            Shape::Bool => {
                if values == ["true"] {
                    out.push(format!("--{}", k.long).into());
                }
            }
            Shape::Scalar | Shape::Array => {
                out.extend(values.iter().map(|v| format!("--{}={v}", k.long).into()));
            }
        }
    }
    Ok(out)
}

/// A key's value as the flag's value texts (a boolean flag's as `true`/`false`).
fn values_of(k: &Key, v: &toml::Value) -> Result<Vec<String>, KeyError> {
    let shape_error = || KeyError::Shape {
        key: k.long.clone(),
        shape: k.shape,
    };
    let scalar = |v: &toml::Value| match v {
        toml::Value::String(s) => Some(s.clone()),
        toml::Value::Integer(i) => Some(i.to_string()),
        toml::Value::Float(f) => Some(f.to_string()),
        toml::Value::Boolean(b) => Some(b.to_string()),
        _ => None,
    };
    match (k.shape, v) {
        (Shape::Bool, toml::Value::Boolean(b)) => Ok(vec![b.to_string()]),
        (Shape::Bool, _) => Err(shape_error()),
        (Shape::Scalar, v) => scalar(v).map(|s| vec![s]).ok_or_else(shape_error),
        (Shape::Array, toml::Value::Array(a)) => a
            .iter()
            .map(|v| scalar(v).ok_or_else(shape_error))
            .collect(),
        (Shape::Array, _) => Err(shape_error()),
    }
}

/// `argv` with the settings file of `--config` (when the subcommand's arguments, from
/// `argv[sub]` on, name one) turned into arguments just after the subcommand's name.
pub fn with_file(
    keys: &Keys,
    argv: Vec<OsString>,
    sub: usize,
) -> Result<Vec<OsString>, ConfigError> {
    let given = &argv[sub + 1..];
    let Some(path) = config_path(given)? else {
        return Ok(argv);
    };
    let text = std::fs::read_to_string(&path).map_err(|source| ConfigError::Read {
        path: path.clone(),
        source,
    })?;
    let from_file = file_args(keys, &path, &text, given)?;
    let mut out = argv[..=sub].to_vec();
    out.extend(from_file);
    out.extend_from_slice(given);
    Ok(out)
}

/// The effective settings of the subcommand's arguments `args` (its name first) as TOML: each
/// key with its value (from the command line, the file or the default), unset ones commented.
pub fn effective(keys: &Keys, args: &[OsString]) -> Result<String, Box<clap::Error>> {
    let m = keys
        .cmd
        .clone()
        .try_get_matches_from(args)
        .map_err(Box::new)?;
    let mut out = String::from(
        "# berth serve's effective settings (the file given with --config, then the command line,\n\
         # then the defaults); keys as `berth serve --help`'s flags.\n",
    );
    for k in &keys.keys {
        if FILE_FLAGS.contains(&k.long.as_str()) {
            continue;
        }
        let id = k.arg.get_id().as_str();
        let raw: Vec<&OsStr> = m.get_raw(id).map(|r| r.collect()).unwrap_or_default();
        let texts: Vec<String> = raw
            .iter()
            .map(|r| r.to_string_lossy().into_owned())
            .collect();
        let value = match k.shape {
            Shape::Bool => Some(toml::Value::Boolean(m.get_flag(id))),
            Shape::Scalar => texts.first().map(|t| typed(t)),
            Shape::Array => Some(toml::Value::Array(texts.iter().map(|t| typed(t)).collect())),
        };
        match value {
            Some(v) => {
                let _ = writeln!(out, "{} = {v}", k.long);
            }
            None => {
                let _ = writeln!(out, "# {} (not set)", k.long);
            }
        }
    }
    Ok(out)
}

/// A flag's value text as the TOML value that reads back as the same text.
fn typed(t: &str) -> toml::Value {
    if let Ok(i) = t.parse::<i64>() {
        return toml::Value::Integer(i);
    }
    match t.parse::<f64>() {
        Ok(f) if f.is_finite() && t.contains('.') && f.to_string() == t => toml::Value::Float(f),
        _ => toml::Value::String(t.to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys() -> Keys {
        Keys::of(&crate::serve_command())
    }

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    /// A value the flag's own parser accepts: its default, a possible value, or a sample.
    fn sample(k: &Key, cmd: &Command) -> String {
        let _ = cmd;
        let ok = |v: &str| k.check(v).is_ok();
        let mut candidates: Vec<String> = k
            .arg
            .get_possible_values()
            .iter()
            .map(|p| p.get_name().to_owned())
            .collect();
        candidates.extend(["7", "127.0.0.1:7", "x"].map(String::from));
        candidates
            .into_iter()
            .find(|c| ok(c))
            .expect("some sample value parses")
    }

    #[test]
    fn every_serve_flag_is_a_key() {
        // The list comes from clap's definition, so a flag added later is covered too.
        let keys = keys();
        let mut text = String::new();
        let mut expected = Vec::new();
        for k in &keys.keys {
            if FILE_FLAGS.contains(&k.long.as_str()) {
                continue;
            }
            let v = sample(k, &keys.cmd);
            match k.shape {
                Shape::Bool => text += &format!("{} = true\n", k.long),
                Shape::Scalar => text += &format!("{} = {:?}\n", k.long, v),
                Shape::Array => text += &format!("{} = [{:?}]\n", k.long, v),
            }
            expected.push(k.arg.get_id().as_str().to_owned());
        }
        assert!(expected.len() > 30, "{expected:?}");
        let args = file_args(&keys, Path::new("t.toml"), &text, &[]).unwrap();
        let mut argv = os(&["serve"]);
        argv.extend(args);
        let m = keys.cmd.clone().try_get_matches_from(&argv).unwrap();
        for id in expected {
            assert_eq!(
                m.value_source(&id),
                Some(clap::parser::ValueSource::CommandLine),
                "{id} not set from the file"
            );
        }
    }

    #[test]
    fn an_unknown_key_is_named_with_its_line() {
        let text = "root = \"r\"\n\n# a comment\nlisten-adress = \"x\"\n";
        let e = file_args(&keys(), Path::new("b.toml"), text, &[]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "b.toml: line 4: unknown key `listen-adress` (the keys are `berth serve`'s flags \
             without `--`: see berth serve --help)"
        );
    }

    #[test]
    fn a_bad_value_or_shape_is_named_with_its_line() {
        let e = file_args(
            &keys(),
            Path::new("b.toml"),
            "max-concurrent-pushes = \"many\"\n",
            &[],
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.starts_with("b.toml: line 1: `max-concurrent-pushes`: invalid value 'many'"),
            "{e}"
        );
        let e = file_args(&keys(), Path::new("b.toml"), "\nauto-init = \"yes\"\n", &[])
            .unwrap_err()
            .to_string();
        assert_eq!(e, "b.toml: line 2: `auto-init` takes true or false");
        let e = file_args(&keys(), Path::new("b.toml"), "hook-env = \"PGHOST\"\n", &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("`hook-env` takes an array"), "{e}");
        let e = file_args(&keys(), Path::new("b.toml"), "config = \"x\"\n", &[])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("line 1: `config` steers the settings file"),
            "{e}"
        );
    }

    #[test]
    fn the_command_line_overrides_the_file() {
        let text = "listen = \"0.0.0.0:1\"\nhook-env = [\"A\", \"B\"]\nauto-init = true\n";
        let given = os(&["--listen=127.0.0.1:2", "--hook-env", "C"]);
        let args = file_args(&keys(), Path::new("t"), text, &given).unwrap();
        assert_eq!(args, os(&["--auto-init"]));
        let argv = with_file_text(text, &given);
        let m = keys().cmd.try_get_matches_from(&argv).unwrap();
        assert_eq!(m.get_one::<String>("listen").unwrap(), "127.0.0.1:2");
        let env: Vec<&String> = m.get_many::<String>("hook_env").unwrap().collect();
        assert_eq!(env, ["C"]);
        assert!(m.get_flag("auto_init"));
    }

    fn with_file_text(text: &str, given: &[OsString]) -> Vec<OsString> {
        let mut argv = os(&["serve"]);
        argv.extend(file_args(&keys(), Path::new("t"), text, given).unwrap());
        argv.extend_from_slice(given);
        argv
    }

    #[test]
    fn the_effective_settings_read_back_as_themselves() {
        let given = os(&["serve", "--listen=0.0.0.0:9", "--trusted-proxy=10.0.0.0/8"]);
        let printed = effective(&keys(), &given).unwrap();
        assert!(printed.contains("\nlisten = \"0.0.0.0:9\"\n"), "{printed}");
        assert!(
            printed.contains("\nmax-concurrent-pushes = 16\n"),
            "{printed}"
        );
        assert!(printed.contains("\nauto-init = false\n"), "{printed}");
        assert!(
            printed.contains("\ntrusted-proxy = [\"10.0.0.0/8\"]\n"),
            "{printed}"
        );
        assert!(printed.contains("\n# credentials (not set)\n"), "{printed}");
        let again = effective(&keys(), &with_file_text(&printed, &[])).unwrap();
        assert_eq!(printed, again);
    }

    #[test]
    fn config_is_found_in_either_spelling() {
        assert_eq!(
            config_path(&os(&["--listen", "x", "--config", "a.toml"])).unwrap(),
            Some(PathBuf::from("a.toml"))
        );
        assert_eq!(
            config_path(&os(&["--config=b.toml"])).unwrap(),
            Some(PathBuf::from("b.toml"))
        );
        assert!(config_path(&os(&["--config"])).is_err());
        assert_eq!(config_path(&os(&["--", "--config=c"])).unwrap(), None);
    }
}
