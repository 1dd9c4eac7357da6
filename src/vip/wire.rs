//! rtnetlink requests of VIP binding, and the one reply they decode (the
//! device's link message). Pure; never panics on any input.

use std::net::IpAddr;

use ipnetwork::IpNetwork;
use netlink_packet_core::{
    NLM_F_ACK, NLM_F_CREATE, NLM_F_EXCL, NLM_F_REPLACE, NLM_F_REQUEST, NetlinkHeader,
    NetlinkMessage, NetlinkPayload, NlasIterator,
};
use netlink_packet_route::address::{AddressAttribute, AddressMessage};
use netlink_packet_route::link::{
    InfoKind, LinkAttribute, LinkExtentMask, LinkFlags, LinkHeader, LinkInfo, LinkMessage,
};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};

/// `RTM_NEWLINK`: the reply to a link request.
pub(crate) const RTM_NEWLINK: u16 = 16;
/// `IFLA_IFNAME`, `IFLA_LINKINFO` and, nested in it, `IFLA_INFO_KIND`.
const IFLA_IFNAME: u16 = 3;
const IFLA_LINKINFO: u16 = 18;
const IFLA_INFO_KIND: u16 = 1;
/// `sizeof(struct ifinfomsg)`.
const IFINFOMSG_LEN: usize = 16;
/// `IFF_UP`.
pub(crate) const IFF_UP: u32 = 1;
/// `NLA_TYPE_MASK`: attribute type without the nested/byte-order bits.
const NLA_TYPE_MASK: u16 = 0x3fff;

/// What the kernel says about the device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Link {
    /// Interface index.
    pub index: u32,
    /// Its name as the kernel reports it.
    pub name: String,
    /// `IFLA_INFO_KIND` (`dummy`, `veth`, …); none for physical devices.
    pub kind: Option<String>,
    /// `ifi_flags`.
    pub flags: u32,
}

/// Appends one request to `out`, 4-byte aligned.
fn push(out: &mut Vec<u8>, seq: u32, flags: u16, message: RouteNetlinkMessage) {
    let mut header = NetlinkHeader::default();
    header.flags = flags;
    header.sequence_number = seq;
    let mut message = NetlinkMessage::new(header, NetlinkPayload::InnerMessage(message));
    message.finalize();
    let start = out.len();
    out.resize(start + message.buffer_len(), 0);
    message.serialize(&mut out[start..]);
    out.resize(out.len().next_multiple_of(4), 0);
}

/// `RTM_GETLINK` for the device named `name` (answered by its link message,
/// or `ENODEV`).
pub(crate) fn get_link(out: &mut Vec<u8>, seq: u32, name: &str) {
    let mut link = LinkMessage::default();
    link.attributes.push(LinkAttribute::IfName(name.to_owned()));
    link.attributes
        .push(LinkAttribute::ExtMask(vec![LinkExtentMask::SkipStats]));
    push(
        out,
        seq,
        NLM_F_REQUEST | NLM_F_ACK,
        RouteNetlinkMessage::GetLink(link),
    );
}

/// `RTM_NEWLINK` creating dummy `name`, up (`ip link add NAME up type
/// dummy`); `EEXIST` if it exists.
pub(crate) fn create_dummy(out: &mut Vec<u8>, seq: u32, name: &str) {
    let mut link = LinkMessage::default();
    link.header.flags = LinkFlags::Up;
    link.header.change_mask = LinkFlags::Up;
    link.attributes.push(LinkAttribute::IfName(name.to_owned()));
    link.attributes
        .push(LinkAttribute::LinkInfo(vec![LinkInfo::Kind(
            InfoKind::Dummy,
        )]));
    let flags = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL;
    push(out, seq, flags, RouteNetlinkMessage::NewLink(link));
}

/// `RTM_NEWLINK` setting `IFF_UP` on interface `index`, nothing else.
pub(crate) fn set_up(out: &mut Vec<u8>, seq: u32, index: u32) {
    let mut link = LinkMessage::default();
    link.header.index = index;
    link.header.flags = LinkFlags::Up;
    link.header.change_mask = LinkFlags::Up;
    push(
        out,
        seq,
        NLM_F_REQUEST | NLM_F_ACK,
        RouteNetlinkMessage::NewLink(link),
    );
}

fn address_message(index: u32, net: IpNetwork) -> AddressMessage {
    let mut msg = AddressMessage::default();
    msg.header.family = match net.ip() {
        IpAddr::V4(_) => AddressFamily::Inet,
        IpAddr::V6(_) => AddressFamily::Inet6,
    };
    msg.header.prefix_len = net.prefix();
    msg.header.index = index;
    // As `ip addr add ADDR dev DEV` sends it: local and address alike.
    msg.attributes.push(AddressAttribute::Local(net.ip()));
    msg.attributes.push(AddressAttribute::Address(net.ip()));
    msg
}

/// `RTM_NEWADDR` of `net` on interface `index`, replacing an equal one
/// (`ip addr replace`), so a repeated add is no error.
pub(crate) fn add_address(out: &mut Vec<u8>, seq: u32, index: u32, net: IpNetwork) {
    let flags = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_REPLACE;
    push(
        out,
        seq,
        flags,
        RouteNetlinkMessage::NewAddress(address_message(index, net)),
    );
}

/// `RTM_DELADDR` of `net` from interface `index`.
pub(crate) fn remove_address(out: &mut Vec<u8>, seq: u32, index: u32, net: IpNetwork) {
    push(
        out,
        seq,
        NLM_F_REQUEST | NLM_F_ACK,
        RouteNetlinkMessage::DelAddress(address_message(index, net)),
    );
}

/// Decodes an `RTM_NEWLINK` payload (`ifinfomsg` and attributes): only the
/// name and the kind are looked at, so an attribute this crate does not know
/// cannot break it.
pub(crate) fn decode_link(payload: &[u8]) -> Result<Link, String> {
    let header = LinkHeader::parse(payload).map_err(|e| e.to_string())?;
    let mut link = Link {
        index: header.index,
        name: String::new(),
        kind: None,
        flags: header.flags.bits(),
    };
    for nla in NlasIterator::new(payload.get(IFINFOMSG_LEN..).unwrap_or_default()) {
        let nla = nla.map_err(|e| e.to_string())?;
        match nla.kind() & NLA_TYPE_MASK {
            IFLA_IFNAME => link.name = c_string(nla.value()),
            IFLA_LINKINFO => {
                for info in NlasIterator::new(nla.value()) {
                    let info = info.map_err(|e| e.to_string())?;
                    if info.kind() & NLA_TYPE_MASK == IFLA_INFO_KIND {
                        link.kind = Some(c_string(info.value()));
                    }
                }
            }
            _ => {}
        }
    }
    Ok(link)
}

/// A NUL-terminated (or not) attribute string.
fn c_string(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|b| *b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(bytes.get(..end).unwrap_or_default()).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use netlink_packet_core::{Emitable, NetlinkBuffer};

    /// The payload of the single message in `bytes`.
    fn payload(bytes: &[u8]) -> &[u8] {
        let msg = NetlinkBuffer::new_checked(bytes).unwrap();
        &bytes[16..msg.length() as usize]
    }

    #[test]
    fn a_created_dummy_decodes_as_a_dummy_that_is_up() {
        let mut out = Vec::new();
        create_dummy(&mut out, 7, "kube-ipvs0");
        assert_eq!(out.len() % 4, 0);
        let link = decode_link(payload(&out)).unwrap();
        assert_eq!(link.name, "kube-ipvs0");
        assert_eq!(link.kind.as_deref(), Some("dummy"));
        assert_eq!(link.flags & IFF_UP, IFF_UP);
    }

    #[test]
    fn a_link_without_kind_has_none() {
        let mut link = LinkMessage::default();
        link.header.index = 2;
        link.attributes.push(LinkAttribute::IfName("ens3".into()));
        let mut buf = vec![0; link.buffer_len()];
        link.emit(&mut buf);
        let got = decode_link(&buf).unwrap();
        assert_eq!((got.index, got.name.as_str(), got.kind), (2, "ens3", None));
    }

    #[test]
    fn requests_are_aligned_and_carry_their_sequence_numbers() {
        let mut out = Vec::new();
        add_address(&mut out, 1, 5, "10.96.0.1/32".parse().unwrap());
        remove_address(&mut out, 2, 5, "2001:db8::1/128".parse().unwrap());
        set_up(&mut out, 3, 5);
        let seqs: Vec<u32> = crate::codec::frame::frames(&out)
            .map(|f| f.unwrap().header.seq)
            .collect();
        assert_eq!(seqs, [1, 2, 3]);
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_payloads_never_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..256)) {
            let _ = decode_link(&bytes);
        }
    }
}
