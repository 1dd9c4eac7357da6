//! Drain deadlines and kept weights as properties, without a kernel: the
//! syncer's own logic (`Core`) drives a table in memory with connection
//! counts, on a clock the test moves. Random runs of desired-state changes,
//! connections opening and closing, a health checker setting weights, drain
//! times set per real server, the clock moving, restarts, and syncs of
//! every kind (full and incremental, every `Verify`).
//!
//! Checked on every write and after every sync:
//!
//! * with kept weights, no write changes the weight of a real server in the
//!   table, except setting one that is not desired to 0 (a drain) and giving
//!   back the weight of one this syncer set to 0 to drain;
//! * no drain outlives its deadline: the first sync after the deadline of a
//!   real server that left the desired state deletes it;
//! * no drain ends early: a real server with open connections is deleted
//!   only once its deadline has passed;
//! * and after quiet syncs past every deadline, the table is as desired
//!   (weights as the health checker left them, when kept).
//!
//! The test keeps its own record of when each drain started (the first sync
//! that covered its service and found it not desired), of the drain times
//! set, and of which real servers the syncer set to 0, from the writes it
//! sees; it does not read the syncer's record.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use proptest::prelude::*;

use super::kernel::Kernel;
use super::state::ObservedDest;
use super::syncer::Core;
use super::{DesiredState, PlanOptions, Scope, SyncOptions, Verify};
use crate::batch::Write;
use crate::handle::describe;
use crate::model::{ConnCounts, Protocol, RealServer, ServiceKey, VirtualServer};
use crate::{Error, Result};

const KEYS: u8 = 3;
const SERVERS: u8 = 4;

/// Services 0 and 1 are TCP (they drain), 2 is UDP (deleted at once).
fn key(i: u8) -> ServiceKey {
    let addr = SocketAddr::from(([10, 96, 0, i % KEYS + 1], 80));
    if i % KEYS == 2 {
        ServiceKey::udp(addr)
    } else {
        ServiceKey::tcp(addr)
    }
}

fn addr(i: u8) -> SocketAddr {
    SocketAddr::from(([10, 244, 0, i % SERVERS + 1], 8080))
}

fn drains_here(k: &ServiceKey) -> bool {
    !matches!(
        k,
        ServiceKey::Addr {
            protocol: Protocol::Udp,
            ..
        }
    )
}

type Id = (ServiceKey, SocketAddr);

/// A service's real servers in the table, with their connection counts.
type Dests = BTreeMap<SocketAddr, (RealServer, ConnCounts)>;

#[derive(Debug, Default)]
struct World {
    table: BTreeMap<ServiceKey, (VirtualServer, Dests)>,
    now: Option<Instant>,
    keep_weights: bool,
    max_drain: Option<Duration>,
    /// The real servers desired at the sync under way.
    desired: HashSet<Id>,
    /// When each drain started, by the test's own account.
    /// When each drain started, by the test's own account, and the number
    /// of the sync that started it.
    since: HashMap<Id, (Instant, u64)>,
    /// Syncs so far.
    syncs: u64,
    /// Drain times set per real server, by the test's own account.
    drain_times: HashMap<Id, Duration>,
    /// Real servers the syncer set to 0 while they were not desired.
    drained_by_syncer: HashSet<Id>,
    violations: Vec<String>,
}

impl World {
    fn deadline(&self, id: &Id) -> Option<Instant> {
        let (since, _) = self.since.get(id)?;
        let d = self.drain_times.get(id).copied().or(self.max_drain)?;
        since.checked_add(d)
    }

    fn apply(&mut self, op: &Write) -> std::result::Result<(), Error> {
        let what = describe(op.cmd(), &op.target());
        let k = op.key();
        let now = self.now.expect("the clock is set");
        let Some((vs, dests)) = self.table.get_mut(&k) else {
            return match op {
                Write::AddService(vs) => {
                    self.table.insert(k, (vs.clone(), BTreeMap::new()));
                    Ok(())
                }
                _ => Err(Error::ServiceNotFound { op: what, key: k }),
            };
        };
        match op {
            Write::AddService(_) => Err(Error::ServiceExists { op: what, key: k }),
            Write::UpdateService(new) => {
                *vs = new.clone();
                Ok(())
            }
            Write::DeleteService(_) => {
                self.table.remove(&k);
                self.since.retain(|id, _| id.0 != k);
                self.drain_times.retain(|id, _| id.0 != k);
                self.drained_by_syncer.retain(|id| id.0 != k);
                Ok(())
            }
            Write::AddDestination(_, rs) => {
                if dests.contains_key(&rs.addr) {
                    return Err(Error::DestinationExists {
                        op: what,
                        service: k,
                        server: rs.addr,
                    });
                }
                dests.insert(rs.addr, (*rs, ConnCounts::default()));
                Ok(())
            }
            Write::UpdateDestination(_, rs) => {
                let Some((d, _)) = dests.get_mut(&rs.addr) else {
                    return Err(Error::DestinationNotFound {
                        op: what,
                        service: k,
                        server: rs.addr,
                    });
                };
                let id = (k, rs.addr);
                let drain = rs.weight == 0 && !self.desired.contains(&id);
                if self.keep_weights
                    && rs.weight != d.weight
                    && !drain
                    && !self.drained_by_syncer.contains(&id)
                {
                    self.violations.push(format!(
                        "{op:?}: weight {} of an existing real server changed with weights kept",
                        d.weight
                    ));
                }
                if drain {
                    self.drained_by_syncer.insert(id);
                } else if rs.weight != 0 {
                    self.drained_by_syncer.remove(&id);
                }
                *d = *rs;
                Ok(())
            }
            Write::DeleteDestination(_, a) => {
                let Some((_, conns)) = dests.remove(a) else {
                    return Err(Error::DestinationNotFound {
                        op: what,
                        service: k,
                        server: *a,
                    });
                };
                let id = (k, *a);
                let busy = conns.active + conns.inactive > 0;
                if busy && drains_here(&k) && self.deadline(&id).is_none_or(|t| now < t) {
                    self.violations.push(format!(
                        "{op:?}: deleted with {conns:?} before its deadline {:?} (now {:?} after its start)",
                        self.deadline(&id).map(|t| t - self.since[&id].0),
                        self.since.get(&id).map(|s| now - s.0),
                    ));
                }
                self.since.remove(&id);
                self.drain_times.remove(&id);
                self.drained_by_syncer.remove(&id);
                Ok(())
            }
        }
    }

    /// Before a sync covering `keys` at `now`: drains start for real
    /// servers found not desired, and stop for those desired again.
    fn before_sync(&mut self, keys: &[ServiceKey], now: Instant) {
        self.now = Some(now);
        self.syncs += 1;
        let sync = self.syncs;
        for k in keys {
            let Some((_, dests)) = self.table.get(k) else {
                continue;
            };
            for a in dests.keys() {
                let id = (*k, *a);
                if self.desired.contains(&id) || !drains_here(k) {
                    self.since.remove(&id);
                } else {
                    self.since.entry(id).or_insert((now, sync));
                }
            }
        }
    }

    /// After a sync covering `keys` at `now`: every drain that an earlier
    /// sync started and whose deadline has passed is gone, in any service
    /// (an incremental sync also syncs the services with such drains), and
    /// drain times of real servers of `keys` that are neither desired nor
    /// in the table are forgotten.
    fn after_sync(&mut self, keys: &[ServiceKey], now: Instant) {
        for (k, (_, dests)) in &self.table {
            for a in dests.keys() {
                let id = (*k, *a);
                let Some(&(since, sync)) = self.since.get(&id) else {
                    continue;
                };
                if sync < self.syncs && self.deadline(&id).is_some_and(|t| now >= t) {
                    self.violations.push(format!(
                        "{k} {a}: still there {:?} after its drain started, past its deadline",
                        now - since
                    ));
                }
            }
        }
        for k in keys {
            let in_table: Vec<SocketAddr> = self
                .table
                .get(k)
                .map(|(_, d)| d.keys().copied().collect())
                .unwrap_or_default();
            let desired = &self.desired;
            self.drain_times
                .retain(|id, _| id.0 != *k || desired.contains(id) || in_table.contains(&id.1));
        }
    }
}

struct Table(Arc<Mutex<World>>);

impl Kernel for Table {
    fn services(&mut self, _expected: usize, mut each: impl FnMut(VirtualServer)) -> Result<()> {
        let w = self.0.lock().unwrap();
        w.table.values().for_each(|(vs, _)| each(vs.clone()));
        Ok(())
    }

    fn lookup(&mut self, keys: &[ServiceKey]) -> Result<Vec<Option<VirtualServer>>> {
        let w = self.0.lock().unwrap();
        Ok(keys
            .iter()
            .map(|k| w.table.get(k).map(|(vs, _)| vs.clone()))
            .collect())
    }

    fn destinations(
        &mut self,
        keys: &[ServiceKey],
        _sockets: usize,
        mut each: impl FnMut(usize, Result<Vec<ObservedDest>>),
    ) -> Result<()> {
        let w = self.0.lock().unwrap();
        for (i, k) in keys.iter().enumerate() {
            match w.table.get(k) {
                Some((_, dests)) => each(
                    i,
                    Ok(dests
                        .values()
                        .map(|(rs, c)| ObservedDest::new(*rs, Some(*c)))
                        .collect()),
                ),
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
            on_result(i, w.apply(op));
        }
        Ok(())
    }

    fn forget_flows(
        &mut self,
        _: &[crate::conntrack::Filter],
    ) -> std::result::Result<crate::conntrack::DeleteReport, crate::conntrack::ConntrackError> {
        unreachable!("the drain property runs without conntrack cleanup")
    }
}

#[derive(Debug, Clone)]
enum Step {
    /// The service with the real servers of `mask`, each at `weight` (the
    /// first with thresholds when `thresholds`).
    Desire {
        key: u8,
        mask: u8,
        weight: u32,
        thresholds: bool,
    },
    Undesire {
        key: u8,
    },
    /// Every desired real server of the service with other thresholds
    /// (an update whose weight, when kept, must be the kernel's).
    Retune {
        key: u8,
        upper: u32,
    },
    /// Connections of a real server: set while its weight is not 0 (new
    /// ones reach it), only fewer at weight 0 (IPVS sends it none).
    Conns {
        key: u8,
        server: u8,
        open: u32,
    },
    /// A health checker sets a weight (0 quiesces).
    HealthCheck {
        key: u8,
        server: u8,
        weight: u32,
    },
    DrainTime {
        key: u8,
        server: u8,
        millis: u64,
    },
    Wait {
        millis: u64,
    },
    Sync {
        verify: u8,
        changes: bool,
    },
    Restart,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (0..KEYS, 0..16u8, 1..4u32, any::<bool>())
            .prop_map(|(key, mask, weight, thresholds)| Step::Desire { key, mask, weight, thresholds }),
        1 => (0..KEYS).prop_map(|key| Step::Undesire { key }),
        2 => (0..KEYS, 0..3u32).prop_map(|(key, upper)| Step::Retune { key, upper }),
        3 => (0..KEYS, 0..SERVERS, 0..3u32).prop_map(|(key, server, open)| Step::Conns { key, server, open }),
        2 => (0..KEYS, 0..SERVERS, prop_oneof![Just(0u32), 1..9u32])
            .prop_map(|(key, server, weight)| Step::HealthCheck { key, server, weight }),
        1 => (0..KEYS, 0..SERVERS, millis())
            .prop_map(|(key, server, millis)| Step::DrainTime { key, server, millis }),
        3 => (0..3_000u64).prop_map(|millis| Step::Wait { millis }),
        5 => (0..3u8, any::<bool>()).prop_map(|(verify, changes)| Step::Sync { verify, changes }),
        1 => Just(Step::Restart),
    ]
}

/// Drain times: none at all, short, and a few seconds.
fn millis() -> impl Strategy<Value = u64> {
    prop_oneof![Just(0u64), Just(1), 1..5_000u64]
}

fn verify(v: u8) -> Verify {
    [Verify::Full, Verify::Services, Verify::None][usize::from(v % 3)]
}

fn agent(options: PlanOptions, clock: &Arc<Mutex<Instant>>) -> Core {
    let mut core = Core::new(
        SyncOptions::default()
            .with_scope(Scope::All)
            .with_plan(options),
    );
    let clock = Arc::clone(clock);
    core.clock = Arc::new(move || *clock.lock().unwrap());
    core
}

fn desired_ids(d: &DesiredState) -> HashSet<Id> {
    d.services()
        .iter()
        .flat_map(|s| {
            s.destinations()
                .iter()
                .map(move |rs| (s.service().key, rs.addr))
        })
        .collect()
}

/// One sync at the clock's time, with the test's records kept around it.
fn sync(
    core: &mut Core,
    world: &Arc<Mutex<World>>,
    desired: &mut DesiredState,
    now: Instant,
    v: u8,
    changes: bool,
) {
    let keys: Vec<ServiceKey> = if changes {
        desired.changes().to_vec()
    } else {
        (0..KEYS).map(key).collect()
    };
    world.lock().unwrap().desired = desired_ids(desired);
    world.lock().unwrap().before_sync(&keys, now);
    let mut table = Table(Arc::clone(world));
    let report = if changes {
        let keys = desired.take_changes();
        core.sync_services(&mut table, desired, &keys, verify(v))
    } else {
        core.sync(&mut table, desired, verify(v))
    }
    .expect("nothing fails in this table");
    assert!(report.is_ok(), "{report:?}");
    // The report's drain ends are deletes the table saw.
    for (k, a) in &report.drains_ended_at_deadline {
        let w = world.lock().unwrap();
        assert!(!w.table.get(k).is_some_and(|(_, d)| d.contains_key(a)));
    }
    world.lock().unwrap().after_sync(&keys, now);
}

fn run(options: PlanOptions, steps: &[Step]) -> std::result::Result<(), TestCaseError> {
    let t0 = Instant::now();
    let clock = Arc::new(Mutex::new(t0));
    let world = Arc::new(Mutex::new(World {
        keep_weights: options.keep_weights,
        max_drain: options.max_drain,
        ..World::default()
    }));
    let mut desired = DesiredState::new();
    let mut core = agent(options, &clock);
    for s in steps {
        let now = *clock.lock().unwrap();
        match *s {
            Step::Desire {
                key: k,
                mask,
                weight,
                thresholds,
            } => {
                let rs = (0..SERVERS).filter(|i| mask & (1 << i) != 0).map(|i| {
                    let rs = RealServer::new(addr(i)).with_weight(weight);
                    if thresholds && i == 0 {
                        rs.with_thresholds(100, 10)
                    } else {
                        rs
                    }
                });
                desired.upsert(VirtualServer::new(key(k)), rs).unwrap();
            }
            Step::Undesire { key: k } => {
                desired.remove(&key(k));
            }
            Step::Retune { key: k, upper } => {
                if let Some(ds) = desired.get(&key(k)) {
                    let retuned: Vec<RealServer> = ds
                        .destinations()
                        .iter()
                        .map(|rs| rs.with_thresholds(upper * 50, 0))
                        .collect();
                    desired.upsert_destinations(&key(k), retuned).unwrap();
                }
            }
            Step::Conns {
                key: k,
                server,
                open,
            } => {
                let mut w = world.lock().unwrap();
                if let Some((rs, c)) = w
                    .table
                    .get_mut(&key(k))
                    .and_then(|(_, d)| d.get_mut(&addr(server)))
                {
                    c.active = if rs.weight == 0 {
                        c.active.min(open)
                    } else {
                        open
                    };
                }
            }
            Step::HealthCheck {
                key: k,
                server,
                weight,
            } => {
                let mut w = world.lock().unwrap();
                if let Some((rs, _)) = w
                    .table
                    .get_mut(&key(k))
                    .and_then(|(_, d)| d.get_mut(&addr(server)))
                {
                    rs.weight = weight;
                }
            }
            Step::DrainTime {
                key: k,
                server,
                millis,
            } => {
                let time = Duration::from_millis(millis);
                core.drains.set_drain_time(key(k), addr(server), time);
                world
                    .lock()
                    .unwrap()
                    .drain_times
                    .insert((key(k), addr(server)), time);
            }
            Step::Wait { millis } => {
                *clock.lock().unwrap() += Duration::from_millis(millis);
            }
            Step::Sync { verify, changes } => {
                sync(&mut core, &world, &mut desired, now, verify, changes);
            }
            Step::Restart => {
                // Drains and drain times live in the syncer's memory: a new
                // one starts timing what it finds draining when it sees it.
                core = agent(options, &clock);
                let mut w = world.lock().unwrap();
                w.since.clear();
                w.drain_times.clear();
                w.drained_by_syncer.clear();
            }
        }
        let w = world.lock().unwrap();
        prop_assert!(w.violations.is_empty(), "{:?} at {s:?}", w.violations);
    }
    // Quiet: every connection closed, past every deadline, full syncs.
    {
        let mut w = world.lock().unwrap();
        for (_, dests) in w.table.values_mut() {
            for (_, c) in dests.values_mut() {
                *c = ConnCounts::default();
            }
        }
    }
    *clock.lock().unwrap() += Duration::from_secs(3600);
    let now = *clock.lock().unwrap();
    for v in [0, 1, 2] {
        sync(&mut core, &world, &mut desired, now, v, false);
    }
    let w = world.lock().unwrap();
    prop_assert!(w.violations.is_empty(), "{:?}", w.violations);
    let strip = |rs: &RealServer| RealServer {
        weight: if options.keep_weights { 0 } else { rs.weight },
        ..*rs
    };
    let have: BTreeMap<ServiceKey, Vec<RealServer>> = w
        .table
        .iter()
        .map(|(k, (_, d))| (*k, d.values().map(|(rs, _)| strip(rs)).collect()))
        .collect();
    let want: BTreeMap<ServiceKey, Vec<RealServer>> = desired
        .services()
        .iter()
        .map(|s| {
            (
                s.service().key,
                s.destinations().iter().map(strip).collect(),
            )
        })
        .collect();
    prop_assert_eq!(have, want);
    Ok(())
}

fn options() -> impl Strategy<Value = PlanOptions> {
    (
        any::<bool>(),
        prop_oneof![Just(None), millis().prop_map(Some)],
    )
        .prop_map(|(keep, max)| {
            let o = PlanOptions::default()
                .with_graceful_termination(true)
                .with_keep_weights(keep);
            match max {
                Some(ms) => o.with_max_drain(Duration::from_millis(ms)),
                None => o,
            }
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn drains_end_by_their_deadlines_never_early_and_kept_weights_stay(
        options in options(),
        steps in proptest::collection::vec(step(), 1..60)
    ) {
        run(options, &steps)?;
    }
}

/// A drain held open by a connection ends at the first sync past its
/// deadline, and the report names it.
#[test]
fn a_busy_drain_ends_at_the_first_sync_past_its_deadline() {
    let t0 = Instant::now();
    let clock = Arc::new(Mutex::new(t0));
    let options = PlanOptions::default()
        .with_graceful_termination(true)
        .with_max_drain(Duration::from_secs(10));
    let world = Arc::new(Mutex::new(World {
        max_drain: options.max_drain,
        now: Some(t0),
        ..World::default()
    }));
    let mut core = agent(options, &clock);
    let mut desired = DesiredState::new();
    let k = key(0);
    let rs = RealServer::new(addr(0));
    desired.insert(VirtualServer::new(k), [rs]).unwrap();
    let mut table = Table(Arc::clone(&world));
    core.sync(&mut table, &desired, Verify::Full).unwrap();
    world
        .lock()
        .unwrap()
        .table
        .get_mut(&k)
        .unwrap()
        .1
        .get_mut(&rs.addr)
        .unwrap()
        .1 = ConnCounts::new(1, 0, 0);
    desired.remove_destinations(&k, [rs.addr]).unwrap();
    let r = core.sync(&mut table, &desired, Verify::None).unwrap();
    assert_eq!(r.planned.drain_started, 1);
    let started = core.drains.get(&k, &rs.addr).unwrap();
    assert_eq!(started.started, Some(t0));
    assert!(started.set_by_syncer);
    for (secs, gone) in [(5, false), (9, false), (10, true)] {
        *clock.lock().unwrap() = t0 + Duration::from_secs(secs);
        world.lock().unwrap().now = Some(t0 + Duration::from_secs(secs));
        let r = core.sync(&mut table, &desired, Verify::None).unwrap();
        let there = world.lock().unwrap().table[&k].1.contains_key(&rs.addr);
        assert_eq!(there, !gone, "{secs} s: {r:?}");
        if gone {
            assert_eq!(r.drains_ended_at_deadline, [(k, rs.addr)]);
            assert_eq!(r.drains_ended_idle, 0);
            assert!(core.drains.is_empty(), "{:?}", core.drains);
        } else {
            assert_eq!(r.draining, 1);
        }
    }
}
