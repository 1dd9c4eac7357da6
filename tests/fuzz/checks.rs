//! The checks behind every fuzz target, in one file that both the fuzz
//! targets (`fuzz/fuzz_targets/*.rs`) and the corpus replay test
//! (`tests/fuzz_replay.rs`) include with `#[path]`, so that `cargo test`
//! re-runs exactly what the fuzzers ran on every input kept in
//! `tests/fuzz/corpus/` and `tests/fuzz/regressions/`. It lives in the
//! library's test tree (not in `fuzz/`, a crate of its own that the published
//! package cannot hold) so that the replay also runs from the `.crate`.
//!
//! A check takes raw bytes and panics when a property fails; a panic (or an
//! abort) is what libFuzzer records as a crash. On top of each target's own
//! properties, [`run`] holds every input to an allocation budget: the bytes
//! the check allocates, in total, must stay within a base plus a multiple of
//! the input's length, so a length field that makes the code allocate what
//! it says (rather than what was received), or work that grows with the
//! square of the input, fails here even where it would not exhaust memory.
#![allow(dead_code)]

use std::alloc::System;
use std::collections::{BTreeMap, HashSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use arbitrary::{Arbitrary, Result as ArbResult, Unstructured};
use ipvsctl::batch::Write;
use ipvsctl::codec::frame::{self, EncodeError, FrameBody, NLM_F_ACK, NLMSG_HDRLEN};
use ipvsctl::codec::{IpvsMessage, ctrl, reply, request};
use ipvsctl::model::{
    AddressFamily, ConnCounts, DaemonRole, ForwardMethod, Netmask, PersistenceEngine, Protocol,
    RealServer, Scheduler, ServiceFlags, ServiceKey, SyncDaemon, Timeouts, Tunnel, TunnelEncap,
    TunnelFlags, VirtualServer, validate_destination,
};
use ipvsctl::sync::{
    self, DesiredState, FileLedger, LedgerFileError, LedgerStore, Observed, ObservedDest,
    ObservedService, PlanOptions,
};

// The ipvsadm-lite example's pure modules (rule parser, listings, `-R`
// table), included as its own tests include them.
#[allow(dead_code, unused_imports)]
#[path = "../../examples/ipvsadm-lite/format.rs"]
mod format;
#[allow(dead_code, unused_imports)]
#[path = "../../examples/ipvsadm-lite/restore.rs"]
mod restore;
#[allow(dead_code, unused_imports)]
#[path = "../../examples/ipvsadm-lite/rules.rs"]
mod rules;

/// Counts what the checks allocate (see [`run`]).
#[global_allocator]
static ALLOC: cap::Cap<System> = cap::Cap::new(System, usize::MAX);

/// One fuzz target: its name (the file `fuzz/fuzz_targets/NAME.rs` and the
/// corpus directories `tests/fuzz/corpus/NAME/` and
/// `tests/fuzz/regressions/NAME/`), its check, and its allocation budget.
pub struct Target {
    /// The target's name.
    pub name: &'static str,
    /// The check.
    pub check: fn(&[u8]),
    /// Bytes the check may allocate whatever the input.
    pub base: usize,
    /// Bytes it may allocate per input byte on top of `base`.
    pub per_byte: usize,
}

/// Every target. `scripts/fuzz` and the replay test go through this list;
/// the replay test also checks that it matches `fuzz/fuzz_targets/`.
pub const TARGETS: &[Target] = &[
    Target {
        name: "decode_reply",
        check: decode_reply,
        base: 64 << 10,
        per_byte: 64,
    },
    Target {
        name: "roundtrip",
        check: roundtrip,
        base: 64 << 10,
        per_byte: 128,
    },
    Target {
        name: "model",
        check: model,
        base: 64 << 10,
        per_byte: 64,
    },
    Target {
        name: "rules",
        check: rules,
        base: 64 << 10,
        per_byte: 256,
    },
    Target {
        name: "sync_plan",
        check: sync_plan,
        base: 256 << 10,
        per_byte: 256,
    },
    Target {
        name: "pipeline",
        check: pipeline,
        base: 256 << 10,
        per_byte: 1024,
    },
    Target {
        name: "ledger_file",
        check: ledger_file,
        base: 64 << 10,
        per_byte: 256,
    },
    Target {
        name: "conntrack",
        check: conntrack,
        base: 64 << 10,
        per_byte: 64,
    },
];

/// The target called `name`.
pub fn target(name: &str) -> Option<&'static Target> {
    TARGETS.iter().find(|t| t.name == name)
}

/// Bytes allocated so far by the whole process (monotonic).
pub fn allocated_total() -> usize {
    ALLOC.total_allocated()
}

/// Runs `t`'s check on one input and holds it to the target's allocation
/// budget.
pub fn run(t: &Target, data: &[u8]) {
    let before = allocated_total();
    (t.check)(data);
    let used = allocated_total().wrapping_sub(before);
    let budget = t.base + t.per_byte * data.len();
    assert!(
        used <= budget,
        "{}: the check allocated {used} bytes for a {}-byte input (budget {budget}: {} + {} per byte)",
        t.name,
        data.len(),
        t.base,
        t.per_byte
    );
}

// ---------------------------------------------------------------------------
// decode_reply: any bytes as what the kernel (or a hostile peer) sends.

/// Decodes `data` the two ways a reply reaches the codec: as received
/// datagrams (one or more netlink messages: a dump stream, ACKs, errors with
/// extended ACK, `NLMSG_DONE`), and as one generic-netlink message body.
/// Every reply decoder runs on every message, since a peer may send any
/// message in answer to any request. Nothing may panic, and what decodes
/// must be self-consistent.
pub fn decode_reply(data: &[u8]) {
    let mut rest = data.len();
    let mut failed = false;
    for f in frame::frames(data) {
        assert!(!failed, "frames() went on after an error");
        let f = match f {
            Ok(f) => f,
            Err(e) => {
                let _ = e.to_string();
                failed = true;
                continue;
            }
        };
        let len = f.header.len as usize;
        assert!(
            (NLMSG_HDRLEN..=rest).contains(&len),
            "frame of {len} bytes accepted with {rest} bytes left"
        );
        rest -= ((len + 3) & !3).min(rest);
        match f.body {
            FrameBody::Data(body) => {
                assert_eq!(body.len(), len - NLMSG_HDRLEN, "data body length");
                decode_body(body);
            }
            FrameBody::Error(e) => {
                // Any code, including positive ones no kernel sends.
                let _ = (e.errno(), e.is_ack(), format!("{e:?}"));
            }
            FrameBody::Done(_) | FrameBody::Noop | FrameBody::Overrun => {}
        }
    }
    decode_body(data);
}

/// Every decoder on one generic-netlink message body.
fn decode_body(body: &[u8]) {
    let _ = ctrl::decode_family_id(body);
    let Ok(msg) = frame::decode_message(body) else {
        // The streaming decoders of the dump path fail where the message
        // decoder fails.
        assert!(
            reply::service_from_body(body).is_err(),
            "service_from_body accepted what decode_message refuses"
        );
        // It skips the statistics nests, so it may accept more.
        let _ = reply::virtual_server_from_body(body);
        for family in [AddressFamily::Inet, AddressFamily::Inet6] {
            assert!(
                reply::destination_from_body(body, family).is_err(),
                "destination_from_body accepted what decode_message refuses"
            );
            // It skips the statistics nests, so it may accept more.
            let _ = reply::destination_config_from_body(body, family);
        }
        return;
    };
    let _ = format!("{msg:?}");
    decode_as_everything(&msg, body);
}

/// Runs every reply decoder on `msg` (decoded from `body`) and checks what
/// they return; the streaming decoders on `body` give the same.
fn decode_as_everything(msg: &IpvsMessage, body: &[u8]) {
    let service = reply::service(msg.clone());
    assert_eq!(
        reply::service_from_body(body).ok().as_ref(),
        service.as_ref().ok(),
        "service_from_body disagrees with decode_message + service"
    );
    if let Ok(s) = &service {
        assert_eq!(
            reply::virtual_server_from_body(body).as_ref(),
            Ok(&s.service),
            "virtual_server_from_body disagrees with service_from_body"
        );
    }
    if let Ok(s) = service {
        let vs = &s.service;
        assert_eq!(
            vs.netmask.family(),
            vs.family(),
            "netmask of the wrong family"
        );
        if let ServiceKey::FwMark { mark, .. } = vs.key {
            assert_ne!(mark, 0, "a firewall-mark service with mark 0");
        }
        let _ = (vs.key.to_string(), vs.netmask.to_string(), vs.validate());
        let _ = format!("{s:?}");
    }
    for family in [AddressFamily::Inet, AddressFamily::Inet6] {
        let dest = reply::destination(msg.clone(), family);
        assert_eq!(
            reply::destination_from_body(body, family).ok().as_ref(),
            dest.as_ref().ok(),
            "destination_from_body disagrees with decode_message + destination"
        );
        // Without the counters, the same real server wherever the full
        // decoder succeeds (it may succeed where only the statistics are bad).
        if let Ok(d) = &dest {
            assert_eq!(
                reply::destination_config_from_body(body, family).ok(),
                Some((d.server, d.conns)),
                "destination_config_from_body disagrees with destination"
            );
        }
        if let Ok(d) = dest {
            let _ = (d.server.forward.to_string(), d.server.validate());
            let _ = format!("{d:?}");
        }
    }
    if let Ok(d) = reply::daemon(msg.clone()) {
        let _ = (d.validate(), format!("{d:?}"));
    }
    if let Ok(t) = reply::timeouts(msg) {
        let _ = t.validate();
    }
    if let Ok(i) = reply::info(msg) {
        let _ = i.version.to_string();
    }
}

// ---------------------------------------------------------------------------
// roundtrip: what decodes re-encodes to something that decodes the same.

/// For every message `data` decodes to (as datagrams or as one body):
///
/// * wire level: encoding it and decoding the result gives the same message,
///   and encoding that gives the same bytes again;
/// * model level: every model value decoded from it that validates is
///   encoded by the request builders into a message that decodes back to
///   the same value (the codec half of "what the kernel reports after adding
///   x equals x").
pub fn roundtrip(data: &[u8]) {
    for f in frame::frames(data).map_while(Result::ok) {
        if let FrameBody::Data(body) = f.body {
            roundtrip_body(body);
        }
    }
    roundtrip_body(data);
}

fn roundtrip_body(body: &[u8]) {
    let Ok(m1) = frame::decode_message(body) else {
        return;
    };
    let Some((b1, m2)) = wire_checked(&m1) else {
        return;
    };
    assert_eq!(m2, m1, "decode(encode(m)) != m");
    let mut b2 = Vec::new();
    frame::encode_request(&mut b2, &m2, FAMILY, 7, NLM_F_ACK).expect("re-encoding");
    assert_eq!(b2, b1, "encode(decode(encode(m))) != encode(m)");

    if let Ok(s) = reply::service(m1.clone())
        && let Ok(req) = request::new_service(&s.service)
    {
        let back = reply::service(wire(&req)).expect("service request decodes as a service");
        assert_eq!(back.service, s.service, "service changed on its way back");
    }
    for family in [AddressFamily::Inet, AddressFamily::Inet6] {
        let Ok(d) = reply::destination(m1.clone(), family) else {
            continue;
        };
        // A destination reply does not carry its service; any service of
        // the reply's family does for the request.
        let key = match family {
            AddressFamily::Inet => ServiceKey::fwmark(1, AddressFamily::Inet),
            AddressFamily::Inet6 => ServiceKey::fwmark(1, AddressFamily::Inet6),
        };
        if let Ok(req) = request::new_dest(&key, &d.server) {
            let back = reply::destination(wire(&req), family).expect("destination decodes");
            assert_eq!(back.server, d.server, "real server changed on its way back");
        }
    }
    if let Ok(d) = reply::daemon(m1.clone())
        && let Ok(req) = request::new_daemon(&d)
    {
        assert_eq!(reply::daemon(wire(&req)).expect("daemon decodes"), d);
    }
    if let Ok(t) = reply::timeouts(&m1)
        && let Ok(req) = request::set_config(&t)
    {
        assert_eq!(reply::timeouts(&wire(&req)).expect("timeouts decode"), t);
    }
}

/// A generic-netlink family id for encoding (any resolved id will do).
const FAMILY: u16 = 0x20;

/// Encodes `msg` as a request datagram, splits it and decodes its body.
/// `None` when the message cannot be encoded because an attribute is longer
/// than netlink's 16-bit attribute length (only a hostile reply, re-encoded,
/// gets there: decoded names can grow when invalid UTF-8 is replaced).
fn wire_checked(msg: &IpvsMessage) -> Option<(Vec<u8>, IpvsMessage)> {
    let mut out = Vec::new();
    match frame::encode_request(&mut out, msg, FAMILY, 7, NLM_F_ACK) {
        Ok(n) => assert_eq!(n, out.len()),
        Err(EncodeError::AttributeTooLarge { len, .. }) => {
            assert!(
                len > usize::from(u16::MAX),
                "refused an attribute of {len} bytes"
            );
            assert!(out.is_empty(), "a refused request left bytes behind");
            return None;
        }
        Err(e) => panic!("encoding a decoded message: {e}"),
    }
    let mut frames = frame::frames(&out);
    let f = frames.next().expect("one frame").expect("the frame parses");
    assert!(frames.next().is_none(), "one request, one frame");
    assert_eq!(f.header.seq, 7);
    let FrameBody::Data(body) = f.body else {
        panic!("a request is a data frame");
    };
    let back = frame::decode_message(body).expect("an encoded request decodes");
    Some((out, back))
}

/// [`wire_checked`] for messages the request builders made, which always
/// encode.
fn wire(msg: &IpvsMessage) -> IpvsMessage {
    wire_checked(msg).expect("a built request encodes").1
}

// ---------------------------------------------------------------------------
// model: validation and the request builders on arbitrary model values.

/// Arbitrary model values (`arbitrary` feature of the library): validation
/// never panics and names what it refuses; every value that validates
/// encodes, and decodes back equal (validation refuses what the kernel could
/// not report back as given: IPv6 scope ids and flow labels, built-in
/// schedulers and protocols spelt as `Other`, the `HASHED` flag); batch
/// operations encode exactly as the request builders.
pub fn model(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let _ = model_one(&mut u);
}

fn model_one(u: &mut Unstructured<'_>) -> ArbResult<()> {
    match u.int_in_range(0u8..=4)? {
        0 => model_service(&VirtualServer::arbitrary(u)?),
        1 => {
            // Half the time a key of the real server's family, so that
            // validation passes often enough to reach the encoder.
            let rs = RealServer::arbitrary(u)?;
            let key = if u.arbitrary()? {
                ServiceKey::fwmark(u.arbitrary::<u32>()? | 1, rs.family())
            } else {
                ServiceKey::arbitrary(u)?
            };
            model_dest(&key, &rs);
        }
        2 => model_daemon(&SyncDaemon::arbitrary(u)?),
        3 => model_timeouts(&Timeouts::arbitrary(u)?),
        _ => model_values(u)?,
    }
    Ok(())
}

fn model_service(vs: &VirtualServer) {
    let _ = (vs.key.to_string(), vs.scheduler.to_string(), vs.addr());
    let valid = vs.validate();
    if let Err(e) = &valid {
        assert!(!e.to_string().is_empty());
    }
    assert_eq!(request::new_service(vs).is_ok(), valid.is_ok());
    assert_eq!(
        Write::AddService(vs.clone()).encode(),
        request::new_service(vs)
    );
    assert_eq!(
        Write::UpdateService(vs.clone()).encode(),
        request::set_service(vs)
    );
    assert_eq!(
        Write::DeleteService(vs.key).encode(),
        request::del_service(&vs.key)
    );
    assert_eq!(
        request::del_service(&vs.key).is_ok(),
        vs.key.validate().is_ok()
    );
    for req in [
        request::get_service(&vs.key),
        request::dump_dests(&vs.key),
        request::zero(Some(&vs.key)),
    ]
    .into_iter()
    .flatten()
    {
        let _ = wire(&req);
    }
    if valid.is_err() {
        return;
    }
    for req in [request::new_service(vs), request::set_service(vs)] {
        let back = reply::service(wire(&req.expect("valid")))
            .expect("an encoded valid service decodes")
            .service;
        assert_eq!(back, *vs, "valid service changed on its way back");
    }
}

fn model_dest(key: &ServiceKey, rs: &RealServer) {
    let _ = (rs.forward.to_string(), rs.family());
    let valid = validate_destination(key, rs);
    if let Err(e) = &valid {
        assert!(!e.to_string().is_empty());
    }
    let expect_ok = key.validate().is_ok() && valid.is_ok();
    assert_eq!(request::new_dest(key, rs).is_ok(), expect_ok);
    assert_eq!(
        Write::AddDestination(*key, *rs).encode(),
        request::new_dest(key, rs)
    );
    assert_eq!(
        Write::UpdateDestination(*key, *rs).encode(),
        request::set_dest(key, rs)
    );
    assert_eq!(
        Write::DeleteDestination(*key, rs.addr).encode(),
        request::del_dest(key, rs.addr)
    );
    if !expect_ok {
        return;
    }
    for req in [request::new_dest(key, rs), request::set_dest(key, rs)] {
        let back = reply::destination(wire(&req.expect("valid")), key.family())
            .expect("an encoded valid real server decodes")
            .server;
        assert_eq!(back, *rs, "valid real server changed on its way back");
    }
}

fn model_daemon(d: &SyncDaemon) {
    let valid = d.validate();
    assert_eq!(request::new_daemon(d).is_ok(), valid.is_ok());
    let _ = wire(&request::del_daemon(d.role));
    if let Ok(req) = request::new_daemon(d) {
        assert_eq!(
            reply::daemon(wire(&req)).expect("daemon decodes"),
            *d,
            "valid daemon changed on its way back"
        );
    }
}

fn model_timeouts(t: &Timeouts) {
    assert_eq!(request::set_config(t).is_ok(), t.validate().is_ok());
    if let Ok(req) = request::set_config(t) {
        assert_eq!(reply::timeouts(&wire(&req)).expect("timeouts decode"), *t);
    }
}

/// Netmasks, schedulers, protocols and families on their own.
fn model_values(u: &mut Unstructured<'_>) -> ArbResult<()> {
    let family = AddressFamily::arbitrary(u)?;
    let prefix = u8::arbitrary(u)?;
    let nm = Netmask::from_prefix(family, prefix);
    assert_eq!(nm.family(), family);
    let want = match family {
        AddressFamily::Inet => prefix.min(32),
        AddressFamily::Inet6 => prefix,
    };
    assert_eq!(
        nm.prefix_len(),
        Some(want),
        "from_prefix({family}, {prefix})"
    );
    assert_eq!(Netmask::from_wire(family, nm.to_wire()), nm);
    let any = Netmask::arbitrary(u)?;
    assert_eq!(Netmask::from_wire(any.family(), any.to_wire()), any);
    if let Some(p) = any.prefix_len() {
        assert_eq!(Netmask::from_prefix(any.family(), p), any);
    }
    let _ = any.to_string();

    let s = Scheduler::arbitrary(u)?;
    let named = Scheduler::from_name(s.name());
    assert_eq!(named.name(), s.name());
    assert_eq!(Scheduler::from_name(named.name()), named);
    let _ = s.module_name();

    let p = Protocol::arbitrary(u)?;
    assert_eq!(Protocol::from_raw(p.to_raw()).to_raw(), p.to_raw());
    let raw = u16::arbitrary(u)?;
    if let Some(f) = AddressFamily::from_raw(raw) {
        assert_eq!(f.to_raw(), raw);
    }
    let role = DaemonRole::arbitrary(u)?;
    assert_eq!(DaemonRole::from_raw(role.raw()), Some(role));
    Ok(())
}

// ---------------------------------------------------------------------------
// rules: the -S/-R rule-file parser of examples/ipvsadm-lite.

/// Any text as an `ipvsadm -S` rule file (the bytes as UTF-8, invalid
/// sequences replaced): the parser and the `-R` table never panic, errors
/// name their line, and a table the rules describe, written back as rule
/// lines (`restore::op_line`, numeric) and parsed again, is the same table
/// (up to what rule lines cannot carry, noted below).
/// Listings of it (`-L`, `-S`, numeric) never panic either.
pub fn rules(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    // The fast path for plain `-S` lines reads them exactly as the general
    // parser does.
    let mut words = Vec::new();
    for line in text.split('\n') {
        rules::line_words(line, &mut words);
        if let Some(fast) = rules::fast_rule(&words) {
            let general = rules::parse_args("ipvsadm", &words, &rules::NoResolver);
            assert_eq!(Ok(fast), general, "fast path on {line:?}");
        }
    }
    let parsed = match rules::parse(&text) {
        Ok(p) => p,
        Err(e) => {
            let lines = text.split('\n').count();
            assert!(
                (1..=lines).contains(&e.line),
                "error on line {} of {lines}",
                e.line
            );
            assert!(!e.to_string().is_empty());
            return;
        }
    };
    for r in &parsed {
        let _ = format!("{:?}", r.command);
    }
    let Ok(table) = restore::desired(&parsed) else {
        return;
    };
    let _ = restore::desired_state(&table);
    list(&table);

    // Rule lines are words split on space, tab and CR, a word starting with
    // `#` starts a comment, and the word `ipvsadm` is dropped wherever it
    // stands (as ipvsadm's own rule reader drops it): names that are not
    // such words cannot be written back (`-s#x` and `-sipvsadm` parse,
    // `-s #x` and `-s ipvsadm` do not; `op_line` also trims a name's
    // trailing Unicode whitespace). No kernel has a scheduler or persistence
    // engine named so; the round trip covers the other printable ASCII names.
    let word =
        |n: &str| !n.starts_with('#') && n != "ipvsadm" && n.bytes().all(|b| b.is_ascii_graphic());
    if !table.services.iter().all(|s| {
        word(s.service.scheduler.name())
            && s.service
                .persistence_engine
                .as_ref()
                .is_none_or(|p| word(p.name()))
    }) {
        return;
    }
    let mut again = String::new();
    for s in &table.services {
        again.push_str(&restore::op_line(&Write::AddService(s.service.clone())));
        again.push('\n');
        for rs in &s.servers {
            again.push_str(&restore::op_line(&Write::AddDestination(
                s.service.key,
                *rs,
            )));
            again.push('\n');
        }
    }
    let reparsed = rules::parse(&again)
        .unwrap_or_else(|e| panic!("rules written back do not parse: {e}\n{again}"));
    let back = restore::desired(&reparsed)
        .unwrap_or_else(|e| panic!("rules written back do not restore: {e}\n{again}"));
    // A rule line carries `-M` only with `-p` (as ipvsadm's own `-S`), so a
    // non-persistent service comes back with the default netmask.
    let mut expected = table.services.clone();
    for s in &mut expected {
        if !s.service.flags.contains(ServiceFlags::PERSISTENT) {
            s.service.netmask = Netmask::full(s.service.family());
        }
    }
    assert_eq!(
        back.services, expected,
        "the table changed on its way through rule lines:\n{again}"
    );
}

/// `-L -n` and `-S -n` listings of a table.
fn list(table: &restore::Desired) {
    let info = ipvsctl::model::Info::new(ipvsctl::model::Version(0x010201), 4096);
    let mut entries: Vec<format::Entry> = table
        .services
        .iter()
        .map(|s| format::Entry {
            service: ipvsctl::model::ServiceSnapshot::new(s.service.clone()),
            dests: s
                .servers
                .iter()
                .map(|rs| ipvsctl::model::DestinationSnapshot::new(*rs))
                .collect(),
        })
        .collect();
    for rule in [false, true] {
        let f = rules::Format {
            numeric: true,
            rule,
            ..rules::Format::default()
        };
        let mut out = String::new();
        format::list_all(&mut out, &info, &mut entries, &f, &format::Numeric);
    }
}

// ---------------------------------------------------------------------------
// sync_plan: the plan step of bulk sync on arbitrary states.

/// Arbitrary desired and observed states (built from small pools of keys
/// and addresses, so that the two overlap), scope and options. The plan,
/// applied to the observed state by a model of the kernel that refuses what
/// the kernel refuses (adding what exists, changing or deleting what does
/// not, a real server before its service), must leave:
///
/// * every desired service exactly as desired, with exactly its desired real
///   servers, plus, with graceful termination, real servers that left and
///   still drain at weight 0;
/// * every other managed service deleted, every unmanaged one untouched;
///
/// and planning again on the result must find nothing to do. Every
/// operation must pass validation (the handle would refuse it otherwise) and
/// the plan's counts must match its operations.
pub fn sync_plan(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let Ok(case) = SyncCase::arbitrary(&mut u) else {
        return;
    };
    case.check();
}

/// The inputs of one plan.
struct SyncCase {
    desired: DesiredState,
    observed: Observed,
    scope: sync::Scope,
    owned: HashSet<ServiceKey>,
    options: PlanOptions,
}

impl SyncCase {
    fn arbitrary(u: &mut Unstructured<'_>) -> ArbResult<Self> {
        let nkeys = u.int_in_range(1..=6)?;
        let keys = (0..nkeys)
            .map(|_| small_key(u))
            .collect::<ArbResult<Vec<_>>>()?;
        let naddrs = u.int_in_range(1..=8)?;
        let addrs = (0..naddrs)
            .map(|_| small_addr(u))
            .collect::<ArbResult<Vec<_>>>()?;
        let options = PlanOptions::default().with_graceful_termination(u.arbitrary()?);

        let mut desired = DesiredState::new();
        for _ in 0..u.int_in_range(0..=nkeys)? {
            let key = *u.choose(&keys)?;
            let vs = small_service(u, key)?;
            let mut dests = Vec::new();
            for _ in 0..u.int_in_range(0..=naddrs)? {
                let addr = *u.choose(&addrs)?;
                dests.push(small_server(u, addr)?);
            }
            // Duplicates and invalid values are refused here, as designed.
            let _ = desired.insert(vs, dests);
        }

        let mut observed = Observed::new();
        for _ in 0..u.int_in_range(0..=nkeys)? {
            let key = *u.choose(&keys)?;
            let want = desired.get(&key);
            let vs = match want {
                Some(ds) if u.arbitrary()? => ds.service().clone(),
                _ => small_service(u, key)?,
            };
            if vs.validate().is_err() {
                continue; // the kernel holds only what it accepted
            }
            let mut dests = Vec::new();
            for _ in 0..u.int_in_range(0..=naddrs)? {
                let server = match want.map(|ds| ds.destinations()) {
                    Some(d) if !d.is_empty() && u.arbitrary()? => *u.choose(d)?,
                    _ => {
                        let addr = *u.choose(&addrs)?;
                        small_server(u, addr)?
                    }
                };
                if validate_destination(&key, &server).is_err() {
                    continue;
                }
                let conns = if u.arbitrary()? {
                    Some(ConnCounts::new(
                        u.int_in_range(0..=2)?,
                        u.int_in_range(0..=2)?,
                        u.int_in_range(0..=2)?,
                    ))
                } else {
                    None
                };
                dests.push(ObservedDest::new(server, conns));
            }
            observed.insert(ObservedService::new(vs, dests));
        }

        let mut owned = HashSet::new();
        for k in &keys {
            if u.arbitrary()? {
                owned.insert(*k);
            }
        }
        let scope = match u.int_in_range(0u8..=2)? {
            0 => sync::Scope::Owned,
            1 => sync::Scope::All,
            _ => {
                let managed: HashSet<ServiceKey> = keys
                    .iter()
                    .copied()
                    .filter(|_| u.arbitrary().unwrap_or(false))
                    .collect();
                sync::Scope::filter(move |k| managed.contains(k))
            }
        };
        Ok(SyncCase {
            desired,
            observed,
            scope,
            owned,
            options,
        })
    }

    fn check(&self) {
        let plan = sync::plan(
            &self.desired,
            &self.observed,
            &self.scope,
            &self.owned,
            self.options,
        );
        let mut kernel = KernelModel::from(&self.observed);
        for (i, op) in plan.writes.iter().enumerate() {
            if let Err(e) = op.encode() {
                panic!("op {i} {op:?} does not validate: {e}");
            }
            if let Err(e) = kernel.apply(op) {
                panic!("op {i} {op:?} would fail: {e}\nplan: {:#?}", plan.writes);
            }
        }
        self.check_counts(&plan);
        self.check_result(&kernel);

        let after = kernel.observed();
        let again = sync::plan(
            &self.desired,
            &after,
            &self.scope,
            &self.owned,
            self.options,
        );
        assert!(
            again.writes.is_empty(),
            "planning again after applying the plan: {:#?}",
            again.writes
        );
    }

    fn check_counts(&self, plan: &sync::Plan) {
        let count = |f: fn(&Write) -> bool| plan.writes.iter().filter(|op| f(op)).count();
        let c = &plan.counts;
        assert_eq!(
            c.services.added,
            count(|o| matches!(o, Write::AddService(_)))
        );
        assert_eq!(
            c.services.updated,
            count(|o| matches!(o, Write::UpdateService(_)))
        );
        assert_eq!(
            c.services.deleted,
            count(|o| matches!(o, Write::DeleteService(_)))
        );
        assert_eq!(
            c.services.added + c.services.updated + c.services.unchanged,
            self.desired.len()
        );
        assert_eq!(
            c.destinations.added,
            count(|o| matches!(o, Write::AddDestination(..)))
        );
        assert_eq!(
            c.destinations.updated,
            count(|o| matches!(o, Write::UpdateDestination(..)))
        );
        assert_eq!(
            c.destinations.deleted,
            count(|o| matches!(o, Write::DeleteDestination(..)))
        );
        assert!(c.drain_started <= c.destinations.updated);
        if !self.options.graceful_termination {
            assert_eq!((c.drain_started, c.draining), (0, 0));
        }
    }

    fn check_result(&self, kernel: &KernelModel) {
        for ds in self.desired.services() {
            let key = ds.service().key;
            let Some((vs, dests)) = kernel.services.get(&key) else {
                panic!("desired service {key} missing after the plan");
            };
            assert_eq!(vs, ds.service(), "service {key} not as desired");
            let drains = self.options.graceful_termination
                && !matches!(
                    key,
                    ServiceKey::Addr {
                        protocol: Protocol::Udp,
                        ..
                    }
                );
            let want: BTreeMap<SocketAddr, &RealServer> =
                ds.destinations().iter().map(|rs| (rs.addr, rs)).collect();
            for (addr, rs) in &want {
                let got = dests.get(addr).map(|d| &d.server);
                assert_eq!(got, Some(*rs), "real server {addr} of {key} not as desired");
            }
            for (addr, d) in dests {
                if want.contains_key(addr) {
                    continue;
                }
                // Left in place only to drain: weight 0, connections open
                // (or unknown), graceful termination on.
                let before = self
                    .observed
                    .get(&key)
                    .and_then(|s| s.destination(addr))
                    .unwrap_or_else(|| panic!("real server {addr} of {key} appeared"));
                let idle = before
                    .conns
                    .is_some_and(|c| c.active == 0 && c.inactive == 0);
                assert!(
                    drains && !idle && d.server.weight == 0,
                    "real server {addr} of {key} left behind (drains: {drains}, idle: {idle}, weight {})",
                    d.server.weight
                );
                assert_eq!(d.server, before.server.with_weight(0));
            }
        }
        for (key, (vs, dests)) in &kernel.services {
            if self.desired.contains(key) {
                continue;
            }
            assert!(
                !self.scope.includes(key, &self.owned),
                "managed service {key} not deleted"
            );
            let before = self
                .observed
                .get(key)
                .unwrap_or_else(|| panic!("service {key} appeared"));
            assert_eq!(vs, &before.service, "unmanaged service {key} changed");
            let before: Vec<_> = before.destinations().collect();
            let now: Vec<_> = dests.values().copied().collect();
            assert_eq!(
                now, before,
                "real servers of unmanaged service {key} changed"
            );
        }
        for key in self.observed.keys() {
            if !self.desired.contains(key) && self.scope.includes(key, &self.owned) {
                assert!(!kernel.services.contains_key(key), "managed {key} survived");
            }
        }
    }
}

/// What the kernel holds, and how it answers writes.
struct KernelModel {
    services: BTreeMap<ServiceKey, (VirtualServer, BTreeMap<SocketAddr, ObservedDest>)>,
}

impl From<&Observed> for KernelModel {
    fn from(o: &Observed) -> Self {
        KernelModel {
            services: o
                .services()
                .map(|s| {
                    let dests = s.destinations().map(|d| (d.server.addr, d)).collect();
                    (s.service.key, (s.service.clone(), dests))
                })
                .collect(),
        }
    }
}

impl KernelModel {
    fn apply(&mut self, op: &Write) -> Result<(), &'static str> {
        match op {
            Write::AddService(vs) => {
                if self.services.contains_key(&vs.key) {
                    return Err("EEXIST: the service exists");
                }
                self.services.insert(vs.key, (vs.clone(), BTreeMap::new()));
            }
            Write::UpdateService(vs) => {
                let s = self
                    .services
                    .get_mut(&vs.key)
                    .ok_or("ESRCH: no such service")?;
                s.0 = vs.clone();
            }
            Write::DeleteService(key) => {
                self.services.remove(key).ok_or("ESRCH: no such service")?;
            }
            Write::AddDestination(key, rs) => {
                let s = self.services.get_mut(key).ok_or("ESRCH: no such service")?;
                if s.1.contains_key(&rs.addr) {
                    return Err("EEXIST: the real server exists");
                }
                let conns = Some(ConnCounts::default());
                s.1.insert(rs.addr, ObservedDest::new(*rs, conns));
            }
            Write::UpdateDestination(key, rs) => {
                let s = self.services.get_mut(key).ok_or("ESRCH: no such service")?;
                let d = s.1.get_mut(&rs.addr).ok_or("ENOENT: no such real server")?;
                d.server = *rs;
            }
            Write::DeleteDestination(key, addr) => {
                let s = self.services.get_mut(key).ok_or("ESRCH: no such service")?;
                s.1.remove(addr).ok_or("ENOENT: no such real server")?;
            }
            _ => return Err("a write this model does not know"),
        }
        Ok(())
    }

    fn observed(&self) -> Observed {
        let mut o = Observed::new();
        for (vs, dests) in self.services.values() {
            o.insert(ObservedService::new(vs.clone(), dests.values().copied()));
        }
        o
    }
}

/// A key from a small space (so that pools collide): TCP, UDP or SCTP on a
/// few addresses and ports of either family, or a small firewall mark.
fn small_key(u: &mut Unstructured<'_>) -> ArbResult<ServiceKey> {
    Ok(match u.int_in_range(0u8..=3)? {
        0 => ServiceKey::fwmark(u.int_in_range(0..=3)?, AddressFamily::arbitrary(u)?),
        n => {
            let protocol = [Protocol::Tcp, Protocol::Udp, Protocol::Sctp][usize::from(n - 1)];
            let addr = small_addr(u)?;
            ServiceKey::Addr { protocol, addr }
        }
    })
}

fn small_addr(u: &mut Unstructured<'_>) -> ArbResult<SocketAddr> {
    let host = u.int_in_range(1u8..=4)?;
    let ip = if u.arbitrary()? {
        IpAddr::V4(Ipv4Addr::new(10, 0, 0, host))
    } else {
        IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, u16::from(host)))
    };
    Ok(SocketAddr::new(ip, u.int_in_range(0..=2)?))
}

/// A service on `key`: ipvsadm's defaults, then a few arbitrary changes
/// (some of which make it invalid).
fn small_service(u: &mut Unstructured<'_>, key: ServiceKey) -> ArbResult<VirtualServer> {
    let mut vs = VirtualServer::new(key);
    if u.arbitrary()? {
        vs.scheduler = u.choose(&Scheduler::BUILT_IN)?.clone();
    }
    if u.arbitrary()? {
        vs = vs.with_persistence(u.int_in_range(0..=3)?);
    }
    if u.arbitrary()? {
        vs.flags |= ServiceFlags::from_bits_truncate(u.arbitrary::<u32>()? & 0x38);
    }
    if u.ratio(1, 8)? {
        vs.netmask = Netmask::from_prefix(key.family(), u.int_in_range(0..=128)?);
    }
    if u.ratio(1, 8)? {
        vs.persistence_engine = Some(PersistenceEngine::sip());
    }
    Ok(vs)
}

/// A real server at `addr` with a few arbitrary settings.
fn small_server(u: &mut Unstructured<'_>, addr: SocketAddr) -> ArbResult<RealServer> {
    let forward = match u.int_in_range(0u8..=5)? {
        0 => ForwardMethod::Masquerade,
        1 => ForwardMethod::Local,
        2 => ForwardMethod::Tunnel(Tunnel::IPIP),
        3 => ForwardMethod::Tunnel(
            Tunnel::new(TunnelEncap::Gue {
                port: u.int_in_range(0..=1)?,
            })
            .with_flags(TunnelFlags::CSUM),
        ),
        _ => ForwardMethod::DirectRoute,
    };
    let upper = u.int_in_range(0..=2)?;
    Ok(RealServer::new(addr)
        .with_weight(u.int_in_range(0..=2)?)
        .with_forward(forward)
        .with_thresholds(upper, u.int_in_range(0..=2)?))
}

// ---------------------------------------------------------------------------
// pipeline: the request pipeline on arbitrary request counts and kinds,
// limits and sequences of receive events.

/// Drives the sans-IO pipeline (`ipvsctl::unstable::Pipeline`) with requests
/// and limits drawn from `data`, then with arbitrary events: datagrams of
/// ACKs, errors, data and done messages for nearby sequence numbers (stale,
/// duplicate, out of order, other ports, other senders), raw bytes, cut
/// datagrams, overruns, empty queues and silences, and restarts between
/// datagrams. Once the input runs out, the kernel falls silent for good. Nothing may panic, the pipeline must
/// come to rest, and every request must get exactly one outcome, in order.
pub fn pipeline(data: &[u8]) {
    use ipvsctl::unstable::{Io, Kind, Limits, Pipeline, Push, Staged};
    use std::time::{Duration, Instant};

    const PORT: u32 = 77;
    const TIMEOUT: Duration = Duration::from_millis(100);
    let mut u = Unstructured::new(data);
    let count = u.int_in_range(0..=300usize).unwrap_or(0);
    let limits = Limits {
        port: PORT,
        max_send: u.int_in_range(16..=4096usize).unwrap_or(4096),
        max_batch: u.int_in_range(0..=40usize).unwrap_or(1),
    };
    let first_seq: u32 = u.arbitrary().unwrap_or(0);
    let mut pipe: Pipeline<usize, ()> = Pipeline::new(first_seq, limits, TIMEOUT);
    let mut now = Instant::now();
    let kinds = [Kind::Ack, Kind::Dump, Kind::Quiet];
    let mut next = 0;
    let mut outcomes = Vec::new();
    let mut decode = |_: &usize, _: u16, body: &[u8]| {
        if body.first() == Some(&0xff) {
            Err(ipvsctl::codec::DecodeError::from(
                "refused by the check".to_owned(),
            ))
        } else {
            Ok(())
        }
    };
    let mut steps = 0usize;
    let mut spare = None;
    while next < count {
        steps += 1;
        assert!(
            steps <= 10 * count + 10,
            "the pipeline does not come to rest"
        );
        let mut buf = Vec::new();
        // Filled in the pipeline, or staged apart and launched: numbered
        // from where the pipeline is, or from elsewhere (then renumbered).
        let mut staged = if u.ratio(1, 3).unwrap_or(false) {
            let skew: u32 = if u.ratio(1, 4).unwrap_or(false) {
                u.arbitrary().unwrap_or(1)
            } else {
                0
            };
            let mut s = Staged::new(pipe.next_seq().wrapping_add(skew), limits);
            if let Some(room) = spare.take() {
                s.reuse(room);
            }
            Some(s)
        } else {
            None
        };
        let first = next;
        while next < count && staged.as_ref().map_or(pipe.has_room(), |s| s.has_room()) {
            let kind = kinds[u.int_in_range(0..=2usize).unwrap_or(2)];
            let len = 4 * u.int_in_range(0..=8usize).unwrap_or(0);
            let write = |out: &mut Vec<u8>, seq: u32, flags: u16| {
                out.extend_from_slice(&((NLMSG_HDRLEN + 4 + len) as u32).to_ne_bytes());
                out.extend_from_slice(&0x20u16.to_ne_bytes());
                out.extend_from_slice(&flags.to_ne_bytes());
                out.extend_from_slice(&seq.to_ne_bytes());
                out.extend_from_slice(&0u32.to_ne_bytes());
                out.resize(out.len() + 4 + len, 0);
                Ok::<(), ()>(())
            };
            let pushed = match staged.as_mut() {
                Some(s) => s.push(&mut buf, kind, next, write),
                None => pipe.push(&mut buf, kind, next, write),
            };
            match pushed {
                Ok(Push::Added) => next += 1,
                Ok(Push::Full(tag)) => {
                    assert_eq!(tag, next);
                    break;
                }
                Err(()) => unreachable!("the writer never fails"),
            }
        }
        match staged {
            Some(mut s) => {
                assert!(s.seal(&mut buf), "a datagram with requests must seal");
                let s = s.take().expect("sealed");
                let from = pipe.next_seq();
                assert!(
                    pipe.launch(s, &mut buf).is_ok(),
                    "an idle pipeline takes a sealed datagram"
                );
                let seqs: Vec<u32> = frame::frames(&buf)
                    .map(|f| f.expect("well formed").header.seq)
                    .collect();
                let want: Vec<u32> = (0..next - first)
                    .map(|i| from.wrapping_add(i as u32))
                    .collect();
                assert_eq!(seqs, want, "a launched datagram has the pipeline's numbers");
            }
            None => assert!(pipe.seal(&mut buf), "a datagram with requests must seal"),
        }
        pipe.on_sent(now);
        let mut quiet_steps = 0;
        loop {
            quiet_steps += 1;
            assert!(quiet_steps < 100_000, "the pipeline does not come to rest");
            match pipe.next_io() {
                Io::Idle => break,
                Io::Send(_) => {
                    pipe.on_sent(now);
                    continue;
                }
                Io::Recv { wait } => {
                    if u.is_empty() {
                        // The kernel says nothing more.
                        if wait {
                            now += TIMEOUT;
                            pipe.on_silence(now);
                        } else {
                            pipe.on_empty();
                        }
                        continue;
                    }
                }
            }
            let base = pipe.next_seq();
            match u.int_in_range(0..=6u8).unwrap_or(0) {
                0..=2 => {
                    let d = fuzz_datagram(&mut u, base, PORT);
                    let sender = if u.ratio(1, 16).unwrap_or(false) {
                        9
                    } else {
                        0
                    };
                    pipe.on_datagram(now, &d, sender, &mut decode);
                }
                3 => {
                    let raw: &[u8] = u.arbitrary().unwrap_or_default();
                    pipe.on_datagram(now, raw, 0, &mut decode);
                }
                4 => {
                    let d = fuzz_datagram(&mut u, base, PORT);
                    let keep = u.int_in_range(0..=d.len()).unwrap_or(0);
                    pipe.on_truncated(now, &d[..keep]);
                }
                5 => pipe.on_overrun(),
                _ => {
                    if u.ratio(1, 2).unwrap_or(true) {
                        pipe.on_empty();
                    } else {
                        let ms = u.int_in_range(0..=200u64).unwrap_or(200);
                        now += Duration::from_millis(ms);
                        pipe.on_silence(now);
                    }
                }
            }
        }
        if u.ratio(1, 2).unwrap_or(false) {
            // Taken at once, their room kept for a later staged datagram.
            let mut taken = pipe.take_outcomes();
            outcomes.extend(taken.by_ref().map(|(tag, _)| tag));
            spare = Some(taken);
        } else {
            while let Some((tag, _)) = pipe.poll_outcome() {
                outcomes.push(tag);
            }
        }
        if u.ratio(1, 4).unwrap_or(false) {
            // Started over between datagrams, numbering on, as the syncer's
            // writer does before each of its small sends.
            pipe.restart(pipe.next_seq(), limits, TIMEOUT);
        }
    }
    assert_eq!(
        outcomes,
        (0..count).collect::<Vec<_>>(),
        "not exactly one outcome per request, in order"
    );
}

/// A datagram of a few messages for sequence numbers near `base` (the next
/// number the pipeline would give): ACKs, errors, data, done.
fn fuzz_datagram(u: &mut Unstructured<'_>, base: u32, port: u32) -> Vec<u8> {
    let mut out = Vec::new();
    let n = u.int_in_range(1..=6usize).unwrap_or(1);
    for _ in 0..n {
        let back = u.int_in_range(0..=45u32).unwrap_or(0);
        let seq = base.wrapping_sub(back);
        let port = if u.ratio(1, 16).unwrap_or(false) {
            port + 1
        } else {
            port
        };
        let (kind, payload): (u16, Vec<u8>) = match u.int_in_range(0..=3u8).unwrap_or(0) {
            0 => (frame::NLMSG_ERROR, {
                let mut p = 0i32.to_ne_bytes().to_vec();
                p.extend_from_slice(&[0; 16]);
                p
            }),
            1 => (frame::NLMSG_ERROR, {
                let errno = u.int_in_range(1..=130i32).unwrap_or(1);
                let mut p = (-errno).to_ne_bytes().to_vec();
                p.extend_from_slice(&[0; 16]);
                p
            }),
            2 => (0x20, vec![u.arbitrary().unwrap_or(1), 1, 0, 0]),
            _ => (
                frame::NLMSG_DONE,
                u.int_in_range(-5..=0i32)
                    .unwrap_or(0)
                    .to_ne_bytes()
                    .to_vec(),
            ),
        };
        let flags = if kind == frame::NLMSG_ERROR {
            0x100
        } else {
            frame::NLM_F_MULTI
        };
        out.extend_from_slice(&((NLMSG_HDRLEN + payload.len()) as u32).to_ne_bytes());
        out.extend_from_slice(&kind.to_ne_bytes());
        out.extend_from_slice(&flags.to_ne_bytes());
        out.extend_from_slice(&seq.to_ne_bytes());
        out.extend_from_slice(&port.to_ne_bytes());
        out.extend_from_slice(&payload);
    }
    out
}

// ---------------------------------------------------------------------------
// ledger_file: any bytes as the file of a `sync::FileLedger`.

/// The files of the `ledger_file` check: a directory of this process under
/// the system's temp directory, reused for every input.
struct LedgerFiles {
    dir: PathBuf,
    /// Each input is written here and opened.
    input: PathBuf,
    /// The ledger read from an input is saved here.
    saved: PathBuf,
}

fn ledger_files() -> &'static LedgerFiles {
    static FILES: OnceLock<LedgerFiles> = OnceLock::new();
    FILES.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("ipvsctl-fuzz-ledger-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        LedgerFiles {
            input: dir.join("input"),
            saved: dir.join("saved"),
            dir,
        }
    })
}

/// Removes the `ledger_file` check's directory (the replay test, once done;
/// a fuzzer process ends without it and leaves a few small files).
pub fn remove_ledger_files() {
    let _ = std::fs::remove_dir_all(&ledger_files().dir);
}

/// Any bytes as a ledger file: `FileLedger::open` never panics. An error
/// names the file, in its message and `path()`, and is one of the typed
/// errors of a file that exists and is readable (`Empty` exactly for no
/// bytes, `Corrupt` on a line of the file, `Version` naming a version other
/// than the one read). A ledger read is saved through a `FileLedger` at a
/// second path, reads back equal from there, and saved again gives the same
/// bytes: the format is canonical.
pub fn ledger_file(data: &[u8]) {
    let files = ledger_files();
    if std::fs::write(&files.input, data).is_err() {
        std::fs::create_dir_all(&files.dir)
            .unwrap_or_else(|e| panic!("{}: {e}", files.dir.display()));
        std::fs::write(&files.input, data)
            .unwrap_or_else(|e| panic!("{}: {e}", files.input.display()));
    }
    let ledger = match FileLedger::open(&files.input) {
        Ok((_, ledger)) => ledger,
        Err(e) => return ledger_file_error(&e, &files.input, data),
    };

    let _ = std::fs::remove_file(&files.saved);
    let mut store = FileLedger::create(&files.saved)
        .unwrap_or_else(|e| panic!("creating the second ledger file: {e}"));
    store
        .save(&ledger, &[])
        .unwrap_or_else(|e| panic!("saving a ledger that was read: {e}\n{ledger:?}"));
    let (mut again_store, again) = FileLedger::open(&files.saved)
        .unwrap_or_else(|e| panic!("a saved ledger does not read back: {e}\n{ledger:?}"));
    assert_eq!(
        again, ledger,
        "the ledger changed on its way through a save"
    );
    let first = read_saved(&files.saved);
    again_store
        .save(&again, &[])
        .unwrap_or_else(|e| panic!("saving a ledger read back: {e}\n{again:?}"));
    let second = read_saved(&files.saved);
    assert!(
        first == second,
        "saved twice, different bytes:\n{}\n---\n{}",
        String::from_utf8_lossy(&first),
        String::from_utf8_lossy(&second)
    );
}

fn read_saved(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// What an error of `FileLedger::open` on `data`, written to `path`, must be.
fn ledger_file_error(e: &LedgerFileError, path: &Path, data: &[u8]) {
    let text = e.to_string();
    assert!(
        text.contains(&path.display().to_string()),
        "the message does not name the file: {text}"
    );
    assert_eq!(e.path(), path, "path() of {e:?}");
    match e {
        LedgerFileError::Empty { .. } => assert!(data.is_empty(), "{e}"),
        LedgerFileError::Corrupt { line, reason, .. } => {
            assert!(!data.is_empty(), "{e}");
            // A file cut before its end line is corrupt on the line after
            // its last.
            let lines = data.split(|&b| b == b'\n').count();
            assert!((1..=lines).contains(line), "line {line} of {lines}: {e}");
            assert!(!reason.is_empty(), "{e:?}");
        }
        LedgerFileError::Version { found, .. } => {
            assert!(!found.is_empty() && found != "1", "{e:?}");
        }
        other => panic!("not an error of a readable file's content: {other:?}"),
    }
}

// ---------------------------------------------------------------------------
// conntrack: any bytes as a ctnetlink answer.

/// `NFNL_SUBSYS_CTNETLINK << 8 | IPCTNL_MSG_CT_NEW`: an entry of a dump.
const CT_NEW_TYPE: u16 = 0x100;

/// Decodes `data` as received datagrams of a ctnetlink dump, and as the
/// payload of one entry message. Nothing may panic; every entry decoded has
/// tuples of its own family, and the delete request written for it is one
/// well-formed `IPCTNL_MSG_CT_DELETE` message of that family.
pub fn conntrack(data: &[u8]) {
    use ipvsctl::codec::conntrack::{decode_datagram, encode_delete};
    let mut wrapped = Vec::with_capacity(NLMSG_HDRLEN + data.len() + 3);
    let len = (NLMSG_HDRLEN + data.len()) as u32;
    wrapped.extend_from_slice(&len.to_ne_bytes());
    wrapped.extend_from_slice(&CT_NEW_TYPE.to_ne_bytes());
    wrapped.extend_from_slice(&[0; 10]);
    wrapped.extend_from_slice(data);
    for buf in [data, &wrapped[..]] {
        let Ok(entries) = decode_datagram(buf) else {
            continue;
        };
        for e in entries {
            let v4 = e.family == AddressFamily::Inet;
            assert_eq!(e.orig.src.is_ipv4(), v4, "{e:?}");
            assert_eq!(e.orig.dst.is_ipv4(), v4, "{e:?}");
            assert_eq!(e.reply.src.is_ipv4(), v4, "{e:?}");
            let mut out = Vec::new();
            encode_delete(&mut out, &e, 7, NLM_F_ACK);
            let frames: Vec<_> = frame::frames(&out).collect();
            assert_eq!(frames.len(), 1, "{e:?}");
            let f = frames[0].as_ref().expect("a well-formed delete");
            assert_eq!(f.header.kind, 0x102);
            assert_eq!(f.header.len as usize, out.len());
            let FrameBody::Data(body) = f.body else {
                panic!("a delete that is not a data message")
            };
            assert_eq!(body[0], if v4 { 2 } else { 10 });
        }
    }
}
