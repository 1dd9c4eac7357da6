//! Top-level attributes of an IPVS message (`IPVS_CMD_ATTR_*`, and
//! `IPVS_INFO_ATTR_*` in info replies, which reuse the same numbers).

use netlink_packet_core::Nla;

use super::UnknownAttr;
use crate::codec::DecodeError;

use super::{
    DaemonAttr, DestAttr, RawNla, ServiceAttr, emit_all, fixed, len_all, other, parse_all,
    push_attr, push_whole_value,
};
use crate::codec::consts::{cmd_attr as a, info_attr};

/// One top-level attribute.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum IpvsAttr {
    /// A service (`IPVS_CMD_ATTR_SERVICE`).
    Service(Vec<ServiceAttr>),
    /// A destination (`IPVS_CMD_ATTR_DEST`).
    Dest(Vec<DestAttr>),
    /// A sync daemon (`IPVS_CMD_ATTR_DAEMON`).
    Daemon(Vec<DaemonAttr>),
    /// TCP timeout, seconds.
    TimeoutTcp(u32),
    /// TCP FIN timeout, seconds.
    TimeoutTcpFin(u32),
    /// UDP timeout, seconds.
    TimeoutUdp(u32),
    /// IPVS version (`IPVS_INFO_ATTR_VERSION`, in info messages only).
    InfoVersion(u32),
    /// Connection-table size (`IPVS_INFO_ATTR_CONN_TAB_SIZE`, in info
    /// messages only).
    InfoConnTabSize(u32),
    /// An attribute this crate does not know.
    Other(UnknownAttr),
}

impl Nla for IpvsAttr {
    fn value_len(&self) -> usize {
        match self {
            Self::Service(v) => len_all(v),
            Self::Dest(v) => len_all(v),
            Self::Daemon(v) => len_all(v),
            Self::TimeoutTcp(_)
            | Self::TimeoutTcpFin(_)
            | Self::TimeoutUdp(_)
            | Self::InfoVersion(_)
            | Self::InfoConnTabSize(_) => 4,
            Self::Other(nla) => nla.value_len(),
        }
    }

    fn kind(&self) -> u16 {
        match self {
            Self::Service(_) => a::SERVICE,
            Self::Dest(_) => a::DEST,
            Self::Daemon(_) => a::DAEMON,
            Self::TimeoutTcp(_) => a::TIMEOUT_TCP,
            Self::TimeoutTcpFin(_) => a::TIMEOUT_TCP_FIN,
            Self::TimeoutUdp(_) => a::TIMEOUT_UDP,
            Self::InfoVersion(_) => info_attr::VERSION,
            Self::InfoConnTabSize(_) => info_attr::CONN_TAB_SIZE,
            Self::Other(nla) => nla.kind(),
        }
    }

    fn emit_value(&self, buf: &mut [u8]) {
        match self {
            Self::Service(v) => emit_all(v, buf),
            Self::Dest(v) => emit_all(v, buf),
            Self::Daemon(v) => emit_all(v, buf),
            Self::TimeoutTcp(v)
            | Self::TimeoutTcpFin(v)
            | Self::TimeoutUdp(v)
            | Self::InfoVersion(v)
            | Self::InfoConnTabSize(v) => buf.copy_from_slice(&v.to_ne_bytes()),
            Self::Other(nla) => nla.emit_value(buf),
        }
    }
}

impl super::PushValue for IpvsAttr {
    /// A nest's members are appended one by one (see `PushValue`); they are
    /// padded, so the nest needs no padding of its own.
    #[inline]
    fn push_value(&self, out: &mut Vec<u8>) {
        match self {
            Self::Service(v) => v.iter().for_each(|m| {
                push_attr(out, m);
            }),
            Self::Dest(v) => v.iter().for_each(|m| {
                push_attr(out, m);
            }),
            Self::Daemon(v) => v.iter().for_each(|m| {
                push_attr(out, m);
            }),
            _ => push_whole_value(self, out),
        }
    }

    #[inline]
    fn whole_len(&self) -> Option<usize> {
        match self {
            Self::Service(_) | Self::Dest(_) | Self::Daemon(_) => None,
            _ => Some(self.value_len()),
        }
    }
}

impl IpvsAttr {
    /// Parses a top-level attribute. `info` selects the info attribute space
    /// (`GET_INFO` requests and `SET_INFO` replies), whose numbers overlap the
    /// command attributes.
    #[inline]
    pub(crate) fn parse_view(nla: &RawNla<'_>, info: bool) -> Result<Self, DecodeError> {
        let v = nla.value();
        let u32_of = |what| fixed::<4>(what, v).map(u32::from_ne_bytes);
        Ok(match (info, nla.kind()) {
            (true, info_attr::VERSION) => Self::InfoVersion(u32_of("info VERSION")?),
            (true, info_attr::CONN_TAB_SIZE) => {
                Self::InfoConnTabSize(u32_of("info CONN_TAB_SIZE")?)
            }
            (true, _) => Self::Other(other(nla)?),
            (false, a::SERVICE) => Self::Service(parse_all(v)?),
            (false, a::DEST) => Self::Dest(parse_all(v)?),
            (false, a::DAEMON) => Self::Daemon(parse_all(v)?),
            (false, a::TIMEOUT_TCP) => Self::TimeoutTcp(u32_of("TIMEOUT_TCP")?),
            (false, a::TIMEOUT_TCP_FIN) => Self::TimeoutTcpFin(u32_of("TIMEOUT_TCP_FIN")?),
            (false, a::TIMEOUT_UDP) => Self::TimeoutUdp(u32_of("TIMEOUT_UDP")?),
            (false, _) => Self::Other(other(nla)?),
        })
    }
}
