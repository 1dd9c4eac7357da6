//! keepalived-lite's configuration parser (pure, no kernel): configurations
//! in the shapes of keepalived's own samples (doc/samples/) parsed into the
//! model with every default and inherited setting resolved as keepalived
//! 2.2.7 resolves them; every keyword keepalived-lite does not run refused
//! with its file, line and name; the VRRP half skipped with one notice per
//! block or key; `include`; and no input, however broken, panics.

#[allow(dead_code)]
#[path = "../examples/keepalived-lite/config/mod.rs"]
mod config;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use config::{
    CheckKind, CheckerConf, Config, ConfigError, HttpCheck, HttpProtocol, LvsTimeouts, MiscCheck,
    Notice, Protocol, RealServerConf, ServiceSettings, SorryServer, UdpCheck, UrlCheck,
    VirtualServerConf, VsId,
};
use ipvsctl::model::{
    AddressFamily, ForwardMethod, Netmask, Scheduler, ServiceFlags, ServiceKey, Tunnel,
    TunnelEncap, TunnelFlags,
};
use proptest::prelude::*;

const FILE: &str = "/etc/keepalived-lite/keepalived.conf";

fn sa(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s)
}

fn parse(text: &str) -> Config {
    config::parse_str(text, Path::new(FILE)).unwrap_or_else(|e| panic!("{e}"))
}

fn refuse(text: &str) -> ConfigError {
    match config::parse_str(text, Path::new(FILE)) {
        Ok(c) => panic!("accepted: {c:#?}"),
        Err(e) => e,
    }
}

/// The 1-based line of the first line containing `needle`.
fn line_of(text: &str, needle: &str) -> usize {
    text.lines()
        .position(|l| l.contains(needle))
        .map(|i| i + 1)
        .unwrap_or_else(|| panic!("no {needle}"))
}

/// The 1-based line of the `n`th (0-based) line containing `needle`.
fn nth_line_of(text: &str, needle: &str, n: usize) -> usize {
    text.lines()
        .enumerate()
        .filter(|(_, l)| l.contains(needle))
        .nth(n)
        .map(|(i, _)| i + 1)
        .unwrap_or_else(|| panic!("no {needle} #{n}"))
}

fn notice(text: &str, keyword: &str) -> Notice {
    Notice {
        file: PathBuf::from(FILE),
        line: line_of(text, keyword),
        keyword: keyword.into(),
    }
}

/// A checker with keepalived's defaults under a virtual server without
/// timing settings (delay_loop 60 s, warmup up to delay_loop, connect 5 s).
fn checker(line: usize, kind: CheckKind, connect: &str) -> CheckerConf {
    CheckerConf {
        line,
        kind,
        connect: sa(connect),
        bind: None,
        connect_timeout: secs(5.0),
        retry: 1,
        delay_before_retry: secs(1.0),
        delay_loop: secs(60.0),
        warmup: Some(secs(60.0)),
        alpha: false,
    }
}

fn real(line: usize, addr: &str, checkers: Vec<CheckerConf>) -> RealServerConf {
    RealServerConf {
        line,
        addr: sa(addr),
        weight: 1,
        forward: ForwardMethod::Masquerade,
        upper_threshold: 0,
        lower_threshold: 0,
        inhibit: false,
        checkers,
    }
}

fn url(path: &str) -> UrlCheck {
    UrlCheck {
        path: path.into(),
        digest: None,
        status_codes: vec![200..=299],
        virtualhost: None,
    }
}

fn only_vs(c: &Config) -> &VirtualServerConf {
    assert_eq!(c.virtual_servers.len(), 1, "{c:#?}");
    &c.virtual_servers[0]
}

// ---------------------------------------------------------------------------
// Sample shapes

const SAMPLE: &str = "! Configuration File for keepalived
global_defs {
   notification_email {
     ops@example.org
     oncall@example.org
   }
   notification_email_from lb@example.org
   smtp_server 198.51.100.25
   smtp_connect_timeout 30
   router_id LB_TEST
}

vrrp_instance VI_7 {
    interface eth1
    virtual_router_id 7
    nopreempt
    priority 150
    advert_int 1
    virtual_ipaddress {
        203.0.113.10
        203.0.113.11
    }
}

virtual_server 203.0.113.10 8080 {
    delay_loop 4
    lb_algo wrr
    lb_kind NAT
    persistence_timeout 120
    protocol TCP

    sorry_server 198.51.100.200 8080

    real_server 198.51.100.2 8080 {
        weight 3
        HTTP_GET {
            url {
              path /health/ready
              digest 0123456789abcdef0123456789ABCDEF
            }
            connect_timeout 2
            retry 2
            delay_before_retry 1.5
        }
    }
}
";

#[test]
fn sample_shape_resolves_every_default() {
    let c = parse(SAMPLE);
    assert_eq!(
        c.global,
        config::Global {
            router_id: Some("LB_TEST".into()),
            ..Default::default()
        }
    );
    assert_eq!(
        c.notices,
        [
            "notification_email",
            "notification_email_from",
            "smtp_server",
            "smtp_connect_timeout",
            "vrrp_instance"
        ]
        .map(|k| notice(SAMPLE, k))
    );
    let digest = [
        0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef, 0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd,
        0xef,
    ];
    let expected = VirtualServerConf {
        file: PathBuf::from(FILE),
        line: line_of(SAMPLE, "virtual_server"),
        id: VsId::Addr(sa("203.0.113.10:8080"), Protocol::Tcp),
        keys: vec![ServiceKey::tcp(sa("203.0.113.10:8080"))],
        settings: ServiceSettings {
            scheduler: Scheduler::WeightedRoundRobin,
            flags: ServiceFlags::PERSISTENT,
            persistence_timeout: Some(120),
            persistence_granularity: None,
        },
        quorum: 1,
        hysteresis: 0,
        sorry: Some(SorryServer {
            addr: sa("198.51.100.200:8080"),
            forward: ForwardMethod::Masquerade,
            weight: 1,
            inhibit: false,
        }),
        omega: false,
        real_servers: vec![RealServerConf {
            weight: 3,
            ..real(
                line_of(SAMPLE, "real_server"),
                "198.51.100.2:8080",
                vec![CheckerConf {
                    connect_timeout: secs(2.0),
                    retry: 2,
                    delay_before_retry: secs(1.5),
                    delay_loop: secs(4.0),
                    warmup: Some(secs(4.0)),
                    ..checker(
                        line_of(SAMPLE, "HTTP_GET"),
                        CheckKind::Http(HttpCheck {
                            urls: vec![UrlCheck {
                                digest: Some(digest),
                                ..url("/health/ready")
                            }],
                            virtualhost: None,
                            http_protocol: HttpProtocol::Http10,
                        }),
                        "198.51.100.2:8080",
                    )
                }],
            )
        }],
    };
    assert_eq!(c.virtual_servers, vec![expected]);
}

#[test]
fn virtualhost_shape_inherits_host_names() {
    let text = "global_defs {
   router_id LVS_VHOST
}
virtual_server 192.0.2.100 80 {
    delay_loop 10
    lb_algo rr
    lb_kind NAT
    protocol TCP
    virtualhost www.example.test    # The VirtualHost string to use
                                    # in the GET query.
    real_server 192.0.2.201 80 {
        HTTP_GET {
            url {
              path /
            }
            url {
              path /status/
              virtualhost status.example.test
            }
            http_protocol 1.1
        }
    }
    real_server 192.0.2.202 80 {
        virtualhost rs.example.test
        HTTP_GET {
            url {
              path /
            }
            http_protocol 1.0C
        }
        HTTP_GET {
            virtualhost own.example.test
            url {
              path /
            }
        }
    }
}
";
    let vs = only_vs(&parse(text)).clone();
    let http = |rs: usize, chk: usize| match &vs.real_servers[rs].checkers[chk].kind {
        CheckKind::Http(h) => h.clone(),
        other => panic!("{other:?}"),
    };
    assert_eq!(
        http(0, 0),
        HttpCheck {
            urls: vec![
                url("/"),
                UrlCheck {
                    virtualhost: Some("status.example.test".into()),
                    ..url("/status/")
                }
            ],
            virtualhost: Some("www.example.test".into()),
            http_protocol: HttpProtocol::Http11,
        }
    );
    assert_eq!(http(1, 0).virtualhost.as_deref(), Some("rs.example.test"));
    assert_eq!(http(1, 0).http_protocol, HttpProtocol::Http10Close);
    assert_eq!(http(1, 1).virtualhost.as_deref(), Some("own.example.test"));
    let chk = &vs.real_servers[0].checkers[0];
    assert_eq!(
        (chk.delay_loop, chk.warmup, chk.delay_before_retry),
        (secs(10.0), Some(secs(10.0)), secs(3.0))
    );
}

const FWMARK: &str = "! Sample configuration for use Linux FWMARK
global_defs {
  router_id io
}
virtual_server fwmark 7 {
  delay_loop 6
  lb_algo rr
  lb_kind NAT
  persistence_timeout 900
  protocol TCP
  real_server 192.0.2.100 {
    weight 1
    TCP_CHECK {
      connect_port    80
      connect_timeout 3
    }
  }
  real_server 192.0.2.101 {
    weight 1
    TCP_CHECK {
      connect_port    80
      connect_timeout 3
    }
  }
}
virtual_server fwmark 8 {
  lb_algo sh
  sh-port
  sh-fallback
  lb_kind DR
  real_server 2001:db8::100 443 {
    TCP_CHECK {
    }
  }
}
virtual_server fwmark 9 {
  lb_algo mh
  mh-port
  lvs_method TUN
  real_server 192.0.2.50 53 {
  }
  real_server 192.0.2.51 53 {
  }
}
";

#[test]
fn fwmark_shape() {
    let c = parse(FWMARK);
    assert_eq!(c.virtual_servers.len(), 3);
    let [a, b, t] = [
        &c.virtual_servers[0],
        &c.virtual_servers[1],
        &c.virtual_servers[2],
    ];
    // The protocol of a firewall-mark service is ignored, as keepalived does.
    assert_eq!(a.id, VsId::Fwmark(7));
    assert_eq!(a.keys, vec![ServiceKey::fwmark(7, AddressFamily::Inet)]);
    assert_eq!(
        a.settings,
        ServiceSettings {
            scheduler: Scheduler::RoundRobin,
            flags: ServiceFlags::PERSISTENT,
            persistence_timeout: Some(900),
            persistence_granularity: None,
        }
    );
    // NAT to a firewall mark: the real server keeps its (absent) port; the
    // checker connects to connect_port.
    let tcp = |line, connect| CheckerConf {
        connect_timeout: secs(3.0),
        delay_loop: secs(6.0),
        warmup: Some(secs(6.0)),
        ..checker(line, CheckKind::Tcp, connect)
    };
    assert_eq!(
        a.real_servers,
        vec![
            real(
                nth_line_of(FWMARK, "real_server", 0),
                "192.0.2.100:0",
                vec![tcp(nth_line_of(FWMARK, "TCP_CHECK", 0), "192.0.2.100:80")]
            ),
            real(
                nth_line_of(FWMARK, "real_server", 1),
                "192.0.2.101:0",
                vec![tcp(nth_line_of(FWMARK, "TCP_CHECK", 1), "192.0.2.101:80")]
            ),
        ]
    );
    // DR to a firewall mark: the real server's port is cleared, the checker
    // keeps it; the family comes from the real server.
    assert_eq!(b.keys, vec![ServiceKey::fwmark(8, AddressFamily::Inet6)]);
    assert_eq!(b.settings.scheduler, Scheduler::SourceHashing);
    assert_eq!(
        b.settings.flags,
        ServiceFlags::SH_PORT | ServiceFlags::SH_FALLBACK
    );
    assert_eq!(b.settings.persistence_timeout, None);
    assert_eq!(b.real_servers[0].addr, sa("[2001:db8::100]:0"));
    assert_eq!(b.real_servers[0].forward, ForwardMethod::DirectRoute);
    assert_eq!(
        b.real_servers[0].checkers[0].connect,
        sa("[2001:db8::100]:443")
    );
    // All tunnelled: the family of the servers; plain IPIP.
    assert_eq!(t.keys, vec![ServiceKey::fwmark(9, AddressFamily::Inet)]);
    assert_eq!(t.settings.flags, ServiceFlags::MH_PORT);
    assert_eq!(
        t.real_servers[0].forward,
        ForwardMethod::Tunnel(Tunnel::IPIP)
    );
    assert_eq!(t.real_servers[1].addr, sa("192.0.2.51:0"));
    assert_eq!(t.quorum, 1);
}

#[test]
fn inhibit_shape() {
    let text = "global_defs {
   notification_email {
     admin
   }
   router_id LVS_DEVEL
}
virtual_server 10.10.10.2 1358 {
    delay_loop 6
    lb_algo rr
    lb_kind NAT
    persistence_timeout 50
    protocol TCP
    real_server 192.168.200.2 1358 {
        weight 1
        inhibit_on_failure        ! set weight to 0 instead of removing service
        HTTP_GET {
            url {
              path /testurl3/test.jsp
            }
            connect_timeout 3
            nb_get_retry 3
            delay_before_retry 3
        }
    }
}
virtual_server 10.10.10.3 1358 {
    inhibit_on_failure
    sorry_server 192.168.200.9 1358
    real_server 192.168.200.3 1358 {
    }
    real_server 192.168.200.4 1358 {
        inhibit_on_failure no
    }
    real_server 192.168.200.9 1358 {
        inhibit_on_failure off
    }
}
";
    let c = parse(text);
    let a = &c.virtual_servers[0];
    assert!(a.real_servers[0].inhibit);
    let chk = &a.real_servers[0].checkers[0];
    assert_eq!(
        (chk.retry, chk.delay_before_retry, chk.connect_timeout),
        (3, secs(3.0), secs(3.0))
    );
    let b = &c.virtual_servers[1];
    assert_eq!(
        b.real_servers.iter().map(|r| r.inhibit).collect::<Vec<_>>(),
        [true, false, false]
    );
    // Defaults keepalived sets with a warning: wlc, NAT, UDP.
    assert_eq!(b.id, VsId::Addr(sa("10.10.10.3:1358"), Protocol::Udp));
    assert_eq!(b.keys, vec![ServiceKey::udp(sa("10.10.10.3:1358"))]);
    assert_eq!(b.settings.scheduler, Scheduler::WeightedLeastConnection);
    // The sorry server is also a real server: it follows its inhibit setting.
    assert_eq!(b.sorry.as_ref().map(|s| s.inhibit), Some(false));
}

#[test]
fn misc_check_shape() {
    let text = r#"global_defs {
   router_id LVS_DEVEL
   script_user nobody nogroup
   enable_script_security
}
virtual_server 10.10.10.2 1358 {
    delay_loop 6
    lb_algo rr
    lb_kind NAT
    persistence_timeout 50
    protocol TCP
    real_server 192.168.200.6 1358 {
        weight 1
        MISC_CHECK {
          misc_path /usr/local/bin/script.sh
!         misc_dynamic
        }
        MISC_CHECK {
          misc_path "/usr/local/bin/script.sh arg1 'two words' \x41"
          misc_timeout 4
          misc_dynamic
          user checker
          delay_loop 2
          retry 2
        }
    }
}
"#;
    let c = parse(text);
    assert_eq!(c.global.script_user.as_deref(), Some("nobody nogroup"));
    assert!(c.global.script_security);
    let rs = &only_vs(&c).real_servers[0];
    let misc = |argv: &[&str], timeout, dynamic, user: &str| {
        CheckKind::Misc(MiscCheck {
            argv: argv.iter().map(|s| s.to_string()).collect(),
            timeout,
            dynamic,
            user: Some(user.into()),
        })
    };
    assert_eq!(
        rs.checkers,
        vec![
            CheckerConf {
                retry: 0,
                delay_loop: secs(6.0),
                warmup: Some(secs(6.0)),
                ..checker(
                    nth_line_of(text, "MISC_CHECK", 0),
                    // misc_timeout unset: the virtual server's delay_loop.
                    misc(
                        &["/usr/local/bin/script.sh"],
                        secs(6.0),
                        false,
                        "nobody nogroup"
                    ),
                    "192.168.200.6:1358"
                )
            },
            CheckerConf {
                retry: 2,
                delay_loop: secs(2.0),
                warmup: Some(secs(2.0)),
                ..checker(
                    nth_line_of(text, "MISC_CHECK", 1),
                    misc(
                        &["/usr/local/bin/script.sh", "arg1", "two words", "A"],
                        secs(4.0),
                        true,
                        "checker"
                    ),
                    "192.168.200.6:1358"
                )
            },
        ]
    );
}

#[test]
fn quorum_shape() {
    let mut text = String::from(
        "virtual_server 10.0.1.1 80 {
  delay_loop 6
  lb_algo wrr
  lb_kind NAT
  persistence_timeout 900
  protocol TCP
  alpha
  omega
  quorum 7
  hysteresis 2
",
    );
    for i in 1..=10 {
        text += &format!(
            "  real_server 10.0.0.{i} 8080 {{\n    weight 1\n    TCP_CHECK {{\n      connect_port    80\n      connect_timeout 3\n    }}\n  }}\n"
        );
    }
    text += "}\nvirtual_server 10.0.1.2 80 {\n  quorum 50\n  hysteresis 5\n  protocol TCP\n";
    text += "  real_server 10.0.0.1 80 {\n    alpha no\n  }\n  real_server 10.0.0.2 80 {\n    weight 2\n  }\n}\n";
    let c = parse(&text);
    let a = &c.virtual_servers[0];
    assert_eq!((a.quorum, a.hysteresis, a.omega), (7, 2, true));
    assert_eq!(a.real_servers.len(), 10);
    assert!(a.real_servers.iter().all(|r| r.checkers[0].alpha));
    assert_eq!(a.real_servers[9].checkers[0].connect, sa("10.0.0.10:80"));
    // The quorum cannot exceed the total weight (3); the hysteresis stays below it.
    let b = &c.virtual_servers[1];
    assert_eq!((b.quorum, b.hysteresis), (3, 2));
}

const VSG: &str = "global_defs {
   router_id LVS_DEVEL
}
virtual_server_group VSG_1 {
	10.0.0.1 8080
	10.0.0.2 80
	192.168.200.1 1358
	192.168.200.3-6 80
	10.9.0.8/30 443
	10.8.0.250-10.8.1.1 25
	fwmark 1
	fwmark 2
}
virtual_server group VSG_1 {
    delay_loop 6
    lb_algo rr
    lb_kind NAT
    protocol TCP
    real_server 192.168.200.1 1358 {
        weight 1
        HTTP_GET {
            url {
              path /testurl3/test.jsp
              status_code 200 301-302
            }
            connect_timeout 3
            retry 3
            delay_before_retry 3
        }
    }
    real_server 192.168.200.2 {
        weight 2
    }
}
virtual_server_group V6 {
    2001:db8::2-9 80
    2001:db8::1   80
    fwmark 3
}
virtual_server group V6 {
    lvs_method DR
    protocol SCTP
    real_server 2001:db8:1::10 {
    }
}
";

#[test]
fn virtual_server_group_shape() {
    let c = parse(VSG);
    let v4 = &c.virtual_servers[0];
    assert_eq!(v4.id, VsId::Group("VSG_1".into()));
    let mut want: Vec<ServiceKey> = ["10.0.0.1:8080", "10.0.0.2:80", "192.168.200.1:1358"]
        .iter()
        .map(|a| ServiceKey::tcp(sa(a)))
        .collect();
    want.extend((3..=6).map(|i| ServiceKey::tcp(sa(&format!("192.168.200.{i}:80")))));
    want.extend((8..=11).map(|i| ServiceKey::tcp(sa(&format!("10.9.0.{i}:443")))));
    want.extend((250..=255).map(|i| ServiceKey::tcp(sa(&format!("10.8.0.{i}:25")))));
    want.extend((0..=1).map(|i| ServiceKey::tcp(sa(&format!("10.8.1.{i}:25")))));
    want.push(ServiceKey::fwmark(1, AddressFamily::Inet));
    want.push(ServiceKey::fwmark(2, AddressFamily::Inet));
    assert_eq!(v4.keys, want);
    assert_eq!(v4.settings.persistence_timeout, None);
    // In a group the real servers' ports stay as written.
    assert_eq!(v4.real_servers[1].addr, sa("192.168.200.2:0"));
    assert_eq!(v4.real_servers[1].weight, 2);
    let CheckKind::Http(h) = &v4.real_servers[0].checkers[0].kind else {
        panic!()
    };
    assert_eq!(h.urls[0].status_codes, vec![200..=200, 301..=302]);

    let v6 = &c.virtual_servers[1];
    let mut want: Vec<ServiceKey> = (2..=9)
        .map(|i| ServiceKey::sctp(sa(&format!("[2001:db8::{i}]:80"))))
        .collect();
    want.push(ServiceKey::sctp(sa("[2001:db8::1]:80")));
    // A firewall mark without family takes the block's.
    want.push(ServiceKey::fwmark(3, AddressFamily::Inet6));
    assert_eq!(v6.keys, want);
    assert_eq!(v6.real_servers[0].forward, ForwardMethod::DirectRoute);
}

#[test]
fn http_get_port_and_status_code_shapes() {
    let text = "virtual_server 192.168.200.100 443 {
    delay_loop 6
    lb_algo rr
    lb_kind NAT
    persistence_timeout 50
    protocol TCP
    real_server 192.168.201.100 443 {
        weight 1
        HTTP_GET {
            url {
              path /
              status_code 200-299 400-499 503 505 # a code or a range, or both
            }
            url {
              path /mrtg/
              digest 9b3a0c85a887a256d6939da88aabd8cd
              status_code 200  # digest and status_code together
            }
            connect_port    444
            connect_ip      192.168.201.101
            bindto          192.168.201.1
            bind_port       40000
            connect_timeout 3
            retry 3
            delay_before_retry 3
        }
    }
}
";
    let c = parse(text);
    let chk = &only_vs(&c).real_servers[0].checkers[0];
    assert_eq!(chk.connect, sa("192.168.201.101:444"));
    assert_eq!(chk.bind, Some(sa("192.168.201.1:40000")));
    let CheckKind::Http(h) = &chk.kind else {
        panic!()
    };
    assert_eq!(
        h.urls[0].status_codes,
        vec![200..=299, 400..=499, 503..=503, 505..=505]
    );
    assert_eq!(h.urls[1].status_codes, vec![200..=200]);
    assert_eq!(
        h.urls[1].digest,
        Some([
            0x9b, 0x3a, 0x0c, 0x85, 0xa8, 0x87, 0xa2, 0x56, 0xd6, 0x93, 0x9d, 0xa8, 0x8a, 0xab,
            0xd8, 0xcd
        ])
    );
}

#[test]
fn ipv6_shape() {
    let text = "# Configuration File for keepalived
global_defs {
   router_id LVS_DEVEL
}
virtual_server 2001:db8:ae00::1 80 {
    delay_loop 6
    lb_algo rr
    lb_kind DR
    persistence_timeout 50
    persistence_granularity 64
    protocol TCP
#   real_server 2001:db8:ae00::10 80 {
    real_server 2001:db8:ae00::10 8080 {
        weight 1
        TCP_CHECK {
            connect_timeout 3
            retry 3
            bindto 2001:db8:ae00::2
        }
        HTTP_GET {
            url {
              path /ind.html
              status_code 200
            }
            connect_ip 2001:db8:ae00::11
            connect_timeout 3
        }
    }
    real_server 2001:db8:ae00::12 {
    }
}
";
    let vs = only_vs(&parse(text)).clone();
    assert_eq!(vs.keys, vec![ServiceKey::tcp(sa("[2001:db8:ae00::1]:80"))]);
    assert_eq!(vs.settings.persistence_granularity, Some(Netmask::V6(64)));
    // DR: a real server's port is the service's, whatever was written...
    assert_eq!(vs.real_servers[0].addr, sa("[2001:db8:ae00::10]:80"));
    assert_eq!(vs.real_servers[1].addr, sa("[2001:db8:ae00::12]:80"));
    // ...but checkers connect to the address as written.
    let rs = &vs.real_servers[0];
    assert_eq!(rs.checkers[0].connect, sa("[2001:db8:ae00::10]:8080"));
    assert_eq!(rs.checkers[0].bind, Some(sa("[2001:db8:ae00::2]:0")));
    assert_eq!(rs.checkers[1].connect, sa("[2001:db8:ae00::11]:8080"));
}

#[test]
fn udp_check_shape() {
    let text = "virtual_server 10.10.10.2 53 {
    delay_loop 6
    lb_algo rr
    lb_kind NAT
    ops
    protocol UDP
    real_server 192.168.200.6 53 {
        weight 1
        UDP_CHECK {
		connect_timeout 3
		retry 3
		delay_before_retry 3
!		require_reply
        }
        UDP_CHECK {
		payload 0a0b 0c 1
		require_reply de ad be ef
		min_reply_length 4
		max_reply_length 512
        }
        UDP_CHECK {
		require_reply
        }
    }
}
";
    let vs = only_vs(&parse(text)).clone();
    assert_eq!(vs.settings.flags, ServiceFlags::ONE_PACKET);
    let udp = |i: usize| match &vs.real_servers[0].checkers[i].kind {
        CheckKind::Udp(u) => u.clone(),
        other => panic!("{other:?}"),
    };
    let default = UdpCheck {
        payload: vec![],
        require_reply: None,
        min_reply_length: 0,
        max_reply_length: 255,
    };
    assert_eq!(udp(0), default);
    assert_eq!(
        udp(1),
        UdpCheck {
            payload: vec![0x0a, 0x0b, 0x0c, 0x01],
            require_reply: Some(vec![0xde, 0xad, 0xbe, 0xef]),
            min_reply_length: 4,
            max_reply_length: 512,
        }
    );
    assert_eq!(udp(2).require_reply, Some(vec![]));
    assert_eq!(vs.real_servers[0].checkers[0].retry, 3);
}

#[test]
fn tunnels_sorry_servers_and_thresholds() {
    let text = "virtual_server 192.0.2.1 80 {
    protocol TCP
    lvs_method TUN type gue port 6080 csum
    sorry_server 192.0.2.99
    sorry_server_inhibit
    sorry_server_lvs_method DR
    weight 5
    real_server 192.0.2.10 {
        uthreshold 1000
        lthreshold 10
    }
    real_server 2001:db8::20 80 {
        lvs_method TUN type gre remcsum
    }
    real_server 192.0.2.30 8080 {
        lvs_method NAT
        weight 0
    }
}
";
    let e = refuse(text);
    assert_eq!(
        (e.line, e.keyword.as_deref()),
        (line_of(text, "type gre"), Some("lvs_method"))
    );
    let text = text.replace("type gre remcsum", "type gre csum");
    let vs = only_vs(&parse(&text)).clone();
    let gue = ForwardMethod::Tunnel(Tunnel::gue(6080).with_flags(TunnelFlags::CSUM));
    assert_eq!(
        vs.real_servers,
        vec![
            RealServerConf {
                weight: 5,
                forward: gue,
                upper_threshold: 1000,
                lower_threshold: 10,
                ..real(line_of(&text, "192.0.2.10"), "192.0.2.10:80", vec![])
            },
            RealServerConf {
                weight: 5,
                forward: ForwardMethod::Tunnel(
                    Tunnel::new(TunnelEncap::Gre).with_flags(TunnelFlags::CSUM)
                ),
                ..real(line_of(&text, "2001:db8::20"), "[2001:db8::20]:80", vec![])
            },
            RealServerConf {
                weight: 0,
                ..real(line_of(&text, "192.0.2.30"), "192.0.2.30:8080", vec![])
            },
        ]
    );
    assert_eq!(
        vs.sorry,
        Some(SorryServer {
            addr: sa("192.0.2.99:80"),
            forward: ForwardMethod::DirectRoute,
            weight: 1,
            inhibit: true,
        })
    );
    // Total weight 10: quorum 1 stays.
    assert_eq!(vs.quorum, 1);
}

#[test]
fn timings_inherit_virtual_then_real_then_checker() {
    let text = "virtual_server 192.0.2.1 80 {
    protocol TCP
    delay_loop 10
    connect_timeout 7.5
    retry 4
    delay_before_retry 2
    warmup 0
    alpha
    real_server 192.0.2.10 80 {
        TCP_CHECK {
        }
        HTTP_GET {
            url {
                path /
            }
        }
    }
    real_server 192.0.2.11 80 {
        delay_loop 20
        connect_timeout 0.25
        retry 1
        warmup 3
        alpha false
        delay_before_retry 0
        TCP_CHECK {
            delay_loop 0.5
            connect_timeout 1
            retry 0
            warmup 0.000001
            alpha on
            delay_before_retry 9
        }
        MISC_CHECK {
            misc_path /bin/true
        }
    }
}
";
    let vs = only_vs(&parse(text)).clone();
    let t = |c: &CheckerConf| {
        (
            c.delay_loop,
            c.connect_timeout,
            c.retry,
            c.delay_before_retry,
            c.warmup,
            c.alpha,
        )
    };
    let r0 = &vs.real_servers[0].checkers;
    assert_eq!(t(&r0[0]), (secs(10.0), secs(7.5), 4, secs(2.0), None, true));
    assert_eq!(t(&r0[1]), (secs(10.0), secs(7.5), 4, secs(2.0), None, true));
    let r1 = &vs.real_servers[1].checkers;
    assert_eq!(
        t(&r1[0]),
        (
            secs(0.5),
            secs(1.0),
            0,
            secs(9.0),
            Some(Duration::from_micros(1)),
            true
        )
    );
    assert_eq!(
        t(&r1[1]),
        (secs(20.0), secs(0.25), 1, secs(0.0), Some(secs(3.0)), false)
    );
    // MISC_CHECK's timeout: the virtual server's delay_loop, not the checker's.
    let CheckKind::Misc(m) = &r1[1].kind else {
        panic!()
    };
    assert_eq!(m.timeout, secs(10.0));
}

#[test]
fn ports_and_persistence_as_keepalived_fixes_them() {
    let text = "virtual_server 192.0.2.1 0 {
    protocol TCP
    lb_kind DR
    real_server 192.0.2.10 8080 {
    }
}
virtual_server 192.0.2.2 443 {
    protocol TCP
    real_server 192.0.2.20 {
    }
    real_server 192.0.2.21 8443 {
    }
}
virtual_server 192.0.2.3 443 {
    protocol TCP
    persistence_granularity 255.255.255.0
    real_server 192.0.2.30 443 {
    }
}
virtual_server_group G0 {
    192.0.2.4
}
virtual_server group G0 {
    protocol UDP
    real_server 192.0.2.40 {
    }
}
";
    let c = parse(text);
    let [a, b, g, grp] = [0, 1, 2, 3].map(|i| &c.virtual_servers[i]);
    // No port: persistent with keepalived's default 360 s; DR takes the
    // service's port (0).
    assert_eq!(a.settings.persistence_timeout, Some(360));
    assert_eq!(a.settings.flags, ServiceFlags::PERSISTENT);
    assert_eq!(a.real_servers[0].addr, sa("192.0.2.10:0"));
    // NAT: a missing port becomes the service's, a given one stays.
    assert_eq!(b.real_servers[0].addr, sa("192.0.2.20:443"));
    assert_eq!(b.real_servers[1].addr, sa("192.0.2.21:8443"));
    assert_eq!(b.settings.persistence_timeout, None);
    // A granularity makes the service persistent.
    assert_eq!(g.settings.persistence_timeout, Some(360));
    assert_eq!(
        g.settings.persistence_granularity,
        Some(Netmask::V4("255.255.255.0".parse().unwrap()))
    );
    assert_eq!(grp.settings.persistence_timeout, Some(360));
    assert_eq!(grp.keys, vec![ServiceKey::udp(sa("192.0.2.4:0"))]);
}

#[test]
fn global_defs_of_the_lvs_half() {
    let text = "global_defs {
    router_id \"lb one\"
    lvs_flush
    lvs_flush_onstop
    lvs_timeouts tcp 7200 tcpfin 120
    lvs_timeouts udp 300
    script_user keepalived_script
}
";
    let c = parse(text);
    assert_eq!(
        c.global,
        config::Global {
            router_id: Some("lb one".into()),
            lvs_flush: true,
            lvs_flush_onstop: true,
            lvs_timeouts: Some(LvsTimeouts {
                tcp: 7200,
                tcp_fin: 120,
                udp: 300
            }),
            script_user: Some("keepalived_script".into()),
            script_security: false,
        }
    );
    assert!(c.virtual_servers.is_empty());
    assert!(
        parse("global_defs {\n lvs_flush_on_stop\n}\n")
            .global
            .lvs_flush_onstop
    );
}

#[test]
fn lexer_follows_keepalived() {
    // Braces anywhere split lines; comments start anywhere outside double
    // quotes; \# is a plain #; quoted words keep spaces and braces.
    let text = "virtual_server 192.0.2.1 80 { protocol TCP # comment { not a brace
  virtualhost \"a {b} #c\"
  real_server 192.0.2.10 80 { weight 2 } real_server 192.0.2.11 80 {
     MISC_CHECK { misc_path \"/bin/echo \\#1\" } }
}";
    let vs = only_vs(&parse(text)).clone();
    assert_eq!(vs.real_servers.len(), 2);
    assert_eq!(vs.real_servers[0].weight, 2);
    let CheckKind::Misc(m) = &vs.real_servers[1].checkers[0].kind else {
        panic!()
    };
    assert_eq!(m.argv, ["/bin/echo", "#1"]);
    assert_eq!(vs.real_servers[1].line, 3);
    assert_eq!(vs.real_servers[1].checkers[0].line, 4);
    // keepalived 2.2.7 has no line continuation outside $ definitions: the
    // backslash joins the keyword, which is then unknown.
    let e = refuse("virtual_server 192.0.2.1 80 {\n  lb_algo \\\n rr\n}\n");
    assert_eq!((e.line, e.keyword.as_deref()), (2, Some("lb_algo\\")));
}

// ---------------------------------------------------------------------------
// Refusals

/// A working virtual server with `extra` added at `level`.
fn with(level: &str, extra: &str) -> String {
    let (vs, rs, chk, url) = match level {
        "vs" => (extra, "", "", ""),
        "rs" => ("", extra, "", ""),
        "http" => ("", "", extra, ""),
        "url" => ("", "", "", extra),
        other => panic!("{other}"),
    };
    format!(
        "virtual_server 192.0.2.1 80 {{
    protocol TCP
{vs}
    real_server 192.0.2.10 80 {{
{rs}
        HTTP_GET {{
{chk}
            url {{
                path /
{url}
            }}
        }}
    }}
}}
"
    )
}

#[test]
fn unsupported_keywords_are_refused_at_their_line() {
    let cases: &[(&str, &str, &str)] = &[
        ("rs", "SMTP_CHECK {\n}", "SMTP_CHECK"),
        ("rs", "SSL_GET {\n url {\n path /\n }\n}", "SSL_GET"),
        ("rs", "DNS_CHECK {\n}", "DNS_CHECK"),
        ("rs", "BFD_CHECK {\n name x\n}", "BFD_CHECK"),
        ("rs", "PING_CHECK {\n}", "PING_CHECK"),
        ("rs", "FILE_CHECK {\n track_file f\n}", "FILE_CHECK"),
        ("rs", "notify_up /bin/up.sh", "notify_up"),
        ("rs", "notify_down /bin/down.sh", "notify_down"),
        ("rs", "smtp_alert", "smtp_alert"),
        ("rs", "snmp_name web", "snmp_name"),
        ("vs", "quorum_up /bin/up.sh", "quorum_up"),
        ("vs", "quorum_down /bin/down.sh", "quorum_down"),
        ("vs", "smtp_alert yes", "smtp_alert"),
        ("vs", "persistence_engine sip", "persistence_engine"),
        ("vs", "ha_suspend", "ha_suspend"),
        ("vs", "hashed", "hashed"),
        ("vs", "lvs_method TUN type ipip csum", "lvs_method"),
        ("vs", "lvs_method DR type gue", "lvs_method"),
        ("vs", "lvs_method TUN type gue", "lvs_method"),
        ("vs", "sh-port", "sh-port"),
        ("vs", "no_such_keyword 1", "no_such_keyword"),
        ("http", "bind_if eth0", "bind_if"),
        ("http", "fwmark 5", "fwmark"),
        ("http", "log_all_failures", "log_all_failures"),
        ("http", "enable_sni", "enable_sni"),
        ("http", "fast_recovery", "fast_recovery"),
        ("http", "misc_path /bin/true", "misc_path"),
        ("url", "regex \"ok\"", "regex"),
        ("url", "regex_no_match", "regex_no_match"),
    ];
    for &(level, extra, keyword) in cases {
        let text = with(level, extra);
        let e = refuse(&text);
        assert_eq!(
            (e.file.as_path(), e.line, e.keyword.as_deref()),
            (
                Path::new(FILE),
                line_of(&text, extra.lines().next().unwrap()),
                Some(keyword)
            ),
            "{extra}: {e}"
        );
    }
    let globals: &[(&str, &str)] = &[
        ("lvs_sync_daemon eth0 VI_1", "lvs_sync_daemon"),
        ("smtp_alert_checker", "smtp_alert_checker"),
        ("checker_log_all_failures", "checker_log_all_failures"),
        ("lvs_notify_fifo /run/fifo", "lvs_notify_fifo"),
        ("enable_snmp_checker", "enable_snmp_checker"),
        ("lvs_flush_onstop VS", "lvs_flush_onstop"),
        ("unheard_of_key 1", "unheard_of_key"),
    ];
    for &(extra, keyword) in globals {
        let text = format!("# header\nglobal_defs {{\n    router_id x\n    {extra}\n}}\n");
        let e = refuse(&text);
        assert_eq!(
            (e.line, e.keyword.as_deref()),
            (4, Some(keyword)),
            "{extra}: {e}"
        );
    }
    for root in ["SSL {\n}", "net_namespace blue", "bogus_block {\n}"] {
        let text = format!("global_defs {{\n}}\n{root}\n");
        let e = refuse(&text);
        assert_eq!(
            (e.line, e.keyword.as_deref()),
            (3, root.split_whitespace().next()),
            "{root}: {e}"
        );
    }
}

#[test]
fn bad_values_are_refused_at_their_line() {
    let cases: &[(&str, &str, &str)] = &[
        ("vs", "lb_algo nonesuch", "lb_algo"),
        ("vs", "lb_algo none", "lb_algo"),
        ("vs", "lb_kind NATS", "lb_kind"),
        ("vs", "protocol ICMP", "protocol"),
        ("vs", "persistence_timeout 0", "persistence_timeout"),
        ("vs", "persistence_timeout 2678401", "persistence_timeout"),
        (
            "vs",
            "persistence_granularity 129",
            "persistence_granularity",
        ),
        ("vs", "quorum 0", "quorum"),
        ("vs", "weight 0", "weight"),
        ("vs", "delay_loop 0", "delay_loop"),
        ("vs", "delay_loop -1", "delay_loop"),
        ("vs", "delay_loop 1.1234567", "delay_loop"),
        ("vs", "retry 0", "retry"),
        ("vs", "connect_timeout 4295", "connect_timeout"),
        ("vs", "ip_family inet6", "ip_family"),
        ("vs", "ip_family ipx", "ip_family"),
        ("vs", "sorry_server_inhibit", "sorry_server_inhibit"),
        ("vs", "sorry_server 192.0.2.99 70000", "sorry_server"),
        ("vs", "sorry_server 2001:db8::99 80", "sorry_server"),
        ("vs", "ops", "ops"),
        ("vs", "alpha yes", "alpha"),
        ("rs", "weight 2147483648", "weight"),
        ("rs", "weight -1", "weight"),
        ("rs", "weight 10abc", "weight"),
        ("rs", "inhibit_on_failure maybe", "inhibit_on_failure"),
        ("rs", "uthreshold 4294967296", "uthreshold"),
        ("rs", "real_server 192.0.2.11 80 {\n}", "real_server"),
        ("http", "connect_port 0", "connect_port"),
        ("http", "connect_port 65536", "connect_port"),
        ("http", "connect_ip 192.0.2.300", "connect_ip"),
        ("http", "bindto 2001:db8::1", "bindto"),
        ("http", "http_protocol 2", "http_protocol"),
        ("http", "retry -2", "retry"),
        ("url", "status_code 99", "status_code"),
        ("url", "status_code 300-200", "status_code"),
        ("url", "status_code 200-600", "status_code"),
        ("url", "digest 1234", "digest"),
        ("url", "digest 0123456789abcdef0123456789abcdeg", "digest"),
        ("url", "virtualhost", "virtualhost"),
    ];
    for &(level, extra, keyword) in cases {
        let text = with(level, extra);
        let e = refuse(&text);
        // Errors found once the block is read point at the block's line.
        let want = match extra {
            "ops" => line_of(&text, "ops"),
            _ if extra.starts_with("sorry_server 2001") => line_of(&text, "sorry_server"),
            _ => line_of(&text, extra.lines().next().unwrap()),
        };
        assert_eq!(
            (e.line, e.keyword.as_deref()),
            (want, Some(keyword)),
            "{extra}: {e}"
        );
    }
    // A port of 70000, a real server in the wrong family, an undefined group.
    let cases: &[(&str, usize, &str)] = &[
        (
            "virtual_server 192.0.2.1 70000 {\n real_server 192.0.2.2 80 {\n }\n}\n",
            1,
            "virtual_server",
        ),
        (
            "virtual_server 192.0.2.1 80 {\n real_server 2001:db8::2 80 {\n }\n}\n",
            2,
            "real_server",
        ),
        (
            "virtual_server group NOPE {\n real_server 192.0.2.2 80 {\n }\n}\n",
            1,
            "virtual_server",
        ),
        (
            "virtual_server 192.0.2.1 80 {\n protocol TCP\n}\n",
            1,
            "virtual_server",
        ),
        ("virtual_server fwmark 0 {\n}\n", 1, "virtual_server"),
        ("virtual_server 192.0.2.1/24 80 {\n}\n", 1, "virtual_server"),
        (
            "virtual_server 192.0.2.1 80 {\n real_server 192.0.2.2 80 {\n }\n real_server 192.0.2.2 80 {\n }\n}\n",
            4,
            "real_server",
        ),
        (
            "virtual_server 192.0.2.1 80 {\n real_server 192.0.2.2 {\n  TCP_CHECK {\n  }\n }\n}\n",
            3,
            "TCP_CHECK",
        ),
        (
            "virtual_server 192.0.2.1 80 {\n real_server 192.0.2.2 80 {\n  HTTP_GET {\n  }\n }\n}\n",
            3,
            "HTTP_GET",
        ),
        (
            "virtual_server 192.0.2.1 80 {\n real_server 192.0.2.2 80 {\n  MISC_CHECK {\n   misc_path /bin/check a b\n  }\n }\n}\n",
            4,
            "misc_path",
        ),
        (
            "virtual_server 192.0.2.1 80 {\n real_server 192.0.2.2 80 {\n  UDP_CHECK {\n   require_reply 0x 1\n  }\n }\n}\n",
            4,
            "require_reply",
        ),
        (
            "virtual_server 192.0.2.1 80 {\n real_server 192.0.2.2 80 {\n  UDP_CHECK {\n   min_reply_length 300\n  }\n }\n}\n",
            3,
            "UDP_CHECK",
        ),
        (
            "virtual_server_group G {\n 10.0.0.5-5 80\n}\n",
            2,
            "10.0.0.5-5",
        ),
        (
            "virtual_server_group G {\n 10.0.0.1/24 80\n}\n",
            2,
            "10.0.0.1/24",
        ),
        (
            "virtual_server_group G {\n 10.0.0.0/8 80\n}\n",
            2,
            "10.0.0.0/8",
        ),
        ("virtual_server_group G {\n fwmark 0\n}\n", 2, "fwmark"),
        (
            "virtual_server_group G {\n fwmark 1\n ::-ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff 80\n}\n",
            3,
            "::-ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
        ),
        ("virtual_server_group G {\n}\n", 1, "virtual_server_group"),
        (
            "virtual_server_group G {\n 10.0.0.1\n 2001:db8::1\n fwmark 1\n}\n",
            1,
            "virtual_server_group",
        ),
        (
            "virtual_server 192.0.2.1 80 {\n real_server 192.0.2.2 80 {\n }\n}\nvirtual_server 192.0.2.1 80 {\n real_server 192.0.2.3 80 {\n }\n}\n",
            5,
            "virtual_server",
        ),
        ("global_defs {\n lvs_timeouts tcp\n}\n", 2, "lvs_timeouts"),
        (
            "global_defs {\n lvs_timeouts tcp 1 sctp 2\n}\n",
            2,
            "lvs_timeouts",
        ),
        ("global_defs {\n router_id\n}\n", 2, "router_id"),
        ("global_defs\n router_id x\n", 1, "global_defs"),
        ("global_defs {\n router_id x\n", 1, "global_defs"),
        ("}\n", 1, "}"),
    ];
    for &(text, line, keyword) in cases {
        let e = refuse(text);
        assert_eq!(
            (e.line, e.keyword.as_deref()),
            (line, Some(keyword)),
            "{text}: {e}"
        );
    }
}

#[test]
fn lexer_refusals_name_the_line() {
    for (text, line) in [
        ("global_defs {\n router_id \"x\n}\n", 2),
        ("@node1 global_defs {\n}\n", 1),
        ("$VIP=192.0.2.1\n", 1),
        ("~SEQ(i,1,3) global_defs {\n}\n", 1),
        ("global_defs {\n}\n\n\nrouter_id\0 x\n", 5),
    ] {
        let e = refuse(text);
        assert_eq!(e.line, line, "{text:?}: {e}");
    }
    let long = format!("global_defs {{\n router_id {}\n}}\n", "x".repeat(1100));
    assert_eq!(refuse(&long).line, 2);
}

#[test]
fn vrrp_half_is_skipped_with_one_notice_each() {
    let text = "global_defs {
    notification_email {
        a@example.org
        b@example.org
    }
    notification_email_from lb@example.org
    smtp_server 192.0.2.25
    smtp_connect_timeout 30
    vrrp_garp_master_delay 10
    vrrp_strict
    enable_snmp_vrrp
    router_id LB
}
vrrp_script chk_haproxy {
    script \"killall -0 haproxy\"
    interval 2
}
vrrp_sync_group VG1 {
    group {
        VI_1
    }
}
vrrp_instance VI_1 {
    state MASTER
    interface eth0
    virtual_router_id 51
    priority 101
    authentication {
        auth_type PASS
        auth_pass 1111
    }
    virtual_ipaddress {
        192.0.2.1/24 dev eth0
    }
    track_script {
        chk_haproxy
    }
}
static_ipaddress {
    192.0.2.250/24 dev eth0 scope global
}
static_routes {
    192.0.2.0/24 via 192.0.2.254
}
virtual_server 192.0.2.1 80 {
    protocol TCP
    real_server 192.0.2.10 80 {
    }
}
";
    let c = parse(text);
    let keywords = [
        "notification_email",
        "notification_email_from",
        "smtp_server",
        "smtp_connect_timeout",
        "vrrp_garp_master_delay",
        "vrrp_strict",
        "enable_snmp_vrrp",
        "vrrp_script",
        "vrrp_sync_group",
        "vrrp_instance",
        "static_ipaddress",
        "static_routes",
    ];
    assert_eq!(c.notices, keywords.map(|k| notice(text, k)));
    assert_eq!(c.global.router_id.as_deref(), Some("LB"));
    assert_eq!(only_vs(&c).keys, vec![ServiceKey::tcp(sa("192.0.2.1:80"))]);
}

// ---------------------------------------------------------------------------
// include

/// A fresh directory under the system temporary directory.
fn temp_dir(tag: &str) -> PathBuf {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static N: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "keepalived-lite-config-{tag}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("conf.d")).unwrap();
    dir
}

#[test]
fn include_splices_files_relative_to_the_including_file() {
    let dir = temp_dir("include");
    let main = dir.join("keepalived.conf");
    std::fs::write(
        &main,
        "global_defs {\n    router_id inc\n}\ninclude conf.d/*.conf\nvirtual_server 192.0.2.9 80 {\n    protocol TCP\n    include servers.inc # a comment\n}\n",
    )
    .unwrap();
    std::fs::write(dir.join("conf.d/20-b.conf"), "vrrp_instance X {\n}\nvirtual_server 192.0.2.2 80 {\n    protocol TCP\n    real_server 192.0.2.20 80 {\n    }\n}\n").unwrap();
    std::fs::write(dir.join("conf.d/10-a.conf"), "! first\nvirtual_server 192.0.2.1 80 {\n    protocol TCP\n    real_server 192.0.2.10 80 {\n    }\n}\n").unwrap();
    std::fs::write(dir.join("conf.d/ignored.txt"), "garbage\n").unwrap();
    // Relative to the directory of the file that includes it (conf.d/...).
    std::fs::write(dir.join("servers.inc"), "include conf.d/rs.{inc,none}\n").unwrap();
    std::fs::write(
        dir.join("conf.d/rs.inc"),
        "\nreal_server 192.0.2.90 80 {\n}\n",
    )
    .unwrap();

    let err = config::load(&main).unwrap_err();
    // conf.d/rs.none does not exist.
    assert_eq!(
        (err.file.as_path(), err.line),
        (dir.join("servers.inc").as_path(), 1),
        "{err}"
    );
    std::fs::write(dir.join("servers.inc"), "include conf.d/rs.{inc,i[n]c}\n").unwrap();
    let err = config::load(&main).unwrap_err();
    // Both alternatives match rs.inc: a duplicated real server.
    assert_eq!(err.keyword.as_deref(), Some("real_server"), "{err}");
    std::fs::write(
        dir.join("servers.inc"),
        "include conf.d/rs.{inc,nothing*}\n",
    )
    .unwrap();

    let c = config::load(&main).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.global.router_id.as_deref(), Some("inc"));
    let ids: Vec<_> = c
        .virtual_servers
        .iter()
        .map(|v| (v.file.clone(), v.line, v.keys[0]))
        .collect();
    assert_eq!(
        ids,
        vec![
            (
                dir.join("conf.d/10-a.conf"),
                2,
                ServiceKey::tcp(sa("192.0.2.1:80"))
            ),
            (
                dir.join("conf.d/20-b.conf"),
                3,
                ServiceKey::tcp(sa("192.0.2.2:80"))
            ),
            (main.clone(), 5, ServiceKey::tcp(sa("192.0.2.9:80"))),
        ]
    );
    assert_eq!(
        c.virtual_servers[2].real_servers[0].addr,
        sa("192.0.2.90:80")
    );
    assert_eq!(c.virtual_servers[2].real_servers[0].line, 2);
    assert_eq!(
        c.notices,
        vec![Notice {
            file: dir.join("conf.d/20-b.conf"),
            line: 1,
            keyword: "vrrp_instance".into()
        }]
    );

    // An error inside an included file names that file and line.
    std::fs::write(
        dir.join("conf.d/10-a.conf"),
        "virtual_server 192.0.2.1 80 {\n  weight 99999999999\n}\n",
    )
    .unwrap();
    let e = config::load(&main).unwrap_err();
    assert_eq!(
        (e.file, e.line, e.keyword.as_deref()),
        (dir.join("conf.d/10-a.conf"), 2, Some("weight"))
    );

    // A named file that does not exist, and a file including itself.
    std::fs::write(&main, "include missing.conf\n").unwrap();
    let e = config::load(&main).unwrap_err();
    assert_eq!((e.line, e.keyword.as_deref()), (1, Some("include")));
    std::fs::write(&main, "\ninclude keepalived.conf\n").unwrap();
    let e = config::load(&main).unwrap_err();
    assert_eq!((e.line, e.keyword.as_deref()), (2, Some("include")));
    // includew: a wildcard matching nothing is an error; include: nothing.
    std::fs::write(&main, "includew conf.d/*.none\n").unwrap();
    assert_eq!(
        config::load(&main).unwrap_err().keyword.as_deref(),
        Some("includew")
    );
    std::fs::write(&main, "include conf.d/*.none\n").unwrap();
    assert!(config::load(&main).unwrap().virtual_servers.is_empty());
    // A directory.
    std::fs::write(&main, "include conf.d\n").unwrap();
    assert_eq!(config::load(&main).unwrap_err().line, 1);
    // load() of a file that is not there: line 0.
    let e = config::load(&dir.join("absent.conf")).unwrap_err();
    assert_eq!((e.line, e.keyword), (0, None));
    std::fs::remove_dir_all(&dir).unwrap();
}

// ---------------------------------------------------------------------------
// Nothing panics

const TOKENS: &[&str] = &[
    "{",
    "}",
    "{",
    "}",
    "\n",
    "\n",
    "\n",
    " ",
    "\t",
    "#",
    "!",
    "\"",
    "\\",
    "'",
    "global_defs",
    "router_id",
    "lvs_timeouts",
    "tcp",
    "virtual_server",
    "virtual_server_group",
    "group",
    "fwmark",
    "real_server",
    "sorry_server",
    "TCP_CHECK",
    "HTTP_GET",
    "MISC_CHECK",
    "UDP_CHECK",
    "url",
    "path",
    "/",
    "digest",
    "status_code",
    "200-299",
    "misc_path",
    "payload",
    "require_reply",
    "de ad",
    "x",
    "lb_algo",
    "sh",
    "rr",
    "sh-port",
    "lb_kind",
    "lvs_method",
    "TUN",
    "type",
    "gue",
    "port",
    "csum",
    "DR",
    "NAT",
    "protocol",
    "TCP",
    "UDP",
    "persistence_timeout",
    "persistence_granularity",
    "ip_family",
    "inet6",
    "weight",
    "quorum",
    "hysteresis",
    "delay_loop",
    "connect_timeout",
    "warmup",
    "retry",
    "alpha",
    "connect_ip",
    "connect_port",
    "bindto",
    "bind_port",
    "vrrp_instance",
    "notification_email",
    "10.0.0.1",
    "10.0.0.1-9",
    "10.0.0.0/30",
    "2001:db8::1",
    "::",
    "fe80::1",
    "0",
    "1",
    "80",
    "65535",
    "70000",
    "4294967295",
    "18446744073709551616",
    "-1",
    "1.5",
    "0.0000001",
    "255.255.255.0",
    "ops",
    "inhibit_on_failure",
    "yes",
    "user",
    "@x",
    "$X",
];

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn token_soup_never_panics(tokens in proptest::collection::vec(proptest::sample::select(TOKENS), 0..120)) {
        let text = tokens.join(" ");
        let _ = config::parse_str(&text, Path::new("/nonexistent/dir/keepalived.conf"));
    }

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        let text = String::from_utf8_lossy(&bytes);
        let _ = config::parse_str(&text, Path::new("/nonexistent/dir/keepalived.conf"));
    }

    #[test]
    fn mutated_samples_never_panic(which in 0usize..3, at in any::<prop::sample::Index>(), insert in proptest::sample::select(TOKENS), cut in 0usize..40) {
        let base = [SAMPLE, FWMARK, VSG][which];
        let mut chars: Vec<char> = base.chars().collect();
        let i = at.index(chars.len());
        let end = (i + cut).min(chars.len());
        chars.splice(i..end, insert.chars());
        let text: String = chars.into_iter().collect();
        let _ = config::parse_str(&text, Path::new("/nonexistent/dir/keepalived.conf"));
    }
}
