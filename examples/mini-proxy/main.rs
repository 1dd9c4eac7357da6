//! mini-proxy: a small node agent on ipvsctl's public API, shaped like the
//! IPVS part of a service proxy.
//!
//! ```text
//! mini-proxy --config FILE [--owned FILE [--owned-start-over]] [--netns NAME] [--device ipvs0]
//!            [--period SECS] [--max-drain SECS] [--keep-weights] [--conntrack-cleanup]
//!            [--cleanup] [--once]
//! ```
//!
//! * checks the kernel modules at start and exits with the check's
//!   explanation when IPVS is not usable;
//! * sets the IPVS sysctls a proxy depends on at start, as kube-proxy does
//!   (`sysctl.rs`), with strict ARP when the file says `"strict_arp": true`;
//! * reads the desired state from FILE (JSON, see `config.rs`), makes the
//!   virtual IPs exactly the addresses of a dummy device (`--device`, default
//!   `ipvs0`; created if missing, a removed service's VIP goes with it) and
//!   expands NodePort services over the node IPs from `ipvsctl::nodeips`,
//!   excluding that device;
//! * syncs with `ipvsctl::sync::Syncer` (owned services only, graceful
//!   termination for removed endpoints) at start, whenever FILE changes
//!   (checked every 200 ms), and every `--period` seconds (a full verify,
//!   which also repairs drift); one log line per sync, and one per
//!   conflict (a desired service that exists and is not the proxy's: left
//!   alone);
//! * with `--max-drain SECS`, a removed endpoint drains at weight 0 for at
//!   most SECS seconds: the first sync after that deletes it even with
//!   connections open (without it, it drains until idle); one log line per
//!   drain ended that way;
//! * with `--keep-weights`, the weights of real servers that exist are left
//!   to a health checker (keepalived, an operator's `ipvsadm -e`): the file's
//!   weight is used only when the proxy adds a real server, and for one it
//!   set to 0 to drain that comes back;
//! * with `--conntrack-cleanup`, deletes the conntrack entries of every UDP
//!   and SCTP endpoint and service it removes, after the IPVS change (as
//!   kube-proxy does with `conntrack -D`), over ctnetlink; one log line per
//!   sync that cleaned;
//! * with `--owned FILE`, keeps its ownership ledger in FILE
//!   (`ipvsctl::sync::FileLedger`), written ahead of every service it
//!   creates or deletes, so a restarted proxy, even one killed in the middle
//!   of a sync, manages the services its previous run created and nothing
//!   else; a missing FILE is a first start, a damaged one stops the proxy
//!   until `--owned-start-over` moves it aside; without `--owned`, a
//!   restarted proxy reports its old services as conflicts and leaves them
//!   alone;
//! * on SIGTERM or SIGINT exits cleanly; with `--cleanup` it first deletes
//!   the services it owns, and only those (a sync to nothing, so the ledger
//!   records it), and the VIPs on its device.
//!
//! It runs no external program: VIPs over rtnetlink (`ipvsctl::vip`),
//! sysctls through `ipvsctl::sysctl`, IPVS over generic netlink.
//!
//! Run with `cargo run --features serde --example mini-proxy -- --config state.json`.

mod config;
mod sysctl;

use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

use ipvsctl::kmod;
use ipvsctl::nodeips::{self, Options};
use ipvsctl::sync::{
    DesiredState, FileLedger, Ledger, LedgerFileError, SyncOptions, SyncReport, Syncer, Verify,
};
use ipvsctl::sysctl::Sysctls;
use ipvsctl::vip::{VipDevice, VipReport};
use ipvsctl::{Handle, HandleOptions, NetNs, PinnedNetNs};

use config::Config;

struct Args {
    config: PathBuf,
    netns: Option<String>,
    device: String,
    period: Duration,
    owned: Option<PathBuf>,
    start_over: bool,
    cleanup: bool,
    once: bool,
    max_drain: Option<Duration>,
    keep_weights: bool,
    conntrack_cleanup: bool,
}

const USAGE: &str = "\
usage: mini-proxy --config FILE [options]

  --config FILE        the desired state (JSON)
  --owned FILE         keep the ownership ledger in FILE (survives restarts)
  --owned-start-over   move a damaged FILE aside and start with an empty ledger
  --netns NAME         work in the named network namespace
  --device NAME        the dummy device that holds the VIPs (default ipvs0)
  --period SECS        seconds between full verifying syncs (default 30)
  --max-drain SECS     a removed endpoint drains at weight 0 for at most SECS
                       seconds, then is deleted even with connections open
                       (default: until it has no connections)
  --keep-weights       leave the weights of existing real servers to a health
                       checker; the file's weight is used only when a real
                       server is added (or comes back after the proxy drained it)
  --conntrack-cleanup  delete the conntrack entries of removed UDP and SCTP
                       endpoints and services after each sync
  --cleanup            on SIGTERM/SIGINT, delete the services and VIPs it owns
  --once               sync once and exit
  --help               this text
";

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        config: PathBuf::new(),
        netns: None,
        device: "ipvs0".into(),
        period: Duration::from_secs(30),
        owned: None,
        start_over: false,
        cleanup: false,
        once: false,
        max_drain: None,
        keep_weights: false,
        conntrack_cleanup: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = |name: &str| it.next().ok_or_else(|| format!("{name} needs a value"));
        match a.as_str() {
            "--config" => args.config = value("--config")?.into(),
            "--netns" => args.netns = Some(value("--netns")?),
            "--owned" => args.owned = Some(value("--owned")?.into()),
            "--device" => args.device = value("--device")?,
            "--period" => {
                let v = value("--period")?;
                let secs: u64 = v
                    .parse()
                    .map_err(|_| format!("--period: {v:?} is not a number of seconds"))?;
                args.period = Duration::from_secs(secs.max(1));
            }
            "--max-drain" => {
                let v = value("--max-drain")?;
                let secs: u64 = v
                    .parse()
                    .map_err(|_| format!("--max-drain: {v:?} is not a number of seconds"))?;
                args.max_drain = Some(Duration::from_secs(secs));
            }
            "--keep-weights" => args.keep_weights = true,
            "--conntrack-cleanup" => args.conntrack_cleanup = true,
            "--help" | "-h" => {
                print!("{USAGE}");
                std::process::exit(0);
            }
            "--owned-start-over" => args.start_over = true,
            "--cleanup" => args.cleanup = true,
            "--once" => args.once = true,
            other => return Err(format!("unknown argument {other:?} (see --help)")),
        }
    }
    if args.config.as_os_str().is_empty() {
        return Err("--config FILE is required".into());
    }
    if args.start_over && args.owned.is_none() {
        return Err("--owned-start-over needs --owned FILE".into());
    }
    Ok(args)
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mini-proxy: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Makes the device's addresses exactly the configured VIPs; one log line
/// when something changed, one per refused change.
fn bind_vips(vips: &VipDevice, cfg: &Config) -> Result<(), String> {
    let report = vips
        .converge(cfg.vips())
        .map_err(|e| format!("VIPs: {e}"))?;
    log_vips(&report);
    Ok(())
}

fn log_vips(r: &VipReport) {
    if r.changed() || !r.is_ok() {
        let list = |nets: &[ipnetwork::IpNetwork]| {
            nets.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(" ")
        };
        println!(
            "vips on {}{}: +[{}] -[{}] ={}, {} failed",
            r.device,
            if r.created { " (created)" } else { "" },
            list(&r.added),
            list(&r.removed),
            r.unchanged,
            r.failed.len()
        );
    }
    for f in &r.failed {
        println!("  failed: {f}");
    }
}

/// Node IPs for NodePort services: every up interface but the VIP device
/// (and kube-proxy's `kube-ipvs0`, which `nodeips` skips by default).
fn node_ips(args: &Args, ns: &PinnedNetNs) -> Result<Vec<IpAddr>, String> {
    let opts = Options::new()
        .exclude(args.device.clone())
        .netns(ns.clone());
    nodeips::node_ip_addrs(&opts).map_err(|e| format!("node IPs: {e}"))
}

/// One line per sync.
fn log_sync(why: &str, r: &SyncReport, took: Duration) {
    println!(
        "sync ({why}): services +{} ~{} -{} ={}, destinations +{} ~{} -{} ={}, draining {}, \
         {} writes, {} reads, {} failed, {:.1} ms",
        r.services.added,
        r.services.updated,
        r.services.deleted,
        r.services.unchanged,
        r.destinations.added,
        r.destinations.updated,
        r.destinations.deleted,
        r.destinations.unchanged,
        r.draining,
        r.writes_sent,
        r.reads_sent,
        r.failed.len() + usize::from(r.aborted.is_some()) + r.after_writes.len(),
        took.as_secs_f64() * 1e3
    );
    for c in &r.conflicts {
        println!(
            "  conflict: {:?} exists and is not ours ({:?}): left alone",
            c.key, c.reason
        );
    }
    for (key, server) in &r.drains_ended_at_deadline {
        println!("  drain of {server} in {key} ended at its deadline, connections still open");
    }
    for f in r.root_failures() {
        println!("  failed: {:?}: {}", f.write, f.error);
    }
    if let Some(e) = &r.aborted {
        println!("  failed: {e}");
    }
    for e in &r.after_writes {
        println!("  failed after the writes: {e}");
    }
    if let Some(c) = &r.conntrack {
        match &c.result {
            Ok(d) => println!(
                "  conntrack: {} selections, {} entries found, {} deleted, {} already gone, {} failed",
                c.filters.len(),
                d.total.found,
                d.total.deleted,
                d.total.already_gone,
                d.total.failed
            ),
            Err(e) => println!("  conntrack: {} selections: {e}", c.filters.len()),
        }
    }
}

/// Reads the file, binds the VIPs, expands NodePorts and syncs.
fn sync_once(
    args: &Args,
    ns: &PinnedNetNs,
    vips: &VipDevice,
    syncer: &mut Syncer<Arc<Handle>>,
    why: &str,
    verify: Verify,
) -> Result<(), String> {
    let cfg = Config::load(&args.config)?;
    bind_vips(vips, &cfg)?;
    let nodes = if cfg.services.iter().any(|s| s.node_port.is_some()) {
        node_ips(args, ns)?
    } else {
        Vec::new()
    };
    let desired = cfg.desired(&nodes)?;
    let start = Instant::now();
    let report = syncer
        .sync(&desired, verify)
        .map_err(|e| format!("sync: {e}"))?;
    log_sync(why, &report, start.elapsed());
    Ok(())
}

/// A syncer resumed from the ledger in `--owned FILE` and saving into it
/// (a first start when the file does not exist), or one without a ledger
/// file.
fn syncer(
    args: &Args,
    handle: &Arc<Handle>,
    options: SyncOptions,
) -> Result<Syncer<Arc<Handle>>, String> {
    let syncer = Syncer::with_options(Arc::clone(handle), options);
    let Some(path) = &args.owned else {
        return Ok(syncer);
    };
    let (store, ledger) = if args.start_over {
        let store = FileLedger::start_over(path).map_err(|e| format!("--owned: {e}"))?;
        println!(
            "owned: started over with an empty ledger in {}",
            path.display()
        );
        (store, Ledger::new())
    } else {
        match FileLedger::open(path) {
            Ok((store, ledger)) => {
                println!("owned: {} entries in {}", ledger.len(), path.display());
                (store, ledger)
            }
            Err(LedgerFileError::Missing { .. }) => {
                let store = FileLedger::create(path).map_err(|e| format!("--owned: {e}"))?;
                println!("owned: a new ledger in {}", path.display());
                (store, Ledger::new())
            }
            Err(e) => return Err(format!("--owned: {e} (or run with --owned-start-over)")),
        }
    };
    Ok(syncer.with_ledger(ledger, store))
}

/// What identifies a version of the file.
fn stamp(args: &Args) -> Option<(SystemTime, u64)> {
    let m = std::fs::metadata(&args.config).ok()?;
    Some((m.modified().ok()?, m.len()))
}

fn run() -> Result<(), String> {
    let args = parse_args()?;

    // Modules first: a proxy that cannot program IPVS must say why, loudly.
    let diagnosis = kmod::diagnose();
    if !diagnosis.report.usability().usable {
        return Err(format!("IPVS is not usable on this node:\n{diagnosis}"));
    }

    let ns = match &args.netns {
        Some(name) => NetNs::named(name.clone()),
        None => NetNs::Current,
    };
    let handle = Arc::new(
        Handle::open(&ns, &HandleOptions::new()).map_err(|e| format!("open IPVS handle: {e}"))?,
    );
    // From here on, everything works in the namespace the handle pinned.
    let ns = handle.netns().clone();
    let vips = VipDevice::new(args.device.clone())
        .map_err(|e| format!("--device: {e}"))?
        .netns(ns.clone());
    // ip_vs is loaded now (the handle found its family): its sysctls exist.
    let strict_arp = Config::load(&args.config)?.strict_arp;
    for line in sysctl::prepare(&Sysctls::new().netns(ns.clone()), strict_arp)? {
        println!("{line}");
    }
    let mut options = SyncOptions::default();
    options.plan.graceful_termination = true;
    options.plan.max_drain = args.max_drain;
    options.plan.keep_weights = args.keep_weights;
    options.conntrack_cleanup = args.conntrack_cleanup;
    let mut syncer = syncer(&args, &handle, options)?;

    let term = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(sig, Arc::clone(&term))
            .map_err(|e| format!("cannot handle signal {sig}: {e}"))?;
    }

    let mut seen = stamp(&args);
    sync_once(&args, &ns, &vips, &mut syncer, "start", Verify::Full)?;
    let mut last = Instant::now();
    while !args.once && !term.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(200));
        let now = stamp(&args);
        let result = if now != seen {
            seen = now;
            Some(sync_once(
                &args,
                &ns,
                &vips,
                &mut syncer,
                "file changed",
                Verify::Services,
            ))
        } else if last.elapsed() >= args.period {
            Some(sync_once(
                &args,
                &ns,
                &vips,
                &mut syncer,
                "period",
                Verify::Full,
            ))
        } else {
            None
        };
        if let Some(r) = result {
            last = Instant::now();
            // A bad file or a failed sync is logged; the last good state stays.
            if let Err(e) = r {
                println!("sync failed: {e}");
            }
        }
    }

    if args.cleanup {
        // A sync to nothing deletes exactly the owned services, and the
        // ledger records each delete.
        match syncer.sync(&DesiredState::new(), Verify::Services) {
            Ok(r) => {
                log_sync("cleanup", &r, Duration::ZERO);
                println!("exit: removed {} owned services", r.services.deleted);
            }
            Err(e) => println!("cleanup: {e}"),
        }
        match vips.converge([]) {
            Ok(r) => println!("exit: removed {} VIPs from {}", r.removed.len(), r.device),
            Err(e) => println!("cleanup: {e}"),
        }
    } else {
        println!("exit: services left in place");
    }
    Ok(())
}
