//! Value syntax: numbers, timers, booleans, addresses, ports, hex strings
//! and shell-like quoted words, each as keepalived 2.2.7 reads it (the
//! `read_*` functions and `read_hex_str` of `lib/parser.c`,
//! `inet_stosockaddr` of `lib/utils.c`). Where keepalived would warn and
//! use a partly read value, these refuse.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

/// keepalived's white space (`WHITE_SPACE_STR`).
pub(crate) fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | 0x0c | b'\n' | b'\r' | 0x0b)
}

/// An unsigned decimal in `min..=max` (`read_unsigned`: leading white
/// space and `+` as `strtoul` takes them, nothing after the digits).
pub(crate) fn unsigned(s: &str, min: u64, max: u64) -> Result<u64, String> {
    let t = s.trim_start_matches(|c: char| c.is_ascii() && is_space(c as u8));
    if t.starts_with('-') {
        return Err(format!("negative number '{s}'"));
    }
    let digits = t.strip_prefix('+').unwrap_or(t);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("invalid number '{s}'"));
    }
    // Only overflow makes an all-digit string fail.
    let v: u64 = digits
        .parse()
        .map_err(|_| format!("number '{s}' outside range [{min}, {max}]"))?;
    if v < min || v > max {
        return Err(format!("number '{s}' outside range [{min}, {max}]"));
    }
    Ok(v)
}

/// [`unsigned`] for a `u32` field.
pub(crate) fn unsigned32(s: &str, min: u32, max: u32) -> Result<u32, String> {
    // In range of u32 by construction.
    unsigned(s, u64::from(min), u64::from(max)).map(|v| v as u32)
}

/// The largest timer keepalived accepts (`TIMER_MAXIMUM`, microseconds).
pub(crate) const TIMER_MAX_US: u64 = u64::MAX - 1;

/// A `<TIMER>`: seconds with up to six decimals (`read_timer`), in
/// `min_us..=max_us` microseconds.
pub(crate) fn timer(s: &str, min_us: u64, max_us: u64) -> Result<Duration, String> {
    if s.starts_with('-') {
        return Err(format!("negative number '{s}'"));
    }
    let (int, frac) = s.split_once('.').unwrap_or((s, ""));
    if frac.len() > 6 {
        // keepalived rounds and reports an error; refuse instead.
        return Err(format!(
            "number '{s}' has too many decimal places (at most 6)"
        ));
    }
    let int = int.trim_start_matches(|c: char| c.is_ascii() && is_space(c as u8));
    let int = int.strip_prefix('+').unwrap_or(int);
    let all_digits = |t: &str| t.bytes().all(|b| b.is_ascii_digit());
    if (int.is_empty() && frac.is_empty()) || !all_digits(int) || !all_digits(frac) {
        return Err(format!("invalid number '{s}'"));
    }
    let too_big = || format!("number '{s}' is too large");
    let whole: u64 = if int.is_empty() {
        0
    } else {
        int.parse().map_err(|_| too_big())?
    };
    let mut micros: u64 = 0;
    for b in frac.bytes().chain(std::iter::repeat(b'0')).take(6) {
        micros = micros * 10 + u64::from(b - b'0');
    }
    let total = whole
        .checked_mul(1_000_000)
        .and_then(|w| w.checked_add(micros))
        .ok_or_else(too_big)?;
    if total < min_us || total > max_us {
        return Err(format!(
            "number '{s}' outside range [{}, {}] seconds",
            fmt_us(min_us),
            fmt_us(max_us)
        ));
    }
    Ok(Duration::from_micros(total))
}

fn fmt_us(us: u64) -> String {
    format!("{}.{:06}", us / 1_000_000, us % 1_000_000)
}

/// `<BOOL>`: `check_true_false`.
pub(crate) fn boolean(s: &str) -> Result<bool, String> {
    match s {
        "true" | "on" | "yes" => Ok(true),
        "false" | "off" | "no" => Ok(false),
        _ => Err(format!("'{s}' is not one of on|off|true|false|yes|no")),
    }
}

/// An address, its family chosen by the presence of `:` as keepalived does.
/// keepalived silently drops a `-RANGE` or `/MASK` suffix here; refused.
pub(crate) fn ip(s: &str) -> Result<IpAddr, String> {
    let parsed = if s.contains(':') {
        s.parse::<Ipv6Addr>().map(IpAddr::V6).ok()
    } else {
        s.parse::<Ipv4Addr>().map(IpAddr::V4).ok()
    };
    parsed.ok_or_else(|| format!("invalid IP address '{s}'"))
}

/// An optional `<PORT>` word: absent or all zeros is port 0 (keepalived
/// accepts that since 2.0.7), else 1..=65535.
pub(crate) fn port(s: Option<&str>) -> Result<u16, String> {
    match s {
        None => Ok(0),
        Some(p) if p.bytes().all(|b| b == b'0') => Ok(0),
        // In range of u16 by construction.
        Some(p) => unsigned(p, 1, 65535)
            .map(|v| v as u16)
            .map_err(|e| format!("port: {e}")),
    }
}

/// A hex string as `read_hex_str`: pairs of hex digits, spaces between
/// pairs, a lone digit before a space is one octet. `x` wildcards (which
/// keepalived allows in `require_reply`) are refused: the model has no
/// mask for them.
pub(crate) fn hex_bytes(s: &str) -> Result<Vec<u8>, String> {
    fn nibble(b: u8, s: &str) -> Result<u8, String> {
        match b {
            b'0'..=b'9' => Ok(b - b'0'),
            b'a'..=b'f' => Ok(b - b'a' + 10),
            b'A'..=b'F' => Ok(b - b'A' + 10),
            b'x' | b'X' => Err(format!(
                "hex string '{s}': wildcard nibbles (x) are not supported by keepalived-lite"
            )),
            _ => Err(format!("invalid hex string '{s}'")),
        }
    }
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    loop {
        while i < b.len() && (b[i] == b' ' || b[i] == b'\t') {
            i += 1;
        }
        if i >= b.len() {
            break;
        }
        let mut v = nibble(b[i], s)?;
        i += 1;
        if i < b.len() && b[i] != b' ' {
            v = (v << 4) | nibble(b[i], s)?;
            i += 1;
        }
        out.push(v);
    }
    if out.is_empty() || out.len() > usize::from(u16::MAX) {
        return Err(format!("invalid hex string '{s}'"));
    }
    Ok(out)
}

/// An MD5 `digest`: exactly 32 hex digits.
pub(crate) fn digest(s: &str) -> Result<[u8; 16], String> {
    let b = s.as_bytes();
    if b.len() != 32 {
        return Err(format!(
            "digest '{s}' must be 32 hex digits, not {}",
            b.len()
        ));
    }
    let mut out = [0u8; 16];
    for (i, pair) in b.chunks(2).enumerate() {
        let text = std::str::from_utf8(pair).map_err(|_| format!("invalid digest '{s}'"))?;
        out[i] =
            u8::from_str_radix(text, 16).map_err(|_| format!("invalid hex in digest '{s}'"))?;
    }
    Ok(out)
}

/// Splits like `alloc_strvec_quoted_escaped` (used for `misc_path`): white
/// space separates words, `"..."` and `'...'` group, backslash escapes as
/// the shell and C (`\n`, `\x41`, `\101`, `\cC`, `\\`).
pub(crate) fn quoted_escaped(s: &str) -> Result<Vec<String>, String> {
    let b = s.as_bytes();
    let mut words = Vec::new();
    let mut i = 0;
    while i < b.len() {
        while i < b.len() && is_space(b[i]) {
            i += 1;
        }
        if i >= b.len() {
            break;
        }
        let mut word: Vec<u8> = Vec::new();
        let mut quote: Option<u8> = None;
        while i < b.len() {
            let special = |c: u8| match quote {
                Some(q) => c == q || c == b'\\',
                None => is_space(c) || c == b'\'' || c == b'"' || c == b'\\',
            };
            let Some(off) = b[i..].iter().position(|&c| special(c)) else {
                if let Some(q) = quote {
                    return Err(format!("missing terminating {} in '{s}'", q as char));
                }
                word.extend_from_slice(&b[i..]);
                i = b.len();
                break;
            };
            word.extend_from_slice(&b[i..i + off]);
            i += off;
            if b[i] == b'\\' {
                i += 1;
                let (c, used) = escape(&b[i..])
                    .ok_or_else(|| format!("missing escaped character at end of '{s}'"))?;
                word.push(c);
                i += used;
                continue;
            }
            if quote.is_some() {
                quote = None;
                i += 1;
                continue;
            }
            if b[i] == b'"' || b[i] == b'\'' {
                quote = Some(b[i]);
                i += 1;
                continue;
            }
            break;
        }
        if word.contains(&0) {
            return Err(format!("NUL character in '{s}'"));
        }
        words.push(String::from_utf8(word).map_err(|_| format!("'{s}' escapes to invalid UTF-8"))?);
    }
    Ok(words)
}

/// One escape after a backslash: the octet and how many bytes it took.
fn escape(b: &[u8]) -> Option<(u8, usize)> {
    let c = *b.first()?;
    if c == b'x' && b.get(1).is_some_and(u8::is_ascii_hexdigit) {
        // Any number of hex digits; like keepalived's char, the value wraps.
        let n = b[1..].iter().take_while(|d| d.is_ascii_hexdigit()).count();
        let v = b[1..=n].iter().fold(0u8, |v, d| {
            (v << 4) | (*d as char).to_digit(16).unwrap_or(0) as u8
        });
        return Some((v, 1 + n));
    }
    if c == b'c' && b.len() > 1 {
        return Some((b[1] & 0x1f, 2));
    }
    if (b'0'..=b'7').contains(&c) {
        let n = b
            .iter()
            .take(3)
            .take_while(|d| (b'0'..=b'7').contains(*d))
            .count();
        let v = b[..n]
            .iter()
            .fold(0u8, |v, d| v.wrapping_shl(3).wrapping_add(d - b'0'));
        return Some((v, n));
    }
    let v = match c {
        b'a' => 0x07,
        b'b' => 0x08,
        b'E' => 0x1b,
        b'f' => 0x0c,
        b'n' => b'\n',
        b'r' => b'\r',
        b't' => b'\t',
        b'v' => 0x0b,
        other => other,
    };
    Some((v, 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers() {
        assert_eq!(unsigned("  +42", 0, 100), Ok(42));
        assert!(unsigned("-1", 0, 100).is_err());
        assert!(unsigned("", 0, 100).is_err());
        assert!(unsigned("99999999999999999999999", 0, u64::MAX).is_err());
        assert_eq!(
            timer("1.5", 0, TIMER_MAX_US),
            Ok(Duration::from_millis(1500))
        );
        assert_eq!(
            timer(".25", 0, TIMER_MAX_US),
            Ok(Duration::from_millis(250))
        );
        assert!(timer("1.0000001", 0, TIMER_MAX_US).is_err());
        assert!(timer(".", 0, TIMER_MAX_US).is_err());
    }

    #[test]
    fn hex() {
        assert_eq!(
            hex_bytes("Ab12f 3 456 546443123"),
            Ok(vec![
                0xab, 0x12, 0x0f, 0x03, 0x45, 0x06, 0x54, 0x64, 0x43, 0x12, 0x03
            ])
        );
        assert!(hex_bytes("zz").is_err());
        assert!(hex_bytes("1x").is_err());
    }

    #[test]
    fn quoting() {
        assert_eq!(
            quoted_escaped(r#"misc_path "/bin/check -a 'b c'" \x41"#),
            Ok(vec![
                "misc_path".into(),
                "/bin/check -a 'b c'".into(),
                "A".into()
            ])
        );
        assert!(quoted_escaped("'open").is_err());
    }
}
