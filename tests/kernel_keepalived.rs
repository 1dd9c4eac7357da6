//! `examples/keepalived-lite` side by side with Debian's keepalived (2.2.7
//! in bookworm, package keepalived) on the real kernel: the same
//! configuration file, the same command line, the same real servers coming
//! and going, the same IPVS table.
//!
//! What it proves: for each configuration in `tests/data/keepalived/`
//! (written in the shapes of keepalived's own samples; together they use
//! every keyword keepalived-lite supports, see [`CASES`]), keepalived-lite
//! and `keepalived -C` build the same IPVS table at start, follow every
//! change of their real servers' health to the same table (a real server
//! going down, one coming up, a MISC_CHECK weight change, a quorum lost and
//! regained with the sorry server standing in), and leave the same table
//! behind when stopped with SIGTERM (only what the test itself put there).
//! Each of those tables also equals an expectation written in the test for
//! that phase, so two empty or two equally wrong tables never pass.
//!
//! How: each daemon runs in a fresh named network namespace of its own
//! ([`TestNetns`]), two per configuration ("ref" runs keepalived, "lite"
//! runs keepalived-lite), both started as `PROGRAM -n -l -D -C -s NETNS -f
//! FILE -p PIDFILE -c CHECKERS_PIDFILE` from the test's namespace. Every
//! namespace has the same `dummy0` holding the virtual addresses and the
//! real servers' addresses (IPv4 and IPv6), and the real servers are the
//! test's own listeners inside it: TCP accept loops, a small HTTP server
//! with a chosen status, body and expected `Host`, UDP echo; MISC_CHECK
//! scripts exit with the status the test writes to a file (both daemons of
//! a configuration read the same file). Some real servers are down (no
//! listener) at start; each later phase changes the real servers in both
//! namespaces the same way.
//!
//! A phase is settled when both namespaces' `ipvsadm -S -n` equal the
//! phase's expectation and stay so for [`STABLE`] (longer than a check
//! period plus a retry, so a change the daemons have yet to see cannot
//! pass for a settled table). Tables are compared as sets of services, each
//! with its set of real-server lines: ipvsadm lists in the kernel's hash
//! order, which differs between namespaces. `ipvsadm -S` shows neither the
//! real servers' thresholds nor the connection timeouts, so at the end of
//! each phase `ipvsadm -L -n --thresholds` and `ipvsadm -L -n --timeout`
//! are compared too. To spare process starts (a tenth of a second each
//! under QEMU's TCG), the poll reads `/proc/net/ip_vs` of both namespaces
//! every [`POLL`] and runs `ipvsadm -S -n` only when one of them changed
//! and once more when the stable time is over. On failure the test prints
//! both tables, the expectation and both daemons' logs.
//!
//! The configurations run concurrently, one thread each, with short timers
//! (`delay_loop 1`, `connect_timeout 1`, `retry 1`, `delay_before_retry 1`).
//! Daemons still running when a thread unwinds are killed (SIGKILL to
//! their process group) by a drop guard.
//!
//! Needs the Debian package keepalived (installed by `scripts/test`; the
//! guest sees the host's file system) and the example built first:
//! `cargo build --examples --all-features`, then
//! `cargo test --all-features --test kernel_keepalived`. Runs in the VM
//! through the cargo runner like every kernel test. `IPVSCTL_KEEPALIVED`
//! names the reference program (default `/usr/sbin/keepalived`),
//! `IPVSCTL_KEEPALIVED_LITE` the one under test (default the built
//! example); pointing the latter at keepalived runs the harness against
//! keepalived on both sides.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ipvsctl::NetNs;
use ipvsctl::netlink::netns::run_in;
use support::TestNetns;

/// How often the tables are looked at while a phase settles.
const POLL: Duration = Duration::from_millis(200);
/// How long both tables must equal the expectation: two check periods
/// (`delay_loop 1`) and a retry (`retry 1`, `delay_before_retry 1`), so a
/// real server that changed is seen by both daemons within it.
const STABLE: Duration = Duration::from_millis(3_000);
/// How often the tables are listed again while they do not match and
/// `/proc/net/ip_vs` stays the same.
const RELOOK: Duration = Duration::from_secs(1);
/// Bound on the first phase (daemon start, alpha, warmup, first checks).
const START_DEADLINE: Duration = Duration::from_secs(60);
/// Bound on each later phase.
const PHASE_DEADLINE: Duration = Duration::from_secs(45);
/// Configurations that differed with all of them running that are run
/// again alone, at most.
const RUN_AGAIN_AT_MOST: usize = 3;
/// Bound on a daemon's exit after SIGTERM.
const STOP_DEADLINE: Duration = Duration::from_secs(30);
/// The connection timeouts of a namespace nobody set them in.
const DEFAULT_TIMEOUTS: &str = "timeout 900 120 300";

// ---------------------------------------------------------------- cases ---

/// How a real server (one address and port in both namespaces) answers.
#[derive(Clone, Copy, Debug)]
enum Kind {
    /// Accepts TCP connections and closes them.
    Tcp,
    /// Echoes UDP datagrams.
    Udp,
    /// Answers HTTP requests with this status and body when the request's
    /// `Host` (without port) is `host`, else with 421.
    Http {
        host: &'static str,
        status: u16,
        body: &'static str,
    },
}

/// A real server's listener, and whether it listens at start.
struct Server {
    addr: &'static str,
    kind: Kind,
    up: bool,
}

const fn tcp(addr: &'static str, up: bool) -> Server {
    Server {
        addr,
        kind: Kind::Tcp,
        up,
    }
}

const fn udp(addr: &'static str, up: bool) -> Server {
    Server {
        addr,
        kind: Kind::Udp,
        up,
    }
}

const fn http(addr: &'static str, host: &'static str, status: u16, body: &'static str) -> Server {
    Server {
        addr,
        kind: Kind::Http { host, status, body },
        up: true,
    }
}

/// A change made in both namespaces at the start of a phase.
#[derive(Clone, Copy, Debug)]
enum Act {
    /// The listener at this address starts.
    Up(&'static str),
    /// The listener at this address stops (connections refused, ports
    /// unreachable).
    Down(&'static str),
    /// The HTTP server at this address answers this status and body from
    /// now on.
    Reply(&'static str, u16, &'static str),
    /// The MISC_CHECK script `misc-NAME.sh` exits with this (a number, or
    /// `sleep` for longer than misc_timeout) from now on.
    Misc(&'static str, &'static str),
}

/// One phase: what changes, then what both tables must settle to
/// (`ipvsadm -S -n` lines, any order).
struct Phase {
    name: &'static str,
    acts: &'static [Act],
    expect: &'static str,
}

/// One configuration and its script.
struct Case {
    /// The file in `tests/data/keepalived/` (`@DIR@` is replaced by the
    /// case's directory).
    file: &'static str,
    /// Every real server's listener.
    servers: &'static [Server],
    /// MISC_CHECK scripts (`misc-NAME.sh`) and their first exit status.
    misc: &'static [(&'static str, &'static str)],
    /// `ipvsadm` arguments run in both namespaces before the daemons start
    /// (a service of the test's own).
    stray: Option<&'static str>,
    /// Timeouts and thresholds after every phase, as [`extras`] prints
    /// them.
    extras: &'static [&'static str],
    phases: &'static [Phase],
    /// The table after both daemons stopped.
    at_exit: &'static str,
}

/// A body and its MD5 (`digest` in http_get.conf).
const BODY: &str = "keepalived-lite side by side\n";
/// Another body: the digest no longer matches.
const OTHER_BODY: &str = "changed body\n";

/// The configurations. Together they use every keyword keepalived-lite
/// supports: global_defs router_id, lvs_flush, lvs_timeouts (tcp_check),
/// script_user, enable_script_security (misc_check); virtual_server_group
/// with address, range and fwmark entries and `virtual_server group`
/// (group); `virtual_server IP PORT` (most), `fwmark` (fwmark); delay_loop
/// (all); lb_algo and lvs_sched, lb_kind and lvs_method, real_server
/// weight, lvs_method, uthreshold, lthreshold (tcp_check); protocol TCP,
/// UDP and SCTP, ops (ipv6); persistence_timeout and
/// persistence_granularity (tcp_check, ipv6, group); quorum, hysteresis
/// (quorum); sorry_server (quorum, sorry_server), sorry_server_inhibit,
/// sorry_server_lvs_method (sorry_server); alpha, omega (inhibit, quorum);
/// inhibit_on_failure on a virtual server and on a real server (inhibit);
/// virtualhost on a virtual server and on a real server (http_get);
/// TCP_CHECK (most), HTTP_GET url path, digest, status_code (http_get),
/// MISC_CHECK misc_path, misc_timeout, misc_dynamic (misc_check),
/// UDP_CHECK (ipv6); connect_ip, bindto (tcp_check), connect_port
/// (tcp_check, fwmark, ipv6, http_get), connect_timeout, retry,
/// delay_before_retry (most), nb_get_retry (http_get), warmup on a virtual
/// server and in a checker (fwmark). Also: lvs_flush_onstop (quorum),
/// ip_family (fwmark), the scheduler flags flag-1 and sh-port (group),
/// http_protocol (http_get), MISC_CHECK user (misc_check), UDP_CHECK
/// payload, require_reply, min_reply_length and max_reply_length (ipv6).
/// `include` and bind_port are checked on the host only
/// (tests/keepalived_lite_config.rs, tests/keepalived_lite_checks.rs).
/// tcp_check also has a vrrp_instance and the mail keys of global_defs.
const CASES: &[Case] = &[
    Case {
        file: "tcp_check.conf",
        servers: &[
            tcp("10.20.0.1:8080", true),
            tcp("10.20.0.2:8080", true),
            tcp("10.20.0.3:8080", true),
            tcp("10.20.0.3:9000", false),
            tcp("10.20.0.5:8081", true),
            tcp("10.20.0.6:8080", false),
            // keepalived lists it at port 80 but checks port 8080.
            tcp("10.20.0.7:8080", true),
            tcp("10.20.0.8:8000", true),
        ],
        misc: &[],
        // lvs_flush removes it.
        stray: Some("-A -t 10.10.0.99:99 -s rr"),
        extras: &[
            "timeout 7200 60 120",
            "thresholds TCP 10.10.0.1:80 -> 10.20.0.1:8080 100 10",
        ],
        phases: &[
            Phase {
                name: "start",
                acts: &[],
                expect: "
                    -A -t 10.10.0.1:80 -s wrr -p 50 -M 255.255.255.0
                    -a -t 10.10.0.1:80 -r 10.20.0.1:8080 -m -w 3
                    -a -t 10.10.0.1:80 -r 10.20.0.2:8080 -m -w 2
                    -A -t 10.10.0.2:80 -s rr
                    -a -t 10.10.0.2:80 -r 10.20.0.4:80 -g -w 1
                    -a -t 10.10.0.2:80 -r 10.20.0.7:80 -g -w 1
                    -A -t 10.10.0.3:8000 -s lc
                    -a -t 10.10.0.3:8000 -r 10.20.0.8:8000 -m -w 1
                ",
            },
            Phase {
                name: "two down, two up",
                acts: &[
                    Act::Down("10.20.0.2:8080"),
                    Act::Down("10.20.0.5:8081"),
                    Act::Up("10.20.0.3:9000"),
                    Act::Up("10.20.0.6:8080"),
                ],
                expect: "
                    -A -t 10.10.0.1:80 -s wrr -p 50 -M 255.255.255.0
                    -a -t 10.10.0.1:80 -r 10.20.0.1:8080 -m -w 3
                    -a -t 10.10.0.1:80 -r 10.20.0.3:8080 -m -w 1
                    -A -t 10.10.0.2:80 -s rr
                    -a -t 10.10.0.2:80 -r 10.20.0.6:8080 -m -w 2
                    -a -t 10.10.0.2:80 -r 10.20.0.7:80 -g -w 1
                    -A -t 10.10.0.3:8000 -s lc
                    -a -t 10.10.0.3:8000 -r 10.20.0.8:8000 -m -w 1
                ",
            },
        ],
        at_exit: "",
    },
    Case {
        file: "fwmark.conf",
        servers: &[
            tcp("10.20.0.1:80", true),
            tcp("10.20.0.2:80", false),
            tcp("10.20.0.3:8080", true),
            tcp("10.20.0.4:8080", true),
        ],
        misc: &[],
        // No lvs_flush: it stays, also after the daemons stop.
        stray: Some("-A -u 10.10.0.99:99 -s rr"),
        extras: &[DEFAULT_TIMEOUTS],
        phases: &[
            Phase {
                name: "start",
                acts: &[],
                expect: "
                    -A -u 10.10.0.99:99 -s rr
                    -A -f 1 -s wlc
                    -a -f 1 -r 10.20.0.1:0 -g -w 1
                    -A -f 2 -s rr
                    -a -f 2 -r 10.20.0.3:8080 -m -w 4
                    -a -f 2 -r 10.20.0.4:8080 -m -w 1
                ",
            },
            Phase {
                name: "one down, one up",
                acts: &[Act::Down("10.20.0.3:8080"), Act::Up("10.20.0.2:80")],
                expect: "
                    -A -u 10.10.0.99:99 -s rr
                    -A -f 1 -s wlc
                    -a -f 1 -r 10.20.0.1:0 -g -w 1
                    -a -f 1 -r 10.20.0.2:0 -g -w 1
                    -A -f 2 -s rr
                    -a -f 2 -r 10.20.0.4:8080 -m -w 1
                ",
            },
        ],
        at_exit: "-A -u 10.10.0.99:99 -s rr",
    },
    Case {
        file: "ipv6.conf",
        servers: &[
            tcp("[fd00:20::1]:80", true),
            tcp("[fd00:20::2]:80", false),
            udp("[fd00:20::3]:53", true),
            udp("[fd00:20::1]:5353", false),
            tcp("[fd00:20::2]:8443", true),
        ],
        misc: &[],
        stray: None,
        extras: &[DEFAULT_TIMEOUTS],
        phases: &[
            Phase {
                name: "start",
                acts: &[],
                expect: "
                    -A -t [fd00:10::1]:80 -s rr -p 30 -M 64
                    -a -t [fd00:10::1]:80 -r [fd00:20::1]:80 -m -w 1
                    -A -u [fd00:10::1]:53 -s sh -o
                    -a -u [fd00:10::1]:53 -r [fd00:20::3]:53 -m -w 1
                    -A --sctp-service [fd00:10::1]:443 -s lc
                    -a --sctp-service [fd00:10::1]:443 -r [fd00:20::2]:443 -g -w 2
                ",
            },
            Phase {
                name: "one down, two up",
                acts: &[
                    Act::Down("[fd00:20::3]:53"),
                    Act::Up("[fd00:20::1]:5353"),
                    Act::Up("[fd00:20::2]:80"),
                ],
                expect: "
                    -A -t [fd00:10::1]:80 -s rr -p 30 -M 64
                    -a -t [fd00:10::1]:80 -r [fd00:20::1]:80 -m -w 1
                    -a -t [fd00:10::1]:80 -r [fd00:20::2]:80 -m -w 2
                    -A -u [fd00:10::1]:53 -s sh -o
                    -a -u [fd00:10::1]:53 -r [fd00:20::1]:5353 -m -w 3
                    -A --sctp-service [fd00:10::1]:443 -s lc
                    -a --sctp-service [fd00:10::1]:443 -r [fd00:20::2]:443 -g -w 2
                ",
            },
        ],
        at_exit: "",
    },
    Case {
        file: "inhibit.conf",
        servers: &[
            tcp("10.20.0.1:80", true),
            tcp("10.20.0.2:80", false),
            tcp("10.20.0.3:80", false),
            tcp("10.20.0.4:80", true),
        ],
        misc: &[],
        stray: None,
        extras: &[DEFAULT_TIMEOUTS],
        phases: &[
            Phase {
                name: "start",
                acts: &[],
                expect: "
                    -A -t 10.10.0.4:80 -s wrr
                    -a -t 10.10.0.4:80 -r 10.20.0.1:80 -m -w 5
                    -a -t 10.10.0.4:80 -r 10.20.0.2:80 -m -w 0
                    -A -t 10.10.0.5:80 -s rr
                    -a -t 10.10.0.5:80 -r 10.20.0.3:80 -g -w 0
                    -a -t 10.10.0.5:80 -r 10.20.0.4:80 -g -w 1
                ",
            },
            Phase {
                name: "inhibited down, inhibited up",
                acts: &[
                    Act::Down("10.20.0.1:80"),
                    Act::Up("10.20.0.2:80"),
                    Act::Up("10.20.0.3:80"),
                ],
                expect: "
                    -A -t 10.10.0.4:80 -s wrr
                    -a -t 10.10.0.4:80 -r 10.20.0.1:80 -m -w 0
                    -a -t 10.10.0.4:80 -r 10.20.0.2:80 -m -w 3
                    -A -t 10.10.0.5:80 -s rr
                    -a -t 10.10.0.5:80 -r 10.20.0.3:80 -g -w 2
                    -a -t 10.10.0.5:80 -r 10.20.0.4:80 -g -w 1
                ",
            },
            Phase {
                name: "plain down",
                acts: &[Act::Down("10.20.0.4:80")],
                expect: "
                    -A -t 10.10.0.4:80 -s wrr
                    -a -t 10.10.0.4:80 -r 10.20.0.1:80 -m -w 0
                    -a -t 10.10.0.4:80 -r 10.20.0.2:80 -m -w 3
                    -A -t 10.10.0.5:80 -s rr
                    -a -t 10.10.0.5:80 -r 10.20.0.3:80 -g -w 2
                ",
            },
        ],
        at_exit: "",
    },
    Case {
        file: "misc_check.conf",
        servers: &[],
        misc: &[("a", "0"), ("b", "1")],
        stray: None,
        extras: &[DEFAULT_TIMEOUTS],
        // keepalived 2.2.7 keeps a misc_dynamic weight offset when a script
        // times out (check_misc.c zeroes the checker's offset but not the
        // real server's weight), so after a timeout at a dynamic weight
        // the next exit status gives a stale weight. The timeout here comes
        // at exit status 0 (no offset), where every reading agrees; and
        // misc_timeout is 10 s, so that a script slowed by a loaded guest
        // does not time out at a dynamic weight in the other phases (at 2 s
        // one run on a loaded host ended a phase with one side at weight 5
        // for exit status 2, the weight this leftover offset gives; at 5 s
        // keepalived's own scripts timed out so once on 6.12 with two
        // guests running, and keepalived ended the phase at weight 5).
        phases: &[
            Phase {
                name: "start",
                acts: &[],
                expect: "
                    -A -t 10.10.0.6:80 -s wrr
                    -a -t 10.10.0.6:80 -r 10.20.0.1:80 -m -w 5
                ",
            },
            Phase {
                name: "dynamic weight 10, plain up",
                acts: &[Act::Misc("a", "12"), Act::Misc("b", "0")],
                expect: "
                    -A -t 10.10.0.6:80 -s wrr
                    -a -t 10.10.0.6:80 -r 10.20.0.1:80 -m -w 10
                    -a -t 10.10.0.6:80 -r 10.20.0.2:80 -m -w 1
                ",
            },
            Phase {
                name: "dynamic weight 0, plain down",
                acts: &[Act::Misc("a", "2"), Act::Misc("b", "1")],
                expect: "
                    -A -t 10.10.0.6:80 -s wrr
                    -a -t 10.10.0.6:80 -r 10.20.0.1:80 -m -w 0
                ",
            },
            Phase {
                name: "dynamic back to its weight, plain up",
                acts: &[Act::Misc("a", "0"), Act::Misc("b", "0")],
                expect: "
                    -A -t 10.10.0.6:80 -s wrr
                    -a -t 10.10.0.6:80 -r 10.20.0.1:80 -m -w 5
                    -a -t 10.10.0.6:80 -r 10.20.0.2:80 -m -w 1
                ",
            },
            Phase {
                name: "dynamic times out",
                acts: &[Act::Misc("a", "sleep")],
                expect: "
                    -A -t 10.10.0.6:80 -s wrr
                    -a -t 10.10.0.6:80 -r 10.20.0.2:80 -m -w 1
                ",
            },
        ],
        at_exit: "",
    },
    Case {
        file: "quorum.conf",
        servers: &[
            tcp("10.20.0.1:80", true),
            tcp("10.20.0.2:80", true),
            tcp("10.20.0.3:80", true),
        ],
        misc: &[],
        stray: None,
        extras: &[DEFAULT_TIMEOUTS],
        phases: &[
            Phase {
                name: "start: weight 4, quorum",
                acts: &[],
                expect: "
                    -A -t 10.10.0.7:80 -s wrr
                    -a -t 10.10.0.7:80 -r 10.20.0.1:80 -m -w 2
                    -a -t 10.10.0.7:80 -r 10.20.0.2:80 -m -w 1
                    -a -t 10.10.0.7:80 -r 10.20.0.3:80 -m -w 1
                ",
            },
            Phase {
                name: "weight 3: quorum kept (hysteresis)",
                acts: &[Act::Down("10.20.0.3:80")],
                expect: "
                    -A -t 10.10.0.7:80 -s wrr
                    -a -t 10.10.0.7:80 -r 10.20.0.1:80 -m -w 2
                    -a -t 10.10.0.7:80 -r 10.20.0.2:80 -m -w 1
                ",
            },
            Phase {
                name: "weight 1: quorum lost, sorry server",
                acts: &[Act::Down("10.20.0.1:80")],
                expect: "
                    -A -t 10.10.0.7:80 -s wrr
                    -a -t 10.10.0.7:80 -r 10.30.0.1:80 -m -w 1
                ",
            },
            Phase {
                name: "weight 3: no quorum yet (hysteresis)",
                acts: &[Act::Up("10.20.0.1:80")],
                expect: "
                    -A -t 10.10.0.7:80 -s wrr
                    -a -t 10.10.0.7:80 -r 10.30.0.1:80 -m -w 1
                ",
            },
            Phase {
                name: "weight 4: quorum regained",
                acts: &[Act::Up("10.20.0.3:80")],
                expect: "
                    -A -t 10.10.0.7:80 -s wrr
                    -a -t 10.10.0.7:80 -r 10.20.0.1:80 -m -w 2
                    -a -t 10.10.0.7:80 -r 10.20.0.2:80 -m -w 1
                    -a -t 10.10.0.7:80 -r 10.20.0.3:80 -m -w 1
                ",
            },
        ],
        at_exit: "",
    },
    Case {
        file: "sorry_server.conf",
        servers: &[
            tcp("10.20.0.1:80", true),
            tcp("10.20.0.2:80", false),
            tcp("10.20.0.3:80", false),
        ],
        misc: &[],
        stray: None,
        extras: &[DEFAULT_TIMEOUTS],
        phases: &[
            Phase {
                name: "start",
                acts: &[],
                expect: "
                    -A -t 10.10.0.8:80 -s rr
                    -a -t 10.10.0.8:80 -r 10.20.0.1:80 -m -w 1
                    -a -t 10.10.0.8:80 -r 10.30.0.1:80 -g -w 0
                    -A -t 10.10.0.9:80 -s rr
                    -a -t 10.10.0.9:80 -r 10.30.0.1:80 -m -w 1
                ",
            },
            Phase {
                name: "all down / one up",
                acts: &[Act::Down("10.20.0.1:80"), Act::Up("10.20.0.3:80")],
                expect: "
                    -A -t 10.10.0.8:80 -s rr
                    -a -t 10.10.0.8:80 -r 10.30.0.1:80 -g -w 1
                    -A -t 10.10.0.9:80 -s rr
                    -a -t 10.10.0.9:80 -r 10.20.0.3:80 -m -w 2
                ",
            },
            Phase {
                name: "one up / all down",
                acts: &[Act::Up("10.20.0.2:80"), Act::Down("10.20.0.3:80")],
                expect: "
                    -A -t 10.10.0.8:80 -s rr
                    -a -t 10.10.0.8:80 -r 10.20.0.2:80 -m -w 1
                    -a -t 10.10.0.8:80 -r 10.30.0.1:80 -g -w 0
                    -A -t 10.10.0.9:80 -s rr
                    -a -t 10.10.0.9:80 -r 10.30.0.1:80 -m -w 1
                ",
            },
        ],
        at_exit: "",
    },
    Case {
        file: "group.conf",
        servers: &[tcp("10.20.0.1:8080", true), tcp("10.20.0.2:8080", false)],
        misc: &[],
        stray: None,
        extras: &[DEFAULT_TIMEOUTS],
        phases: &[
            Phase {
                name: "start",
                acts: &[],
                expect: "
                    -A -t 10.10.0.5:80 -s sh -p 50 -b sh-fallback,sh-port
                    -a -t 10.10.0.5:80 -r 10.20.0.1:8080 -m -w 1
                    -A -t 10.10.1.1:80 -s sh -p 50 -b sh-fallback,sh-port
                    -a -t 10.10.1.1:80 -r 10.20.0.1:8080 -m -w 1
                    -A -t 10.10.1.2:80 -s sh -p 50 -b sh-fallback,sh-port
                    -a -t 10.10.1.2:80 -r 10.20.0.1:8080 -m -w 1
                    -A -t 10.10.1.3:80 -s sh -p 50 -b sh-fallback,sh-port
                    -a -t 10.10.1.3:80 -r 10.20.0.1:8080 -m -w 1
                    -A -f 9 -s sh -p 50 -b sh-fallback,sh-port
                    -a -f 9 -r 10.20.0.1:8080 -m -w 1
                ",
            },
            Phase {
                name: "one down, one up",
                acts: &[Act::Down("10.20.0.1:8080"), Act::Up("10.20.0.2:8080")],
                expect: "
                    -A -t 10.10.0.5:80 -s sh -p 50 -b sh-fallback,sh-port
                    -a -t 10.10.0.5:80 -r 10.20.0.2:8080 -m -w 2
                    -A -t 10.10.1.1:80 -s sh -p 50 -b sh-fallback,sh-port
                    -a -t 10.10.1.1:80 -r 10.20.0.2:8080 -m -w 2
                    -A -t 10.10.1.2:80 -s sh -p 50 -b sh-fallback,sh-port
                    -a -t 10.10.1.2:80 -r 10.20.0.2:8080 -m -w 2
                    -A -t 10.10.1.3:80 -s sh -p 50 -b sh-fallback,sh-port
                    -a -t 10.10.1.3:80 -r 10.20.0.2:8080 -m -w 2
                    -A -f 9 -s sh -p 50 -b sh-fallback,sh-port
                    -a -f 9 -r 10.20.0.2:8080 -m -w 2
                ",
            },
        ],
        at_exit: "",
    },
    Case {
        file: "http_get.conf",
        servers: &[
            http("10.20.0.1:80", "www.example.test", 200, "ok\n"),
            http("10.20.0.2:80", "www.example.test", 200, BODY),
            http("10.20.0.3:8081", "api.example.test", 500, "starting\n"),
        ],
        misc: &[],
        stray: None,
        extras: &[DEFAULT_TIMEOUTS],
        phases: &[
            Phase {
                name: "start",
                acts: &[],
                expect: "
                    -A -t 10.10.0.1:80 -s rr
                    -a -t 10.10.0.1:80 -r 10.20.0.1:80 -m -w 1
                    -a -t 10.10.0.1:80 -r 10.20.0.2:80 -m -w 2
                ",
            },
            Phase {
                name: "503, other body, 200",
                acts: &[
                    Act::Reply("10.20.0.1:80", 503, "busy\n"),
                    Act::Reply("10.20.0.2:80", 200, OTHER_BODY),
                    Act::Reply("10.20.0.3:8081", 200, "ready\n"),
                ],
                expect: "
                    -A -t 10.10.0.1:80 -s rr
                    -a -t 10.10.0.1:80 -r 10.20.0.3:8080 -m -w 3
                ",
            },
        ],
        at_exit: "",
    },
];

/// Every address a case may use, on `dummy0` in every namespace.
const ADDRESSES: &[&str] = &[
    "10.10.0.1/32",
    "10.10.0.2/32",
    "10.10.0.3/32",
    "10.10.0.4/32",
    "10.10.0.5/32",
    "10.10.0.6/32",
    "10.10.0.7/32",
    "10.10.0.8/32",
    "10.10.0.9/32",
    "10.10.1.1/32",
    "10.10.1.2/32",
    "10.10.1.3/32",
    "10.20.0.1/32",
    "10.20.0.2/32",
    "10.20.0.3/32",
    "10.20.0.4/32",
    "10.20.0.5/32",
    "10.20.0.6/32",
    "10.20.0.7/32",
    "10.20.0.8/32",
    "10.30.0.1/32",
    "fd00:10::1/128",
    "fd00:20::1/128",
    "fd00:20::2/128",
    "fd00:20::3/128",
];

// --------------------------------------------------------------- tables ---

/// An IPVS table as `ipvsadm -S -n` shows it: each service line with the
/// set of its real-server lines.
type Table = BTreeMap<String, BTreeSet<String>>;

/// Parses `ipvsadm -S -n` output (or an expectation in that form): `-A`
/// lines are services, `-a` lines real servers of the service they name
/// (`-t ADDR`, `-u ADDR`, `--sctp-service ADDR`, `-f MARK`); spaces are
/// normalised. A real server of no listed service is kept under `?`.
fn parse_table(text: &str) -> Table {
    let lines: Vec<Vec<&str>> = text
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|w| !w.is_empty())
        .collect();
    let id = |w: &[&str]| w.get(1..3).map(|s| s.join(" ")).unwrap_or_default();
    let mut by_id: BTreeMap<String, String> = BTreeMap::new();
    let mut table = Table::new();
    for w in lines.iter().filter(|w| w[0] == "-A") {
        let line = w.join(" ");
        by_id.insert(id(w), line.clone());
        table.entry(line).or_default();
    }
    for w in lines.iter().filter(|w| w[0] != "-A") {
        let service = by_id
            .get(&id(w))
            .cloned()
            .unwrap_or_else(|| format!("? {}", id(w)));
        table.entry(service).or_default().insert(w.join(" "));
    }
    table
}

fn render(table: &Table) -> String {
    let mut s = String::new();
    for (service, dests) in table {
        let _ = writeln!(s, "  {service}");
        for d in dests {
            let _ = writeln!(s, "    {d}");
        }
    }
    if s.is_empty() {
        s.push_str("  (empty)\n");
    }
    s
}

/// `ipvsadm ARGS` run from a thread inside `ns` (no `ip netns exec`: one
/// process start); its stdout, or why it failed.
fn ipvsadm_in(ns: &TestNetns, args: &[&str]) -> Result<String, String> {
    let mut c = Command::new(support::tool("ipvsadm"));
    c.args(args);
    let out = run_in(&NetNs::path(ns.path()), || c.output())
        .map_err(|e| format!("ipvsadm {args:?} in {}: {e}", ns.name()))?;
    if !out.status.success() {
        return Err(format!(
            "ipvsadm {args:?} in {}: {}: {}",
            ns.name(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn table_of(ns: &TestNetns) -> Result<Table, String> {
    ipvsadm_in(ns, &["-S", "-n"]).map(|s| parse_table(&s))
}

/// `/proc/net/ip_vs` as `ns` sees it: cheap to read, and it changes with
/// every service, real server and weight, so the poll runs ipvsadm only
/// when it changed.
fn proc_ip_vs(ns: &TestNetns) -> String {
    run_in(&NetNs::path(ns.path()), || {
        std::fs::read_to_string("/proc/thread-self/net/ip_vs")
    })
    .unwrap_or_else(|e| format!("<cannot read /proc/net/ip_vs in {}: {e}>", ns.name()))
}

/// What `ipvsadm -S` leaves out: `timeout TCP TCPFIN UDP` from `ipvsadm -L
/// -n --timeout`, and `thresholds PROTO VIP -> RIP UPPER LOWER` for every
/// real server with a threshold from `ipvsadm -L -n --thresholds`.
fn extras(ns: &TestNetns) -> Result<BTreeSet<String>, String> {
    let mut out = BTreeSet::new();
    let timeouts = ipvsadm_in(ns, &["-L", "-n", "--timeout"])?;
    // "Timeout (tcp tcpfin udp): 900 120 300"
    let values = timeouts
        .rsplit(':')
        .next()
        .map(|v| v.split_whitespace().collect::<Vec<_>>().join(" "))
        .unwrap_or_default();
    out.insert(format!("timeout {values}"));
    let listing = ipvsadm_in(ns, &["-L", "-n", "--thresholds"])?;
    let mut service = String::new();
    // Two header lines, then services, each followed by "  -> " lines.
    for line in listing.lines().skip(3) {
        let w: Vec<&str> = line.split_whitespace().collect();
        if w.first() == Some(&"->") {
            if w.len() >= 4 && (w[2] != "0" || w[3] != "0") {
                out.insert(format!(
                    "thresholds {service} -> {} {} {}",
                    w[1], w[2], w[3]
                ));
            }
        } else if w.len() >= 2 {
            service = format!("{} {}", w[0], w[1]);
        }
    }
    Ok(out)
}

// -------------------------------------------------------- real servers ---

/// What an HTTP server answers: status and body.
type Reply = Arc<Mutex<(u16, String)>>;

/// A listener thread in a namespace; stopped (and its socket closed) on
/// drop.
struct Listener {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Listener {
    fn start(ns: &TestNetns, addr: SocketAddr, kind: Kind, reply: Option<Reply>) -> Listener {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let at = NetNs::path(ns.path());
        let thread = match kind {
            Kind::Udp => {
                let sock = run_in(&at, || UdpSocket::bind(addr))
                    .unwrap_or_else(|e| panic!("bind udp {addr} in {}: {e}", ns.name()));
                sock.set_read_timeout(Some(Duration::from_millis(100)))
                    .unwrap();
                std::thread::spawn(move || {
                    let mut buf = [0u8; 2048];
                    while !flag.load(Ordering::Relaxed) {
                        if let Ok((n, from)) = sock.recv_from(&mut buf) {
                            let _ = sock.send_to(&buf[..n], from);
                        }
                    }
                })
            }
            Kind::Tcp | Kind::Http { .. } => {
                let sock = run_in(&at, || TcpListener::bind(addr))
                    .unwrap_or_else(|e| panic!("bind tcp {addr} in {}: {e}", ns.name()));
                sock.set_nonblocking(true).unwrap();
                let host = match kind {
                    Kind::Http { host, .. } => Some(host),
                    _ => None,
                };
                std::thread::spawn(move || {
                    while !flag.load(Ordering::Relaxed) {
                        match sock.accept() {
                            Ok((stream, _)) => {
                                if let (Some(host), Some(reply)) = (host, &reply) {
                                    serve_http(stream, host, reply);
                                }
                            }
                            Err(_) => std::thread::sleep(Duration::from_millis(50)),
                        }
                    }
                })
            }
        };
        Listener {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// One HTTP exchange: reads the request head, answers `reply` if its Host
/// (without port) is `host`, else 421, and closes.
fn serve_http(mut stream: TcpStream, host: &str, reply: &Reply) {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 16_384 {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    let head = String::from_utf8_lossy(&head);
    let asked = head.lines().find_map(|l| {
        let (name, value) = l.split_once(':')?;
        name.trim()
            .eq_ignore_ascii_case("host")
            .then(|| value.trim().to_owned())
    });
    let asked_name = asked.as_deref().map(|h| match h.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => h,
    });
    let (status, body) = if asked_name == Some(host) {
        reply.lock().unwrap_or_else(PoisonError::into_inner).clone()
    } else {
        (421, format!("wrong Host: {asked:?}\n"))
    };
    let text = format!(
        "HTTP/1.1 {status} X\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(text.as_bytes());
}

/// One namespace with its real servers.
struct Side {
    /// "ref" or "lite".
    role: &'static str,
    ns: TestNetns,
    running: BTreeMap<&'static str, Listener>,
    replies: BTreeMap<&'static str, Reply>,
}

impl Side {
    fn new(role: &'static str, case: &Case) -> Side {
        let ns = TestNetns::with_ipvs();
        let mut batch = vec![
            "link add dummy0 type dummy".to_owned(),
            "link set dummy0 up".to_owned(),
        ];
        for a in ADDRESSES {
            let nodad = if a.contains(':') { " nodad" } else { "" };
            batch.push(format!("addr add {a} dev dummy0{nodad}"));
        }
        ns.ip_batch(&batch);
        if let Some(stray) = case.stray {
            ns.ipvsadm(stray);
        }
        let mut side = Side {
            role,
            ns,
            running: BTreeMap::new(),
            replies: BTreeMap::new(),
        };
        for s in case.servers {
            if let Kind::Http { status, body, .. } = s.kind {
                side.replies
                    .insert(s.addr, Arc::new(Mutex::new((status, body.to_owned()))));
            }
            if s.up {
                side.up(case, s.addr);
            }
        }
        side
    }

    fn up(&mut self, case: &Case, addr: &'static str) {
        let server = case
            .servers
            .iter()
            .find(|s| s.addr == addr)
            .unwrap_or_else(|| panic!("{}: no server {addr}", case.file));
        let sa: SocketAddr = addr.parse().expect("socket address");
        let l = Listener::start(&self.ns, sa, server.kind, self.replies.get(addr).cloned());
        assert!(
            self.running.insert(addr, l).is_none(),
            "{addr} is already up"
        );
    }

    fn down(&mut self, addr: &str) {
        assert!(self.running.remove(addr).is_some(), "{addr} is not up");
    }

    fn reply(&self, addr: &str, status: u16, body: &str) {
        let r = self.replies.get(addr).expect("an HTTP server");
        *r.lock().unwrap_or_else(PoisonError::into_inner) = (status, body.to_owned());
    }
}

// -------------------------------------------------------------- daemons ---

/// A running keepalived or keepalived-lite, its output collected; killed
/// with its process group on drop if still running.
struct Daemon {
    role: &'static str,
    child: Child,
    log: Arc<Mutex<String>>,
    readers: Vec<JoinHandle<()>>,
    status: Option<ExitStatus>,
}

impl Daemon {
    /// `program -n -l -D -C -s NETNS -f CONF -p DIR/ROLE.pid -c
    /// DIR/ROLE-checkers.pid`, in a process group of its own.
    fn start(role: &'static str, program: &Path, ns: &TestNetns, conf: &Path, dir: &Path) -> Self {
        let mut c = Command::new(program);
        c.arg("-n")
            .arg("-l")
            .arg("-D")
            .arg("-C")
            .arg("-s")
            .arg(ns.name())
            .arg("-f")
            .arg(conf)
            .arg("-p")
            .arg(dir.join(format!("{role}.pid")))
            .arg("-c")
            .arg(dir.join(format!("{role}-checkers.pid")))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        let mut child = c
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", program.display()));
        let log = Arc::new(Mutex::new(format!("$ {c:?}\n")));
        let mut readers = Vec::new();
        let out: Box<dyn Read + Send> = Box::new(child.stdout.take().unwrap());
        let err: Box<dyn Read + Send> = Box::new(child.stderr.take().unwrap());
        for (tag, pipe) in [("", out), ("stderr: ", err)] {
            let log = log.clone();
            readers.push(std::thread::spawn(move || {
                for line in BufReader::new(pipe).lines() {
                    let Ok(line) = line else { break };
                    let mut l = log.lock().unwrap_or_else(PoisonError::into_inner);
                    let _ = writeln!(l, "{tag}{line}");
                }
            }));
        }
        Daemon {
            role,
            child,
            log,
            readers,
            status: None,
        }
    }

    fn log(&self) -> String {
        self.log
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Still running? (Records the exit status of one that ended.)
    fn running(&mut self) -> bool {
        if self.status.is_none() {
            self.status = self.child.try_wait().ok().flatten();
        }
        self.status.is_none()
    }

    fn signal(&self, sig: &str, group: bool) {
        let target = if group {
            format!("-{}", self.child.id())
        } else {
            self.child.id().to_string()
        };
        let _ = Command::new("kill")
            .args([sig, "--", &target])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }

    /// SIGTERM, then waits for the exit (at most [`STOP_DEADLINE`]).
    fn stop(&mut self) -> Result<ExitStatus, String> {
        if !self.running() {
            return Err(format!(
                "{} had exited before SIGTERM: {:?}",
                self.role, self.status
            ));
        }
        self.signal("-TERM", false);
        let deadline = Instant::now() + STOP_DEADLINE;
        while self.running() {
            if Instant::now() > deadline {
                return Err(format!(
                    "{} still runs {STOP_DEADLINE:?} after SIGTERM",
                    self.role
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
        Ok(self.status.expect("exited"))
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if self.running() {
            self.signal("-KILL", true);
            let _ = self.child.wait();
        }
    }
}

// ----------------------------------------------------------------- runs ---

/// The program under test: `IPVSCTL_KEEPALIVED_LITE`, else the example.
fn lite_program() -> PathBuf {
    match std::env::var_os("IPVSCTL_KEEPALIVED_LITE") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => support::example_binary("keepalived-lite"),
    }
}

/// A directory for one case: root-owned, mode 0755 (keepalived's
/// enable_script_security refuses scripts in directories others may write),
/// removed on drop.
struct CaseDir(PathBuf);

impl CaseDir {
    fn new(case: &Case) -> CaseDir {
        static N: AtomicU32 = AtomicU32::new(0);
        let stem = case.file.trim_end_matches(".conf");
        let dir = std::env::temp_dir().join(format!(
            "ipvsctl-keepalived-{stem}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        CaseDir(dir)
    }

    /// Writes `text` to `name` through a rename, so a reader never sees
    /// half of it, with `mode`.
    fn write(&self, name: &str, text: &str, mode: u32) -> PathBuf {
        let path = self.0.join(name);
        let tmp = self.0.join(format!(".{name}.tmp"));
        std::fs::write(&tmp, text).unwrap();
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(mode)).unwrap();
        std::fs::rename(&tmp, &path).unwrap();
        path
    }

    /// The MISC_CHECK script `misc-NAME.sh`: exits with what
    /// `misc-NAME.state` says (1 if it is missing), or sleeps on `sleep`.
    fn misc_script(&self, name: &str) {
        let state = self.0.join(format!("misc-{name}.state"));
        let body = format!(
            "#!/bin/sh\nstate=$(cat '{}' 2>/dev/null)\ncase \"$state\" in\n\
             sleep) exec sleep 30 ;;\n'') exit 1 ;;\nesac\nexit \"$state\"\n",
            state.display()
        );
        self.write(&format!("misc-{name}.sh"), &body, 0o755);
    }

    fn misc_state(&self, name: &str, state: &str) {
        self.write(&format!("misc-{name}.state"), &format!("{state}\n"), 0o644);
    }
}

impl Drop for CaseDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Both sides' tables and extras, read once.
struct Look {
    tables: [Result<Table, String>; 2],
}

/// The whole run of one case; `Err` carries the report.
fn run_case(case: &Case, lite: &Path, reference: &Path) -> Result<String, String> {
    let t0 = Instant::now();
    let dir = CaseDir::new(case);
    for (name, state) in case.misc {
        dir.misc_script(name);
        dir.misc_state(name, state);
    }
    let template = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data/keepalived")
            .join(case.file),
    )
    .map_err(|e| format!("{}: {e}", case.file))?;
    let conf = dir.write(
        case.file,
        &template.replace("@DIR@", &dir.0.display().to_string()),
        0o644,
    );

    let mut sides = [Side::new("ref", case), Side::new("lite", case)];
    let mut daemons = [
        Daemon::start("ref", reference, &sides[0].ns, &conf, &dir.0),
        Daemon::start("lite", lite, &sides[1].ns, &conf, &dir.0),
    ];
    let mut timings = Vec::new();
    let extras_expect: BTreeSet<String> = case.extras.iter().map(|s| s.to_string()).collect();

    for (i, phase) in case.phases.iter().enumerate() {
        let p0 = Instant::now();
        for act in phase.acts {
            for side in &mut sides {
                match *act {
                    Act::Up(a) => side.up(case, a),
                    Act::Down(a) => side.down(a),
                    Act::Reply(a, status, body) => side.reply(a, status, body),
                    Act::Misc(..) => {}
                }
            }
            if let Act::Misc(name, state) = *act {
                dir.misc_state(name, state);
            }
        }
        let expect = parse_table(phase.expect);
        let deadline = if i == 0 {
            START_DEADLINE
        } else {
            PHASE_DEADLINE
        };
        let what = format!("{}, phase {} ({:?})", case.file, i, phase.name);
        settle(&sides, &mut daemons, &expect, deadline)
            .map_err(|why| report(&what, &why, &expect, &sides, &daemons, Some(&dir)))?;
        // What -S leaves out.
        let ex = [extras(&sides[0].ns), extras(&sides[1].ns)];
        if ex[0].as_ref().ok() != Some(&extras_expect)
            || ex[1].as_ref().ok() != Some(&extras_expect)
        {
            let why = format!(
                "timeouts/thresholds differ:\n  expected {extras_expect:?}\n  ref  {:?}\n  lite {:?}",
                ex[0], ex[1]
            );
            return Err(report(&what, &why, &expect, &sides, &daemons, Some(&dir)));
        }
        timings.push(format!("{} {:.1}s", phase.name, p0.elapsed().as_secs_f64()));
    }

    // Stop both; each must leave only what the test put there.
    let stopped = [daemons[0].stop(), daemons[1].stop()];
    let expect = parse_table(case.at_exit);
    let what = format!("{}, after SIGTERM", case.file);
    let tables = [table_of(&sides[0].ns), table_of(&sides[1].ns)];
    let mut why = String::new();
    for (d, s) in daemons.iter().zip(&stopped) {
        match s {
            Ok(st) if st.success() => {}
            Ok(st) => {
                let _ = writeln!(why, "{} exited with {st}", d.role);
            }
            Err(e) => {
                let _ = writeln!(why, "{e}");
            }
        }
    }
    for (side, t) in sides.iter().zip(&tables) {
        if t.as_ref().ok() != Some(&expect) {
            let _ = writeln!(why, "{} did not leave the expected table", side.role);
        }
    }
    if !why.is_empty() {
        return Err(report(&what, &why, &expect, &sides, &daemons, None));
    }
    Ok(format!(
        "{}: {:.1}s ({})",
        case.file,
        t0.elapsed().as_secs_f64(),
        timings.join(", ")
    ))
}

/// Waits until both tables equal `expect` and stay so for [`STABLE`].
fn settle(
    sides: &[Side; 2],
    daemons: &mut [Daemon; 2],
    expect: &Table,
    limit: Duration,
) -> Result<(), String> {
    let deadline = Instant::now() + limit;
    let mut last_proc: Option<[String; 2]> = None;
    // Since when both tables have equalled the expectation.
    let mut matching_since: Option<Instant> = None;
    let mut last_look = Instant::now();
    loop {
        for d in daemons.iter_mut() {
            if !d.running() {
                return Err(format!("{} exited: {:?}", d.role, d.status));
            }
        }
        let procs = [proc_ip_vs(&sides[0].ns), proc_ip_vs(&sides[1].ns)];
        // Looked at again when /proc changed, and every second while the
        // tables do not match: a dump is no snapshot while other
        // namespaces change their tables (support::TABLE_ORDER), so one
        // ipvsadm listing may have skipped or repeated a line.
        if last_proc.as_ref() != Some(&procs)
            || (matching_since.is_none() && last_look.elapsed() >= RELOOK)
        {
            last_proc = Some(procs);
            last_look = Instant::now();
            let look = look(sides);
            matching_since = look_matches(&look, expect).then(Instant::now);
        } else if let Some(since) = matching_since
            && since.elapsed() >= STABLE
        {
            // Confirm with ipvsadm: /proc shows neither persistence masks
            // nor anything -S adds.
            if look_matches(&look(sides), expect) {
                return Ok(());
            }
            matching_since = None;
            last_proc = None;
        }
        if Instant::now() > deadline {
            return Err(format!("not settled within {limit:?}"));
        }
        std::thread::sleep(POLL);
    }
}

fn look(sides: &[Side; 2]) -> Look {
    Look {
        tables: [table_of(&sides[0].ns), table_of(&sides[1].ns)],
    }
}

fn look_matches(look: &Look, expect: &Table) -> bool {
    look.tables.iter().all(|t| t.as_ref().ok() == Some(expect))
}

/// The failure report: both tables now, the expectation, both logs (and
/// the MISC_CHECK state files).
fn report(
    what: &str,
    why: &str,
    expect: &Table,
    sides: &[Side; 2],
    daemons: &[Daemon; 2],
    dir: Option<&CaseDir>,
) -> String {
    let mut s = format!("=== {what}: {why}\n--- expected\n{}", render(expect));
    for side in sides {
        match table_of(&side.ns) {
            Ok(t) => {
                let _ = write!(s, "--- {} ({})\n{}", side.role, side.ns.name(), render(&t));
            }
            Err(e) => {
                let _ = writeln!(s, "--- {}: {e}", side.role);
            }
        }
        let _ = writeln!(
            s,
            "    listening: {:?}",
            side.running.keys().collect::<Vec<_>>()
        );
    }
    if let Some(dir) = dir
        && let Ok(entries) = std::fs::read_dir(&dir.0)
    {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.ends_with(".state") {
                let v = std::fs::read_to_string(e.path()).unwrap_or_default();
                let _ = writeln!(s, "    {name}: {}", v.trim());
            }
        }
    }
    for d in daemons {
        let _ = write!(s, "--- log of {}\n{}", d.role, d.log());
    }
    s
}

#[test]
fn table_parser_groups_real_servers_under_their_service() {
    let a = parse_table(
        "-A -t 10.0.0.1:80 -s rr\n-a -t 10.0.0.1:80 -r 10.1.0.1:80 -m -w 1\n\
         -A -f 1 -s rr\n-a -f 1 -r 10.1.0.2:0 -g -w 1\n-a -t 10.0.0.1:80 -r 10.1.0.3:80 -m -w 2\n",
    );
    let b = parse_table(
        "  -A  -f 1 -s rr\n-a -t 10.0.0.1:80 -r 10.1.0.3:80 -m -w 2\n\n-a -f 1 -r 10.1.0.2:0 -g -w 1\n\
         -A -t 10.0.0.1:80 -s rr\n-a -t 10.0.0.1:80 -r 10.1.0.1:80 -m -w 1\n",
    );
    assert_eq!(a, b);
    assert_eq!(a["-A -t 10.0.0.1:80 -s rr"].len(), 2);
    assert_ne!(a, parse_table("-A -t 10.0.0.1:80 -s rr\n-A -f 1 -s rr"));
}

#[test]
fn keepalived_lite_builds_the_tables_keepalived_builds() {
    support::require_ipvs();
    let lite = lite_program();
    let reference = support::keepalived::reference_program();
    eprintln!(
        "keepalived side by side: ref {}, lite {}",
        reference.display(),
        lite.display()
    );
    let t0 = Instant::now();
    let runs: Vec<(&Case, JoinHandle<Result<String, String>>)> = CASES
        .iter()
        .map(|case| {
            let (lite, reference) = (lite.clone(), reference.clone());
            let h = std::thread::Builder::new()
                .name(case.file.to_owned())
                .spawn(move || run_case(case, &lite, &reference))
                .expect("spawn");
            (case, h)
        })
        .collect();
    let mut differed = Vec::new();
    let mut failures = Vec::new();
    for (case, h) in runs {
        match h.join() {
            Ok(Ok(line)) => eprintln!("ok: {line}"),
            Ok(Err(report)) => differed.push((case, report)),
            Err(panic) => {
                let msg = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                failures.push(format!("=== {}: panicked: {msg}", case.file));
            }
        }
    }
    // Every configuration runs at once (nine: eighteen daemons and their
    // checks) in a two-CPU guest under emulation. There keepalived's own
    // timers can fire many seconds late ("A thread timer expired 15.4
    // seconds ago") and its check scripts time out, which no table can be
    // compared against. A configuration that differed runs again alone; a
    // real difference differs again, and both reports are kept. More than
    // RUN_AGAIN_AT_MOST differing is not a slow moment: they fail as they
    // are (and the test's time stays bounded).
    if differed.len() > RUN_AGAIN_AT_MOST {
        failures.extend(differed.drain(..).map(|(_, report)| report));
    }
    for (case, first) in differed {
        eprintln!(
            "{}: differed with every configuration running, run again alone:\n{first}",
            case.file
        );
        match run_case(case, &lite, &reference) {
            Ok(line) => eprintln!("ok alone: {line}"),
            Err(again) => failures.push(format!("{first}\n=== run again alone:\n{again}")),
        }
    }
    eprintln!(
        "keepalived side by side: {} configurations in {:.1}s",
        CASES.len(),
        t0.elapsed().as_secs_f64()
    );
    assert!(
        failures.is_empty(),
        "{} of {} configurations differ:\n{}",
        failures.len(),
        CASES.len(),
        failures.join("\n")
    );
}
