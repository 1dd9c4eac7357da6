//! ctnetlink (conntrack over nfnetlink, `NETLINK_NETFILTER`), sans-IO: the
//! dump, delete and create requests of [`crate::conntrack`] and the decoder
//! of the entries the kernel reports, one attribute space per file
//! (`entry.rs` the top level, `tuple.rs`, `ip.rs`, `proto.rs`, `counters.rs`),
//! unknown attributes skipped as `Other`. Nothing here panics on any input.
//!
//! Layout of every message: the netlink header, then `struct nfgenmsg`
//! (address family, version 0, resource id 0; the message type is
//! `NFNL_SUBSYS_CTNETLINK << 8 | IPCTNL_MSG_CT_*`), then attributes.
//! Attribute headers are in host byte order like all netlink; ctnetlink's
//! values (addresses, ports, ids, status, timeouts, marks, zones, counters)
//! are in network byte order. The kernel sets `NLA_F_NESTED` on its nests
//! (the reader ignores the flag); the requests set it too.
//!
//! Not netlink-packet-netfilter: its conntrack messages (0.4) know tuples,
//! status, timeout and mark but not `CTA_ID`, which a delete must carry to
//! remove only the entry that was read, nor `CTA_ZONE`; and it would bring
//! netlink-packet-core's message framing beside the crate's own, when every
//! request here goes through the crate's pipeline like IPVS's.

pub(crate) mod counters;
pub(crate) mod entry;
pub(crate) mod ip;
pub(crate) mod proto;
pub(crate) mod tuple;

use crate::codec::DecodeError;
use crate::codec::attr::{begin_nest, end_nest};
use crate::codec::frame::{NLM_F_REQUEST, NLMSG_HDRLEN};
use crate::model::AddressFamily;

pub use counters::Counters;
pub use entry::Entry;
pub(crate) use entry::NewEntry;
pub use tuple::Tuple;

/// `NFNL_SUBSYS_CTNETLINK`.
pub(crate) const NFNL_SUBSYS_CTNETLINK: u16 = 1;
/// `IPCTNL_MSG_CT_NEW`: create (request) and every entry of a dump (answer).
pub(crate) const IPCTNL_MSG_CT_NEW: u16 = 0;
/// `IPCTNL_MSG_CT_GET`: sent as a dump.
pub(crate) const IPCTNL_MSG_CT_GET: u16 = 1;
/// `IPCTNL_MSG_CT_DELETE`.
pub(crate) const IPCTNL_MSG_CT_DELETE: u16 = 2;
/// The netlink message type of an entry in a dump's answer.
pub(crate) const CT_NEW_TYPE: u16 = NFNL_SUBSYS_CTNETLINK << 8 | IPCTNL_MSG_CT_NEW;
/// `sizeof(struct nfgenmsg)`.
const NFGENMSG_LEN: usize = 4;
/// `NFNETLINK_V0`.
const NFNETLINK_V0: u8 = 0;
/// `NLA_F_NESTED`.
const NLA_F_NESTED: u16 = 1 << 15;
/// `NLM_F_CREATE`, `NLM_F_EXCL`.
const NLM_F_CREATE: u16 = 0x400;
const NLM_F_EXCL: u16 = 0x200;
/// `AF_UNSPEC`, `AF_INET`, `AF_INET6`.
pub(crate) const AF_UNSPEC: u8 = 0;
const AF_INET: u8 = 2;
const AF_INET6: u8 = 10;

/// One ctnetlink request.
#[derive(Debug, Clone, Copy)]
pub(crate) enum CtRequest<'a> {
    /// `IPCTNL_MSG_CT_GET` as a dump of the entries of one family
    /// (`AF_UNSPEC`: all).
    Dump(u8),
    /// `IPCTNL_MSG_CT_DELETE` of exactly `entry`: its original tuple as
    /// read, its id, and its zone when not 0.
    Delete(&'a Entry),
    /// `IPCTNL_MSG_CT_NEW` with `NLM_F_CREATE | NLM_F_EXCL`.
    #[cfg_attr(not(feature = "unstable"), allow(dead_code))] // used through `unstable`
    New(&'a NewEntry),
}

impl CtRequest<'_> {
    /// Appends the request as sequence number `seq` with `flags` (its
    /// pipeline kind's) and `NLM_F_REQUEST` (a create adds `NLM_F_CREATE |
    /// NLM_F_EXCL`).
    pub(crate) fn write(&self, out: &mut Vec<u8>, seq: u32, flags: u16) {
        let (msg, family, extra) = match self {
            CtRequest::Dump(family) => (IPCTNL_MSG_CT_GET, *family, 0),
            CtRequest::Delete(e) => (IPCTNL_MSG_CT_DELETE, family_number(e.family), 0),
            CtRequest::New(n) => (
                IPCTNL_MSG_CT_NEW,
                if n.orig.src.is_ipv4() {
                    AF_INET
                } else {
                    AF_INET6
                },
                NLM_F_CREATE | NLM_F_EXCL,
            ),
        };
        let start = out.len();
        out.extend_from_slice(&[0; 4]);
        out.extend_from_slice(&(NFNL_SUBSYS_CTNETLINK << 8 | msg).to_ne_bytes());
        out.extend_from_slice(&(flags | NLM_F_REQUEST | extra).to_ne_bytes());
        out.extend_from_slice(&seq.to_ne_bytes());
        out.extend_from_slice(&0u32.to_ne_bytes());
        out.extend_from_slice(&[family, NFNETLINK_V0, 0, 0]);
        match self {
            CtRequest::Dump(_) => {}
            CtRequest::Delete(e) => {
                let at = begin(out, entry::CTA_TUPLE_ORIG);
                out.extend_from_slice(&e.orig_raw);
                pad(out);
                end(out, at);
                if let Some(id) = e.id {
                    put(out, entry::CTA_ID, &id.to_be_bytes());
                }
                if e.zone != 0 {
                    put(out, entry::CTA_ZONE, &e.zone.to_be_bytes());
                }
            }
            CtRequest::New(n) => {
                tuple::write(out, entry::CTA_TUPLE_ORIG, &n.orig);
                tuple::write(out, entry::CTA_TUPLE_REPLY, &n.reply);
                put(out, entry::CTA_TIMEOUT, &n.timeout.to_be_bytes());
            }
        }
        let len = (out.len() - start) as u32;
        out[start..start + 4].copy_from_slice(&len.to_ne_bytes());
    }
}

fn family_number(family: AddressFamily) -> u8 {
    match family {
        AddressFamily::Inet => AF_INET,
        AddressFamily::Inet6 => AF_INET6,
    }
}

/// Appends a dump request (`IPCTNL_MSG_CT_GET` with `flags`, which should
/// hold `NLM_F_DUMP`) for the entries of `family` (`None`: every family) as
/// sequence number `seq`: the request [`crate::conntrack`] sends first.
pub fn encode_dump(out: &mut Vec<u8>, family: Option<AddressFamily>, seq: u32, flags: u16) {
    let family = family.map_or(AF_UNSPEC, family_number);
    CtRequest::Dump(family).write(out, seq, flags);
}

/// Appends the delete request of exactly `entry` (`IPCTNL_MSG_CT_DELETE`:
/// its original tuple as the kernel sent it, its `CTA_ID`, its `CTA_ZONE`
/// when not 0) as sequence number `seq` with `flags`: the request
/// [`crate::conntrack`] sends for each entry it deletes.
pub fn encode_delete(out: &mut Vec<u8>, entry: &Entry, seq: u32, flags: u16) {
    CtRequest::Delete(entry).write(out, seq, flags);
}

/// Decodes one data message of a ctnetlink answer (its type and the
/// payload after the netlink header): `None` for messages that are not an
/// entry, or entries of families other than IPv4 and IPv6.
pub(crate) fn decode(kind: u16, payload: &[u8]) -> Result<Option<Entry>, DecodeError> {
    if kind != CT_NEW_TYPE {
        return Ok(None);
    }
    let header: [u8; NFGENMSG_LEN] =
        crate::codec::route::fixed_header("ctnetlink message", payload)?;
    let family = match header[0] {
        AF_INET => AddressFamily::Inet,
        AF_INET6 => AddressFamily::Inet6,
        _ => return Ok(None),
    };
    entry::decode(family, payload.get(NFGENMSG_LEN..).unwrap_or_default()).map(Some)
}

/// Decodes every entry of a buffer of netlink messages (a datagram of a
/// dump's answer, or several): the form the fuzz target and the fixture
/// tests read. Messages that are not entries are skipped; the first
/// malformed one is the error.
pub fn decode_datagram(buf: &[u8]) -> Result<Vec<Entry>, DecodeError> {
    let mut entries = Vec::new();
    for frame in crate::codec::frame::frames(buf) {
        let frame = frame?;
        if let crate::codec::frame::FrameBody::Data(payload) = frame.body
            && let Some(e) = decode(frame.header.kind, payload)?
        {
            entries.push(e);
        }
    }
    Ok(entries)
}

/// Appends an attribute with `value`, padded.
pub(crate) fn put(out: &mut Vec<u8>, kind: u16, value: &[u8]) {
    let len = 4 + value.len();
    out.extend_from_slice(&(len as u16).to_ne_bytes());
    out.extend_from_slice(&kind.to_ne_bytes());
    out.extend_from_slice(value);
    pad(out);
}

/// Starts a nest of `kind`, flagged `NLA_F_NESTED`.
pub(crate) fn begin(out: &mut Vec<u8>, kind: u16) -> usize {
    begin_nest(out, kind | NLA_F_NESTED)
}

/// Ends the nest started at `at`.
pub(crate) fn end(out: &mut [u8], at: usize) {
    end_nest(out, at);
}

fn pad(out: &mut Vec<u8>) {
    out.resize(out.len().next_multiple_of(4), 0);
}

const _: () = assert!(NLMSG_HDRLEN == 16);
