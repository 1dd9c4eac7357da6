//! ipvsadm-lite against Debian's ipvsadm 1.31 on the real kernel, side by
//! side: the same commands in two fresh namespaces, every listing mode read
//! by both tools from both namespaces, byte for byte; the same bad command
//! lines with the same exit status and message and no change to the table;
//! `-S -n` output of each tool restored by the other.
//!
//! The example must be built first (`cargo build --example ipvsadm-lite`;
//! `cargo test --all-targets` builds it before running tests). It is found
//! next to this test binary: `target/<profile>/examples/ipvsadm-lite`.

mod support;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::process::{Command, Output, Stdio};

use support::TestNetns;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tool {
    Ipvsadm,
    Lite,
}

/// What a run printed and how it ended, with the lite's program path
/// replaced by `ipvsadm` so that messages that name the program compare.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Run {
    status: Option<i32>,
    stdout: String,
    stderr: String,
}

fn output_to_run(out: Output) -> Run {
    let lite = support::example_binary("ipvsadm-lite")
        .display()
        .to_string();
    let ipvsadm = support::tool("ipvsadm").display().to_string();
    Run {
        status: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr)
            .replace(&lite, "ipvsadm")
            .replace(&ipvsadm, "ipvsadm"),
    }
}

/// Whether `args` read the table (list, save, or restore, which reads
/// before it changes): see `support::exclusive_read`.
fn reads_table(args: &[&str]) -> bool {
    args.iter().any(|a| {
        matches!(*a, "--list" | "--save" | "--restore")
            || (a.starts_with('-')
                && !a.starts_with("--")
                && a[1..].starts_with(['L', 'l', 'S', 'R']))
    })
}

fn run(ns: &TestNetns, tool: Tool, args: &[&str], stdin: Option<&str>) -> Run {
    // Other tests of this binary change their tables meanwhile; a read must
    // not overlap with them (the dump's position is global), nor a change
    // with another test's read.
    let (_read, _change) = if reads_table(args) {
        (Some(support::exclusive_read()), None)
    } else {
        (None, Some(support::shared_change()))
    };
    // Started from a thread inside the namespace, which the child inherits,
    // rather than through `ip netns exec`: one process instead of two (under
    // QEMU's TCG each start costs a tenth of a second or more, and this
    // binary starts the tools about two thousand times). Both tools only talk
    // netlink, so the namespace's own /sys that `ip netns exec` mounts
    // changes nothing for them.
    let mut c = match tool {
        Tool::Ipvsadm => Command::new(support::tool("ipvsadm")),
        Tool::Lite => Command::new(support::example_binary("ipvsadm-lite")),
    };
    c.args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = ipvsctl::netlink::netns::run_in(&ipvsctl::NetNs::path(ns.path()), || c.spawn())
        .unwrap_or_else(|e| panic!("spawn {tool:?} {args:?} in {}: {e}", ns.name()));
    if let Some(text) = stdin {
        let mut pipe = child.stdin.take().expect("stdin");
        pipe.write_all(text.as_bytes()).expect("write stdin");
    }
    output_to_run(child.wait_with_output().expect("wait"))
}

fn words(line: &str) -> Vec<&str> {
    line.split_whitespace().collect()
}

fn ok(ns: &TestNetns, tool: Tool, line: &str) -> String {
    let r = run(ns, tool, &words(line), None);
    assert_eq!(r.status, Some(0), "{tool:?} {line}: {r:?}");
    r.stdout
}

fn save(ns: &TestNetns) -> String {
    ok(ns, Tool::Ipvsadm, "-S -n")
}

/// One spelling of each listing mode whose output depends on the table.
const TABLE_LISTINGS: &[&str] = &[
    "-Ln",
    "-Ln --stats",
    "-Ln --rate",
    "-Ln --stats --exact",
    "-Ln --rate --exact",
    "-Ln --thresholds",
    "-Ln --persistent-conn",
    "-Ln --tun-info",
    "-Ln --nosort",
    "-Ln --sort",
    "-S -n",
];

/// The other listings that must be byte-identical: other spellings of
/// [`TABLE_LISTINGS`] and the modes that do not list the table. They print
/// nothing more for a large table than for a small one, and each listing of
/// a large one takes about a second per tool in the guest, so only the
/// table of every kind of service is listed in these too.
const OTHER_LISTINGS: &[&str] = &[
    "-L -n",
    "-l -n",
    "--list --numeric",
    "-Sn",
    "-L -n --timeout",
    "-L --daemon",
];

/// Which listings [`assert_listings_identical`] compares.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Modes {
    /// [`TABLE_LISTINGS`].
    Table,
    /// [`TABLE_LISTINGS`] and [`OTHER_LISTINGS`].
    Every,
}

/// Lists `ns` with both tools in every mode of `modes` (good command lines)
/// plus `extra` single-service listings, and asserts byte identity; returns
/// ipvsadm's output of each mode (the callers compare these rather than
/// list the table again).
fn assert_listings_identical(
    ns: &TestNetns,
    modes: Modes,
    extra: &[&str],
) -> BTreeMap<String, String> {
    let others = if modes == Modes::Every {
        OTHER_LISTINGS
    } else {
        &[]
    };
    let good = |args: &str| TABLE_LISTINGS.contains(&args) || others.contains(&args);
    let mut failures = String::new();
    let mut by_mode = BTreeMap::new();
    for args in TABLE_LISTINGS.iter().chain(others).chain(extra) {
        let a = run(ns, Tool::Ipvsadm, &words(args), None);
        let b = run(ns, Tool::Lite, &words(args), None);
        if a != b {
            let _ = writeln!(
                failures,
                "=== `{args}` differs\n--- ipvsadm ({:?}):\n{}{}\n--- ipvsadm-lite ({:?}):\n{}{}",
                a.status, a.stdout, a.stderr, b.status, b.stdout, b.stderr
            );
        }
        by_mode.insert((*args).to_owned(), a);
    }
    assert!(failures.is_empty(), "{failures}");
    let mut listed = BTreeMap::new();
    for (args, a) in by_mode {
        // `modes` are all good command lines; `extra` may list a missing
        // service, which must only fail alike.
        if good(&args) {
            assert_eq!(a.status, Some(0), "ipvsadm {args}: {a:?}");
        }
        listed.insert(args, a.stdout);
    }
    listed
}

/// Every kind of service and server ipvsadm can make.
const RICH: &[&str] = &[
    "-A -t 10.0.0.1:80 -s rr",
    "-A -t 200.0.0.1:80 -s sh -b sh-port,sh-fallback -p 600 -M 255.255.255.0",
    "-A -t 10.0.0.2:443 -s sh -b sh-port",
    "-A -t 10.0.0.3:443 -s mh -b mh-fallback",
    "-A -t 10.0.0.4:443 -s wrr -b flag-1,flag-2,flag-3",
    "-A -u 10.0.0.1:53 -o",
    "-A -u 10.0.0.5:53 -s lc -o -p 30",
    "-A -t [2001:db8::1]:443 -s mh -b mh-port -p",
    "-A -t [2001:db8::2]:80 -s lblc -p 100 -M 64",
    "-A -f 5 -6 -p 30 -M 64",
    "-A -f 7 -s wrr",
    "-A -f 4294967295 -s dh",
    "-A --sctp-service 10.0.0.9:99 -s nq --pe sip -p 10",
    "-A -t 10.0.0.10:0 -s sed -p 3600",
    "-A -t 10.0.0.11:8080 -s lblcr",
    "-A -t 10.0.0.12:8080 -s fo",
    "-A -t 10.0.0.13:8080 -s ovf",
    "-A -t 10.0.0.14:8080 -s wlc",
    "-a -t 10.0.0.1:80 -r 192.168.1.1:8080 -m -w 3 -x 100 -y 20",
    "-a -t 10.0.0.1:80 -r 1.1.1.1 -w 2147483647",
    "-a -t 10.0.0.1:80 -r 1.2.3.4 -i --tun-type gue --tun-port 6080 --tun-csum",
    "-a -t 10.0.0.1:80 -r 1.2.3.5 -i --tun-type gue --tun-port 6081 --tun-remcsum",
    "-a -t 10.0.0.1:80 -r 1.2.3.8 -i --tun-type gue --tun-port 6082 --tun-nocsum",
    "-a -t 10.0.0.1:80 -r 1.2.3.6 -i --tun-type gre --tun-nocsum",
    "-a -t 10.0.0.1:80 -r 1.2.3.9 -i --tun-type gre --tun-csum",
    "-a -t 10.0.0.1:80 -r 1.2.3.7 -i",
    "-a -t 10.0.0.1:80 -r 2001:db8::9 -i",
    "-a -t 10.0.0.1:80 -r 250.1.1.1:80 -g -w 0",
    "-a -t 10.0.0.1:80 -r 9.1.1.1:80 -g -w 7 -x 5",
    "-a -t [2001:db8::1]:443 -r [2001:db8::5]:443 -g -w 0",
    "-a -t [2001:db8::1]:443 -r [2001:db8::4]:8443 -m -w 9 -x 10 -y 1",
    "-a -t [2001:db8::1]:443 -r [2001:db8:ffff::4]:8443 -m",
    "-a -t [2001:db8::1]:443 -r [fd00::4]:8443 -m -w 2",
    "-a -f 7 -r 10.1.1.1 -m",
    "-a -f 7 -r 10.1.1.2:8000 -m",
    "-a -f 5 -6 -r [2001:db8::77]:0 -g",
    "-a -u 10.0.0.1:53 -r 10.2.2.2:5353 -m -w 100",
    "-a --sctp-service 10.0.0.9:99 -r 10.3.3.3 -g",
    "-a -t 10.0.0.10:0 -r 10.4.4.4 -g",
];

/// Runs each of `lines` with `tool`. ipvsadm-lite, the tool under test,
/// runs each line as a command line of its own. ipvsadm, the reference,
/// takes them all in one `ipvsadm -R`, which runs each line as the command
/// line it is, in order (one process instead of one per line); any line it
/// refuses shows on stderr.
fn build(ns: &TestNetns, tool: Tool, lines: &[&str]) {
    match tool {
        Tool::Ipvsadm if !lines.is_empty() => {
            let rules = lines.join("\n") + "\n";
            let r = run(ns, tool, &["-R"], Some(&rules));
            assert_eq!(
                (r.status, r.stderr.as_str()),
                (Some(0), ""),
                "ipvsadm -R of\n{rules}{r:?}"
            );
        }
        Tool::Ipvsadm => {}
        Tool::Lite => {
            for line in lines {
                ok(ns, tool, line);
            }
        }
    }
}

#[test]
fn rules_made_by_either_tool_list_identically_in_every_mode() {
    let a = TestNetns::with_ipvs();
    let b = TestNetns::with_ipvs();
    build(&a, Tool::Ipvsadm, RICH);
    build(&b, Tool::Lite, RICH);
    let single = [
        "-Ln -t 10.0.0.1:80",
        "-L -n -t 10.0.0.1:80 --tun-info",
        "-L -n -t 10.0.0.1:80 --thresholds",
        "-L -n -f 5 -6",
        "-L -n -f 7 --stats",
        "-L -n -t [2001:db8::1]:443 --rate",
        "-L -n -u 10.0.0.1:53 --persistent-conn",
        "-L -n --sctp-service 10.0.0.9:99",
        "-L -n -t 10.0.0.99:80",
    ];
    let la = assert_listings_identical(&a, Modes::Every, &single);
    let lb = assert_listings_identical(&b, Modes::Every, &single);
    assert_eq!(la["-Ln"], lb["-Ln"], "the two tools made different tables");
    assert_eq!(la["-S -n"], lb["-S -n"]);
    assert_eq!(la["-Ln --thresholds"], lb["-Ln --thresholds"]);
    let la = &la["-Ln"];
    // Sanity: the table is what the commands made (wrapping sort order
    // included: 200.0.0.1 before 10.0.0.1, mark 4294967295 first as -1).
    assert!(la.contains("TCP  200.0.0.1:80 sh (sh-fallback,sh-port) persistent 600 mask 255.255.255.0\nTCP  10.0.0.1:80 rr\n"), "{la}");
    assert!(la.contains("FWM  -1 dh"), "{la}");
}

/// What [`state`] lists, as `ipvsadm -R` lines.
const STATE: &str = "-S -n\n-Ln --thresholds\n-L --timeout\n-L --daemon\n";

/// The table, the timeouts and the sync daemons as ipvsadm lists them with
/// `-S -n`, `-Ln --thresholds`, `-L --timeout` and `-L --daemon`, one after
/// the other: all four from one `ipvsadm -R`, which runs each line as the
/// command line it is (one process instead of four).
fn state(ns: &TestNetns) -> String {
    let r = run(ns, Tool::Ipvsadm, &["-R"], Some(STATE));
    assert_eq!((r.status, r.stderr.as_str()), (Some(0), ""), "{r:?}");
    r.stdout
}

#[test]
fn crud_commands_behave_like_ipvsadm_step_by_step() {
    let a = TestNetns::with_ipvs();
    let b = TestNetns::with_ipvs();
    let steps: &[&str] = &[
        "-A -t 10.0.0.1:80 -s rr",
        "-A -t 10.0.0.1:80 -s rr",
        "-a -t 10.0.0.1:80 -r 10.1.0.1:8080 -m -w 2",
        "-a -t 10.0.0.1:80 -r 10.1.0.1:8080 -m -w 2",
        "-a -t 10.0.0.1:80 -r 10.1.0.2 -x 50 -y 10",
        "-e -t 10.0.0.1:80 -r 10.1.0.1:8080 -m -w 5 -x 9",
        "-e -t 10.0.0.1:80 -r 10.1.0.3:8080 -m",
        "-e -t 10.0.0.9:80 -r 10.1.0.3:8080 -m",
        "-E -t 10.0.0.1:80 -s sh -b sh-port -p 60",
        "-E -t 10.0.0.1:80",
        "-E -t 10.0.0.2:80 -s rr",
        "-d -t 10.0.0.1:80 -r 10.1.0.2",
        "-d -t 10.0.0.1:80 -r 10.1.0.2",
        "-d -t 10.0.0.2:80 -r 10.1.0.2",
        "-A -u [2001:db8::1]:53 -s wrr -o",
        "-a -u [2001:db8::1]:53 -r [2001:db8::2]:5353 -m -w 4",
        "-A -t 10.0.0.3:80 -s nosuchsched",
        "-A -t 10.0.0.3:80 --pe nosuchpe -p",
        "-A -f 9 -6 -s rr",
        "-a -f 9 -6 -r [2001:db8::3]",
        "-Z",
        "-Z -t 10.0.0.1:80",
        "-Z -t 10.0.0.8:80",
        "--set 10 20 30",
        "--set 0 0 0",
        "--start-daemon master --mcast-interface lo --syncid 7",
        "--start-daemon master --mcast-interface lo",
        "--start-daemon backup --mcast-interface lo --mcast-group 224.0.0.99 --mcast-port 9000 --mcast-ttl 3 --sync-maxlen 1000",
        "--start-daemon backup --mcast-interface nosuchif0",
        "--stop-daemon backup",
        "--stop-daemon backup",
        "-D -t 10.0.0.1:80",
        "-D -t 10.0.0.1:80",
        "-A -t 10.0.0.4:80",
        "-C",
        "-A -t 10.0.0.5:80 -s rr",
        "--stop-daemon master",
    ];
    let mut failures = String::new();
    for step in steps {
        let ra = run(&a, Tool::Ipvsadm, &words(step), None);
        let rb = run(&b, Tool::Lite, &words(step), None);
        if ra != rb {
            let _ = writeln!(failures, "`{step}`: ipvsadm {ra:?}\n  ipvsadm-lite {rb:?}");
        }
        let (sa, sb) = (state(&a), state(&b));
        if sa != sb {
            let _ = writeln!(
                failures,
                "after `{step}`, `{}` differs:\n{sa}---\n{sb}",
                STATE.trim_end().replace('\n', "`, `")
            );
        }
    }
    assert!(failures.is_empty(), "{failures}");
}

#[test]
fn bad_command_lines_fail_like_ipvsadm_and_change_nothing() {
    let ns = TestNetns::with_ipvs();
    build(
        &ns,
        Tool::Ipvsadm,
        &[
            "-A -t 1.2.3.4:80 -s rr",
            "-a -t 1.2.3.4:80 -r 5.5.5.1 -m",
            "-A -f 5 -s rr",
        ],
    );
    let before = save(&ns);
    let bad: &[&str] = &[
        // Unknown options and missing commands.
        "-A -t 1.2.3.9:80 --bogus",
        "-A -t 1.2.3.9:80 -Q",
        "-n -L",
        "--tcp-service=1.2.3.10:80 -A",
        "-x",
        "-A -t",
        // Missing service, bad addresses.
        "-A",
        "-A -s rr",
        "-a -r 5.5.5.2",
        "-a -t 1.2.3.4:80",
        "-A -t 10.0.0.999:80",
        "-A -t 1.2.3.9:99999",
        "-A -t 1.2.3.9:",
        "-A -t 80",
        "-A -t [::2]",
        "-A -t ::3",
        "-A -t 1.2.3.9",
        "-a -t 1.2.3.4:80 -r 5.5.5.300",
        "-A -f 0",
        "-A -f 4294967296",
        "-A -f 12abc",
        // Out of range.
        "-a -t 1.2.3.4:80 -r 5.5.5.2 -w 2147483648",
        "-a -t 1.2.3.4:80 -r 5.5.5.2 -w -1",
        "-a -t 1.2.3.4:80 -r 5.5.5.2 -w 5x",
        "-a -t 1.2.3.4:80 -r 5.5.5.2 -x 2147483648",
        "-a -t 1.2.3.4:80 -r 5.5.5.2 -x 5 -y 10",
        "-A -t 1.2.3.5:80 -p 0",
        "-A -t 1.2.3.5:80 -p 2678401",
        "-A -t 1.2.3.5:80 -p abc",
        "-A -t [2001::1]:80 -p -M 200",
        "-A -t 1.2.3.5:80 -p -M 1.2.3.4.5",
        "--set 1 2",
        "--set 1 2 3 4",
        "--set 1 2 x",
        // Conflicts.
        "-a -t 1.2.3.4:80 -r 5.5.5.2 -g -m",
        "-a -t 1.2.3.4:80 -r 5.5.5.2 -i -m",
        "-a -t 1.2.3.4:80 -r 5.5.5.2 -w 5 -w 6",
        "-A -t 1.2.3.13:80 -A",
        "-A -t 1.2.3.13:80 -t 1.2.3.14:80",
        "-A -t 1.2.3.13:80 -n",
        "-A -t 1.2.3.13:80 -o",
        "-A -t 1.2.3.13:80 -6",
        "-A -t 1.2.3.12:80 -b sh-port",
        "-A -t 1.2.3.12:80 -b bogus",
        "-a -t 1.2.3.4:80 -r [2001::1]:80 -m",
        "-a -t 1.2.3.4:80 -r 5.5.5.9 --tun-port 5",
        "-a -t 1.2.3.4:80 -r 5.5.5.9 -i --tun-type gue",
        "-a -t 1.2.3.4:80 -r 5.5.5.9 -i --tun-type gue --tun-port 5 --tun-csum --tun-remcsum",
        "-a -t 1.2.3.4:80 -r 5.5.5.9 -i --tun-type gre --tun-remcsum",
        "-a -t 1.2.3.4:80 -r 5.5.5.9 -i --tun-type foo",
        "-a -t 1.2.3.4:80 -r 5.5.5.9 -i --tun-type ipip --tun-nocsum",
        "-L --timeout -t 1.2.3.4:80",
        "-Ln --timeout --stats",
        "-Ln -M 1.2.3.4",
        "-A -t 1.2.3.8:80 extra",
        "-A -t 1.2.3.20:80 -s rr -- x",
        "--start-daemon bogus",
        "--stop-daemon bogus",
        // Rejected by the kernel.
        "-A -t 1.2.3.4:80 -s rr",
        "-a -t 1.2.3.4:80 -r 5.5.5.1 -m",
        "-a -t 1.2.3.99:80 -r 5.5.5.1",
        "-a -f 6 -r 1.1.1.1",
        "-e -t 1.2.3.4:80 -r 5.5.5.77",
        "-d -t 1.2.3.4:80 -r 5.5.5.77",
        "-D -t 1.2.3.99:80",
        "-E -t 9.9.9.9:80",
        "-A -t 1.2.3.24:80 -s mysched",
        "-A -t 1.2.3.23:80 --pe bogus -p",
        "-Z -t 1.2.3.99:80",
        "-L -n -t 1.2.3.99:80",
        "-L -n -u 1.2.3.4:80",
        "--stop-daemon backup",
    ];
    let mut failures = String::new();
    for line in bad {
        let a = run(&ns, Tool::Ipvsadm, &words(line), None);
        let b = run(&ns, Tool::Lite, &words(line), None);
        assert_ne!(a.status, Some(0), "ipvsadm accepted `{line}`");
        if a != b {
            let _ = writeln!(
                failures,
                "`{line}`:\n  ipvsadm      {a:?}\n  ipvsadm-lite {b:?}"
            );
        }
        // One line of message (ipvsadm's "-6 used before -f" adds a blank one).
        let lines = b.stderr.trim_end().lines().count();
        if lines != 1 {
            let _ = writeln!(
                failures,
                "`{line}`: ipvsadm-lite printed {lines} lines: {b:?}"
            );
        }
        let now = save(&ns);
        if now != before {
            let _ = writeln!(failures, "`{line}` changed the table:\n{now}");
            break;
        }
    }
    assert!(failures.is_empty(), "{failures}");
}

#[test]
fn saved_rules_restore_across_tools() {
    let src = TestNetns::with_ipvs();
    // Not firewall mark 4294967295: ipvsadm saves it as `-f -1`, which
    // neither tool takes back (ipvsadm: "invalid fwmark value `-1'").
    let rich: Vec<&str> = RICH
        .iter()
        .copied()
        .filter(|l| !l.contains("4294967295"))
        .collect();
    build(&src, Tool::Ipvsadm, &rich);
    let by_ipvsadm = ok(&src, Tool::Ipvsadm, "-S -n");
    let by_lite = ok(&src, Tool::Lite, "-S -n");
    assert_eq!(by_ipvsadm, by_lite);

    // ipvsadm's rules into ipvsadm-lite, and the reverse; both compared with
    // ipvsadm restoring its own rules (-S drops thresholds, so the copies are
    // compared with each other, and with the source where -S shows all).
    let reference = TestNetns::with_ipvs();
    let r = run(&reference, Tool::Ipvsadm, &["-R"], Some(&by_ipvsadm));
    assert_eq!(r.status, Some(0), "{r:?}");
    let into_lite = TestNetns::with_ipvs();
    let r = run(&into_lite, Tool::Lite, &["-R"], Some(&by_ipvsadm));
    assert_eq!(r.status, Some(0), "{r:?}");
    let into_ipvsadm = TestNetns::with_ipvs();
    let r = run(&into_ipvsadm, Tool::Ipvsadm, &["-R"], Some(&by_lite));
    assert_eq!(r.status, Some(0), "{r:?}");

    let want = assert_listings_identical(&reference, Modes::Table, &[]);
    let lite = assert_listings_identical(&into_lite, Modes::Table, &[]);
    let ipvsadm = assert_listings_identical(&into_ipvsadm, Modes::Table, &[]);
    for args in ["-Ln", "-Ln --thresholds", "-Ln --tun-info", "-S -n"] {
        assert_eq!(lite[args], want[args], "{args}");
        assert_eq!(ipvsadm[args], want[args], "{args}");
    }
    assert_eq!(want["-S -n"], by_ipvsadm);
    assert_eq!(
        ok(&src, Tool::Ipvsadm, "-Ln --tun-info"),
        want["-Ln --tun-info"]
    );
}

/// A pseudo-random spread of unicast addresses over the whole IPv4 space, so
/// that ipvsadm's wrapping comparison matters.
fn spread(i: u32) -> std::net::Ipv4Addr {
    let mut a = i.wrapping_mul(2_654_435_761).rotate_left(7) | 1;
    if a >> 24 >= 224 || a >> 24 == 0 || a >> 24 == 127 {
        // Multicast, class E, "this network" and loopback are refused.
        a ^= 0x8800_0000;
    }
    std::net::Ipv4Addr::from(a)
}

fn thousand_rules() -> String {
    let mut s = String::new();
    for i in 0..1000u32 {
        let svc = match i % 5 {
            0 => format!("-t {}:{}", spread(i), 1 + i % 60000),
            1 => format!("-u {}:{}", spread(i), 53),
            2 => format!("-t [2001:db8::{:x}:{:x}]:443", i, i * 7),
            3 => format!("-f {}", i + 1),
            _ => format!("-f {} -6", i + 1),
        };
        let sched = ["rr", "wrr", "lc", "wlc", "sh", "mh"][(i % 6) as usize];
        let _ = writeln!(s, "-A {svc} -s {sched}");
        for j in 0..3u32 {
            let rs = if i % 5 == 2 || i % 5 == 4 {
                format!("[2001:db8:1::{:x}:{:x}]:{}", i, j, 8000 + j)
            } else {
                format!("{}:{}", spread(i * 3 + j + 7), 8000 + j)
            };
            let fwd = ["-m", "-g", "-i"][(j % 3) as usize];
            let _ = writeln!(s, "-a {svc} -r {rs} {fwd} -w {}", (i + j) % 50);
        }
    }
    s
}

fn sorted_lines(text: &str) -> Vec<&str> {
    let mut v: Vec<&str> = text.lines().collect();
    v.sort_unstable();
    v
}

#[test]
fn a_thousand_services_list_identically() {
    let rules = thousand_rules();
    let a = TestNetns::with_ipvs();
    let b = TestNetns::with_ipvs();
    let r = run(&a, Tool::Ipvsadm, &["-R"], Some(&rules));
    assert_eq!(r.status, Some(0), "{r:?}");
    let r = run(&b, Tool::Lite, &["-R"], Some(&rules));
    assert_eq!(r.status, Some(0), "{r:?}");
    let la = assert_listings_identical(&a, Modes::Table, &[]);
    let lb = assert_listings_identical(&b, Modes::Table, &[]);
    assert_eq!(la["-Ln"].lines().count(), 3 + 1000 * 4, "{}", la["-Ln"]);
    // The same table in both namespaces. (Not the same -Ln bytes: ipvsadm's
    // wrapping comparison is not a total order, so its sorted output depends
    // on the kernel's dump order, which depends on the order of the adds.)
    assert_eq!(sorted_lines(&la["-S -n"]), sorted_lines(&lb["-S -n"]));
}

/// Services of other programs (keepalived, Docker) already in the table.
const FOREIGN: &[&str] = &[
    "-A -t 10.9.9.9:80 -s rr",
    "-a -t 10.9.9.9:80 -r 10.8.8.8:80 -m",
    "-A -f 77 -s wrr",
];

/// Rules that name services of their own only.
const OWN: &str = "\
-A -t 10.0.0.1:80 -s rr
-a -t 10.0.0.1:80 -r 10.1.0.1:80 -m -w 1
-a -t 10.0.0.1:80 -r 10.1.0.2:80 -g -w 2
-A -u 10.0.0.1:53 -s wlc
-a -u 10.0.0.1:53 -r 10.1.0.3:5353 -m -w 4
-A -f 5 -s rr
";

/// What one `-R` did: the run and the table (`-Sn`) after it.
#[derive(Debug, PartialEq, Eq)]
struct Restored {
    run: Run,
    table: String,
}

/// `-R` of the same rules by each tool (lite with `extra` options), each
/// into a fresh namespace first set up with `setup` by ipvsadm; `rules` is
/// restored `times` times, the last run is returned.
fn restore_side_by_side(
    setup: &[&str],
    rules: &str,
    extra: &[&str],
    times: usize,
) -> (Restored, Restored) {
    let one = |tool: Tool, extra: &[&str]| {
        let ns = TestNetns::with_ipvs();
        build(&ns, Tool::Ipvsadm, setup);
        let mut args = vec!["-R"];
        args.extend_from_slice(extra);
        let mut last = None;
        for _ in 0..times {
            last = Some(run(&ns, tool, &args, Some(rules)));
        }
        Restored {
            run: last.expect("restored at least once"),
            table: save(&ns),
        }
    };
    (one(Tool::Ipvsadm, &[]), one(Tool::Lite, extra))
}

/// Asserts that both tools did the same, and returns what that was.
fn assert_same(setup: &[&str], rules: &str, times: usize) -> Restored {
    let (a, b) = restore_side_by_side(setup, rules, &[], times);
    assert_eq!(
        a, b,
        "ipvsadm (left) and ipvsadm-lite (right) differ on\n{rules}"
    );
    a
}

#[test]
fn restore_keeps_services_it_does_not_name_like_ipvsadm() {
    let r = assert_same(FOREIGN, OWN, 1);
    assert_eq!(r.run.status, Some(0), "{r:?}");
    assert_eq!(r.run.stderr, "");
    for line in FOREIGN {
        assert!(r.table.contains(line), "{line} went: {}", r.table);
    }
    assert!(r.table.contains("-A -u 10.0.0.1:53 -s wlc"), "{}", r.table);
    assert_eq!(r.table.lines().count(), FOREIGN.len() + 6, "{}", r.table);
}

#[test]
fn restoring_twice_fails_like_ipvsadm() {
    let r = assert_same(FOREIGN, OWN, 2);
    assert_eq!(r.run.status, Some(255), "{r:?}");
    assert_eq!(
        r.run.stderr,
        "Service already exists\nDestination already exists\nDestination already exists\n\
         Service already exists\nDestination already exists\nService already exists\n"
    );
    assert_eq!(r.run.stdout, "");
    assert_eq!(r.table.lines().count(), FOREIGN.len() + 6, "{}", r.table);
}

#[test]
fn restore_over_a_service_with_other_settings_keeps_them_like_ipvsadm() {
    let setup = [
        "-A -t 10.0.0.1:80 -s sh -p 60",
        "-a -t 10.0.0.1:80 -r 10.1.0.1:80 -m -w 9",
    ];
    let r = assert_same(&setup, OWN, 1);
    // The -A and the first -a fail; the second -a and the rest are added.
    assert_eq!(r.run.status, Some(0), "{r:?}");
    assert_eq!(
        r.run.stderr,
        "Service already exists\nDestination already exists\n"
    );
    assert!(
        r.table
            .contains("-A -t 10.0.0.1:80 -s sh -p 60\n-a -t 10.0.0.1:80 -r 10.1.0.1:80 -m -w 9\n"),
        "{}",
        r.table
    );
    assert!(r.table.contains("-r 10.1.0.2:80 -g -w 2"), "{}", r.table);
}

#[test]
fn restore_runs_every_line_and_exits_like_ipvsadm() {
    // (setup, rules, the status both must give)
    let cases: &[(&[&str], &str, i32)] = &[
        // Failing lines are reported and the next ones run; the status is
        // the last line's.
        (
            &[],
            "-A -t 10.0.0.1:80\n-A -t 10.0.0.1:80\n-A -t 10.0.0.2:80\n",
            0,
        ),
        (&[], "-A -t 10.0.0.3:80\n-A -t 10.0.0.3:80\n", 255),
        (
            &["-A -t 10.0.0.1:80 -s rr"],
            "-a -t 10.0.0.77:80 -r 10.1.1.1\n-e -t 10.0.0.1:80 -r 10.1.9.9\n\
             -d -t 10.0.0.1:80 -r 10.1.9.9\n-D -t 10.0.0.78:80\n-E -t 10.0.0.79:80 -s rr\n\
             -A -t 10.0.0.10:80\n",
            0,
        ),
        // The kernel's own refusals.
        (
            &["-A -t 10.0.0.1:80 -s rr"],
            "-A -t 10.0.0.18:80 -s nosuch\n-a -t 10.0.0.1:80 -r 10.1.0.7 -x 5 -y 10\n",
            255,
        ),
        // An unknown option or a missing value fails its line only.
        (&[], "-A -t 10.0.0.6:80 --bogus\n-A -t 10.0.0.7:80\n", 0),
        (&[], "-A -t 10.0.0.8:80\n-A -t 10.0.0.9:80 --bogus\n", 255),
        (
            &[],
            "-A -t 10.0.0.8:80\n-A -t 10.0.0.9:80 -s\n-a -t 10.0.0.8:80 -r 10.1.1.1\n",
            0,
        ),
        // Every command runs in its place: listings, -Z, --set, -C, -E, -d.
        (
            &["-A -t 10.9.9.9:80 -s rr"],
            "-A -t 10.0.0.15:80\n-a -t 10.0.0.15:80 -r 10.2.0.1:80 -m\n\
             -L -n -t 10.0.0.15:80\n-Z\n--set 10 20 30\n-E -t 10.0.0.15:80 -s lc\n\
             -L -n --timeout\n-d -t 10.0.0.15:80 -r 10.2.0.1:80\n-S -n\n-C\n\
             ipvsadm -A -t 10.0.0.20:80\n-e -t 10.0.0.20:80 -r 10.3.0.1\n",
            255,
        ),
    ];
    let mut failures = String::new();
    for (setup, rules, status) in cases {
        let (a, b) = restore_side_by_side(setup, rules, &[], 1);
        if a != b {
            let _ = writeln!(
                failures,
                "=== rules\n{rules}--- ipvsadm\n{a:?}\n--- ipvsadm-lite\n{b:?}"
            );
        }
        if a.run.status != Some(*status) {
            let _ = writeln!(failures, "=== rules\n{rules}ipvsadm gave {a:?}");
        }
    }
    assert!(failures.is_empty(), "{failures}");
}

#[test]
fn clear_first_is_clear_then_restore() {
    let a = TestNetns::with_ipvs();
    let b = TestNetns::with_ipvs();
    build(&a, Tool::Ipvsadm, FOREIGN);
    build(&b, Tool::Ipvsadm, FOREIGN);
    ok(&a, Tool::Ipvsadm, "-C");
    let ra = run(&a, Tool::Ipvsadm, &["-R"], Some(OWN));
    let rb = run(&b, Tool::Lite, &["-R", "--clear-first"], Some(OWN));
    assert_eq!(ra, rb);
    assert_eq!(rb.status, Some(0), "{rb:?}");
    assert_eq!(save(&a), save(&b));
    assert!(!save(&b).contains("10.9.9.9"), "{}", save(&b));
}

#[test]
fn dry_run_prints_the_lines_and_changes_nothing() {
    let ns = TestNetns::with_ipvs();
    build(&ns, Tool::Ipvsadm, FOREIGN);
    let before = save(&ns);
    let rules = "-A -t 10.0.0.1:80\n-a -t 10.0.0.1:80 -r 10.1.0.1 -x 9\n\
                 -A -t 10.0.0.2:80 --bogus\n-Z -t 10.0.0.1:80\n--set 1 2 3\n\
                 -d -t 10.9.9.9:80 -r 10.8.8.8:80\n";
    let r = run(&ns, Tool::Lite, &["-R", "--dry-run"], Some(rules));
    assert_eq!(r.status, Some(0), "{r:?}");
    assert_eq!(
        r.stdout,
        "-A -t 10.0.0.1:80 -s wlc\n-a -t 10.0.0.1:80 -r 10.1.0.1:80 -g -w 1 -x 9\n\
         # line 3 skipped: --bogus: unknown option\n-Z -t 10.0.0.1:80\n--set 1 2 3\n\
         -d -t 10.9.9.9:80 -r 10.8.8.8:80\n"
    );
    let r = run(
        &ns,
        Tool::Lite,
        &["-R", "--clear-first", "--dry-run"],
        Some(OWN),
    );
    assert!(
        r.stdout.starts_with("-C\n-A -t 10.0.0.1:80 -s rr\n"),
        "{r:?}"
    );
    assert_eq!(save(&ns), before);
}

#[test]
fn replace_table_updates_in_place_and_deletes_the_rest() {
    let ns = TestNetns::with_ipvs();
    build(&ns, Tool::Ipvsadm, FOREIGN);
    let first = "\
-A -t 10.0.0.1:80 -s rr
-a -t 10.0.0.1:80 -r 10.1.0.1:80 -m -w 1
-a -t 10.0.0.1:80 -r 10.1.0.2:80 -m -w 1
-A -t 10.0.0.2:80 -s wrr
-a -t 10.0.0.2:80 -r 10.1.0.3:80 -g -w 1
-A -t 10.0.0.3:80 -s rr
-a -t 10.0.0.3:80 -r 10.1.0.4:80 -m -w 1
";
    let r = run(&ns, Tool::Lite, &["-R", "--replace-table"], Some(first));
    assert_eq!(
        r,
        Run {
            status: Some(0),
            stdout: String::new(),
            stderr: String::new()
        }
    );
    // The services of other programs went.
    let reference = TestNetns::with_ipvs();
    let r = run(&reference, Tool::Ipvsadm, &["-R"], Some(first));
    assert_eq!(r.status, Some(0), "{r:?}");
    assert_eq!(save(&ns), save(&reference));

    // One connection to 10.0.0.2:80: a SYN, sent on to 10.1.0.3, which has
    // no route (the connect fails), but the kernel made the connection
    // entry and counted it.
    ns.run("ip", &["addr", "add", "10.0.0.2/32", "dev", "lo"]);
    let vip: std::net::SocketAddr = "10.0.0.2:80".parse().unwrap();
    let connect = ipvsctl::netlink::netns::run_in(&ipvsctl::NetNs::path(ns.path()), || {
        Ok(std::net::TcpStream::connect_timeout(
            &vip,
            std::time::Duration::from_secs(3),
        ))
    });
    // The Conns column of the service and of its real server (the packet
    // counters move on with retransmissions).
    let conns = |ns: &TestNetns| {
        // (Listed whole: ipvsadm's listing of one service shows no counters.)
        let text = ok(ns, Tool::Ipvsadm, "-Ln --stats");
        text.lines()
            .skip_while(|l| !l.starts_with("TCP  10.0.0.2:80 "))
            .take(2)
            .map(|l| l.split_whitespace().nth(2).unwrap_or("").to_owned())
            .collect::<Vec<_>>()
    };
    // The kernel folds its per-CPU counters into the listed ones every two
    // seconds.
    let counted = |ns: &TestNetns| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let now = conns(ns);
            if now == ["1", "1"] || std::time::Instant::now() > deadline {
                return now;
            }
            std::thread::sleep(std::time::Duration::from_millis(250));
        }
    };
    assert_eq!(
        counted(&ns),
        ["1", "1"],
        "no connection counted ({connect:?})"
    );

    // Service 1: a weight changes, a server goes, a server comes.
    // Service 2: the scheduler changes. Service 3 goes, service 4 comes.
    let second = "\
-A -t 10.0.0.1:80 -s rr
-a -t 10.0.0.1:80 -r 10.1.0.1:80 -m -w 5
-a -t 10.0.0.1:80 -r 10.1.0.9:80 -m -w 1
-A -t 10.0.0.2:80 -s lc
-a -t 10.0.0.2:80 -r 10.1.0.3:80 -g -w 1
-A -u 10.0.0.4:53 -s rr
";
    let plan = run(
        &ns,
        Tool::Lite,
        &["-R", "--replace-table", "--dry-run"],
        Some(second),
    );
    assert_eq!(plan.status, Some(0), "{plan:?}");
    assert_eq!(
        plan.stdout,
        "\
-d -t 10.0.0.1:80 -r 10.1.0.2:80
-e -t 10.0.0.1:80 -r 10.1.0.1:80 -m -w 5
-a -t 10.0.0.1:80 -r 10.1.0.9:80 -m -w 1
-E -t 10.0.0.2:80 -s lc
-A -u 10.0.0.4:53 -s rr
-D -t 10.0.0.3:80
"
    );
    // --dry-run changed nothing.
    assert!(save(&ns).contains("10.0.0.3:80"));
    let r = run(&ns, Tool::Lite, &["-R", "--replace-table"], Some(second));
    assert_eq!(r.status, Some(0), "{r:?}");
    let reference = TestNetns::with_ipvs();
    let r = run(&reference, Tool::Ipvsadm, &["-R"], Some(second));
    assert_eq!(r.status, Some(0), "{r:?}");
    assert_eq!(save(&ns), save(&reference));
    // Service 2 and its server were updated, not deleted and re-added: the
    // connection and its counters are still theirs.
    assert_eq!(counted(&ns), ["1", "1"]);
    let listed = ok(&ns, Tool::Ipvsadm, "-Ln -t 10.0.0.2:80");
    assert!(
        listed.contains("TCP  10.0.0.2:80 lc\n  -> 10.1.0.3:80                  Route   1      1"),
        "{listed}"
    );
    // Restoring the same rules again is a no-op plan.
    let again = run(
        &ns,
        Tool::Lite,
        &["-R", "--replace-table", "--dry-run"],
        Some(second),
    );
    assert_eq!(again.stdout, "");
}

#[test]
fn a_bad_line_changes_nothing_where_ipvsadm_runs_the_lines_before_it() {
    let setup = ["-A -t 10.0.0.1:80 -s rr"];
    for (rules, message) in [
        (
            "-A -t 10.0.0.2:80\n-A -t 10.0.0.999:80\n-A -t 10.0.0.3:80\n",
            "illegal virtual server address[:port] specified\n",
        ),
        (
            "-A -t 10.0.0.2:80\n-a -t 10.0.0.2:80 -r 10.1.1.1 -w 99999999999\n",
            "illegal weight specified\n",
        ),
        (
            "-A -t 10.0.0.2:80\n-A -t 10.0.0.4:0\n",
            "Zero port specified for non-persistent service\n",
        ),
        (
            "-A -t 10.0.0.2:80\n-t 10.0.0.4:80\n-A -t 10.0.0.3:80\n",
            "Try `ipvsadm -h' or 'ipvsadm --help' for more information.\n",
        ),
        (
            "-A -t 10.0.0.2:80\n-R\n-A -t 10.0.0.3:80\n",
            "Try `ipvsadm -h' or 'ipvsadm --help' for more information.\n",
        ),
    ] {
        let (a, b) = restore_side_by_side(&setup, rules, &[], 1);
        // The same message and status ...
        assert_eq!(a.run, b.run, "{rules}");
        assert_eq!(b.run.stderr, message, "{rules}");
        // ... but ipvsadm ran the first line and stopped at the bad one;
        // ipvsadm-lite parsed the whole file first and changed nothing.
        assert_eq!(b.table, "-A -t 10.0.0.1:80 -s rr\n", "{rules}");
        assert_eq!(
            a.table, "-A -t 10.0.0.1:80 -s rr\n-A -t 10.0.0.2:80 -s wlc\n",
            "{rules}"
        );
    }
}

#[test]
fn replace_table_refuses_bad_rule_files_with_the_line_and_changes_nothing() {
    let ns = TestNetns::with_ipvs();
    ok(&ns, Tool::Ipvsadm, "-A -t 10.0.0.1:80 -s rr");
    let before = save(&ns);
    for (rules, want) in [
        (
            "-A -t 10.0.0.2:80\n-A -t 10.0.0.999:80\n",
            "line 2: illegal virtual server address[:port] specified",
        ),
        (
            "-A -t 10.0.0.2:80\n-A -t 10.0.0.2:80\n",
            "line 2: Service already exists",
        ),
        (
            "-a -t 10.0.0.7:80 -r 10.1.1.1\n",
            "line 1: Service not defined",
        ),
        (
            "-A -t 10.0.0.2:80\n-a -t 10.0.0.2:80 -r 10.1.1.1 -w 99999999999\n",
            "line 2: illegal weight specified",
        ),
        (
            "-A -t 10.0.0.2:80 --bogus\n",
            "line 1: --bogus: unknown option",
        ),
    ] {
        let r = run(&ns, Tool::Lite, &["-R", "--replace-table"], Some(rules));
        assert_eq!(r.status, Some(2), "{rules}: {r:?}");
        assert!(r.stderr.contains(want), "{rules}: {r:?}");
        assert_eq!(r.stderr.lines().count(), 1, "{r:?}");
        assert_eq!(save(&ns), before, "{rules}");
    }
}
