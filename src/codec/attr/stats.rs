//! Statistics attributes (`IPVS_STATS_ATTR_*`), shared by `STATS` and
//! `STATS64` nests.

use netlink_packet_core::Nla;

use super::UnknownAttr;
use crate::codec::DecodeError;

use super::{ParseAttr, RawAttrs, RawNla, other};
use crate::codec::consts::stats_attr as a;

/// A counter as sent: `STATS` carries most counters as u32 and bytes as u64;
/// `STATS64` carries everything as u64. The width is kept so that a reply
/// re-encodes byte for byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StatValue {
    /// A 4-byte counter.
    U32(u32),
    /// An 8-byte counter.
    U64(u64),
}

impl StatValue {
    /// The value, widened.
    pub fn get(self) -> u64 {
        match self {
            StatValue::U32(v) => u64::from(v),
            StatValue::U64(v) => v,
        }
    }

    fn len(self) -> usize {
        match self {
            StatValue::U32(_) => 4,
            StatValue::U64(_) => 8,
        }
    }

    fn emit(self, buf: &mut [u8]) {
        match self {
            StatValue::U32(v) => buf.copy_from_slice(&v.to_ne_bytes()),
            StatValue::U64(v) => buf.copy_from_slice(&v.to_ne_bytes()),
        }
    }

    #[inline]
    fn parse(v: &[u8]) -> Result<Self, DecodeError> {
        match v.len() {
            4 => Ok(StatValue::U32(u32::from_ne_bytes([v[0], v[1], v[2], v[3]]))),
            8 => {
                let mut b = [0u8; 8];
                b.copy_from_slice(v);
                Ok(StatValue::U64(u64::from_ne_bytes(b)))
            }
            n => Err(DecodeError::from(format!(
                "statistics counter of {n} bytes"
            ))),
        }
    }
}

/// One attribute nested in `STATS` or `STATS64`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StatsAttr {
    /// Connections.
    Conns(StatValue),
    /// Incoming packets.
    InPkts(StatValue),
    /// Outgoing packets.
    OutPkts(StatValue),
    /// Incoming bytes.
    InBytes(StatValue),
    /// Outgoing bytes.
    OutBytes(StatValue),
    /// Connections per second.
    Cps(StatValue),
    /// Incoming packets per second.
    InPps(StatValue),
    /// Outgoing packets per second.
    OutPps(StatValue),
    /// Incoming bytes per second.
    InBps(StatValue),
    /// Outgoing bytes per second.
    OutBps(StatValue),
    /// Alignment padding before a 64-bit value (skipped on decode).
    Pad(Vec<u8>),
    /// An attribute this crate does not know.
    Other(UnknownAttr),
}

impl StatsAttr {
    /// The counter's value; `None` for padding and unknown attributes.
    pub(crate) fn value(&self) -> Option<StatValue> {
        match self {
            Self::Conns(v)
            | Self::InPkts(v)
            | Self::OutPkts(v)
            | Self::InBytes(v)
            | Self::OutBytes(v)
            | Self::Cps(v)
            | Self::InPps(v)
            | Self::OutPps(v)
            | Self::InBps(v)
            | Self::OutBps(v) => Some(*v),
            Self::Pad(_) | Self::Other(_) => None,
        }
    }
}

impl Nla for StatsAttr {
    fn value_len(&self) -> usize {
        match self {
            Self::Pad(p) => p.len(),
            Self::Other(nla) => nla.value_len(),
            known => known.value().map_or(0, StatValue::len),
        }
    }

    fn kind(&self) -> u16 {
        match self {
            Self::Conns(_) => a::CONNS,
            Self::InPkts(_) => a::INPKTS,
            Self::OutPkts(_) => a::OUTPKTS,
            Self::InBytes(_) => a::INBYTES,
            Self::OutBytes(_) => a::OUTBYTES,
            Self::Cps(_) => a::CPS,
            Self::InPps(_) => a::INPPS,
            Self::OutPps(_) => a::OUTPPS,
            Self::InBps(_) => a::INBPS,
            Self::OutBps(_) => a::OUTBPS,
            Self::Pad(_) => a::PAD,
            Self::Other(nla) => nla.kind(),
        }
    }

    fn emit_value(&self, buf: &mut [u8]) {
        match self {
            Self::Pad(p) => buf.copy_from_slice(p),
            Self::Other(nla) => nla.emit_value(buf),
            known => {
                if let Some(v) = known.value() {
                    v.emit(buf)
                }
            }
        }
    }
}

/// Reads a `STATS` or `STATS64` nest without collecting it: calls `f` with
/// the type (`IPVS_STATS_ATTR_*`) and value of each counter, in order. Fails
/// exactly where parsing the nest as [`StatsAttr`]s fails (a malformed
/// attribute, or a counter that is neither 4 nor 8 bytes); padding and
/// unknown attributes are skipped, as [`StatsAttr::parse_view`] accepts any
/// bytes for them.
#[inline]
pub(crate) fn for_each_counter(
    nest: &[u8],
    mut f: impl FnMut(u16, StatValue),
) -> Result<(), DecodeError> {
    for nla in RawAttrs::new(nest) {
        let nla = nla?;
        let k = nla.kind();
        if is_counter(k) {
            f(k, StatValue::parse(nla.value())?);
        }
    }
    Ok(())
}

/// Whether `kind` is one of the ten counters (not `PAD`, not unknown).
#[inline]
fn is_counter(kind: u16) -> bool {
    (a::CONNS..=a::OUTBPS).contains(&kind)
}

impl super::PushValue for StatsAttr {}

impl ParseAttr for StatsAttr {
    #[inline]
    fn parse_view(nla: &RawNla<'_>) -> Result<Self, DecodeError> {
        let v = nla.value();
        Ok(match nla.kind() {
            a::CONNS => Self::Conns(StatValue::parse(v)?),
            a::INPKTS => Self::InPkts(StatValue::parse(v)?),
            a::OUTPKTS => Self::OutPkts(StatValue::parse(v)?),
            a::INBYTES => Self::InBytes(StatValue::parse(v)?),
            a::OUTBYTES => Self::OutBytes(StatValue::parse(v)?),
            a::CPS => Self::Cps(StatValue::parse(v)?),
            a::INPPS => Self::InPps(StatValue::parse(v)?),
            a::OUTPPS => Self::OutPps(StatValue::parse(v)?),
            a::INBPS => Self::InBps(StatValue::parse(v)?),
            a::OUTBPS => Self::OutBps(StatValue::parse(v)?),
            a::PAD => Self::Pad(v.to_vec()),
            _ => Self::Other(other(nla)?),
        })
    }
}
