//! keepalived-lite: the load-balancing half of keepalived on ipvsctl. It
//! reads keepalived's own configuration language (`virtual_server`,
//! `virtual_server_group`, `real_server` with TCP_CHECK, HTTP_GET,
//! MISC_CHECK and UDP_CHECK, quorum, sorry servers, inhibit-on-failure),
//! health-checks every real server on a bounded pool of threads, and keeps
//! IPVS as keepalived would, through `ipvsctl::sync::Syncer`.
//!
//! ```text
//! keepalived-lite -n -l -f /etc/keepalived/keepalived.conf
//! keepalived-lite -t -f keepalived.conf            # check the file and exit
//! keepalived-lite -n -l -s lb -f keepalived.conf   # in network namespace "lb"
//! ```
//!
//! It takes keepalived's options where they mean the same, so a unit file or
//! a test can run either program with one command line. What it supports and
//! where it differs from keepalived: docs/examples.md.
//!
//! The parts: `config` reads the file into plain data with every default
//! resolved; `check` runs the checkers; `lvs` is keepalived's pool logic as
//! a pure state machine that says which servers are in each pool at which
//! weight; this file wires them to a syncer that owns only the services it
//! made.

mod check;
mod config;
mod log;
mod lvs;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use ipvsctl::model::Timeouts;
use ipvsctl::netlink::netns::run_in;
use ipvsctl::sync::{
    DesiredState, FileLedger, Ledger, LedgerFileError, SyncOptions, SyncReport, Syncer, Verify,
};
use ipvsctl::{Handle, HandleOptions, NetNs};

use check::machine::Transition;
use check::pool::{Job, Pool};
use config::Config;
use log::Log;
use lvs::{CheckerResult, Lvs};

const USAGE: &str = "\
usage: keepalived-lite [OPTIONS]

keepalived's options:
  -f, --use-file=FILE     configuration file (default /etc/keepalived/keepalived.conf)
  -n, --dont-fork         accepted: keepalived-lite always runs in the foreground
  -l, --log-console       log lines on standard error, each with its time
  -D, --log-detail        accepted
  -C, --check             accepted: keepalived-lite runs only the LVS half
  -t, --config-test[=FILE]
                          check the configuration and exit (0: good)
  -s, --namespace=NAME    run in network namespace NAME (/run/netns/NAME)
  -p, --pid=FILE          write the process id to FILE
  -c, --checkers_pid=FILE write the process id to FILE (one process does both)
  -h, --help              this text
  -v, --version           the version
Beyond keepalived:
  --threads=N             health checks run on N threads (default 4)
  --owned=FILE            remember the services this program made in FILE, so that
                          a restart after a crash takes them back (see docs/examples.md)
  --verify=SECONDS        every SECONDS, read the services back and repair what
                          others changed in them (default 0: never, as keepalived)
";

/// The command line.
#[derive(Debug)]
struct Options {
    file: PathBuf,
    console: bool,
    config_test: bool,
    namespace: Option<String>,
    pid_files: Vec<PathBuf>,
    threads: usize,
    owned: Option<PathBuf>,
    verify: Option<Duration>,
}

/// `--name=value`, `--name value`, `-x value` and `-xvalue`.
fn parse_args(args: Vec<String>) -> Result<Option<Options>, String> {
    let mut o = Options {
        file: PathBuf::from("/etc/keepalived/keepalived.conf"),
        console: false,
        config_test: false,
        namespace: None,
        pid_files: Vec::new(),
        threads: 4,
        owned: None,
        verify: None,
    };
    let mut it = args.into_iter().peekable();
    while let Some(arg) = it.next() {
        let (name, inline) = match arg.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n.to_string(), Some(v.to_string())),
            _ if arg.len() > 2 && arg.starts_with('-') && !arg.starts_with("--") => {
                (arg[..2].to_string(), Some(arg[2..].to_string()))
            }
            _ => (arg.clone(), None),
        };
        let mut value = |what: &str| -> Result<String, String> {
            match &inline {
                Some(v) => Ok(v.clone()),
                None => it.next().ok_or(format!("{what} needs a value")),
            }
        };
        match name.as_str() {
            "-f" | "--use-file" => o.file = PathBuf::from(value(&name)?),
            "-n" | "--dont-fork" | "-D" | "--log-detail" | "-C" | "--check" => {}
            "-l" | "--log-console" => o.console = true,
            "-t" | "--config-test" => {
                o.config_test = true;
                if let Some(f) = &inline
                    && !f.is_empty()
                {
                    o.file = PathBuf::from(f);
                }
            }
            "-s" | "--namespace" => o.namespace = Some(value(&name)?),
            "-p" | "--pid" | "-c" | "--checkers_pid" => o.pid_files.push(value(&name)?.into()),
            "-P" | "--vrrp" => {
                return Err(format!(
                    "{name}: keepalived-lite runs the LVS half only, not VRRP"
                ));
            }
            "--threads" => {
                o.threads = value(&name)?
                    .parse()
                    .ok()
                    .filter(|n| (1..=256).contains(n))
                    .ok_or("--threads: a number from 1 to 256")?
            }
            "--owned" => o.owned = Some(value(&name)?.into()),
            "--verify" => {
                let s: u64 = value(&name)?
                    .parse()
                    .map_err(|_| "--verify: whole seconds")?;
                o.verify = (s > 0).then(|| Duration::from_secs(s));
            }
            "-h" | "--help" => return Ok(None),
            "-v" | "--version" => {
                println!("keepalived-lite (ipvsctl {})", env!("CARGO_PKG_VERSION"));
                std::process::exit(0);
            }
            _ => return Err(format!("unknown option {arg}\n{USAGE}")),
        }
    }
    Ok(Some(o))
}

fn main() -> ExitCode {
    let o = match parse_args(std::env::args().skip(1).collect()) {
        Ok(Some(o)) => o,
        Ok(None) => {
            print!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("keepalived-lite: {e}");
            return ExitCode::from(2);
        }
    };
    let log = Log::new(o.console);
    // Everything, the checkers' threads and scripts included, runs in the
    // namespace: threads inherit the namespace of the thread that spawns
    // them.
    let ns = o.namespace.clone().map_or(NetNs::Current, NetNs::named);
    match run_in(&ns, || Ok(run(&o, log))) {
        Ok(code) => code,
        Err(e) => {
            log.line(&format!(
                "cannot enter namespace {}: {e}",
                o.namespace.as_deref().unwrap_or("")
            ));
            ExitCode::from(1)
        }
    }
}

fn run(o: &Options, log: Log) -> ExitCode {
    let config = match config::load(&o.file) {
        Ok(c) => c,
        Err(e) => {
            log.line(&format!("Configuration error: {e}"));
            return ExitCode::from(1);
        }
    };
    for n in &config.notices {
        log.line(&format!(
            "{}:{}: {} skipped: keepalived-lite runs the LVS half only",
            n.file.display(),
            n.line,
            n.keyword
        ));
    }
    if o.config_test {
        return ExitCode::SUCCESS;
    }
    log.line(&format!(
        "Starting keepalived-lite (ipvsctl {})",
        env!("CARGO_PKG_VERSION")
    ));
    for p in &o.pid_files {
        if let Err(e) = std::fs::write(p, format!("{}\n", std::process::id())) {
            log.line(&format!("cannot write pid file {}: {e}", p.display()));
        }
    }
    let code = match Daemon::start(o, &config, log) {
        Ok(mut d) => {
            let code = d.run(o, &config);
            d.stop(&config);
            code
        }
        Err(e) => {
            log.line(&e);
            ExitCode::from(1)
        }
    };
    for p in &o.pid_files {
        let _ = std::fs::remove_file(p);
    }
    code
}

/// The running program: the pools, the syncer and the checkers.
struct Daemon {
    log: Log,
    handle: Arc<Handle>,
    syncer: Syncer<Arc<Handle>>,
    lvs: Lvs,
    desired: DesiredState,
    /// The timeouts found at start, put back at exit (`lvs_timeouts`).
    old_timeouts: Option<Timeouts>,
    term: Arc<AtomicBool>,
    /// When to try again after a failed sync, and the wait that led there.
    retry: Option<(Instant, Duration)>,
}

impl Daemon {
    fn start(o: &Options, config: &Config, log: Log) -> Result<Daemon, String> {
        let term = Arc::new(AtomicBool::new(false));
        for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
            signal_hook::flag::register(sig, Arc::clone(&term))
                .map_err(|e| format!("cannot handle signal {sig}: {e}"))?;
        }
        let handle = Arc::new(
            Handle::open(&NetNs::Current, &HandleOptions::new())
                .map_err(|e| format!("IPVS: Can't initialize ipvs: {e}"))?,
        );
        if config.global.lvs_flush {
            handle.flush().map_err(|e| format!("lvs_flush: {e}"))?;
        }
        let mut old_timeouts = None;
        if let Some(t) = config.global.lvs_timeouts {
            old_timeouts = Some(
                handle
                    .timeouts()
                    .map_err(|e| format!("lvs_timeouts: {e}"))?,
            );
            let want = Timeouts::new(t.tcp, t.tcp_fin, t.udp);
            if let Err(e) = handle.set_timeouts(&want) {
                log.line(&format!("Failed to set ipvs timeouts: {e}"));
            }
        }
        let syncer = syncer(o, &handle, log)?;
        let (lvs, lines) = Lvs::start(config);
        log.lines(lines);
        let mut d = Daemon {
            log,
            handle,
            syncer,
            lvs,
            desired: DesiredState::new(),
            old_timeouts,
            term,
            retry: None,
        };
        for (service, dests) in d.lvs.table() {
            d.desired
                .upsert(service, dests)
                .map_err(|e| format!("virtual server: {e}"))?;
        }
        d.desired.clear_changes();
        d.sync("start", Verify::Services, false);
        Ok(d)
    }

    /// Runs the checkers until SIGTERM or SIGINT.
    fn run(&mut self, o: &Options, config: &Config) -> ExitCode {
        // Checker ids index `owners`: (virtual server, real server, checker).
        let mut owners = Vec::new();
        let mut jobs = Vec::new();
        for (v, vs) in config.virtual_servers.iter().enumerate() {
            for (r, rs) in vs.real_servers.iter().enumerate() {
                let label = lvs::label(vs, rs);
                for (c, conf) in rs.checkers.iter().enumerate() {
                    self.log.line(&format!(
                        "Activating healthchecker for service {} for VS {}",
                        label.checker(),
                        label.virtual_server
                    ));
                    jobs.push(Job {
                        id: owners.len(),
                        conf: conf.clone(),
                        label: label.clone(),
                    });
                    owners.push((v, r, c));
                }
            }
        }
        let (tx, updates) = mpsc::channel();
        let pool = match Pool::spawn(o.threads, jobs, tx) {
            Ok(p) => p,
            Err(e) => {
                self.log.line(&format!("cannot start the checkers: {e}"));
                return ExitCode::from(1);
            }
        };
        let mut last_verify = Instant::now();
        while !self.term.load(Ordering::Relaxed) {
            let mut dirty = BTreeSet::new();
            let first = updates.recv_timeout(Duration::from_millis(200));
            for (id, u) in first.into_iter().chain(updates.try_iter()) {
                let Some(&(vs, rs, checker)) = owners.get(id) else {
                    continue;
                };
                self.log.lines(u.lines);
                // keepalived applies a misc_dynamic weight before the
                // checker's new state.
                let mut lines = match u.weight {
                    Some(w) => self.lvs.dynamic_weight(vs, rs, w),
                    None => Vec::new(),
                };
                if let Some(t) = u.transition {
                    let up = t == Transition::Up;
                    lines.extend(self.lvs.checker(CheckerResult {
                        vs,
                        rs,
                        checker,
                        up,
                    }));
                }
                if !lines.is_empty() {
                    dirty.insert(vs);
                }
                self.log.lines(lines);
            }
            if !dirty.is_empty() {
                self.update(&dirty);
                self.sync("checks", Verify::None, true);
            } else if self.retry.is_some_and(|(at, _)| Instant::now() >= at) {
                self.sync("retry", Verify::Services, false);
            } else if o.verify.is_some_and(|p| last_verify.elapsed() >= p) {
                last_verify = Instant::now();
                self.sync("verify", Verify::Full, false);
            }
        }
        let stopped = pool.shutdown(Duration::from_secs(2));
        if stopped.detached > 0 {
            self.log.line(&format!(
                "{} checks still running at exit were left to time out",
                stopped.detached
            ));
        }
        ExitCode::SUCCESS
    }

    /// The desired entries of the changed virtual servers.
    fn update(&mut self, dirty: &BTreeSet<usize>) {
        let table = self.lvs.table();
        for &vs in dirty {
            for key in self.lvs.keys(vs) {
                if let Some((service, dests)) = table.iter().find(|(s, _)| s.key == *key)
                    && let Err(e) = self.desired.upsert(service.clone(), dests.clone())
                {
                    self.log.line(&format!("cannot use {key:?}: {e}"));
                }
            }
        }
    }

    /// Syncs; a sync that failed (not one that only found another
    /// program's service in the way) is tried again as a whole, after 1 s,
    /// then after twice as long each time up to 30 s.
    fn sync(&mut self, why: &str, verify: Verify, changes: bool) {
        let result = if changes {
            self.syncer.sync_changes(&mut self.desired, verify)
        } else {
            self.syncer.sync(&self.desired, verify)
        };
        let failed = match result {
            Ok(r) => {
                log_report(self.log, why, &r);
                !r.failed.is_empty() || r.aborted.is_some() || !r.after_writes.is_empty()
            }
            Err(e) => {
                self.log.line(&format!("IPVS sync ({why}) failed: {e}"));
                true
            }
        };
        self.retry = failed.then(|| {
            let wait = self.retry.map_or(Duration::from_secs(1), |(_, w)| {
                (w * 2).min(Duration::from_secs(30))
            });
            (Instant::now() + wait, wait)
        });
    }

    /// Takes out what this program made, as keepalived does at exit
    /// (`lvs_flush_onstop`: flushes the whole table instead).
    fn stop(&mut self, config: &Config) {
        self.log.lines(self.lvs.stop_log());
        if config.global.lvs_flush_onstop {
            if let Err(e) = self.handle.flush() {
                self.log.line(&format!("lvs_flush_onstop: {e}"));
            }
        } else {
            self.desired = DesiredState::new();
            self.sync("stop", Verify::Services, false);
        }
        if let Some(t) = &self.old_timeouts
            && let Err(e) = self.handle.set_timeouts(t)
        {
            self.log
                .line(&format!("Failed to restore ipvs timeouts: {e}"));
        }
        self.log.line("Stopped keepalived-lite");
    }
}

/// A syncer, with a ledger file when `--owned` is given: a first start when
/// the file does not exist, a refusal when it is damaged.
fn syncer(o: &Options, handle: &Arc<Handle>, log: Log) -> Result<Syncer<Arc<Handle>>, String> {
    let syncer = Syncer::with_options(Arc::clone(handle), SyncOptions::default());
    let Some(path) = &o.owned else {
        return Ok(syncer);
    };
    let (store, ledger) = match FileLedger::open(path) {
        Ok(opened) => opened,
        Err(LedgerFileError::Missing { .. }) => {
            let store = FileLedger::create(path).map_err(|e| format!("--owned: {e}"))?;
            log.line(&format!("owned: a new ledger in {}", path.display()));
            (store, Ledger::new())
        }
        Err(e) => return Err(format!("--owned: {e}")),
    };
    Ok(syncer.with_ledger(ledger, store))
}

/// What a sync could not do; nothing when all went as planned.
fn log_report(log: Log, why: &str, r: &SyncReport) {
    for c in &r.conflicts {
        log.line(&format!(
            "IPVS ({why}): {:?} is in the table and was not made by keepalived-lite: left alone ({:?})",
            c.key, c.reason
        ));
    }
    for f in r.root_failures() {
        log.line(&format!("IPVS ({why}): {:?} failed: {}", f.write, f.error));
    }
    if let Some(e) = &r.aborted {
        log.line(&format!("IPVS ({why}): {e}"));
    }
    for e in &r.after_writes {
        log.line(&format!("IPVS ({why}): after the writes: {e}"));
    }
}
