//! A remembered real server in 52 bytes instead of the 68 of an
//! [`ObservedDest`].
//!
//! A syncer remembers every real server of the table it manages (500,000 at
//! 50,000 x 10), so each byte of one is half a megabyte. A `SocketAddr` takes
//! 32 bytes to hold an IPv6 flow label and scope id that IPVS has no room
//! for, and an `Option<ConnCounts>` 16; here the address is its 16 bytes and
//! port, and whether it is IPv6 and whether counts were read share one byte.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use super::state::ObservedDest;
use crate::model::{ConnCounts, ForwardMethod, RealServer};

/// An [`ObservedDest`] as memory keeps it. Its address has no flow label or
/// scope id: the kernel keeps neither, and a desired real server may have
/// neither.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) struct PackedDest {
    /// The address's bytes; an IPv4 address in the first four, then zeros.
    ip: [u8; 16],
    weight: u32,
    upper_threshold: u32,
    lower_threshold: u32,
    /// Active, inactive and persistent connections, when `COUNTS` is set.
    conns: [u32; 3],
    port: u16,
    forward: ForwardMethod,
    bits: u8,
}

const IPV6: u8 = 1;
const COUNTS: u8 = 2;

/// The order of addresses as `SocketAddr` orders them (IPv4 first, then by
/// address, then by port), for addresses without flow label or scope id.
pub(super) type AddrOrder = (bool, [u8; 16], u16);

/// Where `addr` sorts among packed real servers.
#[inline]
pub(super) fn addr_order(addr: &SocketAddr) -> AddrOrder {
    let (v6, ip) = ip_bytes(addr.ip());
    (v6, ip, addr.port())
}

fn ip_bytes(ip: IpAddr) -> (bool, [u8; 16]) {
    match ip {
        IpAddr::V4(v4) => {
            let mut b = [0; 16];
            b[..4].copy_from_slice(&v4.octets());
            (false, b)
        }
        IpAddr::V6(v6) => (true, v6.octets()),
    }
}

impl PackedDest {
    pub(super) fn pack(d: &ObservedDest) -> Self {
        let rs = &d.server;
        let (v6, ip) = ip_bytes(rs.addr.ip());
        let conns = d
            .conns
            .map_or([0; 3], |c| [c.active, c.inactive, c.persistent]);
        PackedDest {
            ip,
            weight: rs.weight,
            upper_threshold: rs.upper_threshold,
            lower_threshold: rs.lower_threshold,
            conns,
            port: rs.addr.port(),
            forward: rs.forward,
            bits: if v6 { IPV6 } else { 0 } | if d.conns.is_some() { COUNTS } else { 0 },
        }
    }

    pub(super) fn addr(&self) -> SocketAddr {
        let ip = if self.bits & IPV6 != 0 {
            IpAddr::V6(Ipv6Addr::from(self.ip))
        } else {
            let [a, b, c, d, ..] = self.ip;
            IpAddr::V4(Ipv4Addr::new(a, b, c, d))
        };
        SocketAddr::new(ip, self.port)
    }

    #[inline]
    pub(super) fn order(&self) -> AddrOrder {
        (self.bits & IPV6 != 0, self.ip, self.port)
    }

    /// Whether this is the real server `rs` (connection counts aside),
    /// without unpacking it.
    #[inline]
    pub(super) fn is(&self, rs: &RealServer) -> bool {
        let same_addr = match rs.addr {
            SocketAddr::V4(a) => self.bits & IPV6 == 0 && self.ip[..4] == a.ip().octets(),
            SocketAddr::V6(a) => {
                self.bits & IPV6 != 0
                    && self.ip == a.ip().octets()
                    && a.flowinfo() == 0
                    && a.scope_id() == 0
            }
        };
        same_addr
            && self.port == rs.addr.port()
            && self.weight == rs.weight
            && self.forward == rs.forward
            && self.upper_threshold == rs.upper_threshold
            && self.lower_threshold == rs.lower_threshold
    }

    pub(super) fn unpack(&self) -> ObservedDest {
        let server = RealServer {
            addr: self.addr(),
            weight: self.weight,
            forward: self.forward,
            upper_threshold: self.upper_threshold,
            lower_threshold: self.lower_threshold,
        };
        let [active, inactive, persistent] = self.conns;
        let conns = (self.bits & COUNTS != 0).then_some(ConnCounts {
            active,
            inactive,
            persistent,
        });
        ObservedDest { server, conns }
    }
}

impl std::fmt::Debug for PackedDest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.unpack().fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Tunnel, TunnelEncap, TunnelFlags};
    use proptest::prelude::*;

    fn any_addr() -> impl Strategy<Value = SocketAddr> {
        prop_oneof![
            (any::<[u8; 4]>(), any::<u16>())
                .prop_map(|(ip, port)| SocketAddr::new(Ipv4Addr::from(ip).into(), port)),
            (any::<[u8; 16]>(), any::<u16>())
                .prop_map(|(ip, port)| SocketAddr::new(Ipv6Addr::from(ip).into(), port)),
        ]
    }

    fn any_forward() -> impl Strategy<Value = ForwardMethod> {
        prop_oneof![
            Just(ForwardMethod::Masquerade),
            Just(ForwardMethod::Local),
            Just(ForwardMethod::DirectRoute),
            Just(ForwardMethod::Bypass),
            (any::<u16>(), any::<u16>()).prop_map(|(port, flags)| {
                let mut t = Tunnel::new(TunnelEncap::Gue { port });
                t.flags = TunnelFlags::from_bits_retain(flags);
                ForwardMethod::Tunnel(t)
            }),
            Just(ForwardMethod::Tunnel(Tunnel::IPIP)),
        ]
    }

    fn any_dest() -> impl Strategy<Value = ObservedDest> {
        (
            any_addr(),
            any::<[u32; 3]>(),
            any_forward(),
            proptest::option::of(any::<[u32; 3]>()),
        )
            .prop_map(|(addr, [w, u, l], forward, conns)| {
                let server = RealServer {
                    addr,
                    weight: w,
                    forward,
                    upper_threshold: u,
                    lower_threshold: l,
                };
                let conns = conns.map(|[a, i, p]| ConnCounts::new(a, i, p));
                ObservedDest::new(server, conns)
            })
    }

    #[test]
    fn a_packed_real_server_takes_52_bytes() {
        assert_eq!(std::mem::size_of::<PackedDest>(), 52);
    }

    proptest! {
        /// Packing keeps everything the kernel can hold, and packed real
        /// servers sort as their addresses do.
        #[test]
        fn packing_loses_nothing_and_keeps_the_order(a in any_dest(), b in any_dest()) {
            prop_assert_eq!(PackedDest::pack(&a).unpack(), a);
            prop_assert_eq!(PackedDest::pack(&a) == PackedDest::pack(&b), a == b);
            prop_assert_eq!(
                PackedDest::pack(&a).order().cmp(&PackedDest::pack(&b).order()),
                a.server.addr.cmp(&b.server.addr)
            );
            prop_assert_eq!(addr_order(&a.server.addr), PackedDest::pack(&a).order());
            prop_assert!(PackedDest::pack(&a).is(&a.server));
            prop_assert_eq!(PackedDest::pack(&a).is(&b.server), a.server == b.server);
        }
    }
}
