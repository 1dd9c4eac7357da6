//! Which namespace a handle works in, against a real kernel: every socket of
//! a handle (and of its syncers) is made in the namespace the handle was
//! opened in, even when the name or the thread it was opened from now leads
//! elsewhere.

mod support;

use std::fs::File;
use std::io;
use std::net::SocketAddr;

use ipvsctl::Handle;
use ipvsctl::model::{RealServer, Scheduler, ServiceKey, VirtualServer};
use ipvsctl::netlink::netns::{NetNs, run_in};
use ipvsctl::sync::{DesiredState, SyncOptions, Syncer, Verify};
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
/// that reads real servers over three sockets (two opened now, from the
/// handle's namespace): it must find nothing to write. A reader in another
/// namespace would find no real servers (the kernel dumps those of a missing
/// service as none) and add them again.
fn sync_with_readers(h: &Handle, desired: &DesiredState) -> ipvsctl::Result<()> {
    let options = SyncOptions {
        read_sockets: 3,
        ..SyncOptions::default()
    };
    let report = Syncer::with_options(h, options).sync(desired, Verify::Full)?;
    assert_eq!(report.writes_sent, 0, "{report:?}");
    assert!(report.is_ok(), "{report:?}");
    Ok(())
}

/// The services in the namespace behind `ns` (read by a handle opened there).
fn table_of(ns: &NetNs) -> Vec<ServiceKey> {
    keys(&Handle::open(ns).expect("handle on a kept namespace"))
}

#[test]
fn a_recreated_named_namespace_does_not_redirect_an_open_handle() {
    let ns = TestNetns::with_ipvs();
    // Keeps the original namespace reachable after its name goes.
    let original = File::open(ns.path()).expect("open the namespace file");
    let h = Handle::open(&NetNs::named(ns.name())).expect("handle");
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
    let NetNs::Pinned(pinned) = h.netns() else {
        panic!("not pinned: {:?}", h.netns());
    };
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
