//! A connection's tuple (`CTA_TUPLE_ORIG`, `CTA_TUPLE_REPLY`: the nest of
//! `CTA_TUPLE_IP`, `CTA_TUPLE_PROTO` and `CTA_TUPLE_ZONE`).

use std::net::IpAddr;

use crate::codec::DecodeError;
use crate::codec::attr::{RawAttrs, RawNla, fixed};
use crate::model::Protocol;

use super::{ip, proto};

pub(crate) const CTA_TUPLE_IP: u16 = 1;
pub(crate) const CTA_TUPLE_PROTO: u16 = 2;
pub(crate) const CTA_TUPLE_ZONE: u16 = 3;

/// One direction of a tracked connection: who sent to whom.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Tuple {
    /// The source address.
    pub src: IpAddr,
    /// The destination address (same family as `src`).
    pub dst: IpAddr,
    /// The layer-4 protocol.
    pub protocol: Protocol,
    /// The source port; 0 for protocols without ports (ICMP).
    pub src_port: u16,
    /// The destination port; 0 for protocols without ports.
    pub dst_port: u16,
    /// The direction's zone (`CTA_TUPLE_ZONE`), when the kernel sent one.
    pub zone: Option<u16>,
}

impl Tuple {
    /// A tuple without zone.
    pub fn new(src: IpAddr, dst: IpAddr, protocol: Protocol, src_port: u16, dst_port: u16) -> Self {
        Tuple {
            src,
            dst,
            protocol,
            src_port,
            dst_port,
            zone: None,
        }
    }
}

/// One attribute of the tuple nest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TupleAttr {
    /// `CTA_TUPLE_IP`: source and destination.
    Ip(IpAddr, IpAddr),
    /// `CTA_TUPLE_PROTO`: number, source port, destination port.
    Proto(u8, u16, u16),
    /// `CTA_TUPLE_ZONE`.
    Zone(u16),
    /// Anything else, skipped.
    Other,
}

impl TupleAttr {
    fn parse(nla: &RawNla<'_>) -> Result<Self, DecodeError> {
        Ok(match nla.kind() {
            CTA_TUPLE_IP => {
                let (s, d) = ip::decode(nla.value())?;
                TupleAttr::Ip(s, d)
            }
            CTA_TUPLE_PROTO => {
                let (n, s, d) = proto::decode(nla.value())?;
                TupleAttr::Proto(n, s, d)
            }
            CTA_TUPLE_ZONE => {
                TupleAttr::Zone(u16::from_be_bytes(fixed("CTA_TUPLE_ZONE", nla.value())?))
            }
            _ => TupleAttr::Other,
        })
    }
}

/// Decodes a tuple nest; addresses and protocol are required.
pub(crate) fn decode(value: &[u8]) -> Result<Tuple, DecodeError> {
    let (mut ips, mut l4, mut zone) = (None, None, None);
    for nla in RawAttrs::new(value) {
        match TupleAttr::parse(&nla?)? {
            TupleAttr::Ip(s, d) => ips = Some((s, d)),
            TupleAttr::Proto(n, s, d) => l4 = Some((n, s, d)),
            TupleAttr::Zone(z) => zone = Some(z),
            TupleAttr::Other => {}
        }
    }
    let (src, dst) = ips.ok_or_else(|| DecodeError::from("tuple without CTA_TUPLE_IP"))?;
    let (num, src_port, dst_port) =
        l4.ok_or_else(|| DecodeError::from("tuple without CTA_TUPLE_PROTO"))?;
    Ok(Tuple {
        src,
        dst,
        protocol: Protocol::from_raw(u16::from(num)),
        src_port,
        dst_port,
        zone,
    })
}

/// Appends the tuple as the nest `kind` (`CTA_TUPLE_ORIG` or
/// `CTA_TUPLE_REPLY`). Only for protocols with ports: the ports are
/// written as given.
pub(crate) fn write(out: &mut Vec<u8>, kind: u16, t: &Tuple) {
    let outer = super::begin(out, kind);
    let at = super::begin(out, CTA_TUPLE_IP);
    ip::write(out, t.src, t.dst);
    super::end(out, at);
    let at = super::begin(out, CTA_TUPLE_PROTO);
    // Protocol numbers above 255 do not exist in IP; the model allows them.
    proto::write(out, t.protocol.to_raw() as u8, t.src_port, t.dst_port);
    super::end(out, at);
    if let Some(zone) = t.zone {
        super::put(out, CTA_TUPLE_ZONE, &zone.to_be_bytes());
    }
    super::end(out, outer);
}
