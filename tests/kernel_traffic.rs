//! End-to-end traffic through virtual servers programmed by ipvsctl.
//!
//! Each test builds its own little network out of fresh namespaces:
//!
//! ```text
//!   client 10.0.0.2 ── veth ── 10.0.0.1 router 10.1.i.1 ── veth ── 10.1.i.2 backend i
//!                               (IPVS, VIP 10.9.9.9 on lo,
//!                                ip_forward=1)
//! ```
//!
//! Every backend's default route points at the router, so replies of
//! masqueraded connections go back through IPVS. The backends run small TCP
//! and UDP servers (threads of this test whose sockets were opened inside the
//! backend's namespace) that answer every request with the backend's name.
//! The client opens connections to the virtual address from inside its
//! namespace and counts the names it gets back; the test then compares the
//! distribution with what the scheduler promises and checks the service and
//! destination counters that ipvsctl decodes.
//!
//! Runs in the VM through the cargo runner (`cargo test --test kernel_traffic`).

mod support;

use std::collections::BTreeMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use ipvsctl::model::{
    DestinationSnapshot, ForwardMethod, RealServer, Scheduler, ServiceKey, Stats, VirtualServer,
};
use ipvsctl::netlink::netns::run_in;
use ipvsctl::{Handle, NetNs};
use support::TestNetns;

/// The virtual IP, on the router's `lo`.
const VIP: &str = "10.9.9.9";
/// The virtual port.
const VPORT: u16 = 80;
/// The port the backends listen on (masquerade maps VPORT to it).
const BPORT: u16 = 8080;
/// Connections per case.
const N: usize = 30;
/// Upper bound for any single network wait.
const WAIT: Duration = Duration::from_secs(5);
/// What the client sends before reading the answer.
const REQUEST: &[u8] = b"who\n";

/// The router, the client and the backends of one test, with the backends'
/// servers running. Dropping it stops the servers, then deletes the
/// namespaces.
struct Lab {
    // Field order matters for drop: servers are stopped in `Drop::drop`,
    // namespaces are deleted when the fields drop afterwards.
    router: TestNetns,
    client: TestNetns,
    backends: Vec<TestNetns>,
    handle: Handle,
    stop: Arc<AtomicBool>,
    servers: Vec<JoinHandle<()>>,
}

impl Lab {
    /// Builds the topology with `n` backends, each serving TCP and UDP on
    /// `port` (and, when `vip_on_backends`, with the VIP on their `lo`, for
    /// direct routing).
    fn new(n: usize, port: u16, vip_on_backends: bool) -> Lab {
        let router = TestNetns::with_ipvs();
        let client = TestNetns::new();
        router.run("sysctl", &["-qw", "net.ipv4.ip_forward=1"]);
        router.run("ip", &["addr", "add", &format!("{VIP}/32"), "dev", "lo"]);
        support::link(&router, &client, "c0", "10.0.0.1", "10.0.0.2");
        let mut backends = Vec::new();
        for i in 0..n {
            let b = TestNetns::new();
            support::link(
                &router,
                &b,
                &format!("b{i}"),
                &format!("10.1.{i}.1"),
                &format!("10.1.{i}.2"),
            );
            if vip_on_backends {
                b.run("ip", &["addr", "add", &format!("{VIP}/32"), "dev", "lo"]);
            }
            backends.push(b);
        }
        let handle = Handle::open(&NetNs::path(router.path())).expect("open handle in router");
        let mut lab = Lab {
            router,
            client,
            backends,
            handle,
            stop: Arc::new(AtomicBool::new(false)),
            servers: Vec::new(),
        };
        for i in 0..n {
            lab.serve(i, port);
        }
        lab
    }

    /// Name of backend `i`, which its servers answer with.
    fn backend_name(i: usize) -> String {
        format!("backend-{i}")
    }

    /// Address of backend `i` on `port`.
    fn backend_addr(i: usize, port: u16) -> SocketAddr {
        format!("10.1.{i}.2:{port}")
            .parse()
            .expect("literal address")
    }

    /// Starts the TCP and UDP servers of backend `i`.
    fn serve(&mut self, i: usize, port: u16) {
        let ns = NetNs::path(self.backends[i].path());
        let name = Lab::backend_name(i);
        let tcp = run_in(&ns, || TcpListener::bind(("0.0.0.0", port))).expect("bind TCP");
        let udp = run_in(&ns, || UdpSocket::bind(("0.0.0.0", port))).expect("bind UDP");
        tcp.set_nonblocking(true).expect("nonblocking listener");
        udp.set_read_timeout(Some(Duration::from_millis(20)))
            .expect("UDP timeout");
        let stop = Arc::clone(&self.stop);
        let tcp_name = name.clone();
        self.servers.push(std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                match tcp.accept() {
                    Ok((mut s, _)) => {
                        // A client that misbehaves must not stop the server.
                        let _ = answer_tcp(&mut s, &tcp_name);
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(2))
                    }
                    Err(e) => panic!("{tcp_name}: accept: {e}"),
                }
            }
        }));
        let stop = Arc::clone(&self.stop);
        self.servers.push(std::thread::spawn(move || {
            let mut buf = [0u8; 64];
            while !stop.load(Ordering::Relaxed) {
                match udp.recv_from(&mut buf) {
                    Ok((_, from)) => {
                        let _ = udp.send_to(name.as_bytes(), from);
                    }
                    Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                    Err(e) => panic!("{name}: recv: {e}"),
                }
            }
        }));
    }

    /// One TCP connection from the client to `to`; returns the name answered.
    fn tcp_request(&self, to: SocketAddr) -> String {
        let ns = NetNs::path(self.client.path());
        let sock = run_in(&ns, || TcpStream::connect_timeout(&to, WAIT))
            .unwrap_or_else(|e| panic!("connect to {to} from the client: {e}"));
        let mut sock = sock;
        sock.set_read_timeout(Some(WAIT)).expect("read timeout");
        sock.write_all(REQUEST)
            .unwrap_or_else(|e| panic!("send to {to}: {e}"));
        let mut answer = String::new();
        sock.read_to_string(&mut answer)
            .unwrap_or_else(|e| panic!("read from {to}: {e}"));
        answer
    }

    /// One UDP exchange from a fresh client socket on a source port never
    /// used before (so a new IPVS connection: an ephemeral port the kernel
    /// happens to pick twice would reuse the first connection's entry);
    /// returns the name answered.
    fn udp_request(&self, to: SocketAddr) -> String {
        static NEXT_PORT: std::sync::atomic::AtomicU16 = std::sync::atomic::AtomicU16::new(40_000);
        let port = NEXT_PORT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let ns = NetNs::path(self.client.path());
        let sock = run_in(&ns, || UdpSocket::bind(("0.0.0.0", port))).expect("client UDP socket");
        sock.set_read_timeout(Some(WAIT)).expect("read timeout");
        sock.send_to(REQUEST, to)
            .unwrap_or_else(|e| panic!("send to {to}: {e}"));
        let mut buf = [0u8; 64];
        let (n, _) = sock
            .recv_from(&mut buf)
            .unwrap_or_else(|e| panic!("no UDP answer from {to}: {e}"));
        String::from_utf8_lossy(&buf[..n]).into_owned()
    }

    /// `n` requests of `proto` to the virtual server; how many each name got.
    fn spread(&self, udp: bool, n: usize) -> BTreeMap<String, usize> {
        let to: SocketAddr = format!("{VIP}:{VPORT}").parse().expect("literal address");
        let mut seen = BTreeMap::new();
        for _ in 0..n {
            let who = if udp {
                self.udp_request(to)
            } else {
                self.tcp_request(to)
            };
            *seen.entry(who).or_insert(0) += 1;
        }
        seen
    }

    /// Adds the virtual server and one real server per `(backend, weight)`.
    fn program(&self, vs: &VirtualServer, dests: &[(usize, u32)], port: u16, fwd: ForwardMethod) {
        self.handle.add_service(vs).expect("add service");
        for &(i, weight) in dests {
            let rs = RealServer::new(Lab::backend_addr(i, port))
                .with_weight(weight)
                .with_forward(fwd);
            self.handle
                .add_destination(&vs.key, &rs)
                .unwrap_or_else(|e| panic!("add destination {i}: {e}"));
        }
    }

    /// The destinations of `key` by backend index.
    fn dests(&self, key: &ServiceKey, port: u16) -> BTreeMap<usize, DestinationSnapshot> {
        let list = self
            .handle
            .list_destinations(key)
            .expect("list destinations");
        let mut by_index = BTreeMap::new();
        for d in list {
            let i = (0..self.backends.len())
                .find(|&i| Lab::backend_addr(i, port) == d.server.addr)
                .unwrap_or_else(|| panic!("unexpected destination {}", d.server.addr));
            by_index.insert(i, d);
        }
        by_index
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.servers.drain(..) {
            // A server that panicked has already printed why.
            let _ = t.join();
        }
        // Silence "field never read": the namespaces live as long as the lab.
        let _ = (&self.router, &self.client);
    }
}

/// The server side of one TCP connection: read the request, answer the name,
/// close.
fn answer_tcp(s: &mut TcpStream, name: &str) -> std::io::Result<()> {
    s.set_nonblocking(false)?;
    s.set_read_timeout(Some(WAIT))?;
    let mut buf = [0u8; REQUEST.len()];
    s.read_exact(&mut buf)?;
    s.write_all(name.as_bytes())
}

fn vkey(udp: bool) -> ServiceKey {
    let addr: SocketAddr = format!("{VIP}:{VPORT}").parse().expect("literal address");
    if udp {
        ServiceKey::udp(addr)
    } else {
        ServiceKey::tcp(addr)
    }
}

/// Expected count per backend name, leaving out backends expected to get 0.
fn expect(counts: &[(usize, usize)]) -> BTreeMap<String, usize> {
    counts
        .iter()
        .filter(|(_, c)| *c > 0)
        .map(|&(i, c)| (Lab::backend_name(i), c))
        .collect()
}

/// The kernel's estimator period: the counters that dumps report
/// (`IPVS_*_ATTR_STATS64`) are copied from per-CPU counters by the rate
/// estimator, every 2 s, not when packets pass.
const ESTIMATOR_PERIOD: Duration = Duration::from_millis(2_500);

/// Reads the service and its destinations until two reads one estimator
/// period apart agree and the service counted `total` connections (so the
/// estimator has folded in every packet, including the last FINs), or 25 s
/// have passed; returns the last read.
fn stable_stats(
    lab: &Lab,
    key: &ServiceKey,
    port: u16,
    total: u64,
) -> (Stats, BTreeMap<usize, DestinationSnapshot>) {
    let read = || {
        let svc = lab.handle.get_service(key).expect("get service");
        (svc.stats, lab.dests(key, port))
    };
    let view = |r: &(Stats, BTreeMap<usize, DestinationSnapshot>)| {
        let d: Vec<_> = r.1.values().map(|d| counters(&d.stats)).collect();
        (counters(&r.0), d)
    };
    let mut prev = read();
    for _ in 0..10 {
        std::thread::sleep(ESTIMATOR_PERIOD);
        let cur = read();
        if view(&cur) == view(&prev) && cur.0.conns == total {
            return cur;
        }
        prev = cur;
    }
    prev
}

/// Sum of the counters of `dests`.
fn sum(dests: &BTreeMap<usize, DestinationSnapshot>) -> (u64, u64, u64, u64, u64) {
    dests.values().fold((0, 0, 0, 0, 0), |a, d| {
        let s = &d.stats;
        (
            a.0 + s.conns,
            a.1 + s.in_pkts,
            a.2 + s.out_pkts,
            a.3 + s.in_bytes,
            a.4 + s.out_bytes,
        )
    })
}

fn counters(s: &Stats) -> (u64, u64, u64, u64, u64) {
    (s.conns, s.in_pkts, s.out_pkts, s.in_bytes, s.out_bytes)
}

/// Checks that each destination counted the connections it answered and at
/// least the packets and payload bytes they carried, and that the service's
/// counters are the sum of its destinations'.
fn check_stats(lab: &Lab, key: &ServiceKey, seen: &BTreeMap<String, usize>, udp: bool) {
    let total = seen.values().sum::<usize>() as u64;
    let (svc, dests) = stable_stats(lab, key, BPORT, total);
    for (i, d) in &dests {
        let n = seen.get(&Lab::backend_name(*i)).copied().unwrap_or(0) as u64;
        let name_len = Lab::backend_name(*i).len() as u64;
        let s = &d.stats;
        assert_eq!(s.conns, n, "backend {i}: connections counted: {s:?}");
        // TCP: SYN, ACK, request, FIN/ACK from the client at least; SYN-ACK,
        // answer, FIN from the server. UDP: one datagram each way.
        let (min_in, min_out) = if udp { (1, 1) } else { (4, 3) };
        assert!(s.in_pkts >= min_in * n, "backend {i}: in packets: {s:?}");
        assert!(s.out_pkts >= min_out * n, "backend {i}: out packets: {s:?}");
        // Each packet carries at least a 20-byte IP header and 8-byte UDP
        // header; TCP headers are 20 bytes or more.
        let hdr = if udp { 28 } else { 40 };
        assert!(
            s.in_bytes >= n * (min_in * hdr + REQUEST.len() as u64),
            "backend {i}: in bytes: {s:?}"
        );
        assert!(
            s.out_bytes >= n * (min_out * hdr + name_len),
            "backend {i}: out bytes: {s:?}"
        );
    }
    assert_eq!(
        counters(&svc),
        sum(&dests),
        "service counters are the sum of the destinations'"
    );
    assert_eq!(svc.conns, total);
}

/// rr over three masqueraded backends, TCP: each gets exactly a third, and
/// the counters match.
#[test]
fn tcp_masquerade_rr_three_backends() {
    let lab = Lab::new(3, BPORT, false);
    let vs = VirtualServer::new(vkey(false)).with_scheduler(Scheduler::RoundRobin);
    lab.program(
        &vs,
        &[(0, 1), (1, 1), (2, 1)],
        BPORT,
        ForwardMethod::Masquerade,
    );
    let seen = lab.spread(false, N);
    assert_eq!(seen, expect(&[(0, N / 3), (1, N / 3), (2, N / 3)]));
    check_stats(&lab, &vs.key, &seen, false);
}

/// The same over UDP: every fresh source port is a new IPVS connection.
#[test]
fn udp_masquerade_rr_three_backends() {
    let lab = Lab::new(3, BPORT, false);
    let vs = VirtualServer::new(vkey(true)).with_scheduler(Scheduler::RoundRobin);
    lab.program(
        &vs,
        &[(0, 1), (1, 1), (2, 1)],
        BPORT,
        ForwardMethod::Masquerade,
    );
    let seen = lab.spread(true, N);
    assert_eq!(seen, expect(&[(0, N / 3), (1, N / 3), (2, N / 3)]));
    check_stats(&lab, &vs.key, &seen, true);
}

/// wrr honours weights 3:2:1 exactly over a multiple of their sum.
#[test]
fn tcp_wrr_honours_weights() {
    let lab = Lab::new(3, BPORT, false);
    let vs = VirtualServer::new(vkey(false)).with_scheduler(Scheduler::WeightedRoundRobin);
    lab.program(
        &vs,
        &[(0, 3), (1, 2), (2, 1)],
        BPORT,
        ForwardMethod::Masquerade,
    );
    let seen = lab.spread(false, N);
    assert_eq!(seen, expect(&[(0, N / 2), (1, N / 3), (2, N / 6)]));
    check_stats(&lab, &vs.key, &seen, false);
}

/// A weight-0 backend gets no new connections, also after a live weight
/// change made with `update_destination`.
#[test]
fn tcp_weight_zero_gets_no_new_connections() {
    let lab = Lab::new(3, BPORT, false);
    let vs = VirtualServer::new(vkey(false)).with_scheduler(Scheduler::RoundRobin);
    lab.program(
        &vs,
        &[(0, 1), (1, 1), (2, 0)],
        BPORT,
        ForwardMethod::Masquerade,
    );
    let seen = lab.spread(false, N);
    assert_eq!(seen, expect(&[(0, N / 2), (1, N / 2)]));
    check_stats(&lab, &vs.key, &seen, false);

    // Drain backend 0 and bring backend 2 in: only 1 and 2 answer now.
    let set = |i: usize, w: u32| {
        let rs = RealServer::new(Lab::backend_addr(i, BPORT))
            .with_weight(w)
            .with_forward(ForwardMethod::Masquerade);
        lab.handle.update_destination(&vs.key, &rs).expect("update");
    };
    set(0, 0);
    set(2, 1);
    let seen = lab.spread(false, N);
    assert_eq!(seen, expect(&[(1, N / 2), (2, N / 2)]));
}

/// Persistence keeps one client on one backend, whatever rr would say.
#[test]
fn tcp_persistence_keeps_client_on_one_backend() {
    let lab = Lab::new(3, BPORT, false);
    let vs = VirtualServer::new(vkey(false))
        .with_scheduler(Scheduler::RoundRobin)
        .with_persistence(300);
    lab.program(
        &vs,
        &[(0, 1), (1, 1), (2, 1)],
        BPORT,
        ForwardMethod::Masquerade,
    );
    let seen = lab.spread(false, N);
    assert_eq!(seen.len(), 1, "one backend for one client: {seen:?}");
    assert_eq!(seen.values().sum::<usize>(), N);
    // The connection counts (immediate, unlike the counters) show all 30
    // connections and the persistence template on the chosen destination.
    let dests = lab.dests(&vs.key, BPORT);
    let chosen: Vec<usize> = dests
        .iter()
        .filter(|(_, d)| d.conns.active + d.conns.inactive > 0 || d.conns.persistent > 0)
        .map(|(i, _)| *i)
        .collect();
    assert_eq!(chosen.len(), 1, "{dests:?}");
    let c = &dests[&chosen[0]].conns;
    assert_eq!(c.active + c.inactive, N as u32, "{c:?}");
    assert_eq!(c.persistent, 1, "{c:?}");
    check_stats(&lab, &vs.key, &seen, false);
    assert_eq!(
        seen.keys().next().map(String::as_str),
        Some(Lab::backend_name(chosen[0]).as_str())
    );
}

/// Direct routing: the router only rewrites the MAC address, the backends
/// hold the VIP on their `lo` and answer the client directly (through the
/// router's plain forwarding, which must accept a source address that is
/// local to it). rr still gives each backend a third; since the answers
/// pass through the router, IPVS counts them too.
#[test]
fn tcp_direct_routing_rr_three_backends() {
    let lab = Lab::new(3, VPORT, true);
    // The answers come back with the VIP, an address of the router itself,
    // as source: without accept_local the router drops them as martians.
    lab.router
        .run("sysctl", &["-qw", "net.ipv4.conf.all.accept_local=1"]);
    let vs = VirtualServer::new(vkey(false)).with_scheduler(Scheduler::RoundRobin);
    lab.program(
        &vs,
        &[(0, 1), (1, 1), (2, 1)],
        VPORT,
        ForwardMethod::DirectRoute,
    );
    let seen = lab.spread(false, N);
    assert_eq!(seen, expect(&[(0, N / 3), (1, N / 3), (2, N / 3)]));
    let (svc, dests) = stable_stats(&lab, &vs.key, VPORT, N as u64);
    for (i, d) in &dests {
        let s = &d.stats;
        assert_eq!(s.conns, (N / 3) as u64, "backend {i}: {s:?}");
        assert!(s.in_pkts >= 4 * (N / 3) as u64, "backend {i}: {s:?}");
        assert!(
            s.in_bytes >= (N / 3) as u64 * (4 * 40 + REQUEST.len() as u64),
            "backend {i}: {s:?}"
        );
        // The answers bypass IPVS's rewriting but not the router: they pass
        // its forward path, where IPVS matches them to the connection and
        // counts them as outbound (found on 6.1 and 6.12).
        assert!(s.out_pkts >= 3 * (N / 3) as u64, "backend {i}: {s:?}");
        assert!(
            s.out_bytes >= (N / 3) as u64 * (3 * 40 + Lab::backend_name(*i).len() as u64),
            "backend {i}: {s:?}"
        );
        assert_eq!(d.server.forward, ForwardMethod::DirectRoute);
    }
    assert_eq!(counters(&svc), sum(&dests));
}
