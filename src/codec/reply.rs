//! Reply decoders: [`IpvsMessage`]s to model values, normalising what the
//! kernel fills in on its own (the `HASHED` flag, 16-byte addresses, the flags
//! mask) so that what the kernel reports after adding `x` equals `x`.

use std::net::SocketAddr;

use netlink_packet_core::DecodeError;

use super::attr::{DaemonAttr, DestAttr, IpvsAttr, RawAddr, ServiceAttr, StatsAttr};
use super::message::IpvsMessage;
use crate::model::{
    AddressFamily, ConnCounts, DaemonRole, DestinationSnapshot, ForwardMethod, Info, Netmask,
    PersistenceEngine, Protocol, RealServer, Scheduler, ServiceFlags, ServiceKey, ServiceSnapshot,
    Stats, StatsSource, SyncDaemon, Timeouts, Tunnel, TunnelEncap, TunnelFlags, Version,
    VirtualServer,
};

fn missing(what: &str) -> DecodeError {
    DecodeError::from(format!("reply without {what}"))
}

fn family(raw: u16) -> Result<AddressFamily, DecodeError> {
    AddressFamily::from_raw(raw)
        .ok_or_else(|| DecodeError::from(format!("unsupported address family {raw}")))
}

/// Folds a `STATS` or `STATS64` nest into [`Stats`].
fn stats(attrs: &[StatsAttr], source: StatsSource) -> Stats {
    let mut s = Stats {
        source,
        ..Stats::default()
    };
    for a in attrs {
        match a {
            StatsAttr::Conns(v) => s.conns = v.get(),
            StatsAttr::InPkts(v) => s.in_pkts = v.get(),
            StatsAttr::OutPkts(v) => s.out_pkts = v.get(),
            StatsAttr::InBytes(v) => s.in_bytes = v.get(),
            StatsAttr::OutBytes(v) => s.out_bytes = v.get(),
            StatsAttr::Cps(v) => s.cps = v.get(),
            StatsAttr::InPps(v) => s.in_pps = v.get(),
            StatsAttr::OutPps(v) => s.out_pps = v.get(),
            StatsAttr::InBps(v) => s.in_bps = v.get(),
            StatsAttr::OutBps(v) => s.out_bps = v.get(),
            _ => {}
        }
    }
    s
}

/// Picks STATS64 where present (4.1+), else STATS.
fn best_stats(s32: Option<Vec<StatsAttr>>, s64: Option<Vec<StatsAttr>>) -> Stats {
    match (s64, s32) {
        (Some(v), _) => stats(&v, StatsSource::Stats64),
        (None, Some(v)) => stats(&v, StatsSource::Stats32),
        (None, None) => Stats::default(),
    }
}

/// The service nest of a message.
fn take_service(msg: IpvsMessage) -> Result<Vec<ServiceAttr>, DecodeError> {
    msg.attrs
        .into_iter()
        .find_map(|a| match a {
            IpvsAttr::Service(s) => Some(s),
            _ => None,
        })
        .ok_or_else(|| missing("a service attribute"))
}

/// Decodes a service reply (`NEW_SERVICE`, as the kernel answers `GET_SERVICE`).
pub fn service(msg: IpvsMessage) -> Result<ServiceSnapshot, DecodeError> {
    service_from_attrs(take_service(msg)?)
}

/// Decodes the attributes of a service nest.
pub fn service_from_attrs(attrs: Vec<ServiceAttr>) -> Result<ServiceSnapshot, DecodeError> {
    let (mut af, mut protocol, mut addr, mut port, mut fwmark) = (None, None, None, None, None);
    let (mut sched, mut flags, mut timeout, mut netmask, mut pe) = (None, None, None, None, None);
    let (mut s32, mut s64) = (None, None);
    for a in attrs {
        match a {
            ServiceAttr::Af(v) => af = Some(v),
            ServiceAttr::Protocol(v) => protocol = Some(v),
            ServiceAttr::Addr(v) => addr = Some(v),
            ServiceAttr::Port(v) => port = Some(v),
            ServiceAttr::Fwmark(v) => fwmark = Some(v),
            ServiceAttr::SchedName(v) => sched = Some(v),
            ServiceAttr::Flags { flags: f, .. } => flags = Some(f),
            ServiceAttr::Timeout(v) => timeout = Some(v),
            ServiceAttr::Netmask(v) => netmask = Some(v),
            ServiceAttr::PeName(v) => pe = Some(v),
            ServiceAttr::Stats(v) => s32 = Some(v),
            ServiceAttr::Stats64(v) => s64 = Some(v),
            _ => {}
        }
    }
    let family = family(af.ok_or_else(|| missing("service AF"))?)?;
    // The kernel sends FWMARK for firewall-mark services and PROTOCOL, ADDR,
    // PORT otherwise; a zero mark would not be a firewall-mark service.
    let key = match fwmark {
        Some(mark) if mark != 0 => ServiceKey::FwMark { mark, family },
        _ => {
            let ip = addr.ok_or_else(|| missing("service ADDR"))?.to_ip(family)?;
            ServiceKey::Addr {
                protocol: Protocol::from_raw(protocol.ok_or_else(|| missing("service PROTOCOL"))?),
                addr: SocketAddr::new(ip, port.ok_or_else(|| missing("service PORT"))?),
            }
        }
    };
    let service = VirtualServer {
        key,
        scheduler: Scheduler::from_name(&sched.ok_or_else(|| missing("service SCHED_NAME"))?),
        flags: ServiceFlags::from_kernel(flags.ok_or_else(|| missing("service FLAGS"))?),
        timeout: timeout.ok_or_else(|| missing("service TIMEOUT"))?,
        netmask: Netmask::from_wire(family, netmask.ok_or_else(|| missing("service NETMASK"))?),
        persistence_engine: pe.filter(|p| !p.is_empty()).map(PersistenceEngine),
    };
    Ok(ServiceSnapshot {
        service,
        stats: best_stats(s32, s64),
    })
}

/// Decodes a destination reply (`NEW_DEST`, as the kernel answers a
/// `GET_DEST` dump). `service_family` is the family of the service the dump
/// was for: kernels before 3.18 send no destination family, and their
/// destinations always have the service's.
pub fn destination(
    msg: IpvsMessage,
    service_family: AddressFamily,
) -> Result<DestinationSnapshot, DecodeError> {
    let attrs = msg
        .attrs
        .into_iter()
        .find_map(|a| match a {
            IpvsAttr::Dest(d) => Some(d),
            _ => None,
        })
        .ok_or_else(|| missing("a destination attribute"))?;
    destination_from_attrs(attrs, service_family)
}

/// Decodes the attributes of a destination nest.
pub fn destination_from_attrs(
    attrs: Vec<DestAttr>,
    service_family: AddressFamily,
) -> Result<DestinationSnapshot, DecodeError> {
    let (mut addr, mut port, mut fwd, mut weight, mut upper, mut lower) =
        (None::<RawAddr>, None, None, None, None, None);
    let (mut af, mut tun_type, mut tun_port, mut tun_flags) = (None, None, None, None);
    let mut conns = ConnCounts::default();
    let (mut s32, mut s64) = (None, None);
    for a in attrs {
        match a {
            DestAttr::Addr(v) => addr = Some(v),
            DestAttr::Port(v) => port = Some(v),
            DestAttr::FwdMethod(v) => fwd = Some(v),
            DestAttr::Weight(v) => weight = Some(v),
            DestAttr::UThresh(v) => upper = Some(v),
            DestAttr::LThresh(v) => lower = Some(v),
            DestAttr::ActiveConns(v) => conns.active = v,
            DestAttr::InactConns(v) => conns.inactive = v,
            DestAttr::PersistConns(v) => conns.persistent = v,
            DestAttr::Stats(v) => s32 = Some(v),
            DestAttr::AddrFamily(v) => af = Some(v),
            DestAttr::Stats64(v) => s64 = Some(v),
            DestAttr::TunType(v) => tun_type = Some(v),
            DestAttr::TunPort(v) => tun_port = Some(v),
            DestAttr::TunFlags(v) => tun_flags = Some(v),
            _ => {}
        }
    }
    let family = match af {
        Some(raw) => family(raw)?,
        None => service_family,
    };
    let ip = addr
        .ok_or_else(|| missing("destination ADDR"))?
        .to_ip(family)?;
    let forward = match fwd.ok_or_else(|| missing("destination FWD_METHOD"))? & 0x7 {
        0 => ForwardMethod::Masquerade,
        1 => ForwardMethod::Local,
        2 => ForwardMethod::Tunnel(Tunnel {
            encap: match tun_type.unwrap_or(TunnelEncap::RAW_IPIP) {
                TunnelEncap::RAW_IPIP => TunnelEncap::Ipip,
                TunnelEncap::RAW_GUE => TunnelEncap::Gue {
                    port: tun_port.unwrap_or(0),
                },
                TunnelEncap::RAW_GRE => TunnelEncap::Gre,
                other => {
                    return Err(DecodeError::from(format!("unknown tunnel type {other}")));
                }
            },
            flags: TunnelFlags::from_bits_retain(tun_flags.unwrap_or(0)),
        }),
        3 => ForwardMethod::DirectRoute,
        4 => ForwardMethod::Bypass,
        other => {
            return Err(DecodeError::from(format!(
                "unknown forwarding method {other}"
            )));
        }
    };
    let server = RealServer {
        addr: SocketAddr::new(ip, port.ok_or_else(|| missing("destination PORT"))?),
        weight: weight.ok_or_else(|| missing("destination WEIGHT"))?,
        forward,
        upper_threshold: upper.ok_or_else(|| missing("destination U_THRESH"))?,
        lower_threshold: lower.ok_or_else(|| missing("destination L_THRESH"))?,
    };
    Ok(DestinationSnapshot {
        server,
        conns,
        stats: best_stats(s32, s64),
    })
}

/// Decodes a sync-daemon reply (`NEW_DAEMON`, as the kernel answers a
/// `GET_DAEMON` dump).
pub fn daemon(msg: IpvsMessage) -> Result<SyncDaemon, DecodeError> {
    let attrs = msg
        .attrs
        .into_iter()
        .find_map(|a| match a {
            IpvsAttr::Daemon(d) => Some(d),
            _ => None,
        })
        .ok_or_else(|| missing("a daemon attribute"))?;
    let mut role = None;
    let mut d = SyncDaemon::new(DaemonRole::Master, "");
    let mut ifname = None;
    for a in attrs {
        match a {
            DaemonAttr::State(s) => {
                role = Some(
                    DaemonRole::from_raw(s)
                        .ok_or_else(|| DecodeError::from(format!("unknown daemon state {s}")))?,
                )
            }
            DaemonAttr::McastIfn(n) => ifname = Some(n),
            DaemonAttr::SyncId(v) => d.sync_id = v,
            DaemonAttr::SyncMaxLen(v) => d.max_len = Some(v),
            DaemonAttr::McastGroup(g) => d.group = Some(g.into()),
            DaemonAttr::McastGroup6(g) => d.group = Some(g.into()),
            DaemonAttr::McastPort(v) => d.port = Some(v),
            DaemonAttr::McastTtl(v) => d.ttl = Some(v),
            _ => {}
        }
    }
    d.role = role.ok_or_else(|| missing("daemon STATE"))?;
    d.interface = ifname.ok_or_else(|| missing("daemon MCAST_IFN"))?;
    Ok(d)
}

/// Decodes a `GET_CONFIG` reply.
pub fn timeouts(msg: &IpvsMessage) -> Result<Timeouts, DecodeError> {
    let (mut tcp, mut fin, mut udp) = (None, None, None);
    for a in &msg.attrs {
        match a {
            IpvsAttr::TimeoutTcp(v) => tcp = Some(*v),
            IpvsAttr::TimeoutTcpFin(v) => fin = Some(*v),
            IpvsAttr::TimeoutUdp(v) => udp = Some(*v),
            _ => {}
        }
    }
    Ok(Timeouts {
        tcp: tcp.ok_or_else(|| missing("TIMEOUT_TCP"))?,
        tcp_fin: fin.ok_or_else(|| missing("TIMEOUT_TCP_FIN"))?,
        udp: udp.ok_or_else(|| missing("TIMEOUT_UDP"))?,
    })
}

/// Decodes a `GET_INFO` reply.
pub fn info(msg: &IpvsMessage) -> Result<Info, DecodeError> {
    let (mut version, mut size) = (None, None);
    for a in &msg.attrs {
        match a {
            IpvsAttr::InfoVersion(v) => version = Some(*v),
            IpvsAttr::InfoConnTabSize(v) => size = Some(*v),
            _ => {}
        }
    }
    Ok(Info {
        version: Version(version.ok_or_else(|| missing("info VERSION"))?),
        conn_tab_size: size.ok_or_else(|| missing("info CONN_TAB_SIZE"))?,
    })
}
