//! keepalived-lite's health checkers (examples/keepalived-lite/check/):
//! each checker against real sockets and processes on loopback, the
//! keepalived 2.2.7 state machine as pure tests, and the worker pool.

#[allow(dead_code)]
#[path = "../examples/keepalived-lite/config/model.rs"]
mod model;
/// The check modules reach the model as `crate::config::model`, as in the
/// example binary.
mod config {
    pub(crate) use super::model;
}
#[allow(dead_code)]
#[path = "../examples/keepalived-lite/check/mod.rs"]
mod check;

use std::io::{Read, Write};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use check::log::{Event, Label};
use check::machine::{Machine, Transition};
use check::pool::{Job, Pool, Probe};
use check::{Attempt, Cancel, ScriptEnd, run_attempt};
use md5::{Digest, Md5};
use model::{
    CheckKind, CheckerConf, HttpCheck, HttpProtocol, MiscCheck, Protocol, UdpCheck, UrlCheck, VsId,
};
use proptest::prelude::*;

const LO4: Ipv4Addr = Ipv4Addr::LOCALHOST;

fn conf(kind: CheckKind, connect: SocketAddr) -> CheckerConf {
    CheckerConf {
        line: 1,
        kind,
        connect,
        bind: None,
        connect_timeout: Duration::from_secs(2),
        retry: 0,
        delay_before_retry: Duration::from_secs(1),
        delay_loop: Duration::from_secs(5),
        warmup: None,
        alpha: false,
    }
}

/// A port with nothing listening (bound, then released).
fn closed_port() -> u16 {
    TcpListener::bind((LO4, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn attempt(c: &CheckerConf) -> Attempt {
    run_attempt(c, 0, &Cancel::new())
}

// ---------------------------------------------------------------- TCP

#[test]
fn tcp_up_v4_and_v6_and_with_bind() {
    let l4 = TcpListener::bind((LO4, 0)).unwrap();
    assert_eq!(
        attempt(&conf(CheckKind::Tcp, l4.local_addr().unwrap())),
        Attempt::Up { weight: None }
    );
    let mut c = conf(CheckKind::Tcp, l4.local_addr().unwrap());
    c.bind = Some(SocketAddr::from((LO4, 0)));
    assert!(attempt(&c).is_up());
    if let Ok(l6) = TcpListener::bind((Ipv6Addr::LOCALHOST, 0)) {
        assert!(attempt(&conf(CheckKind::Tcp, l6.local_addr().unwrap())).is_up());
    }
}

#[test]
fn tcp_down_on_closed_port_and_error_on_bad_bind() {
    let c = conf(CheckKind::Tcp, SocketAddr::from((LO4, closed_port())));
    assert!(matches!(attempt(&c), Attempt::Down { .. }));
    // Binding an address this host does not have: keepalived reschedules.
    let mut c = conf(CheckKind::Tcp, SocketAddr::from((LO4, closed_port())));
    c.bind = Some(SocketAddr::from(([192, 0, 2, 77], 0)));
    assert!(
        matches!(attempt(&c), Attempt::Error { .. }),
        "{:?}",
        attempt(&c)
    );
}

/// A listener with a backlog of 0 that never accepts, its queue filled:
/// further SYNs are dropped, so a connect hangs.
fn full_listener() -> (rustix::fd::OwnedFd, SocketAddr, Vec<TcpStream>) {
    use rustix::net::{AddressFamily, SocketType};
    let fd = rustix::net::socket(AddressFamily::INET, SocketType::STREAM, None).unwrap();
    let addr = SocketAddr::from((LO4, closed_port()));
    rustix::net::bind(&fd, &addr).unwrap();
    rustix::net::listen(&fd, 0).unwrap();
    let mut held = Vec::new();
    for _ in 0..16 {
        match TcpStream::connect_timeout(&addr, Duration::from_millis(200)) {
            Ok(s) => held.push(s),
            Err(_) => return (fd, addr, held),
        }
    }
    panic!("the listen queue never filled");
}

#[test]
fn tcp_connect_timeout_is_bounded() {
    let (_l, addr, _held) = full_listener();
    let mut c = conf(CheckKind::Tcp, addr);
    c.connect_timeout = Duration::from_millis(400);
    let t = Instant::now();
    let a = attempt(&c);
    let took = t.elapsed();
    assert!(matches!(a, Attempt::Down { .. }), "{a:?}");
    assert!(
        took >= Duration::from_millis(350) && took < Duration::from_millis(1500),
        "{took:?}"
    );
}

// ---------------------------------------------------------------- HTTP

fn url(path: &str) -> UrlCheck {
    UrlCheck {
        path: path.into(),
        digest: None,
        status_codes: vec![200..=299],
        virtualhost: None,
    }
}

fn http(urls: Vec<UrlCheck>) -> HttpCheck {
    HttpCheck {
        urls,
        virtualhost: None,
        http_protocol: HttpProtocol::Http10,
    }
}

/// A responder answering every connection with `response` (None: read
/// the request and never answer), keeping the requests it saw.
fn responder(bind: SocketAddr, response: Option<Vec<u8>>) -> (SocketAddr, Arc<Mutex<Vec<String>>>) {
    let l = TcpListener::bind(bind).unwrap();
    let addr = l.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let seen2 = Arc::clone(&seen);
    thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            let mut req = Vec::new();
            let mut b = [0u8; 1024];
            while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                match s.read(&mut b) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => req.extend_from_slice(&b[..n]),
                }
            }
            seen2
                .lock()
                .unwrap()
                .push(String::from_utf8_lossy(&req).into_owned());
            match &response {
                Some(r) => {
                    let _ = s.write_all(r);
                }
                None => {
                    thread::spawn(move || {
                        thread::sleep(Duration::from_secs(30));
                        drop(s);
                    });
                }
            }
        }
    });
    (addr, seen)
}

fn reply(status: &str, body: &str) -> Option<Vec<u8>> {
    Some(format!("HTTP/1.0 {status}\r\nContent-Type: text/plain\r\n\r\n{body}").into_bytes())
}

#[test]
fn http_status_codes_and_ranges() {
    let (ok, _) = responder((LO4, 0).into(), reply("200 OK", "hi"));
    let (err, _) = responder((LO4, 0).into(), reply("500 Oops", "no"));
    let (moved, _) = responder((LO4, 0).into(), reply("302 Found", ""));
    let run = |addr, codes: Vec<std::ops::RangeInclusive<u16>>| {
        let mut u = url("/");
        u.status_codes = codes;
        attempt(&conf(CheckKind::Http(http(vec![u])), addr))
    };
    assert!(run(ok, vec![200..=299]).is_up());
    assert!(!run(err, vec![200..=299]).is_up());
    assert!(run(err, vec![200..=200, 500..=503]).is_up());
    assert!(!run(moved, vec![200..=299]).is_up());
    assert!(run(moved, vec![301..=302]).is_up());
    let (junk, _) = responder(
        (LO4, 0).into(),
        Some(b"garbage without a blank line".to_vec()),
    );
    assert!(!run(junk, vec![100..=599]).is_up());
    let (bad, _) = responder((LO4, 0).into(), Some(b"HTTP/1.0 20 OK\r\n\r\n".to_vec()));
    assert!(!run(bad, vec![0..=999]).is_up());
    let closed = SocketAddr::from((LO4, closed_port()));
    assert!(!run(closed, vec![200..=299]).is_up());
}

#[test]
fn http_digest_match_mismatch_and_content_length() {
    let body = "hello keepalived\n";
    let md5: [u8; 16] = Md5::digest(body.as_bytes()).into();
    let (addr, _) = responder((LO4, 0).into(), reply("200 OK", body));
    let mut u = url("/health");
    u.digest = Some(md5);
    assert!(attempt(&conf(CheckKind::Http(http(vec![u.clone()])), addr)).is_up());
    u.digest = Some([0; 16]);
    assert!(!attempt(&conf(CheckKind::Http(http(vec![u.clone()])), addr)).is_up());
    // Only Content-Length bytes of the body count.
    let resp = format!(
        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}TRAILING",
        body.len()
    );
    let (addr, _) = responder((LO4, 0).into(), Some(resp.into_bytes()));
    u.digest = Some(md5);
    assert!(attempt(&conf(CheckKind::Http(http(vec![u])), addr)).is_up());
}

#[test]
fn http_request_as_keepalived_sends_it() {
    let (addr, seen) = responder((LO4, 0).into(), reply("200 OK", ""));
    let mut h = http(vec![url("/a?b=c")]);
    assert!(attempt(&conf(CheckKind::Http(h.clone()), addr)).is_up());
    h.http_protocol = HttpProtocol::Http11;
    h.virtualhost = Some("www.example.com".into());
    assert!(attempt(&conf(CheckKind::Http(h.clone()), addr)).is_up());
    h.http_protocol = HttpProtocol::Http10Close;
    h.urls[0].virtualhost = Some("url.example.com".into());
    assert!(attempt(&conf(CheckKind::Http(h), addr)).is_up());
    let seen = seen.lock().unwrap().clone();
    let port = addr.port();
    assert_eq!(
        seen,
        vec![
            format!("GET /a?b=c HTTP/1.0\r\nUser-Agent: KeepAliveClient\r\nHost: 127.0.0.1:{port}\r\n\r\n"),
            "GET /a?b=c HTTP/1.1\r\nUser-Agent: KeepAliveClient\r\nConnection: close\r\nHost: www.example.com\r\n\r\n"
                .to_string(),
            "GET /a?b=c HTTP/1.0\r\nUser-Agent: KeepAliveClient\r\nConnection: close\r\nHost: url.example.com\r\n\r\n"
                .to_string(),
        ]
    );
    let v6 = SocketAddr::from((Ipv6Addr::LOCALHOST, 8080));
    assert!(
        check::http::request(&http(vec![url("/")]), &url("/"), v6).contains("Host: [::1]:8080\r\n")
    );
}

#[test]
fn http_read_timeout_is_bounded() {
    let (addr, _) = responder((LO4, 0).into(), None);
    let mut c = conf(CheckKind::Http(http(vec![url("/")])), addr);
    c.connect_timeout = Duration::from_millis(300);
    let t = Instant::now();
    assert!(!attempt(&c).is_up());
    assert!(
        t.elapsed() < Duration::from_millis(1200),
        "{:?}",
        t.elapsed()
    );
}

#[test]
fn http_status_line_parsing() {
    assert_eq!(check::http::status_code(b"HTTP/1.1 204 No Content"), 204);
    assert_eq!(check::http::status_code(b"HTTP/1.1 2040 x"), 0);
    assert_eq!(check::http::status_code(b"HTTP/1.1 204"), 0);
    assert_eq!(
        check::http::content_length(b"X\r\nContent-Length: 12\r\n"),
        Some(12)
    );
    assert_eq!(check::http::content_length(b"Content-Length: 12x"), None);
    assert_eq!(check::http::content_length(b"content-length: 12"), None);
}

// ---------------------------------------------------------------- MISC

fn misc(script: &str, dynamic: bool, timeout: Duration) -> CheckerConf {
    let m = MiscCheck {
        argv: vec!["/bin/sh".into(), "-c".into(), script.into()],
        timeout,
        dynamic,
        user: None,
    };
    conf(CheckKind::Misc(m), SocketAddr::from((LO4, 0)))
}

fn exit(code: i32, dynamic: bool) -> Attempt {
    attempt(&misc(
        &format!("exit {code}"),
        dynamic,
        Duration::from_secs(10),
    ))
}

#[test]
fn misc_exit_statuses_and_dynamic_weights() {
    assert_eq!(exit(0, false), Attempt::Up { weight: None });
    assert!(matches!(
        exit(1, false),
        Attempt::Down {
            script: Some(ScriptEnd::Exited(1)),
            ..
        }
    ));
    assert!(matches!(
        exit(3, false),
        Attempt::Down {
            script: Some(ScriptEnd::Exited(3)),
            ..
        }
    ));
    assert_eq!(exit(0, true), Attempt::Up { weight: None });
    assert!(matches!(
        exit(1, true),
        Attempt::Down {
            script: Some(ScriptEnd::Exited(1)),
            ..
        }
    ));
    assert_eq!(exit(2, true), Attempt::Up { weight: Some(0) });
    assert_eq!(exit(7, true), Attempt::Up { weight: Some(5) });
    assert_eq!(exit(255, true), Attempt::Up { weight: Some(253) });
    // A signal the script gets from elsewhere is a failure with its number.
    let a = attempt(&misc("kill -USR1 $$", false, Duration::from_secs(10)));
    assert!(
        matches!(
            a,
            Attempt::Down {
                script: Some(ScriptEnd::Signalled(10)),
                ..
            }
        ),
        "{a:?}"
    );
    // keepalived's child exits 0 when exec fails: up.
    let mut c = misc("", false, Duration::from_secs(1));
    if let CheckKind::Misc(m) = &mut c.kind {
        m.argv = vec!["/nonexistent/script".into()];
    }
    assert!(attempt(&c).is_up());
}

fn alive(pid: u32) -> bool {
    // Gone, or a zombie left to a PID 1 that does not reap: not running.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => !s
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z'),
        Err(_) => false,
    }
}

fn pid_file(tag: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("kl-misc-{tag}-{}", std::process::id()))
}

fn read_pid(path: &std::path::Path) -> u32 {
    std::fs::read_to_string(path)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn misc_timeout_kills_the_script_and_its_children() {
    let f = pid_file("term");
    let script = format!("sleep 60 & echo $! > {}; wait", f.display());
    let t = Instant::now();
    let a = attempt(&misc(&script, false, Duration::from_millis(300)));
    assert!(
        matches!(
            a,
            Attempt::Down {
                script: Some(ScriptEnd::TimedOut),
                ..
            }
        ),
        "{a:?}"
    );
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    let child = read_pid(&f);
    thread::sleep(Duration::from_millis(100));
    assert!(!alive(child), "child {child} still runs");
    let _ = std::fs::remove_file(f);
}

#[test]
fn misc_timeout_kills_a_script_ignoring_sigterm() {
    let f = pid_file("kill");
    let script = format!(
        "trap '' TERM; sleep 60 & echo $! > {}; while :; do sleep 1; done",
        f.display()
    );
    let t = Instant::now();
    let a = attempt(&misc(&script, false, Duration::from_millis(300)));
    let took = t.elapsed();
    assert!(
        matches!(
            a,
            Attempt::Down {
                script: Some(ScriptEnd::TimedOut),
                ..
            }
        ),
        "{a:?}"
    );
    // misc_timeout, then keepalived's 2 s before SIGKILL.
    assert!(
        took >= Duration::from_millis(2200) && took < Duration::from_secs(4),
        "{took:?}"
    );
    let child = read_pid(&f);
    thread::sleep(Duration::from_millis(100));
    assert!(!alive(child), "child {child} still runs");
    let _ = std::fs::remove_file(f);
}

// ---------------------------------------------------------------- UDP

fn udp(require_reply: Option<Vec<u8>>) -> UdpCheck {
    UdpCheck {
        payload: b"ping".to_vec(),
        require_reply,
        min_reply_length: 0,
        max_reply_length: 0,
    }
}

/// A UDP server answering each datagram with `answer` (None: silent).
fn udp_server(bind: SocketAddr, answer: Option<Vec<u8>>) -> SocketAddr {
    let s = UdpSocket::bind(bind).unwrap();
    let addr = s.local_addr().unwrap();
    thread::spawn(move || {
        let mut b = [0u8; 2048];
        while let Ok((_, from)) = s.recv_from(&mut b) {
            if let Some(a) = &answer {
                let _ = s.send_to(a, from);
            }
        }
    });
    addr
}

fn udp_closed_port() -> u16 {
    UdpSocket::bind((LO4, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn udp_up_down_and_require_reply() {
    let quick = |u: UdpCheck, addr| {
        let mut c = conf(CheckKind::Udp(u), addr);
        c.connect_timeout = Duration::from_millis(300);
        attempt(&c)
    };
    let silent = udp_server((LO4, 0).into(), None);
    let echo = udp_server((LO4, 0).into(), Some(b"PONG!".to_vec()));
    let closed = SocketAddr::from((LO4, udp_closed_port()));
    assert!(quick(udp(None), silent).is_up(), "silence is success");
    assert!(quick(udp(None), echo).is_up());
    assert!(!quick(udp(None), closed).is_up(), "ICMP port unreachable");
    assert!(
        !quick(udp(Some(vec![])), silent).is_up(),
        "a reply is required"
    );
    assert!(quick(udp(Some(vec![])), echo).is_up());
    assert!(quick(udp(Some(b"PO".to_vec())), echo).is_up());
    assert!(!quick(udp(Some(b"PI".to_vec())), echo).is_up());
    let mut u = udp(Some(b"PONG".to_vec()));
    u.min_reply_length = 6;
    assert!(!quick(u.clone(), echo).is_up(), "too short");
    u.min_reply_length = 5;
    u.max_reply_length = 5;
    assert!(quick(u.clone(), echo).is_up());
    u.max_reply_length = 4;
    assert!(!quick(u, echo).is_up(), "too long");
    if let Ok(s6) = UdpSocket::bind((Ipv6Addr::LOCALHOST, 0)) {
        let port = s6.local_addr().unwrap().port();
        drop(s6);
        let closed6 = SocketAddr::from((Ipv6Addr::LOCALHOST, port));
        assert!(!quick(udp(None), closed6).is_up());
        let echo6 = udp_server((Ipv6Addr::LOCALHOST, 0).into(), Some(b"x".to_vec()));
        assert!(quick(udp(Some(vec![])), echo6).is_up());
    }
    assert_eq!(
        check::udp::default_payload(),
        b"keepalived check - keepalived ch".to_vec()
    );
}

// ---------------------------------------------------------------- labels

fn label() -> Label {
    let vs = VsId::Addr("10.0.0.1:80".parse().unwrap(), Protocol::Tcp);
    Label::new("10.0.0.2:80".parse().unwrap(), Some(Protocol::Tcp), &vs)
}

#[test]
fn labels_as_keepalived_formats_them() {
    assert_eq!(label().checker(), "[10.0.0.2]:tcp:80");
    assert_eq!(label().virtual_server, "[10.0.0.1]:tcp:80");
    let vs = VsId::Addr("[2001:db8::1]:53".parse().unwrap(), Protocol::Udp);
    let l = Label::new(
        "[2001:db8::2]:5353".parse().unwrap(),
        Some(Protocol::Udp),
        &vs,
    );
    assert_eq!(l.checker(), "[2001:db8::2]:udp:5353");
    let l = Label::new("10.0.0.2:0".parse().unwrap(), None, &VsId::Fwmark(7));
    assert_eq!(
        (l.checker().as_str(), l.virtual_server.as_str()),
        ("[10.0.0.2]:none:0", "FWM 7")
    );
}

// ---------------------------------------------------------------- state machine

const UP: Attempt = Attempt::Up { weight: None };

fn fail() -> Attempt {
    Attempt::down("x")
}

fn timing(mut c: CheckerConf, retry: u32, alpha: bool) -> CheckerConf {
    c.retry = retry;
    c.alpha = alpha;
    c.delay_loop = Duration::from_secs(10);
    c.delay_before_retry = Duration::from_secs(2);
    c
}

fn tcp_conf(retry: u32, alpha: bool) -> CheckerConf {
    timing(
        conf(CheckKind::Tcp, "10.0.0.2:80".parse().unwrap()),
        retry,
        alpha,
    )
}

/// Feeds `m` one attempt at its due time taking no time; returns the
/// lines and the transition.
fn step(m: &mut Machine, a: &Attempt) -> (Vec<String>, Option<Transition>, Duration) {
    let at = m.due();
    let r = m.record(at, at, a);
    (
        r.events.iter().map(|e| e.line(&label())).collect(),
        r.transition,
        m.due() - at,
    )
}

#[test]
fn tcp_first_result_is_logged_then_only_changes() {
    let t0 = Instant::now();
    let mut m = Machine::new(&tcp_conf(2, false), t0, 0.0);
    assert_eq!(
        m.due(),
        t0 + Duration::from_secs(1),
        "keepalived's bootstrap delay"
    );
    let s = Duration::from_secs;
    assert_eq!(
        step(&mut m, &UP),
        (
            vec!["TCP connection to [10.0.0.2]:tcp:80 success.".into()],
            None,
            s(10)
        )
    );
    assert_eq!(step(&mut m, &UP), (vec![], None, s(10)));
    // Two retries at delay_before_retry, then the failure is reported.
    assert_eq!(step(&mut m, &fail()), (vec![], None, s(2)));
    assert_eq!(step(&mut m, &fail()), (vec![], None, s(2)));
    assert_eq!(
        step(&mut m, &fail()),
        (
            vec!["TCP_CHECK on service [10.0.0.2]:tcp:80 failed after 2 retries.".into()],
            Some(Transition::Down),
            s(10)
        )
    );
    // Down: keepalived's TCP checker keeps its retry rhythm, silently.
    assert_eq!(step(&mut m, &fail()), (vec![], None, s(2)));
    assert_eq!(
        step(&mut m, &UP),
        (
            vec!["TCP connection to [10.0.0.2]:tcp:80 success.".into()],
            Some(Transition::Up),
            s(10)
        )
    );
}

#[test]
fn first_failure_counts_at_once_and_alpha_starts_down() {
    let mut m = Machine::new(&tcp_conf(3, false), Instant::now(), 0.5);
    assert!(m.is_up());
    assert_eq!(
        step(&mut m, &fail()).0,
        vec!["TCP_CHECK on service [10.0.0.2]:tcp:80 failed.".to_string()],
    );
    assert!(!m.is_up());
    let mut m = Machine::new(&tcp_conf(3, true), Instant::now(), 0.5);
    assert!(!m.is_up());
    let (lines, tr, _) = step(&mut m, &fail());
    assert_eq!((lines.len(), tr), (1, None), "logged, already down");
    let (lines, tr, _) = step(&mut m, &UP);
    assert_eq!(
        (lines, tr),
        (
            vec!["TCP connection to [10.0.0.2]:tcp:80 success.".into()],
            Some(Transition::Up)
        )
    );
}

#[test]
fn warmup_delays_the_first_attempt() {
    let t0 = Instant::now();
    let mut c = tcp_conf(0, false);
    c.warmup = Some(Duration::from_secs(8));
    assert_eq!(
        Machine::new(&c, t0, 0.25).due(),
        t0 + Duration::from_secs(3)
    );
    assert_eq!(Machine::new(&c, t0, 1.0).due(), t0 + Duration::from_secs(9));
}

#[test]
fn udp_retries_only_while_up() {
    let c = timing(
        conf(CheckKind::Udp(udp(None)), "10.0.0.2:53".parse().unwrap()),
        1,
        false,
    );
    let mut m = Machine::new(&c, Instant::now(), 0.0);
    let s = Duration::from_secs;
    assert_eq!(
        step(&mut m, &UP).0,
        vec!["UDP connection to [10.0.0.2]:tcp:80 success.".to_string()]
    );
    assert_eq!(step(&mut m, &fail()), (vec![], None, s(2)));
    assert_eq!(
        step(&mut m, &fail()),
        (
            vec!["UDP_CHECK on service [10.0.0.2]:tcp:80 failed after 1 retries.".into()],
            Some(Transition::Down),
            s(10)
        )
    );
    assert_eq!(step(&mut m, &fail()), (vec![], None, s(10)));
}

fn http_conf(urls: usize, retry: u32) -> CheckerConf {
    let us = (0..urls)
        .map(|i| {
            let mut u = url(&format!("/u{i}"));
            if i == 1 {
                u.digest = Some([0; 16]);
            }
            u
        })
        .collect();
    timing(
        conf(CheckKind::Http(http(us)), "10.0.0.2:80".parse().unwrap()),
        retry,
        false,
    )
}

#[test]
fn http_one_url_per_attempt_and_a_clean_round_to_recover() {
    let mut m = Machine::new(&http_conf(2, 1), Instant::now(), 0.0);
    let s = Duration::from_secs;
    assert_eq!(m.url(), 0);
    assert_eq!(step(&mut m, &UP), (vec![], None, s(10)));
    assert_eq!(m.url(), 1);
    assert_eq!(
        step(&mut m, &UP),
        (
            vec!["Remote Web server [10.0.0.2]:tcp:80 succeed on service.".into()],
            None,
            s(10)
        )
    );
    assert_eq!(m.url(), 0);
    assert_eq!(step(&mut m, &fail()), (vec![], None, s(2)));
    assert_eq!(
        step(&mut m, &fail()),
        (
            vec!["HTTP_CHECK on service [10.0.0.2]:tcp:80 failed after 1 retries.".into()],
            Some(Transition::Down),
            s(10)
        )
    );
    assert_eq!(
        step(&mut m, &fail()),
        (vec![], None, s(10)),
        "down: retried at max(delays)"
    );
    // The failing url passes: a clean round follows before up.
    assert_eq!(
        step(&mut m, &UP),
        (
            vec!["HTTP status code success to [10.0.0.2]:tcp:80 url(/u0)".into()],
            None,
            s(10)
        )
    );
    assert_eq!(m.url(), 0);
    assert_eq!(
        step(&mut m, &UP).0,
        vec!["HTTP status code success to [10.0.0.2]:tcp:80 url(/u0)".to_string()]
    );
    let (lines, tr, _) = step(&mut m, &UP);
    assert_eq!(
        lines,
        vec![
            "MD5 digest success to [10.0.0.2]:tcp:80 url(/u1)".to_string(),
            "Remote Web server [10.0.0.2]:tcp:80 succeed on service.".to_string()
        ]
    );
    assert_eq!(tr, Some(Transition::Up));
}

#[test]
fn http_first_failure_and_rescheduling() {
    let mut m = Machine::new(&http_conf(1, 2), Instant::now(), 0.0);
    // keepalived marks the checker as run before its epilog: "after N retries".
    assert_eq!(
        step(&mut m, &fail()).0,
        vec!["HTTP_CHECK on service [10.0.0.2]:tcp:80 failed after 2 retries.".to_string()]
    );
    let (lines, tr, d) = step(
        &mut m,
        &Attempt::Error {
            reason: "bind".into(),
        },
    );
    assert_eq!(
        (lines, tr, d),
        (
            vec!["WEB socket bind failed. Rescheduling".into()],
            None,
            Duration::from_secs(10)
        )
    );
    let mut m = Machine::new(&http_conf(1, 0), Instant::now(), 0.0);
    assert_eq!(
        step(&mut m, &fail()).0,
        vec!["HTTP_CHECK on service [10.0.0.2]:tcp:80 failed.".to_string()]
    );
}

fn misc_machine(retry: u32) -> Machine {
    let mut c = timing(misc("x", true, Duration::from_secs(5)), retry, false);
    if let CheckKind::Misc(m) = &mut c.kind {
        m.argv = vec!["/usr/local/bin/check.sh".into(), "arg".into()];
    }
    Machine::new(&c, Instant::now(), 0.0)
}

#[test]
fn misc_messages_weights_and_timing_from_start() {
    let mut m = misc_machine(2);
    let head =
        "Misc check for [[10.0.0.2]:tcp:80 VS [10.0.0.1]:tcp:80] by [/usr/local/bin/check.sh]";
    let at = m.due();
    let r = m.record(
        at,
        at + Duration::from_secs(3),
        &Attempt::Up { weight: Some(5) },
    );
    assert_eq!(r.weight, Some(Some(5)));
    assert_eq!(r.events[0].line(&label()), format!("{head} succeeded."));
    assert_eq!(
        m.due(),
        at + Duration::from_secs(10),
        "from the start of the run"
    );
    let r = m.record(m.due(), m.due(), &Attempt::Up { weight: Some(5) });
    assert!(r.is_empty());
    let r = m.record(m.due(), m.due(), &Attempt::Up { weight: None });
    assert_eq!(r.weight, Some(None));
    let end = |e| Attempt::Down {
        reason: String::new(),
        script: Some(e),
    };
    assert!(
        m.record(m.due(), m.due(), &end(ScriptEnd::Exited(1)))
            .is_empty()
    );
    assert!(
        m.record(m.due(), m.due(), &end(ScriptEnd::TimedOut))
            .is_empty()
    );
    let r = m.record(m.due(), m.due(), &end(ScriptEnd::TimedOut));
    assert_eq!(
        r.events[0].line(&label()),
        format!("{head} timed out after 2 retries.")
    );
    assert_eq!(r.transition, Some(Transition::Down));
    let r = m.record(m.due(), m.due(), &Attempt::Up { weight: None });
    assert_eq!((r.weight, r.transition), (Some(None), Some(Transition::Up)));

    let mut m = misc_machine(0);
    let r = m.record(m.due(), m.due(), &end(ScriptEnd::Exited(1)));
    assert_eq!(
        r.events[0].line(&label()),
        format!("{head} failed with retry disabled (exited with status 1).")
    );
    let mut m = misc_machine(1);
    m.record(m.due(), m.due(), &UP);
    m.record(m.due(), m.due(), &end(ScriptEnd::Signalled(9)));
    let r = m.record(m.due(), m.due(), &end(ScriptEnd::Signalled(9)));
    assert_eq!(
        r.events[0].line(&label()),
        format!("{head} failed after 1 retry (due to signal 9).")
    );
}

fn any_conf() -> impl Strategy<Value = CheckerConf> {
    (0u32..4, any::<bool>(), 0usize..3).prop_map(|(retry, alpha, kind)| {
        let mut c = match kind {
            0 => tcp_conf(retry, alpha),
            1 => timing(
                conf(CheckKind::Udp(udp(None)), "10.0.0.2:53".parse().unwrap()),
                retry,
                alpha,
            ),
            _ => timing(misc("x", true, Duration::from_secs(5)), retry, alpha),
        };
        c.retry = retry;
        c
    })
}

proptest! {
    /// Over random attempt sequences: once a checker has reported up, it
    /// reports down only after retry+1 consecutive failures; a success
    /// while down reports up at once; alpha starts down. (keepalived's
    /// very first failure counts at once: "one failure is enough
    /// initially".)
    #[test]
    fn retries_and_recovery(c in any_conf(), seq in proptest::collection::vec(any::<bool>(), 1..60)) {
        let mut m = Machine::new(&c, Instant::now(), 0.0);
        prop_assert_eq!(m.is_up(), !c.alpha);
        let mut reported_up = false;
        let mut fails = 0u32;
        for ok in seq {
            let was_up = m.is_up();
            let at = m.due();
            let a = if ok { UP } else { Attempt::Down { reason: String::new(), script: None } };
            let r = m.record(at, at, &a);
            prop_assert!(m.due() > at);
            fails = if ok { 0 } else { fails + 1 };
            match r.transition {
                Some(Transition::Down) => {
                    prop_assert!(was_up && !ok);
                    if reported_up {
                        prop_assert!(fails > c.retry, "down after {} failures, retry {}", fails, c.retry);
                    }
                }
                Some(Transition::Up) => prop_assert!(ok && !was_up),
                None => {}
            }
            if ok {
                prop_assert!(m.is_up(), "a success reports up at once");
                reported_up = true;
            }
            prop_assert_eq!(r.transition.is_some(), was_up != m.is_up());
        }
    }
}

// ---------------------------------------------------------------- pool

fn job(id: usize, delay_loop: Duration, kind: CheckKind, connect: SocketAddr) -> Job {
    let mut c = conf(kind, connect);
    c.delay_loop = delay_loop;
    c.delay_before_retry = delay_loop;
    Job {
        id,
        conf: c,
        label: label(),
    }
}

/// CPU time of this process, in clock ticks.
fn cpu_ticks() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    let f: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap()
        .split_whitespace()
        .collect();
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

#[test]
fn pool_runs_ten_thousand_checkers_every_second() {
    let n = 10_000;
    let counts: Arc<Vec<AtomicUsize>> = Arc::new((0..n).map(|_| AtomicUsize::new(0)).collect());
    let counts2 = Arc::clone(&counts);
    // The checker's port carries its index, so the probe can count it.
    let probe: Probe = Arc::new(move |c: &CheckerConf, _, _: &Cancel| {
        counts2[c.connect.port() as usize].fetch_add(1, Ordering::Relaxed);
        UP
    });
    let jobs = (0..n)
        .map(|i| {
            let mut j = job(
                i,
                Duration::from_secs(1),
                CheckKind::Tcp,
                SocketAddr::from((LO4, i as u16)),
            );
            j.conf.warmup = Some(Duration::from_secs(1));
            j
        })
        .collect();
    let (tx, rx) = mpsc::channel();
    let pool = Pool::spawn_with(8, jobs, tx, probe).unwrap();
    // Bootstrap 1 s + warmup up to 1 s, then every second.
    thread::sleep(Duration::from_millis(4500));
    let stop = Instant::now();
    let s = pool.shutdown(Duration::from_secs(2));
    assert!(stop.elapsed() < Duration::from_millis(500));
    assert_eq!(s.detached, 0);
    let runs: Vec<usize> = counts.iter().map(|c| c.load(Ordering::Relaxed)).collect();
    let (min, max) = (runs.iter().min().unwrap(), runs.iter().max().unwrap());
    assert!(*min >= 2 && *max <= 4, "runs per checker {min}..{max}");
    // Each first success is logged once ("success."), then nothing.
    let updates: Vec<_> = rx.try_iter().collect();
    assert_eq!(updates.len(), n);
    assert!(
        updates
            .iter()
            .all(|(_, u)| u.up && u.transition.is_none() && u.lines.len() == 1)
    );
}

#[test]
fn pool_does_not_spin_while_idle() {
    let probe: Probe = Arc::new(|_: &CheckerConf, _, _: &Cancel| UP);
    let jobs = (0..100)
        .map(|i| job(i, Duration::from_secs(60), CheckKind::Tcp, (LO4, 1).into()))
        .collect();
    let (tx, _rx) = mpsc::channel();
    let pool = Pool::spawn_with(16, jobs, tx, probe).unwrap();
    thread::sleep(Duration::from_millis(1300));
    let before = cpu_ticks();
    thread::sleep(Duration::from_secs(1));
    let used = cpu_ticks() - before;
    pool.shutdown(Duration::from_secs(1));
    assert!(used <= 5, "{used} ticks of CPU in an idle second");
}

#[test]
fn pool_hung_check_does_not_delay_others_and_shutdown_is_bounded() {
    let runs = Arc::new(Mutex::new(Vec::<(usize, Instant)>::new()));
    let runs2 = Arc::clone(&runs);
    let probe: Probe = Arc::new(move |c: &CheckerConf, _, _: &Cancel| {
        let id = c.connect.port() as usize;
        if id == 0 {
            // A check hung until its (long) timeout.
            thread::sleep(Duration::from_secs(5));
        }
        runs2.lock().unwrap().push((id, Instant::now()));
        UP
    });
    let jobs = (0..20)
        .map(|i| {
            job(
                i,
                Duration::from_millis(100),
                CheckKind::Tcp,
                SocketAddr::from((LO4, i as u16)),
            )
        })
        .collect();
    let (tx, _rx) = mpsc::channel();
    let start = Instant::now();
    let pool = Pool::spawn_with(4, jobs, tx, probe).unwrap();
    thread::sleep(Duration::from_millis(2200));
    let t = Instant::now();
    let s = pool.shutdown(Duration::from_millis(300));
    let took = t.elapsed();
    assert!(took < Duration::from_millis(600), "{took:?}");
    assert_eq!(
        s,
        check::pool::Shutdown {
            joined: 3,
            detached: 1
        }
    );
    let runs = runs.lock().unwrap();
    // About 1.2 s of 100 ms rounds after the bootstrap second for each other checker.
    for id in 1..20 {
        let n = runs.iter().filter(|(i, _)| *i == id).count();
        assert!(n >= 8, "checker {id} ran {n} times");
    }
    assert!(
        runs.iter()
            .all(|(i, t)| *i != 0 || *t > start + Duration::from_secs(5))
    );
}

#[test]
fn pool_with_real_checks_reports_changes_and_kills_scripts_on_shutdown() {
    let l = TcpListener::bind((LO4, 0)).unwrap();
    let mut jobs = vec![
        job(
            7,
            Duration::from_millis(200),
            CheckKind::Tcp,
            l.local_addr().unwrap(),
        ),
        job(
            8,
            Duration::from_millis(200),
            CheckKind::Tcp,
            SocketAddr::from((LO4, closed_port())),
        ),
    ];
    let f = pid_file("pool");
    let mut slow = misc(
        &format!("echo $$ > {}; sleep 60", f.display()),
        false,
        Duration::from_secs(60),
    );
    slow.delay_loop = Duration::from_secs(1);
    jobs.push(Job {
        id: 9,
        conf: slow,
        label: label(),
    });
    let (tx, rx) = mpsc::channel();
    let pool = Pool::spawn(2, jobs, tx).unwrap();
    let mut got = Vec::new();
    while got.len() < 2 {
        got.push(rx.recv_timeout(Duration::from_secs(5)).unwrap());
    }
    got.sort_by_key(|(id, _)| *id);
    assert_eq!(
        got[0].1.lines,
        vec!["TCP connection to [10.0.0.2]:tcp:80 success.".to_string()]
    );
    assert_eq!(
        (got[1].1.transition, got[1].1.up),
        (Some(Transition::Down), false)
    );
    assert_eq!(got[1].1.events, vec![Event::TcpFailed { retries: None }]);
    thread::sleep(Duration::from_millis(300));
    let script = read_pid(&f);
    assert!(alive(script));
    let t = Instant::now();
    let s = pool.shutdown(Duration::from_secs(2));
    assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
    assert_eq!(s.detached, 0);
    thread::sleep(Duration::from_millis(100));
    assert!(!alive(script), "the script was killed");
    let _ = std::fs::remove_file(f);
}
