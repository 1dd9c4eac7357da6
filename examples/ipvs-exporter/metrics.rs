//! What one scrape exposes, from one reading of the IPVS table: node_exporter's
//! `node_ipvs_*` series (same names, help, labels and values) and the
//! exporter's own `ipvs_*` series. Pure: no kernel, no I/O.
//!
//! node_exporter's ipvs collector reads `/proc/net/ip_vs` and
//! `/proc/net/ip_vs_stats`. Its label values are what those files print, as
//! its procfs library parses them, and this module writes the same:
//!
//! * `proto`: `TCP`, `UDP`, or `FWM` for a firewall-mark service. node_exporter
//!   does not recognise the `SCTP` lines of `/proc/net/ip_vs` and files an
//!   SCTP service's real servers under the service listed before it; here
//!   they are `SCTP`, under their own service.
//! * `local_address`: the virtual address; IPv6 in its shortest form, an
//!   IPv4-mapped IPv6 address as IPv4 (Go's `net.IP.String`); empty for a
//!   firewall-mark service.
//! * `local_port`: the virtual port in decimal, `0` for a firewall-mark service.
//! * `local_mark`: the firewall mark as the kernel prints it there, eight
//!   upper-case hexadecimal digits (`0000002A`); empty for other services.
//! * `remote_address`, `remote_port`: the real server, written the same way.
//!
//! Real servers whose selected labels are equal (fewer labels chosen with
//! `--collector.ipvs.backend-labels`) are one series holding their sum, as
//! in node_exporter (its weights are summed too).

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::fmt::{self, Write as _};
use std::net::IpAddr;

use ipvsctl::model::{
    AddressFamily, DestinationSnapshot, Protocol, ServiceFlags, ServiceKey, ServiceSnapshot, Stats,
};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeLabelSet, EncodeLabelValue, LabelSetEncoder, LabelValueEncoder,
    NoLabelSet,
};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

/// One reading of the table: what a scrape exposes.
#[derive(Debug, Default)]
pub struct Snapshot {
    /// The namespace's totals (`/proc/net/ip_vs_stats`); `None` when the
    /// file is absent (IPVS not loaded), as node_exporter then writes none.
    pub totals: Option<Stats>,
    /// Every service with its real servers, in the kernel's order.
    pub services: Vec<(ServiceSnapshot, Vec<DestinationSnapshot>)>,
}

/// How a scrape went: written as `ipvs_scrape_*` series.
#[derive(Debug, Clone, Copy, Default)]
pub struct ScrapeOutcome {
    /// Seconds the reading of the table took.
    pub seconds: f64,
    /// Whether the whole table was read.
    pub success: bool,
}

/// A label node_exporter's `--collector.ipvs.backend-labels` can choose.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendLabel {
    LocalAddress,
    LocalPort,
    RemoteAddress,
    RemotePort,
    Proto,
    LocalMark,
}

impl BackendLabel {
    /// In node_exporter's order, which is also the order of the labels in
    /// each series.
    pub const ALL: [BackendLabel; 6] = [
        BackendLabel::LocalAddress,
        BackendLabel::LocalPort,
        BackendLabel::RemoteAddress,
        BackendLabel::RemotePort,
        BackendLabel::Proto,
        BackendLabel::LocalMark,
    ];

    /// The label's name.
    pub fn name(self) -> &'static str {
        match self {
            BackendLabel::LocalAddress => "local_address",
            BackendLabel::LocalPort => "local_port",
            BackendLabel::RemoteAddress => "remote_address",
            BackendLabel::RemotePort => "remote_port",
            BackendLabel::Proto => "proto",
            BackendLabel::LocalMark => "local_mark",
        }
    }
}

/// The labels of the real-server series, chosen as node_exporter's
/// `--collector.ipvs.backend-labels` chooses them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendLabels(Vec<BackendLabel>);

impl Default for BackendLabels {
    fn default() -> Self {
        BackendLabels(BackendLabel::ALL.to_vec())
    }
}

impl BackendLabels {
    /// A comma-separated list of label names, in any order, empty names
    /// ignored; the series carry them in node_exporter's order. An unknown
    /// name is refused with node_exporter's message.
    pub fn parse(list: &str) -> Result<BackendLabels, String> {
        let names: Vec<&str> = list.split(',').filter(|n| !n.is_empty()).collect();
        let mut unknown: Vec<&str> = names
            .iter()
            .copied()
            .filter(|n| BackendLabel::ALL.iter().all(|l| l.name() != *n))
            .collect();
        if !unknown.is_empty() {
            unknown.sort_unstable();
            unknown.dedup();
            return Err(format!(
                "unknown IPVS backend labels: {:?}",
                unknown.join(", ")
            ));
        }
        Ok(BackendLabels(
            BackendLabel::ALL
                .into_iter()
                .filter(|l| names.contains(&l.name()))
                .collect(),
        ))
    }

    fn has(&self, label: BackendLabel) -> bool {
        self.0.contains(&label)
    }
}

/// A service's protocol as node_exporter's `proto` label names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Proto {
    Tcp,
    Udp,
    Sctp,
    Fwm,
    /// A protocol IPVS does not balance; `IP_<number>` (not seen in practice).
    Other(u16),
}

impl Proto {
    fn of(key: &ServiceKey) -> Proto {
        match key {
            ServiceKey::FwMark { .. } => Proto::Fwm,
            ServiceKey::Addr { protocol, .. } => match protocol {
                Protocol::Tcp => Proto::Tcp,
                Protocol::Udp => Proto::Udp,
                Protocol::Sctp => Proto::Sctp,
                other => Proto::Other(other.to_raw()),
            },
        }
    }
}

impl fmt::Display for Proto {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Proto::Tcp => f.write_str("TCP"),
            Proto::Udp => f.write_str("UDP"),
            Proto::Sctp => f.write_str("SCTP"),
            Proto::Fwm => f.write_str("FWM"),
            Proto::Other(n) => write!(f, "IP_{n}"),
        }
    }
}

/// An address as Go's `net.IP.String` writes it (an IPv4-mapped IPv6
/// address as IPv4); nothing for none.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct GoIp(Option<IpAddr>);

impl fmt::Display for GoIp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            None => Ok(()),
            Some(IpAddr::V6(v6)) => match v6.to_ipv4_mapped() {
                Some(v4) => write!(f, "{v4}"),
                None => write!(f, "{v6}"),
            },
            Some(IpAddr::V4(v4)) => write!(f, "{v4}"),
        }
    }
}

/// The firewall mark as `/proc/net/ip_vs` prints it; nothing for none.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Mark(Option<u32>);

impl fmt::Display for Mark {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            None => Ok(()),
            Some(m) => write!(f, "{m:08X}"),
        }
    }
}

/// A label value written through `Display`.
struct Shown<T>(T);

impl<T: fmt::Display> EncodeLabelValue for Shown<T> {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), fmt::Error> {
        write!(encoder, "{}", self.0)
    }
}

/// The service's side of the labels: (proto, local_address, local_port, local_mark).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct ServiceSide {
    proto: Proto,
    address: GoIp,
    port: u16,
    mark: Mark,
    family: AddressFamily,
}

impl ServiceSide {
    fn of(key: &ServiceKey) -> ServiceSide {
        match key {
            ServiceKey::Addr { addr, .. } => ServiceSide {
                proto: Proto::of(key),
                address: GoIp(Some(addr.ip())),
                port: addr.port(),
                mark: Mark(None),
                family: key.family(),
            },
            ServiceKey::FwMark { mark, .. } => ServiceSide {
                proto: Proto::Fwm,
                address: GoIp(None),
                port: 0,
                mark: Mark(Some(*mark)),
                family: key.family(),
            },
        }
    }
}

/// The labels of a service series: proto, local_address, local_port,
/// local_mark, family (`ipv4` or `ipv6`: two firewall-mark services, one
/// per family, may have the same mark).
struct ServiceLabels(ServiceSide);

impl EncodeLabelSet for ServiceLabels {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), fmt::Error> {
        let s = &self.0;
        let family = match s.family {
            AddressFamily::Inet => "ipv4",
            AddressFamily::Inet6 => "ipv6",
        };
        label(encoder, "proto", Shown(s.proto))?;
        label(encoder, "local_address", Shown(s.address))?;
        label(encoder, "local_port", Shown(s.port))?;
        label(encoder, "local_mark", Shown(s.mark))?;
        label(encoder, "family", family)
    }
}

/// The labels of a real-server series: the chosen ones, the others left
/// at one value so that they collapse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct BackendKey {
    service: ServiceSide,
    remote_address: GoIp,
    remote_port: u16,
}

impl BackendKey {
    fn new(labels: &BackendLabels, key: &ServiceKey, dest: &DestinationSnapshot) -> BackendKey {
        let mut service = ServiceSide::of(key);
        // The family is not one of node_exporter's labels: never a key.
        service.family = AddressFamily::Inet;
        if !labels.has(BackendLabel::Proto) {
            service.proto = Proto::Tcp;
        }
        if !labels.has(BackendLabel::LocalAddress) {
            service.address = GoIp(None);
        }
        if !labels.has(BackendLabel::LocalPort) {
            service.port = 0;
        }
        if !labels.has(BackendLabel::LocalMark) {
            service.mark = Mark(None);
        }
        let addr = dest.server.addr;
        BackendKey {
            service,
            remote_address: GoIp(labels.has(BackendLabel::RemoteAddress).then(|| addr.ip())),
            remote_port: if labels.has(BackendLabel::RemotePort) {
                addr.port()
            } else {
                0
            },
        }
    }
}

/// A real-server series' labels: its key and which labels to write.
struct BackendLabelSet<'a>(&'a BackendKey, &'a BackendLabels);

impl EncodeLabelSet for BackendLabelSet<'_> {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), fmt::Error> {
        let (k, chosen) = (self.0, self.1);
        for l in &chosen.0 {
            match l {
                BackendLabel::LocalAddress => label(encoder, l.name(), Shown(k.service.address))?,
                BackendLabel::LocalPort => label(encoder, l.name(), Shown(k.service.port))?,
                BackendLabel::RemoteAddress => label(encoder, l.name(), Shown(k.remote_address))?,
                BackendLabel::RemotePort => label(encoder, l.name(), Shown(k.remote_port))?,
                BackendLabel::Proto => label(encoder, l.name(), Shown(k.service.proto))?,
                BackendLabel::LocalMark => label(encoder, l.name(), Shown(k.service.mark))?,
            }
        }
        Ok(())
    }
}

fn label(
    encoder: &mut LabelSetEncoder,
    name: &str,
    value: impl EncodeLabelValue,
) -> Result<(), fmt::Error> {
    use prometheus_client::encoding::EncodeLabel;
    (name, value).encode(encoder.encode_label())
}

/// The sums of the real servers that share one series.
#[derive(Debug, Clone, Copy, Default)]
struct BackendSums {
    active: u64,
    inactive: u64,
    weight: u64,
    persistent: u64,
    /// The counters (the rates are not summed: not exposed).
    traffic: Stats,
}

/// The snapshot's real servers grouped by their series, in first-seen order.
fn backends(snapshot: &Snapshot, labels: &BackendLabels) -> Vec<(BackendKey, BackendSums)> {
    let count = snapshot.services.iter().map(|(_, d)| d.len()).sum();
    let mut out: Vec<(BackendKey, BackendSums)> = Vec::with_capacity(count);
    let mut index: HashMap<BackendKey, usize> = HashMap::with_capacity(count);
    for (service, dests) in &snapshot.services {
        for d in dests {
            let key = BackendKey::new(labels, &service.service.key, d);
            let at = match index.entry(key) {
                Entry::Occupied(e) => *e.get(),
                Entry::Vacant(e) => {
                    out.push((key, BackendSums::default()));
                    *e.insert(out.len() - 1)
                }
            };
            let sums = &mut out[at].1;
            sums.active += u64::from(d.conns.active);
            sums.inactive += u64::from(d.conns.inactive);
            sums.weight += u64::from(d.server.weight);
            sums.persistent += u64::from(d.conns.persistent);
            let t = &mut sums.traffic;
            t.conns += d.stats.conns;
            t.in_pkts += d.stats.in_pkts;
            t.out_pkts += d.stats.out_pkts;
            t.in_bytes += d.stats.in_bytes;
            t.out_bytes += d.stats.out_bytes;
        }
    }
    out
}

/// Help texts of node_exporter's series, word for word (dashboards and
/// alert rules show them).
mod help {
    pub const CONNECTIONS: &str = "The total number of connections made.";
    pub const IN_PKTS: &str = "The total number of incoming packets.";
    pub const OUT_PKTS: &str = "The total number of outgoing packets.";
    pub const IN_BYTES: &str = "The total amount of incoming data.";
    pub const OUT_BYTES: &str = "The total amount of outgoing data.";
    pub const ACTIVE: &str = "The current active connections by local and remote address.";
    pub const INACTIVE: &str = "The current inactive connections by local and remote address.";
    pub const WEIGHT: &str = "The current backend weight by local and remote address.";
}

/// One value of a series family: its name (or name's tail), what its help
/// says, and where the value comes from.
struct Field<T> {
    name: &'static str,
    what: &'static str,
    value: fn(&T) -> u64,
}

/// The five counters of a [`Stats`], named as they are under a prefix.
const COUNTERS: [Field<Stats>; 5] = [
    Field {
        name: "connections",
        what: "connections scheduled",
        value: |s| s.conns,
    },
    Field {
        name: "incoming_packets",
        what: "incoming packets",
        value: |s| s.in_pkts,
    },
    Field {
        name: "outgoing_packets",
        what: "outgoing packets",
        value: |s| s.out_pkts,
    },
    Field {
        name: "incoming_bytes",
        what: "incoming bytes",
        value: |s| s.in_bytes,
    },
    Field {
        name: "outgoing_bytes",
        what: "outgoing bytes",
        value: |s| s.out_bytes,
    },
];

/// node_exporter's three real-server gauges.
const BACKEND_GAUGES: [Field<BackendSums>; 3] = [
    Field {
        name: "node_ipvs_backend_connections_active",
        what: help::ACTIVE,
        value: |s| s.active,
    },
    Field {
        name: "node_ipvs_backend_connections_inactive",
        what: help::INACTIVE,
        value: |s| s.inactive,
    },
    Field {
        name: "node_ipvs_backend_weight",
        what: help::WEIGHT,
        value: |s| s.weight,
    },
];

/// The series of one scrape, as a prometheus-client collector.
#[derive(Debug)]
struct Scrape {
    snapshot: Snapshot,
    labels: BackendLabels,
    outcome: ScrapeOutcome,
}

impl Collector for Scrape {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        let backends = backends(&self.snapshot, &self.labels);
        self.node_exporter_series(&mut encoder, &backends)?;
        self.service_series(&mut encoder)?;
        self.backend_series(&mut encoder, &backends)?;
        self.scrape_series(&mut encoder)
    }
}

impl Scrape {
    /// node_exporter's eight families.
    fn node_exporter_series(
        &self,
        e: &mut DescriptorEncoder,
        backends: &[(BackendKey, BackendSums)],
    ) -> Result<(), fmt::Error> {
        if let Some(t) = &self.snapshot.totals {
            for (name, help, value) in [
                ("node_ipvs_connections", help::CONNECTIONS, t.conns),
                ("node_ipvs_incoming_packets", help::IN_PKTS, t.in_pkts),
                ("node_ipvs_outgoing_packets", help::OUT_PKTS, t.out_pkts),
                ("node_ipvs_incoming_bytes", help::IN_BYTES, t.in_bytes),
                ("node_ipvs_outgoing_bytes", help::OUT_BYTES, t.out_bytes),
            ] {
                e.encode_descriptor(name, help, None, MetricType::Counter)?
                    .encode_counter::<NoLabelSet, _, u64>(&value, None)?;
            }
        }
        if backends.is_empty() {
            return Ok(());
        }
        for f in &BACKEND_GAUGES {
            let mut m = e.encode_descriptor(f.name, f.what, None, MetricType::Gauge)?;
            for (key, sums) in backends {
                m.encode_family(&BackendLabelSet(key, &self.labels))?
                    .encode_gauge(&(f.value)(sums))?;
            }
        }
        Ok(())
    }

    /// Per service: the 64-bit counters, the number of real servers and the
    /// settings.
    fn service_series(&self, e: &mut DescriptorEncoder) -> Result<(), fmt::Error> {
        let services = &self.snapshot.services;
        if services.is_empty() {
            return Ok(());
        }
        for f in &COUNTERS {
            let name = format!("ipvs_service_{}", f.name);
            let help = format!("The total number of {} by the service.", f.what);
            let mut m = e.encode_descriptor(&name, &help, None, MetricType::Counter)?;
            for (s, _) in services {
                m.encode_family(&ServiceLabels(ServiceSide::of(&s.service.key)))?
                    .encode_counter::<NoLabelSet, _, u64>(&(f.value)(&s.stats), None)?;
            }
        }
        let mut m = e.encode_descriptor(
            "ipvs_service_backends",
            "The number of real servers of the service.",
            None,
            MetricType::Gauge,
        )?;
        for (s, dests) in services {
            m.encode_family(&ServiceLabels(ServiceSide::of(&s.service.key)))?
                .encode_gauge(&(dests.len() as u64))?;
        }
        let mut m = e.encode_descriptor(
            "ipvs_service_persistence_timeout_seconds",
            "The persistence timeout of the service, 0 when it is not persistent.",
            None,
            MetricType::Gauge,
        )?;
        for (s, _) in services {
            let vs = &s.service;
            let persistent = vs.flags.contains(ServiceFlags::PERSISTENT);
            let timeout = if persistent { vs.timeout } else { 0 };
            m.encode_family(&ServiceLabels(ServiceSide::of(&vs.key)))?
                .encode_gauge(&u64::from(timeout))?;
        }
        let mut m = e.encode_descriptor(
            "ipvs_service_info",
            "The service's scheduler and persistence engine, as labels; always 1.",
            None,
            MetricType::Gauge,
        )?;
        for (s, _) in services {
            let vs = &s.service;
            let info = InfoLabels {
                service: ServiceLabels(ServiceSide::of(&vs.key)),
                scheduler: vs.scheduler.name(),
                pe: vs.persistence_engine.as_ref().map_or("", |pe| pe.name()),
            };
            m.encode_family(&info)?.encode_gauge(&1u64)?;
        }
        Ok(())
    }

    /// Per real server (per series of the chosen labels): the 64-bit
    /// counters and the persistence templates.
    fn backend_series(
        &self,
        e: &mut DescriptorEncoder,
        backends: &[(BackendKey, BackendSums)],
    ) -> Result<(), fmt::Error> {
        if backends.is_empty() {
            return Ok(());
        }
        for f in &COUNTERS {
            let name = format!("ipvs_backend_{}", f.name);
            let help = format!("The total number of {} by the real server.", f.what);
            let mut m = e.encode_descriptor(&name, &help, None, MetricType::Counter)?;
            for (key, s) in backends {
                m.encode_family(&BackendLabelSet(key, &self.labels))?
                    .encode_counter::<NoLabelSet, _, u64>(&(f.value)(&s.traffic), None)?;
            }
        }
        let mut m = e.encode_descriptor(
            "ipvs_backend_connections_persistent",
            "The current persistence templates by local and remote address.",
            None,
            MetricType::Gauge,
        )?;
        for (key, s) in backends {
            m.encode_family(&BackendLabelSet(key, &self.labels))?
                .encode_gauge(&s.persistent)?;
        }
        Ok(())
    }

    fn scrape_series(&self, e: &mut DescriptorEncoder) -> Result<(), fmt::Error> {
        e.encode_descriptor(
            "ipvs_scrape_duration_seconds",
            "Seconds the reading of the IPVS table took.",
            None,
            MetricType::Gauge,
        )?
        .encode_gauge(&self.outcome.seconds)?;
        e.encode_descriptor(
            "ipvs_scrape_success",
            "1 when the whole IPVS table was read, else 0.",
            None,
            MetricType::Gauge,
        )?
        .encode_gauge(&u64::from(self.outcome.success))
    }
}

/// `ipvs_service_info`'s labels: the service's, then its settings.
struct InfoLabels<'a> {
    service: ServiceLabels,
    scheduler: &'a str,
    pe: &'a str,
}

impl EncodeLabelSet for InfoLabels<'_> {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), fmt::Error> {
        self.service.encode(encoder)?;
        label(encoder, "scheduler", self.scheduler)?;
        label(encoder, "pe", self.pe)
    }
}

/// The exposition format a scrape is written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Prometheus text format 0.0.4, as node_exporter writes by default.
    Text,
    /// OpenMetrics 1.0 text (`# EOF` at the end).
    OpenMetrics,
}

impl Format {
    /// The format an HTTP `Accept` header asks for: OpenMetrics when it
    /// names `application/openmetrics-text`, else the text format.
    pub fn from_accept(accept: Option<&str>) -> Format {
        match accept {
            Some(a) if a.contains("application/openmetrics-text") => Format::OpenMetrics,
            _ => Format::Text,
        }
    }

    /// The response's `Content-Type`.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Text => "text/plain; version=0.0.4; charset=utf-8",
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
        }
    }
}

/// Writes the series of `snapshot` into `out`.
pub fn render(
    snapshot: Snapshot,
    labels: &BackendLabels,
    outcome: ScrapeOutcome,
    format: Format,
    out: &mut String,
) {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Scrape {
        snapshot,
        labels: labels.clone(),
        outcome,
    }));
    // Writing into a String cannot fail, nor can the collector.
    let written = match format {
        Format::Text => prometheus_client::encoding::prometheus_text::encode(out, &registry),
        Format::OpenMetrics => prometheus_client::encoding::text::encode(out, &registry),
    };
    debug_assert!(written.is_ok());
}
