//! The lines keepalived 2.2.7 logs when a checker's state changes, as
//! values ([`Event`]) rendered with the checker's [`Label`].

use std::fmt;
use std::net::SocketAddr;

use crate::config::model::{Protocol, VsId};

/// What names a checker in log lines: its real server and virtual server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Label {
    /// The real server's address (keepalived names the real server, not
    /// the checker's connect address).
    pub real_server: SocketAddr,
    /// The virtual server's protocol; None for a fwmark service
    /// (keepalived prints "none").
    pub protocol: Option<Protocol>,
    /// The virtual server, formatted by [`format_vs`].
    pub virtual_server: String,
}

impl Label {
    /// The label of a real server of the virtual server `vs`, whose
    /// service type is `protocol` (None for a firewall mark).
    pub fn new(real_server: SocketAddr, protocol: Option<Protocol>, vs: &VsId) -> Label {
        Label {
            real_server,
            protocol,
            virtual_server: format_vs(vs),
        }
    }

    /// The real server as keepalived's FMT_RS / FMT_CHK write it.
    pub fn checker(&self) -> String {
        trio(self.real_server, self.protocol)
    }
}

/// `[ip]:proto:port`, keepalived's `inet_sockaddrtotrio` (the brackets
/// are there for IPv4 too; IPv6 is not compressed differently).
pub fn trio(addr: SocketAddr, protocol: Option<Protocol>) -> String {
    let proto = match protocol {
        Some(Protocol::Tcp) => "tcp",
        Some(Protocol::Udp) => "udp",
        Some(Protocol::Sctp) => "sctp",
        None => "none",
    };
    format!("[{}]:{proto}:{}", addr.ip(), addr.port())
}

/// A virtual server as keepalived's FMT_VS writes it: `[ip]:proto:port`,
/// `FWM n`, or `[group]:0` (a group's own address is unset, port 0).
pub fn format_vs(vs: &VsId) -> String {
    match vs {
        VsId::Addr(a, p) => trio(*a, Some(*p)),
        VsId::Fwmark(m) => format!("FWM {m}"),
        VsId::Group(g) => format!("[{g}]:0"),
    }
}

/// Something a checker logs (keepalived's LOG_INFO lines of a checker).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// TCP_CHECK succeeded while down or at its first run.
    TcpSuccess,
    /// TCP_CHECK failed while up or at its first run; `retries` is
    /// `Some(retry)` once it has run before and retry > 0.
    TcpFailed { retries: Option<u32> },
    /// UDP_CHECK succeeded while down or at its first run.
    UdpSuccess,
    /// UDP_CHECK failed while up or at its first run.
    UdpFailed { retries: Option<u32> },
    /// HTTP_GET: one url passed while the checker is down.
    HttpUrlSuccess { digest: bool, path: String },
    /// HTTP_GET: every url passed, while down or at its first round.
    HttpSuccess,
    /// HTTP_GET failed while up or at its first run.
    HttpFailed { retries: Option<u32> },
    /// MISC_CHECK succeeded while down or at its first run.
    MiscSuccess { script: String },
    /// MISC_CHECK failed (retries used up) while up or at its first run.
    MiscFailed {
        script: String,
        retry: u32,
        end: super::ScriptEnd,
    },
    /// The check could not run (socket or bind error); kind names it.
    Rescheduling { http: bool },
}

impl Event {
    /// keepalived's log line for this event.
    pub fn line(&self, label: &Label) -> String {
        Line(self, label).to_string()
    }
}

struct Line<'a>(&'a Event, &'a Label);

impl fmt::Display for Line<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let chk = self.1.checker();
        let vs = &self.1.virtual_server;
        let failed = |f: &mut fmt::Formatter<'_>, kind: &str, retries: &Option<u32>| match retries {
            Some(n) => write!(f, "{kind} on service {chk} failed after {n} retries."),
            None => write!(f, "{kind} on service {chk} failed."),
        };
        match self.0 {
            Event::TcpSuccess => write!(f, "TCP connection to {chk} success."),
            Event::TcpFailed { retries } => failed(f, "TCP_CHECK", retries),
            Event::UdpSuccess => write!(f, "UDP connection to {chk} success."),
            Event::UdpFailed { retries } => failed(f, "UDP_CHECK", retries),
            Event::HttpUrlSuccess { digest, path } => {
                let what = if *digest {
                    "MD5 digest"
                } else {
                    "HTTP status code"
                };
                write!(f, "{what} success to {chk} url({path})")
            }
            Event::HttpSuccess => write!(f, "Remote Web server {chk} succeed on service."),
            Event::HttpFailed { retries } => failed(f, "HTTP_CHECK", retries),
            Event::MiscSuccess { script } => {
                write!(f, "Misc check for [{chk} VS {vs}] by [{script}] succeeded.")
            }
            Event::MiscFailed { script, retry, end } => {
                let retries = match retry {
                    0 => " with retry disabled".to_string(),
                    1 => " after 1 retry".to_string(),
                    n => format!(" after {n} retries"),
                };
                let head = format!("Misc check for [{chk} VS {vs}] by [{script}]");
                match end {
                    super::ScriptEnd::TimedOut => write!(f, "{head} timed out{retries}."),
                    super::ScriptEnd::Exited(c) => {
                        write!(f, "{head} failed{retries} (exited with status {c}).")
                    }
                    super::ScriptEnd::Signalled(s) => {
                        write!(f, "{head} failed{retries} (due to signal {s}).")
                    }
                }
            }
            Event::Rescheduling { http: false } => {
                write!(f, "TCP socket bind failed. Rescheduling.")
            }
            Event::Rescheduling { http: true } => write!(f, "WEB socket bind failed. Rescheduling"),
        }
    }
}
