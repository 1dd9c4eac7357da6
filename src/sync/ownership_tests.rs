//! The ownership promise as a property, without a kernel: the syncer's own
//! logic (`Core`, the same code a `Syncer` runs) drives a table in memory
//! that answers as IPVS does (exists, no such service, no such real server)
//! and remembers who made each service. Random runs of desired-state
//! changes, syncs of every kind, answers lost (applied or not), saves that
//! fail, crashes at any write or save (the syncer dropped, the ledger as the
//! store last received it), restarts, and another tool deleting services
//! and creating services of the same or other keys.
//!
//! Checked: the syncer never changes, deletes or adds real servers to a
//! service another tool made; and after a restart and a few quiet syncs,
//! every service it made is as desired, or gone when not desired.
//!
//! Two cases cannot be told apart by any syncer, as `Syncer`'s
//! documentation says, and the other tool here does not make them: a
//! service of the same key *and* the same settings made while the ledger
//! holds a claim for it (the other tool uses a scheduler the syncer never
//! does; the case is checked on its own below), and a key recorded as owned
//! whose service was deleted and made again by another tool before the
//! syncer read the table (it creates no key the syncer's ledger, live or
//! saved, records as owned).

use std::collections::BTreeMap;
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use proptest::prelude::*;

use super::kernel::Kernel;
use super::ledger::{Ledger, Ownership};
use super::state::ObservedDest;
use super::syncer::Core;
use super::{DesiredState, SyncOptions, Verify};
use crate::batch::Write;
use crate::conntrack::{ConntrackError, DeleteReport, Filter};
use crate::handle::describe;
use crate::model::{RealServer, Scheduler, ServiceKey, VirtualServer};
use crate::{Error, Operation, Result};

const KEYS: u8 = 6;

fn key(i: u8) -> ServiceKey {
    ServiceKey::tcp(SocketAddr::from(([10, 96, 0, i % KEYS + 1], 80)))
}

fn server(i: u8) -> RealServer {
    RealServer::new(SocketAddr::from(([10, 244, 0, i + 1], 8080)))
}

/// The syncer's settings for a service (two schedulers, so that updates
/// happen).
fn agents(i: u8, wlc: bool) -> VirtualServer {
    let s = if wlc { "wlc" } else { "rr" };
    VirtualServer::new(key(i)).with_scheduler(Scheduler::from_name(s))
}

/// A service as the kernel holds it, and who made it.
#[derive(Debug, Clone)]
struct Entry {
    vs: VirtualServer,
    dests: BTreeMap<SocketAddr, RealServer>,
    by_agent: bool,
}

/// The table, the store's copy of the ledger, and the faults to play.
#[derive(Debug, Default)]
struct World {
    table: BTreeMap<ServiceKey, Entry>,
    saved: Ledger,
    /// Writes and saves left before the crash, if one is due.
    crash_in: Option<usize>,
    crashed: bool,
    /// Of each 8 write answers, how many are lost (`Error::Lost`, the
    /// request applied or not) or time out.
    lossy: u8,
    rng: u64,
    /// The next save fails (without a crash).
    fail_save: bool,
    /// Reads of these services' real servers fail.
    fail_reads: Vec<ServiceKey>,
    /// Lookups fail once a write went out.
    fail_lookups_after_writes: bool,
    writes: usize,
    /// The next service dump hands on this many services, its first one
    /// twice (as a multi-part dump may repeat one), then fails.
    cut_dump: Option<usize>,
    violations: Vec<String>,
    /// The conntrack selections the syncer asked to clean, in order.
    flows: Vec<Filter>,
    /// Every write that reached the table, in order.
    log: Vec<Write>,
    /// Another tool makes this service (its own scheduler, no real
    /// servers) just before the write of this number (from 0) reaches the
    /// table.
    other_creates_before: Option<(usize, ServiceKey)>,
}

impl World {
    fn roll(&mut self) -> u64 {
        // xorshift64*
        let mut x = self.rng.max(1);
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 32
    }

    /// Counts one write or save towards a due crash; `true` once crashed.
    fn tick(&mut self) -> bool {
        if let Some(n) = self.crash_in {
            if n == 0 {
                self.crashed = true;
                self.crash_in = None;
            } else {
                self.crash_in = Some(n - 1);
            }
        }
        self.crashed
    }

    /// Applies one operation as IPVS does.
    fn apply(&mut self, op: &Write) -> std::result::Result<(), Error> {
        let what = describe(op.cmd(), &op.target());
        let k = op.key();
        let entry = self.table.get_mut(&k);
        if let (Some(e), false) = (&entry, matches!(op, Write::AddService(_)))
            && !e.by_agent
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
            (Write::DeleteDestination(_, addr), Some(e)) => match e.dests.remove(addr) {
                Some(_) => Ok(()),
                None => Err(Error::DestinationNotFound {
                    op: what,
                    service: k,
                    server: *addr,
                }),
            },
        }
    }
}

fn crashed() -> Error {
    Error::io(
        Operation::SyncWrite,
        io::Error::other("the agent was killed"),
    )
}

/// The table as a [`Kernel`].
struct Table(Arc<Mutex<World>>);

impl Kernel for Table {
    fn services(&mut self, _expected: usize, mut each: impl FnMut(VirtualServer)) -> Result<()> {
        let mut w = self.0.lock().unwrap();
        if w.crashed {
            return Err(crashed());
        }
        let Some(cut) = w.cut_dump.take() else {
            // The last service again, as a dump resumed after a service of
            // another namespace went can repeat one.
            let last = w.table.values().next_back().map(|e| e.vs.clone());
            w.table.values().for_each(|e| each(e.vs.clone()));
            last.into_iter().for_each(each);
            return Ok(());
        };
        let first = w.table.values().next().map(|e| e.vs.clone());
        w.table.values().take(cut).for_each(|e| each(e.vs.clone()));
        if let (Some(vs), true) = (first, cut > 0) {
            each(vs);
        }
        Err(Error::Lost {
            op: describe(
                crate::codec::IpvsCmd::GetService,
                &crate::handle::Target::Global,
            ),
        })
    }

    fn lookup(&mut self, keys: &[ServiceKey]) -> Result<Vec<Option<VirtualServer>>> {
        let w = self.0.lock().unwrap();
        if w.crashed || (w.fail_lookups_after_writes && w.writes > 0) {
            return Err(crashed());
        }
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
        let w = self.0.lock().unwrap();
        if w.crashed {
            return Err(crashed());
        }
        for (i, k) in keys.iter().enumerate() {
            if w.fail_reads.contains(k) {
                each(
                    i,
                    Err(Error::Lost {
                        op: Operation::ListDestinations(*k),
                    }),
                );
                continue;
            }
            match w.table.get(k) {
                Some(e) => each(
                    i,
                    Ok(e.dests
                        .values()
                        .map(|rs| ObservedDest {
                            server: *rs,
                            conns: None,
                        })
                        .collect()),
                ),
                None => each(
                    i,
                    Err(Error::ServiceNotFound {
                        op: Operation::ListDestinations(*k),
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
            if w.tick() {
                return Err(crashed());
            }
            if let Some((n, key)) = w.other_creates_before
                && n == w.writes
            {
                let entry = Entry {
                    vs: VirtualServer::new(key).with_scheduler(Scheduler::from_name("sh")),
                    dests: BTreeMap::new(),
                    by_agent: false,
                };
                w.table.entry(key).or_insert(entry);
            }
            w.writes += 1;
            w.log.push(op.clone());
            let lost = w.lossy > 0 && (w.roll() % 8) < u64::from(w.lossy);
            let result = if lost {
                let applies = w.roll().is_multiple_of(2);
                if applies {
                    let _ = w.apply(op);
                }
                let op = describe(op.cmd(), &op.target());
                if w.roll().is_multiple_of(2) {
                    Err(Error::Lost { op })
                } else {
                    Err(Error::Timeout {
                        op,
                        waited: Duration::from_secs(1),
                    })
                }
            } else {
                w.apply(op)
            };
            on_result(i, result);
        }
        Ok(())
    }

    fn forget_flows(
        &mut self,
        filters: &[Filter],
    ) -> std::result::Result<DeleteReport, ConntrackError> {
        self.0.lock().unwrap().flows.extend_from_slice(filters);
        Ok(DeleteReport {
            per_filter: vec![Default::default(); filters.len()],
            ..DeleteReport::default()
        })
    }
}

/// A syncer resumed from what the store saved, saving into the world. Its
/// claims go out two at a time, so that a few services make several rounds.
fn agent(world: &Arc<Mutex<World>>) -> Core {
    let mut core = Core::new(SyncOptions::default());
    core.claims_per_round = 2;
    let saved = world.lock().unwrap().saved.clone();
    let store_world = Arc::clone(world);
    core.set_store(saved, move |ledger: &Ledger, _: &[ServiceKey]| {
        let mut w = store_world.lock().unwrap();
        if w.tick() {
            return Err(io::Error::other("the agent was killed"));
        }
        if std::mem::take(&mut w.fail_save) {
            return Err(io::Error::other("disk full"));
        }
        w.saved = ledger.clone();
        Ok(())
    });
    core
}

#[derive(Debug, Clone)]
enum Step {
    Desire {
        key: u8,
        wlc: bool,
        dests: u8,
    },
    Undesire {
        key: u8,
    },
    OtherDeletes {
        key: u8,
    },
    OtherCreates {
        key: u8,
        dests: u8,
    },
    Sync {
        verify: u8,
        changes: bool,
    },
    CrashDuring {
        verify: u8,
        changes: bool,
        after: u8,
    },
    Lossy {
        verify: u8,
        changes: bool,
        lossy: u8,
        seed: u64,
    },
    /// A sync whose service dump fails after `after` services.
    CutDump {
        verify: u8,
        changes: bool,
        after: u8,
    },
    FailNextSave,
    Restart,
}

fn step() -> impl Strategy<Value = Step> {
    let verify = 0..3u8;
    prop_oneof![
        3 => (0..KEYS, any::<bool>(), 0..8u8).prop_map(|(key, wlc, dests)| Step::Desire { key, wlc, dests }),
        1 => (0..KEYS).prop_map(|key| Step::Undesire { key }),
        1 => (0..KEYS).prop_map(|key| Step::OtherDeletes { key }),
        1 => (0..KEYS, 0..8u8).prop_map(|(key, dests)| Step::OtherCreates { key, dests }),
        3 => (verify.clone(), any::<bool>()).prop_map(|(verify, changes)| Step::Sync { verify, changes }),
        2 => (verify.clone(), any::<bool>(), 0..30u8)
            .prop_map(|(verify, changes, after)| Step::CrashDuring { verify, changes, after }),
        1 => (verify, any::<bool>(), 1..5u8, any::<u64>())
            .prop_map(|(verify, changes, lossy, seed)| Step::Lossy { verify, changes, lossy, seed }),
        1 => (0..3u8, any::<bool>(), 0..KEYS + 3)
            .prop_map(|(verify, changes, after)| Step::CutDump { verify, changes, after }),
        1 => Just(Step::FailNextSave),
        1 => Just(Step::Restart),
    ]
}

fn verify(v: u8) -> Verify {
    [Verify::Full, Verify::Services, Verify::None][usize::from(v % 3)]
}

fn dests(mask: u8) -> Vec<RealServer> {
    (0..3)
        .filter(|i| mask & (1 << i) != 0)
        .map(server)
        .collect()
}

/// One sync; `Err` is a legitimate outcome (a read or a save ahead failed).
fn sync(
    core: &mut Core,
    world: &Arc<Mutex<World>>,
    desired: &mut DesiredState,
    v: u8,
    changes: bool,
) {
    let mut table = Table(Arc::clone(world));
    let result = if changes {
        let keys = desired.take_changes();
        let r = core.sync_services(&mut table, desired, &keys, verify(v));
        if r.is_err() {
            for k in keys {
                desired.record(k);
            }
        }
        r
    } else {
        core.sync(&mut table, desired, verify(v))
    };
    if let Ok(report) = result {
        // Every real-server operation held back belongs to an add that was
        // not acknowledged.
        if report.withheld > 0 {
            assert!(
                !report.failed.is_empty()
                    || !report.conflicts.is_empty()
                    || report.aborted.is_some()
            );
        }
    }
}

fn run(steps: &[Step]) -> std::result::Result<(), TestCaseError> {
    let world = Arc::new(Mutex::new(World::default()));
    let mut desired = DesiredState::new();
    let mut core = agent(&world);
    for s in steps {
        match *s {
            Step::Desire { key, wlc, dests: d } => {
                desired.upsert(agents(key, wlc), dests(d)).unwrap();
            }
            Step::Undesire { key: k } => {
                desired.remove(&key(k));
            }
            Step::OtherDeletes { key: k } => {
                world.lock().unwrap().table.remove(&key(k));
            }
            Step::OtherCreates { key: k, dests: d } => {
                let mut w = world.lock().unwrap();
                let owned = |l: &Ledger| l.get(&key(k)) == Some(Ownership::Owned);
                if owned(&core.ledger) || owned(&w.saved) {
                    continue;
                }
                w.table.entry(key(k)).or_insert_with(|| Entry {
                    vs: VirtualServer::new(key(k)).with_scheduler(Scheduler::from_name("sh")),
                    dests: dests(d).into_iter().map(|rs| (rs.addr, rs)).collect(),
                    by_agent: false,
                });
            }
            Step::Sync { verify, changes } => {
                sync(&mut core, &world, &mut desired, verify, changes)
            }
            Step::CrashDuring {
                verify,
                changes,
                after,
            } => {
                world.lock().unwrap().crash_in = Some(usize::from(after));
                sync(&mut core, &world, &mut desired, verify, changes);
                let mut w = world.lock().unwrap();
                let died = std::mem::take(&mut w.crashed);
                w.crash_in = None;
                drop(w);
                if died {
                    core = agent(&world);
                }
            }
            Step::Lossy {
                verify,
                changes,
                lossy,
                seed,
            } => {
                {
                    let mut w = world.lock().unwrap();
                    w.lossy = lossy;
                    w.rng = seed;
                }
                sync(&mut core, &world, &mut desired, verify, changes);
                world.lock().unwrap().lossy = 0;
            }
            Step::CutDump {
                verify,
                changes,
                after,
            } => {
                world.lock().unwrap().cut_dump = Some(usize::from(after));
                sync(&mut core, &world, &mut desired, verify, changes);
                world.lock().unwrap().cut_dump = None;
            }
            Step::FailNextSave => world.lock().unwrap().fail_save = true,
            Step::Restart => core = agent(&world),
        }
        let w = world.lock().unwrap();
        prop_assert!(w.violations.is_empty(), "{:?} after {s:?}", w.violations);
    }
    // Quiet now: a restart, then syncs converge on everything the agent made.
    world.lock().unwrap().fail_save = false;
    core = agent(&world);
    for _ in 0..3 {
        sync(&mut core, &world, &mut desired, 0, false);
    }
    let w = world.lock().unwrap();
    prop_assert!(w.violations.is_empty(), "{:?}", w.violations);
    for (k, e) in &w.table {
        if !e.by_agent {
            continue;
        }
        match desired.get(k) {
            None => prop_assert!(
                false,
                "{k} was made by the agent, is not desired, and was left"
            ),
            Some(ds) => {
                prop_assert_eq!(&e.vs, ds.service(), "{} not as desired", k);
                let have: Vec<RealServer> = e.dests.values().copied().collect();
                prop_assert_eq!(have.as_slice(), ds.destinations(), "{} real servers", k);
            }
        }
        prop_assert_eq!(
            core.ledger.get(k),
            Some(Ownership::Owned),
            "{} not owned",
            k
        );
    }
    // Every desired key that is free is the agent's now.
    for ds in desired.services() {
        let k = ds.service().key;
        prop_assert!(
            w.table.contains_key(&k),
            "{k} desired and free, yet not created"
        );
    }
    // Nothing in the ledger that the table does not back.
    for (k, _) in core.ledger.iter() {
        prop_assert!(
            w.table.get(k).is_some_and(|e| e.by_agent),
            "{k} owned but not the agent's"
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn never_touches_what_it_did_not_make_and_never_abandons_what_it_made(
        steps in proptest::collection::vec(step(), 1..40)
    ) {
        run(&steps)?;
    }
}

#[test]
fn a_crash_after_every_write_of_a_first_sync_loses_nothing() {
    // Each crash point of one first sync of three services, two real
    // servers each, exhaustively.
    for after in 0..20 {
        let world = Arc::new(Mutex::new(World::default()));
        let mut desired = DesiredState::new();
        for i in 0..3 {
            desired.insert(agents(i, false), dests(3)).unwrap();
        }
        let mut core = agent(&world);
        world.lock().unwrap().crash_in = Some(after);
        sync(&mut core, &world, &mut desired, 2, false);
        let died = std::mem::take(&mut world.lock().unwrap().crashed);
        world.lock().unwrap().crash_in = None;
        // Every endpoint moves after the restart.
        for i in 0..3 {
            desired.upsert(agents(i, true), dests(4)).unwrap();
        }
        let mut core = if died { agent(&world) } else { core };
        let mut table = Table(Arc::clone(&world));
        let report = core.sync(&mut table, &desired, Verify::Services).unwrap();
        assert!(report.is_ok(), "crash after {after}: {report:?}");
        let w = world.lock().unwrap();
        assert!(w.violations.is_empty());
        for i in 0..3 {
            let e = &w.table[&key(i)];
            assert_eq!(e.vs, agents(i, true), "crash after {after}");
            assert_eq!(e.dests.len(), 1, "crash after {after}");
        }
    }
}

#[test]
fn claims_go_out_in_rounds_each_followed_by_the_real_servers_of_its_services() {
    let world = Arc::new(Mutex::new(World::default()));
    // Another tool makes key 3 after the syncer read the table, just
    // before the syncer's add of it (the eighth write).
    world.lock().unwrap().other_creates_before = Some((7, key(3)));
    let mut desired = DesiredState::new();
    for i in 0..5 {
        desired.insert(agents(i, false), dests(3)).unwrap();
    }
    let mut core = agent(&world);
    let report = core
        .sync(&mut Table(Arc::clone(&world)), &desired, Verify::Services)
        .unwrap();
    // Rounds {0, 1}, {2, 3}, {4}, each sent after the real servers of the
    // round before it: every claim answered before the real servers of its
    // service go out, none for the refused 3.
    let w = world.lock().unwrap();
    let log: Vec<(bool, u8)> = w
        .log
        .iter()
        .map(|op| {
            let i = (0..KEYS).find(|&i| key(i) == op.key()).unwrap();
            (matches!(op, Write::AddService(_)), i)
        })
        .collect();
    let (service, dest) = (|i| (true, i), |i| (false, i));
    let want = [
        service(0),
        service(1),
        dest(0),
        dest(0),
        dest(1),
        dest(1),
        service(2),
        service(3),
        dest(2),
        dest(2),
        service(4),
        dest(4),
        dest(4),
    ];
    assert_eq!(log, want);
    assert_eq!(report.withheld, 2);
    assert_eq!(report.conflicts.len(), 1);
    assert!(w.violations.is_empty());
    for i in [0, 1, 2, 4] {
        assert_eq!(w.table[&key(i)].dests.len(), 2);
        assert_eq!(core.ledger.get(&key(i)), Some(Ownership::Owned));
    }
    assert!(w.table[&key(3)].dests.is_empty());
    assert_eq!(core.ledger.get(&key(3)), None);
}

#[test]
fn a_round_cut_short_takes_back_the_claims_of_the_rounds_never_sent() {
    let world = Arc::new(Mutex::new(World::default()));
    let mut desired = DesiredState::new();
    for i in 0..5 {
        desired.insert(agents(i, false), dests(3)).unwrap();
    }
    let mut core = agent(&world);
    // The save ahead, the first round (two adds, a save, four real
    // servers), the second round's first add; its second add fails.
    world.lock().unwrap().crash_in = Some(1 + 2 + 1 + 4 + 1);
    let mut table = Table(Arc::clone(&world));
    let _ = core.sync(&mut table, &desired, Verify::Services);
    assert!(world.lock().unwrap().crashed);
    for i in [0, 1, 2] {
        // Acknowledged, or claimed with its outcome unknown.
        assert!(core.ledger.get(&key(i)).is_some(), "{i}");
    }
    assert_eq!(core.ledger.get(&key(2)), Some(Ownership::Owned));
    assert!(matches!(
        core.ledger.get(&key(3)),
        Some(Ownership::Claiming(_))
    ));
    // The third round never went out: nothing to own there.
    assert_eq!(core.ledger.get(&key(4)), None);
}

/// A world where an agent desiring one service was killed after saving
/// its claim, before the add went out.
fn killed_after_the_claim() -> (Arc<Mutex<World>>, DesiredState) {
    let world = Arc::new(Mutex::new(World::default()));
    let mut desired = DesiredState::new();
    desired.insert(agents(0, false), dests(1)).unwrap();
    let mut core = agent(&world);
    world.lock().unwrap().crash_in = Some(1);
    sync(&mut core, &world, &mut desired, 0, false);
    assert!(std::mem::take(&mut world.lock().unwrap().crashed));
    assert!(matches!(
        world.lock().unwrap().saved.get(&key(0)),
        Some(Ownership::Claiming(_))
    ));
    (world, desired)
}

#[test]
fn a_claim_found_with_other_settings_is_a_conflict_with_its_reason() {
    let (world, desired) = killed_after_the_claim();
    // Another tool takes the key meanwhile.
    let theirs = VirtualServer::new(key(0)).with_scheduler(Scheduler::from_name("sh"));
    world.lock().unwrap().table.insert(
        key(0),
        Entry {
            vs: theirs.clone(),
            dests: BTreeMap::new(),
            by_agent: false,
        },
    );
    let mut core = agent(&world);
    let report = core
        .sync(&mut Table(Arc::clone(&world)), &desired, Verify::Services)
        .unwrap();
    assert_eq!(report.conflicts.len(), 1);
    assert_eq!(report.conflicts[0].found, Some(theirs));
    assert_eq!(
        report.conflicts[0].reason,
        super::ConflictReason::ClaimedWithOtherSettings {
            claimed: agents(0, false)
        }
    );
    assert_eq!(report.writes_sent, 0);
    assert!(core.ledger.is_empty() && world.lock().unwrap().saved.is_empty());
}

#[test]
fn a_claim_found_with_the_claimed_settings_is_taken_as_the_syncers_own() {
    // The one window the ledger cannot tell apart, as documented: another
    // tool made the very service the syncer had claimed.
    let (world, desired) = killed_after_the_claim();
    world.lock().unwrap().table.insert(
        key(0),
        Entry {
            vs: agents(0, false),
            dests: BTreeMap::new(),
            by_agent: false,
        },
    );
    let mut core = agent(&world);
    let report = core
        .sync(&mut Table(Arc::clone(&world)), &desired, Verify::Services)
        .unwrap();
    assert!(report.conflicts.is_empty(), "{report:?}");
    assert_eq!(core.ledger.get(&key(0)), Some(Ownership::Owned));
}

#[test]
fn a_failed_read_leaves_what_the_syncer_remembered_as_it_was() {
    let world = Arc::new(Mutex::new(World::default()));
    let mut desired = DesiredState::new();
    desired.insert(agents(0, false), dests(1)).unwrap();
    let mut core = agent(&world);
    let mut table = Table(Arc::clone(&world));
    assert!(
        core.sync(&mut table, &desired, Verify::Services)
            .unwrap()
            .is_ok()
    );
    // Changed behind the syncer's back: another scheduler, another real
    // server; then reading its real servers fails once.
    {
        let mut w = world.lock().unwrap();
        let e = w.table.get_mut(&key(0)).unwrap();
        e.vs = agents(0, true);
        e.dests = dests(2).into_iter().map(|rs| (rs.addr, rs)).collect();
        w.fail_reads = vec![key(0)];
    }
    assert!(core.sync(&mut table, &desired, Verify::Services).is_err());
    assert_eq!(core.memory.get(&key(0)).unwrap().service, agents(0, false));
    world.lock().unwrap().fail_reads.clear();
    // The next sync reads it again and repairs both.
    let r = core.sync(&mut table, &desired, Verify::Services).unwrap();
    assert!(r.is_ok(), "{r:?}");
    let w = world.lock().unwrap();
    assert_eq!(w.table[&key(0)].vs, agents(0, false));
    let have: Vec<RealServer> = w.table[&key(0)].dests.values().copied().collect();
    assert_eq!(have, dests(1));
}

#[test]
fn a_failure_after_the_writes_is_in_the_report_not_an_err() {
    let world = Arc::new(Mutex::new(World::default()));
    let mut desired = DesiredState::new();
    desired.insert(agents(0, false), dests(1)).unwrap();
    desired.insert(agents(1, false), dests(1)).unwrap();
    let mut core = agent(&world);
    let mut table = Table(Arc::clone(&world));
    assert!(
        core.sync(&mut table, &desired, Verify::Services)
            .unwrap()
            .is_ok()
    );
    // Deleted behind its back; the trusting sync's real-server add fails,
    // and the re-read to heal it fails too.
    world.lock().unwrap().table.remove(&key(0));
    world.lock().unwrap().fail_lookups_after_writes = true;
    world.lock().unwrap().writes = 0;
    desired.upsert(agents(0, false), dests(3)).unwrap();
    desired.upsert(agents(1, false), dests(3)).unwrap();
    let r = core.sync(&mut table, &desired, Verify::None).unwrap();
    assert_eq!(r.destinations.added, 1, "{r:?}");
    assert_eq!(r.retried.len(), 1, "{r:?}");
    assert_eq!(r.after_writes.len(), 1, "{r:?}");
    assert!(!r.is_ok());
    // The next sync (reads working) recreates it.
    world.lock().unwrap().fail_lookups_after_writes = false;
    let r = core.sync(&mut table, &desired, Verify::None).unwrap();
    assert!(r.is_ok(), "{r:?}");
    assert_eq!(world.lock().unwrap().table[&key(0)].dests.len(), 2);
}

#[test]
fn only_acknowledged_deletes_of_udp_and_sctp_are_cleaned_after_the_writes() {
    let world = Arc::new(Mutex::new(World::default()));
    let udp = ServiceKey::udp(SocketAddr::from(([10, 96, 1, 1], 53)));
    let sctp = ServiceKey::sctp(SocketAddr::from(([10, 96, 1, 2], 3868)));
    let mut desired = DesiredState::new();
    desired.insert(VirtualServer::new(udp), dests(3)).unwrap();
    desired.insert(VirtualServer::new(sctp), dests(1)).unwrap();
    desired.insert(agents(0, false), dests(3)).unwrap();
    let mut core = agent(&world);
    core.options.conntrack_cleanup = true;
    let mut table = Table(Arc::clone(&world));
    let r = core.sync(&mut table, &desired, Verify::Full).unwrap();
    assert!(r.is_ok() && r.conntrack.is_none(), "nothing deleted: {r:?}");

    // A UDP real server leaves, the SCTP service and a TCP real server go,
    // and one UDP real server was deleted behind the syncer's back (its
    // delete is not acknowledged: nothing of it to clean).
    world
        .lock()
        .unwrap()
        .table
        .get_mut(&udp)
        .unwrap()
        .dests
        .remove(&server(1).addr);
    desired.upsert(VirtualServer::new(udp), dests(0)).unwrap();
    desired.remove(&sctp).unwrap();
    desired.upsert(agents(0, false), dests(1)).unwrap();
    let r = core.sync(&mut table, &desired, Verify::None).unwrap();
    let cleanup = r.conntrack.as_ref().expect("a cleanup");
    let want = vec![
        Filter::real_server(&udp, server(0).addr).unwrap(),
        Filter::service(&sctp).unwrap(),
    ];
    assert_eq!(cleanup.filters, want, "{r:?}");
    assert_eq!(world.lock().unwrap().flows, want);
    assert!(r.is_ok(), "{r:?}");

    // Nothing pending: the next sync cleans nothing.
    let r = core.sync(&mut table, &desired, Verify::Full).unwrap();
    assert!(r.conntrack.is_none(), "{r:?}");
}
