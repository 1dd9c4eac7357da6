//! Bulk sync against a real kernel's IPVS (the cargo runner starts this bench
//! in the QEMU guest when the host has no IPVS), every case side by side in
//! one run, with the ratios printed at the end.
//!
//! For each size N (services × 10 real servers; default 1,000, 10,000 and
//! 50,000; above 10,000 the slow cases run `IPVSCTL_BENCH_LARGE_RUNS` times
//! (default 3) outside criterion, and one-by-one, `ipvsadm -R`, the
//! kube-proxy pattern, the plain dump loops and the 2-socket read are left
//! out):
//!
//! * `cold/*` — an empty, fresh network namespace to N × 10, each iteration
//!   in a new namespace (created and flushed/deleted outside the timing,
//!   and timed once the machine is idle: the kernel frees the previous
//!   iteration's table after the fact):
//!   - `sync_pipelined`: a new `Syncer` (reads the empty namespace, plans,
//!     applies pipelined);
//!   - `sync_one_by_one`: the same, one request per round trip (how other
//!     IPVS libraries work);
//!   - `raw_replay`: the same requests pre-encoded, sent in the largest
//!     batches the socket takes, ACKs drained — the kernel's own cost;
//!   - `raw_replay_errors_only`: the same, with only the last request of
//!     each datagram asking for an ACK (the kernel answers the others only
//!     when they fail), as the syncer sends them — the kernel's own cost
//!     without an ACK per request;
//!   - `handle_apply`: the same operations through `Handle::apply` (the
//!     handle's pipelined batch, no syncer);
//!   - `ipvsadm_restore`: `ipvsadm -R` of the identical rule set (Debian's
//!     ipvsadm). At sizes above 1,000 it is timed outside criterion, once by
//!     default (`IPVSCTL_BENCH_IPVSADM_RUNS`), because it takes about a
//!     minute per run under emulation.
//! * `paired/*` — `sync_pipelined` and `raw_replay_errors_only` again,
//!   alternately, `IPVSCTL_BENCH_PAIRS` times (default 21 at N ≤ 1,000,
//!   else 7); the summary gives the median of the per-pair ratios.
//! * `resync/*` — the namespace already holds the state:
//!   - `verify_full` (and `verify_full_2_sockets`): no-op sync that reads
//!     every service and real server back;
//!   - `verify_services`: no-op sync checking the service table as the
//!     syncer chooses by size ([`ServiceCheck::Auto`]), and both choices
//!     forced: `verify_services_dump` (one service dump) and
//!     `verify_services_lookups` (one pipelined `GET_SERVICE` per service);
//!   - `verify_none`: no-op sync trusting memory;
//!   - `churn_1pct`: 1% of services (scheduler) and 1% of real servers
//!     (weight) changed, alternating between two states;
//!   - `kube_proxy_pattern`: two `GET_SERVICE`s and one real-server dump per
//!     service, through the handle.
//! * `incr/*` — one real server (in the middle of the table) changed, its
//!   weight back and forth: `sync_changes` (the incremental update,
//!   `Verify::None`), `full_sync_none` (the full desired state synced with
//!   `Verify::None`), `raw_replay` (the one pre-encoded `SET_DEST`, sent and
//!   its ACK received); then `IPVSCTL_BENCH_INCR_PAIRS` (default 1,001)
//!   pairs of `sync_changes` and the raw replay, alternately, for the
//!   median of the per-pair ratios.
//! * `read/raw_service_dump`, `read/raw_get_services`,
//!   `read/raw_get_services_quiet` — the floors of the two service checks:
//!   the same requests pre-encoded, answers counted, nothing decoded; the
//!   lookups with an ACK each, and with an ACK for the last of each
//!   datagram only (as the library sends them).
//! * `turns/*` (parts `resync` and `check`) — both forced service checks
//!   and their quiet floors in turns (`IPVSCTL_BENCH_CHECK_TURNS`, default
//!   as many as the pairs), each turn starting with the other check, for
//!   the median per-turn ratios: each check against its floor, and lookups
//!   against the dump (where that ratio falls below 1 is where
//!   [`ServiceCheck::Auto`] should switch to lookups).
//!   `IPVSCTL_BENCH_PARTS=check` runs these turns alone.
//! * `read/*` — full reads of the state: `proc_net_ip_vs` (one read of
//!   `/proc/net/ip_vs`), `dumps` (one service dump and one real-server dump
//!   per service through the handle's plain calls), `dumps_each` (the same
//!   through `Handle::list_destinations_each`), `raw_dumps` (the same
//!   requests pre-encoded, answers counted but not decoded: the kernel's
//!   floor for a complete netlink read). Then `Verify::Full`, `raw_dumps`
//!   and `/proc/net/ip_vs` again in turns (as many as the pairs), for the
//!   median per-turn ratios.
//! * `rolling/*` — rolling verification next to the fixed ones, on the
//!   table already synced: `verify_full`, `verify_services` and
//!   `rolling_10`, `rolling_50` (one `Verify::rolling(k)` sync each, of a
//!   syncer of its own that keeps its rolling state from turn to turn, so
//!   the slices advance as in production; each sync checked to read
//!   `ceil(N/k)` services in full and write nothing), in turns, each turn
//!   starting with the next case (`IPVSCTL_BENCH_ROLLING_TURNS`, default
//!   as many as the pairs, 4 in test mode). Each turn is printed; the
//!   summary gives each case's median (min-max) and the median (min-max)
//!   of the per-turn ratio rolling / (full / k + services) (goal <= 1.2).
//! * `adversarial/cold_sync_pipelined` (N = 1,000 only): services
//!   `10.x.y.1:80`, whose addresses differ only in high bytes and fall into
//!   one bucket of the kernel's service hash table.
//!
//! * `part_size/*` (only when `IPVSCTL_BENCH_PARTS` names `part_size`) — a
//!   cold sync with each part size of `IPVSCTL_BENCH_PART_SIZES` (default
//!   16384,32768,131072; `SyncOptions::part_size`) and the raw replay, in
//!   turns (as many as the pairs), each turn starting with the next size;
//!   the summary gives the median (min-max) of sync / raw replay per size.
//!
//! * `bounds` (only when `IPVSCTL_BENCH_PARTS` names `bounds`; see
//!   `bulk_sync/bounds.rs`) — the least any service check or one-change
//!   update must do next to the library, in turns: the service dump walked,
//!   decoded and compared in place on one thread, and walked or decoded
//!   behind a helper thread that already runs, against the raw dump and the
//!   library's dump check (`IPVSCTL_BENCH_CHECK_TURNS`, default 15); the
//!   `SET_DEST` encoded from the typed real server, `Handle::update_destination`
//!   and `Syncer::sync_changes` against the raw replay
//!   (`IPVSCTL_BENCH_INCR_PAIRS` turns). The summary gives each case's
//!   median (min-max) ratio to the raw floor.
//!
//! Peak memory of a sync at the largest size is measured in a child process (this
//! binary re-executed): `VmHWM` of a process that builds the desired state,
//! opens a handle, syncs cold, clears the desired state's record of changes
//! (as `Syncer::sync_changes` documents) and resyncs with full verification.
//!
//! Environment: `IPVSCTL_BENCH_QUICK=1` (CI smoke: N = 100 only),
//! `IPVSCTL_BENCH_PARTS=cold,resync,incr,read,rolling,memory` (the parts
//! to run; default all; `rolling` alone times nothing else, the table is
//! set up untimed), `IPVSCTL_BENCH_LARGE_RUNS=3`,
//! `IPVSCTL_BENCH_SIZES=1000,10000`, `IPVSCTL_BENCH_IPVSADM_RUNS=1`,
//! `IPVSCTL_BENCH_PAIRS`, `IPVSCTL_BENCH_INCR_PAIRS`,
//! `IPVSCTL_BENCH_ROLLING_TURNS`,
//! `IPVSCTL_BENCH_LEDGER=memory|file|none` (the syncers' ledger store,
//! default `memory`).

use std::collections::{BTreeMap, HashSet};
use std::io::Write as _;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::num::NonZeroU32;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use criterion::{Criterion, SamplingMode};
use ipvsctl::Timeout;
use ipvsctl::batch::BatchMode;
use ipvsctl::codec::frame::{self, FrameBody, NLM_F_ACK, NLM_F_DUMP, NLM_F_REQUEST};
use ipvsctl::codec::request;
use ipvsctl::model::{ForwardMethod, RealServer, Scheduler, ServiceKey, VirtualServer};
use ipvsctl::netlink::netns::{NetNs, run_in};
use ipvsctl::sync::{
    self, DesiredState, FileLedger, Ledger, Observed, PlanOptions, Scope, ServiceCheck,
    SyncOptions, Syncer, Verify,
};
use ipvsctl::unstable::{DumpSize, NlSocket, Protocol};
use ipvsctl::{Handle, HandleOptions};

#[path = "bulk_sync/bounds.rs"]
mod bounds;

const DESTS: usize = 10;

// ------------------------------------------------------------------ the state

fn service_key(i: usize, adversarial: bool) -> ServiceKey {
    let ip = if adversarial {
        // Only the second and third bytes differ: one hash bucket.
        Ipv4Addr::new(10, (i / 256 % 256) as u8, (i % 256) as u8, 1)
    } else {
        // A ClusterIP-like spread: the low byte varies fastest.
        Ipv4Addr::new(
            10,
            96 + (i / 62_500) as u8,
            (i / 250 % 250) as u8,
            (i % 250 + 1) as u8,
        )
    };
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

/// N services × 10 real servers; `churn` changes 1% of the services (their
/// scheduler) and 1% of the real servers (their weight).
fn desired(n: usize, adversarial: bool, churn: bool) -> DesiredState {
    let mut d = DesiredState::with_capacity(n);
    for i in 0..n {
        let sched = if churn && i % 100 == 0 {
            Scheduler::WeightedRoundRobin
        } else {
            Scheduler::RoundRobin
        };
        let vs = VirtualServer::new(service_key(i, adversarial)).with_scheduler(sched);
        let rs = (0..DESTS).map(|j| {
            let w = if churn && i % 10 == 5 && j == 0 { 2 } else { 1 };
            RealServer::new(dest_addr(i, j))
                .with_weight(w)
                .with_forward(ForwardMethod::Masquerade)
        });
        d.insert(vs, rs).expect("valid bench state");
    }
    d
}

fn churn_changes(n: usize) -> usize {
    n.div_ceil(100) + (0..n).filter(|i| i % 10 == 5).count()
}

/// The identical rule set for `ipvsadm -R`.
fn ipvsadm_rules(d: &DesiredState) -> String {
    let mut s = String::with_capacity(d.destination_count() * 48);
    for ds in d.services() {
        let ServiceKey::Addr { addr, .. } = ds.service().key else {
            continue;
        };
        s.push_str(&format!("-A -t {addr} -s {}\n", ds.service().scheduler));
        for rs in ds.destinations() {
            s.push_str(&format!(
                "-a -t {addr} -r {} -m -w {}\n",
                rs.addr, rs.weight
            ));
        }
    }
    s
}

// --------------------------------------------------------------- namespaces

struct Ns {
    name: String,
}

impl Ns {
    fn new() -> Ns {
        static NEXT: Mutex<u32> = Mutex::new(0);
        let n = {
            let mut g = NEXT.lock().unwrap_or_else(|p| p.into_inner());
            *g += 1;
            *g
        };
        let name = format!("ipvsctl-b-{}-{n}", std::process::id());
        run("ip", &["netns", "add", &name]);
        run("ip", &["-n", &name, "link", "set", "lo", "up"]);
        Ns { name }
    }

    fn path(&self) -> PathBuf {
        PathBuf::from("/run/netns").join(&self.name)
    }

    fn netns(&self) -> NetNs {
        NetNs::path(self.path())
    }

    fn handle(&self) -> Handle {
        Handle::open(&self.netns(), &HandleOptions::new())
            .expect("open IPVS handle in the bench namespace")
    }
}

impl Drop for Ns {
    fn drop(&mut self) {
        // Flush first, synchronously, so that the kernel's asynchronous
        // namespace cleanup has little left to do during the next case.
        if let Ok(h) = Handle::open(&self.netns(), &HandleOptions::new()) {
            let _ = h.flush();
        }
        let _ = Command::new("ip")
            .args(["netns", "delete", &self.name])
            .status();
    }
}

fn run(prog: &str, args: &[&str]) {
    let st = Command::new(prog).args(args).status().expect("spawn");
    assert!(st.success(), "{prog} {args:?} failed: {st}");
}

// ------------------------------------------------------------ measurements

/// Every measured iteration, by case name (criterion's own statistics are
/// printed too; these give the medians for the ratio table).
static TIMES: Mutex<BTreeMap<String, Vec<Duration>>> = Mutex::new(BTreeMap::new());
/// Notes for the summary (write counts, memory).
static NOTES: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn record(case: &str, d: Duration) {
    TIMES
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .entry(case.to_owned())
        .or_default()
        .push(d);
}

fn note(s: String) {
    eprintln!("bulk_sync: {s}");
    NOTES.lock().unwrap_or_else(|p| p.into_inner()).push(s);
}

fn median(case: &str) -> Option<Duration> {
    let t = TIMES.lock().unwrap_or_else(|p| p.into_inner());
    let mut v = t.get(case)?.clone();
    v.sort();
    v.get(v.len() / 2).copied()
}

/// Runs `f` `iters` times, timing and recording each run under `case`;
/// the total is what criterion's `iter_custom` wants.
fn timed(case: &str, iters: u64, mut f: impl FnMut()) -> Duration {
    let mut total = Duration::ZERO;
    for _ in 0..iters {
        let t = Instant::now();
        f();
        let e = t.elapsed();
        record(case, e);
        total += e;
    }
    total
}

/// Times `f` once in a fresh namespace (set up and torn down untimed).
fn cold<F: FnMut(&Ns) -> Duration>(case: &str, iters: u64, mut f: F) -> Duration {
    let mut total = Duration::ZERO;
    for _ in 0..iters {
        let ns = Ns::new();
        settle();
        let d = f(&ns);
        record(case, d);
        total += d;
        drop(ns);
    }
    total
}

/// Waits (at most 3 s) until the machine is idle: less than 3% of its CPU
/// time busy over 50 ms, per `/proc/stat`. The kernel frees a flushed
/// table's entries and a deleted namespace after the fact (RCU callbacks,
/// the namespace cleanup work); a case timed while that runs pays for its
/// predecessor.
fn settle() {
    fn busy_total() -> Option<(u64, u64)> {
        let stat = std::fs::read_to_string("/proc/stat").ok()?;
        let cpu = stat.lines().next()?.strip_prefix("cpu ")?;
        let v: Vec<u64> = cpu
            .split_whitespace()
            .filter_map(|x| x.parse().ok())
            .collect();
        let total: u64 = v.iter().sum();
        // idle and iowait are the fourth and fifth fields.
        let idle = v.get(3)? + v.get(4)?;
        Some((total - idle, total))
    }
    let start = Instant::now();
    let Some(mut last) = busy_total() else {
        return;
    };
    while start.elapsed() < Duration::from_secs(3) {
        std::thread::sleep(Duration::from_millis(50));
        let Some(now) = busy_total() else {
            return;
        };
        let (busy, total) = (now.0 - last.0, now.1 - last.1);
        last = now;
        if total > 0 && busy * 100 < total * 3 {
            return;
        }
    }
}

fn sync_cold(ns: &Ns, d: &DesiredState, mode: BatchMode) -> Duration {
    sync_cold_with(ns, d, SyncOptions::default().with_mode(mode))
}

fn sync_cold_with(ns: &Ns, d: &DesiredState, options: SyncOptions) -> Duration {
    let h = ns.handle();
    let t = Instant::now();
    let mut s = with_ledger(Syncer::with_options(&h, options));
    let r = s.sync(d, Verify::Services).expect("sync");
    let e = t.elapsed();
    assert!(r.is_ok(), "cold sync failed: {:?}", r.failed.first());
    assert_eq!(r.writes_sent, d.len() + d.destination_count());
    e
}

/// The syncer with the ownership ledger store `IPVSCTL_BENCH_LEDGER` names:
/// `memory` (the default: a copy of the ledger kept at each save, as an
/// agent's own store would), `file` (a `FileLedger` in a new temporary
/// directory; in the guest that is on tmpfs, so `fsync` costs nothing) or
/// `none` (a syncer without a store).
fn with_ledger(s: Syncer<&Handle>) -> Syncer<&Handle> {
    match std::env::var("IPVSCTL_BENCH_LEDGER").as_deref() {
        Ok("none") => s,
        Ok("file") => {
            static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
            let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let dir =
                std::env::temp_dir().join(format!("ipvsctl-bench-{}-{n}", std::process::id()));
            std::fs::create_dir_all(&dir).expect("ledger directory");
            let store = FileLedger::create(dir.join("ledger")).expect("ledger file");
            s.with_ledger(Ledger::new(), store)
        }
        _ => {
            let mut saved = Ledger::new();
            s.with_ledger(Ledger::new(), move |l: &Ledger, _: &[ServiceKey]| {
                saved.clone_from(l);
                Ok(())
            })
        }
    }
}

/// A generic-netlink socket in `netns`, as the library opens them.
fn open_socket(netns: &NetNs, dumps: DumpSize) -> std::io::Result<NlSocket> {
    NlSocket::open(netns, Protocol::Generic, dumps, Timeout::HANDLE_DEFAULT)
}

/// The raw replay: every request of the cold apply pre-encoded into
/// datagrams as large as the socket takes (untimed), then sent with the
/// answers drained (timed). `ack_each`: every request asks for an ACK;
/// otherwise only the last of each datagram does.
fn raw_replay(ns: &Ns, d: &DesiredState, ack_each: bool) -> Duration {
    let family = ns.handle().family_id();
    let mut sock = open_socket(&ns.netns(), DumpSize::Large).expect("socket");
    let plan = sync::plan(
        d,
        &Observed::new(),
        &Scope::Owned,
        &HashSet::new(),
        PlanOptions::default(),
    );
    let (max_batch, max_send) = (sock.max_batch(), sock.max_send());
    // (datagram, its first sequence number, requests in it, where the last
    // request starts)
    let mut chunks: Vec<(Vec<u8>, u32, usize, usize)> = Vec::new();
    let mut buf = Vec::new();
    let (mut count, mut first, mut last_at) = (0, 1u32, 0);
    let flags = if ack_each { NLM_F_ACK } else { 0 };
    for (seq, op) in (1u32..).zip(&plan.writes) {
        let msg = op.encode().expect("valid");
        let before = buf.len();
        frame::encode_request(&mut buf, &msg, family, seq, flags).expect("encode");
        if (buf.len() > max_send || count == max_batch) && count > 0 {
            // This request starts the next datagram.
            let tail = buf.split_off(before);
            chunks.push((std::mem::replace(&mut buf, tail), first, count, last_at));
            (count, first, last_at) = (0, seq, 0);
        } else {
            last_at = before;
        }
        count += 1;
    }
    if count > 0 {
        chunks.push((buf, first, count, last_at));
    }
    for (bytes, _, _, last_at) in &mut chunks {
        frame::set_flags(&mut bytes[*last_at..], NLM_F_REQUEST | NLM_F_ACK);
    }
    let t = Instant::now();
    let mut errors = 0;
    for (bytes, first, n, _) in &chunks {
        sock.send(bytes).expect("send");
        let last = first + *n as u32 - 1;
        let mut acked = 0;
        let mut done = false;
        while !done {
            let datagram = sock.recv().expect("recv");
            for f in frame::frames(datagram) {
                if let Ok(f) = f
                    && let FrameBody::Error(e) = f.body
                {
                    acked += 1;
                    if !e.is_ack() {
                        errors += 1;
                    }
                    done |= f.header.seq == last;
                }
            }
        }
        if ack_each {
            assert_eq!(acked, *n, "raw replay: an ACK per request");
        }
    }
    let e = t.elapsed();
    assert_eq!(errors, 0, "raw replay: kernel refused requests");
    e
}

/// `Handle::apply` of every operation of the cold plan (planned untimed):
/// the handle's own pipelined batch, without a syncer's reading and
/// bookkeeping.
fn apply_cold(ns: &Ns, d: &DesiredState) -> Duration {
    let h = ns.handle();
    let ops = sync::plan(
        d,
        &Observed::new(),
        &Scope::Owned,
        &HashSet::new(),
        PlanOptions::default(),
    )
    .writes;
    let count = ops.len();
    let t = Instant::now();
    let r = h.apply(ops);
    let e = t.elapsed();
    assert!(r.failed.is_empty(), "apply failed: {:?}", r.failed.first());
    assert_eq!(r.sent, count);
    e
}

fn ipvsadm_restore(ns: &Ns, rules: &str) -> Duration {
    let file = std::env::temp_dir().join(format!("ipvsctl-bench-rules-{}", std::process::id()));
    std::fs::write(&file, rules).expect("write rules");
    let input = std::fs::File::open(&file).expect("open rules");
    let t = Instant::now();
    let st = Command::new("ip")
        .args(["netns", "exec", &ns.name, "ipvsadm", "-R"])
        .stdin(input)
        .status()
        .expect("spawn ipvsadm");
    let e = t.elapsed();
    assert!(st.success(), "ipvsadm -R failed: {st}");
    let _ = std::fs::remove_file(&file);
    e
}

fn kube_proxy_resync(h: &Handle, d: &DesiredState) {
    for ds in d.services() {
        let key = ds.service().key;
        std::hint::black_box(h.get_service(&key).expect("get"));
        std::hint::black_box(h.get_service(&key).expect("get"));
        std::hint::black_box(h.list_destinations(&key).expect("list"));
    }
}

fn read_dumps(h: &Handle) -> usize {
    let mut n = 0;
    for s in h.list_services().expect("dump") {
        n += h.list_destinations(&s.service.key).expect("dests").len();
    }
    n
}

/// A complete netlink read with nothing but the kernel's work: the service
/// dump and one real-server dump per service, requests encoded beforehand,
/// answers received on one socket each way and counted, never decoded.
struct RawRead {
    services: NlSocket,
    dests: NlSocket,
    service_dump: Vec<u8>,
    dest_dumps: Vec<Vec<u8>>,
}

impl RawRead {
    fn new(ns: &Ns, d: &DesiredState) -> RawRead {
        let family = ns.handle().family_id();
        let encode = |seq: u32, msg| {
            let mut b = Vec::new();
            frame::encode_request(&mut b, &msg, family, seq, NLM_F_DUMP).expect("encode");
            b
        };
        RawRead {
            services: open_socket(&ns.netns(), DumpSize::Large).expect("socket"),
            dests: open_socket(&ns.netns(), DumpSize::Page).expect("socket"),
            service_dump: encode(1, request::dump_services()),
            dest_dumps: (2u32..)
                .zip(d.services())
                .map(|(seq, s)| encode(seq, request::dump_dests(&s.service().key).expect("valid")))
                .collect(),
        }
    }

    /// (services, real servers) read.
    fn run(&mut self) -> (usize, usize) {
        let services = raw_dump(&mut self.services, &self.service_dump);
        let mut dests = 0;
        for req in &self.dest_dumps {
            dests += raw_dump(&mut self.dests, req);
        }
        (services, dests)
    }
}

/// Sends one dump request and receives its answer: the data messages counted.
fn raw_dump(sock: &mut NlSocket, req: &[u8]) -> usize {
    sock.send(req).expect("send");
    let mut n = 0;
    loop {
        for f in frame::frames(sock.recv().expect("recv")) {
            match f.expect("frame").body {
                FrameBody::Data(_) => n += 1,
                _ => return n,
            }
        }
    }
}

/// Pre-encoded requests in datagrams as large as the socket takes; `send`
/// sends them all and counts every answer message (data and ACKs) without
/// decoding any: the kernel's floor for the same requests pipelined.
struct RawPipeline {
    sock: NlSocket,
    /// (datagram, answers it gets)
    chunks: Vec<(Vec<u8>, usize)>,
}

/// Which requests of a [`RawPipeline`] ask for an ACK.
#[derive(Clone, Copy, PartialEq)]
enum Acks {
    /// Every request.
    Each,
    /// Only the last of each datagram (as the library sends lookups and
    /// writes): the others are answered by their data, or by an error.
    Last,
}

impl RawPipeline {
    /// `data`: data messages each request gets (one for a lookup, none for a
    /// write).
    fn new(
        ns: &Ns,
        msgs: impl IntoIterator<Item = ipvsctl::codec::IpvsMessage>,
        data: usize,
        acks: Acks,
    ) -> RawPipeline {
        let family = ns.handle().family_id();
        let sock = open_socket(&ns.netns(), DumpSize::Large).expect("socket");
        let (max_batch, max_send) = (sock.max_batch(), sock.max_send());
        let answers = |count: usize| match acks {
            Acks::Each => count * (data + 1),
            Acks::Last => count * data + 1,
        };
        let flags = match acks {
            Acks::Each => NLM_F_ACK,
            Acks::Last => 0,
        };
        let mut chunks = Vec::new();
        let (mut buf, mut count, mut last_at) = (Vec::new(), 0, 0);
        for (seq, msg) in (1u32..).zip(msgs) {
            let before = buf.len();
            frame::encode_request(&mut buf, &msg, family, seq, flags).expect("encode");
            if (buf.len() > max_send || count == max_batch) && count > 0 {
                let tail = buf.split_off(before);
                frame::set_flags(&mut buf[last_at..], NLM_F_REQUEST | NLM_F_ACK);
                chunks.push((std::mem::replace(&mut buf, tail), answers(count)));
                (count, last_at) = (0, 0);
            } else {
                last_at = before;
            }
            count += 1;
        }
        if count > 0 {
            frame::set_flags(&mut buf[last_at..], NLM_F_REQUEST | NLM_F_ACK);
            chunks.push((buf, answers(count)));
        }
        RawPipeline { sock, chunks }
    }

    /// Sends every datagram, each once all answers to the previous one came;
    /// the answer messages received.
    fn send(&mut self) -> usize {
        let mut total = 0;
        for (bytes, want) in &self.chunks {
            self.sock.send(bytes).expect("send");
            let mut got = 0;
            while got < *want {
                got += frame::frames(self.sock.recv().expect("recv")).count();
            }
            total += got;
        }
        total
    }
}

/// The library's quickest complete read: the service dump and every
/// service's real servers through `list_destinations_each`.
fn read_each(h: &Handle) -> usize {
    let keys: Vec<ServiceKey> = h
        .list_services()
        .expect("dump")
        .iter()
        .map(|s| s.service.key)
        .collect();
    let mut n = 0;
    h.list_destinations_each(&keys, |_, d| n += d.expect("dests").len())
        .expect("read");
    n
}

fn read_proc(ns: &Ns) -> usize {
    run_in(&ns.netns(), || {
        std::fs::read_to_string("/proc/thread-self/net/ip_vs")
    })
    .expect("read /proc/net/ip_vs")
    .len()
}

// -------------------------------------------------------------------- cases

fn bench_size(c: &mut Criterion, n: usize) {
    let base = desired(n, false, false);
    let churned = desired(n, false, true);
    let rules = ipvsadm_rules(&base);
    let mut g = c.benchmark_group(format!("bulk_sync_{n}x{DESTS}"));
    g.sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_millis(1))
        .measurement_time(Duration::from_secs(1));
    let tag = |case: &str| format!("{n}x{DESTS}/{case}");
    // Above 10,000 services the slow cases run a few times outside
    // criterion (whose minimum is 10 samples), and the slowest are left out.
    let big = n > 10_000;
    let big_runs: u64 = env_num("IPVSCTL_BENCH_LARGE_RUNS", 3);
    let mut case_fn = |name: &str, f: &mut dyn FnMut(u64) -> Duration| {
        if big {
            let t = f(big_runs);
            note(format!(
                "{}: {big_runs} run(s) outside criterion, mean {:.2?}",
                tag(name),
                t / big_runs.max(1) as u32
            ));
        } else {
            g.bench_function(name, |b| b.iter_custom(&mut *f));
        }
    };

    let pairs: usize = env_num(
        "IPVSCTL_BENCH_PAIRS",
        if n <= 1000 {
            21
        } else if big {
            3
        } else {
            7
        },
    );
    if named_part("part_size") {
        // The syncer's part size (`SyncOptions::part_size`) against the raw
        // replay, in turns, each turn starting with the next case.
        let sizes: Vec<usize> = std::env::var("IPVSCTL_BENCH_PART_SIZES")
            .ok()
            .map(|v| v.split(',').filter_map(|x| x.trim().parse().ok()).collect())
            .unwrap_or_else(|| vec![1 << 14, 1 << 15, 1 << 17]);
        let mut ratios: Vec<Vec<f64>> = vec![Vec::new(); sizes.len()];
        for turn in 0..pairs {
            let replay = cold(&tag("part_size/raw_replay_errors_only"), 1, |ns| {
                raw_replay(ns, &base, false)
            });
            let mut line = format!("{n}x{DESTS} part-size turn {turn}: raw {replay:.2?}");
            for k in 0..sizes.len() {
                let i = (turn + k) % sizes.len();
                let size = std::num::NonZeroUsize::new(sizes[i]).expect("part size above 0");
                let options = SyncOptions::default().with_part_size(size);
                let sync = cold(&tag(&format!("part_size/{}", sizes[i])), 1, |ns| {
                    sync_cold_with(ns, &base, options.clone())
                });
                ratios[i].push(sync.as_secs_f64() / replay.as_secs_f64());
                line.push_str(&format!(", {}: {sync:.2?}", sizes[i]));
            }
            note(line);
        }
        for (size, mut r) in sizes.iter().zip(ratios) {
            if let Some((lo, mid, hi)) = spread(&mut r) {
                note(format!(
                    "{n}x{DESTS}: cold sync in parts of {size} / raw replay, {} turns: median {mid:.2} (min {lo:.2}, max {hi:.2})",
                    r.len()
                ));
            }
        }
    }
    if part("cold") {
        // Cold applies, each in a fresh namespace.
        let case = tag("cold/sync_pipelined");
        case_fn("cold/sync_pipelined", &mut |it| {
            cold(&case, it, |ns| sync_cold(ns, &base, BatchMode::Pipelined))
        });
        let case = tag("cold/raw_replay");
        case_fn("cold/raw_replay", &mut |it| {
            cold(&case, it, |ns| raw_replay(ns, &base, true))
        });
        let case = tag("cold/raw_replay_errors_only");
        case_fn("cold/raw_replay_errors_only", &mut |it| {
            cold(&case, it, |ns| raw_replay(ns, &base, false))
        });
        let case = tag("cold/handle_apply");
        case_fn("cold/handle_apply", &mut |it| {
            cold(&case, it, |ns| apply_cold(ns, &base))
        });
        // The same two side by side in pairs: the guest's speed drifts over
        // seconds under emulation, so the median of per-pair ratios is steadier
        // than a ratio of medians taken a minute apart.
        let mut paired: Vec<f64> = (0..pairs)
            .map(|_| {
                let sync = cold(&tag("paired/sync"), 1, |ns| {
                    sync_cold(ns, &base, BatchMode::Pipelined)
                });
                let replay = cold(&tag("paired/raw_replay_errors_only"), 1, |ns| {
                    raw_replay(ns, &base, false)
                });
                sync.as_secs_f64() / replay.as_secs_f64()
            })
            .collect();
        if let Some((lo, mid, hi)) = spread(&mut paired) {
            note(format!(
                "{n}x{DESTS}: cold sync / raw replay without per-request ACKs, in {pairs} pairs: median {mid:.2} (min {lo:.2}, max {hi:.2}) (goal <= 1.15)"
            ));
        }
        let case = tag("cold/sync_one_by_one");
        if !big {
            g.bench_function("cold/sync_one_by_one", |b| {
                b.iter_custom(|it| cold(&case, it, |ns| sync_cold(ns, &base, BatchMode::OneByOne)))
            });
        }
        let case = tag("cold/ipvsadm_restore");
        if big {
            // About a minute per 10,000 services under emulation: left out.
        } else if n <= 1000 {
            g.bench_function("cold/ipvsadm_restore", |b| {
                b.iter_custom(|it| cold(&case, it, |ns| ipvsadm_restore(ns, &rules)))
            });
        } else {
            let runs: u64 = env_num("IPVSCTL_BENCH_IPVSADM_RUNS", 1);
            let t = cold(&case, runs, |ns| ipvsadm_restore(ns, &rules));
            note(format!(
                "{case}: {runs} run(s) outside criterion, mean {:.2?}",
                t / runs.max(1) as u32
            ));
        }
        if n == 1000 {
            let adv = desired(n, true, false);
            let case = tag("adversarial/cold_sync_pipelined");
            g.bench_function("adversarial/cold_sync_pipelined", |b| {
                b.iter_custom(|it| cold(&case, it, |ns| sync_cold(ns, &adv, BatchMode::Pipelined)))
            });
        }
    }

    // Resyncs and reads on one namespace holding the state.
    let ns = Ns::new();
    let h = ns.handle();
    let mut syncer = with_ledger(Syncer::new(&h));
    assert!(syncer.sync(&base, Verify::Services).expect("setup").is_ok());
    let mut raw = RawRead::new(&ns, &base);
    if part("resync") {
        let mut resyncs = vec![
            ("resync/verify_full", Verify::Full, 1, ServiceCheck::Auto),
            (
                "resync/verify_services",
                Verify::Services,
                1,
                ServiceCheck::Auto,
            ),
            (
                "resync/verify_services_dump",
                Verify::Services,
                1,
                ServiceCheck::Dump,
            ),
            (
                "resync/verify_services_lookups",
                Verify::Services,
                1,
                ServiceCheck::Lookups,
            ),
            ("resync/verify_none", Verify::None, 1, ServiceCheck::Auto),
        ];
        if !big {
            resyncs.insert(
                1,
                (
                    "resync/verify_full_2_sockets",
                    Verify::Full,
                    2,
                    ServiceCheck::Auto,
                ),
            );
        }
        for (name, verify, sockets, check) in resyncs {
            let case = tag(name);
            syncer.options_mut().read_sockets = sockets;
            syncer.options_mut().service_check = check;
            let mut writes = 0;
            let mut run = |it| {
                timed(&case, it, || {
                    writes += syncer.sync(&base, verify).expect("resync").writes_sent;
                })
            };
            if big && verify == Verify::Full {
                let t = run(big_runs);
                note(format!(
                    "{case}: {big_runs} run(s) outside criterion, mean {:.2?}",
                    t / big_runs.max(1) as u32
                ));
            } else {
                g.bench_function(name, |b| b.iter_custom(&mut run));
            }
            note(format!("{case}: {writes} write requests in all iterations"));
        }
        syncer.options_mut().service_check = ServiceCheck::Auto;
        // The floors of the two service checks: the same requests pre-encoded,
        // answers counted, nothing decoded.
        let case = tag("read/raw_service_dump");
        g.bench_function("read/raw_service_dump", |b| {
            b.iter_custom(|it| {
                timed(&case, it, || {
                    assert_eq!(raw_dump(&mut raw.services, &raw.service_dump), n);
                })
            })
        });
        let lookups = |acks| {
            RawPipeline::new(
                &ns,
                base.services()
                    .iter()
                    .map(|s| request::get_service(&s.service().key).expect("valid")),
                1,
                acks,
            )
        };
        let mut raw_lookups = lookups(Acks::Each);
        let case = tag("read/raw_get_services");
        g.bench_function("read/raw_get_services", |b| {
            b.iter_custom(|it| timed(&case, it, || assert_eq!(raw_lookups.send(), 2 * n)))
        });
        let mut raw_lookups = lookups(Acks::Last);
        let want = n + raw_lookups.chunks.len();
        let case = tag("read/raw_get_services_quiet");
        g.bench_function("read/raw_get_services_quiet", |b| {
            b.iter_custom(|it| timed(&case, it, || assert_eq!(raw_lookups.send(), want)))
        });
    }
    if part("resync") || part("check") {
        // Both checks and their floors in turns (a dying namespace of the
        // cold part can still be slowing the kernel while the cases above
        // run one after the other), for the median per-turn ratios, and the
        // two checks against each other: where lookups become cheaper than
        // the dump is where `ServiceCheck::Auto` should switch.
        let turns: usize = env_num("IPVSCTL_BENCH_CHECK_TURNS", pairs);
        let mut raw_lookups = RawPipeline::new(
            &ns,
            base.services()
                .iter()
                .map(|s| request::get_service(&s.service().key).expect("valid")),
            1,
            Acks::Last,
        );
        let want = n + raw_lookups.chunks.len();
        let mut dump_raw = Vec::new();
        let mut lookups_raw = Vec::new();
        let mut lookups_dump = Vec::new();
        let mut floors = Vec::new();
        let timed_sync = |syncer: &mut Syncer<&Handle>, check| {
            syncer.options_mut().service_check = check;
            let t = Instant::now();
            let r = syncer.sync(&base, Verify::Services).expect("resync");
            let e = t.elapsed();
            assert_eq!(r.writes_sent, 0);
            e
        };
        for turn in 0..turns {
            // Each turn starts with the other check than the one before.
            let (dump, looked) = if turn % 2 == 0 {
                let dump = timed_sync(&mut syncer, ServiceCheck::Dump);
                (dump, timed_sync(&mut syncer, ServiceCheck::Lookups))
            } else {
                let looked = timed_sync(&mut syncer, ServiceCheck::Lookups);
                (timed_sync(&mut syncer, ServiceCheck::Dump), looked)
            };
            let t = Instant::now();
            assert_eq!(raw_dump(&mut raw.services, &raw.service_dump), n);
            let dump_floor = t.elapsed();
            let t = Instant::now();
            assert_eq!(raw_lookups.send(), want);
            let lookups_floor = t.elapsed();
            record(&tag("turns/verify_services_dump"), dump);
            record(&tag("turns/raw_service_dump"), dump_floor);
            record(&tag("turns/verify_services_lookups"), looked);
            record(&tag("turns/raw_get_services_quiet"), lookups_floor);
            dump_raw.push(dump.as_secs_f64() / dump_floor.as_secs_f64());
            lookups_raw.push(looked.as_secs_f64() / lookups_floor.as_secs_f64());
            lookups_dump.push(looked.as_secs_f64() / dump.as_secs_f64());
            floors.push(lookups_floor.as_secs_f64() / dump_floor.as_secs_f64());
        }
        syncer.options_mut().service_check = ServiceCheck::Auto;
        for (what, mut v) in [
            ("verify_services (dump) / raw service dump", dump_raw),
            (
                "verify_services (lookups) / raw quiet GET_SERVICEs",
                lookups_raw,
            ),
            (
                "service check: lookups / dump (below 1: lookups are cheaper)",
                lookups_dump,
            ),
            (
                "service check floors: raw quiet GET_SERVICEs / raw service dump",
                floors,
            ),
        ] {
            if let Some((lo, mid, hi)) = spread(&mut v) {
                note(format!(
                    "{n}x{DESTS}: {what}, in {turns} turns: median {mid:.2} (min {lo:.2}, max {hi:.2})"
                ));
            }
        }
    }

    if named_part("bounds") {
        bounds::check(&ns, n, &mut raw, &mut syncer, &base);
        let mut desired_now = base.clone();
        desired_now.clear_changes();
        bounds::one_change(&ns, n, &h, &mut syncer, &mut desired_now);
    }

    if part("incr") {
        // One real server changed (its weight, back and forth), in the middle
        // of the table: the incremental update, the full-state sync of the same
        // change, and the raw replay of the one request it needs.
        let mut desired_now = base.clone();
        desired_now.clear_changes();
        let mid = n / 2;
        let key = service_key(mid, false);
        let with_weight = |w: u32| {
            RealServer::new(dest_addr(mid, 0))
                .with_weight(w)
                .with_forward(ForwardMethod::Masquerade)
        };
        let mut weight = 1;
        let mut bad = Vec::new();
        let mut flip = |d: &mut DesiredState| {
            weight = 3 - weight;
            d.upsert_destinations(&key, [with_weight(weight)])
                .expect("valid change");
        };
        let case = tag("incr/sync_changes");
        g.bench_function("incr/sync_changes", |b| {
            b.iter_custom(|it| {
                timed(&case, it, || {
                    flip(&mut desired_now);
                    let r = syncer
                        .sync_changes(&mut desired_now, Verify::None)
                        .expect("sync changes");
                    if r.writes_sent != 1 || r.reads_sent != 0 || !r.is_ok() {
                        bad.push((r.writes_sent, r.reads_sent));
                    }
                })
            })
        });
        let case = tag("incr/full_sync_none");
        g.bench_function("incr/full_sync_none", |b| {
            b.iter_custom(|it| {
                timed(&case, it, || {
                    flip(&mut desired_now);
                    let r = syncer.sync(&desired_now, Verify::None).expect("sync");
                    desired_now.clear_changes();
                    if r.writes_sent != 1 || r.reads_sent != 0 || !r.is_ok() {
                        bad.push((r.writes_sent, r.reads_sent));
                    }
                })
            })
        });
        note(format!(
            "{}: one write and no read per change expected; syncs differing (writes, reads): {bad:?}",
            tag("incr")
        ));
        // Back to the base state, then the raw replay of the request alone.
        back_to_weight_1(&mut syncer, &mut desired_now, &key, &mut flip);
        let mut replays = [2u32, 1].map(|w| {
            RawPipeline::new(
                &ns,
                [request::set_dest(&key, &with_weight(w)).expect("valid")],
                0,
                Acks::Each,
            )
        });
        let case = tag("incr/raw_replay");
        let mut turn = 0;
        g.bench_function("incr/raw_replay", |b| {
            b.iter_custom(|it| {
                timed(&case, it, || {
                    assert_eq!(replays[turn % 2].send(), 1);
                    turn += 1;
                })
            })
        });
        if turn % 2 == 1 {
            replays[1].send();
        }
        // The same two side by side: each pair one incremental update (to
        // weight 2, then back to 1 in the next pair) and the raw replay of
        // the request it sent, for the median of the per-pair ratios.
        let incr_pairs: usize = env_num("IPVSCTL_BENCH_INCR_PAIRS", 1001);
        let mut ratios: Vec<f64> = (0..incr_pairs)
            .map(|k| {
                let t = Instant::now();
                flip(&mut desired_now);
                let r = syncer
                    .sync_changes(&mut desired_now, Verify::None)
                    .expect("sync changes");
                let incr = t.elapsed();
                assert!(r.writes_sent == 1 && r.reads_sent == 0 && r.is_ok());
                record(&tag("paired/incr_sync_changes"), incr);
                let t = Instant::now();
                assert_eq!(replays[k % 2].send(), 1);
                let raw = t.elapsed();
                record(&tag("paired/incr_raw_replay"), raw);
                incr.as_secs_f64() / raw.as_secs_f64()
            })
            .collect();
        back_to_weight_1(&mut syncer, &mut desired_now, &key, &mut flip);
        ratios.sort_by(f64::total_cmp);
        if let (Some(lo), Some(q1), Some(mid), Some(q3), Some(hi)) = (
            ratios.first(),
            ratios.get(ratios.len() / 4),
            ratios.get(ratios.len() / 2),
            ratios.get(ratios.len() * 3 / 4),
            ratios.last(),
        ) {
            note(format!(
                "{n}x{DESTS}: one real server changed, sync_changes / raw replay, in {incr_pairs} pairs: median {mid:.2} (quartiles {q1:.2}-{q3:.2}, min {lo:.2}, max {hi:.2}) (goal <= 2)"
            ));
        }
    }

    if part("read") {
        syncer.options_mut().read_sockets = 1;
        let case = tag("resync/churn_1pct");
        let mut flip = false;
        let mut bad_writes = Vec::new();
        g.bench_function("resync/churn_1pct", |b| {
            b.iter_custom(|it| {
                timed(&case, it, || {
                    flip = !flip;
                    let target = if flip { &churned } else { &base };
                    let r = syncer.sync(target, Verify::Services).expect("churn");
                    assert!(r.is_ok());
                    if r.writes_sent != churn_changes(n) {
                        bad_writes.push(r.writes_sent);
                    }
                })
            })
        });
        note(format!(
            "{case}: {} changes per sync; write requests differing from it: {bad_writes:?}",
            churn_changes(n)
        ));
        if flip {
            assert!(syncer.sync(&base, Verify::Services).expect("back").is_ok());
        }
        let case = tag("resync/kube_proxy_pattern");
        if !big {
            g.bench_function("resync/kube_proxy_pattern", |b| {
                b.iter_custom(|it| timed(&case, it, || kube_proxy_resync(&h, &base)))
            });
        }
        let case = tag("read/proc_net_ip_vs");
        g.bench_function("read/proc_net_ip_vs", |b| {
            b.iter_custom(|it| {
                timed(&case, it, || {
                    std::hint::black_box(read_proc(&ns));
                })
            })
        });
        let case = tag("read/dumps");
        if !big {
            g.bench_function("read/dumps", |b| {
                b.iter_custom(|it| {
                    timed(&case, it, || {
                        assert_eq!(read_dumps(&h), base.destination_count())
                    })
                })
            });
            let case = tag("read/dumps_each");
            g.bench_function("read/dumps_each", |b| {
                b.iter_custom(|it| {
                    timed(&case, it, || {
                        assert_eq!(read_each(&h), base.destination_count())
                    })
                })
            });
        }
        let case = tag("read/raw_dumps");
        let want = (n, base.destination_count());
        if big {
            let t = timed(&case, big_runs, || assert_eq!(raw.run(), want));
            note(format!(
                "{case}: {big_runs} run(s) outside criterion, mean {:.2?}",
                t / big_runs.max(1) as u32
            ));
        } else {
            g.bench_function("read/raw_dumps", |b| {
                b.iter_custom(|it| timed(&case, it, || assert_eq!(raw.run(), want)))
            });
        }
        // Verification, the kernel's floor of a complete netlink read and
        // /proc/net/ip_vs in turns, for ratios within each turn.
        let turns = pairs;
        syncer.options_mut().read_sockets = 1;
        let mut full_raw = Vec::new();
        let mut raw_proc = Vec::new();
        for _ in 0..turns {
            let t = Instant::now();
            assert_eq!(
                syncer
                    .sync(&base, Verify::Full)
                    .expect("resync")
                    .writes_sent,
                0
            );
            let full = t.elapsed();
            let t = Instant::now();
            std::hint::black_box(raw.run());
            let floor = t.elapsed();
            let t = Instant::now();
            std::hint::black_box(read_proc(&ns));
            let proc_read = t.elapsed();
            full_raw.push(full.as_secs_f64() / floor.as_secs_f64());
            raw_proc.push(floor.as_secs_f64() / proc_read.as_secs_f64());
        }
        for (what, mut v) in [
            (
                "Verify::Full / raw netlink read (the kernel's floor)",
                full_raw,
            ),
            ("raw netlink read / /proc/net/ip_vs", raw_proc),
        ] {
            if let Some((lo, mid, hi)) = spread(&mut v) {
                note(format!(
                    "{n}x{DESTS}: {what}, in {turns} turns: median {mid:.2} (min {lo:.2}, max {hi:.2})"
                ));
            }
        }
    }

    if part("rolling") {
        // Rolling verification next to the two fixed ones, in turns, each
        // turn starting with the next case: `Verify::Full`, `Verify::Services`
        // and one rolling sync for each `syncs` of a syncer of its own, so
        // that its slices advance from turn to turn as in production (a
        // `Verify::Full` sync of the same syncer would mark every service
        // verified and reset the ages). Every syncer owns the table (adopted)
        // and has read it whole once, untimed.
        let opts = SyncOptions::default();
        *syncer.options_mut() = opts.clone();
        let ks = [10u32, 50];
        let mut rolling: Vec<(u32, Syncer<&Handle>)> = ks
            .iter()
            .map(|&k| {
                let mut s = with_ledger(Syncer::with_options(&h, opts.clone()));
                s.adopt(base.services().iter().map(|d| d.service().key));
                let r = s.sync(&base, Verify::Full).expect("rolling setup");
                assert!(r.is_ok() && r.writes_sent == 0, "rolling setup wrote");
                (k, s)
            })
            .collect();
        let turns: usize = env_num(
            "IPVSCTL_BENCH_ROLLING_TURNS",
            if test_mode() { 4 } else { pairs },
        );
        let cases = 2 + ks.len();
        let mut times = vec![Vec::with_capacity(turns); cases];
        let mut ratios = vec![Vec::with_capacity(turns); ks.len()];
        for turn in 0..turns {
            let mut t_turn = vec![Duration::ZERO; cases];
            for i in 0..cases {
                let c = (turn + i) % cases;
                let t = Instant::now();
                let r = match c {
                    0 => syncer.sync(&base, Verify::Full),
                    1 => syncer.sync(&base, Verify::Services),
                    _ => {
                        let (k, s) = &mut rolling[c - 2];
                        s.sync(&base, Verify::rolling(NonZeroU32::new(*k).expect("k > 0")))
                    }
                }
                .expect("resync");
                t_turn[c] = t.elapsed();
                assert!(r.is_ok() && r.writes_sent == 0, "no-op resync wrote");
                if c >= 2 {
                    let k = ks[c - 2];
                    let share = n.div_ceil(k as usize);
                    assert_eq!(
                        r.verified_in_full, share,
                        "rolling k = {k}: services verified in full"
                    );
                    assert!(r.max_unverified_syncs.is_some_and(|m| m < u64::from(k)));
                }
            }
            let (full, services) = (t_turn[0].as_secs_f64(), t_turn[1].as_secs_f64());
            let mut line = format!(
                "{n}x{DESTS}: rolling turn {}/{turns}: full {:.1?}, services {:.1?}",
                turn + 1,
                t_turn[0],
                t_turn[1]
            );
            for (j, &k) in ks.iter().enumerate() {
                let ratio = t_turn[2 + j].as_secs_f64() / (full / f64::from(k) + services);
                ratios[j].push(ratio);
                line.push_str(&format!(
                    ", rolling {k} {:.1?} (ratio {ratio:.2})",
                    t_turn[2 + j]
                ));
            }
            eprintln!("bulk_sync: {line}");
            for (c, d) in t_turn.into_iter().enumerate() {
                times[c].push(d);
            }
        }
        let mut names = vec!["verify_full".to_owned(), "verify_services".to_owned()];
        names.extend(ks.iter().map(|k| format!("rolling_{k}")));
        for (name, mut v) in names.iter().zip(times) {
            for d in &v {
                record(&tag(&format!("rolling/{name}")), *d);
            }
            v.sort();
            if let (Some(lo), Some(mid), Some(hi)) = (v.first(), v.get(v.len() / 2), v.last()) {
                note(format!(
                    "{n}x{DESTS}: rolling/{name}, in {turns} turns: median {mid:.1?} (min {lo:.1?}, max {hi:.1?})"
                ));
            }
        }
        for (k, mut v) in ks.iter().zip(ratios) {
            if let Some((lo, mid, hi)) = spread(&mut v) {
                note(format!(
                    "{n}x{DESTS}: Verify::rolling({k}) / (Verify::Full / {k} + Verify::Services), in {turns} turns: median {mid:.2} (min {lo:.2}, max {hi:.2}) (goal <= 1.2)"
                ));
            }
        }
    }
    g.finish();
    drop(syncer);
    drop(h);
    drop(ns);
}

/// Makes the incremental cases' real server weight 1 again, in the desired
/// state and the kernel, if `flip` left it at 2.
fn back_to_weight_1(
    syncer: &mut Syncer<&Handle>,
    desired: &mut DesiredState,
    key: &ServiceKey,
    flip: &mut impl FnMut(&mut DesiredState),
) {
    if desired.get(key).map(|d| d.destinations()[0].weight) != Some(1) {
        flip(desired);
        let r = syncer.sync_changes(desired, Verify::None).expect("back");
        assert!(r.is_ok());
    }
}

/// Whether a part of the bench runs: `IPVSCTL_BENCH_PARTS`, a comma list
/// of `cold`, `resync`, `check`, `incr`, `read`, `rolling`, `memory`
/// (default: all).
fn part(name: &str) -> bool {
    std::env::var("IPVSCTL_BENCH_PARTS")
        .map(|v| v.split(',').any(|p| p.trim() == name))
        .unwrap_or(true)
}

/// The least, median and greatest of `v` (sorted here); `None` when empty.
fn spread(v: &mut [f64]) -> Option<(f64, f64, f64)> {
    v.sort_by(f64::total_cmp);
    Some((*v.first()?, *v.get(v.len() / 2)?, *v.last()?))
}

/// Whether `IPVSCTL_BENCH_PARTS` names this part (for parts that run only
/// when asked for).
fn named_part(name: &str) -> bool {
    std::env::var("IPVSCTL_BENCH_PARTS").is_ok_and(|v| v.split(',').any(|p| p.trim() == name))
}

/// Whether this is criterion's test mode (`cargo test --all-targets` runs
/// the binary without `--bench`): each case once, small sizes.
fn test_mode() -> bool {
    !std::env::args().any(|a| a == "--bench")
}

fn env_num<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

// ------------------------------------------------------------------- memory

const MEMORY_CHILD: &str = "IPVSCTL_BULK_SYNC_MEMORY_CHILD";

/// In the child: build, sync cold, resync with full verification; print
/// the peak resident set size.
fn memory_child(n: usize) {
    let ns = Ns::new();
    let h = ns.handle();
    let mut d = desired(n, false, false);
    let mut s = with_ledger(Syncer::new(&h));
    assert!(s.sync(&d, Verify::Services).expect("sync").is_ok());
    // As `Syncer::sync_changes` shows: changes recorded while the state was
    // built are cleared once it is synced whole.
    d.clear_changes();
    // The peak so far (the cold sync's) goes to stderr; the whole peak is
    // the answer.
    eprintln!("after the cold sync: {}", vm_hwm());
    assert_eq!(s.sync(&d, Verify::Full).expect("resync").writes_sent, 0);
    println!("{}", vm_hwm());
    drop(s);
    drop(h);
    drop(ns);
}

/// This process's peak resident set size, as `/proc/self/status` gives it.
fn vm_hwm() -> String {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .unwrap_or("?")
        .trim()
        .to_string()
}

fn measure_memory(n: usize) {
    let Ok(exe) = std::env::current_exe() else {
        return;
    };
    let out = Command::new(exe)
        .env(MEMORY_CHILD, n.to_string())
        .stderr(Stdio::inherit())
        .output();
    match out {
        Ok(o) if o.status.success() => note(format!(
            "peak memory (VmHWM of a process that builds {n}x{DESTS}, syncs cold, resyncs with Verify::Full): {}",
            String::from_utf8_lossy(&o.stdout).trim()
        )),
        Ok(o) => note(format!("memory child failed: {}", o.status)),
        Err(e) => note(format!("memory child could not start: {e}")),
    }
}

// ------------------------------------------------------------------ summary

fn ratio_line(out: &mut String, what: &str, num: &str, den: &str, goal: &str) {
    if let (Some(a), Some(b)) = (median(num), median(den)) {
        let r = a.as_secs_f64() / b.as_secs_f64();
        out.push_str(&format!(
            "  {what:<58} {r:>8.2}  ({:.1?} / {:.1?}) {goal}\n",
            a, b
        ));
    }
}

fn summary(sizes: &[usize]) {
    let mut out =
        String::from("\n==== bulk_sync summary (medians of the measured iterations) ====\n");
    {
        let t = TIMES.lock().unwrap_or_else(|p| p.into_inner());
        for (case, v) in t.iter() {
            let mut s = v.clone();
            s.sort();
            out.push_str(&format!(
                "  {case:<48} median {:>10.2?}  min {:>10.2?}  n={}\n",
                s[s.len() / 2],
                s[0],
                s.len()
            ));
        }
    }
    out.push_str("ratios:\n");
    for n in sizes {
        let t = |c: &str| format!("{n}x{DESTS}/{c}");
        // The practical limit is the faster of the two raw replays.
        let fastest_replay = match (
            median(&t("cold/raw_replay")),
            median(&t("cold/raw_replay_errors_only")),
        ) {
            (Some(a), Some(b)) if a < b => t("cold/raw_replay"),
            _ => t("cold/raw_replay_errors_only"),
        };
        ratio_line(
            &mut out,
            &format!("{n}: cold sync / fastest raw replay"),
            &t("cold/sync_pipelined"),
            &fastest_replay,
            "(goal <= 1.15)",
        );
        ratio_line(
            &mut out,
            &format!("{n}: cold sync / raw replay, an ACK per request"),
            &t("cold/sync_pipelined"),
            &t("cold/raw_replay"),
            "",
        );
        ratio_line(
            &mut out,
            &format!("{n}: ipvsadm -R / cold sync"),
            &t("cold/ipvsadm_restore"),
            &t("cold/sync_pipelined"),
            "(goal >= 20)",
        );
        ratio_line(
            &mut out,
            &format!("{n}: Handle::apply / cold sync"),
            &t("cold/handle_apply"),
            &t("cold/sync_pipelined"),
            "",
        );
        ratio_line(
            &mut out,
            &format!("{n}: one-by-one / cold sync"),
            &t("cold/sync_one_by_one"),
            &t("cold/sync_pipelined"),
            "",
        );
        let cheapest = match (median(&t("read/proc_net_ip_vs")), median(&t("read/dumps"))) {
            (Some(a), Some(b)) if a <= b => t("read/proc_net_ip_vs"),
            _ => t("read/dumps"),
        };
        ratio_line(
            &mut out,
            &format!("{n}: verify_full resync / cheapest full read"),
            &t("resync/verify_full"),
            &cheapest,
            "(goal <= 1.2)",
        );
        ratio_line(
            &mut out,
            &format!("{n}: verify_full resync / netlink full read (complete)"),
            &t("resync/verify_full"),
            &t("read/dumps"),
            "",
        );
        ratio_line(
            &mut out,
            &format!("{n}: verify_full resync / raw netlink read (kernel's floor)"),
            &t("resync/verify_full"),
            &t("read/raw_dumps"),
            "",
        );
        ratio_line(
            &mut out,
            &format!("{n}: raw netlink read / /proc/net/ip_vs"),
            &t("read/raw_dumps"),
            &t("read/proc_net_ip_vs"),
            "",
        );
        ratio_line(
            &mut out,
            &format!("{n}: list_destinations_each read / plain loop"),
            &t("read/dumps_each"),
            &t("read/dumps"),
            "",
        );
        ratio_line(
            &mut out,
            &format!("{n}: verify_full (2 sockets) / cheapest full read"),
            &t("resync/verify_full_2_sockets"),
            &cheapest,
            "",
        );
        ratio_line(
            &mut out,
            &format!("{n}: kube-proxy pattern / verify_services resync"),
            &t("resync/kube_proxy_pattern"),
            &t("resync/verify_services"),
            "(goal >= 15)",
        );
        ratio_line(
            &mut out,
            &format!("{n}: churn 1% / verify_services no-op"),
            &t("resync/churn_1pct"),
            &t("resync/verify_services"),
            "",
        );
        ratio_line(
            &mut out,
            &format!("{n}: one real server changed: sync_changes / raw replay"),
            &t("incr/sync_changes"),
            &t("incr/raw_replay"),
            "(goal <= 2)",
        );
        ratio_line(
            &mut out,
            &format!("{n}: one real server changed: full sync / sync_changes"),
            &t("incr/full_sync_none"),
            &t("incr/sync_changes"),
            "",
        );
        ratio_line(
            &mut out,
            &format!("{n}: verify_services (dump) / raw service dump"),
            &t("resync/verify_services_dump"),
            &t("read/raw_service_dump"),
            "",
        );
        ratio_line(
            &mut out,
            &format!("{n}: verify_services (lookups) / raw GET_SERVICE pipeline"),
            &t("resync/verify_services_lookups"),
            &t("read/raw_get_services_quiet"),
            "",
        );
        ratio_line(
            &mut out,
            &format!("{n}: raw GET_SERVICE pipeline, ACK per datagram / per request"),
            &t("read/raw_get_services_quiet"),
            &t("read/raw_get_services"),
            "",
        );
        ratio_line(
            &mut out,
            &format!("{n}: raw GET_SERVICE pipeline / raw service dump"),
            &t("read/raw_get_services_quiet"),
            &t("read/raw_service_dump"),
            "",
        );
        ratio_line(
            &mut out,
            &format!("{n}: adversarial addresses / realistic (cold sync)"),
            &t("adversarial/cold_sync_pipelined"),
            &t("cold/sync_pipelined"),
            "",
        );
    }
    out.push_str("notes:\n");
    for n in NOTES.lock().unwrap_or_else(|p| p.into_inner()).iter() {
        out.push_str(&format!("  {n}\n"));
    }
    print!("{out}");
    let _ = std::io::stdout().flush();
}

fn main() {
    // Kernels before 5.16 do not load ip_vs when the IPVS family is asked
    // for (docs/kernel-notes.md); load it as ipvsadm does. Failure is
    // harmless where it is built in or already loaded.
    let _ = Command::new("modprobe")
        .arg("ip_vs")
        .stderr(Stdio::null())
        .status();
    if let Ok(n) = std::env::var(MEMORY_CHILD) {
        memory_child(n.parse().unwrap_or(10_000));
        return;
    }
    // `cargo test --all-targets` runs this binary without `--bench`
    // (criterion's test mode: each case once, to see that it works): use the
    // small sizes there too, so the test suite stays quick.
    let quick = test_mode() || std::env::var("IPVSCTL_BENCH_QUICK").is_ok_and(|v| v == "1");
    let sizes: Vec<usize> = match std::env::var("IPVSCTL_BENCH_SIZES") {
        Ok(s) => s.split(',').filter_map(|x| x.trim().parse().ok()).collect(),
        Err(_) if quick => vec![100],
        Err(_) => vec![1000, 10_000, 50_000],
    };
    let mut c = Criterion::default().configure_from_args().without_plots();
    for &n in &sizes {
        bench_size(&mut c, n);
    }
    let mem_n = if quick {
        100
    } else {
        *sizes.iter().max().unwrap_or(&10_000)
    };
    if part("memory") {
        measure_memory(mem_n);
    }
    c.final_summary();
    summary(&sizes);
}
