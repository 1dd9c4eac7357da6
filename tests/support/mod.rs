//! Support shared by the test binaries: mostly the kernel tests (`tests/kernel_*.rs`), and a scratch directory for host tests.
//!
//! Kernel tests need root and a kernel with IPVS. On a host without IPVS the
//! cargo runner (`scripts/cargo-runner`) runs these binaries inside a
//! throw-away QEMU guest (`scripts/vm-run`), so from a test's point of view it
//! is always root on a real kernel. Each test works in its own fresh network
//! namespace ([`TestNetns`]), so tests of one binary run in parallel and never
//! see each other's IPVS tables.
//!
//! Standard library and the crate itself only, so that every test binary can
//! `mod support;` it.
//! Each binary uses a subset of it, hence the module-wide `dead_code` allowance.
#![allow(dead_code)]

use std::ffi::OsStr;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{OnceLock, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// Orders exact table reads against changes in other namespaces.
///
/// An IPVS dump resumes at a position counted over the kernel's one service
/// table, which holds the services of every namespace. A service added in
/// another namespace while a dump is between two datagrams makes the dump
/// repeat an entry; one deleted makes it skip one (ipvsadm shows both; the
/// library drops repeats but cannot see skips). Tests that compare listings
/// byte for byte take [`exclusive_read`] around each read; everything that
/// changes a table while such tests run takes [`shared_change`]. Changes run
/// side by side; an exclusive read waits for them and they wait for it.
static TABLE_ORDER: RwLock<()> = RwLock::new(());

/// Held around a read that must see exactly this namespace's table: no other
/// test of this binary changes a table meanwhile. See [`TABLE_ORDER`].
pub fn exclusive_read() -> RwLockWriteGuard<'static, ()> {
    TABLE_ORDER.write().unwrap_or_else(PoisonError::into_inner)
}

/// Held around a change to a table, so that it never lands inside an
/// [`exclusive_read`]. See [`TABLE_ORDER`].
pub fn shared_change() -> RwLockReadGuard<'static, ()> {
    TABLE_ORDER.read().unwrap_or_else(PoisonError::into_inner)
}

/// A fresh, named network namespace (`ip netns add ipvsctl-t-<pid>-<n>`) with
/// `lo` up, deleted again on drop.
///
/// `lo` must be up before IPVS accepts destinations in a new namespace (the
/// kernel answers `EINVAL` otherwise).
#[derive(Debug)]
pub struct TestNetns {
    name: String,
    path: PathBuf,
    /// Made by [`TestNetns::with_ipvs`]: its table is flushed before the
    /// namespace goes (see `Drop`).
    ipvs: bool,
}

impl TestNetns {
    /// Creates the namespace and brings `lo` up in it. Panics with the
    /// command's output if either step fails.
    pub fn new() -> TestNetns {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "ipvsctl-t-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let mut add = Command::new(tool("ip"));
        add.args(["netns", "add", &name]);
        check(&mut add);
        // From here on Drop deletes the namespace, even if `lo up` fails.
        let ns = TestNetns {
            path: Path::new("/run/netns").join(&name),
            name,
            ipvs: false,
        };
        ns.run("ip", &["link", "set", "lo", "up"]);
        ns
    }

    /// Like [`TestNetns::new`], after [`require_ipvs`] has confirmed that IPVS
    /// answers in a namespace.
    pub fn with_ipvs() -> TestNetns {
        require_ipvs();
        let mut ns = TestNetns::new();
        ns.ipvs = true;
        ns
    }

    /// The name given to `ip netns add`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The namespace file, `/run/netns/NAME`.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A command that runs `program` inside the namespace (`ip netns exec`).
    pub fn command(&self, program: impl AsRef<OsStr>) -> Command {
        let mut c = Command::new(tool("ip"));
        c.args(["netns", "exec", &self.name])
            .arg(resolve(program.as_ref()));
        c
    }

    /// `program args` inside the namespace, ready to start: through
    /// [`TestNetns::command`], except that `ip` itself becomes `ip -n NAME
    /// args`, which `ip` documents as the same as `ip netns exec NAME ip
    /// args` (it switches the network namespace and mounts that namespace's
    /// /sys), in one process instead of two. Under QEMU's TCG every process
    /// start costs a tenth of a second or more, and the tests run `ip`
    /// hundreds of times.
    fn command_with(&self, program: &str, args: &[&str]) -> Command {
        let mut c = if program == "ip" {
            let mut c = Command::new(tool("ip"));
            c.args(["-n", &self.name]);
            c
        } else {
            self.command(program)
        };
        c.args(args);
        c
    }

    /// Runs `program args` inside the namespace and returns its stdout.
    /// Panics, showing the command, its status, stdout and stderr, unless it
    /// exits with status 0.
    pub fn run(&self, program: &str, args: &[&str]) -> String {
        check(&mut self.command_with(program, args))
    }

    /// Runs `ip -batch -` inside the namespace with `commands`, one `ip`
    /// command line each (without the leading `ip`), in order; one process
    /// for all of them. Stops at the first command that fails and panics,
    /// showing it (ip names the failing line), like [`TestNetns::run`].
    pub fn ip_batch(&self, commands: &[String]) -> String {
        let mut c = self.command_with("ip", &["-batch", "-"]);
        let script = commands.join("\n") + "\n";
        let out = feed(&mut c, &script);
        if !out.status.success() {
            panic!("{}\n--- commands ---\n{script}", failure(&c, &out));
        }
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Runs `program args` inside the namespace and returns its output,
    /// whatever the exit status.
    pub fn output(&self, program: &str, args: &[&str]) -> Output {
        let mut c = self.command_with(program, args);
        c.output()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", describe(&c)))
    }

    /// Runs `program args` inside the namespace; `Ok(stdout)` on status 0,
    /// else `Err` with the command, status and stderr.
    pub fn try_run(&self, program: &str, args: &[&str]) -> Result<String, String> {
        let mut c = self.command_with(program, args);
        let out = c
            .output()
            .map_err(|e| format!("cannot start {}: {e}", describe(&c)))?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(failure(&c, &out))
        }
    }

    /// `ipvsadm ARGS` inside the namespace, `args` split at whitespace
    /// (e.g. `"-A -t 192.0.2.1:80 -s rr"`); returns stdout, panics on failure.
    pub fn ipvsadm(&self, args: &str) -> String {
        let args: Vec<&str> = args.split_whitespace().collect();
        self.run("ipvsadm", &args)
    }

    /// Panics with a clear message unless IPVS answers inside this namespace.
    pub fn require_ipvs(&self) {
        print_kernel_once();
        if let Err(why) = ipvs_usable_in(self) {
            panic!("{}", ipvs_missing_message(&why));
        }
    }
}

/// A fresh namespace with IPVS ([`TestNetns::with_ipvs`]) and a handle opened
/// in it; the namespace goes when the returned value is dropped.
pub mod keepalived;
pub mod traffic;

pub fn netns_with_handle() -> (TestNetns, ipvsctl::Handle) {
    let ns = TestNetns::with_ipvs();
    let h = ipvsctl::Handle::open(
        &ipvsctl::NetNs::path(ns.path()),
        &ipvsctl::HandleOptions::new(),
    )
    .expect("open handle in test namespace");
    (ns, h)
}

impl Default for TestNetns {
    fn default() -> Self {
        TestNetns::new()
    }
}

impl Drop for TestNetns {
    fn drop(&mut self) {
        if self.ipvs {
            // The kernel empties a deleted namespace's table later, from a
            // work queue, outside any lock a test holds; emptied here, under
            // `shared_change`, it cannot skew another test's exact read.
            // (Started from a thread in the namespace rather than through
            // `ip netns exec`: one process start fewer; ipvsadm only talks
            // netlink.)
            let _change = shared_change();
            let mut clear = Command::new(tool("ipvsadm"));
            clear.arg("-C");
            let _ = ipvsctl::netlink::netns::run_in(&ipvsctl::NetNs::path(&self.path), || {
                clear.output()
            });
        }
        let out = Command::new(tool("ip"))
            .args(["netns", "delete", &self.name])
            .output();
        let failed = match &out {
            Ok(o) if o.status.success() => None,
            Ok(o) => Some(String::from_utf8_lossy(&o.stderr).trim().to_owned()),
            Err(e) => Some(e.to_string()),
        };
        if let Some(why) = failed {
            // Not a panic: a panic while unwinding would abort the test binary.
            let _ = writeln!(
                std::io::stderr(),
                "warning: could not delete network namespace {}: {why}",
                self.name
            );
        }
    }
}

/// Panics with a clear message unless IPVS is usable: running as root, and
/// IPVS answers in a fresh network namespace (after `modprobe ip_vs`, which
/// may fail harmlessly where ip_vs is built in or autoloads). Checked once per
/// test binary; prints the kernel release once, as
/// `kernel tests running against Linux <release>`.
pub fn require_ipvs() {
    static RESULT: OnceLock<Result<(), String>> = OnceLock::new();
    print_kernel_once();
    let result = RESULT.get_or_init(|| {
        if !is_root() {
            return Err(
                "not running as root (uid 0): IPVS needs CAP_NET_ADMIN in the initial \
                 user namespace; a rootless user namespace gets EPERM"
                    .to_owned(),
            );
        }
        let ns = TestNetns::new();
        ipvs_usable_in(&ns)
    });
    if let Err(why) = result {
        panic!("{}", ipvs_missing_message(why));
    }
}

/// The running kernel's release (`uname -r`), from `/proc/sys/kernel/osrelease`.
pub fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|e| format!("<unknown: {e}>"))
}

/// True when this process runs with effective uid 0.
pub fn is_root() -> bool {
    // "Uid:\treal\teffective\tsaved\tfs" in /proc/self/status.
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|ids| ids.split_whitespace().nth(1).map(|e| e == "0"))
        })
        .unwrap_or(false)
}

/// Prints `kernel tests running against Linux <release>` once per test
/// binary, straight to stderr so the test harness does not capture it.
pub fn print_kernel_once() {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        let _ = writeln!(
            std::io::stderr(),
            "kernel tests running against Linux {}",
            kernel_release()
        );
    });
}

/// Runs `cmd`; returns its stdout if it exits with status 0, else panics with
/// the command line, the status, stdout and stderr.
pub fn check(cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", describe(cmd)));
    if !out.status.success() {
        panic!("{}", failure(cmd, &out));
    }
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs `cmd` with `input` on its stdin and its stdout and stderr captured;
/// panics only if it cannot be started.
pub fn feed(cmd: &mut Command, input: &str) -> Output {
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", describe(cmd)));
    // Written whole before the output is read: the commands fed here print
    // little, and ip reads its batch as it goes.
    let mut stdin = child.stdin.take().expect("piped stdin");
    stdin
        .write_all(input.as_bytes())
        .unwrap_or_else(|e| panic!("write to {}: {e}", describe(cmd)));
    drop(stdin);
    child
        .wait_with_output()
        .unwrap_or_else(|e| panic!("wait for {}: {e}", describe(cmd)))
}

/// Runs `program args` in the test's own namespace; see [`check`].
pub fn run(program: &str, args: &[&str]) -> String {
    let mut c = Command::new(resolve(OsStr::new(program)));
    c.args(args);
    check(&mut c)
}

/// The path of a system tool: `name` itself if found in `PATH`, else
/// `/usr/sbin/name` or `/sbin/name` (root's tools are not always in a test
/// runner's `PATH`).
pub fn tool(name: &str) -> PathBuf {
    resolve(OsStr::new(name))
}

fn resolve(program: &OsStr) -> PathBuf {
    let p = Path::new(program);
    if p.components().count() > 1 {
        return p.to_path_buf();
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    let dirs = std::env::split_paths(&path).chain(
        ["/usr/local/sbin", "/usr/sbin", "/sbin", "/usr/bin", "/bin"]
            .iter()
            .map(PathBuf::from),
    );
    for dir in dirs {
        let candidate = dir.join(p);
        if candidate.is_file() {
            return candidate;
        }
    }
    p.to_path_buf()
}

/// Every scheduler and persistence-engine module a test may use.
const IPVS_MODULES: &[&str] = &[
    "ip_vs_rr",
    "ip_vs_wrr",
    "ip_vs_lc",
    "ip_vs_wlc",
    "ip_vs_fo",
    "ip_vs_ovf",
    "ip_vs_lblc",
    "ip_vs_lblcr",
    "ip_vs_dh",
    "ip_vs_sh",
    "ip_vs_mh",
    "ip_vs_sed",
    "ip_vs_nq",
    "ip_vs_twos",
    "ip_vs_pe_sip",
];

fn ipvs_usable_in(ns: &TestNetns) -> Result<(), String> {
    // Load ip_vs if it is a module; failure is fine if it is built in or the
    // kernel autoloads it on first use.
    let modprobe = Command::new(tool("modprobe")).arg("ip_vs").output();
    // Load every scheduler up front, never on first use. The kernel (6.1 and
    // 6.12) loads a missing scheduler while holding the IPVS mutex; lblc's
    // and lblcr's init register per-namespace state, which waits for any
    // namespace cleanup in progress, and that cleanup waits for the IPVS
    // mutex: a deadlock, hit when one test adds an lblc service while
    // another test's namespace goes (docs/kernel-notes.md). Missing modules (twos before 6.12) are fine.
    for m in IPVS_MODULES {
        let _ = Command::new(tool("modprobe")).arg(m).output();
    }
    let modprobe_note = match &modprobe {
        Ok(o) if o.status.success() => String::new(),
        Ok(o) => format!(
            "; `modprobe ip_vs` said: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        ),
        Err(e) => format!("; `modprobe ip_vs` could not run: {e}"),
    };
    match ns.try_run("cat", &["/proc/net/ip_vs"]) {
        Ok(_) => Ok(()),
        Err(_) => match ns.try_run("ipvsadm", &["-Ln"]) {
            Ok(_) => Ok(()),
            Err(why) => Err(format!(
                "/proc/net/ip_vs is missing in namespace {} and {why}{modprobe_note}",
                ns.name()
            )),
        },
    }
}

fn ipvs_missing_message(why: &str) -> String {
    format!(
        "IPVS is not usable on Linux {}: {why}\n\
         Kernel tests need root and a kernel with IPVS. Run them through cargo \
         (`cargo test --test kernel_NAME`): the runner in .cargo/config.toml boots \
         a QEMU guest with a Debian kernel when the host has no IPVS.",
        kernel_release()
    )
}

fn describe(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for a in cmd.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

fn failure(cmd: &Command, out: &Output) -> String {
    let mut s = format!("`{}` failed: {}", describe(cmd), out.status);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !stdout.trim().is_empty() {
        let _ = write!(s, "\n--- stdout ---\n{}", stdout.trim_end());
    }
    if !stderr.trim().is_empty() {
        let _ = write!(s, "\n--- stderr ---\n{}", stderr.trim_end());
    }
    s
}

/// The binary of example `name` from the same build profile as this test
/// (`target/<profile>/examples/NAME`); kernel tests that drive an example
/// need it built first (`cargo build --examples --all-features`, which
/// `scripts/test` runs).
pub fn example_binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let profile = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("test binary is in target/<profile>/deps");
    let path = profile.join("examples").join(name);
    assert!(
        path.is_file(),
        "{} is missing: build it first with `cargo build --examples --all-features` \
         (scripts/test does)",
        path.display()
    );
    path
}

/// A veth pair between `router` (device `dev`, address `r_addr/24`) and
/// `other` (device `eth0`, address `o_addr/24`, default route via the router).
pub fn link(router: &TestNetns, other: &TestNetns, dev: &str, r_addr: &str, o_addr: &str) {
    // One `ip -batch` per side: the same commands in the same order.
    other.ip_batch(&[
        format!(
            "link add eth0 type veth peer name {dev} netns {}",
            router.name()
        ),
        format!("addr add {o_addr}/24 dev eth0"),
        "link set eth0 up".to_owned(),
        format!("route add default via {r_addr}"),
    ]);
    router.ip_batch(&[
        format!("addr add {r_addr}/24 dev {dev}"),
        format!("link set {dev} up"),
    ]);
}

/// A fresh directory under the system temp dir (`ipvsctl-test-TAG-PID-N`),
/// removed on drop; for host tests that build fake trees and programs.
pub struct ScratchDir(pub PathBuf);

impl ScratchDir {
    pub fn new(tag: &str) -> Self {
        static N: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "ipvsctl-test-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        ScratchDir(dir)
    }

    /// Writes `text` to `rel` (parent directories made) and returns its path.
    pub fn write(&self, rel: &str, text: &str) -> PathBuf {
        let p = self.0.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, text).unwrap();
        p
    }

    /// An executable shell script at `rel` running `body`.
    pub fn script(&self, rel: &str, body: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt as _;
        let p = self.write(rel, &format!("#!/bin/sh\n{body}\n"));
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
