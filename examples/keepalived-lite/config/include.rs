//! The files an `include` pattern names, as keepalived 2.2.7 finds them with
//! `glob(3)` (`GLOB_BRACE`; lib/parser.c `open_and_check_glob`,
//! `check_glob_file`): `{a,b}` alternatives in order, `*`, `?` and `[...]`
//! per path component (a leading `.` only matched literally), each
//! alternative's matches sorted, `\` escaping.
//!
//! keepalived only logs most include problems for plain `include`; here a
//! named file that does not exist, a directory, or a file that is not
//! regular and non-executable is an error. A wildcard matching nothing is
//! fine (`include conf.d/*.conf` with an empty directory), except for
//! `includew` and `includea`.

use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// At most this many patterns after brace expansion, and files per include.
const MAX_MATCHES: usize = 1024;

/// The files `pattern` (relative to `dir` unless absolute) names, in
/// keepalived's order.
pub(crate) fn matches(dir: &Path, pattern: &str, strict: bool) -> Result<Vec<PathBuf>, String> {
    let mut out = Vec::new();
    let mut wild = false;
    for alternative in braces(pattern)? {
        let (found, had_wild) = glob_one(dir, &alternative)?;
        if found.is_empty() && !had_wild {
            return Err(format!(
                "no such file: {}",
                dir.join(unescape(&alternative)).display()
            ));
        }
        wild |= had_wild;
        for path in found {
            check_file(&path)?;
            out.push(path);
            if out.len() > MAX_MATCHES {
                return Err(format!("'{pattern}' matches more than {MAX_MATCHES} files"));
            }
        }
    }
    if out.is_empty() && wild && strict {
        return Err(format!("no file matches '{pattern}'"));
    }
    Ok(out)
}

/// keepalived reads only regular files without execute bits.
fn check_file(path: &Path) -> Result<(), String> {
    let meta = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    if meta.is_dir() {
        return Err(format!("{} is a directory", path.display()));
    }
    if !meta.is_file() || meta.permissions().mode() & 0o111 != 0 {
        return Err(format!(
            "{} is not a regular, non-executable file",
            path.display()
        ));
    }
    Ok(())
}

/// Brace expansion: `a{b,c{d,e}}f` is `abf`, `acdf`, `acef`.
fn braces(pattern: &str) -> Result<Vec<String>, String> {
    let b = pattern.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'\\' => i += 2,
            b'{' => {
                if let Some((close, commas)) = matching_brace(b, i) {
                    let (head, tail) = (&pattern[..i], &pattern[close + 1..]);
                    let mut out = Vec::new();
                    let mut start = i + 1;
                    for end in commas.into_iter().chain([close]) {
                        for expanded in braces(&format!("{head}{}{tail}", &pattern[start..end]))? {
                            out.push(expanded);
                            if out.len() > MAX_MATCHES {
                                return Err(format!(
                                    "'{pattern}' expands to more than {MAX_MATCHES} patterns"
                                ));
                            }
                        }
                        start = end + 1;
                    }
                    return Ok(out);
                }
                i += 1;
            }
            _ => i += 1,
        }
    }
    Ok(vec![pattern.to_owned()])
}

/// The `}` closing the `{` at `open`, and the top-level commas between.
fn matching_brace(b: &[u8], open: usize) -> Option<(usize, Vec<usize>)> {
    let mut depth = 0usize;
    let mut commas = Vec::new();
    let mut i = open + 1;
    while i < b.len() {
        match b[i] {
            b'\\' => i += 1,
            b'{' => depth += 1,
            b'}' if depth == 0 => return Some((i, commas)),
            b'}' => depth -= 1,
            b',' if depth == 0 => commas.push(i),
            _ => {}
        }
        i += 1;
    }
    None
}

/// One brace-free pattern: the existing paths it matches, sorted, and
/// whether it had a wildcard.
fn glob_one(dir: &Path, pattern: &str) -> Result<(Vec<PathBuf>, bool), String> {
    let mut candidates = vec![if pattern.starts_with('/') {
        PathBuf::from("/")
    } else {
        dir.to_path_buf()
    }];
    let mut wild = false;
    for component in pattern.split('/').filter(|c| !c.is_empty()) {
        if !has_wildcard(component) {
            let literal = unescape(component);
            candidates.iter_mut().for_each(|c| c.push(&literal));
            continue;
        }
        wild = true;
        let mut next = Vec::new();
        for candidate in &candidates {
            let Ok(entries) = std::fs::read_dir(candidate) else {
                continue;
            };
            for entry in entries.flatten() {
                let name = entry.file_name();
                if name
                    .to_str()
                    .is_some_and(|n| fnmatch(component.as_bytes(), n.as_bytes()))
                {
                    next.push(candidate.join(&name));
                    if next.len() > MAX_MATCHES {
                        return Err(format!("'{pattern}' matches more than {MAX_MATCHES} files"));
                    }
                }
            }
        }
        candidates = next;
    }
    candidates.retain(|c| c.symlink_metadata().is_ok());
    candidates.sort_by(|a, b| a.as_os_str().as_bytes().cmp(b.as_os_str().as_bytes()));
    Ok((candidates, wild))
}

fn has_wildcard(component: &str) -> bool {
    let b = component.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'\\' => i += 2,
            b'*' | b'?' | b'[' => return true,
            _ => i += 1,
        }
    }
    false
}

fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        out.push(if c == '\\' {
            chars.next().unwrap_or('\\')
        } else {
            c
        });
    }
    out
}

/// `fnmatch` without flags but with glob's rule that a leading `.` is only
/// matched by a literal `.`.
fn fnmatch(pattern: &[u8], name: &[u8]) -> bool {
    if name.first() == Some(&b'.') && pattern.first() != Some(&b'.') {
        return false;
    }
    match_from(pattern, name)
}

fn match_from(p: &[u8], n: &[u8]) -> bool {
    // Iterative with one backtrack point, the last `*`.
    let (mut pi, mut ni) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        let step = match p.get(pi) {
            Some(b'*') => {
                star = Some((pi, ni));
                pi += 1;
                continue;
            }
            Some(b'?') => Some(1),
            Some(b'[') => class(&p[pi..], n[ni]).map(|(ok, len)| if ok { len } else { 0 }),
            Some(b'\\') if pi + 1 < p.len() => (p[pi + 1] == n[ni]).then_some(2),
            Some(&c) => (c == n[ni]).then_some(1),
            None => None,
        };
        match step {
            Some(len) if len > 0 => {
                pi += len;
                ni += 1;
            }
            _ => match star {
                Some((sp, sn)) => {
                    star = Some((sp, sn + 1));
                    pi = sp + 1;
                    ni = sn + 1;
                }
                None => return false,
            },
        }
    }
    p[pi..].iter().all(|&c| c == b'*')
}

/// A `[...]` class at the start of `p`: whether `c` is in it and the
/// class's length; None when there is no closing `]` (then `[` is literal,
/// handled by the caller as a mismatch unless equal).
fn class(p: &[u8], c: u8) -> Option<(bool, usize)> {
    let mut i = 1;
    let negate = matches!(p.get(i), Some(b'!' | b'^'));
    if negate {
        i += 1;
    }
    let mut found = false;
    let mut first = true;
    while i < p.len() {
        if p[i] == b']' && !first {
            return Some((found != negate, i + 1));
        }
        first = false;
        let lo = p[i];
        if p.get(i + 1) == Some(&b'-') && p.get(i + 2).is_some_and(|&h| h != b']') {
            let hi = p[i + 2];
            found |= lo <= c && c <= hi;
            i += 3;
        } else {
            found |= lo == c;
            i += 1;
        }
    }
    // No closing bracket: a literal `[`.
    Some((c == b'[', 1))
}
