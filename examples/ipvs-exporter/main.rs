//! ipvs-exporter: IPVS metrics for Prometheus, a drop-in for node_exporter's
//! `ipvs` collector with the 64-bit counters of every service and real
//! server beside it.
//!
//! ```text
//! ipvs-exporter                                   # :9100, /metrics, its own namespace
//! ipvs-exporter --web.listen-address=127.0.0.1:9110 --netns=lb
//! ipvs-exporter --collector.ipvs.backend-labels=local_address,local_port,proto
//! ipvs-exporter --once                            # one scrape to stdout
//! ```
//!
//! The series and their labels are documented in `metrics.rs` and
//! docs/examples.md. One handle serves every scrape, and a scrape reads the
//! table once: one dump of the services, their real servers' dumps
//! pipelined, and `/proc/net/ip_vs_stats` for the namespace's totals.
//! Scrapes are answered one at a time.

mod metrics;
mod read;
mod serve;

use std::io::Write as _;
use std::process::ExitCode;

use ipvsctl::{Handle, HandleOptions, NetNs};

use metrics::{BackendLabels, Format};
use serve::Exporter;

const USAGE: &str = "\
usage: ipvs-exporter [OPTIONS]

  --web.listen-address=ADDR   address to listen on (default \":9100\", every address)
  --web.telemetry-path=PATH   path of the metrics (default \"/metrics\")
  --netns=NAME|PATH           read IPVS in this network namespace (a name under
                              /run/netns, or a path); default: the exporter's own
  --collector.ipvs.backend-labels=LIST
                              labels of the real-server series, comma-separated
                              (default: local_address,local_port,remote_address,
                              remote_port,proto,local_mark)
  --once                      write one scrape to stdout and exit
  -h, --help                  this text
";

/// The command line.
struct Options {
    listen: String,
    path: String,
    netns: NetNs,
    labels: BackendLabels,
    once: bool,
}

fn parse_args(args: impl Iterator<Item = String>) -> Result<Option<Options>, String> {
    let mut o = Options {
        listen: ":9100".into(),
        path: "/metrics".into(),
        netns: NetNs::Current,
        labels: BackendLabels::default(),
        once: false,
    };
    let mut args = args.peekable();
    while let Some(arg) = args.next() {
        let (name, inline) = match arg.split_once('=') {
            Some((n, v)) => (n.to_owned(), Some(v.to_owned())),
            None => (arg.clone(), None),
        };
        let mut value = || {
            inline
                .clone()
                .or_else(|| args.next())
                .ok_or_else(|| format!("{name} needs a value"))
        };
        match name.as_str() {
            "-h" | "--help" => return Ok(None),
            "--once" => o.once = true,
            "--web.listen-address" => o.listen = value()?,
            "--web.telemetry-path" => {
                o.path = value()?;
                if !o.path.starts_with('/') {
                    return Err(format!(
                        "--web.telemetry-path {:?}: must start with /",
                        o.path
                    ));
                }
            }
            "--netns" => {
                let v = value()?;
                o.netns = if v.contains('/') {
                    NetNs::path(v)
                } else {
                    NetNs::named(v)
                };
            }
            "--collector.ipvs.backend-labels" => {
                o.labels = BackendLabels::parse(&value()?)
                    .map_err(|e| format!("--collector.ipvs.backend-labels: {e}"))?;
            }
            _ => return Err(format!("unknown option {arg:?}")),
        }
    }
    Ok(Some(o))
}

/// Listens on `addr`. `:PORT` (every address, as node_exporter takes it)
/// is `[::]:PORT`, which on Linux takes IPv4 too, or `0.0.0.0:PORT` where
/// IPv6 is off.
fn listen(addr: &str) -> Result<(tiny_http::Server, String), String> {
    let Some(port) = addr.strip_prefix(':') else {
        return tiny_http::Server::http(addr)
            .map(|s| (s, addr.to_owned()))
            .map_err(|e| format!("cannot listen on {addr}: {e}"));
    };
    let dual = format!("[::]:{port}");
    match tiny_http::Server::http(&dual) {
        Ok(s) => Ok((s, dual)),
        Err(v6) => {
            let v4 = format!("0.0.0.0:{port}");
            tiny_http::Server::http(&v4)
                .map(|s| (s, v4))
                .map_err(|e| format!("cannot listen on {addr}: {v6}; nor on IPv4 alone: {e}"))
        }
    }
}

fn main() -> ExitCode {
    let o = match parse_args(std::env::args().skip(1)) {
        Ok(Some(o)) => o,
        Ok(None) => {
            print!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("ipvs-exporter: {e}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let handle = match Handle::open(&o.netns, &HandleOptions::new()) {
        Ok(h) => h,
        Err(e) => {
            eprintln!("ipvs-exporter: cannot open IPVS in {}: {e}", o.netns);
            return ExitCode::FAILURE;
        }
    };
    let exporter = Exporter::new(handle, o.labels, o.path);
    if o.once {
        let text = exporter.scrape(Format::Text);
        let mut out = std::io::stdout().lock();
        return match out.write_all(text.as_bytes()) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("ipvs-exporter: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let (server, addr) = match listen(&o.listen) {
        Ok(listening) => listening,
        Err(e) => {
            eprintln!("ipvs-exporter: {e}");
            return ExitCode::FAILURE;
        }
    };
    eprintln!(
        "ipvs-exporter: listening on {addr}, metrics at {}, namespace {}",
        exporter.path,
        exporter.handle.netns()
    );
    exporter.serve(&server);
    ExitCode::SUCCESS
}
