//! What git's fsck checks in a `.gitmodules` blob, as git reads it: the blob is parsed by git's
//! own configuration parser (`config.c`, `git_config_from_mem`: entries are reported in file
//! order, and those before a syntax error still count), and every `submodule.<name>.<key>`
//! entry has its name, `url`, `path` and `update` checked (`fsck.c`, `fsck_gitmodules_fn`;
//! `submodule-config.c`, `check_submodule_name` / `check_submodule_url`, with `urlmatch.c`'s
//! `url_normalize` for the URLs git-remote-curl would be given: the checks added after
//! CVE-2020-5260 and CVE-2020-11008).

/// One finding in a `.gitmodules` blob.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finding {
    /// `gitmodulesName`: `disallowed submodule name: <name>`.
    Name(Vec<u8>),
    /// `gitmodulesUrl`: `disallowed submodule url: <url>`.
    Url(Vec<u8>),
    /// `gitmodulesPath`: `disallowed submodule path: <path>`.
    Path(Vec<u8>),
    /// `gitmodulesUpdate`: `disallowed submodule update setting: <value>`.
    Update(Vec<u8>),
    /// `gitmodulesParse`: `could not parse gitmodules blob` (always last).
    Parse,
}

/// Check the `.gitmodules` blob `data`; the findings in the order git reports them.
pub fn check(data: &[u8]) -> Vec<Finding> {
    let mut findings = Vec::new();
    let parsed = parse_config(data, &mut |var, value| {
        // The callback sees C strings.
        let var = until_nul(var);
        let value = value.map(until_nul);
        let Some((name, key)) = submodule_key(var) else {
            return;
        };
        if !check_submodule_name(name) {
            findings.push(Finding::Name(name.to_vec()));
        }
        let Some(value) = value else {
            return;
        };
        if key == b"url" && !check_submodule_url(value) {
            findings.push(Finding::Url(value.to_vec()));
        }
        if key == b"path" && value.first() == Some(&b'-') {
            findings.push(Finding::Path(value.to_vec()));
        }
        if key == b"update" && value.first() == Some(&b'!') {
            findings.push(Finding::Update(value.to_vec()));
        }
    });
    if parsed.is_err() {
        findings.push(Finding::Parse);
    }
    findings
}

fn until_nul(s: &[u8]) -> &[u8] {
    s.iter().position(|&c| c == 0).map_or(s, |i| &s[..i])
}

/// git's `parse_config_key(var, "submodule", &subsection, …, &key)` with a subsection:
/// `(subsection, key)`.
fn submodule_key(var: &[u8]) -> Option<(&[u8], &[u8])> {
    let rest = var.strip_prefix(b"submodule.")?;
    let dot = rest.iter().rposition(|&c| c == b'.')?;
    Some((&rest[..dot], &rest[dot + 1..]))
}

/// git's `isspace` (`sane_ctype`): space, `\t`, `\n`, `\r`.
fn is_space(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\n' | b'\r')
}

fn is_key_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'-'
}

/// Whether C's `char` is signed here, as on x86: git's buffer reader (`config_buf_fgetc`)
/// returns a `char`, so a 0xff byte reads as `EOF` and a UTF-8 BOM never matches (git skips a
/// BOM in a configuration file, not in a blob).
const SIGNED_CHAR: bool = (std::ffi::c_char::MIN as i32) < 0;

/// git's configuration reader over a buffer (`config_buf_fgetc` and `get_next_char`): `\r\n`
/// reads as `\n`, and the end reads as `\n` with `eof` set (for good: reading on after an
/// early `EOF` continues with the bytes after it, as in git).
struct Source<'a> {
    data: &'a [u8],
    pos: usize,
    eof: bool,
}

impl Source<'_> {
    /// `do_fgetc`: `None` for `EOF`.
    fn fgetc(&mut self) -> Option<u8> {
        let c = *self.data.get(self.pos)?;
        self.pos += 1;
        (!(SIGNED_CHAR && c == 0xff)).then_some(c)
    }

    fn next(&mut self) -> u8 {
        let mut c = self.fgetc();
        if c == Some(b'\r') {
            let at = self.pos;
            c = match self.fgetc() {
                Some(b'\n') => Some(b'\n'),
                None => Some(b'\r'),
                Some(_) => {
                    self.pos = at;
                    Some(b'\r')
                }
            };
        }
        match c {
            Some(c) => c,
            None => {
                self.eof = true;
                b'\n'
            }
        }
    }
}

/// git's `git_parse_source` over `data`, calling `entry(var, value)` for every entry (`var`
/// lower-cased but for a quoted subsection; `value` `None` without `=`). `Err` on the first
/// syntax error, after the entries before it were reported.
fn parse_config(data: &[u8], entry: &mut impl FnMut(&[u8], Option<&[u8]>)) -> Result<(), ()> {
    let mut s = Source {
        data,
        pos: 0,
        eof: false,
    };
    const BOM: &[u8] = b"\xef\xbb\xbf";
    let mut bom = 0;
    let mut comment = false;
    let mut var: Vec<u8> = Vec::new();
    let mut baselen = 0;
    loop {
        let c = s.next();
        if bom < BOM.len() {
            if !SIGNED_CHAR && c == BOM[bom] {
                bom += 1;
                continue;
            }
            if bom != 0 {
                // A partial BOM.
                return Err(());
            }
            bom = BOM.len();
        }
        if c == b'\n' {
            if s.eof {
                return Ok(());
            }
            comment = false;
            continue;
        }
        if comment || is_space(c) {
            continue;
        }
        if c == b'#' || c == b';' {
            comment = true;
            continue;
        }
        if c == b'[' {
            var.clear();
            if base_var(&mut s, &mut var).is_err() || var.is_empty() {
                return Err(());
            }
            var.push(b'.');
            baselen = var.len();
            continue;
        }
        if !c.is_ascii_alphabetic() {
            return Err(());
        }
        var.truncate(baselen);
        var.push(c.to_ascii_lowercase());
        // get_value: the rest of the name, then `= value` or the end of the line.
        let mut c;
        loop {
            c = s.next();
            if s.eof || !is_key_char(c) {
                break;
            }
            var.push(c.to_ascii_lowercase());
        }
        while c == b' ' || c == b'\t' {
            c = s.next();
        }
        if c == b'\n' {
            entry(&var, None);
            continue;
        }
        if c != b'=' {
            return Err(());
        }
        let value = parse_value(&mut s)?;
        entry(&var, Some(&value));
    }
}

/// git's `parse_value`: quotes, escapes (`\t`, `\b`, `\n`, `\\`, `\"`, line continuation),
/// comments and the trimming of unquoted trailing whitespace.
fn parse_value(s: &mut Source<'_>) -> Result<Vec<u8>, ()> {
    let mut value = Vec::new();
    let mut quote = false;
    let mut comment = false;
    let mut trim_len = 0;
    loop {
        let mut c = s.next();
        if c == b'\n' {
            if quote {
                return Err(());
            }
            if trim_len > 0 {
                value.truncate(trim_len);
            }
            return Ok(value);
        }
        if comment {
            continue;
        }
        if is_space(c) && !quote {
            if trim_len == 0 {
                trim_len = value.len();
            }
            if !value.is_empty() {
                value.push(c);
            }
            continue;
        }
        if !quote && (c == b';' || c == b'#') {
            comment = true;
            continue;
        }
        trim_len = 0;
        if c == b'\\' {
            c = match s.next() {
                b'\n' => continue,
                b't' => b'\t',
                b'b' => 0x08,
                b'n' => b'\n',
                c @ (b'\\' | b'"') => c,
                _ => return Err(()),
            };
            value.push(c);
            continue;
        }
        if c == b'"' {
            quote = !quote;
            continue;
        }
        value.push(c);
    }
}

/// git's `get_base_var` / `get_extended_base_var`: `[section]`, `[section.sub]` (lower-cased)
/// or `[section "sub"]` (as written, with `\` escaping the next character).
fn base_var(s: &mut Source<'_>, name: &mut Vec<u8>) -> Result<(), ()> {
    loop {
        let c = s.next();
        if s.eof {
            return Err(());
        }
        if c == b']' {
            return Ok(());
        }
        if is_space(c) {
            let mut c = c;
            loop {
                if c == b'\n' {
                    return Err(());
                }
                c = s.next();
                if !is_space(c) {
                    break;
                }
            }
            if c != b'"' {
                return Err(());
            }
            name.push(b'.');
            loop {
                let mut c = s.next();
                if c == b'\n' {
                    return Err(());
                }
                if c == b'"' {
                    break;
                }
                if c == b'\\' {
                    c = s.next();
                    if c == b'\n' {
                        return Err(());
                    }
                }
                name.push(c);
            }
            return if s.next() == b']' { Ok(()) } else { Err(()) };
        }
        if !is_key_char(c) && c != b'.' {
            return Err(());
        }
        name.push(c.to_ascii_lowercase());
    }
}

/// git's `check_submodule_name`: not empty, no `..` path component (either separator).
pub fn check_submodule_name(name: &[u8]) -> bool {
    if name.is_empty() {
        return false;
    }
    let sep = |c: u8| c == b'/' || c == b'\\';
    let is_dotdot = |rest: &[u8]| rest.starts_with(b"..") && rest.get(2).is_none_or(|&c| sep(c));
    if is_dotdot(name) {
        return false;
    }
    for (i, &c) in name.iter().enumerate() {
        if sep(c) && is_dotdot(&name[i + 1..]) {
            return false;
        }
    }
    true
}

fn hex(c: u8) -> Option<u8> {
    (c as char).to_digit(16).map(|d| d as u8)
}

/// git's `hex2chr`.
fn hex2chr(s: &[u8]) -> Option<u8> {
    Some(hex(*s.first()?)? << 4 | hex(*s.get(1)?)?)
}

/// git's `url_decode`: what precedes the first `:` is kept as it is, then `%XX` is decoded
/// (but `%00`).
fn url_decode(s: &[u8]) -> Vec<u8> {
    let (mut out, rest) = match s.iter().position(|&c| c == b':') {
        Some(i) if i > 0 => (s[..i].to_vec(), &s[i..]),
        _ => (Vec::new(), s),
    };
    let mut i = 0;
    while i < rest.len() {
        if rest[i] == b'%'
            && rest.len() - i >= 3
            && let Some(c) = hex2chr(&rest[i + 1..]).filter(|&c| c > 0)
        {
            out.push(c);
            i += 3;
            continue;
        }
        out.push(rest[i]);
        i += 1;
    }
    out
}

fn starts_with_dot_slash(u: &[u8]) -> bool {
    u.starts_with(b"./") || u.starts_with(b".\\")
}

fn starts_with_dot_dot_slash(u: &[u8]) -> bool {
    u.starts_with(b"../") || u.starts_with(b"..\\")
}

/// git's `url_to_curl_url`: the URL git-remote-curl would be given, if it would be.
fn url_to_curl_url(url: &[u8]) -> Option<&[u8]> {
    for prefix in [&b"http::"[..], b"https::", b"ftp::", b"ftps::"] {
        if let Some(rest) = url.strip_prefix(prefix) {
            return Some(rest);
        }
    }
    [&b"http://"[..], b"https://", b"ftp://", b"ftps://"]
        .iter()
        .any(|p| url.starts_with(p))
        .then_some(url)
}

/// git's `check_submodule_url`.
pub fn check_submodule_url(url: &[u8]) -> bool {
    if url.first() == Some(&b'-') {
        return false;
    }
    if starts_with_dot_slash(url) || starts_with_dot_dot_slash(url) || url.starts_with(b"git://")
    {
        // Could be appended to an http URL and url-decoded.
        if url_decode(url).contains(&b'\n') {
            return false;
        }
        // `../` escaping the root can overwrite the host (CVE-2020-11008).
        let mut next = url;
        let mut dotdots = 0;
        loop {
            if starts_with_dot_dot_slash(next) {
                dotdots += 1;
                next = &next[3..];
            } else if starts_with_dot_slash(next) {
                next = &next[2..];
            } else {
                break;
            }
        }
        return !(dotdots > 0 && matches!(next.first(), Some(b':' | b'/')));
    }
    if let Some(curl_url) = url_to_curl_url(url) {
        return match url_normalize(curl_url) {
            Some(normalized) => !url_decode(&normalized).contains(&b'\n'),
            None => false,
        };
    }
    true
}

const URL_SCHEME_CHARS: &[u8] = b"+.-";
const URL_HOST_CHARS: &[u8] = b".-_[:]";
const URL_UNSAFE_CHARS: &[u8] = b" <>\"%{}|\\^`";
const URL_RESERVED: &[u8] = b":/?#[]@!$&'()*+,;=";

/// git's `append_normalized_escapes` with no extra characters to escape and the reserved ones
/// kept escaped: `None` for a `%` not followed by two hex digits.
fn append_normalized_escapes(out: &mut Vec<u8>, from: &[u8]) -> Option<()> {
    let mut i = 0;
    while i < from.len() {
        let mut ch = from[i];
        i += 1;
        let mut was_esc = false;
        if ch == b'%' {
            if from.len() - i < 2 {
                return None;
            }
            ch = hex2chr(&from[i..])?;
            i += 2;
            was_esc = true;
        }
        if ch <= 0x1f
            || ch >= 0x7f
            || URL_UNSAFE_CHARS.contains(&ch)
            || (was_esc && URL_RESERVED.contains(&ch))
        {
            out.extend_from_slice(format!("%{ch:02X}").as_bytes());
        } else {
            out.push(ch);
        }
    }
    Some(())
}

/// git's `url_normalize` (`urlmatch.c`), `None` where git finds the URL invalid: scheme and
/// host lower-cased, escapes normalised, default ports removed, dot segments resolved.
pub fn url_normalize(url: &[u8]) -> Option<Vec<u8>> {
    let url = until_nul(url);
    let spanned = url
        .iter()
        .position(|&c| !(c.is_ascii_alphanumeric() || URL_SCHEME_CHARS.contains(&c)))
        .unwrap_or(url.len());
    if spanned == 0
        || !url[0].is_ascii_alphabetic()
        || spanned + 3 > url.len()
        || &url[spanned..spanned + 3] != b"://"
    {
        return None;
    }
    let mut norm: Vec<u8> = url[..spanned + 3].to_ascii_lowercase();
    let mut u = spanned + 3;
    let slash = u + url[u..]
        .iter()
        .position(|c| b"/?#".contains(c))
        .unwrap_or(url.len() - u);
    // user:password@
    if let Some(at) = url[u..].iter().position(|&c| c == b'@').map(|i| u + i)
        && at < slash
    {
        if at > u {
            append_normalized_escapes(&mut norm, &url[u..at])?;
        }
        norm.push(b'@');
        u = at + 1;
    }
    // The host, without a port; no escapes.
    let mut has_host = false;
    if u == url.len() || b":/?#".contains(&url[u]) {
        if !norm.starts_with(b"file:") {
            return None;
        }
    } else {
        has_host = true;
    }
    let mut colon = slash;
    if slash > u {
        let mut c = slash - 1;
        while c > u && url[c] != b':' && url[c] != b']' {
            c -= 1;
        }
        if url[c] == b':' {
            colon = c;
        }
    }
    if colon < slash && !has_host && colon + 1 != slash {
        // A file: URL may not have a port.
        return None;
    }
    let host_ok = url[u..]
        .iter()
        .position(|&c| !(c.is_ascii_alphanumeric() || URL_HOST_CHARS.contains(&c)))
        .unwrap_or(url.len() - u);
    if host_ok < colon - u {
        return None;
    }
    norm.extend(url[u..colon].iter().map(u8::to_ascii_lowercase));
    u = colon;
    // The port, if not the default, without leading zeros.
    if colon < slash {
        u += 1;
        while u < slash && url[u] == b'0' {
            u += 1;
        }
        if u == slash && url[u - 1] == b'0' {
            u -= 1;
        }
        let port = &url[u..slash];
        let default = port.is_empty()
            || (port == b"80" && norm.starts_with(b"http:"))
            || (port == b"443" && norm.starts_with(b"https:"));
        if !default {
            if !port.iter().all(u8::is_ascii_digit) {
                return None;
            }
            let n: u32 = if port.len() <= 5 {
                std::str::from_utf8(port).ok()?.parse().ok()?
            } else {
                0
            };
            if n == 0 || n > 65535 {
                return None;
            }
            norm.push(b':');
            norm.extend_from_slice(port);
        }
        u = slash;
    }
    // The path, with `.` and `..` segments resolved.
    let path_off = norm.len();
    norm.push(b'/');
    if url.get(u) == Some(&b'/') {
        u += 1;
    }
    loop {
        let seg_start = norm.len();
        let next = u + url[u..]
            .iter()
            .position(|c| b"/?#".contains(c))
            .unwrap_or(url.len() - u);
        append_normalized_escapes(&mut norm, &url[u..next])?;
        let mut skip_add_slash = false;
        if &norm[seg_start..] == b"." {
            if seg_start == path_off + 1 {
                norm.truncate(norm.len() - 1);
                skip_add_slash = true;
            } else {
                norm.truncate(norm.len() - 2);
            }
        } else if &norm[seg_start..] == b".." {
            let mut prev = norm.len() - 3;
            if prev == path_off {
                return None;
            }
            prev -= 1;
            while norm[prev] != b'/' {
                prev -= 1;
            }
            if prev == path_off {
                norm.truncate(prev + 1);
                skip_add_slash = true;
            } else {
                norm.truncate(prev);
            }
        }
        u = next;
        if url.get(u) != Some(&b'/') {
            break;
        }
        u += 1;
        if !skip_add_slash {
            norm.push(b'/');
        }
    }
    // The query and fragment, escapes normalised.
    if u < url.len() {
        append_normalized_escapes(&mut norm, &url[u..])?;
    }
    Some(norm)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(!check_submodule_name(b"../x"));
        assert!(!check_submodule_name(b"a/../x"));
        assert!(!check_submodule_name(b"a\\.."));
        assert!(!check_submodule_name(b""));
        assert!(check_submodule_name(b"a..b"));
    }

    #[test]
    fn urls_as_git_checks_them() {
        assert!(!check_submodule_url(b"-u"));
        assert!(!check_submodule_url(b"../:x"));
        assert!(!check_submodule_url(b"..\\/x"));
        assert!(!check_submodule_url(b"./%0ahost"));
        // Before the first colon nothing is decoded.
        assert!(check_submodule_url(b"./%0a:host"));
        assert!(check_submodule_url(b"https://example.com/x.git"));
        assert!(!check_submodule_url(b"https:///example.com/x.git"));
        assert!(!check_submodule_url(b"http::https:///example.com"));
        assert!(!check_submodule_url(b"https://example.com/%0a"));
        assert!(!check_submodule_url(b"https://user%0a@example.com/"));
        assert!(!check_submodule_url(b"https://example.com:0/"));
        assert!(!check_submodule_url(b"https://example.com:99999/"));
        assert!(!check_submodule_url(b"https://ex%41mple.com/"));
        assert!(!check_submodule_url(b"https://example.com/../x"));
        assert!(!check_submodule_url(b"https://example.com/%zz"));
        // Not a URL git-remote-curl is given: not normalised.
        assert!(check_submodule_url(b"HTTPS:///example.com"));
        assert!(check_submodule_url(b"foo::https:///example.com"));
        assert!(check_submodule_url(b"git@example.com:x.git"));
    }

    #[test]
    fn normalize_as_urlmatch() {
        let n = |u: &str| url_normalize(u.as_bytes()).map(|v| String::from_utf8(v).unwrap());
        assert_eq!(
            n("HTTP://User@Example.COM:80/a/./b/../c?%7e#x").as_deref(),
            Some("http://User@example.com/a/c?~#x")
        );
        assert_eq!(n("https://h:00443").as_deref(), Some("https://h/"));
        assert_eq!(n("https://h:08080/").as_deref(), Some("https://h:8080/"));
        assert_eq!(n("https://[::1]:22/").as_deref(), Some("https://[::1]:22/"));
        assert_eq!(n("https://h/%2f%41").as_deref(), Some("https://h/%2FA"));
        assert_eq!(n("https://h/./x").as_deref(), Some("https://h/x"));
        assert_eq!(n("https://h/a/..").as_deref(), Some("https://h/"));
        assert_eq!(n("file:///x").as_deref(), Some("file:///x"));
        assert_eq!(n("file://:1/x"), None);
        assert_eq!(n("https://h/.."), None);
        assert_eq!(n("1https://h/"), None);
    }

    #[test]
    fn entries_in_file_order_and_parse_errors_last() {
        let f = check(
            b"[submodule \"../a\"]\n\turl = ./%0a\n\tpath = -p\n\turl = ok\n\
              [submodule.B]\n update = !cmd ; comment\n[bad",
        );
        assert_eq!(
            f,
            vec![
                Finding::Name(b"../a".to_vec()),
                Finding::Url(b"./%0a".to_vec()),
                Finding::Name(b"../a".to_vec()),
                Finding::Path(b"-p".to_vec()),
                Finding::Name(b"../a".to_vec()),
                Finding::Update(b"!cmd".to_vec()),
                Finding::Parse,
            ]
        );
        assert_eq!(
            check(b"[submodule \"x\"]\n url = \"a\\nb\"  \n"),
            vec![]
        );
        assert_eq!(
            check(b"[submodule \"x\"]\n url = \"https://h/a\\nb\"\n"),
            vec![Finding::Url(b"https://h/a\nb".to_vec())]
        );
    }
}
