//! Reading the IPVS connection table on a real kernel (the cargo runner
//! starts this bench in the QEMU guest when the host has no IPVS): the
//! library's streaming reader against `cat /proc/net/ip_vs_conn` and
//! `ipvsadm -Lcn` over the same table.
//!
//! The table is made in the guest's own namespace (the guest is thrown away
//! afterwards): a UDP service whose entries are created by locally sent
//! datagrams, one per (source address, source port), from 4 addresses on a
//! dummy interface. `IPVSCTL_BENCH_CONNS` sets the number of entries
//! (default 10,000); the UDP timeout is raised so none expire during the
//! run. How long building the table took is printed.
//!
//! Why not 100,000 by default: building that table took 24 s in the guest,
//! but criterion's warm-up put one full read by the library at about 35 s
//! (Linux 6.1, QEMU TCG, 2026-12-01), against 0.25 s at 10,000: growth with
//! the square of the table, consistent with the kernel side: its seq_file
//! hands out at most a page per `read(2)`, and `ip_vs_conn_seq_start` walks
//! the hash table from the first bucket to the resume position each time.
//!
//! Cases: `reader` (parse every entry into `Connection`s, count them),
//! `cat` (spawn `cat`, output to /dev/null), `ipvsadm_lcn` (spawn
//! `ipvsadm -Lcn`, output to /dev/null). After criterion, the three are run
//! alternately `IPVSCTL_BENCH_PAIRS` times (default 11) and the ratios
//! printed as median with min–max.
//!
//! `cargo bench --bench kernel_conns`; at 100,000 entries
//! `IPVSCTL_BENCH_CONNS=100000 IPVSCTL_BENCH_PAIRS=3 cargo bench --bench
//! kernel_conns -- nomatch` (a filter that matches no criterion case, so
//! only the alternating rounds run: about 3 minutes a round on 6.1).

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group};
use ipvsctl::model::{ForwardMethod, RealServer, ServiceKey, VirtualServer};
use ipvsctl::{Handle, HandleOptions, NetNs};

const VIP: Ipv4Addr = Ipv4Addr::new(10, 9, 9, 9);
const SOURCES: [Ipv4Addr; 4] = [
    Ipv4Addr::new(10, 2, 0, 1),
    Ipv4Addr::new(10, 2, 0, 2),
    Ipv4Addr::new(10, 2, 0, 3),
    Ipv4Addr::new(10, 2, 0, 4),
];
const FIRST_PORT: u16 = 20_000;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn sh(program: &str, args: &[&str]) {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    assert!(out.status.success(), "{program} {args:?}: {out:?}");
}

/// Makes `n` UDP entries in the current namespace; returns how long it took.
fn build_table(n: usize) -> Duration {
    let _ = Command::new("modprobe").arg("ip_vs").status();
    sh("ip", &["link", "set", "lo", "up"]);
    sh("ip", &["link", "add", "conns0", "type", "dummy"]);
    sh("ip", &["link", "set", "conns0", "up"]);
    sh("ip", &["addr", "add", "10.1.0.1/24", "dev", "conns0"]);
    for a in SOURCES {
        sh("ip", &["addr", "add", &format!("{a}/32"), "dev", "conns0"]);
    }
    sh(
        "ip",
        &["route", "add", &format!("{VIP}/32"), "dev", "conns0"],
    );
    let h = Handle::open(&NetNs::Current, &HandleOptions::new()).expect("handle");
    let key = ServiceKey::udp(SocketAddr::new(VIP.into(), 53));
    h.add_service(&VirtualServer::new(key)).expect("service");
    let rs = RealServer::new("10.1.0.2:53".parse().expect("literal"))
        .with_forward(ForwardMethod::Masquerade);
    h.add_destination(&key, &rs).expect("destination");
    let mut t = h.timeouts().expect("timeouts");
    t.udp = 7200;
    h.set_timeouts(&t).expect("udp timeout");

    let start = Instant::now();
    let per_source = n.div_ceil(SOURCES.len());
    assert!(
        per_source <= usize::from(u16::MAX - FIRST_PORT),
        "too many entries"
    );
    let mut made = 0;
    'outer: for a in SOURCES {
        for i in 0..per_source {
            if made == n {
                break 'outer;
            }
            let port = FIRST_PORT + i as u16;
            let s = UdpSocket::bind((a, port)).expect("bind source");
            s.send_to(b"x", (VIP, 53)).expect("send");
            made += 1;
        }
    }
    let took = start.elapsed();
    let have = read_with_library();
    assert!(have >= n, "only {have} of {n} entries in the table");
    took
}

fn read_with_library() -> usize {
    let mut n = 0;
    for entry in ipvsctl::conns::ConnTable::new()
        .connections()
        .expect("open")
    {
        std::hint::black_box(entry.expect("entry"));
        n += 1;
    }
    n
}

fn spawn_to_null(program: &str, args: &[&str]) {
    let status = Command::new(program)
        .args(args)
        .stdout(Stdio::null())
        .status()
        .expect("spawn");
    assert!(status.success(), "{program} {args:?}");
}

fn cat() {
    spawn_to_null("cat", &["/proc/net/ip_vs_conn"]);
}

fn ipvsadm() {
    spawn_to_null("ipvsadm", &["-Lcn"]);
}

fn bench(c: &mut Criterion) {
    let n = env_usize("IPVSCTL_BENCH_CONNS", 10_000);
    let took = build_table(n);
    println!(
        "built {n} UDP entries in {:.1} s ({:.0} entries/s)",
        took.as_secs_f64(),
        n as f64 / took.as_secs_f64()
    );
    let mut g = c.benchmark_group(format!("conns/{n}"));
    g.sample_size(10);
    g.bench_function("reader", |b| b.iter(read_with_library));
    g.bench_function("cat", |b| b.iter(cat));
    g.bench_function("ipvsadm_lcn", |b| b.iter(ipvsadm));
    g.finish();

    let pairs = env_usize("IPVSCTL_BENCH_PAIRS", 11);
    let time = |f: &dyn Fn()| {
        let t = Instant::now();
        f();
        t.elapsed().as_secs_f64()
    };
    let (mut vs_cat, mut vs_ipvsadm, mut reader_s) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..pairs {
        let r = time(&|| {
            read_with_library();
        });
        let c = time(&cat);
        let i = time(&ipvsadm);
        reader_s.push(r);
        vs_cat.push(c / r);
        vs_ipvsadm.push(i / r);
    }
    let summary = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        (v[v.len() / 2], v[0], v[v.len() - 1])
    };
    let (rm, rlo, rhi) = summary(&mut reader_s);
    let (cm, clo, chi) = summary(&mut vs_cat);
    let (im, ilo, ihi) = summary(&mut vs_ipvsadm);
    println!(
        "conns/{n}: reader {:.1} ms (min {:.1}, max {:.1}) over {pairs} rounds",
        rm * 1e3,
        rlo * 1e3,
        rhi * 1e3
    );
    println!("conns/{n}: cat / reader = {cm:.2} (min {clo:.2}, max {chi:.2})");
    println!("conns/{n}: ipvsadm -Lcn / reader = {im:.2} (min {ilo:.2}, max {ihi:.2})");
}

criterion_group!(benches, bench);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
}
