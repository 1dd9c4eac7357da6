//! Sync-daemon attributes (`IPVS_DAEMON_ATTR_*`).

use std::net::{Ipv4Addr, Ipv6Addr};

use netlink_packet_core::Nla;

use super::UnknownAttr;
use crate::codec::DecodeError;

use super::{ParseAttr, RawNla, emit_cstr, fixed, other, parse_cstr};
use crate::codec::consts::daemon_attr as a;

/// One attribute nested in `IPVS_CMD_ATTR_DAEMON`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DaemonAttr {
    /// State, u32 (1 master, 2 backup).
    State(u32),
    /// Multicast interface name.
    McastIfn(String),
    /// Sync id, u32.
    SyncId(u32),
    /// Maximum message length, u16 (4.3+).
    SyncMaxLen(u16),
    /// IPv4 multicast group (4.3+).
    McastGroup(Ipv4Addr),
    /// IPv6 multicast group (4.3+).
    McastGroup6(Ipv6Addr),
    /// Multicast port, u16 (4.3+).
    McastPort(u16),
    /// Multicast TTL, u8 (4.3+).
    McastTtl(u8),
    /// An attribute this crate does not know.
    Other(UnknownAttr),
}

impl Nla for DaemonAttr {
    fn value_len(&self) -> usize {
        match self {
            Self::State(_) | Self::SyncId(_) | Self::McastGroup(_) => 4,
            Self::McastIfn(s) => s.len() + 1,
            Self::SyncMaxLen(_) | Self::McastPort(_) => 2,
            Self::McastGroup6(_) => 16,
            Self::McastTtl(_) => 1,
            Self::Other(nla) => nla.value_len(),
        }
    }

    fn kind(&self) -> u16 {
        match self {
            Self::State(_) => a::STATE,
            Self::McastIfn(_) => a::MCAST_IFN,
            Self::SyncId(_) => a::SYNC_ID,
            Self::SyncMaxLen(_) => a::SYNC_MAXLEN,
            Self::McastGroup(_) => a::MCAST_GROUP,
            Self::McastGroup6(_) => a::MCAST_GROUP6,
            Self::McastPort(_) => a::MCAST_PORT,
            Self::McastTtl(_) => a::MCAST_TTL,
            Self::Other(nla) => nla.kind(),
        }
    }

    fn emit_value(&self, buf: &mut [u8]) {
        match self {
            Self::State(v) | Self::SyncId(v) => buf.copy_from_slice(&v.to_ne_bytes()),
            Self::McastIfn(s) => emit_cstr(s, buf),
            Self::SyncMaxLen(v) | Self::McastPort(v) => buf.copy_from_slice(&v.to_ne_bytes()),
            Self::McastGroup(g) => buf.copy_from_slice(&g.octets()),
            Self::McastGroup6(g) => buf.copy_from_slice(&g.octets()),
            Self::McastTtl(t) => buf[0] = *t,
            Self::Other(nla) => nla.emit_value(buf),
        }
    }
}

impl super::PushValue for DaemonAttr {}

impl ParseAttr for DaemonAttr {
    #[inline]
    fn parse_view(nla: &RawNla<'_>) -> Result<Self, DecodeError> {
        let v = nla.value();
        Ok(match nla.kind() {
            a::STATE => Self::State(u32::from_ne_bytes(fixed("daemon STATE", v)?)),
            a::MCAST_IFN => Self::McastIfn(parse_cstr(v)),
            a::SYNC_ID => Self::SyncId(u32::from_ne_bytes(fixed("daemon SYNC_ID", v)?)),
            a::SYNC_MAXLEN => Self::SyncMaxLen(u16::from_ne_bytes(fixed("daemon SYNC_MAXLEN", v)?)),
            a::MCAST_GROUP => {
                Self::McastGroup(Ipv4Addr::from(fixed::<4>("daemon MCAST_GROUP", v)?))
            }
            a::MCAST_GROUP6 => {
                Self::McastGroup6(Ipv6Addr::from(fixed::<16>("daemon MCAST_GROUP6", v)?))
            }
            a::MCAST_PORT => Self::McastPort(u16::from_ne_bytes(fixed("daemon MCAST_PORT", v)?)),
            a::MCAST_TTL => Self::McastTtl(u8::from_ne_bytes(fixed("daemon MCAST_TTL", v)?)),
            _ => Self::Other(other(nla)?),
        })
    }
}
