//! From text to logical lines, as keepalived 2.2.7's `read_line`,
//! `decomment` and `alloc_strvec_r` (lib/parser.c) make them:
//!
//! - `#` and `!` start a comment anywhere outside double quotes; `\#` and
//!   `\!` are the characters themselves;
//! - every `{` and `}` outside double quotes becomes a line of its own, so
//!   `real_server 10.0.0.1 80 { weight 2 }` is four lines;
//! - words are separated by white space; `"..."` is one word without its
//!   quotes (single quotes are plain characters here);
//! - `include PATTERN` (and `includer`, `includem`, `includew`, `includeb`,
//!   `includea`) splices in the matching files, relative to the including
//!   file's directory.
//!
//! keepalived 2.2.7 continues a line ending in `\` only inside a `$NAME=`
//! definition; elsewhere the backslash stays part of the last word (so the
//! keyword becomes unknown). Definitions (`$`), conditional lines (`@`) and
//! `~SEQ`/`~LST` are refused as unsupported.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use super::include;
use super::model::ConfigError;
use super::values::is_space;

/// keepalived reads with `fgets` into 1024 bytes: a longer line is cut in
/// two and its tail read as a line of its own. Refused instead.
const MAX_LINE: usize = 1023;
/// A configuration (or included) file larger than this is refused.
const MAX_FILE: u64 = 16 << 20;
/// `include`s nested deeper than this (a file including itself) are refused.
const MAX_DEPTH: usize = 32;

/// What a logical line is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `{`.
    Open,
    /// `}`.
    Close,
    /// A keyword and its values.
    Words,
}

/// A logical line.
#[derive(Debug, Clone)]
pub(crate) struct Line {
    /// The file it comes from.
    pub file: Rc<PathBuf>,
    /// Its 1-based line in that file.
    pub line: usize,
    /// Brace or words.
    pub kind: Kind,
    /// The text after comment removal and brace splitting (what keepalived
    /// hands to handlers that re-split the line, `misc_path`).
    pub raw: String,
    /// The words (`["{"]` or `["}"]` for braces).
    pub words: Vec<String>,
}

impl Line {
    /// The first word.
    pub fn keyword(&self) -> &str {
        self.words.first().map_or("", String::as_str)
    }

    /// The `i`th word, if any.
    pub fn word(&self, i: usize) -> Option<&str> {
        self.words.get(i).map(String::as_str)
    }

    /// An error at this line, about its keyword.
    pub fn error(&self, reason: impl Into<String>) -> ConfigError {
        at(&self.file, self.line, Some(self.keyword()), reason)
    }
}

/// An error at `file:line`.
pub(crate) fn at(
    file: &Path,
    line: usize,
    keyword: Option<&str>,
    reason: impl Into<String>,
) -> ConfigError {
    ConfigError {
        file: file.to_path_buf(),
        line,
        keyword: keyword.map(str::to_owned),
        reason: reason.into(),
    }
}

/// Reads a configuration file: at most `MAX_FILE` bytes of UTF-8.
pub(crate) fn read_file(path: &Path) -> Result<String, String> {
    let file =
        std::fs::File::open(path).map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    let mut bytes = Vec::new();
    file.take(MAX_FILE + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    if bytes.len() as u64 > MAX_FILE {
        return Err(format!(
            "{} is larger than {MAX_FILE} bytes",
            path.display()
        ));
    }
    String::from_utf8(bytes).map_err(|e| {
        let line = 1 + e.as_bytes()[..e.utf8_error().valid_up_to()]
            .iter()
            .filter(|&&b| b == b'\n')
            .count();
        format!("{}: line {line} is not valid UTF-8", path.display())
    })
}

/// The logical lines of `text`, read from `file`, with its includes.
pub(crate) fn lex(text: &str, file: &Path) -> Result<Vec<Line>, ConfigError> {
    let mut out = Vec::new();
    lex_into(text, &Rc::new(file.to_path_buf()), 0, &mut out)?;
    Ok(out)
}

fn lex_into(
    text: &str,
    file: &Rc<PathBuf>,
    depth: usize,
    out: &mut Vec<Line>,
) -> Result<(), ConfigError> {
    for (index, physical) in text.split('\n').enumerate() {
        let line = index + 1;
        let err = |reason: &str| at(file, line, None, reason);
        if physical.len() > MAX_LINE {
            return Err(err(
                "line longer than 1023 bytes (keepalived would split it)",
            ));
        }
        if physical.contains('\0') {
            return Err(err("NUL character in line"));
        }
        let text = physical.trim_end_matches(['\r', '\n']);
        if text.is_empty() {
            continue;
        }
        let buf = decomment(text).map_err(|r| err(&r))?;
        let mut rest = buf;
        while !rest.is_empty() {
            rest = piece(rest, file, line, depth, out)?;
        }
    }
    Ok(())
}

/// Handles one piece of a line (the whole line, or what follows a brace):
/// pushes its logical line and returns what is left.
fn piece(
    buf: String,
    file: &Rc<PathBuf>,
    line: usize,
    depth: usize,
    out: &mut Vec<Line>,
) -> Result<String, ConfigError> {
    let err = |reason: String| at(file, line, None, reason);
    if buf.starts_with('@') {
        return Err(err(
            "conditional configuration (@) is not supported by keepalived-lite".into(),
        ));
    }
    if buf.starts_with('$') {
        return Err(err(
            "parameter substitution ($) is not supported by keepalived-lite".into(),
        ));
    }
    if buf.starts_with("~SEQ") || buf.starts_with("~LST") {
        return Err(err(
            "~SEQ and ~LST are not supported by keepalived-lite".into()
        ));
    }
    if let Some((keyword, strict, pattern)) = include_of(&buf) {
        let here = |reason: String| at(file, line, Some(keyword), reason);
        splice(pattern, strict, file, depth, out, here)?;
        return Ok(String::new());
    }
    let push = |kind: Kind, raw: &str, words: Vec<String>, out: &mut Vec<Line>| {
        out.push(Line {
            file: Rc::clone(file),
            line,
            kind,
            raw: raw.to_owned(),
            words,
        })
    };
    match find_brace(&buf) {
        Some(0) => {
            let kind = if buf.starts_with('{') {
                Kind::Open
            } else {
                Kind::Close
            };
            push(kind, &buf[..1], vec![buf[..1].to_owned()], out);
            Ok(buf[1..].trim_start_matches([' ', '\t']).to_owned())
        }
        found => {
            let end = found.unwrap_or(buf.len());
            let text = buf[..end].trim_end_matches([' ', '\t']);
            let words = words(text).map_err(err)?;
            if !words.is_empty() {
                push(Kind::Words, text, words, out);
            }
            Ok(buf[end..].to_owned())
        }
    }
}

/// `decomment`: leading blanks, comments and trailing blanks removed, `\#`
/// and `\!` unescaped outside quotes. An unterminated `"` is refused.
fn decomment(line: &str) -> Result<String, String> {
    let mut s: Vec<u8> = line.trim_start_matches([' ', '\t']).as_bytes().to_vec();
    let mut quote = false;
    let mut cont = false;
    let mut comment: Option<usize> = None;
    let mut p = 0;
    while p < s.len() {
        match s[p] {
            b'"' => {
                if comment.is_none() {
                    quote = !quote;
                }
                p += 1;
            }
            b'\\' if p + 1 < s.len() => {
                if !quote && (s[p + 1] == b'#' || s[p + 1] == b'!') {
                    s.remove(p);
                    p += 1;
                } else {
                    p += 2;
                }
            }
            b'\\' => {
                s.truncate(p);
                cont = true;
                break;
            }
            b'#' | b'!' if !quote && comment.is_none() => {
                comment = Some(p);
                p += 1;
            }
            _ => p += 1,
        }
    }
    if quote {
        return Err("unterminated quote".into());
    }
    if let Some(c) = comment {
        s.truncate(c);
    }
    while s.last().is_some_and(|&b| b == b' ' || b == b'\t') {
        s.pop();
    }
    if cont {
        s.push(b'\\');
    }
    // Only ASCII bytes were removed, so the text is still UTF-8.
    String::from_utf8(s).map_err(|_| "invalid UTF-8".into())
}

/// Where the first `{` or `}` outside double quotes is.
fn find_brace(buf: &str) -> Option<usize> {
    let b = buf.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'{' | b'}' => return Some(i),
            b'"' => i += 1 + b[i + 1..].iter().position(|&c| c == b'"')? + 1,
            _ => i += 1,
        }
    }
    None
}

/// `alloc_strvec_r`: white-space separated words, `"..."` one word.
fn words(text: &str) -> Result<Vec<String>, String> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    loop {
        while i < b.len() && is_space(b[i]) {
            i += 1;
        }
        if i >= b.len() {
            return Ok(out);
        }
        if b[i] == b'"' {
            let len = b[i + 1..]
                .iter()
                .position(|&c| c == b'"')
                .ok_or("unmatched quote")?;
            out.push(text[i + 1..i + 1 + len].to_owned());
            i += len + 2;
        } else {
            let len = b[i..]
                .iter()
                .position(|&c| is_space(c) || c == b'"')
                .unwrap_or(b.len() - i);
            out.push(text[i..i + len].to_owned());
            i += len;
        }
    }
}

/// `is_include`: `include` (or `includer`...) then white space, then the
/// pattern (the rest of the line). Returns the keyword, whether it is
/// `includew`/`includea` (which make a wildcard matching nothing an error)
/// and the pattern.
fn include_of(buf: &str) -> Option<(&str, bool, &str)> {
    let b = buf.as_bytes();
    if !buf.starts_with("include") || b.len() < 8 {
        return None;
    }
    let start = if is_space(b[7]) {
        8
    } else if b"rmwba".contains(&b[7]) && b.len() > 8 && is_space(b[8]) {
        9
    } else {
        return None;
    };
    let strict = matches!(b[7], b'w' | b'a');
    Some((
        &buf[..start - 1],
        strict,
        buf[start..].trim_start_matches([' ', '\t']),
    ))
}

/// Lexes the files `pattern` matches into `out`. Errors about the include
/// itself go through `here`; errors inside an included file name that file.
fn splice(
    pattern: &str,
    strict: bool,
    from: &Path,
    depth: usize,
    out: &mut Vec<Line>,
    here: impl Fn(String) -> ConfigError,
) -> Result<(), ConfigError> {
    if depth >= MAX_DEPTH {
        return Err(here(format!("includes nested more than {MAX_DEPTH} deep")));
    }
    let dir = match from.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let files = include::matches(dir, pattern, strict).map_err(&here)?;
    for path in files {
        let text = read_file(&path).map_err(&here)?;
        lex_into(&text, &Rc::new(path), depth + 1, out)?;
    }
    Ok(())
}
