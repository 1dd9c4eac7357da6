//! Attribute framing, both ways: the one reader ([`RawAttrs`]) and the one
//! writer ([`push_attr`], [`emit_all`]) of the `{length, type, value,
//! padding}` layout every netlink attribute has. The attribute enums decide
//! what a value means; this file decides where it sits.

use netlink_packet_core::Nla;

use crate::codec::DecodeError;

/// Bytes of an attribute header (length and type).
pub(crate) const NLA_HEADER: usize = 4;

/// One attribute as found in a buffer: its type (with the flag bits) and
/// value, borrowed.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RawNla<'a> {
    raw_kind: u16,
    value: &'a [u8],
}

impl<'a> RawNla<'a> {
    /// The type with `NLA_F_NESTED` and `NLA_F_NET_BYTEORDER` as sent.
    #[inline]
    pub(crate) fn raw_kind(&self) -> u16 {
        self.raw_kind
    }

    /// The type without the `NESTED` and `NET_BYTEORDER` bits.
    #[inline]
    pub(crate) fn kind(&self) -> u16 {
        self.raw_kind & crate::codec::consts::NLA_TYPE_MASK
    }

    /// The value, without header or padding.
    #[inline]
    pub(crate) fn value(&self) -> &'a [u8] {
        self.value
    }
}

/// Iterates the attributes of a buffer. A length field that is too short or
/// runs past the buffer is an error, after which iteration stops; missing
/// padding after the last attribute is accepted, as the kernel does.
///
/// Every decoder reads attributes through this iterator: the attribute
/// enums, the streaming reply decoders, extended-ACK errors and the
/// generic-netlink controller's replies.
pub(crate) struct RawAttrs<'a> {
    buf: &'a [u8],
}

impl<'a> RawAttrs<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        RawAttrs { buf }
    }
}

impl<'a> Iterator for RawAttrs<'a> {
    type Item = Result<RawNla<'a>, DecodeError>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        let b = self.buf;
        if b.is_empty() {
            return None;
        }
        let header = b.get(..NLA_HEADER).map(|h| {
            (
                usize::from(u16::from_ne_bytes([h[0], h[1]])),
                u16::from_ne_bytes([h[2], h[3]]),
            )
        });
        match header {
            Some((len, raw_kind)) if len >= NLA_HEADER && len <= b.len() => {
                self.buf = b.get(padded(len)..).unwrap_or(&[]);
                Some(Ok(RawNla {
                    raw_kind,
                    value: &b[NLA_HEADER..len],
                }))
            }
            _ => {
                self.buf = &[];
                Some(Err(DecodeError::from(format!(
                    "malformed attribute: {} bytes left, length field {}",
                    b.len(),
                    b.get(..2).map_or(0, |l| u16::from_ne_bytes([l[0], l[1]]))
                ))))
            }
        }
    }
}

/// `n` rounded up to the 4-byte alignment of netlink attributes (`n` is
/// at most a buffer's length, far from overflowing).
#[inline]
fn padded(n: usize) -> usize {
    (n + 3) & !3
}

/// Writes the header of an attribute of type `kind` whose length field says
/// `len` (header included) at the start of `buf`. The type is written as
/// given, flag bits included, so an attribute parsed with both
/// `NLA_F_NESTED` and `NLA_F_NET_BYTEORDER` is written back with both. The
/// length is cut to 16 bits like any netlink length: callers that can be
/// given longer values refuse them (see `frame::encode_request`).
#[inline]
fn write_header(buf: &mut [u8], len: usize, kind: u16) {
    buf[..2].copy_from_slice(&(len as u16).to_ne_bytes());
    buf[2..NLA_HEADER].copy_from_slice(&kind.to_ne_bytes());
}

/// How an attribute's value is appended to a send buffer, for
/// [`push_attr`]. The default writes [`Nla::value_len`] bytes with
/// [`Nla::emit_value`]; a nest appends its members one by one instead, so
/// that no member's length is computed twice (10% of the cost of encoding a
/// NEW_DEST request: `benches/codec.rs`, see docs/performance.md).
pub(crate) trait PushValue: Nla {
    /// Appends the value, without header or padding.
    #[inline]
    fn push_value(&self, out: &mut Vec<u8>) {
        push_whole_value(self, out);
    }

    /// The value's length when it is written whole (the default), so that
    /// [`push_attr`] makes room for header, value and padding at once;
    /// `None` for a nest that appends its members instead.
    #[inline]
    fn whole_len(&self) -> Option<usize> {
        Some(self.value_len())
    }

    /// Whether dropping the value frees memory. A writer that is done with
    /// a value it owns drops it only then: where the variant is known (the
    /// request writers, inlined), the answer is a constant and the drop of
    /// a plain number is gone; otherwise the enum's whole drop is a call
    /// per attribute. An enum's answer is an exhaustive match, so that a
    /// new variant has to say.
    #[inline]
    fn owns_heap(&self) -> bool {
        true
    }
}

/// [`PushValue`]'s default: the value written whole by `emit_value`.
#[inline]
pub(crate) fn push_whole_value<T: Nla + ?Sized>(attr: &T, out: &mut Vec<u8>) {
    let at = out.len();
    out.resize(at + attr.value_len(), 0);
    attr.emit_value(&mut out[at..]);
}

/// Appends one attribute, header and padding included; returns its length
/// without the padding (what its length field says, before the cut to 16
/// bits). The same bytes as [`emit_all`] writes for it.
#[inline(always)]
pub(crate) fn push_attr<T: PushValue>(out: &mut Vec<u8>, attr: &T) -> usize {
    let at = out.len();
    if let Some(value_len) = attr.whole_len() {
        let len = NLA_HEADER + value_len;
        out.resize(at + padded(len), 0);
        write_header(&mut out[at..], len, attr.kind());
        attr.emit_value(&mut out[at + NLA_HEADER..at + len]);
        return len;
    }
    out.extend_from_slice(&[0; NLA_HEADER]);
    attr.push_value(out);
    let len = out.len() - at;
    write_header(&mut out[at..], len, attr.kind());
    out.resize(at + padded(len), 0);
    len
}

/// Starts a nested attribute of type `kind` whose members the caller
/// appends (with [`push_attr`] or the `request::write_*` functions);
/// [`end_nest`] writes its length. Members are padded, so the nest is too.
#[inline]
pub(crate) fn begin_nest(out: &mut Vec<u8>, kind: u16) -> usize {
    let at = out.len();
    out.extend_from_slice(&[0; NLA_HEADER]);
    write_header(&mut out[at..], NLA_HEADER, kind);
    at
}

/// Writes the length of the nest [`begin_nest`] started at `at`.
#[inline]
pub(crate) fn end_nest(out: &mut [u8], at: usize) {
    let len = out.len() - at;
    out[at..at + 2].copy_from_slice(&(len as u16).to_ne_bytes());
}

/// Writes a list of attributes into `buf`, which is exactly [`len_all`]
/// bytes long (a nest's value, or a message's attributes): the writer behind
/// the attribute enums' `Nla::emit_value` and `IpvsMessage`'s `Emitable`.
pub(crate) fn emit_all<T: Nla>(attrs: &[T], buf: &mut [u8]) {
    let mut at = 0;
    for a in attrs {
        let value_len = a.value_len();
        let end = NLA_HEADER + value_len;
        let buf = &mut buf[at..];
        write_header(buf, end, a.kind());
        a.emit_value(&mut buf[NLA_HEADER..end]);
        at += padded(end);
        buf[end..padded(end)].fill(0);
    }
}

/// The total emitted length of a list of attributes.
pub(crate) fn len_all<T: Nla>(attrs: &[T]) -> usize {
    attrs
        .iter()
        .map(|a| NLA_HEADER + padded(a.value_len()))
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::attr::UnknownAttr;

    /// Length, type as given, value, zeroed padding; parsed back the same.
    #[test]
    fn writes_and_reads_the_attribute_layout() {
        let attrs = [
            UnknownAttr::new(0x0001, vec![7]),
            UnknownAttr::new(0xc002, vec![1, 2, 3, 4]),
            UnknownAttr::new(0x0003, vec![]),
        ];
        let mut out = Vec::new();
        assert_eq!(push_attr(&mut out, &attrs[0]), 5);
        let mut rest = vec![0xff; len_all(&attrs[1..])];
        emit_all(&attrs[1..], &mut rest);
        out.extend_from_slice(&rest);
        assert_eq!(
            out,
            [
                5, 0, 1, 0, 7, 0, 0, 0, 8, 0, 2, 0xc0, 1, 2, 3, 4, 4, 0, 3, 0
            ]
        );
        let back: Vec<_> = RawAttrs::new(&out)
            .map(|a| a.map(|a| UnknownAttr::new(a.raw_kind(), a.value().to_vec())))
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(back, attrs);
    }

    #[test]
    fn a_length_past_the_buffer_ends_iteration_with_an_error() {
        let b = [8, 0, 1, 0, 0, 0];
        let mut it = RawAttrs::new(&b);
        assert!(it.next().unwrap().is_err());
        assert!(it.next().is_none());
        // Missing padding after the last attribute is accepted.
        let b = [5, 0, 1, 0, 9];
        let a = RawAttrs::new(&b).next().unwrap().unwrap();
        assert_eq!((a.kind(), a.value()), (1, &[9u8][..]));
    }
}
