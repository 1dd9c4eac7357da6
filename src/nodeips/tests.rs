//! Unit tests of the pure filter: every option, on synthetic records.

use std::net::IpAddr;

use super::*;

const UP: InterfaceFlags = InterfaceFlags::UP;
const RUNNING: InterfaceFlags = InterfaceFlags::UP
    .union(InterfaceFlags::RUNNING)
    .union(InterfaceFlags::LOWER_UP);

fn ip(s: &str) -> IpAddr {
    s.parse()
        .unwrap_or_else(|e| panic!("bad test address {s}: {e}"))
}

fn addr(index: u32, s: &str, prefix: u8) -> AddressRecord {
    AddressRecord::new(index, ip(s), prefix)
}

fn addrs_of(report: &Report) -> Vec<String> {
    report.addrs().iter().map(ToString::to_string).collect()
}

fn verdict_of(report: &Report, name: &str) -> Option<InterfaceVerdict> {
    report
        .interfaces()
        .iter()
        .find(|i| i.name == name)
        .map(|i| i.verdict)
}

fn address_verdict(report: &Report, a: &str) -> Option<AddressVerdict> {
    report
        .interfaces()
        .iter()
        .flat_map(|i| &i.addresses)
        .find(|r| r.addr == ip(a))
        .map(|r| r.verdict)
}

/// A typical host: lo, a mix of predictable interface names, kube-ipvs0.
fn host() -> (Vec<LinkRecord>, Vec<AddressRecord>) {
    let links = vec![
        LinkRecord::new(
            1,
            "lo",
            UP | InterfaceFlags::LOOPBACK | InterfaceFlags::RUNNING,
        ),
        LinkRecord::new(2, "ens3", RUNNING),
        LinkRecord::new(3, "enp0s3", RUNNING),
        LinkRecord::new(4, "eno1", UP), // up, no carrier
        LinkRecord::new(5, "bond0", RUNNING),
        LinkRecord::new(6, "em1", InterfaceFlags::empty()), // down
        LinkRecord::new(7, "wlp2s0", RUNNING),
        LinkRecord::new(8, "kube-ipvs0", UP),
    ];
    let addrs = vec![
        addr(1, "127.0.0.1", 8),
        addr(1, "::1", 128),
        addr(2, "10.0.0.2", 24),
        addr(2, "2001:db8::2", 64),
        addr(2, "fe80::2", 64),
        addr(3, "10.0.1.3", 24),
        addr(4, "10.0.2.4", 24),
        addr(5, "192.168.5.5", 24),
        addr(5, "192.168.5.55", 24).with_flags(AddressFlags::SECONDARY),
        addr(6, "10.0.6.6", 24),
        addr(7, "172.16.7.7", 16),
        addr(8, "10.96.0.1", 32),
    ];
    (links, addrs)
}

#[test]
fn every_up_interface_counts_whatever_its_name() {
    let (links, addrs) = host();
    let report = filter(&links, &addrs, &Options::new());
    assert_eq!(
        addrs_of(&report),
        [
            "10.0.0.2",
            "10.0.1.3",
            "10.0.2.4",
            "172.16.7.7",
            "192.168.5.5",
            "192.168.5.55",
            "2001:db8::2"
        ]
    );
    assert_eq!(verdict_of(&report, "em1"), Some(InterfaceVerdict::Down));
    assert_eq!(
        address_verdict(&report, "10.0.6.6"),
        Some(AddressVerdict::InterfaceSkipped)
    );
}

/// kube-proxy's VIP device holds service addresses, not node IPs: skipped
/// unless asked for, by exact name.
#[test]
fn kube_ipvs0_is_excluded_by_default_and_can_be_included() {
    let (links, addrs) = host();
    let report = filter(&links, &addrs, &Options::new());
    assert!(!report.addrs().contains(&ip("10.96.0.1")));
    assert_eq!(
        verdict_of(&report, "kube-ipvs0"),
        Some(InterfaceVerdict::Excluded)
    );
    let report = filter(&links, &addrs, &Options::new().include("kube-ipvs0"));
    assert!(report.addrs().contains(&ip("10.96.0.1")));
    assert_eq!(
        verdict_of(&report, "kube-ipvs0"),
        Some(InterfaceVerdict::Used)
    );
    // Excluding it again, or twice, lists it once.
    let opts = Options::new().exclude("kube-ipvs0").exclude("ipvs0");
    assert_eq!(opts.excluded(), ["kube-ipvs0", "ipvs0"]);
}

#[test]
fn kube_proxy_v1_9_host_without_eth_star_is_not_empty() {
    let links = vec![
        LinkRecord::new(1, "lo", UP | InterfaceFlags::LOOPBACK),
        LinkRecord::new(2, "ens3", RUNNING),
        LinkRecord::new(3, "bond0", RUNNING),
    ];
    let addrs = vec![addr(2, "10.0.0.2", 24), addr(3, "10.1.0.3", 24)];
    let ips = filter(&links, &addrs, &Options::new()).into_node_ips();
    let ips = ips.unwrap_or_else(|e| panic!("expected node IPs: {e}"));
    let got: Vec<(IpAddr, &str)> = ips.iter().map(|n| (n.addr, n.interface.as_str())).collect();
    assert_eq!(got, [(ip("10.0.0.2"), "ens3"), (ip("10.1.0.3"), "bond0")]);
}

#[test]
fn node_ip_carries_interface_index_and_prefix() {
    let links = vec![LinkRecord::new(7, "eno1", UP)];
    let report = filter(&links, &[addr(7, "10.2.3.4", 20)], &Options::new());
    assert_eq!(
        report.node_ips(),
        [NodeIp {
            addr: ip("10.2.3.4"),
            interface: "eno1".into(),
            index: 7,
            prefix_len: 20
        }]
    );
}

#[test]
fn family_v4_and_v6() {
    let (links, addrs) = host();
    let v4 = filter(&links, &addrs, &Options::new().family(Family::V4));
    assert!(v4.addrs().iter().all(IpAddr::is_ipv4));
    assert_eq!(
        address_verdict(&v4, "2001:db8::2"),
        Some(AddressVerdict::WrongFamily)
    );
    let v6 = filter(&links, &addrs, &Options::new().family(Family::V6));
    assert_eq!(addrs_of(&v6), ["2001:db8::2"]);
    assert_eq!(
        verdict_of(&v6, "bond0"),
        Some(InterfaceVerdict::NoAddressKept)
    );
}

#[test]
fn exclude_is_exact_never_a_prefix() {
    let (links, addrs) = host();
    let report = filter(&links, &addrs, &Options::new().exclude("kube-ipvs0"));
    assert!(!report.addrs().contains(&ip("10.96.0.1")));
    assert_eq!(
        verdict_of(&report, "kube-ipvs0"),
        Some(InterfaceVerdict::Excluded)
    );

    // "en" and "kube" are prefixes, not names: nothing is excluded.
    let report = filter(
        &links,
        &addrs,
        &Options::new()
            .include("kube-ipvs0")
            .exclude("en")
            .exclude("kube"),
    );
    assert!(report.addrs().contains(&ip("10.0.0.2")));
    assert!(report.addrs().contains(&ip("10.96.0.1")));
    // Case matters: interface names are byte strings.
    let report = filter(&links, &addrs, &Options::new().exclude("ENS3"));
    assert!(report.addrs().contains(&ip("10.0.0.2")));
}

#[test]
fn cidrs_keep_only_addresses_inside_any_of_them() {
    let (links, addrs) = host();
    let opts = Options::new()
        .cidr("10.0.0.0/16".parse().expect("cidr"))
        .cidr("192.168.5.55/32".parse().expect("cidr"));
    let report = filter(&links, &addrs, &opts);
    assert_eq!(
        addrs_of(&report),
        ["10.0.0.2", "10.0.1.3", "10.0.2.4", "192.168.5.55"]
    );
    assert_eq!(
        address_verdict(&report, "172.16.7.7"),
        Some(AddressVerdict::OutsideCidrs)
    );
    // The list is global: IPv6 is dropped unless an IPv6 network is listed.
    assert_eq!(
        address_verdict(&report, "2001:db8::2"),
        Some(AddressVerdict::OutsideCidrs)
    );
    let report = filter(&links, &addrs, &opts.cidr("::/0".parse().expect("cidr")));
    assert!(report.addrs().contains(&ip("2001:db8::2")));
}

#[test]
fn empty_cidr_list_means_all() {
    let (links, addrs) = host();
    // Every usable address of every used interface (kube-ipvs0 excluded).
    assert_eq!(filter(&links, &addrs, &Options::new()).addrs().len(), 7);
}

#[test]
fn loopback_interface_and_addresses_are_skipped_by_default() {
    let links = vec![
        LinkRecord::new(1, "lo", UP | InterfaceFlags::LOOPBACK),
        LinkRecord::new(2, "ens3", UP),
    ];
    // A loopback address on a non-loopback interface counts as loopback too,
    // and a routable address on lo goes with the loopback interface.
    let addrs = vec![
        addr(1, "127.0.0.1", 8),
        addr(1, "10.9.9.9", 32),
        addr(2, "127.0.0.53", 8),
        addr(2, "10.0.0.2", 24),
    ];
    let report = filter(&links, &addrs, &Options::new());
    assert_eq!(addrs_of(&report), ["10.0.0.2"]);
    assert_eq!(verdict_of(&report, "lo"), Some(InterfaceVerdict::Loopback));
    assert_eq!(
        address_verdict(&report, "127.0.0.53"),
        Some(AddressVerdict::Loopback)
    );

    let report = filter(&links, &addrs, &Options::new().loopback(true));
    assert_eq!(
        addrs_of(&report),
        ["10.0.0.2", "10.9.9.9", "127.0.0.1", "127.0.0.53"]
    );
}

#[test]
fn ipv6_link_local_only_when_asked_and_ipv4_link_local_always() {
    let links = vec![LinkRecord::new(2, "ens3", UP)];
    let addrs = vec![
        addr(2, "fe80::1", 64),
        addr(2, "febf::1", 64), // still fe80::/10
        addr(2, "fec0::1", 64), // outside fe80::/10
        addr(2, "169.254.1.1", 16),
    ];
    let report = filter(&links, &addrs, &Options::new());
    assert_eq!(addrs_of(&report), ["169.254.1.1", "fec0::1"]);
    assert_eq!(
        address_verdict(&report, "febf::1"),
        Some(AddressVerdict::LinkLocal)
    );
    let report = filter(&links, &addrs, &Options::new().link_local(true));
    assert_eq!(report.addrs().len(), 4);
}

#[test]
fn tentative_and_dad_failed_are_always_skipped() {
    let links = vec![LinkRecord::new(2, "ens3", UP)];
    let addrs = vec![
        addr(2, "2001:db8::1", 64).with_flags(AddressFlags::TENTATIVE),
        addr(2, "2001:db8::2", 64).with_flags(AddressFlags::DADFAILED | AddressFlags::TENTATIVE),
        addr(2, "2001:db8::3", 64).with_flags(AddressFlags::OPTIMISTIC),
        addr(2, "2001:db8::4", 64).with_flags(AddressFlags::PERMANENT | AddressFlags::NODAD),
    ];
    let opts = Options::new().loopback(true).link_local(true);
    let report = filter(&links, &addrs, &opts);
    assert_eq!(addrs_of(&report), ["2001:db8::3", "2001:db8::4"]);
    assert_eq!(
        address_verdict(&report, "2001:db8::1"),
        Some(AddressVerdict::Tentative)
    );
    assert_eq!(
        address_verdict(&report, "2001:db8::2"),
        Some(AddressVerdict::DadFailed)
    );
}

#[test]
fn high_flag_bits_from_ifa_flags_are_honoured() {
    // Flags beyond the header's 8 bits must not confuse the checks.
    let links = vec![LinkRecord::new(2, "ens3", UP)];
    let a = addr(2, "2001:db8::1", 64).with_flags(
        AddressFlags::MANAGETEMPADDR | AddressFlags::NOPREFIXROUTE | AddressFlags::TENTATIVE,
    );
    let report = filter(&links, &[a], &Options::new());
    assert!(report.is_empty());
}

#[test]
fn deprecated_kept_unless_asked() {
    let links = vec![LinkRecord::new(2, "ens3", UP)];
    let addrs = vec![
        addr(2, "2001:db8::1", 64).with_flags(AddressFlags::DEPRECATED),
        addr(2, "10.0.0.1", 24).with_flags(AddressFlags::DEPRECATED),
        addr(2, "10.0.0.2", 24),
    ];
    assert_eq!(filter(&links, &addrs, &Options::new()).addrs().len(), 3);
    let report = filter(&links, &addrs, &Options::new().skip_deprecated(true));
    assert_eq!(addrs_of(&report), ["10.0.0.2"]);
    assert_eq!(
        address_verdict(&report, "2001:db8::1"),
        Some(AddressVerdict::Deprecated)
    );
}

#[test]
fn require_running_needs_running_and_lower_up() {
    let links = vec![
        LinkRecord::new(2, "ens3", RUNNING),
        LinkRecord::new(3, "eno1", UP), // no carrier
        LinkRecord::new(
            4,
            "wlp2s0",
            UP | InterfaceFlags::LOWER_UP | InterfaceFlags::DORMANT,
        ), // dormant
        LinkRecord::new(5, "em1", UP | InterfaceFlags::RUNNING), // running without LOWER_UP
    ];
    let addrs = vec![
        addr(2, "10.0.0.2", 24),
        addr(3, "10.0.0.3", 24),
        addr(4, "10.0.0.4", 24),
        addr(5, "10.0.0.5", 24),
    ];
    assert_eq!(filter(&links, &addrs, &Options::new()).addrs().len(), 4);
    let report = filter(&links, &addrs, &Options::new().require_running(true));
    assert_eq!(addrs_of(&report), ["10.0.0.2"]);
    assert_eq!(
        verdict_of(&report, "eno1"),
        Some(InterfaceVerdict::NotRunning)
    );
}

#[test]
fn ipv4_point_to_point_returns_the_local_address_not_the_peer() {
    let links = vec![LinkRecord::new(2, "ppp0", UP | InterfaceFlags::POINTOPOINT)];
    let a = addr(2, "10.0.0.1", 32).with_peer(ip("10.0.0.2"));
    let report = filter(&links, &[a], &Options::new());
    assert_eq!(addrs_of(&report), ["10.0.0.1"]);
}

#[test]
fn falls_back_to_ifa_address_when_ifa_local_is_absent() {
    let links = vec![LinkRecord::new(2, "ens3", UP)];
    let mut a = addr(2, "2001:db8::9", 64);
    a.local = None;
    let mut none = addr(2, "2001:db8::10", 64);
    none.local = None;
    none.address = None;
    let report = filter(&links, &[a, none], &Options::new());
    assert_eq!(addrs_of(&report), ["2001:db8::9"]);
}

#[test]
fn unspecified_and_multicast_are_never_node_ips() {
    let links = vec![LinkRecord::new(2, "ens3", UP)];
    let addrs = vec![
        addr(2, "0.0.0.0", 0),
        addr(2, "ff02::1", 128),
        addr(2, "224.0.0.1", 32),
    ];
    let report = filter(
        &links,
        &addrs,
        &Options::new().loopback(true).link_local(true),
    );
    assert!(report.is_empty());
    assert_eq!(
        address_verdict(&report, "ff02::1"),
        Some(AddressVerdict::Unusable)
    );
}

#[test]
fn sorted_and_deduplicated() {
    let links = vec![
        LinkRecord::new(2, "ens3", UP),
        LinkRecord::new(3, "ens4", UP),
    ];
    let addrs = vec![
        addr(3, "10.0.0.9", 24),
        addr(2, "10.0.0.1", 24),
        addr(2, "10.0.0.1", 16), // same address twice on ens3
        addr(3, "10.0.0.1", 24), // and once on ens4
        addr(2, "2001:db8::1", 64),
    ];
    let report = filter(&links, &addrs, &Options::new());
    let pairs: Vec<(String, u32, u8)> = report
        .node_ips()
        .iter()
        .map(|n| (n.addr.to_string(), n.index, n.prefix_len))
        .collect();
    assert_eq!(
        pairs,
        [
            ("10.0.0.1".into(), 2, 16),
            ("10.0.0.1".into(), 3, 24),
            ("10.0.0.9".into(), 3, 24),
            ("2001:db8::1".into(), 2, 64)
        ]
    );
    assert_eq!(addrs_of(&report), ["10.0.0.1", "10.0.0.9", "2001:db8::1"]);
}

#[test]
fn addresses_of_unknown_interfaces_are_reported_not_used() {
    let links = vec![LinkRecord::new(2, "ens3", UP)];
    let addrs = vec![addr(2, "10.0.0.2", 24), addr(99, "10.0.0.99", 24)];
    let report = filter(&links, &addrs, &Options::new());
    assert_eq!(addrs_of(&report), ["10.0.0.2"]);
    assert_eq!(report.unknown_interface_addresses().len(), 1);
    assert!(report.to_string().contains("unknown interface #99"));
}

#[test]
fn no_addresses_error_explains_every_interface() {
    let links = vec![
        LinkRecord::new(1, "lo", UP | InterfaceFlags::LOOPBACK),
        LinkRecord::new(2, "eth0", InterfaceFlags::empty()),
        LinkRecord::new(3, "kube-ipvs0", UP),
        LinkRecord::new(4, "ens3", UP),
        LinkRecord::new(5, "ens4", UP),
    ];
    let addrs = vec![
        addr(1, "127.0.0.1", 8),
        addr(2, "10.0.0.2", 24),
        addr(3, "10.96.0.1", 32),
        addr(4, "172.16.0.4", 24),
    ];
    let opts = Options::new()
        .exclude("kube-ipvs0")
        .cidr("10.0.0.0/8".parse().expect("cidr"));
    let err = match node_ips_from(&links, &addrs, &opts) {
        Err(e) => e,
        Ok(ips) => panic!("expected NoAddresses, got {ips:?}"),
    };
    let report = err.report().unwrap_or_else(|| panic!("no report in {err}"));
    let verdicts: Vec<(&str, InterfaceVerdict)> = report
        .interfaces()
        .iter()
        .map(|i| (i.name.as_str(), i.verdict))
        .collect();
    assert_eq!(
        verdicts,
        [
            ("lo", InterfaceVerdict::Loopback),
            ("eth0", InterfaceVerdict::Down),
            ("kube-ipvs0", InterfaceVerdict::Excluded),
            ("ens3", InterfaceVerdict::NoAddressKept),
            ("ens4", InterfaceVerdict::NoAddresses),
        ]
    );
    let text = err.to_string();
    for needle in [
        "no node IP address found",
        "lo (#1): loopback interface",
        "eth0 (#2): down",
        "kube-ipvs0 (#3): excluded by name",
        "172.16.0.4/24: outside the CIDRs",
        "ens4 (#5): no address",
    ] {
        assert!(text.contains(needle), "{needle:?} missing from {text}");
    }
    // The alternate form puts one interface per line.
    assert_eq!(format!("{report:#}").lines().count(), 5);
}

fn node_ips_from(
    links: &[LinkRecord],
    addrs: &[AddressRecord],
    opts: &Options,
) -> Result<Vec<NodeIp>, NodeIpsError> {
    filter(links, addrs, opts).into_node_ips()
}

#[test]
fn family_parses_from_flags() {
    assert_eq!("both".parse::<Family>(), Ok(Family::Both));
    assert_eq!("IPv4".parse::<Family>(), Ok(Family::V4));
    assert_eq!("6".parse::<Family>(), Ok(Family::V6));
    assert!("ipx".parse::<Family>().is_err());
}

proptest::proptest! {
    /// Whatever the records, the result is sorted, unique per (addr, index),
    /// every node IP is on an UP interface, and each address is explained.
    #[test]
    fn filter_invariants(
        links in proptest::collection::vec((1u32..20, 0u32..0x40000), 0..12),
        addrs in proptest::collection::vec((1u32..24, proptest::num::u32::ANY, 0u8..=32, 0u32..0x1000, proptest::bool::ANY), 0..40),
        family in proptest::sample::select(vec![Family::V4, Family::V6, Family::Both]),
        loopback in proptest::bool::ANY,
        link_local in proptest::bool::ANY,
    ) {
        let links: Vec<LinkRecord> = links
            .into_iter()
            .map(|(i, f)| LinkRecord::new(i, format!("if{i}"), InterfaceFlags::from_bits_retain(f)))
            .collect();
        let addrs: Vec<AddressRecord> = addrs
            .into_iter()
            .map(|(i, bits, p, f, v6)| {
                let a: IpAddr = if v6 {
                    std::net::Ipv6Addr::from(u128::from(bits) | 0xfe80_u128 << 112 & if bits % 3 == 0 { !0 } else { 0 }).into()
                } else {
                    std::net::Ipv4Addr::from(bits).into()
                };
                AddressRecord::new(i, a, p).with_flags(AddressFlags::from_bits_retain(f))
            })
            .collect();
        let opts = Options::new().family(family).loopback(loopback).link_local(link_local);
        let report = filter(&links, &addrs, &opts);
        let ips = report.node_ips();
        proptest::prop_assert!(ips.windows(2).all(|w| w[0] < w[1] && !(w[0].addr == w[1].addr && w[0].index == w[1].index)));
        for n in ips {
            let link = links.iter().rev().find(|l| l.index == n.index);
            proptest::prop_assert!(link.is_some_and(|l| l.flags.contains(InterfaceFlags::UP)));
            proptest::prop_assert!(family.admits(&n.addr));
        }
        let explained: usize = report.interfaces().iter().map(|i| i.addresses.len()).sum::<usize>()
            + report.unknown_interface_addresses().len();
        proptest::prop_assert_eq!(explained, addrs.len());
    }
}
