//! IPVS and ARP sysctls through `ipvsctl::sysctl` on the real kernel, each
//! test in its own fresh namespace: the kernel's defaults, set and read
//! back (checked with `sysctl -n` too, and against the initial namespace),
//! values out of range refused before anything is written, knobs a kernel
//! lacks reported as such.
//!
//! Runs in the VM through the cargo runner (`cargo test --test kernel_sysctl`).

mod support;

use ipvsctl::NetNs;
use ipvsctl::sysctl::{ArpAnnounce, ArpIgnore, ConnReuseMode, Knob, SysctlError, Sysctls, knobs};
use support::TestNetns;

/// Whether the running kernel is at least `major.minor`.
fn kernel_at_least(major: u32, minor: u32) -> bool {
    let release = support::kernel_release();
    let mut parts = release
        .split(|c: char| !c.is_ascii_digit())
        .map(|p| p.parse::<u32>().unwrap_or(0));
    let have = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    have >= (major, minor)
}

fn ns_of(t: &TestNetns) -> Sysctls {
    Sysctls::new().netns(NetNs::path(t.path()).pin().expect("pin the test namespace"))
}

/// `sysctl -n NAME` inside the namespace: an observation independent of the library.
fn sysctl_n(t: &TestNetns, name: &str) -> String {
    t.run("sysctl", &["-n", name]).trim().to_owned()
}

#[test]
fn defaults_of_a_fresh_namespace() {
    let t = TestNetns::with_ipvs();
    let ns = ns_of(&t);
    let read_bool = |k: &Knob<bool>| ns.read(k).unwrap_or_else(|e| panic!("{e}"));
    assert!(!read_bool(&knobs::CONNTRACK));
    assert!(!read_bool(&knobs::EXPIRE_NODEST_CONN));
    assert!(!read_bool(&knobs::EXPIRE_QUIESCENT_TEMPLATE));
    assert!(!read_bool(&knobs::CACHE_BYPASS));
    assert!(read_bool(&knobs::SNAT_REROUTE));
    assert!(read_bool(&knobs::PMTU_DISC));
    assert!(!read_bool(&knobs::SLOPPY_TCP));
    assert!(!read_bool(&knobs::BACKUP_ONLY));
    // run_estimation came with 5.16: on by default from there, absent before.
    match (kernel_at_least(5, 16), ns.read(&knobs::RUN_ESTIMATION)) {
        (true, Ok(on)) => assert!(on),
        (false, Err(SysctlError::NotAvailable { knob, .. })) => {
            assert_eq!(knob, "net.ipv4.vs.run_estimation")
        }
        (newer, other) => panic!("run_estimation (>= 5.16: {newer}): {other:?}"),
    }
    for k in [
        &knobs::SLOPPY_SCTP,
        &knobs::NAT_ICMP_SEND,
        &knobs::SCHEDULE_ICMP,
        &knobs::IGNORE_TUNNELED,
        &knobs::SYNC_PERSIST_MODE,
    ] {
        assert!(!read_bool(k), "{}", k.name());
    }
    assert_eq!(
        ns.read(&knobs::CONN_REUSE_MODE).ok(),
        Some(ConnReuseMode::RESCHEDULE)
    );
    let int = |k: &Knob<i32>| ns.read(k).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(int(&knobs::AMEMTHRESH), 1024);
    assert_eq!(int(&knobs::AM_DROPRATE), 10);
    assert_eq!(int(&knobs::DROP_ENTRY), 0);
    assert_eq!(int(&knobs::DROP_PACKET), 0);
    assert_eq!(int(&knobs::SECURE_TCP), 0);
    assert_eq!(int(&knobs::SYNC_VERSION), 1);
    assert_eq!(int(&knobs::SYNC_PORTS), 1);
    assert_eq!(int(&knobs::SYNC_RETRIES), 0);
    assert_eq!(int(&knobs::SYNC_SOCK_SIZE), 0);
    assert_eq!(int(&knobs::SYNC_REFRESH_PERIOD), 0);
    let qlen = ns.read(&knobs::SYNC_QLEN_MAX).expect("sync_qlen_max");
    assert_eq!(qlen.to_string(), sysctl_n(&t, "net.ipv4.vs.sync_qlen_max"));
    let ignore = knobs::arp_ignore("all").expect("knob");
    assert_eq!(ns.read(&ignore).ok(), Some(ArpIgnore::AnyAddress));
    let announce = knobs::arp_announce("lo").expect("knob");
    assert_eq!(ns.read(&announce).ok(), Some(ArpAnnounce::AnyAddress));
    if kernel_at_least(6, 2) {
        assert_eq!(ns.read(&knobs::EST_NICE).ok(), Some(0));
    }
}

#[test]
fn values_set_read_back_in_that_namespace_only() {
    let t = TestNetns::with_ipvs();
    let ns = ns_of(&t);
    let before_root = Sysctls::new()
        .read(&knobs::CONNTRACK)
        .expect("root conntrack");
    ns.write(&knobs::CONNTRACK, &!before_root)
        .expect("conntrack");
    ns.write(&knobs::EXPIRE_NODEST_CONN, &true)
        .expect("expire_nodest_conn");
    ns.write(&knobs::EXPIRE_QUIESCENT_TEMPLATE, &true)
        .expect("expire_quiescent");
    ns.write(&knobs::CONN_REUSE_MODE, &ConnReuseMode::all())
        .expect("conn_reuse_mode");
    ns.write(&knobs::SYNC_RETRIES, &3).expect("sync_retries");
    ns.write(&knobs::SYNC_PORTS, &4).expect("sync_ports");
    let ignore = knobs::arp_ignore("all").expect("knob");
    let announce = knobs::arp_announce("all").expect("knob");
    ns.write(&ignore, &ArpIgnore::IncomingInterface)
        .expect("arp_ignore");
    ns.write(&announce, &ArpAnnounce::BestLocalAddress)
        .expect("arp_announce");

    assert_eq!(ns.read(&knobs::CONNTRACK).ok(), Some(!before_root));
    assert_eq!(ns.read(&knobs::EXPIRE_NODEST_CONN).ok(), Some(true));
    assert_eq!(ns.read(&knobs::EXPIRE_QUIESCENT_TEMPLATE).ok(), Some(true));
    assert_eq!(
        ns.read(&knobs::CONN_REUSE_MODE).ok(),
        Some(ConnReuseMode::all())
    );
    assert_eq!(ns.read(&knobs::SYNC_RETRIES).ok(), Some(3));
    assert_eq!(ns.read(&ignore).ok(), Some(ArpIgnore::IncomingInterface));
    assert_eq!(ns.read(&announce).ok(), Some(ArpAnnounce::BestLocalAddress));
    // What sysctl(8) sees in that namespace.
    assert_eq!(sysctl_n(&t, "net.ipv4.vs.conn_reuse_mode"), "3");
    assert_eq!(sysctl_n(&t, "net.ipv4.vs.sync_ports"), "4");
    assert_eq!(sysctl_n(&t, "net.ipv4.conf.all.arp_ignore"), "1");
    assert_eq!(sysctl_n(&t, "net.ipv4.conf.all.arp_announce"), "2");
    // The initial namespace is untouched.
    assert_eq!(
        Sysctls::new().read(&knobs::CONNTRACK).ok(),
        Some(before_root)
    );
    if kernel_at_least(6, 2) {
        ns.write(&knobs::EST_NICE, &-5).expect("est_nice");
        assert_eq!(sysctl_n(&t, "net.ipv4.vs.est_nice"), "-5");
    }
}

#[test]
fn out_of_range_is_refused_before_writing() {
    let t = TestNetns::with_ipvs();
    let ns = ns_of(&t);
    for bad in [4, -1] {
        match ns.write(&knobs::SYNC_RETRIES, &bad) {
            Err(SysctlError::Invalid { knob, reason, .. }) => {
                assert_eq!(knob, "net.ipv4.vs.sync_retries");
                assert_eq!(reason, "must be from 0 to 3");
            }
            other => panic!("sync_retries={bad}: {other:?}"),
        }
    }
    assert!(matches!(
        ns.write(&knobs::SYNC_PORTS, &3),
        Err(SysctlError::Invalid { .. })
    ));
    assert!(matches!(
        ns.write(&knobs::CONN_REUSE_MODE, &ConnReuseMode::from_bits_retain(4)),
        Err(SysctlError::Invalid { .. })
    ));
    let ignore = knobs::arp_ignore("all").expect("knob");
    assert!(matches!(
        ns.write(&ignore, &ArpIgnore::Other(5)),
        Err(SysctlError::Invalid { .. })
    ));
    // Nothing reached the kernel.
    assert_eq!(sysctl_n(&t, "net.ipv4.vs.sync_retries"), "0");
    assert_eq!(sysctl_n(&t, "net.ipv4.vs.sync_ports"), "1");
    assert_eq!(sysctl_n(&t, "net.ipv4.vs.conn_reuse_mode"), "1");
    assert_eq!(sysctl_n(&t, "net.ipv4.conf.all.arp_ignore"), "0");
}

#[test]
fn missing_knobs_are_typed_errors() {
    let t = TestNetns::with_ipvs();
    let ns = ns_of(&t);
    let release = support::kernel_release();
    // est_nice came with 6.2: absent on 6.1, present on 6.12.
    match (kernel_at_least(6, 2), ns.read(&knobs::EST_NICE)) {
        (true, Ok(_)) => {}
        (false, Err(SysctlError::NotAvailable { knob, kernel })) => {
            assert_eq!(knob, "net.ipv4.vs.est_nice");
            assert_eq!(kernel, release);
        }
        (newer, other) => panic!("est_nice on {release} (>= 6.2: {newer}): {other:?}"),
    }
    let fake = knobs::ipvs_integer("no_such_knob").expect("valid name");
    for result in [ns.read(&fake).map(|_| ()), ns.write(&fake, &1)] {
        match result {
            Err(SysctlError::NotAvailable { knob, kernel }) => {
                assert_eq!(knob, "net.ipv4.vs.no_such_knob");
                assert_eq!(kernel, release);
            }
            other => panic!("{other:?}"),
        }
    }
    let no_dev = knobs::arp_ignore("nosuchdev0").expect("valid name");
    match ns.read(&no_dev) {
        Err(SysctlError::NoSuchInterface { interface, .. }) => {
            assert_eq!(interface, "nosuchdev0")
        }
        other => panic!("{other:?}"),
    }
}
