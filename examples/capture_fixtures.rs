//! Captures the netlink traffic of ipvsctl and of Debian's ipvsadm with a real
//! kernel, for the codec fixtures in `tests/fixtures/`.
//!
//! Run it through `scripts/capture-fixtures`, which boots the kernels and
//! writes the files. By hand, as root on a disposable machine with IPVS:
//!
//! ```text
//! capture_fixtures guest        # whole scenario; prints the fixture bundle
//! capture_fixtures op STEP      # one ipvsctl step in the current namespace
//! capture_fixtures conntrack    # ctnetlink dump and deletes (tests/fixtures/*/conntrack.txt)
//! ```
//!
//! `guest` creates two network namespaces (one per tool), runs each step of
//! `tests/fixtures/scenario.rs` as its own process under
//! `strace -xx -e write=all -e read=all`, and keeps every datagram the tool
//! sent to or received from the IPVS family, byte for byte, in order. The
//! generic-netlink controller traffic (family resolution) and `MSG_PEEK`
//! receives (libnl reads each datagram twice) are left out. Nothing is
//! re-encoded: the bytes are those of the hex dumps strace printed.

#[path = "../tests/fixtures/scenario.rs"]
mod scenario;

use std::fmt::Write as _;
use std::path::Path;
use std::process::{Command, ExitCode, Stdio};
use std::time::Duration;

use ipvsctl::Handle;
use ipvsctl::batch::Write;
use ipvsctl::codec::attr::{DestAttr, IpvsAttr, ServiceAttr};
use ipvsctl::codec::{IpvsMessage, RequestKind, request};
use ipvsctl::model::{DaemonRole, ServiceKey};

const SYSCALLS: &str = "trace=sendmsg,recvmsg,sendto,recvfrom";
const GENL_ID_CTRL: u16 = 0x10;
const NLMSG_ERROR: u16 = 2;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("op") if args.len() == 2 => op(&args[1]),
        Some("conntrack") => match conntrack_capture() {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("capture_fixtures: {e}");
                ExitCode::FAILURE
            }
        },
        Some("guest") => match guest() {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("capture_fixtures: {e}");
                ExitCode::FAILURE
            }
        },
        _ => {
            eprintln!(
                "usage: capture_fixtures guest | capture_fixtures op STEP | capture_fixtures conntrack"
            );
            ExitCode::from(2)
        }
    }
}

// ---------------------------------------------------------------- ipvsctl steps

fn op(step: &str) -> ExitCode {
    let result = run_op(step);
    match result {
        Ok(out) => {
            if !out.is_empty() {
                println!("{out}");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{step}: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run_op(step: &str) -> Result<String, String> {
    use scenario::*;
    if step == "traffic" {
        return traffic();
    }
    let h = Handle::new().map_err(|e| e.to_string())?;
    let s = |e: ipvsctl::Error| e.to_string();
    let key4 = svc_tcp4().key;
    let key6 = svc_udp6().key;
    let keys = svc_stats().key;
    let done = |()| String::new();
    match step {
        "list-empty" | "list-svcs" | "list-svcs-after-flush" => {
            h.list_services().map(|v| format!("{v:#?}")).map_err(s)
        }
        "info" => h.info().map(|i| format!("{i:?}")).map_err(s),
        "add-svc-tcp4" | "add-svc-tcp4-exists" => h.add_service(&svc_tcp4()).map(done).map_err(s),
        "set-svc-tcp4" => h.update_service(&svc_tcp4_edited()).map(done).map_err(s),
        "add-svc-udp6" => h.add_service(&svc_udp6()).map(done).map_err(s),
        "add-svc-fwm4" => h.add_service(&svc_fwm4()).map(done).map_err(s),
        "add-svc-fwm6" => h.add_service(&svc_fwm6()).map(done).map_err(s),
        "add-svc-unknown-sched" => h.add_service(&svc_unknown_sched()).map(done).map_err(s),
        "add-svc-stats" => h.add_service(&svc_stats()).map(done).map_err(s),
        "add-dest-masq" | "add-dest-exists" => {
            h.add_destination(&key4, &dest_masq()).map(done).map_err(s)
        }
        "add-dest-dr" => h.add_destination(&key4, &dest_dr()).map(done).map_err(s),
        "add-dest-ipip" => h.add_destination(&key4, &dest_ipip()).map(done).map_err(s),
        "add-dest-gue" => h.add_destination(&key4, &dest_gue()).map(done).map_err(s),
        "add-dest-gre" => h.add_destination(&key4, &dest_gre()).map(done).map_err(s),
        "add-dest-mixed6" | "add-dest-mixed6-daemon-running" => h
            .add_destination(&key4, &dest_mixed6())
            .map(done)
            .map_err(s),
        "add-dest-udp6-masq" => h
            .add_destination(&key6, &dest_udp6_masq())
            .map(done)
            .map_err(s),
        "add-dest-udp6-mixed4" => h
            .add_destination(&key6, &dest_udp6_mixed4())
            .map(done)
            .map_err(s),
        "add-dest-local" => h.add_destination(&keys, &dest_local()).map(done).map_err(s),
        "set-dest" => h
            .update_destination(&key4, &dest_masq_edited())
            .map(done)
            .map_err(s),
        "del-dest-missing" => h
            .delete_destination(&key4, missing_dest())
            .map(done)
            .map_err(s),
        "del-svc-missing" => h.delete_service(&missing_key()).map(done).map_err(s),
        "get-svc" => h.get_service(&key4).map(|v| format!("{v:#?}")).map_err(s),
        "get-svc-missing" => h
            .get_service(&missing_key())
            .map(|v| format!("{v:#?}"))
            .map_err(s),
        "raw-get-dest-doit" => raw(
            &h,
            request::dump_dests(&key4).map_err(|e| e.to_string())?,
            RequestKind::Do,
        ),
        "raw-dump-dests-missing-svc" => raw(
            &h,
            request::dump_dests(&missing_key()).map_err(|e| e.to_string())?,
            RequestKind::Dump,
        ),
        "raw-new-dest-mixed-masq" => {
            // What validation refuses to build: an IPv6 real server of an
            // IPv4 service, masqueraded.
            let mut msg = request::new_dest(&key4, &dest_mixed6()).map_err(|e| e.to_string())?;
            for a in &mut msg.attrs {
                if let IpvsAttr::Dest(d) = a {
                    d.retain(|x| {
                        !matches!(
                            x,
                            DestAttr::TunType(_) | DestAttr::TunPort(_) | DestAttr::TunFlags(_)
                        )
                    });
                    for x in d.iter_mut() {
                        if let DestAttr::FwdMethod(m) = x {
                            *m = 0;
                        }
                    }
                }
            }
            raw(&h, msg, RequestKind::Do)
        }
        "raw-new-svc-no-sched" => {
            let mut msg = request::new_service(&batch_service()).map_err(|e| e.to_string())?;
            for a in &mut msg.attrs {
                if let IpvsAttr::Service(v) = a {
                    v.retain(|x| !matches!(x, ServiceAttr::SchedName(_)));
                }
            }
            raw(&h, msg, RequestKind::Do)
        }
        "list-dests-tcp4" => list_dests(&h, &key4),
        "list-dests-udp6" => list_dests(&h, &key6),
        "list-dests-stats" | "list-dests-stats-zeroed" => list_dests(&h, &keys),
        "set-config" => h.set_timeouts(&timeouts()).map(done).map_err(s),
        "get-config" => h.timeouts().map(|t| format!("{t:?}")).map_err(s),
        "start-daemon-master" | "start-daemon-master-again" => {
            h.start_daemon(&daemon_master()).map(done).map_err(s)
        }
        "start-daemon-backup" => h.start_daemon(&daemon_backup()).map(done).map_err(s),
        "list-daemons" => h.list_daemons().map(|d| format!("{d:#?}")).map_err(s),
        "stop-daemon-master" | "stop-daemon-master-again" => {
            h.stop_daemon(DaemonRole::Master).map(done).map_err(s)
        }
        "stop-daemon-backup" => h.stop_daemon(DaemonRole::Backup).map(done).map_err(s),
        "zero-one" => h.zero(Some(&keys)).map(done).map_err(s),
        "zero-all" => h.zero(None).map(done).map_err(s),
        "del-dest" => h
            .delete_destination(&key4, dest_dr().addr)
            .map(done)
            .map_err(s),
        "del-svc" => h.delete_service(&svc_fwm6().key).map(done).map_err(s),
        "batch" => {
            let vs = batch_service();
            let mut ops = vec![Write::AddService(vs.clone())];
            ops.extend(
                batch_dests()
                    .into_iter()
                    .map(|d| Write::AddDestination(vs.key, d)),
            );
            let report = h.apply(ops);
            if report.is_ok() {
                Ok(format!("{report:?}"))
            } else {
                Err(format!("{report:?}"))
            }
        }
        "flush" => h.flush().map(done).map_err(s),
        other => Err(format!("unknown step {other}")),
    }
}

fn raw(h: &Handle, msg: IpvsMessage, kind: RequestKind) -> Result<String, String> {
    h.request(msg, kind)
        .map(|v| format!("{v:#?}"))
        .map_err(|e| e.to_string())
}

fn list_dests(h: &Handle, key: &ServiceKey) -> Result<String, String> {
    h.list_destinations(key)
        .map(|v| format!("{v:#?}"))
        .map_err(|e| e.to_string())
}

/// One TCP connection through the statistics service, with data both ways,
/// then a pause so that the rate estimators (every 2 s) see it.
fn traffic() -> Result<String, String> {
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    let vip: std::net::SocketAddr = scenario::STATS_VIP.parse().map_err(|e| format!("{e}"))?;
    let listener = TcpListener::bind(vip).map_err(|e| format!("listen on {vip}: {e}"))?;
    let server = std::thread::spawn(move || -> std::io::Result<usize> {
        let (mut conn, _) = listener.accept()?;
        let mut buf = [0u8; 4096];
        let n = conn.read(&mut buf)?;
        conn.write_all(&vec![b'r'; 3000])?;
        Ok(n)
    });
    let mut c = TcpStream::connect_timeout(&vip, Duration::from_secs(5))
        .map_err(|e| format!("connect to {vip}: {e}"))?;
    c.set_read_timeout(Some(Duration::from_secs(5)))
        .map_err(|e| e.to_string())?;
    c.write_all(&[b'q'; 1000]).map_err(|e| e.to_string())?;
    let mut got = Vec::new();
    c.read_to_end(&mut got).map_err(|e| e.to_string())?;
    let sent = server
        .join()
        .map_err(|_| "server thread panicked".to_string())?
        .map_err(|e| e.to_string())?;
    drop(c);
    std::thread::sleep(Duration::from_secs(5));
    Ok(format!("sent {sent} bytes, received {}", got.len()))
}

// ---------------------------------------------------------------- the capture

/// One captured datagram.
struct Datagram {
    sent: bool,
    bytes: Vec<u8>,
}

fn run(cmd: &mut Command) -> Result<std::process::Output, String> {
    cmd.stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{cmd:?}: {e}"))
}

fn must(cmd: &mut Command) -> Result<(), String> {
    let out = run(cmd)?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{cmd:?} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

fn ip(ns: &str, args: &str) -> Result<(), String> {
    let mut c = Command::new("ip");
    c.args(["-n", ns]).args(args.split_whitespace());
    must(&mut c)
}

fn setup_netns(ns: &str) -> Result<(), String> {
    let _ = run(Command::new("ip").args(["netns", "del", ns]));
    must(Command::new("ip").args(["netns", "add", ns]))?;
    ip(ns, "link set lo up")?;
    ip(
        ns,
        &format!(
            "addr add {}/32 dev lo",
            scenario::STATS_VIP.trim_end_matches(":80")
        ),
    )?;
    ip(
        ns,
        &format!("link add {} type dummy", scenario::DAEMON_IFACE),
    )?;
    ip(
        ns,
        &format!("link set {} up multicast on", scenario::DAEMON_IFACE),
    )?;
    ip(
        ns,
        &format!("addr add 192.0.2.1/24 dev {}", scenario::DAEMON_IFACE),
    )?;
    Ok(())
}

/// Runs `prog args` in `ns` under strace; returns the exit code, the tool's
/// stderr and the IPVS datagrams.
fn capture(
    ns: &str,
    log: &Path,
    prog: &str,
    args: &[&str],
) -> Result<(i32, String, Vec<Datagram>), String> {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns, "strace", "-qq", "-xx", "-e", SYSCALLS])
        .args(["-e", "write=all", "-e", "read=all", "-o"])
        .arg(log)
        .arg("--")
        .arg(prog)
        .args(args);
    let out = run(&mut c)?;
    let text = std::fs::read_to_string(log).map_err(|e| format!("{}: {e}", log.display()))?;
    let datagrams = ipvs_only(parse_strace(&text)?);
    Ok((
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        datagrams,
    ))
}

/// Reads the hex dumps of an strace log: one datagram per send or receive,
/// leaving out `MSG_PEEK` receives (the same datagram is read again).
fn parse_strace(text: &str) -> Result<Vec<Datagram>, String> {
    let mut out: Vec<Datagram> = Vec::new();
    let mut current: Option<(bool, bool, usize)> = None; // sent, peek, expected length
    for line in text.lines() {
        let t = line.trim_start();
        if let Some(name) = ["sendmsg(", "sendto(", "recvmsg(", "recvfrom("]
            .iter()
            .find(|n| t.starts_with(**n))
        {
            if let Some((_, false, want)) = current.take() {
                check_len(&out, want)?;
            }
            let sent = name.starts_with("send");
            let peek = t.contains("MSG_PEEK");
            let ret = t
                .rsplit_once(") = ")
                .and_then(|(_, r)| r.split_whitespace().next())
                .and_then(|r| r.parse::<i64>().ok())
                .unwrap_or(-1);
            if ret > 0 {
                current = Some((sent, peek, 0));
                out.push(Datagram {
                    sent,
                    bytes: Vec::new(),
                });
                if peek {
                    out.pop();
                }
            }
        } else if let Some(rest) = t.strip_prefix("* ") {
            // "* N bytes in buffer 0"
            if let Some((sent, peek, _)) = current {
                let n = rest
                    .split_whitespace()
                    .next()
                    .and_then(|n| n.parse::<usize>().ok())
                    .ok_or_else(|| format!("bad strace line {line:?}"))?;
                current = Some((sent, peek, n));
            }
        } else if let Some(rest) = t.strip_prefix("| ") {
            let Some((_, peek, _)) = current else {
                continue;
            };
            if peek {
                continue;
            }
            // " | 00010  03 01 00 00 09 00 02 00  49 50 56 53 00 00 00 00  ascii |"
            let (_, hex) = rest
                .split_once("  ")
                .ok_or_else(|| format!("bad dump line {line:?}"))?;
            let bytes = hex.as_bytes();
            let dg = out.last_mut().ok_or("dump before any syscall")?;
            for i in 0..16 {
                let at = i * 3 + usize::from(i >= 8);
                let Some(pair) = bytes.get(at..at + 2) else {
                    break;
                };
                let Ok(s) = std::str::from_utf8(pair) else {
                    break;
                };
                match u8::from_str_radix(s, 16) {
                    Ok(b) if bytes.get(at + 2) == Some(&b' ') => dg.bytes.push(b),
                    _ => break,
                }
            }
        }
    }
    if let Some((_, false, want)) = current {
        check_len(&out, want)?;
    }
    Ok(out)
}

fn check_len(out: &[Datagram], want: usize) -> Result<(), String> {
    match out.last() {
        Some(d) if d.bytes.len() != want && want != 0 => Err(format!(
            "strace dump has {} bytes, the syscall moved {want}",
            d.bytes.len()
        )),
        _ => Ok(()),
    }
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

/// Drops the generic-netlink controller traffic: requests to `GENL_ID_CTRL`,
/// its replies and the ACKs that echo such a request.
fn ipvs_only(all: Vec<Datagram>) -> Vec<Datagram> {
    all.into_iter()
        .filter(|d| {
            let kind = u16_at(&d.bytes, 4);
            if kind == Some(GENL_ID_CTRL) {
                return false;
            }
            // An ACK or error echoes the request's header after the errno.
            !(kind == Some(NLMSG_ERROR) && u16_at(&d.bytes, 16 + 4 + 4) == Some(GENL_ID_CTRL))
        })
        .collect()
}

fn hex_lines(out: &mut String, bytes: &[u8]) {
    for line in bytes.chunks(32) {
        let words: Vec<String> = line
            .chunks(4)
            .map(|w| w.iter().map(|b| format!("{b:02x}")).collect())
            .collect();
        let _ = writeln!(out, "{}", words.join(" "));
    }
}

fn record_step(
    out: &mut String,
    step: &str,
    command: &str,
    code: i32,
    stderr: &str,
    datagrams: &[Datagram],
) {
    let _ = writeln!(out, "step {step}");
    let _ = writeln!(out, "run {command}");
    let _ = writeln!(out, "exit {code}");
    for l in stderr.lines().filter(|l| !l.trim().is_empty()).take(3) {
        let _ = writeln!(out, "stderr {}", l.trim_end());
    }
    for d in datagrams {
        let _ = writeln!(
            out,
            "{} {}",
            if d.sent { "send" } else { "recv" },
            d.bytes.len()
        );
        hex_lines(out, &d.bytes);
    }
    let _ = writeln!(out, "end");
}

fn header(tool: &str, release: &str) -> String {
    format!(
        "# Netlink datagrams between {tool} and the IPVS family of Linux {release},\n\
         # captured by scripts/capture-fixtures (examples/capture_fixtures.rs) with\n\
         # strace -xx -e write=all -e read=all; see tests/fixtures/README.md.\n\
         # Each step is one process in a fresh network namespace shared by the\n\
         # steps of this file. \"send N\" / \"recv N\": one datagram of N bytes,\n\
         # hex, 32 bytes a line. Controller traffic and MSG_PEEK reads are left out.\n"
    )
}

fn guest() -> Result<(), String> {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map_err(|e| format!("kernel release: {e}"))?
        .trim()
        .to_owned();
    let me = std::env::current_exe().map_err(|e| e.to_string())?;
    let me = me.to_str().ok_or("non-UTF-8 program path")?.to_owned();
    let tmp = std::env::temp_dir().join(format!("ipvscap-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).map_err(|e| e.to_string())?;
    let ipvsadm_version = run(Command::new("ipvsadm").arg("--version"))
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default();

    // ipvsctl
    let ns = "ipvscap-ipvsctl";
    setup_netns(ns)?;
    let mut text = header("ipvsctl", &release);
    for step in scenario::IPVSCTL_STEPS {
        if *step == "traffic" {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns, &me, "op", "traffic"]);
            let o = run(&mut c)?;
            if !o.status.success() {
                return Err(format!(
                    "traffic: {}",
                    String::from_utf8_lossy(&o.stderr).trim()
                ));
            }
            continue;
        }
        let log = tmp.join(format!("ipvsctl-{step}.log"));
        let (code, stderr, dgs) = capture(ns, &log, &me, &["op", step])?;
        eprintln!("ipvsctl {step}: exit {code}, {} datagrams", dgs.len());
        record_step(
            &mut text,
            step,
            &format!("capture_fixtures op {step}"),
            code,
            &stderr,
            &dgs,
        );
    }
    let _ = run(Command::new("ip").args(["netns", "del", ns]));
    println!("=== FILE {release}/ipvsctl.txt");
    print!("{text}");

    // ipvsadm
    let ns = "ipvscap-ipvsadm";
    setup_netns(ns)?;
    let mut text = header(&format!("Debian's ipvsadm ({ipvsadm_version})"), &release);
    for (step, args) in scenario::IPVSADM_STEPS {
        let log = tmp.join(format!("ipvsadm-{step}.log"));
        let argv: Vec<&str> = args.split_whitespace().collect();
        let (code, stderr, dgs) = capture(ns, &log, "ipvsadm", &argv)?;
        eprintln!("ipvsadm {step}: exit {code}, {} datagrams", dgs.len());
        record_step(
            &mut text,
            step,
            &format!("ipvsadm {args}"),
            code,
            &stderr,
            &dgs,
        );
    }
    let _ = run(Command::new("ip").args(["netns", "del", ns]));
    println!("=== FILE {release}/ipvsadm.txt");
    print!("{text}");
    println!("=== END");
    Ok(())
}

// ---------------------------------------------------------------- ctnetlink

/// The conntrack capture (`capture_fixtures conntrack`): in a fresh
/// namespace, entries of IPv4 UDP, IPv6 UDP, SCTP and TCP made with
/// `IPCTNL_MSG_CT_NEW` (as `conntrack -I` makes them), then a dump, a
/// delete of the IPv4 UDP entry and the same delete again (`ENOENT`),
/// recorded datagram by datagram as the socket sent and received them.
/// Needs the feature `unstable` (the socket and the create request).
#[cfg(not(feature = "unstable"))]
fn conntrack_capture() -> Result<(), String> {
    Err("the conntrack capture needs the feature unstable".into())
}

/// See the other `conntrack_capture`.
#[cfg(feature = "unstable")]
fn conntrack_capture() -> Result<(), String> {
    use ipvsctl::codec::conntrack::{decode_datagram, encode_delete, encode_dump};
    use ipvsctl::codec::frame::{NLM_F_ACK, NLM_F_DUMP};
    use ipvsctl::conntrack::{Conntrack, Tuple};
    use ipvsctl::model::Protocol;
    use ipvsctl::unstable::{DumpSize, NewEntry, NlSocket, Protocol as Nl, conntrack_create};
    use ipvsctl::{NetNs, Timeout};

    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map_err(|e| format!("kernel release: {e}"))?
        .trim()
        .to_owned();
    let ns = "ipvscap-ct";
    let _ = run(Command::new("ip").args(["netns", "del", ns]));
    must(Command::new("ip").args(["netns", "add", ns]))?;
    let pinned = NetNs::named(ns).pin().map_err(|e| e.to_string())?;
    let _ = run(Command::new("ip").args(["netns", "del", ns]));
    let masq = |p, client: &str, vip: &str, real: &str| {
        let (c, v, r): (
            std::net::SocketAddr,
            std::net::SocketAddr,
            std::net::SocketAddr,
        ) = (
            client.parse().expect("literal"),
            vip.parse().expect("literal"),
            real.parse().expect("literal"),
        );
        NewEntry {
            orig: Tuple::new(c.ip(), v.ip(), p, c.port(), v.port()),
            reply: Tuple::new(r.ip(), c.ip(), p, r.port(), c.port()),
            timeout: 3600,
        }
    };
    let entries = [
        masq(
            Protocol::Udp,
            "10.0.0.2:40000",
            "10.9.9.9:53",
            "10.1.0.2:5353",
        ),
        masq(
            Protocol::Udp,
            "[fd00::2]:40001",
            "[fd09::9]:53",
            "[fd01::2]:5353",
        ),
        masq(
            Protocol::Sctp,
            "10.0.0.2:40002",
            "10.9.9.9:3868",
            "10.1.0.2:3868",
        ),
        masq(
            Protocol::Tcp,
            "10.0.0.2:40003",
            "10.9.9.9:80",
            "10.1.0.2:8080",
        ),
    ];
    let ct = Conntrack::new().netns(pinned.clone());
    let made = conntrack_create(&ct, &entries).map_err(|e| e.to_string())?;
    if made != entries.len() {
        return Err(format!("{made} of {} entries made", entries.len()));
    }
    let mut sock = NlSocket::open(
        &NetNs::Pinned(pinned),
        Nl::Netfilter,
        DumpSize::Large,
        Timeout::ROUTE_DEFAULT,
    )
    .map_err(|e| e.to_string())?;
    let mut text = format!(
        "# Netlink datagrams between ipvsctl and ctnetlink (NETLINK_NETFILTER) of\n\
         # Linux {release}, captured by scripts/capture-fixtures --conntrack\n\
         # (examples/capture_fixtures.rs conntrack); see tests/fixtures/README.md.\n"
    );
    // One request and every datagram of its answer, up to the end of a
    // dump or the first error or ACK.
    let mut exchange = |req: &[u8], dump: bool| -> Result<Vec<Datagram>, String> {
        sock.send(req).map_err(|e| e.to_string())?;
        let mut dgs = vec![Datagram {
            sent: true,
            bytes: req.to_vec(),
        }];
        loop {
            let d = sock.recv().map_err(|e| e.to_string())?.to_vec();
            let last = ipvsctl::codec::frame::frames(&d).any(|f| {
                f.is_ok_and(|f| {
                    matches!(
                        f.body,
                        ipvsctl::codec::frame::FrameBody::Done(_)
                            | ipvsctl::codec::frame::FrameBody::Error(_)
                    )
                })
            });
            dgs.push(Datagram {
                sent: false,
                bytes: d,
            });
            if last || !dump {
                return Ok(dgs);
            }
        }
    };
    let mut req = Vec::new();
    encode_dump(&mut req, None, 1, NLM_F_DUMP);
    let dump = exchange(&req, true)?;
    record_step(&mut text, "ct-dump", "dump every family", 0, "", &dump);
    let found: Vec<_> = dump
        .iter()
        .filter(|d| !d.sent)
        .map(|d| decode_datagram(&d.bytes).map_err(|e| e.to_string()))
        .collect::<Result<Vec<_>, _>>()?
        .into_iter()
        .flatten()
        .collect();
    let udp4 = found
        .iter()
        .find(|e| e.orig.protocol == Protocol::Udp && e.orig.src.is_ipv4())
        .ok_or("the dump has no IPv4 UDP entry")?;
    for (seq, step) in [(2, "ct-delete"), (3, "ct-delete-gone")] {
        req.clear();
        encode_delete(&mut req, udp4, seq, NLM_F_ACK);
        let dgs = exchange(&req, false)?;
        record_step(&mut text, step, "delete the IPv4 UDP entry", 0, "", &dgs);
    }
    println!("=== FILE {release}/conntrack.txt");
    print!("{text}");
    println!("=== END");
    Ok(())
}
