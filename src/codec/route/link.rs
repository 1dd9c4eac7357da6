//! Link messages (`RTM_NEWLINK`: `struct ifinfomsg`, then `IFLA_*`
//! attributes) and the nested `IFLA_LINKINFO` space (`IFLA_INFO_*`).

use crate::codec::DecodeError;
use crate::codec::attr::{RawAttrs, RawNla, parse_cstr};

use super::fixed_header;

/// `IFF_UP`: administratively up.
pub(crate) const IFF_UP: u32 = 1;
/// `sizeof(struct ifinfomsg)`.
const IFINFOMSG_LEN: usize = 16;
/// `IFLA_IFNAME`, `IFLA_LINKINFO`.
const IFLA_IFNAME: u16 = 3;
const IFLA_LINKINFO: u16 = 18;
/// `IFLA_INFO_KIND`, nested in `IFLA_LINKINFO`.
const IFLA_INFO_KIND: u16 = 1;

/// One attribute of a link message, borrowed from the reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LinkAttr<'a> {
    /// `IFLA_IFNAME`: the interface name.
    IfName(&'a [u8]),
    /// `IFLA_LINKINFO`: the nested [`LinkInfoAttr`]s.
    LinkInfo(&'a [u8]),
    /// Anything else, not looked at.
    Other,
}

impl<'a> LinkAttr<'a> {
    fn parse(nla: &RawNla<'a>) -> Self {
        match nla.kind() {
            IFLA_IFNAME => LinkAttr::IfName(nla.value()),
            IFLA_LINKINFO => LinkAttr::LinkInfo(nla.value()),
            _ => LinkAttr::Other,
        }
    }
}

/// One attribute nested in `IFLA_LINKINFO`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LinkInfoAttr<'a> {
    /// `IFLA_INFO_KIND`: the driver kind (`dummy`, `veth`, `bridge`, ...).
    Kind(&'a [u8]),
    /// Anything else, not looked at.
    Other,
}

impl<'a> LinkInfoAttr<'a> {
    fn parse(nla: &RawNla<'a>) -> Self {
        match nla.kind() {
            IFLA_INFO_KIND => LinkInfoAttr::Kind(nla.value()),
            _ => LinkInfoAttr::Other,
        }
    }
}

/// What the crate reads of a link message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Link {
    /// Interface index (`ifi_index`).
    pub index: u32,
    /// Its name; empty if the kernel sent none.
    pub name: String,
    /// `IFLA_INFO_KIND`; none for physical devices.
    pub kind: Option<String>,
    /// `ifi_flags` (`IFF_*`).
    pub flags: u32,
}

/// Decodes a link message's payload. Attributes other than the name and
/// the kind are skipped, so none this crate does not know can break it; a
/// payload shorter than its header, or an attribute whose length does not
/// fit, is an error.
pub(crate) fn decode(payload: &[u8]) -> Result<Link, DecodeError> {
    let header: [u8; IFINFOMSG_LEN] = fixed_header("link message", payload)?;
    let word = |at: usize| {
        u32::from_ne_bytes([header[at], header[at + 1], header[at + 2], header[at + 3]])
    };
    let mut link = Link {
        index: word(4),
        name: String::new(),
        kind: None,
        flags: word(8),
    };
    for nla in RawAttrs::new(payload.get(IFINFOMSG_LEN..).unwrap_or_default()) {
        match LinkAttr::parse(&nla?) {
            LinkAttr::IfName(name) => link.name = parse_cstr(name),
            LinkAttr::LinkInfo(nested) => {
                for info in RawAttrs::new(nested) {
                    if let LinkInfoAttr::Kind(kind) = LinkInfoAttr::parse(&info?) {
                        link.kind = Some(parse_cstr(kind));
                    }
                }
            }
            LinkAttr::Other => {}
        }
    }
    Ok(link)
}

#[cfg(test)]
mod tests {
    use super::*;
    use netlink_packet_core::Emitable;
    use netlink_packet_route::link::{LinkAttribute, LinkFlags, LinkMessage};

    fn payload(index: u32, attrs: Vec<LinkAttribute>) -> Vec<u8> {
        let mut m = LinkMessage::default();
        m.header.index = index;
        m.header.flags = LinkFlags::Up | LinkFlags::LowerUp;
        m.attributes = attrs;
        let mut buf = vec![0; m.buffer_len()];
        m.emit(&mut buf);
        buf
    }

    #[test]
    fn name_index_flags_and_no_kind() {
        let got = decode(&payload(
            2,
            vec![
                LinkAttribute::IfName("ens3".into()),
                LinkAttribute::Mtu(1500),
            ],
        ))
        .unwrap();
        assert_eq!(
            got,
            Link {
                index: 2,
                name: "ens3".into(),
                kind: None,
                flags: IFF_UP | 1 << 16,
            }
        );
    }

    #[test]
    fn short_or_malformed_payloads_are_errors() {
        assert!(decode(&[0; 15]).is_err());
        let mut bad = payload(2, vec![LinkAttribute::IfName("ens3".into())]);
        bad[16] = 200; // an attribute length past the end
        assert!(decode(&bad).is_err());
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_payloads_never_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..256)) {
            let _ = decode(&bytes);
        }
    }
}
