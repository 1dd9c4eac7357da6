//! `HTTP_GET`: one url per attempt, as keepalived 2.2.7 does
//! (check/check_http.c, lib/html.c): connect, send its request, read the
//! response to the end, then test the status code and the body's MD5.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Instant;

use md5::{Digest, Md5};

use super::Attempt;
use super::net::{ConnectError, tcp_connect};
use crate::config::model::{CheckerConf, HttpCheck, HttpProtocol, UrlCheck};

/// The request keepalived sends: GET, its User-Agent, `Connection: close`
/// for `1.0C` and `1.1`, and a Host header that is the virtualhost (url's,
/// else checker's) or else the connect address with its port (IPv6 in
/// brackets).
pub fn request(check: &HttpCheck, url: &UrlCheck, dst: SocketAddr) -> String {
    let minor = if check.http_protocol == HttpProtocol::Http11 {
        1
    } else {
        0
    };
    let close = match check.http_protocol {
        HttpProtocol::Http10 => "",
        HttpProtocol::Http10Close | HttpProtocol::Http11 => "Connection: close\r\n",
    };
    let host = match url.virtualhost.as_ref().or(check.virtualhost.as_ref()) {
        Some(v) => v.clone(),
        None => match dst {
            SocketAddr::V4(a) => format!("{}:{}", a.ip(), a.port()),
            SocketAddr::V6(a) => format!("[{}]:{}", a.ip(), a.port()),
        },
    };
    format!(
        "GET {} HTTP/1.{minor}\r\nUser-Agent: KeepAliveClient\r\n{close}Host: {host}\r\n\r\n",
        url.path
    )
}

/// The status code the way keepalived reads it: after the first space of
/// the status line, exactly three digits followed by a space; else 0.
pub fn status_code(head: &[u8]) -> u16 {
    let Some(sp) = head.iter().position(|&b| b == b' ' || b == b'\r') else {
        return 0;
    };
    if head[sp] != b' ' {
        return 0;
    }
    let code = &head[sp + 1..];
    if code.len() < 4 || code[3] != b' ' || !code[..3].iter().all(u8::is_ascii_digit) {
        return 0;
    }
    code[..3]
        .iter()
        .fold(0, |n, d| n * 10 + u16::from(d - b'0'))
}

/// `Content-Length:` (exact case, as keepalived) when its value is only
/// digits up to the end of the line.
pub fn content_length(head: &[u8]) -> Option<usize> {
    let key = b"Content-Length:";
    let at = head.windows(key.len()).position(|w| w == key)? + key.len();
    let rest = &head[at..];
    let start = rest.iter().position(|b| !b" \t".contains(b))?;
    let digits = rest[start..]
        .iter()
        .take_while(|b| b.is_ascii_digit())
        .count();
    let end = rest.get(start + digits);
    if digits == 0 || !matches!(end, None | Some(b'\r') | Some(b'\n')) {
        return None;
    }
    std::str::from_utf8(&rest[start..start + digits])
        .ok()?
        .parse()
        .ok()
}

/// Splits a response at the blank line ending its head.
fn split_head(resp: &[u8]) -> Option<(&[u8], &[u8])> {
    let at = resp.windows(4).position(|w| w == b"\r\n\r\n")?;
    Some((&resp[..at], &resp[at + 4..]))
}

/// Judges a whole response for `url`: status in a range (and 100-599),
/// then the MD5 of the body (up to Content-Length) if `digest` is set.
pub fn judge(resp: &[u8], url: &UrlCheck) -> Attempt {
    let Some((head, body)) = split_head(resp) else {
        return Attempt::down("Read, no data received");
    };
    let code = status_code(head);
    if !(100..=599).contains(&code) || !url.status_codes.iter().any(|r| r.contains(&code)) {
        return Attempt::down(format!("HTTP status code error ({code})"));
    }
    if let Some(want) = url.digest {
        let body = match content_length(head) {
            Some(n) if n < body.len() => &body[..n],
            _ => body,
        };
        let got: [u8; 16] = Md5::digest(body).into();
        if got != want {
            return Attempt::down("MD5 digest error");
        }
    }
    Attempt::Up { weight: None }
}

/// One `HTTP_GET` attempt for one url. Connect within `connect_timeout`,
/// then send and read the whole response (to the server's close) within
/// another `connect_timeout`.
pub fn attempt(conf: &CheckerConf, check: &HttpCheck, url: &UrlCheck) -> Attempt {
    let mut stream = match tcp_connect(conf.connect, conf.bind, conf.connect_timeout) {
        Ok(s) => s,
        Err(ConnectError::Timeout) => return Attempt::down("Timeout connecting"),
        Err(ConnectError::Failed(e)) => return Attempt::down(format!("Connection failed: {e}")),
        Err(ConnectError::Setup(e)) => {
            return Attempt::Error {
                reason: format!("WEB socket bind failed: {e}"),
            };
        }
    };
    let deadline = Instant::now() + conf.connect_timeout;
    if let Err(e) = send(
        &mut stream,
        request(check, url, conf.connect).as_bytes(),
        deadline,
    ) {
        return Attempt::down(format!("Cannot send get request: {e}"));
    }
    match receive(&mut stream, deadline) {
        Ok(resp) => judge(&resp, url),
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
            Attempt::down("Timeout HTTP read")
        }
        Err(e) => Attempt::down(format!("Read error: {e}")),
    }
}

fn left(deadline: Instant) -> std::io::Result<std::time::Duration> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        Err(ErrorKind::TimedOut.into())
    } else {
        Ok(left)
    }
}

fn send(stream: &mut TcpStream, mut buf: &[u8], deadline: Instant) -> std::io::Result<()> {
    while !buf.is_empty() {
        stream.set_write_timeout(Some(left(deadline)?))?;
        match stream.write(buf) {
            Ok(0) => return Err(ErrorKind::WriteZero.into()),
            Ok(n) => buf = &buf[n..],
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Bodies larger than this are cut (the digest of a health page is small;
/// keepalived streams, but a bound keeps one check's memory bounded).
const MAX_RESPONSE: usize = 4 << 20;

fn receive(stream: &mut TcpStream, deadline: Instant) -> std::io::Result<Vec<u8>> {
    let mut resp = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        stream.set_read_timeout(Some(left(deadline)?))?;
        match stream.read(&mut chunk) {
            Ok(0) => return Ok(resp),
            Ok(n) if resp.len() + n > MAX_RESPONSE => return Ok(resp),
            Ok(n) => resp.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}
