//! Kernel tests of `ipvsctl::vip`: each test works in a fresh network
//! namespace and checks what `VipDevice::converge` did with `ip` (an
//! observation independent of the library) and, where it matters, with
//! `ip monitor address`, which sees every address the kernel adds or
//! removes: a re-converge must touch exactly the difference.
//!
//! Needs root, `ip` (iproute2) and the dummy and veth drivers: the cargo
//! runner runs this binary inside the VM (`cargo test --test kernel_vip`).

mod support;

use std::collections::BTreeSet;
use std::net::{IpAddr, UdpSocket};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ipnetwork::IpNetwork;
use ipvsctl::conns::{ConnTable, Connection};
use ipvsctl::model::{ForwardMethod, RealServer, ServiceKey, VirtualServer};
use ipvsctl::netlink::netns::run_in;
use ipvsctl::nodeips::{self, Options};
use ipvsctl::sysctl::{Sysctls, knobs};
use ipvsctl::vip::{DEFAULT_DEVICE, VipDevice, VipError};
use ipvsctl::{Handle, HandleOptions, NetNs};
use support::TestNetns;

/// The test namespace, pinned.
fn pinned(ns: &TestNetns) -> ipvsctl::PinnedNetNs {
    NetNs::path(ns.path())
        .pin()
        .unwrap_or_else(|e| panic!("{e}"))
}

fn device(ns: &TestNetns, name: &str) -> VipDevice {
    VipDevice::new(name).expect("valid name").netns(pinned(ns))
}

fn ips(list: &[&str]) -> Vec<IpAddr> {
    list.iter().map(|s| s.parse().unwrap()).collect()
}

fn nets(list: &[&str]) -> Vec<IpNetwork> {
    list.iter().map(|s| s.parse().unwrap()).collect()
}

/// The addresses on `dev` as `ip -o addr show` lists them (`ADDR/PREFIX`),
/// IPv6 link-local left out, and whether any is tentative.
fn ip_addrs(ns: &TestNetns, dev: &str) -> (BTreeSet<String>, bool) {
    let out = ns.run("ip", &["-o", "addr", "show", "dev", dev]);
    let mut set = BTreeSet::new();
    let mut tentative = false;
    for line in out.lines() {
        let mut words = line.split_whitespace();
        let Some(addr) = words
            .find(|w| *w == "inet" || *w == "inet6")
            .and(words.next())
        else {
            continue;
        };
        if addr.starts_with("fe80:") {
            continue;
        }
        tentative |= line.contains("tentative");
        set.insert(addr.to_owned());
    }
    (set, tentative)
}

fn set(list: &[&str]) -> BTreeSet<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

/// `ip monitor address` in the namespace, between two marker changes on
/// interface `marker` so that everything in between was seen.
struct Monitor {
    child: Child,
    log: PathBuf,
}

impl Monitor {
    fn start(ns: &TestNetns, marker: &str) -> Monitor {
        let log = std::env::temp_dir().join(format!("vip-monitor-{}.log", ns.name()));
        let child = ns
            .command("ip")
            .args(["monitor", "address"])
            .stdout(Stdio::from(std::fs::File::create(&log).unwrap()))
            .spawn()
            .expect("start ip monitor");
        let m = Monitor { child, log };
        m.mark(ns, marker, "198.18.0.1/32");
        m
    }

    fn text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Adds `addr` to `marker` until the monitor has reported it (the
    /// monitor may not be listening yet when it starts).
    fn mark(&self, ns: &TestNetns, marker: &str, addr: &str) {
        let start = Instant::now();
        let bare = addr.split('/').next().unwrap();
        loop {
            let _ = ns.try_run("ip", &["addr", "del", addr, "dev", marker]);
            ns.run("ip", &["addr", "add", addr, "dev", marker]);
            std::thread::sleep(Duration::from_millis(200));
            if self
                .text()
                .lines()
                .any(|l| l.contains(bare) && !l.starts_with("Deleted"))
            {
                return;
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "ip monitor never reported {addr}:\n{}",
                self.text()
            );
        }
    }

    /// Stops after a last marker; the addresses seen added or deleted on
    /// `dev` after the first marker, as (`added`|`deleted`, ADDR/PREFIX),
    /// sorted, each once.
    fn stop(mut self, ns: &TestNetns, marker: &str, dev: &str) -> Vec<(String, String)> {
        self.mark(ns, marker, "198.18.0.2/32");
        let _ = self.child.kill();
        let _ = self.child.wait();
        let text = self.text();
        let _ = std::fs::remove_file(&self.log);
        let after_first = text
            .lines()
            .skip_while(|l| !l.contains("198.18.0.1"))
            .skip(1);
        let mut events = Vec::new();
        for line in after_first {
            let words: Vec<&str> = line.split_whitespace().collect();
            let deleted = words.first() == Some(&"Deleted");
            let mut it = words.iter();
            if !it.any(|w| *w == dev) {
                continue;
            }
            let Some(addr) = words
                .iter()
                .position(|w| *w == "inet" || *w == "inet6")
                .and_then(|i| words.get(i + 1))
            else {
                continue;
            };
            if addr.starts_with("fe80:") {
                continue;
            }
            let kind = if deleted { "deleted" } else { "added" };
            events.push((kind.to_owned(), (*addr).to_owned()));
        }
        // One IPv6 add shows twice: the kernel announces the address again
        // when duplicate address detection completes (at once on a dummy).
        events.sort();
        events.dedup();
        events
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A dummy named `name`, up, with `addrs`.
fn other_dummy(ns: &TestNetns, name: &str, addrs: &[&str]) {
    ns.run("ip", &["link", "add", name, "type", "dummy"]);
    ns.run("ip", &["link", "set", name, "up"]);
    for a in addrs {
        ns.run("ip", &["addr", "add", a, "dev", name]);
    }
}

#[test]
fn a_missing_device_is_created_up_as_a_dummy_with_host_prefixes() {
    let ns = TestNetns::new();
    let dev = device(&ns, DEFAULT_DEVICE);
    let report = dev
        .converge(ips(&["10.96.0.1", "10.96.0.2", "2001:db8::1"]))
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(report.is_ok(), "{:?}", report.failed);
    assert!(report.created && !report.brought_up);
    assert_eq!(
        report.added,
        nets(&["10.96.0.1/32", "10.96.0.2/32", "2001:db8::1/128"])
    );
    assert!(report.removed.is_empty());

    let link = ns.run("ip", &["-d", "link", "show", "dev", DEFAULT_DEVICE]);
    assert!(link.contains("dummy"), "{link}");
    assert!(link.contains(",UP"), "{link}");
    let (addrs, tentative) = ip_addrs(&ns, DEFAULT_DEVICE);
    assert_eq!(
        addrs,
        set(&["10.96.0.1/32", "10.96.0.2/32", "2001:db8::1/128"])
    );
    assert!(!tentative, "a VIP must be usable at once");
    let mut read = dev.addresses().unwrap_or_else(|e| panic!("{e}"));
    read.sort();
    assert_eq!(read, report.added);
}

#[test]
fn a_reconverge_touches_only_the_difference_and_no_other_interface() {
    let ns = TestNetns::new();
    // Another interface holding a VIP that will be removed from the device,
    // and an address of its own: neither may change.
    other_dummy(&ns, "ens3", &["192.168.10.5/24", "10.96.0.1/32"]);
    other_dummy(&ns, "marker0", &[]);
    let before_ens3 = ip_addrs(&ns, "ens3").0;
    let dev = device(&ns, "kube-ipvs0");
    dev.converge(ips(&["10.96.0.1", "10.96.0.2", "2001:db8::1"]))
        .unwrap_or_else(|e| panic!("{e}"));

    let monitor = Monitor::start(&ns, "marker0");
    let report = dev
        .converge(ips(&[
            "10.96.0.2",
            "10.96.0.3",
            "2001:db8::1",
            "2001:db8::2",
        ]))
        .unwrap_or_else(|e| panic!("{e}"));
    let events = monitor.stop(&ns, "marker0", "kube-ipvs0");
    assert!(report.is_ok(), "{:?}", report.failed);
    assert!(!report.created && !report.brought_up);
    assert_eq!(report.removed, nets(&["10.96.0.1/32"]));
    assert_eq!(report.added, nets(&["10.96.0.3/32", "2001:db8::2/128"]));
    assert_eq!(report.unchanged, 2);
    let want: Vec<(String, String)> = [
        ("added", "10.96.0.3/32"),
        ("added", "2001:db8::2/128"),
        ("deleted", "10.96.0.1/32"),
    ]
    .iter()
    .map(|(k, a)| ((*k).to_owned(), (*a).to_owned()))
    .collect();
    assert_eq!(events, want, "the kernel saw other changes");
    assert_eq!(
        ip_addrs(&ns, "kube-ipvs0").0,
        set(&[
            "10.96.0.2/32",
            "10.96.0.3/32",
            "2001:db8::1/128",
            "2001:db8::2/128"
        ])
    );
    assert_eq!(ip_addrs(&ns, "ens3").0, before_ens3);

    // Converged: nothing at all is sent.
    let monitor = Monitor::start(&ns, "marker0");
    let again = dev
        .converge(ips(&[
            "10.96.0.2",
            "10.96.0.3",
            "2001:db8::1",
            "2001:db8::2",
        ]))
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(!again.changed(), "{again:?}");
    assert_eq!(again.unchanged, 4);
    assert_eq!(monitor.stop(&ns, "marker0", "kube-ipvs0"), Vec::new());

    // An address someone put there at another prefix is replaced; an empty
    // set empties the device (the kernel's link-local address stays).
    ns.run("ip", &["addr", "add", "10.96.5.5/24", "dev", "kube-ipvs0"]);
    let report = dev
        .converge(ips(&["10.96.5.5"]))
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(report.removed.contains(&"10.96.5.5/24".parse().unwrap()));
    assert_eq!(report.added, nets(&["10.96.5.5/32"]));
    assert_eq!(ip_addrs(&ns, "kube-ipvs0").0, set(&["10.96.5.5/32"]));
    let report = dev.converge([]).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(report.removed, nets(&["10.96.5.5/32"]));
    assert!(ip_addrs(&ns, "kube-ipvs0").0.is_empty());
    assert_eq!(ip_addrs(&ns, "ens3").0, before_ens3);
}

#[test]
fn many_vips_converge_in_pipelined_batches() {
    let ns = TestNetns::new();
    let dev = device(&ns, "kube-ipvs0");
    let many: Vec<IpAddr> = (0..600u32)
        .map(|i| IpAddr::from([10, 97, (i / 250) as u8, (i % 250 + 1) as u8]))
        .collect();
    let report = dev.converge(many.clone()).unwrap_or_else(|e| panic!("{e}"));
    assert!(report.is_ok(), "{:?}", report.failed.first());
    assert_eq!(report.added.len(), 600);
    assert_eq!(ip_addrs(&ns, "kube-ipvs0").0.len(), 600);
    let report = dev
        .converge(many[..300].to_vec())
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((report.removed.len(), report.unchanged), (300, 300));
    assert_eq!(ip_addrs(&ns, "kube-ipvs0").0.len(), 300);
}

#[test]
fn a_down_dummy_is_brought_up() {
    let ns = TestNetns::new();
    ns.run("ip", &["link", "add", "kube-ipvs0", "type", "dummy"]);
    let report = device(&ns, "kube-ipvs0")
        .converge(ips(&["10.96.0.1"]))
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(!report.created && report.brought_up);
    let link = ns.run("ip", &["link", "show", "dev", "kube-ipvs0"]);
    assert!(link.contains(",UP"), "{link}");
}

#[test]
fn a_same_named_interface_that_is_not_a_dummy_is_refused_and_left_alone() {
    let ns = TestNetns::new();
    ns.run(
        "ip",
        &[
            "link",
            "add",
            "kube-ipvs0",
            "type",
            "veth",
            "peer",
            "name",
            "peer0",
        ],
    );
    ns.run("ip", &["addr", "add", "192.0.2.1/24", "dev", "kube-ipvs0"]);
    let before = ip_addrs(&ns, "kube-ipvs0").0;
    let dev = device(&ns, "kube-ipvs0");
    match dev.converge(ips(&["10.96.0.1"])) {
        Err(VipError::NotDummy { device, kind }) => {
            assert_eq!(device, "kube-ipvs0");
            assert_eq!(kind.as_deref(), Some("veth"));
        }
        other => panic!("expected NotDummy, got {other:?}"),
    }
    let err = dev.converge(ips(&["10.96.0.1"])).unwrap_err();
    assert!(err.to_string().contains("kube-ipvs0"), "{err}");
    assert!(err.to_string().contains("veth"), "{err}");
    assert_eq!(ip_addrs(&ns, "kube-ipvs0").0, before);
    let link = ns.run("ip", &["link", "show", "dev", "kube-ipvs0"]);
    assert!(!link.contains(",UP"), "brought up: {link}");
}

#[test]
fn bad_input_is_refused_before_anything_is_sent() {
    let ns = TestNetns::new();
    let dev = device(&ns, "kube-ipvs0");
    match dev.converge(ips(&["10.96.0.1", "fe80::1"])) {
        Err(VipError::InvalidAddress { addr, .. }) => {
            assert_eq!(addr, "fe80::1".parse::<IpAddr>().unwrap())
        }
        other => panic!("{other:?}"),
    }
    // Nothing was created.
    assert!(
        ns.try_run("ip", &["link", "show", "dev", "kube-ipvs0"])
            .is_err(),
        "the device was created"
    );
}

#[test]
fn the_device_lives_in_the_namespace_of_the_handle() {
    let (ns, handle) = support::netns_with_handle();
    let dev = VipDevice::new("kube-ipvs0")
        .unwrap()
        .netns(handle.netns().clone());
    dev.converge(ips(&["10.96.0.1"]))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(ip_addrs(&ns, "kube-ipvs0").0, set(&["10.96.0.1/32"]));
    // Not in the test's own namespace.
    let here = VipDevice::new("kube-ipvs0").unwrap();
    match here.addresses() {
        Err(VipError::Kernel { source, .. }) => assert_eq!(source.raw_os_error(), Some(19)),
        other => panic!("expected ENODEV in the current namespace, got {other:?}"),
    }
}

#[test]
fn node_ips_skip_the_vip_device() {
    let ns = TestNetns::new();
    other_dummy(&ns, "ens3", &["192.168.10.5/24"]);
    device(&ns, DEFAULT_DEVICE)
        .converge(ips(&["10.96.0.1", "2001:db8::a"]))
        .unwrap_or_else(|e| panic!("{e}"));
    let opts = Options::new().netns(pinned(&ns));
    let found = nodeips::node_ip_addrs(&opts).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(found, ips(&["192.168.10.5"]));
    let all = nodeips::node_ip_addrs(&opts.include(DEFAULT_DEVICE)).unwrap();
    assert_eq!(all, ips(&["10.96.0.1", "192.168.10.5", "2001:db8::a"]));

    // Another device name is excluded when named.
    device(&ns, "ipvs0")
        .converge(ips(&["10.96.0.2"]))
        .unwrap_or_else(|e| panic!("{e}"));
    let opts = Options::new().netns(pinned(&ns)).exclude("ipvs0");
    assert_eq!(
        nodeips::node_ip_addrs(&opts).unwrap(),
        ips(&["192.168.10.5"])
    );
}

/// `ip netns del NAME; ip netns add NAME`: from now on the name leads to a
/// fresh namespace.
fn recreate(ns: &TestNetns) {
    for args in [["netns", "del", ns.name()], ["netns", "add", ns.name()]] {
        let out = Command::new(support::tool("ip"))
            .args(args)
            .output()
            .expect("start ip");
        assert!(
            out.status.success(),
            "ip {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// `ip -o addr show dev DEV` from a thread inside `ns`, `None` if it fails
/// (no such device).
fn addrs_in(ns: &NetNs, dev: &str) -> Option<String> {
    let mut ip = Command::new(support::tool("ip"));
    ip.args(["-o", "addr", "show", "dev", dev]);
    let out = run_in(ns, || ip.output()).expect("run ip");
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `file` (under /proc, which shows the namespace of the thread that opens
/// it) read from a thread inside `ns`.
fn proc_in(ns: &NetNs, file: &str) -> String {
    run_in(ns, || std::fs::read_to_string(file)).unwrap_or_else(|e| panic!("{file}: {e}"))
}

/// A VIP device, a node-IP resolver, a sysctl writer and a connection reader
/// given a handle's namespace keep working there after its name is deleted
/// and given to a new namespace: with the handle's IPVS table, not in the
/// newcomer.
#[test]
fn every_component_stays_in_its_namespace_when_the_name_is_reused() {
    let ns = TestNetns::with_ipvs();
    let ipvs = Handle::open(&NetNs::named(ns.name()), &HandleOptions::new()).expect("handle");
    let lb = ipvs.netns().clone();
    let device = VipDevice::new("vip0").unwrap().netns(lb.clone());
    let resolver = Options::new().netns(lb.clone());
    let sysctls = Sysctls::new().netns(lb.clone());
    let table = ConnTable::new().netns(lb.clone());
    // The namespace as it is now: a node IP, and a UDP service on it whose
    // real server is behind it.
    other_dummy(&ns, "ens3", &["10.1.0.1/24"]);
    let service = "10.1.0.1:53".parse().unwrap();
    let key = ServiceKey::udp(service);
    ipvs.add_service(&VirtualServer::new(key))
        .expect("add service");
    let real =
        RealServer::new("10.1.0.2:53".parse().unwrap()).with_forward(ForwardMethod::Masquerade);
    ipvs.add_destination(&key, &real).expect("add destination");

    recreate(&ns);
    // What the test looks through: the original namespace by the handle's
    // pin, the newcomer by name.
    let there = NetNs::from(&lb);
    let newcomer = NetNs::named(ns.name());
    let mut wrong = Vec::new();

    match device.converge(ips(&["10.96.0.10"])) {
        Ok(_) => {
            if !addrs_in(&there, "vip0").is_some_and(|a| a.contains("10.96.0.10/32")) {
                wrong.push("VIP: not on vip0 in the original namespace".to_owned());
            }
            if addrs_in(&newcomer, "vip0").is_some() {
                wrong.push("VIP: vip0 created in the namespace that took the name".to_owned());
            }
        }
        Err(e) => wrong.push(format!("VIP: {e}")),
    }
    match nodeips::node_ip_addrs(&resolver) {
        Ok(found) if found == ips(&["10.1.0.1", "10.96.0.10"]) => {}
        other => wrong.push(format!("node IPs: {other:?}")),
    }
    match sysctls.write(&knobs::CONNTRACK, &true) {
        Ok(()) => {
            let conntrack = "/proc/sys/net/ipv4/vs/conntrack";
            let (orig, new) = (proc_in(&there, conntrack), proc_in(&newcomer, conntrack));
            if (orig.trim(), new.trim()) != ("1", "0") {
                wrong.push(format!(
                    "sysctl: conntrack {orig:?} in the original namespace, {new:?} in the newcomer"
                ));
            }
        }
        Err(e) => wrong.push(format!("sysctl: {e}")),
    }
    // A datagram to the service from inside the original namespace makes a
    // connection entry there.
    let sent = run_in(&there, || {
        UdpSocket::bind("0.0.0.0:0")?.send_to(b"x", service)
    });
    match table
        .connections()
        .map(|r| r.collect::<Result<Vec<Connection>, _>>())
    {
        Ok(Ok(entries)) if entries.iter().any(|c| c.virtual_addr == service) => {}
        other => wrong.push(format!(
            "connections: no entry for {service} (datagram sent: {sent:?}): {other:?}"
        )),
    }
    assert!(
        wrong.is_empty(),
        "components that left the original namespace:\n{}",
        wrong.join("\n")
    );
}
