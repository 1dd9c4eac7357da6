//! Checker blocks inside a `real_server`: `TCP_CHECK`, `HTTP_GET`,
//! `MISC_CHECK`, `UDP_CHECK`, as keepalived 2.2.7's check_api.c
//! (`queue_checker`, `install_checker_common_keywords`) and check_tcp.c,
//! check_http.c, check_misc.c, check_udp.c read them.
//!
//! The connect address is resolved here: keepalived copies the real
//! server's address as written (before it adjusts the real server's port)
//! when the checker starts, then `connect_ip` replaces the address and
//! `connect_port` the port.

use std::net::{IpAddr, SocketAddr};
use std::ops::RangeInclusive;
use std::time::Duration;

use super::lexer::Line;
use super::model::{ConfigError, HttpProtocol, UdpCheck, UrlCheck, unspecified};
use super::parse::{Cursor, args, bad, unknown, unsupported};
use super::values::{digest, hex_bytes, quoted_escaped, unsigned, unsigned32};
use super::vs::{Level, Timing};

/// `HTTP_GET` as written.
pub(crate) struct RawHttp {
    pub urls: Vec<UrlCheck>,
    pub virtualhost: Option<String>,
    pub protocol: HttpProtocol,
}

/// `MISC_CHECK` as written; `user` already defaulted to `script_user`.
pub(crate) struct RawMisc {
    pub argv: Vec<String>,
    /// `misc_timeout`; None (or 0): the virtual server's `delay_loop`.
    pub timeout: Option<Duration>,
    pub dynamic: bool,
    pub user: Option<String>,
}

/// What a checker checks.
pub(crate) enum RawKind {
    Tcp,
    Http(RawHttp),
    Misc(RawMisc),
    Udp(UdpCheck),
}

/// One checker block.
pub(crate) struct RawChecker {
    pub line: usize,
    pub kind: RawKind,
    pub connect: SocketAddr,
    pub bind: Option<SocketAddr>,
    pub timing: Timing,
}

/// Connection options as written.
#[derive(Default)]
struct Conn {
    ip: Option<IpAddr>,
    port: Option<u16>,
    bind_ip: Option<IpAddr>,
    bind_port: Option<u16>,
}

/// Reads the checker block at `head`; None if `head` names no checker.
pub(crate) fn checker<'a>(
    cur: &mut Cursor<'a>,
    head: &'a Line,
    rs: SocketAddr,
    script_user: Option<&str>,
) -> Result<Option<RawChecker>, ConfigError> {
    let (level, mut kind) = match head.keyword() {
        "TCP_CHECK" => (Level::Checker, RawKind::Tcp),
        "HTTP_GET" => (
            Level::Checker,
            RawKind::Http(RawHttp {
                urls: Vec::new(),
                virtualhost: None,
                protocol: HttpProtocol::Http10,
            }),
        ),
        "MISC_CHECK" => (
            Level::Misc,
            RawKind::Misc(RawMisc {
                argv: Vec::new(),
                timeout: None,
                dynamic: false,
                user: script_user.map(str::to_owned),
            }),
        ),
        "UDP_CHECK" => (
            Level::Checker,
            RawKind::Udp(UdpCheck {
                payload: Vec::new(),
                require_reply: None,
                min_reply_length: 0,
                // `udp_check_handler`: UINT8_MAX.
                max_reply_length: 255,
            }),
        ),
        _ => return Ok(None),
    };
    args(head, 0, 0)?;
    let mut conn = Conn::default();
    let mut timing = Timing::default();
    cur.block(head, |cur, l| {
        if timing.keyword(l, level)? || (level == Level::Checker && connection(l, &mut conn, rs)?) {
            return Ok(());
        }
        let known = match &mut kind {
            RawKind::Tcp => false,
            RawKind::Http(h) => http_key(cur, l, h, &mut timing)?,
            RawKind::Misc(m) => misc_key(l, m)?,
            RawKind::Udp(u) => udp_key(l, u)?,
        };
        match l.keyword() {
            _ if known => Ok(()),
            "bind_if" | "fwmark" | "log_all_failures" | "enable_sni" | "fast_recovery" => {
                Err(unsupported(l))
            }
            _ => Err(unknown(l)),
        }
    })?;
    match &kind {
        RawKind::Http(h) if h.urls.is_empty() => return Err(head.error("HTTP_GET has no url")),
        RawKind::Misc(m) if m.argv.is_empty() => {
            return Err(head.error("MISC_CHECK has no misc_path"));
        }
        RawKind::Udp(u) if u.min_reply_length > u.max_reply_length => {
            return Err(
                head.error("min_reply_length > max_reply_length: the check would always fail")
            );
        }
        _ => {}
    }
    let connect = SocketAddr::new(conn.ip.unwrap_or(rs.ip()), conn.port.unwrap_or(rs.port()));
    if level == Level::Checker {
        if connect.port() == 0 {
            return Err(
                head.error("no port to connect to: give the real server a port, or connect_port")
            );
        }
        // `check_conn_opts`: a link-local address needs `bind_if`.
        if let IpAddr::V6(a) = connect.ip()
            && a.segments()[0] & 0xffc0 == 0xfe80
        {
            return Err(
                head.error("a link-local address needs bind_if, not supported by keepalived-lite")
            );
        }
    }
    let bind = match (conn.bind_ip, conn.bind_port) {
        (None, None) => None,
        (Some(ip), port) => Some(SocketAddr::new(ip, port.unwrap_or(0))),
        // keepalived binds only with `bindto`; a lone `bind_port` binds the
        // wildcard address here, as the keyword asks.
        (None, Some(port)) => Some(SocketAddr::new(unspecified(connect.ip()), port)),
    };
    Ok(Some(RawChecker {
        line: head.line,
        kind,
        connect,
        bind,
        timing,
    }))
}

/// `connect_ip`, `connect_port`, `bindto`, `bind_port` (families checked
/// as keepalived does, keyword by keyword).
fn connection(l: &Line, c: &mut Conn, rs: SocketAddr) -> Result<bool, ConfigError> {
    let one = || args(l, 1, 1).map(|a| a[0].as_str());
    let family = |a: &IpAddr| a.is_ipv4();
    match l.keyword() {
        "connect_ip" => {
            let a = super::values::ip(one()?).map_err(bad(l))?;
            if c.bind_ip.is_some_and(|b| family(&b) != family(&a)) {
                return Err(l.error("connect_ip does not match the address family of bindto"));
            }
            c.ip = Some(a);
        }
        "bindto" => {
            let a = super::values::ip(one()?).map_err(bad(l))?;
            if family(&c.ip.unwrap_or(rs.ip())) != family(&a) {
                return Err(
                    l.error("bindto does not match the address family of the connect address")
                );
            }
            c.bind_ip = Some(a);
        }
        "connect_port" => c.port = Some(unsigned32(one()?, 1, 65535).map_err(bad(l))? as u16),
        "bind_port" => c.bind_port = Some(unsigned32(one()?, 1, 65535).map_err(bad(l))? as u16),
        _ => return Ok(false),
    }
    Ok(true)
}

fn http_key<'a>(
    cur: &mut Cursor<'a>,
    l: &'a Line,
    h: &mut RawHttp,
    timing: &mut Timing,
) -> Result<bool, ConfigError> {
    match l.keyword() {
        // The deprecated spelling of `retry`, HTTP_GET only.
        "nb_get_retry" => {
            timing.retry = Some(unsigned32(&args(l, 1, 1)?[0], 0, u32::MAX).map_err(bad(l))?)
        }
        "virtualhost" => h.virtualhost = Some(args(l, 1, 1)?[0].clone()),
        "http_protocol" => {
            h.protocol = match args(l, 1, 1)?[0].as_str() {
                "1.0" => HttpProtocol::Http10,
                "1.1" => HttpProtocol::Http11,
                "1.0C" | "1.0c" => HttpProtocol::Http10Close,
                other => return Err(l.error(format!("invalid http_protocol '{other}'"))),
            };
        }
        "url" => h.urls.push(url(cur, l)?),
        _ => return Ok(false),
    }
    Ok(true)
}

fn url<'a>(cur: &mut Cursor<'a>, head: &'a Line) -> Result<UrlCheck, ConfigError> {
    args(head, 0, 0)?;
    let mut path = None;
    let mut sum = None;
    let mut codes: Vec<RangeInclusive<u16>> = Vec::new();
    let mut virtualhost = None;
    cur.block(head, |_, l| {
        match l.keyword() {
            "path" => path = Some(args(l, 1, 1)?[0].clone()),
            "digest" => {
                let value = digest(&args(l, 1, 1)?[0]).map_err(bad(l))?;
                if sum.replace(value).is_some() {
                    return Err(l.error("digest given twice"));
                }
            }
            "status_code" => {
                for w in args(l, 1, usize::MAX)? {
                    codes.push(status(w).map_err(bad(l))?);
                }
            }
            "virtualhost" => virtualhost = Some(args(l, 1, 1)?[0].clone()),
            "regex" | "regex_no_match" | "regex_options" | "regex_min_offset"
            | "regex_max_offset" | "regex_stack" => {
                return Err(unsupported(l));
            }
            _ => return Err(unknown(l)),
        }
        Ok(())
    })?;
    let path = path.ok_or_else(|| head.error("url has no path"))?;
    if codes.is_empty() {
        // `url_check`: HTTP_DEFAULT_STATUS_CODE_MIN..=MAX.
        codes.push(200..=299);
    }
    Ok(UrlCheck {
        path,
        digest: sum,
        status_codes: codes,
        virtualhost,
    })
}

/// `200` or `200-299`, within 100..=599.
fn status(w: &str) -> Result<RangeInclusive<u16>, String> {
    let (lo, hi) = w.split_once('-').unwrap_or((w, w));
    let code = |s: &str| {
        unsigned(s, 100, 599)
            .map(|v| v as u16)
            .map_err(|_| format!("invalid status code '{w}'"))
    };
    let (lo, hi) = (code(lo)?, code(hi)?);
    if lo > hi {
        return Err(format!("invalid status code range '{w}'"));
    }
    Ok(lo..=hi)
}

fn misc_key(l: &Line, m: &mut RawMisc) -> Result<bool, ConfigError> {
    match l.keyword() {
        "misc_path" => {
            // keepalived splits the raw line with quotes and escapes, then
            // splits its second word again into the command line: words
            // after the second are dropped. Refused instead.
            let words = quoted_escaped(&l.raw).map_err(bad(l))?;
            match words.len() {
                0 | 1 => return Err(l.error("missing value")),
                2 => {}
                _ => {
                    return Err(l.error(
                        "keepalived would ignore the words after the program; quote the whole command line",
                    ));
                }
            }
            m.argv = quoted_escaped(&words[1]).map_err(bad(l))?;
            if m.argv.is_empty() {
                return Err(l.error("empty command line"));
            }
        }
        "misc_timeout" => {
            let secs = unsigned32(&args(l, 1, 1)?[0], 0, u32::MAX / 1_000_000).map_err(bad(l))?;
            m.timeout = (secs > 0).then(|| Duration::from_secs(u64::from(secs)));
        }
        "misc_dynamic" => {
            args(l, 0, 0)?;
            m.dynamic = true;
        }
        // USER [GROUP], kept as written.
        "user" => m.user = Some(args(l, 1, 2)?.join(" ")),
        _ => return Ok(false),
    }
    Ok(true)
}

fn udp_key(l: &Line, u: &mut UdpCheck) -> Result<bool, ConfigError> {
    match l.keyword() {
        "payload" => u.payload = hex_bytes(&args(l, 1, usize::MAX)?.join(" ")).map_err(bad(l))?,
        "require_reply" => {
            let words = args(l, 0, usize::MAX)?;
            u.require_reply = Some(if words.is_empty() {
                Vec::new()
            } else {
                hex_bytes(&words.join(" ")).map_err(bad(l))?
            });
        }
        "min_reply_length" => {
            u.min_reply_length = unsigned(&args(l, 1, 1)?[0], 0, 65535).map_err(bad(l))? as usize
        }
        "max_reply_length" => {
            let v = unsigned(&args(l, 1, 1)?[0], 0, 65535).map_err(bad(l))? as usize;
            if v == 0 {
                // keepalived reads 0 as "only empty replies", the model as "no limit".
                return Err(l.error("0 is not supported by keepalived-lite (keepalived accepts only empty replies then)"));
            }
            u.max_reply_length = v;
        }
        _ => return Ok(false),
    }
    Ok(true)
}
