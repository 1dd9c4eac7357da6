//! Connection replication by the IPVS sync daemons, with real traffic.
//!
//! The router of the traffic lab (tests/support/traffic.rs) is the master;
//! a second namespace, the backup, hangs off it on its own veth:
//!
//! ```text
//!   client ── router (IPVS, master daemon on s0) ── backend 0
//!                 │ s0 10.2.0.1
//!                 │ eth0 10.2.0.2
//!               backup (IPVS, backup daemon on eth0)
//! ```
//!
//! The daemons speak IPv4 multicast (224.0.0.81:8848, the kernel's default)
//! on that link. TCP connections made through the master over IPv4 and IPv6
//! must show up in the backup's connection table, learnt from the master
//! (`SYNC` in `/proc/net/ip_vs_conn_sync`), read through `ipvsctl::conns`.
//!
//! Runs in the VM through the cargo runner (`cargo test --test kernel_sync_daemon`).

mod support;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use ipvsctl::conns::{ConnTable, Origin};
use ipvsctl::model::{
    AddressFamily, DaemonRole, ForwardMethod, Protocol, RealServer, Scheduler, SyncDaemon,
    VirtualServer,
};
use ipvsctl::{Handle, HandleOptions, NetNs};
use support::TestNetns;
use support::traffic::{BPORT, Lab, Proto, vkey};

/// How long the backup may take to learn a connection: the master sends a
/// buffer when it is full or 2 s after its first entry
/// (`IPVS_SYNC_FLUSH_TIME`); the rest is slack for a busy emulated guest.
const LEARN_WITHIN: Duration = Duration::from_secs(30);

/// A connection as both tables name it: client, virtual address, real server.
type Tuple = (SocketAddr, SocketAddr, SocketAddr);

/// The TCP entries of `ns`'s connection table that came from `origin`.
fn tcp_entries(ns: &TestNetns, origin: Origin) -> BTreeSet<Tuple> {
    ConnTable::new()
        .netns(NetNs::path(ns.path()).pin().unwrap())
        .sync_connections()
        .expect("open ip_vs_conn_sync")
        .map(|e| e.expect("parse ip_vs_conn_sync"))
        .filter(|e| e.protocol == Protocol::Tcp && e.origin == Some(origin))
        .map(|e| (e.client, e.virtual_addr, e.real))
        .collect()
}

/// Both lab services (TCP on each VIP, rr, backend 0 masqueraded) in `h`.
fn add_services(h: &Handle) {
    for family in [AddressFamily::Inet, AddressFamily::Inet6] {
        let vs = VirtualServer::new(vkey(Proto::Tcp, family)).with_scheduler(Scheduler::RoundRobin);
        h.add_service(&vs).expect("add service");
        let rs = RealServer::new(Lab::backend_addr(0, BPORT, family))
            .with_forward(ForwardMethod::Masquerade);
        h.add_destination(&vs.key, &rs).expect("add destination");
    }
}

/// Connections through the master appear in the backup's table as learnt
/// from the master, with the same client, virtual address and real server,
/// for IPv4 and IPv6 services alike.
#[test]
fn backup_learns_connections_made_through_the_master() {
    let lab = Lab::new(1, BPORT, false);
    let backup = TestNetns::with_ipvs();
    support::traffic::link(
        &lab.router,
        &backup,
        "s0",
        ("10.2.0.1", "10.2.0.2"),
        ("fd02::1", "fd02::2"),
    );
    let backup_h = Handle::open(&NetNs::path(backup.path()), &HandleOptions::new())
        .expect("open handle in backup");
    // The backup carries the same services, as a standby balancer does, so
    // that learnt connections bind to its destinations.
    add_services(&lab.handle);
    add_services(&backup_h);
    backup_h
        .start_daemon(&SyncDaemon::new(DaemonRole::Backup, "eth0"))
        .expect("start backup daemon");
    lab.handle
        .start_daemon(&SyncDaemon::new(DaemonRole::Master, "s0"))
        .expect("start master daemon");

    for family in [AddressFamily::Inet, AddressFamily::Inet6] {
        let round = lab.spread(Proto::Tcp, family, 3);
        assert_eq!(round.seen.get(&Lab::backend_name(0)), Some(&3));
    }
    let made = tcp_entries(&lab.router, Origin::Local);
    assert_eq!(made.len(), 6, "the master's own entries: {made:?}");
    assert!(
        tcp_entries(&lab.router, Origin::Sync).is_empty(),
        "the master learnt nothing"
    );

    let start = Instant::now();
    let learnt = loop {
        let learnt = tcp_entries(&backup, Origin::Sync);
        if made.is_subset(&learnt) || start.elapsed() > LEARN_WITHIN {
            break learnt;
        }
        std::thread::sleep(Duration::from_millis(250));
    };
    assert!(
        made.is_subset(&learnt),
        "after {:?} the backup learnt {learnt:?}, the master made {made:?}",
        start.elapsed()
    );
    eprintln!(
        "backup learnt all {} connections within {:?}",
        made.len(),
        start.elapsed()
    );
    assert!(
        tcp_entries(&backup, Origin::Local).is_empty(),
        "the backup made no connections of its own"
    );
    // Learnt entries bind to the backup's own destinations.
    for family in [AddressFamily::Inet, AddressFamily::Inet6] {
        let d = backup_h
            .list_destinations(&vkey(Proto::Tcp, family))
            .expect("list backup destinations");
        let c = &d[0].conns;
        assert_eq!(c.active + c.inactive, 3, "{family:?}: {c:?}");
    }

    lab.handle
        .stop_daemon(DaemonRole::Master)
        .expect("stop master");
    backup_h
        .stop_daemon(DaemonRole::Backup)
        .expect("stop backup");
}
