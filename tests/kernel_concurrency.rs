//! One handle under concurrent use: eight threads add, read, batch and
//! delete their own services while a `Syncer` on the same handle syncs a
//! changing desired state and Debian's `ipvsadm` writes to the same
//! namespace from another process. Every operation must be accounted for,
//! every answer must belong to its request (each thread's services carry
//! settings no other thread uses), and a verifying sync afterwards must
//! converge. The whole scenario is bounded: a deadlock fails the test.

mod support;

use std::collections::BTreeSet;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use ipvsctl::batch::Write;
use ipvsctl::model::{RealServer, Scheduler, ServiceKey, VirtualServer};
use ipvsctl::sync::{DesiredState, Scope, SyncOptions, Syncer, Verify};
use ipvsctl::{Handle, HandleOptions, NetNs};
use support::TestNetns;

const THREADS: u8 = 8;
const ROUNDS: u32 = 12;
const SYNCED_SERVICES: u8 = 40;
/// `ipvsadm` add/add-real-server/delete rounds; the threads and the syncer
/// keep going until they are done (and at least `ROUNDS` each).
const IPVSADM_ROUNDS: u32 = 8;

fn addr(a: u8, b: u8, c: u8, d: u8, port: u16) -> SocketAddr {
    SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::new(a, b, c, d), port))
}

/// The syncer's desired state in `round`: every service's real servers get
/// the round's weight, and odd rounds drop the last service.
fn desired(round: u32) -> DesiredState {
    let mut d = DesiredState::new();
    let count = if round % 2 == 1 {
        SYNCED_SERVICES - 1
    } else {
        SYNCED_SERVICES
    };
    for i in 0..count {
        let key = ServiceKey::tcp(addr(10, 96, 0, i, 80));
        let weight = 1 + round % 7;
        let servers = (1..=3u8)
            .map(|j| RealServer::new(addr(10, 244, i, j, 8080)).with_weight(weight))
            .collect::<Vec<_>>();
        d.insert(
            VirtualServer::new(key).with_scheduler(Scheduler::RoundRobin),
            servers,
        )
        .expect("valid desired state");
    }
    d
}

/// One worker thread's rounds on its own services (10.97.T.x): the
/// persistence timeout encodes thread and round, so an answer meant for
/// another request cannot pass the equality checks.
fn worker(h: &Handle, t: u8, stop: &AtomicBool) -> Result<u32, String> {
    let mut ops = 0u32;
    let mut round = 0u32;
    while round < ROUNDS || !stop.load(Ordering::Relaxed) {
        let key = ServiceKey::tcp(addr(10, 97, t, (round % 200) as u8, 80));
        let vs = VirtualServer::new(key)
            .with_scheduler(Scheduler::WeightedLeastConnection)
            .with_persistence(1000 + u32::from(t) * 100 + round);
        h.add_service(&vs)
            .map_err(|e| format!("thread {t} round {round}: add: {e}"))?;
        let servers: Vec<RealServer> = (1..=4u8)
            .map(|j| {
                RealServer::new(addr(10, 245, t, j, 9000 + round as u16)).with_weight(u32::from(j))
            })
            .collect();
        let report = h.apply(servers.iter().map(|rs| Write::AddDestination(key, *rs)));
        if !report.is_ok() || report.succeeded != servers.len() {
            return Err(format!("thread {t} round {round}: batch: {report:?}"));
        }
        let got = h
            .get_service(&key)
            .map_err(|e| format!("thread {t} round {round}: get: {e}"))?;
        if got.service != vs {
            return Err(format!(
                "thread {t} round {round}: another request's answer: {:?} != {vs:?}",
                got.service
            ));
        }
        let listed: BTreeSet<(SocketAddr, u32)> = h
            .list_destinations(&key)
            .map_err(|e| format!("thread {t} round {round}: list: {e}"))?
            .into_iter()
            .map(|d| (d.server.addr, d.server.weight))
            .collect();
        let want: BTreeSet<(SocketAddr, u32)> =
            servers.iter().map(|rs| (rs.addr, rs.weight)).collect();
        if listed != want {
            return Err(format!(
                "thread {t} round {round}: real servers {listed:?} != {want:?}"
            ));
        }
        h.delete_service(&key)
            .map_err(|e| format!("thread {t} round {round}: delete: {e}"))?;
        ops += 4 + servers.len() as u32;
        round += 1;
    }
    Ok(ops)
}

#[test]
fn one_handle_under_threads_a_syncer_and_ipvsadm() {
    let ns = Arc::new(TestNetns::with_ipvs());
    let h = Arc::new(Handle::open(&NetNs::path(ns.path()), &HandleOptions::new()).expect("handle"));
    let (done_tx, done_rx) = mpsc::channel::<Result<String, String>>();

    let scenario = {
        let ns = Arc::clone(&ns);
        let h = Arc::clone(&h);
        move || -> Result<String, String> {
            let stop = Arc::new(AtomicBool::new(false));
            // ipvsadm from another process: its own services, added and deleted.
            let ipvsadm = {
                let ns = Arc::clone(&ns);
                let stop = Arc::clone(&stop);
                std::thread::spawn(move || {
                    for i in 0..IPVSADM_ROUNDS {
                        ns.ipvsadm(&format!("-A -t 10.98.0.{i}:80 -s sh"));
                        ns.ipvsadm(&format!("-a -t 10.98.0.{i}:80 -r 10.246.0.{i}:80 -m"));
                        ns.ipvsadm(&format!("-D -t 10.98.0.{i}:80"));
                    }
                    stop.store(true, Ordering::Relaxed);
                    IPVSADM_ROUNDS
                })
            };
            let workers: Vec<_> = (0..THREADS)
                .map(|t| {
                    let h = Arc::clone(&h);
                    let stop = Arc::clone(&stop);
                    std::thread::spawn(move || worker(&h, t, &stop))
                })
                .collect();
            // The syncer on the same handle, only its own services in scope.
            let mut syncer = Syncer::with_options(
                Arc::clone(&h),
                SyncOptions::default().with_scope(Scope::Owned),
            );
            let mut syncs = 0u32;
            let mut round = 0u32;
            while round < ROUNDS || !stop.load(Ordering::Relaxed) {
                let verify = if round.is_multiple_of(3) {
                    Verify::Full
                } else {
                    Verify::Services
                };
                let report = syncer
                    .sync(&desired(round), verify)
                    .map_err(|e| format!("sync {round}: {e}"))?;
                if !report.is_ok() {
                    return Err(format!("sync {round}: {report:?}"));
                }
                syncs += 1;
                round += 1;
            }
            let mut worker_ops = 0;
            for w in workers {
                worker_ops += w.join().map_err(|_| "a worker panicked".to_owned())??;
            }
            let ipvsadm_runs = ipvsadm
                .join()
                .map_err(|_| "ipvsadm loop panicked".to_owned())?;

            // A verifying sync converges, and then finds nothing to write.
            let last = desired(0);
            let report = syncer
                .sync(&last, Verify::Full)
                .map_err(|e| format!("final sync: {e}"))?;
            if !report.is_ok() {
                return Err(format!("final sync: {report:?}"));
            }
            let again = syncer
                .sync(&last, Verify::Full)
                .map_err(|e| format!("second final sync: {e}"))?;
            if again.writes_sent != 0 || !again.is_ok() {
                return Err(format!("not converged: {again:?}"));
            }
            // What is left: the syncer's services only (every worker's and
            // every ipvsadm service was deleted by its owner).
            let left: BTreeSet<ServiceKey> = h
                .list_services()
                .map_err(|e| format!("list: {e}"))?
                .into_iter()
                .map(|s| s.service.key)
                .collect();
            let want: BTreeSet<ServiceKey> = (0..SYNCED_SERVICES)
                .map(|i| ServiceKey::tcp(addr(10, 96, 0, i, 80)))
                .collect();
            if left != want {
                return Err(format!("left in the table: {left:?}"));
            }
            Ok(format!(
                "{worker_ops} worker operations, {syncs} syncs, {ipvsadm_runs} ipvsadm rounds"
            ))
        }
    };
    std::thread::spawn(move || {
        let _ = done_tx.send(scenario());
    });
    match done_rx.recv_timeout(Duration::from_secs(600)) {
        Ok(Ok(summary)) => println!("{summary}"),
        Ok(Err(e)) => panic!("{e}"),
        Err(e) => panic!("the scenario did not finish within 600 s (deadlock?): {e}"),
    }
}
