//! Which namespace a handle works in, and whose answers it believes, against
//! a real kernel: every socket of a handle (and of its syncers) is made in the
//! namespace the handle was opened in, even when the name or the thread
//! it was opened from now leads elsewhere; and datagrams that another
//! process sends to the handle's port are never taken for the kernel's
//! answers.

mod support;

use std::fs::File;
use std::io;
use std::net::SocketAddr;

use ipvsctl::codec::{RequestKind, request};
use ipvsctl::model::{RealServer, Scheduler, ServiceKey, VirtualServer};
use ipvsctl::netlink::netns::{NetNs, run_in, socket_in};
use ipvsctl::sync::{DesiredState, SyncOptions, Syncer, Verify};
use ipvsctl::{Error, Handle, HandleOptions};
use support::TestNetns;

fn sa(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn service(addr: &str) -> VirtualServer {
    VirtualServer::new(ServiceKey::tcp(sa(addr))).with_scheduler(Scheduler::RoundRobin)
}

fn keys(h: &Handle) -> Vec<ServiceKey> {
    let mut keys: Vec<_> = h
        .list_services()
        .unwrap()
        .into_iter()
        .map(|s| s.service.key)
        .collect();
    keys.sort_by_key(|k| k.to_string());
    keys
}

/// 70 services on `10.0.<net>.2-71`: enough (64 or more) for a syncer to
/// read their real servers over several sockets.
fn services(net: u8) -> Vec<VirtualServer> {
    (2..72)
        .map(|i| service(&format!("10.0.{net}.{i}:80")))
        .collect()
}

/// `services`, each with one real server.
fn desired(services: &[VirtualServer]) -> DesiredState {
    let mut d = DesiredState::new();
    for vs in services {
        d.insert(vs.clone(), [RealServer::new(sa("10.244.0.1:8080"))])
            .unwrap();
    }
    d
}

/// The keys of `first` and `more`, sorted as [`keys`] sorts them.
fn all_keys(first: &VirtualServer, more: &[VirtualServer]) -> Vec<ServiceKey> {
    let mut want: Vec<_> = more.iter().map(|vs| vs.key).collect();
    want.push(first.key);
    want.sort_by_key(|k| k.to_string());
    want
}

/// A full sync of `desired`, which the table already holds, by a new syncer
/// that adopts those services and reads real servers over three sockets (two
/// opened now, from the handle's namespace): it must find nothing to write.
/// A reader in another namespace would find no real servers (the kernel
/// dumps those of a missing service as none) and add them again.
fn sync_with_readers(h: &Handle, desired: &DesiredState) -> ipvsctl::Result<()> {
    let options = SyncOptions::default().with_read_sockets(3);
    let mut syncer = Syncer::with_options(h, options);
    syncer.adopt(desired.services().iter().map(|d| d.service().key));
    let report = syncer.sync(desired, Verify::Full)?;
    assert_eq!(report.writes_sent, 0, "{report:?}");
    assert!(report.is_ok(), "{report:?}");
    Ok(())
}

/// The services in the namespace behind `ns` (read by a handle opened there).
fn table_of(ns: &NetNs) -> Vec<ServiceKey> {
    keys(&Handle::open(ns, &HandleOptions::new()).expect("handle on a kept namespace"))
}

#[test]
fn a_recreated_named_namespace_does_not_redirect_an_open_handle() {
    let ns = TestNetns::with_ipvs();
    // Keeps the original namespace reachable after its name goes.
    let original = File::open(ns.path()).expect("open the namespace file");
    let h = Handle::open(&NetNs::named(ns.name()), &HandleOptions::new()).expect("handle");
    let first = service("10.0.0.1:80");
    h.add_service(&first).unwrap();

    // `ip netns del NAME; ip netns add NAME`: the name now leads to a new,
    // empty namespace.
    support::run("ip", &["netns", "del", ns.name()]);
    support::run("ip", &["netns", "add", ns.name()]);
    ns.run("ip", &["link", "set", "lo", "up"]);

    // The first table-wide dump opens a socket now: it must still read the
    // original namespace.
    assert_eq!(keys(&h), vec![first.key], "read the wrong namespace");

    // A syncer's write socket is opened on its first write.
    let more = services(0);
    let report = Syncer::new(&h)
        .sync(&desired(&more), Verify::Services)
        .unwrap();
    assert!(report.is_ok(), "{report:?}");
    // Extra reader sockets are opened for a full read.
    sync_with_readers(&h, &desired(&more)).unwrap();

    let kept = NetNs::fd(original.into());
    let want = all_keys(&first, &more);
    assert_eq!(table_of(&kept), want, "the original namespace");
    assert_eq!(
        table_of(&NetNs::named(ns.name())),
        vec![],
        "the namespace that took over the name"
    );
    // The handle reports the namespace it works in: the original.
    let pinned = h.netns();
    let kept = kept.pin().unwrap();
    assert_eq!((pinned.dev(), pinned.inode()), (kept.dev(), kept.inode()));
    let now = NetNs::named(ns.name()).pin().unwrap();
    assert_ne!(pinned.inode(), now.inode());
    let shown = h.netns().to_string();
    assert_eq!(
        shown,
        format!("/run/netns/{} (net:[{}])", ns.name(), kept.inode())
    );
}

#[test]
fn a_handle_on_the_current_namespace_stays_where_it_was_opened() {
    let a = TestNetns::with_ipvs();
    let b = TestNetns::with_ipvs();
    let in_a = NetNs::path(a.path());
    let in_b = NetNs::path(b.path());
    // Opened on a thread that is in A.
    let h = run_in(&in_a, || Handle::new().map_err(io::Error::other)).expect("handle in A");
    let first = service("10.0.1.1:80");
    h.add_service(&first).unwrap();

    // First table-wide dump and first syncer write, from a thread in B.
    let listed = run_in(&in_b, || Ok(keys(&h))).unwrap();
    assert_eq!(listed, vec![first.key], "read the wrong namespace");
    let more = services(1);
    let report = run_in(&in_b, || {
        Syncer::new(&h)
            .sync(&desired(&more), Verify::Services)
            .map_err(io::Error::other)
    })
    .unwrap();
    assert!(report.is_ok(), "{report:?}");
    run_in(&in_b, || {
        sync_with_readers(&h, &desired(&more)).map_err(io::Error::other)
    })
    .unwrap();

    assert_eq!(table_of(&in_a), all_keys(&first, &more), "namespace A");
    assert_eq!(table_of(&in_b), vec![], "namespace B");
}

/// `NETLINK_GENERIC` in `/proc/net/netlink`.
const NETLINK_GENERIC: u32 = 16;
const NLMSG_ERROR: u16 = 2;
const NLM_F_CAPPED: u16 = 0x100;
const ECONNREFUSED: i32 = 111;

/// The port ids of the user-space generic-netlink sockets of namespace `ns`
/// (`/proc/net/netlink` as a process inside it sees it; the kernel's own
/// sockets have port 0).
fn generic_ports(ns: &TestNetns) -> Vec<u32> {
    let table = ns.run("cat", &["/proc/net/netlink"]);
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let mut cols = line.split_whitespace().skip(1);
            let protocol: u32 = cols.next()?.parse().ok()?;
            let port: u32 = cols.next()?.parse().ok()?;
            (protocol == NETLINK_GENERIC && port != 0).then_some(port)
        })
        .collect()
}

/// An `NLMSG_ERROR` with code 0 (an ACK) for request `seq`, claiming to come
/// from the kernel (header port 0), echoing a capped request header.
fn forged_ack(seq: u32) -> Vec<u8> {
    let mut b = Vec::with_capacity(36);
    b.extend_from_slice(&36u32.to_ne_bytes());
    b.extend_from_slice(&NLMSG_ERROR.to_ne_bytes());
    b.extend_from_slice(&NLM_F_CAPPED.to_ne_bytes());
    b.extend_from_slice(&seq.to_ne_bytes());
    b.extend_from_slice(&0u32.to_ne_bytes());
    b.extend_from_slice(&0i32.to_ne_bytes());
    // The echoed request header.
    b.extend_from_slice(&20u32.to_ne_bytes());
    b.extend_from_slice(&0x20u16.to_ne_bytes());
    b.extend_from_slice(&5u16.to_ne_bytes());
    b.extend_from_slice(&seq.to_ne_bytes());
    b.extend_from_slice(&0u32.to_ne_bytes());
    b
}

#[test]
fn answers_forged_by_another_socket_are_not_taken() {
    let ns = TestNetns::with_ipvs();
    let nsid = NetNs::path(ns.path());
    let h = Handle::open(&nsid, &HandleOptions::new()).expect("handle");
    let ports = generic_ports(&ns);
    assert_eq!(ports.len(), 1, "the handle's socket only: {ports:?}");
    let port = ports[0];
    ns.ipvsadm("-A -t 10.0.2.1:80 -s rr");

    // Another process's socket in the namespace sends "the kernel's" ACKs
    // for the sequence numbers the handle will use next (the family lookup
    // was 1).
    let mut forger = socket_in(&nsid, netlink_sys::protocols::NETLINK_GENERIC).unwrap();
    forger.bind_auto().unwrap();
    let to = netlink_sys::SocketAddr::new(port, 0);
    let mut refused = 0;
    let mut delivered = 0;
    for seq in 2..=33 {
        match forger.send_to(&forged_ack(seq), &to, 0) {
            Ok(_) => delivered += 1,
            Err(e) if e.raw_os_error() == Some(ECONNREFUSED) => refused += 1,
            Err(e) => panic!("forger's send: {e}"),
        }
    }

    // Deleting a service that does not exist is the kernel's ESRCH, not the
    // forged ACK.
    let missing = ServiceKey::tcp(sa("10.0.2.9:80"));
    let deleted = h.delete_service(&missing);
    assert!(
        matches!(deleted, Err(Error::ServiceNotFound { .. })),
        "took a forged ACK: {deleted:?} ({delivered} forged datagrams delivered)"
    );
    // A dump of the table is the kernel's, not an empty forged answer.
    let dump = h
        .request(request::dump_services(), RequestKind::Dump)
        .unwrap();
    assert_eq!(dump.len(), 1, "took a forged end of dump");
    // The kernel refused them all: the handle's socket takes datagrams from
    // the kernel only.
    assert_eq!((delivered, refused), (0, 32));
    // And the port is still usable for real answers.
    assert!(matches!(
        h.get_service(&missing),
        Err(Error::ServiceNotFound { .. })
    ));
}
