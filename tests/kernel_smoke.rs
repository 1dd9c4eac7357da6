//! Smoke tests of the kernel test harness itself: Debian's `ipvsadm` against
//! the real kernel's IPVS, each test in its own fresh network namespace.
//!
//! They prove that a kernel test binary reaches a real IPVS (on the host when
//! it has one and we are root, otherwise in the QEMU guest the cargo runner
//! boots), independently of the library's own code. Addresses are from the
//! documentation ranges (192.0.2.0/24, 2001:db8::/32); no packet is sent.

mod support;

use support::TestNetns;

/// The IPVS table of `ns` as `ipvsadm -Ln` prints it, without the three
/// header lines and with runs of whitespace collapsed to one space.
fn table(ns: &TestNetns) -> Vec<String> {
    let out = ns.ipvsadm("-Ln");
    let mut lines = out.lines();
    let header: Vec<&str> = lines.by_ref().take(3).collect();
    assert!(
        header
            .first()
            .is_some_and(|l| l.starts_with("IP Virtual Server version")),
        "unexpected ipvsadm output:\n{out}"
    );
    lines
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|l| !l.is_empty())
        .collect()
}

#[test]
fn fresh_namespace_has_lo_up_and_an_empty_table() {
    support::require_ipvs();
    let ns = TestNetns::new();
    assert!(ns.path().exists(), "{} missing", ns.path().display());
    assert_eq!(ns.path().file_name().unwrap(), ns.name());
    let lo = ns.run("ip", &["-o", "link", "show", "lo"]);
    assert!(lo.contains(",UP"), "lo is not up: {lo}");
    assert_eq!(table(&ns), Vec::<String>::new());
}

#[test]
fn tcp_service_with_destinations() {
    support::require_ipvs();
    let ns = TestNetns::new();
    ns.ipvsadm("-A -t 192.0.2.1:80 -s rr");
    ns.ipvsadm("-a -t 192.0.2.1:80 -r 192.0.2.10:8080 -m -w 3");
    ns.ipvsadm("-a -t 192.0.2.1:80 -r 192.0.2.11:8080 -m -w 1");
    assert_eq!(
        table(&ns),
        [
            "TCP 192.0.2.1:80 rr",
            "-> 192.0.2.10:8080 Masq 3 0 0",
            "-> 192.0.2.11:8080 Masq 1 0 0",
        ]
    );

    // Edit a weight, drop a destination, then the service.
    ns.ipvsadm("-e -t 192.0.2.1:80 -r 192.0.2.11:8080 -m -w 0");
    ns.ipvsadm("-d -t 192.0.2.1:80 -r 192.0.2.10:8080");
    assert_eq!(
        table(&ns),
        ["TCP 192.0.2.1:80 rr", "-> 192.0.2.11:8080 Masq 0 0 0"]
    );
    ns.ipvsadm("-D -t 192.0.2.1:80");
    assert_eq!(table(&ns), Vec::<String>::new());
}

#[test]
fn udp_service_with_persistence_and_scheduler_module() {
    support::require_ipvs();
    let ns = TestNetns::new();
    // wlc is a separate module (ip_vs_wlc): this also exercises the kernel's
    // module autoload from inside the guest.
    ns.ipvsadm("-A -u 192.0.2.2:53 -s wlc -p 120");
    ns.ipvsadm("-a -u 192.0.2.2:53 -r 192.0.2.20:53 -m");
    assert_eq!(
        table(&ns),
        [
            "UDP 192.0.2.2:53 wlc persistent 120",
            "-> 192.0.2.20:53 Masq 1 0 0",
        ]
    );
}

#[test]
fn ipv6_services_and_firewall_marks() {
    support::require_ipvs();
    let ns = TestNetns::new();
    ns.ipvsadm("-A -t [2001:db8::1]:443 -s wrr");
    ns.ipvsadm("-a -t [2001:db8::1]:443 -r [2001:db8::10]:8443 -m -w 2");
    ns.ipvsadm("-A -f 42 -6 -s sh");
    ns.ipvsadm("-a -f 42 -6 -r 2001:db8::20 -m");
    ns.ipvsadm("-A -f 7 -s rr");
    ns.ipvsadm("-a -f 7 -r 192.0.2.30 -m -w 5");

    let mut lines = table(&ns);
    // ipvsadm lists in hash-table order: compare each service with its destinations.
    let mut services: Vec<Vec<String>> = Vec::new();
    for l in lines.drain(..) {
        if l.starts_with("->") {
            services
                .last_mut()
                .expect("destination before service")
                .push(l);
        } else {
            services.push(vec![l]);
        }
    }
    services.sort();
    assert_eq!(
        services,
        [
            vec!["FWM 42 IPv6 sh", "-> [2001:db8::20]:0 Masq 1 0 0"],
            vec!["FWM 7 rr", "-> 192.0.2.30:0 Masq 5 0 0"],
            vec![
                "TCP [2001:db8::1]:443 wrr",
                "-> [2001:db8::10]:8443 Masq 2 0 0"
            ],
        ]
    );
}

#[test]
fn namespaces_are_isolated() {
    support::require_ipvs();
    let a = TestNetns::new();
    let b = TestNetns::new();
    assert_ne!(a.name(), b.name());

    a.ipvsadm("-A -t 192.0.2.3:80 -s rr");
    assert_eq!(table(&a), ["TCP 192.0.2.3:80 rr"]);
    assert_eq!(table(&b), Vec::<String>::new());

    // The same service key may exist in both, with different contents.
    b.ipvsadm("-A -t 192.0.2.3:80 -s lc");
    b.ipvsadm("-a -t 192.0.2.3:80 -r 192.0.2.40:80 -m");
    assert_eq!(table(&a), ["TCP 192.0.2.3:80 rr"]);
    assert_eq!(
        table(&b),
        ["TCP 192.0.2.3:80 lc", "-> 192.0.2.40:80 Masq 1 0 0"]
    );

    a.ipvsadm("-C");
    assert_eq!(table(&a), Vec::<String>::new());
    assert_eq!(table(&b).len(), 2);
}

#[test]
fn namespace_is_deleted_on_drop() {
    support::require_ipvs();
    let path = {
        let ns = TestNetns::new();
        ns.ipvsadm("-A -t 192.0.2.4:80");
        ns.path().to_path_buf()
    };
    assert!(!path.exists(), "{} still exists", path.display());
}
