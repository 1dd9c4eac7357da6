//! Prints the node IPs of this machine (the addresses NodePort virtual
//! servers would be created on), one per line, then why each interface was
//! used or skipped.
//!
//! ```text
//! cargo run --example nodeips -- [--family 4|6|both] [--exclude IFNAME]...
//!     [--cidr CIDR]... [--loopback] [--link-local] [--skip-deprecated]
//!     [--require-running] [--netns NAME] [--quiet]
//! ```
//!
//! Exits 0 with node IPs, 1 when none was found (the reasons are printed),
//! 2 on a usage error, 3 when the dumps failed.

use std::process::ExitCode;

use ipvsctl::netlink::netns::NetNs;
use ipvsctl::nodeips::{self, NodeIpsError, Options};

const USAGE: &str = "usage: nodeips [--family 4|6|both] [--exclude IFNAME]... [--cidr CIDR]... \
[--loopback] [--link-local] [--skip-deprecated] [--require-running] [--netns NAME] [--quiet]";

struct Args {
    opts: Options,
    quiet: bool,
}

fn parse(mut args: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut opts = Options::new();
    let mut quiet = false;
    while let Some(arg) = args.next() {
        let mut value = |flag: &str| args.next().ok_or_else(|| format!("{flag} needs a value"));
        match arg.as_str() {
            "--family" => {
                opts = opts.family(value("--family")?.parse().map_err(|e| format!("{e}"))?);
            }
            "--exclude" => opts = opts.exclude(value("--exclude")?),
            "--cidr" => {
                let text = value("--cidr")?;
                let net = text.parse().map_err(|e| format!("--cidr {text}: {e}"))?;
                opts = opts.cidr(net);
            }
            "--netns" => {
                let name = value("--netns")?;
                let pinned = NetNs::named(&name)
                    .pin()
                    .map_err(|e| format!("--netns {name}: {e}"))?;
                opts = opts.netns(pinned);
            }
            "--loopback" => opts = opts.loopback(true),
            "--link-local" => opts = opts.link_local(true),
            "--skip-deprecated" => opts = opts.skip_deprecated(true),
            "--require-running" => opts = opts.require_running(true),
            "--quiet" | "-q" => quiet = true,
            "--help" | "-h" => return Err(String::new()),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(Args { opts, quiet })
}

fn main() -> ExitCode {
    let args = match parse(std::env::args().skip(1)) {
        Ok(args) => args,
        Err(msg) => {
            if !msg.is_empty() {
                eprintln!("nodeips: {msg}");
            }
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    let report = match nodeips::explain(&args.opts) {
        Ok(report) => report,
        Err(e) => {
            eprintln!("nodeips: {e}");
            return ExitCode::from(3);
        }
    };
    for ip in report.node_ips() {
        println!("{ip}");
    }
    if !args.quiet {
        eprintln!("--- interfaces considered:\n{report:#}");
    }
    match report.into_node_ips() {
        Ok(_) => ExitCode::SUCCESS,
        Err(e @ NodeIpsError::NoAddresses(_)) => {
            eprintln!("nodeips: {e}");
            ExitCode::from(1)
        }
        Err(e) => {
            eprintln!("nodeips: {e}");
            ExitCode::from(3)
        }
    }
}
