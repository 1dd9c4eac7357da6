//! The cost of health-checking on a real kernel (the cargo runner starts
//! this bench in the QEMU guest when the host has no IPVS):
//! `examples/keepalived-lite` against Debian's keepalived 2.2.7
//! (`/usr/sbin/keepalived`, the LVS half, `-C`), both running at the same
//! time over the same minute, each in a fresh network namespace of its own,
//! from the same configuration file.
//!
//! The configuration (written by the bench): N virtual servers
//! `10.1.x.y:80` (`IPVSCTL_BENCH_KEEPALIVED_VS`, default 1,000; 20 in test
//! mode), each `lb_algo rr`, `lb_kind NAT`, `protocol TCP`, `delay_loop 1`,
//! with the same ten real servers `10.2.0.1`-`10.2.0.10` port 8080
//! (`weight 1`, `TCP_CHECK { connect_timeout 5 }`, keepalived's defaults
//! otherwise): N x 10 TCP checks a second asked of each daemon. Each
//! namespace has `lo` up and a dummy device holding the ten real-server
//! addresses, and the bench's own listeners there, one per address (a
//! thread that entered the namespace, backlog 4096), accept each
//! connection and close it at once. The connections a namespace accepted
//! are the checks its daemon made.
//!
//! A round: both namespaces and their listeners made; both daemons started
//! as `PROGRAM -n -l -C -s NETNS -f FILE -p PIDFILE -c PIDFILE`, one right
//! after the other, the one that starts first alternating from round to
//! round (keepalived-lite first in the first round); then, before anything
//! is measured, both IPVS tables must hold exactly the N services with
//! their ten real servers each (read with ipvsctl: a service dump and the
//! real-server dumps, at most [`TABLE_DEADLINE`]); then
//! `IPVSCTL_BENCH_KEEPALIVED_SETTLE` seconds (default 10, 2 in test mode)
//! for the first rounds of checks to settle; then the measured window of
//! `IPVSCTL_BENCH_KEEPALIVED_SECS` seconds (default 60, 5 in test mode).
//! At its start and end, for each daemon's process and every process
//! below it: `utime + stime + cutime + cstime` from `/proc/PID/stat`
//! (clock ticks to seconds), the time their threads spent runnable but
//! waiting for a CPU (`/proc/PID/task/TID/schedstat`), and the listeners'
//! accept counts; at the end `VmHWM` from `/proc/PID/status`. keepalived
//! runs as two processes, its parent and its checker child: both are
//! summed, CPU and `VmHWM` alike (the two `VmHWM`s count the pages they
//! share twice). keepalived-lite is one process (its checks run on a
//! pool of threads, `--threads`, 4 unless
//! `IPVSCTL_BENCH_KEEPALIVED_THREADS` says). After the window both tables are read again (real servers whose checks failed
//! are out of them), and both daemons get SIGTERM at once and have
//! [`STOP_DEADLINE`] to exit; one that does not is killed with its
//! process group and fails the bench. Every daemon, listener and namespace
//! has a drop guard, so a panic leaves nothing running.
//!
//! `IPVSCTL_BENCH_KEEPALIVED_ROUNDS` rounds (default 2, 1 in test mode).
//! Printed: per round and daemon the CPU seconds of the window, the CPU
//! share (% of one core), peak memory (MiB), checks a second, CPU per
//! check, the run-queue wait (% of the window) and the real servers left
//! in the table; per round the ratios keepalived-lite / keepalived; at the
//! end their median and min-max over the rounds; and the whole guest's
//! CPU use over each window (how much of its vCPUs the daemons, the
//! listeners and everything else took together), with the bench's own CPU
//! (the listeners).
//!
//! No criterion: the figures are rates over a minute of two daemons
//! running side by side. Build the example first, in release mode for
//! `cargo bench` (`cargo build --release --all-features --example
//! keepalived-lite`); the bench runs `target/<profile>/examples/keepalived-lite`
//! of its own profile (in test mode the release build if there is no
//! other), or `IPVSCTL_KEEPALIVED_LITE`; `IPVSCTL_KEEPALIVED` names the
//! reference (default `/usr/sbin/keepalived`, Debian package keepalived).
//! `cargo test --benches` (CI's test mode, an unoptimized build) runs one
//! round at 20 x 10 for 5 s, checking the tables and that both daemons made
//! checks. The figures in docs/performance.md come from `cargo bench
//! --all-features --bench kernel_healthchecks`, with the guest's kernel
//! chosen by `IPVSCTL_VM_KERNEL` (default 6.1).

#[path = "../tests/support/keepalived.rs"]
mod keepalived;

use std::collections::{BTreeSet, HashMap};
use std::fmt::Write as _;
use std::fs::File;
use std::io::{self, Write as _};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener};
use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ipvsctl::model::ServiceKey;
use ipvsctl::netlink::netns::run_in;
use ipvsctl::{Handle, HandleOptions, NetNs};
use rustix::net::{AddressFamily, SocketFlags, SocketType, ipproto, sockopt};

/// Real servers per virtual server (the same ten addresses in each).
const REAL_SERVERS: usize = 10;
const VS_PORT: u16 = 80;
const RS_PORT: u16 = 8080;
/// The listeners' backlog (the namespace's `somaxconn`, 4096 by default,
/// caps it).
const BACKLOG: i32 = 4096;
/// How long an `accept` waits before the loop looks at its stop flag.
const ACCEPT_WAIT: Duration = Duration::from_millis(200);
/// How long both daemons may take to fill their tables.
const TABLE_DEADLINE: Duration = Duration::from_secs(600);
/// How long each daemon may take to exit after SIGTERM.
const STOP_DEADLINE: Duration = Duration::from_secs(120);
/// How often the tables are read while they fill.
const POLL: Duration = Duration::from_millis(500);

fn env_usize(name: &str, default: usize) -> usize {
    match std::env::var(name) {
        Err(_) => default,
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not a number")),
    }
}

fn sh(program: &str, args: &[&str]) {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    assert!(out.status.success(), "{program} {args:?}: {out:?}");
}

// ------------------------------------------------------------ the daemons

/// The two daemons, as indexes into per-side arrays.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Side {
    Lite = 0,
    Keepalived = 1,
}

impl Side {
    const BOTH: [Side; 2] = [Side::Lite, Side::Keepalived];

    fn name(self) -> &'static str {
        match self {
            Side::Lite => "keepalived-lite",
            Side::Keepalived => "keepalived",
        }
    }

    /// Short, for namespace and file names.
    fn tag(self) -> &'static str {
        match self {
            Side::Lite => "lite",
            Side::Keepalived => "ka",
        }
    }
}

/// What the bench runs: sizes, times, programs.
struct Setup {
    vs: usize,
    secs: u64,
    settle: u64,
    rounds: usize,
    programs: [PathBuf; 2],
    /// Extra arguments of each program (keepalived-lite's `--threads`).
    extra: [Vec<String>; 2],
}

/// The example under test: `IPVSCTL_KEEPALIVED_LITE`, else the build of
/// the bench's own profile, else (test mode only) the release build.
fn lite_program(measuring: bool) -> PathBuf {
    if let Some(p) = std::env::var_os("IPVSCTL_KEEPALIVED_LITE")
        && !p.is_empty()
    {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().expect("current_exe");
    // target/<profile>/deps/kernel_healthchecks-HASH
    let profile = exe
        .parent()
        .and_then(Path::parent)
        .expect("the bench is in target/<profile>/deps");
    let mut candidates = vec![profile.join("examples/keepalived-lite")];
    if !measuring && let Some(target) = profile.parent() {
        candidates.push(target.join("release/examples/keepalived-lite"));
    }
    candidates
        .iter()
        .find(|p| p.is_file())
        .cloned()
        .unwrap_or_else(|| {
            panic!(
                "{} is missing: build it first with \
                 `cargo build --release --all-features --example keepalived-lite` \
                 (or `cargo build --examples --all-features` for test mode)",
                candidates[0].display()
            )
        })
}

/// A running daemon, its output in a file; killed with its process group
/// on drop if still running.
struct Daemon {
    side: Side,
    child: Child,
    log: PathBuf,
    status: Option<ExitStatus>,
}

impl Daemon {
    /// `program -n -l -C -s NETNS -f CONF -p DIR/TAG.pid -c
    /// DIR/TAG-checkers.pid`, in a process group of its own.
    fn start(side: Side, setup: &Setup, ns: &Netns, conf: &Path, dir: &Path) -> Daemon {
        let tag = format!("{}-{}", ns.round, side.tag());
        let log = dir.join(format!("{tag}.log"));
        let out = File::create(&log).expect("the daemon's log file");
        let err = out.try_clone().expect("the daemon's log file");
        let mut c = Command::new(&setup.programs[side as usize]);
        c.args(["-n", "-l", "-C", "-s", &ns.name, "-f"])
            .arg(conf)
            .arg("-p")
            .arg(dir.join(format!("{tag}.pid")))
            .arg("-c")
            .arg(dir.join(format!("{tag}-checkers.pid")))
            .args(&setup.extra[side as usize])
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .process_group(0);
        println!("round {}: $ {c:?}", ns.round + 1);
        let child = c
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", side.name()));
        Daemon {
            side,
            child,
            log,
            status: None,
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn running(&mut self) -> bool {
        if self.status.is_none() {
            self.status = self.child.try_wait().ok().flatten();
        }
        self.status.is_none()
    }

    /// The last `n` lines of its output.
    fn tail(&self, n: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// Panics with its output if it has exited.
    fn check_running(&mut self) {
        if !self.running() {
            panic!(
                "{} exited ({:?}); its last lines:\n{}",
                self.side.name(),
                self.status,
                self.tail(40)
            );
        }
    }

    fn signal(&self, sig: &str, group: bool) {
        let target = if group {
            format!("-{}", self.pid())
        } else {
            self.pid().to_string()
        };
        let _ = Command::new("kill")
            .args([sig, "--", &target])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// SIGTERM to both at once, then waits for both (polling both, so each
/// exit is timed), at most [`STOP_DEADLINE`]; a daemon still running then
/// is killed with its process group. Returns each one's exit status and
/// seconds from the signal, or why it failed.
fn stop_both(daemons: &mut [Daemon; 2]) -> [Result<(ExitStatus, f64), String>; 2] {
    for d in daemons.iter() {
        d.signal("-TERM", false);
    }
    let start = Instant::now();
    let mut exited = [None, None];
    while exited.iter().any(Option::is_none) && start.elapsed() < STOP_DEADLINE {
        for (i, d) in daemons.iter_mut().enumerate() {
            if exited[i].is_none() && !d.running() {
                exited[i] = Some(start.elapsed().as_secs_f64());
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut out = [Err(String::new()), Err(String::new())];
    for (i, d) in daemons.iter_mut().enumerate() {
        out[i] = match (exited[i], d.status) {
            (Some(secs), Some(status)) => Ok((status, secs)),
            _ => {
                let tail = d.tail(20);
                d.signal("-KILL", true);
                d.status = d.child.wait().ok();
                Err(format!(
                    "{} still ran {STOP_DEADLINE:?} after SIGTERM: killed; its last lines:\n{tail}",
                    d.side.name()
                ))
            }
        };
    }
    out
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if self.running() {
            self.signal("-KILL", true);
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

// ------------------------------------------- namespaces, listeners, files

fn rs_ip(j: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 2, 0, j as u8 + 1)
}

fn vs_ip(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 1, (i / 250) as u8, (i % 250 + 1) as u8)
}

/// One daemon's namespace: `lo` up, `dummy0` with the real servers'
/// addresses; flushed and deleted when dropped.
struct Netns {
    name: String,
    round: usize,
}

impl Netns {
    fn new(side: Side, round: usize) -> Netns {
        let name = format!(
            "ipvsctl-bench-ka-{}-{}-{}",
            std::process::id(),
            round,
            side.tag()
        );
        sh("ip", &["netns", "add", &name]);
        let ns = Netns { name, round };
        let mut batch =
            String::from("link set lo up\nlink add dummy0 type dummy\nlink set dummy0 up\n");
        for j in 0..REAL_SERVERS {
            writeln!(batch, "addr add {}/32 dev dummy0", rs_ip(j)).expect("to a String");
        }
        let mut ip = Command::new("ip")
            .args(["-n", &ns.name, "-batch", "-"])
            .stdin(Stdio::piped())
            .spawn()
            .expect("ip -batch");
        ip.stdin
            .take()
            .expect("piped")
            .write_all(batch.as_bytes())
            .expect("ip -batch's input");
        let status = ip.wait().expect("ip -batch");
        assert!(status.success(), "ip -n {} -batch: {status}", ns.name);
        ns
    }

    fn netns(&self) -> NetNs {
        NetNs::named(self.name.clone())
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        // Whatever a killed daemon left, flushed before the namespace goes,
        // so that little of the kernel's freeing is left for the next round.
        if let Ok(h) = Handle::open(&self.netns(), &HandleOptions::new()) {
            let _ = h.flush();
        }
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

/// A listening socket with a chosen backlog; `accept` waits at most
/// [`ACCEPT_WAIT`] (Linux applies `SO_RCVTIMEO` to it).
fn listen(addr: SocketAddrV4) -> io::Result<TcpListener> {
    let fd = rustix::net::socket_with(
        AddressFamily::INET,
        SocketType::STREAM,
        SocketFlags::CLOEXEC,
        Some(ipproto::TCP),
    )?;
    sockopt::set_socket_reuseaddr(&fd, true)?;
    rustix::net::bind(&fd, &addr)?;
    rustix::net::listen(&fd, BACKLOG)?;
    sockopt::set_socket_timeout(&fd, sockopt::Timeout::Recv, Some(ACCEPT_WAIT))?;
    Ok(TcpListener::from(fd))
}

/// The real servers of one namespace: a thread per address, inside the
/// namespace, accepting and closing; stopped and joined when dropped.
struct Listeners {
    stop: Arc<AtomicBool>,
    accepted: Arc<AtomicU64>,
    errors: Arc<AtomicU64>,
    threads: Vec<JoinHandle<io::Result<()>>>,
}

impl Listeners {
    fn start(ns: &Netns) -> Listeners {
        let mut l = Listeners {
            stop: Arc::new(AtomicBool::new(false)),
            accepted: Arc::new(AtomicU64::new(0)),
            errors: Arc::new(AtomicU64::new(0)),
            threads: Vec::new(),
        };
        let (tx, bound) = mpsc::channel();
        for j in 0..REAL_SERVERS {
            let (netns, tx) = (ns.netns(), tx.clone());
            let (stop, accepted, errors) = (
                Arc::clone(&l.stop),
                Arc::clone(&l.accepted),
                Arc::clone(&l.errors),
            );
            let addr = SocketAddrV4::new(rs_ip(j), RS_PORT);
            let thread = std::thread::Builder::new()
                .name(format!("accept-{}", rs_ip(j)))
                .spawn(move || {
                    run_in(&netns, || {
                        let listener = match listen(addr) {
                            Ok(s) => s,
                            Err(e) => {
                                let _ = tx.send(Err(format!("listen on {addr}: {e}")));
                                return Err(e);
                            }
                        };
                        let _ = tx.send(Ok(()));
                        while !stop.load(Ordering::Relaxed) {
                            match listener.accept() {
                                // Dropped at once: closed.
                                Ok(_) => {
                                    accepted.fetch_add(1, Ordering::Relaxed);
                                }
                                Err(e)
                                    if matches!(
                                        e.kind(),
                                        io::ErrorKind::WouldBlock
                                            | io::ErrorKind::TimedOut
                                            | io::ErrorKind::Interrupted
                                    ) => {}
                                // ECONNABORTED, EMFILE...: counted, and a
                                // pause so a lasting one does not spin.
                                Err(_) => {
                                    errors.fetch_add(1, Ordering::Relaxed);
                                    std::thread::sleep(Duration::from_millis(1));
                                }
                            }
                        }
                        Ok(())
                    })
                })
                .expect("spawn a listener thread");
            l.threads.push(thread);
        }
        drop(tx);
        for _ in 0..REAL_SERVERS {
            match bound.recv_timeout(Duration::from_secs(60)) {
                Ok(Ok(())) => {}
                Ok(Err(e)) => panic!("{}: {e}", ns.name),
                Err(e) => panic!("{}: a listener did not start: {e}", ns.name),
            }
        }
        l
    }

    fn accepted(&self) -> u64 {
        self.accepted.load(Ordering::Relaxed)
    }
}

impl Drop for Listeners {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// The bench's files (configuration, pid files, logs): a root-owned 0755
/// directory, removed when dropped.
struct WorkDir(PathBuf);

impl WorkDir {
    fn new() -> WorkDir {
        let dir =
            std::env::temp_dir().join(format!("ipvsctl-bench-keepalived-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("the bench's directory");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))
            .expect("the bench's directory");
        WorkDir(dir)
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The configuration: `vs` virtual servers, each with the ten real servers
/// checked by TCP_CHECK every second.
fn config(vs: usize) -> String {
    let mut c = format!(
        "! benches/kernel_healthchecks.rs: {vs} virtual servers x {REAL_SERVERS} real servers,\n\
         ! a TCP_CHECK on each every second.\n"
    );
    for i in 0..vs {
        writeln!(
            c,
            "virtual_server {} {VS_PORT} {{\n    delay_loop 1\n    lb_algo rr\n    lb_kind NAT\n    protocol TCP",
            vs_ip(i)
        )
        .expect("to a String");
        for j in 0..REAL_SERVERS {
            writeln!(
                c,
                "    real_server {} {RS_PORT} {{\n        weight 1\n        TCP_CHECK {{\n            connect_timeout 5\n        }}\n    }}",
                rs_ip(j)
            )
            .expect("to a String");
        }
        c.push_str("}\n");
    }
    c
}

// ------------------------------------------------------------ the tables

/// What a namespace's IPVS table holds, against the configuration.
#[derive(Clone, Copy, Debug)]
struct Table {
    services: usize,
    /// Real servers, in all.
    real_servers: usize,
    /// Configured services with exactly the ten configured real servers.
    complete: usize,
}

impl Table {
    fn full(&self, vs: usize) -> bool {
        self.services == vs && self.complete == vs && self.real_servers == vs * REAL_SERVERS
    }
}

fn read_table(ns: &Netns, vs: usize) -> Result<Table, String> {
    let h = Handle::open(&ns.netns(), &HandleOptions::new()).map_err(|e| e.to_string())?;
    let services = h.list_services().map_err(|e| e.to_string())?;
    let keys: Vec<ServiceKey> = services.iter().map(|s| s.service.key).collect();
    let wanted_keys: BTreeSet<ServiceKey> = (0..vs)
        .map(|i| ServiceKey::tcp(SocketAddr::V4(SocketAddrV4::new(vs_ip(i), VS_PORT))))
        .collect();
    let wanted_rs: BTreeSet<SocketAddr> = (0..REAL_SERVERS)
        .map(|j| SocketAddr::V4(SocketAddrV4::new(rs_ip(j), RS_PORT)))
        .collect();
    let mut t = Table {
        services: keys.len(),
        real_servers: 0,
        complete: 0,
    };
    let mut failure = None;
    h.list_destinations_each(&keys, |i, dests| match dests {
        Ok(d) => {
            t.real_servers += d.len();
            let addrs: BTreeSet<SocketAddr> = d.iter().map(|d| d.server.addr).collect();
            if wanted_keys.contains(&keys[i]) && d.len() == REAL_SERVERS && addrs == wanted_rs {
                t.complete += 1;
            }
        }
        Err(e) => failure = Some(e.to_string()),
    })
    .map_err(|e| e.to_string())?;
    match failure {
        Some(e) => Err(e),
        None => Ok(t),
    }
}

fn table_text(t: &Result<Table, String>) -> String {
    match t {
        Ok(t) => format!(
            "{} services, {} real servers, {} complete",
            t.services, t.real_servers, t.complete
        ),
        Err(e) => format!("not read: {e}"),
    }
}

// ------------------------------------------------------ CPU and memory

/// A process's parent and CPU ticks (`utime + stime + cutime + cstime`).
fn proc_stat(pid: u32) -> Option<(u32, u64)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // After the command name, which may hold spaces and parentheses.
    let rest = &s[s.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ppid = f.get(1)?.parse().ok()?;
    let ticks = f
        .get(11..15)?
        .iter()
        .map(|v| v.parse::<u64>().ok())
        .sum::<Option<u64>>()?;
    Some((ppid, ticks))
}

/// `VmHWM` in KiB.
fn vm_hwm_kib(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// `pid` and every live process below it.
fn process_tree(pid: u32) -> Vec<u32> {
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for e in dir.flatten() {
            if let Some(p) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok())
                && let Some((ppid, _)) = proc_stat(p)
            {
                children.entry(ppid).or_default().push(p);
            }
        }
    }
    let mut tree = vec![pid];
    let mut i = 0;
    while i < tree.len() {
        if let Some(c) = children.get(&tree[i]) {
            tree.extend(c);
        }
        i += 1;
    }
    tree
}

/// A daemon's processes at one moment.
#[derive(Clone, Copy)]
struct Usage {
    ticks: u64,
    hwm_kib: u64,
    processes: usize,
    /// Nanoseconds its threads have waited, runnable, for a CPU.
    run_wait_ns: u64,
}

fn usage(pid: u32) -> Usage {
    let tree = process_tree(pid);
    let mut u = Usage {
        ticks: 0,
        hwm_kib: 0,
        processes: 0,
        run_wait_ns: 0,
    };
    for p in tree {
        if let Some((_, t)) = proc_stat(p) {
            u.ticks += t;
            u.hwm_kib += vm_hwm_kib(p).unwrap_or(0);
            u.processes += 1;
            u.run_wait_ns += run_wait_ns(p);
        }
    }
    u
}

/// The time every thread of `pid` has spent runnable but waiting for a
/// CPU (the second field of `/proc/PID/task/TID/schedstat`), in ns.
fn run_wait_ns(pid: u32) -> u64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .sum()
}

/// The bench process's own CPU ticks (not its daemons': they are its
/// children, but running ones are not in its `cutime`).
fn own_ticks(pid: u32) -> u64 {
    proc_stat(pid).map_or(0, |(_, t)| t)
}

/// The whole guest's CPU counters: (busy, all) in ticks.
fn guest_cpu() -> (u64, u64) {
    let s = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let v: Vec<u64> = s
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    let all: u64 = v.iter().take(8).sum();
    let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
    (all - idle, all)
}

// ------------------------------------------------------------- a round

/// One daemon over one window.
#[derive(Clone, Copy)]
struct Measured {
    cpu_s: f64,
    hwm_kib: u64,
    processes: usize,
    checks: u64,
    window_s: f64,
    /// Thread-seconds spent runnable but waiting for a CPU in the window.
    run_wait_s: f64,
    /// Seconds from its start until its table was complete.
    table_s: f64,
    /// The table after the window.
    end: Option<Table>,
}

impl Measured {
    fn share(&self) -> f64 {
        100.0 * self.cpu_s / self.window_s
    }

    fn mib(&self) -> f64 {
        self.hwm_kib as f64 / 1024.0
    }

    fn checks_per_s(&self) -> f64 {
        self.checks as f64 / self.window_s
    }

    /// CPU microseconds per check.
    fn cost(&self) -> f64 {
        self.cpu_s * 1e6 / self.checks.max(1) as f64
    }

    /// Runnable but waiting for a CPU, % of the window (summed over
    /// threads, so a daemon with several busy threads can pass 100%).
    fn starved(&self) -> f64 {
        100.0 * self.run_wait_s / self.window_s
    }
}

struct Round {
    first: Side,
    sides: [Measured; 2],
    /// The guest's CPU use over the window, % of all its vCPUs.
    guest_busy: f64,
    /// The bench process's CPU (mostly the listeners), % of one core.
    bench_share: f64,
    accept_errors: u64,
}

fn round(r: usize, setup: &Setup, conf: &Path, dir: &Path) -> Round {
    let first = if r.is_multiple_of(2) {
        Side::Lite
    } else {
        Side::Keepalived
    };
    let ns = Side::BOTH.map(|s| Netns::new(s, r));
    let listeners = [Listeners::start(&ns[0]), Listeners::start(&ns[1])];
    let mut started = [None, None];
    for s in [
        first,
        if first == Side::Lite {
            Side::Keepalived
        } else {
            Side::Lite
        },
    ] {
        started[s as usize] = Some((
            Daemon::start(s, setup, &ns[s as usize], conf, dir),
            Instant::now(),
        ));
    }
    let [Some((lite, lite_t0)), Some((ka, ka_t0))] = started else {
        unreachable!("both started")
    };
    let mut daemons = [lite, ka];
    let t0 = [lite_t0, ka_t0];

    // Both tables complete before anything is measured.
    let mut table_s = [None, None];
    let wait = Instant::now();
    loop {
        for d in &mut daemons {
            d.check_running();
        }
        let tables = [read_table(&ns[0], setup.vs), read_table(&ns[1], setup.vs)];
        for s in Side::BOTH {
            let i = s as usize;
            if table_s[i].is_none()
                && let Ok(t) = &tables[i]
                && t.full(setup.vs)
            {
                table_s[i] = Some(t0[i].elapsed().as_secs_f64());
            }
        }
        if table_s.iter().all(Option::is_some) {
            break;
        }
        if wait.elapsed() > TABLE_DEADLINE {
            panic!(
                "round {}: the tables are not complete after {TABLE_DEADLINE:?}:\n\
                 keepalived-lite: {}\nkeepalived: {}\n\
                 keepalived-lite's last lines:\n{}\nkeepalived's last lines:\n{}",
                r + 1,
                table_text(&tables[0]),
                table_text(&tables[1]),
                daemons[0].tail(20),
                daemons[1].tail(20)
            );
        }
        std::thread::sleep(POLL);
    }
    let table_s = table_s.map(|t| t.expect("complete"));
    println!(
        "round {}: tables complete ({} x {REAL_SERVERS}) {:.1} s after keepalived-lite's start, \
         {:.1} s after keepalived's",
        r + 1,
        setup.vs,
        table_s[0],
        table_s[1]
    );

    std::thread::sleep(Duration::from_secs(setup.settle));
    for d in &mut daemons {
        d.check_running();
    }
    for s in Side::BOTH {
        let t = read_table(&ns[s as usize], setup.vs);
        println!(
            "round {}: after {} s of checks, {}'s table: {}",
            r + 1,
            setup.settle,
            s.name(),
            table_text(&t)
        );
    }

    // The window.
    let clk = rustix::param::clock_ticks_per_second() as f64;
    let self_pid = std::process::id();
    let (g0, self0) = (guest_cpu(), own_ticks(self_pid));
    let u0 = [usage(daemons[0].pid()), usage(daemons[1].pid())];
    let a0 = [listeners[0].accepted(), listeners[1].accepted()];
    let start = Instant::now();
    let end_at = start + Duration::from_secs(setup.secs);
    while Instant::now() < end_at {
        std::thread::sleep(
            end_at
                .saturating_duration_since(Instant::now())
                .min(Duration::from_secs(1)),
        );
        for d in &mut daemons {
            d.check_running();
        }
    }
    let u1 = [usage(daemons[0].pid()), usage(daemons[1].pid())];
    let a1 = [listeners[0].accepted(), listeners[1].accepted()];
    let window_s = start.elapsed().as_secs_f64();
    let (g1, self1) = (guest_cpu(), own_ticks(self_pid));

    let end = [read_table(&ns[0], setup.vs), read_table(&ns[1], setup.vs)];
    let sides = Side::BOTH.map(|s| {
        let i = s as usize;
        let m = Measured {
            cpu_s: u1[i].ticks.saturating_sub(u0[i].ticks) as f64 / clk,
            hwm_kib: u1[i].hwm_kib,
            processes: u1[i].processes,
            checks: a1[i] - a0[i],
            window_s,
            run_wait_s: u1[i].run_wait_ns.saturating_sub(u0[i].run_wait_ns) as f64 / 1e9,
            table_s: table_s[i],
            end: end[i].as_ref().ok().copied(),
        };
        assert!(
            m.checks > 0,
            "round {}: {} made no checks in {window_s:.1} s; its last lines:\n{}",
            r + 1,
            s.name(),
            daemons[i].tail(20)
        );
        if !end[i].as_ref().is_ok_and(|t| t.full(setup.vs)) {
            println!(
                "round {}: {}'s table after the window: {}; its last lines:\n{}",
                r + 1,
                s.name(),
                table_text(&end[i]),
                daemons[i].tail(10)
            );
        }
        m
    });

    // Both stopped at once.
    for (s, stopped) in Side::BOTH.iter().zip(stop_both(&mut daemons)) {
        match stopped {
            Ok((status, secs)) => println!(
                "round {}: {} exited ({status}) {secs:.1} s after SIGTERM",
                r + 1,
                s.name()
            ),
            Err(e) => panic!("round {}: {e}", r + 1),
        }
    }
    let accept_errors = listeners
        .iter()
        .map(|l| l.errors.load(Ordering::Relaxed))
        .sum();
    let busy = (g1.0 - g0.0) as f64 / (g1.1 - g0.1).max(1) as f64;
    Round {
        first,
        sides,
        guest_busy: 100.0 * busy,
        bench_share: 100.0 * self1.saturating_sub(self0) as f64 / clk / window_s,
        accept_errors,
    }
}

// ------------------------------------------------------------- the report

fn summary(v: &[f64]) -> String {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    let median = if v.len() % 2 == 1 {
        v[v.len() / 2]
    } else {
        (v[v.len() / 2 - 1] + v[v.len() / 2]) / 2.0
    };
    format!("{median:.2} ({:.2}-{:.2})", v[0], v[v.len() - 1])
}

fn report(setup: &Setup, rounds: &[Round]) -> String {
    let mut o = String::new();
    let asked = setup.vs * REAL_SERVERS;
    let _ = writeln!(
        o,
        "keepalived-lite / keepalived, {} x {REAL_SERVERS} (TCP_CHECK, delay_loop 1: {asked} checks/s asked of each), \
         {} s windows, {} round(s); kernel {}",
        setup.vs,
        setup.secs,
        rounds.len(),
        std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .unwrap_or_default()
            .trim()
    );
    let _ = writeln!(
        o,
        "\n| round | daemon | started | table complete after | CPU s | CPU, % of one core | peak memory (VmHWM) | checks/s | CPU µs per check | waiting for a CPU | real servers in the table after |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
    );
    for (i, r) in rounds.iter().enumerate() {
        for s in Side::BOTH {
            let m = &r.sides[s as usize];
            let procs = if m.processes == 1 {
                String::new()
            } else {
                format!(" ({} processes)", m.processes)
            };
            let _ = writeln!(
                o,
                "| {} | {} | {} | {:.1} s | {:.1} | {:.1}% | {:.1} MiB{procs} | {:.0} | {:.0} | {:.0}% | {} |",
                i + 1,
                s.name(),
                if r.first == s { "first" } else { "second" },
                m.table_s,
                m.cpu_s,
                m.share(),
                m.mib(),
                m.checks_per_s(),
                m.cost(),
                m.starved(),
                m.end.map_or_else(
                    || "not read".to_owned(),
                    |t| format!("{} of {asked}", t.real_servers)
                ),
            );
        }
    }
    let ratio = |f: fn(&Measured) -> f64| -> Vec<f64> {
        rounds
            .iter()
            .map(|r| f(&r.sides[0]) / f(&r.sides[1]))
            .collect()
    };
    let (cpu, cost, mem, rate) = (
        ratio(|m| m.cpu_s),
        ratio(Measured::cost),
        ratio(Measured::mib),
        ratio(Measured::checks_per_s),
    );
    let _ = writeln!(
        o,
        "\n| round | CPU | CPU per check | peak memory | checks/s | guest CPU busy (of all vCPUs) | bench's listeners, % of one core | accept errors |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- |"
    );
    for (i, r) in rounds.iter().enumerate() {
        let _ = writeln!(
            o,
            "| {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.0}% | {:.1}% | {} |",
            i + 1,
            cpu[i],
            cost[i],
            mem[i],
            rate[i],
            r.guest_busy,
            r.bench_share,
            r.accept_errors
        );
    }
    let _ = writeln!(
        o,
        "\nkeepalived-lite / keepalived, median (min-max) over {} round(s): CPU {}, CPU per check {}, \
         peak memory {}, checks/s {}",
        rounds.len(),
        summary(&cpu),
        summary(&cost),
        summary(&mem),
        summary(&rate)
    );
    let _ = writeln!(
        o,
        "keepalived's figures are its two processes (parent and checker child) summed; \
         keepalived-lite is one process"
    );
    o
}

fn main() {
    // The cargo runner counts a binary's cases with `--list`.
    if std::env::args().any(|a| a == "--list") {
        println!("kernel_healthchecks: bench");
        return;
    }
    // `cargo bench` passes `--bench`; without it (`cargo test --benches`,
    // CI's test mode on every kernel) one short round at a small size checks
    // that both daemons fill their tables and make checks.
    let measuring = std::env::args().any(|a| a == "--bench");
    let setup = Setup {
        vs: env_usize(
            "IPVSCTL_BENCH_KEEPALIVED_VS",
            if measuring { 1000 } else { 20 },
        ),
        secs: env_usize(
            "IPVSCTL_BENCH_KEEPALIVED_SECS",
            if measuring { 60 } else { 5 },
        ) as u64,
        settle: env_usize(
            "IPVSCTL_BENCH_KEEPALIVED_SETTLE",
            if measuring { 10 } else { 2 },
        ) as u64,
        rounds: env_usize(
            "IPVSCTL_BENCH_KEEPALIVED_ROUNDS",
            if measuring { 2 } else { 1 },
        ),
        programs: [lite_program(measuring), keepalived::reference_program()],
        extra: [
            match std::env::var("IPVSCTL_BENCH_KEEPALIVED_THREADS") {
                Ok(n) => vec![format!("--threads={n}")],
                Err(_) => Vec::new(),
            },
            Vec::new(),
        ],
    };
    assert!(
        (1..=62_500).contains(&setup.vs) && setup.secs >= 1 && setup.rounds >= 1,
        "IPVSCTL_BENCH_KEEPALIVED_VS from 1 to 62,500; _SECS and _ROUNDS at least 1"
    );
    if cfg!(debug_assertions) {
        println!("unoptimized build (test mode): the figures below say little about speed");
    }
    // Kernels before 5.16 do not load ip_vs when the IPVS family is asked
    // for (docs/kernel-notes.md); load it as ipvsadm does, and the
    // scheduler before any namespace is deleted. Failure is harmless where
    // they are built in or already loaded.
    for module in ["ip_vs", "ip_vs_rr"] {
        let _ = Command::new("modprobe")
            .arg(module)
            .stderr(Stdio::null())
            .status();
    }
    // keepalived keeps files under /run/keepalived.
    let _ = std::fs::create_dir_all("/run/keepalived");
    for s in Side::BOTH {
        let out = Command::new(&setup.programs[s as usize])
            .arg("--version")
            .output()
            .expect("--version");
        let text = String::from_utf8_lossy(if out.stdout.is_empty() {
            &out.stderr
        } else {
            &out.stdout
        })
        .lines()
        .next()
        .unwrap_or_default()
        .to_owned();
        println!(
            "{}: {} ({text})",
            s.name(),
            setup.programs[s as usize].display()
        );
    }
    let dir = WorkDir::new();
    let conf = dir.0.join("keepalived.conf");
    std::fs::write(&conf, config(setup.vs)).expect("the configuration file");
    let start = Instant::now();
    let mut rounds = Vec::new();
    for r in 0..setup.rounds {
        rounds.push(round(r, &setup, &conf, &dir.0));
    }
    println!("\n{}", report(&setup, &rounds));
    println!(
        "kernel_healthchecks: {:.1} s in all",
        start.elapsed().as_secs_f64()
    );
}
