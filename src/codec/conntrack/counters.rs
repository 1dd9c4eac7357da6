//! Per-direction counters (`CTA_COUNTERS_ORIG`, `CTA_COUNTERS_REPLY`: the
//! nest of `CTA_COUNTERS_PACKETS` and `CTA_COUNTERS_BYTES`, 64-bit, network
//! byte order; the 32-bit forms of old kernels are read too). The kernel
//! sends them only while `net.netfilter.nf_conntrack_acct` is on.

use crate::codec::DecodeError;
use crate::codec::attr::{RawAttrs, RawNla, fixed};

const CTA_COUNTERS_PACKETS: u16 = 1;
const CTA_COUNTERS_BYTES: u16 = 2;
const CTA_COUNTERS32_PACKETS: u16 = 3;
const CTA_COUNTERS32_BYTES: u16 = 4;

/// Packets and bytes of one direction of a connection.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Counters {
    /// Packets seen.
    pub packets: u64,
    /// Bytes seen.
    pub bytes: u64,
}

/// One attribute of the counters nest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CountersAttr {
    Packets(u64),
    Bytes(u64),
    /// Padding (`CTA_COUNTERS_PAD`) and anything newer.
    Other,
}

impl CountersAttr {
    fn parse(nla: &RawNla<'_>) -> Result<Self, DecodeError> {
        let v = nla.value();
        let be64 = |what| fixed::<8>(what, v).map(u64::from_be_bytes);
        let be32 = |what| fixed::<4>(what, v).map(|b| u64::from(u32::from_be_bytes(b)));
        Ok(match nla.kind() {
            CTA_COUNTERS_PACKETS => CountersAttr::Packets(be64("CTA_COUNTERS_PACKETS")?),
            CTA_COUNTERS_BYTES => CountersAttr::Bytes(be64("CTA_COUNTERS_BYTES")?),
            CTA_COUNTERS32_PACKETS => CountersAttr::Packets(be32("CTA_COUNTERS32_PACKETS")?),
            CTA_COUNTERS32_BYTES => CountersAttr::Bytes(be32("CTA_COUNTERS32_BYTES")?),
            _ => CountersAttr::Other,
        })
    }
}

/// Decodes a counters nest (missing members are 0).
pub(crate) fn decode(value: &[u8]) -> Result<Counters, DecodeError> {
    let mut c = Counters::default();
    for nla in RawAttrs::new(value) {
        match CountersAttr::parse(&nla?)? {
            CountersAttr::Packets(n) => c.packets = n,
            CountersAttr::Bytes(n) => c.bytes = n,
            CountersAttr::Other => {}
        }
    }
    Ok(c)
}
