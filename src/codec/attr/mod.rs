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
mod wire;

pub use daemon::DaemonAttr;
pub use dest::DestAttr;
pub(crate) use dest::LeanDestAttr;
pub(crate) use service::LeanServiceAttr;
pub use service::ServiceAttr;
pub(crate) use stats::for_each_counter;
pub use stats::{StatValue, StatsAttr};
pub use top::IpvsAttr;
pub(crate) use wire::{
    PushValue, RawAttrs, RawNla, begin_nest, emit_all, end_nest, len_all, push_attr,
    push_whole_value,
};

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

/// An attribute enum's parser.
pub(crate) trait ParseAttr: Sized {
    /// Parses one attribute.
    fn parse_view(nla: &RawNla<'_>) -> Result<Self, DecodeError>;
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

/// An attribute this crate does not interpret, kept for re-emission with
/// its type bits as sent.
pub(crate) fn other(nla: &RawNla<'_>) -> Result<UnknownAttr, DecodeError> {
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

impl PushValue for UnknownAttr {}

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
