//! The pure part of VIP binding: the addresses a device holds and the ones
//! wanted → what to remove and what to add. No I/O.

use std::collections::BTreeSet;
use std::net::IpAddr;

use ipnetwork::IpNetwork;

use super::error::VipError;

/// The host prefix of `addr`: `/32` for IPv4, `/128` for IPv6 (what
/// kube-proxy binds on `kube-ipvs0`).
pub(crate) fn host_network(addr: IpAddr) -> IpNetwork {
    let prefix = if addr.is_ipv4() { 32 } else { 128 };
    // A host prefix is valid for its own family.
    IpNetwork::new(addr, prefix).unwrap_or_else(|_| IpNetwork::from(addr))
}

/// `fe80::/10`: addresses the kernel gives every IPv6 interface it brings
/// up. They are the kernel's, never managed here.
pub(crate) fn is_ipv6_link_local(addr: &IpAddr) -> bool {
    matches!(addr, IpAddr::V6(v6) if (v6.segments()[0] & 0xffc0) == 0xfe80)
}

/// Refuses addresses that cannot serve as a virtual IP, before anything is
/// sent.
pub(crate) fn check_vip(addr: IpAddr) -> Result<(), VipError> {
    let reason = if addr.is_unspecified() {
        "the unspecified address is not a service address"
    } else if addr.is_multicast() {
        "a multicast address is not a service address"
    } else if addr.is_loopback() {
        "a loopback address belongs on lo"
    } else if addr == IpAddr::from([255, 255, 255, 255]) {
        "the broadcast address is not a service address"
    } else if is_ipv6_link_local(&addr) {
        "IPv6 link-local addresses are the kernel's on every interface"
    } else {
        return Ok(());
    };
    Err(VipError::InvalidAddress { addr, reason })
}

/// What to change so that a device holding `current` holds exactly `wanted`
/// at host prefix.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Changes {
    /// Held and not wanted, or wanted at another prefix: removed first.
    pub remove: Vec<IpNetwork>,
    /// Wanted and not held at host prefix.
    pub add: Vec<IpNetwork>,
    /// Held at host prefix and wanted.
    pub unchanged: usize,
}

/// Compares the device's addresses with the wanted ones. IPv6 link-local
/// addresses on the device are left alone.
pub(crate) fn changes(current: &[IpNetwork], wanted: &BTreeSet<IpAddr>) -> Changes {
    let mut out = Changes::default();
    let mut held = BTreeSet::new();
    for net in current {
        let addr = net.ip();
        if is_ipv6_link_local(&addr) {
            continue;
        }
        if wanted.contains(&addr) && *net == host_network(addr) {
            if held.insert(addr) {
                out.unchanged += 1;
            }
        } else {
            out.remove.push(*net);
        }
    }
    out.add = wanted
        .iter()
        .filter(|a| !held.contains(*a))
        .map(|a| host_network(*a))
        .collect();
    out.remove.sort();
    out.remove.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nets(list: &[&str]) -> Vec<IpNetwork> {
        list.iter().map(|s| s.parse().unwrap()).collect()
    }

    fn addrs(list: &[&str]) -> BTreeSet<IpAddr> {
        list.iter().map(|s| s.parse().unwrap()).collect()
    }

    #[test]
    fn only_the_difference_is_changed() {
        let c = changes(
            &nets(&["10.96.0.1/32", "10.96.0.2/32", "2001:db8::1/128"]),
            &addrs(&["10.96.0.2", "10.96.0.3", "2001:db8::1", "2001:db8::2"]),
        );
        assert_eq!(c.remove, nets(&["10.96.0.1/32"]));
        assert_eq!(c.add, nets(&["10.96.0.3/32", "2001:db8::2/128"]));
        assert_eq!(c.unchanged, 2);
    }

    #[test]
    fn a_wanted_address_at_another_prefix_is_replaced() {
        let c = changes(&nets(&["10.96.0.1/24"]), &addrs(&["10.96.0.1"]));
        assert_eq!(c.remove, nets(&["10.96.0.1/24"]));
        assert_eq!(c.add, nets(&["10.96.0.1/32"]));
        assert_eq!(c.unchanged, 0);
    }

    #[test]
    fn link_local_addresses_are_left_alone() {
        let c = changes(&nets(&["fe80::1/64"]), &BTreeSet::new());
        assert_eq!(c, Changes::default());
    }

    #[test]
    fn converged_means_no_change() {
        let c = changes(&nets(&["10.96.0.1/32"]), &addrs(&["10.96.0.1"]));
        assert!(c.add.is_empty() && c.remove.is_empty());
        assert_eq!(c.unchanged, 1);
    }

    #[test]
    fn unusable_addresses_are_refused_by_name() {
        for bad in [
            "0.0.0.0",
            "::",
            "224.0.0.1",
            "ff02::1",
            "127.0.0.1",
            "::1",
            "fe80::1",
            "255.255.255.255",
        ] {
            let addr: IpAddr = bad.parse().unwrap();
            match check_vip(addr) {
                Err(VipError::InvalidAddress { addr: a, .. }) => assert_eq!(a, addr),
                other => panic!("{bad}: {other:?}"),
            }
        }
        for good in ["10.96.0.1", "192.0.2.1", "2001:db8::1", "fd00::1"] {
            assert!(check_vip(good.parse().unwrap()).is_ok(), "{good}");
        }
    }

    #[test]
    fn host_prefixes() {
        assert_eq!(host_network("10.0.0.1".parse().unwrap()).prefix(), 32);
        assert_eq!(host_network("2001:db8::1".parse().unwrap()).prefix(), 128);
    }
}
