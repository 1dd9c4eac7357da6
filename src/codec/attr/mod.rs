//! Attribute enums: the wire layer, lossless.
//!
//! Each enum mirrors one attribute space of `include/uapi/linux/ip_vs.h`.
//! Parsing keeps every attribute, known or not (unknown ones as `Other`), and
//! emitting writes them back byte for byte, so a kernel reply decoded and
//! re-encoded gives the same bytes. Converting to and from the typed model
//! happens in [`super::request`] and [`super::reply`], not here.
//!
//! Where a value is encoded is decided here and only here: this is the one
//! place that knows that ports are big-endian and flags a `{flags, mask}` pair.

mod daemon;
mod dest;
mod service;
mod stats;
mod top;

pub use daemon::DaemonAttr;
pub use dest::DestAttr;
pub(crate) use dest::LeanDestAttr;
pub(crate) use service::LeanServiceAttr;
pub use service::ServiceAttr;
pub(crate) use stats::for_each_counter;
pub use stats::{StatValue, StatsAttr};
pub use top::IpvsAttr;

use crate::codec::DecodeError;

/// An address attribute as carried on the wire: up to 16 bytes (the kernel
/// sends the whole `union nf_inet_addr`, 16 bytes, even for IPv4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RawAddr {
    bytes: [u8; 16],
    len: u8,
}

impl RawAddr {
    /// Wraps up to 16 bytes.
    pub fn new(value: &[u8]) -> Result<Self, DecodeError> {
        if value.len() > 16 {
            return Err(DecodeError::from(format!(
                "address attribute of {} bytes (at most 16)",
                value.len()
            )));
        }
        let mut bytes = [0u8; 16];
        bytes[..value.len()].copy_from_slice(value);
        Ok(RawAddr {
            bytes,
            len: value.len() as u8,
        })
    }

    /// The bytes as sent.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }

    /// Encodes an IP address the way ipvsadm and the kernel do: 16 bytes,
    /// IPv4 in the first four.
    pub fn from_ip(ip: std::net::IpAddr) -> Self {
        let mut bytes = [0u8; 16];
        match ip {
            std::net::IpAddr::V4(v4) => bytes[..4].copy_from_slice(&v4.octets()),
            std::net::IpAddr::V6(v6) => bytes = v6.octets(),
        }
        RawAddr { bytes, len: 16 }
    }

    /// Reads the address for a family: IPv4 needs at least 4 bytes, IPv6 16.
    pub fn to_ip(
        &self,
        family: crate::model::AddressFamily,
    ) -> Result<std::net::IpAddr, DecodeError> {
        use crate::model::AddressFamily;
        let b = self.as_bytes();
        match family {
            AddressFamily::Inet if b.len() >= 4 => {
                Ok(std::net::Ipv4Addr::new(b[0], b[1], b[2], b[3]).into())
            }
            AddressFamily::Inet6 if b.len() == 16 => {
                Ok(std::net::Ipv6Addr::from(self.bytes).into())
            }
            _ => Err(DecodeError::from(format!(
                "{} address attribute of {} bytes",
                family,
                b.len()
            ))),
        }
    }
}

/// One attribute as found in a buffer: its type (with the flag bits) and
/// value. Cheaper than netlink-packet-core's `NlaBuffer` on the decode path,
/// which dominates the cost of reading large dumps.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RawNla<'a> {
    raw_kind: u16,
    value: &'a [u8],
}

/// Read access to an attribute ([`RawNla`]), so each attribute enum has one
/// parser whatever holds the bytes.
pub(crate) trait AttrView<'a> {
    /// The type with `NLA_F_NESTED` and `NLA_F_NET_BYTEORDER` as sent.
    fn raw_kind(&self) -> u16;
    /// The value, without header or padding, borrowed from the buffer.
    fn value(&self) -> &'a [u8];
}

impl<'a> AttrView<'a> for RawNla<'a> {
    fn raw_kind(&self) -> u16 {
        self.raw_kind
    }
    fn value(&self) -> &'a [u8] {
        self.value
    }
}

/// Iterates the attributes of a buffer. A length field that is too short or
/// runs past the buffer is an error, after which iteration stops; missing
/// padding after the last attribute is accepted, as the kernel does.
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
        let header = b.get(..4).map(|h| {
            (
                usize::from(u16::from_ne_bytes([h[0], h[1]])),
                u16::from_ne_bytes([h[2], h[3]]),
            )
        });
        match header {
            Some((len, raw_kind)) if len >= 4 && len <= b.len() => {
                self.buf = b.get((len + 3) & !3..).unwrap_or(&[]);
                Some(Ok(RawNla {
                    raw_kind,
                    value: &b[4..len],
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

/// An attribute enum's parser, over any [`AttrView`].
pub(crate) trait ParseAttr: Sized {
    /// Parses one attribute.
    fn parse_view<'v, V: AttrView<'v>>(nla: &V) -> Result<Self, DecodeError>;
}

/// Iterates the attributes in `buf`, parsing each. A truncated or malformed
/// attribute is an error, never a panic.
pub(crate) fn parse_all<T: ParseAttr>(buf: &[u8]) -> Result<Vec<T>, DecodeError> {
    // Every attribute takes at least 4 bytes: this bounds the allocation by
    // the input, whatever the length fields say.
    let mut out = Vec::with_capacity(buf.len() / 8);
    for nla in RawAttrs::new(buf) {
        out.push(T::parse_view(&nla?)?);
    }
    Ok(out)
}

/// The attribute type without the `NESTED` and `NET_BYTEORDER` bits.
pub(crate) fn kind<'v, V: AttrView<'v>>(nla: &V) -> u16 {
    nla.raw_kind() & super::consts::NLA_TYPE_MASK
}

/// An attribute this crate does not interpret, kept for re-emission with
/// its type bits as sent.
pub(crate) fn other<'v, V: AttrView<'v>>(nla: &V) -> Result<UnknownAttr, DecodeError> {
    Ok(UnknownAttr::new(nla.raw_kind(), nla.value().to_vec()))
}

/// An attribute this crate does not interpret (the `Other` variant of every
/// attribute enum): its type as sent, flag bits included, and its value.
/// Emitting it writes the same bytes back.
///
/// ```
/// use ipvsctl::codec::attr::UnknownAttr;
/// let a = UnknownAttr::new(0x0063, vec![1, 2]);
/// assert_eq!((a.kind(), a.value()), (0x0063, &[1u8, 2][..]));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct UnknownAttr {
    kind: u16,
    value: Vec<u8>,
}

impl UnknownAttr {
    /// An attribute of type `kind` (with its `NLA_F_NESTED` and
    /// `NLA_F_NET_BYTEORDER` bits) and value `value`.
    pub fn new(kind: u16, value: Vec<u8>) -> Self {
        UnknownAttr { kind, value }
    }

    /// The type as sent, flag bits included.
    pub fn kind(&self) -> u16 {
        self.kind
    }

    /// The value, without header or padding.
    pub fn value(&self) -> &[u8] {
        &self.value
    }
}

impl netlink_packet_core::Nla for UnknownAttr {
    fn value_len(&self) -> usize {
        self.value.len()
    }
    fn kind(&self) -> u16 {
        self.kind
    }
    fn emit_value(&self, buffer: &mut [u8]) {
        buffer.copy_from_slice(&self.value);
    }
}

/// Emits a list of attributes into `buf` (which is exactly their length).
pub(crate) fn emit_all<T: netlink_packet_core::Nla>(attrs: &[T], buf: &mut [u8]) {
    netlink_packet_core::Emitable::emit(&attrs, buf);
    // netlink-packet-core drops `NLA_F_NET_BYTEORDER` from a type that also
    // has `NLA_F_NESTED` (only an `Other` attribute can have both): write
    // such types back as they were parsed.
    const BOTH: u16 = netlink_packet_core::NLA_F_NESTED | netlink_packet_core::NLA_F_NET_BYTEORDER;
    if !attrs.iter().any(|a| a.kind() & BOTH == BOTH) {
        return;
    }
    let mut at = 0;
    for a in attrs {
        if a.kind() & BOTH == BOTH
            && let Some(field) = buf.get_mut(at + 2..at + 4)
        {
            field.copy_from_slice(&a.kind().to_ne_bytes());
        }
        at += netlink_packet_core::Emitable::buffer_len(a);
    }
}

/// The total emitted length of a list of attributes.
pub(crate) fn len_all<T: netlink_packet_core::Nla>(attrs: &[T]) -> usize {
    netlink_packet_core::Emitable::buffer_len(&attrs)
}

/// Reads a NUL-terminated string (the NUL and anything after it dropped).
/// Invalid UTF-8 is replaced rather than rejected: names are ASCII in every
/// kernel, and one odd name must not make a whole dump unreadable.
pub(crate) fn parse_cstr(value: &[u8]) -> String {
    cstr(value).into_owned()
}

/// [`parse_cstr`], borrowed where the bytes are valid UTF-8.
#[inline]
pub(crate) fn cstr(value: &[u8]) -> std::borrow::Cow<'_, str> {
    let end = value.iter().position(|&b| b == 0).unwrap_or(value.len());
    String::from_utf8_lossy(&value[..end])
}

/// Writes `s` followed by a NUL into `buf` (`s.len() + 1` bytes).
pub(crate) fn emit_cstr(s: &str, buf: &mut [u8]) {
    buf[..s.len()].copy_from_slice(s.as_bytes());
    buf[s.len()] = 0;
}

/// Reads a fixed-size value, naming the attribute in the error.
pub(crate) fn fixed<const N: usize>(what: &str, value: &[u8]) -> Result<[u8; N], DecodeError> {
    value
        .try_into()
        .map_err(|_| DecodeError::from(format!("{what}: expected {N} bytes, got {}", value.len())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::frame::{self, FrameBody};
    use crate::codec::{IpvsCmd, IpvsMessage};

    /// An unknown attribute whose type has both flag bits re-encodes with
    /// both (tests/fuzz/regressions/roundtrip/).
    #[test]
    fn both_type_flags_survive_reencoding() {
        let body = [0, 0, 0, 0, 9, 0, 0xff, 0xff, 0xff, 0, 0, 0x1f, 0, 0, 0, 0];
        let msg = frame::decode_message(&body).unwrap();
        let mut out = Vec::new();
        frame::encode_request(&mut out, &msg, 0x20, 1, 0).unwrap();
        let f = frame::frames(&out).next().unwrap().unwrap();
        let FrameBody::Data(again) = f.body else {
            panic!("not data")
        };
        assert_eq!(again, body);
        assert_eq!(frame::decode_message(again).unwrap(), msg);
        let nested = IpvsMessage::new(
            IpvsCmd::NewService,
            vec![IpvsAttr::Service(vec![ServiceAttr::Other(
                UnknownAttr::new(0xc063, vec![1, 2]),
            )])],
        );
        let mut out = Vec::new();
        frame::encode_request(&mut out, &nested, 0x20, 1, 0).unwrap();
        let f = frame::frames(&out).next().unwrap().unwrap();
        let FrameBody::Data(again) = f.body else {
            panic!("not data")
        };
        assert_eq!(frame::decode_message(again).unwrap(), nested);
    }
}
