//! ipvs-exporter's series (pure, no kernel): node_exporter's label values
//! for every kind of service (an SCTP service under its own labels, a
//! firewall mark in `/proc/net/ip_vs`'s hexadecimal, IPv6 shortest, an
//! IPv4-mapped address as IPv4), real servers summed when fewer labels are
//! chosen, node_exporter's refusal of unknown labels, both exposition
//! formats, and for any table: every series once, every real server's
//! weight and connections counted exactly once.
//!
//! The same series against Debian's prometheus-node-exporter on real
//! kernels: tests/kernel_exporter.rs.

#[allow(dead_code)]
#[path = "../examples/ipvs-exporter/metrics.rs"]
mod metrics;
mod strategies;

use std::collections::BTreeSet;
use std::net::SocketAddr;

use ipvsctl::model::{
    AddressFamily, ConnCounts, DestinationSnapshot, RealServer, ServiceKey, ServiceSnapshot, Stats,
    VirtualServer,
};
use metrics::{BackendLabels, Format, ScrapeOutcome, Snapshot};
use proptest::prelude::*;

fn sa(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn dest(addr: &str, weight: u32, active: u32, inactive: u32) -> DestinationSnapshot {
    let mut stats = Stats::default();
    stats.conns = u64::from(active + inactive);
    stats.in_bytes = 1 << 40;
    DestinationSnapshot::new(RealServer::new(sa(addr)).with_weight(weight))
        .with_conns(ConnCounts::new(active, inactive, 1))
        .with_stats(stats)
}

fn service(
    key: ServiceKey,
    dests: Vec<DestinationSnapshot>,
) -> (ServiceSnapshot, Vec<DestinationSnapshot>) {
    let mut stats = Stats::default();
    stats.conns = dests.iter().map(|d| d.stats.conns).sum();
    (
        ServiceSnapshot::new(VirtualServer::new(key)).with_stats(stats),
        dests,
    )
}

fn table() -> Snapshot {
    let mut totals = Stats::default();
    totals.conns = 7;
    totals.in_pkts = 11;
    totals.out_pkts = 8;
    totals.in_bytes = 556;
    totals.out_bytes = u64::MAX;
    Snapshot {
        totals: Some(totals),
        services: vec![
            service(
                ServiceKey::tcp(sa("10.0.0.1:80")),
                vec![
                    dest("10.1.0.1:8080", 3, 2, 1),
                    dest("10.1.0.2:8080", 0, 0, 4),
                ],
            ),
            service(
                ServiceKey::sctp(sa("10.0.0.3:9")),
                vec![dest("10.1.0.9:9", 1, 0, 0)],
            ),
            service(
                ServiceKey::udp(sa("[2001:db8::1]:53")),
                vec![dest("[2001:db8:1::5]:53", 2, 0, 1)],
            ),
            service(
                ServiceKey::fwmark(42, AddressFamily::Inet),
                vec![dest("10.1.0.2:0", 1, 0, 0)],
            ),
            service(
                ServiceKey::fwmark(42, AddressFamily::Inet6),
                vec![dest("[2001:db8:1::6]:0", 5, 1, 0)],
            ),
            service(
                ServiceKey::tcp(sa("[::ffff:10.0.0.9]:443")),
                vec![dest("[::ffff:10.1.0.7]:443", 1, 0, 0)],
            ),
        ],
    }
}

fn render(snapshot: Snapshot, labels: &BackendLabels, format: Format) -> String {
    let mut out = String::new();
    let outcome = ScrapeOutcome {
        seconds: 0.25,
        success: true,
    };
    metrics::render(snapshot, labels, outcome, format, &mut out);
    out
}

/// The lines of `text` whose series name is exactly `name`.
fn series<'a>(text: &'a str, name: &str) -> Vec<&'a str> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| l.split(['{', ' ']).next() == Some(name))
        .collect()
}

#[test]
fn node_exporter_series_with_its_label_values() {
    let text = render(table(), &BackendLabels::default(), Format::Text);
    assert_eq!(
        series(&text, "node_ipvs_backend_weight"),
        [
            r#"node_ipvs_backend_weight{local_address="10.0.0.1",local_port="80",remote_address="10.1.0.1",remote_port="8080",proto="TCP",local_mark=""} 3"#,
            r#"node_ipvs_backend_weight{local_address="10.0.0.1",local_port="80",remote_address="10.1.0.2",remote_port="8080",proto="TCP",local_mark=""} 0"#,
            r#"node_ipvs_backend_weight{local_address="10.0.0.3",local_port="9",remote_address="10.1.0.9",remote_port="9",proto="SCTP",local_mark=""} 1"#,
            r#"node_ipvs_backend_weight{local_address="2001:db8::1",local_port="53",remote_address="2001:db8:1::5",remote_port="53",proto="UDP",local_mark=""} 2"#,
            r#"node_ipvs_backend_weight{local_address="",local_port="0",remote_address="10.1.0.2",remote_port="0",proto="FWM",local_mark="0000002A"} 1"#,
            r#"node_ipvs_backend_weight{local_address="",local_port="0",remote_address="2001:db8:1::6",remote_port="0",proto="FWM",local_mark="0000002A"} 5"#,
            r#"node_ipvs_backend_weight{local_address="10.0.0.9",local_port="443",remote_address="10.1.0.7",remote_port="443",proto="TCP",local_mark=""} 1"#,
        ]
    );
    assert_eq!(
        series(&text, "node_ipvs_backend_connections_inactive")[1],
        r#"node_ipvs_backend_connections_inactive{local_address="10.0.0.1",local_port="80",remote_address="10.1.0.2",remote_port="8080",proto="TCP",local_mark=""} 4"#
    );
    // node_exporter's help texts and types, word for word.
    for line in [
        "# HELP node_ipvs_connections_total The total number of connections made.",
        "# TYPE node_ipvs_connections_total counter",
        "node_ipvs_connections_total 7",
        "# HELP node_ipvs_incoming_packets_total The total number of incoming packets.",
        "node_ipvs_incoming_packets_total 11",
        "# HELP node_ipvs_outgoing_packets_total The total number of outgoing packets.",
        "node_ipvs_outgoing_packets_total 8",
        "# HELP node_ipvs_incoming_bytes_total The total amount of incoming data.",
        "node_ipvs_incoming_bytes_total 556",
        "# HELP node_ipvs_outgoing_bytes_total The total amount of outgoing data.",
        "node_ipvs_outgoing_bytes_total 18446744073709551615",
        "# HELP node_ipvs_backend_connections_active The current active connections by local and remote address.",
        "# TYPE node_ipvs_backend_connections_active gauge",
        "# HELP node_ipvs_backend_connections_inactive The current inactive connections by local and remote address.",
        "# HELP node_ipvs_backend_weight The current backend weight by local and remote address.",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "no line {line:?} in\n{text}"
        );
    }
}

#[test]
fn the_exporter_s_own_series() {
    let text = render(table(), &BackendLabels::default(), Format::Text);
    // Two firewall-mark services with one mark, told apart by family.
    assert_eq!(
        series(&text, "ipvs_service_connections_total")[3..5],
        [
            r#"ipvs_service_connections_total{proto="FWM",local_address="",local_port="0",local_mark="0000002A",family="ipv4"} 0"#,
            r#"ipvs_service_connections_total{proto="FWM",local_address="",local_port="0",local_mark="0000002A",family="ipv6"} 1"#,
        ]
    );
    assert_eq!(
        series(&text, "ipvs_backend_incoming_bytes_total")[0],
        r#"ipvs_backend_incoming_bytes_total{local_address="10.0.0.1",local_port="80",remote_address="10.1.0.1",remote_port="8080",proto="TCP",local_mark=""} 1099511627776"#
    );
    assert_eq!(
        series(&text, "ipvs_service_info")[0],
        r#"ipvs_service_info{proto="TCP",local_address="10.0.0.1",local_port="80",local_mark="",family="ipv4",scheduler="wlc",pe=""} 1"#
    );
    assert_eq!(
        series(&text, "ipvs_service_backends")[0],
        r#"ipvs_service_backends{proto="TCP",local_address="10.0.0.1",local_port="80",local_mark="",family="ipv4"} 2"#
    );
    assert_eq!(
        series(&text, "ipvs_backend_connections_persistent").len(),
        7
    );
    assert_eq!(
        series(&text, "ipvs_scrape_success"),
        ["ipvs_scrape_success 1"]
    );
    assert_eq!(
        series(&text, "ipvs_scrape_duration_seconds"),
        ["ipvs_scrape_duration_seconds 0.25"]
    );
}

#[test]
fn fewer_labels_sum_the_real_servers_as_node_exporter_does() {
    let labels = BackendLabels::parse("proto,local_port,,local_address").unwrap();
    let text = render(table(), &labels, Format::Text);
    let weights = series(&text, "node_ipvs_backend_weight");
    assert_eq!(
        weights[..2],
        [
            r#"node_ipvs_backend_weight{local_address="10.0.0.1",local_port="80",proto="TCP"} 3"#,
            r#"node_ipvs_backend_weight{local_address="10.0.0.3",local_port="9",proto="SCTP"} 1"#,
        ]
    );
    // The two firewall-mark services (one mark, two families) are one series.
    assert!(
        weights.contains(
            &r#"node_ipvs_backend_weight{local_address="",local_port="0",proto="FWM"} 6"#
        ),
        "{weights:#?}"
    );
    assert_eq!(weights.len(), 5);
    assert_eq!(
        series(&text, "node_ipvs_backend_connections_inactive")[0],
        r#"node_ipvs_backend_connections_inactive{local_address="10.0.0.1",local_port="80",proto="TCP"} 5"#
    );
    // No label at all: one series of everything.
    let text = render(table(), &BackendLabels::parse("").unwrap(), Format::Text);
    assert_eq!(
        series(&text, "node_ipvs_backend_weight"),
        ["node_ipvs_backend_weight 13"]
    );
}

#[test]
fn unknown_labels_are_refused_with_node_exporter_s_message() {
    assert_eq!(
        BackendLabels::parse("proto,foo,bogus,foo").unwrap_err(),
        r#"unknown IPVS backend labels: "bogus, foo""#
    );
    assert_eq!(
        BackendLabels::parse("proto").unwrap(),
        BackendLabels::parse("proto,").unwrap()
    );
}

#[test]
fn no_totals_no_total_series_and_a_failed_scrape_says_so() {
    let mut out = String::new();
    let failed = ScrapeOutcome {
        seconds: 1.5,
        success: false,
    };
    metrics::render(
        Snapshot::default(),
        &BackendLabels::default(),
        failed,
        Format::Text,
        &mut out,
    );
    assert!(!out.contains("node_ipvs"), "{out}");
    assert!(!out.contains("ipvs_service"), "{out}");
    assert_eq!(
        series(&out, "ipvs_scrape_success"),
        ["ipvs_scrape_success 0"]
    );
}

#[test]
fn openmetrics_when_asked_for() {
    assert_eq!(Format::from_accept(None), Format::Text);
    let prometheus =
        "application/openmetrics-text;version=1.0.0;q=0.5,text/plain;version=0.0.4;q=0.4";
    assert_eq!(Format::from_accept(Some(prometheus)), Format::OpenMetrics);
    assert_eq!(Format::from_accept(Some("text/plain")), Format::Text);
    let text = render(table(), &BackendLabels::default(), Format::OpenMetrics);
    assert!(text.ends_with("# EOF\n"), "{text}");
    assert!(text.contains("# TYPE node_ipvs_connections counter\nnode_ipvs_connections_total 7\n"));
    assert_eq!(series(&text, "node_ipvs_backend_weight").len(), 7);
}

/// A table of up to 12 services of any kind with up to 6 real servers each.
fn any_table() -> impl Strategy<Value = Snapshot> {
    let service = strategies::key().prop_flat_map(|key| {
        (
            Just(key),
            proptest::collection::vec(
                (
                    strategies::real_server(key.family()),
                    0..1000u32,
                    0..1000u32,
                ),
                0..6,
            ),
        )
    });
    proptest::collection::vec(service, 0..12).prop_map(|services| {
        let mut seen = BTreeSet::new();
        let services = services
            .into_iter()
            .filter(|(key, _)| seen.insert(*key))
            .map(|(key, dests)| {
                let mut addrs = BTreeSet::new();
                let dests = dests
                    .into_iter()
                    .filter(|(rs, _, _)| addrs.insert(rs.addr))
                    .map(|(rs, active, inactive)| {
                        DestinationSnapshot::new(rs)
                            .with_conns(ConnCounts::new(active, inactive, 0))
                    })
                    .collect();
                (ServiceSnapshot::new(VirtualServer::new(key)), dests)
            })
            .collect();
        Snapshot {
            totals: Some(Stats::default()),
            services,
        }
    })
}

fn any_labels() -> impl Strategy<Value = BackendLabels> {
    proptest::sample::subsequence(
        vec![
            "local_address",
            "local_port",
            "remote_address",
            "remote_port",
            "proto",
            "local_mark",
        ],
        0..=6,
    )
    .prop_map(|names| BackendLabels::parse(&names.join(",")).unwrap())
}

proptest! {
    #[test]
    fn every_series_once_and_every_real_server_counted_once(
        snapshot in any_table(),
        labels in any_labels(),
    ) {
        let dests: Vec<&DestinationSnapshot> =
            snapshot.services.iter().flat_map(|(_, d)| d).collect();
        let weight: u64 = dests.iter().map(|d| u64::from(d.server.weight)).sum();
        let active: u64 = dests.iter().map(|d| u64::from(d.conns.active)).sum();
        let count = dests.len();
        let services = snapshot.services.len();
        let text = render(snapshot, &labels, Format::Text);
        let mut names = BTreeSet::new();
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let (name, _) = line.rsplit_once(' ').expect("a sample line");
            prop_assert!(names.insert(name.to_owned()), "series twice: {}", name);
        }
        let sum = |name: &str| -> u64 {
            series(&text, name)
                .iter()
                .map(|l| l.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap())
                .sum()
        };
        prop_assert_eq!(sum("node_ipvs_backend_weight"), weight);
        prop_assert_eq!(sum("node_ipvs_backend_connections_active"), active);
        prop_assert!(series(&text, "node_ipvs_backend_weight").len() <= count);
        prop_assert_eq!(series(&text, "ipvs_service_info").len(), services);
        prop_assert_eq!(sum("ipvs_service_backends"), count as u64);
    }
}
