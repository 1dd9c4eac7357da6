//! mini-proxy (`examples/mini-proxy`) against a real kernel, and the `serde`
//! feature it reads its desired state with.
//!
//! Needs `--features serde` (the example requires it):
//! `cargo test --features serde --test kernel_miniproxy`. The kernel test
//! runs the example's binary (built by `cargo test` next to the test
//! binaries) inside a fresh namespace with node interfaces named `ens3` and
//! `bond0`, with no `PATH` (it must run no external program), rewrites the
//! desired-state file step by step and checks the kernel's table and the
//! VIPs on the proxy's dummy device after each sync, and the IPVS and
//! strict-ARP sysctls it set at start; finally SIGTERM with `--cleanup`
//! removes the proxy's services and VIPs and leaves a foreign service alone.
#![cfg(all(feature = "serde", feature = "kmod"))]

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ipvsctl::model::{
    AddressFamily, ForwardMethod, Netmask, PersistenceEngine, RealServer, Scheduler, ServiceFlags,
    ServiceKey, Tunnel, VirtualServer,
};
use ipvsctl::sync::{FileLedger, Ledger, Ownership};
use ipvsctl::{Handle, HandleOptions, NetNs};
use support::TestNetns;

// ---------------------------------------------------------------- serde ---

#[test]
fn serde_schedulers_are_kernel_names() {
    assert_eq!(
        serde_json::to_string(&Scheduler::WeightedRoundRobin).unwrap(),
        r#""wrr""#
    );
    assert_eq!(
        serde_json::from_str::<Scheduler>(r#""mh""#).unwrap(),
        Scheduler::MaglevHashing
    );
    // An unknown name is an out-of-tree scheduler, kept as written.
    assert_eq!(
        serde_json::from_str::<Scheduler>(r#""mine""#).unwrap(),
        Scheduler::Other("mine".into())
    );
    assert_eq!(
        serde_json::to_string(&Scheduler::Other("mine".into())).unwrap(),
        r#""mine""#
    );
    for s in Scheduler::BUILT_IN {
        let json = serde_json::to_string(&s).unwrap();
        assert_eq!(json, format!("\"{}\"", s.name()));
        assert_eq!(serde_json::from_str::<Scheduler>(&json).unwrap(), s);
    }
}

#[test]
fn serde_virtual_server_round_trip_and_defaults() {
    let vs = VirtualServer::new(ServiceKey::tcp("10.96.0.10:80".parse().unwrap()))
        .with_scheduler(Scheduler::SourceHashing)
        .with_persistence(120)
        .with_flags(ServiceFlags::SCHED1)
        .with_persistence_engine(PersistenceEngine::sip());
    let json = serde_json::to_string(&vs).unwrap();
    assert_eq!(serde_json::from_str::<VirtualServer>(&json).unwrap(), vs);

    // Flags, timeout and persistence engine may be left out; the key,
    // scheduler and netmask may not (a netmask has no family-free default).
    let netmask = serde_json::to_string(&Netmask::full(AddressFamily::Inet)).unwrap();
    let short = format!(
        r#"{{"key":{{"addr":{{"protocol":"udp","addr":"10.96.0.53:53"}}}},"scheduler":"rr","netmask":{netmask}}}"#
    );
    assert_eq!(
        serde_json::from_str::<VirtualServer>(&short).expect("short form"),
        VirtualServer::new(ServiceKey::udp("10.96.0.53:53".parse().unwrap()))
            .with_scheduler(Scheduler::RoundRobin)
    );
    let missing = serde_json::from_str::<VirtualServer>(r#"{"scheduler":"rr"}"#).unwrap_err();
    assert!(missing.to_string().contains("key"), "{missing}");
}

#[test]
fn serde_real_server_round_trip() {
    for fwd in [
        ForwardMethod::Masquerade,
        ForwardMethod::DirectRoute,
        ForwardMethod::Local,
        ForwardMethod::Tunnel(Tunnel::gue(6080)),
        ForwardMethod::Tunnel(Tunnel::gre()),
    ] {
        let rs = RealServer::new("[2001:db8::1]:8080".parse().unwrap())
            .with_weight(7)
            .with_forward(fwd)
            .with_thresholds(100, 50);
        let json = serde_json::to_string(&rs).unwrap();
        assert_eq!(
            serde_json::from_str::<RealServer>(&json).unwrap(),
            rs,
            "{json}"
        );
    }
    let rs: RealServer =
        serde_json::from_str(r#"{"addr":"10.1.0.2:8080","weight":3,"forward":"masquerade"}"#)
            .unwrap();
    assert_eq!(
        rs,
        RealServer::new("10.1.0.2:8080".parse().unwrap())
            .with_weight(3)
            .with_forward(ForwardMethod::Masquerade)
    );
    let bad = serde_json::from_str::<RealServer>(
        r#"{"addr":"10.1.0.2:8080","weight":3,"forward":"nat"}"#,
    )
    .unwrap_err();
    assert!(bad.to_string().contains("nat"), "{bad}");
}

// ----------------------------------------------------------- mini-proxy ---

/// The running proxy with its log file; killed (SIGKILL) if still running
/// on drop.
struct Proxy {
    child: Child,
    log: PathBuf,
}

impl Proxy {
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Writes the state file atomically (the proxy never sees half a file).
fn write_state(path: &Path, json: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, json).expect("write state");
    std::fs::rename(&tmp, path).expect("rename state");
}

type Table = BTreeMap<ServiceKey, (Scheduler, BTreeMap<SocketAddr, u32>)>;

/// Reads the kernel's table. The proxy may delete a service between the
/// service dump and that service's real-server dump; the read is then
/// taken again, so a table is always one the kernel held.
fn table(h: &Handle) -> Table {
    let start = Instant::now();
    loop {
        match try_table(h) {
            Ok(t) => return t,
            Err(ipvsctl::Error::ServiceNotFound { .. })
                if start.elapsed() < Duration::from_secs(15) =>
            {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("read the table: {e:?}"),
        }
    }
}

fn try_table(h: &Handle) -> Result<Table, ipvsctl::Error> {
    let mut t = Table::new();
    for s in h.list_services()? {
        let dests = h
            .list_destinations(&s.service.key)?
            .into_iter()
            .map(|d| (d.server.addr, d.server.weight))
            .collect();
        t.insert(s.service.key, (s.service.scheduler.clone(), dests));
    }
    Ok(t)
}

/// Waits (up to 15 s) until the kernel's table is `want`.
fn wait_for(h: &Handle, want: &Table, proxy: &Proxy, step: &str) {
    let start = Instant::now();
    loop {
        let got = table(h);
        if &got == want {
            return;
        }
        if start.elapsed() > Duration::from_secs(15) {
            panic!(
                "{step}: the kernel's table is not the desired one\n got: {got:#?}\nwant: {want:#?}\nproxy log:\n{}",
                proxy.log()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn tcp(s: &str) -> ServiceKey {
    ServiceKey::tcp(s.parse().unwrap())
}

fn udp(s: &str) -> ServiceKey {
    ServiceKey::udp(s.parse().unwrap())
}

/// The addresses on `dev` (`ADDR/PREFIX`, IPv6 link-local left out).
fn dev_addrs(ns: &TestNetns, dev: &str) -> BTreeSet<String> {
    ns.run("ip", &["-o", "addr", "show", "dev", dev])
        .lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            words.find(|w| *w == "inet" || *w == "inet6")?;
            words.next().map(str::to_owned)
        })
        .filter(|a| !a.starts_with("fe80:"))
        .collect()
}

/// Waits (up to 15 s) until `dev` holds exactly `want`.
fn wait_for_vips(ns: &TestNetns, dev: &str, want: &[&str], proxy: &Proxy, step: &str) {
    let want: BTreeSet<String> = want.iter().map(|s| (*s).to_owned()).collect();
    let start = Instant::now();
    loop {
        let got = dev_addrs(ns, dev);
        if got == want {
            return;
        }
        if start.elapsed() > Duration::from_secs(15) {
            panic!(
                "{step}: {dev} holds {got:?}, want {want:?}\nproxy log:\n{}",
                proxy.log()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `sysctl -n NAME` inside the namespace.
fn sysctl_n(ns: &TestNetns, name: &str) -> String {
    ns.run("sysctl", &["-n", name]).trim().to_owned()
}

fn dests(list: &[(&str, u32)]) -> BTreeMap<SocketAddr, u32> {
    list.iter().map(|(a, w)| (a.parse().unwrap(), *w)).collect()
}

const NODE_IPS: [&str; 2] = ["192.168.10.5", "192.168.20.5"];

#[test]
fn mini_proxy_follows_the_state_file() {
    let bin = support::example_binary("mini-proxy");
    let ns = TestNetns::with_ipvs();
    // Node interfaces with the names kube-proxy v1.9's eth* guess missed.
    ns.run("ip", &["link", "add", "ens3", "type", "dummy"]);
    if ns
        .try_run("ip", &["link", "add", "bond0", "type", "bond"])
        .is_err()
    {
        ns.run("ip", &["link", "add", "bond0", "type", "dummy"]);
    }
    ns.run("ip", &["addr", "add", "192.168.10.5/24", "dev", "ens3"]);
    ns.run("ip", &["addr", "add", "192.168.20.5/24", "dev", "bond0"]);
    // The proxy's VIP device, with a stale address that must not get a
    // NodePort service and that the proxy removes (the device is its own).
    ns.run("ip", &["link", "add", "kp-ipvs0", "type", "dummy"]);
    ns.run("ip", &["addr", "add", "172.30.0.1/32", "dev", "kp-ipvs0"]);
    for dev in ["ens3", "bond0", "kp-ipvs0"] {
        ns.run("ip", &["link", "set", dev, "up"]);
    }
    // A foreign service the proxy must never touch.
    ns.ipvsadm("-A -t 10.200.0.1:80 -s lc");

    let dir = std::env::temp_dir().join(format!("mini-proxy-{}", ns.name()));
    std::fs::create_dir_all(&dir).unwrap();
    let state = dir.join("state.json");
    let log = dir.join("proxy.log");

    let web = |sched: &str, eps: &str| {
        format!(
            r#"{{"name":"web","vip":"10.96.0.10","port":80,"protocol":"tcp","scheduler":"{sched}","node_port":30080,"endpoints":[{eps}]}}"#
        )
    };
    let dns = r#"{"name":"dns","vip":"10.96.0.53","port":53,"protocol":"udp","endpoints":[{"ip":"10.1.0.7","port":53}]}"#;
    let api = r#"{"name":"api","vip":"10.96.0.20","port":443,"protocol":"tcp","scheduler":"wlc","endpoints":[{"ip":"10.1.0.9","port":6443,"weight":2}]}"#;
    let two = r#"{"ip":"10.1.0.2","port":8080},{"ip":"10.1.0.3","port":8080}"#;
    write_state(
        &state,
        &format!(
            r#"{{"strict_arp":true,"services":[{},{dns}]}}"#,
            web("rr", two)
        ),
    );

    // No PATH: the proxy must not need `ip`, `sysctl` or any other program.
    let child = Command::new(&bin)
        .env("PATH", "/nonexistent")
        .args(["--config", state.to_str().unwrap(), "--netns", ns.name()])
        .args(["--device", "kp-ipvs0", "--period", "2", "--cleanup"])
        .args(["--max-drain", "5", "--conntrack-cleanup"])
        .stdout(Stdio::from(std::fs::File::create(&log).unwrap()))
        .stderr(Stdio::piped())
        .spawn()
        .expect("start mini-proxy");
    let mut proxy = Proxy { child, log };
    let h = Handle::open(&NetNs::path(ns.path()), &HandleOptions::new()).expect("handle");

    let web_keys = || {
        let mut k = vec![tcp("10.96.0.10:80")];
        k.extend(NODE_IPS.iter().map(|ip| tcp(&format!("{ip}:30080"))));
        k
    };
    let mut want = Table::new();
    want.insert(
        tcp("10.200.0.1:80"),
        (Scheduler::LeastConnection, BTreeMap::new()),
    );
    let set_web = |want: &mut Table, sched: Scheduler, d: &[(&str, u32)]| {
        for k in web_keys() {
            want.insert(k, (sched.clone(), dests(d)));
        }
    };
    set_web(
        &mut want,
        Scheduler::RoundRobin,
        &[("10.1.0.2:8080", 1), ("10.1.0.3:8080", 1)],
    );
    want.insert(
        udp("10.96.0.53:53"),
        (Scheduler::RoundRobin, dests(&[("10.1.0.7:53", 1)])),
    );
    wait_for(&h, &want, &proxy, "start");
    wait_for_vips(
        &ns,
        "kp-ipvs0",
        &["10.96.0.10/32", "10.96.0.53/32"],
        &proxy,
        "start",
    );
    // The sysctls a proxy needs, set at start; strict ARP as the file says.
    for knob in [
        "net.ipv4.vs.conntrack",
        "net.ipv4.vs.expire_nodest_conn",
        "net.ipv4.vs.expire_quiescent_template",
    ] {
        assert_eq!(sysctl_n(&ns, knob), "1", "{knob}\n{}", proxy.log());
    }
    // Kernels from 5.9 on keep their default, as with kube-proxy.
    assert_eq!(sysctl_n(&ns, "net.ipv4.vs.conn_reuse_mode"), "1");
    assert!(
        proxy
            .log()
            .contains("net.ipv4.vs.conn_reuse_mode left as it is")
    );
    assert_eq!(sysctl_n(&ns, "net.ipv4.conf.all.arp_ignore"), "1");
    assert_eq!(sysctl_n(&ns, "net.ipv4.conf.all.arp_announce"), "2");
    // NodePorts on ens3 and bond0 only: not on the VIP device's addresses.
    let t = table(&h);
    for excluded in ["172.30.0.1:30080", "10.96.0.10:30080", "10.96.0.53:30080"] {
        assert!(
            !t.contains_key(&tcp(excluded)),
            "{excluded} must not be a NodePort"
        );
    }

    // 1. Add a service.
    write_state(
        &state,
        &format!(r#"{{"services":[{},{dns},{api}]}}"#, web("rr", two)),
    );
    want.insert(
        tcp("10.96.0.20:443"),
        (
            Scheduler::WeightedLeastConnection,
            dests(&[("10.1.0.9:6443", 2)]),
        ),
    );
    wait_for(&h, &want, &proxy, "add a service");
    wait_for_vips(
        &ns,
        "kp-ipvs0",
        &["10.96.0.10/32", "10.96.0.20/32", "10.96.0.53/32"],
        &proxy,
        "add a service",
    );

    // 2. Remove an endpoint (graceful termination: drained, then deleted once
    //    idle; it has no connections, so it goes).
    let one = r#"{"ip":"10.1.0.2","port":8080}"#;
    write_state(
        &state,
        &format!(r#"{{"services":[{},{dns},{api}]}}"#, web("rr", one)),
    );
    set_web(&mut want, Scheduler::RoundRobin, &[("10.1.0.2:8080", 1)]);
    wait_for(&h, &want, &proxy, "remove an endpoint");

    // 3. Change a weight.
    let heavy = r#"{"ip":"10.1.0.2","port":8080,"weight":5}"#;
    write_state(
        &state,
        &format!(r#"{{"services":[{},{dns},{api}]}}"#, web("rr", heavy)),
    );
    set_web(&mut want, Scheduler::RoundRobin, &[("10.1.0.2:8080", 5)]);
    wait_for(&h, &want, &proxy, "change a weight");

    // 4. Change a scheduler.
    write_state(
        &state,
        &format!(r#"{{"services":[{},{dns},{api}]}}"#, web("wrr", heavy)),
    );
    set_web(
        &mut want,
        Scheduler::WeightedRoundRobin,
        &[("10.1.0.2:8080", 5)],
    );
    wait_for(&h, &want, &proxy, "change a scheduler");

    // 5. Remove a service: its virtual servers and its VIP go.
    write_state(
        &state,
        &format!(r#"{{"services":[{},{api}]}}"#, web("wrr", heavy)),
    );
    want.remove(&udp("10.96.0.53:53"));
    wait_for(&h, &want, &proxy, "remove a service");
    wait_for_vips(
        &ns,
        "kp-ipvs0",
        &["10.96.0.10/32", "10.96.0.20/32"],
        &proxy,
        "remove a service",
    );
    // With --conntrack-cleanup, the UDP service's entries were looked for
    // (none: nothing sent it traffic) over ctnetlink, after its delete.
    let start = Instant::now();
    while !proxy
        .log()
        .contains("conntrack: 1 selections, 0 entries found, 0 deleted")
    {
        // The line follows the sync whose delete the table shows.
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "no conntrack cleanup logged:\n{}",
            proxy.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    // 6. Drift is repaired by the periodic full sync.
    h.delete_service(&tcp("10.96.0.20:443"))
        .expect("delete behind the proxy's back");
    wait_for(&h, &want, &proxy, "periodic repair");

    // 7. SIGTERM with --cleanup: the proxy's services and VIPs go, the
    //    foreign service stays.
    support::run("kill", &["-TERM", &proxy.child.id().to_string()]);
    let start = Instant::now();
    let status = loop {
        if let Some(s) = proxy.child.try_wait().expect("wait") {
            break s;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "no exit after SIGTERM:\n{}",
            proxy.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut err = String::new();
    if let Some(mut e) = proxy.child.stderr.take() {
        let _ = e.read_to_string(&mut err);
    }
    let log = proxy.log();
    println!("mini-proxy log:\n{log}{err}");
    assert!(status.success(), "exit status {status}: {err}\n{log}");
    let mut foreign = Table::new();
    foreign.insert(
        tcp("10.200.0.1:80"),
        (Scheduler::LeastConnection, BTreeMap::new()),
    );
    assert_eq!(table(&h), foreign);
    assert!(log.contains("exit: removed 4 owned services"), "{log}");
    assert!(log.contains("exit: removed 2 VIPs from kp-ipvs0"), "{log}");
    assert_eq!(dev_addrs(&ns, "kp-ipvs0"), BTreeSet::new());
    let syncs = log.lines().filter(|l| l.starts_with("sync (")).count();
    assert!(syncs >= 7, "one log line per sync: {log}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// One `--once` run of the proxy on `config`, with `--owned FILE` or not;
/// returns its log (stdout), asserting a clean exit.
fn run_once(bin: &Path, ns: &TestNetns, config: &Path, owned: Option<&Path>) -> String {
    let mut cmd = Command::new(bin);
    cmd.args(["--config", config.to_str().unwrap(), "--netns", ns.name()])
        .args(["--device", "kp-ipvs0", "--once"]);
    if let Some(f) = owned {
        cmd.args(["--owned", f.to_str().unwrap()]);
    }
    let out = cmd.output().expect("run mini-proxy");
    let log = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "mini-proxy failed: {}\n{log}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    log
}

/// A restarted proxy owns what its previous run created only when it kept
/// the keys (`--owned FILE`); without them, those services are conflicts and
/// stay exactly as they are.
#[test]
fn a_restarted_proxy_owns_its_services_through_the_owned_file() {
    let bin = support::example_binary("mini-proxy");
    let ns = TestNetns::with_ipvs();
    let dir = std::env::temp_dir().join(format!("mini-proxy-owned-{}", ns.name()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("state.json");
    let owned = dir.join("owned.ledger");
    let h = Handle::open(&NetNs::path(ns.path()), &HandleOptions::new()).expect("handle");
    let dns = |ep: &str| {
        format!(
            r#"{{"services":[{{"name":"dns","vip":"10.96.0.53","port":53,"protocol":"udp","endpoints":[{{"ip":"{ep}","port":53}}]}}]}}"#
        )
    };
    let first = {
        let mut t = Table::new();
        t.insert(
            udp("10.96.0.53:53"),
            (Scheduler::RoundRobin, dests(&[("10.1.0.7:53", 1)])),
        );
        t
    };

    // The first run creates the service and keeps its key.
    write_state(&config, &dns("10.1.0.7"));
    run_once(&bin, &ns, &config, Some(&owned));
    assert_eq!(table(&h), first);
    let kept = ledger(&owned);
    assert_eq!(kept.len(), 1);
    assert_eq!(kept.get(&udp("10.96.0.53:53")), Some(Ownership::Owned));

    // Restarted without the keys: the service is someone else's.
    write_state(&config, &dns("10.1.0.8"));
    let log = run_once(&bin, &ns, &config, None);
    assert!(log.contains("conflict:"), "{log}");
    assert_eq!(table(&h), first, "a conflict is left alone:\n{log}");

    // Restarted with them: the proxy manages it again, and deletes it when
    // it is no longer desired.
    let log = run_once(&bin, &ns, &config, Some(&owned));
    let mut second = Table::new();
    second.insert(
        udp("10.96.0.53:53"),
        (Scheduler::RoundRobin, dests(&[("10.1.0.8:53", 1)])),
    );
    assert_eq!(table(&h), second, "{log}");
    write_state(&config, r#"{"services":[]}"#);
    let log = run_once(&bin, &ns, &config, Some(&owned));
    assert_eq!(table(&h), Table::new(), "{log}");
    let kept = ledger(&owned);
    assert!(kept.is_empty(), "{kept:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The ledger a proxy keeps in `--owned FILE`.
fn ledger(path: &Path) -> Ledger {
    FileLedger::open(path).expect("the proxy's ledger file").1
}

/// A service of the proxy deleted by hand while the proxy was stopped, and
/// dropped from its state, leaves its ledger at the next start; the same key
/// made later by another tool is not the proxy's and is left alone.
#[test]
fn a_service_deleted_by_hand_is_not_the_proxys_when_another_tool_makes_it_again() {
    let bin = support::example_binary("mini-proxy");
    let ns = TestNetns::with_ipvs();
    let dir = std::env::temp_dir().join(format!("mini-proxy-ghost-{}", ns.name()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("state.json");
    let owned = dir.join("owned.ledger");
    let h = Handle::open(&NetNs::path(ns.path()), &HandleOptions::new()).expect("handle");
    let key = udp("10.96.0.53:53");
    write_state(
        &config,
        r#"{"services":[{"name":"dns","vip":"10.96.0.53","port":53,"protocol":"udp","endpoints":[{"ip":"10.1.0.7","port":53}]}]}"#,
    );
    run_once(&bin, &ns, &config, Some(&owned));
    assert_eq!(ledger(&owned).get(&key), Some(Ownership::Owned));
    // Stopped: the service is deleted by hand and dropped from the state.
    ns.ipvsadm("-D -u 10.96.0.53:53");
    write_state(&config, r#"{"services":[]}"#);
    let log = run_once(&bin, &ns, &config, Some(&owned));
    assert!(ledger(&owned).is_empty(), "{log}");
    // Another tool makes the key, with its own settings.
    ns.ipvsadm("-A -u 10.96.0.53:53 -s wlc");
    ns.ipvsadm("-a -u 10.96.0.53:53 -r 10.1.0.9:53 -m -w 3");
    let theirs = table(&h);
    assert!(theirs.contains_key(&key));
    for _ in 0..2 {
        let log = run_once(&bin, &ns, &config, Some(&owned));
        assert_eq!(table(&h), theirs, "{log}");
    }
    assert!(ledger(&owned).is_empty());
    let _ = std::fs::remove_dir_all(&dir);
}

/// How many services (on one VIP, one port each) and endpoints each the
/// kill test's proxy syncs.
const KILL_SERVICES: u16 = 1000;
const KILL_ENDPOINTS: u8 = 2;

/// The kill test's state: every service's endpoints in `10.{generation}.x.y`.
fn many_services(generation: u8) -> (String, Table) {
    let mut services = Vec::new();
    let mut want = Table::new();
    for i in 0..KILL_SERVICES {
        let port = 1000 + i;
        let ip = format!("10.{generation}.{}.{}", i / 200, i % 200 + 1);
        let eps: Vec<String> = (0..KILL_ENDPOINTS)
            .map(|j| format!(r#"{{"ip":"{ip}","port":{}}}"#, 8080 + u16::from(j)))
            .collect();
        services.push(format!(
            r#"{{"name":"s{i}","vip":"10.96.0.1","port":{port},"protocol":"tcp","endpoints":[{}]}}"#,
            eps.join(",")
        ));
        let dests = (0..KILL_ENDPOINTS)
            .map(|j| (SocketAddr::new(ip.parse().unwrap(), 8080 + u16::from(j)), 1))
            .collect();
        want.insert(
            ServiceKey::tcp(SocketAddr::new([10, 96, 0, 1].into(), port)),
            (Scheduler::RoundRobin, dests),
        );
    }
    (format!(r#"{{"services":[{}]}}"#, services.join(",")), want)
}

/// Where the first sync is when the proxy is killed.
#[derive(Debug, Clone, Copy)]
enum KillPoint {
    /// As soon as the ledger file records the claims (the adds go out).
    Claimed,
    /// Once the kernel shows the first service (the adds are under way).
    AddsUnderWay,
    /// As soon as the ledger file records the adds settled (the real
    /// servers go out).
    Settled,
    /// Once the kernel shows real servers on the first service (the kill
    /// lands later: under emulation, after about two thirds of them).
    RealServersUnderWay,
}

/// The kernel's table, its real servers read pipelined (thousands of
/// one-by-one dumps take long under emulation). Its service dump is not a
/// snapshot while other namespaces change (see the kill test).
fn big_table(h: &Handle) -> Table {
    let services = h.list_services().expect("list services");
    let keys: Vec<ServiceKey> = services.iter().map(|s| s.service.key).collect();
    let mut t: Table = services
        .into_iter()
        .map(|s| (s.service.key, (s.service.scheduler, BTreeMap::new())))
        .collect();
    h.list_destinations_each(&keys, |i, dests| {
        let dests = dests.expect("list real servers");
        if let Some(entry) = t.get_mut(&keys[i]) {
            entry.1 = dests
                .into_iter()
                .map(|d| (d.server.addr, d.server.weight))
                .collect();
        }
    })
    .expect("list real servers");
    t
}

/// The first line after the header of the ledger file, if any.
fn first_entry(path: &Path) -> Option<String> {
    let mut head = [0u8; 96];
    let n = std::fs::File::open(path).ok()?.read(&mut head).ok()?;
    let text = String::from_utf8_lossy(&head[..n]).into_owned();
    text.lines().nth(1).map(str::to_owned)
}

/// A proxy killed with SIGKILL at several points of its first sync of
/// thousands of services, then restarted with its ledger and a state that
/// moves every endpoint, owns every service it made (no conflict) and
/// converges on all of them.
#[test]
fn a_proxy_killed_during_its_first_sync_converges_on_everything_after_a_restart() {
    let bin = support::example_binary("mini-proxy");
    let (first, _) = many_services(1);
    let (second, want) = many_services(2);
    let first_key = ServiceKey::tcp(SocketAddr::new([10, 96, 0, 1].into(), 1000));
    for point in [
        KillPoint::Claimed,
        KillPoint::AddsUnderWay,
        KillPoint::Settled,
        KillPoint::RealServersUnderWay,
    ] {
        let ns = TestNetns::with_ipvs();
        let dir = std::env::temp_dir().join(format!("mini-proxy-kill-{}", ns.name()));
        std::fs::create_dir_all(&dir).unwrap();
        let config = dir.join("state.json");
        let owned = dir.join("owned.ledger");
        let h = Handle::open(&NetNs::path(ns.path()), &HandleOptions::new()).expect("handle");
        write_state(&config, &first);
        let log = dir.join("proxy.log");
        let mut child = Command::new(&bin)
            .args(["--config", config.to_str().unwrap(), "--netns", ns.name()])
            .args(["--device", "kp-ipvs0", "--owned", owned.to_str().unwrap()])
            .stdout(std::fs::File::create(&log).unwrap())
            .stderr(Stdio::null())
            .spawn()
            .expect("start mini-proxy");
        let start = Instant::now();
        loop {
            let reached = match point {
                KillPoint::Claimed => {
                    first_entry(&owned).is_some_and(|l| l.starts_with("claiming "))
                }
                KillPoint::AddsUnderWay => h.get_service(&first_key).is_ok(),
                KillPoint::Settled => first_entry(&owned).is_some_and(|l| l.starts_with("owned ")),
                KillPoint::RealServersUnderWay => {
                    h.list_destinations(&first_key).is_ok_and(|d| !d.is_empty())
                }
            };
            if reached {
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(120),
                "{point:?} never reached:\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
            assert!(
                child.try_wait().unwrap().is_none(),
                "the proxy exited early"
            );
            std::thread::sleep(Duration::from_micros(200));
        }
        child.kill().expect("SIGKILL");
        child.wait().unwrap();
        let at_kill = big_table(&h);
        let real_servers: usize = at_kill.values().map(|(_, d)| d.len()).sum();
        println!(
            "{point:?}: killed with {} services and {real_servers} real servers in the kernel",
            at_kill.len()
        );
        // Restarted with its ledger and every endpoint moved.
        write_state(&config, &second);
        let log = run_once(&bin, &ns, &config, Some(&owned));
        assert!(!log.contains("conflict:"), "{point:?}:\n{log}");
        // A service dump of this size takes several passes, which the
        // kernel resumes by a position shared with every namespace: other
        // tests' proxies changing their tables meanwhile can make one read
        // skip or repeat services. The table is final; read it again.
        let mut reads = 1;
        while big_table(&h) != want {
            assert!(
                reads < 10,
                "{point:?}: the table is not the desired one\n{log}"
            );
            reads += 1;
            std::thread::sleep(Duration::from_millis(500));
        }
        let kept = ledger(&owned);
        assert_eq!(kept.len(), usize::from(KILL_SERVICES), "{point:?}");
        assert!(kept.iter().all(|(_, o)| o == Ownership::Owned), "{point:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
