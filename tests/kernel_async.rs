//! The async front (`ipvsctl::asynchronous`, feature `tokio`) against a real
//! kernel, each test in its own fresh network namespace: operations reach
//! the kernel in the order they were called, a sync runs without blocking a
//! single-threaded runtime, and a sync whose future is dropped part-way
//! leaves the syncer's memory true to the kernel.
//!
//! `cargo test --features tokio --test kernel_async`
#![cfg(feature = "tokio")]

mod support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use ipvsctl::asynchronous::{AsyncHandle, AsyncSyncer};
use ipvsctl::batch::{BatchMode, Write};
use ipvsctl::model::{ForwardMethod, RealServer, ServiceKey, VirtualServer};
use ipvsctl::sync::{DesiredState, SyncOptions, Verify};
use ipvsctl::{HandleOptions, NetNs};
use support::TestNetns;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
}

fn key(i: u32) -> ServiceKey {
    let [_, _, b, c] = i.to_be_bytes();
    ServiceKey::tcp(SocketAddr::from(([10, 96, b, c], 80)))
}

fn server(i: u32, j: u8) -> RealServer {
    let [_, _, b, c] = i.to_be_bytes();
    RealServer::new(SocketAddr::from(([10, b, c, j], 8080))).with_forward(ForwardMethod::Masquerade)
}

fn desired(services: u32, per: u8) -> DesiredState {
    let mut d = DesiredState::new();
    for i in 0..services {
        d.insert(VirtualServer::new(key(i)), (1..=per).map(|j| server(i, j)))
            .unwrap();
    }
    d
}

/// How many of the services `0..services` the kernel has, each asked for
/// by key. A dump of a large table cannot stand in for this while the other
/// tests of this binary change their own namespaces: the kernel resumes a
/// dump by position in a table all namespaces share, so a dump can miss a
/// service (see `Handle::list_services`).
async fn present(ipvs: &AsyncHandle, services: u32) -> usize {
    ipvs.run(move |h| {
        Ok((0..services)
            .filter(|&i| h.get_service(&key(i)).is_ok())
            .count())
    })
    .await
    .expect("look the services up")
}

async fn open(ns: &TestNetns) -> AsyncHandle {
    AsyncHandle::open(NetNs::path(ns.path()), HandleOptions::new())
        .await
        .expect("open the async handle")
}

#[test]
fn operations_reach_the_kernel_in_call_order() {
    let ns = TestNetns::with_ipvs();
    runtime().block_on(async {
        let ipvs = open(&ns).await;
        // Queued back to back without awaiting: a real server can only be
        // added after its service, so any reordering fails with ESRCH.
        let mut replies = Vec::new();
        for i in 0..50 {
            replies.push(ipvs.add_service(VirtualServer::new(key(i))));
            replies.push(ipvs.add_destination(key(i), server(i, 1)));
        }
        for (n, r) in replies.into_iter().enumerate() {
            r.await.unwrap_or_else(|e| panic!("operation {n}: {e}"));
        }
        let services = ipvs.list_services().await.unwrap();
        assert_eq!(services.len(), 50);
        for i in 0..50 {
            let dests = ipvs.list_destinations(key(i)).await.unwrap();
            assert_eq!(dests.len(), 1, "service {}", key(i));
            assert_eq!(dests[0].server.addr, server(i, 1).addr);
        }
        let report = ipvs
            .apply(
                (0..50).map(|i| Write::DeleteService(key(i))).collect(),
                BatchMode::Pipelined,
            )
            .await;
        assert!(report.is_ok(), "{:?}", report.failed);
        assert!(ipvs.list_services().await.unwrap().is_empty());
        // A typed error comes through unchanged.
        let err = ipvs
            .delete_service(key(0))
            .await
            .expect_err("deleted twice");
        assert!(err.is_not_found(), "{err}");
    });
}

#[test]
fn a_sync_does_not_block_a_single_threaded_runtime() {
    let ns = TestNetns::with_ipvs();
    runtime().block_on(async {
        let ipvs = open(&ns).await;
        let syncer = AsyncSyncer::new(&ipvs, SyncOptions::default()).unwrap();
        let ticks = Arc::new(AtomicU32::new(0));
        let counter = Arc::clone(&ticks);
        let ticker = tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(5)).await;
                counter.fetch_add(1, Ordering::Relaxed);
            }
        });
        let started = std::time::Instant::now();
        let report = syncer
            .sync(Arc::new(desired(1000, 5)), Verify::Services)
            .await
            .unwrap();
        let took = started.elapsed();
        ticker.abort();
        assert!(report.is_ok(), "{:?}", report.failed);
        assert_eq!(report.services.added, 1000);
        let ticks = ticks.load(Ordering::Relaxed);
        // The runtime's only thread kept serving the timer while the
        // kernel worked; a thread blocked in the sync would tick at most
        // once. A guest on a busy host ticks far less often than it asks
        // to, so only a tenth of the ideal count (at least 3, at most 10) is
        // required.
        let expected = ((took.as_millis() / 5 / 10) as u32).clamp(3, 10);
        assert!(
            ticks >= expected,
            "{ticks} ticks during a sync of {took:?} (expected at least {expected})"
        );
        assert_eq!(present(&ipvs, 1000).await, 1000);
    });
}

#[test]
fn sync_changes_writes_only_what_changed_and_hands_the_state_back() {
    let ns = TestNetns::with_ipvs();
    runtime().block_on(async {
        let ipvs = open(&ns).await;
        let syncer = AsyncSyncer::new(&ipvs, SyncOptions::default()).unwrap();
        // Every inserted service is a recorded change: the first call
        // creates them all.
        let (report, mut state) = syncer.sync_changes(desired(20, 2), Verify::Services).await;
        let report = report.expect("the first sync of the changes");
        assert!(report.is_ok(), "{report:?}");
        assert_eq!(report.services.added, 20);
        assert!(state.changes().is_empty(), "{:?}", state.changes());
        assert_eq!(state.len(), 20, "the state comes back whole");

        // One endpoint moves: one delete and one add, nothing else written.
        let moved = key(7);
        state
            .remove_destinations(&moved, [server(7, 1).addr])
            .unwrap();
        state.upsert_destinations(&moved, [server(7, 9)]).unwrap();
        let (report, state) = syncer.sync_changes(state, Verify::None).await;
        let report = report.expect("the sync of one changed service");
        assert!(report.is_ok(), "{report:?}");
        assert_eq!(report.writes_sent, 2);
        assert!(state.changes().is_empty());

        let mut have: Vec<SocketAddr> = ipvs
            .list_destinations(moved)
            .await
            .unwrap()
            .into_iter()
            .map(|d| d.server.addr)
            .collect();
        have.sort();
        assert_eq!(have, [server(7, 2).addr, server(7, 9).addr]);
        // Nothing left to do: no writes.
        let (report, _) = syncer.sync_changes(state, Verify::None).await;
        assert_eq!(report.unwrap().writes_sent, 0);
    });
}

#[test]
fn a_sync_dropped_part_way_leaves_the_syncer_true_to_the_kernel() {
    let ns = TestNetns::with_ipvs();
    runtime().block_on(async {
        let ipvs = open(&ns).await;
        let syncer = AsyncSyncer::new(&ipvs, SyncOptions::default()).unwrap();
        let want = Arc::new(desired(2000, 3));
        // Give up on the sync once it has started (`sync` is this same
        // closure, with a signal added): the worker finishes it anyway, a
        // netlink request cannot be taken back.
        let (started_tx, started) = tokio::sync::oneshot::channel();
        let state = Arc::clone(&want);
        let mut sync = syncer.with(move |s| {
            let _ = started_tx.send(());
            s.sync(&state, Verify::Services)
        });
        tokio::select! {
            _ = started => {}
            _ = &mut sync => panic!("the sync finished before it started"),
        }
        let gave_up = tokio::time::timeout(Duration::from_millis(50), &mut sync).await;
        assert!(
            gave_up.is_err(),
            "the sync finished within 50 ms; the test needs it slower"
        );
        drop(sync);
        // Queued behind the abandoned sync, so it sees its outcome: nothing
        // is left to do, and the kernel has the whole state.
        let plan = syncer.plan(Arc::clone(&want), Verify::Full).await.unwrap();
        assert!(
            plan.is_empty(),
            "after the abandoned sync the plan is {:?}",
            plan.counts
        );
        assert_eq!(present(&ipvs, 2000).await, 2000);
        let again = syncer.sync(want, Verify::Services).await.unwrap();
        assert!(again.is_ok(), "{:?}", again.failed);
        assert_eq!(
            again.writes_sent, 0,
            "the second sync wrote {}",
            again.writes_sent
        );
    });
}

#[test]
fn a_withdrawn_operation_never_reaches_the_kernel() {
    let ns = TestNetns::with_ipvs();
    runtime().block_on(async {
        let ipvs = open(&ns).await;
        // The worker is kept busy by a slow first operation; the second is
        // queued and dropped before the worker gets to it.
        let gate = Arc::new(std::sync::Barrier::new(2));
        let held = Arc::clone(&gate);
        let first = ipvs.run(move |h| {
            held.wait();
            h.add_service(&VirtualServer::new(key(1)))
        });
        let withdrawn = ipvs.add_service(VirtualServer::new(key(2)));
        drop(withdrawn);
        gate.wait();
        first.await.unwrap();
        let keys: Vec<ServiceKey> = ipvs
            .list_services()
            .await
            .unwrap()
            .into_iter()
            .map(|s| s.service.key)
            .collect();
        assert_eq!(keys, [key(1)]);
    });
}

#[test]
fn the_async_sync_example_keeps_and_then_removes_its_table() {
    let ns = TestNetns::with_ipvs();
    let out = std::process::Command::new(support::example_binary("async_sync"))
        .args(["--netns", ns.name(), "--services", "200", "--rounds", "3"])
        .output()
        .expect("run the async_sync example");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "async_sync failed: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 4, "{stdout}");
    assert!(lines[0].contains("200 services added"), "{stdout}");
    // Each later round changes one weight back and one forward.
    for l in &lines[1..3] {
        assert!(
            l.contains("0 services added, 2 real servers updated"),
            "{stdout}"
        );
    }
    assert_eq!(lines[3], "removed 200 services");
    let left = support::check(ns.command("ipvsadm").arg("-Ln"));
    assert!(!left.contains("TCP"), "services left behind:\n{left}");
}
