//! A small routed network of namespaces that carries real traffic through
//! IPVS, for the traffic tests (`tests/kernel_traffic*.rs`, `tests/kernel_sync_daemon.rs`).
//!
//! ```text
//!   client 10.0.0.2    ── veth ── 10.0.0.1   router 10.1.i.1   ── veth ── 10.1.i.2   backend i
//!          fd00::2                fd00::1    (IPVS) fd01:i::1             fd01:i::2
//!                                  VIP 10.9.9.9 and fd09::9 on lo,
//!                                  forwarding on for both families
//! ```
//!
//! Every link carries both families, so one lab serves IPv4 and IPv6
//! services. Every backend's default routes point at the router, so replies
//! of masqueraded connections go back through IPVS. The backends run small
//! TCP and UDP servers (and SCTP ones on request): threads of the test whose
//! sockets were opened inside the backend's namespace, bound to `[::]` for
//! both families, answering every request with the backend's name. The
//! client opens connections to a virtual address from inside its namespace
//! and counts the names it gets back; tests compare that with what the
//! scheduler promises and check the counters that ipvsctl decodes.

use std::collections::BTreeMap;
use std::io::{self, ErrorKind, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU16, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ipvsctl::model::{
    AddressFamily, DestinationSnapshot, ForwardMethod, RealServer, ServiceKey, Stats, VirtualServer,
};
use ipvsctl::netlink::netns::run_in;
use ipvsctl::{Handle, HandleOptions, NetNs};
use rustix::net::{self as rnet, ipproto, sockopt};

use super::TestNetns;

/// The IPv4 virtual IP, on the router's `lo`.
pub const VIP4: &str = "10.9.9.9";
/// The IPv6 virtual IP, on the router's `lo`.
pub const VIP6: &str = "fd09::9";
/// The virtual port.
pub const VPORT: u16 = 80;
/// The port the backends listen on (masquerade maps VPORT to it).
pub const BPORT: u16 = 8080;
/// Upper bound for any single network wait.
pub const WAIT: Duration = Duration::from_secs(5);
/// What the client sends before reading the answer.
pub const REQUEST: &[u8] = b"who\n";

/// The transport protocols the lab's servers speak.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Proto {
    /// TCP.
    Tcp,
    /// UDP: one datagram each way.
    Udp,
    /// SCTP, one-to-one style sockets (read and written like TCP streams).
    Sctp,
}

/// The virtual IP of `family`.
pub fn vip(family: AddressFamily) -> IpAddr {
    match family {
        AddressFamily::Inet => VIP4.parse().expect("literal address"),
        _ => VIP6.parse().expect("literal address"),
    }
}

/// `vip(family):VPORT`.
pub fn vaddr(family: AddressFamily) -> SocketAddr {
    SocketAddr::new(vip(family), VPORT)
}

/// The service key of `proto` on `vaddr(family)`.
pub fn vkey(proto: Proto, family: AddressFamily) -> ServiceKey {
    let addr = vaddr(family);
    match proto {
        Proto::Tcp => ServiceKey::tcp(addr),
        Proto::Udp => ServiceKey::udp(addr),
        Proto::Sctp => ServiceKey::sctp(addr),
    }
}

/// The connections one client made to a virtual server: how many each
/// backend name answered, and what carried them.
#[derive(Debug, Clone)]
pub struct Round {
    /// The protocol of the connections.
    pub proto: Proto,
    /// The address family of the connections.
    pub family: AddressFamily,
    /// Answers per backend name.
    pub seen: BTreeMap<String, usize>,
}

/// The router, the client and the backends of one test, with the backends'
/// servers running. Dropping it stops the servers, then deletes the
/// namespaces.
pub struct Lab {
    // Field order matters for drop: servers are stopped in `Drop::drop`,
    // namespaces are deleted when the fields drop afterwards.
    /// The namespace running IPVS.
    pub router: TestNetns,
    /// The namespace the connections come from.
    pub client: TestNetns,
    /// One namespace per real server.
    pub backends: Vec<TestNetns>,
    /// A handle on the router's IPVS.
    pub handle: Handle,
    stop: Arc<AtomicBool>,
    servers: Vec<JoinHandle<()>>,
}

impl Lab {
    /// Builds the topology with `n` backends, each serving TCP and UDP on
    /// `port` (and, when `vip_on_backends`, holding both VIPs on their `lo`,
    /// for direct routing and tunnels).
    pub fn new(n: usize, port: u16, vip_on_backends: bool) -> Lab {
        let router = TestNetns::with_ipvs();
        let client = TestNetns::new();
        router.run(
            "sysctl",
            &[
                "-qw",
                "net.ipv4.ip_forward=1",
                "net.ipv6.conf.all.forwarding=1",
            ],
        );
        add_vips(&router);
        link(
            &router,
            &client,
            "c0",
            ("10.0.0.1", "10.0.0.2"),
            ("fd00::1", "fd00::2"),
        );
        let mut backends = Vec::new();
        for i in 0..n {
            let b = TestNetns::new();
            link(
                &router,
                &b,
                &format!("b{i}"),
                (&format!("10.1.{i}.1"), &format!("10.1.{i}.2")),
                (&format!("fd01:{i}::1"), &format!("fd01:{i}::2")),
            );
            if vip_on_backends {
                add_vips(&b);
            }
            backends.push(b);
        }
        let handle = Handle::open(&NetNs::path(router.path()), &HandleOptions::new())
            .expect("open handle in router");
        let mut lab = Lab {
            router,
            client,
            backends,
            handle,
            stop: Arc::new(AtomicBool::new(false)),
            servers: Vec::new(),
        };
        for i in 0..n {
            let tcp = lab.listener(i, Proto::Tcp, port).expect("bind TCP");
            lab.serve_stream(i, tcp);
            lab.serve_udp(i, port);
        }
        lab
    }

    /// Name of backend `i`, which its servers answer with.
    pub fn backend_name(i: usize) -> String {
        format!("backend-{i}")
    }

    /// Address of backend `i` in `family` on `port`.
    pub fn backend_addr(i: usize, port: u16, family: AddressFamily) -> SocketAddr {
        let ip = match family {
            AddressFamily::Inet => format!("10.1.{i}.2"),
            _ => format!("fd01:{i}::2"),
        };
        SocketAddr::new(ip.parse().expect("literal address"), port)
    }

    /// Starts an SCTP server on `port` in every backend. Fails (with the
    /// `socket` error) where the kernel has no SCTP.
    pub fn serve_sctp(&mut self, port: u16) -> io::Result<()> {
        for i in 0..self.backends.len() {
            let l = self.listener(i, Proto::Sctp, port)?;
            self.serve_stream(i, l);
        }
        Ok(())
    }

    /// A listening stream socket of `proto` on `[::]:port` (both families)
    /// in backend `i`.
    fn listener(&self, i: usize, proto: Proto, port: u16) -> io::Result<TcpListener> {
        let ns = NetNs::path(self.backends[i].path());
        let fd = run_in(&ns, || {
            let fd = socket(AddressFamily::Inet6, proto)?;
            sockopt::set_ipv6_v6only(&fd, false)?;
            sockopt::set_socket_reuseaddr(&fd, true)?;
            rnet::bind(&fd, &SocketAddr::new("::".parse().expect("literal"), port))?;
            rnet::listen(&fd, 64)?;
            Ok(fd)
        })?;
        // An SCTP one-to-one socket accepts, reads and writes like TCP.
        let l = TcpListener::from(fd);
        l.set_nonblocking(true)?;
        Ok(l)
    }

    /// Accepts connections on `l` and answers each with backend `i`'s name.
    fn serve_stream(&mut self, i: usize, l: TcpListener) {
        let name = Lab::backend_name(i);
        let stop = Arc::clone(&self.stop);
        self.servers.push(std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                match l.accept() {
                    Ok((mut s, _)) => {
                        // A client that misbehaves must not stop the server.
                        let _ = answer_stream(&mut s, &name);
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(2))
                    }
                    Err(e) => panic!("{name}: accept: {e}"),
                }
            }
        }));
    }

    /// Starts backend `i`'s UDP server on `[::]:port` (both families).
    fn serve_udp(&mut self, i: usize, port: u16) {
        let ns = NetNs::path(self.backends[i].path());
        let fd = run_in(&ns, || {
            let fd = socket(AddressFamily::Inet6, Proto::Udp)?;
            sockopt::set_ipv6_v6only(&fd, false)?;
            rnet::bind(&fd, &SocketAddr::new("::".parse().expect("literal"), port))?;
            Ok(fd)
        })
        .expect("bind UDP");
        let udp = UdpSocket::from(fd);
        udp.set_read_timeout(Some(Duration::from_millis(20)))
            .expect("UDP timeout");
        let name = Lab::backend_name(i);
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

    /// One connection (or, for UDP, one exchange) of `proto` from the client
    /// to `to`; returns the name answered.
    pub fn request(&self, proto: Proto, to: SocketAddr) -> String {
        match proto {
            Proto::Udp => self.udp_request(to),
            Proto::Tcp => {
                let ns = NetNs::path(self.client.path());
                let s = run_in(&ns, || TcpStream::connect_timeout(&to, WAIT))
                    .unwrap_or_else(|e| panic!("TCP connect to {to} from the client: {e}"));
                stream_request(s, to)
            }
            Proto::Sctp => stream_request(self.sctp_connect(to), to),
        }
    }

    /// An SCTP association from the client to `to`, bounded by [`WAIT`],
    /// from a source port never used before (see [`fresh_source`]).
    fn sctp_connect(&self, to: SocketAddr) -> TcpStream {
        let ns = NetNs::path(self.client.path());
        let family = if to.is_ipv4() {
            AddressFamily::Inet
        } else {
            AddressFamily::Inet6
        };
        run_in(&ns, || {
            let fd = socket(family, Proto::Sctp)?;
            rnet::bind(&fd, &fresh_source(to))?;
            // SCTP's connect waits at most the send timeout.
            sockopt::set_socket_timeout(&fd, sockopt::Timeout::Send, Some(WAIT))?;
            rnet::connect(&fd, &to)?;
            Ok(TcpStream::from(fd))
        })
        .unwrap_or_else(|e| panic!("SCTP connect to {to} from the client: {e}"))
    }

    /// One SCTP exchange from the client's source `from` (reused across
    /// calls, as a client that keeps its port) to `to`, every wait bounded
    /// by `wait`: the name answered, or why not.
    ///
    /// While the association before it from the same port is still being
    /// torn down, the kernel refuses a new one to the same peer with
    /// `EADDRNOTAVAIL` (seen for up to about 100 ms after the try before);
    /// the connect is tried again until `wait` has passed.
    pub fn sctp_request_from(
        &self,
        to: SocketAddr,
        from: SocketAddr,
        wait: Duration,
    ) -> io::Result<String> {
        let ns = NetNs::path(self.client.path());
        let family = if to.is_ipv4() {
            AddressFamily::Inet
        } else {
            AddressFamily::Inet6
        };
        let connect = || {
            let fd = socket(family, Proto::Sctp)?;
            sockopt::set_socket_reuseaddr(&fd, true)?;
            rnet::bind(&fd, &from)?;
            sockopt::set_socket_timeout(&fd, sockopt::Timeout::Send, Some(wait))?;
            rnet::connect(&fd, &to)?;
            Ok(TcpStream::from(fd))
        };
        let deadline = Instant::now() + wait;
        let mut s = loop {
            match run_in(&ns, connect) {
                Err(e) if e.kind() == ErrorKind::AddrNotAvailable && Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                other => break other?,
            }
        };
        s.set_read_timeout(Some(wait))?;
        s.write_all(REQUEST)?;
        let mut answer = String::new();
        s.read_to_string(&mut answer)?;
        Ok(answer)
    }

    /// One UDP exchange from a fresh client socket on a source port never
    /// used before (so a new IPVS connection: an ephemeral port the kernel
    /// happens to pick twice would reuse the first connection's entry);
    /// returns the name answered.
    fn udp_request(&self, to: SocketAddr) -> String {
        let ns = NetNs::path(self.client.path());
        let from = fresh_source(to);
        let sock = run_in(&ns, || UdpSocket::bind(from)).expect("client UDP socket");
        sock.set_read_timeout(Some(WAIT)).expect("read timeout");
        sock.send_to(REQUEST, to)
            .unwrap_or_else(|e| panic!("send to {to}: {e}"));
        let mut buf = [0u8; 64];
        let (n, _) = sock
            .recv_from(&mut buf)
            .unwrap_or_else(|e| panic!("no UDP answer from {to}: {e}"));
        String::from_utf8_lossy(&buf[..n]).into_owned()
    }

    /// `n` requests of `proto` to `vaddr(family)`; how many each name got.
    pub fn spread(&self, proto: Proto, family: AddressFamily, n: usize) -> Round {
        let to = vaddr(family);
        let mut seen = BTreeMap::new();
        for _ in 0..n {
            *seen.entry(self.request(proto, to)).or_insert(0) += 1;
        }
        Round {
            proto,
            family,
            seen,
        }
    }

    /// Adds the virtual server and one real server per `(backend, weight)`,
    /// at the backends' addresses of the service's family.
    pub fn program(
        &self,
        vs: &VirtualServer,
        dests: &[(usize, u32)],
        port: u16,
        fwd: ForwardMethod,
    ) {
        self.handle
            .add_service(vs)
            .unwrap_or_else(|e| panic!("add service {:?}: {e}", vs.key));
        self.add_dests(&vs.key, vs.family(), dests, port, fwd);
    }

    /// Adds one real server per `(backend, weight)` to the service `key`,
    /// at the backend's address of `family`.
    pub fn add_dests(
        &self,
        key: &ServiceKey,
        family: AddressFamily,
        dests: &[(usize, u32)],
        port: u16,
        fwd: ForwardMethod,
    ) {
        for &(i, weight) in dests {
            let rs = RealServer::new(Lab::backend_addr(i, port, family))
                .with_weight(weight)
                .with_forward(fwd);
            self.handle
                .add_destination(key, &rs)
                .unwrap_or_else(|e| panic!("add destination {i} to {key:?}: {e}"));
        }
    }

    /// The destinations of `key` by backend index.
    pub fn dests(&self, key: &ServiceKey) -> BTreeMap<usize, DestinationSnapshot> {
        let list = self
            .handle
            .list_destinations(key)
            .expect("list destinations");
        let mut by_index = BTreeMap::new();
        for d in list {
            let a = d.server.addr;
            let i = (0..self.backends.len())
                .find(|&i| {
                    [AddressFamily::Inet, AddressFamily::Inet6]
                        .iter()
                        .any(|&f| Lab::backend_addr(i, a.port(), f) == a)
                })
                .unwrap_or_else(|| panic!("unexpected destination {a}"));
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
    }
}

/// `modprobe MODULE`; true if it succeeded. Failure is fine where the
/// module is built in; the caller finds out when it uses the feature.
pub fn modprobe(module: &str) -> bool {
    std::process::Command::new(super::tool("modprobe"))
        .arg(module)
        .output()
        .is_ok_and(|o| o.status.success())
}

/// The wildcard address of `to`'s family on a client port no earlier
/// request of this test binary used. A port the kernel's ephemeral choice
/// happens to pick twice would meet the first connection's IPVS entry and,
/// for SCTP, the backend's lingering association of that port pair.
fn fresh_source(to: SocketAddr) -> SocketAddr {
    static NEXT_PORT: AtomicU16 = AtomicU16::new(40_000);
    let port = NEXT_PORT.fetch_add(1, Ordering::Relaxed);
    let any: IpAddr = if to.is_ipv4() {
        "0.0.0.0".parse().expect("literal")
    } else {
        "::".parse().expect("literal")
    };
    SocketAddr::new(any, port)
}

/// Both VIPs on `ns`'s `lo`.
fn add_vips(ns: &TestNetns) {
    ns.ip_batch(&[
        format!("addr add {VIP4}/32 dev lo"),
        format!("addr add {VIP6}/128 dev lo"),
    ]);
}

/// A veth pair between `router` (device `dev`) and `other` (device `eth0`,
/// default routes via the router), with `(router, other)` addresses in /24
/// for IPv4 and /64 for IPv6. IPv6 addresses skip duplicate address
/// detection, which would keep them unusable for a second or more.
/// One `ip -batch` per side, the commands in the order they always ran (a
/// batch line takes no `-6`: the IPv6 ones name IPv6 addresses, and the
/// IPv6 default route is written `::/0`).
pub fn link(router: &TestNetns, other: &TestNetns, dev: &str, v4: (&str, &str), v6: (&str, &str)) {
    other.ip_batch(&[
        format!(
            "link add eth0 type veth peer name {dev} netns {}",
            router.name()
        ),
        format!("addr add {}/24 dev eth0", v4.1),
        format!("addr add {}/64 dev eth0 nodad", v6.1),
        "link set eth0 up".to_owned(),
        format!("route add default via {}", v4.0),
        format!("route add ::/0 via {} dev eth0", v6.0),
    ]);
    router.ip_batch(&[
        format!("addr add {}/24 dev {dev}", v4.0),
        format!("addr add {}/64 dev {dev} nodad", v6.0),
        format!("link set {dev} up"),
    ]);
}

/// A socket of `proto` and `family` in the calling thread's namespace.
fn socket(family: AddressFamily, proto: Proto) -> io::Result<OwnedFd> {
    let af = match family {
        AddressFamily::Inet => rnet::AddressFamily::INET,
        _ => rnet::AddressFamily::INET6,
    };
    let fd = match proto {
        Proto::Tcp => rnet::socket(af, rnet::SocketType::STREAM, Some(ipproto::TCP)),
        Proto::Udp => rnet::socket(af, rnet::SocketType::DGRAM, Some(ipproto::UDP)),
        Proto::Sctp => rnet::socket(af, rnet::SocketType::STREAM, Some(ipproto::SCTP)),
    }?;
    Ok(fd)
}

/// The client side of one stream connection: send the request, read the
/// answer up to the server's close.
fn stream_request(mut s: TcpStream, to: SocketAddr) -> String {
    s.set_read_timeout(Some(WAIT)).expect("read timeout");
    s.write_all(REQUEST)
        .unwrap_or_else(|e| panic!("send to {to}: {e}"));
    let mut answer = String::new();
    s.read_to_string(&mut answer)
        .unwrap_or_else(|e| panic!("read from {to}: {e}"));
    answer
}

/// The server side of one stream connection: read the request, answer the
/// name, close.
fn answer_stream(s: &mut TcpStream, name: &str) -> io::Result<()> {
    s.set_nonblocking(false)?;
    s.set_read_timeout(Some(WAIT))?;
    let mut buf = [0u8; REQUEST.len()];
    s.read_exact(&mut buf)?;
    s.write_all(name.as_bytes())
}

/// Expected count per backend name, leaving out backends expected to get 0.
pub fn expect(counts: &[(usize, usize)]) -> BTreeMap<String, usize> {
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

/// The counters a connection check compares.
pub type Counters = (u64, u64, u64, u64, u64);

/// How often [`stable_stats`] reads the counters while it waits.
const STATS_POLL: Duration = Duration::from_millis(250);

/// Reads the service and its destinations until the reads have agreed for
/// a whole estimator period (every read in it the same, so the estimator
/// ran at least once in between and had nothing new to fold in, including
/// the last FINs) and the service counted `total` connections, or 25 s have
/// passed; returns the last read. Reading every [`STATS_POLL`] instead of
/// once per period ends the wait one period after the last change rather
/// than at the next period boundary after that.
pub fn stable_stats(
    lab: &Lab,
    key: &ServiceKey,
    total: u64,
) -> (Stats, BTreeMap<usize, DestinationSnapshot>) {
    let read = || {
        let svc = lab.handle.get_service(key).expect("get service");
        (svc.stats, lab.dests(key))
    };
    let view = |r: &(Stats, BTreeMap<usize, DestinationSnapshot>)| {
        let d: Vec<_> = r.1.values().map(|d| counters(&d.stats)).collect();
        (counters(&r.0), d)
    };
    let start = Instant::now();
    let mut prev = read();
    let mut same_since = Instant::now();
    while start.elapsed() < 10 * ESTIMATOR_PERIOD {
        std::thread::sleep(STATS_POLL);
        let cur = read();
        if view(&cur) != view(&prev) {
            same_since = Instant::now();
        } else if same_since.elapsed() >= ESTIMATOR_PERIOD && cur.0.conns == total {
            return cur;
        }
        prev = cur;
    }
    prev
}

/// Sum of the counters of `dests`.
pub fn sum(dests: &BTreeMap<usize, DestinationSnapshot>) -> Counters {
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

/// The counters of `s`, in [`Counters`] order.
pub fn counters(s: &Stats) -> Counters {
    (s.conns, s.in_pkts, s.out_pkts, s.in_bytes, s.out_bytes)
}

/// The fewest packets each way of one request of `proto`, and the fewest
/// header bytes of each packet in `family`.
fn floor(proto: Proto, family: AddressFamily) -> (u64, u64, u64) {
    let ip = if family == AddressFamily::Inet {
        20
    } else {
        40
    };
    match proto {
        // SYN, ACK, request, FIN/ACK from the client; SYN-ACK, answer, FIN
        // from the server; TCP headers are 20 bytes or more.
        Proto::Tcp => (4, 3, ip + 20),
        Proto::Udp => (1, 1, ip + 8),
        // INIT, COOKIE ECHO, DATA from the client; INIT ACK, COOKIE ACK,
        // DATA from the server; a 12-byte common header each.
        Proto::Sctp => (3, 3, ip + 12),
    }
}

/// Checks that each destination counted the connections it answered in
/// `rounds` and at least the packets and payload bytes they carried, and
/// that the service's counters are the sum of its destinations'.
pub fn check_stats(lab: &Lab, key: &ServiceKey, rounds: &[Round]) {
    let total = rounds
        .iter()
        .map(|r| r.seen.values().sum::<usize>() as u64)
        .sum::<u64>();
    let (svc, dests) = stable_stats(lab, key, total);
    for (i, d) in &dests {
        let name = Lab::backend_name(*i);
        let (mut conns, mut in_pkts, mut out_pkts, mut in_bytes, mut out_bytes) = (0, 0, 0, 0, 0);
        for r in rounds {
            let n = r.seen.get(&name).copied().unwrap_or(0) as u64;
            let (min_in, min_out, hdr) = floor(r.proto, r.family);
            conns += n;
            in_pkts += min_in * n;
            out_pkts += min_out * n;
            in_bytes += n * (min_in * hdr + REQUEST.len() as u64);
            out_bytes += n * (min_out * hdr + name.len() as u64);
        }
        let s = &d.stats;
        assert_eq!(s.conns, conns, "backend {i}: connections counted: {s:?}");
        assert!(s.in_pkts >= in_pkts, "backend {i}: in packets: {s:?}");
        assert!(s.out_pkts >= out_pkts, "backend {i}: out packets: {s:?}");
        assert!(s.in_bytes >= in_bytes, "backend {i}: in bytes: {s:?}");
        assert!(s.out_bytes >= out_bytes, "backend {i}: out bytes: {s:?}");
    }
    assert_eq!(
        counters(&svc),
        sum(&dests),
        "service counters are the sum of the destinations'"
    );
    assert_eq!(svc.conns, total);
}
