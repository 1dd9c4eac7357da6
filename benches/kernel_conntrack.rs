//! Conntrack cleanup on a real kernel (the cargo runner starts this bench in
//! the QEMU guest when the host has no IPVS): `Conntrack::delete` against
//! Debian's `conntrack -D` (conntrack-tools) with the same filter, over the
//! same table, side by side in one run.
//!
//! The table is made in a fresh network namespace by ctnetlink, as
//! `conntrack -I` makes entries (`unstable::conntrack_create`, pipelined):
//! `IPVSCTL_BENCH_CT` IPv4 UDP entries (default 2,000), each of a client
//! with its own source address and port, masqueraded to one of 100 real
//! servers of 4 services (25 each), round robin, so that one real server
//! has a hundredth of the table and one service a quarter. Entries live an
//! hour, far longer than a run.
//!
//! Two cases, each a delete with one filter:
//! * `real_server`: the entries of one real server,
//!   `Filter::real_server(&service, real)` against `conntrack -D -f ipv4
//!   -p udp --orig-dst VIP --dport PORT --reply-src RS --reply-port-src
//!   RPORT`;
//! * `service`: the entries of one service, `Filter::service(&service)`
//!   against `conntrack -D -f ipv4 -p udp --orig-dst VIP --dport PORT`.
//!
//! A round runs every case once with each tool, the tool that goes first
//! alternating from round to round; before each measured delete the
//! entries the previous one deleted are made again (not timed), so every
//! delete starts from the full table. Each delete must remove exactly the
//! entries the table was built with for that filter: the library's report
//! and `conntrack`'s "N flow entries have been deleted" are both checked
//! against that count. `conntrack`'s time includes starting the process
//! (its listing of the deleted entries goes to /dev/null); the library's
//! includes opening its socket. Each round also times a spawn of
//! `conntrack --version` (the cost of starting the process alone) and the
//! library's dump and match without the deletes (`Conntrack::entries` of
//! the first case).
//!
//! Printed: one line per delete (time, entries deleted) and per round the
//! ratio `conntrack -D` / library of each case; at the end, for each case,
//! the median and min–max of the library's time and of the ratios over
//! `IPVSCTL_BENCH_PAIRS` rounds (default 5 under `cargo bench`, 2 in test
//! mode).
//!
//! No criterion: a delete changes the table, so every measured run needs a
//! rebuild, and the alternating rounds are what the figures come from.
//! `cargo test --benches` (CI's test mode) runs the same at the default
//! size in seconds; the figure in docs/performance.md is
//! `IPVSCTL_BENCH_CT=100000 cargo bench --all-features --bench
//! kernel_conntrack`.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use ipvsctl::conntrack::{Conntrack, Filter, Tuple};
use ipvsctl::model::{Protocol, ServiceKey};
use ipvsctl::netlink::netns::run_in;
use ipvsctl::unstable::{NewEntry, conntrack_create};
use ipvsctl::{NetNs, Timeout};

const SERVICES: u8 = 4;
const REALS_PER_SERVICE: u8 = 25;
const VPORT: u16 = 53;
const RPORT: u16 = 5353;
/// Seconds an entry lives: far longer than any run.
const ENTRY_TIMEOUT: u32 = 3600;
/// How long one `conntrack` run may take before it is killed.
const TOOL_DEADLINE: Duration = Duration::from_secs(600);
/// The library's wait for each answer of the kernel.
const LIBRARY_WAIT: Duration = Duration::from_secs(30);
/// The first source port of the clients; each client address has
/// `PORTS_PER_CLIENT` ports from it.
const FIRST_PORT: u16 = 10_000;
const PORTS_PER_CLIENT: usize = 50_000;

fn env_usize(name: &str, default: usize) -> usize {
    match std::env::var(name) {
        Err(_) => default,
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not a number")),
    }
}

fn sh(program: &str, args: &[&str]) -> String {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    assert!(out.status.success(), "{program} {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn vip(service: u8) -> Ipv4Addr {
    Ipv4Addr::new(10, 96, 0, 1 + service)
}

fn service_key(service: u8) -> ServiceKey {
    ServiceKey::udp(SocketAddr::new(vip(service).into(), VPORT))
}

fn real_server(service: u8, real: u8) -> SocketAddr {
    SocketAddr::new(Ipv4Addr::new(10, 244, service, 1 + real).into(), RPORT)
}

/// Entry `i` of the table: client `i` (its own address and port) to the
/// `i % 100`th real server, in service order.
fn entry(i: usize) -> (NewEntry, u8, u8) {
    let slot = i % usize::from(SERVICES * REALS_PER_SERVICE);
    let (service, real) = (
        (slot / usize::from(REALS_PER_SERVICE)) as u8,
        (slot % usize::from(REALS_PER_SERVICE)) as u8,
    );
    let host = u32::try_from(i / PORTS_PER_CLIENT).expect("client count");
    let client = IpAddr::V4(Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 1, 0, 1)) + host));
    let port = FIRST_PORT + (i % PORTS_PER_CLIENT) as u16;
    let (v, r) = (vip(service), real_server(service, real));
    let new = NewEntry {
        orig: Tuple::new(client, v.into(), Protocol::Udp, port, VPORT),
        reply: Tuple::new(r.ip(), client, Protocol::Udp, r.port(), port),
        timeout: ENTRY_TIMEOUT,
    };
    (new, service, real)
}

/// One case: a filter for the library, the same selection as `conntrack`
/// options, and the entries it selects (made again after each delete).
struct Case {
    name: &'static str,
    filter: Filter,
    tool_args: Vec<String>,
    selected: Vec<NewEntry>,
}

fn cases(n: usize) -> Vec<Case> {
    // A real server and a service in the middle of the table, not the
    // first ones made.
    let (rs_service, rs_real, whole_service) = (2, 12, 1);
    let key = service_key(rs_service);
    let rs = real_server(rs_service, rs_real);
    let svc = service_key(whole_service);
    let udp_to = |service: u8| {
        vec![
            "-f".into(),
            "ipv4".into(),
            "-p".into(),
            "udp".into(),
            "--orig-dst".into(),
            vip(service).to_string(),
            "--dport".into(),
            VPORT.to_string(),
        ]
    };
    let mut by_rs = udp_to(rs_service);
    by_rs.extend([
        "--reply-src".into(),
        rs.ip().to_string(),
        "--reply-port-src".into(),
        rs.port().to_string(),
    ]);
    let (mut of_rs, mut of_svc) = (Vec::new(), Vec::new());
    for i in 0..n {
        let (e, s, r) = entry(i);
        if s == rs_service && r == rs_real {
            of_rs.push(e.clone());
        }
        if s == whole_service {
            of_svc.push(e);
        }
    }
    vec![
        Case {
            name: "real_server",
            filter: Filter::real_server(&key, rs).expect("filter"),
            tool_args: by_rs,
            selected: of_rs,
        },
        Case {
            name: "service",
            filter: Filter::service(&svc).expect("filter"),
            tool_args: udp_to(whole_service),
            selected: of_svc,
        },
    ]
}

/// The namespace of the run, deleted when dropped.
struct Netns(String);

impl Netns {
    fn new() -> Netns {
        let name = format!("ipvsctl-bench-ct-{}", std::process::id());
        sh("ip", &["netns", "add", &name]);
        let ns = Netns(name);
        sh("ip", &["-n", &ns.0, "link", "set", "lo", "up"]);
        ns
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

/// Raises the kernel's table limit (a setting of the initial namespace,
/// shared by all) when it is below what the run needs.
fn make_room(n: usize) {
    let _ = Command::new("modprobe")
        .arg("nf_conntrack_netlink")
        .status();
    let path = "/proc/sys/net/netfilter/nf_conntrack_max";
    let max: usize = std::fs::read_to_string(path)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0);
    let need = n + n / 2 + 1024;
    if max < need {
        std::fs::write(path, need.to_string()).expect("raise nf_conntrack_max");
    }
    let buckets =
        std::fs::read_to_string("/proc/sys/net/netfilter/nf_conntrack_buckets").unwrap_or_default();
    println!(
        "nf_conntrack_max {} (was {max}), nf_conntrack_buckets {}",
        max.max(need),
        buckets.trim()
    );
}

/// The library's delete; returns (seconds, entries deleted).
fn library(ct: &Conntrack, case: &Case) -> (f64, usize) {
    let t = Instant::now();
    let report = ct.delete(&case.filter).expect("delete");
    let took = t.elapsed().as_secs_f64();
    assert!(report.is_ok(), "{}: {:?}", case.name, report.failed);
    assert_eq!(report.total.already_gone, 0, "{}: {report:?}", case.name);
    (took, report.total.deleted)
}

/// Runs `conntrack args` (stdout to /dev/null), killed at the deadline;
/// returns (seconds, stderr).
fn run_tool(args: &[String]) -> (f64, String) {
    let t = Instant::now();
    let child = Command::new("conntrack")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn conntrack (Debian package conntrack)");
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let out = match rx.recv_timeout(TOOL_DEADLINE) {
        Ok(out) => out.expect("wait for conntrack"),
        Err(_) => {
            // Not reaped yet (the waiter is still in wait), so the pid is
            // still the child's.
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
            let _ = waiter.join();
            panic!("conntrack {args:?} still running after {TOOL_DEADLINE:?}");
        }
    };
    let took = t.elapsed().as_secs_f64();
    let _ = waiter.join();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "conntrack {args:?}: {out:?}");
    (took, stderr)
}

/// `conntrack -D`; returns (seconds, entries it says it deleted).
fn tool(case: &Case) -> (f64, usize) {
    let mut args = vec!["-D".to_owned()];
    args.extend(case.tool_args.iter().cloned());
    let (took, stderr) = run_tool(&args);
    let deleted = stderr
        .lines()
        .find_map(|l| l.strip_suffix(" flow entries have been deleted."))
        .and_then(|n| n.trim().rsplit(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no count in conntrack's stderr: {stderr:?}"));
    (took, deleted)
}

fn rebuild(ct: &Conntrack, case: &Case) {
    let made = conntrack_create(ct, &case.selected).expect("make the deleted entries again");
    assert_eq!(made, case.selected.len(), "{}", case.name);
}

fn summary(v: &[f64]) -> (f64, f64, f64) {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

fn bench(n: usize, pairs: usize) {
    let ct = Conntrack::new().timeout(Timeout::new(LIBRARY_WAIT).expect("timeout"));
    let entries: Vec<NewEntry> = (0..n).map(|i| entry(i).0).collect();
    let t = Instant::now();
    let made = conntrack_create(&ct, &entries).expect("build the table");
    let took = t.elapsed().as_secs_f64();
    assert_eq!(made, n);
    println!(
        "made {n} IPv4 UDP entries in {:.2} s ({:.0} entries/s)",
        took,
        n as f64 / took
    );
    let cases = cases(n);
    for c in &cases {
        let all = ct.entries(&c.filter).expect("entries");
        assert_eq!(all.len(), c.selected.len(), "{}: the table", c.name);
        println!("case {}: {} of {n} entries", c.name, c.selected.len());
    }
    let mut lib_s = vec![Vec::new(); cases.len()];
    let mut ratios = vec![Vec::new(); cases.len()];
    let (mut spawn_s, mut read_s) = (Vec::new(), Vec::new());
    for round in 0..pairs {
        spawn_s.push(run_tool(&["--version".to_owned()]).0);
        // The library's dump and match alone, without deleting: how much
        // of a delete's time is reading the table.
        let t = Instant::now();
        let read = ct.entries(&cases[0].filter).expect("entries");
        read_s.push(t.elapsed().as_secs_f64());
        assert_eq!(read.len(), cases[0].selected.len());
        for (k, c) in cases.iter().enumerate() {
            let library_first = (round + k) % 2 == 0;
            let mut times = [0.0; 2];
            for step in 0..2 {
                let use_library = (step == 0) == library_first;
                let (secs, deleted) = if use_library {
                    library(&ct, c)
                } else {
                    tool(c)
                };
                let who = if use_library {
                    "library"
                } else {
                    "conntrack -D"
                };
                assert_eq!(
                    deleted,
                    c.selected.len(),
                    "{who} deleted {deleted} entries of case {}, not {}",
                    c.name,
                    c.selected.len()
                );
                times[usize::from(!use_library)] = secs;
                rebuild(&ct, c);
            }
            println!(
                "round {} {}: library {:.1} ms, conntrack -D {:.1} ms, ratio {:.2} ({} deleted each, {} first)",
                round + 1,
                c.name,
                times[0] * 1e3,
                times[1] * 1e3,
                times[1] / times[0],
                c.selected.len(),
                if library_first {
                    "library"
                } else {
                    "conntrack"
                },
            );
            lib_s[k].push(times[0]);
            ratios[k].push(times[1] / times[0]);
        }
    }
    // Every entry is back: the table the rounds ended with is the one
    // they started from.
    for c in &cases {
        assert_eq!(
            ct.entries(&c.filter).expect("entries").len(),
            c.selected.len()
        );
    }
    let (sm, slo, shi) = summary(&spawn_s);
    println!(
        "conntrack --version (process start): {:.1} ms (min {:.1}, max {:.1})",
        sm * 1e3,
        slo * 1e3,
        shi * 1e3
    );
    let (rm, rlo, rhi) = summary(&read_s);
    println!(
        "library, dump and match only (Conntrack::entries, {}): {:.1} ms (min {:.1}, max {:.1})",
        cases[0].name,
        rm * 1e3,
        rlo * 1e3,
        rhi * 1e3
    );
    for (k, c) in cases.iter().enumerate() {
        let (lm, llo, lhi) = summary(&lib_s[k]);
        let (rm, rlo, rhi) = summary(&ratios[k]);
        println!(
            "ct/{n}/{}: library {:.1} ms (min {:.1}, max {:.1}); conntrack -D / library = {rm:.2} (min {rlo:.2}, max {rhi:.2}) over {pairs} rounds",
            c.name,
            lm * 1e3,
            llo * 1e3,
            lhi * 1e3,
        );
    }
}

fn main() {
    // The cargo runner counts a binary's cases with `--list`.
    if std::env::args().any(|a| a == "--list") {
        println!("kernel_conntrack: bench");
        return;
    }
    let n = env_usize("IPVSCTL_BENCH_CT", 2_000);
    // `cargo bench` passes `--bench`; without it (`cargo test --benches`,
    // CI's test mode on every kernel) two rounds check that both tools
    // delete the same entries, at a third of the time.
    let measuring = std::env::args().any(|a| a == "--bench");
    let pairs = env_usize("IPVSCTL_BENCH_PAIRS", if measuring { 5 } else { 2 });
    assert!(
        n >= 100 && pairs >= 1,
        "IPVSCTL_BENCH_CT >= 100, IPVSCTL_BENCH_PAIRS >= 1"
    );
    assert!(
        n <= PORTS_PER_CLIENT * 250,
        "IPVSCTL_BENCH_CT at most {}",
        PORTS_PER_CLIENT * 250
    );
    if cfg!(debug_assertions) {
        println!("unoptimized build (test mode): the times below say nothing about speed");
    }
    let start = Instant::now();
    make_room(n);
    let ns = Netns::new();
    run_in(&NetNs::named(&ns.0), || {
        bench(n, pairs);
        Ok(())
    })
    .expect("run in the namespace");
    println!(
        "kernel_conntrack: {:.1} s in all",
        start.elapsed().as_secs_f64()
    );
}
