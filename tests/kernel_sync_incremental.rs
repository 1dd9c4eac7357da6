//! Incremental updates (`Syncer::sync_changes`) against a real kernel's
//! IPVS, each test in its own fresh network namespace: randomised sequences
//! of changes converge (checked by reading every service back), same-key
//! services of others are conflicts and never touched, and drift made
//! behind the syncer's back is repaired by the next verifying sync.

mod strategies;
mod support;

use std::collections::{BTreeMap, HashSet};
use std::net::SocketAddr;

use ipvsctl::Handle;
use ipvsctl::model::{ForwardMethod, RealServer, Scheduler, ServiceKey, VirtualServer};
use ipvsctl::sync::{DesiredState, ServiceCheck, SyncOptions, SyncReport, Syncer, Verify};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use support::netns_with_handle as setup;

type Table = BTreeMap<ServiceKey, (VirtualServer, BTreeMap<SocketAddr, RealServer>)>;

/// The kernel's state of the services `keys`, each looked up on its own (a
/// multi-part dump can skip services while other namespaces change theirs).
fn kernel_table(h: &Handle, keys: impl IntoIterator<Item = ServiceKey>) -> Table {
    let mut t = Table::new();
    for key in keys {
        match h.get_service(&key) {
            Ok(s) => {
                let dests = h
                    .list_destinations(&key)
                    .unwrap()
                    .into_iter()
                    .map(|d| (d.server.addr, d.server))
                    .collect();
                t.insert(key, (s.service, dests));
            }
            Err(e) if e.is_not_found() => {}
            Err(e) => panic!("look up {key}: {e}"),
        }
    }
    t
}

fn table_of(d: &DesiredState) -> Table {
    d.services()
        .iter()
        .map(|s| {
            (
                s.service().key,
                (
                    s.service().clone(),
                    s.destinations().iter().map(|r| (r.addr, *r)).collect(),
                ),
            )
        })
        .collect()
}

fn assert_ok(r: &SyncReport) {
    assert!(
        r.is_ok(),
        "failures: {:?}, conflicts: {:?}",
        r.failed
            .iter()
            .map(|f| (&f.write, f.error.to_string()))
            .collect::<Vec<_>>(),
        r.conflicts
    );
}

/// Services, each with an alternative scheduler and a pool of real servers.
#[derive(Debug, Clone)]
struct Pool {
    services: Vec<(VirtualServer, Scheduler, Vec<RealServer>)>,
}

fn pool() -> impl Strategy<Value = Pool> {
    proptest::collection::vec(
        strategies::virtual_server(true).prop_flat_map(|vs| {
            let fam = vs.family();
            (
                Just(vs),
                strategies::scheduler(),
                proptest::collection::vec(strategies::real_server(fam), 0..8),
            )
        }),
        1..10,
    )
    .prop_map(|v| {
        let mut keys = HashSet::new();
        let services = v
            .into_iter()
            .filter(|(vs, ..)| keys.insert(vs.key))
            .map(|(vs, s, rs)| {
                let mut addrs = HashSet::new();
                let rs = rs.into_iter().filter(|r| addrs.insert(r.addr)).collect();
                (vs, s, rs)
            })
            .collect();
        Pool { services }
    })
}

/// One change: which service, what kind, which of its real servers (a
/// mask), a weight bump, and the verification of the sync after it (3: no
/// sync yet).
type Change = (usize, u8, u8, u32, u8);

fn apply_change(d: &mut DesiredState, pool: &Pool, &(i, kind, mask, bump, _): &Change) {
    let (vs, sched, rs) = &pool.services[i % pool.services.len()];
    let picked = rs
        .iter()
        .enumerate()
        .filter(|(j, _)| mask & (1 << j) != 0)
        .map(|(_, r)| r.with_weight((r.weight + bump) % (i32::MAX as u32)));
    let key = vs.key;
    match kind {
        0 => d.upsert(vs.clone(), picked).unwrap(),
        1 => {
            d.remove(&key);
        }
        2 if d.contains(&key) => d.upsert_destinations(&key, picked).unwrap(),
        3 if d.contains(&key) => {
            d.remove_destinations(&key, picked.map(|r| r.addr)).unwrap();
        }
        _ => d
            .upsert(vs.clone().with_scheduler(sched.clone()), picked)
            .unwrap(),
    }
}

#[test]
fn randomised_incremental_updates_converge() {
    let (ns, h) = setup();
    // Someone else's services, never to be touched.
    ns.ipvsadm("-A -u 192.0.2.53:53 -s rr");
    ns.ipvsadm("-a -u 192.0.2.53:53 -r 192.0.2.10:53 -m -w 3");
    let foreign_key = ServiceKey::udp("192.0.2.53:53".parse().unwrap());
    let foreign = kernel_table(&h, [foreign_key]);
    let mut runner = TestRunner::new(Config {
        cases: 16,
        ..Config::default()
    });
    let changes =
        proptest::collection::vec((0usize..10, 0u8..5, any::<u8>(), 0u32..3, 0u8..4), 1..16);
    runner
        .run(&(pool(), changes), |(pool, changes)| {
            let keys: Vec<ServiceKey> = pool.services.iter().map(|s| s.0.key).collect();
            for k in &keys {
                let _ = h.delete_service(k);
            }
            let mut syncer = Syncer::new(&h);
            let mut desired = DesiredState::new();
            for (n, ch) in changes.iter().enumerate() {
                apply_change(&mut desired, &pool, ch);
                let last = n + 1 == changes.len();
                if ch.4 == 3 && !last {
                    continue;
                }
                let verify = [Verify::None, Verify::Services, Verify::Full][ch.4 as usize % 3];
                let report = syncer.sync_changes(&mut desired, verify).unwrap();
                assert_ok(&report);
                prop_assert!(desired.changes().is_empty());
                let got = kernel_table(&h, keys.iter().copied());
                prop_assert_eq!(&got, &table_of(&desired));
            }
            // A full sync after any mix of updates writes nothing.
            let again = syncer.sync(&desired, Verify::Full).unwrap();
            assert_ok(&again);
            prop_assert_eq!(again.writes_sent, 0);
            prop_assert_eq!(again.services.unchanged, desired.len());
            prop_assert_eq!(again.destinations.unchanged, desired.destination_count());
            // Removing every service deletes what this syncer made.
            for k in &keys {
                desired.remove(k);
            }
            assert_ok(&syncer.sync_changes(&mut desired, Verify::None).unwrap());
            prop_assert!(kernel_table(&h, keys.iter().copied()).is_empty());
            Ok(())
        })
        .unwrap();
    assert_eq!(kernel_table(&h, [foreign_key]), foreign);
}

/// Services `10.96.0.<i+1>:80`, each with `dests` real servers of weight 2.
fn cluster(n: u8, dests: u8) -> DesiredState {
    let mut d = DesiredState::new();
    for i in 0..n {
        let key = ServiceKey::tcp(format!("10.96.0.{}:80", i + 1).parse().unwrap());
        let rs = (0..dests).map(|j| {
            RealServer::new(format!("10.244.{i}.{}:8080", j + 1).parse().unwrap())
                .with_weight(2)
                .with_forward(ForwardMethod::Masquerade)
        });
        d.insert(VirtualServer::new(key), rs).unwrap();
    }
    d
}

fn key(i: u8) -> ServiceKey {
    ServiceKey::tcp(format!("10.96.0.{i}:80").parse().unwrap())
}

#[test]
fn drift_is_repaired_by_the_next_verifying_sync() {
    let (ns, h) = setup();
    let mut desired = cluster(6, 3);
    let options = SyncOptions::default().with_service_check(ServiceCheck::Lookups);
    let mut s = Syncer::with_options(&h, options);
    assert_ok(&s.sync(&desired, Verify::Services).unwrap());
    desired.clear_changes();
    // Behind the syncer's back: a service edited, one deleted, a real
    // server reweighted.
    ns.ipvsadm("-E -t 10.96.0.1:80 -s sh");
    ns.ipvsadm("-D -t 10.96.0.2:80");
    ns.ipvsadm("-e -t 10.96.0.3:80 -r 10.244.2.1:8080 -m -w 9");
    // An incremental update trusting memory touches only its change: a new
    // real server on service 1, whose edited scheduler it does not see.
    let extra =
        RealServer::new("10.244.0.9:8080".parse().unwrap()).with_forward(ForwardMethod::Masquerade);
    desired.upsert_destinations(&key(1), [extra]).unwrap();
    let r = s.sync_changes(&mut desired, Verify::None).unwrap();
    assert_ok(&r);
    assert_eq!(r.writes_sent, 1);
    assert_eq!(r.reads_sent, 0);
    // Verifying the changed service finds its edited scheduler.
    desired
        .upsert_destinations(&key(1), [extra.with_weight(4)])
        .unwrap();
    let r = s.sync_changes(&mut desired, Verify::Services).unwrap();
    assert_ok(&r);
    assert_eq!((r.services.updated, r.destinations.updated), (1, 1));
    // A full sync checking services by lookups re-creates the deleted one.
    let r = s.sync(&desired, Verify::Services).unwrap();
    assert_ok(&r);
    assert_eq!(r.services.added, 1);
    assert_eq!(r.destinations.added, 3);
    assert_eq!(r.writes_sent, 4);
    // Real-server drift is found by Verify::Full, of the changed services
    // (incremental) or of all of them.
    desired.upsert_destinations(&key(3), []).unwrap();
    let r = s.sync_changes(&mut desired, Verify::Full).unwrap();
    assert_ok(&r);
    assert_eq!(r.destinations.updated, 1);
    assert_eq!(r.writes_sent, 1);
    ns.ipvsadm("-d -t 10.96.0.4:80 -r 10.244.3.1:8080");
    let r = s.sync(&desired, Verify::Full).unwrap();
    assert_ok(&r);
    assert_eq!((r.destinations.added, r.writes_sent), (1, 1));
    let keys: Vec<ServiceKey> = desired.services().iter().map(|d| d.service().key).collect();
    assert_eq!(kernel_table(&h, keys), table_of(&desired));
}

#[test]
fn same_key_foreign_services_are_conflicts() {
    let (ns, h) = setup();
    ns.ipvsadm("-A -t 10.96.0.7:80 -s sh");
    ns.ipvsadm("-a -t 10.96.0.7:80 -r 192.0.2.10:80 -m -w 3");
    let foreign = kernel_table(&h, [key(7)]);
    let mut desired = cluster(2, 2);
    let mut s = Syncer::new(&h);
    assert_ok(&s.sync(&desired, Verify::Services).unwrap());
    desired.clear_changes();
    // Trusting memory, the syncer learns of the other service from the
    // kernel refusing its add, and sends none of its real servers.
    for verify in [Verify::None, Verify::Services] {
        desired
            .upsert(
                VirtualServer::new(key(7)),
                cluster(1, 2).services()[0].destinations().iter().copied(),
            )
            .unwrap();
        let r = s.sync_changes(&mut desired, verify).unwrap();
        assert!(r.failed.is_empty(), "{:?}", r.failed);
        assert_eq!(r.conflicts.len(), 1, "{verify:?}");
        assert_eq!(r.conflicts[0].key, key(7));
        assert_eq!(
            r.conflicts[0].found.as_ref().map(|v| &v.scheduler),
            Some(&Scheduler::SourceHashing)
        );
        assert_eq!(r.destinations.added, 0);
        // Leaving the desired state, it is not deleted either.
        desired.remove(&key(7));
        assert_ok(&s.sync_changes(&mut desired, verify).unwrap());
        assert_eq!(kernel_table(&h, [key(7)]), foreign);
    }
    // Adopted, it is the syncer's.
    s.adopt([key(7)]);
    desired.upsert(VirtualServer::new(key(7)), []).unwrap();
    let r = s.sync_changes(&mut desired, Verify::None).unwrap();
    assert_ok(&r);
    assert_eq!((r.services.updated, r.destinations.deleted), (1, 1));
}
