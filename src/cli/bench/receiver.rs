//! The receivers a benchmark compares: `--receiver NAME=COMMAND` (or a bare `COMMAND`, named by
//! itself), and which of them is the baseline the others are measured against.

/// One receive-pack command under a short name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Receiver {
    /// What the tables and the plot call it.
    pub name: String,
    /// Run as `<command> --stateless-rpc <target>` through `sh -c`.
    pub command: String,
}

/// Why the receivers given cannot be benchmarked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// `NAME=` with nothing to run.
    #[error("--receiver {name}=: no command after the name")]
    EmptyCommand {
        /// The name given.
        name: String,
    },
    /// Two receivers under one name.
    #[error("two receivers are named {0:?}: give them different names (NAME=COMMAND)")]
    Duplicate(String),
    /// `--baseline` names no receiver.
    #[error("--baseline {name}: no receiver has that name (they are: {known})")]
    UnknownBaseline {
        /// The name given.
        name: String,
        /// The receivers' names, comma-separated.
        known: String,
    },
}

/// A name is one word of letters, digits and `._+-` (so `git-2.47` is one, and a command such
/// as `/usr/bin/git receive-pack` is not mistaken for one).
fn is_name(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '+' | '-'))
}

/// `NAME=COMMAND`, or a bare `COMMAND` named by itself. A command that starts with an
/// environment assignment needs a name in front: `x=FOO=1 git receive-pack`.
pub fn parse(spec: &str) -> Result<Receiver, Error> {
    match spec.split_once('=') {
        Some((name, command)) if is_name(name) => {
            let command = command.trim();
            if command.is_empty() {
                return Err(Error::EmptyCommand {
                    name: name.to_owned(),
                });
            }
            Ok(Receiver {
                name: name.to_owned(),
                command: command.to_owned(),
            })
        }
        _ => Ok(Receiver {
            name: spec.trim().to_owned(),
            command: spec.trim().to_owned(),
        }),
    }
}

/// The receivers in the order given with the baseline first: `baseline` names it, else it is
/// the first. Names must differ.
pub fn ordered(
    mut receivers: Vec<Receiver>,
    baseline: Option<&str>,
) -> Result<Vec<Receiver>, Error> {
    for (i, r) in receivers.iter().enumerate() {
        if receivers[..i].iter().any(|o| o.name == r.name) {
            return Err(Error::Duplicate(r.name.clone()));
        }
    }
    if let Some(b) = baseline {
        let Some(at) = receivers.iter().position(|r| r.name == b) else {
            return Err(Error::UnknownBaseline {
                name: b.to_owned(),
                known: receivers
                    .iter()
                    .map(|r| r.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        };
        let base = receivers.remove(at);
        receivers.insert(0, base);
    }
    Ok(receivers)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(name: &str, command: &str) -> Receiver {
        Receiver {
            name: name.into(),
            command: command.into(),
        }
    }

    #[test]
    fn named_and_bare_receivers() {
        assert_eq!(
            parse("git-2.47=/usr/bin/git receive-pack"),
            Ok(r("git-2.47", "/usr/bin/git receive-pack"))
        );
        assert_eq!(
            parse("master=~/git/bin-wrappers/git receive-pack"),
            Ok(r("master", "~/git/bin-wrappers/git receive-pack"))
        );
        assert_eq!(
            parse("git receive-pack"),
            Ok(r("git receive-pack", "git receive-pack"))
        );
        // A path with '=' later on is a bare command.
        assert_eq!(
            parse("/opt/a=b/git receive-pack"),
            Ok(r("/opt/a=b/git receive-pack", "/opt/a=b/git receive-pack"))
        );
        assert_eq!(
            parse("x=FOO=1 git receive-pack"),
            Ok(r("x", "FOO=1 git receive-pack"))
        );
        assert_eq!(
            parse("old= "),
            Err(Error::EmptyCommand { name: "old".into() })
        );
    }

    #[test]
    fn the_baseline_goes_first_and_names_differ() {
        let rs = vec![r("a", "x"), r("b", "y"), r("c", "z")];
        let names = |v: Vec<Receiver>| v.into_iter().map(|r| r.name).collect::<Vec<_>>();
        assert_eq!(names(ordered(rs.clone(), None).unwrap()), ["a", "b", "c"]);
        assert_eq!(
            names(ordered(rs.clone(), Some("c")).unwrap()),
            ["c", "a", "b"]
        );
        assert!(matches!(
            ordered(rs, Some("d")),
            Err(Error::UnknownBaseline { known, .. }) if known == "a, b, c"
        ));
        assert_eq!(
            ordered(vec![r("a", "x"), r("a", "y")], None),
            Err(Error::Duplicate("a".into()))
        );
    }
}
