//! The addresses of a tuple (`CTA_TUPLE_IP`: `CTA_IP_V4_SRC`, `CTA_IP_V4_DST`,
//! `CTA_IP_V6_SRC`, `CTA_IP_V6_DST`), in network byte order as the kernel
//! writes them (`nla_put_in_addr`, `nla_put_in6_addr`).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::codec::DecodeError;
use crate::codec::attr::{RawAttrs, RawNla, fixed};

pub(crate) const CTA_IP_V4_SRC: u16 = 1;
pub(crate) const CTA_IP_V4_DST: u16 = 2;
pub(crate) const CTA_IP_V6_SRC: u16 = 3;
pub(crate) const CTA_IP_V6_DST: u16 = 4;

/// One attribute of the address nest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IpAttr {
    /// The source address (either family).
    Src(IpAddr),
    /// The destination address (either family).
    Dst(IpAddr),
    /// Anything else, skipped.
    Other,
}

impl IpAttr {
    fn parse(nla: &RawNla<'_>) -> Result<Self, DecodeError> {
        let v4 = |what| fixed::<4>(what, nla.value()).map(|b| IpAddr::V4(Ipv4Addr::from(b)));
        let v6 = |what| fixed::<16>(what, nla.value()).map(|b| IpAddr::V6(Ipv6Addr::from(b)));
        Ok(match nla.kind() {
            CTA_IP_V4_SRC => IpAttr::Src(v4("CTA_IP_V4_SRC")?),
            CTA_IP_V4_DST => IpAttr::Dst(v4("CTA_IP_V4_DST")?),
            CTA_IP_V6_SRC => IpAttr::Src(v6("CTA_IP_V6_SRC")?),
            CTA_IP_V6_DST => IpAttr::Dst(v6("CTA_IP_V6_DST")?),
            _ => IpAttr::Other,
        })
    }
}

/// The source and destination of an address nest; both must be there and
/// of one family.
pub(crate) fn decode(value: &[u8]) -> Result<(IpAddr, IpAddr), DecodeError> {
    let (mut src, mut dst) = (None, None);
    for nla in RawAttrs::new(value) {
        match IpAttr::parse(&nla?)? {
            IpAttr::Src(a) => src = Some(a),
            IpAttr::Dst(a) => dst = Some(a),
            IpAttr::Other => {}
        }
    }
    match (src, dst) {
        (Some(s), Some(d)) if s.is_ipv4() == d.is_ipv4() => Ok((s, d)),
        (Some(_), Some(_)) => Err("CTA_TUPLE_IP with addresses of two families".into()),
        _ => Err("CTA_TUPLE_IP without a source or destination address".into()),
    }
}

/// Appends the two address attributes of `src` and `dst` (one family).
pub(crate) fn write(out: &mut Vec<u8>, src: IpAddr, dst: IpAddr) {
    for (addr, v4, v6) in [
        (src, CTA_IP_V4_SRC, CTA_IP_V6_SRC),
        (dst, CTA_IP_V4_DST, CTA_IP_V6_DST),
    ] {
        match addr {
            IpAddr::V4(a) => super::put(out, v4, &a.octets()),
            IpAddr::V6(a) => super::put(out, v6, &a.octets()),
        }
    }
}
