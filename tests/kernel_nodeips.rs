//! Kernel tests of `ipvsctl::nodeips`: each test builds its interfaces in a
//! fresh network namespace with `ip`, then resolves node IPs there through
//! a pinned `NetNs` and compares with exactly the expected addresses.
//!
//! Needs root, `ip` (iproute2) and dummy + veth interfaces: the cargo runner
//! runs this binary inside the VM (`cargo test --test kernel_nodeips`). Where
//! the kernel has no dummy driver, `ifb` devices stand in for dummies (same
//! role: a named interface that holds addresses and is up without a peer).
//! IPVS itself is not needed.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use ipvsctl::netlink::netns::NetNs;
use ipvsctl::nodeips::{
    self, AddressVerdict, Family, InterfaceVerdict, NodeIpsError, Options, Report,
};

mod support;

use support::TestNetns;

/// Runs `ip ARGS` (split on whitespace) in the namespace.
fn ip(ns: &TestNetns, args: &str) {
    let args: Vec<&str> = args.split_whitespace().collect();
    ns.run("ip", &args);
}

/// Adds a dummy interface `name` (an `ifb` where the kernel lacks dummy).
fn dummy(ns: &TestNetns, name: &str) {
    if let Err(dummy_err) = ns.try_run("ip", &["link", "add", name, "type", "dummy"]) {
        ns.try_run("ip", &["link", "add", name, "type", "ifb"])
            .unwrap_or_else(|ifb_err| {
                panic!("cannot add {name}: dummy: {dummy_err}; ifb: {ifb_err}")
            });
    }
}

/// Adds an UP dummy `name` with `addrs` (IPv6 ones with `nodad`).
fn up_with(ns: &TestNetns, name: &str, addrs: &[&str]) {
    dummy(ns, name);
    ip(ns, &format!("link set {name} up"));
    for a in addrs {
        let nodad = if a.contains(':') { " nodad" } else { "" };
        ip(ns, &format!("addr add {a} dev {name}{nodad}"));
    }
}

/// The options' defaults, in the test namespace pinned by `pin` (what
/// `NetNs::named(NAME)` leads to now).
fn pinned(ns: NetNs) -> Options {
    Options::new().netns(ns.pin().unwrap_or_else(|e| panic!("{e}")))
}

fn opts(ns: &TestNetns) -> Options {
    pinned(NetNs::named(ns.name()))
}

fn addr_set(list: &[&str]) -> BTreeSet<IpAddr> {
    list.iter()
        .map(|s| s.parse().unwrap_or_else(|e| panic!("{s}: {e}")))
        .collect()
}

/// The node IP addresses, or a panic that shows the explanation.
fn resolve(opts: &Options) -> BTreeSet<IpAddr> {
    match nodeips::node_ip_addrs(opts) {
        Ok(v) => v.into_iter().collect(),
        Err(e) => panic!("resolve failed: {e}"),
    }
}

fn explain(opts: &Options) -> Report {
    nodeips::explain(opts).unwrap_or_else(|e| panic!("explain failed: {e}"))
}

fn address_verdict(report: &Report, addr: &str) -> Option<AddressVerdict> {
    let addr: IpAddr = addr.parse().ok()?;
    report
        .interfaces()
        .iter()
        .flat_map(|i| &i.addresses)
        .find(|a| a.addr == addr)
        .map(|a| a.verdict)
}

fn interface_verdict(report: &Report, name: &str) -> Option<InterfaceVerdict> {
    report
        .interfaces()
        .iter()
        .find(|i| i.name == name)
        .map(|i| i.verdict)
}

/// Polls `ip -6 addr show dev IFACE` until it contains `needle`.
fn wait_for_addr_state(ns: &TestNetns, iface: &str, needle: &str, timeout: Duration) -> bool {
    let start = Instant::now();
    while start.elapsed() < timeout {
        let out = ns.run("ip", &["-6", "addr", "show", "dev", iface]);
        if out.contains(needle) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
}

#[test]
fn every_predictable_interface_name_is_returned() {
    let ns = TestNetns::new();
    let names = ["ens3", "enp0s3", "eno1", "bond0", "em1", "wlp2s0", "eth0"];
    let mut expected = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let v4 = format!("10.20.{i}.1");
        let v6 = format!("2001:db8:20:{i}::1");
        up_with(&ns, name, &[&format!("{v4}/24"), &format!("{v6}/64")]);
        expected.push(v4);
        expected.push(v6);
    }
    let expected: Vec<&str> = expected.iter().map(String::as_str).collect();
    assert_eq!(resolve(&opts(&ns)), addr_set(&expected));

    // Each address is attributed to its own interface.
    let ips = nodeips::node_ips(&opts(&ns)).unwrap_or_else(|e| panic!("{e}"));
    for (i, name) in names.iter().enumerate() {
        let v4: IpAddr = format!("10.20.{i}.1")
            .parse()
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(
            ips.iter()
                .any(|n| n.addr == v4 && n.interface == *name && n.prefix_len == 24),
            "{v4} not on {name}: {ips:?}"
        );
    }
}

#[test]
fn kube_proxy_v1_9_regression_no_eth_star_interface() {
    // The host kube-proxy v1.9 found no node IP on: no interface named eth*.
    let ns = TestNetns::new();
    up_with(&ns, "ens3", &["192.0.2.10/24"]);
    up_with(&ns, "bond0", &["198.51.100.20/24"]);
    assert_eq!(
        resolve(&opts(&ns)),
        addr_set(&["192.0.2.10", "198.51.100.20"])
    );
}

#[test]
fn bond0_as_a_real_bond_when_the_driver_is_there() {
    let ns = TestNetns::new();
    if ns
        .try_run("ip", &["link", "add", "bond0", "type", "bond"])
        .is_err()
    {
        eprintln!("bonding driver unavailable: covered by the dummy named bond0 elsewhere");
        return;
    }
    dummy(&ns, "ens3");
    ip(&ns, "link set ens3 master bond0");
    ip(&ns, "link set bond0 up");
    ip(&ns, "addr add 198.51.100.20/24 dev bond0");
    assert_eq!(resolve(&opts(&ns)), addr_set(&["198.51.100.20"]));
}

#[test]
fn a_down_interface_is_left_out() {
    let ns = TestNetns::new();
    up_with(&ns, "ens3", &["10.1.0.1/24"]);
    dummy(&ns, "eno1");
    ip(&ns, "addr add 10.2.0.1/24 dev eno1");
    ip(&ns, "addr add 2001:db8:2::1/64 dev eno1 nodad");
    assert_eq!(resolve(&opts(&ns)), addr_set(&["10.1.0.1"]));
    let report = explain(&opts(&ns));
    assert_eq!(
        interface_verdict(&report, "eno1"),
        Some(InterfaceVerdict::Down)
    );
    assert_eq!(
        address_verdict(&report, "10.2.0.1"),
        Some(AddressVerdict::InterfaceSkipped)
    );

    // Brought up, it counts; brought down again, it does not.
    ip(&ns, "link set eno1 up");
    assert_eq!(
        resolve(&opts(&ns)),
        addr_set(&["10.1.0.1", "10.2.0.1", "2001:db8:2::1"])
    );
    ip(&ns, "link set eno1 down");
    assert_eq!(resolve(&opts(&ns)), addr_set(&["10.1.0.1"]));
}

#[test]
fn kube_ipvs0_is_excluded_by_default_and_by_exact_name() {
    let ns = TestNetns::new();
    up_with(&ns, "ens3", &["10.1.0.1/24"]);
    // kube-proxy binds service addresses to kube-ipvs0 (a dummy) and skips
    // it when it looks for node IPs; so do the default options.
    up_with(&ns, "kube-ipvs0", &["10.96.0.1/32", "10.96.0.10/32"]);
    // Not kube-proxy's name: examined unless excluded.
    up_with(&ns, "kube-ipvs1", &["10.97.0.1/32"]);
    assert_eq!(resolve(&opts(&ns)), addr_set(&["10.1.0.1", "10.97.0.1"]));
    let report = explain(&opts(&ns));
    assert_eq!(
        interface_verdict(&report, "kube-ipvs0"),
        Some(InterfaceVerdict::Excluded)
    );
    let all = resolve(&opts(&ns).include("kube-ipvs0"));
    assert_eq!(
        all,
        addr_set(&["10.1.0.1", "10.96.0.1", "10.96.0.10", "10.97.0.1"])
    );
    assert_eq!(
        resolve(&opts(&ns).exclude("kube-ipvs1")),
        addr_set(&["10.1.0.1"])
    );
    // A prefix excludes nothing.
    assert_eq!(
        resolve(&opts(&ns).include("kube-ipvs0").exclude("kube")),
        all
    );
}

/// The kernel queues each answer while it handles the request (and the next
/// dump datagram while the previous one is read), so even the shortest
/// bound on each wait, 1 ms, is met. Under emulation on a loaded host the
/// thread can be descheduled for longer than that: such a miss must be the
/// typed timeout, and most attempts succeed.
#[test]
fn the_shortest_timeout_is_met() {
    let ns = TestNetns::new();
    up_with(&ns, "ens3", &["10.1.0.1/24"]);
    let quick = opts(&ns).timeout(ipvsctl::Timeout::MIN);
    let mut met = 0;
    for _ in 0..10 {
        match nodeips::node_ip_addrs(&quick) {
            Ok(addrs) => {
                assert_eq!(
                    addrs.into_iter().collect::<BTreeSet<_>>(),
                    addr_set(&["10.1.0.1"])
                );
                met += 1;
            }
            Err(e) => assert!(matches!(e, NodeIpsError::Timeout { .. }), "{e}"),
        }
    }
    assert!(met >= 5, "only {met} of 10 dumps met the 1 ms bound");
}

#[test]
fn cidr_filter_keeps_only_addresses_inside() {
    let ns = TestNetns::new();
    up_with(&ns, "ens3", &["10.1.0.1/24", "2001:db8:1::1/64"]);
    up_with(&ns, "ens4", &["172.16.0.1/16", "10.200.0.1/24"]);
    let cidr = |s: &str| s.parse().unwrap_or_else(|e| panic!("{s}: {e}"));
    let only_10 = opts(&ns).cidr(cidr("10.0.0.0/8"));
    assert_eq!(resolve(&only_10), addr_set(&["10.1.0.1", "10.200.0.1"]));
    let two = opts(&ns)
        .cidr(cidr("10.1.0.0/24"))
        .cidr(cidr("2001:db8::/32"));
    assert_eq!(resolve(&two), addr_set(&["10.1.0.1", "2001:db8:1::1"]));
    let none = opts(&ns).cidr(cidr("192.168.0.0/16"));
    match nodeips::node_ips(&none) {
        Err(NodeIpsError::NoAddresses(report)) => {
            assert_eq!(
                address_verdict(&report, "172.16.0.1"),
                Some(AddressVerdict::OutsideCidrs)
            );
        }
        other => panic!("expected NoAddresses, got {other:?}"),
    }
}

#[test]
fn family_selects_ipv4_or_ipv6() {
    let ns = TestNetns::new();
    up_with(&ns, "ens3", &["10.1.0.1/24", "2001:db8:1::1/64"]);
    up_with(&ns, "eno1", &["10.2.0.1/24"]);
    assert_eq!(
        resolve(&opts(&ns).family(Family::V4)),
        addr_set(&["10.1.0.1", "10.2.0.1"])
    );
    assert_eq!(
        resolve(&opts(&ns).family(Family::V6)),
        addr_set(&["2001:db8:1::1"])
    );
    assert_eq!(
        resolve(&opts(&ns).family(Family::Both)),
        addr_set(&["10.1.0.1", "10.2.0.1", "2001:db8:1::1"])
    );
}

#[test]
fn loopback_is_skipped_unless_asked() {
    let ns = TestNetns::new();
    up_with(&ns, "ens3", &["10.1.0.1/24"]);
    ip(&ns, "addr add 10.255.0.1/32 dev lo");
    assert_eq!(resolve(&opts(&ns)), addr_set(&["10.1.0.1"]));
    let report = explain(&opts(&ns));
    assert_eq!(
        interface_verdict(&report, "lo"),
        Some(InterfaceVerdict::Loopback)
    );
    assert_eq!(
        resolve(&opts(&ns).loopback(true)),
        addr_set(&["10.1.0.1", "10.255.0.1", "127.0.0.1", "::1"])
    );
}

#[test]
fn ipv6_link_local_is_skipped_unless_asked() {
    let ns = TestNetns::new();
    up_with(&ns, "ens3", &["2001:db8:1::1/64", "fe80::1234/64"]);
    let default = resolve(&opts(&ns));
    assert_eq!(default, addr_set(&["2001:db8:1::1"]));
    let with_ll = resolve(&opts(&ns).link_local(true));
    let wanted: IpAddr = "fe80::1234".parse().unwrap_or_else(|e| panic!("{e}"));
    assert!(with_ll.contains(&wanted), "{with_ll:?}");
    // Only the explicit address and any kernel-generated fe80:: one.
    assert!(
        with_ll
            .iter()
            .all(|a| default.contains(a) || a.to_string().starts_with("fe80:")),
        "{with_ll:?}"
    );
}

/// A veth pair `a`/`b` in `ns`, both up.
fn veth_pair(ns: &TestNetns, a: &str, b: &str) {
    ip(ns, &format!("link add {a} type veth peer name {b}"));
    ip(ns, &format!("link set {a} up"));
    ip(ns, &format!("link set {b} up"));
}

#[test]
fn tentative_ipv6_addresses_are_skipped_while_dad_runs() {
    let ns = TestNetns::new();
    veth_pair(&ns, "ens3", "peer0");
    // Slow duplicate address detection down so the address stays tentative.
    ns.run(
        "sysctl",
        &["-qw", "net.ipv6.neigh.ens3.retrans_time_ms=60000"],
    );
    ip(&ns, "addr add 10.1.0.1/24 dev ens3");
    ip(&ns, "addr add 2001:db8:7::1/64 dev ens3");
    ip(&ns, "addr add 2001:db8:7::2/64 dev ens3 nodad");
    assert!(wait_for_addr_state(
        &ns,
        "ens3",
        "tentative",
        Duration::from_secs(2)
    ));
    let got = resolve(&opts(&ns));
    assert_eq!(got, addr_set(&["10.1.0.1", "2001:db8:7::2"]));
    assert_eq!(
        address_verdict(&explain(&opts(&ns)), "2001:db8:7::1"),
        Some(AddressVerdict::Tentative)
    );
}

#[test]
fn dad_failed_ipv6_addresses_are_skipped() {
    let ns = TestNetns::new();
    veth_pair(&ns, "ens3", "peer0");
    // The peer already owns the address: ens3's DAD must fail.
    ip(&ns, "addr add 2001:db8:8::1/64 dev peer0 nodad");
    ip(&ns, "addr add 2001:db8:8::1/64 dev ens3");
    ip(&ns, "addr add 2001:db8:8::2/64 dev ens3 nodad");
    assert!(
        wait_for_addr_state(&ns, "ens3", "dadfailed", Duration::from_secs(15)),
        "DAD did not fail in time"
    );
    let report = explain(&opts(&ns).exclude("peer0"));
    assert_eq!(
        report.addrs(),
        vec![
            "2001:db8:8::2"
                .parse::<IpAddr>()
                .unwrap_or_else(|e| panic!("{e}"))
        ]
    );
    let ens3 = report
        .interfaces()
        .iter()
        .find(|i| i.name == "ens3")
        .unwrap_or_else(|| panic!("no ens3 in {report}"));
    assert!(
        ens3.addresses.iter().any(
            |a| a.addr.to_string() == "2001:db8:8::1" && a.verdict == AddressVerdict::DadFailed
        ),
        "{report}"
    );
}

#[test]
fn deprecated_addresses_are_kept_unless_asked() {
    let ns = TestNetns::new();
    up_with(&ns, "ens3", &["10.1.0.1/24", "2001:db8:1::1/64"]);
    ip(
        &ns,
        "addr add 2001:db8:1::dead/64 dev ens3 nodad valid_lft forever preferred_lft 0",
    );
    ip(
        &ns,
        "addr add 10.1.0.99/24 dev ens3 valid_lft forever preferred_lft 0",
    );
    assert!(wait_for_addr_state(
        &ns,
        "ens3",
        "deprecated",
        Duration::from_secs(2)
    ));
    assert_eq!(
        resolve(&opts(&ns)),
        addr_set(&["10.1.0.1", "10.1.0.99", "2001:db8:1::1", "2001:db8:1::dead"])
    );
    assert_eq!(
        resolve(&opts(&ns).skip_deprecated(true)),
        addr_set(&["10.1.0.1", "2001:db8:1::1"])
    );
}

#[test]
fn require_running_drops_an_interface_without_carrier() {
    let ns = TestNetns::new();
    up_with(&ns, "ens3", &["10.1.0.1/24"]);
    // A veth whose peer is down is UP but has no carrier.
    ip(&ns, "link add eno1 type veth peer name peer1");
    ip(&ns, "link set eno1 up");
    ip(&ns, "addr add 10.2.0.1/24 dev eno1");
    assert_eq!(resolve(&opts(&ns)), addr_set(&["10.1.0.1", "10.2.0.1"]));
    assert_eq!(
        resolve(&opts(&ns).require_running(true)),
        addr_set(&["10.1.0.1"])
    );
    assert_eq!(
        interface_verdict(&explain(&opts(&ns).require_running(true)), "eno1"),
        Some(InterfaceVerdict::NotRunning)
    );
    // With the peer up it has carrier and counts again.
    ip(&ns, "link set peer1 up");
    let start = Instant::now();
    while resolve(&opts(&ns).require_running(true)).len() < 2
        && start.elapsed() < Duration::from_secs(5)
    {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        resolve(&opts(&ns).require_running(true)),
        addr_set(&["10.1.0.1", "10.2.0.1"])
    );
}

#[test]
fn point_to_point_returns_the_local_address_not_the_peer() {
    let ns = TestNetns::new();
    dummy(&ns, "ens3");
    ip(&ns, "link set ens3 up");
    ip(&ns, "addr add 10.0.0.1 peer 10.0.0.2 dev ens3");
    ip(
        &ns,
        "addr add 2001:db8:a::1 peer 2001:db8:a::2 dev ens3 nodad",
    );
    assert_eq!(
        resolve(&opts(&ns)),
        addr_set(&["10.0.0.1", "2001:db8:a::1"])
    );
}

#[test]
fn secondary_addresses_count() {
    let ns = TestNetns::new();
    up_with(&ns, "ens3", &["10.1.0.1/24", "10.1.0.2/24", "10.1.0.3/24"]);
    let out = ns.run("ip", &["-4", "addr", "show", "dev", "ens3"]);
    assert!(out.contains("secondary"), "{out}");
    assert_eq!(
        resolve(&opts(&ns)),
        addr_set(&["10.1.0.1", "10.1.0.2", "10.1.0.3"])
    );
}

#[test]
fn one_namespace_does_not_see_another() {
    let a = TestNetns::new();
    let b = TestNetns::new();
    up_with(&a, "ens3", &["10.91.0.1/24"]);
    up_with(&b, "ens3", &["10.92.0.1/24"]);
    assert_eq!(resolve(&opts(&a)), addr_set(&["10.91.0.1"]));
    assert_eq!(resolve(&opts(&b)), addr_set(&["10.92.0.1"]));
    // The caller's own namespace sees neither.
    if let Ok(here) = nodeips::node_ip_addrs(&Options::new()) {
        assert!(
            here.iter().all(|a| !a.to_string().starts_with("10.9")),
            "{here:?}"
        );
    }
    // And by path and by open fd, the same as by name.
    assert_eq!(
        resolve(&pinned(NetNs::path(a.path()))),
        addr_set(&["10.91.0.1"])
    );
    let fd = std::fs::File::open(b.path()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        resolve(&pinned(NetNs::fd(fd.into()))),
        addr_set(&["10.92.0.1"])
    );
}

#[test]
fn only_loopback_gives_a_no_addresses_error_that_explains() {
    let ns = TestNetns::new();
    dummy(&ns, "eth0"); // down
    ip(&ns, "addr add 10.3.0.1/24 dev eth0");
    match nodeips::node_ips(&opts(&ns)) {
        Err(err @ NodeIpsError::NoAddresses(_)) => {
            let text = err.to_string();
            assert!(text.contains("lo (#1): loopback interface"), "{text}");
            assert!(text.contains("eth0"), "{text}");
            assert!(text.contains("down"), "{text}");
        }
        other => panic!("expected NoAddresses, got {other:?}"),
    }
}

#[test]
fn a_namespace_that_cannot_be_entered_is_a_socket_error_naming_it() {
    // Opens fine, so it pins; setns(2) refuses it when a socket is made.
    let err = nodeips::node_ips(&pinned(NetNs::path("/proc/self/status")));
    match err {
        Err(e @ NodeIpsError::Socket(_)) => {
            let text = e.to_string();
            assert!(
                text.contains("/proc/self/status") && text.contains("not a network namespace"),
                "{text}"
            );
        }
        other => panic!("expected a socket error, got {other:?}"),
    }
}

#[test]
fn hundreds_of_interfaces_span_multi_part_dumps() {
    let ns = TestNetns::new();
    let mut batch = String::new();
    let mut expected = BTreeSet::new();
    for i in 0..300u32 {
        let name = format!("ens{i}");
        batch.push_str(&format!("link add {name} type dummy\n"));
        batch.push_str(&format!("link set {name} up\n"));
        let v4 = format!("10.{}.{}.1", 100 + i / 256, i % 256);
        batch.push_str(&format!("addr add {v4}/24 dev {name}\n"));
        let v6 = format!("2001:db8:{i:x}::1");
        batch.push_str(&format!("addr add {v6}/64 dev {name} nodad\n"));
        expected.insert(v4.parse::<IpAddr>().unwrap_or_else(|e| panic!("{e}")));
        expected.insert(v6.parse::<IpAddr>().unwrap_or_else(|e| panic!("{e}")));
    }
    let file = std::env::temp_dir().join(format!("{}.batch", ns.name()));
    let write = |b: &str| std::fs::write(&file, b).unwrap_or_else(|e| panic!("{e}"));
    write(&batch);
    let path = file.to_string_lossy().into_owned();
    if ns.try_run("ip", &["-batch", &path]).is_err() {
        // No dummy driver: the same with ifb devices.
        let b = batch.replace("type dummy", "type ifb");
        let fresh = TestNetns::new();
        write(&b);
        fresh.run("ip", &["-batch", &path]);
        let _ = std::fs::remove_file(&file);
        let got = resolve(&opts(&fresh));
        assert_eq!(got, expected);
        return;
    }
    let _ = std::fs::remove_file(&file);
    assert_eq!(resolve(&opts(&ns)), expected);
}
