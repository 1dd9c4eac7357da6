//! Real traffic through every other kind of virtual server: IPv6 services,
//! firewall-mark services (marks set by nftables in the router), SCTP, and
//! real servers behind IPIP, GUE and GRE tunnels.
//!
//! Same network as tests/kernel_traffic.rs (see tests/support/traffic.rs):
//! a client, an IPVS router and backends, each in a fresh namespace, every
//! link carrying IPv4 and IPv6. Each test checks how the connections spread
//! against the scheduler and the counters that ipvsctl decodes.
//!
//! Runs in the VM through the cargo runner (`cargo test --test kernel_traffic_kinds`).

mod support;

use std::io::Write as _;

use ipvsctl::model::{
    AddressFamily, ForwardMethod, Scheduler, ServiceKey, Tunnel, TunnelEncap, TunnelFlags,
    VirtualServer,
};
use support::TestNetns;
use support::traffic::{
    BPORT, Lab, Proto, VIP4, VIP6, VPORT, check_stats, expect, stable_stats, sum, vkey,
};

/// Connections per case (a multiple of 3 and 2).
const N: usize = 18;
const V4: AddressFamily = AddressFamily::Inet;
const V6: AddressFamily = AddressFamily::Inet6;
/// rr over backends 0, 1 and 2, weight 1 each.
const THREE: &[(usize, u32)] = &[(0, 1), (1, 1), (2, 1)];

/// rr over three masqueraded backends, for `proto` over IPv6.
fn masquerade_v6(proto: Proto) {
    let lab = Lab::new(3, BPORT, false);
    let vs = VirtualServer::new(vkey(proto, V6)).with_scheduler(Scheduler::RoundRobin);
    lab.program(&vs, THREE, BPORT, ForwardMethod::Masquerade);
    let round = lab.spread(proto, V6, N);
    assert_eq!(round.seen, expect(&[(0, N / 3), (1, N / 3), (2, N / 3)]));
    check_stats(&lab, &vs.key, &[round]);
}

/// IPv6 TCP, masquerade, rr: a third each, counters match.
#[test]
fn ipv6_tcp_masquerade_rr() {
    masquerade_v6(Proto::Tcp);
}

/// IPv6 UDP, masquerade, rr: every fresh source port a new connection.
#[test]
fn ipv6_udp_masquerade_rr() {
    masquerade_v6(Proto::Udp);
}

/// IPv6 direct routing with wrr 2:1: the backends hold the VIP on `lo` and
/// answer the client straight back through the router's forwarding (IPv6
/// has no martian check on a local source address, unlike IPv4, which needs
/// `accept_local`).
#[test]
fn ipv6_tcp_direct_routing_wrr() {
    let lab = Lab::new(2, VPORT, true);
    let vs = VirtualServer::new(vkey(Proto::Tcp, V6)).with_scheduler(Scheduler::WeightedRoundRobin);
    lab.program(&vs, &[(0, 2), (1, 1)], VPORT, ForwardMethod::DirectRoute);
    let round = lab.spread(Proto::Tcp, V6, N);
    assert_eq!(round.seen, expect(&[(0, 2 * N / 3), (1, N / 3)]));
    let (svc, dests) = stable_stats(&lab, &vs.key, N as u64);
    assert_eq!(dests[&0].stats.conns, (2 * N / 3) as u64, "{dests:?}");
    assert_eq!(dests[&1].stats.conns, (N / 3) as u64, "{dests:?}");
    for d in dests.values() {
        assert!(d.stats.in_pkts >= 4 * d.stats.conns, "{d:?}");
        assert_eq!(d.server.forward, ForwardMethod::DirectRoute);
    }
    assert_eq!(support::traffic::counters(&svc), sum(&dests));
}

/// Marks TCP and UDP to `vip:VPORT` with `mark` in the router's prerouting
/// hook (mangle priority, ahead of IPVS in LOCAL_IN), as a firewall-mark
/// service expects.
fn mark_in_router(router: &TestNetns, mark: u32) {
    let rules = format!(
        "table inet ipvsctl_test {{\n\
         \tchain pre {{\n\
         \t\ttype filter hook prerouting priority mangle; policy accept;\n\
         \t\tip daddr {VIP4} meta l4proto {{ tcp, udp }} th dport {VPORT} meta mark set {mark}\n\
         \t\tip6 daddr {VIP6} meta l4proto {{ tcp, udp }} th dport {VPORT} meta mark set {mark}\n\
         \t}}\n\
         }}\n"
    );
    let mut nft = router.command("nft");
    nft.args(["-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = nft.spawn().expect("start nft (Debian package nftables)");
    {
        let mut stdin = child.stdin.take().expect("nft stdin");
        stdin.write_all(rules.as_bytes()).expect("write nft rules");
    }
    let out = child.wait_with_output().expect("wait for nft");
    assert!(
        out.status.success(),
        "nft -f failed: {}\n{rules}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// One firewall-mark service of `family` takes TCP and UDP to the VIP (the
/// classic use: one service for several protocols). rr goes round once per
/// connection whatever its protocol; the destinations name BPORT, so both
/// protocols are mapped to it.
fn fwmark_service(family: AddressFamily, mark: u32) {
    let lab = Lab::new(3, BPORT, false);
    mark_in_router(&lab.router, mark);
    let vs =
        VirtualServer::new(ServiceKey::fwmark(mark, family)).with_scheduler(Scheduler::RoundRobin);
    lab.program(&vs, THREE, BPORT, ForwardMethod::Masquerade);
    let tcp = lab.spread(Proto::Tcp, family, N);
    assert_eq!(tcp.seen, expect(&[(0, N / 3), (1, N / 3), (2, N / 3)]));
    let udp = lab.spread(Proto::Udp, family, N);
    assert_eq!(udp.seen, expect(&[(0, N / 3), (1, N / 3), (2, N / 3)]));
    check_stats(&lab, &vs.key, &[tcp, udp]);
}

/// IPv4 firewall-mark service: marked TCP and UDP, rr, masquerade.
#[test]
fn fwmark_ipv4_tcp_and_udp() {
    fwmark_service(V4, 7);
}

/// IPv6 firewall-mark service: marked TCP and UDP, rr, masquerade.
#[test]
fn fwmark_ipv6_tcp_and_udp() {
    fwmark_service(V6, 0x1_0006);
}

/// Unmarked traffic does not reach a firewall-mark service: with the mark
/// rule for another mark, the VIP (the router's own address) refuses.
#[test]
fn fwmark_unmarked_traffic_is_not_balanced() {
    let lab = Lab::new(1, BPORT, false);
    mark_in_router(&lab.router, 8);
    let vs = VirtualServer::new(ServiceKey::fwmark(9, V4));
    lab.program(&vs, &[(0, 1)], BPORT, ForwardMethod::Masquerade);
    let ns = ipvsctl::NetNs::path(lab.client.path());
    let to = support::traffic::vaddr(V4);
    let r = ipvsctl::netlink::netns::run_in(&ns, || {
        std::net::TcpStream::connect_timeout(&to, support::traffic::WAIT)
    });
    assert_eq!(
        r.map(drop).map_err(|e| e.kind()),
        Err(std::io::ErrorKind::ConnectionRefused),
        "nothing listens on the router itself"
    );
    let dests = lab.dests(&vs.key);
    assert_eq!(dests[&0].conns.active + dests[&0].conns.inactive, 0);
}

/// Whether this kernel has SCTP: `Ok` when an SCTP socket opens in a fresh
/// namespace (loading the module on demand), else why not.
fn sctp_available() -> Result<(), String> {
    let _ = support::traffic::modprobe("sctp");
    let ns = TestNetns::new();
    let path = ipvsctl::NetNs::path(ns.path());
    ipvsctl::netlink::netns::run_in(&path, || {
        rustix::net::socket(
            rustix::net::AddressFamily::INET,
            rustix::net::SocketType::STREAM,
            Some(rustix::net::ipproto::SCTP),
        )
        .map_err(std::io::Error::from)
    })
    .map(drop)
    .map_err(|e| format!("socket(AF_INET, SOCK_STREAM, IPPROTO_SCTP): {e}"))
}

/// SCTP over IPv4 and IPv6, masquerade, rr: associations spread a third
/// each and are counted. On a kernel without SCTP the test prints why it
/// skips and checks that SCTP really is missing (no `/proc/net/sctp` after
/// `modprobe sctp`), rather than passing silently.
#[test]
fn sctp_masquerade_rr_both_families() {
    if let Err(why) = sctp_available() {
        // Straight to stderr: the harness would hide a passing test's eprintln!.
        let _ = writeln!(
            std::io::stderr(),
            "SKIP sctp_masquerade_rr_both_families: Linux {} has no SCTP ({why})",
            support::kernel_release()
        );
        assert!(
            !std::path::Path::new("/proc/net/sctp").exists(),
            "SCTP sockets fail ({why}) although /proc/net/sctp exists"
        );
        return;
    }
    let _ = writeln!(
        std::io::stderr(),
        "SCTP available on Linux {}",
        support::kernel_release()
    );
    let mut lab = Lab::new(3, BPORT, false);
    lab.serve_sctp(BPORT).expect("SCTP servers");
    for family in [V4, V6] {
        let vs =
            VirtualServer::new(vkey(Proto::Sctp, family)).with_scheduler(Scheduler::RoundRobin);
        lab.program(&vs, THREE, BPORT, ForwardMethod::Masquerade);
        let round = lab.spread(Proto::Sctp, family, N);
        assert_eq!(
            round.seen,
            expect(&[(0, N / 3), (1, N / 3), (2, N / 3)]),
            "{family:?}"
        );
        check_stats(&lab, &vs.key, &[round]);
    }
}

/// Makes every backend decapsulate what `tunnel` carries to its address of
/// `family`: a tunnel device `ipvs0` bound to that address (IPv4: `ipip`,
/// or `gre` for GRE; IPv6: `ip6tnl` in ip6ip6 mode), up, with IPv4
/// reverse-path filtering off (the inner packets come in on the tunnel,
/// their replies go out on eth0). For GUE a fou socket on the port unwraps
/// the UDP and GUE headers first and hands the inner packet to the ipip
/// handler. The router must take the replies, which carry its own VIP as
/// source (IPv4 `accept_local`, as for direct routing).
fn decapsulate_on_backends(lab: &Lab, tunnel: Tunnel, family: AddressFamily) {
    let (module, kind) = match (family, tunnel.encap) {
        (AddressFamily::Inet6, _) => ("ip6_tunnel", "ip6tnl"),
        (_, TunnelEncap::Gre) => ("ip_gre", "gre"),
        _ => ("ipip", "ipip"),
    };
    support::traffic::modprobe(module);
    if let TunnelEncap::Gue { .. } = tunnel.encap {
        support::traffic::modprobe("fou");
    }
    lab.router
        .run("sysctl", &["-qw", "net.ipv4.conf.all.accept_local=1"]);
    for (i, b) in lab.backends.iter().enumerate() {
        // One `ip -batch` and one `sysctl` per backend.
        let local = Lab::backend_addr(i, 0, family).ip();
        let mut ip = vec![format!("link add ipvs0 type {kind} local {local}")];
        if family == AddressFamily::Inet6 {
            ip[0].push_str(" remote :: mode ip6ip6");
        }
        ip.push("link set ipvs0 up".to_owned());
        if let TunnelEncap::Gue { port } = tunnel.encap {
            ip.push(format!("fou add port {port} gue"));
        }
        b.ip_batch(&ip);
        let off: Vec<String> = ["all", "default", "ipvs0", "eth0"]
            .iter()
            .map(|conf| format!("net.ipv4.conf.{conf}.rp_filter=0"))
            .collect();
        let mut args = vec!["-qw"];
        args.extend(off.iter().map(String::as_str));
        b.run("sysctl", &args);
    }
}

/// Real servers behind `tunnel`, TCP over `family`, rr over three: a third
/// each, counted, every inbound packet decapsulated by the backend, and the
/// tunnel settings read back as they were given.
fn tunnel_rr(tunnel: Tunnel, family: AddressFamily) {
    let lab = Lab::new(3, VPORT, true);
    decapsulate_on_backends(&lab, tunnel, family);
    let vs = VirtualServer::new(vkey(Proto::Tcp, family)).with_scheduler(Scheduler::RoundRobin);
    let fwd = ForwardMethod::Tunnel(tunnel);
    lab.program(&vs, THREE, VPORT, fwd);
    let round = lab.spread(Proto::Tcp, family, N);
    assert_eq!(round.seen, expect(&[(0, N / 3), (1, N / 3), (2, N / 3)]));
    let (svc, dests) = stable_stats(&lab, &vs.key, N as u64);
    for (i, d) in &dests {
        assert_eq!(d.server.forward, fwd, "backend {i}");
        assert_eq!(d.stats.conns, (N / 3) as u64, "backend {i}: {d:?}");
        assert!(d.stats.in_pkts >= 4 * d.stats.conns, "backend {i}: {d:?}");
        let rx = lab.backends[*i].run("cat", &["/sys/class/net/ipvs0/statistics/rx_packets"]);
        let rx: u64 = rx.trim().parse().expect("rx_packets is a number");
        assert!(
            rx >= d.stats.in_pkts,
            "backend {i}: {rx} packets decapsulated, IPVS sent {}",
            d.stats.in_pkts
        );
    }
    assert_eq!(support::traffic::counters(&svc), sum(&dests));
}

/// IP-in-IP tunnel (what `ipvsadm -i` makes).
#[test]
fn tunnel_ipip_rr() {
    tunnel_rr(Tunnel::IPIP, V4);
}

/// IPv6-in-IPv6 tunnel: an IPv6 service, IPv6 real servers, `Tunnel::IPIP`
/// (the kernel's one tunnel type for both families).
#[test]
fn tunnel_ipv6_in_ipv6_rr() {
    tunnel_rr(Tunnel::IPIP, V6);
}

/// GUE tunnel without checksums (Linux 5.2+).
#[test]
fn tunnel_gue_rr() {
    tunnel_rr(Tunnel::gue(6080), V4);
}

/// GUE with the outer UDP checksum (`--tun-csum`, 5.3+).
#[test]
fn tunnel_gue_csum_rr() {
    tunnel_rr(Tunnel::gue(6081).with_flags(TunnelFlags::CSUM), V4);
}

/// GRE tunnel (5.3+), without checksums.
#[test]
fn tunnel_gre_rr() {
    tunnel_rr(Tunnel::gre(), V4);
}
