//! Rolling verification (`Verify::Rolling`) against a real kernel's IPVS,
//! each test in its own fresh network namespace: 40 services of 3 real
//! servers each are synced, then changed behind the syncer's back through a
//! second handle and `ipvsadm` (real servers removed, added and reweighted,
//! a service deleted) in services chosen at random; rolling syncs with
//! `syncs` = 2, 5 and 10 (full and incremental) repair every drift within
//! that many syncs, show their progress in the report, never touch a
//! service of another tool, and write nothing when nothing drifted.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use ipvsctl::model::{ForwardMethod, RealServer, ServiceKey, VirtualServer};
use ipvsctl::sync::{DesiredState, SyncReport, Syncer, Verify};
use ipvsctl::{Handle, HandleOptions, NetNs};
use support::netns_with_handle as setup;

type Table = BTreeMap<ServiceKey, (VirtualServer, BTreeMap<SocketAddr, RealServer>)>;

const SERVICES: u8 = 40;
const SERVERS: u8 = 3;

fn key(i: u8) -> ServiceKey {
    ServiceKey::tcp(format!("10.96.0.{}:80", i + 1).parse().unwrap())
}

fn server(i: u8, j: u8) -> RealServer {
    RealServer::new(format!("10.244.{i}.{}:8080", j + 1).parse().unwrap())
        .with_weight(2)
        .with_forward(ForwardMethod::Masquerade)
}

/// Services `10.96.0.<i+1>:80`, each with 3 real servers of weight 2.
fn cluster() -> DesiredState {
    let mut d = DesiredState::new();
    for i in 0..SERVICES {
        d.insert(
            VirtualServer::new(key(i)),
            (0..SERVERS).map(|j| server(i, j)),
        )
        .unwrap();
    }
    d
}

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

/// The services whose kernel state differs from the desired one.
fn drifted(h: &Handle, desired: &DesiredState) -> BTreeSet<ServiceKey> {
    let want = table_of(desired);
    let got = kernel_table(h, want.keys().copied());
    want.iter()
        .filter(|(k, v)| got.get(k) != Some(v))
        .map(|(k, _)| *k)
        .collect()
}

fn assert_ok(r: &SyncReport) {
    assert!(
        r.is_ok(),
        "failures: {:?}, conflicts: {:?}, aborted: {:?}",
        r.failed
            .iter()
            .map(|f| (&f.write, f.error.to_string()))
            .collect::<Vec<_>>(),
        r.conflicts,
        r.aborted
    );
}

/// xorshift64*, seeded from the clock unless `IPVSCTL_TEST_SEED` is set;
/// the seed is printed so that a failure can be replayed.
struct Rng(u64);

impl Rng {
    fn new(test: &str) -> Rng {
        let seed = std::env::var("IPVSCTL_TEST_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .unwrap()
                    .as_nanos() as u64
            });
        println!("{test}: IPVSCTL_TEST_SEED={seed}");
        Rng(seed.max(1))
    }

    fn below(&mut self, n: u64) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 32) % n
    }
}

/// Drift in six services chosen at random, each changed once behind the
/// syncer's back: two real servers removed, two reweighted, one added
/// (through `other`, a handle of the syncer's namespace that the syncer
/// knows nothing of), and one service deleted with `ipvsadm`. Returns the
/// services changed.
fn make_drift(
    ns: &support::TestNetns,
    other: &Handle,
    rng: &mut Rng,
) -> (BTreeSet<ServiceKey>, ServiceKey) {
    let mut picked = BTreeSet::new();
    while picked.len() < 6 {
        picked.insert(rng.below(u64::from(SERVICES)) as u8);
    }
    let picked: Vec<u8> = picked.into_iter().collect();
    let mut order: Vec<u8> = picked.clone();
    // Which of them gets which drift, at random too.
    for i in (1..order.len()).rev() {
        order.swap(i, rng.below(i as u64 + 1) as usize);
    }
    let j = |rng: &mut Rng| rng.below(u64::from(SERVERS)) as u8;
    for &i in &order[0..2] {
        other
            .delete_destination(&key(i), server(i, j(rng)).addr)
            .unwrap();
    }
    for &i in &order[2..4] {
        other
            .update_destination(&key(i), &server(i, j(rng)).with_weight(7))
            .unwrap();
    }
    other
        .add_destination(&key(order[4]), &server(order[4], 9))
        .unwrap();
    let deleted = key(order[5]);
    let ipvsadm = match deleted {
        ServiceKey::Addr { addr, .. } => format!("-D -t {addr}"),
        _ => unreachable!("TCP services only"),
    };
    ns.ipvsadm(&ipvsadm);
    (picked.into_iter().map(key).collect(), deleted)
}

/// A rolling sync: with `Syncer::sync`, or with `Syncer::sync_changes` and
/// no change recorded.
fn rolling_sync(
    s: &mut Syncer<&Handle>,
    desired: &mut DesiredState,
    syncs: u32,
    incremental: bool,
) -> SyncReport {
    let verify = Verify::rolling(NonZeroU32::new(syncs).unwrap());
    let r = if incremental {
        s.sync_changes(desired, verify).unwrap()
    } else {
        s.sync(desired, verify).unwrap()
    };
    assert_ok(&r);
    assert_eq!(r.verified, Some(verify));
    r
}

fn rolling_repairs_drift_within(syncs: u32, incremental: bool) {
    let started = Instant::now();
    let name = format!("syncs {syncs}, incremental {incremental}");
    let (ns, h) = setup();
    // Another tool's service, never to be touched.
    ns.ipvsadm("-A -u 192.0.2.53:53 -s rr");
    ns.ipvsadm("-a -u 192.0.2.53:53 -r 192.0.2.10:53 -m -w 3");
    let foreign_key = ServiceKey::udp("192.0.2.53:53".parse().unwrap());
    let foreign = kernel_table(&h, [foreign_key]);
    let other = Handle::open(&NetNs::path(ns.path()), &HandleOptions::new()).unwrap();
    let mut desired = cluster();
    let mut s = Syncer::new(&h);
    let r = s.sync(&desired, Verify::Services).unwrap();
    assert_ok(&r);
    assert_eq!(r.services.added, usize::from(SERVICES));
    desired.clear_changes();
    let share = usize::from(SERVICES).div_ceil(syncs as usize);

    // Nothing drifted: a rolling sync reads its share and writes nothing.
    let r = rolling_sync(&mut s, &mut desired, syncs, incremental);
    assert_eq!(r.writes_sent, 0, "{name}: {r:?}");
    assert_eq!(r.planned.services.added + r.planned.services.updated, 0);
    assert_eq!(r.verified_in_full, share, "{name}");
    assert!(r.max_unverified_syncs.unwrap() < u64::from(syncs), "{name}");

    let mut rng = Rng::new(&name);
    let (changed, deleted) = make_drift(&ns, &other, &mut rng);
    let mut left = drifted(&h, &desired);
    assert_eq!(left, changed, "{name}");
    let mut verified = 0;
    let mut repairs = 0;
    for n in 1..=syncs {
        let r = rolling_sync(&mut s, &mut desired, syncs, incremental);
        verified += r.verified_in_full;
        repairs += r.writes_sent;
        // Each sync verifies at least its share, and no service has gone
        // `syncs` rolling syncs unverified.
        assert!(r.verified_in_full >= share, "{name}, sync {n}: {r:?}");
        assert!(
            r.max_unverified_syncs.unwrap() < u64::from(syncs),
            "{name}, sync {n}: {r:?}"
        );
        let now = drifted(&h, &desired);
        assert!(
            now.is_subset(&left),
            "{name}, sync {n}: {now:?} not within {left:?}"
        );
        if n == 1 && !incremental {
            // The service table check finds the deleted service at once.
            assert!(!now.contains(&deleted), "{name}");
            assert!(r.services.added == 1, "{name}: {r:?}");
        }
        println!(
            "{name}: sync {n}: {} verified in full, {} writes, {} services still drifted, \
             the stalest {} syncs old",
            r.verified_in_full,
            r.writes_sent,
            now.len(),
            r.max_unverified_syncs.unwrap()
        );
        left = now;
    }
    assert!(
        left.is_empty(),
        "{name}: {left:?} not repaired in {syncs} syncs"
    );
    assert!(verified >= usize::from(SERVICES), "{name}");
    // One write per drift: two real servers added back, two reweighted, one
    // deleted, and the service with its three real servers.
    assert_eq!(repairs, 2 + 2 + 1 + 1 + usize::from(SERVERS), "{name}");
    assert_eq!(
        kernel_table(&h, (0..SERVICES).map(key)),
        table_of(&desired),
        "{name}"
    );
    assert_eq!(kernel_table(&h, [foreign_key]), foreign, "{name}");

    // Nothing drifted since: rolling syncs write nothing.
    for _ in 0..2 {
        let r = rolling_sync(&mut s, &mut desired, syncs, incremental);
        assert_eq!(r.writes_sent, 0, "{name}: {r:?}");
        assert_eq!(r.verified_in_full, share, "{name}");
    }
    println!("{name}: {:.2} s", started.elapsed().as_secs_f64());
}

#[test]
fn rolling_syncs_of_two_repair_drift_within_two() {
    rolling_repairs_drift_within(2, false);
}

#[test]
fn rolling_syncs_of_five_repair_drift_within_five() {
    rolling_repairs_drift_within(5, false);
}

#[test]
fn rolling_syncs_of_ten_repair_drift_within_ten() {
    rolling_repairs_drift_within(10, false);
}

#[test]
fn incremental_rolling_syncs_of_five_repair_drift_within_five() {
    rolling_repairs_drift_within(5, true);
}
