//! A duration on the command line (`--replace-after 10m`): a whole number with a unit, `s`,
//! `m`, `h` or `d`, or seconds alone (`90`).

use std::time::Duration;

/// Why a duration argument was not understood.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Error {
    #[error("'{0}' is not a duration (a whole number with s, m, h or d: 30s, 10m, 2h)")]
    NotADuration(String),
}

/// `30s`, `10m`, `2h`, `1d`, or `90` (seconds).
pub(crate) fn parse(arg: &str) -> Result<Duration, Error> {
    let bad = || Error::NotADuration(arg.to_owned());
    let (digits, unit) = match arg.find(|c: char| !c.is_ascii_digit()) {
        Some(at) => arg.split_at(at),
        None => (arg, "s"),
    };
    let n: u64 = digits.parse().map_err(|_| bad())?;
    let per = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return Err(bad()),
    };
    n.checked_mul(per).map(Duration::from_secs).ok_or_else(bad)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_with_a_unit_or_seconds_alone() {
        let s = Duration::from_secs;
        assert_eq!(parse("30s"), Ok(s(30)));
        assert_eq!(parse("10m"), Ok(s(600)));
        assert_eq!(parse("2h"), Ok(s(7200)));
        assert_eq!(parse("1d"), Ok(s(86_400)));
        assert_eq!(parse("90"), Ok(s(90)));
        assert_eq!(parse("0s"), Ok(s(0)));
        for bad in [
            "",
            "m",
            "10x",
            "1.5m",
            "-1s",
            "10 m",
            "99999999999999999999d",
        ] {
            assert_eq!(parse(bad), Err(Error::NotADuration(bad.into())), "{bad}");
        }
        assert_eq!(
            parse("ten").unwrap_err().to_string(),
            "'ten' is not a duration (a whole number with s, m, h or d: 30s, 10m, 2h)"
        );
    }
}
