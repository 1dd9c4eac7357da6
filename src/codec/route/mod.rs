//! rtnetlink, sans-IO: the requests of [`crate::vip`] and [`crate::nodeips`]
//! and the two replies they read, link and address messages.
//!
//! Requests are built as netlink-packet-route values and written by one
//! framing function ([`RouteRequest::write`]), so that the pipeline numbers
//! them and sets their kind's flags like any other request. Replies are
//! read with the codec's own attribute reader, one attribute space per file
//! ([`link`], [`address`]), unknown attributes skipped as `Other`; nothing
//! here panics on any input.

pub(crate) mod address;
pub(crate) mod link;

use std::net::IpAddr;

use ipnetwork::IpNetwork;
use netlink_packet_core::{
    NLM_F_CREATE, NLM_F_EXCL, NLM_F_REPLACE, NetlinkHeader, NetlinkMessage, NetlinkPayload,
};
use netlink_packet_route::address::{AddressAttribute, AddressMessage};
use netlink_packet_route::link::{
    InfoKind, LinkAttribute, LinkExtentMask, LinkFlags, LinkInfo, LinkMessage,
};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};

/// `RTM_NEWLINK`: a link message (the answer to a link request or dump).
pub(crate) const RTM_NEWLINK: u16 = 16;
/// `RTM_NEWADDR`: an address message (the answer to an address dump).
pub(crate) const RTM_NEWADDR: u16 = 20;

/// One rtnetlink request: the message and the flags it needs besides its
/// kind's (`NLM_F_CREATE`, `NLM_F_EXCL`, `NLM_F_REPLACE`).
#[derive(Debug, Clone)]
pub(crate) struct RouteRequest {
    message: RouteNetlinkMessage,
    extra_flags: u16,
}

impl RouteRequest {
    /// Appends the request to `out` as sequence number `seq` with `flags`
    /// (its kind's) and its own extra flags, padded to 4 bytes: the one
    /// framing function of every rtnetlink request the crate sends.
    pub(crate) fn write(&self, out: &mut Vec<u8>, seq: u32, flags: u16) {
        let mut header = NetlinkHeader::default();
        header.flags = flags | self.extra_flags;
        header.sequence_number = seq;
        let mut message =
            NetlinkMessage::new(header, NetlinkPayload::InnerMessage(self.message.clone()));
        message.finalize();
        let start = out.len();
        out.resize(start + message.buffer_len(), 0);
        message.serialize(&mut out[start..]);
        out.resize(out.len().next_multiple_of(4), 0);
    }

    fn new(message: RouteNetlinkMessage, extra_flags: u16) -> Self {
        RouteRequest {
            message,
            extra_flags,
        }
    }
}

/// A link request without statistics (the bulk of a link message).
fn link_without_stats() -> LinkMessage {
    let mut link = LinkMessage::default();
    link.attributes
        .push(LinkAttribute::ExtMask(vec![LinkExtentMask::SkipStats]));
    link
}

/// `RTM_GETLINK` for the device named `name`: answered by its link message,
/// or `ENODEV`.
pub(crate) fn get_link(name: &str) -> RouteRequest {
    let mut link = link_without_stats();
    link.attributes.push(LinkAttribute::IfName(name.to_owned()));
    RouteRequest::new(RouteNetlinkMessage::GetLink(link), 0)
}

/// `RTM_GETLINK` as a dump of every interface, without statistics.
pub(crate) fn dump_links() -> RouteRequest {
    RouteRequest::new(RouteNetlinkMessage::GetLink(link_without_stats()), 0)
}

/// `RTM_NEWLINK` creating dummy `name`, up (`ip link add NAME up type
/// dummy`); `EEXIST` if it exists.
pub(crate) fn create_dummy(name: &str) -> RouteRequest {
    let mut link = LinkMessage::default();
    link.header.flags = LinkFlags::Up;
    link.header.change_mask = LinkFlags::Up;
    link.attributes.push(LinkAttribute::IfName(name.to_owned()));
    link.attributes
        .push(LinkAttribute::LinkInfo(vec![LinkInfo::Kind(
            InfoKind::Dummy,
        )]));
    RouteRequest::new(
        RouteNetlinkMessage::NewLink(link),
        NLM_F_CREATE | NLM_F_EXCL,
    )
}

/// `RTM_NEWLINK` setting `IFF_UP` on interface `index`, nothing else.
pub(crate) fn set_up(index: u32) -> RouteRequest {
    let mut link = LinkMessage::default();
    link.header.index = index;
    link.header.flags = LinkFlags::Up;
    link.header.change_mask = LinkFlags::Up;
    RouteRequest::new(RouteNetlinkMessage::NewLink(link), 0)
}

/// Which addresses an address dump asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DumpFamily {
    /// IPv4 only.
    V4,
    /// IPv6 only.
    V6,
    /// Both.
    Both,
}

/// `RTM_GETADDR` as a dump of every interface's addresses of `family`.
pub(crate) fn dump_addresses(family: DumpFamily) -> RouteRequest {
    let mut addrs = AddressMessage::default();
    addrs.header.family = match family {
        DumpFamily::V4 => AddressFamily::Inet,
        DumpFamily::V6 => AddressFamily::Inet6,
        DumpFamily::Both => AddressFamily::Unspec,
    };
    RouteRequest::new(RouteNetlinkMessage::GetAddress(addrs), 0)
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
pub(crate) fn add_address(index: u32, net: IpNetwork) -> RouteRequest {
    RouteRequest::new(
        RouteNetlinkMessage::NewAddress(address_message(index, net)),
        NLM_F_CREATE | NLM_F_REPLACE,
    )
}

/// `RTM_DELADDR` of `net` from interface `index`.
pub(crate) fn remove_address(index: u32, net: IpNetwork) -> RouteRequest {
    RouteRequest::new(
        RouteNetlinkMessage::DelAddress(address_message(index, net)),
        0,
    )
}

/// The fixed header at the start of a reply payload, `LEN` bytes, or why
/// there is none.
pub(crate) fn fixed_header<const LEN: usize>(
    what: &str,
    payload: &[u8],
) -> Result<[u8; LEN], crate::codec::DecodeError> {
    payload
        .get(..LEN)
        .and_then(|h| h.try_into().ok())
        .ok_or_else(|| {
            crate::codec::DecodeError::from(format!(
                "{what} of {} bytes, shorter than its {LEN}-byte header",
                payload.len()
            ))
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::frame::{self, FrameBody, NLM_F_ACK, NLM_F_REQUEST};

    fn written(request: &RouteRequest, seq: u32) -> Vec<u8> {
        let mut out = Vec::new();
        request.write(&mut out, seq, NLM_F_REQUEST | NLM_F_ACK);
        out
    }

    #[test]
    fn requests_are_aligned_numbered_and_keep_their_extra_flags() {
        let mut out = Vec::new();
        add_address(5, "10.96.0.1/32".parse().unwrap()).write(&mut out, 1, NLM_F_REQUEST);
        remove_address(5, "2001:db8::1/128".parse().unwrap()).write(&mut out, 2, NLM_F_REQUEST);
        create_dummy("kube-ipvs0").write(&mut out, 3, NLM_F_REQUEST);
        set_up(5).write(&mut out, 4, NLM_F_REQUEST);
        assert_eq!(out.len() % 4, 0);
        let headers: Vec<(u32, u16)> = frame::frames(&out)
            .map(|f| f.unwrap().header)
            .map(|h| (h.seq, h.flags))
            .collect();
        let create = NLM_F_REQUEST | NLM_F_CREATE;
        assert_eq!(
            headers,
            [
                (1, create | NLM_F_REPLACE),
                (2, NLM_F_REQUEST),
                (3, create | NLM_F_EXCL),
                (4, NLM_F_REQUEST)
            ]
        );
    }

    #[test]
    fn a_created_dummy_reads_back_as_a_dummy_that_is_up() {
        let out = written(&create_dummy("kube-ipvs0"), 7);
        let f = frame::frames(&out).next().unwrap().unwrap();
        let FrameBody::Data(payload) = f.body else {
            panic!("not a data message")
        };
        let got = link::decode(payload).unwrap();
        assert_eq!(got.name, "kube-ipvs0");
        assert_eq!(got.kind.as_deref(), Some("dummy"));
        assert_eq!(got.flags & link::IFF_UP, link::IFF_UP);
    }

    #[test]
    fn an_added_address_reads_back() {
        let out = written(&add_address(9, "2001:db8::7/128".parse().unwrap()), 1);
        let f = frame::frames(&out).next().unwrap().unwrap();
        let FrameBody::Data(payload) = f.body else {
            panic!("not a data message")
        };
        let got = address::decode(payload).unwrap().unwrap();
        assert_eq!((got.index, got.prefix_len), (9, 128));
        assert_eq!(got.local, Some("2001:db8::7".parse().unwrap()));
        assert_eq!(got.address, got.local);
    }
}
