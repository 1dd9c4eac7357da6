//! Service attributes (`IPVS_SVC_ATTR_*`).

use std::borrow::Cow;

use netlink_packet_core::Nla;

use super::UnknownAttr;
use crate::codec::DecodeError;

use super::{
    ParseAttr, RawAddr, RawNla, StatsAttr, cstr, emit_all, emit_cstr, fixed, len_all, other,
    parse_all,
};
use crate::codec::consts::svc_attr as a;

/// One attribute nested in `IPVS_CMD_ATTR_SERVICE`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ServiceAttr {
    /// Address family, u16 host order.
    Af(u16),
    /// IP protocol, u16 host order.
    Protocol(u16),
    /// Virtual address.
    Addr(RawAddr),
    /// Port (host value; big-endian on the wire).
    Port(u16),
    /// Firewall mark, u32 host order.
    Fwmark(u32),
    /// Scheduler name.
    SchedName(String),
    /// Flags and the mask of flags to change (`struct ip_vs_flags`).
    Flags {
        /// Flag values.
        flags: u32,
        /// Which flags the request sets.
        mask: u32,
    },
    /// Persistence timeout, seconds.
    Timeout(u32),
    /// Netmask, the four bytes as on the wire (see [`crate::model::Netmask`]).
    Netmask([u8; 4]),
    /// 32-bit statistics (output).
    Stats(Vec<StatsAttr>),
    /// Persistence-engine name.
    PeName(String),
    /// 64-bit statistics (output, 4.1+).
    Stats64(Vec<StatsAttr>),
    /// An attribute this crate does not know.
    Other(UnknownAttr),
}

impl Nla for ServiceAttr {
    #[inline(always)]
    fn value_len(&self) -> usize {
        match self {
            Self::Af(_) | Self::Protocol(_) | Self::Port(_) => 2,
            Self::Fwmark(_) | Self::Timeout(_) | Self::Netmask(_) => 4,
            Self::Addr(addr) => addr.as_bytes().len(),
            Self::SchedName(s) | Self::PeName(s) => s.len() + 1,
            Self::Flags { .. } => 8,
            Self::Stats(v) | Self::Stats64(v) => len_all(v),
            Self::Other(nla) => nla.value_len(),
        }
    }

    #[inline(always)]
    fn kind(&self) -> u16 {
        match self {
            Self::Af(_) => a::AF,
            Self::Protocol(_) => a::PROTOCOL,
            Self::Addr(_) => a::ADDR,
            Self::Port(_) => a::PORT,
            Self::Fwmark(_) => a::FWMARK,
            Self::SchedName(_) => a::SCHED_NAME,
            Self::Flags { .. } => a::FLAGS,
            Self::Timeout(_) => a::TIMEOUT,
            Self::Netmask(_) => a::NETMASK,
            Self::Stats(_) => a::STATS,
            Self::PeName(_) => a::PE_NAME,
            Self::Stats64(_) => a::STATS64,
            Self::Other(nla) => nla.kind(),
        }
    }

    #[inline(always)]
    fn emit_value(&self, buf: &mut [u8]) {
        match self {
            Self::Af(v) | Self::Protocol(v) => buf.copy_from_slice(&v.to_ne_bytes()),
            Self::Port(v) => buf.copy_from_slice(&v.to_be_bytes()),
            Self::Fwmark(v) | Self::Timeout(v) => buf.copy_from_slice(&v.to_ne_bytes()),
            Self::Netmask(raw) => buf.copy_from_slice(raw),
            Self::Addr(addr) => buf.copy_from_slice(addr.as_bytes()),
            Self::SchedName(s) | Self::PeName(s) => emit_cstr(s, buf),
            Self::Flags { flags, mask } => {
                buf[..4].copy_from_slice(&flags.to_ne_bytes());
                buf[4..].copy_from_slice(&mask.to_ne_bytes());
            }
            Self::Stats(v) | Self::Stats64(v) => emit_all(v, buf),
            Self::Other(nla) => nla.emit_value(buf),
        }
    }
}

impl super::PushValue for ServiceAttr {
    #[inline(always)]
    fn owns_heap(&self) -> bool {
        match self {
            Self::SchedName(_)
            | Self::PeName(_)
            | Self::Stats(_)
            | Self::Stats64(_)
            | Self::Other(_) => true,
            Self::Af(_)
            | Self::Protocol(_)
            | Self::Addr(_)
            | Self::Port(_)
            | Self::Fwmark(_)
            | Self::Flags { .. }
            | Self::Timeout(_)
            | Self::Netmask(_) => false,
        }
    }
}

impl ParseAttr for ServiceAttr {
    #[inline]
    fn parse_view(nla: &RawNla<'_>) -> Result<Self, DecodeError> {
        Ok(match ServiceAttr::parse_lean(nla)? {
            LeanServiceAttr::Attr(attr) => attr,
            LeanServiceAttr::SchedName(name) => Self::SchedName(name.into_owned()),
            LeanServiceAttr::PeName(name) => Self::PeName(name.into_owned()),
            LeanServiceAttr::Stats(nest) => Self::Stats(parse_all(nest)?),
            LeanServiceAttr::Stats64(nest) => Self::Stats64(parse_all(nest)?),
        })
    }
}

/// A service attribute parsed without copying what can be borrowed: names,
/// and statistics nests left as bytes for a streaming reader
/// ([`super::stats::for_each_counter`]). The large-dump decoder uses it; the
/// enum's own parser is built on it, so both read the bytes the same way.
///
/// This is the codec's one second path, kept because it halves the cost of
/// reading a dump: `benches/codec.rs` counts 2,960 instructions per service
/// streamed (`reply::service_from_body`) against 5,810 through
/// [`ServiceAttr`] and `IpvsMessage` (callgrind; docs/performance.md).
pub(crate) enum LeanServiceAttr<'a> {
    /// Any attribute with a fixed-size value, or one this crate does not know.
    Attr(ServiceAttr),
    /// `SCHED_NAME`.
    SchedName(Cow<'a, str>),
    /// `PE_NAME`.
    PeName(Cow<'a, str>),
    /// The value of `STATS`.
    Stats(&'a [u8]),
    /// The value of `STATS64`.
    Stats64(&'a [u8]),
}

impl ServiceAttr {
    #[inline]
    pub(crate) fn parse_lean<'v>(nla: &RawNla<'v>) -> Result<LeanServiceAttr<'v>, DecodeError> {
        let v = nla.value();
        Ok(LeanServiceAttr::Attr(match nla.kind() {
            a::AF => Self::Af(u16::from_ne_bytes(fixed("service AF", v)?)),
            a::PROTOCOL => Self::Protocol(u16::from_ne_bytes(fixed("service PROTOCOL", v)?)),
            a::ADDR => Self::Addr(RawAddr::new(v)?),
            a::PORT => Self::Port(u16::from_be_bytes(fixed("service PORT", v)?)),
            a::FWMARK => Self::Fwmark(u32::from_ne_bytes(fixed("service FWMARK", v)?)),
            a::SCHED_NAME => return Ok(LeanServiceAttr::SchedName(cstr(v))),
            a::FLAGS => {
                let raw: [u8; 8] = fixed("service FLAGS", v)?;
                let (f, m) = raw.split_at(4);
                Self::Flags {
                    flags: u32::from_ne_bytes(fixed("flags", f)?),
                    mask: u32::from_ne_bytes(fixed("mask", m)?),
                }
            }
            a::TIMEOUT => Self::Timeout(u32::from_ne_bytes(fixed("service TIMEOUT", v)?)),
            a::NETMASK => Self::Netmask(fixed("service NETMASK", v)?),
            a::STATS => return Ok(LeanServiceAttr::Stats(v)),
            a::PE_NAME => return Ok(LeanServiceAttr::PeName(cstr(v))),
            a::STATS64 => return Ok(LeanServiceAttr::Stats64(v)),
            _ => Self::Other(other(nla)?),
        }))
    }
}
