//! `UDP_CHECK`: send a datagram and wait `connect_timeout` for a reply or
//! an ICMP error, as keepalived 2.2.7 does (core/layer4.c, check_udp.c).

use std::io::ErrorKind;

use super::Attempt;
use super::net::udp_connect;
use crate::config::model::{CheckerConf, UdpCheck};

/// What keepalived sends when no `payload` is given: 32 bytes of
/// "keepalived check - " repeated (it fills the buffer so as not to leak
/// stack memory).
pub fn default_payload() -> Vec<u8> {
    b"keepalived check - "
        .iter()
        .copied()
        .cycle()
        .take(32)
        .collect()
}

/// keepalived's reply test: the length within [min, max], then the bytes
/// both have in common equal (a reply shorter than the expected bytes is
/// compared on its own length only).
fn reply_matches(reply: &[u8], want: &[u8], min: usize, max: usize) -> bool {
    if reply.len() < min || reply.len() > max {
        return false;
    }
    reply.iter().zip(want).all(|(a, b)| a == b)
}

/// One `UDP_CHECK` attempt.
///
/// Up when no error comes back within `connect_timeout`; with
/// `require_reply`, a reply must come, and when reply bytes are given it
/// must also match them and the min/max lengths (keepalived checks the
/// lengths only together with reply bytes). `max_reply_length` 0 means no
/// limit.
pub fn attempt(conf: &CheckerConf, check: &UdpCheck) -> Attempt {
    let sock = match udp_connect(conf.connect, conf.bind) {
        Ok(s) => s,
        // keepalived counts a socket it cannot connect as a failed check.
        Err(e) => return Attempt::down(format!("UDP connect error: {e}")),
    };
    let payload = if check.payload.is_empty() {
        default_payload()
    } else {
        check.payload.clone()
    };
    match sock.send(&payload) {
        Ok(n) if n == payload.len() => {}
        Ok(n) => return Attempt::down(format!("UDP send short: {n} of {}", payload.len())),
        Err(e) => return Attempt::down(format!("UDP send error: {e}")),
    }
    let max = if check.max_reply_length == 0 {
        65_535
    } else {
        check.max_reply_length
    };
    // One byte more than allowed, so that a longer reply shows as too long.
    let mut buf = vec![0u8; max + 1];
    let deadline = std::time::Instant::now() + conf.connect_timeout;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return timed_out(check);
        }
        if let Err(e) = sock.set_read_timeout(Some(left)) {
            return Attempt::down(format!("UDP socket error: {e}"));
        }
        match sock.recv(&mut buf) {
            Ok(n) => {
                return match &check.require_reply {
                    Some(want)
                        if !want.is_empty()
                            && !reply_matches(&buf[..n], want, check.min_reply_length, max) =>
                    {
                        Attempt::down("UDP reply data mismatch")
                    }
                    _ => Attempt::Up { weight: None },
                };
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return timed_out(check);
            }
            Err(e) => return Attempt::down(format!("UDP connection failed: {e}")),
        }
    }
}

/// Silence is success unless a reply is required.
fn timed_out(check: &UdpCheck) -> Attempt {
    if check.require_reply.is_some() {
        Attempt::down("UDP no reply")
    } else {
        Attempt::Up { weight: None }
    }
}
