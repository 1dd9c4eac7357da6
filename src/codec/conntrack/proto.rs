//! The layer-4 part of a tuple (`CTA_TUPLE_PROTO`): the protocol number and,
//! for the protocols with ports, the ports in network byte order. ICMP's
//! id, type and code are kept as `Other`: nothing here selects by them.

use crate::codec::DecodeError;
use crate::codec::attr::{RawAttrs, RawNla, fixed};

pub(crate) const CTA_PROTO_NUM: u16 = 1;
pub(crate) const CTA_PROTO_SRC_PORT: u16 = 2;
pub(crate) const CTA_PROTO_DST_PORT: u16 = 3;

/// One attribute of the protocol nest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ProtoAttr {
    /// `CTA_PROTO_NUM`: the IP protocol number.
    Num(u8),
    /// `CTA_PROTO_SRC_PORT`.
    SrcPort(u16),
    /// `CTA_PROTO_DST_PORT`.
    DstPort(u16),
    /// Anything else (ICMP id, type, code), skipped.
    Other,
}

impl ProtoAttr {
    fn parse(nla: &RawNla<'_>) -> Result<Self, DecodeError> {
        let port = |what| fixed::<2>(what, nla.value()).map(u16::from_be_bytes);
        Ok(match nla.kind() {
            CTA_PROTO_NUM => ProtoAttr::Num(fixed::<1>("CTA_PROTO_NUM", nla.value())?[0]),
            CTA_PROTO_SRC_PORT => ProtoAttr::SrcPort(port("CTA_PROTO_SRC_PORT")?),
            CTA_PROTO_DST_PORT => ProtoAttr::DstPort(port("CTA_PROTO_DST_PORT")?),
            _ => ProtoAttr::Other,
        })
    }
}

/// The protocol number and the ports (0 where the protocol has none).
pub(crate) fn decode(value: &[u8]) -> Result<(u8, u16, u16), DecodeError> {
    let (mut num, mut sport, mut dport) = (None, 0, 0);
    for nla in RawAttrs::new(value) {
        match ProtoAttr::parse(&nla?)? {
            ProtoAttr::Num(n) => num = Some(n),
            ProtoAttr::SrcPort(p) => sport = p,
            ProtoAttr::DstPort(p) => dport = p,
            ProtoAttr::Other => {}
        }
    }
    let num = num.ok_or_else(|| DecodeError::from("CTA_TUPLE_PROTO without CTA_PROTO_NUM"))?;
    Ok((num, sport, dport))
}

/// Appends the protocol number and both ports.
pub(crate) fn write(out: &mut Vec<u8>, num: u8, sport: u16, dport: u16) {
    super::put(out, CTA_PROTO_NUM, &[num]);
    super::put(out, CTA_PROTO_SRC_PORT, &sport.to_be_bytes());
    super::put(out, CTA_PROTO_DST_PORT, &dport.to_be_bytes());
}
