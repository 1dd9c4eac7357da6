//! Bulk sync against a real kernel's IPVS, each test in its own fresh
//! network namespace: convergence on randomised desired states (checked by a
//! full dump), foreign services never touched, partial failures, a process
//! killed half-way, drift repaired, self-healing, graceful termination.

mod strategies;
mod support;

use std::collections::{BTreeMap, HashSet};
use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ipvsctl::batch::{BatchMode, Write};
use ipvsctl::model::{ConnCounts, ForwardMethod, RealServer, Scheduler, ServiceKey, VirtualServer};
use ipvsctl::sync::{DesiredState, Scope, SyncOptions, SyncReport, Syncer, Verify};
use ipvsctl::{Error, Handle, HandleOptions, NetNs};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use support::TestNetns;

type Table = BTreeMap<ServiceKey, (VirtualServer, BTreeMap<SocketAddr, RealServer>)>;

use support::netns_with_handle as setup;

fn sa(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

/// The whole IPVS table of the namespace, read with the plain handle calls
/// (one service dump, one real-server dump per service).
fn dump(h: &Handle) -> Table {
    h.list_services()
        .unwrap()
        .into_iter()
        .map(|s| {
            let key = s.service.key;
            let dests = h
                .list_destinations(&key)
                .unwrap()
                .into_iter()
                .map(|d| (d.server.addr, d.server))
                .collect();
            (key, (s.service, dests))
        })
        .collect()
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

/// `dump` minus the given foreign services, which must be exactly as given.
///
/// A multi-part service dump is not reliable while other namespaces change
/// their services (the kernel resumes a dump by a position counted over the
/// services of every namespace, so entries can be skipped or repeated; tests
/// run in parallel), so services expected (in `want` or `foreign`) but not
/// listed are looked up one by one before they count as missing.
fn managed_part_of(h: &Handle, foreign: &Table, want: &Table) -> Table {
    let mut all = dump(h);
    for k in want.keys().chain(foreign.keys()) {
        if all.contains_key(k) {
            continue;
        }
        if let Ok(s) = h.get_service(k) {
            let dests = h
                .list_destinations(k)
                .unwrap()
                .into_iter()
                .map(|d| (d.server.addr, d.server))
                .collect();
            all.insert(*k, (s.service, dests));
        }
    }
    for (k, v) in foreign {
        assert_eq!(
            all.remove(k).as_ref(),
            Some(v),
            "foreign service {k} changed"
        );
    }
    all
}

fn managed_part(h: &Handle, foreign: &Table) -> Table {
    managed_part_of(h, foreign, &Table::new())
}

/// Panics with the first differences unless the managed part of the
/// kernel's table is `want`.
fn assert_converged(h: &Handle, foreign: &Table, want: &Table) {
    assert_same(&managed_part_of(h, foreign, want), want);
}

/// Two services made with ipvsadm that no syncer was given.
fn add_foreign(ns: &TestNetns, h: &Handle) -> Table {
    ns.ipvsadm("-A -u 192.0.2.53:53 -s rr");
    ns.ipvsadm("-a -u 192.0.2.53:53 -r 192.0.2.10:53 -m -w 3");
    ns.ipvsadm("-A -t 192.0.2.80:80 -s wlc -p 60");
    ns.ipvsadm("-a -t 192.0.2.80:80 -r 192.0.2.11:8080 -g");
    dump(h)
}

/// Panics with the first differences (not the whole tables) unless equal.
fn assert_same(got: &Table, want: &Table) {
    if let Some(diff) = table_diff(got, want) {
        panic!("kernel state differs from the desired state: {diff}");
    }
}

/// The first few differences between two tables, or `None`.
fn table_diff(got: &Table, want: &Table) -> Option<String> {
    let mut out = Vec::new();
    for k in got
        .keys()
        .chain(want.keys())
        .collect::<std::collections::BTreeSet<_>>()
    {
        match (got.get(k), want.get(k)) {
            (Some(g), Some(w)) if g == w => {}
            (g, w) => out.push(format!("{k}: kernel {g:?}, desired {w:?}")),
        }
        if out.len() >= 3 {
            break;
        }
    }
    (!out.is_empty()).then(|| {
        format!(
            "{} services in the kernel, {} desired; {}",
            got.len(),
            want.len(),
            out.join("; ")
        )
    })
}

fn assert_ok(r: &SyncReport) {
    assert!(
        r.failed.is_empty() && r.aborted.is_none(),
        "failures: {:#?}, aborted: {:?}",
        r.failed
            .iter()
            .map(|f| (&f.write, f.error.to_string()))
            .collect::<Vec<_>>(),
        r.aborted
    );
}

/// A pool of services, each with alternative configurations and a pool of
/// real servers; rounds pick from them so that successive desired states
/// overlap (adds, updates, deletes of both kinds).
#[derive(Debug, Clone)]
struct Pool {
    services: Vec<(VirtualServer, Scheduler, u32, Vec<RealServer>)>,
}

type Round = Vec<(bool, bool, u8, u8)>;

fn pool() -> impl Strategy<Value = Pool> {
    proptest::collection::vec(
        strategies::virtual_server(true).prop_flat_map(|vs| {
            let fam = vs.family();
            (
                Just(vs),
                strategies::scheduler(),
                0u32..100_000,
                proptest::collection::vec(strategies::real_server(fam), 0..8),
            )
        }),
        1..12,
    )
    .prop_map(|v| {
        let mut keys = HashSet::new();
        let services = v
            .into_iter()
            .filter(|(vs, ..)| keys.insert(vs.key))
            .map(|(vs, s, t, rs)| {
                let mut addrs = HashSet::new();
                let rs = rs.into_iter().filter(|r| addrs.insert(r.addr)).collect();
                (vs, s, t, rs)
            })
            .collect();
        Pool { services }
    })
}

fn desired_of(pool: &Pool, round: &Round) -> DesiredState {
    let mut d = DesiredState::new();
    for ((vs, sched, timeout, rs), (present, alt, mask, bump)) in pool.services.iter().zip(round) {
        if !present {
            continue;
        }
        let mut vs = vs.clone();
        if *alt {
            vs.scheduler = sched.clone();
            vs.timeout = *timeout;
        }
        let dests = rs
            .iter()
            .enumerate()
            .filter(|(i, _)| mask & (1 << i) != 0)
            .map(|(i, r)| {
                let mut r = *r;
                if bump & (1 << i) != 0 {
                    r.weight = (r.weight + 1) % (i32::MAX as u32);
                }
                r
            });
        d.insert(vs, dests).expect("valid by construction");
    }
    d
}

#[test]
fn randomised_desired_states_converge() {
    let (ns, h) = setup();
    let foreign = add_foreign(&ns, &h);
    let mut runner = TestRunner::new(Config {
        cases: 24,
        ..Config::default()
    });
    let strat = pool().prop_flat_map(|p| {
        let n = p.services.len();
        let round = proptest::collection::vec(
            (
                proptest::bool::weighted(0.8),
                any::<bool>(),
                any::<u8>(),
                any::<u8>(),
            ),
            n,
        );
        (
            Just(p),
            proptest::collection::vec(round, 4),
            proptest::collection::vec(0u8..3, 4),
        )
    });
    runner
        .run(&strat, |(pool, rounds, verifies)| {
            // Each case starts from a kernel holding only the foreign services.
            // (Listed until none is left: a dump can skip entries while
            // other tests change their namespaces.)
            loop {
                let left = managed_part(&h, &foreign);
                if left.is_empty() {
                    break;
                }
                for k in left.keys() {
                    h.delete_service(k).unwrap();
                }
            }
            let mut syncer = Syncer::new(&h);
            for (round, v) in rounds.iter().zip(&verifies) {
                let desired = desired_of(&pool, round);
                let verify = [Verify::Full, Verify::Services, Verify::None][*v as usize];
                let report = syncer.sync(&desired, verify).unwrap();
                assert_ok(&report);
                let want = table_of(&desired);
                let diff = table_diff(&managed_part_of(&h, &foreign, &want), &want);
                prop_assert!(diff.is_none(), "{}", diff.unwrap_or_default());
                // A second sync of the same state writes nothing.
                let again = syncer.sync(&desired, Verify::Full).unwrap();
                prop_assert_eq!(again.writes_sent, 0);
                prop_assert_eq!(again.services.unchanged, desired.len());
                prop_assert_eq!(again.destinations.unchanged, desired.destination_count());
            }
            // The empty desired state removes what this syncer owned, and
            // nothing else.
            let report = syncer.sync(&DesiredState::new(), Verify::Services).unwrap();
            assert_ok(&report);
            let left = managed_part(&h, &foreign);
            prop_assert!(left.is_empty(), "{} services left", left.len());
            Ok(())
        })
        .unwrap();
    assert_eq!(dump(&h), foreign);
}

/// Services `10.96.<i/250>.<i%250+1>:80` with `dests` real servers each.
fn cluster(n: usize, dests: usize, weight: u32) -> DesiredState {
    let mut d = DesiredState::with_capacity(n);
    for i in 0..n {
        let key = ServiceKey::tcp(sa(&format!("10.96.{}.{}:80", i / 250, i % 250 + 1)));
        let vs = VirtualServer::new(key).with_scheduler(Scheduler::RoundRobin);
        let rs = (0..dests).map(|j| {
            RealServer::new(sa(&format!("10.244.{}.{}:8080", i % 250, j + 1)))
                .with_weight(weight)
                .with_forward(ForwardMethod::Masquerade)
        });
        d.insert(vs, rs).unwrap();
    }
    d
}

#[test]
fn scopes_never_touch_foreign_services() {
    let (ns, h) = setup();
    let foreign = add_foreign(&ns, &h);
    let desired = cluster(20, 3, 1);
    // Default scope: a new syncer with an empty desired state deletes nothing.
    let mut s = Syncer::new(&h);
    let r = s.sync(&DesiredState::new(), Verify::Full).unwrap();
    assert_eq!(r.writes_sent, 0);
    assert_eq!(dump(&h), foreign);
    let r = s.sync(&desired, Verify::Full).unwrap();
    assert_ok(&r);
    assert_eq!(r.services.added, 20);
    assert_eq!(r.destinations.added, 60);
    assert_eq!(r.writes_sent, 80);
    assert_converged(&h, &foreign, &table_of(&desired));
    // A second process (new syncer, default scope) with another desired set
    // leaves the first one's services alone.
    let other = cluster(25, 2, 4);
    let mut s2 = Syncer::new(&h);
    let theirs: DesiredState = {
        let mut d = DesiredState::new();
        for ds in other.services().iter().skip(20) {
            d.insert(ds.service().clone(), ds.destinations().iter().copied())
                .unwrap();
        }
        d
    };
    assert_ok(&s2.sync(&theirs, Verify::Services).unwrap());
    let mut both = table_of(&desired);
    both.extend(table_of(&theirs));
    assert_converged(&h, &foreign, &both);
    // A filter scope cleans up what it claims: 10.96.0.0/16 TCP services.
    let mut s3 = Syncer::with_options(
        &h,
        SyncOptions::default().with_scope(Scope::filter(
                |k| matches!(k, ServiceKey::Addr { addr, .. } if addr.to_string().starts_with("10.96.")),
            )),
    );
    let r = s3.sync(&theirs, Verify::Services).unwrap();
    assert_ok(&r);
    assert_eq!(r.services.deleted, 20);
    assert_converged(&h, &foreign, &table_of(&theirs));
    // Scope::All owns the namespace.
    let mut s4 = Syncer::with_options(&h, SyncOptions::default().with_scope(Scope::All));
    assert_ok(&s4.sync(&DesiredState::new(), Verify::Full).unwrap());
    assert!(dump(&h).is_empty());
}

/// The `k`-th service [`with_broken_services`] adds.
fn broken_key(k: usize) -> ServiceKey {
    ServiceKey::tcp(sa(&format!("10.97.0.{}:443", k + 1)))
}

/// `good` with a service the kernel refuses (unknown scheduler; three real
/// servers) inserted before each service at the positions `at`.
fn with_broken_services(good: &DesiredState, at: &[usize]) -> DesiredState {
    let bad_rs: Vec<RealServer> = (1..=3)
        .map(|j| RealServer::new(sa(&format!("10.245.0.{j}:443"))))
        .collect();
    let mut desired = DesiredState::new();
    for (i, ds) in good.services().iter().enumerate() {
        if let Some(k) = at.iter().position(|&p| p == i) {
            let vs = VirtualServer::new(broken_key(k))
                .with_scheduler(Scheduler::from_name("nosuchsched"));
            desired.insert(vs, bad_rs.iter().copied()).unwrap();
        }
        desired
            .insert(ds.service().clone(), ds.destinations().iter().copied())
            .unwrap();
    }
    desired
}

#[test]
fn partial_failure_applies_the_rest_and_converges() {
    let (ns, h) = setup();
    let foreign = add_foreign(&ns, &h);
    let good = cluster(300, 4, 1);
    let bad_key = broken_key(0);
    let desired = with_broken_services(&good, &[150]);
    let mut s = Syncer::new(&h);
    let r = s.sync(&desired, Verify::Services).unwrap();
    let roots: Vec<_> = r.root_failures().collect();
    assert_eq!(roots.len(), 1, "{:#?}", r.failed);
    assert!(
        matches!(&roots[0].error, Error::UnknownScheduler { scheduler, .. } if scheduler == "nosuchsched"),
        "{}",
        roots[0].error
    );
    assert_eq!(
        roots[0].write,
        Write::AddService(desired.get(&bad_key).unwrap().service().clone())
    );
    // Its real servers were not sent: the service was not created.
    assert_eq!(r.failed.len(), 1);
    assert_eq!(r.withheld, 3);
    assert_eq!(r.services.added, 300);
    assert_eq!(r.destinations.added, 1200);
    assert_eq!(r.writes_sent, 1 + 300 + 1200);
    assert_converged(&h, &foreign, &table_of(&good));
    // Again, unchanged: only the failing service is tried again.
    let r = s.sync(&desired, Verify::Services).unwrap();
    assert_eq!((r.writes_sent, r.withheld), (1, 3));
    assert_eq!(r.root_failures().count(), 1);
    // Fixed: converges.
    let mut fixed = DesiredState::new();
    for ds in desired.services() {
        let mut vs = ds.service().clone();
        if vs.key == bad_key {
            vs.scheduler = Scheduler::RoundRobin;
        }
        fixed.insert(vs, ds.destinations().iter().copied()).unwrap();
    }
    let r = s.sync(&fixed, Verify::Services).unwrap();
    assert_ok(&r);
    assert_eq!(r.writes_sent, 4);
    assert_converged(&h, &foreign, &table_of(&fixed));
}

/// Syncs `good` with two services broken (`with_broken_services` at
/// `broken`) into a table holding `foreign`: exactly the broken services'
/// adds fail, their real servers are withheld, every other operation is
/// sent and succeeds, and the managed table is `good`. Returns the syncer
/// and the state it synced.
fn sync_with_two_broken<'h>(
    h: &'h Handle,
    foreign: &Table,
    good: &DesiredState,
    broken: [usize; 2],
    options: SyncOptions,
) -> (Syncer<&'h Handle>, DesiredState) {
    let desired = with_broken_services(good, &broken);
    let mut s = Syncer::with_options(h, options);
    let r = s.sync(&desired, Verify::Services).unwrap();
    let (services, dests) = (good.len(), good.destination_count());
    // Each broken service has three real servers, not sent.
    assert_eq!(r.writes_sent, services + 2 + dests);
    assert_eq!(r.root_failures().count(), 2, "{:#?}", r.failed);
    assert_eq!(r.failed.len(), 2);
    assert_eq!(r.withheld, 2 * 3);
    assert_eq!(r.services.added, services);
    assert_eq!(r.destinations.added, dests);
    assert_converged(h, foreign, &table_of(good));
    (s, desired)
}

/// More requests than one datagram carries: the syncer pipelines encoding,
/// sending and reporting in threads, and ACKs only each datagram's last
/// request. Every operation is still accounted for, failures included, in
/// every datagram.
#[test]
fn pipelined_datagrams_account_for_every_operation() {
    let (ns, h) = setup();
    let foreign = add_foreign(&ns, &h);
    let good = cluster(800, 4, 1);
    // 4,008 requests in ten datagrams: the service adds, then the real
    // servers, each in datagrams of 64 requests doubling (the pipeline's
    // ramp) until the last takes what is left; the broken services'
    // failures fall into different datagrams.
    sync_with_two_broken(&h, &foreign, &good, [10, 790], SyncOptions::default());
    // Everything again from scratch in one pass: the same, exactly.
    h.flush().unwrap();
    let mut fresh = Syncer::new(&h);
    let r = fresh.sync(&good, Verify::Services).unwrap();
    assert_ok(&r);
    assert_eq!(r.writes_sent, 800 + 3200);
    // (The flush removed the foreign services too.)
    assert_converged(&h, &Table::new(), &table_of(&good));
}

/// More real servers than the syncer sends in one part: the parts go out in
/// order, every operation is accounted for across them, failures in either
/// part included, and what the syncer remembers is the table. (Parts of
/// 2,000 operations here; the default of 131,072 behaves the same, only
/// later.)
#[test]
fn a_plan_larger_than_one_part_converges_and_is_remembered() {
    let (ns, h) = setup();
    let foreign = add_foreign(&ns, &h);
    // 3,006 real servers in two parts: the broken services' fall one in each.
    let good = cluster(300, 10, 1);
    let options = SyncOptions::default().with_part_size(NonZeroUsize::new(2000).unwrap());
    let (mut s, desired) = sync_with_two_broken(&h, &foreign, &good, [10, 290], options);
    // Trusting memory: only the broken services are tried again.
    let r = s.sync(&desired, Verify::None).unwrap();
    assert_eq!((r.writes_sent, r.withheld), (2, 2 * 3), "{:#?}", r.failed);
    // Read back in full, the table is what memory said: nothing to do.
    let r = s.sync(&good, Verify::Full).unwrap();
    assert_ok(&r);
    assert_eq!(r.writes_sent, 0);
}

#[test]
fn drift_is_repaired() {
    let (ns, h) = setup();
    let foreign = add_foreign(&ns, &h);
    let desired = cluster(10, 3, 2);
    let mut s = Syncer::new(&h);
    assert_ok(&s.sync(&desired, Verify::Services).unwrap());
    // Behind the syncer's back: a real server deleted, one reweighted, one
    // added, a service edited, a service deleted.
    ns.ipvsadm("-d -t 10.96.0.1:80 -r 10.244.0.1:8080");
    ns.ipvsadm("-e -t 10.96.0.2:80 -r 10.244.1.2:8080 -m -w 9");
    ns.ipvsadm("-a -t 10.96.0.3:80 -r 10.244.99.9:8080 -m");
    ns.ipvsadm("-E -t 10.96.0.4:80 -s wlc");
    ns.ipvsadm("-D -t 10.96.0.5:80");
    // Verify::Services sees the service table: re-creates the deleted
    // service with its real servers, restores the edited one, and re-reads
    // the edited service's real servers; real-server drift elsewhere is
    // trusted away.
    let r = s.sync(&desired, Verify::Services).unwrap();
    assert_ok(&r);
    assert_eq!(r.services.added, 1);
    assert_eq!(r.services.updated, 1);
    assert_eq!(r.destinations.added, 3);
    assert_eq!(r.writes_sent, 5);
    // Verify::Full finds the rest: exactly three writes.
    let r = s.sync(&desired, Verify::Full).unwrap();
    assert_ok(&r);
    assert_eq!(r.destinations.added, 1);
    assert_eq!(r.destinations.updated, 1);
    assert_eq!(r.destinations.deleted, 1);
    assert_eq!(r.writes_sent, 3);
    assert_converged(&h, &foreign, &table_of(&desired));
}

/// A table large enough that the service check reads the dump on a helper
/// thread (700 remembered services and more) repairs drift as the
/// one-thread check does: the deleted service made again, the edited one
/// restored, real-server drift left to `Verify::Full`.
#[test]
fn drift_in_a_table_read_on_a_helper_thread_is_repaired() {
    let (ns, h) = setup();
    let foreign = add_foreign(&ns, &h);
    let desired = cluster(720, 1, 1);
    let mut s = Syncer::new(&h);
    assert_ok(&s.sync(&desired, Verify::Services).unwrap());
    ns.ipvsadm("-D -t 10.96.0.1:80");
    ns.ipvsadm("-E -t 10.96.1.51:80 -s wlc");
    ns.ipvsadm("-d -t 10.96.2.220:80 -r 10.244.219.1:8080");
    let r = s.sync(&desired, Verify::Services).unwrap();
    assert_ok(&r);
    assert_eq!(r.services.added, 1);
    assert_eq!(r.services.updated, 1);
    assert_eq!(r.destinations.added, 1);
    assert_eq!(r.writes_sent, 3);
    let r = s.sync(&desired, Verify::Full).unwrap();
    assert_ok(&r);
    assert_eq!(r.destinations.added, 1);
    assert_eq!(r.writes_sent, 1);
    assert_converged(&h, &foreign, &table_of(&desired));
}

#[test]
fn contradictions_heal_within_one_sync() {
    let (ns, h) = setup();
    let foreign = add_foreign(&ns, &h);
    let desired = cluster(10, 3, 2);
    let mut s = Syncer::new(&h);
    assert_ok(&s.sync(&desired, Verify::Services).unwrap());
    // The kernel changes behind the syncer's back, and the next sync trusts
    // its memory entirely (Verify::None).
    ns.ipvsadm("-D -t 10.96.0.1:80"); // updates to it get ESRCH
    ns.ipvsadm("-a -t 10.96.0.2:80 -r 10.244.1.50:8080 -m -w 7"); // its add gets EEXIST
    ns.ipvsadm("-d -t 10.96.0.3:80 -r 10.244.2.1:8080"); // its update gets ENOENT
    let mut next = DesiredState::new();
    for ds in desired.services() {
        let key = ds.service().key;
        let mut rs: Vec<RealServer> = ds.destinations().iter().map(|r| r.with_weight(5)).collect();
        if key == ServiceKey::tcp(sa("10.96.0.2:80")) {
            rs.push(
                RealServer::new(sa("10.244.1.50:8080")).with_forward(ForwardMethod::Masquerade),
            );
        }
        next.insert(ds.service().clone(), rs).unwrap();
    }
    let r = s.sync(&next, Verify::None).unwrap();
    assert_ok(&r);
    assert!(r.retried.len() >= 3, "{:#?}", r.retried);
    let errors: HashSet<i32> = r.retried.iter().filter_map(|f| f.error.errno()).collect();
    assert!(
        errors.contains(&3) && errors.contains(&17) && errors.contains(&2),
        "{errors:?}"
    );
    assert_converged(&h, &foreign, &table_of(&next));
    assert_eq!(s.sync(&next, Verify::Full).unwrap().writes_sent, 0);
}

#[test]
fn one_by_one_mode_matches_pipelined() {
    let (ns, h) = setup();
    let foreign = add_foreign(&ns, &h);
    let desired = cluster(50, 4, 1);
    let mut s = Syncer::with_options(
        &h,
        SyncOptions::default()
            .with_mode(BatchMode::OneByOne)
            .with_read_sockets(2),
    );
    let r = s.sync(&desired, Verify::Full).unwrap();
    assert_ok(&r);
    assert_eq!(r.writes_sent, 250);
    assert_converged(&h, &foreign, &table_of(&desired));
    // Two reader sockets give the same full read.
    let r = s.sync(&desired, Verify::Full).unwrap();
    assert_eq!(r.writes_sent, 0);
    assert_eq!(r.reads_sent, 51);
    assert_eq!(r.destinations.unchanged, 200);
}

const CHILD_NS: &str = "IPVSCTL_SYNC_CHILD_NS";
/// The size of the table the killed child writes: enough for its one by one
/// writes to take seconds under emulation, so the kill lands mid-way.
const CHURN_SERVICES: usize = 800;
const CHURN_REAL_SERVERS: usize = 4;

/// The two desired states the child alternates between: the same services,
/// different real servers and weights.
fn churn_state(phase: u32) -> DesiredState {
    let mut d = DesiredState::with_capacity(CHURN_SERVICES);
    for i in 0..CHURN_SERVICES {
        let key = ServiceKey::tcp(sa(&format!("10.96.{}.{}:80", i / 250, i % 250 + 1)));
        let rs = (0..CHURN_REAL_SERVERS).map(|j| {
            RealServer::new(sa(&format!(
                "10.244.{}.{}:8080",
                i % 250,
                j + 1 + 2 * phase as usize
            )))
            .with_weight(1 + phase)
            .with_forward(ForwardMethod::Masquerade)
        });
        d.insert(VirtualServer::new(key), rs).unwrap();
    }
    d
}

/// Helper run as a child process by `killed_mid_sync_converges`: syncs two
/// states alternately, one request per round trip, until it is killed.
/// Without the variable it is not a child: there is nothing to do.
#[test]
fn child_syncs_until_killed() {
    let Ok(path) = std::env::var(CHILD_NS) else {
        return;
    };
    let h = Handle::open(&NetNs::path(path), &HandleOptions::new()).unwrap();
    let mut s = Syncer::with_options(&h, SyncOptions::default().with_mode(BatchMode::OneByOne));
    // Both states built up front: the child spends its time writing.
    let states = [churn_state(0), churn_state(1)];
    for d in states.iter().cycle() {
        s.sync(d, Verify::None).unwrap();
    }
}

#[test]
fn killed_mid_sync_converges() {
    let (ns, h) = setup();
    let foreign = add_foreign(&ns, &h);
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_syncs_until_killed", "--nocapture"])
        .env(CHILD_NS, ns.path())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    // Wait until the child has written a good part of the first state.
    let t0 = Instant::now();
    loop {
        let n = h.list_services().unwrap().len();
        if n > CHURN_SERVICES / 2 {
            break;
        }
        if let Some(status) = child.try_wait().unwrap() {
            panic!("child exited early: {status}");
        }
        assert!(
            t0.elapsed() < Duration::from_secs(300),
            "child made no progress"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let target = churn_state(1);
    let before = managed_part(&h, &foreign);
    assert!(
        before != table_of(&target),
        "the child was not killed mid-way"
    );
    // A new process: nothing remembered, default scope; it adopts the
    // services its previous run created (the same keys).
    let mut s = Syncer::new(&h);
    s.adopt(target.services().iter().map(|d| d.service().key));
    let r = s.sync(&target, Verify::Services).unwrap();
    assert_ok(&r);
    assert_eq!(r.verified, Some(Verify::Full));
    assert!(r.writes_sent > 0);
    let after = managed_part_of(&h, &foreign, &table_of(&target));
    if let Some(diff) = table_diff(&after, &table_of(&target)) {
        let missing: Vec<_> = table_of(&target)
            .keys()
            .filter(|k| !after.contains_key(k))
            .copied()
            .collect();
        panic!(
            "not converged: {diff}\nbefore: {} services, {} real servers; missing before: {}; report: planned {:?}, services {:?}, dests {:?}, writes {}, reads {}, retried {:?}",
            before.len(),
            before.values().map(|s| s.1.len()).sum::<usize>(),
            missing.iter().filter(|k| !before.contains_key(k)).count(),
            r.planned,
            r.services,
            r.destinations,
            r.writes_sent,
            r.reads_sent,
            r.retried
                .iter()
                .map(|f| (&f.write, f.error.to_string()))
                .collect::<Vec<_>>()
        );
    }
    assert_eq!(s.sync(&target, Verify::Full).unwrap().writes_sent, 0);
}

#[test]
fn graceful_termination_waits_for_connections() {
    use std::net::{TcpListener, TcpStream};
    let (ns, h) = setup();
    ns.run("ip", &["link", "add", "dummy0", "type", "dummy"]);
    ns.run("ip", &["addr", "add", "10.0.0.1/24", "dev", "dummy0"]);
    // The virtual address is local too, so that a client in the namespace
    // reaches the (local, masqueraded) real server through IPVS.
    ns.run("ip", &["addr", "add", "10.0.0.100/32", "dev", "dummy0"]);
    ns.run("ip", &["link", "set", "dummy0", "up"]);
    let nsid = NetNs::path(ns.path());
    // A listener and a client inside the namespace (sockets keep the
    // namespace they were created in).
    let listener =
        ipvsctl::netlink::netns::run_in(&nsid, || TcpListener::bind("10.0.0.1:8080")).unwrap();
    let key = ServiceKey::tcp(sa("10.0.0.100:80"));
    let rs = RealServer::new(sa("10.0.0.1:8080")).with_forward(ForwardMethod::Masquerade);
    let other = RealServer::new(sa("10.0.0.2:8080")).with_forward(ForwardMethod::Masquerade);
    let mut desired = DesiredState::new();
    desired
        .insert(
            VirtualServer::new(key).with_scheduler(Scheduler::RoundRobin),
            [rs],
        )
        .unwrap();
    let mut s = Syncer::with_options(
        &h,
        SyncOptions::default()
            .with_plan(ipvsctl::sync::PlanOptions::default().with_graceful_termination(true)),
    );
    assert_ok(&s.sync(&desired, Verify::Services).unwrap());
    let client = ipvsctl::netlink::netns::run_in(&nsid, || {
        TcpStream::connect_timeout(&sa("10.0.0.100:80"), Duration::from_secs(10))
    })
    .unwrap();
    let (server_side, _) = listener.accept().unwrap();
    let conns = |h: &Handle| -> Option<ConnCounts> {
        h.list_destinations(&key)
            .unwrap()
            .into_iter()
            .find(|d| d.server.addr == rs.addr)
            .map(|d| d.conns)
    };
    let c = conns(&h).unwrap();
    assert!(c.active + c.inactive > 0, "{c:?}");
    // rs leaves the desired state (replaced by another real server): set
    // to weight 0, kept.
    let mut without = DesiredState::new();
    without
        .insert(
            VirtualServer::new(key).with_scheduler(Scheduler::RoundRobin),
            [other],
        )
        .unwrap();
    let r = s.sync(&without, Verify::Services).unwrap();
    assert_ok(&r);
    assert_eq!(r.planned.drain_started, 1);
    assert_eq!(r.writes_sent, 2);
    let kept = h.list_destinations(&key).unwrap();
    assert_eq!(kept.len(), 2);
    assert_eq!(
        kept.iter()
            .find(|d| d.server.addr == rs.addr)
            .unwrap()
            .server
            .weight,
        0
    );
    // Still busy: the next sync re-reads its counts, writes nothing.
    let r = s.sync(&without, Verify::None).unwrap();
    assert_eq!(r.writes_sent, 0);
    assert_eq!(r.draining, 1);
    assert!(r.reads_sent >= 1);
    // Connection reset: IPVS keeps the entry for its CLOSE timeout (10 s),
    // then the real server is idle and the next sync deletes it.
    reset_on_close(&client);
    drop(client);
    drop(server_side);
    let t0 = Instant::now();
    loop {
        let r = s.sync(&without, Verify::Services).unwrap();
        assert_ok(&r);
        if r.destinations.deleted == 1 {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(200),
            "still draining: {:?}",
            conns(&h)
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let left: Vec<_> = h
        .list_destinations(&key)
        .unwrap()
        .into_iter()
        .map(|d| d.server)
        .collect();
    assert_eq!(left, vec![other]);
}

/// A real server with one TCP connection held open through IPVS drains at
/// weight 0 until its drain time (its own, shorter than the maximum) has
/// passed, and the first sync after that deletes it, connection or not.
#[test]
fn a_drain_held_open_by_a_connection_ends_at_its_deadline() {
    use std::net::{TcpListener, TcpStream};
    let (ns, h) = setup();
    ns.ip_batch(
        &[
            "link add dummy0 type dummy",
            "addr add 10.0.0.1/24 dev dummy0",
            "addr add 10.0.0.100/32 dev dummy0",
            "link set dummy0 up",
        ]
        .map(String::from),
    );
    let nsid = NetNs::path(ns.path());
    let listener =
        ipvsctl::netlink::netns::run_in(&nsid, || TcpListener::bind("10.0.0.1:8080")).unwrap();
    let key = ServiceKey::tcp(sa("10.0.0.100:80"));
    let rs = RealServer::new(sa("10.0.0.1:8080")).with_forward(ForwardMethod::Masquerade);
    let vs = VirtualServer::new(key).with_scheduler(Scheduler::RoundRobin);
    let mut desired = DesiredState::new();
    desired.insert(vs.clone(), [rs]).unwrap();
    let plan = ipvsctl::sync::PlanOptions::default()
        .with_graceful_termination(true)
        .with_max_drain(Duration::from_secs(60));
    let mut s = Syncer::with_options(&h, SyncOptions::default().with_plan(plan));
    assert_ok(&s.sync(&desired, Verify::Services).unwrap());
    let client = ipvsctl::netlink::netns::run_in(&nsid, || {
        TcpStream::connect_timeout(&sa("10.0.0.100:80"), Duration::from_secs(10))
    })
    .unwrap();
    let (server_side, _) = listener.accept().unwrap();
    let ours = |h: &Handle| {
        h.list_destinations(&key)
            .unwrap()
            .into_iter()
            .find(|d| d.server.addr == rs.addr)
    };
    // The endpoint terminates with a grace period of 1.5 s.
    s.set_drain_time(key, rs.addr, Duration::from_millis(1500));
    desired.remove_destinations(&key, [rs.addr]).unwrap();
    let r = s.sync(&desired, Verify::Services).unwrap();
    assert_ok(&r);
    assert_eq!(r.planned.drain_started, 1);
    let drain = *s.drains().get(&key, &rs.addr).unwrap();
    assert!(drain.set_by_syncer);
    let deadline = drain.deadline(plan.max_drain).unwrap();
    let give_up = Instant::now() + Duration::from_secs(10);
    let mut before = 0;
    loop {
        let d = ours(&h).expect("deleted before its deadline");
        assert_eq!(d.server.weight, 0);
        assert!(d.conns.active + d.conns.inactive > 0, "{:?}", d.conns);
        let t0 = Instant::now();
        let r = s.sync(&desired, Verify::None).unwrap();
        assert_ok(&r);
        if Instant::now() < deadline {
            // Began and ended before the deadline: the drain goes on.
            assert_eq!(r.draining, 1, "{r:?}");
            assert!(r.drains_ended_at_deadline.is_empty(), "{r:?}");
            before += 1;
        }
        if !r.drains_ended_at_deadline.is_empty() {
            assert_eq!(r.drains_ended_at_deadline, [(key, rs.addr)]);
            assert_eq!(r.drains_ended_idle, 0);
            assert_eq!(r.destinations.deleted, 1);
            break;
        }
        // The first sync that began at or after the deadline ends it.
        assert!(t0 < deadline, "a sync past the deadline kept it: {r:?}");
        assert!(Instant::now() < give_up, "still draining: {:?}", ours(&h));
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(before >= 1, "no sync ran before the deadline");
    assert!(ours(&h).is_none());
    assert!(s.drains().is_empty(), "{:?}", s.drains());
    // The connection was still open all along.
    drop(client);
    drop(server_side);
}

/// A health checker's weight 0 on a desired real server stays through
/// verifying syncs when weights are kept (other settings still follow the
/// desired state), and is put back to the desired weight without it.
#[test]
fn a_health_checkers_weight_survives_verifying_syncs_only_with_kept_weights() {
    let (_ns, h) = setup();
    let key = ServiceKey::tcp(sa("10.0.0.100:80"));
    let a = RealServer::new(sa("10.0.0.1:80")).with_weight(5);
    let b = RealServer::new(sa("10.0.0.2:80")).with_weight(5);
    let vs = VirtualServer::new(key).with_scheduler(Scheduler::RoundRobin);
    let mut desired = DesiredState::new();
    desired.insert(vs.clone(), [a, b]).unwrap();
    let keep = ipvsctl::sync::PlanOptions::default().with_keep_weights(true);
    let mut s = Syncer::with_options(&h, SyncOptions::default().with_plan(keep));
    assert_ok(&s.sync(&desired, Verify::Full).unwrap());
    // (weight, upper threshold) of a, then b.
    let weights = |h: &Handle| -> Vec<(u32, u32)> {
        let mut d = h.list_destinations(&key).unwrap();
        d.sort_by_key(|d| d.server.addr);
        d.into_iter()
            .map(|d| (d.server.weight, d.server.upper_threshold))
            .collect()
    };
    assert_eq!(weights(&h), [(5, 0), (5, 0)]);
    // The health checker quiesces a.
    h.update_destination(&key, &a.with_weight(0)).unwrap();
    for _ in 0..3 {
        let r = s.sync(&desired, Verify::Full).unwrap();
        assert_ok(&r);
        assert_eq!(r.writes_sent, 0, "{r:?}");
        assert_eq!(weights(&h), [(0, 0), (5, 0)]);
    }
    // a's threshold and b's weight change: a is updated with the kernel's
    // weight, b (weight only) not at all.
    desired
        .upsert_destinations(&key, [a.with_thresholds(100, 10), b.with_weight(7)])
        .unwrap();
    let r = s.sync(&desired, Verify::Full).unwrap();
    assert_ok(&r);
    assert_eq!(r.writes_sent, 1, "{r:?}");
    assert_eq!(weights(&h), [(0, 100), (5, 0)]);
    // Without the option, the desired weights are written back.
    s.options_mut().plan.keep_weights = false;
    let r = s.sync(&desired, Verify::Full).unwrap();
    assert_ok(&r);
    assert_eq!(r.writes_sent, 2, "{r:?}");
    assert_eq!(weights(&h), [(5, 100), (7, 0)]);
}

/// Sets SO_LINGER 0 so that closing the socket sends a reset (the IPVS
/// connection then expires after the 10 s CLOSE timeout, not TIME_WAIT's
/// two minutes).
fn reset_on_close(s: &std::net::TcpStream) {
    rustix::net::sockopt::set_socket_linger(s, Some(Duration::ZERO)).unwrap();
}

/// `desired` without the services `keys`.
fn without(desired: &DesiredState, keys: &[ServiceKey]) -> DesiredState {
    let mut d = DesiredState::new();
    for ds in desired.services() {
        if !keys.contains(&ds.service().key) {
            d.insert(ds.service().clone(), ds.destinations().iter().copied())
                .unwrap();
        }
    }
    d
}

/// A service someone else made (ipvsadm here) with the key of a desired one
/// is a conflict for the default scope: reported, left exactly as it is, and
/// never deleted; `adopt` takes it over.
#[test]
fn same_key_foreign_services_are_conflicts_until_adopted() {
    let (ns, h) = setup();
    ns.ipvsadm("-A -t 10.96.0.1:80 -s wlc");
    ns.ipvsadm("-a -t 10.96.0.1:80 -r 192.0.2.10:80 -m -w 3");
    let theirs = ServiceKey::tcp(sa("10.96.0.1:80"));
    let foreign = dump(&h);
    let desired = cluster(3, 2, 1); // 10.96.0.1..3:80
    let mine = without(&desired, &[theirs]);
    let conflicts = |r: &SyncReport| r.conflicts.iter().map(|c| c.key).collect::<Vec<_>>();
    // Found by the first sync's read.
    let mut s = Syncer::new(&h);
    let r = s.sync(&desired, Verify::Services).unwrap();
    assert_converged(&h, &foreign, &table_of(&mine));
    assert_ok(&r);
    assert_eq!(conflicts(&r), vec![theirs]);
    assert_eq!(
        r.conflicts[0].found.as_ref().map(|vs| vs.scheduler.clone()),
        Some(Scheduler::WeightedLeastConnection)
    );
    assert!(!r.is_ok());
    assert!(!s.ledger().owned().contains(&theirs));
    assert_eq!((r.services.added, r.destinations.added), (2, 4));
    // Found by a trusting sync (no read): the kernel refuses the adds, and
    // the real servers that would have followed them are not sent. To a
    // second syncer, the services of the first are foreign too.
    let mut t = Syncer::new(&h);
    assert_ok(&t.sync(&DesiredState::new(), Verify::Full).unwrap());
    let r = t.sync(&desired, Verify::None).unwrap();
    assert_eq!(r.verified, Some(Verify::None));
    let all: Vec<ServiceKey> = desired.services().iter().map(|s| s.service().key).collect();
    assert_eq!(conflicts(&r), all);
    assert_eq!(r.conflicts[0].found.as_ref().map(|vs| vs.key), Some(theirs));
    assert_eq!(r.services.added + r.destinations.added, 0, "{r:#?}");
    assert_eq!(r.writes_sent, 3);
    assert_converged(&h, &foreign, &table_of(&mine));
    drop(t);
    // Leaving the desired state does not delete it.
    let r = s.sync(&mine, Verify::Full).unwrap();
    assert_ok(&r);
    assert!(r.conflicts.is_empty());
    assert_eq!(r.writes_sent, 0);
    assert_converged(&h, &foreign, &table_of(&mine));
    let r = s.sync(&desired, Verify::None).unwrap();
    assert_eq!(conflicts(&r), vec![theirs]);
    assert_converged(&h, &foreign, &table_of(&mine));
    // Adopted, it is managed like the syncer's own.
    s.adopt([theirs]);
    let r = s.sync(&desired, Verify::Services).unwrap();
    assert_ok(&r);
    assert!(r.is_ok() && r.conflicts.is_empty());
    assert_eq!((r.services.updated, r.destinations.deleted), (1, 1));
    assert_converged(&h, &Table::new(), &table_of(&desired));
    let r = s.sync(&mine, Verify::Services).unwrap();
    assert_eq!(r.services.deleted, 1);
    assert!(!dump(&h).contains_key(&theirs));
}

/// A trusting sync large enough to run on the writer's helper threads
/// (800 operations), with every tenth desired service someone else's: the
/// kernel refuses those adds, the real servers are sent for every other
/// service and for none of the refused ones, and each operation sent is
/// accounted for.
#[test]
fn refused_claims_withhold_their_real_servers_in_a_large_sync() {
    refused_claims_withhold_their_real_servers(SyncOptions::default());
}

/// The same in parts of 16 operations: the adds go in 50 rounds of four,
/// each sent after the real servers of the round before it, and a refused
/// add withholds the real servers of its own service only.
#[test]
fn refused_claims_in_many_rounds_withhold_only_their_own_real_servers() {
    let options = SyncOptions::default().with_part_size(NonZeroUsize::new(16).unwrap());
    refused_claims_withhold_their_real_servers(options);
}

fn refused_claims_withhold_their_real_servers(options: SyncOptions) {
    let (ns, h) = setup();
    let desired = cluster(200, 3, 1);
    // Keys as `cluster` makes them: 10.96.0.1:80 and on.
    let addrs: Vec<String> = (0..200)
        .step_by(10)
        .map(|i| format!("10.96.0.{}:80", i + 1))
        .collect();
    let theirs: Vec<ServiceKey> = addrs.iter().map(|a| ServiceKey::tcp(sa(a))).collect();
    for addr in &addrs {
        ns.ipvsadm(&format!("-A -t {addr} -s wlc"));
        ns.ipvsadm(&format!("-a -t {addr} -r 192.0.2.10:80 -m -w 3"));
    }
    assert!(theirs.iter().all(|k| desired.contains(k)));
    let foreign = dump(&h);
    let mine = without(&desired, &theirs);
    let mut s = Syncer::with_options(&h, options);
    // Knows the table (and owns none of it), then trusts its memory: every
    // desired service is an add, and the kernel finds the foreign ones.
    assert_ok(&s.sync(&DesiredState::new(), Verify::Full).unwrap());
    let r = s.sync(&desired, Verify::None).unwrap();
    let mut conflicts: Vec<ServiceKey> = r.conflicts.iter().map(|c| c.key).collect();
    conflicts.sort();
    let mut want = theirs.clone();
    want.sort();
    assert_eq!(conflicts, want);
    assert!(r.failed.is_empty() && r.retried.is_empty(), "{r:#?}");
    assert_eq!((r.services.added, r.destinations.added), (180, 540));
    assert_eq!(r.writes_sent, 200 + 540);
    assert_converged(&h, &foreign, &table_of(&mine));
    for key in &theirs {
        assert!(!s.ledger().owned().contains(key));
    }
}

/// A claimed service add the kernel refuses (here: a scheduler it does not
/// have) gets no real servers: they are counted as withheld, not sent to
/// fail with "no such service" (or, had another tool made the service in
/// between, to land on it), and the ledger keeps nothing of the claim.
#[test]
fn a_refused_claim_gets_no_real_servers() {
    let (_ns, h) = setup();
    let mut desired = cluster(2, 2, 1);
    let odd = ServiceKey::tcp(sa("10.96.9.1:80"));
    let rs = |i: u8| RealServer::new(sa(&format!("10.244.9.{i}:8080")));
    desired
        .insert(
            VirtualServer::new(odd).with_scheduler(Scheduler::from_name("ipvsctlnone")),
            [rs(1), rs(2)],
        )
        .unwrap();
    let mut s = Syncer::new(&h);
    let r = s.sync(&desired, Verify::Services).unwrap();
    let failed: Vec<&Write> = r.failed.iter().map(|f| &f.write).collect();
    assert!(
        matches!(failed.as_slice(), [Write::AddService(vs)] if vs.key == odd),
        "{r:#?}"
    );
    assert!(
        matches!(r.failed[0].error, Error::UnknownScheduler { .. }),
        "{r:#?}"
    );
    assert_eq!(r.withheld, 2, "{r:#?}");
    assert_eq!(r.writes_sent, 3 + 4);
    assert_eq!((r.services.added, r.destinations.added), (2, 4));
    assert!(s.ledger().get(&odd).is_none());
    assert!(!dump(&h).contains_key(&odd));
}

/// An owned service deleted behind the syncer's back leaves its ledger as
/// soon as a read shows it gone, and the store hears of it; the same key
/// made later by another tool is someone else's: a syncer that no longer
/// desires it leaves it alone, before and after a restart with the saved
/// ledger.
#[test]
fn an_owned_service_deleted_by_hand_and_made_again_by_another_tool_is_left_alone() {
    use ipvsctl::sync::{Ledger, Ownership};
    use std::sync::{Arc, Mutex};
    let (ns, h) = setup();
    let saved: Arc<Mutex<Ledger>> = Arc::default();
    let store = |saved: &Arc<Mutex<Ledger>>| {
        let saved = Arc::clone(saved);
        move |l: &Ledger, _: &[ServiceKey]| {
            *saved.lock().unwrap() = l.clone();
            Ok(())
        }
    };
    let desired = cluster(3, 2, 1);
    let gone = ServiceKey::tcp(sa("10.96.0.2:80"));
    let mut s = Syncer::new(&h).with_ledger(Ledger::new(), store(&saved));
    assert!(s.sync(&desired, Verify::Services).unwrap().is_ok());
    assert_eq!(saved.lock().unwrap().get(&gone), Some(Ownership::Owned));
    // Deleted by hand, then dropped from the desired state.
    ns.ipvsadm("-D -t 10.96.0.2:80");
    let rest = without(&desired, &[gone]);
    let r = s.sync(&rest, Verify::Services).unwrap();
    assert!(r.is_ok() && r.writes_sent == 0, "{r:#?}");
    assert_eq!(s.ledger().get(&gone), None);
    assert_eq!(saved.lock().unwrap().get(&gone), None);
    // Another tool makes the key.
    ns.ipvsadm("-A -t 10.96.0.2:80 -s wlc");
    ns.ipvsadm("-a -t 10.96.0.2:80 -r 192.0.2.10:80 -m -w 3");
    let theirs = dump(&h).remove(&gone).expect("ipvsadm's service");
    for verify in [Verify::None, Verify::Services, Verify::Full] {
        let r = s.sync(&rest, verify).unwrap();
        assert!(r.is_ok() && r.writes_sent == 0, "{verify:?}: {r:#?}");
        assert_eq!(dump(&h).get(&gone), Some(&theirs), "{verify:?}");
    }
    // A restart with the saved ledger leaves it alone too.
    drop(s);
    let ledger = saved.lock().unwrap().clone();
    let mut s = Syncer::new(&h).with_ledger(ledger, store(&saved));
    let r = s.sync(&rest, Verify::Services).unwrap();
    assert!(r.is_ok() && r.writes_sent == 0, "{r:#?}");
    assert_eq!(dump(&h).get(&gone), Some(&theirs));
    // Desired again, it is a conflict, not taken over.
    let r = s.sync(&desired, Verify::Services).unwrap();
    assert_eq!(r.conflicts.len(), 1, "{r:#?}");
    assert_eq!(dump(&h).get(&gone), Some(&theirs));
}
