//! Netlink framing, pure: writing requests into a send buffer and splitting a
//! received datagram into messages (data, ACK, error with extended ACK, done).
//!
//! The socket layer only moves the bytes; everything about their layout is
//! here.

use netlink_packet_core::Nla;

use super::DecodeError;
use super::attr::{RawAttrs, push_attr};
use super::message::{IpvsCmd, IpvsMessage};

/// `struct nlmsghdr` length.
pub const NLMSG_HDRLEN: usize = 16;
/// `struct genlmsghdr` length.
pub const GENL_HDRLEN: usize = 4;

/// `NLMSG_NOOP`.
pub(crate) const NLMSG_NOOP: u16 = 1;
/// `NLMSG_ERROR` (also carries ACKs).
pub const NLMSG_ERROR: u16 = 2;
/// `NLMSG_DONE`.
pub const NLMSG_DONE: u16 = 3;
/// `NLMSG_OVERRUN`.
pub(crate) const NLMSG_OVERRUN: u16 = 4;
/// The lowest message type a generic-netlink family can have. A request with
/// a type below it is a control message that the kernel ACKs without doing
/// anything, so a request must never be built with an unresolved family id.
pub(crate) const NLMSG_MIN_TYPE: u16 = 0x10;

/// Request flag `NLM_F_REQUEST`.
pub const NLM_F_REQUEST: u16 = 0x1;
/// `NLM_F_MULTI`: part of a multi-part reply.
pub const NLM_F_MULTI: u16 = 0x2;
/// Request flag `NLM_F_ACK`.
pub const NLM_F_ACK: u16 = 0x4;
/// Request flag `NLM_F_DUMP`.
pub const NLM_F_DUMP: u16 = 0x300;
/// Reply flag `NLM_F_DUMP_INTR`: the dumped table changed during the dump.
pub(crate) const NLM_F_DUMP_INTR: u16 = 0x10;
/// Error-message flag: the original request was not copied back in full.
pub(crate) const NLM_F_CAPPED: u16 = 0x100;
/// Error-message flag: extended-ACK attributes follow.
pub(crate) const NLM_F_ACK_TLVS: u16 = 0x200;

/// `NLMSGERR_ATTR_MSG`: a human-readable reason.
const NLMSGERR_ATTR_MSG: u16 = 1;
/// `NLMSGERR_ATTR_OFFS`: offset of the offending attribute in the request.
const NLMSGERR_ATTR_OFFS: u16 = 2;
/// `NLMSGERR_ATTR_MISS_TYPE`: type of a missing required attribute.
const NLMSGERR_ATTR_MISS_TYPE: u16 = 5;

const fn align4(n: usize) -> usize {
    (n + 3) & !3
}

/// Appends one request to `out`: netlink header, generic-netlink header,
/// attributes. Returns the number of bytes written.
///
/// Fails (writing nothing) if `family_id` is not a valid generic-netlink
/// family id: a request with an unresolved id (0) would be ACKed by the kernel
/// without effect.
pub fn encode_request(
    out: &mut Vec<u8>,
    msg: &IpvsMessage,
    family_id: u16,
    seq: u32,
    flags: u16,
) -> Result<usize, EncodeError> {
    let start = begin_request(out, family_id, flags, seq, msg.cmd.to_raw(), msg.version)?;
    for attr in &msg.attrs {
        // Checking the top level suffices: a nested attribute is never
        // longer than the value that holds it.
        let len = push_attr(out, attr);
        if len > usize::from(u16::MAX) {
            out.truncate(start);
            return Err(EncodeError::AttributeTooLarge {
                kind: attr.kind(),
                len,
            });
        }
    }
    end_request(out, start)
}

/// Appends the netlink and generic-netlink headers of a request (with
/// `NLM_F_REQUEST` added to `flags`), its length left for [`end_request`];
/// returns where the message starts. The attributes go between the two
/// calls. This is the one writer of request headers: [`encode_request`] and
/// the controller's family lookup (`ctrl`) use it.
///
/// Fails, writing nothing, for a family id below `NLMSG_MIN_TYPE`.
pub(crate) fn begin_request(
    out: &mut Vec<u8>,
    family_id: u16,
    flags: u16,
    seq: u32,
    cmd: u8,
    version: u8,
) -> Result<usize, EncodeError> {
    if family_id < NLMSG_MIN_TYPE {
        return Err(EncodeError::UnresolvedFamily(family_id));
    }
    Ok(push_request_header(
        out, family_id, flags, seq, cmd, version,
    ))
}

/// The header writer behind [`begin_request`], for callers that checked the
/// family id once for many requests (the sync's write path): appends the
/// netlink and generic-netlink headers with a zero length and returns where
/// the request starts.
#[inline]
pub(crate) fn push_request_header(
    out: &mut Vec<u8>,
    family_id: u16,
    flags: u16,
    seq: u32,
    cmd: u8,
    version: u8,
) -> usize {
    let start = out.len();
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&family_id.to_ne_bytes());
    out.extend_from_slice(&(flags | NLM_F_REQUEST).to_ne_bytes());
    out.extend_from_slice(&seq.to_ne_bytes());
    out.extend_from_slice(&0u32.to_ne_bytes());
    out.extend_from_slice(&[cmd, version, 0, 0]);
    start
}

/// Writes the length of the request that [`begin_request`] started at
/// `start` and returns it. Every attribute is padded to 4 bytes, so the
/// message is too. A message longer than a netlink length can say is
/// removed from `out` and refused.
pub(crate) fn end_request(out: &mut Vec<u8>, start: usize) -> Result<usize, EncodeError> {
    let total = out.len() - start;
    let Ok(len) = u32::try_from(total) else {
        out.truncate(start);
        return Err(EncodeError::TooLarge(total));
    };
    out[start..start + 4].copy_from_slice(&len.to_ne_bytes());
    Ok(total)
}

/// Why a request could not be encoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EncodeError {
    /// The family id was never resolved.
    #[error("generic-netlink family id {0} is not resolved (a request with it would do nothing)")]
    UnresolvedFamily(u16),
    /// The message does not fit a netlink length field.
    #[error("message of {0} bytes is too large for netlink")]
    TooLarge(usize),
    /// A top-level attribute (with everything nested in it) is longer than
    /// the 65,535 bytes an attribute's length field can say.
    #[error("attribute {kind} of {len} bytes is too large for netlink (at most 65535)")]
    AttributeTooLarge {
        /// The attribute's type.
        kind: u16,
        /// Its length with its header.
        len: usize,
    },
}

/// The fixed header of a received netlink message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    /// Total length including the header.
    pub len: u32,
    /// Message type (a family id, or `NLMSG_*`).
    pub kind: u16,
    /// Flags.
    pub flags: u16,
    /// Sequence number.
    pub seq: u32,
    /// Port id of the sender (0 for the kernel).
    pub port: u32,
}

/// An `NLMSG_ERROR` message: an ACK (`code == 0`) or an error with the
/// kernel's extended-ACK details.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct NlError {
    /// Negative errno, or 0 for an ACK.
    pub code: i32,
    /// The kernel's message (`NLMSGERR_ATTR_MSG`), if any.
    pub message: Option<String>,
    /// Offset of the offending attribute in the request, if given.
    pub bad_attr_offset: Option<u32>,
    /// Type of a missing attribute, if given.
    pub missing_attr: Option<u32>,
    /// Sequence number of the request this answers (from the echoed header).
    pub request_seq: u32,
}

impl NlError {
    /// Whether this is a plain ACK.
    pub fn is_ack(&self) -> bool {
        self.code == 0
    }

    /// The positive errno (0 for an ACK).
    pub fn errno(&self) -> i32 {
        self.code.checked_neg().unwrap_or(i32::MAX)
    }
}

/// The body of a received netlink message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrameBody<'a> {
    /// `NLMSG_NOOP`.
    Noop,
    /// `NLMSG_DONE`: end of a dump. Carries the dump's error code (0 on
    /// success; the kernel puts a negative errno here when a dump fails).
    Done(i32),
    /// `NLMSG_OVERRUN`.
    Overrun,
    /// `NLMSG_ERROR`: an ACK or an error.
    Error(NlError),
    /// A family message: the generic-netlink header and attributes.
    Data(&'a [u8]),
}

/// One received netlink message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame<'a> {
    /// The netlink header.
    pub header: FrameHeader,
    /// Its body.
    pub body: FrameBody<'a>,
}

/// Splits a datagram into netlink messages. Stops at the first malformed
/// message with an error (nothing after it can be trusted).
pub fn frames(buf: &[u8]) -> Frames<'_> {
    Frames { buf, failed: false }
}

/// Iterator returned by [`frames`].
#[derive(Debug, Clone)]
pub struct Frames<'a> {
    buf: &'a [u8],
    failed: bool,
}

impl<'a> Iterator for Frames<'a> {
    type Item = Result<Frame<'a>, DecodeError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.buf.is_empty() {
            return None;
        }
        match parse_frame(self.buf) {
            Ok((frame, used)) => {
                self.buf = self.buf.get(used..).unwrap_or(&[]);
                Some(Ok(frame))
            }
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }
}

/// Overwrites the flags of the message that starts `buf` (one written by
/// [`encode_request`] or alike); shorter input is left alone.
pub fn set_flags(buf: &mut [u8], flags: u16) {
    if let Some(f) = buf.get_mut(6..8) {
        f.copy_from_slice(&flags.to_ne_bytes());
    }
}

/// Adds `flags` to the flags of the message that starts `buf`, keeping
/// the ones it has (`NLM_F_CREATE` of a create request, say); shorter
/// input is left alone.
pub(crate) fn add_flags(buf: &mut [u8], flags: u16) {
    if let Some(f) = buf.get_mut(6..8) {
        let had = u16::from_ne_bytes([f[0], f[1]]);
        f.copy_from_slice(&(had | flags).to_ne_bytes());
    }
}

/// The header of the first message of `buf`, even when the rest of the
/// datagram was cut off (a receive buffer too small for it): enough to tell
/// whose answer was lost.
pub(crate) fn first_header(buf: &[u8]) -> Result<FrameHeader, DecodeError> {
    parse_header(buf)
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_ne_bytes([b[at], b[at + 1]])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn parse_header(buf: &[u8]) -> Result<FrameHeader, DecodeError> {
    if buf.len() < NLMSG_HDRLEN {
        return Err(DecodeError::from(format!(
            "netlink header truncated: {} bytes",
            buf.len()
        )));
    }
    Ok(FrameHeader {
        len: u32_at(buf, 0),
        kind: u16_at(buf, 4),
        flags: u16_at(buf, 6),
        seq: u32_at(buf, 8),
        port: u32_at(buf, 12),
    })
}

fn parse_frame(buf: &[u8]) -> Result<(Frame<'_>, usize), DecodeError> {
    let header = parse_header(buf)?;
    let len = header.len as usize;
    if len < NLMSG_HDRLEN || len > buf.len() {
        return Err(DecodeError::from(format!(
            "netlink message length {len} does not fit the {} bytes received",
            buf.len()
        )));
    }
    let payload = &buf[NLMSG_HDRLEN..len];
    let body = match header.kind {
        NLMSG_NOOP => FrameBody::Noop,
        NLMSG_OVERRUN => FrameBody::Overrun,
        NLMSG_DONE => FrameBody::Done(match payload.len() {
            n if n >= 4 => u32_at(payload, 0) as i32,
            _ => 0,
        }),
        NLMSG_ERROR => FrameBody::Error(parse_error(header.flags, payload)?),
        _ => FrameBody::Data(payload),
    };
    Ok((Frame { header, body }, align4(len).min(buf.len())))
}

/// Parses an `NLMSG_ERROR` payload: the error code, the echoed request header
/// (capped or whole), then extended-ACK attributes if flagged.
fn parse_error(flags: u16, payload: &[u8]) -> Result<NlError, DecodeError> {
    if payload.len() < 4 + NLMSG_HDRLEN {
        return Err(DecodeError::from(format!(
            "netlink error message truncated: {} bytes",
            payload.len()
        )));
    }
    let mut err = NlError {
        code: u32_at(payload, 0) as i32,
        request_seq: u32_at(payload, 4 + 8),
        ..NlError::default()
    };
    if flags & NLM_F_ACK_TLVS == 0 {
        return Ok(err);
    }
    let echoed = if flags & NLM_F_CAPPED != 0 {
        NLMSG_HDRLEN
    } else {
        align4(u32_at(payload, 4) as usize)
    };
    let tlvs = payload.get(4 + echoed..).unwrap_or(&[]);
    for nla in RawAttrs::new(tlvs) {
        let nla = nla?;
        let value = nla.value();
        match nla.kind() {
            NLMSGERR_ATTR_MSG => err.message = Some(super::attr::parse_cstr(value)),
            NLMSGERR_ATTR_OFFS if value.len() == 4 => err.bad_attr_offset = Some(u32_at(value, 0)),
            NLMSGERR_ATTR_MISS_TYPE if value.len() == 4 => {
                err.missing_attr = Some(u32_at(value, 0))
            }
            _ => {}
        }
    }
    Ok(err)
}

/// Parses a family message body (generic-netlink header + attributes).
pub fn decode_message(data: &[u8]) -> Result<IpvsMessage, DecodeError> {
    if data.len() < GENL_HDRLEN {
        return Err(DecodeError::from(format!(
            "generic-netlink header truncated: {} bytes",
            data.len()
        )));
    }
    IpvsMessage::parse_attrs(IpvsCmd::from_raw(data[0]), data[1], &data[GENL_HDRLEN..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_unresolved_family() {
        let mut out = Vec::new();
        let msg = IpvsMessage::new(IpvsCmd::Flush, vec![]);
        assert_eq!(
            encode_request(&mut out, &msg, 0, 1, NLM_F_ACK),
            Err(EncodeError::UnresolvedFamily(0))
        );
        assert!(out.is_empty());
    }

    /// The two public ways out, `encode_request` and `IpvsMessage`'s
    /// `Emitable`, write the same attribute bytes, for every kind of
    /// top-level attribute and for nests that hold nests; and decoding them
    /// gives the message back.
    #[test]
    fn encode_request_and_emitable_agree() {
        use crate::codec::attr::{IpvsAttr, ServiceAttr, StatValue, StatsAttr};
        use crate::codec::request;
        use crate::model::{
            DaemonRole, RealServer, ServiceKey, SyncDaemon, Timeouts, VirtualServer,
        };
        let key = ServiceKey::tcp("10.96.0.1:80".parse().unwrap());
        let v6 = ServiceKey::udp("[2001:db8::1]:53".parse().unwrap());
        let rs = RealServer::new("10.244.0.1:8080".parse().unwrap()).with_weight(3);
        let mut with_stats = request::new_service(&VirtualServer::new(key)).unwrap();
        if let Some(IpvsAttr::Service(v)) = with_stats.attrs.first_mut() {
            v.push(ServiceAttr::Stats(vec![
                StatsAttr::Conns(StatValue::U32(7)),
                StatsAttr::InBytes(StatValue::U32(9)),
            ]));
            v.push(ServiceAttr::Stats64(vec![StatsAttr::Conns(
                StatValue::U64(7),
            )]));
        }
        let messages = [
            request::new_service(&VirtualServer::new(v6).with_persistence(300)).unwrap(),
            request::new_dest(&key, &rs).unwrap(),
            request::dump_dests(&key).unwrap(),
            request::get_service(&v6).unwrap(),
            request::new_daemon(&SyncDaemon::new(DaemonRole::Backup, "eth0")).unwrap(),
            request::set_config(&Timeouts {
                tcp: 900,
                tcp_fin: 120,
                udp: 300,
            })
            .unwrap(),
            request::flush(),
            with_stats,
        ];
        for msg in messages {
            let mut out = Vec::new();
            let n = encode_request(&mut out, &msg, 0x24, 9, NLM_F_ACK).unwrap();
            let body = netlink_packet_core::Emitable::buffer_len(&msg);
            let mut reference = vec![0; body];
            netlink_packet_core::Emitable::emit(&msg, &mut reference);
            assert_eq!(n, NLMSG_HDRLEN + GENL_HDRLEN + body, "{msg:?}");
            assert_eq!(out[..4], (n as u32).to_ne_bytes(), "{msg:?}");
            assert_eq!(out[NLMSG_HDRLEN + GENL_HDRLEN..], reference[..], "{msg:?}");
            assert_eq!(decode_message(&out[NLMSG_HDRLEN..]).unwrap(), msg);
        }
    }

    /// A NEW_DEST request, byte for byte as the kernel's `ip_vs.h` lays it
    /// out (x86-64 byte order; ports big-endian): re-decoding gives the
    /// message back.
    #[cfg(target_endian = "little")]
    #[test]
    fn new_dest_request_bytes() {
        use crate::codec::request;
        use crate::model::{RealServer, ServiceKey};
        let key = ServiceKey::tcp("10.96.0.1:80".parse().unwrap());
        let rs = RealServer::new("10.244.0.1:8080".parse().unwrap()).with_weight(3);
        let msg = request::new_dest(&key, &rs).unwrap();
        let mut out = Vec::new();
        assert_eq!(encode_request(&mut out, &msg, 0x24, 9, NLM_F_ACK), Ok(140));
        #[rustfmt::skip]
        let want: &[u8] = &[
            140, 0, 0, 0, 0x24, 0, 5, 0, 9, 0, 0, 0, 0, 0, 0, 0, // nlmsghdr
            5, 1, 0, 0, // IPVS_CMD_NEW_DEST, version 1
            48, 0, 1, 0, // SERVICE
            6, 0, 1, 0, 2, 0, 0, 0, // AF_INET
            6, 0, 2, 0, 6, 0, 0, 0, // IPPROTO_TCP
            20, 0, 3, 0, 10, 96, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, // ADDR
            6, 0, 4, 0, 0, 80, 0, 0, // PORT 80
            72, 0, 2, 0, // DEST
            20, 0, 1, 0, 10, 244, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, // ADDR
            6, 0, 2, 0, 0x1f, 0x90, 0, 0, // PORT 8080
            8, 0, 3, 0, 3, 0, 0, 0, // FWD_METHOD direct routing (the default)
            8, 0, 4, 0, 3, 0, 0, 0, // WEIGHT 3
            8, 0, 5, 0, 0, 0, 0, 0, // U_THRESH
            8, 0, 6, 0, 0, 0, 0, 0, // L_THRESH
            6, 0, 11, 0, 2, 0, 0, 0, // ADDR_FAMILY AF_INET
        ];
        assert_eq!(out, want);
        assert_eq!(decode_message(&out[NLMSG_HDRLEN..]).unwrap(), msg);
    }

    #[test]
    fn encodes_header() {
        let mut out = Vec::new();
        let msg = IpvsMessage::new(IpvsCmd::Flush, vec![]);
        let n = encode_request(&mut out, &msg, 0x24, 7, NLM_F_ACK).unwrap();
        assert_eq!(n, 20);
        assert_eq!(
            out,
            [
                20, 0, 0, 0, 0x24, 0, 5, 0, 7, 0, 0, 0, 0, 0, 0, 0, 17, 1, 0, 0
            ]
        );
    }

    #[test]
    fn parses_ack_and_capped_error_with_message() {
        // NLMSG_ERROR, flags CAPPED|ACK_TLVS, code -EINVAL, echoed header, MSG "bad".
        let mut b = Vec::new();
        let total = 16 + 4 + 16 + 8;
        b.extend_from_slice(&(total as u32).to_ne_bytes());
        b.extend_from_slice(&NLMSG_ERROR.to_ne_bytes());
        b.extend_from_slice(&(NLM_F_CAPPED | NLM_F_ACK_TLVS).to_ne_bytes());
        b.extend_from_slice(&9u32.to_ne_bytes());
        b.extend_from_slice(&0u32.to_ne_bytes());
        b.extend_from_slice(&(-22i32).to_ne_bytes());
        let mut echoed = [0u8; 16];
        echoed[8..12].copy_from_slice(&9u32.to_ne_bytes());
        b.extend_from_slice(&echoed);
        b.extend_from_slice(&[8, 0, 1, 0, b'b', b'a', b'd', 0]);
        let f: Vec<_> = frames(&b).collect::<Result<_, _>>().unwrap();
        let FrameBody::Error(e) = &f[0].body else {
            panic!("not an error")
        };
        assert_eq!(e.errno(), 22);
        assert_eq!(e.message.as_deref(), Some("bad"));
        assert_eq!(e.request_seq, 9);
    }

    #[test]
    fn refuses_attributes_longer_than_their_length_field() {
        // 16-bit attribute lengths: a longer attribute used to panic (with
        // overflow checks) or be written with a truncated length, making a
        // request that says something else (tests/fuzz/regressions/roundtrip/).
        use crate::codec::attr::{IpvsAttr, ServiceAttr};
        let long = IpvsMessage::new(
            IpvsCmd::NewService,
            vec![IpvsAttr::Service(vec![ServiceAttr::SchedName(
                "x".repeat(70_000),
            )])],
        );
        let mut out = Vec::new();
        assert!(matches!(
            encode_request(&mut out, &long, 0x24, 1, NLM_F_ACK),
            Err(EncodeError::AttributeTooLarge {
                kind: 1,
                len: 70_012
            })
        ));
        assert!(out.is_empty());
        // The longest name that fits (65,523 bytes, a NUL, two headers:
        // 65,532) is encoded and decodes back.
        let fits = IpvsMessage::new(
            IpvsCmd::NewService,
            vec![IpvsAttr::Service(vec![ServiceAttr::SchedName(
                "x".repeat(65_523),
            )])],
        );
        encode_request(&mut out, &fits, 0x24, 1, NLM_F_ACK).unwrap();
        let f = frames(&out).next().unwrap().unwrap();
        let FrameBody::Data(body) = f.body else {
            panic!("not data")
        };
        assert_eq!(decode_message(body).unwrap(), fits);
    }

    #[test]
    fn truncated_input_is_an_error() {
        for n in 0..20 {
            let b = vec![0xffu8; n];
            for f in frames(&b) {
                let _ = f;
            }
        }
        let mut b = vec![0u8; 16];
        b[0] = 200;
        assert!(frames(&b).next().unwrap().is_err());
    }
}
