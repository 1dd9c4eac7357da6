use std::net::{IpAddr, SocketAddr};

use proptest::prelude::*;

use super::*;
use crate::codec::conntrack::decode_datagram;
use crate::codec::conntrack::entry::NewEntry;
use crate::model::{Protocol, ServiceKey};

/// An entry as the kernel reports it for a masqueraded connection, made by
/// writing a create request and reading it back as a dump answer would
/// carry it (same attribute layout: tuples, then the rest).
fn entry(proto: Protocol, client: SocketAddr, vip: SocketAddr, real: SocketAddr) -> Entry {
    let new = NewEntry {
        orig: Tuple::new(client.ip(), vip.ip(), proto, client.port(), vip.port()),
        reply: Tuple::new(real.ip(), client.ip(), proto, real.port(), client.port()),
        timeout: 30,
    };
    let mut out = Vec::new();
    CtRequest::New(&new).write(&mut out, 1, 0);
    // A create request has a dump answer's layout but another type.
    out[4..6].copy_from_slice(&crate::codec::conntrack::CT_NEW_TYPE.to_ne_bytes());
    let mut got = decode_datagram(&out).unwrap();
    assert_eq!(got.len(), 1);
    got.pop().unwrap()
}

fn sa(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

#[test]
fn a_service_filter_selects_its_destination_and_protocol_only() {
    let key = ServiceKey::udp(sa("10.96.0.10:53"));
    let f = Filter::service(&key).unwrap();
    let e = |p, vip: &str| entry(p, sa("10.0.0.2:40000"), sa(vip), sa("10.1.0.2:53"));
    assert!(f.matches(&e(Protocol::Udp, "10.96.0.10:53")));
    assert!(!f.matches(&e(Protocol::Tcp, "10.96.0.10:53")));
    assert!(!f.matches(&e(Protocol::Udp, "10.96.0.10:54")));
    assert!(!f.matches(&e(Protocol::Udp, "10.96.0.11:53")));
}

#[test]
fn a_real_server_filter_needs_the_reply_source_too() {
    let key = ServiceKey::udp(sa("[fd09::9]:53"));
    let f = Filter::real_server(&key, sa("[fd01::2]:5353")).unwrap();
    let e = |real: &str| {
        entry(
            Protocol::Udp,
            sa("[fd00::2]:40000"),
            sa("[fd09::9]:53"),
            sa(real),
        )
    };
    assert!(f.matches(&e("[fd01::2]:5353")));
    assert!(!f.matches(&e("[fd01::2]:53")));
    assert!(!f.matches(&e("[fd01::3]:5353")));
}

#[test]
fn a_vip_filter_selects_every_port_of_the_protocols_named() {
    let f = Filter::vip("10.9.9.9".parse().unwrap(), &[Protocol::Sctp]).unwrap();
    let e = |p, port| {
        entry(
            p,
            sa("10.0.0.2:1"),
            SocketAddr::new("10.9.9.9".parse().unwrap(), port),
            sa("10.1.0.2:2"),
        )
    };
    assert!(f.matches(&e(Protocol::Sctp, 3868)));
    assert!(f.matches(&e(Protocol::Sctp, 9)));
    assert!(!f.matches(&e(Protocol::Udp, 3868)));
}

fn field(r: Result<Filter, ConntrackError>) -> &'static str {
    match r {
        Err(ConntrackError::InvalidFilter { field, .. }) => field,
        other => panic!("not refused: {other:?}"),
    }
}

#[test]
fn bad_filters_are_refused_naming_the_field() {
    let udp = ServiceKey::udp(sa("10.96.0.10:53"));
    assert_eq!(
        field(Filter::service(&ServiceKey::udp(sa("10.96.0.10:0")))),
        "service.port"
    );
    assert_eq!(
        field(Filter::service(&ServiceKey::udp(sa("0.0.0.0:53")))),
        "service.address"
    );
    assert_eq!(
        field(Filter::service(&ServiceKey::fwmark(
            1,
            crate::model::AddressFamily::Inet
        ))),
        "service"
    );
    assert_eq!(
        field(Filter::service(&ServiceKey::Addr {
            protocol: Protocol::Other(1),
            addr: sa("10.96.0.10:53")
        })),
        "service.protocol"
    );
    assert_eq!(
        field(Filter::real_server(&udp, sa("[fd00::1]:53"))),
        "real_server"
    );
    assert_eq!(
        field(Filter::real_server(&udp, sa("10.1.0.2:0"))),
        "real_server.port"
    );
    assert_eq!(
        field(Filter::vip("10.9.9.9".parse().unwrap(), &[])),
        "protocols"
    );
    assert_eq!(
        field(Filter::vip(
            "10.9.9.9".parse().unwrap(),
            &[Protocol::Other(47)]
        )),
        "protocols"
    );
    assert_eq!(
        field(Filter::vip("::".parse().unwrap(), &[Protocol::Udp])),
        "vip"
    );
}

#[test]
fn tcp_is_deleted_only_when_allowed_and_nothing_is_sent_before() {
    let tcp = Filter::service(&ServiceKey::tcp(sa("10.96.0.1:443"))).unwrap();
    // The namespace does not exist: a filter refused first means no socket
    // was ever opened there.
    let ct = Conntrack {
        netns: NetNs::path("/nonexistent/netns"),
        timeout: Timeout::ROUTE_DEFAULT,
    };
    let udp = Filter::service(&ServiceKey::udp(sa("10.96.0.10:53"))).unwrap();
    match ct.delete_all(&[udp.clone(), tcp.clone()]) {
        Err(ConntrackError::InvalidFilter {
            field: "protocol", ..
        }) => {}
        other => panic!("{other:?}"),
    }
    assert!(tcp.clone().allow_tcp().check_delete().is_ok());
    let any = Filter::vip("10.9.9.9".parse().unwrap(), &[Protocol::Udp, Protocol::Tcp]).unwrap();
    assert!(any.check_delete().is_err());
    assert!(udp.check_delete().is_ok());
    // With every filter accepted, the namespace is the error.
    assert!(matches!(ct.delete(&udp), Err(ConntrackError::Socket(_))));
    // No filter: nothing to do, nothing opened.
    assert_eq!(ct.delete_all(&[]).unwrap(), DeleteReport::default());
}

#[test]
fn the_dump_asks_for_one_family_when_the_filters_have_one() {
    let v4 = Filter::service(&ServiceKey::udp(sa("10.96.0.10:53"))).unwrap();
    let v6 = Filter::service(&ServiceKey::udp(sa("[fd09::9]:53"))).unwrap();
    assert_eq!(dump_family(std::slice::from_ref(&v4)), 2);
    assert_eq!(dump_family(&[v6.clone(), v6.clone()]), 10);
    assert_eq!(dump_family(&[v4, v6]), AF_UNSPEC);
}

fn arb_ip(v6: bool) -> impl Strategy<Value = IpAddr> {
    if v6 {
        any::<[u8; 16]>().prop_map(IpAddr::from).boxed()
    } else {
        // A small space, so that matches happen.
        (0u8..4).prop_map(|b| IpAddr::from([10, 0, 0, b])).boxed()
    }
}

proptest! {
    /// A real-server filter selects exactly the service filter's entries
    /// whose reply source is the real server.
    #[test]
    fn real_server_is_service_and_reply_source(
        vip in arb_ip(false), real in arb_ip(false), other in arb_ip(false),
        vport in 1u16..4, rport in 1u16..4, eport in 1u16..4, proto in 0usize..3,
    ) {
        let p = [Protocol::Udp, Protocol::Sctp, Protocol::Tcp][proto];
        let key = ServiceKey::Addr { protocol: p, addr: SocketAddr::new(vip, vport) };
        let (Ok(svc), Ok(rs)) = (Filter::service(&key), Filter::real_server(&key, SocketAddr::new(real, rport))) else {
            // Only the unspecified address is refused here.
            prop_assert!(vip.is_unspecified() || real.is_unspecified());
            return Ok(());
        };
        let e = entry(p, sa("10.0.0.9:40000"), SocketAddr::new(vip, eport), SocketAddr::new(other, rport));
        prop_assert_eq!(svc.matches(&e), eport == vport);
        prop_assert_eq!(rs.matches(&e), eport == vport && other == real);
    }
}
