//! Node-IP resolution cost.
//!
//! * `nodeips_filter` (runs anywhere): the pure filter on synthetic records,
//!   1,000 interfaces × 4 addresses.
//! * `nodeips_kernel` (needs root and dummy interfaces, i.e. the VM; falls back
//!   to `ifb` devices where the kernel lacks dummy): a fresh network namespace
//!   with 1,000 UP interfaces × 4 addresses (2 IPv4, 2 IPv6). Compares
//!   - `two_dumps`: `nodeips::explain`, one link dump + one address dump;
//!   - `per_interface_full_dump`: the kube-proxy way — one link dump, then for
//!     every interface a full `RTM_GETADDR` dump filtered by index in user
//!     space (what Go's `net.Interface.Addrs()` does);
//!   - `per_interface_strict_dump`: one `RTM_GETADDR` dump per interface that
//!     the kernel filters by index (`NETLINK_GET_STRICT_CHK`): still one round
//!     trip per interface.
//!
//! A summary line with the ratio is printed on stderr before the group runs.
//! Set `IPVSCTL_BENCH_IFACES` to change the interface count.

use std::hint::black_box;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::process::Command;
use std::time::{Duration, Instant};

use criterion::{Criterion, SamplingMode, criterion_group, criterion_main};
use ipvsctl::netlink::netns::{NetNs, socket_in};
use ipvsctl::nodeips::{self, AddressFlags, AddressRecord, InterfaceFlags, LinkRecord, Options};
use netlink_packet_core::{
    NLM_F_DUMP, NLM_F_REQUEST, NLMSG_DONE, NLMSG_ERROR, NetlinkBuffer, NetlinkHeader,
    NetlinkMessage, NetlinkPayload, NlasIterator, Parseable,
};
use netlink_packet_route::RouteNetlinkMessage;
use netlink_packet_route::address::{AddressAttribute, AddressHeader, AddressMessage};
use netlink_packet_route::link::{LinkAttribute, LinkExtentMask, LinkHeader, LinkMessage};
use netlink_sys::Socket;
use netlink_sys::protocols::NETLINK_ROUTE;

const DEFAULT_IFACES: u32 = 1000;
const PREFIXES: [&str; 5] = ["ens", "enp", "eno", "bond", "em"];

fn iface_count() -> u32 {
    std::env::var("IPVSCTL_BENCH_IFACES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_IFACES)
}

fn v4(i: u32, host: u8) -> Ipv4Addr {
    Ipv4Addr::new(10, (i / 250) as u8, (i % 250) as u8, host)
}

fn v6(i: u32, host: u16) -> Ipv6Addr {
    Ipv6Addr::new(0x2001, 0xdb8, (i >> 16) as u16, i as u16, 0, 0, 0, host)
}

fn iface_name(i: u32) -> String {
    format!("{}{i}", PREFIXES[(i % 5) as usize])
}

// ---------------------------------------------------------------- pure filter

fn synthetic(n: u32) -> (Vec<LinkRecord>, Vec<AddressRecord>) {
    let up = InterfaceFlags::UP | InterfaceFlags::RUNNING | InterfaceFlags::LOWER_UP;
    let mut links = vec![LinkRecord::new(1, "lo", up | InterfaceFlags::LOOPBACK)];
    let mut addrs = vec![AddressRecord::new(1, Ipv4Addr::LOCALHOST.into(), 8)];
    for i in 0..n {
        let index = i + 2;
        let flags = if i % 10 == 9 {
            InterfaceFlags::empty()
        } else {
            up
        };
        links.push(LinkRecord::new(index, iface_name(i), flags));
        addrs.push(AddressRecord::new(index, v4(i, 1).into(), 24));
        addrs.push(
            AddressRecord::new(index, v4(i, 2).into(), 24).with_flags(AddressFlags::SECONDARY),
        );
        addrs.push(AddressRecord::new(index, v6(i, 1).into(), 64));
        let f = if i % 7 == 0 {
            AddressFlags::TENTATIVE
        } else {
            AddressFlags::PERMANENT
        };
        addrs.push(AddressRecord::new(index, v6(i, 2).into(), 64).with_flags(f));
    }
    (links, addrs)
}

fn bench_filter(c: &mut Criterion) {
    let n = iface_count();
    let (links, addrs) = synthetic(n);
    let mut group = c.benchmark_group("nodeips_filter");
    let defaults = Options::new();
    group.bench_function(format!("{n}x4_defaults"), |b| {
        b.iter(|| {
            black_box(nodeips::filter(
                black_box(&links),
                black_box(&addrs),
                &defaults,
            ))
        })
    });
    let filtered = Options::new()
        .exclude("kube-ipvs0")
        .exclude("docker0")
        .cidr("10.0.0.0/9".parse().expect("static CIDR"))
        .cidr("2001:db8::/48".parse().expect("static CIDR"))
        .skip_deprecated(true)
        .require_running(true);
    group.bench_function(format!("{n}x4_exclude_cidrs"), |b| {
        b.iter(|| {
            black_box(nodeips::filter(
                black_box(&links),
                black_box(&addrs),
                &filtered,
            ))
        })
    });
    group.finish();
}

// ---------------------------------------------------------------- kernel side

/// A network namespace holding `n` UP interfaces with 4 addresses each.
struct BenchNetns {
    name: String,
}

impl BenchNetns {
    fn create(n: u32) -> Result<Self, String> {
        let name = format!("ipvsctl-bench-{}", std::process::id());
        ip(&["netns", "add", &name])?;
        let ns = BenchNetns { name };
        // No kernel-generated link-local addresses: exactly 4 per interface.
        ns.exec(&["sysctl", "-qw", "net.ipv6.conf.default.addr_gen_mode=1"])?;
        ns.exec(&["ip", "link", "set", "lo", "up"])?;
        let file = std::env::temp_dir().join(format!("{}.batch", ns.name));
        let mut last_err = String::new();
        for kind in ["dummy", "ifb"] {
            std::fs::write(&file, batch(n, kind)).map_err(|e| e.to_string())?;
            match ns.exec(&["ip", "-batch", &file.to_string_lossy()]) {
                Ok(()) => {
                    let _ = std::fs::remove_file(&file);
                    eprintln!(
                        "nodeips bench: {n} {kind} interfaces x 4 addresses in {}",
                        ns.name
                    );
                    return Ok(ns);
                }
                Err(e) => {
                    last_err = e;
                    // Remove whatever the failed batch created.
                    let _ = ip(&["netns", "del", &ns.name]);
                    ip(&["netns", "add", &ns.name])?;
                    ns.exec(&["sysctl", "-qw", "net.ipv6.conf.default.addr_gen_mode=1"])?;
                    ns.exec(&["ip", "link", "set", "lo", "up"])?;
                }
            }
        }
        let _ = std::fs::remove_file(&file);
        Err(last_err)
    }

    fn exec(&self, args: &[&str]) -> Result<(), String> {
        let mut full = vec!["netns", "exec", &self.name];
        full.extend_from_slice(args);
        ip(&full)
    }

    fn netns(&self) -> NetNs {
        NetNs::named(&self.name)
    }
}

impl Drop for BenchNetns {
    fn drop(&mut self) {
        let _ = ip(&["netns", "del", &self.name]);
    }
}

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("ip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

fn batch(n: u32, kind: &str) -> String {
    let mut s = String::new();
    for i in 0..n {
        let name = iface_name(i);
        s.push_str(&format!(
            "link add {name} type {kind}\nlink set {name} up\n"
        ));
        s.push_str(&format!("addr add {}/24 dev {name}\n", v4(i, 1)));
        s.push_str(&format!("addr add {}/24 dev {name}\n", v4(i, 2)));
        s.push_str(&format!("addr add {}/64 dev {name} nodad\n", v6(i, 1)));
        s.push_str(&format!("addr add {}/64 dev {name} nodad\n", v6(i, 2)));
    }
    s
}

/// A minimal rtnetlink dumper for the baselines.
struct Dumper {
    socket: Socket,
    seq: u32,
    buf: Vec<u8>,
}

impl Dumper {
    fn open(ns: &NetNs, strict: bool) -> io::Result<Self> {
        let mut socket = socket_in(ns, NETLINK_ROUTE)?;
        socket.bind_auto()?;
        if strict {
            socket.set_netlink_get_strict_chk(true)?;
        }
        Ok(Dumper {
            socket,
            seq: 0,
            buf: Vec::with_capacity(64 * 1024),
        })
    }

    /// Sends a dump request and calls `f(type, payload)` for each reply message.
    fn dump(&mut self, req: RouteNetlinkMessage, mut f: impl FnMut(u16, &[u8])) -> io::Result<()> {
        self.seq += 1;
        let mut header = NetlinkHeader::default();
        header.flags = NLM_F_REQUEST | NLM_F_DUMP;
        header.sequence_number = self.seq;
        let mut msg = NetlinkMessage::new(header, NetlinkPayload::InnerMessage(req));
        msg.finalize();
        let mut bytes = vec![0; msg.buffer_len()];
        msg.serialize(&mut bytes);
        self.socket.send(&bytes, 0)?;
        loop {
            self.buf.clear();
            let n = self.socket.recv(&mut self.buf, 0)?;
            let mut rest = self.buf.get(..n).unwrap_or_default();
            while !rest.is_empty() {
                let m = NetlinkBuffer::new_checked(rest).map_err(io::Error::other)?;
                let len = m.length() as usize;
                let payload = rest.get(16..len).unwrap_or_default();
                rest = rest.get((len + 3) & !3..).unwrap_or_default();
                if m.sequence_number() != self.seq {
                    continue;
                }
                match m.message_type() {
                    NLMSG_DONE => return Ok(()),
                    NLMSG_ERROR => {
                        let code = payload
                            .get(..4)
                            .and_then(|b| b.try_into().ok())
                            .map(i32::from_ne_bytes)
                            .unwrap_or(-1);
                        return Err(io::Error::from_raw_os_error(-code));
                    }
                    t => f(t, payload),
                }
            }
        }
    }

    fn link_indexes(&mut self) -> io::Result<Vec<u32>> {
        let mut req = LinkMessage::default();
        req.attributes
            .push(LinkAttribute::ExtMask(vec![LinkExtentMask::SkipStats]));
        let mut out = Vec::new();
        self.dump(RouteNetlinkMessage::GetLink(req), |_, p| {
            if let Ok(h) = LinkHeader::parse(p) {
                out.push(h.index);
            }
        })?;
        Ok(out)
    }

    /// Addresses of interface `index` from an address dump (kernel-filtered
    /// when `strict`, otherwise a full dump filtered here).
    fn addresses_of(&mut self, index: u32, strict: bool) -> io::Result<Vec<IpAddr>> {
        let mut req = AddressMessage::default();
        if strict {
            req.header.index = index;
        }
        let mut out = Vec::new();
        self.dump(RouteNetlinkMessage::GetAddress(req), |_, p| {
            let Ok(h) = AddressHeader::parse(p) else {
                return;
            };
            if h.index != index {
                return;
            }
            let (mut local, mut address) = (None, None);
            for nla in NlasIterator::new(p.get(8..).unwrap_or_default()).flatten() {
                match AddressAttribute::parse(&nla) {
                    Ok(AddressAttribute::Local(a)) => local = Some(a),
                    Ok(AddressAttribute::Address(a)) => address = Some(a),
                    _ => {}
                }
            }
            out.extend(local.or(address));
        })?;
        Ok(out)
    }
}

/// The kube-proxy way: one address dump per interface.
fn per_interface(ns: &NetNs, strict: bool) -> io::Result<usize> {
    let mut d = Dumper::open(ns, strict)?;
    let mut total = 0;
    for index in d.link_indexes()? {
        total += d.addresses_of(index, strict)?.len();
    }
    Ok(total)
}

fn time<T>(runs: u32, mut f: impl FnMut() -> T) -> Duration {
    let start = Instant::now();
    for _ in 0..runs {
        black_box(f());
    }
    start.elapsed() / runs
}

fn bench_kernel(c: &mut Criterion) {
    let n = iface_count();
    let ns = match BenchNetns::create(n) {
        Ok(ns) => ns,
        Err(e) => {
            eprintln!("nodeips bench: kernel group skipped ({e}); run it in the VM as root");
            return;
        }
    };
    let pinned = match ns.netns().pin() {
        Ok(pinned) => pinned,
        Err(e) => {
            eprintln!("nodeips bench: cannot pin the bench namespace ({e}); skipped");
            return;
        }
    };
    let opts = Options::new().netns(pinned).loopback(true);
    let expected = 4 * n as usize + 2; // + lo's 127.0.0.1 and ::1
    match nodeips::explain(&opts) {
        Ok(r) if r.node_ips().len() == expected => {}
        Ok(r) => {
            eprintln!(
                "nodeips bench: expected {expected} node IPs, got {}; skipped",
                r.node_ips().len()
            );
            return;
        }
        Err(e) => {
            eprintln!("nodeips bench: resolve failed ({e}); skipped");
            return;
        }
    }
    for strict in [false, true] {
        match per_interface(&ns.netns(), strict) {
            Ok(count) if count == expected => {}
            other => {
                eprintln!(
                    "nodeips bench: per-interface baseline (strict={strict}) gave {other:?}, expected {expected}; skipped"
                );
                return;
            }
        }
    }

    // A plain summary, independent of criterion's statistics (skipped when
    // `cargo test` runs the benches once as tests).
    if std::env::args().any(|a| a == "--bench") {
        summary(n, &ns, &opts);
    }
    kernel_group(c, n, &ns, &opts);
}

/// Prints the three costs and their ratios on one line.
fn summary(n: u32, ns: &BenchNetns, opts: &Options) {
    let two = time(5, || nodeips::explain(opts).map(|r| r.node_ips().len()));
    let full = time(2, || per_interface(&ns.netns(), false));
    let strict = time(5, || per_interface(&ns.netns(), true));
    eprintln!(
        "nodeips bench summary ({n} interfaces x 4 addresses): two dumps {two:?}; \
         per-interface full dumps {full:?} ({:.0}x slower); \
         per-interface kernel-filtered dumps {strict:?} ({:.1}x slower)",
        full.as_secs_f64() / two.as_secs_f64(),
        strict.as_secs_f64() / two.as_secs_f64(),
    );
}

/// The criterion measurements of the kernel side.
fn kernel_group(c: &mut Criterion, n: u32, ns: &BenchNetns, opts: &Options) {
    let mut group = c.benchmark_group("nodeips_kernel");
    group.sample_size(10);
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(10));
    group.bench_function(format!("{n}x4_two_dumps"), |b| {
        b.iter(|| nodeips::explain(opts).map(|r| r.node_ips().len()))
    });
    group.bench_function(format!("{n}x4_per_interface_strict_dump"), |b| {
        b.iter(|| per_interface(&ns.netns(), true))
    });
    // About a second per iteration: flat sampling, 10 samples.
    group.sampling_mode(SamplingMode::Flat);
    group.measurement_time(Duration::from_secs(20));
    group.bench_function(format!("{n}x4_per_interface_full_dump"), |b| {
        b.iter(|| per_interface(&ns.netns(), false))
    });
    group.finish();
}

criterion_group!(benches, bench_filter, bench_kernel);
criterion_main!(benches);
