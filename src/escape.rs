//! Client-controlled values in log lines, escaped so that no request can write a control
//! character, a newline or an escape sequence into the log, or forge another line or field.
//!
//! Both forms escape control characters (`\n`, `\r`, `\t`, `\x1b`, other C0/C1 bytes as
//! `\xNN` / `\u{NN}`), Unicode format characters that reorder or hide text (bidi overrides,
//! zero-width characters, line and paragraph separators) as `\u{…}`, the replacement
//! character (where invalid UTF-8 was) as `\u{fffd}`, and the backslash itself, so an
//! escaped value reads back unambiguously. Whitespace other than the ASCII space (no-break
//! and ideographic spaces, …) is escaped as `\u{…}` too: it would look like a field separator
//! to a reader or to a tool splitting on Unicode whitespace. Every value sits in the line as `key=value`, so
//! neither may let a space, `"` or `=` end it: [`Escaped::token`] (repository, user, method)
//! escapes them as `\x20`, `\x22`, `\x3d`; [`Escaped::text`] (outcomes, messages) keeps them
//! readable by quoting the value (`key="a b=c"`, with `\"` inside) when it holds any of them
//! or is empty, as logfmt does. A line therefore splits into exactly the fields it was
//! written with: a bare value runs to the next space, a quoted one to the next unescaped `"`.

use std::fmt;

/// A value made safe for one log line (see the module).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Escaped<'a> {
    text: &'a str,
    token: bool,
}

impl<'a> Escaped<'a> {
    /// Free text (messages, outcomes): spaces and `=` stay, in a quoted value.
    pub(crate) fn text(text: &'a str) -> Self {
        Escaped { text, token: false }
    }
    /// A `key=value` value: spaces, `"` and `=` are escaped too.
    #[cfg_attr(not(feature = "serve"), allow(dead_code))]
    pub(crate) fn token(text: &'a str) -> Self {
        Escaped { text, token: true }
    }
}

/// Characters that change how the text around them is shown without showing themselves.
fn is_invisible_format(c: char) -> bool {
    matches!(c,
        '\u{00ad}' | '\u{061c}' | '\u{180e}' | '\u{200b}'..='\u{200f}' | '\u{2028}'..='\u{202e}'
        | '\u{2060}'..='\u{206f}' | '\u{feff}' | '\u{fff9}'..='\u{fffd}')
}

/// Whether a value needs quotes to stay one field: it would otherwise end early, or be empty.
fn needs_quotes(text: &str) -> bool {
    text.is_empty() || text.contains([' ', '"', '='])
}

/// Whitespace that is not the ASCII space, which separates fields.
fn is_other_whitespace(c: char) -> bool {
    c.is_whitespace() && c != ' '
}

impl fmt::Display for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use fmt::Write;
        let quoted = !self.token && needs_quotes(self.text);
        if quoted {
            f.write_char('"')?;
        }
        for c in self.text.chars() {
            match c {
                '\\' => f.write_str("\\\\")?,
                '\n' => f.write_str("\\n")?,
                '\r' => f.write_str("\\r")?,
                '\t' => f.write_str("\\t")?,
                ' ' | '"' | '=' if self.token => write!(f, "\\x{:02x}", c as u32)?,
                '"' => f.write_str("\\\"")?,
                c if (c as u32) < 0x20 || c as u32 == 0x7f => write!(f, "\\x{:02x}", c as u32)?,
                c if c.is_control() || is_invisible_format(c) || is_other_whitespace(c) => {
                    write!(f, "\\u{{{:x}}}", c as u32)?
                }
                c => f.write_char(c)?,
            }
        }
        if quoted {
            f.write_char('"')?;
        }
        Ok(())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn no_raw_control_characters_survive() {
        let hostile = "a\nb\r\x1b[31mred\x00\u{7f}\u{85}\u{202e}x\\y \"q\"=\u{fffd}";
        let text = Escaped::text(hostile).to_string();
        assert_eq!(
            text,
            "\"a\\nb\\r\\x1b[31mred\\x00\\x7f\\u{85}\\u{202e}x\\\\y \\\"q\\\"=\\u{fffd}\""
        );
        assert!(!text.chars().any(|c| c.is_control()));
        let token = Escaped::token("x status=200 \"y\"").to_string();
        assert_eq!(token, "x\\x20status\\x3d200\\x20\\x22y\\x22");
        assert_eq!(Escaped::token("team/app.git").to_string(), "team/app.git");
        assert_eq!(Escaped::text("héllo wörld").to_string(), "\"héllo wörld\"");
        assert_eq!(Escaped::text("ok").to_string(), "ok");
        assert_eq!(Escaped::text("").to_string(), "\"\"");
        assert_eq!(Escaped::token("a\u{a0}b").to_string(), "a\\u{a0}b");
    }

    /// The fields of `line` (`key=value` separated by one space), each value unescaped: a
    /// bare value runs to the next space, a quoted one to its closing `"`; `\\`, `\"`, `\n`,
    /// `\r`, `\t`, `\xNN` and `\u{N…}` are read back. Anything else, a raw control or invisible
    /// character, a `"` inside a bare value, or a word without `=`, is an error: the line was
    /// not written by these escapes.
    pub(crate) fn parse_fields(line: &str) -> Result<Vec<(String, String)>, String> {
        let mut fields = Vec::new();
        let mut rest = line;
        while !rest.is_empty() {
            let (key, after) = rest
                .split_once('=')
                .ok_or_else(|| format!("no '=' in {rest:?}"))?;
            if key.is_empty() || !key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return Err(format!("bad key {key:?}"));
            }
            let (value, after) = parse_value(after)?;
            fields.push((key.to_owned(), value));
            rest = match after.strip_prefix(' ') {
                Some(r) if !r.is_empty() => r,
                Some(_) => return Err("trailing space".into()),
                None if after.is_empty() => after,
                None => return Err(format!("no space before {after:?}")),
            };
        }
        Ok(fields)
    }

    /// One value from the start of `s`, and what follows it.
    fn parse_value(s: &str) -> Result<(String, &str), String> {
        let quoted = s.starts_with('"');
        let mut chars = s.char_indices().skip(usize::from(quoted)).peekable();
        let mut value = String::new();
        while let Some((i, c)) = chars.next() {
            match c {
                '"' if quoted => return Ok((value, &s[i + 1..])),
                ' ' if !quoted => return Ok((value, &s[i..])),
                '"' => return Err(format!("raw '\"' in a bare value: {s:?}")),
                '\\' => {
                    let (_, e) = chars.next().ok_or("a lone '\\' at the end")?;
                    match e {
                        '\\' | '"' => value.push(e),
                        'n' => value.push('\n'),
                        'r' => value.push('\r'),
                        't' => value.push('\t'),
                        'x' => {
                            let hex: String =
                                (0..2).filter_map(|_| chars.next()).map(|p| p.1).collect();
                            let n = u32::from_str_radix(&hex, 16).map_err(|e| e.to_string())?;
                            value.push(char::from_u32(n).ok_or("bad \\x")?);
                        }
                        'u' => {
                            if chars.next().map(|p| p.1) != Some('{') {
                                return Err("\\u without '{'".into());
                            }
                            let mut hex = String::new();
                            loop {
                                match chars.next() {
                                    Some((_, '}')) => break,
                                    Some((_, h)) => hex.push(h),
                                    None => return Err("unclosed \\u{".into()),
                                }
                            }
                            let n = u32::from_str_radix(&hex, 16).map_err(|e| e.to_string())?;
                            value.push(char::from_u32(n).ok_or("bad \\u")?);
                        }
                        e => return Err(format!("unknown escape \\{e}")),
                    }
                }
                c if c.is_control() || is_invisible_format(c) || is_other_whitespace(c) => {
                    return Err(format!("raw {c:?} in the line"));
                }
                c => value.push(c),
            }
        }
        if quoted {
            Err(format!("unclosed quote: {s:?}"))
        } else {
            Ok((value, ""))
        }
    }

    /// Values a client may send, each meant to break a `key=value` line some way.
    pub(crate) fn hostile_values() -> Vec<String> {
        let mut v: Vec<String> = [
            "x user=admin status=200",
            "x\" user=\"admin",
            "\"",
            "\\",
            "\\\"",
            "\\\" user=admin",
            "\\x20",
            "\\u{41}",
            "\\n",
            "a\nb\r\nc INFO berth::serve: request user=admin",
            "\t",
            "\x00\x01\x1b[31mred\x1b[0m\x07\x7f",
            "\u{85}\u{9b}",
            "\u{202e}nimda\u{202c}",
            "\u{200b}\u{feff}\u{2060}\u{00ad}",
            "\u{2028}\u{2029}",
            "alice\u{a0}status=200\u{3000}x\u{2003}y",
            "",
            " ",
            "=",
            "==",
            "key=",
            " leading",
            "trailing ",
            "ok",
            "héllo wörld",
        ]
        .into_iter()
        .map(str::to_owned)
        .collect();
        // Invalid UTF-8 reaches the log through a lossy decoding.
        v.push(String::from_utf8_lossy(b"\xff\xfe ok=1 \xc3").into_owned());
        v
    }

    #[test]
    fn every_line_parses_back_into_exactly_the_fields_written() {
        for value in hostile_values() {
            let line = format!(
                "text={} token={} n=1",
                Escaped::text(&value),
                Escaped::token(&value)
            );
            assert!(!line.chars().any(|c| c.is_control()), "{line:?}");
            let fields = parse_fields(&line).unwrap_or_else(|e| panic!("{line:?}: {e}"));
            assert_eq!(
                fields,
                [
                    ("text".to_owned(), value.clone()),
                    ("token".to_owned(), value.clone()),
                    ("n".to_owned(), "1".to_owned())
                ],
                "{line:?}"
            );
            // A token never needs quotes, so never holds a space, '"' or '='.
            assert!(!Escaped::token(&value).to_string().contains([' ', '"', '=']));
        }
    }

    #[test]
    fn the_parser_refuses_what_the_escapes_never_write() {
        for line in [
            "a=x b",
            "a=\"x",
            "a=x\"y",
            "a=\\q",
            "a=x\ny",
            "a=\"x\"b=1",
            "=x",
        ] {
            assert!(parse_fields(line).is_err(), "{line:?}");
        }
    }
}
