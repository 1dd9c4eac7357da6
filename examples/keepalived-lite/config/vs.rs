//! `virtual_server` and `real_server` blocks, keyword by keyword as
//! keepalived 2.2.7's check_parser.c handlers (`vs_handler`...
//! `rs_end_handler`) and `alloc_vs`/`alloc_rs`/`alloc_ssvr` of
//! check_data.c. Values are kept as written; `resolve` applies defaults.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::rc::Rc;
use std::time::Duration;

use ipvsctl::model::{
    AddressFamily, ForwardMethod, Netmask, Scheduler, ServiceFlags, Tunnel, TunnelEncap,
    TunnelFlags,
};

use super::checker::{self, RawChecker};
use super::lexer::{Line, at};
use super::model::{ConfigError, Global, Protocol};
use super::parse::{LVS_MAX_TIMEOUT, args, bad, unknown, unsupported};
use super::values::{TIMER_MAX_US, boolean, ip, port, timer, unsigned32};

/// `IPVS_SVC_PERSISTENT_TIMEOUT`: `persistence_timeout` without a value.
pub(crate) const DEFAULT_PERSISTENCE: u32 = 6 * 60;
/// `IPVS_WEIGHT_LIMIT`.
const WEIGHT_MAX: u32 = i32::MAX as u32;
/// keepalived's scheduler list (`lvs_schedulers`).
const SCHEDULERS: [&str; 14] = [
    "rr", "wrr", "lc", "wlc", "lblc", "sh", "mh", "dh", "fo", "ovf", "lblcr", "sed", "nq", "twos",
];

/// Settings a checker inherits from its real server, and that from its
/// virtual server; None: not set at this level.
#[derive(Debug, Clone, Default)]
pub(crate) struct Timing {
    pub connect_timeout: Option<Duration>,
    pub delay_loop: Option<Duration>,
    pub warmup: Option<Duration>,
    pub retry: Option<u32>,
    pub delay_before_retry: Option<Duration>,
    pub alpha: Option<bool>,
}

/// Where a [`Timing`] keyword is: the ranges and forms differ.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Level {
    VirtualServer,
    RealServer,
    /// A checker with connection options (not `MISC_CHECK`).
    Checker,
    /// `MISC_CHECK`: no `connect_timeout`.
    Misc,
}

impl Timing {
    /// Handles `l` if it is one of the inherited keywords; Ok(false) if not.
    pub(crate) fn keyword(&mut self, l: &Line, level: Level) -> Result<bool, ConfigError> {
        let one = || args(l, 1, 1).map(|a| a[0].as_str());
        match l.keyword() {
            "connect_timeout" if level != Level::Misc => {
                let max = u64::from(u32::MAX);
                self.connect_timeout = Some(timer(one()?, 1, max).map_err(bad(l))?);
            }
            "delay_loop" => self.delay_loop = Some(timer(one()?, 1, TIMER_MAX_US).map_err(bad(l))?),
            "warmup" => self.warmup = Some(timer(one()?, 0, TIMER_MAX_US).map_err(bad(l))?),
            "delay_before_retry" => {
                self.delay_before_retry = Some(timer(one()?, 0, TIMER_MAX_US).map_err(bad(l))?);
            }
            // A checker may retry 0 times; a real or virtual server sets 1 or more.
            "retry" => {
                let min = if matches!(level, Level::Checker | Level::Misc) {
                    0
                } else {
                    1
                };
                self.retry = Some(unsigned32(one()?, min, u32::MAX).map_err(bad(l))?);
            }
            // A virtual server's `alpha` takes no value; the others an optional <BOOL>.
            "alpha" if level == Level::VirtualServer => {
                args(l, 0, 0)?;
                self.alpha = Some(true);
            }
            "alpha" => self.alpha = Some(optional_bool(l)?),
            _ => return Ok(false),
        }
        Ok(true)
    }
}

/// A keyword with an optional <BOOL> (absent: true).
pub(crate) fn optional_bool(l: &Line) -> Result<bool, ConfigError> {
    match args(l, 0, 1)? {
        [] => Ok(true),
        [v, ..] => boolean(v).map_err(bad(l)),
    }
}

/// How the block names its services.
pub(crate) enum RawId {
    /// `IP [PORT]` (port 0 when absent).
    Addr(SocketAddr),
    Fwmark(u32),
    Group(String),
}

/// A `virtual_server` block as written.
pub(crate) struct RawVs {
    pub file: Rc<PathBuf>,
    pub line: usize,
    pub id: RawId,
    /// keepalived's `vs->af`: set by the address, `ip_family`,
    /// `persistence_granularity` or a non-tunnelled real/sorry server.
    pub af: Option<AddressFamily>,
    pub scheduler: Option<Scheduler>,
    pub flags: ServiceFlags,
    /// The line of `ops`, if any.
    pub ops_line: Option<usize>,
    pub forward: Option<ForwardMethod>,
    /// 0: not persistent.
    pub persistence_timeout: u32,
    pub granularity: Option<Netmask>,
    pub protocol: Option<Protocol>,
    pub quorum: u32,
    pub hysteresis: u32,
    /// The default real server weight (`weight` at this level).
    pub weight: u32,
    pub omega: bool,
    pub inhibit: bool,
    pub virtualhost: Option<String>,
    pub timing: Timing,
    pub sorry: Option<RawSorry>,
    pub real_servers: Vec<RawRs>,
}

/// A `sorry_server`.
pub(crate) struct RawSorry {
    pub file: Rc<PathBuf>,
    pub line: usize,
    pub addr: SocketAddr,
    pub forward: Option<ForwardMethod>,
    pub inhibit: bool,
}

/// A `real_server` block as written.
pub(crate) struct RawRs {
    pub file: Rc<PathBuf>,
    pub line: usize,
    /// As written (port 0 when absent); checkers connect here by default.
    pub addr: SocketAddr,
    pub weight: Option<u32>,
    /// The block's method when `real_server` was read, or its own.
    pub forward: Option<ForwardMethod>,
    pub upper_threshold: u32,
    pub lower_threshold: u32,
    pub inhibit: Option<bool>,
    pub timing: Timing,
    pub virtualhost: Option<String>,
    pub checkers: Vec<RawChecker>,
}

/// `IP [PORT]` of a server line.
fn server_addr(l: &Line) -> Result<SocketAddr, ConfigError> {
    let a = args(l, 1, 2)?;
    let addr = ip(&a[0]).map_err(bad(l))?;
    let port = port(a.get(1).map(String::as_str)).map_err(bad(l))?;
    Ok(SocketAddr::new(addr, port))
}

/// Sets the block's family, or checks it against what set it before.
fn set_af(
    af: &mut Option<AddressFamily>,
    new: AddressFamily,
    l: &Line,
    what: &str,
) -> Result<(), ConfigError> {
    match *af {
        None => *af = Some(new),
        Some(old) if old != new => {
            return Err(l.error(format!(
                "address family of {what} ({new}) does not match the virtual server ({old})"
            )));
        }
        Some(_) => {}
    }
    Ok(())
}

/// Reads a `virtual_server` block; `head` is its first line.
pub(crate) fn virtual_server<'a>(
    cur: &mut super::parse::Cursor<'a>,
    head: &'a Line,
    global: &Global,
) -> Result<RawVs, ConfigError> {
    let a = args(head, 1, 2)?;
    let (id, af) = match a[0].as_str() {
        "group" => {
            let name = a.get(1).ok_or_else(|| head.error("missing group name"))?;
            (RawId::Group(name.clone()), None)
        }
        "fwmark" => {
            let mark = a.get(1).ok_or_else(|| head.error("missing fwmark"))?;
            // keepalived takes 0 and then treats the block as an address: refused.
            (
                RawId::Fwmark(unsigned32(mark, 1, u32::MAX).map_err(bad(head))?),
                None,
            )
        }
        _ => {
            let addr = server_addr(head)?;
            (RawId::Addr(addr), Some(AddressFamily::of(&addr.ip())))
        }
    };
    let mut vs = RawVs {
        file: Rc::clone(&head.file),
        line: head.line,
        id,
        af,
        scheduler: None,
        flags: ServiceFlags::empty(),
        ops_line: None,
        forward: None,
        persistence_timeout: 0,
        granularity: None,
        protocol: None,
        quorum: 1,
        hysteresis: 0,
        weight: 1,
        omega: false,
        inhibit: false,
        virtualhost: None,
        timing: Timing::default(),
        sorry: None,
        real_servers: Vec::new(),
    };
    cur.block(head, |cur, l| vs_key(cur, l, &mut vs, global))?;
    vs_end(&mut vs)?;
    Ok(vs)
}

fn vs_key<'a>(
    cur: &mut super::parse::Cursor<'a>,
    l: &'a Line,
    vs: &mut RawVs,
    global: &Global,
) -> Result<(), ConfigError> {
    if vs.timing.keyword(l, Level::VirtualServer)? {
        return Ok(());
    }
    let flag = |vs: &mut RawVs, f: ServiceFlags| args(l, 0, 0).map(|_| vs.flags |= f);
    match l.keyword() {
        "ip_family" => {
            let fam = match args(l, 1, 1)?[0].as_str() {
                "inet" => AddressFamily::Inet,
                "inet6" => AddressFamily::Inet6,
                other => return Err(l.error(format!("unknown address family '{other}'"))),
            };
            set_af(&mut vs.af, fam, l, "ip_family")?;
        }
        "inhibit_on_failure" => {
            args(l, 0, 0)?;
            vs.inhibit = true;
        }
        "lb_algo" | "lvs_sched" => {
            let name = &args(l, 1, 1)?[0];
            if !SCHEDULERS.contains(&name.as_str()) {
                return Err(l.error(format!("unknown scheduler '{name}'")));
            }
            vs.scheduler = Some(Scheduler::from_name(name));
        }
        "ops" => {
            flag(vs, ServiceFlags::ONE_PACKET)?;
            vs.ops_line = Some(l.line);
        }
        "flag-1" => flag(vs, ServiceFlags::SCHED1)?,
        "flag-2" => flag(vs, ServiceFlags::SCHED2)?,
        "flag-3" => flag(vs, ServiceFlags::SCHED3)?,
        // As keepalived, these need the scheduler set before them.
        k @ ("sh-port" | "sh-fallback" | "mh-port" | "mh-fallback") => {
            let want = &k[..2];
            if vs.scheduler.as_ref().map(Scheduler::name) != Some(want) {
                return Err(l.error(format!(
                    "applies only to the {want} scheduler (set lb_algo {want} before it)"
                )));
            }
            flag(
                vs,
                if k.ends_with("port") {
                    ServiceFlags::SCHED2
                } else {
                    ServiceFlags::SCHED1
                },
            )?;
        }
        "lb_kind" | "lvs_method" => vs.forward = Some(forward(l)?),
        "persistence_timeout" => {
            vs.persistence_timeout = match args(l, 0, 1)? {
                [] => DEFAULT_PERSISTENCE,
                [v, ..] => unsigned32(v, 1, LVS_MAX_TIMEOUT).map_err(bad(l))?,
            };
        }
        "persistence_granularity" => {
            let v = &args(l, 1, 1)?[0];
            // Without a family yet, a dot means an IPv4 netmask.
            let fam = vs.af.unwrap_or(if v.contains('.') {
                AddressFamily::Inet
            } else {
                AddressFamily::Inet6
            });
            vs.granularity = Some(match fam {
                AddressFamily::Inet6 => Netmask::V6(unsigned32(v, 1, 128).map_err(bad(l))? as u8),
                AddressFamily::Inet => Netmask::V4(
                    v.parse::<Ipv4Addr>()
                        .map_err(|_| l.error(format!("invalid IPv4 netmask '{v}'")))?,
                ),
            });
            vs.af = Some(fam);
            if vs.persistence_timeout == 0 {
                vs.persistence_timeout = DEFAULT_PERSISTENCE;
            }
        }
        "protocol" => {
            let p = &args(l, 1, 1)?[0];
            vs.protocol = Some(match p.to_ascii_uppercase().as_str() {
                "TCP" => Protocol::Tcp,
                "UDP" => Protocol::Udp,
                "SCTP" => Protocol::Sctp,
                _ => return Err(l.error(format!("unknown protocol '{p}'"))),
            });
        }
        "virtualhost" => vs.virtualhost = Some(args(l, 1, 1)?[0].clone()),
        "omega" => {
            args(l, 0, 0)?;
            vs.omega = true;
        }
        "quorum" => vs.quorum = unsigned32(&args(l, 1, 1)?[0], 1, u32::MAX).map_err(bad(l))?,
        "hysteresis" => {
            vs.hysteresis = unsigned32(&args(l, 1, 1)?[0], 0, u32::MAX).map_err(bad(l))?
        }
        "weight" => vs.weight = unsigned32(&args(l, 1, 1)?[0], 1, WEIGHT_MAX).map_err(bad(l))?,
        "sorry_server" => {
            vs.sorry = Some(RawSorry {
                file: Rc::clone(&l.file),
                line: l.line,
                addr: server_addr(l)?,
                forward: vs.forward,
                inhibit: false,
            });
        }
        "sorry_server_inhibit" => {
            args(l, 0, 0)?;
            let sorry = vs
                .sorry
                .as_mut()
                .ok_or_else(|| l.error("used before or without sorry_server"))?;
            sorry.inhibit = true;
        }
        "sorry_server_lvs_method" => {
            let method = forward(l)?;
            let sorry = vs
                .sorry
                .as_mut()
                .ok_or_else(|| l.error("used before or without sorry_server"))?;
            sorry.forward = Some(method);
        }
        "real_server" => {
            let rs = real_server(cur, l, vs.forward, global)?;
            // rs_end_handler: a non-tunnelled server fixes the family.
            if !rs.forward.is_some_and(|f| f.is_tunnel()) {
                set_af(
                    &mut vs.af,
                    AddressFamily::of(&rs.addr.ip()),
                    l,
                    "real server",
                )?;
            }
            vs.real_servers.push(rs);
        }
        "persistence_engine" | "ha_suspend" | "smtp_alert" | "quorum_up" | "quorum_down"
        | "snmp_name" | "hashed" => {
            return Err(unsupported(l));
        }
        _ => return Err(unknown(l)),
    }
    Ok(())
}

/// `vs_end_handler`: the sorry server's family, then a family for a
/// firewall-mark block whose servers are all tunnelled.
fn vs_end(vs: &mut RawVs) -> Result<(), ConfigError> {
    if let Some(sorry) = &vs.sorry
        && !sorry.forward.is_some_and(|f| f.is_tunnel())
    {
        let fam = AddressFamily::of(&sorry.addr.ip());
        if vs.af.is_some_and(|af| af != fam) {
            let reason = "address family of the sorry server does not match the virtual server";
            return Err(at(&sorry.file, sorry.line, Some("sorry_server"), reason));
        }
        vs.af = Some(fam);
    }
    if vs.af.is_none() && !matches!(vs.id, RawId::Group(_)) {
        let mut families = vs
            .sorry
            .iter()
            .map(|s| s.addr.ip())
            .chain(vs.real_servers.iter().map(|r| r.addr.ip()))
            .map(|a| AddressFamily::of(&a));
        let first = families.next();
        // Mixed (or no servers at all): IPv4, as keepalived.
        vs.af = Some(match first {
            Some(f) if families.all(|g| g == f) => f,
            _ => AddressFamily::Inet,
        });
    }
    Ok(())
}

fn real_server<'a>(
    cur: &mut super::parse::Cursor<'a>,
    head: &'a Line,
    vs_forward: Option<ForwardMethod>,
    global: &Global,
) -> Result<RawRs, ConfigError> {
    let mut rs = RawRs {
        file: Rc::clone(&head.file),
        line: head.line,
        addr: server_addr(head)?,
        weight: None,
        forward: vs_forward,
        upper_threshold: 0,
        lower_threshold: 0,
        inhibit: None,
        timing: Timing::default(),
        virtualhost: None,
        checkers: Vec::new(),
    };
    cur.block(head, |cur, l| {
        if rs.timing.keyword(l, Level::RealServer)? {
            return Ok(());
        }
        match l.keyword() {
            "weight" => {
                rs.weight = Some(unsigned32(&args(l, 1, 1)?[0], 0, WEIGHT_MAX).map_err(bad(l))?)
            }
            "lvs_method" => rs.forward = Some(forward(l)?),
            "uthreshold" => {
                rs.upper_threshold = unsigned32(&args(l, 1, 1)?[0], 0, u32::MAX).map_err(bad(l))?
            }
            "lthreshold" => {
                rs.lower_threshold = unsigned32(&args(l, 1, 1)?[0], 0, u32::MAX).map_err(bad(l))?
            }
            "inhibit_on_failure" => rs.inhibit = Some(optional_bool(l)?),
            "virtualhost" => rs.virtualhost = Some(args(l, 1, 1)?[0].clone()),
            "notify_up" | "notify_down" | "smtp_alert" | "snmp_name" | "track_file" => {
                return Err(unsupported(l));
            }
            "SSL_GET" | "SMTP_CHECK" | "DNS_CHECK" | "BFD_CHECK" | "PING_CHECK" | "FILE_CHECK" => {
                return Err(unsupported(l));
            }
            _ => match checker::checker(cur, l, rs.addr, global.script_user.as_deref())? {
                Some(c) => rs.checkers.push(c),
                None => return Err(unknown(l)),
            },
        }
        Ok(())
    })?;
    Ok(rs)
}

/// `lvs_method NAT|DR|TUN [type ipip|gue port N|gre] [nocsum|csum|remcsum]`
/// (`svr_forwarding_handler`).
pub(crate) fn forward(l: &Line) -> Result<ForwardMethod, ConfigError> {
    let a = args(l, 1, usize::MAX)?;
    let method = a[0].as_str();
    let options = &a[1..];
    match method {
        "NAT" | "DR" if !options.is_empty() => {
            return Err(l.error(format!("tunnel option '{}' with {method}", options[0])));
        }
        "NAT" => return Ok(ForwardMethod::Masquerade),
        "DR" => return Ok(ForwardMethod::DirectRoute),
        "TUN" => {}
        other => return Err(l.error(format!("unknown forwarding method '{other}'"))),
    }
    let mut kind = "ipip";
    let mut port: u16 = 0;
    let mut flags = TunnelFlags::empty();
    let mut i = 0;
    while i < options.len() {
        let value = || {
            options
                .get(i + 1)
                .map(String::as_str)
                .ok_or_else(|| l.error(format!("missing value after '{}'", options[i])))
        };
        match options[i].as_str() {
            "type" => {
                kind = match value()? {
                    t @ ("ipip" | "gue" | "gre") => t,
                    t => return Err(l.error(format!("unknown tunnel type '{t}'"))),
                };
                i += 1;
            }
            "port" => {
                port = unsigned32(value()?, 1, 65535).map_err(bad(l))? as u16;
                i += 1;
            }
            "nocsum" => flags = TunnelFlags::empty(),
            "csum" => flags = TunnelFlags::CSUM,
            "remcsum" => flags = TunnelFlags::REMCSUM,
            other => return Err(l.error(format!("invalid tunnel option '{other}'"))),
        }
        i += 1;
    }
    if (kind == "gue") != (port != 0) {
        return Err(l.error("gue tunnels require a port, and other tunnels cannot have one"));
    }
    let encap = match kind {
        "gue" => TunnelEncap::Gue { port },
        "gre" if flags == TunnelFlags::REMCSUM => {
            return Err(l.error("gre tunnels do not support remcsum"));
        }
        "gre" => TunnelEncap::Gre,
        _ if !flags.is_empty() => {
            return Err(l.error("ipip tunnels do not support checksum options"));
        }
        _ => TunnelEncap::Ipip,
    };
    Ok(ForwardMethod::Tunnel(Tunnel::new(encap).with_flags(flags)))
}
