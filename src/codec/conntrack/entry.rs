//! A conntrack entry: the top-level attribute space of ctnetlink's
//! messages (`CTA_*` of `enum ctattr_type`).

use crate::codec::DecodeError;
use crate::codec::attr::{RawAttrs, RawNla, fixed};
use crate::model::AddressFamily;

use super::counters::{self, Counters};
use super::tuple::{self, Tuple};

pub(crate) const CTA_TUPLE_ORIG: u16 = 1;
pub(crate) const CTA_TUPLE_REPLY: u16 = 2;
pub(crate) const CTA_STATUS: u16 = 3;
pub(crate) const CTA_PROTOINFO: u16 = 4;
pub(crate) const CTA_TIMEOUT: u16 = 7;
pub(crate) const CTA_MARK: u16 = 8;
pub(crate) const CTA_COUNTERS_ORIG: u16 = 9;
pub(crate) const CTA_COUNTERS_REPLY: u16 = 10;
pub(crate) const CTA_ID: u16 = 12;
pub(crate) const CTA_ZONE: u16 = 18;

/// One tracked connection, as a dump reports it.
///
/// The kernel keeps two tuples per connection: `orig`, the direction of
/// the first packet (client to virtual address), and `reply`, the tuple an
/// answer must have (for a connection IPVS masquerades: real server to
/// client, which is how an entry is tied to a real server).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Entry {
    /// The address family (`nfgen_family`).
    pub family: AddressFamily,
    /// The original direction.
    pub orig: Tuple,
    /// The reply direction.
    pub reply: Tuple,
    /// The kernel's id of the entry (`CTA_ID`): a delete carries it, so
    /// that only this very entry goes, never a newer one with the same tuple.
    pub id: Option<u32>,
    /// The `IPS_*` status bits (`IPS_SEEN_REPLY` 0x2, `IPS_ASSURED` 0x4,
    /// `IPS_CONFIRMED` 0x8, `IPS_SRC_NAT` 0x10, `IPS_DST_NAT` 0x20, ...).
    pub status: u32,
    /// Seconds until the entry expires unless traffic refreshes it.
    pub timeout: Option<u32>,
    /// The connection mark (0 when unset).
    pub mark: u32,
    /// The conntrack zone (0, the default zone, when the kernel sent none).
    pub zone: u16,
    /// Counters of the original and reply directions, when the kernel
    /// sent them (`net.netfilter.nf_conntrack_acct=1`).
    pub counters: Option<(Counters, Counters)>,
    /// The protocol's state (`CTA_PROTOINFO`: TCP or SCTP state, ...), raw.
    pub protoinfo: Option<Vec<u8>>,
    /// `CTA_TUPLE_ORIG`'s value as the kernel sent it: a delete sends it
    /// back unchanged.
    pub(crate) orig_raw: Vec<u8>,
}

/// A new entry, as `conntrack -I` makes one: for tests and benchmarks that
/// need a table of a given size quickly (only through `ipvsctl::unstable`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewEntry {
    /// The original direction.
    pub orig: Tuple,
    /// The reply direction (for a masqueraded connection, from the real
    /// server).
    pub reply: Tuple,
    /// Seconds until it expires.
    pub timeout: u32,
}

/// One top-level attribute.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CtAttr<'a> {
    TupleOrig(Tuple, &'a [u8]),
    TupleReply(Tuple),
    Status(u32),
    ProtoInfo(&'a [u8]),
    Timeout(u32),
    Mark(u32),
    CountersOrig(Counters),
    CountersReply(Counters),
    Id(u32),
    Zone(u16),
    /// Anything else (helper, NAT sequence adjustment, labels, timestamps,
    /// `CTA_USE`, ...), skipped.
    Other,
}

fn be32(what: &str, v: &[u8]) -> Result<u32, DecodeError> {
    fixed::<4>(what, v).map(u32::from_be_bytes)
}

impl<'a> CtAttr<'a> {
    fn parse(nla: &RawNla<'a>) -> Result<Self, DecodeError> {
        let v = nla.value();
        Ok(match nla.kind() {
            CTA_TUPLE_ORIG => CtAttr::TupleOrig(tuple::decode(v)?, v),
            CTA_TUPLE_REPLY => CtAttr::TupleReply(tuple::decode(v)?),
            CTA_STATUS => CtAttr::Status(be32("CTA_STATUS", v)?),
            CTA_PROTOINFO => CtAttr::ProtoInfo(v),
            CTA_TIMEOUT => CtAttr::Timeout(be32("CTA_TIMEOUT", v)?),
            CTA_MARK => CtAttr::Mark(be32("CTA_MARK", v)?),
            CTA_COUNTERS_ORIG => CtAttr::CountersOrig(counters::decode(v)?),
            CTA_COUNTERS_REPLY => CtAttr::CountersReply(counters::decode(v)?),
            CTA_ID => CtAttr::Id(be32("CTA_ID", v)?),
            CTA_ZONE => CtAttr::Zone(u16::from_be_bytes(fixed("CTA_ZONE", v)?)),
            _ => CtAttr::Other,
        })
    }
}

/// Decodes the attributes of an entry of `family`; both tuples are
/// required and must be of that family.
pub(crate) fn decode(family: AddressFamily, attrs: &[u8]) -> Result<Entry, DecodeError> {
    let (mut orig, mut reply) = (None, None);
    let (mut id, mut status, mut timeout, mut mark, mut zone) = (None, 0, None, 0, 0);
    let (mut c_orig, mut c_reply, mut protoinfo) = (None, None, None);
    for nla in RawAttrs::new(attrs) {
        match CtAttr::parse(&nla?)? {
            CtAttr::TupleOrig(t, raw) => orig = Some((t, raw)),
            CtAttr::TupleReply(t) => reply = Some(t),
            CtAttr::Status(s) => status = s,
            CtAttr::ProtoInfo(p) => protoinfo = Some(p.to_vec()),
            CtAttr::Timeout(t) => timeout = Some(t),
            CtAttr::Mark(m) => mark = m,
            CtAttr::CountersOrig(c) => c_orig = Some(c),
            CtAttr::CountersReply(c) => c_reply = Some(c),
            CtAttr::Id(i) => id = Some(i),
            CtAttr::Zone(z) => zone = z,
            CtAttr::Other => {}
        }
    }
    let (orig, raw) = orig.ok_or_else(|| DecodeError::from("entry without CTA_TUPLE_ORIG"))?;
    let reply = reply.ok_or_else(|| DecodeError::from("entry without CTA_TUPLE_REPLY"))?;
    let v4 = family == AddressFamily::Inet;
    if orig.src.is_ipv4() != v4 || reply.src.is_ipv4() != v4 {
        return Err(DecodeError::from(format!(
            "an entry of family {family:?} with a tuple of the other family"
        )));
    }
    let counters = match (c_orig, c_reply) {
        (None, None) => None,
        (o, r) => Some((o.unwrap_or_default(), r.unwrap_or_default())),
    };
    Ok(Entry {
        family,
        orig,
        reply,
        id,
        status,
        timeout,
        mark,
        zone,
        counters,
        protoinfo,
        orig_raw: raw.to_vec(),
    })
}
