//! The cost of a Prometheus scrape of IPVS on a real kernel (the cargo
//! runner starts this bench in the QEMU guest when the host has no IPVS):
//! `examples/ipvs-exporter` against Debian's `prometheus-node-exporter`
//! (its `ipvs` collector, which reads `/proc/net/ip_vs` and
//! `/proc/net/ip_vs_stats`), side by side over the same table in one run.
//!
//! For each size N (`IPVSCTL_BENCH_SERVICES`, a comma-separated list;
//! default 1,000 and 10,000 under `cargo bench`, 20 in test mode), in a
//! fresh network namespace with `lo` up:
//!
//! * the table: N IPv4 TCP services `10.96.x.y:80` (`rr`), each with ten
//!   masqueraded real servers `10.244.x.y:8080` of weights 1 to 10, made by
//!   one pipelined `Syncer` sync;
//! * `prometheus-node-exporter --collector.disable-defaults --collector.ipvs
//!   --web.listen-address=127.0.0.1:9100`, started in the namespace with
//!   `ip netns exec` (the exporter's own `go_*`, `process_*` and
//!   `promhttp_*` series stay on, as they are by default);
//! * ipvs-exporter in this process, as its `--netns` mode runs it: its
//!   modules (`metrics.rs`, `read.rs`, `serve.rs`) are compiled into the
//!   bench, its `Exporter` reads the namespace through a handle pinned to
//!   it, and serves `/metrics` on a `tiny_http` server at `127.0.0.1:0` in
//!   the bench's own namespace, on a thread.
//!
//! Once both answer, untimed: one in-process scrape split into its two
//! parts (`read::read`, the table read over netlink with the namespace's
//! totals, and `metrics::render`, the text exposition), each timed and its
//! allocations counted, with what the snapshot holds; then one HTTP scrape
//! of each, whose bodies are checked: each has N × 10
//! `node_ipvs_backend_weight{` lines, and the `node_ipvs_*` series of the
//! two (`# HELP`, `# TYPE` and samples, labels sorted, values compared as
//! numbers) are the same set.
//!
//! Then `IPVSCTL_BENCH_PAIRS` rounds (default 5 under `cargo bench`, 2 in
//! test mode). A round times one HTTP `GET /metrics` of each tool, the one
//! that goes first alternating from round to round (a small HTTP/1.1
//! client on `TcpStream`, `Connection: close`, from connecting to the last
//! byte of the answer; node_exporter's connection is made from inside the
//! namespace); then `Exporter::scrape(Format::Text)` in-process, no HTTP,
//! with the bytes it allocates counted (`cap`'s counters around the call;
//! a `realloc` counts its whole new size, as `cap` counts it); then one
//! read of `/proc/net/ip_vs` in the namespace with one large buffer (the
//! kernel's side of node_exporter's reading; the file must list the N
//! services and N × 10 real servers). Each body must again hold N × 10
//! weight lines. The time each tool reports for its own reading of the
//! table is taken from its body: node_exporter's
//! `node_scrape_collector_duration_seconds{collector="ipvs"}`,
//! ipvs-exporter's `ipvs_scrape_duration_seconds`.
//!
//! The peak is the most the process held during a scrape above what it
//! held before it (`cap`'s high-water mark, which counts a buffer's
//! capacity, touched or not). That mark cannot be reset, so a scrape's peak
//! is known exactly only when the scrape raised it: the split scrape
//! before the rounds does whenever it needs more than anything before it
//! at that size (building the table, a smaller size's scrapes); later
//! scrapes print `-` when they stayed below it. node_exporter's peak
//! resident size is its `VmHWM`.
//!
//! Printed: per round the three times and the ratio node_exporter /
//! ipvs-exporter over HTTP; at the end, per N, the median and min–max of
//! each time and of the ratio, the median of the bytes allocated per
//! in-process scrape, the peaks, and the body sizes.
//!
//! No criterion: a scrape of 10,000 × 10 takes seconds under emulation, and
//! the alternating rounds are what the figures come from. `cargo test
//! --benches` (CI's test mode, an unoptimized build) runs the same at
//! N = 20 in a few seconds of guest time. The figures in
//! docs/performance.md come from `IPVSCTL_BENCH_SERVICES=1000,10000 cargo
//! bench --all-features --bench kernel_scrape`, with the guest's kernel
//! chosen by `IPVSCTL_VM_KERNEL` (default 6.1).

#[allow(dead_code)]
#[path = "../examples/ipvs-exporter/metrics.rs"]
mod metrics;
#[allow(dead_code)]
#[path = "../examples/ipvs-exporter/read.rs"]
mod read;
#[allow(dead_code)]
#[path = "../examples/ipvs-exporter/serve.rs"]
mod serve;

use std::alloc::System;
use std::fs::File;
use std::io::{self, Read as _, Write as _};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ipvsctl::model::{ForwardMethod, RealServer, Scheduler, ServiceKey, VirtualServer};
use ipvsctl::netlink::netns::run_in;
use ipvsctl::sync::{DesiredState, Syncer, Verify};
use ipvsctl::{Handle, HandleOptions, NetNs};

use metrics::{BackendLabels, Format};
use serve::Exporter;

/// Counts the bytes the in-process scrapes allocate.
#[global_allocator]
static ALLOC: cap::Cap<System> = cap::Cap::new(System, usize::MAX);

const DESTS: usize = 10;
/// node_exporter's port in the bench's namespace (fresh: nothing else
/// listens there).
const NODE_PORT: u16 = 9100;
/// How long the two servers may take to answer their first request.
const READY_DEADLINE: Duration = Duration::from_secs(120);
/// The bound of each read and write of an HTTP scrape.
const IO_TIMEOUT: Duration = Duration::from_secs(600);
const WEIGHT_LINE: &[u8] = b"node_ipvs_backend_weight{";

fn env_usize(name: &str, default: usize) -> usize {
    match std::env::var(name) {
        Err(_) => default,
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not a number")),
    }
}

fn sizes(default: &str) -> Vec<usize> {
    let list = std::env::var("IPVSCTL_BENCH_SERVICES").unwrap_or_else(|_| default.to_owned());
    list.split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|s| {
            s.trim()
                .parse()
                .unwrap_or_else(|_| panic!("IPVSCTL_BENCH_SERVICES: {s:?} is not a number"))
        })
        .collect()
}

fn sh(program: &str, args: &[&str]) {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    assert!(out.status.success(), "{program} {args:?}: {out:?}");
}

// ------------------------------------------------------------------ the table

fn service_key(i: usize) -> ServiceKey {
    let ip = Ipv4Addr::new(
        10,
        96 + (i / 62_500) as u8,
        (i / 250 % 250) as u8,
        (i % 250 + 1) as u8,
    );
    ServiceKey::tcp(SocketAddr::V4(SocketAddrV4::new(ip, 80)))
}

fn dest_addr(i: usize, j: usize) -> SocketAddr {
    let idx = i * DESTS + j;
    let ip = Ipv4Addr::new(
        10,
        (244 + idx / 62_500) as u8,
        (idx / 250 % 250) as u8,
        (idx % 250 + 1) as u8,
    );
    SocketAddr::V4(SocketAddrV4::new(ip, 8080))
}

fn desired(n: usize) -> DesiredState {
    let mut d = DesiredState::with_capacity(n);
    for i in 0..n {
        let vs = VirtualServer::new(service_key(i)).with_scheduler(Scheduler::RoundRobin);
        let rs = (0..DESTS).map(|j| {
            RealServer::new(dest_addr(i, j))
                .with_weight(j as u32 + 1)
                .with_forward(ForwardMethod::Masquerade)
        });
        d.insert(vs, rs).expect("valid bench state");
    }
    d
}

fn build_table(h: &Handle, n: usize) {
    let d = desired(n);
    let t = Instant::now();
    let r = Syncer::new(h).sync(&d, Verify::Services).expect("sync");
    let took = t.elapsed().as_secs_f64();
    assert!(r.is_ok(), "building the table: {:?}", r.failed.first());
    assert_eq!(r.writes_sent, n * (1 + DESTS));
    println!(
        "made {n} services x {DESTS} real servers in {took:.2} s ({} requests)",
        r.writes_sent
    );
}

// ------------------------------------------------------- guards: namespace, tool

/// The namespace of one size, flushed and deleted when dropped.
struct Netns(String);

impl Netns {
    fn new(n: usize) -> Netns {
        let name = format!("ipvsctl-bench-exp-{}-{n}", std::process::id());
        sh("ip", &["netns", "add", &name]);
        let ns = Netns(name);
        // Before any real server: the kernel refuses them (EINVAL) while lo is down.
        sh("ip", &["-n", &ns.0, "link", "set", "lo", "up"]);
        ns
    }

    fn path(&self) -> PathBuf {
        PathBuf::from("/run/netns").join(&self.0)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        // Flushed first, so that little of the kernel's freeing is left for
        // the next size's figures.
        if let Ok(h) = Handle::open(&NetNs::path(self.path()), &HandleOptions::new()) {
            let _ = h.flush();
        }
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

/// node_exporter running in the namespace, killed and reaped when dropped.
struct NodeExporter {
    child: Child,
    log: PathBuf,
}

impl NodeExporter {
    fn start(ns: &Netns) -> NodeExporter {
        let log = std::env::temp_dir().join(format!("{}-node-exporter.log", ns.0));
        let err = File::create(&log).expect("node_exporter's log file");
        let listen = format!("--web.listen-address=127.0.0.1:{NODE_PORT}");
        // `ip netns exec` execs the command: the child is node_exporter itself.
        let child = Command::new("ip")
            .args(["netns", "exec", &ns.0, "prometheus-node-exporter"])
            .args(["--collector.disable-defaults", "--collector.ipvs", &listen])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(err)
            .spawn()
            .expect("start prometheus-node-exporter (Debian package prometheus-node-exporter)");
        NodeExporter { child, log }
    }

    /// Panics with its log if it has exited.
    fn check_running(&mut self) {
        if let Ok(Some(status)) = self.child.try_wait() {
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            panic!("prometheus-node-exporter exited ({status}):\n{log}");
        }
    }

    /// A line of its `/proc/PID/status` (`VmHWM`, `VmRSS`).
    fn status(&self, field: &str) -> String {
        let s = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default();
        s.lines()
            .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
            .map(|v| v.trim().to_owned())
            .unwrap_or_else(|| "?".into())
    }
}

impl Drop for NodeExporter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.log);
    }
}

/// Ends the server thread's loop when dropped (also on a panic, which
/// would otherwise leave the thread scope waiting for it).
struct Unblock<'a>(&'a tiny_http::Server);

impl Drop for Unblock<'_> {
    fn drop(&mut self) {
        self.0.unblock();
    }
}

// ------------------------------------------------------------------ HTTP

/// One answer: status, body (de-chunked), and the time from connecting to
/// its last byte.
struct Answer {
    status: u16,
    body: Vec<u8>,
    secs: f64,
}

/// `GET path` over a new connection with `Connection: close`, read to the
/// end. `hint`: the expected size of the answer.
fn get(addr: SocketAddr, path: &str, hint: usize) -> io::Result<Answer> {
    let mut raw = Vec::with_capacity(hint + 4096);
    let t = Instant::now();
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(IO_TIMEOUT))?;
    s.set_write_timeout(Some(IO_TIMEOUT))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: ipvsctl-bench\r\nConnection: close\r\n\r\n"
    )?;
    s.read_to_end(&mut raw)?;
    let secs = t.elapsed().as_secs_f64();
    let (status, body) = parse_response(&raw)
        .map_err(|why| io::Error::new(io::ErrorKind::InvalidData, format!("GET {path}: {why}")))?;
    Ok(Answer { status, body, secs })
}

fn parse_response(raw: &[u8]) -> Result<(u16, Vec<u8>), String> {
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or("no end of headers")?;
    let head = std::str::from_utf8(&raw[..end]).map_err(|e| e.to_string())?;
    let rest = &raw[end + 4..];
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status: u16 = status_line
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("bad status line {status_line:?}"))?;
    let (mut chunked, mut length) = (false, None);
    for l in lines {
        let Some((name, value)) = l.split_once(':') else {
            continue;
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = value.eq_ignore_ascii_case("chunked");
        } else if name.eq_ignore_ascii_case("content-length") {
            length = value.parse::<usize>().ok();
        }
    }
    if chunked {
        return dechunk(rest).map(|b| (status, b));
    }
    if let Some(len) = length
        && len != rest.len()
    {
        return Err(format!("Content-Length {len}, {} bytes read", rest.len()));
    }
    Ok((status, rest.to_vec()))
}

fn dechunk(mut rest: &[u8]) -> Result<Vec<u8>, String> {
    let mut body = Vec::with_capacity(rest.len());
    loop {
        let eol = rest
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or("chunk size line cut")?;
        let line = std::str::from_utf8(&rest[..eol]).map_err(|e| e.to_string())?;
        let hex = line.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(hex, 16).map_err(|_| format!("chunk size {line:?}"))?;
        rest = &rest[eol + 2..];
        if size == 0 {
            return Ok(body);
        }
        if rest.len() < size + 2 {
            return Err("chunk cut".into());
        }
        body.extend_from_slice(&rest[..size]);
        rest = &rest[size + 2..];
    }
}

/// Asks `get` until the server answers 200, at most until the deadline.
fn wait_ready(who: &str, mut get: impl FnMut() -> io::Result<Answer>, mut alive: impl FnMut()) {
    let t = Instant::now();
    loop {
        alive();
        match get() {
            Ok(a) if a.status == 200 => {
                println!("{who} answers after {:.2} s", t.elapsed().as_secs_f64());
                return;
            }
            Ok(a) if t.elapsed() > READY_DEADLINE => {
                panic!("{who}: status {} after {READY_DEADLINE:?}", a.status)
            }
            Err(e) if t.elapsed() > READY_DEADLINE => {
                panic!("{who} does not answer after {READY_DEADLINE:?}: {e}")
            }
            _ => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

/// One read of `/proc/net/ip_vs` in the namespace, with one large buffer:
/// the kernel's side of node_exporter's reading. Returns (seconds, lines).
fn read_proc(ns: &NetNs, hint: usize) -> (f64, usize) {
    run_in(ns, || {
        let mut text = Vec::with_capacity(hint + 4096);
        let t = Instant::now();
        File::open("/proc/thread-self/net/ip_vs")?.read_to_end(&mut text)?;
        let secs = t.elapsed().as_secs_f64();
        Ok((secs, text.iter().filter(|&&b| b == b'\n').count()))
    })
    .expect("read /proc/net/ip_vs in the namespace")
}

// ------------------------------------------------------------- the bodies

fn lines_starting(body: &[u8], prefix: &[u8]) -> usize {
    body.split(|&b| b == b'\n')
        .filter(|l| l.starts_with(prefix))
        .count()
}

fn samples(body: &[u8]) -> usize {
    body.split(|&b| b == b'\n')
        .filter(|l| !l.is_empty() && !l.starts_with(b"#"))
        .count()
}

/// The value of the sample line that starts with `series` (name and
/// labels, as the tool writes them).
fn sample_value(body: &[u8], series: &str) -> Option<f64> {
    let text = std::str::from_utf8(body).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}

/// The `node_ipvs_*` lines of a body in one form: `# HELP`/`# TYPE` lines as
/// they are, samples with their labels sorted by name and the value as a
/// number; sorted.
fn node_ipvs_series(body: &[u8]) -> Vec<String> {
    let text = std::str::from_utf8(body).expect("UTF-8 body");
    let mut out: Vec<String> = text
        .lines()
        .filter_map(|l| {
            if l.starts_with("# HELP node_ipvs_") || l.starts_with("# TYPE node_ipvs_") {
                Some(l.to_owned())
            } else if l.starts_with("node_ipvs_") {
                Some(canonical_sample(l))
            } else {
                None
            }
        })
        .collect();
    out.sort_unstable();
    out
}

fn canonical_sample(line: &str) -> String {
    let (series, value) = line.rsplit_once(' ').expect("a sample has a value");
    let value: f64 = value.parse().expect("a numeric value");
    let (name, labels) = match series.split_once('{') {
        Some((name, rest)) => (name, rest.strip_suffix('}').expect("closing brace")),
        None => (series, ""),
    };
    let mut pairs = Vec::new();
    let mut rest = labels;
    while !rest.is_empty() {
        let (label, after) = rest.split_once("=\"").expect("label=\"value\"");
        // The value runs to the first quote not escaped by a backslash.
        let mut end = None;
        let mut escaped = false;
        for (i, c) in after.char_indices() {
            match c {
                '\\' if !escaped => escaped = true,
                '"' if !escaped => {
                    end = Some(i);
                    break;
                }
                _ => escaped = false,
            }
        }
        let end = end.expect("closing quote");
        pairs.push((label.trim_start_matches(','), &after[..end]));
        rest = after[end + 1..].trim_start_matches(',');
    }
    pairs.sort_unstable();
    let labels: Vec<String> = pairs.iter().map(|(l, v)| format!("{l}=\"{v}\"")).collect();
    format!("{name}{{{}}} {value}", labels.join(","))
}

/// Both tools' `node_ipvs_*` series must be the same set.
fn compare_series(node: &[u8], ours: &[u8]) {
    let (a, b) = (node_ipvs_series(node), node_ipvs_series(ours));
    if a == b {
        println!(
            "node_ipvs_* series: the same {} lines in both bodies",
            a.len()
        );
        return;
    }
    let only = |x: &[String], y: &[String]| -> Vec<String> {
        x.iter()
            .filter(|l| y.binary_search(l).is_err())
            .take(5)
            .cloned()
            .collect()
    };
    panic!(
        "node_ipvs_* series differ ({} lines from node_exporter, {} from ipvs-exporter)\n\
         only node_exporter's: {:#?}\nonly ipvs-exporter's: {:#?}",
        a.len(),
        b.len(),
        only(&a, &b),
        only(&b, &a)
    );
}

// ------------------------------------------------------------ allocations

/// What a call allocated: bytes in all (`cap` counts a `realloc` as its new
/// size), what it still holds at its end, and, when the call raised the
/// process's high-water mark, its peak above what the process held before
/// it.
#[derive(Clone, Copy)]
struct Allocated {
    bytes: usize,
    peak: Option<usize>,
    /// Bytes held at the end above the start (what the call's result keeps).
    held: isize,
}

/// The allocator's counters and the clock at one moment.
#[derive(Clone, Copy)]
struct Mark {
    total: usize,
    now: usize,
    max: usize,
    at: Instant,
}

impl Mark {
    fn new() -> Mark {
        Mark {
            total: ALLOC.total_allocated(),
            now: ALLOC.allocated(),
            max: ALLOC.max_allocated(),
            at: Instant::now(),
        }
    }

    /// Seconds and allocations since the mark.
    fn since(&self) -> (f64, Allocated) {
        let secs = self.at.elapsed().as_secs_f64();
        let (total, max) = (ALLOC.total_allocated(), ALLOC.max_allocated());
        let a = Allocated {
            bytes: total - self.total,
            peak: (max > self.max).then(|| max - self.now),
            held: ALLOC.allocated() as isize - self.now as isize,
        };
        (secs, a)
    }
}

fn mib(bytes: usize) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

fn peak_text(p: Option<usize>) -> String {
    p.map_or_else(|| "-".to_owned(), mib)
}

// ----------------------------------------------------------------- the bench

fn summary(v: &[f64]) -> (f64, f64, f64) {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

fn ms(v: &[f64]) -> String {
    let (m, lo, hi) = summary(v);
    format!("{:.1} ms ({:.1}-{:.1})", m * 1e3, lo * 1e3, hi * 1e3)
}

fn bench(n: usize, pairs: usize) -> String {
    let ns = Netns::new(n);
    let netns = NetNs::path(ns.path());
    {
        let h = Handle::open(&netns, &HandleOptions::new()).expect("open IPVS in the namespace");
        build_table(&h, n);
    }
    let mut node = NodeExporter::start(&ns);
    let node_addr = SocketAddr::from(([127, 0, 0, 1], NODE_PORT));
    let in_ns = NetNs::named(ns.0.clone());
    let node_get = |path: &str, hint: usize| run_in(&in_ns, || get(node_addr, path, hint));

    let handle = Handle::open(&netns, &HandleOptions::new()).expect("open the exporter's handle");
    let exporter = Exporter::new(handle, BackendLabels::default(), "/metrics".into());
    let server = tiny_http::Server::http("127.0.0.1:0").expect("listen for ipvs-exporter");
    let ours_addr = server
        .server_addr()
        .to_ip()
        .expect("an IP address to listen on");

    std::thread::scope(|scope| {
        let unblock = Unblock(&server);
        scope.spawn(|| exporter.serve(&server));
        wait_ready("ipvs-exporter", || get(ours_addr, "/", 0), || {});
        wait_ready(
            "prometheus-node-exporter",
            || node_get("/", 0),
            || node.check_running(),
        );

        // One scrape in-process, in its two parts, before any other at
        // this size: its peak raises the process's high-water mark.
        let whole = Mark::new();
        let (snapshot, outcome, failure) = read::read(&exporter.handle, &exporter.table);
        let (read_s, read_a) = whole.since();
        assert!(failure.is_none(), "reading the table: {failure:?}");
        let backends: usize = snapshot.services.iter().map(|(_, d)| d.len()).sum();
        assert_eq!(
            (snapshot.services.len(), backends),
            (n, n * DESTS),
            "the table read"
        );
        let rendering = Mark::new();
        let mut text = String::with_capacity(64 * 1024);
        metrics::render(snapshot, &exporter.labels, outcome, Format::Text, &mut text);
        let (render_s, render_a) = rendering.since();
        let (_, whole_a) = whole.since();
        let split = format!(
            "in-process, first scrape: read::read {:.1} ms, {} allocated, the snapshot holds {}; \
             metrics::render {:.1} ms, {} allocated; whole scrape peak {}; text {} bytes",
            read_s * 1e3,
            mib(read_a.bytes),
            mib(read_a.held.max(0) as usize),
            render_s * 1e3,
            mib(render_a.bytes),
            peak_text(whole_a.peak),
            text.len(),
        );
        println!("{split}");
        drop(text);

        // One HTTP scrape of each, untimed: the bodies checked in full.
        let first_node = node_get("/metrics", 0).expect("GET node_exporter");
        let first_ours = get(ours_addr, "/metrics", 0).expect("GET ipvs-exporter");
        assert_eq!((first_node.status, first_ours.status), (200, 200));
        for (who, a) in [
            ("node_exporter", &first_node),
            ("ipvs-exporter", &first_ours),
        ] {
            assert_eq!(
                lines_starting(&a.body, WEIGHT_LINE),
                n * DESTS,
                "{who}'s weight lines"
            );
        }
        compare_series(&first_node.body, &first_ours.body);
        println!(
            "first HTTP scrapes: node_exporter {:.1} ms, ipvs-exporter {:.1} ms",
            first_node.secs * 1e3,
            first_ours.secs * 1e3
        );
        let (node_len, ours_len) = (first_node.body.len(), first_ours.body.len());
        let (node_samples, ours_samples) = (samples(&first_node.body), samples(&first_ours.body));
        drop((first_node, first_ours));

        let (mut node_s, mut ours_s, mut ratio, mut scrape_s) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let (mut node_collect, mut ours_read, mut bytes) = (Vec::new(), Vec::new(), Vec::new());
        let mut proc_s = Vec::new();
        let mut peak = whole_a.peak.unwrap_or(0);
        for round in 0..pairs {
            node.check_running();
            let node_first = round % 2 == 0;
            let (mut a_node, mut a_ours) = (None, None);
            for step in 0..2 {
                if (step == 0) == node_first {
                    a_node = Some(node_get("/metrics", node_len).expect("GET node_exporter"));
                } else {
                    a_ours = Some(get(ours_addr, "/metrics", ours_len).expect("GET ipvs-exporter"));
                }
            }
            let (a_node, a_ours) = (a_node.expect("node"), a_ours.expect("ours"));
            for (who, a) in [("node_exporter", &a_node), ("ipvs-exporter", &a_ours)] {
                assert_eq!(a.status, 200, "{who}");
                assert_eq!(
                    lines_starting(&a.body, WEIGHT_LINE),
                    n * DESTS,
                    "{who}'s weight lines"
                );
            }
            let collect = sample_value(
                &a_node.body,
                "node_scrape_collector_duration_seconds{collector=\"ipvs\"}",
            )
            .expect("node_exporter's collector duration");
            let read = sample_value(&a_ours.body, "ipvs_scrape_duration_seconds")
                .expect("ipvs-exporter's read duration");
            drop((a_node.body, a_ours.body));
            let (proc_secs, proc_lines) = read_proc(&in_ns, n * DESTS * 64);
            // Three header lines, a line per service and per real server.
            assert_eq!(proc_lines, 3 + n * (1 + DESTS), "/proc/net/ip_vs");

            let m = Mark::new();
            let text = exporter.scrape(Format::Text);
            let (secs, a) = m.since();
            assert_eq!(lines_starting(text.as_bytes(), WEIGHT_LINE), n * DESTS);
            drop(text);
            if let Some(p) = a.peak {
                peak = peak.max(p);
            }
            println!(
                "round {}: node_exporter {:.1} ms (ipvs collector {:.1}), ipvs-exporter {:.1} ms \
                 (read {:.1}), ratio {:.2} ({} first); in-process scrape {:.1} ms, {} allocated, peak {}; \
                 /proc/net/ip_vs {:.1} ms",
                round + 1,
                a_node.secs * 1e3,
                collect * 1e3,
                a_ours.secs * 1e3,
                read * 1e3,
                a_node.secs / a_ours.secs,
                if node_first {
                    "node_exporter"
                } else {
                    "ipvs-exporter"
                },
                secs * 1e3,
                mib(a.bytes),
                peak_text(a.peak),
                proc_secs * 1e3,
            );
            proc_s.push(proc_secs);
            node_s.push(a_node.secs);
            ours_s.push(a_ours.secs);
            ratio.push(a_node.secs / a_ours.secs);
            scrape_s.push(secs);
            node_collect.push(collect);
            ours_read.push(read);
            bytes.push(a.bytes as f64);
        }
        drop(unblock);
        let (rm, rlo, rhi) = summary(&ratio);
        let (bm, blo, bhi) = summary(&bytes);
        format!(
            "exporter/{n}x{DESTS} over {pairs} rounds:\n\
             \x20 HTTP GET /metrics: node_exporter {}, ipvs-exporter {}; \
             node_exporter / ipvs-exporter = {rm:.2} ({rlo:.2}-{rhi:.2})\n\
             \x20 their own reading of the table: node_exporter's ipvs collector {}, ipvs-exporter's read {}; \
             /proc/net/ip_vs alone {}\n\
             \x20 ipvs-exporter in-process scrape: {}, allocated {} ({}-{}) per scrape, peak {}\n\
             \x20 {split}\n\
             \x20 bodies: node_exporter {node_len} bytes ({node_samples} samples), \
             ipvs-exporter {ours_len} bytes ({ours_samples} samples); node_exporter VmHWM {}",
            ms(&node_s),
            ms(&ours_s),
            ms(&node_collect),
            ms(&ours_read),
            ms(&proc_s),
            ms(&scrape_s),
            mib(bm as usize),
            mib(blo as usize),
            mib(bhi as usize),
            mib(peak),
            node.status("VmHWM"),
        )
    })
}

fn main() {
    // The cargo runner counts a binary's cases with `--list`.
    if std::env::args().any(|a| a == "--list") {
        println!("kernel_scrape: bench");
        return;
    }
    // `cargo bench` passes `--bench`; without it (`cargo test --benches`,
    // CI's test mode on every kernel) a small table and two rounds check
    // that both tools answer with the whole table.
    let measuring = std::env::args().any(|a| a == "--bench");
    let sizes = sizes(if measuring { "1000,10000" } else { "20" });
    let pairs = env_usize("IPVSCTL_BENCH_PAIRS", if measuring { 5 } else { 2 });
    assert!(
        !sizes.is_empty() && sizes.iter().all(|&n| (1..=50_000).contains(&n)) && pairs >= 1,
        "IPVSCTL_BENCH_SERVICES: sizes from 1 to 50,000; IPVSCTL_BENCH_PAIRS >= 1"
    );
    if cfg!(debug_assertions) {
        println!("unoptimized build (test mode): the times below say nothing about speed");
    }
    // Kernels before 5.16 do not load ip_vs when the IPVS family is asked
    // for (docs/kernel-notes.md); load it as ipvsadm does, and the
    // tables' scheduler before any namespace is deleted. Failure is
    // harmless where they are built in or already loaded.
    for module in ["ip_vs", "ip_vs_rr"] {
        let _ = Command::new("modprobe")
            .arg(module)
            .stderr(Stdio::null())
            .status();
    }
    let start = Instant::now();
    let mut summaries = Vec::new();
    for &n in &sizes {
        summaries.push(bench(n, pairs));
    }
    println!();
    for s in &summaries {
        println!("{s}");
    }
    println!(
        "kernel_scrape: {:.1} s in all",
        start.elapsed().as_secs_f64()
    );
}
