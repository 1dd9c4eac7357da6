//! The connection table with live flows, on the real kernel: TCP
//! connections held open and UDP exchanges through a masqueraded service,
//! read by `ipvsctl::conns` (typed entries, the flows' own addresses and
//! states, only in the namespace asked for), and listed by `ipvsadm -Lc`
//! and `ipvsadm-lite -Lc` byte for byte.
//!
//! ```text
//!   client 10.0.0.2 ── veth ── 10.0.0.1 router 10.1.0.1 ── veth ── 10.1.0.2 backend
//!                               (IPVS, VIP 10.9.9.9 on lo)
//! ```
//!
//! Expiry counts down once a second, so the two tools agree only when both
//! read within the same second: each comparison is retried (up to 10 times)
//! until one pair of reads matches exactly; nothing is normalised.
//!
//! The example must be built first (`cargo build --examples --all-features`).
//! Runs in the VM through the cargo runner (`cargo test --test kernel_conns`).

mod support;

use std::collections::BTreeSet;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ipvsctl::conns::{ConnState, ConnTable, Connection, Origin};
use ipvsctl::model::{ForwardMethod, Protocol, RealServer, ServiceKey, VirtualServer};
use ipvsctl::netlink::netns::run_in;
use ipvsctl::{Handle, HandleOptions, NetNs};
use support::TestNetns;

const VIP: &str = "10.9.9.9";
const BACKEND: &str = "10.1.0.2";
const WAIT: Duration = Duration::from_secs(5);

/// Router, client and one backend with a TCP server that keeps every
/// connection open until the lab is dropped, and a UDP echo server.
struct Lab {
    router: TestNetns,
    client: TestNetns,
    _backend: TestNetns,
    stop: Arc<AtomicBool>,
    servers: Vec<JoinHandle<()>>,
}

impl Lab {
    fn new(vport: u16, bport: u16) -> Lab {
        let router = TestNetns::with_ipvs();
        let client = TestNetns::new();
        let backend = TestNetns::new();
        router.run("sysctl", &["-qw", "net.ipv4.ip_forward=1"]);
        router.run("ip", &["addr", "add", &format!("{VIP}/32"), "dev", "lo"]);
        support::link(&router, &client, "c0", "10.0.0.1", "10.0.0.2");
        support::link(&router, &backend, "b0", "10.1.0.1", BACKEND);
        let handle = Handle::open(&NetNs::path(router.path()), &HandleOptions::new())
            .expect("handle in router");
        for key in [ServiceKey::tcp(vip(vport)), ServiceKey::udp(vip(vport))] {
            let vs = VirtualServer::new(key);
            handle.add_service(&vs).expect("add service");
            let rs = RealServer::new(backend_addr(bport)).with_forward(ForwardMethod::Masquerade);
            handle.add_destination(&key, &rs).expect("add destination");
        }
        let stop = Arc::new(AtomicBool::new(false));
        let ns = NetNs::path(backend.path());
        let tcp = run_in(&ns, || TcpListener::bind(("0.0.0.0", bport))).expect("bind TCP");
        let udp = run_in(&ns, || UdpSocket::bind(("0.0.0.0", bport))).expect("bind UDP");
        tcp.set_nonblocking(true).expect("nonblocking");
        udp.set_read_timeout(Some(Duration::from_millis(20)))
            .expect("timeout");
        let mut servers = Vec::new();
        let s = Arc::clone(&stop);
        servers.push(std::thread::spawn(move || {
            let mut open = Vec::new();
            while !s.load(Ordering::Relaxed) {
                match tcp.accept() {
                    Ok((mut c, _)) => {
                        let _ = c.set_nonblocking(false);
                        let _ = c.write_all(b"hello\n");
                        open.push(c);
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(2))
                    }
                    Err(e) => panic!("accept: {e}"),
                }
            }
        }));
        let s = Arc::clone(&stop);
        servers.push(std::thread::spawn(move || {
            let mut buf = [0u8; 64];
            while !s.load(Ordering::Relaxed) {
                match udp.recv_from(&mut buf) {
                    Ok((n, from)) => {
                        let _ = udp.send_to(&buf[..n], from);
                    }
                    Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                    Err(e) => panic!("recv: {e}"),
                }
            }
        }));
        Lab {
            router,
            client,
            _backend: backend,
            stop,
            servers,
        }
    }

    /// An open TCP connection from the client to the virtual server; its
    /// greeting has been read, so the handshake went through IPVS both ways.
    fn tcp(&self, vport: u16) -> TcpStream {
        let to = vip(vport);
        let ns = NetNs::path(self.client.path());
        let mut s = run_in(&ns, || TcpStream::connect_timeout(&to, WAIT))
            .unwrap_or_else(|e| panic!("connect to {to}: {e}"));
        s.set_read_timeout(Some(WAIT)).expect("timeout");
        let mut hello = [0u8; 6];
        s.read_exact(&mut hello).expect("greeting");
        s
    }

    /// One UDP exchange from client port `port`; returns the client's address.
    fn udp(&self, vport: u16, port: u16) -> SocketAddr {
        let ns = NetNs::path(self.client.path());
        let sock = run_in(&ns, || UdpSocket::bind(("10.0.0.2", port))).expect("client UDP");
        sock.set_read_timeout(Some(WAIT)).expect("timeout");
        sock.send_to(b"ping", vip(vport)).expect("send");
        let mut buf = [0u8; 8];
        sock.recv_from(&mut buf).expect("UDP answer");
        sock.local_addr().expect("local addr")
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.servers.drain(..) {
            let _ = t.join();
        }
    }
}

fn vip(port: u16) -> SocketAddr {
    SocketAddr::new(VIP.parse().expect("literal"), port)
}

fn backend_addr(port: u16) -> SocketAddr {
    SocketAddr::new(BACKEND.parse().expect("literal"), port)
}

/// The connection table of the namespace at `path`.
fn table_at(path: &std::path::Path) -> ConnTable {
    ConnTable::new().netns(NetNs::path(path).pin().expect("pin the namespace"))
}

fn table(table: &ConnTable) -> Vec<Connection> {
    table
        .connections()
        .expect("open the connection table")
        .collect::<Result<_, _>>()
        .expect("parse the connection table")
}

/// The table of `t`, read again (at most 10 reads) while a read lists some
/// connection twice. The kernel lists the file a page per `read()` and finds
/// where to go on by counting entries again (up to 6.12 those of a hash
/// table shared by all namespaces), so an entry made between two reads
/// (this binary's other tests make flows beside this one) lists the last
/// entries again; returns the last read, so a listing that always repeats
/// an entry still fails.
fn distinct_table(t: &ConnTable) -> Vec<Connection> {
    let key = |c: &Connection| (c.protocol, c.client, c.virtual_addr, c.real);
    let mut entries = table(t);
    for _ in 1..10 {
        let distinct: BTreeSet<_> = entries.iter().map(key).collect();
        if distinct.len() == entries.len() {
            break;
        }
        eprintln!("a read listed an entry twice, read again: {entries:#?}");
        entries = table(t);
    }
    entries
}

/// `args` run by ipvsadm and by ipvsadm-lite in `ns`, both started at once
/// (a process start takes about a second under emulation, so one after the
/// other they would never read within the same second of expiry), until one
/// pair of outputs is identical; returns it. If all 10 pairs straddle a
/// second, the last pair must be identical except for expiry columns one
/// second apart (said on stderr).
fn same_listing(ns: &TestNetns, args: &[&str]) -> String {
    let mut last = None;
    for attempt in 0..10 {
        let spawn = |program: PathBuf| {
            let mut c = ns.command(program);
            c.args(args)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped());
            c.spawn().expect("spawn")
        };
        // Alternate which starts first.
        let (theirs, ours) = if attempt % 2 == 0 {
            let t = spawn(support::tool("ipvsadm"));
            (t, spawn(support::example_binary("ipvsadm-lite")))
        } else {
            let o = spawn(support::example_binary("ipvsadm-lite"));
            (spawn(support::tool("ipvsadm")), o)
        };
        let theirs = theirs.wait_with_output().expect("wait ipvsadm");
        let ours = ours.wait_with_output().expect("wait ipvsadm-lite");
        assert_eq!(
            theirs.status.code(),
            Some(0),
            "ipvsadm {args:?}: {theirs:?}"
        );
        assert_eq!(
            ours.status.code(),
            Some(0),
            "ipvsadm-lite {args:?}: {ours:?}"
        );
        let (t, o) = (
            String::from_utf8_lossy(&theirs.stdout).into_owned(),
            String::from_utf8_lossy(&ours.stdout).into_owned(),
        );
        if t == o {
            return t;
        }
        last = Some((t, o));
    }
    let (t, o) = last.expect("at least one attempt");
    let straddle = t.lines().count() == o.lines().count()
        && t.lines().zip(o.lines()).all(|(a, b)| same_but_expiry(a, b));
    assert!(
        straddle,
        "{args:?} differs in 10 attempts\n--- ipvsadm\n{t}--- ipvsadm-lite\n{o}"
    );
    eprintln!(
        "{args:?}: 10 pairs of reads straddled a second; identical but for expiry one second apart"
    );
    t
}

/// Whether two listing lines are identical except for an expiry column
/// (`MM:SS` at bytes 4..9) at most one second apart.
fn same_but_expiry(a: &str, b: &str) -> bool {
    if a == b {
        return true;
    }
    let secs = |l: &str| {
        let (m, s) = l.get(4..9)?.split_once(':')?;
        Some(m.parse::<u64>().ok()? * 60 + s.parse::<u64>().ok()?)
    };
    match (secs(a), secs(b)) {
        (Some(x), Some(y)) => {
            x.abs_diff(y) <= 1 && a.get(..4) == b.get(..4) && a.get(9..) == b.get(9..)
        }
        _ => false,
    }
}

#[test]
fn live_flows_are_typed_entries_of_their_namespace_only() {
    let lab = Lab::new(80, 8080);
    let streams: Vec<TcpStream> = (0..3).map(|_| lab.tcp(80)).collect();
    let udp_clients: Vec<SocketAddr> = (0..3).map(|i| lab.udp(80, 41_000 + i)).collect();
    let router = table_at(lab.router.path());
    let entries = distinct_table(&router);
    let key = |c: &Connection| (c.protocol, c.client, c.virtual_addr, c.real);
    let seen: BTreeSet<_> = entries.iter().map(key).collect();
    for s in &streams {
        let client = s.local_addr().expect("local addr");
        let e = entries
            .iter()
            .find(|c| c.protocol == Protocol::Tcp && c.client == client)
            .unwrap_or_else(|| panic!("no entry for TCP client {client}: {entries:#?}"));
        assert_eq!((e.virtual_addr, e.real), (vip(80), backend_addr(8080)));
        assert_eq!(e.state, ConnState::Established, "{e:?}");
        // The established timeout is 900 s.
        assert!(e.expires_secs > 800 && e.expires_secs <= 900, "{e:?}");
        assert_eq!((e.persistence.as_ref(), e.origin), (None, None));
    }
    for client in &udp_clients {
        let e = entries
            .iter()
            .find(|c| c.protocol == Protocol::Udp && c.client == *client)
            .unwrap_or_else(|| panic!("no entry for UDP client {client}: {entries:#?}"));
        assert_eq!((e.virtual_addr, e.real), (vip(80), backend_addr(8080)));
        assert_eq!(e.state, ConnState::Udp);
        assert!(e.expires_secs <= 300, "{e:?}");
    }
    assert_eq!(entries.len(), 6, "{entries:#?}");
    assert_eq!(seen.len(), 6);

    // The sync view: the same entries, all made here.
    let synced: Vec<Connection> = router
        .sync_connections()
        .expect("open ip_vs_conn_sync")
        .collect::<Result<_, _>>()
        .expect("parse ip_vs_conn_sync");
    assert_eq!(synced.iter().map(key).collect::<BTreeSet<_>>(), seen);
    assert!(synced.iter().all(|c| c.origin == Some(Origin::Local)));

    // The test's own namespace (another one) has none of these entries.
    let here = table(&ConnTable::new());
    assert!(
        here.iter().all(|c| !seen.contains(&key(c))),
        "flows of the router namespace seen in this one: {here:#?}"
    );
    drop(streams);
}

#[test]
fn ipvsadm_and_ipvsadm_lite_list_the_same_connections() {
    let lab = Lab::new(80, 8080);
    let _streams: Vec<TcpStream> = (0..2).map(|_| lab.tcp(80)).collect();
    for i in 0..2 {
        lab.udp(80, 42_000 + i);
    }
    let listing = same_listing(&lab.router, &["-Lcn"]);
    assert!(
        listing.starts_with(
            "IPVS connection entries\npro expire state       source             virtual            destination\n"
        ),
        "{listing}"
    );
    assert_eq!(listing.lines().count(), 2 + 4, "{listing}");
    assert!(
        listing.contains("ESTABLISHED") && listing.contains("UDP "),
        "{listing}"
    );
    for args in [
        &["-L", "-c"][..],
        &["--list", "--connection", "-n"],
        &["-L", "-n", "-c", "--persistent-conn"],
    ] {
        same_listing(&lab.router, args);
    }
}

#[test]
fn an_empty_table_lists_the_title_only() {
    let ns = TestNetns::with_ipvs();
    let listing = same_listing(&ns, &["-Lcn"]);
    assert_eq!(listing.lines().count(), 2, "{listing}");
    assert!(table(&table_at(ns.path())).is_empty());
}

#[test]
fn totals_count_the_namespace_traffic_and_keep_deleted_services() {
    let lab = Lab::new(80, 8080);
    let router = table_at(lab.router.path());
    let before = router.totals().expect("totals");
    assert_eq!((before.conns, before.in_pkts, before.out_bytes), (0, 0, 0));
    let streams: Vec<TcpStream> = (0..3).map(|_| lab.tcp(80)).collect();
    for i in 0..2 {
        lab.udp(80, 43_000 + i);
    }
    let handle = Handle::open(&NetNs::path(lab.router.path()), &HandleOptions::new())
        .expect("handle in router");
    // The kernel adds the per-CPU counters into what both files and netlink
    // show every 2 s (the rate estimator's tick): wait until the five
    // connections are counted and a reading of the services falls between
    // two equal readings of the totals.
    let deadline = Instant::now() + Duration::from_secs(10);
    let (totals, services) = loop {
        let first = router.totals().expect("totals");
        let services = handle.list_services().expect("list");
        let second = router.totals().expect("totals");
        if first == second && second.conns == 5 {
            break (second, services);
        }
        assert!(
            Instant::now() < deadline,
            "totals never settled: {second:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let text = lab.router.run("cat", &["/proc/net/ip_vs_stats"]);
    println!(
        "/proc/net/ip_vs_stats on {}:\n{text}",
        support::kernel_release()
    );
    // Every packet IPVS handled went through one of the two services.
    let sum = |f: fn(&ipvsctl::model::Stats) -> u64| -> u64 {
        services.iter().map(|s| f(&s.stats)).sum()
    };
    assert_eq!(totals.conns, 5, "{totals:?}");
    assert_eq!(totals.conns, sum(|s| s.conns));
    assert_eq!(totals.in_pkts, sum(|s| s.in_pkts));
    assert_eq!(totals.out_pkts, sum(|s| s.out_pkts));
    assert_eq!(totals.in_bytes, sum(|s| s.in_bytes));
    assert_eq!(totals.out_bytes, sum(|s| s.out_bytes));
    assert!(totals.in_bytes > 0 && totals.out_bytes > 0, "{totals:?}");
    // Deleting the services leaves the totals as they were.
    drop(streams);
    for s in &services {
        handle.delete_service(&s.service.key).expect("delete");
    }
    let after = router.totals().expect("totals");
    assert!(after.conns >= totals.conns && after.in_bytes >= totals.in_bytes);
}
