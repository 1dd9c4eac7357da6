//! ipvsadm-lite's command grammar and rule-file parser (pure, no kernel):
//! what ipvsadm 1.31 accepts, with the values it means, and what it refuses,
//! with its message and exit status (observed with Debian's ipvsadm in the
//! test VM; `tests/kernel_ipvsadm.rs` compares the two tools live).

#[allow(dead_code)]
#[path = "../examples/ipvsadm-lite/format.rs"]
mod format;
#[allow(dead_code)]
#[path = "../examples/ipvsadm-lite/restore.rs"]
mod restore;
#[allow(dead_code)]
#[path = "../examples/ipvsadm-lite/rules.rs"]
mod rules;

use std::collections::HashSet;
use std::net::{Ipv4Addr, SocketAddr};

use ipvsctl::batch::Write;
use ipvsctl::model::{
    AddressFamily, DaemonRole, ForwardMethod, Netmask, PersistenceEngine, RealServer, Scheduler,
    ServiceFlags, ServiceKey, Timeouts, Tunnel, TunnelEncap, TunnelFlags, VirtualServer,
};
use ipvsctl::sync::{self, Observed, ObservedDest, ObservedService, PlanOptions, Scope};
use proptest::prelude::*;
use rules::{Command, Format, ListWhat, NoResolver, RestoreOptions};

fn parse(line: &str) -> Result<Command, rules::CliError> {
    let words: Vec<&str> = line.split_whitespace().collect();
    rules::parse_args("ipvsadm", &words, &NoResolver)
}

fn ok(line: &str) -> Command {
    parse(line).unwrap_or_else(|e| panic!("`{line}`: {e:?}"))
}

fn err(line: &str) -> (String, i32) {
    match parse(line) {
        Ok(c) => panic!("`{line}` parsed: {c:?}"),
        Err(e) => (e.message, e.status),
    }
}

fn sa(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

#[test]
fn add_service_defaults_and_options() {
    let key = ServiceKey::tcp(sa("10.0.0.1:80"));
    assert_eq!(
        ok("-A -t 10.0.0.1:80"),
        Command::AddService(VirtualServer::new(key))
    );
    assert_eq!(
        ok("--add-service --tcp-service 10.0.0.1:80 --scheduler rr"),
        Command::AddService(VirtualServer::new(key).with_scheduler(Scheduler::RoundRobin))
    );
    assert_eq!(
        ok("-A -t 10.0.0.1:80 -s sh -b sh-port,sh-fallback -p 600 -M 255.255.255.0"),
        Command::AddService(
            VirtualServer::new(key)
                .with_scheduler(Scheduler::SourceHashing)
                .with_flags(ServiceFlags::SH_PORT | ServiceFlags::SH_FALLBACK)
                .with_persistence(600)
                .with_netmask(Netmask::V4(Ipv4Addr::new(255, 255, 255, 0)))
        )
    );
    // -p without a value is 360; a following option is not its value.
    for line in [
        "-A -t 10.0.0.1:80 -p -s rr",
        "-A -t 10.0.0.1:80 -s rr -p",
        "-A -t 10.0.0.1:80 -s rr --persistent",
    ] {
        assert_eq!(
            ok(line),
            Command::AddService(
                VirtualServer::new(key)
                    .with_scheduler(Scheduler::RoundRobin)
                    .with_persistence(360)
            ),
            "{line}"
        );
    }
    for line in [
        "-A -t 10.0.0.1:80 -p600",
        "-A -t10.0.0.1:80 -p 600",
        "-A --tcp-service=10.0.0.1:80 --persistent=600",
    ] {
        assert_eq!(
            ok(line),
            Command::AddService(VirtualServer::new(key).with_persistence(600)),
            "{line}"
        );
    }
    // -E is the same, and resets what is not given (ipvsadm sends it all).
    assert_eq!(
        ok("-E -t 10.0.0.1:80"),
        Command::EditService(VirtualServer::new(key))
    );
}

#[test]
fn service_addresses_the_c_library_way() {
    let cases = [
        ("-A -t 10.1:80", ServiceKey::tcp(sa("10.0.0.1:80"))),
        ("-A -t 0x0a000002:80", ServiceKey::tcp(sa("10.0.0.2:80"))),
        ("-A -t 012.0.0.1:80", ServiceKey::tcp(sa("10.0.0.1:80"))),
        ("-A -u 10.0.0.1:53 -o", ServiceKey::udp(sa("10.0.0.1:53"))),
        (
            "-A --sctp-service 10.0.0.9:99",
            ServiceKey::sctp(sa("10.0.0.9:99")),
        ),
        (
            "-A -t [2001:db8::1]:443",
            ServiceKey::tcp(sa("[2001:db8::1]:443")),
        ),
        ("-A -f 5", ServiceKey::fwmark(5, AddressFamily::Inet)),
        ("-A -f 5 -6", ServiceKey::fwmark(5, AddressFamily::Inet6)),
        (
            "-A -f 4294967295",
            ServiceKey::fwmark(u32::MAX, AddressFamily::Inet),
        ),
    ];
    for (line, key) in cases {
        match ok(line) {
            Command::AddService(vs) => assert_eq!(vs.key, key, "{line}"),
            other => panic!("{line}: {other:?}"),
        }
    }
    // IPv6 services get the /128 netmask; -6 too.
    match ok("-A -f 5 -6 -p 30 -M 64") {
        Command::AddService(vs) => {
            assert_eq!(vs.netmask, Netmask::V6(64));
            assert_eq!(vs.timeout, 30);
        }
        other => panic!("{other:?}"),
    }
    match ok("-A -t [2001:db8::1]:443 -p") {
        Command::AddService(vs) => assert_eq!(vs.netmask, Netmask::V6(128)),
        other => panic!("{other:?}"),
    }
    // A bare IPv6 address has no port; persistence makes port 0 legal.
    match ok("-A -t 2001:db8::1 -p") {
        Command::AddService(vs) => assert_eq!(vs.key, ServiceKey::tcp(sa("[2001:db8::1]:0"))),
        other => panic!("{other:?}"),
    }
    // ipvsadm's quirk: a bracketed IPv4 address loses its port.
    match ok("-A -t [10.0.0.1]:80 -p") {
        Command::AddService(vs) => assert_eq!(vs.key, ServiceKey::tcp(sa("10.0.0.1:0"))),
        other => panic!("{other:?}"),
    }
}

#[test]
fn real_servers() {
    let key = ServiceKey::tcp(sa("10.0.0.1:80"));
    // Direct routing and tunnelling take the service's port whatever -r says.
    assert_eq!(
        ok("-a -t 10.0.0.1:80 -r 192.168.1.1:8080"),
        Command::AddServer(key, RealServer::new(sa("192.168.1.1:80")))
    );
    assert_eq!(
        ok("-a -t 10.0.0.1:80 -r 192.168.1.1:8080 -m -w 3 -x 100 -y 20"),
        Command::AddServer(
            key,
            RealServer::new(sa("192.168.1.1:8080"))
                .with_weight(3)
                .with_forward(ForwardMethod::Masquerade)
                .with_thresholds(100, 20)
        )
    );
    // No port: the service's.
    assert_eq!(
        ok("-a -t 10.0.0.1:80 -r 192.168.1.1 -m"),
        Command::AddServer(
            key,
            RealServer::new(sa("192.168.1.1:80")).with_forward(ForwardMethod::Masquerade)
        )
    );
    assert_eq!(
        ok("-a -t 10.0.0.1:80 -r 1.2.3.4 -i --tun-type gue --tun-port 6080 --tun-csum"),
        Command::AddServer(
            key,
            RealServer::new(sa("1.2.3.4:80")).with_forward(ForwardMethod::Tunnel(
                Tunnel::new(TunnelEncap::Gue { port: 6080 }).with_flags(TunnelFlags::CSUM)
            ))
        )
    );
    assert_eq!(
        ok("-a -t 10.0.0.1:80 -r 2001:db8::9 -i"),
        Command::AddServer(
            key,
            RealServer::new(sa("[2001:db8::9]:80"))
                .with_forward(ForwardMethod::Tunnel(Tunnel::IPIP))
        )
    );
    assert_eq!(
        ok("-a -f 7 -r 10.1.1.2:8000 -g -w 2147483647"),
        Command::AddServer(
            ServiceKey::fwmark(7, AddressFamily::Inet),
            RealServer::new(sa("10.1.1.2:8000")).with_weight(i32::MAX as u32)
        )
    );
    // -d keeps the port it is given (only -a and -e copy the service's).
    assert_eq!(
        ok("-d -t 10.0.0.1:80 -r 10.1.1.1:99"),
        Command::DeleteServer(key, sa("10.1.1.1:99"))
    );
    // strtol: leading blanks and a sign are fine.
    match ok("-a -t 10.0.0.1:80 -r 10.1.1.1 -w +5") {
        Command::AddServer(_, rs) => assert_eq!(rs.weight, 5),
        other => panic!("{other:?}"),
    }
}

#[test]
fn other_commands() {
    assert_eq!(ok("-C"), Command::Clear);
    assert_eq!(ok("--clear"), Command::Clear);
    assert_eq!(
        ok("-Ln"),
        Command::List(
            ListWhat::All,
            Format {
                numeric: true,
                ..Format::default()
            }
        )
    );
    assert_eq!(
        ok("-l --stats --exact -n"),
        Command::List(
            ListWhat::All,
            Format {
                numeric: true,
                stats: true,
                exact: true,
                ..Format::default()
            }
        )
    );
    assert_eq!(
        ok("-L -n -t 10.0.0.1:80"),
        Command::List(
            ListWhat::Service(ServiceKey::tcp(sa("10.0.0.1:80"))),
            Format {
                numeric: true,
                ..Format::default()
            }
        )
    );
    assert_eq!(
        ok("-L --timeout"),
        Command::List(ListWhat::Timeout, Format::default())
    );
    assert_eq!(
        ok("-L --daemon"),
        Command::List(ListWhat::Daemon, Format::default())
    );
    assert_eq!(
        ok("-Sn"),
        Command::Save(Format {
            numeric: true,
            rule: true,
            ..Format::default()
        })
    );
    assert_eq!(ok("-Z"), Command::Zero(None));
    assert_eq!(
        ok("--set 900 120 300"),
        Command::SetTimeouts(Timeouts::new(900, 120, 300))
    );
    assert_eq!(ok("-R"), Command::Restore(RestoreOptions::default()));
    assert_eq!(
        ok("-R --clear-first --dry-run"),
        Command::Restore(RestoreOptions {
            clear_first: true,
            replace_table: false,
            dry_run: true
        })
    );
    assert_eq!(
        ok("-R --replace-table --dry-run"),
        Command::Restore(RestoreOptions {
            clear_first: false,
            replace_table: true,
            dry_run: true
        })
    );
    match ok(
        "--start-daemon backup --mcast-interface lo --syncid 7 --mcast-group 224.0.0.99 --mcast-port 9000 --mcast-ttl 3 --sync-maxlen 1000",
    ) {
        Command::StartDaemon(d) => {
            assert_eq!(d.role, DaemonRole::Backup);
            assert_eq!(d.interface, "lo");
            assert_eq!(d.sync_id, 7);
            assert_eq!(d.group, Some("224.0.0.99".parse().unwrap()));
            assert_eq!(
                (d.port, d.ttl, d.max_len),
                (Some(9000), Some(3), Some(1000))
            );
        }
        other => panic!("{other:?}"),
    }
    match ok("--start-daemon master") {
        Command::StartDaemon(d) => assert_eq!(d.interface, "eth0"),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        ok("--stop-daemon master"),
        Command::StopDaemon(DaemonRole::Master)
    );
    assert_eq!(ok("-h"), Command::Help);
    assert_eq!(ok("-v"), Command::Version);
    match ok("-A -t 1.2.3.4:80 --pe sip -p") {
        Command::AddService(vs) => {
            assert_eq!(vs.persistence_engine, Some(PersistenceEngine::sip()))
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn bad_lines_get_ipvsadms_message_and_status() {
    let try_help = "Try `ipvsadm -h' or 'ipvsadm --help' for more information.";
    let cases: &[(&str, &str, i32)] = &[
        ("-A -t 1.2.3.9:80 --bogus", "--bogus: unknown option", 255),
        ("-A -t 1.2.3.9:80 -Q", "-Q: unknown option", 255),
        ("-n -L", try_help, 255),
        ("-x", try_help, 255),
        ("", try_help, 255),
        ("--tcp-service=1.2.3.10:80 -A", try_help, 255),
        ("-A -t", "-t: missing argument", 255),
        (
            "-A",
            "You need to supply the 'service-address' option for the 'add-service' command",
            2,
        ),
        (
            "-A -t 10.0.0.999:80",
            "illegal virtual server address[:port] specified",
            2,
        ),
        (
            "-A -t 1.2.3.9:99999",
            "illegal virtual server address[:port] specified",
            2,
        ),
        (
            "-A -t 80",
            "illegal virtual server address[:port] specified",
            2,
        ),
        (
            "-A -t [::2]",
            "illegal virtual server address[:port] specified",
            2,
        ),
        (
            "-A -t ::3",
            "Zero port specified for non-persistent service",
            2,
        ),
        (
            "-a -t 1.2.3.4:80 -r 5.5.5.2 -w 2147483648",
            "illegal weight specified",
            2,
        ),
        (
            "-a -t 1.2.3.4:80 -r 5.5.5.2 -w -1",
            "illegal weight specified",
            2,
        ),
        (
            "-a -t 1.2.3.4:80 -r 5.5.5.2 -x 2147483648",
            "illegal u_threshold specified",
            2,
        ),
        (
            "-A -t 1.2.3.5:80 -p 0",
            "invalid timeout value `0' specified",
            2,
        ),
        ("-A -f 0", "invalid fwmark value `0' specified", 2),
        (
            "-A -f 4294967296",
            "invalid fwmark value `4294967296' specified",
            2,
        ),
        ("--set 1 2", "--set option requires 3 timeout values", 2),
        ("--set 1 2 3 4", "unexpected argument 4", 2),
        (
            "-a -t 1.2.3.4:80 -r 5.5.5.2 -g -m",
            "multiple 'forwarding-method' options specified",
            2,
        ),
        ("-A -t 1.2.3.13:80 -A", "invalid option `-A'", 2),
        (
            "-A -t 1.2.3.13:80 -n",
            "Illegal 'numeric' option with the 'add-service' command",
            2,
        ),
        (
            "-A -t 1.2.3.13:80 -o",
            "One-Packet Scheduling is only for UDP virtual services",
            2,
        ),
        ("-A -t 1.2.3.13:80 -6", "-6 used before -f\n", 2),
        (
            "-A -t 1.2.3.12:80 -b sh-port",
            "incompatible scheduler flag `sh-port'",
            2,
        ),
        (
            "-A -t 1.2.3.12:80 -b bogus",
            "invalid scheduler flag `bogus'",
            2,
        ),
        (
            "-a -t 1.2.3.4:80 -r [2001::1]:80 -m",
            "Different address family is allowed only for tunneling servers",
            2,
        ),
        (
            "-a -t 1.2.3.4:80 -r 5.5.5.9 --tun-port 5",
            "Tunnel options conflict with forward method",
            2,
        ),
        (
            "-a -t 1.2.3.4:80 -r 5.5.5.9 -i --tun-type gue",
            "You need to supply the 'tun-port' option for the 'gue' tunnel type",
            2,
        ),
        (
            "-a -t 1.2.3.4:80 -r 5.5.5.9 -i --tun-type gue --tun-port 5 --tun-csum --tun-remcsum",
            "The option 'tun-remcsum' conflicts with the 'tun-csum' option in the 'gue' tunnel type",
            2,
        ),
        (
            "-a -t 1.2.3.4:80 -r 5.5.5.9 -i --tun-type gre --tun-remcsum",
            "Illegal 'tun-remcsum' option with the 'gre' tunnel type",
            2,
        ),
        (
            "-L --timeout -t 1.2.3.4:80",
            "The option 'timeout' conflicts with the 'service-address' option in the 'list' command",
            2,
        ),
        (
            "-Ln --timeout --stats",
            "options conflicts in the list command",
            2,
        ),
        (
            "-A -t [2001::1]:80 -p -M 200",
            "illegal ipv6 netmask specified",
            2,
        ),
        (
            "--start-daemon bogus",
            "illegal start-daemon parameter specified",
            2,
        ),
        ("-R --bogus", "--bogus: unknown option", 255),
        (
            "-A -t 1.2.3.4:80 --dry-run",
            "invalid option `--dry-run'",
            2,
        ),
    ];
    for (line, message, status) in cases {
        assert_eq!(err(line), (message.to_string(), *status), "`{line}`");
    }
}

#[test]
fn rule_files() {
    let text = "\
ipvsadm -A -t 10.0.0.1:80 -s rr
  -a -t 10.0.0.1:80 -r 10.1.0.1:8080 -m -w 3\r

# a comment
-A -f 5 -6 -s wlc -p 30 -M 64   # trailing comment
";
    let rules = rules::parse(text).unwrap();
    assert_eq!(rules.iter().map(|r| r.line).collect::<Vec<_>>(), [1, 2, 5]);
    assert_eq!(
        rules[1].command,
        Command::AddServer(
            ServiceKey::tcp(sa("10.0.0.1:80")),
            RealServer::new(sa("10.1.0.1:8080"))
                .with_weight(3)
                .with_forward(ForwardMethod::Masquerade)
        )
    );
    let e = rules::parse("-A -t 10.0.0.1:80\n-A -t nope:80\n").unwrap_err();
    assert_eq!(e.line, 2);
    assert_eq!(
        e.error.message,
        "illegal virtual server address[:port] specified"
    );
    // -R inside a rule file is refused, as ipvsadm does.
    assert!(rules::parse("-R\n").is_err());
    // Names need a resolver; the pure parser refuses them.
    assert!(rules::parse("-A -t localhost:http\n").is_err());
}

/// The bulk-sync plan from the table `have` to `want`, for the whole
/// namespace (what `-R` does).
fn sync_plan(have: &restore::Desired, want: &restore::Desired) -> Vec<Write> {
    let mut observed = Observed::new();
    for s in &have.services {
        observed.insert(ObservedService::new(
            s.service.clone(),
            s.servers.iter().map(|rs| ObservedDest::new(*rs, None)),
        ));
    }
    let desired = restore::desired_state(want).unwrap();
    sync::plan(
        &desired,
        &observed,
        &Scope::All,
        &HashSet::new(),
        PlanOptions::default(),
    )
    .writes
}

#[test]
fn desired_state_and_plan() {
    let first = rules::parse(
        "-A -t 10.0.0.1:80 -s rr\n-a -t 10.0.0.1:80 -r 10.1.0.1 -m\n-a -t 10.0.0.1:80 -r 10.1.0.2 -m\n-A -t 10.0.0.3:80\n",
    )
    .unwrap();
    let have = restore::desired(&first).unwrap();
    let second = rules::parse(
        "-A -t 10.0.0.1:80 -s rr\n-a -t 10.0.0.1:80 -r 10.1.0.1 -m -w 5\n-a -t 10.0.0.1:80 -r 10.1.0.9 -m\n-A -u 10.0.0.4:53\n--set 1 2 3\n",
    )
    .unwrap();
    let want = restore::desired(&second).unwrap();
    assert_eq!(want.timeouts, Some(Timeouts::new(1, 2, 3)));
    let key = ServiceKey::tcp(sa("10.0.0.1:80"));
    let plan = sync_plan(&have, &want);
    assert_eq!(
        plan,
        vec![
            Write::DeleteDestination(key, sa("10.1.0.2:80")),
            Write::UpdateDestination(
                key,
                RealServer::new(sa("10.1.0.1:80"))
                    .with_forward(ForwardMethod::Masquerade)
                    .with_weight(5)
            ),
            Write::AddDestination(
                key,
                RealServer::new(sa("10.1.0.9:80")).with_forward(ForwardMethod::Masquerade)
            ),
            Write::AddService(VirtualServer::new(ServiceKey::udp(sa("10.0.0.4:53")))),
            Write::DeleteService(ServiceKey::tcp(sa("10.0.0.3:80"))),
        ]
    );
    let lines: Vec<String> = plan.iter().map(restore::op_line).collect();
    assert_eq!(
        lines,
        [
            "-d -t 10.0.0.1:80 -r 10.1.0.2:80",
            "-e -t 10.0.0.1:80 -r 10.1.0.1:80 -m -w 5",
            "-a -t 10.0.0.1:80 -r 10.1.0.9:80 -m -w 1",
            "-A -u 10.0.0.4:53 -s wlc",
            "-D -t 10.0.0.3:80",
        ]
    );
    // The same state plans nothing.
    assert!(sync_plan(&want, &want).is_empty());
    // Errors the kernel would give, by line.
    for (text, line, message) in [
        (
            "-A -t 1.1.1.1:80\n-A -t 1.1.1.1:80\n",
            2,
            "Service already exists",
        ),
        ("-E -t 1.1.1.1:80\n", 1, "No such service"),
        ("-a -t 1.1.1.1:80 -r 2.2.2.2\n", 1, "Service not defined"),
        (
            "-A -t 1.1.1.1:80\n-a -t 1.1.1.1:80 -r 2.2.2.2\n-a -t 1.1.1.1:80 -r 2.2.2.2\n",
            3,
            "Destination already exists",
        ),
        (
            "-A -t 1.1.1.1:80\n-d -t 1.1.1.1:80 -r 2.2.2.2\n",
            2,
            "No such destination",
        ),
        (
            "-Ln\n",
            1,
            "only -A -E -D -a -e -d -C and --set can be restored",
        ),
    ] {
        let e = restore::desired(&rules::parse(text).unwrap()).unwrap_err();
        assert_eq!(
            (e.line, e.error.message.as_str()),
            (line, message),
            "{text}"
        );
    }
    // -C and -D in a file.
    let d = restore::desired(
        &rules::parse(
            "-A -t 1.1.1.1:80\n-C\n-A -t 1.1.1.2:80\n-A -t 1.1.1.3:80\n-D -t 1.1.1.2:80\n",
        )
        .unwrap(),
    )
    .unwrap();
    assert_eq!(
        d.services.iter().map(|s| s.service.key).collect::<Vec<_>>(),
        [ServiceKey::tcp(sa("1.1.1.3:80"))]
    );
}

#[test]
fn inet_aton_and_strtol() {
    assert_eq!(rules::inet_aton("1.2.3.4"), Some(Ipv4Addr::new(1, 2, 3, 4)));
    assert_eq!(rules::inet_aton("1.2.772"), Some(Ipv4Addr::new(1, 2, 3, 4)));
    assert_eq!(
        rules::inet_aton("16909060"),
        Some(Ipv4Addr::new(1, 2, 3, 4))
    );
    assert_eq!(
        rules::inet_aton("0x01020304"),
        Some(Ipv4Addr::new(1, 2, 3, 4))
    );
    assert_eq!(
        rules::inet_aton("1.2.3.4 x"),
        Some(Ipv4Addr::new(1, 2, 3, 4))
    );
    for bad in [
        "",
        "1..2",
        "1.2.3.256",
        "1.2.3.4.5",
        "a.b.c.d",
        "1.2.3.4x",
        "09",
    ] {
        assert_eq!(rules::inet_aton(bad), None, "{bad}");
    }
    assert_eq!(rules::strtol(" +5"), Some(5));
    assert_eq!(rules::strtol("-0"), Some(0));
    assert_eq!(rules::strtol("5 "), None);
    assert_eq!(rules::strtol(""), None);
    assert_eq!(rules::strtol("99999999999999999999"), None);
}

const VOCABULARY: &[&str] = &[
    "-A",
    "-E",
    "-D",
    "-a",
    "-e",
    "-d",
    "-C",
    "-L",
    "-l",
    "-Z",
    "-S",
    "-R",
    "--set",
    "-t",
    "-u",
    "-f",
    "-6",
    "-s",
    "-p",
    "-M",
    "-b",
    "--pe",
    "-o",
    "-r",
    "-g",
    "-i",
    "-m",
    "-w",
    "-x",
    "-y",
    "-n",
    "--stats",
    "--rate",
    "--exact",
    "--tun-type",
    "--tun-port",
    "--tun-csum",
    "--tun-nocsum",
    "--tun-remcsum",
    "--start-daemon",
    "--stop-daemon",
    "--mcast-interface",
    "--mcast-group",
    "--syncid",
    "master",
    "backup",
    "gue",
    "gre",
    "ipip",
    "rr",
    "sh",
    "mh",
    "sh-port,sh-fallback",
    "flag-1",
    "10.0.0.1:80",
    "[2001:db8::1]:443",
    "2001:db8::1",
    "[1.2.3.4]:80",
    "1.2.3.4",
    "0",
    "5",
    "-1",
    "4294967295",
    "255.255.255.0",
    "64",
    "--",
    "-",
    "-Ln",
    "-p600",
    "--tcp-service=1.1.1.1:1",
    "ipvsadm",
    "#",
    "[",
    "]:",
    ":",
    "",
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn parse_never_panics_on_any_text(text in any::<String>()) {
        let _ = rules::parse(&text);
    }

    #[test]
    fn parse_never_panics_on_option_soup(
        lines in proptest::collection::vec(
            proptest::collection::vec(proptest::sample::select(VOCABULARY), 0..12),
            0..6,
        )
    ) {
        let text: String = lines.iter().map(|l| l.join(" ") + "\n").collect();
        if let Ok(rules) = rules::parse(&text) {
            let _ = restore::desired(&rules);
        }
    }

    #[test]
    fn parse_service_never_panics(s in "[\\[\\]0-9a-fA-Fx:. ]{0,40}") {
        let _ = rules::parse_service(&s, ipvsctl::model::Protocol::Tcp, &NoResolver);
        let _ = rules::inet_aton(&s);
    }
}

#[test]
fn split_parsing_gives_the_same_rules_and_first_error() {
    // 4,000 services with two servers each: about 230 KiB, several parts.
    let mut text = String::new();
    for i in 0..4000u32 {
        let svc = format!("-t 10.{}.{}.1:80", i / 250, i % 250);
        text.push_str(&format!("-A {svc} -s wlc\n"));
        text.push_str(&format!(
            "# a comment\n-a {svc} -r 172.16.{}.1:8080 -m -w 1\n",
            i % 250
        ));
        text.push_str(&format!(
            "\n-a {svc} -r 172.17.{}.1:8080 -g -w 2\n",
            i % 250
        ));
    }
    let whole = rules::parse_with(&text, "ipvsadm", &rules::NoResolver).unwrap();
    for threads in [1, 2, 3, 7] {
        let split = rules::parse_split(&text, "ipvsadm", &rules::NoResolver, threads).unwrap();
        assert!(threads == 1 || split.len() >= threads, "{threads} threads");
        assert_eq!(split.concat(), whole, "{threads} threads");
    }
    // Bad lines late in the file and early in a later part: the first one
    // is reported, with its line number in the whole file.
    let mut lines: Vec<&str> = text.lines().collect();
    let (late, later) = (lines.len() * 3 / 4 + 1, lines.len() - 2);
    lines[late] = "-a -t 10.0.0.1:80 -r 1.2.3.4 -w 99999999999";
    lines[later] = "-Q";
    let bad = lines.join("\n");
    let want = rules::parse_with(&bad, "ipvsadm", &rules::NoResolver).unwrap_err();
    assert_eq!(want.line, late + 1);
    for threads in [2, 3, 7] {
        let got = rules::parse_split(&bad, "ipvsadm", &rules::NoResolver, threads).unwrap_err();
        assert_eq!(
            (got.line, &got.error),
            (want.line, &want.error),
            "{threads} threads"
        );
    }
}

/// The table built part by part during a threaded parse (as `-R` does).
fn table_while_parsing(text: &str, threads: usize) -> Result<restore::Desired, rules::ParseError> {
    let mut table = restore::Table::with_capacity(0);
    rules::parse_each(
        text,
        "ipvsadm",
        &NoResolver,
        threads,
        rules::BadLines::Stop,
        |rules, _| rules.iter().try_for_each(|rule| table.run(rule)),
    )?;
    Ok(table.finish())
}

#[test]
fn table_built_while_parsing_is_the_table_of_the_whole_file() {
    // 3,000 services with three servers each (about 260 KiB, many parts), a
    // -D and an -E late in the file.
    let mut lines = Vec::new();
    for i in 0..3000u32 {
        let svc = format!("-t 10.{}.{}.1:80", i / 250, i % 250);
        lines.push(format!("-A {svc} -s wlc"));
        for j in 0..3 {
            lines.push(format!("-a {svc} -r 172.16.{}.{j}:8080 -m -w 1", i % 250));
        }
    }
    lines.push("-D -t 10.0.7.1:80".to_owned());
    lines.push("-E -t 10.0.8.1:80 -s rr".to_owned());
    let text = lines.join("\n");
    let whole = restore::desired(&rules::parse(&text).unwrap()).unwrap();
    assert_eq!(whole.services.len(), 2999);
    for threads in [1, 2, 3] {
        assert_eq!(
            table_while_parsing(&text, threads).unwrap(),
            whole,
            "{threads}"
        );
    }
    // An error of the table early (a service added twice) and a parse error
    // late: the parse error is reported, as when the whole file is parsed
    // before the table is built; without it, the table's error.
    let mut bad = lines.clone();
    bad[8] = bad[0].clone();
    let late = bad.len() - 3;
    bad[late] = "-a -t 10.0.0.1:80 -r 1.2.3.4 -w 99999999999".to_owned();
    let parse_error = rules::parse(&bad.join("\n")).unwrap_err();
    assert_eq!(parse_error.line, late + 1);
    bad[late] = lines[late].clone();
    let table_error = restore::desired(&rules::parse(&bad.join("\n")).unwrap()).unwrap_err();
    assert_eq!(
        (table_error.line, table_error.error.message.as_str()),
        (9, "Service already exists")
    );
    for threads in [1, 2, 3] {
        let got = table_while_parsing(&bad.join("\n"), threads).unwrap_err();
        assert_eq!(
            (got.line, &got.error),
            (table_error.line, &table_error.error)
        );
        bad[late] = "-a -t 10.0.0.1:80 -r 1.2.3.4 -w 99999999999".to_owned();
        let got = table_while_parsing(&bad.join("\n"), threads).unwrap_err();
        assert_eq!(
            (got.line, &got.error),
            (parse_error.line, &parse_error.error)
        );
        bad[late] = lines[late].clone();
    }
}

#[test]
fn fast_lines_parse_exactly_like_the_general_parser() {
    // (line, whether the fast path takes it)
    let cases = [
        ("-A -t 10.0.0.1:80 -s wlc", true),
        ("-A -u 10.0.0.1:53 -s rr", true),
        ("-A -t 10.0.0.1:80 -s abcdefghijklmno", true),
        ("-A -t 10.0.0.1:65535 -s not-a-scheduler", true),
        ("-a -t 10.0.0.1:80 -r 172.16.0.1:8080 -m -w 1", true),
        ("-a -t 10.0.0.1:80 -r 172.16.0.1:8080 -g -w 0", true),
        ("-a -u 10.0.0.1:53 -r 172.16.0.1:0 -m -w 2147483647", true),
        (
            "ipvsadm -a -t 10.0.0.1:80 -r 172.16.0.1:8080 -m -w 1 # x",
            true,
        ),
        ("-a\t-t 0.0.0.0:1 -r 255.255.255.255:65535 -m -w 10\r", true),
        ("-A -t 199.250.100.9:443 -s wlc", true),
        // Everything else goes to the general parser.
        ("-A -t 10.0.0.1:0 -s wlc", false),
        ("-A -t 10.0.0.1:080 -s wlc", false),
        ("-A -t 010.0.0.1:80 -s wlc", false),
        ("-A -t 10.1:80 -s wlc", false),
        ("-A -t 256.0.0.1:80 -s wlc", false),
        ("-A -t 1.2.3.1000:80 -s wlc", false),
        ("-A -t 1.2.3.4.5:80 -s wlc", false),
        ("-A -t 1..3.4:80 -s wlc", false),
        ("-A -t 1.2.3.4:80:1 -s wlc", false),
        ("-A -t 1.2.3.4: -s wlc", false),
        ("-A -t 1.2.3.-4:80 -s wlc", false),
        ("-A -t 10.0.0.1:80 -s abcdefghijklmnop", false),
        ("-A -t [2001:db8::1]:80 -s wlc", false),
        ("-A -t 10.0.0.1:80 -s wlc -p 360", false),
        ("-A -t 10.0.0.1:http -s wlc", false),
        ("-a -t 10.0.0.1:80 -r 172.16.0.1:8080 -i -w 1", false),
        (
            "-a -t 10.0.0.1:80 -r 172.16.0.1:8080 -m -w 2147483648",
            false,
        ),
        ("-a -t 10.0.0.1:80 -r 172.16.0.1:8080 -m -w 01", false),
        ("-a -t 10.0.0.1:80 -r 172.16.0.1 -m -w 1", false),
        ("-a -t 10.0.0.1:80 -r 172.16.0.1:65536 -m -w 1", false),
        ("-a -t 10.0.0.1:80 -r 172.16.0.1:8080 -m -w1", false),
        ("-a -f 1 -r 172.16.0.1:80 -m -w 1", false),
        ("-e -t 10.0.0.1:80 -r 172.16.0.1:8080 -m -w 1", false),
    ];
    let mut words = Vec::new();
    for (line, fast) in cases {
        rules::line_words(line, &mut words);
        let general = rules::parse_args("ipvsadm", &words, &rules::NoResolver);
        match rules::fast_rule(&words) {
            Some(got) => {
                assert!(fast, "the fast path took {line:?}");
                assert_eq!(Ok(got), general, "{line:?}");
            }
            None => assert!(!fast, "the fast path left {line:?}"),
        }
    }
    // A direct-routing server takes the service's port (ipvsadm's rule).
    rules::line_words("-a -t 10.0.0.1:80 -r 172.16.0.1:8080 -g -w 1", &mut words);
    let Some(rules::Command::AddServer(_, rs)) = rules::fast_rule(&words) else {
        panic!("not taken");
    };
    assert_eq!(rs.addr, "172.16.0.1:80".parse().unwrap());
}

#[test]
fn restore_options_are_for_restore_only_and_replace_table_excludes_clear_first() {
    assert_eq!(
        err("-R --clear-first --replace-table"),
        (
            "--clear-first and --replace-table conflict: --replace-table never deletes what stays"
                .to_owned(),
            2
        )
    );
    assert_eq!(
        err("-A -t 1.2.3.4:80 --replace-table"),
        ("invalid option `--replace-table'".to_owned(), 2)
    );
    assert_eq!(
        err("-R --replace-table=yes").1,
        255,
        "a value for a flag is popt's error"
    );
}

/// The line numbers of the rules, and the skipped lines with their messages.
type Parsed = (Vec<usize>, Vec<(usize, String)>);

/// `parse_each` with `BadLines::Skip`, one thread or several.
fn parse_skipping(text: &str, threads: usize) -> Result<Parsed, rules::ParseError> {
    let (mut ran, mut skipped) = (Vec::new(), Vec::new());
    rules::parse_each(
        text,
        "ipvsadm",
        &NoResolver,
        threads,
        rules::BadLines::Skip,
        |rules, bad| {
            ran.extend(rules.iter().map(|r| r.line));
            skipped.extend(bad.into_iter().map(|e| (e.line, e.error.message)));
            Ok(())
        },
    )?;
    Ok((ran, skipped))
}

#[test]
fn ipvsadm_restore_skips_lines_with_unknown_options_and_stops_at_bad_values() {
    // ipvsadm -R reports an unknown option or a missing value and goes on.
    let text = "-A -t 10.0.0.1:80\n-A -t 10.0.0.2:80 --bogus\n\n-A -t 10.0.0.3:80 -s\n-Z\n";
    let (ran, skipped) = parse_skipping(text, 1).unwrap();
    assert_eq!(ran, [1, 5]);
    assert_eq!(
        skipped,
        [
            (2, "--bogus: unknown option".to_owned()),
            (4, "-s: missing argument".to_owned())
        ]
    );
    // It exits on a bad value, a missing command and -R; so does the parse.
    for (text, line, message) in [
        (
            "-A -t 10.0.0.1:80 --bogus\n-A -t 10.0.0.999:80\n",
            2,
            "illegal virtual server address[:port] specified",
        ),
        (
            "-A -t 10.0.0.1:80\n-t 10.0.0.2:80\n",
            2,
            "Try `ipvsadm -h' or 'ipvsadm --help' for more information.",
        ),
        (
            "-R\n",
            1,
            "Try `ipvsadm -h' or 'ipvsadm --help' for more information.",
        ),
    ] {
        let e = parse_skipping(text, 1).unwrap_err();
        assert_eq!(
            (e.line, e.error.message.as_str()),
            (line, message),
            "{text}"
        );
        assert!(e.error.exits);
    }
    // Split among threads, the same lines.
    let mut big = String::new();
    for i in 0..4000u32 {
        big.push_str(&format!("-A -t 10.{}.{}.1:80 -s rr\n", i / 250, i % 250));
        if i % 700 == 0 {
            big.push_str("-A -t 10.255.0.1:80 --nope\n");
        }
    }
    let one = parse_skipping(&big, 1).unwrap();
    assert_eq!(one.1.len(), 6);
    assert_eq!(one.0.len() + one.1.len(), big.lines().count());
    for threads in [2, 3, 4] {
        assert_eq!(
            parse_skipping(&big, threads).unwrap(),
            one,
            "{threads} threads"
        );
    }
    // Without skipping, the first such line is the error.
    let e = rules::parse(text).unwrap_err();
    assert_eq!((e.line, e.error.exits), (2, false));
}
