//! Part `bounds`: the least any reader or writer on this machine pays above
//! the kernel's floor, next to the library, in turns.
//!
//! A dump check must at least look at every attribute of every service the
//! kernel sends; a one-change update must at least encode its request and
//! read its ACK. These cases do only that, with no library machinery
//! (socket lanes, the request pipeline, threads made per call): a bar that
//! one of them already misses is out of reach, on this machine, of any
//! reader or writer built the same way, and the distance between them and
//! the library is the library's own share.
//!
//! Service checks, per turn (the order rotates by one each turn):
//! - `raw`: the floor (`raw_dump`: the dump received, messages counted);
//! - `walk`: the same on one thread, every service attribute visited
//!   (type and length folded into a sum), nothing built;
//! - `decode`: the same, each service decoded by the library's decoder
//!   (`reply::virtual_server_from_body`, statistics skipped);
//! - `compare`: the same, each service compared in place with the
//!   remembered settings (key read and looked up in a `HashMap` with a
//!   multiply-fold hash, as cheap as the syncer's own tables', each
//!   setting compared with its wire value, nothing built): the least a
//!   one-thread check must do;
//! - `compare_own`: `compare` against a memory that, like a syncer's,
//!   holds each service's real servers and owner too: the one lookup also
//!   marks the service listed (the repeats of a multi-part dump are
//!   skipped) and tells whether it is owned;
//! - `compare_all`: `compare_own`, plus what a full-state resync must then
//!   know of each service: the desired service looked up and compared, its
//!   real servers with the remembered ones (slices of plain values, compared
//!   whole);
//! - `walk_2`, `decode_2`: a helper thread that already runs (woken per
//!   dump) receives the datagrams and hands each over whole, in buffers
//!   that come back to it; this thread walks or decodes them;
//! - `sync`: the library, `Verify::Services` forced to dump;
//! - `thread`: no dump, a scoped thread spawned and joined with nothing to
//!   do: what each helper thread the library starts for a dump costs.
//!
//! One change, per turn: `raw` (the pre-encoded `SET_DEST`, its ACK read),
//! `encode` (the same request encoded from the typed real server into a
//! kept buffer, then sent the same way), `handle`
//! (`Handle::update_destination`), `sync` (`Syncer::sync_changes` with
//! `Verify::None`).

use std::cell::Cell;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::hint::black_box;
use std::net::{IpAddr, SocketAddr};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use ipvsctl::Handle;
use ipvsctl::codec::consts::{self, svc_attr};
use ipvsctl::codec::frame::{self, FrameBody, NLM_F_ACK};
use ipvsctl::codec::{reply, request};
use ipvsctl::model::{
    AddressFamily, ForwardMethod, Netmask, Protocol, RealServer, ServiceFlags, ServiceKey,
    VirtualServer,
};
use ipvsctl::sync::{DesiredState, ServiceCheck, Syncer, Verify};
use ipvsctl::unstable::{DumpSize, NlSocket};

use super::{DESTS, Ns, RawRead, dest_addr, note, open_socket, service_key, spread};

/// A hash of a few instructions per word (a 64 x 64 -> 128-bit multiply
/// folded), about what the syncer's own tables of services pay; the
/// standard SipHash would add its own cost to the in-place cases.
#[derive(Default)]
struct Fold(u64);

impl Hasher for Fold {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            let m = u128::from(self.0 ^ u64::from_ne_bytes(word)) * 0x9e37_79b9_7f4a_7c15;
            self.0 = (m as u64) ^ ((m >> 64) as u64);
        }
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// A map of services hashed with [`Fold`].
type Services<V> = HashMap<ServiceKey, V, BuildHasherDefault<Fold>>;

/// What this thread does with each data message of the dump.
#[derive(Clone, Copy)]
enum Look<'a> {
    Walk,
    Decode,
    /// Compared in place with the remembered services: the key read from
    /// the attributes, looked up, and each setting compared with the wire
    /// value, nothing built.
    Compare(&'a Services<VirtualServer>),
    /// `Compare`, with what a full-state resync must settle per service
    /// (`compare_own`, and `compare_all` with the desired state).
    Settle(&'a Settling<'a>),
}

/// What a full-state resync remembers of one service: its settings, its
/// real servers, whether it is owned, and the last turn that listed it.
struct Remembered {
    service: VirtualServer,
    destinations: Vec<RealServer>,
    owned: bool,
    listed: Cell<u32>,
}

/// The remembered services a `Settle` turn checks against, and the desired
/// state when it compares with it; `turn` tells this turn's listings from
/// earlier ones.
struct Settling<'a> {
    memory: Services<Remembered>,
    desired: Option<&'a DesiredState>,
    turn: Cell<u32>,
}

impl<'a> Settling<'a> {
    /// Every service of `base` remembered as owned and as desired.
    fn new(base: &DesiredState, desired: Option<&'a DesiredState>) -> Self {
        let memory = base
            .services()
            .iter()
            .map(|s| {
                let remembered = Remembered {
                    service: s.service().clone(),
                    destinations: s.destinations().to_vec(),
                    owned: true,
                    listed: Cell::new(u32::MAX),
                };
                (s.service().key, remembered)
            })
            .collect();
        Settling {
            memory,
            desired,
            turn: Cell::new(0),
        }
    }
}

/// Calls `each(type, value)` for every attribute in `b`, until one is
/// malformed.
fn attrs<'a>(mut b: &'a [u8], mut each: impl FnMut(u16, &'a [u8])) {
    while b.len() >= 4 {
        let len = usize::from(u16::from_ne_bytes([b[0], b[1]]));
        let kind = u16::from_ne_bytes([b[2], b[3]]) & 0x3fff;
        if len < 4 || len > b.len() {
            return;
        }
        each(kind, &b[4..len]);
        b = &b[len.next_multiple_of(4).min(b.len())..];
    }
}

/// Visits every attribute of the service nest of `body` (a generic-netlink
/// header, then attributes); the sum of their types and lengths.
fn walk(body: &[u8]) -> usize {
    let mut sum = 0;
    attrs(body.get(4..).unwrap_or_default(), |kind, value| {
        if kind == consts::cmd_attr::SERVICE {
            attrs(value, |k, v| sum += usize::from(k) + v.len());
        }
    });
    sum
}

/// Whether the service message `body` shows a service of `memory` with
/// exactly its settings.
fn same_in_place(body: &[u8], memory: &Services<VirtualServer>) -> bool {
    in_place(body, |key| memory.get(key).map(|vs| (vs, vs))).is_some()
}

/// Whether the service message `body` shows a service remembered as owned
/// (and, with a desired state, as desired) that was not listed before in
/// this turn; it is marked listed.
fn settled_in_place(body: &[u8], s: &Settling) -> bool {
    let Some(r) = in_place(body, |key| s.memory.get(key).map(|r| (r, &r.service))) else {
        return false;
    };
    if r.listed.replace(s.turn.get()) == s.turn.get() || !r.owned {
        return false;
    }
    s.desired.is_none_or(|desired| {
        desired.get(&r.service.key).is_some_and(|d| {
            *d.service() == r.service && d.destinations() == r.destinations.as_slice()
        })
    })
}

/// Reads the key of the service message `body` in place, finds it with
/// `find` and compares each setting with the wire value: what `find`
/// returned when all are the same.
fn in_place<'m, T>(
    body: &[u8],
    find: impl FnOnce(&ServiceKey) -> Option<(T, &'m VirtualServer)>,
) -> Option<T> {
    let (mut af, mut protocol, mut addr, mut port, mut fwmark) = (0u16, 0u16, &[][..], 0u16, 0u32);
    let (mut sched, mut flags, mut timeout, mut netmask, mut pe) =
        (&[][..], 0u32, 0u32, [0u8; 4], &[][..]);
    let u16_of = |v: &[u8]| v.get(..2).map_or(0, |b| u16::from_ne_bytes([b[0], b[1]]));
    let u32_of = |v: &[u8]| {
        v.get(..4)
            .map_or(0, |b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
    };
    attrs(body.get(4..).unwrap_or_default(), |kind, value| {
        if kind != consts::cmd_attr::SERVICE {
            return;
        }
        attrs(value, |k, v| match k {
            svc_attr::AF => af = u16_of(v),
            svc_attr::PROTOCOL => protocol = u16_of(v),
            svc_attr::ADDR => addr = v,
            svc_attr::PORT => port = u16::from_be(u16_of(v)),
            svc_attr::FWMARK => fwmark = u32_of(v),
            svc_attr::SCHED_NAME => sched = v,
            svc_attr::FLAGS => flags = u32_of(v),
            svc_attr::TIMEOUT => timeout = u32_of(v),
            svc_attr::NETMASK => {
                netmask = v
                    .get(..4)
                    .and_then(|b| b.try_into().ok())
                    .unwrap_or_default()
            }
            svc_attr::PE_NAME => pe = v,
            _ => {}
        });
    });
    let (family, ip) = match (af, addr.len()) {
        (2, 4..) => (
            AddressFamily::Inet,
            IpAddr::from([addr[0], addr[1], addr[2], addr[3]]),
        ),
        (10, 16..) => {
            let b: [u8; 16] = addr[..16].try_into().unwrap_or_default();
            (AddressFamily::Inet6, IpAddr::from(b))
        }
        _ => return None,
    };
    let key = if fwmark != 0 {
        ServiceKey::FwMark {
            mark: fwmark,
            family,
        }
    } else {
        ServiceKey::Addr {
            protocol: Protocol::from_raw(protocol),
            addr: SocketAddr::new(ip, port),
        }
    };
    let (found, vs) = find(&key)?;
    fn name(b: &[u8]) -> &[u8] {
        b.split(|&c| c == 0).next().unwrap_or_default()
    }
    let same = name(sched) == vs.scheduler.name().as_bytes()
        && ServiceFlags::from_kernel(flags) == vs.flags
        && timeout == vs.timeout
        && Netmask::from_wire(family, netmask) == vs.netmask
        && name(pe)
            == vs
                .persistence_engine
                .as_ref()
                .map_or(&b""[..], |p| p.0.as_bytes());
    same.then_some(found)
}

/// Looks at one data message; whether it was a valid service (for
/// `Compare`: one with the remembered settings).
fn look(how: Look, body: &[u8]) -> bool {
    match how {
        Look::Walk => black_box(walk(body)) > 0,
        Look::Decode => black_box(reply::virtual_server_from_body(body)).is_ok(),
        Look::Compare(memory) => same_in_place(black_box(body), memory),
        Look::Settle(settling) => settled_in_place(black_box(body), settling),
    }
}

/// Looks at every data message of `datagram`; (services, whether the dump
/// ended).
fn look_all(how: Look, datagram: &[u8]) -> (usize, bool) {
    let mut n = 0;
    for f in frame::frames(datagram) {
        match f.expect("frame").body {
            FrameBody::Data(body) => n += usize::from(look(how, body)),
            _ => return (n, true),
        }
    }
    (n, false)
}

/// The dump on one thread, each message looked at as it comes.
fn one_thread(sock: &mut NlSocket, req: &[u8], how: Look) -> usize {
    sock.send(req).expect("send");
    let mut n = 0;
    loop {
        let (got, done) = look_all(how, sock.recv().expect("recv"));
        n += got;
        if done {
            return n;
        }
    }
}

/// A thread that already runs and owns a socket: for each request sent to
/// it, it sends the request and hands every datagram of the answer over
/// whole, in a buffer that comes back to it; `None` ends the answer.
struct Standing {
    /// Dropped first, which ends the thread's loop.
    go: Option<mpsc::Sender<Vec<u8>>>,
    datagrams: mpsc::Receiver<Option<Vec<u8>>>,
    back: mpsc::Sender<Vec<u8>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Standing {
    fn new(mut sock: NlSocket) -> Standing {
        let (go, go_rx) = mpsc::channel::<Vec<u8>>();
        let (tx, datagrams) = mpsc::sync_channel::<Option<Vec<u8>>>(16);
        let (back, back_rx) = mpsc::channel::<Vec<u8>>();
        let thread = std::thread::spawn(move || {
            for req in go_rx {
                sock.send(&req).expect("send");
                loop {
                    let d = sock.recv().expect("recv");
                    let done = frame::frames(d)
                        .any(|f| !matches!(f.map(|f| f.body), Ok(FrameBody::Data(_))));
                    let mut buf = back_rx.try_recv().unwrap_or_default();
                    buf.clear();
                    buf.extend_from_slice(d);
                    tx.send(Some(buf)).expect("hand over");
                    if done {
                        tx.send(None).expect("end");
                        break;
                    }
                }
            }
        });
        Standing {
            go: Some(go),
            datagrams,
            back,
            thread: Some(thread),
        }
    }

    fn dump(&self, req: &[u8], how: Look) -> usize {
        let go = self.go.as_ref().expect("running");
        go.send(req.to_vec()).expect("wake");
        let mut n = 0;
        while let Some(d) = self.datagrams.recv().expect("datagram") {
            n += look_all(how, &d).0;
            let _ = self.back.send(d);
        }
        n
    }
}

impl Drop for Standing {
    fn drop(&mut self) {
        self.go = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Prints, for each case after the first, the median (min-max) of its
/// per-turn ratio to the first case, and each case's median time.
fn report(what: &str, names: &[&str], times: &[Vec<Duration>]) {
    let turns = times.first().map_or(0, Vec::len);
    for (i, name) in names.iter().enumerate() {
        let mut t: Vec<f64> = times[i].iter().map(Duration::as_secs_f64).collect();
        let Some((_, mid_t, _)) = spread(&mut t) else {
            continue;
        };
        let mut r: Vec<f64> = times[i]
            .iter()
            .zip(&times[0])
            .map(|(a, b)| a.as_secs_f64() / b.as_secs_f64())
            .collect();
        if let Some((lo, mid, hi)) = spread(&mut r) {
            note(format!(
                "{what}: {name} / {}, in {turns} turns: median {mid:.2} (min {lo:.2}, max {hi:.2}); {name} median {:.3?}",
                names[0],
                Duration::from_secs_f64(mid_t)
            ));
        }
    }
}

/// The service-check bounds at `n` services (table already synced).
/// The one-thread cases read on the floor's own socket, with its request.
pub(super) fn check(
    ns: &Ns,
    n: usize,
    raw: &mut RawRead,
    syncer: &mut Syncer<&Handle>,
    base: &DesiredState,
) {
    let turns: usize = super::env_num("IPVSCTL_BENCH_CHECK_TURNS", 15);
    let (sock, req) = (&mut raw.services, raw.service_dump.as_slice());
    let standing = Standing::new(open_socket(&ns.netns(), DumpSize::Large).expect("socket"));
    syncer.options_mut().service_check = ServiceCheck::Dump;
    let memory: Services<VirtualServer> = base
        .services()
        .iter()
        .map(|s| (s.service().key, s.service().clone()))
        .collect();
    let own = Settling::new(base, None);
    let all = Settling::new(base, Some(base));
    let names = [
        "raw",
        "walk",
        "decode",
        "compare",
        "walk_2",
        "decode_2",
        "sync",
        "compare_own",
        "compare_all",
        "thread",
    ];
    let mut times = vec![Vec::new(); names.len()];
    for turn in 0..turns {
        for k in 0..names.len() {
            let case = (turn + k) % names.len();
            let t = Instant::now();
            let got = match case {
                0 => super::raw_dump(sock, req),
                1 => one_thread(sock, req, Look::Walk),
                2 => one_thread(sock, req, Look::Decode),
                3 => one_thread(sock, req, Look::Compare(&memory)),
                4 => standing.dump(req, Look::Walk),
                5 => standing.dump(req, Look::Decode),
                9 => std::thread::scope(|s| s.spawn(|| black_box(n)).join()).expect("empty thread"),
                7 | 8 => {
                    let settling = if case == 7 { &own } else { &all };
                    settling.turn.set(turn as u32);
                    one_thread(sock, req, Look::Settle(settling))
                }
                _ => {
                    let r = syncer.sync(base, Verify::Services).expect("resync");
                    assert_eq!(r.writes_sent, 0);
                    n
                }
            };
            times[case].push(t.elapsed());
            assert_eq!(got, n, "{}", names[case]);
        }
    }
    syncer.options_mut().service_check = ServiceCheck::Auto;
    report(&format!("{n}x{DESTS} service check bounds"), &names, &times);
}

/// The one-change bounds at `n` services (table synced, `desired` its
/// state with no changes recorded).
pub(super) fn one_change(
    ns: &Ns,
    n: usize,
    h: &Handle,
    syncer: &mut Syncer<&Handle>,
    desired: &mut DesiredState,
) {
    let turns: usize = super::env_num("IPVSCTL_BENCH_INCR_PAIRS", 1001);
    let mid = n / 2;
    let key: ServiceKey = service_key(mid, false);
    let server = |w: u32| {
        RealServer::new(dest_addr(mid, 0))
            .with_weight(w)
            .with_forward(ForwardMethod::Masquerade)
    };
    let family = h.family_id();
    let mut sock = open_socket(&ns.netns(), DumpSize::Large).expect("socket");
    let encoded = [2u32, 1].map(|w| {
        let mut b = Vec::new();
        frame::encode_request(
            &mut b,
            &request::set_dest(&key, &server(w)).expect("valid"),
            family,
            1,
            NLM_F_ACK,
        )
        .expect("encode");
        b
    });
    let mut kept = Vec::with_capacity(256);
    let mut seq = 1u32;
    let ack = |sock: &mut NlSocket, bytes: &[u8]| {
        sock.send(bytes).expect("send");
        let mut got = 0;
        while got == 0 {
            for f in frame::frames(sock.recv().expect("recv")) {
                match f.expect("frame").body {
                    FrameBody::Error(e) if e.is_ack() => got += 1,
                    other => panic!("not an ACK: {other:?}"),
                }
            }
        }
    };
    let names = ["raw", "encode", "handle", "sync"];
    let mut times = vec![Vec::new(); names.len()];
    let mut weight = [1u32; 4];
    for turn in 0..turns {
        for k in 0..names.len() {
            let case = (turn + k) % names.len();
            weight[case] = 3 - weight[case];
            let w = weight[case];
            let t = Instant::now();
            match case {
                0 => ack(&mut sock, &encoded[(w == 1) as usize]),
                1 => {
                    kept.clear();
                    seq = seq.wrapping_add(1);
                    let msg = request::set_dest(&key, &server(w)).expect("valid");
                    frame::encode_request(&mut kept, &msg, family, seq, NLM_F_ACK).expect("encode");
                    ack(&mut sock, &kept);
                }
                2 => h.update_destination(&key, &server(w)).expect("update"),
                _ => {
                    desired
                        .upsert_destinations(&key, [server(w)])
                        .expect("valid change");
                    let r = syncer
                        .sync_changes(desired, Verify::None)
                        .expect("sync changes");
                    assert!(r.writes_sent == 1 && r.reads_sent == 0 && r.is_ok());
                }
            }
            times[case].push(t.elapsed());
        }
    }
    // Back to the table's state: weight 1 everywhere.
    if weight[3] != 1 {
        desired
            .upsert_destinations(&key, [server(1)])
            .expect("valid change");
        assert!(
            syncer
                .sync_changes(desired, Verify::None)
                .expect("back")
                .is_ok()
        );
    }
    h.update_destination(&key, &server(1)).expect("back");
    report(&format!("{n}x{DESTS} one change bounds"), &names, &times);
}
