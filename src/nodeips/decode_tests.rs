//! Tests of the reply decoder on frames built with netlink-packet-route.
use super::*;
use netlink_packet_core::{NLM_F_MULTIPART, NetlinkHeader, NetlinkMessage, NetlinkPayload};
use netlink_packet_route::RouteNetlinkMessage;
use netlink_packet_route::address::{AddressHeaderFlags, AddressMessage};
use netlink_packet_route::link::{LinkFlags, LinkMessage};

fn frame(msg: RouteNetlinkMessage, seq: u32, flags: u16) -> Vec<u8> {
    let mut header = NetlinkHeader::default();
    header.sequence_number = seq;
    header.flags = flags;
    let mut m = NetlinkMessage::new(header, NetlinkPayload::InnerMessage(msg));
    m.finalize();
    let mut buf = vec![0; m.buffer_len()];
    m.serialize(&mut buf);
    buf
}

fn raw(msg_type: u16, seq: u32, payload: &[u8]) -> Vec<u8> {
    let len = 16 + payload.len();
    let mut buf = Vec::new();
    buf.extend_from_slice(&(len as u32).to_ne_bytes());
    buf.extend_from_slice(&msg_type.to_ne_bytes());
    buf.extend_from_slice(&NLM_F_MULTIPART.to_ne_bytes());
    buf.extend_from_slice(&seq.to_ne_bytes());
    buf.extend_from_slice(&0u32.to_ne_bytes());
    buf.extend_from_slice(payload);
    while buf.len() % 4 != 0 {
        buf.push(0);
    }
    buf
}

fn link(index: u32, name: &str, flags: LinkFlags) -> RouteNetlinkMessage {
    let mut m = LinkMessage::default();
    m.header.index = index;
    m.header.flags = flags;
    m.attributes.push(LinkAttribute::IfName(name.into()));
    m.attributes.push(LinkAttribute::Mtu(1500));
    RouteNetlinkMessage::NewLink(m)
}

fn address(index: u32, attrs: Vec<AddressAttribute>, family: AddressFamily) -> RouteNetlinkMessage {
    let mut m = AddressMessage::default();
    m.header.index = index;
    m.header.family = family;
    m.header.prefix_len = 24;
    m.attributes = attrs;
    RouteNetlinkMessage::NewAddress(m)
}

fn collect(
    datagram: &[u8],
    seq: u32,
) -> Result<(Progress, Vec<LinkRecord>, Vec<AddressRecord>), NodeIpsError> {
    let mut links = Vec::new();
    let mut addrs = Vec::new();
    let p = walk_datagram(datagram, seq, "test", &mut |t, payload| {
        match t {
            RTM_NEWLINK => links.push(decode_link(payload)?),
            RTM_NEWADDR => addrs.extend(decode_address(payload)?),
            _ => {}
        }
        Ok(())
    })?;
    Ok((p, links, addrs))
}

#[test]
fn decodes_links_and_stops_at_done() {
    let mut d = frame(
        link(2, "ens3", LinkFlags::Up | LinkFlags::LowerUp),
        7,
        NLM_F_MULTIPART,
    );
    d.extend(frame(
        link(3, "bond0", LinkFlags::empty()),
        7,
        NLM_F_MULTIPART,
    ));
    d.extend(raw(NLMSG_DONE, 7, &0i32.to_ne_bytes()));
    d.extend(frame(
        link(9, "after-done", LinkFlags::Up),
        7,
        NLM_F_MULTIPART,
    ));
    let (p, links, _) = collect(&d, 7).expect("decodes");
    assert!(p.done && !p.interrupted);
    assert_eq!(links.len(), 2);
    assert_eq!(
        links[0],
        LinkRecord::new(2, "ens3", InterfaceFlags::UP | InterfaceFlags::LOWER_UP)
    );
    assert_eq!(links[1].name, "bond0");
}

#[test]
fn multipart_without_done_asks_for_more() {
    let d = frame(link(2, "eno1", LinkFlags::Up), 1, NLM_F_MULTIPART);
    let (p, links, _) = collect(&d, 1).expect("decodes");
    assert!(!p.done);
    assert_eq!(links.len(), 1);
}

#[test]
fn other_sequence_numbers_are_ignored() {
    let mut d = frame(link(2, "stale", LinkFlags::Up), 4, NLM_F_MULTIPART);
    d.extend(raw(NLMSG_DONE, 4, &0i32.to_ne_bytes()));
    d.extend(frame(link(3, "fresh", LinkFlags::Up), 5, NLM_F_MULTIPART));
    let (p, links, _) = collect(&d, 5).expect("decodes");
    assert!(!p.done);
    assert_eq!(
        links.iter().map(|l| l.name.as_str()).collect::<Vec<_>>(),
        ["fresh"]
    );
}

#[test]
fn dump_intr_is_reported() {
    let d = frame(
        link(2, "em1", LinkFlags::Up),
        1,
        NLM_F_MULTIPART | NLM_F_DUMP_INTR,
    );
    let (p, _, _) = collect(&d, 1).expect("decodes");
    assert!(p.interrupted);
}

#[test]
fn nlmsg_error_becomes_a_kernel_error_with_errno() {
    let mut payload = (-1i32).to_ne_bytes().to_vec(); // -EPERM
    payload.extend_from_slice(&[0; 16]);
    let err = collect(&raw(NLMSG_ERROR, 3, &payload), 3).err();
    match err {
        Some(NodeIpsError::Kernel { source, .. }) => assert_eq!(source.raw_os_error(), Some(1)),
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn error_in_done_is_a_kernel_error() {
    let err = collect(&raw(NLMSG_DONE, 3, &(-4i32).to_ne_bytes()), 3).err();
    assert!(matches!(err, Some(NodeIpsError::Kernel { .. })), "{err:?}");
}

#[test]
fn ack_ends_the_exchange() {
    let (p, _, _) = collect(&raw(NLMSG_ERROR, 3, &[0; 20]), 3).expect("ack");
    assert!(p.done);
}

#[test]
fn ipv4_local_and_peer_are_kept_apart() {
    let attrs = vec![
        AddressAttribute::Address("10.0.0.2".parse().expect("ip")),
        AddressAttribute::Local("10.0.0.1".parse().expect("ip")),
    ];
    let d = frame(address(4, attrs, AddressFamily::Inet), 1, 0);
    let (_, _, addrs) = collect(&d, 1).expect("decodes");
    assert_eq!(addrs.len(), 1);
    assert_eq!(
        addrs[0].local_address(),
        Some("10.0.0.1".parse().expect("ip"))
    );
    assert_eq!(addrs[0].address, Some("10.0.0.2".parse().expect("ip")));
}

#[test]
fn ifa_flags_attribute_carries_the_high_bits() {
    use netlink_packet_route::address::AddressFlags as RouteFlags;
    let mut msg = address(
        4,
        vec![
            AddressAttribute::Address("2001:db8::1".parse().expect("ip")),
            AddressAttribute::Flags(RouteFlags::Tentative | RouteFlags::Managetempaddr),
        ],
        AddressFamily::Inet6,
    );
    if let RouteNetlinkMessage::NewAddress(m) = &mut msg {
        m.header.flags = AddressHeaderFlags::Tentative;
    }
    let (_, _, addrs) = collect(&frame(msg, 1, 0), 1).expect("decodes");
    assert_eq!(
        addrs[0].flags,
        AddressFlags::TENTATIVE | AddressFlags::MANAGETEMPADDR
    );
    assert_eq!(addrs[0].local, None);
}

#[test]
fn header_flags_are_used_without_ifa_flags() {
    let mut msg = address(
        4,
        vec![AddressAttribute::Address(
            "2001:db8::1".parse().expect("ip"),
        )],
        AddressFamily::Inet6,
    );
    if let RouteNetlinkMessage::NewAddress(m) = &mut msg {
        m.header.flags = AddressHeaderFlags::Dadfailed | AddressHeaderFlags::Tentative;
    }
    let (_, _, addrs) = collect(&frame(msg, 1, 0), 1).expect("decodes");
    assert_eq!(
        addrs[0].flags,
        AddressFlags::DADFAILED | AddressFlags::TENTATIVE
    );
}

#[test]
fn other_families_are_skipped() {
    let d = frame(address(4, vec![], AddressFamily::Packet), 1, 0);
    let (_, _, addrs) = collect(&d, 1).expect("decodes");
    assert!(addrs.is_empty());
}

#[test]
fn family_mismatch_is_malformed() {
    let attrs = vec![AddressAttribute::Local("2001:db8::1".parse().expect("ip"))];
    let d = frame(address(4, attrs, AddressFamily::Inet), 1, 0);
    assert!(matches!(
        collect(&d, 1),
        Err(NodeIpsError::Malformed { .. })
    ));
}

#[test]
fn truncated_messages_are_errors_not_panics() {
    let full = frame(link(2, "wlp2s0", LinkFlags::Up), 1, 0);
    for cut in 1..full.len() {
        let _ = collect(&full[..cut], 1);
    }
    let short_link = raw(RTM_NEWLINK, 1, &[0; 3]);
    assert!(matches!(
        collect(&short_link, 1),
        Err(NodeIpsError::Malformed { .. })
    ));
    let short_error = raw(NLMSG_ERROR, 1, &[0; 2]);
    assert!(matches!(
        collect(&short_error, 1),
        Err(NodeIpsError::Malformed { .. })
    ));
}

proptest::proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..512)) {
        let _ = collect(&bytes, 0);
        let _ = decode_link(&bytes);
        let _ = decode_address(&bytes);
    }

    #[test]
    fn arbitrary_payloads_in_valid_frames_never_panic(
        t in proptest::sample::select(vec![RTM_NEWLINK, RTM_NEWADDR, NLMSG_ERROR, NLMSG_DONE]),
        payload in proptest::collection::vec(proptest::num::u8::ANY, 0..256),
    ) {
        let _ = collect(&raw(t, 0, &payload), 0);
    }
}
