//! `examples/ipvs-exporter` side by side with Debian's
//! `prometheus-node-exporter` (node_exporter 1.5.0 in bookworm) on the real
//! kernel, with real traffic.
//!
//! What it proves: for an IPVS table with traffic (IPv4 and IPv6 services,
//! TCP, UDP and SCTP, one firewall-mark service; several real servers each,
//! different weights, one at weight 0; connections through TCP, UDP, SCTP
//! and the firewall-mark service), ipvs-exporter reading the router's
//! namespace with `--netns` from the initial namespace serves every
//! `node_ipvs_*` series that node_exporter's ipvs collector serves (running
//! inside that namespace), with equal labels and values, and as many
//! backend series; its own `ipvs_service_*` and `ipvs_backend_*` counters
//! exist for every service and real server and equal the kernel's 64-bit
//! counters (read through ipvsctl), their service series labelled like the
//! backend series' service side plus `family` (`ipv4`, `ipv6`: two
//! firewall-mark services of one mark, one per family, are otherwise
//! alike); after more traffic both exporters' counters grew and still
//! agree; with
//! `--collector.ipvs.backend-labels=local_address,local_port,proto` both
//! sum the collapsed backends alike; `--once` prints what the HTTP scrape
//! serves.
//!
//! One difference is deliberate and asserted exactly: node_exporter's
//! procfs parser (prometheus/procfs `parseIPVSBackendStatus`) knows only
//! `TCP`, `UDP` and `FWM` service lines of `/proc/net/ip_vs`, so the real
//! servers of an `SCTP` line are reported under the labels (proto,
//! local_address, local_port, local_mark) of the service line before it in
//! the file (empty, with local_port "0", if none). ipvs-exporter labels them
//! proto="SCTP" with the SCTP service's address. The test reads the file
//! to know which line comes before each SCTP service (the order is the
//! kernel's hash order) at each comparison, between two node_exporter
//! scrapes that agree: from 7.1 the kernel resizes a namespace's service
//! table with its load, which can change the order after a first read. It
//! gives the SCTP real servers a port of their own ([`SCTP_PORT`]) so that
//! node_exporter cannot sum them into another service's real server, and
//! prints what node_exporter made of them.
//!
//! The scrapes are plain HTTP/1.1 GETs over `std::net::TcpStream` (from a
//! thread inside the router's namespace for node_exporter); the text is
//! parsed as Prometheus text 0.0.4 or OpenMetrics by its content type,
//! values compared as f64. One ipvs-exporter is asked for OpenMetrics as
//! Prometheus asks, the other is sent no `Accept` header (text 0.0.4);
//! node_exporter 1.5 answers text 0.0.4. A second test checks these
//! readers on fixed text.
//! The two exporters are never read at the same instant: comparisons are
//! made once the kernel's counters have settled (the rate estimator copies
//! them every 2 s) and between two node_exporter scrapes that agree, tried
//! again until a deadline (SCTP and TCP connection entries may expire
//! meanwhile).
//!
//! Where the kernel has no SCTP the SCTP services are left out and the test
//! says so (and checks that SCTP is really missing).
//!
//! Needs the Debian package prometheus-node-exporter (installed by
//! `scripts/test`; the guest sees the host's file system) and the example
//! built first: `cargo build --examples --all-features`, then
//! `cargo test --all-features --test kernel_exporter`. Runs in the VM
//! through the cargo runner like every kernel test.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ipvsctl::NetNs;
use ipvsctl::model::{AddressFamily, ForwardMethod, Scheduler, ServiceKey, VirtualServer};
use ipvsctl::netlink::netns::run_in;
use support::TestNetns;
use support::traffic::{BPORT, Lab, Proto, VIP4, VIP6, VPORT};

/// Debian's node_exporter (package prometheus-node-exporter).
const NODE_EXPORTER: &str = "prometheus-node-exporter";
/// The port of the SCTP real servers: no other real server uses it, so
/// node_exporter's misattributed SCTP series never fall on another
/// service's real server (it sums series whose labels are equal).
const SCTP_PORT: u16 = 8082;
/// The virtual port of the firewall-mark service's traffic (marked by
/// nftables in the router).
const FWM_PORT: u16 = 81;
/// The firewall mark of the firewall-mark service.
const MARK: u32 = 1;
/// The backend labels of the collapsed comparison.
const COLLAPSED: [&str; 3] = ["local_address", "local_port", "proto"];
/// Namespace totals, from `/proc/net/ip_vs_stats`.
const TOTALS: [&str; 5] = [
    "node_ipvs_connections_total",
    "node_ipvs_incoming_packets_total",
    "node_ipvs_outgoing_packets_total",
    "node_ipvs_incoming_bytes_total",
    "node_ipvs_outgoing_bytes_total",
];
/// Per real server, from `/proc/net/ip_vs`.
const BACKEND: [&str; 3] = [
    "node_ipvs_backend_connections_active",
    "node_ipvs_backend_connections_inactive",
    "node_ipvs_backend_weight",
];
/// ipvs-exporter's own counters: `ipvs_service_*` and `ipvs_backend_*`
/// followed by each of these.
const COUNTERS: [&str; 5] = [
    "connections_total",
    "incoming_packets_total",
    "outgoing_packets_total",
    "incoming_bytes_total",
    "outgoing_bytes_total",
];
/// How long an exporter may take to answer its first scrape.
const READY: Duration = Duration::from_secs(30);
/// Bound on one HTTP exchange.
const HTTP_WAIT: Duration = Duration::from_secs(10);
/// The kernel's estimator period (2 s) and a margin: counters that stayed
/// the same this long have taken in every packet sent before.
const ESTIMATOR_PERIOD: Duration = Duration::from_millis(2_500);
/// Bound on the wait for settled counters.
const SETTLE: Duration = Duration::from_secs(30);
/// Bound on the retries of one comparison.
const AGREE: Duration = Duration::from_secs(20);
/// What Prometheus sends: OpenMetrics preferred, text 0.0.4 accepted.
const ACCEPT: &str = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;\
                      version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";

// ------------------------------------------------------------ exposition ---

type Labels = BTreeMap<String, String>;
/// Samples by metric name and labels.
type Series = BTreeMap<(String, Labels), f64>;

/// Parses Prometheus text format 0.0.4 or, when `openmetrics`, OpenMetrics
/// text (which must end with `# EOF`). Refuses a series given twice.
fn parse_exposition(text: &str, openmetrics: bool) -> Result<Series, String> {
    let mut out = Series::new();
    let mut eof = false;
    for (n, line) in text.lines().enumerate() {
        let at = |why: &str| format!("line {}: {why}: {line:?}", n + 1);
        if eof {
            return Err(at("text after # EOF"));
        }
        if line.trim().is_empty() {
            if openmetrics {
                return Err(at("empty line in OpenMetrics"));
            }
            continue;
        }
        if let Some(rest) = line.strip_prefix('#') {
            if rest == " EOF" {
                eof = true;
                continue;
            }
            let mut words = rest.trim_start().splitn(3, ' ');
            match (words.next(), words.next()) {
                (Some("HELP" | "TYPE" | "UNIT"), Some(name)) if !name.is_empty() => {}
                // The text format allows any other comment.
                _ if !openmetrics => {}
                _ => return Err(at("unknown # line")),
            }
            continue;
        }
        let (key, value) = parse_sample(line).map_err(|e| at(&e))?;
        if out.insert(key, value).is_some() {
            return Err(at("the same series twice"));
        }
    }
    if openmetrics && !eof {
        return Err("OpenMetrics text without # EOF".to_owned());
    }
    Ok(out)
}

/// `name{l1="v1",...} value [timestamp]`.
fn parse_sample(line: &str) -> Result<((String, Labels), f64), String> {
    let name_end = line
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .unwrap_or(line.len());
    let name = &line[..name_end];
    if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) {
        return Err("bad metric name".to_owned());
    }
    let mut rest = &line[name_end..];
    let mut labels = Labels::new();
    if let Some(r) = rest.strip_prefix('{') {
        rest = parse_labels(r, &mut labels)?;
    }
    if !rest.starts_with([' ', '\t']) {
        return Err("no blank before the value".to_owned());
    }
    let mut words = rest.split_whitespace();
    let value = parse_value(words.next().ok_or("no value")?)?;
    if let Some(ts) = words.next() {
        ts.parse::<f64>()
            .map_err(|e| format!("timestamp {ts:?}: {e}"))?;
    }
    if words.next().is_some() {
        return Err("text after the timestamp".to_owned());
    }
    Ok(((name.to_owned(), labels), value))
}

/// The labels after `{` up to `}`; returns the text after `}`.
fn parse_labels<'a>(mut s: &'a str, labels: &mut Labels) -> Result<&'a str, String> {
    loop {
        s = s.trim_start();
        if let Some(r) = s.strip_prefix('}') {
            return Ok(r);
        }
        let eq = s.find('=').ok_or("label without =")?;
        let name = s[..eq].trim();
        if name.is_empty()
            || name.starts_with(|c: char| c.is_ascii_digit())
            || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        {
            return Err(format!("bad label name {name:?}"));
        }
        let r = s[eq + 1..]
            .trim_start()
            .strip_prefix('"')
            .ok_or("label value not quoted")?;
        let mut value = String::new();
        let mut chars = r.char_indices();
        let end = loop {
            match chars.next() {
                None => return Err("unterminated label value".to_owned()),
                Some((i, '"')) => break i,
                Some((_, '\\')) => match chars.next() {
                    Some((_, '\\')) => value.push('\\'),
                    Some((_, '"')) => value.push('"'),
                    Some((_, 'n')) => value.push('\n'),
                    _ => return Err("bad escape in label value".to_owned()),
                },
                Some((_, c)) => value.push(c),
            }
        };
        if labels.insert(name.to_owned(), value).is_some() {
            return Err(format!("label {name} twice"));
        }
        s = r[end + 1..].trim_start();
        if let Some(r) = s.strip_prefix(',') {
            s = r;
        } else if !s.starts_with('}') {
            return Err("expected , or } after a label".to_owned());
        }
    }
}

fn parse_value(s: &str) -> Result<f64, String> {
    match s {
        "+Inf" | "Inf" => Ok(f64::INFINITY),
        "-Inf" => Ok(f64::NEG_INFINITY),
        "NaN" => Ok(f64::NAN),
        _ => s.parse().map_err(|e| format!("value {s:?}: {e}")),
    }
}

/// `name{l1="v1",...}` for messages.
fn show(name: &str, labels: &Labels) -> String {
    let l: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v:?}")).collect();
    format!("{name}{{{}}}", l.join(","))
}

/// The series whose name starts with `prefix`.
fn only(series: &Series, prefix: &str) -> Series {
    series
        .iter()
        .filter(|((name, _), _)| name.starts_with(prefix))
        .map(|(k, v)| (k.clone(), *v))
        .collect()
}

fn value(series: &Series, name: &str, labels: &Labels) -> Option<f64> {
    series.get(&(name.to_owned(), labels.clone())).copied()
}

fn total(series: &Series, name: &str) -> f64 {
    value(series, name, &Labels::new()).unwrap_or(f64::NAN)
}

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// Every difference between `left` and `right` (named `l` and `r` in the
/// lines), one line each; empty when they are equal.
fn diff(left: &Series, right: &Series, l: &str, r: &str) -> Vec<String> {
    let keys: BTreeSet<&(String, Labels)> = left.keys().chain(right.keys()).collect();
    keys.into_iter()
        .filter_map(|k| {
            let s = show(&k.0, &k.1);
            match (left.get(k), right.get(k)) {
                (Some(a), Some(b)) if a == b => None,
                (Some(a), Some(b)) => Some(format!("{s}: {l} {a}, {r} {b}")),
                (Some(a), None) => Some(format!("{s}: {l} {a}, missing in {r}")),
                (None, Some(b)) => Some(format!("{s}: missing in {l}, {r} {b}")),
                (None, None) => None,
            }
        })
        .collect()
}

// ------------------------------------------------------------------ HTTP ---

/// One `GET path` to `addr` over HTTP/1.1 (`Connection: close`, with
/// `accept` as the `Accept` header if given), connected from inside `netns`
/// when given; the content type and the body (chunked transfer decoded) of
/// a 200 answer.
fn http_get(
    addr: SocketAddr,
    path: &str,
    accept: Option<&str>,
    netns: Option<&Path>,
) -> Result<(String, String), String> {
    let connect = || TcpStream::connect_timeout(&addr, HTTP_WAIT);
    let mut s = match netns {
        Some(p) => run_in(&NetNs::path(p), connect),
        None => connect(),
    }
    .map_err(|e| format!("connect to {addr}: {e}"))?;
    let io = |e: std::io::Error| format!("GET http://{addr}{path}: {e}");
    s.set_read_timeout(Some(HTTP_WAIT)).map_err(io)?;
    s.set_write_timeout(Some(HTTP_WAIT)).map_err(io)?;
    let accept = accept
        .map(|a| format!("Accept: {a}\r\n"))
        .unwrap_or_default();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\n{accept}Connection: close\r\n\r\n"
    )
    .map_err(io)?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).map_err(io)?;
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| format!("GET http://{addr}{path}: no end of headers"))?;
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let body = &raw[split + 4..];
    let mut lines = head.split("\r\n");
    let status = lines.next().unwrap_or_default();
    let headers: BTreeMap<String, String> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    if status.split_whitespace().nth(1) != Some("200") {
        return Err(format!(
            "GET http://{addr}{path}: {status}\n{}",
            String::from_utf8_lossy(body)
        ));
    }
    let body = if headers
        .get("transfer-encoding")
        .is_some_and(|t| t.eq_ignore_ascii_case("chunked"))
    {
        dechunk(body).map_err(|e| format!("GET http://{addr}{path}: {e}"))?
    } else if let Some(len) = headers.get("content-length") {
        let len: usize = len
            .parse()
            .map_err(|e| format!("content-length {len}: {e}"))?;
        if body.len() < len {
            return Err(format!(
                "GET http://{addr}{path}: {} of {len} bytes",
                body.len()
            ));
        }
        body[..len].to_vec()
    } else {
        body.to_vec()
    };
    let body = String::from_utf8(body).map_err(|e| format!("body not UTF-8: {e}"))?;
    Ok((
        headers.get("content-type").cloned().unwrap_or_default(),
        body,
    ))
}

/// The body of a chunked transfer.
fn dechunk(mut b: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    loop {
        let eol = b
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or("chunk size line cut")?;
        let size_line = String::from_utf8_lossy(&b[..eol]);
        let size_hex = size_line.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size_hex, 16)
            .map_err(|e| format!("chunk size {size_hex:?}: {e}"))?;
        b = &b[eol + 2..];
        if size == 0 {
            return Ok(out);
        }
        if b.len() < size + 2 {
            return Err("chunk cut".to_owned());
        }
        out.extend_from_slice(&b[..size]);
        b = &b[size + 2..];
    }
}

/// Parses a scrape by its content type: OpenMetrics or text 0.0.4.
fn parse_scrape(content_type: &str, body: &str) -> Result<Series, String> {
    let ct = content_type.to_ascii_lowercase();
    let openmetrics = if ct.starts_with("application/openmetrics-text") {
        true
    } else if ct.starts_with("text/plain") && ct.contains("version=0.0.4") {
        false
    } else {
        return Err(format!("unexpected content type {content_type:?}"));
    };
    parse_exposition(body, openmetrics)
}

// ------------------------------------------------------------- exporters ---

/// A running exporter, killed (SIGKILL) on drop, even when a test fails.
struct Exporter {
    what: String,
    child: Child,
    log: PathBuf,
    addr: SocketAddr,
    path: String,
    /// The namespace to connect from (node_exporter's); `None`: ours.
    netns: Option<PathBuf>,
    /// The `Accept` header of its scrapes; `None`: none sent.
    accept: Option<&'static str>,
}

impl Exporter {
    /// Starts `cmd` with stdout and stderr to a log file.
    fn start(
        what: &str,
        mut cmd: Command,
        addr: SocketAddr,
        path: &str,
        netns: Option<&Path>,
    ) -> Exporter {
        let log = std::env::temp_dir().join(format!(
            "kernel-exporter-{}-{}.log",
            std::process::id(),
            what.replace(|c: char| !c.is_ascii_alphanumeric(), "-")
        ));
        let file = std::fs::File::create(&log).expect("create exporter log");
        cmd.stdin(Stdio::null())
            .stdout(file.try_clone().expect("log file"))
            .stderr(file);
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {what} ({cmd:?}): {e}"));
        Exporter {
            what: what.to_owned(),
            child,
            log,
            addr,
            path: path.to_owned(),
            netns: netns.map(Path::to_path_buf),
            accept: Some(ACCEPT),
        }
    }

    /// Scrapes with this `Accept` header from now on (`None`: none).
    fn accepting(mut self, accept: Option<&'static str>) -> Exporter {
        self.accept = accept;
        self
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// One scrape, parsed.
    fn scrape(&self) -> Result<Series, String> {
        self.scrape_typed().map(|(_, series)| series)
    }

    /// One scrape, parsed, with the content type it came as.
    fn scrape_typed(&self) -> Result<(String, Series), String> {
        let (ct, body) = http_get(self.addr, &self.path, self.accept, self.netns.as_deref())
            .map_err(|e| format!("{}: {e}", self.what))?;
        let series = parse_scrape(&ct, &body).map_err(|e| format!("{}: {e}\n{body}", self.what))?;
        Ok((ct, series))
    }

    /// Waits until the exporter answers a scrape (at most [`READY`]);
    /// panics with its log if it exits or does not answer in time.
    fn wait_ready(&mut self) {
        let start = Instant::now();
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("{} exited with {status}\n{}", self.what, self.log());
            }
            match self.scrape_typed() {
                Ok((ct, _)) => {
                    println!(
                        "{} answers on {}{} after {:.1} s ({ct})",
                        self.what,
                        self.addr,
                        self.path,
                        start.elapsed().as_secs_f64()
                    );
                    return;
                }
                Err(e) if start.elapsed() > READY => {
                    panic!("{} does not answer: {e}\nlog:\n{}", self.what, self.log())
                }
                Err(_) => std::thread::sleep(Duration::from_millis(200)),
            }
        }
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.log);
    }
}

/// Debian's node_exporter binary; panics if the package is missing.
fn node_exporter_binary() -> PathBuf {
    let bin = support::tool(NODE_EXPORTER);
    assert!(
        bin.is_file(),
        "{NODE_EXPORTER} is missing: install the Debian package prometheus-node-exporter \
         (scripts/test does)"
    );
    bin
}

/// node_exporter with only its ipvs collector, inside `ns` on
/// `127.0.0.1:port`.
fn node_exporter(ns: &TestNetns, port: u16, path: &str, extra: &[&str]) -> Exporter {
    let bin = node_exporter_binary();
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut cmd = ns.command(&bin);
    cmd.args([
        "--collector.disable-defaults",
        "--collector.ipvs",
        "--web.disable-exporter-metrics",
        &format!("--web.listen-address={addr}"),
        &format!("--web.telemetry-path={path}"),
    ])
    .args(extra);
    let what = format!("node_exporter {}", extra.join(" "));
    Exporter::start(what.trim_end(), cmd, addr, path, Some(ns.path()))
}

/// A free port on 127.0.0.1 in the calling thread's namespace (bound and
/// released: nothing else starts listeners here meanwhile).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port()
}

/// ipvs-exporter, started in our own namespace, reading `netns` (a name or
/// a path).
fn ipvs_exporter(bin: &Path, netns: &str, path: &str, extra: &[&str]) -> Exporter {
    let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let mut cmd = Command::new(bin);
    cmd.args([
        format!("--netns={netns}"),
        format!("--web.listen-address={addr}"),
        format!("--web.telemetry-path={path}"),
    ])
    .args(extra);
    let what = format!("ipvs-exporter --netns={netns} {}", extra.join(" "));
    Exporter::start(what.trim_end(), cmd, addr, path, None)
}

// -------------------------------------------------------- SCTP labelling ---

/// The router's `/proc/net/ip_vs`.
fn read_proc_ip_vs(lab: &Lab) -> std::io::Result<String> {
    run_in(&NetNs::path(lab.router.path()), || {
        std::fs::read_to_string("/proc/thread-self/net/ip_vs")
    })
}

/// The SCTP attribution of the router's table as it is now (see
/// [`sctp_attribution`]).
fn read_attribution(lab: &Lab) -> Result<Attribution, String> {
    let text = read_proc_ip_vs(lab).map_err(|e| format!("read /proc/net/ip_vs: {e}"))?;
    sctp_attribution(&text)
}

/// The local labels node_exporter gives the real servers of each SCTP
/// service, by the SCTP service's (local_address, local_port).
type Attribution = BTreeMap<(String, String), Labels>;

/// Reads `/proc/net/ip_vs` as node_exporter's parser does: a `TCP`, `UDP`
/// or `FWM` line sets the labels of the real-server lines after it, any
/// other service line (`SCTP`) is skipped.
fn sctp_attribution(proc_ip_vs: &str) -> Result<Attribution, String> {
    let none = || {
        labels(&[
            ("proto", ""),
            ("local_address", ""),
            ("local_port", "0"),
            ("local_mark", ""),
        ])
    };
    let mut current = none();
    let mut out = Attribution::new();
    for line in proc_ip_vs.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        match f.as_slice() {
            [p @ ("TCP" | "UDP"), addr, ..] => {
                let (a, port) = proc_addr(addr)?;
                current = labels(&[
                    ("proto", p),
                    ("local_address", &a),
                    ("local_port", &port.to_string()),
                    ("local_mark", ""),
                ]);
            }
            ["FWM", mark, ..] => {
                current = labels(&[
                    ("proto", "FWM"),
                    ("local_address", ""),
                    ("local_port", "0"),
                    ("local_mark", mark),
                ]);
            }
            ["SCTP", addr, ..] => {
                let (a, port) = proc_addr(addr)?;
                out.insert((a, port.to_string()), current.clone());
            }
            _ => {}
        }
    }
    Ok(out)
}

/// `0A090909:0050` or `[fd09:0000:...:0009]:0050` as (address, port).
fn proc_addr(s: &str) -> Result<(String, u16), String> {
    let (ip, port) = s
        .rsplit_once(':')
        .ok_or_else(|| format!("no port in {s}"))?;
    let port = u16::from_str_radix(port, 16).map_err(|e| format!("port in {s}: {e}"))?;
    let ip = if let Some(v6) = ip.strip_prefix('[').and_then(|i| i.strip_suffix(']')) {
        v6.parse::<Ipv6Addr>()
            .map_err(|e| format!("{s}: {e}"))?
            .to_string()
    } else {
        Ipv4Addr::from(u32::from_str_radix(ip, 16).map_err(|e| format!("{s}: {e}"))?).to_string()
    };
    Ok((ip, port))
}

/// ipvs-exporter's backend series as node_exporter labels them: each
/// proto="SCTP" series moved to its attribution's local labels, summed
/// where labels then meet (as node_exporter sums).
fn misattribute(series: &Series, attribution: &Attribution) -> Series {
    let mut out = Series::new();
    for ((name, l), v) in series {
        let mut l = l.clone();
        if BACKEND.contains(&name.as_str()) && l.get("proto").map(String::as_str) == Some("SCTP") {
            let key = (
                l.get("local_address").cloned().unwrap_or_default(),
                l.get("local_port").cloned().unwrap_or_default(),
            );
            if let Some(local) = attribution.get(&key) {
                l.extend(local.clone());
            }
        }
        *out.entry((name.clone(), l)).or_insert(0.0) += v;
    }
    out
}

/// The backend series with only the labels in `keep`, summed over the
/// rest; other series unchanged.
fn collapse(series: &Series, keep: &[&str]) -> Series {
    let mut out = Series::new();
    for ((name, l), v) in series {
        let l = if BACKEND.contains(&name.as_str()) {
            l.iter()
                .filter(|(k, _)| keep.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        } else {
            l.clone()
        };
        *out.entry((name.clone(), l)).or_insert(0.0) += v;
    }
    out
}

// ----------------------------------------------------------- comparisons ---

/// Runs `check` until it returns `Ok` or [`AGREE`] has passed; panics with
/// its last error then.
fn agree<T>(what: &str, mut check: impl FnMut() -> Result<T, String>) -> T {
    let start = Instant::now();
    let mut tries = 0;
    loop {
        tries += 1;
        match check() {
            Ok(t) => return t,
            Err(e) if start.elapsed() > AGREE => {
                panic!("{what}: still different after {tries} tries:\n{e}")
            }
            Err(_) => std::thread::sleep(Duration::from_millis(300)),
        }
    }
}

/// Two node_exporter scrapes with `between` read in the middle, retried
/// until the two agree on every `node_ipvs_*` series (so `between` saw the
/// same state); returns the first scrape and `between`'s result.
fn sandwich<T>(
    node: &Exporter,
    mut between: impl FnMut() -> Result<T, String>,
) -> Result<(Series, T), String> {
    let before = node.scrape()?;
    let t = between()?;
    let after = node.scrape()?;
    let changed = diff(
        &only(&before, "node_ipvs_"),
        &only(&after, "node_ipvs_"),
        "before",
        "after",
    );
    if !changed.is_empty() {
        return Err(format!(
            "node_exporter changed meanwhile:\n{}",
            changed.join("\n")
        ));
    }
    Ok((before, t))
}

/// node_exporter's `node_ipvs_*` series against ipvs-exporter's: totals
/// and non-SCTP backends equal, SCTP backends as node_exporter misattributes
/// them, the same number of backend series. Err lists every difference.
fn compare_node_series(
    node: &Series,
    ipvs: &Series,
    attribution: &Attribution,
) -> Result<(), String> {
    let n = only(node, "node_ipvs_");
    let i = only(ipvs, "node_ipvs_");
    let mut errors = Vec::new();
    // Every series of node_exporter but the SCTP real servers', as it is.
    let sctp_port = SCTP_PORT.to_string();
    let plain = |s: &Series| -> Series {
        s.iter()
            .filter(|((_, l), _)| l.get("remote_port") != Some(&sctp_port))
            .map(|(k, v)| (k.clone(), *v))
            .collect()
    };
    errors.extend(diff(
        &plain(&n),
        &plain(&i),
        "node_exporter",
        "ipvs-exporter",
    ));
    // Everything, with ipvs-exporter's SCTP series labelled as
    // node_exporter labels them.
    errors.extend(
        diff(
            &n,
            &misattribute(&i, attribution),
            "node_exporter",
            "ipvs-exporter relabelled",
        )
        .into_iter()
        .filter(|e| e.contains(&format!("remote_port=\"{SCTP_PORT}\""))),
    );
    // ipvs-exporter's SCTP real servers under their own SCTP service.
    for (name, l) in i.keys() {
        if !BACKEND.contains(&name.as_str()) || l.get("remote_port") != Some(&sctp_port) {
            continue;
        }
        let service = (
            l.get("local_address").cloned().unwrap_or_default(),
            l.get("local_port").cloned().unwrap_or_default(),
        );
        if l.get("proto").map(String::as_str) != Some("SCTP") || !attribution.contains_key(&service)
        {
            errors.push(format!(
                "{}: an SCTP real server, not under its SCTP service",
                show(name, l)
            ));
        }
    }
    for name in BACKEND {
        let count = |s: &Series| s.keys().filter(|(k, _)| k == name).count();
        if count(&n) != count(&i) {
            errors.push(format!(
                "{name}: node_exporter has {} series, ipvs-exporter {}",
                count(&n),
                count(&i)
            ));
        }
    }
    for name in TOTALS {
        if !n.contains_key(&(name.to_owned(), Labels::new())) {
            errors.push(format!("node_exporter has no {name}"));
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors.join("\n"))
    }
}

/// The SCTP real servers: node_exporter's series are ipvs-exporter's with
/// the local labels of the service line before the SCTP one (same remote
/// address, port and values), and no series of node_exporter says SCTP.
/// Returns a description of each, for the log.
fn check_sctp(
    node: &Series,
    ipvs: &Series,
    attribution: &Attribution,
) -> Result<Vec<String>, String> {
    let mut errors = Vec::new();
    let mut seen = Vec::new();
    for ((name, l), v) in ipvs {
        if !BACKEND.contains(&name.as_str()) || l.get("proto").map(String::as_str) != Some("SCTP") {
            continue;
        }
        let key = (l["local_address"].clone(), l["local_port"].clone());
        let Some(local) = attribution.get(&key) else {
            errors.push(format!(
                "{}: no SCTP line for it in /proc/net/ip_vs",
                show(name, l)
            ));
            continue;
        };
        let mut moved = l.clone();
        moved.extend(local.clone());
        match value(node, name, &moved) {
            Some(got) if got == *v => {
                if name == "node_ipvs_backend_weight" {
                    let get = |n: &str| value(node, n, &moved).unwrap_or(f64::NAN);
                    seen.push(format!(
                        "SCTP {}:{} -> {}:{}: node_exporter says proto={:?} local_address={:?} \
                         local_port={:?} local_mark={:?}; weight {got}, active {}, inactive {}",
                        l["local_address"],
                        l["local_port"],
                        l["remote_address"],
                        l["remote_port"],
                        moved["proto"],
                        moved["local_address"],
                        moved["local_port"],
                        moved["local_mark"],
                        get("node_ipvs_backend_connections_active"),
                        get("node_ipvs_backend_connections_inactive"),
                    ));
                }
            }
            got => errors.push(format!(
                "{}: ipvs-exporter {v}; node_exporter {} = {got:?}",
                show(name, l),
                show(name, &moved)
            )),
        }
    }
    for (name, l) in node.keys() {
        if l.get("proto").map(String::as_str) == Some("SCTP") {
            errors.push(format!("node_exporter reports {} as SCTP", show(name, l)));
        }
    }
    if errors.is_empty() {
        Ok(seen)
    } else {
        Err(errors.join("\n"))
    }
}

/// The labels of a service's series as both exporters write them.
fn service_labels(key: &ServiceKey) -> Labels {
    match key {
        ServiceKey::Addr { protocol, addr } => labels(&[
            ("proto", &protocol.to_string()),
            ("local_address", &addr.ip().to_string()),
            ("local_port", &addr.port().to_string()),
            ("local_mark", ""),
        ]),
        ServiceKey::FwMark { mark, .. } => labels(&[
            ("proto", "FWM"),
            ("local_address", ""),
            ("local_port", "0"),
            ("local_mark", &format!("{mark:08X}")),
        ]),
    }
}

/// The labels of ipvs-exporter's `ipvs_service_*` series: the service's
/// labels and `family` (`ipv4` or `ipv6`), which tells apart two
/// firewall-mark services of one mark, one per family (their other labels
/// are equal).
fn service_series_labels(key: &ServiceKey) -> Labels {
    let mut l = service_labels(key);
    let family = match key.family() {
        AddressFamily::Inet => "ipv4",
        _ => "ipv6",
    };
    l.insert("family".to_owned(), family.to_owned());
    l
}

/// The `ipvs_service_*` and `ipvs_backend_*` series the kernel's 64-bit
/// counters call for, read through ipvsctl.
fn expected_counters(lab: &Lab) -> Series {
    let mut out = Series::new();
    let put = |out: &mut Series, kind: &str, l: &Labels, s: &ipvsctl::model::Stats| {
        let values = [s.conns, s.in_pkts, s.out_pkts, s.in_bytes, s.out_bytes];
        for (c, v) in COUNTERS.iter().zip(values) {
            out.insert((format!("ipvs_{kind}_{c}"), l.clone()), v as f64);
        }
    };
    for svc in lab.handle.list_services().expect("list services") {
        put(
            &mut out,
            "service",
            &service_series_labels(&svc.service.key),
            &svc.stats,
        );
        let l = service_labels(&svc.service.key);
        for d in lab
            .handle
            .list_destinations(&svc.service.key)
            .expect("list destinations")
        {
            let mut dl = l.clone();
            dl.insert("remote_address".into(), d.server.addr.ip().to_string());
            dl.insert("remote_port".into(), d.server.addr.port().to_string());
            put(&mut out, "backend", &dl, &d.stats);
        }
    }
    out
}

/// ipvs-exporter's own counters against the kernel's: every service and
/// real server, equal values.
fn compare_counters(ipvs: &Series, want: &Series) -> Result<(), String> {
    let got: Series = ipvs
        .iter()
        .filter(|((name, _), _)| {
            COUNTERS.iter().any(|c| {
                name == &format!("ipvs_service_{c}") || name == &format!("ipvs_backend_{c}")
            })
        })
        .map(|(k, v)| (k.clone(), *v))
        .collect();
    let d = diff(want, &got, "kernel", "ipvs-exporter");
    if d.is_empty() {
        Ok(())
    } else {
        Err(d.join("\n"))
    }
}

/// The collapsed-label exporters against the full-label ones (`n`, `i`):
/// each sums its own backends; node_exporter's groups are ipvs-exporter's
/// with the SCTP real servers moved as node_exporter misattributes them;
/// groups no SCTP real server falls into are equal as served. Err lists
/// every difference; Ok says how many groups there are.
fn compare_collapsed(
    n: &Series,
    nc: &Series,
    i: &Series,
    ic: &Series,
    attribution: &Attribution,
) -> Result<String, String> {
    let (n, nc, i, ic) = (
        only(n, "node_ipvs_"),
        only(nc, "node_ipvs_"),
        only(i, "node_ipvs_"),
        only(ic, "node_ipvs_"),
    );
    let mut errors = Vec::new();
    errors.extend(diff(
        &collapse(&n, &COLLAPSED),
        &nc,
        "node_exporter summed",
        "node_exporter collapsed",
    ));
    errors.extend(diff(
        &collapse(&i, &COLLAPSED),
        &ic,
        "ipvs-exporter summed",
        "ipvs-exporter collapsed",
    ));
    errors.extend(diff(
        &nc,
        &collapse(&misattribute(&i, attribution), &COLLAPSED),
        "node_exporter collapsed",
        "ipvs-exporter relabelled and summed",
    ));
    let is_sctp = |l: &Labels| l.get("proto").map(String::as_str) == Some("SCTP");
    let sctp: Series = i
        .iter()
        .filter(|((_, l), _)| is_sctp(l))
        .map(|(k, v)| (k.clone(), *v))
        .collect();
    let touched: BTreeSet<Labels> = collapse(&misattribute(&sctp, attribution), &COLLAPSED)
        .into_keys()
        .map(|(_, l)| l)
        .collect();
    let untouched = |s: &Series| -> Series {
        s.iter()
            .filter(|((name, l), _)| {
                !BACKEND.contains(&name.as_str()) || (!touched.contains(l) && !is_sctp(l))
            })
            .map(|(k, v)| (k.clone(), *v))
            .collect()
    };
    errors.extend(diff(
        &untouched(&nc),
        &untouched(&ic),
        "node_exporter",
        "ipvs-exporter",
    ));
    if errors.is_empty() {
        let groups = nc
            .keys()
            .filter(|(name, _)| name == "node_ipvs_backend_weight")
            .count();
        Ok(format!(
            "{groups} backend groups, {} of node_exporter's with SCTP real servers in them",
            touched.len()
        ))
    } else {
        Err(errors.join("\n"))
    }
}

/// The series of the exporters' IPVS collectors: `node_ipvs_*`,
/// `ipvs_service_*`, `ipvs_backend_*`.
fn ours(series: &Series) -> Series {
    series
        .iter()
        .filter(|((name, _), _)| {
            name.starts_with("node_ipvs_")
                || name.starts_with("ipvs_service_")
                || name.starts_with("ipvs_backend_")
        })
        .map(|(k, v)| (k.clone(), *v))
        .collect()
}

/// `ipvs-exporter --netns=NETNS --once`: its stdout, parsed (OpenMetrics
/// if it ends with `# EOF`, else text 0.0.4).
fn once(bin: &Path, netns: &str) -> Result<Series, String> {
    let out = Command::new(bin)
        .args([&format!("--netns={netns}"), "--once"])
        .output()
        .map_err(|e| format!("cannot start {}: {e}", bin.display()))?;
    if !out.status.success() {
        return Err(format!(
            "ipvs-exporter --once: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let text = String::from_utf8(out.stdout).map_err(|e| format!("--once output: {e}"))?;
    let openmetrics = text.trim_end().ends_with("# EOF");
    let series =
        parse_exposition(&text, openmetrics).map_err(|e| format!("--once: {e}\n{text}"))?;
    println!(
        "--once printed {} series as {}",
        series.len(),
        if openmetrics {
            "OpenMetrics"
        } else {
            "text 0.0.4"
        }
    );
    Ok(series)
}

// ---------------------------------------------------------------- table ---

/// Marks TCP to `VIP4:FWM_PORT` with [`MARK`] in the router's prerouting
/// hook (mangle priority, ahead of IPVS in LOCAL_IN), from a thread of its
/// own (join it before the traffic).
fn mark_in_router(router: &TestNetns) -> std::thread::JoinHandle<()> {
    let rules = format!(
        "table inet exporter_test {{\n\
         \tchain pre {{\n\
         \t\ttype filter hook prerouting priority mangle; policy accept;\n\
         \t\tip daddr {VIP4} tcp dport {FWM_PORT} meta mark set {MARK}\n\
         \t}}\n\
         }}\n"
    );
    let mut nft = router.command("nft");
    nft.args(["-f", "-"]);
    std::thread::spawn(move || {
        let out = support::feed(&mut nft, &rules);
        assert!(
            out.status.success(),
            "nft -f failed: {}\n{rules}",
            String::from_utf8_lossy(&out.stderr)
        );
    })
}

/// Whether SCTP works in this kernel: loaded, and the backends' SCTP
/// servers started on [`SCTP_PORT`].
fn sctp_servers(lab: &mut Lab) -> bool {
    let _ = support::traffic::modprobe("sctp");
    match lab.serve_sctp(SCTP_PORT) {
        Ok(()) => true,
        Err(why) => {
            let _ = writeln!(
                std::io::stderr(),
                "SKIP the SCTP part: Linux {} has no SCTP ({why})",
                support::kernel_release()
            );
            assert!(
                !Path::new("/proc/net/sctp").exists(),
                "SCTP sockets fail ({why}) although /proc/net/sctp exists"
            );
            false
        }
    }
}

fn sock(ip: &str, port: u16) -> SocketAddr {
    SocketAddr::new(ip.parse().expect("literal address"), port)
}

/// A service of the table: its key, scheduler, `(backend, weight)` of its
/// real servers and their port.
type Row = (ServiceKey, Scheduler, Vec<(usize, u32)>, u16);

/// The table: every service masqueraded to the lab's backends.
fn table(sctp: bool) -> Vec<Row> {
    let mut t = vec![
        (
            ServiceKey::tcp(sock(VIP4, VPORT)),
            Scheduler::WeightedRoundRobin,
            vec![(0, 3), (1, 1), (2, 0)],
            BPORT,
        ),
        (
            ServiceKey::udp(sock(VIP4, VPORT)),
            Scheduler::RoundRobin,
            vec![(0, 2), (1, 1)],
            BPORT,
        ),
        (
            ServiceKey::tcp(sock(VIP6, VPORT)),
            Scheduler::WeightedRoundRobin,
            vec![(0, 1), (1, 2), (2, 0)],
            BPORT,
        ),
        (
            ServiceKey::udp(sock(VIP6, VPORT)),
            Scheduler::RoundRobin,
            vec![(1, 1), (2, 4)],
            BPORT,
        ),
        (
            ServiceKey::fwmark(MARK, AddressFamily::Inet),
            Scheduler::RoundRobin,
            vec![(1, 1), (2, 0)],
            BPORT,
        ),
    ];
    if sctp {
        t.push((
            ServiceKey::sctp(sock(VIP4, VPORT)),
            Scheduler::RoundRobin,
            vec![(0, 1), (1, 2)],
            SCTP_PORT,
        ));
        t.push((
            ServiceKey::sctp(sock(VIP6, VPORT)),
            Scheduler::RoundRobin,
            vec![(2, 5)],
            SCTP_PORT,
        ));
    }
    t
}

/// Connections through the services; returns how many the kernel counts.
fn traffic(lab: &Lab, sctp: bool) -> u64 {
    let mut n = 0;
    let mut send = |proto: Proto, to: SocketAddr, times: u64| {
        for _ in 0..times {
            let answer = lab.request(proto, to);
            assert!(answer.starts_with("backend-"), "{proto:?} {to}: {answer:?}");
        }
        n += times;
    };
    send(Proto::Tcp, sock(VIP4, VPORT), 4);
    send(Proto::Udp, sock(VIP4, VPORT), 2);
    send(Proto::Tcp, sock(VIP6, VPORT), 3);
    send(Proto::Tcp, sock(VIP4, FWM_PORT), 2);
    if sctp {
        send(Proto::Sctp, sock(VIP4, VPORT), 2);
    }
    n
}

/// Scrapes node_exporter every 250 ms until it counts `conns` connections
/// in all and its `node_ipvs_*` series stayed the same for an estimator
/// period (so every estimator has taken in the traffic sent before);
/// panics after [`SETTLE`].
fn settle(node: &Exporter, conns: u64) -> Series {
    let start = Instant::now();
    let mut prev = only(&node.scrape().expect("scrape node_exporter"), "node_ipvs_");
    let mut same_since = Instant::now();
    loop {
        std::thread::sleep(Duration::from_millis(250));
        let cur = only(&node.scrape().expect("scrape node_exporter"), "node_ipvs_");
        if cur != prev {
            same_since = Instant::now();
        } else if same_since.elapsed() >= ESTIMATOR_PERIOD
            && total(&cur, "node_ipvs_connections_total") == conns as f64
        {
            println!(
                "counters settled after {:.1} s",
                start.elapsed().as_secs_f64()
            );
            return cur;
        }
        if start.elapsed() > SETTLE {
            panic!(
                "node_exporter's counters did not settle at {conns} connections in {SETTLE:?}:\n{}",
                cur.iter()
                    .map(|((n, l), v)| format!("{} {v}", show(n, l)))
                    .collect::<Vec<_>>()
                    .join("\n")
            );
        }
        prev = cur;
    }
}

/// Everything the default-label exporters must agree on, in one retry:
/// the node_ipvs series, the SCTP labelling, and ipvs-exporter's counters
/// against the kernel's. Returns node_exporter's and ipvs-exporter's scrapes.
fn compare_all(lab: &Lab, node: &Exporter, ipvs: &Exporter, round: &str) -> (Series, Series) {
    let (n, (i, want, attribution)) = agree(round, || {
        sandwich(node, || {
            Ok((
                ipvs.scrape()?,
                expected_counters(lab),
                read_attribution(lab)?,
            ))
        })
        .and_then(|(n, (i, want, attribution))| {
            compare_node_series(&n, &i, &attribution)?;
            compare_counters(&i, &want)?;
            Ok((n, (i, want, attribution)))
        })
    });
    // The extras exist for every service and real server the kernel has
    // (compare_counters), and for the same real servers as node_ipvs_*.
    let backends: BTreeSet<&Labels> = want
        .keys()
        .filter(|(name, _)| name.starts_with("ipvs_backend_"))
        .map(|(_, l)| l)
        .collect();
    let node_backends: BTreeSet<&Labels> = i
        .keys()
        .filter(|(name, _)| name == "node_ipvs_backend_weight")
        .map(|(_, l)| l)
        .collect();
    assert_eq!(
        backends, node_backends,
        "{round}: ipvs_backend_* and node_ipvs_backend_* of ipvs-exporter name the same real servers"
    );
    let lines = check_sctp(&n, &i, &attribution)
        .unwrap_or_else(|e| panic!("{round}: SCTP real servers:\n{e}"));
    let in_kernel = want
        .keys()
        .filter(|(name, l)| {
            name == "ipvs_backend_connections_total"
                && l.get("proto").map(String::as_str) == Some("SCTP")
        })
        .count();
    assert_eq!(
        lines.len(),
        in_kernel,
        "{round}: every SCTP real server checked: {lines:#?}"
    );
    if !lines.is_empty() {
        println!("{round}: node_exporter's SCTP real servers (misattributed):");
        for l in lines {
            println!("  {l}");
        }
    }
    (n, i)
}

// ----------------------------------------------------------------- test ---

#[test]
fn ipvs_exporter_reports_what_node_exporter_reports() {
    let started = Instant::now();
    let bin = support::example_binary("ipvs-exporter");
    let step = |what: &str| println!("[{:5.1} s] {what}", started.elapsed().as_secs_f64());
    // Meanwhile the lab is built: node_exporter's 13 MB binary read into
    // the guest's page cache (the guest reads the host's files over 9p: its
    // first start took 3-8 s under load), and the modules of SCTP and
    // nftables loaded (1-3 s each under TCG).
    let node_bin = node_exporter_binary();
    let warm = std::thread::spawn(move || {
        let _ = std::fs::read(node_bin);
        let _ = support::traffic::modprobe("sctp");
        let _ = support::traffic::modprobe("nf_tables");
    });
    // Loads ip_vs and every scheduler module, once per test binary.
    support::require_ipvs();
    step("IPVS modules loaded");
    let mut lab = Lab::new(3, BPORT, false);
    step("lab up");

    // The exporters start while the table is built (they read it at each
    // scrape). Declared after the lab: dropped (killed) before its
    // namespaces go.
    let _ = warm.join();
    let ns_path = lab.router.path().to_str().expect("UTF-8 path").to_owned();
    let mut node = node_exporter(&lab.router, 9100, "/metrics", &[]);
    let collapsed_flag = format!("--collector.ipvs.backend-labels={}", COLLAPSED.join(","));
    let mut node_c = node_exporter(&lab.router, 9101, "/collapsed", &[&collapsed_flag]);
    let mut ipvs = ipvs_exporter(&bin, lab.router.name(), "/metrics", &[]);
    // Scraped without an Accept header: Prometheus text 0.0.4 (the other
    // instance is asked for OpenMetrics, as Prometheus asks).
    let mut ipvs_c =
        ipvs_exporter(&bin, &ns_path, "/collapsed", &[&collapsed_flag]).accepting(None);

    let marking = mark_in_router(&lab.router);
    let sctp = sctp_servers(&mut lab);
    for (key, sched, dests, port) in table(sctp) {
        lab.program(
            &VirtualServer::new(key).with_scheduler(sched),
            &dests,
            port,
            ForwardMethod::Masquerade,
        );
    }
    let proc_ip_vs = read_proc_ip_vs(&lab).expect("read the router's /proc/net/ip_vs");
    println!("/proc/net/ip_vs of the router:\n{proc_ip_vs}");
    let attribution = sctp_attribution(&proc_ip_vs).expect("parse /proc/net/ip_vs");
    assert_eq!(
        attribution.len(),
        if sctp { 2 } else { 0 },
        "{attribution:?}"
    );
    if let Err(panic) = marking.join() {
        std::panic::resume_unwind(panic);
    }
    step("exporters started, table built");
    let mut conns = traffic(&lab, sctp);
    step("traffic sent");
    for e in [&mut node, &mut node_c, &mut ipvs, &mut ipvs_c] {
        e.wait_ready();
    }

    // 1. After traffic: equal node_ipvs series, SCTP as node_exporter
    //    misattributes it, ipvs_* counters as the kernel's.
    let settled = settle(&node, conns);
    step("counters settled");
    println!("node_exporter's node_ipvs series:");
    for ((n, l), v) in &settled {
        println!("  {} {v}", show(n, l));
    }
    let (n1, i1) = compare_all(&lab, &node, &ipvs, "after traffic");
    for name in TOTALS {
        assert!(total(&n1, name) > 0.0, "{name} counted the traffic: {n1:?}");
    }
    assert!(
        n1.iter()
            .any(|((name, _), v)| name == "node_ipvs_backend_connections_inactive" && *v > 0.0),
        "some inactive connections"
    );

    step("compared after traffic");

    // 2. Collapsed backend labels: both exporters sum alike (node_exporter
    //    with the SCTP real servers in the groups it misattributes them
    //    to), and each sums its own full-label series.
    agree("collapsed backend labels", || {
        let (n, (nc, i, ic, attribution)) = sandwich(&node, || {
            Ok((
                node_c.scrape()?,
                ipvs.scrape()?,
                ipvs_c.scrape()?,
                read_attribution(&lab)?,
            ))
        })?;
        let summary = compare_collapsed(&n, &nc, &i, &ic, &attribution)?;
        println!("collapsed: {summary}");
        Ok(())
    });

    step("compared with collapsed labels");

    // 3. --once prints the series its HTTP scrape serves.
    agree("--once against the HTTP scrape", || {
        let before = ipvs.scrape()?;
        let once = once(&bin, lab.router.name())?;
        let after = ipvs.scrape()?;
        if ours(&after) != ours(&before) {
            return Err("the HTTP scrape changed meanwhile".to_owned());
        }
        let mut d = diff(&ours(&before), &ours(&once), "HTTP", "--once");
        // The rest (ipvs_scrape_*) differs in value, not in series.
        let names = |s: &Series| {
            let o = ours(s);
            s.keys()
                .filter(|k| !o.contains_key(*k))
                .cloned()
                .collect::<BTreeSet<_>>()
        };
        for (name, l) in names(&before).symmetric_difference(&names(&once)) {
            d.push(format!("{} in one of HTTP and --once only", show(name, l)));
        }
        if d.is_empty() {
            Ok(())
        } else {
            Err(d.join("\n"))
        }
    });

    step("compared --once");

    // 4. More traffic through the IPv4 TCP service: counters grow on both
    //    sides, which still agree.
    let tcp4 = service_series_labels(&ServiceKey::tcp(sock(VIP4, VPORT)));
    for _ in 0..3 {
        lab.request(Proto::Tcp, sock(VIP4, VPORT));
    }
    conns += 3;
    settle(&node, conns);
    step("more traffic sent, counters settled");
    let (n2, i2) = compare_all(&lab, &node, &ipvs, "after more traffic");
    for name in TOTALS {
        assert!(
            total(&n2, name) > total(&n1, name),
            "node_exporter's {name} grew: {} -> {}",
            total(&n1, name),
            total(&n2, name)
        );
    }
    assert_eq!(
        total(&n2, "node_ipvs_connections_total"),
        total(&n1, "node_ipvs_connections_total") + 3.0
    );
    for c in COUNTERS {
        let name = format!("ipvs_service_{c}");
        let (before, after) = (value(&i1, &name, &tcp4), value(&i2, &name, &tcp4));
        assert!(
            after.unwrap_or(f64::NAN) > before.unwrap_or(f64::NAN),
            "ipvs-exporter's {} grew: {before:?} -> {after:?}",
            show(&name, &tcp4)
        );
    }
    assert_eq!(
        value(&i2, "ipvs_service_connections_total", &tcp4),
        value(&i1, "ipvs_service_connections_total", &tcp4).map(|v| v + 3.0)
    );
    println!(
        "kernel_exporter on Linux {}: {:.1} s",
        support::kernel_release(),
        started.elapsed().as_secs_f64()
    );
}

/// The test's own readers, on fixed text: both exposition formats, chunked
/// transfer, and node_exporter's reading of SCTP lines.
#[test]
fn readers_of_the_test() {
    let text = "# HELP node_ipvs_connections_total The total number of connections made.\n\
                # TYPE node_ipvs_connections_total counter\n\
                node_ipvs_connections_total 1.2345e+06\n\
                # a comment\n\
                x{a=\"q\\\"\\\\\\n\",b=\"\",} 12 1700000000000\n\
                y 12.0\n";
    let s = parse_exposition(text, false).expect("text 0.0.4");
    assert_eq!(total(&s, "node_ipvs_connections_total"), 1_234_500.0);
    assert_eq!(
        value(&s, "x", &labels(&[("a", "q\"\\\n"), ("b", "")])),
        Some(12.0)
    );
    assert_eq!(total(&s, "y"), 12.0);
    let om = "# TYPE ipvs_service_connections counter\n\
              # UNIT ipvs_service_connections connections\n\
              ipvs_service_connections_total{proto=\"TCP\"} 3\n\
              # EOF\n";
    assert_eq!(
        parse_scrape(
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            om
        )
        .expect("OpenMetrics")
        .len(),
        1
    );
    assert!(parse_exposition(&om.replace("# EOF\n", ""), true).is_err());
    assert!(parse_exposition("a 1\na 2\n", false).is_err());
    assert!(parse_exposition("a{b=c} 1\n", false).is_err());
    assert!(parse_scrape("text/html", "a 1\n").is_err());
    assert_eq!(
        dechunk(b"4\r\nab\r\n\r\n3;x=y\r\ncde\r\n0\r\n\r\n").expect("chunks"),
        b"ab\r\ncde"
    );

    let proc = "IP Virtual Server version 1.2.1 (size=4096)\n\
                Prot LocalAddress:Port Scheduler Flags\n\
                \x20 -> RemoteAddress:Port Forward Weight ActiveConn InActConn\n\
                SCTP  0A090909:0050 rr\n\
                \x20 -> 0A010002:1F92      Masq    1      0          0\n\
                UDP  [fd09:0000:0000:0000:0000:0000:0000:0009]:0050 rr\n\
                SCTP  [fd09:0000:0000:0000:0000:0000:0000:0009]:0051 rr\n\
                FWM  0000000A rr\n\
                SCTP  0A090909:0051 rr\n";
    let a = sctp_attribution(proc).expect("attribution");
    let none = labels(&[
        ("proto", ""),
        ("local_address", ""),
        ("local_port", "0"),
        ("local_mark", ""),
    ]);
    let udp6 = labels(&[
        ("proto", "UDP"),
        ("local_address", "fd09::9"),
        ("local_port", "80"),
        ("local_mark", ""),
    ]);
    let fwm = labels(&[
        ("proto", "FWM"),
        ("local_address", ""),
        ("local_port", "0"),
        ("local_mark", "0000000A"),
    ]);
    let key = |a: &str, p: &str| (a.to_owned(), p.to_owned());
    assert_eq!(a[&key("10.9.9.9", "80")], none);
    assert_eq!(a[&key("fd09::9", "81")], udp6);
    assert_eq!(a[&key("10.9.9.9", "81")], fwm);

    // Two SCTP real servers moved onto one FWM group: summed there.
    let backend = |addr: &str, port: &str, remote: &str| {
        let l = labels(&[
            ("proto", "SCTP"),
            ("local_address", addr),
            ("local_port", port),
            ("local_mark", ""),
            ("remote_address", remote),
            ("remote_port", "8082"),
        ]);
        ("node_ipvs_backend_weight".to_owned(), l)
    };
    let mut s = Series::new();
    s.insert(backend("10.9.9.9", "81", "10.1.0.2"), 2.0);
    s.insert(backend("10.9.9.9", "80", "10.1.1.2"), 3.0);
    let moved = misattribute(&s, &a);
    let mut want = fwm.clone();
    want.insert("remote_address".into(), "10.1.0.2".into());
    want.insert("remote_port".into(), "8082".into());
    assert_eq!(value(&moved, "node_ipvs_backend_weight", &want), Some(2.0));
    let summed = collapse(&moved, &COLLAPSED);
    assert_eq!(
        summed.values().copied().collect::<Vec<_>>(),
        vec![3.0, 2.0],
        "{summed:?}"
    );

    // The comparison: node_exporter's view of one table against
    // ipvs-exporter's; a value off, or SCTP labelled as node_exporter
    // labels it, is a difference.
    let rs = |proto: &str, local: &str, remote: &str, port: &str| {
        labels(&[
            ("proto", proto),
            ("local_address", local),
            ("local_port", "80"),
            ("local_mark", ""),
            ("remote_address", remote),
            ("remote_port", port),
        ])
    };
    let sctp_port = SCTP_PORT.to_string();
    let a = sctp_attribution(
        "TCP  0A090909:0050 rr\n  -> 0A010002:1F90 Masq 1 0 0\n\
         SCTP  0A090909:0050 rr\n  -> 0A010002:1F92 Masq 2 0 0\n",
    )
    .expect("attribution");
    let mut ipvs = Series::new();
    let mut node = Series::new();
    for name in TOTALS {
        ipvs.insert((name.to_owned(), Labels::new()), 7.0);
        node.insert((name.to_owned(), Labels::new()), 7.0);
    }
    for (name, v) in BACKEND.iter().zip([1.0, 2.0, 3.0]) {
        let tcp = rs("TCP", "10.9.9.9", "10.1.0.2", "8080");
        ipvs.insert(((*name).to_owned(), tcp.clone()), v);
        node.insert(((*name).to_owned(), tcp), v);
        let sctp = rs("SCTP", "10.9.9.9", "10.1.0.2", &sctp_port);
        ipvs.insert(((*name).to_owned(), sctp), v + 10.0);
        let moved = rs("TCP", "10.9.9.9", "10.1.0.2", &sctp_port);
        node.insert(((*name).to_owned(), moved), v + 10.0);
    }
    assert_eq!(compare_node_series(&node, &ipvs, &a), Ok(()));
    assert_eq!(check_sctp(&node, &ipvs, &a).map(|l| l.len()), Ok(1));
    let mut off = ipvs.clone();
    off.insert(
        (
            "node_ipvs_backend_weight".to_owned(),
            rs("TCP", "10.9.9.9", "10.1.0.2", "8080"),
        ),
        4.0,
    );
    let e = compare_node_series(&node, &off, &a).expect_err("a weight off");
    assert!(e.contains("node_exporter 3, ipvs-exporter 4"), "{e}");
    let as_node = misattribute(&ipvs, &a);
    assert!(compare_node_series(&node, &as_node, &a).is_err());
    assert!(check_sctp(&node, &as_node, &a).is_ok_and(|l| l.is_empty()));
}
