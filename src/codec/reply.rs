//! Reply decoders: [`IpvsMessage`]s to model values, normalising what the
//! kernel fills in on its own (the `HASHED` flag, 16-byte addresses, the flags
//! mask) so that what the kernel reports after adding `x` equals `x`.

use std::borrow::Cow;
use std::net::SocketAddr;

use super::DecodeError;

use super::attr::{
    DaemonAttr, DestAttr, IpvsAttr, LeanDestAttr, LeanServiceAttr, RawAddr, RawAttrs, ServiceAttr,
    StatValue, StatsAttr, for_each_counter,
};
use super::consts::{cmd_attr, stats_attr};
use super::frame;
use super::message::{IpvsCmd, IpvsMessage};
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

/// Sets the counter `kind` (`IPVS_STATS_ATTR_*`) of `s`.
#[inline]
fn set_counter(s: &mut Stats, kind: u16, v: StatValue) {
    let v = v.get();
    match kind {
        stats_attr::CONNS => s.conns = v,
        stats_attr::INPKTS => s.in_pkts = v,
        stats_attr::OUTPKTS => s.out_pkts = v,
        stats_attr::INBYTES => s.in_bytes = v,
        stats_attr::OUTBYTES => s.out_bytes = v,
        stats_attr::CPS => s.cps = v,
        stats_attr::INPPS => s.in_pps = v,
        stats_attr::OUTPPS => s.out_pps = v,
        stats_attr::INBPS => s.in_bps = v,
        stats_attr::OUTBPS => s.out_bps = v,
        _ => {}
    }
}

fn empty_stats(source: StatsSource) -> Stats {
    Stats {
        source,
        ..Stats::default()
    }
}

/// Folds a decoded `STATS` or `STATS64` nest into [`Stats`].
fn stats(attrs: &[StatsAttr], source: StatsSource) -> Stats {
    let mut s = empty_stats(source);
    for a in attrs {
        if let Some(v) = a.value() {
            set_counter(&mut s, netlink_packet_core::Nla::kind(a), v);
        }
    }
    s
}

/// Folds the bytes of a `STATS` or `STATS64` nest into [`Stats`] as they
/// are read.
#[inline]
fn stats_from_nest(nest: &[u8], source: StatsSource) -> Result<Stats, DecodeError> {
    let mut s = empty_stats(source);
    for_each_counter(nest, |kind, v| set_counter(&mut s, kind, v))?;
    Ok(s)
}

/// STATS64 where present (4.1+), else STATS.
fn best_stats(s32: Option<Stats>, s64: Option<Stats>) -> Stats {
    s64.or(s32).unwrap_or_default()
}

/// Finds the nest `want` among the top-level attributes of a message body
/// (generic-netlink header first) while checking every other attribute as
/// [`frame::decode_message`] would, so that a body is accepted here exactly
/// when that function accepts it. The first such nest is returned, as the
/// message-based decoders take the first.
fn find_nest(body: &[u8], want: u16) -> Result<Option<&[u8]>, DecodeError> {
    let (cmd, attrs) = match (body.first(), body.get(frame::GENL_HDRLEN..)) {
        (Some(&cmd), Some(attrs)) => (IpvsCmd::from_raw(cmd), attrs),
        _ => {
            return Err(DecodeError::from(format!(
                "generic-netlink header truncated: {} bytes",
                body.len()
            )));
        }
    };
    let info = cmd.carries_info();
    let mut found = None;
    for nla in RawAttrs::new(attrs) {
        let nla = nla?;
        if !info && found.is_none() && nla.kind() == want {
            found = Some(nla.value());
        } else {
            IpvsAttr::parse_view(&nla, info)?;
        }
    }
    Ok(found)
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
pub(crate) fn service_from_attrs(attrs: Vec<ServiceAttr>) -> Result<ServiceSnapshot, DecodeError> {
    let mut fold = ServiceFold::default();
    for a in attrs {
        fold.add(a);
    }
    fold.finish()
}

/// Decodes a service message straight from its body (the bytes after the
/// netlink header, generic-netlink header first), without building an
/// [`IpvsMessage`]: the path for large dumps. Gives what
/// `service(frame::decode_message(body)?)` gives, and fails exactly when
/// that fails.
///
/// ```
/// use ipvsctl::codec::{frame, reply};
/// // A genl header and nothing else: no service attribute.
/// let body = [1u8, 1, 0, 0];
/// assert!(reply::service_from_body(&body).is_err());
/// assert!(frame::decode_message(&body).is_ok());
/// ```
pub fn service_from_body(body: &[u8]) -> Result<ServiceSnapshot, DecodeError> {
    fold_service_body(body, Statistics::Read)?.finish()
}

/// [`service_from_body`] without the statistics: their nests are left
/// unread (a sync compares settings only, and the counters were a fifth of
/// its decoding). Fails where `service_from_body` fails, except on a
/// malformed statistics nest.
///
/// ```
/// use ipvsctl::codec::reply;
/// let body = [1u8, 1, 0, 0];
/// assert!(reply::virtual_server_from_body(&body).is_err());
/// ```
pub fn virtual_server_from_body(body: &[u8]) -> Result<VirtualServer, DecodeError> {
    fold_service_body(body, Statistics::Skipped)?.service()
}

/// Whether a service's statistics nests are decoded.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Statistics {
    Read,
    Skipped,
}

fn fold_service_body(body: &[u8], stats: Statistics) -> Result<ServiceFold<'_>, DecodeError> {
    // The second decode path (see `attr::LeanServiceAttr` for why it is
    // kept): the same parser and the same fold as `service`, without the
    // owned attribute values in between.
    let nest = find_nest(body, cmd_attr::SERVICE)?.ok_or_else(|| missing("a service attribute"))?;
    let mut fold = ServiceFold::default();
    for nla in RawAttrs::new(nest) {
        // Names stay borrowed and statistics are folded as they are read;
        // the attribute enum's parser reads the bytes, as everywhere.
        match ServiceAttr::parse_lean(&nla?)? {
            LeanServiceAttr::Attr(a) => fold.add(a),
            LeanServiceAttr::SchedName(n) => fold.sched = Some(n),
            LeanServiceAttr::PeName(n) => fold.pe = Some(n),
            LeanServiceAttr::Stats(_) | LeanServiceAttr::Stats64(_)
                if stats == Statistics::Skipped => {}
            LeanServiceAttr::Stats(b) => fold.s32 = Some(stats_from_nest(b, StatsSource::Stats32)?),
            LeanServiceAttr::Stats64(b) => {
                fold.s64 = Some(stats_from_nest(b, StatsSource::Stats64)?)
            }
        }
    }
    Ok(fold)
}

/// The attributes of a service nest as they are read; later ones win, as the
/// kernel never repeats one.
#[derive(Default)]
struct ServiceFold<'a> {
    af: Option<u16>,
    protocol: Option<u16>,
    addr: Option<RawAddr>,
    port: Option<u16>,
    fwmark: Option<u32>,
    sched: Option<Cow<'a, str>>,
    flags: Option<u32>,
    timeout: Option<u32>,
    netmask: Option<[u8; 4]>,
    pe: Option<Cow<'a, str>>,
    s32: Option<Stats>,
    s64: Option<Stats>,
}

impl ServiceFold<'_> {
    fn add(&mut self, a: ServiceAttr) {
        match a {
            ServiceAttr::Af(v) => self.af = Some(v),
            ServiceAttr::Protocol(v) => self.protocol = Some(v),
            ServiceAttr::Addr(v) => self.addr = Some(v),
            ServiceAttr::Port(v) => self.port = Some(v),
            ServiceAttr::Fwmark(v) => self.fwmark = Some(v),
            ServiceAttr::SchedName(v) => self.sched = Some(Cow::Owned(v)),
            ServiceAttr::Flags { flags: f, .. } => self.flags = Some(f),
            ServiceAttr::Timeout(v) => self.timeout = Some(v),
            ServiceAttr::Netmask(v) => self.netmask = Some(v),
            ServiceAttr::PeName(v) => self.pe = Some(Cow::Owned(v)),
            ServiceAttr::Stats(v) => self.s32 = Some(stats(&v, StatsSource::Stats32)),
            ServiceAttr::Stats64(v) => self.s64 = Some(stats(&v, StatsSource::Stats64)),
            _ => {}
        }
    }

    fn finish(self) -> Result<ServiceSnapshot, DecodeError> {
        let (s32, s64) = (self.s32, self.s64);
        Ok(ServiceSnapshot {
            service: self.service()?,
            stats: best_stats(s32, s64),
        })
    }

    /// The service's settings (its statistics left aside).
    fn service(self) -> Result<VirtualServer, DecodeError> {
        let family = family(self.af.ok_or_else(|| missing("service AF"))?)?;
        // The kernel sends FWMARK for firewall-mark services and PROTOCOL,
        // ADDR, PORT otherwise; a zero mark would not be a firewall-mark
        // service.
        let key = match self.fwmark {
            Some(mark) if mark != 0 => ServiceKey::FwMark { mark, family },
            _ => {
                let ip = self
                    .addr
                    .ok_or_else(|| missing("service ADDR"))?
                    .to_ip(family)?;
                let protocol = self.protocol.ok_or_else(|| missing("service PROTOCOL"))?;
                ServiceKey::Addr {
                    protocol: Protocol::from_raw(protocol),
                    addr: SocketAddr::new(ip, self.port.ok_or_else(|| missing("service PORT"))?),
                }
            }
        };
        let sched = self.sched.ok_or_else(|| missing("service SCHED_NAME"))?;
        let service = VirtualServer {
            key,
            scheduler: Scheduler::from_name(&sched),
            flags: ServiceFlags::from_kernel(self.flags.ok_or_else(|| missing("service FLAGS"))?),
            timeout: self.timeout.ok_or_else(|| missing("service TIMEOUT"))?,
            netmask: Netmask::from_wire(
                family,
                self.netmask.ok_or_else(|| missing("service NETMASK"))?,
            ),
            persistence_engine: self
                .pe
                .filter(|p| !p.is_empty())
                .map(|p| PersistenceEngine(p.into_owned())),
        };
        Ok(service)
    }
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
pub(crate) fn destination_from_attrs(
    attrs: Vec<DestAttr>,
    service_family: AddressFamily,
) -> Result<DestinationSnapshot, DecodeError> {
    let mut fold = DestFold::default();
    for a in attrs {
        fold.add(a);
    }
    fold.snapshot(service_family)
}

/// [`destination`] straight from a message body, as [`service_from_body`]
/// is to [`service`]: the same result, and an error exactly when that
/// function's decoding fails.
pub fn destination_from_body(
    body: &[u8],
    service_family: AddressFamily,
) -> Result<DestinationSnapshot, DecodeError> {
    fold_destination(body, true)?.snapshot(service_family)
}

/// [`destination_from_body`] without the counters: a real server's
/// configuration and connection counts. The two statistics nests, half of
/// the attributes the kernel sends per real server, are skipped unread (and
/// so unchecked): for readers that compare configuration, such as a
/// verifying sync (callgrind: 2,630 instructions per real server instead of
/// 3,790).
pub fn destination_config_from_body(
    body: &[u8],
    service_family: AddressFamily,
) -> Result<(RealServer, ConnCounts), DecodeError> {
    fold_destination(body, false)?.finish(service_family)
}

/// The attributes of the destination nest in a message body, statistics
/// nests decoded when `counters`.
fn fold_destination(body: &[u8], counters: bool) -> Result<DestFold, DecodeError> {
    let nest =
        find_nest(body, cmd_attr::DEST)?.ok_or_else(|| missing("a destination attribute"))?;
    let mut fold = DestFold::default();
    for nla in RawAttrs::new(nest) {
        match DestAttr::parse_lean(&nla?)? {
            LeanDestAttr::Attr(a) => fold.add(a),
            LeanDestAttr::Stats(b) if counters => {
                fold.s32 = Some(stats_from_nest(b, StatsSource::Stats32)?);
            }
            LeanDestAttr::Stats64(b) if counters => {
                fold.s64 = Some(stats_from_nest(b, StatsSource::Stats64)?);
            }
            LeanDestAttr::Stats(_) | LeanDestAttr::Stats64(_) => {}
        }
    }
    Ok(fold)
}

/// The attributes of a destination nest as they are read.
#[derive(Default)]
struct DestFold {
    addr: Option<RawAddr>,
    port: Option<u16>,
    fwd: Option<u32>,
    weight: Option<u32>,
    upper: Option<u32>,
    lower: Option<u32>,
    af: Option<u16>,
    tun_type: Option<u8>,
    tun_port: Option<u16>,
    tun_flags: Option<u16>,
    conns: ConnCounts,
    s32: Option<Stats>,
    s64: Option<Stats>,
}

impl DestFold {
    fn add(&mut self, a: DestAttr) {
        match a {
            DestAttr::Addr(v) => self.addr = Some(v),
            DestAttr::Port(v) => self.port = Some(v),
            DestAttr::FwdMethod(v) => self.fwd = Some(v),
            DestAttr::Weight(v) => self.weight = Some(v),
            DestAttr::UThresh(v) => self.upper = Some(v),
            DestAttr::LThresh(v) => self.lower = Some(v),
            DestAttr::ActiveConns(v) => self.conns.active = v,
            DestAttr::InactConns(v) => self.conns.inactive = v,
            DestAttr::PersistConns(v) => self.conns.persistent = v,
            DestAttr::Stats(v) => self.s32 = Some(stats(&v, StatsSource::Stats32)),
            DestAttr::AddrFamily(v) => self.af = Some(v),
            DestAttr::Stats64(v) => self.s64 = Some(stats(&v, StatsSource::Stats64)),
            DestAttr::TunType(v) => self.tun_type = Some(v),
            DestAttr::TunPort(v) => self.tun_port = Some(v),
            DestAttr::TunFlags(v) => self.tun_flags = Some(v),
            _ => {}
        }
    }

    /// The real server with its connection counts and statistics.
    fn snapshot(self, service_family: AddressFamily) -> Result<DestinationSnapshot, DecodeError> {
        let stats = best_stats(self.s32, self.s64);
        let (server, conns) = self.finish(service_family)?;
        Ok(DestinationSnapshot {
            server,
            conns,
            stats,
        })
    }

    /// The real server and its connection counts, without the statistics.
    fn finish(
        self,
        service_family: AddressFamily,
    ) -> Result<(RealServer, ConnCounts), DecodeError> {
        let family = match self.af {
            Some(raw) => family(raw)?,
            None => service_family,
        };
        let ip = self
            .addr
            .ok_or_else(|| missing("destination ADDR"))?
            .to_ip(family)?;
        let forward = match self.fwd.ok_or_else(|| missing("destination FWD_METHOD"))? & 0x7 {
            0 => ForwardMethod::Masquerade,
            1 => ForwardMethod::Local,
            2 => ForwardMethod::Tunnel(Tunnel {
                encap: match self.tun_type.unwrap_or(TunnelEncap::RAW_IPIP) {
                    TunnelEncap::RAW_IPIP => TunnelEncap::Ipip,
                    TunnelEncap::RAW_GUE => TunnelEncap::Gue {
                        port: self.tun_port.unwrap_or(0),
                    },
                    TunnelEncap::RAW_GRE => TunnelEncap::Gre,
                    other => {
                        return Err(DecodeError::from(format!("unknown tunnel type {other}")));
                    }
                },
                flags: TunnelFlags::from_bits_retain(self.tun_flags.unwrap_or(0)),
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
            addr: SocketAddr::new(ip, self.port.ok_or_else(|| missing("destination PORT"))?),
            weight: self.weight.ok_or_else(|| missing("destination WEIGHT"))?,
            forward,
            upper_threshold: self.upper.ok_or_else(|| missing("destination U_THRESH"))?,
            lower_threshold: self.lower.ok_or_else(|| missing("destination L_THRESH"))?,
        };
        Ok((server, self.conns))
    }
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
