//! Address families and transport protocols.

use std::fmt;
use std::net::IpAddr;

/// The address family of a virtual or real server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "lowercase"))]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub enum AddressFamily {
    /// IPv4 (`AF_INET`, 2).
    Inet,
    /// IPv6 (`AF_INET6`, 10).
    Inet6,
}

impl AddressFamily {
    /// `AF_INET`.
    pub const AF_INET: u16 = 2;
    /// `AF_INET6`.
    pub const AF_INET6: u16 = 10;

    /// The family of an address.
    ///
    /// ```
    /// use ipvsctl::model::AddressFamily;
    /// assert_eq!(AddressFamily::of(&"::1".parse().unwrap()), AddressFamily::Inet6);
    /// ```
    pub fn of(addr: &IpAddr) -> Self {
        match addr {
            IpAddr::V4(_) => Self::Inet,
            IpAddr::V6(_) => Self::Inet6,
        }
    }

    /// The kernel's number for this family (`AF_INET` or `AF_INET6`).
    pub fn to_raw(self) -> u16 {
        match self {
            Self::Inet => Self::AF_INET,
            Self::Inet6 => Self::AF_INET6,
        }
    }

    /// The family for a kernel number, if IPVS supports it.
    pub fn from_raw(raw: u16) -> Option<Self> {
        match raw {
            Self::AF_INET => Some(Self::Inet),
            Self::AF_INET6 => Some(Self::Inet6),
            _ => None,
        }
    }

    /// The longest prefix of this family (32 or 128).
    pub fn max_prefix(self) -> u8 {
        match self {
            Self::Inet => 32,
            Self::Inet6 => 128,
        }
    }
}

impl fmt::Display for AddressFamily {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Inet => "IPv4",
            Self::Inet6 => "IPv6",
        })
    }
}

/// The transport protocol of an address-based virtual server.
///
/// The kernel does not check the protocol number it is given over netlink, so
/// services created by other tools may carry any number: those decode as
/// [`Protocol::Other`]. `#[non_exhaustive]`: a protocol IPVS learns to
/// handle (as it learnt SCTP) gets its own variant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "lowercase"))]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[non_exhaustive]
pub enum Protocol {
    /// TCP (6).
    Tcp,
    /// UDP (17).
    Udp,
    /// SCTP (132).
    Sctp,
    /// Any other IP protocol number.
    Other(u16),
}

impl Protocol {
    /// The IP protocol number.
    pub fn to_raw(self) -> u16 {
        match self {
            Self::Tcp => 6,
            Self::Udp => 17,
            Self::Sctp => 132,
            Self::Other(n) => n,
        }
    }

    /// The protocol for an IP protocol number.
    ///
    /// ```
    /// use ipvsctl::model::Protocol;
    /// assert_eq!(Protocol::from_raw(17), Protocol::Udp);
    /// ```
    pub fn from_raw(raw: u16) -> Self {
        match raw {
            6 => Self::Tcp,
            17 => Self::Udp,
            132 => Self::Sctp,
            n => Self::Other(n),
        }
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Tcp => f.write_str("TCP"),
            Self::Udp => f.write_str("UDP"),
            Self::Sctp => f.write_str("SCTP"),
            Self::Other(n) => write!(f, "proto {n}"),
        }
    }
}
