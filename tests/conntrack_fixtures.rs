//! The ctnetlink codec against bytes captured from real kernels
//! (`tests/fixtures/<release>/conntrack.txt`, made by
//! `scripts/capture-fixtures --conntrack`): a dump of IPv4 UDP, IPv6 UDP,
//! SCTP and TCP entries is decoded and compared with the entries the capture
//! made, the dump and delete requests are written again byte for byte, and
//! the kernel's answers to the delete (an ACK, then `ENOENT`) are read.
//!
//! Host test, no kernel needed.

#[path = "fixtures/capture.rs"]
mod capture;

use std::net::SocketAddr;

use ipvsctl::codec::conntrack::{decode_datagram, encode_delete, encode_dump};
use ipvsctl::codec::frame::{self, FrameBody, NLM_F_ACK, NLM_F_DUMP};
use ipvsctl::conntrack::{Entry, Filter, Tuple};
use ipvsctl::model::{AddressFamily, Protocol, ServiceKey};

/// The captures that have a conntrack file, at least one.
fn captures() -> Vec<capture::Capture> {
    let mut out = Vec::new();
    let mut dirs: Vec<_> = std::fs::read_dir(capture::fixtures_dir())
        .expect("tests/fixtures")
        .filter_map(|e| e.ok())
        .filter(|e| e.path().join("conntrack.txt").is_file())
        .collect();
    dirs.sort_by_key(|e| e.file_name());
    for dir in dirs {
        let release = dir.file_name().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(dir.path().join("conntrack.txt")).expect("read");
        out.push(capture::parse_capture(&release, "conntrack", &text));
    }
    assert!(!out.is_empty(), "no conntrack capture in tests/fixtures");
    out
}

/// (family, protocol, client, virtual address, real server) of the entries
/// the capture made, as `IPCTNL_MSG_CT_NEW` with a 3600 s timeout.
const MADE: [(AddressFamily, Protocol, &str, &str, &str); 4] = [
    (
        AddressFamily::Inet,
        Protocol::Udp,
        "10.0.0.2:40000",
        "10.9.9.9:53",
        "10.1.0.2:5353",
    ),
    (
        AddressFamily::Inet6,
        Protocol::Udp,
        "[fd00::2]:40001",
        "[fd09::9]:53",
        "[fd01::2]:5353",
    ),
    (
        AddressFamily::Inet,
        Protocol::Sctp,
        "10.0.0.2:40002",
        "10.9.9.9:3868",
        "10.1.0.2:3868",
    ),
    (
        AddressFamily::Inet,
        Protocol::Tcp,
        "10.0.0.2:40003",
        "10.9.9.9:80",
        "10.1.0.2:8080",
    ),
];

fn sa(s: &str) -> SocketAddr {
    s.parse().expect("literal")
}

fn dumped(c: &capture::Capture) -> Vec<Entry> {
    c.step("ct-dump")
        .datagrams
        .iter()
        .filter(|d| !d.sent)
        .flat_map(|d| decode_datagram(&d.bytes).expect("a dump datagram decodes"))
        .collect()
}

#[test]
fn the_dump_shows_the_entries_made() {
    for c in captures() {
        let mut got = dumped(&c);
        assert_eq!(got.len(), MADE.len(), "{}", c.label());
        for (family, proto, client, vip, real) in MADE {
            let (client, vip, real) = (sa(client), sa(vip), sa(real));
            let at = got
                .iter()
                .position(|e| e.orig.src_port == client.port())
                .unwrap_or_else(|| panic!("{}: no entry from {client}", c.label()));
            let e = got.remove(at);
            assert_eq!(e.family, family);
            assert_eq!(
                e.orig,
                Tuple::new(client.ip(), vip.ip(), proto, client.port(), vip.port())
            );
            assert_eq!(
                e.reply,
                Tuple::new(real.ip(), client.ip(), proto, real.port(), client.port())
            );
            assert!(e.id.is_some(), "{e:?}");
            let timeout = e.timeout.expect("CTA_TIMEOUT");
            assert!((3000..=3600).contains(&timeout), "{e:?}");
            // IPS_CONFIRMED: in the table.
            assert_eq!(e.status & 0x8, 0x8, "{e:?}");
            assert_eq!((e.mark, e.zone), (0, 0));
            // TCP and SCTP report their state; UDP has none.
            assert_eq!(
                e.protoinfo.is_some(),
                proto != Protocol::Udp,
                "{}: {e:?}",
                c.label()
            );
            // The filters select what they promise.
            let key = ServiceKey::Addr {
                protocol: proto,
                addr: vip,
            };
            assert!(Filter::service(&key).unwrap().matches(&e));
            assert!(Filter::real_server(&key, real).unwrap().matches(&e));
        }
    }
}

#[test]
fn requests_are_written_again_byte_for_byte() {
    for c in captures() {
        let dump = c.step("ct-dump");
        let mut out = Vec::new();
        encode_dump(&mut out, None, 1, NLM_F_DUMP);
        assert_eq!(out, dump.datagrams[0].bytes, "{}", c.label());
        let udp4 = dumped(&c)
            .into_iter()
            .find(|e| e.orig.protocol == Protocol::Udp && e.family == AddressFamily::Inet)
            .expect("the IPv4 UDP entry");
        for (seq, step) in [(2, "ct-delete"), (3, "ct-delete-gone")] {
            out.clear();
            encode_delete(&mut out, &udp4, seq, NLM_F_ACK);
            assert_eq!(out, c.step(step).datagrams[0].bytes, "{} {step}", c.label());
        }
    }
}

/// The answer of `step`: 0 for an ACK, else the errno.
fn answer(c: &capture::Capture, step: &str) -> i32 {
    let d = &c.step(step).datagrams[1];
    assert!(!d.sent);
    let f = frame::frames(&d.bytes)
        .next()
        .expect("a message")
        .expect("well formed");
    let FrameBody::Error(e) = f.body else {
        panic!("{} {step}: not an ACK or error: {f:?}", c.label())
    };
    e.errno()
}

#[test]
fn a_delete_is_acked_and_the_same_delete_again_is_enoent() {
    for c in captures() {
        assert_eq!(answer(&c, "ct-delete"), 0, "{}", c.label());
        assert_eq!(answer(&c, "ct-delete-gone"), 2, "{}", c.label());
    }
}
