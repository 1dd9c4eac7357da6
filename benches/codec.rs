//! Codec cost on host, no kernel: decoding a dump of 10,000 services into
//! `ServiceSnapshot`s (streaming from the bytes, and through the lossless
//! `IpvsMessage`) and into their settings alone (what a verifying sync's
//! service check decodes), and encoding 10,000 NEW_DEST requests.
//!
//! The dump is made from a real kernel reply (the `list-svcs` step of the
//! newest 6.1 fixture in `tests/fixtures/`): its messages are replicated with
//! distinct addresses and packed, as the kernel packs dump replies, into
//! datagrams of at most 32 KiB. Prints a summary line with the mean times.
//!
//! It also compares the two routes from an IPVS operation to its bytes, side
//! by side in alternating rounds: `Write::encode` then `frame::encode_request`
//! (what `Handle::apply` sends), and the syncer's direct writer
//! (`unstable::encode_write`); it prints the median ratio and its spread.
//!
//! `cargo bench --bench codec`; `IPVSCTL_BENCH_SERVICES` changes the count.
//! `IPVSCTL_BENCH_ONCE=1` runs each case once and exits, for counting
//! instructions, which do not depend on how busy the machine is:
//! `valgrind --tool=callgrind` on the bench binary, then
//! `callgrind_annotate --inclusive=yes` gives the cost of `decode_dump`,
//! `decode_dump_settings`, `decode_dump_lossless` and `encode_dests`.

#[path = "../tests/fixtures/capture.rs"]
mod capture;

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput};
use ipvsctl::batch::Write;
use ipvsctl::codec::attr::{IpvsAttr, RawAddr, ServiceAttr};
use ipvsctl::codec::frame::{self, FrameBody};
use ipvsctl::codec::{IpvsMessage, reply, request};
use ipvsctl::model::{ForwardMethod, RealServer, ServiceKey, ServiceSnapshot, VirtualServer};
use netlink_packet_core::Emitable;

/// The kernel's largest dump datagram on x86-64 (32 KiB skbs for dumps).
const DATAGRAM: usize = 32 * 1024;
const NLMSG_DONE: u16 = 3;

fn count() -> usize {
    std::env::var("IPVSCTL_BENCH_SERVICES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000)
}

/// The service messages of a real dump reply, with their header fields.
fn real_services() -> (Vec<IpvsMessage>, u16, u16) {
    let caps = capture::load();
    let cap = caps
        .iter()
        .rfind(|c| c.tool == "ipvsctl" && c.release.starts_with("6.1."))
        .or_else(|| caps.iter().find(|c| c.tool == "ipvsctl"))
        .expect("an ipvsctl fixture");
    let step = cap.step("list-svcs");
    let mut out = Vec::new();
    let (mut kind, mut flags) = (0, 0);
    for d in step.datagrams.iter().filter(|d| !d.sent) {
        for f in frame::frames(&d.bytes) {
            let f = f.expect("fixture frame");
            if let FrameBody::Data(body) = f.body {
                out.push(frame::decode_message(body).expect("fixture message"));
                kind = f.header.kind;
                flags = f.header.flags;
            }
        }
    }
    assert!(!out.is_empty(), "no services in the fixture");
    (out, kind, flags)
}

/// Gives a service message a distinct address (IPv4 and IPv6 services) or
/// firewall mark.
fn with_index(msg: &IpvsMessage, i: u32) -> IpvsMessage {
    let mut m = msg.clone();
    for a in &mut m.attrs {
        if let IpvsAttr::Service(s) = a {
            for x in s.iter_mut() {
                match x {
                    ServiceAttr::Addr(addr) => {
                        let mut b = [0u8; 16];
                        b.copy_from_slice(addr.as_bytes());
                        b[12..16].copy_from_slice(&i.to_be_bytes());
                        if b[4..12] == [0; 8] {
                            // IPv4: 16 bytes with the address in the first 4.
                            b = [0; 16];
                            b[..4].copy_from_slice(&(0x0a00_0000 | i).to_be_bytes());
                        }
                        *addr = RawAddr::new(&b).expect("16 bytes");
                    }
                    ServiceAttr::Fwmark(mark) => *mark = 1 + i,
                    _ => {}
                }
            }
        }
    }
    m
}

/// 10,000 service messages packed into datagrams as a dump, closed by
/// NLMSG_DONE.
fn dump_datagrams(n: usize) -> Vec<Vec<u8>> {
    let (real, kind, flags) = real_services();
    let mut datagrams = vec![Vec::with_capacity(DATAGRAM)];
    for i in 0..n {
        let msg = with_index(&real[i % real.len()], i as u32);
        let len = 16 + 4 + msg.buffer_len();
        let aligned = (len + 3) & !3;
        if datagrams.last().expect("one").len() + aligned > DATAGRAM {
            datagrams.push(Vec::with_capacity(DATAGRAM));
        }
        let d = datagrams.last_mut().expect("one");
        d.extend_from_slice(&(len as u32).to_ne_bytes());
        d.extend_from_slice(&kind.to_ne_bytes());
        d.extend_from_slice(&flags.to_ne_bytes());
        d.extend_from_slice(&7u32.to_ne_bytes());
        d.extend_from_slice(&0u32.to_ne_bytes());
        d.extend_from_slice(&[msg.cmd.to_raw(), msg.version, 0, 0]);
        let at = d.len();
        d.resize(at + msg.buffer_len(), 0);
        msg.emit(&mut d[at..]);
        d.resize(d.len() + aligned - len, 0);
    }
    let mut done = Vec::new();
    done.extend_from_slice(&20u32.to_ne_bytes());
    done.extend_from_slice(&NLMSG_DONE.to_ne_bytes());
    done.extend_from_slice(&frame::NLM_F_MULTI.to_ne_bytes());
    done.extend_from_slice(&7u32.to_ne_bytes());
    done.extend_from_slice(&0u32.to_ne_bytes());
    done.extend_from_slice(&0u32.to_ne_bytes());
    datagrams.push(done);
    datagrams
}

/// Splits the datagrams into messages and decodes each data message's body
/// with `decode`. Inlined into each case below, so that callgrind counts
/// every case under its own name.
#[inline(always)]
fn decode_each<T>(datagrams: &[Vec<u8>], decode: impl Fn(&[u8]) -> T) -> Vec<T> {
    let mut out = Vec::with_capacity(10_000);
    for d in datagrams {
        for f in frame::frames(d) {
            if let FrameBody::Data(body) = f.expect("frame").body {
                out.push(decode(body));
            }
        }
    }
    out
}

/// What a dump consumer does (`Handle::list_services`): split the
/// datagrams into messages and decode each straight into a snapshot.
#[inline(never)]
fn decode_dump(datagrams: &[Vec<u8>]) -> Vec<ServiceSnapshot> {
    decode_each(datagrams, |body| {
        reply::service_from_body(body).expect("service")
    })
}

/// The same dump as a verifying sync's service check reads it: each message
/// decoded into the service's settings alone, its statistics skipped
/// (`reply::virtual_server_from_body`).
#[inline(never)]
fn decode_dump_settings(datagrams: &[Vec<u8>]) -> Vec<VirtualServer> {
    decode_each(datagrams, |body| {
        reply::virtual_server_from_body(body).expect("service")
    })
}

/// The same dump read the lossless way: each message decoded into an
/// [`IpvsMessage`] (every attribute kept) and then into a snapshot. Measured
/// next to [`decode_dump`] to show what the streaming decoder saves.
#[inline(never)]
fn decode_dump_lossless(datagrams: &[Vec<u8>]) -> Vec<ServiceSnapshot> {
    decode_each(datagrams, |body| {
        reply::service(frame::decode_message(body).expect("message")).expect("service")
    })
}

fn dest_requests(n: usize) -> (ServiceKey, Vec<RealServer>) {
    let key = ServiceKey::tcp(SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 96, 0, 1)), 80));
    let rs = (0..n as u32)
        .map(|i| {
            RealServer::new(SocketAddr::new(
                IpAddr::V4(Ipv4Addr::from(0x0af4_0000 | i)),
                8080,
            ))
            .with_forward(ForwardMethod::Masquerade)
            .with_weight(1 + i % 10)
        })
        .collect();
    (key, rs)
}

/// Writes `count` requests with `write(buf, index)` into datagram-sized
/// buffers, flushing each at the datagram size, as a batch sender does;
/// returns the bytes written.
fn in_datagrams(
    count: usize,
    buf: &mut Vec<u8>,
    mut write: impl FnMut(&mut Vec<u8>, usize),
) -> usize {
    let mut total = 0;
    buf.clear();
    for i in 0..count {
        if buf.len() + 256 > DATAGRAM {
            total += buf.len();
            buf.clear();
        }
        write(buf, i);
    }
    total + buf.len()
}

/// What a batch sender does: build and encode each request into a send
/// buffer, flushing it at the datagram size.
#[inline(never)]
fn encode_dests(key: &ServiceKey, rs: &[RealServer], buf: &mut Vec<u8>) -> usize {
    in_datagrams(rs.len(), buf, |buf, i| {
        let msg = request::new_dest(key, &rs[i]).expect("valid");
        frame::encode_request(buf, &msg, 0x20, i as u32, frame::NLM_F_ACK).expect("encode");
    })
}

/// The `NEW_DEST` operations of `rs`, through `Write::encode` and the codec's
/// request framing, into datagram-sized buffers.
#[inline(never)]
fn encode_ops_via_messages(ops: &[Write], buf: &mut Vec<u8>) -> usize {
    in_datagrams(ops.len(), buf, |buf, i| {
        let msg = ops[i].encode().expect("valid");
        frame::encode_request(buf, &msg, 0x20, i as u32, frame::NLM_F_ACK).expect("encode");
    })
}

/// The same operations through the syncer's direct writer.
#[inline(never)]
fn encode_ops_direct(ops: &[Write], buf: &mut Vec<u8>) -> usize {
    in_datagrams(ops.len(), buf, |buf, i| {
        ipvsctl::unstable::encode_write(buf, &ops[i], 0x20, i as u32, frame::NLM_F_ACK);
    })
}

/// Alternating rounds of both routes: per round, the mean of each over
/// `iters` runs; returns the ratios (messages / direct), sorted.
fn route_ratios(ops: &[Write], buf: &mut Vec<u8>, rounds: usize, iters: u32) -> Vec<f64> {
    let mut ratios: Vec<f64> = (0..rounds)
        .map(|round| {
            let via = |buf: &mut Vec<u8>| {
                mean(
                    || {
                        black_box(encode_ops_via_messages(ops, buf));
                    },
                    iters,
                )
            };
            let direct = |buf: &mut Vec<u8>| {
                mean(
                    || {
                        black_box(encode_ops_direct(ops, buf));
                    },
                    iters,
                )
            };
            // Which goes first alternates too.
            let (m, d) = if round % 2 == 0 {
                let m = via(buf);
                (m, direct(buf))
            } else {
                let d = direct(buf);
                (via(buf), d)
            };
            m.as_secs_f64() / d.as_secs_f64()
        })
        .collect();
    ratios.sort_by(f64::total_cmp);
    ratios
}

fn mean(mut f: impl FnMut(), iters: u32) -> Duration {
    f();
    let t = Instant::now();
    for _ in 0..iters {
        f();
    }
    t.elapsed() / iters
}

fn main() {
    let n = count();
    let datagrams = dump_datagrams(n);
    let bytes: usize = datagrams.iter().map(Vec::len).sum();
    let decoded = decode_dump(&datagrams);
    assert_eq!(decoded.len(), n, "every service decodes");
    assert_eq!(
        decode_dump_lossless(&datagrams),
        decoded,
        "both decoders agree"
    );
    let settings: Vec<VirtualServer> = decoded.iter().map(|s| s.service.clone()).collect();
    assert_eq!(
        decode_dump_settings(&datagrams),
        settings,
        "the settings decoder agrees"
    );
    let (key, rs) = dest_requests(n);
    let mut buf = Vec::with_capacity(DATAGRAM);
    assert!(encode_dests(&key, &rs, &mut buf) > 0, "requests encoded");
    let ops: Vec<Write> = rs.iter().map(|r| Write::AddDestination(key, *r)).collect();
    let mut direct = Vec::with_capacity(DATAGRAM);
    assert_eq!(
        encode_ops_via_messages(&ops, &mut buf),
        encode_ops_direct(&ops, &mut direct),
        "both routes write as many bytes"
    );
    assert_eq!(buf, direct, "both routes end with the same datagram");
    if std::env::var_os("IPVSCTL_BENCH_ONCE").is_some() {
        return;
    }

    let mut c = Criterion::default().configure_from_args();
    let mut g = c.benchmark_group("codec");
    g.throughput(Throughput::Elements(n as u64));
    g.bench_function(format!("decode dump of {n} services"), |b| {
        b.iter(|| decode_dump(black_box(&datagrams)))
    });
    g.bench_function(format!("decode dump of {n} services, settings only"), |b| {
        b.iter(|| decode_dump_settings(black_box(&datagrams)))
    });
    g.bench_function(format!("decode dump of {n} services, lossless"), |b| {
        b.iter(|| decode_dump_lossless(black_box(&datagrams)))
    });
    g.bench_function(format!("encode {n} NEW_DEST requests"), |b| {
        b.iter(|| encode_dests(black_box(&key), black_box(&rs), &mut buf))
    });
    g.bench_function(
        format!("encode {n} NEW_DEST operations, Write::encode"),
        |b| b.iter(|| encode_ops_via_messages(black_box(&ops), &mut buf)),
    );
    g.bench_function(format!("encode {n} NEW_DEST operations, direct"), |b| {
        b.iter(|| encode_ops_direct(black_box(&ops), &mut buf))
    });
    g.finish();
    c.final_summary();

    let dec = mean(
        || {
            black_box(decode_dump(black_box(&datagrams)));
        },
        20,
    );
    let enc = mean(
        || {
            black_box(encode_dests(&key, &rs, &mut buf));
        },
        20,
    );
    // `cargo test --all-targets` runs this bench unoptimised, once: say so
    // next to the figures.
    let build = if cfg!(debug_assertions) {
        " [unoptimised test build: not a measurement]"
    } else {
        ""
    };
    println!(
        "codec summary{build}: decode {n} services ({} datagrams, {} KiB) in {:.2} ms \
         ({:.0} ns/service; target < 5 ms for 10,000); encode {n} NEW_DEST in {:.2} ms \
         ({:.0} ns/request)",
        datagrams.len(),
        bytes / 1024,
        dec.as_secs_f64() * 1e3,
        dec.as_secs_f64() * 1e9 / n as f64,
        enc.as_secs_f64() * 1e3,
        enc.as_secs_f64() * 1e9 / n as f64,
    );
    let ratios = route_ratios(&ops, &mut buf, 21, 10);
    println!(
        "encode routes{build}: Write::encode + encode_request takes {:.2}x the direct writer's time \
         (median of {} alternating rounds; min {:.2}, max {:.2})",
        ratios[ratios.len() / 2],
        ratios.len(),
        ratios[0],
        ratios[ratios.len() - 1],
    );
}
