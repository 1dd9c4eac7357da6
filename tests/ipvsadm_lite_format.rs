//! ipvsadm-lite's listings (pure, no kernel): the exact bytes ipvsadm 1.31
//! prints for a given state (goldens observed with Debian's ipvsadm in the
//! test VM), number scaling, and ipvsadm's wrapping sort order.

#[allow(dead_code)]
#[path = "../examples/ipvsadm-lite/format.rs"]
mod format;
#[allow(dead_code)]
#[path = "../examples/ipvsadm-lite/rules.rs"]
mod rules;

use std::net::SocketAddr;

use format::{Entry, Numeric};
use ipvsctl::model::{
    AddressFamily, DaemonRole, DestinationSnapshot, ForwardMethod, Info, Netmask,
    PersistenceEngine, RealServer, Scheduler, ServiceFlags, ServiceKey, ServiceSnapshot,
    SyncDaemon, Timeouts, Tunnel, TunnelEncap, TunnelFlags, Version, VirtualServer,
};
use proptest::prelude::*;
use rules::Format;

fn sa(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn svc(vs: VirtualServer, dests: Vec<RealServer>) -> Entry {
    Entry {
        service: ServiceSnapshot::new(vs),
        dests: dests.into_iter().map(DestinationSnapshot::new).collect(),
    }
}

fn tunnel(encap: TunnelEncap, flags: TunnelFlags) -> ForwardMethod {
    ForwardMethod::Tunnel(Tunnel::new(encap).with_flags(flags))
}

/// The state of the first VM probe, in the kernel's dump order.
fn state() -> Vec<Entry> {
    let k = ServiceKey::tcp(sa("10.0.0.1:80"));
    vec![
        svc(
            VirtualServer::new(ServiceKey::udp(sa("10.0.0.1:53")))
                .with_flags(ServiceFlags::ONE_PACKET),
            vec![],
        ),
        svc(
            VirtualServer::new(k).with_scheduler(Scheduler::RoundRobin),
            vec![
                RealServer::new(sa("[2001:db8::9]:80"))
                    .with_forward(ForwardMethod::Tunnel(Tunnel::IPIP)),
                RealServer::new(sa("1.2.3.7:80")).with_forward(ForwardMethod::Tunnel(Tunnel::IPIP)),
                RealServer::new(sa("1.2.3.6:80"))
                    .with_forward(tunnel(TunnelEncap::Gre, TunnelFlags::empty())),
                RealServer::new(sa("1.2.3.4:80"))
                    .with_forward(tunnel(TunnelEncap::Gue { port: 6080 }, TunnelFlags::CSUM)),
                RealServer::new(sa("1.1.1.1:80")).with_weight(70000),
                RealServer::new(sa("192.168.1.1:8080"))
                    .with_weight(3)
                    .with_forward(ForwardMethod::Masquerade)
                    .with_thresholds(100, 20),
            ],
        ),
        svc(
            VirtualServer::new(ServiceKey::fwmark(7, AddressFamily::Inet))
                .with_scheduler(Scheduler::WeightedRoundRobin),
            vec![RealServer::new(sa("10.1.1.1:0")).with_forward(ForwardMethod::Masquerade)],
        ),
        svc(
            VirtualServer::new(ServiceKey::sctp(sa("10.0.0.9:99")))
                .with_scheduler(Scheduler::NeverQueue)
                .with_persistence(10)
                .with_persistence_engine(PersistenceEngine::sip()),
            vec![],
        ),
        svc(
            VirtualServer::new(ServiceKey::fwmark(5, AddressFamily::Inet6))
                .with_persistence(30)
                .with_netmask(Netmask::V6(64)),
            vec![],
        ),
        svc(
            VirtualServer::new(ServiceKey::tcp(sa("[2001:db8::1]:443")))
                .with_scheduler(Scheduler::MaglevHashing)
                .with_flags(ServiceFlags::MH_PORT)
                .with_persistence(360),
            vec![RealServer::new(sa("[2001:db8::5]:443")).with_weight(0)],
        ),
        svc(
            VirtualServer::new(ServiceKey::tcp(sa("200.0.0.1:80")))
                .with_scheduler(Scheduler::SourceHashing)
                .with_flags(ServiceFlags::SH_PORT | ServiceFlags::SH_FALLBACK)
                .with_persistence(600)
                .with_netmask(Netmask::V4("255.255.255.0".parse().unwrap())),
            vec![],
        ),
    ]
}

const INFO: Info = Info::new(Version(0x010201), 4096);

fn list(f: Format) -> String {
    let mut entries = state();
    let mut out = String::new();
    format::list_all(&mut out, &INFO, &mut entries, &f, &Numeric);
    out
}

fn numeric() -> Format {
    Format {
        numeric: true,
        ..Format::default()
    }
}

#[test]
fn plain_listing() {
    assert_eq!(
        list(numeric()),
        "\
IP Virtual Server version 1.2.1 (size=4096)
Prot LocalAddress:Port Scheduler Flags
  -> RemoteAddress:Port           Forward Weight ActiveConn InActConn
TCP  200.0.0.1:80 sh (sh-fallback,sh-port) persistent 600 mask 255.255.255.0
TCP  10.0.0.1:80 rr
  -> 192.168.1.1:8080             Masq    3      0          0         
  -> 1.1.1.1:80                   Route   70000  0          0         
  -> 1.2.3.4:80                   Tunnel  1      0          0         
  -> 1.2.3.6:80                   Tunnel  1      0          0         
  -> 1.2.3.7:80                   Tunnel  1      0          0         
  -> [2001:db8::9]:80             Tunnel  1      0          0         
UDP  10.0.0.1:53 wlc ops
SCTP 10.0.0.9:99 nq persistent 10 pe sip
TCP  [2001:db8::1]:443 mh (mh-port) persistent 360
  -> [2001:db8::5]:443            Route   0      0          0         
FWM  5 IPv6 wlc persistent 30 mask 64
FWM  7 wrr
  -> 10.1.1.1:0                   Masq    1      0          0         
"
    );
}

#[test]
fn tunnel_info_thresholds_and_persistent_conn() {
    let tun = list(Format {
        tun_info: true,
        ..numeric()
    });
    assert!(tun.contains(
        "  -> RemoteAddress:Port           Forward TunnelInfo    Weight ActiveConn InActConn\n"
    ));
    for line in [
        "  -> 192.168.1.1:8080             Masq    n/a           3      0          0         \n",
        "  -> 1.1.1.1:80                   Route   n/a           70000  0          0         \n",
        "  -> 1.2.3.4:80                   Tunnel  gue:6080:+c   1      0          0         \n",
        "  -> 1.2.3.6:80                   Tunnel  gre:-c        1      0          0         \n",
        "  -> 1.2.3.7:80                   Tunnel  ipip          1      0          0         \n",
    ] {
        assert!(tun.contains(line), "{line}\n{tun}");
    }
    let thr = list(Format {
        thresholds: true,
        ..numeric()
    });
    assert!(thr.contains(
        "Prot LocalAddress:Port            Uthreshold Lthreshold ActiveConn InActConn \n  -> RemoteAddress:Port\n"
    ), "{thr}");
    assert!(thr.contains(
        "  -> 192.168.1.1:8080             100        20         0          0         \n"
    ));
    let pc = list(Format {
        persistent_conn: true,
        ..numeric()
    });
    assert!(pc.contains(
        "Prot LocalAddress:Port            Weight    PersistConn ActiveConn InActConn \n"
    ));
    assert!(pc.contains(
        "  -> 1.1.1.1:80                   70000     0           0          0         \n"
    ));
}

#[test]
fn stats_and_rate() {
    let stats = list(Format {
        stats: true,
        ..numeric()
    });
    let head = [
        "IP Virtual Server version 1.2.1 (size=4096)",
        "Prot LocalAddress:Port               Conns   InPkts  OutPkts  InBytes OutBytes",
        "  -> RemoteAddress:Port",
        "TCP  200.0.0.1:80                        0        0        0        0        0",
        "TCP  10.0.0.1:80                         0        0        0        0        0",
        "  -> 192.168.1.1:8080                    0        0        0        0        0",
    ];
    assert!(stats.starts_with(&(head.join("\n") + "\n")), "{stats}");
    assert!(stats.contains(
        "FWM  5 IPv6                              0        0        0        0        0\n"
    ));
    let rate = list(Format {
        rate: true,
        ..numeric()
    });
    assert!(rate.contains(
        "Prot LocalAddress:Port                 CPS    InPPS   OutPPS    InBPS   OutBPS\n"
    ));
}

#[test]
fn rule_listing() {
    assert_eq!(
        list(Format {
            numeric: true,
            rule: true,
            ..Format::default()
        }),
        "\
-A -t 200.0.0.1:80 -s sh -p 600 -M 255.255.255.0 -b sh-fallback,sh-port
-A -t 10.0.0.1:80 -s rr
-a -t 10.0.0.1:80 -r 192.168.1.1:8080 -m -w 3
-a -t 10.0.0.1:80 -r 1.1.1.1:80 -g -w 70000
-a -t 10.0.0.1:80 -r 1.2.3.4:80 -i -w 1 --tun-type gue --tun-port 6080 --tun-csum
-a -t 10.0.0.1:80 -r 1.2.3.6:80 -i -w 1 --tun-type gre --tun-nocsum
-a -t 10.0.0.1:80 -r 1.2.3.7:80 -i -w 1 --tun-type ipip
-a -t 10.0.0.1:80 -r [2001:db8::9]:80 -i -w 1 --tun-type ipip
-A -u 10.0.0.1:53 -s wlc -o
-A --sctp-service 10.0.0.9:99 -s nq -p 10 --pe sip
-A -t [2001:db8::1]:443 -s mh -p 360 -b mh-port
-a -t [2001:db8::1]:443 -r [2001:db8::5]:443 -g -w 0
-A -f 5 -6 -s wlc -p 30 -M 64
-A -f 7 -s wrr
-a -f 7 -r 10.1.1.1:0 -m -w 1
"
    );
}

#[test]
fn rule_lines_round_trip_through_the_parser() {
    let f = Format {
        numeric: true,
        rule: true,
        ..Format::default()
    };
    let mut entries = state();
    let mut out = String::new();
    format::list_all(&mut out, &INFO, &mut entries, &f, &Numeric);
    let rules = rules::parse(&out).unwrap();
    let mut n = 0;
    for e in &entries {
        let mut want = e.service.service.clone();
        // -S drops the netmask of non-persistent services; ours are full.
        if !want.flags.contains(ServiceFlags::PERSISTENT) {
            want.netmask = Netmask::full(want.family());
        }
        assert_eq!(rules[n].command, rules::Command::AddService(want));
        n += 1;
        for d in &e.dests {
            // -S drops thresholds, as ipvsadm does.
            let mut rs = d.server;
            rs.upper_threshold = 0;
            rs.lower_threshold = 0;
            assert_eq!(
                rules[n].command,
                rules::Command::AddServer(e.service.service.key, rs)
            );
            n += 1;
        }
    }
    assert_eq!(n, rules.len());
}

#[test]
fn large_numbers() {
    let cases: &[(u64, &str, &str)] = &[
        (0, "        0", "        0"),
        (99_999_999, " 99999999", " 99999999"),
        (100_000_000, "  100000K", " 100000000"),
        (999_999_999, "  999999K", " 999999999"),
        (1_000_000_000, "    1000M", " 1000000000"),
        (99_999_999_999, "   99999M", " 99999999999"),
        (100_000_000_000, "     100G", " 100000000000"),
        (100_000_000_000_000, "     100T", " 100000000000000"),
        (u64::MAX, "18446744T", " 18446744073709551615"),
    ];
    for (n, scaled, exact) in cases {
        let mut s = String::new();
        format::largenum(&mut s, *n, false);
        assert_eq!(s, *scaled, "{n}");
        let mut s = String::new();
        format::largenum(&mut s, *n, true);
        assert_eq!(s, *exact, "{n}");
    }
}

#[test]
fn rate_lines_use_plain_columns_for_the_first_three() {
    let mut e = svc(
        VirtualServer::new(ServiceKey::tcp(sa("10.0.0.1:80"))),
        vec![RealServer::new(sa("10.0.0.2:80"))],
    );
    let stats = &mut e.dests[0].stats;
    stats.cps = 1_234_567_890;
    stats.in_bps = 1_234_567_890;
    let mut out = String::new();
    format::service_entry(
        &mut out,
        &mut e,
        &Format {
            rate: true,
            numeric: true,
            ..Format::default()
        },
        &Numeric,
    );
    assert_eq!(
        out.lines().nth(1).unwrap(),
        "  -> 10.0.0.2:80                  1234567890        0        0    1234M        0"
    );
}

#[test]
fn timeouts_and_daemons() {
    let mut s = String::new();
    format::timeouts(&mut s, &Timeouts::new(900, 120, 300));
    assert_eq!(s, "Timeout (tcp tcpfin udp): 900 120 300\n");
    let mut s = String::new();
    format::daemons(
        &mut s,
        &[
            SyncDaemon::new(DaemonRole::Master, "lo")
                .with_sync_id(7)
                .with_max_len(1472)
                .with_group("224.0.0.81".parse().unwrap())
                .with_port(8848)
                .with_ttl(1),
            SyncDaemon::new(DaemonRole::Backup, "eth0"),
        ],
    );
    assert_eq!(
        s,
        "master sync daemon (mcast=lo, syncid=7, maxlen=1472, group=224.0.0.81, port=8848, ttl=1)\n\
backup sync daemon (mcast=eth0, syncid=0)\n"
    );
}

#[test]
fn fwmark_above_i32_prints_negative_and_sorts_first() {
    let mut entries = vec![
        svc(
            VirtualServer::new(ServiceKey::tcp(sa("1.2.3.4:80"))),
            vec![],
        ),
        svc(
            VirtualServer::new(ServiceKey::fwmark(u32::MAX, AddressFamily::Inet)),
            vec![],
        ),
    ];
    let mut out = String::new();
    format::list_all(&mut out, &INFO, &mut entries, &numeric(), &Numeric);
    assert!(out.ends_with("FWM  -1 wlc\nTCP  1.2.3.4:80 wlc\n"), "{out}");
}

proptest! {
    /// On inputs where the wrapping comparison is a total order (all
    /// addresses within 2^31 of each other), the merge sort agrees with a
    /// plain sort by address and port.
    #[test]
    fn merge_sort_matches_a_plain_sort_on_a_total_order(
        addrs in proptest::collection::vec((0u32..0x7fff_ffff, any::<u16>()), 0..60)
    ) {
        let mut v: Vec<SocketAddr> = addrs
            .iter()
            .map(|(a, p)| SocketAddr::new(std::net::Ipv4Addr::from(*a).into(), *p))
            .collect();
        v.sort_by_key(|a| (a.ip(), a.port()));
        v.dedup();
        let mut shuffled = v.clone();
        shuffled.reverse();
        format::glibc_msort(&mut shuffled, &|a: &SocketAddr, b: &SocketAddr| format::cmp_dests(a, b));
        prop_assert_eq!(shuffled, v);
    }
}
