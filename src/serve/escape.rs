//! Client-controlled values in log lines, escaped so that no request can write a control
//! character, a newline or an escape sequence into the log, or forge another line or field.
//!
//! [`Escaped::text`] escapes control characters (`\n`, `\r`, `\t`, `\x1b`, other C0/C1 bytes as
//! `\xNN` / `\u{NN}`), Unicode format characters that reorder or hide text (bidi overrides,
//! zero-width characters, line and paragraph separators) as `\u{…}`, the replacement
//! character (where invalid UTF-8 was) as `\u{fffd}`, and the backslash itself, so an
//! escaped value reads back unambiguously. [`Escaped::token`] also escapes spaces, `"` and `=`,
//! for values (repository, user) that sit in the line as `key=value`.

use std::fmt;

/// A value made safe for one log line (see the module).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Escaped<'a> {
    text: &'a str,
    token: bool,
}

impl<'a> Escaped<'a> {
    /// Free text (messages, outcomes): spaces stay.
    pub(crate) fn text(text: &'a str) -> Self {
        Escaped { text, token: false }
    }
    /// A `key=value` value: spaces, `"` and `=` are escaped too.
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

impl fmt::Display for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use fmt::Write;
        for c in self.text.chars() {
            match c {
                '\\' => f.write_str("\\\\")?,
                '\n' => f.write_str("\\n")?,
                '\r' => f.write_str("\\r")?,
                '\t' => f.write_str("\\t")?,
                ' ' | '"' | '=' if self.token => write!(f, "\\x{:02x}", c as u32)?,
                c if (c as u32) < 0x20 || c as u32 == 0x7f => write!(f, "\\x{:02x}", c as u32)?,
                c if c.is_control() || is_invisible_format(c) => {
                    write!(f, "\\u{{{:x}}}", c as u32)?
                }
                c => f.write_char(c)?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_raw_control_characters_survive() {
        let hostile = "a\nb\r\x1b[31mred\x00\u{7f}\u{85}\u{202e}x\\y \"q\"=\u{fffd}";
        let text = Escaped::text(hostile).to_string();
        assert_eq!(
            text,
            "a\\nb\\r\\x1b[31mred\\x00\\x7f\\u{85}\\u{202e}x\\\\y \"q\"=\\u{fffd}"
        );
        assert!(!text.chars().any(|c| c.is_control()));
        let token = Escaped::token("x status=200 \"y\"").to_string();
        assert_eq!(token, "x\\x20status\\x3d200\\x20\\x22y\\x22");
        assert_eq!(Escaped::token("team/app.git").to_string(), "team/app.git");
        assert_eq!(Escaped::text("héllo wörld").to_string(), "héllo wörld");
    }
}
