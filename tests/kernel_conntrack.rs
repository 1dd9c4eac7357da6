//! Connection-tracking cleanup on the real kernel, with real traffic
//! through IPVS (`tests/support/traffic.rs`'s lab: client, router running
//! IPVS with `net.ipv4.vs.conntrack=1` and `expire_nodest_conn=1` as
//! kube-proxy sets them, backends): `ipvsctl::conntrack` reads the entries
//! the traffic made and deletes exactly those of a service or of one real
//! server, in IPv4, IPv6 and SCTP; and a UDP client that keeps its source
//! port reaches the new real server after the old one was replaced and its
//! entries deleted.
//!
//! IPVS registers no conntrack hooks of its own (but for FTP services): a
//! namespace has conntrack entries only once something needs them. Like a
//! node that runs kube-proxy's iptables or nftables rules, the router gets
//! one nftables rule that uses conntrack (Debian package nftables).
//!
//! Runs in the VM through the cargo runner (`cargo test --test kernel_conntrack`).

mod support;

use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::time::Duration;

use ipvsctl::conntrack::{Conntrack, ConntrackError, Entry, Filter};
use ipvsctl::model::{
    AddressFamily, ForwardMethod, Protocol, RealServer, ServiceKey, VirtualServer,
};
use ipvsctl::netlink::netns::run_in;
use ipvsctl::sync::{DesiredState, SyncOptions, Syncer, Verify};
use ipvsctl::{NetNs, Timeout};
use support::traffic::{BPORT, Lab, Proto, REQUEST, VPORT, vip};

/// How long the scenario client waits for each answer.
const ANSWER_WAIT: Duration = Duration::from_millis(300);
/// How many datagrams the scenario client sends after a change.
const TRIES: usize = 6;

/// A lab with `n` backends whose router tracks connections the way a
/// kube-proxy node does.
fn lab(n: usize) -> Lab {
    support::print_kernel_once();
    let lab = Lab::new(n, BPORT, false);
    lab.router.run(
        "sysctl",
        &[
            "-qw",
            "net.ipv4.vs.conntrack=1",
            "net.ipv4.vs.expire_nodest_conn=1",
        ],
    );
    lab.router.run(
        "nft",
        &["add table inet track; \
           add chain inet track pre { type filter hook prerouting priority 0 ; } ; \
           add rule inet track pre ct state new counter"],
    );
    lab
}

fn conntrack(lab: &Lab) -> Conntrack {
    Conntrack::new()
        .netns(lab.handle.netns().clone())
        .timeout(Timeout::new(Duration::from_secs(5)).expect("timeout"))
}

fn key(proto: Proto, family: AddressFamily, port: u16) -> ServiceKey {
    let addr = SocketAddr::new(vip(family), port);
    match proto {
        Proto::Tcp => ServiceKey::tcp(addr),
        Proto::Udp => ServiceKey::udp(addr),
        Proto::Sctp => ServiceKey::sctp(addr),
    }
}

/// A masqueraded round-robin service on `key` to the given backends.
fn program(lab: &Lab, key: ServiceKey, backends: &[usize]) {
    let dests: Vec<(usize, u32)> = backends.iter().map(|&i| (i, 1)).collect();
    lab.program(
        &VirtualServer::new(key),
        &dests,
        BPORT,
        ForwardMethod::Masquerade,
    );
}

/// The reply sources of `entries`, sorted (which real servers they map to).
fn reply_sources(entries: &[Entry]) -> Vec<SocketAddr> {
    let mut v: Vec<SocketAddr> = entries
        .iter()
        .map(|e| SocketAddr::new(e.reply.src, e.reply.src_port))
        .collect();
    v.sort();
    v
}

/// (a) Deleting a UDP service's entries leaves another UDP service's and a
/// TCP service's entries alone; `entries` shows them before and after.
#[test]
fn delete_by_service_removes_only_that_service() {
    let lab = lab(1);
    let fam = AddressFamily::Inet;
    let (udp, other, tcp) = (
        key(Proto::Udp, fam, VPORT),
        key(Proto::Udp, fam, VPORT + 1),
        key(Proto::Tcp, fam, VPORT),
    );
    for k in [udp, other, tcp] {
        program(&lab, k, &[0]);
    }
    for (proto, port) in [
        (Proto::Udp, VPORT),
        (Proto::Udp, VPORT + 1),
        (Proto::Tcp, VPORT),
    ] {
        for _ in 0..3 {
            let to = SocketAddr::new(vip(fam), port);
            assert_eq!(lab.request(proto, to), "backend-0");
        }
    }
    let ct = conntrack(&lab);
    let f_udp = Filter::service(&udp).expect("filter");
    let f_other = Filter::service(&other).expect("filter");
    let f_tcp = Filter::service(&tcp).expect("filter");
    let before = ct.entries(&f_udp).expect("entries");
    assert_eq!(before.len(), 3, "{before:#?}");
    let rs = Lab::backend_addr(0, BPORT, fam);
    assert_eq!(reply_sources(&before), vec![rs; 3]);
    assert!(before.iter().all(|e| e.id.is_some() && e.timeout.is_some()));
    assert_eq!(ct.entries(&f_other).expect("entries").len(), 3);
    assert_eq!(ct.entries(&f_tcp).expect("entries").len(), 3);

    // A TCP filter is refused for deletion unless allowed, before anything
    // is sent.
    assert!(matches!(
        ct.delete(&f_tcp),
        Err(ConntrackError::InvalidFilter {
            field: "protocol",
            ..
        })
    ));
    let report = ct.delete(&f_udp).expect("delete");
    println!("delete by service: {report:?}");
    assert!(report.is_ok(), "{report:?}");
    assert_eq!(report.total.found, 3);
    assert_eq!(report.total.deleted + report.total.already_gone, 3);
    assert_eq!(report.per_filter[0].deleted, report.total.deleted);
    assert!(ct.entries(&f_udp).expect("entries").is_empty());
    assert_eq!(ct.entries(&f_other).expect("entries").len(), 3);
    assert_eq!(ct.entries(&f_tcp).expect("entries").len(), 3);
}

/// (b), (c) Deleting by real server removes only the entries whose reply
/// source is that server, in `family`.
fn delete_by_real_server(family: AddressFamily) {
    let lab = lab(2);
    let k = key(Proto::Udp, family, VPORT);
    program(&lab, k, &[0, 1]);
    let round = lab.spread(Proto::Udp, family, 4);
    assert_eq!(round.seen.len(), 2, "{round:?}");
    let ct = conntrack(&lab);
    let (a, b) = (
        Lab::backend_addr(0, BPORT, family),
        Lab::backend_addr(1, BPORT, family),
    );
    let svc = Filter::service(&k).expect("filter");
    assert_eq!(
        reply_sources(&ct.entries(&svc).expect("entries")),
        vec![a, a, b, b]
    );
    let report = ct
        .delete(&Filter::real_server(&k, a).expect("filter"))
        .expect("delete");
    println!("delete by real server ({family:?}): {report:?}");
    assert!(report.is_ok(), "{report:?}");
    assert_eq!(report.total.found, 2);
    assert_eq!(report.total.deleted, 2);
    assert_eq!(
        reply_sources(&ct.entries(&svc).expect("entries")),
        vec![b, b]
    );
}

#[test]
fn delete_by_real_server_ipv4() {
    delete_by_real_server(AddressFamily::Inet);
}

#[test]
fn delete_by_real_server_ipv6() {
    delete_by_real_server(AddressFamily::Inet6);
}

/// (d) SCTP entries of a service, where the guest kernel has SCTP.
#[test]
fn delete_sctp_service() {
    let mut lab = lab(2);
    if !support::traffic::modprobe("sctp") || lab.serve_sctp(BPORT).is_err() {
        println!(
            "SKIPPED: no SCTP in this kernel ({})",
            support::kernel_release()
        );
        return;
    }
    let fam = AddressFamily::Inet;
    let k = key(Proto::Sctp, fam, VPORT);
    program(&lab, k, &[0, 1]);
    let round = lab.spread(Proto::Sctp, fam, 2);
    assert_eq!(round.seen.len(), 2, "{round:?}");
    let ct = conntrack(&lab);
    let a = Lab::backend_addr(0, BPORT, fam);
    let svc = Filter::service(&k).expect("filter");
    let before = ct.entries(&svc).expect("entries");
    assert_eq!(before.len(), 2, "{before:#?}");
    assert!(before.iter().all(|e| e.orig.protocol == Protocol::Sctp));
    let report = ct
        .delete(&Filter::real_server(&k, a).expect("filter"))
        .expect("delete");
    assert_eq!(
        (report.total.found, report.total.deleted),
        (1, 1),
        "{report:?}"
    );
    let report = ct.delete(&svc).expect("delete");
    assert_eq!(
        (report.total.found, report.total.deleted),
        (1, 1),
        "{report:?}"
    );
    assert!(ct.entries(&svc).expect("entries").is_empty());
}

/// A UDP client that keeps one source port, in the client namespace.
struct StickyClient {
    sock: UdpSocket,
    to: SocketAddr,
}

impl StickyClient {
    fn new(lab: &Lab, to: SocketAddr, port: u16) -> StickyClient {
        let any: IpAddr = if to.is_ipv4() {
            "0.0.0.0".parse().expect("literal")
        } else {
            "::".parse().expect("literal")
        };
        let sock = run_in(&NetNs::path(lab.client.path()), || {
            UdpSocket::bind(SocketAddr::new(any, port))
        })
        .expect("client socket");
        sock.set_read_timeout(Some(ANSWER_WAIT)).expect("timeout");
        StickyClient { sock, to }
    }

    /// One datagram; the name that answered, or `None` if nothing came
    /// within [`ANSWER_WAIT`].
    fn ask(&self) -> Option<String> {
        self.sock.send_to(REQUEST, self.to).expect("send");
        let mut buf = [0u8; 64];
        // Late answers to earlier datagrams are read first; the wait per
        // receive is bounded, and so is their number.
        self.sock
            .recv_from(&mut buf)
            .ok()
            .map(|(n, _)| String::from_utf8_lossy(&buf[..n]).into_owned())
    }

    /// The first answer to datagrams sent until one comes (at most
    /// [`TRIES`]): a flow's very first datagram can be lost while the
    /// router resolves its neighbours (IPv6 especially, under load).
    /// Answers that come late to those datagrams are read and dropped, so
    /// that what follows sees only answers to its own datagrams.
    fn first_answer(&self) -> Option<String> {
        let first = (0..4 * TRIES).find_map(|_| self.ask());
        let mut buf = [0u8; 64];
        while self.sock.recv_from(&mut buf).is_ok() {}
        first
    }

    /// [`TRIES`] datagrams: what answered each.
    fn tries(&self) -> Vec<Option<String>> {
        (0..TRIES).map(|_| self.ask()).collect()
    }
}

/// Replaces real server `from` of `k` by `to` (delete, then add).
fn replace(lab: &Lab, k: &ServiceKey, family: AddressFamily, from: usize, to: usize) {
    let old = Lab::backend_addr(from, BPORT, family);
    lab.handle
        .delete_destination(k, old)
        .expect("delete real server");
    lab.add_dests(k, family, &[(to, 1)], BPORT, ForwardMethod::Masquerade);
}

/// (f) The replacement scenario in `family`: without cleanup, what a client
/// that keeps its source port gets is recorded; with
/// `delete(real server)` after the IPVS change, its next datagrams reach
/// the new real server.
fn replacement(family: AddressFamily) {
    let lab = lab(2);
    let ct = conntrack(&lab);
    let release = support::kernel_release();
    let (without, with) = (
        key(Proto::Udp, family, VPORT),
        key(Proto::Udp, family, VPORT + 1),
    );
    program(&lab, without, &[0]);
    program(&lab, with, &[0]);
    let a = Lab::backend_addr(0, BPORT, family);

    let c1 = StickyClient::new(&lab, SocketAddr::new(vip(family), VPORT), 41_001);
    assert_eq!(c1.first_answer().as_deref(), Some("backend-0"));
    replace(&lab, &without, family, 0, 1);
    let seen = c1.tries();
    println!("kernel {release} {family:?}: without cleanup, after the replacement: {seen:?}");

    let c2 = StickyClient::new(&lab, SocketAddr::new(vip(family), VPORT + 1), 41_002);
    assert_eq!(c2.first_answer().as_deref(), Some("backend-0"));
    replace(&lab, &with, family, 0, 1);
    let report = ct
        .delete(&Filter::real_server(&with, a).expect("filter"))
        .expect("delete");
    println!("kernel {release} {family:?}: cleanup {report:?}");
    // Kernels since 5.9 expire the IPVS connections of a deleted real
    // server at once when expire_nodest_conn=1, and an expiring IPVS
    // connection takes its conntrack entry along: the entry may be gone
    // before the dump. Either way none may be left, and none may fail.
    assert!(report.is_ok(), "{report:?}");
    assert!(report.total.found <= 1, "{report:?}");
    assert_eq!(
        report.total.deleted + report.total.already_gone,
        report.total.found,
        "{report:?}"
    );
    let left = ct
        .entries(&Filter::real_server(&with, a).expect("filter"))
        .expect("entries");
    assert!(left.is_empty(), "{left:#?}");
    let seen = c2.tries();
    println!("kernel {release} {family:?}: with cleanup, after the replacement: {seen:?}");
    assert!(
        !seen.iter().any(|s| s.as_deref() == Some("backend-0")),
        "the removed real server answered: {seen:?}"
    );
    assert_eq!(
        seen.last().cloned().flatten().as_deref(),
        Some("backend-1"),
        "the new real server does not answer: {seen:?}"
    );
    let b = Lab::backend_addr(1, BPORT, family);
    let now = ct
        .entries(&Filter::service(&with).expect("filter"))
        .expect("entries");
    assert_eq!(reply_sources(&now), vec![b], "{now:#?}");
}

#[test]
fn replacement_ipv4_udp() {
    replacement(AddressFamily::Inet);
}

#[test]
fn replacement_ipv6_udp() {
    replacement(AddressFamily::Inet6);
}

/// A syncer with `SyncOptions::conntrack_cleanup` deletes, after its IPVS
/// writes, the entries of the UDP real server it removed and of the UDP
/// service it deleted, and reports them. Run with the kernel's default
/// `expire_nodest_conn=0`, where the kernel itself leaves the entries of a
/// deleted service in place (they would last until their timeout).
#[test]
fn a_syncer_cleans_up_after_the_udp_real_servers_and_services_it_deletes() {
    let lab = lab(3);
    lab.router
        .run("sysctl", &["-qw", "net.ipv4.vs.expire_nodest_conn=0"]);
    let family = AddressFamily::Inet;
    let (kept, dropped) = (
        key(Proto::Udp, family, VPORT),
        key(Proto::Udp, family, VPORT + 1),
    );
    let backend = |i| {
        RealServer::new(Lab::backend_addr(i, BPORT, family)).with_forward(ForwardMethod::Masquerade)
    };
    let mut desired = DesiredState::new();
    desired
        .insert(VirtualServer::new(kept), [backend(0)])
        .expect("desired");
    desired
        .insert(VirtualServer::new(dropped), [backend(1)])
        .expect("desired");
    let options = SyncOptions::default().with_conntrack_cleanup(true);
    let mut syncer = Syncer::with_options(&lab.handle, options);
    let report = syncer.sync(&desired, Verify::Full).expect("sync");
    assert!(report.is_ok() && report.conntrack.is_none(), "{report:?}");

    let c1 = StickyClient::new(&lab, SocketAddr::new(vip(family), VPORT), 41_011);
    let c2 = StickyClient::new(&lab, SocketAddr::new(vip(family), VPORT + 1), 41_012);
    assert_eq!(c1.first_answer().as_deref(), Some("backend-0"));
    assert_eq!(c2.first_answer().as_deref(), Some("backend-1"));
    let ct = conntrack(&lab);
    let of_old = Filter::real_server(&kept, backend(0).addr).expect("filter");
    let of_dropped = Filter::service(&dropped).expect("filter");
    assert_eq!(ct.entries(&of_old).expect("entries").len(), 1);
    assert_eq!(ct.entries(&of_dropped).expect("entries").len(), 1);

    // Real server 0 is replaced by 2, the second service goes.
    desired
        .upsert(VirtualServer::new(kept), [backend(2)])
        .expect("desired");
    desired.remove(&dropped).expect("desired");
    let report = syncer.sync(&desired, Verify::Full).expect("sync");
    println!(
        "kernel {}: {:?}",
        support::kernel_release(),
        report.conntrack
    );
    let cleanup = report.conntrack.as_ref().expect("a cleanup");
    assert_eq!(cleanup.filters, [of_old.clone(), of_dropped.clone()]);
    let deletes = cleanup.result.as_ref().expect("the cleanup ran");
    assert!(deletes.is_ok(), "{deletes:?}");
    // The deleted service's entry is still there for the syncer to delete.
    assert_eq!(deletes.per_filter[1].deleted, 1, "{deletes:?}");
    for counts in &deletes.per_filter {
        assert_eq!(
            counts.deleted + counts.already_gone,
            counts.found,
            "{deletes:?}"
        );
    }
    assert!(report.is_ok(), "{report:?}");
    assert!(ct.entries(&of_old).expect("entries").is_empty());
    assert!(ct.entries(&of_dropped).expect("entries").is_empty());

    // Nothing was deleted by the next sync: no cleanup.
    let report = syncer.sync(&desired, Verify::Full).expect("sync");
    assert!(report.conntrack.is_none(), "{report:?}");
}

/// (f) for SCTP, where the kernel has it: a client that opens its
/// associations from one source port, as the UDP one keeps its port.
/// Without cleanup, what its next associations reach is recorded; with
/// `delete(real server)` after the IPVS change, they reach the new real
/// server.
#[test]
fn replacement_sctp() {
    let mut lab = lab(2);
    if !support::traffic::modprobe("sctp") || lab.serve_sctp(BPORT).is_err() {
        println!(
            "SKIPPED: no SCTP in this kernel ({})",
            support::kernel_release()
        );
        return;
    }
    // An INIT from a port whose last association is still in the IPVS
    // table (CLOSED) with its conntrack entry is dropped, and the entry
    // expired, so that the next INIT starts afresh (`conn_reuse_mode`).
    // The client sends the INIT again after rto_initial, 3 s by default
    // and past `wait`; at 400 ms the second INIT falls inside the try.
    lab.client.run(
        "sysctl",
        &["-qw", "net.sctp.rto_min=200", "net.sctp.rto_initial=400"],
    );
    let family = AddressFamily::Inet;
    let ct = conntrack(&lab);
    let release = support::kernel_release();
    let (without, with) = (
        key(Proto::Sctp, family, VPORT),
        key(Proto::Sctp, family, VPORT + 1),
    );
    program(&lab, without, &[0]);
    program(&lab, with, &[0]);
    let a = Lab::backend_addr(0, BPORT, family);
    let wait = Duration::from_secs(2);
    // Each try's answer, or the kind of error that ended it.
    let ask = |k: &ServiceKey, port: u16| -> Vec<Result<String, io::ErrorKind>> {
        let ServiceKey::Addr { addr, .. } = *k else {
            unreachable!("an address service")
        };
        let from = SocketAddr::new("0.0.0.0".parse().expect("literal"), port);
        (0..5)
            .map(|_| {
                lab.sctp_request_from(addr, from, wait)
                    .map_err(|e| e.kind())
            })
            .collect()
    };

    // Only the answers count: a try can still fail in a loaded guest.
    let answered = |seen: &[Result<String, io::ErrorKind>], name: &str| {
        seen.iter().any(|s| s.as_deref() == Ok(name))
    };
    let seen = ask(&without, 46_001);
    assert!(answered(&seen, "backend-0"), "{seen:?}");
    replace(&lab, &without, family, 0, 1);
    let seen = ask(&without, 46_001);
    println!("kernel {release} SCTP: without cleanup, after the replacement: {seen:?}");

    let seen = ask(&with, 46_002);
    assert!(answered(&seen, "backend-0"), "{seen:?}");
    replace(&lab, &with, family, 0, 1);
    let report = ct
        .delete(&Filter::real_server(&with, a).expect("filter"))
        .expect("delete");
    println!("kernel {release} SCTP: cleanup {report:?}");
    assert!(report.is_ok(), "{report:?}");
    assert_eq!(
        report.total.deleted + report.total.already_gone,
        report.total.found,
        "{report:?}"
    );
    assert!(
        ct.entries(&Filter::real_server(&with, a).expect("filter"))
            .expect("entries")
            .is_empty()
    );
    let seen = ask(&with, 46_002);
    println!("kernel {release} SCTP: with cleanup, after the replacement: {seen:?}");
    assert!(
        !answered(&seen, "backend-0"),
        "the removed real server answered: {seen:?}"
    );
    assert!(
        answered(&seen, "backend-1"),
        "the new real server does not answer: {seen:?}"
    );
}
