//! proptest strategies for valid model values, shared by the pure round-trip
//! tests and the real-kernel round-trip tests.
#![allow(dead_code)]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use ipvsctl::model::{
    AddressFamily, ForwardMethod, MAX_TIMEOUT, Netmask, PersistenceEngine, Protocol, RealServer,
    Scheduler, ServiceFlags, ServiceKey, Tunnel, TunnelEncap, TunnelFlags, VirtualServer,
};
use proptest::prelude::*;

/// Unicast IPv4 addresses in 10.0.0.0/8 (the kernel refuses non-unicast
/// real-server addresses).
pub fn ipv4() -> impl Strategy<Value = IpAddr> {
    (0u8..=255, 0u8..=255, 1u8..=254).prop_map(|(b, c, d)| IpAddr::V4(Ipv4Addr::new(10, b, c, d)))
}

/// Unicast IPv6 addresses in 2001:db8::/32.
pub fn ipv6() -> impl Strategy<Value = IpAddr> {
    (any::<u16>(), any::<u16>(), 1u16..=0xfffe)
        .prop_map(|(a, b, c)| IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, a, b, 0, 0, 0, c)))
}

pub fn ip_of(family: AddressFamily) -> BoxedStrategy<IpAddr> {
    match family {
        AddressFamily::Inet => ipv4().boxed(),
        AddressFamily::Inet6 => ipv6().boxed(),
    }
}

pub fn family() -> impl Strategy<Value = AddressFamily> {
    prop_oneof![Just(AddressFamily::Inet), Just(AddressFamily::Inet6)]
}

pub fn protocol() -> impl Strategy<Value = Protocol> {
    prop_oneof![
        Just(Protocol::Tcp),
        Just(Protocol::Udp),
        Just(Protocol::Sctp)
    ]
}

pub fn key() -> impl Strategy<Value = ServiceKey> {
    prop_oneof![
        3 => (protocol(), family().prop_flat_map(ip_of), 1u16..=65535)
            .prop_map(|(protocol, ip, port)| ServiceKey::Addr { protocol, addr: SocketAddr::new(ip, port) }),
        1 => (1u32..=u32::MAX, family()).prop_map(|(mark, family)| ServiceKey::FwMark { mark, family }),
    ]
}

/// Schedulers every kernel of the test matrix ships (6.1 has no `twos`).
pub fn scheduler() -> impl Strategy<Value = Scheduler> {
    proptest::sample::select(
        Scheduler::BUILT_IN
            .iter()
            .filter(|s| **s != Scheduler::TwoChoice)
            .cloned()
            .collect::<Vec<_>>(),
    )
}

pub fn flags() -> impl Strategy<Value = ServiceFlags> {
    (0u32..64)
        .prop_map(|b| ServiceFlags::from_bits_truncate(b) - ServiceFlags::from_bits_retain(0x2))
}

pub fn netmask(family: AddressFamily) -> BoxedStrategy<Netmask> {
    match family {
        AddressFamily::Inet => (0u8..=32)
            .prop_map(|p| Netmask::from_prefix(AddressFamily::Inet, p))
            .boxed(),
        AddressFamily::Inet6 => (1u8..=128).prop_map(Netmask::V6).boxed(),
    }
}

/// Valid virtual servers; `with_pe` allows the `sip` persistence engine.
pub fn virtual_server(with_pe: bool) -> impl Strategy<Value = VirtualServer> {
    key().prop_flat_map(move |key| {
        (
            scheduler(),
            flags(),
            0..=MAX_TIMEOUT,
            netmask(key.family()),
            proptest::bool::weighted(if with_pe { 0.2 } else { 0.0 }),
        )
            .prop_map(move |(scheduler, flags, timeout, netmask, pe)| {
                let vs = VirtualServer::new(key)
                    .with_scheduler(scheduler)
                    .with_flags(flags)
                    .with_timeout(timeout)
                    .with_netmask(netmask);
                if pe {
                    vs.with_persistence_engine(PersistenceEngine::sip())
                } else {
                    vs
                }
            })
    })
}

pub fn tunnel() -> impl Strategy<Value = Tunnel> {
    let encap = prop_oneof![
        Just(TunnelEncap::Ipip),
        (1u16..=65535).prop_map(|port| TunnelEncap::Gue { port }),
        Just(TunnelEncap::Gre),
    ];
    (encap, 0u16..4)
        .prop_map(|(encap, f)| Tunnel::new(encap).with_flags(TunnelFlags::from_bits_truncate(f)))
}

pub fn forward() -> impl Strategy<Value = ForwardMethod> {
    prop_oneof![
        Just(ForwardMethod::Masquerade),
        Just(ForwardMethod::DirectRoute),
        tunnel().prop_map(ForwardMethod::Tunnel),
    ]
}

/// Valid real servers for a service of `family`: the same family, or the
/// other one with tunnelling.
pub fn real_server(family: AddressFamily) -> impl Strategy<Value = RealServer> {
    (forward(), any::<bool>()).prop_flat_map(move |(forward, other_family)| {
        let fam = match (forward.is_tunnel() && other_family, family) {
            (true, AddressFamily::Inet) => AddressFamily::Inet6,
            (true, AddressFamily::Inet6) => AddressFamily::Inet,
            (false, f) => f,
        };
        (
            ip_of(fam),
            any::<u16>(),
            0..=i32::MAX as u32,
            0..=i32::MAX as u32,
            0..=i32::MAX as u32,
        )
            .prop_map(move |(ip, port, weight, a, b)| {
                RealServer::new(SocketAddr::new(ip, port))
                    .with_weight(weight)
                    .with_forward(forward)
                    .with_thresholds(a.max(b), a.min(b))
            })
    })
}
