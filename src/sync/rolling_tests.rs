//! Rolling verification ([`Verify::Rolling`]) without a kernel: the
//! syncer's own logic (`Core`, the same code a `Syncer` runs) drives a table
//! in memory that answers as IPVS does, while another hand changes the
//! syncer's services behind its back (real servers removed, added and
//! reweighted, schedulers changed, services deleted) and another tool keeps
//! services of its own, one of them at a key the syncer desires.
//!
//! Checked, over random runs of desired-state changes, drift and syncs of
//! every kind (full and incremental, rolling and not, with any number of
//! syncs per cycle):
//!
//! * after any `syncs` consecutive rolling syncs, every drift made before
//!   them is repaired: each drifted real server and service is as desired
//!   (or gone, when not desired);
//! * a rolling sync made when nothing drifted for `syncs` rolling syncs and
//!   nothing changed since the last sync writes nothing;
//! * after a rolling sync, no managed service has gone `syncs` rolling
//!   syncs without a full verification (`max_unverified_syncs`);
//! * no write ever touches another tool's service.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};

use proptest::prelude::*;

use super::kernel::Kernel;
use super::state::ObservedDest;
use super::syncer::Core;
use super::{DesiredState, ServiceCheck, SyncOptions, SyncReport, Verify};
use crate::batch::Write;
use crate::capabilities::KernelVersion;
use crate::conntrack::{ConntrackError, DeleteReport, Filter};
use crate::handle::describe;
use crate::model::{AddressFamily, RealServer, Scheduler, ServiceKey, VirtualServer};
use crate::{Error, Result};

/// Keys the syncer may desire: 0 to 7; key 7 is held by another tool from
/// the start. Keys 8 and 9 are the other tool's alone.
const KEYS: u8 = 8;
const CONFLICT: u8 = 7;
const SERVERS: u8 = 4;

fn key(i: u8) -> ServiceKey {
    ServiceKey::tcp(SocketAddr::from(([10, 96, 0, i + 1], 80)))
}

fn addr(i: u8) -> SocketAddr {
    SocketAddr::from(([10, 244, 0, i % SERVERS + 1], 8080))
}

fn service(i: u8, wlc: bool) -> VirtualServer {
    let s = if wlc { "wlc" } else { "rr" };
    VirtualServer::new(key(i)).with_scheduler(Scheduler::from_name(s))
}

fn servers(mask: u8, weight: u32) -> Vec<RealServer> {
    (0..SERVERS)
        .filter(|i| mask & (1 << i) != 0)
        .map(|i| RealServer::new(addr(i)).with_weight(weight))
        .collect()
}

fn rolling(syncs: u32) -> Verify {
    Verify::rolling(NonZeroU32::new(syncs).unwrap())
}

#[derive(Debug, Clone)]
struct Entry {
    vs: VirtualServer,
    dests: BTreeMap<SocketAddr, RealServer>,
    by_agent: bool,
}

#[derive(Debug, Default)]
struct World {
    table: BTreeMap<ServiceKey, Entry>,
    violations: Vec<String>,
    /// Service dumps and batches of service lookups asked for.
    dumps: usize,
    lookups: usize,
}

impl World {
    fn apply(&mut self, op: &Write) -> std::result::Result<(), Error> {
        let what = describe(op.cmd(), &op.target());
        let k = op.key();
        let entry = self.table.get_mut(&k);
        // An add of a key another tool holds is refused and changes
        // nothing: it is how a trusting syncer learns of it.
        if let Some(e) = &entry
            && !e.by_agent
            && !matches!(op, Write::AddService(_))
        {
            self.violations
                .push(format!("{op:?} on another tool's service"));
        }
        match (op, entry) {
            (Write::AddService(_), Some(_)) => Err(Error::ServiceExists { op: what, key: k }),
            (Write::AddService(vs), None) => {
                let entry = Entry {
                    vs: vs.clone(),
                    dests: BTreeMap::new(),
                    by_agent: true,
                };
                self.table.insert(k, entry);
                Ok(())
            }
            (_, None) => Err(Error::ServiceNotFound { op: what, key: k }),
            (Write::UpdateService(vs), Some(e)) => {
                e.vs = vs.clone();
                Ok(())
            }
            (Write::DeleteService(_), Some(_)) => {
                self.table.remove(&k);
                Ok(())
            }
            (Write::AddDestination(_, rs), Some(e)) => {
                if e.dests.contains_key(&rs.addr) {
                    return Err(Error::DestinationExists {
                        op: what,
                        service: k,
                        server: rs.addr,
                    });
                }
                e.dests.insert(rs.addr, *rs);
                Ok(())
            }
            (Write::UpdateDestination(_, rs), Some(e)) => match e.dests.get_mut(&rs.addr) {
                Some(d) => {
                    *d = *rs;
                    Ok(())
                }
                None => Err(Error::DestinationNotFound {
                    op: what,
                    service: k,
                    server: rs.addr,
                }),
            },
            (Write::DeleteDestination(_, a), Some(e)) => match e.dests.remove(a) {
                Some(_) => Ok(()),
                None => Err(Error::DestinationNotFound {
                    op: what,
                    service: k,
                    server: *a,
                }),
            },
        }
    }
}

struct Table(Arc<Mutex<World>>);

impl Kernel for Table {
    fn services(&mut self, _expected: usize, mut each: impl FnMut(VirtualServer)) -> Result<()> {
        let mut w = self.0.lock().unwrap();
        w.dumps += 1;
        w.table.values().for_each(|e| each(e.vs.clone()));
        Ok(())
    }

    fn lookup(&mut self, keys: &[ServiceKey]) -> Result<Vec<Option<VirtualServer>>> {
        let mut w = self.0.lock().unwrap();
        w.lookups += 1;
        Ok(keys
            .iter()
            .map(|k| w.table.get(k).map(|e| e.vs.clone()))
            .collect())
    }

    fn destinations(
        &mut self,
        keys: &[ServiceKey],
        _sockets: usize,
        mut each: impl FnMut(usize, Result<Vec<ObservedDest>>),
    ) -> Result<()> {
        let mut w = self.0.lock().unwrap();
        for (i, k) in keys.iter().enumerate() {
            match w.table.get(k) {
                Some(e) => {
                    if !e.by_agent {
                        w.violations
                            .push(format!("the real servers of another tool's {k} read"));
                        return Err(Error::Lost {
                            op: crate::Operation::ListDestinations(*k),
                        });
                    }
                    each(
                        i,
                        Ok(e.dests
                            .values()
                            .map(|rs| ObservedDest::new(*rs, None))
                            .collect()),
                    )
                }
                None => each(
                    i,
                    Err(Error::ServiceNotFound {
                        op: crate::Operation::ListDestinations(*k),
                        key: *k,
                    }),
                ),
            }
        }
        Ok(())
    }

    fn write(
        &mut self,
        ops: &[Write],
        _one_by_one: bool,
        mut on_result: impl FnMut(usize, std::result::Result<(), Error>),
    ) -> std::result::Result<(), Error> {
        let mut w = self.0.lock().unwrap();
        for (i, op) in ops.iter().enumerate() {
            let r = w.apply(op);
            on_result(i, r);
        }
        Ok(())
    }

    fn forget_flows(
        &mut self,
        filters: &[Filter],
    ) -> std::result::Result<DeleteReport, ConntrackError> {
        Ok(DeleteReport {
            per_filter: vec![Default::default(); filters.len()],
            ..DeleteReport::default()
        })
    }
}

/// A world with the other tool's services: one at a key the syncer may
/// desire, two at keys it never desires.
fn world() -> Arc<Mutex<World>> {
    let mut w = World::default();
    for i in [CONFLICT, 8, 9] {
        w.table.insert(
            key(i),
            Entry {
                vs: VirtualServer::new(key(i)).with_scheduler(Scheduler::from_name("sh")),
                dests: servers(0b11, 5)
                    .into_iter()
                    .map(|rs| (rs.addr, rs))
                    .collect(),
                by_agent: false,
            },
        );
    }
    Arc::new(Mutex::new(w))
}

/// How a sync is made.
#[derive(Debug, Clone, Copy)]
enum How {
    /// `sync` with `Verify::Rolling`.
    Rolling,
    /// `sync_changes` with `Verify::Rolling`.
    RollingChanges,
    /// `sync_changes` with `Verify::None`, as on an event.
    Changes,
    /// `sync` with `Verify::Services`.
    Services,
    /// `sync` with `Verify::Full`.
    Full,
}

impl How {
    fn is_rolling(self) -> bool {
        matches!(self, How::Rolling | How::RollingChanges)
    }
}

fn sync(
    core: &mut Core,
    world: &Arc<Mutex<World>>,
    desired: &mut DesiredState,
    how: How,
    syncs: u32,
) -> SyncReport {
    let mut table = Table(Arc::clone(world));
    let r = match how {
        How::Rolling => core.sync(&mut table, desired, rolling(syncs)),
        How::Services => core.sync(&mut table, desired, Verify::Services),
        How::Full => core.sync(&mut table, desired, Verify::Full),
        How::RollingChanges | How::Changes => {
            let keys = desired.take_changes();
            let v = if how.is_rolling() {
                rolling(syncs)
            } else {
                Verify::None
            };
            core.sync_services(&mut table, desired, &keys, v)
        }
    };
    let r = r.expect("no read fails here");
    assert!(r.failed.is_empty() && r.aborted.is_none(), "{r:?}");
    r
}

/// What the other hand does to one of the syncer's services.
#[derive(Debug, Clone, Copy)]
enum Drift {
    RemoveServer(u8),
    AddServer(u8, u32),
    Reweight(u8, u32),
    Reschedule,
    DeleteService,
}

/// One element of a service: its settings (`None`) or a real server.
type Element = (ServiceKey, Option<SocketAddr>);

/// Applies a drift to the syncer's service `k`, if there; returns the
/// elements it changed.
fn drift(w: &mut World, k: ServiceKey, d: Drift) -> Vec<Element> {
    let Some(e) = w.table.get_mut(&k).filter(|e| e.by_agent) else {
        return Vec::new();
    };
    match d {
        Drift::RemoveServer(i) => e
            .dests
            .remove(&addr(i))
            .map(|_| vec![(k, Some(addr(i)))])
            .unwrap_or_default(),
        Drift::AddServer(i, weight) => {
            if e.dests.contains_key(&addr(i)) {
                return Vec::new();
            }
            e.dests
                .insert(addr(i), RealServer::new(addr(i)).with_weight(weight));
            vec![(k, Some(addr(i)))]
        }
        Drift::Reweight(i, weight) => match e.dests.get_mut(&addr(i)) {
            Some(rs) if rs.weight != weight => {
                rs.weight = weight;
                vec![(k, Some(addr(i)))]
            }
            _ => Vec::new(),
        },
        Drift::Reschedule => {
            let other = if e.vs.scheduler == Scheduler::from_name("lc") {
                "wrr"
            } else {
                "lc"
            };
            e.vs = e.vs.clone().with_scheduler(Scheduler::from_name(other));
            vec![(k, None)]
        }
        Drift::DeleteService => {
            w.table.remove(&k);
            vec![(k, None)]
        }
    }
}

/// Whether the kernel has `element` as desired (a service not desired must
/// be gone).
fn as_desired(w: &World, desired: &DesiredState, (k, a): Element) -> bool {
    let have = w.table.get(&k).filter(|e| e.by_agent);
    let want = desired.get(&k);
    match a {
        None => have.map(|e| &e.vs) == want.map(|ds| ds.service()),
        Some(a) => {
            let have_rs = have.and_then(|e| e.dests.get(&a));
            let want_rs = want.and_then(|ds| ds.destinations().iter().find(|rs| rs.addr == a));
            // A service missing or with other settings is the other
            // element's drift; its real servers follow the service.
            have.is_some() == want.is_some() && have_rs == want_rs
        }
    }
}

#[derive(Debug, Clone)]
enum Step {
    Desire {
        key: u8,
        wlc: bool,
        mask: u8,
        weight: u32,
    },
    /// Many services at once, as when a namespace of services comes.
    DesireMany {
        keys: u8,
        mask: u8,
    },
    /// Many services leave at once, as when a namespace of services goes.
    Undesire {
        keys: u8,
    },
    Drift {
        key: u8,
        drift: Drift,
    },
    OtherToolChurns {
        key: u8,
        mask: u8,
    },
    Sync(How),
}

fn step() -> impl Strategy<Value = Step> {
    let drift = prop_oneof![
        3 => (0..SERVERS).prop_map(Drift::RemoveServer),
        2 => (0..SERVERS, 1..4u32).prop_map(|(i, w)| Drift::AddServer(i, w)),
        2 => (0..SERVERS, 1..4u32).prop_map(|(i, w)| Drift::Reweight(i, w)),
        1 => Just(Drift::Reschedule),
        1 => Just(Drift::DeleteService),
    ];
    let how = prop_oneof![
        4 => Just(How::Rolling),
        4 => Just(How::RollingChanges),
        2 => Just(How::Changes),
        1 => Just(How::Services),
        1 => Just(How::Full),
    ];
    prop_oneof![
        3 => (0..KEYS, any::<bool>(), 0..16u8, 1..4u32)
            .prop_map(|(key, wlc, mask, weight)| Step::Desire { key, wlc, mask, weight }),
        1 => (any::<u8>(), 0..16u8).prop_map(|(keys, mask)| Step::DesireMany { keys, mask }),
        2 => any::<u8>().prop_map(|keys| Step::Undesire { keys }),
        4 => (0..KEYS, drift).prop_map(|(key, drift)| Step::Drift { key, drift }),
        1 => (8..10u8, 0..16u8).prop_map(|(key, mask)| Step::OtherToolChurns { key, mask }),
        8 => how.prop_map(Step::Sync),
    ]
}

/// The test's own account of a run.
#[derive(Debug, Default)]
struct Account {
    /// Rolling syncs so far.
    rolls: u64,
    /// Each drifted element, with the rolling syncs made before its latest
    /// drift.
    drifted: HashMap<Element, u64>,
    /// The rolling syncs made before the latest drift.
    last_drift: Option<u64>,
    /// The desired state changed since the last sync.
    changed: bool,
}

fn run(syncs: u32, steps: &[Step]) -> std::result::Result<(), TestCaseError> {
    let world = world();
    // The other tool's services, as it left them.
    let mut other = world.lock().unwrap().table.clone();
    let mut desired = DesiredState::new();
    let mut core = Core::new(SyncOptions::default());
    let mut acc = Account::default();
    for s in steps {
        match *s {
            Step::Desire {
                key: i,
                wlc,
                mask,
                weight,
            } => {
                desired
                    .upsert(service(i, wlc), servers(mask, weight))
                    .unwrap();
                acc.changed = true;
            }
            Step::DesireMany { keys, mask } => {
                for i in (0..KEYS).filter(|i| keys & (1 << i) != 0) {
                    desired.upsert(service(i, false), servers(mask, 1)).unwrap();
                    acc.changed = true;
                }
            }
            Step::Undesire { keys } => {
                for i in (0..KEYS).filter(|i| keys & (1 << i) != 0) {
                    desired.remove(&key(i));
                    acc.changed = true;
                }
            }
            Step::Drift { key: i, drift: d } => {
                let mut w = world.lock().unwrap();
                for element in drift(&mut w, key(i), d) {
                    acc.drifted.insert(element, acc.rolls);
                    acc.last_drift = Some(acc.rolls);
                }
            }
            Step::OtherToolChurns { key: i, mask } => {
                let mut w = world.lock().unwrap();
                let e = w.table.get_mut(&key(i)).expect("the other tool's");
                e.dests = servers(mask, 7)
                    .into_iter()
                    .map(|rs| (rs.addr, rs))
                    .collect();
                other.insert(key(i), e.clone());
            }
            Step::Sync(how) => {
                // Quiet: no drift for `syncs` rolling syncs, no change since
                // the last sync.
                let quiet = !acc.changed
                    && acc
                        .last_drift
                        .is_none_or(|at| acc.rolls - at >= u64::from(syncs));
                let r = sync(&mut core, &world, &mut desired, how, syncs);
                acc.changed = false;
                if how.is_rolling() {
                    acc.rolls += 1;
                    let oldest = r.max_unverified_syncs.expect("a rolling sync's");
                    prop_assert!(oldest < u64::from(syncs), "{oldest} syncs unverified");
                    if quiet {
                        prop_assert_eq!(r.writes_sent, 0, "a quiet rolling sync wrote: {:?}", r);
                    }
                } else {
                    prop_assert_eq!(r.max_unverified_syncs, None);
                }
                let w = world.lock().unwrap();
                for (&element, &at) in &acc.drifted {
                    // A real server follows its service: a later drift of
                    // the service (deleted, say) is the one to wait for.
                    let at = match element {
                        (k, Some(_)) => acc.drifted.get(&(k, None)).map_or(at, |&s| s.max(at)),
                        (_, None) => at,
                    };
                    if acc.rolls - at >= u64::from(syncs) {
                        prop_assert!(
                            as_desired(&w, &desired, element),
                            "{:?} drifted after {} rolling syncs, not repaired after {}: {:?}",
                            element,
                            at,
                            acc.rolls,
                            w.table.get(&element.0)
                        );
                    }
                }
                let rolls = acc.rolls;
                acc.drifted.retain(|_, at| rolls - *at < u64::from(syncs));
            }
        }
        let w = world.lock().unwrap();
        prop_assert!(w.violations.is_empty(), "{:?} after {s:?}", w.violations);
    }
    // Then `syncs` rolling syncs: every service the syncer made is as
    // desired, and one more writes nothing.
    for i in 0..syncs {
        let how = if i % 2 == 0 {
            How::Rolling
        } else {
            How::RollingChanges
        };
        sync(&mut core, &world, &mut desired, how, syncs);
    }
    let r = sync(&mut core, &world, &mut desired, How::Rolling, syncs);
    prop_assert_eq!(r.writes_sent, 0, "{:?}", r);
    let w = world.lock().unwrap();
    prop_assert!(w.violations.is_empty(), "{:?}", w.violations);
    for ds in desired.services() {
        let k = ds.service().key;
        if k == key(CONFLICT) {
            continue;
        }
        let e = w.table.get(&k);
        prop_assert!(e.is_some_and(|e| e.by_agent), "{k} desired, not made");
        let e = e.unwrap();
        prop_assert_eq!(&e.vs, ds.service());
        let have: Vec<RealServer> = e.dests.values().copied().collect();
        prop_assert_eq!(have.as_slice(), ds.destinations(), "{}", k);
    }
    for (k, e) in &w.table {
        prop_assert!(!e.by_agent || desired.contains(k), "{k} left behind");
    }
    // The other tool's services are as it left them.
    for (k, e) in &other {
        let now = w.table.get(k);
        prop_assert_eq!(now.map(|e| &e.vs), Some(&e.vs));
        prop_assert_eq!(now.map(|e| &e.dests), Some(&e.dests));
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1024, ..ProptestConfig::default() })]

    #[test]
    fn drift_is_repaired_within_syncs_rolling_syncs_and_only_the_syncers_services_are_touched(
        syncs in 1..7u32,
        steps in proptest::collection::vec(step(), 1..60),
    ) {
        run(syncs, &steps)?;
    }
}

/// Ten of the syncer's services of three real servers each, synced.
fn ten() -> (Arc<Mutex<World>>, DesiredState, Core) {
    let world = world();
    let mut desired = DesiredState::new();
    for i in 0..7 {
        desired
            .insert(service(i, false), servers(0b111, 1))
            .unwrap();
    }
    for i in 10..13 {
        desired
            .insert(service(i, false), servers(0b111, 1))
            .unwrap();
    }
    let mut core = Core::new(SyncOptions::default());
    sync(&mut core, &world, &mut desired, How::Services, 1);
    desired.clear_changes();
    (world, desired, core)
}

/// Removes the first real server of every one of the syncer's services.
fn drift_everywhere(world: &Arc<Mutex<World>>) {
    let mut w = world.lock().unwrap();
    let keys: Vec<ServiceKey> = w
        .table
        .iter()
        .filter(|(_, e)| e.by_agent)
        .map(|(k, _)| *k)
        .collect();
    for k in keys {
        drift(&mut w, k, Drift::RemoveServer(0));
    }
}

fn missing(world: &Arc<Mutex<World>>) -> Vec<ServiceKey> {
    let w = world.lock().unwrap();
    w.table
        .iter()
        .filter(|(_, e)| e.by_agent && e.dests.len() < 3)
        .map(|(k, _)| *k)
        .collect()
}

#[test]
fn each_rolling_sync_repairs_its_slice_and_the_last_of_k_repairs_the_rest() {
    for how in [How::Rolling, How::RollingChanges] {
        let (world, mut desired, mut core) = ten();
        drift_everywhere(&world);
        // Services 0-6 and 10-12: two in each of five syncs, in key order.
        let mut keys: Vec<ServiceKey> =
            desired.services().iter().map(|d| d.service().key).collect();
        keys.sort_unstable();
        for n in 0..5usize {
            let r = sync(&mut core, &world, &mut desired, how, 5);
            assert_eq!(r.verified, Some(rolling(5)), "{how:?}");
            assert_eq!(r.verified_in_full, 2, "{how:?} sync {n}: {r:?}");
            assert_eq!(r.destinations.added, 2, "{how:?} sync {n}");
            assert_eq!(r.writes_sent, 2, "{how:?} sync {n}");
            // Services remembered before the first rolling sync count from
            // it on.
            assert_eq!(
                r.max_unverified_syncs,
                Some(n as u64 + 1).min(Some(4)),
                "{how:?}"
            );
            assert_eq!(
                missing(&world),
                keys[2 * n + 2..].to_vec(),
                "{how:?} sync {n}"
            );
        }
        // Nothing drifted: nothing written, the next slice read.
        let r = sync(&mut core, &world, &mut desired, how, 5);
        assert_eq!(r.writes_sent, 0, "{r:?}");
        assert_eq!(r.verified_in_full, 2);
        assert_eq!(r.max_unverified_syncs, Some(4));
        assert!(world.lock().unwrap().violations.is_empty());
    }
}

#[test]
fn services_the_syncer_created_or_read_count_as_verified() {
    let world = world();
    let mut desired = DesiredState::new();
    for i in 0..4 {
        desired.insert(service(i, false), servers(0b11, 1)).unwrap();
    }
    let mut core = Core::new(SyncOptions::default());
    // A first rolling sync reads fully (nothing remembered) and creates
    // all four: each verified in full.
    let r = sync(&mut core, &world, &mut desired, How::Rolling, 2);
    assert_eq!(r.verified, Some(Verify::Full));
    assert_eq!(r.verified_in_full, 4, "{r:?}");
    assert_eq!(r.max_unverified_syncs, Some(0));
    // A service changed behind the syncer's back is read in full by the
    // service table check, outside the slice.
    drift(&mut world.lock().unwrap(), key(3), Drift::Reschedule);
    let r = sync(&mut core, &world, &mut desired, How::Rolling, 2);
    assert_eq!(r.verified_in_full, 3, "slice of two and service 3: {r:?}");
    assert_eq!(r.services.updated, 1);
    // The two left are the stalest now.
    drift(&mut world.lock().unwrap(), key(2), Drift::RemoveServer(0));
    let r = sync(&mut core, &world, &mut desired, How::Rolling, 2);
    assert_eq!(r.verified_in_full, 2, "{r:?}");
    assert_eq!(r.destinations.added, 1, "{r:?}");
    assert_eq!(r.max_unverified_syncs, Some(1));
    // A service desired anew is created, and so verified.
    desired.insert(service(5, false), servers(0b1, 1)).unwrap();
    let r = sync(&mut core, &world, &mut desired, How::Rolling, 2);
    assert_eq!(r.services.added, 1);
    assert_eq!(
        r.verified_in_full, 3,
        "slice of two and the new service: {r:?}"
    );
    assert_eq!(r.max_unverified_syncs, Some(1));
}

#[test]
fn a_plan_reads_the_slice_of_the_next_sync_and_does_not_count_as_one() {
    let (world, desired, mut core) = ten();
    drift_everywhere(&world);
    let mut table = Table(Arc::clone(&world));
    let plan = core.plan(&mut table, &desired, rolling(5)).unwrap();
    assert_eq!(plan.counts.destinations.added, 2, "{plan:?}");
    let plan_again = core.plan(&mut table, &desired, rolling(5)).unwrap();
    assert_eq!(plan_again.writes, plan.writes);
    let r = core.sync(&mut table, &desired, rolling(5)).unwrap();
    assert_eq!(r.writes_sent, 2);
    assert_eq!(r.max_unverified_syncs, Some(1));
}

#[test]
fn incremental_rolling_syncs_check_the_changed_services_and_the_slice() {
    let (world, mut desired, mut core) = ten();
    drift_everywhere(&world);
    // Service 12 (last in key order) changes: it is synced as
    // `Verify::Services` syncs it (its drift is trusted away), with the
    // slice, services 0 and 1, read in full.
    desired
        .upsert_destinations(&key(12), servers(0b1000, 1))
        .unwrap();
    let r = sync(&mut core, &world, &mut desired, How::RollingChanges, 5);
    assert_eq!(r.verified_in_full, 2, "{r:?}");
    assert_eq!(r.destinations.added, 3, "{r:?}");
    let w = world.lock().unwrap();
    assert_eq!(w.table[&key(12)].dests.len(), 3, "trusted: still drifted");
    assert_eq!(w.table[&key(0)].dests.len(), 3);
    drop(w);
    // An event synced with `Verify::None` is not a rolling sync: no
    // service ages.
    desired
        .upsert_destinations(&key(11), servers(0b1000, 1))
        .unwrap();
    let r = sync(&mut core, &world, &mut desired, How::Changes, 5);
    assert_eq!((r.verified_in_full, r.max_unverified_syncs), (0, None));
    let r = sync(&mut core, &world, &mut desired, How::RollingChanges, 5);
    assert_eq!(r.max_unverified_syncs, Some(2));
    // Four more rolling syncs repair everything.
    for _ in 0..4 {
        sync(&mut core, &world, &mut desired, How::RollingChanges, 5);
    }
    assert_eq!(missing(&world), Vec::<ServiceKey>::new());
    let r = sync(&mut core, &world, &mut desired, How::RollingChanges, 5);
    assert_eq!(r.writes_sent, 0, "{r:?}");
}

#[test]
fn a_service_deleted_behind_the_syncers_back_is_made_again_in_the_next_rolling_sync() {
    let (world, mut desired, mut core) = ten();
    drift(&mut world.lock().unwrap(), key(12), Drift::DeleteService);
    let r = sync(&mut core, &world, &mut desired, How::Rolling, 5);
    assert_eq!((r.services.added, r.destinations.added), (1, 3), "{r:?}");
    // Created, so verified; and counted once.
    assert_eq!(r.verified_in_full, 3, "{r:?}");
    // Incrementally, found when its turn comes.
    drift(&mut world.lock().unwrap(), key(0), Drift::DeleteService);
    let r = sync(&mut core, &world, &mut desired, How::RollingChanges, 5);
    assert_eq!(r.services.added, 0, "key 0 is not in this slice: {r:?}");
    let mut added = 0;
    for _ in 0..4 {
        added += sync(&mut core, &world, &mut desired, How::RollingChanges, 5)
            .services
            .added;
    }
    assert_eq!(added, 1);
    assert!(missing(&world).is_empty());
}

#[test]
fn a_service_the_syncer_changed_is_not_verified_by_its_writes() {
    // Drift in service 2, then a change of it: the sync writes to it and
    // sees its write acknowledged, yet knows nothing of the real server
    // removed behind its back. Counted as verified, service 2 would wait
    // for round 6; it is read in its turn, the second sync.
    for how in [How::Rolling, How::RollingChanges] {
        let (world, mut desired, mut core) = ten();
        drift(&mut world.lock().unwrap(), key(2), Drift::RemoveServer(0));
        desired
            .upsert_destinations(&key(2), servers(0b1000, 1))
            .unwrap();
        let r = sync(&mut core, &world, &mut desired, how, 5);
        assert_eq!(r.destinations.added, 1, "{how:?}: the change only: {r:?}");
        assert_eq!(r.verified_in_full, 2, "{how:?}: services 0 and 1: {r:?}");
        let removed = |world: &Arc<Mutex<World>>| {
            !world.lock().unwrap().table[&key(2)]
                .dests
                .contains_key(&addr(0))
        };
        assert!(removed(&world), "{how:?}");
        let r = sync(&mut core, &world, &mut desired, how, 5);
        assert_eq!(r.destinations.added, 1, "{how:?}: the drift: {r:?}");
        assert!(!removed(&world), "{how:?}");
    }
}

/// Whether a `Verify::Services` sync of `n` remembered services on
/// `kernel` looked them up (else it dumped).
fn auto_looks_up(n: u32, kernel: Option<KernelVersion>) -> bool {
    let mut desired = DesiredState::with_capacity(n as usize);
    for i in 0..n {
        let key = ServiceKey::fwmark(i + 1, AddressFamily::Inet);
        desired
            .insert(VirtualServer::new(key), [])
            .expect("valid service");
    }
    let world = Arc::new(Mutex::new(World::default()));
    let mut table = Table(world.clone());
    let mut core = Core::new(SyncOptions::default());
    core.kernel_version = kernel;
    let cold = core.sync(&mut table, &desired, Verify::Services).unwrap();
    assert_eq!(cold.writes_sent, n as usize);
    let before = {
        let w = world.lock().unwrap();
        (w.dumps, w.lookups)
    };
    let r = core.sync(&mut table, &desired, Verify::Services).unwrap();
    assert_eq!(r.writes_sent, 0);
    let w = world.lock().unwrap();
    match (w.dumps - before.0, w.lookups - before.1) {
        (1, 0) => false,
        (0, 1) => true,
        other => panic!("{n} services: (dumps, lookups) {other:?}"),
    }
}

#[test]
fn the_automatic_service_check_switches_where_measured_for_the_running_kernel() {
    let new = Some(KernelVersion::new(7, 3, 4));
    let old = Some(KernelVersion::new(6, 12, 118));
    assert_eq!(ServiceCheck::lookups_from(new), 50_000);
    assert_eq!(ServiceCheck::lookups_from(old), 120_000);
    assert_eq!(ServiceCheck::lookups_from(None), 120_000);
    assert!(!auto_looks_up(49_999, new));
    assert!(auto_looks_up(50_000, new));
    assert!(!auto_looks_up(50_000, old));
    assert!(!auto_looks_up(119_999, None));
    assert!(auto_looks_up(120_000, old));
}
