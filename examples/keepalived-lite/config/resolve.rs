//! Defaults and inheritance, as keepalived 2.2.7 settles them after reading
//! the file: `link_vsg_to_vs` (ipwrapper.c) for groups, then
//! `validate_check_config` (check_data.c) for protocols, persistence,
//! forwarding methods, real-server ports, weights, quorum and every
//! checker's timings. Where keepalived drops a block with an error, the
//! configuration is refused.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use ipvsctl::model::{
    AddressFamily, ForwardMethod, Protocol as IpvsProtocol, Scheduler, ServiceFlags, ServiceKey,
};

use super::checker::{RawChecker, RawKind};
use super::lexer::at;
use super::model::{
    CheckKind, CheckerConf, Config, ConfigError, HttpCheck, MiscCheck, Protocol, RealServerConf,
    ServiceSettings, SorryServer, VirtualServerConf, VsId,
};
use super::parse::{GroupEntry, Raw, RawGroup};
use super::vs::{DEFAULT_PERSISTENCE, RawId, RawRs, RawVs, Timing};

/// `KEEPALIVED_DEFAULT_DELAY` (check_data.h).
const DEFAULT_DELAY_LOOP: Duration = Duration::from_secs(60);
/// `alloc_vs`: `connection_to = 5 * TIMER_HZ`.
const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The model of a whole raw configuration.
pub(crate) fn resolve(raw: Raw) -> Result<Config, ConfigError> {
    let mut servers = Vec::with_capacity(raw.servers.len());
    let mut seen: HashMap<ServiceKey, usize> = HashMap::new();
    for vs in &raw.servers {
        let conf = server(vs, &raw.groups)?;
        for key in &conf.keys {
            if let Some(line) = seen.insert(*key, vs.line) {
                let reason = format!(
                    "service {key} is already defined by the virtual_server at line {line}"
                );
                return Err(at(&vs.file, vs.line, Some("virtual_server"), reason));
            }
        }
        servers.push(conf);
    }
    Ok(Config {
        global: raw.global,
        virtual_servers: servers,
        notices: raw.notices,
    })
}

fn server(vs: &RawVs, groups: &[RawGroup]) -> Result<VirtualServerConf, ConfigError> {
    let fail = |reason: String| at(&vs.file, vs.line, Some("virtual_server"), reason);
    let group = match &vs.id {
        RawId::Group(name) => Some(
            groups
                .iter()
                .find(|g| &g.name == name)
                .ok_or_else(|| fail(format!("virtual server group {name} is not defined")))?,
        ),
        _ => None,
    };
    let af = match group {
        Some(g) => group_family(g, vs.af).map_err(fail)?,
        None => vs.af,
    };
    if vs.real_servers.is_empty() {
        return Err(fail("virtual server has no real servers".into()));
    }

    // keepalived leaves the protocol 0 and then warns that the kernel
    // takes that as UDP, and sets UDP.
    let protocol = vs.protocol.unwrap_or(Protocol::Udp);
    let has_addrs = match &vs.id {
        RawId::Addr(_) => true,
        RawId::Fwmark(_) => false,
        RawId::Group(_) => group.is_some_and(|g| {
            g.entries
                .iter()
                .any(|e| matches!(e, GroupEntry::Range { .. }))
        }),
    };
    if let Some(line) = vs.ops_line
        && has_addrs
        && protocol != Protocol::Udp
    {
        return Err(at(
            &vs.file,
            line,
            Some("ops"),
            "one-packet scheduling needs protocol UDP",
        ));
    }
    // A service without a port must be persistent: keepalived sets the default.
    let mut persistence = vs.persistence_timeout;
    let portless = match (&vs.id, group) {
        (RawId::Addr(a), _) => a.port() == 0,
        (_, Some(g)) => g
            .entries
            .iter()
            .any(|e| matches!(e, GroupEntry::Range { port: 0, .. })),
        _ => false,
    };
    if persistence == 0 && portless {
        persistence = DEFAULT_PERSISTENCE;
    }
    let mut flags = vs.flags;
    if persistence > 0 {
        flags |= ServiceFlags::PERSISTENT;
    }
    let settings = ServiceSettings {
        scheduler: vs
            .scheduler
            .clone()
            .unwrap_or(Scheduler::WeightedLeastConnection),
        flags,
        persistence_timeout: (persistence > 0).then_some(persistence),
        persistence_granularity: vs.granularity,
    };

    let wire = match protocol {
        Protocol::Tcp => IpvsProtocol::Tcp,
        Protocol::Udp => IpvsProtocol::Udp,
        Protocol::Sctp => IpvsProtocol::Sctp,
    };
    let (id, keys) = match &vs.id {
        RawId::Addr(a) => (
            VsId::Addr(*a, protocol),
            vec![ServiceKey::Addr {
                protocol: wire,
                addr: *a,
            }],
        ),
        RawId::Fwmark(m) => (
            VsId::Fwmark(*m),
            vec![ServiceKey::fwmark(*m, af.unwrap_or(AddressFamily::Inet))],
        ),
        RawId::Group(name) => (
            VsId::Group(name.clone()),
            group.map(|g| group_keys(g, wire, af)).unwrap_or_default(),
        ),
    };

    let forward = vs.forward.unwrap_or(ForwardMethod::Masquerade);
    let vs_port = match &vs.id {
        RawId::Addr(a) => Some(a.port()),
        _ => None,
    };
    let fwmark = matches!(vs.id, RawId::Fwmark(_));
    let port_of = |addr: SocketAddr, method: ForwardMethod| -> SocketAddr {
        real_port(addr, method, group.is_some(), fwmark, vs_port)
    };

    let mut real_servers: Vec<RealServerConf> = Vec::with_capacity(vs.real_servers.len());
    for (i, rs) in vs.real_servers.iter().enumerate() {
        let method = rs.forward.unwrap_or(forward);
        let addr = port_of(rs.addr, method);
        let earlier = vs.real_servers[..i].iter().zip(&real_servers);
        if let Some((first, _)) = earlier
            .clone()
            .find(|(r, c)| r.addr == rs.addr || c.addr == addr)
        {
            let reason = format!(
                "real server {addr} duplicates the one at line {}",
                first.line
            );
            return Err(at(&rs.file, rs.line, Some("real_server"), reason));
        }
        real_servers.push(RealServerConf {
            line: rs.line,
            addr,
            weight: rs.weight.unwrap_or(vs.weight),
            forward: method,
            upper_threshold: rs.upper_threshold,
            lower_threshold: rs.lower_threshold,
            inhibit: rs.inhibit.unwrap_or(vs.inhibit),
            checkers: rs.checkers.iter().map(|c| checker(c, rs, vs)).collect(),
        });
    }

    let sorry = vs.sorry.as_ref().map(|s| {
        let method = s.forward.unwrap_or(forward);
        // A sorry server that is also a real server follows its inhibit setting.
        let same = vs
            .real_servers
            .iter()
            .zip(&real_servers)
            .find(|(r, _)| r.addr == s.addr);
        SorryServer {
            addr: if method == ForwardMethod::Masquerade {
                s.addr
            } else {
                port_of(s.addr, method)
            },
            forward: method,
            weight: 1,
            inhibit: same.map_or(s.inhibit, |(_, c)| c.inhibit),
        }
    });

    // The quorum cannot exceed the total weight, the hysteresis must stay
    // below the quorum: keepalived lowers them (with a warning).
    let total: u64 = real_servers.iter().map(|r| u64::from(r.weight)).sum();
    let quorum = u32::try_from(u64::from(vs.quorum).min(total)).unwrap_or(u32::MAX);
    let hysteresis = if vs.hysteresis >= quorum {
        quorum.saturating_sub(1)
    } else {
        vs.hysteresis
    };

    Ok(VirtualServerConf {
        file: vs.file.to_path_buf(),
        line: vs.line,
        id,
        keys,
        settings,
        quorum,
        hysteresis,
        sorry,
        omega: vs.omega,
        real_servers,
    })
}

/// A real (or non-NAT sorry) server's port after keepalived's fixes: with
/// an address, a missing port (or any port unless NAT) becomes the
/// service's; with a firewall mark, a non-NAT server has no port; in a
/// group, ports stay as written.
fn real_port(
    addr: SocketAddr,
    method: ForwardMethod,
    group: bool,
    fwmark: bool,
    vs_port: Option<u16>,
) -> SocketAddr {
    let mut addr = addr;
    if group {
        return addr;
    }
    let nat = method == ForwardMethod::Masquerade;
    match vs_port {
        Some(p) if !nat || addr.port() == 0 => addr.set_port(p),
        None if fwmark && !nat => addr.set_port(0),
        _ => {}
    }
    addr
}

/// `link_vsg_to_vs`: the block's family against its group's.
fn group_family(g: &RawGroup, af: Option<AddressFamily>) -> Result<Option<AddressFamily>, String> {
    let has = |fam: AddressFamily| {
        g.entries.iter().any(|e| match e {
            GroupEntry::Range { first, .. } => AddressFamily::of(first) == fam,
            GroupEntry::Fwmark { family, .. } => *family == Some(fam),
        })
    };
    let (v4, v6) = (has(AddressFamily::Inet), has(AddressFamily::Inet6));
    match af {
        Some(_) if v4 && v6 => Err(format!(
            "group {} has IPv4 and IPv6 services: every real and sorry server must be tunnelled, without ip_family",
            g.name
        )),
        Some(AddressFamily::Inet6) if v4 => {
            Err(format!("group {} is IPv4, the virtual server IPv6", g.name))
        }
        Some(AddressFamily::Inet) if v6 => {
            Err(format!("group {} is IPv6, the virtual server IPv4", g.name))
        }
        Some(f) => Ok(Some(f)),
        None if v4 && !v6 => Ok(Some(AddressFamily::Inet)),
        None if v6 && !v4 => Ok(Some(AddressFamily::Inet6)),
        None => Ok(None),
    }
}

/// Every service of a group: address ranges expanded, firewall marks in the
/// entry's family, else the block's, else IPv4.
fn group_keys(g: &RawGroup, protocol: IpvsProtocol, af: Option<AddressFamily>) -> Vec<ServiceKey> {
    let mut keys = Vec::new();
    for entry in &g.entries {
        match entry {
            GroupEntry::Range { first, last, port } => {
                let addrs: Box<dyn Iterator<Item = IpAddr>> = match (first, last) {
                    (IpAddr::V4(a), IpAddr::V4(b)) => {
                        Box::new((u32::from(*a)..=u32::from(*b)).map(|n| IpAddr::V4(n.into())))
                    }
                    (IpAddr::V6(a), IpAddr::V6(b)) => {
                        Box::new((u128::from(*a)..=u128::from(*b)).map(|n| IpAddr::V6(n.into())))
                    }
                    _ => Box::new(std::iter::empty()),
                };
                keys.extend(addrs.map(|ip| ServiceKey::Addr {
                    protocol,
                    addr: SocketAddr::new(ip, *port),
                }));
            }
            GroupEntry::Fwmark { mark, family } => {
                keys.push(ServiceKey::fwmark(
                    *mark,
                    family.or(af).unwrap_or(AddressFamily::Inet),
                ));
            }
        }
    }
    keys
}

/// A checker with every timing resolved: its own setting, else the real
/// server's, else the virtual server's, else the checker type's default.
fn checker(c: &RawChecker, rs: &RawRs, vs: &RawVs) -> CheckerConf {
    fn pick<T: Copy>(levels: [&Timing; 3], f: impl Fn(&Timing) -> Option<T>) -> Option<T> {
        levels.into_iter().find_map(f)
    }
    let levels = [&c.timing, &rs.timing, &vs.timing];
    let delay_loop = pick(levels, |t| t.delay_loop).unwrap_or(DEFAULT_DELAY_LOOP);
    // `queue_checker`: retry 1 and 1 s; `misc_check_handler`: retry 0;
    // `http_get_handler`: 3 s.
    let (default_retry, default_delay_before_retry) = match c.kind {
        RawKind::Misc(_) => (0, Duration::from_secs(1)),
        RawKind::Http(_) => (1, Duration::from_secs(3)),
        _ => (1, Duration::from_secs(1)),
    };
    // No warmup given: up to one delay_loop. 0 disables it.
    let warmup = pick(levels, |t| t.warmup).unwrap_or(delay_loop);
    let kind = match &c.kind {
        RawKind::Tcp => CheckKind::Tcp,
        RawKind::Http(h) => CheckKind::Http(HttpCheck {
            urls: h.urls.clone(),
            virtualhost: h
                .virtualhost
                .clone()
                .or_else(|| rs.virtualhost.clone())
                .or_else(|| vs.virtualhost.clone()),
            http_protocol: h.protocol,
        }),
        // keepalived falls back to the virtual server's delay_loop here,
        // not the checker's (check_misc.c `misc_check_thread`).
        RawKind::Misc(m) => CheckKind::Misc(MiscCheck {
            argv: m.argv.clone(),
            timeout: m
                .timeout
                .unwrap_or(vs.timing.delay_loop.unwrap_or(DEFAULT_DELAY_LOOP)),
            dynamic: m.dynamic,
            user: m.user.clone(),
        }),
        RawKind::Udp(u) => CheckKind::Udp(u.clone()),
    };
    CheckerConf {
        line: c.line,
        kind,
        connect: c.connect,
        bind: c.bind,
        connect_timeout: pick(levels, |t| t.connect_timeout).unwrap_or(DEFAULT_CONNECT_TIMEOUT),
        retry: pick(levels, |t| t.retry).unwrap_or(default_retry),
        delay_before_retry: pick(levels, |t| t.delay_before_retry)
            .unwrap_or(default_delay_before_retry),
        delay_loop,
        warmup: (!warmup.is_zero()).then_some(warmup),
        alpha: pick(levels, |t| t.alpha).unwrap_or(false),
    }
}
