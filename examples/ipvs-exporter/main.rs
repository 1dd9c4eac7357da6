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

use std::io::Write as _;
use std::process::ExitCode;

use ipvsctl::conns::ConnTable;
use ipvsctl::{Handle, HandleOptions, NetNs};

use metrics::{BackendLabels, Format};

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

/// `:PORT` (every address, as node_exporter takes it) becomes `[::]:PORT`,
/// which on Linux also accepts IPv4 unless `net.ipv6.bindv6only` is set.
fn listen_address(addr: &str) -> String {
    match addr.strip_prefix(':') {
        Some(port) => format!("[::]:{port}"),
        None => addr.to_owned(),
    }
}

/// One scrape, in `format`.
fn scrape(handle: &Handle, table: &ConnTable, o: &Options, format: Format) -> String {
    let (snapshot, outcome, failure) = read::read(handle, table);
    if let Some(why) = failure {
        eprintln!("ipvs-exporter: scrape failed: {why}");
    }
    let mut out = String::with_capacity(64 * 1024);
    metrics::render(snapshot, &o.labels, outcome, format, &mut out);
    out
}

const LANDING: &str = "<html><head><title>IPVS Exporter</title></head><body>\
<h1>IPVS Exporter</h1><p><a href=\"PATH\">Metrics</a></p></body></html>\n";

fn serve(handle: &Handle, table: &ConnTable, o: &Options) -> Result<(), String> {
    let addr = listen_address(&o.listen);
    let server = tiny_http::Server::http(&addr).map_err(|e| format!("listen on {addr}: {e}"))?;
    eprintln!(
        "ipvs-exporter: listening on {addr}, metrics at {}, namespace {}",
        o.path,
        handle.netns()
    );
    let header = |name: &str, value: &str| {
        tiny_http::Header::from_bytes(name.as_bytes(), value.as_bytes()).expect("valid header")
    };
    for request in server.incoming_requests() {
        let path = request.url().split('?').next().unwrap_or("").to_owned();
        let response = if path == o.path {
            let accept = request
                .headers()
                .iter()
                .find(|h| h.field.equiv("Accept"))
                .map(|h| h.value.as_str().to_owned());
            let format = Format::from_accept(accept.as_deref());
            tiny_http::Response::from_string(scrape(handle, table, o, format))
                .with_header(header("Content-Type", format.content_type()))
        } else if path == "/" {
            tiny_http::Response::from_string(LANDING.replace("PATH", &o.path))
                .with_header(header("Content-Type", "text/html; charset=utf-8"))
        } else {
            tiny_http::Response::from_string("404 page not found\n").with_status_code(404)
        };
        // A client that went away is not the exporter's failure.
        let _ = request.respond(response);
    }
    Ok(())
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
    let table = ConnTable::new().netns(handle.netns().clone());
    if o.once {
        let text = scrape(&handle, &table, &o, Format::Text);
        let mut out = std::io::stdout().lock();
        return match out.write_all(text.as_bytes()) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("ipvs-exporter: {e}");
                ExitCode::FAILURE
            }
        };
    }
    match serve(&handle, &table, &o) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ipvs-exporter: {e}");
            ExitCode::FAILURE
        }
    }
}
