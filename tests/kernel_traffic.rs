//! End-to-end traffic through virtual servers programmed by ipvsctl.
//!
//! IPv4 TCP and UDP services with the common schedulers and forwarding
//! methods. Each test builds its own little network out of fresh namespaces
//! (a client, an IPVS router and backends, see tests/support/traffic.rs),
//! compares how the connections spread with what the scheduler promises and
//! checks the service and destination counters that ipvsctl decodes.
//!
//! Runs in the VM through the cargo runner (`cargo test --test kernel_traffic`).

mod support;

use ipvsctl::model::{AddressFamily, ForwardMethod, RealServer, Scheduler, VirtualServer};
use support::traffic::{
    BPORT, Lab, Proto, REQUEST, VPORT, check_stats, counters, expect, stable_stats, sum, vkey,
};

/// Connections per case.
const N: usize = 30;
/// The family of every service here (tests/kernel_traffic_kinds.rs has IPv6).
const V4: AddressFamily = AddressFamily::Inet;

/// rr over three masqueraded backends, TCP: each gets exactly a third, and
/// the counters match.
#[test]
fn tcp_masquerade_rr_three_backends() {
    let lab = Lab::new(3, BPORT, false);
    let vs = VirtualServer::new(vkey(Proto::Tcp, V4)).with_scheduler(Scheduler::RoundRobin);
    lab.program(
        &vs,
        &[(0, 1), (1, 1), (2, 1)],
        BPORT,
        ForwardMethod::Masquerade,
    );
    let round = lab.spread(Proto::Tcp, V4, N);
    assert_eq!(round.seen, expect(&[(0, N / 3), (1, N / 3), (2, N / 3)]));
    check_stats(&lab, &vs.key, &[round]);
}

/// The same over UDP: every fresh source port is a new IPVS connection.
#[test]
fn udp_masquerade_rr_three_backends() {
    let lab = Lab::new(3, BPORT, false);
    let vs = VirtualServer::new(vkey(Proto::Udp, V4)).with_scheduler(Scheduler::RoundRobin);
    lab.program(
        &vs,
        &[(0, 1), (1, 1), (2, 1)],
        BPORT,
        ForwardMethod::Masquerade,
    );
    let round = lab.spread(Proto::Udp, V4, N);
    assert_eq!(round.seen, expect(&[(0, N / 3), (1, N / 3), (2, N / 3)]));
    check_stats(&lab, &vs.key, &[round]);
}

/// wrr honours weights 3:2:1 exactly over a multiple of their sum.
#[test]
fn tcp_wrr_honours_weights() {
    let lab = Lab::new(3, BPORT, false);
    let vs = VirtualServer::new(vkey(Proto::Tcp, V4)).with_scheduler(Scheduler::WeightedRoundRobin);
    lab.program(
        &vs,
        &[(0, 3), (1, 2), (2, 1)],
        BPORT,
        ForwardMethod::Masquerade,
    );
    let round = lab.spread(Proto::Tcp, V4, N);
    assert_eq!(round.seen, expect(&[(0, N / 2), (1, N / 3), (2, N / 6)]));
    check_stats(&lab, &vs.key, &[round]);
}

/// A weight-0 backend gets no new connections, also after a live weight
/// change made with `update_destination`.
#[test]
fn tcp_weight_zero_gets_no_new_connections() {
    let lab = Lab::new(3, BPORT, false);
    let vs = VirtualServer::new(vkey(Proto::Tcp, V4)).with_scheduler(Scheduler::RoundRobin);
    lab.program(
        &vs,
        &[(0, 1), (1, 1), (2, 0)],
        BPORT,
        ForwardMethod::Masquerade,
    );
    let round = lab.spread(Proto::Tcp, V4, N);
    assert_eq!(round.seen, expect(&[(0, N / 2), (1, N / 2)]));
    check_stats(&lab, &vs.key, &[round]);

    // Drain backend 0 and bring backend 2 in: only 1 and 2 answer now.
    let set = |i: usize, w: u32| {
        let rs = RealServer::new(Lab::backend_addr(i, BPORT, V4))
            .with_weight(w)
            .with_forward(ForwardMethod::Masquerade);
        lab.handle.update_destination(&vs.key, &rs).expect("update");
    };
    set(0, 0);
    set(2, 1);
    let round = lab.spread(Proto::Tcp, V4, N);
    assert_eq!(round.seen, expect(&[(1, N / 2), (2, N / 2)]));
}

/// Persistence keeps one client on one backend, whatever rr would say.
#[test]
fn tcp_persistence_keeps_client_on_one_backend() {
    let lab = Lab::new(3, BPORT, false);
    let vs = VirtualServer::new(vkey(Proto::Tcp, V4))
        .with_scheduler(Scheduler::RoundRobin)
        .with_persistence(300);
    lab.program(
        &vs,
        &[(0, 1), (1, 1), (2, 1)],
        BPORT,
        ForwardMethod::Masquerade,
    );
    let round = lab.spread(Proto::Tcp, V4, N);
    let seen = round.seen.clone();
    assert_eq!(seen.len(), 1, "one backend for one client: {seen:?}");
    assert_eq!(seen.values().sum::<usize>(), N);
    // The connection counts (immediate, unlike the counters) show all 30
    // connections and the persistence template on the chosen destination.
    let dests = lab.dests(&vs.key);
    let chosen: Vec<usize> = dests
        .iter()
        .filter(|(_, d)| d.conns.active + d.conns.inactive > 0 || d.conns.persistent > 0)
        .map(|(i, _)| *i)
        .collect();
    assert_eq!(chosen.len(), 1, "{dests:?}");
    let c = &dests[&chosen[0]].conns;
    assert_eq!(c.active + c.inactive, N as u32, "{c:?}");
    assert_eq!(c.persistent, 1, "{c:?}");
    check_stats(&lab, &vs.key, &[round]);
    assert_eq!(
        seen.keys().next().map(String::as_str),
        Some(Lab::backend_name(chosen[0]).as_str())
    );
}

/// Direct routing: the router only rewrites the MAC address, the backends
/// hold the VIP on their `lo` and answer the client directly (through the
/// router's plain forwarding, which must accept a source address that is
/// local to it). rr still gives each backend a third; since the answers
/// pass through the router, IPVS counts them too.
#[test]
fn tcp_direct_routing_rr_three_backends() {
    let lab = Lab::new(3, VPORT, true);
    // The answers come back with the VIP, an address of the router itself,
    // as source: without accept_local the router drops them as martians.
    lab.router
        .run("sysctl", &["-qw", "net.ipv4.conf.all.accept_local=1"]);
    let vs = VirtualServer::new(vkey(Proto::Tcp, V4)).with_scheduler(Scheduler::RoundRobin);
    lab.program(
        &vs,
        &[(0, 1), (1, 1), (2, 1)],
        VPORT,
        ForwardMethod::DirectRoute,
    );
    let round = lab.spread(Proto::Tcp, V4, N);
    assert_eq!(round.seen, expect(&[(0, N / 3), (1, N / 3), (2, N / 3)]));
    let (svc, dests) = stable_stats(&lab, &vs.key, N as u64);
    for (i, d) in &dests {
        let s = &d.stats;
        assert_eq!(s.conns, (N / 3) as u64, "backend {i}: {s:?}");
        assert!(s.in_pkts >= 4 * (N / 3) as u64, "backend {i}: {s:?}");
        assert!(
            s.in_bytes >= (N / 3) as u64 * (4 * 40 + REQUEST.len() as u64),
            "backend {i}: {s:?}"
        );
        // The answers bypass IPVS's rewriting but not the router: they pass
        // its forward path, where IPVS matches them to the connection and
        // counts them as outbound (found on 6.1 and 6.12).
        assert!(s.out_pkts >= 3 * (N / 3) as u64, "backend {i}: {s:?}");
        assert!(
            s.out_bytes >= (N / 3) as u64 * (3 * 40 + Lab::backend_name(*i).len() as u64),
            "backend {i}: {s:?}"
        );
        assert_eq!(d.server.forward, ForwardMethod::DirectRoute);
    }
    assert_eq!(counters(&svc), sum(&dests));
}
