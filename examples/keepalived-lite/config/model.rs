//! What keepalived-lite runs: the LVS half of a keepalived configuration,
//! with every default and every inherited setting already resolved by the
//! parser (`config::load`). The checkers (`check`) and the runner
//! (`lvs`) read only this.

use std::net::{IpAddr, SocketAddr};
use std::ops::RangeInclusive;
use std::path::PathBuf;
use std::time::Duration;

use ipvsctl::model::{ForwardMethod, Netmask, Scheduler, ServiceFlags, ServiceKey};

/// A whole configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// `global_defs` keys that matter to the LVS half.
    pub global: Global,
    /// Every `virtual_server` block, in file order.
    pub virtual_servers: Vec<VirtualServerConf>,
    /// One notice per block or key that was skipped because it belongs to
    /// keepalived's other half (`vrrp_instance`, mail settings, ...).
    pub notices: Vec<Notice>,
}

/// A block or key skipped on purpose, with where it was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notice {
    /// The file it was read from (an `include`d file names itself).
    pub file: PathBuf,
    /// Its 1-based line.
    pub line: usize,
    /// The keyword, as written (`vrrp_instance`, `notification_email`, ...).
    pub keyword: String,
}

/// `global_defs` keys of the LVS half.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Global {
    /// `router_id`, used only in log lines.
    pub router_id: Option<String>,
    /// `lvs_flush`: flush the whole IPVS table at start.
    pub lvs_flush: bool,
    /// `lvs_flush_onstop`: flush the whole IPVS table at exit.
    pub lvs_flush_onstop: bool,
    /// `lvs_timeouts tcp N tcpfin N udp N` (seconds; 0 = leave as is).
    pub lvs_timeouts: Option<LvsTimeouts>,
    /// `script_user USER [GROUP]` for MISC_CHECK scripts.
    pub script_user: Option<String>,
    /// `enable_script_security`.
    pub script_security: bool,
}

/// `lvs_timeouts`, in seconds; 0 leaves the kernel's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LvsTimeouts {
    /// `tcp`.
    pub tcp: u32,
    /// `tcpfin`.
    pub tcp_fin: u32,
    /// `udp`.
    pub udp: u32,
}

/// How a `virtual_server` block names its service(s), as keepalived
/// formats it in log lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VsId {
    /// `virtual_server IP PORT` (with `protocol`).
    Addr(SocketAddr, Protocol),
    /// `virtual_server fwmark N`.
    Fwmark(u32),
    /// `virtual_server group NAME`.
    Group(String),
}

/// `protocol`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Protocol {
    /// `TCP`. (keepalived's default for an address service is UDP, with a
    /// warning: without `protocol` the kernel would take UDP.)
    Tcp,
    /// `UDP`.
    Udp,
    /// `SCTP`.
    Sctp,
}

/// The service settings of a `virtual_server` block, the same for every
/// IPVS service the block stands for (a group's entries).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceSettings {
    /// `lb_algo` / `lvs_sched`.
    pub scheduler: Scheduler,
    /// Flags: `ops` (ONE_PACKET), PERSISTENT when `persistence_timeout` is
    /// set, scheduler flags (`sh-port`, ... / `flag-1`..`flag-3`).
    pub flags: ServiceFlags,
    /// `persistence_timeout` in seconds (None: not persistent).
    pub persistence_timeout: Option<u32>,
    /// `persistence_granularity`.
    pub persistence_granularity: Option<Netmask>,
}

/// One `virtual_server` block.
#[derive(Debug, Clone, PartialEq)]
pub struct VirtualServerConf {
    /// The file and 1-based line of `virtual_server`.
    pub file: PathBuf,
    /// The line.
    pub line: usize,
    /// How the block names its services.
    pub id: VsId,
    /// The IPVS services it stands for: one, or one per group entry
    /// (address ranges expanded), each with the block's protocol.
    pub keys: Vec<ServiceKey>,
    /// Their settings.
    pub settings: ServiceSettings,
    /// `quorum` (default 1).
    pub quorum: u32,
    /// `hysteresis` (default 0).
    pub hysteresis: u32,
    /// `sorry_server`, with `sorry_server_inhibit` and
    /// `sorry_server_lvs_method`.
    pub sorry: Option<SorryServer>,
    /// `omega`.
    pub omega: bool,
    /// The real servers, in file order.
    pub real_servers: Vec<RealServerConf>,
}

/// A `sorry_server`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SorryServer {
    /// Its address.
    pub addr: SocketAddr,
    /// Forwarding method (the block's `lvs_method` unless
    /// `sorry_server_lvs_method`).
    pub forward: ForwardMethod,
    /// Weight (1).
    pub weight: u32,
    /// `sorry_server_inhibit`: kept at weight 0 while not needed.
    pub inhibit: bool,
}

/// One `real_server` block.
#[derive(Debug, Clone, PartialEq)]
pub struct RealServerConf {
    /// The 1-based line of `real_server`.
    pub line: usize,
    /// Its address.
    pub addr: SocketAddr,
    /// `weight` (default 1).
    pub weight: u32,
    /// `lvs_method` of the real server, else of the block (default NAT).
    pub forward: ForwardMethod,
    /// `uthreshold`, `lthreshold` (0 = none).
    pub upper_threshold: u32,
    /// See `upper_threshold`.
    pub lower_threshold: u32,
    /// `inhibit_on_failure` (of the real server or its block): a failed
    /// server stays in the table at weight 0 instead of being removed.
    pub inhibit: bool,
    /// Its checkers, in file order. None: always alive.
    pub checkers: Vec<CheckerConf>,
}

/// One checker block of a real server, with every timing resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckerConf {
    /// The 1-based line of the checker's keyword.
    pub line: usize,
    /// What it checks.
    pub kind: CheckKind,
    /// Where it connects: `connect_ip`/`connect_port`, else the real server's.
    pub connect: SocketAddr,
    /// `bindto` / `bind_port` (port 0 = any).
    pub bind: Option<SocketAddr>,
    /// `connect_timeout` (keepalived's default 5 s).
    pub connect_timeout: Duration,
    /// `retry` / `nb_get_retry`: failed attempts retried before the checker
    /// reports failure.
    pub retry: u32,
    /// `delay_before_retry`.
    pub delay_before_retry: Duration,
    /// `delay_loop` (the checker's, else the real server's, else the block's;
    /// keepalived's default 60 s).
    pub delay_loop: Duration,
    /// `warmup`: the first check runs after a random delay up to this.
    pub warmup: Option<Duration>,
    /// `alpha`: the checker starts failed, so its real server is not added
    /// until it has succeeded once.
    pub alpha: bool,
}

/// The checkers keepalived-lite runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CheckKind {
    /// `TCP_CHECK`: a TCP connection opens.
    Tcp,
    /// `HTTP_GET`.
    Http(HttpCheck),
    /// `MISC_CHECK`.
    Misc(MiscCheck),
    /// `UDP_CHECK`.
    Udp(UdpCheck),
}

/// `HTTP_GET`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpCheck {
    /// Each `url` block; every one must pass.
    pub urls: Vec<UrlCheck>,
    /// `virtualhost` (the checker's, else the block's): the `Host` header,
    /// else the connect address.
    pub virtualhost: Option<String>,
    /// `http_protocol` (`1.0` default, `1.0C`, `1.1`).
    pub http_protocol: HttpProtocol,
}

/// `http_protocol`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HttpProtocol {
    /// HTTP/1.0.
    Http10,
    /// HTTP/1.0 with `Connection: close`.
    Http10Close,
    /// HTTP/1.1 (with `Connection: close`).
    Http11,
}

/// One `url` block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UrlCheck {
    /// `path`.
    pub path: String,
    /// `digest`: the MD5 of the body.
    pub digest: Option<[u8; 16]>,
    /// `status_code` ranges (keepalived's default: 200-299).
    pub status_codes: Vec<RangeInclusive<u16>>,
    /// `virtualhost` of this url, overriding the checker's.
    pub virtualhost: Option<String>,
}

/// `MISC_CHECK`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MiscCheck {
    /// `misc_path`: the command line, split into words as keepalived does.
    pub argv: Vec<String>,
    /// `misc_timeout` (else the virtual server's `delay_loop`, as
    /// keepalived 2.2.7 takes it).
    pub timeout: Duration,
    /// `misc_dynamic`: exit status 2-255 sets the weight to status - 2.
    pub dynamic: bool,
    /// `user USER [GROUP]` (else `script_user`).
    pub user: Option<String>,
}

/// `UDP_CHECK`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UdpCheck {
    /// `payload` (hex), sent as the datagram (empty if none).
    pub payload: Vec<u8>,
    /// `require_reply [hex]`: a reply must come (and start with these bytes
    /// if given).
    pub require_reply: Option<Vec<u8>>,
    /// `min_reply_length`, `max_reply_length`.
    pub min_reply_length: usize,
    /// See `min_reply_length` (keepalived's default 255).
    pub max_reply_length: usize,
}

/// A load refused: where, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The file.
    pub file: PathBuf,
    /// The 1-based line (0 when the file itself could not be read).
    pub line: usize,
    /// The keyword at fault, if any.
    pub keyword: Option<String>,
    /// Why, in words.
    pub reason: String,
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.keyword {
            Some(k) => write!(
                f,
                "{}:{}: {}: {}",
                self.file.display(),
                self.line,
                k,
                self.reason
            ),
            None => write!(f, "{}:{}: {}", self.file.display(), self.line, self.reason),
        }
    }
}

impl std::error::Error for ConfigError {}

/// Address used when nothing else says (bind to any).
pub fn unspecified(family_of: IpAddr) -> IpAddr {
    match family_of {
        IpAddr::V4(_) => IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
        IpAddr::V6(_) => IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED),
    }
}
