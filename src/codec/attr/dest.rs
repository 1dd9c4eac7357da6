//! Destination attributes (`IPVS_DEST_ATTR_*`).

use netlink_packet_core::Nla;

use super::UnknownAttr;
use crate::codec::DecodeError;

use super::{ParseAttr, RawAddr, RawNla, StatsAttr, emit_all, fixed, len_all, other, parse_all};
use crate::codec::consts::dest_attr as a;

/// One attribute nested in `IPVS_CMD_ATTR_DEST`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DestAttr {
    /// Real-server address.
    Addr(RawAddr),
    /// Port (host value; big-endian on the wire).
    Port(u16),
    /// Forwarding method (`IP_VS_CONN_F_*`), u32.
    FwdMethod(u32),
    /// Weight, u32 (the kernel reads it as `int`).
    Weight(u32),
    /// Upper threshold.
    UThresh(u32),
    /// Lower threshold.
    LThresh(u32),
    /// Active connections (output).
    ActiveConns(u32),
    /// Inactive connections (output).
    InactConns(u32),
    /// Persistence templates (output).
    PersistConns(u32),
    /// 32-bit statistics (output).
    Stats(Vec<StatsAttr>),
    /// Address family, u16 (3.18+).
    AddrFamily(u16),
    /// 64-bit statistics (output, 4.1+).
    Stats64(Vec<StatsAttr>),
    /// Tunnel type, u8 (5.2+).
    TunType(u8),
    /// Tunnel port (host value; big-endian on the wire; 5.2+).
    TunPort(u16),
    /// Tunnel flags, u16 (5.3+).
    TunFlags(u16),
    /// An attribute this crate does not know.
    Other(UnknownAttr),
}

impl Nla for DestAttr {
    #[inline(always)]
    fn value_len(&self) -> usize {
        match self {
            Self::Addr(addr) => addr.as_bytes().len(),
            Self::Port(_) | Self::AddrFamily(_) | Self::TunPort(_) | Self::TunFlags(_) => 2,
            Self::TunType(_) => 1,
            Self::FwdMethod(_)
            | Self::Weight(_)
            | Self::UThresh(_)
            | Self::LThresh(_)
            | Self::ActiveConns(_)
            | Self::InactConns(_)
            | Self::PersistConns(_) => 4,
            Self::Stats(v) | Self::Stats64(v) => len_all(v),
            Self::Other(nla) => nla.value_len(),
        }
    }

    #[inline(always)]
    fn kind(&self) -> u16 {
        match self {
            Self::Addr(_) => a::ADDR,
            Self::Port(_) => a::PORT,
            Self::FwdMethod(_) => a::FWD_METHOD,
            Self::Weight(_) => a::WEIGHT,
            Self::UThresh(_) => a::U_THRESH,
            Self::LThresh(_) => a::L_THRESH,
            Self::ActiveConns(_) => a::ACTIVE_CONNS,
            Self::InactConns(_) => a::INACT_CONNS,
            Self::PersistConns(_) => a::PERSIST_CONNS,
            Self::Stats(_) => a::STATS,
            Self::AddrFamily(_) => a::ADDR_FAMILY,
            Self::Stats64(_) => a::STATS64,
            Self::TunType(_) => a::TUN_TYPE,
            Self::TunPort(_) => a::TUN_PORT,
            Self::TunFlags(_) => a::TUN_FLAGS,
            Self::Other(nla) => nla.kind(),
        }
    }

    #[inline(always)]
    fn emit_value(&self, buf: &mut [u8]) {
        match self {
            Self::Addr(addr) => buf.copy_from_slice(addr.as_bytes()),
            Self::Port(v) | Self::TunPort(v) => buf.copy_from_slice(&v.to_be_bytes()),
            Self::AddrFamily(v) | Self::TunFlags(v) => buf.copy_from_slice(&v.to_ne_bytes()),
            Self::TunType(v) => buf[0] = *v,
            Self::FwdMethod(v)
            | Self::Weight(v)
            | Self::UThresh(v)
            | Self::LThresh(v)
            | Self::ActiveConns(v)
            | Self::InactConns(v)
            | Self::PersistConns(v) => buf.copy_from_slice(&v.to_ne_bytes()),
            Self::Stats(v) | Self::Stats64(v) => emit_all(v, buf),
            Self::Other(nla) => nla.emit_value(buf),
        }
    }
}

impl super::PushValue for DestAttr {
    #[inline(always)]
    fn owns_heap(&self) -> bool {
        match self {
            Self::Stats(_) | Self::Stats64(_) | Self::Other(_) => true,
            Self::Addr(_)
            | Self::Port(_)
            | Self::FwdMethod(_)
            | Self::Weight(_)
            | Self::UThresh(_)
            | Self::LThresh(_)
            | Self::ActiveConns(_)
            | Self::InactConns(_)
            | Self::PersistConns(_)
            | Self::AddrFamily(_)
            | Self::TunType(_)
            | Self::TunPort(_)
            | Self::TunFlags(_) => false,
        }
    }
}

impl ParseAttr for DestAttr {
    #[inline]
    fn parse_view(nla: &RawNla<'_>) -> Result<Self, DecodeError> {
        Ok(match DestAttr::parse_lean(nla)? {
            LeanDestAttr::Attr(attr) => attr,
            LeanDestAttr::Stats(nest) => Self::Stats(parse_all(nest)?),
            LeanDestAttr::Stats64(nest) => Self::Stats64(parse_all(nest)?),
        })
    }
}

/// A destination attribute with its statistics nests left as bytes, for the
/// large-dump decoder (see `LeanServiceAttr`).
pub(crate) enum LeanDestAttr<'a> {
    /// Any other attribute.
    Attr(DestAttr),
    /// The value of `STATS`.
    Stats(&'a [u8]),
    /// The value of `STATS64`.
    Stats64(&'a [u8]),
}

impl DestAttr {
    #[inline]
    pub(crate) fn parse_lean<'v>(nla: &RawNla<'v>) -> Result<LeanDestAttr<'v>, DecodeError> {
        let v = nla.value();
        let u32_of = |what| fixed::<4>(what, v).map(u32::from_ne_bytes);
        Ok(LeanDestAttr::Attr(match nla.kind() {
            a::ADDR => Self::Addr(RawAddr::new(v)?),
            a::PORT => Self::Port(u16::from_be_bytes(fixed("dest PORT", v)?)),
            a::FWD_METHOD => Self::FwdMethod(u32_of("dest FWD_METHOD")?),
            a::WEIGHT => Self::Weight(u32_of("dest WEIGHT")?),
            a::U_THRESH => Self::UThresh(u32_of("dest U_THRESH")?),
            a::L_THRESH => Self::LThresh(u32_of("dest L_THRESH")?),
            a::ACTIVE_CONNS => Self::ActiveConns(u32_of("dest ACTIVE_CONNS")?),
            a::INACT_CONNS => Self::InactConns(u32_of("dest INACT_CONNS")?),
            a::PERSIST_CONNS => Self::PersistConns(u32_of("dest PERSIST_CONNS")?),
            a::STATS => return Ok(LeanDestAttr::Stats(v)),
            a::ADDR_FAMILY => Self::AddrFamily(u16::from_ne_bytes(fixed("dest ADDR_FAMILY", v)?)),
            a::STATS64 => return Ok(LeanDestAttr::Stats64(v)),
            a::TUN_TYPE => Self::TunType(u8::from_ne_bytes(fixed("dest TUN_TYPE", v)?)),
            a::TUN_PORT => Self::TunPort(u16::from_be_bytes(fixed("dest TUN_PORT", v)?)),
            a::TUN_FLAGS => Self::TunFlags(u16::from_ne_bytes(fixed("dest TUN_FLAGS", v)?)),
            _ => Self::Other(other(nla)?),
        }))
    }
}
